/*
 * mp_quant.c - the quantized all-reduce across real processes, run under collrun:
 *
 *   collrun -n N mp_quant bounds|feedback|bytes|nonfinite|env|hier|badargs
 *
 * Every rank can generate every rank's input (a hash of rank, step and index), so each
 * checks its own result against the exact fp64 sum and against the codec's error bound,
 * and all ranks compare a hash of their results (they must be bitwise identical). Any
 * failure exits non-zero naming the element; collrun then fails the run.
 *
 * The error bound asserted per element, for either exchange and any number of ranks n:
 *   sum_p b(x_p) [/ n for avg]  +  b(result)   (the second term for SCATTER only)
 * with b the codec's round-trip bound (quant.h) on the element's own block; plus fp32
 * rounding of the sums. Quantize-once means this is all: the factor in front of the
 * codec bounds is 1 whatever n is.
 */
#include "coll.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mp_util.h"

static const char *const codec_names[COLL_QUANT_NUM_CODECS] = {
    "fp16", "bf16", "int8", "e4m3", "e5m2", "int4", "e3m0", "sign1"};

/* ---- inputs and references ------------------------------------------------------------- */

static uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* Rank r's element i at step t: uniform in (-1, 1) times 2^k, k from -4 to 4 in runs of 37
 * elements, so that blocks hold values of different magnitudes. Exact in fp16 and bf16
 * too (8 significant bits), so the three source dtypes see the same numbers. */
static float input(int r, uint32_t t, size_t i)
{
    uint32_t h = mix(mix((uint32_t)i * 2654435761u ^ (uint32_t)r) ^ t * 0x9e3779b9u);
    float u = (float)((int32_t)(h >> 24) - 128) / 128.0f;
    return ldexpf(u, (int)((i / 37) % 9) - 4);
}

static float to_f16_exact(uint16_t *dst, float v, coll_dtype_t dt)
{
    uint32_t b;
    memcpy(&b, &v, 4);
    if (dt == COLL_BFLOAT16) {
        *dst = (uint16_t)(b >> 16); /* 8 significant bits: exact */
        return v;
    }
    /* fp16: |v| in [2^-11, 4), 8 significant bits: exact, normal */
    if (v == 0.0f) {
        *dst = (uint16_t)(b >> 16);
        return v;
    }
    {
        uint32_t s = (b >> 16) & 0x8000u, e = ((b >> 23) & 0xffu) - 127 + 15;
        uint32_t m = (b >> 13) & 0x3ffu;
        *dst = (uint16_t)(s | e << 10 | m);
    }
    return v;
}

static float from16(uint16_t h, coll_dtype_t dt)
{
    uint32_t b;
    float f;
    if (dt == COLL_BFLOAT16) {
        b = (uint32_t)h << 16;
    } else {
        uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
        if (e == 0x1f)
            b = s | 0x7f800000u | m << 13;
        else if (e == 0) {
            f = ldexpf((float)m, -24);
            return (h & 0x8000u) ? -f : f;
        } else
            b = s | (e - 15 + 127) << 23 | m << 13;
    }
    memcpy(&f, &b, 4);
    return f;
}

/* The round-trip bound of one element of magnitude x in a block of maximum amax
 * (quant.h's table; deterministic rounding). */
static double bound(int codec, double x, double amax)
{
    switch (codec) {
    case COLL_QUANT_FP16: return fmax(x * ldexp(1, -11), ldexp(1, -25));
    case COLL_QUANT_BF16: return fmax(x * ldexp(1, -8), ldexp(1, -134));
    case COLL_QUANT_INT8: return amax / 254;
    case COLL_QUANT_INT4: return amax / 14;
    case COLL_QUANT_E4M3: return fmax(x * ldexp(1, -4), amax / 448 * ldexp(1, -10));
    case COLL_QUANT_E5M2: return fmax(x * ldexp(1, -3), amax / 57344 * ldexp(1, -17));
    case COLL_QUANT_E3M0: return fmax(x / 3, amax * ldexp(1, -7));
    default: return fmax(x, amax); /* SIGN1: |x - sign(x) mean|x|| */
    }
}

/* With stochastic rounding: less than the gap between the two grid values around x
 * (quant.h): twice the bound, but |x| (or amax 2^-6 below the grid) for E3M0, 2 amax for
 * SIGN1. */
static double sbound(int codec, double x, double amax)
{
    if (codec == COLL_QUANT_E3M0)
        return fmax(x, amax * ldexp(1, -6));
    if (codec == COLL_QUANT_SIGN1)
        return 2 * amax;
    return 2 * bound(codec, x, amax);
}

static double cbound(int codec, int stochastic, double x, double amax)
{
    return stochastic ? sbound(codec, x, amax) : bound(codec, x, amax);
}

static bool has_blocks(int codec)
{
    return codec != COLL_QUANT_FP16 && codec != COLL_QUANT_BF16;
}

