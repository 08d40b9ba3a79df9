/*
 * reduce_bench.c - bandwidth of the host reduction kernels against the machine's ceilings.
 *
 *   reduce_bench [-i isa,...] [-d dtype,...] [-b min] [-e max] [-r rounds] [-t seconds]
 *                [-s stream_bytes]
 *
 * For every buffer size from -b to -e (x4 steps; every buffer a, b, c that size):
 *   ceil             c[i] = a[i] + b[i] on floats, this file's own loop (built -O3
 *                    -march=native, as ../shared/peers/ceil_mem.c): the ceiling to reach
 *   memcpy           glibc's memcpy(c, a)
 *   ntcopy           the ISA's non-temporal copy loop alone, per ISA
 *   reduce           coll__reduce(c, a, b) per ISA x dtype, sum; and fp32 max
 * and with the best ISA of -i only:
 *   coll_copy        coll__copy: memcpy, non-temporal from the streaming threshold up
 *   reduce_nostream  reduce, fp32 sum, with plain stores at every size
 *   reduce2          coll__reduce2, fp32 sum: two outputs (c and d) in one pass
 *   reduce_n4        coll__reduce_n, fp32 sum of four inputs (a, b, e, f) into c
 * -s sets the streaming threshold (COLL_REDUCE_STREAM_BYTES; default: the library's).
 * Bandwidth is bytes of c written per second (1 GB = 1e9 B), as ceil_mem reports. Every
 * point runs for at least -t seconds per round; rounds interleave all points, so that noise
 * from other work on the machine spreads over all of them; the median round is printed, with
 * the smallest and largest. Output: TSV on stdout, one row per point.
 */
#include "reduce/reduce.h"
#include "reduce/reduce_isa.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define MAX_ROUNDS 64

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The ceiling: the plain loop a compiler makes of c = a + b at -O3 -march=native. */
static __attribute__((noinline)) void ceil_add(float *restrict c, const float *restrict a,
                                               const float *restrict b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        c[i] = a[i] + b[i];
}

enum kind { K_CEIL, K_MEMCPY, K_NTCOPY, K_COPY, K_REDUCE, K_PLAIN, K_REDUCE2, K_REDUCEN };
static const char *const kind_names[] = {"ceil",   "memcpy",          "ntcopy",  "coll_copy",
                                         "reduce", "reduce_nostream", "reduce2", "reduce_n4"};

struct point {
    enum kind kind;
    const struct coll__reduce_isa *isa; /* NULL for ceil and memcpy */
    coll_dtype_t dt;
    coll_op_t op;
    size_t bytes;
    double gbps[MAX_ROUNDS];
};

static size_t stream_bytes; /* the default threshold, or -s */
static uint8_t *buf_a, *buf_b, *buf_c, *buf_d, *buf_e, *buf_f;

static void run_once(const struct point *p)
{
    size_t sz = coll__dtype_size(p->dt), count = p->bytes / sz;

    switch (p->kind) {
    case K_CEIL:
        ceil_add((float *)(void *)buf_c, (const float *)(const void *)buf_a,
                 (const float *)(const void *)buf_b, p->bytes / sizeof(float));
        break;
    case K_MEMCPY:
        memcpy(buf_c, buf_a, p->bytes);
        break;
    case K_NTCOPY:
        p->isa->stream(buf_c, buf_a, p->bytes & ~(size_t)63);
#if defined(__x86_64__)
        _mm_sfence();
#endif
        break;
    case K_COPY:
        coll__copy(buf_c, buf_a, p->bytes);
        break;
    case K_REDUCE:
    case K_PLAIN:
        coll__reduce(buf_c, buf_a, buf_b, count, p->dt, p->op);
        break;
    case K_REDUCE2:
        coll__reduce2(buf_c, buf_d, buf_a, buf_b, count, p->dt, p->op);
        break;
    case K_REDUCEN: {
        const void *src[4] = {buf_a, buf_b, buf_e, buf_f};
        coll__reduce_n(buf_c, src, 4, count, p->dt, p->op);
        break;
    }
    }
}

