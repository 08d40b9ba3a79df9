/*
 * nccl_api.c - coll's libnccl.so.2 through NCCL's own header, on host buffers, under collrun:
 *
 *   collrun -n N nccl_api colls|group|premul|nonblocking|split|shrink|initall|bad|env
 *
 * Written against the public NCCL API only (the CUDA Toolkit's nccl.h when the build finds
 * it, else coll's), so every check here is one an NCCL program could make. The first id
 * comes from collrun's environment (COLL_UNIQUE_ID is the id's 128 bytes in hex), the way a
 * launcher hands one out; later ids are made with ncclGetUniqueId on rank 0 and broadcast
 * over an existing comm. Every rank checks its own results and exits non-zero on the first
 * wrong value, naming it.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* setenv, nanosleep */
#endif
#include <nccl.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MP_UTIL_NCCL
#include "../mp_util.h"

/* call must fail with want, and ncclGetLastError must mention word. */
#define EXPECT(call, want, word)                                                             \
    do {                                                                                     \
        ncclResult_t st_ = (call);                                                           \
        if (st_ != (want))                                                                   \
            die("%s:%d: %s -> %d (%s), want %d", __FILE__, __LINE__, #call, (int)st_,        \
                ncclGetErrorString(st_), (int)(want));                                       \
        if (!strstr(ncclGetLastError(NULL), (word)))                                         \
            die("%s:%d: %s: last error '%s' does not mention '%s'", __FILE__, __LINE__,      \
                #call, ncclGetLastError(NULL), (word));                                      \
    } while (0)

static void want_f(const float *got, size_t n, float (*f)(size_t), const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != f(i))
            die("%s: element %zu is %g, want %g", what, i, (double)got[i], (double)f(i));
}

static ncclUniqueId env_id(void)
{
    const char *hex = getenv("COLL_UNIQUE_ID");
    ncclUniqueId id;

    if (!hex || strlen(hex) != 2 * sizeof(id.internal))
        die("COLL_UNIQUE_ID is not set: run under collrun");
    for (size_t i = 0; i < sizeof(id.internal); i++) {
        unsigned v;

        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            die("COLL_UNIQUE_ID is not hex");
        id.internal[i] = (char)v;
    }
    return id;
}

static ncclComm_t world(void)
{
    ncclComm_t comm;

    CHECK(ncclCommInitRank(&comm, nranks, env_id(), rank));
    return comm;
}

/* A new id from rank 0, broadcast over comm. */
static ncclUniqueId fresh_id(ncclComm_t comm)
{
    ncclUniqueId id;

    memset(&id, 0, sizeof(id));
    if (rank == 0)
        CHECK(ncclGetUniqueId(&id));
    CHECK(ncclBroadcast(&id, &id, sizeof(id), ncclUint8, 0, comm, NULL));
    return id;
}

static float v(int r, size_t i)
{
    return (float)((r + 1) * (int)(i % 7 + 1));
}

static float sum_r(size_t i)
{
    float s = 0;
    for (int r = 0; r < nranks; r++)
        s += v(r, i);
    return s;
}

static float max_r(size_t i)
{
    return v(nranks - 1, i);
}

static float v_root1(size_t i)
{
    return v(nranks > 1 ? 1 : 0, i);
}

static float *fill(size_t n, int r)
{
    float *p = malloc(n * sizeof(float));

    for (size_t i = 0; i < n; i++)
        p[i] = v(r, i);
    return p;
}

/* ---- colls: every collective, the queries, registration, memory ---------------------- */

