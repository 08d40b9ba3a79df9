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

#include "internal.h"

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

/* Choose the address to listen on: COLL_SOCKET_IFNAME (prefix match; "^a,b" excludes;
 * "=eth0" exact), else the first interface that is up and not loopback, else loopback.
 * IPv4 and IPv6. Port 0 in the result. */
COLL_INTERNAL coll_status_t coll__socket_pick_addr(struct coll_comm *comm, const char *spec,
                                                   struct sockaddr_storage *ss,
                                                   socklen_t *len_p, char *ifname,
                                                   size_t ifname_len);
/* "1.2.3.4:5678" or "[::1]:5678" */
COLL_INTERNAL void coll__sockaddr_str(const void *sa, socklen_t len, char *buf, size_t n);

/* This host's identity: hostname + /proc/sys/kernel/random/boot_id. */
COLL_INTERNAL void coll__host_identity(struct coll_peer_info *self);

/* Out of file descriptors (EMFILE): raise the soft RLIMIT_NOFILE to the hard limit if it is
 * lower; true when it did, and a retry may succeed. */
COLL_INTERNAL bool coll__raise_nofile(void);

/* HMAC-SHA256 (FIPS 180-4, RFC 2104), and a constant-time compare. */
#define COLL_MAC_BYTES 32
COLL_INTERNAL void coll__sha256(const void *msg, size_t len, uint8_t out[32]);
COLL_INTERNAL void coll__hmac_sha256(const uint8_t *key, size_t keylen, const void *msg,
                                     size_t len, uint8_t out[COLL_MAC_BYTES]);
COLL_INTERNAL bool coll__mac_equal(const uint8_t *a, const uint8_t *b, size_t n);

#endif /* COLL_BOOTSTRAP_H */
