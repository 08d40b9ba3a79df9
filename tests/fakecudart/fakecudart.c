/*
 * fakecudart.c - a strict emulation of the part of the CUDA runtime that coll uses, for
 * testing device-buffer code on machines without a GPU. Built as a shared module exporting
 * the runtime's own symbol names (C ABI, int = cudaError_t with CUDA's numeric codes); coll
 * loads it instead of libcudart when COLL_CUDA_LIBRARY names it.
 *
 * Divisions: 1 error codes and types, 2 process state, per-thread state and entry checks,
 * 3 the allocation table and pointer translation, 4 streams and their worker threads,
 * 5 the host-function thread, 6 devices, versions, errors, 7 memory, 8 copies and memsets,
 * 9 streams (API), 10 events, 11 kernels, 12 IPC.
 *
 * Model. Device memory is a memfd per allocation: the pointer handed out lies in a large
 * PROT_NONE region that is reserved once and never reused, so host code that dereferences
 * a device pointer (or one freed long ago) dies of SIGSEGV as it would on a GPU; the
 * emulator itself reads and writes through a second, private RW mapping of the memfd.
 * Pinned and managed memory are ordinary RW mappings in the same region (freed ones turn
 * PROT_NONE). Each stream is a FIFO of operations run by a worker thread of its own;
 * ordering between streams (events, the legacy default stream) is a list of (stream,
 * sequence number) dependencies per operation, waited for on one condition variable.
 * Host functions run on one callback thread per process, in stream order, and any runtime
 * call made from one fails with cudaErrorNotPermitted and counts as a violation.
 *
 * Strictness, beyond what the runtime itself returns: copies and memsets outside a known
 * allocation, an explicit cudaMemcpyKind that contradicts the pointers, kernels reaching
 * memory the launching device cannot (plain host memory, another device's memory without
 * peer access), misaligned kernel arguments, partially overlapping kernel inputs and
 * outputs, and calls from host functions are all reported on stderr ("fakecudart:
 * violation: ...") and counted: fakecuda_violations() lets a test assert none happened.
 *
 * Simplified (docs/kernels.md, "Testing CUDA without a GPU"): cudaMemset and cudaMemcpy
 * complete before returning; the legacy stream is emulated with dependencies, not one
 * device-wide queue; an event re-recorded on another stream while a wait on it is pending
 * resolves by sequence numbers; no sticky errors, graphs, capture, or timing model.
 *
 * Configuration (read once): COLL_FAKECUDA_DEVICES (default 1, 0: cudaErrorNoDevice),
 * COLL_FAKECUDA_DELAY_US (sleep before every copy, memset and kernel; unset: a random
 * 0-20 us jitter; 0: none), COLL_FAKECUDA_STRICT=1 (a violation aborts the process, for
 * tests that do not ask fakecuda_violations()), COLL_FAKECUDA_CHECK_LEAKS=1 (memory from
 * cudaMalloc, cudaMallocManaged, cudaMallocHost or cudaHostAlloc still allocated when the
 * process exits is a violation), COLL_FAKECUDA_CORRUPT_RC=N (the N-th reduce-copy kernel
 * of the process, counted from 1, inverts every bit of element count / 2 of its first
 * output: a wrong result that no NaN rule can excuse, so that a check of kernel results is
 * seen to fail), COLL_FAKECUDA_HOSTFN_HOLDS=1 (while a host function runs, no copy, memset
 * or kernel of any stream starts: CUDA documents that a host function must not wait for
 * work not ordered before it, and this makes code that does so hang),
 * COLL_FAKECUDA_MALLOC_SYNC=1 (cudaMalloc first waits for every stream of its device, as
 * CUDA's implicit synchronisation rules allow), COLL_FAKECUDA_LAZY_LOADING=0 (kernels load
 * at once; by default, as CUDA's lazy loading,
 * a kernel's first launch or attribute query on a device waits until no stream of the
 * device has work queued: see fc_kernel_load).
 *
 * cuStreamWaitValue32 (and its _v2 name), a driver call, is exported too: the stream waits
 * until a 32-bit word of page-locked or managed memory passes the test (GEQ, EQ, AND, NOR).
 */
#include "cuda/cuda.h"
#include "reduce/elem.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define FC_API __attribute__((visibility("default")))

/* ---- 1 error codes and types --------------------------------------------------------- */

/* cudaError_t values (driver_types.h), name and text. */
#define FC_ERRORS(X)                                                                               \
    X(0, cudaSuccess, "no error")                                                                  \
    X(1, cudaErrorInvalidValue, "invalid argument")                                                \
    X(2, cudaErrorMemoryAllocation, "out of memory")                                               \
    X(3, cudaErrorInitializationError, "initialization error")                                     \
    X(9, cudaErrorInvalidConfiguration, "invalid configuration argument")                          \
    X(21, cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                    \
    X(98, cudaErrorInvalidDeviceFunction, "invalid device function")                               \
    X(100, cudaErrorNoDevice, "no CUDA-capable device is detected")                                \
    X(101, cudaErrorInvalidDevice, "invalid device ordinal")                                       \
    X(200, cudaErrorInvalidKernelImage, "device kernel image is invalid")                          \
    X(201, cudaErrorDeviceUninitialized, "invalid device context")                                 \
    X(205, cudaErrorMapBufferObjectFailed, "mapping of buffer object failed")                      \
    X(400, cudaErrorInvalidResourceHandle, "invalid resource handle")                              \
    X(600, cudaErrorNotReady, "device not ready")                                                  \
    X(700, cudaErrorIllegalAddress, "an illegal memory access was encountered")                    \
    X(704, cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled")                    \
    X(705, cudaErrorPeerAccessNotEnabled, "peer access has not been enabled")                      \
    X(712, cudaErrorHostMemoryAlreadyRegistered,                                                   \
      "part or all of the requested memory range is already mapped")                               \
    X(713, cudaErrorHostMemoryNotRegistered,                                                       \
      "pointer does not correspond to a registered memory region")                                 \
    X(716, cudaErrorMisalignedAddress, "misaligned address")                                       \
    X(800, cudaErrorNotPermitted, "operation not permitted")                                       \
    X(801, cudaErrorNotSupported, "operation not supported")

enum {
#define X(num, name, text) name = num,
    FC_ERRORS(X)
#undef X
};

/* Enum values and flags (driver_types.h). */
enum { FC_H2H = 0, FC_H2D = 1, FC_D2H = 2, FC_D2D = 3, FC_DEFAULT = 4 };
enum { FC_UNREGISTERED = 0, FC_HOST = 1, FC_DEVICE = 2, FC_MANAGED = 3 };
#define FC_STREAM_NONBLOCKING 0x1u
#define FC_EVENT_BLOCKING_SYNC 0x1u
#define FC_EVENT_DISABLE_TIMING 0x2u
#define FC_EVENT_INTERPROCESS 0x4u
#define FC_IPC_LAZY_PEER 0x1u
#define FC_STREAM_LEGACY ((void *)0x1)
#define FC_STREAM_PER_THREAD ((void *)0x2)

/* cudaDeviceAttr values answered by cudaDeviceGetAttribute. */
#define FC_ATTRS(X)                                                                                \
    X(1, 1024)       /* MaxThreadsPerBlock */                                                      \
    X(2, 1024)       /* MaxBlockDimX */                                                            \
    X(3, 1024)       /* MaxBlockDimY */                                                            \
    X(4, 64)         /* MaxBlockDimZ */                                                            \
    X(5, 2147483647) /* MaxGridDimX */                                                             \
    X(6, 65535)      /* MaxGridDimY */                                                             \
    X(7, 65535)      /* MaxGridDimZ */                                                             \
    X(8, 49152)      /* MaxSharedMemoryPerBlock */                                                 \
    X(10, 32)        /* WarpSize */                                                                \
    X(16, 132)       /* MultiProcessorCount */                                                     \
    X(39, 2048)      /* MaxThreadsPerMultiProcessor */                                             \
    X(41, 1)         /* UnifiedAddressing */                                                       \
    X(75, 9)         /* ComputeCapabilityMajor */                                                  \
    X(76, 0)         /* ComputeCapabilityMinor */                                                  \
    X(83, 1)         /* ManagedMemory */                                                           \
    X(89, 1)         /* ConcurrentManagedAccess */                                                 \
    X(91, 1)         /* CanUseHostPointerForRegisteredMem */

struct fc_ptr_attr { /* struct cudaPointerAttributes (CUDA 11 and later) */
    int type;
    int device;
    void *device_pointer;
    void *host_pointer;
};

#define FC_IPC_HANDLE_BYTES 64
struct fc_ipc_handle { /* cudaIpcMemHandle_t and cudaIpcEventHandle_t: 64 opaque bytes */
    char reserved[FC_IPC_HANDLE_BYTES];
};
struct fc_ipc_wire { /* what the emulator puts in those bytes */
    uint32_t magic;
    int32_t pid;
    int32_t fd;
    int32_t device;
    uint64_t ino;
    uint64_t size;
    uint64_t token;
};
#define FC_IPC_MEM_MAGIC 0x4d494346u /* "FCIM" */
#define FC_IPC_EV_MAGIC 0x45494346u  /* "FCIE" */
_Static_assert(sizeof(struct fc_ipc_wire) <= FC_IPC_HANDLE_BYTES, "IPC handle too small");

/* ---- 2 process state, per-thread state and entry checks ------------------------------ */

#define FC_MAX_DEVICES 16
#define FC_VA_BYTES (256ull << 30) /* device address space; never reused */

struct fc_stream;
struct fc_event;
struct fc_op;
struct fc_lib;

static struct {
    pthread_once_t once;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* broadcast whenever an operation completes or state changes */
    int init_err;      /* cudaError_t every call returns when initialization failed */
    atomic_bool forked;
    int ndev;
    size_t page;
    long delay_us; /* < 0: random jitter */
    uint64_t rng;
    char *va; /* the reserved region: [va, va + FC_VA_BYTES) */
    size_t va_used;
    struct fc_alloc **allocs; /* sorted by base */
    size_t nallocs, cap;
    uint64_t dev_bytes[FC_MAX_DEVICES];
    bool peer[FC_MAX_DEVICES][FC_MAX_DEVICES]; /* peer[a][b]: a may access b's memory */
    struct fc_stream *legacy[FC_MAX_DEVICES];
    struct fc_stream *streams; /* every stream object not yet freed */
    struct fc_event *events;   /* live events */
    struct fc_lib *libs;       /* every library ever loaded (kernel handles stay checkable) */
    /* the callback thread */
    struct fc_op *cbq_head, *cbq_tail;
    pthread_cond_t cb_cv;
    bool cb_started;
    atomic_int violations;
    bool abort_on_violation; /* COLL_FAKECUDA_STRICT=1 */
    long corrupt_rc;         /* COLL_FAKECUDA_CORRUPT_RC: 0 none, else the launch to spoil */
    bool hostfn_holds;       /* COLL_FAKECUDA_HOSTFN_HOLDS=1 */
    bool lazy_loading;       /* COLL_FAKECUDA_LAZY_LOADING, default 1 */
    bool malloc_sync;        /* COLL_FAKECUDA_MALLOC_SYNC=1 */
    int hostfn_running;
} fc = {.once = PTHREAD_ONCE_INIT,
        .mu = PTHREAD_MUTEX_INITIALIZER,
        .cv = PTHREAD_COND_INITIALIZER,
        .cb_cv = PTHREAD_COND_INITIALIZER};

static _Thread_local struct {
    int dev;
    int last_err;
    bool in_callback;
    struct fc_stream *per_thread[FC_MAX_DEVICES];
} tls;

static void fc_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fc_log(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof(buf) - 2)
        n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    /* one write per line: lines of several threads and processes do not interleave */
    if (write(STDERR_FILENO, buf, (size_t)n) < 0)
        return;
}

#define fc_violation(...)                                                                          \
    do {                                                                                           \
        atomic_fetch_add(&fc.violations, 1);                                                       \
        fc_log("fakecudart: violation: " __VA_ARGS__);                                             \
        if (fc.abort_on_violation)                                                                 \
            abort();                                                                               \
    } while (0)

/* Record err as the thread's last error. cudaErrorNotReady is an answer, not an error,
 * and is not recorded. */
static int fc_err(int err)
{
    if (err != cudaSuccess && err != cudaErrorNotReady)
        tls.last_err = err;
    return err;
}

static void fc_atfork_child(void)
{
    /* CUDA cannot be used in a child forked after initialization; the emulator's threads
     * are gone and its lock may be held, so every call fails from here on. */
    atomic_store(&fc.forked, true);
}

static void fc_leak_check(void);

static void fc_init(void)
{
    const char *v = getenv("COLL_FAKECUDA_DEVICES");
    struct timespec ts;

    fc.page = (size_t)sysconf(_SC_PAGESIZE);
    fc.ndev = 1;
    if (v && *v) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n < 0) {
            fc_log("fakecudart: COLL_FAKECUDA_DEVICES='%s' is not a count; using 1", v);
            n = 1;
        } else if (n > FC_MAX_DEVICES) {
            fc_log("fakecudart: COLL_FAKECUDA_DEVICES=%ld: at most %d", n, FC_MAX_DEVICES);
            n = FC_MAX_DEVICES;
        }
        fc.ndev = (int)n;
    }
    fc.delay_us = -1;
    v = getenv("COLL_FAKECUDA_DELAY_US");
    if (v && *v) {
        char *end;
        long d = strtol(v, &end, 10);
        if (*end || d < 0 || d > 10000000)
            fc_log("fakecudart: COLL_FAKECUDA_DELAY_US='%s' ignored", v);
        else
            fc.delay_us = d;
    }
    v = getenv("COLL_FAKECUDA_STRICT");
    fc.abort_on_violation = v && strcmp(v, "1") == 0;
    v = getenv("COLL_FAKECUDA_CHECK_LEAKS");
    if (v && strcmp(v, "1") == 0)
        atexit(fc_leak_check);
    v = getenv("COLL_FAKECUDA_MALLOC_SYNC");
    fc.malloc_sync = v && strcmp(v, "1") == 0;
    v = getenv("COLL_FAKECUDA_LAZY_LOADING");
    fc.lazy_loading = !(v && strcmp(v, "0") == 0);
    v = getenv("COLL_FAKECUDA_HOSTFN_HOLDS");
    fc.hostfn_holds = v && strcmp(v, "1") == 0;
    v = getenv("COLL_FAKECUDA_CORRUPT_RC");
    if (v && *v) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n < 0)
            fc_log("fakecudart: COLL_FAKECUDA_CORRUPT_RC='%s' ignored", v);
        else
            fc.corrupt_rc = n;
    }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    fc.rng = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull + (uint64_t)getpid() + 1;
    fc.va = mmap(NULL, FC_VA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (fc.va == MAP_FAILED) {
        fc_log("fakecudart: cannot reserve %llu GiB of address space: %s", FC_VA_BYTES >> 30,
               strerror(errno));
        fc.va = NULL;
        fc.init_err = cudaErrorInitializationError;
        return;
    }
    pthread_atfork(NULL, NULL, fc_atfork_child);
}

