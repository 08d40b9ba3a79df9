/*
 * test_fakecudart.c - the CUDA runtime emulation (tests/fakecudart) itself: device pointers
 * that fault on the host, stream order under delays, events, host functions on their own
 * thread and the rule against runtime calls in them, the legacy default stream, IPC
 * between processes, kernels and the errors of several devices, and the fault knobs: a
 * corrupted kernel result (COLL_FAKECUDA_CORRUPT_RC), memory left allocated at exit
 * (COLL_FAKECUDA_CHECK_LEAKS).
 *
 * The module is loaded with dlopen from COLL_CUDA_LIBRARY. Each case runs in a process of
 * its own (harness.h) and sets its configuration before its first runtime call, since the
 * emulator reads it once. Ordering is checked with "gates": a host function that blocks
 * until the test opens it holds back everything queued behind it, so no case depends on
 * timing.
 */
#include "cuda/cuda.h"

#include "harness.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>

typedef struct {
    char reserved[64];
} ipc_handle_t;

struct ptr_attr {
    int type, device;
    void *dptr, *hptr;
    long reserved[8];
};

/* The runtime calls used here, by their CUDA names. */
#define RT_FUNCS(X)                                                                                \
    X(int, cudaGetDeviceCount, (int *))                                                            \
    X(int, cudaSetDevice, (int))                                                                   \
    X(int, cudaGetLastError, (void))                                                               \
    X(int, cudaPeekAtLastError, (void))                                                            \
    X(int, cudaPointerGetAttributes, (void *, const void *))                                       \
    X(int, cudaMalloc, (void **, size_t))                                                          \
    X(int, cudaMallocHost, (void **, size_t))                                                      \
    X(int, cudaHostAlloc, (void **, size_t, unsigned))                                             \
    X(int, cudaMallocManaged, (void **, size_t, unsigned))                                         \
    X(int, cudaFree, (void *))                                                                     \
    X(int, cudaFreeHost, (void *))                                                                 \
    X(int, cudaHostRegister, (void *, size_t, unsigned))                                           \
    X(int, cudaHostUnregister, (void *))                                                           \
    X(int, cudaMemcpy, (void *, const void *, size_t, int))                                        \
    X(int, cudaMemcpyAsync, (void *, const void *, size_t, int, void *))                           \
    X(int, cudaMemset, (void *, int, size_t))                                                      \
    X(int, cudaMemsetAsync, (void *, int, size_t, void *))                                         \
    X(int, cudaStreamCreateWithFlags, (void **, unsigned))                                         \
    X(int, cudaStreamCreate, (void **))                                                            \
    X(int, cudaStreamDestroy, (void *))                                                            \
    X(int, cudaStreamSynchronize, (void *))                                                        \
    X(int, cudaStreamQuery, (void *))                                                              \
    X(int, cudaStreamWaitEvent, (void *, void *, unsigned))                                        \
    X(int, cudaStreamGetDevice, (void *, int *))                                                   \
    X(int, cudaEventCreate, (void **))                                                             \
    X(int, cudaEventCreateWithFlags, (void **, unsigned))                                          \
    X(int, cudaEventRecord, (void *, void *))                                                      \
    X(int, cudaEventQuery, (void *))                                                               \
    X(int, cudaEventSynchronize, (void *))                                                         \
    X(int, cudaEventDestroy, (void *))                                                             \
    X(int, cudaEventElapsedTime, (float *, void *, void *))                                        \
    X(int, cudaLaunchHostFunc, (void *, void (*)(void *), void *))                                 \
    X(int, cudaDeviceSynchronize, (void))                                                          \
    X(int, cudaDeviceCanAccessPeer, (int *, int, int))                                             \
    X(int, cudaDeviceEnablePeerAccess, (int, unsigned))                                            \
    X(int, cudaLibraryLoadData,                                                                    \
      (void **, const void *, void *, void **, unsigned, void *, void **, unsigned))               \
    X(int, cudaLibraryUnload, (void *))                                                            \
    X(int, cudaLibraryGetKernel, (void **, void *, const char *))                                  \
    X(int, cudaLaunchKernel,                                                                       \
      (const void *, struct coll_cuda_dim3, struct coll_cuda_dim3, void **, size_t, void *))       \
    X(int, cudaIpcGetMemHandle, (ipc_handle_t *, void *))                                          \
    X(int, cudaIpcOpenMemHandle, (void **, ipc_handle_t, unsigned))                                \
    X(int, cudaIpcCloseMemHandle, (void *))                                                        \
    X(int, cudaIpcGetEventHandle, (ipc_handle_t *, void *))                                        \
    X(int, cudaIpcOpenEventHandle, (void **, ipc_handle_t))                                        \
    X(int, fakecuda_violations, (void))

static struct {
#define X(ret, name, args) ret(*name) args;
    RT_FUNCS(X)
#undef X
} rt;

