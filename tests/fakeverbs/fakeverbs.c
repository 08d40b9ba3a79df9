/*
 * fakeverbs.c - a userspace emulation of the verbs semantics the ib transport relies on,
 * shared between processes, for testing without RDMA hardware. Built as a shared object; the
 * transport loads it when COLL_IB_FAKE names it and takes its table (coll_fakeverbs_ops).
 *
 * Divisions: 1 configuration and devices, 2 objects and the leak count, 3 the wire between
 * emulators, 4 completions, 5 the responder thread, 6 the requester thread, 7 the QP state
 * machine, 8 the verbs table.
 *
 * Model. Every opened context is one HCA port on a "fabric" that is this host's abstract
 * unix-socket namespace: it binds "\0coll-fakeverbs-<lid>" with a LID nobody else holds, and
 * its GIDs carry that LID, so an address handle (LID for IB, GID for RoCE) names a peer. Each
 * context runs two threads: a responder that serves the requests of other contexts (checks
 * them against its QPs and MRs, copies into memory, posts receive completions) and a
 * requester that executes the send queues of its QPs one work request at a time per QP, in
 * order, waiting for the responder's answer: ACK, an RNR NAK (retried after a short time, for
 * ever with rnr_retry 7), a remote access or invalid request NAK, or no answer at all (dead
 * peer, a QP that does not exist or is not ready), which is retried every local ACK timeout
 * (4.096 us << timeout) until retry_cnt is spent: IBV_WC_RETRY_EXC_ERR.
 *
 * Strictness: what hardware rejects is rejected. Missing or extra attributes on a QP
 * transition, values out of range, a path MTU above the port's, an address without GRH on
 * RoCE, posting sends before RTS, inline data above max_inline_data, an lkey outside its MR
 * or from another PD, REMOTE_WRITE without LOCAL_WRITE, queue overflows (ENOMEM), CQ overrun
 * (poll fails), destroying a PD, CQ or channel still in use (EBUSY), or a CQ with unacked
 * events. A bad rkey, a range outside its MR or an MR without remote write is a remote access
 * error for the requester and moves the responder's QP to error. A QP in error completes
 * everything posted with IBV_WC_WR_FLUSH_ERR. Memory is touched with process_vm_readv/writev
 * on this process, so an address that went away is an error, never a crash.
 *
 * Not emulated: RDMA read, atomics, SRQ, memory windows, multicast, alternate paths, async
 * events; UD never loses a datagram here.
 *
 * Configuration (read at first use): FAKEVERBS_DEVICES "mlx5_0,mlx5_1/2" (names, "/ports"),
 * FAKEVERBS_DOWN "mlx5_1:1,..." ports that are down, FAKEVERBS_LINK "ib" or "eth" (RoCE).
 */
#include "transport/ib_ops.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define FV_API __attribute__((visibility("default")))

/* ---- 1 configuration and devices ----------------------------------------------------- */

#define FV_MAX_DEVICES 8
#define FV_MAX_PORTS 2
#define FV_MAX_INLINE 256
#define FV_MAX_WR 16384
#define FV_MAX_SGE 30
#define FV_MAX_CQE 65536
#define FV_GID_TBL_IB 1
#define FV_GID_TBL_ETH 4
#define FV_MAX_MSG (1u << 30)
#define FV_RNR_DELAY_NS 1000000ull /* 1 ms between RNR retries */

struct fv_device {
    struct ibv_device ibv; /* first: the public handle is this */
    int nports;
    bool down[FV_MAX_PORTS + 1];
};

static struct fv_device fv_devs[FV_MAX_DEVICES];
static int fv_ndevs;
static bool fv_eth;
static pthread_once_t fv_once = PTHREAD_ONCE_INIT;
static atomic_long fv_live;
static atomic_uint fv_lid_seq;
static atomic_int fv_bad_rkeys; /* fault injection: the next n RDMA writes get a wrong rkey */

static void fv_config(void)
{
    const char *devs = getenv("FAKEVERBS_DEVICES"), *down = getenv("FAKEVERBS_DOWN");
    const char *link = getenv("FAKEVERBS_LINK");
    char buf[512], *save = NULL;

    fv_eth = link && !strcmp(link, "eth");
    snprintf(buf, sizeof(buf), "%s", devs && *devs ? devs : "fake_0");
    for (char *t = strtok_r(buf, ",", &save); t && fv_ndevs < FV_MAX_DEVICES;
         t = strtok_r(NULL, ",", &save)) {
        struct fv_device *d = &fv_devs[fv_ndevs++];
        char *slash = strchr(t, '/');

        d->nports = 1;
        if (slash) {
            *slash = '\0';
            d->nports = atoi(slash + 1) == 2 ? 2 : 1;
        }
        snprintf(d->ibv.name, sizeof(d->ibv.name), "%s", t);
        snprintf(d->ibv.dev_name, sizeof(d->ibv.dev_name), "uverbs%d", fv_ndevs - 1);
        d->ibv.node_type = IBV_NODE_CA;
        d->ibv.transport_type = IBV_TRANSPORT_IB;
    }
    if (down && *down) {
        snprintf(buf, sizeof(buf), "%s", down);
        save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char *colon = strchr(t, ':');
            int port = colon ? atoi(colon + 1) : 1;
            if (colon)
                *colon = '\0';
            for (int i = 0; i < fv_ndevs && i < FV_MAX_DEVICES; i++)
                if (!strcmp(fv_devs[i].ibv.name, t) && port >= 1 && port <= FV_MAX_PORTS)
                    fv_devs[i].down[port] = true;
        }
    }
    atomic_store(&fv_lid_seq, (unsigned)getpid() * 7u);
}

/* ---- 2 objects and the leak count ---------------------------------------------------- */

struct fv_ctx;

struct fv_pd {
    struct ibv_pd ibv;
    int nusers; /* MRs, QPs, AHs */
};

struct fv_mr {
    struct ibv_mr ibv;
    int access;
    struct fv_mr *next;
};

struct fv_channel {
    struct ibv_comp_channel ibv;
    int ncqs;
    struct fv_cq *events[64]; /* CQs with an event not yet read, FIFO */
    int ev_head, ev_n;
};

struct fv_cq {
    struct ibv_cq ibv;
    struct ibv_wc *wc; /* ring of cap entries */
    int cap, head, n;
    bool armed, overrun;
    unsigned events, acked;
    int nqps;
};

struct fv_swr {
    struct ibv_send_wr wr;       /* copy; sg_list points at sge */
    struct ibv_sge sge[FV_MAX_SGE];
    uint8_t *inl;                /* inline payload, copied at post time */
    uint32_t inl_len;
    int retries_left, rnr_left;
    uint64_t retry_at;           /* 0: ready now */
};

struct fv_rwr {
    uint64_t wr_id;
    int nsge;
    struct ibv_sge sge[FV_MAX_SGE];
};

struct fv_qp {
    struct ibv_qp ibv;
    struct fv_ctx *ctx;
    struct ibv_qp_cap cap;
    bool sig_all;
    int port;
    int access;          /* qp_access_flags */
    uint32_t qkey;
    uint16_t dst_lid;    /* RC: the connected peer */
    uint32_t dst_qpn;
    uint8_t timeout, retry_cnt, rnr_retry;
    struct fv_swr *sq;   /* ring [cap.max_send_wr] */
    uint32_t sq_head, sq_n;
    bool sq_busy;        /* the head is on the wire */
    struct fv_rwr *rq;   /* ring [cap.max_recv_wr] */
    uint32_t rq_head, rq_n;
    struct fv_qp *next;
};

struct fv_ah {
    struct ibv_ah ibv;
    uint16_t dst_lid;
};

struct fv_conn {
    uint16_t lid;
    int fd;
    struct fv_conn *next;
};

