/*
 * quant_kernels.cu - the gradient codecs of src/reduce/quant.h on the GPU: encode an fp32
 * tensor to the wire layout, decode (set or add) back to fp32.
 *
 * The per-element math is quant_elem.h's and elem.h's, the same inline functions the host
 * loops in quant.c call, so an element rounds to the same code on both; the layout, the
 * block magnitudes and their rounding (fp16 headers toward zero, NaN for a non-finite
 * block) follow quant.h. Decoding multiplies and adds with __fmul_rn / __fadd_rn, never a
 * fused multiply-add, as quant.c promises (decode_add equals decode, then one addition).
 *
 * Work split: one thread block per codec block (the codec block's maximum is a reduction
 * over it: an integer atomicMax on the magnitude bits in shared memory, which orders
 * floats like values and puts NaN above Inf, as the host's integer max does); fp16/bf16
 * have no blocks and run a grid-stride loop. SIGN1's deterministic magnitude is the mean
 * |x| summed in double in the host's order (8 interleaved partial sums, then the tail),
 * by 8 threads, so that the mean is bit-identical to the host's.
 *
 * Built like reduce_kernels.cu (extern "C" kernels, no host code); these are compiled and
 * checked by the build, and not yet launched: device buffers reach coll's quantized
 * all-reduce through host staging.
 */
#include <stdint.h>

#include "../reduce/quant_elem.h"

/* Mirrors struct coll_quant_desc and the tensor for one launch. */
struct coll_cuda_quant_args {
    const float *src;     /* encode: fp32 input; decode: unused */
    const uint8_t *enc;   /* decode: the encoding */
    uint8_t *dst;         /* encode: the encoding (coll__quant_bytes long) */
    float *out;           /* decode: fp32 output */
    uint64_t count;
    uint64_t index0;      /* noise index of element 0 */
    uint64_t key;         /* coll__quant_key(seed) */
    uint32_t block;
    uint32_t scale_f16;   /* 1: 2-byte fp16 magnitudes */
    uint32_t add;         /* decode: 1 adds into out */
};

enum { Q_FP16, Q_BF16, Q_INT8, Q_E4M3, Q_E5M2, Q_INT4, Q_E3M0, Q_SIGN1 };

__device__ __forceinline__ float q_qmax(int c)
{
    return c == Q_INT8 ? COLL__QUANT_INT8_MAX
           : c == Q_E4M3 ? COLL__QUANT_E4M3_MAX
           : c == Q_E5M2 ? COLL__QUANT_E5M2_MAX
           : c == Q_INT4 ? COLL__QUANT_INT4_MAX
                         : 1.0f;
}

__device__ __forceinline__ uint64_t q_payload(int c, uint64_t n)
{
    return c == Q_INT4 || c == Q_E3M0 ? (n + 1) / 2 : c == Q_SIGN1 ? (n + 7) / 8 : n;
}

/* Byte offset of block b's record: every record before the last is a full one. */
__device__ __forceinline__ uint64_t q_record(int c, const coll_cuda_quant_args &a, uint64_t b)
{
    return b * ((a.scale_f16 ? 2 : 4) + q_payload(c, a.block));
}

/* One element's code. */
template <int C, int SR>
__device__ __forceinline__ uint32_t q_code(float x, float inv, uint64_t key, uint64_t idx)
{
    const uint32_t r24 = SR ? coll__quant_noise(key, idx) : 0u;

    if (C == Q_INT8 || C == Q_INT4) {
        float v = coll__quant_clamp(__fmul_rn(x, inv), q_qmax(C));
        int32_t q = SR ? coll__quant_sr_i32(v, r24) : coll__quant_rne_i32(v);
        return (uint32_t)q & (C == Q_INT8 ? 0xffu : 0xfu);
    }
    if (C == Q_E4M3) {
        float v = coll__quant_clamp(__fmul_rn(x, inv), COLL__QUANT_E4M3_MAX);
        return SR ? coll__quant_sr_e4m3(v, r24) : coll__f32_to_e4m3(v);
    }
    if (C == Q_E5M2) {
        float v = coll__quant_clamp(__fmul_rn(x, inv), COLL__QUANT_E5M2_MAX);
        return SR ? coll__quant_sr_e5m2(v, r24) : coll__f32_to_e5m2(v);
    }
    if (C == Q_E3M0)
        return coll__quant_to_e3m0(coll__quant_clamp(__fmul_rn(x, inv), 1.0f), r24, SR);
    /* SIGN1 */
    if (SR) {
        float p_plus = __fadd_rn(0.5f, __fmul_rn(0.5f, coll__quant_clamp(__fmul_rn(x, inv), 1.0f)));
        return coll__quant_unit(r24) < p_plus ? 0u : 1u;
    }
    return coll__f32_bits(x) >> 31;
}

