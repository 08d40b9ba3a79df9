/*
 * calibrate.c - --calibrate: measure this machine into the cost model's file.
 */
#include "collbench.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (sorts v). */
static double median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define PP_MAX_SAMPLES 1200

/* Round trips of `bytes` between rank 0 and peer after `warm` unrecorded ones: rank 0 sends,
 * peer receives, holds the message `hold_s` (polling its clock, so that it sleeps nowhere)
 * and answers. t[] gets each recorded round trip's seconds on ranks 0 and peer; *n_p their
 * number (0 elsewhere). Every rank calls it. */
static coll_status_t round_trips(struct bench *b, size_t bytes, int peer, double hold_s,
                                 size_t warm, size_t reps, double *t, size_t *n_p)
{
    coll_status_t st = COLL_SUCCESS;
    bool in = b->rank == 0 || b->rank == peer;

    *n_p = 0;
    for (size_t i = 0; i < reps + warm && in && st == COLL_SUCCESS; i++) {
        double t0 = now_s();
        if (b->rank == 0) {
            st = coll_send(b->sendbuf, bytes, COLL_UINT8, peer, b->comm);
            if (st == COLL_SUCCESS)
                st = coll_recv(b->recvbuf, bytes, COLL_UINT8, peer, b->comm);
        } else {
            st = coll_recv(b->recvbuf, bytes, COLL_UINT8, 0, b->comm);
            for (double h = now_s(); st == COLL_SUCCESS && now_s() - h < hold_s;)
                ;
            if (st == COLL_SUCCESS)
                st = coll_send(b->sendbuf, bytes, COLL_UINT8, 0, b->comm);
        }
        if (i >= warm)
            t[(*n_p)++] = now_s() - t0;
    }
    return st;
}

/* One-way time of a message of `bytes` between ranks 0 and 1 (seconds; 0 elsewhere): the
 * median of single round trips, halved, after a warm-up (connections, pages, caches). The
 * median, not the best trial's mean: on a machine shared with other work a few round trips
 * in a hundred meet a burst of it (a wake-up late by milliseconds, a TCP loss probe after an
 * ACK that waited for a core), which a mean carries and the best of a few trials still
 * carries at the sizes whose trials are long, while collbench's figures, medians of
 * repetitions in bench/simval.sh, do not. Every rank calls it. */
static int pingpong(struct bench *b, size_t bytes, int peer, double *oneway_p)
{
    static double t[PP_MAX_SAMPLES];
    size_t reps = bytes <= 4096 ? 1000 : (size_t)((64u << 20) / bytes), n;
    coll_status_t st;

    if (reps < 24)
        reps = 24;
    if (reps > PP_MAX_SAMPLES)
        reps = PP_MAX_SAMPLES;
    st = round_trips(b, bytes, peer, 0, 5, reps, t, &n);
    if (st != COLL_SUCCESS)
        return lib_error(b, "send/recv (--calibrate)", st);
    *oneway_p = n ? median(t, n) / 2 : 0;
    return 0;
}

/* wake (cost.h): rank 0 sends 8 bytes, peer holds them WAKE_HOLD_S (polling its clock,
 * so that it sleeps nowhere) and answers; rank 0's receive outlasts any usual polling
 * (COLL_SPIN_US) and sleeps, and what the round trip takes beyond the hold and two one-way
 * times is its wake-up: the median of WAKE_REPS. Every rank calls it. */
#define WAKE_HOLD_S 1e-3
#define WAKE_REPS 60
static int wake(struct bench *b, int peer, double oneway, double *wake_p)
{
    double t[WAKE_REPS];
    size_t n;
    coll_status_t st = round_trips(b, 8, peer, WAKE_HOLD_S, 2, WAKE_REPS, t, &n);

    if (st != COLL_SUCCESS)
        return lib_error(b, "a held ping-pong (--calibrate)", st);
    *wake_p = n ? fmax(median(t, n) - WAKE_HOLD_S - 2 * oneway, 0) : 0;
    return 0;
}

/* call (cost.h): one way of a ping-pong of 8-byte broadcasts on a comm of ranks 0 and peer
 * (from 0, then back from peer), each pair after a 4-byte all-reduce as collbench's calls
 * follow its start barrier, less one way of the send/recv ping-pong: what a collective call
 * costs beyond its one message when another collective ran last (in a loop of the same
 * call alone it costs nothing more on bench/netns_hosts.sh's hosts, while collbench's 8-byte
 * broadcast spans 1.5-2 us more than that one way). Needs a comm of those two alone (the
 * calibration's comm when it has two ranks, as bench/simval.sh's); *call_p is 0 elsewhere.
 * Every rank calls it. */
static int call_cost(struct bench *b, int peer, double oneway, double *call_p)
{
    double t[PP_MAX_SAMPLES];
    size_t n = 0;
    coll_status_t st = COLL_SUCCESS;

    *call_p = 0;
    if (b->nranks != 2)
        return 0;
    for (int i = 0; i < 405 && st == COLL_SUCCESS; i++) {
        int one = 1;
        double t0;
        st = coll_allreduce(&one, &one, 1, COLL_INT32, COLL_SUM, b->comm);
        if (st != COLL_SUCCESS)
            break;
        t0 = now_s();
        st = coll_broadcast(b->sendbuf, b->sendbuf, 8, COLL_UINT8, 0, b->comm);
        if (st == COLL_SUCCESS)
            st = coll_broadcast(b->sendbuf, b->sendbuf, 8, COLL_UINT8, peer, b->comm);
        if (i >= 5)
            t[n++] = (now_s() - t0) / 2;
    }
    if (st != COLL_SUCCESS)
        return lib_error(b, "a broadcast ping-pong (--calibrate)", st);
    *call_p = n ? fmax(median(t, n) - oneway, 0) : 0;
    return 0;
}

/* One grouped send/recv of bytes with other, both ways at once: a step of recursive doubling
 * or of a ring. */
static coll_status_t swap(struct bench *b, int other, size_t bytes)
{
    coll_status_t st = coll_group_start();
    if (st == COLL_SUCCESS)
        st = coll_send(b->sendbuf, bytes, COLL_UINT8, other, b->comm);
    if (st == COLL_SUCCESS)
        st = coll_recv(b->recvbuf, bytes, COLL_UINT8, other, b->comm);
    if (st == COLL_SUCCESS)
        st = coll_group_end();
    return st;
}

