/*
 * tcp.c - the TCP transport: one non-blocking socket per pair of ranks, driven by the
 * engine's epoll, authenticated by a handshake, carrying framed messages that land
 * straight in the posted receive buffers.
 *
 * Divisions: 1 wire format, 2 state, 3 small helpers, 4 failure, 5 sending, 6 receiving,
 * 7 connector handshake, 8 acceptor handshake, listener and timer, 9 entry points.
 *
 * Connections. The lower rank of a pair connects to the higher rank's listener; the
 * acceptor sends a 16-byte nonce, the connector answers
 *   magic u32 | comm_id u64 | from i32 | to i32 | HMAC(secret, "coll-data" | nonce |
 *                                                       comm_id | from | to)
 * and the acceptor checks all of it before the connection becomes the channel of `from`.
 * A connection that fails (junk, wrong secret or comm, duplicate, silence) is closed and
 * counted, and disturbs nothing else. The connector's channel is usable as soon as its
 * answer is written: its first frames simply follow the answer in the stream.
 *
 * Frames. header (40 bytes, little-endian) | payload:
 *   magic u32 | type u16 | flags u16 | tag u32 | src_rank i32 | comm_id u64 | seq u64 |
 *   len u64
 * A receive checks the header against the head posted receive (seq, tag, len); nothing is
 * read from a socket without a posted receive to read it into, so unexpected data waits in
 * the kernel (TCP flow control is the backpressure) and a length from the wire is never
 * trusted for memory.
 *
 * epoll. Level-triggered. EPOLLIN is on while a receive is posted (switched off lazily,
 * when it fires with nothing posted); EPOLLOUT only while a send is blocked; EPOLLRDHUP
 * always, to notice a peer that leaves. A struct tcp_conn is freed only inside its own
 * callback (a refused handshake) or in fini, never while another fd's callback runs: the
 * engine may hold an event for it later in the same epoll_wait batch. A handshake that
 * times out is therefore shut down (which wakes its own callback), not freed, by the timer.
 */
#include "../core/bootstrap.h"
#include "sys.h"
#include "transport.h"

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- 1 wire format ------------------------------------------------------------------- */

#define TCP_HS_MAGIC 0x31534843u    /* "CHS1" */
#define TCP_FRAME_MAGIC 0x31464443u /* "CDF1" */
#define TCP_TYPE_DATA 1
#define TCP_NONCE_BYTES 16
#define TCP_HS_BYTES (4 + 8 + 4 + 4 + COLL_MAC_BYTES) /* 52 */
#define TCP_HDR_BYTES 40
#define TCP_HS_LABEL "coll-data"
#define TCP_HS_LABEL_BYTES 9

#define TCP_HS_TIMEOUT_MS 5000 /* at most; COLL_TIMEOUT_MS if shorter */
#define TCP_IOV_MAX 64         /* iovecs per sendmsg: up to 32 messages at once */
#define TCP_MAX_STRANGERS 64   /* handshakes in progress, beyond nranks */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

struct tcp_hdr {
    uint32_t magic;
    uint16_t type, flags;
    uint32_t tag;
    int32_t src_rank;
    uint64_t comm_id, seq, len;
};

static void hdr_encode(uint8_t *p, const struct tcp_hdr *h)
{
    put32(p, h->magic);
    p[4] = (uint8_t)h->type, p[5] = (uint8_t)(h->type >> 8);
    p[6] = (uint8_t)h->flags, p[7] = (uint8_t)(h->flags >> 8);
    put32(p + 8, h->tag);
    put32(p + 12, (uint32_t)h->src_rank);
    put64(p + 16, h->comm_id);
    put64(p + 24, h->seq);
    put64(p + 32, h->len);
}

static void hdr_decode(const uint8_t *p, struct tcp_hdr *h)
{
    h->magic = get32(p);
    h->type = (uint16_t)(p[4] | p[5] << 8);
    h->flags = (uint16_t)(p[6] | p[7] << 8);
    h->tag = get32(p + 8);
    h->src_rank = (int32_t)get32(p + 12);
    h->comm_id = get64(p + 16);
    h->seq = get64(p + 24);
    h->len = get64(p + 32);
}

/* HMAC(secret, "coll-data" | nonce | comm_id | from | to) */
static void hs_mac(const uint8_t *secret, const uint8_t *nonce, uint64_t comm_id, int32_t from,
                   int32_t to, uint8_t mac[COLL_MAC_BYTES])
{
    uint8_t m[TCP_HS_LABEL_BYTES + TCP_NONCE_BYTES + 8 + 4 + 4];

    memcpy(m, TCP_HS_LABEL, TCP_HS_LABEL_BYTES);
    memcpy(m + TCP_HS_LABEL_BYTES, nonce, TCP_NONCE_BYTES);
    put64(m + TCP_HS_LABEL_BYTES + TCP_NONCE_BYTES, comm_id);
    put32(m + TCP_HS_LABEL_BYTES + TCP_NONCE_BYTES + 8, (uint32_t)from);
    put32(m + TCP_HS_LABEL_BYTES + TCP_NONCE_BYTES + 12, (uint32_t)to);
    coll__hmac_sha256(secret, COLL_SECRET_BYTES, m, sizeof(m), mac);
}

/* ---- 2 state ------------------------------------------------------------------------- */

enum tcp_state {
    TCP_CONNECTING, /* connector: connect(2) in flight */
    TCP_HS_NONCE,   /* connector: reading the acceptor's nonce */
    TCP_HS_ANSWER,  /* connector: writing its answer */
    TCP_HS_SEND,    /* acceptor: nonce not yet fully written */
    TCP_HS_WAIT,    /* acceptor: reading the connector's answer */
    TCP_UP,         /* the channel of chan.peer */
    TCP_EOF,        /* peer left with nothing pending; fd kept, data may remain */
    TCP_DEAD,       /* fd closed: failed or shut down */
};

struct tcp_ctx;

