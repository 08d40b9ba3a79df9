/*
 * tcpstore.c - PyTorch's TCPStore as far as the torch environment needs it: a client that
 * sets a key or waits for one and reads it, and a one-key server for rank 0 when no agent
 * serves the store (torchrun.c).
 */
#include "../../base/sys.h"
#include "../../core/bootstrap.h"
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the client ---------------------------------------------------------------------- */

/* PyTorch c10d's store protocol, as its TCPStore server (the torchrun agent's) reads it:
 * one query-type byte, then strings as a native-endian uint64 length and the bytes.
 *   SET   0 | key | value               (no answer)
 *   GET   2 | key                      -> value
 *   CHECK 4 | u64 n | n keys           -> 1 byte: 0 ready, 1 not ready
 *   WAIT  5 | u64 n | n keys           -> 1 byte 0 once every key is set
 */
enum { Q_SET = 0, Q_GET = 2, Q_CHECK = 4, Q_WAIT = 5 };

coll_status_t coll__tcpstore_resolve(const char *host, const char *port, struct addrinfo **res_p)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC};
    int rc = getaddrinfo(host, port, &hints, res_p);

    if (rc != 0)
        return coll__launch_fail("torchrun", COLL_INVALID_ARGUMENT, 0,
                                 "MASTER_ADDR='%s' (port MASTER_PORT=%s) does "
                                 "not resolve: %s",
                                 host, port, gai_strerror(rc));
    return COLL_SUCCESS;
}

/* A connect to a local port that nobody listens on may pick that very port as its own
 * source port, and TCP's simultaneous open then connects the socket to itself: it would
 * read its own query back as the answer, and hold the port that rank 0 is about to serve
 * (MASTER_PORT under torchrun's c10d rendezvous is a port torchrun found free). */
static bool connected_to_itself(int fd)
{
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof(me), pl = sizeof(peer);

    memset(&me, 0, sizeof(me));
    memset(&peer, 0, sizeof(peer));
    return coll__sys.getsockname(fd, (struct sockaddr *)&me, &ml) == 0 &&
           coll__sys.getpeername(fd, (struct sockaddr *)&peer, &pl) == 0 && ml == pl &&
           memcmp(&me, &peer, ml) == 0;
}

/* Connect to the store, retrying while nobody listens yet: the store of a rank-0 process
 * may start after ours. */
static coll_status_t store_connect(const char *host, const char *port, uint64_t deadline_ns,
                                   int64_t timeout_ms, int *fd_p)
{
    struct addrinfo *res = NULL;
    unsigned backoff_ms = 10;
    int last_err = ETIMEDOUT;
    coll_status_t st;

    st = coll__tcpstore_resolve(host, port, &res);
    if (st != COLL_SUCCESS)
        return st;
    for (;;) {
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            int fd = coll__sys.socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                                      ai->ai_protocol);
            int err = 0, one = 1;
            socklen_t el = sizeof(err);

            if (fd < 0) {
                last_err = errno;
                continue;
            }
            if (coll__sys.connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
                struct pollfd pf = {.fd = fd, .events = POLLOUT};
                err = errno;
                if (err == EINPROGRESS) {
                    int n = coll__sys.poll(
                        &pf, 1, COLL_MAX(1, COLL_MIN(coll__launch_ms_left(deadline_ns), 1000)));
                    if (n <= 0)
                        err = ETIMEDOUT;
                    else if (coll__sys.getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
                        err = errno;
                }
            }
            if (!err && connected_to_itself(fd))
                err = ECONNREFUSED; /* nobody listens yet, as far as we can tell */
            if (!err) {
                (void)coll__sys.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                freeaddrinfo(res);
                *fd_p = fd;
                return COLL_SUCCESS;
            }
            last_err = err;
            coll__sys.close(fd);
        }
        if (coll__launch_ms_left(deadline_ns) == 0)
            break;
        coll__sys.poll(NULL, 0, COLL_MIN((int)backoff_ms, coll__launch_ms_left(deadline_ns)));
        backoff_ms = COLL_MIN(backoff_ms * 2, 500u);
    }
    freeaddrinfo(res);
    return coll__launch_fail("torchrun", COLL_TIMEOUT, 0,
                             "the store at MASTER_ADDR='%s' MASTER_PORT=%s is "
                             "not reachable within %lld ms (COLL_BOOTSTRAP_TIMEOUT_MS; last error: "
                             "%s)",
                             host, port, (long long)timeout_ms, strerror(last_err));
}

