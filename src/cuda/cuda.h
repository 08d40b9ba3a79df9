/*
 * cuda.h - CUDA without a hard dependency: libcudart is loaded at run time, device buffers
 * are recognised by pointer, and the fused reduce-copy kernels of reduce_kernels.cu are
 * launched on the caller's stream. Every function here works (and answers "no CUDA") in a
 * process without libcudart, without a GPU, or in a build without nvcc.
 *
 * Divisions: 1 the kernel list and argument block, shared with reduce_kernels.cu (C and
 * CUDA C++ both compile this part), 2 run-time detection and the libcudart table,
 * 3 pointer kinds, 4 reduce-copy on the device and its CPU reference.
 *
 * Reduce-copy: dst_d[i] = src_0[i] op src_1[i] op ... op src_{k-1}[i] for i < count,
 * 1 <= k <= 8 inputs, written to one or two outputs (d < ndsts <= 2). Each element is folded
 * left to right in an accumulator: the type itself for integers, fp32 and fp64; fp32 for
 * fp16, bf16 and the two fp8 formats, which are widened exactly, combined in fp32 and
 * rounded to the narrow format once at the end. The per-element math is src/reduce/elem.h,
 * the same functions as the host's coll__reduce.
 *
 * How this differs from the host's pairwise coll__reduce (which rounds to the narrow format
 * after every step) for k > 2 narrow inputs, with u the narrow format's unit roundoff
 * (fp16 2^-11, bf16 2^-8, E4M3 2^-4, E5M2 2^-3) and S the exact result:
 *   - max, min: no difference, bit for bit (the result is one of the inputs).
 *   - k <= 2: no difference (one fp32 operation on exact inputs, then one rounding).
 *   - sum: the fused result is within u|S| + (k-1) 2^-24 sum|x_i| of S (one final
 *     rounding plus at most k-1 fp32 roundings of partial sums); the pairwise one is within
 *     about (k-1) u sum|x_i|. So the two may differ by up to (k-1) u sum|x_i| + u|S|, a few
 *     ulps of the narrow format; the fused one is the more accurate. Partial sums do not
 *     overflow either: fp16 65504 + 65504 - 65504 is 65504 fused, Inf pairwise (E4M3: NaN).
 *   - prod: within u|S| + (k-1) 2^-24 |S| fused, against about (k-1) u |S| pairwise. fp32
 *     holds every partial product of up to 8 fp16/fp8 values without overflow, and one that
 *     underflows fp32 would round to zero in the narrow format anyway; bf16 shares fp32's
 *     exponent range, so its partial products overflow or underflow where pairwise ones do.
 * AVG folds as SUM, rounds the sum to the dtype as SUM does, then divides that stored value
 * by a divisor n with elem.h's coll__div_<tag>, the host's coll__reduce_div per element
 * (integers truncate in their own signedness, narrow floats divide in fp32 and round once
 * more, fp32 and fp64 in their own precision): the result is coll__reduce_div applied to
 * SUM's result, bit for bit, for every k; for k = 2, the host's coll__reduce followed by
 * coll__reduce_div. n = 1 is SUM. Integer sum and prod wrap modulo 2^bits, exactly as the
 * host's.
 *
 * Why the division is fused into the reduce-copy and not a kernel of its own: the slice
 * that was just folded is divided while it is still in registers, so AVG costs no second
 * pass over memory and no extra launch per piece; the kernels gain one more entry per dtype
 * in the list below and a divisor in the argument block's spare word. Rounding the sum to
 * the dtype before dividing (twice, where dividing the fp32 accumulator would round once)
 * is what keeps the device's AVG equal to the host's sum-then-divide.
 */
#ifndef COLL_CUDA_H
#define COLL_CUDA_H

#include <stdint.h>

/* ---- 1 shared with reduce_kernels.cu ------------------------------------------------- */

#define COLL_CUDA_MAX_SRCS 8
#define COLL_CUDA_MAX_DSTS 2
#define COLL_CUDA_RC_THREADS 256 /* threads per block of the reduce-copy kernels */