enum { FC_NEED_DEVICE = 1 };

/* Every entry point starts here: initialization, the callback rule, fork, devices. */
static int fc_enter(const char *name, int need)
{
    pthread_once(&fc.once, fc_init);
    if (tls.in_callback) {
        fc_violation("%s called from a host function (cudaErrorNotPermitted)", name);
        return fc_err(cudaErrorNotPermitted);
    }
    if (atomic_load(&fc.forked))
        return fc_err(cudaErrorInitializationError);
    if (fc.init_err)
        return fc_err(fc.init_err);
    if ((need & FC_NEED_DEVICE) && fc.ndev == 0)
        return fc_err(cudaErrorNoDevice);
    return cudaSuccess;
}

#define FC_ENTER(need)                                                                             \
    do {                                                                                           \
        int fc_e_ = fc_enter(__func__, (need));                                                    \
        if (fc_e_ != cudaSuccess)                                                                  \
            return fc_e_;                                                                          \
    } while (0)

static uint64_t fc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Before every copy, memset and kernel: a reader that does not wait for the stream sees
 * the old bytes for a while. */
static void fc_delay(void)
{
    long us = fc.delay_us;

    if (us < 0) {
        pthread_mutex_lock(&fc.mu);
        fc.rng ^= fc.rng << 13;
        fc.rng ^= fc.rng >> 7;
        fc.rng ^= fc.rng << 17;
        us = (long)(fc.rng % 21);
        pthread_mutex_unlock(&fc.mu);
    }
    if (us > 0) {
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
    }
}

static long fc_futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

/* ---- 3 the allocation table and pointer translation ---------------------------------- */

enum fc_alloc_kind { FC_A_MALLOC, FC_A_MANAGED, FC_A_HOSTALLOC, FC_A_REGISTERED, FC_A_IPC };

struct fc_alloc {
    char *base;    /* what the program sees */
    size_t size;   /* bytes asked for: the bounds checked */
    size_t mapped; /* bytes of the mapping(s), page-rounded */
    char *alias;   /* where the emulator reads and writes (== base for host memory) */
    int type;      /* cudaMemoryType */
    int device;    /* -1 for registered host memory */
    enum fc_alloc_kind kind;
    int fd;         /* memfd of device memory, -1 otherwise */
    uint64_t ino;   /* of fd, for IPC handles */
    uint64_t token; /* random, for IPC handles */
    int ipc_refs;   /* FC_A_IPC: opens of the same handle */
    pid_t ipc_pid;
};

static size_t fc_page(void)
{
    return fc.page;
}

static size_t fc_round_page(size_t n)
{
    size_t p = fc_page();
    return (n + p - 1) / p * p;
}

/* Index of the first allocation with base > p. Caller holds fc.mu. */
static size_t fc_upper(const void *p)
{
    size_t lo = 0, hi = fc.nallocs;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)fc.allocs[mid]->base <= (uintptr_t)p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static struct fc_alloc *fc_find(const void *p)
{
    size_t i = fc_upper(p);
    struct fc_alloc *a;

    if (i == 0)
        return NULL;
    a = fc.allocs[i - 1];
    if ((uintptr_t)p < (uintptr_t)a->base + (a->size ? a->size : 1))
        return a;
    return NULL;
}

static bool fc_in_va(const void *p)
{
    return fc.va && (uintptr_t)p >= (uintptr_t)fc.va &&
           (uintptr_t)p < (uintptr_t)fc.va + FC_VA_BYTES;
}

static int fc_table_add(struct fc_alloc *a)
{
    size_t i;

    if (fc.nallocs == fc.cap) {
        size_t cap = fc.cap ? 2 * fc.cap : 64;
        struct fc_alloc **n = realloc(fc.allocs, cap * sizeof(*n));
        if (!n)
            return cudaErrorMemoryAllocation;
        fc.allocs = n;
        fc.cap = cap;
    }
    i = fc_upper(a->base);
    memmove(&fc.allocs[i + 1], &fc.allocs[i], (fc.nallocs - i) * sizeof(*fc.allocs));
    fc.allocs[i] = a;
    fc.nallocs++;
    return cudaSuccess;
}

static void fc_table_del(struct fc_alloc *a)
{
    for (size_t i = 0; i < fc.nallocs; i++) {
        if (fc.allocs[i] == a) {
            memmove(&fc.allocs[i], &fc.allocs[i + 1], (fc.nallocs - i - 1) * sizeof(*fc.allocs));
            fc.nallocs--;
            return;
        }
    }
}

/* Carve bytes (page-rounded, plus one guard page) out of the reserved region. */
static char *fc_va_take(size_t mapped)
{
    char *p;

    if (!fc.va || mapped > FC_VA_BYTES - fc.va_used ||
        FC_VA_BYTES - fc.va_used - mapped < fc_page())
        return NULL;
    p = fc.va + fc.va_used;
    fc.va_used += mapped + fc_page();
    return p;
}

/* Put a range of the region back to PROT_NONE, releasing its pages. */
static void fc_va_retire(char *base, size_t mapped)
{
    if (mmap(base, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
             0) == MAP_FAILED)
        fc_log("fakecudart: cannot retire %p (+%zu): %s", (void *)base, mapped, strerror(errno));
}

/* What the memory at [p, p + len) is, and where the emulator may touch it.
 * FC_X_*: what the caller needs. Caller holds fc.mu. */
struct fc_xl {
    char *host; /* p in the emulator's view */
    int type;
    int device;
    struct fc_alloc *alloc; /* NULL for unregistered memory */
};

static int fc_xlate(const char *what, const void *p, size_t len, struct fc_xl *x)
{
    struct fc_alloc *a = fc_find(p);

    if (!a) {
        if (fc_in_va(p)) {
            fc_violation("%s: %p is freed or was never allocated", what, p);
            return cudaErrorInvalidValue;
        }
        x->host = (char *)p;
        x->type = FC_UNREGISTERED;
        x->device = -1;
        x->alloc = NULL;
        return cudaSuccess;
    }
    if ((uintptr_t)p - (uintptr_t)a->base > a->size ||
        len > a->size - ((uintptr_t)p - (uintptr_t)a->base)) {
        fc_violation("%s: [%p, +%zu) runs past the end of its %zu-byte allocation at %p", what, p,
                     len, a->size, (void *)a->base);
        return cudaErrorInvalidValue;
    }
    x->host = a->alias + ((const char *)p - a->base);
    x->type = a->type;
    x->device = a->device;
    x->alloc = a;
    return cudaSuccess;
}

/* ---- 4 streams and their worker threads ---------------------------------------------- */

struct fc_ipc_page {       /* the shared page behind an interprocess event */
    _Atomic uint32_t rec;  /* generation of the last record */
    _Atomic uint32_t done; /* highest generation completed */
    uint64_t token;
};

/* An operation waits until stream s has completed seq operations, or until an IPC event's
 * page has completed generation gen. */
struct fc_dep {
    struct fc_stream *s;
    uint64_t seq;
    struct fc_event *ev; /* IPC: holds the page */
    uint32_t gen;
};

enum fc_op_kind {
    FC_OP_NOP,
    FC_OP_COPY,
    FC_OP_SET,
    FC_OP_KERNEL,
    FC_OP_RECORD,
    FC_OP_HOSTFN,
    FC_OP_WAITVAL
};

struct fc_op {
    struct fc_op *next;
    enum fc_op_kind kind;
    struct fc_dep *deps;
    int ndeps, capdeps;
    /* COPY / SET */
    char *dst;
    const char *src;
    size_t bytes;
    int value;
    void *staging; /* freed after the copy */
    /* KERNEL */
    struct coll_cuda_rc_args rc;
    void (*krun)(const struct coll_cuda_rc_args *a);
    size_t corrupt_esize; /* COLL_FAKECUDA_CORRUPT_RC chose this launch: its element size */
    /* RECORD */
    struct fc_event *ev;
    uint64_t gen;
    uint32_t ipc_gen;
    /* WAITVAL */
    const uint32_t *word;
    uint32_t want;
    unsigned wflags;
    /* HOSTFN */
    void (*fn)(void *);
    void *data;
    bool cb_done;
    struct fc_op *cb_next;
};

struct fc_stream {
    int refs;
    bool live; /* a valid handle (not destroyed) */
    bool legacy;
    int device;
    unsigned flags;
    int priority;
    uint64_t enq, done; /* operations queued and completed, ever */
    struct fc_op *head, *tail;
    bool worker;
    pthread_cond_t cv; /* work for the worker */
    struct fc_stream *next;
};

struct fc_event {
    int refs;
    bool live;
    int device;
    unsigned flags;
    /* local events: the work captured by the last record */
    struct fc_stream *s;
    uint64_t seq;
    uint64_t gen;       /* records so far */
    uint64_t stamp_gen; /* the record whose time t_ns is */
    uint64_t t_ns;
    /* interprocess events */
    struct fc_ipc_page *page;
    int fd;
    uint64_t ino;
    bool opened; /* from another process's handle */
    struct fc_event *next;
};

static void fc_stream_unref(struct fc_stream *s);
static void fc_event_unref(struct fc_event *e);

static bool fc_gen_reached(uint32_t done, uint32_t gen)
{
    return (int32_t)(done - gen) >= 0;
}

static bool fc_dep_ready(const struct fc_dep *d)
{
    if (d->ev)
        return fc_gen_reached(atomic_load(&d->ev->page->done), d->gen);
    return d->s->done >= d->seq;
}