static size_t put_str(uint8_t *p, const void *s, size_t len)
{
    uint64_t n = len;
    memcpy(p, &n, sizeof(n));
    memcpy(p + sizeof(n), s, len);
    return sizeof(n) + len;
}

static coll_status_t store_io_error(const char *host, const char *port, const char *what, int err,
                                    int64_t timeout_ms)
{
    if (err == ETIMEDOUT)
        return coll__launch_fail("torchrun", COLL_TIMEOUT, 0,
                                 "the store at %s:%s did not %s within %lld ms "
                                 "(COLL_BOOTSTRAP_TIMEOUT_MS): did rank 0 start?",
                                 host, port, what, (long long)timeout_ms);
    return coll__launch_fail("torchrun", COLL_REMOTE_ERROR, 0,
                             "the store at %s:%s failed to %s: %s", host, port, what,
                             err == EPIPE ? "connection closed" : strerror(err));
}

coll_status_t coll__tcpstore_set(const char *host, const char *port, const char *key,
                                 const void *val, size_t len, int64_t timeout_ms)
{
    uint64_t deadline = coll__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    uint8_t q[2 * (1 + 8 + COLL_LAUNCH_STORE_KEY_MAX) + 8 + 8 + COLL_LAUNCH_STORE_VAL_MAX], ans;
    size_t klen = strlen(key), o = 0;
    coll_status_t st;
    int fd = -1, err;

    if (klen > COLL_LAUNCH_STORE_KEY_MAX || len > COLL_LAUNCH_STORE_VAL_MAX)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "store key or value too long");
    st = store_connect(host, port, deadline, timeout_ms, &fd);
    if (st != COLL_SUCCESS)
        return st;
    /* SET has no answer; the CHECK behind it on the same connection does, and the server
     * handles one connection's queries in order, so its answer means the key is there */
    q[o++] = Q_SET;
    o += put_str(q + o, key, klen);
    o += put_str(q + o, val, len);
    q[o++] = Q_CHECK;
    {
        uint64_t one = 1;
        memcpy(q + o, &one, sizeof(one));
        o += sizeof(one);
    }
    o += put_str(q + o, key, klen);
    err = coll__io_full(fd, q, o, deadline, true);
    if (!err)
        err = coll__io_full(fd, &ans, 1, deadline, false);
    coll__sys.close(fd);
    if (err)
        return store_io_error(host, port, "take the unique id", err, timeout_ms);
    if (ans != 0)
        return coll__launch_fail("torchrun", COLL_REMOTE_ERROR, 0,
                                 "the store at %s:%s does not hold key '%s' "
                                 "right after setting it (answer %u)",
                                 host, port, key, ans);
    return COLL_SUCCESS;
}

/* One WAIT then GET on a fresh connection: 0, or the errno that ended it. */
static int store_get_once(int fd, const char *key, void *val, size_t len, uint64_t deadline,
                          uint64_t *vlen_p)
{
    uint8_t q[1 + 8 + 8 + COLL_LAUNCH_STORE_KEY_MAX], ans;
    size_t klen = strlen(key), o = 0;
    uint64_t one = 1;
    int err;

    q[o++] = Q_WAIT;
    memcpy(q + o, &one, sizeof(one));
    o += sizeof(one);
    o += put_str(q + o, key, klen);
    err = coll__io_full(fd, q, o, deadline, true);
    if (!err)
        err = coll__io_full(fd, &ans, 1, deadline, false);
    if (err)
        return err;
    o = 0;
    q[o++] = Q_GET;
    o += put_str(q + o, key, klen);
    err = coll__io_full(fd, q, o, deadline, true);
    if (!err)
        err = coll__io_full(fd, vlen_p, sizeof(*vlen_p), deadline, false);
    if (!err && *vlen_p == len)
        err = coll__io_full(fd, val, len, deadline, false);
    return err;
}

