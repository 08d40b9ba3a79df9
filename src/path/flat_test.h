/*
 * flat_test.h - test hooks of the flat path (tests/test_flat.c); not for the library.
 */
#ifndef COLL_PATH_FLAT_TEST_H
#define COLL_PATH_FLAT_TEST_H

#include "flat.h"

/* Calls this rank ran on the fast path (0 when it never started). */
COLL_INTERNAL uint64_t coll__flat_calls(const struct coll_comm *comm);
/* Play a hostile peer that scribbles over its own part of the segment (or the segment's
 * header) as COLL_FLAT_CORRUPT_* says. */
enum { COLL_FLAT_CORRUPT_JUNK = 1, COLL_FLAT_CORRUPT_COUNT, COLL_FLAT_CORRUPT_ABORT };
COLL_INTERNAL void coll__flat_test_corrupt(struct coll_comm *comm, int how);
/* Pause us before this process's next deep look at a peer it waits for in a sleep (after
 * it found the peer's word short of what it waits for), once. */
COLL_INTERNAL void coll__flat_test_pause_deep(unsigned us);

#endif /* COLL_PATH_FLAT_TEST_H */
