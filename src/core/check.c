/*
 * check.c - the argument check of every call (check.h), from the collective's row.
 *
 * Buffer sizes come from the row's block shape: a buffer of COLL_BLOCKS_N holds nranks x
 * count elements. In place is the smaller buffer at block `inplace` of the larger (or the
 * same memory when both are one size); any other overlap is refused, since a schedule may
 * read an element after another rank's data overwrote it.
 */
#include "check.h"

#include <stdint.h>

coll_status_t coll__check_common(struct coll_comm *comm, const char *fn, size_t count,
                                 coll_dtype_t dtype, coll_op_t op, bool has_op, unsigned flags)
{
    int failed = atomic_load(&comm->failed);
    size_t size;

    if (failed != COLL_SUCCESS) {
        /* keep the first failure's message: it is the one that explains */
        coll__set_thread_error(comm->errmsg);
        return (coll_status_t)failed;
    }
    if ((unsigned)dtype >= COLL_NUM_DTYPES)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: dtype %d is not a coll_dtype_t",
                           fn, (int)dtype);
    if (has_op && (flags & COLL_CHECK_NCCL_OPS) && (unsigned)op >= COLL_NUM_OPS)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: op %d (%s) is not one of NCCL's, which stream-ordered calls take",
                           fn, (int)op, coll__op_name(op));
    if (has_op && (unsigned)op >= COLL_NUM_OPS && op != COLL_BAND && op != COLL_BOR &&
        op != COLL_BXOR)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: op %d is not a coll_op_t", fn,
                           (int)op);
    if (has_op && (int)op < 0 && dtype > COLL_UINT64)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: op %s is bitwise: integer dtypes only, not %s", fn,
                           coll__op_name(op), coll__dtype_name(dtype));
    /* count x size x nranks must fit a size_t; multiplied, not divided (two 64-bit
     * divisions were a tenth of an 8 B call's time on the flat path) */
    if (__builtin_mul_overflow(count, coll__dtype_size(dtype), &size) ||
        __builtin_mul_overflow(size, (size_t)comm->nranks, &size))
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: count %zu of %s overflows the size of a buffer", fn, count,
                           coll__dtype_name(dtype));
    return COLL_SUCCESS;
}

static coll_status_t check_rank(struct coll_comm *comm, const char *fn, const char *what,
                                int r)
{
    if (r >= 0 && r < comm->nranks)
        return COLL_SUCCESS;
    return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: %s %d is out of range [0, %d)", fn,
                       what, r, comm->nranks);
}

coll_status_t coll__check_buf(struct coll_comm *comm, const char *fn, const char *name,
                              const void *buf, size_t count)
{
    if (buf || count == 0)
        return COLL_SUCCESS;
    return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: %s is NULL with count %zu", fn, name,
                       count);
}

/* [a, a + alen) and [b, b + blen) overlap, other than b == a + alias_off exactly. */
static coll_status_t check_overlap(struct coll_comm *comm, const char *fn, const void *a,
                                   size_t alen, const void *b, size_t blen, size_t alias_off)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;

    if (!a || !b || alen == 0 || blen == 0 || y == x + alias_off)
        return COLL_SUCCESS;
    if (x < y + blen && y < x + alen)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: sendbuf and recvbuf overlap without being in place", fn);
    return COLL_SUCCESS;
}

coll_status_t coll__check_call(struct coll_call *c, const char *fn, unsigned flags)
{
    struct coll_comm *comm = c->comm;
    const struct coll_coll_desc *d = coll__coll_desc(c->coll);
    bool rooted, use_send, use_recv;
    size_t esz, sbytes, rbytes, at;
    coll_status_t st;

    if (!d)
        return coll__error(comm, COLL_INTERNAL_ERROR, "%s: collective %d has no row", fn,
                           (int)c->coll);
    rooted = d->root != COLL_ROOT_NONE;
    st = coll__check_common(comm, fn, c->count, c->dtype, c->op, d->reduces, flags);
    if (st == COLL_SUCCESS && rooted)
        st = check_rank(comm, fn, "root", c->root);
    if (st == COLL_SUCCESS && d->p2p)
        st = check_rank(comm, fn, "peer", c->peer);
    if (st != COLL_SUCCESS)
        return st;
    use_send = coll__desc_uses_send(d, comm->rank, c->root, c->p2p);
    use_recv = coll__desc_uses_recv(d, comm->rank, c->root, c->p2p);
    if (use_send && (st = coll__check_buf(comm, fn, "sendbuf", c->sendbuf, c->count)))
        return st;
    if (use_recv && (st = coll__check_buf(comm, fn, "recvbuf", c->recvbuf, c->count)))
        return st;
    if (use_send && use_recv && !d->p2p) {
        esz = coll__dtype_size(c->dtype);
        sbytes = coll__blocks_count(d->send_blocks, c->count, comm->nranks) * esz;
        rbytes = coll__blocks_count(d->recv_blocks, c->count, comm->nranks) * esz;
        at = d->inplace == COLL_AT_RANK   ? (size_t)comm->rank
             : d->inplace == COLL_AT_ROOT ? (size_t)c->root
                                          : 0;
        at *= c->count * esz;
        /* the larger buffer first: the smaller one sits in it in place */
        st = d->recv_blocks > d->send_blocks
                 ? check_overlap(comm, fn, c->recvbuf, rbytes, c->sendbuf, sbytes, at)
                 : check_overlap(comm, fn, c->sendbuf, sbytes, c->recvbuf, rbytes, at);
        if (st != COLL_SUCCESS)
            return st;
    }
    if (!use_send)
        c->sendbuf = NULL;
    if (!use_recv)
        c->recvbuf = NULL;
    if (!d->reduces)
        c->op = COLL_SUM;
    if (!rooted)
        c->root = 0;
    if (!d->p2p)
        c->peer = -1;
    return COLL_SUCCESS;
}
