/*
 * mp_cuda.h - the CUDA runtime as the multi-process CUDA tests (mp_cuda_stream.c,
 * mp_cuda_ipc.c) use it: loaded from COLL_CUDA_LIBRARY, the library's own choice, so that
 * the test and the library share one runtime (tests/fakecudart in CI), plus the emulator's
 * counters where it has them. Include after mp_util.h (die).
 */
#ifndef COLL_TESTS_MP_CUDA_H
#define COLL_TESTS_MP_CUDA_H

#include <dlfcn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MEMCPY_DEFAULT 4      /* cudaMemcpyDefault */
#define STREAM_NON_BLOCKING 1 /* cudaStreamNonBlocking */

static struct {
    int (*Malloc)(void **p, size_t n);
    int (*Free)(void *p);
    int (*MallocHost)(void **p, size_t n);
    int (*FreeHost)(void *p);
    int (*Memcpy)(void *d, const void *s, size_t n, int kind);
    int (*MemcpyAsync)(void *d, const void *s, size_t n, int kind, void *stream);
    int (*MemsetAsync)(void *p, int v, size_t n, void *stream);
    int (*StreamCreateWithFlags)(void **s, unsigned int flags);
    int (*StreamSynchronize)(void *s);
    int (*StreamDestroy)(void *s);
    int (*SetDevice)(int dev);
    int (*GetDeviceCount)(int *n);
    /* the emulator's: CUDA calls it refused as illegal, and kernels it ran; NULL on a GPU */
    int (*violations)(void);
    long (*kernels)(void);
} cu;

#define CU(call)                                                                             \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != 0)                                                                        \
            die("%s:%d: %s -> CUDA error %d", __FILE__, __LINE__, #call, rc_);               \
    } while (0)

/* false when there is no runtime to load */
static inline bool cuda_load(void)
{
    const char *path = getenv("COLL_CUDA_LIBRARY");
    void *lib;

    if (!path || !*path || !(lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)))
        return false;
#define SYM(field, name)                                                                     \
    do {                                                                                     \
        void *s_ = dlsym(lib, name);                                                         \
        if (!s_)                                                                             \
            die("'%s' lacks %s", path, name);                                                \
        memcpy(&cu.field, &s_, sizeof(s_));                                                  \
    } while (0)
    SYM(Malloc, "cudaMalloc");
    SYM(Free, "cudaFree");
    SYM(MallocHost, "cudaMallocHost");
    SYM(FreeHost, "cudaFreeHost");
    SYM(Memcpy, "cudaMemcpy");
    SYM(MemcpyAsync, "cudaMemcpyAsync");
    SYM(MemsetAsync, "cudaMemsetAsync");
    SYM(StreamCreateWithFlags, "cudaStreamCreateWithFlags");
    SYM(StreamSynchronize, "cudaStreamSynchronize");
    SYM(StreamDestroy, "cudaStreamDestroy");
    SYM(SetDevice, "cudaSetDevice");
    SYM(GetDeviceCount, "cudaGetDeviceCount");
#undef SYM
    {
        void *v = dlsym(lib, "fakecuda_violations"), *k = dlsym(lib, "fakecuda_kernel_launches");
        memcpy(&cu.violations, &v, sizeof(v));
        memcpy(&cu.kernels, &k, sizeof(k));
    }
    return true;
}

static inline void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    CU(cu.Malloc(&p, bytes ? bytes : 1));
    return p;
}

/* From pageable memory cudaMemcpy may return before its DMA has landed; the tests' streams
 * are non-blocking and would not wait for the legacy stream: wait for it here. */
static inline void upload(void *dev, const void *host, size_t bytes)
{
    CU(cu.Memcpy(dev, host, bytes, MEMCPY_DEFAULT));
    CU(cu.StreamSynchronize(NULL));
}

static inline void download(void *host, const void *dev, size_t bytes)
{
    CU(cu.Memcpy(host, dev, bytes, MEMCPY_DEFAULT));
}

static inline void no_violations(void)
{
    if (cu.violations && cu.violations() != 0)
        die("the CUDA emulator saw %d illegal calls (see its log above)", cu.violations());
}

/* kernels the emulator ran; -1 where that is not known (a real runtime) */
static inline long kernels(void)
{
    return cu.kernels ? cu.kernels() : -1;
}

#endif
