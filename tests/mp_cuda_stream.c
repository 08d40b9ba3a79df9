/*
 * mp_cuda_stream.c - stream-ordered collectives (coll_*_stream) on CUDA device buffers, under
 * collrun, against the CUDA runtime that COLL_CUDA_LIBRARY names (tests/fakecudart in CI,
 * where device memory faults when host code touches it):
 *
 *   collrun -n N mp_cuda_stream all|badargs|nocuda|kill
 *
 * all:     every collective on device buffers on a non-default stream, checked against host
 *          references, at sizes below one piece and above COLL_CUDA_STAGING_BYTES (many
 *          pieces, slots reused), in place and not; send/recv rings, a group over two comms,
 *          a send to oneself; ordering (work queued before the call is seen, results after
 *          cudaStreamSynchronize; two streams on one comm); host buffers with a stream;
 *          a comm destroyed with a call still queued runs it first.
 * badargs: device buffer and stream of another device (COLL_FAKECUDA_DEVICES=2), a freed
 *          buffer, a group too large for the staging memory, a group mixing host calls;
 *          the comm stays usable after each. Then a collective that only rank 0 calls: its
 *          stream is released by coll_comm_abort, and on another comm by the timeout.
 * nocuda:  COLL_CUDA_DISABLE=1: host buffers with a NULL stream run; a stream is refused.
 * kill:    the last rank exits; every other rank's stream is released and the comm reports
 *          the failure.
 *
 * Every rank checks its own results and exits non-zero naming the first wrong value. Without
 * a CUDA runtime to load (COLL_CUDA_LIBRARY unset or unloadable) the modes that need one print
 * a SKIP line and succeed.
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

static bool contains(const char *hay, const char *needle)
{
    return !needle || strstr(hay, needle);
}

/* call must fail with want, and the message must mention word (NULL: any message) */
#define EXPECT(call, want, word)                                                             \
    do {                                                                                     \
        coll_status_t st_ = (call);                                                          \
        const char *m_ = coll_last_error(NULL);                                              \
        if (st_ != (want))                                                                   \
            die("%s:%d: %s -> %s (%s), want %s", __FILE__, __LINE__, #call,                  \
                coll_status_string(st_), m_, coll_status_string(want));                      \
        if (!contains(m_, (word)))                                                           \
            die("%s:%d: %s: message '%s' does not mention '%s'", __FILE__, __LINE__, #call,  \
                m_, (const char *)(word));                                                   \
    } while (0)

/* ---- helpers --------------------------------------------------------------------------- */

static coll_comm_t *new_comm(coll_comm_t *world)
{
    coll_unique_id_t id;
    coll_comm_t *comm;

    if (rank == 0)
        CHECK(coll_get_unique_id(&id));
    CHECK(coll_broadcast(&id, &id, sizeof(id), COLL_UINT8, 0, world));
    CHECK(coll_comm_init(&comm, nranks, &id, rank));
    return comm;
}

static int32_t val(int r, size_t i)
{
    return (int32_t)((r + 1) * (int)(i % 101 + 1));
}

static void want_eq(const int32_t *got, size_t n, int32_t (*f)(size_t, const void *),
                    const void *ctx, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != f(i, ctx))
            die("%s: element %zu is %d, want %d", what, i, got[i], f(i, ctx));
}

struct ref {
    int root, peer;
    size_t count;
};

static int32_t ref_sum(size_t i, const void *c)
{
    (void)c;
    return (int32_t)(i % 101 + 1) * nranks * (nranks + 1) / 2;
}
static int32_t ref_max(size_t i, const void *c)
{
    (void)c;
    return (int32_t)(i % 101 + 1) * nranks;
}
static int32_t ref_root(size_t i, const void *c)
{
    return val(((const struct ref *)c)->root, i);
}
static int32_t ref_peer(size_t i, const void *c)
{
    return val(((const struct ref *)c)->peer, i);
}
static int32_t ref_gather(size_t i, const void *c)
{
    size_t n = ((const struct ref *)c)->count;
    return val((int)(i / n), i % n);
}
/* reduce-scatter: rank r's block of the sum of every rank's full vector */
static int32_t ref_rs(size_t i, const void *c)
{
    return ref_sum((size_t)rank * ((const struct ref *)c)->count + i, NULL);
}
/* all-to-all: block j of rank r's input holds a2a(r, j, i) */
static int32_t a2a(int from, int to, size_t i)
{
    return from * 1000000 + to * 1000 + (int32_t)(i % 997);
}
static int32_t ref_a2a(size_t i, const void *c)
{
    size_t n = ((const struct ref *)c)->count;
    return a2a((int)(i / n), rank, i % n);
}

