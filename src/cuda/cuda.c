/*
 * cuda.c - CUDA found at run time: libcudart is dlopen'ed on first use, never linked, so
 * libcoll loads and its host collectives run unchanged on machines without CUDA, without a
 * driver or without a GPU. The kernels (reduce_kernels.cu) reach libcoll as an embedded
 * fatbinary, loaded with cudaLibraryLoadData when first launched.
 *
 * Divisions: 1 the CPU reference of reduce-copy, 2 detection and the libcudart table,
 * 3 pointer kinds, 4 the kernels: loading, grid size, launch.
 */
#include "cuda.h"

#include "../reduce/elem.h"
#include "coll_config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if COLL_HAVE_CUDA
/* reduce_kernels.fatbin as bytes, generated at build time (meson.build) */
extern const unsigned char coll__cuda_fatbin[];
extern const size_t coll__cuda_fatbin_size;
#endif

/* cudaError_t and enum values used here (driver_types.h) */
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_DEV_ATTR_SM_COUNT 16
#define CUDA_DEV_ATTR_MAX_THREADS_PER_SM 39

/* Check a reduce-copy call's arguments, shared by the kernel path and the reference. */
static coll_status_t rc_check(struct coll_comm *comm, const char *what, void *const dst[],
                              int ndsts, const void *const src[], int nsrcs, size_t count,
                              coll_dtype_t dt, coll_op_t op, uint32_t divisor)
{
    size_t esize;

    if (nsrcs < 1 || nsrcs > COLL_CUDA_MAX_SRCS)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: %d inputs (1 to %d)", what, nsrcs,
                           COLL_CUDA_MAX_SRCS);
    if (ndsts < 1 || ndsts > COLL_CUDA_MAX_DSTS)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: %d outputs (1 to %d)", what, ndsts,
                           COLL_CUDA_MAX_DSTS);
    if ((unsigned)dt >= COLL_NUM_DTYPES || (unsigned)op >= COLL_NUM_OPS)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: unknown dtype %d or op %d", what,
                           (int)dt, (int)op);
    /* a divisor with another op would be dropped silently: refuse it */
    if (divisor == 0 || (divisor != 1 && op != COLL_AVG))
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: divisor %u with op %s (avg: 1 or more; other ops: 1)", what,
                           divisor, coll__op_name(op));
    if (count == 0)
        return COLL_SUCCESS;
    if (!src || !dst)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: NULL buffer array", what);
    /* Elements must be naturally aligned: a GPU faults on a misaligned access (and C
     * calls it undefined). Alignment to 16 bytes only picks the faster path. */
    esize = coll__dtype_size(dt);
    for (int s = 0; s < nsrcs; s++) {
        if (!src[s])
            return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: input %d is NULL", what, s);
        if ((uintptr_t)src[s] % esize)
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "%s: input %d (%p) is not aligned to its %zu-byte %s elements", what,
                               s, src[s], esize, coll__dtype_name(dt));
    }
    for (int d = 0; d < ndsts; d++) {
        if (!dst[d])
            return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: output %d is NULL", what, d);
        if ((uintptr_t)dst[d] % esize)
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "%s: output %d (%p) is not aligned to its %zu-byte %s elements",
                               what, d, dst[d], esize, coll__dtype_name(dt));
    }
    return COLL_SUCCESS;
}

/* Kernel and reference tables are indexed like reduce.c's: integer sum and prod through
 * the unsigned tag; max, min and avg through the dtype's own (avg divides with its sign).
 * AVG with divisor 1 runs SUM's entry instead (rc_op). */
#define RC_ROW(F, s, m)                                                                            \
    {                                                                                              \
        F(s, sum), F(s, prod), F(m, max), F(m, min), F(m, avg)                                     \
    }
