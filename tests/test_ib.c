/*
 * test_ib.c - the ib transport over the verbs emulation (tests/fakeverbs, loaded through
 * COLL_IB_FAKE): each "rank" is a comm-like context with its own epoll fd, lock and driver
 * thread that runs the transport's progress, arm and callbacks under the lock (as the engine
 * does); ranks live in one process (each opens its own emulated HCA port) or in forked
 * processes where a peer must die for real. The second half checks the emulator itself: it
 * must reject what hardware rejects. Every case ends with the emulator's leak count at 0.
 */
#include "harness.h"

#include "core/bootstrap.h"
#include "transport/ib.h"
#include "transport/transport.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#define TP_UNDER_TEST (&coll__ib_transport)
#define TP_COMM_ID 0x1bc0117e57ull
#include "tp_ranks.h"

static void *fake_handle(void)
{
    const char *path = getenv("COLL_IB_FAKE");
    void *h;

    ASSERT_MSG(path && *path, "COLL_IB_FAKE is not set (meson sets it)");
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ASSERT_MSG(h, "%s", dlerror());
    return h;
}

static const struct coll_ib_ops *fake_ops(void)
{
    void *h = fake_handle();
    coll_ib_fake_entry_fn entry;

    *(void **)&entry = dlsym(h, COLL_IB_FAKE_SYMBOL);
    ASSERT(entry);
    return entry(); /* the handle stays open: the table lives in it */
}

static long live_objects(void)
{
    return fake_ops()->live_objects();
}

/* Init the transport on a fresh comm; returns its status (the message is in comm.errmsg). */
static coll_status_t rank_try_init(struct rank *r, int rank, int nranks, int64_t timeout_ms)
{
    struct coll_comm *c = &r->comm;

    rank_base(r, rank, nranks);
    ASSERT_EQ(coll__config_load(c, c->rank, &c->cfg), COLL_SUCCESS);
    c->cfg.timeout_ms = timeout_ms;
    return tp->init(&c->net, &c->tp_ctx[TP_SLOT]);
}

static void rank_init(struct rank *r, int rank, int nranks)
{
    ASSERT_MSG(rank_try_init(r, rank, nranks, 20000) == COLL_SUCCESS, "%s", r->comm.errmsg);
}

static void setup(struct rank *rs, int n)
{
    for (int i = 0; i < n; i++)
        rank_init(&rs[i], i, n);
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
    ASSERT_EQ(live_objects(), 0);
}

static const size_t sizes[] = {0, 1, 40, 127, 128, 129, 4096, 65536 + 7, (1 << 20) + 1};

/* ---- traffic ------------------------------------------------------------------------- */

TEST(exchange_all_sizes_both_directions)
{
    struct rank rs[2];

    setup(rs, 2);
    for (size_t i = 0; i < COLL_ARRAY_SIZE(sizes); i++)
        exchange(rs, 0, 1, sizes[i], 1, (uint32_t)i);
    teardown(rs, 2);
}

/* The chunks of one large buffer share the registrations of its 1 MiB windows. */
TEST(registration_cache_is_shared_by_chunks)
{
    struct rank rs[2];
    size_t len = 4 << 20, chunk = 256 << 10;
    uint8_t *src = aligned_alloc(1 << 20, len), *dst = aligned_alloc(1 << 20, len);
    struct coll_xfer xs[32];

    ASSERT(src && dst);
    fill(src, len, 0, 1, 5);
    memset(dst, 0, len);
    setup(rs, 2);
    for (uint32_t k = 0; k < len / chunk; k++) {
        ASSERT_EQ(post(&rs[1], false, 0, &xs[2 * k], dst + k * chunk, chunk, 1, k), COLL_SUCCESS);
        ASSERT_EQ(post(&rs[0], true, 1, &xs[2 * k + 1], src + k * chunk, chunk, 1, k),
                  COLL_SUCCESS);
    }
    for (size_t i = 0; i < 2 * (len / chunk); i++)
        ASSERT_EQ(wait_xfer(&xs[i], 20000), COLL_SUCCESS);
    ASSERT(check(dst, len, 0, 1, 5));
    ASSERT(coll__ib_cached_regs(rs[0].comm.tp_ctx[TP_SLOT]) <= 4);
    ASSERT(coll__ib_cached_regs(rs[1].comm.tp_ctx[TP_SLOT]) <= 4);
    teardown(rs, 2);
    free(src);
    free(dst);
}