static int fc_dep_add(struct fc_op *op, struct fc_stream *s, uint64_t seq, struct fc_event *ev,
                      uint32_t gen)
{
    if (op->ndeps == op->capdeps) {
        int cap = op->capdeps ? 2 * op->capdeps : 4;
        struct fc_dep *n = realloc(op->deps, (size_t)cap * sizeof(*n));
        if (!n)
            return cudaErrorMemoryAllocation;
        op->deps = n;
        op->capdeps = cap;
    }
    op->deps[op->ndeps++] = (struct fc_dep){s, seq, ev, gen};
    if (s)
        s->refs++;
    if (ev)
        ev->refs++;
    return cudaSuccess;
}

static void fc_op_free(struct fc_op *op)
{
    for (int i = 0; i < op->ndeps; i++) {
        if (op->deps[i].s)
            fc_stream_unref(op->deps[i].s);
        if (op->deps[i].ev)
            fc_event_unref(op->deps[i].ev);
    }
    if (op->ev)
        fc_event_unref(op->ev);
    free(op->deps);
    free(op->staging);
    free(op);
}

/* Wait, holding fc.mu (released while asleep), until every dependency is met. Another
 * process completes IPC events: its futex wake reaches us, with a timeout as a backstop. */
static void fc_wait_deps(const struct fc_dep *d, int n)
{
    for (;;) {
        int i;
        for (i = 0; i < n && fc_dep_ready(&d[i]); i++)
            ;
        if (i == n)
            return;
        if (d[i].ev) {
            struct fc_ipc_page *pg = d[i].ev->page;
            uint32_t seen = atomic_load(&pg->done);
            struct timespec ts = {0, 10 * 1000000};
            if (fc_gen_reached(seen, d[i].gen))
                continue;
            pthread_mutex_unlock(&fc.mu);
            fc_futex(&pg->done, FUTEX_WAIT, seen, &ts);
            pthread_mutex_lock(&fc.mu);
        } else {
            pthread_cond_wait(&fc.cv, &fc.mu);
        }
    }
}

/* The legacy stream of a device orders with every blocking stream of it: capture their
 * queued work into op. */
static int fc_capture_blocking(struct fc_op *op, const struct fc_stream *legacy)
{
    for (struct fc_stream *t = fc.streams; t; t = t->next) {
        if (t == legacy || t->device != legacy->device || (t->flags & FC_STREAM_NONBLOCKING) ||
            t->done >= t->enq)
            continue;
        int rc = fc_dep_add(op, t, t->enq, NULL, 0);
        if (rc)
            return rc;
    }
    return cudaSuccess;
}

static void fc_host_fn_run(struct fc_op *op);

static void fc_op_run(struct fc_op *op)
{
    switch (op->kind) {
    case FC_OP_NOP:
        break;
    case FC_OP_COPY:
        fc_delay();
        memmove(op->dst, op->src, op->bytes);
        break;
    case FC_OP_SET:
        fc_delay();
        memset(op->dst, op->value, op->bytes);
        break;
    case FC_OP_KERNEL:
        fc_delay();
        op->krun(&op->rc);
        if (op->corrupt_esize) {
            unsigned char *e =
                (unsigned char *)op->rc.dst[0] + op->rc.count / 2 * op->corrupt_esize;
            for (size_t b = 0; b < op->corrupt_esize; b++)
                e[b] ^= 0xff;
        }
        break;
    case FC_OP_RECORD: {
        struct fc_event *e = op->ev;
        pthread_mutex_lock(&fc.mu);
        if (e->gen == op->gen) {
            e->t_ns = fc_now_ns();
            e->stamp_gen = op->gen;
        }
        pthread_mutex_unlock(&fc.mu);
        if (e->page) {
            uint32_t cur = atomic_load(&e->page->done);
            while (!fc_gen_reached(cur, op->ipc_gen) &&
                   !atomic_compare_exchange_weak(&e->page->done, &cur, op->ipc_gen))
                ;
            fc_futex(&e->page->done, FUTEX_WAKE, INT_MAX, NULL);
        }
        break;
    }
    case FC_OP_HOSTFN:
        fc_host_fn_run(op);
        break;
    case FC_OP_WAITVAL:
        for (;;) {
            uint32_t v = __atomic_load_n(op->word, __ATOMIC_ACQUIRE);
            bool ok;
            switch (op->wflags & 3u) {
            case 0: ok = (int32_t)(v - op->want) >= 0; break; /* GEQ, cyclic */
            case 1: ok = v == op->want; break;                /* EQ */
            case 2: ok = (v & op->want) != 0; break;          /* AND */
            default: ok = ~(v | op->want) != 0; break;        /* NOR */
            }
            if (ok)
                break;
            struct timespec ts = {0, 20 * 1000};
            nanosleep(&ts, NULL);
        }
        break;
    }
}

static void *fc_worker(void *arg)
{
    struct fc_stream *s = arg;

    pthread_mutex_lock(&fc.mu);
    for (;;) {
        struct fc_op *op;

        while (!s->head && s->live)
            pthread_cond_wait(&s->cv, &fc.mu);
        if (!s->head)
            break;
        op = s->head;
        fc_wait_deps(op->deps, op->ndeps);
        while (fc.hostfn_holds && fc.hostfn_running &&
               (op->kind == FC_OP_COPY || op->kind == FC_OP_SET || op->kind == FC_OP_KERNEL))
            pthread_cond_wait(&fc.cv, &fc.mu);
        pthread_mutex_unlock(&fc.mu);
        fc_op_run(op);
        pthread_mutex_lock(&fc.mu);
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        s->done++;
        fc_op_free(op);
        pthread_cond_broadcast(&fc.cv);
    }
    s->worker = false;
    fc_stream_unref(s);
    pthread_mutex_unlock(&fc.mu);
    return NULL;
}

static struct fc_op *fc_op_new(enum fc_op_kind kind)
{
    struct fc_op *op = calloc(1, sizeof(*op));
    if (op)
        op->kind = kind;
    return op;
}

/* Queue op on s with the legacy stream's implicit ordering; takes op in all cases.
 * Caller holds fc.mu. *seq_p (may be NULL) gets the count s reaches once op is done. */
static int fc_enqueue(struct fc_stream *s, struct fc_op *op, uint64_t *seq_p)
{
    int rc = cudaSuccess;

    if (s->legacy) {
        rc = fc_capture_blocking(op, s);
    } else if (!(s->flags & FC_STREAM_NONBLOCKING)) {
        struct fc_stream *l = fc.legacy[s->device];
        if (l->done < l->enq)
            rc = fc_dep_add(op, l, l->enq, NULL, 0);
    }
    if (rc == cudaSuccess && !s->worker) {
        pthread_t thr;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        s->refs++;
        if (pthread_create(&thr, &attr, fc_worker, s) != 0) {
            s->refs--;
            rc = cudaErrorMemoryAllocation;
        } else {
            s->worker = true;
        }
        pthread_attr_destroy(&attr);
    }
    if (rc != cudaSuccess) {
        fc_op_free(op);
        return rc;
    }
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    s->enq++;
    if (seq_p)
        *seq_p = s->enq;
    pthread_cond_signal(&s->cv);
    return cudaSuccess;
}

/* Block the caller until s has done everything queued so far; for a legacy stream also
 * everything queued on the device's blocking streams. Caller holds fc.mu. */
static int fc_stream_drain(struct fc_stream *s)
{
    struct fc_op *w = fc_op_new(FC_OP_NOP); /* only a dependency list */
    int rc;

    if (!w)
        return cudaErrorMemoryAllocation;
    rc = fc_dep_add(w, s, s->enq, NULL, 0);
    if (rc == cudaSuccess && s->legacy)
        rc = fc_capture_blocking(w, s);
    if (rc == cudaSuccess)
        fc_wait_deps(w->deps, w->ndeps);
    fc_op_free(w);
    return rc;
}

/* Every stream of a device (dev < 0: of all devices), non-blocking ones included. */
static int fc_device_drain(int dev)
{
    struct fc_op *w = fc_op_new(FC_OP_NOP);
    int rc = cudaSuccess;

    if (!w)
        return cudaErrorMemoryAllocation;
    for (struct fc_stream *t = fc.streams; t && rc == cudaSuccess; t = t->next)
        if ((dev < 0 || t->device == dev) && t->done < t->enq)
            rc = fc_dep_add(w, t, t->enq, NULL, 0);
    if (rc == cudaSuccess)
        fc_wait_deps(w->deps, w->ndeps);
    fc_op_free(w);
    return rc;
}

static struct fc_stream *fc_stream_new(int device, unsigned flags, int priority, bool legacy)
{
    struct fc_stream *s = calloc(1, sizeof(*s));

    if (!s)
        return NULL;
    s->refs = 1;
    s->live = true;
    s->legacy = legacy;
    s->device = device;
    s->flags = flags;
    s->priority = priority;
    pthread_cond_init(&s->cv, NULL);
    s->next = fc.streams;
    fc.streams = s;
    return s;
}

static void fc_stream_unref(struct fc_stream *s)
{
    if (--s->refs > 0)
        return;
    for (struct fc_stream **pp = &fc.streams; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* A cudaStream_t to the stream, for the calling thread. Caller holds fc.mu. */
static int fc_stream_get(void *h, struct fc_stream **s_p)
{
    if (h == NULL || h == FC_STREAM_LEGACY) {
        if (!fc.legacy[tls.dev]) {
            fc.legacy[tls.dev] = fc_stream_new(tls.dev, 0, 0, true);
            if (!fc.legacy[tls.dev])
                return cudaErrorMemoryAllocation;
        }
        *s_p = fc.legacy[tls.dev];
        return cudaSuccess;
    }
    if (h == FC_STREAM_PER_THREAD) {
        /* blocking, so it orders with the legacy stream; kept until the process exits */
        if (!tls.per_thread[tls.dev]) {
            int rc = fc_stream_get(NULL, s_p); /* the legacy stream must exist */
            if (rc)
                return rc;
            tls.per_thread[tls.dev] = fc_stream_new(tls.dev, 0, 0, false);
            if (!tls.per_thread[tls.dev])
                return cudaErrorMemoryAllocation;
        }
        *s_p = tls.per_thread[tls.dev];
        return cudaSuccess;
    }
    for (struct fc_stream *s = fc.streams; s; s = s->next) {
        if (s == h && s->live && !s->legacy) {
            *s_p = s;
            return cudaSuccess;
        }
    }
    return cudaErrorInvalidResourceHandle;
}

/* Every stream op enqueued on a blocking stream orders after the legacy stream: make sure
 * the device's legacy stream exists before any stream does. Caller holds fc.mu. */
static int fc_legacy_ensure(int dev)
{
    if (!fc.legacy[dev]) {
        fc.legacy[dev] = fc_stream_new(dev, 0, 0, true);
        if (!fc.legacy[dev])
            return cudaErrorMemoryAllocation;
    }
    return cudaSuccess;
}

/* ---- 5 the host-function thread ------------------------------------------------------ */

static void *fc_callback_thread(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&fc.mu);
    for (;;) {
        struct fc_op *op;
        while (!fc.cbq_head)
            pthread_cond_wait(&fc.cb_cv, &fc.mu);
        op = fc.cbq_head;
        fc.cbq_head = op->cb_next;
        if (!fc.cbq_head)
            fc.cbq_tail = NULL;
        fc.hostfn_running++;
        pthread_mutex_unlock(&fc.mu);
        tls.in_callback = true;
        op->fn(op->data);
        tls.in_callback = false;
        pthread_mutex_lock(&fc.mu);
        fc.hostfn_running--;
        op->cb_done = true;
        pthread_cond_broadcast(&fc.cv);
    }
    return NULL;
}

/* On the stream's worker: hand the function to the callback thread and wait, so the
 * stream's later work runs after it, and host functions of all streams run one at a time
 * on one thread, as CUDA runs them. */
static void fc_host_fn_run(struct fc_op *op)
{
    pthread_mutex_lock(&fc.mu);
    if (!fc.cb_started) {
        pthread_t thr;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&thr, &attr, fc_callback_thread, NULL) != 0) {
            fc_log("fakecudart: cannot start the host-function thread; running a host function "
                   "on the stream's thread");
            pthread_attr_destroy(&attr);
            pthread_mutex_unlock(&fc.mu);
            tls.in_callback = true;
            op->fn(op->data);
            tls.in_callback = false;
            return;
        }
        pthread_attr_destroy(&attr);
        fc.cb_started = true;
    }
    op->cb_next = NULL;
    if (fc.cbq_tail)
        fc.cbq_tail->cb_next = op;
    else
        fc.cbq_head = op;
    fc.cbq_tail = op;
    pthread_cond_signal(&fc.cb_cv);
    while (!op->cb_done)
        pthread_cond_wait(&fc.cv, &fc.mu);
    pthread_mutex_unlock(&fc.mu);
}