struct tcp_conn {
    struct coll_chan chan; /* first: what the executor holds */
    struct tcp_ctx *ctx;
    struct coll_pollent pe;
    int fd;
    enum tcp_state state;
    bool registered; /* in epfd */
    uint32_t events; /* as registered */
    int eof_err;     /* TCP_EOF: errno the socket reported, 0 for a FIN */

    /* handshake */
    uint8_t nonce[TCP_NONCE_BYTES];
    uint8_t hs[TCP_HS_BYTES]; /* the answer, sent or received */
    size_t hs_off;
    uint64_t deadline_ns; /* acceptor: handshake must be done by then */
    bool expired;
    char where[64];               /* acceptor: remote address, for messages */
    struct tcp_conn *prev, *next; /* acceptor: in ctx's pending list until accepted */

    /* transfers, FIFO; x->off counts header + payload bytes moved */
    struct coll_xfer *sq_head, *sq_tail;
    struct coll_xfer *rq_head, *rq_tail;
    uint8_t rhdr[TCP_HDR_BYTES]; /* header of the message at rq_head */
};

struct tcp_ctx {
    struct coll_comm *comm;
    int listen_fd, timer_fd;
    struct coll_pollent listen_pe, timer_pe;
    char where[64];          /* our listen address */
    struct tcp_conn **conns; /* [nranks]: the connection to each peer, once started */
    int nranks;
    struct tcp_conn *pend_head, *pend_tail; /* accepted, handshake not done (FIFO) */
    int npending;
    uint64_t hs_timeout_ns;
    uint64_t timer_at; /* armed for this time, 0 when disarmed */
    uint64_t nrejected;
    bool shut;
};

/* ---- 3 small helpers ----------------------------------------------------------------- */

static void conn_cb(struct coll_pollent *pe, uint32_t events);

static bool tcp_probe(struct coll_comm *comm, int peer)
{
    const struct coll_peer_info *p;
    sa_family_t family;

    if (!comm->peers || peer < 0 || peer >= comm->nranks)
        return false;
    p = &comm->peers[peer];
    if (p->addr_len < sizeof(family) || p->addr_len > COLL_ADDR_MAX)
        return false;
    memcpy(&family, p->addr, sizeof(family));
    return (family == AF_INET && p->addr_len >= sizeof(struct sockaddr_in)) ||
           (family == AF_INET6 && p->addr_len >= sizeof(struct sockaddr_in6));
}

static const char *peer_host(const struct tcp_ctx *ctx, int peer)
{
    const struct coll_comm *comm = ctx->comm;
    if (comm->peers && peer >= 0 && peer < comm->nranks)
        return comm->peers[peer].hostname;
    return "?";
}

static coll_status_t failed_status(const struct tcp_ctx *ctx)
{
    int st = atomic_load(&ctx->comm->failed);
    return st != COLL_SUCCESS ? (coll_status_t)st : COLL_REMOTE_ERROR;
}

/* Register c in epfd with exactly these events (RDHUP is always wanted). */
static int conn_watch(struct tcp_conn *c, uint32_t events)
{
    struct epoll_event ev = {.events = events | EPOLLRDHUP, .data.ptr = &c->pe};

    if (c->registered && c->events == ev.events)
        return 0;
    if (coll__sys.epoll_ctl(c->ctx->comm->epfd, c->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD,
                            c->fd, &ev) < 0)
        return errno;
    c->registered = true;
    c->events = ev.events;
    return 0;
}

static void conn_unwatch(struct tcp_conn *c)
{
    if (c->registered && c->fd >= 0)
        coll__sys.epoll_ctl(c->ctx->comm->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    c->registered = false;
    c->events = 0;
}

static void conn_close_fd(struct tcp_conn *c)
{
    conn_unwatch(c);
    if (c->fd >= 0) {
        coll__sys.shutdown(c->fd, SHUT_RDWR);
        coll__sys.close(c->fd);
    }
    c->fd = -1;
}

static void set_sockopts(struct tcp_ctx *ctx, int fd)
{
    int one = 1;

    coll__sys.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (ctx->comm->cfg.sockbuf_bytes > 0) {
        int n = (int)COLL_MIN(ctx->comm->cfg.sockbuf_bytes, (int64_t)INT_MAX / 2);
        /* best effort: the kernel clamps to net.core.[rw]mem_max anyway */
        coll__sys.setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &n, sizeof(n));
        coll__sys.setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &n, sizeof(n));
    }
}

static void queue_push(struct coll_xfer **head, struct coll_xfer **tail, struct coll_xfer *x)
{
    x->next = NULL;
    if (*tail)
        (*tail)->next = x;
    else
        *head = x;
    *tail = x;
}

static struct coll_xfer *queue_pop(struct coll_xfer **head, struct coll_xfer **tail)
{
    struct coll_xfer *x = *head;

    *head = x->next;
    if (!*head)
        *tail = NULL;
    x->next = NULL;
    return x;
}

/* Complete every queued transfer of c with st. */
static void conn_fail_xfers(struct tcp_conn *c, coll_status_t st)
{
    while (c->sq_head)
        atomic_store(&queue_pop(&c->sq_head, &c->sq_tail)->status, st);
    while (c->rq_head)
        atomic_store(&queue_pop(&c->rq_head, &c->rq_tail)->status, st);
}

static struct tcp_conn **ctx_conns(struct tcp_ctx *ctx)
{
    if (!ctx->conns) {
        ctx->conns = calloc((size_t)ctx->comm->nranks, sizeof(*ctx->conns));
        if (ctx->conns)
            ctx->nranks = ctx->comm->nranks;
    }
    return ctx->conns;
}

/* ---- 4 failure ----------------------------------------------------------------------- */

static void conn_kill(struct tcp_conn *c, coll_status_t st)
{
    conn_fail_xfers(c, st);
    conn_close_fd(c);
    c->state = TCP_DEAD;
}

