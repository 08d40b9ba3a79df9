/*
 * bootstrap.c - the unique id, the root rendezvous and this host's identity.
 *
 * Divisions: 1 wire helpers, 2 the unique id, 3 host identity, 4 blocking I/O with
 * deadlines, 5 the root thread, 6 the rank side (coll__bootstrap_join).
 *
 * The protocol is in bootstrap.h. Two details beyond it: the join MAC covers the whole join
 * record (not only the nonce and comm id), so nothing in it can be altered on the way; and
 * the rank sends a nonce of its own, with which the root MACs its answer (table or error),
 * so a rank only believes a table or an error that comes from someone holding the secret.
 *
 * Wire records (little-endian):
 *   peer info   rank i32 | pid i32 | host_hash u64 | hostname[64] | addr_len u16 | addr[28] |
 *               tp_mask u32 | tp_addr[8][32] (opaque, per transport) | ctl_addr_len u16 |
 *               ctl_addr[28] | machine_hash u64
 *   join        magic u32 | version u32 | comm_id u64 | rank i32 | nranks i32 |
 *               rank_nonce[16] | peer info | facts[136] | blob_len u32 | blob[8192] | mac[32]
 *               mac = HMAC(secret, "coll-join" | root_nonce | join record up to the mac)
 *   answer      magic u32 | status u32 | count u32 | msglen u32 | body | mac[32]
 *               body = count peer infos | settings (status 0) or msglen bytes of text (an
 *               error); settings, msglen bytes: count facts | count blob indices u32 |
 *               nblobs u32 | nblobs x (len u32 | bytes)
 * Facts and blobs are src/core/settings.c's (settings.h): the root relays them unread, each
 * distinct blob once.
 *               mac = HMAC(secret, "coll-root" | rank_nonce | header | SHA-256(body))
 */
#include "bootstrap.h"
#include "ctl.h"
#include "settings.h"
#include "../base/wire.h"
#include "../base/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BOOTSTRAP_DEFAULT_TIMEOUT_MS 300000
#define BS_NONCE_BYTES 16
#define PEER_WIRE_BYTES                                                                    \
    (4 + 4 + 8 + COLL_HOSTNAME_MAX + 2 + COLL_ADDR_MAX + 4 +                               \
     COLL_MAX_TRANSPORTS * COLL_TP_ADDR_MAX + 2 + COLL_ADDR_MAX + 8) /* 408 */
#define JOIN_MAGIC 0x4e4a4243u                                              /* "CBJN" */
#define JOIN_VERSION 5u
#define JOIN_SETTINGS_AT (4 + 4 + 8 + 4 + 4 + BS_NONCE_BYTES + PEER_WIRE_BYTES)
#define JOIN_BODY_BYTES (JOIN_SETTINGS_AT + COLL_SETTINGS_FACTS + 4 + COLL_SETTINGS_BLOB_MAX)
#define JOIN_BYTES (JOIN_BODY_BYTES + COLL_MAC_BYTES)
#define ANSWER_MAGIC 0x4e414243u /* "CBAN" */
#define ANSWER_HDR_BYTES 16
#define ANSWER_MSG_MAX 1024
#define JOIN_LABEL "coll-join"
#define ROOT_LABEL "coll-root"
#define LABEL_BYTES 9

#define ROOT_HANDSHAKE_MS 5000 /* a connection must send its join record within this */
#define ROOT_SEND_MS 10000     /* to write the answer to one rank */
#define ROOT_MAX_STRANGERS 256 /* unauthenticated connections held at once */
#define ROOT_ACCEPT_BATCH 32   /* accepts per poll round: joins already in are read first */
#define JOIN_RETRIES 8         /* a rank's tries after the root closed without an answer */

/* ---- 1 wire helpers ------------------------------------------------------------------ */


static void peer_encode(uint8_t *p, const struct coll_peer_info *info)
{
    put32(p, (uint32_t)info->rank);
    put32(p + 4, (uint32_t)info->pid);
    put64(p + 8, info->host_hash);
    memcpy(p + 16, info->hostname, COLL_HOSTNAME_MAX);
    put16(p + 16 + COLL_HOSTNAME_MAX, info->addr_len);
    memcpy(p + 18 + COLL_HOSTNAME_MAX, info->addr, COLL_ADDR_MAX);
    put32(p + 18 + COLL_HOSTNAME_MAX + COLL_ADDR_MAX, info->tp_mask);
    memcpy(p + 22 + COLL_HOSTNAME_MAX + COLL_ADDR_MAX, info->tp_addr, sizeof(info->tp_addr));
    p += 22 + COLL_HOSTNAME_MAX + COLL_ADDR_MAX + sizeof(info->tp_addr);
    put16(p, info->ctl_addr_len);
    memcpy(p + 2, info->ctl_addr, COLL_ADDR_MAX);
    put64(p + 2 + COLL_ADDR_MAX, info->machine_hash);
}

/* Decode and validate: a NUL-terminated hostname and an address that fits. */
static bool peer_decode(const uint8_t *p, struct coll_peer_info *info)
{
    memset(info, 0, sizeof(*info));
    info->rank = (int32_t)get32(p);
    info->pid = (int32_t)get32(p + 4);
    info->host_hash = get64(p + 8);
    memcpy(info->hostname, p + 16, COLL_HOSTNAME_MAX);
    info->addr_len = get16(p + 16 + COLL_HOSTNAME_MAX);
    memcpy(info->addr, p + 18 + COLL_HOSTNAME_MAX, COLL_ADDR_MAX);
    info->tp_mask = get32(p + 18 + COLL_HOSTNAME_MAX + COLL_ADDR_MAX);
    memcpy(info->tp_addr, p + 22 + COLL_HOSTNAME_MAX + COLL_ADDR_MAX, sizeof(info->tp_addr));
    p += 22 + COLL_HOSTNAME_MAX + COLL_ADDR_MAX + sizeof(info->tp_addr);
    info->ctl_addr_len = get16(p);
    memcpy(info->ctl_addr, p + 2, COLL_ADDR_MAX);
    info->machine_hash = get64(p + 2 + COLL_ADDR_MAX);
    return memchr(info->hostname, '\0', COLL_HOSTNAME_MAX) && info->addr_len <= COLL_ADDR_MAX &&
           info->ctl_addr_len <= COLL_ADDR_MAX;
}

/* A socket address as the id and the tables carry it: IPv4 or IPv6, with a port. */
static bool sockaddr_usable(const uint8_t *addr, size_t len)
{
    struct sockaddr_storage ss;

    if (len != sizeof(struct sockaddr_in) && len != sizeof(struct sockaddr_in6))
        return false;
    memset(&ss, 0, sizeof(ss));
    memcpy(&ss, addr, len);
    if (ss.ss_family == AF_INET && len == sizeof(struct sockaddr_in))
        return ((struct sockaddr_in *)&ss)->sin_port != 0;
    if (ss.ss_family == AF_INET6 && len == sizeof(struct sockaddr_in6))
        return ((struct sockaddr_in6 *)&ss)->sin6_port != 0;
    return false;
}

