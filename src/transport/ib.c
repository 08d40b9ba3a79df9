/*
 * ib.c - the InfiniBand / RoCE verbs transport: one reliable-connected queue pair per peer,
 * data moved by RDMA write with immediate into buffers the receiver announced (credits).
 *
 * Divisions: 1 verbs table (libibverbs or the emulation), 2 wire formats, 3 state, 4 device
 * and port discovery, 5 registration cache, 6 failure, 7 connection management, 8 credits
 * and data, 9 completions, 10 entry points.
 *
 * Addressing. init opens the first active port COLL_IB_HCA allows and publishes, in this
 * rank's slot of the peer info (tp_addr), its link layer, MTU, LID, GID and the number of a
 * UD queue pair that answers connection requests. On InfiniBand peers are reached by LID; on
 * RoCE (Ethernet link layer) by GID (COLL_IB_GID_INDEX), with a GRH on every packet.
 *
 * Connections. The lower rank of a pair creates its RC QP (RESET -> INIT) and sends REQ over
 * UD: its QP number and first PSN, with HMAC(secret, ...) so that no stranger on the fabric
 * can make a rank connect. The higher rank creates its QP, takes it to RTR with the
 * requester's numbers and to RTS, and answers REP; the lower rank takes its QP to RTR and
 * RTS and answers RTU, after which the higher rank sends too (before RTU the lower QP may not
 * be ready, and packets it drops would cost a whole ACK timeout). Datagrams can be lost on
 * hardware: REQ is sent again while unanswered, REP while no RTU came, and each side answers
 * duplicates with the same numbers.
 *
 * Data. The executor posts sends and receives per peer in message order. Each receive posted
 * is announced to the sender by a credit (an inline SEND of 40 bytes): message index,
 * (seq, tag, len), buffer address and rkey. The sender matches the k-th credit with its k-th
 * send, refuses a mismatch (ranks called different collectives or counts), and writes the
 * payload with RDMA_WRITE_WITH_IMM (imm = message index; inline when small); the receiver's
 * completion carries the index and the length, both checked. A rank grants at most
 * IB_CREDITS credits per peer, and every QP keeps 2 * IB_CREDITS + 4 receives posted, which
 * bounds what a peer can send it: no receiver-not-ready NAK can happen in protocol.
 *
 * Failure. Every error completion other than a flush after shutdown fails the comm. A peer
 * that died or failed (its QPs are destroyed or in error) shows as retry-exceeded on the next
 * packet sent to it; a rank that only waits for a peer sends it a zero-length RDMA write
 * after IB_KEEPALIVE_NS of silence, so it learns too. A bad rkey, an address outside the
 * region or a length that does not match is a remote access / length error, never a write
 * into the wrong memory.
 *
 * Not here yet: several QPs per peer for large messages, GPUDirect RDMA (device buffers are
 * rejected: the executor stages them), shared receive queues.
 */
#include "../base/net.h"
#include "coll_config.h"
#include "ib_ops.h"
#include "transport.h"
#include "../base/wire.h"

#include "ib.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* ---- 1 verbs table ------------------------------------------------------------------- */

/* The calls that are macros or static inline in <infiniband/verbs.h>, as functions. */
static int real_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a)
{
    return ibv_query_port(c, port, a);
}

static struct ibv_mr *real_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    return ibv_reg_mr(pd, addr, len, access);
}

static int real_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    return ibv_req_notify_cq(cq, solicited_only);
}

static int real_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    return ibv_poll_cq(cq, n, wc);
}

static int real_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    return ibv_post_send(qp, wr, bad);
}

static int real_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    return ibv_post_recv(qp, wr, bad);
}

static const struct coll_ib_ops ib_real_ops = {
    .name = "libibverbs",
    .get_device_list = ibv_get_device_list,
    .free_device_list = ibv_free_device_list,
    .get_device_name = ibv_get_device_name,
    .open_device = ibv_open_device,
    .close_device = ibv_close_device,
    .query_device = ibv_query_device,
    .query_port = real_query_port,
    .query_gid = ibv_query_gid,
    .alloc_pd = ibv_alloc_pd,
    .dealloc_pd = ibv_dealloc_pd,
    .reg_mr = real_reg_mr,
    .dereg_mr = ibv_dereg_mr,
    .create_comp_channel = ibv_create_comp_channel,
    .destroy_comp_channel = ibv_destroy_comp_channel,
    .create_cq = ibv_create_cq,
    .destroy_cq = ibv_destroy_cq,
    .req_notify_cq = real_req_notify_cq,
    .get_cq_event = ibv_get_cq_event,
    .ack_cq_events = ibv_ack_cq_events,
    .poll_cq = real_poll_cq,
    .create_qp = ibv_create_qp,
    .modify_qp = ibv_modify_qp,
    .destroy_qp = ibv_destroy_qp,
    .post_send = real_post_send,
    .post_recv = real_post_recv,
    .create_ah = ibv_create_ah,
    .destroy_ah = ibv_destroy_ah,
    .live_objects = NULL,
};

/* ---- 2 wire formats ------------------------------------------------------------------ */

#define IB_ADDR_MAGIC 0x49u         /* 'I': tp_addr slot holds an ib address */
#define IB_ADDR_BYTES 32            /* magic u8 | link u8 | mtu u8 | port u8 | lid u16 |
                                       pad u16 | cm_qpn u32 | qkey u32 | gid[16] */
#define IB_CM_MAGIC 0x4d434249u     /* "IBCM" */
#define IB_CM_BYTES 64              /* magic u32 | type u16 | pad u16 | comm_id u64 |
                                       from i32 | to i32 | qpn u32 | psn u32 | mac[32] */
#define IB_CM_LABEL "coll-ibcm"
#define IB_CREDIT_MAGIC 0x44524349u /* "ICRD" */
#define IB_BYE_MAGIC 0x45594249u    /* "IBYE": the sender failed; same size as a credit */
#define IB_CREDIT_BYTES 40          /* magic u32 | idx u32 | seq u64 | tag u32 | rkey u32 |
                                       len u64 | addr u64 */
#define IB_GRH_BYTES 40
#define IB_QKEY 0x11111111u

enum { CM_REQ = 1, CM_REP = 2, CM_RTU = 3 };

#define IB_CREDITS 16                     /* receives announced per peer at once */
#define IB_RQ_DEPTH (2 * IB_CREDITS + 4)  /* credits in + data in, with room */
#define IB_SQ_DEPTH 128
#define IB_CM_SLOTS 64
#define IB_INLINE_MAX 128                 /* data up to this goes inline */
#define IB_MAX_WRITE (1u << 30)           /* bytes per RDMA write; larger messages split */
#define IB_CM_RESEND_NS 200000000ull      /* REQ / REP again after 200 ms unanswered */
#define IB_KEEPALIVE_NS 1000000000ull     /* a silent peer we wait for is probed after 1 s */
#define IB_REG_CACHE_MAX 64               /* cached registrations nobody uses */
#define IB_REG_WINDOW (1u << 20)          /* registrations cover aligned 1 MiB windows */
#define IB_POLL_BATCH 32


struct ib_addr {
    uint8_t link;    /* IBV_LINK_LAYER_INFINIBAND or _ETHERNET */
    uint8_t mtu;     /* enum ibv_mtu */
    uint8_t port;
    uint16_t lid;
    uint32_t cm_qpn;
    uint32_t qkey;
    union ibv_gid gid;
};

static void addr_encode(uint8_t *p, const struct ib_addr *a)
{
    memset(p, 0, IB_ADDR_BYTES);
    p[0] = IB_ADDR_MAGIC;
    p[1] = a->link;
    p[2] = a->mtu;
    p[3] = a->port;
    put16(p + 4, a->lid);
    put32(p + 8, a->cm_qpn);
    put32(p + 12, a->qkey);
    memcpy(p + 16, a->gid.raw, 16);
}

static bool addr_decode(const uint8_t *p, struct ib_addr *a)
{
    a->link = p[1];
    a->mtu = p[2];
    a->port = p[3];
    a->lid = get16(p + 4);
    a->cm_qpn = get32(p + 8);
    a->qkey = get32(p + 12);
    memcpy(a->gid.raw, p + 16, 16);
    return p[0] == IB_ADDR_MAGIC &&
           (a->link == IBV_LINK_LAYER_INFINIBAND || a->link == IBV_LINK_LAYER_ETHERNET) &&
           a->mtu >= IBV_MTU_256 && a->mtu <= IBV_MTU_4096 && a->cm_qpn != 0 &&
           a->cm_qpn < (1u << 24);
}

struct ib_cm_msg {
    uint16_t type;
    uint64_t comm_id;
    int32_t from, to;
    uint32_t qpn, psn;
};

