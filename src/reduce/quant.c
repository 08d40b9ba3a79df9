/*
 * quant.c - the gradient codecs of quant.h on the host: encode fp32/fp16/bf16 to the wire
 * layout, decode (set, add, subtract) back to fp32, and error feedback on top.
 *
 * Divisions: 1 descriptors (validation, sizes), 2 loads and block headers, 3 encoders,
 * 4 decoders, 5 entry points, 6 error feedback.
 *
 * Shape of the code: the per-element math is quant_elem.h's (shared with CUDA). Here each
 * codec has one block body written once, always inlined with the source dtype, rounding
 * mode and decode operation as constants, and one small dispatch function per codec that
 * instantiates it for each combination. So every inner loop is a plain indexed loop over
 * one block with no branch on the mode inside, which the compiler vectorizes (checked with
 * GCC 12 -fopt-info-vec and clang 14 -Rpass=loop-vectorize: all of them with clang; GCC
 * leaves SIGN1's bit packing and unpacking scalar).
 */
#include "quant.h"

#include "quant_elem.h"

#include <stdlib.h>
#include <string.h>

/*
 * As in reduce.c: GCC at -O2 uses the "very cheap" vectorizer cost model, which refuses any
 * loop whose trip count is not a known multiple of the vector width (every block loop
 * here), so ask for the dynamic model on this file's functions. clang needs nothing.
 *
 * And no contraction of a * b + c into one fused multiply-add, whatever the language mode
 * and target: decode_add promises decode, then one rounded addition (so acc equals
 * decode + add bit for bit, and error feedback's residual is exactly what was dropped).
 */
#if defined(__GNUC__) && !defined(__clang__)
#define QUANT_VECTORIZE                                                                            \
    __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic", "fp-contract=off")))
#else
#define QUANT_VECTORIZE
#endif
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif
#define QUANT_INLINE static inline __attribute__((always_inline))

/* Decode operations: dst = v, dst += v (the owner's reduction), dst -= v (error feedback). */
enum { OP_SET, OP_ADD, OP_SUB };

/* Elements per tile of error feedback: 64 KiB of fp32, so the three passes over a tile
 * (add gradient, encode, subtract decoded) run from cache. */
#define FEEDBACK_TILE 16384u

/* ---- 1 descriptors ------------------------------------------------------------------------ */

static const char *const codec_names[COLL_NUM_CODECS] = {
    [COLL_CODEC_FP16] = "fp16", [COLL_CODEC_BF16] = "bf16",   [COLL_CODEC_INT8] = "int8",
    [COLL_CODEC_E4M3] = "e4m3", [COLL_CODEC_E5M2] = "e5m2",   [COLL_CODEC_INT4] = "int4",
    [COLL_CODEC_E3M0] = "e3m0", [COLL_CODEC_SIGN1] = "sign1",
};

const char *coll__codec_name(enum coll_codec codec)
{
    return (unsigned)codec < COLL_NUM_CODECS ? codec_names[codec] : "unknown";
}

static bool has_blocks(enum coll_codec c)
{
    return c != COLL_CODEC_FP16 && c != COLL_CODEC_BF16;
}

static bool is_4bit(enum coll_codec c)
{
    return c == COLL_CODEC_INT4 || c == COLL_CODEC_E3M0;
}

/* Payload bytes of n elements of a block codec. */
static inline size_t payload_bytes(enum coll_codec c, size_t n)
{
    if (is_4bit(c))
        return n / 2 + (n & 1);
    if (c == COLL_CODEC_SIGN1)
        return n / 8 + ((n & 7) != 0);
    return n;
}

static inline size_t scale_bytes(const struct coll_quant_desc *d)
{
    return d->scale_dtype == COLL_FLOAT16 ? 2 : 4;
}

static bool src_dtype_ok(coll_dtype_t dt)
{
    return dt == COLL_FLOAT32 || dt == COLL_FLOAT16 || dt == COLL_BFLOAT16;
}

