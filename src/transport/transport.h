/*
 * transport.h - the one vtable every transport implements (tcp.c, shm.c, ib.c), and the
 * transfer object the executor posts through it.
 *
 * Threading: every entry point except probe, init and fini is called with comm->lock held,
 * by whichever thread drives the engine (a waiting caller or the comm's progress thread).
 * Transports register their file descriptors in comm->epfd with a struct coll_pollent whose
 * callback the engine calls (lock held) when epoll reports events. Nothing blocks: a
 * transport that cannot go on returns and waits for its fd to become ready.
 *
 * Failure: a transport that detects a broken link, a protocol violation or a stranger it
 * cannot ignore records a message with coll__error(comm, st, ...) naming the peer, then calls
 * coll__comm_fail(comm, st). It never crashes and never trusts a length from the wire
 * without checking it against the posted transfer.
 */
#ifndef COLL_TRANSPORT_H
#define COLL_TRANSPORT_H

#include "../core/internal.h"
#include "../base/wire.h"

#include <stdarg.h>

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
    struct coll_comm *comm;
    int32_t peer;
};

/* The one check of a message header against the receive posted for it, defined above the
 * transports (src/core/agree.c), which every transport runs: the wire's op number (collective number | a 16-bit hash << 48, or the point-to-point mark),
 * message index and length, and the sender's signature (NULL where the transport does not
 * carry it). COLL_SUCCESS when they match, else COLL_REMOTE_ERROR with the message in buf. */
COLL_INTERNAL coll_status_t coll__agree_xfer(const struct coll_comm *comm, int peer,
                                             const struct coll_xfer *x, uint64_t seq,
                                             uint32_t tag, uint64_t len,
                                             const struct coll_sig *theirs, char *buf,
                                             size_t n);

/* A peer's probe (above): false when this rank's own call of that number agrees, or is not
 * made yet; true, with both sides named in why, when it differs. src/core/agree.c. */
COLL_INTERNAL bool coll__agree_probe(const struct coll_comm *comm, int peer, uint64_t pcseq,
                                     const struct coll_sig *theirs, char *why, size_t n);

struct coll_transport {
    const char *name;           /* "tcp", "shm", "ib", "cudaipc" */
    /* Can this transport reach peer from this rank? (after bootstrap: comm->peers known) */
    bool (*probe)(struct coll_comm *comm, int peer);
    /* Before the bootstrap: set up (e.g. the listening socket) and fill what peers need to
     * reach this rank into comm->self (addr, addr_len). */
    coll_status_t (*init)(struct coll_comm *comm, void **ctx_p);
    /* Non-blocking: *chan_p stays NULL until the channel to peer is up; call again. */
    coll_status_t (*connect)(void *ctx, int peer, struct coll_chan **chan_p);
    /* Queue a message; may start moving it at once. x->status is set to COLL_IN_PROGRESS
     * by the caller and to the result by the transport. */
    coll_status_t (*post_send)(struct coll_chan *ch, struct coll_xfer *x);
    coll_status_t (*post_recv)(struct coll_chan *ch, struct coll_xfer *x);
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
     * number (coll__agree_probe) and fails with both sides named if they differ. Best
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

/* Registry in preference order, NULL-terminated (src/transport/transport.c). */
COLL_INTERNAL extern const struct coll_transport *const coll__transports[];
COLL_INTERNAL const struct coll_transport *coll__transport_find(const char *name);
/* Position of tp in the registry: the slot of its context in comm->tp_ctx[]. */
COLL_INTERNAL int coll__transport_index(const struct coll_transport *tp);

/* ---- what every transport does the same way when a link fails ------------------------- */

/* The peer's host name for messages ("?" before the peer table is known). */
COLL_INTERNAL const char *coll__peer_hostname(const struct coll_comm *comm, int peer);
/* The status a failed comm reports to a new transfer: its first failure's, or
 * COLL_REMOTE_ERROR if it has not failed (yet): the caller saw a link break. */
COLL_INTERNAL coll_status_t coll__comm_failed_status(const struct coll_comm *comm);
/* A link failed: record the message as the comm's error if it is the first failure, fail
 * the comm (which shuts every transport's links down), and return the status now in force,
 * which is the first failure's. */
COLL_INTERNAL coll_status_t coll__transport_fail(struct coll_comm *comm, coll_status_t st,
                                                 const char *fmt, ...) COLL_PRINTF(3, 4);
COLL_INTERNAL coll_status_t coll__transport_failv(struct coll_comm *comm, coll_status_t st,
                                                  const char *fmt, va_list ap)
    COLL_PRINTF(3, 0);

#endif /* COLL_TRANSPORT_H */
