/*
 * device.c - device memory (--memtype cuda).
 */
#include "collbench.h"

/* The CUDA runtime is the one coll itself loaded (dlopen, COLL_CUDA_LIBRARY honoured;
 * src/cuda/cuda.c), never linked: collbench uses coll's table of entry points
 * (coll__ix_cuda), so the benchmark and the library agree on which runtime and which
 * device. Buffers come from cudaMalloc; check patterns are made in host images and moved
 * with cudaMemcpy; every call is queued on one non-blocking stream of collbench's, and a
 * batch of calls ends with cudaStreamSynchronize.
 */

/* Before the comm exists: a usable runtime and a device, made current so that the comm
 * takes it (coll.h: the device current at coll_comm_init). 0, or the exit status with the
 * reason in msg (cuda_agree says it once the comm exists). */
int cuda_pick_device(const struct opts *o, const struct coll_ix_cuda **rt_p, int *dev_p, char *msg,
                     size_t size)
{
    const struct coll_ix_cuda *rt;
    const char *why = NULL;
    char text[200];
    int n = 0, dev, err;

    rt = coll__ix_cuda(&why);
    if (!rt) {
        snprintf(msg, size, "%s: --memtype cuda: no usable CUDA runtime or device: %s", prog_name,
                 why);
        return 1;
    }
    err = rt->GetDeviceCount(&n);
    if (err != 0 || n < 1) {
        coll__ix_cuda_error_text(err, text, sizeof(text));
        snprintf(msg, size, "%s: --memtype cuda: no CUDA device: cudaGetDeviceCount: %s", prog_name,
                 err ? text : "0 devices");
        return 1;
    }
    if (o->device >= n) {
        snprintf(msg, size, "%s: --device %d: this process sees %d CUDA device%s (0..%d)",
                 prog_name, o->device, n, n == 1 ? "" : "s", n - 1);
        return EXIT_USAGE;
    }
    dev = o->device >= 0 ? o->device : coll__ix_local_rank() % n;
    err = rt->SetDevice(dev);
    if (err != 0) {
        coll__ix_cuda_error_text(err, text, sizeof(text));
        snprintf(msg, size, "%s: --memtype cuda: cudaSetDevice(%d): %s", prog_name, dev, text);
        return 1;
    }
    *rt_p = rt;
    *dev_p = dev;
    return 0;
}

/* A failed CUDA call of collbench's: its text for lib_error, COLL_CUDA_ERROR. */
static coll_status_t cuda_fail(struct bench *b, const char *what, int err)
{
    char text[200];

    coll__ix_cuda_error_text(err, text, sizeof(text));
    snprintf(b->cuda_msg, sizeof(b->cuda_msg), "%s: %s", what, text);
    return COLL_CUDA_ERROR;
}

/* The device buffers, their host images and the stream; false after a message. */
bool cuda_alloc(struct bench *b)
{
    const struct coll_ix_cuda *rt = b->rt;
    coll_status_t st = COLL_SUCCESS;
    int err;

    if ((err = rt->Malloc(&b->sendbuf, b->bufsize)) != 0 ||
        (err = rt->Malloc(&b->recvbuf, b->bufsize)) != 0)
        st = cuda_fail(b, "cudaMalloc", err);
    else if ((err = rt->Memset(b->sendbuf, 0, b->bufsize)) != 0 ||
             (err = rt->Memset(b->recvbuf, 0, b->bufsize)) != 0)
        st = cuda_fail(b, "cudaMemset", err);
    else if ((err = rt->StreamCreateWithFlags(&b->stream, CUDA_STREAM_NON_BLOCKING)) != 0)
        st = cuda_fail(b, "cudaStreamCreateWithFlags", err);
    if (st != COLL_SUCCESS) {
        fprintf(stderr, "collbench: rank %d: device %d, 2 x %zu bytes: %s\n", b->rank, b->device,
                b->bufsize, b->cuda_msg);
        b->cuda_msg[0] = '\0';
        return false;
    }
    b->hsend = malloc(b->bufsize);
    b->hrecv = malloc(b->bufsize);
    if (!b->hsend || !b->hrecv) {
        fprintf(stderr, "collbench: rank %d: cannot allocate 2 x %zu bytes of host images\n",
                b->rank, b->bufsize);
        return false;
    }
    return true;
}

void cuda_free(struct bench *b)
{
    const struct coll_ix_cuda *rt = b->rt;

    if (!rt)
        return;
    if (b->stream) {
        (void)rt->StreamSynchronize(b->stream);
        (void)rt->StreamDestroy(b->stream);
    }
    if (b->sendbuf)
        (void)rt->Free(b->sendbuf);
    if (b->recvbuf)
        (void)rt->Free(b->recvbuf);
    b->stream = b->sendbuf = b->recvbuf = NULL;
}

/* Wait for everything queued on the stream. A collective that failed after it was queued
 * fails the comm (coll.h): that failure is the answer then, with the comm's message. */
coll_status_t cuda_sync(struct bench *b)
{
    coll_status_t st, ast = COLL_SUCCESS;
    int err = b->rt->StreamSynchronize(b->stream);

    if (err != 0)
        return cuda_fail(b, "cudaStreamSynchronize", err);
    st = coll_comm_get_async_error(b->comm, &ast);
    return st != COLL_SUCCESS ? st : ast;
}

/* bytes between a host image and its device buffer (kind: CUDA_MEMCPY_H2D or _D2H). */
coll_status_t cuda_copy(struct bench *b, void *dst, const void *src, size_t bytes, int kind)
{
    int err;

    if (bytes == 0)
        return COLL_SUCCESS;
    err = b->rt->Memcpy(dst, src, bytes, kind);
    if (err != 0)
        return cuda_fail(
            b, kind == CUDA_MEMCPY_H2D ? "cudaMemcpy to the device" : "cudaMemcpy from the device",
            err);
    /* From pageable memory, cudaMemcpy may return before its DMA has landed, and the
     * collective's stream is non-blocking: it would not wait for the legacy stream. */
    if (kind == CUDA_MEMCPY_H2D && (err = b->rt->StreamSynchronize(NULL)) != 0)
        return cuda_fail(b, "cudaStreamSynchronize of the legacy stream", err);
    return COLL_SUCCESS;
}

/* Every rank learns whether all could take their device (rc: this rank's cuda_pick_device).
 * Rank 0 says why it could not; another rank speaks only when rank 0 could, and nobody
 * leaves before all have spoken (a launcher kills the others when the first one exits).
 * 0 when all can go on, else the exit status. */
int cuda_agree(struct bench *b, int rc)
{
    int v[2] = {rc, b->rank == 0 ? rc : 0}, w[2], one = 1;
    char msg[sizeof(b->cuda_msg)];
    coll_status_t st;

    memcpy(msg, b->cuda_msg, sizeof(msg));
    b->cuda_msg[0] = '\0'; /* lib_error: the comm's message from here on */
    st = coll_allreduce(v, w, 2, COLL_INT32, COLL_MAX, b->comm);
    if (st != COLL_SUCCESS) {
        if (rc)
            fprintf(stderr, "%s\n", msg);
        return lib_error(b, "allreduce of the CUDA checks", st);
    }
    if (!w[0])
        return 0;
    if (rc && b->rank == 0)
        fprintf(stderr, "%s\n", msg);
    else if (rc && !w[1])
        fprintf(stderr, "rank %d: %s\n", b->rank, msg);
    fflush(stderr);
    (void)coll_allreduce(&one, &v[0], 1, COLL_INT32, COLL_SUM, b->comm);
    return w[0];
}
