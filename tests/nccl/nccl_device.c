/*
 * nccl_device.c - coll's libnccl.so.2 on CUDA device buffers, through NCCL's own header,
 * under collrun, with the CUDA runtime that COLL_CUDA_LIBRARY names (tests/fakecudart in CI):
 *
 *   collrun -n N nccl_device colls|kill
 *
 * colls: every collective NCCL programs call with device buffers, queued on a non-default
 *        stream and checked after cudaStreamSynchronize; a send/recv ring in an
 *        ncclGroupStart/End; what the library does not cover on device buffers (ncclGather,
 *        PreMulSum) refused with ncclInvalidUsage; ncclCommGetAsyncError stays ncclSuccess.
 * kill:  the last rank exits; the others' streams are released and ncclCommGetAsyncError
 *        reports ncclRemoteError.
 *
 * Written against the public NCCL API; the CUDA calls go through the loaded runtime. Without
 * one to load, prints a SKIP line and succeeds.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <nccl.h>

#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MP_UTIL_NCCL
#include "../mp_util.h"

#include "../mp_cuda.h"

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

static float v(int r, size_t i)
{
    return (float)((r + 1) * (int)(i % 7 + 1));
}

static float *dev(size_t n)
{
    return dev_alloc(n * sizeof(float));
}

static void put(float *d, const float *h, size_t n)
{
    upload(d, h, n * sizeof(float));
}

static void get(float *h, const float *d, size_t n)
{
    download(h, d, n * sizeof(float));
}

static void want(const float *got, size_t n, float (*f)(size_t, size_t), size_t arg,
                 const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != f(i, arg))
            die("%s: element %zu is %g, want %g", what, i, (double)got[i], (double)f(i, arg));
}

static float f_sum(size_t i, size_t n)
{
    float s = 0;
    (void)n;
    for (int r = 0; r < nranks; r++)
        s += v(r, i);
    return s;
}
static float f_of(size_t i, size_t r)
{
    return v((int)r, i);
}
static float f_gather(size_t i, size_t n)
{
    return v((int)(i / n), i % n);
}
static float f_rs(size_t i, size_t n)
{
    return f_sum((size_t)rank * n + i, 0);
}
static float f_a2a(size_t i, size_t n)
{
    /* block j of rank r's input: v(r, rank-independent index) + 1000 * j */
    return v((int)(i / n), i % n) + 1000.0f * (float)rank;
}

