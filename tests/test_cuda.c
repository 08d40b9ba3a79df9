/*
 * test_cuda.c - the reduce-copy kernels on a GPU against the CPU reference, and pointer
 * kinds. Without a usable device (or in a build without nvcc) it prints
 * "1..0 # SKIP no CUDA device" and exits 0.
 *
 * Results must equal coll__cuda_ref_reduce_copy bit for bit (both use elem.h; the only
 * freedom is which NaN fp32/fp64 arithmetic returns). Outputs sit between poisoned guard
 * bytes that must survive; inputs are random bits (NaN, Inf and subnormals included) so
 * every code of the narrow formats is exercised.
 *
 * CUDA must not be initialised before fork(): the parent only forks a probe, every case
 * (harness.h forks one process per case) initialises CUDA on its own.
 */
#include "cuda/cuda.h"

#include "harness.h"

#include <math.h>
#include <stdbool.h>

static const struct coll_cudart *rt;

#define CK(call)                                                                                   \
    do {                                                                                           \
        int ck_rc_ = (call);                                                                       \
        ASSERT_MSG(ck_rc_ == 0, "%s: %s", #call, rt->GetErrorString(ck_rc_));                      \
    } while (0)

static void setup(void)
{
    const char *why;

    ASSERT_MSG(coll__cuda_state(&why) == COLL_CUDA_READY, "%s", why);
    rt = coll__cudart();
    ASSERT(rt != NULL);
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static bool float_nan(coll_dtype_t dt, const void *p)
{
    if (dt == COLL_FLOAT32) {
        float f;
        memcpy(&f, p, sizeof(f));
        return isnan(f);
    }
    if (dt == COLL_FLOAT64) {
        double d;
        memcpy(&d, p, sizeof(d));
        return isnan(d);
    }
    return false; /* narrow formats: canonical NaN, compared as bits */
}

#define GUARD 256 /* bytes of poison before and after each output */
#define POISON 0xa5

/*
 * One launch: k inputs of count elements at element offsets soff[s] (0 keeps 16-byte
 * alignment), ndsts outputs at element offset doff, optionally in place (dst 0 = src 0).
 * Compared with the reference on the same inputs.
 */
struct rc_case {
    coll_dtype_t dt;
    coll_op_t op;
    int k, ndsts;
    size_t count;
    size_t soff, doff; /* element offsets: misalign one input and the outputs */
    bool in_place;
    void *stream;
    uint32_t divisor; /* AVG's; 1 for the other ops */
};

static void run_case(const struct rc_case *c)
{
    uint32_t dv = c->divisor;
    size_t es = coll__dtype_size(c->dt), bytes = c->count * es;
    size_t sbytes = bytes + 16 + GUARD, dbytes = bytes + 2 * GUARD + 16;
    uint8_t *hsrc[COLL_CUDA_MAX_SRCS], *hdst = malloc(dbytes), *want = malloc(bytes + 1);
    uint8_t *dsrc[COLL_CUDA_MAX_SRCS], *ddst[COLL_CUDA_MAX_DSTS];
    const void *sp[COLL_CUDA_MAX_SRCS], *hsp[COLL_CUDA_MAX_SRCS];
    void *dp[COLL_CUDA_MAX_DSTS], *wp[1] = {want};

    for (int s = 0; s < c->k; s++) {
        size_t off = s == c->k - 1 ? c->soff * es : 0; /* misalign the last input */
        hsrc[s] = malloc(sbytes);
        for (size_t b = 0; b < sbytes; b++)
            hsrc[s][b] = (uint8_t)rnd();
        CK(rt->Malloc((void **)&dsrc[s], sbytes));
        CK(rt->Memcpy(dsrc[s], hsrc[s], sbytes, COLL_CUDA_MEMCPY_DEFAULT));
        sp[s] = dsrc[s] + off;
        hsp[s] = hsrc[s] + off;
    }
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, wp, 1, hsp, c->k, c->count, c->dt, c->op, dv),
              COLL_SUCCESS);
    for (int d = 0; d < c->ndsts; d++) {
        CK(rt->Malloc((void **)&ddst[d], dbytes));
        CK(rt->Memset(ddst[d], POISON, dbytes));
        dp[d] = ddst[d] + GUARD + c->doff * es;
    }
    if (c->in_place) {
        /* dst 0 is input 0 itself: poison around it lives in the input's own bytes */
        dp[0] = (void *)sp[0];
    }
    ASSERT_EQ(
        coll__cuda_reduce_copy(NULL, dp, c->ndsts, sp, c->k, c->count, c->dt, c->op, dv, c->stream),
        COLL_SUCCESS);
    CK(rt->StreamSynchronize(c->stream));

    for (int d = 0; d < c->ndsts; d++) {
        bool ip = c->in_place && d == 0;
        const uint8_t *got;

        if (ip) {
            CK(rt->Memcpy(hdst, dsrc[0], sbytes, COLL_CUDA_MEMCPY_DEFAULT));
            got = hdst;
            /* beyond count, input 0 is unchanged */
            ASSERT(memcmp(hdst + bytes, hsrc[0] + bytes, sbytes - bytes) == 0);
        } else {
            CK(rt->Memcpy(hdst, ddst[d], dbytes, COLL_CUDA_MEMCPY_DEFAULT));
            got = hdst + GUARD + c->doff * es;
            for (size_t b = 0; b < dbytes; b++)
                if (hdst + b < got || hdst + b >= got + bytes)
                    ASSERT_MSG(hdst[b] == POISON,
                               "%s %s k=%d: byte %zd outside the output "
                               "written",
                               coll__dtype_name(c->dt), coll__op_name(c->op), c->k,
                               (ssize_t)(hdst + b - got));
        }
        for (size_t i = 0; i < c->count; i++) {
            const uint8_t *g = got + i * es, *w = want + i * es;
            ASSERT_MSG(memcmp(g, w, es) == 0 || (float_nan(c->dt, g) && float_nan(c->dt, w)),
                       "%s %s/%u k=%d ndsts=%d count=%zu soff=%zu doff=%zu%s: element %zu "
                       "differs from the reference",
                       coll__dtype_name(c->dt), coll__op_name(c->op), dv, c->k, c->ndsts, c->count,
                       c->soff, c->doff, c->in_place ? " in place" : "", i);
        }
    }
    for (int d = 0; d < c->ndsts; d++)
        CK(rt->Free(ddst[d]));
    for (int s = 0; s < c->k; s++) {
        CK(rt->Free(dsrc[s]));
        free(hsrc[s]);
    }
    free(hdst);
    free(want);
}