/* call and <link>.xchg (cost.h) as collbench times a call (bench/simval.sh: -w 1 -n 1 -a 4):
 * each 8-byte call after a warm-up one and the polled start barrier, from the last rank's
 * start to the last rank's end on the clock the two ranks share; broadcasts from rank 0 and
 * grouped send/recv exchanges in turn, so that the machine's drift falls on both alike.
 * call is the broadcast's span beyond one way of the ping-pong (often none: the receiver,
 * last out of the barrier, finds the root's message on its way), xchg the exchange's beyond
 * that one way and call: collsim prices a 2-rank broadcast call + alpha, an exchange
 * call + alpha + xchg. call_cost's and exchange()'s ranks each time their own call from
 * starts of their own; on cubic hosts they gave call 3-5 us and xchg 2-3 us where
 * collbench's 8-byte all-reduce on 2 hosts spans 1.3 us beyond that one way. Needs a comm of
 * two ranks on two hosts of one clock (b->one_clock: bench/netns_hosts.sh's, which
 * bench/simval.sh compares with collsim); *ok_p false elsewhere, where the probes stay.
 * (Timing them within one host first found a race of the flat path: a rank asleep in a
 * flat call took its peer's next, general-path message for a stray; src/path/flat.c.)
 * spans_us[0..1]: the medians. Every rank calls it. */
#define SPAN_ROUNDS 300
static int span_terms(struct bench *b, double oneway, double *call_p, double *xchg_p,
                      double *spans_us, bool *ok_p)
{
    static double t[2][SPAN_ROUNDS];
    size_t n[2] = {0, 0};
    int other = b->rank == 0 ? 1 : 0;
    coll_status_t st = COLL_SUCCESS;

    *ok_p = false;
    if (b->nranks != 2 || !b->one_clock || strcmp(b->hosts[0], b->hosts[1]) == 0)
        return 0;
    for (int i = 0; i < SPAN_ROUNDS + 5 && st == COLL_SUCCESS; i++) {
        for (int k = 0; k < 2 && st == COLL_SUCCESS; k++) {
            int64_t se[2] = {0, 0};
            for (int timed = 0; timed < 2 && st == COLL_SUCCESS; timed++) {
                if (timed) {
                    st = start_barrier(b);
                    se[0] = realtime_ns();
                }
                if (st == COLL_SUCCESS)
                    st = k ? swap(b, other, 8)
                           : coll_broadcast(b->sendbuf, b->sendbuf, 8, COLL_UINT8, 0, b->comm);
            }
            se[1] = realtime_ns();
            if (st == COLL_SUCCESS)
                st = coll_allreduce(se, se, 2, COLL_INT64, COLL_MAX, b->comm);
            if (st == COLL_SUCCESS && i >= 5)
                t[k][n[k]++] = (double)(se[1] - se[0]) * 1e-9;
        }
    }
    if (st != COLL_SUCCESS)
        return lib_error(b, "8-byte calls timed as collbench times them (--calibrate)", st);
    spans_us[0] = median(t[0], n[0]) * 1e6;
    spans_us[1] = median(t[1], n[1]) * 1e6;
    *call_p = fmax(spans_us[0] * 1e-6 - oneway, 0);
    *xchg_p = fmax(spans_us[1] * 1e-6 - oneway - *call_p, 0);
    *ok_p = true;
    return 0;
}

/* Seconds per exchange of `bytes` between ranks 0 and 1 (0 elsewhere), both sending and
 * receiving at once as a step of recursive doubling or of a ring does, started together as a
 * call's first step is: before each, peer tells rank 0 it is done with the last one, rank 0
 * says go and starts, peer starts on the go. Each times its own; peer starts up to the go's
 * latency late, which lengthens rank 0's time and shortens peer's by as much, so the mean
 * of their medians is the exchange. Back to back instead, each rank's next send meets the
 * other's last receive, and the exchange took 2-3x longer beyond one way than a single
 * call's step (docs/scale.md). What it takes beyond one way of the ping-pong at 8 bytes is
 * <link>.xchg (cost.h), which collsim adds to a message that reaches a rank while it sends
 * too. Every rank calls it. */
static int exchange(struct bench *b, size_t bytes, int peer, double *t_p)
{
    static double t[PP_MAX_SAMPLES];
    const size_t reps = bytes <= 4096 ? 1000 : 100;
    size_t n = 0;
    int other = b->rank == 0 ? peer : 0;
    coll_status_t st = COLL_SUCCESS;
    bool in = b->rank == 0 || b->rank == peer;
    double mine = 0, peers = 0;
    uint64_t tok = 0;

    for (size_t i = 0; i < reps + 5 && in && st == COLL_SUCCESS; i++) {
        double t0;
        if (b->rank == 0) {
            if (i > 0)
                st = coll_recv(&tok, 8, COLL_UINT8, other, b->comm);
            if (st == COLL_SUCCESS)
                st = coll_send(&tok, 8, COLL_UINT8, other, b->comm);
        } else {
            st = coll_recv(&tok, 8, COLL_UINT8, other, b->comm);
        }
        t0 = now_s();
        if (st == COLL_SUCCESS)
            st = swap(b, other, bytes);
        if (i >= 5)
            t[n++] = now_s() - t0;
        if (st == COLL_SUCCESS && b->rank != 0 && i + 1 < reps + 5)
            st = coll_send(&tok, 8, COLL_UINT8, other, b->comm);
    }
    if (in && st == COLL_SUCCESS) {
        mine = median(t, n);
        st = b->rank == 0 ? coll_recv(&peers, 1, COLL_FLOAT64, other, b->comm)
                          : coll_send(&mine, 1, COLL_FLOAT64, 0, b->comm);
    }
    if (st != COLL_SUCCESS)
        return lib_error(b, "grouped send/recv exchange (--calibrate)", st);
    *t_p = b->rank == 0 && n && isfinite(peers) && peers >= 0 ? (mine + peers) / 2 : 0;
    return 0;
}

/* Seconds per byte of a stream: rank 0 sends STREAM_BYTES to peer as STREAM_CHUNK messages in
 * one group (both ways at once when both_ways: a ring's or recursive halving's steps), peer
 * answers 8 bytes once all are in; the median of a few, after a warm-up, less one small
 * message's one-way time. Printed beside the ping-pong's beta, not written: it shows what
 * sending both ways at once costs each way (on the netns bed at 10gbit, where the machine's
 * cores bound the links, twice a one-way stream's time per byte). Every rank calls it. */