/* The kernels' one parameter, passed by value (104 bytes). Unused src/dst slots are NULL. */
struct coll_cuda_rc_args {
    const void *src[COLL_CUDA_MAX_SRCS];
    void *dst[COLL_CUDA_MAX_DSTS];
    uint64_t count;   /* elements */
    int32_t nsrcs;    /* 1..COLL_CUDA_MAX_SRCS */
    int32_t ndsts;    /* 1..COLL_CUDA_MAX_DSTS */
    int32_t vec;      /* 1: every pointer is 16-byte aligned, use 16-byte loads and stores */
    uint32_t divisor; /* avg kernels: n >= 2, each result is divided by; 0 for the others */
};

/*
 * The kernels, one per (storage tag, op), as X(tag, op, T, A, LOAD, STORE, OP, FIN, NT):
 * elements of type T are widened by LOAD to the accumulator type A, folded with OP, narrowed
 * by STORE, and the stored value r becomes FIN(r, n), n being the argument block's divisor
 * converted once to NT. FIN is COLL_RC_KEEP (r itself) but for avg, where it is elem.h's
 * coll__div_<tag> with elem.h's divisor type. Tags follow reduce.c: integer sum and prod
 * use the unsigned tags for both signednesses (same bits, elem.h), signed max, min and avg
 * have their own (avg sums through the unsigned op, then divides with its sign). The CPU
 * reference (cuda.c), the emulator (tests/fakecudart) and the kernels expand this same
 * list, so they cannot drift apart; the kernel of (tag, op) is named "coll_rc_<tag>_<op>".
 */