struct fv_ctx {
    struct ibv_context ibv;
    struct fv_device *dev;
    uint16_t lid;
    pthread_mutex_t lock;
    int listen_fd, epfd, wake_fd;
    pthread_t resp_thread, req_thread;
    pthread_cond_t req_cond;
    bool stop;
    atomic_bool stop_a;    /* stop, for the requester's unlocked waits */
    uint32_t next_qpn, next_key;
    struct fv_qp *qps;
    struct fv_mr *mrs;
    struct fv_conn *conns; /* requester's connections, by LID */
    int nobjs;             /* PDs, CQs, channels on this context */
};

static void *fv_new(size_t n)
{
    void *p = calloc(1, n);
    if (p)
        atomic_fetch_add(&fv_live, 1);
    return p;
}

static void fv_free(void *p)
{
    if (p) {
        atomic_fetch_sub(&fv_live, 1);
        free(p);
    }
}

static struct fv_ctx *ctx_of(struct ibv_context *c)
{
    return (struct fv_ctx *)c;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct fv_qp *qp_find(struct fv_ctx *ctx, uint32_t qpn)
{
    for (struct fv_qp *q = ctx->qps; q; q = q->next)
        if (q->ibv.qp_num == qpn)
            return q;
    return NULL;
}

static struct fv_mr *mr_find(struct fv_ctx *ctx, uint32_t key)
{
    for (struct fv_mr *m = ctx->mrs; m; m = m->next)
        if (m->ibv.lkey == key)
            return m;
    return NULL;
}

/* Copies that fail on unmapped memory instead of faulting (the emulated DMA engine). */
static bool mem_write(uint64_t dst, const void *src, size_t n)
{
    struct iovec l = {(void *)src, n}, r = {(void *)(uintptr_t)dst, n};
    return n == 0 || process_vm_writev(getpid(), &l, 1, &r, 1, 0) == (ssize_t)n;
}

static bool mem_read(void *dst, uint64_t src, size_t n)
{
    struct iovec l = {dst, n}, r = {(void *)(uintptr_t)src, n};
    return n == 0 || process_vm_readv(getpid(), &l, 1, &r, 1, 0) == (ssize_t)n;
}

/* ---- 3 the wire between emulators ---------------------------------------------------- */

enum { FV_OP_SEND = 1, FV_OP_WRITE = 2 };
enum { FV_ACK = 0, FV_NAK_RNR = 1, FV_NAK_ACCESS = 2, FV_NAK_INVALID = 3, FV_DROP = 4 };
#define FV_MAGIC 0x56464b46u

struct fv_req {
    uint32_t magic;
    uint8_t op, has_imm, ud, pad;
    uint16_t src_lid, pad2;
    uint32_t src_qpn, dst_qpn, qkey, rkey, len, imm;
    uint64_t raddr;
};

static int io_all(int fd, void *buf, size_t n, bool wr)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = wr ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static void lid_sockaddr(uint16_t lid, struct sockaddr_un *sa, socklen_t *len)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    /* abstract namespace: vanishes with the process, no files to clean up */
    int n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "coll-fakeverbs-%u", lid);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* ---- 4 completions ------------------------------------------------------------------- */

/* Lock held. */
static void cq_push(struct fv_cq *cq, const struct ibv_wc *wc)
{
    if (cq->n == cq->cap) {
        cq->overrun = true;
        return;
    }
    cq->wc[(cq->head + cq->n) % cq->cap] = *wc;
    cq->n++;
    if (cq->armed && cq->ibv.channel) {
        struct fv_channel *ch = (struct fv_channel *)cq->ibv.channel;
        uint64_t one = 1;
        cq->armed = false;
        if (ch->ev_n < (int)(sizeof(ch->events) / sizeof(ch->events[0]))) {
            ch->events[(ch->ev_head + ch->ev_n) % 64] = cq;
            ch->ev_n++;
            if (write(ch->ibv.fd, &one, sizeof(one)) < 0) {
                /* the counter cannot overflow at 64 events */
            }
        }
    }
}

static void send_complete(struct fv_qp *qp, struct fv_swr *s, enum ibv_wc_status st)
{
    struct ibv_wc wc = {.wr_id = s->wr.wr_id, .status = st, .qp_num = qp->ibv.qp_num};

    switch (s->wr.opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        wc.opcode = IBV_WC_RDMA_WRITE;
        break;
    default:
        wc.opcode = IBV_WC_SEND;
    }
    if (st != IBV_WC_SUCCESS || qp->sig_all || (s->wr.send_flags & IBV_SEND_SIGNALED))
        cq_push((struct fv_cq *)qp->ibv.send_cq, &wc);
    free(s->inl);
    s->inl = NULL;
}

/* Move qp to error: everything posted completes with a flush error, in order; a WR on the
 * wire is flushed when its answer comes. Lock held. */
static void qp_to_error(struct fv_qp *qp)
{
    uint32_t keep = qp->sq_busy ? 1 : 0;

    qp->ibv.state = IBV_QPS_ERR;
    for (uint32_t i = keep; i < qp->sq_n; i++)
        send_complete(qp, &qp->sq[(qp->sq_head + i) % qp->cap.max_send_wr], IBV_WC_WR_FLUSH_ERR);
    qp->sq_n = keep;
    while (qp->rq_n > 0) {
        struct fv_rwr *r = &qp->rq[qp->rq_head];
        struct ibv_wc wc = {.wr_id = r->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
                            .opcode = IBV_WC_RECV, .qp_num = qp->ibv.qp_num};
        cq_push((struct fv_cq *)qp->ibv.recv_cq, &wc);
        qp->rq_head = (qp->rq_head + 1) % qp->cap.max_recv_wr;
        qp->rq_n--;
    }
}

/* ---- 5 the responder thread ---------------------------------------------------------- */

/* Scatter n bytes into a receive's SGEs; false if they do not fit or memory is gone. */
static bool scatter(struct fv_ctx *ctx, struct fv_qp *qp, struct fv_rwr *r, const uint8_t *p,
                    size_t n, size_t skip_zero_prefix)
{
    size_t room = 0;
    for (int i = 0; i < r->nsge; i++)
        room += r->sge[i].length;
    if (room < n + skip_zero_prefix)
        return false;
    for (int i = 0; i < r->nsge && (n > 0 || skip_zero_prefix > 0); i++) {
        struct fv_mr *m = mr_find(ctx, r->sge[i].lkey);
        size_t off = 0, len = r->sge[i].length;
        if (!m || m->ibv.pd != qp->ibv.pd)
            return false;
        if (skip_zero_prefix > 0) { /* UD: the GRH area */
            size_t z = skip_zero_prefix < len ? skip_zero_prefix : len;
            uint8_t zeros[40] = {0};
            if (!mem_write(r->sge[i].addr, zeros, z < sizeof(zeros) ? z : sizeof(zeros)))
                return false;
            skip_zero_prefix -= z;
            off = z;
        }
        size_t c = n < len - off ? n : len - off;
        if (!mem_write(r->sge[i].addr + off, p, c))
            return false;
        p += c;
        n -= c;
    }
    return true;
}