/* ---- 2 the unique id ----------------------------------------------------------------- */

/* Layout of the 128 bytes. Every byte is covered by the checksum, the padding must be zero:
 * no byte of an id is "don't care", so any corruption of one byte is rejected. */
#define ID_MAGIC 0x4c4c4f43u /* "COLL" */
#define ID_VERSION 1u
#define ID_OFF_VERSION 4
#define ID_OFF_ADDR_LEN 6
#define ID_OFF_SECRET 8
#define ID_OFF_COMM_ID (ID_OFF_SECRET + COLL_SECRET_BYTES) /* 24 */
#define ID_OFF_ADDR (ID_OFF_COMM_ID + 8)                   /* 32 */
#define ID_OFF_PAD (ID_OFF_ADDR + COLL_ADDR_MAX)           /* 60 */
#define ID_OFF_CSUM (COLL_UNIQUE_ID_BYTES - 8)             /* 120 */
#define ID_CSUM_SEED 0x636f6c6c2d696431ull                 /* "coll-id1" */

_Static_assert(ID_OFF_PAD <= ID_OFF_CSUM, "unique id fields overflow 128 bytes");

void coll__id_encode(const struct coll_id_info *info, coll_unique_id_t *id)
{
    uint8_t *p = (uint8_t *)id->internal;
    uint16_t addr_len = COLL_MIN(info->addr_len, COLL_ADDR_MAX);

    memset(p, 0, COLL_UNIQUE_ID_BYTES);
    put32(p, ID_MAGIC);
    put16(p + ID_OFF_VERSION, ID_VERSION);
    put16(p + ID_OFF_ADDR_LEN, addr_len);
    memcpy(p + ID_OFF_SECRET, info->secret, COLL_SECRET_BYTES);
    put64(p + ID_OFF_COMM_ID, info->comm_id);
    memcpy(p + ID_OFF_ADDR, info->addr, addr_len);
    put64(p + ID_OFF_CSUM, coll__hash64(p, ID_OFF_CSUM, ID_CSUM_SEED));
}

coll_status_t coll__id_decode(const coll_unique_id_t *id, struct coll_id_info *info_p)
{
    const uint8_t *p;
    struct coll_id_info info;

    if (!id || !info_p)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "unique id: %s is NULL",
                           !id ? "id" : "info_p");
    p = (const uint8_t *)id->internal;
    if (get32(p) != ID_MAGIC)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "unique id: not a coll unique id (bad magic %#x)", get32(p));
    if (get16(p + ID_OFF_VERSION) != ID_VERSION)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "unique id: version %u, this library reads version %u",
                           get16(p + ID_OFF_VERSION), ID_VERSION);
    if (get64(p + ID_OFF_CSUM) != coll__hash64(p, ID_OFF_CSUM, ID_CSUM_SEED))
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "unique id: checksum mismatch (corrupted or truncated in transit?)");
    for (int i = ID_OFF_PAD; i < ID_OFF_CSUM; i++)
        if (p[i] != 0)
            return coll__error(NULL, COLL_INVALID_ARGUMENT, "unique id: nonzero padding at byte %d",
                               i);
    memset(&info, 0, sizeof(info));
    memcpy(info.secret, p + ID_OFF_SECRET, COLL_SECRET_BYTES);
    info.comm_id = get64(p + ID_OFF_COMM_ID);
    info.addr_len = get16(p + ID_OFF_ADDR_LEN);
    if (info.addr_len > COLL_ADDR_MAX || !sockaddr_usable(p + ID_OFF_ADDR, info.addr_len))
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "unique id: holds no usable root address (length %u)",
                           (unsigned)info.addr_len);
    /* the address field's tail past addr_len is padding too */
    for (int i = ID_OFF_ADDR + info.addr_len; i < ID_OFF_PAD; i++)
        if (p[i] != 0)
            return coll__error(NULL, COLL_INVALID_ARGUMENT,
                               "unique id: nonzero bytes after the %u-byte root address at "
                               "byte %d",
                               (unsigned)info.addr_len, i);
    memcpy(info.addr, p + ID_OFF_ADDR, info.addr_len);
    if (info.comm_id == 0)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "unique id: communicator id is 0");
    *info_p = info;
    return COLL_SUCCESS;
}

/* ---- 4 blocking I/O with deadlines --------------------------------------------------- */

