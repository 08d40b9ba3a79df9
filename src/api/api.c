/*
 * api.c - the public collectives, point-to-point calls, groups and split.
 *
 * Every call is checked first (each bad argument is COLL_INVALID_ARGUMENT with a message
 * naming it), then becomes a `struct call`; outside a group the call is issued at once as
 * a one-part op and waited for (blocking) or handed back as a request; inside a group it is
 * recorded, and coll_group_end turns all the group's calls on one comm into one op.
 */
#include "comm.h"
#include "../core/agree.h"
#include "../core/check.h"
#include "../core/exec.h"
#include "../path/stream.h"
#include "../path/path.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

COLL_API const char *coll_last_error(const coll_comm_t *comm)
{
    if (!comm || coll__comm_check(comm, "coll_last_error") != COLL_SUCCESS)
        return coll__thread_error(); /* for a handle that is not a live comm: why not */
    /* comm->errmsg only changes under errlock; the caller owns the comm's thread, and abort
     * writes are complete strings, so returning the buffer is safe enough for a message. */
    return comm->errmsg;
}

/* This thread's open group. */
static _Thread_local struct {
    int depth;
    coll_status_t err;
    struct coll_call *calls;
    size_t n, cap;
} grp;

bool coll__group_active(void)
{
    return grp.depth > 0;
}

/* ---- checks ---------------------------------------------------------------------------- */

/* The comm is live (a handle coll made and has not destroyed), then coll__check_common. */
static coll_status_t check_common(struct coll_comm *comm, const char *fn, size_t count,
                                  coll_dtype_t dtype, coll_op_t op, bool has_op)
{
    if (coll__comm_check(comm, fn) != COLL_SUCCESS) /* NULL, destroyed or never made */
        return COLL_INVALID_ARGUMENT;
    return coll__check_common(comm, fn, count, dtype, op, has_op, 0);
}

/* Every argument of a call, by its collective's row (src/core/check.c). */
static coll_status_t check_call(struct coll_call *c, const char *fn)
{
    if (coll__comm_check(c->comm, fn) != COLL_SUCCESS)
        return COLL_INVALID_ARGUMENT;
    return coll__check_call(c, fn, 0);
}

/* ---- issuing --------------------------------------------------------------------------- */

static uint64_t call_signature(const struct coll_call *c)
{
    uint64_t v[6] = {(uint64_t)c->coll, (uint64_t)c->dtype, (uint64_t)c->op,
                     (uint64_t)c->count, (uint64_t)c->root, (uint64_t)c->p2p};
    return coll__hash64(v, sizeof(v), 0x636f6c6c);
}

static coll_status_t part_plan(const struct coll_call *c, coll_run_fn run, struct coll_part *p)
{
    struct coll_comm *comm = c->comm;
    struct coll_algo_args args;
    coll_status_t st;

    p->coll = c->coll;
    p->op = c->op;
    p->root = c->root;
    p->sendbuf = c->sendbuf;
    p->recvbuf = c->recvbuf;
    p->call = *c;
    p->run = run;
    coll__call_sig(c, &p->call.sig);
    if (run) {
        coll__sig_how(&p->call.sig, NULL, 0);
        return COLL_SUCCESS; /* no executor messages: nothing carries the hash below */
    }
    p->sig = call_signature(c);
    if (c->coll == COLL_COLL_SENDRECV)
        return coll__plan_p2p(comm, c->p2p, c->peer, c->count, c->dtype, &p->plan);
    coll__call_args(c, &args);
    st = coll__plan_get(comm, &args, coll__select, &p->plan);
    if (st == COLL_SUCCESS)
        coll__sig_how(&p->call.sig, p->plan->sched.algo, p->plan->args.chunk_count);
    return st;
}

/* One op on calls[0].comm from n calls (all on that comm), queued on return. */
/* run: the path's run hook when every call is that path's (the engine runs them in turn),
 * NULL for the sched path. */
static coll_status_t issue(const struct coll_call *calls, int n, coll_run_fn run,
                           bool is_request, struct coll_op **op_p)
{
    struct coll_comm *comm = calls[0].comm;
    struct coll_op *op = coll__op_new(comm, n);
    uint64_t sig = 0;
    coll_status_t st;

    if (!op)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for an operation");
    for (int k = 0; k < n; k++) {
        st = part_plan(&calls[k], run, &op->parts[k]);
        if (st != COLL_SUCCESS) {
            coll__op_free(op);
            return st;
        }
        op->nparts++;
        /* point-to-point parts differ between ranks by design (and lengths are checked
         * anyway): only collectives go into the signature every rank must agree on */
        if (calls[k].coll != COLL_COLL_SENDRECV) {
            sig = sig * 31 + op->parts[k].sig;
            op->has_coll = true;
        }
    }
    op->sig = (sig & 0xffffull) << 48;
    op->runs = run != NULL;
    op->is_request = is_request;
    coll__engine_submit(comm, op);
    *op_p = op;
    return COLL_SUCCESS;
}

