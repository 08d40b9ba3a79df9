/*
 * run.c - running calls: the -T watchdog, the calls of each API form, one row
 * (checked rounds, warmup, timed calls, the ranks' times combined), the sweeps, progress
 * and the table's header.
 */
#include "collbench.h"

#include <fcntl.h>

/* --------------------------------------------------------------------------------------
 * Watchdog: -T SEC, as nccl-tests' timeout. Each phase of a test (checked calls, warmup,
 * timed calls, the bookkeeping collectives) re-arms it; when one phase takes longer than
 * SEC it says so and aborts the communicator, so that every call in progress returns and
 * the peers see the connections close.
 */

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *watchdog_main(void *arg)
{
    struct watchdog *w = arg;

    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        double now = now_s();
        if (w->deadline == 0) {
            pthread_cond_wait(&w->cond, &w->lock);
        } else if (now < w->deadline) {
            struct timespec ts;
            double until = w->deadline;
            ts.tv_sec = (time_t)until;
            ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
            pthread_cond_timedwait(&w->cond, &w->lock, &ts);
        } else {
            w->deadline = 0;
            atomic_store(&w->fired, true);
            fprintf(stderr,
                    "collbench: rank %d: test timeout: %s took more than %d s (-T); aborting\n",
                    w->rank, w->what ? w->what : "a call", w->timeout_s);
            coll_comm_abort(w->comm);
        }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int watchdog_start(struct watchdog *w, coll_comm_t *comm, int rank, int timeout_s)
{
    pthread_condattr_t ca;
    int err;

    w->comm = comm;
    w->rank = rank;
    w->timeout_s = timeout_s;
    atomic_init(&w->fired, false);
    if (timeout_s == 0)
        return 0;
    pthread_mutex_init(&w->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are CLOCK_MONOTONIC */
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    err = pthread_create(&w->thread, NULL, watchdog_main, w);
    if (err) {
        fprintf(stderr, "collbench: rank %d: cannot start the -T watchdog: %s\n", rank,
                strerror(err));
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->lock);
        return 1;
    }
    w->started = true;
    return 0;
}

/* (Re)arm for a phase named what; NULL disarms. */
void watchdog_arm(struct watchdog *w, const char *what)
{
    if (!w->started)
        return;
    pthread_mutex_lock(&w->lock);
    w->what = what;
    w->deadline = what ? now_s() + w->timeout_s : 0;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

void watchdog_stop(struct watchdog *w)
{
    if (!w->started)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    w->started = false;
}

int lib_error(struct bench *b, const char *what, coll_status_t st)
{
    fprintf(stderr, "collbench: rank %d: %s failed: %s: %s\n", b->rank, what,
            coll_status_string(st), b->cuda_msg[0] ? b->cuda_msg : coll_last_error(b->comm));
    return atomic_load(&b->wd.fired) ? EXIT_TIMEOUT : 1;
}

/* The host image of a pointer into a device buffer (itself for host memory). */
static void *host_image(const struct bench *b, const void *p)
{
    uintptr_t u = (uintptr_t)p, s = (uintptr_t)b->sendbuf;

    if (!b->cuda)
        return (void *)(uintptr_t)p;
    if (u >= s && u < s + b->bufsize)
        return (char *)b->hsend + (u - s);
    return (char *)b->hrecv + (u - (uintptr_t)b->recvbuf);
}

static struct layout layout_for(const struct bench *b, uint64_t size, coll_dtype_t dt)
{
    size_t count = (size_t)(size / dtypes[dt].size), n = (size_t)b->nranks;
    struct layout l = {count, 1, 1};

    switch (size_rule(b->o.coll)) {
    case RULE_SAME:
        break;
    case RULE_GATHER:
        l.param = count / n;
        l.nrecv = b->nranks;
        break;
    case RULE_SCATTER:
        l.param = count / n;
        l.nsend = b->nranks;
        break;
    case RULE_ALLTOALL:
        l.param = count / n;
        l.nsend = l.nrecv = b->nranks;
        break;
    case RULE_NONE:
        l.param = 0;
        break;
    }
    return l;
}

/* In place, the smaller buffer is a block of the larger (the row's shape): of the receive
 * buffer (all-gather, gather) or of the send buffer (reduce-scatter, scatter). */
static bool in_place_in_recv(const struct bench *b)
{
    return coll__colls[b->o.coll].recv_blocks > coll__colls[b->o.coll].send_blocks;
}

static bool in_place_in_send(const struct bench *b)
{
    return coll__colls[b->o.coll].send_blocks > coll__colls[b->o.coll].recv_blocks;
}

/* The buffers of one call: in place, the send or receive part lies inside the other buffer
 * where coll's in-place convention puts it (sendbuf == recvbuf + rank * count and so on). */
static void call_ptrs(const struct bench *b, bool in_place, const struct layout *l, size_t es,
                      void **s_p, void **r_p)
{
    size_t off = (size_t)b->rank * l->param * es;

    *s_p = b->sendbuf;
    *r_p = in_place ? b->sendbuf : b->recvbuf;
    if (!in_place)
        return;
    if (in_place_in_recv(b)) {
        *r_p = b->recvbuf;
        *s_p = (char *)b->recvbuf + off;
    } else if (in_place_in_send(b)) {
        *r_p = (char *)b->sendbuf + off;
    }
}

/* One call queued on the stream (--memtype cuda). */
static coll_status_t post_stream(struct bench *b, const void *s, void *r, size_t count,
                                 coll_dtype_t dt, coll_op_t op, int root)
{
    coll_comm_t *c = b->comm;
    void *q = b->stream;

    switch (b->o.coll) {
    case COLL_COLL_ALLREDUCE:
        return coll_allreduce_stream(s, r, count, dt, op, c, q);
    case COLL_COLL_BROADCAST:
        return coll_broadcast_stream(s, r, count, dt, root, c, q);
    case COLL_COLL_REDUCE:
        return coll_reduce_stream(s, r, count, dt, op, root, c, q);
    case COLL_COLL_ALLGATHER:
        return coll_allgather_stream(s, r, count, dt, c, q);
    case COLL_COLL_REDUCE_SCATTER:
        return coll_reduce_scatter_stream(s, r, count, dt, op, c, q);
    case COLL_COLL_ALLTOALL:
        return coll_alltoall_stream(s, r, count, dt, c, q);
    case COLL_COLL_SENDRECV: {
        coll_status_t st, st2;
        int n = b->nranks;
        st = coll_group_start();
        if (st != COLL_SUCCESS)
            return st;
        st = coll_send_stream(s, count, dt, (b->rank + 1) % n, c, q);
        if (st == COLL_SUCCESS)
            st = coll_recv_stream(r, count, dt, (b->rank + n - 1) % n, c, q);
        st2 = coll_group_end();
        return st != COLL_SUCCESS ? st : st2;
    }
    default: /* refused by parse_opts: no stream-ordered call */
        break;
    }
    return COLL_INTERNAL_ERROR;
}

/* One call, blocking (req_p NULL) or not. Send/recv is always a group of both: a receive
 * issued alone before its send would wait for it. */
static coll_status_t post(struct bench *b, const void *s, void *r, size_t count, coll_dtype_t dt,
                          coll_op_t op, int root, coll_request_t **req_p)
{
    coll_comm_t *c = b->comm;

    if (b->cuda)
        return post_stream(b, s, r, count, dt, op, root);
    switch (b->o.coll) {
    case COLL_COLL_ALLREDUCE:
        return req_p ? coll_iallreduce(s, r, count, dt, op, c, req_p)
                     : coll_allreduce(s, r, count, dt, op, c);
    case COLL_COLL_BROADCAST:
        return req_p ? coll_ibroadcast(s, r, count, dt, root, c, req_p)
                     : coll_broadcast(s, r, count, dt, root, c);
    case COLL_COLL_REDUCE:
        return req_p ? coll_ireduce(s, r, count, dt, op, root, c, req_p)
                     : coll_reduce(s, r, count, dt, op, root, c);
    case COLL_COLL_ALLGATHER:
        return req_p ? coll_iallgather(s, r, count, dt, c, req_p)
                     : coll_allgather(s, r, count, dt, c);
    case COLL_COLL_REDUCE_SCATTER:
        return req_p ? coll_ireduce_scatter(s, r, count, dt, op, c, req_p)
                     : coll_reduce_scatter(s, r, count, dt, op, c);
    case COLL_COLL_ALLTOALL:
        return req_p ? coll_ialltoall(s, r, count, dt, c, req_p)
                     : coll_alltoall(s, r, count, dt, c);
    case COLL_COLL_GATHER:
        return req_p ? coll_igather(s, r, count, dt, root, c, req_p)
                     : coll_gather(s, r, count, dt, root, c);
    case COLL_COLL_SCATTER:
        return req_p ? coll_iscatter(s, r, count, dt, root, c, req_p)
                     : coll_scatter(s, r, count, dt, root, c);
    case COLL_COLL_BARRIER:
        return req_p ? coll_ibarrier(c, req_p) : coll_barrier(c);
    case COLL_COLL_SENDRECV: {
        coll_status_t st, st2;
        int n = b->nranks;
        st = coll_group_start();
        if (st != COLL_SUCCESS)
            return st;
        st = coll_send(s, count, dt, (b->rank + 1) % n, c);
        if (st == COLL_SUCCESS)
            st = coll_recv(r, count, dt, (b->rank + n - 1) % n, c);
        st2 = coll_group_end(); /* closes the group even after a failed call */
        return st != COLL_SUCCESS ? st : st2;
    }
    case COLL_NUM_COLLS:
        break;
    }
    return COLL_INTERNAL_ERROR;
}

/* -m > 1: one iteration is a group of agg blocking calls. */
static coll_status_t post_group(struct bench *b, const void *s, void *r, size_t count,
                                coll_dtype_t dt, coll_op_t op, int root)
{
    coll_status_t st = coll_group_start(), st2;

    if (st != COLL_SUCCESS)
        return st;
    for (int a = 0; a < b->o.agg_iters && st == COLL_SUCCESS; a++)
        st = post(b, s, r, count, dt, op, root, NULL);
    st2 = coll_group_end();
    return st != COLL_SUCCESS ? st : st2;
}

/* --memtype cuda: iters iterations queued on the stream (each a group of agg calls with
 * -m), then one cudaStreamSynchronize, as nccl-tests times a batch; -z 1 synchronizes after
 * every iteration instead. The stream is always drained, even after a failed call: the host
 * calls that follow must not run while stream-ordered ones are pending (coll.h). */
static coll_status_t run_calls_stream(struct bench *b, const void *s, void *r, size_t count,
                                      coll_dtype_t dt, coll_op_t op, int root, int64_t iters,
                                      int agg)
{
    coll_status_t first = COLL_SUCCESS, st;

    for (int64_t it = 0; it < iters && first == COLL_SUCCESS; it++) {
        first = agg > 1 ? post_group(b, s, r, count, dt, op, root)
                        : post_stream(b, s, r, count, dt, op, root);
        if (first == COLL_SUCCESS && b->o.blocking)
            first = cuda_sync(b);
    }
    st = cuda_sync(b);
    return first != COLL_SUCCESS ? first : st;
}

/* iters iterations: blocking, grouped (-m), or with up to WINDOW non-blocking calls in
 * flight. Every request is waited for, even after a failure: coll owns them until then. */
static coll_status_t run_calls(struct bench *b, const void *s, void *r, size_t count,
                               coll_dtype_t dt, coll_op_t op, int root, int64_t iters, int agg)
{
    coll_request_t *win[WINDOW];
    coll_status_t first = COLL_SUCCESS, st;
    int head = 0, inflight = 0;
    bool blocking = b->o.blocking || coll__colls[b->o.coll].p2p;

    if (b->cuda)
        return run_calls_stream(b, s, r, count, dt, op, root, iters, agg);

    for (int64_t it = 0; it < iters && first == COLL_SUCCESS; it++) {
        if (agg > 1) {
            first = post_group(b, s, r, count, dt, op, root);
            continue;
        }
        if (blocking) {
            first = post(b, s, r, count, dt, op, root, NULL);
            continue;
        }
        if (inflight == WINDOW) {
            st = coll_wait(win[head]);
            head = (head + 1) % WINDOW;
            inflight--;
            if (st != COLL_SUCCESS) {
                first = st;
                break;
            }
        }
        st = post(b, s, r, count, dt, op, root, &win[(head + inflight) % WINDOW]);
        if (st != COLL_SUCCESS)
            first = st;
        else
            inflight++;
    }
    while (inflight > 0) {
        st = coll_wait(win[head]);
        head = (head + 1) % WINDOW;
        inflight--;
        if (first == COLL_SUCCESS)
            first = st;
    }
    return first;
}

/* --------------------------------------------------------------------------------------
 * One row: a size, a dtype, an op and a root; out-of-place then in-place.
 */

/* Round `round`: fill, one call, count this rank's wrong elements. With --memtype cuda the
 * patterns are made in the host images, copied to the device buffers (both, whole, so that
 * an element nobody writes keeps its complement there too), and read back after the call. */
static int check_once(struct bench *b, bool in_place, const struct rowspec *rs, unsigned round,
                      uint64_t *wrong_p)
{
    const struct layout *l = &rs->l;
    size_t es = dtypes[rs->dt].size, off = (size_t)b->rank * l->param * es;
    size_t sbytes = (size_t)l->nsend * l->param * es, rbytes = (size_t)l->nrecv * l->param * es;
    void *s, *r, *hr;
    void *sendimg = b->cuda ? b->hsend : b->sendbuf, *recvimg = b->cuda ? b->hrecv : b->recvbuf;
    coll_status_t st;
    uint64_t wrong = 0;
    bool recv_checked = checks_recv(b, in_place, rs->root);

    call_ptrs(b, in_place, l, es, &s, &r);
    if (!in_place) {
        fill_blocks(b, sendimg, l->nsend, rs, round, false, false);
        fill_blocks(b, recvimg, l->nrecv, rs, round, true, true);
    } else {
        if (in_place_in_recv(b)) {
            /* the others' blocks as nobody would leave them; ours where it is sent from */
            fill_blocks(b, recvimg, l->nrecv, rs, round, true, true);
            make_period(b->pat, send_pat(b, 0), rs->dt, rs->op, b->nranks, round);
            fill_periodic((char *)recvimg + off, b->pat, l->param, es);
        } else {
            fill_blocks(b, sendimg, l->nsend, rs, round, false, false);
        }
        if (in_place_in_send(b) && coll__colls[b->o.coll].root == COLL_ROOT_SOURCE &&
            b->rank != rs->root) {
            /* a rank's own block is what it must receive: start from its complement */
            make_period(b->pat, recv_pat(b, rs->root, 0), rs->dt, rs->op, b->nranks, round);
            for (size_t k = 0; k < PERIOD * es; k++)
                ((unsigned char *)b->pat)[k] ^= 0xff;
            fill_periodic((char *)sendimg + off, b->pat, l->param, es);
        }
    }
    if (b->cuda) {
        st = cuda_copy(b, b->sendbuf, b->hsend, sbytes, CUDA_MEMCPY_H2D);
        if (st == COLL_SUCCESS)
            st = cuda_copy(b, b->recvbuf, b->hrecv, rbytes, CUDA_MEMCPY_H2D);
        if (st != COLL_SUCCESS)
            return lib_error(b, "filling the device buffers", st);
    }
#ifdef COLLBENCH_TEST_HOOKS
    fault_before(b);
#endif
    st = run_calls(b, s, r, l->param, rs->dt, rs->op, rs->root, 1, 1);
    if (st != COLL_SUCCESS)
        return lib_error(b, coll__colls[b->o.coll].name, st);
    if (b->cuda) {
        st = cuda_copy(b, b->hsend, b->sendbuf, sbytes, CUDA_MEMCPY_D2H);
        if (st == COLL_SUCCESS)
            st = cuda_copy(b, b->hrecv, b->recvbuf, rbytes, CUDA_MEMCPY_D2H);
        if (st != COLL_SUCCESS)
            return lib_error(b, "reading the device buffers back", st);
    }
    hr = host_image(b, r);
#ifdef COLLBENCH_TEST_HOOKS
    if (recv_checked)
        fault_after(b, hr, rs);
#endif
    if (recv_checked) {
        int nblk = l->nrecv;
        if (in_place && in_place_in_send(b))
            nblk = 1; /* r points at this rank's block of the send buffer */
        wrong += check_blocks(b, hr, nblk, rs, round, true);
    }
    /* An out-of-place call must leave the send buffer alone, on every rank. */
    if (!in_place)
        wrong += check_blocks(b, sendimg, l->nsend, rs, round, false);
    *wrong_p = wrong;
    return 0;
}

/* The ranks' times (seconds per call, each rank's own) in b->times, every rank. */
static coll_status_t gather_times(struct bench *b, double t)
{
    for (int i = 0; i < b->nranks; i++)
        b->times[i] = 0;
    b->times[b->rank] = t;
    /* a sum of one non-zero value per slot: exact, and allreduce is what every algorithm
     * set supports */
    return coll_allreduce(b->times, b->times, (size_t)b->nranks, COLL_FLOAT64, COLL_SUM, b->comm);
}

int64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* --shared-clock: rank 0 names an instant of CLOCK_REALTIME a few barrier times ahead, every
 * rank waits for it, and *t0_p is that instant on now_s()'s clock. A rank's exit from the
 * start barrier trails the others' by up to a message's latency, which a call of a few
 * messages would carry in its time; collsim starts every rank at once. A rank that learns
 * the instant after it has passed starts at once and its lateness counts in its time;
 * *late_p says whether this rank did. */
static coll_status_t shared_start(struct bench *b, double barrier_s, double *t0_p, int *late_p)
{
    int64_t start = 0, now;
    bool late;
    coll_status_t st;

    if (b->rank == 0)
        start = realtime_ns() + 1000000 + (int64_t)(4 * barrier_s * 1e9);
    st = coll_broadcast(&start, &start, 1, COLL_INT64, 0, b->comm);
    if (st != COLL_SUCCESS)
        return st;
    now = realtime_ns();
    late = now > start;
    if (!late) {
        /* sleep to short of it, then poll (yielding, for ranks that outnumber the cores): a
         * timer's wake-up comes up to its slack (50 us) late, and then the scheduler's */
        int64_t wake = start - 500000;
        struct timespec ts = {.tv_sec = wake / 1000000000, .tv_nsec = wake % 1000000000};
        if (wake > now)
            while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) == EINTR)
                ;
        while ((now = realtime_ns()) < start)
            sched_yield();
    }
    *t0_p = now_s() - (double)(now - start) * 1e-9;
    *late_p = late;
    return COLL_SUCCESS;
}