/* validate without a message, for the pure queries */
static bool desc_ok(const struct coll_quant_desc *d)
{
    if (!d || (unsigned)d->codec >= COLL_NUM_CODECS)
        return false;
    if (!has_blocks(d->codec))
        return true;
    return d->block >= 1 && d->block <= COLL_QUANT_BLOCK_MAX &&
           !(is_4bit(d->codec) && (d->block & 1)) &&
           (d->scale_dtype == COLL_FLOAT32 || d->scale_dtype == COLL_FLOAT16);
}

coll_status_t coll__quant_validate(struct coll_comm *comm, const struct coll_quant_desc *desc,
                                   coll_dtype_t src_dtype)
{
    const char *name;

    if (!desc)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "quantization: descriptor is NULL");
    if ((unsigned)desc->codec >= COLL_NUM_CODECS)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "quantization: codec %d is not a coll_codec", (int)desc->codec);
    name = coll__codec_name(desc->codec);
    if (!src_dtype_ok(src_dtype))
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "quantization (%s): source dtype %s is not supported "
                           "(fp32, fp16 or bf16 only)",
                           name, coll__dtype_name(src_dtype));
    if (!has_blocks(desc->codec))
        return COLL_SUCCESS;
    if (desc->block == 0 || desc->block > COLL_QUANT_BLOCK_MAX)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "quantization (%s): block of %u elements is out of range [1, %u]", name,
                           desc->block, COLL_QUANT_BLOCK_MAX);
    if (is_4bit(desc->codec) && (desc->block & 1))
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "quantization (%s): block of %u elements is odd; 4-bit codes pack "
                           "two per byte, so blocks must be even",
                           name, desc->block);
    if (desc->scale_dtype != COLL_FLOAT32 && desc->scale_dtype != COLL_FLOAT16)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "quantization (%s): scale dtype %s is not supported (fp32 or fp16)",
                           name, coll__dtype_name(desc->scale_dtype));
    return COLL_SUCCESS;
}

size_t coll__quant_bytes(const struct coll_quant_desc *desc, size_t count)
{
    size_t full, rest, rec;

    if (!desc_ok(desc))
        return 0;
    if (!has_blocks(desc->codec))
        return 2 * count;
    full = count / desc->block;
    rest = count % desc->block;
    rec = scale_bytes(desc) + payload_bytes(desc->codec, desc->block);
    return full * rec + (rest ? scale_bytes(desc) + payload_bytes(desc->codec, rest) : 0);
}

/* ---- 2 loads and block headers ---------------------------------------------------------- */

/* Element i of a source as fp32 (exact: fp16 and bf16 widen exactly). dt is a constant at
 * every call site after inlining, so the branches fold away. */
QUANT_INLINE float load(const void *restrict src, size_t i, coll_dtype_t dt)
{
    if (dt == COLL_FLOAT16)
        return coll__f16_to_f32(((const uint16_t *)src)[i]);
    if (dt == COLL_BFLOAT16)
        return coll__bf16_to_f32(((const uint16_t *)src)[i]);
    return ((const float *)src)[i];
}

/* Bits of the block's max |x|. As integers, non-negative floats order like their values and
 * NaN sorts above Inf, so one integer max (which vectorizes; a float max with NaN does not)
 * gives amax and says whether the block is finite: bits < 0x7f800000. */
