/*
 * reduce_kern.h - one kernel set, instantiated once per instruction set by reduce_isa.c.
 * Not a normal header: it has no include guard and defines functions.
 *
 * The includer defines:
 *   KERN_SFX        name suffix of this set (scalar, sse2, avx2, avx512,
 *                   avx512vbmi)
 *   KERN_ATTR       attributes of every loop (target ISA, vectorizer switches)
 *   KERN_LOOP       a pragma placed before each loop (empty, or clang's "do not vectorize")
 *   KERN_NAME       the set's name as a string
 *   KERN_SUPPORTED  bool (*)(void): may this machine run the set
 *   KERN_STREAM     the streaming copy, or NULL
 *   KERN_FP8        1 when the includer has defined table-lookup fp8 loops for this set
 *                   (KN(fp8t_e4m3_sum) ... KN(fp8t_e5m2_min)), which then replace the
 *                   generic two-input ones; 2 when it has defined vector fp8 loops
 *                   (f8v_<tag>_<op>, f8v_<tag>_acc_<op>, f8v_<tag>_acc_set for the
 *                   widening, f8v_<tag>_narrow, each with the set's suffix), which replace
 *                   all the generic fp8 ones
 *   KERN_FP8_SFX    with KERN_FP8 2: the suffix of the vector fp8 loops, when they are
 *                   another set's (default KERN_SFX)
 *   KERN_F16        1 when the includer has defined hardware fp16 loops for this set
 *                   (KN(f16h_sum) ... KN(f16h_narrow)), which then replace the generic ones
 *
 * The loops are the plain indexed loops of the reference, compiled for the set's ISA: the
 * per-element functions of elem.h were written to vectorize (selects, no branches, no
 * variable shifts), so the compiler turns them into vector code without changing a bit of
 * the result. No restrict: dst may be a or b exactly (the vectorizer's runtime overlap check
 * passes exact aliasing, as each element is read before it is written within one vector).
 */

#define KN__(x, s) x##_##s
#define KN_(x, s) KN__(x, s)
#define KN(x) KN_(x, KERN_SFX)
/* Generic fp16 and fp8 loops stay unused where hardware or table ones replace them. */
#define KERN_UNUSED __attribute__((unused))

/* kop_<tag>_<op>_<sfx>: dst[i] = coll__<op>_<tag>(a[i], b[i]) */
#define KERN_OP(tag, op, T)                                                                        \
    static KERN_ATTR KERN_UNUSED void KN(kop_##tag##_##op)(void *dst_, const void *a_,             \
                                                           const void *b_, size_t count)           \
    {                                                                                              \
        T *dst = dst_;                                                                             \
        const T *a = a_, *b = b_;                                                                  \
        KERN_LOOP                                                                                  \
        for (size_t i = 0; i < count; i++)                                                         \
            dst[i] = coll__##op##_##tag(a[i], b[i]);                                               \
    }

#define KERN_OP_FAMILY(tag, T)                                                                     \
    KERN_OP(tag, sum, T)                                                                           \
    KERN_OP(tag, prod, T)                                                                          \
    KERN_OP(tag, max, T)                                                                           \
    KERN_OP(tag, min, T)

/* Narrow floats, for the n-input folds: fp32 accumulator, one rounding at the end. */
#define KERN_ACC_OP(tag, op, T)                                                                    \
    static KERN_ATTR KERN_UNUSED void KN(kacc_##tag##_##op)(float *acc, const void *a_,            \
                                                            size_t count)                          \
    {                                                                                              \
        const T *a = a_;                                                                           \
        KERN_LOOP                                                                                  \
        for (size_t i = 0; i < count; i++)                                                         \
            acc[i] = coll__##op##_f32(acc[i], coll__##tag##_to_f32(a[i]));                         \
    }