static const coll_dtype_t dtypes[] = {
    COLL_INT8,    COLL_UINT8,   COLL_INT32,   COLL_UINT32,   COLL_INT64,      COLL_UINT64,
    COLL_FLOAT16, COLL_FLOAT32, COLL_FLOAT64, COLL_BFLOAT16, COLL_FLOAT8E4M3, COLL_FLOAT8E5M2,
};

/* Every dtype x op, k = 1..8, one and two outputs, aligned (vector path plus a tail); AVG
 * divides by k, as an all-reduce of k ranks does. */
TEST(every_dtype_op_k)
{
    setup();
    for (size_t t = 0; t < COLL_ARRAY_SIZE(dtypes); t++)
        for (int op = 0; op < COLL_NUM_OPS; op++)
            for (int k = 1; k <= COLL_CUDA_MAX_SRCS; k++) {
                struct rc_case c = {.dt = dtypes[t],
                                    .op = op,
                                    .k = k,
                                    .ndsts = 1 + k % 2,
                                    .count = 1000 + 7,
                                    .divisor = op == COLL_AVG ? (uint32_t)k : 1};
                run_case(&c);
            }
}

/* AVG's division on the device (fused into the reduce-copy): divisors 1, 2, 3 and 7, odd
 * lengths around the vector width, aligned and misaligned (element-wise path), in place;
 * bit for bit the reference, which test_cuda_ref checks against the host's division. */