#define RC_TABLE(F)                                                                                \
    {                                                                                              \
        [COLL_INT8] = RC_ROW(F, u8, i8), [COLL_UINT8] = RC_ROW(F, u8, u8),                         \
        [COLL_INT32] = RC_ROW(F, u32, i32), [COLL_UINT32] = RC_ROW(F, u32, u32),                   \
        [COLL_INT64] = RC_ROW(F, u64, i64), [COLL_UINT64] = RC_ROW(F, u64, u64),                   \
        [COLL_FLOAT16] = RC_ROW(F, f16, f16), [COLL_FLOAT32] = RC_ROW(F, f32, f32),                \
        [COLL_FLOAT64] = RC_ROW(F, f64, f64), [COLL_BFLOAT16] = RC_ROW(F, bf16, bf16),             \
        [COLL_FLOAT8E4M3] = RC_ROW(F, e4m3, e4m3), [COLL_FLOAT8E5M2] = RC_ROW(F, e5m2, e5m2),      \
    }

/* ---- 1 the CPU reference ------------------------------------------------------------- */

/* ref_<tag>_<op>: the kernels' fold, element by element. All inputs of element i are read
 * before it is written, so a dst may be a src exactly. */
#define REF_FN(tag, op, T, A, LOAD, STORE, OP, FIN, NT)                                            \
    static void ref_##tag##_##op(void *const dst[], int ndsts, const void *const src[], int nsrcs, \
                                 size_t count, uint32_t divisor)                                   \
    {                                                                                              \
        const NT n = (NT)divisor;                                                                  \
        (void)n;                                                                                   \
        for (size_t i = 0; i < count; i++) {                                                       \
            A acc = LOAD(((const T *)src[0])[i]);                                                  \
            T r;                                                                                   \
            for (int s = 1; s < nsrcs; s++)                                                        \
                acc = OP(acc, LOAD(((const T *)src[s])[i]));                                       \
            r = FIN(STORE(acc), n);                                                                \
            for (int d = 0; d < ndsts; d++)                                                        \
                ((T *)dst[d])[i] = r;                                                              \
        }                                                                                          \
    }
COLL_RC_LIST(REF_FN)

typedef void (*ref_fn)(void *const dst[], int ndsts, const void *const src[], int nsrcs,
                       size_t count, uint32_t divisor);
#define REF_NAME(tag, op) ref_##tag##_##op
static const ref_fn ref_table[COLL_NUM_DTYPES][COLL_NUM_OPS] = RC_TABLE(REF_NAME);

/* Dividing by 1 changes nothing, so AVG by 1 is SUM's kernel: no division per element, and
 * the avg kernels always get a divisor of at least 2. Other ops get 0 in the argument block
 * (the kernels ignore it; the emulator checks it). */
static coll_op_t rc_op(coll_op_t op, uint32_t divisor)
{
    return op == COLL_AVG && divisor == 1 ? COLL_SUM : op;
}

coll_status_t coll__cuda_ref_reduce_copy(struct coll_comm *comm, void *const dst[], int ndsts,
                                         const void *const src[], int nsrcs, size_t count,
                                         coll_dtype_t dt, coll_op_t op, uint32_t divisor)
{
    coll_status_t st =
        rc_check(comm, "reference reduce-copy", dst, ndsts, src, nsrcs, count, dt, op, divisor);

    if (st != COLL_SUCCESS || count == 0)
        return st;
    op = rc_op(op, divisor);
    ref_table[dt][op](dst, ndsts, src, nsrcs, count, op == COLL_AVG ? divisor : 0);
    return COLL_SUCCESS;
}

/* ---- 2 detection and the libcudart table --------------------------------------------- */

static struct {
    pthread_once_t once;
    enum coll_cuda_state state;
    void *lib; /* dlopen handle; kept until exit (see cuda_detect) */
    struct coll_cudart rt;
    int ndevices;
    char why[512];
} cuda = {.once = PTHREAD_ONCE_INIT};

/* Inside cuda_detect too, hence apart from the public one (which waits for detection). */
static void cuda_error_text(int err, char *buf, size_t size)
{
    const struct coll_cudart *rt = cuda.lib ? &cuda.rt : NULL;

    if (rt && rt->GetErrorName && rt->GetErrorString)
        snprintf(buf, size, "%s (%s, error %d)", rt->GetErrorString(err), rt->GetErrorName(err),
                 err);
    else
        snprintf(buf, size, "CUDA error %d", err);
}

