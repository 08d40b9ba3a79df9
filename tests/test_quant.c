/*
 * test_quant.c - the gradient codecs (src/reduce/quant.c, quant_elem.h).
 *
 * References here are computed another way than the codec: sizes from a per-block loop over
 * bit counts, error bounds in double from the format's grid spacing, SIGN1's mean in double,
 * E3M0/INT8/INT4 bytes by hand for small blocks. Every random input comes from fixed seeds,
 * so a statistical assertion either always passes or always fails: none can flake.
 *
 * Error bounds asserted per element (amax: the block's max |x|; slack: fp32 rounding of the
 * scaling, amax * 2^-20, plus, with fp16 block scales, the clamp of elements above the
 * rounded-down magnitude, amax * 2^-11):
 *   FP16  half an ulp: max(|x| 2^-11, 2^-25)    BF16  max(|x| 2^-8, 2^-134)
 *   INT8  amax / 254 (half a step of amax/127)   INT4  amax / 14 (half a step of amax/7)
 *   E4M3  3 mantissa bits: half an ulp is |x| 2^-4 relative for normals; below 2^-6 (in
 *         units of amax/448) the subnormal step is 2^-9, so max(|x| 2^-4, amax/448 2^-10)
 *   E5M2  2 mantissa bits, subnormal step 2^-16: max(|x| 2^-3, amax/57344 2^-17)
 *   E3M0  grid {0, 2^-6..1} amax: between 2^k and 2^(k+1) the worst is the midpoint,
 *         1/3 of |x| away; below amax 2^-6 the worst is amax 2^-7 (the first midpoint)
 *   SIGN1 the decoded value is exactly sign(x) * mean|x| (mean checked in double)
 *
 * Divisions: 1 helpers, 2 validation and sizes, 3 round trips, 4 hand-made blocks, zeros,
 * non-finite, 5 stochastic rounding, 6 slices and decode_add, 7 error feedback,
 * 8 throughput (prints only, with COLL_QUANT_BENCH=1).
 */
#include "reduce/quant.h"
#include "reduce/quant_elem.h"

#include "harness.h"

#include <math.h>
#include <time.h>

/* ---- 1 helpers ------------------------------------------------------------------------ */

static const enum coll_codec all_codecs[] = {
    COLL_CODEC_FP16, COLL_CODEC_BF16, COLL_CODEC_INT8, COLL_CODEC_E4M3,
    COLL_CODEC_E5M2, COLL_CODEC_INT4, COLL_CODEC_E3M0, COLL_CODEC_SIGN1,
};
#define NCODECS (sizeof(all_codecs) / sizeof(all_codecs[0]))

static bool blocked(enum coll_codec c)
{
    return c != COLL_CODEC_FP16 && c != COLL_CODEC_BF16;
}

static bool four_bit(enum coll_codec c)
{
    return c == COLL_CODEC_INT4 || c == COLL_CODEC_E3M0;
}

static uint64_t rng_state;

static void rng_seed(uint64_t s)
{
    rng_state = s;
}