/* The channel to a peer broke while it was needed: say so, close it, fail the comm (which
 * shuts every other connection down through tcp_shutdown). */
COLL_PRINTF(3, 4)
static coll_status_t conn_fail(struct tcp_conn *c, coll_status_t st, const char *fmt, ...)
{
    struct coll_comm *comm = c->ctx->comm;
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (atomic_load(&comm->failed) == COLL_SUCCESS)
        coll__error(comm, st, "%s", msg);
    else
        st = (coll_status_t)atomic_load(&comm->failed);
    /* the comm is failed before any transfer completes with the error */
    coll__comm_fail(comm, st);
    if (c->state != TCP_DEAD)
        conn_kill(c, st);
    return st;
}

/* err 0: orderly end of stream. */
static coll_status_t conn_lost(struct tcp_conn *c, int err)
{
    char ebuf[128];
    int peer = c->chan.peer;

    if (err == 0 || err == ECONNRESET || err == EPIPE)
        return conn_fail(c, COLL_REMOTE_ERROR, "rank %d (%s) closed the connection%s%s", peer,
                         peer_host(c->ctx, peer), err ? ": " : "",
                         err ? strerror_r(err, ebuf, sizeof(ebuf)) : "");
    return conn_fail(c, COLL_REMOTE_ERROR, "connection to rank %d (%s) failed: %s", peer,
                     peer_host(c->ctx, peer), strerror_r(err, ebuf, sizeof(ebuf)));
}

static coll_status_t conn_watch_or_fail(struct tcp_conn *c, uint32_t events)
{
    int err = conn_watch(c, events);
    if (!err)
        return COLL_SUCCESS;
    return conn_fail(c, COLL_SYSTEM_ERROR, "epoll_ctl for the connection to rank %d failed: %s",
                     c->chan.peer, strerror(err));
}

/* The events an up channel needs now. EPOLLIN stays on once set: it is switched off only
 * when it fires with nothing to read into (see conn_up_event), saving two epoll_ctl calls
 * per message in a ping-pong. */
static uint32_t up_events(const struct tcp_conn *c, bool want_in)
{
    uint32_t ev = 0;

    if (want_in || c->rq_head)
        ev |= EPOLLIN;
    if (c->sq_head)
        ev |= EPOLLOUT;
    return ev;
}

/* ---- 5 sending ----------------------------------------------------------------------- */

/* Write queued messages until the queue is empty or the socket is full; several messages
 * go in one sendmsg. Sends complete when fully handed to the kernel. */
static coll_status_t send_progress(struct tcp_conn *c)
{
    struct tcp_ctx *ctx = c->ctx;

    while (c->sq_head) {
        struct iovec iov[TCP_IOV_MAX];
        uint8_t hdrs[TCP_IOV_MAX][TCP_HDR_BYTES];
        struct msghdr mh = {.msg_iov = iov};
        size_t total = 0, left;
        int n = 0, nh = 0;
        ssize_t w;

        for (struct coll_xfer *x = c->sq_head; x && n + 2 <= TCP_IOV_MAX; x = x->next) {
            if (x->off < TCP_HDR_BYTES) {
                struct tcp_hdr h = {
                    .magic = TCP_FRAME_MAGIC,
                    .type = TCP_TYPE_DATA,
                    .tag = x->tag,
                    .src_rank = ctx->comm->rank,
                    .comm_id = ctx->comm->comm_id,
                    .seq = x->seq,
                    .len = x->len,
                };
                hdr_encode(hdrs[nh], &h);
                iov[n++] = (struct iovec){hdrs[nh] + x->off, TCP_HDR_BYTES - x->off};
                nh++;
                if (x->len > 0)
                    iov[n++] = (struct iovec){x->buf, x->len};
            } else {
                size_t done = x->off - TCP_HDR_BYTES;
                iov[n++] = (struct iovec){(uint8_t *)x->buf + done, x->len - done};
            }
        }
        for (int i = 0; i < n; i++)
            total += iov[i].iov_len;
        mh.msg_iovlen = (size_t)n;
        w = coll__sys.sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return conn_watch_or_fail(c, up_events(c, c->events & EPOLLIN));
            return conn_lost(c, errno);
        }
        left = (size_t)w;
        while (c->sq_head) {
            struct coll_xfer *x = c->sq_head;
            size_t need = TCP_HDR_BYTES + x->len - x->off;
            if (left < need) {
                x->off += left;
                break;
            }
            left -= need;
            queue_pop(&c->sq_head, &c->sq_tail);
            atomic_store(&x->status, COLL_SUCCESS); /* x is the executor's again */
        }
        if ((size_t)w < total) /* the socket buffer is full: wait for room */
            return conn_watch_or_fail(c, up_events(c, c->events & EPOLLIN));
    }
    if (c->events & EPOLLOUT)
        return conn_watch_or_fail(c, up_events(c, c->events & EPOLLIN));
    return COLL_SUCCESS;
}

/* ---- 6 receiving --------------------------------------------------------------------- */

static coll_status_t check_header(struct tcp_conn *c, const struct coll_xfer *x)
{
    struct coll_comm *comm = c->ctx->comm;
    int peer = c->chan.peer;
    struct tcp_hdr h;

    hdr_decode(c->rhdr, &h);
    if (h.magic != TCP_FRAME_MAGIC || h.type != TCP_TYPE_DATA || h.comm_id != comm->comm_id ||
        h.src_rank != peer)
        return conn_fail(c, COLL_REMOTE_ERROR,
                         "rank %d (%s) sent a malformed frame header (magic %#x, type %u, "
                         "comm %016llx, from rank %d)",
                         peer, peer_host(c->ctx, peer), h.magic, h.type,
                         (unsigned long long)h.comm_id, h.src_rank);
    if (h.seq != x->seq || h.tag != x->tag || h.len != (uint64_t)x->len) {
        /* seq = op number | a 16-bit signature of the call's arguments << 48 */
        const uint64_t num_mask = (1ull << 48) - 1;
        return conn_fail(c, COLL_REMOTE_ERROR,
                         "message from rank %d (%s) for op #%llu tag %u has %llu bytes, "
                         "expected op #%llu tag %u with %llu bytes%s: do all ranks call the "
                         "same collectives with the same counts?",
                         peer, peer_host(c->ctx, peer), (unsigned long long)(h.seq & num_mask),
                         h.tag, (unsigned long long)h.len,
                         (unsigned long long)(x->seq & num_mask), x->tag,
                         (unsigned long long)x->len,
                         (h.seq & ~num_mask) != (x->seq & ~num_mask)
                             ? " (the two ranks called it with different arguments)"
                             : "");
    }
    return COLL_SUCCESS;
}