#define STREAM_BYTES (8u << 20)
#define STREAM_CHUNK (128u << 10)
#define STREAM_TRIALS 5
static int stream(struct bench *b, int peer, bool both_ways, double small, double *beta_p)
{
    double t[STREAM_TRIALS];
    size_t n = 0;
    coll_status_t st = COLL_SUCCESS;
    bool in = b->rank == 0 || b->rank == peer;
    int other = b->rank == 0 ? peer : 0;

    for (int trial = 0; trial < STREAM_TRIALS + 1 && in && st == COLL_SUCCESS; trial++) {
        double t0 = now_s();
        st = coll_group_start();
        for (size_t off = 0; off < STREAM_BYTES && st == COLL_SUCCESS; off += STREAM_CHUNK) {
            if (b->rank == 0 || both_ways)
                st = coll_send((char *)b->sendbuf + off, STREAM_CHUNK, COLL_UINT8, other,
                               b->comm);
            if (st == COLL_SUCCESS && (b->rank != 0 || both_ways))
                st = coll_recv((char *)b->recvbuf + off, STREAM_CHUNK, COLL_UINT8, other,
                               b->comm);
        }
        if (st == COLL_SUCCESS)
            st = coll_group_end();
        if (st == COLL_SUCCESS)
            st = b->rank == 0 ? coll_recv(b->recvbuf, 8, COLL_UINT8, peer, b->comm)
                              : coll_send(b->sendbuf, 8, COLL_UINT8, 0, b->comm);
        if (trial) /* the first warms up */
            t[n++] = now_s() - t0;
    }
    if (st != COLL_SUCCESS)
        return lib_error(b, "a stream of sends (--calibrate)", st);
    *beta_p = in && n ? fmax(median(t, n) - small, 0) / STREAM_BYTES : 0;
    return 0;
}

/* The machine's busy CPU time so far, seconds (/proc/stat: user, nice, system, irq and
 * softirq of every CPU, not a guest's steal); < 0 where it cannot be read. */
static double machine_busy_s(void)
{
    unsigned long long v[8] = {0};
    long hz = sysconf(_SC_CLK_TCK);
    FILE *f = fopen("/proc/stat", "r");
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                       &v[3], &v[4], &v[5], &v[6], &v[7])
              : 0;
    if (f)
        fclose(f);
    if (n < 7 || hz <= 0)
        return -1;
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6]) / (double)hz;
}

/* <link>.cpu (cost.h): the busy CPU time of rank 0's machine over streams both ways of at
 * least 0.4 s (the clock ticks at 10 ms), per byte moved. What one way of a stream costs at
 * 10 Gbit/s between emulated hosts is the machine's copy path (both ends on its 2 cores);
 * 4 hosts' streams share it, which their links' beta alone does not say. Every rank calls
 * it; rank 0 decides the length. */
static int stream_cpu(struct bench *b, int peer, double both_beta, double *cpu_p)
{
    double per = both_beta * STREAM_BYTES * (STREAM_TRIALS + 1), t0, t1, ignored;
    int64_t reps = per > 0 ? (int64_t)ceil(0.4 / per) : 1;
    coll_status_t st;

    reps = reps < 1 ? 1 : reps > 64 ? 64 : reps;
    st = coll_broadcast(&reps, &reps, 1, COLL_INT64, 0, b->comm);
    if (st != COLL_SUCCESS)
        return lib_error(b, "broadcast of the stream's length (--calibrate)", st);
    if (reps < 1 || reps > 64)
        return fprintf(stderr, "collbench: rank %d: rank 0 sent %" PRId64 " streams\n", b->rank,
                       reps), 1;
    t0 = machine_busy_s();
    for (int64_t i = 0; i < reps; i++) {
        int rc = stream(b, peer, true, 0, &ignored);
        if (rc)
            return rc;
    }
    t1 = machine_busy_s();
    *cpu_p = t0 >= 0 && t1 > t0
                 ? (t1 - t0) / ((double)reps * (STREAM_TRIALS + 1) * 2.0 * STREAM_BYTES)
                 : 0;
    return 0;
}

/* Seconds per message that a sender spends on a burst of small messages: rank 0 issues
 * BURST_MSGS 8-byte sends to peer in one group, then one; the difference of the median
 * times of their coll_group_end over BURST_MSGS - 1. Sends this small complete once the transport
 * holds them, so this is the part of a message's alpha that holds the sender (the
 * executor's step and the transport's hand-over), not the latency to the receiver that
 * messages in flight share. peer answers each burst, so every one starts on drained
 * links. Every rank calls it. */
#define BURST_MSGS 16
#define BURST_TRIALS 60
static int burst(struct bench *b, int peer, double *per_msg_p)
{
    double t[2][BURST_TRIALS / 2];
    size_t n[2] = {0, 0};
    coll_status_t st = COLL_SUCCESS;
    bool in = b->rank == 0 || b->rank == peer;

    for (int trial = 0; trial < BURST_TRIALS + 2 && in && st == COLL_SUCCESS; trial++) {
        int k = trial & 1, nmsg = k ? BURST_MSGS : 1;
        double t0 = now_s(), dt;

        st = coll_group_start();
        for (int i = 0; i < nmsg && st == COLL_SUCCESS; i++)
            st = b->rank == 0 ? coll_send((char *)b->sendbuf + 8 * i, 8, COLL_UINT8, peer, b->comm)
                              : coll_recv((char *)b->recvbuf + 8 * i, 8, COLL_UINT8, 0, b->comm);
        if (st == COLL_SUCCESS)
            st = coll_group_end();
        dt = now_s() - t0;
        if (st == COLL_SUCCESS)
            st = b->rank == 0 ? coll_recv(b->recvbuf, 8, COLL_UINT8, peer, b->comm)
                              : coll_send(b->sendbuf, 8, COLL_UINT8, 0, b->comm);
        if (trial >= 2) /* the first two warm up */
            t[k][n[k]++] = dt;
    }
    if (st != COLL_SUCCESS)
        return lib_error(b, "grouped send/recv (--calibrate)", st);
    /* medians, as the ping-pong's */
    *per_msg_p = in ? fmax((median(t[1], n[1]) - median(t[0], n[0])) / (BURST_MSGS - 1), 0) : 0;
    return 0;
}