/* FNV-1a of the result, gathered from every rank: all must be equal. */
static void check_identical(coll_comm_t *comm, const void *buf, size_t bytes, const char *tag)
{
    uint64_t h = 1469598103934665603ull, *all = malloc((size_t)nranks * sizeof(*all));
    const uint8_t *p = buf;

    for (size_t i = 0; i < bytes; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    CHECK(coll_allgather(&h, all, 1, COLL_UINT64, comm));
    for (int r = 0; r < nranks; r++)
        if (all[r] != h)
            die("%s: rank %d's result differs from rank %d's", tag, r, rank);
    free(all);
}

/* ---- bounds ------------------------------------------------------------------------------ */

struct qcase {
    int codec;
    uint32_t block;
    coll_dtype_t dtype;
    coll_op_t op;
    coll_quant_algo_t algo;
    int stochastic;
    int inplace;
    size_t count;
};

static void run_bounds(coll_comm_t *comm, const struct qcase *c, uint32_t step)
{
    const size_t n = c->count, esz = c->dtype == COLL_FLOAT32 ? 4 : 2;
    const size_t blk = has_blocks(c->codec) ? c->block : 1;
    coll_quant_config_t cfg = COLL_QUANT_CONFIG_INIT((coll_quant_codec_t)c->codec);
    double *exact = calloc(n + 1, sizeof(double)), *inerr = calloc(n + 1, sizeof(double));
    double *absum = calloc(n + 1, sizeof(double));
    uint8_t *sbuf = malloc(n * esz + 1), *rbuf = malloc(n * esz + 1);
    float *xs = malloc((n + 1) * sizeof(float));
    bool scatter;
    char tag[160];

    snprintf(tag, sizeof(tag), "%s block %u %s %s %s%s%s count %zu", codec_names[c->codec],
             c->block, c->dtype == COLL_FLOAT32 ? "fp32" : c->dtype == COLL_FLOAT16 ? "fp16" : "bf16",
             c->op == COLL_SUM ? "sum" : "avg",
             c->algo == COLL_QUANT_ALGO_SCATTER ? "scatter"
             : c->algo == COLL_QUANT_ALGO_GATHER ? "gather"
             : c->algo == COLL_QUANT_ALGO_HIER   ? "hier"
                                                 : "auto",
             c->stochastic ? " stochastic" : "", c->inplace ? " in place" : "", n);
    cfg.block = c->block;
    cfg.stochastic = c->stochastic;
    cfg.seed = 42;
    cfg.algo = c->algo;
    /* Every rank's input and its per-element round-trip bound. */
    for (int p = 0; p < nranks; p++) {
        for (size_t i = 0; i < n; i++)
            xs[i] = input(p, step, i);
        for (size_t b0 = 0; b0 < n; b0 += blk) {
            size_t b1 = b0 + blk < n ? b0 + blk : n;
            double amax = 0;
            for (size_t i = b0; i < b1; i++)
                amax = fmax(amax, fabs(xs[i]));
            for (size_t i = b0; i < b1; i++) {
                exact[i] += xs[i];
                absum[i] += fabs(xs[i]);
                inerr[i] += cbound(c->codec, c->stochastic, fabs(xs[i]), amax);
            }
        }
        if (p == rank)
            for (size_t i = 0; i < n; i++) {
                if (c->dtype == COLL_FLOAT32)
                    memcpy(sbuf + 4 * i, &xs[i], 4);
                else
                    to_f16_exact((uint16_t *)(sbuf + 2 * i), xs[i], c->dtype);
            }
    }
    memset(rbuf, 0xa5, n * esz);
    CHECK(coll_allreduce_quantized(sbuf, c->inplace ? sbuf : rbuf, n, c->dtype, c->op, &cfg, NULL,
                                   comm));
    if (c->inplace)
        memcpy(rbuf, sbuf, n * esz);
    check_identical(comm, rbuf, n * esz, tag);

    scatter = c->algo != COLL_QUANT_ALGO_GATHER; /* AUTO: either; the looser bound */
    for (size_t b0 = 0; b0 < n; b0 += blk) {
        size_t b1 = b0 + blk < n ? b0 + blk : n;
        double ymax = 0, emax = 0;
        const double div = c->op == COLL_AVG ? nranks : 1;
        for (size_t i = b0; i < b1; i++) {
            ymax = fmax(ymax, fabs(exact[i]) / div);
            emax = fmax(emax, inerr[i] / div);
        }
        for (size_t i = b0; i < b1; i++) {
            double y = exact[i] / div, e = inerr[i] / div, got, lim;
            got = c->dtype == COLL_FLOAT32 ? (double)((float *)rbuf)[i]
                                           : (double)from16(((uint16_t *)rbuf)[i], c->dtype);
            lim = e + (nranks + 4) * ldexp(absum[i] + fabs(y), -23);
            if (scatter)
                lim += cbound(c->codec, c->stochastic, fabs(y) + e, ymax + emax);
            if (c->dtype == COLL_FLOAT16)
                lim += (fabs(y) + lim) * ldexp(1, -11) + ldexp(1, -25);
            else if (c->dtype == COLL_BFLOAT16)
                lim += (fabs(y) + lim) * ldexp(1, -8);
            if (!(fabs(got - y) <= lim))
                die("%s: element %zu is %.9g, exact %.9g, error %.3g above the bound %.3g", tag,
                    i, got, y, fabs(got - y), lim);
        }
    }
    free(exact);
    free(inerr);
    free(absum);
    free(sbuf);
    free(rbuf);
    free(xs);
}

static void suite_bounds(coll_comm_t *comm)
{
    /* Counts: odd, not a multiple of any block; one below nranks * block (empty slices),
     * one that gives every rank a slice. Few enough to stay quick at 16 ranks. */
    const size_t counts[] = {1, 1001, 2 * 256 + 77};
    uint32_t step = 1;

    for (int codec = 0; codec < COLL_QUANT_NUM_CODECS; codec++)
        for (int a = COLL_QUANT_ALGO_SCATTER; a <= COLL_QUANT_ALGO_GATHER; a++)
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
                struct qcase c = {codec, codec == COLL_QUANT_INT4 ? 64 : 48, COLL_FLOAT32,
                                  k == 1 ? COLL_AVG : COLL_SUM, (coll_quant_algo_t)a, 0,
                                  (int)k == 2, counts[k]};
                run_bounds(comm, &c, step++);
            }
    /* fp16/bf16 sources and results; stochastic rounding (twice the bound); the default
     * block with AUTO. */
    {
        struct qcase cs[] = {
            {COLL_QUANT_INT8, 256, COLL_FLOAT16, COLL_SUM, COLL_QUANT_ALGO_SCATTER, 0, 0, 3001},
            {COLL_QUANT_E4M3, 256, COLL_BFLOAT16, COLL_AVG, COLL_QUANT_ALGO_GATHER, 0, 1, 999},
            {COLL_QUANT_INT8, 100, COLL_FLOAT32, COLL_SUM, COLL_QUANT_ALGO_SCATTER, 1, 0, 2345},
            {COLL_QUANT_E3M0, 64, COLL_FLOAT32, COLL_SUM, COLL_QUANT_ALGO_GATHER, 1, 0, 777},
            {COLL_QUANT_INT4, 256, COLL_FLOAT32, COLL_AVG, COLL_QUANT_ALGO_AUTO, 0, 0, 5000},
        };
        for (size_t k = 0; k < sizeof(cs) / sizeof(cs[0]); k++)
            run_bounds(comm, &cs[k], step++);
    }
}