/* Load the module into this (case) process, after setting its configuration. */
static void load(int devices, int delay_us)
{
    const char *path = getenv("COLL_CUDA_LIBRARY");
    char buf[32];
    void *lib, *sym;

    ASSERT_MSG(path && *path, "COLL_CUDA_LIBRARY must name the emulator");
    snprintf(buf, sizeof(buf), "%d", devices);
    setenv("COLL_FAKECUDA_DEVICES", buf, 1);
    snprintf(buf, sizeof(buf), "%d", delay_us);
    setenv("COLL_FAKECUDA_DELAY_US", buf, 1);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ASSERT_MSG(lib, "dlopen: %s", dlerror());
#define X(ret, name, args)                                                                         \
    sym = dlsym(lib, #name);                                                                       \
    ASSERT_MSG(sym, "%s missing", #name);                                                          \
    memcpy(&rt.name, &sym, sizeof(sym));
    RT_FUNCS(X)
#undef X
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        int ck_rc_ = (call);                                                                       \
        ASSERT_MSG(ck_rc_ == 0, "%s returned %d", #call, ck_rc_);                                  \
    } while (0)

/* CUDA's numbers */
enum {
    E_INVALID_VALUE = 1,
    E_INVALID_CONFIG = 9,
    E_INVALID_DEVICE_FUNCTION = 98,
    E_NO_DEVICE = 100,
    E_INVALID_DEVICE = 101,
    E_DEVICE_UNINITIALIZED = 201,
    E_MAP_FAILED = 205,
    E_INVALID_HANDLE = 400,
    E_NOT_READY = 600,
    E_ILLEGAL_ADDRESS = 700,
    E_MISALIGNED = 716,
    E_NOT_PERMITTED = 800,
};
enum { H2H, H2D, D2H, D2D, DEFAULT };

/* ---- gates: host functions that hold a stream until the test opens them ------------ */

struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open, entered;
};
#define GATE_INIT                                                                                  \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false                          \
    }

static void gate_fn(void *arg)
{
    struct gate *g = arg;
    pthread_mutex_lock(&g->mu);
    g->entered = true;
    pthread_cond_broadcast(&g->cv);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void gate_wait_entered(struct gate *g)
{
    pthread_mutex_lock(&g->mu);
    while (!g->entered)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static bool all_bytes(const void *p, int v, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)v)
            return false;
    return true;
}

/* ---- memory -------------------------------------------------------------------------- */

/* Run fn in a child; return the signal that killed it (0 if it exited). */
static int child_signal(void (*fn)(void *), void *arg)
{
    int status = 0;
    pid_t pid = fork();

    ASSERT(pid >= 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        signal(SIGBUS, SIG_DFL);
        fn(arg);
        _exit(0);
    }
    while (waitpid(pid, &status, 0) < 0)
        ;
    return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

static void read_byte(void *p)
{
    volatile char c = *(volatile char *)p;
    (void)c;
}

static void write_byte(void *p)
{
    *(volatile char *)p = 1;
}

TEST(device_pointers_fault_on_the_host)
{
    void *d, *pinned, *managed;

    load(1, 0);
    CK(rt.cudaMalloc(&d, 4096));
    CK(rt.cudaMallocHost(&pinned, 4096));
    CK(rt.cudaMallocManaged(&managed, 4096, 1));
    /* the child inherits the mappings as they are: PROT_NONE for device memory */
    ASSERT_EQ(child_signal(read_byte, d), SIGSEGV);
    ASSERT_EQ(child_signal(write_byte, (char *)d + 100), SIGSEGV);
    ASSERT_EQ(child_signal(read_byte, pinned), 0);
    ASSERT_EQ(child_signal(write_byte, managed), 0);
    CK(rt.cudaFree(d));
    CK(rt.cudaFreeHost(pinned));
    CK(rt.cudaFree(managed));
    /* freed memory of every kind stays unmapped: a use after free faults */
    ASSERT_EQ(child_signal(read_byte, d), SIGSEGV);
    ASSERT_EQ(child_signal(read_byte, pinned), SIGSEGV);
    ASSERT_EQ(child_signal(write_byte, managed), SIGSEGV);
    ASSERT_EQ(rt.fakecuda_violations(), 0);
}

TEST(pointer_attributes)
{
    struct ptr_attr a;
    void *d0, *d1, *pinned, *ha, *managed;
    char *plain = malloc(8192);

    load(2, 0);
    CK(rt.cudaMalloc(&d0, 1000));
    CK(rt.cudaSetDevice(1));
    CK(rt.cudaMalloc(&d1, 1000));
    CK(rt.cudaMallocHost(&pinned, 100));
    CK(rt.cudaHostAlloc(&ha, 100, 2 /* cudaHostAllocMapped */));
    CK(rt.cudaMallocManaged(&managed, 100, 1));

    CK(rt.cudaPointerGetAttributes(&a, (char *)d0 + 999));
    ASSERT_EQ(a.type, 2);
    ASSERT_EQ(a.device, 0);
    ASSERT(a.hptr == NULL);
    CK(rt.cudaPointerGetAttributes(&a, d1));
    ASSERT_EQ(a.type, 2);
    ASSERT_EQ(a.device, 1);
    ASSERT(a.dptr == d1);
    CK(rt.cudaPointerGetAttributes(&a, (char *)d0 + 1000)); /* one past the end */
    ASSERT_EQ(a.type, 0);
    CK(rt.cudaPointerGetAttributes(&a, pinned));
    ASSERT_EQ(a.type, 1);
    CK(rt.cudaPointerGetAttributes(&a, ha));
    ASSERT_EQ(a.type, 1);
    CK(rt.cudaPointerGetAttributes(&a, managed));
    ASSERT_EQ(a.type, 3);
    ASSERT(a.hptr == managed && a.dptr == managed);
    CK(rt.cudaPointerGetAttributes(&a, plain));
    ASSERT_EQ(a.type, 0);
    ASSERT_EQ(a.device, -1);

    CK(rt.cudaHostRegister(plain + 4096, 4096, 0));
    CK(rt.cudaPointerGetAttributes(&a, plain + 5000));
    ASSERT_EQ(a.type, 1);
    CK(rt.cudaPointerGetAttributes(&a, plain + 100));
    ASSERT_EQ(a.type, 0);
    ASSERT_EQ(rt.cudaHostRegister(plain, 4097, 0), 712); /* overlaps the registered range */
    ASSERT_EQ(rt.cudaHostUnregister(plain), 713);
    ASSERT_EQ(rt.cudaGetLastError(), 713);
    CK(rt.cudaHostUnregister(plain + 4096));
    CK(rt.cudaPointerGetAttributes(&a, plain + 5000));
    ASSERT_EQ(a.type, 0);

    CK(rt.cudaFree(d0));
    CK(rt.cudaPointerGetAttributes(&a, d0)); /* freed: unknown to CUDA, as with CUDA 11+ */
    ASSERT_EQ(a.type, 0);
    CK(rt.cudaGetLastError());
    free(plain);
}

TEST(bad_frees_and_bounds)
{
    void *d, *pinned;
    char host[256];
    int before;

    load(1, 0);
    CK(rt.cudaMalloc(&d, 100));
    CK(rt.cudaMallocHost(&pinned, 100));
    before = rt.fakecuda_violations();
    ASSERT_EQ(rt.cudaFree((char *)d + 1), E_INVALID_VALUE); /* inside, not the start */
    ASSERT_EQ(rt.cudaFree(host), E_INVALID_VALUE);          /* never allocated */
    ASSERT_EQ(rt.cudaFree(pinned), E_INVALID_VALUE);        /* the wrong free */
    ASSERT_EQ(rt.cudaFreeHost(d), E_INVALID_VALUE);
    ASSERT_EQ(rt.cudaGetLastError(), E_INVALID_VALUE);
    ASSERT_EQ(rt.cudaGetLastError(), 0); /* read and cleared */
    /* copies and memsets past the end of the allocation */
    ASSERT_EQ(rt.cudaMemcpy(host, d, 101, D2H), E_INVALID_VALUE);
    ASSERT_EQ(rt.cudaMemcpy((char *)d + 50, host, 51, H2D), E_INVALID_VALUE);
    ASSERT_EQ(rt.cudaMemset((char *)d + 99, 0, 2), E_INVALID_VALUE);
    ASSERT_EQ(rt.cudaMemset(host, 0, 2), E_INVALID_VALUE); /* plain host memory */
    /* a direction the pointers contradict */
    ASSERT_EQ(rt.cudaMemcpy(host, d, 10, H2H), E_INVALID_VALUE);
    ASSERT_EQ(rt.cudaMemcpy(d, host, 10, D2D), E_INVALID_VALUE);
    ASSERT_EQ(rt.cudaMemcpy(d, host, 10, 7), 21);
    CK(rt.cudaMemcpy(d, host, 100, H2D));
    CK(rt.cudaMemcpy(host, d, 100, DEFAULT));
    CK(rt.cudaFree(d));
    ASSERT_EQ(rt.cudaFree(d), E_INVALID_VALUE);                      /* double free */
    ASSERT_EQ(rt.cudaMemcpy(host, d, 10, DEFAULT), E_INVALID_VALUE); /* use after free */
    ASSERT(rt.fakecuda_violations() > before);
    ASSERT_EQ(rt.cudaPeekAtLastError(), E_INVALID_VALUE);
    CK(rt.cudaFreeHost(pinned));
}

/* ---- streams and events ------------------------------------------------------------- */

/* A chain of dependent copies on one stream, each delayed: every step must see the one
 * before it. */
TEST(stream_order_with_delays)
{
    enum { N = 4096, STEPS = 12 };
    unsigned char *h;
    void *d[2], *s;

    load(1, 300);
    CK(rt.cudaMallocHost((void **)&h, (STEPS + 1) * N));
    CK(rt.cudaMalloc(&d[0], N));
    CK(rt.cudaMalloc(&d[1], N));
    CK(rt.cudaStreamCreateWithFlags(&s, 1));
    memset(h, 0, (STEPS + 1) * N);
    CK(rt.cudaMemsetAsync(d[0], 1, N, s));
    for (int i = 0; i < STEPS; i++) {
        /* d[1] = d[0]; d[0] = i + 2; host slot i = d[1] */
        CK(rt.cudaMemcpyAsync(d[1], d[0], N, D2D, s));
        CK(rt.cudaMemsetAsync(d[0], i + 2, N, s));
        CK(rt.cudaMemcpyAsync(h + (size_t)i * N, d[1], N, D2H, s));
    }
    CK(rt.cudaStreamSynchronize(s));
    CK(rt.cudaStreamQuery(s));
    for (int i = 0; i < STEPS; i++)
        ASSERT_MSG(all_bytes(h + (size_t)i * N, i + 1, N), "step %d", i);
    CK(rt.cudaStreamDestroy(s));
    ASSERT_EQ(rt.cudaStreamDestroy(s), E_INVALID_HANDLE);
    ASSERT_EQ(rt.fakecuda_violations(), 0);
}

/* Pageable copies: from pageable memory the source is staged (reusable at return), to
 * pageable memory the call returns when the copy is done; pinned copies stay queued. */
TEST(pageable_and_pinned_copies)
{
    static struct gate g = GATE_INIT;
    enum { N = 1 << 16 };
    unsigned char *pageable = malloc(N), *pinned, *out = malloc(N);
    void *d, *s;

    load(1, 20000); /* each copy starts late: one that read the caller's memory at run time
                       instead of staging it would see the 8s */
    CK(rt.cudaMalloc(&d, N));
    CK(rt.cudaMallocHost((void **)&pinned, N));
    CK(rt.cudaStreamCreateWithFlags(&s, 1));
    memset(pageable, 7, N);
    CK(rt.cudaMemcpyAsync(d, pageable, N, H2D, s));
    memset(pageable, 8, N); /* staged already: the device gets 7s */
    CK(rt.cudaMemcpyAsync(out, d, N, D2H, s));
    ASSERT(all_bytes(out, 7, N)); /* to pageable memory: done at return */

    memset(pinned, 1, N);
    CK(rt.cudaLaunchHostFunc(s, gate_fn, &g));
    CK(rt.cudaMemcpyAsync(pinned, d, N, D2H, s));
    ASSERT_EQ(rt.cudaStreamQuery(s), E_NOT_READY);
    ASSERT(all_bytes(pinned, 1, N)); /* queued behind the gate */
    gate_open(&g);
    CK(rt.cudaStreamSynchronize(s));
    ASSERT(all_bytes(pinned, 7, N));
    CK(rt.cudaStreamDestroy(s));
    free(pageable);
    free(out);
}

TEST(events)
{
    static struct gate g = GATE_INIT;
    enum { N = 4096 };
    unsigned char *h;
    void *d, *s1, *s2, *e, *t0, *t1, *nt;
    float ms = -1;

    load(1, 0);
    CK(rt.cudaMalloc(&d, N));
    CK(rt.cudaMallocHost((void **)&h, N));
    CK(rt.cudaStreamCreateWithFlags(&s1, 1));
    CK(rt.cudaStreamCreateWithFlags(&s2, 1));
    CK(rt.cudaEventCreateWithFlags(&e, 2 /* cudaEventDisableTiming */));
    CK(rt.cudaEventCreate(&t0));
    CK(rt.cudaEventCreate(&t1));
    CK(rt.cudaEventQuery(e)); /* never recorded: complete */
    memset(h, 0, N);

    CK(rt.cudaEventRecord(t0, s1));
    CK(rt.cudaLaunchHostFunc(s1, gate_fn, &g));
    CK(rt.cudaMemsetAsync(d, 3, N, s1));
    CK(rt.cudaEventRecord(e, s1));
    CK(rt.cudaEventRecord(t1, s1));
    CK(rt.cudaStreamWaitEvent(s2, e, 0));
    CK(rt.cudaMemcpyAsync(h, d, N, D2H, s2));
    /* s2 waits for s1's memset, which waits for the gate */
    gate_wait_entered(&g);
    ASSERT_EQ(rt.cudaEventQuery(e), E_NOT_READY);
    ASSERT_EQ(rt.cudaStreamQuery(s2), E_NOT_READY);
    ASSERT_EQ(rt.cudaEventElapsedTime(&ms, t0, t1), E_NOT_READY);
    ASSERT(all_bytes(h, 0, N));
    ASSERT_EQ(rt.cudaGetLastError(), 0); /* "not ready" is an answer, not an error */
    gate_open(&g);
    CK(rt.cudaStreamSynchronize(s2));
    ASSERT(all_bytes(h, 3, N));
    CK(rt.cudaEventSynchronize(e));
    CK(rt.cudaEventSynchronize(t1));
    CK(rt.cudaEventElapsedTime(&ms, t0, t1));
    ASSERT(ms >= 0);
    ASSERT_EQ(rt.cudaEventElapsedTime(&ms, t0, e), E_INVALID_HANDLE); /* untimed */
    CK(rt.cudaEventCreate(&nt));
    ASSERT_EQ(rt.cudaEventElapsedTime(&ms, t0, nt), E_INVALID_HANDLE); /* never recorded */
    /* interprocess events must be untimed */
    ASSERT_EQ(rt.cudaEventCreateWithFlags(&nt, 4), E_INVALID_VALUE);
    /* a destroyed event's pending record still completes */
    CK(rt.cudaEventRecord(e, s1));
    CK(rt.cudaEventDestroy(e));
    ASSERT_EQ(rt.cudaEventQuery(e), E_INVALID_HANDLE);
    CK(rt.cudaDeviceSynchronize());
    ASSERT_EQ(rt.fakecuda_violations(), 0);
}

/* ---- host functions ----------------------------------------------------------------- */

static struct {
    pthread_mutex_t mu;
    int order[64], n;
    pthread_t thread[64];
    int api_rc;
} hf = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void hf_note(void *arg)
{
    pthread_mutex_lock(&hf.mu);
    hf.thread[hf.n] = pthread_self();
    hf.order[hf.n++] = (int)(intptr_t)arg;
    pthread_mutex_unlock(&hf.mu);
}

static void hf_calls_cuda(void *arg)
{
    void *p = NULL;
    (void)arg;
    hf.api_rc = rt.cudaMalloc(&p, 16);
}

TEST(host_functions)
{
    void *s1, *s2;
    int last1 = -1, last2 = -1;

    load(1, 50);
    CK(rt.cudaStreamCreateWithFlags(&s1, 1));
    CK(rt.cudaStreamCreateWithFlags(&s2, 1));
    for (int i = 0; i < 20; i++) {
        CK(rt.cudaLaunchHostFunc(i % 2 ? s2 : s1, hf_note, (void *)(intptr_t)i));
        if (i % 5 == 0)
            CK(rt.cudaMemsetAsync(NULL, 0, 0, s1)); /* nothing, but legal */
    }
    CK(rt.cudaStreamSynchronize(s1));
    CK(rt.cudaStreamSynchronize(s2));
    ASSERT_EQ(hf.n, 20);
    for (int i = 0; i < hf.n; i++) {
        int *last = hf.order[i] % 2 ? &last2 : &last1;
        ASSERT_MSG(hf.order[i] > *last, "host function %d ran after %d on its stream", hf.order[i],
                   *last);
        *last = hf.order[i];
        /* one thread runs them all, and not the caller's */
        ASSERT(pthread_equal(hf.thread[i], hf.thread[0]));
        ASSERT(!pthread_equal(hf.thread[i], pthread_self()));
    }
    ASSERT_EQ(rt.fakecuda_violations(), 0);
    ASSERT_EQ(rt.cudaLaunchHostFunc(s1, NULL, NULL), E_INVALID_VALUE);

    /* a runtime call inside a host function is refused and counted */
    CK(rt.cudaLaunchHostFunc(s1, hf_calls_cuda, NULL));
    CK(rt.cudaStreamSynchronize(s1));
    ASSERT_EQ(hf.api_rc, E_NOT_PERMITTED);
    ASSERT_EQ(rt.fakecuda_violations(), 1);
    CK(rt.cudaStreamDestroy(s1));
    CK(rt.cudaStreamDestroy(s2));
}

/* ---- the legacy default stream ------------------------------------------------------ */

TEST(legacy_stream)
{
    static struct gate g = GATE_INIT;
    enum { N = 4096 };
    unsigned char *h1, *h2;
    void *a, *b, *blocking, *blocking2, *nonblocking;

    load(1, 100);
    CK(rt.cudaMalloc(&a, N));
    CK(rt.cudaMalloc(&b, N));
    CK(rt.cudaMallocHost((void **)&h1, N));
    CK(rt.cudaMallocHost((void **)&h2, N));
    CK(rt.cudaStreamCreate(&blocking));
    CK(rt.cudaStreamCreate(&blocking2));
    CK(rt.cudaStreamCreateWithFlags(&nonblocking, 1));
    CK(rt.cudaMemset(a, 1, N));
    memset(h1, 0, N);
    memset(h2, 0, N);

    /* blocking: gate, then read a; legacy: overwrite a (must wait for the read) */
    CK(rt.cudaLaunchHostFunc(blocking, gate_fn, &g));
    CK(rt.cudaMemcpyAsync(h1, a, N, D2H, blocking));
    CK(rt.cudaMemsetAsync(a, 2, N, NULL));
    /* a later op of another blocking stream waits for the legacy one */
    CK(rt.cudaMemcpyAsync(h2, a, N, D2H, blocking2));
    /* a non-blocking stream does not wait for the legacy stream */
    CK(rt.cudaMemsetAsync(b, 5, N, nonblocking));
    CK(rt.cudaStreamSynchronize(nonblocking));
    gate_wait_entered(&g);
    ASSERT_EQ(rt.cudaStreamQuery(NULL), E_NOT_READY);
    ASSERT_EQ(rt.cudaStreamQuery(blocking2), E_NOT_READY);
    gate_open(&g);
    CK(rt.cudaStreamSynchronize(blocking2));
    ASSERT(all_bytes(h1, 1, N)); /* read before the legacy memset */
    ASSERT(all_bytes(h2, 2, N)); /* read after it */
    CK(rt.cudaStreamSynchronize(NULL));
    CK(rt.cudaMemcpy(h1, b, N, D2H));
    ASSERT(all_bytes(h1, 5, N));
    CK(rt.cudaStreamDestroy(blocking));
    CK(rt.cudaStreamDestroy(blocking2));
    CK(rt.cudaStreamDestroy(nonblocking));
    ASSERT_EQ(rt.fakecuda_violations(), 0);
}

/* ---- kernels ------------------------------------------------------------------------ */

static const uint32_t fake_fatbin[4] = {0xba55ed50u, 0, 0, 0};

static int launch(void *k, unsigned grid, unsigned block, struct coll_cuda_rc_args *a, void *s)
{
    void *params[1] = {a};
    struct coll_cuda_dim3 g = {grid, 1, 1}, b = {block, 1, 1};
    return rt.cudaLaunchKernel(k, g, b, params, 0, s);
}

TEST(kernels)
{
    enum { N = 1001 };
    float *h, *hd, want[N];
    void *lib, *k, *k2, *kavg, *d[3];
    struct coll_cuda_rc_args a, av;
    char plain[64];

    load(1, 0);
    ASSERT_EQ(rt.cudaLibraryLoadData(&lib, "not a fatbinary", NULL, NULL, 0, NULL, NULL, 0), 200);
    ASSERT_EQ(rt.fakecuda_violations(), 1);
    CK(rt.cudaLibraryLoadData(&lib, fake_fatbin, NULL, NULL, 0, NULL, NULL, 0));
    CK(rt.cudaLibraryGetKernel(&k, lib, "coll_rc_f32_sum"));
    CK(rt.cudaLibraryGetKernel(&k2, lib, "coll_rc_u8_max"));
    CK(rt.cudaLibraryGetKernel(&kavg, lib, "coll_rc_f32_avg"));
    /* signed sums share the unsigned kernel: there is no i8 one */
    ASSERT_EQ(rt.cudaLibraryGetKernel(&k2, lib, "coll_rc_i8_sum"), E_INVALID_DEVICE_FUNCTION);
    ASSERT_EQ(rt.cudaLibraryGetKernel(&k2, lib, "main"), E_INVALID_DEVICE_FUNCTION);

    CK(rt.cudaMallocHost((void **)&h, 3 * N * sizeof(float)));
    CK(rt.cudaMallocManaged((void **)&hd, N * sizeof(float), 1));
    for (int i = 0; i < 3; i++)
        CK(rt.cudaMalloc(&d[i], N * sizeof(float)));
    for (int i = 0; i < N; i++) {
        h[i] = (float)i;
        h[N + i] = 0.5f * (float)i;
        h[2 * N + i] = -1.0f;
        want[i] = (float)i + 0.5f * (float)i + -1.0f;
    }
    for (int i = 0; i < 3; i++)
        CK(rt.cudaMemcpy(d[i], h + i * N, N * sizeof(float), H2D));

    /* d0 = d0 + d1 + d2 in place, also into managed memory */
    memset(&a, 0, sizeof(a));
    a.src[0] = d[0];
    a.src[1] = d[1];
    a.src[2] = d[2];
    a.dst[0] = d[0];
    a.dst[1] = hd;
    a.count = N;
    a.nsrcs = 3;
    a.ndsts = 2;
    a.vec = 1;
    CK(launch(k, 4, 256, &a, NULL));
    CK(rt.cudaMemcpy(h, d[0], N * sizeof(float), D2H));
    CK(rt.cudaStreamSynchronize(NULL));
    ASSERT(memcmp(h, want, sizeof(want)) == 0);
    ASSERT(memcmp(hd, want, sizeof(want)) == 0);
    ASSERT_EQ(rt.fakecuda_violations(), 1);

    /* avg: the sum d1 + d2, then divided by the divisor once */
    memset(&av, 0, sizeof(av));
    av.src[0] = d[1];
    av.src[1] = d[2];
    av.dst[0] = hd;
    av.count = N;
    av.nsrcs = 2;
    av.ndsts = 1;
    av.vec = 1;
    av.divisor = 3;
    CK(launch(kavg, 4, 256, &av, NULL));
    CK(rt.cudaStreamSynchronize(NULL));
    for (int i = 0; i < N; i++)
        ASSERT_MSG(hd[i] == (0.5f * (float)i + -1.0f) / 3.0f, "avg element %d: %g", i,
                   (double)hd[i]);
    /* an avg kernel without a divisor, and a divisor that a sum kernel would drop */
    av.divisor = 0;
    ASSERT_EQ(launch(kavg, 4, 256, &av, NULL), E_INVALID_VALUE);
    a.divisor = 2;
    ASSERT_EQ(launch(k, 4, 256, &a, NULL), E_INVALID_VALUE);
    a.divisor = 0;
    ASSERT_EQ(rt.fakecuda_violations(), 3);

    /* launch configuration */
    ASSERT_EQ(launch(k, 0, 256, &a, NULL), E_INVALID_CONFIG);
    ASSERT_EQ(launch(k, 1, 1025, &a, NULL), E_INVALID_CONFIG);
    ASSERT_EQ(launch(k, 0x80000000u, 256, &a, NULL), E_INVALID_CONFIG);
    CK(launch(k, 0x7fffffffu, 1024, &a, NULL));
    ASSERT_EQ(launch(plain, 1, 1, &a, NULL), E_INVALID_DEVICE_FUNCTION);
    ASSERT_EQ(launch(k, 1, 1, &a, (void *)plain), E_INVALID_HANDLE);
    /* pointers the GPU cannot use */
    a.src[1] = plain;
    ASSERT_EQ(launch(k, 1, 256, &a, NULL), E_ILLEGAL_ADDRESS);
    a.src[1] = (char *)d[1] + 4; /* element-aligned, not 16-byte aligned with vec set */
    ASSERT_EQ(launch(k, 1, 256, &a, NULL), E_MISALIGNED);
    a.vec = 0;
    ASSERT_EQ(launch(k, 1, 256, &a, NULL), E_ILLEGAL_ADDRESS); /* past d[1]'s end */
    a.count = N - 1;
    CK(launch(k, 1, 256, &a, NULL)); /* in bounds now */
    a.src[1] = (char *)d[1] + 2;
    ASSERT_EQ(launch(k, 1, 256, &a, NULL), E_MISALIGNED);
    a.src[1] = d[1];
    a.nsrcs = 9;
    ASSERT_EQ(launch(k, 1, 256, &a, NULL), E_INVALID_VALUE);
    a.nsrcs = 3;
    CK(rt.cudaFree(d[2]));
    ASSERT_EQ(launch(k, 1, 256, &a, NULL), E_ILLEGAL_ADDRESS); /* freed input */
    ASSERT(rt.fakecuda_violations() >= 5);
    CK(rt.cudaLibraryUnload(lib));
    ASSERT_EQ(launch(k, 1, 256, &a, NULL), E_INVALID_DEVICE_FUNCTION); /* unloaded */
}

/* COLL_FAKECUDA_CORRUPT_RC=2: the second launch, and only it, has element count / 2 of its
 * first output inverted; the other output is right. */
TEST(corrupt_rc)
{
    enum { N = 33 };
    uint32_t h[N], h2[N];
    void *lib, *k, *d[3];
    struct coll_cuda_rc_args a;

    setenv("COLL_FAKECUDA_CORRUPT_RC", "2", 1);
    load(1, 0);
    CK(rt.cudaLibraryLoadData(&lib, fake_fatbin, NULL, NULL, 0, NULL, NULL, 0));
    CK(rt.cudaLibraryGetKernel(&k, lib, "coll_rc_u32_sum"));
    for (int i = 0; i < 3; i++) {
        CK(rt.cudaMalloc(&d[i], sizeof(h)));
        CK(rt.cudaMemset(d[i], 0, sizeof(h)));
    }
    memset(&a, 0, sizeof(a));
    a.src[0] = d[0];
    a.src[1] = d[0];
    a.dst[0] = d[1];
    a.dst[1] = d[2];
    a.count = N;
    a.nsrcs = 2;
    a.ndsts = 2;
    for (int launch_no = 1; launch_no <= 3; launch_no++) {
        CK(launch(k, 1, 256, &a, NULL));
        CK(rt.cudaMemcpy(h, d[1], sizeof(h), D2H));
        CK(rt.cudaMemcpy(h2, d[2], sizeof(h2), D2H));
        for (int i = 0; i < N; i++) {
            ASSERT_EQ(h[i], launch_no == 2 && i == N / 2 ? 0xffffffffu : 0u);
            ASSERT_EQ(h2[i], 0u);
        }
        CK(rt.cudaMemset(d[1], 0, sizeof(h)));
    }
    for (int i = 0; i < 3; i++)
        CK(rt.cudaFree(d[i]));
    ASSERT_EQ(rt.fakecuda_violations(), 0);
}

/* COLL_FAKECUDA_CHECK_LEAKS=1 with COLL_FAKECUDA_STRICT=1: a process that exits with device
 * or pinned memory still allocated aborts; one that freed it exits normally. */
static int leak_child(bool free_all)
{
    int status = 0;
    void *d, *h;
    pid_t pid = fork();

    ASSERT(pid >= 0);
    if (pid > 0) {
        while (waitpid(pid, &status, 0) < 0)
            ;
        return status;
    }

    setenv("COLL_FAKECUDA_CHECK_LEAKS", "1", 1);
    setenv("COLL_FAKECUDA_STRICT", "1", 1);
    load(1, 0);
    CK(rt.cudaMalloc(&d, 4096));
    CK(rt.cudaMallocHost(&h, 100));
    CK(rt.cudaFreeHost(h));
    if (free_all)
        CK(rt.cudaFree(d));
    exit(0); /* atexit handlers run, as at the end of main */
}

TEST(leak_check)
{
    int st = leak_child(false);

    ASSERT_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "leaking child: status 0x%x", st);
    st = leak_child(true);
    ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child that freed all: status 0x%x", st);
}

/* ---- several devices ---------------------------------------------------------------- */

TEST(multi_device_errors)
{
    void *lib, *k, *d0, *d1, *s0, *s1, *e1;
    struct coll_cuda_rc_args a;
    int n = 0, can = -1, dev = -1;

    load(2, 0);
    CK(rt.cudaGetDeviceCount(&n));
    ASSERT_EQ(n, 2);
    ASSERT_EQ(rt.cudaSetDevice(2), E_INVALID_DEVICE);
    ASSERT_EQ(rt.cudaSetDevice(-1), E_INVALID_DEVICE);
    CK(rt.cudaDeviceCanAccessPeer(&can, 0, 1));
    ASSERT_EQ(can, 1);
    CK(rt.cudaDeviceCanAccessPeer(&can, 0, 0));
    ASSERT_EQ(can, 0);
    CK(rt.cudaLibraryLoadData(&lib, fake_fatbin, NULL, NULL, 0, NULL, NULL, 0));
    CK(rt.cudaLibraryGetKernel(&k, lib, "coll_rc_u32_sum"));

    CK(rt.cudaMalloc(&d0, 64));
    CK(rt.cudaStreamCreate(&s0));
    CK(rt.cudaSetDevice(1));
    CK(rt.cudaMalloc(&d1, 64));
    CK(rt.cudaStreamCreate(&s1));
    CK(rt.cudaEventCreate(&e1));
    CK(rt.cudaStreamGetDevice(s0, &dev));
    ASSERT_EQ(dev, 0);
    CK(rt.cudaMemset(d1, 0, 64));

    memset(&a, 0, sizeof(a));
    a.src[0] = d1;
    a.dst[0] = d1;
    a.count = 16;
    a.nsrcs = 1;
    a.ndsts = 1;
    CK(launch(k, 1, 32, &a, s1));
    /* a kernel into a stream of another device */
    ASSERT_EQ(launch(k, 1, 32, &a, s0), E_INVALID_HANDLE);
    /* device 1 reading device 0's memory needs peer access */
    a.src[0] = d0;
    ASSERT_EQ(launch(k, 1, 32, &a, s1), E_ILLEGAL_ADDRESS);
    CK(rt.cudaDeviceEnablePeerAccess(0, 0));
    ASSERT_EQ(rt.cudaDeviceEnablePeerAccess(0, 0), 704);
    CK(launch(k, 1, 32, &a, s1));
    /* an event of device 1 recorded on device 0's stream; waits across devices are fine */
    ASSERT_EQ(rt.cudaEventRecord(e1, s0), E_INVALID_HANDLE);
    CK(rt.cudaEventRecord(e1, s1));
    CK(rt.cudaStreamWaitEvent(s0, e1, 0));
    CK(rt.cudaMemcpyAsync(d0, d1, 64, DEFAULT, s0)); /* copies may use any device's stream */
    CK(rt.cudaDeviceSynchronize());
    CK(rt.cudaSetDevice(0));
    CK(rt.cudaDeviceSynchronize());
    CK(rt.cudaStreamDestroy(s0));
    CK(rt.cudaStreamDestroy(s1));
    CK(rt.cudaEventDestroy(e1));
}

TEST(no_device)
{
    void *p = NULL;
    int n = -1;

    load(0, 0);
    ASSERT_EQ(rt.cudaGetDeviceCount(&n), E_NO_DEVICE);
    ASSERT_EQ(n, 0);
    ASSERT_EQ(rt.cudaMalloc(&p, 16), E_NO_DEVICE);
    ASSERT_EQ(rt.cudaSetDevice(0), E_NO_DEVICE);
}

/* ---- IPC across processes ----------------------------------------------------------- */

struct ipc_msg {
    ipc_handle_t mem, ev;
};

static void read_all(int fd, void *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)p + got, n - got);
        ASSERT_MSG(r > 0, "pipe closed after %zu of %zu bytes", got, n);
        got += (size_t)r;
    }
}

