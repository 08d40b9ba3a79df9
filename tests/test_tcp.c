/*
 * test_tcp.c - the TCP transport between comm-like contexts: each "rank" has its own epoll
 * fd, lock and a driver thread that runs the callbacks under the lock (as the engine
 * does), while the test thread posts transfers under the lock and waits for their status.
 * Ranks live in one process, or in forked processes where a peer must die for real.
 * Cases run with one socket per link unless they set test_nsocks (COLL_NSOCKS) for striping.
 */
#include "harness.h"

#include "core/bootstrap.h"
#include "base/sys.h"
#include "transport/tcp_test.h"
#include "transport/transport.h"

#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

/* ---- what the engine provides -------------------------------------------------------- */

/* Weak: when the test links the whole library, the engine's own definitions win (they do
 * the same for these comms: no ops, no waiters, wakefd -1). */
__attribute__((weak)) void coll__comm_fail(struct coll_comm *comm, coll_status_t st)
{
    int expected = COLL_SUCCESS;

    if (!atomic_compare_exchange_strong(&comm->failed, &expected, (int)st))
        return;
    void *ctx = comm->tp_ctx[coll__transport_index(&coll__tcp_transport)];
    if (ctx)
        coll__tcp_transport.shutdown(ctx);
}

__attribute__((weak)) void coll__engine_wake(struct coll_comm *comm)
{
    (void)comm;
}

/* ---- ranks and their drivers --------------------------------------------------------- */

#define TP_UNDER_TEST (&coll__tcp_transport)
#define TP_COMM_ID 0x5eedc0117e57ull
#include "tp_ranks.h"

static int test_nsocks = 1; /* cfg.nsocks of the ranks a case creates (fork keeps it) */

/* The listener exists (and comm.self.addr is known) after this. */
static void rank_init(struct rank *r, int rank, int nranks, int64_t timeout_ms, int64_t sockbuf,
                      const char *ifname)
{
    struct coll_comm *c = &r->comm;

    rank_base(r, rank, nranks);
    c->cfg.timeout_ms = timeout_ms;
    c->cfg.sockbuf_bytes = sockbuf;
    c->cfg.nsocks = test_nsocks;
    snprintf(c->cfg.socket_ifname, sizeof(c->cfg.socket_ifname), "%s", ifname ? ifname : "");
    ASSERT_EQ(tp->init(&c->net, &c->tp_ctx[TP_SLOT]), COLL_SUCCESS);
    ASSERT(c->self.addr_len > 0);
}

static void setup(struct rank *rs, int n, int64_t timeout_ms, int64_t sockbuf)
{
    for (int i = 0; i < n; i++)
        rank_init(&rs[i], i, n, timeout_ms, sockbuf, NULL);
    publish(rs, n);
    for (int i = 0; i < n; i++)
        rank_start(&rs[i]);
    connect_all(rs, n);
}

static void teardown(struct rank *rs, int n)
{
    for (int i = 0; i < n; i++)
        rank_stop(&rs[i]);
    for (int i = 0; i < n; i++)
        rank_fini(&rs[i]);
}

static const size_t sizes[] = {
    0, 1, 3, 39, 40, 41, 1000, 4096, 65535, 65536 + 7, 1 << 20, (1 << 20) + 1, 8 << 20};

/* ---- traffic ------------------------------------------------------------------------- */

TEST(exchange_all_sizes_both_directions)
{
    struct rank rs[2];

    setup(rs, 2, 10000, 0);
    for (size_t i = 0; i < COLL_ARRAY_SIZE(sizes); i++)
        exchange(rs, 0, 1, sizes[i], i, (uint32_t)i);
    ASSERT_EQ(atomic_load(&rs[0].comm.failed), COLL_SUCCESS);
    ASSERT_EQ(atomic_load(&rs[1].comm.failed), COLL_SUCCESS);
    teardown(rs, 2);
}

/* Small socket buffers force partial writes and reads of large messages. */
TEST(exchange_with_small_socket_buffers)
{
    struct rank rs[2];

    setup(rs, 2, 10000, 4096);
    exchange(rs, 0, 1, 8 << 20, 1, 0);
    exchange(rs, 1, 0, 3 << 20, 2, 0);
    teardown(rs, 2);
}

/* Every rank posts many sends and receives to every other rank at once, before any data
 * moves; messages between a pair must arrive in posting order (the content encodes the
 * index, so a reordering is a corruption). */
static void many_queued_messages(int nsocks)
{
    enum { N = 3, M = 120 };
    static struct coll_xfer sx[N][N][M], rx[N][N][M];
    static uint8_t *sbuf[N][N][M], *rbuf[N][N][M];
    static size_t len[N][N][M];
    struct rank rs[N];
    unsigned seed = 12345;

    test_nsocks = nsocks;
    setup(rs, N, 20000, 0);
    for (int a = 0; a < N; a++)
        for (int b = 0; b < N; b++)
            for (int k = 0; k < M && a != b; k++) {
                seed = seed * 1103515245u + 12345u;
                len[a][b][k] = (k % 40 == 39) ? (1u << 20) + k : (seed >> 8) % 20000;
                if (k % 10 == 3)
                    len[a][b][k] = 0;
                sbuf[a][b][k] = malloc(len[a][b][k] + 1);
                rbuf[a][b][k] = malloc(len[a][b][k] + 1);
                fill(sbuf[a][b][k], len[a][b][k], a, b, (uint32_t)k);
            }
    /* receives first on some ranks, sends first on others */
    for (int a = 0; a < N; a++)
        for (int b = 0; b < N; b++)
            for (int k = 0; k < M && a != b; k++) {
                if (a % 2 == 0) {
                    ASSERT_EQ(post(&rs[b], false, a, &rx[a][b][k], rbuf[a][b][k], len[a][b][k], 7,
                                   (uint32_t)k),
                              COLL_SUCCESS);
                    ASSERT_EQ(post(&rs[a], true, b, &sx[a][b][k], sbuf[a][b][k], len[a][b][k], 7,
                                   (uint32_t)k),
                              COLL_SUCCESS);
                } else {
                    ASSERT_EQ(post(&rs[a], true, b, &sx[a][b][k], sbuf[a][b][k], len[a][b][k], 7,
                                   (uint32_t)k),
                              COLL_SUCCESS);
                    ASSERT_EQ(post(&rs[b], false, a, &rx[a][b][k], rbuf[a][b][k], len[a][b][k], 7,
                                   (uint32_t)k),
                              COLL_SUCCESS);
                }
            }
    for (int a = 0; a < N; a++)
        for (int b = 0; b < N; b++)
            for (int k = 0; k < M && a != b; k++) {
                ASSERT_MSG(wait_xfer(&rx[a][b][k], 30000) == COLL_SUCCESS, "recv %d->%d #%d: %s", a,
                           b, k, rs[b].comm.errmsg);
                ASSERT_EQ(wait_xfer(&sx[a][b][k], 30000), COLL_SUCCESS);
                ASSERT_MSG(check(rbuf[a][b][k], len[a][b][k], a, b, (uint32_t)k),
                           "%d->%d #%d corrupted or out of order", a, b, k);
                free(sbuf[a][b][k]);
                free(rbuf[a][b][k]);
            }
    teardown(rs, N);
}

TEST(many_queued_messages_all_pairs_in_order)
{
    many_queued_messages(1);
}

