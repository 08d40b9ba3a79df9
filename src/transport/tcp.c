/*
 * tcp.c - the TCP transport: between each pair of ranks a link of one or more non-blocking
 * sockets (COLL_NSOCKS), driven by the engine's epoll, authenticated by a handshake, carrying
 * framed messages that land straight in the posted receive buffers.
 *
 * Divisions: 1 wire format, 2 state, 3 small helpers, 4 failure, 5 queues and striping,
 * 6 sending, 7 receiving, 8 connector handshake, 9 acceptor handshake, listener and timer,
 * 10 entry points.
 *
 * Connections. The lower rank of a pair opens the K sockets of the link to the higher rank's
 * listener (K is the connector's COLL_NSOCKS; the acceptor follows what the handshake says, so
 * both ends of a link always agree). On each socket the acceptor sends a 16-byte nonce, the
 * connector answers
 *   magic u32 | comm_id u64 | from i32 | to i32 | index u16 | nsocks u16 |
 *   HMAC(secret, "coll-data" | nonce | comm_id | from | to | index | nsocks)
 * and the acceptor checks all of it before the socket becomes socket `index` of the link of
 * `from`, which it tells the connector with a 4-byte word (TCP_HS_OK). A connection that
 * fails (junk, wrong secret or comm, duplicate, silence) is closed and counted, and disturbs
 * nothing else. The link is usable once all K sockets are up; the connector's sockets are up
 * once the word arrives, and frames follow it in both directions. A connector whose
 * connection closes before the word dials again (TCP_CONNECT_TRIES): a listener under a
 * crowd of strangers drops its oldest handshakes, a slow rank's among them.
 *
 * Frames. header (40 bytes, little-endian) | payload:
 *   magic u32 | type u16 | piece u16 | tag u32 | src_rank i32 | comm_id u64 | seq u64 |
 *   len u64
 * len is the length of the whole message; the frame carries its piece `piece` (below).
 *
 * Striping. A message of len bytes goes in p = clamp(len / TCP_PIECE_MIN, 1, K) pieces, piece
 * i covering [bound(i), bound(i + 1)) (bounds at multiples of 64 bytes) on socket
 * (m + i) % K, where m counts the link's earlier messages in that direction: small messages
 * rotate over the sockets, large ones use them all. Both ends compute the same split from
 * (len, K, m). Every socket is a FIFO of pieces in message order, so the k-th piece sent on a
 * socket meets the k-th piece posted to receive on it; ends that disagree on a length see it
 * in the header of the piece on socket m % K, which every message uses. A transfer completes
 * when all its pieces have (x->off counts the pieces left), so the executor only ever sees
 * whole messages.
 *
 * Receiving. A socket reads into a small inbox until it holds a header, checks the header
 * against the head piece posted on that socket, copies the payload the inbox already holds,
 * and reads the rest straight into the posted buffer with the inbox as a second iovec: the
 * same readv fetches the next frame's header (read-ahead), and a short read says the socket
 * is empty. So no payload byte lands in a posted buffer before its header checked out, a
 * length from the wire is never trusted for memory, and nothing beyond one inbox is read
 * without a posted receive: unexpected data waits in the kernel, where TCP flow control is
 * the backpressure.
 *
 * epoll. An up socket stays registered edge-triggered for EPOLLIN | EPOLLOUT | EPOLLRDHUP, so
 * no message costs an epoll_ctl. The edges are remembered: `readable` is set by an event and
 * cleared by a short or would-block read (a short read of a TCP socket took all the kernel
 * held, and later data raises a new edge), `writable` is cleared by a would-block write and
 * set by EPOLLOUT. So a callback reads once per edge rather than until EAGAIN, data arriving
 * with no receive posted costs one callback rather than one per epoll_wait, and the queue
 * posted behind a waiting receive costs nothing. A receive that reaches the head of its
 * socket's queue reads at once all the same (see tcp_post_recv). Handshakes are
 * level-triggered. A struct tcp_sock is freed only inside its own callback (a
 * refused handshake) or in fini, never while another fd's callback runs: the engine may hold
 * an event for it later in the same epoll_wait batch. A handshake that times out is therefore
 * shut down (which wakes its own callback), not freed, by the timer.
 */
#include "../base/net.h"
#include "../base/sys.h"
#include "tcp_test.h"
#include "transport.h"
#include "../base/wire.h"

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

#define TCP_HS_MAGIC 0x32534843u    /* "CHS2" */
#define TCP_FRAME_MAGIC 0x31464443u /* "CDF1" */
#define TCP_TYPE_DATA 1
#define TCP_TYPE_ABORT 2 /* a failing rank's last frame: its first failure as text */
#define TCP_TYPE_STALLED 3 /* header only: seq = the collective its sender is stuck in, sig
                            * that call's signature (src/core/agree.c coll__agree_probe) */
#define TCP_ABORT_TEXT_MAX 255
#define TCP_NONCE_BYTES 16
#define TCP_HS_BYTES (4 + 8 + 4 + 4 + 2 + 2 + COLL_MAC_BYTES) /* 56 */
#define TCP_HDR_BYTES (40 + COLL_SIG_BYTES) /* the call's signature rides in every frame */
#define TCP_HS_LABEL "coll-data"
#define TCP_HS_OK 0x4b4f4843u /* "CHOK": the acceptor took the answer */
#define TCP_HS_OK_BYTES 4
#define TCP_CONNECT_TRIES 16  /* a connector dropped before the acceptor took it dials again */
#define TCP_HS_LABEL_BYTES 9

#define TCP_HS_TIMEOUT_MS 5000 /* at most; COLL_TIMEOUT_MS if shorter */
#define TCP_IOV_MAX 64         /* iovecs per sendmsg: up to 32 pieces at once */
#define TCP_MAX_STRANGERS 256  /* handshakes in progress, beyond nranks */
#define TCP_ACCEPT_BATCH 32    /* accepts per listener event: answers already in go first */
#define TCP_MAX_SOCKS 64       /* sockets per link (COLL_NSOCKS's bound) */
#define TCP_PIECE_MIN (32 << 10) /* smallest piece a message is striped into */
#define TCP_PIECE_ALIGN 64     /* piece bounds: whole cache lines */
#define TCP_INBOX_BYTES 4096   /* per socket: headers, small payloads, read-ahead */
#define TCP_CC_NAME_MAX 16     /* the kernel's TCP_CA_NAME_MAX, NUL included */
#define TCP_CC_LOCAL "reno"    /* COLL_TCP_CONGESTION=auto between ranks of one host */


struct tcp_hdr {
    uint32_t magic;
    uint16_t type, piece;
    uint32_t tag;
    int32_t src_rank;
    uint64_t comm_id, seq, len;
    struct coll_sig sig;
};

static void hdr_encode(uint8_t *p, const struct tcp_hdr *h)
{
    put32(p, h->magic);
    put16(p + 4, h->type);
    put16(p + 6, h->piece);
    put32(p + 8, h->tag);
    put32(p + 12, (uint32_t)h->src_rank);
    put64(p + 16, h->comm_id);
    put64(p + 24, h->seq);
    put64(p + 32, h->len);
    coll__sig_put(p + 40, &h->sig);
}

static void hdr_decode(const uint8_t *p, struct tcp_hdr *h)
{
    h->magic = get32(p);
    h->type = get16(p + 4);
    h->piece = get16(p + 6);
    h->tag = get32(p + 8);
    h->src_rank = (int32_t)get32(p + 12);
    h->comm_id = get64(p + 16);
    h->seq = get64(p + 24);
    h->len = get64(p + 32);
    coll__sig_get(p + 40, &h->sig);
}

/* HMAC(secret, "coll-data" | nonce | comm_id | from | to | index | nsocks) */
static void hs_mac(const uint8_t *secret, const uint8_t *nonce, uint64_t comm_id, int32_t from,
                   int32_t to, uint16_t index, uint16_t nsocks, uint8_t mac[COLL_MAC_BYTES])
{
    uint8_t m[TCP_HS_LABEL_BYTES + TCP_NONCE_BYTES + 8 + 4 + 4 + 2 + 2];
    uint8_t *p = m + TCP_HS_LABEL_BYTES + TCP_NONCE_BYTES;

    memcpy(m, TCP_HS_LABEL, TCP_HS_LABEL_BYTES);
    memcpy(m + TCP_HS_LABEL_BYTES, nonce, TCP_NONCE_BYTES);
    put64(p, comm_id);
    put32(p + 8, (uint32_t)from);
    put32(p + 12, (uint32_t)to);
    put16(p + 16, index);
    put16(p + 18, nsocks);
    coll__hmac_sha256(secret, COLL_SECRET_BYTES, m, sizeof(m), mac);
}

/* ---- 2 state ------------------------------------------------------------------------- */

enum tcp_state {
    TCP_CONNECTING, /* connector: connect(2) in flight */
    TCP_HS_NONCE,   /* connector: reading the acceptor's nonce */
    TCP_HS_ANSWER,  /* connector: writing its answer */
    TCP_HS_CONFIRM, /* connector: answer written, reading the acceptor's TCP_HS_OK */
    TCP_HS_SEND,    /* acceptor: nonce not yet fully written */
    TCP_HS_WAIT,    /* acceptor: reading the connector's answer */
    TCP_UP,         /* socket `idx` of its link */
    TCP_EOF,        /* peer left with nothing pending; fd kept, data may remain */
    TCP_DEAD,       /* fd closed: failed or shut down */
};

/* The part of one message that one socket carries. */
struct tcp_piece {
    struct coll_xfer *x;
    size_t off, len;            /* bytes of x->buf */
    size_t done;                /* send: bytes written, header included; recv: payload landed */
    uint16_t index;             /* which piece of x */
    uint8_t hdr[TCP_HDR_BYTES]; /* send: the encoded header */
};

/* A FIFO of pieces: a ring that doubles when full (no allocation per message). */
struct tcp_fifo {
    struct tcp_piece *v;
    uint32_t cap, head, n; /* cap is 0 or a power of two */
};