/* A request waited for by coll_test alone, so that the wait never sleeps. */
static coll_status_t poll_done(coll_request_t *req)
{
    int done = 0;
    coll_status_t st = COLL_SUCCESS;

    while (!done && st == COLL_SUCCESS)
        st = coll_test(req, &done);
    return st;
}

/* One-way time of `bytes` into a link idle for IDLE_GAP_S, as a shaper that owes nothing
 * finds it (seconds, ranks 0 and peer; 0 elsewhere): rank 0 waits out the gap, sends, and
 * peer answers 8 bytes; both poll, so that no wake-up is in it. The median round trip less
 * one way of 8 bytes (oneway8). fit_burst reads these: in the ping-pong each message waits
 * for the debt its last one left. Every rank calls it. */
#define IDLE_GAP_S 2e-3
#define IDLE_REPS 25
static int idle_oneway(struct bench *b, size_t bytes, int peer, double oneway8, double *t_p)
{
    double t[IDLE_REPS];
    size_t n = 0;
    coll_status_t st = COLL_SUCCESS;
    bool in = b->rank == 0 || b->rank == peer;

    for (int i = 0; i < IDLE_REPS + 1 && in && st == COLL_SUCCESS; i++) {
        coll_request_t *rq = NULL, *sq = NULL;
        double t0;

        if (b->rank == 0) {
            for (double h = now_s(); now_s() - h < IDLE_GAP_S;)
                ;
            t0 = now_s();
            /* a comm's operations run in the order they were issued: the send first */
            st = coll_isend(b->sendbuf, bytes, COLL_UINT8, peer, b->comm, &sq);
            if (st == COLL_SUCCESS)
                st = coll_irecv(b->recvbuf, 8, COLL_UINT8, peer, b->comm, &rq);
            if (st == COLL_SUCCESS)
                st = poll_done(sq);
            if (st == COLL_SUCCESS)
                st = poll_done(rq);
            if (i >= 1) /* the first warms up */
                t[n++] = now_s() - t0 - oneway8;
        } else {
            st = coll_irecv(b->recvbuf, bytes, COLL_UINT8, 0, b->comm, &rq);
            if (st == COLL_SUCCESS)
                st = poll_done(rq);
            if (st == COLL_SUCCESS)
                st = coll_isend(b->sendbuf, 8, COLL_UINT8, 0, b->comm, &sq);
            if (st == COLL_SUCCESS)
                st = poll_done(sq);
        }
    }
    if (st != COLL_SUCCESS)
        return lib_error(b, "a send/recv into an idle link (--calibrate)", st);
    *t_p = n ? fmax(median(t, n), 0) : 0;
    return 0;
}

/* Seconds per byte of output of a host reduction of dt (sum), and of a copy: the best of a
 * few runs over 1 MiB, about what a chunk of a schedule touches. */
static double time_reduce(struct bench *b, coll_dtype_t dt)
{
    size_t bytes = 1u << 20, es = dtypes[dt].size, count = bytes / es;
    char *x = b->sendbuf, *y = x + bytes, *dst = b->recvbuf;
    double best = INFINITY;

    /* small values, as in the checks: no denormals, no overflow to special cases */
    make_period(b->pat, (struct pat){PAT_RED_SEND, 0, 0}, dt, COLL_SUM, 2, 0);
    fill_periodic(x, b->pat, count, es);
    fill_periodic(y, b->pat, count, es);
    for (int i = 0; i < 12; i++) {
        double t0 = now_s();
        coll__ix_reduce(dst, x, y, count, dt, COLL_SUM);
        if (i >= 2)
            best = fmin(best, now_s() - t0);
    }
    return best / (double)(count * es);
}

static double time_copy(struct bench *b)
{
    size_t bytes = 1u << 20;
    double best = INFINITY;

    for (int i = 0; i < 12; i++) {
        double t0 = now_s();
        memcpy(b->recvbuf, b->sendbuf, bytes); /* into memory others see: never elided */
        if (i >= 2)
            best = fmin(best, now_s() - t0);
    }
    return best / (double)bytes;
}

/* Seconds per byte of a copy whose source and destination together are ws bytes: the best
 * of a few, each pass over fresh lines only once the pair outgrows the cache. */
static double time_copy_ws(char *src, char *dst, size_t ws)
{
    size_t bytes = ws / 2;
    double best = INFINITY;
    int reps = ws <= (16u << 20) ? 12 : 8;

    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        memcpy(dst, src, bytes);
        __asm__ __volatile__("" : : "r"(dst) : "memory"); /* the copy is observed */
        if (i >= 2)
            best = fmin(best, now_s() - t0);
    }
    return best / (double)bytes;
}

/* The memory term of the model (cost.h: mem, cache_bytes) from copies over working sets
 * of 1 MiB to 256 MiB: mem is the largest one's cost per byte over the cheapest one's (the
 * smallest copies pay their start-up too), and cache_bytes the size that best explains the
 * curve from the cheapest on, where the share 1 - cache / ws of the bytes pays mem. Leaves
 * *p as it is when memory is short. */
static void calibrate_memory(struct coll_cost_params *p)
{
    enum { NWS = 9 };
    const size_t max_ws = 256u << 20;
    double t[NWS], best_err = INFINITY, mem, ref = INFINITY;
    int lo = 0;
    size_t ws[NWS];
    char *buf = malloc(max_ws);

    if (!buf)
        return;
    memset(buf, 1, max_ws); /* pages in before anything is timed */
    for (int i = 0; i < NWS; i++) {
        ws[i] = (size_t)1 << (20 + i);
        t[i] = time_copy_ws(buf, buf + ws[i] / 2, ws[i]);
    }
    free(buf);
    for (int i = 0; i < NWS; i++)
        if (t[i] < ref) {
            ref = t[i];
            lo = i;
        }
    mem = t[NWS - 1] / ref;
    printf("# memory: copy of working set (MiB) -> ns per byte:");
    for (int i = 0; i < NWS; i++)
        printf(" %zu:%.3f", ws[i] >> 20, t[i] * 1e9);
    printf("\n");
    if (!(mem > 1.05) || !isfinite(mem)) {
        p->mem = 1; /* no cliff measured: every byte as cached */
        p->cache_bytes = 0;
        return;
    }
    /* candidate cache sizes: every quarter power of two across the range measured */
    for (double c = (double)ws[0]; c <= (double)max_ws; c *= 1.189207115) {
        double err = 0;
        for (int i = lo; i < NWS; i++) {
            double share = (double)ws[i] > c ? 1 - c / (double)ws[i] : 0;
            double e = log(t[i] / (ref * (1 + (mem - 1) * share)));
            err += e * e;
        }
        if (err < best_err) {
            best_err = err;
            p->cache_bytes = floor(c);
        }
    }
    p->mem = mem;
    printf("# mem %.2f (out of cache / in cache), cache_bytes %.3g (%.1f MiB)\n", p->mem,
           p->cache_bytes, p->cache_bytes / (1 << 20));
}

