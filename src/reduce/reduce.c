/*
 * reduce.c - host reduction loops: dst[i] = a[i] op b[i] for 12 dtypes x 5 ops, and the
 * division that ends COLL_AVG.
 *
 * One function per (dtype, op), generated from the per-element math of elem.h, and one
 * table that dispatches on (dtype, op). The loops are plain indexed loops so that the
 * compiler vectorizes the native ones (fp32, fp64, integers); a later runtime-dispatched
 * AVX2/AVX-512 set can replace table entries one by one.
 *
 * Aliasing: dst may be a or b exactly (in place), never a partial overlap. So no restrict:
 * the vectorizer adds a runtime overlap check, which exact aliasing passes (each element is
 * read before it is written, within one vector).
 */
#include "reduce.h"

#include "elem.h"

/*
 * GCC at -O2 vectorizes with the "very cheap" cost model, which refuses any loop that needs
 * a runtime alias check: ours all do (dst may equal a or b), so at -O2 they would stay
 * scalar. Ask for the dynamic cost model on these functions only (O3's choice). clang
 * vectorizes them at -O2 already.
 */
#if defined(__GNUC__) && !defined(__clang__)
#define REDUCE_VECTORIZE __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#else
#define REDUCE_VECTORIZE
#endif

typedef void (*reduce_fn)(void *dst, const void *a, const void *b, size_t count);
typedef void (*div_fn)(void *dst, size_t count, uint64_t n);

/* reduce_<tag>_<op>: count elements of storage type T through coll__<op>_<tag> */
#define REDUCE_LOOP(tag, op, T)                                                                    \
    static REDUCE_VECTORIZE void reduce_##tag##_##op(void *dst_, const void *a_, const void *b_,   \
                                                     size_t count)                                 \
    {                                                                                              \
        T *dst = dst_;                                                                             \
        const T *a = a_, *b = b_;                                                                  \
        for (size_t i = 0; i < count; i++)                                                         \
            dst[i] = coll__##op##_##tag(a[i], b[i]);                                               \
    }

#define REDUCE_FAMILY(tag, T)                                                                      \
    REDUCE_LOOP(tag, sum, T)                                                                       \
    REDUCE_LOOP(tag, prod, T)                                                                      \
    REDUCE_LOOP(tag, max, T)                                                                       \
    REDUCE_LOOP(tag, min, T)

/* Signed integers have max/min of their own; sum/prod are the unsigned ones (elem.h). */
REDUCE_LOOP(i8, max, int8_t)
REDUCE_LOOP(i8, min, int8_t)
REDUCE_LOOP(i32, max, int32_t)
REDUCE_LOOP(i32, min, int32_t)
REDUCE_LOOP(i64, max, int64_t)
REDUCE_LOOP(i64, min, int64_t)
REDUCE_FAMILY(u8, uint8_t)
REDUCE_FAMILY(u32, uint32_t)
REDUCE_FAMILY(u64, uint64_t)
REDUCE_FAMILY(f32, float)
REDUCE_FAMILY(f64, double)
REDUCE_FAMILY(f16, uint16_t)
REDUCE_FAMILY(bf16, uint16_t)
REDUCE_FAMILY(e4m3, uint8_t)
REDUCE_FAMILY(e5m2, uint8_t)

/* Row order is coll_op_t's: SUM, PROD, MAX, MIN, AVG (which sums). */
#define REDUCE_ROW(s, m)                                                                           \
    {                                                                                              \
        reduce_##s##_sum, reduce_##s##_prod, reduce_##m##_max, reduce_##m##_min, reduce_##s##_sum  \
    }

static const reduce_fn reduce_table[COLL_NUM_DTYPES][COLL_NUM_OPS] = {
    [COLL_INT8] = REDUCE_ROW(u8, i8),           [COLL_UINT8] = REDUCE_ROW(u8, u8),
    [COLL_INT32] = REDUCE_ROW(u32, i32),        [COLL_UINT32] = REDUCE_ROW(u32, u32),
    [COLL_INT64] = REDUCE_ROW(u64, i64),        [COLL_UINT64] = REDUCE_ROW(u64, u64),
    [COLL_FLOAT16] = REDUCE_ROW(f16, f16),      [COLL_FLOAT32] = REDUCE_ROW(f32, f32),
    [COLL_FLOAT64] = REDUCE_ROW(f64, f64),      [COLL_BFLOAT16] = REDUCE_ROW(bf16, bf16),
    [COLL_FLOAT8E4M3] = REDUCE_ROW(e4m3, e4m3), [COLL_FLOAT8E5M2] = REDUCE_ROW(e5m2, e5m2),
};

void coll__reduce(void *dst, const void *a, const void *b, size_t count, coll_dtype_t dt,
                  coll_op_t op)
{
    /* dtype and op were validated at the API boundary; an unknown pair reduces nothing
     * rather than jumping through a wild pointer. */
    if ((unsigned)dt >= COLL_NUM_DTYPES || (unsigned)op >= COLL_NUM_OPS)
        return;
    reduce_table[dt][op](dst, a, b, count);
}

/* div_<tag>: dst[i] = coll__div_<tag>(dst[i], N), N being n converted once to NT */
#define DIV_LOOP(tag, T, NT)                                                                       \
    static REDUCE_VECTORIZE void div_##tag(void *dst_, size_t count, uint64_t n)                   \
    {                                                                                              \
        T *dst = dst_;                                                                             \
        const NT nn = (NT)n;                                                                       \
        for (size_t i = 0; i < count; i++)                                                         \
            dst[i] = coll__div_##tag(dst[i], nn);                                                  \
    }

DIV_LOOP(i8, int8_t, uint64_t)
DIV_LOOP(u8, uint8_t, uint64_t)
DIV_LOOP(i32, int32_t, uint64_t)
DIV_LOOP(u32, uint32_t, uint64_t)
DIV_LOOP(i64, int64_t, uint64_t)
DIV_LOOP(u64, uint64_t, uint64_t)
DIV_LOOP(f16, uint16_t, float)
DIV_LOOP(f32, float, float)
DIV_LOOP(f64, double, double)
DIV_LOOP(bf16, uint16_t, float)
DIV_LOOP(e4m3, uint8_t, float)
DIV_LOOP(e5m2, uint8_t, float)

static const div_fn div_table[COLL_NUM_DTYPES] = {
    [COLL_INT8] = div_i8,       [COLL_UINT8] = div_u8,        [COLL_INT32] = div_i32,
    [COLL_UINT32] = div_u32,    [COLL_INT64] = div_i64,       [COLL_UINT64] = div_u64,
    [COLL_FLOAT16] = div_f16,   [COLL_FLOAT32] = div_f32,     [COLL_FLOAT64] = div_f64,
    [COLL_BFLOAT16] = div_bf16, [COLL_FLOAT8E4M3] = div_e4m3, [COLL_FLOAT8E5M2] = div_e5m2,
};

void coll__reduce_div(void *dst, size_t count, coll_dtype_t dt, uint64_t n)
{
    /* n is the group size. Dividing by 1 changes nothing; n = 0 is a caller bug that must
     * not trap (integer division by zero), so it leaves dst alone too. */
    if ((unsigned)dt >= COLL_NUM_DTYPES || n <= 1)
        return;
    div_table[dt](dst, count, n);
}