static void cm_mac(const uint8_t *secret, const uint8_t *msg, uint8_t mac[COLL_MAC_BYTES])
{
    uint8_t m[sizeof(IB_CM_LABEL) - 1 + 32];

    memcpy(m, IB_CM_LABEL, sizeof(IB_CM_LABEL) - 1);
    memcpy(m + sizeof(IB_CM_LABEL) - 1, msg, 32);
    coll__hmac_sha256(secret, COLL_SECRET_BYTES, m, sizeof(m), mac);
}

static void cm_encode(uint8_t *p, const struct ib_cm_msg *c, const uint8_t *secret)
{
    put32(p, IB_CM_MAGIC);
    put16(p + 4, c->type);
    put16(p + 6, 0);
    put64(p + 8, c->comm_id);
    put32(p + 16, (uint32_t)c->from);
    put32(p + 20, (uint32_t)c->to);
    put32(p + 24, c->qpn);
    put32(p + 28, c->psn);
    cm_mac(secret, p, p + 32);
}

static bool cm_decode(const uint8_t *p, struct ib_cm_msg *c, const uint8_t *secret)
{
    uint8_t mac[COLL_MAC_BYTES];

    if (get32(p) != IB_CM_MAGIC)
        return false;
    cm_mac(secret, p, mac);
    if (!coll__mac_equal(mac, p + 32, COLL_MAC_BYTES))
        return false;
    c->type = get16(p + 4);
    c->comm_id = get64(p + 8);
    c->from = (int32_t)get32(p + 16);
    c->to = (int32_t)get32(p + 20);
    c->qpn = get32(p + 24);
    c->psn = get32(p + 28);
    return true;
}

struct ib_credit {
    uint32_t idx, tag, rkey;
    uint64_t seq, len, addr;
};

static void credit_encode(uint8_t *p, const struct ib_credit *c)
{
    put32(p, IB_CREDIT_MAGIC);
    put32(p + 4, c->idx);
    put64(p + 8, c->seq);
    put32(p + 16, c->tag);
    put32(p + 20, c->rkey);
    put64(p + 24, c->len);
    put64(p + 32, c->addr);
}

static bool credit_decode(const uint8_t *p, struct ib_credit *c)
{
    c->idx = get32(p + 4);
    c->seq = get64(p + 8);
    c->tag = get32(p + 16);
    c->rkey = get32(p + 20);
    c->len = get64(p + 24);
    c->addr = get64(p + 32);
    return get32(p) == IB_CREDIT_MAGIC;
}

/* wr_id: kind << 56 | peer << 24 | slot */
enum { WR_CM_RECV = 1, WR_CM_SEND, WR_RECV, WR_CREDIT, WR_DATA, WR_DATA_PART, WR_PING };

static uint64_t wr_id(int kind, int peer, uint32_t slot)
{
    return (uint64_t)kind << 56 | (uint64_t)(uint32_t)peer << 24 | (slot & 0xffffff);
}

/* ---- 3 state ------------------------------------------------------------------------- */

struct ib_reg {
    uintptr_t lo, hi;
    int access;
    struct ibv_mr *mr;
    int refs;
    uint64_t last_use;
    struct ib_reg *next;
};

enum ib_link_state { LINK_REQ_SENT, LINK_REP_SENT, LINK_UP, LINK_DEAD };

/* A receive the executor posted, with what its credit announced. */
struct ib_rx {
    struct coll_xfer *x;
    struct ib_reg *reg;
    uint32_t idx;
};

/* A send, with the registration its payload uses. */
struct ib_tx {
    struct coll_xfer *x;
    struct ib_reg *reg;
    uint32_t idx;
    uint32_t wrs; /* work requests posted for it */
};

struct ib_ctx;

struct ib_link {
    struct coll_chan chan; /* first */
    struct ib_ctx *ctx;
    enum ib_link_state state;
    struct ibv_qp *qp;
    uint32_t psn, remote_qpn, remote_psn;
    uint64_t cm_sent_ns;
    /* receive slots for credits from the peer: IB_RQ_DEPTH x IB_CREDIT_BYTES, one MR */
    uint8_t *rbuf;
    struct ibv_mr *rmr;
    uint32_t sq_used;
    /* sends: tx[tx_head .. tx_head + tx_n) in order; the first tx_posted have their writes
     * posted. Credits received, not yet used: cr[cr_head .. cr_head + cr_n). */
    struct ib_tx tx[IB_SQ_DEPTH];
    uint32_t tx_head, tx_n, tx_posted, next_tx_idx;
    struct coll_xfer *txq_head, *txq_tail; /* posted by the executor beyond tx[] */
    struct ib_credit cr[IB_CREDITS];
    uint32_t cr_head, cr_n;
    /* receives: rx[rx_head .. rx_head + rx_n) in order, the first rx_credited announced */
    struct ib_rx rx[IB_CREDITS];
    uint32_t rx_head, rx_n;
    struct coll_xfer *rxq_head, *rxq_tail; /* posted beyond rx[] (no credit yet) */
    uint32_t next_rx_idx;
    uint64_t last_heard_ns;
    bool ping_out;
};

struct ib_ctx {
    struct coll_net *net;
    const struct coll_ib_ops *ops;
    void *dl;
    bool declined;
    char why[256];          /* declined: the reason, for probe's log and forced use */
    struct ibv_context *dev;
    char devname[64];
    struct ibv_pd *pd;
    struct ibv_comp_channel *chan;
    struct ibv_cq *cq;
    int cq_size;
    struct coll_pollent chan_pe;
    bool chan_registered;
    unsigned unacked_events;
    struct ib_addr self;
    int gid_index;
    uint32_t max_inline;
    uint32_t max_msg;
    int max_cqe;
    /* connection management */
    struct ibv_qp *ud;
    uint8_t *cm_buf;        /* IB_CM_SLOTS x (IB_GRH_BYTES + IB_CM_BYTES) */
    struct ibv_mr *cm_mr;
    uint32_t cm_sq_used;
    struct ibv_ah **ahs;    /* [nranks] */
    struct ib_link **links; /* [nranks] */
    int nranks;
    uint64_t nrejected;
    /* registration cache */
    struct ib_reg *regs;
    int nregs;
    bool shut;
    bool probe_logged;
};

/* ---- 4 device and port discovery ----------------------------------------------------- */

/* Does device:port pass COLL_IB_HCA? "mlx5_0:1,mlx5_1" (name prefixes, optional port),
 * "=mlx5_0" (exact names), "^mlx5_1" (all but these). */
static bool hca_allowed(const char *spec, const char *dev, int port)
{
    bool exclude = false, exact = false, match = false;
    char buf[256], *save = NULL;

    if (!spec || !*spec)
        return true;
    if (*spec == '^')
        exclude = true, spec++;
    if (*spec == '=')
        exact = true, spec++;
    snprintf(buf, sizeof(buf), "%s", spec);
    for (char *t = strtok_r(buf, ",", &save); t && !match; t = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(t, ':');
        int want_port = 0;
        if (colon) {
            *colon = '\0';
            want_port = atoi(colon + 1);
        }
        if (!*t)
            continue;
        if (exact ? strcmp(dev, t) != 0 : strncmp(dev, t, strlen(t)) != 0)
            continue;
        match = !want_port || want_port == port;
    }
    return exclude ? !match : match;
}

bool coll__ib_hca_allowed(const char *spec, const char *dev, int port)
{
    return hca_allowed(spec, dev, port);
}

COLL_PRINTF(2, 3)
static void decline(struct ib_ctx *ctx, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(ctx->why, sizeof(ctx->why), fmt, ap);
    va_end(ap);
    ctx->declined = true;
}

static bool gid_is_zero(const union ibv_gid *g)
{
    for (int i = 0; i < 16; i++)
        if (g->raw[i])
            return false;
    return true;
}

static bool gid_is_v4_mapped(const union ibv_gid *g)
{
    for (int i = 0; i < 10; i++)
        if (g->raw[i])
            return false;
    return g->raw[10] == 0xff && g->raw[11] == 0xff;
}

/* Choose the GID: COLL_IB_GID_INDEX, else on RoCE the first IPv4-mapped entry (RoCE v2 over
 * IPv4 is what routed Ethernet fabrics use), else entry 0. */
static bool pick_gid(struct ib_ctx *ctx, uint8_t port, const struct ibv_port_attr *pa)
{
    int64_t want = ctx->net->cfg->ib_gid_index;

    if (want >= 0) {
        if (want >= pa->gid_tbl_len ||
            ctx->ops->query_gid(ctx->dev, port, (int)want, &ctx->self.gid) ||
            gid_is_zero(&ctx->self.gid))
            return false;
        ctx->gid_index = (int)want;
        return true;
    }
    for (int i = 0; pa->link_layer == IBV_LINK_LAYER_ETHERNET && i < pa->gid_tbl_len; i++) {
        union ibv_gid g;
        if (ctx->ops->query_gid(ctx->dev, port, i, &g) == 0 && gid_is_v4_mapped(&g)) {
            ctx->self.gid = g;
            ctx->gid_index = i;
            return true;
        }
    }
    ctx->gid_index = 0;
    return ctx->ops->query_gid(ctx->dev, port, 0, &ctx->self.gid) == 0 &&
           (pa->link_layer != IBV_LINK_LAYER_ETHERNET || !gid_is_zero(&ctx->self.gid));
}

