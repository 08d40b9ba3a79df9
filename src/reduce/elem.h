/*
 * elem.h - the per-element math of reductions: conversions between fp32 and the narrow
 * float formats, and the ops. The host loops (reduce.c) and the CUDA kernels (src/cuda/)
 * include this same header, so both sides round the same way, bit for bit.
 *
 * Plain C11 that nvcc also compiles as C++: no libc calls, no tables, no hex float
 * literals. Every function is COLL_HD static inline.
 *
 * Divisions: 1 bit casts, 2 narrowing fp32 -> narrow, 3 widening narrow -> fp32,
 * 4 ops on native types, 5 ops on narrow floats, 6 division (the end of AVG).
 *
 * Formats (sign.exponent.mantissa, bias):
 *   fp16  IEEE binary16   1.5.10, 15  Inf and NaN; max finite 65504
 *   bf16  bfloat16        1.8.7, 127  Inf and NaN (fp32 with the low 16 bits dropped)
 *   E4M3  OCP fp8         1.4.3, 7    no Inf; NaN = S.1111.111 only; max finite 448
 *   E5M2  OCP fp8         1.5.2, 15   IEEE-like: Inf and NaN; max finite 57344
 *
 * Narrowing rounds to nearest, ties to even, with subnormals kept (never flushed) in both
 * directions. Out of range, we follow CUDA's __nv_cvt_float_to_fp8(x, __NV_NOSAT, ...)
 * (and the IEEE rule for fp16/bf16), so host and device results agree:
 *   - fp16, bf16, E5M2: a magnitude that rounds above max finite becomes +-Inf (E5M2: at
 *     or above 61440 = max + half an ulp, the tie rounding to the even code, Inf).
 *   - E4M3 has no Inf: a magnitude above 464 (max + half an ulp) becomes NaN with the sign
 *     kept (0x7f / 0xff); exactly 464 is a tie that rounds to the even code, 448. Inf
 *     becomes NaN too. This is the "non-saturating" conversion; saturation to +-448 would
 *     hide overflow in a reduction.
 *   - A NaN input becomes the canonical NaN of the format, positive: fp16 0x7fff, bf16
 *     0x7fff, fp8 0x7f (what the CUDA conversions produce). Results therefore do not depend
 *     on NaN payloads, and a signalling bf16-sized payload cannot turn into Inf by rounding.
 */
#ifndef COLL_REDUCE_ELEM_H
#define COLL_REDUCE_ELEM_H

#include <stdint.h>

#ifdef __CUDACC__
#define COLL_HD __host__ __device__
#else
#define COLL_HD
#endif

/* ---- 1 bit casts --------------------------------------------------------------------- */

/* __builtin_memcpy, not memcpy: no libc in here (it compiles to a register move), and it
 * is valid in C and in C++ (nvcc's host pass), where reading another union member is not. */
COLL_HD static inline uint32_t coll__f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    __builtin_memcpy(&u, &f, sizeof(u));
    return u;
#endif
}

COLL_HD static inline float coll__bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    __builtin_memcpy(&f, &u, sizeof(f));
    return f;
#endif
}

/* ---- 2 narrowing: fp32 -> fp16, bf16, E4M3, E5M2 ------------------------------------- */

/*
 * Round |x| (ax: fp32 bits without the sign) to a float format with mbits mantissa bits,
 * exponent bias `bias` and a narrower exponent range than fp32 (fp16, fp8). Returns the
 * magnitude code (exponent and mantissa fields); a code above the format's largest finite
 * one means overflow (NaN and Inf inputs land there too), which the caller resolves.
 *
 * Both paths are computed and one is selected, with no branch and no variable shift, so
 * that loops over this function vectorize (even on plain SSE2, hence signed 32-bit compares:
 * magnitudes are below 2^31). Every float operation here is exact, so the result does not
 * depend on the FPU rounding mode.
 */