/* ---- 6 devices, versions, errors ----------------------------------------------------- */

FC_API int fakecuda_violations(void)
{
    return atomic_load(&fc.violations);
}

/* Kernels launched by this process so far: lets a test tell a path that reduces on the
 * device (CUDA IPC) from one that reduces on the host (staging). */
static atomic_long fc_kernel_launches;

FC_API long fakecuda_kernel_launches(void)
{
    return atomic_load(&fc_kernel_launches);
}

/* Pure lookups, so they answer even inside a host function; the call still counts. */
static void fc_pure_call(const char *name)
{
    if (tls.in_callback)
        fc_violation("%s called from a host function", name);
}

FC_API const char *cudaGetErrorName(int err)
{
    fc_pure_call(__func__);
    switch (err) {
#define X(num, name, text)                                                                         \
    case num:                                                                                      \
        return #name;
        FC_ERRORS(X)
#undef X
    }
    return "cudaErrorUnknown";
}

FC_API const char *cudaGetErrorString(int err)
{
    fc_pure_call(__func__);
    switch (err) {
#define X(num, name, text)                                                                         \
    case num:                                                                                      \
        return text;
        FC_ERRORS(X)
#undef X
    }
    return "unrecognized error code";
}

FC_API int cudaGetLastError(void)
{
    int e;
    FC_ENTER(0);
    e = tls.last_err;
    tls.last_err = cudaSuccess;
    return e;
}

FC_API int cudaPeekAtLastError(void)
{
    FC_ENTER(0);
    return tls.last_err;
}

FC_API int cudaGetDeviceCount(int *n)
{
    FC_ENTER(0);
    if (!n)
        return fc_err(cudaErrorInvalidValue);
    *n = fc.ndev;
    return fc.ndev ? cudaSuccess : fc_err(cudaErrorNoDevice);
}

FC_API int cudaGetDevice(int *dev)
{
    FC_ENTER(FC_NEED_DEVICE);
    if (!dev)
        return fc_err(cudaErrorInvalidValue);
    *dev = tls.dev;
    return cudaSuccess;
}

FC_API int cudaSetDevice(int dev)
{
    FC_ENTER(FC_NEED_DEVICE);
    if (dev < 0 || dev >= fc.ndev)
        return fc_err(cudaErrorInvalidDevice);
    tls.dev = dev;
    return cudaSuccess;
}

FC_API int cudaDeviceGetAttribute(int *value, int attr, int dev)
{
    FC_ENTER(FC_NEED_DEVICE);
    if (!value)
        return fc_err(cudaErrorInvalidValue);
    if (dev < 0 || dev >= fc.ndev)
        return fc_err(cudaErrorInvalidDevice);
    switch (attr) {
#define X(a, v)                                                                                    \
    case a:                                                                                        \
        *value = v;                                                                                \
        return cudaSuccess;
        FC_ATTRS(X)
#undef X
    case 33: /* PciBusId: one bus per device */
        *value = dev + 1;
        return cudaSuccess;
    case 34: /* PciDeviceId */
    case 50: /* PciDomainId */
        *value = 0;
        return cudaSuccess;
    }
    return fc_err(cudaErrorInvalidValue);
}

FC_API int cudaRuntimeGetVersion(int *v)
{
    FC_ENTER(0);
    if (!v)
        return fc_err(cudaErrorInvalidValue);
    *v = 13000;
    return cudaSuccess;
}

FC_API int cudaDriverGetVersion(int *v)
{
    FC_ENTER(0);
    if (!v)
        return fc_err(cudaErrorInvalidValue);
    *v = 13000;
    return cudaSuccess;
}

FC_API int cudaDeviceCanAccessPeer(int *can, int dev, int peer)
{
    FC_ENTER(FC_NEED_DEVICE);
    if (!can)
        return fc_err(cudaErrorInvalidValue);
    if (dev < 0 || dev >= fc.ndev || peer < 0 || peer >= fc.ndev)
        return fc_err(cudaErrorInvalidDevice);
    *can = dev != peer; /* a device is not its own peer */
    return cudaSuccess;
}

FC_API int cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
    int rc = cudaSuccess;

    FC_ENTER(FC_NEED_DEVICE);
    if (flags != 0)
        return fc_err(cudaErrorInvalidValue);
    if (peer < 0 || peer >= fc.ndev || peer == tls.dev)
        return fc_err(cudaErrorInvalidDevice);
    pthread_mutex_lock(&fc.mu);
    if (fc.peer[tls.dev][peer])
        rc = cudaErrorPeerAccessAlreadyEnabled;
    fc.peer[tls.dev][peer] = true;
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

