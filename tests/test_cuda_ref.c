/*
 * test_cuda_ref.c - what of the CUDA part runs without a GPU (CI has none):
 *
 *   - the k-input CPU reference coll__cuda_ref_reduce_copy, whose fold the kernels share
 *     (cuda.h), against an independent reference: narrow floats decoded from their fields
 *     with ldexp, arithmetic in long double (at least double), integers wrapped in 64 bits.
 *     Floats must land within the bound cuda.h documents, scaled by the magnitudes
 *     involved; integers, max/min and k <= 2 must match exactly (the last two also the
 *     host's pairwise coll__reduce, bit for bit). Every dtype x op, k = 1..8, one and two
 *     outputs, NaN/Inf, subnormals, odd lengths, element offsets, in place, bad arguments;
 *   - AVG: the reference's sum, then the division, bit for bit the host's (SUM followed by
 *     coll__reduce_div, and for two inputs the host's pairwise coll__reduce first), every
 *     dtype, divisors 1, 2, 3, 7, 9, with hand-worked values for each format;
 *   - run-time detection: with no GPU (or no libcudart) it says why, in CUDA's words, and
 *     nothing crashes; COLL_CUDA_DISABLE=1 keeps libcudart unloaded; COLL_CUDA_LIBRARY.
 *
 * Each case runs in its own process (harness.h), so each sees detection afresh.
 *
 * Divisions: 1 formats and the bound, 2 random k-input sweeps, 3 edge cases,
 * 4 AVG, 5 arguments, 6 detection.
 */
#include "cuda/cuda.h"
#include "reduce/elem.h"
#include "reduce/reduce.h"

#include "harness.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>

/* ---- 1 formats and the bound --------------------------------------------------------- */

static const coll_dtype_t dtypes[] = {
    COLL_INT8,    COLL_UINT8,   COLL_INT32,   COLL_UINT32,   COLL_INT64,      COLL_UINT64,
    COLL_FLOAT16, COLL_FLOAT32, COLL_FLOAT64, COLL_BFLOAT16, COLL_FLOAT8E4M3, COLL_FLOAT8E5M2,
};

struct fmt {
    int ebits, mbits, bias;
    bool finite_only; /* E4M3 */
};

static bool is_float(coll_dtype_t dt)
{
    return dt >= COLL_FLOAT16; /* coll.h: the six integer types come first */
}
static bool is_signed(coll_dtype_t dt)
{
    return dt == COLL_INT8 || dt == COLL_INT32 || dt == COLL_INT64;
}

static struct fmt fmt_of(coll_dtype_t dt)
{
    switch (dt) {
    case COLL_FLOAT16:
        return (struct fmt){5, 10, 15, false};
    case COLL_BFLOAT16:
        return (struct fmt){8, 7, 127, false};
    case COLL_FLOAT8E4M3:
        return (struct fmt){4, 3, 7, true};
    case COLL_FLOAT8E5M2:
        return (struct fmt){5, 2, 15, false};
    case COLL_FLOAT32:
        return (struct fmt){8, 23, 127, false};
    default:
        return (struct fmt){11, 52, 1023, false};
    }
}

static uint64_t get_bits(coll_dtype_t dt, const void *buf, size_t i)
{
    switch (coll__dtype_size(dt)) {
    case 1:
        return ((const uint8_t *)buf)[i];
    case 2:
        return ((const uint16_t *)buf)[i];
    case 4:
        return ((const uint32_t *)buf)[i];
    default:
        return ((const uint64_t *)buf)[i];
    }
}

static void put_bits(coll_dtype_t dt, void *buf, size_t i, uint64_t v)
{
    switch (coll__dtype_size(dt)) {
    case 1:
        ((uint8_t *)buf)[i] = (uint8_t)v;
        break;
    case 2:
        ((uint16_t *)buf)[i] = (uint16_t)v;
        break;
    case 4:
        ((uint32_t *)buf)[i] = (uint32_t)v;
        break;
    default:
        ((uint64_t *)buf)[i] = v;
        break;
    }
}

/* A float's value from its fields, with ldexp: shares nothing with elem.h. */
static long double decode(coll_dtype_t dt, uint64_t bits)
{
    struct fmt f = fmt_of(dt);
    uint64_t m = bits & ((1ull << f.mbits) - 1);
    uint64_t e = (bits >> f.mbits) & ((1ull << f.ebits) - 1);
    long double sign = (bits >> (f.ebits + f.mbits)) & 1 ? -1.0L : 1.0L;

    if (f.finite_only && e == (1ull << f.ebits) - 1 && m == (1ull << f.mbits) - 1)
        return NAN;
    if (!f.finite_only && e == (1ull << f.ebits) - 1)
        return m ? NAN : sign * INFINITY;
    if (e == 0)
        return sign * ldexpl((long double)m, 1 - f.bias - f.mbits);
    return sign * ldexpl((long double)(m | 1ull << f.mbits), (int)e - f.bias - f.mbits);
}

static bool bits_nan(coll_dtype_t dt, uint64_t bits)
{
    return is_float(dt) && isnan(decode(dt, bits));
}

/* The canonical NaN narrowing produces (elem.h); fp32/fp64 keep whatever NaN they get. */
static int64_t canon_nan(coll_dtype_t dt)
{
    switch (dt) {
    case COLL_FLOAT16:
    case COLL_BFLOAT16:
        return 0x7fff;
    case COLL_FLOAT8E4M3:
    case COLL_FLOAT8E5M2:
        return 0x7f;
    default:
        return -1;
    }
}

/*
 * The bound of cuda.h: |got - exact| <= u |exact| + (1 + u) e + sub / 2, where u is the
 * format's unit roundoff, sub its smallest subnormal, and e the accumulator's error over
 * k - 1 operations, (k - 1) eps scale (+ half an accumulator subnormal per operation);
 * scale is sum |x_i| for sums and |product| for products. exact NaN: got NaN; exact Inf:
 * the same Inf (E4M3, which has none: NaN).
 */