coll_status_t coll__tcpstore_get(const char *host, const char *port, const char *key, void *val,
                                 size_t len, int64_t timeout_ms)
{
    uint64_t deadline = coll__now_ns() + (uint64_t)timeout_ms * 1000000ull, vlen = 0;
    unsigned backoff_ms = 10;
    coll_status_t st;
    int fd = -1, err;

    if (strlen(key) > COLL_LAUNCH_STORE_KEY_MAX)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "store key too long");
    for (;;) {
        st = store_connect(host, port, deadline, timeout_ms, &fd);
        if (st != COLL_SUCCESS)
            return st;
        err = store_get_once(fd, key, val, len, deadline, &vlen);
        coll__sys.close(fd);
        /* A store that closes on us may be the one rank 0 served for an earlier comm and is
         * now taking down: ask again (the next one is rank 0's for this comm). */
        if ((err != EPIPE && err != ECONNRESET) || coll__launch_ms_left(deadline) == 0)
            break;
        coll__sys.poll(NULL, 0, COLL_MIN((int)backoff_ms, coll__launch_ms_left(deadline)));
        backoff_ms = COLL_MIN(backoff_ms * 2, 200u);
    }
    if (err)
        return store_io_error(host, port, "give the unique id from rank 0", err, timeout_ms);
    if (vlen != len)
        return coll__launch_fail("torchrun", COLL_REMOTE_ERROR, 0,
                                 "key '%s' in the store at %s:%s holds %llu "
                                 "bytes, expected %zu",
                                 key, host, port, (unsigned long long)vlen, len);
    return COLL_SUCCESS;
}

/* ---- a one-key server ---------------------------------------------------------------- */

/* Outside torchrun's agent (plain RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or an agent with
 * the c10d rendezvous) nobody serves MASTER_PORT, and rank 0 is the one that would. This
 * serves exactly one key: enough for the peers' WAIT and GET, nothing else is kept. */
#define SRV_MAX_CONNS 256
#define SRV_BUF 1024

struct srv_conn {
    int fd;
    size_t len;
    uint8_t buf[SRV_BUF];
};

struct coll_store_srv {
    int lfd, stopfd[2];
    pthread_t tid;
    char key[COLL_LAUNCH_STORE_KEY_MAX + 1];
    uint8_t val[COLL_LAUNCH_STORE_VAL_MAX];
    size_t vlen;
    struct srv_conn *conns[SRV_MAX_CONNS];
};