static int ms_until(uint64_t deadline_ns, uint64_t now_ns)
{
    uint64_t ms;

    if (now_ns >= deadline_ns)
        return 0;
    ms = (deadline_ns - now_ns + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Wait until fd is ready for events or the deadline passes: 0, ETIMEDOUT or an errno. */
static int wait_fd(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        uint64_t now = coll__now_ns();
        int n;

        if (now >= deadline_ns)
            return ETIMEDOUT;
        n = coll__sys.poll(&p, 1, ms_until(deadline_ns, now));
        if (n > 0)
            return 0; /* ready, or an error the next call reports */
        if (n < 0 && errno != EINTR)
            return errno;
    }
}

int coll__io_full(int fd, void *buf, size_t len, uint64_t deadline_ns, bool wr)
{
    uint8_t *p = buf;

    while (len > 0) {
        ssize_t n = wr ? coll__sys.send(fd, p, len, MSG_NOSIGNAL) : coll__sys.recv(fd, p, len, 0);
        int err;

        if (n > 0) {
            p += n, len -= (size_t)n;
            continue;
        }
        if (n == 0 && !wr)
            return EPIPE;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return errno;
        err = wait_fd(fd, wr ? POLLOUT : POLLIN, deadline_ns);
        if (err)
            return err;
    }
    return 0;
}

/* Non-blocking connect finished before the deadline: 0, ETIMEDOUT or the socket error. */
static int connect_wait(int fd, const void *addr, socklen_t len, uint64_t deadline_ns)
{
    int err = 0;
    socklen_t elen = sizeof(err);

    if (coll__sys.connect(fd, addr, len) == 0)
        return 0;
    if (errno != EINPROGRESS && errno != EINTR)
        return errno;
    err = wait_fd(fd, POLLOUT, deadline_ns);
    if (err)
        return err;
    if (coll__sys.getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
        return errno;
    return err;
}

static void set_nodelay(int fd)
{
    int one = 1;
    /* best effort: without it the small MAC after a table may wait for a delayed ACK */
    (void)coll__sys.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static const char *errstr(int err, char *buf, size_t n)
{
    if (err == ETIMEDOUT)
        return "timed out";
    if (err == EPIPE)
        return "connection closed";
    return strerror_r(err, buf, n);
}

/* The MAC of an answer: HMAC(secret, "coll-root" | rank_nonce | header | SHA-256(body)).
 * The body is hashed once, so a table of n ranks costs O(n) to authenticate n times. */
static void answer_mac(const uint8_t *secret, const uint8_t *rank_nonce, const uint8_t *hdr,
                       const uint8_t body_hash[32], uint8_t mac[COLL_MAC_BYTES])
{
    uint8_t m[LABEL_BYTES + BS_NONCE_BYTES + ANSWER_HDR_BYTES + 32];

    memcpy(m, ROOT_LABEL, LABEL_BYTES);
    memcpy(m + LABEL_BYTES, rank_nonce, BS_NONCE_BYTES);
    memcpy(m + LABEL_BYTES + BS_NONCE_BYTES, hdr, ANSWER_HDR_BYTES);
    memcpy(m + LABEL_BYTES + BS_NONCE_BYTES + ANSWER_HDR_BYTES, body_hash, 32);
    coll__hmac_sha256(secret, COLL_SECRET_BYTES, m, sizeof(m), mac);
}

static void join_mac(const uint8_t *secret, const uint8_t *root_nonce, const uint8_t *rec,
                     uint8_t mac[COLL_MAC_BYTES])
{
    uint8_t m[LABEL_BYTES + BS_NONCE_BYTES + JOIN_BODY_BYTES];

    memcpy(m, JOIN_LABEL, LABEL_BYTES);
    memcpy(m + LABEL_BYTES, root_nonce, BS_NONCE_BYTES);
    memcpy(m + LABEL_BYTES + BS_NONCE_BYTES, rec, JOIN_BODY_BYTES);
    coll__hmac_sha256(secret, COLL_SECRET_BYTES, m, sizeof(m), mac);
}

/* ---- 5 the root thread --------------------------------------------------------------- */

struct root_conn {
    int fd;
    bool joined;          /* authenticated and counted */
    bool drop;            /* closed; removed at the end of the poll round */
    uint64_t deadline_ns; /* for the join record */
    size_t off;           /* bytes of rec received */
    uint8_t nonce[BS_NONCE_BYTES];
    uint8_t rec[JOIN_BYTES];
    char where[64];       /* remote address, for messages */
    int32_t rank, nranks; /* as joined */
    uint8_t rank_nonce[BS_NONCE_BYTES];
    struct coll_peer_info info;
};

struct root {
    int lfd;
    struct coll_id_info id;
    char where[64];
    int64_t timeout_ms;
    uint64_t deadline_ns;
    uint64_t accept_pause_until; /* out of fds: stop polling the listener for a moment */
    struct root_conn **conns;
    size_t nconns, cap;
    int32_t nranks; /* from the first joiner; 0 before */
    int32_t njoined;
    struct root_conn **by_rank;  /* [nranks] */
    struct coll_peer_info first; /* the first joiner, for disagreement messages */
    /* failure: every joined rank, and every later joiner, gets the message */
    bool failed;
    coll_status_t fail_st;
    char fail_msg[ANSWER_MSG_MAX];
    bool *told; /* [nranks]: ranks that got the failure */
    int32_t ntold;
    uint64_t nrejected;
};

static void root_close(struct root_conn *c)
{
    if (c->fd >= 0)
        coll__sys.close(c->fd);
    c->fd = -1;
    c->drop = true;
}

/* A connection that did not prove the secret or sent nonsense: it never counts, never
 * reaches a rank, and only the first one is worth a warning. */
COLL_PRINTF(3, 4)
static void root_reject(struct root *r, struct root_conn *c, const char *fmt, ...)
{
    char why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (r->nrejected++ == 0)
        COLL_WARN(COLL_SUB_BOOTSTRAP,
                  "bootstrap root %s: dropped a connection from %s: %s (further ones are "
                  "counted, not logged)",
                  r->where, c->where, why);
    else
        COLL_INFO(COLL_SUB_BOOTSTRAP, "bootstrap root %s: dropped a connection from %s: %s",
                  r->where, c->where, why);
    root_close(c);
}

static void root_unjoin(struct root *r, struct root_conn *c)
{
    if (c->joined && c->rank < r->nranks && r->by_rank && r->by_rank[c->rank] == c) {
        r->by_rank[c->rank] = NULL;
        r->njoined--;
    }
    c->joined = false;
    root_close(c);
}

/* Send an answer (header, body, MAC) to one joined rank, then close it. */
static void root_answer(struct root *r, struct root_conn *c, uint32_t status, uint32_t count,
                        const uint8_t *body, size_t body_len, const uint8_t body_hash[32])
{
    uint8_t hdr[ANSWER_HDR_BYTES], mac[COLL_MAC_BYTES];
    uint64_t deadline = coll__now_ns() + (uint64_t)ROOT_SEND_MS * 1000000ull;
    char ebuf[128];
    int err;

    put32(hdr, ANSWER_MAGIC);
    put32(hdr + 4, status);
    put32(hdr + 8, count);
    /* a table's settings part, an error's text */
    put32(hdr + 12, (uint32_t)(status ? body_len : body_len - count * PEER_WIRE_BYTES));
    answer_mac(r->id.secret, c->rank_nonce, hdr, body_hash, mac);
    err = coll__io_full(c->fd, hdr, sizeof(hdr), deadline, true);
    if (!err && body_len)
        err = coll__io_full(c->fd, (void *)body, body_len, deadline, true);
    if (!err)
        err = coll__io_full(c->fd, mac, sizeof(mac), deadline, true);
    if (err)
        COLL_WARN(COLL_SUB_BOOTSTRAP, "bootstrap root %s: cannot answer rank %d (%s, %s): %s",
                  r->where, c->rank, c->info.hostname, c->where, errstr(err, ebuf, sizeof(ebuf)));
    root_unjoin(r, c);
}

static void root_tell_failure(struct root *r, struct root_conn *c)
{
    uint8_t hash[32];
    size_t len = strlen(r->fail_msg);

    coll__sha256(r->fail_msg, len, hash);
    if (r->told && c->rank < r->nranks && !r->told[c->rank]) {
        r->told[c->rank] = true;
        r->ntold++;
    }
    root_answer(r, c, (uint32_t)r->fail_st, 0, (const uint8_t *)r->fail_msg, len, hash);
}

/* The rendezvous cannot succeed: tell every joined rank now and every later joiner when it
 * arrives (until the deadline, or until each of the nranks ranks has been told). */
COLL_PRINTF(3, 4)
static void root_fail(struct root *r, coll_status_t st, const char *fmt, ...)
{
    va_list ap;

    if (r->failed)
        return;
    va_start(ap, fmt);
    vsnprintf(r->fail_msg, sizeof(r->fail_msg), fmt, ap);
    va_end(ap);
    r->failed = true;
    r->fail_st = st;
    COLL_WARN(COLL_SUB_BOOTSTRAP, "bootstrap root %s: %s", r->where, r->fail_msg);
    if (r->nranks > 0)
        r->told = calloc((size_t)r->nranks, sizeof(*r->told));
    for (size_t i = 0; i < r->nconns; i++)
        if (r->conns[i]->joined && !r->conns[i]->drop)
            root_tell_failure(r, r->conns[i]);
}

/* A complete join record arrived on c: check it, then count the rank. */
static void root_admit(struct root *r, struct root_conn *c)
{
    const uint8_t *p = c->rec;
    uint8_t mac[COLL_MAC_BYTES];
    struct root_conn *other;

    if (get32(p) != JOIN_MAGIC || get32(p + 4) != JOIN_VERSION) {
        root_reject(r, c, "not a coll join record");
        return;
    }
    join_mac(r->id.secret, c->nonce, p, mac);
    if (!coll__mac_equal(mac, p + JOIN_BODY_BYTES, COLL_MAC_BYTES)) {
        root_reject(r, c, "wrong MAC (a rank with another id's secret, or a stranger)");
        return;
    }
    if (get64(p + 8) != r->id.comm_id) {
        root_reject(r, c, "join record for another communicator");
        return;
    }
    c->rank = (int32_t)get32(p + 16);
    c->nranks = (int32_t)get32(p + 20);
    memcpy(c->rank_nonce, p + 24, BS_NONCE_BYTES);
    if (c->nranks < 1 || c->rank < 0 || c->rank >= c->nranks ||
        !peer_decode(p + 24 + BS_NONCE_BYTES, &c->info) || c->info.rank != c->rank ||
        get32(p + JOIN_SETTINGS_AT + COLL_SETTINGS_FACTS) > COLL_SETTINGS_BLOB_MAX) {
        root_reject(r, c, "malformed join record (rank %d of %d)", c->rank, c->nranks);
        return;
    }
    c->joined = true;
    COLL_INFO(COLL_SUB_BOOTSTRAP, "bootstrap root %s: rank %d of %d joined from %s (%s, pid %d)",
              r->where, c->rank, c->nranks, c->where, c->info.hostname, (int)c->info.pid);
    if (r->failed) {
        root_tell_failure(r, c);
        return;
    }
    if (r->nranks == 0) {
        r->by_rank = calloc((size_t)c->nranks, sizeof(*r->by_rank));
        if (!r->by_rank) {
            r->nranks = 0;
            root_fail(r, COLL_SYSTEM_ERROR, "bootstrap root out of memory for %d ranks", c->nranks);
            return;
        }
        r->nranks = c->nranks;
        r->first = c->info;
    } else if (c->nranks != r->nranks) {
        root_fail(r, COLL_REMOTE_ERROR,
                  "ranks disagree on the number of ranks: rank %d (%s, pid %d) says nranks=%d, "
                  "rank %d (%s, pid %d) says nranks=%d",
                  r->first.rank, r->first.hostname, (int)r->first.pid, r->nranks, c->rank,
                  c->info.hostname, (int)c->info.pid, c->nranks);
        return;
    }
    other = r->by_rank[c->rank];
    if (other) {
        root_fail(r, COLL_REMOTE_ERROR,
                  "two processes joined as rank %d: %s (pid %d) and %s (pid %d)", c->rank,
                  other->info.hostname, (int)other->info.pid, c->info.hostname, (int)c->info.pid);
        return;
    }
    r->by_rank[c->rank] = c;
    r->njoined++;
}

static void root_readable(struct root *r, struct root_conn *c)
{
    char ebuf[128];
    ssize_t n;

    if (c->drop)
        return;
    if (!c->joined) {
        n = coll__sys.recv(c->fd, c->rec + c->off, JOIN_BYTES - c->off, 0);
        if (n == 0) {
            root_reject(r, c, "closed before sending a join record");
        } else if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                root_reject(r, c, "%s", strerror_r(errno, ebuf, sizeof(ebuf)));
        } else {
            c->off += (size_t)n;
            if (c->off == JOIN_BYTES)
                root_admit(r, c);
            else if (c->off >= 8 &&
                     (get32(c->rec) != JOIN_MAGIC || get32(c->rec + 4) != JOIN_VERSION))
                root_reject(r, c, "not a coll join record"); /* junk need not wait */
        }
        return;
    }
    /* A joined rank only waits for the answer: anything readable means it went away (or
     * broke the protocol). Its rank is free again, in case it is restarted. */
    {
        uint8_t b;
        n = coll__sys.recv(c->fd, &b, 1, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        COLL_INFO(COLL_SUB_BOOTSTRAP,
                  "bootstrap root %s: rank %d (%s) left before the "
                  "rendezvous completed",
                  r->where, c->rank, c->info.hostname);
        root_unjoin(r, c);
    }
}

static bool root_grow(struct root *r)
{
    struct root_conn **p;
    size_t cap;

    if (r->nconns < r->cap)
        return true;
    cap = r->cap ? 2 * r->cap : 16;
    p = realloc(r->conns, cap * sizeof(*p));
    if (!p)
        return false;
    r->conns = p;
    r->cap = cap;
    return true;
}

/* The oldest connection still to authenticate: first read what it sent, so that a join
 * record already in its socket is admitted, not thrown away; if it still has not proved the
 * secret, drop it. Strangers then cost the newest arrivals nothing: an authenticated rank
 * only has to send its record within ROOT_MAX_STRANGERS arrivals of its own. */
static bool root_evict_oldest(struct root *r, const char *why)
{
    for (size_t i = 0; i < r->nconns; i++) {
        struct root_conn *c = r->conns[i];

        if (c->joined || c->drop)
            continue;
        root_readable(r, c);
        if (c->joined || c->drop)
            continue; /* admitted, or refused for what it sent: look further */
        root_reject(r, c, "%s", why);
        return true;
    }
    return false;
}

static void root_accept(struct root *r)
{
    size_t strangers = 0;

    for (size_t i = 0; i < r->nconns; i++)
        strangers += !r->conns[i]->joined && !r->conns[i]->drop;
    for (int k = 0; k < ROOT_ACCEPT_BATCH; k++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        struct root_conn *c;
        int fd;

        fd = coll__sys.accept4(r->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE) {
                /* out of fds: a higher soft limit, else the oldest stranger's fd */
                if (errno == EMFILE && coll__raise_nofile())
                    continue;
                if (strangers > 0 &&
                    root_evict_oldest(r, "dropped to free a file descriptor for a newer "
                                         "connection")) {
                    strangers--;
                    continue;
                }
            }
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                COLL_WARN(COLL_SUB_BOOTSTRAP, "bootstrap root %s: cannot accept: %s", r->where,
                          strerror(errno));
                r->accept_pause_until = coll__now_ns() + 100000000ull;
            }
            return;
        }
        c = calloc(1, sizeof(*c));
        if (!c || !root_grow(r)) {
            free(c);
            coll__sys.close(fd);
            continue;
        }
        c->fd = fd;
        coll__sockaddr_str(&ss, sl, c->where, sizeof(c->where));
        /* at the cap the oldest stranger goes, never the newcomer, which may be a rank */
        if (strangers >= ROOT_MAX_STRANGERS &&
            root_evict_oldest(r, "the oldest of too many connections still to authenticate"))
            strangers--;
        r->conns[r->nconns++] = c;
        strangers++;
        if (coll__random(c->nonce, sizeof(c->nonce)) != COLL_SUCCESS) {
            root_reject(r, c, "no random bytes for a nonce");
            continue;
        }
        set_nodelay(fd);
        /* 16 bytes always fit in a fresh socket's buffer: no need to wait */
        if (coll__sys.send(fd, c->nonce, sizeof(c->nonce), MSG_NOSIGNAL | MSG_DONTWAIT) !=
            (ssize_t)sizeof(c->nonce)) {
            root_reject(r, c, "cannot send the nonce");
            continue;
        }
        c->deadline_ns =
            COLL_MIN(coll__now_ns() + (uint64_t)ROOT_HANDSHAKE_MS * 1000000ull, r->deadline_ns);
    }
}

/* Free dropped connections, keeping the others in accept order. */
static void root_compact(struct root *r)
{
    size_t j = 0;

    for (size_t i = 0; i < r->nconns; i++) {
        if (r->conns[i]->drop)
            free(r->conns[i]);
        else
            r->conns[j++] = r->conns[i];
    }
    r->nconns = j;
}

/* A joined rank's settings blob, in its join record. */
static const uint8_t *join_blob(const struct root_conn *c, uint32_t *len_p)
{
    *len_p = get32(c->rec + JOIN_SETTINGS_AT + COLL_SETTINGS_FACTS);
    return c->rec + JOIN_SETTINGS_AT + COLL_SETTINGS_FACTS + 4;
}

/* The settings part of the table (bootstrap.c's header): every rank's facts and the index
 * of its blob, then each distinct blob once. *len_p: its length. */
static uint8_t *root_settings(struct root *r, size_t *len_p)
{
    const size_t n = (size_t)r->nranks;
    uint32_t *first = malloc(n * sizeof(*first)), nb = 0, len;
    size_t total = n * (COLL_SETTINGS_FACTS + 4) + 4, o;
    uint8_t *out = NULL, *idx;

    if (!first)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = join_blob(r->by_rank[i], &len);
        uint32_t k = 0, l2;
        while (k < nb && !(get32(r->by_rank[first[k]]->rec + JOIN_SETTINGS_AT +
                                 COLL_SETTINGS_FACTS) == len &&
                           !memcmp(join_blob(r->by_rank[first[k]], &l2), b, len)))
            k++;
        if (k == nb) {
            first[nb++] = (uint32_t)i;
            total += 4 + len;
        }
    }
    out = malloc(total);
    if (!out)
        goto out;
    idx = out + n * COLL_SETTINGS_FACTS;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = join_blob(r->by_rank[i], &len);
        uint32_t k = 0, l2;
        memcpy(out + i * COLL_SETTINGS_FACTS, r->by_rank[i]->rec + JOIN_SETTINGS_AT,
               COLL_SETTINGS_FACTS);
        while (get32(r->by_rank[first[k]]->rec + JOIN_SETTINGS_AT + COLL_SETTINGS_FACTS) !=
                   len ||
               memcmp(join_blob(r->by_rank[first[k]], &l2), b, len))
            k++;
        put32(idx + 4 * i, k);
    }
    o = n * (COLL_SETTINGS_FACTS + 4);
    put32(out + o, nb);
    o += 4;
    for (uint32_t k = 0; k < nb; k++) {
        const uint8_t *b = join_blob(r->by_rank[first[k]], &len);
        put32(out + o, len);
        memcpy(out + o + 4, b, len);
        o += 4 + len;
    }
    *len_p = total;