template <int C, int SR> __device__ void q_encode_block(const coll_cuda_quant_args &a)
{
    __shared__ uint32_t s_max;
    __shared__ double s_part[8];
    __shared__ float s_mag;
    const uint64_t b = blockIdx.x, off = b * a.block;
    const uint32_t n = (uint32_t)(a.count - off < a.block ? a.count - off : a.block);
    const float *x = a.src + off;
    uint8_t *rec = a.dst + q_record(C, a, b);
    uint8_t *pay = rec + (a.scale_f16 ? 2 : 4);
    const uint64_t pb = q_payload(C, n);
    uint32_t m = 0;

    if (threadIdx.x == 0)
        s_max = 0;
    __syncthreads();
    for (uint32_t j = threadIdx.x; j < n; j += blockDim.x) {
        uint32_t v = coll__f32_bits(x[j]) & 0x7fffffffu;
        m = v > m ? v : m;
    }
    atomicMax(&s_max, m);
    __syncthreads();
    if (C == Q_SIGN1 && !SR && s_max < 0x7f800000u && threadIdx.x < 8) {
        double p = 0;
        for (uint32_t j = threadIdx.x; j + 8 - threadIdx.x <= n; j += 8)
            p += (double)coll__bits_f32(coll__f32_bits(x[j]) & 0x7fffffffu);
        s_part[threadIdx.x] = p;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float mag = coll__bits_f32(s_max);
        if (s_max >= 0x7f800000u) {
            mag = coll__bits_f32(0x7fc00000u);
        } else if (C == Q_SIGN1 && !SR) {
            double s = ((s_part[0] + s_part[1]) + (s_part[2] + s_part[3])) +
                       ((s_part[4] + s_part[5]) + (s_part[6] + s_part[7]));
            for (uint32_t j = n / 8 * 8; j < n; j++)
                s += (double)coll__bits_f32(coll__f32_bits(x[j]) & 0x7fffffffu);
            mag = (float)(s / (double)n);
        }
        if (a.scale_f16) {
            uint16_t h = coll__quant_scale_to_f16(mag, C != Q_SIGN1 || SR);
            rec[0] = (uint8_t)h;
            rec[1] = (uint8_t)(h >> 8);
            s_mag = coll__f16_to_f32(h);
        } else {
            uint32_t bits = (mag - mag) == 0.0f ? coll__f32_bits(mag) : 0x7fc00000u;
            for (int k = 0; k < 4; k++)
                rec[k] = (uint8_t)(bits >> (8 * k));
            s_mag = coll__bits_f32(bits);
        }
    }
    __syncthreads();
    const float mag = s_mag;
    if ((mag - mag) != 0.0f) {
        for (uint64_t j = threadIdx.x; j < pb; j += blockDim.x)
            pay[j] = 0;
        return;
    }
    const float inv = coll__quant_inv(q_qmax(C), mag);
    const uint64_t idx = a.index0 + off;
    if (C == Q_INT4 || C == Q_E3M0) {
        for (uint64_t j = threadIdx.x; j < pb; j += blockDim.x) {
            uint32_t lo = q_code<C, SR>(x[2 * j], inv, a.key, idx + 2 * j);
            uint32_t hi = 2 * j + 1 < n ? q_code<C, SR>(x[2 * j + 1], inv, a.key, idx + 2 * j + 1)
                                        : 0u;
            pay[j] = (uint8_t)(lo | hi << 4);
        }
    } else if (C == Q_SIGN1) {
        for (uint64_t j = threadIdx.x; j < pb; j += blockDim.x) {
            uint32_t byte = 0;
            for (uint32_t t = 0; t < 8 && 8 * j + t < n; t++)
                byte |= q_code<C, SR>(x[8 * j + t], inv, a.key, idx + 8 * j + t) << t;
            pay[j] = (uint8_t)byte;
        }
    } else {
        for (uint64_t j = threadIdx.x; j < n; j += blockDim.x)
            pay[j] = (uint8_t)q_code<C, SR>(x[j], inv, a.key, idx + j);
    }
}