void coll__cuda_error_text(int err, char *buf, size_t size)
{
    coll__cuda_state(NULL);
    cuda_error_text(err, buf, size);
}

/* Every entry of struct coll_cudart, by symbol name. */
#define CUDART_SYMBOLS(X)                                                                          \
    X(GetErrorName)                                                                                \
    X(GetErrorString) X(GetLastError) X(GetDeviceCount) X(GetDevice) X(SetDevice)                  \
        X(DeviceGetAttribute) X(RuntimeGetVersion) X(DriverGetVersion) X(PointerGetAttributes)     \
            X(Malloc) X(MallocManaged) X(MallocHost) X(Free) X(FreeHost) X(HostRegister)           \
                X(HostUnregister) X(Memcpy) X(Memset) X(StreamCreateWithFlags)                     \
                    X(StreamSynchronize) X(StreamDestroy) X(LibraryLoadData) X(LibraryUnload)      \
                        X(LibraryGetKernel) X(LaunchKernel)

/* Entries that may be missing: what needs them checks for NULL. */
#define CUDART_OPTIONAL(X)                                                                         \
    X(MemcpyAsync)                                                                                 \
    X(MemsetAsync) X(HostAlloc) X(StreamQuery) X(StreamWaitEvent) X(StreamGetDevice)               \
        X(EventCreateWithFlags) X(EventRecord) X(EventQuery) X(EventSynchronize) X(EventDestroy)   \
            X(LaunchHostFunc) X(DeviceSynchronize) X(IpcGetMemHandle) X(IpcOpenMemHandle)          \
                X(IpcCloseMemHandle) X(HostGetDevicePointer) X(FuncGetAttributes)

/* cuStreamWaitValue32 lets a stream wait for a word that a host thread writes, where a host
 * function would have to block in CUDA's callback thread, waiting for work not ordered
 * before it, which CUDA's documentation rules out. It is a driver call: from the runtime library where that has it (the
 * emulator), else from libcuda.so.1, which a working runtime has loaded already. The _v2
 * entry point is the one enabled on every driver since CUDA 11.7; the plain name may need
 * a driver option. COLL_CUDA_WAIT_VALUE=0 leaves it out (host functions only). */
static void cuda_resolve_wait_value(void *lib)
{
    static const char *const names[] = {"cuStreamWaitValue32_v2", "cuStreamWaitValue32"};
    const char *env = getenv("COLL_CUDA_WAIT_VALUE");
    void *sym = NULL, *drv;

    if (env && strcmp(env, "0") == 0)
        return;
    for (size_t i = 0; i < 2 && !sym; i++)
        sym = dlsym(lib, names[i]);
    if (!sym && (drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) != NULL) {
        for (size_t i = 0; i < 2 && !sym; i++)
            sym = dlsym(drv, names[i]);
        /* kept open, as the runtime is */
    }
    memcpy(&cuda.rt.StreamWaitValue32, &sym, sizeof(sym));
}

/* Resolve every symbol; false (with why set) at the first one missing: a libcudart older
 * than 12.0 lacks the cudaLibrary* calls, and we would rather not use it at all. */