out:
    free(first);
    return out;
}

static void root_send_table(struct root *r)
{
    size_t plen = (size_t)r->nranks * PEER_WIRE_BYTES, slen = 0, len;
    uint8_t *settings = root_settings(r, &slen), *body = NULL, hash[32];

    if (settings)
        body = malloc(plen + slen);
    if (!body) {
        free(settings);
        root_fail(r, COLL_SYSTEM_ERROR, "bootstrap root out of memory for the table of %d ranks",
                  r->nranks);
        return;
    }
    len = plen + slen;
    for (int32_t i = 0; i < r->nranks; i++)
        peer_encode(body + (size_t)i * PEER_WIRE_BYTES, &r->by_rank[i]->info);
    memcpy(body + plen, settings, slen);
    free(settings);
    coll__sha256(body, len, hash);
    COLL_INFO(COLL_SUB_BOOTSTRAP, "bootstrap root %s: all %d ranks joined, sending the table",
              r->where, r->nranks);
    /* The ranks of this process last: once one has its table it may finish and exit,
     * and this thread with it, before the others have theirs. */
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < r->nranks; i++)
            if (r->by_rank[i] && (r->by_rank[i]->info.pid == (int32_t)getpid()) == (pass == 1))
                root_answer(r, r->by_rank[i], 0, (uint32_t)r->nranks, body, len, hash);
    free(body);
}

