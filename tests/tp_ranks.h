/*
 * tp_ranks.h - ranks for the transport tests (test_tcp.c, test_ib.c): each "rank" is a
 * comm-like context with its own epoll fd, lock and a driver thread that runs the
 * transport's progress and callbacks under the lock, as the engine does; the test thread
 * posts transfers under the lock and waits for their status.
 *
 * The including file defines TP_UNDER_TEST (the transport's vtable, e.g.
 * &coll__tcp_transport) and TP_COMM_ID before including it, after harness.h.
 */
#ifndef COLL_TESTS_TP_RANKS_H
#define COLL_TESTS_TP_RANKS_H

#include "core/bootstrap.h"
#include "transport/transport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <time.h>

#define MAX_RANKS 4
static const struct coll_transport *const tp = TP_UNDER_TEST;
#define TP_SLOT coll__transport_index(TP_UNDER_TEST)
static const uint8_t test_secret[COLL_SECRET_BYTES] = "0123456789abcdef";
static const uint64_t test_comm_id = TP_COMM_ID;

struct rank {
    struct coll_comm comm;
    pthread_t driver;
    atomic_bool stop;
    bool driving;
};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t now_ms(void)
{
    return coll__now_ns() / 1000000ull;
}

/* What every rank has before its transport's init: locks, epoll fd, identity, no channels.
 * The caller sets the config fields its transport reads. */
static void rank_base(struct rank *r, int rank, int nranks)
{
    struct coll_comm *c = &r->comm;

    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->errlock, NULL);
    pthread_cond_init(&c->cond, NULL);
    c->wakefd = -1;
    c->rank = rank;
    c->nranks = nranks;
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    ASSERT(c->epfd >= 0);
    c->self.rank = rank;
    coll__host_identity(&c->self);
    c->chans = calloc((size_t)nranks, sizeof(*c->chans));
    ASSERT(c->chans);
    coll__comm_net_init(c); /* the config is read through it: set it after this, too */
}

/* What the bootstrap would do: everyone learns everyone's record, comm id and secret. */
static void rank_set_table(struct rank *r, const struct coll_peer_info *table, int n)
{
    r->comm.peers = malloc((size_t)n * sizeof(*table));
    ASSERT(r->comm.peers);
    memcpy(r->comm.peers, table, (size_t)n * sizeof(*table));
    r->comm.comm_id = test_comm_id;
    memcpy(r->comm.secret, test_secret, COLL_SECRET_BYTES);
    r->comm.net.peers = r->comm.peers;
    r->comm.net.comm_id = test_comm_id;
}

static void publish(struct rank *rs, int n)
{
    struct coll_peer_info table[MAX_RANKS];
    for (int i = 0; i < n; i++)
        table[i] = rs[i].comm.self;
    for (int i = 0; i < n; i++)
        rank_set_table(&rs[i], table, n);
}

/* The engine's loop, reduced: poll and arm (transports that have them), sleep in
 * epoll_wait, disarm, run callbacks, all under the lock but the sleep. */
static void *driver_main(void *arg)
{
    struct rank *r = arg;
    void *ctx = r->comm.tp_ctx[TP_SLOT];

    while (!atomic_load(&r->stop)) {
        struct epoll_event evs[16];
        bool ready = false;
        int n;

        if (tp->progress) {
            pthread_mutex_lock(&r->comm.lock);
            tp->progress(ctx);
            ready = tp->arm(ctx);
            pthread_mutex_unlock(&r->comm.lock);
        }
        n = epoll_wait(r->comm.epfd, evs, 16, ready ? 0 : 20);
        pthread_mutex_lock(&r->comm.lock);
        if (tp->progress)
            tp->disarm(ctx);
        for (int i = 0; i < n; i++) {
            struct coll_pollent *pe = evs[i].data.ptr;
            pe->cb(pe, evs[i].events);
        }
        pthread_mutex_unlock(&r->comm.lock);
    }
    return NULL;
}

static void rank_start(struct rank *r)
{
    atomic_store(&r->stop, false);
    ASSERT_EQ(pthread_create(&r->driver, NULL, driver_main, r), 0);
    r->driving = true;
}

static void rank_stop(struct rank *r)
{
    if (!r->driving)
        return;
    atomic_store(&r->stop, true);
    pthread_join(r->driver, NULL);
    r->driving = false;
}

static void rank_fini(struct rank *r)
{
    rank_stop(r);
    tp->fini(r->comm.tp_ctx[TP_SLOT]);
    r->comm.tp_ctx[TP_SLOT] = NULL;
    close(r->comm.epfd);
    free(r->comm.peers);
    free(r->comm.chans);
}

