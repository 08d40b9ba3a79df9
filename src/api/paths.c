/*
 * paths.c - the API's side of the paths made of host calls (src/path/path.h: stream, quant):
 * the public stream-ordered calls and the quantized all-reduce's, checked here and handed to
 * the path the chooser names; and the host calls those paths run their calls with
 * (coll__api_host), handed down to them at comm creation, since a path may not call up into
 * the API (tools/layers.py).
 *
 * Divisions: 1 the host calls handed down, 2 stream-ordered calls, 3 the quantized
 * all-reduce and its error feedback.
 */
#include "comm.h"
#include "../core/check.h"
#include "../path/path.h"
#include "../path/qallreduce.h"
#include "../path/stream.h"

/* ---- 1 the host calls handed down ----------------------------------------------------- */

/* c as its public call, blocking or a request (each checks c again, as any caller's). */
static coll_status_t host_call(const struct coll_call *c, coll_request_t **req_p)
{
    struct coll_comm *comm = c->comm;
    const void *s = c->sendbuf;
    void *r = c->recvbuf;
    size_t n = c->count;

    switch (c->coll) {
    case COLL_COLL_ALLREDUCE:
        return req_p ? coll_iallreduce(s, r, n, c->dtype, c->op, comm, req_p)
                     : coll_allreduce(s, r, n, c->dtype, c->op, comm);
    case COLL_COLL_BROADCAST:
        return req_p ? coll_ibroadcast(s, r, n, c->dtype, c->root, comm, req_p)
                     : coll_broadcast(s, r, n, c->dtype, c->root, comm);
    case COLL_COLL_REDUCE:
        return req_p ? coll_ireduce(s, r, n, c->dtype, c->op, c->root, comm, req_p)
                     : coll_reduce(s, r, n, c->dtype, c->op, c->root, comm);
    case COLL_COLL_ALLGATHER:
        return req_p ? coll_iallgather(s, r, n, c->dtype, comm, req_p)
                     : coll_allgather(s, r, n, c->dtype, comm);
    case COLL_COLL_REDUCE_SCATTER:
        return req_p ? coll_ireduce_scatter(s, r, n, c->dtype, c->op, comm, req_p)
                     : coll_reduce_scatter(s, r, n, c->dtype, c->op, comm);
    case COLL_COLL_ALLTOALL:
        return req_p ? coll_ialltoall(s, r, n, c->dtype, comm, req_p)
                     : coll_alltoall(s, r, n, c->dtype, comm);
    case COLL_COLL_BARRIER:
        return req_p ? coll_ibarrier(comm, req_p) : coll_barrier(comm);
    case COLL_COLL_SENDRECV:
        if (c->p2p == COLL_STEP_SEND)
            return req_p ? coll_isend(s, n, c->dtype, c->peer, comm, req_p)
                         : coll_send(s, n, c->dtype, c->peer, comm);
        return req_p ? coll_irecv(r, n, c->dtype, c->peer, comm, req_p)
                     : coll_recv(r, n, c->dtype, c->peer, comm);
    default:
        return coll__error(comm, COLL_INTERNAL_ERROR, "a path asked for %s as a host call",
                           coll__coll_name(c->coll));
    }
}

const struct coll_path_host coll__api_host = {
    .call = host_call,
    .alltoallv = coll_alltoallv,
    .group_start = coll_group_start,
    .group_end = coll_group_end,
    .wait = coll_wait,
    .group_active = coll__group_active,
    .abort = coll_comm_abort,
};

/* ---- 2 stream-ordered calls ----------------------------------------------------------- */

/* The arguments of a stream-ordered call c: the host calls' checker with NCCL's ops only
 * (src/core/check.h: buffers this rank does not use become NULL), and a send to or receive
 * from oneself only inside a group, as the host calls. */