static void root_expire(struct root *r)
{
    char missing[256] = "";
    size_t o = 0;
    int listed = 0;

    if (r->failed || r->nranks == 0) {
        COLL_INFO(COLL_SUB_BOOTSTRAP, "bootstrap root %s: exiting after %lld ms", r->where,
                  (long long)r->timeout_ms);
        return;
    }
    for (int32_t i = 0; i < r->nranks && listed < 8; i++) {
        if (r->by_rank[i])
            continue;
        o += (size_t)snprintf(missing + o, sizeof(missing) - o, "%s%d", listed ? ", " : "", i);
        listed++;
        if (o >= sizeof(missing))
            break;
    }
    root_fail(r, COLL_TIMEOUT,
              "bootstrap timed out after %lld ms (COLL_BOOTSTRAP_TIMEOUT_MS): %d of %d ranks "
              "joined; missing rank%s %s%s",
              (long long)r->timeout_ms, r->njoined, r->nranks,
              r->nranks - r->njoined > 1 ? "s" : "", missing,
              r->nranks - r->njoined > listed ? ", ..." : "");
}

static void root_free(struct root *r)
{
    for (size_t i = 0; i < r->nconns; i++) {
        root_close(r->conns[i]);
        free(r->conns[i]);
    }
    if (r->lfd >= 0)
        coll__sys.close(r->lfd);
    free(r->conns);
    free(r->by_rank);
    free(r->told);
    free(r);
}

static void *root_main(void *arg)
{
    struct root *r = arg;
    struct pollfd *pfds = NULL;
    size_t pcap = 0;

    for (;;) {
        uint64_t now = coll__now_ns(), wake = r->deadline_ns;
        size_t nc = r->nconns;
        int n;

        if (!r->failed && r->nranks > 0 && r->njoined == r->nranks) {
            root_send_table(r);
            break;
        }
        if (r->failed && r->told && r->ntold == r->nranks)
            break;
        if (now >= r->deadline_ns) {
            root_expire(r);
            break;
        }
        if (pcap < nc + 1) {
            struct pollfd *p = realloc(pfds, (nc + 16) * sizeof(*p));
            if (!p) {
                root_fail(r, COLL_SYSTEM_ERROR, "bootstrap root out of memory");
                break;
            }
            pfds = p;
            pcap = nc + 16;
        }
        pfds[0] = (struct pollfd){.fd = r->lfd, .events = POLLIN};
        if (now < r->accept_pause_until) {
            pfds[0].events = 0;
            wake = COLL_MIN(wake, r->accept_pause_until);
        }
        for (size_t i = 0; i < nc; i++) {
            pfds[1 + i] = (struct pollfd){.fd = r->conns[i]->fd, .events = POLLIN};
            if (!r->conns[i]->joined)
                wake = COLL_MIN(wake, r->conns[i]->deadline_ns);
        }
        n = coll__sys.poll(pfds, nc + 1, ms_until(wake, now));
        if (n < 0) {
            if (errno != EINTR) {
                COLL_WARN(COLL_SUB_BOOTSTRAP, "bootstrap root %s: poll: %s", r->where,
                          strerror(errno));
                coll__sys.poll(NULL, 0, 10);
            }
            continue;
        }
        /* conns accepted below are appended after nc: this round's pfds cover [0, nc) */
        for (size_t i = 0; i < nc; i++)
            if (pfds[1 + i].revents)
                root_readable(r, r->conns[i]);
        if (pfds[0].revents & POLLIN)
            root_accept(r);
        now = coll__now_ns();
        for (size_t i = 0; i < r->nconns; i++) {
            struct root_conn *c = r->conns[i];
            if (!c->joined && !c->drop && now >= c->deadline_ns)
                root_reject(r, c, "no join record within %d ms", ROOT_HANDSHAKE_MS);
        }
        root_compact(r);
    }
    free(pfds);
    root_free(r);
    return NULL;
}