TEST(exchange_over_roce_by_gid)
{
    struct rank rs[2];

    setenv("FAKEVERBS_LINK", "eth", 1);
    setup(rs, 2);
    exchange(rs, 0, 1, 5000, 1, 0);
    exchange(rs, 1, 0, 3, 1, 1);
    teardown(rs, 2);
}

/* More messages than credits, queued before the receiver posts: order and data hold. */
static void many_messages(int n, int count, size_t len)
{
    struct rank rs[MAX_RANKS];
    struct coll_xfer *xs = calloc((size_t)(n * n * count * 2), sizeof(*xs));
    uint8_t **bufs = calloc((size_t)(n * n * count * 2), sizeof(*bufs));
    int k = 0;

    ASSERT(xs && bufs);
    setup(rs, n);
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            for (int m = 0; a != b && m < count; m++) {
                bufs[k] = malloc(len);
                fill(bufs[k], len, a, b, (uint32_t)m);
                ASSERT_EQ(post(&rs[a], true, b, &xs[k], bufs[k], len, 7, (uint32_t)m),
                          COLL_SUCCESS);
                k++;
            }
    for (int b = 0; b < n; b++)
        for (int a = 0; a < n; a++)
            for (int m = 0; a != b && m < count; m++) {
                bufs[k] = calloc(1, len);
                ASSERT_EQ(post(&rs[b], false, a, &xs[k], bufs[k], len, 7, (uint32_t)m),
                          COLL_SUCCESS);
                k++;
            }
    for (int i = 0; i < k; i++)
        ASSERT_MSG(wait_xfer(&xs[i], 30000) == COLL_SUCCESS, "xfer %d: %d", i,
                   atomic_load(&xs[i].status));
    k /= 2;
    for (int b = 0, j = k; b < n; b++)
        for (int a = 0; a < n; a++)
            for (int m = 0; a != b && m < count; m++, j++)
                ASSERT_MSG(check(bufs[j], len, a, b, (uint32_t)m), "%d -> %d message %d", a, b,
                           m);
    for (int i = 0; i < 2 * k; i++)
        free(bufs[i]);
    free(bufs);
    free(xs);
    teardown(rs, n);
}

TEST(many_queued_messages_all_pairs_in_order)
{
    many_messages(3, 40, 1000);
}

TEST(many_small_inline_messages)
{
    many_messages(2, 100, 16);
}

/* ---- mismatches and bad input -------------------------------------------------------- */