static double measure(const struct point *p, double seconds)
{
    double t0, t;
    long passes = 0;

    if (p->isa && coll__reduce_set_isa(p->isa->name) != COLL_SUCCESS)
        return 0;
    coll__reduce_set_stream_bytes(p->kind == K_PLAIN ? SIZE_MAX : stream_bytes);
    /* Warm the caches for the sizes that fit; the buffers were touched at allocation, and
     * the big ones only stream (one slow pass of a scalar fp8 loop at 256 MiB takes seconds). */
    if (p->bytes <= ((size_t)8 << 20))
        run_once(p);
    t0 = now();
    do {
        run_once(p);
        passes++;
        t = now() - t0;
    } while (t < seconds);
    return (double)p->bytes * (double)passes / t / 1e9;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static bool in_list(const char *list, const char *name)
{
    size_t n = strlen(name);

    if (!list || strcmp(list, "all") == 0)
        return true;
    for (const char *s = list; (s = strstr(s, name)); s += n)
        if ((s == list || s[-1] == ',') && (s[n] == ',' || s[n] == '\0'))
            return true;
    return false;
}

static uint8_t *alloc_touch(size_t bytes)
{
    void *p = NULL;
    float *f;

    if (posix_memalign(&p, 4096, bytes))
        return NULL;
    f = p;
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        f[i] = 1.0f + (float)(i & 7);
    return p;
}

static void usage(void)
{
    fprintf(stderr, "usage: reduce_bench [-i isa,...|all] [-d dtype,...|all] [-b bytes] "
                    "[-e bytes] [-r rounds] [-t seconds] [-s stream_bytes]\n");
}

int main(int argc, char **argv)
{
    const char *isas = "all", *dtypes = "all";
    int64_t minb = 64 << 10, maxb = 256 << 20;
    int rounds = 3, c;
    double seconds = 0.05;
    struct point *pts;
    size_t npts = 0, cap = 4096;
    const struct coll__reduce_isa *best = NULL;

    stream_bytes = coll__reduce_stream_bytes();
    while ((c = getopt(argc, argv, "i:d:b:e:r:t:s:h")) != -1) {
        switch (c) {
        case 'i':
            isas = optarg;
            break;
        case 'd':
            dtypes = optarg;
            break;
        case 'b':
        case 'e':
            if (!coll__parse_size(optarg, c == 'b' ? &minb : &maxb)) {
                usage();
                return 2;
            }
            break;
        case 's': {
            int64_t v;
            if (!coll__parse_size(optarg, &v) || v < 1) {
                usage();
                return 2;
            }
            stream_bytes = (size_t)v;
            break;
        }
        case 'r':
            rounds = atoi(optarg);
            break;
        case 't':
            seconds = atof(optarg);
            break;
        default:
            usage();
            return 2;
        }
    }
    if (minb < 4096 || maxb < minb || rounds < 1 || rounds > MAX_ROUNDS || seconds <= 0) {
        usage();
        return 2;
    }
    buf_a = alloc_touch((size_t)maxb);
    buf_b = alloc_touch((size_t)maxb);
    buf_c = alloc_touch((size_t)maxb);
    buf_d = alloc_touch((size_t)maxb);
    buf_e = alloc_touch((size_t)maxb);
    buf_f = alloc_touch((size_t)maxb);
    pts = calloc(cap, sizeof(*pts));
    if (!buf_a || !buf_b || !buf_c || !buf_d || !buf_e || !buf_f || !pts) {
        fprintf(stderr, "reduce_bench: out of memory for %lld-byte buffers\n", (long long)maxb);
        return 1;
    }

    for (size_t bytes = (size_t)minb; bytes <= (size_t)maxb && npts + 64 < cap; bytes *= 4) {
        pts[npts++] = (struct point){.kind = K_CEIL, .dt = COLL_FLOAT32, .bytes = bytes};
        pts[npts++] = (struct point){.kind = K_MEMCPY, .dt = COLL_UINT8, .bytes = bytes};
        for (size_t i = 0; i < coll__reduce_nisas; i++) {
            const struct coll__reduce_isa *k = coll__reduce_isas[i];
            if (!k->supported() || !in_list(isas, k->name))
                continue;
            best = k;
            if (k->stream)
                pts[npts++] = (struct point){K_NTCOPY, k, COLL_UINT8, COLL_SUM, bytes, {0}};
            for (int dt = 0; dt < COLL_NUM_DTYPES; dt++)
                if (in_list(dtypes, coll__dtype_name(dt)))
                    pts[npts++] = (struct point){K_REDUCE, k, dt, COLL_SUM, bytes, {0}};
            if (in_list(dtypes, coll__dtype_name(COLL_FLOAT32)))
                pts[npts++] = (struct point){K_REDUCE, k, COLL_FLOAT32, COLL_MAX, bytes, {0}};
        }
        if (best) {
            pts[npts++] = (struct point){K_COPY, best, COLL_UINT8, COLL_SUM, bytes, {0}};
            pts[npts++] = (struct point){K_PLAIN, best, COLL_FLOAT32, COLL_SUM, bytes, {0}};
            pts[npts++] = (struct point){K_REDUCE2, best, COLL_FLOAT32, COLL_SUM, bytes, {0}};
            pts[npts++] = (struct point){K_REDUCEN, best, COLL_FLOAT32, COLL_SUM, bytes, {0}};
        }
    }

    for (int r = 0; r < rounds; r++)
        for (size_t i = 0; i < npts; i++)
            pts[i].gbps[r] = measure(&pts[i], seconds);

    printf("# reduce_bench: %d rounds, >= %.3f s per point per round; stream threshold %zu B; "
           "default ISA %s\n",
           rounds, seconds, stream_bytes, best ? best->name : "-");
    printf("kernel\tisa\tdtype\top\tbytes\tgbps_median\tgbps_min\tgbps_max\tof_ceil\n");
    for (size_t i = 0; i < npts; i++) {
        struct point *p = &pts[i];
        double ceil_med = 0, s[MAX_ROUNDS];

        for (size_t j = 0; j < npts; j++)
            if (pts[j].kind == K_CEIL && pts[j].bytes == p->bytes) {
                memcpy(s, pts[j].gbps, sizeof(double) * (size_t)rounds);
                qsort(s, (size_t)rounds, sizeof(double), cmp_double);
                ceil_med = s[rounds / 2];
            }
        memcpy(s, p->gbps, sizeof(double) * (size_t)rounds);
        qsort(s, (size_t)rounds, sizeof(double), cmp_double);
        printf("%s\t%s\t%s\t%s\t%zu\t%.2f\t%.2f\t%.2f\t%.2f\n", kind_names[p->kind],
               p->isa ? p->isa->name : "-", p->kind <= K_COPY ? "-" : coll__dtype_name(p->dt),
               p->kind <= K_COPY ? "-" : coll__op_name(p->op), p->bytes, s[rounds / 2], s[0],
               s[rounds - 1], ceil_med > 0 ? s[rounds / 2] / ceil_med : 0);
    }
    return 0;
}
