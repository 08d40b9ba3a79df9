/*
 * flat.c - the "flat" path: collectives of a one-host comm through one shared segment.
 *
 * Divisions: 1 layout, 2 failure, 3 waiting, 4 set-up, 5 the collectives, 6 the hook,
 * 7 calibration (the cost model's row for this path).
 *
 * Why: the general path costs about 2 us per call here (checks, the plan cache, an op, the
 * schedule walk, the engine's lock and loop, a message per pair), where a small collective
 * between processes of one host needs little more than a cache line each way. So a comm
 * whose ranks all share one host and reach each other over shm gets one segment for all of
 * them, and a small call is: write my input into my slot, publish the call number, wait for
 * the call numbers of the ranks I read, read their slots, publish "done reading".
 *
 * The segment is a memfd made by rank 0 at the first call that wants it and handed to the
 * others over shm.c's doorbell (SCM_RIGHTS), like the rings: nothing is named in /dev/shm,
 * so a killed rank leaks nothing. Its pages are reserved with fallocate (a full tmpfs is an
 * answer at set-up, never a SIGBUS later) and its size is bounded (FLAT_SEGMENT_MAX).
 *
 *   header (2 lines)  magic, comm id, nranks, slot bytes | abort: 1 + first failed rank
 *   rank r, stride bytes each:
 *     line[2]   call number (futex word), the call's signature (coll, dtype, op, root,
 *               count) and up to FLAT_INLINE bytes of data: a small call moves one line
 *     done      the last call whose slots this rank finished reading; closed (left/failed)
 *     sleepers  ranks asleep on one of this rank's words (written by them, not by r)
 *     reason    r's first error, for the others' messages
 *     slot[2]   COLL_SHM_FLAT_BYTES each, for data that does not fit the line
 *
 * Call c uses line and slot c & 1 of every rank. A rank rewrites them at call c only when
 * every peer's done word has reached c - 2, so a slot is never overwritten while it is read.
 * Every rank reduces all inputs itself, in rank order 0..n-1 with coll__reduce_n, so every
 * rank gets the same bits.
 *
 * Above COLL_SHM_FLAT_BYTES (where COLL_SHM_SLICED_BYTES makes the slots larger) all-reduce,
 * broadcast and reduce run in pieces of one slot, each piece a call of its own, so piece
 * k + 1 fills the other slot while slower ranks still read piece k. A reduction piece is
 * "sliced": every rank copies its piece in, rank r reduces slice r of all n pieces, and every
 * rank (all-reduce) or the root (reduce) copies the n slices out; the reduction is spread
 * over all ranks and each byte is reduced once (a reduce of up to FLAT_REDUCE_WHOLE_BYTES
 * goes whole to the root instead). A broadcast piece is written once by the root and copied
 * out by every other rank.
 *
 * Waiting spins (yielding the core when the host has more ranks than cores), then sleeps on
 * a futex on the awaited word. The segment is shared memory, so the futex is a shared one
 * (no FUTEX_PRIVATE_FLAG). A sleeper raises the owner's sleepers count before its last look,
 * and a publisher stores its word before it looks at that count, both sequentially
 * consistent (Dekker), so a publisher wakes only when someone sleeps and no wake-up is lost.
 * Sleeps are bounded (FLAT_SLEEP_MS) so that a peer that dies (its pidfd), stops (the comm's
 * timeout) or fails (the abort word) is seen by every rank soon, never a hang.
 *
 * Trust: a peer can write anything into the segment. Sizes come from this rank's own
 * arguments, never from the segment; a line is copied out once and its signature compared
 * with this rank's call; a rank number read from the segment is checked before use.
 */
#include "flat.h"
#include "flat_test.h"
#include "path.h"

#include "../algo/cost.h"
#include "../core/agree.h"
#include "../core/trace.h"
#include "../cuda/cuda.h"
#include "../reduce/reduce.h"
#include "../transport/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- 1 layout ------------------------------------------------------------------------ */

#define FLAT_MAGIC 0x54414c46u /* "FLAT" */
#define FLAT_VERSION 3u
#define FLAT_CL 64
#define FLAT_INLINE 40
#define FLAT_SEGMENT_MAX ((size_t)256 << 20)
#define FLAT_SLEEP_MS 10 /* longest sleep between looks at peers' health */
#define FLAT_PAUSE_NS 20000 /* a wait polls this long before it starts yielding its core */
/* A reduce of up to this many bytes that fits one slot goes whole to the root, which
 * reduces every input, as a reduce up to COLL_SHM_FLAT_BYTES does, rather than sliced: the
 * other ranks then write and return instead of waiting for two all-rank steps. Blocking
 * reduces, medians of 4 interleaved runs on 2 cores (docs/results/flat-reduce-whole.tsv):
 * whole took 0.52-0.58x the sliced time at 8 KiB on 2, 4 and 8 ranks, 0.54-0.87x at 16 KiB,
 * 0.66-0.91x at 32-64 KiB; at 128 KiB the sliced one was as fast, so it keeps the rest. */
#define FLAT_REDUCE_WHOLE_BYTES ((size_t)64 << 10)
/* How flat_path_run tells flat_call about the whole call its piece belongs to. */
enum {
    FLAT_WHOLE = 1,  /* a reduce that goes whole to the root (FLAT_REDUCE_WHOLE_BYTES) */
    FLAT_STREAM = 2, /* copies into recvbuf stream past the cache (see flat_streams) */
};
/* The collectives that run above COLL_SHM_FLAT_BYTES (sliced, in pieces of one slot). */
#define FLAT_LARGE_COLLS                                                                   \
    ((1u << COLL_COLL_ALLREDUCE) | (1u << COLL_COLL_BROADCAST) | (1u << COLL_COLL_REDUCE))

struct flat_line {
    _Atomic uint32_t seq; /* the call this line holds */
    uint8_t coll, dtype, op, pad;
    int32_t root;
    uint32_t cseq; /* the low bits of the collective's number (pieces share it) */
    uint64_t count;
    uint8_t data[FLAT_INLINE];
};
_Static_assert(sizeof(struct flat_line) == FLAT_CL, "a line is one cache line");

struct flat_hdr {
    uint32_t magic, version;
    uint64_t comm_id;
    uint32_t nranks, flags; /* FLAT_HDR_*: rank 0's choices, which every rank follows */
    uint64_t slot_bytes;
    uint64_t stride;
    _Alignas(FLAT_CL) _Atomic uint32_t abort; /* 1 + the rank that failed first; 0: healthy */
};

enum { FLAT_OPEN = 0, FLAT_LEFT = 1, FLAT_FAILED = 2 };
#define FLAT_LOG 16

/* Blocking reduce and broadcast of at most COLL_SHM_FLAT_BYTES take the general path: the
 * host has more ranks than CPUs. A tree there lets a leaf return after one message, where
 * the fast path's rooted call waits on ranks that are not running; with the engine's
 * wait as cheap as it now is, the tree measured faster: 1.1-2.3 against 2.4-3.3 us at 4
 * ranks on 2 CPUs, 3.3-4.7 against 4.6-6.2 at 8, from 8 B to 2 KiB (docs/results/
 * flat-rooted.tsv); on one CPU per rank the fast path is 3-5x the faster. Rank 0 decides,
 * so that every rank takes the same path even if their views of the host differ. */
#define FLAT_HDR_ROOTED_GENERAL 1u

struct flat_rank {
    struct flat_line line[2];
    _Alignas(FLAT_CL) _Atomic uint32_t done;
    _Atomic uint32_t closed;
    _Alignas(FLAT_CL) _Atomic uint32_t reduced; /* sliced call c: my slice is reduced */
    _Alignas(FLAT_CL) _Atomic uint32_t sleepers;
    _Alignas(FLAT_CL) char reason[256];
    /* the signatures of this rank's last FLAT_LOG collectives on any path, by number: a
     * rank stalled in call N looks up what each peer called as N (flat_stall) */
    struct flat_log {
        _Atomic uint64_t cseq1; /* 1 + the collective's number; 0: empty */
        struct coll_sig sig;
    } log[FLAT_LOG];
    _Alignas(FLAT_CL) uint8_t slot[]; /* 2 x slot_bytes */
};