/* ---- all ------------------------------------------------------------------------------- */

/* Every collective at one count, on device buffers, out of place and in place. */
static void colls_at(coll_comm_t *comm, void *s, size_t count)
{
    size_t n = count, big = count * (size_t)nranks, bytes = n * 4, bbytes = big * 4;
    int32_t *h = malloc(bbytes), *g = malloc(bbytes);
    int32_t *dsend = dev_alloc(bbytes), *drecv = dev_alloc(bbytes);
    struct ref rf = {.root = 1 % nranks, .count = n};
    char what[96];

    for (int inplace = 0; inplace < 2; inplace++) {
        int32_t *out = inplace ? dsend : drecv;
        const char *ip = inplace ? "in place" : "";

        /* all-reduce, sum */
        for (size_t i = 0; i < n; i++)
            h[i] = val(rank, i);
        upload(dsend, h, bytes);
        CU(cu.MemsetAsync(drecv, 0xff, bbytes, s));
        CHECK(coll_allreduce_stream(dsend, out, n, COLL_INT32, COLL_SUM, comm, s));
        CU(cu.StreamSynchronize(s));
        download(g, out, bytes);
        snprintf(what, sizeof(what), "allreduce %zu %s", n, ip);
        want_eq(g, n, ref_sum, NULL, what);

        /* broadcast from rank 1 */
        upload(dsend, h, bytes);
        CU(cu.MemsetAsync(drecv, 0xff, bbytes, s));
        CHECK(coll_broadcast_stream(dsend, out, n, COLL_INT32, rf.root, comm, s));
        CU(cu.StreamSynchronize(s));
        download(g, rank == rf.root ? out : (inplace ? dsend : drecv), bytes);
        snprintf(what, sizeof(what), "broadcast %zu %s", n, ip);
        want_eq(g, n, ref_root, &rf, what);

        /* reduce to the last rank, max */
        upload(dsend, h, bytes);
        CU(cu.MemsetAsync(drecv, 0xff, bbytes, s));
        CHECK(coll_reduce_stream(dsend, out, n, COLL_INT32, COLL_MAX, nranks - 1, comm, s));
        CU(cu.StreamSynchronize(s));
        if (rank == nranks - 1) {
            download(g, out, bytes);
            snprintf(what, sizeof(what), "reduce %zu %s", n, ip);
            want_eq(g, n, ref_max, NULL, what);
        }

        /* all-gather: in place is recvbuf + rank * count */
        upload(inplace ? drecv + (size_t)rank * n : dsend, h, bytes);
        if (!inplace)
            CU(cu.MemsetAsync(drecv, 0xff, bbytes, s));
        CHECK(coll_allgather_stream(inplace ? drecv + (size_t)rank * n : dsend, drecv, n,
                                    COLL_INT32, comm, s));
        CU(cu.StreamSynchronize(s));
        download(g, drecv, bbytes);
        snprintf(what, sizeof(what), "allgather %zu %s", n, ip);
        want_eq(g, big, ref_gather, &rf, what);

        /* reduce-scatter: in place is sendbuf + rank * count */
        for (size_t i = 0; i < big; i++)
            h[i] = val(rank, i);
        upload(dsend, h, bbytes);
        CU(cu.MemsetAsync(drecv, 0xff, bbytes, s));
        CHECK(coll_reduce_scatter_stream(dsend, inplace ? dsend + (size_t)rank * n : drecv, n,
                                         COLL_INT32, COLL_SUM, comm, s));
        CU(cu.StreamSynchronize(s));
        download(g, inplace ? dsend + (size_t)rank * n : drecv, bytes);
        snprintf(what, sizeof(what), "reduce_scatter %zu %s", n, ip);
        want_eq(g, n, ref_rs, &rf, what);

        /* all-to-all */
        for (int j = 0; j < nranks; j++)
            for (size_t i = 0; i < n; i++)
                h[(size_t)j * n + i] = a2a(rank, j, i);
        upload(dsend, h, bbytes);
        CU(cu.MemsetAsync(drecv, 0xff, bbytes, s));
        CHECK(coll_alltoall_stream(dsend, out, n, COLL_INT32, comm, s));
        CU(cu.StreamSynchronize(s));
        download(g, out, bbytes);
        snprintf(what, sizeof(what), "alltoall %zu %s", n, ip);
        want_eq(g, big, ref_a2a, &rf, what);
    }
    CU(cu.Free(dsend));
    CU(cu.Free(drecv));
    free(h);
    free(g);
}

