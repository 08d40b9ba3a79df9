/*
 * flat.h - the flat path (src/path/flat.c): on a comm whose ranks all share one host and
 * reach each other over shm, all-reduce, broadcast, reduce, all-gather and barrier of at
 * most COLL_SHM_FLAT_BYTES per rank (all-reduce, broadcast and reduce of any size, in
 * pieces) go through one comm-wide segment instead of schedules and per-pair rings. It is
 * one of the paths of path.h (coll__path_flat); this header has what else knows of it.
 * flat.c has the layout and the protocol; docs/transports.md the why.
 */
#ifndef COLL_PATH_FLAT_H
#define COLL_PATH_FLAT_H

#include "../algo/schedule.h"

struct coll_flat;

/* The collectives the fast path runs (bits of 1u << enum coll_coll). */
#define COLL_FLAT_COLLS                                                                    \
    ((1u << COLL_COLL_ALLREDUCE) | (1u << COLL_COLL_BROADCAST) | (1u << COLL_COLL_REDUCE) |   \
     (1u << COLL_COLL_ALLGATHER) | (1u << COLL_COLL_BARRIER))

/* Would a call of coll of `bytes` per rank (all-gather: each rank's part), on host buffers,
 * take the fast path on this comm, as far as this rank can tell without its segment? (The
 * chooser, coll__choose, gives the answer every rank agrees on.) */
COLL_INTERNAL bool coll__flat_takes(struct coll_comm *comm, enum coll_coll coll, size_t bytes);

/* At comm init (coll__path_comm_init): decide, the same on every rank, and set the
 * segment up where the comm can use one. */
COLL_INTERNAL coll_status_t coll__flat_comm_init(struct coll_comm *comm);

/* At coll_comm_destroy: settle what this rank's last calls left (a broadcast root's deferred
 * comparison), wait until every peer has finished them, and report a failure a peer found
 * meanwhile. */
COLL_INTERNAL coll_status_t coll__flat_comm_end(struct coll_comm *comm);

/* The shm transport's shutdown (comm failed or aborted) tells every rank of the segment and
 * wakes those that sleep in it; its fini leaves the segment and frees it. */
COLL_INTERNAL void coll__flat_shutdown(struct coll_flat *f);
COLL_INTERNAL void coll__flat_fini(struct coll_flat *f);

/* select.c: may the fast path run collective c under COLL_ALGO (a name other than "flat"
 * that can run c turns it off), and does COLL_ALGO force it ("flat")? */
COLL_INTERNAL bool coll__select_flat(const struct coll_comm *comm, enum coll_coll c,
                                     bool *forced_p);

#endif /* COLL_PATH_FLAT_H */
