/*
 * schedule.h - an algorithm is a schedule: per rank, a list of steps (send, recv, reduce,
 * copy) over slices of three buffers, each step naming the earlier steps it waits for.
 *
 * Builders (src/algo/<name>.c) are pure functions of struct coll_algo_args: no socket, no
 * clock, no global state. The executor (src/core/exec.c) runs one rank's schedule over the
 * transports; the simulator (tests/sim.c) runs every rank's schedule in one process; the
 * cost model prices schedules and collviz draws them. All read the same steps.
 *
 * Matching: the k-th SEND from rank a to rank b pairs with the k-th RECV from a in b's
 * schedule, and both have the same element count. Executors post sends to one peer in step
 * order and receives from one peer in step order, so that matching holds over a FIFO link.
 *
 * Buffers: SEND is the user's send buffer, RECV the user's receive buffer, SCRATCH memory
 * the executor provides (scratch_count elements of dtype). SEND and RECV may be the same
 * memory (in place): a builder never reads SEND[i] after it has written RECV[i].
 * A SEND step is complete when its source may be overwritten; a RECV when its data is in.
 */
#ifndef COLL_SCHEDULE_H
#define COLL_SCHEDULE_H

#include "../base/base.h"
#include "colls.h"

/* The collectives, enum coll_coll and the table of what each is, are colls.h's. */

enum coll_buf { COLL_BUF_SEND = 0, COLL_BUF_RECV = 1, COLL_BUF_SCRATCH = 2, COLL_NUM_BUFS };
enum coll_step_kind {
    COLL_STEP_SEND = 0, /* src -> peer */
    COLL_STEP_RECV,     /* peer -> dst */
    COLL_STEP_REDUCE,   /* dst = src op src2 (elementwise; dst may be src or src2 exactly) */
    COLL_STEP_COPY,     /* dst = src (no-op when they are the same memory) */
};
/* colls.h names the point-to-point directions by these values */
_Static_assert(COLL_STEP_SEND == 0 && COLL_STEP_RECV == 1, "colls.h's p2p directions");

struct coll_slice {
    uint8_t buf;      /* enum coll_buf */
    size_t off;       /* in elements */
    size_t count;     /* in elements */
};

#define COLL_MAX_DEPS 4
struct coll_step {
    uint8_t kind;                  /* enum coll_step_kind */
    int32_t peer;                  /* SEND/RECV only, else -1 */
    struct coll_slice src, src2, dst;
    uint32_t ndeps;
    uint32_t deps[COLL_MAX_DEPS];  /* indices of earlier steps of this schedule */
};

struct coll_schedule {
    int32_t nranks, rank;
    coll_dtype_t dtype;
    size_t elem_size;
    size_t buf_count[COLL_NUM_BUFS]; /* elements each buffer must hold on this rank */
    uint32_t nsteps, cap;
    struct coll_step *steps;
    const struct coll_algo *algo;    /* who built it */
};

struct coll_algo_args {
    enum coll_coll coll;
    int32_t nranks, rank, root;    /* root: broadcast/reduce/gather/scatter, else 0 */
    size_t count;                  /* NCCL's count for the collective, in elements */
    coll_dtype_t dtype;
    size_t elem_size;
    size_t chunk_count;            /* pipelining unit in elements, >= 1 */
    /* Where the ranks are: hosts[r] in 0 .. nhosts-1 (NULL and 0: unknown or one host).
     * Only the hierarchical builders read it. */
    const int32_t *hosts;
    int32_t nhosts;
};

struct coll_algo {
    const char *name;              /* "ring" */
    const char *desc;              /* one line for --explain, collviz and the docs */
    uint32_t colls;                /* bitmask of 1u << enum coll_coll */
    /* May this algorithm run these arguments? (e.g. nranks limits). NULL: always. */
    bool (*applicable)(const struct coll_algo_args *a);
    /* Append this rank's steps to out (already initialised by coll__sched_init). */
    coll_status_t (*build)(const struct coll_algo_args *a, struct coll_schedule *out);
};

/* The table, NULL-terminated, in src/algo/algos.c. */
COLL_INTERNAL extern const struct coll_algo *const coll__algos[];
COLL_INTERNAL const struct coll_algo *coll__algo_find(const char *name);

/* Builders' helpers (src/algo/schedule.c). */
COLL_INTERNAL void coll__sched_init(struct coll_schedule *s, const struct coll_algo_args *a);
COLL_INTERNAL void coll__sched_free(struct coll_schedule *s);
/* Append a step; returns its index through idx_p. Grows the array; COLL_SYSTEM_ERROR
 * (ENOMEM) on failure. deps may be NULL when ndeps == 0. buf_count is grown to cover every
 * slice the step touches. */