static coll_status_t stream_check(struct coll_call *c, const char *fn)
{
    coll_status_t st;

    if (coll__comm_check(c->comm, fn) != COLL_SUCCESS)
        return COLL_INVALID_ARGUMENT;
    st = coll__check_call(c, fn, COLL_CHECK_NCCL_OPS);
    if (st != COLL_SUCCESS)
        return st;
    if (c->coll == COLL_COLL_SENDRECV && c->peer == c->comm->rank && !coll__group_active())
        return coll__error(c->comm, COLL_INVALID_USAGE,
                           "%s: a send to or receive from oneself outside a group would wait for "
                           "itself; pair them in coll_group_start/end",
                           fn);
    return COLL_SUCCESS;
}

/* A stream-ordered call: checked, then to the path the chooser names (the stream path). */
static coll_status_t stream_call(struct coll_call c, const char *fn)
{
    struct coll_choice ch;
    coll_status_t st;

    c.form = COLL_FORM_STREAM;
    st = stream_check(&c, fn);
    if (st == COLL_SUCCESS)
        st = coll__choose(c.comm, &c, false, &ch);
    if (st != COLL_SUCCESS) {
        if (coll__group_active()) /* the group ends with the failure too */
            coll__stream_group_fail(st);
        return st;
    }
    if (!ch.path->submit)
        return coll__error(c.comm, COLL_INTERNAL_ERROR, "%s: the %s path took a stream call",
                           fn, ch.path->name);
    return ch.path->submit(c.comm, &c);
}

COLL_API coll_status_t coll_allreduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                             coll_dtype_t dtype, coll_op_t op, coll_comm_t *comm,
                                             void *stream)
{
    return stream_call((struct coll_call){.comm = comm, .coll = COLL_COLL_ALLREDUCE,
                                          .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                                          .dtype = dtype, .op = op, .peer = -1,
                                          .stream = stream},
                       "coll_allreduce_stream");
}

COLL_API coll_status_t coll_broadcast_stream(const void *sendbuf, void *recvbuf, size_t count,
                                             coll_dtype_t dtype, int root, coll_comm_t *comm,
                                             void *stream)
{
    return stream_call((struct coll_call){.comm = comm, .coll = COLL_COLL_BROADCAST,
                                          .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                                          .dtype = dtype, .op = COLL_SUM, .root = root,
                                          .peer = -1, .stream = stream},
                       "coll_broadcast_stream");
}

COLL_API coll_status_t coll_reduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                          coll_dtype_t dtype, coll_op_t op, int root,
                                          coll_comm_t *comm, void *stream)
{
    return stream_call((struct coll_call){.comm = comm, .coll = COLL_COLL_REDUCE,
                                          .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                                          .dtype = dtype, .op = op, .root = root, .peer = -1,
                                          .stream = stream},
                       "coll_reduce_stream");
}

COLL_API coll_status_t coll_allgather_stream(const void *sendbuf, void *recvbuf,
                                             size_t sendcount, coll_dtype_t dtype,
                                             coll_comm_t *comm, void *stream)
{
    return stream_call((struct coll_call){.comm = comm, .coll = COLL_COLL_ALLGATHER,
                                          .sendbuf = sendbuf, .recvbuf = recvbuf,
                                          .count = sendcount, .dtype = dtype, .op = COLL_SUM,
                                          .peer = -1, .stream = stream},
                       "coll_allgather_stream");
}

COLL_API coll_status_t coll_reduce_scatter_stream(const void *sendbuf, void *recvbuf,
                                                  size_t recvcount, coll_dtype_t dtype,
                                                  coll_op_t op, coll_comm_t *comm, void *stream)
{
    return stream_call((struct coll_call){.comm = comm, .coll = COLL_COLL_REDUCE_SCATTER,
                                          .sendbuf = sendbuf, .recvbuf = recvbuf,
                                          .count = recvcount, .dtype = dtype, .op = op,
                                          .peer = -1, .stream = stream},
                       "coll_reduce_scatter_stream");
}

COLL_API coll_status_t coll_alltoall_stream(const void *sendbuf, void *recvbuf, size_t count,
                                            coll_dtype_t dtype, coll_comm_t *comm, void *stream)
{
    return stream_call((struct coll_call){.comm = comm, .coll = COLL_COLL_ALLTOALL,
                                          .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                                          .dtype = dtype, .op = COLL_SUM, .peer = -1,
                                          .stream = stream},
                       "coll_alltoall_stream");
}

