/*
 * ipc.c - the CUDA IPC path of the stream-ordered collectives (see ipc.h): all-reduce,
 * reduce-scatter, all-gather, broadcast and reduce between ranks of one host move device to
 * device, and each rank reduces its share of a piece straight out of its peers' memory.
 *
 * Divisions: 1 layout, 2 the decision and the scratch, 3 the work of a piece.
 *
 * Memory. Every rank cudaMallocs a scratch of COLL_CUDA_STAGING_BYTES cut into
 * COLL_IPC_SLOTS slots, exports it (cudaIpcGetMemHandle) and maps every peer's
 * (cudaIpcOpenMemHandle; ranks of one process use the pointer as it is). A slot holds a
 * piece's input, "in" (one block per rank for reduce-scatter), then its output, "out".
 *
 * A call, piece by piece (stream.c queues the copies and runs the worker's part):
 *
 *   user's stream:  IN 0 | IN 1 | IN 2 | IN 3 | WAIT 0 | IN 4 | WAIT 1 | ...
 *   worker:         B(-1)  C0  B0  G0+C1  B1  G1+C2  B2 ...  G(np-1)  B(np)
 *
 *   IN j      the user's stream copies its input of piece j into its own slot j % K
 *             (K = COLL_IPC_SLOTS) and records an event (host buffers: the worker copies);
 *   C j       compute, on the comm's own stream: the reduce-copy of this rank's slice of
 *             piece j from every rank's "in" into its own "out", ranks folded in rank
 *             order, AVG then divided by the comm size (reduce-scatter: its block;
 *             all-gather and the broadcast root: a copy
 *             from "in" to "out"); the worker waits until it is done;
 *   G j       gather, on the comm's stream: every rank's "out" share into recvbuf; when it
 *             is done the worker releases the stream's WAIT j (the last one after B(np));
 *   B j       a host barrier of the comm, entered once C j is done and the user's stream
 *             has finished IN j + 1: after it, every rank's slice of piece j is in its
 *             "out" and every rank's input of piece j + 1 in its "in".
 *
 * Each host barrier follows the completion, seen by the host through an event, of the
 * device work it stands for, and what reads that work is queued only after the barrier:
 * that is the whole of the cross-process ordering, and it holds on a GPU as in the emulator.
 *
 * Why a slot may be reused (piece j + K in slot j % K, with K >= 2):
 *   - its "in" is rewritten by IN j + K, which the user's stream runs after WAIT j; WAIT j
 *     is released after B j, which every rank entered after its C j had read that "in";
 *   - its "out" is rewritten by C j + K, queued after B j + K - 1; every rank entered that
 *     barrier after its G j + K - 2, hence after G j (K >= 2), had read that "out";
 *   - the worker waits for IN j + 1 before B j while WAIT j is still held, which the
 *     stream's order allows only when IN j + 1 precedes WAIT j there: j + 1 <= j + K - 1.
 * A final barrier after the last gather closes each call, and only then is the stream's
 * last WAIT released: the next call may lay its slots out differently (its "in" over this
 * call's "out"), so its copies in must wait until no rank gathers from this one; nor may
 * the scratch be freed at destroy while a peer still reads it.
 */
#include "ipc.h"
#include "stream.h"

#include "path.h"

#include "../core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDA_SUCCESS 0
#define CUDA_STREAM_NON_BLOCKING 1
#define CUDA_EVENT_DISABLE_TIMING 2
#define CUDA_IPC_LAZY_PEER 1
#define IPC_ALIGN 16 /* elements: keeps every region 16-byte aligned */

/* ---- 1 layout ------------------------------------------------------------------------ */

bool coll__ipc_eligible(enum coll_coll coll, coll_op_t op)
{
    switch (coll) {
    case COLL_COLL_ALLREDUCE:
    case COLL_COLL_REDUCE:
    case COLL_COLL_REDUCE_SCATTER:
        return (unsigned)op < COLL_NUM_OPS;
    case COLL_COLL_BROADCAST:
    case COLL_COLL_ALLGATHER:
        return true;
    default:
        return false;
    }
}

