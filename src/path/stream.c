/*
 * stream.c - stream-ordered collectives: coll_allreduce_stream and its siblings take a
 * cudaStream_t, return once their work is queued on it, and leave their results in recvbuf
 * when the stream gets there, as NCCL's do. The collective itself is the host one (api.c),
 * run on page-locked staging memory by a worker thread of the comm; the stream only copies
 * and waits.
 *
 * Divisions: 1 pieces and stream order (pure), 2 the comm's stream state: staging, events,
 * worker, 3 the worker (with the CUDA IPC path's part), 4 issuing an op onto its streams,
 * 5 CUDA checks, groups and submitting, 6 the path (path.h's coll__path_stream).
 *
 * The public calls are the API's (src/api/paths.c): it checks their arguments, asks the
 * chooser, and hands the call to this path's submit hook. The host collectives below go
 * back up through the comm's path_host hooks (path.h), the public calls themselves.
 *
 * How one call moves (a group's calls move together, piece by piece):
 *
 *   user's stream:  D2H 0 | D2H 1 | .. | D2H K-1 | WAIT 0 | H2D 0 | D2H K | WAIT 1 | H2D 1 ..
 *                       \ event 0          \ event K-1          ^ done 0
 *   worker thread:   event 0 reached -> coll_i<collective>(slot 0) ... request 0 done -+
 *
 * The message is cut into pieces of COLL_CUDA_STAGING_BYTES / 8 (times nranks for the
 * collectives with a block per rank), and the staging memory into K = 4 slots (fewer when
 * a group needs more room per piece). For piece j, the stream copies its input into slot
 * j % K (D2H) and records an event; the worker waits for that event, then runs the host
 * collective on the slot as a non-blocking request, so up to K pieces are on the network
 * while the stream copies the next ones. On the stream, a host function per piece (WAIT)
 * blocks on a condition variable until the worker says the piece's collective is done, and
 * the copy of its result back to the device (H2D) follows. Piece j + K refills slot j % K
 * only after WAIT j and H2D j on the stream, so a slot is never overwritten while its
 * collective runs or before its result has left. The worker completes piece j - K before it
 * waits for piece j's event, which is what lets the stream get there.
 *
 * Collectives whose buffers hold a block per rank (all-gather, reduce-scatter, all-to-all)
 * are cut the same way, with one copy per rank and piece (the columns [o, o + n) of every
 * block): every piece is an independent collective of the same kind.
 *
 * Buffers that are not device memory (plain, page-locked or managed host memory) are not
 * staged: the stream records an event and gets a WAIT, and the worker runs the collective
 * on the user's buffers once the event is reached. So host buffers with a stream are
 * ordered with the stream's other work as device buffers are.
 *
 * Between the ranks of one host, single calls of all-reduce, reduce-scatter, all-gather,
 * broadcast and reduce skip the staging: the CUDA IPC path (ipc.c, where the protocol is),
 * which the same worker runs (run_op_ipc). The comm decides on it at its first such call,
 * on the worker; a call issued before the decision is known runs in worker mode: its
 * stream gets only a start event and one WAIT, and the worker moves the data whichever
 * way was decided (run_op_ipc, or run_op_staged_worker with the same pieces as staging).
 *
 * Rules that keep this safe:
 *   - host functions make no CUDA call (CUDA forbids it) and never wait longer than twice
 *     COLL_TIMEOUT_MS; the worker waits for events by polling cudaEventQuery, spinning
 *     briefly and then sleeping, so that it notices an abort;
 *   - a failure (a peer's death, a timeout, a CUDA error) fails the comm, as a host
 *     collective's failure does (coll_comm_get_async_error then reports it), and releases
 *     every waiting host function: a stream is never left blocked;
 *   - the comm's ops use its staging one after the other: an op on another stream than the
 *     previous op first makes its stream wait for the previous op's end (an event per
 *     stream of that op), so staging is never shared by two ops at once;
 *   - every rank cuts a call the same way: the piece size depends only on count, dtype,
 *     nranks and COLL_CUDA_STAGING_BYTES, never on what else is in a group.
 */
#include "stream.h"

#include "flat.h"
#include "ipc.h"
#include "path.h"

#include "../algo/cost.h"

#include "../core/agree.h"
#include "../core/internal.h"
#include "../core/topo.h"

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* CUDA values used here (driver_types.h) */
#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_READY 600
#define CUDA_HOST_ALLOC_PORTABLE 1
#define CUDA_EVENT_DISABLE_TIMING 2

#define STREAM_SLOTS 4        /* pieces in flight per op */
#define COMM_DEV_UNDECIDED (-2)
#define STREAM_PIECE_DIV 8    /* a piece is COLL_CUDA_STAGING_BYTES / 8 */

/* ---- 1 pieces and stream order ------------------------------------------------------- */

size_t coll__stream_mult(enum coll_coll coll, int nranks)
{
    const struct coll_coll_desc *d = coll__coll_desc(coll);

    return d->send_blocks == COLL_BLOCKS_N || d->recv_blocks == COLL_BLOCKS_N ? (size_t)nranks
                                                                              : 1;
}

size_t coll__stream_piece_elems(enum coll_coll coll, int nranks, size_t count, size_t esize,
                                size_t piece_bytes)
{
    size_t per = coll__stream_mult(coll, nranks) * esize;
    size_t n = per ? piece_bytes / per : 0;

    return n < count ? n : count;
}

void coll__stream_slot_args(enum coll_coll coll, int rank, size_t n, size_t esize,
                            size_t *send_off_p, size_t *recv_off_p)
{
    const struct coll_coll_desc *d = coll__coll_desc(coll);

    *send_off_p = *recv_off_p = 0;
    /* in place, as the host calls define it (the row's in-place block): all-gather's input
     * is its own block of the output, reduce-scatter's output its own block of the input */
    if (d->inplace != COLL_AT_RANK)
        return;
    if (d->recv_blocks == COLL_BLOCKS_N && d->send_blocks == COLL_BLOCKS_ONE)
        *send_off_p = (size_t)rank * n * esize;
    else if (d->send_blocks == COLL_BLOCKS_N && d->recv_blocks == COLL_BLOCKS_ONE)
        *recv_off_p = (size_t)rank * n * esize;
}

int coll__stream_rows(enum coll_coll coll, uint8_t dir, int rank, int nranks, int root,
                      size_t count, size_t esize, size_t piece, size_t j, bool out,
                      struct coll_stream_row *rows)
{
    const struct coll_coll_desc *d = coll__coll_desc(coll);
    size_t o = j * piece, n = count - o < piece ? count - o : piece;
    size_t so, ro;
    int nr = 0;

    /* nothing to copy that way: a send's output, a non-root's broadcast input, ... */
    if (out ? !coll__desc_uses_recv(d, rank, root, dir)
            : !coll__desc_uses_send(d, rank, root, dir))
        return 0;
    coll__stream_slot_args(coll, rank, n, esize, &so, &ro);
    /* a buffer of a block per rank: the piece's columns [o, o + n) of every block, block r
     * at r * n in the slot; else the piece itself, at the in-place offset */
    if (!d->p2p && (out ? d->recv_blocks : d->send_blocks) == COLL_BLOCKS_N) {
        for (int r = 0; r < nranks; r++)
            rows[nr++] = (struct coll_stream_row){((size_t)r * count + o) * esize,
                                                  (size_t)r * n * esize, n * esize, 0};
        return nr;
    }
    rows[nr++] = (struct coll_stream_row){o * esize, out ? ro : so, n * esize, 0};
    return nr;
}

size_t coll__stream_order(size_t npieces, size_t nslots, struct coll_stream_step *out)
{
    size_t k = 0, first_left;

    for (size_t j = 0; j < npieces; j++) {
        out[k++] = (struct coll_stream_step){COLL_SSTEP_D2H, j};
        if (j + 1 >= nslots) {
            out[k++] = (struct coll_stream_step){COLL_SSTEP_WAIT, j + 1 - nslots};
            out[k++] = (struct coll_stream_step){COLL_SSTEP_H2D, j + 1 - nslots};
        }
    }
    first_left = npieces + 1 >= nslots ? npieces + 1 - nslots : 0;
    for (size_t i = first_left; i < npieces; i++) {
        out[k++] = (struct coll_stream_step){COLL_SSTEP_WAIT, i};
        out[k++] = (struct coll_stream_step){COLL_SSTEP_H2D, i};
    }
    return k;
}

/* ---- 2 the comm's stream state ------------------------------------------------------- */

/* One checked call, as recorded (in a group) or issued. */
struct scall {
    struct coll_comm *comm;
    enum coll_coll coll;
    uint8_t dir; /* a send or a receive: COLL_STEP_SEND or COLL_STEP_RECV */
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    coll_dtype_t dtype;
    coll_op_t op;
    int root; /* root, or peer for send/recv */
    void *stream;
    bool staged; /* a buffer is device memory: pieces through staging */
    bool send_dev; /* sendbuf is device memory */
    bool ipc;      /* through the comm's CUDA IPC scratch (ipc.c), not staging */
    bool wcopy;    /* ipc, with a host sendbuf: the worker copies it in, not the stream */
    bool worker;   /* issued before the comm decided on IPC: the stream only marks the
                    * call's start and end, and the worker decides, then moves the data */
    /* set when the op is laid out */
    size_t esize, piece, npieces;
    size_t region_off; /* of this call in a slot of its comm's staging */
    size_t first_event; /* index of its piece 0 in the op's events */
};

/* A piece as its host functions see it: done (with the collective's status) or not. */
struct spiece {
    struct sop *op;
    bool done;
};

/* One op: a call, or a group's calls (on one or several comms), with their pieces. Freed by
 * whoever drops the last reference: the issuing thread, the worker(s), or the last host
 * function, which is why it holds no CUDA resource when that happens. */
struct sop {
    _Atomic int refs;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* pieces done, workers arrived, op finished */
    int ncalls;
    struct scall *calls;
    size_t npieces, nslots;
    struct spiece *pieces;
    void **events;           /* one per (call, piece), the call's D2H of that piece */
    size_t nevents;
    int64_t hostfn_wait_ms;  /* 0: forever */
    struct coll_comm *owner; /* the comm whose worker runs it */
    int ncomms, narrived;    /* workers that reached it, the owner's included */
    bool cancelled;          /* a comm of the op was destroyed before it ran */
    bool finished;
    coll_status_t status;
    bool hostfn_timed_out;
    /* WAITs by cuStreamWaitValue32: a word of the flag pool, its value when the op took
     * it, and how many leading pieces the word says are done; flag < 0: none taken */
    int flag;
    uint32_t flag_base;
    size_t flag_done;
};