static int ipc_go_fd;
/* In the owner: a host function that holds its stream until the peer writes a byte. */
static void ipc_wait_peer(void *arg)
{
    char c;
    (void)arg;
    if (read(ipc_go_fd, &c, 1) != 1)
        _exit(3);
}

/* The owner, started before the emulator: allocates, hands out handles, records an event
 * behind the peer's go-ahead, then checks what the peer wrote into its memory. */
static void ipc_owner(int to_peer, int from_peer)
{
    struct ipc_msg m;
    unsigned char h[4096];
    void *d, *e, *s, *opened;
    char c;

    load(1, 0);
    ipc_go_fd = from_peer;
    CK(rt.cudaMalloc(&d, sizeof(h)));
    CK(rt.cudaMemset(d, 0x5a, sizeof(h)));
    CK(rt.cudaStreamCreateWithFlags(&s, 1));
    CK(rt.cudaEventCreateWithFlags(&e, 4 | 2));
    CK(rt.cudaIpcGetMemHandle(&m.mem, d));
    ASSERT_EQ(rt.cudaIpcGetMemHandle(&m.ev, (char *)d + 16), E_INVALID_VALUE);
    CK(rt.cudaIpcGetEventHandle(&m.ev, e));
    ASSERT_EQ(rt.cudaIpcOpenMemHandle(&opened, m.mem, 1), E_DEVICE_UNINITIALIZED);
    CK(rt.cudaLaunchHostFunc(s, ipc_wait_peer, NULL));
    CK(rt.cudaMemsetAsync(d, 0x77, 16, s)); /* the first 16 bytes, after the go-ahead */
    CK(rt.cudaEventRecord(e, s));
    ASSERT(write(to_peer, &m, sizeof(m)) == (ssize_t)sizeof(m));
    CK(rt.cudaStreamSynchronize(s));
    /* the peer's copy waited for our event, then wrote 0x33 from byte 16 on */
    read_all(from_peer, &c, 1);
    CK(rt.cudaMemcpy(h, d, sizeof(h), D2H));
    ASSERT(all_bytes(h, 0x77, 16));
    ASSERT(all_bytes(h + 16, 0x33, sizeof(h) - 16));
    ASSERT_EQ(rt.fakecuda_violations(), 1); /* the interior pointer's handle */
}