struct coll_flat {
    struct coll_comm *comm;
    void *shm;                  /* shm.c's context */
    uint8_t *base;
    size_t size, slot_bytes, stride;
    struct flat_hdr *hdr;
    int n, rank;
    uint32_t call;              /* calls run so far; call c uses line and slot c & 1 */
    uint32_t done_ok;           /* every peer's done word has reached this */
    uint64_t spin_ns;           /* how long a wait polls now: see flat_wait */
    uint64_t spin_max_ns;       /* COLL_SHM_FLAT_SPIN_US */
    uint64_t ncalls;
    uint64_t cseq;              /* the collective number of the call running */
    struct coll_sig sig;        /* ... and its signature (the whole call, not a piece) */
    uint32_t unchecked;         /* a broadcast this rank was the root of, whose peers' lines
                                 * it has not compared yet (0: none): see flat_settle */
    uint64_t unchecked_cseq;    /* ... its collective number and signature, which the waits
                                 * of that comparison name and check against the peers' logs */
    struct coll_sig unchecked_sig;
    uint32_t flags;             /* the segment header's FLAT_HDR_* */
    int *pidfd;                 /* [n], -1 where none */
    struct flat_line *snap;     /* [n] lines copied out of the segment */
    const void **src;           /* [n] inputs of a reduction */
};

static inline struct flat_rank *rank_at(const struct coll_flat *f, int r)
{
    return (struct flat_rank *)(f->base + sizeof(struct flat_hdr) + (size_t)r * f->stride);
}

static inline uint8_t *slot_of(const struct coll_flat *f, struct flat_rank *r, uint32_t c)
{
    return r->slot + (size_t)(c & 1) * f->slot_bytes;
}

/* coll__flat_test_pause_deep: a pause before this rank's next deep look (tests only) */
static _Atomic unsigned test_pause_us;

static inline bool reached(uint32_t v, uint32_t want)
{
    return (int32_t)(v - want) >= 0;
}

static size_t round_cl(size_t n)
{
    return (n + FLAT_CL - 1) / FLAT_CL * FLAT_CL;
}

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

static void wake_all(_Atomic uint32_t *w)
{
    (void)futex(w, FUTEX_WAKE, INT_MAX, NULL);
}

/* Store a word of ours that peers wait on; wake them only if one sleeps (Dekker with the
 * sleeper's increment and look: both sequentially consistent). */
static inline void publish(struct flat_rank *me, _Atomic uint32_t *w, uint32_t v)
{
    atomic_store(w, v);
    if (atomic_load(&me->sleepers))
        wake_all(w);
}

/* ---- 2 failure ----------------------------------------------------------------------- */

/* Fail the comm with st and a message (first failure wins), which through shm.c's shutdown
 * raises the segment's abort word for every other rank. */
static coll_status_t flat_fail(struct coll_flat *f, coll_status_t st, const char *fmt, ...)
    COLL_PRINTF(3, 4);
static coll_status_t flat_fail(struct coll_flat *f, coll_status_t st, const char *fmt, ...)
{
    struct coll_comm *comm = f->comm;
    va_list ap;

    va_start(ap, fmt);
    pthread_mutex_lock(&comm->lock);
    st = coll__failv(comm, st, fmt, ap);
    pthread_mutex_unlock(&comm->lock);
    va_end(ap);
    coll__set_thread_error(comm->errmsg);
    return st;
}

/* The peer's text, copied out once, cut at its end and made printable. */
static void peer_reason(const struct coll_flat *f, int r, char *out, size_t n)
{
    size_t m = COLL_MIN(n, sizeof(rank_at(f, r)->reason));

    memcpy(out, rank_at(f, r)->reason, m);
    out[m - 1] = '\0';
    for (char *c = out; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
            *c = '?';
}

static const char *coll_text(unsigned c)
{
    return c < COLL_NUM_COLLS ? coll__coll_name((enum coll_coll)c) : "an unknown collective";
}

static bool flat_stall(struct coll_flat *f, uint64_t cseq, const struct coll_sig *mine,
                       char *why, size_t n);

/* Is there a reason to stop waiting for peer? deep adds the costly looks (syscalls): has it
 * exited, did it send general-path messages instead. w, want: the word the caller waits for
 * (NULL: none). A peer that set it and went on to a call of the general path leaves that
 * call's message in this rank's ring; the caller read the word before the ring, so the
 * word is read again after it before the message counts as a stray (the peer wrote the
 * word first: seeing its message, this rank sees the word). */
static coll_status_t flat_check(struct coll_flat *f, int peer, const char *what, bool deep,
                                _Atomic uint32_t *w, uint32_t want)
{
    struct coll_comm *comm = f->comm;
    struct flat_rank *pr = rank_at(f, peer);
    coll_status_t st = (coll_status_t)atomic_load(&comm->failed);
    uint32_t ab, closed;

    if (st != COLL_SUCCESS) {
        coll__set_thread_error(comm->errmsg);
        return st;
    }
    ab = atomic_load(&f->hdr->abort);
    if (ab) {
        char why[256] = "";
        if (ab - 1 < (uint32_t)f->n && (int)(ab - 1) != f->rank)
            peer_reason(f, (int)(ab - 1), why, sizeof(why));
        if (ab - 1 >= (uint32_t)f->n)
            return flat_fail(f, COLL_REMOTE_ERROR,
                             "the shared-memory fast path's abort word names rank %u, not one "
                             "of the %d ranks",
                             ab - 1, f->n);
        return flat_fail(f, COLL_REMOTE_ERROR, "rank %u failed or was aborted%s%s", ab - 1,
                         why[0] ? ", first failure: " : "", why);
    }
    closed = atomic_load(&pr->closed);
    if (closed) {
        char why[256] = "";
        if (closed == FLAT_FAILED)
            peer_reason(f, peer, why, sizeof(why));
        return flat_fail(f, COLL_REMOTE_ERROR,
                         "rank %d (pid %d) %s while this rank waits for it to %s%s%s", peer,
                         (int)comm->peers[peer].pid,
                         closed == FLAT_LEFT ? "left the communicator" : "failed", what,
                         why[0] ? ": " : "", why);
    }
    if (!deep)
        return COLL_SUCCESS;
    if (f->pidfd[peer] >= 0) {
        struct pollfd p = {.fd = f->pidfd[peer], .events = POLLIN};
        if (poll(&p, 1, 0) > 0)
            return flat_fail(f, COLL_REMOTE_ERROR,
                             "rank %d (%s, pid %d) exited in the middle of a collective", peer,
                             comm->peers[peer].hostname, (int)comm->peers[peer].pid);
    }
    if (f->sig.coll != COLL_COLL_SENDRECV) {
        char why[640];
        if (flat_stall(f, f->cseq, &f->sig, why, sizeof(why)))
            return flat_fail(f, COLL_REMOTE_ERROR, "%s", why);
    }
    switch (coll__shm_flat_peer(f->shm, peer)) {
    case COLL_SHM_PEER_GONE:
        return flat_fail(f, COLL_REMOTE_ERROR,
                         "rank %d (pid %d) failed or left the communicator while this rank "
                         "waits for it to %s",
                         peer, (int)comm->peers[peer].pid, what);
    case COLL_SHM_PEER_STRAY:
        if (w && reached(atomic_load_explicit(w, memory_order_acquire), want))
            return COLL_SUCCESS;
        return flat_fail(f, COLL_REMOTE_ERROR,
                         "rank %d sent a message of the general path while this rank runs "
                         "call #%u on the shared-memory fast path: do all ranks call the same "
                         "collectives with the same counts (and the same COLL_SHM_FLAT, "
                         "COLL_SHM_FLAT_BYTES, COLL_SHM_SLICED_BYTES and COLL_ALGO)?",
                         peer, f->call);
    default:
        return COLL_SUCCESS;
    }
}

/* Into this rank's log: collective cseq is s. A reader that finds cseq1 the same before and
 * after copying the signature read it whole. */
static void flat_log_call(struct coll_flat *f, uint64_t cseq, const struct coll_sig *s)
{
    struct flat_log *l = &rank_at(f, f->rank)->log[cseq % FLAT_LOG];

    atomic_store_explicit(&l->cseq1, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    l->sig = *s;
    atomic_store_explicit(&l->cseq1, cseq + 1, memory_order_release);
}

/* A rank stalled in collective cseq (signature mine) looks up what each peer logged as that
 * call: a peer that called something else is the reason nothing moves (different roots,
 * or a collective that moves nothing this rank waits for). The text into why; false when
 * every peer that got there agrees. */
static bool flat_stall(struct coll_flat *f, uint64_t cseq, const struct coll_sig *mine,
                       char *why, size_t n)
{
    for (int p = 0; p < f->n; p++) {
        struct flat_log *l = &rank_at(f, p)->log[cseq % FLAT_LOG];
        struct coll_sig theirs;

        if (p == f->rank || atomic_load_explicit(&l->cseq1, memory_order_acquire) != cseq + 1)
            continue;
        memcpy(&theirs, &l->sig, sizeof(theirs));
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&l->cseq1, memory_order_relaxed) != cseq + 1)
            continue; /* rewritten while read: the peer moved on; look again later */
        if (theirs.coll >= COLL_NUM_COLLS || coll__sig_agree(&theirs, mine))
            continue;
        coll__agree_explain(f->comm, p, cseq, &theirs, cseq, mine, why, n);
        return true;
    }
    return false;
}

