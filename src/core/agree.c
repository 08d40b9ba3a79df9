/*
 * agree.c - the one check that ranks agree on a call, and its messages (agree.h).
 *
 * Messages name what each side called, never an internal mark: a send or a receive has no
 * call number, so it is named by what it moves; equal lengths are not reported as a
 * difference.
 */
#include "agree.h"
#include "exec.h"

#include <stdio.h>
#include <string.h>

const char *coll__sig_describe(const struct coll_sig *s, char *buf, size_t n)
{
    const char *dt = coll__dtype_name((coll_dtype_t)s->dtype);
    const struct coll_coll_desc *d = coll__coll_desc((enum coll_coll)s->coll);
    int w;

    if (d && d->p2p) {
        snprintf(buf, n, "%s of %llu x %s", s->kind == COLL_STEP_SEND ? "send" : "receive",
                 (unsigned long long)s->count, dt);
        return buf;
    }
    if (d && d->send_blocks == COLL_BLOCKS_NONE && d->recv_blocks == COLL_BLOCKS_NONE) {
        snprintf(buf, n, "%s", d->name); /* no data: no count or dtype to speak of */
        return buf;
    }
    w = snprintf(buf, n, "%s of %llu x %s", d ? d->name : "an unknown collective",
                 (unsigned long long)s->count, dt);
    if (w < 0 || (size_t)w >= n || !d)
        return buf;
    if (d->reduces)
        w += snprintf(buf + w, n - (size_t)w, " (%s)", coll__op_name((coll_op_t)s->op));
    if (w < 0 || (size_t)w >= n)
        return buf;
    if (d->root != COLL_ROOT_NONE)
        snprintf(buf + w, n - (size_t)w, " %s root %d",
                 d->root == COLL_ROOT_SINK ? "to" : "from", (int)s->root);
    return buf;
}

void coll__call_sig(const struct coll_call *c, struct coll_sig *s)
{
    const struct coll_coll_desc *d = coll__coll_desc(c->coll);

    *s = (struct coll_sig){
        .coll = (uint8_t)c->coll,
        .dtype = (uint8_t)c->dtype,
        .op = d && d->reduces ? (uint8_t)c->op : 0,
        .kind = d && d->p2p ? c->p2p : 0,
        .root = d && d->root != COLL_ROOT_NONE ? c->root : 0,
        .count = c->count,
    };
}

/* The same call, however each side runs it. */
static bool same_call(const struct coll_sig *a, const struct coll_sig *b)
{
    const struct coll_coll_desc *da = coll__coll_desc((enum coll_coll)a->coll);
    const struct coll_coll_desc *db = coll__coll_desc((enum coll_coll)b->coll);

    if ((da && da->p2p) || (db && db->p2p))
        return a->coll == b->coll && a->kind != b->kind && a->dtype == b->dtype &&
               a->count == b->count;
    return a->coll == b->coll && a->dtype == b->dtype && a->op == b->op &&
           a->root == b->root && a->count == b->count;
}

/* Run alike, where both sides said how (a message of the shm transport does not). */
static bool same_way(const struct coll_sig *a, const struct coll_sig *b)
{
    return !a->path || !b->path ||
           (a->path == b->path && a->algo == b->algo && a->chunk == b->chunk);
}

bool coll__sig_agree(const struct coll_sig *a, const struct coll_sig *b)
{
    return same_call(a, b) && same_way(a, b);
}

void coll__sig_how(struct coll_sig *s, const struct coll_algo *algo, size_t chunk_count)
{
    if (!algo) {
        s->path = COLL_SIG_PATH_FLAT;
        return;
    }
    s->path = COLL_SIG_PATH_SCHED;
    s->algo = 0;
    for (int i = 0; coll__algos[i] && i < 255; i++)
        if (coll__algos[i] == algo)
            s->algo = (uint8_t)(i + 1);
    s->chunk = chunk_count < UINT32_MAX ? (uint32_t)chunk_count : UINT32_MAX;
}

const char *coll__sig_how_describe(const struct coll_sig *s, char *buf, size_t n)
{
    int nalgos = 0;

    while (coll__algos[nalgos])
        nalgos++;
    if (s->path == COLL_SIG_PATH_FLAT)
        snprintf(buf, n, "the flat path");
    else if (s->path == COLL_SIG_PATH_SCHED && s->algo >= 1 && s->algo <= nalgos)
        snprintf(buf, n, "the general path by %s in chunks of %lu elements",
                 coll__algos[s->algo - 1]->name, (unsigned long)s->chunk);
    else if (s->path == COLL_SIG_PATH_SCHED)
        snprintf(buf, n, "the general path by an algorithm this rank does not know");
    else
        snprintf(buf, n, "an unknown path");
    return buf;
}

void coll__agree_log(struct coll_comm *comm, uint64_t cseq, const struct coll_sig *s)
{
    struct coll_sig_rec *r = &comm->sig_log[cseq % COLL_AGREE_LOG];

    r->sig = *s;
    atomic_store_explicit(&r->cseq, cseq + 1, memory_order_release);
}

/* What this rank called as collective cseq, if it is still in the log. */
static bool logged(const struct coll_comm *comm, uint64_t cseq, struct coll_sig *out)
{
    const struct coll_sig_rec *r = &comm->sig_log[cseq % COLL_AGREE_LOG];

    if (atomic_load_explicit(&r->cseq, memory_order_acquire) != cseq + 1)
        return false;
    *out = r->sig;
    /* the issuing thread may be rewriting the entry for a later call meanwhile */
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&r->cseq, memory_order_relaxed) == cseq + 1;
}