static coll_status_t finish(struct coll_comm *comm, struct coll_op *op)
{
    coll_status_t st = coll__engine_wait(comm, op, true);
    coll__op_done(comm, op);
    if (st != COLL_SUCCESS)
        coll__set_thread_error(comm->errmsg);
    return st;
}

static coll_status_t group_record(const struct coll_call *c)
{
    if (grp.n == grp.cap) {
        size_t cap = grp.cap ? 2 * grp.cap : 16;
        struct coll_call *mem = realloc(grp.calls, cap * sizeof(*mem));
        if (!mem)
            return grp.err = coll__error(c->comm, COLL_SYSTEM_ERROR,
                                         "out of memory recording a grouped call");
        grp.calls = mem;
        grp.cap = cap;
    }
    grp.calls[grp.n++] = *c;
    return COLL_SUCCESS;
}

/* Checking mode (COLL_CHECK=1): every rank gathers every rank's signature of the call
 * before it runs, so that all of them see the same disagreement and all fail in this call.
 * The gather is itself a call on the comm (its own number), through the same paths. */
static coll_status_t run(const struct coll_call *c, coll_request_t **req_p, const char *fn);
static const char check_fn[] = "COLL_CHECK";

static coll_status_t check_mode(const struct coll_call *c)
{
    struct coll_comm *comm = c->comm;
    struct coll_sig mine, *all;
    uint8_t me[COLL_SIG_BYTES], *wire;
    struct coll_call g = {.comm = comm, .coll = COLL_COLL_ALLGATHER, .count = COLL_SIG_BYTES,
                          .dtype = COLL_UINT8, .op = COLL_SUM, .peer = -1};
    coll_status_t st;
    int bad = -1;

    coll__call_sig(c, &mine);
    coll__sig_put(me, &mine);
    wire = malloc((size_t)comm->nranks * (COLL_SIG_BYTES + sizeof(*all)));
    if (!wire)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory checking a call");
    all = (struct coll_sig *)(void *)(wire + (size_t)comm->nranks * COLL_SIG_BYTES);
    g.sendbuf = me;
    g.recvbuf = wire;
    st = run(&g, NULL, check_fn);
    for (int r = 0; st == COLL_SUCCESS && r < comm->nranks; r++) {
        coll__sig_get(wire + (size_t)r * COLL_SIG_BYTES, &all[r]);
        if (bad < 0 && !coll__sig_agree(&all[r], &mine))
            bad = r;
    }
    if (st == COLL_SUCCESS && bad >= 0) {
        char why[640];
        uint64_t cseq = atomic_load(&comm->next_coll_seq);
        coll__agree_explain(comm, bad, cseq, &all[bad], cseq, &mine, why, sizeof(why));
        pthread_mutex_lock(&comm->lock);
        st = coll__fail(comm, COLL_REMOTE_ERROR, "%s (COLL_CHECK)", why);
        pthread_mutex_unlock(&comm->lock);
        coll__set_thread_error(comm->errmsg);
    }
    free(wire);
    return st;
}

/* A checked call: record it in the open group, or issue it. */
static coll_status_t run(const struct coll_call *call, coll_request_t **req_p, const char *fn)
{
    struct coll_call form = *call;
    const struct coll_call *c = &form;
    struct coll_op *op = NULL;
    struct coll_choice ch;
    coll_status_t st;

    if (grp.depth > 0) {
        if (req_p)
            return grp.err = coll__error(c->comm, COLL_INVALID_USAGE,
                                         "%s: non-blocking calls cannot be grouped", fn);
        form.form = COLL_FORM_GROUPED;
        return group_record(c);
    }
    form.form = req_p ? COLL_FORM_REQUEST : COLL_FORM_BLOCKING;
    if (c->coll == COLL_COLL_SENDRECV && c->peer == c->comm->rank)
        return coll__error(c->comm, COLL_INVALID_USAGE,
                           "%s: a send to or receive from oneself outside a group would wait "
                           "for itself; pair them in coll_group_start/end",
                           fn);
    /* the chooser decides locally (no message): asked before COLL_CHECK's gather, so that a
     * path that takes the call over (COLL_QUANT's, a sequence of collectives of its own)
     * runs it as it always has, without the check */
    st = coll__choose(c->comm, c, false, &ch);
    if (st != COLL_SUCCESS)
        return st;
    if (ch.path->submit)
        return ch.path->submit(c->comm, c);
    if (c->comm->cfg.check && c->coll != COLL_COLL_SENDRECV && fn != check_fn) {
        st = check_mode(c);
        if (st != COLL_SUCCESS)
            return st;
    }
    /* a blocking call on a path that runs calls by itself runs right here: no op, no queue */
    if (!req_p && ch.path->run)
        return coll__path_run_now(c->comm, ch.path, c);
    st = issue(c, 1, ch.path->run, req_p != NULL, &op);
    if (st != COLL_SUCCESS)
        return st;
    if (req_p) {
        coll__path_note_request(c->comm);
        *req_p = (coll_request_t *)op;
        return COLL_SUCCESS;
    }
    return finish(c->comm, op);
}

