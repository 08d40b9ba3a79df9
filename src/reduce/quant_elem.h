/*
 * quant_elem.h - the per-element math of the gradient codecs (quant.c): rounding to the
 * integer grids, the 4-bit E3M0 float, stochastic rounding and its counter-based noise, and
 * the rounding of block scales. The host loops (quant.c) and the CUDA quantize-reduce
 * kernels (src/cuda/) include this same header, so an element rounds the same way on both.
 *
 * Written like elem.h, whose conversions it reuses: plain C11 that nvcc also compiles as
 * C++, no libc, no tables, no hex float literals, every function COLL_HD and inline, and
 * selects rather than branches so that loops over these functions vectorize.
 *
 * Divisions: 1 constants, 2 counter-based noise, 3 integer rounding, 4 E3M0,
 * 5 stochastic narrowing to fp16/bf16/E4M3/E5M2, 6 block scales.
 *
 * Stochastic rounding: a value v between two neighbours lo < v < hi of the target grid
 * rounds to hi with probability (v - lo) / (hi - lo), so the expected result is v (no bias:
 * the point of stochastic rounding for gradients). The probability is drawn by comparing a
 * uniform 24-bit number u (in units of 2^-24) with that fraction, so the bias is below
 * 2^-24 of one grid step. u comes from a hash of (seed, element index), not from a stateful
 * generator, so any thread can round any element alone and the result only depends on the
 * seed and the index: reproducible, and the same on host and device.
 */
#ifndef COLL_REDUCE_QUANT_ELEM_H
#define COLL_REDUCE_QUANT_ELEM_H

#include "elem.h"

#include <stdint.h>

/* Forced inline on the host: past GCC's size limits, a per-element call (the stochastic
 * narrowing is one) would stay a call inside the loop, which then does not vectorize. */
#if defined(__CUDACC__)
#define COLL__QUANT_FN COLL_HD static __forceinline__
#elif defined(__GNUC__)
#define COLL__QUANT_FN COLL_HD static inline __attribute__((always_inline))
#else
#define COLL__QUANT_FN COLL_HD static inline
#endif

/* ---- 1 constants ------------------------------------------------------------------------ */

/* Block absmax maps to these grid maxima (int4 keeps the grid symmetric: -8 is not used). */
#define COLL__QUANT_INT8_MAX 127.0f
#define COLL__QUANT_INT4_MAX 7.0f
#define COLL__QUANT_E4M3_MAX 448.0f
#define COLL__QUANT_E5M2_MAX 57344.0f
#define COLL__QUANT_F32_MAX 3.40282346638528859812e+38f /* FLT_MAX, without <float.h> */
#define COLL__QUANT_TWO_M24 5.9604644775390625e-8f      /* 2^-24 */

/* ---- 2 counter-based noise ---------------------------------------------------------------- */

/* The stream key of a 64-bit seed: the splitmix64 output function, so that seeds 0, 1, 2...
 * give unrelated keys. Computed once per call, not per element (64-bit multiplies). */
