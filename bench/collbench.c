/*
 * collbench - a benchmark of coll's collectives in the manner of nccl-tests: the same flags,
 * the same table, the same bandwidth arithmetic, on host memory.
 *
 *   collrun -n 4 collbench allreduce -b 8 -e 128M -f 2 -c 1
 *
 * Under a launcher (collrun: COLL_UNIQUE_ID in the environment) it joins the launcher's
 * communicator; run alone it is a communicator of one rank.
 *
 * Per size, for out-of-place then in-place: with -c 1, fill the buffers with a pattern,
 * run once and count the wrong elements on every rank (summed over ranks); then warm up,
 * time the iterations, and report the slowest rank's average time per call:
 *   algbw = bytes / time (1 GB = 1e9 B)
 *   busbw = algbw * 2(n-1)/n for allreduce (what each rank's link carries in a ring),
 *           algbw for broadcast and reduce.
 *
 * The check patterns are exact: every value is a small integer (or a sparse 0/1, 1/2) chosen
 * so that any partial sum or product over n ranks stays exactly representable in the dtype,
 * so the expected result does not depend on the order in which ranks are combined.
 *
 * Divisions: dtypes and ops; options; check patterns; running one call; one row; main.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nothing beyond POSIX is needed; kept consistent with the tree */
#endif
#include <coll.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXIT_USAGE 2
/* Check patterns repeat every PERIOD elements: a prime, so that a chunk misplaced by a
 * power-of-two offset shows. */
#define PERIOD 1021
#define WINDOW 8    /* -z 0: requests in flight at once */
#define MIN_ITERS 3 /* -T bounds */
#define MAX_ITERS 20000

enum bench_coll { BENCH_ALLREDUCE, BENCH_BROADCAST, BENCH_REDUCE };

static const char *const coll_names[] = {"allreduce", "broadcast", "reduce"};

/* --------------------------------------------------------------------------------------
 * Dtypes and ops, by the names nccl-tests prints.
 */

struct dtype_info {
    const char *name;
    size_t size;
    bool is_signed;
    bool is_float;
    /* Every integer in [-exact, exact] (or [0, exact] unsigned) is representable. */
    uint64_t exact;
    /* Small floats: exponent and fraction bits and the bias (0 for the others). */
    int ebits, mbits, bias;
};

static const struct dtype_info dtypes[COLL_NUM_DTYPES] = {
    [COLL_INT8] = {"int8", 1, true, false, INT8_MAX, 0, 0, 0},
    [COLL_UINT8] = {"uint8", 1, false, false, UINT8_MAX, 0, 0, 0},
    [COLL_INT32] = {"int32", 4, true, false, INT32_MAX, 0, 0, 0},
    [COLL_UINT32] = {"uint32", 4, false, false, UINT32_MAX, 0, 0, 0},
    [COLL_INT64] = {"int64", 8, true, false, INT64_MAX, 0, 0, 0},
    [COLL_UINT64] = {"uint64", 8, false, false, INT64_MAX, 0, 0, 0}, /* int64 arithmetic */
    [COLL_FLOAT16] = {"half", 2, true, true, 1u << 11, 5, 10, 15},
    [COLL_FLOAT32] = {"float", 4, true, true, 1u << 24, 0, 0, 0},
    [COLL_FLOAT64] = {"double", 8, true, true, 1ull << 53, 0, 0, 0},
    [COLL_BFLOAT16] = {"bfloat16", 2, true, true, 1u << 8, 8, 7, 127},
    [COLL_FLOAT8E4M3] = {"f8e4m3", 1, true, true, 1u << 4, 4, 3, 7},
    [COLL_FLOAT8E5M2] = {"f8e5m2", 1, true, true, 1u << 3, 5, 2, 15},
};

static const char *const op_names[COLL_NUM_OPS] = {
    [COLL_SUM] = "sum", [COLL_PROD] = "prod", [COLL_MAX] = "max",
    [COLL_MIN] = "min", [COLL_AVG] = "avg",
};

/* --------------------------------------------------------------------------------------
 * Options.
 */

struct opts {
    enum bench_coll coll;
    uint64_t min_bytes, max_bytes, step_bytes;
    uint64_t step_factor; /* > 1: multiply; 0: add step_bytes */
    int iters, warmup;
    bool check, blocking;
    int root;
    double budget_s; /* -T; 0: use iters */
    int ndtypes, nops;
    coll_dtype_t dtype_list[COLL_NUM_DTYPES];
    coll_op_t op_list[COLL_NUM_OPS];
};