/* fp16 / bf16: element by element, no header. */
template <int C, int SR> __device__ void q_encode_elems(const coll_cuda_quant_args &a)
{
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;

    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += stride) {
        const float x = a.src[i];
        const uint32_t r24 = SR ? coll__quant_noise(a.key, a.index0 + i) : 0u;
        uint16_t h;
        if (C == Q_FP16)
            h = SR ? coll__quant_sr_f16(x, r24) : coll__f32_to_f16(x);
        else
            h = SR ? coll__quant_sr_bf16(x, r24) : coll__f32_to_bf16(x);
        a.dst[2 * i] = (uint8_t)h;
        a.dst[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

__device__ __forceinline__ void q_put(const coll_cuda_quant_args &a, uint64_t i, float v)
{
    a.out[i] = a.add ? __fadd_rn(a.out[i], v) : v;
}

/* Element j of a block whose step is s (NaN for a non-finite block: so is every product). */
template <int C>
__device__ __forceinline__ float q_value(const uint8_t *pay, uint32_t j, float s, uint32_t sbits)
{
    if (C == Q_INT8)
        return __fmul_rn((float)(int8_t)pay[j], s);
    if (C == Q_E4M3)
        return __fmul_rn(coll__e4m3_to_f32(pay[j]), s);
    if (C == Q_E5M2)
        return __fmul_rn(coll__e5m2_to_f32(pay[j]), s);
    if (C == Q_INT4 || C == Q_E3M0) {
        uint32_t nib = (uint32_t)(pay[j / 2] >> (4 * (j & 1))) & 15u;
        return __fmul_rn(C == Q_INT4 ? coll__quant_i4_to_f32(nib) : coll__quant_e3m0_to_f32(nib),
                         s);
    }
    return coll__bits_f32(sbits | ((uint32_t)(pay[j >> 3] >> (j & 7)) & 1u) << 31);
}

template <int C> __device__ void q_decode_block(const coll_cuda_quant_args &a)
{
    const uint64_t b = blockIdx.x, off = b * a.block;
    const uint32_t n = (uint32_t)(a.count - off < a.block ? a.count - off : a.block);
    const uint8_t *rec = a.enc + q_record(C, a, b);
    const uint8_t *pay = rec + (a.scale_f16 ? 2 : 4);
    float mag, s;

    if (a.scale_f16) {
        mag = coll__f16_to_f32((uint16_t)(rec[0] | rec[1] << 8));
    } else {
        uint32_t bits = 0;
        for (int k = 0; k < 4; k++)
            bits |= (uint32_t)rec[k] << (8 * k);
        mag = coll__bits_f32(bits);
    }
    s = C == Q_SIGN1 ? mag : __fdiv_rn(mag, q_qmax(C));
    for (uint32_t j = threadIdx.x; j < n; j += blockDim.x)
        q_put(a, off + j, q_value<C>(pay, j, s, coll__f32_bits(s)));
}

template <int C> __device__ void q_decode_elems(const coll_cuda_quant_args &a)
{
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;

    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += stride) {
        uint16_t h = (uint16_t)(a.enc[2 * i] | a.enc[2 * i + 1] << 8);
        q_put(a, i, C == Q_FP16 ? coll__f16_to_f32(h) : coll__bf16_to_f32(h));
    }
}

/* Kernels by name, as cuda.c looks kernels up: coll_quant_{enc,enc_sr,dec}_<codec>.
 * Block codecs: grid = number of codec blocks; fp16/bf16: any grid. */
#define Q_BLOCK_KERNELS(name, C)                                                                   \
    extern "C" __global__ void __launch_bounds__(256) coll_quant_enc_##name(                       \
        const coll_cuda_quant_args a)                                                              \
    {                                                                                              \
        q_encode_block<C, 0>(a);                                                                   \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(256) coll_quant_enc_sr_##name(                    \
        const coll_cuda_quant_args a)                                                              \
    {                                                                                              \
        q_encode_block<C, 1>(a);                                                                   \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(256) coll_quant_dec_##name(                       \
        const coll_cuda_quant_args a)                                                              \
    {                                                                                              \
        q_decode_block<C>(a);                                                                      \
    }

#define Q_ELEM_KERNELS(name, C)                                                                    \
    extern "C" __global__ void __launch_bounds__(256) coll_quant_enc_##name(                       \
        const coll_cuda_quant_args a)                                                              \
    {                                                                                              \
        q_encode_elems<C, 0>(a);                                                                   \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(256) coll_quant_enc_sr_##name(                    \
        const coll_cuda_quant_args a)                                                              \
    {                                                                                              \
        q_encode_elems<C, 1>(a);                                                                   \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(256) coll_quant_dec_##name(                       \
        const coll_cuda_quant_args a)                                                              \
    {                                                                                              \
        q_decode_elems<C>(a);                                                                      \
    }

Q_ELEM_KERNELS(fp16, Q_FP16)
Q_ELEM_KERNELS(bf16, Q_BF16)
Q_BLOCK_KERNELS(int8, Q_INT8)
Q_BLOCK_KERNELS(e4m3, Q_E4M3)
Q_BLOCK_KERNELS(e5m2, Q_E5M2)
Q_BLOCK_KERNELS(int4, Q_INT4)
Q_BLOCK_KERNELS(e3m0, Q_E3M0)
Q_BLOCK_KERNELS(sign1, Q_SIGN1)
