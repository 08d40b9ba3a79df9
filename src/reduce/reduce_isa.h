/*
 * reduce_isa.h - the kernel sets behind coll__reduce and friends: one set per instruction
 * set (scalar, sse2, avx2, avx512, avx512vbmi), each a table of plain loops over the per-element
 * math of elem.h. reduce_isa.c builds them; reduce.c picks one at run time and does the blocking,
 * the fused second output, the n-input folds and the streaming stores on top.
 *
 * Every loop here computes exactly elem.h's function of its inputs, element by element, so
 * all sets give the same bits (the one freedom: which NaN an fp32/fp64 sum or product
 * returns when both operands are NaN, since the compiler may swap the operands). The
 * fp8 loops of the vector sets do so under the default rounding mode; reduce.c uses the
 * scalar set's for fp8 under any other.
 */
#ifndef COLL_REDUCE_ISA_H
#define COLL_REDUCE_ISA_H

#include "../base/base.h"

/* dst[i] = a[i] op b[i]; dst may be a or b exactly. */
typedef void (*coll__kern_op_fn)(void *dst, const void *a, const void *b, size_t count);
/* Narrow floats (fp16, bf16, fp8), for the n-input folds that accumulate in fp32:
 * acc[i] = widen(a[i]); acc[i] = acc[i] op widen(a[i]); dst[i] = narrow(acc[i]). */
typedef void (*coll__kern_widen_fn)(float *acc, const void *a, size_t count);
typedef void (*coll__kern_accum_fn)(float *acc, const void *a, size_t count);
typedef void (*coll__kern_narrow_fn)(void *dst, const float *acc, size_t count);
/* Copy with non-temporal stores: dst 64-byte aligned; bytes a multiple of 64. */
typedef void (*coll__kern_stream_fn)(void *dst, const void *src, size_t bytes);

struct coll__reduce_isa {
    const char *name; /* "scalar", "sse2", "avx2", "avx512", "avx512vbmi" */
    bool (*supported)(void);
    coll__kern_op_fn op[COLL_NUM_DTYPES][COLL_NUM_OPS]; /* AVG rows hold the SUM loop */
    coll__kern_widen_fn widen[COLL_NUM_DTYPES];         /* NULL except narrow floats */
    coll__kern_accum_fn accum[COLL_NUM_DTYPES][COLL_NUM_OPS];
    coll__kern_narrow_fn narrow[COLL_NUM_DTYPES];
    coll__kern_stream_fn stream; /* NULL: this set never streams */
};

/* In order of preference, best last; the first is the scalar reference, always supported. */
COLL_INTERNAL extern const struct coll__reduce_isa *const coll__reduce_isas[];
COLL_INTERNAL extern const size_t coll__reduce_nisas;

#endif /* COLL_REDUCE_ISA_H */