/* The root has no comm and no config snapshot: read its one knob here. */
static int64_t root_timeout_ms(void)
{
    const char *v = getenv("COLL_BOOTSTRAP_TIMEOUT_MS");
    char *end;
    long long x;

    if (!v || !*v)
        return BOOTSTRAP_DEFAULT_TIMEOUT_MS;
    errno = 0;
    x = strtoll(v, &end, 10);
    if (errno || *end != '\0' || x <= 0 || x > INT64_MAX / 1000000) {
        COLL_WARN(COLL_SUB_BOOTSTRAP,
                  "COLL_BOOTSTRAP_TIMEOUT_MS='%s' is not a positive number of milliseconds; "
                  "using %d",
                  v, BOOTSTRAP_DEFAULT_TIMEOUT_MS);
        return BOOTSTRAP_DEFAULT_TIMEOUT_MS;
    }
    return x;
}

/* The root thread: own the bound, listening r->lfd; not the application's signals. */
static coll_status_t root_spawn(struct root *r)
{
    pthread_attr_t attr;
    pthread_t tid;
    sigset_t all, old;
    int err;

    r->timeout_ms = root_timeout_ms();
    r->deadline_ns = coll__now_ns() + (uint64_t)r->timeout_ms * 1000000ull;
    COLL_INFO(COLL_SUB_BOOTSTRAP, "bootstrap root listening on %s, comm %016llx, timeout %lld ms",
              r->where, (unsigned long long)r->id.comm_id, (long long)r->timeout_ms);
    sigfillset(&all);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    err = pthread_create(&tid, &attr, root_main, r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (err)
        return coll__sys_error(NULL, err, "bootstrap root: cannot start its thread");
    return COLL_SUCCESS;
}

/* Socket bound to ss and listening, into r->lfd; r->where says where. */
static coll_status_t root_listen(struct root *r, struct sockaddr_storage *ss, socklen_t sl,
                                 bool reuse)
{
    int one = 1;

    r->lfd = coll__sys.socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (r->lfd < 0)
        return coll__sys_error(NULL, errno, "bootstrap root: cannot create a socket");
    coll__sockaddr_str(ss, sl, r->where, sizeof(r->where));
    if (reuse)
        (void)coll__sys.setsockopt(r->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (coll__sys.bind(r->lfd, (struct sockaddr *)ss, sl) < 0)
        return coll__sys_error(NULL, errno, "bootstrap root: cannot bind %s", r->where);
    if (coll__sys.listen(r->lfd, SOMAXCONN) < 0)
        return coll__sys_error(NULL, errno, "bootstrap root: cannot listen on %s", r->where);
    return COLL_SUCCESS;
}

coll_status_t coll__bootstrap_root_start(coll_unique_id_t *id_p)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char ifname[64];
    struct root *r;
    coll_status_t st;

    if (!id_p)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "bootstrap root: id_p is NULL");
    r = calloc(1, sizeof(*r));
    if (!r)
        return coll__error(NULL, COLL_SYSTEM_ERROR, "bootstrap root: out of memory");
    r->lfd = -1;
    COLL_CHECK_GOTO(coll__socket_pick_addr(NULL, getenv("COLL_SOCKET_IFNAME"), &ss, &sl, ifname,
                                           sizeof(ifname)),
                    st, out_free);
    COLL_CHECK_GOTO(root_listen(r, &ss, sl, false), st, out_free);
    sl = sizeof(ss);
    if (coll__sys.getsockname(r->lfd, (struct sockaddr *)&ss, &sl) < 0 || sl > COLL_ADDR_MAX) {
        st = coll__sys_error(NULL, errno, "bootstrap root: getsockname");
        goto out_free;
    }
    coll__sockaddr_str(&ss, sl, r->where, sizeof(r->where));
    memcpy(r->id.addr, &ss, sl);
    r->id.addr_len = (uint16_t)sl;
    COLL_CHECK_GOTO(coll__random(r->id.secret, sizeof(r->id.secret)), st, out_free);
    do
        COLL_CHECK_GOTO(coll__random(&r->id.comm_id, sizeof(r->id.comm_id)), st, out_free);
    while (r->id.comm_id == 0);
    coll__id_encode(&r->id, id_p); /* before the thread owns r */
    COLL_CHECK_GOTO(root_spawn(r), st, out_free);
    return COLL_SUCCESS;

out_free:
    if (r->lfd >= 0)
        coll__sys.close(r->lfd);
    free(r);
    return st;
}

coll_status_t coll__bootstrap_root_start_at(const struct coll_id_info *id)
{
    struct sockaddr_storage ss;
    struct root *r;
    coll_status_t st;

    if (!id || id->addr_len > COLL_ADDR_MAX || !sockaddr_usable(id->addr, id->addr_len))
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "bootstrap root: no usable address");
    r = calloc(1, sizeof(*r));
    if (!r)
        return coll__error(NULL, COLL_SYSTEM_ERROR, "bootstrap root: out of memory");
    r->lfd = -1;
    r->id = *id;
    memset(&ss, 0, sizeof(ss));
    memcpy(&ss, id->addr, id->addr_len);
    COLL_CHECK_GOTO(root_listen(r, &ss, id->addr_len, true), st, out_free);
    COLL_CHECK_GOTO(root_spawn(r), st, out_free);
    return COLL_SUCCESS;

out_free:
    if (r->lfd >= 0)
        coll__sys.close(r->lfd);
    free(r);
    return st;
}

/* ---- 6 the rank side ----------------------------------------------------------------- */

/* Connect to the root and read its nonce, retrying while nobody listens yet (the root's
 * process may start after ours) or a connection ends before the nonce. */