struct tcp_ctx;
struct tcp_link;

struct tcp_sock {
    struct tcp_ctx *ctx;
    struct tcp_link *link; /* NULL while an accepted socket's handshake runs */
    struct coll_pollent pe;
    int fd;
    int idx;               /* index in link->socks */
    enum tcp_state state;
    bool registered;       /* in epfd */
    uint32_t events;       /* as registered */
    bool readable;         /* no read since the last EPOLLIN edge came up short */
    bool writable;         /* no write since the last EPOLLOUT edge came up short */
    bool hdr_ok;           /* the header of rq's head piece is checked and consumed */
    /* what the kernel did not take of a stalled frame: it goes out before anything else, so
     * that the stream stays in step (tcp_stalled) */
    uint8_t tail[TCP_HDR_BYTES];
    uint8_t tail_len;
    _Static_assert(TCP_HDR_BYTES < 256, "tail_len counts a header's bytes");
    int eof_err;           /* TCP_EOF: errno the socket reported, 0 for a FIN */

    /* handshake */
    uint8_t nonce[TCP_NONCE_BYTES];
    uint8_t hs[TCP_HS_BYTES]; /* the answer, sent or received */
    size_t hs_off;
    uint64_t deadline_ns; /* acceptor: handshake must be done by then */
    int tries;            /* connector: connections made for this socket so far */
    bool expired;
    char where[64];               /* acceptor: remote address, for messages */
    struct tcp_sock *prev, *next; /* acceptor: in ctx's pending list until accepted, then
                                   * in its grave list if refused outside its callback */

    struct tcp_fifo sq, rq;

    /* bytes read, not yet consumed: inbox[in_pos, in_end); allocated once up, so that a
     * stranger's half-open connection costs little */
    size_t in_pos, in_end;
    uint8_t *inbox; /* [TCP_INBOX_BYTES] */
};

/* All the sockets to one peer: what the executor holds as its channel. */
struct tcp_link {
    struct coll_chan chan; /* first */
    struct tcp_ctx *ctx;
    int nsocks, nup;       /* sockets, and how many finished their handshake */
    bool dead;
    uint64_t nsent, nrecv; /* messages posted so far per direction: where striping starts */
    struct tcp_sock *socks[];
};

struct tcp_ctx {
    struct coll_net *net;
    int listen_fd, timer_fd;
    struct coll_pollent listen_pe, timer_pe;
    char where[64];          /* our listen address */
    struct tcp_link **links; /* [nranks]: the link to each peer, once started */
    int nranks;
    struct tcp_sock *pend_head, *pend_tail; /* accepted, handshake not done (FIFO) */
    int npending;
    struct tcp_sock *in_cb; /* the handshake whose own callback runs, if any */
    struct tcp_sock *grave; /* refused outside their callback: freed by tcp_progress */
    uint64_t hs_timeout_ns;
    uint64_t timer_at; /* armed for this time, 0 when disarmed */
    uint64_t nrejected;
    bool shut;
    char cc[TCP_CC_NAME_MAX]; /* COLL_TCP_CONGESTION: "" = auto, "system", or a name */
    bool cc_warned;
    /* the first failure a peer's abort frame told us of, passed on in ours; written and read
     * with the engine lock held, as every entry point's state */
    char origin[TCP_ABORT_TEXT_MAX + 1];
};

/* ---- 3 small helpers ----------------------------------------------------------------- */

static void sock_cb(struct coll_pollent *pe, uint32_t events);

/* Did peer publish a socket address? */
static bool reaches(const struct coll_net *net, int peer)
{
    const struct coll_peer_info *p;
    sa_family_t family;

    if (!net->peers || peer < 0 || peer >= net->nranks)
        return false;
    p = &net->peers[peer];
    if (p->addr_len < sizeof(family) || p->addr_len > COLL_ADDR_MAX)
        return false;
    memcpy(&family, p->addr, sizeof(family));
    return (family == AF_INET && p->addr_len >= sizeof(struct sockaddr_in)) ||
           (family == AF_INET6 && p->addr_len >= sizeof(struct sockaddr_in6));
}

static bool tcp_probe(void *arg, int peer)
{
    const struct tcp_ctx *ctx = arg;
    return ctx && reaches(ctx->net, peer);
}

static const char *peer_host(const struct tcp_ctx *ctx, int peer)
{
    return coll__peer_hostname(ctx->net, peer);
}

static coll_status_t failed_status(const struct tcp_ctx *ctx)
{
    return coll__comm_failed_status(ctx->net);
}

/* Register s in epfd with exactly these events (RDHUP is always wanted). */
static int sock_watch(struct tcp_sock *s, uint32_t events)
{
    struct epoll_event ev = {.events = events | EPOLLRDHUP, .data.ptr = &s->pe};

    if (s->registered && s->events == ev.events)
        return 0;
    if (coll__sys.epoll_ctl(s->ctx->net->epfd, s->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD,
                            s->fd, &ev) < 0)
        return errno;
    s->registered = true;
    s->events = ev.events;
    return 0;
}

static void sock_unwatch(struct tcp_sock *s)
{
    if (s->registered && s->fd >= 0)
        coll__sys.epoll_ctl(s->ctx->net->epfd, EPOLL_CTL_DEL, s->fd, NULL);
    s->registered = false;
    s->events = 0;
}

static void sock_close_fd(struct tcp_sock *s)
{
    sock_unwatch(s);
    if (s->fd >= 0) {
        /* Bytes nobody will read (a peer's stalled frames, which it sends while it waits on
         * this rank) would turn the close into a reset, and a reset can drop data the peer
         * has not read yet: take what is there first (bounded, never blocking). */
        uint8_t sink[4096];
        for (int k = 0; k < 16; k++) {
            ssize_t r = coll__sys.recv(s->fd, sink, sizeof(sink), MSG_DONTWAIT);
            if (r <= 0 && !(r < 0 && errno == EINTR))
                break;
        }
        coll__sys.shutdown(s->fd, SHUT_RDWR);
        coll__sys.close(s->fd);
    }
    s->fd = -1;
}

static void set_sockopts(struct tcp_ctx *ctx, int fd)
{
    int one = 1;

    coll__sys.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (ctx->net->cfg->sockbuf_bytes > 0) {
        int n = (int)COLL_MIN(ctx->net->cfg->sockbuf_bytes, (int64_t)INT_MAX / 2);
        /* best effort: the kernel clamps to net.core.[rw]mem_max anyway */
        coll__sys.setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &n, sizeof(n));
        coll__sys.setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &n, sizeof(n));
    }
}

/* Both ends of a connected socket on this host: the same address, or loopback. */
static bool sock_is_local(int fd)
{
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof(me), pl = sizeof(peer);

    if (coll__sys.getsockname(fd, (struct sockaddr *)&me, &ml) < 0 ||
        coll__sys.getpeername(fd, (struct sockaddr *)&peer, &pl) < 0 ||
        me.ss_family != peer.ss_family)
        return false;
    if (peer.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)&me, *b = (const void *)&peer;
        return a->sin_addr.s_addr == b->sin_addr.s_addr ||
               (ntohl(b->sin_addr.s_addr) >> 24) == 127;
    }
    if (peer.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)&me, *b = (const void *)&peer;
        return memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(b->sin6_addr)) == 0 ||
               IN6_IS_ADDR_LOOPBACK(&b->sin6_addr) ||
               (IN6_IS_ADDR_V4MAPPED(&b->sin6_addr) && b->sin6_addr.s6_addr[12] == 127);
    }
    return false;
}

/* Congestion control of an up data socket (COLL_TCP_CONGESTION). A pacing one such as BBR,
 * often the system default, meters a message out by timer at its estimate of the path's
 * rate; between ranks of one host that estimate swings with the CPU load, and a paced 512 KiB
 * send waited on timers and softirqs: all-reduce at 1-4 MiB over loopback took 1.2-2x as
 * long with bbr as with reno (docs/performance.md). So auto asks for reno, which every
 * kernel has and lets anyone choose, on a connection that stays in this host, and leaves the
 * system's choice to links that leave it. A name the kernel refuses keeps its choice too. */
static void sock_set_congestion(struct tcp_sock *s)
{
    struct tcp_ctx *ctx = s->ctx;
    const char *want = ctx->cc;
    char ebuf[128];
    socklen_t len;

    if (strcmp(want, "system") == 0)
        return;
    if (!*want) {
        if (!sock_is_local(s->fd))
            return;
        want = TCP_CC_LOCAL;
    }
    len = (socklen_t)strlen(want);
    if (coll__sys.setsockopt(s->fd, IPPROTO_TCP, TCP_CONGESTION, want, len) == 0 || ctx->cc_warned)
        return;
    ctx->cc_warned = true;
    COLL_WARN(COLL_SUB_NET,
              "rank %d: TCP congestion control '%s' refused (%s); the links keep the system's "
              "(COLL_TCP_CONGESTION)",
              ctx->net->rank, want, strerror_r(errno, ebuf, sizeof(ebuf)));
}

/* COLL_NSOCKS as this rank's links use it (a comm built by hand may leave it 0). */
static int cfg_nsocks(const struct tcp_ctx *ctx)
{
    int64_t k = ctx->net->cfg->nsocks;
    return k < 1 ? 1 : k > TCP_MAX_SOCKS ? TCP_MAX_SOCKS : (int)k;
}

static struct tcp_link **ctx_links(struct tcp_ctx *ctx)
{
    if (!ctx->links) {
        ctx->links = calloc((size_t)ctx->net->nranks, sizeof(*ctx->links));
        if (ctx->links)
            ctx->nranks = ctx->net->nranks;
    }
    return ctx->links;
}

static struct tcp_link *link_new(struct tcp_ctx *ctx, int peer, int nsocks)
{
    struct tcp_link *l = calloc(1, sizeof(*l) + (size_t)nsocks * sizeof(l->socks[0]));