/* Read into the posted receives, in order, until they are all complete or the socket is
 * empty. The header and the payload of one message come in one readv, straight into the
 * posted buffer (at most x->len bytes: a wrong length fails the header check and the comm,
 * and never writes past the buffer). */
static coll_status_t recv_progress(struct tcp_conn *c)
{
    while (c->rq_head) {
        struct coll_xfer *x = c->rq_head;
        struct iovec iov[2];
        size_t before = x->off;
        int n = 0;
        ssize_t r;

        if (x->off < TCP_HDR_BYTES) {
            iov[n++] = (struct iovec){c->rhdr + x->off, TCP_HDR_BYTES - x->off};
            if (x->len > 0)
                iov[n++] = (struct iovec){x->buf, x->len};
        } else {
            size_t done = x->off - TCP_HDR_BYTES;
            iov[n++] = (struct iovec){(uint8_t *)x->buf + done, x->len - done};
        }
        r = coll__sys.readv(c->fd, iov, n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if ((errno == EAGAIN || errno == EWOULDBLOCK) && c->state == TCP_UP)
                return conn_watch_or_fail(c, up_events(c, true));
            /* TCP_EOF: what the kernel held is read, and more will never come */
            return conn_lost(c, (errno == EAGAIN || errno == EWOULDBLOCK) ? c->eof_err : errno);
        }
        if (r == 0)
            return conn_lost(c, 0);
        x->off += (size_t)r;
        if (before < TCP_HDR_BYTES && x->off >= TCP_HDR_BYTES) {
            coll_status_t st = check_header(c, x);
            if (st != COLL_SUCCESS)
                return st;
        }
        if (x->off == TCP_HDR_BYTES + x->len) {
            queue_pop(&c->rq_head, &c->rq_tail);
            atomic_store(&x->status, COLL_SUCCESS);
        }
    }
    return COLL_SUCCESS;
}

/* The peer ended the stream or the socket reported an error. Pending work makes this a
 * failure; otherwise remember it: data sent before the end may still wait in the kernel
 * for a receive posted later, and only using the channel again turns it into an error. */
static void conn_peer_left(struct tcp_conn *c, uint32_t events)
{
    int err = 0;
    socklen_t len = sizeof(err);

    if (c->rq_head && recv_progress(c) != COLL_SUCCESS)
        return;
    if (c->state != TCP_UP)
        return;
    if (events & EPOLLERR)
        coll__sys.getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (c->sq_head || c->rq_head) {
        conn_lost(c, err);
        return;
    }
    COLL_INFO(COLL_SUB_NET, "rank %d: rank %d (%s) closed its connection; fine unless used",
              c->ctx->comm->rank, c->chan.peer, peer_host(c->ctx, c->chan.peer));
    /* level-triggered HUP would fire forever: leave epoll, keep the fd to drain later */
    conn_unwatch(c);
    c->eof_err = err;
    c->state = TCP_EOF;
}

static void conn_up_event(struct tcp_conn *c, uint32_t events)
{
    if ((events & EPOLLOUT) && c->sq_head && send_progress(c) != COLL_SUCCESS)
        return;
    if (c->state != TCP_UP)
        return;
    if ((events & EPOLLIN) && c->rq_head && recv_progress(c) != COLL_SUCCESS)
        return;
    if (c->state != TCP_UP)
        return;
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        conn_peer_left(c, events);
        return;
    }
    if ((events & EPOLLIN) && !c->rq_head)
        conn_watch_or_fail(c, up_events(c, false)); /* unexpected data waits in the kernel */
}

/* ---- 7 connector handshake ----------------------------------------------------------- */

static coll_status_t connector_fail(struct tcp_conn *c, int err, const char *what)
{
    struct tcp_ctx *ctx = c->ctx;
    int peer = c->chan.peer;
    char addr[64], ebuf[128];

    coll__sockaddr_str(ctx->comm->peers[peer].addr, ctx->comm->peers[peer].addr_len, addr,
                       sizeof(addr));
    return conn_fail(c, COLL_REMOTE_ERROR, "%s rank %d (%s, '%s') failed: %s", what, peer,
                     peer_host(ctx, peer), addr,
                     err ? strerror_r(err, ebuf, sizeof(ebuf)) : "connection closed");
}

