/*
 * exec.c - the executor: runs one rank's schedule of one op over the transports.
 *
 * A pass walks the steps from the first unfinished one: a step whose dependencies are done
 * starts (sends and receives are posted to their channel, reductions and copies run at
 * once); posted transfers are checked for completion. Chunked schedules therefore pipeline
 * by themselves: while chunk k is being received, chunk k-1 is reduced and chunk k-2 sent.
 * Sends to one peer are posted in step order, and receives from one peer likewise, which is
 * what makes the k-th send match the k-th receive over a FIFO link.
 */
#include "exec.h"
#include "../reduce/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *buf_base(const struct coll_op *op, uint8_t buf)
{
    switch (buf) {
    case COLL_BUF_SEND:
        return (uint8_t *)op->sendbuf;
    case COLL_BUF_RECV:
        return op->recvbuf;
    case COLL_BUF_SCRATCH:
        return op->comm->scratch;
    }
    return NULL;
}

static void *slice_ptr(const struct coll_op *op, const struct coll_slice *sl)
{
    uint8_t *base = buf_base(op, sl->buf);
    return base ? base + sl->off * op->plan->sched.elem_size : NULL;
}

static coll_status_t exec_start(struct coll_op *op)
{
    struct coll_comm *comm = op->comm;
    const struct coll_schedule *s = &op->plan->sched;
    size_t scratch = s->buf_count[COLL_BUF_SCRATCH] * s->elem_size;

    op->state = calloc(s->nsteps ? s->nsteps : 1, 1);
    op->xfers = calloc(s->nsteps ? s->nsteps : 1, sizeof(*op->xfers));
    if (!op->state || !op->xfers)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for a %u-step schedule",
                           s->nsteps);
    if (scratch > comm->scratch_bytes) {
        void *p = realloc(comm->scratch, scratch);
        if (!p)
            return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for %zu bytes of scratch",
                               scratch);
        comm->scratch = p;
        comm->scratch_bytes = scratch;
    }
    op->started = true;
    op->last_progress_ns = coll__now_ns();
    COLL_TRACE(COLL_SUB_COLL, "%s #%llu start: algo %s, %u steps", coll__coll_name(op->coll),
               (unsigned long long)op->seq, s->algo ? s->algo->name : "-", s->nsteps);
    return COLL_SUCCESS;
}

static bool deps_done(const struct coll_op *op, const struct coll_step *st)
{
    for (uint32_t d = 0; d < st->ndeps; d++)
        if (op->state[st->deps[d]] != STEP_DONE)
            return false;
    return true;
}

static void exec_finish(struct coll_op *op)
{
    struct coll_comm *comm = op->comm;
    const struct coll_algo_args *a = &op->plan->args;
    bool holds_result = op->coll == COLL_COLL_ALLREDUCE ||
                        (op->coll == COLL_COLL_REDUCE && comm->rank == op->root);

    if (op->op == COLL_AVG && holds_result && a->count > 0)
        coll__reduce_div(op->recvbuf, a->count, a->dtype, (uint64_t)comm->nranks);
    atomic_store(&op->status, COLL_SUCCESS);
}

/* Start step i if it can start. Returns true if it started; errors through *st_p. */
static bool exec_try_start(struct coll_op *op, uint32_t i, coll_status_t *st_p)
{
    struct coll_comm *comm = op->comm;
    const struct coll_schedule *s = &op->plan->sched;
    const struct coll_step *st = &s->steps[i];
    struct coll_xfer *x;
    uint32_t prev;

    if (!deps_done(op, st))
        return false;
    if (st->kind == COLL_STEP_REDUCE) {
        void *dst = slice_ptr(op, &st->dst);
        const void *a = slice_ptr(op, &st->src), *b = slice_ptr(op, &st->src2);
        if (!dst || !a || !b) {
            *st_p = coll__error(comm, COLL_INTERNAL_ERROR, "step %u of %s reduces a NULL buffer",
                                i, s->algo ? s->algo->name : "?");
            return false;
        }
        coll__reduce(dst, a, b, st->dst.count, s->dtype, op->op == COLL_AVG ? COLL_SUM : op->op);
        op->state[i] = STEP_DONE;
        op->ndone++;
        return true;
    }
    if (st->kind == COLL_STEP_COPY) {
        void *dst = slice_ptr(op, &st->dst);
        const void *src = slice_ptr(op, &st->src);
        if (!dst || !src) {
            *st_p = coll__error(comm, COLL_INTERNAL_ERROR, "step %u of %s copies a NULL buffer",
                                i, s->algo ? s->algo->name : "?");
            return false;
        }
        if (dst != src)
            memmove(dst, src, st->dst.count * s->elem_size);
        op->state[i] = STEP_DONE;
        op->ndone++;
        return true;
    }
    /* SEND / RECV: keep per-peer posting order, then make sure the channel is up. */
    prev = op->plan->prev_same[i];
    if (prev != UINT32_MAX && op->state[prev] == STEP_PENDING)
        return false;
    if (!comm->chans[st->peer]) {
        *st_p = comm->tp->connect(comm->tp_ctx, st->peer, &comm->chans[st->peer]);
        if (*st_p != COLL_SUCCESS || !comm->chans[st->peer])
            return false;
    }
    x = &op->xfers[i];
    x->peer = st->peer;
    x->seq = op->seq | op->sig;
    x->tag = op->plan->tag[i];
    if (st->kind == COLL_STEP_SEND) {
        x->buf = slice_ptr(op, &st->src);
        x->len = st->src.count * s->elem_size;
    } else {
        x->buf = slice_ptr(op, &st->dst);
        x->len = st->dst.count * s->elem_size;
    }
    if (!x->buf) {
        *st_p = coll__error(comm, COLL_INTERNAL_ERROR, "step %u of %s moves a NULL buffer", i,
                            s->algo ? s->algo->name : "?");
        return false;
    }
    atomic_store(&x->status, COLL_IN_PROGRESS);
    op->state[i] = STEP_POSTED;
    *st_p = st->kind == COLL_STEP_SEND ? comm->tp->post_send(comm->chans[st->peer], x)
                                       : comm->tp->post_recv(comm->chans[st->peer], x);
    return *st_p == COLL_SUCCESS;
}