    if (!l)
        return NULL;
    l->chan = (struct coll_chan){.tp = &coll__tcp_transport, .net = ctx->net, .peer = peer};
    l->ctx = ctx;
    l->nsocks = nsocks;
    return l;
}

/* ---- 4 failure ----------------------------------------------------------------------- */

static void fifo_fail(struct tcp_fifo *q, coll_status_t st);

/* Close every socket of the link and complete its queued transfers with st. */
static void link_kill(struct tcp_link *l, coll_status_t st)
{
    for (int i = 0; i < l->nsocks; i++) {
        struct tcp_sock *s = l->socks[i];
        if (!s)
            continue;
        fifo_fail(&s->sq, st);
        fifo_fail(&s->rq, st);
        s->hdr_ok = false;
        sock_close_fd(s);
        s->state = TCP_DEAD;
    }
    l->dead = true;
}

/* A socket of a link broke while it was needed: say so, close the link (a stripe set is only
 * whole with all its sockets), fail the comm (which shuts every other link down through
 * tcp_shutdown). */
COLL_PRINTF(3, 4)
static coll_status_t conn_fail(struct tcp_sock *s, coll_status_t st, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    st = coll__transport_failv(s->ctx->net, st, fmt, ap);
    va_end(ap);
    if (!s->link->dead)
        link_kill(s->link, st);
    return st;
}

static bool inbox_fill(struct tcp_sock *s);
static bool inbox_stalled(const struct tcp_sock *s);
static size_t inbox_abort_bytes(const struct tcp_sock *s);
static coll_status_t take_abort(struct tcp_sock *s);

/* err 0: orderly end of stream. A peer that failed left its reason in an abort frame
 * before it closed, which is then the better message. */
static coll_status_t conn_lost(struct tcp_sock *s, int err)
{
    char ebuf[128];
    int peer = s->link->chan.peer;

    if (inbox_fill(s))
        return take_abort(s);
    if (err == 0 || err == ECONNRESET || err == EPIPE)
        return conn_fail(s, COLL_REMOTE_ERROR, "rank %d (%s) closed the connection%s%s", peer,
                         peer_host(s->ctx, peer), err ? ": " : "",
                         err ? strerror_r(err, ebuf, sizeof(ebuf)) : "");
    return conn_fail(s, COLL_REMOTE_ERROR, "connection to rank %d (%s) failed: %s", peer,
                     peer_host(s->ctx, peer), strerror_r(err, ebuf, sizeof(ebuf)));
}

static coll_status_t sock_watch_or_fail(struct tcp_sock *s, uint32_t events)
{
    int err = sock_watch(s, events);
    if (!err)
        return COLL_SUCCESS;
    return conn_fail(s, COLL_SYSTEM_ERROR, "epoll_ctl for the connection to rank %d failed: %s",
                     s->link->chan.peer, strerror(err));
}

/* The handshake is done: from now on the socket stays registered, edge-triggered. */
static coll_status_t sock_set_up(struct tcp_sock *s)
{
    s->state = TCP_UP;
    s->readable = s->writable = true; /* until a short read or write says otherwise */
    s->link->nup++;
    sock_set_congestion(s);
    if (!(s->inbox = malloc(TCP_INBOX_BYTES)))
        return conn_fail(s, COLL_SYSTEM_ERROR, "out of memory for a connection to rank %d",
                         s->link->chan.peer);
    return sock_watch_or_fail(s, EPOLLIN | EPOLLOUT | EPOLLET);
}

/* ---- 5 queues and striping ----------------------------------------------------------- */

static struct tcp_piece *fifo_at(const struct tcp_fifo *q, uint32_t i)
{
    return &q->v[(q->head + i) & (q->cap - 1)];
}

/* Room for one more piece; false when out of memory. */
static bool fifo_reserve(struct tcp_fifo *q)
{
    uint32_t cap = q->cap ? q->cap * 2 : 16;
    struct tcp_piece *v;

    if (q->n < q->cap)
        return true;
    if (cap <= q->cap || !(v = malloc(cap * sizeof(*v))))
        return false;
    for (uint32_t i = 0; i < q->n; i++)
        v[i] = *fifo_at(q, i);
    free(q->v);
    q->v = v;
    q->cap = cap;
    q->head = 0;
    return true;
}

static struct tcp_piece *fifo_push(struct tcp_fifo *q)
{
    struct tcp_piece *p = fifo_at(q, q->n);
    q->n++;
    return p;
}

static void fifo_pop(struct tcp_fifo *q)
{
    q->head = (q->head + 1) & (q->cap - 1);
    q->n--;
}

/* Complete the transfers of every queued piece with st (a striped transfer is in several
 * queues: storing the same status twice is harmless). */
static void fifo_fail(struct tcp_fifo *q, coll_status_t st)
{
    for (uint32_t i = 0; i < q->n; i++)
        atomic_store(&fifo_at(q, i)->x->status, st);
    q->n = 0;
    q->head = 0;
}

static void fifo_free(struct tcp_fifo *q)
{
    free(q->v);
    q->v = NULL;
    q->cap = q->n = q->head = 0;
}

/* Pieces of a message of len bytes over k sockets. */
static uint32_t npieces(size_t len, int k)
{
    size_t p = len / TCP_PIECE_MIN;
    return p < 1 ? 1 : p > (size_t)k ? (uint32_t)k : (uint32_t)p;
}

/* Start of piece i of p: about len * i / p, down to a multiple of TCP_PIECE_ALIGN; with
 * len >= p * TCP_PIECE_MIN no piece is empty. */
static size_t piece_bound(size_t len, uint32_t p, uint32_t i)
{
    if (i == 0)
        return 0;
    if (i >= p)
        return len;
    return ((len / p) * i + (len % p) * i / p) & ~(size_t)(TCP_PIECE_ALIGN - 1);
}

static void piece_done(struct coll_xfer *x)
{
    if (--x->off == 0)
        atomic_store(&x->status, COLL_SUCCESS); /* x is the executor's again */
}

/* ---- 6 sending ----------------------------------------------------------------------- */

/* Write queued pieces until the queue is empty or the socket is full; several pieces go in
 * one sendmsg. A piece is done when fully handed to the kernel. */
static coll_status_t sock_send(struct tcp_sock *s)
{
    struct tcp_fifo *q = &s->sq;

    while ((q->n > 0 || s->tail_len > 0) && s->writable) {
        struct iovec iov[TCP_IOV_MAX];
        struct msghdr mh = {.msg_iov = iov};
        size_t left;
        int n = 0;
        ssize_t w;

        if (s->tail_len > 0)
            iov[n++] = (struct iovec){s->tail + TCP_HDR_BYTES - s->tail_len, s->tail_len};
        for (uint32_t i = 0; i < q->n && n + 2 <= TCP_IOV_MAX; i++) {
            struct tcp_piece *pc = fifo_at(q, i);
            uint8_t *payload = pc->len ? (uint8_t *)pc->x->buf + pc->off : NULL;

            if (pc->done < TCP_HDR_BYTES) {
                iov[n++] = (struct iovec){pc->hdr + pc->done, TCP_HDR_BYTES - pc->done};
                if (pc->len > 0)
                    iov[n++] = (struct iovec){payload, pc->len};
            } else {
                size_t sent = pc->done - TCP_HDR_BYTES;
                iov[n++] = (struct iovec){payload + sent, pc->len - sent};
            }
        }
        mh.msg_iovlen = (size_t)n;
        w = coll__sys.sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                s->writable = false; /* EPOLLOUT comes when there is room */
                return COLL_SUCCESS;
            }
            return conn_lost(s, errno);
        }
        left = (size_t)w;
        if (s->tail_len > 0) {
            size_t t = COLL_MIN(left, (size_t)s->tail_len);
            s->tail_len = (uint8_t)(s->tail_len - t);
            left -= t;
        }
        while (q->n > 0) {
            struct tcp_piece *pc = fifo_at(q, 0);
            size_t need = TCP_HDR_BYTES + pc->len - pc->done;
            struct coll_xfer *x = pc->x;

            if (left < need) {
                pc->done += left;
                break;
            }
            left -= need;
            fifo_pop(q);
            piece_done(x);
        }
        /* A short write means a full buffer too, but the next call says so for certain
         * (EAGAIN arms the EPOLLOUT edge); it comes once per buffer-full of data. */
    }
    return COLL_SUCCESS;
}

/* ---- 7 receiving --------------------------------------------------------------------- */

static coll_status_t check_header(struct tcp_sock *s, const struct tcp_piece *pc,
                                  const uint8_t *raw)
{
    struct coll_net *net = s->ctx->net;
    const struct coll_xfer *x = pc->x;
    int peer = s->link->chan.peer;
    struct tcp_hdr h;

    hdr_decode(raw, &h);
    if (h.magic != TCP_FRAME_MAGIC || h.type != TCP_TYPE_DATA || h.comm_id != net->comm_id ||
        h.src_rank != peer)
        return conn_fail(s, COLL_REMOTE_ERROR,
                         "rank %d (%s) sent a malformed frame header (magic %#x, type %u, "
                         "comm %016llx, from rank %d)",
                         peer, peer_host(s->ctx, peer), h.magic, h.type,
                         (unsigned long long)h.comm_id, h.src_rank);
    {
        char why[640];
        if (net->ops->agree_xfer(net->comm, peer, x, h.seq, h.tag, h.len, &h.sig, why,
                                 sizeof(why)) != COLL_SUCCESS)
            return conn_fail(s, COLL_REMOTE_ERROR, "%s", why);
    }
    if (h.piece != pc->index)
        return conn_fail(s, COLL_REMOTE_ERROR,
                         "rank %d (%s) sent piece %u of a message on socket %d, expected piece "
                         "%u: the two ends of the link split messages differently",
                         peer, peer_host(s->ctx, peer), h.piece, s->idx, pc->index);
    return COLL_SUCCESS;
}

/* One readv: up to n bytes into the payload of piece pc (pc->done advances), the rest into
 * the inbox's free space. A would-block read clears `readable`, so callers loop on it. */