COLL_HD static inline int32_t coll__narrow_mag(int32_t ax, int mbits, int bias)
{
    const int drop = 23 - mbits;                            /* fp32 mantissa bits that go */
    const int32_t min_normal = (int32_t)(128 - bias) << 23; /* fp32 bits of 2^(1 - bias) */
    int32_t normal, sub, q, r;
    float y, frac;

    /* Normal in the target (or overflowing): rebias the exponent in place, then add just
     * under half an ulp plus the kept lsb, so a tie rounds up only from an odd code. A carry
     * out of the mantissa bumps the exponent, which is the right answer. (Lanes below the
     * normal range compute garbage here, arithmetic shift and all; they take sub.) */
    r = ax - ((int32_t)(127 - bias) << 23);
    normal = (r + ((1 << (drop - 1)) - 1) + ((r >> drop) & 1)) >> drop;

    /* Subnormal in the target, or zero: count |x| in units of the smallest subnormal
     * 2^(1 - bias - mbits). The scaling by a power of two is exact (y <= 2^mbits: clamping
     * the input keeps the other lanes in range), truncation is exact, and y - q is exact. */
    y = coll__bits_f32((uint32_t)(ax < min_normal ? ax : min_normal)) *
        coll__bits_f32((uint32_t)(127 + bias + mbits - 1) << 23);
    q = (int32_t)y;
    frac = y - (float)q;
    /* Selects, not || and &&: short-circuits become branches, which stop vectorizing.
     * q + 1 == 1 << mbits (a carry into the exponent) is the smallest normal: right again. */
    sub = q + (frac > 0.5f ? 1 : 0) + (frac == 0.5f ? (q & 1) : 0);

    return ax < min_normal ? sub : normal;
}

COLL_HD static inline uint16_t coll__f32_to_f16(float f)
{
    uint32_t x = coll__f32_bits(f);
    int32_t ax = (int32_t)(x & 0x7fffffffu), mag = coll__narrow_mag(ax, 10, 15);

    mag = mag > 0x7c00 ? 0x7c00 : mag; /* overflow: Inf (0x7c00 itself is Inf) */
    return (uint16_t)(ax > 0x7f800000 ? 0x7fff : (int32_t)((x >> 16) & 0x8000u) | mag);
}

