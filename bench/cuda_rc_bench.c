/*
 * cuda_rc_bench.c - the CUDA reduce-copy kernels (src/cuda/reduce_kernels.cu) against a
 * device-to-device copy on the same GPU, after checking their results on that GPU.
 *
 *   cuda_rc_bench [-b bytes] [-e bytes] [-d dtype,...|all] [-o op,...|all] [-k nsrcs,...]
 *                 [--dsts 1|2] [--device N] [-r rounds] [-n launches] [-w warmup] [-h]
 *
 * Defaults: 1 MiB to 1 GiB (x4 steps; bytes of one output), every dtype, sum, 2 inputs, one
 * output (--dsts 2 also measures two), device 0, 5 rounds of 20 launches after 5 warmup.
 * Dtypes by collbench's names (float, half, bf16, fp8_e4m3, ...).
 *
 * Check first: for every (dtype, op, inputs, outputs), one launch at 1027 elements with
 * every pointer one element off 16-byte alignment (the element-wise path) and one at an
 * odd count up to 16 MiB, aligned (the 16-byte path and its tail, over many blocks), on
 * random bits; each output must equal coll__cuda_ref_reduce_copy bit for bit (fp32/fp64
 * NaN payloads aside, cuda.h) and the elements around it must keep their poison.
 *
 * Timing, as collbench --memtype cuda: the host clock around a batch of -n launches queued
 * on one stream and the cudaStreamSynchronize that ends it, after -w warmup launches.
 * Bandwidth is memory traffic, bytes read + bytes written per second (1 GB = 1e9 B): a
 * reduce-copy of N bytes per buffer with k inputs and d outputs moves (k + d) N, the copy
 * (cudaMemcpyAsync device to device, default kind) 2 N. So a ratio of 1 means the kernel
 * streams memory as fast as cudaMemcpyAsync moves it. Rounds interleave all points, so
 * noise spreads over all of them; the median round is printed with the smallest and largest.
 *
 * Output: TSV on stdout, a header line, one row per point, then per dtype a "# summary" line:
 * the worst ratio at sizes of 64 MiB and up against the target, 0.9.
 * Exit status: 0 done (a missed target is a result); 1 no usable CUDA (the reason is
 * printed), out of device memory or a failed check; 2 bad arguments.
 */
#include "cuda/cuda.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#define MAX_ROUNDS 64
#define TARGET 0.9
#define TARGET_MIN_BYTES ((size_t)64 << 20)
#define CHECK_SMALL 1027                   /* elements, misaligned */
#define CHECK_BIG_BYTES ((size_t)16 << 20) /* several waves of blocks on current GPUs */
#define POISON 0xa5
#define STREAM_NON_BLOCKING 1 /* cudaStreamNonBlocking */

struct point {
    bool copy;
    coll_dtype_t dt;
    coll_op_t op;
    int k, nd;
    size_t bytes; /* of one buffer: count * element size */
    double sec[MAX_ROUNDS];
};

static const struct coll_cudart *rt;
static void *stream;
static uint8_t *dsrc[COLL_CUDA_MAX_SRCS], *ddst[COLL_CUDA_MAX_DSTS];
static uint8_t *hsrc[COLL_CUDA_MAX_SRCS], *hdst, *hwant;
static struct point *pts;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* AVG divides by the number of inputs, as the CUDA IPC path divides by the comm size */
static uint32_t divisor(coll_op_t op, int k)
{
    return op == COLL_AVG ? (uint32_t)k : 1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: cuda_rc_bench [-b bytes] [-e bytes] [-d dtype,...|all] "
               "[-o op,...|all] [-k nsrcs,...] [--dsts 1|2] [--device N] [-r rounds] "
               "[-n launches] [-w warmup] [-h]\n");
}