static uint64_t rnd(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rnd01(void)
{
    return (double)(rnd() >> 11) / 9007199254740992.0;
}

enum dist { D_UNIFORM, D_BELL, D_WIDE, D_BLOCKY, NDIST };

/* Test data: uniform [-1, 1]; bell-shaped (sum of 4 uniforms); wide (|x| log-uniform in
 * 2^[-20, 10], random sign, some exact zeros); blocky (uniform times 10^k, k in [-6, 4]
 * changing every 64 elements: blocks of very different magnitudes). */
static void fill(float *x, size_t n, enum dist d, uint64_t seed)
{
    double scale = 1.0;

    rng_seed(seed);
    for (size_t i = 0; i < n; i++) {
        double u = 2.0 * rnd01() - 1.0;
        switch (d) {
        case D_UNIFORM:
            x[i] = (float)u;
            break;
        case D_BELL:
            x[i] = (float)((u + 2.0 * rnd01() + 2.0 * rnd01() + 2.0 * rnd01() - 3.0) / 2.0);
            break;
        case D_WIDE:
            x[i] = rnd() % 50 == 0 ? 0.0f
                                   : (float)((u < 0 ? -1.0 : 1.0) * exp2(-20.0 + 30.0 * rnd01()));
            break;
        default:
            if (i % 64 == 0)
                scale = pow(10.0, (double)(int)(rnd() % 11) - 6.0);
            x[i] = (float)(u * scale);
            break;
        }
    }
}

static struct coll_quant_desc mkdesc(enum coll_codec c, uint32_t block, coll_dtype_t sdt)
{
    struct coll_quant_desc d = COLL_QUANT_DESC_INIT(c);
    d.block = block;
    d.scale_dtype = sdt;
    return d;
}

/* The codec's size formula, computed another way: a loop over blocks, counting bits. */
static size_t expect_bytes(enum coll_codec c, size_t block, coll_dtype_t sdt, size_t count)
{
    size_t bits = four_bit(c) ? 4 : c == COLL_CODEC_SIGN1 ? 1 : 8, total = 0;

    if (!blocked(c))
        return 2 * count;
    for (size_t off = 0; off < count; off += block) {
        size_t n = count - off < block ? count - off : block;
        total += (sdt == COLL_FLOAT16 ? 2 : 4) + (n * bits + 7) / 8;
    }
    return total;
}

/* Largest |x| of the block holding element i (blocked codecs; 0 for FP16/BF16). */
static double block_amax(const float *x, size_t count, size_t block, size_t i)
{
    size_t b0 = i / block * block, b1 = b0 + block < count ? b0 + block : count;
    double m = 0;
    for (size_t j = b0; j < b1; j++)
        m = fmax(m, fabs((double)x[j]));
    return m;
}

static double elem_bound(enum coll_codec c, double x, double amax)
{
    double ax = fabs(x);
    switch (c) {
    case COLL_CODEC_FP16:
        return fmax(ax * ldexp(1, -11), ldexp(1, -25));
    case COLL_CODEC_BF16:
        return fmax(ax * ldexp(1, -8), ldexp(1, -134));
    case COLL_CODEC_INT8:
        return amax / 254;
    case COLL_CODEC_INT4:
        return amax / 14;
    case COLL_CODEC_E4M3:
        return fmax(ax / 16, amax / 448 * ldexp(1, -10));
    case COLL_CODEC_E5M2:
        return fmax(ax / 8, amax / 57344 * ldexp(1, -17));
    case COLL_CODEC_E3M0:
        return fmax(ax / 3, amax / 128);
    default:
        return 0;
    }
}

/* The widest gap between the two grid values around x: what one stochastic rounding can
 * move x by (twice elem_bound, except E3M0, whose gap 2^k around x in [2^k, 2^(k+1)] is
 * up to |x|, and SIGN1's stochastic +-amax). */
static double gap_max(enum coll_codec c, double x, double amax)
{
    double ax = fabs(x);
    switch (c) {
    case COLL_CODEC_E3M0:
        return fmax(ax, amax / 64);
    case COLL_CODEC_SIGN1:
        return 2 * amax;
    default:
        return 2 * elem_bound(c, x, amax);
    }
}

static uint8_t *xmalloc(size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    ASSERT(p);
    return p;
}

/* Encode (checking the exact size against a canary), decode, return the decoded copy. */
static float *roundtrip(const struct coll_quant_desc *d, const void *src, coll_dtype_t dt,
                        size_t count, uint8_t **enc_p)
{
    size_t bytes = coll__quant_bytes(d, count);
    uint8_t *enc = xmalloc(bytes + 16);
    float *out = (float *)xmalloc(count * sizeof(float));

    ASSERT_EQ(bytes, expect_bytes(d->codec, d->block, d->scale_dtype, count));
    memset(enc, 0xa5, bytes + 16);
    ASSERT_EQ(coll__quant_encode(d, src, dt, count, enc), COLL_SUCCESS);
    for (size_t k = 0; k < 16; k++)
        ASSERT_MSG(enc[bytes + k] == 0xa5, "%s: encode wrote past %zu bytes",
                   coll__codec_name(d->codec), bytes);
    ASSERT_EQ(coll__quant_decode(d, enc, count, out), COLL_SUCCESS);
    if (enc_p)
        *enc_p = enc;
    else
        free(enc);
    return out;
}

/* SIGN1: every element is +-mean|x| of its block, with x's sign bit. */
static void check_sign1(const float *x, const float *y, size_t count, size_t block,
                        coll_dtype_t sdt)
{
    for (size_t b0 = 0; b0 < count; b0 += block) {
        size_t b1 = b0 + block < count ? b0 + block : count;
        double mean = 0;
        for (size_t j = b0; j < b1; j++)
            mean += fabs((double)x[j]);
        mean /= (double)(b1 - b0);
        for (size_t j = b0; j < b1; j++) {
            double want = signbit(x[j]) ? -mean : mean;
            double tol = mean * (sdt == COLL_FLOAT16 ? ldexp(1, -10) : 1e-5) +
                         (sdt == COLL_FLOAT16 ? ldexp(1, -24) : 0);
            ASSERT_MSG(fabs(y[j] - want) <= tol && !signbit(y[j]) == !signbit(want),
                       "sign1 block %zu elem %zu: x %g got %.9g want %.9g", b0 / block, j,
                       (double)x[j], (double)y[j], want);
        }
    }
}

/* The per-element bound, asserted for every element of a round trip. xs: the source as
 * fp32. */
static void check_bounds(const struct coll_quant_desc *d, const float *xs, const float *y,
                         size_t count)
{
    double amax = 0;

    if (d->codec == COLL_CODEC_SIGN1) {
        check_sign1(xs, y, count, d->block, d->scale_dtype);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        double bound, slack = 0;
        if (blocked(d->codec)) {
            if (i % d->block == 0)
                amax = block_amax(xs, count, d->block, i);
            slack = amax * ldexp(1, -20);
            if (d->scale_dtype == COLL_FLOAT16)
                slack += amax * ldexp(1, -11) + (amax < ldexp(1, -14) ? ldexp(1, -24) : 0);
        }
        bound = elem_bound(d->codec, xs[i], amax) + slack;
        ASSERT_MSG(fabs((double)y[i] - (double)xs[i]) <= bound,
                   "%s block %u scale %s: elem %zu x %.9g decoded %.9g err %.3g > bound %.3g "
                   "(amax %.9g)",
                   coll__codec_name(d->codec), d->block, coll__dtype_name(d->scale_dtype), i,
                   (double)xs[i], (double)y[i], fabs((double)y[i] - (double)xs[i]), bound, amax);
    }
}

/* ---- 2 validation and sizes --------------------------------------------------------------- */

TEST(validate_rejects_with_message)
{
    struct coll_quant_desc d = COLL_QUANT_DESC_INIT(COLL_CODEC_INT8);
    float x[4] = {0};
    uint8_t enc[64];

    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT32), COLL_SUCCESS);
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT16), COLL_SUCCESS);
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_BFLOAT16), COLL_SUCCESS);

    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT64), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "source dtype");
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_INT8), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT8E4M3), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__quant_encode(&d, x, COLL_INT32, 4, enc), COLL_INVALID_ARGUMENT);

    d.block = 0;
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT32), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "block of 0");
    ASSERT_EQ(coll__quant_bytes(&d, 100), 0);
    ASSERT_EQ(coll__quant_encode(&d, x, COLL_FLOAT32, 4, enc), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__quant_decode(&d, enc, 4, x), COLL_INVALID_ARGUMENT);
    d.block = 65537;
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT32), COLL_INVALID_ARGUMENT);
    d.block = 65536;
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT32), COLL_SUCCESS);
    d.block = 255; /* odd is fine for byte codecs */
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT32), COLL_SUCCESS);

    d.codec = COLL_CODEC_INT4;
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT32), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "even");
    d.codec = COLL_CODEC_E3M0;
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT32), COLL_INVALID_ARGUMENT);
    d.block = 1;
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT32), COLL_INVALID_ARGUMENT);
    d.block = 2;
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT32), COLL_SUCCESS);

    d.scale_dtype = COLL_BFLOAT16;
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT32), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "scale dtype");
    d.scale_dtype = COLL_FLOAT16;
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT32), COLL_SUCCESS);

    /* FP16/BF16 have no blocks: block and scale dtype are ignored */
    d = COLL_QUANT_DESC_INIT(COLL_CODEC_FP16);
    d.block = 0;
    d.scale_dtype = COLL_INT8;
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT32), COLL_SUCCESS);
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_UINT8), COLL_INVALID_ARGUMENT);

    d.codec = (enum coll_codec)99;
    ASSERT_EQ(coll__quant_validate(NULL, &d, COLL_FLOAT32), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "codec 99");
    ASSERT_EQ(coll__quant_bytes(&d, 10), 0);
    ASSERT_EQ(coll__quant_validate(NULL, NULL, COLL_FLOAT32), COLL_INVALID_ARGUMENT);

    /* a slice must start on a block boundary */
    d = COLL_QUANT_DESC_INIT(COLL_CODEC_INT8);
    ASSERT_EQ(coll__quant_encode_at(&d, x, COLL_FLOAT32, 4, 3, enc), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "multiple of the block");
    ASSERT_EQ(coll__quant_encode_at(&d, x, COLL_FLOAT32, 4, 512, enc), COLL_SUCCESS);
    ASSERT_EQ(coll__quant_encode(&d, NULL, COLL_FLOAT32, 4, enc), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__quant_encode(&d, NULL, COLL_FLOAT32, 0, NULL), COLL_SUCCESS);
    ASSERT_STR_CONTAINS(coll__codec_name(COLL_CODEC_E3M0), "e3m0");
    ASSERT_STR_CONTAINS(coll__codec_name((enum coll_codec)42), "unknown");
}

TEST(exact_sizes)
{
    static const size_t counts[] = {0, 1, 255, 256, 257, 1000003};
    static const uint32_t blocks[] = {256, 2, 64, 1000};
    static const coll_dtype_t sdts[] = {COLL_FLOAT32, COLL_FLOAT16};

    for (size_t c = 0; c < NCODECS; c++)
        for (size_t b = 0; b < 4; b++)
            for (size_t s = 0; s < 2; s++)
                for (size_t k = 0; k < 6; k++) {
                    struct coll_quant_desc d = mkdesc(all_codecs[c], blocks[b], sdts[s]);
                    size_t got = coll__quant_bytes(&d, counts[k]);
                    size_t want = expect_bytes(d.codec, d.block, d.scale_dtype, counts[k]);
                    ASSERT_MSG(got == want, "%s block %u count %zu: %zu bytes, want %zu",
                               coll__codec_name(d.codec), d.block, counts[k], got, want);
                }

    /* a few by hand, default block 256 and fp32 scales */
    struct coll_quant_desc d = COLL_QUANT_DESC_INIT(COLL_CODEC_INT8);
    ASSERT_EQ(coll__quant_bytes(&d, 0), 0);
    ASSERT_EQ(coll__quant_bytes(&d, 1), 5);
    ASSERT_EQ(coll__quant_bytes(&d, 256), 260);
    ASSERT_EQ(coll__quant_bytes(&d, 257), 265);
    d.codec = COLL_CODEC_INT4;
    ASSERT_EQ(coll__quant_bytes(&d, 1), 5);
    ASSERT_EQ(coll__quant_bytes(&d, 257), 132 + 5);
    d.codec = COLL_CODEC_SIGN1;
    ASSERT_EQ(coll__quant_bytes(&d, 255), 4 + 32);
    ASSERT_EQ(coll__quant_bytes(&d, 257), 36 + 5);
    d.codec = COLL_CODEC_BF16;
    ASSERT_EQ(coll__quant_bytes(&d, 1000003), 2000006);
}