/* Open the first device:port that COLL_IB_HCA allows and that is active. */
static void discover(struct ib_ctx *ctx)
{
    const char *spec = ctx->net->cfg->ib_hca;
    struct ibv_device **list;
    int n = 0, seen = 0;

    list = ctx->ops->get_device_list(&n);
    if (!list || n == 0) {
        decline(ctx, "no RDMA device (%s)", list ? "none listed" : strerror(errno));
        if (list)
            ctx->ops->free_device_list(list);
        return;
    }
    for (int d = 0; d < n && !ctx->dev; d++) {
        const char *name = ctx->ops->get_device_name(list[d]);
        struct ibv_device_attr da;
        struct ibv_context *dev = ctx->ops->open_device(list[d]);

        if (!dev)
            continue;
        if (ctx->ops->query_device(dev, &da)) {
            ctx->ops->close_device(dev);
            continue;
        }
        for (int port = 1; port <= da.phys_port_cnt && !ctx->dev; port++) {
            struct ibv_port_attr pa;

            if (!hca_allowed(spec, name, port))
                continue;
            seen++;
            if (ctx->ops->query_port(dev, (uint8_t)port, &pa) || pa.state != IBV_PORT_ACTIVE)
                continue;
            if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND &&
                pa.link_layer != IBV_LINK_LAYER_ETHERNET)
                continue;
            if (pa.link_layer == IBV_LINK_LAYER_INFINIBAND && pa.lid == 0)
                continue;
            ctx->dev = dev;
            if (!pick_gid(ctx, (uint8_t)port, &pa)) {
                ctx->dev = NULL;
                continue;
            }
            snprintf(ctx->devname, sizeof(ctx->devname), "%s:%d", name, port);
            ctx->self.link = pa.link_layer;
            ctx->self.mtu = (uint8_t)pa.active_mtu;
            ctx->self.port = (uint8_t)port;
            ctx->self.lid = pa.lid;
            ctx->max_msg = pa.max_msg_sz && pa.max_msg_sz < IB_MAX_WRITE ? pa.max_msg_sz
                                                                          : IB_MAX_WRITE;
            ctx->max_cqe = da.max_cqe;
        }
        if (!ctx->dev)
            ctx->ops->close_device(dev);
    }
    ctx->ops->free_device_list(list);
    if (!ctx->dev)
        decline(ctx, "%s among %d device(s) (COLL_IB_HCA='%s')",
                seen ? "no active port with a usable address" : "no port matches", n, spec);
}

/* ---- 5 registration cache ------------------------------------------------------------ */

/* A registration covering [p, p + n) with at least `access`, made or reused; NULL with the
 * comm's message set on failure. A new one covers the IB_REG_WINDOW-aligned window around
 * the range when that memory is mapped (else whole pages, else the exact range), so that the
 * chunks of one large buffer share a few registrations. Entries nobody uses stay cached (up
 * to IB_REG_CACHE_MAX, least recently used dropped first). */
static struct ib_reg *reg_get(struct ib_ctx *ctx, const void *p, size_t n, int access)
{
    uintptr_t lo = (uintptr_t)p, hi = lo + n, page = (uintptr_t)sysconf(_SC_PAGESIZE);
    struct ib_reg *r;

    for (r = ctx->regs; r; r = r->next)
        if (r->lo <= lo && hi <= r->hi && (r->access & access) == access) {
            r->refs++;
            r->last_use = coll__now_ns();
            return r;
        }
    r = calloc(1, sizeof(*r));
    if (!r) {
        coll__error(ctx->net->comm, COLL_SYSTEM_ERROR, "out of memory for a registration");
        return NULL;
    }
    r->access = access;
    r->lo = lo & ~(uintptr_t)(IB_REG_WINDOW - 1);
    r->hi = (hi + IB_REG_WINDOW - 1) & ~(uintptr_t)(IB_REG_WINDOW - 1);
    r->mr = ctx->ops->reg_mr(ctx->pd, (void *)r->lo, r->hi - r->lo, access);
    if (!r->mr) {
        r->lo = lo & ~(page - 1);
        r->hi = (hi + page - 1) & ~(page - 1);
        r->mr = ctx->ops->reg_mr(ctx->pd, (void *)r->lo, r->hi - r->lo, access);
    }
    if (!r->mr && r->hi - r->lo > n) {
        /* the neighbouring pages may not be mapped: the exact range then */
        r->lo = lo;
        r->hi = hi;
        r->mr = ctx->ops->reg_mr(ctx->pd, (void *)lo, n, access);
    }
    if (!r->mr) {
        coll__sys_error(ctx->net->comm, errno, "ib: cannot register %zu bytes at %p on %s", n, p,
                        ctx->devname);
        free(r);
        return NULL;
    }
    r->refs = 1;
    r->last_use = coll__now_ns();
    r->next = ctx->regs;
    ctx->regs = r;
    ctx->nregs++;
    return r;
}

static void reg_drop(struct ib_ctx *ctx, struct ib_reg *victim)
{
    for (struct ib_reg **pp = &ctx->regs; *pp; pp = &(*pp)->next)
        if (*pp == victim) {
            *pp = victim->next;
            ctx->ops->dereg_mr(victim->mr);
            free(victim);
            ctx->nregs--;
            return;
        }
}

static void reg_put(struct ib_ctx *ctx, struct ib_reg *r)
{
    if (!r)
        return;
    r->refs--;
    while (ctx->nregs > IB_REG_CACHE_MAX) {
        struct ib_reg *old = NULL;
        for (struct ib_reg *e = ctx->regs; e; e = e->next)
            if (e->refs == 0 && (!old || e->last_use < old->last_use))
                old = e;
        if (!old)
            break;
        reg_drop(ctx, old);
    }
}

int coll__ib_cached_regs(const void *ctx)
{
    return ctx ? ((const struct ib_ctx *)ctx)->nregs : 0;
}

/* ---- 6 failure ----------------------------------------------------------------------- */

static const char *peer_host(const struct ib_ctx *ctx, int peer)
{
    return coll__peer_hostname(ctx->net, peer);
}

static coll_status_t failed_status(const struct ib_ctx *ctx)
{
    return coll__comm_failed_status(ctx->net);
}

static const char *wc_status_str(enum ibv_wc_status s)
{
    switch (s) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_LEN_ERR: return "local length error";
    case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "flushed (queue pair in error)";
    case IBV_WC_REM_INV_REQ_ERR: return "remote invalid request (message too long?)";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error (bad rkey or address)";
    case IBV_WC_REM_OP_ERR: return "remote operation error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded (peer gone?)";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "receiver-not-ready retry counter exceeded";
    default: return "error";
    }
}

static void link_fail_all(struct ib_link *l, coll_status_t st)
{
    struct ib_ctx *ctx = l->ctx;

    for (uint32_t i = 0; i < l->tx_n; i++) {
        struct ib_tx *t = &l->tx[(l->tx_head + i) % IB_SQ_DEPTH];
        atomic_store(&t->x->status, st);
        reg_put(ctx, t->reg);
    }
    l->tx_n = l->tx_posted = 0;
    for (struct coll_xfer *x = l->txq_head; x; x = x->next)
        atomic_store(&x->status, st);
    l->txq_head = l->txq_tail = NULL;
    for (uint32_t i = 0; i < l->rx_n; i++) {
        struct ib_rx *r = &l->rx[(l->rx_head + i) % IB_CREDITS];
        atomic_store(&r->x->status, st);
        reg_put(ctx, r->reg);
    }
    l->rx_n = 0;
    for (struct coll_xfer *x = l->rxq_head; x; x = x->next)
        atomic_store(&x->status, st);
    l->rxq_head = l->rxq_tail = NULL;
}

/* Say what failed (first error wins), fail the comm, which shuts every link down. */
COLL_PRINTF(3, 4)
static coll_status_t ib_fail(struct ib_ctx *ctx, coll_status_t st, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    st = coll__transport_failv(ctx->net, st, fmt, ap);
    va_end(ap);
    return st;
}

static void qp_to_error(struct ib_ctx *ctx, struct ibv_qp *qp)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    if (qp)
        ctx->ops->modify_qp(qp, &a, IBV_QP_STATE);
}

/* ---- 7 connection management --------------------------------------------------------- */