/* "2", "8", ... or a size with K, M, G */
static bool parse_int(const char *s, int lo, int hi, int *v_p)
{
    int64_t v;

    if (!coll__parse_size(s, &v) || v < lo || v > hi)
        return false;
    *v_p = (int)v;
    return true;
}

/* collbench's spellings besides coll__dtype_name's */
static const struct {
    const char *name;
    coll_dtype_t dt;
} aliases[] = {
    {"char", COLL_INT8},           {"int", COLL_INT32},           {"float16", COLL_FLOAT16},
    {"fp16", COLL_FLOAT16},        {"float32", COLL_FLOAT32},     {"fp32", COLL_FLOAT32},
    {"float64", COLL_FLOAT64},     {"fp64", COLL_FLOAT64},        {"bf16", COLL_BFLOAT16},
    {"fp8_e4m3", COLL_FLOAT8E4M3}, {"fp8_e5m2", COLL_FLOAT8E5M2},
};

/* A comma list of names into set[n]; name(i) spells member i, extra ones alias it. */
static bool parse_list(char *list, bool *set, int n, const char *(*name)(int), bool dtypes)
{
    memset(set, 0, (size_t)n * sizeof(*set));
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        bool found = false;
        for (int i = 0; i < n; i++)
            if (strcmp(t, "all") == 0 || strcmp(t, name(i)) == 0)
                set[i] = found = true;
        for (size_t a = 0; dtypes && a < sizeof(aliases) / sizeof(aliases[0]); a++)
            if (strcmp(t, aliases[a].name) == 0)
                set[aliases[a].dt] = found = true;
        if (!found)
            return false;
    }
    return true;
}
static const char *dtype_name(int i)
{
    return coll__dtype_name((coll_dtype_t)i);
}
static const char *op_name(int i)
{
    return coll__op_name((coll_op_t)i);
}

static bool cuda_ok(int err, const char *what)
{
    char text[256];

    if (err == 0)
        return true;
    coll__cuda_error_text(err, text, sizeof(text));
    fprintf(stderr, "cuda_rc_bench: %s failed: %s\n", what, text);
    return false;
}

static bool is_nan(coll_dtype_t dt, const uint8_t *p)
{
    float f;
    double d;

    if (dt == COLL_FLOAT32) {
        memcpy(&f, p, sizeof(f));
        return isnan(f);
    }
    if (dt == COLL_FLOAT64) {
        memcpy(&d, p, sizeof(d));
        return isnan(d);
    }
    return false; /* the narrow formats' NaN is canonical: compared as bits */
}

static uint64_t bits_of(const uint8_t *p, size_t es)
{
    uint64_t v = 0;
    memcpy(&v, p, es); /* little-endian hosts: the element's value */
    return v;
}

/*
 * One launch of count elements at element offset off into every buffer, on random bits
 * seeded by the case, against the CPU reference. The element before each output (off > 0)
 * and the one after it must keep their poison.
 */