/* ---- 3 waiting ----------------------------------------------------------------------- */

/* Until peer's word w reaches want. */
static coll_status_t flat_wait(struct coll_flat *f, int peer, _Atomic uint32_t *w, uint32_t want,
                               const char *what)
{
    struct coll_comm *comm = f->comm;
    struct flat_rank *pr = rank_at(f, peer);
    const uint64_t spin_ns = f->spin_ns;
    /* With more ranks than cores, the rank we wait for may need this core: yield at once.
     * With a core each, a running peer answers within microseconds; one that has not after
     * FLAT_PAUSE_NS lost its core to other work, and yielding ours may give it back (a
     * sleep instead would add a wake-up, slow on a busy machine). */
    bool yielding = comm->spin_yield;
    uint64_t t0 = 0, start;
    coll_status_t st;

    for (unsigned i = 1;; i++) {
        if (reached(atomic_load_explicit(w, memory_order_acquire), want)) {
            if (f->spin_ns < f->spin_max_ns)
                f->spin_ns = COLL_MIN(f->spin_max_ns, f->spin_ns + f->spin_ns / 8 + 1000);
            return COLL_SUCCESS;
        }
        if (i % (yielding ? 4 : 64) == 0) {
            uint64_t now = coll__now_ns();
            if (!t0)
                t0 = now;
            if (now - t0 >= FLAT_PAUSE_NS)
                yielding = true;
            if (now - t0 >= spin_ns) {
                /* Polling did not find the peer within the budget: the cores are busy
                 * with other work, or the peer computes. Either way polling longer next
                 * time would take the core from whoever has it, so the budget halves
                 * (down to COLL_SPIN_US); waits that succeed while polling win it back. */
                f->spin_ns = COLL_MAX(spin_ns / 2, (uint64_t)comm->cfg.spin_us * 1000u);
                break;
            }
            st = flat_check(f, peer, what, false, NULL, 0);
            if (st != COLL_SUCCESS)
                return st;
        }
        if (yielding)
            sched_yield();
        else
            coll__cpu_relax();
    }
    start = coll__now_ns();
    for (;;) {
        struct timespec ts = {0, FLAT_SLEEP_MS * 1000000L};
        uint32_t v;

        atomic_fetch_add(&pr->sleepers, 1);
        v = atomic_load(w);
        if (!reached(v, want) && !atomic_load(&f->hdr->abort) && !atomic_load(&pr->closed) &&
            atomic_load(&comm->failed) == COLL_SUCCESS)
            (void)futex(w, FUTEX_WAIT, v, &ts);
        atomic_fetch_sub(&pr->sleepers, 1);
        if (reached(atomic_load_explicit(w, memory_order_acquire), want))
            return COLL_SUCCESS;
        if (atomic_load_explicit(&test_pause_us, memory_order_relaxed)) {
            /* tests: the peer sets the word and moves on meanwhile */
            usleep(atomic_exchange(&test_pause_us, 0));
        }
        st = flat_check(f, peer, what, true, w, want);
        if (st != COLL_SUCCESS)
            return st;
        if (comm->cfg.timeout_ms > 0 &&
            coll__now_ns() - start >= (uint64_t)comm->cfg.timeout_ms * 1000000ull)
            return flat_fail(f, COLL_TIMEOUT,
                             "call #%u on the shared-memory fast path made no progress for "
                             "%lld ms (COLL_TIMEOUT_MS): waiting for rank %d (pid %d) to %s",
                             f->call, (long long)comm->cfg.timeout_ms, peer,
                             (int)comm->peers[peer].pid, what);
    }
}

/* ---- 4 set-up ------------------------------------------------------------------------ */

static void flat_free(struct coll_flat *f)
{
    if (!f)
        return;
    for (int r = 0; f->pidfd && r < f->n; r++)
        if (f->pidfd[r] >= 0)
            close(f->pidfd[r]);
    coll__shm_segment_unmap(f->base, f->size);
    free(f->pidfd);
    free(f->snap);
    free(f->src);
    free(f);
}

/* Rank 0: hand fd (or, when fd < 0, "no segment") to every other rank. */
static coll_status_t segment_share(struct coll_flat *f, int fd)
{
    struct coll_comm *comm = f->comm;
    uint64_t t0 = coll__now_ns();

    for (int p = 1; p < f->n; p++) {
        for (;;) {
            int err = coll__shm_flat_send(f->shm, p, fd);
            struct timespec ts = {0, 100000};
            if (!err)
                break;
            if (err != EAGAIN)
                return flat_fail(f, err == ECONNREFUSED ? COLL_REMOTE_ERROR : COLL_SYSTEM_ERROR,
                                 "shm: handing the fast path's segment to rank %d (pid %d) "
                                 "failed: %s",
                                 p, (int)comm->peers[p].pid,
                                 err == ECONNREFUSED ? "it has left" : strerror(err));
            /* its doorbell queue is full of wake-ups: it drains them when it looks */
            if (comm->cfg.timeout_ms > 0 &&
                coll__now_ns() - t0 >= (uint64_t)comm->cfg.timeout_ms * 1000000ull)
                return flat_fail(f, COLL_TIMEOUT,
                                 "shm: rank %d's doorbell stayed full for %lld ms "
                                 "(COLL_TIMEOUT_MS)",
                                 p, (long long)comm->cfg.timeout_ms);
            nanosleep(&ts, NULL);
        }
    }
    return COLL_SUCCESS;
}

/* Ranks 1..n-1: wait for rank 0's verdict on the doorbell. *fd_p: the segment, or -1. */
static coll_status_t segment_receive(struct coll_flat *f, int *fd_p)
{
    struct coll_comm *comm = f->comm;
    uint64_t t0 = coll__now_ns();

    for (;;) {
        struct pollfd p[2];
        coll_status_t st;
        int v, bell, np = 0;

        pthread_mutex_lock(&comm->lock);
        v = coll__shm_flat_take(f->shm, fd_p);
        bell = coll__shm_flat_bell_fd(f->shm);
        pthread_mutex_unlock(&comm->lock);
        if (v)
            return COLL_SUCCESS;
        st = (coll_status_t)atomic_load(&comm->failed);
        if (st != COLL_SUCCESS || bell < 0) {
            coll__set_thread_error(comm->errmsg);
            return st != COLL_SUCCESS ? st : COLL_REMOTE_ERROR;
        }
        if (f->pidfd[0] >= 0)
            p[np++] = (struct pollfd){.fd = f->pidfd[0], .events = POLLIN};
        if ((np && poll(p, 1, 0) > 0) ||
            coll__shm_flat_peer(f->shm, 0) == COLL_SHM_PEER_GONE) {
            /* it may have shared it just before it left: look once more */
            pthread_mutex_lock(&comm->lock);
            v = coll__shm_flat_take(f->shm, fd_p);
            pthread_mutex_unlock(&comm->lock);
            if (v)
                return COLL_SUCCESS;
            return flat_fail(f, COLL_REMOTE_ERROR,
                             "rank 0 (pid %d) exited or left before it shared the fast path's "
                             "segment",
                             (int)comm->peers[0].pid);
        }
        if (comm->cfg.timeout_ms > 0 &&
            coll__now_ns() - t0 >= (uint64_t)comm->cfg.timeout_ms * 1000000ull)
            return flat_fail(f, COLL_TIMEOUT,
                             "rank 0 (pid %d) did not share the fast path's segment within "
                             "%lld ms (COLL_TIMEOUT_MS): does it run the same collectives?",
                             (int)comm->peers[0].pid, (long long)comm->cfg.timeout_ms);
        p[np++] = (struct pollfd){.fd = bell, .events = POLLIN};
        (void)poll(p, (nfds_t)np, FLAT_SLEEP_MS);
    }
}