/* ---- error feedback ----------------------------------------------------------------------- */

/* The same gradient every step (the worst case for deterministic rounding: its error is the
 * same every time and adds up). Without feedback the accumulated result drifts by steps
 * times one call's error; with it, the drift stays within about one call's error. */
static void suite_feedback(coll_comm_t *comm)
{
    const size_t n = 700;
    const int steps = 40;
    float *g = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    double *acc_fb = calloc(n, sizeof(double)), *acc_no = calloc(n, sizeof(double));
    double *exact = calloc(n, sizeof(double)), worst_fb = 0, worst_no = 0, scale = 0;
    coll_quant_config_t cfg = COLL_QUANT_CONFIG_INIT(COLL_QUANT_INT4);
    coll_quant_feedback_t *fb;

    cfg.block = 64;
    for (int a = COLL_QUANT_ALGO_SCATTER; a <= COLL_QUANT_ALGO_GATHER; a++) {
        cfg.algo = (coll_quant_algo_t)a;
        memset(acc_fb, 0, n * sizeof(double));
        memset(acc_no, 0, n * sizeof(double));
        worst_fb = worst_no = scale = 0;
        CHECK(coll_quant_feedback_create(comm, n, &fb));
        for (size_t i = 0; i < n; i++) {
            g[i] = input(rank, 7, i);
            exact[i] = 0;
            for (int p = 0; p < nranks; p++)
                exact[i] += input(p, 7, i);
            scale = fmax(scale, fabs(exact[i]));
        }
        for (int t = 0; t < steps; t++) {
            CHECK(coll_allreduce_quantized(g, out, n, COLL_FLOAT32, COLL_SUM, &cfg, fb, comm));
            check_identical(comm, out, n * sizeof(float), "feedback");
            for (size_t i = 0; i < n; i++)
                acc_fb[i] += out[i];
            CHECK(coll_allreduce_quantized(g, out, n, COLL_FLOAT32, COLL_SUM, &cfg, NULL, comm));
            for (size_t i = 0; i < n; i++)
                acc_no[i] += out[i];
        }
        for (size_t i = 0; i < n; i++) {
            worst_fb = fmax(worst_fb, fabs(acc_fb[i] - steps * exact[i]));
            worst_no = fmax(worst_no, fabs(acc_no[i] - steps * exact[i]));
        }
        /* One call's int4 error is at most (nranks + 1) * 16 / 14 (blocks hold up to 16);
         * with feedback the whole run's drift stays within two calls' worth. */
        if (!(worst_fb <= 2.0 * (nranks + 1) * 16.0 / 14.0))
            die("feedback (%s): accumulated error %.4g after %d steps is not bounded",
                a == COLL_QUANT_ALGO_SCATTER ? "scatter" : "gather", worst_fb, steps);
        if (nranks > 1 && !(worst_fb * 4 < worst_no))
            die("feedback (%s): accumulated error %.4g with feedback, %.4g without: feedback "
                "does not help",
                a == COLL_QUANT_ALGO_SCATTER ? "scatter" : "gather", worst_fb, worst_no);
        if (rank == 0)
            printf("feedback %s: accumulated error after %d steps %.3g (without: %.3g; "
                   "max |sum| %.3g)\n",
                   a == COLL_QUANT_ALGO_SCATTER ? "scatter" : "gather", steps, worst_fb, worst_no,
                   scale);
        /* A state belongs to its count. */
        if (coll_allreduce_quantized(g, out, n - 1, COLL_FLOAT32, COLL_SUM, &cfg, fb, comm) !=
            COLL_INVALID_ARGUMENT)
            die("feedback of another count accepted");
        CHECK(coll_quant_feedback_reset(fb));
        CHECK(coll_quant_feedback_destroy(fb));
    }
    free(g);
    free(out);
    free(acc_fb);
    free(acc_no);
    free(exact);
}