static void connector_event(struct tcp_conn *c, uint32_t events)
{
    struct tcp_ctx *ctx = c->ctx;
    struct coll_comm *comm = ctx->comm;
    ssize_t n;

    if (c->state == TCP_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return;
        if (coll__sys.getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        if (err) {
            connector_fail(c, err, "connect to");
            return;
        }
        c->state = TCP_HS_NONCE;
        if (conn_watch_or_fail(c, EPOLLIN) != COLL_SUCCESS)
            return;
    }
    if (c->state == TCP_HS_NONCE) {
        n = coll__sys.recv(c->fd, c->nonce + c->hs_off, TCP_NONCE_BYTES - c->hs_off, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            connector_fail(c, n == 0 ? 0 : errno, "handshake with");
            return;
        }
        if (n < 0)
            return;
        c->hs_off += (size_t)n;
        if (c->hs_off < TCP_NONCE_BYTES)
            return;
        put32(c->hs, TCP_HS_MAGIC);
        put64(c->hs + 4, comm->comm_id);
        put32(c->hs + 12, (uint32_t)comm->rank);
        put32(c->hs + 16, (uint32_t)c->chan.peer);
        hs_mac(comm->secret, c->nonce, comm->comm_id, comm->rank, c->chan.peer, c->hs + 20);
        c->hs_off = 0;
        c->state = TCP_HS_ANSWER;
    }
    if (c->state == TCP_HS_ANSWER) {
        n = coll__sys.send(c->fd, c->hs + c->hs_off, TCP_HS_BYTES - c->hs_off,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            connector_fail(c, errno, "handshake with");
            return;
        }
        if (n > 0)
            c->hs_off += (size_t)n;
        if (c->hs_off < TCP_HS_BYTES) {
            conn_watch_or_fail(c, EPOLLOUT);
            return;
        }
        c->state = TCP_UP;
        COLL_TRACE(COLL_SUB_NET, "rank %d: connected to rank %d (%s)", comm->rank, c->chan.peer,
                   peer_host(ctx, c->chan.peer));
        conn_watch_or_fail(c, 0);
    }
}

/* Start connecting to a higher rank. */
static coll_status_t connector_start(struct tcp_ctx *ctx, int peer, struct tcp_conn **c_p)
{
    struct coll_comm *comm = ctx->comm;
    const struct coll_peer_info *pi = &comm->peers[peer];
    struct sockaddr_storage ss;
    struct tcp_conn *c;
    coll_status_t st;
    int fd;

    memset(&ss, 0, sizeof(ss));
    memcpy(&ss, pi->addr, COLL_MIN(pi->addr_len, sizeof(ss)));
    if (!tcp_probe(comm, peer))
        return coll__error(comm, COLL_REMOTE_ERROR,
                           "rank %d (%s) published no TCP address (%u bytes)", peer, pi->hostname,
                           (unsigned)pi->addr_len);
    c = calloc(1, sizeof(*c));
    if (!c)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for a connection");
    fd = coll__sys.socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        st = coll__sys_error(comm, errno, "cannot create a socket to rank %d", peer);
        goto out_free;
    }
    c->chan = (struct coll_chan){.tp = &coll__tcp_transport, .comm = comm, .peer = peer};
    c->ctx = ctx;
    c->fd = fd;
    c->pe = (struct coll_pollent){.cb = conn_cb, .arg = c};
    set_sockopts(ctx, fd);
    if (coll__sys.connect(fd, (struct sockaddr *)&ss, pi->addr_len) == 0) {
        c->state = TCP_HS_NONCE;
    } else if (errno == EINPROGRESS || errno == EINTR) {
        c->state = TCP_CONNECTING;
    } else {
        char addr[64], ebuf[128];
        coll__sockaddr_str(pi->addr, pi->addr_len, addr, sizeof(addr));
        st = coll__error(comm, COLL_REMOTE_ERROR, "connect to rank %d (%s, '%s') failed: %s", peer,
                         pi->hostname, addr, strerror_r(errno, ebuf, sizeof(ebuf)));
        goto out_close;
    }
    *c_p = c;
    return COLL_SUCCESS;

out_close:
    coll__sys.close(fd);
out_free:
    free(c);
    return st;
}

/* ---- 8 acceptor handshake, listener and timer ---------------------------------------- */

static void pending_unlink(struct tcp_ctx *ctx, struct tcp_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        ctx->pend_head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        ctx->pend_tail = c->prev;
    c->prev = c->next = NULL;
    ctx->npending--;
}

static void note_rejected(struct tcp_ctx *ctx, const char *where, const char *why)
{
    if (ctx->nrejected++ == 0)
        COLL_WARN(COLL_SUB_NET,
                  "rank %d: dropped a connection from %s on the data listener %s: %s (further "
                  "ones are counted, not logged)",
                  ctx->comm->rank, where, ctx->where, why);
    else
        COLL_INFO(COLL_SUB_NET, "rank %d: dropped a connection from %s: %s", ctx->comm->rank, where,
                  why);
}

/* Refuse a connection still in its handshake. Only from its own callback (see the top). */
COLL_PRINTF(2, 3)
static void acceptor_reject(struct tcp_conn *c, const char *fmt, ...)
{
    struct tcp_ctx *ctx = c->ctx;
    char why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    note_rejected(ctx, c->where, why);
    pending_unlink(ctx, c);
    conn_close_fd(c);
    free(c);
}

/* The connector's answer is in: is it one of our ranks, with our secret, for us? */
static void acceptor_check(struct tcp_conn *c)
{
    struct tcp_ctx *ctx = c->ctx;
    struct coll_comm *comm = ctx->comm;
    uint64_t comm_id = get64(c->hs + 4);
    int32_t from = (int32_t)get32(c->hs + 12), to = (int32_t)get32(c->hs + 16);
    uint8_t mac[COLL_MAC_BYTES];
    struct tcp_conn **conns;

    if (get32(c->hs) != TCP_HS_MAGIC) {
        acceptor_reject(c, "not a coll handshake");
        return;
    }
    if (!comm->peers) {
        acceptor_reject(c, "handshake before this rank finished the bootstrap");
        return;
    }
    hs_mac(comm->secret, c->nonce, comm_id, from, to, mac);
    if (!coll__mac_equal(mac, c->hs + 20, COLL_MAC_BYTES)) {
        acceptor_reject(c, "wrong MAC (another communicator's secret, or a stranger)");
        return;
    }
    if (comm_id != comm->comm_id) {
        acceptor_reject(c, "handshake for communicator %016llx", (unsigned long long)comm_id);
        return;
    }
    if (to != comm->rank) {
        acceptor_reject(c, "handshake addressed to rank %d", to);
        return;
    }
    /* the lower rank of a pair connects: anything else is out of protocol */
    if (from < 0 || from >= comm->rank) {
        acceptor_reject(c, "handshake from rank %d, which does not connect to rank %d", from,
                        comm->rank);
        return;
    }
    conns = ctx_conns(ctx);
    if (!conns) {
        acceptor_reject(c, "out of memory");
        return;
    }
    if (conns[from]) {
        acceptor_reject(c, "rank %d is already connected", from);
        return;
    }
    pending_unlink(ctx, c);
    c->chan = (struct coll_chan){.tp = &coll__tcp_transport, .comm = comm, .peer = from};
    c->state = TCP_UP;
    conns[from] = c;
    COLL_TRACE(COLL_SUB_NET, "rank %d: accepted rank %d (%s) from %s", comm->rank, from,
               peer_host(ctx, from), c->where);
    /* frames may follow the answer at once; they wait until a receive is posted */
    conn_watch_or_fail(c, 0);
}