static void case_colls(void)
{
    const size_t n = 1000;
    ncclComm_t comm = world();
    float *a = fill(n, rank), *b = calloc(n * (size_t)nranks, sizeof(float));
    int x, version;
    void *handle, *mem;
    ncclWindow_t win;

    CHECK(ncclGetVersion(&version));
    if (version != NCCL_VERSION_CODE && version < 22800)
        die("ncclGetVersion = %d", version);
    CHECK(ncclCommCount(comm, &x));
    if (x != nranks)
        die("ncclCommCount = %d", x);
    CHECK(ncclCommUserRank(comm, &x));
    if (x != rank)
        die("ncclCommUserRank = %d", x);
    CHECK(ncclCommCuDevice(comm, &x));

    CHECK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, comm, NULL));
    want_f(b, n, sum_r, "allreduce sum");
    CHECK(ncclAllReduce(a, a, n, ncclFloat32, ncclMax, comm, NULL)); /* in place */
    want_f(a, n, max_r, "allreduce max in place");

    free(a);
    a = fill(n, rank);
    CHECK(ncclBroadcast(a, b, n, ncclFloat, nranks > 1 ? 1 : 0, comm, NULL));
    want_f(b, n, v_root1, "broadcast root 1");
    CHECK(ncclBcast(a, n, ncclFloat, nranks > 1 ? 1 : 0, comm, NULL));
    want_f(a, n, v_root1, "bcast");

    free(a);
    a = fill(n, rank);
    memset(b, 0, n * sizeof(float));
    CHECK(ncclReduce(a, rank == nranks - 1 ? b : NULL, n, ncclFloat, ncclSum, nranks - 1, comm,
                     NULL));
    if (rank == nranks - 1)
        want_f(b, n, sum_r, "reduce");

    /* all-gather: block r of b is rank r's a */
    CHECK(ncclAllGather(a, b, n, ncclFloat, comm, NULL));
    for (int r = 0; r < nranks; r++)
        for (size_t i = 0; i < n; i++)
            if (b[(size_t)r * n + i] != v(r, i))
                die("allgather: block %d element %zu is %g", r, i, (double)b[(size_t)r * n + i]);

    /* reduce-scatter: each rank's n-element block of the sum of nranks*n inputs */
    {
        float *in = malloc(n * (size_t)nranks * sizeof(float)), *out = malloc(n * sizeof(float));

        for (size_t i = 0; i < n * (size_t)nranks; i++)
            in[i] = v(rank, i);
        CHECK(ncclReduceScatter(in, out, n, ncclFloat, ncclSum, comm, NULL));
        for (size_t i = 0; i < n; i++)
            if (out[i] != sum_r((size_t)rank * n + i))
                die("reducescatter: element %zu is %g", i, (double)out[i]);

        /* all-to-all: block j of rank r's input is r*1000+j; lands at block r of rank j */
        for (int j = 0; j < nranks; j++)
            for (size_t i = 0; i < n; i++)
                in[(size_t)j * n + i] = (float)(rank * 1000 + j) + (float)i / 1024;
        CHECK(ncclAlltoAll(in, b, n, ncclFloat, comm, NULL));
        for (int r = 0; r < nranks; r++)
            for (size_t i = 0; i < n; i++)
                if (b[(size_t)r * n + i] != (float)(r * 1000 + rank) + (float)i / 1024)
                    die("alltoall: block %d element %zu is %g", r, i,
                        (double)b[(size_t)r * n + i]);

        /* gather to root 0, scatter from root 0 */
        memset(b, 0, n * (size_t)nranks * sizeof(float));
        CHECK(ncclGather(a, b, n, ncclFloat, 0, comm, NULL));
        if (rank == 0)
            for (int r = 0; r < nranks; r++)
                for (size_t i = 0; i < n; i++)
                    if (b[(size_t)r * n + i] != v(r, i))
                        die("gather: block %d element %zu", r, i);
        for (size_t i = 0; i < n * (size_t)nranks; i++)
            in[i] = (float)i;
        CHECK(ncclScatter(in, out, n, ncclFloat, 0, comm, NULL));
        for (size_t i = 0; i < n; i++)
            if (out[i] != (float)((size_t)rank * n + i))
                die("scatter: element %zu is %g", i, (double)out[i]);
        free(in);
        free(out);
    }

    /* send/recv around a ring, in one group so that nobody waits for a receive first */
    {
        int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
        int32_t s[64], r[64];

        for (int i = 0; i < 64; i++)
            s[i] = rank * 100 + i;
        CHECK(ncclGroupStart());
        CHECK(ncclSend(s, 64, ncclInt32, next, comm, NULL));
        CHECK(ncclRecv(r, 64, ncclInt, prev, comm, NULL));
        CHECK(ncclGroupEnd());
        for (int i = 0; i < 64; i++)
            if (r[i] != prev * 100 + i)
                die("sendrecv: element %d is %d", i, r[i]);
    }

    /* every element type through a sum */
    {
        static const ncclDataType_t types[] = {ncclInt8,    ncclUint8,      ncclInt32,
                                               ncclUint32,  ncclInt64,      ncclUint64,
                                               ncclFloat16, ncclFloat32,    ncclFloat64,
                                               ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
        unsigned char buf[64 * 8];

        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
            memset(buf, 0, sizeof(buf));
            CHECK(ncclAllReduce(buf, buf, 64, types[t], ncclSum, comm, NULL));
            for (size_t i = 0; i < sizeof(buf); i++)
                if (buf[i])
                    die("allreduce of zeros, type %d: byte %zu is %d", (int)types[t], i, buf[i]);
        }
    }

    /* registration is recorded and undone; memory from ncclMemAlloc is usable host memory */
    CHECK(ncclCommRegister(comm, b, n * sizeof(float), &handle));
    CHECK(ncclCommWindowRegister(comm, b, n * sizeof(float), &win, NCCL_WIN_COLL_SYMMETRIC));
    CHECK(ncclMemAlloc(&mem, 4096));
    memcpy(mem, a, 16 * sizeof(float));
    CHECK(ncclAllReduce(mem, mem, 16, ncclFloat, ncclSum, comm, NULL));
    want_f(mem, 16, sum_r, "allreduce on ncclMemAlloc memory");
    CHECK(ncclMemFree(mem));
    CHECK(ncclCommWindowDeregister(comm, win));
    CHECK(ncclCommDeregister(comm, handle));

    CHECK(ncclCommFinalize(comm));
    CHECK(ncclCommDestroy(comm));
    free(a);
    free(b);
}

