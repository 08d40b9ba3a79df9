/*
 * shm.h - what the shared-memory transport offers the layer above besides its vtable: its
 * doorbell carries a comm-wide segment (src/path/flat.c, the fast path) from rank 0 to the
 * others, and it tells whether a peer is still there while nobody runs the engine.
 *
 * The transport knows nothing of what the segment holds: its owner hands over two
 * callbacks, which the transport calls from its own shutdown (comm failed or aborted:
 * tell the segment's other ranks) and fini (leave the segment and free it).
 */
#ifndef COLL_TRANSPORT_SHM_H
#define COLL_TRANSPORT_SHM_H

#include "transport.h"

/* Send fd (or, with fd < 0, "no segment: the fast path is off") to peer's doorbell; 0 or an
 * errno (EAGAIN: its queue is full, try again). */
COLL_INTERNAL int coll__shm_flat_send(void *shm_ctx, int peer, int fd);
/* Drain the doorbell (engine lock held) and report rank 0's verdict: 0 not yet, 1 with the
 * segment's fd in *fd_p (ownership passes to the caller), -1 no segment. */
COLL_INTERNAL int coll__shm_flat_take(void *shm_ctx, int *fd_p);
/* The doorbell's fd, for poll() while waiting for the verdict (-1 once shut). */
COLL_INTERNAL int coll__shm_flat_bell_fd(void *shm_ctx);
/* What shm.c knows of peer while this rank waits for it outside the engine: STRAY, unread
 * general-path messages from it in our ring (it took the general path for a call this rank
 * runs elsewhere); GONE, its rings or its doorbell are closed (it failed or left, maybe
 * before it ever mapped the segment). */
enum { COLL_SHM_PEER_OK = 0, COLL_SHM_PEER_STRAY, COLL_SHM_PEER_GONE };
COLL_INTERNAL int coll__shm_flat_peer(void *shm_ctx, int peer);

/* A shared segment, as a ring or the fast path's is: a memfd of size bytes named name (for
 * /proc/PID/maps), its pages reserved, so that a full tmpfs is an error here and never a
 * SIGBUS in the middle of a collective. The fd goes to the host's other ranks over the
 * doorbell (SCM_RIGHTS); nothing is named in /dev/shm, so a killed rank leaks nothing.
 * Returns the fd, or -1 with errno. */
COLL_INTERNAL int coll__shm_segment_new(const char *name, size_t size);
/* The bytes a segment's fd holds, -1 with errno: a segment a peer handed over is checked
 * against the size it must have before any page of it is touched. */
COLL_INTERNAL int64_t coll__shm_segment_size(int fd);
/* Map size bytes of a segment's fd, shared and writable; NULL with errno on failure. */
COLL_INTERNAL void *coll__shm_segment_map(int fd, size_t size);
COLL_INTERNAL void coll__shm_segment_unmap(void *base, size_t size);

/* The segment's owner: shutdown(arg) from the transport's shutdown, fini(arg) from its fini. */
struct coll_shm_segment_owner {
    void (*shutdown)(void *arg);
    void (*fini)(void *arg);
    void *arg;
};
COLL_INTERNAL void coll__shm_flat_attach(void *shm_ctx, const struct coll_shm_segment_owner *o);

#endif /* COLL_TRANSPORT_SHM_H */