/* Handle one request against this context's state. Lock held. */
static uint8_t respond(struct fv_ctx *ctx, const struct fv_req *h, const uint8_t *payload)
{
    struct fv_qp *qp = qp_find(ctx, h->dst_qpn);
    struct ibv_wc wc = {0};

    if (!qp || (qp->ibv.state != IBV_QPS_RTR && qp->ibv.state != IBV_QPS_RTS))
        return FV_DROP; /* hardware drops it; the requester times out */
    if (h->ud) {
        struct fv_rwr *r;
        if (qp->ibv.qp_type != IBV_QPT_UD || h->qkey != qp->qkey || h->op != FV_OP_SEND)
            return FV_DROP;
        if (qp->rq_n == 0)
            return FV_DROP; /* UD: no receive, no datagram */
        r = &qp->rq[qp->rq_head];
        wc = (struct ibv_wc){.wr_id = r->wr_id, .opcode = IBV_WC_RECV, .qp_num = qp->ibv.qp_num,
                             .src_qp = h->src_qpn, .slid = h->src_lid, .wc_flags = IBV_WC_GRH,
                             .byte_len = h->len + 40};
        if (h->has_imm) {
            wc.wc_flags |= IBV_WC_WITH_IMM;
            wc.imm_data = h->imm;
        }
        wc.status = scatter(ctx, qp, r, payload, h->len, 40) ? IBV_WC_SUCCESS : IBV_WC_LOC_LEN_ERR;
        qp->rq_head = (qp->rq_head + 1) % qp->cap.max_recv_wr;
        qp->rq_n--;
        cq_push((struct fv_cq *)qp->ibv.recv_cq, &wc);
        return FV_ACK;
    }
    if (qp->ibv.qp_type != IBV_QPT_RC || h->src_qpn != qp->dst_qpn || h->src_lid != qp->dst_lid)
        return FV_DROP; /* not from the QP this one is connected to */
    if (h->op == FV_OP_WRITE && h->len > 0) {
        struct fv_mr *m = mr_find(ctx, h->rkey);
        if (!m || m->ibv.rkey != h->rkey || m->ibv.pd != qp->ibv.pd ||
            !(m->access & IBV_ACCESS_REMOTE_WRITE) || !(qp->access & IBV_ACCESS_REMOTE_WRITE) ||
            h->raddr < (uint64_t)(uintptr_t)m->ibv.addr ||
            h->raddr + h->len > (uint64_t)(uintptr_t)m->ibv.addr + m->ibv.length ||
            h->raddr + h->len < h->raddr) {
            qp_to_error(qp);
            return FV_NAK_ACCESS;
        }
    }
    if ((h->op == FV_OP_SEND || h->has_imm) && qp->rq_n == 0)
        return FV_NAK_RNR;
    if (h->op == FV_OP_WRITE && h->len > 0 && !mem_write(h->raddr, payload, h->len)) {
        qp_to_error(qp);
        return FV_NAK_ACCESS;
    }
    if (h->op == FV_OP_SEND || h->has_imm) {
        struct fv_rwr *r = &qp->rq[qp->rq_head];
        wc = (struct ibv_wc){.wr_id = r->wr_id, .qp_num = qp->ibv.qp_num, .src_qp = h->src_qpn,
                             .slid = h->src_lid, .byte_len = h->len,
                             .opcode = h->op == FV_OP_SEND ? IBV_WC_RECV
                                                           : IBV_WC_RECV_RDMA_WITH_IMM};
        if (h->has_imm) {
            wc.wc_flags |= IBV_WC_WITH_IMM;
            wc.imm_data = h->imm;
        }
        if (h->op == FV_OP_SEND && !scatter(ctx, qp, r, payload, h->len, 0)) {
            qp->rq_head = (qp->rq_head + 1) % qp->cap.max_recv_wr;
            qp->rq_n--;
            wc.status = IBV_WC_LOC_LEN_ERR;
            cq_push((struct fv_cq *)qp->ibv.recv_cq, &wc);
            qp_to_error(qp);
            return FV_NAK_INVALID;
        }
        qp->rq_head = (qp->rq_head + 1) % qp->cap.max_recv_wr;
        qp->rq_n--;
        cq_push((struct fv_cq *)qp->ibv.recv_cq, &wc);
    }
    return FV_ACK;
}

static void *resp_main(void *arg)
{
    struct fv_ctx *ctx = arg;
    uint8_t *buf = NULL;
    size_t cap = 0;

    for (;;) {
        struct epoll_event evs[16];
        int n = epoll_wait(ctx->epfd, evs, 16, -1);
        bool stop;

        pthread_mutex_lock(&ctx->lock);
        stop = ctx->stop;
        pthread_mutex_unlock(&ctx->lock);
        if (stop)
            break;
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            struct fv_req h;
            uint8_t ans;

            if (fd == ctx->wake_fd)
                continue;
            if (fd == ctx->listen_fd) {
                int c = accept4(ctx->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                struct epoll_event ev = {.events = EPOLLIN, .data.fd = c};
                if (c >= 0 && epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, c, &ev) < 0)
                    close(c);
                continue;
            }
            if (io_all(fd, &h, sizeof(h), false) < 0 || h.magic != FV_MAGIC || h.len > FV_MAX_MSG) {
                epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, fd, NULL);
                close(fd);
                continue;
            }
            if (h.len > cap) {
                uint8_t *nb = realloc(buf, h.len);
                if (!nb) {
                    epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, fd, NULL);
                    close(fd);
                    continue;
                }
                buf = nb;
                cap = h.len;
            }
            if (io_all(fd, buf, h.len, false) < 0) {
                epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, fd, NULL);
                close(fd);
                continue;
            }
            pthread_mutex_lock(&ctx->lock);
            ans = respond(ctx, &h, buf);
            pthread_mutex_unlock(&ctx->lock);
            if (io_all(fd, &ans, 1, true) < 0) {
                epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, fd, NULL);
                close(fd);
            }
        }
    }
    free(buf);
    return NULL;
}

/* ---- 6 the requester thread ---------------------------------------------------------- */

static int conn_get(struct fv_ctx *ctx, uint16_t lid)
{
    struct sockaddr_un sa;
    socklen_t len;
    struct fv_conn *c;
    int fd;

    for (c = ctx->conns; c; c = c->next)
        if (c->lid == lid)
            return c->fd;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    lid_sockaddr(lid, &sa, &len);
    if (connect(fd, (struct sockaddr *)&sa, len) < 0) {
        close(fd);
        return -1;
    }
    c = malloc(sizeof(*c));
    if (!c) {
        close(fd);
        return -1;
    }
    *c = (struct fv_conn){.lid = lid, .fd = fd, .next = ctx->conns};
    ctx->conns = c;
    return fd;
}

static void conn_drop(struct fv_ctx *ctx, uint16_t lid)
{
    for (struct fv_conn **pp = &ctx->conns; *pp; pp = &(*pp)->next)
        if ((*pp)->lid == lid) {
            struct fv_conn *c = *pp;
            *pp = c->next;
            close(c->fd);
            free(c);
            return;
        }
}

static uint64_t ack_timeout_ns(uint8_t t)
{
    /* 4.096 us << timeout; 0 means infinite in the spec: take the largest */
    return 4096ull << (t ? t : 31);
}

/* The head WR of qp is done (one way or another). Lock held. */
static void sq_pop(struct fv_qp *qp, enum ibv_wc_status st)
{
    struct fv_swr *s = &qp->sq[qp->sq_head];
    send_complete(qp, s, st);
    qp->sq_head = (qp->sq_head + 1) % qp->cap.max_send_wr;
    qp->sq_n--;
    qp->sq_busy = false;
}

/* Execute one WR of one QP if any is due; returns true if it did something. Sets *next_p
 * to the earliest retry time among waiting QPs. */