/* ---- group: nesting, fusion, self send, simulation ----------------------------------- */

static void case_group(void)
{
    const size_t n = 256;
    ncclComm_t comm = world(), comm2;
    float *a = fill(n, rank), *b = calloc(n, sizeof(float)), *c = calloc(n, sizeof(float));
    float self_in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, self_out[8] = {0};
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;

    comm2 = NULL;
    {
        ncclUniqueId id = fresh_id(comm);
        CHECK(ncclCommInitRank(&comm2, nranks, id, rank));
    }
    /* nested: only the outermost end runs; two comms and a self send/recv in one group */
    CHECK(ncclGroupStart());
    CHECK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, comm, NULL));
    CHECK(ncclGroupStart());
    CHECK(ncclBroadcast(a, c, n, ncclFloat, 0, comm2, NULL));
    CHECK(ncclSend(self_in, 8, ncclFloat, rank, comm, NULL));
    CHECK(ncclRecv(self_out, 8, ncclFloat, rank, comm, NULL));
    CHECK(ncclGroupEnd());
    if (b[0] != 0 || self_out[0] != 0)
        die("group: an inner ncclGroupEnd ran the group");
    CHECK(ncclGroupEnd());
    want_f(b, n, sum_r, "grouped allreduce");
    for (size_t i = 0; i < n; i++)
        if (c[i] != v(0, i))
            die("grouped broadcast: element %zu is %g", i, (double)c[i]);
    if (memcmp(self_in, self_out, sizeof(self_in)))
        die("grouped self send/recv");

    /* simulation prices the group and runs nothing */
    memset(b, 0, n * sizeof(float));
    CHECK(ncclGroupStart());
    CHECK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, comm, NULL));
    CHECK(ncclGroupSimulateEnd(&sim));
    if (nranks > 1 && !(sim.estimatedTime > 0))
        die("ncclGroupSimulateEnd: estimatedTime %g", (double)sim.estimatedTime);
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            die("ncclGroupSimulateEnd ran the all-reduce");

    /* a call that fails its checks inside a group fails the group, which runs nothing */
    CHECK(ncclGroupStart());
    CHECK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, comm, NULL));
    EXPECT(ncclBroadcast(a, b, n, ncclFloat, nranks, comm, NULL), ncclInvalidArgument, "root");
    EXPECT(ncclGroupEnd(), ncclInvalidArgument, "root");
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            die("a failed group ran its all-reduce");
    /* the comm is fine afterwards */
    CHECK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, comm, NULL));
    want_f(b, n, sum_r, "allreduce after a failed group");

    CHECK(ncclCommDestroy(comm2));
    CHECK(ncclCommDestroy(comm));
    free(a);
    free(b);
    free(c);
}

/* ---- premul: ncclRedOpCreatePreMulSum ------------------------------------------------ */

static float half_sum(size_t i)
{
    return sum_r(i) * 0.5f;
}

