/*
 * fuzz_tcp_frame.c - libFuzzer harness: the TCP transport's acceptor handshake and frame
 * parsing, the real code over a real loopback socket. Each input gets a fresh rank 1 of a
 * 2-rank comm (its own epoll set, listener and TCP context); the harness plays rank 0:
 * dials, reads the nonce, answers, and sends frames, while it runs the acceptor's callbacks
 * itself (no threads, so runs are reproducible).
 *
 * Input: flags u8 | recv_len u16 | handshake answer[56] | stream...
 *   flags & 1: replace the answer with a correct one (the harness knows the secret), so
 *              the fuzzer reaches the frame parser
 *   flags & 2: prefix the stream with a correct frame header for the posted receive, so the
 *              payload path (inbox copy, read-ahead into the next header) is reached
 * A receive of recv_len % 8192 bytes is posted once the link is up. Whatever the bytes, the
 * receive must end in success, an error, or still be pending, and never be written beyond
 * its length (ASan watches the buffer's bounds); with flags 3 and the whole payload sent, it
 * must succeed (so the harness is known to reach the end of the frame path).
 */
#include "core/bootstrap.h"
#include "base/sys.h"
#include "transport/transport.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HS_BYTES 56
#define HDR_BYTES (40 + COLL_SIG_BYTES) /* tcp.c's: the header, then the call's signature */
static const uint8_t secret[COLL_SECRET_BYTES] = "tcp-fuzz-secret";
static const uint64_t comm_id = 0x7cf0220000000001ull;
#define SLOT coll__transport_index(&coll__tcp_transport)

/* put16/32/64: src/base/wire.h (through transport.h) */

