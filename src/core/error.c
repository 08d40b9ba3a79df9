/*
 * error.c - a comm's error text: the first failure's message is the one kept (coll__error
 * records it under errlock, coll_last_error reads it). Declared in base/base.h so that
 * every layer reports through it; defined here, where the comm's layout is known.
 */
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

COLL_API const char *coll_last_error(const coll_comm_t *comm)
{
    if (!comm || coll__comm_check(comm, "coll_last_error") != COLL_SUCCESS)
        return coll__thread_error(); /* for a handle that is not a live comm: why not */
    /* comm->errmsg only changes under errlock; the caller owns the comm's thread, and abort
     * writes are complete strings, so returning the buffer is safe enough for a message. */
    return comm->errmsg;
}

static coll_status_t verror(struct coll_comm *comm, coll_status_t st, int err, const char *fmt,
                            va_list ap)
{
    char msg[1024];
    int n = 0;

    if (comm && comm->nranks > 0)
        n = snprintf(msg, sizeof(msg), "rank %d: ", comm->rank);
    if (n < 0 || (size_t)n >= sizeof(msg))
        n = 0;
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    if (err) {
        size_t len = strlen(msg);
        char ebuf[128];
        snprintf(msg + len, sizeof(msg) - len, ": %s", strerror_r(err, ebuf, sizeof(ebuf)));
    }
    if (comm) {
        pthread_mutex_lock(&comm->errlock);
        /* The first failure of a failed comm is the one worth reading. */
        if (atomic_load(&comm->failed) == COLL_SUCCESS || comm->errmsg[0] == '\0')
            snprintf(comm->errmsg, sizeof(comm->errmsg), "%s", msg);
        pthread_mutex_unlock(&comm->errlock);
    }
    coll__set_thread_error(msg);
    if (st == COLL_INVALID_ARGUMENT || st == COLL_INVALID_USAGE)
        COLL_INFO(COLL_SUB_ALL, "%s", msg);
    else
        COLL_WARN(COLL_SUB_ALL, "%s", msg);
    return st;
}

coll_status_t coll__error(struct coll_comm *comm, coll_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    st = verror(comm, st, 0, fmt, ap);
    va_end(ap);
    return st;
}

coll_status_t coll__sys_error(struct coll_comm *comm, int err, const char *fmt, ...)
{
    va_list ap;
    coll_status_t st;
    va_start(ap, fmt);
    st = verror(comm, COLL_SYSTEM_ERROR, err ? err : EIO, fmt, ap);
    va_end(ap);
    return st;
}

