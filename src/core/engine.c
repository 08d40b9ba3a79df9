/*
 * engine.c - who drives progress, and how waits sleep.
 *
 * One thread at a time "drives" a comm: it advances the head op's executor, calls the
 * transports' poll hooks, and sleeps in epoll_wait on every fd of the comm when nothing
 * moves. A thread blocked in coll_wait drives itself, so a blocking collective pays one
 * kernel wake-up per message it waits for, never a hand-off between threads. When nobody
 * waits and ops are queued (non-blocking calls), the comm's progress thread drives; a caller
 * that starts waiting takes over by waking it through the eventfd.
 *
 * Waits spin (epoll_wait with timeout 0, yielding the core) for COLL_SPIN_US, then sleep:
 * ranks outnumber cores in the tests, and a spinning rank would steal the core its peer
 * needs.
 */
#include "agree.h"
#include "ctl.h"
#include "exec.h"
#include "topo.h"

#include <assert.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define ENGINE_SLEEP_MAX_MS 100 /* longest sleep between timeout checks */
#define ENGINE_MAX_EVENTS 64
#define ENGINE_STALL_MS 20      /* a collective this long without progress asks why */

static void wake_cb(struct coll_pollent *pe, uint32_t events)
{
    struct coll_comm *comm = pe->arg;
    uint64_t v;
    (void)events;
    while (read(comm->wakefd, &v, sizeof(v)) > 0)
        ;
}

void coll__engine_wake(struct coll_comm *comm)
{
    uint64_t one = 1;
    ssize_t r = write(comm->wakefd, &one, sizeof(one));
    (void)r; /* EAGAIN means a wake-up is already pending: as good */
}

static void op_list_remove_head(struct coll_comm *comm)
{
    struct coll_op *op = comm->ops_head;

    assert(op && (op->next || comm->ops_tail == op));
    comm->ops_head = op->next;
    if (!comm->ops_head)
        comm->ops_tail = NULL;
    op->next = NULL;
}

/* Complete finished ops at the head; free those nobody holds. Lock held. */
static void reap_head(struct coll_comm *comm)
{
    while (comm->ops_head && atomic_load(&comm->ops_head->status) != COLL_IN_PROGRESS) {
        struct coll_op *op = comm->ops_head;
        op_list_remove_head(comm);
        coll__exec_release(op);
        /* last touch: its holder may free it once it sees this */
        atomic_store_explicit(&op->dequeued, true, memory_order_release);
        if (comm->cond_sleepers)
            pthread_cond_broadcast(&comm->cond);
    }
}

/* An op whose parts run to completion by themselves (a path's run hook: the flat path's
 * waits on peers spin and sleep on their own, with the comm's timeout) runs with the lock
 * released, so that other threads can issue ops meanwhile; this thread stays the driver
 * (comm->driving), so nothing else advances the comm until it is done. Lock held. */
static void run_head(struct coll_comm *comm, struct coll_op *op)
{
    coll_status_t st = COLL_SUCCESS;
    int expected = COLL_IN_PROGRESS;

    /* only the driver runs ops, and only the head: ops complete in issue order */
    assert(op == comm->ops_head && op->runs && comm->driving && !comm->poll_only);
    pthread_mutex_unlock(&comm->lock);
    for (int k = 0; k < op->nparts && st == COLL_SUCCESS; k++)
        st = op->parts[k].run(comm, &op->parts[k].call);
    pthread_mutex_lock(&comm->lock);
    /* a failure of the comm meanwhile has set every op's status: the first one stays */
    atomic_compare_exchange_strong(&op->status, &expected, (int)st);
}

/* A collective that has made no progress for ENGINE_STALL_MS: ask whether a peer is known to
 * have called something else (the flat path's segment logs every rank's calls), which no
 * message would ever reveal (ranks that wait on each other under different roots). */