static coll_status_t sock_read(struct tcp_sock *s, struct tcp_piece *pc, size_t n)
{
    struct iovec iov[2];
    size_t want = 0;
    int k = 0;
    ssize_t r;

    if (n > 0)
        iov[k++] = (struct iovec){(uint8_t *)pc->x->buf + pc->off + pc->done, n};
    if (s->in_end < TCP_INBOX_BYTES)
        iov[k++] = (struct iovec){s->inbox + s->in_end, TCP_INBOX_BYTES - s->in_end};
    for (int i = 0; i < k; i++)
        want += iov[i].iov_len;
    do
        r = coll__sys.readv(s->fd, iov, k);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
        if ((errno == EAGAIN || errno == EWOULDBLOCK) && s->state == TCP_UP) {
            s->readable = false; /* the next EPOLLIN edge says when to look again */
            return COLL_SUCCESS;
        }
        /* TCP_EOF: what the kernel held is read, and more will never come */
        return conn_lost(s, (errno == EAGAIN || errno == EWOULDBLOCK) ? s->eof_err : errno);
    }
    if (r == 0)
        return conn_lost(s, 0);
    /* A short read of a TCP socket took all the kernel held (data still being processed
     * raises a new edge when it lands), so it is as good as EAGAIN and saves that call. At
     * TCP_EOF no edge comes again: keep reading until the end of the stream. */
    if ((size_t)r < want && s->state == TCP_UP)
        s->readable = false;
    if (n > 0) {
        size_t to_dst = COLL_MIN((size_t)r, n);
        pc->done += to_dst;
        r -= (ssize_t)to_dst;
    }
    s->in_end += (size_t)r;
    return COLL_SUCCESS;
}

/* Does the inbox start with a whole stalled frame from the link's peer? */
static bool inbox_stalled(const struct tcp_sock *s)
{
    struct tcp_hdr h;

    if (!s->inbox || s->hdr_ok || s->in_end - s->in_pos < TCP_HDR_BYTES)
        return false;
    hdr_decode(s->inbox + s->in_pos, &h);
    return h.magic == TCP_FRAME_MAGIC && h.type == TCP_TYPE_STALLED && h.len == 0 &&
           h.comm_id == s->ctx->net->comm_id && h.src_rank == s->link->chan.peer;
}

static coll_status_t take_stalled(struct tcp_sock *s)
{
    int peer = s->link->chan.peer;
    struct tcp_hdr h;
    char why[640];

    hdr_decode(s->inbox + s->in_pos, &h);
    s->in_pos += TCP_HDR_BYTES;
    if (s->in_pos == s->in_end)
        s->in_pos = s->in_end = 0;
    if (s->ctx->net->ops->agree_probe(s->ctx->net->comm, peer, h.seq, &h.sig, why, sizeof(why)))
        return conn_fail(s, COLL_REMOTE_ERROR, "%s", why);
    return COLL_SUCCESS;
}

/* The transport's stalled hook: a header-only frame on a socket of the link with nothing
 * queued (so it goes between frames); a full socket skips it, and what a nearly full one
 * does not take waits in the socket's tail, sent before anything else. */
static void tcp_stalled(struct coll_chan *ch, uint64_t cseq, const struct coll_sig *sig)
{
    struct tcp_link *l = (struct tcp_link *)ch;
    struct tcp_ctx *ctx = l->ctx;
    uint8_t frame[TCP_HDR_BYTES];
    struct tcp_hdr h = {.magic = TCP_FRAME_MAGIC,
                        .type = TCP_TYPE_STALLED,
                        .src_rank = ctx->net->rank,
                        .comm_id = ctx->net->comm_id,
                        .seq = cseq};

    if (l->dead || !sig)
        return;
    h.sig = *sig;
    hdr_encode(frame, &h);
    for (int i = 0; i < l->nsocks; i++) {
        struct tcp_sock *s = l->socks[i];
        struct iovec iov = {frame, sizeof(frame)};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        ssize_t r;

        if (!s || s->state != TCP_UP || s->fd < 0 || s->sq.n > 0 || s->tail_len > 0)
            continue;
        do
            r = coll__sys.sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        while (r < 0 && errno == EINTR);
        if (r == (ssize_t)sizeof(frame) || r < 0)
            return; /* sent, or the kernel would not take it now: ask again later */
        /* a part went out (a socket all but full, as a large message to a slow link
         * leaves it): the rest follows when there is room, ahead of any piece */
        memcpy(s->tail, frame, sizeof(frame));
        s->tail_len = (uint8_t)(sizeof(frame) - (size_t)r);
        return;
    }
}

/* Fill the posted pieces of s, in order, from the inbox and then the socket, until they are
 * all complete or the socket is empty. */
static coll_status_t sock_recv(struct tcp_sock *s)
{
    struct tcp_fifo *q = &s->rq;

    while (q->n > 0) {
        struct tcp_piece *pc = fifo_at(q, 0);
        size_t avail = s->in_end - s->in_pos;
        coll_status_t st;

        if (!s->hdr_ok) {
            size_t abort_bytes = inbox_abort_bytes(s);

            if (abort_bytes > 0 && avail >= abort_bytes)
                return take_abort(s);
            if (avail < TCP_HDR_BYTES || abort_bytes > 0) {
                if (!s->readable)
                    return COLL_SUCCESS;
                if (s->in_pos > 0) { /* keep the partial header, make room behind it */
                    memmove(s->inbox, s->inbox + s->in_pos, avail);
                    s->in_pos = 0;
                    s->in_end = avail;
                }
                st = sock_read(s, pc, 0);
                if (st != COLL_SUCCESS)
                    return st;
                continue;
            }
            if (inbox_stalled(s)) { /* a peer stuck in a call: does ours of that number agree? */
                st = take_stalled(s);
                if (st != COLL_SUCCESS)
                    return st;
                continue;
            }
            st = check_header(s, pc, s->inbox + s->in_pos);
            if (st != COLL_SUCCESS)
                return st;
            s->hdr_ok = true;
            s->in_pos += TCP_HDR_BYTES;
            avail -= TCP_HDR_BYTES;
        }
        if (avail > 0 && pc->done < pc->len) {
            size_t n = COLL_MIN(avail, pc->len - pc->done);
            memcpy((uint8_t *)pc->x->buf + pc->off + pc->done, s->inbox + s->in_pos, n);
            pc->done += n;
            s->in_pos += n;
        }
        if (s->in_pos == s->in_end)
            s->in_pos = s->in_end = 0;
        if (pc->done < pc->len) {
            /* the inbox is empty: the rest straight into the buffer, the inbox behind it */
            if (!s->readable)
                return COLL_SUCCESS;
            st = sock_read(s, pc, pc->len - pc->done);
            if (st != COLL_SUCCESS)
                return st;
            continue;
        }
        {
            struct coll_xfer *x = pc->x;
            fifo_pop(q);
            s->hdr_ok = false;
            piece_done(x);
        }
    }
    return COLL_SUCCESS;
}

/* The peer ended the stream or the socket reported an error. Pending work makes this a
 * failure; otherwise remember it: data sent before the end may still wait in the kernel
 * for a receive posted later, and only using the link again turns it into an error. */
static void sock_peer_left(struct tcp_sock *s, uint32_t events)
{
    int err = 0;
    socklen_t len = sizeof(err);

    if (events & EPOLLERR)
        coll__sys.getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (s->sq.n > 0 || s->rq.n > 0 || s->tail_len > 0) {
        conn_lost(s, err);
        return;
    }
    /* a peer that failed said so before it left: that fails this comm now, too */
    if (inbox_fill(s)) {
        take_abort(s);
        return;
    }
    COLL_INFO(COLL_SUB_NET, "rank %d: rank %d (%s) closed a connection; fine unless used",
              s->ctx->net->rank, s->link->chan.peer, peer_host(s->ctx, s->link->chan.peer));
    /* a hung-up socket is readable forever: leave epoll, keep the fd to drain later */
    sock_unwatch(s);
    s->eof_err = err;
    s->state = TCP_EOF;
    s->readable = true;
}

static void sock_up_event(struct tcp_sock *s, uint32_t events)
{
    if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
        s->writable = true;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP))
        s->readable = true;
    if ((s->sq.n > 0 || s->tail_len > 0) && sock_send(s) != COLL_SUCCESS)
        return;
    if (s->state != TCP_UP)
        return;
    if (s->rq.n > 0 && sock_recv(s) != COLL_SUCCESS)
        return;
    if (s->state != TCP_UP)
        return;
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        sock_peer_left(s, events);
    /* data with no receive posted waits in the kernel; `readable` remembers the edge */
}

/* ---- 7b abort frames ----------------------------------------------------------------- */

/* A rank whose comm fails sends each peer one last frame, TCP_TYPE_ABORT, whose payload is
 * the first failure it knows of (its own, or the one a peer told it of), so that every rank
 * reports the cause rather than a chain of closed connections. It goes only where a socket's
 * stream is between frames and only as far as the socket takes it without blocking: a peer
 * that gets no whole frame sees the connection close, as without it. */

/* Read what the kernel holds into the inbox's free space (the read-ahead that sock_recv
 * consumes first); true when the inbox then starts with a whole abort frame. */
static bool inbox_fill(struct tcp_sock *s)
{
    if (!s->inbox || s->fd < 0 || s->hdr_ok)
        return false;
    if (s->in_pos > 0) {
        memmove(s->inbox, s->inbox + s->in_pos, s->in_end - s->in_pos);
        s->in_end -= s->in_pos;
        s->in_pos = 0;
    }
    while (s->in_end < TCP_INBOX_BYTES) {
        struct iovec iov = {s->inbox + s->in_end, TCP_INBOX_BYTES - s->in_end};
        ssize_t r = coll__sys.readv(s->fd, &iov, 1);

        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        s->in_end += (size_t)r;
    }
    /* a peer that stalled before it failed asked first: the stream is ending, its reason
     * follows */
    while (inbox_stalled(s))
        s->in_pos += TCP_HDR_BYTES;
    {
        size_t need = inbox_abort_bytes(s);
        return need > 0 && s->in_end - s->in_pos >= need;
    }
}