/* Inside a group, a failed check is remembered so that coll_group_end reports it too. */
static coll_status_t fail_call(coll_status_t st)
{
    if (grp.depth > 0 && grp.err == COLL_SUCCESS)
        grp.err = st;
    return st;
}

#define CHECK_CALL(expr)                                                                \
    do {                                                                                \
        coll_status_t st_ = (expr);                                                     \
        if (st_ != COLL_SUCCESS)                                                        \
            return fail_call(st_);                                                      \
    } while (0)

static coll_status_t check_req_p(coll_comm_t *comm, coll_request_t **req_p, const char *fn)
{
    if (req_p)
        return COLL_SUCCESS;
    return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: req_p is NULL", fn);
}

/* ---- collectives ----------------------------------------------------------------------- */

static struct coll_call call_of(coll_comm_t *comm, enum coll_coll coll, const void *sendbuf,
                                void *recvbuf, size_t count, coll_dtype_t dtype, coll_op_t op,
                                int root)
{
    return (struct coll_call){.comm = comm, .coll = coll, .sendbuf = sendbuf,
                              .recvbuf = recvbuf, .count = count, .dtype = dtype, .op = op,
                              .root = root, .peer = -1};
}

/* A collective: checked by its row, then run or recorded in the open group (the chooser
 * then names its path: COLL_QUANT's quantized all-reduce among them). */
static coll_status_t do_call(struct coll_call c, coll_request_t **req_p, const char *fn)
{
    CHECK_CALL(check_call(&c, fn));
    return run(&c, req_p, fn);
}

static coll_status_t do_p2p(uint8_t kind, const void *buf, size_t count, coll_dtype_t dtype,
                            int peer, coll_comm_t *comm, coll_request_t **req_p, const char *fn)
{
    struct coll_call c = {.comm = comm, .coll = COLL_COLL_SENDRECV, .count = count,
                          .dtype = dtype, .op = COLL_SUM, .p2p = kind, .peer = peer};

    if (kind == COLL_STEP_SEND)
        c.sendbuf = buf;
    else
        c.recvbuf = (void *)buf;
    return do_call(c, req_p, fn);
}

COLL_API coll_status_t coll_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                      coll_dtype_t dtype, coll_op_t op, coll_comm_t *comm)
{
    return do_call(call_of(comm, COLL_COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0),
                        NULL, "coll_allreduce");
}

COLL_API coll_status_t coll_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                      coll_dtype_t dtype, int root, coll_comm_t *comm)
{
    return do_call(call_of(comm, COLL_COLL_BROADCAST, sendbuf, recvbuf, count, dtype, COLL_SUM,
                           root),
                   NULL, "coll_broadcast");
}

COLL_API coll_status_t coll_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                   coll_dtype_t dtype, coll_op_t op, int root, coll_comm_t *comm)
{
    return do_call(call_of(comm, COLL_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root),
                   NULL, "coll_reduce");
}

COLL_API coll_status_t coll_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                      coll_dtype_t dtype, coll_comm_t *comm)
{
    return do_call(call_of(comm, COLL_COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype,
                           COLL_SUM, 0),
                   NULL, "coll_allgather");
}

COLL_API coll_status_t coll_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                           coll_dtype_t dtype, coll_op_t op, coll_comm_t *comm)
{
    return do_call(call_of(comm, COLL_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype,
                           op, 0),
                   NULL, "coll_reduce_scatter");
}

COLL_API coll_status_t coll_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                                     coll_dtype_t dtype, coll_comm_t *comm)
{
    return do_call(call_of(comm, COLL_COLL_ALLTOALL, sendbuf, recvbuf, count, dtype, COLL_SUM,
                           0),
                   NULL, "coll_alltoall");
}

COLL_API coll_status_t coll_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                   coll_dtype_t dtype, int root, coll_comm_t *comm)
{
    return do_call(call_of(comm, COLL_COLL_GATHER, sendbuf, recvbuf, sendcount, dtype,
                           COLL_SUM, root),
                   NULL, "coll_gather");
}

COLL_API coll_status_t coll_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                    coll_dtype_t dtype, int root, coll_comm_t *comm)
{
    return do_call(call_of(comm, COLL_COLL_SCATTER, sendbuf, recvbuf, recvcount, dtype,
                           COLL_SUM, root),
                   NULL, "coll_scatter");
}