static void check_stall(struct coll_comm *comm)
{
    struct coll_op *op = comm->ops_head;
    char why[640];
    uint64_t now;

    if (!op || !op->started || !op->has_coll || op->runs ||
        atomic_load(&comm->failed) != COLL_SUCCESS)
        return;
    now = coll__now_coarse_ns();
    if (now - op->last_progress_ns < ENGINE_STALL_MS * 1000000ull ||
        now - op->stall_checked_ns < op->stall_every_ns)
        return;
    op->stall_checked_ns = now;
    /* without a shared log, ask the peers this op waits on (TCP); again ever more rarely,
     * as a peer that had not reached the call yet ignores the question */
    if (!comm->on_call_stall) {
        op->stall_every_ns = op->stall_every_ns ? COLL_MIN(op->stall_every_ns * 2, 1000000000ull)
                                                : ENGINE_STALL_MS * 1000000ull;
        coll__exec_probe_waits(op);
        if (op->csig)
            coll__ctl_probe(comm, op->wire_seq, op->csig);
        return;
    }
    op->stall_every_ns = ENGINE_STALL_MS * 1000000ull;
    if (op->csig && comm->on_call_stall(comm, op->wire_seq, op->csig, why, sizeof(why)))
        coll__fail(comm, COLL_REMOTE_ERROR, "%s", why);
}

/* A wait that has made no progress for COLL_STALL_MS says once what it waits for: who a
 * stalled job waits on is the first thing its user asks. */
static void log_stall(struct coll_comm *comm)
{
    struct coll_op *op = comm->ops_head;
    char what[512], sig[160];
    uint64_t idle;

    if (!op || !op->started || op->stall_said || comm->cfg.stall_ms <= 0 ||
        atomic_load(&comm->failed) != COLL_SUCCESS)
        return;
    idle = coll__now_coarse_ns() - op->last_progress_ns;
    if (idle < (uint64_t)comm->cfg.stall_ms * 1000000ull)
        return;
    op->stall_said = true;
    coll__exec_describe_wait(op, what, sizeof(what));
    COLL_WARN(COLL_SUB_COLL,
              "rank %d: call #%llu (%s) has made no progress for %llu ms (COLL_STALL_MS): "
              "waiting for %s; SIGUSR1 to any rank prints every rank's call on rank 0",
              comm->rank, (unsigned long long)op->wire_seq + 1,
              op->csig ? coll__sig_describe(op->csig, sig, sizeof(sig)) : "sends and receives",
              (unsigned long long)(idle / 1000000ull), what);
}

static void check_timeout(struct coll_comm *comm)
{
    struct coll_op *op = comm->ops_head;
    uint64_t now, limit;
    char what[512];

    if (!op || comm->cfg.timeout_ms <= 0 || atomic_load(&comm->failed) != COLL_SUCCESS)
        return;
    if (!op->started)
        return;
    now = coll__now_coarse_ns();
    limit = (uint64_t)comm->cfg.timeout_ms * 1000000ull;
    if (now - op->last_progress_ns < limit)
        return;
    coll__exec_describe_wait(op, what, sizeof(what));
    coll__fail(comm, COLL_TIMEOUT,
               "%s #%llu (%zu x %s) made no progress for %lld ms (COLL_TIMEOUT_MS): waiting "
               "for %s",
               coll__coll_name(op->parts[0].coll), (unsigned long long)op->seq,
               op->parts[0].plan->args.count, coll__dtype_name(op->parts[0].plan->args.dtype),
               (long long)comm->cfg.timeout_ms, what);
}

/* One round: advance the head ops; if nothing moved, sleep up to timeout_ms in epoll
 * (ENGINE_NO_POLL: do not look at the fds at all this round). Lock held on entry and exit;
 * released while sleeping. Returns true if anything moved. */
#define ENGINE_NO_POLL (-2)

