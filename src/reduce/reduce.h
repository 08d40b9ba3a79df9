/*
 * reduce.h - host reductions for every dtype x op.
 *
 * The per-element math (fp16/bf16/fp8 <-> fp32 conversions with round-to-nearest-even, and
 * op application) lives in elem.h, written so that CUDA kernels include the same header.
 */
#ifndef COLL_REDUCE_H
#define COLL_REDUCE_H

#include "../core/internal.h"

/* dst[i] = a[i] op b[i], i < count. dst may be the same memory as a or b (exactly), never a
 * partial overlap. COLL_AVG reduces as COLL_SUM (the division is coll__reduce_div's).
 * fp16/bf16/fp8: computed in fp32, rounded to nearest even once. */
COLL_INTERNAL void coll__reduce(void *dst, const void *a, const void *b, size_t count,
                                coll_dtype_t dt, coll_op_t op);
/* dst[i] = dst[i] / n: the end of COLL_AVG (integers: truncating division). */
COLL_INTERNAL void coll__reduce_div(void *dst, size_t count, coll_dtype_t dt, uint64_t n);

#endif /* COLL_REDUCE_H */
