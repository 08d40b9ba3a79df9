/*
 * api.c - the public collectives: validate every argument, build or fetch the plan, queue
 * the op, and wait for it (blocking) or hand back a request (non-blocking).
 */
#include "exec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Checks shared by every collective. fn names the call in messages. */
static coll_status_t check_common(struct coll_comm *comm, const char *fn, size_t count,
                                  coll_dtype_t dtype, coll_op_t op, bool has_op)
{
    int failed;
    size_t size;

    if (!comm)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "%s: comm is NULL", fn);
    failed = atomic_load(&comm->failed);
    if (failed != COLL_SUCCESS) {
        /* keep the first failure's message: it is the one that explains */
        coll__set_thread_error(comm->errmsg);
        return (coll_status_t)failed;
    }
    if ((unsigned)dtype >= COLL_NUM_DTYPES)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: dtype %d is not a coll_dtype_t",
                           fn, (int)dtype);
    if (has_op && (unsigned)op >= COLL_NUM_OPS)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: op %d is not a coll_op_t", fn,
                           (int)op);
    size = coll__dtype_size(dtype);
    if (count > SIZE_MAX / size / (size_t)comm->nranks)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: count %zu of %s overflows the size of a buffer", fn, count,
                           coll__dtype_name(dtype));
    return COLL_SUCCESS;
}

static bool overlap_partial(const void *a, const void *b, size_t bytes)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    if (!a || !b || a == b || bytes == 0)
        return false;
    return x < y + bytes && y < x + bytes;
}

static uint64_t op_signature(enum coll_coll c, coll_dtype_t dt, coll_op_t op, size_t count,
                             int root)
{
    uint64_t v[5] = {(uint64_t)c, (uint64_t)dt, (uint64_t)op, (uint64_t)count, (uint64_t)root};
    return (coll__hash64(v, sizeof(v), 0x636f6c6c) & 0xffffull) << 48;
}

/* Build the op for a validated call; it is queued on return. */
static coll_status_t issue(struct coll_comm *comm, enum coll_coll c, const void *sendbuf,
                           void *recvbuf, size_t count, coll_dtype_t dtype, coll_op_t redop,
                           int root, bool is_request, struct coll_op **op_p)
{
    struct coll_algo_args args = {
        .coll = c,
        .nranks = comm->nranks,
        .rank = comm->rank,
        .root = root,
        .count = count,
        .dtype = dtype,
        .elem_size = coll__dtype_size(dtype),
    };
    struct coll_op *op = NULL;
    coll_status_t st;

    args.chunk_count = (size_t)comm->cfg.chunk_bytes / args.elem_size;
    if (args.chunk_count == 0)
        args.chunk_count = 1;
    op = calloc(1, sizeof(*op));
    if (!op)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for an operation");
    st = coll__plan_get(comm, &args, &op->plan);
    if (st != COLL_SUCCESS) {
        free(op);
        return st;
    }
    op->comm = comm;
    op->coll = c;
    op->op = redop;
    op->root = root;
    op->sendbuf = sendbuf;
    op->recvbuf = recvbuf;
    op->is_request = is_request;
    op->sig = op_signature(c, dtype, redop, count, root);
    coll__engine_submit(comm, op);
    *op_p = op;
    return COLL_SUCCESS;
}

static coll_status_t run(struct coll_comm *comm, enum coll_coll c, const void *sendbuf,
                         void *recvbuf, size_t count, coll_dtype_t dtype, coll_op_t redop,
                         int root, coll_request_t **req_p)
{
    struct coll_op *op = NULL;
    coll_status_t st;

    st = issue(comm, c, sendbuf, recvbuf, count, dtype, redop, root, req_p != NULL, &op);
    if (st != COLL_SUCCESS)
        return st;
    if (req_p) {
        *req_p = (coll_request_t *)op;
        return COLL_SUCCESS;
    }
    st = coll__engine_wait(comm, op);
    coll__engine_detach(comm, op);
    coll__op_free(op);
    if (st != COLL_SUCCESS)
        coll__set_thread_error(comm->errmsg);
    return st;
}

static coll_status_t allreduce(const void *sendbuf, void *recvbuf, size_t count,
                               coll_dtype_t dtype, coll_op_t op, coll_comm_t *comm,
                               coll_request_t **req_p, const char *fn)
{
    coll_status_t st = check_common(comm, fn, count, dtype, op, true);
    size_t bytes;

    if (st != COLL_SUCCESS)
        return st;
    bytes = count * coll__dtype_size(dtype);
    if (count > 0 && (!sendbuf || !recvbuf))
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: %s is NULL with count %zu", fn,
                           !sendbuf ? "sendbuf" : "recvbuf", count);
    if (overlap_partial(sendbuf, recvbuf, bytes))
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: sendbuf and recvbuf overlap without being equal", fn);
    return run(comm, COLL_COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0, req_p);
}