COLL_API coll_status_t coll_send_stream(const void *sendbuf, size_t count, coll_dtype_t dtype,
                                        int peer, coll_comm_t *comm, void *stream)
{
    return stream_call((struct coll_call){.comm = comm, .coll = COLL_COLL_SENDRECV,
                                          .p2p = COLL_STEP_SEND, .sendbuf = sendbuf,
                                          .count = count, .dtype = dtype, .op = COLL_SUM,
                                          .peer = peer, .stream = stream},
                       "coll_send_stream");
}

COLL_API coll_status_t coll_recv_stream(void *recvbuf, size_t count, coll_dtype_t dtype,
                                        int peer, coll_comm_t *comm, void *stream)
{
    return stream_call((struct coll_call){.comm = comm, .coll = COLL_COLL_SENDRECV,
                                          .p2p = COLL_STEP_RECV, .recvbuf = recvbuf,
                                          .count = count, .dtype = dtype, .op = COLL_SUM,
                                          .peer = peer, .stream = stream},
                       "coll_recv_stream");
}

COLL_API coll_status_t coll_comm_get_async_error(coll_comm_t *comm, coll_status_t *status_p)
{
    if (coll__comm_check(comm, "coll_comm_get_async_error") != COLL_SUCCESS)
        return COLL_INVALID_ARGUMENT;
    if (!status_p)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "coll_comm_get_async_error: status_p is NULL");
    *status_p = (coll_status_t)atomic_load(&comm->failed);
    return COLL_SUCCESS;
}

/* ---- 3 the quantized all-reduce and its error feedback -------------------------------- */

COLL_API coll_status_t coll_allreduce_quantized(const void *sendbuf, void *recvbuf,
                                                size_t count, coll_dtype_t dtype, coll_op_t op,
                                                const coll_quant_config_t *config,
                                                coll_quant_feedback_t *fb, coll_comm_t *comm)
{
    static const char fn[] = "coll_allreduce_quantized";
    int failed;

    if (coll__comm_check(comm, fn) != COLL_SUCCESS)
        return COLL_INVALID_ARGUMENT;
    failed = atomic_load(&comm->failed);
    if (failed != COLL_SUCCESS) {
        coll__set_thread_error(comm->errmsg);
        return (coll_status_t)failed;
    }
    if (coll__group_active())
        return coll__error(comm, COLL_INVALID_USAGE,
                           "%s: a quantized all-reduce is several collectives in sequence and "
                           "cannot be part of a group",
                           fn);
    return coll__allreduce_quant(comm, sendbuf, recvbuf, count, dtype, op, config, fb, fn);
}

COLL_API coll_status_t coll_quant_feedback_create(coll_comm_t *comm, size_t count,
                                                  coll_quant_feedback_t **fb_p)
{
    static const char fn[] = "coll_quant_feedback_create";

    if (coll__comm_check(comm, fn) != COLL_SUCCESS)
        return COLL_INVALID_ARGUMENT;
    if (!fb_p)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: fb_p is NULL", fn);
    return coll__qfeedback_create(comm, count, fn, fb_p);
}

COLL_API coll_status_t coll_quant_feedback_reset(coll_quant_feedback_t *fb)
{
    if (!fb)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "coll_quant_feedback_reset: fb is NULL");
    coll__qfeedback_reset(fb);
    return COLL_SUCCESS;
}

COLL_API coll_status_t coll_quant_feedback_destroy(coll_quant_feedback_t *fb)
{
    if (fb)
        coll__qfeedback_destroy(fb);
    return COLL_SUCCESS;
}

COLL_API coll_status_t coll_comm_bytes_sent(const coll_comm_t *comm, uint64_t *bytes_p)
{
    if (coll__comm_check(comm, "coll_comm_bytes_sent") != COLL_SUCCESS)
        return COLL_INVALID_ARGUMENT;
    if (!bytes_p)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "coll_comm_bytes_sent: bytes_p is NULL");
    *bytes_p = atomic_load_explicit(&((struct coll_comm *)comm)->bytes_sent, memory_order_relaxed);
    return COLL_SUCCESS;
}
