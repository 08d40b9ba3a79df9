/*
 * net.h - addresses and keyed hashes, shared by the bootstrap and the transports: which
 * interface to listen on, how to print an address, this host's identity, and the
 * HMAC-SHA256 that authenticates every connection (src/base/sockaddr.c, host.c, sha256.c).
 */
#ifndef COLL_NET_H
#define COLL_NET_H

#include "base.h"

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

/* The CPUs this host's ranks may run on: configured when > 0 (COLL_HOST_CPUS); else this
 * process's affinity joined with that of its peers on this host (self->host_hash; peers
 * NULL: this process's alone), or the online CPUs where affinity cannot be read.
 * machine_cpus, when not NULL, gets the same count over the peers on this machine
 * (self->machine_hash: other hosts' ranks that share its kernel too). */
COLL_INTERNAL int coll__host_cpus_of(int64_t configured, const struct coll_peer_info *self,
                                     const struct coll_peer_info *peers, int nranks, int rank,
                                     int *machine_cpus);

/* Out of file descriptors (EMFILE): raise the soft RLIMIT_NOFILE to the hard limit if it is
 * lower; true when it did, and a retry may succeed. */
COLL_INTERNAL bool coll__raise_nofile(void);

/* HMAC-SHA256 (FIPS 180-4, RFC 2104), and a constant-time compare. */
#define COLL_MAC_BYTES 32
COLL_INTERNAL void coll__sha256(const void *msg, size_t len, uint8_t out[32]);
COLL_INTERNAL void coll__hmac_sha256(const uint8_t *key, size_t keylen, const void *msg,
                                     size_t len, uint8_t out[COLL_MAC_BYTES]);
COLL_INTERNAL bool coll__mac_equal(const uint8_t *a, const uint8_t *b, size_t n);

#endif /* COLL_NET_H */