/* Send/recv ring in a group, a group over two comms on two streams, a send to oneself. */
static void groups(coll_comm_t *comm, coll_comm_t *comm2, void *s, void *s2, size_t n)
{
    size_t bytes = n * 4;
    int32_t *h = malloc(bytes * (size_t)nranks), *g = malloc(bytes * (size_t)nranks);
    int32_t *d1 = dev_alloc(bytes), *d2 = dev_alloc(bytes), *d3 = dev_alloc(bytes * nranks);
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    struct ref rf = {.peer = prev, .count = n};

    for (size_t i = 0; i < n; i++)
        h[i] = val(rank, i);
    upload(d1, h, bytes);
    CU(cu.MemsetAsync(d2, 0xff, bytes, s));
    /* receive first: inside a group the order does not matter */
    CHECK(coll_group_start());
    CHECK(coll_recv_stream(d2, n, COLL_INT32, prev, comm, s));
    CHECK(coll_send_stream(d1, n, COLL_INT32, next, comm, s));
    CHECK(coll_group_end());
    CU(cu.StreamSynchronize(s));
    download(g, d2, bytes);
    want_eq(g, n, ref_peer, &rf, "send/recv ring");

    /* two comms in one group, each call on its own stream */
    upload(d1, h, bytes);
    CU(cu.MemsetAsync(d2, 0xff, bytes, s));
    CU(cu.MemsetAsync(d3, 0xff, bytes * nranks, s2));
    CHECK(coll_group_start());
    CHECK(coll_allreduce_stream(d1, d2, n, COLL_INT32, COLL_SUM, comm, s));
    CHECK(coll_allgather_stream(d1, d3, n, COLL_INT32, comm2, s2));
    CHECK(coll_group_end());
    CU(cu.StreamSynchronize(s));
    CU(cu.StreamSynchronize(s2));
    download(g, d2, bytes);
    want_eq(g, n, ref_sum, NULL, "grouped allreduce on comm 1");
    download(g, d3, bytes * nranks);
    want_eq(g, n * (size_t)nranks, ref_gather, &rf, "grouped allgather on comm 2");

    /* a send to oneself pairs with the receive from oneself */
    rf.peer = rank;
    CU(cu.MemsetAsync(d2, 0xff, bytes, s));
    CHECK(coll_group_start());
    CHECK(coll_send_stream(d1, n, COLL_INT32, rank, comm, s));
    CHECK(coll_recv_stream(d2, n, COLL_INT32, rank, comm, s));
    CHECK(coll_group_end());
    CU(cu.StreamSynchronize(s));
    download(g, d2, bytes);
    want_eq(g, n, ref_peer, &rf, "send to oneself");

    CU(cu.Free(d1));
    CU(cu.Free(d2));
    CU(cu.Free(d3));
    free(h);
    free(g);
}

static int32_t ref_memset(size_t i, const void *c)
{
    (void)i;
    (void)c;
    return 0x01010101 * (nranks * (nranks + 1) / 2);
}