static void case_premul(void)
{
    const size_t n = 300;
    ncclComm_t comm = world();
    float *a = fill(n, rank), *b = calloc(n * (size_t)nranks, sizeof(float));
    float *keep = fill(n, rank);
    float half = 0.5f, dev_scalar = 2.0f;
    double dscale = 3.0;
    int32_t iscale = 3, ia[16], ib[16];
    ncclRedOp_t op_half, op_dev, op_int, op_d;

    CHECK(ncclRedOpCreatePreMulSum(&op_half, &half, ncclFloat, ncclScalarHostImmediate, comm));
    half = 100; /* HostImmediate: the value was taken at creation */
    CHECK(ncclAllReduce(a, b, n, ncclFloat, op_half, comm, NULL));
    want_f(b, n, half_sum, "premulsum 0.5");
    if (memcmp(a, keep, n * sizeof(float)))
        die("premulsum changed the send buffer");

    /* Device residence: read when the collective runs, so a later value counts */
    CHECK(ncclRedOpCreatePreMulSum(&op_dev, &dev_scalar, ncclFloat, ncclScalarDevice, comm));
    dev_scalar = 0.5f;
    CHECK(ncclAllReduce(a, b, n, ncclFloat, op_dev, comm, NULL));
    want_f(b, n, half_sum, "premulsum device scalar");

    /* integer, through reduce and (grouped) reduce-scatter */
    CHECK(ncclRedOpCreatePreMulSum(&op_int, &iscale, ncclInt32, ncclScalarHostImmediate, comm));
    for (int i = 0; i < 16; i++)
        ia[i] = rank + i;
    CHECK(ncclReduce(ia, ib, 16, ncclInt32, op_int, 0, comm, NULL));
    if (rank == 0)
        for (int i = 0; i < 16; i++)
            if (ib[i] != 3 * (nranks * (nranks - 1) / 2 + nranks * i))
                die("premulsum int reduce: element %d is %d", i, ib[i]);
    {
        double *din = malloc((size_t)nranks * 4 * sizeof(double)), dout[4];

        for (int i = 0; i < nranks * 4; i++)
            din[i] = i;
        CHECK(ncclRedOpCreatePreMulSum(&op_d, &dscale, ncclFloat64, ncclScalarHostImmediate,
                                       comm));
        CHECK(ncclGroupStart());
        CHECK(ncclReduceScatter(din, dout, 4, ncclDouble, op_d, comm, NULL));
        CHECK(ncclGroupEnd());
        for (int i = 0; i < 4; i++)
            if (dout[i] != 3.0 * nranks * (rank * 4 + i))
                die("premulsum double reducescatter: element %d is %g", i, dout[i]);
        free(din);
    }

    /* an operator is for its datatype and comm; destroyed, it is gone */
    EXPECT(ncclAllReduce(ia, ib, 16, ncclInt32, op_half, comm, NULL), ncclInvalidArgument,
           "datatype");
    CHECK(ncclRedOpDestroy(op_half, comm));
    EXPECT(ncclAllReduce(a, b, n, ncclFloat, op_half, comm, NULL), ncclInvalidArgument,
           "not created");
    EXPECT(ncclRedOpDestroy(op_half, comm), ncclInvalidArgument, "not created");
    EXPECT(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, "built in");
    CHECK(ncclRedOpDestroy(op_dev, comm));
    CHECK(ncclRedOpDestroy(op_int, comm));
    CHECK(ncclRedOpDestroy(op_d, comm));
    CHECK(ncclCommDestroy(comm));
    free(a);
    free(b);
    free(keep);
}

/* ---- nonblocking: config.blocking = 0, async error, grouped and scalable init ---------- */

static void wait_ready(ncclComm_t comm, const char *what)
{
    ncclResult_t async = ncclInProgress;
    struct timespec ts = {0, 1000000};

    for (int i = 0; i < 60000 && async == ncclInProgress; i++) {
        CHECK(ncclCommGetAsyncError(comm, &async));
        if (async == ncclInProgress)
            nanosleep(&ts, NULL);
    }
    if (async != ncclSuccess)
        die("%s: async state %d: %s", what, (int)async, ncclGetLastError(comm));
}

static void case_nonblocking(void)
{
    const size_t n = 64;
    ncclComm_t comm = world(), nb, sub, g1, g2, sc;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclUniqueId id = fresh_id(comm), ids[2];
    float *a = fill(n, rank), *b = calloc(n, sizeof(float));
    ncclResult_t st;
    int x;

    cfg.blocking = 0;
    cfg.commName = "nonblocking";
    st = ncclCommInitRankConfig(&nb, nranks, id, rank, &cfg);
    if (st != ncclInProgress)
        die("non-blocking init returned %d, want ncclInProgress", (int)st);
    wait_ready(nb, "non-blocking init");
    CHECK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, nb, NULL));
    want_f(b, n, sum_r, "allreduce on a non-blocking comm");

    /* split inherits non-blocking: ncclInProgress, then a comm of this rank's parity */
    st = ncclCommSplit(nb, rank % 2, rank, &sub, NULL);
    if (st != ncclInProgress)
        die("non-blocking split returned %d", (int)st);
    wait_ready(sub, "non-blocking split");
    CHECK(ncclCommCount(sub, &x));
    if (x != (nranks + 1 - rank % 2) / 2)
        die("split: %d ranks", x);
    CHECK(ncclCommDestroy(sub));
    CHECK(ncclCommDestroy(nb));

    /* two inits in one group from one thread: both joins run at ncclGroupEnd */
    {
        ncclUniqueId i1 = fresh_id(comm), i2 = fresh_id(comm);

        CHECK(ncclGroupStart());
        CHECK(ncclCommInitRank(&g1, nranks, i1, rank));
        CHECK(ncclCommInitRank(&g2, nranks, i2, nranks - 1 - rank));
        CHECK(ncclGroupEnd());
        CHECK(ncclCommUserRank(g2, &x));
        if (x != nranks - 1 - rank)
            die("grouped init: rank %d in g2", x);
        CHECK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, g2, NULL));
        want_f(b, n, sum_r, "allreduce on a group-initialized comm");
        CHECK(ncclCommDestroy(g1));
        CHECK(ncclCommDestroy(g2));
    }

    /* scalable init with two ids (made by two different ranks) */
    memset(ids, 0, sizeof(ids));
    ids[0] = fresh_id(comm);
    if (rank == nranks - 1)
        CHECK(ncclGetUniqueId(&ids[1]));
    CHECK(ncclBroadcast(&ids[1], &ids[1], sizeof(ids[1]), ncclUint8, nranks - 1, comm, NULL));
    CHECK(ncclCommInitRankScalable(&sc, nranks, rank, nranks > 1 ? 2 : 1, ids, NULL));
    CHECK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, sc, NULL));
    want_f(b, n, sum_r, "allreduce on a scalable-initialized comm");
    CHECK(ncclCommDestroy(sc));

    /* abort, revoke */
    CHECK(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
    EXPECT(ncclAllReduce(a, b, n, ncclFloat, ncclSum, comm, NULL), ncclInvalidUsage, "revoked");
    CHECK(ncclCommAbort(comm));
    free(a);
    free(b);
}

