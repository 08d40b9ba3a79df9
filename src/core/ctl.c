/*
 * ctl.c - the control plane (ctl.h): a binomial tree of authenticated TCP connections per
 * comm, served by one thread, that carries failures, probes of stalled calls, teardown and
 * the stall table.
 *
 * Divisions: 1 frames and links, 2 the handshake and the tree, 3 failures and probes,
 * 4 teardown, 5 the stall table and SIGUSR1, 6 the thread.
 *
 * Handshake (after the bootstrap; the parent's listener was opened before its join record
 * was sent, so it exists once the table arrives):
 *   parent -> child   magic u32 | nonce_p[16]
 *   child -> parent   magic u32 | comm_id u64 | child u32 | nonce_c[16] |
 *                     HMAC(secret, "coll-ctlc" | nonce_p | comm_id | child | parent)
 *   parent -> child   HMAC(secret, "coll-ctlp" | nonce_c | comm_id | parent | child)
 * Frames: magic u32 | type u8 | 0 u8 | text length u16 | origin i32 | dest i32 | status u32 |
 *         0 u32 | call number u64 | signature[COLL_SIG_BYTES] | text. Every field is checked
 *         on receipt; a malformed frame is a failure of the link that sent it.
 */
#include "ctl.h"
#include "agree.h"
#include "bootstrap.h"
#include "exec.h"
#include "../base/net.h"
#include "../base/sys.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CTL_MAGIC 0x4c544343u  /* "CCTL": handshake */
#define CTL_FMAGIC 0x46544343u /* "CCTF": frame */
#define CTL_NONCE 16
#define CTL_HELLO_BYTES (4 + 8 + 4 + CTL_NONCE + COLL_MAC_BYTES)
#define CTL_HDR (32 + COLL_SIG_BYTES)
#define CTL_TEXT_MAX 1000
#define CTL_OUT_MAX (1u << 20) /* a neighbour that reads nothing for this long is stuck */
#define CTL_MAX_LINKS 33       /* the parent and at most 31 children (nranks < 2^31) */
#define CTL_HANDSHAKE_MS 2000  /* one connection at the listener, to finish its handshake */
#define CTL_LEAVE_MS 1000      /* destroy's wait for the others' teardown */
#define CTL_DUMP_MS 1000       /* rank 0's wait for the table's lines */
#define CTL_PROBE_FWD_MS 100   /* a relay forwards the same probe at most this often */
#define CTL_PENDING 16         /* probes of calls this rank has not reached yet */
#define CTL_PENDING_MS 30000
/* News of a failure elsewhere (a FAIL frame, or a neighbour's link ending without BYE) fails
 * this rank's comm this much later, not at once: the news travels on its own connection and
 * can outrun the last messages of a call that the failed rank had finished (it failed in a
 * later call, or exited after this one), and a call those messages complete must not fail
 * for it. A call that truly needs the failed rank fails sooner, on its own link, or at this
 * deadline. A FAIL is passed on at once, so the grace is paid once, not per hop. */
#define CTL_GRACE_MS 100
#define LABEL_BYTES 9

enum { F_PING = 1, F_FAIL, F_PROBE, F_BYE, F_DONE, F_DUMPREQ, F_DUMPLINE, F_MAX };

struct ctl_link {
    int fd;
    int peer;
    bool child;
    bool bye_in;  /* it said BYE (or DONE): its end of the connection is a clean leave */
    bool bye_out; /* this rank said BYE or DONE on it */
    bool down;    /* ended: nothing more is read or sent */
    uint64_t last_rx_ns, last_tx_ns;
    uint8_t in[CTL_HDR + CTL_TEXT_MAX];
    size_t in_len;
    uint8_t *out;
    size_t out_len, out_cap;
};

struct ctl_pending {
    bool used;
    int origin;
    uint64_t cseq;
    struct coll_sig sig;
    uint64_t at_ns;
};

struct coll_ctl {
    struct coll_comm *comm;
    int lfd, evfd;
    unsigned sig_seen;
    int nlinks, nkids, parent;
    struct ctl_link links[CTL_MAX_LINKS]; /* links[0] is the parent's when there is one */
    pthread_t thread;
    bool started;
    pthread_mutex_t lock; /* links' output, teardown state; taken after the engine lock */
    pthread_cond_t cond;  /* destroy's wait */
    bool stop;
    int64_t ping_ms, silent_ms;
    /* a failure heard of, held for CTL_GRACE_MS before it fails the comm (engine lock) */
    bool held;
    uint64_t held_at_ns;
    coll_status_t held_st;
    char held_text[CTL_TEXT_MAX + 128];
    /* the failure being told (engine lock): a relayed one keeps its origin's text */
    bool told;
    /* teardown (lock): messages sent minus received, this rank's and its subtree's */
    bool leaving, done;
    int kids_bye;
    int64_t my_balance, kids_balance;
    bool kids_unknown; /* a child left without its subtree's balance (it gave up waiting) */
    /* probes (the thread, and the engine under lock) */
    uint64_t fwd_cseq, fwd_ns;
    struct coll_sig fwd_sig;
    struct ctl_pending pend[CTL_PENDING];
    /* the stall table, on rank 0 (the thread only) */
    bool dumping;
    uint64_t dump_end_ns, dump_last_ns;
    char **dump_lines;
    int dump_got;
};

/* ---- 1 frames and links -------------------------------------------------------------- */

static void ctl_wake(struct coll_ctl *c)
{
    uint64_t one = 1;
    ssize_t r = write(c->evfd, &one, sizeof(one));
    (void)r; /* a wake-up already pending is as good */
}

/* Write what the link holds; what the socket does not take now waits for the thread's
 * POLLOUT. Lock held. */
static void link_flush(struct coll_ctl *c, struct ctl_link *l)
{
    while (l->out_len && !l->down) {
        ssize_t n = coll__sys.send(l->fd, l->out, l->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            memmove(l->out, l->out + n, l->out_len - (size_t)n);
            l->out_len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && c->evfd >= 0)
            ctl_wake(c);
        break; /* an error: the reader sees the connection end */
    }
}