struct qent {
    struct sop *op;
    struct qent *next;
};

/* The end of the comm's last op on each of its streams. */
struct stail {
    void *stream;
    void *event;
};

struct coll_stream_ctx {
    struct coll_comm *comm;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct qent *head, *tail;
    bool stop;
    pthread_t thread;
    uint8_t *staging; /* page-locked, cap bytes */
    size_t cap;
    struct stail *tails;
    int ntails;
    void **evpool; /* idle events, reused for pieces */
    size_t nev, evcap;
    /* CUDA IPC (ipc.c): decided by the worker at the first call that could use it;
     * written by the worker only, read under mu */
    _Atomic int ipc_state;  /* 0 undecided, 1 on, -1 off */
    struct coll_ipc *ipc;
    struct coll_ipc *ipc_unused; /* what a decision against IPC left, freed at fini */
    struct coll_ipc *ipc_prep;   /* this rank's part, made at the first call (ctx_get) */
    /* the worker's own copies (calls issued before the decision, staged): a
     * non-blocking stream and an event on it, made when first needed */
    void *wstream, *wevent;
};

/* The stream path's slot of a comm (comm->path_state[COLL_PATH_STATE_STREAM]), made at
 * comm init (coll__stream_comm_init) and freed by coll__stream_comm_fini. */
struct stream_slot {
    /* the CUDA device current at init (-1 without CUDA; COMM_DEV_UNDECIDED: a process that
     * had not loaded CUDA yet, decided at the first stream-ordered call) */
    int cuda_dev;
    struct coll_stream_ctx *ctx; /* staging and the worker, made on first use */
};

static struct stream_slot *slot_of(const struct coll_comm *comm)
{
    return comm->path_state[COLL_PATH_STATE_STREAM];
}

static struct coll_stream_ctx *ctx_of(const struct coll_comm *comm)
{
    return slot_of(comm)->ctx;
}

int coll__stream_device(const struct coll_comm *comm)
{
    return slot_of(comm)->cuda_dev;
}

static void flag_advance(struct sop *op, bool all);

static void sop_unref(struct sop *op)
{
    if (atomic_fetch_sub(&op->refs, 1) != 1)
        return;
    if (op->flag >= 0) /* an op that failed before it was queued: its word goes back */
        flag_advance(op, true);
    pthread_mutex_destroy(&op->mu);
    pthread_cond_destroy(&op->cv);
    free(op->pieces);
    free(op->events);
    free(op->calls);
    free(op);
}

static coll_status_t cuda_fail(struct coll_comm *comm, int rc, const char *what)
{
    char err[256];

    coll__cudart()->GetLastError();
    coll__cuda_error_text(rc, err, sizeof(err));
    return coll__error(comm, COLL_CUDA_ERROR, "%s failed: %s", what, err);
}

/* The comm fails as a host collective's failure fails it: first error wins, peers learn. */
static void comm_fail(struct coll_comm *comm, coll_status_t st)
{
    pthread_mutex_lock(&comm->lock);
    if (atomic_load(&comm->failed) == COLL_SUCCESS)
        coll__comm_fail(comm, st);
    pthread_mutex_unlock(&comm->lock);
}

/*
 * The flag pool: page-locked words, one per op in flight, that WAITs watch through
 * cuStreamWaitValue32 instead of blocking in a host function. CUDA documents that a host
 * function must not wait for work not ordered before it (it holds CUDA's callback thread,
 * which may hold other streams' work back), and a WAIT waits for the worker, whose CUDA
 * IPC copies and kernels for that very piece are on another stream. A word only
 * ever grows (an op starts from the value its last op left, and its piece j waits for
 * base + j + 1), so a word can go to the next op as soon as its op is over: a stream still
 * behind an old WAIT sees a value at least as large as the one it waits for. Allocated once
 * per process and never freed, since a stream may read a word after its comm is gone.
 */
#define FLAG_WORDS 4096

static struct {
    pthread_mutex_t mu;
    bool tried, off;
    volatile uint32_t *words; /* page-locked, mapped */
    unsigned long long dev;   /* the device address of words[0] */
    int free[FLAG_WORDS], nfree;
} flags = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Under flags.mu: the words, made on first use. */
static void flag_pool_init(void)
{
    const struct coll_cudart *rt = coll__cudart();

    if (!flags.tried) {
        void *mem = NULL, *dev = NULL;

        flags.tried = true;
        flags.off = true;
        /* portable and mapped: every device reads the words (cudaHostAllocMapped = 2) */
        if (rt->StreamWaitValue32 && rt->HostAlloc &&
            rt->HostAlloc(&mem, FLAG_WORDS * sizeof(uint32_t), CUDA_HOST_ALLOC_PORTABLE | 2) ==
                CUDA_SUCCESS) {
            memset(mem, 0, FLAG_WORDS * sizeof(uint32_t));
            if (!rt->HostGetDevicePointer || rt->HostGetDevicePointer(&dev, mem, 0) != CUDA_SUCCESS) {
                rt->GetLastError();
                dev = mem; /* unified addressing: the host address is the device's */
            }
            flags.words = mem;
            flags.dev = (unsigned long long)(uintptr_t)dev;
            for (int i = 0; i < FLAG_WORDS; i++)
                flags.free[i] = FLAG_WORDS - 1 - i;
            flags.nfree = FLAG_WORDS;
            flags.off = false;
        } else if (rt->StreamWaitValue32) {
            rt->GetLastError();
        }
        COLL_INFO(COLL_SUB_COLL, "stream waits: %s",
                  flags.off ? "host functions (no cuStreamWaitValue32 or no page-locked words)"
                            : "cuStreamWaitValue32 on page-locked words");
    }
}

bool coll__stream_waits_on_words(void)
{
    bool on;

    pthread_mutex_lock(&flags.mu);
    flag_pool_init();
    on = !flags.off;
    pthread_mutex_unlock(&flags.mu);
    return on;
}

/* A word for op, or -1 (host functions then): no cuStreamWaitValue32, no page-locked
 * memory, or every word taken. */
static int flag_take(struct sop *op)
{
    int w = -1;

    pthread_mutex_lock(&flags.mu);
    flag_pool_init();
    if (!flags.off && flags.nfree > 0) {
        w = flags.free[--flags.nfree];
        op->flag_base = flags.words[w];
    }
    pthread_mutex_unlock(&flags.mu);
    op->flag = w;
    op->flag_done = 0;
    return w;
}

/* After cuStreamWaitValue32 failed on a stream: host functions from now on. */
static void flag_turn_off(const char *why)
{
    pthread_mutex_lock(&flags.mu);
    if (!flags.off)
        COLL_WARN(COLL_SUB_COLL, "cuStreamWaitValue32 failed (%s): stream waits use host "
                                 "functions from now on", why);
    flags.off = true;
    pthread_mutex_unlock(&flags.mu);
}

/* Under op->mu: publish the leading done pieces; at the end (all), give the word back. */
static void flag_advance(struct sop *op, bool all)
{
    size_t d = op->flag_done;

    if (op->flag < 0)
        return;
    while (d < op->npieces && op->pieces[d].done)
        d++;
    if (all)
        d = op->npieces;
    if (d != op->flag_done || all) {
        op->flag_done = d;
        /* the results this piece's stream copies next are written before the word */
        __atomic_store_n(&flags.words[op->flag], op->flag_base + (uint32_t)d, __ATOMIC_RELEASE);
    }
    if (all) {
        pthread_mutex_lock(&flags.mu);
        flags.free[flags.nfree++] = op->flag;
        pthread_mutex_unlock(&flags.mu);
        op->flag = -1;
    }
}

/* Mark every piece not yet done as done with st and wake their host functions. */
static void release_all(struct sop *op, coll_status_t st)
{
    pthread_mutex_lock(&op->mu);
    if (op->status == COLL_SUCCESS)
        op->status = st;
    for (size_t j = 0; j < op->npieces; j++)
        op->pieces[j].done = true;
    op->finished = true;
    flag_advance(op, true);
    pthread_cond_broadcast(&op->cv);
    pthread_mutex_unlock(&op->mu);
}

static void piece_done(struct sop *op, size_t j)
{
    pthread_mutex_lock(&op->mu);
    op->pieces[j].done = true;
    flag_advance(op, false);
    pthread_cond_broadcast(&op->cv);
    pthread_mutex_unlock(&op->mu);
}

static void *worker_main(void *arg);
static coll_status_t enqueue_copies(const struct scall *c, struct coll_stream_ctx *ctx,
                                    size_t nslots, size_t slot_bytes, size_t j, bool out,
                                    void *stream);

/* dev's PCI address in sysfs's spelling ("0000:41:00.0"); "" when CUDA does not say. */
static void gpu_busid(int dev, char *buf, size_t n)
{
    const struct coll_cudart *rt = coll__cudart();
    int bus, slot, dom;

    buf[0] = '\0';
    /* cudaDevAttrPciBusId 33, cudaDevAttrPciDeviceId 34, cudaDevAttrPciDomainId 50 */
    if (rt->DeviceGetAttribute(&bus, 33, dev) != CUDA_SUCCESS ||
        rt->DeviceGetAttribute(&slot, 34, dev) != CUDA_SUCCESS ||
        rt->DeviceGetAttribute(&dom, 50, dev) != CUDA_SUCCESS) {
        rt->GetLastError();
        return;
    }
    snprintf(buf, n, "%04x:%02x:%02x.0", (unsigned)dom & 0xffffu, (unsigned)bus & 0xffu,
             (unsigned)slot & 0x1fu);
}

