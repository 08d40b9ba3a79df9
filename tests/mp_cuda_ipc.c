/*
 * mp_cuda_ipc.c - the CUDA IPC path of the stream-ordered collectives (src/path/ipc.c), under
 * collrun, against the CUDA runtime that COLL_CUDA_LIBRARY names (tests/fakecudart in CI):
 *
 *   collrun -n N mp_cuda_ipc colls|staged|forced|kill
 *
 * colls:  (COLL_CUDA_IPC=1) all-reduce, reduce-scatter, all-gather, broadcast and reduce on
 *         device buffers at counts from 1 to many pieces (slots reused), odd counts, in place
 *         and not; all-reduce of every dtype with sum and max; all-reduce, reduce-scatter and
 *         reduce of every dtype with avg; a host sendbuf and recvbuf; each result equal to
 *         the host collective's on the same data (exact: the values keep every sum exact in
 *         every format, so an avg must divide it exactly once, as the host does), and
 *         kernels were launched (the reductions ran on the device), for every avg call.
 * staged: (COLL_CUDA_IPC=0) the same checks through staging, where no kernel runs.
 * forced: rank 0 sets COLL_CUDA_IPC=0, the others 1: a per-comm setting, so every rank
 *         takes rank 0's 0 at creation (src/core/settings.c) and the call runs through
 *         staging on every rank, right, with no asynchronous error.
 * kill:   the last rank exits while a many-piece all-reduce runs: every other rank's stream
 *         is released and the comm reports the failure.
 * Every mode also asserts that the emulator saw no illegal CUDA call (none from a host
 * function, no out-of-bounds copy or kernel argument).
 */
#include "coll.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mp_util.h"
#include "mp_cuda.h"

/* ---- data ------------------------------------------------------------------------------ */

static const size_t esizes[COLL_NUM_DTYPES] = {
    [COLL_INT8] = 1,    [COLL_UINT8] = 1,    [COLL_INT32] = 4,      [COLL_UINT32] = 4,
    [COLL_INT64] = 8,   [COLL_UINT64] = 8,   [COLL_FLOAT16] = 2,    [COLL_FLOAT32] = 4,
    [COLL_FLOAT64] = 8, [COLL_BFLOAT16] = 2, [COLL_FLOAT8E4M3] = 1, [COLL_FLOAT8E5M2] = 1,
};

/* Element i of rank r's input: 0, 1 or 2 in dtype's encoding (so that a sum over 4 ranks,
 * at most 8, is exact in every format, fp8 included); int32 gets larger, distinct values.
 * For avg (spread), v is 1 on every third rank and 0 on the others, floats negative at odd
 * i: a float sum, at most 3 in magnitude over 9 ranks, is exact everywhere, and its quotient
 * by a comm size that is not a power of two has to round. */
static void put(void *buf, coll_dtype_t dt, size_t i, int r, bool spread)
{
    unsigned v = (unsigned)(i * 7 + (size_t)r * 3 + i / 5) % 3;
    bool neg = spread && i % 2;
    uint64_t bits;

    if (spread)
        v = (i + (size_t)r) % 3 == 0;
    switch (dt) {
    case COLL_INT32:
        ((int32_t *)buf)[i] = (int32_t)((r + 1) * (int)(i % 101 + 1)) - (int32_t)(i % 13) * 50;
        return;
    case COLL_FLOAT16:
        bits = (uint64_t[]){0, 0x3c00, 0x4000}[v] | (neg ? 0x8000u : 0);
        break;
    case COLL_BFLOAT16:
        bits = (uint64_t[]){0, 0x3f80, 0x4000}[v] | (neg ? 0x8000u : 0);
        break;
    case COLL_FLOAT32:
        bits = (uint64_t[]){0, 0x3f800000, 0x40000000}[v] | (neg ? 0x80000000u : 0);
        break;
    case COLL_FLOAT64:
        bits = (uint64_t[]){0, 0x3ff0000000000000ull, 0x4000000000000000ull}[v] |
               (neg ? 1ull << 63 : 0);
        break;
    case COLL_FLOAT8E4M3:
        bits = (uint64_t[]){0, 0x38, 0x40}[v] | (neg ? 0x80u : 0);
        break;
    case COLL_FLOAT8E5M2:
        bits = (uint64_t[]){0, 0x3c, 0x40}[v] | (neg ? 0x80u : 0);
        break;
    default:
        bits = (uint64_t)(v * 40 + (unsigned)r) * 0x0101010101010101ull;
        break;
    }
    memcpy((uint8_t *)buf + i * esizes[dt], &bits, esizes[dt]); /* little-endian */
}

