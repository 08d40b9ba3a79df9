/*
 * binomial.c - binomial-tree broadcast, reduce and all-reduce (reduce to rank 0, then
 * broadcast from it), for small messages: ceil(log2 n) rounds, the fewest possible. The
 * entry also runs gather and scatter on the same tree (gather_scatter.c).
 *
 * Ranks are numbered relative to the root, v = rank - root mod n. v's parent is v with its
 * lowest set bit cleared; its children are v + 2^j for every 2^j below that bit. n = 8:
 *
 *   round 1:  0 -> 4                 v = 0: children 4, 2, 1
 *   round 2:  0 -> 2, 4 -> 6         v = 4: children 6, 5
 *   round 3:  0 -> 1, 2 -> 3,        v = 6: child 7
 *             4 -> 5, 6 -> 7
 *
 * A broadcast sends to the largest subtree first; a reduce folds the smallest subtree in
 * first (it is ready first). Chunked like the other trees (the engine of tree.c): with
 * chunk_count >= count it is the classic unchunked binomial tree, the latency-optimal form;
 * smaller chunks pipeline the rounds for medium messages, although the root still sends the
 * whole message log2 n times, so chain or dbtree win for large ones. Partials from children
 * land in scratch slots: scratch = COLL_TREE_SLOTS x children x chunk.
 *
 * Cost (alpha per message, beta per byte, gamma per reduced byte; m bytes, L = ceil(log2 n),
 * C chunks of m/C):
 *   broadcast  unchunked  L (alpha + m beta);   chunked ~ (L C + L - 1) (alpha + m/C beta)
 *   reduce     unchunked  L (alpha + m (beta + gamma)); chunked alike with gamma
 *   all-reduce the sum of the two (2L rounds)
 */
#include "schedule.h"

#include <string.h>

COLL_INTERNAL extern const struct coll_algo coll__algo_binomial;

/* Gather and scatter buffers hold n x count elements. */
static bool binomial_applicable(const struct coll_algo_args *a)
{
    return (a->coll != COLL_COLL_GATHER && a->coll != COLL_COLL_SCATTER) ||
           coll__algo_sizes_fit(a, 1);
}

static coll_status_t binomial_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    struct coll_tree_part part;
    const int64_t n = a->nranks;
    int64_t root, v, low;
    enum coll_tree_mode mode;
    coll_status_t st = coll__algo_check(&coll__algo_binomial, a);

    if (st != COLL_SUCCESS)
        return st;
    if (a->coll == COLL_COLL_GATHER || a->coll == COLL_COLL_SCATTER) {
        if (!binomial_applicable(a))
            return coll__error(NULL, COLL_INVALID_ARGUMENT,
                               "binomial %s: %zu elements on %d ranks overflow the buffers' size",
                               coll__coll_name(a->coll), a->count, a->nranks);
        /* gather_scatter.c */
        return a->coll == COLL_COLL_GATHER ? coll__binomial_gather_build(a, s)
                                           : coll__binomial_scatter_build(a, s);
    }
    if (coll__sched_trivial(a, s, &st))
        return st;
    root = a->coll == COLL_COLL_ALLREDUCE ? 0 : a->root;
    v = (a->rank - root + n) % n;
    low = v ? v & -v : n; /* the root's "lowest bit" is above every child's */
    memset(&part, 0, sizeof(part));
    part.parent = v ? (int32_t)(((v & (v - 1)) + root) % n) : -1;
    for (int64_t b = 1; b < low && v + b < n; b *= 2)
        part.children[part.nchildren++] = (int32_t)((v + b + root) % n);
    mode = a->coll == COLL_COLL_ALLREDUCE ? COLL_TREE_ALLREDUCE
           : a->coll == COLL_COLL_REDUCE  ? COLL_TREE_REDUCE
                                          : COLL_TREE_BCAST;
    coll__tree_part_init(&part, mode, 0, a->count, a->chunk_count, 0);
    return coll__tree_build(s, &part, 1);
}

COLL_INTERNAL const struct coll_algo coll__algo_binomial = {
    .name = "binomial",
    .desc = "binomial tree, log2 n rounds: latency-optimal broadcast/reduce/gather/scatter",
    .colls = 1u << COLL_COLL_BROADCAST | 1u << COLL_COLL_REDUCE | 1u << COLL_COLL_ALLREDUCE |
             1u << COLL_COLL_GATHER | 1u << COLL_COLL_SCATTER,
    .applicable = binomial_applicable,
    .build = binomial_build,
};