QUANT_INLINE uint32_t block_absmax_bits(const void *restrict src, size_t n, coll_dtype_t dt)
{
    uint32_t m = 0;

    for (size_t j = 0; j < n; j++) {
        uint32_t a = coll__f32_bits(load(src, j, dt)) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

/* Mean |x| of a finite block. Summed in double, in 8 interleaved partial sums: it cannot
 * overflow (65536 * FLT_MAX is far below DBL_MAX), it is accurate, the order is fixed (so
 * the result is reproducible), and the loop still vectorizes without reassociation. */
QUANT_INLINE float block_absmean(const void *restrict src, size_t n, coll_dtype_t dt)
{
    double part[8] = {0}, s;
    size_t j = 0;

    for (; j + 8 <= n; j += 8)
        for (size_t t = 0; t < 8; t++)
            part[t] += coll__bits_f32(coll__f32_bits(load(src, j + t, dt)) & 0x7fffffffu);
    s = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    for (; j < n; j++)
        s += coll__bits_f32(coll__f32_bits(load(src, j, dt)) & 0x7fffffffu);
    return (float)(s / (double)n); /* <= amax: finite */
}

/* Store the block magnitude m (NaN for a non-finite block) in the header; return it as the
 * decoder will read it, which is what the encoder must scale by. */
QUANT_INLINE float put_magnitude(uint8_t *restrict hdr, coll_dtype_t sdt, float m, int keep_nonzero)
{
    if (sdt == COLL_FLOAT16) {
        uint16_t h = coll__quant_scale_to_f16(m, keep_nonzero);
        memcpy(hdr, &h, sizeof(h));
        return coll__f16_to_f32(h);
    } else {
        uint32_t b = (m - m) == 0.0f ? coll__f32_bits(m) : 0x7fc00000u; /* Inf, NaN -> NaN */
        memcpy(hdr, &b, sizeof(b));
        return coll__bits_f32(b);
    }
}

QUANT_INLINE float get_magnitude(const uint8_t *restrict hdr, coll_dtype_t sdt)
{
    if (sdt == COLL_FLOAT16) {
        uint16_t h;
        memcpy(&h, hdr, sizeof(h));
        return coll__f16_to_f32(h);
    } else {
        uint32_t b;
        memcpy(&b, hdr, sizeof(b));
        return coll__bits_f32(b);
    }
}

static float codec_qmax(enum coll_codec c)
{
    switch (c) {
    case COLL_CODEC_INT8:
        return COLL__QUANT_INT8_MAX;
    case COLL_CODEC_E4M3:
        return COLL__QUANT_E4M3_MAX;
    case COLL_CODEC_E5M2:
        return COLL__QUANT_E5M2_MAX;
    case COLL_CODEC_INT4:
        return COLL__QUANT_INT4_MAX;
    default: /* E3M0, SIGN1: the magnitude itself is the largest value */
        return 1.0f;
    }
}

/* ---- 3 encoders ----------------------------------------------------------------------- */

/* An element on an integer grid [-qmax, qmax]: v = x * inv already in range after the clamp. */
QUANT_INLINE int32_t round_int(float v, int sr, uint64_t key, uint64_t idx)
{
    return sr ? coll__quant_sr_i32(v, coll__quant_noise(key, idx)) : coll__quant_rne_i32(v);
}

QUANT_INLINE uint8_t round_fp8(float v, int e5, int sr, uint64_t key, uint64_t idx)
{
    if (e5)
        return sr ? coll__quant_sr_e5m2(v, coll__quant_noise(key, idx)) : coll__f32_to_e5m2(v);
    return sr ? coll__quant_sr_e4m3(v, coll__quant_noise(key, idx)) : coll__f32_to_e4m3(v);
}

/* One 4-bit code: INT4 (two's complement nibble) or E3M0. */
QUANT_INLINE uint32_t round_4bit(float x, float inv, enum coll_codec c, int sr, uint64_t key,
                                 uint64_t idx)
{
    if (c == COLL_CODEC_INT4) {
        float v = coll__quant_clamp(x * inv, COLL__QUANT_INT4_MAX);
        return (uint32_t)round_int(v, sr, key, idx) & 15u;
    }
    return coll__quant_to_e3m0(coll__quant_clamp(x * inv, 1.0f),
                               sr ? coll__quant_noise(key, idx) : 0, sr);
}

/* The sign bit SIGN1 sends for x: its own (deterministic), or 1 (negative) with probability
 * (1 - x / amax) / 2 (stochastic: inv = 1 / amax). */
QUANT_INLINE uint32_t sign_bit(float x, float inv, int sr, uint64_t key, uint64_t idx)
{
    if (sr) {
        float p_plus = 0.5f + 0.5f * coll__quant_clamp(x * inv, 1.0f);
        return coll__quant_unit(coll__quant_noise(key, idx)) < p_plus ? 0u : 1u;
    }
    return coll__f32_bits(x) >> 31;
}

/* The payload of one finite block of n elements, element j having noise index idx + j. */
QUANT_INLINE void encode_payload(const void *restrict x, size_t n, coll_dtype_t dt,
                                 enum coll_codec c, int sr, float inv, uint64_t key, uint64_t idx,
                                 uint8_t *restrict out)
{
    switch (c) {
    case COLL_CODEC_INT8:
        for (size_t j = 0; j < n; j++) {
            float v = coll__quant_clamp(load(x, j, dt) * inv, COLL__QUANT_INT8_MAX);
            out[j] = (uint8_t)round_int(v, sr, key, idx + j);
        }
        break;
    case COLL_CODEC_E4M3:
    case COLL_CODEC_E5M2: {
        const int e5 = c == COLL_CODEC_E5M2;
        const float fmax = e5 ? COLL__QUANT_E5M2_MAX : COLL__QUANT_E4M3_MAX;
        for (size_t j = 0; j < n; j++) {
            float v = coll__quant_clamp(load(x, j, dt) * inv, fmax);
            out[j] = round_fp8(v, e5, sr, key, idx + j);
        }
        break;
    }
    case COLL_CODEC_INT4:
    case COLL_CODEC_E3M0: {
        const size_t pairs = n / 2;
        for (size_t j = 0; j < pairs; j++) {
            uint32_t lo = round_4bit(load(x, 2 * j, dt), inv, c, sr, key, idx + 2 * j);
            uint32_t hi = round_4bit(load(x, 2 * j + 1, dt), inv, c, sr, key, idx + 2 * j + 1);
            out[j] = (uint8_t)(lo | hi << 4);
        }
        if (n & 1)
            out[pairs] = (uint8_t)round_4bit(load(x, n - 1, dt), inv, c, sr, key, idx + n - 1);
        break;
    }
    case COLL_CODEC_SIGN1: {
        const size_t bytes = n / 8;
        for (size_t k = 0; k < bytes; k++) {
            uint32_t b = 0;
            for (size_t t = 0; t < 8; t++)
                b |= sign_bit(load(x, 8 * k + t, dt), inv, sr, key, idx + 8 * k + t) << t;
            out[k] = (uint8_t)b;
        }
        if (n & 7) {
            uint32_t b = 0;
            for (size_t j = 8 * bytes; j < n; j++)
                b |= sign_bit(load(x, j, dt), inv, sr, key, idx + j) << (j & 7);
            out[bytes] = (uint8_t)b;
        }
        break;
    }
    default:
        break;
    }
}

/* The records of a block codec for count elements; noise index of element i: index0 + i. */
QUANT_INLINE void encode_blocks(const struct coll_quant_desc *d, const void *restrict src,
                                coll_dtype_t dt, size_t count, uint64_t index0,
                                uint8_t *restrict dst, enum coll_codec c, int sr)
{
    const size_t esz = dt == COLL_FLOAT32 ? 4 : 2, sb = scale_bytes(d);
    const float qmax = codec_qmax(c);
    const uint64_t key = coll__quant_key(d->seed);

    for (size_t off = 0; off < count; off += d->block) {
        const size_t n = COLL_MIN((size_t)d->block, count - off);
        const void *x = (const char *)src + off * esz;
        uint8_t *pay = dst + sb;
        const size_t pb = payload_bytes(c, n);
        const uint32_t amax_bits = block_absmax_bits(x, n, dt);
        float m = coll__bits_f32(amax_bits);

        if (amax_bits >= 0x7f800000u)
            m = coll__bits_f32(0x7fc00000u);
        else if (c == COLL_CODEC_SIGN1 && !sr)
            m = block_absmean(x, n, dt);
        m = put_magnitude(dst, d->scale_dtype, m, c != COLL_CODEC_SIGN1 || sr);
        if ((m - m) != 0.0f)
            memset(pay, 0, pb); /* the block decodes as NaN whatever the payload */
        else
            encode_payload(x, n, dt, c, sr, coll__quant_inv(qmax, m), key, index0 + off, pay);
        dst = pay + pb;
    }
}

/* FP16 and BF16: element by element, no header. Codes stored through memcpy: the encoded
 * buffer need not be aligned. */
QUANT_INLINE void encode_elems(const struct coll_quant_desc *d, const void *restrict src,
                               coll_dtype_t dt, size_t count, uint64_t index0,
                               uint8_t *restrict dst, enum coll_codec c, int sr)
{
    const uint64_t key = coll__quant_key(d->seed);

    for (size_t i = 0; i < count; i++) {
        float x = load(src, i, dt);
        uint16_t h;
        if (c == COLL_CODEC_FP16)
            h = sr ? coll__quant_sr_f16(x, coll__quant_noise(key, index0 + i))
                   : coll__f32_to_f16(x);
        else
            h = sr ? coll__quant_sr_bf16(x, coll__quant_noise(key, index0 + i))
                   : coll__f32_to_bf16(x);
        memcpy(dst + 2 * i, &h, sizeof(h));
    }
}

typedef void (*encode_fn)(const struct coll_quant_desc *d, const void *src, coll_dtype_t dt,
                          size_t count, uint64_t index0, uint8_t *dst);

/* One function per codec: the body instantiated for 3 source dtypes x 2 rounding modes. */
#define ENCODE_CODEC(name, CODEC, body)                                                            \
    static QUANT_VECTORIZE void encode_##name(const struct coll_quant_desc *d, const void *src,    \
                                              coll_dtype_t dt, size_t count, uint64_t index0,      \
                                              uint8_t *dst)                                        \
    {                                                                                              \
        if (dt == COLL_FLOAT16 && d->stochastic)                                                   \
            body(d, src, COLL_FLOAT16, count, index0, dst, CODEC, 1);                              \
        else if (dt == COLL_FLOAT16)                                                               \
            body(d, src, COLL_FLOAT16, count, index0, dst, CODEC, 0);                              \
        else if (dt == COLL_BFLOAT16 && d->stochastic)                                             \
            body(d, src, COLL_BFLOAT16, count, index0, dst, CODEC, 1);                             \
        else if (dt == COLL_BFLOAT16)                                                              \
            body(d, src, COLL_BFLOAT16, count, index0, dst, CODEC, 0);                             \
        else if (d->stochastic)                                                                    \
            body(d, src, COLL_FLOAT32, count, index0, dst, CODEC, 1);                              \
        else                                                                                       \
            body(d, src, COLL_FLOAT32, count, index0, dst, CODEC, 0);                              \
    }

ENCODE_CODEC(fp16, COLL_CODEC_FP16, encode_elems)
ENCODE_CODEC(bf16, COLL_CODEC_BF16, encode_elems)
ENCODE_CODEC(int8, COLL_CODEC_INT8, encode_blocks)
ENCODE_CODEC(e4m3, COLL_CODEC_E4M3, encode_blocks)
ENCODE_CODEC(e5m2, COLL_CODEC_E5M2, encode_blocks)
ENCODE_CODEC(int4, COLL_CODEC_INT4, encode_blocks)
ENCODE_CODEC(e3m0, COLL_CODEC_E3M0, encode_blocks)
ENCODE_CODEC(sign1, COLL_CODEC_SIGN1, encode_blocks)

static const encode_fn encode_table[COLL_NUM_CODECS] = {
    [COLL_CODEC_FP16] = encode_fp16, [COLL_CODEC_BF16] = encode_bf16,
    [COLL_CODEC_INT8] = encode_int8, [COLL_CODEC_E4M3] = encode_e4m3,
    [COLL_CODEC_E5M2] = encode_e5m2, [COLL_CODEC_INT4] = encode_int4,
    [COLL_CODEC_E3M0] = encode_e3m0, [COLL_CODEC_SIGN1] = encode_sign1,
};

/* ---- 4 decoders ------------------------------------------------------------------------- */

QUANT_INLINE void put(float *restrict dst, size_t j, float v, int op)
{
    if (op == OP_SET)
        dst[j] = v;
    else if (op == OP_ADD)
        dst[j] += v;
    else
        dst[j] -= v;
}

/* One block's payload times its step s (NaN for a non-finite block: every product is NaN,
 * zero codes included, so no branch is needed for that case). */
QUANT_INLINE void decode_payload(const uint8_t *restrict p, size_t n, float s, enum coll_codec c,
                                 float *restrict dst, int op)
{
    switch (c) {
    case COLL_CODEC_INT8:
        for (size_t j = 0; j < n; j++)
            put(dst, j, (float)(int8_t)p[j] * s, op);
        break;
    case COLL_CODEC_E4M3:
        for (size_t j = 0; j < n; j++)
            put(dst, j, coll__e4m3_to_f32(p[j]) * s, op);
        break;
    case COLL_CODEC_E5M2:
        for (size_t j = 0; j < n; j++)
            put(dst, j, coll__e5m2_to_f32(p[j]) * s, op);
        break;
    case COLL_CODEC_INT4:
    case COLL_CODEC_E3M0: {
        const size_t pairs = n / 2;
        const int i4 = c == COLL_CODEC_INT4;
        for (size_t j = 0; j < pairs; j++) {
            uint32_t b = p[j];
            float lo = i4 ? coll__quant_i4_to_f32(b) : coll__quant_e3m0_to_f32(b & 15u);
            float hi = i4 ? coll__quant_i4_to_f32(b >> 4) : coll__quant_e3m0_to_f32(b >> 4);
            put(dst, 2 * j, lo * s, op);
            put(dst, 2 * j + 1, hi * s, op);
        }
        if (n & 1) {
            uint32_t b = p[pairs];
            put(dst, n - 1, (i4 ? coll__quant_i4_to_f32(b) : coll__quant_e3m0_to_f32(b & 15u)) * s,
                op);
        }
        break;
    }
    case COLL_CODEC_SIGN1: {
        /* +-s by or-ing the sign bit into s (s >= 0, or the positive NaN). Byte by byte, with
         * a mask per constant bit position: no per-element shift by a variable amount, so
         * the eight elements of a byte vectorize (SLP) even on SSE2. */
        const uint32_t sb = coll__f32_bits(s);
        const size_t bytes = n / 8;
        for (size_t k = 0; k < bytes; k++) {
            const uint32_t b = p[k];
            for (size_t t = 0; t < 8; t++) {
                uint32_t neg = 0u - (uint32_t)((b & (1u << t)) != 0);
                put(dst, 8 * k + t, coll__bits_f32(sb | (neg & 0x80000000u)), op);
            }
        }
        for (size_t j = 8 * bytes; j < n; j++)
            put(dst, j, coll__bits_f32(sb | ((uint32_t)(p[j >> 3] >> (j & 7)) & 1u) << 31), op);
        break;
    }
    default:
        break;
    }
}

QUANT_INLINE void decode_blocks(const struct coll_quant_desc *d, const uint8_t *restrict src,
                                size_t count, float *restrict dst, enum coll_codec c, int op)
{
    const size_t sb = scale_bytes(d);
    const float qmax = codec_qmax(c);

    for (size_t off = 0; off < count; off += d->block) {
        const size_t n = COLL_MIN((size_t)d->block, count - off);
        const float s = get_magnitude(src, d->scale_dtype) / qmax;

        decode_payload(src + sb, n, s, c, dst + off, op);
        src += sb + payload_bytes(c, n);
    }
}

QUANT_INLINE void decode_elems(const struct coll_quant_desc *d, const uint8_t *restrict src,
                               size_t count, float *restrict dst, enum coll_codec c, int op)
{
    (void)d;
    for (size_t i = 0; i < count; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, sizeof(h));
        put(dst, i, c == COLL_CODEC_FP16 ? coll__f16_to_f32(h) : coll__bf16_to_f32(h), op);
    }
}

