/*
 * stream.h - the stream path (path.h's coll__path_stream): stream-ordered collectives
 * (coll_allreduce_stream, ...) queued on their CUDA streams. The hooks the paths' set-up and
 * the API's groups use, and the pure arithmetic of pieces, copies and stream order that
 * stream.c runs and tests/test_stream.c checks. The mechanism is described at the top of
 * stream.c and in docs/kernels.md ("Device buffers").
 */
#ifndef COLL_CUDA_STREAM_H
#define COLL_CUDA_STREAM_H

#include "../algo/colls.h"
#include "../cuda/cuda.h"

/* ---- hooks --------------------------------------------------------------------------- */

/* coll__path_comm_init: the path's slot of comm, with the calling thread's CUDA device (-1
 * without CUDA). A process that has not loaded a CUDA runtime yet is not made to: the
 * comm's first stream-ordered call decides then, from its thread's device. */
COLL_INTERNAL coll_status_t coll__stream_comm_init(struct coll_comm *comm);
/* coll__path_comm_fini, first thing when a comm goes: let the worker run what is queued (at
 * once with an error on an aborted comm) and stop, wait (within COLL_TIMEOUT_MS) until the
 * streams are done with the staging memory, and free it and the slot. Idempotent. */
COLL_INTERNAL void coll__stream_comm_fini(struct coll_comm *comm);
/* api.c, at the outermost coll_group_end: issue the stream-ordered calls recorded in this
 * thread's group (discard them when discard is set: the group failed its checks). nhost is
 * the number of host calls in the same group; a group may not mix the two kinds. Returns
 * the first failure of a recorded call, or of issuing. */
COLL_INTERNAL coll_status_t coll__stream_group_end(bool discard, size_t nhost);
/* The API's checks refused a stream-ordered call with st inside this thread's group: the
 * group fails with it at its end. */
COLL_INTERNAL void coll__stream_group_fail(coll_status_t st);
/* The comm's CUDA device (-1: none; below -1: not decided yet). */
COLL_INTERNAL int coll__stream_device(const struct coll_comm *comm);
/* The comm decided for CUDA IPC (its eligible calls go device to device). */
COLL_INTERNAL bool coll__stream_ipc_known(const struct coll_comm *comm);

/* ---- pieces and copies (pure) -------------------------------------------------------- */

/* A stream-ordered call's collective is its row of the collectives' table (src/algo/colls.h:
 * its buffers' block shapes, root and in-place block); a send or a receive is
 * COLL_COLL_SENDRECV with dir COLL_STEP_SEND or COLL_STEP_RECV (ignored for collectives). */

/* Staging elements per element of count: nranks for the collectives whose buffers hold
 * one block per rank (all-gather, reduce-scatter, all-to-all), 1 otherwise. */
COLL_INTERNAL size_t coll__stream_mult(enum coll_coll coll, int nranks);

/* Elements of count per piece: as many as fit piece_bytes of staging (mult * esize bytes
 * each), at most count; 0 when not even one fits. Every rank computes the same numbers from
 * the same (count, dtype, nranks, COLL_CUDA_STAGING_BYTES), which is what makes the pieces of
 * two ranks match. */
COLL_INTERNAL size_t coll__stream_piece_elems(enum coll_coll coll, int nranks, size_t count,
                                              size_t esize, size_t piece_bytes);

/* One contiguous copy of a piece: bytes at user buffer + user_off <-> slot + slot_off, in
 * the slot of rank peer (CUDA IPC reads other ranks' slots; staging has one slot: 0). */
struct coll_stream_row {
    size_t user_off, slot_off, bytes;
    int peer;
};

/* The copies of piece j (elements [j * piece, j * piece + n) of count) into the slot before
 * the host collective (out = false; from sendbuf) or out of it after (out = true; into
 * recvbuf), for this rank. rows has room for nranks entries; returns how many it wrote
 * (0: nothing to copy that way, e.g. a send's output or a non-root's broadcast input). The
 * host collective runs on the slot with count n, laid out as coll__stream_slot_args says. */
COLL_INTERNAL int coll__stream_rows(enum coll_coll coll, uint8_t dir, int rank, int nranks,
                                    int root, size_t count, size_t esize, size_t piece, size_t j,
                                    bool out, struct coll_stream_row *rows);

/* Where, in a slot holding piece j's n elements, the host collective reads and writes. */
COLL_INTERNAL void coll__stream_slot_args(enum coll_coll coll, int rank, size_t n,
                                          size_t esize, size_t *send_off_p, size_t *recv_off_p);

/* What a stream gets, in order, for an op of npieces pieces through nslots slots:
 * D2H(0) .. D2H(nslots-1), WAIT(0), H2D(0), D2H(nslots), WAIT(1), H2D(1), ... Piece j uses
 * slot j % nslots: its D2H comes after the WAIT and H2D of piece j - nslots, so a slot is
 * refilled only once the collective that used it is done and its result copied out. */
enum coll_stream_step_kind { COLL_SSTEP_D2H, COLL_SSTEP_WAIT, COLL_SSTEP_H2D };
struct coll_stream_step {
    enum coll_stream_step_kind kind;
    size_t piece;
};
/* Fills out[0 .. 3 * npieces) and returns 3 * npieces. nslots >= 1. */
COLL_INTERNAL size_t coll__stream_order(size_t npieces, size_t nslots,
                                        struct coll_stream_step *out);

/* Whether stream waits go through cuStreamWaitValue32 on page-locked words (the runtime or
 * driver has it and the words could be made), not host functions. The CUDA IPC path needs
 * it: on a GPU, a stream held by a blocking host function holds back the worker's copies
 * and kernels on other streams, which are what the host function waits for. */
COLL_INTERNAL bool coll__stream_waits_on_words(void);

#endif /* COLL_CUDA_STREAM_H */