COLL_API coll_status_t coll_barrier(coll_comm_t *comm)
{
    return do_call(call_of(comm, COLL_COLL_BARRIER, NULL, NULL, 0, COLL_UINT8, COLL_SUM, 0),
                   NULL, "coll_barrier");
}

COLL_API coll_status_t coll_send(const void *sendbuf, size_t count, coll_dtype_t dtype, int peer,
                                 coll_comm_t *comm)
{
    return do_p2p(COLL_STEP_SEND, sendbuf, count, dtype, peer, comm, NULL, "coll_send");
}

COLL_API coll_status_t coll_recv(void *recvbuf, size_t count, coll_dtype_t dtype, int peer,
                                 coll_comm_t *comm)
{
    return do_p2p(COLL_STEP_RECV, recvbuf, count, dtype, peer, comm, NULL, "coll_recv");
}

/* One block of an all-to-all-v: [off, off + len) bytes of one of the two buffers. */
struct a2av_block {
    uintptr_t off, end;
    bool recv;
};

static int a2av_block_cmp(const void *a, const void *b)
{
    const struct a2av_block *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Does a block sendbuf sends from overlap a block recvbuf receives into? The spans first
 * (O(n)); only when they meet, every block, sorted by start (O(n log n)): a send block that
 * starts before the furthest end of the receive blocks started so far overlaps one, and the
 * other way round. */
static coll_status_t a2av_check_overlap(struct coll_comm *comm, const char *fn,
                                        const void *sendbuf, const size_t *sendcounts,
                                        const size_t *sdispls, const void *recvbuf,
                                        const size_t *recvcounts, const size_t *rdispls,
                                        size_t esz)
{
    uintptr_t slo = UINTPTR_MAX, shi = 0, rlo = UINTPTR_MAX, rhi = 0, send_end = 0, recv_end = 0;
    struct a2av_block *b;
    size_t nb = 0, n = (size_t)comm->nranks;
    coll_status_t st = COLL_SUCCESS;

    for (size_t j = 0; j < n; j++) {
        uintptr_t s = (uintptr_t)sendbuf + sdispls[j] * esz;
        uintptr_t r = (uintptr_t)recvbuf + rdispls[j] * esz;

        if (sendcounts[j] > 0) {
            slo = COLL_MIN(slo, s);
            shi = COLL_MAX(shi, s + sendcounts[j] * esz);
        }
        if (recvcounts[j] > 0) {
            rlo = COLL_MIN(rlo, r);
            rhi = COLL_MAX(rhi, r + recvcounts[j] * esz);
        }
    }
    if (slo >= shi || rlo >= rhi || shi <= rlo || rhi <= slo)
        return COLL_SUCCESS;
    b = malloc(2 * n * sizeof(*b));
    if (!b)
        return coll__error(comm, COLL_SYSTEM_ERROR, "%s: out of memory", fn);
    for (size_t j = 0; j < n; j++) {
        uintptr_t s = (uintptr_t)sendbuf + sdispls[j] * esz;
        uintptr_t r = (uintptr_t)recvbuf + rdispls[j] * esz;

        if (sendcounts[j] > 0)
            b[nb++] = (struct a2av_block){s, s + sendcounts[j] * esz, false};
        if (recvcounts[j] > 0)
            b[nb++] = (struct a2av_block){r, r + recvcounts[j] * esz, true};
    }
    qsort(b, nb, sizeof(*b), a2av_block_cmp);
    for (size_t i = 0; i < nb && st == COLL_SUCCESS; i++) {
        if (b[i].off < (b[i].recv ? send_end : recv_end))
            st = coll__error(comm, COLL_INVALID_ARGUMENT,
                             "%s: a block of sendbuf overlaps a block of recvbuf (in place is "
                             "sendbuf == recvbuf with the same counts and displacements)",
                             fn);
        if (b[i].recv)
            recv_end = COLL_MAX(recv_end, b[i].end);
        else
            send_end = COLL_MAX(send_end, b[i].end);
    }
    free(b);
    return st;
}

COLL_API coll_status_t coll_alltoallv(const void *sendbuf, const size_t *sendcounts,
                                      const size_t *sdispls, void *recvbuf,
                                      const size_t *recvcounts, const size_t *rdispls,
                                      coll_dtype_t dtype, coll_comm_t *comm)
{
    static const char fn[] = "coll_alltoallv";
    bool inplace = sendbuf != NULL && sendbuf == recvbuf;
    uint8_t *staged = NULL;
    size_t total = 0;
    coll_status_t st;
    size_t esz;

    CHECK_CALL(check_common(comm, fn, 0, dtype, COLL_SUM, false));
    if (!sendcounts || !sdispls || !recvcounts || !rdispls)
        return fail_call(coll__error(comm, COLL_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                                     !sendcounts ? "sendcounts"
                                     : !sdispls  ? "sdispls"
                                     : !recvcounts ? "recvcounts"
                                                   : "rdispls"));
    esz = coll__dtype_size(dtype);
    for (int j = 0; j < comm->nranks; j++) {
        CHECK_CALL(check_common(comm, fn, sendcounts[j], dtype, COLL_SUM, false));
        CHECK_CALL(check_common(comm, fn, recvcounts[j], dtype, COLL_SUM, false));
        if (sdispls[j] > SIZE_MAX / esz - sendcounts[j] ||
            rdispls[j] > SIZE_MAX / esz - recvcounts[j])
            return fail_call(coll__error(comm, COLL_INVALID_ARGUMENT,
                                         "%s: displacement of rank %d overflows", fn, j));
        CHECK_CALL(coll__check_buf(comm, fn, "sendbuf", sendbuf, sendcounts[j]));
        CHECK_CALL(coll__check_buf(comm, fn, "recvbuf", recvbuf, recvcounts[j]));
        /* in place, as MPI_IN_PLACE: block j goes from and comes back to the same place */
        if (inplace && (sendcounts[j] != recvcounts[j] || sdispls[j] != rdispls[j]))
            return fail_call(coll__error(
                comm, COLL_INVALID_ARGUMENT,
                "%s: in place (sendbuf == recvbuf) needs sendcounts and sdispls equal to "
                "recvcounts and rdispls; for rank %d they are %zu at %zu and %zu at %zu",
                fn, j, sendcounts[j], sdispls[j], recvcounts[j], rdispls[j]));
        if (inplace)
            total = COLL_MAX(total, (rdispls[j] + recvcounts[j]) * esz);
    }
    if (comm->nranks > 0 && sendcounts[comm->rank] != recvcounts[comm->rank])
        return fail_call(coll__error(comm, COLL_INVALID_ARGUMENT,
                                     "%s: sendcounts[%d] = %zu but recvcounts[%d] = %zu", fn,
                                     comm->rank, sendcounts[comm->rank], comm->rank,
                                     recvcounts[comm->rank]));
    if (!inplace)
        CHECK_CALL(a2av_check_overlap(comm, fn, sendbuf, sendcounts, sdispls, recvbuf,
                                      recvcounts, rdispls, esz));
    if (inplace && total > 0) {
        /* a block may arrive before ours has left: send from a copy. The copy lives until
         * the call returns, which in a group is only at the group's end */
        if (coll__group_active())
            return fail_call(coll__error(comm, COLL_INVALID_USAGE,
                                         "%s: in place inside a group (its sends would "
                                         "read after the call returns)",
                                         fn));
        staged = malloc(total);
        if (!staged)
            return fail_call(coll__error(comm, COLL_SYSTEM_ERROR,
                                         "%s: out of memory for %zu bytes to send in place",
                                         fn, total));
        memcpy(staged, sendbuf, total);
        sendbuf = staged;
    }
    /* a group of sends and receives: it cannot deadlock, whatever the counts */
    coll_group_start();
    for (int j = 0; j < comm->nranks; j++) {
        const uint8_t *s = (const uint8_t *)sendbuf + sdispls[j] * esz;
        uint8_t *r = (uint8_t *)recvbuf + rdispls[j] * esz;
        if (sendcounts[j] > 0)
            do_p2p(COLL_STEP_SEND, s, sendcounts[j], dtype, j, comm, NULL, fn);
        if (recvcounts[j] > 0)
            do_p2p(COLL_STEP_RECV, r, recvcounts[j], dtype, j, comm, NULL, fn);
    }
    st = coll_group_end();
    free(staged);
    return st;
}

/* ---- non-blocking ---------------------------------------------------------------------- */

COLL_API coll_status_t coll_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                       coll_dtype_t dtype, coll_op_t op, coll_comm_t *comm,
                                       coll_request_t **req_p)
{
    CHECK_CALL(check_req_p(comm, req_p, "coll_iallreduce"));
    return do_call(call_of(comm, COLL_COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0),
                        req_p, "coll_iallreduce");
}