static bool within_bound(coll_dtype_t dt, long double got, long double exact, long double scale,
                         int k)
{
    struct fmt f = fmt_of(dt);
    bool f64 = dt == COLL_FLOAT64;
    long double u = ldexpl(1, -(f.mbits + 1)), sub = ldexpl(1, 1 - f.bias - f.mbits);
    long double eps = ldexpl(1, f64 ? -53 : -24), asub = ldexpl(1, f64 ? -1075 : -150);
    long double e, tol;

    if (isnan(exact))
        return isnan(got);
    if (isinf(exact))
        return f.finite_only ? isnan(got) : got == exact;
    if (!isfinite(got))
        return false;
    e = (k - 1) * (eps * scale + asub);
    tol = u * fabsl(exact) + (1 + u) * e + sub / 2;
    return fabsl(got - exact) <= tol * (1 + ldexpl(1, -40));
}

/* The k-input result of element i by other means. Floats: the exact value and its scale;
 * integers: the exact bits. */
struct expect {
    bool exact_bits; /* integers, max, min: compare bits (any NaN for fp32/fp64) */
    uint64_t bits;
    long double value, scale;
};

/* Max/min with NaN winning and -0 below +0 (elem.h's rules), on bits: the result is one
 * of the inputs, so its bits are the expectation. */
static bool float_greater(coll_dtype_t dt, uint64_t a, uint64_t b)
{
    long double x = decode(dt, a), y = decode(dt, b);

    if (x != y)
        return x > y;
    return x == 0 && !signbit(x) && signbit(y);
}

static struct expect expect_elem(coll_dtype_t dt, coll_op_t op, void *const *src, int k, size_t i)
{
    struct expect x = {0};
    int bits = (int)coll__dtype_size(dt) * 8;
    uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;

    if (op == COLL_AVG)
        op = COLL_SUM;
    if (!is_float(dt)) {
        uint64_t acc = get_bits(dt, src[0], i);
        x.exact_bits = true;
        for (int s = 1; s < k; s++) {
            uint64_t v = get_bits(dt, src[s], i);
            int64_t sa = (int64_t)(acc << (64 - bits)) >> (64 - bits);
            int64_t sv = (int64_t)(v << (64 - bits)) >> (64 - bits);
            bool gt = is_signed(dt) ? sv > sa : v > acc;
            bool lt = is_signed(dt) ? sv < sa : v < acc;

            switch (op) {
            case COLL_SUM:
                acc = (acc + v) & mask;
                break;
            case COLL_PROD:
                acc = (acc * v) & mask;
                break;
            case COLL_MAX:
                acc = gt ? v : acc;
                break;
            default:
                acc = lt ? v : acc;
                break;
            }
        }
        x.bits = acc;
        return x;
    }
    if (op == COLL_MAX || op == COLL_MIN) {
        uint64_t acc = get_bits(dt, src[0], i);
        x.exact_bits = true;
        for (int s = 1; s < k; s++) {
            uint64_t v = get_bits(dt, src[s], i);
            if (bits_nan(dt, acc))
                continue;
            if (bits_nan(dt, v) ||
                (op == COLL_MAX ? float_greater(dt, v, acc) : float_greater(dt, acc, v)))
                acc = v;
        }
        x.bits = acc;
        return x;
    }
    x.value = op == COLL_SUM ? 0.0L : 1.0L;
    x.scale = op == COLL_SUM ? 0.0L : 1.0L;
    for (int s = 0; s < k; s++) {
        long double v = decode(dt, get_bits(dt, src[s], i));
        x.value = op == COLL_SUM ? x.value + v : x.value * v;
        x.scale = op == COLL_SUM ? x.scale + fabsl(v) : x.scale * fabsl(v);
    }
    if (k == 1) { /* a copy: exact, bits included (narrow NaNs become the canonical one) */
        x.exact_bits = true;
        x.bits = get_bits(dt, src[0], i);
    }
    return x;
}

/* Check element i of got against the expectation; on failure say everything. */
static void check_elem(coll_dtype_t dt, coll_op_t op, void *const *src, int k, const void *got,
                       size_t i)
{
    struct expect x = expect_elem(dt, op, src, k, i);
    uint64_t g = get_bits(dt, got, i);
    bool ok;

    if (x.exact_bits && bits_nan(dt, x.bits))
        ok = bits_nan(dt, g) && (canon_nan(dt) < 0 || g == (uint64_t)canon_nan(dt));
    else if (x.exact_bits)
        ok = g == x.bits;
    else
        ok = within_bound(dt, decode(dt, g), x.value, x.scale, k) &&
             (!isnan(x.value) || canon_nan(dt) < 0 || g == (uint64_t)canon_nan(dt));
    if (!ok) {
        fprintf(stderr, "# %s %s k=%d element %zu: got 0x%llx (%Lg), expected ",
                coll__dtype_name(dt), coll__op_name(op), k, i, (unsigned long long)g,
                is_float(dt) ? decode(dt, g) : 0.0L);
        if (x.exact_bits)
            fprintf(stderr, "0x%llx exactly\n", (unsigned long long)x.bits);
        else
            fprintf(stderr, "%.21Lg (scale %Lg)\n", x.value, x.scale);
        for (int s = 0; s < k; s++)
            fprintf(stderr, "#   src[%d] = 0x%llx (%Lg)\n", s,
                    (unsigned long long)get_bits(dt, src[s], i),
                    is_float(dt) ? decode(dt, get_bits(dt, src[s], i)) : 0.0L);
        HARNESS_FAIL("reduce-copy result outside the bound");
    }
}

/* ---- 2 random k-input sweeps ----------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

enum regime { R_ANY_BITS, R_MODERATE, R_NEAR_ONE, R_SUBNORMAL };

/* A float value's bits: narrowed from fp32 through elem.h (representable by construction),
 * or built from fields directly. */
static uint64_t float_bits(coll_dtype_t dt, double v)
{
    switch (dt) {
    case COLL_FLOAT16:
        return coll__f32_to_f16((float)v);
    case COLL_BFLOAT16:
        return coll__f32_to_bf16((float)v);
    case COLL_FLOAT8E4M3:
        return coll__f32_to_e4m3((float)v);
    case COLL_FLOAT8E5M2:
        return coll__f32_to_e5m2((float)v);
    case COLL_FLOAT32:
        return coll__f32_bits((float)v);
    default: {
        uint64_t u;
        memcpy(&u, &v, sizeof(u));
        return u;
    }
    }
}

