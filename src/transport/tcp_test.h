/*
 * tcp_test.h - what tests read of the TCP transport's state (tests/test_tcp.c,
 * test_strangers.c); production code does not include it.
 */
#ifndef COLL_TCP_TEST_H
#define COLL_TCP_TEST_H

#include "../base/base.h"

/* Test hook: connections the TCP transport's listener refused since init (strangers,
 * wrong secret or comm id, duplicates, handshakes that timed out). ctx is the tcp ctx. */
COLL_INTERNAL uint64_t coll__tcp_rejected(const void *ctx);
/* Test hook: the sockets of the TCP link to peer (COLL_NSOCKS of them once it is up): their
 * number, and up to max of their fds (-1 for one not open) in fds. 0 when there is no link. */
COLL_INTERNAL int coll__tcp_link_fds(const void *ctx, int peer, int *fds, int max);

#endif /* COLL_TCP_TEST_H */