bool coll__agree_probe(const struct coll_comm *comm, int peer, uint64_t pcseq,
                       const struct coll_sig *theirs, char *why, size_t n)
{
    struct coll_sig mine;

    if (pcseq >= atomic_load(&comm->next_coll_seq) || !logged(comm, pcseq, &mine) ||
        coll__sig_agree(theirs, &mine))
        return false;
    coll__agree_explain(comm, peer, pcseq, theirs, pcseq, &mine, why, n);
    return true;
}

void coll__agree_explain(const struct coll_comm *comm, int peer, uint64_t pcseq,
                         const struct coll_sig *theirs, uint64_t cseq,
                         const struct coll_sig *mine, char *buf, size_t n)
{
    char a[128] = "a call this rank cannot name", b[128];
    struct coll_sig old;

    if (theirs)
        coll__sig_describe(theirs, a, sizeof(a));
    coll__sig_describe(mine, b, sizeof(b));
    if (pcseq == UINT64_MAX && cseq == UINT64_MAX) {
        snprintf(buf, n, "rank %d's %s meets this rank's %s: the two ends of a send and a "
                 "receive must name the same count and dtype", peer, a, b);
    } else if (pcseq == UINT64_MAX) {
        snprintf(buf, n, "rank %d's %s arrived where this rank, in call #%llu, runs %s: a "
                 "send on one rank meets a collective on the other", peer, a,
                 (unsigned long long)cseq + 1, b);
    } else if (cseq == UINT64_MAX) {
        snprintf(buf, n, "rank %d sent a message of its call #%llu (%s) where this rank "
                 "posted a %s: a collective on one rank meets a receive on the other",
                 peer, (unsigned long long)pcseq + 1, a, b);
    } else if (pcseq == cseq && theirs && same_call(theirs, mine) && !same_way(theirs, mine)) {
        char ha[128], hb[128];
        snprintf(buf, n, "rank %d runs call #%llu (%s) on %s where this rank runs it on %s: the "
                 "ranks decided differently how to run one call (their per-comm settings or "
                 "the inputs of the choice differ)", peer, (unsigned long long)cseq + 1, b,
                 coll__sig_how_describe(theirs, ha, sizeof(ha)),
                 coll__sig_how_describe(mine, hb, sizeof(hb)));
    } else if (pcseq == cseq) {
        snprintf(buf, n, "rank %d called %s as call #%llu where this rank called %s", peer, a,
                 (unsigned long long)cseq + 1, b);
    } else if (pcseq < cseq && logged(comm, pcseq, &old) && !coll__sig_agree(theirs ? theirs : &old, &old)) {
        char c[128];
        snprintf(buf, n, "rank %d called %s as call #%llu where this rank called %s (this rank "
                 "is now in call #%llu, %s)", peer, a, (unsigned long long)pcseq + 1,
                 coll__sig_describe(&old, c, sizeof(c)), (unsigned long long)cseq + 1, b);
    } else {
        snprintf(buf, n, "rank %d sent a message of its call #%llu (%s) where this rank is in "
                 "call #%llu (%s): a call on one of them moved data the other did not expect "
                 "(different roots or collectives)", peer, (unsigned long long)pcseq + 1, a,
                 (unsigned long long)cseq + 1, b);
    }
}

coll_status_t coll__agree_xfer(const struct coll_comm *comm, int peer, const struct coll_xfer *x,
                               uint64_t seq, uint32_t tag, uint64_t len,
                               const struct coll_sig *theirs, char *buf, size_t n)
{
    const uint64_t num = (1ull << 48) - 1;
    uint64_t pc = seq & num, mc = x->seq & num;
    bool sig_ok;

    pc = pc == COLL_WIRE_SEQ_P2P ? UINT64_MAX : pc;
    mc = mc == COLL_WIRE_SEQ_P2P ? UINT64_MAX : mc;
    /* the full signature where the transport carries it, else the 16-bit hash */
    sig_ok = theirs && x->sig ? coll__sig_agree(theirs, x->sig)
                              : (seq & ~num) == (x->seq & ~num);
    if (pc == mc && sig_ok && tag == x->tag && len == (uint64_t)x->len)
        return COLL_SUCCESS;
    if (pc != mc || !sig_ok) {
        if (x->sig)
            coll__agree_explain(comm, peer, pc, theirs, mc, x->sig, buf, n);
        else if (pc != mc && pc != UINT64_MAX && mc != UINT64_MAX)
            snprintf(buf, n, "rank %d sent a message of call #%llu where this rank is in call "
                     "#%llu", peer, (unsigned long long)pc + 1, (unsigned long long)mc + 1);
        else if (pc != mc)
            snprintf(buf, n, "rank %d sent a message of %s where this rank expects one of %s",
                     peer, pc == UINT64_MAX ? "a send" : "a collective",
                     mc == UINT64_MAX ? "a receive" : "a collective");
        else
            snprintf(buf, n, "rank %d called call #%llu with other arguments than this rank",
                     peer, (unsigned long long)mc + 1);
        return COLL_REMOTE_ERROR;
    }
    /* the same call, yet the messages differ: the schedules do */
    if (len != (uint64_t)x->len)
        snprintf(buf, n, "rank %d's message %u of call #%llu holds %llu bytes where this rank "
                 "expects %zu: the ranks run different algorithms or chunk sizes (decided from "
                 "inputs that differ between them)",
                 peer, tag, (unsigned long long)mc + 1, (unsigned long long)len, x->len);
    else
        snprintf(buf, n, "rank %d's message %u of call #%llu arrived where this rank expects "
                 "its message %u: the ranks run different algorithms or chunk sizes "
                 "(decided from inputs that differ between them)",
                 peer, tag, (unsigned long long)mc + 1, x->tag);
    return COLL_REMOTE_ERROR;
}
