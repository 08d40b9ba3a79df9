/*
 * colls.h - the collectives: one enum and one table of what each is (src/algo/colls.c).
 *
 * Everything that needs a fact of a collective (its names, whether it takes an op or a
 * root, which buffers a rank passes and how large they are, where the smaller buffer sits
 * in the larger when a call is in place) reads its row here instead of switching on the
 * enum: the argument checker (src/core/check.c), agreement, the executor, the paths, the
 * NCCL library, collbench, collviz and collsim. docs/design.md, "Adding a collective", lists
 * the files a new collective touches.
 *
 * Shapes, in elements, for count as the public call takes it (the smaller buffer's):
 *   send_blocks, recv_blocks  1: the buffer holds count; N: nranks x count (block r is
 *                             rank r's); 0: no such buffer
 *   in place                  the smaller buffer is block `inplace` of the larger one
 *                             (COLL_AT_RANK: this rank's block, COLL_AT_ROOT: the root's),
 *                             or the same memory when both are the same size
 */
#ifndef COLL_COLLS_H
#define COLL_COLLS_H

#include "../base/base.h"

/* Collectives (the builders' view; the public calls map onto these). The values travel in
 * call signatures (src/base/wire.h): append, never renumber. */
enum coll_coll {
    COLL_COLL_ALLREDUCE = 0,
    COLL_COLL_BROADCAST,
    COLL_COLL_REDUCE,
    COLL_COLL_ALLGATHER,
    COLL_COLL_REDUCE_SCATTER,
    COLL_COLL_ALLTOALL,
    COLL_COLL_GATHER,
    COLL_COLL_SCATTER,
    COLL_COLL_BARRIER,
    COLL_COLL_SENDRECV, /* point-to-point: one send or one receive, no builder */
    COLL_NUM_COLLS
};

/* What the root does: its data goes out to every rank (broadcast, scatter), or every
 * rank's data comes in to it (reduce, gather). */
enum coll_root_kind { COLL_ROOT_NONE = 0, COLL_ROOT_SOURCE, COLL_ROOT_SINK };

/* How big a buffer is, in units of count (see the file comment). */
enum coll_blocks { COLL_BLOCKS_NONE = 0, COLL_BLOCKS_ONE, COLL_BLOCKS_N };

/* In place: where the smaller buffer sits in the larger. */
enum coll_inplace { COLL_AT_ZERO = 0, COLL_AT_RANK, COLL_AT_ROOT };

/* nccl-tests' bus bandwidth factor (algbw x factor), as its programs define it. */
enum coll_bus { COLL_BUS_ZERO = 0, COLL_BUS_ONE, COLL_BUS_SPREAD, COLL_BUS_ALLREDUCE };

struct coll_coll_desc {
    enum coll_coll coll;   /* its own index: the table is checked against the enum */
    const char *name;      /* "allreduce": COLL_ALGO, traces, messages, collbench, collviz */
    const char *alias[2];  /* other spellings the tools and COLL_ALGO accept, or NULL */
    const char *api;       /* the blocking public call, "coll_allreduce" */
    const char *nccl;      /* NCCL's call, "ncclAllReduce"; point-to-point: the send's */
    const char *nccl_recv; /* point-to-point: NCCL's receive ("ncclRecv"); else NULL */
    const char *perf;      /* nccl-tests' program, "all_reduce_perf" */
    bool reduces;          /* takes an op and reduces with it */
    uint8_t root;          /* enum coll_root_kind */
    bool p2p;              /* one send or one receive to a peer: no schedule builder */
    uint8_t send_blocks;   /* enum coll_blocks */
    uint8_t recv_blocks;   /* enum coll_blocks */
    uint8_t inplace;       /* enum coll_inplace */
    bool stream;           /* has a stream-ordered form (coll_*_stream) */
    uint8_t bus;           /* enum coll_bus */
};

/* The table, indexed by enum coll_coll; coll__coll_desc(c) is NULL outside it. */
COLL_INTERNAL extern const struct coll_coll_desc coll__colls[COLL_NUM_COLLS];
COLL_INTERNAL const struct coll_coll_desc *coll__coll_desc(enum coll_coll c);
/* "allreduce", "broadcast", ...; "unknown" outside the table. */
COLL_INTERNAL const char *coll__coll_name(enum coll_coll c);
/* The collective whose name or alias is the len bytes at name (not NUL-terminated),
 * ignoring case. */
COLL_INTERNAL bool coll__coll_from_name(const char *name, size_t len, enum coll_coll *c_p);

/* Elements of a buffer of b (enum coll_blocks) for this count on nranks ranks. */
static inline size_t coll__blocks_count(uint8_t b, size_t count, int nranks)
{
    return b == COLL_BLOCKS_N ? count * (size_t)nranks : b == COLL_BLOCKS_ONE ? count : 0;
}

/* Does rank pass a send (a receive) buffer to d's call with this root? dir is the
 * point-to-point direction, a step kind of schedule.h (COLL_STEP_SEND 0, COLL_STEP_RECV 1,
 * COLL_STEP_COPY both: a send to oneself paired with its receive), ignored for collectives. */
static inline bool coll__desc_uses_send(const struct coll_coll_desc *d, int rank, int root,
                                        uint8_t dir)
{
    if (d->p2p)
        return dir != 1;
    return d->send_blocks != COLL_BLOCKS_NONE && (d->root != COLL_ROOT_SOURCE || rank == root);
}
static inline bool coll__desc_uses_recv(const struct coll_coll_desc *d, int rank, int root,
                                        uint8_t dir)
{
    if (d->p2p)
        return dir != 0;
    return d->recv_blocks != COLL_BLOCKS_NONE && (d->root != COLL_ROOT_SINK || rank == root);
}

#endif /* COLL_COLLS_H */