static coll_status_t rooted(enum coll_coll c, const void *sendbuf, void *recvbuf, size_t count,
                            coll_dtype_t dtype, coll_op_t op, int root, coll_comm_t *comm,
                            coll_request_t **req_p, const char *fn)
{
    coll_status_t st = check_common(comm, fn, count, dtype, op, c == COLL_COLL_REDUCE);
    bool need_send, need_recv;
    size_t bytes;

    if (st != COLL_SUCCESS)
        return st;
    if (root < 0 || root >= comm->nranks)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: root %d is out of range [0, %d)",
                           fn, root, comm->nranks);
    /* broadcast reads sendbuf on root only; reduce writes recvbuf on root only */
    need_send = c == COLL_COLL_REDUCE || comm->rank == root;
    need_recv = c == COLL_COLL_BROADCAST || comm->rank == root;
    if (count > 0 && need_send && !sendbuf)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: sendbuf is NULL with count %zu", fn,
                           count);
    if (count > 0 && need_recv && !recvbuf)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: recvbuf is NULL with count %zu", fn,
                           count);
    bytes = count * coll__dtype_size(dtype);
    if (need_send && need_recv && overlap_partial(sendbuf, recvbuf, bytes))
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: sendbuf and recvbuf overlap without being equal", fn);
    return run(comm, c, need_send ? sendbuf : NULL, need_recv ? recvbuf : NULL, count, dtype,
               c == COLL_COLL_REDUCE ? op : COLL_SUM, root, req_p);
}

COLL_API coll_status_t coll_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                      coll_dtype_t dtype, coll_op_t op, coll_comm_t *comm)
{
    return allreduce(sendbuf, recvbuf, count, dtype, op, comm, NULL, "coll_allreduce");
}

COLL_API coll_status_t coll_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                      coll_dtype_t dtype, int root, coll_comm_t *comm)
{
    return rooted(COLL_COLL_BROADCAST, sendbuf, recvbuf, count, dtype, COLL_SUM, root, comm,
                  NULL, "coll_broadcast");
}

COLL_API coll_status_t coll_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                   coll_dtype_t dtype, coll_op_t op, int root, coll_comm_t *comm)
{
    return rooted(COLL_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root, comm, NULL,
                  "coll_reduce");
}

static coll_status_t check_req_p(coll_comm_t *comm, coll_request_t **req_p, const char *fn)
{
    if (req_p)
        return COLL_SUCCESS;
    return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: req_p is NULL", fn);
}

COLL_API coll_status_t coll_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                       coll_dtype_t dtype, coll_op_t op, coll_comm_t *comm,
                                       coll_request_t **req_p)
{
    coll_status_t st = check_req_p(comm, req_p, "coll_iallreduce");
    return st ? st : allreduce(sendbuf, recvbuf, count, dtype, op, comm, req_p, "coll_iallreduce");
}

COLL_API coll_status_t coll_ibroadcast(const void *sendbuf, void *recvbuf, size_t count,
                                       coll_dtype_t dtype, int root, coll_comm_t *comm,
                                       coll_request_t **req_p)
{
    coll_status_t st = check_req_p(comm, req_p, "coll_ibroadcast");
    return st ? st : rooted(COLL_COLL_BROADCAST, sendbuf, recvbuf, count, dtype, COLL_SUM, root,
                            comm, req_p, "coll_ibroadcast");
}

COLL_API coll_status_t coll_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                                    coll_dtype_t dtype, coll_op_t op, int root,
                                    coll_comm_t *comm, coll_request_t **req_p)
{
    coll_status_t st = check_req_p(comm, req_p, "coll_ireduce");
    return st ? st : rooted(COLL_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root, comm,
                            req_p, "coll_ireduce");
}

COLL_API coll_status_t coll_test(coll_request_t *req, int *done_p)
{
    struct coll_op *op = (struct coll_op *)req;
    struct coll_comm *comm;
    coll_status_t st;

    if (!req || !done_p)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "coll_test: %s is NULL",
                           !req ? "req" : "done_p");
    comm = op->comm;
    *done_p = 0;
    if (atomic_load(&op->status) == COLL_IN_PROGRESS)
        coll__engine_poll(comm);
    st = (coll_status_t)atomic_load(&op->status);
    if (st == COLL_IN_PROGRESS)
        return COLL_SUCCESS;
    *done_p = 1;
    coll__engine_detach(comm, op);
    coll__op_free(op);
    if (st != COLL_SUCCESS)
        coll__set_thread_error(comm->errmsg);
    return st;
}

COLL_API coll_status_t coll_wait(coll_request_t *req)
{
    struct coll_op *op = (struct coll_op *)req;
    struct coll_comm *comm;
    coll_status_t st;

    if (!req)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "coll_wait: req is NULL");
    comm = op->comm;
    st = coll__engine_wait(comm, op);
    coll__engine_detach(comm, op);
    coll__op_free(op);
    if (st != COLL_SUCCESS)
        coll__set_thread_error(comm->errmsg);
    return st;
}