/* ---- split --------------------------------------------------------------------------- */

static void case_split(void)
{
    const size_t n = 100;
    ncclComm_t comm = world(), sub, none;
    float *a = fill(n, rank), *b = calloc(n, sizeof(float));
    int x, y;

    /* two colors, ranks reversed by key */
    CHECK(ncclCommSplit(comm, rank % 2, -rank, &sub, NULL));
    CHECK(ncclCommCount(sub, &x));
    CHECK(ncclCommUserRank(sub, &y));
    if (x != (nranks + 1 - rank % 2) / 2 || y != (x - 1) - rank / 2)
        die("split: rank %d of %d", y, x);
    CHECK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, sub, NULL));
    for (size_t i = 0; i < n; i++) {
        float s = 0;
        for (int r = rank % 2; r < nranks; r += 2)
            s += v(r, i);
        if (b[i] != s)
            die("allreduce on split comm: element %zu is %g, want %g", i, (double)b[i],
                (double)s);
    }
    /* NOCOLOR: not a member */
    CHECK(ncclCommSplit(comm, rank == 0 ? NCCL_SPLIT_NOCOLOR : 0, 0, &none, NULL));
    if ((rank == 0) != (none == NULL))
        die("split NOCOLOR: newcomm %p", (void *)none);
    if (none)
        CHECK(ncclCommDestroy(none));
    CHECK(ncclCommDestroy(sub));
    CHECK(ncclCommDestroy(comm));
    free(a);
    free(b);
}

/* ---- shrink: the last rank leaves -------------------------------------------------- */