COLL_INTERNAL coll_status_t coll__sched_add(struct coll_schedule *s, uint8_t kind,
                                           int32_t peer, struct coll_slice src,
                                           struct coll_slice src2, struct coll_slice dst,
                                           uint32_t ndeps, const uint32_t *deps,
                                           uint32_t *idx_p);
/* Shorthands over coll__sched_add. */
COLL_INTERNAL coll_status_t coll__sched_send(struct coll_schedule *s, int32_t peer,
                                            struct coll_slice src, uint32_t ndeps,
                                            const uint32_t *deps, uint32_t *idx_p);
COLL_INTERNAL coll_status_t coll__sched_recv(struct coll_schedule *s, int32_t peer,
                                            struct coll_slice dst, uint32_t ndeps,
                                            const uint32_t *deps, uint32_t *idx_p);
COLL_INTERNAL coll_status_t coll__sched_reduce(struct coll_schedule *s, struct coll_slice dst,
                                              struct coll_slice a, struct coll_slice b,
                                              uint32_t ndeps, const uint32_t *deps,
                                              uint32_t *idx_p);
COLL_INTERNAL coll_status_t coll__sched_copy(struct coll_schedule *s, struct coll_slice dst,
                                            struct coll_slice src, uint32_t ndeps,
                                            const uint32_t *deps, uint32_t *idx_p);
static inline struct coll_slice coll__slice(uint8_t buf, size_t off, size_t count)
{
    struct coll_slice sl = {buf, off, count};
    return sl;
}
/* The two cases every all-reduce, broadcast and reduce builder shares: no elements (an empty
 * schedule) and one rank (its own data is the result: one copy from SEND to RECV). Returns
 * true when s is complete, with the status in *st_p. */
COLL_INTERNAL bool coll__sched_trivial(const struct coll_algo_args *a, struct coll_schedule *s,
                                       coll_status_t *st_p);
/* Structural check: deps point backwards, peers in range and not self, slices within
 * buf_count, counts > 0. COLL_INTERNAL_ERROR with a message naming the step otherwise. */
COLL_INTERNAL coll_status_t coll__sched_validate(const struct coll_schedule *s);

/* ---- Shared by the builders (added with the builders; appended, nothing above changed) -- */

/* COLL_INVALID_ARGUMENT, with a message naming the argument, unless algo can build a: a->coll
 * in algo->colls, 0 <= rank < nranks, 0 <= root < nranks, chunk_count >= 1, elem_size > 0. */
COLL_INTERNAL coll_status_t coll__algo_check(const struct coll_algo *algo,
                                             const struct coll_algo_args *a);

/* The pipelined tree engine (src/algo/tree.c), used by chain.c, binomial.c and tree.c: one
 * rank's part of moving the range [off, off + count) of the buffers along one tree, chunk by
 * chunk. Data goes up (children -> parent) for reduce, down (parent -> children) for
 * broadcast, up then down for all-reduce, with chunk k going down while chunk k+1 goes up.
 * Receives from children land in scratch slots (COLL_TREE_SLOTS chunks in flight per child,
 * so scratch is slots x children x chunk); reuse of a slot waits for its last reader. */
#define COLL_TREE_MAX_CHILDREN 32
#define COLL_TREE_SLOTS 4
enum coll_tree_mode { COLL_TREE_BCAST = 0, COLL_TREE_REDUCE, COLL_TREE_ALLREDUCE };

struct coll_tree_part {
    /* set by the caller before coll__tree_part_init */
    int32_t parent;                           /* -1 at the root */
    uint32_t nchildren;
    int32_t children[COLL_TREE_MAX_CHILDREN]; /* reduction order (smallest subtree first);
                                                 broadcast sends go in reverse order */
    /* set by coll__tree_part_init */
    enum coll_tree_mode mode;
    size_t off, count, chunk;                 /* range of SEND/RECV and its chunking */
    size_t scratch_off;                       /* start of this part's scratch slots */
    size_t nchunks, slot_count;
    uint32_t nslots;
    /* engine state */
    uint32_t last_read[COLL_TREE_SLOTS][COLL_TREE_MAX_CHILDREN]; /* UINT32_MAX: none yet */
    uint32_t up_done[COLL_TREE_SLOTS + 1];    /* per chunk in flight: the end of its way up */
};

/* Set mode, range and chunking of p, whose parent and children are already set; returns the
 * scratch elements p needs from scratch_off on (none for a broadcast). */
COLL_INTERNAL size_t coll__tree_part_init(struct coll_tree_part *p, enum coll_tree_mode mode,
                                          size_t off, size_t count, size_t chunk,
                                          size_t scratch_off);