/* Queue one frame on l and send what goes now. Lock held. */
static void link_send(struct coll_ctl *c, struct ctl_link *l, int type, int origin, int dest,
                      uint32_t status, uint64_t cseq, const struct coll_sig *sig,
                      const char *text)
{
    size_t tlen = text ? strnlen(text, CTL_TEXT_MAX) : 0, need;
    uint8_t *p;

    if (l->fd < 0 || l->down)
        return;
    need = l->out_len + CTL_HDR + tlen;
    if (need > CTL_OUT_MAX)
        return; /* it has not read for a long while: its silence will tell */
    if (need > l->out_cap) {
        size_t cap = l->out_cap ? l->out_cap * 2 : 4096;
        uint8_t *o;
        while (cap < need)
            cap *= 2;
        o = realloc(l->out, cap);
        if (!o)
            return;
        l->out = o;
        l->out_cap = cap;
    }
    p = l->out + l->out_len;
    memset(p, 0, CTL_HDR);
    put32(p, CTL_FMAGIC);
    p[4] = (uint8_t)type;
    put16(p + 6, (uint16_t)tlen);
    put32(p + 8, (uint32_t)origin);
    put32(p + 12, (uint32_t)dest);
    put32(p + 16, status);
    put64(p + 24, cseq);
    if (sig)
        coll__sig_put(p + 32, sig);
    if (tlen)
        memcpy(p + CTL_HDR, text, tlen);
    l->out_len = need;
    l->last_tx_ns = coll__now_ns();
    link_flush(c, l);
}

static struct ctl_link *parent_link(struct coll_ctl *c)
{
    return c->parent >= 0 && c->nlinks > 0 && !c->links[0].child ? &c->links[0] : NULL;
}

/* ---- 2 the handshake and the tree ----------------------------------------------------- */

static void ctl_mac(const uint8_t *secret, const char *label, const uint8_t nonce[CTL_NONCE],
                    uint64_t comm_id, int from, int to, uint8_t mac[COLL_MAC_BYTES])
{
    uint8_t m[LABEL_BYTES + CTL_NONCE + 8 + 4 + 4];

    memcpy(m, label, LABEL_BYTES);
    memcpy(m + LABEL_BYTES, nonce, CTL_NONCE);
    put64(m + LABEL_BYTES + CTL_NONCE, comm_id);
    put32(m + LABEL_BYTES + CTL_NONCE + 8, (uint32_t)from);
    put32(m + LABEL_BYTES + CTL_NONCE + 12, (uint32_t)to);
    coll__hmac_sha256(secret, COLL_SECRET_BYTES, m, sizeof(m), mac);
}

coll_status_t coll__ctl_listen(struct coll_comm *comm, int root_fd, struct coll_peer_info *self)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct coll_ctl *c = comm->ctl;
    int fd;

    if (comm->nranks < 2)
        return COLL_SUCCESS;
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c)
            return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the control plane");
        c->comm = comm;
        c->lfd = c->evfd = -1;
        c->parent = -1;
        for (int i = 0; i < CTL_MAX_LINKS; i++)
            c->links[i].fd = -1;
        pthread_mutex_init(&c->lock, NULL);
        pthread_cond_init(&c->cond, NULL);
        comm->ctl = c;
    }
    if (c->lfd >= 0) { /* a join tried again: the listener stands */
        memcpy(self->ctl_addr, comm->self.ctl_addr, COLL_ADDR_MAX);
        self->ctl_addr_len = comm->self.ctl_addr_len;
        return COLL_SUCCESS;
    }
    /* the address this rank reaches the root from is one the others can reach it at */
    memset(&ss, 0, sizeof(ss));
    if (coll__sys.getsockname(root_fd, (struct sockaddr *)&ss, &sl) < 0)
        return coll__sys_error(comm, errno, "control plane: getsockname");
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = 0;
    else if (ss.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
    else
        return coll__error(comm, COLL_SYSTEM_ERROR, "control plane: the bootstrap socket is "
                           "neither IPv4 nor IPv6");
    fd = coll__sys.socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return coll__sys_error(comm, errno, "control plane: socket");
    if (coll__sys.bind(fd, (struct sockaddr *)&ss, sl) < 0 || coll__sys.listen(fd, 128) < 0 ||
        (sl = sizeof(ss), coll__sys.getsockname(fd, (struct sockaddr *)&ss, &sl)) < 0) {
        int err = errno;
        coll__sys.close(fd);
        return coll__sys_error(comm, err, "control plane: cannot listen");
    }
    if (sl > COLL_ADDR_MAX) {
        coll__sys.close(fd);
        return coll__error(comm, COLL_SYSTEM_ERROR, "control plane: address of %u bytes",
                           (unsigned)sl);
    }
    c->lfd = fd;
    memset(self->ctl_addr, 0, COLL_ADDR_MAX);
    memcpy(self->ctl_addr, &ss, sl);
    self->ctl_addr_len = (uint16_t)sl;
    memcpy(comm->self.ctl_addr, self->ctl_addr, COLL_ADDR_MAX);
    comm->self.ctl_addr_len = self->ctl_addr_len;
    return COLL_SUCCESS;
}