COLL__QUANT_FN uint64_t coll__quant_key(uint64_t seed)
{
    uint64_t z = seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A 32-bit integer hash with full avalanche (xorshift-multiply, two rounds: the constants are
 * the "lowbias32" ones from Chris Wellons' hash search). 32-bit multiplies only, so it
 * vectorizes on the host and is cheap on the GPU. */
COLL__QUANT_FN uint32_t coll__quant_mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* Uniform 24-bit noise of element `index` under `key` (coll__quant_key of the seed). The
 * index's high half goes into the second round, so tensors past 2^32 elements do not repeat
 * the noise of their first 2^32. */
COLL__QUANT_FN uint32_t coll__quant_noise(uint64_t key, uint64_t index)
{
    uint32_t h = coll__quant_mix32((uint32_t)index ^ (uint32_t)key);
    h = coll__quant_mix32(h ^ (uint32_t)(index >> 32) ^ (uint32_t)(key >> 32));
    return h >> 8;
}

/* u = r24 * 2^-24 in [0, 1): exact (r24 < 2^24 converts exactly; the scaling is by 2^-24). */
COLL__QUANT_FN float coll__quant_unit(uint32_t r24)
{
    return (float)(int32_t)r24 * COLL__QUANT_TWO_M24;
}

/* ---- 3 integer rounding ----------------------------------------------------------------- */

/* v clamped to [-m, m] (m > 0); +-Inf clamp too (NaN never gets here: such blocks skip
 * rounding). Done on the magnitude's bits with an integer min, not with float compares: GCC
 * turns float selects into branches and then threads the conversion to int that follows
 * into one of them, where (as it may trap) it stops the loop vectorizing. */
COLL__QUANT_FN float coll__quant_clamp(float v, float m)
{
    uint32_t b = coll__f32_bits(v), mb = coll__f32_bits(m);
    uint32_t a = b & 0x7fffffffu;

    return coll__bits_f32((b & 0x80000000u) | (a < mb ? a : mb));
}

/* The multiplier that maps a block onto its grid: qmax / amax, at most FLT_MAX so that it
 * stays finite for a zero block (0 * FLT_MAX = 0, where 0 * Inf would be NaN) and for a
 * subnormal amax (x * FLT_MAX overflows to Inf, which the clamp then brings back to qmax). */
COLL__QUANT_FN float coll__quant_inv(float qmax, float amax)
{
    float inv = qmax / amax;
    return inv < COLL__QUANT_F32_MAX ? inv : COLL__QUANT_F32_MAX;
}

/* Round to the nearest integer, ties to even, for |v| <= 2^22. Adding 1.5 * 2^23 puts v in
 * [2^23, 2^24), where the fp32 ulp is 1, so the addition itself rounds v to an integer
 * (to nearest even: the default rounding mode, which coll never changes, and the only one
 * of CUDA's plain float add), which then sits in the low mantissa bits. Read through the
 * bits, so that no compiler can fold (v + M) - M back into v; two instructions, where a
 * mode-independent version (truncate, compare the fraction with 1/2) takes a dozen. */
COLL__QUANT_FN int32_t coll__quant_rne_i32(float v)
{
    return (int32_t)(coll__f32_bits(v + 12582912.0f) - 0x4b400000u);
}

/* Stochastic: floor(v) + 1 with probability v - floor(v), for |v| < 2^23. */
COLL__QUANT_FN int32_t coll__quant_sr_i32(float v, uint32_t r24)
{
    int32_t t = (int32_t)v;
    int32_t fl = t - ((float)t > v ? 1 : 0); /* floor */
    float frac = v - (float)fl;              /* [0, 1), exact */

    return fl + (coll__quant_unit(r24) < frac ? 1 : 0);
}

/* ---- 4 E3M0: sign + 3-bit exponent, no mantissa ------------------------------------------ */

/*
 * A nibble s.eee: code eee = 0 is zero, eee = 1..7 is +-2^(eee - 7), so the magnitudes are
 * {0, 2^-6, 2^-5, ..., 2^-1, 1}. The codec scales a block by its absmax, so the grid of a
 * block is {0, +-amax * 2^-6, ..., +-amax} and the block maximum is exact.
 *
 * Rounding is to the nearest grid value with ties to the even code (the IEEE rule for a
 * format with no mantissa bits: the exponent's lowest bit is the last bit of the code), so
 * 0.75 -> 0.5 (code 6), 1.5 * 2^-6 -> 2^-5 (code 2), 2^-7 -> 0. Zero is encoded with a
 * positive sign, whatever the sign of the input, so equal values give equal bytes.
 *
 * Error: within [2^-6, 1] at most 1/3 of |v| (the worst case is the midpoint 1.5 * 2^k,
 * 2^(k-1) from both neighbours); below 2^-6 at most 2^-7 (the midpoint of 0 and 2^-6).
 */
COLL__QUANT_FN uint8_t coll__quant_to_e3m0(float v, uint32_t r24, int stochastic)
{
    uint32_t b = coll__f32_bits(v);
    uint32_t sign = (b >> 28) & 8u;
    int32_t ab = (int32_t)(b & 0x7fffffffu); /* |v| <= 1 (clamped by the caller) */
    int32_t lo = (ab >> 23) - 120;           /* code of 2^floor(log2|v|): 2^(c-7) has bias c+120 */
    /* Where |v| lies between the grid value below (code lo) and the next one up, in [0, 1):
     * the mantissa field for |v| >= 2^-6 (the grid doubles), |v| / 2^-6 below (0 to 2^-6). */
    float frac_n = (float)(ab & 0x7fffff) * 1.1920928955078125e-7f; /* * 2^-23 */
    float frac_s = coll__bits_f32((uint32_t)ab) * 64.0f;
    /* Blended with a mask, not selected: GCC would sink each product into a branch of its
     * own, where (as a float operation may trap) it stops the loop vectorizing. */
    uint32_t sub = 0u - (uint32_t)(lo < 1);
    float frac = coll__bits_f32((coll__f32_bits(frac_s) & sub) | (coll__f32_bits(frac_n) & ~sub));
    int32_t up_rne = frac > 0.5f ? 1 : (frac == 0.5f ? (lo & 1) : 0);
    int32_t up_sr = coll__quant_unit(r24) < frac ? 1 : 0;
    int32_t code;

    lo = lo < 1 ? 0 : lo;
    code = lo + (stochastic ? up_sr : up_rne);
    code = code > 7 ? 7 : code; /* |v| == 1: lo = 7, frac = 0 already; belt and braces */
    return (uint8_t)((code == 0 ? 0u : sign) | (uint32_t)code);
}

/* The magnitude grid value of a nibble, signed: 0 or +-2^(code - 7). Exact. */
COLL__QUANT_FN float coll__quant_e3m0_to_f32(uint32_t nib)
{
    uint32_t code = nib & 7u;
    uint32_t mag = (code + 120u) << 23;
    uint32_t is_zero = 0u - (uint32_t)(code == 0);

    return coll__bits_f32(((nib & 8u) << 28) | (mag & ~is_zero));
}

/* A signed 4-bit integer (two's complement nibble, low 4 bits of n) as fp32. */
COLL__QUANT_FN float coll__quant_i4_to_f32(uint32_t n)
{
    return (float)((int32_t)((n & 15u) ^ 8u) - 8);
}

/* ---- 5 stochastic narrowing ------------------------------------------------------------- */

/*
 * coll__quant_sr_<tag>(x, r24): x rounded stochastically to fp16, bf16, E4M3 or E5M2.
 *
 * The two paths of elem.h's coll__narrow_mag, with chance in place of the half-ulp:
 *   normal in the target: rebias, add `drop` random bits (drop = 23 - mantissa bits), and
 *     truncate; the kept code carries with probability rem / 2^drop, rem being the dropped
 *     bits, which is exactly (|x| - lo) / (hi - lo), and a carry into the exponent is right;
 *   subnormal (or zero): count |x| in units of the smallest subnormal (exact scaling), and
 *     add 1 to the integer part when u < the fraction.
 * bf16 has fp32's exponent range, so the first path alone covers its subnormals too.
 * Where the result would pass the largest finite code, and for Inf and NaN, we return
 * elem.h's round-to-nearest result (+-Inf for fp16/bf16/E5M2 at or above max + half an
 * ulp, NaN for E4M3, the canonical NaN for NaN): overflow behaves exactly as in the rest of
 * coll, and values just above max finite never round up into Inf.
 * Paths are blended with masks rather than selected: GCC turns selects between computed
 * values into branches and sinks each side's int/float conversions into its branch, where
 * (as they may trap) they stop the loop vectorizing.
 */
#define COLL__QUANT_SR_NARROW(tag, T, MBITS, BIAS, MAXFIN)                                         \
    COLL__QUANT_FN T coll__quant_sr_##tag(float x, uint32_t r24)                                   \
    {                                                                                              \
        const int drop = 23 - (MBITS);                                                             \
        const int32_t min_normal = (int32_t)(128 - (BIAS)) << 23;                                  \
        const uint32_t xb = coll__f32_bits(x);                                                     \
        const int32_t ax = (int32_t)(xb & 0x7fffffffu);                                            \
        const uint32_t is_sub = 0u - (uint32_t)(ax < min_normal);                                  \
        uint32_t normal, sub, sr, keep;                                                            \
        int32_t q;                                                                                 \
        float y;                                                                                   \
                                                                                                   \
        normal = (uint32_t)((ax - ((int32_t)(127 - (BIAS)) << 23) +                                \
                             (int32_t)(r24 & ((1u << drop) - 1))) >>                               \
                            drop);                                                                 \
        y = coll__bits_f32((uint32_t)(ax < min_normal ? ax : min_normal)) *                        \
            coll__bits_f32((uint32_t)(127 + (BIAS) + (MBITS)-1) << 23);                            \
        q = (int32_t)y;                                                                            \
        sub = (uint32_t)q + (coll__quant_unit(r24) < y - (float)q ? 1u : 0u);                      \
        sr = (sub & is_sub) | (normal & ~is_sub);                                                  \
        keep = 0u - (uint32_t)(sr > (MAXFIN) || ax > 0x7f800000);                                  \
        sr |= (xb >> (32 - 8 * sizeof(T))) & (1u << (8 * sizeof(T) - 1));                          \
        return (T)(((uint32_t)coll__f32_to_##tag(x) & keep) | (sr & ~keep));                       \
    }

COLL__QUANT_SR_NARROW(f16, uint16_t, 10, 15, 0x7bff)
COLL__QUANT_SR_NARROW(e4m3, uint8_t, 3, 7, 0x7e)
COLL__QUANT_SR_NARROW(e5m2, uint8_t, 2, 15, 0x7b)

COLL__QUANT_FN uint16_t coll__quant_sr_bf16(float x, uint32_t r24)
{
    const uint32_t xb = coll__f32_bits(x), ax = xb & 0x7fffffffu;
    const uint32_t mag = (ax + (r24 & 0xffffu)) >> 16;

    return mag > 0x7f7fu || ax > 0x7f800000u ? coll__f32_to_bf16(x)
                                             : (uint16_t)(mag | ((xb >> 16) & 0x8000u));
}

/* ---- 6 block scales --------------------------------------------------------------------- */

/*
 * What a block header stores is the block's magnitude m (absmax, or the mean |x| of the
 * 1-bit codec), and the step is m / qmax, computed the same way by encoder and decoder.
 * fp32 headers hold m exactly. fp16 headers hold m rounded toward zero, so that the grid
 * never reaches past amax and int8/int4 keep their half-step error bound (the elements
 * above the rounded m clamp, by at most 2^-11 of m); an m that fp16 cannot hold within an
 * ulp (>= 65536), and a non-finite one, become NaN: the whole block then decodes as NaN.
 * With keep_nonzero, a nonzero m below fp16's smallest subnormal becomes that subnormal
 * (2^-24) rather than zero: right for a grid, which then still covers the block's values
 * (coarsely); wrong for SIGN1's mean, which is itself the decoded value, so it flushes.
 */
COLL__QUANT_FN uint16_t coll__quant_scale_to_f16(float m, int keep_nonzero)
{
    uint16_t h = coll__f32_to_f16(m);

    h = (uint16_t)(coll__f16_to_f32(h) > m ? h - 1 : h); /* toward zero (m >= 0) */
    h = (uint16_t)(h == 0 && m > 0.0f && keep_nonzero ? 1 : h);
    return (uint16_t)(m < 65536.0f ? h : 0x7fffu); /* NaN compares false too */
}

#endif /* COLL_REDUCE_QUANT_ELEM_H */