/* The start barrier, polled with coll_test for up to 100 ms: a rank that slept in it would
 * leave it a wake-up late (90-160 us on a virtual machine whose idle CPUs halt), and the ranks
 * that left earlier would time that lag into their call. Rank 0 comes to it last (it has just
 * written the row before), so the others used to sleep there: a 2-host reduce to rank 0 of
 * 8 B measured 55-60 us where a broadcast measured 13-18. */
coll_status_t start_barrier(struct bench *b)
{
    int one = 1, done = 0;
    coll_request_t *req = NULL;
    coll_status_t st = coll_iallreduce(&one, &one, 1, COLL_INT32, COLL_SUM, b->comm, &req);
    double t0 = now_s();

    while (st == COLL_SUCCESS && !done) {
        if (now_s() - t0 > 0.1)
            return coll_wait(req);
        st = coll_test(req, &done);
        if (st == COLL_SUCCESS && !done)
            sched_yield();
    }
    return st;
}

static int time_column(struct bench *b, bool in_place, const struct rowspec *rs,
                       struct col_rec *col)
{
    const struct layout *l = &rs->l;
    size_t es = dtypes[rs->dt].size;
    void *s, *r;
    const char *what = coll__colls[b->o.coll].name;
    int warmup = b->o.warmup, agg = b->o.agg_iters;
    double t0, t, sum = 0;
    int64_t iters = b->o.iters, se[2];
    coll_status_t st;