/* Parse one query at the head of c->buf: bytes used, 0 for "need more", -1 to drop. */
static long srv_query(struct coll_store_srv *s, struct srv_conn *c)
{
    const uint8_t *p = c->buf, *end = c->buf + c->len;
    size_t klen = strlen(s->key);
    uint64_t n, nk = 1;
    uint8_t qt;
    bool all_ours = true;

    if (p == end)
        return 0;
    qt = *p++;
    if (qt == Q_CHECK || qt == Q_WAIT) {
        if ((size_t)(end - p) < 8)
            return 0;
        memcpy(&nk, p, 8);
        p += 8;
        if (nk == 0 || nk > 16)
            return -1;
    } else if (qt != Q_SET && qt != Q_GET) {
        return -1;
    }
    for (uint64_t i = 0; i < nk; i++) {
        if ((size_t)(end - p) < 8)
            return 0;
        memcpy(&n, p, 8);
        p += 8;
        if (n > COLL_LAUNCH_STORE_KEY_MAX)
            return -1;
        if ((size_t)(end - p) < n)
            return 0;
        all_ours = all_ours && n == klen && !memcmp(p, s->key, klen);
        p += n;
    }
    if (qt == Q_SET) { /* the value is skipped: only our own key is served */
        if ((size_t)(end - p) < 8)
            return 0;
        memcpy(&n, p, 8);
        p += 8;
        if (n > SRV_BUF)
            return -1;
        if ((size_t)(end - p) < n)
            return 0;
        p += n;
    } else if (qt == Q_GET) {
        uint8_t out[8 + COLL_LAUNCH_STORE_VAL_MAX];
        uint64_t vl = s->vlen;
        if (!all_ours)
            return -1; /* PyTorch's server fails a GET of a missing key too */
        memcpy(out, &vl, 8);
        memcpy(out + 8, s->val, s->vlen);
        if (coll__io_full(c->fd, out, 8 + s->vlen, coll__now_ns() + 1000000000ull, true))
            return -1;
    } else {
        uint8_t a = all_ours ? 0 : 1;
        if (qt == Q_WAIT && !all_ours)
            return (long)(p - c->buf); /* never set here: the peer's own deadline ends it */
        if (coll__io_full(c->fd, &a, 1, coll__now_ns() + 1000000000ull, true))
            return -1;
    }
    return (long)(p - c->buf);
}

static void srv_drop(struct coll_store_srv *s, int i)
{
    coll__sys.close(s->conns[i]->fd);
    free(s->conns[i]);
    s->conns[i] = NULL;
}

