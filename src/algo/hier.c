/*
 * hier.c - two-level all-reduce, broadcast and reduce for ranks spread over several hosts:
 * one pipelined tree whose shape follows the hosts, so that the slow links between hosts
 * carry the message once each way and the fast links inside a host carry the rest.
 *
 *   host A: a0 (leader) <- a1 <- a2 <- a3        inside a host: a chain to its leader
 *              ^
 *   host B: b0 (leader) <- b1 <- b2 <- b3        between hosts: a chain of the leaders
 *              ^
 *   host C: c0 ...
 *
 * Reduce goes up (each rank folds its data into what its children send, chunk by chunk),
 * broadcast comes down the same edges, all-reduce does both with chunk k going down while
 * chunk k+1 goes up. The root's host comes first and the root leads it; the other hosts
 * follow in order of their lowest rank, each led by its lowest rank.
 *
 * Why a chain between leaders rather than a ring: a pipelined chain moves m bytes once in
 * each direction over each link between consecutive hosts, which is what a ring of the
 * leaders moves too (2 (k-1)/k m, near m each way); the flat ring over all ranks instead
 * crosses each host boundary with 2 (n-1)/n m in one direction, about twice as much over
 * the slow link. Inside a host a chain spreads the reductions over every core (a star would
 * make the leader reduce all of them).
 *
 * It needs to know the hosts: a->hosts[r] is rank r's host (0 .. nhosts-1, from the
 * bootstrap's host identities). On one host it is a pipelined chain; the library offers it
 * to the selector only when the ranks span two hosts or more.
 */
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

COLL_INTERNAL extern const struct coll_algo coll__algo_hier;

static bool hier_applicable(const struct coll_algo_args *a)
{
    return a->hosts && a->nhosts >= 1 && a->nhosts <= a->nranks;
}

/* The leader of host h: the root on the root's host, else the host's lowest rank. */
static int32_t leader_of(const struct coll_algo_args *a, int32_t h)
{
    if (a->hosts[a->root] == h)
        return a->root;
    for (int32_t r = 0; r < a->nranks; r++)
        if (a->hosts[r] == h)
            return r;
    return -1;
}

/* The chain of hosts: the root's first, then the others by their lowest rank. Fills
 * order[0 .. k-1] (k <= nhosts: only hosts that have ranks) and returns k. */
static int32_t host_order(const struct coll_algo_args *a, int32_t *order, uint8_t *seen)
{
    int32_t k = 0;

    memset(seen, 0, (size_t)a->nhosts);
    order[k++] = a->hosts[a->root];
    seen[a->hosts[a->root]] = 1;
    for (int32_t r = 0; r < a->nranks; r++)
        if (!seen[a->hosts[r]]) {
            seen[a->hosts[r]] = 1;
            order[k++] = a->hosts[r];
        }
    return k;
}

static coll_status_t hier_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    struct coll_tree_part part;
    enum coll_tree_mode mode;
    int32_t me = a->rank, h, lead, prev = -1, next = -1, pos = -1, k, *order;
    uint8_t *seen;
    coll_status_t st = coll__algo_check(&coll__algo_hier, a);

    if (st != COLL_SUCCESS)
        return st;
    if (!hier_applicable(a))
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "hier: needs the ranks' hosts");
    for (int32_t r = 0; r < a->nranks; r++)
        if (a->hosts[r] < 0 || a->hosts[r] >= a->nhosts)
            return coll__error(NULL, COLL_INVALID_ARGUMENT, "hier: rank %d on host %d of %d", r,
                               a->hosts[r], a->nhosts);
    if (coll__sched_trivial(a, s, &st))
        return st;
    order = malloc((size_t)a->nhosts * sizeof(*order));
    seen = malloc((size_t)a->nhosts);
    if (!order || !seen) {
        free(order);
        free(seen);
        return coll__error(NULL, COLL_SYSTEM_ERROR, "hier: out of memory");
    }
    k = host_order(a, order, seen);
    memset(&part, 0, sizeof(part));
    h = a->hosts[me];
    lead = leader_of(a, h);
    for (int32_t i = 0; i < k; i++)
        if (order[i] == h)
            pos = i;
    /* inside the host a chain: the leader, then the other ranks in rank order */
    for (int32_t r = 0; r < a->nranks; r++) {
        if (a->hosts[r] != h || r == lead)
            continue;
        if (me != lead && r < me)
            prev = r;
        if (next < 0 && (me == lead || r > me))
            next = r;
    }
    if (me == lead)
        part.parent = pos > 0 ? leader_of(a, order[pos - 1]) : -1;
    else
        part.parent = prev >= 0 ? prev : lead;
    if (next >= 0)
        part.children[part.nchildren++] = next;
    /* the next host's leader hangs under mine: the larger subtree goes last */
    if (me == lead && pos + 1 < k)
        part.children[part.nchildren++] = leader_of(a, order[pos + 1]);
    free(order);
    free(seen);
    mode = a->coll == COLL_COLL_ALLREDUCE ? COLL_TREE_ALLREDUCE
           : a->coll == COLL_COLL_REDUCE  ? COLL_TREE_REDUCE
                                          : COLL_TREE_BCAST;
    coll__tree_part_init(&part, mode, 0, a->count, a->chunk_count, 0);
    return coll__tree_build(s, &part, 1);
}

COLL_INTERNAL const struct coll_algo coll__algo_hier = {
    .name = "hier",
    .desc = "two-level pipelined tree: a chain inside each host, a chain of host leaders "
            "between hosts (slow links carry the data once each way)",
    .colls = 1u << COLL_COLL_ALLREDUCE | 1u << COLL_COLL_BROADCAST | 1u << COLL_COLL_REDUCE,
    .applicable = hier_applicable,
    .build = hier_build,
};