/* Work queued before the call is seen; two streams on one comm keep its order. */
static void ordering(coll_comm_t *comm, void *s, void *s2, size_t n)
{
    size_t bytes = n * 4;
    int32_t *g = malloc(bytes), *pinned = NULL, *pinned_out = NULL;
    int32_t *d1 = dev_alloc(bytes), *d2 = dev_alloc(bytes);

    /* the memset runs on the stream just before the collective: its bytes must be summed,
     * not the stale ones uploaded first */
    for (size_t i = 0; i < n; i++)
        g[i] = -7;
    upload(d1, g, bytes);
    CU(cu.MemsetAsync(d1, rank + 1, bytes, s));
    CHECK(coll_allreduce_stream(d1, d2, n, COLL_INT32, COLL_SUM, comm, s));
    /* and a later one on the same stream must not overwrite the input before it is read */
    CU(cu.MemsetAsync(d1, 0, bytes, s));
    CU(cu.StreamSynchronize(s));
    download(g, d2, bytes);
    want_eq(g, n, ref_memset, NULL, "allreduce after a memset on its stream");

    /* two ops of one comm on two streams: the second reads what the first wrote */
    CU(cu.MemsetAsync(d1, rank + 1, bytes, s));
    CHECK(coll_allreduce_stream(d1, d2, n, COLL_INT32, COLL_SUM, comm, s));
    CHECK(coll_broadcast_stream(d2, d1, n, COLL_INT32, 0, comm, s2));
    CU(cu.StreamSynchronize(s2));
    CU(cu.StreamSynchronize(s));
    download(g, d1, bytes);
    want_eq(g, n, ref_memset, NULL, "broadcast on a second stream of an allreduce's result");

    /* host (page-locked) buffers with a stream: used in place, still in stream order */
    CU(cu.MallocHost((void **)&pinned, bytes));
    CU(cu.MallocHost((void **)&pinned_out, bytes));
    CU(cu.MemsetAsync(d1, rank + 1, bytes, s));
    CU(cu.MemcpyAsync(pinned, d1, bytes, MEMCPY_DEFAULT, s));
    CHECK(coll_allreduce_stream(pinned, pinned_out, n, COLL_INT32, COLL_SUM, comm, s));
    CU(cu.MemcpyAsync(d2, pinned_out, bytes, MEMCPY_DEFAULT, s));
    CU(cu.StreamSynchronize(s));
    download(g, d2, bytes);
    want_eq(g, n, ref_memset, NULL, "allreduce of page-locked host buffers on a stream");

    /* plain host memory on the default stream */
    for (size_t i = 0; i < n; i++)
        g[i] = val(rank, i);
    CHECK(coll_allreduce_stream(g, g, n, COLL_INT32, COLL_SUM, comm, NULL));
    CU(cu.StreamSynchronize(NULL));
    want_eq(g, n, ref_sum, NULL, "allreduce of host memory on the default stream");

    CU(cu.FreeHost(pinned));
    CU(cu.FreeHost(pinned_out));
    CU(cu.Free(d1));
    CU(cu.Free(d2));
    free(g);
}

/* A comm destroyed right after a call still runs it, as NCCL's destroy does. */
static void destroy_queued(coll_comm_t *world, void *s)
{
    coll_comm_t *comm = new_comm(world);
    size_t n = 20000;
    int32_t *g = malloc(n * 4), *d = dev_alloc(n * 4);

    for (size_t i = 0; i < n; i++)
        g[i] = val(rank, i);
    upload(d, g, n * 4);
    CHECK(coll_allreduce_stream(d, d, n, COLL_INT32, COLL_SUM, comm, s));
    CHECK(coll_comm_destroy(comm));
    CU(cu.StreamSynchronize(s));
    download(g, d, n * 4);
    want_eq(g, n, ref_sum, NULL, "allreduce queued before its comm was destroyed");
    CU(cu.Free(d));
    free(g);
}