static void case_shrink(void)
{
    const size_t n = 100;
    ncclComm_t comm = world(), small = NULL;
    float *a = fill(n, rank), *b = calloc(n, sizeof(float));
    int gone = nranks - 1, x;

    if (rank != gone) {
        CHECK(ncclCommShrink(comm, &gone, 1, &small, NULL, NCCL_SHRINK_DEFAULT));
        CHECK(ncclCommCount(small, &x));
        if (x != nranks - 1)
            die("shrink: %d ranks", x);
        CHECK(ncclCommUserRank(small, &x));
        if (x != rank)
            die("shrink: rank %d", x);
        CHECK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, small, NULL));
        for (size_t i = 0; i < n; i++)
            if (b[i] != sum_r(i) - v(gone, i))
                die("allreduce on shrunk comm: element %zu is %g", i, (double)b[i]);
        EXPECT(ncclCommShrink(comm, &rank, 1, &small, NULL, 0), ncclInvalidUsage, "must not");
        CHECK(ncclCommDestroy(small));
    }
    /* the parent is still whole: everyone meets on it */
    CHECK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, comm, NULL));
    want_f(b, n, sum_r, "allreduce on the parent after shrink");

    /* a rank dies (aborts) in a second comm; the others shrink that failed comm */
    {
        ncclUniqueId id = fresh_id(comm);
        ncclComm_t c2, s2;
        float *all_in = calloc(n * (size_t)nranks, sizeof(float));
        float *all_out = calloc(n * (size_t)nranks, sizeof(float));
        ncclResult_t st;

        CHECK(ncclCommInitRank(&c2, nranks, id, rank));
        /* every pair connected, so that everyone sees the death at once */
        CHECK(ncclAlltoAll(all_in, all_out, n, ncclFloat, c2, NULL));
        /* the others tell the leaving rank they are done with the all-to-all: its abort
         * reaches them at once (the comm's control tree), and must not fail that call */
        if (rank == gone) {
            int32_t tok[64];
            CHECK(ncclGroupStart());
            for (int r = 0; r < nranks; r++)
                if (r != gone)
                    CHECK(ncclRecv(&tok[r % 64], 1, ncclInt32, r, c2, NULL));
            CHECK(ncclGroupEnd());
        } else {
            int32_t tok = rank;
            CHECK(ncclSend(&tok, 1, ncclInt32, gone, c2, NULL));
        }
        if (rank == gone) {
            CHECK(ncclCommAbort(c2));
        } else {
            st = ncclAllReduce(a, b, n, ncclFloat, ncclSum, c2, NULL);
            if (st != ncclRemoteError && st != ncclSystemError)
                die("allreduce with a dead rank: %d (%s)", (int)st, ncclGetLastError(NULL));
            st = ncclCommShrink(c2, &gone, 1, &s2, NULL, NCCL_SHRINK_ABORT);
            if (st == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "lacks")) {
                /* a native library without coll_comm_shrink: refused, and said so */
                if (rank == 0)
                    printf("# shrink of a failed comm skipped: %s\n", ncclGetLastError(NULL));
                CHECK(ncclCommDestroy(c2));
                free(all_in);
                free(all_out);
                goto out;
            }
            CHECK(st);
            CHECK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, s2, NULL));
            for (size_t i = 0; i < n; i++)
                if (b[i] != sum_r(i) - v(gone, i))
                    die("allreduce after shrinking a failed comm: element %zu is %g", i,
                        (double)b[i]);
            st = ncclAllReduce(a, b, n, ncclFloat, ncclSum, c2, NULL);
            if (st == ncclSuccess || !strstr(ncclGetLastError(NULL), "shrunk"))
                die("allreduce on a shrunk comm: %d (%s)", (int)st, ncclGetLastError(NULL));
            CHECK(ncclCommDestroy(s2));
            CHECK(ncclCommDestroy(c2));
        }
        free(all_in);
        free(all_out);
    }
out:
    CHECK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, comm, NULL));
    CHECK(ncclCommDestroy(comm));
    free(a);
    free(b);
}

/* ---- initall: several comms of one process, driven from one thread by a group -------- */

static void case_initall(void)
{
    enum { N = 3 };
    ncclComm_t comms[N];
    int devs[N] = {4, 2, 7}, dup[2] = {1, 1}, x;
    float buf[N][32];

    EXPECT(ncclCommInitAll(comms, 2, dup), ncclInvalidUsage, "twice");
    EXPECT(ncclCommInitAll(comms, 0, NULL), ncclInvalidArgument, "ndev");
    CHECK(ncclCommInitAll(comms, N, devs));
    for (int d = 0; d < N; d++) {
        CHECK(ncclCommUserRank(comms[d], &x));
        if (x != d)
            die("initall: comm %d has rank %d", d, x);
        CHECK(ncclCommCuDevice(comms[d], &x));
        if (x != devs[d])
            die("initall: comm %d has device %d", d, x);
        for (int i = 0; i < 32; i++)
            buf[d][i] = (float)(d + i);
    }
    CHECK(ncclGroupStart());
    for (int d = 0; d < N; d++)
        CHECK(ncclAllReduce(buf[d], buf[d], 32, ncclFloat, ncclSum, comms[d], NULL));
    CHECK(ncclGroupEnd());
    for (int d = 0; d < N; d++)
        for (int i = 0; i < 32; i++)
            if (buf[d][i] != (float)(0 + 1 + 2 + 3 * i))
                die("initall allreduce: comm %d element %d is %g", d, i, (double)buf[d][i]);
    for (int d = 0; d < N; d++)
        CHECK(ncclCommDestroy(comms[d]));
}

/* ---- bad: what NCCL refuses, with the status NCCL gives ------------------------------ */