/* The engine's loop, one round without sleeping: run the ready callbacks. */
static int drive(struct coll_comm *c, int ms)
{
    struct epoll_event evs[16];
    int n = epoll_wait(c->epfd, evs, 16, ms);

    for (int i = 0; i < n; i++) {
        struct coll_pollent *pe = evs[i].data.ptr;
        pe->cb(pe, evs[i].events);
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct coll_comm c;
    static struct coll_peer_info peers[2];
    struct coll_chan *chans[2] = {NULL, NULL};
    struct coll_xfer x;
    uint8_t nonce[16], hs[HS_BYTES], hdr[HDR_BYTES], *buf = NULL;
    struct sockaddr_storage ss;
    size_t rlen, got = 0;
    int fd = -1, flags;

    if (size < 3 + HS_BYTES)
        return 0;
    flags = data[0];
    rlen = (size_t)(data[1] | data[2] << 8) % 8192;

    memset(&c, 0, sizeof(c));
    pthread_mutex_init(&c.lock, NULL);
    pthread_mutex_init(&c.errlock, NULL);
    pthread_cond_init(&c.cond, NULL);
    c.wakefd = -1;
    c.rank = 1;
    c.nranks = 2;
    c.cfg.timeout_ms = 2000;
    c.cfg.nsocks = 1;
    snprintf(c.cfg.socket_ifname, sizeof(c.cfg.socket_ifname), "lo");
    c.epfd = epoll_create1(EPOLL_CLOEXEC);
    c.self.rank = 1;
    coll__host_identity(&c.self);
    coll__comm_net_init(&c);
    if (c.epfd < 0 || coll__tcp_transport.init(&c.net, &c.tp_ctx[SLOT]) != COLL_SUCCESS)
        abort();
    peers[0] = c.self;
    peers[0].rank = 0;
    peers[1] = c.self;
    c.peers = peers;
    c.chans = chans;
    c.comm_id = comm_id;
    memcpy(c.secret, secret, COLL_SECRET_BYTES);
    c.net.peers = peers; /* as the bootstrap would */
    c.net.comm_id = comm_id;

    memset(&ss, 0, sizeof(ss));
    memcpy(&ss, c.self.addr, c.self.addr_len);
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    /* the machine refused a loopback connection (ports, descriptors): not a finding about
     * the code under test, so this input is skipped rather than reported */
    if (fd < 0 || connect(fd, (struct sockaddr *)&ss, c.self.addr_len) < 0)
        goto out;
    /* as coll's own sockets: without it Nagle holds the payload behind the header until the
     * header's ACK, which the acceptor's acceptance word delays, past the rounds below */
    {
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    /* accept and send the nonce */
    for (int i = 0; i < 200 && got < sizeof(nonce); i++) {
        ssize_t n;
        drive(&c, i ? 1 : 0);
        n = recv(fd, nonce + got, sizeof(nonce) - got, MSG_DONTWAIT);
        if (n > 0)
            got += (size_t)n;
    }
    if (got < sizeof(nonce))
        abort(); /* the listener never answered a plain connection */

    memcpy(hs, data + 3, HS_BYTES);
    if (flags & 1) {
        uint8_t m[9 + 16 + 20];
        put32(hs, 0x32534843u); /* "CHS2" */
        put64(hs + 4, comm_id);
        put32(hs + 12, 0);
        put32(hs + 16, 1);
        put16(hs + 20, 0);
        put16(hs + 22, 1);
        memcpy(m, "coll-data", 9);
        memcpy(m + 9, nonce, 16);
        memcpy(m + 25, hs + 4, 20);
        coll__hmac_sha256(secret, COLL_SECRET_BYTES, m, sizeof(m), hs + 24);
    }
    if (send(fd, hs, HS_BYTES, MSG_NOSIGNAL) != HS_BYTES)
        goto out;
    /* the answer is in the kernel already: a round or two brings the link up or refuses */
    for (int i = 0; i < 4 && !chans[0]; i++) {
        drive(&c, i < 2 ? 0 : 1);
        if (coll__tcp_transport.connect(c.tp_ctx[SLOT], 0, &chans[0]) != COLL_SUCCESS)
            break;
    }
    if (!chans[0]) {
        if (flags & 1)
            abort(); /* a correct handshake must bring the link up */
        goto out;
    }
    /* as a connector does, take the acceptor's 4-byte acceptance before sending frames */
    {
        uint8_t ok[4];
        size_t okn = 0;
        for (int i = 0; i < 200 && okn < sizeof(ok); i++) {
            ssize_t r = recv(fd, ok + okn, sizeof(ok) - okn, MSG_DONTWAIT);
            if (r > 0)
                okn += (size_t)r;
            else
                drive(&c, 1);
        }
        if (okn < sizeof(ok))
            abort(); /* the link is up on coll's side: its acceptance was sent */
    }
    buf = malloc(rlen ? rlen : 1);
    memset(&x, 0, sizeof(x));
    x.buf = buf;
    x.len = rlen;
    x.peer = 0;
    x.seq = 5;
    x.tag = 3;
    atomic_store(&x.status, COLL_IN_PROGRESS);
    if (coll__tcp_transport.post_recv(chans[0], &x) != COLL_SUCCESS)
        goto out;
    if (flags & 2) {
        put32(hdr, 0x31464443u); /* "CDF1" */
        put16(hdr + 4, 1);
        put16(hdr + 6, 0);
        put32(hdr + 8, 3);
        put32(hdr + 12, 0);
        put64(hdr + 16, comm_id);
        put64(hdr + 24, 5);
        put64(hdr + 32, rlen);
        memset(hdr + 40, 0, HDR_BYTES - 40); /* no signature: the receive has none either */
        (void)!send(fd, hdr, HDR_BYTES, MSG_NOSIGNAL);
    }
    if (size > 3 + HS_BYTES)
        (void)!send(fd, data + 3 + HS_BYTES, size - 3 - HS_BYTES, MSG_NOSIGNAL);
    for (int i = 0; i < 50 && atomic_load(&x.status) == COLL_IN_PROGRESS; i++)
        if (drive(&c, 0) == 0 && i > 5)
            break;
    {
        int st = atomic_load(&x.status);
        if (st == COLL_SUCCESS && !(flags & 2) && size - 3 - HS_BYTES < HDR_BYTES)
            abort(); /* completed without a header */
        if ((flags & 3) == 3 && size - 3 - HS_BYTES >= rlen && st != COLL_SUCCESS)
            abort(); /* a right handshake, header and payload: the receive must complete */
    }
out:
    if (fd >= 0)
        close(fd);
    for (int i = 0; i < 5; i++)
        drive(&c, 0);
    coll__tcp_transport.fini(c.tp_ctx[SLOT]);
    close(c.epfd);
    free(buf);
    return 0;
}
