/*
 * ipc.h - the CUDA IPC path of the stream-ordered collectives: when every rank of a comm is
 * on one host and can map the others' device memory, all-reduce, reduce-scatter, all-gather,
 * broadcast and reduce on device buffers move device to device, and the reduce-copy kernels
 * read straight out of the peers' memory. stream.c drives it (its worker runs the pieces);
 * this file holds the comm's IPC state, the decision, the layout of a piece in the scratch
 * slots and the per-piece work on the device. The protocol and why it is safe are at the top
 * of ipc.c.
 */
#ifndef COLL_CUDA_IPC_H
#define COLL_CUDA_IPC_H

#include "stream.h"

/* Slots of the scratch: a piece j uses slot j % COLL_IPC_SLOTS. At least 2, which the
 * protocol needs (ipc.c). */
#define COLL_IPC_SLOTS 4

/* One comm's IPC state, made by coll__ipc_setup and freed by coll__ipc_fini. */
struct coll_ipc {
    int rank, nranks;
    size_t slot_bytes; /* every rank's smallest, so that all cut pieces alike */
    uint8_t *mine;     /* this rank's scratch (cudaMalloc): COLL_IPC_SLOTS slots */
    uint8_t **base;    /* [nranks]: each rank's scratch as this process addresses it */
    bool *opened;      /* [nranks]: base[r] came from cudaIpcOpenMemHandle */
    void *stream;      /* non-blocking stream of the comm's device: kernels and gathers */
    void *event;       /* recorded on it to wait for what was queued there */
    /* this rank's part, made ahead by coll__ipc_prepare */
    bool capable;
    struct coll_cuda_ipc_handle handle; /* of mine */
    char why[256];                      /* !capable: what stopped it */
};

/* Whether a stream-ordered call of this collective and op can go through IPC: the five
 * collectives, with every op (AVG's division is the avg kernels', see coll__ipc_compute).
 * The same answer on every rank, since every rank makes the same call. */
COLL_INTERNAL bool coll__ipc_eligible(enum coll_coll coll, coll_op_t op);

/*
 * Decide, with every rank of comm (all reach the same first eligible call, so this blocking
 * exchange is matched): each rank's scratch, allocated and exported by coll__ipc_prepare
 * (prep) or here, goes into an all-gather (host,
 * pid, device, capability, COLL_CUDA_IPC, handle); IPC is on when every rank is capable, on
 * this host, and none set COLL_CUDA_IPC=0. Then each maps the others' scratch, and a second
 * exchange checks that all did. Every rank reaches the same answer:
 *   - COLL_SUCCESS, *ipc_p set: IPC on;
 *   - COLL_SUCCESS, *ipc_p NULL: staging;
 *   - COLL_INVALID_USAGE, *ipc_p NULL: IPC is off but a rank set COLL_CUDA_IPC=1, so every
 *     rank refuses the eligible calls; why says what stopped IPC (comm's message untouched);
 *   - another failure: the exchange itself failed (comm's message says why).
 * Whatever this rank allocated for a decision against IPC is left in *unused_p, for
 * coll__ipc_fini once no stream can be waiting (cudaFree waits for the whole device).
 * Called on the worker thread with the comm's device current.
 */
COLL_INTERNAL coll_status_t coll__ipc_setup(struct coll_comm *comm, struct coll_ipc *prep,
                                            struct coll_ipc **ipc_p, struct coll_ipc **unused_p,
                                            char *why, size_t whylen);

/*
 * This rank's part of the decision, made ahead by the thread of the comm's first
 * stream-ordered call before anything of the comm is queued, with the comm's device
 * current: the scratch (cudaMalloc, which may wait for the device's streams: on the worker,
 * a stream of ours could be waiting for it), its handle, the stream and the event; or why
 * this rank cannot take part. coll__ipc_setup takes it over (prep; NULL: it makes its own
 * part there). NULL here when IPC cannot apply anyway (COLL_CUDA_IPC=0, several hosts) or
 * out of memory.
 */
COLL_INTERNAL struct coll_ipc *coll__ipc_prepare(struct coll_comm *comm);

/* Close the peers' mappings, free the scratch and the stream. The caller makes sure no
 * stream of this process still uses them (stream.c: the worker has stopped, the user
 * streams have drained). NULL is ignored. */
COLL_INTERNAL void coll__ipc_fini(struct coll_ipc *ipc);

/* ---- layout (pure) ------------------------------------------------------------------- */

/*
 * A slot holds the piece's input ("in": mult x n elements, one block of n per rank for
 * reduce-scatter) followed by its output ("out": n elements). Elements of count per piece:
 * the most that fit slot_bytes, a multiple of 16 (so that the regions stay 16-byte aligned
 * for the kernels' vector loads) unless the whole count fits; 0 when not even one does.
 */
COLL_INTERNAL size_t coll__ipc_piece_elems(enum coll_coll coll, int nranks, size_t count,
                                           size_t esize, size_t slot_bytes);

/* Rank r's slice [*lo_p, *hi_p) of a piece of n elements, which it reduces for everyone
 * (all-reduce, reduce): contiguous, in rank order, 16-element aligned, maybe empty. */
COLL_INTERNAL void coll__ipc_slice(size_t n, int nranks, int r, size_t *lo_p, size_t *hi_p);

/*
 * The copies of piece j (elements [j * piece, j * piece + n) of count) for this rank: in
 * (out = false) from sendbuf into its own slot's "in" region; out (true) from the "out"
 * regions of the ranks that hold the result into recvbuf; each row names the rank whose
 * scratch it reads or writes. rows has room for nranks entries; returns how many it wrote.
 */
COLL_INTERNAL int coll__ipc_rows(enum coll_coll coll, uint8_t dir, int rank, int nranks,
                                 int root, size_t count, size_t esize, size_t piece, size_t j,
                                 bool out, struct coll_stream_row *rows);

/* ---- the work of a piece on the device ----------------------------------------------- */

/*
 * Queue on ipc->stream this rank's part of a piece of n elements (of at most piece, which
 * fixes the layout) in slot `slot`: the reduce-copy of its slice (all-reduce, reduce) or of
 * its block (reduce-scatter) from every rank's "in" region into its own "out" region,
 * folding the ranks in rank order (AVG: that sum divided by the comm size, once per
 * element, as the host's coll__reduce_div ends its sum); a copy from "in" to "out"
 * (all-gather, and broadcast at the root); nothing otherwise.
 */
COLL_INTERNAL coll_status_t coll__ipc_compute(struct coll_comm *comm, struct coll_ipc *ipc,
                                              enum coll_coll coll, int root, size_t piece,
                                              size_t n, size_t slot, coll_dtype_t dtype,
                                              coll_op_t op);

#endif /* COLL_CUDA_IPC_H */
