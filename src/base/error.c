/*
 * error.c - coll__error and coll__sys_error: every layer reports a failure here, with a comm
 * or without one. The message goes to the calling thread's last error and the log; with a
 * comm it is also prefixed with the rank and kept as the comm's error text, through the
 * sink that the core registers (src/core/error.c), since only the core knows the comm's
 * layout. Without a comm nothing above the base is involved.
 */
#include "base.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static const struct coll_error_sink *_Atomic sink;

void coll__error_sink_set(const struct coll_error_sink *s)
{
    atomic_store(&sink, s);
}

static coll_status_t verror(struct coll_comm *comm, coll_status_t st, int err, const char *fmt,
                            va_list ap)
{
    const struct coll_error_sink *s = comm ? atomic_load(&sink) : NULL;
    char msg[1024];
    int n = 0, rank = s ? s->rank(comm) : -1;

    if (rank >= 0)
        n = snprintf(msg, sizeof(msg), "rank %d: ", rank);
    if (n < 0 || (size_t)n >= sizeof(msg))
        n = 0;
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    if (err) {
        size_t len = strlen(msg);
        char ebuf[128];
        snprintf(msg + len, sizeof(msg) - len, ": %s", strerror_r(err, ebuf, sizeof(ebuf)));
    }
    if (s)
        s->record(comm, msg);
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

coll_status_t coll__failv(struct coll_comm *comm, coll_status_t st, const char *fmt, va_list ap)
{
    const struct coll_error_sink *s = comm ? atomic_load(&sink) : NULL;
    coll_status_t now;

    if (!s || !s->status || !s->fail)
        return verror(comm, st, 0, fmt, ap);
    /* the engine lock orders failures: no other can come between this look and the fail */
    now = s->status(comm);
    if (now != COLL_SUCCESS)
        return now;
    verror(comm, st, 0, fmt, ap);
    s->fail(comm, st);
    now = s->status(comm);
    return now != COLL_SUCCESS ? now : st;
}

coll_status_t coll__fail(struct coll_comm *comm, coll_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    st = coll__failv(comm, st, fmt, ap);
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
