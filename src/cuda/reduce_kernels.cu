/*
 * reduce_kernels.cu - fused reduce-copy kernels: dst_d[i] = src_0[i] op ... op src_{k-1}[i],
 * k = 1..8 inputs, one or two outputs, for every (dtype, op) of COLL_RC_LIST (cuda.h); the
 * avg kernels then divide each stored sum by args.divisor (cuda.h says why fused).
 *
 * Built by nvcc into a fatbinary (sm_80, sm_90, and compute_90 PTX for later GPUs) that
 * meson embeds in libcoll as data; cuda.c loads it with cudaLibraryLoadData and looks the
 * kernels up by name. So libcoll has no link-time dependency on libcudart: this file has no
 * host code, and the kernels are extern "C" to keep their names plain.
 *
 * The per-element math (widening, the ops, rounding) is src/reduce/elem.h, shared with the
 * host loops and with the CPU reference coll__cuda_ref_reduce_copy; cuda.h says how k-input
 * narrow-float results differ from the host's pairwise ones, and by how much.
 *
 * Work split: with every pointer 16-byte aligned (args.vec), each thread takes 16-byte
 * vectors (16 / sizeof(T) elements) in a grid-stride loop: all k loads are issued before
 * the first op, so they are in flight together. The count % (16 / sizeof(T)) elements past
 * the last whole vector, or every element when a pointer is misaligned, go through the
 * element-wise loop. In place (a dst equal to a src) is safe: each element is read and
 * written by one thread, all reads first; for that reason no pointer is __restrict__ and
 * loads are plain (not the read-only path, which assumes nothing is written meanwhile).
 */
#include <stdint.h>

#include "../reduce/elem.h"
#include "cuda.h"

/* F: one entry of COLL_RC_LIST as a type: F::T storage, F::A accumulator, F::N divisor,
 * load/op/store/fin. */
template <class F>
__device__ __forceinline__ void rc_vector(const coll_cuda_rc_args &a, typename F::N n, uint64_t i)
{
    typedef typename F::T T;
    typedef typename F::A A;
    constexpr int V = 16 / sizeof(T);
    uint4 raw[COLL_CUDA_MAX_SRCS];
    T x[V];
    A acc[V];

#pragma unroll
    for (int s = 0; s < COLL_CUDA_MAX_SRCS; s++)
        if (s < a.nsrcs)
            raw[s] = reinterpret_cast<const uint4 *>(a.src[s])[i];

    memcpy(x, &raw[0], sizeof(x));
#pragma unroll
    for (int v = 0; v < V; v++)
        acc[v] = F::load(x[v]);
#pragma unroll
    for (int s = 1; s < COLL_CUDA_MAX_SRCS; s++) {
        if (s < a.nsrcs) {
            memcpy(x, &raw[s], sizeof(x));
#pragma unroll
            for (int v = 0; v < V; v++)
                acc[v] = F::op(acc[v], F::load(x[v]));
        }
    }
#pragma unroll
    for (int v = 0; v < V; v++)
        x[v] = F::fin(F::store(acc[v]), n);
    memcpy(&raw[0], x, sizeof(x));
    reinterpret_cast<uint4 *>(a.dst[0])[i] = raw[0];
    if (a.ndsts > 1)
        reinterpret_cast<uint4 *>(a.dst[1])[i] = raw[0];
}

template <class F>
__device__ __forceinline__ void rc_element(const coll_cuda_rc_args &a, typename F::N n, uint64_t i)
{
    typedef typename F::T T;
    typedef typename F::A A;
    T x[COLL_CUDA_MAX_SRCS];
    A acc;

#pragma unroll
    for (int s = 0; s < COLL_CUDA_MAX_SRCS; s++)
        if (s < a.nsrcs)
            x[s] = static_cast<const T *>(a.src[s])[i];
    acc = F::load(x[0]);
#pragma unroll
    for (int s = 1; s < COLL_CUDA_MAX_SRCS; s++)
        if (s < a.nsrcs)
            acc = F::op(acc, F::load(x[s]));
    x[0] = F::fin(F::store(acc), n);
    static_cast<T *>(a.dst[0])[i] = x[0];
    if (a.ndsts > 1)
        static_cast<T *>(a.dst[1])[i] = x[0];
}

template <class F> __device__ __forceinline__ void rc_kernel(const coll_cuda_rc_args &a)
{
    constexpr uint64_t V = 16 / sizeof(typename F::T);
    const uint64_t nthreads = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const typename F::N n = (typename F::N)a.divisor; /* converted once, as reduce.c does */
    uint64_t i, first = 0;

    if (a.vec) {
        const uint64_t nvec = a.count / V;
        for (i = tid; i < nvec; i += nthreads)
            rc_vector<F>(a, n, i);
        first = nvec * V;
    }
    for (i = first + tid; i < a.count; i += nthreads)
        rc_element<F>(a, n, i);
}

/* One functor type and one extern "C" kernel per entry of the list. */
#define RC_KERNEL(tag, op_, T_, A_, LOAD, STORE, OP, FIN, N_)                                      \
    struct rc_##tag##_##op_ {                                                                      \
        typedef T_ T;                                                                              \
        typedef A_ A;                                                                              \
        typedef N_ N;                                                                              \
        static __device__ __forceinline__ A load(T v)                                              \
        {                                                                                          \
            return LOAD(v);                                                                        \
        }                                                                                          \
        static __device__ __forceinline__ T store(A v)                                             \
        {                                                                                          \
            return STORE(v);                                                                       \
        }                                                                                          \
        static __device__ __forceinline__ A op(A x, A y)                                           \
        {                                                                                          \
            return OP(x, y);                                                                       \
        }                                                                                          \
        static __device__ __forceinline__ T fin(T r, N n)                                          \
        {                                                                                          \
            (void)n;                                                                               \
            return FIN(r, n);                                                                      \
        }                                                                                          \
    };                                                                                             \
    extern "C" __global__ void __launch_bounds__(COLL_CUDA_RC_THREADS)                             \
        coll_rc_##tag##_##op_(const coll_cuda_rc_args args)                                        \
    {                                                                                              \
        rc_kernel<rc_##tag##_##op_>(args);                                                         \
    }

COLL_RC_LIST(RC_KERNEL)