/* 16 sockets per link: small messages rotate over them, 1 MiB ones go in 16 pieces. */
TEST(many_queued_messages_over_many_sockets)
{
    many_queued_messages(16);
}

/* Data that arrives before its receive is posted waits in the kernel (and the inbox) and is
 * read later. */
static void receive_posted_after_the_data_arrived(int nsocks)
{
    struct rank rs[2];
    struct coll_xfer s[3], r[3];
    static uint8_t sb[3][100000], rb[3][100000];

    test_nsocks = nsocks;
    setup(rs, 2, 10000, 0);
    for (int k = 0; k < 3; k++) {
        fill(sb[k], sizeof(sb[k]), 0, 1, (uint32_t)k);
        ASSERT_EQ(post(&rs[0], true, 1, &s[k], sb[k], sizeof(sb[k]), 3, (uint32_t)k), COLL_SUCCESS);
    }
    sleep_ms(100);
    for (int k = 0; k < 3; k++) {
        ASSERT_EQ(post(&rs[1], false, 0, &r[k], rb[k], sizeof(rb[k]), 3, (uint32_t)k),
                  COLL_SUCCESS);
        ASSERT_EQ(wait_xfer(&r[k], 10000), COLL_SUCCESS);
        ASSERT(check(rb[k], sizeof(rb[k]), 0, 1, (uint32_t)k));
    }
    for (int k = 0; k < 3; k++)
        ASSERT_EQ(wait_xfer(&s[k], 10000), COLL_SUCCESS);
    teardown(rs, 2);
}

TEST(receive_posted_after_the_data_arrived)
{
    receive_posted_after_the_data_arrived(1);
}

/* 100000 bytes go in 3 pieces over 3 sockets */
TEST(receive_posted_after_the_striped_data_arrived)
{
    receive_posted_after_the_data_arrived(3);
}

TEST(interface_choice_follows_config)
{
    struct rank r;
    struct coll_comm c;
    void *ctx = NULL;

    rank_init(&r, 0, 2, 1000, 0, "lo");
    {
        struct sockaddr_storage ss;
        memcpy(&ss, r.comm.self.addr, r.comm.self.addr_len);
        ASSERT(ss.ss_family == AF_INET || ss.ss_family == AF_INET6);
        if (ss.ss_family == AF_INET) {
            const struct sockaddr_in *sin = (const struct sockaddr_in *)&ss;
            ASSERT_EQ(ntohl(sin->sin_addr.s_addr) >> 24, 127);
            ASSERT(sin->sin_port != 0);
        } else {
            const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&ss;
            ASSERT(IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr));
            ASSERT(sin6->sin6_port != 0);
        }
    }
    rank_fini(&r);

    memset(&c, 0, sizeof(c));
    pthread_mutex_init(&c.errlock, NULL);
    c.nranks = 2;
    c.epfd = epoll_create1(0);
    snprintf(c.cfg.socket_ifname, sizeof(c.cfg.socket_ifname), "=nosuchif0");
    coll__comm_net_init(&c);
    ASSERT_EQ(tp->init(&c.net, &ctx), COLL_INVALID_ARGUMENT);
    ASSERT(ctx == NULL);
    ASSERT_STR_CONTAINS(c.errmsg, "COLL_SOCKET_IFNAME");
    close(c.epfd);
    tp->fini(NULL);
}

/* getifaddrs without IPv4 addresses; with hide_global_v6, only link-local IPv6 and ::1 stay.
 * The listeners go to IPv6: link-local (with a scope id) in the second case, if there is one. */
static bool hide_global_v6;

static int v6_getifaddrs(struct ifaddrs **ifap)
{
    if (getifaddrs(ifap) < 0)
        return -1;
    for (struct ifaddrs *ifa = *ifap; ifa; ifa = ifa->ifa_next) {
        if (!ifa->ifa_addr)
            continue;
        if (ifa->ifa_addr->sa_family == AF_INET)
            ifa->ifa_addr = NULL;
        else if (hide_global_v6 && ifa->ifa_addr->sa_family == AF_INET6 &&
                 !IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr) &&
                 !IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr))
            ifa->ifa_addr = NULL;
    }
    return 0;
}

static void exchange_over_ipv6(void)
{
    struct sockaddr_storage ss;
    socklen_t len;
    struct rank rs[2];

    coll__sys.getifaddrs = v6_getifaddrs;
    if (coll__socket_pick_addr(NULL, NULL, &ss, &len, NULL, 0) != COLL_SUCCESS) {
        printf("# no such IPv6 address on this machine: nothing to check\n");
        return;
    }
    setup(rs, 2, 10000, 0);
    memcpy(&ss, rs[0].comm.self.addr, rs[0].comm.self.addr_len);
    ASSERT_EQ(ss.ss_family, AF_INET6);
    for (size_t i = 0; i < COLL_ARRAY_SIZE(sizes); i++)
        exchange(rs, 0, 1, sizes[i], i, 0);
    teardown(rs, 2);
    coll__sys = coll__sys_libc;
}

TEST(exchange_over_ipv6)
{
    exchange_over_ipv6();
}

TEST(exchange_over_ipv6_link_local)
{
    hide_global_v6 = true;
    exchange_over_ipv6();
}

/* ---- striping (COLL_NSOCKS > 1) ------------------------------------------------------ */

/* Payload bytes each fd wrote (sendmsg through coll__sys), to see that pieces really spread. */
#define MAX_FD 4096
static atomic_ullong sent_by_fd[MAX_FD];

static ssize_t counting_sendmsg(int fd, const struct msghdr *msg, int flags)
{
    ssize_t w = sendmsg(fd, msg, flags);
    if (w > 0 && fd >= 0 && fd < MAX_FD)
        atomic_fetch_add(&sent_by_fd[fd], (unsigned long long)w);
    return w;
}

/* Sizes around the piece size (32 KiB), its multiples and the 64-byte piece alignment, both
 * directions; every socket of the link carries its share of the big ones. */
static void striped_exchange(int nsocks)
{
    static const size_t odd[] = {0,           1,           (32 << 10) - 1, 32 << 10,
                                 (64 << 10) - 1, 64 << 10, (64 << 10) + 1, (96 << 10) + 5,
                                 (128 << 10) + 63, (1 << 20) + 1, (3 << 20) + 7, (8 << 20) + 13};
    struct rank rs[2];
    int fds[16], n;

    test_nsocks = nsocks;
    for (int i = 0; i < MAX_FD; i++)
        atomic_store(&sent_by_fd[i], 0);
    coll__sys.sendmsg = counting_sendmsg;
    setup(rs, 2, 10000, 0);
    for (int side = 0; side < 2; side++) {
        n = coll__tcp_link_fds(rs[side].comm.tp_ctx[TP_SLOT], 1 - side, fds, 16);
        ASSERT_EQ(n, nsocks);
        for (int i = 0; i < n; i++)
            ASSERT(fds[i] >= 0 && fds[i] < MAX_FD);
    }
    for (int rep = 0; rep < 2; rep++) /* twice: the rotation starts elsewhere */
        for (size_t i = 0; i < COLL_ARRAY_SIZE(odd); i++)
            exchange(rs, rep, 1 - rep, odd[i], i, (uint32_t)(i + 100 * rep));
    /* 8 MiB in nsocks pieces, twice per direction: each socket wrote at least its share */
    for (int side = 0; side < 2; side++) {
        n = coll__tcp_link_fds(rs[side].comm.tp_ctx[TP_SLOT], 1 - side, fds, 16);
        for (int i = 0; i < n; i++)
            ASSERT_MSG(atomic_load(&sent_by_fd[fds[i]]) >= 2ull * (8 << 20) / (unsigned)nsocks,
                       "rank %d socket %d wrote only %llu bytes", side, i,
                       (unsigned long long)atomic_load(&sent_by_fd[fds[i]]));
    }
    ASSERT_EQ(atomic_load(&rs[0].comm.failed), COLL_SUCCESS);
    ASSERT_EQ(atomic_load(&rs[1].comm.failed), COLL_SUCCESS);
    teardown(rs, 2);
    coll__sys = coll__sys_libc;
}