static uint64_t random_elem(coll_dtype_t dt, enum regime r)
{
    struct fmt f = fmt_of(dt);
    double m = 1.0 + (double)(rnd() >> 11) * 0x1p-53, sign = rnd() & 1 ? -1.0 : 1.0;

    if (!is_float(dt) || r == R_ANY_BITS)
        return rnd();
    switch (r) {
    case R_MODERATE: /* 2^-4 .. 2^4: sums of 8 stay below E4M3's 448 */
        return float_bits(dt, sign * ldexp(m, (int)(rnd() % 9) - 4));
    case R_NEAR_ONE: /* 0.5 .. 2: products of 8 stay within every format's range */
        return float_bits(dt, sign * ldexp(m, -(int)(rnd() % 2)));
    default: /* exponent field 0 or 1: subnormals and the smallest normals */
        return (rnd() & ((2ull << f.mbits) - 1)) | (uint64_t)(sign < 0) << (f.ebits + f.mbits);
    }
}

/* k inputs of count elements; the reference writes ndsts outputs; every element checked,
 * both outputs equal, and the guard bytes around the outputs untouched. */
#define GUARD 32
static void sweep_one(coll_dtype_t dt, coll_op_t op, int k, int ndsts, size_t count, enum regime r)
{
    size_t es = coll__dtype_size(dt), bytes = count * es;
    void *src[COLL_CUDA_MAX_SRCS];
    uint8_t *raw[COLL_CUDA_MAX_DSTS];
    void *dst[COLL_CUDA_MAX_DSTS];

    for (int s = 0; s < k; s++) {
        src[s] = malloc(bytes + 1);
        for (size_t i = 0; i < count; i++)
            put_bits(dt, src[s], i, random_elem(dt, r));
    }
    for (int d = 0; d < ndsts; d++) {
        raw[d] = malloc(bytes + 2 * GUARD);
        memset(raw[d], 0xa5, bytes + 2 * GUARD);
        dst[d] = raw[d] + GUARD;
    }
    ASSERT_EQ(
        coll__cuda_ref_reduce_copy(NULL, dst, ndsts, (const void *const *)src, k, count, dt, op, 1),
        COLL_SUCCESS);
    for (size_t i = 0; i < count; i++)
        check_elem(dt, op, src, k, dst[0], i);
    for (int d = 0; d < ndsts; d++) {
        for (size_t b = 0; b < GUARD; b++)
            ASSERT(raw[d][b] == 0xa5 && raw[d][GUARD + bytes + b] == 0xa5);
        ASSERT(memcmp(dst[d], dst[0], bytes) == 0);
    }
    for (int d = 0; d < ndsts; d++)
        free(raw[d]);
    for (int s = 0; s < k; s++)
        free(src[s]);
}

static void sweep(enum regime r, bool narrow_only, const coll_op_t *ops, int nops)
{
    for (size_t t = 0; t < COLL_ARRAY_SIZE(dtypes); t++) {
        coll_dtype_t dt = dtypes[t];
        if (narrow_only ? !is_float(dt) : false)
            continue;
        for (int o = 0; o < nops; o++)
            for (int k = 1; k <= COLL_CUDA_MAX_SRCS; k++)
                sweep_one(dt, ops[o], k, 1 + k % 2, 257, r);
    }
}

/* Integers: every op on any bits, exact. Floats, max/min: any bits, NaN and Inf among them,
 * exact. */
TEST(sweep_any_bits)
{
    static const coll_op_t ops[] = {COLL_SUM, COLL_PROD, COLL_MAX, COLL_MIN, COLL_AVG};
    static const coll_op_t minmax[] = {COLL_MAX, COLL_MIN};

    for (size_t t = 0; t < COLL_ARRAY_SIZE(dtypes); t++)
        for (int k = 1; k <= COLL_CUDA_MAX_SRCS; k++)
            for (int o = 0; o < (is_float(dtypes[t]) ? 2 : 5); o++)
                sweep_one(dtypes[t], is_float(dtypes[t]) ? minmax[o] : ops[o], k, 2, 301,
                          R_ANY_BITS);
}

/* Float sums within the bound, moderate magnitudes of both signs (cancellation included). */
TEST(sweep_float_sum)
{
    static const coll_op_t ops[] = {COLL_SUM, COLL_AVG};
    sweep(R_MODERATE, true, ops, 2);
}

TEST(sweep_float_prod)
{
    static const coll_op_t ops[] = {COLL_PROD};
    sweep(R_NEAR_ONE, true, ops, 1);
}

/* Subnormal inputs in every float format (never flushed): sums and max/min. */
TEST(sweep_subnormals)
{
    static const coll_op_t ops[] = {COLL_SUM, COLL_MAX, COLL_MIN};
    sweep(R_SUBNORMAL, true, ops, 3);
}

/* Wherever fused and pairwise must agree (k <= 2; max/min, integers, fp32 and fp64 for any
 * k): bit for bit the host's pairwise coll__reduce. */
TEST(matches_pairwise_host_reduce)
{
    enum { N = 199 };
    for (size_t t = 0; t < COLL_ARRAY_SIZE(dtypes); t++) {
        coll_dtype_t dt = dtypes[t];
        size_t es = coll__dtype_size(dt);
        for (int op = 0; op < COLL_NUM_OPS; op++) {
            for (int k = 1; k <= COLL_CUDA_MAX_SRCS; k++) {
                uint64_t src[COLL_CUDA_MAX_SRCS][N], fused[N], pair[N];
                const void *sp[COLL_CUDA_MAX_SRCS];
                void *dp[1] = {fused};
                bool same = k <= 2 || op == COLL_MAX || op == COLL_MIN || !is_float(dt) ||
                            dt == COLL_FLOAT32 || dt == COLL_FLOAT64; /* no narrowing */

                if (!same)
                    continue;
                for (int s = 0; s < k; s++) {
                    for (size_t i = 0; i < N; i++)
                        put_bits(dt, src[s], i, random_elem(dt, R_ANY_BITS));
                    sp[s] = src[s];
                }
                ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, sp, k, N, dt, op, 1),
                          COLL_SUCCESS);
                memcpy(pair, src[0], N * es);
                if (k == 1) /* pairwise of one input is the input, narrow NaNs left as they are */
                    coll__reduce(pair, src[0], src[0], N, dt, COLL_MAX);
                for (int s = 1; s < k; s++)
                    coll__reduce(pair, pair, src[s], N, dt, op);
                for (size_t i = 0; i < N; i++) {
                    uint64_t a = get_bits(dt, fused, i), b = get_bits(dt, pair, i);
                    ASSERT_MSG(a == b || (bits_nan(dt, a) && bits_nan(dt, b)),
                               "%s %s k=%d [%zu]: fused 0x%llx, pairwise 0x%llx",
                               coll__dtype_name(dt), coll__op_name(op), k, i, (unsigned long long)a,
                               (unsigned long long)b);
                }
            }
        }
    }
}

