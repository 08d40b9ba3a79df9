/*
 * quant.h - gradient codecs: fp32/fp16/bf16 tensors encoded to fewer bytes for the wire,
 * decoded (or decoded and accumulated) back to fp32. The quantized all-reduce encodes what
 * it sends, and the owner of a slice decode-adds what it receives into an fp32 accumulator.
 * The per-element math is quant_elem.h's, shared with the CUDA kernels.
 *
 * Codecs (qmax: what the block's magnitude m maps to; element = code * m / qmax):
 *
 *   codec   element                         m per block            bytes per element
 *   FP16    IEEE binary16, per element      none                   2
 *   BF16    bfloat16, per element           none                   2
 *   INT8    integer in [-127, 127]          absmax, qmax 127       1     (+ m per block)
 *   E4M3    OCP fp8 E4M3                    absmax, qmax 448       1
 *   E5M2    OCP fp8 E5M2                    absmax, qmax 57344     1
 *   INT4    integer in [-7, 7], 2 per byte  absmax, qmax 7         1/2
 *   E3M0    4-bit float s.eee, 2 per byte   absmax, qmax 1         1/2
 *   SIGN1   sign bit, 8 per byte            mean |x|, qmax 1       1/8
 *
 * E3M0 (quant_elem.h section 4): code 0 is zero, codes 1..7 are 2^-6 .. 2^0, so a block's
 * grid is {0, +-amax 2^-6, +-amax 2^-5, ..., +-amax}: seven powers of two below and at the
 * block maximum (which is exact), then zero. Scaling by absmax rather than by a power of
 * two keeps the largest element exact, where gradients matter most.
 * SIGN1 decodes every element as +-m, m = mean |x| of its block (the scaled sign
 * compressor of EF-signSGD; +-0 follows its sign bit). With stochastic rounding it stores
 * m = absmax instead and sends + with probability (1 + x / m) / 2, the only +-m choice whose
 * expectation is x.
 *
 * Wire layout, contiguous, host byte order (little-endian on every target we build for),
 * no alignment required of either buffer:
 *   FP16, BF16: count 2-byte codes.
 *   others: one record per block of `block` elements (the last one may be partial):
 *           [m: 4 bytes fp32 or 2 bytes fp16][payload]
 *           payload: INT8/E4M3/E5M2 one byte per element; 4-bit codecs two per byte,
 *           element 2i in the low nibble of byte i (an odd tail leaves a zero high nibble;
 *           INT4 is a two's complement nibble); SIGN1 eight per byte, element i in bit
 *           i % 8 of byte i / 8, 1 = negative (tail bits zero).
 * Because records follow one another, elements [a, a + n) with a a multiple of the block
 * occupy bytes [coll__quant_bytes(a), coll__quant_bytes(a + n)) of the whole tensor's
 * encoding (when a + n is the tensor's end or also a multiple of the block): a pipeline can
 * send byte slices of one encoding, or encode slices alone with coll__quant_encode_at.
 *
 * Rounding: to nearest, ties to even (integers: even integer; floats: elem.h's conversions;
 * E3M0: even code). With desc.stochastic, each element rounds to the grid value above or
 * below with probabilities that make the expected value exact, drawn from a hash of
 * (seed, element index) (quant_elem.h): the same seed gives the same bytes, on any thread
 * split. Ranks that quantize the same slot must use different seeds, or their rounding
 * errors are correlated and do not average out. Decoding never depends on seed or mode.
 *
 * Non-finite input: FP16 and BF16 are element by element and IEEE (NaN -> NaN, +-Inf ->
 * +-Inf, overflow past max finite -> +-Inf). A block codec cannot scale Inf next to finite
 * values, so a NaN or Inf anywhere in a block makes the WHOLE block decode as NaN (its m is
 * stored as NaN, its payload as zeros); so does an fp16 m that cannot be stored (>= 65536).
 * Nothing non-finite ever decodes as a finite value.
 *
 * Magnitude dtype (desc.scale_dtype): fp32 stores m exactly. fp16 saves 2 bytes per block
 * but rounds m toward zero (the elements above the rounded m clamp: bounds below then hold
 * up to 2^-11 of m), resolves maxima below 2^-14 only in steps of 2^-24 (fp16 subnormals),
 * and limits m to < 65536 (above: NaN, see above). With fp32, blocks whose maximum is below
 * ~1e-36 (qmax / amax past FLT_MAX) or whose step amax / qmax is subnormal lose precision,
 * never more than amax.
 *
 * Error bounds per element, for a finite block with maximum |x| = amax and fp32 m, round to
 * nearest (tests/test_quant.c asserts each, plus fp32 rounding of the scaling):
 *   FP16: half an ulp, max(|x| 2^-11, 2^-25).   BF16: max(|x| 2^-8, 2^-134).
 *   INT8: amax / 254.   INT4: amax / 14.
 *   E4M3: max(|x| 2^-4, amax / 448 * 2^-10).   E5M2: max(|x| 2^-3, amax / 57344 * 2^-17).
 *   E3M0: max(|x| / 3, amax * 2^-7).   SIGN1: the decoded value is sign(x) * mean |x|.
 * Stochastic rounding errs by less than the gap between the two grid values around x
 * (twice the bounds above; E3M0: |x|, or amax 2^-6 below the grid; SIGN1: 2 amax).
 *
 * Arithmetic: decode is one fp32 multiply per element, code * (m / qmax) (SIGN1: +-m, no
 * multiply); decode_add adds that value to acc with one more rounding, never fused (a CUDA
 * port must build with --fmad=false or use __fmul_rn/__fadd_rn to agree bit for bit).
 * Block sums (SIGN1's mean) are in double, in a fixed order.
 *
 * Thread safety: every function here is reentrant; none allocates except feedback_init.
 */