static coll_status_t join_connect(struct coll_comm *comm, const struct coll_id_info *id,
                                  const char *where, uint64_t deadline_ns, int64_t timeout_ms,
                                  int *fd_p, uint8_t nonce[BS_NONCE_BYTES])
{
    struct sockaddr_storage ss;
    unsigned backoff_ms = 10;
    int last_err = ETIMEDOUT, logged = 0;
    char ebuf[128];

    memset(&ss, 0, sizeof(ss));
    memcpy(&ss, id->addr, id->addr_len);
    for (;;) {
        uint64_t now;
        int fd, err;

        fd = coll__sys.socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return coll__sys_error(comm, errno, "bootstrap: cannot create a socket");
        err = connect_wait(fd, &ss, id->addr_len, deadline_ns);
        if (!err) {
            set_nodelay(fd);
            err = coll__io_full(fd, nonce, BS_NONCE_BYTES, deadline_ns, false);
        }
        if (!err) {
            *fd_p = fd;
            return COLL_SUCCESS;
        }
        coll__sys.close(fd);
        if (err != ETIMEDOUT)
            last_err = err; /* "Connection refused" says more than the final timeout */
        if (!logged++)
            COLL_INFO(COLL_SUB_BOOTSTRAP,
                      "rank %d: bootstrap root %s not reachable yet (%s); "
                      "retrying for up to %lld ms",
                      comm->rank, where, errstr(err, ebuf, sizeof(ebuf)), (long long)timeout_ms);
        now = coll__now_ns();
        if (now >= deadline_ns)
            break;
        coll__sys.poll(NULL, 0, COLL_MIN((int)backoff_ms, ms_until(deadline_ns, now)));
        backoff_ms = COLL_MIN(backoff_ms * 2, 500u);
        if (coll__now_ns() >= deadline_ns)
            break;
    }
    return coll__error(comm, COLL_TIMEOUT,
                       "bootstrap: no answer from the root at %s within %lld ms "
                       "(COLL_BOOTSTRAP_TIMEOUT_MS; last error: %s): is the process that "
                       "called coll_get_unique_id running, and is its address reachable?",
                       where, (long long)timeout_ms, errstr(last_err, ebuf, sizeof(ebuf)));
}

/* Error text from the root, made safe to print. */
static void sanitize(char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            s[i] = '?';
    s[len] = '\0';
}

/* Parse the table into peers[nranks], checking every field and our own entry. */
static coll_status_t join_parse_table(struct coll_comm *comm, const uint8_t *body,
                                      const struct coll_peer_info *mine, const char *where,
                                      struct coll_peer_info **peers_p)
{
    struct coll_peer_info *peers = calloc((size_t)comm->nranks, sizeof(*peers));

    if (!peers)
        return coll__error(comm, COLL_SYSTEM_ERROR, "bootstrap: out of memory for %d peers",
                           comm->nranks);
    for (int i = 0; i < comm->nranks; i++) {
        struct coll_peer_info *p = &peers[i];
        if (!peer_decode(body + (size_t)i * PEER_WIRE_BYTES, p) || p->rank != i) {
            free(peers);
            return coll__error(comm, COLL_REMOTE_ERROR,
                               "bootstrap: entry %d of the table from the root at %s is "
                               "malformed",
                               i, where);
        }
    }
    {
        const struct coll_peer_info *p = &peers[comm->rank];
        if (p->pid != mine->pid || p->host_hash != mine->host_hash ||
            p->addr_len != mine->addr_len || memcmp(p->addr, mine->addr, p->addr_len) ||
            strcmp(p->hostname, mine->hostname) || p->tp_mask != mine->tp_mask ||
            memcmp(p->tp_addr, mine->tp_addr, sizeof(p->tp_addr))) {
            free(peers);
            return coll__error(comm, COLL_REMOTE_ERROR,
                               "bootstrap: the table from the root at %s does not hold this "
                               "rank's own record",
                               where);
        }
    }
    *peers_p = peers;
    return COLL_SUCCESS;
}

/* The table's settings part into comm->xchg: every field checked, as from a stranger. */
static coll_status_t join_parse_settings(struct coll_comm *comm, const uint8_t *p, size_t len,
                                         const char *where)
{
    struct coll_settings_xchg *x = comm->xchg;
    const size_t n = (size_t)comm->nranks;
    size_t o = n * (COLL_SETTINGS_FACTS + 4);
    uint32_t nb;

    if (!x)
        return COLL_SUCCESS;
    if (len < o + 4 || (nb = get32(p + o)) == 0 || nb > n)
        goto bad;
    o += 4;
    x->peer_facts = malloc(n * sizeof(*x->peer_facts));
    x->peer_blob = malloc(n * sizeof(*x->peer_blob));
    x->blobs = calloc(nb, sizeof(*x->blobs));
    x->blob_len = calloc(nb, sizeof(*x->blob_len));
    if (!x->peer_facts || !x->peer_blob || !x->blobs || !x->blob_len)
        return coll__error(comm, COLL_SYSTEM_ERROR, "bootstrap: out of memory for %d ranks' "
                           "settings", comm->nranks);
    x->nblobs = nb;
    memcpy(x->peer_facts, p, n * COLL_SETTINGS_FACTS);
    for (size_t i = 0; i < n; i++)
        if ((x->peer_blob[i] = get32(p + n * COLL_SETTINGS_FACTS + 4 * i)) >= nb)
            goto bad;
    for (uint32_t k = 0; k < nb; k++) {
        uint32_t l;
        if (len - o < 4 || (l = get32(p + o)) > COLL_SETTINGS_BLOB_MAX || len - o - 4 < l)
            goto bad;
        x->blobs[k] = malloc((size_t)l + 1);
        if (!x->blobs[k])
            return coll__error(comm, COLL_SYSTEM_ERROR, "bootstrap: out of memory for settings");
        memcpy(x->blobs[k], p + o + 4, l);
        x->blobs[k][l] = '\0';
        x->blob_len[k] = l;
        o += 4 + (size_t)l;
    }
    if (o != len)
        goto bad;
    return COLL_SUCCESS;
bad:
    return coll__error(comm, COLL_REMOTE_ERROR,
                       "bootstrap: the settings in the table from the root at %s are malformed",
                       where);
}

