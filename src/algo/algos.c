/*
 * algos.c - the table of algorithms, in the order the selector tries them when nothing else
 * decides. Each entry lives in its builder's file (ring.c, chain.c, binomial.c, tree.c,
 * rd.c, allgather.c "bruck", alltoall.c "pairwise", gather_scatter.c "linear", vdg.c,
 * barrier.c "dissemination").
 *
 *                 allreduce bcast reduce allgather redscat alltoall gather scatter barrier
 *   ring              x                     x        x
 *   tree              x       x     x
 *   dbtree            x       x     x
 *   chain                     x     x
 *   binomial          x       x     x                                 x      x
 *   rd                x                     x        x
 *   rabenseifner      x             x
 *   bruck                                   x                 x
 *   pairwise                                                  x
 *   linear                                                    x        x      x       x
 *   vdg                       x
 *   dissemination                                                                     x
 *   hier              x       x     x          (ranks on 2 or more hosts: hier.c)
 */
#include "schedule.h"

#include <string.h>

COLL_INTERNAL extern const struct coll_algo coll__algo_ring;
COLL_INTERNAL extern const struct coll_algo coll__algo_chain;
COLL_INTERNAL extern const struct coll_algo coll__algo_binomial;
COLL_INTERNAL extern const struct coll_algo coll__algo_tree;
COLL_INTERNAL extern const struct coll_algo coll__algo_dbtree;
COLL_INTERNAL extern const struct coll_algo coll__algo_rd;
COLL_INTERNAL extern const struct coll_algo coll__algo_rabenseifner;
COLL_INTERNAL extern const struct coll_algo coll__algo_bruck;
COLL_INTERNAL extern const struct coll_algo coll__algo_pairwise;
COLL_INTERNAL extern const struct coll_algo coll__algo_linear;
COLL_INTERNAL extern const struct coll_algo coll__algo_vdg;
COLL_INTERNAL extern const struct coll_algo coll__algo_dissemination;
COLL_INTERNAL extern const struct coll_algo coll__algo_hier;

/* The selector's "first applicable" fallback reads this order, so each collective's first
 * runner is a sound default: ring (all-gather, reduce-scatter), binomial (gather, scatter),
 * pairwise (all-to-all), dissemination (barrier); linear, for small n only, comes last. */
const struct coll_algo *const coll__algos[] = {
    &coll__algo_ring,
    &coll__algo_tree,
    &coll__algo_dbtree,
    &coll__algo_chain,
    &coll__algo_binomial,
    &coll__algo_rd,
    &coll__algo_rabenseifner,
    &coll__algo_pairwise,
    &coll__algo_bruck,
    &coll__algo_dissemination,
    &coll__algo_vdg,
    &coll__algo_linear,
    &coll__algo_hier,
    NULL,
};

const struct coll_algo *coll__algo_find(const char *name)
{
    if (!name)
        return NULL;
    for (int i = 0; coll__algos[i]; i++)
        if (!strcmp(coll__algos[i]->name, name))
            return coll__algos[i];
    return NULL;
}