/* ---- 3 edge cases ----------------------------------------------------------------------- */

/* One element, k inputs given as fp32 values, narrowed to dt; returns the result's bits. */
static uint64_t one(coll_dtype_t dt, coll_op_t op, int k, const double *v)
{
    uint64_t in[COLL_CUDA_MAX_SRCS], out = 0;
    const void *sp[COLL_CUDA_MAX_SRCS];
    void *dp[1] = {&out};

    for (int s = 0; s < k; s++) {
        in[s] = float_bits(dt, v[s]);
        sp[s] = &in[s];
    }
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, sp, k, 1, dt, op, 1), COLL_SUCCESS);
    return out;
}

static const coll_dtype_t floats[] = {COLL_FLOAT16,  COLL_FLOAT32,    COLL_FLOAT64,
                                      COLL_BFLOAT16, COLL_FLOAT8E4M3, COLL_FLOAT8E5M2};

TEST(nan_and_inf)
{
    for (size_t t = 0; t < COLL_ARRAY_SIZE(floats); t++) {
        coll_dtype_t dt = floats[t];
        bool e4m3 = dt == COLL_FLOAT8E4M3;
        double nan_any[3] = {1.0, NAN, 2.0}, inf_one[2] = {INFINITY, 1.0};
        double inf_inf[3] = {1.0, INFINITY, -INFINITY};

        for (int op = 0; op < COLL_NUM_OPS; op++) {
            uint64_t r = one(dt, op, 3, nan_any);
            ASSERT_MSG(bits_nan(dt, r), "%s %s with a NaN input", coll__dtype_name(dt),
                       coll__op_name(op));
            if (canon_nan(dt) >= 0)
                ASSERT_EQ(r, canon_nan(dt));
        }
        /* Inf + 1 = Inf, max(Inf, 1) = Inf; E4M3 has no Inf: NaN (non-saturating) */
        ASSERT(decode(dt, one(dt, COLL_SUM, 2, inf_one)) == INFINITY || e4m3);
        ASSERT(decode(dt, one(dt, COLL_MAX, 2, inf_one)) == INFINITY || e4m3);
        ASSERT(decode(dt, one(dt, COLL_MIN, 2, inf_one)) == 1.0L || e4m3);
        if (e4m3) {
            ASSERT(bits_nan(dt, one(dt, COLL_SUM, 2, inf_one)));
            ASSERT(bits_nan(dt, one(dt, COLL_MIN, 2, inf_one)));
        }
        ASSERT(bits_nan(dt, one(dt, COLL_SUM, 3, inf_inf)));
    }
}

TEST(signed_zero)
{
    for (size_t t = 0; t < COLL_ARRAY_SIZE(floats); t++) {
        coll_dtype_t dt = floats[t];
        double pn[2] = {0.0, -0.0}, np[2] = {-0.0, 0.0}, nn[3] = {-0.0, -0.0, -0.0};

        ASSERT(!signbit(decode(dt, one(dt, COLL_MAX, 2, pn))));
        ASSERT(!signbit(decode(dt, one(dt, COLL_MAX, 2, np))));
        ASSERT(signbit(decode(dt, one(dt, COLL_MIN, 2, pn))));
        ASSERT(signbit(decode(dt, one(dt, COLL_MIN, 2, np))));
        ASSERT(signbit(decode(dt, one(dt, COLL_SUM, 3, nn))));
        ASSERT(!signbit(decode(dt, one(dt, COLL_SUM, 2, pn))));
    }
}

/* Overflow happens at the final rounding only; partial sums in fp32 do not overflow. This
 * is where fused and pairwise differ most, as cuda.h documents. */
TEST(overflow_only_at_the_end)
{
    double f16_back[3] = {65504, 65504, -65504}, f16_over[2] = {65504, 65504};
    double e4_back[3] = {448, 448, -448}, e4_over[2] = {448, 32}, e4_tie[2] = {448, 16};
    double e5_over[2] = {57344, 57344};
    uint16_t a = 0x7bff, pair;

    ASSERT_EQ(one(COLL_FLOAT16, COLL_SUM, 3, f16_back), 0x7bff); /* 65504 */
    coll__reduce(&pair, &a, &a, 1, COLL_FLOAT16, COLL_SUM);      /* pairwise: Inf first */
    ASSERT_EQ(pair, 0x7c00);
    ASSERT_EQ(one(COLL_FLOAT16, COLL_SUM, 2, f16_over), 0x7c00);
    ASSERT_EQ(one(COLL_FLOAT8E4M3, COLL_SUM, 3, e4_back), 0x7e); /* 448 */
    ASSERT_EQ(one(COLL_FLOAT8E4M3, COLL_SUM, 2, e4_over), 0x7f); /* 480 > 464: NaN */
    ASSERT_EQ(one(COLL_FLOAT8E4M3, COLL_SUM, 2, e4_tie), 0x7e);  /* 464: tie to even, 448 */
    ASSERT_EQ(one(COLL_FLOAT8E5M2, COLL_SUM, 2, e5_over), 0x7c); /* Inf */
}

/* The fused sum is nearer the exact one than pairwise rounding, and the bound catches the
 * difference: fp16 1 + 7 x 2^-11 is 1 pairwise (every step a tie to even), 1 + 2^-8 fused.
 * This also shows the checker can fail. */