static void set_sockopts(int fd)
{
    int one = 1;
    coll__sys.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Connect to rank p's listener and prove the secret both ways. */
static coll_status_t child_handshake(struct coll_ctl *c, int p, uint64_t deadline, int *fd_p)
{
    struct coll_comm *comm = c->comm;
    const struct coll_peer_info *pi = &comm->peers[p];
    uint8_t hello[4 + CTL_NONCE], rec[CTL_HELLO_BYTES], nonce_c[CTL_NONCE];
    uint8_t mac[COLL_MAC_BYTES], want[COLL_MAC_BYTES];
    struct sockaddr_storage ss;
    char where[64];
    int fd = -1, err = 0;
    coll_status_t st;

    if (pi->ctl_addr_len == 0 || pi->ctl_addr_len > COLL_ADDR_MAX)
        return coll__error(comm, COLL_REMOTE_ERROR, "control plane: rank %d published no "
                           "control address", p);
    coll__sockaddr_str(pi->ctl_addr, pi->ctl_addr_len, where, sizeof(where));
    memset(&ss, 0, sizeof(ss));
    memcpy(&ss, pi->ctl_addr, pi->ctl_addr_len);
    fd = coll__sys.socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return coll__sys_error(comm, errno, "control plane: socket");
    if (coll__sys.connect(fd, (struct sockaddr *)&ss, pi->ctl_addr_len) < 0 &&
        errno != EINPROGRESS) {
        err = errno;
        goto fail;
    }
    {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        socklen_t el = sizeof(err);
        uint64_t now = coll__now_ns();
        int ms = now >= deadline ? 0 : (int)COLL_MIN((deadline - now) / 1000000ull, 1u << 30);
        int r;
        do
            r = coll__sys.poll(&pfd, 1, ms);
        while (r < 0 && errno == EINTR);
        if (r <= 0) {
            err = r == 0 ? ETIMEDOUT : errno;
            goto fail;
        }
        if (coll__sys.getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
            err = errno;
        if (err)
            goto fail;
    }
    set_sockopts(fd);
    err = coll__io_full(fd, hello, sizeof(hello), deadline, false);
    if (err)
        goto fail;
    if (get32(hello) != CTL_MAGIC) {
        st = coll__error(comm, COLL_REMOTE_ERROR, "control plane: %s (rank %d's address) "
                         "does not speak the control protocol", where, p);
        goto out;
    }
    COLL_CHECK_GOTO(coll__random(nonce_c, sizeof(nonce_c)), st, out);
    put32(rec, CTL_MAGIC);
    put64(rec + 4, comm->comm_id);
    put32(rec + 12, (uint32_t)comm->rank);
    memcpy(rec + 16, nonce_c, CTL_NONCE);
    ctl_mac(comm->secret, "coll-ctlc", hello + 4, comm->comm_id, comm->rank, p,
            rec + 16 + CTL_NONCE);
    err = coll__io_full(fd, rec, sizeof(rec), deadline, true);
    if (!err)
        err = coll__io_full(fd, mac, sizeof(mac), deadline, false);
    if (err)
        goto fail;
    ctl_mac(comm->secret, "coll-ctlp", nonce_c, comm->comm_id, p, comm->rank, want);
    if (!coll__mac_equal(want, mac, COLL_MAC_BYTES)) {
        st = coll__error(comm, COLL_REMOTE_ERROR, "control plane: the answer from %s (rank "
                         "%d) is not signed with this comm's secret", where, p);
        goto out;
    }
    *fd_p = fd;
    return COLL_SUCCESS;

fail:
    st = coll__error(comm, err == ETIMEDOUT ? COLL_TIMEOUT : COLL_REMOTE_ERROR,
                     "control plane: cannot reach rank %d (%s) at %s: %s", p,
                     pi->hostname, where, err == EPIPE ? "connection closed" : strerror(err));
out:
    coll__sys.close(fd);
    return st;
}

/* Read one connection at the listener: a child of this rank with the secret, or not. */
static int parent_handshake(struct coll_ctl *c, int fd, uint64_t deadline, int *child_p)
{
    struct coll_comm *comm = c->comm;
    uint8_t hello[4 + CTL_NONCE], rec[CTL_HELLO_BYTES], mac[COLL_MAC_BYTES];
    int child, err;

    put32(hello, CTL_MAGIC);
    if (coll__random(hello + 4, CTL_NONCE) != COLL_SUCCESS)
        return EIO;
    err = coll__io_full(fd, hello, sizeof(hello), deadline, true);
    if (!err)
        err = coll__io_full(fd, rec, sizeof(rec), deadline, false);
    if (err)
        return err;
    child = (int)get32(rec + 12);
    if (get32(rec) != CTL_MAGIC || get64(rec + 4) != comm->comm_id || child <= comm->rank ||
        child >= comm->nranks || (child & (child - 1)) != comm->rank)
        return EPROTO;
    ctl_mac(comm->secret, "coll-ctlc", hello + 4, comm->comm_id, child, comm->rank, mac);
    if (!coll__mac_equal(mac, rec + 16 + CTL_NONCE, COLL_MAC_BYTES))
        return EACCES;
    ctl_mac(comm->secret, "coll-ctlp", rec + 16, comm->comm_id, comm->rank, child, mac);
    err = coll__io_full(fd, mac, sizeof(mac), deadline, true);
    if (err)
        return err;
    *child_p = child;
    return 0;
}

static coll_status_t accept_children(struct coll_ctl *c, uint64_t deadline)
{
    struct coll_comm *comm = c->comm;
    int want = 0, got = 0, strangers = 0;
    bool have[32] = {false};

    for (int b = 1; comm->rank + b < comm->nranks && (comm->rank == 0 || b < (comm->rank & -comm->rank)); b <<= 1)
        want++;
    c->nkids = want;
    while (got < want) {
        struct pollfd pfd = {.fd = c->lfd, .events = POLLIN};
        uint64_t now = coll__now_ns();
        int ms, fd, child = -1, err, r;

        if (now >= deadline)
            return coll__error(comm, COLL_TIMEOUT,
                               "control plane: %d of %d child ranks connected within "
                               "COLL_BOOTSTRAP_TIMEOUT_MS (did a rank fail its init?)",
                               got, want);
        ms = (int)COLL_MIN((deadline - now) / 1000000ull + 1, 1u << 30);
        r = coll__sys.poll(&pfd, 1, ms);
        if (r < 0 && errno != EINTR)
            return coll__sys_error(comm, errno, "control plane: poll");
        if (r <= 0)
            continue;
        fd = coll__sys.accept4(c->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
                continue;
            return coll__sys_error(comm, errno, "control plane: accept");
        }
        set_sockopts(fd);
        err = parent_handshake(c, fd,
                               COLL_MIN(deadline, now + CTL_HANDSHAKE_MS * 1000000ull), &child);
        if (err || have[__builtin_ctz((unsigned)(child - comm->rank))]) {
            coll__sys.close(fd);
            strangers++;
            continue;
        }
        have[__builtin_ctz((unsigned)(child - comm->rank))] = true;
        c->links[c->nlinks] = (struct ctl_link){.fd = fd, .peer = child, .child = true};
        c->nlinks++;
        got++;
    }
    if (strangers)
        COLL_WARN(COLL_SUB_NET, "rank %d: control plane: dropped %d connection%s that did not "
                  "prove the comm's secret", comm->rank, strangers, strangers == 1 ? "" : "s");
    return COLL_SUCCESS;
}

/* ---- 3 failures and probes ------------------------------------------------------------ */

/* This rank's failure found by the thread (a neighbour's end, its silence, a bad frame). */
static void ctl_local_fail(struct coll_ctl *c, int li, coll_status_t st, const char *fmt, ...)
    COLL_PRINTF(4, 5);
static void ctl_local_fail(struct coll_ctl *c, int li, coll_status_t st, const char *fmt, ...)
{
    struct coll_comm *comm = c->comm;
    char msg[CTL_TEXT_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&comm->lock);
    if (atomic_load(&comm->failed) == COLL_SUCCESS) {
        (void)li;
        coll__error(comm, st, "%s", msg);
        coll__comm_fail(comm, st);
    }
    pthread_mutex_unlock(&comm->lock);
}

/* Hold a failure heard of for CTL_GRACE_MS (engine lock held); the first one held wins. */
static void hold(struct coll_ctl *c, coll_status_t st, const char *fmt, ...) COLL_PRINTF(3, 4);
static void hold(struct coll_ctl *c, coll_status_t st, const char *fmt, ...)
{
    va_list ap;

    if (c->held)
        return;
    va_start(ap, fmt);
    vsnprintf(c->held_text, sizeof(c->held_text), fmt, ap);
    va_end(ap);
    c->held_st = st;
    c->held_at_ns = coll__now_ns() + CTL_GRACE_MS * 1000000ull;
    c->held = true;
    ctl_wake(c);
}

/* A FAIL frame from link li: the comm fails with the origin's text, and passes it on. A
 * usage error (ranks that disagree on a setting) is every rank's own: it keeps its status;
 * anything else is a peer's failure here. */
static void ctl_remote_fail(struct coll_ctl *c, int li, int origin, uint32_t status,
                            const char *text)
{
    struct coll_comm *comm = c->comm;
    coll_status_t st = status == COLL_INVALID_USAGE ? COLL_INVALID_USAGE : COLL_REMOTE_ERROR;

    pthread_mutex_lock(&comm->lock);
    if (atomic_load(&comm->failed) == COLL_SUCCESS && !c->held && !c->told) {
        /* passed on now; failed here after the grace (CTL_GRACE_MS) */
        c->told = true;
        pthread_mutex_lock(&c->lock);
        for (int i = 0; i < c->nlinks; i++)
            if (i != li)
                link_send(c, &c->links[i], F_FAIL, origin, -1, (uint32_t)st, 0, NULL, text);
        pthread_mutex_unlock(&c->lock);
        hold(c, st, "rank %d (%s) failed, first failure: %s", origin,
             comm->peers[origin].hostname, text);
    }
    pthread_mutex_unlock(&comm->lock);
}

/* The held failure, once its time has come (or at once: force), fails the comm. */
static void held_fire(struct coll_ctl *c, bool force)
{
    struct coll_comm *comm = c->comm;

    pthread_mutex_lock(&comm->lock);
    if (c->held && (force || coll__now_ns() >= c->held_at_ns)) {
        c->held = false;
        if (atomic_load(&comm->failed) == COLL_SUCCESS) {
            coll__error(comm, c->held_st, "%s", c->held_text);
            coll__comm_fail(comm, c->held_st);
        }
    }
    pthread_mutex_unlock(&comm->lock);
}

void coll__ctl_failed(struct coll_comm *comm)
{
    struct coll_ctl *c = comm->ctl;
    char text[CTL_TEXT_MAX + 1];
    int origin;

    if (!c || c->told)
        return;
    c->told = true;
    {
        const char *first, *p;
        int r;
        origin = comm->rank;
        pthread_mutex_lock(&comm->errlock);
        /* a failure a transport passed on already names the first one: pass that on, not
         * a nest of relays */
        first = comm->errmsg;
        for (p = comm->errmsg; (p = strstr(p, "first failure: ")); p++)
            first = p + strlen("first failure: ");
        if (first != comm->errmsg && sscanf(first, "rank %d:", &r) == 1 && r >= 0 &&
            r < comm->nranks)
            origin = r;
        snprintf(text, sizeof(text), "%.1000s", first);
        pthread_mutex_unlock(&comm->errlock);
    }
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->nlinks; i++)
        link_send(c, &c->links[i], F_FAIL, origin, -1, (uint32_t)atomic_load(&comm->failed), 0,
                  NULL, text);
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

/* Send a probe (this rank's or one passing through) to the parent, unless the same one went
 * up a moment ago. Lock held. */
static void probe_up(struct coll_ctl *c, int origin, uint64_t cseq, const struct coll_sig *s)
{
    struct ctl_link *pl = parent_link(c);
    uint64_t now = coll__now_ns();

    if (!pl)
        return;
    if (c->fwd_ns && cseq == c->fwd_cseq && !memcmp(s, &c->fwd_sig, sizeof(*s)) &&
        now - c->fwd_ns < CTL_PROBE_FWD_MS * 1000000ull)
        return;
    c->fwd_ns = now;
    c->fwd_cseq = cseq;
    c->fwd_sig = *s;
    link_send(c, pl, F_PROBE, origin, 0, 0, cseq, s, NULL);
}

void coll__ctl_probe(struct coll_comm *comm, uint64_t cseq, const struct coll_sig *s)
{
    struct coll_ctl *c = comm->ctl;

    if (!c || !c->started)
        return;
    pthread_mutex_lock(&c->lock);
    probe_up(c, comm->rank, cseq, s);
    pthread_mutex_unlock(&c->lock);
    /* rank 0's own call is compared with the probes it holds on the thread's next round */
    if (comm->rank == 0)
        ctl_wake(c);
}

/* Compare a probe with this rank's call of that number: a difference fails the comm. */
static bool probe_check(struct coll_ctl *c, int origin, uint64_t cseq, const struct coll_sig *s)
{
    struct coll_comm *comm = c->comm;
    char why[640];

    if (!coll__agree_probe(comm, origin, cseq, s, why, sizeof(why)))
        return false;
    pthread_mutex_lock(&comm->lock);
    if (atomic_load(&comm->failed) == COLL_SUCCESS) {
        coll__error(comm, COLL_REMOTE_ERROR, "%s", why);
        coll__comm_fail(comm, COLL_REMOTE_ERROR);
    }
    pthread_mutex_unlock(&comm->lock);
    return true;
}

static void handle_probe(struct coll_ctl *c, int origin, uint64_t cseq, const struct coll_sig *s)
{
    struct coll_comm *comm = c->comm;

    if (probe_check(c, origin, cseq, s))
        return;
    if (cseq >= atomic_load(&comm->next_coll_seq)) {
        /* not there yet: compare when this rank gets there */
        struct ctl_pending *slot = &c->pend[0];
        for (int i = 0; i < CTL_PENDING; i++) {
            struct ctl_pending *p = &c->pend[i];
            if (p->used && p->origin == origin && p->cseq == cseq) {
                slot = p;
                break;
            }
            if (!p->used || p->at_ns < slot->at_ns)
                slot = p;
        }
        *slot = (struct ctl_pending){.used = true, .origin = origin, .cseq = cseq, .sig = *s,
                                     .at_ns = coll__now_ns()};
    }
    pthread_mutex_lock(&c->lock);
    probe_up(c, origin, cseq, s);
    pthread_mutex_unlock(&c->lock);
}

static void pending_check(struct coll_ctl *c)
{
    uint64_t now = coll__now_ns();

    for (int i = 0; i < CTL_PENDING; i++) {
        struct ctl_pending *p = &c->pend[i];
        if (!p->used)
            continue;
        if (probe_check(c, p->origin, p->cseq, &p->sig) ||
            p->cseq < atomic_load(&c->comm->next_coll_seq) ||
            now - p->at_ns > CTL_PENDING_MS * 1000000ull)
            p->used = false;
    }
}

/* ---- 4 teardown ------------------------------------------------------------------------ */

/* Once this rank leaves and its whole subtree has said BYE: BYE up with the subtree's
 * message balance, or at rank 0, DONE down if every message sent was received. Returns the
 * comm's balance where rank 0 finds it off (the caller fails the comm: the engine lock
 * comes first), else 0. Lock held. */
static int64_t leave_step(struct coll_ctl *c)
{
    struct ctl_link *pl = parent_link(c);
    int64_t sum = c->my_balance + c->kids_balance;

    if (!c->leaving || c->done || c->kids_bye < c->nkids)
        return 0;
    if (pl) {
        if (!pl->bye_out) {
            pl->bye_out = true;
            link_send(c, pl, F_BYE, c->comm->rank, -1, c->kids_unknown ? 0 : 1,
                      (uint64_t)sum, NULL, NULL);
        }
        return 0;
    }
    if (sum != 0 && !c->kids_unknown)
        return sum;
    for (int i = 0; i < c->nlinks; i++) {
        c->links[i].bye_out = true;
        link_send(c, &c->links[i], F_DONE, c->comm->rank, -1, 0, 0, NULL, NULL);
    }
    c->done = true;
    pthread_cond_broadcast(&c->cond);
    return 0;
}

/* Rank 0, every rank in destroy: the messages sent and received on the comm differ. */
static void leave_mismatch(struct coll_ctl *c, int64_t sum)
{
    struct coll_comm *comm = c->comm;

    pthread_mutex_lock(&comm->lock);
    if (atomic_load(&comm->failed) == COLL_SUCCESS) {
        coll__error(comm, COLL_REMOTE_ERROR,
                    "coll_comm_destroy: %lld message%s sent on this comm %s received by no "
                    "rank: the ranks' calls differed (a root, a collective, or a send "
                    "without its receive) where the receiving rank had already moved on",
                    (long long)(sum > 0 ? sum : -sum), sum == 1 || sum == -1 ? "" : "s",
                    sum == 1 || sum == -1 ? "was" : "were");
        coll__comm_fail(comm, COLL_REMOTE_ERROR);
    }
    pthread_mutex_unlock(&comm->lock);
}

void coll__ctl_leave(struct coll_comm *comm)
{
    struct coll_ctl *c = comm->ctl;
    uint64_t deadline;
    int64_t off;

    if (!c || !c->started)
        return;
    held_fire(c, true); /* a failure heard of before the destroy is the destroy's */
    if (atomic_load(&comm->failed) != COLL_SUCCESS)
        return;
    deadline = coll__now_ns() + CTL_LEAVE_MS * 1000000ull;
    pthread_mutex_lock(&comm->lock);
    c->my_balance = comm->msg_balance;
    pthread_mutex_unlock(&comm->lock);
    pthread_mutex_lock(&c->lock);
    {
        /* this rank's last collective goes up ahead of its BYE: a rank on the way that
         * called otherwise names both calls, which the message count below cannot */
        uint64_t k = atomic_load(&comm->next_coll_seq);
        const struct coll_sig_rec *r = k ? &comm->sig_log[(k - 1) % COLL_AGREE_LOG] : NULL;
        if (r && atomic_load(&r->cseq) == k) {
            struct coll_sig last = r->sig;
            c->fwd_ns = 0;
            probe_up(c, comm->rank, k - 1, &last);
        }
    }
    c->leaving = true;
    off = leave_step(c);
    if (off) {
        pthread_mutex_unlock(&c->lock);
        leave_mismatch(c, off);
        pthread_mutex_lock(&c->lock);
    }
    while (!c->done && atomic_load(&comm->failed) == COLL_SUCCESS &&
           coll__now_ns() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&c->cond, &c->lock, &ts);
    }
    if (!c->done)
        COLL_INFO(COLL_SUB_COLL, "rank %d: destroy: the other ranks did not all leave within "
                  "%d ms; leaving alone", comm->rank, CTL_LEAVE_MS);
    pthread_mutex_unlock(&c->lock);
    held_fire(c, true);
}

/* ---- 5 the stall table and SIGUSR1 ----------------------------------------------------- */

static _Atomic unsigned sig_gen;
static pthread_mutex_t sig_lock = PTHREAD_MUTEX_INITIALIZER;
static bool sig_installed;

/* Only a counter: each comm's thread looks at it every round (50 ms at most), so the
 * handler touches no descriptor that a destroy could be closing meanwhile. */
static void on_sigusr1(int sig)
{
    (void)sig;
    atomic_fetch_add(&sig_gen, 1);
}

/* SIGUSR1 prints the stall table, unless the program handles that signal itself. */
static void sig_register(struct coll_ctl *c)
{
    pthread_mutex_lock(&sig_lock);
    if (!sig_installed) {
        struct sigaction old, sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_sigusr1;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGUSR1, NULL, &old) == 0 && old.sa_handler == SIG_DFL &&
            !(old.sa_flags & SA_SIGINFO) && sigaction(SIGUSR1, &sa, NULL) == 0)
            sig_installed = true;
        else
            COLL_INFO(COLL_SUB_INIT, "SIGUSR1 has a handler already: no stall table on it");
    }
    c->sig_seen = atomic_load(&sig_gen);
    pthread_mutex_unlock(&sig_lock);
}

