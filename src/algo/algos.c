/*
 * algos.c - the table of algorithms, in the order the selector tries them when nothing else
 * decides. Each entry lives in its builder's file (ring.c, chain.c, binomial.c, tree.c).
 */
#include "schedule.h"

#include <string.h>

COLL_INTERNAL extern const struct coll_algo coll__algo_ring;
COLL_INTERNAL extern const struct coll_algo coll__algo_chain;
COLL_INTERNAL extern const struct coll_algo coll__algo_binomial;
COLL_INTERNAL extern const struct coll_algo coll__algo_tree;
COLL_INTERNAL extern const struct coll_algo coll__algo_dbtree;

const struct coll_algo *const coll__algos[] = {
    &coll__algo_ring,  &coll__algo_tree,     &coll__algo_dbtree,
    &coll__algo_chain, &coll__algo_binomial, NULL,
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