COLL_API coll_status_t coll_ibroadcast(const void *sendbuf, void *recvbuf, size_t count,
                                       coll_dtype_t dtype, int root, coll_comm_t *comm,
                                       coll_request_t **req_p)
{
    CHECK_CALL(check_req_p(comm, req_p, "coll_ibroadcast"));
    return do_call(call_of(comm, COLL_COLL_BROADCAST, sendbuf, recvbuf, count, dtype, COLL_SUM,
                           root),
                   req_p, "coll_ibroadcast");
}

COLL_API coll_status_t coll_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                                    coll_dtype_t dtype, coll_op_t op, int root,
                                    coll_comm_t *comm, coll_request_t **req_p)
{
    CHECK_CALL(check_req_p(comm, req_p, "coll_ireduce"));
    return do_call(call_of(comm, COLL_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root),
                   req_p, "coll_ireduce");
}

COLL_API coll_status_t coll_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                       coll_dtype_t dtype, coll_comm_t *comm,
                                       coll_request_t **req_p)
{
    CHECK_CALL(check_req_p(comm, req_p, "coll_iallgather"));
    return do_call(call_of(comm, COLL_COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype,
                           COLL_SUM, 0),
                   req_p, "coll_iallgather");
}

COLL_API coll_status_t coll_ireduce_scatter(const void *sendbuf, void *recvbuf,
                                            size_t recvcount, coll_dtype_t dtype, coll_op_t op,
                                            coll_comm_t *comm, coll_request_t **req_p)
{
    CHECK_CALL(check_req_p(comm, req_p, "coll_ireduce_scatter"));
    return do_call(call_of(comm, COLL_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype,
                           op, 0),
                   req_p, "coll_ireduce_scatter");
}

