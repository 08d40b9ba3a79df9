/*
 * fuzz_bootstrap_answer.c - libFuzzer harness: the rank side of the bootstrap rendezvous
 * (coll__bootstrap_join) against a root that says anything. The socket calls go to an
 * in-memory script through src/base/sys.h: the "root" sends the input's nonce, takes
 * the rank's join record, then answers with the input's header and body.
 *
 * Input: flags u8 | nranks u8 | rank u8 | root nonce[16] | answer header[16] | body...
 *   flags & 1: sign the answer with the id's secret and the rank's nonce, as the real root
 *              does, so the fuzzer gets past the MAC to the table and error-text parsers
 *   flags & 2: put the rank's own record at its place in a table (past the self check)
 * A join that succeeds must have produced exactly nranks peers, each naming its own rank.
 */
#include "core/bootstrap.h"
#include "base/sys.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The wire sizes of bootstrap.c (its header comment); if they change, the harness still
 * runs, it only reaches less. */
#define PEER_WIRE 408
#define JOIN_BODY (4 + 4 + 8 + 4 + 4 + 16 + PEER_WIRE)
#define JOIN_REC (JOIN_BODY + COLL_MAC_BYTES)
#define BODY_MAX (64 * 1024)

static const uint8_t secret[COLL_SECRET_BYTES] = "fuzz-secret-0123";

static struct {
    uint8_t *out;      /* what the root sends, built once the join record is in */
    size_t out_len, out_pos;
    uint8_t rec[JOIN_REC];
    size_t rec_len;
    const uint8_t *nonce, *hdr, *body;
    size_t body_len;
    int flags, rank;
} s;

/* get32 and the other wire helpers: src/base/wire.h (through internal.h) */
/* The answer the root sends after the join record: header | body | MAC. */
static void build_answer(void)
{
    uint32_t status = get32(s.hdr + 4), count = get32(s.hdr + 8), msglen = get32(s.hdr + 12);
    size_t want = status == 0 ? (size_t)count * PEER_WIRE : msglen, blen = s.body_len;
    uint8_t m[9 + 16 + 16 + 32];

    if ((s.flags & 1) && want <= BODY_MAX)
        blen = want; /* the length the rank will read: pad or cut the input's body to it */
    s.out = calloc(1, 16 + blen + COLL_MAC_BYTES);
    if (!s.out)
        return;
    memcpy(s.out, s.hdr, 16);
    memcpy(s.out + 16, s.body, blen < s.body_len ? blen : s.body_len);
    if ((s.flags & 2) && status == 0 && s.rec_len == JOIN_REC &&
        (size_t)(s.rank + 1) * PEER_WIRE <= blen)
        memcpy(s.out + 16 + (size_t)s.rank * PEER_WIRE, s.rec + 40, PEER_WIRE);
    s.out_len = 16 + blen;
    if (s.flags & 1) {
        memcpy(m, "coll-root", 9);
        memcpy(m + 9, s.rec + 24, 16); /* the rank's nonce, from its join record */
        memcpy(m + 25, s.hdr, 16);
        coll__sha256(s.out + 16, blen, m + 41);
        coll__hmac_sha256(secret, COLL_SECRET_BYTES, m, sizeof(m), s.out + s.out_len);
        s.out_len += COLL_MAC_BYTES;
    }
}