static size_t in_mult(enum coll_coll coll, int nranks)
{
    return coll == COLL_COLL_REDUCE_SCATTER ? (size_t)nranks : 1;
}

size_t coll__ipc_piece_elems(enum coll_coll coll, int nranks, size_t count, size_t esize,
                             size_t slot_bytes)
{
    size_t per = (in_mult(coll, nranks) + 1) * esize;
    size_t n = per ? slot_bytes / per : 0;

    if (n >= count)
        return count;
    if (n >= IPC_ALIGN)
        n -= n % IPC_ALIGN;
    return n;
}

void coll__ipc_slice(size_t n, int nranks, int r, size_t *lo_p, size_t *hi_p)
{
    size_t chunk = (n + (size_t)nranks - 1) / (size_t)nranks;
    size_t lo;

    chunk = (chunk + IPC_ALIGN - 1) / IPC_ALIGN * IPC_ALIGN;
    lo = (size_t)r * chunk < n ? (size_t)r * chunk : n;
    *lo_p = lo;
    *hi_p = n - lo < chunk ? n : lo + chunk;
}

int coll__ipc_rows(enum coll_coll coll, uint8_t dir, int rank, int nranks, int root,
                   size_t count, size_t esize, size_t piece, size_t j, bool out,
                   struct coll_stream_row *rows)
{
    size_t o = j * piece, n = count - o < piece ? count - o : piece;
    size_t out_off = in_mult(coll, nranks) * piece * esize, lo, hi;
    int nr = 0;

    (void)dir; /* no send or receive goes through IPC */
    if (!out) {
        switch (coll) {
        case COLL_COLL_BROADCAST:
            if (rank != root)
                break;
            /* fall through */
        case COLL_COLL_ALLREDUCE:
        case COLL_COLL_REDUCE:
        case COLL_COLL_ALLGATHER:
            rows[nr++] = (struct coll_stream_row){o * esize, 0, n * esize, rank};
            break;
        case COLL_COLL_REDUCE_SCATTER:
            for (int q = 0; q < nranks; q++)
                rows[nr++] = (struct coll_stream_row){((size_t)q * count + o) * esize,
                                                   (size_t)q * piece * esize, n * esize, rank};
            break;
        default:
            break;
        }
        return nr;
    }
    switch (coll) {
    case COLL_COLL_REDUCE:
        if (rank != root)
            break;
        /* fall through */
    case COLL_COLL_ALLREDUCE:
        for (int q = 0; q < nranks; q++) {
            coll__ipc_slice(n, nranks, q, &lo, &hi);
            if (hi > lo)
                rows[nr++] = (struct coll_stream_row){(o + lo) * esize, out_off + lo * esize,
                                                   (hi - lo) * esize, q};
        }
        break;
    case COLL_COLL_REDUCE_SCATTER:
        rows[nr++] = (struct coll_stream_row){o * esize, out_off, n * esize, rank};
        break;
    case COLL_COLL_ALLGATHER:
        for (int q = 0; q < nranks; q++)
            rows[nr++] =
                (struct coll_stream_row){((size_t)q * count + o) * esize, out_off, n * esize, q};
        break;
    case COLL_COLL_BROADCAST:
        rows[nr++] = (struct coll_stream_row){o * esize, out_off, n * esize, root};
        break;
    default:
        break;
    }
    return nr;
}

/* ---- 2 the decision and the scratch -------------------------------------------------- */

enum { WANT_AUTO = 0, WANT_OFF = 1, WANT_ON = 2 };

/* What each rank tells the others, all-gathered as bytes (ranks of one host run one build;
 * the magic catches anything else). */
struct ipc_rec {
    uint32_t magic;
    uint32_t capable;
    uint32_t want;
    int32_t pid;
    int32_t device;
    uint32_t pad_;
    uint64_t host_hash;
    uint64_t slot_bytes;
    uint64_t ptr; /* the scratch as its own process sees it */
    struct coll_cuda_ipc_handle handle;
};
#define IPC_REC_MAGIC 0x43504943u /* "CIPC" */

