/*
 * bootstrap.h - unique ids, the root rendezvous, the data listener's address, and the
 * keyed hash that authenticates every connection.
 *
 * Protocol (all integers little-endian on the wire, every field validated):
 *   1. a rank connects to the root address of the id;
 *   2. root sends a 16-byte random nonce;
 *   3. rank answers HMAC-SHA256(secret, "coll-join" | nonce | comm_id) and its join record
 *      (rank, nranks, struct coll_peer_info);
 *   4. root checks the MAC (constant-time), the comm id, rank < nranks, nranks equal to the
 *      first joiner's, no duplicate rank; a failed MAC or malformed record is dropped and
 *      counted (a stranger never disturbs the rendezvous), a disagreement is reported to all;
 *   5. when all nranks have joined, root sends each the table of all peer infos (or an
 *      error record with a message) and closes.
 * The secret never crosses the wire.
 */
#ifndef COLL_BOOTSTRAP_H
#define COLL_BOOTSTRAP_H

#include "../base/net.h"
#include "internal.h"

/* Move exactly len bytes over a non-blocking socket before the deadline (CLOCK_MONOTONIC
 * ns): 0, ETIMEDOUT, EPIPE (the peer closed while we read) or the errno of the failing call.
 * The bootstrap's and the TCPStore client's and server's (src/api/launch/tcpstore.c). */
COLL_INTERNAL int coll__io_full(int fd, void *buf, size_t len, uint64_t deadline_ns, bool wr);

/* Serialise and parse the 128-byte id: magic, version, address, secret, comm id, checksum.
 * Decoding rejects a wrong magic/version/length or checksum with COLL_INVALID_ARGUMENT. */
COLL_INTERNAL void coll__id_encode(const struct coll_id_info *info, coll_unique_id_t *id);
COLL_INTERNAL coll_status_t coll__id_decode(const coll_unique_id_t *id,
                                            struct coll_id_info *info_p);

/* Make a fresh id (random secret and comm id) and start the root thread in this process,
 * listening on an address chosen by coll__socket_pick_addr. The thread exits once all ranks
 * joined, or after COLL_BOOTSTRAP_TIMEOUT_MS. */
COLL_INTERNAL coll_status_t coll__bootstrap_root_start(coll_unique_id_t *id_p);
/* Start the root thread for a given id (secret, comm id and the address to listen on:
 * bound with SO_REUSEADDR, so a port this process held before can be taken again). Used by
 * coll_comm_shrink, whose survivors all derive the same id. */
COLL_INTERNAL coll_status_t coll__bootstrap_root_start_at(const struct coll_id_info *id);

/* Rank side of the rendezvous: comm->rank, nranks, self (with the data listener's address)
 * and cfg are set; on success comm->peers holds all nranks infos (self included at
 * comm->rank) and comm->comm_id / secret are set. Blocks at most
 * comm->cfg.bootstrap_timeout_ms (COLL_TIMEOUT). */
COLL_INTERNAL coll_status_t coll__bootstrap_join(struct coll_comm *comm,
                                                 const struct coll_id_info *id);

#endif /* COLL_BOOTSTRAP_H */
