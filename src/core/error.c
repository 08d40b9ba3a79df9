/*
 * error.c - a comm's error text, as the base's error sink (src/base/error.c) asks the core
 * for it: the rank that prefixes a message, the first failure's message kept under errlock
 * (coll_last_error reads it), and the comm's failure (coll__fail). Registered at startup;
 * internal.h makes every object that knows the comm's layout link this one, so no program
 * can hold a comm without it.
 */
#include "internal.h"

#include <stdio.h>

static int sink_rank(const struct coll_comm *comm)
{
    return comm->nranks > 0 ? comm->rank : -1;
}

static void sink_record(struct coll_comm *comm, const char *msg)
{
    pthread_mutex_lock(&comm->errlock);
    /* The first failure of a failed comm is the one worth reading. */
    if (atomic_load(&comm->failed) == COLL_SUCCESS || comm->errmsg[0] == '\0')
        snprintf(comm->errmsg, sizeof(comm->errmsg), "%s", msg);
    pthread_mutex_unlock(&comm->errlock);
}

static coll_status_t sink_status(const struct coll_comm *comm)
{
    return (coll_status_t)atomic_load(&comm->failed);
}

static const struct coll_error_sink core_sink = {
    .rank = sink_rank,
    .record = sink_record,
    .status = sink_status,
    .fail = coll__comm_fail,
};

const char coll__core_error_sink = 1;

__attribute__((constructor)) static void register_sink(void)
{
    coll__error_sink_set(&core_sink);
}