COLL_HD static inline uint16_t coll__f32_to_bf16(float f)
{
    uint32_t x = coll__f32_bits(f);

    /* Same exponent range as fp32, so rounding the low 16 bits is all there is: subnormals
     * round within themselves and the largest finite values carry into Inf. The sum never
     * carries into the sign: |x| plus the rounding stays below 2^31. */
    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? 0x7fffu
                                                      : (x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

COLL_HD static inline uint8_t coll__f32_to_e4m3(float f)
{
    uint32_t x = coll__f32_bits(f);
    int32_t ax = (int32_t)(x & 0x7fffffffu), mag = coll__narrow_mag(ax, 3, 7);

    mag = mag > 0x7e ? 0x7f : mag; /* past 448 after rounding (and Inf): NaN, sign kept */
    return (uint8_t)(ax > 0x7f800000 ? 0x7f : (int32_t)((x >> 24) & 0x80u) | mag);
}

COLL_HD static inline uint8_t coll__f32_to_e5m2(float f)
{
    uint32_t x = coll__f32_bits(f);
    int32_t ax = (int32_t)(x & 0x7fffffffu), mag = coll__narrow_mag(ax, 2, 15);

    mag = mag > 0x7c ? 0x7c : mag; /* overflow: Inf (0x7c itself is Inf) */
    return (uint8_t)(ax > 0x7f800000 ? 0x7f : (int32_t)((x >> 24) & 0x80u) | mag);
}

/* ---- 3 widening: fp16, bf16, E4M3, E5M2 -> fp32 (always exact) ----------------------- */

/* Selects rather than branches here too, for vectorized loops. */
COLL_HD static inline float coll__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t normal = (((uint32_t)h & 0x7fffu) << 13) + (112u << 23); /* rebias 15 -> 127 */
    uint32_t special = 0x7f800000u | (m << 13); /* Inf, or NaN with its payload */
    uint32_t sub = coll__f32_bits((float)(int32_t)m * 5.9604644775390625e-8f); /* m * 2^-24 */

    /* sub is blended in with a mask, not selected: a select lets GCC move the int-to-float
     * conversion into a branch, where (as it may trap) it stops the loop vectorizing */
    uint32_t is_sub = 0u - (uint32_t)(e == 0);

    return coll__bits_f32(sign | (sub & is_sub) | ((e == 0x1fu ? special : normal) & ~is_sub));
}

COLL_HD static inline float coll__bf16_to_f32(uint16_t h)
{
    return coll__bits_f32((uint32_t)h << 16);
}

COLL_HD static inline float coll__e4m3_to_f32(uint8_t v)
{
    uint32_t sign = (uint32_t)(v & 0x80u) << 24;
    uint32_t e = (v >> 3) & 0xfu, m = v & 0x7u;
    uint32_t normal = (((uint32_t)v & 0x7fu) << 20) + (120u << 23);  /* rebias 7 -> 127 */
    uint32_t sub = coll__f32_bits((float)(int32_t)m * 0.001953125f); /* m * 2^-9 */

    uint32_t is_sub = 0u - (uint32_t)(e == 0); /* a mask, as in coll__f16_to_f32 */

    return coll__bits_f32(sign | (sub & is_sub) |
                          (((v & 0x7fu) == 0x7fu ? 0x7fc00000u : normal) & ~is_sub));
}

COLL_HD static inline float coll__e5m2_to_f32(uint8_t v)
{
    /* E5M2 is the upper byte of an fp16 */
    return coll__f16_to_f32((uint16_t)(v << 8));
}

/* ---- 4 ops on native types ------------------------------------------------------------ */

/*
 * Integer sum and prod are defined on the unsigned types only: wrapping modulo 2^bits is
 * what we want, signed overflow would be undefined, and the low bits of a two's complement
 * sum or product do not depend on signedness, so int8/int32/int64 reduce with the u8/u32/
 * u64 functions on the same bits. (u8 * u8 promotes to int, and 255 * 255 fits.)
 */
#define COLL__INT_OPS(tag, T)                                                                      \
    COLL_HD static inline T coll__max_##tag(T a, T b)                                              \
    {                                                                                              \
        return a > b ? a : b;                                                                      \
    }                                                                                              \
    COLL_HD static inline T coll__min_##tag(T a, T b)                                              \
    {                                                                                              \
        return a < b ? a : b;                                                                      \
    }
#define COLL__UINT_OPS(tag, T)                                                                     \
    COLL__INT_OPS(tag, T)                                                                          \
    COLL_HD static inline T coll__sum_##tag(T a, T b)                                              \
    {                                                                                              \
        return (T)(a + b);                                                                         \
    }                                                                                              \
    COLL_HD static inline T coll__prod_##tag(T a, T b)                                             \
    {                                                                                              \
        return (T)(a * b);                                                                         \
    }

COLL__INT_OPS(i8, int8_t)
COLL__INT_OPS(i32, int32_t)
COLL__INT_OPS(i64, int64_t)
COLL__UINT_OPS(u8, uint8_t)
COLL__UINT_OPS(u32, uint32_t)
COLL__UINT_OPS(u64, uint64_t)

/*
 * Float max and min: a NaN operand makes the result NaN (a bad value must not vanish in a
 * reduction), and -0 orders below +0. With both rules the result never depends on operand
 * order (apart from which NaN), so ranks that combine in different orders agree. Written as
 * one select so that loops over them vectorize; the sign of zero is read with copysign, a
 * float operation, because a 64-bit integer sign test does not vectorize on plain SSE2.
 */
#ifdef __CUDA_ARCH__
#define COLL__COPYSIGNF(x, y) copysignf((x), (y))
#define COLL__COPYSIGN(x, y) copysign((x), (y))
#else
#define COLL__COPYSIGNF(x, y) __builtin_copysignf((x), (y))
#define COLL__COPYSIGN(x, y) __builtin_copysign((x), (y))
#endif

COLL_HD static inline float coll__sum_f32(float a, float b)
{
    return a + b;
}
COLL_HD static inline float coll__prod_f32(float a, float b)
{
    return a * b;
}
COLL_HD static inline float coll__max_f32(float a, float b)
{
    return (a > b || a != a || (a == b && COLL__COPYSIGNF(1.0f, a) > 0.0f)) ? a : b;
}
COLL_HD static inline float coll__min_f32(float a, float b)
{
    return (a < b || a != a || (a == b && COLL__COPYSIGNF(1.0f, a) < 0.0f)) ? a : b;
}

COLL_HD static inline double coll__sum_f64(double a, double b)
{
    return a + b;
}
COLL_HD static inline double coll__prod_f64(double a, double b)
{
    return a * b;
}
COLL_HD static inline double coll__max_f64(double a, double b)
{
    return (a > b || a != a || (a == b && COLL__COPYSIGN(1.0, a) > 0.0)) ? a : b;
}
COLL_HD static inline double coll__min_f64(double a, double b)
{
    return (a < b || a != a || (a == b && COLL__COPYSIGN(1.0, a) < 0.0)) ? a : b;
}

/* ---- 5 ops on narrow floats: widen, op in fp32, round once ---------------------------- */

#define COLL__NARROW_OPS(tag, T)                                                                   \
    COLL_HD static inline T coll__sum_##tag(T a, T b)                                              \
    {                                                                                              \
        return coll__f32_to_##tag(coll__##tag##_to_f32(a) + coll__##tag##_to_f32(b));              \
    }                                                                                              \
    COLL_HD static inline T coll__prod_##tag(T a, T b)                                             \
    {                                                                                              \
        return coll__f32_to_##tag(coll__##tag##_to_f32(a) * coll__##tag##_to_f32(b));              \
    }                                                                                              \
    COLL_HD static inline T coll__max_##tag(T a, T b)                                              \
    {                                                                                              \
        return coll__f32_to_##tag(                                                                 \
            coll__max_f32(coll__##tag##_to_f32(a), coll__##tag##_to_f32(b)));                      \
    }                                                                                              \
    COLL_HD static inline T coll__min_##tag(T a, T b)                                              \
    {                                                                                              \
        return coll__f32_to_##tag(                                                                 \
            coll__min_f32(coll__##tag##_to_f32(a), coll__##tag##_to_f32(b)));                      \
    }                                                                                              \
    COLL_HD static inline T coll__div_##tag(T a, float n)                                          \
    {                                                                                              \
        return coll__f32_to_##tag(coll__##tag##_to_f32(a) / n);                                    \
    }

COLL__NARROW_OPS(f16, uint16_t)
COLL__NARROW_OPS(bf16, uint16_t)
COLL__NARROW_OPS(e4m3, uint8_t)
COLL__NARROW_OPS(e5m2, uint8_t)

/* ---- 6 division, the end of AVG ------------------------------------------------------- */

/*
 * dst = coll__div_<tag>(sum, n) ends AVG wherever it runs: the host's coll__reduce_div
 * (reduce.c) and the avg reduce-copy kernels (src/cuda/), which apply it to the sum they
 * rounded to the dtype, so that both divide the same value the same way. n (the group
 * size) is converted once to coll__divisor_<tag> by the caller's loop, not per element:
 * integers keep it in 64 bits (it may exceed the dtype's range), floats take it in their
 * own precision (narrow floats: fp32, the precision they divide in).
 */
typedef uint64_t coll__divisor_i8;
typedef uint64_t coll__divisor_u8;
typedef uint64_t coll__divisor_i32;
typedef uint64_t coll__divisor_u32;
typedef uint64_t coll__divisor_i64;
typedef uint64_t coll__divisor_u64;
typedef float coll__divisor_f16;
typedef float coll__divisor_bf16;
typedef float coll__divisor_e4m3;
typedef float coll__divisor_e5m2;
typedef float coll__divisor_f32;
typedef double coll__divisor_f64;

/* Floats divide in their own precision (narrow floats above: through fp32, rounded once). */
COLL_HD static inline float coll__div_f32(float a, float n)
{
    return a / n;
}
COLL_HD static inline double coll__div_f64(double a, double n)
{
    return a / n;
}

/*
 * Integers truncate toward zero (C division). n >= 1 (the group size) arrives as uint64_t
 * and may exceed the dtype's range, so signed values divide in 64 bits; only n >= 2^63 is
 * out of int64_t's range, and then |a| <= 2^63 <= n leaves -1 (a = INT64_MIN, n = 2^63) or 0.
 */
COLL_HD static inline int64_t coll__div_i64(int64_t a, uint64_t n)
{
    if (n <= (uint64_t)INT64_MAX)
        return a / (int64_t)n;
    return (a == INT64_MIN && n == (uint64_t)1 << 63) ? -1 : 0;
}
/* The narrower signed types divide in 32 bits whenever n allows, which gives the same
 * quotient: a GPU has no integer divider, and its 32-bit division is a far shorter
 * instruction sequence than the 64-bit one. |quotient| <= |a|: it fits. */
COLL_HD static inline int8_t coll__div_i8(int8_t a, uint64_t n)
{
    return (int8_t)(n <= (uint64_t)INT32_MAX ? a / (int32_t)n : coll__div_i64(a, n));
}
COLL_HD static inline int32_t coll__div_i32(int32_t a, uint64_t n)
{
    return (int32_t)(n <= (uint64_t)INT32_MAX ? a / (int32_t)n : coll__div_i64(a, n));
}
COLL_HD static inline uint8_t coll__div_u8(uint8_t a, uint64_t n)
{
    return (uint8_t)(a / n);
}
COLL_HD static inline uint32_t coll__div_u32(uint32_t a, uint64_t n)
{
    return (uint32_t)(a / n);
}
COLL_HD static inline uint64_t coll__div_u64(uint64_t a, uint64_t n)
{
    return a / n;
}

#endif /* COLL_REDUCE_ELEM_H */