static void case_bad(void)
{
    ncclComm_t comm = world(), dead, out;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclUniqueId id, zero;
    float a[4] = {0}, b[4];
    void *handle = a;
    static char garbage[256];
    ncclComm_t fake = (ncclComm_t)(void *)garbage;

    EXPECT(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, NULL, NULL), ncclInvalidArgument, "NULL");
    EXPECT(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, fake, NULL), ncclInvalidArgument,
           "not a communicator");
    EXPECT(ncclAllReduce(a, b, 4, (ncclDataType_t)ncclNumTypes, ncclSum, comm, NULL),
           ncclInvalidArgument, "datatype");
    EXPECT(ncclAllReduce(a, b, 4, ncclFloat, (ncclRedOp_t)77, comm, NULL), ncclInvalidArgument,
           "op");
    /* coll's bitwise operators (COLL_BXOR..COLL_BAND = -3..-1) are not NCCL's */
    for (int op = -3; op <= -1; op++)
        EXPECT(ncclAllReduce(a, b, 4, ncclInt8, (ncclRedOp_t)op, comm, NULL),
               ncclInvalidArgument, "not an operator");
    EXPECT(ncclReduce(a, b, 4, ncclFloat, ncclSum, -1, comm, NULL), ncclInvalidArgument, "root");
    EXPECT(ncclSend(a, 4, ncclFloat, nranks, comm, NULL), ncclInvalidArgument, "peer");
    EXPECT(ncclGetVersion(NULL), ncclInvalidArgument, "version");
    EXPECT(ncclGetUniqueId(NULL), ncclInvalidArgument, "uniqueId");
    EXPECT(ncclCommCount(comm, NULL), ncclInvalidArgument, "NULL");
    EXPECT(ncclCommGetAsyncError(comm, NULL), ncclInvalidArgument, "asyncError");

    /* configs: wrong magic, wrong size, wrong blocking */
    memset(&id, 0, sizeof(id));
    id = fresh_id(comm);
    cfg.magic = 0x12345678;
    EXPECT(ncclCommInitRankConfig(&out, nranks, id, rank, &cfg), ncclInvalidArgument, "magic");
    cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    cfg.size = sizeof(cfg) + 64;
    EXPECT(ncclCommInitRankConfig(&out, nranks, id, rank, &cfg), ncclInvalidArgument, "size");
    cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 5;
    EXPECT(ncclCommInitRankConfig(&out, nranks, id, rank, &cfg), ncclInvalidArgument,
           "blocking");
    EXPECT(ncclCommSplit(comm, 0, 0, &out, &cfg), ncclInvalidArgument, "blocking");
    EXPECT(ncclCommInitRank(&out, 0, id, 0), ncclInvalidArgument, "nranks");
    EXPECT(ncclCommInitRank(&out, nranks, id, nranks), ncclInvalidArgument, "rank");
    EXPECT(ncclCommInitRank(NULL, nranks, id, rank), ncclInvalidArgument, "NULL");
    /* the id fresh_id made is not used above: its root waits for nobody, and times out */

    /* ids that no ncclGetUniqueId made: zeros, a corrupted copy */
    memset(&zero, 0, sizeof(zero));
    EXPECT(ncclCommInitRank(&out, nranks, zero, rank), ncclInvalidArgument, "unique id");
    id.internal[40] ^= 0x5a;
    EXPECT(ncclCommInitRank(&out, nranks, id, rank), ncclInvalidArgument, "unique id");

    /* group rules */
    EXPECT(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupStart");
    CHECK(ncclGroupStart());
    EXPECT(ncclCommDestroy(comm), ncclInvalidUsage, "group");
    EXPECT(ncclCommFinalize(comm), ncclInvalidUsage, "group");
    EXPECT(ncclCommSplit(comm, 0, 0, &out, NULL), ncclInvalidUsage, "group");
    CHECK(ncclGroupEnd());
    {
        ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;

        EXPECT(ncclGroupSimulateEnd(&sim), ncclInvalidUsage, "ncclGroupStart");
        sim.magic = 1;
        EXPECT(ncclGroupSimulateEnd(&sim), ncclInvalidArgument, "NCCL_SIM_INFO_INITIALIZER");
    }

    /* memory and registration handles */
    EXPECT(ncclMemFree(a), ncclInvalidArgument, "ncclMemAlloc");
    EXPECT(ncclMemAlloc(NULL, 16), ncclInvalidArgument, "ptr");
    EXPECT(ncclCommDeregister(comm, handle), ncclInvalidArgument, "registered");
    EXPECT(ncclCommRevoke(comm, 3), ncclInvalidArgument, "revokeFlags");

    /* a destroyed comm */
    CHECK(ncclCommSplit(comm, 0, rank, &dead, NULL));
    CHECK(ncclCommDestroy(dead));
    EXPECT(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, dead, NULL), ncclInvalidArgument,
           "destroyed");
    EXPECT(ncclCommDestroy(dead), ncclInvalidArgument, "destroyed");
    CHECK(ncclCommDestroy(NULL));

    /* a peer that aborts: the survivor's operation fails, and the comm reports it after */
    {
        ncclComm_t sub;
        ncclResult_t async;

        CHECK(ncclCommSplit(comm, 0, rank, &sub, NULL));
        /* connected first: a peer that was never connected is only noticed by timeout */
        CHECK(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, sub, NULL));
        /* rank 0 says it is done with that all-reduce before rank 1 aborts: the abort
         * reaches every rank at once (the comm's control tree) */
        if (rank == 0) {
            int32_t tok = 0;
            CHECK(ncclSend(&tok, 1, ncclInt32, 1, sub, NULL));
        } else if (rank == 1) {
            int32_t tok;
            CHECK(ncclRecv(&tok, 1, ncclInt32, 0, sub, NULL));
        }
        if (rank == 1) {
            CHECK(ncclCommAbort(sub));
        } else if (rank == 0) {
            ncclResult_t st = ncclAllReduce(a, b, 4, ncclFloat, ncclSum, sub, NULL);
            if (st != ncclRemoteError && st != ncclSystemError)
                die("allreduce with an aborted peer: %d (%s)", (int)st, ncclGetLastError(NULL));
            CHECK(ncclCommGetAsyncError(sub, &async));
            if (st == ncclRemoteError && async != ncclRemoteError)
                die("ncclCommGetAsyncError after a peer abort: %d", (int)async);
            CHECK(ncclCommDestroy(sub));
        } else {
            /* rank 1's abort may reach this rank inside its destroy, which then says so */
            ncclResult_t st = ncclCommDestroy(sub);
            if (st != ncclSuccess && st != ncclRemoteError)
                die("destroy beside an aborted peer: %d (%s)", (int)st, ncclGetLastError(NULL));
        }
    }

    /* the comm still works after all of that */
    a[0] = 1;
    CHECK(ncclAllReduce(a, b, 1, ncclFloat, ncclSum, comm, NULL));
    if (b[0] != (float)nranks)
        die("allreduce after bad calls: %g", (double)b[0]);
    if (ncclGetErrorString(ncclInProgress) == NULL || ncclGetErrorString((ncclResult_t)99) == NULL)
        die("ncclGetErrorString returned NULL");
    CHECK(ncclCommDestroy(comm));
}