/* The size of the abort frame the inbox starts with (header and text; the text may not all
 * be there yet), 0 when it does not start with one. A frame from someone else, or with a
 * text longer than an abort's, is left to check_header, which refuses it. */
static size_t inbox_abort_bytes(const struct tcp_sock *s)
{
    struct tcp_hdr h;

    if (!s->inbox || s->hdr_ok || s->in_end - s->in_pos < TCP_HDR_BYTES)
        return 0;
    hdr_decode(s->inbox + s->in_pos, &h);
    if (h.magic != TCP_FRAME_MAGIC || h.type != TCP_TYPE_ABORT ||
        h.comm_id != s->ctx->net->comm_id || h.src_rank != s->link->chan.peer ||
        h.len > TCP_ABORT_TEXT_MAX)
        return 0;
    return TCP_HDR_BYTES + (size_t)h.len;
}

/* The inbox starts with a whole abort frame: fail the comm with the peer's reason (cut at a
 * NUL, anything unprintable replaced: it is the peer's text), and keep it to pass on. */
static coll_status_t take_abort(struct tcp_sock *s)
{
    struct tcp_ctx *ctx = s->ctx;
    int peer = s->link->chan.peer;
    size_t n = inbox_abort_bytes(s) - TCP_HDR_BYTES;
    char why[TCP_ABORT_TEXT_MAX + 1];

    memcpy(why, s->inbox + s->in_pos + TCP_HDR_BYTES, n);
    why[n] = '\0';
    for (char *c = why; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
            *c = '?';
    s->in_pos += TCP_HDR_BYTES + n;
    if (!ctx->origin[0])
        memcpy(ctx->origin, why, sizeof(why));
    return conn_fail(s, COLL_REMOTE_ERROR, "rank %d (%s) failed or was aborted%s%s", peer,
                     peer_host(ctx, peer), why[0] ? ", first failure: " : "", why);
}

/* Send why on one socket of l whose stream is between frames, then end the stream and read
 * what the peer still sent (closing with unread data would reset the connection, and a
 * reset may reach the peer before our frame is read). */
static void link_send_abort(struct tcp_link *l, const char *why)
{
    struct tcp_ctx *ctx = l->ctx;
    uint8_t frame[TCP_HDR_BYTES + TCP_ABORT_TEXT_MAX];
    size_t n = strnlen(why, TCP_ABORT_TEXT_MAX);
    struct tcp_hdr h = {.magic = TCP_FRAME_MAGIC,
                        .type = TCP_TYPE_ABORT,
                        .src_rank = ctx->net->rank,
                        .comm_id = ctx->net->comm_id,
                        .len = n};

    hdr_encode(frame, &h);
    memcpy(frame + TCP_HDR_BYTES, why, n);
    for (int i = 0; i < l->nsocks; i++) {
        struct tcp_sock *s = l->socks[i];
        struct iovec iov = {frame, TCP_HDR_BYTES + n};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        uint8_t sink[4096];

        if (!s || s->state != TCP_UP || s->fd < 0 ||
            (s->sq.n > 0 && fifo_at(&s->sq, 0)->done > 0) || s->tail_len > 0)
            continue;
        (void)coll__sys.sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        coll__sys.shutdown(s->fd, SHUT_WR);
        for (int k = 0; k < 64; k++) {
            struct iovec in = {sink, sizeof(sink)};
            ssize_t r = coll__sys.readv(s->fd, &in, 1);

            if (r <= 0 && !(r < 0 && errno == EINTR))
                break;
        }
        return;
    }
}

/* ---- 8 connector handshake ----------------------------------------------------------- */

static coll_status_t connector_fail(struct tcp_sock *s, int err, const char *what)
{
    struct tcp_ctx *ctx = s->ctx;
    int peer = s->link->chan.peer;
    char addr[64], ebuf[128];

    coll__sockaddr_str(ctx->net->peers[peer].addr, ctx->net->peers[peer].addr_len, addr,
                       sizeof(addr));
    return conn_fail(s, COLL_REMOTE_ERROR, "%s rank %d (%s, '%s') failed: %s", what, peer,
                     peer_host(ctx, peer), addr,
                     err ? strerror_r(err, ebuf, sizeof(ebuf)) : "connection closed");
}

static coll_status_t connector_dial(struct tcp_sock *s);

/* The connection ended before the acceptor took our answer: a listener under a crowd of
 * strangers drops its oldest connections still in their handshake, ours among them when it
 * was slow to answer. Nothing of it was counted there, so dialling again is safe; an
 * acceptor that refuses us for good (it is not our peer) closes every try. */
static void connector_lost(struct tcp_sock *s, int err)
{
    int peer = s->link->chan.peer;

    if (s->tries >= TCP_CONNECT_TRIES) {
        connector_fail(s, err, "handshake with");
        return;
    }
    COLL_INFO(COLL_SUB_NET,
              "rank %d: rank %d (%s) closed socket %d before taking its handshake (try %d of "
              "%d); dialling again",
              s->ctx->net->rank, peer, peer_host(s->ctx, peer), s->idx, s->tries,
              TCP_CONNECT_TRIES);
    sock_close_fd(s);
    s->hs_off = 0;
    if (connector_dial(s) != COLL_SUCCESS) {
        conn_fail(s, COLL_REMOTE_ERROR, "%s", "dialling again failed");
        return;
    }
    /* our callback may run for the old fd's event later in this batch: harmless, the new
     * socket's state just waits for its own */
    sock_watch_or_fail(s, s->state == TCP_CONNECTING ? EPOLLOUT : EPOLLIN);
}

static bool conn_gone(ssize_t n)
{
    return n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE));
}