/* This rank's line of the table: its current call and what it waits for. */
static void my_line(struct coll_ctl *c, char *buf, size_t n)
{
    struct coll_comm *comm = c->comm;
    struct coll_op *op;
    char what[512], sig[160];
    int w;

    w = snprintf(buf, n, "rank %d (%s, pid %d): ", comm->rank, comm->self.hostname,
                 (int)comm->self.pid);
    if (w < 0 || (size_t)w >= n)
        return;
    buf += w;
    n -= (size_t)w;
    pthread_mutex_lock(&comm->lock);
    op = comm->ops_head;
    if (atomic_load(&comm->failed) != COLL_SUCCESS) {
        pthread_mutex_lock(&comm->errlock);
        snprintf(buf, n, "failed: %.400s", comm->errmsg);
        pthread_mutex_unlock(&comm->errlock);
    } else if (op && op->started) {
        double idle = (double)(coll__now_coarse_ns() - op->last_progress_ns) / 1e9;
        coll__exec_describe_wait(op, what, sizeof(what));
        if (op->csig)
            snprintf(buf, n, "in call #%llu, %s: %.1f s without progress, waiting for %s",
                     (unsigned long long)op->wire_seq + 1,
                     coll__sig_describe(op->csig, sig, sizeof(sig)), idle, what);
        else
            snprintf(buf, n, "in a send/receive group: %.1f s without progress, waiting for %s",
                     idle, what);
    } else if (op) {
        snprintf(buf, n, "call queued, not started");
    } else {
        uint64_t k = atomic_load(&comm->next_coll_seq);
        const struct coll_sig_rec *r = k ? &comm->sig_log[(k - 1) % COLL_AGREE_LOG] : NULL;
        if (r && atomic_load(&r->cseq) == k)
            snprintf(buf, n, "not waiting in the engine (idle, or in a shared-memory call) "
                     "after call #%llu, %s", (unsigned long long)k,
                     coll__sig_describe(&r->sig, sig, sizeof(sig)));
        else
            snprintf(buf, n, "not waiting in the engine, %llu calls made",
                     (unsigned long long)k);
    }
    pthread_mutex_unlock(&comm->lock);
}