static void mode_all(coll_comm_t *world)
{
    static const size_t counts[] = {1, 7, 1000, 50000};
    coll_comm_t *comm = new_comm(world), *comm2 = new_comm(world);
    void *s, *s2;
    coll_status_t ast;

    CU(cu.StreamCreateWithFlags(&s, STREAM_NON_BLOCKING));
    CU(cu.StreamCreateWithFlags(&s2, STREAM_NON_BLOCKING));
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
        colls_at(comm, s, counts[c]);
    groups(comm, comm2, s, s2, 7);
    groups(comm, comm2, s, s2, 40000);
    ordering(comm, s, s2, 30000);
    CHECK(coll_comm_get_async_error(comm, &ast));
    if (ast != COLL_SUCCESS)
        die("async error %s on a healthy comm", coll_status_string(ast));
    destroy_queued(world, s);
    CU(cu.StreamDestroy(s));
    CU(cu.StreamDestroy(s2));
    CHECK(coll_comm_destroy(comm));
    CHECK(coll_comm_destroy(comm2));
}

/* ---- badargs --------------------------------------------------------------------------- */

static void works(coll_comm_t *comm, void *s)
{
    size_t n = 100;
    int32_t *g = malloc(n * 4), *d = dev_alloc(n * 4);

    for (size_t i = 0; i < n; i++)
        g[i] = val(rank, i);
    upload(d, g, n * 4);
    CHECK(coll_allreduce_stream(d, d, n, COLL_INT32, COLL_SUM, comm, s));
    CU(cu.StreamSynchronize(s));
    download(g, d, n * 4);
    want_eq(g, n, ref_sum, NULL, "allreduce after a refused call");
    CU(cu.Free(d));
    free(g);
}

/* Rank 0 queues a collective the others never call; its stream must be released, by
 * coll_comm_abort (abort = 1) or by the comm's timeout (abort = 0), with the failure in
 * coll_comm_get_async_error. */
static void stuck_release(coll_comm_t *world, void *s, int abort)
{
    coll_comm_t *comm;
    size_t n = 20000;
    int32_t *d = dev_alloc(n * 4);
    coll_status_t ast;

    if (!abort)
        setenv("COLL_TIMEOUT_MS", "300", 1); /* read once, by this comm's init */
    comm = new_comm(world);
    unsetenv("COLL_TIMEOUT_MS");
    if (rank == 0) {
        CHECK(coll_allreduce_stream(d, d, n, COLL_INT32, COLL_SUM, comm, s));
        if (abort)
            CHECK(coll_comm_abort(comm));
        CU(cu.StreamSynchronize(s));
        CHECK(coll_comm_get_async_error(comm, &ast));
        if (ast != (abort ? COLL_REMOTE_ERROR : COLL_TIMEOUT))
            die("%s: async error %s (%s)", abort ? "abort" : "timeout", coll_status_string(ast),
                coll_last_error(comm));
    }
    CHECK(coll_barrier(world));
    CHECK(coll_comm_destroy(comm));
    CU(cu.Free(d));
}