TEST(avg_divisors)
{
    static const uint32_t ns[] = {1, 2, 3, 7};
    static const size_t counts[] = {1, 15, 17, 1001};
    static const int ks[] = {1, 2, 3, 8};
    setup();
    for (size_t t = 0; t < COLL_ARRAY_SIZE(dtypes); t++)
        for (size_t j = 0; j < COLL_ARRAY_SIZE(ns); j++)
            for (size_t n = 0; n < COLL_ARRAY_SIZE(counts); n++) {
                int k = ks[(j + n) % COLL_ARRAY_SIZE(ks)];
                struct rc_case c = {.dt = dtypes[t],
                                    .op = COLL_AVG,
                                    .k = k,
                                    .ndsts = 2,
                                    .count = counts[n],
                                    .soff = n % 3,
                                    .doff = (n * 5) % 3,
                                    .divisor = ns[j]};
                run_case(&c);
                c.in_place = true; /* into input 0, from its start (soff moves the last) */
                c.ndsts = 1;
                c.soff = 0;
                run_case(&c);
            }
}

/* Lengths around the vector width (16 / element size) and misaligned pointers, which take
 * the element-wise path. */
TEST(odd_lengths_and_misaligned)
{
    static const size_t counts[] = {0, 1, 2, 3, 15, 16, 17, 31, 33, 255, 4097};
    setup();
    for (size_t t = 0; t < COLL_ARRAY_SIZE(dtypes); t++)
        for (size_t n = 0; n < COLL_ARRAY_SIZE(counts); n++)
            for (size_t off = 0; off < 3; off++) {
                struct rc_case c = {dtypes[t], COLL_SUM,      3,     2,    counts[n],
                                    off,       (off * 5) % 3, false, NULL, 1};
                run_case(&c);
            }
}

/* Many waves of the grid-stride loops: more elements than one full grid covers. */
TEST(large_counts)
{
    static const coll_dtype_t big[] = {COLL_FLOAT32, COLL_FLOAT16, COLL_UINT8, COLL_FLOAT64};
    setup();
    for (size_t t = 0; t < COLL_ARRAY_SIZE(big); t++) {
        struct rc_case c = {big[t], COLL_SUM, 8, 2, (4u << 20) + 3, 0, 0, false, NULL, 1};
        run_case(&c);
        c.soff = 1; /* and the element-wise path over the same size */
        c.k = 2;
        run_case(&c);
    }
}

TEST(in_place)
{
    setup();
    for (size_t t = 0; t < COLL_ARRAY_SIZE(dtypes); t++)
        for (int k = 1; k <= COLL_CUDA_MAX_SRCS; k += 3) {
            struct rc_case c = {dtypes[t], COLL_SUM, k, 2, 3001, 0, 0, true, NULL, 1};
            run_case(&c);
        }
}

/* On a non-blocking stream of the caller's: the launch is queued there. */
TEST(caller_stream)
{
    void *stream = NULL;

    setup();
    CK(rt->StreamCreateWithFlags(&stream, 1 /* cudaStreamNonBlocking */));
    for (size_t t = 0; t < COLL_ARRAY_SIZE(dtypes); t++) {
        struct rc_case c = {dtypes[t], COLL_MAX, 4, 1, 100003, 0, 0, false, stream, 1};
        run_case(&c);
    }
    CK(rt->StreamDestroy(stream));
}

/* Managed memory works as input and output (the GPU reaches it). */
TEST(managed_buffers)
{
    enum { N = 10007 };
    float *a, *b, *out, want[N];
    const void *sp[2], *hsp[2];
    void *dp[1], *wp[1] = {want};

    setup();
    CK(rt->MallocManaged((void **)&a, N * sizeof(float), 1 /* cudaMemAttachGlobal */));
    CK(rt->MallocManaged((void **)&b, N * sizeof(float), 1));
    CK(rt->MallocManaged((void **)&out, N * sizeof(float), 1));
    for (int i = 0; i < N; i++) {
        a[i] = (float)i * 0.5f;
        b[i] = (float)(N - i);
    }
    sp[0] = hsp[0] = a;
    sp[1] = hsp[1] = b;
    dp[0] = out;
    ASSERT_EQ(coll__cuda_ref_reduce_copy(NULL, wp, 1, hsp, 2, N, COLL_FLOAT32, COLL_SUM, 1),
              COLL_SUCCESS);
    ASSERT_EQ(coll__cuda_reduce_copy(NULL, dp, 1, sp, 2, N, COLL_FLOAT32, COLL_SUM, 1, NULL),
              COLL_SUCCESS);
    CK(rt->StreamSynchronize(NULL));
    ASSERT(memcmp(out, want, sizeof(want)) == 0);
    CK(rt->Free(a));
    CK(rt->Free(b));
    CK(rt->Free(out));
}