static void dump_print(struct coll_ctl *c)
{
    struct coll_comm *comm = c->comm;
    size_t cap = 256 + (size_t)comm->nranks * 200, o = 0;
    char *out = malloc(cap);

    if (out) {
        o += (size_t)snprintf(out, cap, "coll: comm %016llx, %d ranks, each rank's call "
                              "(SIGUSR1):\n", (unsigned long long)comm->comm_id, comm->nranks);
        for (int r = 0; r < comm->nranks; r++) {
            size_t need = (c->dump_lines[r] ? strlen(c->dump_lines[r]) : 120) + 8;
            if (o + need >= cap) {
                char *more = realloc(out, cap * 2 + need);
                if (!more)
                    break;
                out = more;
                cap = cap * 2 + need;
            }
            if (c->dump_lines[r])
                o += (size_t)snprintf(out + o, cap - o, "  %s\n", c->dump_lines[r]);
            else
                o += (size_t)snprintf(out + o, cap - o,
                                      "  rank %d (%s): no answer within %d ms (stopped or "
                                      "dead, or its path to rank 0 passes one that is)\n",
                                      r, comm->peers[r].hostname, CTL_DUMP_MS);
        }
        fputs(out, stderr);
        fflush(stderr);
        free(out);
    }
    for (int r = 0; r < comm->nranks; r++) {
        free(c->dump_lines[r]);
        c->dump_lines[r] = NULL;
    }
    c->dumping = false;
}