/* Every codec encodes exactly coll__quant_bytes at the odd counts, 1000003 included. */
TEST(exact_sizes_encoded)
{
    static const size_t counts[] = {1, 255, 256, 257, 1000003};
    float *x = (float *)xmalloc(1000003 * sizeof(float));

    fill(x, 1000003, D_BELL, 7);
    for (size_t c = 0; c < NCODECS; c++)
        for (size_t k = 0; k < 5; k++) {
            struct coll_quant_desc d = COLL_QUANT_DESC_INIT(all_codecs[c]);
            free(roundtrip(&d, x, COLL_FLOAT32, counts[k], NULL));
        }
    free(x);
}

TEST(wire_bytes_vs_fp32_64MiB)
{
    const size_t count = (size_t)64 << 20 >> 2; /* a 64 MiB fp32 tensor */
    const double fp32 = 4.0 * (double)count;
    static const coll_dtype_t sdts[] = {COLL_FLOAT32, COLL_FLOAT16};

    for (size_t s = 0; s < 2; s++) {
        struct coll_quant_desc d = mkdesc(COLL_CODEC_INT8, COLL_QUANT_BLOCK_DEFAULT, sdts[s]);
        ASSERT(fp32 / (double)coll__quant_bytes(&d, count) >= 3.9);
        d.codec = COLL_CODEC_E4M3;
        ASSERT(fp32 / (double)coll__quant_bytes(&d, count) >= 3.9);
        d.codec = COLL_CODEC_E5M2;
        ASSERT(fp32 / (double)coll__quant_bytes(&d, count) >= 3.9);
        d.codec = COLL_CODEC_INT4;
        ASSERT(fp32 / (double)coll__quant_bytes(&d, count) >= 7.5);
        d.codec = COLL_CODEC_E3M0;
        ASSERT(fp32 / (double)coll__quant_bytes(&d, count) >= 7.5);
        d.codec = COLL_CODEC_SIGN1;
        ASSERT(fp32 / (double)coll__quant_bytes(&d, count) >= 28.0);
    }
    struct coll_quant_desc d = COLL_QUANT_DESC_INIT(COLL_CODEC_FP16);
    ASSERT(fp32 / (double)coll__quant_bytes(&d, count) == 2.0);
}

/* ---- 3 round trips -------------------------------------------------------------------- */

/* All codecs x distributions x blocks (partial last blocks included) x scale dtypes. */
TEST(roundtrip_bounds_fp32)
{
    const size_t count = 1000;
    static const uint32_t blocks[] = {256, 2, 64, 1000, 65536, 24};
    static const coll_dtype_t sdts[] = {COLL_FLOAT32, COLL_FLOAT16};
    float *x = (float *)xmalloc(count * sizeof(float));

    for (int dist = 0; dist < NDIST; dist++) {
        fill(x, count, (enum dist)dist, 100 + (uint64_t)dist);
        for (size_t c = 0; c < NCODECS; c++)
            for (size_t b = 0; b < 6; b++)
                for (size_t s = 0; s < 2; s++) {
                    struct coll_quant_desc d = mkdesc(all_codecs[c], blocks[b], sdts[s]);
                    float *y = roundtrip(&d, x, COLL_FLOAT32, count, NULL);
                    check_bounds(&d, x, y, count);
                    free(y);
                }
    }
    free(x);
}

/* Block 1 (a scale per element) for the byte codecs: every element is its own max. */
TEST(roundtrip_block_one)
{
    const size_t count = 300;
    float *x = (float *)xmalloc(count * sizeof(float));
    static const enum coll_codec cs[] = {COLL_CODEC_INT8, COLL_CODEC_E4M3, COLL_CODEC_E5M2,
                                         COLL_CODEC_SIGN1};

    fill(x, count, D_WIDE, 5);
    for (size_t c = 0; c < 4; c++) {
        struct coll_quant_desc d = mkdesc(cs[c], 1, COLL_FLOAT32);
        float *y = roundtrip(&d, x, COLL_FLOAT32, count, NULL);
        for (size_t i = 0; i < count; i++)
            ASSERT_MSG(fabs((double)y[i] - x[i]) <= fabs((double)x[i]) * ldexp(1, -20),
                       "%s block 1: %g -> %g", coll__codec_name(cs[c]), x[i], y[i]);
        free(y);
    }
    free(x);
}

/* fp16 and bf16 sources: the bytes equal those of the same values widened to fp32 first
 * (widening is exact), so the fp32 bounds carry over. */
TEST(roundtrip_fp16_bf16_sources)
{
    const size_t count = 777;
    float *x = (float *)xmalloc(count * sizeof(float)), *xw = (float *)xmalloc(count * 4);
    uint16_t *h = (uint16_t *)xmalloc(count * 2);

    for (int dist = 0; dist < NDIST; dist++) {
        fill(x, count, (enum dist)dist, 200 + (uint64_t)dist);
        for (size_t src = 0; src < 2; src++) {
            coll_dtype_t dt = src ? COLL_BFLOAT16 : COLL_FLOAT16;
            for (size_t i = 0; i < count; i++) {
                h[i] = src ? coll__f32_to_bf16(x[i]) : coll__f32_to_f16(x[i]);
                xw[i] = src ? coll__bf16_to_f32(h[i]) : coll__f16_to_f32(h[i]);
            }
            for (size_t c = 0; c < NCODECS; c++)
                for (int sr = 0; sr < 2; sr++) {
                    struct coll_quant_desc d = mkdesc(all_codecs[c], 64, COLL_FLOAT32);
                    uint8_t *e1, *e2;
                    d.stochastic = sr;
                    d.seed = 99;
                    float *y1 = roundtrip(&d, h, dt, count, &e1);
                    float *y2 = roundtrip(&d, xw, COLL_FLOAT32, count, &e2);
                    ASSERT_MSG(memcmp(e1, e2, coll__quant_bytes(&d, count)) == 0,
                               "%s from %s differs from fp32", coll__codec_name(d.codec),
                               coll__dtype_name(dt));
                    if (!sr)
                        check_bounds(&d, xw, y1, count);
                    free(y1);
                    free(y2);
                    free(e1);
                    free(e2);
                }
        }
    }
    free(x);
    free(xw);
    free(h);
}