static bool check_one(coll_dtype_t dt, coll_op_t op, int k, int nd, size_t count, size_t off)
{
    size_t es = coll__dtype_size(dt), bytes = count * es, span = (off + count + 1) * es;
    uint64_t x = 0x9e3779b97f4a7c15ull ^ ((uint64_t)dt << 40 | (uint64_t)op << 32 |
                                          (uint64_t)k << 24 | (uint64_t)nd << 16 | count);
    const void *sp[COLL_CUDA_MAX_SRCS], *hsp[COLL_CUDA_MAX_SRCS];
    void *dp[COLL_CUDA_MAX_DSTS], *wp[1] = {hwant};
    char what[160];

    snprintf(what, sizeof(what),
             "%s %s, %d inputs, %d output%s, %zu elements at element offset %zu",
             coll__dtype_name(dt), coll__op_name(op), k, nd, nd > 1 ? "s" : "", count, off);
    for (int s = 0; s < k; s++) {
        for (size_t b = 0; b < bytes; b++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            hsrc[s][b] = (uint8_t)(x >> 32);
        }
        if (!cuda_ok(rt->Memcpy(dsrc[s] + off * es, hsrc[s], bytes, COLL_CUDA_MEMCPY_DEFAULT),
                     "copying the check's input to the device"))
            return false;
        sp[s] = dsrc[s] + off * es;
        hsp[s] = hsrc[s];
    }
    for (int d = 0; d < nd; d++) {
        if (!cuda_ok(rt->Memset(ddst[d], POISON, span), "poisoning the check's output"))
            return false;
        dp[d] = ddst[d] + off * es;
    }
    if (coll__cuda_ref_reduce_copy(NULL, wp, 1, hsp, k, count, dt, op, divisor(op, k)) !=
            COLL_SUCCESS ||
        coll__cuda_reduce_copy(NULL, dp, nd, sp, k, count, dt, op, divisor(op, k), stream) !=
            COLL_SUCCESS) {
        fprintf(stderr, "cuda_rc_bench: %s: %s\n", what, coll_last_error(NULL));
        return false;
    }
    if (!cuda_ok(rt->StreamSynchronize(stream), "the check's kernel"))
        return false;
    for (int d = 0; d < nd; d++) {
        const uint8_t *got = hdst + off * es;
        if (!cuda_ok(rt->Memcpy(hdst, ddst[d], span, COLL_CUDA_MEMCPY_DEFAULT),
                     "copying the check's output back"))
            return false;
        for (size_t i = 0; i < count; i++) {
            const uint8_t *g = got + i * es, *w = hwant + i * es;
            if (memcmp(g, w, es) != 0 && !(is_nan(dt, g) && is_nan(dt, w))) {
                fprintf(stderr,
                        "cuda_rc_bench: check failed: %s: output %d, element %zu is 0x%llx "
                        "(reference 0x%llx)\n",
                        what, d, i, (unsigned long long)bits_of(g, es),
                        (unsigned long long)bits_of(w, es));
                return false;
            }
        }
        for (size_t b = 0; b < span; b++)
            if ((b < off * es || b >= off * es + bytes) && hdst[b] != POISON) {
                fprintf(stderr,
                        "cuda_rc_bench: check failed: %s: output %d, byte %zd "
                        "outside the output was written\n",
                        what, d, (ssize_t)b - (ssize_t)(off * es));
                return false;
            }
    }
    return true;
}

