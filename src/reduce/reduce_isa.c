/*
 * reduce_isa.c - the kernel sets: reduce_kern.h compiled five times, for the scalar
 * reference (vectorizer off), SSE2 (the x86-64 baseline), AVX2, AVX-512 and AVX-512 VBMI,
 * each through function target attributes so that one binary carries them all and reduce.c
 * picks one when it first runs (__builtin_cpu_supports).
 *
 * Hand-written on top of the generic loops:
 *   - fp16 on AVX2 and AVX-512 with the F16C conversions (vcvtph2ps/vcvtps2ph): elem.h's
 *     bit-exact software conversion costs about 20 instructions per element, far from
 *     memory speed. The hardware rounds to nearest even exactly as elem.h does; only NaN
 *     differs (it keeps payloads), so NaN results are replaced by the canonical 0x7fff;
 *   - fp8 with two inputs by table lookup: 65536 input pairs per format and op, so a
 *     64 KiB table filled from elem.h's own functions gives the reference's bits by
 *     construction, at a few instructions per element instead of two software widenings
 *     and a software rounding (SSE2, where nothing better is left);
 *   - fp8 converted in vector registers on AVX2 (which the AVX-512 set borrows) and on
 *     AVX-512 VBMI: sections 4 and 6;
 *   - the streaming copies (non-temporal stores) that reduce.c uses for large outputs.
 *
 * Divisions: 1 vectorizer switches, 2 fp8 tables, 3 scalar and SSE2 sets, 4 AVX2 set,
 * 5 AVX-512 set, 6 AVX-512 VBMI set (fp8 converted in vector registers), 7 the list.
 */
#include "reduce_isa.h"

#include "elem.h"

#include <pthread.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define KERN_X86 1
#else
#define KERN_X86 0
#endif

/* ---- 1 vectorizer switches ------------------------------------------------------------- */

/*
 * GCC at -O2 vectorizes with the "very cheap" cost model, which refuses any loop that needs
 * a runtime alias check: ours all do (dst may equal a or b). Ask for the dynamic cost model
 * on these functions (O3's choice); the scalar reference asks for no vectorizing at all.
 * clang has no per-function optimize attribute: it vectorizes at -O2 already, and a loop
 * pragma keeps the reference scalar.
 */
#if defined(__GNUC__) && !defined(__clang__)
#define KERN_VEC __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#define KERN_NOVEC __attribute__((optimize("no-tree-vectorize")))
#define KERN_NOVEC_LOOP
#define KERN_512 ",prefer-vector-width=512"
#else
#define KERN_VEC
#define KERN_NOVEC
#define KERN_NOVEC_LOOP _Pragma("clang loop vectorize(disable) interleave(disable)")
#define KERN_512 ""
#endif

/* S four times, with K_ = 0..3: GCC keeps a 4-iteration loop over an array of vectors as a
 * loop through the stack */
#define EACH_K(k, S)                                                                               \
    do {                                                                                           \
        enum { K_ = k };                                                                           \
        S;                                                                                         \
    } while (0)
#define EACH4(S)                                                                                   \
    do {                                                                                           \
        EACH_K(0, S);                                                                              \
        EACH_K(1, S);                                                                              \
        EACH_K(2, S);                                                                              \
        EACH_K(3, S);                                                                              \
    } while (0)

/* the hand-written vector helpers below: called per block, they must not stay calls */
#define KERN_INLINE static inline __attribute__((always_inline))

/* ---- 2 fp8 tables ---------------------------------------------------------------------- */

/* [format][op]: e4m3, e5m2 x sum, prod, max, min; index (a << 8) | b */
#define FP8_TAB_BYTES 65536
static uint8_t fp8_tabs[2][4][FP8_TAB_BYTES];
static pthread_once_t fp8_once[2][4] = {
    {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT},
    {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT},
};

/* Tables hold the results under the default rounding mode (an E5M2 sum can be inexact in
 * fp32); reduce.c sends fp8 to the scalar set under another mode. */
#define FP8_BUILD(f, o, tag, op)                                                                   \
    static void fp8_build_##tag##_##op(void)                                                       \
    {                                                                                              \
        for (uint32_t x = 0; x < 65536; x++)                                                       \
            fp8_tabs[f][o][x] = coll__##op##_##tag((uint8_t)(x >> 8), (uint8_t)x);                 \
    }
FP8_BUILD(0, 0, e4m3, sum)
FP8_BUILD(0, 1, e4m3, prod)
FP8_BUILD(0, 2, e4m3, max)
FP8_BUILD(0, 3, e4m3, min)
FP8_BUILD(1, 0, e5m2, sum)
FP8_BUILD(1, 1, e5m2, prod)
FP8_BUILD(1, 2, e5m2, max)
FP8_BUILD(1, 3, e5m2, min)

static void (*const fp8_builders[2][4])(void) = {
    {fp8_build_e4m3_sum, fp8_build_e4m3_prod, fp8_build_e4m3_max, fp8_build_e4m3_min},
    {fp8_build_e5m2_sum, fp8_build_e5m2_prod, fp8_build_e5m2_max, fp8_build_e5m2_min},
};

/* The "op" of the widening loops, which share the accumulate loops' code: the accumulator's
 * old value is not read. */
static inline float coll__set_f32(float acc, float x)
{
    (void)acc;
    return x;
}

/* Built on first use: 64 KiB each, and most programs never reduce fp8. */
static const uint8_t *fp8_table(int f, int o)
{
    pthread_once(&fp8_once[f][o], fp8_builders[f][o]);
    return fp8_tabs[f][o];
}

static void fp8_lookup(const uint8_t *t, void *dst_, const void *a_, const void *b_, size_t n)
{
    uint8_t *dst = dst_;
    const uint8_t *a = a_, *b = b_;

    for (size_t i = 0; i < n; i++)
        dst[i] = t[(size_t)a[i] << 8 | b[i]];
}

/* fp8t_<tag>_<op>_<sfx>: the lookup loop over the (tag, op) table */
#define FP8T_FN(sfx, f, o, tag, op)                                                                \
    static void fp8t_##tag##_##op##_##sfx(void *dst, const void *a, const void *b, size_t n)       \
    {                                                                                              \
        fp8_lookup(fp8_table(f, o), dst, a, b, n);                                                 \
    }
#define FP8T_FNS(sfx)                                                                              \
    FP8T_FN(sfx, 0, 0, e4m3, sum)                                                                  \
    FP8T_FN(sfx, 0, 1, e4m3, prod)                                                                 \
    FP8T_FN(sfx, 0, 2, e4m3, max)                                                                  \
    FP8T_FN(sfx, 0, 3, e4m3, min)                                                                  \
    FP8T_FN(sfx, 1, 0, e5m2, sum)                                                                  \
    FP8T_FN(sfx, 1, 1, e5m2, prod)                                                                 \
    FP8T_FN(sfx, 1, 2, e5m2, max)                                                                  \
    FP8T_FN(sfx, 1, 3, e5m2, min)