typedef void (*decode_fn)(const struct coll_quant_desc *d, const uint8_t *src, size_t count,
                          float *dst, int op);

#define DECODE_CODEC(name, CODEC, body)                                                            \
    static QUANT_VECTORIZE void decode_##name(const struct coll_quant_desc *d, const uint8_t *src, \
                                              size_t count, float *dst, int op)                    \
    {                                                                                              \
        if (op == OP_SET)                                                                          \
            body(d, src, count, dst, CODEC, OP_SET);                                               \
        else if (op == OP_ADD)                                                                     \
            body(d, src, count, dst, CODEC, OP_ADD);                                               \
        else                                                                                       \
            body(d, src, count, dst, CODEC, OP_SUB);                                               \
    }

DECODE_CODEC(fp16, COLL_CODEC_FP16, decode_elems)
DECODE_CODEC(bf16, COLL_CODEC_BF16, decode_elems)
DECODE_CODEC(int8, COLL_CODEC_INT8, decode_blocks)
DECODE_CODEC(e4m3, COLL_CODEC_E4M3, decode_blocks)
DECODE_CODEC(e5m2, COLL_CODEC_E5M2, decode_blocks)
DECODE_CODEC(int4, COLL_CODEC_INT4, decode_blocks)
DECODE_CODEC(e3m0, COLL_CODEC_E3M0, decode_blocks)
DECODE_CODEC(sign1, COLL_CODEC_SIGN1, decode_blocks)