TEST(pointer_kinds)
{
    enum coll_mem_kind kind;
    void *dev = NULL, *managed = NULL, *pinned = NULL, *plain = malloc(4096);
    int device = -2, cur = -1;

    setup();
    CK(rt->GetDevice(&cur));
    CK(rt->Malloc(&dev, 4096));
    CK(rt->MallocManaged(&managed, 4096, 1));
    CK(rt->MallocHost(&pinned, 4096));

    ASSERT_EQ(coll__cuda_mem_kind(NULL, dev, &kind, &device), COLL_SUCCESS);
    ASSERT_EQ(kind, COLL_MEM_DEVICE);
    ASSERT_EQ(device, cur);
    ASSERT_EQ(coll__cuda_mem_kind(NULL, (char *)dev + 100, &kind, NULL), COLL_SUCCESS);
    ASSERT_EQ(kind, COLL_MEM_DEVICE); /* inside an allocation, not only its start */
    ASSERT_EQ(coll__cuda_mem_kind(NULL, managed, &kind, NULL), COLL_SUCCESS);
    ASSERT_EQ(kind, COLL_MEM_MANAGED);
    ASSERT_EQ(coll__cuda_mem_kind(NULL, pinned, &kind, NULL), COLL_SUCCESS);
    ASSERT_EQ(kind, COLL_MEM_HOST);
    ASSERT_EQ(coll__cuda_mem_kind(NULL, plain, &kind, &device), COLL_SUCCESS);
    ASSERT_EQ(kind, COLL_MEM_UNREGISTERED);
    ASSERT_EQ(device, -1);
    CK(rt->HostRegister(plain, 4096, 0));
    ASSERT_EQ(coll__cuda_mem_kind(NULL, plain, &kind, NULL), COLL_SUCCESS);
    ASSERT_EQ(kind, COLL_MEM_HOST);
    CK(rt->HostUnregister(plain));
    ASSERT_EQ(coll__cuda_mem_kind(NULL, plain, &kind, NULL), COLL_SUCCESS);
    ASSERT_EQ(kind, COLL_MEM_UNREGISTERED);
    /* the stack is plain host memory too; no CUDA error is left behind */
    ASSERT_EQ(coll__cuda_mem_kind(NULL, &kind, &kind, NULL), COLL_SUCCESS);
    ASSERT_EQ(kind, COLL_MEM_UNREGISTERED);
    CK(rt->GetLastError());

    CK(rt->Free(dev));
    CK(rt->Free(managed));
    CK(rt->FreeHost(pinned));
    free(plain);
}

/* Probe in a child: CUDA initialised in this process would not survive the harness's
 * fork. The child exits 0 when a device and the kernels are there, else prints why. */
static bool device_usable(char *why, size_t size)
{
    int fds[2], status = 0;
    ssize_t n;
    pid_t pid;

    if (pipe(fds) < 0)
        return false;
    pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        const char *w;
        bool ok = coll__cuda_state(&w) == COLL_CUDA_READY;
        if (ok && !coll__cuda_have_kernels()) {
            ok = false;
            w = "this build has no kernels (nvcc was not found)";
        }
        if (write(fds[1], w, strlen(w)) < 0)
            _exit(2);
        _exit(ok ? 0 : 1);
    }
    close(fds[1]);
    n = read(fds[0], why, size - 1);
    why[n > 0 ? n : 0] = '\0';
    close(fds[0]);
    while (waitpid(pid, &status, 0) < 0)
        ;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv)
{
    char why[512];

    if (!device_usable(why, sizeof(why))) {
        printf("1..0 # SKIP no CUDA device\n# %s\n", why);
        return 0;
    }
    printf("# %s\n", why);
    return harness_main(argc, argv);
}