COLL_API coll_status_t coll_ialltoall(const void *sendbuf, void *recvbuf, size_t count,
                                      coll_dtype_t dtype, coll_comm_t *comm,
                                      coll_request_t **req_p)
{
    CHECK_CALL(check_req_p(comm, req_p, "coll_ialltoall"));
    return do_call(call_of(comm, COLL_COLL_ALLTOALL, sendbuf, recvbuf, count, dtype, COLL_SUM,
                           0),
                   req_p, "coll_ialltoall");
}

COLL_API coll_status_t coll_igather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                    coll_dtype_t dtype, int root, coll_comm_t *comm,
                                    coll_request_t **req_p)
{
    CHECK_CALL(check_req_p(comm, req_p, "coll_igather"));
    return do_call(call_of(comm, COLL_COLL_GATHER, sendbuf, recvbuf, sendcount, dtype,
                           COLL_SUM, root),
                   req_p, "coll_igather");
}

COLL_API coll_status_t coll_iscatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                     coll_dtype_t dtype, int root, coll_comm_t *comm,
                                     coll_request_t **req_p)
{
    CHECK_CALL(check_req_p(comm, req_p, "coll_iscatter"));
    return do_call(call_of(comm, COLL_COLL_SCATTER, sendbuf, recvbuf, recvcount, dtype,
                           COLL_SUM, root),
                   req_p, "coll_iscatter");
}

COLL_API coll_status_t coll_ibarrier(coll_comm_t *comm, coll_request_t **req_p)
{
    CHECK_CALL(check_req_p(comm, req_p, "coll_ibarrier"));
    return do_call(call_of(comm, COLL_COLL_BARRIER, NULL, NULL, 0, COLL_UINT8, COLL_SUM, 0),
                   req_p, "coll_ibarrier");
}

COLL_API coll_status_t coll_isend(const void *sendbuf, size_t count, coll_dtype_t dtype,
                                  int peer, coll_comm_t *comm, coll_request_t **req_p)
{
    CHECK_CALL(check_req_p(comm, req_p, "coll_isend"));
    return do_p2p(COLL_STEP_SEND, sendbuf, count, dtype, peer, comm, req_p, "coll_isend");
}

COLL_API coll_status_t coll_irecv(void *recvbuf, size_t count, coll_dtype_t dtype, int peer,
                                  coll_comm_t *comm, coll_request_t **req_p)
{
    CHECK_CALL(check_req_p(comm, req_p, "coll_irecv"));
    return do_p2p(COLL_STEP_RECV, recvbuf, count, dtype, peer, comm, req_p, "coll_irecv");
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
    coll__op_done(comm, op);
    if (st != COLL_SUCCESS)
        coll__set_thread_error(comm->errmsg);
    return st;
}

COLL_API coll_status_t coll_wait(coll_request_t *req)
{
    if (!req)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "coll_wait: req is NULL");
    return finish(((struct coll_op *)req)->comm, (struct coll_op *)req);
}

/* ---- groups ---------------------------------------------------------------------------- */

COLL_API coll_status_t coll_group_start(void)
{
    if (grp.depth == 0) {
        grp.err = COLL_SUCCESS;
        grp.n = 0;
    }
    grp.depth++;
    return COLL_SUCCESS;
}

