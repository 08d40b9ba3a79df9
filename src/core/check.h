/*
 * check.h - the one check of a call's arguments, read off the collective's row
 * (src/algo/colls.h): the host calls (src/api/api.c) and the stream-ordered ones use it, so
 * both refuse the same arguments with the same words.
 */
#ifndef COLL_CHECK_H
#define COLL_CHECK_H

#include "exec.h"

/* Stream-ordered calls: the op must be one of NCCL's five (the bitwise ops are host-only). */
#define COLL_CHECK_NCCL_OPS 1u

/* The comm has not failed (its first failure's status, the message kept), dtype is a
 * coll_dtype_t, op (when has_op) a coll_op_t valid for dtype, and nranks x count elements
 * fit in a size_t. comm must be live (coll__comm_check). */
COLL_INTERNAL coll_status_t coll__check_common(struct coll_comm *comm, const char *fn,
                                               size_t count, coll_dtype_t dtype, coll_op_t op,
                                               bool has_op, unsigned flags);
/* buf is not NULL unless count is 0; name is the argument's ("sendbuf"). */
COLL_INTERNAL coll_status_t coll__check_buf(struct coll_comm *comm, const char *fn,
                                            const char *name, const void *buf, size_t count);
/* Every argument of c (comm live; coll, sendbuf, recvbuf, count, dtype, op, root set; p2p
 * and peer for a send or receive) against c->coll's row, in the order coll.h documents: the
 * comm's state, dtype, op, count, root or peer, the buffers this rank passes, their
 * overlap. COLL_INVALID_ARGUMENT names the first bad one. On success c is as the paths take
 * it: buffers this rank does not use NULL, op COLL_SUM unless the collective reduces, root 0
 * unless it has one, peer -1 unless it is a send or receive. */
COLL_INTERNAL coll_status_t coll__check_call(struct coll_call *c, const char *fn,
                                             unsigned flags);

#endif /* COLL_CHECK_H */