/* Map fd and check that it is the segment this comm and its configuration expect. */
static coll_status_t segment_map(struct coll_flat *f, int fd)
{
    int64_t have = coll__shm_segment_size(fd);
    void *p;

    if (have < (int64_t)sizeof(struct flat_hdr))
        return flat_fail(f, COLL_REMOTE_ERROR,
                         "shm: the fast path's segment from rank 0 is too small");
    p = coll__shm_segment_map(fd, f->size);
    if (!p)
        return flat_fail(f, COLL_SYSTEM_ERROR, "shm: mmap of the fast path's segment: %s",
                         strerror(errno));
    f->base = p;
    f->hdr = p;
    /* rank 0 fills the header before anyone has the fd */
    if (f->rank == 0) {
        f->hdr->magic = FLAT_MAGIC;
        f->hdr->version = FLAT_VERSION;
        f->hdr->comm_id = f->comm->comm_id;
        f->hdr->nranks = (uint32_t)f->n;
        f->hdr->slot_bytes = f->slot_bytes;
        f->hdr->stride = f->stride;
        f->hdr->flags = f->comm->spin_yield ? FLAT_HDR_ROOTED_GENERAL : 0;
        f->flags = f->hdr->flags;
        return COLL_SUCCESS;
    }
    if (f->hdr->magic != FLAT_MAGIC || f->hdr->version != FLAT_VERSION ||
        f->hdr->comm_id != f->comm->comm_id || f->hdr->nranks != (uint32_t)f->n)
        return flat_fail(f, COLL_REMOTE_ERROR,
                         "shm: the segment rank 0 handed over is not this comm's fast path");
    if (f->hdr->slot_bytes != f->slot_bytes || f->hdr->stride != f->stride ||
        (uint64_t)have < f->size)
        return flat_fail(f, COLL_INVALID_USAGE,
                         "COLL_SHM_FLAT_BYTES or COLL_SHM_SLICED_BYTES differs between ranks "
                         "(slots of %zu bytes here, %llu on rank 0): set them alike on every "
                         "rank",
                         f->slot_bytes, (unsigned long long)f->hdr->slot_bytes);
    f->flags = f->hdr->flags;
    return COLL_SUCCESS;
}

/* The sliced path needs one rank per slice and a single pass of coll__reduce_n (2 to 16
 * ranks). Once it ran large calls in pieces it measured faster than the general path at
 * every size from 16 KiB to 64 MiB at NP 2, 4 and 8 on 2 cores (docs/performance.md), so it
 * is on wherever it fits, oversubscribed or not. */
static bool sliced_on(const struct coll_comm *comm)
{
    if (comm->cfg.shm_sliced_bytes <= comm->cfg.shm_flat_bytes || comm->nranks < 2 ||
        comm->nranks > COLL_REDUCE_MAX_INPUTS)
        return false;
    /* a segment too large for it keeps the small path, rather than losing both */
    if ((size_t)comm->nranks * 2 * (size_t)comm->cfg.shm_sliced_bytes > FLAT_SEGMENT_MAX / 2)
        return false;
    return true;
}

static void flat_owner_shutdown(void *f)
{
    coll__flat_shutdown(f);
}

static void flat_owner_fini(void *f)
{
    coll__flat_fini(f);
}

/* The first call that wants the fast path: rank 0 makes the segment, the others map it.
 * Returns COLL_SUCCESS with comm->flat set, or with it NULL when rank 0 could not make one
 * (the fast path is then off on every rank); an error fails the comm. */
static coll_status_t flat_setup(struct coll_comm *comm, void *shm)
{
    struct coll_flat *f = calloc(1, sizeof(*f));
    coll_status_t st;
    int n = comm->nranks, fd = -1;

    if (!f)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the shm fast path");
    f->comm = comm;
    f->shm = shm;
    f->n = n;
    f->rank = comm->rank;
    f->slot_bytes = round_cl((size_t)COLL_MAX(
        COLL_MAX(comm->cfg.shm_flat_bytes, comm->flat_sliced ? comm->cfg.shm_sliced_bytes : 0),
        1));
    f->spin_max_ns = f->spin_ns = (uint64_t)comm->cfg.shm_flat_spin_us * 1000u;
    f->stride = round_cl(sizeof(struct flat_rank) + 2 * f->slot_bytes);
    f->size = sizeof(struct flat_hdr) + (size_t)n * f->stride;
    f->pidfd = malloc((size_t)n * sizeof(*f->pidfd));
    f->snap = calloc((size_t)n, sizeof(*f->snap));
    f->src = calloc((size_t)n, sizeof(*f->src));
    if (!f->pidfd || !f->snap || !f->src) {
        flat_free(f);
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the shm fast path");
    }
    /* each peer's pidfd turns its death into an error within FLAT_SLEEP_MS */
    for (int p = 0; p < n; p++)
        f->pidfd[p] = p == f->rank ? -1
                                   : (int)syscall(SYS_pidfd_open, (pid_t)comm->peers[p].pid, 0);
    if (f->rank == 0) {
        if (f->size > FLAT_SEGMENT_MAX) {
            COLL_INFO(COLL_SUB_SHM, "rank 0: shm fast path off: its segment would take %zu "
                      "bytes for %d ranks (COLL_SHM_FLAT_BYTES=%lld)", f->size, n,
                      (long long)comm->cfg.shm_flat_bytes);
        } else {
            fd = coll__shm_segment_new("coll-flat", f->size);
            if (fd < 0)
                COLL_WARN(COLL_SUB_SHM, "rank 0: shm fast path off: cannot reserve %zu bytes "
                          "of shared memory: %s", f->size, strerror(errno));
        }
        st = fd >= 0 ? segment_map(f, fd) : COLL_SUCCESS;
        if (st == COLL_SUCCESS)
            st = segment_share(f, fd);
    } else {
        st = segment_receive(f, &fd);
        if (st == COLL_SUCCESS && fd >= 0)
            st = segment_map(f, fd);
    }
    if (fd >= 0)
        close(fd); /* the mapping keeps the memory */
    if (st != COLL_SUCCESS && f->base)
        coll__flat_shutdown(f); /* ranks that did map it must not wait for this one */
    if (st != COLL_SUCCESS || !f->base) {
        flat_free(f);
        return st;
    }
    pthread_mutex_lock(&comm->lock);
    coll__shm_flat_attach(shm, &(struct coll_shm_segment_owner){
                                   .shutdown = flat_owner_shutdown,
                                   .fini = flat_owner_fini,
                                   .arg = f,
                               });
    comm->flat = f;
    pthread_mutex_unlock(&comm->lock);
    COLL_INFO(COLL_SUB_SHM, "rank %d: shm fast path segment of %zu bytes mapped (%d ranks, "
              "slots of %zu bytes)", comm->rank, f->size, n, f->slot_bytes);
    return COLL_SUCCESS;
}

void coll__flat_shutdown(struct coll_flat *f)
{
    struct flat_rank *me;
    uint32_t zero = 0;
    size_t n;

    if (!f)
        return;
    me = rank_at(f, f->rank);
    pthread_mutex_lock(&f->comm->errlock);
    n = strnlen(f->comm->errmsg, sizeof(me->reason) - 1);
    memcpy(me->reason, f->comm->errmsg, n);
    me->reason[n] = '\0';
    pthread_mutex_unlock(&f->comm->errlock);
    atomic_store(&me->closed, FLAT_FAILED);
    atomic_compare_exchange_strong(&f->hdr->abort, &zero, (uint32_t)f->rank + 1);
    /* whoever sleeps anywhere in the segment looks again now, not at its next timeout */
    for (int r = 0; r < f->n; r++) {
        struct flat_rank *pr = rank_at(f, r);
        wake_all(&pr->line[0].seq);
        wake_all(&pr->line[1].seq);
        wake_all(&pr->done);
        wake_all(&pr->reduced);
    }
}

void coll__flat_fini(struct coll_flat *f)
{
    struct flat_rank *me;
    uint32_t open = FLAT_OPEN;

    if (!f)
        return;
    me = rank_at(f, f->rank);
    /* a peer still waiting on us learns that we left */
    if (atomic_compare_exchange_strong(&me->closed, &open, FLAT_LEFT)) {
        wake_all(&me->line[0].seq);
        wake_all(&me->line[1].seq);
        wake_all(&me->done);
        wake_all(&me->reduced);
    }
    if (f->comm->flat == f)
        f->comm->flat = NULL;
    flat_free(f);
}

/* ---- 5 the collectives --------------------------------------------------------------- */

/* The signature a line holds (a piece of a large call names its piece's count). */
static struct coll_sig line_sig(const struct flat_line *l)
{
    return (struct coll_sig){.coll = l->coll, .dtype = l->dtype, .op = l->op,
                             .root = l->root, .count = l->count};
}

/* Wait for peer's line of call c, copy it out, check it against this rank's call. */
static coll_status_t read_line(struct coll_flat *f, int peer, uint32_t c, const struct flat_line *mine)
{
    struct flat_line *l = &rank_at(f, peer)->line[c & 1], *s = &f->snap[peer];
    coll_status_t st = flat_wait(f, peer, &l->seq, c, "start the same call");
    uint32_t seq;

    if (st != COLL_SUCCESS)
        return st;
    memcpy(s, l, sizeof(*s));
    seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    if (seq != c)
        return flat_fail(f, COLL_REMOTE_ERROR,
                         "rank %d's line on the shared-memory fast path holds call #%u where "
                         "this rank runs call #%u",
                         peer, seq, c);
    if (s->coll != mine->coll || s->dtype != mine->dtype || s->op != mine->op ||
        s->root != mine->root || s->count != mine->count || s->cseq != mine->cseq) {
        struct coll_sig theirs = line_sig(s), ours = line_sig(mine);
        char why[640];
        /* the line holds 32 bits of the peer's number: this rank's own supplies the rest */
        uint64_t pc = (f->cseq & ~(uint64_t)UINT32_MAX) | s->cseq;
        coll__agree_explain(f->comm, peer, pc, &theirs, f->cseq, &ours, why, sizeof(why));
        return flat_fail(f, COLL_REMOTE_ERROR, "%s", why);
    }
    return COLL_SUCCESS;
}