static const decode_fn decode_table[COLL_NUM_CODECS] = {
    [COLL_CODEC_FP16] = decode_fp16, [COLL_CODEC_BF16] = decode_bf16,
    [COLL_CODEC_INT8] = decode_int8, [COLL_CODEC_E4M3] = decode_e4m3,
    [COLL_CODEC_E5M2] = decode_e5m2, [COLL_CODEC_INT4] = decode_int4,
    [COLL_CODEC_E3M0] = decode_e3m0, [COLL_CODEC_SIGN1] = decode_sign1,
};

/* ---- 5 entry points --------------------------------------------------------------------- */

coll_status_t coll__quant_encode_at(const struct coll_quant_desc *desc, const void *src,
                                    coll_dtype_t src_dtype, size_t count, uint64_t index0,
                                    void *dst)
{
    coll_status_t st = coll__quant_validate(NULL, desc, src_dtype);

    if (st != COLL_SUCCESS)
        return st;
    if (has_blocks(desc->codec) && index0 % desc->block != 0)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "quantization (%s): slice starts at element %llu, not a multiple "
                           "of the block (%u)",
                           coll__codec_name(desc->codec), (unsigned long long)index0, desc->block);
    if (count == 0)
        return COLL_SUCCESS;
    if (!src || !dst)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "quantization (%s): %s is NULL",
                           coll__codec_name(desc->codec), src ? "dst" : "src");
    encode_table[desc->codec](desc, src, src_dtype, count, index0, dst);
    return COLL_SUCCESS;
}