static void mode_badargs(coll_comm_t *world)
{
    coll_comm_t *comm = new_comm(world);
    size_t n = 100, piece = 2048; /* int32 elements in a piece of the 64K staging */
    int32_t *d0 = dev_alloc(n * 4), *d1 = NULL, *freed, *big[9];
    void *s, *s1 = NULL;
    coll_status_t ast;
    int ndev = 0;

    CU(cu.StreamCreateWithFlags(&s, STREAM_NON_BLOCKING));
    CU(cu.GetDeviceCount(&ndev));
    /* memory and a stream of device 1; the comm is on device 0. A machine with one GPU
     * has no device 1: those checks need two (the emulator's COLL_FAKECUDA_DEVICES=2). */
    if (ndev >= 2) {
        CU(cu.SetDevice(1));
        d1 = dev_alloc(n * 4);
        CU(cu.StreamCreateWithFlags(&s1, STREAM_NON_BLOCKING));
        CU(cu.SetDevice(0));
        EXPECT(coll_allreduce_stream(d1, d0, n, COLL_INT32, COLL_SUM, comm, s),
               COLL_INVALID_ARGUMENT, "device 1, but the comm uses device 0");
        EXPECT(coll_broadcast_stream(d0, d1, n, COLL_INT32, 0, comm, s), COLL_INVALID_ARGUMENT,
               "recvbuf");
        EXPECT(coll_allreduce_stream(d0, d0, n, COLL_INT32, COLL_SUM, comm, s1),
               COLL_INVALID_ARGUMENT, "device 1, but the comm uses device 0");
        works(comm, s);
    } else if (rank == 0) {
        printf("# %d device(s): the checks with a buffer and a stream of device 1 are left out\n",
               ndev);
    }

    /* a freed device buffer: refused, never touched */
    freed = dev_alloc(n * 4);
    CU(cu.Free(freed));
    {
        coll_status_t st = coll_allreduce_stream(freed, d0, n, COLL_INT32, COLL_SUM, comm, s);
        if (st != COLL_INVALID_ARGUMENT && st != COLL_CUDA_ERROR)
            die("allreduce of a freed buffer -> %s (%s)", coll_status_string(st),
                coll_last_error(NULL));
    }
    works(comm, s);

    /* a group whose pieces need more than the staging memory holds */
    for (int k = 0; k < 9; k++)
        big[k] = dev_alloc(piece * 4);
    CHECK(coll_group_start());
    for (int k = 0; k < 9; k++)
        CHECK(coll_allreduce_stream(big[k], big[k], piece, COLL_INT32, COLL_SUM, comm, s));
    EXPECT(coll_group_end(), COLL_INVALID_ARGUMENT, "COLL_CUDA_STAGING_BYTES");
    works(comm, s);

    /* host calls and stream-ordered calls in one group */
    {
        int32_t x = 1;
        CHECK(coll_group_start());
        CHECK(coll_allreduce(&x, &x, 1, COLL_INT32, COLL_SUM, comm));
        CHECK(coll_allreduce_stream(d0, d0, n, COLL_INT32, COLL_SUM, comm, s));
        EXPECT(coll_group_end(), COLL_INVALID_USAGE, "host calls");
    }
    /* a bad argument inside a group fails the group, and nothing of it runs */
    CHECK(coll_group_start());
    CHECK(coll_allreduce_stream(d0, d0, n, COLL_INT32, COLL_SUM, comm, s));
    EXPECT(coll_broadcast_stream(d0, d0, n, COLL_INT32, nranks, comm, s), COLL_INVALID_ARGUMENT,
           "root");
    EXPECT(coll_group_end(), COLL_INVALID_ARGUMENT, NULL);
    works(comm, s);

    EXPECT(coll_allreduce_stream(d0, d0, n, (coll_dtype_t)99, COLL_SUM, comm, s),
           COLL_INVALID_ARGUMENT, "dtype");
    EXPECT(coll_send_stream(d0, n, COLL_INT32, rank, comm, s), COLL_INVALID_USAGE, "oneself");
    EXPECT(coll_allreduce_stream(NULL, d0, n, COLL_INT32, COLL_SUM, comm, s),
           COLL_INVALID_ARGUMENT, "sendbuf");
    EXPECT(coll_comm_get_async_error(NULL, &ast), COLL_INVALID_ARGUMENT, "comm");

    CHECK(coll_comm_get_async_error(comm, &ast));
    if (ast != COLL_SUCCESS)
        die("async error %s after refused calls only", coll_status_string(ast));
    stuck_release(world, s, 1);
    stuck_release(world, s, 0);
    for (int k = 0; k < 9; k++)
        CU(cu.Free(big[k]));
    CU(cu.Free(d0));
    if (d1) {
        CU(cu.SetDevice(1));
        CU(cu.Free(d1));
        CU(cu.StreamDestroy(s1));
        CU(cu.SetDevice(0));
    }
    CU(cu.StreamDestroy(s));
    CHECK(coll_comm_destroy(comm));
}

/* ---- nocuda ---------------------------------------------------------------------------- */

