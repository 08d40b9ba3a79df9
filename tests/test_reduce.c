/*
 * test_reduce.c - the host reductions (src/reduce/reduce.c) and the per-element math under
 * them (src/reduce/elem.h), against references computed here another way:
 *
 *   - narrow float formats are decoded with ldexp from their fields, and fp32 -> narrow
 *     rounding is a search in the sorted table of representable values, comparing with
 *     the exact midpoints (ties to the even code): no bit tricks shared with elem.h;
 *   - arithmetic is done in double (for two fp32 operands, double then one rounding to fp32
 *     gives the correctly rounded fp32 result for + - * /: double has > 2 * 24 + 2 bits),
 *     integers in 128 bits, then truncated;
 *   - a table of hand-checked conversions pins the edge cases (ties, overflow, NaN).
 *
 * Results are compared bit for bit; the only freedom is which NaN an fp32/fp64 op returns.
 *
 * Divisions: 1 reference formats, 2 conversion tests, 3 reduction tests (random, in
 * place, odd lengths), 4 edge cases (wraparound, NaN, signed zero, overflow), 5 AVG,
 * 6 every instruction set (reduce_isa.c), two outputs, n inputs, streaming stores, copy,
 * 7 the bitwise operators (BAND, BOR, BXOR on integer dtypes).
 */
#include "reduce/elem.h"
#include "reduce/reduce.h"
#include "reduce/reduce_isa.h"

#include "harness.h"

#include <fenv.h>
#include <math.h>
#include <stdbool.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- 1 reference formats --------------------------------------------------------------- */

struct fmt {
    const char *name;
    int ebits, mbits, bias;
    bool finite_only; /* E4M3: no Inf, only S.1111.111 is NaN */
    uint32_t nan;     /* the canonical NaN that narrowing must produce */
    coll_dtype_t dt;
};

static const struct fmt fmt_f16 = {"fp16", 5, 10, 15, false, 0x7fff, COLL_FLOAT16};
static const struct fmt fmt_bf16 = {"bf16", 8, 7, 127, false, 0x7fff, COLL_BFLOAT16};
static const struct fmt fmt_e4m3 = {"e4m3", 4, 3, 7, true, 0x7f, COLL_FLOAT8E4M3};
static const struct fmt fmt_e5m2 = {"e5m2", 5, 2, 15, false, 0x7f, COLL_FLOAT8E5M2};
static const struct fmt *const fmts[] = {&fmt_f16, &fmt_bf16, &fmt_e4m3, &fmt_e5m2};

static uint32_t fmt_codes(const struct fmt *f)
{
    return 1u << (1 + f->ebits + f->mbits);
}
static uint32_t fmt_sign(const struct fmt *f)
{
    return 1u << (f->ebits + f->mbits);
}

/* Largest finite magnitude code; the next code up is where overflow goes (Inf for the IEEE
 * formats, NaN for E4M3: both happen to be max + 1). */
static uint32_t fmt_maxfin(const struct fmt *f)
{
    if (f->finite_only)
        return fmt_sign(f) - 2;
    return (((1u << f->ebits) - 1) << f->mbits) - 1;
}

/* The value of a magnitude code read as finite (also for max + 1, the overflow boundary). */
static double fmt_mag_value(const struct fmt *f, uint32_t mag)
{
    uint32_t e = mag >> f->mbits, m = mag & ((1u << f->mbits) - 1);

    if (e == 0)
        return ldexp(m, 1 - f->bias - f->mbits);
    return ldexp(m + (1u << f->mbits), (int)e - f->bias - f->mbits);
}

static double ref_decode(const struct fmt *f, uint32_t code)
{
    uint32_t mag = code & (fmt_sign(f) - 1), e = mag >> f->mbits;
    double v;

    if (!f->finite_only && e == (1u << f->ebits) - 1)
        v = (mag & ((1u << f->mbits) - 1)) ? NAN : INFINITY;
    else if (f->finite_only && mag == fmt_sign(f) - 1)
        v = NAN;
    else
        v = fmt_mag_value(f, mag);
    return (code & fmt_sign(f)) ? -v : v;
}

static bool ref_is_nan(const struct fmt *f, uint32_t code)
{
    return isnan(ref_decode(f, code));
}

/* tab[k] = value of magnitude code k, k = 0 .. maxfin + 1 (ascending) */
static const double *ref_table(const struct fmt *f)
{
    static double tabs[4][0x7f81];
    static bool built[4];
    int i = f == &fmt_f16 ? 0 : f == &fmt_bf16 ? 1 : f == &fmt_e4m3 ? 2 : 3;

    if (!built[i]) {
        for (uint32_t k = 0; k <= fmt_maxfin(f) + 1; k++)
            tabs[i][k] = fmt_mag_value(f, k);
        built[i] = true;
    }
    return tabs[i];
}

/* Round x (a value an fp32 can hold) to the nearest code, ties to the even code. */
static uint32_t ref_narrow(const struct fmt *f, double x)
{
    const double *tab = ref_table(f);
    uint32_t top = fmt_maxfin(f) + 1, lo = 0, hi = top;
    uint32_t sign = signbit(x) ? fmt_sign(f) : 0;
    double ax = fabs(x), mid;

    if (isnan(x))
        return f->nan;
    if (ax >= tab[top])
        return sign | top;
    while (hi - lo > 1) { /* tab[lo] <= ax < tab[hi] */
        uint32_t k = lo + (hi - lo) / 2;
        if (tab[k] <= ax)
            lo = k;
        else
            hi = k;
    }
    mid = (tab[lo] + tab[hi]) / 2; /* exact: both have a few significant bits */
    if (ax < mid)
        return sign | lo;
    if (ax > mid)
        return sign | hi;
    return sign | ((lo & 1) ? hi : lo);
}

/* The functions under test, by format. */
static uint32_t dut_narrow(const struct fmt *f, float x)
{
    switch (f->dt) {
    case COLL_FLOAT16:
        return coll__f32_to_f16(x);
    case COLL_BFLOAT16:
        return coll__f32_to_bf16(x);
    case COLL_FLOAT8E4M3:
        return coll__f32_to_e4m3(x);
    default:
        return coll__f32_to_e5m2(x);
    }
}

static float dut_widen(const struct fmt *f, uint32_t code)
{
    switch (f->dt) {
    case COLL_FLOAT16:
        return coll__f16_to_f32((uint16_t)code);
    case COLL_BFLOAT16:
        return coll__bf16_to_f32((uint16_t)code);
    case COLL_FLOAT8E4M3:
        return coll__e4m3_to_f32((uint8_t)code);
    default:
        return coll__e5m2_to_f32((uint8_t)code);
    }
}

static const struct fmt *fmt_of(coll_dtype_t dt)
{
    for (size_t i = 0; i < COLL_ARRAY_SIZE(fmts); i++)
        if (fmts[i]->dt == dt)
            return fmts[i];
    return NULL;
}

static uint32_t fbits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static float bitsf(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

static uint64_t dbits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) /* splitmix64: fixed seed, reproducible failures */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rnd01(void)
{
    return (double)(rnd() >> 11) * 0x1p-53;
}

/* ---- 2 conversion tests ---------------------------------------------------------------- */

static void check_narrow(const struct fmt *f, float x)
{
    uint32_t got = dut_narrow(f, x), want = ref_narrow(f, x);

    ASSERT_MSG(got == want, "%s: narrow(%a = 0x%08x) = 0x%x, want 0x%x", f->name, (double)x,
               fbits(x), got, want);
}

/* Every code decodes to the value its fields say, exactly (NaN codes to some NaN). */
TEST(widen_exhaustive)
{
    for (size_t i = 0; i < COLL_ARRAY_SIZE(fmts); i++) {
        const struct fmt *f = fmts[i];
        for (uint32_t c = 0; c < fmt_codes(f); c++) {
            double want = ref_decode(f, c);
            float got = dut_widen(f, c);
            if (isnan(want))
                ASSERT_MSG(isnan(got), "%s: widen(0x%x) = %a, want NaN", f->name, c, (double)got);
            else
                ASSERT_MSG(fbits(got) == fbits((float)want), "%s: widen(0x%x) = %a, want %a",
                           f->name, c, (double)got, want);
        }
    }
}

/* narrow(widen(c)) == c for every non-NaN code (signed zero, subnormals, Inf included);
 * a NaN code comes back as the canonical NaN. */
TEST(roundtrip_exhaustive)
{
    for (size_t i = 0; i < COLL_ARRAY_SIZE(fmts); i++) {
        const struct fmt *f = fmts[i];
        for (uint32_t c = 0; c < fmt_codes(f); c++) {
            uint32_t got = dut_narrow(f, dut_widen(f, c));
            uint32_t want = ref_is_nan(f, c) ? f->nan : c;
            ASSERT_MSG(got == want, "%s: narrow(widen(0x%x)) = 0x%x, want 0x%x", f->name, c, got,
                       want);
        }
    }
}

/* Around every midpoint between neighbouring codes (and the overflow boundary): the tie
 * itself goes to the even code, one fp32 ulp either side goes to the nearer code. */
TEST(narrow_ties_and_neighbours)
{
    for (size_t i = 0; i < COLL_ARRAY_SIZE(fmts); i++) {
        const struct fmt *f = fmts[i];
        const double *tab = ref_table(f);
        for (uint32_t k = 0; k <= fmt_maxfin(f); k++) {
            float lo = (float)tab[k], hi = (float)tab[k + 1];
            float mid = (float)((tab[k] + tab[k + 1]) / 2);
            float pts[] = {lo,
                           hi,
                           mid,
                           nextafterf(mid, 0),
                           nextafterf(mid, INFINITY),
                           nextafterf(lo, INFINITY),
                           nextafterf(hi, 0)};
            for (size_t j = 0; j < COLL_ARRAY_SIZE(pts); j++) {
                check_narrow(f, pts[j]);
                check_narrow(f, -pts[j]);
            }
        }
    }
}

/* Random fp32 bit patterns (every exponent, NaN payloads, fp32 subnormals) and random
 * values inside every interval between codes. */
TEST(narrow_random)
{
    for (size_t i = 0; i < COLL_ARRAY_SIZE(fmts); i++) {
        const struct fmt *f = fmts[i];
        const double *tab = ref_table(f);
        uint32_t top = fmt_maxfin(f) + 1;
        for (int n = 0; n < 400000; n++)
            check_narrow(f, bitsf((uint32_t)rnd()));
        for (int n = 0; n < 400000; n++) {
            uint32_t k = (uint32_t)(rnd() % top);
            float x = (float)(tab[k] + (tab[k + 1] - tab[k]) * rnd01());
            check_narrow(f, (rnd() & 1) ? -x : x);
        }
    }
}