/* FP16/BF16 codecs are elem.h's conversions, element for element. */
TEST(fp16_bf16_match_elem_h)
{
    const size_t count = 4099;
    float *x = (float *)xmalloc(count * sizeof(float));
    uint8_t *e;

    fill(x, count, D_WIDE, 31);
    x[0] = 65504.0f;
    x[1] = 65519.0f; /* rounds down to max finite */
    x[2] = 65520.0f; /* the tie rounds to even: Inf */
    x[3] = 1e-8f;    /* fp16 subnormal */
    x[4] = -0.0f;
    for (size_t c = 0; c < 2; c++) {
        struct coll_quant_desc d = COLL_QUANT_DESC_INIT(c ? COLL_CODEC_BF16 : COLL_CODEC_FP16);
        float *y = roundtrip(&d, x, COLL_FLOAT32, count, &e);
        for (size_t i = 0; i < count; i++) {
            uint16_t want = c ? coll__f32_to_bf16(x[i]) : coll__f32_to_f16(x[i]), got;
            memcpy(&got, e + 2 * i, 2);
            ASSERT_EQ(got, want);
        }
        ASSERT(c ? y[2] == 65536.0f : isinf(y[2]));
        ASSERT(y[1] == (c ? 65536.0f : 65504.0f));
        ASSERT(signbit(y[4]) && y[4] == 0.0f);
        free(y);
        free(e);
    }
    free(x);
}

/* ---- 4 hand-made blocks, zeros, non-finite ------------------------------------------------ */

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

TEST(known_bytes)
{
    /* INT8, m = 1: 127 * (1, -0.5, 0.25, 0) = 127, -63.5 (tie -> -64, even), 31.75 -> 32, 0 */
    const float a[4] = {1.0f, -0.5f, 0.25f, 0.0f};
    uint8_t e[16];
    struct coll_quant_desc d = COLL_QUANT_DESC_INIT(COLL_CODEC_INT8);

    ASSERT_EQ(coll__quant_encode(&d, a, COLL_FLOAT32, 4, e), COLL_SUCCESS);
    ASSERT_EQ(le32(e), 0x3f800000u);
    ASSERT_EQ(e[4], 127);
    ASSERT_EQ(e[5], (uint8_t)-64);
    ASSERT_EQ(e[6], 32);
    ASSERT_EQ(e[7], 0);

    /* INT4, m = 2: 3.5 * (2, -2, 1, 1/7) = 7, -7, 3.5 -> 4 (even), 0.5 -> 0 (even), and an
     * odd tail, 3.5 * -0.5 = -1.75 -> -2 (0xe), in a low nibble with a zero high nibble */
    const float b[5] = {2.0f, -2.0f, 1.0f, 1.0f / 7.0f, -0.5f};
    d.codec = COLL_CODEC_INT4;
    ASSERT_EQ(coll__quant_encode(&d, b, COLL_FLOAT32, 5, e), COLL_SUCCESS);
    ASSERT_EQ(le32(e), 0x40000000u);
    ASSERT_EQ(e[4], 0x97); /* 7 low, -7 = 0x9 high */
    ASSERT_EQ(e[5], 0x04); /* 4 low, 0 high */
    ASSERT_EQ(e[6], 0x0e); /* -1.75 -> -2 */

    /* E3M0, m = 1: 1 -> code 7; -0.75 is the midpoint of 0.5 and 1: even code 6, negative;
     * 0.3 lies 0.2 of the way from 0.25 (code 5) to 0.5: 5; 2^-8 is below 2^-7: zero;
     * -2^-7 is the midpoint of 0 and 2^-6: even code 0, and zero is always positive;
     * 1.5 * 2^-6 is the midpoint of 2^-6 (code 1) and 2^-5 (code 2): 2 */
    const float c[6] = {1.0f, -0.75f, 0.3f, 0.00390625f, -0.0078125f, 0.0234375f};
    d.codec = COLL_CODEC_E3M0;
    ASSERT_EQ(coll__quant_encode(&d, c, COLL_FLOAT32, 6, e), COLL_SUCCESS);
    ASSERT_EQ(le32(e), 0x3f800000u);
    ASSERT_EQ(e[4], 0xe7);
    ASSERT_EQ(e[5], 0x05);
    ASSERT_EQ(e[6], 0x20);
    float y[6];
    ASSERT_EQ(coll__quant_decode(&d, e, 6, y), COLL_SUCCESS);
    ASSERT(y[0] == 1.0f && y[1] == -0.5f && y[2] == 0.25f && y[3] == 0.0f && y[4] == 0.0f &&
           !signbit(y[4]) && y[5] == 0.03125f);

    /* SIGN1: mean |x| of (1, -2, 3, -4, -0, 0, 1, 1, -1) = 13/9; bits LSB first, 1 = negative */
    const float s[9] = {1, -2, 3, -4, -0.0f, 0, 1, 1, -1};
    float ys[9];
    d.codec = COLL_CODEC_SIGN1;
    ASSERT_EQ(coll__quant_encode(&d, s, COLL_FLOAT32, 9, e), COLL_SUCCESS);
    ASSERT_EQ(coll__quant_bytes(&d, 9), 6);
    ASSERT_EQ(e[4], 0x1a); /* elements 1, 3, 4 negative */
    ASSERT_EQ(e[5], 0x01);
    ASSERT_EQ(coll__quant_decode(&d, e, 9, ys), COLL_SUCCESS);
    ASSERT(ys[0] == 13.0f / 9.0f && ys[1] == -13.0f / 9.0f && ys[8] == -13.0f / 9.0f);

    /* fp16 scale: header holds m rounded toward zero: 0.1 -> 0x2e66 (0.0999755859375) */
    const float t[2] = {0.1f, -0.05f};
    d = mkdesc(COLL_CODEC_INT8, 256, COLL_FLOAT16);
    ASSERT_EQ(coll__quant_bytes(&d, 2), 4);
    ASSERT_EQ(coll__quant_encode(&d, t, COLL_FLOAT32, 2, e), COLL_SUCCESS);
    ASSERT_EQ(e[0] | e[1] << 8, 0x2e66);
    ASSERT_EQ(e[2], 127); /* 0.1 is above the rounded m: clamped to 127 */
}

TEST(zero_blocks_decode_to_zero)
{
    const size_t count = 600; /* block 256: two full zero blocks, a partial nonzero one */
    float x[600], y[600];
    static const coll_dtype_t sdts[] = {COLL_FLOAT32, COLL_FLOAT16};

    memset(x, 0, sizeof(x));
    for (size_t i = 512; i < count; i++)
        x[i] = (float)i / 1000.0f;
    x[300] = -0.0f;
    for (size_t c = 0; c < NCODECS; c++)
        for (size_t s = 0; s < 2; s++)
            for (int sr = 0; sr < 2; sr++) {
                struct coll_quant_desc d = mkdesc(all_codecs[c], 256, sdts[s]);
                uint8_t *e;
                d.stochastic = sr;
                float *yy = roundtrip(&d, x, COLL_FLOAT32, count, &e);
                memcpy(y, yy, sizeof(y));
                for (size_t i = 0; i < 512; i++)
                    ASSERT_MSG(y[i] == 0.0f, "%s: zero elem %zu decoded %g",
                               coll__codec_name(d.codec), i, y[i]);
                if (blocked(d.codec)) { /* magnitude 0 in both zero blocks */
                    size_t rec = coll__quant_bytes(&d, 256), sb = s ? 2 : 4;
                    for (size_t k = 0; k < sb; k++)
                        ASSERT(e[k] == 0 && e[rec + k] == 0);
                }
                for (size_t i = 512; i < count; i++) /* stochastic SIGN1 may send - */
                    ASSERT(y[i] > 0.0f || (sr && d.codec == COLL_CODEC_SIGN1));
                free(yy);
                free(e);
            }
}

/* NaN and Inf: a block codec turns the whole affected block into NaN and leaves the other
 * blocks alone; FP16/BF16 keep NaN as NaN and Inf as Inf per element. */