TEST(bound_rejects_pairwise_error)
{
    double v[8] = {1, 0x1p-11, 0x1p-11, 0x1p-11, 0x1p-11, 0x1p-11, 0x1p-11, 0x1p-11};
    long double exact = 1.0L + 7 * 0x1p-11L, scale = exact;
    uint16_t pair = 0x3c00, x = 0x1000; /* 1, 2^-11 */

    ASSERT_EQ(one(COLL_FLOAT16, COLL_SUM, 8, v), 0x3c04);
    for (int s = 1; s < 8; s++)
        coll__reduce(&pair, &pair, &x, 1, COLL_FLOAT16, COLL_SUM);
    ASSERT_EQ(pair, 0x3c00);
    ASSERT(within_bound(COLL_FLOAT16, decode(COLL_FLOAT16, 0x3c04), exact, scale, 8));
    ASSERT(!within_bound(COLL_FLOAT16, decode(COLL_FLOAT16, pair), exact, scale, 8));
    /* two ulps off at k = 2 is outside too; half an ulp is inside */
    ASSERT(!within_bound(COLL_FLOAT16, 1.0L + 3 * 0x1p-10L, 1.0L + 0x1p-10L, 2.0L, 2));
    ASSERT(within_bound(COLL_FLOAT16, 1.0L, 1.0L + 0x1p-11L, 2.0L, 2));
    ASSERT(!within_bound(COLL_FLOAT32, 1.0L + 0x1p-21L, 1.0L, 2.0L, 2));
    ASSERT(!within_bound(COLL_FLOAT8E4M3, INFINITY, INFINITY, 0, 2)); /* E4M3 has no Inf */
}

TEST(subnormal_sums_exact)
{
    double f16_sub[8], e4_sub[8], f32_min[2] = {0x1p-149, 0x1p-149};
    double f64_min[3] = {0x1p-1074, 0x1p-1074, -0x1p-1074};

    for (int s = 0; s < 8; s++) {
        f16_sub[s] = 0x1p-24; /* fp16's smallest subnormal */
        e4_sub[s] = 0x1p-9;   /* E4M3's */
    }
    ASSERT_EQ(one(COLL_FLOAT16, COLL_SUM, 8, f16_sub), 0x0008);
    ASSERT_EQ(one(COLL_FLOAT8E4M3, COLL_SUM, 8, e4_sub), 0x08); /* 2^-6, smallest normal */
    ASSERT_EQ(one(COLL_FLOAT8E4M3, COLL_SUM, 3, e4_sub), 0x03);
    ASSERT_EQ(one(COLL_FLOAT32, COLL_SUM, 2, f32_min), 2);
    ASSERT_EQ(one(COLL_FLOAT64, COLL_SUM, 3, f64_min), 1);
}

/* Lengths 0..40 at element offsets 0..3 of every input and output: each element's result
 * is the same as in an aligned call, and nothing outside [0, count) is written. */
TEST(odd_lengths_and_offsets)
{
    enum { MAXN = 40, PAD = 4 };
    for (size_t t = 0; t < COLL_ARRAY_SIZE(dtypes); t++) {
        coll_dtype_t dt = dtypes[t];
        size_t es = coll__dtype_size(dt);
        uint64_t base[3][MAXN], want[MAXN];
        uint64_t in[3][MAXN + PAD], out[MAXN + 2 * PAD];
        const void *sp[3];
        void *dp[1];

        for (int s = 0; s < 3; s++)
            for (size_t i = 0; i < MAXN; i++)
                put_bits(dt, base[s], i, random_elem(dt, R_ANY_BITS));
        sp[0] = base[0], sp[1] = base[1], sp[2] = base[2];
        dp[0] = want;
        ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, sp, 3, MAXN, dt, COLL_SUM, 1),
                  COLL_SUCCESS);
        for (size_t n = 0; n <= MAXN; n++) {
            for (size_t off = 0; off < PAD; off++) {
                for (int s = 0; s < 3; s++) {
                    memcpy((uint8_t *)in[s] + (off + s) % PAD * es, base[s], n * es);
                    sp[s] = (uint8_t *)in[s] + (off + s) % PAD * es;
                }
                memset(out, 0x5a, sizeof(out));
                dp[0] = (uint8_t *)out + (PAD + off) * es;
                ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, sp, 3, n, dt, COLL_SUM, 1),
                          COLL_SUCCESS);
                ASSERT(memcmp(dp[0], want, n * es) == 0);
                for (size_t b = 0; b < (PAD + off) * es; b++)
                    ASSERT(((uint8_t *)out)[b] == 0x5a);
                for (size_t b = (PAD + off + n) * es; b < sizeof(out); b++)
                    ASSERT(((uint8_t *)out)[b] == 0x5a);
            }
        }
    }
}

/* A dst equal to an input, first or last, gives the out-of-place result. */
TEST(in_place)
{
    enum { N = 77, K = 4 };
    for (size_t t = 0; t < COLL_ARRAY_SIZE(dtypes); t++) {
        coll_dtype_t dt = dtypes[t];
        for (int where = 0; where < K; where += K - 1) {
            uint64_t src[K][N], want[N];
            const void *sp[K];
            void *dp[2] = {want, NULL};

            for (int s = 0; s < K; s++) {
                for (size_t i = 0; i < N; i++)
                    put_bits(dt, src[s], i, random_elem(dt, R_MODERATE));
                sp[s] = src[s];
            }
            ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, sp, K, N, dt, COLL_SUM, 1),
                      COLL_SUCCESS);
            dp[0] = src[where];
            ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, sp, K, N, dt, COLL_SUM, 1),
                      COLL_SUCCESS);
            ASSERT(memcmp(src[where], want, N * coll__dtype_size(dt)) == 0);
        }
    }
}

/* ---- 4 AVG: the sum, then the division ------------------------------------------------- */

/*
 * AVG with divisor n against the host's own ending of AVG: the reference's SUM of the same
 * inputs, then coll__reduce_div (reduce.c's loop), bit for bit; for k <= 2 also against the
 * host's pairwise coll__reduce, then coll__reduce_div (what a host all-reduce of two ranks
 * computes). Every dtype, k = 1..8, n = 1, 2, 3, 7 and 9, random bits (NaN, Inf, negative
 * integers, subnormals) and moderate magnitudes, an odd length, every input and the
 * outputs at their own element offsets, two outputs, guard bytes.
 */
