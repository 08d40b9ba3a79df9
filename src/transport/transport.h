/*
 * transport.h - the one vtable every transport implements (tcp.c, shm.c, ib.c), the
 * transfer object the executor posts through it, and struct coll_net: all a transport
 * knows of the communicator it serves.
 *
 * A transport stands on the base alone. What it needs of its comm (ranks, ids, the secret,
 * the settings, the peers' records, the epoll set) and the few things it asks of the core
 * (fail the comm, check a message against its receive, read the first failure's text) come
 * in the struct coll_net its init gets; the core fills it (src/core/net.c) and keeps it in
 * the comm. The comm itself is an opaque handle here, passed on to coll__error and to the
 * net's ops.
 *
 * Threading: every entry point except probe, init and fini is called with the engine lock
 * held, by whichever thread drives the engine (a waiting caller or the comm's progress
 * thread). Transports register their file descriptors in net->epfd with a struct
 * coll_pollent whose callback the engine calls (lock held) when epoll reports events.
 * Nothing blocks: a transport that cannot go on returns and waits for its fd to become
 * ready.
 *
 * Failure: a transport that detects a broken link, a protocol violation or a stranger it
 * cannot ignore records a message with coll__error(net->comm, st, ...) naming the peer, then
 * calls coll__net_fail(net, st) (or both at once: coll__transport_fail). It never crashes
 * and never trusts a length from the wire without checking it against the posted transfer.
 */
#ifndef COLL_TRANSPORT_H
#define COLL_TRANSPORT_H

#include "../base/base.h"
#include "../base/wire.h"

#include <stdarg.h>

/* Something registered in the epoll set. The engine calls cb with the epoll events; the
 * callback runs with the engine lock held and may post, complete or fail transfers. */
struct coll_pollent {
    void (*cb)(struct coll_pollent *pe, uint32_t events);
    void *arg;
};

/* One message. The executor owns the memory of the xfer and of buf until status leaves
 * COLL_IN_PROGRESS. The receiver checks (seq, tag, len) of each arriving message against the
 * head of its posted receives from that peer: a mismatch is COLL_REMOTE_ERROR ("ranks
 * called different collectives or counts"). */
struct coll_xfer {
    void *buf;
    size_t len;                 /* bytes; a receive expects exactly len bytes */
    int32_t peer;
    uint32_t tag;               /* message index within the op for this peer/direction */
    uint64_t seq;               /* the op's sequence number on the comm */
    const struct coll_sig *sig; /* the call's signature: senders put it on the wire */
    _Atomic int status;         /* COLL_IN_PROGRESS, then COLL_SUCCESS or an error */
    /* transport-private */
    size_t off;                 /* bytes moved so far (header included as the transport likes) */
    struct coll_xfer *next;     /* queue link */
};

/* Every channel starts with this header; transports embed it as their first member. */
struct coll_chan {
    const struct coll_transport *tp;
    struct coll_net *net;
    int32_t peer;
};

/* What a transport asks of the core, through its net. comm is net->comm. */
struct coll_net_ops {
    /* Fail the comm with st (first failure wins; its message stays), which shuts every
     * transport's links down. Engine lock held. */
    void (*fail)(struct coll_comm *comm, coll_status_t st);
    /* The one check of a message header against the receive posted for it, which every
     * transport runs: the wire's op number (collective number | a 16-bit hash << 48, or the
     * point-to-point mark), message index and length, and the sender's signature (NULL
     * where the transport does not carry it). COLL_SUCCESS when they match, else
     * COLL_REMOTE_ERROR with the message in buf (src/core/agree.c). */
    coll_status_t (*agree_xfer)(const struct coll_comm *comm, int peer,
                                const struct coll_xfer *x, uint64_t seq, uint32_t tag,
                                uint64_t len, const struct coll_sig *theirs, char *buf,
                                size_t n);
    /* A peer's probe (stalled, below): false when this rank's own call of that number
     * agrees, or is not made yet; true, with both sides named in why, when it differs. */
    bool (*agree_probe)(const struct coll_comm *comm, int peer, uint64_t pcseq,
                        const struct coll_sig *theirs, char *why, size_t n);
    /* The comm's error text (its first failure's, once failed), into buf (any thread; the
     * comm's own lock on the text is taken inside). */
    void (*error_text)(struct coll_comm *comm, char *buf, size_t n);
};

/* A comm as its transports see it. The core fills it before the first transport's init
 * (peers after the bootstrap) and it does not move while the comm lives. */
struct coll_net {
    int32_t rank, nranks;
    uint64_t comm_id;                  /* transports name their resources after it */
    const uint8_t *secret;             /* [COLL_SECRET_BYTES], the unique id's */
    const struct coll_config *cfg;
    struct coll_peer_info *self;       /* this rank's record: init fills its addresses */
    const struct coll_peer_info *peers; /* [nranks] from the bootstrap; NULL before it */
    int epfd;                          /* the engine's epoll set (struct coll_pollent) */
    const _Atomic int *failed;         /* coll_status_t, COLL_SUCCESS while healthy */
    struct coll_comm *comm;            /* opaque: for coll__error and the ops */
    const struct coll_net_ops *ops;
};