/* The comm's state, made on first use: the worker and the staging memory. */
static coll_status_t ctx_get(struct coll_comm *comm, struct coll_stream_ctx **ctx_p)
{
    const struct coll_cudart *rt = coll__cudart();
    struct coll_stream_ctx *ctx = ctx_of(comm);
    void *mem = NULL;
    int rc;

    if (ctx) {
        *ctx_p = ctx;
        return COLL_SUCCESS;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the stream state");
    ctx->comm = comm;
    ctx->cap = (size_t)comm->cfg.cuda_staging_bytes;
    /* the kernels the worker may launch, loaded now, while nothing of ours is queued */
    if (slot_of(comm)->cuda_dev >= 0) {
        int prev = -1;

        if (rt->GetDevice(&prev) != CUDA_SUCCESS) {
            rt->GetLastError();
            prev = -1;
        }
        int dev = slot_of(comm)->cuda_dev;

        if (prev == dev || rt->SetDevice(dev) == CUDA_SUCCESS) {
            coll__cuda_kernels_load(dev);
            /* the IPC scratch too: cudaMalloc may wait for the device's streams */
            ctx->ipc_prep = coll__ipc_prepare(comm);
            if (prev >= 0 && prev != dev && rt->SetDevice(prev) != CUDA_SUCCESS)
                rt->GetLastError();
        } else {
            rt->GetLastError();
        }
    }
    /* portable: the worker and other threads may run on another current device */
    rc = rt->HostAlloc(&mem, ctx->cap, CUDA_HOST_ALLOC_PORTABLE);
    if (rc != CUDA_SUCCESS) {
        coll__ipc_fini(ctx->ipc_prep); /* nothing queued yet: nothing uses it */
        free(ctx);
        return cuda_fail(comm, rc, "cudaHostAlloc of COLL_CUDA_STAGING_BYTES");
    }
    ctx->staging = mem;
    pthread_mutex_init(&ctx->mu, NULL);
    pthread_cond_init(&ctx->cv, NULL);
    if (pthread_create(&ctx->thread, NULL, worker_main, ctx) != 0) {
        rt->FreeHost(mem);
        coll__ipc_fini(ctx->ipc_prep);
        pthread_mutex_destroy(&ctx->mu);
        pthread_cond_destroy(&ctx->cv);
        free(ctx);
        return coll__error(comm, COLL_SYSTEM_ERROR, "cannot start the stream worker thread");
    }
    if (slot_of(comm)->cuda_dev >= 0) {
        char busid[16];

        gpu_busid(slot_of(comm)->cuda_dev, busid, sizeof(busid));
        coll__topo_comm_gpu(comm, slot_of(comm)->cuda_dev, busid, &ctx->thread);
    }
    slot_of(comm)->ctx = ctx;
    *ctx_p = ctx;
    return COLL_SUCCESS;
}

static coll_status_t event_get(struct coll_stream_ctx *ctx, void **ev_p)
{
    const struct coll_cudart *rt = coll__cudart();
    void *ev = NULL;
    int rc;

    pthread_mutex_lock(&ctx->mu);
    if (ctx->nev > 0)
        ev = ctx->evpool[--ctx->nev];
    pthread_mutex_unlock(&ctx->mu);
    if (!ev) {
        rc = rt->EventCreateWithFlags(&ev, CUDA_EVENT_DISABLE_TIMING);
        if (rc != CUDA_SUCCESS)
            return cuda_fail(ctx->comm, rc, "cudaEventCreateWithFlags");
    }
    *ev_p = ev;
    return COLL_SUCCESS;
}

/* An event goes back to the pool even while its last record is still pending: recording it
 * again later simply moves it, as CUDA defines. */
static void event_put(struct coll_stream_ctx *ctx, void *ev)
{
    if (!ev)
        return;
    pthread_mutex_lock(&ctx->mu);
    if (ctx->nev == ctx->evcap) {
        size_t cap = ctx->evcap ? 2 * ctx->evcap : 32;
        void **p = realloc(ctx->evpool, cap * sizeof(*p));
        if (!p) {
            pthread_mutex_unlock(&ctx->mu);
            coll__cudart()->EventDestroy(ev);
            return;
        }
        ctx->evpool = p;
        ctx->evcap = cap;
    }
    ctx->evpool[ctx->nev++] = ev;
    pthread_mutex_unlock(&ctx->mu);
}

/* Whether the process uses CUDA already: COLL_CUDA_LIBRARY names a runtime, or one is
 * loaded. Loading libcudart (and finding no device) costs about 0.1 s, which a process that
 * never touches CUDA should not pay at every comm init. */
static bool cuda_in_use(void)
{
    const char *lib = getenv("COLL_CUDA_LIBRARY");
    void *h;

    if (lib && *lib)
        return true;
    h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libcudart.so", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return false;
    dlclose(h);
    return true;
}

/* The calling thread's device becomes the comm's (-1 without CUDA). */
static void comm_take_device(struct coll_comm *comm)
{
    const struct coll_cudart *rt;
    int dev = -1;

    slot_of(comm)->cuda_dev = -1;
    if (!coll__cuda_available())
        return;
    rt = coll__cudart();
    if (rt->GetDevice(&dev) != CUDA_SUCCESS) {
        rt->GetLastError();
        dev = -1;
    }
    slot_of(comm)->cuda_dev = dev;
    if (dev >= 0) {
        char busid[16];

        gpu_busid(dev, busid, sizeof(busid));
        COLL_INFO(COLL_SUB_INIT, "rank %d: comm on CUDA device %d (PCI %s)", comm->rank, dev,
                  busid[0] ? busid : "unknown");
        coll__topo_comm_gpu(comm, dev, busid, NULL);
    }
}

coll_status_t coll__stream_comm_init(struct coll_comm *comm)
{
    struct stream_slot *slot = calloc(1, sizeof(*slot));

    if (!slot)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the stream path's state");
    comm->path_state[COLL_PATH_STATE_STREAM] = slot;
    /* not decided yet: the first stream-ordered call takes its thread's device */
    slot->cuda_dev = COMM_DEV_UNDECIDED;
    if (cuda_in_use())
        comm_take_device(comm);
    return COLL_SUCCESS;
}

/* ---- 3 the worker -------------------------------------------------------------------- */

/* CLOCK_REALTIME (the condition variables' clock) ms from now */
static void deadline_after(struct timespec *dl, int64_t ms)
{
    clock_gettime(CLOCK_REALTIME, dl);
    dl->tv_sec += (time_t)(ms / 1000);
    dl->tv_nsec += (long)(ms % 1000) * 1000000;
    if (dl->tv_nsec >= 1000000000) {
        dl->tv_sec++;
        dl->tv_nsec -= 1000000000;
    }
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Wait until the stream has reached ev: poll, spinning COLL_SPIN_US, then sleeping in
 * growing steps; give up when the comm fails (an abort) or the stream does not get there
 * within COLL_TIMEOUT_MS. */
static coll_status_t wait_event_for(struct coll_stream_ctx *ctx, void *ev, const char *what)
{
    const struct coll_cudart *rt = coll__cudart();
    struct coll_comm *comm = ctx->comm;
    uint64_t t0 = coll__now_ns(), spin_ns = (uint64_t)comm->cfg.spin_us * 1000;
    uint64_t limit_ns = (uint64_t)comm->cfg.timeout_ms * 1000000;
    long nap = 10;
    int rc, failed;

    for (;;) {
        rc = rt->EventQuery(ev);
        if (rc == CUDA_SUCCESS)
            return COLL_SUCCESS;
        if (rc != CUDA_ERROR_NOT_READY)
            return cuda_fail(comm, rc, "cudaEventQuery of a stream op's piece");
        failed = atomic_load(&comm->failed);
        if (failed != COLL_SUCCESS)
            return (coll_status_t)failed;
        if (limit_ns && coll__now_ns() - t0 > limit_ns)
            return coll__error(comm, COLL_TIMEOUT, "%s within COLL_TIMEOUT_MS (%lld ms)", what,
                               (long long)comm->cfg.timeout_ms);
        if (coll__now_ns() - t0 < spin_ns) {
            sched_yield();
            continue;
        }
        sleep_us(nap);
        if (nap < 1000)
            nap *= 2;
    }
}

static coll_status_t wait_event(struct coll_stream_ctx *ctx, void *ev)
{
    return wait_event_for(ctx, ev, "the stream did not reach a queued collective");
}

/* c's host call on s and r with n elements, through the API's hooks (path.h): blocking
 * (req_p NULL; recorded instead in the calling thread's host group, when one is open) or a
 * request. */
static coll_status_t host_call(const struct scall *c, const void *s, void *r, size_t n,
                               coll_request_t **req_p)
{
    struct coll_call h = {.comm = c->comm, .coll = c->coll, .sendbuf = s, .recvbuf = r,
                          .count = n, .dtype = c->dtype, .op = c->op, .root = c->root,
                          .peer = -1};

    if (c->coll == COLL_COLL_SENDRECV) {
        h.p2p = c->dir;
        h.peer = c->root;
        h.root = 0;
    }
    return c->comm->path_host->call(&h, req_p);
}

/* The host call of piece j of c, on the slot (or the user's buffers); req_p NULL: blocking
 * (inside the worker's group). */
static coll_status_t issue_call(const struct scall *c, struct coll_stream_ctx *ctx, size_t nslots,
                                size_t slot_bytes, size_t j, coll_request_t **req_p)
{
    const void *s = c->sendbuf;
    void *r = c->recvbuf;
    size_t n = c->count;

    if (c->staged) {
        uint8_t *base = ctx->staging + (j % nslots) * slot_bytes + c->region_off;
        size_t so, ro, o = j * c->piece;

        n = c->count - o < c->piece ? c->count - o : c->piece;
        coll__stream_slot_args(c->coll, c->comm->rank, n, c->esize, &so, &ro);
        s = base + so;
        r = base + ro;
    }
    return host_call(c, s, r, n, req_p);
}

/* Bytes of one slot of comm's staging in op: its calls' regions. */
static size_t slot_bytes_of(const struct sop *op, const struct coll_comm *comm)
{
    size_t b = 0;

    for (int k = 0; k < op->ncalls; k++)
        if (op->calls[k].comm == comm && op->calls[k].staged && !op->calls[k].ipc &&
            !op->calls[k].worker)
            b += op->calls[k].piece * coll__stream_mult(op->calls[k].coll, comm->nranks) *
                 op->calls[k].esize;
    return b;
}

/* Piece j: wait until every stream has copied it in, then run its collective(s). One call:
 * non-blocking, *req_p set; several: one host group, blocking, done on return. */
static coll_status_t run_piece(struct sop *op, size_t j, coll_request_t **req_p)
{
    const struct coll_path_host *host = op->owner->path_host;
    coll_status_t st = COLL_SUCCESS, st2;

    for (int k = 0; k < op->ncalls; k++) {
        struct scall *c = &op->calls[k];
        if (j >= c->npieces)
            continue;
        st = wait_event(ctx_of(c->comm), op->events[c->first_event + j]);
        if (st != COLL_SUCCESS)
            return st;
    }
    if (op->ncalls == 1) {
        struct scall *c = &op->calls[0];
        return issue_call(c, ctx_of(c->comm), op->nslots, slot_bytes_of(op, c->comm), j, req_p);
    }
    host->group_start();
    for (int k = 0; k < op->ncalls; k++) {
        struct scall *c = &op->calls[k];
        if (j < c->npieces && st == COLL_SUCCESS)
            st = issue_call(c, ctx_of(c->comm), op->nslots, slot_bytes_of(op, c->comm), j, NULL);
    }
    /* a failed check is returned by coll_group_end too, with nothing issued */
    st2 = host->group_end();
    *req_p = NULL;
    return st != COLL_SUCCESS ? st : st2;
}

/* Queue on stream the copies of piece j between the user's buffers and a scratch, as
 * rows_fn lays them out (coll__stream_rows for staging, coll__ipc_rows for CUDA IPC): a
 * row's scratch address is slot + slot_off past peers[row.peer] (the ranks' mapped
 * scratch) when peers is given and the copy goes out, past mine otherwise. */
static coll_status_t queue_copies(const struct scall *c,
                                  int (*rows_fn)(enum coll_coll, uint8_t, int, int, int, size_t,
                                                 size_t, size_t, size_t, bool,
                                                 struct coll_stream_row *),
                                  uint8_t *const *peers, uint8_t *mine, size_t slot, size_t j,
                                  bool out, void *stream, const char *scratch)
{
    const struct coll_cudart *rt = coll__cudart();
    struct coll_comm *comm = c->comm;
    struct coll_stream_row *rows, one[1];
    coll_status_t st = COLL_SUCCESS;
    char what[96];
    int n, rc;

    rows = comm->nranks > 1 ? malloc((size_t)comm->nranks * sizeof(*rows)) : one;
    if (!rows)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory queueing copies");
    n = rows_fn(c->coll, c->dir, comm->rank, comm->nranks, c->root, c->count, c->esize, c->piece,
                j, out, rows);
    for (int i = 0; i < n && st == COLL_SUCCESS; i++) {
        uint8_t *dev = (out && peers ? peers[rows[i].peer] : mine) + slot + rows[i].slot_off;

        if (out)
            rc = rt->MemcpyAsync((uint8_t *)c->recvbuf + rows[i].user_off, dev, rows[i].bytes,
                                 COLL_CUDA_MEMCPY_DEFAULT, stream);
        else
            rc = rt->MemcpyAsync(dev, (const uint8_t *)c->sendbuf + rows[i].user_off,
                                 rows[i].bytes, COLL_CUDA_MEMCPY_DEFAULT, stream);
        if (rc != CUDA_SUCCESS) {
            snprintf(what, sizeof(what),
                     out ? "cudaMemcpyAsync from %s to recvbuf"
                         : "cudaMemcpyAsync from sendbuf to %s",
                     scratch);
            st = cuda_fail(comm, rc, what);
        }
    }
    if (rows != one)
        free(rows);
    return st;
}

/* ---- the CUDA IPC path: ipc.c has the protocol and why its slots are safe to reuse ---- */

/* The copies of piece j of an IPC call: in, into this rank's slot (on the user's stream
 * when issued, or on the comm's IPC stream for a host sendbuf), or out, from the ranks'
 * "out" regions into recvbuf (on the IPC stream, by the worker). */
static coll_status_t ipc_copies(const struct scall *c, struct coll_ipc *ipc, size_t j, bool out,
                                void *stream)
{
    return queue_copies(c, coll__ipc_rows, ipc->base, ipc->mine,
                        (j % COLL_IPC_SLOTS) * ipc->slot_bytes, j, out, stream,
                        "the CUDA IPC scratch");
}

/* Wait until what the worker queued on the IPC stream is done. */
static coll_status_t ipc_sync(struct coll_stream_ctx *ctx, const char *what)
{
    int rc = coll__cudart()->EventRecord(ctx->ipc->event, ctx->ipc->stream);

    if (rc != CUDA_SUCCESS)
        return cuda_fail(ctx->comm, rc, "cudaEventRecord on the CUDA IPC stream");
    return wait_event_for(ctx, ctx->ipc->event, what);
}

/* The barrier before piece j (j = 0: before the first; npieces: after the last) carries the
 * call's signature (agree.h) and the pieces' layout, so that ranks whose calls differ fail on
 * every rank rather than pair their barriers up and read each other's slots as another
 * layout: an all-reduce of their hash and its complement by MIN, which is the hash's minimum
 * and maximum over the ranks. Non-blocking and waited for, so that a dead peer, a timeout or
 * an abort ends it. */
static coll_status_t ipc_barrier(const struct scall *c, size_t j)
{
    struct coll_comm *comm = c->comm;
    struct coll_call call = {.comm = comm, .coll = c->coll, .count = c->count,
                             .dtype = c->dtype, .op = c->op, .root = c->root};
    struct {
        struct coll_sig sig;
        uint64_t piece, j;
    } key = {.piece = c->piece, .j = j};
    uint64_t h, v[2];
    struct coll_call b = {.comm = comm, .coll = COLL_COLL_ALLREDUCE, .sendbuf = v,
                          .recvbuf = v, .count = 2, .dtype = COLL_UINT64, .op = COLL_MIN,
                          .peer = -1};
    coll_request_t *req = NULL;
    coll_status_t st;
    char desc[96];

    coll__call_sig(&call, &key.sig);
    h = coll__hash64(&key, sizeof(key), 0);
    v[0] = h;
    v[1] = ~h;
    st = comm->path_host->call(&b, &req);
    if (st == COLL_SUCCESS)
        st = comm->path_host->wait(req);
    if (st == COLL_SUCCESS && v[0] != ~v[1]) {
        coll__error(comm, COLL_REMOTE_ERROR,
                    "ranks called different stream-ordered collectives through CUDA IPC: this "
                    "rank's is %s in pieces of %zu elements (before piece %zu); another "
                    "rank's collective, count, type, op, root or COLL_CUDA_STAGING_BYTES "
                    "differ",
                    coll__sig_describe(&key.sig, desc, sizeof(desc)), c->piece, j);
        st = COLL_REMOTE_ERROR;
    }
    return st;
}

/* Piece j's input is in this rank's slot once its stream got past IN j; with a host
 * sendbuf, the worker then copies it in itself. */
static coll_status_t ipc_input(struct sop *op, size_t j)
{
    struct scall *c = &op->calls[0];
    struct coll_stream_ctx *ctx = ctx_of(c->comm);
    coll_status_t st = COLL_SUCCESS;

    /* in worker mode one event marks the call's start on the stream */
    if (!c->worker || j == 0)
        st = wait_event(ctx, op->events[c->first_event + (c->worker ? 0 : j)]);
    if (st == COLL_SUCCESS && c->wcopy) {
        st = ipc_copies(c, ctx->ipc, j, false, ctx->ipc->stream);
        if (st == COLL_SUCCESS)
            st = ipc_sync(ctx, "the copy of a piece into the CUDA IPC scratch did not finish");
    }
    return st;
}

/* One call through IPC, on its comm's worker: B(-1), then per piece j gather j - 1,
 * compute j, input j + 1, barrier j (ipc.c's diagram); a last barrier after the last
 * gather. */
static coll_status_t run_op_ipc(struct sop *op)
{
    struct scall *c = &op->calls[0];
    struct coll_stream_ctx *ctx = ctx_of(c->comm);
    coll_status_t st;

    if (c->worker) {
        /* laid out as one piece when issued: cut it now, the worker copying everything */
        c->piece = coll__ipc_piece_elems(c->coll, c->comm->nranks, c->count, c->esize,
                                         ctx->ipc->slot_bytes);
        if (c->piece == 0)
            return coll__error(c->comm, COLL_INVALID_ARGUMENT,
                               "a piece of one %s element per rank does not fit a CUDA IPC "
                               "slot of %zu bytes; raise COLL_CUDA_STAGING_BYTES",
                               coll__dtype_name(c->dtype), ctx->ipc->slot_bytes);
        c->npieces = (c->count + c->piece - 1) / c->piece;
        c->wcopy = true;
        c->ipc = true;
    }
    st = ipc_input(op, 0);
    if (st == COLL_SUCCESS)
        st = ipc_barrier(c, 0);
    for (size_t j = 0; st == COLL_SUCCESS && j <= c->npieces; j++) {
        if (j > 0) {
            st = ipc_copies(c, ctx->ipc, j - 1, true, ctx->ipc->stream);
            if (st == COLL_SUCCESS)
                st = ipc_sync(ctx, "the gather of a piece out of the CUDA IPC scratch did not "
                                   "finish");
            if (st != COLL_SUCCESS)
                break;
            /* the last WAIT (and in worker mode the only one) goes when the op ends, after
             * the last barrier: the stream's next call may lay its slots out otherwise,
             * and its copies in must not reach a region a peer still gathers from */
            if (!c->worker && j < c->npieces)
                piece_done(op, j - 1);
        }
        if (j < c->npieces) {
            size_t o = j * c->piece, n = c->count - o < c->piece ? c->count - o : c->piece;
            st = coll__ipc_compute(c->comm, ctx->ipc, c->coll, c->root, c->piece, n,
                                   j % COLL_IPC_SLOTS, c->dtype, c->op);
            if (st == COLL_SUCCESS)
                st = ipc_sync(ctx, "the reduction of a piece in the CUDA IPC scratch did not "
                                   "finish");
        }
        if (st == COLL_SUCCESS && j + 1 < c->npieces)
            st = ipc_input(op, j + 1);
        if (st == COLL_SUCCESS)
            st = ipc_barrier(c, j + 1);
        pthread_mutex_lock(&op->mu);
        if (op->hostfn_timed_out && st == COLL_SUCCESS)
            st = coll__error(op->owner, COLL_TIMEOUT,
                             "a stream waited more than twice COLL_TIMEOUT_MS for a "
                             "collective");
        pthread_mutex_unlock(&op->mu);
    }
    return st;
}

/* The decision, on the worker, at the comm's first call that could go through IPC: every
 * rank's worker reaches that call in the same order, which matches the exchange. Until
 * then the issuing threads queue such calls in worker mode, and never wait for peers. */
static coll_status_t ipc_decide(struct coll_stream_ctx *ctx)
{
    struct coll_ipc *ipc = NULL;
    char why[256];
    coll_status_t st;

    if (atomic_load(&ctx->ipc_state) != 0)
        return COLL_SUCCESS;
    st = coll__ipc_setup(ctx->comm, ctx->ipc_prep, &ipc, &ctx->ipc_unused, why, sizeof(why));
    ctx->ipc_prep = NULL; /* setup took it: now in ipc or ipc_unused */
    ctx->ipc = ipc;
    atomic_store(&ctx->ipc_state, ipc ? 1 : -1);
    if (st == COLL_INVALID_USAGE)
        return coll__error(ctx->comm, st, "COLL_CUDA_IPC=1, but CUDA IPC cannot be used: %s",
                           why);
    return st;
}

/* The worker's stream and event for its own copies, made on first use. */
static coll_status_t wstream_get(struct coll_stream_ctx *ctx)
{
    const struct coll_cudart *rt = coll__cudart();
    int rc;

    if (ctx->wstream)
        return COLL_SUCCESS;
    rc = rt->StreamCreateWithFlags(&ctx->wstream, 1 /* cudaStreamNonBlocking */);
    if (rc != CUDA_SUCCESS) {
        ctx->wstream = NULL;
        return cuda_fail(ctx->comm, rc, "cudaStreamCreateWithFlags for the stream worker");
    }
    rc = rt->EventCreateWithFlags(&ctx->wevent, CUDA_EVENT_DISABLE_TIMING);
    if (rc != CUDA_SUCCESS) {
        ctx->wevent = NULL;
        return cuda_fail(ctx->comm, rc, "cudaEventCreateWithFlags for the stream worker");
    }
    return COLL_SUCCESS;
}

static coll_status_t wstream_sync(struct coll_stream_ctx *ctx)
{
    int rc = coll__cudart()->EventRecord(ctx->wevent, ctx->wstream);

    if (rc != CUDA_SUCCESS)
        return cuda_fail(ctx->comm, rc, "cudaEventRecord on the stream worker's stream");
    return wait_event_for(ctx, ctx->wevent, "a copy of the stream worker did not finish");
}

/* A call issued in worker mode that is not going through IPC: what the staged path does,
 * piece by piece with the same pieces (so that the host collectives match the other ranks'
 * whichever way they issued it), the worker doing the copies. */
static coll_status_t run_op_staged_worker(struct sop *op)
{
    struct scall *c = &op->calls[0];
    struct coll_stream_ctx *ctx = ctx_of(c->comm);
    size_t pb = (size_t)c->comm->cfg.cuda_staging_bytes / STREAM_PIECE_DIV, sb;
    coll_status_t st = wait_event(ctx, op->events[c->first_event]);

    if (st != COLL_SUCCESS || !c->staged)
        return st != COLL_SUCCESS ? st : issue_call(c, ctx, 1, 0, 0, NULL);
    c->piece = coll__stream_piece_elems(c->coll, c->comm->nranks, c->count, c->esize, pb);
    if (c->piece == 0)
        return coll__error(c->comm, COLL_INVALID_ARGUMENT,
                           "a %s element of every rank does not fit a piece of "
                           "COLL_CUDA_STAGING_BYTES / %d = %zu bytes; raise "
                           "COLL_CUDA_STAGING_BYTES",
                           coll__dtype_name(c->dtype), STREAM_PIECE_DIV, pb);
    c->npieces = (c->count + c->piece - 1) / c->piece;
    c->region_off = 0;
    sb = c->piece * coll__stream_mult(c->coll, c->comm->nranks) * c->esize;
    st = wstream_get(ctx);
    for (size_t j = 0; st == COLL_SUCCESS && j < c->npieces; j++) {
        st = enqueue_copies(c, ctx, 1, sb, j, false, ctx->wstream);
        if (st == COLL_SUCCESS)
            st = wstream_sync(ctx);
        if (st == COLL_SUCCESS)
            st = issue_call(c, ctx, 1, sb, j, NULL);
        if (st == COLL_SUCCESS)
            st = enqueue_copies(c, ctx, 1, sb, j, true, ctx->wstream);
        if (st == COLL_SUCCESS)
            st = wstream_sync(ctx);
    }
    return st;
}

/* Run op on the owner's worker: pieces in order, up to nslots in flight. */
static void run_op(struct sop *op)
{
    coll_request_t **reqs = calloc(op->nslots, sizeof(*reqs));
    coll_status_t st = COLL_SUCCESS;
    size_t issued = 0, completed = 0;

    if (!reqs)
        st = coll__error(op->owner, COLL_SYSTEM_ERROR, "out of memory running a stream op");
    pthread_mutex_lock(&op->mu);
    if (op->cancelled && st == COLL_SUCCESS)
        st = coll__error(op->owner, COLL_INVALID_USAGE,
                         "a group of stream-ordered calls over several comms was cancelled: "
                         "the other comms' workers did not reach it within twice "
                         "COLL_TIMEOUT_MS (the comms grouped from several threads in different "
                         "orders?)");
    pthread_mutex_unlock(&op->mu);
    if (st == COLL_SUCCESS && op->ncalls == 1 && op->calls[0].worker) {
        st = ipc_decide(ctx_of(op->owner));
        if (st == COLL_SUCCESS)
            st = ctx_of(op->owner)->ipc ? run_op_ipc(op) : run_op_staged_worker(op);
        completed = op->npieces;
    } else if (st == COLL_SUCCESS && op->ncalls == 1 && op->calls[0].ipc) {
        st = run_op_ipc(op);
        completed = op->npieces;
    }
    while (st == COLL_SUCCESS && completed < op->npieces) {
        /* complete the oldest piece first when all slots are busy or nothing is left to
         * issue: its stream is waiting for it before it copies the next piece in */
        if (issued < op->npieces && issued - completed < op->nslots) {
            st = run_piece(op, issued, &reqs[issued % op->nslots]);
            if (st != COLL_SUCCESS)
                break;
            /* a group's piece is done when its host group returns (they run in order) */
            if (!reqs[issued % op->nslots])
                piece_done(op, completed++);
            issued++;
            continue;
        }
        if (reqs[completed % op->nslots]) {
            st = op->owner->path_host->wait(reqs[completed % op->nslots]);
            reqs[completed % op->nslots] = NULL;
        }
        if (st == COLL_SUCCESS)
            piece_done(op, completed++);
        pthread_mutex_lock(&op->mu);
        if (op->hostfn_timed_out && st == COLL_SUCCESS)
            st = coll__error(op->owner, COLL_TIMEOUT,
                             "a stream waited more than twice COLL_TIMEOUT_MS for a "
                             "collective");
        pthread_mutex_unlock(&op->mu);
    }
    /* requests still out complete quickly once the comm has failed; coll owns them until
     * they are waited for */
    for (size_t i = completed; reqs && i < issued; i++)
        if (reqs[i % op->nslots])
            op->owner->path_host->wait(reqs[i % op->nslots]);
    free(reqs);
    if (st != COLL_SUCCESS) {
        for (int k = 0; k < op->ncalls; k++)
            comm_fail(op->calls[k].comm, st);
        COLL_WARN(COLL_SUB_COLL, "rank %d: stream-ordered collective failed: %s",
                  op->owner->rank, op->owner->errmsg);
    }
    release_all(op, st);
}

/* A worker reached op: run it when its comm owns it (once every other comm's worker got
 * there too, so that each comm's earlier ops are done), else wait until it has run. */
static void worker_take(struct coll_stream_ctx *ctx, struct sop *op)
{
    bool owner = op->owner == ctx->comm;
    struct timespec dl;

    pthread_mutex_lock(&op->mu);
    op->narrived++;
    pthread_cond_broadcast(&op->cv);
    if (!owner) {
        while (!op->finished)
            pthread_cond_wait(&op->cv, &op->mu);
        pthread_mutex_unlock(&op->mu);
        return;
    }
    /* the other workers get here once their comm's earlier ops are done, each within its
     * timeout; longer means two threads grouped the same comms in different orders */
    deadline_after(&dl, op->hostfn_wait_ms);
    while (op->narrived < op->ncomms && !op->cancelled) {
        if (op->hostfn_wait_ms == 0) {
            pthread_cond_wait(&op->cv, &op->mu);
        } else if (pthread_cond_timedwait(&op->cv, &op->mu, &dl) == ETIMEDOUT) {
            op->cancelled = true;
        }
    }
    pthread_mutex_unlock(&op->mu);
    run_op(op);
}

static void *worker_main(void *arg)
{
    struct coll_stream_ctx *ctx = arg;
    const struct coll_cudart *rt = coll__cudart();
    int dev = slot_of(ctx->comm)->cuda_dev;

    /* events and copies of this comm belong to its device */
    if (dev >= 0 && rt->SetDevice(dev) != CUDA_SUCCESS)
        rt->GetLastError();
    for (;;) {
        struct qent *e;

        pthread_mutex_lock(&ctx->mu);
        while (!ctx->head && !ctx->stop)
            pthread_cond_wait(&ctx->cv, &ctx->mu);
        e = ctx->head;
        if (e) {
            ctx->head = e->next;
            if (!ctx->head)
                ctx->tail = NULL;
        }
        pthread_mutex_unlock(&ctx->mu);
        /* on destroy, what is queued still runs (or fails fast on an aborted comm) */
        if (!e)
            break;
        worker_take(ctx, e->op);
        sop_unref(e->op);
        free(e);
    }
    return NULL;
}

static void ctx_push(struct coll_stream_ctx *ctx, struct qent *e)
{
    pthread_mutex_lock(&ctx->mu);
    if (ctx->tail)
        ctx->tail->next = e;
    else
        ctx->head = e;
    ctx->tail = e;
    pthread_cond_signal(&ctx->cv);
    pthread_mutex_unlock(&ctx->mu);
}

void coll__stream_comm_fini(struct coll_comm *comm)
{
    struct stream_slot *slot = comm ? slot_of(comm) : NULL;
    struct coll_stream_ctx *ctx = slot ? slot->ctx : NULL;
    const struct coll_cudart *rt = coll__cudart();
    uint64_t t0, limit_ns;
    bool drained = true;

    if (!ctx) {
        free(slot);
        if (comm)
            comm->path_state[COLL_PATH_STATE_STREAM] = NULL;
        return;
    }
    pthread_mutex_lock(&ctx->mu);
    ctx->stop = true;
    pthread_cond_broadcast(&ctx->cv);
    pthread_mutex_unlock(&ctx->mu);
    /* the worker runs what is queued, each op within its timeouts (at once on an aborted
     * comm), then exits */
    pthread_join(ctx->thread, NULL);
    /* the streams may still be copying out of staging: wait for each one's last op */
    t0 = coll__now_ns();
    limit_ns = (uint64_t)comm->cfg.timeout_ms * 1000000;
    for (int i = 0; i < ctx->ntails; i++) {
        long nap = 10;
        int rc;
        while ((rc = rt->EventQuery(ctx->tails[i].event)) == CUDA_ERROR_NOT_READY) {
            if (limit_ns && coll__now_ns() - t0 > limit_ns)
                break;
            sleep_us(nap);
            if (nap < 1000)
                nap *= 2;
        }
        if (rc != CUDA_SUCCESS) {
            rt->GetLastError();
            drained = false;
        }
    }
    if (drained) {
        for (int i = 0; i < ctx->ntails; i++)
            rt->EventDestroy(ctx->tails[i].event);
        for (size_t i = 0; i < ctx->nev; i++)
            rt->EventDestroy(ctx->evpool[i]);
        /* the worker's copies end with it, but not after a failure cut its wait short */
        if (ctx->wstream && rt->StreamSynchronize(ctx->wstream) != CUDA_SUCCESS)
            rt->GetLastError();
        rt->FreeHost(ctx->staging);
        /* every call through IPC ended with a barrier after its last read of a peer's
         * scratch, and this rank's streams are done with its own */
        coll__ipc_fini(ctx->ipc);
        coll__ipc_fini(ctx->ipc_unused);
        coll__ipc_fini(ctx->ipc_prep);
        if (ctx->wevent)
            rt->EventDestroy(ctx->wevent);
        if (ctx->wstream)
            rt->StreamDestroy(ctx->wstream);
    } else {
        /* freeing memory a stream may still copy from would be worse than keeping it */
        COLL_WARN(COLL_SUB_COLL,
                  "rank %d: a stream is still busy with this comm's staging at destroy; "
                  "%zu bytes of page-locked memory are left allocated",
                  comm->rank, ctx->cap);
    }
    free(ctx->tails);
    free(ctx->evpool);
    pthread_mutex_destroy(&ctx->mu);
    pthread_cond_destroy(&ctx->cv);
    free(ctx);
    free(slot);
    comm->path_state[COLL_PATH_STATE_STREAM] = NULL;
}

/* ---- 4 issuing ----------------------------------------------------------------------- */

/* The host function of WAIT: block until the worker says the piece is done. No CUDA call
 * here (CUDA forbids it), and never longer than twice the comm's timeout: by then the
 * worker has failed the op, or something is badly wrong and the stream must go on. */
static void hostfn_wait(void *arg)
{
    struct spiece *p = arg;
    struct sop *op = p->op;
    struct timespec dl;

    deadline_after(&dl, op->hostfn_wait_ms);
    pthread_mutex_lock(&op->mu);
    while (!p->done) {
        if (op->hostfn_wait_ms == 0) {
            pthread_cond_wait(&op->cv, &op->mu);
        } else if (pthread_cond_timedwait(&op->cv, &op->mu, &dl) == ETIMEDOUT) {
            op->hostfn_timed_out = true;
            break;
        }
    }
    pthread_mutex_unlock(&op->mu);
    sop_unref(op);
}

static coll_status_t enqueue_copies(const struct scall *c, struct coll_stream_ctx *ctx,
                                    size_t nslots, size_t slot_bytes, size_t j, bool out,
                                    void *stream)
{
    return queue_copies(c, coll__stream_rows, NULL,
                        ctx->staging + (j % nslots) * slot_bytes + c->region_off, 0, j, out,
                        stream, "staging");
}

/* Make s wait for the end of comm's previous op on every other stream; then the previous
 * ops are behind everything this op queues on s. */
static coll_status_t join_tails(struct coll_stream_ctx *ctx, void *s)
{
    const struct coll_cudart *rt = coll__cudart();

    for (int i = 0; i < ctx->ntails; i++) {
        int rc;
        if (ctx->tails[i].stream == s)
            continue;
        rc = rt->StreamWaitEvent(s, ctx->tails[i].event, 0);
        if (rc != CUDA_SUCCESS)
            return cuda_fail(ctx->comm, rc, "cudaStreamWaitEvent on the comm's previous op");
    }
    return COLL_SUCCESS;
}

/* Record the op's end on each of its streams of comm; those become the comm's tails (each
 * of these streams waited for the older tails, so they cover them). */
static coll_status_t record_tails(struct coll_stream_ctx *ctx, const struct sop *op)
{
    const struct coll_cudart *rt = coll__cudart();
    struct stail *nt = calloc((size_t)op->ncalls, sizeof(*nt));
    int nn = 0, rc;
    coll_status_t st = COLL_SUCCESS;

    if (!nt)
        return coll__error(ctx->comm, COLL_SYSTEM_ERROR, "out of memory for stream tails");
    for (int k = 0; k < op->ncalls && st == COLL_SUCCESS; k++) {
        void *s = op->calls[k].stream;
        int i;
        if (op->calls[k].comm != ctx->comm)
            continue;
        for (i = 0; i < nn && nt[i].stream != s; i++)
            ;
        if (i < nn)
            continue;
        /* reuse the old tail event of this stream, else any old one, else a new one */
        for (int t = 0; t < ctx->ntails && !nt[nn].event; t++)
            if (ctx->tails[t].event && ctx->tails[t].stream == s) {
                nt[nn].event = ctx->tails[t].event;
                ctx->tails[t].event = NULL;
            }
        for (int t = 0; t < ctx->ntails && !nt[nn].event; t++)
            if (ctx->tails[t].event) {
                nt[nn].event = ctx->tails[t].event;
                ctx->tails[t].event = NULL;
            }
        if (!nt[nn].event)
            st = event_get(ctx, &nt[nn].event);
        if (st != COLL_SUCCESS)
            break;
        nt[nn].stream = s;
        rc = rt->EventRecord(nt[nn].event, s);
        nn++;
        if (rc != CUDA_SUCCESS)
            st = cuda_fail(ctx->comm, rc, "cudaEventRecord at the end of a stream op");
    }
    for (int t = 0; t < ctx->ntails; t++)
        event_put(ctx, ctx->tails[t].event);
    free(ctx->tails);
    ctx->tails = nt;
    ctx->ntails = nn;
    return st;
}

/* Make comm's device current for the calls that follow (the caller's is restored by
 * restore_device): events, copies and host functions belong to it. */
static coll_status_t use_device(struct coll_comm *comm)
{
    const struct coll_cudart *rt = coll__cudart();
    int dev = -1, rc;

    if (rt->GetDevice(&dev) == CUDA_SUCCESS && dev == slot_of(comm)->cuda_dev)
        return COLL_SUCCESS;
    rc = rt->SetDevice(slot_of(comm)->cuda_dev);
    if (rc != CUDA_SUCCESS)
        return cuda_fail(comm, rc, "cudaSetDevice to the comm's device");
    return COLL_SUCCESS;
}

static void restore_device(int dev)
{
    const struct coll_cudart *rt = coll__cudart();
    int now = -1;

    if (dev >= 0 && rt->GetDevice(&now) == CUDA_SUCCESS && now != dev &&
        rt->SetDevice(dev) != CUDA_SUCCESS)
        rt->GetLastError();
}

/* Cut the calls, size the slots. */
static coll_status_t layout(struct sop *op)
{
    size_t nslots = STREAM_SLOTS, nev = 0;

    if (op->ncalls == 1 && op->calls[0].ipc) {
        struct scall *c = &op->calls[0];
        size_t sb = ctx_of(c->comm)->ipc->slot_bytes;

        c->esize = coll__dtype_size(c->dtype);
        c->piece = coll__ipc_piece_elems(c->coll, c->comm->nranks, c->count, c->esize, sb);
        if (c->piece == 0)
            return coll__error(c->comm, COLL_INVALID_ARGUMENT,
                               "a piece of one %s element per rank does not fit a CUDA IPC "
                               "slot of %zu bytes (COLL_CUDA_STAGING_BYTES / %d); raise "
                               "COLL_CUDA_STAGING_BYTES",
                               coll__dtype_name(c->dtype), sb, COLL_IPC_SLOTS);
        c->npieces = (c->count + c->piece - 1) / c->piece;
        c->first_event = 0;
        c->region_off = 0;
        op->npieces = op->nevents = c->npieces;
        op->nslots = COLL_IPC_SLOTS;
        return COLL_SUCCESS;
    }
    op->npieces = 0;
    for (int k = 0; k < op->ncalls; k++) {
        struct scall *c = &op->calls[k];
        struct coll_comm *comm = c->comm;
        size_t piece_bytes = (size_t)comm->cfg.cuda_staging_bytes / STREAM_PIECE_DIV;

        c->esize = coll__dtype_size(c->dtype);
        if (!c->staged || c->worker) {
            c->piece = c->count;
            c->npieces = 1;
        } else {
            c->piece = coll__stream_piece_elems(c->coll, comm->nranks, c->count, c->esize,
                                                piece_bytes);
            if (c->piece == 0)
                return coll__error(comm, COLL_INVALID_ARGUMENT,
                                   "a %s element of every rank (%zu bytes) does not fit a piece "
                                   "of COLL_CUDA_STAGING_BYTES / %d = %zu bytes; raise "
                                   "COLL_CUDA_STAGING_BYTES",
                                   coll__dtype_name(c->dtype),
                                   coll__stream_mult(c->coll, comm->nranks) * c->esize,
                                   STREAM_PIECE_DIV, piece_bytes);
            c->npieces = (c->count + c->piece - 1) / c->piece;
        }
        c->first_event = nev;
        nev += c->npieces;
        if (c->npieces > op->npieces)
            op->npieces = c->npieces;
    }
    /* regions of each comm's calls in its slots, and how many slots fit everywhere */
    for (int k = 0; k < op->ncalls; k++) {
        struct scall *c = &op->calls[k];
        size_t off = 0, sb;
        for (int i = 0; i < k; i++)
            if (op->calls[i].comm == c->comm && op->calls[i].staged)
                off += op->calls[i].piece *
                       coll__stream_mult(op->calls[i].coll, c->comm->nranks) *
                       op->calls[i].esize;
        c->region_off = off;
        sb = slot_bytes_of(op, c->comm);
        if (sb > (size_t)c->comm->cfg.cuda_staging_bytes)
            return coll__error(c->comm, COLL_INVALID_ARGUMENT,
                               "a group's calls on this comm need %zu bytes of staging per "
                               "piece, more than COLL_CUDA_STAGING_BYTES (%lld); raise it or "
                               "split the group",
                               sb, (long long)c->comm->cfg.cuda_staging_bytes);
        if (sb && (size_t)c->comm->cfg.cuda_staging_bytes / sb < nslots)
            nslots = (size_t)c->comm->cfg.cuda_staging_bytes / sb;
    }
    op->nslots = nslots;
    op->nevents = nev;
    return COLL_SUCCESS;
}

/* Queue calls (already checked, with CUDA ready) on their streams and hand them to the
 * workers; the op takes calls (malloc'ed) in every case. On failure after something was
 * queued, the comm fails: its peers would wait for this rank otherwise. */
static coll_status_t issue_op(struct scall *calls, int ncalls)
{
    const struct coll_cudart *rt = coll__cudart();
    struct coll_comm *comms[64], *first = calls[0].comm;
    struct qent *ents[64] = {NULL};
    struct coll_stream_step *steps = NULL;
    struct sop *op;
    coll_status_t st = COLL_SUCCESS;
    bool queued_any = false, forever = false;
    int ncomms = 0, cur_dev = -1, rc;

    op = calloc(1, sizeof(*op));
    if (!op) {
        free(calls);
        return coll__error(first, COLL_SYSTEM_ERROR, "out of memory for a stream op");
    }
    atomic_init(&op->refs, 1);
    pthread_mutex_init(&op->mu, NULL);
    pthread_cond_init(&op->cv, NULL);
    op->flag = -1;
    op->calls = calls;
    op->ncalls = ncalls;
    op->owner = first;
    for (int k = 0; k < ncalls; k++) {
        struct coll_comm *comm = calls[k].comm;
        struct coll_stream_ctx *ctx;
        int i;
        int64_t t = comm->cfg.timeout_ms;

        /* a host function waits up to twice the longest timeout, or forever if one is 0 */
        if (t == 0)
            forever = true;
        else if (2 * t > op->hostfn_wait_ms)
            op->hostfn_wait_ms = 2 * t;

        for (i = 0; i < ncomms && comms[i] != comm; i++)
            ;
        if (i == ncomms) {
            if (ncomms == (int)COLL_ARRAY_SIZE(comms)) {
                st = coll__error(comm, COLL_INVALID_USAGE,
                                 "a group of stream-ordered calls spans more than %d comms",
                                 (int)COLL_ARRAY_SIZE(comms));
                goto out_free;
            }
            comms[ncomms++] = comm;
        }
        COLL_CHECK_GOTO(ctx_get(comm, &ctx), st, out_free);
    }
    if (forever)
        op->hostfn_wait_ms = 0;
    op->ncomms = ncomms;
    if (ncalls == 1 && coll__ipc_eligible(calls[0].coll, calls[0].op)) {
        struct coll_stream_ctx *ctx = ctx_of(calls[0].comm);
        int state = atomic_load(&ctx->ipc_state);

        if (state == 0) {
            calls[0].worker = true;
        } else if (state > 0) {
            calls[0].ipc = true;
            /* a host sendbuf is copied by the worker: a stream's copy from pageable memory
             * would wait for the stream, which waits for the worker */
            calls[0].wcopy = calls[0].sendbuf && !calls[0].send_dev;
        }
    }
    COLL_CHECK_GOTO(layout(op), st, out_free);
    op->pieces = calloc(op->npieces, sizeof(*op->pieces));
    op->events = calloc(op->nevents, sizeof(*op->events));
    steps = malloc(3 * op->npieces * sizeof(*steps));
    if (!op->pieces || !op->events || !steps) {
        st = coll__error(first, COLL_SYSTEM_ERROR, "out of memory for a stream op's pieces");
        goto out_free;
    }
    for (size_t j = 0; j < op->npieces; j++)
        op->pieces[j].op = op;
    flag_take(op);
    if (rt->GetDevice(&cur_dev) != CUDA_SUCCESS) {
        rt->GetLastError();
        cur_dev = -1;
    }
    /* events belong to the device current when they are made: the comm's */
    for (int k = 0; k < ncalls; k++) {
        COLL_CHECK_GOTO(use_device(calls[k].comm), st, out_free);
        for (size_t j = 0; j < calls[k].npieces; j++)
            COLL_CHECK_GOTO(event_get(ctx_of(calls[k].comm),
                                      &op->events[calls[k].first_event + j]),
                            st, out_free);
    }

    /* from here on, work is on the streams */
    queued_any = true;
    for (int k = 0; k < ncalls && st == COLL_SUCCESS; k++) {
        st = use_device(calls[k].comm);
        if (st == COLL_SUCCESS)
            st = join_tails(ctx_of(calls[k].comm), calls[k].stream);
    }
    {
        size_t nsteps = coll__stream_order(op->npieces, op->nslots, steps);
        for (size_t s = 0; s < nsteps && st == COLL_SUCCESS; s++) {
            size_t j = steps[s].piece;
            for (int k = 0; k < ncalls && st == COLL_SUCCESS; k++) {
                struct scall *c = &calls[k];
                struct coll_stream_ctx *ctx = ctx_of(c->comm);
                size_t sb = slot_bytes_of(op, c->comm);
                if (j >= c->npieces)
                    continue;
                st = use_device(c->comm);
                if (st != COLL_SUCCESS)
                    break;
                switch (steps[s].kind) {
                case COLL_SSTEP_D2H:
                    if (c->ipc && !c->wcopy)
                        st = ipc_copies(c, ctx->ipc, j, false, c->stream);
                    else if (c->staged && !c->ipc && !c->worker)
                        st = enqueue_copies(c, ctx, op->nslots, sb, j, false, c->stream);
                    if (st == COLL_SUCCESS &&
                        (rc = rt->EventRecord(op->events[c->first_event + j], c->stream)) !=
                            CUDA_SUCCESS)
                        st = cuda_fail(c->comm, rc, "cudaEventRecord after a piece's copy in");
                    break;
                case COLL_SSTEP_WAIT:
                    if (op->flag >= 0) {
                        rc = rt->StreamWaitValue32(
                            c->stream, flags.dev + (unsigned long long)op->flag * 4,
                            op->flag_base + (uint32_t)(j + 1), COLL_CUDA_WAIT_VALUE_GEQ);
                        if (rc == CUDA_SUCCESS)
                            break;
                        /* the piece's word is still published: a host function waits
                         * for the same thing */
                        rt->GetLastError();
                        flag_turn_off("a stream refused it");
                    }
                    atomic_fetch_add(&op->refs, 1);
                    rc = rt->LaunchHostFunc(c->stream, hostfn_wait, &op->pieces[j]);
                    if (rc != CUDA_SUCCESS) {
                        atomic_fetch_sub(&op->refs, 1);
                        st = cuda_fail(c->comm, rc, "cudaLaunchHostFunc");
                    }
                    break;
                case COLL_SSTEP_H2D:
                    /* through IPC the worker gathers the result itself */
                    if (c->staged && !c->ipc && !c->worker)
                        st = enqueue_copies(c, ctx, op->nslots, sb, j, true, c->stream);
                    break;
                }
            }
        }
    }
    for (int i = 0; i < ncomms && st == COLL_SUCCESS; i++) {
        st = use_device(comms[i]);
        if (st == COLL_SUCCESS)
            st = record_tails(ctx_of(comms[i]), op);
    }
    if (st != COLL_SUCCESS)
        goto out_free;
    restore_device(cur_dev);

    /* to the workers: every comm's queue, so that each comm's earlier ops run first */
    for (int i = 0; i < ncomms; i++) {
        ents[i] = calloc(1, sizeof(*ents[i]));
        if (!ents[i]) {
            st = coll__error(first, COLL_SYSTEM_ERROR, "out of memory queueing a stream op");
            goto out_free;
        }
    }
    for (int i = 0; i < ncomms; i++) {
        atomic_fetch_add(&op->refs, 1);
        ents[i]->op = op;
        ctx_push(ctx_of(comms[i]), ents[i]);
    }
    free(steps);
    sop_unref(op);
    return COLL_SUCCESS;

out_free:
    free(steps);
    for (int i = 0; i < ncomms; i++)
        free(ents[i]);
    restore_device(cur_dev);
    if (queued_any) {
        for (int i = 0; i < ncomms; i++)
            comm_fail(comms[i], st);
        release_all(op, st);
    }
    /* events exist only once every comm has its stream state */
    for (size_t i = 0; op->events && i < op->nevents; i++)
        if (op->events[i])
            event_put(ctx_of(first), op->events[i]);
    sop_unref(op);
    return st;
}

/* ---- 5 CUDA checks, groups and submitting ------------------------------------------- */

/* The public call's name, for messages: the row's blocking call's, "_stream" appended. */
static void stream_fn(const struct scall *c, char *buf, size_t n)
{
    const char *api = c->coll == COLL_COLL_SENDRECV && c->dir == COLL_STEP_RECV
                          ? "coll_recv"
                          : coll__coll_desc(c->coll)->api;

    snprintf(buf, n, "%s_stream", api);
}

/* This thread's group of stream-ordered calls (api.c's group decides when it ends). */
static _Thread_local struct {
    struct scall *calls;
    size_t n, cap;
    coll_status_t err;
} sg;

/* Whether the stream machinery can run: CUDA, a device for comm, and every entry point. */
static bool stream_ready(const struct coll_comm *comm, const char **why_p)
{
    const struct coll_cudart *rt = coll__cudart();
    const char *why;

    if (!rt) {
        coll__cuda_state(&why);
        *why_p = why;
        return false;
    }
    if (slot_of(comm)->cuda_dev < 0) {
        *why_p = "the comm has no CUDA device (none was current at coll_comm_init)";
        return false;
    }
    if (!rt->MemcpyAsync || !rt->HostAlloc || !rt->StreamWaitEvent ||
        !rt->EventCreateWithFlags || !rt->EventRecord || !rt->EventQuery || !rt->EventDestroy ||
        !rt->LaunchHostFunc) {
        *why_p = "the CUDA runtime lacks cudaMemcpyAsync, cudaHostAlloc, cudaStreamWaitEvent, "
                 "cudaEvent* or cudaLaunchHostFunc";
        return false;
    }
    return true;
}

/* A buffer that is not CUDA memory must at least be readable host memory: a freed device
 * buffer is often reported as unregistered memory, and the host collective would fault on
 * it. Reading a byte through process_vm_readv fails with EFAULT instead of faulting. */
static bool host_readable(const void *p, size_t bytes)
{
    char b;
    const uint8_t *q[2] = {p, (const uint8_t *)p + bytes - 1};

    for (int i = 0; i < 2; i++) {
        struct iovec local = {&b, 1}, remote = {(void *)(uintptr_t)q[i], 1};
        if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != 1 &&
            errno != EPERM && errno != ENOSYS)
            return false;
    }
    return true;
}

static coll_status_t check_ptr(struct coll_comm *comm, const char *fn, const char *name,
                               const void *p, size_t bytes, bool *staged_p)
{
    enum coll_mem_kind kind;
    int dev;
    coll_status_t st;

    if (!p || bytes == 0)
        return COLL_SUCCESS;
    st = coll__cuda_mem_kind(comm, p, &kind, &dev);
    if (st != COLL_SUCCESS) {
        char why[sizeof(comm->errmsg)];
        memcpy(why, comm->errmsg, sizeof(why));
        return coll__error(comm, st, "%s: %s: %s", fn, name, why);
    }
    if (kind == COLL_MEM_DEVICE) {
        if (dev != slot_of(comm)->cuda_dev)
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "%s: %s %p is memory of CUDA device %d, but the comm uses device "
                               "%d",
                               fn, name, p, dev, slot_of(comm)->cuda_dev);
        *staged_p = true;
        return COLL_SUCCESS;
    }
    if (kind == COLL_MEM_UNREGISTERED && !host_readable(p, bytes))
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: %s %p is neither CUDA memory nor readable host memory (a freed "
                           "device buffer?)",
                           fn, name, p);
    return COLL_SUCCESS;
}