static void avg_one(coll_dtype_t dt, int k, uint32_t n, enum regime r, size_t off)
{
    enum { N = 131, PAD = 4 };
    size_t es = coll__dtype_size(dt), bytes = N * es;
    uint64_t in[COLL_CUDA_MAX_SRCS][N + PAD], out[2][N + 2 * PAD], want[N], pair[N];
    const void *sp[COLL_CUDA_MAX_SRCS];
    void *dp[2], *wp[1] = {want};

    for (int s = 0; s < k; s++) {
        sp[s] = (uint8_t *)in[s] + (off + (size_t)s) % PAD * es;
        for (size_t i = 0; i < N; i++)
            put_bits(dt, (void *)sp[s], i, random_elem(dt, r));
    }
    memset(out, 0x5a, sizeof(out));
    dp[0] = (uint8_t *)out[0] + (PAD + off) * es;
    dp[1] = (uint8_t *)out[1] + (PAD + (off + 1) % PAD) * es;
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 2, sp, k, N, dt, COLL_AVG, n), COLL_SUCCESS);
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, wp, 1, sp, k, N, dt, COLL_SUM, 1), COLL_SUCCESS);
    coll__reduce_div(want, N, dt, n);
    if (k <= 2) {
        coll__reduce(pair, sp[0], sp[k - 1], N, dt, k == 2 ? COLL_SUM : COLL_MAX);
        coll__reduce_div(pair, N, dt, n);
    }
    for (size_t i = 0; i < N; i++) {
        uint64_t g = get_bits(dt, dp[0], i), w = get_bits(dt, want, i);
        bool nan_ok = (dt == COLL_FLOAT32 || dt == COLL_FLOAT64) && bits_nan(dt, g) &&
                      bits_nan(dt, w); /* which NaN fp32/fp64 arithmetic returns is free */

        ASSERT_MSG(g == w || nan_ok, "%s avg k=%d n=%u [%zu]: 0x%llx, sum then div 0x%llx",
                   coll__dtype_name(dt), k, n, i, (unsigned long long)g, (unsigned long long)w);
        ASSERT(get_bits(dt, dp[1], i) == g);
        if (k <= 2) {
            w = get_bits(dt, pair, i);
            ASSERT_MSG(g == w || (nan_ok && bits_nan(dt, w)),
                       "%s avg k=%d n=%u [%zu]: 0x%llx, host pairwise then div 0x%llx",
                       coll__dtype_name(dt), k, n, i, (unsigned long long)g,
                       (unsigned long long)w);
        }
    }
    for (int d = 0; d < 2; d++) {
        const uint8_t *o = (const uint8_t *)out[d], *at = dp[d];
        for (size_t b = 0; b < sizeof(out[d]); b++)
            if (o + b < at || o + b >= at + bytes)
                ASSERT_MSG(o[b] == 0x5a, "%s avg: byte %zd outside output %d written",
                           coll__dtype_name(dt), (ssize_t)(o + b - at), d);
    }
}

TEST(avg_is_sum_then_host_division)
{
    static const uint32_t ns[] = {1, 2, 3, 7, 9};
    for (size_t t = 0; t < COLL_ARRAY_SIZE(dtypes); t++)
        for (int k = 1; k <= COLL_CUDA_MAX_SRCS; k++)
            for (size_t j = 0; j < COLL_ARRAY_SIZE(ns); j++) {
                avg_one(dtypes[t], k, ns[j], R_ANY_BITS, (size_t)k % 4);
                if (is_float(dtypes[t]))
                    avg_one(dtypes[t], k, ns[j], R_MODERATE, j % 4);
            }
}

/* Divisor 1 is SUM, bit for bit, whatever the inputs (NaNs included). */
TEST(avg_by_one_is_sum)
{
    enum { N = 67 };
    for (size_t t = 0; t < COLL_ARRAY_SIZE(dtypes); t++) {
        coll_dtype_t dt = dtypes[t];
        uint64_t src[3][N], sum[N], avg[N];
        const void *sp[3] = {src[0], src[1], src[2]};
        void *dsum[1] = {sum}, *davg[1] = {avg};

        for (int s = 0; s < 3; s++)
            for (size_t i = 0; i < N; i++)
                put_bits(dt, src[s], i, random_elem(dt, R_ANY_BITS));
        ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dsum, 1, sp, 3, N, dt, COLL_SUM, 1),
                  COLL_SUCCESS);
        ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, davg, 1, sp, 3, N, dt, COLL_AVG, 1),
                  COLL_SUCCESS);
        ASSERT(memcmp(sum, avg, N * coll__dtype_size(dt)) == 0);
    }
}

/* Two inputs' AVG by n, from bits; returns the result's bits. */
static uint64_t avg2(coll_dtype_t dt, uint64_t a, uint64_t b, uint32_t n)
{
    uint64_t in[2] = {0, 0}, out = 0;
    const void *sp[2] = {&in[0], &in[1]};
    void *dp[1] = {&out};

    put_bits(dt, &in[0], 0, a);
    put_bits(dt, &in[1], 0, b);
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, sp, 2, 1, dt, COLL_AVG, n), COLL_SUCCESS);
    return get_bits(dt, &out, 0);
}

/* Values worked out by hand, so that the reference and coll__reduce_div cannot be wrong
 * together: the sum wraps or rounds in the dtype first, then divides with the dtype's sign. */