/* Under a launcher every rank parses the same arguments: only rank 0 complains. */
static bool quiet_rank(void)
{
    const char *r = getenv("COLL_RANK");
    return r && strcmp(r, "0") != 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: collbench allreduce|broadcast|reduce [flags]\n"
            "  -b SIZE   minimum size in bytes (K, M, G: binary suffixes; default 32M)\n"
            "  -e SIZE   maximum size in bytes (default 32M)\n"
            "  -f N      multiply the size by N each step (>= 2; default 2)\n"
            "  -i SIZE   add SIZE bytes each step instead\n"
            "  -n N      timed iterations per size (default 20)\n"
            "  -w N      warmup iterations per size (default 5)\n"
            "  -T SEC    time budget per size: picks the iterations (%d..%d) instead of -n\n"
            "  -c 0|1    check the results (default 1)\n"
            "  -o OP     sum|prod|min|max|avg|all (default sum)\n"
            "  -d TYPE   int8|uint8|int32|uint32|int64|uint64|half|float|double|bfloat16|\n"
            "            f8e4m3|f8e5m2|all (default float)\n"
            "  -r ROOT   root of broadcast and reduce (default 0)\n"
            "  -z 0|1    1: blocking calls; 0: non-blocking calls and waits (default 0)\n"
            "Run it under collrun for more than one rank: collrun -n 4 collbench allreduce\n",
            MIN_ITERS, MAX_ITERS);
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;

    if (quiet_rank())
        return EXIT_USAGE;
    fprintf(stderr, "collbench: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    usage(stderr);
    return EXIT_USAGE;
}

/* Decimal bytes with an optional binary suffix K, M or G. */
static bool parse_size(const char *s, uint64_t *v_p)
{
    uint64_t v = 0, mult = 1;
    const char *p = s;

    if (*p < '0' || *p > '9')
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    switch (*p) {
    case 'K':
    case 'k':
        mult = 1ull << 10;
        p++;
        break;
    case 'M':
    case 'm':
        mult = 1ull << 20;
        p++;
        break;
    case 'G':
    case 'g':
        mult = 1ull << 30;
        p++;
        break;
    default:
        break;
    }
    /* Buffers of this size must be addressable, twice, with room to spare. */
    if (*p != '\0' || v > (SIZE_MAX / 4) / mult)
        return false;
    *v_p = v * mult;
    return true;
}