static void connector_event(struct tcp_sock *s, uint32_t events)
{
    struct tcp_ctx *ctx = s->ctx;
    struct coll_net *net = ctx->net;
    int peer = s->link->chan.peer;
    ssize_t n;

    if (s->state == TCP_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return;
        if (coll__sys.getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        if (err) {
            connector_fail(s, err, "connect to");
            return;
        }
        s->state = TCP_HS_NONCE;
        if (sock_watch_or_fail(s, EPOLLIN) != COLL_SUCCESS)
            return;
    }
    if (s->state == TCP_HS_NONCE) {
        n = coll__sys.recv(s->fd, s->nonce + s->hs_off, TCP_NONCE_BYTES - s->hs_off, 0);
        if (conn_gone(n)) {
            connector_lost(s, n == 0 ? 0 : errno);
            return;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            connector_fail(s, errno, "handshake with");
            return;
        }
        if (n < 0)
            return;
        s->hs_off += (size_t)n;
        if (s->hs_off < TCP_NONCE_BYTES)
            return;
        put32(s->hs, TCP_HS_MAGIC);
        put64(s->hs + 4, net->comm_id);
        put32(s->hs + 12, (uint32_t)net->rank);
        put32(s->hs + 16, (uint32_t)peer);
        put16(s->hs + 20, (uint16_t)s->idx);
        put16(s->hs + 22, (uint16_t)s->link->nsocks);
        hs_mac(net->secret, s->nonce, net->comm_id, net->rank, peer, (uint16_t)s->idx,
               (uint16_t)s->link->nsocks, s->hs + 24);
        s->hs_off = 0;
        s->state = TCP_HS_ANSWER;
    }
    if (s->state == TCP_HS_ANSWER) {
        n = coll__sys.send(s->fd, s->hs + s->hs_off, TCP_HS_BYTES - s->hs_off,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
        if (conn_gone(n)) {
            connector_lost(s, errno);
            return;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            connector_fail(s, errno, "handshake with");
            return;
        }
        if (n > 0)
            s->hs_off += (size_t)n;
        if (s->hs_off < TCP_HS_BYTES) {
            sock_watch_or_fail(s, EPOLLOUT);
            return;
        }
        s->hs_off = 0;
        s->state = TCP_HS_CONFIRM;
        if (sock_watch_or_fail(s, EPOLLIN) != COLL_SUCCESS)
            return;
    }
    if (s->state == TCP_HS_CONFIRM) {
        /* read the word only: the acceptor's frames may follow it */
        n = coll__sys.recv(s->fd, s->nonce + s->hs_off, TCP_HS_OK_BYTES - s->hs_off, 0);
        if (conn_gone(n)) {
            connector_lost(s, n == 0 ? 0 : errno);
            return;
        }
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                connector_fail(s, errno, "handshake with");
            return;
        }
        s->hs_off += (size_t)n;
        if (s->hs_off < TCP_HS_OK_BYTES)
            return;
        if (get32(s->nonce) != TCP_HS_OK) {
            conn_fail(s, COLL_REMOTE_ERROR,
                      "handshake with rank %d (%s): the acceptor's answer is not a coll "
                      "acceptance",
                      peer, peer_host(ctx, peer));
            return;
        }
        COLL_TRACE(COLL_SUB_NET, "rank %d: connected socket %d of %d to rank %d (%s)", net->rank,
                   s->idx, s->link->nsocks, peer, peer_host(ctx, peer));
        sock_set_up(s);
    }
}

/* Start connecting socket idx of link l to a higher rank. */
static coll_status_t connector_start(struct tcp_ctx *ctx, struct tcp_link *l, int idx,
                                     struct tcp_sock **s_p)
{
    struct coll_net *net = ctx->net;
    int peer = l->chan.peer;
    const struct coll_peer_info *pi = &net->peers[peer];
    struct tcp_sock *s;
    coll_status_t st;

    if (!reaches(net, peer))
        return coll__error(net->comm, COLL_REMOTE_ERROR,
                           "rank %d (%s) published no TCP address (%u bytes)", peer, pi->hostname,
                           (unsigned)pi->addr_len);
    s = calloc(1, sizeof(*s));
    if (!s)
        return coll__error(net->comm, COLL_SYSTEM_ERROR, "out of memory for a connection");
    s->ctx = ctx;
    s->link = l;
    s->idx = idx;
    s->fd = -1;
    s->pe = (struct coll_pollent){.cb = sock_cb, .arg = s};
    st = connector_dial(s);
    if (st != COLL_SUCCESS) {
        free(s);
        return st;
    }
    *s_p = s;
    return COLL_SUCCESS;
}

/* A new connection for s (its first, or again after connector_lost). */
static coll_status_t connector_dial(struct tcp_sock *s)
{
    struct tcp_ctx *ctx = s->ctx;
    struct coll_net *net = ctx->net;
    int peer = s->link->chan.peer;
    const struct coll_peer_info *pi = &net->peers[peer];
    struct sockaddr_storage ss;
    int fd;

    memset(&ss, 0, sizeof(ss));
    memcpy(&ss, pi->addr, COLL_MIN(pi->addr_len, sizeof(ss)));
    fd = coll__sys.socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return coll__sys_error(net->comm, errno, "cannot create a socket to rank %d", peer);
    s->fd = fd;
    s->tries++;
    set_sockopts(ctx, fd);
    if (coll__sys.connect(fd, (struct sockaddr *)&ss, pi->addr_len) == 0) {
        s->state = TCP_HS_NONCE;
    } else if (errno == EINPROGRESS || errno == EINTR) {
        s->state = TCP_CONNECTING;
    } else {
        char addr[64], ebuf[128];
        coll__sockaddr_str(pi->addr, pi->addr_len, addr, sizeof(addr));
        coll__error(net->comm, COLL_REMOTE_ERROR, "connect to rank %d (%s, '%s') failed: %s", peer,
                    pi->hostname, addr, strerror_r(errno, ebuf, sizeof(ebuf)));
        coll__sys.close(fd);
        s->fd = -1;
        return COLL_REMOTE_ERROR;
    }
    return COLL_SUCCESS;
}

/* ---- 9 acceptor handshake, listener and timer ---------------------------------------- */

static void pending_unlink(struct tcp_ctx *ctx, struct tcp_sock *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        ctx->pend_head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        ctx->pend_tail = s->prev;
    s->prev = s->next = NULL;
    ctx->npending--;
}

static void note_rejected(struct tcp_ctx *ctx, const char *where, const char *why)
{
    if (ctx->nrejected++ == 0)
        COLL_WARN(COLL_SUB_NET,
                  "rank %d: dropped a connection from %s on the data listener %s: %s (further "
                  "ones are counted, not logged)",
                  ctx->net->rank, where, ctx->where, why);
    else
        COLL_INFO(COLL_SUB_NET, "rank %d: dropped a connection from %s: %s", ctx->net->rank, where,
                  why);
}

/* Refuse a connection still in its handshake. Its fd goes at once; its memory only in its
 * own callback: refused from elsewhere (the listener evicting it), the engine may still hold
 * an event for it in this epoll batch, which sock_cb ignores (fd < 0), so it waits in the
 * grave list until tcp_progress, which runs between batches. */
COLL_PRINTF(2, 3)
static void acceptor_reject(struct tcp_sock *s, const char *fmt, ...)
{
    struct tcp_ctx *ctx = s->ctx;
    char why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    note_rejected(ctx, s->where, why);
    pending_unlink(ctx, s);
    sock_close_fd(s);
    s->state = TCP_DEAD;
    if (ctx->in_cb == s) {
        free(s);
        return;
    }
    s->next = ctx->grave;
    ctx->grave = s;
}

/* The connector's answer is in: is it one of our ranks, with our secret, for us, and a socket
 * its link still lacks? */
static void acceptor_check(struct tcp_sock *s)
{
    struct tcp_ctx *ctx = s->ctx;
    struct coll_net *net = ctx->net;
    uint64_t comm_id = get64(s->hs + 4);
    int32_t from = (int32_t)get32(s->hs + 12), to = (int32_t)get32(s->hs + 16);
    uint16_t idx = get16(s->hs + 20), nsocks = get16(s->hs + 22);
    uint8_t mac[COLL_MAC_BYTES];
    struct tcp_link **links, *l;

    if (get32(s->hs) != TCP_HS_MAGIC) {
        acceptor_reject(s, "not a coll handshake");
        return;
    }
    if (!net->peers) {
        acceptor_reject(s, "handshake before this rank finished the bootstrap");
        return;
    }
    hs_mac(net->secret, s->nonce, comm_id, from, to, idx, nsocks, mac);
    if (!coll__mac_equal(mac, s->hs + 24, COLL_MAC_BYTES)) {
        acceptor_reject(s, "wrong MAC (another communicator's secret, or a stranger)");
        return;
    }
    if (comm_id != net->comm_id) {
        acceptor_reject(s, "handshake for communicator %016llx", (unsigned long long)comm_id);
        return;
    }
    if (to != net->rank) {
        acceptor_reject(s, "handshake addressed to rank %d", to);
        return;
    }
    /* the lower rank of a pair connects: anything else is out of protocol */
    if (from < 0 || from >= net->rank) {
        acceptor_reject(s, "handshake from rank %d, which does not connect to rank %d", from,
                        net->rank);
        return;
    }
    if (nsocks < 1 || nsocks > TCP_MAX_SOCKS || idx >= nsocks) {
        acceptor_reject(s, "handshake for socket %u of %u", idx, nsocks);
        return;
    }
    links = ctx_links(ctx);
    if (!links) {
        acceptor_reject(s, "out of memory");
        return;
    }
    l = links[from];
    if (l && l->nsocks != nsocks) {
        acceptor_reject(s, "rank %d opened a link of %d sockets, this socket says %u", from,
                        l->nsocks, nsocks);
        return;
    }
    if (l && (l->socks[idx] || l->dead)) {
        acceptor_reject(s, "rank %d is already connected (socket %u)", from, idx);
        return;
    }
    {
        /* the connector counts its socket up only on this word: a connection dropped
         * before it (the oldest of a crowd) is dialled again, never taken for a peer's */
        uint8_t ok[TCP_HS_OK_BYTES];
        put32(ok, TCP_HS_OK);
        if (coll__sys.send(s->fd, ok, sizeof(ok), MSG_NOSIGNAL | MSG_DONTWAIT) !=
            (ssize_t)sizeof(ok)) {
            acceptor_reject(s, "cannot confirm the handshake");
            return;
        }
    }
    if (!l) {
        if (!(l = link_new(ctx, from, nsocks))) {
            acceptor_reject(s, "out of memory");
            return;
        }
        links[from] = l;
        if (nsocks != cfg_nsocks(ctx))
            COLL_INFO(COLL_SUB_NET, "rank %d: rank %d links with %u sockets (COLL_NSOCKS=%d here)",
                      net->rank, from, nsocks, cfg_nsocks(ctx));
    }
    pending_unlink(ctx, s);
    s->link = l;
    s->idx = idx;
    l->socks[idx] = s;
    COLL_TRACE(COLL_SUB_NET, "rank %d: accepted socket %u of %u from rank %d (%s) at %s",
               net->rank, idx, nsocks, from, peer_host(ctx, from), s->where);
    /* frames may follow the answer at once; they wait until a receive is posted */
    sock_set_up(s);
}

static void acceptor_event(struct tcp_sock *s, uint32_t events)
{
    char ebuf[128];
    ssize_t n;

    if (s->expired) {
        acceptor_reject(s, "no handshake within %llu ms",
                        (unsigned long long)(s->ctx->hs_timeout_ns / 1000000));
        return;
    }
    if (s->state == TCP_HS_SEND) {
        n = coll__sys.send(s->fd, s->nonce + s->hs_off, TCP_NONCE_BYTES - s->hs_off,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            acceptor_reject(s, "%s", strerror_r(errno, ebuf, sizeof(ebuf)));
            return;
        }
        if (n > 0)
            s->hs_off += (size_t)n;
        if (s->hs_off < TCP_NONCE_BYTES) {
            if (events & (EPOLLHUP | EPOLLERR))
                acceptor_reject(s, "closed during the handshake");
            return;
        }
        s->hs_off = 0;
        s->state = TCP_HS_WAIT;
        if (sock_watch(s, EPOLLIN)) {
            acceptor_reject(s, "epoll_ctl failed");
            return;
        }
    }
    /* read at most the answer: frames behind it stay in the kernel */
    n = coll__sys.recv(s->fd, s->hs + s->hs_off, TCP_HS_BYTES - s->hs_off, 0);
    if (n == 0) {
        acceptor_reject(s, "closed during the handshake");
        return;
    }
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            acceptor_reject(s, "%s", strerror_r(errno, ebuf, sizeof(ebuf)));
        return;
    }
    s->hs_off += (size_t)n;
    if (s->hs_off == TCP_HS_BYTES)
        acceptor_check(s);
    else if (s->hs_off >= 4 && get32(s->hs) != TCP_HS_MAGIC)
        acceptor_reject(s, "not a coll handshake"); /* junk need not wait for 56 bytes */
}

