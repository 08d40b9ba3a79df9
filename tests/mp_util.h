/*
 * mp_util.h - what the multi-process test programs (mp_coll.c, mp_quant.c, the NCCL API
 * tests, ...) share: the rank they run as, and failing loudly. Each rank checks its own
 * results and exits non-zero with a line that names the rank and the first wrong thing;
 * collrun then fails the whole run.
 *
 * Define MP_UTIL_NCCL before including it for programs that test the NCCL API: CHECK then
 * takes an ncclResult_t and reports ncclGetLastError.
 */
#ifndef COLL_TESTS_MP_UTIL_H
#define COLL_TESTS_MP_UTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int rank, nranks;

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "rank %d: FAIL: ", rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(1);
}

#ifdef MP_UTIL_NCCL
#define CHECK(call)                                                                          \
    do {                                                                                     \
        ncclResult_t st_ = (call);                                                           \
        if (st_ != ncclSuccess)                                                              \
            die("%s:%d: %s -> %s: %s", __FILE__, __LINE__, #call, ncclGetErrorString(st_),   \
                ncclGetLastError(NULL));                                                     \
    } while (0)
#else
#define CHECK(call)                                                                          \
    do {                                                                                     \
        coll_status_t st_ = (call);                                                          \
        if (st_ != COLL_SUCCESS)                                                             \
            die("%s:%d: %s -> %s: %s", __FILE__, __LINE__, #call, coll_status_string(st_),   \
                coll_last_error(NULL));                                                      \
    } while (0)
#endif

#endif /* COLL_TESTS_MP_UTIL_H */