static bool parse_int(const char *s, long lo, long hi, int *v_p)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *v_p = (int)v;
    return true;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    bool factor_set = false, step_set = false;
    int factor = 2;

    *o = (struct opts){
        .min_bytes = 32u << 20,
        .max_bytes = 32u << 20,
        .step_bytes = 1u << 20,
        .iters = 20,
        .warmup = 5,
        .check = true,
        .blocking = false,
        .root = 0,
        .ndtypes = 1,
        .dtype_list = {COLL_FLOAT32},
        .nops = 1,
        .op_list = {COLL_SUM},
    };
    if (argc < 2)
        return usage_error("missing collective");
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "allreduce") == 0)
        o->coll = BENCH_ALLREDUCE;
    else if (strcmp(argv[1], "broadcast") == 0)
        o->coll = BENCH_BROADCAST;
    else if (strcmp(argv[1], "reduce") == 0)
        o->coll = BENCH_REDUCE;
    else
        return usage_error("unknown collective '%s'", argv[1]);

    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v;
        int iv;

        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (a[0] != '-' || a[1] == '\0' || a[1] == '-')
            return usage_error("unexpected argument '%s'", a);
        if (!strchr("befinwTcodrz", a[1]))
            return usage_error("unknown flag '%s'", a);
        if (a[2] != '\0')
            v = a + 2; /* -b8 */
        else if (i + 1 < argc)
            v = argv[++i];
        else
            return usage_error("flag '%s' needs a value", a);

        switch (a[1]) {
        case 'b':
            if (!parse_size(v, &o->min_bytes))
                return usage_error("bad size '%s' for -b", v);
            break;
        case 'e':
            if (!parse_size(v, &o->max_bytes))
                return usage_error("bad size '%s' for -e", v);
            break;
        case 'i':
            if (!parse_size(v, &o->step_bytes) || o->step_bytes == 0)
                return usage_error("bad step '%s' for -i (bytes, > 0)", v);
            step_set = true;
            break;
        case 'f':
            if (!parse_int(v, 0, 1 << 20, &factor))
                return usage_error("bad step factor '%s'", v);
            factor_set = true;
            break;
        case 'n':
            if (!parse_int(v, 1, 1000000000, &o->iters))
                return usage_error("bad iteration count '%s' (>= 1)", v);
            break;
        case 'w':
            if (!parse_int(v, 0, 1000000000, &o->warmup))
                return usage_error("bad warmup count '%s' (>= 0)", v);
            break;
        case 'T': {
            char *end;
            errno = 0;
            o->budget_s = strtod(v, &end);
            if (errno || end == v || *end != '\0' || !isfinite(o->budget_s) || o->budget_s <= 0 ||
                o->budget_s > 86400)
                return usage_error("bad time budget '%s' (seconds, > 0)", v);
            break;
        }
        case 'c':
            if (!parse_int(v, 0, 1, &iv))
                return usage_error("bad value '%s' for -c (0 or 1)", v);
            o->check = iv;
            break;
        case 'z':
            if (!parse_int(v, 0, 1, &iv))
                return usage_error("bad value '%s' for -z (0 or 1)", v);
            o->blocking = iv;
            break;
        case 'r':
            if (!parse_int(v, 0, INT32_MAX, &o->root))
                return usage_error("bad root '%s'", v);
            break;
        case 'o':
            o->nops = 0;
            for (int k = 0; k < COLL_NUM_OPS; k++)
                if (strcmp(v, "all") == 0 || strcmp(v, op_names[k]) == 0)
                    o->op_list[o->nops++] = (coll_op_t)k;
            if (o->nops == 0)
                return usage_error("unknown op '%s'", v);
            break;
        case 'd':
            o->ndtypes = 0;
            for (int k = 0; k < COLL_NUM_DTYPES; k++)
                if (strcmp(v, "all") == 0 || strcmp(v, dtypes[k].name) == 0)
                    o->dtype_list[o->ndtypes++] = (coll_dtype_t)k;
            if (o->ndtypes == 0)
                return usage_error("unknown dtype '%s'", v);
            break;
        }
    }
    /* As nccl-tests: a factor of 2 or more multiplies; otherwise -i adds. */
    if (factor_set && factor < 2 && !step_set)
        return usage_error("step factor %d: must be >= 2 (or give -i)", factor);
    o->step_factor = (factor_set && factor < 2) || (step_set && !factor_set) ? 0 : (uint64_t)factor;
    if (o->min_bytes > o->max_bytes)
        return usage_error("minimum size %" PRIu64 " (-b) exceeds the maximum %" PRIu64 " (-e)",
                           o->min_bytes, o->max_bytes);
    if (o->coll == BENCH_BROADCAST)
        o->nops = 1; /* broadcast has no op: one pass, printed "none" */
    return -1;
}

/* --------------------------------------------------------------------------------------
 * Check patterns. Values are integers as int64; the element at index i of rank r is
 * pattern(r, i % PERIOD), so a period's worth of values and expected results is enough.
 */

/* Round x to the nearest (ties to even) value of a small binary float with mbits fraction
 * bits, and return its bits. Finite, in-range x only: the patterns never overflow. */
static uint32_t encode_small_float(double x, const struct dtype_info *d)
{
    uint32_t sign = signbit(x) ? 1u << (d->ebits + d->mbits) : 0;
    double a = fabs(x), m;
    int emin = 1 - d->bias, e;

    if (a == 0)
        return sign;
    (void)frexp(a, &e);
    e -= 1; /* a = 1.f * 2^e */
    if (e < emin)
        e = emin;                          /* subnormal: the quantum stops shrinking */
    m = nearbyint(ldexp(a, d->mbits - e)); /* a in quanta of 2^(e - mbits), rounded */
    if (m >= ldexp(1.0, d->mbits + 1)) {   /* rounded up into the next binade */
        m /= 2;
        e += 1;
    }
    if (m < ldexp(1.0, d->mbits))
        return sign | (uint32_t)m; /* subnormal or zero: exponent field 0 */
    return sign | ((uint32_t)(e + d->bias) << d->mbits) | ((uint32_t)m - (1u << d->mbits));
}