/* ---- wire bytes ---------------------------------------------------------------------------- */

/* quant.h's size formula, restated: B(count) for a codec, block and scale size sb. */
static uint64_t qbytes(int codec, uint32_t block, size_t sb, size_t count)
{
    size_t full, rest;
    if (!has_blocks(codec))
        return 2 * (uint64_t)count;
    full = count / block;
    rest = count % block;
#define PAY(k) (codec == COLL_QUANT_INT4 || codec == COLL_QUANT_E3M0 ? ((k) + 1) / 2          \
                : codec == COLL_QUANT_SIGN1                        ? ((k) + 7) / 8           \
                                                                   : (k))
    return full * (sb + PAY((size_t)block)) + (rest ? sb + PAY(rest) : 0);
#undef PAY
}

/* Bytes rank `rank` sends: SCATTER sum_{o != rank} B(slice o) + (n - 1) B(slice rank),
 * GATHER (n - 1) B(count) (qallreduce.c's header). */
static uint64_t expected_bytes(int codec, uint32_t block, size_t sb, size_t count,
                               coll_quant_algo_t algo)
{
    size_t blk = has_blocks(codec) ? block : 256, nb = (count + blk - 1) / blk;
    size_t per = (nb + (size_t)nranks - 1) / (size_t)nranks * blk;
    uint64_t sum = 0, mine = 0;

    if (nranks == 1 || count == 0)
        return 0;
    if (algo == COLL_QUANT_ALGO_GATHER)
        return (uint64_t)(nranks - 1) * qbytes(codec, block, sb, count);
    for (int o = 0; o < nranks; o++) {
        size_t lo = (size_t)o * per < count ? (size_t)o * per : count;
        size_t hi = lo + per < count ? lo + per : count;
        if (o != rank)
            sum += qbytes(codec, block, sb, hi - lo);
        else
            mine = qbytes(codec, block, sb, hi - lo);
    }
    return sum + (uint64_t)(nranks - 1) * mine;
}

static void suite_bytes(coll_comm_t *comm)
{
    const size_t n = 20000 + 13;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    uint64_t before, after, want, plain;

    for (size_t i = 0; i < n; i++)
        x[i] = input(rank, 3, i);
    CHECK(coll_comm_bytes_sent(comm, &before));
    CHECK(coll_allreduce(x, y, n, COLL_FLOAT32, COLL_SUM, comm));
    CHECK(coll_comm_bytes_sent(comm, &after));
    plain = after - before; /* for the printout: per rank, it depends on the algorithm */
    for (int codec = 0; codec < COLL_QUANT_NUM_CODECS; codec++)
        for (int a = COLL_QUANT_ALGO_SCATTER; a <= COLL_QUANT_ALGO_GATHER; a++)
            for (int s = 0; s < 2; s++) {
                coll_quant_config_t cfg = COLL_QUANT_CONFIG_INIT((coll_quant_codec_t)codec);
                cfg.algo = (coll_quant_algo_t)a;
                cfg.block = s ? 256 : 96;
                cfg.scale_dtype = s ? COLL_FLOAT16 : COLL_FLOAT32;
                CHECK(coll_comm_bytes_sent(comm, &before));
                CHECK(coll_allreduce_quantized(x, y, n, COLL_FLOAT32, COLL_SUM, &cfg, NULL, comm));
                CHECK(coll_comm_bytes_sent(comm, &after));
                want = expected_bytes(codec, cfg.block, s ? 2 : 4, n, cfg.algo);
                if (after - before != want)
                    die("bytes %s %s block %u scale %s: sent %llu, formula %llu",
                        codec_names[codec], a == COLL_QUANT_ALGO_SCATTER ? "scatter" : "gather",
                        cfg.block, s ? "fp16" : "fp32", (unsigned long long)(after - before),
                        (unsigned long long)want);
                if (rank == 0 && !s && a == COLL_QUANT_ALGO_SCATTER && nranks > 1)
                    printf("bytes %-5s: rank 0 sent %llu, plain fp32 all-reduce %llu (%.2fx)\n",
                           codec_names[codec], (unsigned long long)(after - before),
                           (unsigned long long)plain, (double)plain / (double)(after - before));
            }
    free(x);
    free(y);
}