static void mismatch(size_t slen, size_t rlen, uint32_t stag, uint32_t rtag, const char *want)
{
    struct rank rs[2];
    struct coll_xfer s, r;
    uint8_t *sbuf = calloc(1, slen + 1), *rbuf = malloc(rlen + 1);

    memset(rbuf, 0xab, rlen + 1);
    setup(rs, 2);
    ASSERT_EQ(post(&rs[1], false, 0, &r, rbuf, rlen, 3, rtag), COLL_SUCCESS);
    /* the credit may be there already: then the post itself fails */
    post(&rs[0], true, 1, &s, sbuf, slen, 3, stag);
    ASSERT_EQ(wait_xfer(&s, 10000), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(rs[0].comm.errmsg, want);
    /* the receiver learns from the sender's goodbye, and its buffer is untouched */
    ASSERT_EQ(wait_xfer(&r, 10000), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(rs[1].comm.errmsg, "rank 0 (");
    for (size_t i = 0; i <= rlen; i++)
        ASSERT_EQ(rbuf[i], 0xab);
    free(sbuf);
    free(rbuf);
    teardown(rs, 2);
}

TEST(mismatched_length_is_a_remote_error)
{
    mismatch(100, 200, 0, 0, "same collectives with the same counts");
}

TEST(mismatched_tag_is_a_remote_error)
{
    mismatch(64, 64, 1, 2, "tag");
}

TEST(bad_rkey_is_an_error_not_corruption)
{
    struct rank rs[2];
    struct coll_xfer s, r;
    size_t len = 10000;
    uint8_t *sbuf = malloc(len), *rbuf = malloc(len);
    void (*inject)(int);

    memset(sbuf, 0x11, len);
    memset(rbuf, 0xab, len);
    setup(rs, 2);
    *(void **)&inject = dlsym(fake_handle(), "coll_fakeverbs_inject_bad_rkey");
    ASSERT(inject);
    inject(1);
    ASSERT_EQ(post(&rs[1], false, 0, &r, rbuf, len, 1, 0), COLL_SUCCESS);
    ASSERT_EQ(post(&rs[0], true, 1, &s, sbuf, len, 1, 0), COLL_SUCCESS);
    ASSERT_EQ(wait_xfer(&s, 10000), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(rs[0].comm.errmsg, "remote access error");
    ASSERT_EQ(wait_xfer(&r, 10000), COLL_REMOTE_ERROR);
    for (size_t i = 0; i < len; i++)
        ASSERT_EQ(rbuf[i], 0xab);
    free(sbuf);
    free(rbuf);
    teardown(rs, 2);
}

TEST(shutdown_fails_pending_transfers_everywhere)
{
    struct rank rs[3];
    struct coll_xfer r1, r2;
    uint8_t b1[100], b2[100];

    setup(rs, 3);
    ASSERT_EQ(post(&rs[1], false, 0, &r1, b1, sizeof(b1), 1, 0), COLL_SUCCESS);
    ASSERT_EQ(post(&rs[2], false, 0, &r2, b2, sizeof(b2), 1, 0), COLL_SUCCESS);
    pthread_mutex_lock(&rs[0].comm.lock);
    coll__error(&rs[0].comm, COLL_REMOTE_ERROR, "aborted by the test");
    coll__comm_fail(&rs[0].comm, COLL_REMOTE_ERROR);
    pthread_mutex_unlock(&rs[0].comm.lock);
    ASSERT_EQ(wait_xfer(&r1, 10000), COLL_REMOTE_ERROR);
    ASSERT_EQ(wait_xfer(&r2, 10000), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(rs[1].comm.errmsg, "failed or aborted");
    teardown(rs, 3);
}

/* A forked peer dies; this rank waits on it (receive, or a large send) and must fail. */
static void peer_process_killed(bool send, size_t len)
{
    int sv[2];
    pid_t pid;
    struct coll_peer_info table[2];

    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        struct rank r;
        struct coll_xfer x;
        uint8_t buf[64];

        close(sv[0]);
        rank_init(&r, 1, 2);
        table[1] = r.comm.self;
        if (write(sv[1], &table[1], sizeof(table[1])) != sizeof(table[1]) ||
            read(sv[1], &table[0], sizeof(table[0])) != sizeof(table[0]))
            _exit(2);
        rank_set_table(&r, table, 2);
        rank_start(&r);
        if (rank_connect(&r, 0, 10000) != COLL_SUCCESS)
            _exit(3);
        if (post(&r, false, 0, &x, buf, sizeof(buf), 1, 0) != COLL_SUCCESS ||
            wait_xfer(&x, 10000) != COLL_SUCCESS)
            _exit(4);
        if (write(sv[1], "k", 1) != 1) /* ready to be killed */
            _exit(5);
        pause();
        _exit(0);
    } else {
        struct rank r;
        struct coll_xfer s, pending;
        uint8_t buf[64] = "ping", *big = calloc(1, len);
        int status;
        char c;

        close(sv[1]);
        rank_init(&r, 0, 2);
        table[0] = r.comm.self;
        ASSERT_EQ(write(sv[0], &table[0], sizeof(table[0])), (ssize_t)sizeof(table[0]));
        ASSERT_EQ(read(sv[0], &table[1], sizeof(table[1])), (ssize_t)sizeof(table[1]));
        rank_set_table(&r, table, 2);
        rank_start(&r);
        ASSERT_EQ(rank_connect(&r, 1, 10000), COLL_SUCCESS);
        ASSERT_EQ(post(&r, true, 1, &s, buf, sizeof(buf), 1, 0), COLL_SUCCESS);
        ASSERT_EQ(wait_xfer(&s, 10000), COLL_SUCCESS);
        ASSERT_EQ(read(sv[0], &c, 1), 1);
        ASSERT(big);
        if (!send)
            ASSERT_EQ(post(&r, false, 1, &pending, big, len, 2, 0), COLL_SUCCESS);
        kill(pid, SIGKILL);
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        if (send)
            ASSERT_EQ(post(&r, true, 1, &pending, big, len, 2, 0), COLL_SUCCESS);
        ASSERT_EQ(wait_xfer(&pending, 20000), COLL_REMOTE_ERROR);
        ASSERT_EQ(atomic_load(&r.comm.failed), COLL_REMOTE_ERROR);
        ASSERT_STR_CONTAINS(r.comm.errmsg, "rank 1 (");
        ASSERT_STR_CONTAINS(r.comm.errmsg, "retry counter exceeded");
        rank_fini(&r);
        ASSERT_EQ(live_objects(), 0);
        free(big);
    }
}

TEST(peer_process_killed_while_waiting_to_receive_is_a_remote_error)
{
    peer_process_killed(false, 4096);
}

TEST(peer_process_killed_before_a_large_send_is_a_remote_error)
{
    peer_process_killed(true, 4 << 20);
}

/* ---- discovery ----------------------------------------------------------------------- */

TEST(hca_spec_follows_nccl_syntax)
{
    ASSERT(coll__ib_hca_allowed("", "mlx5_0", 1));
    ASSERT(coll__ib_hca_allowed("mlx5", "mlx5_1", 2));
    ASSERT(coll__ib_hca_allowed("mlx5_0:1", "mlx5_0", 1));
    ASSERT(!coll__ib_hca_allowed("mlx5_0:1", "mlx5_0", 2));
    ASSERT(!coll__ib_hca_allowed("mlx5_0:1", "mlx5_1", 1));
    ASSERT(coll__ib_hca_allowed("mlx5_0,mlx5_1:2", "mlx5_1", 2));
    ASSERT(!coll__ib_hca_allowed("=mlx5_1", "mlx5_10", 1));
    ASSERT(coll__ib_hca_allowed("mlx5_1", "mlx5_10", 1));
    ASSERT(!coll__ib_hca_allowed("^mlx5_0", "mlx5_0", 1));
    ASSERT(coll__ib_hca_allowed("^mlx5_0", "mlx5_1", 1));
    ASSERT(!coll__ib_hca_allowed("^=mlx5_0:1", "mlx5_0", 1));
    ASSERT(coll__ib_hca_allowed("^=mlx5_0:1", "mlx5_0", 2));
}

TEST(discovery_takes_the_allowed_active_port)
{
    struct rank rs[2];

    setenv("FAKEVERBS_DEVICES", "mlx5_0,mlx5_1/2", 1);
    setenv("FAKEVERBS_DOWN", "mlx5_0:1,mlx5_1:1", 1);
    setenv("COLL_DEBUG", "NONE", 1);
    setup(rs, 2); /* only mlx5_1:2 is up */
    exchange(rs, 0, 1, 100, 1, 0);
    teardown(rs, 2);
    setenv("COLL_IB_HCA", "^mlx5_1", 1);
    ASSERT_EQ(rank_try_init(&rs[0], 0, 2, 1000), COLL_SUCCESS); /* not forced: declines */
    ASSERT(!tp->probe(rs[0].comm.tp_ctx[TP_SLOT], 1));
    rank_fini(&rs[0]);
    ASSERT_EQ(live_objects(), 0);
}

TEST(no_active_port_declines_and_forcing_it_fails)
{
    struct rank r;

    setenv("FAKEVERBS_DOWN", "fake_0:1", 1);
    ASSERT_EQ(rank_try_init(&r, 0, 2, 1000), COLL_SUCCESS);
    ASSERT(!tp->probe(r.comm.tp_ctx[TP_SLOT], 1));
    rank_fini(&r);
    setenv("COLL_TRANSPORT", "ib", 1);
    ASSERT_EQ(rank_try_init(&r, 0, 2, 1000), COLL_SYSTEM_ERROR);
    ASSERT_STR_CONTAINS(r.comm.errmsg, "no active port");
    r.comm.tp_ctx[TP_SLOT] = NULL;
    rank_fini(&r);
    ASSERT_EQ(live_objects(), 0);
}

/* ---- the emulator is strict ---------------------------------------------------------- */

struct raw {
    const struct coll_ib_ops *ops;
    struct ibv_device **list;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_port_attr pa;
};

static void raw_open(struct raw *r)
{
    struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
                                          .max_recv_sge = 1, .max_inline_data = 64}};
    int n;

    r->ops = fake_ops();
    r->list = r->ops->get_device_list(&n);
    ASSERT(r->list && n >= 1);
    r->ctx = r->ops->open_device(r->list[0]);
    ASSERT(r->ctx);
    ASSERT_EQ(r->ops->query_port(r->ctx, 1, &r->pa), 0);
    r->pd = r->ops->alloc_pd(r->ctx);
    r->cq = r->ops->create_cq(r->ctx, 16, NULL, NULL, 0);
    ASSERT(r->pd && r->cq);
    qa.send_cq = qa.recv_cq = r->cq;
    r->qp = r->ops->create_qp(r->pd, &qa);
    ASSERT(r->qp);
}

static void raw_close(struct raw *r)
{
    ASSERT_EQ(r->ops->dealloc_pd(r->pd), EBUSY); /* a QP still uses it */
    ASSERT_EQ(r->ops->destroy_cq(r->cq), EBUSY);
    ASSERT_EQ(r->ops->destroy_qp(r->qp), 0);
    ASSERT_EQ(r->ops->destroy_cq(r->cq), 0);
    ASSERT_EQ(r->ops->dealloc_pd(r->pd), 0);
    ASSERT_EQ(r->ops->close_device(r->ctx), 0);
    r->ops->free_device_list(r->list);
}

static int to_init(struct raw *r)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE};
    return r->ops->modify_qp(r->qp, &a,
                             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int to_rtr(struct raw *r, uint16_t dlid, uint32_t dqpn, int mask_drop)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
                            .dest_qp_num = dqpn, .max_dest_rd_atomic = 1, .min_rnr_timer = 12};
    a.ah_attr.dlid = dlid;
    a.ah_attr.port_num = 1;
    return r->ops->modify_qp(r->qp, &a,
                             (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) &
                                 ~mask_drop);
}