/* ---- env: NCCL_* variables reach coll ------------------------------------------------ */

static void case_env(void)
{
    static const char *const want[][2] = {
        {"COLL_ALGO", "ring"},
        {"COLL_SOCKET_IFNAME", "lo"},
        {"COLL_TRANSPORT", "tcp"},
        {"COLL_DEBUG_SUBSYS", "INIT,NET"},
        {"COLL_IB_HCA", "mlx5_0"},
    };
    ncclComm_t comm;
    float x = 1, y;

    /* as a user would: before the first call */
    setenv("NCCL_ALGO", "Ring", 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    setenv("NCCL_SHM_DISABLE", "1", 1);
    setenv("NCCL_IB_DISABLE", "1", 1);
    setenv("NCCL_DEBUG_SUBSYS", "INIT,NET,PROXY", 1);
    setenv("NCCL_IB_HCA", "mlx5_0", 1);
    setenv("NCCL_PROTO", "LL128", 1);
    unsetenv("COLL_ALGO");
    comm = world();
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const char *got = getenv(want[i][0]);
        if (!got || strcmp(got, want[i][1]))
            die("%s = '%s', want '%s'", want[i][0], got ? got : "(unset)", want[i][1]);
    }
    CHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL));
    if (y != (float)nranks)
        die("allreduce: %g", (double)y);
    /* the profiling names are the same functions */
    CHECK(pncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL));
    if (y != (float)nranks)
        die("pncclAllReduce: %g", (double)y);
    {
        int v1, v2;
        CHECK(ncclGetVersion(&v1));
        CHECK(pncclGetVersion(&v2));
        if (v1 != v2)
            die("ncclGetVersion %d, pncclGetVersion %d", v1, v2);
    }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    ncclResetDebugInit(); /* deprecated, still exported: must not disturb a live comm */
#pragma GCC diagnostic pop
    CHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL));
    CHECK(ncclCommDestroy(comm));
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"colls", case_colls},     {"group", case_group}, {"premul", case_premul},
        {"nonblocking", case_nonblocking}, {"split", case_split}, {"shrink", case_shrink},
        {"initall", case_initall}, {"bad", case_bad},     {"env", case_env},
    };
    const char *r = getenv("COLL_RANK"), *s = getenv("COLL_SIZE");

    if (argc != 2 || !r || !s) {
        fprintf(stderr, "usage: collrun -n N %s CASE\n", argv[0]);
        return 2;
    }
    rank = atoi(r);
    nranks = atoi(s);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (!strcmp(argv[1], cases[i].name)) {
            cases[i].fn();
            if (rank == 0)
                printf("nccl_api %s: ok on %d ranks\n", argv[1], nranks);
            return 0;
        }
    fprintf(stderr, "unknown case '%s'\n", argv[1]);
    return 2;
}
