/*
 * chain.c - pipelined chain broadcast and reduce: the ranks in ring order from the root,
 * each passing chunks of chunk_count elements to the next while it receives the following
 * chunk. Bandwidth-optimal for large messages on any topology that has a ring.
 *
 *   broadcast:  root -> root+1 -> root+2 -> ... -> root-1      (RECV forwarded as it lands)
 *   reduce:     root <- root+1 <- root+2 <- ... <- root-1      (each rank folds in its SEND)
 *
 * Broadcast: the root copies SEND to RECV chunk by chunk and sends from RECV; the others
 * receive into RECV and forward. Reduce: root-1 sends SEND; every other rank receives the
 * partial into a scratch slot, reduces SEND into it (at the root into RECV: the result) and
 * sends it on. Off the root a reduce never touches RECV, and a broadcast never touches SEND.
 * It is the tree engine of tree.c on a tree of one child per rank.
 *
 * Cost (alpha per message, beta per byte, gamma per reduced byte; m bytes, n ranks, C
 * chunks of m/C):
 *   broadcast  (n - 2 + C) (alpha + m/C beta)
 *   reduce     (n - 2 + C) (alpha + m/C (beta + gamma))
 * best near C = sqrt((n - 2) m beta / alpha): for large m about m beta, whatever n is.
 */
#include "schedule.h"

#include <string.h>

COLL_INTERNAL extern const struct coll_algo coll__algo_chain;

static coll_status_t chain_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    struct coll_tree_part part;
    const int32_t n = a->nranks;
    int32_t pos;
    coll_status_t st = coll__algo_check(&coll__algo_chain, a);

    if (st != COLL_SUCCESS)
        return st;
    if (coll__sched_trivial(a, s, &st))
        return st;
    pos = (a->rank - a->root + n) % n;
    memset(&part, 0, sizeof(part));
    part.parent = pos > 0 ? (a->rank - 1 + n) % n : -1;
    if (pos + 1 < n)
        part.children[part.nchildren++] = (a->rank + 1) % n;
    coll__tree_part_init(&part, a->coll == COLL_COLL_REDUCE ? COLL_TREE_REDUCE : COLL_TREE_BCAST, 0,
                         a->count, a->chunk_count, 0);
    return coll__tree_build(s, &part, 1);
}

COLL_INTERNAL const struct coll_algo coll__algo_chain = {
    .name = "chain",
    .desc = "pipelined chain from the root in ring order: bandwidth-optimal broadcast/reduce",
    .colls = 1u << COLL_COLL_BROADCAST | 1u << COLL_COLL_REDUCE,
    .applicable = NULL,
    .build = chain_build,
};