coll_status_t coll__quant_encode(const struct coll_quant_desc *desc, const void *src,
                                 coll_dtype_t src_dtype, size_t count, void *dst)
{
    return coll__quant_encode_at(desc, src, src_dtype, count, 0, dst);
}

static coll_status_t decode_op(const struct coll_quant_desc *desc, const void *src, size_t count,
                               float *dst, int op)
{
    coll_status_t st = coll__quant_validate(NULL, desc, COLL_FLOAT32);

    if (st != COLL_SUCCESS)
        return st;
    if (count == 0)
        return COLL_SUCCESS;
    if (!src || !dst)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "quantization (%s): %s is NULL",
                           coll__codec_name(desc->codec), src ? "dst" : "src");
    decode_table[desc->codec](desc, src, count, dst, op);
    return COLL_SUCCESS;
}

coll_status_t coll__quant_decode(const struct coll_quant_desc *desc, const void *src, size_t count,
                                 float *dst)
{
    return decode_op(desc, src, count, dst, OP_SET);
}

coll_status_t coll__quant_decode_add(const struct coll_quant_desc *desc, const void *src,
                                     size_t count, float *acc)
{
    return decode_op(desc, src, count, acc, OP_ADD);
}

/* ---- 6 error feedback ------------------------------------------------------------------- */

