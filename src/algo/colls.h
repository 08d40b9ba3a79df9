/*
 * colls.h - the collectives: one list (COLL_COLLS) that makes both the enum and the table
 * of what each is (coll__colls, src/algo/colls.c).
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

/* The collectives, one row each: X(ID, fields of struct coll_coll_desc below). The enum
 * (COLL_COLL_ID, in this order) and the table coll__colls are both made from this list, so
 * a collective is added in one place. The values travel in call signatures
 * (src/base/wire.h): append, never reorder. */
#define COLL_COLLS(X)                                                                             \
    X(ALLREDUCE, .name = "allreduce", .api = "coll_allreduce", .nccl = "ncclAllReduce",           \
      .perf = "all_reduce_perf", .reduces = true, .send_blocks = COLL_BLOCKS_ONE,                 \
      .recv_blocks = COLL_BLOCKS_ONE, .stream = true, .bus = COLL_BUS_ALLREDUCE)                  \
    X(BROADCAST, .name = "broadcast", .alias = {"bcast"}, .api = "coll_broadcast",                \
      .nccl = "ncclBroadcast", .perf = "broadcast_perf", .root = COLL_ROOT_SOURCE,                \
      .send_blocks = COLL_BLOCKS_ONE, .recv_blocks = COLL_BLOCKS_ONE, .stream = true,             \
      .bus = COLL_BUS_ONE)                                                                        \
    X(REDUCE, .name = "reduce", .api = "coll_reduce", .nccl = "ncclReduce",                       \
      .perf = "reduce_perf", .reduces = true, .root = COLL_ROOT_SINK,                             \
      .send_blocks = COLL_BLOCKS_ONE, .recv_blocks = COLL_BLOCKS_ONE, .stream = true,             \
      .bus = COLL_BUS_ONE)                                                                        \
    X(ALLGATHER, .name = "allgather", .api = "coll_allgather", .nccl = "ncclAllGather",           \
      .perf = "all_gather_perf", .send_blocks = COLL_BLOCKS_ONE,                                  \
      .recv_blocks = COLL_BLOCKS_N, .inplace = COLL_AT_RANK, .stream = true,                      \
      .bus = COLL_BUS_SPREAD)                                                                     \
    X(REDUCE_SCATTER, .name = "reducescatter", .alias = {"reduce_scatter", "reduce-scatter"},     \
      .api = "coll_reduce_scatter", .nccl = "ncclReduceScatter",                                  \
      .perf = "reduce_scatter_perf", .reduces = true, .send_blocks = COLL_BLOCKS_N,               \
      .recv_blocks = COLL_BLOCKS_ONE, .inplace = COLL_AT_RANK, .stream = true,                    \
      .bus = COLL_BUS_SPREAD)                                                                     \
    X(ALLTOALL, .name = "alltoall", .api = "coll_alltoall", .nccl = "ncclAlltoAll",               \
      .perf = "alltoall_perf", .send_blocks = COLL_BLOCKS_N,                                      \
      .recv_blocks = COLL_BLOCKS_N, .stream = true, .bus = COLL_BUS_SPREAD)                       \
    X(GATHER, .name = "gather", .api = "coll_gather", .nccl = "ncclGather",                       \
      .perf = "gather_perf", .root = COLL_ROOT_SINK, .send_blocks = COLL_BLOCKS_ONE,              \
      .recv_blocks = COLL_BLOCKS_N, .inplace = COLL_AT_ROOT, .bus = COLL_BUS_SPREAD)              \
    X(SCATTER, .name = "scatter", .api = "coll_scatter", .nccl = "ncclScatter",                   \
      .perf = "scatter_perf", .root = COLL_ROOT_SOURCE, .send_blocks = COLL_BLOCKS_N,             \
      .recv_blocks = COLL_BLOCKS_ONE, .inplace = COLL_AT_ROOT, .bus = COLL_BUS_SPREAD)            \
    /* NCCL has no barrier call: no NCCL name */                                                  \
    X(BARRIER, .name = "barrier", .api = "coll_barrier", .perf = "barrier_perf",                  \
      .bus = COLL_BUS_ZERO)                                                                       \
    /* point-to-point: one send or one receive; no schedule builder */                            \
    X(SENDRECV, .name = "sendrecv", .api = "coll_send", .nccl = "ncclSend",                       \
      .nccl_recv = "ncclRecv", .perf = "sendrecv_perf", .p2p = true,                              \
      .send_blocks = COLL_BLOCKS_ONE, .recv_blocks = COLL_BLOCKS_ONE, .stream = true,             \
      .bus = COLL_BUS_ONE)

/* Collectives (the builders' view; the public calls map onto these). */
enum coll_coll {
#define COLL_COLL_ENUM(id, ...) COLL_COLL_##id,
    COLL_COLLS(COLL_COLL_ENUM)
#undef COLL_COLL_ENUM
    COLL_NUM_COLLS
};
_Static_assert(COLL_COLL_ALLREDUCE == 0 && COLL_COLL_SENDRECV == 9,
               "collectives are appended to COLL_COLLS, never reordered");

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

/* Does d move data (false: a barrier, whose count and dtype mean nothing)? */
static inline bool coll__desc_moves_data(const struct coll_coll_desc *d)
{
    return d->send_blocks != COLL_BLOCKS_NONE || d->recv_blocks != COLL_BLOCKS_NONE;
}

/* nccl-tests' bus bandwidth factor of d on n ranks: busbw = algbw x this. */
static inline double coll__bus_factor(const struct coll_coll_desc *d, int n)
{
    switch (d->bus) {
    case COLL_BUS_ONE:
        return 1.0;
    case COLL_BUS_SPREAD:
        return (double)(n - 1) / n;
    case COLL_BUS_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    default:
        return 0.0;
    }
}

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