static coll_status_t check_stream(struct coll_comm *comm, const char *fn, void *stream)
{
    const struct coll_cudart *rt = coll__cudart();
    char err[256];
    int dev = -1, rc;

    if (!stream || !rt->StreamGetDevice)
        return COLL_SUCCESS;
    rc = rt->StreamGetDevice(stream, &dev);
    if (rc != CUDA_SUCCESS) {
        rt->GetLastError();
        coll__cuda_error_text(rc, err, sizeof(err));
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: stream %p is not a usable stream: cudaStreamGetDevice failed: %s",
                           fn, stream, err);
    }
    if (dev != slot_of(comm)->cuda_dev)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: stream %p belongs to CUDA device %d, but the comm uses device %d",
                           fn, stream, dev, slot_of(comm)->cuda_dev);
    return COLL_SUCCESS;
}

/* The API's checks of a stream-ordered call failed: inside a group, so does its end. */
void coll__stream_group_fail(coll_status_t st)
{
    if (sg.err == COLL_SUCCESS)
        sg.err = st;
}

/* The stream path's submit hook: c as the API checked it (arguments, buffers this rank does
 * not use set to NULL); its CUDA checks here, then record it (group), run it on the host (no
 * CUDA) or issue it. */
static coll_status_t stream_submit(struct coll_comm *comm, const struct coll_call *call)
{
    struct scall c = {.comm = comm, .coll = call->coll, .dir = call->p2p,
                      .sendbuf = call->sendbuf, .recvbuf = call->recvbuf,
                      .count = call->count, .dtype = call->dtype,
                      .op = call->op, .stream = call->stream,
                      .root = call->coll == COLL_COLL_SENDRECV ? call->peer : call->root};
    const struct coll_coll_desc *d = coll__coll_desc(c.coll);
    const char *why = NULL;
    char fn[48];
    bool need_send, need_recv, in_group = comm->path_host->group_active();
    size_t esz = coll__dtype_size(c.dtype), sbytes, rbytes;
    coll_status_t st;

    stream_fn(&c, fn, sizeof(fn));
    need_send = coll__desc_uses_send(d, comm->rank, c.root, c.dir);
    need_recv = coll__desc_uses_recv(d, comm->rank, c.root, c.dir);
    sbytes = rbytes = c.count * esz; /* a send's or a receive's one buffer */
    if (!d->p2p) {
        sbytes = coll__blocks_count(d->send_blocks, c.count, comm->nranks) * esz;
        rbytes = coll__blocks_count(d->recv_blocks, c.count, comm->nranks) * esz;
    }

    if (slot_of(comm)->cuda_dev == COMM_DEV_UNDECIDED)
        comm_take_device(comm);
    if (!stream_ready(comm, &why)) {
        if (c.stream) {
            st = coll__error(comm, COLL_INVALID_USAGE,
                             "%s: a stream was given, but stream-ordered calls need CUDA: %s",
                             fn, why);
            goto out_fail;
        }
        /* without CUDA every buffer is host memory: the host call, now or in the group */
        return host_call(&c, c.sendbuf, c.recvbuf, c.count, NULL);
    }
    COLL_CHECK_GOTO(check_stream(comm, fn, c.stream), st, out_fail);
    if (need_send)
        COLL_CHECK_GOTO(check_ptr(comm, fn, "sendbuf", c.sendbuf, sbytes, &c.send_dev), st,
                        out_fail);
    c.staged = c.send_dev;
    if (need_recv)
        COLL_CHECK_GOTO(check_ptr(comm, fn, "recvbuf", c.recvbuf, rbytes, &c.staged), st,
                        out_fail);
    if (c.count == 0 && !in_group)
        return COLL_SUCCESS; /* every rank agrees on count: nothing moves anywhere */

    if (in_group) {
        if (sg.n == sg.cap) {
            size_t cap = sg.cap ? 2 * sg.cap : 16;
            struct scall *p = realloc(sg.calls, cap * sizeof(*p));
            if (!p) {
                st = coll__error(comm, COLL_SYSTEM_ERROR, "%s: out of memory recording a call",
                                 fn);
                goto out_fail;
            }
            sg.calls = p;
            sg.cap = cap;
        }
        if (c.count > 0)
            sg.calls[sg.n++] = c;
        return COLL_SUCCESS;
    }
    {
        struct scall *one = malloc(sizeof(*one));
        if (!one)
            return coll__error(comm, COLL_SYSTEM_ERROR, "%s: out of memory", fn);
        *one = c;
        return issue_op(one, 1);
    }

out_fail:
    if (in_group && sg.err == COLL_SUCCESS)
        sg.err = st;
    return st;
}