coll_status_t coll__quant_feedback_init(struct coll_quant_feedback *fb, size_t count)
{
    float *r = NULL;

    if (!fb)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "error feedback: fb is NULL");
    fb->residual = NULL;
    fb->count = 0;
    if (count > SIZE_MAX / sizeof(*r))
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "error feedback: %zu elements overflow a buffer size", count);
    if (count > 0) {
        r = calloc(count, sizeof(*r));
        if (!r)
            return coll__error(NULL, COLL_SYSTEM_ERROR,
                               "error feedback: out of memory for a residual of %zu elements",
                               count);
    }
    fb->residual = r;
    fb->count = count;
    return COLL_SUCCESS;
}

void coll__quant_feedback_fini(struct coll_quant_feedback *fb)
{
    if (!fb)
        return;
    free(fb->residual);
    fb->residual = NULL;
    fb->count = 0;
}

void coll__quant_feedback_reset(struct coll_quant_feedback *fb)
{
    if (fb && fb->count > 0)
        memset(fb->residual, 0, fb->count * sizeof(*fb->residual));
}

static QUANT_VECTORIZE void add_into(float *restrict r, const float *restrict g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        r[i] += g[i];
}

coll_status_t coll__quant_feedback_apply(struct coll_quant_feedback *fb, const float *grad,
                                         size_t count, const struct coll_quant_desc *desc,
                                         void *dst)
{
    coll_status_t st = coll__quant_validate(NULL, desc, COLL_FLOAT32);
    size_t tile = FEEDBACK_TILE;

    if (st != COLL_SUCCESS)
        return st;
    if (!fb)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "error feedback: fb is NULL");
    if (count != fb->count)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "error feedback: gradient of %zu elements, residual of %zu", count,
                           fb->count);
    /* Stochastic SIGN1 sends +-amax: its error can exceed the value (up to 2 amax), so the
     * residual feeds a growing amax and diverges (to Inf within a few hundred steps). */
    if (desc->codec == COLL_CODEC_SIGN1 && desc->stochastic)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "error feedback: stochastic sign1 diverges under error feedback "
                           "(its error exceeds the value); use deterministic sign1");
    if (count == 0)
        return COLL_SUCCESS;
    if (!grad || !dst)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "error feedback: %s is NULL",
                           grad ? "dst" : "grad");

    /* Tiles of whole blocks, so that each tile is a slice of the one encoding (quant.h). */
    if (has_blocks(desc->codec))
        tile =
            desc->block >= FEEDBACK_TILE ? desc->block : FEEDBACK_TILE / desc->block * desc->block;
    for (size_t off = 0; off < count; off += tile) {
        const size_t n = COLL_MIN(tile, count - off);
        float *r = fb->residual + off;
        uint8_t *out = (uint8_t *)dst + coll__quant_bytes(desc, off);

        add_into(r, grad + off, n);                                    /* r = g + r */
        encode_table[desc->codec](desc, r, COLL_FLOAT32, n, off, out); /* out = q(r) */
        decode_table[desc->codec](desc, out, n, r, OP_SUB);            /* r -= dq(out) */
    }
    return COLL_SUCCESS;
}