/* The rendezvous probe of --calibrate: a 2-rank chain reduce of RDV_PROBE_BYTES of float,
 * once in RDV_PROBE_CHUNK chunks and once whole. The bytes, the reductions and the buffers'
 * place in the cache are the same; what differs is the number of hand-overs. */
#define RDV_PROBE_BYTES (2u << 20)
#define RDV_PROBE_CHUNK (128u << 10)

/* Seconds per call of that reduce in chunks of chunk bytes: the best of eight trials of
 * back-to-back calls (a trial's mean), after a warm-up. Both ranks call it; COLL_ALGO and
 * COLL_CHUNK_BYTES of the comm are what the probe says for its duration. */
static int time_rdv_probe(struct bench *b, size_t chunk, double *t_p)
{
    struct coll_ix_forced was;
    const size_t count = RDV_PROBE_BYTES / sizeof(float);
    const int reps = 10;
    double best = INFINITY;
    coll_status_t st = COLL_SUCCESS;

    coll__ix_force(b->comm, "reduce=chain", (int64_t)chunk, &was);
    memset(b->sendbuf, 0, RDV_PROBE_BYTES); /* zeros: no denormals, no overflow */
    for (int trial = 0; trial < 9 && st == COLL_SUCCESS; trial++) {
        double t0 = now_s();
        for (int i = 0; i < (trial ? reps : 3) && st == COLL_SUCCESS; i++)
            st = coll_reduce(b->sendbuf, b->recvbuf, count, COLL_FLOAT32, COLL_SUM, 0, b->comm);
        if (trial)
            best = fmin(best, (now_s() - t0) / reps);
    }
    coll__ix_unforce(b->comm, &was);
    if (st != COLL_SUCCESS)
        return lib_error(b, "reduce (--calibrate)", st);
    *t_p = best;
    return 0;
}

/* <link>.rdv fitted to the probe: the model, with everything else calibrated and no
 * hand-over cost, prices both reduces; the part of the measured difference it does not
 * explain is spread over the extra hand-overs of the chunked one. A ping-pong cannot show
 * this cost: there the receiver is always waiting, while in a pipeline it is often busy
 * reducing the previous chunk when the next one is offered. */
static double fit_rdv(const struct coll_cost_params *p, enum coll_link l, const double t[2])
{
    struct coll_cost_params q = *p;
    struct coll_cost_links links = coll__cost_links_all(l);
    const struct coll_algo *chain = coll__algo_find("chain");
    struct coll_algo_args a = {
        .coll = COLL_COLL_REDUCE,
        .nranks = 2,
        .count = RDV_PROBE_BYTES / sizeof(float),
        .dtype = COLL_FLOAT32,
        .elem_size = sizeof(float),
    };
    double pred[2];
    const double extra = RDV_PROBE_BYTES / RDV_PROBE_CHUNK - 1;

    q.link[l].rdv = 0;
    q.cores = 0;
    for (int k = 0; k < 2; k++) {
        a.chunk_count = (k ? RDV_PROBE_BYTES : RDV_PROBE_CHUNK) / sizeof(float);
        if (!chain || coll__cost_predict(&q, &links, chain, &a, &pred[k], NULL) != COLL_SUCCESS)
            return p->link[l].rdv;
    }
    printf("# %s hand-over probe: 2-rank chain reduce of %u KiB, in %u KiB chunks %.1f us "
           "(model without hand-over %.1f), whole %.1f us (%.1f)\n",
           coll__link_name(l), RDV_PROBE_BYTES >> 10, RDV_PROBE_CHUNK >> 10, t[0] * 1e6,
           pred[0] * 1e6, t[1] * 1e6, pred[1] * 1e6);
    return fmax(((t[0] - t[1]) - (pred[0] - pred[1])) / extra, 0);
}

static int mkdir_parents(const char *path)
{
    char buf[PATH_MAX];

    if ((size_t)snprintf(buf, sizeof(buf), "%s", path) >= sizeof(buf))
        return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return 0;
}

/* alpha: the median of what the small messages have left after beta, over the sizes whose
 * beta is at most a tenth of their time (at least the smallest two). Sizes a shaped link
 * lets through at its burst's speed (fit_burst) would pull it down: one of 512 B at 1
 * Gbit/s crosses an idle link in less than its 4 us at the rate. */
static double fit_alpha(const double *oneway, const size_t *sizes, double beta)
{
    double a[4];
    int n = 0;
    for (int i = 0; i < 4; i++)
        if (i < 2 || beta * (double)sizes[i] <= 0.1 * oneway[i])
            a[n++] = fmax(oneway[i] - beta * (double)sizes[i], 0);
    return median(a, (size_t)n);
}

/* A shaped link's packet (cost.h, burst), from messages into an idle link (idle_oneway,
 * sizes ascending), by slopes alone: a message into a link idle for milliseconds takes tens
 * of us more than alpha on bench/netns_hosts.sh's hosts, and more on a busy machine, which
 * the calls of a sweep, each after a start barrier, do not pay. The sizes up to the packet
 * cross at about one speed, and one past it waits for the first packet's debt: burst is the
 * size before the steepest step between neighbours, if that step is steeper than twice beta
 * (else no burst: 0), and burst_beta the least-squares slope of the sizes up to it. */