/* Where rank r's input of call c is (our copy of its line for small ones). */
static const void *input_of(struct coll_flat *f, int r, uint32_t c, size_t bytes)
{
    if (r == f->rank)
        return bytes <= FLAT_INLINE ? (const void *)rank_at(f, r)->line[c & 1].data
                                    : (const void *)slot_of(f, rank_at(f, r), c);
    return bytes <= FLAT_INLINE ? (const void *)f->snap[r].data
                                : (const void *)slot_of(f, rank_at(f, r), c);
}

/* recvbuf = inputs of ranks 0..n-1 folded left to right, at most COLL_REDUCE_MAX_INPUTS at
 * a time (every rank folds the same way, so every rank gets the same bits). */
static void reduce_all(struct coll_flat *f, void *recvbuf, uint32_t c, size_t count,
                       coll_dtype_t dt, coll_op_t op)
{
    const size_t bytes = count * coll__dtype_size(dt);
    const void *in[COLL_REDUCE_MAX_INPUTS];
    int k = COLL_MIN(f->n, COLL_REDUCE_MAX_INPUTS);

    for (int r = 0; r < f->n; r++)
        f->src[r] = input_of(f, r, c, bytes);
    (void)coll__reduce_n(recvbuf, f->src, k, count, dt, op);
    for (int r = k; r < f->n; r += COLL_REDUCE_MAX_INPUTS - 1) {
        int m = COLL_MIN(f->n - r, COLL_REDUCE_MAX_INPUTS - 1);
        in[0] = recvbuf;
        for (int i = 0; i < m; i++)
            in[1 + i] = f->src[r + i];
        (void)coll__reduce_n(recvbuf, in, 1 + m, count, dt, op);
    }
    if (op == COLL_AVG)
        coll__reduce_div(recvbuf, count, dt, (uint64_t)f->n);
}

static coll_status_t read_all(struct coll_flat *f, uint32_t c, const struct flat_line *mine)
{
    for (int p = 0; p < f->n; p++) {
        coll_status_t st;
        if (p == f->rank)
            continue;
        st = read_line(f, p, c, mine);
        if (st != COLL_SUCCESS)
            return st;
    }
    return COLL_SUCCESS;
}

/* A copy into the caller's recvbuf, streaming past the cache where `how` says so. */
static void copy_out(unsigned how, void *dst, const void *src, size_t bytes)
{
    if (how & FLAT_STREAM)
        coll__copy_stream(dst, src, bytes);
    else
        coll__copy(dst, src, bytes);
}

/* Above COLL_SHM_FLAT_BYTES: every input is in its rank's slot; rank r reduces slice r of
 * all of them into its own slot (in place over its own input there, which no other rank
 * reads), says so, and every rank (all-reduce) or the root (reduce, root >= 0) copies every
 * slice out. Each slice is reduced once, so every rank gets the same bits; n <=
 * COLL_REDUCE_MAX_INPUTS (one fold). The root of a reduce reduces its own slice straight
 * into recvbuf: nobody reads it from the segment. */
static coll_status_t sliced(struct coll_flat *f, void *recvbuf, uint32_t c, size_t count,
                            coll_dtype_t dt, coll_op_t op, int root, unsigned how)
{
    const size_t esz = coll__dtype_size(dt), n = (size_t)f->n, r = (size_t)f->rank;
    const size_t lo = count * r / n, hi = count * (r + 1) / n;
    struct flat_rank *me = rank_at(f, f->rank);
    uint8_t *mine = root == f->rank ? (uint8_t *)recvbuf + lo * esz
                                    : slot_of(f, me, c) + lo * esz;

    for (int p = 0; p < f->n; p++)
        f->src[p] = slot_of(f, rank_at(f, p), c) + lo * esz;
    if (hi > lo) {
        (void)coll__reduce_n(mine, f->src, f->n, hi - lo, dt, op);
        if (op == COLL_AVG)
            coll__reduce_div(mine, hi - lo, dt, (uint64_t)f->n);
        if (root != f->rank) /* the others copy our reduced slice out */
            atomic_fetch_add_explicit(&f->comm->bytes_sent, (hi - lo) * esz,
                                      memory_order_relaxed);
    }
    publish(me, &me->reduced, c);
    if (root >= 0 && root != f->rank)
        return COLL_SUCCESS;
    for (int p = 0; p < f->n; p++) {
        struct flat_rank *pr = rank_at(f, p);
        size_t plo = count * (size_t)p / n, phi = count * ((size_t)p + 1) / n;
        if (p == f->rank && root == f->rank)
            continue;
        if (p != f->rank) {
            coll_status_t st = flat_wait(f, p, &pr->reduced, c, "reduce its slice");
            if (st != COLL_SUCCESS)
                return st;
        }
        if (phi > plo)
            copy_out(how, (uint8_t *)recvbuf + plo * esz, slot_of(f, pr, c) + plo * esz,
                     (phi - plo) * esz);
    }
    return COLL_SUCCESS;
}

/* The root of a broadcast reads no line, so a peer that named another root (or count) would
 * go unseen: it compares the peers' lines of that call at its next call on this path (or at
 * coll_comm_destroy) instead, and only then says it is done with the call. Peers cannot
 * overwrite their line of that call until it does, so the comparison always finds it; the
 * root does not wait for the slowest rank's arrival within the broadcast itself. */
static coll_status_t flat_settle(struct flat_rank *me, struct coll_flat *f)
{
    const uint32_t c = f->unchecked;
    const uint64_t cseq = f->cseq;
    const struct coll_sig sig = f->sig;
    coll_status_t st;

    /* the waits below are the broadcast's: a stalled one compares the peers' logs of the
     * broadcast with the broadcast, not with the call that settles it */
    f->unchecked = 0;
    f->cseq = f->unchecked_cseq;
    f->sig = f->unchecked_sig;
    st = read_all(f, c, &me->line[c & 1]);
    f->cseq = cseq;
    f->sig = sig;
    if (st == COLL_SUCCESS)
        publish(me, &me->done, c);
    return st;
}