TEST(avg_known_values)
{
    ASSERT_EQ(avg2(COLL_INT8, (uint8_t)-7, 0, 2), (uint8_t)-3);     /* toward zero */
    ASSERT_EQ(avg2(COLL_INT8, 127, 1, 2), (uint8_t)-64);            /* -128 / 2 */
    ASSERT_EQ(avg2(COLL_INT8, (uint8_t)-100, (uint8_t)-100, 7), 8); /* 56 / 7 */
    ASSERT_EQ(avg2(COLL_UINT8, 255, 0, 7), 36);
    ASSERT_EQ(avg2(COLL_UINT8, 200, 100, 2), 22);                   /* 44 / 2 */
    ASSERT_EQ(avg2(COLL_INT32, 0x80000000u, 0xffffffffu, 3), 715827882); /* INT32_MAX / 3 */
    ASSERT_EQ(avg2(COLL_UINT32, 0xffffffffu, 0, 3), 0x55555555);
    ASSERT_EQ(avg2(COLL_INT64, 1ull << 63, 0, 3), (uint64_t)-3074457345618258602ll);
    ASSERT_EQ(avg2(COLL_UINT64, ~0ull, 0, 7), 2635249153387078802ull);
    /* 1/3 in every float format */
    ASSERT_EQ(avg2(COLL_FLOAT16, 0x3c00, 0, 3), 0x3555);
    ASSERT_EQ(avg2(COLL_BFLOAT16, 0x3f80, 0, 3), 0x3eab);
    ASSERT_EQ(avg2(COLL_FLOAT32, 0x3f800000, 0, 3), 0x3eaaaaab);
    ASSERT_EQ(avg2(COLL_FLOAT64, 0x3ff0000000000000ull, 0, 3), 0x3fd5555555555555ull);
    ASSERT_EQ(avg2(COLL_FLOAT8E4M3, 0x38, 0, 3), 0x2b); /* 0.34375 */
    ASSERT_EQ(avg2(COLL_FLOAT8E5M2, 0x3c, 0, 3), 0x35); /* 0.3125 */
    /* Rounded twice, as the host does: fp16 1 + 1.0518 = 2.0518 rounds to 2.0508 before
     * the division (0.68359); dividing the fp32 sum would give 0.68408 (0x3979). */
    ASSERT_EQ(avg2(COLL_FLOAT16, 0x3c00, 0x3c35, 3), 0x3978);
    /* A sum that overflows the format stays overflowed: the host's sum is Inf (E4M3: NaN)
     * before it divides, where dividing the fp32 sum would give the largest finite value. */
    ASSERT_EQ(avg2(COLL_FLOAT16, 0x7bff, 0x7bff, 2), 0x7c00);
    ASSERT_EQ(avg2(COLL_FLOAT8E4M3, 0x7e, 0x7e, 2), 0x7f);
    ASSERT_EQ(avg2(COLL_FLOAT8E5M2, 0x7b, 0x7b, 2), 0x7c);
    /* Inf / n is Inf, NaN stays the canonical NaN, -0 keeps its sign */
    ASSERT_EQ(avg2(COLL_FLOAT16, 0xfc00, 0x3c00, 7), 0xfc00);
    ASSERT_EQ(avg2(COLL_BFLOAT16, 0x7fc1, 0x3c00, 3), 0x7fff);
    ASSERT_EQ(avg2(COLL_FLOAT32, 0x80000000u, 0x80000000u, 3), 0x80000000u);
    /* subnormals divide, never flushed: 2 ulps / 3 rounds to 1 ulp; 1 ulp / 2 is a tie,
     * to even: 0 */
    ASSERT_EQ(avg2(COLL_FLOAT16, 0x0001, 0x0001, 3), 0x0001);
    ASSERT_EQ(avg2(COLL_FLOAT16, 0x0001, 0, 2), 0x0000);
}

/* ---- 5 arguments ------------------------------------------------------------------------ */

TEST(bad_arguments)
{
    uint32_t a[4] = {0}, b[4] = {0};
    const void *sp[9] = {a, a, a, a, a, a, a, a, a};
    const void *nul[2] = {a, NULL};
    void *dp[3] = {b, b, b};
    void *mis[1] = {(uint8_t *)b + 2};

    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, sp, 0, 4, COLL_FLOAT32, COLL_SUM, 1),
              COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "0 inputs (1 to 8)");
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, sp, 9, 4, COLL_FLOAT32, COLL_SUM, 1),
              COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 3, sp, 2, 4, COLL_FLOAT32, COLL_SUM, 1),
              COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "3 outputs (1 to 2)");
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, sp, 2, 4, COLL_NUM_DTYPES, COLL_SUM, 1),
              COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, sp, 2, 4, COLL_FLOAT32, COLL_NUM_OPS, 1),
              COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, nul, 2, 4, COLL_FLOAT32, COLL_SUM, 1),
              COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "input 1 is NULL");
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, mis, 1, sp, 2, 4, COLL_FLOAT32, COLL_SUM, 1),
              COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "not aligned to its 4-byte");
    /* a divisor of 0, or one that an op other than AVG would drop */
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, sp, 2, 4, COLL_INT32, COLL_AVG, 0),
              COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "divisor 0 with op avg");
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, sp, 2, 4, COLL_INT32, COLL_SUM, 2),
              COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "divisor 2 with op sum");
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, sp, 2, 4, COLL_INT32, COLL_MAX, 0),
              COLL_INVALID_ARGUMENT);
    /* count 0: nothing is read or written, NULL buffers included */
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, nul, 2, 0, COLL_FLOAT32, COLL_SUM, 1),
              COLL_SUCCESS);
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, nul, 2, 0, COLL_FLOAT32, COLL_AVG, 3),
              COLL_SUCCESS);
    /* the same checks guard the device path, before it looks for CUDA */
    ASSERT_EQ(coll__cuda_reduce_copy(NULL, dp, 1, sp, 9, 4, COLL_FLOAT32, COLL_SUM, 1, NULL),
              COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__cuda_reduce_copy(NULL, dp, 1, sp, 2, 4, COLL_FLOAT32, COLL_AVG, 0, NULL),
              COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__cuda_reduce_copy(NULL, dp, 1, sp, 2, 4, COLL_FLOAT32, COLL_PROD, 3, NULL),
              COLL_INVALID_ARGUMENT);
}

/* ---- 6 detection ------------------------------------------------------------------------ */

/* Whether a library of that name is mapped in this process (without loading it). */
static bool loaded(const char *name)
{
    void *h = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    if (h)
        dlclose(h);
    return h != NULL;
}

/* A GPU is there when the NVIDIA device nodes are (a heuristic for the test only). */
static bool gpu_present(void)
{
    return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0;
}

/* With CUDA off for whatever reason, nothing crashes: host pointers are host memory, the
 * device path says why it cannot run, and the table is withheld. */