static bool engine_progress(struct coll_comm *comm, int timeout_ms)
{
    struct epoll_event evs[ENGINE_MAX_EVENTS];
    bool moved = false;
    uint32_t armed;
    int n;

    for (;;) {
        struct coll_op *op = comm->ops_head;
        if (!op)
            break;
        if (op->runs) {
            if (comm->poll_only)
                break; /* coll_test does not block: the progress thread runs it */
            run_head(comm, op);
            moved = true;
        } else {
            moved |= coll__exec_advance(op);
        }
        if (atomic_load(&op->status) == COLL_IN_PROGRESS)
            break;
        reap_head(comm);
    }
    for (int i = 0; coll__transports[i]; i++)
        if (comm->tp_ctx[i] && coll__transports[i]->progress)
            moved |= coll__transports[i]->progress(comm->tp_ctx[i]);
    if (moved)
        timeout_ms = 0;
    /* the first stall check of a collective comes at ENGINE_STALL_MS, not after a whole
     * sleep: ranks that wait on each other in different calls learn it in tens of ms */
    if (timeout_ms > ENGINE_STALL_MS && comm->ops_head && comm->ops_head->started &&
        comm->ops_head->has_coll && !comm->ops_head->runs && !comm->ops_head->stall_checked_ns)
        timeout_ms = ENGINE_STALL_MS;
    armed = 0;
    for (int i = 0; timeout_ms > 0 && coll__transports[i]; i++) {
        if (!comm->tp_ctx[i] || !coll__transports[i]->arm)
            continue;
        armed |= 1u << i;
        if (coll__transports[i]->arm(comm->tp_ctx[i]))
            timeout_ms = 0;
    }
    /* A look that may not sleep, with no op left to advance (the call waited for finished in
     * the advance above, as a small one often does when its peer's message was already
     * there): nothing it could find would matter before the next op, whose own wait looks
     * then. Edge-triggered events stay queued until that look; it saves a syscall a call. */
    if (timeout_ms == ENGINE_NO_POLL || (timeout_ms == 0 && !comm->ops_head))
        return moved;
    pthread_mutex_unlock(&comm->lock);
    n = epoll_wait(comm->epfd, evs, ENGINE_MAX_EVENTS, timeout_ms);
    pthread_mutex_lock(&comm->lock);
    for (int i = 0; armed && coll__transports[i]; i++)
        if (armed & (1u << i))
            coll__transports[i]->disarm(comm->tp_ctx[i]);
    for (int i = 0; i < n; i++) {
        struct coll_pollent *pe = evs[i].data.ptr;
        pe->cb(pe, evs[i].events);
        moved = true;
    }
    if (n > 0 && comm->ops_head && !comm->ops_head->runs) {
        moved |= coll__exec_advance(comm->ops_head);
        reap_head(comm);
    }
    check_stall(comm);
    log_stall(comm);
    check_timeout(comm);
    return moved;
}

static void timed_wait_us(struct coll_comm *comm, int64_t us)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += us / 1000000;
    ts.tv_nsec += (us % 1000000) * 1000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&comm->pcond, &comm->lock, &ts);
}

static void *progress_main(void *arg)
{
    struct coll_comm *comm = arg;
    uint64_t graced_seq = UINT64_MAX;

    pthread_mutex_lock(&comm->lock);
    while (!comm->stopping) {
        if (!comm->ops_head) {
            comm->progress_idle = true; /* submit signals us only in this state */
            pthread_cond_wait(&comm->pcond, &comm->lock);
            comm->progress_idle = false;
            continue;
        }
        if (comm->waiters > 0 || comm->driving) {
            /* A caller drives. Look again now and then rather than being woken each time a
             * wait returns with ops left: that would cost a thread switch per op. */
            timed_wait_us(comm, COLL_MAX(comm->cfg.progress_delay_us, 100) * 4);
            continue;
        }
        if (!comm->spin_yield) {
            /* A caller that polls with coll_test drives as well: were this thread to take
             * over, it would sleep in the kernel with the drive, and the caller's completion
             * would wait for its wake-up (tens of us). So it takes over only once nobody has
             * tested for the delay. Not where this host's ranks outnumber its cores: there a
             * poller that drives takes CPU from the ranks that work (8 ranks on 2 cores over
             * TCP: 8-byte broadcasts 1.2-1.3x slower), and this thread's sleep gives it back. */
            uint64_t since = coll__now_ns() - comm->polled_ns;
            uint64_t delay = (uint64_t)comm->cfg.progress_delay_us * 1000;
            if (since < delay) {
                timed_wait_us(comm, (int64_t)((delay - since + 999) / 1000));
                continue;
            }
        }
        if (comm->ops_head->seq != graced_seq && comm->cfg.progress_delay_us > 0) {
            /* Most non-blocking ops are waited for soon after they are issued: give the
             * caller the chance to drive them itself before paying two thread switches. */
            graced_seq = comm->ops_head->seq;
            timed_wait_us(comm, comm->cfg.progress_delay_us);
            continue;
        }
        comm->driving = true;
        comm->progress_drives++;
        engine_progress(comm, ENGINE_SLEEP_MAX_MS);
        comm->driving = false;
        if (comm->cond_sleepers)
            pthread_cond_broadcast(&comm->cond);
    }
    pthread_mutex_unlock(&comm->lock);
    return NULL;
}

