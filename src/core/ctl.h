/*
 * ctl.h - the control plane: every comm of more than one rank keeps a binomial tree of
 * authenticated TCP connections over its ranks (rank r's parent is r with its lowest set bit
 * cleared), made at comm creation, whatever data connections exist later. It carries no
 * frame per call. It carries:
 *
 *   FAIL   a rank's first failure (its own error, a disagreement it found, a timeout, an
 *          abort), flooded over the tree: each rank forwards the first failure it knows to
 *          its other neighbours, so it crosses the comm in at most 2 log2(n) hops;
 *   EOF    a neighbour whose connection ends without a BYE died: its neighbours flood that;
 *   PING   keepalives; a neighbour silent for COLL_TIMEOUT_MS is a failure (COLL_TIMEOUT);
 *   PROBE  a call that makes no progress sends its number and signature towards rank 0;
 *          each rank on the way compares it with its own call of that number, so ranks
 *          that wait on each other in different calls fail naming both, with no data
 *          connection between them;
 *   BYE / DONE  coll_comm_destroy's teardown: BYEs gather up the tree, DONE comes down,
 *          so a failure flooded before any rank's destroy reaches every rank before its
 *          destroy returns (bounded wait; a clean leave is never taken for a death);
 *   DUMP   on SIGUSR1 to any rank, every rank's current call and what it waits on, gathered
 *          on rank 0 and printed there as one table.
 *
 * A thread per comm serves the tree (poll on its few sockets); the engine's threads only
 * write to it, under the plane's own lock, taken after the engine lock.
 */
#ifndef COLL_CTL_H
#define COLL_CTL_H

#include "internal.h"
#include "../base/wire.h"

/* Bootstrap, rank side, before its join record: open the control listener on the address
 * this rank reaches the root from (root_fd's local address), into self->ctl_addr. */
COLL_INTERNAL coll_status_t coll__ctl_listen(struct coll_comm *comm, int root_fd,
                                             struct coll_peer_info *self);
/* After the bootstrap: connect to the parent, accept the children (authenticated with the
 * comm's secret, within COLL_BOOTSTRAP_TIMEOUT_MS), close the listener. */
COLL_INTERNAL coll_status_t coll__ctl_start(struct coll_comm *comm);
/* At the end of a successful init: start the thread. Frames that came meanwhile (a peer
 * already failed) wait in the sockets, so init itself succeeds and the first call fails. */
COLL_INTERNAL coll_status_t coll__ctl_run(struct coll_comm *comm);
/* comm has just failed (coll__comm_fail, engine lock held): tell the neighbours. */
COLL_INTERNAL void coll__ctl_failed(struct coll_comm *comm);
/* The head op, collective cseq with signature s, makes no progress: ask up the tree
 * whether the others called the same (engine lock held). */
COLL_INTERNAL void coll__ctl_probe(struct coll_comm *comm, uint64_t cseq,
                                   const struct coll_sig *s);
/* coll_comm_destroy on a healthy comm: agree on teardown with the others, waiting at most
 * CTL_LEAVE_MS, so that a failure already on its way arrives first. */
COLL_INTERNAL void coll__ctl_leave(struct coll_comm *comm);
/* coll_comm_init failed after the tree was up: tell the neighbours why (a FAIL with this
 * rank's message, no BYE), so that ranks whose init returned fail rather than wait. */
COLL_INTERNAL void coll__ctl_abandon(struct coll_comm *comm, coll_status_t st);
/* Stop the thread, close the connections (a BYE first on a healthy comm), free. */
COLL_INTERNAL void coll__ctl_fini(struct coll_comm *comm);

#endif /* COLL_CTL_H */
