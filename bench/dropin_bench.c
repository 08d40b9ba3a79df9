/*
 * dropin_bench.c - what coll's libnccl.so.2 costs over the native API: the same all-reduce
 * timed through ncclAllReduce and through coll_allreduce, in one run, under collrun.
 *
 *   collrun -n N dropin_bench [-b BYTES]... [-r ROUNDS] [-i ITERS]
 *
 * Two communicators over the same ranks, one per API. For each size, ROUNDS rounds each
 * time ITERS calls through one API, then ITERS through the other (the first API alternates
 * from round to round), so both see the same machine, noise included; the per-call time of
 * an API is the median of its rounds (each round's time is the slowest rank's, agreed by an
 * all-reduce MAX). Prints one line per size: native us, shim us, difference and ratio, for
 * the median round and for the fastest (noise only ever adds time, so the fastest rounds
 * are the closest to what the code itself costs). With one rank there is no wire: the
 * numbers are the per-call cost of the two software paths alone. On a shared, noisy
 * machine only such same-run comparisons mean anything.
 */
#include "coll.h"
#include "nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int rank, nranks;

static void die(const char *what, const char *why)
{
    fprintf(stderr, "dropin_bench: rank %d: %s: %s\n", rank, what, why);
    exit(1);
}

#define CK(call)                                                                         \
    do {                                                                                 \
        coll_status_t s_ = (call);                                                       \
        if (s_ != COLL_SUCCESS)                                                          \
            die(#call, coll_last_error(NULL));                                           \
    } while (0)
#define NK(call)                                                                         \
    do {                                                                                 \
        ncclResult_t s_ = (call);                                                        \
        if (s_ != ncclSuccess)                                                           \
            die(#call, ncclGetLastError(NULL));                                          \
    } while (0)

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seconds per call of ITERS calls, the slowest rank's. */
static double timed(int shim, float *buf, size_t count, int iters, coll_comm_t *c, ncclComm_t n)
{
    double t0, t;

    CK(coll_barrier(c));
    t0 = now();
    for (int i = 0; i < iters; i++) {
        if (shim)
            NK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, n, NULL));
        else
            CK(coll_allreduce(buf, buf, count, COLL_FLOAT32, COLL_SUM, c));
    }
    t = (now() - t0) / iters;
    CK(coll_allreduce(&t, &t, 1, COLL_FLOAT64, COLL_MAX, c));
    return t;
}

int main(int argc, char **argv)
{
    size_t sizes[16] = {8, 1 << 20};
    int nsizes = 0, rounds = 21, iters = 0;
    coll_comm_t *c;
    ncclComm_t n;
    ncclUniqueId id;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-b") && i + 1 < argc && nsizes < 16)
            sizes[nsizes++] = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-i") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: collrun -n N %s [-b BYTES]... [-r ROUNDS] [-i ITERS]\n",
                    argv[0]);
            return 2;
        }
    }
    if (nsizes == 0)
        nsizes = 2;
    if (rounds < 1 || rounds > 1000) {
        fprintf(stderr, "dropin_bench: -r must be 1..1000\n");
        return 2;
    }
    CK(coll_comm_init_env(&c));
    CK(coll_comm_rank(c, &rank));
    CK(coll_comm_size(c, &nranks));
    if (rank == 0)
        NK(ncclGetUniqueId(&id));
    CK(coll_broadcast(&id, &id, sizeof(id), COLL_UINT8, 0, c));
    NK(ncclCommInitRank(&n, nranks, id, rank));
    if (rank == 0)
        printf("# all-reduce float sum, %d ranks, %d rounds: us per call, median round | "
               "fastest round\n%10s %6s %10s %10s %9s %7s | %10s %10s %9s %7s\n", nranks,
               rounds, "bytes", "iters", "native", "shim", "diff", "ratio", "native", "shim",
               "diff", "ratio");
    for (int s = 0; s < nsizes; s++) {
        size_t count = sizes[s] / sizeof(float) ? sizes[s] / sizeof(float) : 1;
        int it = iters > 0 ? iters : sizes[s] <= 65536 ? 2000 : 50;
        float *buf = calloc(count, sizeof(float));
        double *tn = calloc((size_t)rounds, sizeof(double));
        double *ts = calloc((size_t)rounds, sizeof(double));

        if (!buf || !tn || !ts)
            die("calloc", "out of memory");
        timed(0, buf, count, it / 10 + 1, c, n); /* warm both paths */
        timed(1, buf, count, it / 10 + 1, c, n);
        for (int r = 0; r < rounds; r++) {
            int first = r & 1;
            double a = timed(first, buf, count, it, c, n);
            double b = timed(!first, buf, count, it, c, n);
            ts[r] = first ? a : b;
            tn[r] = first ? b : a;
        }
        qsort(tn, (size_t)rounds, sizeof(double), cmp);
        qsort(ts, (size_t)rounds, sizeof(double), cmp);
        if (rank == 0)
            printf("%10zu %6d %10.3f %10.3f %9.3f %7.4f | %10.3f %10.3f %9.3f %7.4f\n",
                   count * sizeof(float), it, tn[rounds / 2] * 1e6, ts[rounds / 2] * 1e6,
                   (ts[rounds / 2] - tn[rounds / 2]) * 1e6, ts[rounds / 2] / tn[rounds / 2],
                   tn[0] * 1e6, ts[0] * 1e6, (ts[0] - tn[0]) * 1e6, ts[0] / tn[0]);
        free(buf);
        free(tn);
        free(ts);
    }
    NK(ncclCommDestroy(n));
    CK(coll_comm_destroy(c));
    return 0;
}