coll_status_t coll__engine_init(struct coll_comm *comm)
{
    struct epoll_event ev = {.events = EPOLLIN};
    struct coll_pollent *pe;

    comm->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (comm->epfd < 0)
        return coll__sys_error(comm, errno, "epoll_create1");
    comm->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (comm->wakefd < 0)
        return coll__sys_error(comm, errno, "eventfd");
    pe = &comm->wake_pe;
    pe->cb = wake_cb;
    pe->arg = comm;
    ev.data.ptr = pe;
    if (epoll_ctl(comm->epfd, EPOLL_CTL_ADD, comm->wakefd, &ev) < 0)
        return coll__sys_error(comm, errno, "epoll_ctl(eventfd)");
    return COLL_SUCCESS;
}

coll_status_t coll__engine_start(struct coll_comm *comm)
{
    int err = pthread_create(&comm->progress_thread, NULL, progress_main, comm);
    if (err)
        return coll__sys_error(comm, err, "cannot start the progress thread");
    comm->progress_started = true;
    coll__topo_comm_start(comm); /* INFO log of the hosts; the thread moves near the NIC */
    return COLL_SUCCESS;
}

void coll__engine_fini(struct coll_comm *comm)
{
    if (comm->progress_started) {
        pthread_mutex_lock(&comm->lock);
        comm->stopping = true;
        pthread_cond_broadcast(&comm->pcond);
        pthread_mutex_unlock(&comm->lock);
        coll__engine_wake(comm);
        pthread_join(comm->progress_thread, NULL);
        comm->progress_started = false;
    }
    free(atomic_exchange(&comm->spare_op, NULL));
}

void coll__engine_submit(struct coll_comm *comm, struct coll_op *op)
{
    assert(op->nparts > 0 && !op->next);
    pthread_mutex_lock(&comm->lock);
    op->seq = atomic_fetch_add(&comm->next_seq, 1);
    /* Every rank issues the same collectives in the same order, so their number is checked
     * by the receiver of each message; sends and receives are issued by some ranks only,
     * so an op of nothing else carries a fixed mark instead. */
    op->wire_seq = op->has_coll ? atomic_fetch_add(&comm->next_coll_seq, 1) : COLL_WIRE_SEQ_P2P;
    op->csig = NULL;
    for (int k = 0; k < op->nparts; k++) {
        op->parts[k].call.seq = op->seq;
        op->parts[k].call.cseq = op->wire_seq;
        if (!op->csig && op->parts[k].coll != COLL_COLL_SENDRECV)
            op->csig = &op->parts[k].call.sig;
    }
    if (op->csig)
        coll__agree_log(comm, op->wire_seq, op->csig);
    atomic_store(&op->status, COLL_IN_PROGRESS);
    if (atomic_load(&comm->failed) != COLL_SUCCESS)
        atomic_store(&op->status, atomic_load(&comm->failed));
    if (comm->ops_tail)
        comm->ops_tail->next = op;
    else
        comm->ops_head = op;
    comm->ops_tail = op;
    if (atomic_load(&op->status) != COLL_IN_PROGRESS)
        reap_head(comm);
    /* a non-blocking op wakes the progress thread; a blocking caller drives it itself */
    if (op->is_request && comm->progress_idle)
        pthread_cond_signal(&comm->pcond);
    pthread_mutex_unlock(&comm->lock);
}