/* Sends to and receives from oneself pair up, in order, into local copies. */
static coll_status_t pair_self(struct coll_call *calls, size_t n, struct coll_comm *comm)
{
    for (size_t i = 0; i < n; i++) {
        struct coll_call *s = &calls[i];
        size_t j;
        if (s->comm != comm || s->coll != COLL_COLL_SENDRECV || s->peer != comm->rank ||
            s->p2p != COLL_STEP_SEND)
            continue;
        for (j = 0; j < n; j++) {
            struct coll_call *r = &calls[j];
            if (r->comm == comm && r->coll == COLL_COLL_SENDRECV && r->peer == comm->rank &&
                r->p2p == COLL_STEP_RECV)
                break;
        }
        if (j == n)
            return coll__error(comm, COLL_INVALID_USAGE,
                               "coll_group_end: a send to oneself has no matching receive");
        if (calls[j].count != s->count || calls[j].dtype != s->dtype)
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "coll_group_end: a send to oneself of %zu x %s meets a receive "
                               "of %zu x %s",
                               s->count, coll__dtype_name(s->dtype), calls[j].count,
                               coll__dtype_name(calls[j].dtype));
        s->p2p = COLL_STEP_COPY;
        s->recvbuf = calls[j].recvbuf;
        calls[j].comm = NULL; /* consumed */
    }
    for (size_t i = 0; i < n; i++)
        if (calls[i].comm == comm && calls[i].coll == COLL_COLL_SENDRECV &&
            calls[i].peer == comm->rank && calls[i].p2p == COLL_STEP_RECV)
            return coll__error(comm, COLL_INVALID_USAGE,
                               "coll_group_end: a receive from oneself has no matching send");
    return COLL_SUCCESS;
}

/* A group of one comm whose calls all take a path that runs calls by itself: run them in
 * call order on this thread, as coll__path_run_now runs a blocking call. Returns false,
 * with nothing done, for any other group. */
static bool group_runs_now(const struct coll_call *calls, size_t n, coll_status_t *st_p)
{
    struct coll_comm *comm = calls[0].comm;
    const struct coll_path *path = NULL;
    struct coll_choice ch;

    for (size_t i = 0; i < n; i++) {
        if (calls[i].comm != comm || calls[i].coll == COLL_COLL_SENDRECV)
            return false;
        if (coll__choose(comm, &calls[i], false, &ch) != COLL_SUCCESS || !ch.path->run ||
            (path && ch.path != path))
            return false;
        path = ch.path;
    }
    *st_p = COLL_SUCCESS;
    for (size_t i = 0; i < n && *st_p == COLL_SUCCESS; i++)
        *st_p = coll__path_run_now(comm, path, &calls[i]);
    return true;
}

COLL_API coll_status_t coll_group_end(void)
{
    struct coll_op **ops = NULL;
    struct coll_call *calls = grp.calls;
    coll_status_t st = COLL_SUCCESS;
    size_t n = grp.n, nops = 0;

    if (grp.depth == 0)
        return coll__error(NULL, COLL_INVALID_USAGE,
                           "coll_group_end without coll_group_start");
    if (--grp.depth > 0)
        return COLL_SUCCESS;
    /* the group's stream-ordered calls (src/path/stream.c) go onto their streams */
    st = coll__stream_group_end(grp.err != COLL_SUCCESS, grp.n);
    if (st != COLL_SUCCESS && grp.err == COLL_SUCCESS)
        grp.err = st;
    /* the record is this thread's to free now: a thread that ends after its last group
     * must not leave it behind */
    grp.n = 0;
    grp.calls = NULL;
    grp.cap = 0;
    if (grp.err != COLL_SUCCESS) {
        st = grp.err;
        grp.err = COLL_SUCCESS;
        free(calls);
        return st;
    }
    if (n == 0) {
        free(calls);
        return COLL_SUCCESS;
    }
    /* one comm, only calls of a path that runs them itself: in turn, right here, as
     * blocking calls would (the commonest group: one collective, or a few on one comm) */
    if (group_runs_now(calls, n, &st)) {
        free(calls);
        return st;
    }
    ops = calloc(2 * n, sizeof(*ops));
    if (!ops) {
        free(calls);
        return coll__error(NULL, COLL_SYSTEM_ERROR, "out of memory ending a group");
    }
    /* per comm, in the order the comms first appear: an op of the calls a path runs by
     * itself (the flat path's), in call order, then an op of the rest, whose parts run at
     * once. Every rank splits its group the same way (the choice of a path is the same on
     * every rank), and the collectives of a group carry no order against its sends and
     * receives, so running them first cannot deadlock what the group's form would not. */
    for (size_t i = 0; i < n && st == COLL_SUCCESS; i++) {
        struct coll_comm *comm = calls[i].comm;
        struct coll_call *mine;
        coll_run_fn run = NULL;
        int k = 0, kr = 0;
        if (!comm)
            continue;
        st = pair_self(calls + i, n - i, comm);
        if (st != COLL_SUCCESS)
            break;
        mine = malloc(2 * (n - i) * sizeof(*mine));
        if (!mine) {
            st = coll__error(comm, COLL_SYSTEM_ERROR, "out of memory ending a group");
            break;
        }
        /* mine[0 .. kr): the run path's calls; mine[n - i + 0 .. k): the rest */
        for (size_t j = i; j < n && st == COLL_SUCCESS; j++) {
            struct coll_choice ch;
            if (calls[j].comm != comm)
                continue;
            st = coll__choose(comm, &calls[j], false, &ch);
            if (st != COLL_SUCCESS)
                break;
            if (ch.path->run && (!run || run == ch.path->run)) {
                run = ch.path->run;
                mine[kr++] = calls[j];
            } else {
                mine[(n - i) + (size_t)k++] = calls[j];
            }
            calls[j].comm = NULL;
        }
        if (st == COLL_SUCCESS && kr > 0) {
            st = issue(mine, kr, run, false, &ops[nops]);
            if (st == COLL_SUCCESS)
                nops++;
        }
        if (st == COLL_SUCCESS && k > 0) {
            st = issue(mine + (n - i), k, NULL, false, &ops[nops]);
            if (st == COLL_SUCCESS)
                nops++;
        }
        free(mine);
    }
    free(calls);
    /* wait for everything issued, even after a failure: coll owns the ops until then; while
     * this thread drives one comm, the others' progress threads drive theirs */
    for (size_t i = 1; i < nops; i++)
        coll__engine_kick(ops[i]->comm);
    for (size_t i = 0; i < nops; i++) {
        coll_status_t s2 = finish(ops[i]->comm, ops[i]);
        if (st == COLL_SUCCESS)
            st = s2;
    }
    free(ops);
    return st;
}