static void case_colls(ncclComm_t comm, cudaStream_t s)
{
    const size_t n = 30000, big = n * (size_t)nranks;
    float *h = malloc(big * sizeof(float)), *g = malloc(big * sizeof(float));
    float *a = dev(big), *b = dev(big);
    int prev = (rank + nranks - 1) % nranks, next = (rank + 1) % nranks;
    ncclRedOp_t premul;
    float scale = 2.0f;
    ncclResult_t ast;

    for (size_t i = 0; i < big; i++)
        h[i] = v(rank, i);
    put(a, h, big);

    CHECK(ncclAllReduce(a, b, n, ncclFloat, ncclSum, comm, s));
    CU(cu.StreamSynchronize(s));
    get(g, b, n);
    want(g, n, f_sum, 0, "ncclAllReduce");

    CHECK(ncclBroadcast(a, b, n, ncclFloat, 1 % nranks, comm, s));
    CU(cu.StreamSynchronize(s));
    get(g, b, n);
    want(g, n, f_of, 1 % nranks, "ncclBroadcast");

    CHECK(ncclReduce(a, b, n, ncclFloat, ncclSum, 0, comm, s));
    CU(cu.StreamSynchronize(s));
    if (rank == 0) {
        get(g, b, n);
        want(g, n, f_sum, 0, "ncclReduce");
    }

    CHECK(ncclAllGather(a, b, n, ncclFloat, comm, s));
    CU(cu.StreamSynchronize(s));
    get(g, b, big);
    want(g, big, f_gather, n, "ncclAllGather");

    CHECK(ncclReduceScatter(a, b, n, ncclFloat, ncclSum, comm, s));
    CU(cu.StreamSynchronize(s));
    get(g, b, n);
    want(g, n, f_rs, n, "ncclReduceScatter");

    for (int j = 0; j < nranks; j++)
        for (size_t i = 0; i < n; i++)
            h[(size_t)j * n + i] = v(rank, i) + 1000.0f * (float)j;
    put(a, h, big);
    CHECK(ncclAlltoAll(a, b, n, ncclFloat, comm, s));
    CU(cu.StreamSynchronize(s));
    get(g, b, big);
    want(g, big, f_a2a, n, "ncclAlltoAll");

    /* a ring of sends and receives in one group */
    for (size_t i = 0; i < n; i++)
        h[i] = v(rank, i);
    put(a, h, n);
    CHECK(ncclGroupStart());
    CHECK(ncclSend(a, n, ncclFloat, next, comm, s));
    CHECK(ncclRecv(b, n, ncclFloat, prev, comm, s));
    CHECK(ncclGroupEnd());
    CU(cu.StreamSynchronize(s));
    get(g, b, n);
    want(g, n, f_of, (size_t)prev, "ncclSend/ncclRecv ring");

    /* what device buffers do not get */
    if (ncclGather(a, b, n, ncclFloat, 0, comm, s) != ncclInvalidUsage ||
        !strstr(ncclGetLastError(comm), "not supported"))
        die("ncclGather on device buffers: want ncclInvalidUsage, got '%s'",
            ncclGetLastError(comm));
    CHECK(ncclRedOpCreatePreMulSum(&premul, &scale, ncclFloat, ncclScalarHostImmediate, comm));
    if (ncclAllReduce(a, b, n, ncclFloat, premul, comm, s) != ncclInvalidUsage ||
        !strstr(ncclGetLastError(comm), "PreMulSum"))
        die("PreMulSum on device buffers: want ncclInvalidUsage, got '%s'",
            ncclGetLastError(comm));
    CHECK(ncclRedOpDestroy(premul, comm));

    CHECK(ncclCommGetAsyncError(comm, &ast));
    if (ast != ncclSuccess)
        die("ncclCommGetAsyncError on a healthy comm: %s", ncclGetErrorString(ast));
    CU(cu.Free(a));
    CU(cu.Free(b));
    free(h);
    free(g);
}

static void case_kill(ncclComm_t comm, cudaStream_t s)
{
    const size_t n = 30000;
    float *a = dev(n);
    ncclResult_t st, ast = ncclSuccess;

    CHECK(ncclAllReduce(a, a, n, ncclFloat, ncclSum, comm, s));
    CU(cu.StreamSynchronize(s));
    if (rank == nranks - 1)
        _exit(0);
    st = ncclAllReduce(a, a, n, ncclFloat, ncclSum, comm, s);
    if (st != ncclSuccess && st != ncclRemoteError)
        die("ncclAllReduce with a dead peer: %s", ncclGetErrorString(st));
    CU(cu.StreamSynchronize(s)); /* released, not blocked forever */
    CHECK(ncclCommGetAsyncError(comm, &ast));
    if (ast != ncclRemoteError)
        die("ncclCommGetAsyncError after a peer died: %s (%s)", ncclGetErrorString(ast),
            ncclGetLastError(comm));
    CHECK(ncclCommAbort(comm));
    no_violations();
    printf("rank %d: kill ok (%s)\n", rank, ncclGetErrorString(ast));
    _exit(0);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    const char *r = getenv("COLL_RANK"), *n = getenv("COLL_SIZE");
    ncclComm_t comm;
    cudaStream_t s;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!cuda_load()) {
        printf("1..0 # SKIP no CUDA runtime to load (COLL_CUDA_LIBRARY)\n");
        return 0;
    }
    if (!r || !n)
        die("COLL_RANK and COLL_SIZE are not set: run under collrun");
    rank = atoi(r);
    nranks = atoi(n);
    CHECK(ncclCommInitRank(&comm, nranks, env_id(), rank));
    CU(cu.StreamCreateWithFlags((void **)&s, STREAM_NON_BLOCKING));
    if (strcmp(mode, "colls") == 0)
        case_colls(comm, s);
    else if (strcmp(mode, "kill") == 0)
        case_kill(comm, s);
    else
        die("unknown mode '%s' (colls, kill)", mode);
    CHECK(ncclCommDestroy(comm));
    CU(cu.StreamDestroy(s));
    no_violations();
    printf("nccl_device %s: ok on rank %d\n", mode, rank);
    return 0;
}