/* Append this rank's steps of every part (all of one mode), interleaved chunk by chunk in an
 * order every rank shares, so that parts that link the same two ranks post to that link in
 * the same order on both ends. */
COLL_INTERNAL coll_status_t coll__tree_build(struct coll_schedule *s,
                                             struct coll_tree_part *parts, uint32_t nparts);

/* ---- Shared by the builders of the other collectives (appended; nothing above changed) -- */

/* Buffers of the other collectives (NCCL's; count is per rank for all but barrier):
 *   allgather      SEND count, RECV n count; in place SEND == RECV + r count
 *   reducescatter  SEND n count, RECV count; in place RECV == SEND + r count
 *   alltoall       SEND, RECV n count each; in place SEND == RECV
 *   gather         SEND count, RECV n count on the root only; in place (root) SEND == RECV +
 *                  root count
 *   scatter        SEND n count on the root only, RECV count; in place (root) RECV == SEND +
 *                  root count
 *   barrier        no user buffers; one-element messages of SCRATCH (run as uint8)
 * The in-place rule above holds with that offset: a builder never reads an element of SEND
 * after writing the element of RECV that is the same memory in place. Builders cannot tell
 * whether a call is in place, so their schedules are right both ways. */

/* "No step": an absent dependency. coll__deps_add ignores it. */
#define COLL_NO_STEP UINT32_MAX

/* A small set of dependencies, built up as a builder goes. It holds up to twice
 * COLL_MAX_DEPS and keeps counting past that, so that coll__sched_add refuses a step with
 * too many (COLL_INTERNAL_ERROR) instead of one silently losing a dependency. */
struct coll_deps {
    uint32_t n;
    uint32_t d[2 * COLL_MAX_DEPS];
};

static inline void coll__deps_clear(struct coll_deps *ds)
{
    ds->n = 0;
}

static inline void coll__deps_add(struct coll_deps *ds, uint32_t step)
{
    if (step == COLL_NO_STEP)
        return;
    for (uint32_t i = 0; i < ds->n && i < 2 * COLL_MAX_DEPS; i++)
        if (ds->d[i] == step)
            return;
    if (ds->n < 2 * COLL_MAX_DEPS)
        ds->d[ds->n] = step;
    ds->n++;
}

/* Does the collective's largest buffer or scratch, mult x nranks x count elements of
 * elem_size bytes, fit in size_t (and in the slices' offsets)? The applicable() of the
 * builders whose buffers grow with nranks. */
COLL_INTERNAL bool coll__algo_sizes_fit(const struct coll_algo_args *a, size_t mult);

/* The ring all-gather engine (src/algo/allgather.c), used by "ring" all-gather and by
 * "vdg" broadcast: n blocks of RECV, block i at off[i] of len[i] elements (any sizes, 0
 * included), the rank at ring position pos holding block pos. Step k sends block pos-k to
 * right and receives block pos-k-1 from left, chunk by chunk (chunk elements a message),
 * each chunk forwarded as soon as it is in. own_ready[c] (NULL: none) is the step that put
 * chunk c of block pos into RECV; recv_after[i] (NULL, or COLL_NO_STEP entries: none) is a
 * step that must finish before block i is received (it read or wrote that place). */
struct coll_ring_ag {
    int32_t n, pos, left, right;
    const size_t *off, *len;
    size_t chunk;
    const uint32_t *own_ready;
    const uint32_t *recv_after;
};
COLL_INTERNAL coll_status_t coll__ring_allgather_blocks(struct coll_schedule *s,
                                                        const struct coll_ring_ag *g);

/* One collective of one algorithm, built in the file that holds its kind of pattern and
 * called from the algorithm's entry in another (arguments already checked). */
COLL_INTERNAL coll_status_t coll__ring_allgather_build(const struct coll_algo_args *a,
                                                       struct coll_schedule *s);
COLL_INTERNAL coll_status_t coll__ring_reduce_scatter_build(const struct coll_algo_args *a,
                                                            struct coll_schedule *s);
COLL_INTERNAL coll_status_t coll__bruck_alltoall_build(const struct coll_algo_args *a,
                                                       struct coll_schedule *s);
COLL_INTERNAL coll_status_t coll__linear_alltoall_build(const struct coll_algo_args *a,
                                                        struct coll_schedule *s);
COLL_INTERNAL coll_status_t coll__linear_barrier_build(const struct coll_algo_args *a,
                                                       struct coll_schedule *s);
COLL_INTERNAL coll_status_t coll__binomial_gather_build(const struct coll_algo_args *a,
                                                        struct coll_schedule *s);
COLL_INTERNAL coll_status_t coll__binomial_scatter_build(const struct coll_algo_args *a,
                                                         struct coll_schedule *s);

#endif /* COLL_SCHEDULE_H */