/* ---- split ----------------------------------------------------------------------------- */

struct split_ent {
    int64_t color, key, rank;
};

static int split_cmp(const void *a, const void *b)
{
    const struct split_ent *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

COLL_API coll_status_t coll_comm_split(coll_comm_t *comm, int color, int key,
                                       coll_comm_t **newcomm_p)
{
    int64_t *table = NULL;
    uint8_t *ids = NULL;
    struct split_ent *mine = NULL;
    coll_status_t st;
    int n, nmine = 0, myrank = -1;

    if (coll__comm_check(comm, "coll_comm_split") != COLL_SUCCESS)
        return COLL_INVALID_ARGUMENT;
    if (!newcomm_p)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "coll_comm_split: newcomm_p is NULL");
    if (color < 0 && color != COLL_SPLIT_NOCOLOR)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "coll_comm_split: color %d is negative and not COLL_SPLIT_NOCOLOR",
                           color);
    if (grp.depth > 0)
        return coll__error(comm, COLL_INVALID_USAGE, "coll_comm_split inside a group");
    n = comm->nranks;
    *newcomm_p = NULL;
    table = calloc((size_t)n * 2, sizeof(*table));
    ids = calloc((size_t)n, COLL_UNIQUE_ID_BYTES);
    mine = calloc((size_t)n, sizeof(*mine));
    if (!table || !ids || !mine) {
        st = coll__error(comm, COLL_SYSTEM_ERROR, "coll_comm_split: out of memory");
        goto out;
    }
    /* everyone's (color, key): each rank fills its slot, a sum fills the rest */
    table[2 * comm->rank] = color;
    table[2 * comm->rank + 1] = key;
    COLL_CHECK_GOTO(coll_allreduce(table, table, (size_t)n * 2, COLL_INT64, COLL_SUM, comm), st,
                    out);
    if (color != COLL_SPLIT_NOCOLOR) {
        for (int r = 0; r < n; r++)
            if (table[2 * r] == color)
                mine[nmine++] = (struct split_ent){table[2 * r], table[2 * r + 1], r};
        qsort(mine, (size_t)nmine, sizeof(*mine), split_cmp);
        for (int i = 0; i < nmine; i++)
            if (mine[i].rank == comm->rank)
                myrank = i;
        /* the new rank 0 of each color makes the id; a byte sum spreads them */
        if (myrank == 0) {
            coll_unique_id_t id;
            COLL_CHECK_GOTO(coll_get_unique_id(&id), st, out_share);
            memcpy(ids + (size_t)comm->rank * COLL_UNIQUE_ID_BYTES, &id, sizeof(id));
        }
    }
out_share:
    {
        /* every rank must take part in the exchange, even after a local failure */
        coll_status_t st2 = coll_allreduce(ids, ids, (size_t)n * COLL_UNIQUE_ID_BYTES,
                                           COLL_UINT8, COLL_SUM, comm);
        if (st == COLL_SUCCESS)
            st = st2;
    }
    if (st != COLL_SUCCESS || color == COLL_SPLIT_NOCOLOR)
        goto out;
    {
        coll_unique_id_t id;
        memcpy(&id, ids + (size_t)mine[0].rank * COLL_UNIQUE_ID_BYTES, sizeof(id));
        st = coll__comm_init_child(newcomm_p, nmine, &id, myrank, comm);
    }
out:
    free(table);
    free(ids);
    free(mine);
    return st;
}