TEST(nonfinite_propagates_as_nan)
{
    const size_t count = 1100, block = 256; /* blocks 0..3 full, 4 partial (76) */
    float *x = (float *)xmalloc(count * sizeof(float));
    static const coll_dtype_t sdts[] = {COLL_FLOAT32, COLL_FLOAT16};

    fill(x, count, D_UNIFORM, 77);
    x[300] = NAN;        /* block 1 */
    x[700] = INFINITY;   /* block 2 */
    x[1099] = -INFINITY; /* block 4, the partial one, its last element */
    for (size_t c = 0; c < NCODECS; c++)
        for (size_t s = 0; s < 2; s++)
            for (int sr = 0; sr < 2; sr++) {
                struct coll_quant_desc d = mkdesc(all_codecs[c], (uint32_t)block, sdts[s]);
                d.stochastic = sr;
                d.seed = 5;
                float *y = roundtrip(&d, x, COLL_FLOAT32, count, NULL);
                for (size_t i = 0; i < count; i++) {
                    size_t b = i / block;
                    bool bad_block = b == 1 || b == 2 || b == 4;
                    if (!blocked(d.codec)) {
                        if (i == 300)
                            ASSERT(isnan(y[i]));
                        else if (i == 700)
                            ASSERT(isinf(y[i]) && y[i] > 0);
                        else if (i == 1099)
                            ASSERT(isinf(y[i]) && y[i] < 0);
                        else
                            ASSERT(isfinite(y[i]));
                    } else {
                        ASSERT_MSG(bad_block ? isnan(y[i]) : isfinite(y[i]),
                                   "%s scale %s sr %d: elem %zu decoded %g",
                                   coll__codec_name(d.codec), coll__dtype_name(d.scale_dtype), sr,
                                   i, y[i]);
                    }
                }
                free(y);
            }

    /* from fp16 sources too */
    uint16_t h[8] = {0x3c00, 0x7e00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x7c00, 0xbc00};
    float y[8];
    uint8_t e[64];
    struct coll_quant_desc d = mkdesc(COLL_CODEC_INT8, 4, COLL_FLOAT32);
    ASSERT_EQ(coll__quant_encode(&d, h, COLL_FLOAT16, 8, e), COLL_SUCCESS);
    ASSERT_EQ(coll__quant_decode(&d, e, 8, y), COLL_SUCCESS);
    for (size_t i = 0; i < 8; i++)
        ASSERT(isnan(y[i]));

    /* a block maximum that an fp16 scale cannot hold decodes as NaN; just below it is fine */
    float big[4] = {70000.0f, 1.0f, -2.0f, 3.0f}, ok[4] = {65535.0f, 1.0f, -2.0f, 3.0f};
    d = mkdesc(COLL_CODEC_INT8, 4, COLL_FLOAT16);
    ASSERT_EQ(coll__quant_encode(&d, big, COLL_FLOAT32, 4, e), COLL_SUCCESS);
    ASSERT_EQ(coll__quant_decode(&d, e, 4, y), COLL_SUCCESS);
    for (size_t i = 0; i < 4; i++)
        ASSERT(isnan(y[i]));
    ASSERT_EQ(coll__quant_encode(&d, ok, COLL_FLOAT32, 4, e), COLL_SUCCESS);
    ASSERT_EQ(coll__quant_decode(&d, e, 4, y), COLL_SUCCESS);
    ASSERT(fabsf(y[0] - 65504.0f) <= 0.01f && fabsf(y[3] - 3.0f) <= 65504.0f / 254);
    /* the SIGN1 mean of finite values near FLT_MAX does not overflow */
    float huge[4] = {3e38f, -3e38f, 3e38f, 3e38f};
    d = mkdesc(COLL_CODEC_SIGN1, 4, COLL_FLOAT32);
    ASSERT_EQ(coll__quant_encode(&d, huge, COLL_FLOAT32, 4, e), COLL_SUCCESS);
    ASSERT_EQ(coll__quant_decode(&d, e, 4, y), COLL_SUCCESS);
    ASSERT(y[0] == 3e38f && y[1] == -3e38f);
    free(x);
}

/* Tiny and huge block maxima: fp32 scales stay within the bounds down to subnormal inputs
 * (the multiplier is capped, not Inf); fp16 scales never turn a nonzero block into zeros. */
TEST(extreme_magnitudes)
{
    const size_t count = 256;
    float x[256];
    static const double mags[] = {1e-40, 1e-30, 1e-7, 1e-5, 1e4, 3e38};

    for (size_t m = 0; m < 6; m++) {
        rng_seed(m);
        for (size_t i = 0; i < count; i++)
            x[i] = (float)((2 * rnd01() - 1) * mags[m]);
        for (size_t c = 2; c < NCODECS; c++)
            for (size_t s = 0; s < 2; s++) {
                struct coll_quant_desc d =
                    mkdesc(all_codecs[c], 64, s ? COLL_FLOAT16 : COLL_FLOAT32);
                if (s && mags[m] > 6e4)
                    continue; /* cannot be held by fp16: NaN, tested above */
                float *y = roundtrip(&d, x, COLL_FLOAT32, count, NULL);
                if (mags[m] < 1e-29) {
                    /* below ~1e-36 the fp32 multiplier qmax / amax is capped at FLT_MAX, and
                     * 1e-30 is below what an fp16 magnitude resolves: bounded by amax only */
                    for (size_t i = 0; i < count; i++)
                        ASSERT_MSG(fabs((double)y[i] - x[i]) <= block_amax(x, count, 64, i),
                                   "%s s %zu mag %g: %g -> %g (amax %g)", coll__codec_name(d.codec),
                                   s, mags[m], x[i], y[i], block_amax(x, count, 64, i));
                } else if (s == 1 && mags[m] < 1e-4 && d.codec != COLL_CODEC_SIGN1) {
                    /* fp16 subnormal magnitudes: bounded, and not flushed to zero */
                    bool nonzero = false;
                    for (size_t i = 0; i < count; i++) {
                        double amax = block_amax(x, count, 64, i);
                        ASSERT(fabs((double)y[i] - x[i]) <= elem_bound(d.codec, x[i], amax) +
                                                                amax * ldexp(1, -11) +
                                                                ldexp(1, -24));
                        nonzero |= y[i] != 0.0f;
                    }
                    ASSERT(nonzero);
                } else {
                    check_bounds(&d, x, y, count);
                }
                free(y);
            }
    }
}

/* ---- 5 stochastic rounding ------------------------------------------------------------- */

/*
 * Unbiased: over S fixed seeds, the mean decoded value of every element is within 6
 * standard errors of x: each draw is a two-point variable with standard deviation at most
 * gap / 2 (gap_max above), so the mean over S draws has at most gap / 2 / sqrt(S). The seeds
 * are fixed, so the outcome is deterministic (it cannot flake); 6 sigma leaves room for the
 * max over 256 elements. Every draw is also within one gap of x. As a control,
 * round-to-nearest is shown to be biased on the same data, so the test can fail.
 */