coll_status_t coll__stream_group_end(bool discard, size_t nhost)
{
    struct scall *calls = sg.calls;
    size_t n = sg.n;
    coll_status_t st = sg.err;

    sg.calls = NULL;
    sg.n = sg.cap = 0;
    sg.err = COLL_SUCCESS;
    if (discard || st != COLL_SUCCESS || n == 0) {
        free(calls);
        return st;
    }
    if (nhost > 0) {
        free(calls);
        return coll__error(NULL, COLL_INVALID_USAGE,
                           "coll_group_end: a group holds both stream-ordered calls "
                           "(coll_*_stream) and host calls; put them in separate groups");
    }
    if (n > INT32_MAX) {
        free(calls);
        return coll__error(NULL, COLL_INVALID_USAGE, "coll_group_end: too many calls");
    }
    return issue_op(calls, (int)n);
}

/* ---- 6 the path ---------------------------------------------------------------------- */

/* Every stream-ordered call is this path's, whatever its buffers: device memory goes through
 * staging or CUDA IPC, host memory waits for its stream and runs in place, and without CUDA
 * the call is its host call. Which way its data moves is decided later (a call's buffers, the
 * comm's CUDA IPC decision at its first eligible call); the reason says what is known. */
static bool stream_takes(struct coll_comm *comm, const struct coll_call *c, char *why,
                         size_t n)
{
    const struct stream_slot *slot;
    const struct coll_stream_ctx *ctx;
    int ipc;

    if (c->form != COLL_FORM_STREAM)
        return false;
    if (!why)
        return true;
    slot = slot_of(comm);
    ctx = slot ? slot->ctx : NULL;
    ipc = ctx ? atomic_load(&ctx->ipc_state) : 0;
    if (slot && slot->cuda_dev == -1)
        snprintf(why, n, "stream-ordered, no CUDA device on this comm: the host call");
    else if (coll__ipc_eligible(c->coll, c->op) && ipc > 0)
        snprintf(why, n, "stream-ordered, CUDA IPC between the ranks of this host");
    else if (coll__ipc_eligible(c->coll, c->op) && ipc == 0 && comm->nhosts == 1 &&
             strcmp(comm->cfg.cuda_ipc, "0") != 0)
        snprintf(why, n, "stream-ordered, device buffers through CUDA IPC or staging (the "
                         "comm decides at its first such call)");
    else
        snprintf(why, n, "stream-ordered, device buffers through page-locked staging in "
                         "pieces of COLL_CUDA_STAGING_BYTES / %d",
                 STREAM_PIECE_DIV);
    return true;
}