static bool cuda_resolve(void *lib, const char *libname)
{
    void *sym;

#define RESOLVE(name)                                                                              \
    sym = dlsym(lib, "cuda" #name);                                                                \
    if (!sym) {                                                                                    \
        snprintf(cuda.why, sizeof(cuda.why), "'%s' lacks cuda%s (CUDA 12 or later needed)",        \
                 libname, #name);                                                                  \
        return false;                                                                              \
    }                                                                                              \
    /* POSIX guarantees that a data pointer from dlsym converts to a function pointer */           \
    memcpy(&cuda.rt.name, &sym, sizeof(sym));
    CUDART_SYMBOLS(RESOLVE)
#undef RESOLVE
    /* the optional ones stay NULL when absent */
#define RESOLVE_OPT(name)                                                                          \
    sym = dlsym(lib, "cuda" #name);                                                                \
    memcpy(&cuda.rt.name, &sym, sizeof(sym));
    CUDART_OPTIONAL(RESOLVE_OPT)
#undef RESOLVE_OPT
    cuda_resolve_wait_value(lib);
    return true;
}

/* COLL_CUDA_DISABLE: "" or "0" leaves CUDA on; "1" turns it off; anything else turns it off
 * too, with a warning, since whoever set it most likely meant to. */
static bool cuda_disabled_by_env(void)
{
    const char *v = getenv("COLL_CUDA_DISABLE");

    if (!v || !*v || strcmp(v, "0") == 0)
        return false;
    if (strcmp(v, "1") != 0)
        COLL_WARN(COLL_SUB_INIT, "COLL_CUDA_DISABLE='%s' is not 0 or 1; taking it as 1", v);
    return true;
}

static void cuda_detect(void)
{
    const char *env_lib = getenv("COLL_CUDA_LIBRARY");
    const char *names[2] = {"libcudart.so.13", "libcudart.so"};
    const char *libname = NULL;
    char err[256], dlerr[256] = "";
    int n = 0, rc, rtv = 0, drv = 0;
    size_t nnames = 2;

    if (cuda_disabled_by_env()) {
        cuda.state = COLL_CUDA_DISABLED;
        snprintf(cuda.why, sizeof(cuda.why), "CUDA disabled by COLL_CUDA_DISABLE");
        goto out_log;
    }
    if (env_lib && *env_lib) {
        names[0] = env_lib;
        nnames = 1;
    }
    for (size_t i = 0; i < nnames && !cuda.lib; i++) {
        /* RTLD_LOCAL: the application may load its own libcudart; ours stays out of its
         * way. The handle is never closed: CUDA's own atexit work must find it mapped. */
        cuda.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (cuda.lib)
            libname = names[i];
        else if (!dlerr[0])
            snprintf(dlerr, sizeof(dlerr), "%s", dlerror());
    }
    if (!cuda.lib) {
        cuda.state = COLL_CUDA_NO_LIBRARY;
        snprintf(cuda.why, sizeof(cuda.why), "no CUDA runtime: cannot load '%s': %s", names[0],
                 dlerr);
        goto out_log;
    }
    if (!cuda_resolve(cuda.lib, libname)) {
        dlclose(cuda.lib); /* not libcudart after all: nothing of it is kept */
        cuda.lib = NULL;
        memset(&cuda.rt, 0, sizeof(cuda.rt));
        cuda.state = COLL_CUDA_NO_LIBRARY;
        goto out_log;
    }
    rc = cuda.rt.GetDeviceCount(&n);
    if (rc != CUDA_SUCCESS || n <= 0) {
        if (rc != CUDA_SUCCESS) {
            cuda_error_text(rc, err, sizeof(err));
            cuda.rt.GetLastError(); /* not sticky, but leave the runtime's slot clean */
        } else {
            snprintf(err, sizeof(err), "0 devices");
        }
        cuda.state = COLL_CUDA_NO_DEVICE;
        snprintf(cuda.why, sizeof(cuda.why), "no CUDA device: cudaGetDeviceCount failed: %s", err);
        goto out_log;
    }
    cuda.rt.RuntimeGetVersion(&rtv);
    cuda.rt.DriverGetVersion(&drv);
    cuda.ndevices = n;
    cuda.state = COLL_CUDA_READY;
    snprintf(cuda.why, sizeof(cuda.why), "%d CUDA device%s ('%s', runtime %d, driver %d)%s", n,
             n == 1 ? "" : "s", libname, rtv, drv,
             coll__cuda_have_kernels() ? "" : "; this build has no kernels (no nvcc)");

out_log:
    COLL_INFO(COLL_SUB_INIT, "cuda: %s", cuda.why);
}

enum coll_cuda_state coll__cuda_state(const char **why_p)
{
    pthread_once(&cuda.once, cuda_detect);
    if (why_p)
        *why_p = cuda.why;
    return cuda.state;
}

bool coll__cuda_available(void)
{
    return coll__cuda_state(NULL) == COLL_CUDA_READY;
}

bool coll__cuda_have_kernels(void)
{
    return COLL_HAVE_CUDA != 0;
}

const struct coll_cudart *coll__cudart(void)
{
    return coll__cuda_available() ? &cuda.rt : NULL;
}

/* ---- 3 pointer kinds ----------------------------------------------------------------- */

/* struct cudaPointerAttributes (driver_types.h, CUDA 11 and later); reserved space as in
 * CUDA 13, which older runtimes simply do not write. */
struct cuda_ptr_attr {
    int type; /* enum cudaMemoryType */
    int device;
    void *device_pointer;
    void *host_pointer;
    long reserved[8];
};

const char *coll__mem_kind_name(enum coll_mem_kind kind)
{
    switch (kind) {
    case COLL_MEM_UNREGISTERED:
        return "host";
    case COLL_MEM_HOST:
        return "pinned host";
    case COLL_MEM_DEVICE:
        return "device";
    case COLL_MEM_MANAGED:
        return "managed";
    }
    return "unknown";
}

coll_status_t coll__cuda_mem_kind(struct coll_comm *comm, const void *ptr,
                                  enum coll_mem_kind *kind_p, int *device_p)
{
    struct cuda_ptr_attr attr;
    char err[256];
    int rc;

    if (!ptr || !coll__cuda_available()) {
        *kind_p = COLL_MEM_UNREGISTERED;
        if (device_p)
            *device_p = -1;
        return COLL_SUCCESS;
    }
    memset(&attr, 0, sizeof(attr));
    rc = cuda.rt.PointerGetAttributes(&attr, ptr);
    if (rc == CUDA_ERROR_INVALID_VALUE) {
        /* Runtimes before 11.0 answered so for memory they did not know; later ones say
         * cudaMemoryTypeUnregistered. Clear the error so that it does not surface later. */
        cuda.rt.GetLastError();
        attr.type = COLL_MEM_UNREGISTERED;
    } else if (rc != CUDA_SUCCESS) {
        cuda.rt.GetLastError();
        cuda_error_text(rc, err, sizeof(err));
        return coll__error(comm, COLL_CUDA_ERROR, "cudaPointerGetAttributes(%p) failed: %s", ptr,
                           err);
    }
    if (attr.type < COLL_MEM_UNREGISTERED || attr.type > COLL_MEM_MANAGED)
        return coll__error(comm, COLL_CUDA_ERROR,
                           "cudaPointerGetAttributes(%p): unknown memory type %d", ptr, attr.type);
    *kind_p = (enum coll_mem_kind)attr.type;
    if (device_p)
        *device_p = attr.type == COLL_MEM_UNREGISTERED ? -1 : attr.device;
    return COLL_SUCCESS;
}

/* ---- 4 the kernels ------------------------------------------------------------------- */

#define RC_KNAME(tag, op) "coll_rc_" #tag "_" #op
static const char *const rc_names[COLL_NUM_DTYPES][COLL_NUM_OPS] = RC_TABLE(RC_KNAME);

/* Blocks per launch for the first devices, per kernel: 0 until computed. Devices beyond
 * the table are asked every time (two cheap attribute queries). */
#define RC_GRID_CACHE_DEVICES 16

static struct {
    pthread_once_t once;
    coll_status_t status; /* of the load */
    char why[512];        /* the load's failure, repeated to every caller */
    void *lib;            /* cudaLibrary_t; unloaded never (lives as libcudart) */
    void *kernel[COLL_NUM_DTYPES][COLL_NUM_OPS]; /* cudaKernel_t */
    _Atomic unsigned grid[RC_GRID_CACHE_DEVICES][COLL_NUM_DTYPES][COLL_NUM_OPS];
} rc = {.once = PTHREAD_ONCE_INIT};

/* Load the fatbinary and look up every kernel, once. cudaLibraryLoadData makes the kernels
 * available on every device, loaded into each lazily by the driver. */
static void rc_load(void)
{
#if COLL_HAVE_CUDA
    char err[256];
    int ret;

    ret = cuda.rt.LibraryLoadData(&rc.lib, coll__cuda_fatbin, NULL, NULL, 0, NULL, NULL, 0);
    if (ret != CUDA_SUCCESS) {
        cuda.rt.GetLastError();
        cuda_error_text(ret, err, sizeof(err));
        snprintf(rc.why, sizeof(rc.why),
                 "cannot load the reduce-copy kernels (%zu-byte fatbinary for sm_80, sm_90): "
                 "cudaLibraryLoadData failed: %s",
                 coll__cuda_fatbin_size, err);
        rc.status = COLL_CUDA_ERROR;
        return;
    }
    for (int dt = 0; dt < COLL_NUM_DTYPES; dt++) {
        for (int op = 0; op < COLL_NUM_OPS; op++) {
            ret = cuda.rt.LibraryGetKernel(&rc.kernel[dt][op], rc.lib, rc_names[dt][op]);
            if (ret != CUDA_SUCCESS) {
                cuda.rt.GetLastError();
                cuda_error_text(ret, err, sizeof(err));
                snprintf(rc.why, sizeof(rc.why), "cudaLibraryGetKernel('%s') failed: %s",
                         rc_names[dt][op], err);
                rc.status = COLL_CUDA_ERROR;
                return;
            }
        }
    }
    rc.status = COLL_SUCCESS;
#else
    snprintf(rc.why, sizeof(rc.why), "coll was built without CUDA kernels (no nvcc)");
    rc.status = COLL_INVALID_USAGE;
#endif
}

/*
 * Blocks for a launch on the current device: SM count x resident blocks per SM for this
 * kernel (its registers decide: cudaOccupancyMaxActiveBlocksPerMultiprocessor), so one
 * wave of blocks fills the GPU and grid-strides over the data; fewer when the work is
 * smaller than one wave. On any failure, 1 block per SM x 4 still runs correctly.
 */
typedef int (*occupancy_fn)(int *nblocks, const void *func, int block, size_t shmem);
static occupancy_fn rc_occupancy;

static unsigned rc_full_grid(coll_dtype_t dt, coll_op_t op)
{
    int dev = 0, sms = 0, per_sm = 0, max_threads = 0;
    unsigned grid;

    if (cuda.rt.GetDevice(&dev) != CUDA_SUCCESS)
        dev = -1;
    if (dev >= 0 && dev < RC_GRID_CACHE_DEVICES) {
        grid = atomic_load_explicit(&rc.grid[dev][dt][op], memory_order_relaxed);
        if (grid)
            return grid;
    }
    if (dev < 0 || cuda.rt.DeviceGetAttribute(&sms, CUDA_DEV_ATTR_SM_COUNT, dev) != CUDA_SUCCESS ||
        sms <= 0)
        sms = 1;
    if (!rc_occupancy ||
        rc_occupancy(&per_sm, rc.kernel[dt][op], COLL_CUDA_RC_THREADS, 0) != CUDA_SUCCESS ||
        per_sm <= 0) {
        if (dev < 0 ||
            cuda.rt.DeviceGetAttribute(&max_threads, CUDA_DEV_ATTR_MAX_THREADS_PER_SM, dev) !=
                CUDA_SUCCESS ||
            max_threads < COLL_CUDA_RC_THREADS)
            max_threads = 4 * COLL_CUDA_RC_THREADS;
        per_sm = max_threads / COLL_CUDA_RC_THREADS;
    }
    cuda.rt.GetLastError(); /* whichever query failed, its error is handled */
    grid = (unsigned)sms * (unsigned)per_sm;
    if (dev >= 0 && dev < RC_GRID_CACHE_DEVICES)
        atomic_store_explicit(&rc.grid[dev][dt][op], grid, memory_order_relaxed);
    return grid;
}

static void rc_load_all(void)
{
    void *sym = dlsym(cuda.lib, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");

    memcpy(&rc_occupancy, &sym, sizeof(sym)); /* optional: NULL falls back */
    rc_load();
}

/*
 * CUDA loads a kernel into a device lazily (CUDA_MODULE_LOADING=LAZY, the default since
 * CUDA 12.2), at its first launch or attribute query, and that load may wait for the
 * device's other work as a context synchronisation would. The stream worker launches the
 * kernels while a user's stream waits for the worker: a first launch there waits for the
 * stream that waits for the launch. So the first stream-ordered call of a comm loads every
 * kernel into its device before it queues anything: cudaFuncGetAttributes and the occupancy
 * query each force the load (the latter also fills the grid cache).
 */
static _Atomic bool rc_device_loaded[RC_GRID_CACHE_DEVICES];

void coll__cuda_kernels_load(int dev)
{
    unsigned char attr[1024] __attribute__((aligned(16))); /* struct cudaFuncAttributes */

    if (coll__cuda_state(NULL) != COLL_CUDA_READY || dev < 0)
        return;
    if (dev < RC_GRID_CACHE_DEVICES && atomic_load(&rc_device_loaded[dev]))
        return;
    pthread_once(&rc.once, rc_load_all);
    if (rc.status != COLL_SUCCESS)
        return; /* no kernels: the IPC path says so when asked */
    for (int dt = 0; dt < COLL_NUM_DTYPES; dt++) {
        for (int op = 0; op < COLL_NUM_OPS; op++) {
            if (cuda.rt.FuncGetAttributes &&
                cuda.rt.FuncGetAttributes(attr, rc.kernel[dt][op]) != CUDA_SUCCESS)
                cuda.rt.GetLastError();
            (void)rc_full_grid((coll_dtype_t)dt, (coll_op_t)op);
        }
    }
    if (dev < RC_GRID_CACHE_DEVICES)
        atomic_store(&rc_device_loaded[dev], true);
}

coll_status_t coll__cuda_reduce_copy(struct coll_comm *comm, void *const dst[], int ndsts,
                                     const void *const src[], int nsrcs, size_t count,
                                     coll_dtype_t dt, coll_op_t op, uint32_t divisor, void *stream)
{
    struct coll_cuda_rc_args args;
    struct coll_cuda_dim3 grid = {1, 1, 1}, block = {COLL_CUDA_RC_THREADS, 1, 1};
    const char *why;
    void *params[1] = {&args};
    uintptr_t bits = 0;
    uint64_t work;
    size_t esize;
    char err[256];
    int ret;
    coll_status_t st;

    st = rc_check(comm, "reduce-copy", dst, ndsts, src, nsrcs, count, dt, op, divisor);
    if (st != COLL_SUCCESS)
        return st;
    op = rc_op(op, divisor);
    if (coll__cuda_state(&why) != COLL_CUDA_READY)
        return coll__error(comm, COLL_INVALID_USAGE, "reduce-copy on the GPU: %s", why);
    pthread_once(&rc.once, rc_load_all);
    if (rc.status != COLL_SUCCESS)
        return coll__error(comm, rc.status, "%s", rc.why);
    if (count == 0)
        return COLL_SUCCESS;

    memset(&args, 0, sizeof(args));
    for (int s = 0; s < nsrcs; s++) {
        args.src[s] = src[s];
        bits |= (uintptr_t)src[s];
    }
    for (int d = 0; d < ndsts; d++) {
        args.dst[d] = dst[d];
        bits |= (uintptr_t)dst[d];
    }
    args.count = count;
    args.nsrcs = nsrcs;
    args.ndsts = ndsts;
    args.vec = (bits & 15) == 0;
    args.divisor = op == COLL_AVG ? divisor : 0;

    /* Threads needed: one per 16-byte vector plus one per leftover element, or one per
     * element; the grid is the smaller of that and one full wave. */
    esize = coll__dtype_size(dt);
    work = args.vec ? count / (16 / esize) + count % (16 / esize) : count;
    grid.x = rc_full_grid(dt, op);
    if ((work + COLL_CUDA_RC_THREADS - 1) / COLL_CUDA_RC_THREADS < grid.x)
        grid.x = (unsigned)((work + COLL_CUDA_RC_THREADS - 1) / COLL_CUDA_RC_THREADS);

    ret = cuda.rt.LaunchKernel(rc.kernel[dt][op], grid, block, params, 0, stream);
    if (ret != CUDA_SUCCESS) {
        cuda.rt.GetLastError();
        cuda_error_text(ret, err, sizeof(err));
        return coll__error(comm, COLL_CUDA_ERROR,
                           "launching %s (%zu %s elements, %d inputs, grid %u x %u) failed: %s",
                           rc_names[dt][op], count, coll__dtype_name(dt), nsrcs, grid.x, block.x,
                           err);
    }
    return COLL_SUCCESS;
}