TEST(stochastic_unbiased)
{
    enum { N = 256, S = 1000 };
    float x[N], y[N];
    static double sum[N];
    uint8_t e[2 * N + 64];

    rng_seed(1234);
    for (size_t i = 0; i < N; i++)
        x[i] = (float)(2 * rnd01() - 1);
    x[7] = 1.0f; /* fixes amax = 1 */
    x[8] = 0.0f;
    x[9] = 0.25f; /* on every grid */
    for (size_t c = 0; c < NCODECS; c++) {
        struct coll_quant_desc d = COLL_QUANT_DESC_INIT(all_codecs[c]);
        double worst = 0, rne_worst = 0, total = 0, var = 0;
        d.stochastic = true;
        memset(sum, 0, sizeof(sum));
        for (uint64_t seed = 0; seed < S; seed++) {
            d.seed = seed * 7919 + 3;
            ASSERT_EQ(coll__quant_encode(&d, x, COLL_FLOAT32, N, e), COLL_SUCCESS);
            ASSERT_EQ(coll__quant_decode(&d, e, N, y), COLL_SUCCESS);
            for (size_t i = 0; i < N; i++) {
                double gap =
                    blocked(d.codec) ? gap_max(d.codec, x[i], 1.0) : gap_max(d.codec, x[i], 0);
                ASSERT_MSG(fabs((double)y[i] - x[i]) <= gap * (1 + 1e-6),
                           "%s elem %zu: x %g drew %g", coll__codec_name(d.codec), i, x[i], y[i]);
                sum[i] += y[i];
            }
        }
        for (size_t i = 0; i < N; i++) {
            double gap = blocked(d.codec) ? gap_max(d.codec, x[i], 1.0) : gap_max(d.codec, x[i], 0);
            double err = sum[i] / S - x[i], tol = 6 * gap / 2 / sqrt(S) + fabs(x[i]) * 1e-6;
            ASSERT_MSG(fabs(err) <= tol, "%s elem %zu: x %.9g mean error %.3g (tol %.3g)",
                       coll__codec_name(d.codec), i, x[i], err, tol);
            if (gap > 0)
                worst = fmax(worst, fabs(err) / gap);
            total += err;
            var += gap * gap / 4 / S;
        }
        /* the error averaged over all elements: N * S draws, far tighter */
        ASSERT_MSG(fabs(total) <= 6 * sqrt(var), "%s: summed mean error %g (sigma %g)",
                   coll__codec_name(d.codec), total, sqrt(var));
        ASSERT(sum[7] == S * (double)y[7] && (d.codec == COLL_CODEC_SIGN1 || sum[8] == 0) &&
               (blocked(d.codec) || sum[9] == S * 0.25));

        /* control: nearest rounding errs by up to half a gap on the same values, far more
         * than the stochastic mean does (SIGN1's deterministic mode is another quantizer) */
        if (d.codec == COLL_CODEC_SIGN1)
            continue;
        d.stochastic = false;
        ASSERT_EQ(coll__quant_encode(&d, x, COLL_FLOAT32, N, e), COLL_SUCCESS);
        ASSERT_EQ(coll__quant_decode(&d, e, N, y), COLL_SUCCESS);
        for (size_t i = 0; i < N; i++) {
            double gap = blocked(d.codec) ? gap_max(d.codec, x[i], 1.0) : gap_max(d.codec, x[i], 0);
            if (gap > 0)
                rne_worst = fmax(rne_worst, fabs((double)y[i] - x[i]) / gap);
        }
        ASSERT_MSG(rne_worst > 2 * worst, "%s: nearest error %g gaps, stochastic mean %g gaps",
                   coll__codec_name(d.codec), rne_worst, worst);
    }
}

/* Same seed, same bytes (and whatever the slicing); another seed, other bytes. */
TEST(stochastic_reproducible)
{
    const size_t count = 3000;
    float *x = (float *)xmalloc(count * sizeof(float));

    fill(x, count, D_BELL, 4242);
    for (size_t c = 0; c < NCODECS; c++) {
        struct coll_quant_desc d = COLL_QUANT_DESC_INIT(all_codecs[c]);
        size_t bytes = coll__quant_bytes(&d, count);
        uint8_t *a = xmalloc(bytes), *b = xmalloc(bytes), *s = xmalloc(bytes);
        d.stochastic = true;
        d.seed = 0xfeedfacecafebeefull;
        ASSERT_EQ(coll__quant_encode(&d, x, COLL_FLOAT32, count, a), COLL_SUCCESS);
        ASSERT_EQ(coll__quant_encode(&d, x, COLL_FLOAT32, count, b), COLL_SUCCESS);
        ASSERT(memcmp(a, b, bytes) == 0);
        /* in slices of 512 elements (two blocks), each with its index */
        for (size_t off = 0; off < count; off += 512) {
            size_t n = count - off < 512 ? count - off : 512;
            ASSERT_EQ(coll__quant_encode_at(&d, x + off, COLL_FLOAT32, n, off,
                                            s + coll__quant_bytes(&d, off)),
                      COLL_SUCCESS);
        }
        ASSERT_MSG(memcmp(a, s, bytes) == 0, "%s: sliced stochastic encoding differs",
                   coll__codec_name(d.codec));
        d.seed++;
        ASSERT_EQ(coll__quant_encode(&d, x, COLL_FLOAT32, count, b), COLL_SUCCESS);
        ASSERT_MSG(memcmp(a, b, bytes) != 0, "%s: seed ignored", coll__codec_name(d.codec));
        free(a);
        free(b);
        free(s);
    }
    free(x);
}

/* The noise itself: uniform enough that each of 16 bins of the 24-bit output gets its share
 * over 2^16 consecutive indices, for a few seeds (a chi-square at a fixed, generous cut). */
TEST(noise_is_uniform)
{
    for (uint64_t seed = 0; seed < 4; seed++) {
        uint64_t key = coll__quant_key(seed);
        double chi = 0;
        unsigned bins[16] = {0};
        for (uint64_t i = 0; i < 65536; i++) {
            uint32_t r = coll__quant_noise(key, i + (seed << 32));
            ASSERT(r < (1u << 24));
            bins[r >> 20]++;
        }
        for (int k = 0; k < 16; k++)
            chi += ((double)bins[k] - 4096.0) * ((double)bins[k] - 4096.0) / 4096.0;
        ASSERT_MSG(chi < 60.0, "seed %llu: chi-square %g over 15 dof", (unsigned long long)seed,
                   chi);
    }
}

/* ---- 6 slices and decode_add ---------------------------------------------------------- */

/* A tensor encoded whole equals the concatenation of its block-aligned slices encoded
 * alone, and decodes slice by slice; partial 4-bit and 1-bit tails included. */
TEST(slices_and_partial_blocks)
{
    static const size_t counts[] = {257, 513, 1001, 999};
    float *x = (float *)xmalloc(1001 * sizeof(float)), y[1001];

    fill(x, 1001, D_UNIFORM, 11);
    for (size_t c = 0; c < NCODECS; c++)
        for (size_t k = 0; k < 4; k++) {
            const size_t count = counts[k];
            struct coll_quant_desc d = COLL_QUANT_DESC_INIT(all_codecs[c]);
            size_t bytes = coll__quant_bytes(&d, count);
            uint8_t *whole = xmalloc(bytes), *parts = xmalloc(bytes);
            float *yw = roundtrip(&d, x, COLL_FLOAT32, count, NULL);

            ASSERT_EQ(coll__quant_encode(&d, x, COLL_FLOAT32, count, whole), COLL_SUCCESS);
            for (size_t off = 0; off < count; off += 256) {
                size_t n = count - off < 256 ? count - off : 256;
                size_t at = coll__quant_bytes(&d, off);
                ASSERT_EQ(coll__quant_encode_at(&d, x + off, COLL_FLOAT32, n, off, parts + at),
                          COLL_SUCCESS);
                ASSERT_EQ(at + coll__quant_bytes(&d, n), coll__quant_bytes(&d, off + n));
                ASSERT_EQ(coll__quant_decode(&d, whole + at, n, y + off), COLL_SUCCESS);
            }
            ASSERT(memcmp(whole, parts, bytes) == 0);
            ASSERT(memcmp(y, yw, count * sizeof(float)) == 0);
            /* the padding of a partial 4-bit or 1-bit tail is zero */
            if (four_bit(d.codec) && (count & 1))
                ASSERT_EQ(whole[bytes - 1] >> 4, 0);
            if (d.codec == COLL_CODEC_SIGN1 && (count % 256) % 8)
                ASSERT_EQ(whole[bytes - 1] >> ((count % 256) % 8), 0);
            free(whole);
            free(parts);
            free(yw);
        }
    free(x);
}