FC_API int cudaDeviceDisablePeerAccess(int peer)
{
    int rc = cudaSuccess;

    FC_ENTER(FC_NEED_DEVICE);
    if (peer < 0 || peer >= fc.ndev || peer == tls.dev)
        return fc_err(cudaErrorInvalidDevice);
    pthread_mutex_lock(&fc.mu);
    if (!fc.peer[tls.dev][peer])
        rc = cudaErrorPeerAccessNotEnabled;
    fc.peer[tls.dev][peer] = false;
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

FC_API int cudaDeviceSynchronize(void)
{
    int rc;

    FC_ENTER(FC_NEED_DEVICE);
    pthread_mutex_lock(&fc.mu);
    rc = fc_device_drain(tls.dev);
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

FC_API int cudaMemGetInfo(size_t *free_p, size_t *total_p)
{
    const uint64_t total = 80ull << 30;

    FC_ENTER(FC_NEED_DEVICE);
    if (!free_p || !total_p)
        return fc_err(cudaErrorInvalidValue);
    pthread_mutex_lock(&fc.mu);
    *total_p = (size_t)total;
    *free_p = (size_t)(fc.dev_bytes[tls.dev] < total ? total - fc.dev_bytes[tls.dev] : 0);
    pthread_mutex_unlock(&fc.mu);
    return cudaSuccess;
}

/* ---- 7 memory ------------------------------------------------------------------------ */

/* Device memory is poisoned, not zero: a reader of bytes nobody wrote sees garbage, as
 * on a GPU, instead of plausible zeros. */
#define FC_POISON 0xd5

static int fc_alloc_device(void **p, size_t bytes, int device, struct fc_alloc **a_p)
{
    struct fc_alloc *a;
    size_t mapped;
    struct stat st;
    char *base;
    int fd;

    mapped = fc_round_page(bytes);
    if (mapped < bytes || mapped > FC_VA_BYTES / 2)
        return cudaErrorMemoryAllocation;
    a = calloc(1, sizeof(*a));
    if (!a)
        return cudaErrorMemoryAllocation;
    fd = (int)syscall(SYS_memfd_create, "coll-fakecuda", 1u /* MFD_CLOEXEC */);
    if (fd < 0)
        goto out_free;
    if (ftruncate(fd, (off_t)mapped) < 0 || fstat(fd, &st) < 0)
        goto out_close;
    a->alias = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (a->alias == MAP_FAILED)
        goto out_close;
    base = fc_va_take(mapped);
    if (!base)
        goto out_unmap;
    a->base = base;
    a->size = bytes;
    a->mapped = mapped;
    a->type = FC_DEVICE;
    a->device = device;
    a->kind = FC_A_MALLOC;
    a->fd = fd;
    a->ino = (uint64_t)st.st_ino;
    a->token = fc.rng ^ (uint64_t)(uintptr_t)base;
    if (fc_table_add(a) != cudaSuccess)
        goto out_unmap;
    *p = base;
    if (a_p)
        *a_p = a;
    return cudaSuccess;

out_unmap:
    munmap(a->alias, mapped);
out_close:
    close(fd);
out_free:
    free(a);
    return cudaErrorMemoryAllocation;
}

FC_API int cudaMalloc(void **p, size_t bytes)
{
    struct fc_alloc *a = NULL;
    int rc;

    FC_ENTER(FC_NEED_DEVICE);
    if (!p)
        return fc_err(cudaErrorInvalidValue);
    if (bytes == 0) {
        *p = NULL;
        return cudaSuccess;
    }
    pthread_mutex_lock(&fc.mu);
    /* CUDA lists a device memory allocation among what may synchronise the device */
    if (fc.malloc_sync && (rc = fc_device_drain(tls.dev)) != cudaSuccess) {
        pthread_mutex_unlock(&fc.mu);
        return fc_err(rc);
    }
    rc = fc_alloc_device(p, bytes, tls.dev, &a);
    if (rc == cudaSuccess)
        fc.dev_bytes[tls.dev] += a->mapped;
    pthread_mutex_unlock(&fc.mu);
    if (rc == cudaSuccess)
        memset(a->alias, FC_POISON, bytes);
    return fc_err(rc);
}

/* Host-accessible memory of the region: pinned (type 1) or managed (type 3). */
static int fc_alloc_host(void **p, size_t bytes, int type, enum fc_alloc_kind kind)
{
    struct fc_alloc *a;
    size_t mapped = fc_round_page(bytes);
    char *base;
    int rc = cudaErrorMemoryAllocation;

    if (mapped < bytes || mapped > FC_VA_BYTES / 2)
        return cudaErrorMemoryAllocation;
    a = calloc(1, sizeof(*a));
    if (!a)
        return cudaErrorMemoryAllocation;
    pthread_mutex_lock(&fc.mu);
    base = fc_va_take(mapped);
    if (!base)
        goto out_unlock;
    if (mmap(base, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
             0) == MAP_FAILED)
        goto out_unlock;
    a->base = a->alias = base;
    a->size = bytes;
    a->mapped = mapped;
    a->type = type;
    a->device = tls.dev;
    a->kind = kind;
    a->fd = -1;
    if (fc_table_add(a) != cudaSuccess) {
        fc_va_retire(base, mapped);
        goto out_unlock;
    }
    *p = base;
    rc = cudaSuccess;
    a = NULL;
out_unlock:
    pthread_mutex_unlock(&fc.mu);
    free(a);
    return rc;
}

FC_API int cudaMallocManaged(void **p, size_t bytes, unsigned int flags)
{
    FC_ENTER(FC_NEED_DEVICE);
    /* cudaMemAttachGlobal (1) or cudaMemAttachHost (2) */
    if (!p || bytes == 0 || (flags != 1 && flags != 2))
        return fc_err(cudaErrorInvalidValue);
    return fc_err(fc_alloc_host(p, bytes, FC_MANAGED, FC_A_MANAGED));
}

FC_API int cudaHostAlloc(void **p, size_t bytes, unsigned int flags)
{
    FC_ENTER(FC_NEED_DEVICE);
    /* Portable 1, Mapped 2, WriteCombined 4 */
    if (!p || (flags & ~7u))
        return fc_err(cudaErrorInvalidValue);
    if (bytes == 0) {
        *p = NULL;
        return cudaSuccess;
    }
    return fc_err(fc_alloc_host(p, bytes, FC_HOST, FC_A_HOSTALLOC));
}

FC_API int cudaMallocHost(void **p, size_t bytes)
{
    FC_ENTER(FC_NEED_DEVICE);
    if (!p)
        return fc_err(cudaErrorInvalidValue);
    if (bytes == 0) {
        *p = NULL;
        return cudaSuccess;
    }
    return fc_err(fc_alloc_host(p, bytes, FC_HOST, FC_A_HOSTALLOC));
}

/* Free one of kinds k1/k2 that starts exactly at p, after the GPU is done with it (CUDA's
 * frees synchronize the device). */
static int fc_free(const char *what, void *p, enum fc_alloc_kind k1, enum fc_alloc_kind k2)
{
    struct fc_alloc *a;
    int rc;

    pthread_mutex_lock(&fc.mu);
    a = fc_find(p);
    if (!a || a->base != p || (a->kind != k1 && a->kind != k2)) {
        pthread_mutex_unlock(&fc.mu);
        fc_violation("%s(%p): not the start of a live allocation of that kind", what, p);
        return cudaErrorInvalidValue;
    }
    rc = fc_device_drain(-1);
    if (rc != cudaSuccess) {
        pthread_mutex_unlock(&fc.mu);
        return rc;
    }
    if (fc_find(p) != a) { /* another thread freed it while we drained */
        pthread_mutex_unlock(&fc.mu);
        fc_violation("%s(%p): freed twice at the same time", what, p);
        return cudaErrorInvalidValue;
    }
    fc_table_del(a);
    if (a->kind == FC_A_MALLOC && a->device >= 0)
        fc.dev_bytes[a->device] -= a->mapped;
    pthread_mutex_unlock(&fc.mu);
    if (a->kind == FC_A_MALLOC || a->kind == FC_A_IPC) {
        munmap(a->alias, a->mapped); /* the program's range was PROT_NONE all along */
        close(a->fd);
    } else if (a->kind != FC_A_REGISTERED) {
        fc_va_retire(a->base, a->mapped);
    }
    free(a);
    return cudaSuccess;
}

/* COLL_FAKECUDA_CHECK_LEAKS=1, at exit: memory the program allocated and never freed. Host
 * registrations and IPC mappings are left out: the memory behind them is the program's own
 * or another process's. A child forked after initialization inherits the parent's table,
 * not its duty to free it, and says nothing. */
static void fc_leak_check(void)
{
    size_t n = 0, bytes = 0;
    const struct fc_alloc *first = NULL;

    if (atomic_load(&fc.forked))
        return;
    pthread_mutex_lock(&fc.mu);
    for (size_t i = 0; i < fc.nallocs; i++) {
        const struct fc_alloc *a = fc.allocs[i];
        if (a->kind == FC_A_REGISTERED || a->kind == FC_A_IPC)
            continue;
        if (!first)
            first = a;
        n++;
        bytes += a->size;
    }
    pthread_mutex_unlock(&fc.mu);
    if (n)
        fc_violation("at exit: %zu allocations (%zu bytes) never freed, the lowest %p of %zu "
                     "bytes",
                     n, bytes, (void *)first->base, first->size);
}

FC_API int cudaFree(void *p)
{
    FC_ENTER(FC_NEED_DEVICE);
    if (!p)
        return cudaSuccess;
    return fc_err(fc_free("cudaFree", p, FC_A_MALLOC, FC_A_MANAGED));
}

FC_API int cudaFreeHost(void *p)
{
    FC_ENTER(FC_NEED_DEVICE);
    if (!p)
        return cudaSuccess;
    return fc_err(fc_free("cudaFreeHost", p, FC_A_HOSTALLOC, FC_A_HOSTALLOC));
}

FC_API int cudaHostRegister(void *p, size_t bytes, unsigned int flags)
{
    struct fc_alloc *a;
    size_t i;
    int rc = cudaSuccess;

    FC_ENTER(FC_NEED_DEVICE);
    /* Portable 1, Mapped 2, IoMemory 4, ReadOnly 8 */
    if (!p || bytes == 0 || (flags & ~15u) || (uintptr_t)p + bytes < (uintptr_t)p)
        return fc_err(cudaErrorInvalidValue);
    a = calloc(1, sizeof(*a));
    if (!a)
        return fc_err(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&fc.mu);
    if (fc_in_va(p)) {
        rc = cudaErrorInvalidValue; /* memory of ours: device, pinned or managed already */
        goto out_unlock;
    }
    /* any overlap with a registered range, on either side */
    i = fc_upper((char *)p + bytes - 1);
    if (i > 0) {
        struct fc_alloc *b = fc.allocs[i - 1];
        if ((uintptr_t)b->base + b->size > (uintptr_t)p) {
            rc = cudaErrorHostMemoryAlreadyRegistered;
            goto out_unlock;
        }
    }
    a->base = a->alias = p;
    a->size = a->mapped = bytes;
    a->type = FC_HOST;
    a->device = -1;
    a->kind = FC_A_REGISTERED;
    a->fd = -1;
    rc = fc_table_add(a);
    if (rc == cudaSuccess)
        a = NULL;
out_unlock:
    pthread_mutex_unlock(&fc.mu);
    free(a);
    return fc_err(rc);
}

FC_API int cudaHostUnregister(void *p)
{
    struct fc_alloc *a;

    FC_ENTER(FC_NEED_DEVICE);
    pthread_mutex_lock(&fc.mu);
    a = p ? fc_find(p) : NULL;
    if (!a || a->base != p || a->kind != FC_A_REGISTERED) {
        pthread_mutex_unlock(&fc.mu);
        return fc_err(cudaErrorHostMemoryNotRegistered);
    }
    pthread_mutex_unlock(&fc.mu);
    return fc_err(fc_free("cudaHostUnregister", p, FC_A_REGISTERED, FC_A_REGISTERED));
}

FC_API int cudaHostGetDevicePointer(void **pdev, void *phost, unsigned int flags)
{
    struct fc_alloc *a;

    FC_ENTER(FC_NEED_DEVICE);
    if (!pdev || !phost || flags != 0)
        return fc_err(cudaErrorInvalidValue);
    pthread_mutex_lock(&fc.mu);
    a = fc_find(phost);
    pthread_mutex_unlock(&fc.mu);
    if (!a || a->type != FC_HOST)
        return fc_err(cudaErrorInvalidValue);
    *pdev = phost; /* unified addressing: the same address */
    return cudaSuccess;
}

FC_API int cudaPointerGetAttributes(void *attr, const void *ptr)
{
    struct fc_ptr_attr r = {FC_UNREGISTERED, -1, NULL, NULL};
    struct fc_alloc *a;

    FC_ENTER(FC_NEED_DEVICE);
    if (!attr)
        return fc_err(cudaErrorInvalidValue);
    pthread_mutex_lock(&fc.mu);
    a = ptr ? fc_find(ptr) : NULL;
    if (a) {
        r.type = a->type;
        r.device = a->device >= 0 ? a->device : tls.dev;
        r.device_pointer = (void *)ptr;
        r.host_pointer = a->type == FC_DEVICE ? NULL : (void *)ptr;
    }
    pthread_mutex_unlock(&fc.mu);
    memcpy(attr, &r, sizeof(r));
    return cudaSuccess;
}

/* ---- 8 copies and memsets ------------------------------------------------------------ */

static bool fc_devside(int type)
{
    return type == FC_DEVICE || type == FC_MANAGED;
}
static bool fc_hostside(int type)
{
    return type != FC_DEVICE;
}

static const char *fc_kind_name(int kind)
{
    static const char *const names[] = {"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice",
                                        "cudaMemcpyDeviceToHost", "cudaMemcpyDeviceToDevice",
                                        "cudaMemcpyDefault"};
    return kind >= 0 && kind <= 4 ? names[kind] : "?";
}

/* Queue a copy on s (NULL handle: the legacy stream) and, with sync, wait for it.
 * Caller has checked the arguments' presence. */
static int fc_memcpy(const char *what, void *dst, const void *src, size_t bytes, int kind,
                     void *stream, bool sync)
{
    struct fc_xl xd, xs;
    struct fc_stream *s;
    struct fc_op *op;
    uint64_t seq;
    int rc;

    if (kind < FC_H2H || kind > FC_DEFAULT)
        return cudaErrorInvalidMemcpyDirection;
    pthread_mutex_lock(&fc.mu);
    rc = fc_stream_get(stream, &s);
    if (rc)
        goto out_unlock;
    if (bytes == 0)
        goto out_unlock;
    if (!dst || !src) {
        rc = cudaErrorInvalidValue;
        goto out_unlock;
    }
    rc = fc_xlate(what, dst, bytes, &xd);
    if (rc == cudaSuccess)
        rc = fc_xlate(what, src, bytes, &xs);
    if (rc)
        goto out_unlock;
    if (kind != FC_DEFAULT) {
        bool sdev = kind == FC_D2H || kind == FC_D2D, ddev = kind == FC_H2D || kind == FC_D2D;
        if (!(sdev ? fc_devside(xs.type) : fc_hostside(xs.type)) ||
            !(ddev ? fc_devside(xd.type) : fc_hostside(xd.type))) {
            fc_violation("%s(%p <- %p, %zu, %s): the pointers are memory types %d <- %d", what, dst,
                         src, bytes, fc_kind_name(kind), xd.type, xs.type);
            rc = cudaErrorInvalidValue;
            goto out_unlock;
        }
    }
    op = fc_op_new(FC_OP_COPY);
    if (!op) {
        rc = cudaErrorMemoryAllocation;
        goto out_unlock;
    }
    op->dst = xd.host;
    op->src = xs.host;
    op->bytes = bytes;
    if (!sync && xd.type == FC_UNREGISTERED) {
        sync = true; /* to pageable memory: returns once the copy is done */
    } else if (!sync && xs.type == FC_UNREGISTERED) {
        /* From pageable memory: the stream's earlier work first, then the source is staged
         * and the caller may reuse it; the copy to the destination runs in stream order. */
        rc = fc_stream_drain(s);
        op->staging = rc == cudaSuccess ? malloc(bytes) : NULL;
        if (!op->staging) {
            fc_op_free(op);
            rc = rc ? rc : cudaErrorMemoryAllocation;
            goto out_unlock;
        }
        memcpy(op->staging, xs.host, bytes);
        op->src = op->staging;
    }
    rc = fc_enqueue(s, op, &seq);
    if (rc == cudaSuccess && sync) {
        struct fc_dep d = {s, seq, NULL, 0};
        s->refs++;
        fc_wait_deps(&d, 1);
        fc_stream_unref(s);
    }
out_unlock:
    pthread_mutex_unlock(&fc.mu);
    return rc;
}

FC_API int cudaMemcpy(void *dst, const void *src, size_t bytes, int kind)
{
    FC_ENTER(FC_NEED_DEVICE);
    return fc_err(fc_memcpy("cudaMemcpy", dst, src, bytes, kind, NULL, true));
}

FC_API int cudaMemcpyAsync(void *dst, const void *src, size_t bytes, int kind, void *stream)
{
    FC_ENTER(FC_NEED_DEVICE);
    return fc_err(fc_memcpy("cudaMemcpyAsync", dst, src, bytes, kind, stream, false));
}

static int fc_memset(const char *what, void *p, int value, size_t bytes, void *stream, bool sync)
{
    struct fc_stream *s;
    struct fc_xl x;
    struct fc_op *op;
    uint64_t seq;
    int rc;

    pthread_mutex_lock(&fc.mu);
    rc = fc_stream_get(stream, &s);
    if (rc || bytes == 0)
        goto out_unlock;
    rc = p ? fc_xlate(what, p, bytes, &x) : cudaErrorInvalidValue;
    if (rc)
        goto out_unlock;
    if (x.type == FC_UNREGISTERED) {
        fc_violation("%s(%p): plain host memory", what, p);
        rc = cudaErrorInvalidValue;
        goto out_unlock;
    }
    op = fc_op_new(FC_OP_SET);
    if (!op) {
        rc = cudaErrorMemoryAllocation;
        goto out_unlock;
    }
    op->dst = x.host;
    op->value = value;
    op->bytes = bytes;
    rc = fc_enqueue(s, op, &seq);
    if (rc == cudaSuccess && sync) {
        struct fc_dep d = {s, seq, NULL, 0};
        s->refs++;
        fc_wait_deps(&d, 1);
        fc_stream_unref(s);
    }
out_unlock:
    pthread_mutex_unlock(&fc.mu);
    return rc;
}

FC_API int cudaMemset(void *p, int value, size_t bytes)
{
    FC_ENTER(FC_NEED_DEVICE);
    return fc_err(fc_memset("cudaMemset", p, value, bytes, NULL, true));
}

FC_API int cudaMemsetAsync(void *p, int value, size_t bytes, void *stream)
{
    FC_ENTER(FC_NEED_DEVICE);
    return fc_err(fc_memset("cudaMemsetAsync", p, value, bytes, stream, false));
}

/* ---- 9 streams ----------------------------------------------------------------------- */

static int fc_stream_create(void **stream_p, unsigned flags, int priority)
{
    struct fc_stream *s;
    int rc;

    if (!stream_p || (flags & ~FC_STREAM_NONBLOCKING))
        return cudaErrorInvalidValue;
    pthread_mutex_lock(&fc.mu);
    rc = fc_legacy_ensure(tls.dev);
    s = rc ? NULL : fc_stream_new(tls.dev, flags, priority, false);
    pthread_mutex_unlock(&fc.mu);
    if (!s)
        return rc ? rc : cudaErrorMemoryAllocation;
    *stream_p = s;
    return cudaSuccess;
}

FC_API int cudaStreamCreate(void **stream_p)
{
    FC_ENTER(FC_NEED_DEVICE);
    return fc_err(fc_stream_create(stream_p, 0, 0));
}

FC_API int cudaStreamCreateWithFlags(void **stream_p, unsigned int flags)
{
    FC_ENTER(FC_NEED_DEVICE);
    return fc_err(fc_stream_create(stream_p, flags, 0));
}

FC_API int cudaStreamCreateWithPriority(void **stream_p, unsigned int flags, int priority)
{
    FC_ENTER(FC_NEED_DEVICE);
    /* clamped into [-5, 0] as CUDA clamps into the device's range */
    priority = priority > 0 ? 0 : priority < -5 ? -5 : priority;
    return fc_err(fc_stream_create(stream_p, flags, priority));
}

FC_API int cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    FC_ENTER(FC_NEED_DEVICE);
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return cudaSuccess;
}

FC_API int cudaStreamDestroy(void *stream)
{
    struct fc_stream *s;
    int rc;

    FC_ENTER(FC_NEED_DEVICE);
    if (stream == NULL || stream == FC_STREAM_LEGACY || stream == FC_STREAM_PER_THREAD)
        return fc_err(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&fc.mu);
    rc = fc_stream_get(stream, &s);
    if (rc == cudaSuccess) {
        /* returns at once; queued work still runs, then the worker lets go */
        s->live = false;
        pthread_cond_signal(&s->cv);
        fc_stream_unref(s);
    }
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

FC_API int cudaStreamSynchronize(void *stream)
{
    struct fc_stream *s;
    int rc;

    FC_ENTER(FC_NEED_DEVICE);
    pthread_mutex_lock(&fc.mu);
    rc = fc_stream_get(stream, &s);
    if (rc == cudaSuccess)
        rc = fc_stream_drain(s);
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

FC_API int cudaStreamQuery(void *stream)
{
    struct fc_stream *s;
    int rc;

    FC_ENTER(FC_NEED_DEVICE);
    pthread_mutex_lock(&fc.mu);
    rc = fc_stream_get(stream, &s);
    if (rc == cudaSuccess && s->done < s->enq)
        rc = cudaErrorNotReady;
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

/* What a stream was made with, into whichever of the outputs is not NULL. */
static int fc_stream_attrs(void *stream, unsigned *flags, int *priority, int *device)
{
    struct fc_stream *s;
    int rc;

    pthread_mutex_lock(&fc.mu);
    rc = fc_stream_get(stream, &s);
    if (rc == cudaSuccess) {
        if (flags)
            *flags = s->flags;
        if (priority)
            *priority = s->priority;
        if (device)
            *device = s->device;
    }
    pthread_mutex_unlock(&fc.mu);
    return rc;
}

FC_API int cudaStreamGetFlags(void *stream, unsigned int *flags)
{
    FC_ENTER(FC_NEED_DEVICE);
    if (!flags)
        return fc_err(cudaErrorInvalidValue);
    return fc_err(fc_stream_attrs(stream, flags, NULL, NULL));
}

FC_API int cudaStreamGetPriority(void *stream, int *priority)
{
    FC_ENTER(FC_NEED_DEVICE);
    if (!priority)
        return fc_err(cudaErrorInvalidValue);
    return fc_err(fc_stream_attrs(stream, NULL, priority, NULL));
}

FC_API int cudaStreamGetDevice(void *stream, int *device)
{
    FC_ENTER(FC_NEED_DEVICE);
    if (!device)
        return fc_err(cudaErrorInvalidValue);
    return fc_err(fc_stream_attrs(stream, NULL, NULL, device));
}

FC_API int cudaLaunchHostFunc(void *stream, void (*fn)(void *), void *data)
{
    struct fc_stream *s;
    struct fc_op *op;
    int rc;

    FC_ENTER(FC_NEED_DEVICE);
    if (!fn)
        return fc_err(cudaErrorInvalidValue);
    pthread_mutex_lock(&fc.mu);
    rc = fc_stream_get(stream, &s);
    if (rc == cudaSuccess) {
        op = fc_op_new(FC_OP_HOSTFN);
        if (!op) {
            rc = cudaErrorMemoryAllocation;
        } else {
            op->fn = fn;
            op->data = data;
            rc = fc_enqueue(s, op, NULL);
        }
    }
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

/* cuStreamWaitValue32 (a driver call: CUresult, CUdeviceptr): the word must be 4-byte
 * aligned in page-locked or managed memory, which the emulator reads where it lies. */
static int fc_wait_value32(const char *name, void *stream, unsigned long long addr,
                           uint32_t value, unsigned flags)
{
    const uint32_t *word = (const uint32_t *)(uintptr_t)addr;
    struct fc_alloc *a;
    struct fc_stream *s;
    struct fc_op *op;
    int rc;

    rc = fc_enter(name, FC_NEED_DEVICE);
    if (rc)
        return rc;
    /* GEQ 0, EQ 1, AND 2, NOR 3; CU_STREAM_WAIT_VALUE_FLUSH 1 << 30 */
    if ((flags & ~(3u | (1u << 30))) || !word || (addr & 3))
        return fc_err(cudaErrorInvalidValue);
    pthread_mutex_lock(&fc.mu);
    a = fc_find(word);
    if (!a || (a->type != FC_HOST && a->type != FC_MANAGED) ||
        (const char *)word + 4 > a->base + a->size) {
        pthread_mutex_unlock(&fc.mu);
        fc_violation("%s on %p: not a word of page-locked or managed memory", name,
                     (const void *)word);
        return fc_err(cudaErrorInvalidValue);
    }
    rc = fc_stream_get(stream, &s);
    if (rc == cudaSuccess) {
        op = fc_op_new(FC_OP_WAITVAL);
        if (!op) {
            rc = cudaErrorMemoryAllocation;
        } else {
            op->word = (const uint32_t *)(a->alias + ((const char *)word - a->base));
            op->want = value;
            op->wflags = flags;
            rc = fc_enqueue(s, op, NULL);
        }
    }
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

FC_API int cuStreamWaitValue32_v2(void *stream, unsigned long long addr, uint32_t value,
                                  unsigned int flags)
{
    return fc_wait_value32(__func__, stream, addr, value, flags);
}

FC_API int cuStreamWaitValue32(void *stream, unsigned long long addr, uint32_t value,
                               unsigned int flags)
{
    return fc_wait_value32(__func__, stream, addr, value, flags);
}

/* ---- 10 events ----------------------------------------------------------------------- */

static void fc_event_unref(struct fc_event *e)
{
    if (--e->refs > 0)
        return;
    if (e->s)
        fc_stream_unref(e->s);
    if (e->page) {
        munmap(e->page, fc_page());
        close(e->fd);
    }
    free(e);
}

/* A cudaEvent_t to the event. Caller holds fc.mu. */
static int fc_event_get(void *h, struct fc_event **e_p)
{
    for (struct fc_event *e = fc.events; e; e = e->next) {
        if (e == h && e->live) {
            *e_p = e;
            return cudaSuccess;
        }
    }
    return cudaErrorInvalidResourceHandle;
}

static void fc_event_link(struct fc_event *e)
{
    e->next = fc.events;
    fc.events = e;
}

static int fc_event_create(void **ev_p, unsigned flags)
{
    struct fc_event *e;
    struct stat st;

    if (!ev_p || (flags & ~7u))
        return cudaErrorInvalidValue;
    /* CUDA: an interprocess event must not be timed */
    if ((flags & FC_EVENT_INTERPROCESS) && !(flags & FC_EVENT_DISABLE_TIMING))
        return cudaErrorInvalidValue;
    e = calloc(1, sizeof(*e));
    if (!e)
        return cudaErrorMemoryAllocation;
    e->refs = 1;
    e->live = true;
    e->device = tls.dev;
    e->flags = flags;
    e->fd = -1;
    if (flags & FC_EVENT_INTERPROCESS) {
        void *pg;
        e->fd = (int)syscall(SYS_memfd_create, "coll-fakecuda-event", 1u);
        if (e->fd < 0 || ftruncate(e->fd, (off_t)fc_page()) < 0 || fstat(e->fd, &st) < 0)
            goto out_fail;
        pg = mmap(NULL, fc_page(), PROT_READ | PROT_WRITE, MAP_SHARED, e->fd, 0);
        if (pg == MAP_FAILED)
            goto out_fail;
        e->page = pg;
        e->ino = (uint64_t)st.st_ino;
        e->page->token = fc_now_ns() ^ (uint64_t)(uintptr_t)e;
    }
    pthread_mutex_lock(&fc.mu);
    fc_event_link(e);
    pthread_mutex_unlock(&fc.mu);
    *ev_p = e;
    return cudaSuccess;

out_fail:
    if (e->fd >= 0)
        close(e->fd);
    free(e);
    return cudaErrorMemoryAllocation;
}

FC_API int cudaEventCreate(void **ev_p)
{
    FC_ENTER(FC_NEED_DEVICE);
    return fc_err(fc_event_create(ev_p, 0));
}

FC_API int cudaEventCreateWithFlags(void **ev_p, unsigned int flags)
{
    FC_ENTER(FC_NEED_DEVICE);
    return fc_err(fc_event_create(ev_p, flags));
}

FC_API int cudaEventDestroy(void *ev)
{
    struct fc_event *e;
    int rc;

    FC_ENTER(FC_NEED_DEVICE);
    pthread_mutex_lock(&fc.mu);
    rc = fc_event_get(ev, &e);
    if (rc == cudaSuccess) {
        for (struct fc_event **pp = &fc.events; *pp; pp = &(*pp)->next) {
            if (*pp == e) {
                *pp = e->next;
                break;
            }
        }
        e->live = false;
        fc_event_unref(e); /* pending records and waits hold their own references */
    }
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

FC_API int cudaEventRecord(void *ev, void *stream)
{
    struct fc_event *e;
    struct fc_stream *s;
    struct fc_op *op;
    uint64_t seq;
    int rc;

    FC_ENTER(FC_NEED_DEVICE);
    pthread_mutex_lock(&fc.mu);
    rc = fc_event_get(ev, &e);
    if (rc == cudaSuccess)
        rc = fc_stream_get(stream, &s);
    if (rc)
        goto out_unlock;
    if (s->device != e->device) {
        fc_violation("cudaEventRecord: event of device %d on a stream of device %d", e->device,
                     s->device);
        rc = cudaErrorInvalidResourceHandle;
        goto out_unlock;
    }
    op = fc_op_new(FC_OP_RECORD);
    if (!op) {
        rc = cudaErrorMemoryAllocation;
        goto out_unlock;
    }
    op->ev = e;
    e->refs++;
    op->gen = ++e->gen;
    if (e->page)
        op->ipc_gen = atomic_fetch_add(&e->page->rec, 1) + 1;
    rc = fc_enqueue(s, op, &seq);
    if (rc == cudaSuccess) {
        if (e->s)
            fc_stream_unref(e->s);
        e->s = s;
        s->refs++;
        e->seq = seq;
    }
out_unlock:
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

/* Whether the work e captured is done. Caller holds fc.mu. */
static bool fc_event_done(const struct fc_event *e, uint32_t *ipc_target_p)
{
    if (e->page) {
        uint32_t target = atomic_load(&e->page->rec);
        if (ipc_target_p)
            *ipc_target_p = target;
        return fc_gen_reached(atomic_load(&e->page->done), target);
    }
    return !e->s || e->s->done >= e->seq;
}

FC_API int cudaEventQuery(void *ev)
{
    struct fc_event *e;
    int rc;

    FC_ENTER(FC_NEED_DEVICE);
    pthread_mutex_lock(&fc.mu);
    rc = fc_event_get(ev, &e);
    if (rc == cudaSuccess && !fc_event_done(e, NULL))
        rc = cudaErrorNotReady;
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

FC_API int cudaEventSynchronize(void *ev)
{
    struct fc_event *e;
    uint32_t target = 0;
    int rc;

    FC_ENTER(FC_NEED_DEVICE);
    pthread_mutex_lock(&fc.mu);
    rc = fc_event_get(ev, &e);
    if (rc == cudaSuccess && !fc_event_done(e, &target)) {
        struct fc_dep d = {e->page ? NULL : e->s, e->seq, e->page ? e : NULL, target};
        if (d.s)
            d.s->refs++;
        if (d.ev)
            d.ev->refs++;
        fc_wait_deps(&d, 1);
        if (d.s)
            fc_stream_unref(d.s);
        if (d.ev)
            fc_event_unref(d.ev);
    }
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

FC_API int cudaStreamWaitEvent(void *stream, void *ev, unsigned int flags)
{
    struct fc_event *e;
    struct fc_stream *s;
    struct fc_op *op;
    uint32_t target = 0;
    int rc;

    FC_ENTER(FC_NEED_DEVICE);
    if (flags & ~1u) /* cudaEventWaitDefault 0, cudaEventWaitExternal 1 */
        return fc_err(cudaErrorInvalidValue);
    pthread_mutex_lock(&fc.mu);
    rc = fc_event_get(ev, &e);
    if (rc == cudaSuccess)
        rc = fc_stream_get(stream, &s);
    /* the event may belong to another device than the stream (CUDA allows it); a never
     * recorded or completed event adds nothing to wait for */
    if (rc || fc_event_done(e, &target))
        goto out_unlock;
    op = fc_op_new(FC_OP_NOP);
    if (!op) {
        rc = cudaErrorMemoryAllocation;
        goto out_unlock;
    }
    rc = e->page ? fc_dep_add(op, NULL, 0, e, target) : fc_dep_add(op, e->s, e->seq, NULL, 0);
    if (rc == cudaSuccess)
        rc = fc_enqueue(s, op, NULL);
    else
        fc_op_free(op);
out_unlock:
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

FC_API int cudaEventElapsedTime(float *ms, void *start, void *end)
{
    struct fc_event *a, *b;
    int rc;

    FC_ENTER(FC_NEED_DEVICE);
    if (!ms)
        return fc_err(cudaErrorInvalidValue);
    pthread_mutex_lock(&fc.mu);
    rc = fc_event_get(start, &a);
    if (rc == cudaSuccess)
        rc = fc_event_get(end, &b);
    if (rc)
        goto out_unlock;
    if ((a->flags | b->flags) & FC_EVENT_DISABLE_TIMING || !a->gen || !b->gen ||
        a->device != b->device) {
        rc = cudaErrorInvalidResourceHandle;
        goto out_unlock;
    }
    if (!fc_event_done(a, NULL) || !fc_event_done(b, NULL) || a->stamp_gen != a->gen ||
        b->stamp_gen != b->gen) {
        rc = cudaErrorNotReady;
        goto out_unlock;
    }
    *ms = (float)((double)((int64_t)(b->t_ns - a->t_ns)) / 1e6);
out_unlock:
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

/* ---- 11 kernels ---------------------------------------------------------------------- */

/* The reduce-copy kernels, from the list and the math the GPU kernels and the CPU
 * reference share. All inputs of element i are read before it is written: a dst may be a
 * src exactly. */
#define FC_RC_FN(tag, op, T, A, LOAD, STORE, OP, FIN, NT)                                          \
    static void fc_rc_##tag##_##op(const struct coll_cuda_rc_args *a)                              \
    {                                                                                              \
        const NT n = (NT)a->divisor;                                                               \
        (void)n;                                                                                   \
        for (uint64_t i = 0; i < a->count; i++) {                                                  \
            A acc = LOAD(((const T *)a->src[0])[i]);                                               \
            T r;                                                                                   \
            for (int s = 1; s < a->nsrcs; s++)                                                     \
                acc = OP(acc, LOAD(((const T *)a->src[s])[i]));                                    \
            r = FIN(STORE(acc), n);                                                                \
            for (int d = 0; d < a->ndsts; d++)                                                     \
                ((T *)a->dst[d])[i] = r;                                                           \
        }                                                                                          \
    }
COLL_RC_LIST(FC_RC_FN)

struct fc_kdef {
    const char *name;
    const char *op;
    size_t esize;
    void (*run)(const struct coll_cuda_rc_args *a);
};
#define FC_RC_DEF(tag, op, T, A, LOAD, STORE, OP, FIN, NT)                                         \
    {"coll_rc_" #tag "_" #op, #op, sizeof(T), fc_rc_##tag##_##op},
static const struct fc_kdef fc_kdefs[] = {COLL_RC_LIST(FC_RC_DEF)};
#define FC_NKERNELS (sizeof(fc_kdefs) / sizeof(fc_kdefs[0]))

struct fc_kernel {
    struct fc_lib *lib;
    const struct fc_kdef *def;
    bool loaded[FC_MAX_DEVICES]; /* lazy loading: into which devices */
};
struct fc_lib {
    bool live;
    struct fc_kernel kernels[FC_NKERNELS];
    struct fc_lib *next;
};

/* The first four bytes of a fatbinary as nvcc --fatbin writes it. */
#define FC_FATBIN_MAGIC 0xba55ed50u

FC_API int cudaLibraryLoadData(void **lib_p, const void *code, void *jit_opts, void **jit_vals,
                               unsigned int njit, void *lib_opts, void **lib_vals,
                               unsigned int nlib)
{
    struct fc_lib *l;
    uint32_t magic;

    FC_ENTER(FC_NEED_DEVICE);
    if (!lib_p || !code || (njit && (!jit_opts || !jit_vals)) || (nlib && (!lib_opts || !lib_vals)))
        return fc_err(cudaErrorInvalidValue);
    memcpy(&magic, code, sizeof(magic));
    if (magic != FC_FATBIN_MAGIC) {
        fc_violation("cudaLibraryLoadData: not a fatbinary (first word 0x%08x)", magic);
        return fc_err(cudaErrorInvalidKernelImage);
    }
    l = calloc(1, sizeof(*l));
    if (!l)
        return fc_err(cudaErrorMemoryAllocation);
    l->live = true;
    for (size_t i = 0; i < FC_NKERNELS; i++)
        l->kernels[i] = (struct fc_kernel){l, &fc_kdefs[i], {false}};
    pthread_mutex_lock(&fc.mu);
    l->next = fc.libs;
    fc.libs = l; /* kept after unload, so that stale kernel handles are recognised */
    pthread_mutex_unlock(&fc.mu);
    *lib_p = l;
    return cudaSuccess;
}

static struct fc_lib *fc_lib_get(void *h)
{
    for (struct fc_lib *l = fc.libs; l; l = l->next)
        if (l == h && l->live)
            return l;
    return NULL;
}

FC_API int cudaLibraryUnload(void *lib)
{
    struct fc_lib *l;

    FC_ENTER(FC_NEED_DEVICE);
    pthread_mutex_lock(&fc.mu);
    l = fc_lib_get(lib);
    if (l)
        l->live = false;
    pthread_mutex_unlock(&fc.mu);
    return l ? cudaSuccess : fc_err(cudaErrorInvalidResourceHandle);
}

FC_API int cudaLibraryGetKernel(void **kernel_p, void *lib, const char *name)
{
    struct fc_lib *l;
    int rc = cudaErrorInvalidDeviceFunction;

    FC_ENTER(FC_NEED_DEVICE);
    if (!kernel_p || !name)
        return fc_err(cudaErrorInvalidValue);
    pthread_mutex_lock(&fc.mu);
    l = fc_lib_get(lib);
    if (!l) {
        rc = cudaErrorInvalidResourceHandle;
    } else {
        for (size_t i = 0; i < FC_NKERNELS; i++) {
            if (strcmp(fc_kdefs[i].name, name) == 0) {
                *kernel_p = &l->kernels[i];
                rc = cudaSuccess;
                break;
            }
        }
    }
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

/* Lazy loading (CUDA_MODULE_LOADING=LAZY, CUDA's default): a kernel's first launch or
 * attribute query on a device loads it there, and the load waits until no stream of the
 * device has work queued, as the context synchronisation such a load may need would. Code
 * that launches a kernel for the first time while a stream waits on it hangs here as on a
 * GPU. COLL_FAKECUDA_LAZY_LOADING=0: loaded at once. Caller holds fc.mu. */
static void fc_kernel_load(const struct fc_kernel *kc, int dev)
{
    struct fc_kernel *k = (struct fc_kernel *)kc;

    if (!fc.lazy_loading || dev < 0 || dev >= FC_MAX_DEVICES || k->loaded[dev])
        return;
    for (;;) {
        struct fc_stream *t;
        for (t = fc.streams; t && !(t->device == dev && t->done < t->enq); t = t->next)
            ;
        if (!t)
            break;
        pthread_cond_wait(&fc.cv, &fc.mu);
    }
    k->loaded[dev] = true;
}

/* The kernel a handle names, in a live library. Caller holds fc.mu. */
static const struct fc_kernel *fc_kernel_get(const void *h)
{
    for (struct fc_lib *l = fc.libs; l; l = l->next)
        if (l->live && (uintptr_t)h >= (uintptr_t)&l->kernels[0] &&
            (uintptr_t)h < (uintptr_t)&l->kernels[FC_NKERNELS] &&
            ((uintptr_t)h - (uintptr_t)&l->kernels[0]) % sizeof(struct fc_kernel) == 0)
            return h;
    return NULL;
}

/* A query about a kernel (occupancy, attributes): whether the handle names one, which the
 * query loads into the current device as CUDA's lazy loading does. */
static bool fc_kernel_query(const void *func)
{
    const struct fc_kernel *k;

    pthread_mutex_lock(&fc.mu);
    k = fc_kernel_get(func);
    if (k)
        fc_kernel_load(k, tls.dev);
    pthread_mutex_unlock(&fc.mu);
    return k != NULL;
}

FC_API int cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *nblocks, const void *func, int block,
                                                         size_t shmem)
{
    FC_ENTER(FC_NEED_DEVICE);
    if (!nblocks || block <= 0 || block > 1024 || shmem > 49152)
        return fc_err(cudaErrorInvalidValue);
    if (!fc_kernel_query(func))
        return fc_err(cudaErrorInvalidDeviceFunction);
    *nblocks = 2048 / block;
    return cudaSuccess;
}

/* struct cudaFuncAttributes begins: sharedSizeBytes, constSizeBytes, localSizeBytes
 * (size_t), maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion (int), ...; the rest is
 * left zero. */
FC_API int cudaFuncGetAttributes(void *attr, const void *func)
{
    struct {
        size_t shared, constant, local;
        int max_threads, regs, ptx, binary;
    } a = {0, 0, 0, 1024, 32, 90, 90};

    FC_ENTER(FC_NEED_DEVICE);
    if (!attr)
        return fc_err(cudaErrorInvalidValue);
    if (!fc_kernel_query(func))
        return fc_err(cudaErrorInvalidDeviceFunction);
    memcpy(attr, &a, sizeof(a));
    return cudaSuccess;
}

static bool fc_overlap(const char *a, size_t na, const char *b, size_t nb)
{
    return a < b + nb && b < a + na;
}

/* Check one pointer of a launch and translate it. Caller holds fc.mu. */
static int fc_kernel_ptr(const char *kname, const char *role, int idx, const void *p, size_t bytes,
                         size_t esize, bool vec, int dev, char **host_p)
{
    struct fc_xl x;
    int rc;

    if (!p) {
        fc_violation("%s: %s %d is NULL", kname, role, idx);
        return cudaErrorIllegalAddress;
    }
    if ((uintptr_t)p % (vec ? 16 : esize)) {
        fc_violation("%s: %s %d (%p) is not aligned to %zu bytes", kname, role, idx, p,
                     vec ? (size_t)16 : esize);
        return cudaErrorMisalignedAddress;
    }
    rc = fc_xlate(kname, p, bytes, &x);
    if (rc)
        return cudaErrorIllegalAddress;
    if (x.type == FC_UNREGISTERED ||
        (x.type == FC_DEVICE && x.device != dev && !fc.peer[dev][x.device])) {
        fc_violation("%s on device %d: %s %d (%p) is %s", kname, dev, role, idx, p,
                     x.type == FC_UNREGISTERED ? "plain host memory"
                                               : "another device's memory without peer access");
        return cudaErrorIllegalAddress;
    }
    *host_p = x.host;
    return cudaSuccess;
}

FC_API int cudaLaunchKernel(const void *func, struct coll_cuda_dim3 grid,
                            struct coll_cuda_dim3 block, void **args, size_t shmem, void *stream)
{
    const struct fc_kernel *k;
    struct coll_cuda_rc_args a;
    struct fc_stream *s;
    struct fc_op *op;
    char *src[COLL_CUDA_MAX_SRCS], *dst[COLL_CUDA_MAX_DSTS];
    uint64_t threads;
    size_t bytes, esize;
    int rc;

    FC_ENTER(FC_NEED_DEVICE);
    pthread_mutex_lock(&fc.mu);
    k = fc_kernel_get(func);
    if (!k) {
        rc = cudaErrorInvalidDeviceFunction;
        goto out_unlock;
    }
    fc_kernel_load(k, tls.dev);
    threads = (uint64_t)block.x * block.y * block.z;
    if (grid.x < 1 || grid.x > 2147483647u || grid.y < 1 || grid.y > 65535 || grid.z < 1 ||
        grid.z > 65535 || block.x < 1 || block.x > 1024 || block.y < 1 || block.y > 1024 ||
        block.z < 1 || block.z > 64 || threads > 1024 || shmem > 49152) {
        rc = cudaErrorInvalidConfiguration;
        goto out_unlock;
    }
    rc = fc_stream_get(stream, &s);
    if (rc)
        goto out_unlock;
    if (s->device != tls.dev) {
        fc_violation("cudaLaunchKernel(%s) on device %d into a stream of device %d", k->def->name,
                     tls.dev, s->device);
        rc = cudaErrorInvalidResourceHandle;
        goto out_unlock;
    }
    if (!args || !args[0]) {
        rc = cudaErrorInvalidValue;
        goto out_unlock;
    }
    memcpy(&a, args[0], sizeof(a)); /* parameters are copied at launch */
    if (a.nsrcs < 1 || a.nsrcs > COLL_CUDA_MAX_SRCS || a.ndsts < 1 ||
        a.ndsts > COLL_CUDA_MAX_DSTS) {
        fc_violation("%s: %d inputs and %d outputs", k->def->name, a.nsrcs, a.ndsts);
        rc = cudaErrorInvalidValue;
        goto out_unlock;
    }
    /* An avg kernel given 0 would divide integers by zero (undefined on a GPU, a trap
     * here); any other kernel given a divisor would drop the division the caller meant. */
    if (strcmp(k->def->op, "avg") == 0 ? a.divisor == 0 : a.divisor != 0) {
        fc_violation("%s: divisor %u (avg kernels: 1 or more; others: 0)", k->def->name, a.divisor);
        rc = cudaErrorInvalidValue;
        goto out_unlock;
    }
    esize = k->def->esize;
    if (a.count > SIZE_MAX / esize) {
        rc = cudaErrorIllegalAddress;
        goto out_unlock;
    }
    bytes = (size_t)a.count * esize;
    for (int i = 0; i < a.nsrcs && rc == cudaSuccess; i++)
        rc = fc_kernel_ptr(k->def->name, "input", i, a.src[i], bytes, esize, a.vec != 0, tls.dev,
                           &src[i]);
    for (int i = 0; i < a.ndsts && rc == cudaSuccess; i++)
        rc = fc_kernel_ptr(k->def->name, "output", i, a.dst[i], bytes, esize, a.vec != 0, tls.dev,
                           &dst[i]);
    if (rc)
        goto out_unlock;
    /* On a GPU, threads of other blocks may write an output before this one reads an
     * input it overlaps: only exact aliasing (in place) is well defined. */
    for (int d = 0; d < a.ndsts; d++) {
        for (int i = 0; i < a.nsrcs; i++)
            if (dst[d] != src[i] && fc_overlap(dst[d], bytes, src[i], bytes))
                fc_violation("%s: output %d overlaps input %d partially", k->def->name, d, i);
        if (d == 1 && fc_overlap(dst[0], bytes, dst[1], bytes))
            fc_violation("%s: the two outputs overlap", k->def->name);
    }
    op = fc_op_new(FC_OP_KERNEL);
    if (!op) {
        rc = cudaErrorMemoryAllocation;
        goto out_unlock;
    }
    for (int i = 0; i < a.nsrcs; i++)
        a.src[i] = src[i];
    for (int i = 0; i < a.ndsts; i++)
        a.dst[i] = dst[i];
    op->rc = a;
    op->krun = k->def->run;
    /* launches are counted under fc.mu, so "the N-th" is well defined across threads */
    if (fc.corrupt_rc > 0 && atomic_load(&fc_kernel_launches) + 1 == fc.corrupt_rc)
        op->corrupt_esize = esize;
    rc = fc_enqueue(s, op, NULL);
    if (rc == cudaSuccess)
        atomic_fetch_add(&fc_kernel_launches, 1);
out_unlock:
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

/* ---- 12 IPC -------------------------------------------------------------------------- */

/* Open another process's memfd through /proc: same uid, and it exists only while the
 * owner does, so nothing outlives it. */
static int fc_ipc_open_fd(const struct fc_ipc_wire *w, uint64_t min_size)
{
    char path[64];
    struct stat st;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)w->pid, (int)w->fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_ino != w->ino || (uint64_t)st.st_size < min_size) {
        close(fd);
        return -1;
    }
    return fd;
}

FC_API int cudaIpcGetMemHandle(void *handle, void *ptr)
{
    struct fc_ipc_wire w;
    struct fc_alloc *a;

    FC_ENTER(FC_NEED_DEVICE);
    if (!handle || !ptr)
        return fc_err(cudaErrorInvalidValue);
    pthread_mutex_lock(&fc.mu);
    a = fc_find(ptr);
    if (!a || a->kind != FC_A_MALLOC || a->base != ptr) {
        pthread_mutex_unlock(&fc.mu);
        /* CUDA maps an interior pointer's handle to the allocation's start, which its
         * opener then gets: a silent offset bug. Only starts are accepted here. */
        fc_violation("cudaIpcGetMemHandle(%p): not the start of a cudaMalloc allocation", ptr);
        return fc_err(cudaErrorInvalidValue);
    }
    memset(&w, 0, sizeof(w));
    w.magic = FC_IPC_MEM_MAGIC;
    w.pid = (int32_t)getpid();
    w.fd = a->fd;
    w.device = a->device;
    w.ino = a->ino;
    w.size = a->size;
    w.token = a->token;
    pthread_mutex_unlock(&fc.mu);
    memset(handle, 0, FC_IPC_HANDLE_BYTES);
    memcpy(handle, &w, sizeof(w));
    return cudaSuccess;
}

/* cudaIpcMemHandle_t is passed by value: 64 bytes. */
FC_API int cudaIpcOpenMemHandle(void **p, struct fc_ipc_handle handle, unsigned int flags)
{
    struct fc_ipc_wire w;
    struct fc_alloc *a = NULL;
    size_t mapped;
    char *base;
    int fd, rc = cudaSuccess;

    FC_ENTER(FC_NEED_DEVICE);
    memcpy(&w, &handle, sizeof(w));
    if (!p || flags != FC_IPC_LAZY_PEER || w.magic != FC_IPC_MEM_MAGIC || w.size == 0)
        return fc_err(cudaErrorInvalidValue);
    if (w.pid == (int32_t)getpid())
        return fc_err(cudaErrorDeviceUninitialized); /* CUDA: not in the owning process */
    pthread_mutex_lock(&fc.mu);
    for (size_t i = 0; i < fc.nallocs; i++) {
        struct fc_alloc *b = fc.allocs[i];
        if (b->kind == FC_A_IPC && b->ipc_pid == w.pid && b->ino == w.ino && b->token == w.token) {
            b->ipc_refs++; /* the same handle again: the same mapping */
            *p = b->base;
            pthread_mutex_unlock(&fc.mu);
            return cudaSuccess;
        }
    }
    pthread_mutex_unlock(&fc.mu);
    fd = fc_ipc_open_fd(&w, w.size);
    if (fd < 0)
        return fc_err(cudaErrorMapBufferObjectFailed);
    mapped = fc_round_page((size_t)w.size);
    a = calloc(1, sizeof(*a));
    if (!a) {
        close(fd);
        return fc_err(cudaErrorMemoryAllocation);
    }
    a->alias = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (a->alias == MAP_FAILED) {
        close(fd);
        free(a);
        return fc_err(cudaErrorMapBufferObjectFailed);
    }
    pthread_mutex_lock(&fc.mu);
    base = fc_va_take(mapped);
    if (!base) {
        rc = cudaErrorMemoryAllocation;
    } else {
        a->base = base;
        a->size = (size_t)w.size;
        a->mapped = mapped;
        a->type = FC_DEVICE;
        a->device = tls.dev;
        a->kind = FC_A_IPC;
        a->fd = fd;
        a->ino = w.ino;
        a->token = w.token;
        a->ipc_refs = 1;
        a->ipc_pid = w.pid;
        rc = fc_table_add(a);
    }
    pthread_mutex_unlock(&fc.mu);
    if (rc) {
        munmap(a->alias, mapped);
        close(fd);
        free(a);
        return fc_err(rc);
    }
    *p = base;
    return cudaSuccess;
}

FC_API int cudaIpcCloseMemHandle(void *p)
{
    struct fc_alloc *a;

    FC_ENTER(FC_NEED_DEVICE);
    pthread_mutex_lock(&fc.mu);
    a = p ? fc_find(p) : NULL;
    if (!a || a->base != p || a->kind != FC_A_IPC) {
        pthread_mutex_unlock(&fc.mu);
        fc_violation("cudaIpcCloseMemHandle(%p): not a pointer from cudaIpcOpenMemHandle", p);
        return fc_err(cudaErrorInvalidValue);
    }
    if (--a->ipc_refs > 0) {
        pthread_mutex_unlock(&fc.mu);
        return cudaSuccess;
    }
    pthread_mutex_unlock(&fc.mu);
    return fc_err(fc_free("cudaIpcCloseMemHandle", p, FC_A_IPC, FC_A_IPC));
}

FC_API int cudaIpcGetEventHandle(void *handle, void *ev)
{
    struct fc_ipc_wire w;
    struct fc_event *e;
    int rc;

    FC_ENTER(FC_NEED_DEVICE);
    if (!handle)
        return fc_err(cudaErrorInvalidValue);
    pthread_mutex_lock(&fc.mu);
    rc = fc_event_get(ev, &e);
    if (rc == cudaSuccess && (!e->page || e->opened))
        rc = cudaErrorInvalidResourceHandle; /* not created with cudaEventInterprocess */
    if (rc == cudaSuccess) {
        memset(&w, 0, sizeof(w));
        w.magic = FC_IPC_EV_MAGIC;
        w.pid = (int32_t)getpid();
        w.fd = e->fd;
        w.device = e->device;
        w.ino = e->ino;
        w.size = fc_page();
        w.token = e->page->token;
        memset(handle, 0, FC_IPC_HANDLE_BYTES);
        memcpy(handle, &w, sizeof(w));
    }
    pthread_mutex_unlock(&fc.mu);
    return fc_err(rc);
}

FC_API int cudaIpcOpenEventHandle(void **ev_p, struct fc_ipc_handle handle)
{
    struct fc_ipc_wire w;
    struct fc_event *e;
    void *pg;
    int fd;

    FC_ENTER(FC_NEED_DEVICE);
    memcpy(&w, &handle, sizeof(w));
    if (!ev_p || w.magic != FC_IPC_EV_MAGIC)
        return fc_err(cudaErrorInvalidValue);
    if (w.pid == (int32_t)getpid())
        return fc_err(cudaErrorDeviceUninitialized);
    fd = fc_ipc_open_fd(&w, fc_page());
    if (fd < 0)
        return fc_err(cudaErrorMapBufferObjectFailed);
    pg = mmap(NULL, fc_page(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (pg == MAP_FAILED) {
        close(fd);
        return fc_err(cudaErrorMapBufferObjectFailed);
    }
    if (((struct fc_ipc_page *)pg)->token != w.token) {
        munmap(pg, fc_page());
        close(fd);
        return fc_err(cudaErrorInvalidValue);
    }
    e = calloc(1, sizeof(*e));
    if (!e) {
        munmap(pg, fc_page());
        close(fd);
        return fc_err(cudaErrorMemoryAllocation);
    }
    e->refs = 1;
    e->live = true;
    e->device = tls.dev;
    e->flags = FC_EVENT_INTERPROCESS | FC_EVENT_DISABLE_TIMING;
    e->page = pg;
    e->fd = fd;
    e->ino = w.ino;
    e->opened = true;
    pthread_mutex_lock(&fc.mu);
    fc_event_link(e);
    pthread_mutex_unlock(&fc.mu);
    *ev_p = e;
    return cudaSuccess;
}