/* As the executor: ask for the channel until it is up (or fails). */
static coll_status_t rank_connect(struct rank *r, int peer, int timeout_ms)
{
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;

    for (;;) {
        coll_status_t st;
        pthread_mutex_lock(&r->comm.lock);
        st = r->comm.chans[peer] ? COLL_SUCCESS
                                 : tp->connect(r->comm.tp_ctx[TP_SLOT], peer, &r->comm.chans[peer]);
        pthread_mutex_unlock(&r->comm.lock);
        if (st != COLL_SUCCESS || r->comm.chans[peer])
            return st;
        if (now_ms() > deadline)
            return COLL_TIMEOUT;
        sleep_ms(1);
    }
}

static void connect_all(struct rank *rs, int n)
{
    /* both sides ask, in any order, as executors would */
    for (int i = n - 1; i >= 0; i--)
        for (int k = 0; k < n; k++)
            if (k != i) {
                pthread_mutex_lock(&rs[i].comm.lock);
                tp->connect(rs[i].comm.tp_ctx[TP_SLOT], k, &rs[i].comm.chans[k]);
                pthread_mutex_unlock(&rs[i].comm.lock);
            }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++)
            if (k != i)
                ASSERT_MSG(rank_connect(&rs[i], k, 10000) == COLL_SUCCESS, "%d -> %d: %s", i, k,
                           rs[i].comm.errmsg);
}

static coll_status_t post(struct rank *r, bool send, int peer, struct coll_xfer *x, void *buf,
                          size_t len, uint64_t seq, uint32_t tag)
{
    coll_status_t st;

    memset(x, 0, sizeof(*x));
    x->buf = buf;
    x->len = len;
    x->peer = peer;
    x->seq = seq;
    x->tag = tag;
    atomic_store(&x->status, COLL_IN_PROGRESS);
    pthread_mutex_lock(&r->comm.lock);
    st = send ? tp->post_send(r->comm.chans[peer], x) : tp->post_recv(r->comm.chans[peer], x);
    pthread_mutex_unlock(&r->comm.lock);
    return st;
}

/* Status once the transfer is done (COLL_IN_PROGRESS if it is not within timeout_ms). */
static int wait_xfer(struct coll_xfer *x, int timeout_ms)
{
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    int st;

    while ((st = atomic_load(&x->status)) == COLL_IN_PROGRESS && now_ms() < deadline)
        usleep(200);
    return st;
}

static uint8_t pattern(size_t i, int src, int dst, uint32_t k)
{
    return (uint8_t)(i * 131u + (size_t)src * 17u + (size_t)dst * 7u + k * 13u + (i >> 9));
}

static void fill(uint8_t *p, size_t len, int src, int dst, uint32_t k)
{
    for (size_t i = 0; i < len; i++)
        p[i] = pattern(i, src, dst, k);
}

static bool check(const uint8_t *p, size_t len, int src, int dst, uint32_t k)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern(i, src, dst, k))
            return false;
    return true;
}

/* Send one message each way between ranks a and b and check both. */
static void exchange(struct rank *rs, int a, int b, size_t len, uint64_t seq, uint32_t tag)
{
    uint8_t *sa = malloc(len + 1), *sb = malloc(len + 1), *ra = malloc(len + 1),
            *rb = malloc(len + 1);
    struct coll_xfer xs[4];

    ASSERT(sa && sb && ra && rb);
    fill(sa, len, a, b, tag);
    fill(sb, len, b, a, tag);
    ASSERT_EQ(post(&rs[b], false, a, &xs[0], rb, len, seq, tag), COLL_SUCCESS);
    ASSERT_EQ(post(&rs[a], true, b, &xs[1], sa, len, seq, tag), COLL_SUCCESS);
    ASSERT_EQ(post(&rs[b], true, a, &xs[2], sb, len, seq, tag), COLL_SUCCESS);
    ASSERT_EQ(post(&rs[a], false, b, &xs[3], ra, len, seq, tag), COLL_SUCCESS);
    for (int i = 0; i < 4; i++)
        ASSERT_MSG(wait_xfer(&xs[i], 20000) == COLL_SUCCESS, "len %zu xfer %d: status %d (%s)",
                   len, i, atomic_load(&xs[i].status),
                   i % 2 ? rs[a].comm.errmsg : rs[b].comm.errmsg);
    ASSERT_MSG(check(rb, len, a, b, tag), "%d -> %d: %zu bytes corrupted", a, b, len);
    ASSERT_MSG(check(ra, len, b, a, tag), "%d -> %d: %zu bytes corrupted", b, a, len);
    free(sa), free(sb), free(ra), free(rb);
}

#endif /* COLL_TESTS_TP_RANKS_H */
