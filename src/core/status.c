/*
 * status.c - status strings, the last-error text of comms and threads, and small helpers
 * (clock, randomness, hashing, dtype names) that every file uses.
 */
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static _Thread_local char thread_errmsg[1024];

COLL_API const char *coll_status_string(coll_status_t status)
{
    switch (status) {
#define COLL_X_(name, value, text) \
    case name:                     \
        return text;
        COLL_STATUS_MAP(COLL_X_)
#undef COLL_X_
    }
    return "unknown status";
}

COLL_API const char *coll_last_error(const coll_comm_t *comm)
{
    if (!comm || coll__comm_check(comm, "coll_last_error") != COLL_SUCCESS)
        return thread_errmsg; /* for a handle that is not a live comm: why not */
    /* comm->errmsg only changes under errlock; the caller owns the comm's thread, and abort
     * writes are complete strings, so returning the buffer is safe enough for a message. */
    return comm->errmsg;
}

COLL_API coll_status_t coll_get_version(int *version_p)
{
    if (!version_p) {
        coll__set_thread_error("coll_get_version: version_p is NULL");
        return COLL_INVALID_ARGUMENT;
    }
    *version_p = COLL_VERSION_CODE;
    return COLL_SUCCESS;
}

void coll__set_thread_error(const char *msg)
{
    snprintf(thread_errmsg, sizeof(thread_errmsg), "%s", msg);
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

uint64_t coll__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t coll__now_coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

coll_status_t coll__random(void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return coll__sys_error(NULL, errno, "getrandom failed");
        }
        p += r;
        n -= (size_t)r;
    }
    return COLL_SUCCESS;
}

uint64_t coll__hash64(const void *data, size_t n, uint64_t seed)
{
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static const struct {
    const char *name;
    size_t size;
} dtypes[COLL_NUM_DTYPES] = {
    [COLL_INT8] = {"int8", 1},       [COLL_UINT8] = {"uint8", 1},
    [COLL_INT32] = {"int32", 4},     [COLL_UINT32] = {"uint32", 4},
    [COLL_INT64] = {"int64", 8},     [COLL_UINT64] = {"uint64", 8},
    [COLL_FLOAT16] = {"half", 2},    [COLL_FLOAT32] = {"float", 4},
    [COLL_FLOAT64] = {"double", 8},  [COLL_BFLOAT16] = {"bfloat16", 2},
    [COLL_FLOAT8E4M3] = {"f8e4m3", 1}, [COLL_FLOAT8E5M2] = {"f8e5m2", 1},
};

const char *coll__dtype_name(coll_dtype_t dt)
{
    return (unsigned)dt < COLL_NUM_DTYPES ? dtypes[dt].name : "unknown";
}

size_t coll__dtype_size(coll_dtype_t dt)
{
    return (unsigned)dt < COLL_NUM_DTYPES ? dtypes[dt].size : 0;
}

const char *coll__op_name(coll_op_t op)
{
    static const char *names[COLL_NUM_OPS] = {"sum", "prod", "max", "min", "avg"};
    static const char *bitwise[3] = {"bxor", "bor", "band"}; /* COLL_BXOR = -3 .. BAND = -1 */
    if ((int)op < 0 && (int)op >= COLL_BXOR)
        return bitwise[(int)op - COLL_BXOR];
    return (unsigned)op < COLL_NUM_OPS ? names[op] : "unknown";
}