static bool request_one(struct fv_ctx *ctx, uint64_t *next_p)
{
    struct fv_qp *qp = NULL;
    struct fv_swr *s;
    struct fv_req h = {.magic = FV_MAGIC};
    uint64_t now = now_ns();
    uint8_t *payload = NULL, ans = FV_DROP;
    uint16_t lid;
    uint32_t qpn;
    uint8_t timeout;
    int fd, retries;

    for (struct fv_qp *q = ctx->qps; q; q = q->next) {
        if (q->sq_n == 0 || q->sq_busy || q->ibv.state != IBV_QPS_RTS)
            continue;
        if (q->sq[q->sq_head].retry_at > now) {
            if (!*next_p || q->sq[q->sq_head].retry_at < *next_p)
                *next_p = q->sq[q->sq_head].retry_at;
            continue;
        }
        qp = q;
        break;
    }
    if (!qp)
        return false;
    s = &qp->sq[qp->sq_head];
    h.op = (s->wr.opcode == IBV_WR_SEND || s->wr.opcode == IBV_WR_SEND_WITH_IMM) ? FV_OP_SEND
                                                                               : FV_OP_WRITE;
    h.has_imm = s->wr.opcode == IBV_WR_SEND_WITH_IMM || s->wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    h.imm = s->wr.imm_data;
    h.src_lid = ctx->lid;
    h.src_qpn = qp->ibv.qp_num;
    h.ud = qp->ibv.qp_type == IBV_QPT_UD;
    if (h.ud) {
        lid = ((struct fv_ah *)s->wr.wr.ud.ah)->dst_lid;
        h.dst_qpn = s->wr.wr.ud.remote_qpn;
        h.qkey = s->wr.wr.ud.remote_qkey;
    } else {
        lid = qp->dst_lid;
        h.dst_qpn = qp->dst_qpn;
        h.rkey = s->wr.wr.rdma.rkey;
        h.raddr = s->wr.wr.rdma.remote_addr;
    }
    /* gather the payload now, as the HCA's DMA would */
    if (s->inl) {
        h.len = s->inl_len;
        payload = malloc(h.len ? h.len : 1);
        if (payload)
            memcpy(payload, s->inl, h.len);
    } else {
        size_t total = 0;
        for (int i = 0; i < s->wr.num_sge; i++)
            total += s->sge[i].length;
        h.len = (uint32_t)total;
        payload = malloc(total ? total : 1);
        for (int i = 0, off = 0; payload && i < s->wr.num_sge; i++) {
            if (!mem_read(payload + off, s->sge[i].addr, s->sge[i].length)) {
                free(payload);
                sq_pop(qp, IBV_WC_LOC_PROT_ERR);
                qp_to_error(qp);
                return true;
            }
            off += (int)s->sge[i].length;
        }
    }
    if (!payload) {
        sq_pop(qp, IBV_WC_LOC_QP_OP_ERR);
        qp_to_error(qp);
        return true;
    }
    qp->sq_busy = true;
    qpn = qp->ibv.qp_num;
    timeout = qp->timeout;
    retries = s->retries_left;
    fd = conn_get(ctx, lid);
    pthread_mutex_unlock(&ctx->lock);
    if (fd >= 0) {
        /* A live responder answers every request once: waiting for it (rather than sending
         * again) is what PSNs give hardware, no duplicate delivery. Silence for the whole
         * retry window is a retry-exceeded error. */
        uint64_t deadline = now_ns() + (h.ud ? 100000000ull /* datagrams: no ACK to wait for */
                                             : ack_timeout_ns(timeout) * (uint64_t)(retries + 1));
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = 0;

        if (io_all(fd, &h, sizeof(h), true) < 0 || io_all(fd, payload, h.len, true) < 0)
            ans = 0xff; /* the connection is unusable: drop it */
        while (ans != 0xff && !atomic_load(&ctx->stop_a) && now_ns() < deadline &&
               (r = poll(&pfd, 1, 50)) == 0)
            ;
        if (ans != 0xff) {
            if (r > 0 && io_all(fd, &ans, 1, false) == 0)
                ;
            else if (r > 0 || r < 0)
                ans = 0xff;
            else
                ans = 0xfe; /* silence: retries exhausted */
        }
    }
    free(payload);
    pthread_mutex_lock(&ctx->lock);
    if (fd < 0 || ans == 0xff) {
        if (fd >= 0)
            conn_drop(ctx, lid);
        ans = FV_DROP;
    }
    /* the QP may have been destroyed or moved to error meanwhile */
    qp = qp_find(ctx, qpn);
    if (!qp || !qp->sq_busy)
        return true;
    s = &qp->sq[qp->sq_head];
    if (qp->ibv.state != IBV_QPS_RTS) {
        sq_pop(qp, IBV_WC_WR_FLUSH_ERR);
        return true;
    }
    if (!h.ud && ans == 0xfe) {
        sq_pop(qp, IBV_WC_RETRY_EXC_ERR);
        qp_to_error(qp);
        return true;
    }
    switch (h.ud ? FV_ACK : ans) {
    case FV_ACK:
        sq_pop(qp, IBV_WC_SUCCESS);
        break;
    case FV_NAK_RNR:
        qp->sq_busy = false;
        if (qp->rnr_retry != 7 && s->rnr_left-- <= 0) {
            sq_pop(qp, IBV_WC_RNR_RETRY_EXC_ERR);
            qp_to_error(qp);
        } else {
            s->retry_at = now_ns() + FV_RNR_DELAY_NS;
        }
        break;
    case FV_NAK_ACCESS:
        sq_pop(qp, IBV_WC_REM_ACCESS_ERR);
        qp_to_error(qp);
        break;
    case FV_NAK_INVALID:
        sq_pop(qp, IBV_WC_REM_INV_REQ_ERR);
        qp_to_error(qp);
        break;
    default:
        qp->sq_busy = false;
        if (s->retries_left-- <= 0) {
            sq_pop(qp, IBV_WC_RETRY_EXC_ERR);
            qp_to_error(qp);
        } else {
            s->retry_at = now_ns() + ack_timeout_ns(qp->timeout);
        }
    }
    return true;
}

static void *req_main(void *arg)
{
    struct fv_ctx *ctx = arg;

    pthread_mutex_lock(&ctx->lock);
    while (!ctx->stop) {
        uint64_t next = 0;
        if (request_one(ctx, &next))
            continue;
        if (next) {
            struct timespec ts;
            uint64_t wait = next > now_ns() ? next - now_ns() : 0;
            clock_gettime(CLOCK_REALTIME, &ts);
            wait += (uint64_t)ts.tv_nsec;
            ts.tv_sec += (time_t)(wait / 1000000000ull);
            ts.tv_nsec = (long)(wait % 1000000000ull);
            pthread_cond_timedwait(&ctx->req_cond, &ctx->lock, &ts);
        } else {
            pthread_cond_wait(&ctx->req_cond, &ctx->lock);
        }
    }
    pthread_mutex_unlock(&ctx->lock);
    return NULL;
}

/* ---- 7 the QP state machine ---------------------------------------------------------- */

#define M(x) IBV_QP_##x
struct fv_transition {
    enum ibv_qp_state from, to;
    int rc_req, rc_opt, ud_req, ud_opt;
};

static const struct fv_transition fv_transitions[] = {
    {IBV_QPS_RESET, IBV_QPS_INIT, M(STATE) | M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS), 0,
     M(STATE) | M(PKEY_INDEX) | M(PORT) | M(QKEY), 0},
    {IBV_QPS_INIT, IBV_QPS_INIT, 0, M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS), 0,
     M(PKEY_INDEX) | M(PORT) | M(QKEY)},
    {IBV_QPS_INIT, IBV_QPS_RTR,
     M(STATE) | M(AV) | M(PATH_MTU) | M(DEST_QPN) | M(RQ_PSN) | M(MAX_DEST_RD_ATOMIC) |
         M(MIN_RNR_TIMER),
     M(ALT_PATH) | M(ACCESS_FLAGS) | M(PKEY_INDEX), M(STATE), M(PKEY_INDEX) | M(QKEY)},
    {IBV_QPS_RTR, IBV_QPS_RTS,
     M(STATE) | M(TIMEOUT) | M(RETRY_CNT) | M(RNR_RETRY) | M(SQ_PSN) | M(MAX_QP_RD_ATOMIC),
     M(CUR_STATE) | M(ACCESS_FLAGS) | M(MIN_RNR_TIMER) | M(ALT_PATH) | M(PATH_MIG_STATE),
     M(STATE) | M(SQ_PSN), M(CUR_STATE) | M(QKEY)},
};
#undef M

static bool port_active(struct fv_ctx *ctx, int port)
{
    return port >= 1 && port <= ctx->dev->nports && !ctx->dev->down[port];
}