/* The stream path's row of the cost model (algo/cost.h, coll__cost_predict_stream): through
 * CUDA IPC where the comm decided for it and the call is eligible, else staging around the
 * host call on the staging memory, priced as the row of the host path that takes it (flat
 * where it does on this comm, else the schedule). */
static double stream_price(struct coll_comm *comm, const struct coll_call *c,
                           const struct coll_cost_params *p, const struct coll_choice *ch)
{
    const struct coll_coll_desc *d = coll__coll_desc(c->coll);
    size_t esz = coll__dtype_size(c->dtype), n = (size_t)comm->nranks;
    bool send = coll__desc_uses_send(d, comm->rank, c->root, c->p2p);
    bool recv = coll__desc_uses_recv(d, comm->rank, c->root, c->p2p);
    struct coll_cost_stream q = {
        .in_bytes = !send ? 0
                    : d->p2p ? c->count * esz
                             : coll__blocks_count(d->send_blocks, c->count, (int)n) * esz,
        .out_bytes = !recv ? 0
                     : d->p2p ? c->count * esz
                              : coll__blocks_count(d->recv_blocks, c->count, (int)n) * esz,
    };

    if (slot_of(comm)->cuda_dev == -1) {
        q.in_bytes = q.out_bytes = 0; /* no CUDA: the host call on the user's buffers */
    }
    if (slot_of(comm)->cuda_dev != -1 && coll__stream_ipc_known(comm) &&
        coll__ipc_eligible(c->coll, c->op)) {
        size_t piece = coll__ipc_piece_elems(c->coll, (int)n, c->count, esz,
                                             ctx_of(comm)->ipc->slot_bytes);
        int rounds = 0;

        if (piece == 0)
            return -1;
        q.ipc = true;
        q.pieces = (c->count + piece - 1) / piece;
        /* the reductions read their slice (reduce-scatter: its block) out of every rank's */
        if (d->reduces)
            q.read_bytes = coll__blocks_count(d->send_blocks, c->count, (int)n) * esz;
        /* one barrier: a dissemination over shared memory, CUDA IPC's one host */
        while ((1u << rounds) < n)
            rounds++;
        q.host_seconds = rounds * p->link[COLL_LINK_SHM].alpha;
    } else {
        bool flat = ch->flat_seconds >= 0 && c->coll != COLL_COLL_SENDRECV &&
                    coll__flat_takes(comm, c->coll, c->count * esz);
        q.host_seconds = flat ? ch->flat_seconds : ch->sched_seconds;
        if (q.host_seconds < 0)
            return -1;
    }
    return coll__cost_predict_stream(p, &q);
}

const struct coll_path coll__path_stream = {
    .name = "stream",
    .takes = stream_takes,
    .run = NULL,
    .submit = stream_submit,
    .price = stream_price,
};

bool coll__stream_ipc_known(const struct coll_comm *comm)
{
    const struct stream_slot *slot = slot_of(comm);

    return slot && slot->ctx && atomic_load(&slot->ctx->ipc_state) > 0;
}