/* Store v (already rounded, or exact) as element i of buf. */
static void store(void *buf, size_t i, coll_dtype_t dt, int64_t iv, double fv, bool use_fv)
{
    const struct dtype_info *d = &dtypes[dt];
    double x = use_fv ? fv : (double)iv;

    switch (dt) {
    case COLL_INT8:
        ((int8_t *)buf)[i] = (int8_t)iv;
        break;
    case COLL_UINT8:
        ((uint8_t *)buf)[i] = (uint8_t)iv;
        break;
    case COLL_INT32:
        ((int32_t *)buf)[i] = (int32_t)iv;
        break;
    case COLL_UINT32:
        ((uint32_t *)buf)[i] = (uint32_t)iv;
        break;
    case COLL_INT64:
        ((int64_t *)buf)[i] = iv;
        break;
    case COLL_UINT64:
        ((uint64_t *)buf)[i] = (uint64_t)iv;
        break;
    case COLL_FLOAT32:
        ((float *)buf)[i] = (float)x;
        break;
    case COLL_FLOAT64:
        ((double *)buf)[i] = x;
        break;
    case COLL_FLOAT16:
    case COLL_BFLOAT16:
        ((uint16_t *)buf)[i] = (uint16_t)encode_small_float(x, d);
        break;
    case COLL_FLOAT8E4M3:
    case COLL_FLOAT8E5M2:
        ((uint8_t *)buf)[i] = (uint8_t)encode_small_float(x, d);
        break;
    default:
        break;
    }
}

/* Element j of rank r's pattern for a run of op over nranks ranks. */
static int64_t pattern(coll_dtype_t dt, coll_op_t op, int r, int nranks, size_t j)
{
    const struct dtype_info *d = &dtypes[dt];
    uint64_t n = (uint64_t)nranks, mag;
    bool neg;

    if (op == COLL_PROD) {
        /* Mostly 1, a few 2: at most k twos per element over all ranks, 2^k exact. */
        uint64_t k = 0, p;
        while (k < 16 && (2ull << k) <= d->exact)
            k++;
        p = (n + k - 1) / k;
        if (p < 2)
            p = 2;
        mag = ((uint64_t)r + j) % p == 0 ? 2 : 1;
        neg = d->is_signed && ((uint64_t)r * 7 + j) % 5 == 0;
    } else {
        /* |value| <= a, so any partial sum over n ranks stays within exact; when even 1
         * per rank is too much (fp8 with many ranks), a sparse 0/1 does. */
        uint64_t a = d->exact / n;
        if (a > 1000)
            a = 1000;
        if (a >= 1) {
            mag = (((uint64_t)r + 1) * (j % 13 + 1) + j / 13) % (a + 1);
        } else {
            uint64_t p = (n + d->exact - 1) / d->exact;
            mag = ((uint64_t)r + j) % p == 0;
        }
        neg = d->is_signed && ((uint64_t)r + 2 * j) % 3 == 1;
    }
    return neg ? -(int64_t)mag : (int64_t)mag;
}

/* One period of rank r's send pattern, as elements of dt. */
static void make_pattern(void *pat, coll_dtype_t dt, coll_op_t op, int r, int nranks)
{
    for (size_t j = 0; j < PERIOD; j++)
        store(pat, j, dt, pattern(dt, op, r, nranks, j), 0, false);
}

/* One period of op over all ranks' patterns, rounded as coll documents: exact sums and
 * products, then for AVG one division by nranks (truncating for integers; in fp32, then
 * rounded once, for the 16- and 8-bit floats). */
static void make_expected(void *exp, coll_dtype_t dt, coll_op_t op, int nranks)
{
    const struct dtype_info *d = &dtypes[dt];

    for (size_t j = 0; j < PERIOD; j++) {
        int64_t acc = pattern(dt, op, 0, nranks, j);

        for (int r = 1; r < nranks; r++) {
            int64_t v = pattern(dt, op, r, nranks, j);
            switch (op) {
            case COLL_SUM:
            case COLL_AVG:
                acc += v;
                break;
            case COLL_PROD:
                acc *= v;
                break;
            case COLL_MAX:
                acc = v > acc ? v : acc;
                break;
            case COLL_MIN:
                acc = v < acc ? v : acc;
                break;
            default:
                break;
            }
        }
        if (op != COLL_AVG)
            store(exp, j, dt, acc, 0, false);
        else if (!d->is_float)
            store(exp, j, dt, acc / nranks, 0, false);
        else if (dt == COLL_FLOAT64)
            store(exp, j, dt, 0, (double)acc / (double)nranks, true);
        else
            store(exp, j, dt, 0, (double)((float)acc / (float)nranks), true);
    }
}