/* The LID an address names, or 0 when it is not valid for this port's link layer. */
static uint16_t ah_lid(struct fv_ctx *ctx, const struct ibv_ah_attr *ah)
{
    if (fv_eth) {
        if (!ah->is_global || ah->grh.sgid_index >= FV_GID_TBL_ETH)
            return 0;
        if (ah->grh.dgid.raw[0] != 0xfe && ah->grh.dgid.raw[10] != 0xff)
            return 0;
        return (uint16_t)(ah->grh.dgid.raw[14] << 8 | ah->grh.dgid.raw[15]);
    }
    if (!port_active(ctx, ah->port_num ? ah->port_num : 1))
        return 0;
    return ah->dlid;
}

static int fv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a, int mask)
{
    struct fv_qp *qp = (struct fv_qp *)ibqp;
    struct fv_ctx *ctx = qp->ctx;
    enum ibv_qp_state cur, to;
    const struct fv_transition *t = NULL;
    int req, opt, err = 0;

    if (!a || !(mask & IBV_QP_STATE))
        return EINVAL;
    pthread_mutex_lock(&ctx->lock);
    cur = qp->ibv.state;
    to = a->qp_state;
    if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != cur) {
        err = EINVAL;
        goto out;
    }
    if (to == IBV_QPS_ERR) {
        if (mask & ~(IBV_QP_STATE | IBV_QP_CUR_STATE))
            err = EINVAL;
        else
            qp_to_error(qp);
        goto out;
    }
    if (to == IBV_QPS_RESET) {
        if (mask & ~(IBV_QP_STATE | IBV_QP_CUR_STATE)) {
            err = EINVAL;
            goto out;
        }
        qp_to_error(qp); /* flushes; then forget everything */
        qp->ibv.state = IBV_QPS_RESET;
        goto out;
    }
    for (size_t i = 0; i < sizeof(fv_transitions) / sizeof(fv_transitions[0]); i++)
        if (fv_transitions[i].from == cur && fv_transitions[i].to == to)
            t = &fv_transitions[i];
    if (!t) {
        err = EINVAL;
        goto out;
    }
    req = qp->ibv.qp_type == IBV_QPT_UD ? t->ud_req : t->rc_req;
    opt = qp->ibv.qp_type == IBV_QPT_UD ? t->ud_opt : t->rc_opt;
    if ((mask & req) != req || (mask & ~(req | opt | IBV_QP_STATE)) != 0) {
        err = EINVAL;
        goto out;
    }
    if (mask & IBV_QP_PORT) {
        if (!port_active(ctx, a->port_num)) {
            err = EINVAL;
            goto out;
        }
        qp->port = a->port_num;
    }
    if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0) {
        err = EINVAL;
        goto out;
    }
    if (mask & IBV_QP_ACCESS_FLAGS) {
        if (a->qp_access_flags & ~(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                   IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE)) {
            err = EINVAL;
            goto out;
        }
        qp->access = (int)a->qp_access_flags;
    }
    if (mask & IBV_QP_QKEY)
        qp->qkey = a->qkey;
    if (to == IBV_QPS_RTR && qp->ibv.qp_type == IBV_QPT_RC) {
        uint16_t lid = ah_lid(ctx, &a->ah_attr);
        if (!lid || a->dest_qp_num == 0 || a->dest_qp_num >= (1u << 24) ||
            a->path_mtu < IBV_MTU_256 || a->path_mtu > (fv_eth ? IBV_MTU_1024 : IBV_MTU_4096) ||
            a->rq_psn >= (1u << 24) || a->min_rnr_timer > 31 || a->max_dest_rd_atomic > 16) {
            err = EINVAL;
            goto out;
        }
        qp->dst_lid = lid;
        qp->dst_qpn = a->dest_qp_num;
    }
    if (to == IBV_QPS_RTS) {
        if (a->sq_psn >= (1u << 24)) {
            err = EINVAL;
            goto out;
        }
        if (qp->ibv.qp_type == IBV_QPT_RC) {
            if (a->timeout > 31 || a->retry_cnt > 7 || a->rnr_retry > 7 ||
                a->max_rd_atomic > 16) {
                err = EINVAL;
                goto out;
            }
            qp->timeout = a->timeout;
            qp->retry_cnt = a->retry_cnt;
            qp->rnr_retry = a->rnr_retry;
        }
    }
    qp->ibv.state = to;
out:
    pthread_cond_signal(&ctx->req_cond);
    pthread_mutex_unlock(&ctx->lock);
    return err;
}

/* ---- 8 the verbs table --------------------------------------------------------------- */

static struct ibv_device **fv_get_device_list(int *num)
{
    struct ibv_device **l;

    pthread_once(&fv_once, fv_config);
    l = fv_new((size_t)(fv_ndevs + 1) * sizeof(*l));
    if (!l) {
        errno = ENOMEM;
        return NULL;
    }
    for (int i = 0; i < fv_ndevs; i++)
        l[i] = &fv_devs[i].ibv;
    if (num)
        *num = fv_ndevs;
    return l;
}

static void fv_free_device_list(struct ibv_device **l)
{
    fv_free(l);
}

static const char *fv_get_device_name(struct ibv_device *d)
{
    return d ? d->name : NULL;
}

static struct ibv_context *fv_open_device(struct ibv_device *d)
{
    struct fv_ctx *ctx = fv_new(sizeof(*ctx));
    struct epoll_event ev = {.events = EPOLLIN};
    struct sockaddr_un sa;
    socklen_t len;

    if (!ctx)
        return NULL;
    ctx->dev = (struct fv_device *)d;
    ctx->ibv.device = d;
    ctx->ibv.num_comp_vectors = 1;
    ctx->ibv.cmd_fd = ctx->ibv.async_fd = -1;
    ctx->wake_fd = ctx->epfd = -1;
    pthread_mutex_init(&ctx->lock, NULL);
    pthread_cond_init(&ctx->req_cond, NULL);
    ctx->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (ctx->listen_fd < 0)
        goto out_free;
    /* a LID nobody on this host holds: the bind is the allocation */
    for (int tries = 0;; tries++) {
        uint16_t lid = (uint16_t)(atomic_fetch_add(&fv_lid_seq, 1) % 0xbffe + 1);
        if (tries > 0xc000)
            goto out_free;
        lid_sockaddr(lid, &sa, &len);
        if (bind(ctx->listen_fd, (struct sockaddr *)&sa, len) == 0) {
            ctx->lid = lid;
            break;
        }
        if (errno != EADDRINUSE)
            goto out_free;
    }
    if (listen(ctx->listen_fd, 64) < 0)
        goto out_free;
    ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
    ctx->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ctx->epfd < 0 || ctx->wake_fd < 0)
        goto out_free;
    ev.data.fd = ctx->listen_fd;
    if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, ctx->listen_fd, &ev) < 0)
        goto out_free;
    ev.data.fd = ctx->wake_fd;
    if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, ctx->wake_fd, &ev) < 0)
        goto out_free;
    ctx->next_qpn = 0x100 + ((uint32_t)ctx->lid << 8);
    ctx->next_key = 1;
    if (pthread_create(&ctx->resp_thread, NULL, resp_main, ctx))
        goto out_free;
    if (pthread_create(&ctx->req_thread, NULL, req_main, ctx)) {
        uint64_t one = 1;
        ctx->stop = true;
        if (write(ctx->wake_fd, &one, sizeof(one)) < 0) {
            /* the thread reads stop on its next wake-up either way */
        }
        pthread_join(ctx->resp_thread, NULL);
        goto out_free;
    }
    return &ctx->ibv;

out_free:
    if (ctx->listen_fd >= 0)
        close(ctx->listen_fd);
    if (ctx->epfd >= 0)
        close(ctx->epfd);
    if (ctx->wake_fd >= 0)
        close(ctx->wake_fd);
    fv_free(ctx);
    return NULL;
}