/* decode_add is decode followed by one fp32 addition per element. */
TEST(decode_add_accumulates)
{
    const size_t count = 1003;
    float *x = (float *)xmalloc(count * 4), *acc = (float *)xmalloc(count * 4);
    float *base = (float *)xmalloc(count * 4);

    fill(x, count, D_BELL, 3);
    fill(base, count, D_UNIFORM, 4);
    for (size_t c = 0; c < NCODECS; c++) {
        struct coll_quant_desc d = mkdesc(all_codecs[c], 128, COLL_FLOAT16);
        uint8_t *e;
        float *y = roundtrip(&d, x, COLL_FLOAT32, count, &e);
        memcpy(acc, base, count * 4);
        ASSERT_EQ(coll__quant_decode_add(&d, e, count, acc), COLL_SUCCESS);
        ASSERT_EQ(coll__quant_decode_add(&d, e, count, acc), COLL_SUCCESS);
        for (size_t i = 0; i < count; i++) {
            float want = base[i] + y[i];
            want += y[i];
            ASSERT_MSG(acc[i] == want, "%s elem %zu: %g != %g", coll__codec_name(d.codec), i,
                       acc[i], want);
        }
        free(y);
        free(e);
    }
    free(x);
    free(acc);
    free(base);
}

/* ---- 7 error feedback ---------------------------------------------------------------------- */

/*
 * T steps of the same gradient g. Because residual_t+1 = g + residual_t - decoded_t, the
 * decoded sum is T g - residual_T exactly (up to fp32 rounding of the residual), and
 * residual_T is the round-trip error of the last encoded vector x = g + residual_T-1, so
 * the error of the sum stays within one quantization error of x, at any T. Without feedback
 * the error of the sum is T times the round-trip error: it grows (the control).
 *
 * One quantization error of x is bounded by the gradient's own scale: with e = |residual|
 * and G = max|g| of the block, nearest rounding errs by at most half a step of x, so
 *   INT8: e <= (G + e) / 254  ->  e <= G / 253      (INT4: G / 13)
 *   E4M3: e <= (|g| + e) / 16 ->  e <= G / 15        (E5M2: G / 7; E3M0, 1/3: G / 2)
 *   FP16, BF16: e <= G 2^-10, G 2^-7 (generously)
 * and stochastic rounding by less than a whole gap: INT8 G / 126, INT4 G / 6, E4M3 G / 7,
 * E5M2 G / 3. Stochastic E3M0 has no such argument (its gap around x can be |x| itself):
 * its limit, 1.0 G, is what the run shows with margin (about 0.69 G at most over 40000
 * steps). SIGN1 (deterministic) is a contraction only by 1/block per step: its residual
 * keeps growing for ~2000 steps before it levels off near 100 G, so it has its own test.
 */
static double feedback_limit(enum coll_codec c, bool sr)
{
    switch (c) {
    case COLL_CODEC_FP16:
        return sr ? ldexp(1, -9) : ldexp(1, -10);
    case COLL_CODEC_BF16:
        return sr ? ldexp(1, -6) : ldexp(1, -7);
    case COLL_CODEC_INT8:
        return sr ? 1.0 / 126 : 1.0 / 253;
    case COLL_CODEC_INT4:
        return sr ? 1.0 / 6 : 1.0 / 13;
    case COLL_CODEC_E4M3:
        return sr ? 1.0 / 7 : 1.0 / 15;
    case COLL_CODEC_E5M2:
        return sr ? 1.0 / 3 : 1.0 / 7;
    case COLL_CODEC_E3M0:
        return sr ? 1.0 : 0.5;
    default:
        return INFINITY;
    }
}

static void feedback_run(enum coll_codec codec, bool sr, coll_dtype_t sdt)
{
    enum { T = 200 };
    const size_t count = 1000; /* blocks of 256: a partial last block */
    float *g = (float *)xmalloc(count * 4), *y = (float *)xmalloc(count * 4);
    float *prev = (float *)xmalloc(count * 4), *xlast = (float *)xmalloc(count * 4);
    double *sum = (double *)calloc(count, sizeof(double)), gmax = 0, worst = 0, plain = 0;
    struct coll_quant_desc d = mkdesc(codec, 256, sdt);
    struct coll_quant_feedback fb;
    size_t bytes = coll__quant_bytes(&d, count);
    uint8_t *e = xmalloc(bytes);

    ASSERT(sum);
    fill(g, count, D_BELL, 808);
    for (size_t i = 0; i < count; i++)
        gmax = fmax(gmax, fabs((double)g[i]));
    d.stochastic = sr;
    ASSERT_EQ(coll__quant_feedback_init(&fb, count), COLL_SUCCESS);
    for (int t = 0; t < T; t++) {
        d.seed = (uint64_t)t;
        memcpy(prev, fb.residual, count * 4);
        ASSERT_EQ(coll__quant_feedback_apply(&fb, g, count, &d, e), COLL_SUCCESS);
        ASSERT_EQ(coll__quant_decode(&d, e, count, y), COLL_SUCCESS);
        for (size_t i = 0; i < count; i++) {
            sum[i] += y[i];
            xlast[i] = g[i] + prev[i];
            /* the residual is exactly what this step dropped */
            ASSERT(fb.residual[i] == xlast[i] - y[i]);
        }
    }
    for (size_t i = 0; i < count; i++) {
        double err = fabs(sum[i] - (double)T * g[i]), bound;
        double amax = blocked(codec) ? block_amax(xlast, count, 256, i) : 0;
        if (sr) /* one stochastic rounding moves x by less than the gap around it */
            bound = gap_max(codec, xlast[i], amax);
        else if (codec == COLL_CODEC_SIGN1) /* |x - (+-mean|x|)| <= max|x| of the block */
            bound = amax;
        else
            bound = elem_bound(codec, xlast[i], amax);
        bound += amax * (sdt == COLL_FLOAT16 ? ldexp(1, -11) : ldexp(1, -20));
        bound += T * gmax * ldexp(1, -21); /* the fp32 residual's own rounding */
        ASSERT_MSG(err <= bound, "%s sr %d: elem %zu sum error %g > %g", coll__codec_name(codec),
                   sr, i, err, bound);
        worst = fmax(worst, err);
    }
    /* bounded by the gradient's scale, not by T */
    ASSERT_MSG(worst <= feedback_limit(codec, sr) * gmax * 1.01 + T * gmax * ldexp(1, -21),
               "%s sr %d: error of the sum %g, limit %g (gmax %g)", coll__codec_name(codec), sr,
               worst, feedback_limit(codec, sr) * gmax, gmax);

    /* control: no feedback, deterministic rounding: the same error T times */
    if (!sr && codec != COLL_CODEC_FP16 && codec != COLL_CODEC_BF16) {
        ASSERT_EQ(coll__quant_encode(&d, g, COLL_FLOAT32, count, e), COLL_SUCCESS);
        ASSERT_EQ(coll__quant_decode(&d, e, count, y), COLL_SUCCESS);
        for (size_t i = 0; i < count; i++)
            plain = fmax(plain, T * fabs((double)y[i] - g[i]));
        /* SIGN1's residual is still growing at T = 200 (see below): a smaller margin */
        ASSERT_MSG(plain > (codec == COLL_CODEC_SIGN1 ? 3 : 20) * worst,
                   "%s: without feedback %g, with %g", coll__codec_name(codec), plain, worst);
    }
    coll__quant_feedback_fini(&fb);
    free(g);
    free(y);
    free(prev);
    free(xlast);
    free(sum);
    free(e);
}