static void fill(void *buf, coll_dtype_t dt, size_t n, int r, bool spread)
{
    for (size_t i = 0; i < n; i++)
        put(buf, dt, i, r, spread);
}

static void same(const void *got, const void *want, size_t bytes, size_t esize, const char *what)
{
    const uint8_t *g = got, *w = want;

    for (size_t b = 0; b < bytes; b++)
        if (g[b] != w[b])
            die("%s: element %zu differs from the host collective's (byte %zu: %u, want %u)", what,
                b / esize, b % esize, g[b], w[b]);
}

/* ---- one collective against the host one ---------------------------------------------- */

enum kind { AR, RS, AG, BC, RED };
static const char *const kname[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                    "reduce"};

/* Run kind on device buffers (or host ones with host = true) through the stream and on host
 * buffers through the host call, and compare. The host call runs on the world comm: the
 * comm's stream worker may still be at the stream call's last barrier, and two threads'
 * collectives on one comm would meet in different orders on different ranks. */
static coll_comm_t *world;
static bool want_ipc; /* the mode: avg calls must launch kernels (IPC), or none (staging) */

static void one(coll_comm_t *comm, void *s, enum kind k, coll_dtype_t dt, coll_op_t op,
                size_t count, bool inplace, bool host)
{
    size_t es = esizes[dt], nin = k == RS ? count * (size_t)nranks : count;
    size_t nout = k == AG ? count * (size_t)nranks : count, ibytes = nin * es;
    size_t obytes = nout * es, big = (nin > nout ? nin : nout) * es;
    int root = (nranks > 1 ? 1 : 0), rroot = nranks - 1;
    uint8_t *hin = malloc(big), *hout = malloc(big), *got = malloc(big);
    uint8_t *dbuf = host ? malloc(big) : dev_alloc(big);
    uint8_t *dout = host ? malloc(big) : dev_alloc(big);
    uint8_t *sb, *rb, *hs, *hr;
    char what[128];
    long k0 = kernels();
    int64_t kall;

    snprintf(what, sizeof(what), "%s %zu of dtype %d op %d%s%s", kname[k], count, (int)dt, (int)op,
             inplace ? " in place" : "", host ? " host buffers" : "");
    memset(hout, 0x5a, big);
    fill(k == AG && inplace ? hout + (size_t)rank * count * es : hin, dt, nin, rank,
         op == COLL_AVG);
    if (k == AG && inplace)
        memcpy(hin, hout + (size_t)rank * count * es, ibytes);
    /* device side: sb/rb as the call gets them */
    if (host) {
        memcpy(dbuf, hin, ibytes);
        memset(dout, 0x5a, big);
    } else {
        upload(dbuf, hin, ibytes);
        CU(cu.MemsetAsync(dout, 0x5a, big, s));
        CU(cu.StreamSynchronize(s)); /* before the uploads below, on the legacy stream */
    }
    sb = dbuf;
    rb = dout;
    hs = hin;
    hr = hout;
    if (inplace) {
        if (k == AG) {
            if (host)
                memcpy(dout + (size_t)rank * count * es, hin, ibytes);
            else
                upload(dout + (size_t)rank * count * es, hin, ibytes);
            sb = dout + (size_t)rank * count * es;
            hs = hout + (size_t)rank * count * es;
        } else if (k == RS) {
            rb = dbuf + (size_t)rank * count * es;
            memcpy(hout, hin, ibytes);
            hs = hout;
            hr = hout + (size_t)rank * count * es;
        } else {
            rb = dbuf;
            memcpy(hout, hin, ibytes);
            hs = hr = hout;
        }
    }
    switch (k) {
    case AR:
        CHECK(coll_allreduce_stream(sb, rb, count, dt, op, comm, s));
        CHECK(coll_allreduce(hs, hr, count, dt, op, world));
        break;
    case RS:
        CHECK(coll_reduce_scatter_stream(sb, rb, count, dt, op, comm, s));
        CHECK(coll_reduce_scatter(hs, hr, count, dt, op, world));
        break;
    case AG:
        CHECK(coll_allgather_stream(sb, rb, count, dt, comm, s));
        CHECK(coll_allgather(hs, hr, count, dt, world));
        break;
    case BC:
        CHECK(coll_broadcast_stream(sb, rb, count, dt, root, comm, s));
        CHECK(coll_broadcast(hs, hr, count, dt, root, world));
        break;
    case RED:
        CHECK(coll_reduce_stream(sb, rb, count, dt, op, rroot, comm, s));
        CHECK(coll_reduce(hs, hr, count, dt, op, rroot, world));
        break;
    }
    CU(cu.StreamSynchronize(s));
    /* Whether avg went through IPC, over all ranks: a rank whose slices are all empty
     * launches nothing, so one rank's count does not say. */
    if (op == COLL_AVG && k0 >= 0) {
        kall = (int64_t)(kernels() - k0);
        CHECK(coll_allreduce(&kall, &kall, 1, COLL_INT64, COLL_SUM, world));
        if (want_ipc && kall == 0)
            die("%s: no kernel ran: avg did not take the CUDA IPC path", what);
        if (!want_ipc && kall != 0)
            die("%s: %lld kernels ran with COLL_CUDA_IPC=0", what, (long long)kall);
    }
    if (k != RED || rank == rroot) {
        size_t n = k == AG ? obytes : count * es;
        if (host)
            memcpy(got, rb, n);
        else
            download(got, rb, n);
        same(got, hr, n, es, what);
    }
    if (host) {
        free(dbuf);
        free(dout);
    } else {
        CU(cu.Free(dbuf));
        CU(cu.Free(dout));
    }
    free(hin);
    free(hout);
    free(got);
}