static int fv_close_device(struct ibv_context *c)
{
    struct fv_ctx *ctx = ctx_of(c);
    uint64_t one = 1;

    pthread_mutex_lock(&ctx->lock);
    ctx->stop = true;
    atomic_store(&ctx->stop_a, true);
    pthread_cond_signal(&ctx->req_cond);
    pthread_mutex_unlock(&ctx->lock);
    if (write(ctx->wake_fd, &one, sizeof(one)) < 0)
        return errno;
    pthread_join(ctx->resp_thread, NULL);
    pthread_join(ctx->req_thread, NULL);
    while (ctx->conns)
        conn_drop(ctx, ctx->conns->lid);
    close(ctx->listen_fd);
    close(ctx->epfd);
    close(ctx->wake_fd);
    pthread_mutex_destroy(&ctx->lock);
    pthread_cond_destroy(&ctx->req_cond);
    fv_free(ctx);
    return 0;
}

static int fv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
    struct fv_ctx *ctx = ctx_of(c);

    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "fakeverbs");
    a->max_mr_size = UINT64_MAX;
    a->max_qp = 1 << 16;
    a->max_qp_wr = FV_MAX_WR;
    a->max_sge = FV_MAX_SGE;
    a->max_cq = 1 << 16;
    a->max_cqe = FV_MAX_CQE;
    a->max_mr = 1 << 20;
    a->max_pd = 1 << 16;
    a->max_qp_rd_atom = a->max_qp_init_rd_atom = 16;
    a->phys_port_cnt = (uint8_t)ctx->dev->nports;
    return 0;
}

static int fv_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a)
{
    struct fv_ctx *ctx = ctx_of(c);

    if (port < 1 || port > ctx->dev->nports)
        return EINVAL;
    memset(a, 0, sizeof(*a));
    a->state = ctx->dev->down[port] ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
    a->phys_state = ctx->dev->down[port] ? 3 : 5; /* disabled / link up */
    a->max_mtu = a->active_mtu = fv_eth ? IBV_MTU_1024 : IBV_MTU_4096;
    a->gid_tbl_len = fv_eth ? FV_GID_TBL_ETH : FV_GID_TBL_IB;
    a->max_msg_sz = FV_MAX_MSG;
    a->pkey_tbl_len = 1;
    a->lid = fv_eth ? 0 : ctx->lid;
    a->sm_lid = fv_eth ? 0 : 1;
    a->link_layer = fv_eth ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
    a->active_width = 2;  /* 4x */
    a->active_speed = 32; /* EDR */
    return 0;
}

static int fv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
    struct fv_ctx *ctx = ctx_of(c);
    int n = fv_eth ? FV_GID_TBL_ETH : FV_GID_TBL_IB;

    if (port < 1 || port > ctx->dev->nports || index < 0 || index >= n)
        return EINVAL;
    memset(gid, 0, sizeof(*gid));
    if (index == 0) { /* link-local: fe80::<lid> */
        gid->raw[0] = 0xfe;
        gid->raw[1] = 0x80;
    } else if (index <= 2) { /* RoCE v2 over IPv4: ::ffff:10.0.<lid> */
        gid->raw[10] = gid->raw[11] = 0xff;
        gid->raw[12] = 10;
    } else {
        return 0; /* an empty slot: all zero, as hardware reports unused entries */
    }
    gid->raw[14] = (uint8_t)(ctx->lid >> 8);
    gid->raw[15] = (uint8_t)ctx->lid;
    return 0;
}

static struct ibv_pd *fv_alloc_pd(struct ibv_context *c)
{
    struct fv_pd *pd = fv_new(sizeof(*pd));
    if (!pd)
        return NULL;
    pd->ibv.context = c;
    pthread_mutex_lock(&ctx_of(c)->lock);
    ctx_of(c)->nobjs++;
    pthread_mutex_unlock(&ctx_of(c)->lock);
    return &pd->ibv;
}

static int fv_dealloc_pd(struct ibv_pd *ibpd)
{
    struct fv_pd *pd = (struct fv_pd *)ibpd;
    struct fv_ctx *ctx = ctx_of(ibpd->context);

    pthread_mutex_lock(&ctx->lock);
    if (pd->nusers) {
        pthread_mutex_unlock(&ctx->lock);
        return EBUSY;
    }
    ctx->nobjs--;
    pthread_mutex_unlock(&ctx->lock);
    fv_free(pd);
    return 0;
}

static struct ibv_mr *fv_reg_mr(struct ibv_pd *ibpd, void *addr, size_t length, int access)
{
    struct fv_ctx *ctx = ctx_of(ibpd->context);
    struct fv_mr *mr;
    uint8_t probe;

    if (((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
         !(access & IBV_ACCESS_LOCAL_WRITE)) ||
        length == 0) {
        errno = EINVAL;
        return NULL;
    }
    /* pinning fails on memory that is not mapped */
    if (!mem_read(&probe, (uint64_t)(uintptr_t)addr, 1) ||
        !mem_read(&probe, (uint64_t)(uintptr_t)addr + length - 1, 1)) {
        errno = EFAULT;
        return NULL;
    }
    mr = fv_new(sizeof(*mr));
    if (!mr) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&ctx->lock);
    mr->ibv = (struct ibv_mr){.context = ibpd->context, .pd = ibpd, .addr = addr,
                              .length = length};
    /* key = index << 8 | a varying low byte, as hardware does: a stale key is wrong */
    mr->ibv.lkey = mr->ibv.rkey =
        (ctx->next_key++ << 8) | ((atomic_fetch_add(&fv_lid_seq, 1) * 37u) & 0xff);
    mr->access = access;
    mr->next = ctx->mrs;
    ctx->mrs = mr;
    ((struct fv_pd *)ibpd)->nusers++;
    pthread_mutex_unlock(&ctx->lock);
    return &mr->ibv;
}

static int fv_dereg_mr(struct ibv_mr *ibmr)
{
    struct fv_ctx *ctx = ctx_of(ibmr->context);

    pthread_mutex_lock(&ctx->lock);
    for (struct fv_mr **pp = &ctx->mrs; *pp; pp = &(*pp)->next)
        if (&(*pp)->ibv == ibmr) {
            struct fv_mr *m = *pp;
            *pp = m->next;
            ((struct fv_pd *)m->ibv.pd)->nusers--;
            pthread_mutex_unlock(&ctx->lock);
            fv_free(m);
            return 0;
        }
    pthread_mutex_unlock(&ctx->lock);
    return EINVAL;
}

static struct ibv_comp_channel *fv_create_comp_channel(struct ibv_context *c)
{
    struct fv_channel *ch = fv_new(sizeof(*ch));

    if (!ch)
        return NULL;
    ch->ibv.context = c;
    ch->ibv.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    if (ch->ibv.fd < 0) {
        fv_free(ch);
        return NULL;
    }
    pthread_mutex_lock(&ctx_of(c)->lock);
    ctx_of(c)->nobjs++;
    pthread_mutex_unlock(&ctx_of(c)->lock);
    return &ch->ibv;
}

static int fv_destroy_comp_channel(struct ibv_comp_channel *ibch)
{
    struct fv_channel *ch = (struct fv_channel *)ibch;
    struct fv_ctx *ctx = ctx_of(ibch->context);

    pthread_mutex_lock(&ctx->lock);
    if (ch->ncqs) {
        pthread_mutex_unlock(&ctx->lock);
        return EBUSY;
    }
    ctx->nobjs--;
    pthread_mutex_unlock(&ctx->lock);
    close(ch->ibv.fd);
    fv_free(ch);
    return 0;
}

static struct ibv_cq *fv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
                                   struct ibv_comp_channel *channel, int comp_vector)
{
    struct fv_cq *cq;