static struct ib_addr peer_addr(const struct ib_ctx *ctx, int peer, bool *ok_p)
{
    struct ib_addr a;
    int slot = coll__transport_index(&coll__ib_transport);

    memset(&a, 0, sizeof(a));
    *ok_p = ctx->net->peers && slot >= 0 && peer >= 0 && peer < ctx->net->nranks &&
            addr_decode(ctx->net->peers[peer].tp_addr[slot], &a);
    return a;
}

static void fill_ah(const struct ib_ctx *ctx, const struct ib_addr *pa, struct ibv_ah_attr *ah)
{
    memset(ah, 0, sizeof(*ah));
    ah->port_num = ctx->self.port;
    ah->dlid = pa->lid;
    if (ctx->self.link == IBV_LINK_LAYER_ETHERNET) {
        /* RoCE: routed by GID; every packet carries a GRH */
        ah->is_global = 1;
        ah->grh.dgid = pa->gid;
        ah->grh.sgid_index = (uint8_t)ctx->gid_index;
        ah->grh.hop_limit = 64;
    }
}

static coll_status_t cm_post_recv(struct ib_ctx *ctx, uint32_t slot)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)(ctx->cm_buf + (size_t)slot * (IB_GRH_BYTES + IB_CM_BYTES)),
        .length = IB_GRH_BYTES + IB_CM_BYTES,
        .lkey = ctx->cm_mr->lkey,
    };
    struct ibv_recv_wr wr = {.wr_id = wr_id(WR_CM_RECV, 0, slot), .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr *bad;
    int err = ctx->ops->post_recv(ctx->ud, &wr, &bad);

    if (err)
        return coll__sys_error(ctx->net->comm, err, "ib: cannot post a connection receive on %s",
                               ctx->devname);
    return COLL_SUCCESS;
}

/* Send a connection message to peer (best effort: datagrams are resent while unanswered). */
static void cm_send(struct ib_ctx *ctx, int peer, int type, const struct ib_link *l)
{
    struct ib_cm_msg m = {.type = (uint16_t)type, .comm_id = ctx->net->comm_id,
                          .from = ctx->net->rank, .to = peer, .qpn = l->qp->qp_num,
                          .psn = l->psn};
    uint8_t buf[IB_CM_BYTES];
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = IB_CM_BYTES};
    struct ibv_send_wr wr = {.wr_id = wr_id(WR_CM_SEND, peer, 0), .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
    struct ibv_send_wr *bad;
    bool ok;
    struct ib_addr pa = peer_addr(ctx, peer, &ok);

    if (!ok || ctx->cm_sq_used >= IB_CM_SLOTS)
        return;
    if (!ctx->ahs[peer]) {
        struct ibv_ah_attr ah;
        fill_ah(ctx, &pa, &ah);
        ctx->ahs[peer] = ctx->ops->create_ah(ctx->pd, &ah);
        if (!ctx->ahs[peer])
            return;
    }
    cm_encode(buf, &m, ctx->net->secret);
    wr.wr.ud.ah = ctx->ahs[peer];
    wr.wr.ud.remote_qpn = pa.cm_qpn;
    wr.wr.ud.remote_qkey = pa.qkey;
    if (ctx->ops->post_send(ctx->ud, &wr, &bad) == 0)
        ctx->cm_sq_used++;
}

static coll_status_t link_post_recv(struct ib_link *l, uint32_t slot)
{
    struct ib_ctx *ctx = l->ctx;
    struct ibv_sge sge = {.addr = (uintptr_t)(l->rbuf + (size_t)slot * IB_CREDIT_BYTES),
                          .length = IB_CREDIT_BYTES, .lkey = l->rmr->lkey};
    struct ibv_recv_wr wr = {.wr_id = wr_id(WR_RECV, l->chan.peer, slot), .sg_list = &sge,
                             .num_sge = 1};
    struct ibv_recv_wr *bad;
    int err = ctx->ops->post_recv(l->qp, &wr, &bad);

    if (err)
        return ib_fail(ctx, COLL_SYSTEM_ERROR, "ib: cannot post a receive for rank %d: %s",
                       l->chan.peer, strerror(err));
    return COLL_SUCCESS;
}

static void link_free(struct ib_ctx *ctx, struct ib_link *l)
{
    if (!l)
        return;
    if (l->qp)
        ctx->ops->destroy_qp(l->qp);
    if (l->rmr)
        ctx->ops->dereg_mr(l->rmr);
    free(l->rbuf);
    free(l);
}

/* A new link to peer: RC QP in INIT with its receives posted. */
static coll_status_t link_new(struct ib_ctx *ctx, int peer, struct ib_link **l_p)
{
    struct ibv_qp_init_attr qa = {
        .send_cq = ctx->cq, .recv_cq = ctx->cq, .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = IB_SQ_DEPTH, .max_recv_wr = IB_RQ_DEPTH, .max_send_sge = 1,
                .max_recv_sge = 1, .max_inline_data = IB_INLINE_MAX},
    };
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = ctx->self.port,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
    struct ib_link *l = calloc(1, sizeof(*l));
    uint32_t rnd;
    coll_status_t st;
    int err;

    if (!l)
        return coll__error(ctx->net->comm, COLL_SYSTEM_ERROR, "out of memory for a link");
    l->chan = (struct coll_chan){.tp = &coll__ib_transport, .net = ctx->net, .peer = peer};
    l->ctx = ctx;
    l->rbuf = calloc(IB_RQ_DEPTH, IB_CREDIT_BYTES);
    if (!l->rbuf) {
        st = coll__error(ctx->net->comm, COLL_SYSTEM_ERROR, "out of memory for a link");
        goto out_free;
    }
    l->rmr = ctx->ops->reg_mr(ctx->pd, l->rbuf, IB_RQ_DEPTH * IB_CREDIT_BYTES,
                              IBV_ACCESS_LOCAL_WRITE);
    if (!l->rmr) {
        st = coll__sys_error(ctx->net->comm, errno, "ib: cannot register receive slots on %s",
                             ctx->devname);
        goto out_free;
    }
    l->qp = ctx->ops->create_qp(ctx->pd, &qa);
    if (!l->qp) {
        st = coll__sys_error(ctx->net->comm, errno,
                             "ib: cannot create a queue pair to rank %d on %s", peer, ctx->devname);
        goto out_free;
    }
    if (qa.cap.max_inline_data < ctx->max_inline || !ctx->max_inline)
        ctx->max_inline = COLL_MIN(qa.cap.max_inline_data, IB_INLINE_MAX);
    err = ctx->ops->modify_qp(l->qp, &a,
                              IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (err) {
        st = coll__sys_error(ctx->net->comm, err, "ib: queue pair to rank %d: RESET -> INIT", peer);
        goto out_free;
    }
    for (uint32_t i = 0; i < IB_RQ_DEPTH; i++) {
        struct ibv_sge sge = {.addr = (uintptr_t)(l->rbuf + (size_t)i * IB_CREDIT_BYTES),
                              .length = IB_CREDIT_BYTES, .lkey = l->rmr->lkey};
        struct ibv_recv_wr wr = {.wr_id = wr_id(WR_RECV, peer, i), .sg_list = &sge,
                                 .num_sge = 1};
        struct ibv_recv_wr *bad;
        if ((err = ctx->ops->post_recv(l->qp, &wr, &bad))) {
            st = coll__sys_error(ctx->net->comm, err, "ib: cannot post receives for rank %d", peer);
            goto out_free;
        }
    }
    if (coll__random(&rnd, sizeof(rnd)) != COLL_SUCCESS)
        rnd = (uint32_t)coll__now_ns();
    l->psn = rnd & 0xffffff;
    l->last_heard_ns = coll__now_ns();
    *l_p = l;
    return COLL_SUCCESS;

out_free:
    link_free(ctx, l);
    return st;
}