static coll_comm_t *new_comm(void)
{
    coll_unique_id_t id;
    coll_comm_t *comm;

    if (rank == 0)
        CHECK(coll_get_unique_id(&id));
    CHECK(coll_broadcast(&id, &id, sizeof(id), COLL_UINT8, 0, world));
    CHECK(coll_comm_init(&comm, nranks, &id, rank));
    return comm;
}

/* With a 64 KiB COLL_CUDA_STAGING_BYTES a slot is 16 KiB: 2048 int32 elements of all-reduce
 * per piece, so 20011 of them are 10 pieces through 4 slots. */
static void mode_colls(bool ipc)
{
    static const size_t counts[] = {1, 7, 1000, 20011};
    coll_comm_t *comm = new_comm();
    long k0 = kernels();
    coll_status_t ast;
    void *s;

    want_ipc = ipc;
    CU(cu.StreamCreateWithFlags(&s, 1));
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
        for (int ip = 0; ip < 2; ip++)
            for (int k = AR; k <= RED; k++)
                one(comm, s, (enum kind)k, COLL_INT32, k == RED ? COLL_MAX : COLL_SUM, counts[c],
                    ip, false);
    for (int dt = 0; dt < COLL_NUM_DTYPES; dt++) {
        one(comm, s, AR, (coll_dtype_t)dt, COLL_SUM, 3001, false, false);
        one(comm, s, AR, (coll_dtype_t)dt, COLL_MAX, 3001, true, false);
    }
    /* avg: each reduced slice is divided once by the comm size before it is gathered
     * (reduce: what the root receives); many pieces for int32 */
    for (int dt = 0; dt < COLL_NUM_DTYPES; dt++) {
        one(comm, s, AR, (coll_dtype_t)dt, COLL_AVG, 3001, dt % 2, false);
        one(comm, s, RS, (coll_dtype_t)dt, COLL_AVG, 1000, dt % 2 == 0, false);
        one(comm, s, RED, (coll_dtype_t)dt, COLL_AVG, 3001, dt % 2, false);
    }
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        one(comm, s, AR, COLL_INT32, COLL_AVG, counts[c], c % 2, false);
        one(comm, s, RS, COLL_INT32, COLL_AVG, counts[c], c % 2 == 0, false);
        one(comm, s, RED, COLL_INT32, COLL_AVG, counts[c], c % 2, false);
    }
    /* host memory on one side only: through IPC the worker copies (staging runs such a
     * call as one host collective on one rank and in pieces on the other) */
    if (ipc) {
        one(comm, s, AR, COLL_INT32, COLL_SUM, 9000, false, rank == 0);
        one(comm, s, AG, COLL_INT32, COLL_SUM, 3000, false, rank == 0);
        one(comm, s, AR, COLL_FLOAT16, COLL_AVG, 9000, false, rank == 0);
    }
    /* only the emulator counts kernels; a real runtime (compute-sanitizer runs) says -1 */
    if (ipc && k0 >= 0 && kernels() <= k0)
        die("no kernel ran: the reductions did not take the CUDA IPC path");
    if (!ipc && kernels() != k0)
        die("%ld kernels ran with COLL_CUDA_IPC=0: staging reduces on the host", kernels() - k0);
    CHECK(coll_comm_get_async_error(comm, &ast));
    if (ast != COLL_SUCCESS)
        die("async error %s on a healthy comm", coll_status_string(ast));
    CU(cu.StreamDestroy(s));
    CHECK(coll_comm_destroy(comm));
}