static int fake_socket(int d, int t, int p)
{
    (void)d, (void)t, (void)p;
    return open("/dev/null", O_RDWR | O_CLOEXEC);
}
static int fake_connect(int fd, const struct sockaddr *a, socklen_t l)
{
    (void)fd, (void)a, (void)l;
    return 0;
}
static int fake_setsockopt(int fd, int lv, int nm, const void *v, socklen_t l)
{
    (void)fd, (void)lv, (void)nm, (void)v, (void)l;
    return 0;
}
static int fake_getsockopt(int fd, int lv, int nm, void *v, socklen_t *l)
{
    (void)fd, (void)lv, (void)nm;
    memset(v, 0, *l);
    return 0;
}
static int fake_poll(struct pollfd *f, nfds_t n, int t)
{
    (void)t;
    for (nfds_t i = 0; i < n; i++)
        f[i].revents = f[i].events;
    return (int)n;
}
static ssize_t fake_send(int fd, const void *b, size_t n, int f)
{
    size_t k = n < JOIN_REC - s.rec_len ? n : JOIN_REC - s.rec_len;

    (void)fd, (void)f;
    memcpy(s.rec + s.rec_len, b, k);
    s.rec_len += k;
    if (s.rec_len == JOIN_REC && !s.out)
        build_answer();
    return (ssize_t)n;
}
static ssize_t fake_recv(int fd, void *b, size_t n, int f)
{
    (void)fd, (void)f;
    if (s.out_pos < 16) { /* the root's nonce comes first */
        size_t k = n < 16 - s.out_pos ? n : 16 - s.out_pos;
        memcpy(b, s.nonce + s.out_pos, k);
        s.out_pos += k;
        return (ssize_t)k;
    }
    if (!s.out || s.out_pos - 16 >= s.out_len)
        return 0; /* the root closed */
    size_t left = s.out_len - (s.out_pos - 16), k = n < left ? n : left;
    memcpy(b, s.out + (s.out_pos - 16), k);
    s.out_pos += k;
    return (ssize_t)k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct coll_comm comm;
    static bool once;
    struct coll_id_info id;
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(29500)};
    coll_status_t st;

    if (size < 3 + 16 + 16)
        return 0;
    if (!once) {
        once = true;
        pthread_mutex_init(&comm.errlock, NULL);
        pthread_mutex_init(&comm.lock, NULL);
        coll__host_identity(&comm.self);
        sin.sin_addr.s_addr = htonl(0x7f000001);
        memcpy(comm.self.addr, &sin, sizeof(sin));
        comm.self.addr_len = sizeof(sin);
        coll__sys.socket = fake_socket;
        coll__sys.connect = fake_connect;
        coll__sys.setsockopt = fake_setsockopt;
        coll__sys.getsockopt = fake_getsockopt;
        coll__sys.poll = fake_poll;
        coll__sys.send = fake_send;
        coll__sys.recv = fake_recv;
    }
    memset(&s, 0, sizeof(s));
    s.flags = data[0];
    comm.nranks = data[1] % 16 + 1;
    comm.rank = s.rank = data[2] % comm.nranks;
    comm.self.rank = comm.rank;
    comm.cfg.bootstrap_timeout_ms = 1000;
    comm.peers = NULL;
    s.nonce = data + 3;
    s.hdr = data + 19;
    s.body = data + 35;
    s.body_len = size - 35;

    memset(&id, 0, sizeof(id));
    memcpy(id.secret, secret, COLL_SECRET_BYTES);
    id.comm_id = 0x0123456789abcdefull;
    sin.sin_addr.s_addr = htonl(0x7f000001);
    memcpy(id.addr, &sin, sizeof(sin));
    id.addr_len = sizeof(sin);

    st = coll__bootstrap_join(&comm, &id);
    /* a signed table of one rank holding its own record: the join must accept it (so the
     * harness is known to reach the end of the path) */
    if ((s.flags & 3) == 3 && comm.nranks == 1 && get32(s.hdr) == 0x4e414243u &&
        get32(s.hdr + 4) == 0 && get32(s.hdr + 8) == 1 && get32(s.hdr + 12) == 0 &&
        st != COLL_SUCCESS)
        abort();
    if (st == COLL_SUCCESS) {
        if (!comm.peers)
            abort();
        for (int i = 0; i < comm.nranks; i++)
            if (comm.peers[i].rank != i || !memchr(comm.peers[i].hostname, '\0',
                                                   COLL_HOSTNAME_MAX) ||
                comm.peers[i].addr_len > COLL_ADDR_MAX)
                abort();
    }
    free(comm.peers);
    comm.peers = NULL;
    free(s.out);
    return 0;
}