static int to_rts(struct raw *r, int timeout, int retry)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .timeout = (uint8_t)timeout,
                            .retry_cnt = (uint8_t)retry, .rnr_retry = 7, .max_rd_atomic = 1};
    return r->ops->modify_qp(r->qp, &a,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static struct ibv_wc wait_wc(struct raw *r)
{
    struct ibv_wc wc;
    uint64_t deadline = now_ms() + 10000;
    int n;

    while ((n = r->ops->poll_cq(r->cq, 1, &wc)) == 0 && now_ms() < deadline)
        usleep(200);
    ASSERT_EQ(n, 1);
    return wc;
}

TEST(emulator_enforces_the_qp_state_machine)
{
    struct raw a, b;
    uint8_t buf[64] = {0};
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_INLINE}, *bad;
    struct ibv_qp_attr at = {.qp_state = IBV_QPS_RTS};

    raw_open(&a);
    raw_open(&b);
    ASSERT_EQ(a.ops->post_send(a.qp, &wr, &bad), EINVAL);   /* RESET */
    ASSERT_EQ(a.ops->modify_qp(a.qp, &at, IBV_QP_STATE), EINVAL); /* RESET -> RTS */
    ASSERT_EQ(to_init(&a), 0);
    ASSERT_EQ(to_rtr(&a, b.pa.lid, b.qp->qp_num, IBV_QP_MIN_RNR_TIMER), EINVAL); /* missing */
    ASSERT_EQ(to_rtr(&a, 0, b.qp->qp_num, 0), EINVAL);                          /* no LID */
    ASSERT_EQ(to_rtr(&a, b.pa.lid, b.qp->qp_num, 0), 0);
    ASSERT_EQ(a.ops->post_send(a.qp, &wr, &bad), EINVAL);   /* RTR: receive only */
    ASSERT_EQ(to_rts(&a, 40, 7), EINVAL);                     /* timeout > 31 */
    ASSERT_EQ(to_rts(&a, 12, 1), 0);
    /* inline above max_inline_data */
    sge.length = 300;
    ASSERT_EQ(a.ops->post_send(a.qp, &wr, &bad), EINVAL);
    /* a non-inline SGE needs an lkey */
    sge.length = 8;
    wr.send_flags = 0;
    ASSERT_EQ(a.ops->post_send(a.qp, &wr, &bad), EINVAL);
    /* REMOTE_WRITE without LOCAL_WRITE is refused */
    ASSERT(!a.ops->reg_mr(a.pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE));
    raw_close(&a);
    raw_close(&b);
    ASSERT_EQ(live_objects(), 0);
}