/* Fail the comm (ops->fail). */
static inline void coll__net_fail(struct coll_net *net, coll_status_t st)
{
    net->ops->fail(net->comm, st);
}

struct coll_transport {
    const char *name;           /* "tcp", "shm", "ib", "cudaipc" */
    /* Can this transport reach peer from this rank? After the bootstrap (net->peers
     * known); ctx is what init made, NULL where it did not start. */
    bool (*probe)(void *ctx, int peer);
    /* Before the bootstrap: set up (e.g. the listening socket) and fill what peers need to
     * reach this rank into net->self (addr, addr_len, tp_addr). The transport keeps net. */
    coll_status_t (*init)(struct coll_net *net, void **ctx_p);
    /* Non-blocking: *chan_p stays NULL until the channel to peer is up; call again. */
    coll_status_t (*connect)(void *ctx, int peer, struct coll_chan **chan_p);
    /* Queue a message; may start moving it at once. x->status is set to COLL_IN_PROGRESS
     * by the caller and to the result by the transport. */
    coll_status_t (*post_send)(struct coll_chan *ch, struct coll_xfer *x);
    coll_status_t (*post_recv)(struct coll_chan *ch, struct coll_xfer *x);
    /* Its peers' messages arrive on its fds alone (TCP): a waiting engine looks at the
     * epoll set on every spin, not now and then as for polled transports (shm, verbs),
     * whose progress hook finds their messages. Having a progress hook says nothing of it. */
    bool fds_only;
    /* Non-blocking poll for work that has no fd (may be NULL). Returns true if anything
     * moved. */
    bool (*progress)(void *ctx);
    /* Before the engine sleeps in epoll_wait (may be NULL): make sure whatever this
     * transport waits for will wake the epoll set (e.g. raise a flag peers check), and look
     * once more; true if work is ready after all (the engine then does not sleep). disarm
     * is called after every sleep that arm allowed. */
    bool (*arm)(void *ctx);
    void (*disarm)(void *ctx);
    /* May be NULL. This rank's collective cseq (signature sig) has made no progress while it
     * waits on ch's peer: tell the peer, which compares the call with its own of that
     * number (its net's ops->agree_probe) and fails with both sides named if they differ. Best
     * effort: a transport that cannot send now without disturbing a message skips it. */
    void (*stalled)(struct coll_chan *ch, uint64_t cseq, const struct coll_sig *sig);
    /* Close every channel at once (comm failure or abort): peers see the connection end. */
    void (*shutdown)(void *ctx);
    void (*fini)(void *ctx);    /* closes channels and frees everything; ctx may be NULL */
};

COLL_INTERNAL extern const struct coll_transport coll__tcp_transport;
COLL_INTERNAL extern const struct coll_transport coll__ib_transport; /* COLL_HAVE_IBVERBS */
COLL_INTERNAL extern const struct coll_transport coll__shm_transport;
/* Test hook: datagrams the shm doorbell refused (ctx is the shm ctx). */
COLL_INTERNAL uint64_t coll__shm_refused(const void *ctx);
/* Test hook: overwrite the last slot sent to peer as a faulty or hostile peer would. */
enum { COLL_SHM_CORRUPT_JUNK = 1, COLL_SHM_CORRUPT_HEAD, COLL_SHM_CORRUPT_FRAG,
       COLL_SHM_CORRUPT_RDV };
COLL_INTERNAL void coll__shm_test_corrupt(void *ctx, int peer, int how);
/* Test hook: when set, called (engine lock held) where a rank with transfers pending on its
 * channel to peer has just found nothing to move, before it asks whether the peer is gone:
 * a test holds the rank there while the peer finishes its call and exits. */
COLL_INTERNAL extern void (*coll__shm_test_hold)(int peer);

/* Registry in preference order, NULL-terminated (src/transport/transport.c). */
COLL_INTERNAL extern const struct coll_transport *const coll__transports[];
COLL_INTERNAL const struct coll_transport *coll__transport_find(const char *name);
/* Position of tp in the registry: the slot of its context in the comm's tp_ctx[] and of its
 * address in a peer record's tp_addr[]. */
COLL_INTERNAL int coll__transport_index(const struct coll_transport *tp);

/* ---- what every transport does the same way when a link fails ------------------------- */

/* The peer's host name for messages ("?" before the peer table is known). */
COLL_INTERNAL const char *coll__peer_hostname(const struct coll_net *net, int peer);
/* The status a failed comm reports to a new transfer: its first failure's, or
 * COLL_REMOTE_ERROR if it has not failed (yet): the caller saw a link break. */
COLL_INTERNAL coll_status_t coll__comm_failed_status(const struct coll_net *net);
/* A link failed: record the message as the comm's error if it is the first failure, fail
 * the comm (which shuts every transport's links down), and return the status now in force,
 * which is the first failure's. */
COLL_INTERNAL coll_status_t coll__transport_fail(struct coll_net *net, coll_status_t st,
                                                 const char *fmt, ...) COLL_PRINTF(3, 4);
COLL_INTERNAL coll_status_t coll__transport_failv(struct coll_net *net, coll_status_t st,
                                                  const char *fmt, va_list ap)
    COLL_PRINTF(3, 0);

#endif /* COLL_TRANSPORT_H */