/* buf[0, count) = the period pat repeated. */
static void fill_periodic(void *buf, const void *pat, size_t count, size_t esize)
{
    size_t total = count * esize, done = (count < PERIOD ? count : PERIOD) * esize;

    if (total == 0)
        return;
    memcpy(buf, pat, done);
    /* Doubling keeps every copy a whole number of periods from the start. */
    while (done < total) {
        size_t n = done < total - done ? done : total - done;
        memcpy((char *)buf + done, buf, n);
        done += n;
    }
}

/* Elements of buf[0, count) that differ from the period exp repeated. */
static uint64_t count_wrong(const void *buf, const void *exp, size_t count, size_t esize)
{
    const char *b = buf, *e = exp;
    uint64_t wrong = 0;

    for (size_t start = 0; start < count; start += PERIOD) {
        size_t n = count - start < PERIOD ? count - start : PERIOD;
        if (memcmp(b + start * esize, e, n * esize) == 0)
            continue;
        for (size_t j = 0; j < n; j++)
            wrong += memcmp(b + (start + j) * esize, e + j * esize, esize) != 0;
    }
    return wrong;
}

/* --------------------------------------------------------------------------------------
 * Running one call, and a window of them.
 */

struct bench {
    struct opts o;
    coll_comm_t *comm;
    int rank, nranks;
    void *sendbuf, *recvbuf;
    void *pat, *exp; /* one period: this rank's pattern; the expected result */
    uint64_t wrong_total;
    double busbw_sum;
    int nresults;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int lib_error(struct bench *b, const char *what, coll_status_t st)
{
    fprintf(stderr, "collbench: rank %d: %s failed: %s: %s\n", b->rank, what,
            coll_status_string(st), coll_last_error(b->comm));
    return 1;
}

static coll_status_t post(struct bench *b, const void *s, void *r, size_t count, coll_dtype_t dt,
                          coll_op_t op, coll_request_t **req_p)
{
    int root = b->o.root;

    switch (b->o.coll) {
    case BENCH_ALLREDUCE:
        return req_p ? coll_iallreduce(s, r, count, dt, op, b->comm, req_p)
                     : coll_allreduce(s, r, count, dt, op, b->comm);
    case BENCH_BROADCAST:
        return req_p ? coll_ibroadcast(s, r, count, dt, root, b->comm, req_p)
                     : coll_broadcast(s, r, count, dt, root, b->comm);
    case BENCH_REDUCE:
        return req_p ? coll_ireduce(s, r, count, dt, op, root, b->comm, req_p)
                     : coll_reduce(s, r, count, dt, op, root, b->comm);
    }
    return COLL_INTERNAL_ERROR;
}

/* iters calls, blocking or with up to WINDOW non-blocking ones in flight. Every request
 * is waited for, even after a failure: coll owns them until then. */
static coll_status_t run_calls(struct bench *b, const void *s, void *r, size_t count,
                               coll_dtype_t dt, coll_op_t op, int iters)
{
    coll_request_t *win[WINDOW];
    coll_status_t first = COLL_SUCCESS, st;
    int head = 0, inflight = 0;

    for (int it = 0; it < iters && first == COLL_SUCCESS; it++) {
        if (b->o.blocking) {
            first = post(b, s, r, count, dt, op, NULL);
            continue;
        }
        if (inflight == WINDOW) {
            st = coll_wait(win[head]);
            head = (head + 1) % WINDOW;
            inflight--;
            if (st != COLL_SUCCESS) {
                first = st;
                break;
            }
        }
        st = post(b, s, r, count, dt, op, &win[(head + inflight) % WINDOW]);
        if (st != COLL_SUCCESS)
            first = st;
        else
            inflight++;
    }
    while (inflight > 0) {
        st = coll_wait(win[head]);
        head = (head + 1) % WINDOW;
        inflight--;
        if (first == COLL_SUCCESS)
            first = st;
    }
    return first;
}

/* --------------------------------------------------------------------------------------
 * One row: a size, a dtype and an op; out-of-place then in-place.
 */

struct column {
    double time_us;
    uint64_t wrong;
};

/* Fill, run once, and count wrong elements on this rank. */
static int check_once(struct bench *b, bool in_place, size_t count, coll_dtype_t dt, coll_op_t op,
                      uint64_t *wrong_p)
{
    size_t es = dtypes[dt].size;
    void *s = b->sendbuf, *r = in_place ? b->sendbuf : b->recvbuf;
    bool is_root = b->rank == b->o.root;
    coll_status_t st;
    uint64_t wrong = 0;

    if (b->o.coll == BENCH_BROADCAST) {
        /* Everyone's expected result is the root's pattern; only root's buffer is sent. */
        make_pattern(b->exp, dt, COLL_SUM, b->o.root, b->nranks);
        make_pattern(b->pat, dt, COLL_SUM, b->rank, b->nranks);
        fill_periodic(s, is_root ? b->exp : b->pat, count, es);
    } else {
        make_pattern(b->pat, dt, op, b->rank, b->nranks);
        make_expected(b->exp, dt, op, b->nranks);
        fill_periodic(s, b->pat, count, es);
    }
    if (!in_place)
        memset(r, 0xff, count * es); /* NaN or -1: not a result any pattern gives */
    else if (b->o.coll == BENCH_BROADCAST && !is_root)
        memset(r, 0xff, count * es);
    st = run_calls(b, s, r, count, dt, op, 1);
    if (st != COLL_SUCCESS)
        return lib_error(b, coll_names[b->o.coll], st);
    if (b->o.coll != BENCH_REDUCE || is_root)
        wrong += count_wrong(r, b->exp, count, es);
    /* An out-of-place call must leave the send buffer alone, on every rank. */
    if (!in_place)
        wrong +=
            count_wrong(s, b->o.coll == BENCH_BROADCAST && is_root ? b->exp : b->pat, count, es);
    *wrong_p = wrong;
    return 0;
}

static int time_column(struct bench *b, bool in_place, size_t count, coll_dtype_t dt, coll_op_t op,
                       struct column *col)
{
    void *s = b->sendbuf, *r = in_place ? b->sendbuf : b->recvbuf;
    const char *what = coll_names[b->o.coll];
    int warmup = b->o.warmup, one = 1;
    double t0, t;
    int64_t iters = b->o.iters;
    coll_status_t st;