TEST(emulator_write_errors_retry_and_flush)
{
    struct raw a, b;
    uint8_t src[256], dst[256];
    struct ibv_mr *smr, *dmr;
    struct ibv_sge sge;
    struct ibv_send_wr wr = {.num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED}, *bad;
    struct ibv_wc wc;

    memset(src, 0x5a, sizeof(src));
    memset(dst, 0, sizeof(dst));
    raw_open(&a);
    raw_open(&b);
    smr = a.ops->reg_mr(a.pd, src, sizeof(src), 0);
    dmr = b.ops->reg_mr(b.pd, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT(smr && dmr);
    ASSERT_EQ(to_init(&a), 0);
    ASSERT_EQ(to_init(&b), 0);
    ASSERT_EQ(to_rtr(&a, b.pa.lid, b.qp->qp_num, 0), 0);
    ASSERT_EQ(to_rtr(&b, a.pa.lid, a.qp->qp_num, 0), 0);
    ASSERT_EQ(to_rts(&a, 10, 2), 0);
    sge = (struct ibv_sge){.addr = (uintptr_t)src, .length = 128, .lkey = smr->lkey};
    wr.sg_list = &sge;
    /* a good write lands */
    wr.wr.rdma.remote_addr = (uintptr_t)dst;
    wr.wr.rdma.rkey = dmr->rkey;
    ASSERT_EQ(a.ops->post_send(a.qp, &wr, &bad), 0);
    wc = wait_wc(&a);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(dst[127], 0x5a);
    ASSERT_EQ(dst[128], 0);
    /* beyond the region: remote access error, nothing written, then everything flushes */
    wr.wr.rdma.remote_addr = (uintptr_t)dst + 200;
    ASSERT_EQ(a.ops->post_send(a.qp, &wr, &bad), 0);
    wr.wr.rdma.remote_addr = (uintptr_t)dst;
    ASSERT_EQ(a.ops->post_send(a.qp, &wr, &bad), 0);
    ASSERT_EQ(wait_wc(&a).status, IBV_WC_REM_ACCESS_ERR);
    ASSERT_EQ(wait_wc(&a).status, IBV_WC_WR_FLUSH_ERR);
    ASSERT_EQ(dst[200], 0);
    /* a peer QP that is gone: retry exceeded after (retry_cnt + 1) ACK timeouts */
    {
        struct ibv_qp_attr r = {.qp_state = IBV_QPS_RESET};
        ASSERT_EQ(a.ops->modify_qp(a.qp, &r, IBV_QP_STATE), 0);
        ASSERT_EQ(to_init(&a), 0);
        ASSERT_EQ(to_rtr(&a, b.pa.lid, 0xabcde, 0), 0);
        ASSERT_EQ(to_rts(&a, 10, 2), 0);
        wr.wr.rdma.rkey = dmr->rkey;
        ASSERT_EQ(a.ops->post_send(a.qp, &wr, &bad), 0);
        ASSERT_EQ(wait_wc(&a).status, IBV_WC_RETRY_EXC_ERR);
    }
    ASSERT_EQ(a.ops->dereg_mr(smr), 0);
    ASSERT_EQ(b.ops->dereg_mr(dmr), 0);
    raw_close(&a);
    raw_close(&b);
    ASSERT_EQ(live_objects(), 0);
}

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