TEST(feedback_converges)
{
    for (size_t c = 0; c < NCODECS; c++) {
        if (all_codecs[c] == COLL_CODEC_SIGN1)
            continue;
        feedback_run(all_codecs[c], false, COLL_FLOAT32);
        feedback_run(all_codecs[c], true, COLL_FLOAT32);
        feedback_run(all_codecs[c], false, COLL_FLOAT16);
    }
}

/* SIGN1: the error of the sum is one quantization error of the last x at every T (as
 * above); the residual grows while the block mean catches up with the largest gradients,
 * then levels off: over 4000 steps, its largest value in the second half is within 5% of
 * the first half's (a residual growing like sqrt(t) would gain 41%). Stochastic SIGN1
 * diverges under feedback and is refused. */
TEST(feedback_sign1_levels_off)
{
    enum { T = 4000 };
    const size_t count = 1000;
    float g[1000];
    uint8_t e[1000];
    double first = 0, second = 0;
    struct coll_quant_desc d = COLL_QUANT_DESC_INIT(COLL_CODEC_SIGN1);
    struct coll_quant_feedback fb;

    feedback_run(COLL_CODEC_SIGN1, false, COLL_FLOAT32);
    feedback_run(COLL_CODEC_SIGN1, false, COLL_FLOAT16);
    fill(g, count, D_BELL, 808);
    ASSERT_EQ(coll__quant_feedback_init(&fb, count), COLL_SUCCESS);
    for (int t = 0; t < T; t++) {
        ASSERT_EQ(coll__quant_feedback_apply(&fb, g, count, &d, e), COLL_SUCCESS);
        for (size_t i = 0; i < count; i++) {
            ASSERT(isfinite(fb.residual[i]));
            if (t < T / 2)
                first = fmax(first, fabs((double)fb.residual[i]));
            else
                second = fmax(second, fabs((double)fb.residual[i]));
        }
    }
    ASSERT_MSG(second <= 1.05 * first, "residual max %g then %g", first, second);
    d.stochastic = true;
    ASSERT_EQ(coll__quant_feedback_apply(&fb, g, count, &d, e), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "diverges");
    coll__quant_feedback_fini(&fb);
}

TEST(feedback_arguments)
{
    struct coll_quant_feedback fb, empty = {0};
    struct coll_quant_desc d = COLL_QUANT_DESC_INIT(COLL_CODEC_INT8);
    float g[300] = {1.0f, -2.0f, 0.5f};
    uint8_t e[400];

    ASSERT_EQ(coll__quant_feedback_init(&fb, 300), COLL_SUCCESS);
    ASSERT_EQ(coll__quant_feedback_apply(&fb, g, 299, &d, e), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "299");
    ASSERT_EQ(coll__quant_feedback_apply(&fb, g, 301, &d, e), COLL_INVALID_ARGUMENT);
    for (size_t i = 0; i < 300; i++)
        ASSERT(fb.residual[i] == 0.0f); /* untouched */
    d.block = 0;
    ASSERT_EQ(coll__quant_feedback_apply(&fb, g, 300, &d, e), COLL_INVALID_ARGUMENT);
    d.block = 256;
    ASSERT_EQ(coll__quant_feedback_apply(&fb, g, 300, &d, e), COLL_SUCCESS);
    ASSERT(fb.residual[1] != 0.0f || fb.residual[2] != 0.0f);
    coll__quant_feedback_reset(&fb);
    for (size_t i = 0; i < 300; i++)
        ASSERT(fb.residual[i] == 0.0f);
    coll__quant_feedback_fini(&fb);
    ASSERT(fb.residual == NULL && fb.count == 0);
    coll__quant_feedback_fini(&fb); /* twice is fine */
    coll__quant_feedback_fini(NULL);

    ASSERT_EQ(coll__quant_feedback_init(&empty, 0), COLL_SUCCESS);
    ASSERT_EQ(coll__quant_feedback_apply(&empty, NULL, 0, &d, NULL), COLL_SUCCESS);
    ASSERT_EQ(coll__quant_feedback_apply(&empty, g, 1, &d, e), COLL_INVALID_ARGUMENT);
    coll__quant_feedback_fini(&empty);

    /* big tiles: a tensor over several feedback tiles and a block larger than a tile */
    const size_t n = 40000;
    float *big = (float *)xmalloc(n * 4), *y = (float *)xmalloc(n * 4);
    fill(big, n, D_BLOCKY, 9);
    for (uint32_t blk = 256; blk <= 32768; blk *= 128) {
        d = mkdesc(COLL_CODEC_INT4, blk, COLL_FLOAT32);
        uint8_t *enc = xmalloc(coll__quant_bytes(&d, n));
        ASSERT_EQ(coll__quant_feedback_init(&fb, n), COLL_SUCCESS);
        ASSERT_EQ(coll__quant_feedback_apply(&fb, big, n, &d, enc), COLL_SUCCESS);
        ASSERT_EQ(coll__quant_decode(&d, enc, n, y), COLL_SUCCESS);
        for (size_t i = 0; i < n; i++)
            ASSERT(fb.residual[i] == big[i] - y[i]);
        check_bounds(&d, big, y, n);
        coll__quant_feedback_fini(&fb);
        free(enc);
    }
    free(big);
    free(y);
}

/* ---- 8 throughput ---------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: the test machines are shared */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Encode and decode GB/s (fp32 bytes in or out per second), printed as TAP comments when
 * COLL_QUANT_BENCH=1; asserts nothing about time. */
TEST(throughput)
{
    const size_t count = (size_t)16 << 20; /* 64 MiB of fp32 */
    float *x, *y;
    uint8_t *e;

    if (!getenv("COLL_QUANT_BENCH")) {
        printf("# throughput: set COLL_QUANT_BENCH=1 to measure\n");
        return;
    }
    x = (float *)xmalloc(count * 4);
    y = (float *)xmalloc(count * 4);
    e = xmalloc(count * 4 + 1024);
    fill(x, count, D_BELL, 1);
    for (size_t c = 0; c < NCODECS; c++)
        for (int sr = 0; sr < 2; sr++) {
            struct coll_quant_desc d = COLL_QUANT_DESC_INIT(all_codecs[c]);
            double t0, te = 1e9, td = 1e9, ta = 1e9;
            d.stochastic = sr;
            for (int rep = 0; rep < 3; rep++) {
                t0 = now_s();
                ASSERT_EQ(coll__quant_encode(&d, x, COLL_FLOAT32, count, e), COLL_SUCCESS);
                te = fmin(te, now_s() - t0);
                t0 = now_s();
                ASSERT_EQ(coll__quant_decode(&d, e, count, y), COLL_SUCCESS);
                td = fmin(td, now_s() - t0);
                t0 = now_s();
                ASSERT_EQ(coll__quant_decode_add(&d, e, count, y), COLL_SUCCESS);
                ta = fmin(ta, now_s() - t0);
            }
            printf("# %-5s %s: encode %6.2f GB/s  decode %6.2f GB/s  decode_add %6.2f GB/s "
                   "(fp32 bytes/s)\n",
                   coll__codec_name(d.codec), sr ? "sr " : "rne", 4.0 * count / te / 1e9,
                   4.0 * count / td / 1e9, 4.0 * count / ta / 1e9);
        }
    free(x);
    free(y);
    free(e);
}

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