    col->wrong = 0;
    if (b->o.check) {
        uint64_t wrong;
        if (check_once(b, in_place, count, dt, op, &wrong))
            return 1;
        st = coll_allreduce(&wrong, &col->wrong, 1, COLL_UINT64, COLL_SUM, b->comm);
        if (st != COLL_SUCCESS)
            return lib_error(b, "allreduce of the wrong-element counts", st);
    }
    if (b->o.budget_s > 0 && warmup == 0)
        warmup = 1; /* the budget needs one call to measure */
    t0 = now_s();
    st = run_calls(b, s, r, count, dt, op, warmup);
    t = now_s() - t0;
    if (st != COLL_SUCCESS)
        return lib_error(b, what, st);
    if (b->o.budget_s > 0) {
        /* Rank 0 decides, so that every rank runs the same number of calls. Half the
         * budget goes to each column. */
        double per_call = t / warmup;
        double want = per_call > 0 ? b->o.budget_s / 2 / per_call : MAX_ITERS;
        iters = want < MIN_ITERS ? MIN_ITERS : want > MAX_ITERS ? MAX_ITERS : (int64_t)want;
        st = coll_broadcast(&iters, &iters, 1, COLL_INT64, 0, b->comm);
        if (st != COLL_SUCCESS)
            return lib_error(b, "broadcast of the iteration count", st);
        if (iters < MIN_ITERS || iters > MAX_ITERS) {
            fprintf(stderr, "collbench: rank %d: rank 0 sent iteration count %" PRId64 "\n",
                    b->rank, iters);
            return 1;
        }
    }
    /* Start together, so that the slowest rank's time is not its wait for the others. */
    st = coll_allreduce(&one, &one, 1, COLL_INT32, COLL_SUM, b->comm);
    if (st != COLL_SUCCESS)
        return lib_error(b, "allreduce (start barrier)", st);
    t0 = now_s();
    st = run_calls(b, s, r, count, dt, op, (int)iters);
    t = (now_s() - t0) / (double)iters;
    if (st != COLL_SUCCESS)
        return lib_error(b, what, st);
    st = coll_allreduce(&t, &col->time_us, 1, COLL_FLOAT64, COLL_MAX, b->comm);
    if (st != COLL_SUCCESS)
        return lib_error(b, "allreduce of the times", st);
    col->time_us *= 1e6;
    return 0;
}

static void format_time(char *buf, size_t n, double us)
{
    snprintf(buf, n, us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
}

static double bus_factor(const struct bench *b)
{
    if (b->o.coll == BENCH_ALLREDUCE && b->nranks > 1)
        return 2.0 * (b->nranks - 1) / b->nranks;
    return 1.0;
}

static int run_row(struct bench *b, size_t count, coll_dtype_t dt, coll_op_t op)
{
    size_t bytes = count * dtypes[dt].size;
    struct column cols[2];
    char line[512];
    size_t len;

    for (int ip = 0; ip < 2; ip++)
        if (time_column(b, ip == 1, count, dt, op, &cols[ip]))
            return 1;
    len = (size_t)snprintf(line, sizeof(line), "%12zu  %12zu  %8s  %6s  %6d", bytes, count,
                           dtypes[dt].name, b->o.coll == BENCH_BROADCAST ? "none" : op_names[op],
                           b->o.coll == BENCH_ALLREDUCE ? -1 : b->o.root);
    for (int ip = 0; ip < 2; ip++) {
        double algbw = cols[ip].time_us > 0 ? (double)bytes / (cols[ip].time_us * 1e3) : 0;
        double busbw = algbw * bus_factor(b);
        char tbuf[32], wbuf[32];

        format_time(tbuf, sizeof(tbuf), cols[ip].time_us);
        if (b->o.check)
            snprintf(wbuf, sizeof(wbuf), "%5" PRIu64, cols[ip].wrong);
        else
            snprintf(wbuf, sizeof(wbuf), "%5s", "N/A");
        /* Fields are bounded (times and rates are finite and small); the check only keeps
         * a surprise from writing past the line. */
        if (len < sizeof(line))
            len += (size_t)snprintf(line + len, sizeof(line) - len, "  %7s  %6.2f  %6.2f  %5s",
                                    tbuf, algbw, busbw, wbuf);
        b->wrong_total += cols[ip].wrong;
        b->busbw_sum += busbw;
        b->nresults++;
    }
    if (b->rank == 0) {
        printf("%s\n", line);
        fflush(stdout);
    }
    return 0;
}

/* --------------------------------------------------------------------------------------
 * main
 */

static void print_header(const struct bench *b)
{
    const struct opts *o = &b->o;
    int version = 0;
    char iters[64];

    if (b->rank != 0)
        return;
    if (coll_get_version(&version) != COLL_SUCCESS)
        version = 0;
    if (o->budget_s > 0)
        snprintf(iters, sizeof(iters), "auto (%g s per size)", o->budget_s);
    else
        snprintf(iters, sizeof(iters), "%d", o->iters);
    printf("# collbench %s: nranks %d minBytes %" PRIu64 " maxBytes %" PRIu64, coll_names[o->coll],
           b->nranks, o->min_bytes, o->max_bytes);
    if (o->step_factor)
        printf(" step: %" PRIu64 "(factor)", o->step_factor);
    else
        printf(" step: %" PRIu64 "(bytes)", o->step_bytes);
    printf(" warmup iters: %d iters: %s validation: %d blocking: %d\n", o->warmup, iters, o->check,
           o->blocking);
    printf("#\n# Using host memory, coll %d.%d.%d\n#\n", version / 10000, version / 100 % 100,
           version % 100);
    printf("#                                                              out-of-place"
           "                       in-place\n");
    printf("#       size         count      type   redop    root     time   algbw   busbw"
           " #wrong     time   algbw   busbw #wrong\n");
    printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
           "            (us)  (GB/s)  (GB/s)\n");
    fflush(stdout);
}

static uint64_t next_size(const struct opts *o, uint64_t size)
{
    uint64_t next;

    if (o->step_factor == 0)
        next = size + o->step_bytes;
    else if (size == 0)
        next = 1; /* 0 * factor would never grow */
    else
        next = size > UINT64_MAX / o->step_factor ? UINT64_MAX : size * o->step_factor;
    return next < size ? UINT64_MAX : next;
}

static int run_sweeps(struct bench *b)
{
    for (int d = 0; d < b->o.ndtypes; d++) {
        coll_dtype_t dt = b->o.dtype_list[d];
        size_t es = dtypes[dt].size;

        for (int k = 0; k < b->o.nops; k++) {
            size_t last_count = SIZE_MAX;

            for (uint64_t size = b->o.min_bytes; size <= b->o.max_bytes;
                 size = next_size(&b->o, size)) {
                size_t count = (size_t)size / es;

                if (count == last_count)
                    continue; /* sizes below one element repeat count 0 */
                last_count = count;
                if (run_row(b, count, dt, b->o.op_list[k]))
                    return 1;
                if (size == UINT64_MAX)
                    break;
            }
        }
    }
    return 0;
}

static bool launched(void)
{
    return getenv("COLL_UNIQUE_ID") || getenv("COLL_SIZE");
}

static coll_status_t comm_open(coll_comm_t **comm_p)
{
    coll_unique_id_t id;
    coll_status_t st;

    if (launched())
        return coll_comm_init_env(comm_p);
    /* Alone: a communicator of one rank, its root in this process. */
    st = coll_get_unique_id(&id);
    if (st != COLL_SUCCESS)
        return st;
    return coll_comm_init(comm_p, 1, &id, 0);
}

int main(int argc, char **argv)
{
    struct bench b = {.comm = NULL};
    size_t bufsize;
    coll_status_t st;
    int rc, ok, all_ok;

    rc = parse_opts(argc, argv, &b.o);
    if (rc >= 0)
        return rc;
    st = comm_open(&b.comm);
    if (st != COLL_SUCCESS) {
        fprintf(stderr, "collbench: cannot join the communicator: %s: %s\n", coll_status_string(st),
                coll_last_error(NULL));
        return 1;
    }
    rc = 1;
    if ((st = coll_comm_rank(b.comm, &b.rank)) != COLL_SUCCESS ||
        (st = coll_comm_size(b.comm, &b.nranks)) != COLL_SUCCESS) {
        lib_error(&b, "coll_comm_rank/size", st);
        goto out_destroy;
    }
    if (b.o.coll != BENCH_ALLREDUCE && b.o.root >= b.nranks) {
        if (b.rank == 0) {
            fprintf(stderr, "collbench: root %d out of range for %d rank%s\n", b.o.root, b.nranks,
                    b.nranks == 1 ? "" : "s");
            usage(stderr);
        }
        rc = EXIT_USAGE;
        goto out_destroy;
    }

    /* Every rank must get its buffers, or none goes on: one rank missing from the first
     * collective would hold the others until the timeout. */
    bufsize = (size_t)b.o.max_bytes + 64; /* never 0; a little slack against overruns */
    b.sendbuf = malloc(bufsize);
    b.recvbuf = malloc(bufsize);
    b.pat = malloc(PERIOD * sizeof(uint64_t));
    b.exp = malloc(PERIOD * sizeof(uint64_t));
    ok = b.sendbuf && b.recvbuf && b.pat && b.exp;
    if (!ok)
        fprintf(stderr, "collbench: rank %d: cannot allocate 2 x %zu bytes\n", b.rank, bufsize);
    st = coll_allreduce(&ok, &all_ok, 1, COLL_INT32, COLL_MIN, b.comm);
    if (st != COLL_SUCCESS) {
        lib_error(&b, "allreduce", st);
        goto out_free;
    }
    if (!all_ok)
        goto out_free;
    /* Untouched pages would make the first size pay for page faults. */
    memset(b.sendbuf, 0, bufsize);
    memset(b.recvbuf, 0, bufsize);

    print_header(&b);
    if (run_sweeps(&b))
        goto out_free;
    if (b.rank == 0) {
        printf("# Out of bounds values : %" PRIu64 " %s\n", b.wrong_total,
               b.wrong_total ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g\n", b.nresults ? b.busbw_sum / b.nresults : 0.0);
        printf("#\n");
        fflush(stdout);
    }
    rc = b.wrong_total ? 1 : 0;

out_free:
    free(b.sendbuf);
    free(b.recvbuf);
    free(b.pat);
    free(b.exp);
out_destroy:
    st = coll_comm_destroy(b.comm);
    if (st != COLL_SUCCESS && rc == 0)
        rc = lib_error(&b, "coll_comm_destroy", st);
    return rc;
}