bool coll__exec_advance(struct coll_op *op)
{
    struct coll_comm *comm = op->comm;
    const struct coll_schedule *s = &op->plan->sched;
    coll_status_t st = COLL_SUCCESS;
    bool moved = false, again = true;
    int failed;

    if (atomic_load(&op->status) != COLL_IN_PROGRESS)
        return false;
    failed = atomic_load(&comm->failed);
    if (failed != COLL_SUCCESS) {
        atomic_store(&op->status, failed);
        return true;
    }
    if (!op->started) {
        st = exec_start(op);
        if (st != COLL_SUCCESS)
            goto fail;
        moved = true;
    }
    while (again) {
        again = false;
        for (uint32_t i = op->first_pending; i < s->nsteps; i++) {
            uint8_t state = op->state[i];

            if (state == STEP_DONE)
                continue;
            if (state == STEP_POSTED) {
                int xs = atomic_load(&op->xfers[i].status);
                if (xs == COLL_IN_PROGRESS)
                    continue;
                if (xs != COLL_SUCCESS) {
                    st = (coll_status_t)xs;
                    goto fail;
                }
                op->state[i] = STEP_DONE;
                op->ndone++;
                moved = again = true;
                continue;
            }
            if (exec_try_start(op, i, &st)) {
                moved = true;
                /* a transfer may complete inside post: look at it again this pass */
                if (op->state[i] == STEP_POSTED &&
                    atomic_load(&op->xfers[i].status) != COLL_IN_PROGRESS)
                    i--;
            } else if (st != COLL_SUCCESS) {
                goto fail;
            }
        }
        while (op->first_pending < s->nsteps && op->state[op->first_pending] == STEP_DONE)
            op->first_pending++;
    }
    if (moved)
        op->last_progress_ns = coll__now_ns();
    if (op->ndone == s->nsteps)
        exec_finish(op);
    return moved;

fail:
    failed = atomic_load(&comm->failed);
    if (failed == COLL_SUCCESS) {
        coll__comm_fail(comm, st);
        failed = st;
    }
    atomic_store(&op->status, failed);
    return true;
}

void coll__exec_describe_wait(const struct coll_op *op, char *buf, size_t n)
{
    const struct coll_schedule *s = &op->plan->sched;
    size_t o = 0;
    int listed = 0;

    buf[0] = '\0';
    if (!op->started) {
        snprintf(buf, n, "not started");
        return;
    }
    for (uint32_t i = op->first_pending; i < s->nsteps && listed < 4 && o + 1 < n; i++) {
        const struct coll_step *st = &s->steps[i];
        int w;
        if (op->state[i] != STEP_POSTED ||
            (st->kind != COLL_STEP_SEND && st->kind != COLL_STEP_RECV))
            continue;
        w = snprintf(buf + o, n - o, "%s%s rank %d (%zu bytes)", listed ? ", " : "",
                     st->kind == COLL_STEP_SEND ? "send to" : "receive from", st->peer,
                     op->xfers[i].len);
        if (w < 0)
            break;
        o += (size_t)w < n - o ? (size_t)w : n - o - 1;
        listed++;
    }
    if (!listed)
        snprintf(buf, n, "step %u of %u (waiting for a connection)", op->first_pending,
                 s->nsteps);
}

void coll__exec_release(struct coll_op *op)
{
    free(op->state);
    free(op->xfers);
    op->state = NULL;
    op->xfers = NULL;
}