static void assert_off_and_harmless(const char *why)
{
    uint32_t a[4] = {1, 2, 3, 4}, b[4];
    const void *sp[2] = {a, a};
    void *dp[1] = {b};
    enum coll_mem_kind kind = COLL_MEM_DEVICE;
    int dev = 7;

    ASSERT(!coll__cuda_available());
    ASSERT(coll__cudart() == NULL);
    ASSERT_EQ(coll__cuda_mem_kind(NULL, a, &kind, &dev), COLL_SUCCESS);
    ASSERT_EQ(kind, COLL_MEM_UNREGISTERED);
    ASSERT_EQ(dev, -1);
    ASSERT_EQ(coll__cuda_reduce_copy(NULL, dp, 1, sp, 2, 4, COLL_UINT32, COLL_SUM, 1, NULL),
              COLL_INVALID_USAGE);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), why);
    /* the host reference still works */
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, dp, 1, sp, 2, 4, COLL_UINT32, COLL_SUM, 1),
              COLL_SUCCESS);
    ASSERT_EQ(b[3], 8);
}

TEST(detect_default)
{
    const char *why = NULL;
    enum coll_cuda_state st;

    unsetenv("COLL_CUDA_DISABLE");
    unsetenv("COLL_CUDA_LIBRARY");
    st = coll__cuda_state(&why);
    printf("# cuda: state %d: %s\n", (int)st, why);
    ASSERT(why && *why);
    ASSERT(st == COLL_CUDA_READY || st == COLL_CUDA_NO_LIBRARY || st == COLL_CUDA_NO_DEVICE);
    if (st == COLL_CUDA_READY) {
        ASSERT(coll__cudart() != NULL);
        ASSERT_STR_CONTAINS(why, "CUDA device");
        return;
    }
    if (st == COLL_CUDA_NO_LIBRARY) {
        ASSERT_STR_CONTAINS(why, "libcudart.so");
        ASSERT(!loaded("libcudart.so.13") && !loaded("libcudart.so"));
    } else {
        /* libcudart loaded, the device count failed or was 0: CUDA's own words */
        ASSERT(loaded("libcudart.so.13") || loaded("libcudart.so"));
        ASSERT_STR_CONTAINS(why, "no CUDA device: cudaGetDeviceCount failed: ");
        if (!strstr(why, "0 devices"))
            ASSERT_STR_CONTAINS(why, ", error ");
    }
    /* without a GPU the state must say so, whatever is installed */
    ASSERT(gpu_present() || st != COLL_CUDA_READY);
    assert_off_and_harmless(why);
}

TEST(detect_disabled)
{
    const char *why = NULL;

    setenv("COLL_CUDA_DISABLE", "1", 1);
    ASSERT_EQ(coll__cuda_state(&why), COLL_CUDA_DISABLED);
    ASSERT_STR_CONTAINS(why, "COLL_CUDA_DISABLE");
    ASSERT(!loaded("libcudart.so.13") && !loaded("libcudart.so")); /* not even loaded */
    assert_off_and_harmless("COLL_CUDA_DISABLE");
}

TEST(detect_disable_zero_is_enabled)
{
    setenv("COLL_CUDA_DISABLE", "0", 1);
    ASSERT_NE(coll__cuda_state(NULL), COLL_CUDA_DISABLED);
}

TEST(detect_disable_other_value_disables)
{
    setenv("COLL_CUDA_DISABLE", "yes", 1);
    ASSERT_EQ(coll__cuda_state(NULL), COLL_CUDA_DISABLED);
}

TEST(detect_missing_library)
{
    const char *why = NULL;

    unsetenv("COLL_CUDA_DISABLE");
    setenv("COLL_CUDA_LIBRARY", "/nonexistent/libcudart.so.13", 1);
    ASSERT_EQ(coll__cuda_state(&why), COLL_CUDA_NO_LIBRARY);
    ASSERT_STR_CONTAINS(why, "cannot load '/nonexistent/libcudart.so.13'");
    ASSERT_STR_CONTAINS(why, "No such file");
    assert_off_and_harmless("no CUDA runtime");
}

/* A library that loads but is not libcudart: the first missing symbol is named. */
TEST(detect_wrong_library)
{
    const char *why = NULL;

    unsetenv("COLL_CUDA_DISABLE");
    setenv("COLL_CUDA_LIBRARY", "libm.so.6", 1);
    ASSERT_EQ(coll__cuda_state(&why), COLL_CUDA_NO_LIBRARY);
    ASSERT_STR_CONTAINS(why, "'libm.so.6' lacks cudaGetErrorName");
    assert_off_and_harmless("lacks cudaGetErrorName");
}

static void *detect_thread(void *arg)
{
    const char **why_p = arg;
    coll__cuda_state(why_p);
    return NULL;
}

TEST(detect_once_across_threads)
{
    pthread_t th[8];
    const char *why[8];

    unsetenv("COLL_CUDA_DISABLE");
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(pthread_create(&th[i], NULL, detect_thread, &why[i]), 0);
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(pthread_join(th[i], NULL), 0);
    for (int i = 1; i < 8; i++)
        ASSERT(why[i] == why[0]);
    ASSERT(*why[0]);
}

/* Without CUDA, NULL and every host pointer are host memory; mem_kind never fails. */
TEST(mem_kind_host_pointers)
{
    enum coll_mem_kind kind;
    int stack = 0, dev = 0;
    void *heap = malloc(64);

    setenv("COLL_CUDA_DISABLE", "1", 1);
    ASSERT_EQ(coll__cuda_mem_kind(NULL, NULL, &kind, NULL), COLL_SUCCESS);
    ASSERT_EQ(kind, COLL_MEM_UNREGISTERED);
    ASSERT_EQ(coll__cuda_mem_kind(NULL, &stack, &kind, &dev), COLL_SUCCESS);
    ASSERT_EQ(kind, COLL_MEM_UNREGISTERED);
    ASSERT_EQ(coll__cuda_mem_kind(NULL, heap, &kind, &dev), COLL_SUCCESS);
    ASSERT_EQ(kind, COLL_MEM_UNREGISTERED);
    ASSERT_STR_CONTAINS(coll__mem_kind_name(COLL_MEM_MANAGED), "managed");
    free(heap);
}

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