static void sock_cb(struct coll_pollent *pe, uint32_t events)
{
    struct tcp_sock *s = pe->arg;

    if (s->fd < 0)
        return; /* closed earlier in this epoll batch */
    switch (s->state) {
    case TCP_CONNECTING:
    case TCP_HS_NONCE:
    case TCP_HS_ANSWER:
    case TCP_HS_CONFIRM:
        connector_event(s, events);
        break;
    case TCP_HS_SEND:
    case TCP_HS_WAIT: {
        struct tcp_ctx *ctx = s->ctx; /* s may be freed by its callback */
        ctx->in_cb = s;
        acceptor_event(s, events);
        ctx->in_cb = NULL;
        break;
    }
    case TCP_UP:
        sock_up_event(s, events);
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

    for (struct tcp_sock *s = ctx->pend_head; s; s = s->next)
        if (!s->expired) {
            at = s->deadline_ns;
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
    for (struct tcp_sock *s = ctx->pend_head; s && s->deadline_ns <= now; s = s->next) {
        if (s->expired)
            continue;
        /* wakes the connection's own callback, which refuses it */
        s->expired = true;
        coll__sys.shutdown(s->fd, SHUT_RDWR);
    }
    timer_rearm(ctx);
}

/* The oldest handshake still running (not one the timer already ended): first read what it
 * sent, so that an answer already in its socket is checked and taken, not thrown away; if it
 * still has not proved the secret, refuse it. Under a crowd of strangers a rank then only
 * has to answer within TCP_MAX_STRANGERS arrivals of its own connection. */
static bool pending_evict_oldest(struct tcp_ctx *ctx, const char *why)
{
    struct tcp_sock *s = ctx->pend_head;

    while (s) {
        struct tcp_sock *next = s->next;

        if (!s->expired) {
            acceptor_event(s, 0); /* not its callback: a refusal leaves s in the grave */
            if (s->state == TCP_DEAD)
                return true; /* refused for what it sent */
            if (s->state != TCP_UP) {
                acceptor_reject(s, "%s", why);
                return true;
            }
        }
        s = next;
    }
    return false;
}

static void listen_cb(struct coll_pollent *pe, uint32_t events)
{
    struct tcp_ctx *ctx = pe->arg;
    struct coll_net *net = ctx->net;

    (void)events;
    /* level-triggered: a backlog longer than a batch calls again, after the events that
     * arrived meanwhile (the answers of the connections accepted here) */
    for (int k = 0; k < TCP_ACCEPT_BATCH && !ctx->shut; k++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        struct tcp_sock *s;
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
            /* out of fds: a higher soft limit, else the oldest stranger's fd */
            if ((errno == EMFILE && coll__raise_nofile()) ||
                ((errno == EMFILE || errno == ENFILE) &&
                 pending_evict_oldest(ctx, "dropped to free a file descriptor for a newer "
                                           "connection")))
                continue;
            /* out of fds or memory: the listener would fire forever, and a peer waits */
            coll__sys_error(net->comm, errno, "cannot accept connections on %s", ctx->where);
            coll__net_fail(net, COLL_SYSTEM_ERROR);
            return;
        }
        coll__sockaddr_str(&ss, sl, where, sizeof(where));
        /* room for every socket peers may open (their COLL_NSOCKS rules their links); at
         * the cap the oldest goes, never the newcomer, which may be a rank */
        if (ctx->npending >= TCP_MAX_STRANGERS + net->nranks * TCP_MAX_SOCKS)
            pending_evict_oldest(ctx, "the oldest of too many handshakes in progress");
        s = calloc(1, sizeof(*s));
        if (!s || coll__random(s->nonce, sizeof(s->nonce)) != COLL_SUCCESS) {
            note_rejected(ctx, where, "out of memory or randomness");
            free(s);
            coll__sys.close(fd);
            continue;
        }
        s->ctx = ctx;
        s->fd = fd;
        s->idx = -1;
        s->pe = (struct coll_pollent){.cb = sock_cb, .arg = s};
        s->state = TCP_HS_SEND;
        s->deadline_ns = coll__now_ns() + ctx->hs_timeout_ns;
        memcpy(s->where, where, sizeof(where));
        set_sockopts(ctx, fd);
        s->prev = ctx->pend_tail;
        if (ctx->pend_tail)
            ctx->pend_tail->next = s;
        else
            ctx->pend_head = s;
        ctx->pend_tail = s;
        ctx->npending++;
        /* the nonce fits in a fresh socket's buffer: send it now, saving an epoll round */
        n = coll__sys.send(fd, s->nonce, TCP_NONCE_BYTES, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0)
            s->hs_off = (size_t)n;
        if (s->hs_off == TCP_NONCE_BYTES) {
            s->hs_off = 0;
            s->state = TCP_HS_WAIT;
        }
        if (sock_watch(s, s->state == TCP_HS_WAIT ? EPOLLIN : EPOLLOUT)) {
            note_rejected(ctx, where, "epoll_ctl failed");
            pending_unlink(ctx, s);
            sock_close_fd(s);
            free(s);
            continue;
        }
        if (!ctx->timer_at)
            timer_rearm(ctx);
    }
}

/* ---- 10 entry points ----------------------------------------------------------------- */

static coll_status_t tcp_init(struct coll_net *net, void **ctx_p)
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
        return coll__error(net->comm, COLL_SYSTEM_ERROR, "out of memory for the tcp transport");
    ctx->net = net;
    ctx->listen_fd = ctx->timer_fd = -1;
    ctx->listen_pe = (struct coll_pollent){.cb = listen_cb, .arg = ctx};
    ctx->timer_pe = (struct coll_pollent){.cb = timer_cb, .arg = ctx};
    hs_ms = TCP_HS_TIMEOUT_MS;
    if (net->cfg->timeout_ms > 0 && net->cfg->timeout_ms < hs_ms)
        hs_ms = net->cfg->timeout_ms;
    ctx->hs_timeout_ns = (uint64_t)hs_ms * 1000000ull;
    {
        const char *cc = getenv("COLL_TCP_CONGESTION");
        if (cc && strcmp(cc, "auto") != 0) {
            if (strlen(cc) >= sizeof(ctx->cc)) {
                st = coll__error(net->comm, COLL_INVALID_ARGUMENT,
                                 "COLL_TCP_CONGESTION '%.64s' is too long for a congestion "
                                 "control name (auto, system, or a name such as reno or cubic)",
                                 cc);
                goto out_fini;
            }
            strcpy(ctx->cc, cc);
        }
    }

    COLL_CHECK_GOTO(
        coll__socket_pick_addr(net->comm, net->cfg->socket_ifname, &ss, &sl, ifname,
                               sizeof(ifname)),
        st, out_fini);
    ctx->listen_fd = coll__sys.socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ctx->listen_fd < 0) {
        st = coll__sys_error(net->comm, errno, "cannot create the data listener socket");
        goto out_fini;
    }
    /* accepted sockets inherit the buffer sizes, which must be set before the handshake
     * for TCP window scaling to follow them */
    set_sockopts(ctx, ctx->listen_fd);
    {
        /* coll_comm_shrink's new root listens on this address again, maybe while sockets
         * accepted here linger in FIN_WAIT: they inherit this and so do not block it */
        int one = 1;
        coll__sys.setsockopt(ctx->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    }
    coll__sockaddr_str(&ss, sl, ctx->where, sizeof(ctx->where));
    if (coll__sys.bind(ctx->listen_fd, (struct sockaddr *)&ss, sl) < 0) {
        st = coll__sys_error(net->comm, errno, "cannot bind the data listener to %s (%s)",
                             ctx->where, ifname);
        goto out_fini;
    }
    if (coll__sys.listen(ctx->listen_fd, SOMAXCONN) < 0) {
        st = coll__sys_error(net->comm, errno, "cannot listen on %s", ctx->where);
        goto out_fini;
    }
    sl = sizeof(ss);
    if (coll__sys.getsockname(ctx->listen_fd, (struct sockaddr *)&ss, &sl) < 0) {
        st = coll__sys_error(net->comm, errno, "getsockname of the data listener");
        goto out_fini;
    }
    if (sl > COLL_ADDR_MAX) {
        st = coll__error(net->comm, COLL_INTERNAL_ERROR, "listen address of %u bytes",
                         (unsigned)sl);
        goto out_fini;
    }
    coll__sockaddr_str(&ss, sl, ctx->where, sizeof(ctx->where));
    ctx->timer_fd = coll__sys.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ctx->timer_fd < 0) {
        st = coll__sys_error(net->comm, errno, "timerfd_create");
        goto out_fini;
    }
    ev = (struct epoll_event){.events = EPOLLIN, .data.ptr = &ctx->listen_pe};
    if (coll__sys.epoll_ctl(net->epfd, EPOLL_CTL_ADD, ctx->listen_fd, &ev) < 0) {
        st = coll__sys_error(net->comm, errno, "epoll_ctl for the data listener");
        goto out_fini;
    }
    ev = (struct epoll_event){.events = EPOLLIN, .data.ptr = &ctx->timer_pe};
    if (coll__sys.epoll_ctl(net->epfd, EPOLL_CTL_ADD, ctx->timer_fd, &ev) < 0) {
        st = coll__sys_error(net->comm, errno, "epoll_ctl for the handshake timer");
        coll__sys.epoll_ctl(net->epfd, EPOLL_CTL_DEL, ctx->listen_fd, NULL);
        goto out_fini;
    }
    memset(net->self->addr, 0, sizeof(net->self->addr));
    memcpy(net->self->addr, &ss, sl);
    net->self->addr_len = (uint16_t)sl;
    COLL_INFO(COLL_SUB_NET, "rank %d: tcp listening on %s (%s)", net->rank, ctx->where, ifname);
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
    struct coll_net *net = ctx->net;
    struct tcp_link **links, *l;
    coll_status_t st;

    if (ctx->shut || atomic_load(net->failed) != COLL_SUCCESS)
        return failed_status(ctx);
    if (peer < 0 || peer >= net->nranks || peer == net->rank || !net->peers)
        return coll__error(net->comm, COLL_INTERNAL_ERROR,
                           "tcp: no channel from rank %d to rank %d", net->rank, peer);
    links = ctx_links(ctx);
    if (!links)
        return coll__error(net->comm, COLL_SYSTEM_ERROR, "out of memory for %d channels",
                           net->nranks);
    l = links[peer];
    if (!l && net->rank < peer) {
        int k = cfg_nsocks(ctx);

        if (!(l = link_new(ctx, peer, k))) {
            st = coll__error(net->comm, COLL_SYSTEM_ERROR, "out of memory for a link to rank %d",
                             peer);
            goto out_fail;
        }
        links[peer] = l;
        for (int i = 0; i < k; i++) {
            struct tcp_sock *s = NULL;

            COLL_CHECK_GOTO(connector_start(ctx, l, i, &s), st, out_fail);
            l->socks[i] = s;
            if (sock_watch_or_fail(s, s->state == TCP_CONNECTING ? EPOLLOUT : EPOLLIN))
                return failed_status(ctx);
            if (s->state == TCP_HS_NONCE)
                connector_event(s, EPOLLIN); /* connected at once (loopback): try the nonce */
            if (l->dead)
                return failed_status(ctx);
        }
    }
    if (!l)
        return COLL_SUCCESS; /* the lower rank will connect to us */
    if (l->dead)
        return failed_status(ctx);
    if (l->nup == l->nsocks) {
        *chan_p = &l->chan;
        return COLL_SUCCESS;
    }
    /* a peer that closes a socket of a link still being built will not finish it */
    for (int i = 0; i < l->nsocks; i++)
        if (l->socks[i] && l->socks[i]->state == TCP_EOF)
            return conn_lost(l->socks[i], l->socks[i]->eof_err);
    return COLL_SUCCESS;