static void mode_forced(void)
{
    size_t n = 100;
    int32_t *d = dev_alloc(n * 4);
    coll_comm_t *comm;
    coll_status_t st, ast;
    void *s;

    setenv("COLL_CUDA_IPC", rank == 0 ? "0" : "1", 1); /* read by the comm's init */
    comm = new_comm();
    CU(cu.StreamCreateWithFlags(&s, 1));
    CU(cu.MemsetAsync(d, 1, n * 4, s));
    st = coll_allreduce_stream(d, d, n, COLL_INT32, COLL_SUM, comm, s);
    if (st != COLL_SUCCESS)
        die("allreduce with COLL_CUDA_IPC=1 and 0 -> %s", coll_status_string(st));
    CU(cu.StreamSynchronize(s));
    CHECK(coll_comm_get_async_error(comm, &ast));
    if (ast != COLL_SUCCESS)
        die("async error %s (%s), want none: every rank takes rank 0's COLL_CUDA_IPC",
            coll_status_string(ast), coll_last_error(comm));
    {
        int32_t h[100];
        CU(cu.Memcpy(h, d, sizeof(h), MEMCPY_DEFAULT));
        for (size_t i = 0; i < n; i++)
            if (h[i] != 0x01010101 * nranks)
                die("forced: element %zu is %d, want %d", i, h[i], 0x01010101 * nranks);
    }
    CU(cu.StreamDestroy(s));
    CHECK(coll_comm_destroy(comm));
    CU(cu.Free(d));
}