/* ---- hierarchical ---------------------------------------------------------------------------- */

static void slice_of(size_t lo, size_t hi, size_t blk, int m, int k, size_t *lo_p, size_t *hi_p)
{
    size_t len = hi - lo, nb = (len + blk - 1) / blk, per = (nb + (size_t)m - 1) / (size_t)m * blk;
    *lo_p = lo + ((size_t)k * per < len ? (size_t)k * per : len);
    *hi_p = lo + ((size_t)k * per + per < len ? (size_t)k * per + per : len);
}

/* HIER's bytes for rank `rank` with nodes of L consecutive ranks (qallreduce.c's header):
 * fp32 slices within the node, encoded sub-slices to and from the other nodes, encoded
 * slices within the node. */
static uint64_t hier_bytes(int codec, uint32_t block, size_t count, int L)
{
    const int G = nranks / L, g = rank / L, j = rank % L;
    size_t blk = has_blocks(codec) ? block : 256, lo, hi, l2, h2, s0, s1;
    uint64_t sum = 0;

    slice_of(0, count, blk, L, j, &lo, &hi);
    for (int jj = 0; jj < L; jj++) {
        slice_of(0, count, blk, L, jj, &l2, &h2);
        if (jj != j)
            sum += 4 * (h2 - l2);
    }
    slice_of(lo, hi, blk, G, g, &s0, &s1);
    for (int gg = 0; gg < G; gg++) {
        slice_of(lo, hi, blk, G, gg, &l2, &h2);
        if (gg != g)
            sum += qbytes(codec, block, 4, h2 - l2) + qbytes(codec, block, 4, s1 - s0);
    }
    return sum + (uint64_t)(L - 1) * qbytes(codec, block, 4, hi - lo);
}

/* Nodes of L consecutive ranks (COLL_QUANT_NODE_RANKS): the SCATTER bound, bitwise
 * identical results, the byte formula, and error feedback. */
static void suite_hier(coll_comm_t *world)
{
    uint32_t step = 100;

    for (int L = 2; L <= nranks / 2; L++) {
        char v[16];
        coll_comm_t *c;
        if (nranks % L)
            continue;
        snprintf(v, sizeof(v), "%d", L);
        setenv("COLL_QUANT_NODE_RANKS", v, 1);
        CHECK(coll_comm_split(world, 0, rank, &c));
        unsetenv("COLL_QUANT_NODE_RANKS");
        for (int codec = 0; codec < COLL_QUANT_NUM_CODECS; codec++) {
            struct qcase q = {codec, codec == COLL_QUANT_INT4 ? 64 : 48, COLL_FLOAT32,
                              codec & 1 ? COLL_AVG : COLL_SUM, COLL_QUANT_ALGO_HIER, 0,
                              codec == 2, codec == 3 ? 37 : 2001};
            run_bounds(c, &q, step++);
        }
        {
            struct qcase qs[] = {
                {COLL_QUANT_INT8, 256, COLL_BFLOAT16, COLL_AVG, COLL_QUANT_ALGO_HIER, 0, 1, 4099},
                {COLL_QUANT_E4M3, 128, COLL_FLOAT16, COLL_SUM, COLL_QUANT_ALGO_HIER, 1, 0, 3000},
            };
            for (size_t k = 0; k < sizeof(qs) / sizeof(qs[0]); k++)
                run_bounds(c, &qs[k], step++);
        }
        {
            const size_t n = 10007;
            float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
            uint64_t before, after, want;
            for (size_t i = 0; i < n; i++)
                x[i] = input(rank, 5, i);
            for (int codec = 0; codec < COLL_QUANT_NUM_CODECS; codec++) {
                coll_quant_config_t cfg = COLL_QUANT_CONFIG_INIT((coll_quant_codec_t)codec);
                cfg.algo = COLL_QUANT_ALGO_HIER;
                cfg.block = 128;
                CHECK(coll_comm_bytes_sent(c, &before));
                CHECK(coll_allreduce_quantized(x, y, n, COLL_FLOAT32, COLL_SUM, &cfg, NULL, c));
                CHECK(coll_comm_bytes_sent(c, &after));
                want = hier_bytes(codec, cfg.block, n, L);
                if (after - before != want)
                    die("hier L=%d bytes %s: sent %llu, formula %llu", L, codec_names[codec],
                        (unsigned long long)(after - before), (unsigned long long)want);
            }
            free(x);
            free(y);
        }
        {
            /* the same gradient 30 times: with feedback the accumulated sum stays close */
            const size_t n = 900;
            const int steps = 30;
            float *g = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
            coll_quant_config_t cfg = COLL_QUANT_CONFIG_INIT(COLL_QUANT_INT4);
            coll_quant_feedback_t *fb;
            double worst = 0;
            double *acc = calloc(n, sizeof(double));
            cfg.algo = COLL_QUANT_ALGO_HIER;
            cfg.block = 64;
            CHECK(coll_quant_feedback_create(c, n, &fb));
            for (size_t i = 0; i < n; i++)
                g[i] = input(rank, 8, i);
            for (int t = 0; t < steps; t++) {
                CHECK(coll_allreduce_quantized(g, out, n, COLL_FLOAT32, COLL_SUM, &cfg, fb, c));
                for (size_t i = 0; i < n; i++)
                    acc[i] += out[i];
            }
            for (size_t i = 0; i < n; i++) {
                double e = 0;
                for (int p = 0; p < nranks; p++)
                    e += input(p, 8, i);
                worst = fmax(worst, fabs(acc[i] - steps * e));
            }
            if (!(worst <= 2.0 * (nranks + 1) * 16.0 / 14.0))
                die("hier L=%d feedback: accumulated error %.4g after %d steps", L, worst, steps);
            CHECK(coll_quant_feedback_destroy(fb));
            free(acc);
            free(g);
            free(out);
        }
        CHECK(coll_barrier(c)); /* see main */
        CHECK(coll_comm_destroy(c));
    }
}