/* ---- 3 scalar and SSE2 sets ------------------------------------------------------------ */

static bool isa_always(void)
{
    return true;
}

#define KERN_SFX scalar
#define KERN_ATTR KERN_NOVEC
#define KERN_LOOP KERN_NOVEC_LOOP
#define KERN_NAME "scalar"
#define KERN_SUPPORTED isa_always
#define KERN_STREAM NULL
#define KERN_F16 0
#define KERN_FP8 0
#include "reduce_kern.h"
#undef KERN_SFX
#undef KERN_SFX_NAME
#undef KERN_ATTR
#undef KERN_LOOP
#undef KERN_NAME
#undef KERN_SUPPORTED
#undef KERN_STREAM
#undef KERN_F16
#undef KERN_FP8

#if KERN_X86
static void stream_sse2(void *dst, const void *src, size_t bytes)
{
    __m128i *d = dst;
    const __m128i *s = src;

    for (size_t i = 0; i < bytes / 16; i += 4) {
        _mm_stream_si128(d + i, _mm_loadu_si128(s + i));
        _mm_stream_si128(d + i + 1, _mm_loadu_si128(s + i + 1));
        _mm_stream_si128(d + i + 2, _mm_loadu_si128(s + i + 2));
        _mm_stream_si128(d + i + 3, _mm_loadu_si128(s + i + 3));
    }
}
#define KERN_SFX sse2
#define KERN_SFX_NAME sse2
#define KERN_NAME "sse2"
#define KERN_STREAM stream_sse2
#else
/* Elsewhere the baseline vector set has no name of an x86 ISA and does not stream. */
#define KERN_SFX generic
#define KERN_SFX_NAME generic
#define KERN_NAME "generic"
#define KERN_STREAM NULL
#endif
#define KERN_ATTR KERN_VEC
#define KERN_LOOP
#define KERN_SUPPORTED isa_always
#define KERN_F16 0
#define KERN_FP8 1
FP8T_FNS(KERN_SFX_NAME)
#include "reduce_kern.h"
#undef KERN_SFX
#undef KERN_SFX_NAME
#undef KERN_ATTR
#undef KERN_LOOP
#undef KERN_NAME
#undef KERN_SUPPORTED
#undef KERN_STREAM
#undef KERN_F16
#undef KERN_FP8

#if KERN_X86

/* ---- 4 AVX2 set ------------------------------------------------------------------------ */

#define AVX2_ATTR __attribute__((target("avx2,f16c")))

static bool isa_avx2(void)
{
    unsigned eax, ebx, ecx, edx;

    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__get_cpuid(1, &eax, &ebx, &ecx, &edx))
        return false;
    return (ecx & bit_F16C) != 0;
}

static void AVX2_ATTR stream_avx2(void *dst, const void *src, size_t bytes)
{
    __m256i *d = dst;
    const __m256i *s = src;

    for (size_t i = 0; i < bytes / 32; i += 2) {
        _mm256_stream_si256(d + i, _mm256_loadu_si256(s + i));
        _mm256_stream_si256(d + i + 1, _mm256_loadu_si256(s + i + 1));
    }
}

/* 8 fp16 -> 8 fp32, exact */
static inline AVX2_ATTR __m256 h8_load(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* Any fp16 NaN (exponent all ones, mantissa not zero) becomes the canonical 0x7fff. */
static inline AVX2_ATTR __m128i h8_canon(__m128i h)
{
    const __m128i abs = _mm_set1_epi16(0x7fff);
    __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, abs), _mm_set1_epi16(0x7c00));

    return _mm_or_si128(_mm_andnot_si128(nan, h), _mm_and_si128(nan, abs));
}

/* 8 fp32 -> 8 fp16, round to nearest even */
static inline AVX2_ATTR void h8_store(uint16_t *p, __m256 x)
{
    __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);

    _mm_storeu_si128((__m128i *)(void *)p, h8_canon(h));
}

/* the widening's "op" (section 2) */
static inline AVX2_ATTR __m256 v8_set(__m256 acc, __m256 x)
{
    (void)acc;
    return x;
}
static inline AVX2_ATTR __m256 v8_sum(__m256 a, __m256 b)
{
    return _mm256_add_ps(a, b);
}
static inline AVX2_ATTR __m256 v8_prod(__m256 a, __m256 b)
{
    return _mm256_mul_ps(a, b);
}
/* coll__max_f32, lane-wise: a when a > b, a is NaN, or a == b and a is not -0 */
static inline AVX2_ATTR __m256 v8_max(__m256 a, __m256 b)
{
    __m256 pos =
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_castps_si256(a), _mm256_set1_epi32(-1)));
    __m256 m = _mm256_or_ps(
        _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_GT_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q)),
        _mm256_and_ps(_mm256_cmp_ps(a, b, _CMP_EQ_OQ), pos));
    return _mm256_blendv_ps(b, a, m);
}
/* coll__min_f32, lane-wise: a when a < b, a is NaN, or a == b and a is -0 */
static inline AVX2_ATTR __m256 v8_min(__m256 a, __m256 b)
{
    __m256 neg =
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_setzero_si256(), _mm256_castps_si256(a)));
    __m256 m = _mm256_or_ps(
        _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_LT_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q)),
        _mm256_and_ps(_mm256_cmp_ps(a, b, _CMP_EQ_OQ), neg));
    return _mm256_blendv_ps(b, a, m);
}

/*
 * The hardware fp16 loops of one vector width W: VLOAD/VSTORE convert W elements, V_<op>
 * combine two vectors; the tail goes through elem.h one element at a time (same bits: the
 * conversions agree except on NaN, which both sides make canonical).
 */