static void fit_burst(struct coll_link_cost *c, const double *idle, const size_t *sizes,
                      size_t n)
{
    double steep = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, k;
    size_t hi = 0;

    c->burst = c->burst_beta = 0;
    if (n < 3 || !(c->beta > 0))
        return;
    for (size_t i = 0; i + 1 < n; i++) {
        double s = (idle[i + 1] - idle[i]) / (double)(sizes[i + 1] - sizes[i]);
        if (s > steep) {
            steep = s;
            hi = i;
        }
    }
    if (!(steep > 2 * c->beta))
        return;
    for (size_t i = 0; i <= hi; i++) {
        sx += (double)sizes[i];
        sy += idle[i];
        sxx += (double)sizes[i] * (double)sizes[i];
        sxy += (double)sizes[i] * idle[i];
    }
    k = (double)(hi + 1);
    c->burst = (double)sizes[hi];
    c->burst_beta = hi > 0 ? fmin(fmax((k * sxy - sx * sy) / (k * sxx - sx * sx), 0), c->beta)
                           : fmin(idle[0] / (double)sizes[0], c->beta);
}

int calibrate(struct bench *b)
{
    static const size_t sizes[] = {8, 64, 512, 4096, 32768, 262144, 1u << 20, 4u << 20};
    /* into an idle link: around TCP's largest packet (64 KB less headers, GSO), and past it */
    static const size_t idle_sizes[] = {16384, 32768, 49152, 57344, 61440,
                                        63488, 64512, 65536, 131072, 262144};
    double idle[COLL_NUM_LINKS][COLL_ARRAY_SIZE(idle_sizes)] = {{0}};
    double oneway[COLL_NUM_LINKS][COLL_ARRAY_SIZE(sizes)] = {{0}};
    double rdv_oneway[COLL_NUM_LINKS][2] = {{0}}, probe[2] = {0, 0};
    double per_msg[COLL_NUM_LINKS] = {0}, xchg[COLL_NUM_LINKS][2] = {{0}};
    double sbeta[COLL_NUM_LINKS][2] = {{0}}, cpu[COLL_NUM_LINKS] = {0};
    double wakes[COLL_NUM_LINKS] = {0}, calls[COLL_NUM_LINKS] = {0};
    double span_xchg[COLL_NUM_LINKS] = {0}, spans[COLL_NUM_LINKS][2] = {{0}};
    bool spanned[COLL_NUM_LINKS] = {false};
    int probe_link = -1;
    int peer_of[COLL_NUM_LINKS];
    struct coll_cost_params p;
    struct coll_cost_links links = b->desc.model.links;
    char path[PATH_MAX];
    const char *tp = transport_name(b);
    int one = 1, rc, nlinks = 0;
    coll_status_t st;

    if (b->bufsize < (8u << 20) + 64) {
        fprintf(stderr, "collbench: rank %d: --calibrate needs -e 8M or more\n", b->rank);
        return EXIT_USAGE;
    }
    /* one pair per link class the comm has, from rank 0: e.g. shm to a rank of its host,
     * tcp to one of another host (every rank computes the same pairs) */
    for (int l = 0; l < COLL_NUM_LINKS; l++)
        peer_of[l] = -1;
    for (int r = 1; r < b->nranks; r++) {
        enum coll_link l = links.link_of ? links.link_of(links.arg, 0, r) : links.link;
        if (peer_of[l] < 0) {
            peer_of[l] = r;
            nlinks++;
        }
    }
    /* what an earlier run measured (another transport, COLL_TRANSPORT=tcp) stays; the first
     * run finds no file, which is no reason for a warning */
    if (!coll__ix_calib_path(b->calib_out, path, sizeof(path)) || access(path, F_OK) != 0 ||
        coll__cost_params_load(&p, path) != COLL_SUCCESS)
        coll__cost_params_default(&p);
    for (int l = 0; l < COLL_NUM_LINKS; l++) {
        for (size_t i = 0; peer_of[l] >= 0 && i < COLL_ARRAY_SIZE(sizes); i++) {
            watchdog_arm(&b->wd, "a ping-pong of --calibrate");
            rc = pingpong(b, sizes[i], peer_of[l], &oneway[l][i]);
            if (rc)
                return rc;
        }
        for (int k = 0; k < 2 && peer_of[l] >= 0; k++) {
            watchdog_arm(&b->wd, "a stream of --calibrate");
            rc = stream(b, peer_of[l], k, oneway[l][0], &sbeta[l][k]);
            if (rc)
                return rc;
        }
        if (peer_of[l] >= 0) {
            watchdog_arm(&b->wd, "the 8-byte calls of --calibrate");
            rc = span_terms(b, oneway[l][0], &calls[l], &span_xchg[l], spans[l], &spanned[l]);
            if (rc)
                return rc;
        }
        if (peer_of[l] >= 0 && !spanned[l]) {
            watchdog_arm(&b->wd, "a broadcast ping-pong of --calibrate");
            rc = call_cost(b, peer_of[l], oneway[l][0], &calls[l]);
            if (rc)
                return rc;
        }
        if (peer_of[l] >= 0) {
            watchdog_arm(&b->wd, "a held ping-pong of --calibrate");
            rc = wake(b, peer_of[l], oneway[l][0], &wakes[l]);
            if (rc)
                return rc;
        }
        if (peer_of[l] >= 0 && l != COLL_LINK_SHM) {
            watchdog_arm(&b->wd, "the streams of --calibrate's CPU time");
            rc = stream_cpu(b, peer_of[l], sbeta[l][1], &cpu[l]);
            if (rc)
                return rc;
        }
        for (int k = 0; k < 2 && peer_of[l] >= 0; k++) {
            watchdog_arm(&b->wd, "an exchange of --calibrate");
            rc = exchange(b, k ? 4096 : 8, peer_of[l], &xchg[l][k]);
            if (rc)
                return rc;
        }
        for (size_t i = 0;
             peer_of[l] >= 0 && l != COLL_LINK_SHM && i < COLL_ARRAY_SIZE(idle_sizes); i++) {
            watchdog_arm(&b->wd, "a send/recv into an idle link of --calibrate");
            rc = idle_oneway(b, idle_sizes[i], peer_of[l], oneway[l][0], &idle[l][i]);
            if (rc)
                return rc;
        }
        if (peer_of[l] >= 0) {
            watchdog_arm(&b->wd, "a burst of --calibrate");
            rc = burst(b, peer_of[l], &per_msg[l]);
            if (rc)
                return rc;
        }
        /* the same bytes once below and once at the transport's rendezvous size: what the
         * hand-over costs beyond a copied message, with the buffers equally in cache */
        for (int k = 0; k < 2 && peer_of[l] >= 0 && p.link[l].rdv_bytes >= 128 &&
                        p.link[l].rdv_bytes <= (double)(4u << 20);
             k++) {
            watchdog_arm(&b->wd, "a ping-pong of --calibrate");
            rc = pingpong(b, (size_t)p.link[l].rdv_bytes - (k ? 0 : 64), peer_of[l],
                          &rdv_oneway[l][k]);
            if (rc)
                return rc;
        }
        /* the probe needs the comm to be that pair, and chunks that are hand-overs */
        if (peer_of[l] >= 0 && b->nranks == 2 && p.link[l].rdv_bytes > 0 &&
            p.link[l].rdv_bytes <= RDV_PROBE_CHUNK) {
            for (int k = 0; k < 2; k++) {
                watchdog_arm(&b->wd, "the hand-over probe of --calibrate");
                rc = time_rdv_probe(b, k ? RDV_PROBE_BYTES : RDV_PROBE_CHUNK, &probe[k]);
                if (rc)
                    return rc;
            }
            probe_link = l;
        }
    }
    /* the flat path's row: its own calls, on every rank (kept where it takes none) */
    if (b->nranks >= 2) {
        unsigned fit = 0;
        watchdog_arm(&b->wd, "the flat path of --calibrate");
        st = coll__ix_calibrate_flat(b->comm, &p, &fit);
        if (st != COLL_SUCCESS)
            return lib_error(b, "the flat path (--calibrate)", st);
        if (b->rank == 0)
            printf("# flat path: flat.alpha %.3g s%s, flat.beta %.3g s/B%s, flat.sliced %.3g "
                   "s/B%s, flat.yield %.3g s%s\n",
                   p.flat.alpha, fit & COLL_IX_FLAT_FIT_ALPHA ? "" : " (kept)", p.flat.beta,
                   fit & COLL_IX_FLAT_FIT_BETA ? "" : " (kept)", p.flat.sliced,
                   fit & COLL_IX_FLAT_FIT_SLICED ? "" : " (kept)", p.flat.yield,
                   fit & COLL_IX_FLAT_FIT_YIELD ? "" : " (kept)");
    }
    for (int l = 0; b->rank == 0 && l < COLL_NUM_LINKS; l++) {
        size_t last = COLL_ARRAY_SIZE(sizes) - 1;
        enum coll_link link = (enum coll_link)l;
        if (peer_of[l] < 0)
            continue;
        {
            /* beta from the two largest messages, alpha what the small ones have left */
            double beta =
                (oneway[l][last] - oneway[l][last - 1]) / (double)(sizes[last] - sizes[last - 1]);
            if (!(beta > 0))
                beta = oneway[l][last] / (double)sizes[last];
            p.link[link].alpha = fit_alpha(oneway[l], sizes, beta);
            p.link[link].beta = beta;
            if (link != COLL_LINK_SHM) /* its large messages take another path */
                fit_burst(&p.link[link], idle[l], idle_sizes, COLL_ARRAY_SIZE(idle_sizes));
            p.link[link].cpu = cpu[l];
            if (wakes[l] > 0 && (l == COLL_LINK_TCP || !(p.wake > 0)))
                p.wake = wakes[l]; /* between hosts where there are hosts */
            /* a call measured as none (the span) is kept as 0, not the file's old value */
            if ((spanned[l] || calls[l] > 0) && (l == COLL_LINK_TCP || !(p.call > 0)))
                p.call = calls[l];
            /* a burst's messages follow each other per_msg apart: that much of alpha holds
             * the link (and the executor: step), the rest is latency they overlap */
            p.link[link].lat = fmax(p.link[link].alpha - per_msg[l], 0);
            /* what an exchange costs beyond one way, both medians of 8-byte messages; timed
             * as collbench times a call where the ranks share a clock */
            p.link[link].xchg = spanned[l] ? span_xchg[l] : fmax(xchg[l][0] - oneway[l][0], 0);
            if (l == COLL_LINK_SHM && per_msg[l] > 0) /* 0: lost in the noise, keep it */
                p.step = fmin(per_msg[l], p.link[link].alpha);
            if (rdv_oneway[l][1] > 0) /* replaced by the probe's where there is one */
                p.link[link].rdv = fmax(rdv_oneway[l][1] - rdv_oneway[l][0] - 64 * beta, 0);
            printf("# collbench --calibrate: %s between rank 0 (%s) and rank %d (%s)\n",
                   coll__link_name(link), b->hosts[0], peer_of[l], b->hosts[peer_of[l]]);
            printf("#       size   one-way, median (us)   model (us)\n");
            for (size_t i = 0; i < COLL_ARRAY_SIZE(sizes); i++)
                printf("%12zu   %20.2f   %10.2f\n", sizes[i], oneway[l][i] * 1e6,
                       (p.link[link].alpha + (double)sizes[i] * p.link[link].beta) * 1e6);
            if (link != COLL_LINK_SHM) {
                const struct coll_link_cost *c = &p.link[link];
                /* the line's start: what the smallest took beyond its bytes */
                double t0 = idle[l][0] - (double)idle_sizes[0] *
                                             (c->burst > 0 ? c->burst_beta : c->beta);
                printf("#       size   into an idle link (us)   model with its packets (us)\n");
                for (size_t i = 0; i < COLL_ARRAY_SIZE(idle_sizes); i++) {
                    double m = (double)idle_sizes[i], last = coll__cost_last_packet(c, m);
                    printf("%12zu   %22.2f   %27.2f\n", idle_sizes[i], idle[l][i] * 1e6,
                           (t0 + (c->burst > 0 ? (m - last) * c->beta + last * c->burst_beta
                                               : m * c->beta)) *
                               1e6);
                }
            }
            printf("# %s.alpha %.3g s (per message), %s.beta %.3g s/B (%.2f GB/s)\n",
                   coll__link_name(link), p.link[link].alpha, coll__link_name(link),
                   p.link[link].beta, p.link[link].beta > 0 ? 1e-9 / p.link[link].beta : 0.0);
            if (p.link[link].burst > 0)
                printf("# an idle link let packets of %.0f B through at %.3g s/B (%.2f GB/s), "
                       "the first after %.2f us (alpha %.2f): %s.burst, %s.burst_beta (collsim)\n",
                       p.link[link].burst, p.link[link].burst_beta,
                       p.link[link].burst_beta > 0 ? 1e-9 / p.link[link].burst_beta : 0.0,
                       (idle[l][0] - (double)idle_sizes[0] * p.link[link].burst_beta) * 1e6,
                       p.link[link].alpha * 1e6, coll__link_name(link), coll__link_name(link));
            printf("# burst of %d messages: %.2f us each at the sender: %s.lat %.3g s%s\n",
                   BURST_MSGS, per_msg[l] * 1e6, coll__link_name(link), p.link[link].lat,
                   l == COLL_LINK_SHM ? ", step (the executor's time per step) the same" : "");
            printf("# stream of %u KiB in %u KiB messages: one way %.3g s/B (%.3f GB/s), both ways "
                   "at once %.3g s/B each (%.3f GB/s each); ping-pong of %zu and %zu B: %.3g s/B\n",
                   STREAM_BYTES >> 10, STREAM_CHUNK >> 10, sbeta[l][0],
                   sbeta[l][0] > 0 ? 1e-9 / sbeta[l][0] : 0.0, sbeta[l][1],
                   sbeta[l][1] > 0 ? 1e-9 / sbeta[l][1] : 0.0, sizes[last - 1], sizes[last],
                   (oneway[l][last] - oneway[l][last - 1]) /
                       (double)(sizes[last] - sizes[last - 1]));
            if (spanned[l])
                printf("# 8-byte calls timed as collbench times one (a warm-up, the polled start "
                       "barrier, last start to last end): broadcast %.2f us, exchange %.2f us; "
                       "one way of the ping-pong %.2f us: call %.3g s, %s.xchg %.3g s\n",
                       spans[l][0], spans[l][1], oneway[l][0] * 1e6, calls[l],
                       coll__link_name(link), span_xchg[l]);
            else if (calls[l] > 0)
                printf("# a ping-pong of 8-byte broadcasts, each pair after an all-reduce: %.2f us "
                       "more a call than send/recv's, call %.3g s\n",
                       calls[l] * 1e6, calls[l]);
            printf("# an answer held 1 ms (the wait sleeps): %.2f us more than two one-way "
                   "times, wake %.3g s\n",
                   wakes[l] * 1e6, wakes[l]);
            if (p.link[link].cpu > 0)
                printf("# streams both ways: %.3g s of the machine's CPU per byte, %s.cpu (%.2f "
                       "GB/s a core)\n",
                       p.link[link].cpu, coll__link_name(link), 1e-9 / p.link[link].cpu);
            printf("# exchange (both ranks send and receive, started together): 8 B %.2f us, "
                   "4 KiB %.2f us; one way of the ping-pong %.2f us, %.2f us%s%s.xchg %.3g s\n",
                   xchg[l][0] * 1e6, xchg[l][1] * 1e6, oneway[l][0] * 1e6, oneway[l][3] * 1e6,
                   spanned[l] ? " (not kept: the calls above) " : ": ", coll__link_name(link),
                   fmax(xchg[l][0] - oneway[l][0], 0));
            if (rdv_oneway[l][1] > 0)
                printf("# ping-pong: %s.rdv %.3g s more per message from %.0f B (one-way "
                       "%.2f us at %.0f B, %.2f us at %.0f B)\n",
                       coll__link_name(link), p.link[link].rdv, p.link[link].rdv_bytes,
                       rdv_oneway[l][0] * 1e6, p.link[link].rdv_bytes - 64, rdv_oneway[l][1] * 1e6,
                       p.link[link].rdv_bytes);
        }
    }
    if (b->rank == 0) {
        if (nlinks == 0)
            printf("# collbench --calibrate: one rank: links keep their values (run it with "
                   "--np 2, or under collrun -n 2, to measure %s)\n",
                   tp);
        for (int d = 0; d < COLL_NUM_DTYPES; d++) {
            double g = time_reduce(b, (coll_dtype_t)d);
            if (isfinite(g) && g > 0)
                p.gamma[d] = g;
        }
        {
            double c = time_copy(b);
            if (isfinite(c) && c > 0)
                p.copy = c;
        }
        printf("# gamma.float %.3g s/B (%.2f GB/s of output), copy %.3g s/B (%.2f GB/s)\n",
               p.gamma[COLL_FLOAT32], 1e-9 / p.gamma[COLL_FLOAT32], p.copy, 1e-9 / p.copy);
        calibrate_memory(&p);
        if (probe_link >= 0 && probe[0] > 0 && probe[1] > 0) {
            p.link[probe_link].rdv = fit_rdv(&p, (enum coll_link)probe_link, probe);
            printf("# %s.rdv %.3g s more per message from %.0f B (fitted to the probe)\n",
                   coll__link_name((enum coll_link)probe_link), p.link[probe_link].rdv,
                   p.link[probe_link].rdv_bytes);
        }
        rc = 1;
        if (!coll__ix_calib_path(b->calib_out, path, sizeof(path))) {
            fprintf(stderr, "collbench: --calibrate: no place for the file: set COLL_CALIB_FILE "
                            "(or HOME)\n");
        } else if (mkdir_parents(path) != 0) {
            fprintf(stderr, "collbench: --calibrate: cannot create the directory of '%s': %s\n",
                    path, strerror(errno));
        } else if ((st = coll__cost_params_save(&p, path)) != COLL_SUCCESS) {
            fprintf(stderr, "collbench: --calibrate: %s\n", coll_last_error(NULL));
        } else {
            printf("# wrote %s: the selector of every new communicator reads it%s\n", path,
                   b->calib_out ? " (while COLL_CALIB_FILE names it)" : "");
            rc = 0;
        }
        fflush(stdout);
        one = rc == 0;
    }
    /* everyone waits for rank 0's verdict, so that all ranks end alike */
    watchdog_arm(&b->wd, "the end of --calibrate");
    st = coll_broadcast(&one, &one, 1, COLL_INT32, 0, b->comm);
    watchdog_arm(&b->wd, NULL);
    if (st != COLL_SUCCESS)
        return lib_error(b, "broadcast (--calibrate)", st);
    return one ? 0 : 1;
}