static void acceptor_event(struct tcp_conn *c, uint32_t events)
{
    char ebuf[128];
    ssize_t n;

    if (c->expired) {
        acceptor_reject(c, "no handshake within %llu ms",
                        (unsigned long long)(c->ctx->hs_timeout_ns / 1000000));
        return;
    }
    if (c->state == TCP_HS_SEND) {
        n = coll__sys.send(c->fd, c->nonce + c->hs_off, TCP_NONCE_BYTES - c->hs_off,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            acceptor_reject(c, "%s", strerror_r(errno, ebuf, sizeof(ebuf)));
            return;
        }
        if (n > 0)
            c->hs_off += (size_t)n;
        if (c->hs_off < TCP_NONCE_BYTES) {
            if (events & (EPOLLHUP | EPOLLERR))
                acceptor_reject(c, "closed during the handshake");
            return;
        }
        c->hs_off = 0;
        c->state = TCP_HS_WAIT;
        if (conn_watch(c, EPOLLIN)) {
            acceptor_reject(c, "epoll_ctl failed");
            return;
        }
    }
    /* read at most the answer: frames behind it stay in the kernel */
    n = coll__sys.recv(c->fd, c->hs + c->hs_off, TCP_HS_BYTES - c->hs_off, 0);
    if (n == 0) {
        acceptor_reject(c, "closed during the handshake");
        return;
    }
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            acceptor_reject(c, "%s", strerror_r(errno, ebuf, sizeof(ebuf)));
        return;
    }
    c->hs_off += (size_t)n;
    if (c->hs_off == TCP_HS_BYTES)
        acceptor_check(c);
}

static void conn_cb(struct coll_pollent *pe, uint32_t events)
{
    struct tcp_conn *c = pe->arg;

    if (c->fd < 0)
        return; /* closed earlier in this epoll batch */
    switch (c->state) {
    case TCP_CONNECTING:
    case TCP_HS_NONCE:
    case TCP_HS_ANSWER:
        connector_event(c, events);
        break;
    case TCP_HS_SEND:
    case TCP_HS_WAIT:
        acceptor_event(c, events);
        break;
    case TCP_UP:
        conn_up_event(c, events);
        break;
    case TCP_EOF:
    case TCP_DEAD:
        break;
    }
}

/* Arm the timer for the oldest handshake still running (the pending list is in deadline
 * order: one timeout for all, appended as accepted). */
static void timer_rearm(struct tcp_ctx *ctx)
{
    struct itimerspec its = {{0, 0}, {0, 0}};
    uint64_t at = 0;

    for (struct tcp_conn *c = ctx->pend_head; c; c = c->next)
        if (!c->expired) {
            at = c->deadline_ns;
            break;
        }
    if (at == ctx->timer_at)
        return;
    if (at) {
        its.it_value.tv_sec = (time_t)(at / 1000000000ull);
        its.it_value.tv_nsec = (long)(at % 1000000000ull);
    }
    /* coll__now_ns is CLOCK_MONOTONIC, like the timer */
    if (coll__sys.timerfd_settime(ctx->timer_fd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
        ctx->timer_at = at;
}

static void timer_cb(struct coll_pollent *pe, uint32_t events)
{
    struct tcp_ctx *ctx = pe->arg;
    uint64_t ticks, now = coll__now_ns();

    (void)events;
    if (ctx->shut)
        return;
    while (coll__sys.read(ctx->timer_fd, &ticks, sizeof(ticks)) > 0)
        ;
    ctx->timer_at = 0;
    for (struct tcp_conn *c = ctx->pend_head; c && c->deadline_ns <= now; c = c->next) {
        if (c->expired)
            continue;
        /* wakes the connection's own callback, which refuses it */
        c->expired = true;
        coll__sys.shutdown(c->fd, SHUT_RDWR);
    }
    timer_rearm(ctx);
}

static void listen_cb(struct coll_pollent *pe, uint32_t events)
{
    struct tcp_ctx *ctx = pe->arg;
    struct coll_comm *comm = ctx->comm;

    (void)events;
    while (!ctx->shut) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        struct tcp_conn *c;
        char where[64];
        ssize_t n;
        int fd;

        fd = coll__sys.accept4(ctx->listen_fd, (struct sockaddr *)&ss, &sl,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO || errno == ENETDOWN ||
                errno == ENOPROTOOPT || errno == EHOSTDOWN || errno == ENONET ||
                errno == EHOSTUNREACH || errno == ENETUNREACH)
                continue;
            /* out of fds or memory: the listener would fire forever, and a peer waits */
            coll__sys_error(comm, errno, "cannot accept connections on %s", ctx->where);
            coll__comm_fail(comm, COLL_SYSTEM_ERROR);
            return;
        }
        coll__sockaddr_str(&ss, sl, where, sizeof(where));
        if (ctx->npending >= TCP_MAX_STRANGERS + comm->nranks) {
            note_rejected(ctx, where, "too many handshakes in progress");
            coll__sys.close(fd);
            continue;
        }
        c = calloc(1, sizeof(*c));
        if (!c || coll__random(c->nonce, sizeof(c->nonce)) != COLL_SUCCESS) {
            note_rejected(ctx, where, "out of memory or randomness");
            free(c);
            coll__sys.close(fd);
            continue;
        }
        c->ctx = ctx;
        c->fd = fd;
        c->chan.peer = -1;
        c->pe = (struct coll_pollent){.cb = conn_cb, .arg = c};
        c->state = TCP_HS_SEND;
        c->deadline_ns = coll__now_ns() + ctx->hs_timeout_ns;
        memcpy(c->where, where, sizeof(where));
        set_sockopts(ctx, fd);
        c->prev = ctx->pend_tail;
        if (ctx->pend_tail)
            ctx->pend_tail->next = c;
        else
            ctx->pend_head = c;
        ctx->pend_tail = c;
        ctx->npending++;
        /* the nonce fits in a fresh socket's buffer: send it now, saving an epoll round */
        n = coll__sys.send(fd, c->nonce, TCP_NONCE_BYTES, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0)
            c->hs_off = (size_t)n;
        if (c->hs_off == TCP_NONCE_BYTES) {
            c->hs_off = 0;
            c->state = TCP_HS_WAIT;
        }
        if (conn_watch(c, c->state == TCP_HS_WAIT ? EPOLLIN : EPOLLOUT)) {
            note_rejected(ctx, where, "epoll_ctl failed");
            pending_unlink(ctx, c);
            conn_close_fd(c);
            free(c);
            continue;
        }
        if (!ctx->timer_at)
            timer_rearm(ctx);
    }
}

