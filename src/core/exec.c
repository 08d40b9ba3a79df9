/*
 * exec.c - the executor: runs one rank's schedules of one op over the transports.
 *
 * A pass walks each part's steps from the first unfinished one: a step whose dependencies
 * are done starts (sends and receives are posted to their channel, reductions and copies
 * run at once); posted transfers are checked for completion. Chunked schedules therefore
 * pipeline by themselves: while chunk k is being received, chunk k-1 is reduced and chunk
 * k-2 sent.
 *
 * Matching: the messages this rank sends to a peer are numbered in order across the op's
 * parts (part by part, then step by step), and so are the messages it receives from a peer.
 * A message is posted only when all messages with lower numbers the same way have been, and
 * its number travels as the tag. Both ends number the same way, so the k-th send matches
 * the k-th receive over a FIFO link, and the receiver can check it.
 */
#include "exec.h"
#include "trace.h"
#include "../reduce/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCRATCH_ALIGN 64

static uint8_t *buf_base(const struct coll_part *p, uint8_t buf)
{
    switch (buf) {
    case COLL_BUF_SEND:
        return (uint8_t *)p->sendbuf;
    case COLL_BUF_RECV:
        return p->recvbuf;
    case COLL_BUF_SCRATCH:
        return p->scratch;
    }
    return NULL;
}

static void *slice_ptr(const struct coll_part *p, const struct coll_slice *sl)
{
    uint8_t *base = buf_base(p, sl->buf);
    return base ? base + sl->off * p->plan->sched.elem_size : NULL;
}

static size_t scratch_bytes(const struct coll_part *p)
{
    const struct coll_schedule *s = &p->plan->sched;
    size_t b = s->buf_count[COLL_BUF_SCRATCH] * s->elem_size;
    return (b + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN;
}

/* Steps of a part's executor arrays: at least one, so that an empty schedule still has
 * valid (never read) arrays. */
static uint32_t part_nsteps(const struct coll_part *p)
{
    return p->plan->sched.nsteps ? p->plan->sched.nsteps : 1;
}

static coll_status_t exec_start(struct coll_op *op)
{
    struct coll_comm *comm = op->comm;
    size_t n2 = 2 * (size_t)comm->nranks, scratch = 0, off = 0, nsteps_all = 0;
    struct coll_xfer *xf;
    uint32_t *u32;
    uint8_t *st8;

    /* One zeroed block per op for all executor arrays (a small call's allocations are a
     * visible part of its latency): the transfers first, as they need the widest alignment,
     * then posted and the parts' bases, then the step states. */
    for (int k = 0; k < op->nparts; k++)
        nsteps_all += part_nsteps(&op->parts[k]);
    op->exec_mem = calloc(1, nsteps_all * (sizeof(*xf) + 1) +
                                 (size_t)(op->nparts + 1) * n2 * sizeof(*u32));
    if (!op->exec_mem)
        goto out_nomem;
    xf = op->exec_mem;
    u32 = (uint32_t *)(void *)(xf + nsteps_all);
    st8 = (uint8_t *)(u32 + (size_t)(op->nparts + 1) * n2);
    op->posted = u32;
    u32 += n2;
    for (int k = 0; k < op->nparts; k++) {
        struct coll_part *p = &op->parts[k];
        uint32_t nsteps = part_nsteps(p);

        p->xfers = xf;
        p->base = u32;
        p->state = st8;
        xf += nsteps;
        u32 += n2;
        st8 += nsteps;
        if (k > 0)
            for (size_t i = 0; i < n2; i++)
                p->base[i] = op->parts[k - 1].base[i] + op->parts[k - 1].plan->nmsgs[i];
        scratch += scratch_bytes(p);
    }
    if (scratch > comm->scratch_bytes) {
        void *mem = realloc(comm->scratch, scratch);
        if (!mem)
            return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for %zu bytes of scratch",
                               scratch);
        comm->scratch = mem;
        comm->scratch_bytes = scratch;
    }
    for (int k = 0; k < op->nparts; k++) {
        op->parts[k].scratch = (uint8_t *)comm->scratch + off;
        off += scratch_bytes(&op->parts[k]);
    }
    op->started = true;
    op->stall_said = false;
    op->last_progress_ns = coll__now_coarse_ns();
    COLL_TRACE_HOOK(comm, op_begin, op);
    if (op->csig && comm->on_call_start)
        comm->on_call_start(comm, op->wire_seq, op->csig);
    COLL_TRACE(COLL_SUB_COLL, "%s #%llu start: %d part(s), algo %s, %u steps",
               coll__coll_name(op->parts[0].coll), (unsigned long long)op->seq, op->nparts,
               op->parts[0].plan->sched.algo ? op->parts[0].plan->sched.algo->name : "-",
               op->parts[0].plan->sched.nsteps);
    return COLL_SUCCESS;

out_nomem:
    return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory starting an operation");
}