#ifndef COLL_REDUCE_QUANT_H
#define COLL_REDUCE_QUANT_H

#include "../base/base.h"

enum coll_codec {
    COLL_CODEC_FP16 = 0,
    COLL_CODEC_BF16 = 1,
    COLL_CODEC_INT8 = 2,
    COLL_CODEC_E4M3 = 3,
    COLL_CODEC_E5M2 = 4,
    COLL_CODEC_INT4 = 5,
    COLL_CODEC_E3M0 = 6,
    COLL_CODEC_SIGN1 = 7,
    COLL_NUM_CODECS = 8
};

#define COLL_QUANT_BLOCK_DEFAULT 256u
#define COLL_QUANT_BLOCK_MAX 65536u

/* How to encode. block and scale_dtype only matter for block codecs (FP16/BF16 ignore
 * them); seed only when stochastic. Start from COLL_QUANT_DESC_INIT(codec). */
struct coll_quant_desc {
    enum coll_codec codec;
    uint32_t block;           /* elements per scale block: 1..65536, even for INT4/E3M0 */
    coll_dtype_t scale_dtype; /* COLL_FLOAT32 (default) or COLL_FLOAT16 */
    bool stochastic;          /* false: round to nearest even; true: stochastic rounding */
    uint64_t seed;            /* stochastic noise stream */
};

#define COLL_QUANT_DESC_INIT(c)                                                                    \
    ((struct coll_quant_desc){.codec = (c),                                                        \
                              .block = COLL_QUANT_BLOCK_DEFAULT,                                   \
                              .scale_dtype = COLL_FLOAT32,                                         \
                              .stochastic = false,                                                 \
                              .seed = 0})

/* "fp16", "bf16", "int8", "e4m3", "e5m2", "int4", "e3m0", "sign1"; "unknown" otherwise. */
COLL_INTERNAL const char *coll__codec_name(enum coll_codec codec);

/* Check desc for sources of src_dtype (COLL_FLOAT32, COLL_FLOAT16 or COLL_BFLOAT16):
 * COLL_INVALID_ARGUMENT with a message on comm (NULL: the calling thread's) naming what is
 * wrong: unknown codec, source dtype, scale dtype, block 0 or above 65536, odd block for a
 * 4-bit codec. Every function below checks its desc the same way (message on the thread),
 * so a caller with a comm validates once up front to get the message where it belongs. */
COLL_INTERNAL coll_status_t coll__quant_validate(struct coll_comm *comm,
                                                 const struct coll_quant_desc *desc,
                                                 coll_dtype_t src_dtype);

