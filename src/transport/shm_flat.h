/*
 * shm_flat.h - the shared-memory fast path for small blocking collectives ("flat"): on a
 * comm whose ranks all share one host and reach each other over shm, all-reduce,
 * broadcast, reduce, all-gather and barrier of at most COLL_SHM_FLAT_BYTES per rank go
 * through one comm-wide segment instead of schedules, the engine and per-pair rings.
 * src/transport/shm_flat.c has the layout and the protocol; docs/transports.md the why.
 */
#ifndef COLL_SHM_FLAT_H
#define COLL_SHM_FLAT_H

#include "../algo/schedule.h"
#include "../core/internal.h"

struct coll_flat;

/* The collectives the fast path runs (bits of 1u << enum coll_coll). */
#define COLL_FLAT_COLLS                                                                    \
    ((1u << COLL_COLL_ALLREDUCE) | (1u << COLL_COLL_BROADCAST) | (1u << COLL_COLL_REDUCE) |   \
     (1u << COLL_COLL_ALLGATHER) | (1u << COLL_COLL_BARRIER))

/* A checked blocking call outside a group (src/core/api.c run()): run it on the fast path
 * when it is one for it. Returns false when it is not (nothing done: take the general path),
 * true when the fast path ran it, with its status in *st_p. Arguments are as the public
 * call got them (sendbuf/recvbuf NULL where the rank does not use them). */
COLL_INTERNAL bool coll__flat_run(struct coll_comm *comm, enum coll_coll coll,
                                  const void *sendbuf, void *recvbuf, size_t count,
                                  coll_dtype_t dtype, coll_op_t op, int root,
                                  coll_status_t *st_p);

/* Would a blocking call of coll of `bytes` per rank (all-gather: each rank's part), on host
 * buffers and outside a group, take the fast path on this comm? Decides the comm's
 * eligibility the first time (the same answer on every rank; nothing is exchanged). The
 * model does not price the fast path, so collbench asks this to report what a call runs. */
COLL_INTERNAL bool coll__flat_takes(struct coll_comm *comm, enum coll_coll coll, size_t bytes);

/* From shm.c's shutdown (comm failed or aborted; engine lock held): tell every rank of the
 * segment, and wake those that sleep in it. */
COLL_INTERNAL void coll__flat_shutdown(struct coll_flat *f);
/* From shm.c's fini: leave the segment (peers that still wait on us see it) and free. */
COLL_INTERNAL void coll__flat_fini(struct coll_flat *f);

/* Tests: calls this rank ran on the fast path (0 when it never started). */
COLL_INTERNAL uint64_t coll__flat_calls(const struct coll_comm *comm);
/* Tests: play a hostile peer that scribbles over its own part of the segment (or the
 * segment's header) as COLL_FLAT_CORRUPT_* says. */
enum { COLL_FLAT_CORRUPT_JUNK = 1, COLL_FLAT_CORRUPT_COUNT, COLL_FLAT_CORRUPT_ABORT };
COLL_INTERNAL void coll__flat_test_corrupt(struct coll_comm *comm, int how);

/* select.c: may the fast path run collective c under COLL_ALGO (a name other than "flat"
 * that can run c turns it off), and does COLL_ALGO force it ("flat")? */
COLL_INTERNAL bool coll__select_flat(const struct coll_comm *comm, enum coll_coll c,
                                     bool *forced_p);

/* shm.c's side: the doorbell carries the segment from rank 0 to the others (SCM_RIGHTS). */
/* Send fd (or, with fd < 0, "no segment: the fast path is off") to peer's doorbell; 0 or an
 * errno (EAGAIN: its queue is full, try again). */
COLL_INTERNAL int coll__shm_flat_send(void *shm_ctx, int peer, int fd);
/* Drain the doorbell (engine lock held) and report rank 0's verdict: 0 not yet, 1 with the
 * segment's fd in *fd_p (ownership passes to the caller), -1 no segment. */
COLL_INTERNAL int coll__shm_flat_take(void *shm_ctx, int *fd_p);
/* The doorbell's fd, for poll() while waiting for the verdict (-1 once shut). */
COLL_INTERNAL int coll__shm_flat_bell_fd(void *shm_ctx);
/* What shm.c knows of peer while this rank waits for it on the fast path (engine not
 * running): STRAY, unread general-path messages from it in our ring (it took the general
 * path for a call this rank runs here); GONE, its rings or its doorbell are closed (it
 * failed or left, maybe before it ever mapped the segment). */
enum { COLL_SHM_PEER_OK = 0, COLL_SHM_PEER_STRAY, COLL_SHM_PEER_GONE };
COLL_INTERNAL int coll__shm_flat_peer(void *shm_ctx, int peer);
/* Hand the segment's state to the shm context, which ends it in its shutdown and fini. */
COLL_INTERNAL void coll__shm_flat_attach(void *shm_ctx, struct coll_flat *f);

#endif /* COLL_SHM_FLAT_H */