static bool deps_done(const struct coll_part *p, const struct coll_step *st)
{
    for (uint32_t d = 0; d < st->ndeps; d++)
        if (p->state[st->deps[d]] != STEP_DONE)
            return false;
    return true;
}

/* Where the result of a reducing collective lands on this rank, for the division of AVG:
 * its receive buffer, where it passes one. */
static size_t avg_count(const struct coll_comm *comm, const struct coll_part *p)
{
    const struct coll_coll_desc *d = coll__coll_desc(p->coll);

    if (!d || !d->reduces || !coll__desc_uses_recv(d, comm->rank, p->root, 0))
        return 0;
    return coll__blocks_count(d->recv_blocks, p->plan->args.count, comm->nranks);
}

static void part_finish(struct coll_op *op, struct coll_part *p)
{
    size_t n = avg_count(op->comm, p);

    if (p->op == COLL_AVG && n > 0)
        coll__reduce_div(p->recvbuf, n, p->plan->args.dtype, (uint64_t)op->comm->nranks);
    p->finished = true;
}

static coll_status_t null_buffer(struct coll_op *op, const struct coll_part *p, uint32_t i)
{
    const struct coll_schedule *s = &p->plan->sched;
    return coll__error(op->comm, COLL_INTERNAL_ERROR, "step %u of %s %s touches a NULL buffer",
                       i, s->algo ? s->algo->name : "p2p", coll__coll_name(p->coll));
}