/* ---- NaN and Inf ---------------------------------------------------------------------------- */

/* NaN on one rank, +Inf on another, -Inf on a third: the elements (block codecs: their
 * blocks) are NaN on every rank, every other element is finite and within its bound. */
static void suite_nonfinite(coll_comm_t *comm)
{
    const size_t n = 1000;
    const uint32_t block = 64;
    const size_t bad[3] = {5, 300, 999}; /* blocks 0, 4 and 15 */
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));

    for (int codec = 0; codec < COLL_QUANT_NUM_CODECS; codec++)
        for (int a = COLL_QUANT_ALGO_SCATTER; a <= COLL_QUANT_ALGO_GATHER; a++) {
            coll_quant_config_t cfg = COLL_QUANT_CONFIG_INIT((coll_quant_codec_t)codec);
            cfg.block = block;
            cfg.algo = (coll_quant_algo_t)a;
            for (size_t i = 0; i < n; i++)
                x[i] = input(rank, 9, i);
            if (rank == 0)
                x[bad[0]] = NAN;
            if (rank == nranks / 2)
                x[bad[1]] = INFINITY;
            if (rank == nranks - 1)
                x[bad[2]] = -INFINITY;
            CHECK(coll_allreduce_quantized(x, y, n, COLL_FLOAT32, COLL_AVG, &cfg, NULL, comm));
            check_identical(comm, y, n * sizeof(float), "nonfinite");
            for (size_t i = 0; i < n; i++) {
                bool hit = false;
                for (int k = 0; k < 3; k++)
                    hit |= has_blocks(codec) ? i / block == bad[k] / block : i == bad[k];
                if (hit && !isnan(y[i]))
                    die("nonfinite %s: element %zu is %g, not NaN", codec_names[codec], i, y[i]);
                if (!hit && !isfinite(y[i]))
                    die("nonfinite %s: element %zu is %g, not finite", codec_names[codec], i,
                        y[i]);
            }
        }
    free(x);
    free(y);
}

/* ---- COLL_QUANT ------------------------------------------------------------------------------ */

static coll_comm_t *split_with_env(coll_comm_t *world, const char *quant, const char *min)
{
    coll_comm_t *c;
    setenv("COLL_QUANT", quant, 1);
    setenv("COLL_QUANT_MIN_BYTES", min, 1);
    CHECK(coll_comm_split(world, 0, rank, &c));
    unsetenv("COLL_QUANT");
    unsetenv("COLL_QUANT_MIN_BYTES");
    return c;
}