static void dump_add(struct coll_ctl *c, int r, const char *line)
{
    if (!c->dumping || r < 0 || r >= c->comm->nranks || c->dump_lines[r])
        return;
    c->dump_lines[r] = strdup(line);
    if (c->dump_lines[r] && ++c->dump_got == c->comm->nranks)
        dump_print(c);
}

/* Rank 0: ask every rank for its line (one table at a time: the signal that collrun sends
 * to every rank starts one). */
static void dump_start(struct coll_ctl *c)
{
    char line[900];
    uint64_t now = coll__now_ns();

    if (c->dumping || (c->dump_last_ns && now - c->dump_last_ns < 500000000ull))
        return;
    if (!c->dump_lines)
        c->dump_lines = calloc((size_t)c->comm->nranks, sizeof(char *));
    if (!c->dump_lines)
        return;
    c->dumping = true;
    c->dump_got = 0;
    c->dump_last_ns = now;
    c->dump_end_ns = now + CTL_DUMP_MS * 1000000ull;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->nlinks; i++)
        if (c->links[i].child)
            link_send(c, &c->links[i], F_DUMPREQ, 0, -1, 0, 0, NULL, NULL);
    pthread_mutex_unlock(&c->lock);
    my_line(c, line, sizeof(line));
    dump_add(c, 0, line);
}

/* ---- 6 the thread ---------------------------------------------------------------------- */

static void link_ended(struct coll_ctl *c, int li, const char *why)
{
    struct coll_comm *comm = c->comm;
    struct ctl_link *l = &c->links[li];
    const struct coll_peer_info *pi = &comm->peers[l->peer];
    bool clean;

    pthread_mutex_lock(&c->lock);
    l->down = true;
    clean = l->bye_in;
    pthread_mutex_unlock(&c->lock);
    if (clean || c->stop)
        return;
    (void)li;
    pthread_mutex_lock(&comm->lock);
    if (atomic_load(&comm->failed) == COLL_SUCCESS)
        hold(c, COLL_REMOTE_ERROR,
             "rank %d (%s, pid %d) %s without leaving the comm: it died, was killed, or exited "
             "without coll_comm_destroy", l->peer, pi->hostname, (int)pi->pid, why);
    pthread_mutex_unlock(&comm->lock);
}