/* Hand-checked cases: the convention, written down. */
TEST(narrow_edge_table)
{
    static const struct {
        const struct fmt *f;
        uint32_t in; /* fp32 bits */
        uint32_t out;
    } cases[] = {
        /* fp16 */
        {&fmt_f16, 0x00000000, 0x0000}, /* +0 */
        {&fmt_f16, 0x80000000, 0x8000}, /* -0 */
        {&fmt_f16, 0x3f800000, 0x3c00}, /* 1 */
        {&fmt_f16, 0x477fe000, 0x7bff}, /* 65504 */
        {&fmt_f16, 0x477fefff, 0x7bff}, /* just under 65520 */
        {&fmt_f16, 0x477ff000, 0x7c00}, /* 65520: tie, rounds to even = Inf */
        {&fmt_f16, 0xc77ff000, 0xfc00}, /* -65520 */
        {&fmt_f16, 0x7f800000, 0x7c00}, /* Inf */
        {&fmt_f16, 0xff800000, 0xfc00}, /* -Inf */
        {&fmt_f16, 0x7f7fffff, 0x7c00}, /* fp32 max */
        {&fmt_f16, 0x7fc00000, 0x7fff}, /* NaN */
        {&fmt_f16, 0xffc00001, 0x7fff}, /* -NaN with a payload: canonical */
        {&fmt_f16, 0x7f800001, 0x7fff}, /* signalling NaN */
        {&fmt_f16, 0x33800000, 0x0001}, /* 2^-24: smallest subnormal */
        {&fmt_f16, 0x33000000, 0x0000}, /* 2^-25: tie, to even 0 */
        {&fmt_f16, 0xb3000000, 0x8000}, /* -2^-25: -0 */
        {&fmt_f16, 0x33000001, 0x0001}, /* above the tie */
        {&fmt_f16, 0x33c00000, 0x0002}, /* 1.5 * 2^-24: tie between 1 and 2 */
        {&fmt_f16, 0x34200000, 0x0002}, /* 2.5 * 2^-24: tie between 2 and 3 */
        {&fmt_f16, 0x387fc000, 0x03ff}, /* largest subnormal */
        {&fmt_f16, 0x387fe000, 0x0400}, /* tie between it and the smallest normal */
        {&fmt_f16, 0x38800000, 0x0400}, /* 2^-14 */
        {&fmt_f16, 0x00000001, 0x0000}, /* fp32 subnormals */
        {&fmt_f16, 0x807fffff, 0x8000},
        {&fmt_f16, 0x3f801000, 0x3c00}, /* 1 + 2^-11: tie, stays even */
        {&fmt_f16, 0x3f803000, 0x3c02}, /* 1 + 3 * 2^-11: tie, up to even */
        {&fmt_f16, 0x3f801001, 0x3c01}, /* just above that tie */
        {&fmt_f16, 0x3eaaaaab, 0x3555}, /* 1/3 */
        /* bf16 */
        {&fmt_bf16, 0x3f808000, 0x3f80}, /* 1 + 2^-8: tie, stays even */
        {&fmt_bf16, 0x3f818000, 0x3f82}, /* 1 + 3 * 2^-8: tie, up to even */
        {&fmt_bf16, 0x3f808001, 0x3f81}, /* just above the tie */
        {&fmt_bf16, 0x7f7f7fff, 0x7f7f}, /* just below the tie above max finite */
        {&fmt_bf16, 0x7f7f8000, 0x7f80}, /* tie above max finite: Inf */
        {&fmt_bf16, 0x7f7fffff, 0x7f80}, /* fp32 max */
        {&fmt_bf16, 0xff7fffff, 0xff80},
        {&fmt_bf16, 0x00008000, 0x0000}, /* subnormal tie, to even 0 */
        {&fmt_bf16, 0x00018000, 0x0002}, /* subnormal tie, to even 2 */
        {&fmt_bf16, 0x80008001, 0x8001}, /* just above a subnormal tie */
        {&fmt_bf16, 0x80000000, 0x8000}, /* -0 */
        {&fmt_bf16, 0x7f800001, 0x7fff}, /* truncating would give Inf */
        {&fmt_bf16, 0xff800000, 0xff80}, /* -Inf */
        {&fmt_bf16, 0xffffffff, 0x7fff}, /* -NaN: canonical */
        /* E4M3: no Inf; past 464 is NaN, sign kept (CUDA __NV_NOSAT) */
        {&fmt_e4m3, 0x3f800000, 0x38}, /* 1 */
        {&fmt_e4m3, 0x3f880000, 0x38}, /* 1.0625: tie, stays even */
        {&fmt_e4m3, 0x3f980000, 0x3a}, /* 1.1875: tie, up to even */
        {&fmt_e4m3, 0x43700000, 0x77}, /* 240 */
        {&fmt_e4m3, 0x43e00000, 0x7e}, /* 448 */
        {&fmt_e4m3, 0xc3e00000, 0xfe}, /* -448 */
        {&fmt_e4m3, 0x43e80000, 0x7e}, /* 464: tie, to even 448 */
        {&fmt_e4m3, 0x43e80001, 0x7f}, /* just above 464: NaN */
        {&fmt_e4m3, 0xc3e80001, 0xff}, /* and below -464: NaN, sign kept */
        {&fmt_e4m3, 0x43f00000, 0x7f}, /* 480 */
        {&fmt_e4m3, 0x501502f9, 0x7f}, /* 1e10 */
        {&fmt_e4m3, 0x7f800000, 0x7f}, /* Inf */
        {&fmt_e4m3, 0xff800000, 0xff}, /* -Inf */
        {&fmt_e4m3, 0x7fc00000, 0x7f}, /* NaN */
        {&fmt_e4m3, 0xffc00000, 0x7f}, /* -NaN: canonical */
        {&fmt_e4m3, 0x3b000000, 0x01}, /* 2^-9: smallest subnormal */
        {&fmt_e4m3, 0x3a800000, 0x00}, /* 2^-10: tie, to even 0 */
        {&fmt_e4m3, 0xba800000, 0x80}, /* -2^-10: -0 */
        {&fmt_e4m3, 0x3a800001, 0x01}, /* just above that tie */
        {&fmt_e4m3, 0x3b400000, 0x02}, /* 1.5 * 2^-9 */
        {&fmt_e4m3, 0x3c700000, 0x08}, /* 7.5 * 2^-9: tie, to even 2^-6 */
        {&fmt_e4m3, 0x3c800000, 0x08}, /* 2^-6: smallest normal */
        /* E5M2: IEEE-like */
        {&fmt_e5m2, 0x3f800000, 0x3c}, /* 1 */
        {&fmt_e5m2, 0x3f900000, 0x3c}, /* 1.125: tie, stays even */
        {&fmt_e5m2, 0x3fb00000, 0x3e}, /* 1.375: tie, up to even */
        {&fmt_e5m2, 0x47600000, 0x7b}, /* 57344: max finite */
        {&fmt_e5m2, 0x476fffff, 0x7b}, /* just under 61440 */
        {&fmt_e5m2, 0x47700000, 0x7c}, /* 61440: tie, rounds to even = Inf */
        {&fmt_e5m2, 0xc7700000, 0xfc}, /* -61440 */
        {&fmt_e5m2, 0x7f800000, 0x7c}, /* Inf */
        {&fmt_e5m2, 0xff800000, 0xfc}, /* -Inf */
        {&fmt_e5m2, 0x7fc00000, 0x7f}, /* NaN */
        {&fmt_e5m2, 0xff800001, 0x7f}, /* -sNaN: canonical */
        {&fmt_e5m2, 0x37800000, 0x01}, /* 2^-16: smallest subnormal */
        {&fmt_e5m2, 0x37000000, 0x00}, /* 2^-17: tie, to even 0 */
        {&fmt_e5m2, 0x37000001, 0x01}, /* just above that tie */
        {&fmt_e5m2, 0x38800000, 0x04}, /* 2^-14: smallest normal */
    };

    for (size_t i = 0; i < COLL_ARRAY_SIZE(cases); i++) {
        const struct fmt *f = cases[i].f;
        uint32_t got = dut_narrow(f, bitsf(cases[i].in));
        ASSERT_MSG(got == cases[i].out, "%s: narrow(0x%08x) = 0x%x, want 0x%x", f->name,
                   cases[i].in, got, cases[i].out);
        /* and the reference search agrees, so the two oracles check each other */
        ASSERT_MSG(ref_narrow(f, bitsf(cases[i].in)) == cases[i].out,
                   "reference %s: narrow(0x%08x) = 0x%x, want 0x%x", f->name, cases[i].in,
                   ref_narrow(f, bitsf(cases[i].in)), cases[i].out);
    }
}

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && defined(__x86_64__)
/* A third oracle where the compiler has one: GCC's _Float16 conversions. */
TEST(f16_matches_compiler_float16)
{
    for (uint32_t c = 0; c < 0x10000; c++) {
        _Float16 h;
        uint16_t u = (uint16_t)c;
        memcpy(&h, &u, sizeof(h));
        if (!isnan((float)h))
            ASSERT_EQ(fbits(coll__f16_to_f32(u)), fbits((float)h));
    }
    for (int n = 0; n < 1000000; n++) {
        float x = bitsf((uint32_t)rnd());
        _Float16 h = (_Float16)x;
        uint16_t u;
        memcpy(&u, &h, sizeof(u));
        if (!isnan(x))
            ASSERT_MSG(coll__f32_to_f16(x) == u, "0x%08x: 0x%04x vs 0x%04x", fbits(x),
                       coll__f32_to_f16(x), u);
    }
}
#endif

/* ---- 3 reduction tests ----------------------------------------------------------------- */

static bool dt_is_narrow(coll_dtype_t dt)
{
    return fmt_of(dt) != NULL;
}

/* A random element of dt into p: raw bits mostly, plus edge values and (for fp32/fp64)
 * moderate numbers, so that sums are not always dominated by one huge operand. */
static void gen_elem(coll_dtype_t dt, void *p)
{
    uint64_t r = rnd(), pick = rnd() % 8;
    size_t sz = coll__dtype_size(dt);

    if (dt == COLL_FLOAT32 || dt == COLL_FLOAT64) {
        static const double specials[] = {
            0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN, 1.0, -1.0, 3.4028234663852886e38, 1e-45};
        double v;
        if (pick < 3) {
            memcpy(p, &r, sz); /* raw bits */
            return;
        }
        if (pick < 6)
            v = (double)((int64_t)(r % 2001) - 1000) / 8;
        else if (pick < 7)
            v = specials[r % COLL_ARRAY_SIZE(specials)];
        else
            v = (rnd01() - 0.5) * 1e-40; /* fp32 subnormal range */
        if (dt == COLL_FLOAT32) {
            float fv = (float)v;
            memcpy(p, &fv, sizeof(fv));
        } else {
            memcpy(p, &v, sizeof(v));
        }
        return;
    }
    if (!dt_is_narrow(dt) && pick == 0) { /* integer edges: 0, -1/max, min, max, 1 */
        static const uint64_t edges[] = {0,
                                         ~0ull,
                                         1,
                                         0x80ull,
                                         0x7full,
                                         0x80000000ull,
                                         0x7fffffffull,
                                         0x8000000000000000ull,
                                         0x7fffffffffffffffull};
        r = edges[r % COLL_ARRAY_SIZE(edges)];
    }
    memcpy(p, &r, sz); /* little endian: the low bytes */
}

static double ref_max(double x, double y, bool is_max)
{
    if (isnan(x) || isnan(y))
        return NAN;
    if (x == 0 && y == 0) /* -0 < +0 */
        return (is_max ? signbit(x) && signbit(y) : signbit(x) || signbit(y)) ? -0.0 : 0.0;
    return is_max ? fmax(x, y) : fmin(x, y);
}

static double ref_float_op(double x, double y, coll_op_t op)
{
    switch (op) {
    case COLL_SUM:
    case COLL_AVG:
        return x + y;
    case COLL_PROD:
        return x * y;
    case COLL_MAX:
        return ref_max(x, y, true);
    default:
        return ref_max(x, y, false);
    }
}

/* Integer op in 128 bits, truncated to the dtype's width by the caller. Sum and product
 * wrap in unsigned 128 bits (exact for 8 and 32 bits; mod 2^128 for 64 bits), whose low
 * bits are the same for both signednesses. */
static __int128 ref_int_op(__int128 x, __int128 y, coll_op_t op)
{
    unsigned __int128 ux = (unsigned __int128)x, uy = (unsigned __int128)y;

    switch (op) {
    case COLL_SUM:
    case COLL_AVG:
        return (__int128)(ux + uy);
    case COLL_PROD:
        return (__int128)(ux * uy);
    case COLL_MAX:
        return x > y ? x : y;
    default:
        return x < y ? x : y;
    }
}