    memset(col, 0, sizeof(*col));
    col->ran = true;
    col->checked = column_checked(b, in_place);
    if (col->checked) {
        watchdog_arm(&b->wd, "a checked call");
        for (int c = 0; c < b->o.check; c++) {
            uint64_t wrong, total;
            int rc = check_once(b, in_place, rs, (unsigned)c, &wrong);
            if (rc)
                return rc;
            st = coll_allreduce(&wrong, &total, 1, COLL_UINT64, COLL_SUM, b->comm);
            if (st != COLL_SUCCESS)
                return lib_error(b, "allreduce of the wrong-element counts", st);
            col->wrong = total;
            if (total)
                break; /* as nccl-tests: the first wrong round is reported */
        }
    }
    call_ptrs(b, in_place, l, es, &s, &r);
    if (b->o.budget_s > 0 && warmup == 0)
        warmup = 1; /* the budget needs one call to measure */
    watchdog_arm(&b->wd, "the warmup calls");
    t0 = now_s();
    st = run_calls(b, s, r, l->param, rs->dt, rs->op, rs->root, warmup, agg);
    t = now_s() - t0;
    if (st != COLL_SUCCESS)
        return lib_error(b, what, st);
    if (b->o.budget_s > 0) {
        /* Rank 0 decides, so that every rank runs the same number of calls. Half the
         * budget goes to each column. */
        double per_iter = t / warmup;
        double want = per_iter > 0 ? b->o.budget_s / 2 / per_iter : MAX_ITERS;
        iters = want < MIN_ITERS ? MIN_ITERS : want > MAX_ITERS ? MAX_ITERS : (int64_t)want;
        st = coll_broadcast(&iters, &iters, 1, COLL_INT64, 0, b->comm);
        if (st != COLL_SUCCESS)
            return lib_error(b, "broadcast of the iteration count", st);
        if (iters < MIN_ITERS || iters > MAX_ITERS) {
            fprintf(stderr, "collbench: rank %d: rank 0 sent iteration count %" PRId64 "\n",
                    b->rank, iters);
            return 1;
        }
    }
    /* Start together, so that a rank's time is not its wait for the others. */
    watchdog_arm(&b->wd, "the start barrier");
    t0 = now_s();
    st = start_barrier(b);
    if (st != COLL_SUCCESS)
        return lib_error(b, "allreduce (start barrier)", st);
    if (b->o.shared_clock) {
        st = shared_start(b, now_s() - t0, &t0, &col->late);
        if (st != COLL_SUCCESS)
            return lib_error(b, "broadcast of the start instant", st);
        watchdog_arm(&b->wd, "the timed calls");
        se[0] = realtime_ns() - (int64_t)((now_s() - t0) * 1e9);
    } else {
        watchdog_arm(&b->wd, "the timed calls");
        t0 = now_s();
        se[0] = realtime_ns();
    }
    st = run_calls(b, s, r, l->param, rs->dt, rs->op, rs->root, iters, agg);
    se[1] = realtime_ns();
    t = (now_s() - t0) / ((double)iters * agg);
    if (st != COLL_SUCCESS)
        return lib_error(b, what, st);
    watchdog_arm(&b->wd, "the allreduce of the times");
    st = gather_times(b, t);
    if (st == COLL_SUCCESS && b->o.shared_clock)
        st = coll_allreduce(&col->late, &col->late, 1, COLL_INT32, COLL_SUM, b->comm);
    /* The start barrier lets the rank that came to it last out first, up to a message's
     * latency before the others: each rank's own time of a call of a few messages then
     * carries that lag, which a call whose ranks start together (collsim's) has not. */
    col->span_us = NAN;
    if (st == COLL_SUCCESS && (b->one_clock || b->o.shared_clock)) {
        st = coll_allreduce(se, se, 2, COLL_INT64, COLL_MAX, b->comm);
        col->span_us = (double)(se[1] - se[0]) * 1e-3 / ((double)iters * agg);
    }
    watchdog_arm(&b->wd, NULL);
    if (st != COLL_SUCCESS)
        return lib_error(b, "allreduce of the times", st);
    if (col->late && b->rank == 0)
        fprintf(stderr,
                "collbench: --shared-clock: %d rank(s) learned the start instant after it had "
                "passed (%s, %" PRIu64 " B); their lateness is in the time\n",
                col->late, what, (uint64_t)l->param * es);
    col->tmin_us = col->tmax_us = b->times[0];
    for (int i = 0; i < b->nranks; i++) {
        sum += b->times[i];
        col->tmin_us = fmin(col->tmin_us, b->times[i]);
        col->tmax_us = fmax(col->tmax_us, b->times[i]);
    }
    col->tavg_us = sum / b->nranks * 1e6;
    col->tmin_us *= 1e6;
    col->tmax_us *= 1e6;
    switch (b->o.average) {
    case 0:
        col->time_us = b->times[0] * 1e6;
        break;
    case 1:
        col->time_us = col->tavg_us;
        break;
    case 2:
        col->time_us = col->tmin_us;
        break;
    case 4:
        col->time_us = col->span_us;
        break;
    default:
        col->time_us = col->tmax_us;
        break;
    }
    col->iters = iters;
    return 0;
}