/* ---- 9 entry points ------------------------------------------------------------------ */

static coll_status_t tcp_init(struct coll_comm *comm, void **ctx_p)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct epoll_event ev;
    struct tcp_ctx *ctx;
    char ifname[64];
    coll_status_t st;
    int64_t hs_ms;

    ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the tcp transport");
    ctx->comm = comm;
    ctx->listen_fd = ctx->timer_fd = -1;
    ctx->listen_pe = (struct coll_pollent){.cb = listen_cb, .arg = ctx};
    ctx->timer_pe = (struct coll_pollent){.cb = timer_cb, .arg = ctx};
    hs_ms = TCP_HS_TIMEOUT_MS;
    if (comm->cfg.timeout_ms > 0 && comm->cfg.timeout_ms < hs_ms)
        hs_ms = comm->cfg.timeout_ms;
    ctx->hs_timeout_ns = (uint64_t)hs_ms * 1000000ull;

    COLL_CHECK_GOTO(
        coll__socket_pick_addr(comm, comm->cfg.socket_ifname, &ss, &sl, ifname, sizeof(ifname)), st,
        out_fini);
    ctx->listen_fd = coll__sys.socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ctx->listen_fd < 0) {
        st = coll__sys_error(comm, errno, "cannot create the data listener socket");
        goto out_fini;
    }
    /* accepted sockets inherit the buffer sizes, which must be set before the handshake
     * for TCP window scaling to follow them */
    set_sockopts(ctx, ctx->listen_fd);
    coll__sockaddr_str(&ss, sl, ctx->where, sizeof(ctx->where));
    if (coll__sys.bind(ctx->listen_fd, (struct sockaddr *)&ss, sl) < 0) {
        st = coll__sys_error(comm, errno, "cannot bind the data listener to %s (%s)", ctx->where,
                             ifname);
        goto out_fini;
    }
    if (coll__sys.listen(ctx->listen_fd, SOMAXCONN) < 0) {
        st = coll__sys_error(comm, errno, "cannot listen on %s", ctx->where);
        goto out_fini;
    }
    sl = sizeof(ss);
    if (coll__sys.getsockname(ctx->listen_fd, (struct sockaddr *)&ss, &sl) < 0) {
        st = coll__sys_error(comm, errno, "getsockname of the data listener");
        goto out_fini;
    }
    if (sl > COLL_ADDR_MAX) {
        st = coll__error(comm, COLL_INTERNAL_ERROR, "listen address of %u bytes", (unsigned)sl);
        goto out_fini;
    }
    coll__sockaddr_str(&ss, sl, ctx->where, sizeof(ctx->where));
    ctx->timer_fd = coll__sys.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ctx->timer_fd < 0) {
        st = coll__sys_error(comm, errno, "timerfd_create");
        goto out_fini;
    }
    ev = (struct epoll_event){.events = EPOLLIN, .data.ptr = &ctx->listen_pe};
    if (coll__sys.epoll_ctl(comm->epfd, EPOLL_CTL_ADD, ctx->listen_fd, &ev) < 0) {
        st = coll__sys_error(comm, errno, "epoll_ctl for the data listener");
        goto out_fini;
    }
    ev = (struct epoll_event){.events = EPOLLIN, .data.ptr = &ctx->timer_pe};
    if (coll__sys.epoll_ctl(comm->epfd, EPOLL_CTL_ADD, ctx->timer_fd, &ev) < 0) {
        st = coll__sys_error(comm, errno, "epoll_ctl for the handshake timer");
        coll__sys.epoll_ctl(comm->epfd, EPOLL_CTL_DEL, ctx->listen_fd, NULL);
        goto out_fini;
    }
    memset(comm->self.addr, 0, sizeof(comm->self.addr));
    memcpy(comm->self.addr, &ss, sl);
    comm->self.addr_len = (uint16_t)sl;
    COLL_INFO(COLL_SUB_NET, "rank %d: tcp listening on %s (%s)", comm->rank, ctx->where, ifname);
    *ctx_p = ctx;
    return COLL_SUCCESS;

out_fini:
    /* nothing of ours is registered in epfd on this path */
    if (ctx->listen_fd >= 0)
        coll__sys.close(ctx->listen_fd);
    if (ctx->timer_fd >= 0)
        coll__sys.close(ctx->timer_fd);
    free(ctx);
    return st;
}