/* Unlink op from the queue if it is still there (a finished op behind an unfinished one). */
static void op_unlink(struct coll_comm *comm, struct coll_op *op)
{
    struct coll_op **pp;

    for (pp = &comm->ops_head; *pp; pp = &(*pp)->next) {
        if (*pp != op)
            continue;
        *pp = op->next;
        if (comm->ops_tail == op) {
            comm->ops_tail = NULL;
            for (struct coll_op *o = comm->ops_head; o; o = o->next)
                comm->ops_tail = o;
        }
        op->next = NULL;
        atomic_store_explicit(&op->dequeued, true, memory_order_release);
        break;
    }
}

coll_status_t coll__engine_wait(struct coll_comm *comm, struct coll_op *op, bool unlink)
{
    uint64_t spin_ns = (uint64_t)comm->cfg.spin_us * 1000ull;

    /* A request that an earlier wait ran and reaped (a wait runs every op queued before
     * it, so most requests of a window are done by then) is the caller's alone: no lock. */
    if (atomic_load_explicit(&op->dequeued, memory_order_acquire))
        return (coll_status_t)atomic_load(&op->status);
    pthread_mutex_lock(&comm->lock);
    comm->waiters++;
    while (atomic_load(&op->status) == COLL_IN_PROGRESS) {
        uint64_t t0;
        if (comm->driving) {
            /* the progress thread is sleeping in epoll: ask it to hand over */
            coll__engine_wake(comm);
            comm->cond_sleepers++;
            pthread_cond_wait(&comm->cond, &comm->lock);
            comm->cond_sleepers--;
            continue;
        }
        comm->driving = true;
        /* the spin's clock starts at the first look that finds nothing (0: not yet), as most
         * small calls finish in their first look and need no clock at all */
        t0 = 0;
        for (unsigned spins = 0; atomic_load(&op->status) == COLL_IN_PROGRESS; spins++) {
            /* Shared memory is polled, not signalled: while spinning, the fds (pidfds,
             * doorbells) need a look only now and then, and each look is a syscall. */
            bool poll = comm->poll_fds_always || spins % 32 == 0;
            if (engine_progress(comm, poll ? 0 : ENGINE_NO_POLL)) {
                t0 = 0;
                continue;
            }
            if (spins % 8 == 0) {
                uint64_t now = coll__now_ns();
                if (!t0)
                    t0 = now;
                if (now - t0 >= spin_ns)
                    break;
            }
            pthread_mutex_unlock(&comm->lock);
            /* with a core each, yielding only adds a syscall to every look; with more ranks
             * than cores, the rank we wait for may need this one */
            if (comm->spin_yield)
                sched_yield();
            else
                coll__cpu_relax();
            pthread_mutex_lock(&comm->lock);
        }
        while (atomic_load(&op->status) == COLL_IN_PROGRESS) {
            if (engine_progress(comm, ENGINE_SLEEP_MAX_MS) && spin_ns)
                break; /* something arrived: spin again, the next message is likely close */
        }
        comm->driving = false;
        if (comm->waiters > 1)
            pthread_cond_broadcast(&comm->cond);
    }
    comm->waiters--;
    assert(comm->waiters >= 0);
    reap_head(comm);
    if (unlink)
        op_unlink(comm, op);
    pthread_mutex_unlock(&comm->lock);
    return (coll_status_t)atomic_load(&op->status);
}

void coll__engine_kick(struct coll_comm *comm)
{
    pthread_mutex_lock(&comm->lock);
    if (comm->progress_idle)
        pthread_cond_signal(&comm->pcond);
    pthread_mutex_unlock(&comm->lock);
}

void coll__engine_poll(struct coll_comm *comm)
{
    pthread_mutex_lock(&comm->lock);
    comm->polled_ns = coll__now_ns();
    if (!comm->driving) {
        comm->driving = true;
        comm->poll_only = true;
        engine_progress(comm, 0);
        comm->poll_only = false;
        comm->driving = false;
        if (comm->cond_sleepers)
            pthread_cond_broadcast(&comm->cond);
        if (comm->ops_head && comm->ops_head->runs && comm->progress_idle)
            pthread_cond_signal(&comm->pcond);
    }
    pthread_mutex_unlock(&comm->lock);
}

