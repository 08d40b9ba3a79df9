/*
 * grow.c - coll_comm_grow: admit new ranks into a communicator (as ncclCommGrow), so that a
 * job that shrank after a failure can take a restarted process back in without a restart of
 * the others.
 *
 * The grown comm is a fresh comm, bootstrapped from a fresh id: its own root, its own
 * random secret, its own connections. That is what keeps it safe and simple: the joiners
 * never see the parent's secret (they could not prove they were entitled to it), they
 * authenticate exactly as at coll_comm_init, and the parent, untouched, stays usable until
 * it is destroyed, so a grow that fails (a joiner that never comes) leaves the members where
 * they were. Members keep their rank; joiners take the ranks from the parent's size up.
 */
#include "../core/bootstrap.h"
#include "comm.h"

COLL_API coll_status_t coll_comm_grow_id(coll_comm_t *comm, coll_unique_id_t *id_p)
{
    coll_status_t st;

    if (coll__comm_check(comm, "coll_comm_grow_id") != COLL_SUCCESS)
        return COLL_INVALID_ARGUMENT;
    if (!id_p)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "coll_comm_grow_id: id_p is NULL");
    st = coll__bootstrap_root_start(id_p);
    if (st != COLL_SUCCESS)
        return coll__error(comm, st, "coll_comm_grow_id: %s", coll_last_error(NULL));
    COLL_INFO(COLL_SUB_INIT, "rank %d: a grow id for comm %016llx of %d ranks (root in this "
              "process)", comm->rank, (unsigned long long)comm->comm_id, comm->nranks);
    return COLL_SUCCESS;
}

COLL_API coll_status_t coll_comm_grow(coll_comm_t *comm, int new_nranks,
                                      const coll_unique_id_t *id, coll_comm_t **newcomm_p)
{
    struct coll_id_info info;
    coll_status_t st;

    if (!newcomm_p)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "coll_comm_grow: newcomm_p is NULL");
    *newcomm_p = NULL;
    if (coll__comm_check(comm, "coll_comm_grow") != COLL_SUCCESS)
        return COLL_INVALID_ARGUMENT;
    if (!id)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "coll_comm_grow: id is NULL");
    if (new_nranks <= comm->nranks)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "coll_comm_grow: new_nranks %d is not above the comm's %d ranks",
                           new_nranks, comm->nranks);
    if (coll__id_decode(id, &info) != COLL_SUCCESS)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "coll_comm_grow: %s",
                           coll_last_error(NULL));
    if (coll__group_active())
        return coll__error(comm, COLL_INVALID_USAGE, "coll_comm_grow inside a group");
    /* A failed comm has lost a member: its survivors must agree on who is left (shrink)
     * before they can agree on who comes in. */
    st = atomic_load(&comm->failed);
    if (st != COLL_SUCCESS)
        return coll__error(comm, COLL_INVALID_USAGE,
                           "coll_comm_grow: the comm has failed (%s): shrink it first",
                           coll_status_string(st));
    COLL_INFO(COLL_SUB_INIT, "rank %d: growing comm %016llx of %d to %d ranks", comm->rank,
              (unsigned long long)comm->comm_id, comm->nranks, new_nranks);
    st = coll_comm_init(newcomm_p, new_nranks, id, comm->rank);
    if (st != COLL_SUCCESS)
        coll__error(NULL, st, "coll_comm_grow: %s", coll_last_error(NULL));
    return st;
}