static void handle_frame(struct coll_ctl *c, int li, const uint8_t *f, const char *text)
{
    struct coll_comm *comm = c->comm;
    struct ctl_link *l = &c->links[li];
    int type = f[4], origin = (int)get32(f + 8), dest = (int)get32(f + 12);
    uint64_t cseq = get64(f + 24);
    struct coll_sig sig;

    coll__sig_get(f + 32, &sig);
    switch (type) {
    case F_FAIL:
        ctl_remote_fail(c, li, origin, get32(f + 16), text);
        break;
    case F_PROBE:
        handle_probe(c, origin, cseq, &sig);
        break;
    case F_BYE: {
        int64_t off = 0;
        pthread_mutex_lock(&c->lock);
        if (!l->bye_in) {
            l->bye_in = true;
            if (l->child) {
                c->kids_bye++;
                c->kids_balance += (int64_t)cseq;
                c->kids_unknown |= get32(f + 16) != 1;
            }
            off = leave_step(c);
        }
        pthread_mutex_unlock(&c->lock);
        if (off)
            leave_mismatch(c, off);
        break;
    }
    case F_DONE:
        pthread_mutex_lock(&c->lock);
        l->bye_in = true;
        for (int i = 0; i < c->nlinks; i++) {
            if (c->links[i].child) {
                c->links[i].bye_out = true;
                link_send(c, &c->links[i], F_DONE, origin, -1, 0, 0, NULL, NULL);
            }
        }
        c->done = true;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        break;
    case F_DUMPREQ:
        if (dest == 0 && comm->rank == 0) {
            dump_start(c);
        } else if (dest == 0) {
            pthread_mutex_lock(&c->lock);
            if (parent_link(c))
                link_send(c, parent_link(c), F_DUMPREQ, origin, 0, 0, 0, NULL, NULL);
            pthread_mutex_unlock(&c->lock);
        } else if (!l->child) {
            char line[900];
            my_line(c, line, sizeof(line));
            pthread_mutex_lock(&c->lock);
            for (int i = 0; i < c->nlinks; i++)
                if (c->links[i].child)
                    link_send(c, &c->links[i], F_DUMPREQ, origin, -1, 0, 0, NULL, NULL);
            link_send(c, l, F_DUMPLINE, comm->rank, 0, 0, 0, NULL, line);
            pthread_mutex_unlock(&c->lock);
        }
        break;
    case F_DUMPLINE:
        if (comm->rank == 0) {
            dump_add(c, origin, text);
        } else {
            pthread_mutex_lock(&c->lock);
            if (parent_link(c))
                link_send(c, parent_link(c), F_DUMPLINE, origin, 0, 0, 0, NULL, text);
            pthread_mutex_unlock(&c->lock);
        }
        break;
    default: /* F_PING: its arrival is the point */
        break;
    }
}

/* Read what link li holds and act on each whole frame. */
static void link_read(struct coll_ctl *c, int li)
{
    struct ctl_link *l = &c->links[li];
    struct coll_comm *comm = c->comm;

    for (;;) {
        ssize_t n = coll__sys.recv(l->fd, l->in + l->in_len, sizeof(l->in) - l->in_len,
                                   MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            link_ended(c, li, n == 0 ? "closed its control connection"
                                     : "reset its control connection");
            return;
        }
        l->in_len += (size_t)n;
        l->last_rx_ns = coll__now_ns();
        while (l->in_len >= CTL_HDR) {
            size_t tlen = get16(l->in + 6);
            int type = l->in[4], origin = (int)get32(l->in + 8);
            char text[CTL_TEXT_MAX + 1];
            if (get32(l->in) != CTL_FMAGIC || type < F_PING || type >= F_MAX ||
                tlen > CTL_TEXT_MAX || origin < 0 || origin >= comm->nranks) {
                pthread_mutex_lock(&c->lock);
                l->down = true;
                pthread_mutex_unlock(&c->lock);
                ctl_local_fail(c, li, COLL_REMOTE_ERROR, "rank %d sent a malformed control "
                               "frame", l->peer);
                return;
            }
            if (l->in_len < CTL_HDR + tlen)
                break;
            for (size_t i = 0; i < tlen; i++) {
                unsigned char ch = l->in[CTL_HDR + i];
                text[i] = ch < 0x20 || ch > 0x7e ? '?' : (char)ch;
            }
            text[tlen] = '\0';
            handle_frame(c, li, l->in, text);
            memmove(l->in, l->in + CTL_HDR + tlen, l->in_len - CTL_HDR - tlen);
            l->in_len -= CTL_HDR + tlen;
            if (l->down)
                return;
        }
    }
}

/* Keepalives, silent neighbours, held probes, the table's deadline, SIGUSR1. */
static void tick(struct coll_ctl *c)
{
    struct coll_comm *comm = c->comm;
    uint64_t now = coll__now_ns();
    unsigned gen = atomic_load(&sig_gen);

    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->nlinks; i++) {
        struct ctl_link *l = &c->links[i];
        if (l->down || l->bye_out)
            continue;
        if (now - l->last_tx_ns >= (uint64_t)c->ping_ms * 1000000ull)
            link_send(c, l, F_PING, comm->rank, -1, 0, 0, NULL, NULL);
    }
    pthread_mutex_unlock(&c->lock);
    for (int i = 0; c->silent_ms > 0 && i < c->nlinks; i++) {
        struct ctl_link *l = &c->links[i];
        if (l->down || l->bye_in || now - l->last_rx_ns < (uint64_t)c->silent_ms * 1000000ull)
            continue;
        if (atomic_load(&comm->failed) == COLL_SUCCESS)
            ctl_local_fail(c, i, COLL_TIMEOUT,
                           "rank %d (%s) sent nothing on the control plane for %lld ms "
                           "(COLL_TIMEOUT_MS): stopped, hung, or cut off", l->peer,
                           comm->peers[l->peer].hostname, (long long)c->silent_ms);
        l->last_rx_ns = now; /* once */
    }
    held_fire(c, false);
    if (atomic_load(&comm->failed) == COLL_SUCCESS)
        pending_check(c);
    if (c->dumping && now >= c->dump_end_ns)
        dump_print(c);
    if (gen != c->sig_seen) {
        c->sig_seen = gen;
        if (comm->rank == 0) {
            dump_start(c);
        } else {
            pthread_mutex_lock(&c->lock);
            if (parent_link(c))
                link_send(c, parent_link(c), F_DUMPREQ, comm->rank, 0, 0, 0, NULL, NULL);
            pthread_mutex_unlock(&c->lock);
        }
    }
}