/* Exact encoded size of count elements (the layout above; 0 for count 0), or 0 for a desc
 * that does not validate:
 *   FP16/BF16: 2 * count
 *   others:    nblocks * S + full * P(block) + P(rest)
 *              with nblocks = ceil(count / block), full = count / block, rest = count % block,
 *              S = 4 (fp32 scale) or 2 (fp16), P(n) = n (INT8, E4M3, E5M2),
 *              (n + 1) / 2 (INT4, E3M0), (n + 7) / 8 (SIGN1), P(0) = 0. */
COLL_INTERNAL size_t coll__quant_bytes(const struct coll_quant_desc *desc, size_t count);

/* Encode count elements of src (src_dtype) into dst, coll__quant_bytes(desc, count) bytes.
 * src and dst must not overlap. */
COLL_INTERNAL coll_status_t coll__quant_encode(const struct coll_quant_desc *desc, const void *src,
                                               coll_dtype_t src_dtype, size_t count, void *dst);
/* As encode, for the elements [index0, index0 + count) of a larger tensor whose pointer src
 * already points at element index0: index0 sets the stochastic noise, so encoding a tensor
 * in slices (index0 a multiple of the block) gives the same bytes as encoding it whole.
 * index0 not a multiple of the block (block codecs) is COLL_INVALID_ARGUMENT. */
COLL_INTERNAL coll_status_t coll__quant_encode_at(const struct coll_quant_desc *desc,
                                                  const void *src, coll_dtype_t src_dtype,
                                                  size_t count, uint64_t index0, void *dst);

/* dst[i] = decoded element i, i < count (fp32). src: an encoding of exactly count elements
 * (a slice as described above is one); src and dst must not overlap. */
COLL_INTERNAL coll_status_t coll__quant_decode(const struct coll_quant_desc *desc, const void *src,
                                               size_t count, float *dst);
/* acc[i] += decoded element i: what the owner of a slice does with each peer's part. One
 * fp32 addition per element (not fused with the decode's multiply), so acc equals
 * acc + decode bit for bit, whatever the build. src and acc must not overlap. */
COLL_INTERNAL coll_status_t coll__quant_decode_add(const struct coll_quant_desc *desc,
                                                   const void *src, size_t count, float *acc);

/*
 * Error feedback: what quantization drops in one step is added to the next step's gradient,
 * so over many steps the decoded sum tracks the true sum within one quantization error
 * instead of drifting (errors no longer accumulate). One feedback object per tensor; the
 * residual starts at zero.
 */
struct coll_quant_feedback {
    float *residual; /* [count], owned */
    size_t count;
};

/* Allocate a zero residual of count elements (count 0 is allowed). COLL_SYSTEM_ERROR when
 * out of memory; fb is then left empty. */
COLL_INTERNAL coll_status_t coll__quant_feedback_init(struct coll_quant_feedback *fb, size_t count);
/* Free the residual; fb becomes empty. Accepts an empty or zeroed fb. */
COLL_INTERNAL void coll__quant_feedback_fini(struct coll_quant_feedback *fb);
/* Zero the residual (e.g. when a step is thrown away). */
COLL_INTERNAL void coll__quant_feedback_reset(struct coll_quant_feedback *fb);
/* dst = encode(grad + residual) (coll__quant_bytes(desc, count) bytes), then
 * residual = (grad + residual) - decode(dst), in fp32: the residual is exactly what this
 * step dropped. Works in tiles of whole blocks (64 KiB of fp32) so the three passes run from
 * cache. COLL_INVALID_ARGUMENT, fb untouched: count != fb->count, a desc that does not
 * validate, or stochastic SIGN1 (its error can exceed the value, so under feedback the
 * residual grows without bound; deterministic SIGN1 is the EF-signSGD compressor and levels
 * off). A non-finite block leaves NaN in its residual: skip the step and reset. grad and dst
 * must not overlap the residual. */
COLL_INTERNAL coll_status_t coll__quant_feedback_apply(struct coll_quant_feedback *fb,
                                                       const float *grad, size_t count,
                                                       const struct coll_quant_desc *desc,
                                                       void *dst);

#endif /* COLL_REDUCE_QUANT_H */
