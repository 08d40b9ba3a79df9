/*
 * reduce.h - host reductions for every dtype x op.
 *
 * The per-element math (fp16/bf16/fp8 <-> fp32 conversions with round-to-nearest-even, and
 * op application) lives in elem.h, written so that CUDA kernels include the same header.
 * The loops run on the best instruction set the CPU has (scalar, sse2, avx2, avx512, avx512vbmi;
 * see reduce_isa.c), chosen once; every set gives the same bits as the scalar reference (the one
 * freedom: which NaN an fp32/fp64 sum or product returns when both operands are NaN).
 *
 * Outputs of at least coll__reduce_stream_bytes() bytes are written with non-temporal
 * stores (they would only evict the inputs from the cache); smaller ones stay cached, as
 * the next step of a pipelined collective reads them soon.
 */
#ifndef COLL_REDUCE_H
#define COLL_REDUCE_H

#include "../base/base.h"

/* The most inputs coll__reduce_n combines in one pass. */
#define COLL_REDUCE_MAX_INPUTS 16

/* dst[i] = a[i] op b[i], i < count. dst may be the same memory as a or b (exactly), never a
 * partial overlap. COLL_AVG reduces as COLL_SUM (the division is coll__reduce_div's).
 * fp16/bf16/fp8: computed in fp32, rounded to nearest even once. */
COLL_INTERNAL void coll__reduce(void *dst, const void *a, const void *b, size_t count,
                                coll_dtype_t dt, coll_op_t op);

/* As coll__reduce, and the same result also written to dst1 in the same pass over the inputs
 * (e.g. the receive buffer and a shared-memory slot). dst1 == NULL writes dst0 only; dst1
 * overlaps none of dst0, a, b. */
COLL_INTERNAL void coll__reduce2(void *dst0, void *dst1, const void *a, const void *b, size_t count,
                                 coll_dtype_t dt, coll_op_t op);

/*
 * dst = src[0] op src[1] op ... op src[k-1], 1 <= k <= COLL_REDUCE_MAX_INPUTS, in one pass.
 *
 * Ordering guarantee: the fold is always left to right, ((src[0] op src[1]) op src[2]) ...,
 * whatever the ISA, the block size or the alignment, so every rank that reduces the same
 * inputs in the same order gets the same bits. Native types (integers, fp32, fp64) round
 * after every op, as a chain of coll__reduce calls would. Narrow floats (fp16, bf16, fp8)
 * accumulate in fp32 and round to the format once, at the end: more accurate than rounding
 * k - 1 times, and for k == 2 the same bits as coll__reduce. k == 1 copies src[0].
 * dst may be one of the inputs exactly, never a partial overlap.
 * COLL_INVALID_ARGUMENT (nothing written) for k out of range, a NULL input with count > 0,
 * or an unknown dtype or op.
 */
COLL_INTERNAL coll_status_t coll__reduce_n(void *dst, const void *const *src, int k, size_t count,
                                           coll_dtype_t dt, coll_op_t op);

/* memcpy(dst, src, bytes) for buffers that do not overlap, with non-temporal stores from
 * coll__reduce_stream_bytes() up (then ordered by an sfence before it returns). */
COLL_INTERNAL void coll__copy(void *dst, const void *src, size_t bytes);
/* coll__copy with non-temporal stores whatever the size (where the CPU has them): for a
 * piece of a larger destination that as a whole will not stay in cache. */
COLL_INTERNAL void coll__copy_stream(void *dst, const void *src, size_t bytes);

/* dst[i] = dst[i] / n: the end of COLL_AVG (integers: truncating division). */
COLL_INTERNAL void coll__reduce_div(void *dst, size_t count, coll_dtype_t dt, uint64_t n);

/*
 * Instruction set and streaming threshold: chosen once per process, from COLL_REDUCE_ISA
 * and COLL_REDUCE_STREAM_BYTES (src/base/param.c) or the CPU and its cache sizes. The
 * setters are for tests and benchmarks; they are process-wide and not meant to race with
 * reductions running in other threads.
 */
/* Name of the set in use: "scalar", "sse2", "avx2", "avx512", "avx512vbmi" ("generic"
 * off x86). */
COLL_INTERNAL const char *coll__reduce_isa(void);
/* The i-th set this CPU can run, from the scalar reference up; NULL past the last. */
COLL_INTERNAL const char *coll__reduce_isa_supported(size_t i);
/* Use the named set (NULL or "": the best). COLL_INVALID_ARGUMENT: unknown here or not
 * supported by this CPU; the set in use stays. */
COLL_INTERNAL coll_status_t coll__reduce_set_isa(const char *name);
/* Outputs of at least this many bytes use non-temporal stores (SIZE_MAX: never). */
COLL_INTERNAL size_t coll__reduce_stream_bytes(void);
COLL_INTERNAL void coll__reduce_set_stream_bytes(size_t bytes); /* 0: the default again */

#endif /* COLL_REDUCE_H */