static void *ctl_main(void *arg)
{
    struct coll_ctl *c = arg;
    struct pollfd pfd[CTL_MAX_LINKS + 1];
    int idx[CTL_MAX_LINKS + 1];

    for (;;) {
        int n = 1, r, ms = (int)COLL_MIN(c->ping_ms, 50);
        pfd[0] = (struct pollfd){.fd = c->evfd, .events = POLLIN};
        pthread_mutex_lock(&c->lock);
        if (c->stop) {
            pthread_mutex_unlock(&c->lock);
            break;
        }
        for (int i = 0; i < c->nlinks; i++) {
            if (c->links[i].down)
                continue;
            pfd[n] = (struct pollfd){.fd = c->links[i].fd, .events = POLLIN};
            if (c->links[i].out_len)
                pfd[n].events |= POLLOUT;
            idx[n++] = i;
        }
        pthread_mutex_unlock(&c->lock);
        r = poll(pfd, (nfds_t)n, ms);
        if (r > 0 && (pfd[0].revents & POLLIN)) {
            uint64_t v;
            while (read(c->evfd, &v, sizeof(v)) > 0)
                ;
        }
        for (int k = 1; r > 0 && k < n; k++) {
            if (pfd[k].revents & POLLOUT) {
                pthread_mutex_lock(&c->lock);
                link_flush(c, &c->links[idx[k]]);
                pthread_mutex_unlock(&c->lock);
            }
            if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR))
                link_read(c, idx[k]);
        }
        tick(c);
    }
    return NULL;
}

coll_status_t coll__ctl_start(struct coll_comm *comm)
{
    struct coll_ctl *c = comm->ctl;
    int64_t tmo = comm->cfg.timeout_ms;
    uint64_t deadline, now;

    if (!c)
        return COLL_SUCCESS;
    deadline = coll__now_ns() + (uint64_t)(comm->cfg.bootstrap_timeout_ms > 0
                                               ? comm->cfg.bootstrap_timeout_ms
                                               : 300000) * 1000000ull;
    c->ping_ms = tmo > 0 ? COLL_MAX(COLL_MIN(tmo / 4, 1000), 20) : 1000;
    c->silent_ms = tmo > 0 ? COLL_MAX(tmo, 3 * c->ping_ms) : 0;
    if (comm->rank > 0) {
        int fd;
        coll_status_t st;
        c->parent = comm->rank & (comm->rank - 1);
        st = child_handshake(c, c->parent, deadline, &fd);
        if (st != COLL_SUCCESS)
            return st;
        c->links[0] = (struct ctl_link){.fd = fd, .peer = c->parent};
        c->nlinks = 1;
    }
    {
        coll_status_t st = accept_children(c, deadline);
        if (st != COLL_SUCCESS)
            return st;
    }
    coll__sys.close(c->lfd);
    c->lfd = -1;
    now = coll__now_ns();
    for (int i = 0; i < c->nlinks; i++)
        c->links[i].last_rx_ns = c->links[i].last_tx_ns = now;
    c->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->evfd < 0)
        return coll__sys_error(comm, errno, "control plane: eventfd");
    return COLL_SUCCESS;
}

coll_status_t coll__ctl_run(struct coll_comm *comm)
{
    struct coll_ctl *c = comm->ctl;
    uint64_t now;
    int err;

    if (!c)
        return COLL_SUCCESS;
    now = coll__now_ns();
    for (int i = 0; i < c->nlinks; i++)
        c->links[i].last_rx_ns = c->links[i].last_tx_ns = now;
    sig_register(c);
    err = pthread_create(&c->thread, NULL, ctl_main, c);
    if (err)
        return coll__sys_error(comm, err, "control plane: cannot start its thread");
    c->started = true;
    return COLL_SUCCESS;
}

void coll__ctl_abandon(struct coll_comm *comm, coll_status_t st)
{
    struct coll_ctl *c = comm->ctl;
    int expected = COLL_SUCCESS;

    if (!c || !c->nlinks)
        return;
    pthread_mutex_lock(&comm->lock);
    if (atomic_compare_exchange_strong(&comm->failed, &expected, (int)st))
        coll__ctl_failed(comm);
    pthread_mutex_unlock(&comm->lock);
}

void coll__ctl_fini(struct coll_comm *comm)
{
    struct coll_ctl *c = comm->ctl;
    bool healthy = atomic_load(&comm->failed) == COLL_SUCCESS;

    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->stop = true;
    /* a healthy rank that leaves says so, or its neighbours would take it for dead */
    for (int i = 0; healthy && i < c->nlinks; i++) {
        if (!c->links[i].bye_out) {
            c->links[i].bye_out = true;
            link_send(c, &c->links[i], F_BYE, comm->rank, -1, 0, 0, NULL, NULL);
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (c->started) {
        ctl_wake(c);
        pthread_join(c->thread, NULL);
        c->started = false;
    }
    for (int i = 0; i < c->nlinks; i++) {
        struct ctl_link *l = &c->links[i];
        if (l->fd < 0)
            continue;
        /* what is still queued (a BYE, a FAIL) goes before the close, briefly */
        for (int tries = 0; l->out_len && !l->down && tries < 10; tries++) {
            struct pollfd p = {.fd = l->fd, .events = POLLOUT};
            if (coll__sys.poll(&p, 1, 10) > 0)
                link_flush(c, l);
        }
        coll__sys.shutdown(l->fd, SHUT_WR);
        coll__sys.close(l->fd);
        free(l->out);
    }
    if (c->lfd >= 0)
        coll__sys.close(c->lfd);
    if (c->evfd >= 0)
        close(c->evfd);
    if (c->dump_lines) {
        for (int r = 0; r < comm->nranks; r++)
            free(c->dump_lines[r]);
        free(c->dump_lines);
    }
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    free(c);
    comm->ctl = NULL;
}