/* how: FLAT_* flags, which flat_path_run sets from the size of the whole call */
static coll_status_t flat_call(struct coll_flat *f, enum coll_coll coll, const void *sendbuf,
                               void *recvbuf, size_t count, coll_dtype_t dt, coll_op_t op,
                               int root, unsigned how)
{
    const size_t esz = coll__dtype_size(dt), bytes = count * esz;
    const uint32_t c = f->call + 1;
    struct flat_rank *me = rank_at(f, f->rank);
    struct flat_line *ml = &me->line[c & 1];
    const bool writes = coll != COLL_COLL_BARRIER && (coll != COLL_COLL_BROADCAST || f->rank == root);
    /* a piece of a large call: the sliced protocol (reduce) */
    const bool big = bytes > (size_t)f->comm->cfg.shm_flat_bytes && !(how & FLAT_WHOLE);
    coll_status_t st = COLL_SUCCESS;

    /* once any rank failed, no call of any rank starts (a peer's published input could
     * otherwise still complete one here) */
    if (atomic_load_explicit(&f->hdr->abort, memory_order_relaxed))
        return flat_check(f, f->rank, "start", false, NULL, 0);
    if (f->unchecked) {
        st = flat_settle(me, f);
        if (st != COLL_SUCCESS)
            return st;
    }
    /* our line and slot of call c - 2 must have been read by everyone */
    if (!reached(f->done_ok, c - 2)) {
        for (int p = 0; p < f->n; p++) {
            if (p == f->rank)
                continue;
            st = flat_wait(f, p, &rank_at(f, p)->done, c - 2, "finish reading an earlier call");
            if (st != COLL_SUCCESS)
                return st;
        }
        f->done_ok = c - 2;
    }
    f->call = c;
    ml->coll = (uint8_t)coll;
    ml->dtype = (uint8_t)dt;
    ml->op = (uint8_t)op;
    ml->root = root;
    ml->cseq = (uint32_t)f->cseq;
    ml->count = count;
    if (writes && bytes) {
        memcpy(bytes <= FLAT_INLINE ? ml->data : slot_of(f, me, c), sendbuf, bytes);
        /* what peers read of ours counts as sent, as a transport's payload does */
        atomic_fetch_add_explicit(&f->comm->bytes_sent, bytes, memory_order_relaxed);
    }
    publish(me, &ml->seq, c);

    switch (coll) {
    case COLL_COLL_ALLREDUCE:
        st = read_all(f, c, ml);
        if (st != COLL_SUCCESS || !count)
            break;
        if (bytes <= (size_t)f->comm->cfg.shm_flat_bytes)
            reduce_all(f, recvbuf, c, count, dt, op);
        else
            st = sliced(f, recvbuf, c, count, dt, op, -1, how);
        break;
    case COLL_COLL_REDUCE:
        if (big) { /* every rank reduces a slice, the root gathers them */
            st = read_all(f, c, ml);
            if (st == COLL_SUCCESS)
                st = sliced(f, recvbuf, c, count, dt, op, root, how);
            break;
        }
        if (f->rank != root)
            break;
        st = read_all(f, c, ml);
        if (st == COLL_SUCCESS && count)
            reduce_all(f, recvbuf, c, count, dt, op);
        break;
    case COLL_COLL_BROADCAST:
        if (f->rank == root) {
            if (bytes && sendbuf != recvbuf)
                copy_out(how, recvbuf, sendbuf, bytes);
            break;
        }
        st = read_line(f, root, c, ml);
        if (st == COLL_SUCCESS && bytes)
            copy_out(how, recvbuf, input_of(f, root, c, bytes), bytes);
        break;
    case COLL_COLL_ALLGATHER:
        st = read_all(f, c, ml);
        for (int r = 0; st == COLL_SUCCESS && bytes && r < f->n; r++) {
            uint8_t *dst = (uint8_t *)recvbuf + (size_t)r * bytes;
            const void *src = r == f->rank ? sendbuf : input_of(f, r, c, bytes);
            if (dst != src)
                memcpy(dst, src, bytes);
        }
        break;
    case COLL_COLL_BARRIER:
        st = read_all(f, c, ml);
        break;
    default:
        return coll__error(f->comm, COLL_INTERNAL_ERROR, "shm fast path: %s", coll_text(coll));
    }
    if (st != COLL_SUCCESS)
        return st;
    /* Every peer's line of call c was read: each has started call c, so each finished call
     * c - 1, its reads of our line and slot of c - 1 included. The next call's wait for the
     * done words is then already answered, without fetching a peer's cache line. */
    if (coll == COLL_COLL_ALLREDUCE || coll == COLL_COLL_ALLGATHER ||
        coll == COLL_COLL_BARRIER || (coll == COLL_COLL_REDUCE && (big || f->rank == root)))
        f->done_ok = c - 1;
    if (coll == COLL_COLL_BROADCAST && f->rank == root && f->n > 1) {
        f->unchecked = c;
        f->unchecked_cseq = f->cseq;
        f->unchecked_sig = f->sig;
        return COLL_SUCCESS;
    }
    publish(me, &me->done, c);
    return COLL_SUCCESS;
}

/* ---- 6 the path ---------------------------------------------------------------------- */

/* Once per comm, the same on every rank: may this comm use the fast path, and why not. */
static void flat_decide(struct coll_comm *comm)
{
    const struct coll_transport *shm = &coll__shm_transport;
    char why[160] = "";
    int idx = coll__transport_index(shm);

    comm->flat_colls = 0;
    comm->flat_forced = 0;
    for (int c = 0; c < COLL_NUM_COLLS; c++) {
        bool forced = false;
        if ((COLL_FLAT_COLLS & (1u << c)) && coll__select_flat(comm, (enum coll_coll)c, &forced)) {
            comm->flat_colls |= 1u << c;
            if (forced)
                comm->flat_forced |= 1u << c;
        }
    }
    if (comm->nhosts != 1)
        snprintf(why, sizeof(why), "the ranks are on %d hosts", comm->nhosts);
    else if (idx < 0 || !comm->tp_ctx[idx])
        snprintf(why, sizeof(why), "the shm transport is not up on this rank");
    for (int p = 0; !why[0] && p < comm->nranks; p++)
        if (p != comm->rank && comm->peer_tp[p] != shm)
            snprintf(why, sizeof(why), "rank %d is reached over %s", p,
                     comm->peer_tp[p] ? comm->peer_tp[p]->name : "nothing");
    /* the segment itself (its log of every rank's calls) serves a comm of one host over shm
     * even where the path runs nothing */
    comm->flat_segment = !why[0];
    if (!why[0] && !comm->cfg.shm_flat)
        snprintf(why, sizeof(why), "COLL_SHM_FLAT=0");
    if (!why[0] && !comm->flat_colls)
        snprintf(why, sizeof(why), "COLL_ALGO names other algorithms for all its collectives");
    comm->flat_state = why[0] ? -1 : 1;
    comm->flat_cuda = coll__cuda_available();
    comm->flat_sliced = sliced_on(comm);
    if (why[0])
        COLL_INFO(COLL_SUB_SHM, "rank %d: shm fast path off: %s", comm->rank, why);
    else
        COLL_INFO(COLL_SUB_SHM, "rank %d: shm fast path on: all %d ranks on one host over shm; "
                  "all-reduce, broadcast, reduce, all-gather and barrier of at most %lld bytes "
                  "per rank, blocking, non-blocking or grouped; larger all-reduce, broadcast "
                  "and reduce in pieces of %lld bytes%s",
                  comm->rank, comm->nranks, (long long)comm->cfg.shm_flat_bytes,
                  comm->flat_sliced ? (long long)comm->cfg.shm_sliced_bytes : 0ll,
                  comm->flat_forced ? " (forced by COLL_ALGO)" : "");
}

/* Do a call's copies into recvbuf stream past the cache? Yes when the buffers the call
 * touches on this host (every rank's input and output; a broadcast's one input and n
 * outputs) come to at least coll__reduce_stream_bytes(), about half the last-level cache:
 * what a piece writes into recvbuf is then evicted before anyone reads it again, and a
 * plain store would first read the line it overwrites. Interleaved A/B on 2 cores (32 MiB
 * L3; docs/results/flat-stream.tsv): 0.45-0.9x the time from there up to 64 MiB at NP 2, 4
 * and 8; below it, e.g. a 2-rank broadcast of 4 MiB, streaming was slower. */
static bool flat_streams(const struct coll_flat *f, enum coll_coll coll, size_t bytes)
{
    size_t bufs = coll == COLL_COLL_BROADCAST ? (size_t)f->n + 1 : 2 * (size_t)f->n;

    return bytes >= coll__reduce_stream_bytes() / bufs;
}

/* The fast path copies with the CPU: device memory is the general path's. */
static bool host_memory(struct coll_comm *comm, const void *p)
{
    enum coll_mem_kind kind;

    return !p || (coll__cuda_mem_kind(comm, p, &kind, NULL) == COLL_SUCCESS &&
                  kind != COLL_MEM_DEVICE);
}

/* Small reduce and broadcast when the host has more ranks than CPUs (FLAT_HDR_ROOTED_GENERAL;
 * flags: the segment's, or this rank's own view before it exists). */
static bool rooted_general(uint32_t flags, enum coll_coll coll, size_t bytes, size_t small)
{
    return (flags & FLAT_HDR_ROOTED_GENERAL) && bytes <= small &&
           (coll == COLL_COLL_REDUCE || coll == COLL_COLL_BROADCAST);
}

/* Whether the comm, the collective and the size are the fast path's (the same answer on
 * every rank: the comm's settings and the call's arguments only). */
static bool takes(struct coll_comm *comm, enum coll_coll coll, size_t bytes)
{
    if (comm->flat_state == 0)
        flat_decide(comm);
    if (comm->flat_state < 0 || (unsigned)coll >= 32 || !(comm->flat_colls & (1u << coll)))
        return false;
    return bytes <= (size_t)comm->cfg.shm_flat_bytes ||
           ((FLAT_LARGE_COLLS & (1u << coll)) && comm->flat_sliced);
}

/* ... and not left to the general path by rank 0's FLAT_HDR_* (COLL_ALGO=flat keeps it) */
static bool keeps(struct coll_comm *comm, uint32_t flags, enum coll_coll coll, size_t bytes)
{
    return (comm->flat_forced & (1u << coll)) ||
           !rooted_general(flags, coll, bytes, (size_t)comm->cfg.shm_flat_bytes);
}

bool coll__flat_takes(struct coll_comm *comm, enum coll_coll coll, size_t bytes)
{
    /* before the segment exists, this rank's own view of the host stands in for rank 0's */
    uint32_t flags = comm->flat ? comm->flat->flags
                                : (comm->spin_yield ? FLAT_HDR_ROOTED_GENERAL : 0);

    return takes(comm, coll, bytes) && keeps(comm, flags, coll, bytes);
}