static void mode_nocuda(coll_comm_t *world)
{
    size_t n = 1000;
    int32_t *g = malloc(n * 4);
    int fake_stream;

    for (size_t i = 0; i < n; i++)
        g[i] = val(rank, i);
    CHECK(coll_allreduce_stream(g, g, n, COLL_INT32, COLL_SUM, world, NULL));
    want_eq(g, n, ref_sum, NULL, "allreduce without CUDA, NULL stream");
    EXPECT(coll_allreduce_stream(g, g, n, COLL_INT32, COLL_SUM, world, &fake_stream),
           COLL_INVALID_USAGE, "COLL_CUDA_DISABLE");
    /* grouped: the host group runs them */
    for (size_t i = 0; i < n; i++)
        g[i] = val(rank, i);
    CHECK(coll_group_start());
    CHECK(coll_allreduce_stream(g, g, n, COLL_INT32, COLL_SUM, world, NULL));
    CHECK(coll_group_end());
    want_eq(g, n, ref_sum, NULL, "grouped allreduce without CUDA");
    free(g);
}

/* ---- kill ------------------------------------------------------------------------------ */

static void mode_kill(coll_comm_t *world)
{
    coll_comm_t *comm = new_comm(world);
    size_t n = 50000;
    int32_t *d = dev_alloc(n * 4);
    coll_status_t st, ast;
    void *s;

    CU(cu.StreamCreateWithFlags(&s, STREAM_NON_BLOCKING));
    works(comm, s);
    CHECK(coll_barrier(world));
    if (rank == nranks - 1)
        _exit(0); /* no goodbye: the others find out from their connections */
    st = coll_allreduce_stream(d, d, n, COLL_INT32, COLL_SUM, comm, s);
    if (st != COLL_SUCCESS && st != COLL_REMOTE_ERROR && st != COLL_TIMEOUT)
        die("allreduce with a dead peer -> %s (%s)", coll_status_string(st),
            coll_last_error(NULL));
    /* the stream is released, whatever happened */
    CU(cu.StreamSynchronize(s));
    CHECK(coll_comm_get_async_error(comm, &ast));
    if (ast != COLL_REMOTE_ERROR && ast != COLL_TIMEOUT)
        die("async error after a peer died: %s, want a remote error or a timeout",
            coll_status_string(ast));
    if (!coll_last_error(comm)[0])
        die("no message for the failure");
    st = coll_allreduce_stream(d, d, n, COLL_INT32, COLL_SUM, comm, s);
    if (st != ast)
        die("a call on the failed comm -> %s, want %s", coll_status_string(st),
            coll_status_string(ast));
    CU(cu.StreamSynchronize(s));
    CHECK(coll_comm_destroy(comm));
    CU(cu.Free(d));
    CU(cu.StreamDestroy(s));
    no_violations();
    printf("rank %d: released: %s\n", rank, coll_status_string(ast));
    fflush(stdout);
    _exit(0); /* the world comm's peer is gone too: leave without a collective */
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    coll_comm_t *world;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(mode, "nocuda") != 0 && !cuda_load()) {
        printf("1..0 # SKIP no CUDA runtime to load (COLL_CUDA_LIBRARY='%s')\n",
               getenv("COLL_CUDA_LIBRARY") ? getenv("COLL_CUDA_LIBRARY") : "");
        return 0;
    }
    CHECK(coll_comm_init_env(&world));
    CHECK(coll_comm_rank(world, &rank));
    CHECK(coll_comm_size(world, &nranks));
    if (strcmp(mode, "all") == 0)
        mode_all(world);
    else if (strcmp(mode, "badargs") == 0)
        mode_badargs(world);
    else if (strcmp(mode, "nocuda") == 0)
        mode_nocuda(world);
    else if (strcmp(mode, "kill") == 0)
        mode_kill(world);
    else
        die("unknown mode '%s' (all, badargs, nocuda, kill)", mode);
    no_violations();
    CHECK(coll_barrier(world));
    CHECK(coll_comm_destroy(world));
    printf("rank %d: %s ok\n", rank, mode);
    return 0;
}