/* INIT -> RTR -> RTS toward the peer's QP. */
static coll_status_t link_ready(struct ib_link *l, uint32_t remote_qpn, uint32_t remote_psn)
{
    struct ib_ctx *ctx = l->ctx;
    struct coll_net *net = ctx->net;
    int peer = l->chan.peer;
    struct ibv_qp_attr a;
    bool ok;
    struct ib_addr pa = peer_addr(ctx, peer, &ok);
    int err;

    if (!ok)
        return coll__error(net->comm, COLL_REMOTE_ERROR, "rank %d published no ib address", peer);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = (enum ibv_mtu)COLL_MIN(ctx->self.mtu, pa.mtu);
    a.dest_qp_num = remote_qpn;
    a.rq_psn = remote_psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12; /* 0.64 ms; in protocol no RNR happens (credits bound the peer) */
    fill_ah(ctx, &pa, &a.ah_attr);
    err = ctx->ops->modify_qp(l->qp, &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                  IBV_QP_MIN_RNR_TIMER);
    if (err)
        return coll__sys_error(net->comm, err, "ib: queue pair to rank %d (%s): INIT -> RTR", peer,
                               peer_host(ctx, peer));
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = (uint8_t)(net->cfg->ib_timeout > 0 ? net->cfg->ib_timeout : 20);
    a.retry_cnt = (uint8_t)COLL_MIN(COLL_MAX(net->cfg->ib_retry_cnt, 0), 7);
    a.rnr_retry = 7; /* infinite: a receiver-not-ready NAK only delays */
    a.sq_psn = l->psn;
    a.max_rd_atomic = 1;
    err = ctx->ops->modify_qp(l->qp, &a,
                              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (err)
        return coll__sys_error(net->comm, err, "ib: queue pair to rank %d (%s): RTR -> RTS", peer,
                               peer_host(ctx, peer));
    l->remote_qpn = remote_qpn;
    l->remote_psn = remote_psn;
    return COLL_SUCCESS;
}

static void cm_reject(struct ib_ctx *ctx, const char *why)
{
    if (ctx->nrejected++ == 0)
        COLL_WARN(COLL_SUB_NET,
                  "rank %d: ib: dropped a connection datagram: %s (further ones are counted)",
                  ctx->net->rank, why);
}

static void link_up(struct ib_link *l)
{
    l->state = LINK_UP;
    l->last_heard_ns = coll__now_ns();
    COLL_TRACE(COLL_SUB_NET, "rank %d: ib link to rank %d up (qp %u -> %u)", l->ctx->net->rank,
               l->chan.peer, l->qp->qp_num, l->remote_qpn);
}

static void cm_handle(struct ib_ctx *ctx, const uint8_t *p, uint32_t len)
{
    struct coll_net *net = ctx->net;
    struct ib_cm_msg m;
    struct ib_link *l;
    coll_status_t st;

    if (ctx->shut)
        return; /* answers to requests of a comm that has failed mean nothing */
    if (len != IB_GRH_BYTES + IB_CM_BYTES || !net->peers) {
        cm_reject(ctx, "wrong size or before the bootstrap");
        return;
    }
    if (!cm_decode(p + IB_GRH_BYTES, &m, net->secret)) {
        cm_reject(ctx, "not ours (magic or MAC)");
        return;
    }
    if (m.comm_id != net->comm_id || m.to != net->rank || m.from < 0 ||
        m.from >= net->nranks || m.from == net->rank || m.qpn == 0 || m.qpn >= (1u << 24) ||
        m.psn >= (1u << 24)) {
        cm_reject(ctx, "for another comm or rank, or malformed");
        return;
    }
    l = ctx->links[m.from];
    switch (m.type) {
    case CM_REQ: /* we are the higher rank */
        if (m.from > net->rank) {
            cm_reject(ctx, "request from a higher rank");
            return;
        }
        if (!l) {
            if ((st = link_new(ctx, m.from, &l)) != COLL_SUCCESS) {
                coll__net_fail(net, st);
                return;
            }
            ctx->links[m.from] = l;
            if ((st = link_ready(l, m.qpn, m.psn)) != COLL_SUCCESS) {
                coll__net_fail(net, st);
                return;
            }
            l->state = LINK_REP_SENT;
        } else if (l->remote_qpn != m.qpn) {
            cm_reject(ctx, "second request with another queue pair");
            return;
        }
        if (l->state == LINK_REP_SENT) {
            cm_send(ctx, m.from, CM_REP, l);
            l->cm_sent_ns = coll__now_ns();
        }
        break;
    case CM_REP: /* we are the lower rank */
        if (!l || m.from < net->rank) {
            cm_reject(ctx, "reply nobody asked for");
            return;
        }
        if (l->state == LINK_REQ_SENT) {
            if ((st = link_ready(l, m.qpn, m.psn)) != COLL_SUCCESS) {
                coll__net_fail(net, st);
                return;
            }
            link_up(l);
        } else if (l->remote_qpn != m.qpn) {
            cm_reject(ctx, "reply with another queue pair");
            return;
        }
        cm_send(ctx, m.from, CM_RTU, l); /* again for a repeated REP: our RTU was lost */
        break;
    case CM_RTU:
        if (!l || l->remote_qpn != m.qpn) {
            cm_reject(ctx, "ready-to-use for no link");
            return;
        }
        if (l->state == LINK_REP_SENT)
            link_up(l);
        break;
    default:
        cm_reject(ctx, "unknown type");
    }
}

/* ---- 8 credits and data -------------------------------------------------------------- */

static coll_status_t link_error_wr(struct ib_link *l, const char *what, int err)
{
    return ib_fail(l->ctx, COLL_SYSTEM_ERROR, "ib: cannot post %s to rank %d (%s): %s", what,
                   l->chan.peer, peer_host(l->ctx, l->chan.peer), strerror(err));
}

/* Announce as many posted receives as credits allow. */
static coll_status_t send_credits(struct ib_link *l)
{
    struct ib_ctx *ctx = l->ctx;

    while (l->rxq_head && l->rx_n < IB_CREDITS && l->sq_used < IB_SQ_DEPTH) {
        struct coll_xfer *x = l->rxq_head;
        struct ib_rx *r = &l->rx[(l->rx_head + l->rx_n) % IB_CREDITS];
        struct ib_credit c = {.idx = l->next_rx_idx, .seq = x->seq, .tag = x->tag,
                              .len = x->len};
        uint8_t buf[IB_CREDIT_BYTES];
        struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = IB_CREDIT_BYTES};
        struct ibv_send_wr wr = {.wr_id = wr_id(WR_CREDIT, l->chan.peer, 0), .sg_list = &sge,
                                 .num_sge = 1, .opcode = IBV_WR_SEND,
                                 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
        struct ibv_send_wr *bad;
        int err;

        *r = (struct ib_rx){.x = x, .idx = l->next_rx_idx};
        if (x->len > 0) {
            r->reg = reg_get(ctx, x->buf, x->len,
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
            if (!r->reg)
                return ib_fail(ctx, COLL_SYSTEM_ERROR, "%s", coll__thread_error());
            c.addr = (uintptr_t)x->buf;
            c.rkey = r->reg->mr->rkey;
        }
        credit_encode(buf, &c);
        if ((err = ctx->ops->post_send(l->qp, &wr, &bad))) {
            reg_put(ctx, r->reg);
            return link_error_wr(l, "a credit", err);
        }
        l->sq_used++;
        l->rxq_head = x->next;
        if (!l->rxq_head)
            l->rxq_tail = NULL;
        x->next = NULL;
        l->rx_n++;
        l->next_rx_idx++;
    }
    return COLL_SUCCESS;
}

/* Write every send that has a credit. */
static coll_status_t send_data(struct ib_link *l)
{
    struct ib_ctx *ctx = l->ctx;
    int peer = l->chan.peer;

    /* executor sends enter tx[] in order, as room allows */
    while (l->txq_head && l->tx_n < IB_SQ_DEPTH) {
        struct coll_xfer *x = l->txq_head;
        l->txq_head = x->next;
        if (!l->txq_head)
            l->txq_tail = NULL;
        x->next = NULL;
        l->tx[(l->tx_head + l->tx_n) % IB_SQ_DEPTH] = (struct ib_tx){.x = x,
                                                                    .idx = l->next_tx_idx++};
        l->tx_n++;
    }
    while (l->tx_posted < l->tx_n && l->cr_n > 0) {
        struct ib_tx *t = &l->tx[(l->tx_head + l->tx_posted) % IB_SQ_DEPTH];
        struct ib_credit *c = &l->cr[l->cr_head];
        struct coll_xfer *x = t->x;
        uint32_t pieces = x->len ? (uint32_t)((x->len + ctx->max_msg - 1) / ctx->max_msg) : 1;
        const uint64_t num_mask = (1ull << 48) - 1;

        if (c->idx != t->idx || c->seq != x->seq || c->tag != x->tag || c->len != x->len)
            return ib_fail(ctx, COLL_REMOTE_ERROR,
                           "rank %d (%s) expects message %u for op #%llu tag %u with %llu "
                           "bytes, this rank sends message %u for op #%llu tag %u with %zu "
                           "bytes%s: do all ranks call the same collectives with the same "
                           "counts?",
                           peer, peer_host(ctx, peer), c->idx,
                           (unsigned long long)(c->seq & num_mask), c->tag,
                           (unsigned long long)c->len, t->idx,
                           (unsigned long long)(x->seq & num_mask), x->tag, x->len,
                           (c->seq & ~num_mask) != (x->seq & ~num_mask)
                               ? " (the two ranks called it with different arguments)"
                               : "");
        if (l->sq_used + pieces > IB_SQ_DEPTH)
            break;
        if (x->len > ctx->max_inline && !t->reg) {
            t->reg = reg_get(ctx, x->buf, x->len, 0);
            if (!t->reg)
                return ib_fail(ctx, COLL_SYSTEM_ERROR, "%s", coll__thread_error());
        }
        for (uint32_t i = 0; i < pieces; i++) {
            size_t off = (size_t)i * ctx->max_msg;
            size_t n = COLL_MIN(x->len - off, (size_t)ctx->max_msg);
            bool last = i + 1 == pieces;
            struct ibv_sge sge = {.addr = (uintptr_t)x->buf + off, .length = (uint32_t)n,
                                  .lkey = t->reg ? t->reg->mr->lkey : 0};
            struct ibv_send_wr wr = {
                .wr_id = wr_id(last ? WR_DATA : WR_DATA_PART, peer, 0),
                .sg_list = &sge, .num_sge = n ? 1 : 0,
                .opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
                .send_flags = IBV_SEND_SIGNALED | (t->reg ? 0 : IBV_SEND_INLINE),
                .imm_data = htonl(t->idx),
            };
            struct ibv_send_wr *bad;
            int err;

            wr.wr.rdma.remote_addr = c->addr + off;
            wr.wr.rdma.rkey = c->rkey;
            if ((err = ctx->ops->post_send(l->qp, &wr, &bad)))
                return link_error_wr(l, "an RDMA write", err);
            l->sq_used++;
            t->wrs++;
        }
        l->cr_head = (l->cr_head + 1) % IB_CREDITS;
        l->cr_n--;
        l->tx_posted++;
    }
    return COLL_SUCCESS;
}

/* ---- 9 completions ------------------------------------------------------------------- */

static void wc_error(struct ib_ctx *ctx, const struct ibv_wc *wc, int kind, int peer)
{
    static const char *const what[] = {"?", "connection receive", "connection send",
                                       "receive", "credit", "RDMA write", "RDMA write",
                                       "keepalive"};

    if (ctx->shut || atomic_load(ctx->net->failed) != COLL_SUCCESS)
        return; /* flushes after a failure we already reported */
    if (kind == WR_CM_SEND || kind == WR_CM_RECV) {
        /* datagrams to a peer that is gone are its keepalive's business */
        cm_reject(ctx, wc_status_str(wc->status));
        return;
    }
    ib_fail(ctx, COLL_REMOTE_ERROR, "ib: %s %s rank %d (%s) failed: %s (status %d)",
            what[kind < 8 ? kind : 0], kind == WR_RECV ? "from" : "to", peer,
            peer_host(ctx, peer), wc_status_str(wc->status), (int)wc->status);
}

static void handle_recv(struct ib_ctx *ctx, struct ib_link *l, const struct ibv_wc *wc,
                        uint32_t slot)
{
    int peer = l->chan.peer;

    if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        struct ib_rx *r;
        uint32_t idx = ntohl(wc->imm_data);

        if (l->rx_n == 0) {
            ib_fail(ctx, COLL_REMOTE_ERROR,
                    "rank %d (%s) wrote message %u that no credit announced", peer,
                    peer_host(ctx, peer), idx);
            return;
        }
        r = &l->rx[l->rx_head];
        if (idx != r->idx || wc->byte_len != r->x->len) {
            ib_fail(ctx, COLL_REMOTE_ERROR,
                    "rank %d (%s) wrote message %u of %u bytes, expected message %u of %zu "
                    "bytes",
                    peer, peer_host(ctx, peer), idx, wc->byte_len, r->idx, r->x->len);
            return;
        }
        reg_put(ctx, r->reg);
        atomic_store(&r->x->status, COLL_SUCCESS); /* the executor's again */
        l->rx_head = (l->rx_head + 1) % IB_CREDITS;
        l->rx_n--;
    } else {
        struct ib_credit c;
        if (wc->byte_len == IB_CREDIT_BYTES &&
            get32(l->rbuf + (size_t)slot * IB_CREDIT_BYTES) == IB_BYE_MAGIC) {
            ib_fail(ctx, COLL_REMOTE_ERROR, "rank %d (%s) failed or aborted the communicator",
                    peer, peer_host(ctx, peer));
            return;
        }
        if (wc->byte_len != IB_CREDIT_BYTES ||
            !credit_decode(l->rbuf + (size_t)slot * IB_CREDIT_BYTES, &c)) {
            ib_fail(ctx, COLL_REMOTE_ERROR, "rank %d (%s) sent a malformed credit", peer,
                    peer_host(ctx, peer));
            return;
        }
        if (l->cr_n == IB_CREDITS) {
            ib_fail(ctx, COLL_REMOTE_ERROR, "rank %d (%s) sent more than %d credits", peer,
                    peer_host(ctx, peer), IB_CREDITS);
            return;
        }
        l->cr[(l->cr_head + l->cr_n) % IB_CREDITS] = c;
        l->cr_n++;
    }
    if (link_post_recv(l, slot) != COLL_SUCCESS)
        return;
    if (l->state == LINK_REP_SENT)
        link_up(l); /* the peer's QP works: its RTU was lost */
    if (send_credits(l) == COLL_SUCCESS)
        send_data(l);
}

static void handle_send(struct ib_ctx *ctx, struct ib_link *l, int kind)
{
    l->sq_used--;
    if (kind == WR_PING) {
        l->ping_out = false;
        return;
    }
    if (kind == WR_DATA) {
        struct ib_tx *t = &l->tx[l->tx_head];
        if (l->tx_posted == 0)
            return;
        reg_put(ctx, t->reg);
        atomic_store(&t->x->status, COLL_SUCCESS);
        l->tx_head = (l->tx_head + 1) % IB_SQ_DEPTH;
        l->tx_n--;
        l->tx_posted--;
    }
    if (send_credits(l) == COLL_SUCCESS)
        send_data(l);
}

static bool poll_cq(struct ib_ctx *ctx)
{
    struct ibv_wc wc[IB_POLL_BATCH];
    bool moved = false;
    int n;

    while ((n = ctx->ops->poll_cq(ctx->cq, IB_POLL_BATCH, wc)) > 0) {
        for (int i = 0; i < n; i++) {
            int kind = (int)(wc[i].wr_id >> 56);
            int peer = (int)((wc[i].wr_id >> 24) & 0xffffffff);
            uint32_t slot = (uint32_t)(wc[i].wr_id & 0xffffff);
            struct ib_link *l = NULL;

            moved = true;
            if (ctx->shut) {
                /* the comm failed: only keep the queue accounting straight */
                if (kind == WR_CM_SEND)
                    ctx->cm_sq_used--;
                else if (kind != WR_CM_RECV && kind != WR_RECV && peer >= 0 &&
                         peer < ctx->nranks && ctx->links[peer])
                    ctx->links[peer]->sq_used--;
                continue;
            }
            if (kind == WR_CM_SEND) {
                ctx->cm_sq_used--;
            } else if (kind != WR_CM_RECV) {
                if (peer < 0 || peer >= ctx->nranks || !(l = ctx->links[peer]))
                    continue;
                l->last_heard_ns = coll__now_ns();
                if (wc[i].status != IBV_WC_SUCCESS) {
                    if (kind != WR_RECV)
                        l->sq_used--;
                    wc_error(ctx, &wc[i], kind, peer);
                    continue;
                }
            }
            if (wc[i].status != IBV_WC_SUCCESS) {
                wc_error(ctx, &wc[i], kind, peer);
                continue;
            }
            switch (kind) {
            case WR_CM_RECV:
                cm_handle(ctx, ctx->cm_buf + (size_t)slot * (IB_GRH_BYTES + IB_CM_BYTES),
                          wc[i].byte_len);
                if (!ctx->shut && cm_post_recv(ctx, slot) != COLL_SUCCESS)
                    coll__net_fail(ctx->net, COLL_SYSTEM_ERROR);
                break;
            case WR_CM_SEND:
                break;
            case WR_RECV:
                handle_recv(ctx, l, &wc[i], slot);
                break;
            default:
                handle_send(ctx, l, kind);
            }
        }
    }
    if (n < 0 && !ctx->shut)
        ib_fail(ctx, COLL_SYSTEM_ERROR, "ib: polling the completion queue of %s failed",
                ctx->devname);
    return moved;
}

static void chan_cb(struct coll_pollent *pe, uint32_t events)
{
    struct ib_ctx *ctx = pe->arg;
    struct ibv_cq *cq;
    void *cq_ctx;

    (void)events;
    while (ctx->ops->get_cq_event(ctx->chan, &cq, &cq_ctx) == 0)
        ctx->unacked_events++;
    if (ctx->unacked_events) {
        ctx->ops->ack_cq_events(ctx->cq, ctx->unacked_events);
        ctx->unacked_events = 0;
    }
    poll_cq(ctx);
}

/* ---- 10 entry points ----------------------------------------------------------------- */

static bool ib_probe(void *arg, int peer)
{
    struct ib_ctx *ctx = arg;
    struct ib_addr pa;
    bool ok;

    if (!ctx)
        return false;
    if (ctx->declined) {
        if (!ctx->probe_logged)
            COLL_INFO(COLL_SUB_NET, "rank %d: ib transport declines: %s", ctx->net->rank,
                      ctx->why);
        ctx->probe_logged = true;
        return false;
    }
    pa = peer_addr(ctx, peer, &ok);
    /* both ends on the same kind of fabric: LIDs do not route to GIDs */
    return ok && pa.link == ctx->self.link;
}

static coll_status_t load_ops(struct ib_ctx *ctx)
{
    const char *fake = ctx->net->cfg->ib_fake;
    coll_ib_fake_entry_fn entry;

    if (!fake[0]) {
        ctx->ops = &ib_real_ops;
        return COLL_SUCCESS;
    }
    ctx->dl = dlopen(fake, RTLD_NOW | RTLD_LOCAL);
    if (!ctx->dl)
        return coll__error(ctx->net->comm, COLL_INVALID_ARGUMENT,
                           "COLL_IB_FAKE='%s' cannot be loaded: %s", fake, dlerror());
    *(void **)&entry = dlsym(ctx->dl, COLL_IB_FAKE_SYMBOL);
    if (!entry || !(ctx->ops = entry())) {
        dlclose(ctx->dl);
        ctx->dl = NULL;
        return coll__error(ctx->net->comm, COLL_INVALID_ARGUMENT,
                           "COLL_IB_FAKE='%s' has no %s", fake, COLL_IB_FAKE_SYMBOL);
    }
    return COLL_SUCCESS;
}

static void ib_fini(void *arg);

/* PD, completion channel and CQ, the UD queue pair of connection management. */
static coll_status_t open_resources(struct ib_ctx *ctx)
{
    struct coll_net *net = ctx->net;
    struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_UD,
                                  .cap = {.max_send_wr = IB_CM_SLOTS, .max_recv_wr = IB_CM_SLOTS,
                                          .max_send_sge = 1, .max_recv_sge = 1,
                                          .max_inline_data = IB_CM_BYTES}};
    struct ibv_qp_attr a;
    struct epoll_event ev;
    int err, flags;

    ctx->pd = ctx->ops->alloc_pd(ctx->dev);
    if (!ctx->pd)
        return coll__sys_error(net->comm, errno, "ib: cannot allocate a protection domain on %s",
                               ctx->devname);
    ctx->chan = ctx->ops->create_comp_channel(ctx->dev);
    if (!ctx->chan)
        return coll__sys_error(net->comm, errno, "ib: cannot create a completion channel on %s",
                               ctx->devname);
    /* every link's queues, and the connection QP's */
    ctx->cq_size = net->nranks * (IB_SQ_DEPTH + IB_RQ_DEPTH) + 2 * IB_CM_SLOTS;
    if (ctx->max_cqe > 0 && ctx->cq_size > ctx->max_cqe)
        ctx->cq_size = ctx->max_cqe; /* enough unless every peer has full queues at once */
    ctx->cq = ctx->ops->create_cq(ctx->dev, ctx->cq_size, ctx, ctx->chan, 0);
    if (!ctx->cq)
        return coll__sys_error(net->comm, errno, "ib: cannot create a completion queue of %d on %s",
                               ctx->cq_size, ctx->devname);
    flags = fcntl(ctx->chan->fd, F_GETFL);
    if (flags < 0 || fcntl(ctx->chan->fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return coll__sys_error(net->comm, errno, "ib: completion channel of %s", ctx->devname);
    ctx->chan_pe = (struct coll_pollent){.cb = chan_cb, .arg = ctx};
    ev = (struct epoll_event){.events = EPOLLIN, .data.ptr = &ctx->chan_pe};
    if (epoll_ctl(net->epfd, EPOLL_CTL_ADD, ctx->chan->fd, &ev) < 0)
        return coll__sys_error(net->comm, errno, "ib: epoll_ctl for the completion channel");
    ctx->chan_registered = true;
    qa.send_cq = qa.recv_cq = ctx->cq;
    ctx->ud = ctx->ops->create_qp(ctx->pd, &qa);
    if (!ctx->ud)
        return coll__sys_error(net->comm, errno, "ib: cannot create the connection QP on %s",
                               ctx->devname);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = ctx->self.port;
    a.qkey = IB_QKEY;
    if ((err = ctx->ops->modify_qp(ctx->ud, &a,
                                   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)))
        return coll__sys_error(net->comm, err, "ib: connection QP: RESET -> INIT");
    a.qp_state = IBV_QPS_RTR;
    if ((err = ctx->ops->modify_qp(ctx->ud, &a, IBV_QP_STATE)))
        return coll__sys_error(net->comm, err, "ib: connection QP: INIT -> RTR");
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    if ((err = ctx->ops->modify_qp(ctx->ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)))
        return coll__sys_error(net->comm, err, "ib: connection QP: INIT -> RTS");
    ctx->cm_buf = calloc(IB_CM_SLOTS, IB_GRH_BYTES + IB_CM_BYTES);
    if (!ctx->cm_buf)
        return coll__error(net->comm, COLL_SYSTEM_ERROR, "out of memory for the ib transport");
    ctx->cm_mr = ctx->ops->reg_mr(ctx->pd, ctx->cm_buf, IB_CM_SLOTS * (IB_GRH_BYTES + IB_CM_BYTES),
                                  IBV_ACCESS_LOCAL_WRITE);
    if (!ctx->cm_mr)
        return coll__sys_error(net->comm, errno, "ib: cannot register connection buffers");
    for (uint32_t i = 0; i < IB_CM_SLOTS; i++) {
        coll_status_t st = cm_post_recv(ctx, i);
        if (st != COLL_SUCCESS)
            return st;
    }
    if ((err = ctx->ops->req_notify_cq(ctx->cq, 0)))
        return coll__sys_error(net->comm, err, "ib: cannot arm the completion queue");
    ctx->self.cm_qpn = ctx->ud->qp_num;
    ctx->self.qkey = IB_QKEY;
    return COLL_SUCCESS;
}

static coll_status_t ib_init(struct coll_net *net, void **ctx_p)
{
    bool forced = !strcmp(net->cfg->transport, "ib");
    int slot = coll__transport_index(&coll__ib_transport);
    struct ib_ctx *ctx;
    coll_status_t st;

    if (slot < 0)
        return coll__error(net->comm, COLL_INTERNAL_ERROR, "ib transport is not registered");
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return coll__error(net->comm, COLL_SYSTEM_ERROR, "out of memory for the ib transport");
    ctx->net = net;
    ctx->nranks = net->nranks;
    ctx->links = calloc((size_t)net->nranks, sizeof(*ctx->links));
    ctx->ahs = calloc((size_t)net->nranks, sizeof(*ctx->ahs));
    if (!ctx->links || !ctx->ahs) {
        st = coll__error(net->comm, COLL_SYSTEM_ERROR, "out of memory for the ib transport");
        goto out_fini;
    }
    COLL_CHECK_GOTO(load_ops(ctx), st, out_fini);
    discover(ctx);
    if (ctx->declined) {
        if (forced) {
            st = coll__error(net->comm, COLL_SYSTEM_ERROR,
                             "COLL_TRANSPORT=ib, but the ib transport cannot run here: %s",
                             ctx->why);
            goto out_fini;
        }
        /* not an error: this binary runs where there is no RDMA too */
        COLL_INFO(COLL_SUB_NET, "rank %d: ib transport declines: %s", net->rank, ctx->why);
        *ctx_p = ctx;
        return COLL_SUCCESS;
    }
    COLL_CHECK_GOTO(open_resources(ctx), st, out_fini);
    memset(net->self->tp_addr[slot], 0, COLL_TP_ADDR_MAX);
    addr_encode(net->self->tp_addr[slot], &ctx->self);
    COLL_INFO(COLL_SUB_NET, "rank %d: ib on %s (%s, %s, lid %u, gid index %d, mtu %d) via %s",
              net->rank, ctx->devname,
              ctx->self.link == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
              ctx->self.link == IBV_LINK_LAYER_ETHERNET ? "GRH" : "LID", ctx->self.lid,
              ctx->gid_index, 128 << ctx->self.mtu, ctx->ops->name);
    *ctx_p = ctx;
    return COLL_SUCCESS;

out_fini:
    ib_fini(ctx);
    return st;
}

static coll_status_t ib_connect(void *arg, int peer, struct coll_chan **chan_p)
{
    struct ib_ctx *ctx = arg;
    struct coll_net *net = ctx->net;
    struct ib_link *l;
    coll_status_t st;

    if (ctx->shut || atomic_load(net->failed) != COLL_SUCCESS)
        return failed_status(ctx);
    if (ctx->declined || peer < 0 || peer >= net->nranks || peer == net->rank || !net->peers)
        return coll__error(net->comm, COLL_INTERNAL_ERROR, "ib: no channel from rank %d to rank %d",
                           net->rank, peer);
    poll_cq(ctx); /* a REQ or REP may be waiting */
    l = ctx->links[peer];
    if (!l && net->rank < peer) {
        bool ok;
        peer_addr(ctx, peer, &ok);
        if (!ok)
            return ib_fail(ctx, COLL_REMOTE_ERROR, "rank %d (%s) published no ib address", peer,
                           peer_host(ctx, peer));
        if ((st = link_new(ctx, peer, &l)) != COLL_SUCCESS) {
            coll__net_fail(net, st);
            return st;
        }
        ctx->links[peer] = l;
        l->state = LINK_REQ_SENT;
        cm_send(ctx, peer, CM_REQ, l);
        l->cm_sent_ns = coll__now_ns();
    }
    if (atomic_load(net->failed) != COLL_SUCCESS)
        return failed_status(ctx);
    if (l && l->state == LINK_UP)
        *chan_p = &l->chan;
    return COLL_SUCCESS;
}

static coll_status_t ib_post(struct coll_chan *ch, struct coll_xfer *x, bool send)
{
    struct ib_link *l = (struct ib_link *)ch;
    struct ib_ctx *ctx = l->ctx;
    coll_status_t st;

    if (ctx->shut || l->state != LINK_UP || atomic_load(ctx->net->failed)) {
        st = failed_status(ctx);
        atomic_store(&x->status, st);
        return st;
    }
    x->next = NULL;
    if (send) {
        if (l->txq_tail)
            l->txq_tail->next = x;
        else
            l->txq_head = x;
        l->txq_tail = x;
        st = send_data(l);
    } else {
        if (l->rxq_tail)
            l->rxq_tail->next = x;
        else
            l->rxq_head = x;
        l->rxq_tail = x;
        st = send_credits(l);
    }
    if (st != COLL_SUCCESS)
        atomic_store(&x->status, st);
    return st;
}

static coll_status_t ib_post_send(struct coll_chan *ch, struct coll_xfer *x)
{
    return ib_post(ch, x, true);
}

static coll_status_t ib_post_recv(struct coll_chan *ch, struct coll_xfer *x)
{
    return ib_post(ch, x, false);
}

/* Completions, connection datagrams to repeat, and silent peers to probe. */
static bool ib_progress(void *arg)
{
    struct ib_ctx *ctx = arg;
    uint64_t now;
    bool moved;

    if (!ctx || ctx->declined || ctx->shut)
        return false;
    moved = poll_cq(ctx);
    now = coll__now_ns();
    for (int p = 0; p < ctx->nranks && !ctx->shut; p++) {
        struct ib_link *l = ctx->links[p];

        if (!l)
            continue;
        if ((l->state == LINK_REQ_SENT || l->state == LINK_REP_SENT) &&
            now - l->cm_sent_ns > IB_CM_RESEND_NS) {
            cm_send(ctx, p, l->state == LINK_REQ_SENT ? CM_REQ : CM_REP, l);
            l->cm_sent_ns = now;
        }
        if (l->state == LINK_UP && !l->ping_out && l->sq_used < IB_SQ_DEPTH &&
            (l->rx_n || l->tx_n) && now - l->last_heard_ns > IB_KEEPALIVE_NS) {
            /* a zero-length write needs no memory on either side; it fails with
             * retry-exceeded when the peer's queue pair is gone or in error */
            struct ibv_send_wr wr = {.wr_id = wr_id(WR_PING, p, 0), .opcode = IBV_WR_RDMA_WRITE,
                                     .send_flags = IBV_SEND_SIGNALED};
            struct ibv_send_wr *bad;
            if (ctx->ops->post_send(l->qp, &wr, &bad) == 0) {
                l->sq_used++;
                l->ping_out = true;
                l->last_heard_ns = now;
            }
        }
    }
    return moved;
}

/* Before the engine sleeps: ask for an event on the next completion, then look once more
 * (a completion that came before the request raises no event). */
static bool ib_arm(void *arg)
{
    struct ib_ctx *ctx = arg;

    if (!ctx || ctx->declined || ctx->shut)
        return false;
    ctx->ops->req_notify_cq(ctx->cq, 0);
    return poll_cq(ctx);
}

static void ib_disarm(void *arg)
{
    (void)arg; /* the next arm asks again; an event that came meanwhile is harmless */
}

/* Tell the peer this rank failed (best effort: it learns from retry-exceeded otherwise). */
static void send_bye(struct ib_link *l)
{
    struct ib_ctx *ctx = l->ctx;
    uint8_t buf[IB_CREDIT_BYTES] = {0};
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = IB_CREDIT_BYTES};
    struct ibv_send_wr wr = {.wr_id = wr_id(WR_CREDIT, l->chan.peer, 0), .sg_list = &sge,
                             .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
    struct ibv_send_wr *bad;

    put32(buf, IB_BYE_MAGIC);
    if (l->sq_used < IB_SQ_DEPTH && ctx->ops->post_send(l->qp, &wr, &bad) == 0)
        l->sq_used++;
}

/* Comm failure or abort. The QPs stay up until fini so that the goodbyes leave, but every
 * user buffer is deregistered at once: a peer's write still on its way fails at the peer
 * (remote access error) instead of landing in memory the caller owns again. */
static void ib_shutdown(void *arg)
{
    struct ib_ctx *ctx = arg;
    coll_status_t st;

    if (!ctx || ctx->shut)
        return;
    st = failed_status(ctx);
    ctx->shut = true;
    for (int p = 0; ctx->links && p < ctx->nranks; p++) {
        struct ib_link *l = ctx->links[p];
        if (!l)
            continue;
        if (l->state == LINK_UP)
            send_bye(l);
        link_fail_all(l, st);
        l->state = LINK_DEAD;
    }
    while (ctx->regs)
        reg_drop(ctx, ctx->regs);
}

static void ib_fini(void *arg)
{
    struct ib_ctx *ctx = arg;

    if (!ctx)
        return;
    for (int p = 0; ctx->links && p < ctx->nranks; p++) {
        if (!ctx->links[p])
            continue;
        /* destroying the QP (after its queues were failed) is what peers see */
        qp_to_error(ctx, ctx->links[p]->qp);
        link_fail_all(ctx->links[p], failed_status(ctx));
        link_free(ctx, ctx->links[p]);
    }
    if (ctx->ahs && ctx->ops)
        for (int p = 0; p < ctx->nranks; p++)
            if (ctx->ahs[p])
                ctx->ops->destroy_ah(ctx->ahs[p]);
    while (ctx->regs)
        reg_drop(ctx, ctx->regs);
    if (ctx->ud)
        ctx->ops->destroy_qp(ctx->ud);
    if (ctx->cm_mr)
        ctx->ops->dereg_mr(ctx->cm_mr);
    free(ctx->cm_buf);
    if (ctx->chan_registered)
        epoll_ctl(ctx->net->epfd, EPOLL_CTL_DEL, ctx->chan->fd, NULL);
    if (ctx->cq) {
        struct ibv_cq *cq;
        void *cq_ctx;
        /* events read must be acknowledged before the CQ can be destroyed */
        while (ctx->ops->get_cq_event(ctx->chan, &cq, &cq_ctx) == 0)
            ctx->unacked_events++;
        if (ctx->unacked_events)
            ctx->ops->ack_cq_events(ctx->cq, ctx->unacked_events);
        ctx->ops->destroy_cq(ctx->cq);
    }
    if (ctx->chan)
        ctx->ops->destroy_comp_channel(ctx->chan);
    if (ctx->pd)
        ctx->ops->dealloc_pd(ctx->pd);
    if (ctx->dev)
        ctx->ops->close_device(ctx->dev);
    if (ctx->dl)
        dlclose(ctx->dl);
    free(ctx->links);
    free(ctx->ahs);
    free(ctx);
}

/* Test hooks: the verbs table in use (for the emulator's leak count) and the dropped
 * connection datagrams. */
const struct coll_ib_ops *coll__ib_ops(const void *ctx)
{
    return ctx ? ((const struct ib_ctx *)ctx)->ops : NULL;
}

uint64_t coll__ib_rejected(const void *ctx)
{
    return ctx ? ((const struct ib_ctx *)ctx)->nrejected : 0;
}

const struct coll_transport coll__ib_transport = {
    .name = "ib",
    .probe = ib_probe,
    .init = ib_init,
    .connect = ib_connect,
    .post_send = ib_post_send,
    .post_recv = ib_post_recv,
    .progress = ib_progress,
    .arm = ib_arm,
    .disarm = ib_disarm,
    .shutdown = ib_shutdown,
    .fini = ib_fini,
};