static void suite_env(coll_comm_t *world)
{
    const size_t n = 3000; /* 12000 bytes */
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    coll_comm_t *c = split_with_env(world, "int8", "8K");
    uint64_t before, after;
    double exact, err, worst = 0;
    bool inexact = false;

    for (size_t i = 0; i < n; i++)
        x[i] = input(rank, 11, i);
    /* at the threshold and above: quantized (bytes by the formula, int8 error) */
    CHECK(coll_comm_bytes_sent(c, &before));
    CHECK(coll_allreduce(x, y, n, COLL_FLOAT32, COLL_SUM, c));
    CHECK(coll_comm_bytes_sent(c, &after));
    check_identical(c, y, n * sizeof(float), "env");
    {
        const size_t nb = (n + 255) / 256;
        coll_quant_algo_t algo = nranks == 1 || nb < (size_t)nranks ||
                                         qbytes(COLL_QUANT_INT8, 256, 4, n) * (size_t)nranks <=
                                             (64u << 10)
                                     ? COLL_QUANT_ALGO_GATHER
                                     : COLL_QUANT_ALGO_SCATTER;
        if (after - before != expected_bytes(COLL_QUANT_INT8, 256, 4, n, algo))
            die("env: COLL_QUANT=int8 all-reduce sent %llu bytes, formula %llu",
                (unsigned long long)(after - before),
                (unsigned long long)expected_bytes(COLL_QUANT_INT8, 256, 4, n, algo));
    }
    for (size_t i = 0; i < n; i++) {
        exact = 0;
        for (int p = 0; p < nranks; p++)
            exact += input(p, 11, i);
        err = fabs(y[i] - exact);
        inexact |= y[i] != (float)exact;
        worst = fmax(worst, err);
    }
    /* blocks hold values up to 16 per rank: int8 error per element at most n * 16 / 254
     * for the inputs (plus that again for the result's requantization) */
    if (worst > 2.0 * nranks * 16.0 / 254.0 + 1e-3)
        die("env: error %g above the int8 bound", worst);
    if (nranks > 1 && !inexact)
        die("env: result exact: COLL_QUANT=int8 was not applied");
    /* below the threshold, other dtypes and ops: plain (fp32 rounding only, where int8
     * would err by up to blockmax / 254 per rank) */
    CHECK(coll_allreduce(x, y, 2000, COLL_FLOAT32, COLL_SUM, c));
    for (size_t i = 0; i < 2000; i++) {
        exact = 0;
        for (int p = 0; p < nranks; p++)
            exact += input(p, 11, i);
        if (fabs(y[i] - exact) > nranks * 16.0 * ldexp(1, -22))
            die("env: a 8000-byte all-reduce below COLL_QUANT_MIN_BYTES was quantized "
                "(element %zu: %g, exact %g)",
                i, y[i], exact);
    }
    CHECK(coll_allreduce(x, y, n, COLL_FLOAT32, COLL_MAX, c));
    for (size_t i = 0; i < n; i++) {
        float m = -INFINITY;
        for (int p = 0; p < nranks; p++)
            m = fmaxf(m, input(p, 11, i));
        if (y[i] != m)
            die("env: max all-reduce element %zu is %g, not %g", i, y[i], m);
    }
    CHECK(coll_barrier(c));
    CHECK(coll_comm_destroy(c));

    /* a value that names no codec: the all-reduce says so, on every rank */
    c = split_with_env(world, "int7", "0");
    if (coll_allreduce(x, y, n, COLL_FLOAT32, COLL_SUM, c) != COLL_INVALID_ARGUMENT ||
        !strstr(coll_last_error(c), "COLL_QUANT"))
        die("env: COLL_QUANT=int7 not reported (%s)", coll_last_error(c));
    CHECK(coll_allreduce(x, y, n, COLL_INT32, COLL_SUM, c)); /* not for ints: plain */
    CHECK(coll_barrier(c));
    CHECK(coll_comm_destroy(c));
    free(x);
    free(y);
}

/* ---- bad input ------------------------------------------------------------------------------- */

#define EXPECT(st, call, what)                                                                     \
    do {                                                                                           \
        coll_status_t st_ = (call);                                                                \
        if (st_ != (st) || !coll_last_error(NULL)[0])                                              \
            die("%s: %s, message '%s'", what, coll_status_string(st_), coll_last_error(NULL));     \
    } while (0)