static __int128 load_int(coll_dtype_t dt, const void *p)
{
    switch (dt) {
    case COLL_INT8:
        return *(const int8_t *)p;
    case COLL_UINT8:
        return *(const uint8_t *)p;
    case COLL_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case COLL_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case COLL_INT64: {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

/* out = a op b, the reference way. */
static void ref_elem(coll_dtype_t dt, coll_op_t op, const void *a, const void *b, void *out)
{
    const struct fmt *f = fmt_of(dt);
    size_t sz = coll__dtype_size(dt);

    if (f) {
        uint32_t ca = 0, cb = 0, r;
        memcpy(&ca, a, sz);
        memcpy(&cb, b, sz);
        /* the op in double, rounded to fp32 (= the fp32 op), then to the format */
        r = ref_narrow(f, (float)ref_float_op(ref_decode(f, ca), ref_decode(f, cb), op));
        memcpy(out, &r, sz);
    } else if (dt == COLL_FLOAT32) {
        float x, y, r;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        r = (float)ref_float_op(x, y, op);
        memcpy(out, &r, 4);
    } else if (dt == COLL_FLOAT64) {
        double x, y, r;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        r = ref_float_op(x, y, op);
        memcpy(out, &r, 8);
    } else {
        /* little endian: the low sz bytes of the 128-bit result are the wrapped value */
        __int128 r = ref_int_op(load_int(dt, a), load_int(dt, b), op);
        memcpy(out, &r, sz);
    }
}

/* Equal bit for bit, except that any two NaNs match for fp32/fp64. */
static bool elem_eq(coll_dtype_t dt, const void *x, const void *y)
{
    if (dt == COLL_FLOAT32) {
        float a, b;
        memcpy(&a, x, 4);
        memcpy(&b, y, 4);
        if (isnan(a) || isnan(b))
            return isnan(a) && isnan(b);
    } else if (dt == COLL_FLOAT64) {
        double a, b;
        memcpy(&a, x, 8);
        memcpy(&b, y, 8);
        if (isnan(a) || isnan(b))
            return isnan(a) && isnan(b);
    }
    return memcmp(x, y, coll__dtype_size(dt)) == 0;
}

static uint64_t elem_hex(coll_dtype_t dt, const void *p)
{
    uint64_t v = 0;
    memcpy(&v, p, coll__dtype_size(dt));
    return v;
}

enum alias_mode { ALIAS_NONE, ALIAS_DST_A, ALIAS_DST_B, ALIAS_ALL, ALIAS_MODES };

#define GUARD 64 /* bytes of canary before and after each array */

/*
 * Reduce `count` random elements with dst placed per mode, starting `shift` elements into
 * the allocation (so vector loops meet unaligned starts), and check every element and the
 * canaries around dst.
 */
static void check_reduce_once(coll_dtype_t dt, coll_op_t op, size_t count, int mode, size_t shift)
{
    size_t sz = coll__dtype_size(dt), bytes = count * sz, off = GUARD + shift * sz;
    size_t total = bytes + 2 * GUARD + 8 * sz;
    uint8_t *ba = malloc(total), *bb = malloc(total), *bd = malloc(total);
    uint8_t *a0 = malloc(bytes + 1), *b0 = malloc(bytes + 1), want[8];
    uint8_t *a = ba + off, *b = bb + off, *dst;

    ASSERT(ba && bb && bd && a0 && b0);
    memset(ba, 0xa5, total);
    memset(bb, 0xa5, total);
    memset(bd, 0xa5, total);
    for (size_t i = 0; i < count; i++) {
        gen_elem(dt, a + i * sz);
        gen_elem(dt, b + i * sz);
    }
    switch (mode) {
    case ALIAS_DST_A:
        dst = a;
        break;
    case ALIAS_DST_B:
        dst = b;
        break;
    case ALIAS_ALL:
        dst = b = a;
        break;
    default:
        dst = bd + off;
        break;
    }
    memcpy(a0, a, bytes);
    memcpy(b0, b, bytes);

    coll__reduce(dst, a, b, count, dt, op);

    for (size_t i = 0; i < count; i++) {
        ref_elem(dt, op, a0 + i * sz, b0 + i * sz, want);
        ASSERT_MSG(elem_eq(dt, dst + i * sz, want),
                   "%s %s count %zu alias %d [%zu]: 0x%llx op 0x%llx = 0x%llx, want 0x%llx",
                   coll__dtype_name(dt), coll__op_name(op), count, mode, i,
                   (unsigned long long)elem_hex(dt, a0 + i * sz),
                   (unsigned long long)elem_hex(dt, b0 + i * sz),
                   (unsigned long long)elem_hex(dt, dst + i * sz),
                   (unsigned long long)elem_hex(dt, want));
    }
    for (size_t i = 0; i < off; i++)
        ASSERT_MSG(dst[(ptrdiff_t)i - (ptrdiff_t)off] == 0xa5, "write before dst");
    for (size_t i = off + bytes; i < total; i++)
        ASSERT_MSG(dst[i - off] == 0xa5, "%s %s count %zu: write past dst at +%zu",
                   coll__dtype_name(dt), coll__op_name(op), count, i - off - bytes);
    /* the operand that is not dst is left alone */
    if (mode == ALIAS_NONE || mode == ALIAS_DST_B)
        ASSERT(memcmp(a, a0, bytes) == 0);
    if (mode == ALIAS_NONE || mode == ALIAS_DST_A)
        ASSERT(memcmp(b, b0, bytes) == 0);
    free(ba);
    free(bb);
    free(bd);
    free(a0);
    free(b0);
}

static void check_reduce_dtype(coll_dtype_t dt)
{
    static const size_t counts[] = {0, 1, 2, 3, 7, 15, 17, 1023, 4099};

    for (int op = 0; op < COLL_NUM_OPS; op++)
        for (size_t c = 0; c < COLL_ARRAY_SIZE(counts); c++)
            for (int mode = 0; mode < ALIAS_MODES; mode++)
                check_reduce_once(dt, (coll_op_t)op, counts[c], mode, (c + mode) % 3);
}

TEST(reduce_int8)
{
    check_reduce_dtype(COLL_INT8);
}
TEST(reduce_uint8)
{
    check_reduce_dtype(COLL_UINT8);
}
TEST(reduce_int32)
{
    check_reduce_dtype(COLL_INT32);
}
TEST(reduce_uint32)
{
    check_reduce_dtype(COLL_UINT32);
}
TEST(reduce_int64)
{
    check_reduce_dtype(COLL_INT64);
}
TEST(reduce_uint64)
{
    check_reduce_dtype(COLL_UINT64);
}
TEST(reduce_float16)
{
    check_reduce_dtype(COLL_FLOAT16);
}
TEST(reduce_float32)
{
    check_reduce_dtype(COLL_FLOAT32);
}
TEST(reduce_float64)
{
    check_reduce_dtype(COLL_FLOAT64);
}
TEST(reduce_bfloat16)
{
    check_reduce_dtype(COLL_BFLOAT16);
}
TEST(reduce_float8e4m3)
{
    check_reduce_dtype(COLL_FLOAT8E4M3);
}
TEST(reduce_float8e5m2)
{
    check_reduce_dtype(COLL_FLOAT8E5M2);
}

/*
 * Narrow formats are small enough to check every pair of codes for every op, on every set.
 * The b codes are ordered so that NaN and Inf come last, in a block of 32 of their own:
 * the AVX2 loops send a block of 32 with such a code through elem.h, so with the codes in
 * plain order the large finite ones sharing a block with NaN would never reach the vector
 * path there.
 */
TEST(reduce_fp8_all_pairs)
{
    static const coll_dtype_t dts[] = {COLL_FLOAT8E4M3, COLL_FLOAT8E5M2};
    enum { N = 256 + 32 };
    uint8_t a[N], b[N], d[N], want[8];
    const char *isa;

    for (size_t k = 0; (isa = coll__reduce_isa_supported(k)) != NULL; k++) {
        ASSERT_EQ(coll__reduce_set_isa(isa), COLL_SUCCESS);
        for (size_t t = 0; t < COLL_ARRAY_SIZE(dts); t++) {
            uint8_t special = dts[t] == COLL_FLOAT8E4M3 ? 0x7f : 0x7c;
            size_t n = 0, m = 256;

            memset(b, 0, sizeof b);
            for (int y = 0; y < 256; y++) {
                if ((y & special) == special)
                    b[m++] = (uint8_t)y;
                else
                    b[n++] = (uint8_t)y;
            }
            for (int op = 0; op < COLL_NUM_OPS; op++) {
                for (int x = 0; x < 256; x++) {
                    memset(a, x, sizeof a);
                    coll__reduce(d, a, b, N, dts[t], (coll_op_t)op);
                    for (size_t y = 0; y < N; y++) {
                        ref_elem(dts[t], (coll_op_t)op, &a[y], &b[y], want);
                        ASSERT_MSG(d[y] == want[0],
                                   "%s %s %s: 0x%02x op 0x%02x = 0x%02x, want 0x%02x", isa,
                                   coll__dtype_name(dts[t]), coll__op_name(op), x, b[y], d[y],
                                   want[0]);
                    }
                }
            }
        }
    }
    ASSERT_EQ(coll__reduce_set_isa(NULL), COLL_SUCCESS);
}

/* ---- 4 edge cases ---------------------------------------------------------------------- */

/* One element: returns dst after dst = a op b. */
static uint64_t reduce1(coll_dtype_t dt, coll_op_t op, uint64_t a, uint64_t b)
{
    uint64_t d = 0xdeadbeefdeadbeefull;
    size_t sz = coll__dtype_size(dt);

    coll__reduce(&d, &a, &b, 1, dt, op);
    /* dst's bytes beyond the element must be untouched */
    if (sz < 8)
        ASSERT((d >> (8 * sz)) == (0xdeadbeefdeadbeefull >> (8 * sz)));
    return sz < 8 ? d & ((1ull << (8 * sz)) - 1) : d;
}

TEST(integer_wraparound)
{
    /* int8 */
    ASSERT_EQ((int8_t)reduce1(COLL_INT8, COLL_SUM, 127, 1), -128);
    ASSERT_EQ((int8_t)reduce1(COLL_INT8, COLL_SUM, (uint8_t)-128, (uint8_t)-1), 127);
    ASSERT_EQ((int8_t)reduce1(COLL_INT8, COLL_PROD, (uint8_t)-128, (uint8_t)-1), -128);
    ASSERT_EQ((int8_t)reduce1(COLL_INT8, COLL_PROD, 16, 16), 0);
    ASSERT_EQ((int8_t)reduce1(COLL_INT8, COLL_PROD, (uint8_t)-3, 5), -15);
    ASSERT_EQ((int8_t)reduce1(COLL_INT8, COLL_MAX, (uint8_t)-3, 5), 5);
    ASSERT_EQ((int8_t)reduce1(COLL_INT8, COLL_MIN, (uint8_t)-128, 127), -128);
    ASSERT_EQ((int8_t)reduce1(COLL_INT8, COLL_AVG, 127, 1), -128); /* AVG sums */
    /* uint8 */
    ASSERT_EQ(reduce1(COLL_UINT8, COLL_SUM, 255, 1), 0);
    ASSERT_EQ(reduce1(COLL_UINT8, COLL_PROD, 16, 17), 16);
    ASSERT_EQ(reduce1(COLL_UINT8, COLL_PROD, 255, 255), 1);
    ASSERT_EQ(reduce1(COLL_UINT8, COLL_MAX, 255, 1), 255); /* unsigned compare */
    ASSERT_EQ(reduce1(COLL_UINT8, COLL_MIN, 255, 1), 1);
    /* int32 */
    ASSERT_EQ((int32_t)reduce1(COLL_INT32, COLL_SUM, INT32_MAX, 1), INT32_MIN);
    ASSERT_EQ((int32_t)reduce1(COLL_INT32, COLL_PROD, 65536, 65536), 0);
    ASSERT_EQ((int32_t)reduce1(COLL_INT32, COLL_PROD, (uint32_t)INT32_MIN, (uint32_t)-1),
              INT32_MIN);
    ASSERT_EQ((int32_t)reduce1(COLL_INT32, COLL_MIN, (uint32_t)-1, 1), -1);
    ASSERT_EQ((int32_t)reduce1(COLL_INT32, COLL_MAX, (uint32_t)INT32_MIN, 0), 0);
    /* uint32 */
    ASSERT_EQ(reduce1(COLL_UINT32, COLL_SUM, 0xffffffffu, 2), 1);
    ASSERT_EQ(reduce1(COLL_UINT32, COLL_PROD, 0x10001u, 0x10001u), 0x20001u);
    ASSERT_EQ(reduce1(COLL_UINT32, COLL_MAX, 0xffffffffu, 1), 0xffffffffu);
    /* int64 */
    ASSERT_EQ((int64_t)reduce1(COLL_INT64, COLL_SUM, INT64_MAX, 1), INT64_MIN);
    ASSERT_EQ((int64_t)reduce1(COLL_INT64, COLL_PROD, (uint64_t)INT64_MIN, (uint64_t)-1),
              INT64_MIN);
    ASSERT_EQ((int64_t)reduce1(COLL_INT64, COLL_PROD, 1ull << 32, 1ull << 32), 0);
    ASSERT_EQ((int64_t)reduce1(COLL_INT64, COLL_MIN, (uint64_t)INT64_MIN, INT64_MAX), INT64_MIN);
    /* uint64 */
    ASSERT(reduce1(COLL_UINT64, COLL_SUM, ~0ull, 1) == 0);
    ASSERT(reduce1(COLL_UINT64, COLL_PROD, (1ull << 32) + 1, (1ull << 32) + 1) == (1ull << 33) + 1);
    ASSERT(reduce1(COLL_UINT64, COLL_MAX, ~0ull, 1) == ~0ull);
    ASSERT(reduce1(COLL_UINT64, COLL_MIN, ~0ull, 1) == 1);
}

/* Encode a double into dt's bits (through the reference where dt is narrow). */
static uint64_t enc(coll_dtype_t dt, double v)
{
    const struct fmt *f = fmt_of(dt);
    float x = (float)v;

    if (f)
        return ref_narrow(f, x);
    if (dt == COLL_FLOAT32)
        return fbits(x);
    return dbits(v);
}

static const coll_dtype_t float_dts[] = {COLL_FLOAT16,  COLL_FLOAT32,    COLL_FLOAT64,
                                         COLL_BFLOAT16, COLL_FLOAT8E4M3, COLL_FLOAT8E5M2};

static bool is_nan_bits(coll_dtype_t dt, uint64_t v)
{
    const struct fmt *f = fmt_of(dt);

    if (f)
        return ref_is_nan(f, (uint32_t)v);
    if (dt == COLL_FLOAT32)
        return isnan(bitsf((uint32_t)v));
    double d;
    memcpy(&d, &v, 8);
    return isnan(d);
}

/* max/min: NaN on either side wins, in either order; -0 < +0 in either order. */
TEST(max_min_nan_and_signed_zero)
{
    for (size_t t = 0; t < COLL_ARRAY_SIZE(float_dts); t++) {
        coll_dtype_t dt = float_dts[t];
        uint64_t nan = enc(dt, NAN), one = enc(dt, 1.0), pz = enc(dt, 0.0);
        uint64_t nz = enc(dt, -0.0), ninf = enc(dt, -INFINITY), two = enc(dt, 2.0);
        const struct fmt *f = fmt_of(dt);
        const uint64_t canon = f ? f->nan : 0;

        for (int op = COLL_MAX; op <= COLL_MIN; op++) {
            uint64_t r[] = {reduce1(dt, op, nan, one), reduce1(dt, op, one, nan),
                            reduce1(dt, op, nan, nan), reduce1(dt, op, ninf, nan),
                            reduce1(dt, op, nan, ninf)};
            for (size_t i = 0; i < COLL_ARRAY_SIZE(r); i++) {
                ASSERT_MSG(is_nan_bits(dt, r[i]), "%s %s case %zu: 0x%llx is not NaN",
                           coll__dtype_name(dt), coll__op_name(op), i, (unsigned long long)r[i]);
                if (f) /* narrow formats come back canonical */
                    ASSERT_EQ(r[i], canon);
            }
            ASSERT(reduce1(dt, op, pz, nz) == (op == COLL_MAX ? pz : nz));
            ASSERT(reduce1(dt, op, nz, pz) == (op == COLL_MAX ? pz : nz));
            ASSERT(reduce1(dt, op, nz, nz) == nz);
            ASSERT(reduce1(dt, op, one, two) == (op == COLL_MAX ? two : one));
            ASSERT(reduce1(dt, op, two, one) == (op == COLL_MAX ? two : one));
        }
        /* and sums carry NaN and Inf - Inf into NaN */
        ASSERT(is_nan_bits(dt, reduce1(dt, COLL_SUM, nan, one)));
        if (dt != COLL_FLOAT8E4M3)
            ASSERT(is_nan_bits(dt, reduce1(dt, COLL_SUM, enc(dt, INFINITY), ninf)));
    }
}

/* Narrow sums that leave the range: computed in fp32, then overflow by the format's rule. */
TEST(narrow_overflow_in_ops)
{
    ASSERT_EQ(reduce1(COLL_FLOAT16, COLL_SUM, 0x7bff, 0x4c00), 0x7c00); /* 65504+16 */
    ASSERT_EQ(reduce1(COLL_FLOAT16, COLL_SUM, 0x7bff, 0x4b80), 0x7bff); /* 65504+15 */
    ASSERT_EQ(reduce1(COLL_FLOAT16, COLL_SUM, 0xfbff, 0xfbff), 0xfc00);
    ASSERT_EQ(reduce1(COLL_FLOAT16, COLL_PROD, 0x0001, 0x3800), 0x0000); /* 2^-25: tie */
    ASSERT_EQ(reduce1(COLL_FLOAT16, COLL_PROD, 0x8001, 0x3800), 0x8000); /* -0 */
    ASSERT_EQ(reduce1(COLL_BFLOAT16, COLL_SUM, 0x7f7f, 0x7f7f), 0x7f80);
    ASSERT_EQ(reduce1(COLL_FLOAT8E4M3, COLL_SUM, 0x7e, 0x50), 0x7e);  /* 448+8 */
    ASSERT_EQ(reduce1(COLL_FLOAT8E4M3, COLL_SUM, 0x7e, 0x58), 0x7e);  /* 448+16: tie */
    ASSERT_EQ(reduce1(COLL_FLOAT8E4M3, COLL_SUM, 0x7e, 0x60), 0x7f);  /* 448+32: NaN */
    ASSERT_EQ(reduce1(COLL_FLOAT8E4M3, COLL_SUM, 0xfe, 0xfe), 0xff);  /* -896 */
    ASSERT_EQ(reduce1(COLL_FLOAT8E4M3, COLL_PROD, 0x01, 0x30), 0x00); /* 2^-9 * 0.5 */
    ASSERT_EQ(reduce1(COLL_FLOAT8E5M2, COLL_SUM, 0x7b, 0x68), 0x7b);  /* 57344+2048 */
    ASSERT_EQ(reduce1(COLL_FLOAT8E5M2, COLL_SUM, 0x7b, 0x6c), 0x7c);  /* +4096: tie, Inf */
    ASSERT_EQ(reduce1(COLL_FLOAT8E5M2, COLL_SUM, 0xfb, 0xfb), 0xfc);
}

TEST(invalid_dtype_or_op_writes_nothing)
{
    uint64_t a = 1, b = 2, d = 7;

    coll__reduce(&d, &a, &b, 1, COLL_NUM_DTYPES, COLL_SUM);
    coll__reduce(&d, &a, &b, 1, COLL_INT64, COLL_NUM_OPS);
    coll__reduce(&d, &a, &b, 1, (coll_dtype_t)-1, COLL_SUM);
    coll__reduce_div(&d, 1, COLL_NUM_DTYPES, 2);
    ASSERT_EQ(d, 7);
    coll__reduce(NULL, NULL, NULL, 0, COLL_FLOAT32, COLL_SUM); /* count 0 touches nothing */
    coll__reduce_div(NULL, 0, COLL_FLOAT32, 3);
}

/* ---- 5 AVG: the division ---------------------------------------------------------------- */

/* Reference quotient of one element. Float checks use small n only: those are exact as the
 * fp32 divisor, and double division then one rounding is the correctly rounded quotient. */
static void ref_div(coll_dtype_t dt, const void *x, uint64_t n, void *out)
{
    const struct fmt *f = fmt_of(dt);
    size_t sz = coll__dtype_size(dt);

    if (f) {
        uint32_t c = 0, r;
        memcpy(&c, x, sz);
        r = ref_narrow(f, (float)(ref_decode(f, c) / (double)n));
        memcpy(out, &r, sz);
    } else if (dt == COLL_FLOAT32) {
        float v;
        memcpy(&v, x, 4);
        v = (float)((double)v / (double)n);
        memcpy(out, &v, 4);
    } else if (dt == COLL_FLOAT64) {
        double v;
        memcpy(&v, x, 8);
        v = v / (double)n;
        memcpy(out, &v, 8);
    } else {
        __int128 q = load_int(dt, x) / (__int128)n; /* C: truncates toward zero */
        memcpy(out, &q, sz);
    }
}

TEST(avg_division_random)
{
    static const uint64_t int_ns[] = {2,          3,          7,          100,        1000, 65537,
                                      1ull << 31, 1ull << 32, 1ull << 62, 1ull << 63, ~0ull};
    static const uint64_t float_ns[] = {2, 3, 7, 10, 1000};
    static const size_t counts[] = {0, 1, 3, 17, 1023};

    for (int dt = 0; dt < COLL_NUM_DTYPES; dt++) {
        bool isfloat = dt_is_narrow(dt) || dt == COLL_FLOAT32 || dt == COLL_FLOAT64;
        const uint64_t *ns = isfloat ? float_ns : int_ns;
        size_t nn = isfloat ? COLL_ARRAY_SIZE(float_ns) : COLL_ARRAY_SIZE(int_ns);
        size_t sz = coll__dtype_size(dt);
        for (size_t k = 0; k < nn; k++) {
            for (size_t c = 0; c < COLL_ARRAY_SIZE(counts); c++) {
                size_t count = counts[c];
                uint8_t *buf = malloc(count * sz + 16), *orig = malloc(count * sz + 1);
                uint8_t want[8];
                ASSERT(buf && orig);
                memset(buf, 0x5a, count * sz + 16);
                for (size_t i = 0; i < count; i++)
                    gen_elem(dt, buf + i * sz);
                memcpy(orig, buf, count * sz);
                coll__reduce_div(buf, count, dt, ns[k]);
                for (size_t i = 0; i < count; i++) {
                    ref_div(dt, orig + i * sz, ns[k], want);
                    ASSERT_MSG(
                        elem_eq(dt, buf + i * sz, want),
                        "%s [%zu]: 0x%llx / %llu = 0x%llx, want 0x%llx", coll__dtype_name(dt), i,
                        (unsigned long long)elem_hex(dt, orig + i * sz), (unsigned long long)ns[k],
                        (unsigned long long)elem_hex(dt, buf + i * sz),
                        (unsigned long long)elem_hex(dt, want));
                }
                for (size_t i = count * sz; i < count * sz + 16; i++)
                    ASSERT(buf[i] == 0x5a);
                free(buf);
                free(orig);
            }
        }
    }
}

TEST(avg_division_edges)
{
    int8_t i8[] = {-7, 7, -128, 127, -1, 0};
    uint8_t u8[] = {255, 254, 1};
    int64_t i64[] = {INT64_MIN, INT64_MAX, -1, INT64_MIN + 1};
    uint64_t u64[] = {~0ull, 1ull << 63};
    float f32[] = {1.0f, -1.0f, 0x1p-149f, -0.0f};
    uint16_t f16[] = {0x3c00, 0x0001, 0x8003}; /* 1, 2^-24, -3 * 2^-24 */
    uint8_t e4[] = {0x7e, 0x01, 0x7f};         /* 448, 2^-9, NaN */

    coll__reduce_div(i8, 6, COLL_INT8, 2); /* truncation toward zero */
    ASSERT_EQ(i8[0], -3);
    ASSERT_EQ(i8[1], 3);
    ASSERT_EQ(i8[2], -64);
    ASSERT_EQ(i8[3], 63);
    ASSERT_EQ(i8[4], 0);
    ASSERT_EQ(i8[5], 0);
    coll__reduce_div(u8, 3, COLL_UINT8, 2);
    ASSERT_EQ(u8[0], 127);
    ASSERT_EQ(u8[1], 127);
    ASSERT_EQ(u8[2], 0);

    coll__reduce_div(i64, 4, COLL_INT64, 1ull << 63); /* n beyond int64: only MIN/2^63 */
    ASSERT(i64[0] == -1 && i64[1] == 0 && i64[2] == 0 && i64[3] == 0);
    i64[0] = INT64_MIN;
    coll__reduce_div(i64, 1, COLL_INT64, ~0ull);
    ASSERT_EQ(i64[0], 0);
    coll__reduce_div(u64, 2, COLL_UINT64, ~0ull);
    ASSERT(u64[0] == 1 && u64[1] == 0);

    coll__reduce_div(f32, 4, COLL_FLOAT32, 3);
    ASSERT_EQ(fbits(f32[0]), 0x3eaaaaab); /* 1/3 rounded in fp32 */
    ASSERT_EQ(fbits(f32[1]), 0xbeaaaaab);
    ASSERT_EQ(fbits(f32[2]), 0); /* 2^-149 / 3 rounds to +0 */
    ASSERT_EQ(fbits(f32[3]), 0x80000000);

    coll__reduce_div(f16, 3, COLL_FLOAT16, 2);
    ASSERT_EQ(f16[0], 0x3800); /* 0.5 */
    ASSERT_EQ(f16[1], 0x0000); /* 2^-25: tie, to even */
    ASSERT_EQ(f16[2], 0x8002); /* -1.5 * 2^-24: tie, to even 2 */
    coll__reduce_div(e4, 3, COLL_FLOAT8E4M3, 2);
    ASSERT_EQ(e4[0], 0x76); /* 224 */
    ASSERT_EQ(e4[1], 0x00); /* 2^-10: tie, to even 0 */
    ASSERT_EQ(e4[2], 0x7f);

    /* n = 1 and n = 0 leave the data alone (0 is a caller bug; it must not trap) */
    i8[0] = -7;
    f32[0] = 1.0f;
    coll__reduce_div(i8, 1, COLL_INT8, 1);
    coll__reduce_div(i8, 1, COLL_INT8, 0);
    coll__reduce_div(f32, 1, COLL_FLOAT32, 0);
    ASSERT_EQ(i8[0], -7);
    ASSERT_EQ(fbits(f32[0]), 0x3f800000);
}

/* ---- 6 instruction sets, fused outputs, n inputs, streaming ----------------------------- */

/* The sets this CPU should run, by its own feature bits: the kernels must offer all of them
 * (so the sweeps below cover every set the machine has). */
TEST(isa_every_supported_set_is_offered)
{
    const char *want[8];
    size_t nwant = 0, n = 0;

    want[nwant++] = "scalar";
#if defined(__x86_64__)
    __builtin_cpu_init();
    want[nwant++] = "sse2";
    if (__builtin_cpu_supports("avx2"))
        want[nwant++] = "avx2";
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
        want[nwant++] = "avx512";
        if (__builtin_cpu_supports("avx512vbmi"))
            want[nwant++] = "avx512vbmi";
    }
#endif
    while (coll__reduce_isa_supported(n))
        n++;
    ASSERT_EQ(n, nwant);
    for (size_t i = 0; i < nwant; i++) {
        ASSERT_STR_CONTAINS(coll__reduce_isa_supported(i), want[i]);
        ASSERT_EQ(coll__reduce_set_isa(want[i]), COLL_SUCCESS);
        ASSERT(strcmp(coll__reduce_isa(), want[i]) == 0);
    }
    /* the default is the best one */
    ASSERT_EQ(coll__reduce_set_isa(NULL), COLL_SUCCESS);
    ASSERT(strcmp(coll__reduce_isa(), want[nwant - 1]) == 0);
    printf("# reduction ISAs here:");
    for (size_t i = 0; i < nwant; i++)
        printf(" %s", want[i]);
    printf("\n");
}

TEST(isa_bad_names_are_refused)
{
    const char *before = coll__reduce_isa();

    ASSERT_EQ(coll__reduce_set_isa("avx1024"), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__reduce_set_isa("AVX2 "), COLL_INVALID_ARGUMENT);
    ASSERT(strcmp(coll__reduce_isa(), before) == 0);
}

/* The environment is read once, at the first reduction of the process: each case here runs
 * in a fresh forked child that has not reduced anything yet. */
TEST(isa_env_forces_a_set)
{
    uint32_t a = 1, b = 2, d = 0;

    setenv("COLL_REDUCE_ISA", "scalar", 1);
    setenv("COLL_REDUCE_STREAM_BYTES", "12345", 1);
    coll__reduce(&d, &a, &b, 1, COLL_UINT32, COLL_SUM);
    ASSERT_EQ(d, 3);
    ASSERT(strcmp(coll__reduce_isa(), "scalar") == 0);
    ASSERT_EQ(coll__reduce_stream_bytes(), 12345);
    coll__reduce_set_stream_bytes(0); /* back to the cache-derived default */
    ASSERT(coll__reduce_stream_bytes() >= (size_t)512 << 10);
}

TEST(isa_env_unknown_falls_back_to_best)
{
    setenv("COLL_REDUCE_ISA", "neon", 1);
    setenv("COLL_REDUCE_STREAM_BYTES", "lots", 1);
    ASSERT(strcmp(coll__reduce_isa(), coll__reduce_isa_supported(0)) != 0 ||
           coll__reduce_isa_supported(1) == NULL);
    ASSERT(coll__reduce_stream_bytes() >= (size_t)512 << 10);
}

/*
 * One dtype x op on the current set against the reference oracle: odd lengths 0..67 (every
 * vector remainder), every element-aligned start within a cache line, and lengths that cross
 * several blocks, with each aliasing mode in turn.
 */
static void check_kernel_sweep(coll_dtype_t dt, coll_op_t op)
{
    size_t sz = coll__dtype_size(dt);

    for (size_t count = 0; count <= 67; count++)
        check_reduce_once(dt, op, count, (int)(count % ALIAS_MODES), count % (64 / sz));
    for (size_t shift = 1; shift < 64 / sz; shift++)
        check_reduce_once(dt, op, 131, (int)(shift % ALIAS_MODES), shift);
    check_reduce_once(dt, op, 20000 / sz + 3, ALIAS_NONE, 1);
    check_reduce_once(dt, op, 20000 / sz + 5, ALIAS_DST_A, 0);
}

static void check_isa(const char *isa)
{
    if (coll__reduce_set_isa(isa) != COLL_SUCCESS) {
        printf("# %s: not supported by this CPU, not tested\n", isa);
        return;
    }
    /* both store paths: plain, and non-temporal for everything that can stream */
    for (int stream = 0; stream < 2; stream++) {
        coll__reduce_set_stream_bytes(stream ? 1 : SIZE_MAX);
        for (int dt = 0; dt < COLL_NUM_DTYPES; dt++)
            for (int op = 0; op < COLL_NUM_OPS; op++)
                check_kernel_sweep((coll_dtype_t)dt, (coll_op_t)op);
    }
}

TEST(isa_scalar_all_dtypes_ops)
{
    check_isa("scalar");
}
TEST(isa_sse2_all_dtypes_ops)
{
    check_isa("sse2");
}
TEST(isa_avx2_all_dtypes_ops)
{
    check_isa("avx2");
}
TEST(isa_avx512_all_dtypes_ops)
{
    check_isa("avx512");
}

TEST(isa_avx512vbmi_all_dtypes_ops)
{
    check_isa("avx512vbmi");
}

/* Reduce with the named set into a fresh buffer (the caller frees it). */
static uint8_t *reduce_with(const char *isa, const void *a, const void *b, size_t count,
                            coll_dtype_t dt, coll_op_t op)
{
    uint8_t *d = malloc(count * coll__dtype_size(dt) + 1);

    ASSERT(d);
    ASSERT_EQ(coll__reduce_set_isa(isa), COLL_SUCCESS);
    coll__reduce(d, a, b, count, dt, op);
    return d;
}

/*
 * Narrow floats, where the vector sets convert with other instructions (fp16: F16C): every
 * code against random partners and against the special values (NaN, Inf, zeros, the largest
 * finite, subnormals), each op, bit for bit equal to the scalar reference. Products of random
 * codes land everywhere in fp32, subnormal results and overflow included, which exercises
 * the rounding of the narrowing.
 */
TEST(isa_narrow_codes_match_scalar)
{
    static const coll_dtype_t dts[] = {COLL_FLOAT16, COLL_BFLOAT16, COLL_FLOAT8E4M3,
                                       COLL_FLOAT8E5M2};
    const size_t n = 65536 * 4;
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    uint8_t *a8 = malloc(n), *b8 = malloc(n);

    ASSERT(a && b && a8 && b8);
    for (size_t t = 0; t < COLL_ARRAY_SIZE(dts); t++) {
        coll_dtype_t dt = dts[t];
        const struct fmt *f = fmt_of(dt);
        uint32_t codes = fmt_codes(f), maxfin = fmt_maxfin(f), sgn = fmt_sign(f);
        const uint32_t special[] = {0,          sgn,    1,
                                    sgn | 1,    maxfin, sgn | maxfin,
                                    maxfin + 1, f->nan, (uint32_t)(1u << f->mbits)};
        for (size_t i = 0; i < n; i++) {
            uint32_t x = (uint32_t)(i % codes), y;
            y = (i / codes) % 2 ? special[rnd() % COLL_ARRAY_SIZE(special)]
                                : (uint32_t)(rnd() % codes);
            a[i] = (uint16_t)x;
            b[i] = (uint16_t)y;
            a8[i] = (uint8_t)x;
            b8[i] = (uint8_t)y;
        }
        const void *pa = coll__dtype_size(dt) == 2 ? (void *)a : (void *)a8;
        const void *pb = coll__dtype_size(dt) == 2 ? (void *)b : (void *)b8;
        for (int op = 0; op < COLL_NUM_OPS; op++) {
            uint8_t *want = reduce_with("scalar", pa, pb, n, dt, op);
            for (size_t k = 1; coll__reduce_isa_supported(k); k++) {
                const char *isa = coll__reduce_isa_supported(k);
                uint8_t *got = reduce_with(isa, pa, pb, n, dt, op);
                for (size_t i = 0; i < n; i++)
                    ASSERT_MSG(memcmp(got + i * coll__dtype_size(dt),
                                      want + i * coll__dtype_size(dt), coll__dtype_size(dt)) == 0,
                               "%s %s %s [%zu]: 0x%x op 0x%x = 0x%llx, scalar 0x%llx", isa,
                               coll__dtype_name(dt), coll__op_name(op), i, (unsigned)a[i],
                               (unsigned)b[i],
                               (unsigned long long)elem_hex(dt, got + i * coll__dtype_size(dt)),
                               (unsigned long long)elem_hex(dt, want + i * coll__dtype_size(dt)));
                free(got);
            }
            free(want);
        }
    }
    free(a);
    free(b);
    free(a8);
    free(b8);
}

/* fp32/fp64 max and min pick one operand, NaN included: bit for bit equal to the scalar
 * reference on every set, NaN payloads and signed zeros too; sum and prod up to which NaN. */
TEST(isa_float_specials_match_scalar)
{
    static const coll_dtype_t dts[] = {COLL_FLOAT32, COLL_FLOAT64};
    const size_t n = 4099;

    for (size_t t = 0; t < COLL_ARRAY_SIZE(dts); t++) {
        coll_dtype_t dt = dts[t];
        size_t sz = coll__dtype_size(dt);
        uint8_t *a = malloc(n * sz), *b = malloc(n * sz);
        ASSERT(a && b);
        for (size_t i = 0; i < n; i++) {
            gen_elem(dt, a + i * sz);
            gen_elem(dt, b + i * sz);
            if (i % 7 == 0) /* equal operands: ties between +0/-0 and NaN payloads */
                memcpy(b + i * sz, a + i * sz, sz);
        }
        for (int op = 0; op < COLL_NUM_OPS; op++) {
            uint8_t *want = reduce_with("scalar", a, b, n, dt, op);
            for (size_t k = 1; coll__reduce_isa_supported(k); k++) {
                const char *isa = coll__reduce_isa_supported(k);
                uint8_t *got = reduce_with(isa, a, b, n, dt, op);
                bool exact = op == COLL_MAX || op == COLL_MIN;
                for (size_t i = 0; i < n; i++)
                    ASSERT_MSG(exact ? memcmp(got + i * sz, want + i * sz, sz) == 0
                                     : elem_eq(dt, got + i * sz, want + i * sz),
                               "%s %s %s [%zu]: 0x%llx, scalar 0x%llx", isa, coll__dtype_name(dt),
                               coll__op_name(op), i, (unsigned long long)elem_hex(dt, got + i * sz),
                               (unsigned long long)elem_hex(dt, want + i * sz));
                free(got);
            }
            free(want);
        }
        free(a);
        free(b);
    }
}

/* Every ordered pair of special values (zeros of both signs, NaN, infinities, the largest
 * finite, the smallest subnormal, ones), repeated so that vector bodies and not only the
 * scalar tails meet them, on every set, against the reference oracle. */
TEST(isa_special_pairs_every_set)
{
    static const double vals[] = {
        0.0,     -0.0,     NAN,   -NAN, INFINITY, -INFINITY, 1.0,    -1.0,
        65504.0, -65504.0, 448.0, 6e-8, -6e-8,    1e-45,     -1e-45, 3.4028234663852886e38,
        2.0,     0.5};
    enum { NV = COLL_ARRAY_SIZE(vals), N = NV * NV * 2 };

    for (size_t t = 0; t < COLL_ARRAY_SIZE(float_dts); t++) {
        coll_dtype_t dt = float_dts[t];
        size_t sz = coll__dtype_size(dt);
        uint8_t a[N * 8], b[N * 8], d[N * 8], want[8];
        for (size_t i = 0; i < N; i++) {
            uint64_t x = enc(dt, vals[i % NV]), y = enc(dt, vals[(i / NV) % NV]);
            memcpy(a + i * sz, &x, sz); /* little endian: the low bytes */
            memcpy(b + i * sz, &y, sz);
        }
        for (size_t k = 0; coll__reduce_isa_supported(k); k++) {
            ASSERT_EQ(coll__reduce_set_isa(coll__reduce_isa_supported(k)), COLL_SUCCESS);
            for (int op = 0; op < COLL_NUM_OPS; op++) {
                coll__reduce(d, a, b, N, dt, op);
                for (size_t i = 0; i < N; i++) {
                    ref_elem(dt, op, a + i * sz, b + i * sz, want);
                    ASSERT_MSG(elem_eq(dt, d + i * sz, want),
                               "%s %s %s [%zu]: 0x%llx op 0x%llx = 0x%llx, want 0x%llx",
                               coll__reduce_isa(), coll__dtype_name(dt), coll__op_name(op), i,
                               (unsigned long long)elem_hex(dt, a + i * sz),
                               (unsigned long long)elem_hex(dt, b + i * sz),
                               (unsigned long long)elem_hex(dt, d + i * sz),
                               (unsigned long long)elem_hex(dt, want));
                }
            }
        }
    }
}

/* coll__reduce2: both outputs hold the reference result; neither writes outside its span;
 * the inputs stay unchanged (or dst0 is an input exactly). */
static void check_reduce2_once(coll_dtype_t dt, coll_op_t op, size_t count, size_t shift0,
                               size_t shift1, bool in_place, bool second)
{
    size_t sz = coll__dtype_size(dt), bytes = count * sz;
    size_t total = bytes + 2 * GUARD + 64;
    uint8_t *ba = malloc(total), *bb = malloc(total), *b0 = malloc(total), *b1 = malloc(total);
    uint8_t *a0 = malloc(bytes + 1), *bcopy = malloc(bytes + 1), want[8];
    uint8_t *a = ba + GUARD + shift0 * sz, *b = bb + GUARD, *d0, *d1;

    ASSERT(ba && bb && b0 && b1 && a0 && bcopy);
    memset(ba, 0xa5, total);
    memset(bb, 0xa5, total);
    memset(b0, 0xa5, total);
    memset(b1, 0xa5, total);
    for (size_t i = 0; i < count; i++) {
        gen_elem(dt, a + i * sz);
        gen_elem(dt, b + i * sz);
    }
    memcpy(a0, a, bytes);
    memcpy(bcopy, b, bytes);
    d0 = in_place ? a : b0 + GUARD + shift0 * sz;
    d1 = second ? b1 + GUARD + shift1 * sz : NULL;

    coll__reduce2(d0, d1, a, b, count, dt, op);

    for (size_t i = 0; i < count; i++) {
        ref_elem(dt, op, a0 + i * sz, bcopy + i * sz, want);
        ASSERT_MSG(elem_eq(dt, d0 + i * sz, want), "%s %s %s count %zu [%zu]: dst0 wrong",
                   coll__reduce_isa(), coll__dtype_name(dt), coll__op_name(op), count, i);
        if (d1)
            ASSERT_MSG(memcmp(d1 + i * sz, d0 + i * sz, sz) == 0,
                       "%s %s count %zu [%zu]: dst1 differs from dst0", coll__reduce_isa(),
                       coll__dtype_name(dt), count, i);
    }
    ASSERT(memcmp(b, bcopy, bytes) == 0);
    if (!in_place)
        ASSERT(memcmp(a, a0, bytes) == 0);
    for (uint8_t *base = in_place ? ba : b0, *d = d0;; base = b1, d = d1) {
        for (uint8_t *p = base; p < d; p++)
            ASSERT_MSG(*p == 0xa5, "write before an output");
        for (uint8_t *p = d + bytes; p < base + total; p++)
            ASSERT_MSG(*p == 0xa5, "%s count %zu: write past an output", coll__reduce_isa(), count);
        if (!d1 || base == b1)
            break;
    }
    if (!second)
        for (size_t i = 0; i < total; i++)
            ASSERT(b1[i] == 0xa5);
    free(ba);
    free(bb);
    free(b0);
    free(b1);
    free(a0);
    free(bcopy);
}

TEST(reduce2_two_outputs)
{
    static const coll_dtype_t dts[] = {COLL_INT8,    COLL_UINT32,  COLL_INT64,    COLL_FLOAT16,
                                       COLL_FLOAT32, COLL_FLOAT64, COLL_BFLOAT16, COLL_FLOAT8E4M3};
    static const size_t counts[] = {0, 1, 33, 67, 4099, 30011};

    for (size_t k = 0; coll__reduce_isa_supported(k); k++) {
        ASSERT_EQ(coll__reduce_set_isa(coll__reduce_isa_supported(k)), COLL_SUCCESS);
        for (int stream = 0; stream < 2; stream++) {
            coll__reduce_set_stream_bytes(stream ? 1 : SIZE_MAX);
            for (size_t t = 0; t < COLL_ARRAY_SIZE(dts); t++) {
                size_t sz = coll__dtype_size(dts[t]);
                for (size_t c = 0; c < COLL_ARRAY_SIZE(counts); c++) {
                    coll_op_t op = (coll_op_t)((c + t) % COLL_NUM_OPS);
                    /* dst1 aligned like dst0, or not; dst0 in place or not; dst1 or none */
                    check_reduce2_once(dts[t], op, counts[c], c % (64 / sz), c % (64 / sz), false,
                                       true);
                    check_reduce2_once(dts[t], op, counts[c], 0, (c + 1) % (64 / sz), c % 2, true);
                    check_reduce2_once(dts[t], op, counts[c], 1 % (64 / sz), 0, c % 2, false);
                }
            }
        }
    }
}

/* The reference fold of coll__reduce_n: left to right; native types round at every step
 * (ref_elem), narrow floats accumulate in fp32 (exact as double then one rounding per op)
 * and round to the format once. */
static void ref_fold(coll_dtype_t dt, coll_op_t op, const uint8_t *const *src, int k, size_t i,
                     void *out)
{
    const struct fmt *f = fmt_of(dt);
    size_t sz = coll__dtype_size(dt);

    if (f && k > 1) { /* k == 1 is a copy, NaN payloads and all */
        uint32_t c = 0, r;
        float acc;
        memcpy(&c, src[0] + i * sz, sz);
        acc = (float)ref_decode(f, c);
        for (int j = 1; j < k; j++) {
            c = 0;
            memcpy(&c, src[j] + i * sz, sz);
            acc = (float)ref_float_op(acc, ref_decode(f, c), op);
        }
        r = ref_narrow(f, acc);
        memcpy(out, &r, sz);
        return;
    }
    memcpy(out, src[0] + i * sz, sz);
    for (int j = 1; j < k; j++)
        ref_elem(dt, op, out, src[j] + i * sz, out);
}

/* dst_idx < 0: a separate dst; else dst is src[dst_idx] (in place). */
static void check_reduce_n_once(coll_dtype_t dt, coll_op_t op, int k, size_t count, size_t shift,
                                int dst_idx)
{
    size_t sz = coll__dtype_size(dt), bytes = count * sz, total = bytes + 2 * GUARD + 64;
    uint8_t *bufs[COLL_REDUCE_MAX_INPUTS], *orig[COLL_REDUCE_MAX_INPUTS];
    const void *src[COLL_REDUCE_MAX_INPUTS];
    uint8_t *bd = malloc(total), *dst, want[8];

    ASSERT(bd);
    memset(bd, 0xa5, total);
    for (int j = 0; j < k; j++) {
        bufs[j] = malloc(total);
        orig[j] = malloc(bytes + 1);
        ASSERT(bufs[j] && orig[j]);
        memset(bufs[j], 0xa5, total);
        for (size_t i = 0; i < count; i++)
            gen_elem(dt, bufs[j] + GUARD + (shift + (size_t)j) % (64 / sz) * sz + i * sz);
        src[j] = bufs[j] + GUARD + (shift + (size_t)j) % (64 / sz) * sz;
        memcpy(orig[j], src[j], bytes);
    }
    dst = dst_idx >= 0 ? (uint8_t *)src[dst_idx] : bd + GUARD + shift * sz;

    ASSERT_EQ(coll__reduce_n(dst, src, k, count, dt, op), COLL_SUCCESS);

    for (size_t i = 0; i < count; i++) {
        ref_fold(dt, op, (const uint8_t *const *)orig, k, i, want);
        ASSERT_MSG(elem_eq(dt, dst + i * sz, want),
                   "%s %s %s k %d count %zu dst %d [%zu]: 0x%llx, want 0x%llx", coll__reduce_isa(),
                   coll__dtype_name(dt), coll__op_name(op), k, count, dst_idx, i,
                   (unsigned long long)elem_hex(dt, dst + i * sz),
                   (unsigned long long)elem_hex(dt, want));
    }
    for (int j = 0; j < k; j++) {
        if (j != dst_idx)
            ASSERT(memcmp(src[j], orig[j], bytes) == 0);
        free(bufs[j]);
        free(orig[j]);
    }
    if (dst_idx < 0) {
        for (uint8_t *p = bd; p < dst; p++)
            ASSERT_MSG(*p == 0xa5, "write before dst");
        for (uint8_t *p = dst + bytes; p < bd + total; p++)
            ASSERT_MSG(*p == 0xa5, "%s k %d count %zu: write past dst", coll__dtype_name(dt), k,
                       count);
    }
    free(bd);
}

/*
 * The n-input folds' widen, accumulate and narrow loops, called directly: acc[i] is element i
 * (the vector fp8 loops reorder elements inside registers and must undo it), widened and
 * narrowed exactly as elem.h does (NaN payloads aside: F16C quiets them), every code and
 * lengths across the vector width.
 */
/* Element i of an array of 1- or 2-byte codes. */
static uint16_t code_at(const uint8_t *p, size_t i, size_t sz)
{
    uint16_t h;

    if (sz == 1)
        return p[i];
    memcpy(&h, p + 2 * i, 2);
    return h;
}

TEST(isa_widen_narrow_keep_element_order)
{
    enum { N = 1024 + 67 };
    static const size_t lens[] = {N, 64, 63, 129, 1};
    uint8_t *a = malloc(N * 2), *out = malloc(N * 2);
    float *acc = malloc(N * sizeof(float)), *want = malloc(N * sizeof(float));

    ASSERT(a && out && acc && want);
    for (size_t s = 0; s < coll__reduce_nisas; s++) {
        const struct coll__reduce_isa *k = coll__reduce_isas[s];
        if (!k->supported())
            continue;
        for (int dt = 0; dt < COLL_NUM_DTYPES; dt++) {
            size_t sz = coll__dtype_size(dt);
            const struct fmt *f = fmt_of((coll_dtype_t)dt);
            if (!k->widen[dt])
                continue;
            for (size_t li = 0; li < COLL_ARRAY_SIZE(lens); li++) {
                size_t n = lens[li];
                for (size_t i = 0; i < n * sz; i++)
                    a[i] = (uint8_t)(sz == 1 ? i : rnd());
                k->widen[dt](acc, a, n);
                for (size_t i = 0; i < n; i++) {
                    want[i] = dut_widen(f, code_at(a, i, sz));
                    if (memcmp(&acc[i], &want[i], 4) != 0 && !(isnan(acc[i]) && isnan(want[i])))
                        HARNESS_FAIL("%s %s widen: element %zu of %zu is %a, want %a", k->name,
                                     coll__dtype_name(dt), i, n, acc[i], want[i]);
                }
                /* acc += widen(a): element order holds through the accumulation */
                k->accum[dt][COLL_SUM](acc, a, n);
                for (size_t i = 0; i < n; i++)
                    if (acc[i] != want[i] * 2 && !(isnan(acc[i]) && isnan(want[i])))
                        HARNESS_FAIL("%s %s accumulate: element %zu of %zu is %a, want %a", k->name,
                                     coll__dtype_name(dt), i, n, acc[i], want[i] * 2);
                /* narrowing of values that need rounding: x * (1 + 2^-k) for varying k */
                for (size_t i = 0; i < n; i++)
                    acc[i] = want[i] * (1.0f + ldexpf(1.0f, -(int)(i % 24)));
                k->narrow[dt](out, acc, n);
                for (size_t i = 0; i < n; i++) {
                    uint16_t got = code_at(out, i, sz), w = (uint16_t)dut_narrow(f, acc[i]);
                    if (got != w)
                        HARNESS_FAIL("%s %s narrow: element %zu of %zu (%a) is 0x%x, want 0x%x",
                                     k->name, coll__dtype_name(dt), i, n, acc[i], got, w);
                }
            }
        }
    }
    free(a);
    free(out);
    free(acc);
    free(want);
}

/*
 * fp8 under other floating-point environments than the default: every set gives the scalar
 * reference's bits under the same environment (the narrowing is exact integer work in
 * elem.h; the vector sets round with instructions or tables that must not depend on it).
 * Every pair of codes, each op, through the two-input loops and the n-input folds (the
 * fp32 accumulator and its narrowing), with two and three inputs.
 */
static void check_fp8_env(const char *env)
{
    static const coll_dtype_t dts[] = {COLL_FLOAT8E4M3, COLL_FLOAT8E5M2};
    const size_t n = 65536;
    uint8_t *a = malloc(n), *b = malloc(n), *c = malloc(n), *want = malloc(n), *got = malloc(n);

    ASSERT(a && b && c && want && got);
    for (size_t i = 0; i < n; i++) {
        a[i] = (uint8_t)(i >> 8);
        b[i] = (uint8_t)i;
        c[i] = (uint8_t)rnd();
    }
    for (size_t t = 0; t < COLL_ARRAY_SIZE(dts); t++)
        for (int op = 0; op < COLL_NUM_OPS; op++)
            for (int k = 2; k <= 4; k++) { /* 4: coll__reduce, the two-input loops */
                const void *src[3] = {a, b, c};
                ASSERT_EQ(coll__reduce_set_isa("scalar"), COLL_SUCCESS);
                if (k == 4)
                    coll__reduce(want, a, b, n, dts[t], (coll_op_t)op);
                else
                    ASSERT_EQ(coll__reduce_n(want, src, k, n, dts[t], (coll_op_t)op), COLL_SUCCESS);
                for (size_t s = 1; coll__reduce_isa_supported(s); s++) {
                    const char *isa = coll__reduce_isa_supported(s);
                    ASSERT_EQ(coll__reduce_set_isa(isa), COLL_SUCCESS);
                    if (k == 4)
                        coll__reduce(got, a, b, n, dts[t], (coll_op_t)op);
                    else
                        ASSERT_EQ(coll__reduce_n(got, src, k, n, dts[t], (coll_op_t)op),
                                  COLL_SUCCESS);
                    for (size_t i = 0; i < n; i++)
                        if (got[i] != want[i])
                            HARNESS_FAIL("%s, %s %s op %d, %d inputs, [%zu] (0x%02x 0x%02x "
                                         "0x%02x): 0x%02x, scalar 0x%02x",
                                         env, isa, coll__dtype_name(dts[t]), op, k, i, a[i], b[i],
                                         c[i], got[i], want[i]);
                }
            }
    ASSERT_EQ(coll__reduce_set_isa(NULL), COLL_SUCCESS);
    free(a);
    free(b);
    free(c);
    free(want);
    free(got);
}

TEST(isa_fp8_other_rounding_modes_and_flush)
{
    static const struct {
        int mode;
        const char *name;
    } modes[] = {{FE_TOWARDZERO, "toward zero"}, {FE_UPWARD, "upward"}, {FE_DOWNWARD, "downward"}};

    for (size_t m = 0; m < COLL_ARRAY_SIZE(modes); m++) {
        ASSERT_EQ(fesetround(modes[m].mode), 0);
        check_fp8_env(modes[m].name);
        fesetround(FE_TONEAREST);
    }
#if defined(__x86_64__)
    {
        unsigned csr = _mm_getcsr();
        _mm_setcsr(csr | 0x8040); /* FTZ and DAZ, as some training code sets them */
        check_fp8_env("FTZ+DAZ");
        _mm_setcsr(csr | 0x6000); /* toward zero in MXCSR alone (fegetround reads x87's) */
        check_fp8_env("MXCSR toward zero");
        _mm_setcsr(csr);
    }
#endif
}

TEST(reduce_n_every_dtype_op_and_set)
{
    static const int ks[] = {1, 2, 3, 5, 16};
    static const size_t counts[] = {0, 1, 67, 5003};

    for (size_t s = 0; coll__reduce_isa_supported(s); s++) {
        ASSERT_EQ(coll__reduce_set_isa(coll__reduce_isa_supported(s)), COLL_SUCCESS);
        for (int stream = 0; stream < 2; stream++) {
            coll__reduce_set_stream_bytes(stream ? 1 : SIZE_MAX);
            for (int dt = 0; dt < COLL_NUM_DTYPES; dt++)
                for (int op = 0; op < COLL_NUM_OPS; op++)
                    for (size_t ki = 0; ki < COLL_ARRAY_SIZE(ks); ki++) {
                        size_t c = (size_t)(dt + op + (int)ki) % COLL_ARRAY_SIZE(counts);
                        int k = ks[ki];
                        /* separate dst, dst = the first, the last or a middle input */
                        int dst_idx = (op + (int)ki) % 3 == 0   ? -1
                                      : (op + (int)ki) % 3 == 1 ? 0
                                                                : k - 1 - (k > 2);
                        check_reduce_n_once((coll_dtype_t)dt, (coll_op_t)op, k, counts[c],
                                            (size_t)(dt + op) % 5, dst_idx);
                    }
        }
    }
}

/* k == 2 is coll__reduce, bit for bit, narrow floats included. */
TEST(reduce_n_two_inputs_is_reduce)
{
    const size_t n = 3001;

    for (int dt = 0; dt < COLL_NUM_DTYPES; dt++) {
        size_t sz = coll__dtype_size(dt);
        uint8_t *a = malloc(n * sz), *b = malloc(n * sz), *x = malloc(n * sz), *y = malloc(n * sz);
        ASSERT(a && b && x && y);
        for (size_t i = 0; i < n; i++) {
            gen_elem(dt, a + i * sz);
            gen_elem(dt, b + i * sz);
        }
        for (int op = 0; op < COLL_NUM_OPS; op++) {
            const void *src[2] = {a, b};
            coll__reduce(x, a, b, n, dt, op);
            ASSERT_EQ(coll__reduce_n(y, src, 2, n, dt, op), COLL_SUCCESS);
            for (size_t i = 0; i < n; i++)
                ASSERT(elem_eq(dt, x + i * sz, y + i * sz));
        }
        free(a);
        free(b);
        free(x);
        free(y);
    }
}

/* The fold order is fixed: 1 + 2^27 - 2^27 is 0 left to right in fp32 (the 1 is lost in the
 * first sum), 1 in any order that adds the big values first. Every set, every path, and
 * every rank computing it gets 0. Sixteen random fp32 inputs give the scalar bits too. */
TEST(reduce_n_order_is_left_to_right)
{
    enum { N = 5003, K = 16 };
    float *in[K], *want = malloc(N * sizeof(float)), *got = malloc(N * sizeof(float));
    const void *src[K];

    ASSERT(want && got);
    for (int j = 0; j < K; j++) {
        in[j] = malloc(N * sizeof(float));
        ASSERT(in[j]);
        for (size_t i = 0; i < N; i++)
            in[j][i] = j == 0   ? 1.0f
                       : j == 1 ? 0x1p27f
                       : j == 2 ? -0x1p27f
                                : (float)((rnd01() - 0.5) * 1e3);
        src[j] = in[j];
    }
    ASSERT_EQ(coll__reduce_set_isa("scalar"), COLL_SUCCESS);
    ASSERT_EQ(coll__reduce_n(want, src, 3, N, COLL_FLOAT32, COLL_SUM), COLL_SUCCESS);
    for (size_t i = 0; i < N; i++)
        ASSERT(want[i] == 0.0f);
    ASSERT_EQ(coll__reduce_n(want, src, K, N, COLL_FLOAT32, COLL_SUM), COLL_SUCCESS);
    for (size_t s = 1; coll__reduce_isa_supported(s); s++) {
        ASSERT_EQ(coll__reduce_set_isa(coll__reduce_isa_supported(s)), COLL_SUCCESS);
        for (int stream = 0; stream < 2; stream++) {
            coll__reduce_set_stream_bytes(stream ? 1 : SIZE_MAX);
            ASSERT_EQ(coll__reduce_n(got, src, 3, N, COLL_FLOAT32, COLL_SUM), COLL_SUCCESS);
            for (size_t i = 0; i < N; i++)
                ASSERT(fbits(got[i]) == 0);
            ASSERT_EQ(coll__reduce_n(got, src, K, N, COLL_FLOAT32, COLL_SUM), COLL_SUCCESS);
            ASSERT(memcmp(got, want, N * sizeof(float)) == 0);
        }
    }
    for (int j = 0; j < K; j++)
        free(in[j]);
    free(want);
    free(got);
}

TEST(reduce_n_bad_arguments_write_nothing)
{
    uint32_t a[4] = {1, 2, 3, 4}, d[4] = {7, 7, 7, 7};
    const void *src[COLL_REDUCE_MAX_INPUTS + 1];
    const void *with_null[3] = {a, NULL, a};

    for (size_t j = 0; j < COLL_ARRAY_SIZE(src); j++)
        src[j] = a;
    ASSERT_EQ(coll__reduce_n(d, src, 0, 4, COLL_UINT32, COLL_SUM), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__reduce_n(d, src, -1, 4, COLL_UINT32, COLL_SUM), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__reduce_n(d, src, COLL_REDUCE_MAX_INPUTS + 1, 4, COLL_UINT32, COLL_SUM),
              COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__reduce_n(d, src, 2, 4, COLL_NUM_DTYPES, COLL_SUM), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__reduce_n(d, src, 2, 4, COLL_UINT32, (coll_op_t)-4), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__reduce_n(d, src, 2, 4, COLL_UINT32, COLL_NUM_OPS), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__reduce_n(d, with_null, 3, 4, COLL_UINT32, COLL_SUM), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__reduce_n(d, with_null, 3, 4, COLL_UINT32, COLL_BOR), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__reduce_n(NULL, src, 3, 4, COLL_UINT32, COLL_BAND), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__reduce_n(d, src, COLL_REDUCE_MAX_INPUTS + 1, 4, COLL_UINT32, COLL_BXOR),
              COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__reduce_n(d, NULL, 3, 4, COLL_UINT32, COLL_SUM), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__reduce_n(NULL, src, 3, 4, COLL_UINT32, COLL_SUM), COLL_INVALID_ARGUMENT);
    for (int i = 0; i < 4; i++)
        ASSERT_EQ(d[i], 7);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "reduce_n");
    /* count 0 touches nothing, whatever the pointers */
    ASSERT_EQ(coll__reduce_n(NULL, NULL, 3, 0, COLL_UINT32, COLL_SUM), COLL_SUCCESS);
    /* the same input twice is fine: 16 x a */
    ASSERT_EQ(coll__reduce_n(d, src, COLL_REDUCE_MAX_INPUTS, 4, COLL_UINT32, COLL_SUM),
              COLL_SUCCESS);
    for (int i = 0; i < 4; i++)
        ASSERT_EQ(d[i], 16u * a[i]);
}

/* coll__copy: every size and misalignment of dst and src, streamed and not; canaries. */
TEST(copy_streamed_and_plain)
{
    static const size_t sizes[] = {0, 1, 63, 64, 65, 127, 4096, 8191, 70001};

    for (size_t s = 0; coll__reduce_isa_supported(s); s++) {
        ASSERT_EQ(coll__reduce_set_isa(coll__reduce_isa_supported(s)), COLL_SUCCESS);
        for (int stream = 0; stream < 2; stream++) {
            coll__reduce_set_stream_bytes(stream ? 1 : SIZE_MAX);
            for (size_t z = 0; z < COLL_ARRAY_SIZE(sizes); z++) {
                size_t n = sizes[z], total = n + 2 * GUARD + 64;
                uint8_t *src = malloc(total), *dst = malloc(total);
                ASSERT(src && dst);
                for (size_t i = 0; i < total; i++)
                    src[i] = (uint8_t)rnd();
                for (size_t off = 0; off < 64; off += 7) {
                    size_t soff = GUARD + (off * 3) % 64, doff = GUARD + off;
                    memset(dst, 0xa5, total);
                    coll__copy(dst + doff, src + soff, n);
                    ASSERT(memcmp(dst + doff, src + soff, n) == 0);
                    for (size_t i = 0; i < doff; i++)
                        ASSERT(dst[i] == 0xa5);
                    for (size_t i = doff + n; i < total; i++)
                        ASSERT_MSG(dst[i] == 0xa5, "%s: copy of %zu to +%zu wrote past the end",
                                   coll__reduce_isa(), n, off);
                }
                free(src);
                free(dst);
            }
        }
    }
}

/* Streaming needs an element-aligned dst; a misaligned one (possible for a caller that packs
 * bytes) still gets the right result through plain stores. */
TEST(stream_threshold_and_odd_dst)
{
    const size_t n = 9000;
    uint8_t *a = malloc(n * 4 + 8), *b = malloc(n * 4 + 8), *d = malloc(n * 4 + 8);
    uint32_t x, y, z;

    ASSERT(a && b && d);
    for (size_t i = 0; i < n * 4 + 8; i++) {
        a[i] = (uint8_t)rnd();
        b[i] = (uint8_t)rnd();
    }
    coll__reduce_set_stream_bytes(1);
    ASSERT_EQ(coll__reduce_stream_bytes(), 1);
    /* through memcpy'd elements: the caller's uint32 views are misaligned by one byte */
    coll__reduce(d + 1, a + 1, b + 1, n, COLL_UINT8, COLL_SUM);
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(d[1 + i], (uint8_t)(a[1 + i] + b[1 + i]));
    coll__reduce(d, a, b, n, COLL_UINT32, COLL_SUM);
    for (size_t i = 0; i < n; i++) {
        memcpy(&x, a + 4 * i, 4);
        memcpy(&y, b + 4 * i, 4);
        memcpy(&z, d + 4 * i, 4);
        ASSERT_EQ(z, x + y);
    }
    coll__reduce_set_stream_bytes(0);
    ASSERT(coll__reduce_stream_bytes() > 1);
    free(a);
    free(b);
    free(d);
}

/* ---- 7 bitwise operators ---------------------------------------------------------------- */

/* One element of an integer dtype, as an unsigned value of its width. */
static uint64_t load_bits(const uint8_t *p, size_t sz)
{
    uint64_t v = 0;
    for (size_t b = 0; b < sz; b++)
        v |= (uint64_t)p[b] << (8 * b);
    return v;
}

static uint64_t ref_bit(coll_op_t op, uint64_t x, uint64_t y)
{
    return op == COLL_BAND ? x & y : op == COLL_BOR ? x | y : x ^ y;
}

TEST(bitwise_ops)
{
    static const coll_op_t ops[] = {COLL_BAND, COLL_BOR, COLL_BXOR};
    /* lengths around the 8 KiB block and odd ones; offsets misalign every view */
    static const size_t counts[] = {0, 1, 7, 1000, 8192 + 3, 40000};
    const size_t maxb = 40000 * 8 + 16;
    uint8_t *in[COLL_REDUCE_MAX_INPUTS], *d = malloc(maxb), *d1 = malloc(maxb),
            *keep = malloc(maxb);

    ASSERT(d && d1 && keep);
    for (int j = 0; j < COLL_REDUCE_MAX_INPUTS; j++) {
        in[j] = malloc(maxb);
        ASSERT(in[j]);
        for (size_t i = 0; i < maxb; i++)
            in[j][i] = (uint8_t)rnd();
    }
    for (coll_dtype_t dt = COLL_INT8; dt <= COLL_UINT64; dt++) {
        size_t sz = coll__dtype_size(dt);
        for (size_t o = 0; o < COLL_ARRAY_SIZE(ops); o++) {
            coll_op_t op = ops[o];
            for (size_t c = 0; c < COLL_ARRAY_SIZE(counts); c++) {
                size_t n = counts[c], off = 1 + c % 3;
                const void *src[COLL_REDUCE_MAX_INPUTS];

                /* two inputs, two outputs */
                memset(d, 0xa5, maxb);
                memset(d1, 0x5a, maxb);
                coll__reduce2(d + off, d1, in[0] + off, in[1] + 2, n, dt, op);
                for (size_t i = 0; i < n; i++) {
                    uint64_t want = ref_bit(op, load_bits(in[0] + off + i * sz, sz),
                                            load_bits(in[1] + 2 + i * sz, sz));
                    ASSERT_MSG(load_bits(d + off + i * sz, sz) == want &&
                                   load_bits(d1 + i * sz, sz) == want,
                               "%s %s count %zu: element %zu", coll__dtype_name(dt),
                               coll__op_name(op), n, i);
                }
                ASSERT_MSG(d[off - 1] == 0xa5 && d[off + n * sz] == 0xa5,
                           "%s %s count %zu: write outside dst", coll__dtype_name(dt),
                           coll__op_name(op), n);
                ASSERT_EQ(d1[n * sz], 0x5a);
                /* n inputs, the result in place over the first */
                for (int k = 1; k <= COLL_REDUCE_MAX_INPUTS; k += 5) {
                    memcpy(keep, in[0], maxb);
                    for (int j = 0; j < k; j++)
                        src[j] = in[j] + (j ? 0 : off);
                    ASSERT_EQ(coll__reduce_n(in[0] + off, src, k, n, dt, op), COLL_SUCCESS);
                    for (size_t i = 0; i < n; i++) {
                        uint64_t want = load_bits(keep + off + i * sz, sz);
                        for (int j = 1; j < k; j++)
                            want = ref_bit(op, want, load_bits(in[j] + i * sz, sz));
                        ASSERT_MSG(load_bits(in[0] + off + i * sz, sz) == want,
                                   "%s %s k %d count %zu: element %zu", coll__dtype_name(dt),
                                   coll__op_name(op), k, n, i);
                    }
                    memcpy(in[0], keep, maxb);
                }
            }
        }
    }
    /* identities that pin which operator is which */
    ASSERT_EQ(reduce1(COLL_UINT8, COLL_BAND, 0xcc, 0xaa), 0x88);
    ASSERT_EQ(reduce1(COLL_UINT8, COLL_BOR, 0xcc, 0xaa), 0xee);
    ASSERT_EQ(reduce1(COLL_UINT8, COLL_BXOR, 0xcc, 0xaa), 0x66);
    ASSERT(reduce1(COLL_INT64, COLL_BXOR, ~0ull, 1) == ~1ull);
    ASSERT_EQ(strcmp(coll__op_name(COLL_BAND), "band"), 0);
    ASSERT_EQ(strcmp(coll__op_name(COLL_BOR), "bor"), 0);
    ASSERT_EQ(strcmp(coll__op_name(COLL_BXOR), "bxor"), 0);
    ASSERT_EQ(strcmp(coll__op_name((coll_op_t)-4), "unknown"), 0);
    /* floating-point dtypes have no bitwise operators: refused, nothing written */
    {
        float a = 1.5f, b = 2.5f, o = 7.0f;
        const void *src[2] = {&a, &b};
        ASSERT_EQ(coll__reduce_n(&o, src, 2, 1, COLL_FLOAT32, COLL_BAND), COLL_INVALID_ARGUMENT);
        coll__reduce(&o, &a, &b, 1, COLL_FLOAT32, COLL_BXOR);
        ASSERT(o == 7.0f);
    }
    for (int j = 0; j < COLL_REDUCE_MAX_INPUTS; j++)
        free(in[j]);
    free(d);
    free(d1);
    free(keep);
}

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