static int parse_want(const struct coll_comm *comm)
{
    const char *v = comm->cfg.cuda_ipc;

    if (!v[0] || strcmp(v, "auto") == 0)
        return WANT_AUTO;
    if (strcmp(v, "0") == 0)
        return WANT_OFF;
    if (strcmp(v, "1") == 0)
        return WANT_ON;
    COLL_WARN(COLL_SUB_INIT, "rank %d: COLL_CUDA_IPC='%s' is not auto, 0 or 1; taking auto",
              comm->rank, v);
    return WANT_AUTO;
}

static void cuda_text(const char *what, int rc, char *buf, size_t len)
{
    char err[200];
    int k;

    coll__cudart()->GetLastError();
    coll__cuda_error_text(rc, err, sizeof(err));
    k = snprintf(buf, len, "%s failed: ", what);
    if (k >= 0 && (size_t)k < len)
        snprintf(buf + k, len - (size_t)k, "%s", err);
}

void coll__ipc_fini(struct coll_ipc *ipc)
{
    const struct coll_cudart *rt = coll__cudart();

    if (!ipc)
        return;
    if (ipc->stream && rt->StreamSynchronize(ipc->stream) != CUDA_SUCCESS)
        rt->GetLastError();
    for (int r = 0; ipc->base && r < ipc->nranks; r++)
        if (ipc->opened[r] && rt->IpcCloseMemHandle(ipc->base[r]) != CUDA_SUCCESS)
            rt->GetLastError();
    if (ipc->mine && rt->Free(ipc->mine) != CUDA_SUCCESS)
        rt->GetLastError();
    if (ipc->event)
        rt->EventDestroy(ipc->event);
    if (ipc->stream)
        rt->StreamDestroy(ipc->stream);
    free(ipc->base);
    free(ipc->opened);
    free(ipc);
}

/* This rank's part before the exchange: scratch, handle, stream, event. Returns whether it
 * can take part; why says what stopped it. */
static bool ipc_local(struct coll_ipc *ipc, struct ipc_rec *rec, char *why, size_t whylen)
{
    const struct coll_cudart *rt = coll__cudart();
    void *p = NULL;
    int rc;

    if (!rt->IpcGetMemHandle || !rt->IpcOpenMemHandle || !rt->IpcCloseMemHandle ||
        !rt->StreamCreateWithFlags) {
        snprintf(why, whylen, "the CUDA runtime lacks cudaIpc*MemHandle");
        return false;
    }
    if (!coll__cuda_have_kernels()) {
        snprintf(why, whylen, "this build has no CUDA kernels (no nvcc)");
        return false;
    }
    if (!coll__stream_waits_on_words()) {
        snprintf(why, whylen, "no cuStreamWaitValue32 (COLL_CUDA_WAIT_VALUE=0, or neither the "
                              "runtime nor libcuda.so.1 has it)");
        return false;
    }
    rc = rt->Malloc(&p, COLL_IPC_SLOTS * ipc->slot_bytes);
    if (rc != CUDA_SUCCESS) {
        cuda_text("cudaMalloc of the IPC scratch", rc, why, whylen);
        return false;
    }
    ipc->mine = p;
    rc = rt->IpcGetMemHandle(&rec->handle, p);
    if (rc != CUDA_SUCCESS) {
        cuda_text("cudaIpcGetMemHandle", rc, why, whylen);
        return false;
    }
    /* non-blocking: the legacy stream must not wait for a user's stream that is held by
     * one of our host functions, nor the other way round */
    rc = rt->StreamCreateWithFlags(&ipc->stream, CUDA_STREAM_NON_BLOCKING);
    if (rc != CUDA_SUCCESS) {
        ipc->stream = NULL;
        cuda_text("cudaStreamCreateWithFlags", rc, why, whylen);
        return false;
    }
    rc = rt->EventCreateWithFlags(&ipc->event, CUDA_EVENT_DISABLE_TIMING);
    if (rc != CUDA_SUCCESS) {
        ipc->event = NULL;
        cuda_text("cudaEventCreateWithFlags", rc, why, whylen);
        return false;
    }
    rec->ptr = (uint64_t)(uintptr_t)p;
    return true;
}