static void suite_badargs(coll_comm_t *world)
{
    float x[600], y[600];
    int32_t xi[4] = {0};
    coll_quant_config_t cfg = COLL_QUANT_CONFIG_INIT(COLL_QUANT_INT8), bad;
    coll_quant_feedback_t *fb, *fb_other;
    coll_comm_t *other;

    memset(x, 0, sizeof(x));
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(xi, xi, 4, COLL_INT32, COLL_SUM, &cfg,
                                                           NULL, world), "int32");
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(x, y, 4, COLL_FLOAT64, COLL_SUM, &cfg,
                                                           NULL, world), "fp64");
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(x, y, 4, COLL_FLOAT32, COLL_MAX, &cfg,
                                                           NULL, world), "max");
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(x, y, 4, COLL_FLOAT32, COLL_PROD, &cfg,
                                                           NULL, world), "prod");
    bad = cfg, bad.block = 0;
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(x, y, 4, COLL_FLOAT32, COLL_SUM, &bad,
                                                           NULL, world), "block 0");
    bad = cfg, bad.block = 65537;
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(x, y, 4, COLL_FLOAT32, COLL_SUM, &bad,
                                                           NULL, world), "block 65537");
    bad = cfg, bad.codec = COLL_QUANT_INT4, bad.block = 33;
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(x, y, 4, COLL_FLOAT32, COLL_SUM, &bad,
                                                           NULL, world), "odd int4 block");
    bad = cfg, bad.codec = (coll_quant_codec_t)99;
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(x, y, 4, COLL_FLOAT32, COLL_SUM, &bad,
                                                           NULL, world), "codec 99");
    bad = cfg, bad.size = 8;
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(x, y, 4, COLL_FLOAT32, COLL_SUM, &bad,
                                                           NULL, world), "size 8");
    bad = cfg, bad.scale_dtype = COLL_FLOAT64;
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(x, y, 4, COLL_FLOAT32, COLL_SUM, &bad,
                                                           NULL, world), "fp64 scale");
    bad = cfg, bad.algo = (coll_quant_algo_t)4;
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(x, y, 4, COLL_FLOAT32, COLL_SUM, &bad,
                                                           NULL, world), "algo 4");
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(NULL, y, 4, COLL_FLOAT32, COLL_SUM, &cfg,
                                                           NULL, world), "NULL sendbuf");
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(x, x + 1, 4, COLL_FLOAT32, COLL_SUM,
                                                           &cfg, NULL, world), "overlap");
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(x, y, 4, COLL_FLOAT32, COLL_SUM, &cfg,
                                                           NULL, NULL), "NULL comm");
    EXPECT(COLL_INVALID_ARGUMENT, coll_quant_feedback_create(world, 4, NULL), "NULL fb_p");
    EXPECT(COLL_INVALID_ARGUMENT, coll_comm_bytes_sent(world, NULL), "NULL bytes_p");

    /* feedback state of another size, of another comm; stochastic sign1 with feedback */
    CHECK(coll_quant_feedback_create(world, 600, &fb));
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(x, y, 599, COLL_FLOAT32, COLL_SUM, &cfg,
                                                           fb, world), "feedback size");
    CHECK(coll_comm_split(world, 0, rank, &other));
    CHECK(coll_quant_feedback_create(other, 600, &fb_other));
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(x, y, 600, COLL_FLOAT32, COLL_SUM, &cfg,
                                                           fb_other, world), "feedback comm");
    bad = cfg, bad.codec = COLL_QUANT_SIGN1, bad.stochastic = 1;
    EXPECT(COLL_INVALID_ARGUMENT, coll_allreduce_quantized(x, y, 600, COLL_FLOAT32, COLL_SUM, &bad,
                                                           fb, world), "stochastic sign1 feedback");
    /* inside a group */
    CHECK(coll_group_start());
    EXPECT(COLL_INVALID_USAGE, coll_allreduce_quantized(x, y, 600, COLL_FLOAT32, COLL_SUM, &cfg,
                                                        NULL, world), "group");
    CHECK(coll_group_end());
    /* after all that, both comms still work and agree */
    for (int i = 0; i < 600; i++)
        x[i] = (float)(rank + 1);
    CHECK(coll_allreduce_quantized(x, y, 600, COLL_FLOAT32, COLL_SUM, &cfg, fb, world));
    CHECK(coll_allreduce_quantized(x, y, 600, COLL_FLOAT32, COLL_SUM, &cfg, fb_other, other));
    for (int i = 0; i < 600; i++)
        if (fabsf(y[i] - (float)(nranks * (nranks + 1) / 2)) > nranks * nranks * 0.01f)
            die("after bad input: element %d is %g", i, y[i]);
    CHECK(coll_quant_feedback_destroy(fb));
    CHECK(coll_quant_feedback_destroy(fb_other));
    CHECK(coll_quant_feedback_destroy(NULL));
    CHECK(coll_barrier(other)); /* see main */
    CHECK(coll_comm_destroy(other));
}

int main(int argc, char **argv)
{
    const char *suite = argc > 1 ? argv[1] : "bounds";
    coll_comm_t *world;

    CHECK(coll_comm_init_env(&world));
    CHECK(coll_comm_rank(world, &rank));
    CHECK(coll_comm_size(world, &nranks));
    if (!strcmp(suite, "bounds"))
        suite_bounds(world);
    else if (!strcmp(suite, "feedback"))
        suite_feedback(world);
    else if (!strcmp(suite, "bytes"))
        suite_bytes(world);
    else if (!strcmp(suite, "nonfinite"))
        suite_nonfinite(world);
    else if (!strcmp(suite, "env"))
        suite_env(world);
    else if (!strcmp(suite, "hier"))
        suite_hier(world);
    else if (!strcmp(suite, "badargs"))
        suite_badargs(world);
    else
        die("unknown suite '%s'", suite);
    /* A rank that leaves right after a collective whose last message went to a peer over a
     * channel that peer has not opened yet makes the peer fail ("exited before the
     * shared-memory channel was up"); end on a barrier, whose messages all pairs exchange. */
    CHECK(coll_barrier(world));
    CHECK(coll_comm_destroy(world));
    if (rank == 0)
        printf("mp_quant %s: %d ranks OK\n", suite, nranks);
    return 0;
}