#define COLL_RC_ID(x) (x)
#define COLL_RC_KEEP(r, n) (r)
#define COLL_RC_FOUR(X, tag, T, A, load, store, optag)                                             \
    X(tag, sum, T, A, load, store, coll__sum_##optag, COLL_RC_KEEP, uint32_t)                      \
    X(tag, prod, T, A, load, store, coll__prod_##optag, COLL_RC_KEEP, uint32_t)                    \
    X(tag, max, T, A, load, store, coll__max_##optag, COLL_RC_KEEP, uint32_t)                      \
    X(tag, min, T, A, load, store, coll__min_##optag, COLL_RC_KEEP, uint32_t)
#define COLL_RC_MAXMIN(X, tag, T)                                                                  \
    X(tag, max, T, T, COLL_RC_ID, COLL_RC_ID, coll__max_##tag, COLL_RC_KEEP, uint32_t)             \
    X(tag, min, T, T, COLL_RC_ID, COLL_RC_ID, coll__min_##tag, COLL_RC_KEEP, uint32_t)
#define COLL_RC_AVG(X, tag, T, A, load, store, optag)                                              \
    X(tag, avg, T, A, load, store, coll__sum_##optag, coll__div_##tag, coll__divisor_##tag)
#define COLL_RC_LIST(X)                                                                            \
    COLL_RC_FOUR(X, u8, uint8_t, uint8_t, COLL_RC_ID, COLL_RC_ID, u8)                              \
    COLL_RC_FOUR(X, u32, uint32_t, uint32_t, COLL_RC_ID, COLL_RC_ID, u32)                          \
    COLL_RC_FOUR(X, u64, uint64_t, uint64_t, COLL_RC_ID, COLL_RC_ID, u64)                          \
    COLL_RC_MAXMIN(X, i8, int8_t)                                                                  \
    COLL_RC_MAXMIN(X, i32, int32_t)                                                                \
    COLL_RC_MAXMIN(X, i64, int64_t)                                                                \
    COLL_RC_FOUR(X, f32, float, float, COLL_RC_ID, COLL_RC_ID, f32)                                \
    COLL_RC_FOUR(X, f64, double, double, COLL_RC_ID, COLL_RC_ID, f64)                              \
    COLL_RC_FOUR(X, f16, uint16_t, float, coll__f16_to_f32, coll__f32_to_f16, f32)                 \
    COLL_RC_FOUR(X, bf16, uint16_t, float, coll__bf16_to_f32, coll__f32_to_bf16, f32)              \
    COLL_RC_FOUR(X, e4m3, uint8_t, float, coll__e4m3_to_f32, coll__f32_to_e4m3, f32)               \
    COLL_RC_FOUR(X, e5m2, uint8_t, float, coll__e5m2_to_f32, coll__f32_to_e5m2, f32)               \
    COLL_RC_AVG(X, i8, int8_t, uint8_t, COLL_RC_ID, COLL_RC_ID, u8)                                \
    COLL_RC_AVG(X, u8, uint8_t, uint8_t, COLL_RC_ID, COLL_RC_ID, u8)                               \
    COLL_RC_AVG(X, i32, int32_t, uint32_t, COLL_RC_ID, COLL_RC_ID, u32)                            \
    COLL_RC_AVG(X, u32, uint32_t, uint32_t, COLL_RC_ID, COLL_RC_ID, u32)                           \
    COLL_RC_AVG(X, i64, int64_t, uint64_t, COLL_RC_ID, COLL_RC_ID, u64)                            \
    COLL_RC_AVG(X, u64, uint64_t, uint64_t, COLL_RC_ID, COLL_RC_ID, u64)                           \
    COLL_RC_AVG(X, f32, float, float, COLL_RC_ID, COLL_RC_ID, f32)                                 \
    COLL_RC_AVG(X, f64, double, double, COLL_RC_ID, COLL_RC_ID, f64)                               \
    COLL_RC_AVG(X, f16, uint16_t, float, coll__f16_to_f32, coll__f32_to_f16, f32)                  \
    COLL_RC_AVG(X, bf16, uint16_t, float, coll__bf16_to_f32, coll__f32_to_bf16, f32)               \
    COLL_RC_AVG(X, e4m3, uint8_t, float, coll__e4m3_to_f32, coll__f32_to_e4m3, f32)                \
    COLL_RC_AVG(X, e5m2, uint8_t, float, coll__e5m2_to_f32, coll__f32_to_e5m2, f32)

/* The host part below is C only: nvcc compiles division 1 and stops here. */
#ifndef __CUDACC__

#include "../base/base.h"

/* ---- 2 run-time detection ------------------------------------------------------------ */

/* Where CUDA stands in this process, decided once, on first use (pthread_once). */
enum coll_cuda_state {
    COLL_CUDA_READY = 0,  /* libcudart loaded and at least one device */
    COLL_CUDA_DISABLED,   /* COLL_CUDA_DISABLE=1: libcudart was not even loaded */
    COLL_CUDA_NO_LIBRARY, /* no libcudart.so.13 / libcudart.so (or a symbol missing) */
    COLL_CUDA_NO_DEVICE,  /* libcudart loaded; cudaGetDeviceCount failed or found 0 */
};

/*
 * Decide (first call) and return the state; *why_p, when not NULL, gets the reason in words
 * for logs and messages, e.g. "no CUDA device: cudaGetDeviceCount failed: CUDA driver
 * version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver, error 35)".
 * The text is process-wide and lives until exit. Thread-safe.
 *
 * Read here, once per process, not per comm (they select a library, not a comm's
 * behaviour): COLL_CUDA_DISABLE=1 keeps libcudart unloaded; COLL_CUDA_LIBRARY names the
 * libcudart to dlopen instead of libcudart.so.13, then libcudart.so.
 */
COLL_INTERNAL enum coll_cuda_state coll__cuda_state(const char **why_p);
/* coll__cuda_state() == COLL_CUDA_READY: device buffers may appear. */
COLL_INTERNAL bool coll__cuda_available(void);
/* Whether this build has the kernels (nvcc was found at build time). */
COLL_INTERNAL bool coll__cuda_have_kernels(void);
/* Load every reduce-copy kernel into device dev, the calling thread's current device, once:
 * before anything of ours waits on a stream, since a lazy first load may wait for the
 * device's other work (cuda.c says why). Without CUDA or kernels it does nothing. */
COLL_INTERNAL void coll__cuda_kernels_load(int dev);

/*
 * The libcudart entry points coll uses, loaded with dlsym. Types are spelled without the
 * CUDA headers (which a build without CUDA lacks); int is cudaError_t, void * a stream,
 * library or kernel handle. Tests allocate and copy through this table too.
 */
struct coll_cuda_dim3 {
    unsigned int x, y, z;
};
/* cudaIpcMemHandle_t: 64 opaque bytes */
struct coll_cuda_ipc_handle {
    char reserved[64];
};
struct coll_cudart {
    const char *(*GetErrorName)(int err);
    const char *(*GetErrorString)(int err);
    int (*GetLastError)(void);
    int (*GetDeviceCount)(int *n);
    int (*GetDevice)(int *dev);
    int (*SetDevice)(int dev);
    int (*DeviceGetAttribute)(int *value, int attr, int dev);
    int (*RuntimeGetVersion)(int *v);
    int (*DriverGetVersion)(int *v);
    int (*PointerGetAttributes)(void *attr, const void *ptr);
    int (*Malloc)(void **p, size_t bytes);
    int (*MallocManaged)(void **p, size_t bytes, unsigned int flags);
    int (*MallocHost)(void **p, size_t bytes);
    int (*Free)(void *p);
    int (*FreeHost)(void *p);
    int (*HostRegister)(void *p, size_t bytes, unsigned int flags);
    int (*HostUnregister)(void *p);
    int (*Memcpy)(void *dst, const void *src, size_t bytes, int kind);
    int (*Memset)(void *p, int value, size_t bytes);
    int (*StreamCreateWithFlags)(void **stream_p, unsigned int flags);
    int (*StreamSynchronize)(void *stream);
    int (*StreamDestroy)(void *stream);
    int (*LibraryLoadData)(void **lib_p, const void *code, void *jit_opts, void **jit_vals,
                           unsigned int njit, void *lib_opts, void **lib_vals, unsigned int nlib);
    int (*LibraryUnload)(void *lib);
    int (*LibraryGetKernel)(void **kernel_p, void *lib, const char *name);
    int (*LaunchKernel)(const void *func, struct coll_cuda_dim3 grid, struct coll_cuda_dim3 block,
                        void **args, size_t shmem_bytes, void *stream);
    /* Optional: NULL when the library lacks them; only what needs them is disabled (the
     * stream-ordered collectives of stream.c need all but StreamGetDevice, which only
     * checks a stream's device). */
    int (*MemcpyAsync)(void *dst, const void *src, size_t bytes, int kind, void *stream);
    int (*MemsetAsync)(void *p, int value, size_t bytes, void *stream);
    int (*HostAlloc)(void **p, size_t bytes, unsigned int flags);
    int (*StreamQuery)(void *stream);
    int (*StreamWaitEvent)(void *stream, void *event, unsigned int flags);
    int (*StreamGetDevice)(void *stream, int *dev);
    int (*EventCreateWithFlags)(void **event_p, unsigned int flags);
    int (*EventRecord)(void *event, void *stream);
    int (*EventQuery)(void *event);
    int (*EventSynchronize)(void *event);
    int (*EventDestroy)(void *event);
    int (*LaunchHostFunc)(void *stream, void (*fn)(void *arg), void *arg);
    int (*DeviceSynchronize)(void);
    /* Optional, for the IPC path of stream.c (ipc.c); cudaIpcMemHandle_t goes by value. */
    int (*IpcGetMemHandle)(struct coll_cuda_ipc_handle *handle, void *ptr);
    int (*IpcOpenMemHandle)(void **ptr, struct coll_cuda_ipc_handle handle, unsigned int flags);
    int (*IpcCloseMemHandle)(void *ptr);
    int (*HostGetDevicePointer)(void **dev_p, void *host, unsigned int flags);
    int (*FuncGetAttributes)(void *attr, const void *func);
    /* Optional, from the driver (libcuda.so.1: cuStreamWaitValue32_v2), or from the runtime
     * library itself where it has it (the emulator): the stream waits until the 32-bit word
     * at device address addr satisfies flags' test against value (0: GEQ, cyclic). NULL
     * when absent or when COLL_CUDA_WAIT_VALUE=0. */
    int (*StreamWaitValue32)(void *stream, unsigned long long addr, uint32_t value,
                             unsigned int flags);
};
/* CU_STREAM_WAIT_VALUE_GEQ: until (int32_t)(*addr - value) >= 0 */
#define COLL_CUDA_WAIT_VALUE_GEQ 0
/* cudaMemcpyKind cudaMemcpyDefault: direction from the pointers (unified addressing). */
#define COLL_CUDA_MEMCPY_DEFAULT 4

/* The loaded table when coll__cuda_available(), else NULL. */
COLL_INTERNAL const struct coll_cudart *coll__cudart(void);
/* "cudaErrorX: text (error N)" for a CUDA error code, with or without libcudart. */
COLL_INTERNAL void coll__cuda_error_text(int err, char *buf, size_t size);

/* ---- 3 pointer kinds ----------------------------------------------------------------- */

/* Values of cudaMemoryType. */
enum coll_mem_kind {
    COLL_MEM_UNREGISTERED = 0, /* plain host memory (malloc, stack), unknown to CUDA */
    COLL_MEM_HOST = 1,         /* page-locked host memory: cudaMallocHost, cudaHostRegister */
    COLL_MEM_DEVICE = 2,       /* cudaMalloc: not dereferenceable on the host */
    COLL_MEM_MANAGED = 3,      /* cudaMallocManaged: both */
};
COLL_INTERNAL const char *coll__mem_kind_name(enum coll_mem_kind kind);

/*
 * What ptr points to, through cudaPointerGetAttributes. Without CUDA (any state but READY)
 * and for NULL, every pointer is COLL_MEM_UNREGISTERED and CUDA is not called.
 * *device_p (may be NULL) gets the owning device, -1 for unregistered memory. A CUDA
 * failure is COLL_CUDA_ERROR with the CUDA text in comm's message; outputs are set only on
 * success.
 */
COLL_INTERNAL coll_status_t coll__cuda_mem_kind(struct coll_comm *comm, const void *ptr,
                                                enum coll_mem_kind *kind_p, int *device_p);

/* ---- 4 reduce-copy ------------------------------------------------------------------- */

/*
 * dst[d][i] = src[0][i] op ... op src[nsrcs - 1][i] for i < count and d < ndsts, as in the
 * header comment; with op COLL_AVG that sum, rounded to the dtype, divided by `divisor`
 * (coll__reduce_div's math; 1: the sum itself), which must be 1 for every other op. Queued
 * on `stream` (a cudaStream_t; NULL is the default stream) of the current device, which
 * must be able to access every buffer. Returns once the kernel is queued: the buffers are
 * the caller's until the stream has run it. A dst may be a src
 * exactly (in place), never a partial overlap; two dsts must not overlap each other.
 *
 * 16-byte loads and stores when every pointer is 16-byte aligned, element-sized otherwise.
 * Grid: the device's SM count times the blocks of COLL_CUDA_RC_THREADS one SM holds,
 * fewer for small counts. count == 0 queues nothing.
 *
 * COLL_INVALID_ARGUMENT: nsrcs, ndsts, dtype, op, divisor (0, or not 1 with an op other
 * than AVG), a NULL buffer or one not aligned to the element size (which the GPU cannot
 * access). COLL_INVALID_USAGE: no CUDA (the message says why, e.g. no device or built
 * without nvcc). COLL_CUDA_ERROR: the kernels did not load or the launch failed (the CUDA
 * text is in comm's message).
 */
COLL_INTERNAL coll_status_t coll__cuda_reduce_copy(struct coll_comm *comm, void *const dst[],
                                                   int ndsts, const void *const src[], int nsrcs,
                                                   size_t count, coll_dtype_t dt, coll_op_t op,
                                                   uint32_t divisor, void *stream);

/*
 * The CPU reference: the same k-input semantics, bit for bit the kernels' results (up to
 * NaN payloads of fp32/fp64 arithmetic, which GPUs canonicalize), in plain C on host
 * buffers. Same arguments and statuses as coll__cuda_reduce_copy, without the stream.
 */
COLL_INTERNAL coll_status_t coll__cuda_ref_reduce_copy(struct coll_comm *comm, void *const dst[],
                                                       int ndsts, const void *const src[],
                                                       int nsrcs, size_t count, coll_dtype_t dt,
                                                       coll_op_t op, uint32_t divisor);

#endif /* !__CUDACC__ */
#endif /* COLL_CUDA_H */
