/*
 * collrun.c - the collrun launcher: rank and size in COLL_RANK/COLL_SIZE, the unique id
 * (made by collrun itself) in COLL_UNIQUE_ID.
 */
#include "launch.h"

#include <stdatomic.h>
#include <string.h>

static atomic_bool collrun_used; /* COLL_UNIQUE_ID already made a comm in this process */

static bool present(void)
{
    return coll__launch_env("COLL_UNIQUE_ID") || coll__launch_env("COLL_RANK") ||
           coll__launch_env("COLL_SIZE");
}

static coll_status_t read_env(struct coll_launch *l)
{
    return coll__launch_read("collrun", "COLL_RANK", "COLL_SIZE", "COLL_LOCAL_RANK",
                             "COLL_LOCAL_SIZE", l);
}

static coll_status_t settle(struct coll_launch *l)
{
    if (!coll__launch_env("COLL_UNIQUE_ID"))
        return coll__launch_fail(l->name, COLL_INVALID_ARGUMENT, 0, "COLL_UNIQUE_ID is not set");
    return COLL_SUCCESS;
}

static coll_status_t exchange(const struct coll_launch *l, struct coll_launch_xchg *x,
                              coll_unique_id_t *id)
{
    coll_status_t st;

    (void)x;
    /* collrun's root serves one rendezvous: a second comm would wait out the timeout */
    if (atomic_load(&collrun_used))
        return coll__launch_fail(l->name, COLL_INVALID_USAGE, 0,
                                 "COLL_UNIQUE_ID made one communicator already; make more "
                                 "with coll_comm_split, or with an id that one rank "
                                 "broadcasts over the first");
    st = coll_unique_id_from_string(coll__launch_env("COLL_UNIQUE_ID"), id);
    if (st != COLL_SUCCESS)
        return coll__error(NULL, st, "COLL_UNIQUE_ID is malformed: %s", coll_last_error(NULL));
    return COLL_SUCCESS;
}

static void done(const struct coll_launch *l, struct coll_launch_xchg *x, bool joined)
{
    (void)l, (void)x;
    if (joined)
        atomic_store(&collrun_used, true);
}

/* collrun's own variables win without cross-checks (group 0 alone): collrun may itself run
 * as one task of srun or mpirun, whose variables then describe collrun, not us. */
const struct coll_launcher coll__launch_collrun = {
    .name = "collrun",
    .group = 0,
    .hint = "COLL_UNIQUE_ID from collrun",
    .present = present,
    .read = read_env,
    .settle = settle,
    .exchange = exchange,
    .done = done,
};