TEST(striping_odd_sizes_over_two_sockets)
{
    striped_exchange(2);
}

TEST(striping_odd_sizes_over_three_sockets)
{
    striped_exchange(3);
}

TEST(striping_with_small_socket_buffers)
{
    struct rank rs[2];

    test_nsocks = 4;
    setup(rs, 2, 10000, 4096);
    exchange(rs, 0, 1, (8 << 20) + 5, 1, 0);
    exchange(rs, 1, 0, (3 << 20) + 1, 2, 0);
    teardown(rs, 2);
}

/* The connector's COLL_NSOCKS makes the link; the acceptor follows whatever it says. */
TEST(socket_count_follows_the_connecting_rank)
{
    static const int want[3][3] = {{0, 3, 3}, {3, 0, 1}, {3, 1, 0}};
    struct rank rs[3];
    int fds[8];

    for (int i = 0; i < 3; i++) {
        test_nsocks = i == 0 ? 3 : i == 1 ? 1 : 5;
        rank_init(&rs[i], i, 3, 10000, 0, NULL);
    }
    publish(rs, 3);
    for (int i = 0; i < 3; i++)
        rank_start(&rs[i]);
    connect_all(rs, 3);
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            if (a != b)
                ASSERT_MSG(coll__tcp_link_fds(rs[a].comm.tp_ctx[TP_SLOT], b, fds, 8) == want[a][b],
                           "rank %d to %d", a, b);
    for (int a = 0; a < 3; a++)
        for (int b = a + 1; b < 3; b++) {
            exchange(rs, a, b, 1 << 20, 1, 0);
            exchange(rs, b, a, 100, 2, 0);
        }
    teardown(rs, 3);
}

/* One socket of a stripe set goes away while a striped receive waits for its piece: both
 * ranks fail with COLL_REMOTE_ERROR (a link is whole or dead). */