/* Start step i of part p if it can start. Returns true if it started; errors in *st_p. */
static bool exec_try_start(struct coll_op *op, struct coll_part *p, uint32_t i,
                           coll_status_t *st_p)
{
    struct coll_comm *comm = op->comm;
    const struct coll_schedule *s = &p->plan->sched;
    const struct coll_step *st = &s->steps[i];
    struct coll_xfer *x;
    struct coll_chan *ch;
    size_t way;
    uint32_t tag;

    if (!deps_done(p, st))
        return false;
    COLL_TRACE_HOOK(comm, step_begin, op, p, i);
    if (st->kind == COLL_STEP_REDUCE) {
        void *dst = slice_ptr(p, &st->dst);
        const void *a = slice_ptr(p, &st->src), *b = slice_ptr(p, &st->src2);
        if (!dst || !a || !b) {
            *st_p = null_buffer(op, p, i);
            return false;
        }
        coll__reduce(dst, a, b, st->dst.count, s->dtype, p->op == COLL_AVG ? COLL_SUM : p->op);
        p->state[i] = STEP_DONE;
        p->ndone++;
        COLL_TRACE_HOOK(comm, step_done, op, p, i);
        return true;
    }
    if (st->kind == COLL_STEP_COPY) {
        void *dst = slice_ptr(p, &st->dst);
        const void *src = slice_ptr(p, &st->src);
        if (!dst || !src) {
            *st_p = null_buffer(op, p, i);
            return false;
        }
        if (dst != src)
            memmove(dst, src, st->dst.count * s->elem_size);
        p->state[i] = STEP_DONE;
        p->ndone++;
        COLL_TRACE_HOOK(comm, step_done, op, p, i);
        return true;
    }
    /* SEND / RECV: only the next message of its way to its peer may be posted */
    way = (size_t)st->peer * 2 + (st->kind == COLL_STEP_RECV);
    tag = p->base[way] + p->plan->tag[i];
    if (op->posted[way] != tag)
        return false;
    if (!comm->chans[st->peer]) {
        const struct coll_transport *tp = comm->peer_tp[st->peer];
        *st_p = tp->connect(comm->tp_ctx[coll__transport_index(tp)], st->peer,
                            &comm->chans[st->peer]);
        if (*st_p != COLL_SUCCESS || !comm->chans[st->peer])
            return false;
    }
    x = &p->xfers[i];
    x->peer = st->peer;
    x->seq = op->wire_seq | op->sig;
    x->sig = &p->call.sig;
    x->tag = tag;
    if (st->kind == COLL_STEP_SEND) {
        x->buf = slice_ptr(p, &st->src);
        x->len = st->src.count * s->elem_size;
    } else {
        x->buf = slice_ptr(p, &st->dst);
        x->len = st->dst.count * s->elem_size;
    }
    if (!x->buf) {
        *st_p = null_buffer(op, p, i);
        return false;
    }
    atomic_store(&x->status, COLL_IN_PROGRESS);
    p->state[i] = STEP_POSTED;
    op->posted[way]++;
    COLL_TRACE_HOOK(comm, step_posted, op, p, i);
    ch = comm->chans[st->peer];
    if (st->kind == COLL_STEP_SEND)
        atomic_fetch_add_explicit(&comm->bytes_sent, x->len, memory_order_relaxed);
    comm->msg_balance += st->kind == COLL_STEP_SEND ? 1 : -1;
    *st_p = st->kind == COLL_STEP_SEND ? ch->tp->post_send(ch, x) : ch->tp->post_recv(ch, x);
    return *st_p == COLL_SUCCESS;
}

/* One pass over part p. Returns true if anything moved. */
static bool part_advance(struct coll_op *op, struct coll_part *p, coll_status_t *st_p)
{
    const struct coll_schedule *s = &p->plan->sched;
    bool moved = false, again = true;

    while (again && *st_p == COLL_SUCCESS) {
        again = false;
        for (uint32_t i = p->first_pending; i < s->nsteps; i++) {
            uint8_t state = p->state[i];

            if (state == STEP_DONE)
                continue;
            if (state == STEP_POSTED) {
                int xs = atomic_load(&p->xfers[i].status);
                if (xs == COLL_IN_PROGRESS)
                    continue;
                if (xs != COLL_SUCCESS) {
                    *st_p = (coll_status_t)xs;
                    return true;
                }
                p->state[i] = STEP_DONE;
                p->ndone++;
                COLL_TRACE_HOOK(op->comm, step_done, op, p, i);
                moved = again = true;
                continue;
            }
            if (exec_try_start(op, p, i, st_p)) {
                moved = true;
                /* a transfer may complete inside post: look at it again this pass */
                if (p->state[i] == STEP_POSTED &&
                    atomic_load(&p->xfers[i].status) != COLL_IN_PROGRESS)
                    i--;
            } else if (*st_p != COLL_SUCCESS) {
                return true;
            }
        }
        while (p->first_pending < s->nsteps && p->state[p->first_pending] == STEP_DONE)
            p->first_pending++;
    }
    if (p->ndone == s->nsteps && !p->finished)
        part_finish(op, p);
    return moved;
}