    if (cqe < 1 || cqe > FV_MAX_CQE || comp_vector != 0) {
        errno = EINVAL;
        return NULL;
    }
    cq = fv_new(sizeof(*cq));
    if (!cq)
        return NULL;
    cq->wc = calloc((size_t)cqe, sizeof(*cq->wc));
    if (!cq->wc) {
        fv_free(cq);
        return NULL;
    }
    cq->cap = cqe;
    cq->ibv.context = c;
    cq->ibv.channel = channel;
    cq->ibv.cq_context = cq_context;
    cq->ibv.cqe = cqe;
    pthread_mutex_lock(&ctx_of(c)->lock);
    if (channel)
        ((struct fv_channel *)channel)->ncqs++;
    ctx_of(c)->nobjs++;
    pthread_mutex_unlock(&ctx_of(c)->lock);
    return &cq->ibv;
}

static int fv_destroy_cq(struct ibv_cq *ibcq)
{
    struct fv_cq *cq = (struct fv_cq *)ibcq;
    struct fv_ctx *ctx = ctx_of(ibcq->context);

    pthread_mutex_lock(&ctx->lock);
    if (cq->nqps || cq->events != cq->acked) {
        pthread_mutex_unlock(&ctx->lock);
        return EBUSY;
    }
    if (ibcq->channel) {
        struct fv_channel *ch = (struct fv_channel *)ibcq->channel;
        int k = 0;
        for (int i = 0; i < ch->ev_n; i++) { /* events not retrieved die with the CQ */
            struct fv_cq *e = ch->events[(ch->ev_head + i) % 64];
            if (e != cq)
                ch->events[(ch->ev_head + k++) % 64] = e;
        }
        ch->ev_n = k;
        ch->ncqs--;
    }
    ctx->nobjs--;
    pthread_mutex_unlock(&ctx->lock);
    free(cq->wc);
    fv_free(cq);
    return 0;
}

static int fv_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
    struct fv_cq *cq = (struct fv_cq *)ibcq;
    struct fv_ctx *ctx = ctx_of(ibcq->context);

    (void)solicited_only;
    if (!ibcq->channel)
        return EINVAL;
    pthread_mutex_lock(&ctx->lock);
    cq->armed = true;
    pthread_mutex_unlock(&ctx->lock);
    return 0;
}

static int fv_get_cq_event(struct ibv_comp_channel *ibch, struct ibv_cq **cq_p, void **ctx_p)
{
    struct fv_channel *ch = (struct fv_channel *)ibch;
    struct fv_ctx *ctx = ctx_of(ibch->context);
    uint64_t v;
    struct fv_cq *cq;

    if (read(ibch->fd, &v, sizeof(v)) != sizeof(v))
        return -1; /* errno from read: EAGAIN on a non-blocking channel */
    pthread_mutex_lock(&ctx->lock);
    if (ch->ev_n == 0) {
        /* the event was for a CQ destroyed since */
        pthread_mutex_unlock(&ctx->lock);
        errno = EAGAIN;
        return -1;
    }
    cq = ch->events[ch->ev_head];
    ch->ev_head = (ch->ev_head + 1) % 64;
    ch->ev_n--;
    cq->events++; /* retrieved: must be acknowledged before the CQ can go */
    pthread_mutex_unlock(&ctx->lock);
    *cq_p = &cq->ibv;
    *ctx_p = cq->ibv.cq_context;
    return 0;
}

static void fv_ack_cq_events(struct ibv_cq *ibcq, unsigned int n)
{
    struct fv_ctx *ctx = ctx_of(ibcq->context);

    pthread_mutex_lock(&ctx->lock);
    ((struct fv_cq *)ibcq)->acked += n;
    pthread_mutex_unlock(&ctx->lock);
}

static int fv_poll_cq(struct ibv_cq *ibcq, int num, struct ibv_wc *wc)
{
    struct fv_cq *cq = (struct fv_cq *)ibcq;
    struct fv_ctx *ctx = ctx_of(ibcq->context);
    int n = 0;

    pthread_mutex_lock(&ctx->lock);
    if (cq->overrun) {
        pthread_mutex_unlock(&ctx->lock);
        return -1; /* completions were lost: the consumer sized the CQ too small */
    }
    while (n < num && cq->n > 0) {
        wc[n++] = cq->wc[cq->head];
        cq->head = (cq->head + 1) % cq->cap;
        cq->n--;
    }
    pthread_mutex_unlock(&ctx->lock);
    return n;
}

static struct ibv_qp *fv_create_qp(struct ibv_pd *ibpd, struct ibv_qp_init_attr *a)
{
    struct fv_ctx *ctx = ctx_of(ibpd->context);
    struct fv_qp *qp;

    if (!a || !a->send_cq || !a->recv_cq || a->srq ||
        (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UD) || a->cap.max_send_wr < 1 ||
        a->cap.max_send_wr > FV_MAX_WR || a->cap.max_recv_wr < 1 ||
        a->cap.max_recv_wr > FV_MAX_WR || a->cap.max_send_sge > FV_MAX_SGE ||
        a->cap.max_recv_sge > FV_MAX_SGE || a->cap.max_inline_data > FV_MAX_INLINE ||
        a->send_cq->context != ibpd->context || a->recv_cq->context != ibpd->context) {
        errno = EINVAL;
        return NULL;
    }
    qp = fv_new(sizeof(*qp));
    if (!qp)
        return NULL;
    qp->sq = calloc(a->cap.max_send_wr, sizeof(*qp->sq));
    qp->rq = calloc(a->cap.max_recv_wr, sizeof(*qp->rq));
    if (!qp->sq || !qp->rq) {
        free(qp->sq);
        free(qp->rq);
        fv_free(qp);
        errno = ENOMEM;
        return NULL;
    }
    qp->ctx = ctx;
    qp->cap = a->cap;
    qp->cap.max_inline_data = FV_MAX_INLINE; /* reported back, as providers do */
    a->cap.max_inline_data = FV_MAX_INLINE;
    qp->sig_all = a->sq_sig_all;
    qp->ibv = (struct ibv_qp){.context = ibpd->context, .qp_context = a->qp_context, .pd = ibpd,
                              .send_cq = a->send_cq, .recv_cq = a->recv_cq,
                              .state = IBV_QPS_RESET, .qp_type = a->qp_type};
    pthread_mutex_lock(&ctx->lock);
    qp->ibv.qp_num = ctx->next_qpn++ & 0xffffff;
    qp->next = ctx->qps;
    ctx->qps = qp;
    ((struct fv_pd *)ibpd)->nusers++;
    ((struct fv_cq *)a->send_cq)->nqps++;
    ((struct fv_cq *)a->recv_cq)->nqps++;
    pthread_mutex_unlock(&ctx->lock);
    return &qp->ibv;
}

static int fv_destroy_qp(struct ibv_qp *ibqp)
{
    struct fv_qp *qp = (struct fv_qp *)ibqp;
    struct fv_ctx *ctx = qp->ctx;

    pthread_mutex_lock(&ctx->lock);
    for (struct fv_qp **pp = &ctx->qps; *pp; pp = &(*pp)->next)
        if (*pp == qp) {
            *pp = qp->next;
            break;
        }
    ((struct fv_pd *)ibqp->pd)->nusers--;
    ((struct fv_cq *)ibqp->send_cq)->nqps--;
    ((struct fv_cq *)ibqp->recv_cq)->nqps--;
    for (uint32_t i = 0; i < qp->sq_n; i++)
        free(qp->sq[(qp->sq_head + i) % qp->cap.max_send_wr].inl);
    pthread_mutex_unlock(&ctx->lock);
    free(qp->sq);
    free(qp->rq);
    fv_free(qp);
    return 0;
}

/* An lkey-checked SGE: inside an MR of this QP's PD with the needed access. Lock held. */
static bool sge_ok(struct fv_ctx *ctx, struct fv_qp *qp, const struct ibv_sge *s, int need)
{
    struct fv_mr *m;

    if (s->length == 0)
        return true;
    m = mr_find(ctx, s->lkey);
    return m && m->ibv.pd == qp->ibv.pd && (m->access & need) == need &&
           s->addr >= (uint64_t)(uintptr_t)m->ibv.addr &&
           s->addr + s->length <= (uint64_t)(uintptr_t)m->ibv.addr + m->ibv.length;
}