TEST(one_socket_of_a_stripe_set_dying_fails_the_link)
{
    struct rank rs[2];
    struct coll_xfer r, s, s0;
    static uint8_t rb[4 << 20], sb[100];
    int fds[4];

    test_nsocks = 4;
    setup(rs, 2, 10000, 0);
    exchange(rs, 0, 1, 1 << 20, 1, 0);
    ASSERT_EQ(post(&rs[1], false, 0, &r, rb, sizeof(rb), 2, 0), COLL_SUCCESS);
    ASSERT_EQ(coll__tcp_link_fds(rs[0].comm.tp_ctx[TP_SLOT], 1, fds, 4), 4);
    pthread_mutex_lock(&rs[0].comm.lock);
    shutdown(fds[2], SHUT_RDWR); /* rank 0's end of socket 2: rank 1 reads its end */
    pthread_mutex_unlock(&rs[0].comm.lock);
    ASSERT_EQ(wait_xfer(&r, 10000), COLL_REMOTE_ERROR);
    ASSERT_EQ(atomic_load(&rs[1].comm.failed), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(rs[1].comm.errmsg, "rank 0 (");
    ASSERT_STR_CONTAINS(rs[1].comm.errmsg, "closed the connection");
    /* rank 1 closed all four: rank 0 cannot use the link either, even its other sockets */
    sleep_ms(100);
    post(&rs[0], true, 1, &s, sb, sizeof(sb), 3, 0);
    ASSERT_EQ(wait_xfer(&s, 10000), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(rs[0].comm.errmsg, "rank 1 (");
    ASSERT_EQ(post(&rs[0], true, 1, &s0, sb, sizeof(sb), 4, 0), COLL_REMOTE_ERROR);
    teardown(rs, 2);
}

/* A stripe set where one socket fails while striped sends are under way. */
TEST(send_failure_on_one_socket_of_a_stripe_set)
{
    struct rank rs[2];
    struct coll_xfer s, r;
    static uint8_t sb[4 << 20], rb[4 << 20];
    int fds[4];

    test_nsocks = 4;
    setup(rs, 2, 10000, 4096); /* small buffers: the send cannot finish before the receive */
    ASSERT_EQ(post(&rs[0], true, 1, &s, sb, sizeof(sb), 1, 0), COLL_SUCCESS);
    ASSERT_EQ(coll__tcp_link_fds(rs[1].comm.tp_ctx[TP_SLOT], 0, fds, 4), 4);
    pthread_mutex_lock(&rs[1].comm.lock);
    shutdown(fds[1], SHUT_RDWR);
    pthread_mutex_unlock(&rs[1].comm.lock);
    ASSERT_EQ(wait_xfer(&s, 10000), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(rs[0].comm.errmsg, "rank 1 (");
    post(&rs[1], false, 0, &r, rb, sizeof(rb), 1, 0);
    ASSERT_EQ(wait_xfer(&r, 10000), COLL_REMOTE_ERROR);
    teardown(rs, 2);
}

/* ---- disagreements ------------------------------------------------------------------- */

/* Rank 0 sends (seq, tag, len); rank 1 expects (rseq, rtag, rlen): rank 1 fails with a
 * message naming both, and rank 0 then finds the connection closed. */
static void mismatch(uint64_t rseq, uint32_t rtag, size_t rlen)
{
    struct rank rs[2];
    struct coll_xfer s, r, r0;
    static uint8_t sb[100], rb[200], rb0[10];
    coll_status_t st;

    setup(rs, 2, 10000, 0);
    ASSERT_EQ(post(&rs[0], true, 1, &s, sb, 100, 5, 2), COLL_SUCCESS);
    sleep_ms(50); /* the data is likely there: post may find the mismatch itself */
    st = post(&rs[1], false, 0, &r, rb, rlen, rseq, rtag);
    ASSERT(st == COLL_SUCCESS || st == COLL_REMOTE_ERROR);
    ASSERT_EQ(wait_xfer(&r, 10000), COLL_REMOTE_ERROR);
    ASSERT_EQ(atomic_load(&rs[1].comm.failed), COLL_REMOTE_ERROR);
    /* the message names both sides (src/core/agree.c), never equal lengths as a difference */
    if (rseq != 5)
        ASSERT_STR_CONTAINS(rs[1].comm.errmsg, "rank 0 sent a message of call #6 where this rank "
                                               "is in call #5");
    else if (rlen != 100)
        ASSERT_STR_CONTAINS(rs[1].comm.errmsg, "rank 0's message 2 of call #6 holds 100 bytes "
                                               "where this rank expects 200");
    else
        ASSERT_STR_CONTAINS(rs[1].comm.errmsg, "rank 0's message 2 of call #6 arrived where "
                                               "this rank expects its message 3");
    /* rank 1 told rank 0 why in an abort frame and closed everything: rank 0 learns it
     * when it sees the end of the stream, and reports rank 1's reason */
    post(&rs[0], false, 1, &r0, rb0, sizeof(rb0), 6, 0);
    ASSERT_EQ(wait_xfer(&r0, 10000), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(rs[0].comm.errmsg, "rank 1 (");
    ASSERT_STR_CONTAINS(rs[0].comm.errmsg, "failed or was aborted, first failure: ");
    ASSERT_STR_CONTAINS(rs[0].comm.errmsg, "rank 0");
    /* later use fails at once with the same status */
    ASSERT_EQ(post(&rs[1], true, 0, &s, sb, 1, 9, 0), COLL_REMOTE_ERROR);
    ASSERT_EQ(atomic_load(&s.status), COLL_REMOTE_ERROR);
    teardown(rs, 2);
}

TEST(mismatched_length_is_a_remote_error)
{
    mismatch(5, 2, 200);
}

TEST(mismatched_tag_is_a_remote_error)
{
    mismatch(5, 3, 100);
}

TEST(mismatched_op_is_a_remote_error)
{
    mismatch(4, 2, 100);
}

/* Lengths that split differently over 4 sockets: the receiver finds out from the first
 * piece's header, before any payload lands, and says what each side had. */
static void striped_mismatch(size_t slen, size_t rlen)
{
    struct rank rs[2];
    struct coll_xfer s, r;
    uint8_t *sb = calloc(1, slen + 1), *rb = malloc(rlen + 1);
    char want[128];

    ASSERT(sb && rb);
    memset(rb, 0xee, rlen + 1);
    test_nsocks = 4;
    setup(rs, 2, 10000, 0);
    exchange(rs, 0, 1, 100, 1, 0); /* the next message starts on socket 1 */
    ASSERT_EQ(post(&rs[0], true, 1, &s, sb, slen, 5, 2), COLL_SUCCESS);
    post(&rs[1], false, 0, &r, rb, rlen, 5, 2);
    ASSERT_EQ(wait_xfer(&r, 10000), COLL_REMOTE_ERROR);
    ASSERT_EQ(atomic_load(&rs[1].comm.failed), COLL_REMOTE_ERROR);
    snprintf(want, sizeof(want), "message 2 of call #6 holds %zu bytes where this rank expects "
             "%zu", slen, rlen);
    ASSERT_STR_CONTAINS(rs[1].comm.errmsg, want);
    /* nothing of the mismatched message reached the posted buffer */
    for (size_t i = 0; i <= rlen; i++)
        ASSERT_MSG(rb[i] == 0xee, "byte %zu of the receive buffer was written", i);
    teardown(rs, 2);
    free(sb), free(rb);
}

TEST(striped_lengths_that_disagree_are_a_remote_error)
{
    striped_mismatch(1 << 20, (1 << 20) + 64);
}

TEST(striped_send_to_a_small_receive_is_a_remote_error)
{
    striped_mismatch(1 << 20, 100);
}

TEST(small_send_to_a_striped_receive_is_a_remote_error)
{
    striped_mismatch(100, 1 << 20);
}

/* ---- peers that go away -------------------------------------------------------------- */

/* A peer that closes while nothing is pending is not an error until the link is used;
 * what it sent before closing can still be received. */
TEST(peer_closed_while_idle_fails_only_when_used)
{
    struct rank rs[2];
    struct coll_xfer s, r, r2, s2;
    static uint8_t sb[5000], rb[5000];

    setup(rs, 2, 10000, 0);
    fill(sb, sizeof(sb), 1, 0, 1);
    ASSERT_EQ(post(&rs[1], true, 0, &s, sb, sizeof(sb), 1, 1), COLL_SUCCESS);
    ASSERT_EQ(wait_xfer(&s, 10000), COLL_SUCCESS);
    rank_stop(&rs[1]);
    tp->fini(rs[1].comm.tp_ctx[TP_SLOT]); /* rank 1 is gone (its comm destroyed) */
    rs[1].comm.tp_ctx[TP_SLOT] = NULL;
    sleep_ms(200); /* rank 0 sees the end of stream meanwhile */
    ASSERT_EQ(atomic_load(&rs[0].comm.failed), COLL_SUCCESS);

    ASSERT_EQ(post(&rs[0], false, 1, &r, rb, sizeof(rb), 1, 1), COLL_SUCCESS);
    ASSERT_EQ(wait_xfer(&r, 10000), COLL_SUCCESS);
    ASSERT(check(rb, sizeof(rb), 1, 0, 1));
    ASSERT_EQ(atomic_load(&rs[0].comm.failed), COLL_SUCCESS);

    post(&rs[0], false, 1, &r2, rb, 10, 2, 0);
    ASSERT_EQ(wait_xfer(&r2, 10000), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(rs[0].comm.errmsg, "rank 1 (");
    ASSERT_STR_CONTAINS(rs[0].comm.errmsg, "closed the connection");
    ASSERT_EQ(post(&rs[0], true, 1, &s2, sb, 10, 3, 0), COLL_REMOTE_ERROR);
    rank_fini(&rs[0]);
    rank_stop(&rs[1]);
    close(rs[1].comm.epfd);
    free(rs[1].comm.peers);
    free(rs[1].comm.chans);
}

TEST(send_to_a_closed_peer_fails)
{
    struct rank rs[2];
    struct coll_xfer s;
    static uint8_t sb[1 << 20];

    setup(rs, 2, 10000, 0);
    rank_stop(&rs[1]);
    tp->fini(rs[1].comm.tp_ctx[TP_SLOT]);
    rs[1].comm.tp_ctx[TP_SLOT] = NULL;
    sleep_ms(100);
    post(&rs[0], true, 1, &s, sb, sizeof(sb), 1, 0);
    ASSERT_EQ(wait_xfer(&s, 10000), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(rs[0].comm.errmsg, "closed the connection");
    rank_fini(&rs[0]);
    close(rs[1].comm.epfd);
    free(rs[1].comm.peers);
    free(rs[1].comm.chans);
}

/* Shutdown (comm failure) completes every pending transfer and the peers see the end. */
TEST(shutdown_fails_pending_transfers_everywhere)
{
    struct rank rs[3];
    struct coll_xfer r01, r21, r10;
    static uint8_t b[3][1000];

    setup(rs, 3, 10000, 0);
    ASSERT_EQ(post(&rs[1], false, 0, &r01, b[0], 1000, 1, 0), COLL_SUCCESS);
    ASSERT_EQ(post(&rs[1], false, 2, &r21, b[1], 1000, 1, 0), COLL_SUCCESS);
    ASSERT_EQ(post(&rs[0], false, 1, &r10, b[2], 1000, 1, 0), COLL_SUCCESS);
    pthread_mutex_lock(&rs[1].comm.lock);
    coll__comm_fail(&rs[1].comm, COLL_TIMEOUT);
    pthread_mutex_unlock(&rs[1].comm.lock);
    ASSERT_EQ(atomic_load(&r01.status), COLL_TIMEOUT);
    ASSERT_EQ(atomic_load(&r21.status), COLL_TIMEOUT);
    ASSERT_EQ(wait_xfer(&r10, 10000), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(rs[0].comm.errmsg, "rank 1 (");
    {
        struct coll_chan *ch = NULL;
        pthread_mutex_lock(&rs[1].comm.lock);
        ASSERT_EQ(tp->connect(rs[1].comm.tp_ctx[TP_SLOT], 2, &ch), COLL_TIMEOUT);
        pthread_mutex_unlock(&rs[1].comm.lock);
    }
    teardown(rs, 3);
}

/* Exchange our record with a process over a socketpair (a minimal bootstrap). */
static void swap_records(int sock, const struct coll_peer_info *mine, struct coll_peer_info *theirs)
{
    ASSERT_EQ(write(sock, mine, sizeof(*mine)), (ssize_t)sizeof(*mine));
    ASSERT_EQ(recv(sock, theirs, sizeof(*theirs), MSG_WAITALL), (ssize_t)sizeof(*theirs));
}

/* Rank 1 is a process killed with SIGKILL while rank 0 waits for it (pending_len bytes). */
static void peer_process_killed(int nsocks, size_t pending_len)
{
    int sv[2];
    pid_t pid;

    test_nsocks = nsocks;
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        struct coll_peer_info table[2];
        struct rank r;
        struct coll_xfer x;
        uint8_t buf[64];

        close(sv[0]);
        rank_init(&r, 1, 2, 10000, 0, NULL);
        table[1] = r.comm.self;
        swap_records(sv[1], &table[1], &table[0]);
        rank_set_table(&r, table, 2);
        rank_start(&r);
        if (rank_connect(&r, 0, 10000) != COLL_SUCCESS)
            _exit(3);
        /* answer one ping, then hang until killed */
        post(&r, false, 0, &x, buf, sizeof(buf), 1, 0);
        if (wait_xfer(&x, 10000) != COLL_SUCCESS)
            _exit(4);
        post(&r, true, 0, &x, buf, sizeof(buf), 1, 1);
        if (wait_xfer(&x, 10000) != COLL_SUCCESS)
            _exit(5);
        for (;;)
            pause();
    }
    close(sv[1]);
    {
        struct coll_peer_info table[2];
        struct rank r;
        struct coll_xfer s, rx, pending;
        uint8_t buf[64] = "ping", rbuf[64], *big = malloc(pending_len);
        int status;

        rank_init(&r, 0, 2, 10000, 0, NULL);
        table[0] = r.comm.self;
        swap_records(sv[0], &table[0], &table[1]);
        rank_set_table(&r, table, 2);
        rank_start(&r);
        ASSERT_EQ(rank_connect(&r, 1, 10000), COLL_SUCCESS);
        ASSERT_EQ(post(&r, true, 1, &s, buf, sizeof(buf), 1, 0), COLL_SUCCESS);
        ASSERT_EQ(post(&r, false, 1, &rx, rbuf, sizeof(rbuf), 1, 1), COLL_SUCCESS);
        ASSERT_EQ(wait_xfer(&rx, 10000), COLL_SUCCESS);
        ASSERT(!memcmp(rbuf, "ping", 5));
        ASSERT(big);
        ASSERT_EQ(post(&r, false, 1, &pending, big, pending_len, 2, 0), COLL_SUCCESS);
        kill(pid, SIGKILL);
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT(WIFSIGNALED(status));
        ASSERT_EQ(wait_xfer(&pending, 10000), COLL_REMOTE_ERROR);
        ASSERT_EQ(atomic_load(&r.comm.failed), COLL_REMOTE_ERROR);
        ASSERT_STR_CONTAINS(r.comm.errmsg, "rank 1 (");
        ASSERT_STR_CONTAINS(r.comm.errmsg, "closed the connection");
        rank_fini(&r);
        free(big);
    }
}

TEST(peer_process_killed_is_a_remote_error)
{
    peer_process_killed(1, 4096);
}

TEST(peer_process_killed_during_a_striped_receive_is_a_remote_error)
{
    peer_process_killed(4, 4 << 20);
}

TEST(connect_to_a_dead_listener_is_a_remote_error)
{
    struct rank rs[2];
    struct coll_peer_info table[2];

    for (int i = 0; i < 2; i++)
        rank_init(&rs[i], i, 2, 10000, 0, NULL);
    table[0] = rs[0].comm.self;
    table[1] = rs[1].comm.self;
    rank_set_table(&rs[0], table, 2);
    tp->fini(rs[1].comm.tp_ctx[TP_SLOT]); /* rank 1's listener is gone: connection refused */
    rs[1].comm.tp_ctx[TP_SLOT] = NULL;
    rank_start(&rs[0]);
    ASSERT_EQ(rank_connect(&rs[0], 1, 10000), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(rs[0].comm.errmsg, "connect to rank 1 (");
    ASSERT_EQ(atomic_load(&rs[0].comm.failed), COLL_REMOTE_ERROR);
    rank_fini(&rs[0]);
    close(rs[1].comm.epfd);
    free(rs[1].comm.chans);
}

/* ---- strangers on the data listener -------------------------------------------------- */

static int dial(const struct rank *r)
{
    struct sockaddr_storage ss;
    int fd;

    memcpy(&ss, r->comm.self.addr, r->comm.self.addr_len);
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT(fd >= 0);
    ASSERT_EQ(connect(fd, (struct sockaddr *)&ss, r->comm.self.addr_len), 0);
    return fd;
}

/* Dial, read the nonce, send a handshake answer made with this secret and these fields
 * (socket index of nsocks). */
static int stranger_answer_sock(const struct rank *r, const uint8_t *secret, uint32_t magic,
                                uint64_t comm_id, int32_t from, int32_t to, uint16_t index,
                                uint16_t nsocks)
{
    uint8_t nonce[16], ans[56], m[9 + 16 + 20];
    int fd = dial(r);

    ASSERT_EQ(recv(fd, nonce, sizeof(nonce), MSG_WAITALL), 16);
    memcpy(ans, &magic, 4); /* the tests run little-endian, like the wire */
    memcpy(ans + 4, &comm_id, 8);
    memcpy(ans + 12, &from, 4);
    memcpy(ans + 16, &to, 4);
    memcpy(ans + 20, &index, 2);
    memcpy(ans + 22, &nsocks, 2);
    memcpy(m, "coll-data", 9);
    memcpy(m + 9, nonce, 16);
    memcpy(m + 25, ans + 4, 20);
    coll__hmac_sha256(secret, COLL_SECRET_BYTES, m, sizeof(m), ans + 24);
    ASSERT_EQ(send(fd, ans, sizeof(ans), MSG_NOSIGNAL), (ssize_t)sizeof(ans));
    return fd;
}

static int stranger_answer(const struct rank *r, const uint8_t *secret, uint32_t magic,
                           uint64_t comm_id, int32_t from, int32_t to)
{
    return stranger_answer_sock(r, secret, magic, comm_id, from, to, 0, 1);
}

static bool closed_by_peer(int fd, int ms)
{
    char buf[256];
    for (int waited = 0; waited < ms; waited += 10) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10) > 0) {
            ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN))
                return true;
        }
    }
    return false;
}

#define HS_MAGIC 0x32534843u

TEST(strangers_on_the_data_listener_are_dropped)
{
    static const uint8_t wrong[COLL_SECRET_BYTES] = "not-the-secret!";
    struct rank rs[3];
    int fds[16], nf = 0, idle, early;
    uint8_t junk[56];

    /* rank 2 drops a handshake after 300 ms of silence */
    for (int i = 0; i < 3; i++)
        rank_init(&rs[i], i, 3, i == 2 ? 300 : 10000, 0, NULL);
    publish(rs, 3);
    for (int i = 0; i < 3; i++)
        rank_start(&rs[i]);
    idle = dial(&rs[2]);  /* says nothing */
    early = dial(&rs[2]); /* leaves at once */
    close(early);
    fds[nf] = dial(&rs[2]); /* junk of the answer's size */
    ASSERT_EQ(recv(fds[nf], junk, 16, MSG_WAITALL), 16);
    memset(junk, 0x5a, sizeof(junk));
    ASSERT_EQ(send(fds[nf++], junk, sizeof(junk), MSG_NOSIGNAL), (ssize_t)sizeof(junk));
    fds[nf++] = stranger_answer(&rs[2], wrong, HS_MAGIC, test_comm_id, 0, 2); /* bad MAC */
    fds[nf++] = stranger_answer(&rs[2], test_secret, HS_MAGIC, test_comm_id + 1, 0, 2);
    fds[nf++] = stranger_answer(&rs[2], test_secret, HS_MAGIC, test_comm_id, 0, 1); /* not me */
    fds[nf++] = stranger_answer(&rs[2], test_secret, HS_MAGIC, test_comm_id, 2, 2); /* self */
    fds[nf++] = stranger_answer(&rs[2], test_secret, HS_MAGIC, test_comm_id, 7, 2); /* range */

    connect_all(rs, 3);
    /* a well-formed duplicate of the real rank 0 after it connected */
    fds[nf++] = stranger_answer(&rs[2], test_secret, HS_MAGIC, test_comm_id, 0, 2);
    /* signed, but socket indices no link can have, or a second link of another size */
    fds[nf++] = stranger_answer_sock(&rs[2], test_secret, HS_MAGIC, test_comm_id, 0, 2, 1, 1);
    fds[nf++] = stranger_answer_sock(&rs[2], test_secret, HS_MAGIC, test_comm_id, 0, 2, 0, 0);
    fds[nf++] = stranger_answer_sock(&rs[2], test_secret, HS_MAGIC, test_comm_id, 0, 2, 0, 65);
    fds[nf++] = stranger_answer_sock(&rs[2], test_secret, HS_MAGIC, test_comm_id, 1, 2, 1, 2);
    for (int i = 0; i < nf; i++)
        ASSERT_MSG(closed_by_peer(fds[i], 10000), "stranger %d still connected", i);
    ASSERT(closed_by_peer(idle, 10000));

    /* traffic is untouched */
    for (size_t i = 0; i < COLL_ARRAY_SIZE(sizes) - 1; i++) {
        exchange(rs, 0, 2, sizes[i], i, 0);
        exchange(rs, 1, 2, sizes[i], i, 1);
    }
    pthread_mutex_lock(&rs[2].comm.lock);
    ASSERT_EQ(coll__tcp_rejected(rs[2].comm.tp_ctx[TP_SLOT]), (uint64_t)nf + 2);
    pthread_mutex_unlock(&rs[2].comm.lock);
    ASSERT_EQ(coll__tcp_rejected(rs[0].comm.tp_ctx[TP_SLOT]), 0);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(atomic_load(&rs[i].comm.failed), COLL_SUCCESS);
    for (int i = 0; i < nf; i++)
        close(fds[i]);
    close(idle);
    teardown(rs, 3);
}

/* Rank 1 of 2 on its own, the test playing rank 0 over raw sockets (rank 1 never dials rank
 * 0: the address in its table does not matter). */
static void lone_rank1(struct rank *r)
{
    struct coll_peer_info table[2];

    rank_init(r, 1, 2, 10000, 0, NULL);
    table[0] = r->comm.self;
    table[0].rank = 0;
    table[1] = r->comm.self;
    rank_set_table(r, table, 2);
    rank_start(r);
}

/* tcp.c's frame header: 40 bytes, then the call's 16-byte signature (zero here: the test's
 * transfers carry none, so the receiver checks the op number's hash as before). */
#define HDR 64 /* TCP_HDR_BYTES: 40 + the 24-byte signature */

/* A frame header from rank 0 of the test's comm, laid out as tcp.c's (little-endian). */
static void frame_header(uint8_t *hdr, uint32_t magic, uint16_t type, uint16_t piece,
                         uint64_t seq, uint64_t len)
{
    uint32_t tag = 0;
    int32_t src = 0;
    uint64_t comm_id = test_comm_id;

    memcpy(hdr, &magic, 4);
    memcpy(hdr + 4, &type, 2);
    memcpy(hdr + 6, &piece, 2);
    memcpy(hdr + 8, &tag, 4);
    memcpy(hdr + 12, &src, 4);
    memcpy(hdr + 16, &comm_id, 8);
    memcpy(hdr + 24, &seq, 8);
    memcpy(hdr + 32, &len, 8);
    memset(hdr + 40, 0, HDR - 40);
}

/* The test plays rank 0 itself over raw sockets: a correct handshake for a link of two
 * sockets, then one frame built by hand on socket 0 (where rank 1 expects the first message).
 * The receiver must refuse it from the header alone, before any payload byte lands. */
static void forged_frame(uint32_t magic, uint16_t piece, uint64_t len, const char *why)
{
    struct rank r;
    struct coll_xfer x;
    uint8_t hdr[HDR], payload[100], rb[101];
    int fd[2];

    lone_rank1(&r);
    for (int i = 0; i < 2; i++)
        fd[i] = stranger_answer_sock(&r, test_secret, HS_MAGIC, test_comm_id, 0, 1, (uint16_t)i, 2);
    ASSERT_EQ(rank_connect(&r, 0, 10000), COLL_SUCCESS);
    frame_header(hdr, magic, 1, piece, 1, len);
    memset(payload, 0x11, sizeof(payload));
    ASSERT_EQ(send(fd[0], hdr, sizeof(hdr), MSG_NOSIGNAL), HDR);
    ASSERT_EQ(send(fd[0], payload, sizeof(payload), MSG_NOSIGNAL), 100);
    sleep_ms(20);
    memset(rb, 0xee, sizeof(rb));
    post(&r, false, 0, &x, rb, 100, 1, 0);
    ASSERT_EQ(wait_xfer(&x, 10000), COLL_REMOTE_ERROR);
    ASSERT_EQ(atomic_load(&r.comm.failed), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(r.comm.errmsg, why);
    for (size_t i = 0; i < sizeof(rb); i++)
        ASSERT_MSG(rb[i] == 0xee, "byte %zu of the receive buffer was written", i);
    ASSERT(closed_by_peer(fd[0], 10000));
    ASSERT(closed_by_peer(fd[1], 10000));
    close(fd[0]), close(fd[1]);
    rank_fini(&r);
}

/* The test plays rank 0, opens one socket of a link of two and leaves: rank 1's link can
 * never be complete, and asking for it says so instead of waiting for COLL_TIMEOUT. */
TEST(peer_leaving_a_half_built_link_is_a_remote_error)
{
    struct rank r;
    int fd;

    lone_rank1(&r);
    fd = stranger_answer_sock(&r, test_secret, HS_MAGIC, test_comm_id, 0, 1, 1, 2);
    sleep_ms(50);
    ASSERT_EQ(atomic_load(&r.comm.failed), COLL_SUCCESS); /* half a link is no error yet */
    close(fd);
    ASSERT_EQ(rank_connect(&r, 0, 10000), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(r.comm.errmsg, "rank 0 (");
    ASSERT_STR_CONTAINS(r.comm.errmsg, "closed the connection");
    rank_fini(&r);
}

#define FRAME_MAGIC 0x31464443u

TEST(forged_frame_with_a_bad_magic_is_refused)
{
    forged_frame(0xdeadbeefu, 0, 100, "sent a malformed frame header");
}

TEST(forged_frame_for_the_wrong_piece_is_refused)
{
    forged_frame(FRAME_MAGIC, 1, 100, "sent piece 1 of a message on socket 0, expected piece 0");
}

TEST(forged_frame_with_a_huge_length_is_refused)
{
    forged_frame(FRAME_MAGIC, 0, 1ull << 62, "holds 4611686018427387904 bytes");
}

/* The rank that fails first sends its reason to every peer in an abort frame: the peers fail
 * at once, with nothing of theirs pending on the link, and report that reason. */
TEST(a_failing_rank_tells_its_peers_why)
{
    struct rank rs[3];
    uint64_t t0;

    setup(rs, 3, 10000, 0);
    pthread_mutex_lock(&rs[1].comm.lock);
    coll__transport_fail(&rs[1].comm.net, COLL_TIMEOUT, "the cause, told to its peers");
    pthread_mutex_unlock(&rs[1].comm.lock);
    t0 = now_ms();
    while ((atomic_load(&rs[0].comm.failed) == COLL_SUCCESS ||
            atomic_load(&rs[2].comm.failed) == COLL_SUCCESS) &&
           now_ms() - t0 < 10000)
        sleep_ms(5);
    /* (rank 2 may hear it first from rank 0, which passes rank 1's reason on) */
    for (int i = 0; i < 3; i += 2) {
        ASSERT_EQ(atomic_load(&rs[i].comm.failed), COLL_REMOTE_ERROR);
        ASSERT_STR_CONTAINS(rs[i].comm.errmsg,
                            "failed or was aborted, first failure: rank 1: the cause, told to "
                            "its peers");
    }
    teardown(rs, 3);
}

/* An abort frame's text is the peer's: cut at a NUL, unprintable bytes replaced, and one
 * longer than an abort's 255 bytes is a malformed frame. The test plays rank 0 over raw
 * sockets, as forged_frame below. */
static void forged_abort(const char *text, size_t len, const char *want, const char *unwanted)
{
    struct rank r;
    struct coll_xfer x;
    uint8_t frame[HDR + 300], rb[16];
    int fd;

    ASSERT(len <= 300);
    lone_rank1(&r);
    fd = stranger_answer_sock(&r, test_secret, HS_MAGIC, test_comm_id, 0, 1, 0, 1);
    ASSERT_EQ(rank_connect(&r, 0, 10000), COLL_SUCCESS);
    frame_header(frame, 0x31464443u, 2, 0, 0, len);
    memcpy(frame + HDR, text, len);
    ASSERT_EQ(send(fd, frame, HDR + len, MSG_NOSIGNAL), (ssize_t)(HDR + len));
    post(&r, false, 0, &x, rb, sizeof(rb), 1, 0);
    ASSERT_EQ(wait_xfer(&x, 10000), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(r.comm.errmsg, want);
    ASSERT_MSG(!strstr(r.comm.errmsg, unwanted), "'%s' in '%s'", unwanted, r.comm.errmsg);
    ASSERT(closed_by_peer(fd, 10000));
    close(fd);
    rank_fini(&r);
}

TEST(abort_frame_text_is_cut_and_made_printable)
{
    static const char text[] = "bad\x01\x7f\xff cause\0hidden";
    char big[300];

    forged_abort(text, sizeof(text) - 1, "failed or was aborted, first failure: bad??? cause",
                 "hidden");
    memset(big, 'x', sizeof(big));
    forged_abort(big, sizeof(big), "sent a malformed frame header (magic 0x31464443, type 2",
                 "first failure");
}

/* ---- fault injection through coll__sys ----------------------------------------------- */

static atomic_int sys_calls;

/* At most 1000 bytes per sendmsg, a little apart so that the receiver sees them one by one
 * (frame headers split across reads), and every third call interrupted. Not "would block":
 * a real EAGAIN arms the EPOLLOUT edge the transport then waits for, a fake one would not
 * (exchange_with_small_socket_buffers has real ones). */
static ssize_t short_sendmsg(int fd, const struct msghdr *msg, int flags)
{
    struct iovec iov[64];
    struct msghdr m = *msg;
    size_t left = 1000;
    int n = 0;

    if (atomic_fetch_add(&sys_calls, 1) % 3 == 2) {
        errno = EINTR;
        return -1;
    }
    usleep(20);
    for (size_t i = 0; i < msg->msg_iovlen && left > 0 && n < 64; i++) {
        iov[n] = msg->msg_iov[i];
        if (iov[n].iov_len > left)
            iov[n].iov_len = left;
        left -= iov[n].iov_len;
        n++;
    }
    m.msg_iov = iov;
    m.msg_iovlen = (size_t)n;
    return sendmsg(fd, &m, flags);
}

/* Every fourth readv is interrupted (EINTR). Reads are not cut short here: the transport
 * takes a short read of a TCP socket to mean the kernel held no more (Linux's contract, which
 * its edge-triggered epoll relies on); the sender's 1000-byte dribble above makes the
 * receiver see genuinely short reads, headers split across reads included. */
static ssize_t eintr_readv(int fd, const struct iovec *iov, int cnt)
{
    if (atomic_fetch_add(&sys_calls, 1) % 4 == 1) {
        errno = EINTR;
        return -1;
    }
    return readv(fd, iov, cnt);
}

TEST(short_reads_and_writes_keep_messages_intact)
{
    enum { M = 40 };
    struct rank rs[2];
    static struct coll_xfer sx[M], rx[M];
    static uint8_t *sb[M], *rb[M];

    coll__sys.sendmsg = short_sendmsg;
    coll__sys.readv = eintr_readv;
    setup(rs, 2, 10000, 0);
    for (int k = 0; k < M; k++) {
        size_t len = k == 7 ? (1 << 20) + 3 : (size_t)k * 97;
        sb[k] = malloc(len + 1), rb[k] = malloc(len + 1);
        fill(sb[k], len, 0, 1, (uint32_t)k);
        ASSERT_EQ(post(&rs[0], true, 1, &sx[k], sb[k], len, 1, (uint32_t)k), COLL_SUCCESS);
        ASSERT_EQ(post(&rs[1], false, 0, &rx[k], rb[k], len, 1, (uint32_t)k), COLL_SUCCESS);
    }
    for (int k = 0; k < M; k++) {
        ASSERT_MSG(wait_xfer(&rx[k], 20000) == COLL_SUCCESS, "#%d: %s", k, rs[1].comm.errmsg);
        ASSERT_EQ(wait_xfer(&sx[k], 20000), COLL_SUCCESS);
        ASSERT(check(rb[k], rx[k].len, 0, 1, (uint32_t)k));
        free(sb[k]), free(rb[k]);
    }
    teardown(rs, 2);
    coll__sys = coll__sys_libc;
}

/* The stalled hook's frame (one iovec of a header, nothing queued) is cut after 10 bytes,
 * once, as a socket all but full takes only a part: the rest must follow, ahead of the next
 * message, rather than fail the link (a 64 MiB broadcast over a 1 Gbit/s link failed so). */
static atomic_int cut_stalled;

static ssize_t cutting_sendmsg(int fd, const struct msghdr *msg, int flags)
{
    if (msg->msg_iovlen == 1 && msg->msg_iov[0].iov_len == 40 + COLL_SIG_BYTES &&
        atomic_exchange(&cut_stalled, 0)) {
        struct iovec v = {msg->msg_iov[0].iov_base, 10};
        struct msghdr m = *msg;

        m.msg_iov = &v;
        return sendmsg(fd, &m, flags);
    }
    return sendmsg(fd, msg, flags);
}

TEST(a_stalled_frame_cut_short_keeps_the_stream_in_step)
{
    struct rank rs[2];
    struct coll_sig sig;

    memset(&sig, 0, sizeof(sig));
    coll__sys.sendmsg = cutting_sendmsg;
    setup(rs, 2, 10000, 0);
    exchange(rs, 0, 1, 1000, 1, 1); /* connected, nothing queued */
    atomic_store(&cut_stalled, 1);
    pthread_mutex_lock(&rs[0].comm.lock);
    tp->stalled(rs[0].comm.chans[1], 0, &sig);
    pthread_mutex_unlock(&rs[0].comm.lock);
    ASSERT_EQ(atomic_load(&cut_stalled), 0); /* the frame went out cut */
    ASSERT_MSG(atomic_load(&rs[0].comm.failed) == COLL_SUCCESS, "%s", rs[0].comm.errmsg);
    exchange(rs, 0, 1, (1 << 20) + 5, 2, 2);
    exchange(rs, 1, 0, 4096, 3, 3);
    ASSERT_MSG(atomic_load(&rs[0].comm.failed) == COLL_SUCCESS, "%s", rs[0].comm.errmsg);
    ASSERT_MSG(atomic_load(&rs[1].comm.failed) == COLL_SUCCESS, "%s", rs[1].comm.errmsg);
    teardown(rs, 2);
    coll__sys = coll__sys_libc;
}

static atomic_int fail_at;

/* The fail_at-th sendmsg fails with ECONNRESET. */
static ssize_t resetting_sendmsg(int fd, const struct msghdr *msg, int flags)
{
    if (atomic_fetch_add(&sys_calls, 1) + 1 == atomic_load(&fail_at)) {
        errno = ECONNRESET;
        return -1;
    }
    return sendmsg(fd, msg, flags);
}

TEST(send_failure_fails_both_sides)
{
    struct rank rs[2];
    struct coll_xfer s[3], r[3];
    static uint8_t sb[3][100], rb[3][100];

    setup(rs, 2, 10000, 0);
    atomic_store(&sys_calls, 0);
    atomic_store(&fail_at, 3);
    coll__sys.sendmsg = resetting_sendmsg;
    for (int k = 0; k < 3; k++)
        post(&rs[1], false, 0, &r[k], rb[k], 100, 1, (uint32_t)k);
    for (int k = 0; k < 3; k++)
        post(&rs[0], true, 1, &s[k], sb[k], 100, 1, (uint32_t)k);
    ASSERT_EQ(wait_xfer(&s[0], 10000), COLL_SUCCESS);
    ASSERT_EQ(wait_xfer(&s[1], 10000), COLL_SUCCESS);
    ASSERT_EQ(wait_xfer(&s[2], 10000), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(rs[0].comm.errmsg, "rank 1 (");
    ASSERT_STR_CONTAINS(rs[0].comm.errmsg, "Connection reset by peer");
    ASSERT_EQ(wait_xfer(&r[0], 10000), COLL_SUCCESS);
    ASSERT_EQ(wait_xfer(&r[1], 10000), COLL_SUCCESS);
    ASSERT_EQ(wait_xfer(&r[2], 10000), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(rs[1].comm.errmsg, "rank 0 (");
    teardown(rs, 2);
    coll__sys = coll__sys_libc;
}

/* ---- congestion control (COLL_TCP_CONGESTION) ---------------------------------------- */

static void system_congestion(char *buf, size_t len)
{
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_congestion_control", "r");

    buf[0] = '\0';
    if (f) {
        if (fgets(buf, (int)len, f))
            buf[strcspn(buf, "\n")] = '\0';
        fclose(f);
    }
}

/* Every socket of both ends of the 0-1 link runs `want` (NULL: the system's choice). */
static void expect_congestion(struct rank *rs, const char *want)
{
    char sys_cc[32];

    system_congestion(sys_cc, sizeof(sys_cc));
    if (!want)
        want = sys_cc; /* "" where /proc does not say: any name will do */
    for (int side = 0; side < 2; side++) {
        int fds[8], n = coll__tcp_link_fds(rs[side].comm.tp_ctx[TP_SLOT], 1 - side, fds, 8);
        ASSERT_EQ(n, test_nsocks);
        for (int i = 0; i < n; i++) {
            char got[32] = "";
            socklen_t len = sizeof(got);
            ASSERT_EQ(getsockopt(fds[i], IPPROTO_TCP, TCP_CONGESTION, got, &len), 0);
            ASSERT_MSG(!*want || strcmp(got, want) == 0, "rank %d socket %d runs %s, not %s",
                       side, i, got, want);
        }
    }
}

static void congestion_case(const char *env, const char *want)
{
    struct rank rs[2];

    if (env)
        setenv("COLL_TCP_CONGESTION", env, 1);
    else
        unsetenv("COLL_TCP_CONGESTION");
    test_nsocks = 2;
    setup(rs, 2, 10000, 0);
    exchange(rs, 0, 1, 1 << 20, 1, 0); /* both ends are up once data went both ways */
    expect_congestion(rs, want);
    exchange(rs, 1, 0, 100, 2, 0);
    teardown(rs, 2);
    test_nsocks = 1;
    unsetenv("COLL_TCP_CONGESTION");
}

/* Ranks of one host talk over a local address: auto gives them reno, not a pacing one. */
TEST(local_links_run_reno_by_default)
{
    congestion_case(NULL, "reno");
    congestion_case("auto", "reno");
}

TEST(congestion_control_system_keeps_the_kernels_choice)
{
    congestion_case("system", NULL);
}

/* A name the kernel does not know is a warning, and the links work with its choice. */
TEST(unknown_congestion_control_keeps_the_kernels_choice)
{
    congestion_case("nosuchcc", NULL);
}

TEST(overlong_congestion_control_name_is_invalid)
{
    struct coll_comm c;
    void *ctx = NULL;

    memset(&c, 0, sizeof(c));
    pthread_mutex_init(&c.errlock, NULL);
    c.nranks = 2;
    c.cfg.nsocks = 1;
    c.epfd = epoll_create1(EPOLL_CLOEXEC);
    ASSERT(c.epfd >= 0);
    coll__host_identity(&c.self);
    coll__comm_net_init(&c);
    setenv("COLL_TCP_CONGESTION", "a-name-longer-than-fifteen", 1);
    ASSERT_EQ(tp->init(&c.net, &ctx), COLL_INVALID_ARGUMENT);
    unsetenv("COLL_TCP_CONGESTION");
    ASSERT(ctx == NULL);
    ASSERT_STR_CONTAINS(c.errmsg, "COLL_TCP_CONGESTION");
    close(c.epfd);
    pthread_mutex_destroy(&c.errlock);
}

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