bool coll__exec_advance(struct coll_op *op)
{
    struct coll_comm *comm = op->comm;
    coll_status_t st = COLL_SUCCESS;
    bool moved = false, all_done = true;
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
    for (int k = 0; k < op->nparts; k++) {
        struct coll_part *p = &op->parts[k];
        if (p->finished)
            continue;
        moved |= part_advance(op, p, &st);
        if (st != COLL_SUCCESS)
            goto fail;
        all_done &= p->finished;
    }
    if (moved)
        op->last_progress_ns = coll__now_coarse_ns();
    if (all_done) {
        COLL_TRACE_HOOK(comm, op_end, op, COLL_SUCCESS);
        atomic_store(&op->status, COLL_SUCCESS);
    }
    return moved;

fail:
    failed = atomic_load(&comm->failed);
    if (failed == COLL_SUCCESS) {
        coll__comm_fail(comm, st);
        failed = st;
    }
    COLL_TRACE_HOOK(comm, op_end, op, (coll_status_t)failed);
    atomic_store(&op->status, failed);
    return true;
}

void coll__exec_probe_waits(const struct coll_op *op)
{
    struct coll_comm *comm = op->comm;

    if (!op->started || !op->csig)
        return;
    for (int k = 0; k < op->nparts; k++) {
        const struct coll_part *p = &op->parts[k];
        const struct coll_schedule *s = &p->plan->sched;
        for (uint32_t i = p->first_pending; i < s->nsteps; i++) {
            const struct coll_step *st = &s->steps[i];
            struct coll_chan *ch;
            if (p->state[i] != STEP_POSTED || st->kind != COLL_STEP_RECV)
                continue;
            ch = comm->chans[st->peer];
            if (ch && ch->tp->stalled)
                ch->tp->stalled(ch, op->wire_seq, op->csig);
        }
    }
}

void coll__exec_describe_wait(const struct coll_op *op, char *buf, size_t n)
{
    size_t o = 0;
    int listed = 0;

    buf[0] = '\0';
    if (!op->started) {
        snprintf(buf, n, "not started");
        return;
    }
    for (int k = 0; k < op->nparts; k++) {
        const struct coll_part *p = &op->parts[k];
        const struct coll_schedule *s = &p->plan->sched;
        for (uint32_t i = p->first_pending; i < s->nsteps && listed < 4 && o + 1 < n; i++) {
            const struct coll_step *st = &s->steps[i];
            int w;
            if (p->state[i] != STEP_POSTED ||
                (st->kind != COLL_STEP_SEND && st->kind != COLL_STEP_RECV))
                continue;
            w = snprintf(buf + o, n - o, "%s%s rank %d (%zu bytes)", listed ? ", " : "",
                         st->kind == COLL_STEP_SEND ? "send to" : "receive from", st->peer,
                         p->xfers[i].len);
            if (w < 0)
                break;
            o += (size_t)w < n - o ? (size_t)w : n - o - 1;
            listed++;
        }
    }
    if (listed)
        return;
    /* nothing posted: the first step to come names the peer it waits to reach */
    for (int k = 0; k < op->nparts; k++) {
        const struct coll_part *p = &op->parts[k];
        const struct coll_schedule *s = &p->plan->sched;
        for (uint32_t i = p->first_pending; i < s->nsteps; i++) {
            const struct coll_step *st = &s->steps[i];
            if (p->state[i] != STEP_PENDING ||
                (st->kind != COLL_STEP_SEND && st->kind != COLL_STEP_RECV))
                continue;
            snprintf(buf, n, "%s rank %d (%s)",
                     st->kind == COLL_STEP_SEND ? "a send to" : "a receive from", st->peer,
                     op->comm->chans[st->peer] ? "behind an earlier step"
                                               : "no connection to it yet");
            return;
        }
    }
    snprintf(buf, n, "a connection to a peer, or a step blocked behind one");
}

void coll__exec_release(struct coll_op *op)
{
    for (int k = 0; k < op->nparts; k++) {
        struct coll_part *p = &op->parts[k];
        p->state = NULL;
        p->xfers = NULL;
        p->base = NULL;
    }
    free(op->exec_mem);
    op->exec_mem = NULL;
    op->posted = NULL;
}