static bool flat_path_takes(struct coll_comm *comm, const struct coll_call *c, char *why,
                            size_t n)
{
    size_t bytes;

    if (c->coll == COLL_COLL_SENDRECV) {
        if (why)
            snprintf(why, n, "point-to-point");
        return false;
    }
    /* the API checked that count * size fits a size_t */
    bytes = c->count * coll__dtype_size(c->dtype);
    if (!takes(comm, c->coll, bytes)) {
        if (why)
            snprintf(why, n, "%s", comm->flat_state < 0 ? "off on this comm (COLL_DEBUG=INFO "
                                                          "says why)"
                                 : !(comm->flat_colls & (1u << c->coll))
                                     ? "not for this collective"
                                     : "larger than COLL_SHM_FLAT_BYTES");
        return false;
    }
    if (comm->flat_cuda && (!host_memory(comm, c->sendbuf) || !host_memory(comm, c->recvbuf))) {
        if (why)
            snprintf(why, n, "device memory");
        return false;
    }
    if (!comm->flat) { /* rank 0 could not make one at init: off on every rank */
        if (why)
            snprintf(why, n, "no segment");
        return false;
    }
    /* every rank mapped the segment at init and follows rank 0's choices in it */
    if (!keeps(comm, comm->flat->flags, c->coll, bytes)) {
        if (why)
            snprintf(why, n, "small rooted calls on a host with more ranks than CPUs go to "
                             "the trees");
        return false;
    }
    if (why)
        snprintf(why, n, "one host, shared memory%s",
                 (comm->flat_forced & (1u << c->coll)) ? ", forced by COLL_ALGO" : "");
    return true;
}

static coll_status_t flat_path_run(struct coll_comm *comm, const struct coll_call *c)
{
    struct coll_flat *f = comm->flat;
    const size_t esz = coll__dtype_size(c->dtype), count = c->count, bytes = count * esz;
    uint64_t t0 = 0;
    size_t chunk;
    unsigned how;
    coll_status_t st;

    if (!f) /* set up by the chooser; gone only once the comm ended */
        return coll__error(comm, COLL_INTERNAL_ERROR, "the shared-memory fast path is gone");
    if (comm->tracer)
        t0 = coll__now_ns();
    f->cseq = c->cseq;
    f->sig = c->sig;
    flat_log_call(f, f->cseq, &f->sig);
    /* A large call goes through the slots in pieces of one slot, each a call of its own
     * (so pieces k and k + 1 use different slots, and a rank fills piece k + 1 while slower
     * ones still read piece k). Every rank cuts alike: the slot size is checked equal on
     * every rank when the segment is mapped. */
    chunk = bytes > (size_t)comm->cfg.shm_flat_bytes ? f->slot_bytes / esz : count;
    how = c->coll == COLL_COLL_REDUCE &&
                  bytes <= COLL_MIN(FLAT_REDUCE_WHOLE_BYTES, f->slot_bytes)
              ? FLAT_WHOLE
              : 0;
    if (flat_streams(f, c->coll, bytes))
        how |= FLAT_STREAM;
    for (size_t off = 0;; off += chunk) {
        size_t m = COLL_MIN(chunk, count - off);
        st = flat_call(f, c->coll, c->sendbuf ? (const uint8_t *)c->sendbuf + off * esz : NULL,
                       c->recvbuf ? (uint8_t *)c->recvbuf + off * esz : NULL, m, c->dtype,
                       c->op, c->root, how);
        if (st != COLL_SUCCESS || count - off <= chunk)
            break;
    }
    f->ncalls++;
    if (comm->tracer) {
        pthread_mutex_lock(&comm->lock);
        coll__trace_flat(comm->tracer, c->coll, c->dtype, count, c->root, c->seq, t0, st);
        pthread_mutex_unlock(&comm->lock);
    }
    return st;
}

/* The general path's calls, through the comm's hooks (set when the segment is mapped): each
 * collective is logged as it starts, and a stalled one looks at the peers' logs. */
static void flat_on_start(struct coll_comm *comm, uint64_t cseq, const struct coll_sig *s)
{
    if (comm->flat)
        flat_log_call(comm->flat, cseq, s);
}

static bool flat_on_stall(struct coll_comm *comm, uint64_t cseq, const struct coll_sig *s,
                          char *why, size_t n)
{
    return comm->flat && flat_stall(comm->flat, cseq, s, why, n);
}

/* At coll_comm_destroy, on any path: once every peer has started this rank's last
 * collective (its log says so), compare the calls both logs still hold. A call that moved
 * nothing this rank waited for (a scatter or broadcast whose ranks named different roots)
 * is caught here at the latest. */
static coll_status_t flat_compare_logs(struct coll_flat *f)
{
    struct coll_comm *comm = f->comm;
    const uint64_t next = atomic_load(&comm->next_coll_seq);
    const uint64_t lo = next > FLAT_LOG ? next - FLAT_LOG : 0;
    struct flat_rank *me = rank_at(f, f->rank);
    const uint64_t deadline = coll__now_ns() + (uint64_t)comm->cfg.timeout_ms * 1000000ull;
    char why[640];

    if (next == 0)
        return COLL_SUCCESS;
    for (int p = 0; p < f->n; p++) {
        struct flat_log *l = &rank_at(f, p)->log[(next - 1) % FLAT_LOG];
        coll_status_t st;

        /* a peer not there yet gets until the comm's timeout, as any wait does */
        while (p != f->rank && atomic_load_explicit(&l->cseq1, memory_order_acquire) < next) {
            st = flat_check(f, p, "start its last call", true, NULL, 0);
            if (st != COLL_SUCCESS)
                return st;
            if (comm->cfg.timeout_ms > 0 && coll__now_ns() > deadline)
                return flat_fail(f, COLL_TIMEOUT,
                                 "coll_comm_destroy waited %lld ms (COLL_TIMEOUT_MS) for rank "
                                 "%d to start call #%llu",
                                 (long long)comm->cfg.timeout_ms, p, (unsigned long long)next);
            sched_yield();
        }
    }
    for (uint64_t c = lo; c < next; c++) {
        struct flat_log *l = &me->log[c % FLAT_LOG];
        struct coll_sig mine;

        if (atomic_load_explicit(&l->cseq1, memory_order_acquire) != c + 1)
            continue;
        mine = l->sig;
        if (flat_stall(f, c, &mine, why, sizeof(why)))
            return flat_fail(f, COLL_REMOTE_ERROR, "%s (found at coll_comm_destroy)", why);
    }
    return COLL_SUCCESS;
}

/* At coll_comm_destroy: what a disagreement of this rank's last calls on the path left for
 * it to learn. The deferred comparison of a broadcast's root; then every peer has finished
 * (or failed) this rank's last call, so a peer that found its arguments different has said so
 * in the segment's abort word by now. */
coll_status_t coll__flat_comm_end(struct coll_comm *comm)
{
    struct coll_flat *f = comm->flat;
    struct flat_rank *me;
    coll_status_t st = COLL_SUCCESS;

    if (!f || !f->base || atomic_load(&comm->failed) != COLL_SUCCESS)
        return (coll_status_t)atomic_load(&comm->failed);
    me = rank_at(f, f->rank);
    if (f->unchecked)
        st = flat_settle(me, f);
    for (int p = 0; st == COLL_SUCCESS && f->call && p < f->n; p++)
        if (p != f->rank)
            st = flat_wait(f, p, &rank_at(f, p)->done, f->call, "finish the last call");
    if (st == COLL_SUCCESS && atomic_load(&f->hdr->abort))
        st = flat_check(f, f->rank, "finish", false, NULL, 0);
    if (st == COLL_SUCCESS)
        st = flat_compare_logs(f);
    return st;
}

/* At comm init, so that the choice of a path never waits: whether every rank has the
 * segment is known to all before the first call, whatever its form (a rank other than 0
 * waits here for rank 0's verdict; init is collective anyway). The cost is the segment's
 * memory from init on: twice COLL_SHM_SLICED_BYTES per rank (2 MiB by default), reserved
 * in tmpfs. */
coll_status_t coll__flat_comm_init(struct coll_comm *comm)
{
    coll_status_t st;

    flat_decide(comm);
    if (!comm->flat_segment)
        return COLL_SUCCESS;
    st = flat_setup(comm, comm->tp_ctx[coll__transport_index(&coll__shm_transport)]);
    if (st == COLL_SUCCESS && !comm->flat)
        comm->flat_state = -1;
    if (comm->flat_state < 0 && comm->flat) /* only the log: the smallest slots would do, but
                                             * every rank sizes them alike as it is */
        COLL_INFO(COLL_SUB_SHM, "rank %d: shm segment kept for the calls' log only",
                  comm->rank);
    if (comm->flat) {
        comm->flat->sig.coll = COLL_COLL_SENDRECV; /* no flat call yet */
        comm->on_call_start = flat_on_start;
        comm->on_call_stall = flat_on_stall;
    }
    return st;
}