#define KERN_NARROW_FAMILY(tag, T)                                                                 \
    KERN_OP_FAMILY(tag, T)                                                                         \
    KERN_ACC_OP(tag, sum, T)                                                                       \
    KERN_ACC_OP(tag, prod, T)                                                                      \
    KERN_ACC_OP(tag, max, T)                                                                       \
    KERN_ACC_OP(tag, min, T)                                                                       \
    static KERN_ATTR KERN_UNUSED void KN(kwiden_##tag)(float *acc, const void *a_, size_t count)   \
    {                                                                                              \
        const T *a = a_;                                                                           \
        KERN_LOOP                                                                                  \
        for (size_t i = 0; i < count; i++)                                                         \
            acc[i] = coll__##tag##_to_f32(a[i]);                                                   \
    }                                                                                              \
    static KERN_ATTR KERN_UNUSED void KN(knarrow_##tag)(void *dst_, const float *acc,              \
                                                        size_t count)                              \
    {                                                                                              \
        T *dst = dst_;                                                                             \
        KERN_LOOP                                                                                  \
        for (size_t i = 0; i < count; i++)                                                         \
            dst[i] = coll__f32_to_##tag(acc[i]);                                                   \
    }

/* Signed integers have max/min of their own; sum/prod are the unsigned ones (elem.h). */
KERN_OP(i8, max, int8_t)
KERN_OP(i8, min, int8_t)
KERN_OP(i32, max, int32_t)
KERN_OP(i32, min, int32_t)
KERN_OP(i64, max, int64_t)
KERN_OP(i64, min, int64_t)
KERN_OP_FAMILY(u8, uint8_t)
KERN_OP_FAMILY(u32, uint32_t)
KERN_OP_FAMILY(u64, uint64_t)
KERN_OP_FAMILY(f32, float)
KERN_OP_FAMILY(f64, double)
KERN_NARROW_FAMILY(f16, uint16_t)
KERN_NARROW_FAMILY(bf16, uint16_t)
KERN_NARROW_FAMILY(e4m3, uint8_t)
KERN_NARROW_FAMILY(e5m2, uint8_t)

/* Where the includer has hardware fp16 loops, they take fp16's places in the tables. */
#if KERN_F16
#define KERN_F16_OP(op) KN(f16h_##op)
#define KERN_F16_ACC(op) KN(f16h_acc_##op)
#define KERN_F16_WIDEN KN(f16h_widen)
#define KERN_F16_NARROW KN(f16h_narrow)
#else
#define KERN_F16_OP(op) KN(kop_f16_##op)
#define KERN_F16_ACC(op) KN(kacc_f16_##op)
#define KERN_F16_WIDEN KN(kwiden_f16)
#define KERN_F16_NARROW KN(knarrow_f16)
#endif

#if KERN_FP8 == 2
#ifdef KERN_FP8_SFX
#define KF8(x) KN_(x, KERN_FP8_SFX)
#else
#define KF8(x) KN(x)
#endif
#define KERN_FP8_ROW(t)                                                                            \
    {                                                                                              \
        KF8(f8v_##t##_sum), KF8(f8v_##t##_prod), KF8(f8v_##t##_max), KF8(f8v_##t##_min),           \
            KF8(f8v_##t##_sum)                                                                     \
    }
#define KERN_FP8_ACC_ROW(t)                                                                        \
    {                                                                                              \
        KF8(f8v_##t##_acc_sum), KF8(f8v_##t##_acc_prod), KF8(f8v_##t##_acc_max),                   \
            KF8(f8v_##t##_acc_min), KF8(f8v_##t##_acc_sum)                                         \
    }
#define KERN_FP8_WIDEN(t) KF8(f8v_##t##_acc_set)
#define KERN_FP8_NARROW(t) KF8(f8v_##t##_narrow)
#elif KERN_FP8
#define KERN_FP8_ROW(t)                                                                            \
    {                                                                                              \
        KN(fp8t_##t##_sum), KN(fp8t_##t##_prod), KN(fp8t_##t##_max), KN(fp8t_##t##_min),           \
            KN(fp8t_##t##_sum)                                                                     \
    }
#else
#define KERN_FP8_ROW(t) KERN_ROW(t, t)
#endif
#ifndef KERN_FP8_ACC_ROW
#define KERN_FP8_ACC_ROW(t) KERN_ACC_ROW(t)
#define KERN_FP8_WIDEN(t) KN(kwiden_##t)
#define KERN_FP8_NARROW(t) KN(knarrow_##t)
#endif

/* Row order is coll_op_t's: SUM, PROD, MAX, MIN, AVG (which sums). */
#define KERN_ROW(s, m)                                                                             \
    {                                                                                              \
        KN(kop_##s##_sum), KN(kop_##s##_prod), KN(kop_##m##_max), KN(kop_##m##_min),               \
            KN(kop_##s##_sum)                                                                      \
    }
#define KERN_ACC_ROW(t)                                                                            \
    {                                                                                              \
        KN(kacc_##t##_sum), KN(kacc_##t##_prod), KN(kacc_##t##_max), KN(kacc_##t##_min),           \
            KN(kacc_##t##_sum)                                                                     \
    }

static const struct coll__reduce_isa KN(kern_set) = {
    .name = KERN_NAME,
    .supported = KERN_SUPPORTED,
    .op =
        {
            [COLL_INT8] = KERN_ROW(u8, i8),
            [COLL_UINT8] = KERN_ROW(u8, u8),
            [COLL_INT32] = KERN_ROW(u32, i32),
            [COLL_UINT32] = KERN_ROW(u32, u32),
            [COLL_INT64] = KERN_ROW(u64, i64),
            [COLL_UINT64] = KERN_ROW(u64, u64),
            [COLL_FLOAT16] = {KERN_F16_OP(sum), KERN_F16_OP(prod), KERN_F16_OP(max),
                              KERN_F16_OP(min), KERN_F16_OP(sum)},
            [COLL_FLOAT32] = KERN_ROW(f32, f32),
            [COLL_FLOAT64] = KERN_ROW(f64, f64),
            [COLL_BFLOAT16] = KERN_ROW(bf16, bf16),
            [COLL_FLOAT8E4M3] = KERN_FP8_ROW(e4m3),
            [COLL_FLOAT8E5M2] = KERN_FP8_ROW(e5m2),
        },
    .widen =
        {
            [COLL_FLOAT16] = KERN_F16_WIDEN,
            [COLL_BFLOAT16] = KN(kwiden_bf16),
            [COLL_FLOAT8E4M3] = KERN_FP8_WIDEN(e4m3),
            [COLL_FLOAT8E5M2] = KERN_FP8_WIDEN(e5m2),
        },
    .accum =
        {
            [COLL_FLOAT16] = {KERN_F16_ACC(sum), KERN_F16_ACC(prod), KERN_F16_ACC(max),
                              KERN_F16_ACC(min), KERN_F16_ACC(sum)},
            [COLL_BFLOAT16] = KERN_ACC_ROW(bf16),
            [COLL_FLOAT8E4M3] = KERN_FP8_ACC_ROW(e4m3),
            [COLL_FLOAT8E5M2] = KERN_FP8_ACC_ROW(e5m2),
        },
    .narrow =
        {
            [COLL_FLOAT16] = KERN_F16_NARROW,
            [COLL_BFLOAT16] = KN(knarrow_bf16),
            [COLL_FLOAT8E4M3] = KERN_FP8_NARROW(e4m3),
            [COLL_FLOAT8E5M2] = KERN_FP8_NARROW(e5m2),
        },
    .stream = KERN_STREAM,
};

#undef KERN_FP8_ROW
#undef KERN_FP8_ACC_ROW
#undef KERN_FP8_WIDEN
#undef KERN_FP8_NARROW
#undef KF8
#undef KERN_F16_OP
#undef KERN_F16_ACC
#undef KERN_F16_WIDEN
#undef KERN_F16_NARROW