TEST(ipc_across_processes)
{
    int down[2], up[2], status = 0;
    struct ipc_msg m;
    enum { N = 4096 };
    unsigned char *h;
    void *p, *p2, *e, *s;
    pid_t pid;
    char c = 1;

    ASSERT(pipe(down) == 0 && pipe(up) == 0);
    pid = fork(); /* before either process touches the emulator */
    ASSERT(pid >= 0);
    if (pid == 0) {
        close(down[0]);
        close(up[1]);
        ipc_owner(down[1], up[0]);
        _exit(0);
    }
    close(down[1]);
    close(up[0]);
    load(1, 0);
    read_all(down[0], &m, sizeof(m));
    /* pinned: a copy to pageable memory would wait for the owner's go-ahead, which we
     * only send after queueing it */
    CK(rt.cudaMallocHost((void **)&h, N));
    CK(rt.cudaStreamCreateWithFlags(&s, 1));
    ASSERT_EQ(rt.cudaIpcOpenMemHandle(&p, m.mem, 0), E_INVALID_VALUE); /* flags */
    CK(rt.cudaIpcOpenMemHandle(&p, m.mem, 1));
    CK(rt.cudaIpcOpenMemHandle(&p2, m.mem, 1));
    ASSERT(p == p2);
    ASSERT_EQ(child_signal(read_byte, p), SIGSEGV); /* a device pointer here too */
    CK(rt.cudaMemcpy(h, p, N, D2H));
    ASSERT(all_bytes(h, 0x5a, N));
    CK(rt.cudaIpcOpenEventHandle(&e, m.ev));
    /* the owner's record is held by its host function until we send the go-ahead */
    ASSERT_EQ(rt.cudaEventQuery(e), E_NOT_READY);
    CK(rt.cudaStreamWaitEvent(s, e, 0));
    CK(rt.cudaMemsetAsync((char *)p + 16, 0x33, N - 16, s));
    CK(rt.cudaMemcpyAsync(h, p, N, D2H, s));
    ASSERT(write(up[1], &c, 1) == 1);
    CK(rt.cudaStreamSynchronize(s));
    ASSERT(all_bytes(h, 0x77, 16)); /* the owner's memset happened before our copy */
    ASSERT(all_bytes(h + 16, 0x33, N - 16));
    CK(rt.cudaEventQuery(e));
    ASSERT(write(up[1], &c, 1) == 1);
    while (waitpid(pid, &status, 0) < 0)
        ;
    ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "owner status 0x%x", status);
    CK(rt.cudaIpcCloseMemHandle(p));
    CK(rt.cudaIpcCloseMemHandle(p2));
    ASSERT_EQ(rt.cudaIpcCloseMemHandle(p), E_INVALID_VALUE);
    /* the owner is gone, and its memory with it */
    ASSERT_EQ(rt.cudaIpcOpenMemHandle(&p, m.mem, 1), E_MAP_FAILED);
    CK(rt.cudaEventDestroy(e));
    CK(rt.cudaStreamDestroy(s));
}

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