static void mode_kill(void)
{
    coll_comm_t *comm = new_comm();
    size_t n = 200000; /* 98 pieces */
    int32_t *d = dev_alloc(n * 4);
    coll_status_t st, ast;
    void *s;

    CU(cu.StreamCreateWithFlags(&s, 1));
    one(comm, s, AR, COLL_INT32, COLL_SUM, 5000, false, false); /* IPC is up */
    CHECK(coll_barrier(world));
    st = coll_allreduce_stream(d, d, n, COLL_INT32, COLL_SUM, comm, s);
    if (rank == nranks - 1) {
        usleep(2000);
        _exit(0); /* mid-op, no goodbye */
    }
    if (st != COLL_SUCCESS && st != COLL_REMOTE_ERROR && st != COLL_TIMEOUT)
        die("allreduce with a dying peer -> %s (%s)", coll_status_string(st),
            coll_last_error(NULL));
    CU(cu.StreamSynchronize(s)); /* released, whatever happened */
    CHECK(coll_comm_get_async_error(comm, &ast));
    if (ast != COLL_REMOTE_ERROR && ast != COLL_TIMEOUT)
        die("async error after a peer died: %s, want a remote error or a timeout",
            coll_status_string(ast));
    CHECK(coll_comm_destroy(comm));
    CU(cu.Free(d));
    CU(cu.StreamDestroy(s));
    no_violations();
    printf("rank %d: released: %s\n", rank, coll_status_string(ast));
    fflush(stdout);
    _exit(0); /* the world comm lost a rank too */
}

/* Ranks whose stream-ordered calls through IPC differ (a count that keeps the number of
 * pieces; a collective) fail on every rank with COLL_REMOTE_ERROR, saying so, rather than
 * pair up their per-piece barriers and return wrong data. */
static void mode_mismatch(void)
{
    for (int c = 0; c < 2; c++) {
        coll_comm_t *comm = new_comm();
        size_t n = 5000 + (c == 0 && rank == 0); /* 3 pieces of 2048 either way */
        int32_t *d = dev_alloc(2 * n * 4 * (size_t)nranks);
        coll_status_t st, ast;
        const char *msg;
        void *s;

        CU(cu.StreamCreateWithFlags(&s, 1));
        one(comm, s, AR, COLL_INT32, COLL_SUM, 5000, false, false); /* IPC is up */
        CHECK(coll_barrier(world));
        if (c == 1 && rank == 0)
            st = coll_allgather_stream(d, d + n * (size_t)nranks, n, COLL_INT32, comm, s);
        else
            st = coll_allreduce_stream(d, d, n, COLL_INT32, COLL_SUM, comm, s);
        if (st != COLL_SUCCESS && st != COLL_REMOTE_ERROR)
            die("mismatch %d: the call -> %s (%s)", c, coll_status_string(st),
                coll_last_error(NULL));
        CU(cu.StreamSynchronize(s)); /* released, whatever happened */
        CHECK(coll_comm_get_async_error(comm, &ast));
        msg = coll_last_error(comm);
        if (ast != COLL_REMOTE_ERROR || !strstr(msg, "different stream-ordered collectives"))
            die("mismatch %d: async error %s (%s), want a remote error naming the difference",
                c, coll_status_string(ast), msg);
        printf("rank %d: mismatch %d: %s\n", rank, c, msg);
        CU(cu.StreamDestroy(s));
        coll_comm_destroy(comm); /* a failed comm's destroy says so; it still frees */
        CU(cu.Free(d));
        CHECK(coll_barrier(world));
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!cuda_load()) {
        printf("1..0 # SKIP no CUDA runtime to load (COLL_CUDA_LIBRARY='%s')\n",
               getenv("COLL_CUDA_LIBRARY") ? getenv("COLL_CUDA_LIBRARY") : "");
        return 0;
    }
    CHECK(coll_comm_init_env(&world));
    CHECK(coll_comm_rank(world, &rank));
    CHECK(coll_comm_size(world, &nranks));
    if (strcmp(mode, "colls") == 0)
        mode_colls(true);
    else if (strcmp(mode, "staged") == 0)
        mode_colls(false);
    else if (strcmp(mode, "forced") == 0)
        mode_forced();
    else if (strcmp(mode, "kill") == 0)
        mode_kill();
    else if (strcmp(mode, "mismatch") == 0)
        mode_mismatch();
    else
        die("unknown mode '%s' (colls, staged, forced, kill, mismatch)", mode);
    no_violations();
    CHECK(coll_barrier(world));
    CHECK(coll_comm_destroy(world));
    printf("rank %d: %s ok\n", rank, mode);
    return 0;
}
