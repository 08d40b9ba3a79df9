/*
 * status.c - status strings, the calling thread's last-error text, and small helpers
 * (clock, randomness, hashing, dtype names) that every file uses. A comm's own error text
 * is kept by src/core/error.c, which knows the comm.
 */
#include "base.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static _Thread_local char thread_errmsg[1024];

const char *coll__thread_error(void)
{
    return thread_errmsg;
}

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

const struct coll_dtype_info coll__dtypes[COLL_NUM_DTYPES] = {
    [COLL_INT8] = {"int8", 1},       [COLL_UINT8] = {"uint8", 1},
    [COLL_INT32] = {"int32", 4},     [COLL_UINT32] = {"uint32", 4},
    [COLL_INT64] = {"int64", 8},     [COLL_UINT64] = {"uint64", 8},
    [COLL_FLOAT16] = {"half", 2},    [COLL_FLOAT32] = {"float", 4},
    [COLL_FLOAT64] = {"double", 8},  [COLL_BFLOAT16] = {"bfloat16", 2},
    [COLL_FLOAT8E4M3] = {"f8e4m3", 1}, [COLL_FLOAT8E5M2] = {"f8e5m2", 1},
};

const char *coll__dtype_name(coll_dtype_t dt)
{
    return (unsigned)dt < COLL_NUM_DTYPES ? coll__dtypes[dt].name : "unknown";
}

const char *coll__op_name(coll_op_t op)
{
    static const char *names[COLL_NUM_OPS] = {"sum", "prod", "max", "min", "avg"};
    static const char *bitwise[3] = {"bxor", "bor", "band"}; /* COLL_BXOR = -3 .. BAND = -1 */
    if ((int)op < 0 && (int)op >= COLL_BXOR)
        return bitwise[(int)op - COLL_BXOR];
    return (unsigned)op < COLL_NUM_OPS ? names[op] : "unknown";
}