/* Map every peer's scratch; false (why set) at the first that cannot be. */
static bool ipc_open_peers(struct coll_comm *comm, struct coll_ipc *ipc, const struct ipc_rec *all,
                           char *why, size_t whylen)
{
    const struct coll_cudart *rt = coll__cudart();
    int32_t pid = (int32_t)getpid();

    for (int q = 0; q < comm->nranks; q++) {
        void *p = NULL;
        int rc;

        if (q == comm->rank) {
            ipc->base[q] = ipc->mine;
            continue;
        }
        if (all[q].pid == pid) {
            /* CUDA refuses to open a handle in its own process; the pointer works as it is
             * on one device (another one would need peer access, not set up here) */
            if (all[q].device != coll__stream_device(comm)) {
                snprintf(why, whylen, "rank %d is in this process but on CUDA device %d", q,
                         all[q].device);
                return false;
            }
            ipc->base[q] = (uint8_t *)(uintptr_t)all[q].ptr;
            continue;
        }
        rc = rt->IpcOpenMemHandle(&p, all[q].handle, CUDA_IPC_LAZY_PEER);
        if (rc != CUDA_SUCCESS) {
            char what[64];
            snprintf(what, sizeof(what), "cudaIpcOpenMemHandle of rank %d's scratch", q);
            cuda_text(what, rc, why, whylen);
            return false;
        }
        ipc->base[q] = p;
        ipc->opened[q] = true;
    }
    return true;
}

/* Say once per device, by its lowest rank, when several ranks share it. */
static void log_shared_devices(const struct coll_comm *comm, const struct ipc_rec *all)
{
    char list[160];
    size_t len = 0;
    int n = 0;

    for (int q = 0; q < comm->nranks; q++) {
        if (all[q].device != coll__stream_device(comm))
            continue;
        if (q < comm->rank)
            return;
        if (len < sizeof(list))
            len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%d", n ? ", " : "", q);
        n++;
    }
    if (n > 1)
        COLL_INFO(COLL_SUB_INIT,
                  "cuda ipc: ranks %s share CUDA device %d (several ranks per GPU are allowed "
                  "here, unlike NCCL's 'Duplicate GPU detected')",
                  list, coll__stream_device(comm));
}

static struct coll_ipc *ipc_new(const struct coll_comm *comm)
{
    struct coll_ipc *ipc = calloc(1, sizeof(*ipc));

    if (ipc) {
        ipc->base = calloc((size_t)comm->nranks, sizeof(*ipc->base));
        ipc->opened = calloc((size_t)comm->nranks, sizeof(*ipc->opened));
    }
    if (ipc && (!ipc->base || !ipc->opened)) {
        free(ipc->base);
        free(ipc->opened);
        free(ipc);
        return NULL;
    }
    if (ipc) {
        ipc->rank = comm->rank;
        ipc->nranks = comm->nranks;
        ipc->slot_bytes = (size_t)comm->cfg.cuda_staging_bytes / COLL_IPC_SLOTS / 256 * 256;
    }
    return ipc;
}

struct coll_ipc *coll__ipc_prepare(struct coll_comm *comm)
{
    struct coll_ipc *ipc;
    struct ipc_rec rec;

    /* not parse_want: its warning about a bad value comes once, from the setup */
    if (strcmp(comm->cfg.cuda_ipc, "0") == 0 || comm->nhosts != 1 || !(ipc = ipc_new(comm)))
        return NULL;
    memset(&rec, 0, sizeof(rec));
    ipc->capable = ipc_local(ipc, &rec, ipc->why, sizeof(ipc->why));
    ipc->handle = rec.handle;
    return ipc;
}