out_fail:
    coll__net_fail(net, st);
    return st;
}

/* Can a transfer be queued on l? On failure the transfer completes with the status. A peer
 * that left may still have sent what a receive wants; a send to it is an error. */
static coll_status_t link_usable(struct tcp_link *l, struct coll_xfer *x, bool send)
{
    coll_status_t st = COLL_SUCCESS;

    if (l->ctx->shut || l->dead || atomic_load(l->ctx->net->failed))
        st = failed_status(l->ctx);
    for (int i = 0; send && st == COLL_SUCCESS && i < l->nsocks; i++)
        if (l->socks[i]->state == TCP_EOF)
            st = conn_lost(l->socks[i], l->socks[i]->eof_err);
    if (st != COLL_SUCCESS)
        atomic_store(&x->status, st);
    return st;
}

/* Cut x into its pieces and queue each on its socket's send or receive FIFO. The sockets
 * used are returned in socks_p[0 .. *n_p). */
static coll_status_t link_queue(struct tcp_link *l, struct coll_xfer *x, bool send,
                                struct tcp_sock **socks, uint32_t *n_p)
{
    struct coll_net *net = l->ctx->net;
    uint32_t p = npieces(x->len, l->nsocks);
    uint64_t m = send ? l->nsent : l->nrecv;
    coll_status_t st;

    for (uint32_t i = 0; i < p; i++) {
        socks[i] = l->socks[(m + i) % (uint64_t)l->nsocks];
        if (!fifo_reserve(send ? &socks[i]->sq : &socks[i]->rq)) {
            st = coll__error(net->comm, COLL_SYSTEM_ERROR,
                             "out of memory for the %s queue of rank %d",
                             send ? "send" : "receive", l->chan.peer);
            coll__net_fail(net, st);
            atomic_store(&x->status, st);
            return st;
        }
    }
    if (send)
        l->nsent++;
    else
        l->nrecv++;
    x->off = p; /* pieces not done yet */
    for (uint32_t i = 0; i < p; i++) {
        struct tcp_piece *pc = fifo_push(send ? &socks[i]->sq : &socks[i]->rq);
        size_t lo = piece_bound(x->len, p, i), hi = piece_bound(x->len, p, i + 1);

        *pc = (struct tcp_piece){.x = x, .off = lo, .len = hi - lo, .index = (uint16_t)i};
        if (send) {
            struct tcp_hdr h = {
                .magic = TCP_FRAME_MAGIC,
                .type = TCP_TYPE_DATA,
                .piece = (uint16_t)i,
                .tag = x->tag,
                .src_rank = net->rank,
                .comm_id = net->comm_id,
                .seq = x->seq,
                .len = x->len,
            };
            if (x->sig)
                h.sig = *x->sig;
            hdr_encode(pc->hdr, &h);
        }
    }
    *n_p = p;
    return COLL_SUCCESS;
}

static coll_status_t tcp_post_send(struct coll_chan *ch, struct coll_xfer *x)
{
    struct tcp_link *l = (struct tcp_link *)ch;
    struct tcp_sock *socks[TCP_MAX_SOCKS];
    coll_status_t st = link_usable(l, x, true);
    uint32_t n;

    if (st != COLL_SUCCESS)
        return st;
    COLL_CHECK_GOTO(link_queue(l, x, true, socks, &n), st, out);
    /* small messages leave now, without an epoll round; behind a blocked send they wait for
     * EPOLLOUT */
    for (uint32_t i = 0; i < n && st == COLL_SUCCESS; i++)
        if (socks[i]->writable)
            st = sock_send(socks[i]);
out:
    return st;
}

static coll_status_t tcp_post_recv(struct coll_chan *ch, struct coll_xfer *x)
{
    struct tcp_link *l = (struct tcp_link *)ch;
    struct tcp_sock *socks[TCP_MAX_SOCKS];
    coll_status_t st = link_usable(l, x, false);
    uint32_t n;

    if (st != COLL_SUCCESS)
        return st;
    COLL_CHECK_GOTO(link_queue(l, x, false, socks, &n), st, out);
    /* The data may be in the inbox or the kernel already: look now, even where the last
     * read came up short. Its edge may sit in epoll, not yet delivered (the peer sent while
     * this rank was busy: an exchange), and reading now saves an engine round on the
     * critical path; when nothing is there, the EAGAIN costs a rank that waits anyway. */
    for (uint32_t i = 0; i < n && st == COLL_SUCCESS; i++)
        if (socks[i]->rq.n == 1) {
            socks[i]->readable = true;
            st = sock_recv(socks[i]);
        }
out:
    return st;
}

static void tcp_shutdown(void *arg)
{
    struct tcp_ctx *ctx = arg;
    char why[TCP_ABORT_TEXT_MAX + 1];
    coll_status_t st;

    if (!ctx || ctx->shut)
        return;
    st = failed_status(ctx);
    ctx->shut = true;
    /* pass on the cause, not a chain of who told whom */
    if (ctx->origin[0])
        memcpy(why, ctx->origin, sizeof(why));
    else
        ctx->net->ops->error_text(ctx->net->comm, why, sizeof(why));
    for (int i = 0; ctx->links && i < ctx->nranks; i++)
        if (ctx->links[i] && !ctx->links[i]->dead) {
            link_send_abort(ctx->links[i], why);
            link_kill(ctx->links[i], st);
        }
    /* pending handshakes keep their memory until fini: their events may still be queued */
    for (struct tcp_sock *s = ctx->pend_head; s; s = s->next)
        sock_close_fd(s);
    if (ctx->listen_fd >= 0) {
        coll__sys.epoll_ctl(ctx->net->epfd, EPOLL_CTL_DEL, ctx->listen_fd, NULL);
        coll__sys.close(ctx->listen_fd);
        ctx->listen_fd = -1;
    }
    /* an armed timer nobody reads would wake the engine forever */
    if (ctx->timer_fd >= 0) {
        coll__sys.epoll_ctl(ctx->net->epfd, EPOLL_CTL_DEL, ctx->timer_fd, NULL);
        coll__sys.close(ctx->timer_fd);
        ctx->timer_fd = -1;
    }
}

/* Between epoll batches: free the handshakes refused outside their own callback. */
static bool tcp_progress(void *arg)
{
    struct tcp_ctx *ctx = arg;

    while (ctx->grave) {
        struct tcp_sock *s = ctx->grave;
        ctx->grave = s->next;
        free(s);
    }
    return false;
}

/* Nothing to arm (sockets wake the engine by themselves); defined because a transport with
 * a progress hook has all three. */
static bool tcp_arm(void *arg)
{
    (void)arg;
    return false;
}

static void tcp_disarm(void *arg)
{
    (void)arg;
}

static void tcp_fini(void *arg)
{
    struct tcp_ctx *ctx = arg;

    if (!ctx)
        return;
    tcp_progress(ctx);
    for (int i = 0; ctx->links && i < ctx->nranks; i++) {
        struct tcp_link *l = ctx->links[i];
        if (!l)
            continue;
        link_kill(l, failed_status(ctx));
        for (int k = 0; k < l->nsocks; k++) {
            if (!l->socks[k])
                continue;
            fifo_free(&l->socks[k]->sq);
            fifo_free(&l->socks[k]->rq);
            free(l->socks[k]->inbox);
            free(l->socks[k]);
        }
        free(l);
    }
    while (ctx->pend_head) {
        struct tcp_sock *s = ctx->pend_head;
        pending_unlink(ctx, s);
        sock_close_fd(s);
        free(s);
    }
    if (ctx->listen_fd >= 0) {
        coll__sys.epoll_ctl(ctx->net->epfd, EPOLL_CTL_DEL, ctx->listen_fd, NULL);
        coll__sys.close(ctx->listen_fd);
    }
    if (ctx->timer_fd >= 0) {
        coll__sys.epoll_ctl(ctx->net->epfd, EPOLL_CTL_DEL, ctx->timer_fd, NULL);
        coll__sys.close(ctx->timer_fd);
    }
    free(ctx->links);
    free(ctx);
}

uint64_t coll__tcp_rejected(const void *ctx)
{
    return ctx ? ((const struct tcp_ctx *)ctx)->nrejected : 0;
}

int coll__tcp_link_fds(const void *arg, int peer, int *fds, int max)
{
    const struct tcp_ctx *ctx = arg;
    const struct tcp_link *l;
    int n = 0;

    if (!ctx || !ctx->links || peer < 0 || peer >= ctx->nranks || !(l = ctx->links[peer]))
        return 0;
    for (int i = 0; i < l->nsocks; i++) {
        if (n < max)
            fds[n] = l->socks[i] ? l->socks[i]->fd : -1;
        n++;
    }
    return n;
}

const struct coll_transport coll__tcp_transport = {
    .name = "tcp",
    .fds_only = true,
    .probe = tcp_probe,
    .init = tcp_init,
    .connect = tcp_connect,
    .post_send = tcp_post_send,
    .post_recv = tcp_post_recv,
    .stalled = tcp_stalled,
    .progress = tcp_progress,
    .arm = tcp_arm,
    .disarm = tcp_disarm,
    .shutdown = tcp_shutdown,
    .fini = tcp_fini,
};