static void format_time(char *buf, size_t n, double us)
{
    snprintf(buf, n, us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
}

/* algbw and busbw of a column, nccl-tests' arithmetic. */
static void bandwidths(const struct bench *b, const struct rowspec *rs, struct col_rec *col)
{
    double bytes = (double)rs->l.param * (double)dtypes[rs->dt].size;
    enum size_rule rule = size_rule(b->o.coll);

    if (rule == RULE_GATHER || rule == RULE_SCATTER || rule == RULE_ALLTOALL)
        bytes *= b->nranks;
    col->algbw = col->time_us > 0 ? bytes / (col->time_us * 1e3) : 0;
    col->busbw = col->algbw * coll__bus_factor(&coll__colls[b->o.coll], b->nranks);
}

/* ---- progress (rank 0, stderr a terminal) -------------------------------------------- */

static double row_cost(uint64_t size)
{
    return (double)size + 65536.0; /* bytes, plus a latency's worth */
}

void progress_clear(struct bench *b)
{
    if (b->progress_shown) {
        fprintf(stderr, "\r\033[K");
        b->progress_shown = false;
    }
}

static void progress_show(struct bench *b, const struct rowspec *rs)
{
    double el;
    char eta[32] = "?";

    if (!b->progress)
        return;
    el = now_s() - b->t_start;
    if (el < b->progress_delay)
        return; /* short sweeps stay quiet */
    if (b->cost_done > 0 && b->cost_total > 0) {
        double left = el * (b->cost_total - b->cost_done) / b->cost_done;
        snprintf(eta, sizeof(eta), "%d:%02d", (int)(left / 60), (int)fmod(left, 60));
    }
    fprintf(stderr, "\r\033[K[collbench] %s %s %" PRIu64 " B  row %ld",
            coll__colls[b->o.coll].name, dtypes[rs->dt].name, rs->size, b->rows_done + 1);
    if (b->rows_total > 0)
        fprintf(stderr, "/%ld  eta %s", b->rows_total, eta);
    fprintf(stderr, "  elapsed %d:%02d", (int)(el / 60), (int)fmod(el, 60));
    fflush(stderr);
    b->progress_shown = true;
}

static int run_row(struct bench *b, const struct rowspec *rs, long cycle)
{
    size_t es = dtypes[rs->dt].size;
    struct row_rec rec = {
        .cycle = cycle,
        .dt = rs->dt,
        .op = rs->op,
        .root = rs->root,
        .count = rs->l.param,
        .algo = "",
    };
    uint64_t sendb = (uint64_t)rs->l.param * es * (uint64_t)rs->l.nsend;
    uint64_t recvb = (uint64_t)rs->l.param * es * (uint64_t)rs->l.nrecv;
    char line[512];
    size_t len;
    int rc;

    rec.bytes = sendb > recvb ? sendb : recvb;
    if (b->rank == 0) {
        rec.algo = algo_for(b, rs, b->nranks, &rec.chunk_bytes, rec.why, sizeof(rec.why));
        progress_show(b, rs);
    }
    for (int ip = 0; ip < 2; ip++) {
        if (!(ip ? b->o.run_ip : b->o.run_oop))
            continue;
        rc = time_column(b, ip == 1, rs, &rec.col[ip]);
        if (rc)
            return rc;
        bandwidths(b, rs, &rec.col[ip]);
        if (b->rank == 0 && b->tfile)
            times_rows(b, &rec, ip);
    }
    len = (size_t)snprintf(line, sizeof(line), "%12" PRIu64 "  %12zu  %8s  %6s  %6d", rec.bytes,
                           rec.count, dtype_label(b, rs->dt), op_label(b, rs->op), rs->root);
    for (int ip = 0; ip < 2; ip++) {
        const struct col_rec *c = &rec.col[ip];
        char tbuf[32], wbuf[32];

        if (!c->ran) {
            if (len < sizeof(line))
                len += (size_t)snprintf(line + len, sizeof(line) - len, "  %7s  %6s  %6s  %5s",
                                        "N/A", "N/A", "N/A", "N/A");
            continue;
        }
        format_time(tbuf, sizeof(tbuf), c->time_us);
        if (c->checked)
            snprintf(wbuf, sizeof(wbuf), "%5" PRIu64, c->wrong);
        else
            snprintf(wbuf, sizeof(wbuf), "%5s", "N/A");
        /* Fields are bounded (times and rates are finite and small); the check only keeps
         * a surprise from writing past the line. */
        if (len < sizeof(line))
            len += (size_t)snprintf(line + len, sizeof(line) - len, "  %7s  %6.2f  %6.2f  %5s",
                                    tbuf, c->algbw, c->busbw, wbuf);
        b->wrong_total += c->wrong;
        b->busbw_sum += c->busbw;
        b->nresults++;
    }
    if (b->rank == 0) {
        progress_clear(b);
        if (b->csv)
            csv_row(b, &rec);
        if (b->tfile)
            fflush(b->tfile);
        if (b->json && !b->rows_oom && !record_row(b, &rec)) {
            fprintf(stderr,
                    "collbench: out of memory for the JSON records; %s will stop at "
                    "%zu rows\n",
                    b->o.json_path, b->nrows);
            b->rows_oom = true;
        }
        /* the snapshot first: a Ctrl-C right after the row shows must find it recorded */
        snap_update(b);
        printf("%s\n", line);
        fflush(stdout);
    }
    b->rows_done++;
    b->cost_done += row_cost(rs->size);
    return 0;
}

/* --------------------------------------------------------------------------------------
 * Sweeps.
 */

static uint64_t next_size(const struct opts *o, uint64_t size)
{
    uint64_t next;

    if (o->step_factor == 0)
        next = size + o->step_bytes;
    else if (size == 0)
        next = 1; /* 0 * factor would never grow */
    else
        next = size > UINT64_MAX / o->step_factor ? UINT64_MAX : size * o->step_factor;
    return next < size ? UINT64_MAX : next;
}

/* Calls fn for every row of one cycle (in order); stops at the first non-zero return. */
int for_each_row(struct bench *b, int (*fn)(struct bench *, const struct rowspec *, void *),
                 void *arg)
{
    int nroots = b->o.all_roots ? b->nranks : 1;

    for (int d = 0; d < b->o.ndtypes; d++) {
        coll_dtype_t dt = b->o.dtype_list[d];
        for (int k = 0; k < b->o.nops; k++) {
            for (int ri = 0; ri < nroots; ri++) {
                size_t last = SIZE_MAX;
                for (uint64_t size = b->o.min_bytes; size <= b->o.max_bytes;
                     size = next_size(&b->o, size)) {
                    struct rowspec rs = {
                        .size = coll__desc_moves_data(&coll__colls[b->o.coll]) ? size : 0,
                        .dt = dt,
                        .op = b->o.op_list[k],
                        .root = b->o.all_roots ? ri : b->o.root,
                    };
                    int rc;

                    rs.l = layout_for(b, rs.size, dt);
                    /* sizes below one element (or one per rank) repeat a count */
                    if (rs.l.param != last) {
                        last = rs.l.param;
                        rc = fn(b, &rs, arg);
                        if (rc)
                            return rc;
                    }
                    if (size == UINT64_MAX || !coll__desc_moves_data(&coll__colls[b->o.coll]))
                        break;
                }
            }
        }
    }
    return 0;
}

static int count_row(struct bench *b, const struct rowspec *rs, void *arg)
{
    (void)arg;
    b->rows_total++;
    b->cost_total += row_cost(rs->size);
    return 0;
}

static int do_row(struct bench *b, const struct rowspec *rs, void *arg)
{
    return run_row(b, rs, *(long *)arg);
}

int run_sweeps(struct bench *b)
{
    int rc;

    b->t_start = now_s();
    if (b->o.cycles > 0) {
        for (long c = 0; c < b->o.cycles; c++)
            for_each_row(b, count_row, NULL);
    }
    for (long c = 0; b->o.cycles == 0 || c < b->o.cycles; c++) {
        rc = for_each_row(b, do_row, &c);
        if (rc)
            return rc;
    }
    return 0;
}

/* --------------------------------------------------------------------------------------
 * Header.
 */

/* Every rank's host name and pid, for the header and the records: a sum in which each
 * rank fills only its own slot. */
coll_status_t exchange_ranks(struct bench *b)
{
    size_t n = (size_t)b->nranks;
    coll_status_t st;

    memset(b->hosts, 0, n * HOST_MAX);
    memset(b->pids, 0, n * sizeof(*b->pids));
    memset(b->devices, 0, n * sizeof(*b->devices));
    memcpy(b->hosts[b->rank], b->hostname, HOST_MAX);
    b->pids[b->rank] = (int64_t)getpid();
    b->devices[b->rank] = b->cuda ? b->device : -1;
    st = coll_allreduce(b->hosts, b->hosts, n * HOST_MAX, COLL_UINT8, COLL_MAX, b->comm);
    if (st == COLL_SUCCESS)
        st = coll_allreduce(b->pids, b->pids, n, COLL_INT64, COLL_SUM, b->comm);
    if (st == COLL_SUCCESS)
        st = coll_allreduce(b->devices, b->devices, n, COLL_INT32, COLL_SUM, b->comm);
    for (size_t i = 0; i < n; i++)
        b->hosts[i][HOST_MAX - 1] = '\0';
    return st;
}

/* b->one_clock: whether every rank runs on one kernel (its boot id), whose CLOCK_REALTIME
 * they then all read. Hostnames do not tell: netns hosts have their own. */
coll_status_t one_clock(struct bench *b)
{
    char boot[64] = "";
    uint64_t h = 1469598103934665603ull, lo, hi;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    coll_status_t st;

    if (fd >= 0) {
        ssize_t n = read(fd, boot, sizeof(boot) - 1);
        boot[n > 0 ? n : 0] = '\0';
        close(fd);
    }
    /* FNV-1a; a rank that cannot read its boot id hashes it from its pid, so that it does
     * not pass for another's machine */
    if (!boot[0])
        snprintf(boot, sizeof(boot), "pid %ld", (long)getpid());
#ifdef COLLBENCH_TEST_HOOKS
    /* COLLBENCH_FAULT=boot-id: the fault rank runs on "another machine" */
    if (b->fault && !strcmp(b->fault, "boot-id") && b->rank == b->fault_rank)
        snprintf(boot, sizeof(boot), "another machine");
#endif
    for (const char *c = boot; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    lo = hi = h;
    st = coll_allreduce(&lo, &lo, 1, COLL_UINT64, COLL_MIN, b->comm);
    if (st == COLL_SUCCESS)
        st = coll_allreduce(&hi, &hi, 1, COLL_UINT64, COLL_MAX, b->comm);
    b->one_clock = st == COLL_SUCCESS && lo == hi;
    return st;
}

void print_header(const struct bench *b)
{
    const struct opts *o = &b->o;
    char iters[64], ver[32];
    const char *algo = getenv("COLL_ALGO");

    if (b->rank != 0)
        return;
    version_string(ver, sizeof(ver));
    if (o->budget_s > 0)
        snprintf(iters, sizeof(iters), "auto (%g s per size)", o->budget_s);
    else
        snprintf(iters, sizeof(iters), "%d", o->iters);
    printf("# collbench %s: nranks %d minBytes %" PRIu64 " maxBytes %" PRIu64,
           coll__colls[o->coll].name, b->nranks, o->min_bytes, o->max_bytes);
    if (o->step_factor)
        printf(" step: %" PRIu64 "(factor)", o->step_factor);
    else
        printf(" step: %" PRIu64 "(bytes)", o->step_bytes);
    printf(" warmup iters: %d iters: %s agg iters: %d validation: %d blocking: %d"
           " average: %d (%s) cycles: %ld timeout: %d\n",
           o->warmup, iters, o->agg_iters, o->check, o->blocking, o->average,
           average_names[o->average], o->cycles, o->timeout_s);
    printf("#\n# Using %s memory, coll %s, transport %s, ", b->cuda ? "CUDA device" : "host", ver,
           transport_name(b));
    if (algo && *algo)
        printf("algorithm COLL_ALGO=%s\n", algo);
    else
        printf("algorithm chosen per size (COLL_SELECT=%s; --json records each)\n", select_name(b));
    if (b->cuda)
        printf("# Stream-ordered calls on one stream per rank; time = host clock around a batch "
               "of calls and cudaStreamSynchronize\n");
    for (int i = 0; i < b->nranks; i++) {
        if (i == MAX_RANKS_SHOWN && b->nranks > MAX_RANKS_SHOWN + 1) {
            printf("#  ... ranks %d to %d not shown\n", i, b->nranks - 2);
            i = b->nranks - 1;
        }
        if (b->cuda)
            printf("#  Rank %2d Pid %6" PRId64 " on %s device %2d\n", i, b->pids[i], b->hosts[i],
                   b->devices[i]);
        else
            printf("#  Rank %2d Pid %6" PRId64 " on %s\n", i, b->pids[i], b->hosts[i]);
    }
    printf("#\n");
    printf("#                                                              out-of-place"
           "                       in-place\n");
    printf("#       size         count      type   redop    root     time   algbw   busbw"
           " #wrong     time   algbw   busbw #wrong\n");
    printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
           "            (us)  (GB/s)  (GB/s)\n");
    fflush(stdout);
}