/* One batch: seconds per launch, or a negative value when a launch failed (said). */
static double time_batch(const struct point *p, int iters, int warmup)
{
    size_t es = coll__dtype_size(p->dt), count = p->bytes / es;
    const void *sp[COLL_CUDA_MAX_SRCS];
    void *dp[COLL_CUDA_MAX_DSTS];
    double t0 = 0;

    for (int s = 0; s < p->k; s++)
        sp[s] = dsrc[s];
    for (int d = 0; d < p->nd; d++)
        dp[d] = ddst[d];
    for (int i = -warmup; i < iters; i++) {
        if (i == 0) {
            if (!cuda_ok(rt->StreamSynchronize(stream), "warmup"))
                return -1;
            t0 = now();
        }
        if (p->copy) {
            if (!cuda_ok(
                    rt->MemcpyAsync(ddst[0], dsrc[0], p->bytes, COLL_CUDA_MEMCPY_DEFAULT, stream),
                    "cudaMemcpyAsync device to device"))
                return -1;
        } else if (coll__cuda_reduce_copy(NULL, dp, p->nd, sp, p->k, count, p->dt, p->op,
                                          divisor(p->op, p->k), stream) != COLL_SUCCESS) {
            fprintf(stderr, "cuda_rc_bench: %s\n", coll_last_error(NULL));
            return -1;
        }
    }
    if (!cuda_ok(rt->StreamSynchronize(stream), "the timed batch"))
        return -1;
    return (now() - t0) / iters;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Traffic in GB/s of the median, fastest and slowest rounds. */
static void rates(const struct point *p, int rounds, double *med_p, double *lo_p, double *hi_p)
{
    double s[MAX_ROUNDS], traffic = (double)p->bytes * (p->copy ? 2 : p->k + p->nd);

    memcpy(s, p->sec, sizeof(double) * (size_t)rounds);
    qsort(s, (size_t)rounds, sizeof(double), cmp_double);
    *med_p = traffic / s[rounds / 2] / 1e9;
    *lo_p = traffic / s[rounds - 1] / 1e9;
    *hi_p = traffic / s[0] / 1e9;
}

static void cleanup(void)
{
    for (int i = 0; i < COLL_CUDA_MAX_SRCS; i++) {
        if (dsrc[i])
            rt->Free(dsrc[i]);
        free(hsrc[i]);
    }
    for (int i = 0; i < COLL_CUDA_MAX_DSTS; i++)
        if (ddst[i])
            rt->Free(ddst[i]);
    if (stream)
        rt->StreamDestroy(stream);
    free(hdst);
    free(hwant);
    free(pts);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"dsts", required_argument, NULL, 'D'},
                                             {"device", required_argument, NULL, 'G'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    bool dtset[COLL_NUM_DTYPES], opset[COLL_NUM_OPS] = {[COLL_SUM] = true};
    bool kset[COLL_CUDA_MAX_SRCS + 1] = {[2] = true};
    int64_t minb = 1 << 20, maxb = (int64_t)1 << 30;
    int maxdsts = 1, device = 0, rounds = 5, iters = 20, warmup = 5, ndev = 0, kmax = 0;
    int c, nchecks = 0, rc = 1;
    size_t npts = 0, cap, bufbytes, hbytes, big;
    const char *why;

    for (int i = 0; i < COLL_NUM_DTYPES; i++)
        dtset[i] = true;
    while ((c = getopt_long(argc, argv, "b:e:d:o:k:r:n:w:h", longopts, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case 'b':
        case 'e':
            ok = coll__parse_size(optarg, c == 'b' ? &minb : &maxb);
            break;
        case 'd':
            ok = parse_list(optarg, dtset, COLL_NUM_DTYPES, dtype_name, true);
            break;
        case 'o':
            ok = parse_list(optarg, opset, COLL_NUM_OPS, op_name, false);
            break;
        case 'k':
            memset(kset, 0, sizeof(kset));
            for (char *save = NULL, *t = strtok_r(optarg, ",", &save); t && ok;
                 t = strtok_r(NULL, ",", &save)) {
                int k = 0;
                ok = parse_int(t, 1, COLL_CUDA_MAX_SRCS, &k);
                kset[k] = true;
            }
            break;
        case 'D':
            ok = parse_int(optarg, 1, COLL_CUDA_MAX_DSTS, &maxdsts);
            break;
        case 'G':
            ok = parse_int(optarg, 0, 1 << 20, &device);
            break;
        case 'r':
            ok = parse_int(optarg, 1, MAX_ROUNDS, &rounds);
            break;
        case 'n':
            ok = parse_int(optarg, 1, 1 << 20, &iters);
            break;
        case 'w':
            ok = parse_int(optarg, 0, 1 << 20, &warmup);
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            ok = false;
        }
        if (!ok) {
            if (c != '?')
                fprintf(stderr, "cuda_rc_bench: bad value '%s'\n", optarg);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "cuda_rc_bench: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (minb < 16 || maxb < minb || (uint64_t)maxb > SIZE_MAX / 64) {
        fprintf(stderr, "cuda_rc_bench: sizes must satisfy 16 <= -b <= -e\n");
        usage(stderr);
        return 2;
    }
    for (int k = 1; k <= COLL_CUDA_MAX_SRCS; k++)
        kmax = kset[k] ? k : kmax;

    if (coll__cuda_state(&why) != COLL_CUDA_READY) {
        fprintf(stderr, "cuda_rc_bench: no usable CUDA: %s\n", why);
        return 1;
    }
    if (!coll__cuda_have_kernels()) {
        fprintf(stderr, "cuda_rc_bench: coll was built without CUDA kernels (no nvcc)\n");
        return 1;
    }
    rt = coll__cudart();
    if (!rt->MemcpyAsync) {
        fprintf(stderr, "cuda_rc_bench: this libcudart has no cudaMemcpyAsync to compare with\n");
        return 1;
    }
    if (!cuda_ok(rt->GetDeviceCount(&ndev), "cudaGetDeviceCount"))
        return 1;
    if (device >= ndev) {
        fprintf(stderr, "cuda_rc_bench: --device %d: this process sees %d CUDA device(s)\n", device,
                ndev);
        usage(stderr);
        return 2;
    }
    if (!cuda_ok(rt->SetDevice(device), "cudaSetDevice") ||
        !cuda_ok(rt->StreamCreateWithFlags(&stream, STREAM_NON_BLOCKING), "creating a stream"))
        goto out;

    /* Room for the larger check and its one-element offset and guard on either side. */
    bufbytes = (size_t)maxb > CHECK_SMALL * 8 ? (size_t)maxb : CHECK_SMALL * 8;
    bufbytes += 64;
    big = (size_t)maxb < CHECK_BIG_BYTES ? (size_t)maxb : CHECK_BIG_BYTES;
    hbytes = (big > CHECK_SMALL * 8 ? big : CHECK_SMALL * 8) + 64;
    for (int i = 0; i < kmax || i < maxdsts; i++) {
        if ((i < kmax && !cuda_ok(rt->Malloc((void **)&dsrc[i], bufbytes), "cudaMalloc")) ||
            (i < maxdsts && !cuda_ok(rt->Malloc((void **)&ddst[i], bufbytes), "cudaMalloc"))) {
            fprintf(stderr,
                    "cuda_rc_bench: %d inputs and %d outputs of %zu bytes do not fit on "
                    "device %d (-e, -k)\n",
                    kmax, maxdsts, bufbytes, device);
            goto out;
        }
        if (i < kmax && !(hsrc[i] = malloc(hbytes)))
            goto out_nomem;
    }
    hdst = malloc(hbytes);
    hwant = malloc(hbytes);
    if (!hdst || !hwant)
        goto out_nomem;

    /* ---- check ---------------------------------------------------------------------- */
    for (int dt = 0; dt < COLL_NUM_DTYPES; dt++) {
        size_t es = coll__dtype_size((coll_dtype_t)dt), nbig = big / es - (big / es % 2 == 0);
        for (int op = 0; op < COLL_NUM_OPS; op++)
            for (int k = 1; k <= kmax; k++)
                for (int nd = 1; nd <= maxdsts && dtset[dt] && opset[op] && kset[k]; nd++) {
                    if (!check_one((coll_dtype_t)dt, (coll_op_t)op, k, nd, CHECK_SMALL, 1) ||
                        !check_one((coll_dtype_t)dt, (coll_op_t)op, k, nd, nbig, 0))
                        goto out;
                    nchecks++;
                }
    }

    /* ---- measure -------------------------------------------------------------------- */
    /* Defined contents (compute-sanitizer's initcheck), finite in every format and every op. */
    for (int i = 0; i < kmax || i < maxdsts; i++)
        if ((i < kmax && !cuda_ok(rt->Memset(dsrc[i], 0x3c, bufbytes), "cudaMemset")) ||
            (i < maxdsts && !cuda_ok(rt->Memset(ddst[i], 0, bufbytes), "cudaMemset")))
            goto out;
    cap = 64;
    for (size_t b = (size_t)minb; b <= (size_t)maxb; b *= 4)
        cap += 1 + (size_t)COLL_NUM_DTYPES * COLL_NUM_OPS * COLL_CUDA_MAX_SRCS * COLL_CUDA_MAX_DSTS;
    if (!(pts = calloc(cap, sizeof(*pts))))
        goto out_nomem;
    for (size_t b = (size_t)minb; b <= (size_t)maxb; b *= 4) {
        pts[npts++] = (struct point){.copy = true, .dt = COLL_UINT8, .k = 1, .nd = 1, .bytes = b};
        for (int dt = 0; dt < COLL_NUM_DTYPES; dt++)
            for (int op = 0; op < COLL_NUM_OPS; op++)
                for (int k = 1; k <= kmax; k++)
                    for (int nd = 1; nd <= maxdsts && dtset[dt] && opset[op] && kset[k]; nd++)
                        pts[npts++] = (struct point){false,
                                                     (coll_dtype_t)dt,
                                                     (coll_op_t)op,
                                                     k,
                                                     nd,
                                                     b / coll__dtype_size((coll_dtype_t)dt) *
                                                         coll__dtype_size((coll_dtype_t)dt),
                                                     {0}};
    }
    for (int r = 0; r < rounds; r++)
        for (size_t i = 0; i < npts; i++)
            if ((pts[i].sec[r] = time_batch(&pts[i], iters, warmup)) <= 0)
                goto out;

    printf("# cuda_rc_bench: device %d of %s; rounds %d, launches per batch %d, warmup %d; "
           "%d cases checked against the CPU reference; GB/s = (bytes read + bytes written) "
           "/ s / 1e9\n",
           device, why, rounds, iters, warmup, nchecks);
    printf("kernel\tdtype\top\tnsrcs\tndsts\tbytes\ttime_us\tgbps\tgbps_min\tgbps_max\t"
           "copy_gbps\tratio\n");
    {
        double copy = 0, worst[COLL_NUM_DTYPES] = {0};
        const struct point *worst_p[COLL_NUM_DTYPES] = {0};

        for (size_t i = 0; i < npts; i++) {
            const struct point *p = &pts[i];
            double med, lo, hi, t[MAX_ROUNDS];

            rates(p, rounds, &med, &lo, &hi);
            if (p->copy)
                copy = med;
            memcpy(t, p->sec, sizeof(double) * (size_t)rounds);
            qsort(t, (size_t)rounds, sizeof(double), cmp_double);
            printf("%s\t%s\t%s\t%d\t%d\t%zu\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.3f\n",
                   p->copy ? "copy" : "reduce_copy", p->copy ? "-" : coll__dtype_name(p->dt),
                   p->copy ? "-" : coll__op_name(p->op), p->k, p->nd, p->bytes, t[rounds / 2] * 1e6,
                   med, lo, hi, copy, med / copy);
            if (!p->copy && p->bytes >= TARGET_MIN_BYTES &&
                (!worst_p[p->dt] || med / copy < worst[p->dt])) {
                worst[p->dt] = med / copy;
                worst_p[p->dt] = p;
            }
        }
        for (int dt = 0; dt < COLL_NUM_DTYPES; dt++) {
            const struct point *p = worst_p[dt];
            if (!dtset[dt])
                continue;
            if (!p)
                printf("# summary %s: no size of 64 MiB or more measured, no verdict\n",
                       coll__dtype_name((coll_dtype_t)dt));
            else
                printf("# summary %s: worst ratio %.3f (%s, inputs %d, outputs %d, %.0f MiB): "
                       "%s (target %.2f)\n",
                       coll__dtype_name(p->dt), worst[dt], coll__op_name(p->op), p->k, p->nd,
                       (double)p->bytes / (1 << 20), worst[dt] >= TARGET ? "met" : "missed",
                       TARGET);
        }
    }
    rc = 0;
    goto out;
out_nomem:
    fprintf(stderr, "cuda_rc_bench: out of host memory\n");
out:
    cleanup();
    return rc;
}