const struct coll_path coll__path_flat = {
    .name = "flat",
    .takes = flat_path_takes,
    .run = flat_path_run,
};

uint64_t coll__flat_calls(const struct coll_comm *comm)
{
    return comm && comm->flat ? comm->flat->ncalls : 0;
}

void coll__flat_test_pause_deep(unsigned us)
{
    atomic_store(&test_pause_us, us);
}

void coll__flat_test_corrupt(struct coll_comm *comm, int how)
{
    struct coll_flat *f = comm ? comm->flat : NULL;
    struct flat_rank *me;
    struct flat_line *l;

    if (!f)
        return;
    me = rank_at(f, f->rank);
    l = &me->line[(f->call + 1) & 1];
    /* scribble only once every peer has finished reading what this rank wrote */
    for (int p = 0; p < f->n; p++)
        while (p != f->rank && !reached(atomic_load(&rank_at(f, p)->done), f->call))
            sched_yield();
    switch (how) {
    case COLL_FLAT_CORRUPT_JUNK:
        memset(me, 0xa5, f->stride);
        break;
    case COLL_FLAT_CORRUPT_COUNT:
        /* the next call as an all-reduce of a count no buffer holds */
        l->coll = COLL_COLL_ALLREDUCE;
        l->count = (uint64_t)1 << 60;
        atomic_store(&l->seq, f->call + 1);
        break;
    case COLL_FLAT_CORRUPT_ABORT:
        atomic_store(&f->hdr->abort, 0x7fffffffu);
        break;
    default:
        break;
    }
}

/* ---- 7 calibration ------------------------------------------------------------------- */

/*
 * The flat path's row of the cost model, measured (collbench --calibrate).
 *
 * The row (struct coll_flat_cost) is a formula in four parameters (src/algo/cost.h,
 * coll__cost_predict_flat), each linear in the time it predicts. So each is fitted by asking
 * that same function: the time predicted with the parameter at 0 and at 1 gives the line,
 * and the measured time gives the point on it. Whatever the formula becomes, the fit stays
 * its inverse at the sizes measured, and the selector's figures and these agree.
 *
 *   8 B all-reduce              flat.alpha (one rank per core), else flat.yield
 *   COLL_SHM_FLAT_BYTES         flat.beta, the first fitted
 *   four pieces of the slot     flat.sliced, the first two fitted
 *
 * Each is the best of a few short trials (a trial that overlaps other work on a shared
 * machine is slower by whole wake-ups; the best one is the one that had the cores), the
 * slowest rank's, so every rank fits the same values. The calls go through the chooser
 * and the fast lane exactly as a blocking coll_allreduce on host memory does.
 */

#define CALIB_TRIALS 5

/* One blocking all-reduce of count floats on the flat path, where it takes the call (*flat_p
 * says whether it does). The flat path is asked itself, not the chooser: this measures the
 * flat path's row, which COLL_QUANT (the quant path, asked before it) does not change. */
static coll_status_t one_call(struct coll_comm *comm, const float *in, float *out,
                              size_t count, coll_op_t op, bool *flat_p)
{
    struct coll_call c = {.comm = comm, .coll = COLL_COLL_ALLREDUCE, .sendbuf = in,
                          .recvbuf = out, .count = count, .dtype = COLL_FLOAT32, .op = op,
                          .root = 0, .peer = -1};

    *flat_p = coll__path_flat.takes(comm, &c, NULL, 0);
    if (!*flat_p)
        return COLL_SUCCESS;
    return coll__path_run_now(comm, &coll__path_flat, &c);
}

/* The mean time per call of the best trial of reps calls, the slowest rank's; < 0 when
 * the flat path does not take the call on this comm (every rank answers alike). */
static coll_status_t time_calls(struct coll_comm *comm, float *in, float *out, size_t count,
                                int reps, double *t_p)
{
    double best = INFINITY, tmax[2];
    bool flat = false;
    coll_status_t st;

    *t_p = -1;
    for (int i = 0; i < 3; i++) /* warm the slots and the caches */
        if ((st = one_call(comm, in, out, count, COLL_SUM, &flat)) != COLL_SUCCESS || !flat)
            return st;
    for (int k = 0; k < CALIB_TRIALS; k++) {
        uint64_t t0 = coll__now_ns();
        for (int i = 0; i < reps; i++)
            if ((st = one_call(comm, in, out, count, COLL_SUM, &flat)) != COLL_SUCCESS)
                return st;
        best = COLL_MIN(best, (double)(coll__now_ns() - t0) * 1e-9 / reps);
    }
    /* the slowest rank's best, through the same path (2 floats: a small call) */
    in[0] = (float)best;
    in[1] = 0;
    if ((st = one_call(comm, in, (float *)tmax, 2, COLL_MAX, &flat)) != COLL_SUCCESS)
        return st;
    if (flat) {
        float got;
        memcpy(&got, tmax, sizeof(got));
        best = got;
    }
    *t_p = best;
    return COLL_SUCCESS;
}

/* Set *param so that the flat row predicts `measured` for an all-reduce of bytes (see the
 * header). false when the prediction does not depend on it, or the row cannot price it. */
static bool fit(struct coll_cost_params *p, double *param, size_t bytes, int32_t n,
                const struct coll_cost_flat_sizes *sizes, double measured)
{
    double keep = *param, t0, t1;

    *param = 0;
    if (coll__cost_predict_flat(p, COLL_COLL_ALLREDUCE, bytes, n, sizes, &t0) != COLL_SUCCESS)
        goto no;
    *param = 1;
    if (coll__cost_predict_flat(p, COLL_COLL_ALLREDUCE, bytes, n, sizes, &t1) != COLL_SUCCESS ||
        !(t1 - t0 > 0))
        goto no;
    *param = COLL_MAX((measured - t0) / (t1 - t0), 0.0);
    return true;
no:
    *param = keep;
    return false;
}

coll_status_t coll__flat_calibrate(struct coll_comm *comm, struct coll_cost_params *p,
                                   unsigned *fitted_p)
{
    struct coll_cost_flat_sizes sizes;
    struct coll_cost_params m;
    size_t big, cap;
    float *in = NULL, *out = NULL;
    coll_status_t st = COLL_SUCCESS;
    double t;
    int32_t n;

    if (!comm || !p || !fitted_p)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "flat calibration: NULL %s",
                           !comm ? "comm" : !p ? "params" : "fitted_p");
    *fitted_p = 0;
    n = comm->nranks;
    if (n < 2)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "flat calibration needs a comm of 2 or more ranks, not %d", n);
    coll__flat_sizes(comm, &sizes);
    /* the model as the selector runs it: this host's cores shared among its ranks */
    m = *p;
    m.cores = comm->cost ? comm->cost->cores : 0;
    big = sizes.piece_bytes > sizes.small_bytes ? 4 * sizes.piece_bytes : 0;
    cap = COLL_MAX(COLL_MAX(big, sizes.small_bytes), (size_t)8) / sizeof(float) + 2;
    in = malloc(cap * sizeof(float));
    out = malloc(cap * sizeof(float));
    if (!in || !out) {
        st = coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the flat calibration");
        goto out;
    }
    for (size_t i = 0; i < cap; i++)
        in[i] = (float)(i % 7);

    /* the 8 B call: alpha where each rank has a core; beyond the cores what the waits for
     * descheduled ranks cost, on top of the alpha a core per rank would give */
    if ((st = time_calls(comm, in, out, 2, 200, &t)) != COLL_SUCCESS)
        goto out;
    if (t >= 0) {
        bool over = m.cores > 0 && n > m.cores;
        if (fit(&m, over ? &m.flat.yield : &m.flat.alpha, 8, n, &sizes, t))
            *fitted_p |= over ? COLL_FLAT_FIT_YIELD : COLL_FLAT_FIT_ALPHA;
    }
    if (sizes.small_bytes >= 64) {
        size_t count = sizes.small_bytes / sizeof(float);
        if ((st = time_calls(comm, in, out, count, 100, &t)) != COLL_SUCCESS)
            goto out;
        if (t >= 0 && fit(&m, &m.flat.beta, count * sizeof(float), n, &sizes, t))
            *fitted_p |= COLL_FLAT_FIT_BETA;
    }
    if (big) {
        size_t count = big / sizeof(float);
        if ((st = time_calls(comm, in, out, count, 2, &t)) != COLL_SUCCESS)
            goto out;
        if (t >= 0 && fit(&m, &m.flat.sliced, count * sizeof(float), n, &sizes, t))
            *fitted_p |= COLL_FLAT_FIT_SLICED;
    }
    p->flat = m.flat;
out:
    free(in);
    free(out);
    return st;
}