#define F16H_LOOPS(sfx, ATTR, W, VT, VLOAD, VSTORE, VOPS)                                          \
    F16H_OP(sfx, ATTR, W, VLOAD, VSTORE, sum, VOPS##_sum)                                          \
    F16H_OP(sfx, ATTR, W, VLOAD, VSTORE, prod, VOPS##_prod)                                        \
    F16H_OP(sfx, ATTR, W, VLOAD, VSTORE, max, VOPS##_max)                                          \
    F16H_OP(sfx, ATTR, W, VLOAD, VSTORE, min, VOPS##_min)                                          \
    F16H_ACC(sfx, ATTR, W, VT, VLOAD, sum, VOPS##_sum)                                             \
    F16H_ACC(sfx, ATTR, W, VT, VLOAD, prod, VOPS##_prod)                                           \
    F16H_ACC(sfx, ATTR, W, VT, VLOAD, max, VOPS##_max)                                             \
    F16H_ACC(sfx, ATTR, W, VT, VLOAD, min, VOPS##_min)                                             \
    static ATTR void f16h_widen_##sfx(float *acc, const void *a_, size_t count)                    \
    {                                                                                              \
        const uint16_t *a = a_;                                                                    \
        size_t i = 0;                                                                              \
        for (; i + W <= count; i += W)                                                             \
            VT##_STOREF(acc + i, VLOAD(a + i));                                                    \
        for (; i < count; i++)                                                                     \
            acc[i] = coll__f16_to_f32(a[i]);                                                       \
    }                                                                                              \
    static ATTR void f16h_narrow_##sfx(void *dst_, const float *acc, size_t count)                 \
    {                                                                                              \
        uint16_t *dst = dst_;                                                                      \
        size_t i = 0;                                                                              \
        for (; i + W <= count; i += W)                                                             \
            VSTORE(dst + i, VT##_LOADF(acc + i));                                                  \
        for (; i < count; i++)                                                                     \
            dst[i] = coll__f32_to_f16(acc[i]);                                                     \
    }

#define F16H_OP(sfx, ATTR, W, VLOAD, VSTORE, op, VOP)                                              \
    static ATTR void f16h_##op##_##sfx(void *dst_, const void *a_, const void *b_, size_t count)   \
    {                                                                                              \
        uint16_t *dst = dst_;                                                                      \
        const uint16_t *a = a_, *b = b_;                                                           \
        size_t i = 0;                                                                              \
        for (; i + 2 * W <= count; i += 2 * W) {                                                   \
            VSTORE(dst + i, VOP(VLOAD(a + i), VLOAD(b + i)));                                      \
            VSTORE(dst + i + W, VOP(VLOAD(a + i + W), VLOAD(b + i + W)));                          \
        }                                                                                          \
        for (; i + W <= count; i += W)                                                             \
            VSTORE(dst + i, VOP(VLOAD(a + i), VLOAD(b + i)));                                      \
        for (; i < count; i++)                                                                     \
            dst[i] = coll__##op##_f16(a[i], b[i]);                                                 \
    }

#define F16H_ACC(sfx, ATTR, W, VT, VLOAD, op, VOP)                                                 \
    static ATTR void f16h_acc_##op##_##sfx(float *acc, const void *a_, size_t count)               \
    {                                                                                              \
        const uint16_t *a = a_;                                                                    \
        size_t i = 0;                                                                              \
        for (; i + W <= count; i += W)                                                             \
            VT##_STOREF(acc + i, VOP(VT##_LOADF(acc + i), VLOAD(a + i)));                          \
        for (; i < count; i++)                                                                     \
            acc[i] = coll__##op##_f32(acc[i], coll__f16_to_f32(a[i]));                             \
    }

#define v8_LOADF _mm256_loadu_ps
#define v8_STOREF _mm256_storeu_ps
F16H_LOOPS(avx2, AVX2_ATTR, 8, v8, h8_load, h8_store, v8)

/*
 * fp8 on AVX2: converted in registers, 32 elements at a time, as the AVX-512 VBMI set does
 * (section 6, the same narrowings), with what AVX2 has instead of byte permutes:
 *   - widening through fp16 and F16C: E5M2 is the upper byte of an fp16; an E4M3 code,
 *     shifted into an fp16's exponent and mantissa, is the fp16 of its value times 2^-8
 *     (subnormals included, which vcvtph2ps widens exactly whatever MXCSR says), and a
 *     multiplication by 256 restores it. NaN (and E5M2's Inf) would need fixing up, so a
 *     block of 32 with any such code goes through elem.h instead (rare in gradients);
 *   - narrowing a sum, max or min of two codes through fp16, as section 6 does (E4M3 left
 *     scaled by 2^-8 from the widening, so no multiplication there);
 *   - narrowing a product or an fp32 accumulator by the same add of a per-exponent constant
 *     as section 6, computed rather than looked up: the add rounds as MXCSR says (reduce.c
 *     sends fp8 to the scalar set under another mode than the default); blocks with NaN
 *     inputs go through elem.h.
 * The unpacks leave the elements of a block in the order 0-7, 16-23, 8-15, 24-31, which
 * the packs of the narrowing restore and the fp32 loops store in place.
 */
/* The integer half of the fp16 narrowing, shared by this set and section 6's (which
 * explains it): E4M3's fp16 bits, scaled by 2^-8, are clamped to +-1.875 (480, code 0x7f);
 * then each format adds just under half of the upper byte's unit before keeping that byte
 * (E4M3 0xbf: its code bits sit one bit higher, over a zero bit 7). */
enum {
    F8H_E4M3_MAX = 0x3f80,  /* fp16 bits of +1.875: also the mask of E4M3's code bits */
    F8H_E4M3_NMAX = 0xbf80, /* of -1.875 */
    F8H_E4M3_HALF = 0xbf,
    F8H_E5M2_HALF = 0x7f,
};

/* 0xff in the bytes of v that hold NaN (E5M2: or Inf, whose sums and products may be NaN) */
KERN_INLINE AVX2_ATTR __m256i f8a_special(__m256i v, int e5)
{
    if (e5)
        return _mm256_cmpeq_epi8(_mm256_and_si256(v, _mm256_set1_epi8(0x7c)),
                                 _mm256_set1_epi8(0x7c));
    return _mm256_cmpeq_epi8(_mm256_or_si256(v, _mm256_set1_epi8((char)0x80)),
                             _mm256_set1_epi8(-1));
}

/* 32 codes, none special -> 4 x 8 floats: elements 0-7, 16-23, 8-15, 24-31; E4M3 ones left
 * scaled by 2^-8 where scaled is set (for the fp16 narrowing) */
KERN_INLINE AVX2_ATTR void f8a_widen32(__m256i v, __m256 f[4], int e5, bool scaled)
{
    const __m256i z = _mm256_setzero_si256();
    __m256i w0, w1;

    if (e5) {
        w0 = _mm256_unpacklo_epi8(z, v);
        w1 = _mm256_unpackhi_epi8(z, v);
    } else {
        /* sign-extended words: shifted by 7, the sign lands in bit 15 and bit 14 is cleared */
        const __m256i keep = _mm256_set1_epi16((short)0xbf80);
        __m256i neg = _mm256_cmpgt_epi8(z, v);
        w0 = _mm256_and_si256(_mm256_slli_epi16(_mm256_unpacklo_epi8(v, neg), 7), keep);
        w1 = _mm256_and_si256(_mm256_slli_epi16(_mm256_unpackhi_epi8(v, neg), 7), keep);
    }
    f[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(w0));
    f[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(w0, 1));
    f[2] = _mm256_cvtph_ps(_mm256_castsi256_si128(w1));
    f[3] = _mm256_cvtph_ps(_mm256_extracti128_si256(w1, 1));
    if (!e5 && !scaled)
        EACH4(f[K_] = _mm256_mul_ps(f[K_], _mm256_set1_ps(256.0f)));
}

/* 8 floats, none NaN, rounding to nearest -> 8 codes in dwords */
KERN_INLINE AVX2_ATTR __m256i f8a_narrow8(__m256 x, int e5)
{
    const __m256i xi = _mm256_castps_si256(x);
    const int emin = e5 ? 113 : 121; /* exponent fields of the smallest normals */
    __m256i ax = _mm256_min_epu32(_mm256_and_si256(xi, _mm256_set1_epi32(0x7fffffff)),
                                  _mm256_set1_epi32(e5 ? 0x47800000 : 0x43f00000));
    __m256i e = _mm256_max_epu32(_mm256_and_si256(ax, _mm256_set1_epi32(0x7f800000)),
                                 _mm256_set1_epi32(emin << 23));
    /* 2^(e' + 23 - mbits) with the code of 2^e', (e' - emin) << mbits, in its mantissa */
    __m256i m = e5 ? _mm256_add_epi32(_mm256_add_epi32(e, _mm256_srli_epi32(e, 21)),
                                      _mm256_set1_epi32((21 << 23) - (113 << 2)))
                   : _mm256_add_epi32(_mm256_add_epi32(e, _mm256_srli_epi32(e, 20)),
                                      _mm256_set1_epi32((20 << 23) - (121 << 3)));
    __m256i t = _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(ax), _mm256_castsi256_ps(m)));

    return _mm256_or_si256(_mm256_and_si256(t, _mm256_set1_epi32(0x7f)),
                           _mm256_and_si256(_mm256_srli_epi32(xi, 24), _mm256_set1_epi32(0x80)));
}

/* 4 x 8 floats in the widening's order -> 32 codes in element order */
KERN_INLINE AVX2_ATTR __m256i f8a_narrow32(const __m256 f[4], int e5)
{
    __m256i c02 = _mm256_packus_epi32(f8a_narrow8(f[0], e5), f8a_narrow8(f[2], e5));
    __m256i c13 = _mm256_packus_epi32(f8a_narrow8(f[1], e5), f8a_narrow8(f[3], e5));

    return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(c02, c13),
                                       _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* 4 x 8 exact results of a sum, max or min of two codes, none NaN (E4M3 ones scaled by
 * 2^-8), in the widening's order -> 32 codes in element order, through fp16 as the AVX-512
 * VBMI set does (section 6). The special blocks have gone through elem.h, so there is no
 * NaN; a finite E5M2 sum may overflow, to Inf in fp16 or past 57344 in the rounding, both
 * the code 0x7c. */
KERN_INLINE AVX2_ATTR __m256i f8a_narrow32_half(const __m256 f[4], int e5)
{
    __m256i h[2];

    for (int k = 0; k < 2; k++) {
        /* f[0], f[1] are the first unpack's halves, f[2], f[3] the second's */
        h[k] = _mm256_inserti128_si256(
            _mm256_castsi128_si256(
                _mm256_cvtps_ph(f[2 * k], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
            _mm256_cvtps_ph(f[2 * k + 1], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 1);
        if (!e5) {
            /* as f8v_narrow64_half: clamp |x| to 1.875 keeping the sign, then the code
             * bits next to the sign */
            h[k] = _mm256_min_epi16(h[k], _mm256_set1_epi16(F8H_E4M3_MAX));
            h[k] = _mm256_min_epu16(h[k], _mm256_set1_epi16((short)F8H_E4M3_NMAX));
            h[k] = _mm256_add_epi16(h[k], _mm256_and_si256(h[k], _mm256_set1_epi16(F8H_E4M3_MAX)));
        }
        h[k] = _mm256_add_epi16(
            _mm256_add_epi16(h[k], _mm256_set1_epi16(e5 ? F8H_E5M2_HALF : F8H_E4M3_HALF)),
            _mm256_and_si256(_mm256_srli_epi16(h[k], 8), _mm256_set1_epi16(1)));
        h[k] = _mm256_srli_epi16(h[k], 8);
    }
    /* the pack undoes the widening's unpacks */
    return _mm256_packus_epi16(h[0], h[1]);
}

#define F8A_LOAD(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
/* acc + 8 * F8A_AT(k): where the widening's k-th vector of a block goes (0, 2, 1, 3) */
#define F8A_AT(k) ((k) == 1 ? 2 : (k) == 2 ? 1 : (k))

/* half: the op's result is exact in fp32 and narrows through fp16 */
#define F8A_OP(tag, e5, op, half)                                                                  \
    static AVX2_ATTR void f8v_##tag##_##op##_avx2(void *dst_, const void *a_, const void *b_,      \
                                                  size_t count)                                    \
    {                                                                                              \
        uint8_t *dst = dst_;                                                                       \
        const uint8_t *a = a_, *b = b_;                                                            \
        size_t i = 0;                                                                              \
        for (; i + 32 <= count; i += 32) {                                                         \
            __m256i va = F8A_LOAD(a + i), vb = F8A_LOAD(b + i);                                    \
            __m256 fa[4], fb[4];                                                                   \
            if (_mm256_movemask_epi8(_mm256_or_si256(f8a_special(va, e5), f8a_special(vb, e5)))) { \
                for (size_t j = i; j < i + 32; j++)                                                \
                    dst[j] = coll__##op##_##tag(a[j], b[j]);                                       \
                continue;                                                                          \
            }                                                                                      \
            f8a_widen32(va, fa, e5, half);                                                         \
            f8a_widen32(vb, fb, e5, half);                                                         \
            EACH4(fa[K_] = v8_##op(fa[K_], fb[K_]));                                               \
            _mm256_storeu_si256((__m256i *)(void *)(dst + i),                                      \
                                half ? f8a_narrow32_half(fa, e5) : f8a_narrow32(fa, e5));          \
        }                                                                                          \
        for (; i < count; i++)                                                                     \
            dst[i] = coll__##op##_##tag(a[i], b[i]);                                               \
    }

/* acc[i] = acc[i] op widen(a[i]); the "set" op is the widening */
#define F8A_ACC(tag, e5, op)                                                                       \
    static AVX2_ATTR void f8v_##tag##_acc_##op##_avx2(float *acc, const void *a_, size_t count)    \
    {                                                                                              \
        const uint8_t *a = a_;                                                                     \
        size_t i = 0;                                                                              \
        for (; i + 32 <= count; i += 32) {                                                         \
            __m256i va = F8A_LOAD(a + i);                                                          \
            __m256 fa[4];                                                                          \
            if (_mm256_movemask_epi8(f8a_special(va, e5))) {                                       \
                for (size_t j = i; j < i + 32; j++)                                                \
                    acc[j] = coll__##op##_f32(acc[j], coll__##tag##_to_f32(a[j]));                 \
                continue;                                                                          \
            }                                                                                      \
            f8a_widen32(va, fa, e5, false);                                                        \
            EACH4(_mm256_storeu_ps(acc + i + 8 * F8A_AT(K_),                                       \
                                   v8_##op(_mm256_loadu_ps(acc + i + 8 * F8A_AT(K_)), fa[K_])));   \
        }                                                                                          \
        for (; i < count; i++)                                                                     \
            acc[i] = coll__##op##_f32(acc[i], coll__##tag##_to_f32(a[i]));                         \
    }

#define F8A_FNS(tag, e5)                                                                           \
    F8A_OP(tag, e5, sum, true)                                                                     \
    F8A_OP(tag, e5, prod, false)                                                                   \
    F8A_OP(tag, e5, max, true)                                                                     \
    F8A_OP(tag, e5, min, true)                                                                     \
    F8A_ACC(tag, e5, sum)                                                                          \
    F8A_ACC(tag, e5, prod)                                                                         \
    F8A_ACC(tag, e5, max)                                                                          \
    F8A_ACC(tag, e5, min)                                                                          \
    F8A_ACC(tag, e5, set)                                                                          \
    static AVX2_ATTR void f8v_##tag##_narrow_avx2(void *dst_, const float *acc, size_t count)      \
    {                                                                                              \
        uint8_t *dst = dst_;                                                                       \
        size_t i = 0;                                                                              \
        for (; i + 32 <= count; i += 32) {                                                         \
            __m256 f[4];                                                                           \
            int nan = 0;                                                                           \
            EACH4(f[K_] = _mm256_loadu_ps(acc + i + 8 * F8A_AT(K_));                               \
                  nan |= _mm256_movemask_ps(_mm256_cmp_ps(f[K_], f[K_], _CMP_UNORD_Q)));           \
            if (nan)                                                                               \
                for (size_t j = i; j < i + 32; j++)                                                \
                    dst[j] = coll__f32_to_##tag(acc[j]);                                           \
            else                                                                                   \
                _mm256_storeu_si256((__m256i *)(void *)(dst + i), f8a_narrow32(f, e5));            \
        }                                                                                          \
        for (; i < count; i++)                                                                     \
            dst[i] = coll__f32_to_##tag(acc[i]);                                                   \
    }

F8A_FNS(e4m3, 0)
F8A_FNS(e5m2, 1)

#define KERN_SFX avx2
#define KERN_ATTR KERN_VEC AVX2_ATTR
#define KERN_LOOP
#define KERN_NAME "avx2"
#define KERN_SUPPORTED isa_avx2
#define KERN_STREAM stream_avx2
#define KERN_F16 1
#define KERN_FP8 2
#include "reduce_kern.h"
#undef KERN_SFX
#undef KERN_SFX_NAME
#undef KERN_ATTR
#undef KERN_LOOP
#undef KERN_NAME
#undef KERN_SUPPORTED
#undef KERN_STREAM
#undef KERN_F16
#undef KERN_FP8

/* ---- 5 AVX-512 set --------------------------------------------------------------------- */

#define AVX512_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq" KERN_512)))

static bool isa_avx512(void)
{
    __builtin_cpu_init();
    return isa_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

static void AVX512_ATTR stream_avx512(void *dst, const void *src, size_t bytes)
{
    __m512i *d = dst;
    const __m512i *s = src;

    for (size_t i = 0; i < bytes / 64; i++)
        _mm512_stream_si512(d + i, _mm512_loadu_si512(s + i));
}

static inline AVX512_ATTR __m512 h16_load(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}

static inline AVX512_ATTR void h16_store(uint16_t *p, __m512 x)
{
    const __m256i abs = _mm256_set1_epi16(0x7fff);
    __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __mmask16 nan = _mm256_cmpgt_epi16_mask(_mm256_and_si256(h, abs), _mm256_set1_epi16(0x7c00));

    _mm256_storeu_si256((__m256i *)(void *)p, _mm256_mask_mov_epi16(h, nan, abs));
}

static inline AVX512_ATTR __m512 v16_sum(__m512 a, __m512 b)
{
    return _mm512_add_ps(a, b);
}
static inline AVX512_ATTR __m512 v16_prod(__m512 a, __m512 b)
{
    return _mm512_mul_ps(a, b);
}
static inline AVX512_ATTR __m512 v16_max(__m512 a, __m512 b)
{
    __mmask16 pos = _mm512_cmpgt_epi32_mask(_mm512_castps_si512(a), _mm512_set1_epi32(-1));
    __mmask16 m = _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) |
                  (_mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ) & pos);
    return _mm512_mask_blend_ps(m, b, a);
}
static inline AVX512_ATTR __m512 v16_min(__m512 a, __m512 b)
{
    __mmask16 neg = _mm512_cmplt_epi32_mask(_mm512_castps_si512(a), _mm512_setzero_si512());
    __mmask16 m = _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) |
                  (_mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ) & neg);
    return _mm512_mask_blend_ps(m, b, a);
}

#define v16_LOADF _mm512_loadu_ps
#define v16_STOREF _mm512_storeu_ps
F16H_LOOPS(avx512, AVX512_ATTR, 16, v16, h16_load, h16_store, v16)

/* fp8: the AVX2 set's loops, converted in registers, which make 1.8-2.4x what a gather from
 * the 64 KiB tables made here (docs/kernels.md); without VBMI there is no byte permute to
 * widen 64 codes at once */

#define KERN_SFX avx512
#define KERN_ATTR KERN_VEC AVX512_ATTR
#define KERN_LOOP
#define KERN_NAME "avx512"
#define KERN_SUPPORTED isa_avx512
#define KERN_STREAM stream_avx512
#define KERN_F16 1
#define KERN_FP8 2
#define KERN_FP8_SFX avx2
#include "reduce_kern.h"
#undef KERN_SFX
#undef KERN_SFX_NAME
#undef KERN_ATTR
#undef KERN_LOOP
#undef KERN_NAME
#undef KERN_SUPPORTED
#undef KERN_STREAM
#undef KERN_F16
#undef KERN_FP8
#undef KERN_FP8_SFX

/* ---- 6 AVX-512 VBMI set: fp8 by vector conversion ------------------------------------ */

/*
 * The AVX-512 set with its fp8 loops replaced by conversions in vector registers, 64
 * elements at a time, which run near memory speed where the table lookup makes about a
 * third of it. VBMI's two-table byte permute (vpermi2b) is what makes the widening cheap:
 *
 *   - widening: the fp32 value of an fp8 code has two zero low bytes, so two 128-entry
 *     lookups of the magnitude (bytes 3 and 2; the sign is or'ed into byte 3) and two
 *     rounds of unpacking with zeros give 64 floats, exactly the ones elem.h gives. The
 *     unpacks leave the elements in a lane-interleaved order that the packs of the
 *     narrowing undo, so a two-input op needs no reordering; the widen/accumulate/narrow
 *     loops of the n-input folds, whose fp32 buffer is in element order, reorder the bytes
 *     with one vpermb (the order is a 4 x 4 transpose of 4-byte groups, its own inverse).
 *   - narrowing: for |x| with fp32 exponent e, let M = 2^(e' + 23 - mbits), e' = max(e, the
 *     format's smallest normal exponent). |x| + M, rounded to nearest even by the add
 *     itself (embedded rounding: independent of MXCSR), is M plus |x| rounded to the
 *     format's grid at that exponent, which covers subnormals too (e' = the smallest normal
 *     exponent gives the subnormal spacing). M is chosen with the format's code of 2^e' in
 *     its low mantissa bits (a multiple of 2^mbits, so even, and ties still round to the even
 *     code), so the low byte of the sum's bits is the magnitude code. M depends only on e;
 *     one vpermi2d looks it up among 32 exponents, |x| being clamped first to a value that
 *     rounds to the overflow code (E4M3 480 -> NaN, E5M2 65536 -> Inf), and exponents below
 *     the table saturating to its first entry, whose M is the subnormal one.
 *     Then the sign goes into bit 7, and NaN lanes become 0x7f, as elem.h does.
 *   - narrowing a sum, max or min of two codes: that result is exact in fp32, and rounding
 *     an exact sum of two p-bit numbers to 11 bits and then to p bits (p <= 4) gives the
 *     once-rounded result, so the loops round through fp16 instead: vcvtps2ph (embedded
 *     round to nearest even) does the exponent-dependent part for 16 lanes at once, and
 *     integer rounding of the fp16 bits to the format's few mantissa bits works on 32
 *     lanes per instruction. E5M2 is the upper byte of an fp16; E4M3 is too after scaling
 *     by 2^-8 (its exponent field becomes the fp16 one, subnormals included), which its
 *     widening tables for these ops fold in. Products are not exact through fp16 (double
 *     rounding below fp16's normal range) and keep the narrowing above.
 * Every float op on a path to the result is exact or rounds once as elem.h does; the tests
 * compare all codes and pairs bit for bit with the scalar reference.
 */
#define VBMI_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi" KERN_512)))

static bool isa_avx512vbmi(void)
{
    return isa_avx512() && __builtin_cpu_supports("avx512vbmi");
}

/* One fp8 format's tables; 64-byte aligned for whole-register loads. */
struct f8v_tabs {
    _Alignas(64) uint8_t b3[128];  /* byte 3 of the fp32 value of each magnitude code */
    _Alignas(64) uint8_t b2[128];  /* byte 2 (bytes 1 and 0 are always zero) */
    _Alignas(64) uint8_t b3h[128]; /* b3 and b2 of the value scaled for the fp16 narrowing */
    _Alignas(64) uint8_t b2h[128];
    _Alignas(64) uint32_t m[32]; /* M (above) for exponent fields base .. base + 31 */
    uint32_t clamp;              /* fp32 bits of the clamp of |x| */
    uint32_t base;               /* exponent field of m[0] */
};
static struct f8v_tabs f8v_tabs[2];
/* element order <-> the unpacks' order, for both formats */
static _Alignas(64) uint8_t f8v_perm[64];
/* for each element, its fp16's upper byte among the fp16 narrowing's two registers */
static _Alignas(64) uint8_t f8v_pick[64];
static pthread_once_t f8v_once = PTHREAD_ONCE_INIT;

static void f8v_build_one(struct f8v_tabs *t, float (*widen)(uint8_t), int mbits, uint32_t emin,
                          uint32_t clamp, float hscale)
{
    t->clamp = clamp;
    t->base = (clamp >> 23) - 31; /* the clamp's exponent is the table's last */
    for (uint32_t c = 0; c < 128; c++) {
        uint32_t u = coll__f32_bits(widen((uint8_t)c));
        uint32_t uh = coll__f32_bits(widen((uint8_t)c) * hscale); /* exact; NaN stays NaN */
        t->b3[c] = (uint8_t)(u >> 24);
        t->b2[c] = (uint8_t)(u >> 16); /* NaN payloads too: they sit in byte 2 (fp16 ones) */
        t->b3h[c] = (uint8_t)(uh >> 24);
        t->b2h[c] = (uint8_t)(uh >> 16);
    }
    /* E4M3's NaN code, widened for the fp16 narrowing: bit 7 set marks it to come out
     * positive whatever its sign (f8v_words), so a NaN sum, max or min is a positive NaN */
    if (mbits == 3)
        t->b3h[0x7f] |= 0x80;
    for (uint32_t i = 0; i < 32; i++) {
        uint32_t e = t->base + i < emin ? emin : t->base + i;
        t->m[i] = ((e + 23 - (uint32_t)mbits) << 23) + ((e - emin) << mbits);
    }
}

static void f8v_build(void)
{
    /* E4M3: smallest normal 2^-6 (field 121), clamp 480 (0x43f00000) -> code 0x7f.
     * E5M2: smallest normal 2^-14 (field 113), clamp 65536 (0x47800000) -> 0x7c, Inf. */
    f8v_build_one(&f8v_tabs[0], coll__e4m3_to_f32, 3, 121, 0x43f00000u, 0x1p-8f);
    f8v_build_one(&f8v_tabs[1], coll__e5m2_to_f32, 2, 113, 0x47800000u, 1.0f);
    for (uint32_t l = 0; l < 4; l++)
        for (uint32_t k = 0; k < 4; k++)
            for (uint32_t d = 0; d < 4; d++)
                f8v_perm[l * 16 + 4 * k + d] = (uint8_t)(16 * k + 4 * l + d);
    /* The fp16 narrowing's order (f8v_widen64_half): element e = 16 L + 8 u + j is word
     * 8 L + j of w[u], which is lane (8 L + j) / 2 of float vector 2 u + j % 2; vectors 0, 1
     * become the first register's 32 fp16s, 2, 3 the second's. */
    for (uint32_t e = 0; e < 64; e++) {
        uint32_t u = e % 16 / 8, word = 8 * (e / 16) + e % 8, k = 2 * u + word % 2;
        f8v_pick[e] = (uint8_t)(64 * (k / 2) + 2 * ((k % 2) * 16 + word / 2) + 1);
    }
}

/* A format's tables, in registers for the length of one loop. */
struct f8v_regs {
    __m512i b3lo, b3hi, b2lo, b2hi, mlo, mhi, perm, pick, clamp, base;
};

/* half: the tables for the fp16 narrowing (scaled for E4M3) */
KERN_INLINE VBMI_ATTR struct f8v_regs f8v_regs(int f, bool half)
{
    const struct f8v_tabs *t = &f8v_tabs[f];
    struct f8v_regs r;

    pthread_once(&f8v_once, f8v_build);
    r.b3lo = _mm512_load_si512(half ? t->b3h : t->b3);
    r.b3hi = _mm512_load_si512((half ? t->b3h : t->b3) + 64);
    r.b2lo = _mm512_load_si512(half ? t->b2h : t->b2);
    r.b2hi = _mm512_load_si512((half ? t->b2h : t->b2) + 64);
    r.mlo = _mm512_load_si512(t->m);
    r.mhi = _mm512_load_si512(t->m + 16);
    r.perm = _mm512_load_si512(f8v_perm);
    r.pick = _mm512_load_si512(f8v_pick);
    r.clamp = _mm512_set1_epi32((int)t->clamp);
    r.base = _mm512_set1_epi32((int)(t->base << 23));
    return r;
}

/* 64 codes -> the upper halves of their fp32 values (bytes 3 and 2), one word per element:
 * w[0] holds elements 16 L + 0..7 of each 128-bit lane L, w[1] elements 16 L + 8..15 */
KERN_INLINE VBMI_ATTR void f8v_words(__m512i v, __m512i w[2], const struct f8v_regs *r)
{
    __m512i b3 = _mm512_permutex2var_epi8(r->b3lo, v, r->b3hi);
    __m512i b2 = _mm512_permutex2var_epi8(r->b2lo, v, r->b2hi);

    /* bit 7: the sign (v & 80), unless the table's own bit 7 says to clear it; 0-6: b3 */
    b3 = _mm512_ternarylogic_epi32(b3, v, _mm512_set1_epi8((char)0x80), 0x58);
    w[0] = _mm512_unpacklo_epi8(b2, b3);
    w[1] = _mm512_unpackhi_epi8(b2, b3);
}

/* 64 codes -> 4 x 16 floats, in the unpacks' order */
KERN_INLINE VBMI_ATTR void f8v_widen64(__m512i v, __m512 f[4], const struct f8v_regs *r)
{
    const __m512i z = _mm512_setzero_si512();
    __m512i w[2];

    f8v_words(v, w, r);
    f[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, w[0]));
    f[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, w[0]));
    f[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, w[1]));
    f[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, w[1]));
}

/* The same for the fp16 narrowing, which reorders anyway: the even and the odd words of w[0]
 * (f[0], f[1]) and of w[1] (f[2], f[3]), by a shift and a mask, leaving the shuffle units
 * to the lookups and the conversions (2% faster on Zen 4) */
KERN_INLINE VBMI_ATTR void f8v_widen64_half(__m512i v, __m512 f[4], const struct f8v_regs *r)
{
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    __m512i w[2];

    f8v_words(v, w, r);
    f[0] = _mm512_castsi512_ps(_mm512_slli_epi32(w[0], 16));
    f[1] = _mm512_castsi512_ps(_mm512_and_si512(w[0], hi));
    f[2] = _mm512_castsi512_ps(_mm512_slli_epi32(w[1], 16));
    f[3] = _mm512_castsi512_ps(_mm512_and_si512(w[1], hi));
}

/* 16 floats -> 16 codes, one per 32-bit lane */
KERN_INLINE VBMI_ATTR __m512i f8v_narrow16(__m512 x, const struct f8v_regs *r)
{
    const __m512i xi = _mm512_castps_si512(x);
    __mmask16 num = _mm512_cmp_ps_mask(x, x, _CMP_ORD_Q);
    /* min(|x|, clamp), sign cleared, in one vrangeps (NaN stays NaN: masked out below) */
    __m512i ax = _mm512_castps_si512(_mm512_range_ps(x, _mm512_castsi512_ps(r->clamp), 0x0a));
    /* (exponent - base) in bits 23+, saturating at 0: the 16-bit subtraction leaves the low
     * half alone (it subtracts 0 there) */
    __m512i idx = _mm512_srli_epi32(_mm512_subs_epu16(ax, r->base), 23);
    __m512 m = _mm512_castsi512_ps(_mm512_permutex2var_epi32(r->mlo, idx, r->mhi));
    __m512i t = _mm512_castps_si512(_mm512_add_round_ps(
        _mm512_castsi512_ps(ax), m, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));

    /* numbers: (t & 7f) | (sign in bit 7); NaN lanes keep 7f */
    return _mm512_mask_ternarylogic_epi32(_mm512_set1_epi32(0x7f), num, t,
                                          _mm512_srli_epi32(xi, 24), 0xca);
}

/* 4 x 16 floats in the unpacks' order -> 64 codes in element order */
KERN_INLINE VBMI_ATTR __m512i f8v_narrow64(const __m512 f[4], const struct f8v_regs *r)
{
    __m512i c01 = _mm512_packus_epi32(f8v_narrow16(f[0], r), f8v_narrow16(f[1], r));
    __m512i c23 = _mm512_packus_epi32(f8v_narrow16(f[2], r), f8v_narrow16(f[3], r));

    return _mm512_packus_epi16(c01, c23);
}

/* 4 x 16 exact results of a sum, max or min of two codes (E4M3 ones scaled by 2^-8), in
 * f8v_widen64_half's order -> 64 codes in element order, through fp16 (section comment) */
KERN_INLINE VBMI_ATTR __m512i f8v_narrow64_half(const __m512 f[4], const struct f8v_regs *r, int f8)
{
    __m512i h[2];

    for (int k = 0; k < 2; k++) {
        __m512 x0 = f[2 * k], x1 = f[2 * k + 1];
        __m512i lsb;

        if (f8 == 1) {
            /* E5M2: any NaN to the positive one whose fp16 rounds to 0x7f */
            const __m512 nan = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fe00000));
            const __m512i tok = _mm512_set1_epi32(0x11111100); /* NaN -> first operand */
            x0 = _mm512_fixupimm_ps(nan, x0, tok, 0);
            x1 = _mm512_fixupimm_ps(nan, x1, tok, 0);
        }
        h[k] = _mm512_inserti64x4(
            _mm512_castsi256_si512(
                _mm512_cvtps_ph(x0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
            _mm512_cvtps_ph(x1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 1);
        if (f8 == 0) {
            /* |x| past 480 (1.875 scaled) to 1.875, whose code is 0x7f, sign kept: signed,
             * the positive fp16s are clamped, NaN too (the widening made it positive, so it
             * comes out 0x7f as in elem.h); unsigned, the negative ones */
            h[k] = _mm512_min_epi16(h[k], _mm512_set1_epi16(F8H_E4M3_MAX));
            h[k] = _mm512_min_epu16(h[k], _mm512_set1_epi16((short)F8H_E4M3_NMAX));
            /* code bits 13..7 to 14..8, next to the sign: then the upper byte is the code,
             * and the rounding below carries into bit 8 (the bit 7 in between is 0) */
            h[k] = _mm512_add_epi16(h[k], _mm512_and_si512(h[k], _mm512_set1_epi16(F8H_E4M3_MAX)));
        }
        /* to nearest even on the upper byte: add just under half (0x7f; E4M3 0xbf over the
         * gap at bit 7) plus the kept lsb; magnitudes stay below the sign bit */
        lsb = _mm512_and_si512(_mm512_srli_epi16(h[k], 8), _mm512_set1_epi16(1));
        h[k] = _mm512_add_epi16(
            _mm512_add_epi16(h[k], _mm512_set1_epi16(f8 == 0 ? F8H_E4M3_HALF : F8H_E5M2_HALF)),
            lsb);
    }
    return _mm512_permutex2var_epi8(h[0], r->pick, h[1]);
}

#define F8V_LOAD(p) _mm512_loadu_si512((const void *)(p))

/* half: the op's result is exact in fp32 and narrows through fp16 */
#define F8V_OP(tag, f, op, half)                                                                   \
    static VBMI_ATTR void f8v_##tag##_##op##_avx512vbmi(void *dst_, const void *a_,                \
                                                        const void *b_, size_t count)              \
    {                                                                                              \
        uint8_t *dst = dst_;                                                                       \
        const uint8_t *a = a_, *b = b_;                                                            \
        const struct f8v_regs r = f8v_regs(f, half);                                               \
        size_t i = 0;                                                                              \
        for (; i + 64 <= count; i += 64) {                                                         \
            __m512 fa[4], fb[4];                                                                   \
            if (half) {                                                                            \
                f8v_widen64_half(F8V_LOAD(a + i), fa, &r);                                         \
                f8v_widen64_half(F8V_LOAD(b + i), fb, &r);                                         \
            } else {                                                                               \
                f8v_widen64(F8V_LOAD(a + i), fa, &r);                                              \
                f8v_widen64(F8V_LOAD(b + i), fb, &r);                                              \
            }                                                                                      \
            EACH4(fa[K_] = v16_##op(fa[K_], fb[K_]));                                              \
            _mm512_storeu_si512((void *)(dst + i),                                                 \
                                half ? f8v_narrow64_half(fa, &r, f) : f8v_narrow64(fa, &r));       \
        }                                                                                          \
        for (; i < count; i++)                                                                     \
            dst[i] = coll__##op##_##tag(a[i], b[i]);                                               \
    }

/* the widening's "op" (section 2) */
static inline VBMI_ATTR __m512 v16_set(__m512 acc, __m512 x)
{
    (void)acc;
    return x;
}

#define F8V_ACC(tag, f, op)                                                                        \
    static VBMI_ATTR void f8v_##tag##_acc_##op##_avx512vbmi(float *acc, const void *a_,            \
                                                            size_t count)                          \
    {                                                                                              \
        const uint8_t *a = a_;                                                                     \
        const struct f8v_regs r = f8v_regs(f, false);                                              \
        size_t i = 0;                                                                              \
        for (; i + 64 <= count; i += 64) {                                                         \
            __m512 fa[4];                                                                          \
            f8v_widen64(_mm512_permutexvar_epi8(r.perm, F8V_LOAD(a + i)), fa, &r);                 \
            EACH4(_mm512_storeu_ps(acc + i + 16 * K_,                                              \
                                   v16_##op(_mm512_loadu_ps(acc + i + 16 * K_), fa[K_])));         \
        }                                                                                          \
        for (; i < count; i++)                                                                     \
            acc[i] = coll__##op##_f32(acc[i], coll__##tag##_to_f32(a[i]));                         \
    }

#define F8V_FNS(tag, f)                                                                            \
    F8V_OP(tag, f, sum, true)                                                                      \
    F8V_OP(tag, f, prod, false)                                                                    \
    F8V_OP(tag, f, max, true)                                                                      \
    F8V_OP(tag, f, min, true)                                                                      \
    F8V_ACC(tag, f, sum)                                                                           \
    F8V_ACC(tag, f, prod)                                                                          \
    F8V_ACC(tag, f, max)                                                                           \
    F8V_ACC(tag, f, min)                                                                           \
    F8V_ACC(tag, f, set) /* the widening: acc[i] = widen(a[i]) */                                  \
    static VBMI_ATTR void f8v_##tag##_narrow_avx512vbmi(void *dst_, const float *acc,              \
                                                        size_t count)                              \
    {                                                                                              \
        uint8_t *dst = dst_;                                                                       \
        const struct f8v_regs r = f8v_regs(f, false);                                              \
        size_t i = 0;                                                                              \
        for (; i + 64 <= count; i += 64) {                                                         \
            __m512 fa[4];                                                                          \
            EACH4(fa[K_] = _mm512_loadu_ps(acc + i + 16 * K_));                                    \
            _mm512_storeu_si512((void *)(dst + i),                                                 \
                                _mm512_permutexvar_epi8(r.perm, f8v_narrow64(fa, &r)));            \
        }                                                                                          \
        for (; i < count; i++)                                                                     \
            dst[i] = coll__f32_to_##tag(acc[i]);                                                   \
    }

F8V_FNS(e4m3, 0)
F8V_FNS(e5m2, 1)

/* the rest of the set is the AVX-512 one, compiled again with VBMI allowed */
F16H_LOOPS(avx512vbmi, VBMI_ATTR, 16, v16, h16_load, h16_store, v16)

#define KERN_SFX avx512vbmi
#define KERN_ATTR KERN_VEC VBMI_ATTR
#define KERN_LOOP
#define KERN_NAME "avx512vbmi"
#define KERN_SUPPORTED isa_avx512vbmi
#define KERN_STREAM stream_avx512
#define KERN_F16 1
#define KERN_FP8 2
#include "reduce_kern.h"

#endif /* KERN_X86 */

/* ---- 7 the list ------------------------------------------------------------------------ */

const struct coll__reduce_isa *const coll__reduce_isas[] = {
    &kern_set_scalar,
#if KERN_X86
    &kern_set_sse2,   &kern_set_avx2, &kern_set_avx512, &kern_set_avx512vbmi,
#else
    &kern_set_generic,
#endif
};
const size_t coll__reduce_nisas = COLL_ARRAY_SIZE(coll__reduce_isas);