coll_status_t coll__ipc_setup(struct coll_comm *comm, struct coll_ipc *prep,
                              struct coll_ipc **ipc_p, struct coll_ipc **unused_p, char *why,
                              size_t whylen)
{
    struct ipc_rec rec, *all = NULL;
    struct coll_ipc *ipc;
    coll_request_t *req = NULL; /* non-blocking and waited for: an abort ends the wait */
    char mywhy[256] = "";
    int32_t ok, all_ok = 0;
    bool on = true, forced = false;
    coll_status_t st;
    int want = parse_want(comm);

    *ipc_p = *unused_p = NULL;
    why[0] = '\0';
    ipc = prep ? prep : ipc_new(comm);
    all = calloc((size_t)comm->nranks, sizeof(*all));
    if (!ipc || !all) {
        st = coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the CUDA IPC exchange");
        goto out_free;
    }
    memset(&rec, 0, sizeof(rec));
    rec.magic = IPC_REC_MAGIC;
    rec.want = (uint32_t)want;
    rec.pid = (int32_t)getpid();
    rec.device = coll__stream_device(comm);
    rec.host_hash = comm->self.host_hash;
    rec.slot_bytes = ipc->slot_bytes;
    if (want == WANT_OFF) {
        snprintf(mywhy, sizeof(mywhy), "COLL_CUDA_IPC=0");
    } else if (prep) {
        rec.capable = prep->capable;
        rec.handle = prep->handle;
        rec.ptr = (uint64_t)(uintptr_t)prep->mine;
        snprintf(mywhy, sizeof(mywhy), "%s", prep->why);
    } else {
        rec.capable = ipc_local(ipc, &rec, mywhy, sizeof(mywhy));
    }
    st = comm->path_host->call(&(struct coll_call){.comm = comm, .coll = COLL_COLL_ALLGATHER,
                                                   .sendbuf = &rec, .recvbuf = all,
                                                   .count = sizeof(rec), .dtype = COLL_UINT8,
                                                   .op = COLL_SUM, .peer = -1},
                               &req);
    if (st == COLL_SUCCESS)
        st = comm->path_host->wait(req);
    if (st != COLL_SUCCESS)
        goto out_free;

    /* every rank reads the same table and decides the same way */
    for (int q = 0; q < comm->nranks; q++) {
        if (all[q].want == WANT_ON)
            forced = true;
        if (!on)
            continue;
        if (all[q].magic != IPC_REC_MAGIC) {
            snprintf(why, whylen, "rank %d runs another build of coll", q);
            on = false;
        } else if (all[q].host_hash != all[0].host_hash || comm->nhosts != 1) {
            snprintf(why, whylen, "the comm's ranks are on %d hosts", comm->nhosts);
            on = false;
        } else if (all[q].want == WANT_OFF) {
            snprintf(why, whylen, "rank %d set COLL_CUDA_IPC=0", q);
            on = false;
        } else if (!all[q].capable) {
            snprintf(why, whylen, "rank %d cannot use CUDA IPC%s", q,
                     q == comm->rank && mywhy[0] ? "" : " (its log says why)");
            if (q == comm->rank && mywhy[0])
                snprintf(why + strlen(why), whylen - strlen(why), ": %s", mywhy);
            on = false;
        } else if (all[q].slot_bytes < ipc->slot_bytes) {
            ipc->slot_bytes = all[q].slot_bytes;
        }
    }
    if (on) {
        ok = ipc_open_peers(comm, ipc, all, mywhy, sizeof(mywhy));
        st = comm->path_host->call(&(struct coll_call){.comm = comm,
                                                       .coll = COLL_COLL_ALLREDUCE,
                                                       .sendbuf = &ok, .recvbuf = &all_ok,
                                                       .count = 1, .dtype = COLL_INT32,
                                                       .op = COLL_MIN, .peer = -1},
                                   &req);
        if (st == COLL_SUCCESS)
            st = comm->path_host->wait(req);
        if (st != COLL_SUCCESS)
            goto out_free;
        if (!all_ok) {
            if (!ok)
                snprintf(why, whylen, "rank %d: %s", comm->rank, mywhy);
            else
                snprintf(why, whylen, "a rank could not map a peer's memory (its log says why)");
            on = false;
        }
    }
    if (!on) {
        if (mywhy[0] && want != WANT_OFF)
            COLL_INFO(COLL_SUB_INIT, "rank %d: cuda ipc: not here: %s", comm->rank, mywhy);
        COLL_INFO(COLL_SUB_INIT,
                  "rank %d: cuda ipc: off, stream-ordered calls stage through "
                  "host memory: %s%s",
                  comm->rank, why, forced ? " (COLL_CUDA_IPC=1: those calls fail)" : "");
        if (forced)
            snprintf(why + strlen(why), whylen - strlen(why), "%s",
                     " (a rank set COLL_CUDA_IPC=1)");
        else
            why[0] = '\0';
        st = forced ? COLL_INVALID_USAGE : COLL_SUCCESS;
        goto out_free;
    }
    if (comm->rank == 0)
        COLL_INFO(COLL_SUB_INIT,
                  "cuda ipc: on: %d ranks on one host, %zu-byte slots of device scratch, "
                  "kernels read the peers' memory",
                  comm->nranks, ipc->slot_bytes);
    log_shared_devices(comm, all);
    free(all);
    *ipc_p = ipc;
    return COLL_SUCCESS;

out_free:
    free(all);
    /* not freed here: cudaFree waits for the whole device, and a stream may be held by a
     * host function of this very call */
    *unused_p = ipc;
    return st;
}