static coll_status_t tcp_connect(void *arg, int peer, struct coll_chan **chan_p)
{
    struct tcp_ctx *ctx = arg;
    struct coll_comm *comm = ctx->comm;
    struct tcp_conn **conns, *c;
    coll_status_t st;

    if (ctx->shut || atomic_load(&comm->failed) != COLL_SUCCESS)
        return failed_status(ctx);
    if (peer < 0 || peer >= comm->nranks || peer == comm->rank || !comm->peers)
        return coll__error(comm, COLL_INTERNAL_ERROR, "tcp: no channel from rank %d to rank %d",
                           comm->rank, peer);
    conns = ctx_conns(ctx);
    if (!conns)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for %d channels", comm->nranks);
    c = conns[peer];
    if (!c && comm->rank < peer) {
        COLL_CHECK_GOTO(connector_start(ctx, peer, &c), st, out_fail);
        conns[peer] = c;
        if (conn_watch_or_fail(c, c->state == TCP_CONNECTING ? EPOLLOUT : EPOLLIN))
            return failed_status(ctx);
        if (c->state == TCP_HS_NONCE)
            connector_event(c, EPOLLIN); /* connected at once (loopback): try the nonce */
    }
    if (!c)
        return COLL_SUCCESS; /* the lower rank will connect to us */
    if (c->state == TCP_UP || c->state == TCP_EOF)
        *chan_p = &c->chan;
    else if (c->state == TCP_DEAD)
        return failed_status(ctx);
    return COLL_SUCCESS;

out_fail:
    coll__comm_fail(comm, st);
    return st;
}

/* Can a transfer be queued on c? On failure the transfer completes with the status. */
static coll_status_t conn_usable(struct tcp_conn *c, struct coll_xfer *x, bool send)
{
    coll_status_t st = COLL_SUCCESS;

    if (c->ctx->shut || c->state == TCP_DEAD || atomic_load(&c->ctx->comm->failed))
        st = failed_status(c->ctx);
    else if (c->state == TCP_EOF && send)
        st = conn_lost(c, c->eof_err);
    if (st != COLL_SUCCESS)
        atomic_store(&x->status, st);
    return st;
}

static coll_status_t tcp_post_send(struct coll_chan *ch, struct coll_xfer *x)
{
    struct tcp_conn *c = (struct tcp_conn *)ch;
    coll_status_t st = conn_usable(c, x, true);

    if (st != COLL_SUCCESS)
        return st;
    x->off = 0;
    queue_push(&c->sq_head, &c->sq_tail, x);
    if (c->sq_head != x)
        return COLL_SUCCESS; /* behind a blocked send: EPOLLOUT will move it */
    return send_progress(c); /* small messages leave now, without an epoll round */
}

static coll_status_t tcp_post_recv(struct coll_chan *ch, struct coll_xfer *x)
{
    struct tcp_conn *c = (struct tcp_conn *)ch;
    coll_status_t st = conn_usable(c, x, false);

    if (st != COLL_SUCCESS)
        return st;
    x->off = 0;
    queue_push(&c->rq_head, &c->rq_tail, x);
    if (c->rq_head != x)
        return COLL_SUCCESS; /* reading already, for an earlier receive */
    return recv_progress(c); /* the data may be there already */
}

static void tcp_shutdown(void *arg)
{
    struct tcp_ctx *ctx = arg;
    coll_status_t st;

    if (!ctx || ctx->shut)
        return;
    st = failed_status(ctx);
    ctx->shut = true;
    for (int i = 0; ctx->conns && i < ctx->nranks; i++)
        if (ctx->conns[i] && ctx->conns[i]->state != TCP_DEAD)
            conn_kill(ctx->conns[i], st);
    /* pending handshakes keep their memory until fini: their events may still be queued */
    for (struct tcp_conn *c = ctx->pend_head; c; c = c->next)
        conn_close_fd(c);
    if (ctx->listen_fd >= 0) {
        coll__sys.epoll_ctl(ctx->comm->epfd, EPOLL_CTL_DEL, ctx->listen_fd, NULL);
        coll__sys.close(ctx->listen_fd);
        ctx->listen_fd = -1;
    }
    /* an armed timer nobody reads would wake the engine forever */
    if (ctx->timer_fd >= 0) {
        coll__sys.epoll_ctl(ctx->comm->epfd, EPOLL_CTL_DEL, ctx->timer_fd, NULL);
        coll__sys.close(ctx->timer_fd);
        ctx->timer_fd = -1;
    }
}

static void tcp_fini(void *arg)
{
    struct tcp_ctx *ctx = arg;

    if (!ctx)
        return;
    for (int i = 0; ctx->conns && i < ctx->nranks; i++) {
        struct tcp_conn *c = ctx->conns[i];
        if (!c)
            continue;
        conn_kill(c, failed_status(ctx));
        free(c);
    }
    while (ctx->pend_head) {
        struct tcp_conn *c = ctx->pend_head;
        pending_unlink(ctx, c);
        conn_close_fd(c);
        free(c);
    }
    if (ctx->listen_fd >= 0) {
        coll__sys.epoll_ctl(ctx->comm->epfd, EPOLL_CTL_DEL, ctx->listen_fd, NULL);
        coll__sys.close(ctx->listen_fd);
    }
    if (ctx->timer_fd >= 0) {
        coll__sys.epoll_ctl(ctx->comm->epfd, EPOLL_CTL_DEL, ctx->timer_fd, NULL);
        coll__sys.close(ctx->timer_fd);
    }
    free(ctx->conns);
    free(ctx);
}

uint64_t coll__tcp_rejected(const void *ctx)
{
    return ctx ? ((const struct tcp_ctx *)ctx)->nrejected : 0;
}

const struct coll_transport coll__tcp_transport = {
    .name = "tcp",
    .probe = tcp_probe,
    .init = tcp_init,
    .connect = tcp_connect,
    .post_send = tcp_post_send,
    .post_recv = tcp_post_recv,
    .progress = NULL,
    .shutdown = tcp_shutdown,
    .fini = tcp_fini,
};