static int fv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct fv_qp *qp = (struct fv_qp *)ibqp;
    struct fv_ctx *ctx = qp->ctx;
    int err = 0;

    pthread_mutex_lock(&ctx->lock);
    for (; wr; wr = wr->next) {
        struct fv_swr *s;
        bool rc = ibqp->qp_type == IBV_QPT_RC;
        size_t total = 0;

        if (ibqp->state != IBV_QPS_RTS && ibqp->state != IBV_QPS_ERR) {
            err = EINVAL;
            break;
        }
        if (wr->num_sge < 0 || wr->num_sge > (int)qp->cap.max_send_sge ||
            !(wr->opcode == IBV_WR_SEND || wr->opcode == IBV_WR_SEND_WITH_IMM ||
              (rc && (wr->opcode == IBV_WR_RDMA_WRITE ||
                      wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM))) ||
            (!rc && !wr->wr.ud.ah)) {
            err = EINVAL;
            break;
        }
        for (int i = 0; i < wr->num_sge; i++)
            total += wr->sg_list[i].length;
        if (total > FV_MAX_MSG || (!rc && total > 4096 - 40)) {
            err = EINVAL;
            break;
        }
        if ((wr->send_flags & IBV_SEND_INLINE) && total > qp->cap.max_inline_data) {
            err = EINVAL;
            break;
        }
        if (qp->sq_n == qp->cap.max_send_wr) {
            err = ENOMEM;
            break;
        }
        s = &qp->sq[(qp->sq_head + qp->sq_n) % qp->cap.max_send_wr];
        memset(s, 0, sizeof(*s));
        s->wr = *wr;
        s->wr.next = NULL;
        if ((wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) &&
            total > 0 && atomic_load(&fv_bad_rkeys) > 0 && atomic_fetch_sub(&fv_bad_rkeys, 1) > 0)
            s->wr.wr.rdma.rkey ^= 0x00ffff00u;
        s->retries_left = qp->retry_cnt;
        s->rnr_left = qp->rnr_retry;
        if (wr->send_flags & IBV_SEND_INLINE) {
            /* inline: the data is taken now, no lkey involved, the buffer is free at once */
            s->inl = malloc(total ? total : 1);
            if (!s->inl) {
                err = ENOMEM;
                break;
            }
            for (int i = 0, off = 0; i < wr->num_sge; i++) {
                memcpy(s->inl + off, (void *)(uintptr_t)wr->sg_list[i].addr,
                       wr->sg_list[i].length);
                off += (int)wr->sg_list[i].length;
            }
            s->inl_len = (uint32_t)total;
            s->wr.num_sge = 0;
        } else {
            for (int i = 0; i < wr->num_sge; i++) {
                if (!sge_ok(ctx, qp, &wr->sg_list[i], 0)) {
                    err = EINVAL; /* hardware completes with a local protection error; */
                    break;        /* refusing at post is stricter and names the WR */
                }
                s->sge[i] = wr->sg_list[i];
            }
            if (err)
                break;
        }
        s->wr.sg_list = s->sge;
        qp->sq_n++;
        if (ibqp->state == IBV_QPS_ERR) {
            /* accepted and flushed at once */
            uint32_t last = (qp->sq_head + qp->sq_n - 1) % qp->cap.max_send_wr;
            struct fv_swr tmp = qp->sq[last];
            qp->sq_n--;
            send_complete(qp, &tmp, IBV_WC_WR_FLUSH_ERR);
        }
    }
    if (err && bad)
        *bad = wr;
    pthread_cond_signal(&ctx->req_cond);
    pthread_mutex_unlock(&ctx->lock);
    return err;
}

static int fv_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct fv_qp *qp = (struct fv_qp *)ibqp;
    struct fv_ctx *ctx = qp->ctx;
    int err = 0;

    pthread_mutex_lock(&ctx->lock);
    for (; wr; wr = wr->next) {
        struct fv_rwr *r;

        if (ibqp->state == IBV_QPS_RESET || wr->num_sge < 0 ||
            wr->num_sge > (int)qp->cap.max_recv_sge) {
            err = EINVAL;
            break;
        }
        if (qp->rq_n == qp->cap.max_recv_wr) {
            err = ENOMEM;
            break;
        }
        for (int i = 0; i < wr->num_sge; i++)
            if (!sge_ok(ctx, qp, &wr->sg_list[i], IBV_ACCESS_LOCAL_WRITE))
                err = EINVAL;
        if (err)
            break;
        r = &qp->rq[(qp->rq_head + qp->rq_n) % qp->cap.max_recv_wr];
        r->wr_id = wr->wr_id;
        r->nsge = wr->num_sge;
        memcpy(r->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(*r->sge));
        qp->rq_n++;
        if (ibqp->state == IBV_QPS_ERR)
            qp_to_error(qp);
    }
    if (err && bad)
        *bad = wr;
    pthread_mutex_unlock(&ctx->lock);
    return err;
}

static struct ibv_ah *fv_create_ah(struct ibv_pd *ibpd, struct ibv_ah_attr *a)
{
    struct fv_ctx *ctx = ctx_of(ibpd->context);
    uint16_t lid = a ? ah_lid(ctx, a) : 0;
    struct fv_ah *ah;

    if (!lid) {
        errno = EINVAL;
        return NULL;
    }
    ah = fv_new(sizeof(*ah));
    if (!ah)
        return NULL;
    ah->ibv.context = ibpd->context;
    ah->ibv.pd = ibpd;
    ah->dst_lid = lid;
    pthread_mutex_lock(&ctx->lock);
    ((struct fv_pd *)ibpd)->nusers++;
    pthread_mutex_unlock(&ctx->lock);
    return &ah->ibv;
}

static int fv_destroy_ah(struct ibv_ah *ibah)
{
    struct fv_ctx *ctx = ctx_of(ibah->context);

    pthread_mutex_lock(&ctx->lock);
    ((struct fv_pd *)ibah->pd)->nusers--;
    pthread_mutex_unlock(&ctx->lock);
    fv_free(ibah);
    return 0;
}

static long fv_live_objects(void)
{
    return atomic_load(&fv_live);
}

static const struct coll_ib_ops fv_ops = {
    .name = "fakeverbs",
    .get_device_list = fv_get_device_list,
    .free_device_list = fv_free_device_list,
    .get_device_name = fv_get_device_name,
    .open_device = fv_open_device,
    .close_device = fv_close_device,
    .query_device = fv_query_device,
    .query_port = fv_query_port,
    .query_gid = fv_query_gid,
    .alloc_pd = fv_alloc_pd,
    .dealloc_pd = fv_dealloc_pd,
    .reg_mr = fv_reg_mr,
    .dereg_mr = fv_dereg_mr,
    .create_comp_channel = fv_create_comp_channel,
    .destroy_comp_channel = fv_destroy_comp_channel,
    .create_cq = fv_create_cq,
    .destroy_cq = fv_destroy_cq,
    .req_notify_cq = fv_req_notify_cq,
    .get_cq_event = fv_get_cq_event,
    .ack_cq_events = fv_ack_cq_events,
    .poll_cq = fv_poll_cq,
    .create_qp = fv_create_qp,
    .modify_qp = fv_modify_qp,
    .destroy_qp = fv_destroy_qp,
    .post_send = fv_post_send,
    .post_recv = fv_post_recv,
    .create_ah = fv_create_ah,
    .destroy_ah = fv_destroy_ah,
    .live_objects = fv_live_objects,
};

/* Tests: corrupt the rkey of the next n RDMA writes that carry data (a peer with a bug). */
FV_API void coll_fakeverbs_inject_bad_rkey(int n)
{
    atomic_store(&fv_bad_rkeys, n);
}

FV_API const struct coll_ib_ops *coll_fakeverbs_ops(void)
{
    return &fv_ops;
}