static void *srv_main(void *arg)
{
    struct coll_store_srv *s = arg;
    struct pollfd pf[SRV_MAX_CONNS + 2];
    int idx[SRV_MAX_CONNS + 2];

    for (;;) {
        nfds_t n = 0;
        pf[n++] = (struct pollfd){.fd = s->stopfd[0], .events = POLLIN};
        pf[n++] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
        for (int i = 0; i < SRV_MAX_CONNS; i++)
            if (s->conns[i]) {
                idx[n] = i;
                pf[n++] = (struct pollfd){.fd = s->conns[i]->fd, .events = POLLIN};
            }
        if (coll__sys.poll(pf, n, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[0].revents)
            break;
        for (nfds_t k = 2; k < n; k++) {
            struct srv_conn *c = s->conns[idx[k]];
            ssize_t r;
            long used;
            if (!pf[k].revents)
                continue;
            r = coll__sys.recv(c->fd, c->buf + c->len, SRV_BUF - c->len, 0);
            if (r <= 0) {
                if (r < 0 && (errno == EAGAIN || errno == EINTR))
                    continue;
                srv_drop(s, idx[k]);
                continue;
            }
            c->len += (size_t)r;
            while ((used = srv_query(s, c)) > 0) {
                memmove(c->buf, c->buf + used, c->len - (size_t)used);
                c->len -= (size_t)used;
            }
            if (used < 0 || c->len == SRV_BUF)
                srv_drop(s, idx[k]);
        }
        if (pf[1].revents & POLLIN) {
            int fd = coll__sys.accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            int slot = -1;
            for (int i = 0; fd >= 0 && i < SRV_MAX_CONNS && slot < 0; i++)
                if (!s->conns[i])
                    slot = i;
            if (fd >= 0 && slot >= 0 && (s->conns[slot] = calloc(1, sizeof(struct srv_conn))))
                s->conns[slot]->fd = fd;
            else if (fd >= 0)
                coll__sys.close(fd);
        }
    }
    return NULL;
}

/* Bind MASTER_PORT, waiting out a short-lived holder. The peers dial MASTER_PORT before
 * rank 0 listens; on loopback such a dial can pick MASTER_PORT itself as its source port
 * and connect to itself, and until that peer sees its own query come back and closes the
 * socket (milliseconds; it then dials again), the port is taken. A holder that stays is
 * reported as before, after SRV_BIND_WAIT_MS. */
#define SRV_BIND_WAIT_MS 5000
static int srv_bind(int fd, const struct addrinfo *res)
{
    const struct timespec pause = {0, 10 * 1000000L};

    for (int waited = 0;; waited += 10) {
        if (coll__sys.bind(fd, res->ai_addr, res->ai_addrlen) == 0)
            return 0;
        if (errno != EADDRINUSE || waited >= SRV_BIND_WAIT_MS)
            return -1;
        nanosleep(&pause, NULL);
    }
}

coll_status_t coll__tcpstore_serve(const char *port, const char *key, const void *val, size_t len,
                                   struct coll_store_srv **srv_p)
{
    struct addrinfo hints = {
        .ai_socktype = SOCK_STREAM, .ai_family = AF_INET6, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    struct coll_store_srv *s;
    int one = 1, zero = 0, rc;

    s = calloc(1, sizeof(*s));
    if (!s)
        return coll__error(NULL, COLL_SYSTEM_ERROR, "out of memory for the store server");
    s->lfd = s->stopfd[0] = s->stopfd[1] = -1;
    snprintf(s->key, sizeof(s->key), "%s", key);
    memcpy(s->val, val, len);
    s->vlen = len;
    rc = getaddrinfo(NULL, port, &hints, &res);
    if (rc != 0) {
        hints.ai_family = AF_INET;
        rc = getaddrinfo(NULL, port, &hints, &res);
    }
    if (rc != 0) {
        free(s);
        return coll__launch_fail("torchrun", COLL_INVALID_ARGUMENT, 0,
                                 "MASTER_PORT=%s is not a port: %s", port, gai_strerror(rc));
    }
    s->lfd = coll__sys.socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->lfd < 0 && res->ai_family == AF_INET6) { /* a kernel without IPv6 */
        freeaddrinfo(res);
        res = NULL;
        hints.ai_family = AF_INET;
        if (getaddrinfo(NULL, port, &hints, &res) == 0)
            s->lfd = coll__sys.socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (!res) {
            free(s);
            return coll__launch_fail("torchrun", COLL_SYSTEM_ERROR, 0,
                                     "no address to serve MASTER_PORT=%s on", port);
        }
    }
    if (s->lfd >= 0) {
        (void)coll__sys.setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (res->ai_family == AF_INET6) /* one socket for IPv4 and IPv6 peers */
            (void)coll__sys.setsockopt(s->lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (s->lfd < 0 || srv_bind(s->lfd, res) < 0 || coll__sys.listen(s->lfd, SOMAXCONN) < 0 ||
        pipe2(s->stopfd, O_CLOEXEC) < 0) {
        coll_status_t st = coll__launch_fail("torchrun", COLL_SYSTEM_ERROR, errno ? errno : EIO,
                                             "rank 0 cannot serve the "
                                             "unique id on MASTER_PORT=%s",
                                             port);
        freeaddrinfo(res);
        if (s->lfd >= 0)
            coll__sys.close(s->lfd);
        if (s->stopfd[0] >= 0)
            close(s->stopfd[0]), close(s->stopfd[1]);
        free(s);
        return st;
    }
    freeaddrinfo(res);
    rc = pthread_create(&s->tid, NULL, srv_main, s);
    if (rc) {
        coll__sys.close(s->lfd);
        close(s->stopfd[0]), close(s->stopfd[1]);
        free(s);
        return coll__sys_error(NULL, rc, "cannot start the store server thread");
    }
    *srv_p = s;
    return COLL_SUCCESS;
}

void coll__tcpstore_serve_stop(struct coll_store_srv *s)
{
    ssize_t r;

    if (!s)
        return;
    r = write(s->stopfd[1], "x", 1);
    (void)r;
    pthread_join(s->tid, NULL);
    for (int i = 0; i < SRV_MAX_CONNS; i++)
        if (s->conns[i])
            srv_drop(s, i);
    coll__sys.close(s->lfd);
    close(s->stopfd[0]);
    close(s->stopfd[1]);
    free(s);
}