coll_status_t coll__engine_drain(struct coll_comm *comm)
{
    struct coll_op *tail;
    coll_status_t st;

    pthread_mutex_lock(&comm->lock);
    tail = comm->ops_tail;
    pthread_mutex_unlock(&comm->lock);
    /* ops complete in queue order, so the last one done means all are; every op still
     * queued is a request the user holds (blocking calls leave the queue before they
     * return), so it stays valid while this thread, the API's, waits for it */
    if (tail) {
        st = coll__engine_wait(comm, tail, false);
        if (st != COLL_SUCCESS) {
            st = (coll_status_t)atomic_load(&comm->failed);
            return st != COLL_SUCCESS ? st : COLL_REMOTE_ERROR;
        }
    }
    return (coll_status_t)atomic_load(&comm->failed);
}

uint64_t coll__engine_take_seq(struct coll_comm *comm, const struct coll_sig *coll_sig,
                               uint64_t *cseq_p)
{
    uint64_t seq;

    /* only the thread that issues on comm changes these (one at a time, coll.h), and the
     * queue is empty: a plain load and store, no read-modify-write */
    assert(!comm->ops_head || atomic_load(&comm->failed) != COLL_SUCCESS);
    *cseq_p = UINT64_MAX;
    if (coll_sig) {
        *cseq_p = atomic_load_explicit(&comm->next_coll_seq, memory_order_relaxed);
        atomic_store_explicit(&comm->next_coll_seq, *cseq_p + 1, memory_order_relaxed);
        coll__agree_log(comm, *cseq_p, coll_sig);
    }
    seq = atomic_load_explicit(&comm->next_seq, memory_order_relaxed);
    atomic_store_explicit(&comm->next_seq, seq + 1, memory_order_relaxed);
    return seq;
}

void coll__comm_fail(struct coll_comm *comm, coll_status_t st)
{
    int expected = COLL_SUCCESS;

    if (!atomic_compare_exchange_strong(&comm->failed, &expected, (int)st))
        return;
    COLL_INFO(COLL_SUB_COLL, "rank %d: communicator failed (%s): closing connections",
              comm->rank, coll_status_string(st));
    for (int i = 0; coll__transports[i]; i++)
        if (comm->tp_ctx[i] && coll__transports[i]->shutdown)
            coll__transports[i]->shutdown(comm->tp_ctx[i]);
    for (struct coll_op *op = comm->ops_head; op; op = op->next)
        atomic_store(&op->status, st);
    coll__ctl_failed(comm);
    pthread_cond_broadcast(&comm->cond);
    coll__engine_wake(comm);
}

void coll__engine_detach(struct coll_comm *comm, struct coll_op *op)
{
    pthread_mutex_lock(&comm->lock);
    op_unlink(comm, op);
    pthread_mutex_unlock(&comm->lock);
}

void coll__op_clear(struct coll_op *op)
{
    coll__exec_release(op);
    for (int k = 0; k < op->nparts; k++)
        coll__plan_put(op->parts[k].plan);
}

void coll__op_free(struct coll_op *op)
{
    if (!op)
        return;
    coll__op_clear(op);
    free(op);
}

/* The spare is the comm's, not the thread's: it goes with the comm at destroy, where a
 * thread's would outlive it (a key's destructor never runs for the main thread). An
 * exchange, not the lock: alloc and done run outside it, on whichever thread issues or
 * waits. */
struct coll_op *coll__op_new(struct coll_comm *comm, int nparts)
{
    size_t size = sizeof(struct coll_op) + (size_t)nparts * sizeof(struct coll_part);
    struct coll_op *op = NULL;

    assert(nparts >= 1);
    if (nparts == 1 && atomic_load_explicit(&comm->spare_op, memory_order_relaxed))
        op = atomic_exchange(&comm->spare_op, NULL);
    if (op)
        memset(op, 0, size);
    else if (!(op = calloc(1, size)))
        return NULL;
    op->parts = op->part_mem;
    op->comm = comm;
    return op;
}

void coll__op_done(struct coll_comm *comm, struct coll_op *op)
{
    struct coll_op *none = NULL;

    coll__op_clear(op);
    if (op->nparts != 1 || !atomic_compare_exchange_strong(&comm->spare_op, &none, op))
        free(op);
}