coll_status_t coll__bootstrap_join(struct coll_comm *comm, const struct coll_id_info *id)
{
    uint8_t root_nonce[BS_NONCE_BYTES], my_nonce[BS_NONCE_BYTES], rec[JOIN_BYTES];
    uint8_t hdr[ANSWER_HDR_BYTES], hash[32], mac[COLL_MAC_BYTES], *body = NULL;
    struct coll_peer_info mine, *peers = NULL;
    uint32_t status, count, msglen;
    size_t body_len;
    int64_t timeout_ms;
    uint64_t deadline;
    char where[64], ebuf[128];
    coll_status_t st;
    int fd = -1, err, attempt;

    if (!comm)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "bootstrap: comm is NULL");
    if (!id)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "bootstrap: id is NULL");
    if (comm->nranks < 1 || comm->rank < 0 || comm->rank >= comm->nranks)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "bootstrap: rank %d is not in [0, %d)",
                           comm->rank, comm->nranks);
    if (id->addr_len > COLL_ADDR_MAX || !sockaddr_usable(id->addr, id->addr_len))
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "bootstrap: the id holds no usable root address");
    if (comm->self.addr_len > COLL_ADDR_MAX)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "bootstrap: this rank's address is %u bytes (at most %d)",
                           (unsigned)comm->self.addr_len, COLL_ADDR_MAX);
    coll__sockaddr_str(id->addr, id->addr_len, where, sizeof(where));
    timeout_ms = comm->cfg.bootstrap_timeout_ms > 0 ? comm->cfg.bootstrap_timeout_ms
                                                    : BOOTSTRAP_DEFAULT_TIMEOUT_MS;
    deadline = coll__now_ns() + (uint64_t)timeout_ms * 1000000ull;

    mine = comm->self;
    mine.rank = comm->rank;
    mine.hostname[COLL_HOSTNAME_MAX - 1] = '\0';
    /* The root closes a connection without an answer only before it counted the rank: one
     * that sent junk or a wrong MAC, or, under a crowd of strangers, the oldest of too many
     * still to authenticate. So joining again is safe, and a few tries tell the crowd (which
     * a retry gets through) from a wrong secret (which fails every time). */
    for (attempt = 1;; attempt++) {
        COLL_CHECK_GOTO(coll__random(my_nonce, sizeof(my_nonce)), st, out);
        COLL_CHECK_GOTO(join_connect(comm, id, where, deadline, timeout_ms, &fd, root_nonce), st,
                        out);
        COLL_CHECK_GOTO(coll__ctl_listen(comm, fd, &mine), st, out);
        put32(rec, JOIN_MAGIC);
        put32(rec + 4, JOIN_VERSION);
        put64(rec + 8, id->comm_id);
        put32(rec + 16, (uint32_t)comm->rank);
        put32(rec + 20, (uint32_t)comm->nranks);
        memcpy(rec + 24, my_nonce, BS_NONCE_BYTES);
        peer_encode(rec + 24 + BS_NONCE_BYTES, &mine);
        memset(rec + JOIN_SETTINGS_AT, 0, JOIN_BODY_BYTES - JOIN_SETTINGS_AT);
        if (comm->xchg) {
            memcpy(rec + JOIN_SETTINGS_AT, comm->xchg->facts, COLL_SETTINGS_FACTS);
            put32(rec + JOIN_SETTINGS_AT + COLL_SETTINGS_FACTS, comm->xchg->len);
            memcpy(rec + JOIN_SETTINGS_AT + COLL_SETTINGS_FACTS + 4, comm->xchg->blob,
                   comm->xchg->len);
        }
        join_mac(id->secret, root_nonce, rec, rec + JOIN_BODY_BYTES);
        err = coll__io_full(fd, rec, sizeof(rec), deadline, true);
        if (!err)
            err = coll__io_full(fd, hdr, sizeof(hdr), deadline, false);
        if (!err || err == ETIMEDOUT || attempt >= JOIN_RETRIES || coll__now_ns() >= deadline)
            break;
        COLL_INFO(COLL_SUB_BOOTSTRAP,
                  "rank %d: the root at %s closed the connection without an answer (%s); "
                  "joining again (try %d of %d)",
                  comm->rank, where, errstr(err, ebuf, sizeof(ebuf)), attempt + 1, JOIN_RETRIES);
        coll__sys.close(fd);
        fd = -1;
        coll__sys.poll(NULL, 0, COLL_MIN(10 * attempt, ms_until(deadline, coll__now_ns())));
    }
    if (err == ETIMEDOUT) {
        st = coll__error(comm, COLL_TIMEOUT,
                         "bootstrap: the root at %s sent no peer table within %lld ms "
                         "(COLL_BOOTSTRAP_TIMEOUT_MS): did all %d ranks start with this id?",
                         where, (long long)timeout_ms, comm->nranks);
        goto out;
    }
    if (err) {
        st = coll__error(comm, COLL_REMOTE_ERROR,
                         "bootstrap: the root at %s ended the connection without an answer "
                         "%d time%s (last: %s): wrong secret, or an id from another run?",
                         where, attempt, attempt > 1 ? "s" : "", errstr(err, ebuf, sizeof(ebuf)));
        goto out;
    }

    status = get32(hdr + 4);
    count = get32(hdr + 8);
    msglen = get32(hdr + 12);
    if (get32(hdr) != ANSWER_MAGIC ||
        (status == COLL_SUCCESS &&
         (count != (uint32_t)comm->nranks ||
          msglen > (uint64_t)count * (COLL_SETTINGS_FACTS + 8 + COLL_SETTINGS_BLOB_MAX) + 4)) ||
        (status != COLL_SUCCESS && (count != 0 || msglen == 0 || msglen > ANSWER_MSG_MAX))) {
        st = coll__error(comm, COLL_REMOTE_ERROR,
                         "bootstrap: malformed answer from the root at %s (status %u, %u "
                         "entries for %d ranks)",
                         where, status, count, comm->nranks);
        goto out;
    }
    body_len = status == COLL_SUCCESS ? (size_t)count * PEER_WIRE_BYTES + msglen : msglen;
    body = malloc(body_len + 1);
    if (!body) {
        st = coll__error(comm, COLL_SYSTEM_ERROR, "bootstrap: out of memory for %zu bytes",
                         body_len);
        goto out;
    }
    err = coll__io_full(fd, body, body_len, deadline, false);
    if (!err)
        err = coll__io_full(fd, mac, sizeof(mac), deadline, false);
    if (err) {
        st = coll__error(comm, err == ETIMEDOUT ? COLL_TIMEOUT : COLL_REMOTE_ERROR,
                         "bootstrap: answer from the root at %s cut short: %s", where,
                         errstr(err, ebuf, sizeof(ebuf)));
        goto out;
    }
    {
        uint8_t want[COLL_MAC_BYTES];
        coll__sha256(body, body_len, hash);
        answer_mac(id->secret, my_nonce, hdr, hash, want);
        if (!coll__mac_equal(want, mac, COLL_MAC_BYTES)) {
            st = coll__error(comm, COLL_REMOTE_ERROR,
                             "bootstrap: the answer from %s is not signed with this id's "
                             "secret: not our root",
                             where);
            goto out;
        }
    }
    if (status != COLL_SUCCESS) {
        sanitize((char *)body, body_len);
        st = coll__error(comm, status == COLL_TIMEOUT ? COLL_TIMEOUT : COLL_REMOTE_ERROR,
                         "bootstrap root %s reports: %s", where, (char *)body);
        goto out;
    }
    COLL_CHECK_GOTO(join_parse_table(comm, body, &mine, where, &peers), st, out);
    st = join_parse_settings(comm, body + (size_t)count * PEER_WIRE_BYTES, msglen, where);
    if (st != COLL_SUCCESS) {
        free(peers);
        goto out;
    }

    free(comm->peers);
    comm->peers = peers;
    comm->net.peers = peers; /* the transports' probes and handshakes read them now */
    comm->comm_id = id->comm_id;
    memcpy(comm->secret, id->secret, COLL_SECRET_BYTES);
    COLL_INFO(COLL_SUB_BOOTSTRAP, "rank %d: joined comm %016llx of %d ranks through %s", comm->rank,
              (unsigned long long)comm->comm_id, comm->nranks, where);
    st = COLL_SUCCESS;

out:
    free(body);
    if (fd >= 0)
        coll__sys.close(fd);
    return st;
}