/* ---- 3 the work of a piece ----------------------------------------------------------- */

coll_status_t coll__ipc_compute(struct coll_comm *comm, struct coll_ipc *ipc,
                                enum coll_coll coll, int root, size_t piece, size_t n,
                                size_t slot, coll_dtype_t dtype, coll_op_t op)
{
    const struct coll_cudart *rt = coll__cudart();
    size_t esize = coll__dtype_size(dtype), s = slot * ipc->slot_bytes;
    size_t out_off = in_mult(coll, ipc->nranks) * piece * esize, lo = 0, hi = n, at = 0;
    const void *src[COLL_CUDA_MAX_SRCS];
    void *dst[1];
    coll_status_t st;
    int rc;

    switch (coll) {
    case COLL_COLL_BROADCAST:
        if (ipc->rank != root)
            return COLL_SUCCESS;
        /* fall through */
    case COLL_COLL_ALLGATHER:
        rc = rt->MemcpyAsync(ipc->mine + s + out_off, ipc->mine + s, n * esize,
                             COLL_CUDA_MEMCPY_DEFAULT, ipc->stream);
        if (rc != CUDA_SUCCESS) {
            char err[256];
            rt->GetLastError();
            coll__cuda_error_text(rc, err, sizeof(err));
            return coll__error(comm, COLL_CUDA_ERROR,
                               "cudaMemcpyAsync of a piece into the IPC scratch failed: %s", err);
        }
        return COLL_SUCCESS;
    case COLL_COLL_ALLREDUCE:
    case COLL_COLL_REDUCE:
        coll__ipc_slice(n, ipc->nranks, ipc->rank, &lo, &hi);
        at = lo;
        break;
    case COLL_COLL_REDUCE_SCATTER:
        at = (size_t)ipc->rank * piece;
        break;
    default:
        return coll__error(comm, COLL_INTERNAL_ERROR, "no IPC path for stream call %s",
                           coll__coll_name(coll));
    }
    if (hi == lo)
        return COLL_SUCCESS;
    /* (... ((in_0 op in_1) op in_2) ...) in rank order, COLL_CUDA_MAX_SRCS inputs per
     * launch; later launches fold into the result in place. AVG: the launch that adds the
     * last rank divides the sum it rounded by the comm size, so each element of the slice
     * is divided once, before anyone gathers it (the host's sum, then coll__reduce_div);
     * the launches before it only sum (divisor 1). */
    dst[0] = ipc->mine + s + out_off + lo * esize;
    for (int q0 = 0, k; q0 < ipc->nranks; q0 += k) {
        int first = q0 == 0 ? 0 : 1;
        uint32_t divisor;

        if (first)
            src[0] = dst[0];
        k = ipc->nranks - q0 < COLL_CUDA_MAX_SRCS - first ? ipc->nranks - q0
                                                          : COLL_CUDA_MAX_SRCS - first;
        for (int i = 0; i < k; i++)
            src[first + i] = ipc->base[q0 + i] + s + at * esize;
        divisor = op == COLL_AVG && q0 + k == ipc->nranks ? (uint32_t)ipc->nranks : 1;
        st = coll__cuda_reduce_copy(comm, dst, 1, src, first + k, hi - lo, dtype, op, divisor,
                                    ipc->stream);
        if (st != COLL_SUCCESS)
            return st;
    }
    return COLL_SUCCESS;
}
