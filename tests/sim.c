/*
 * sim.c - the schedule simulator (see sim.h for the model) and the static race check.
 *
 * Divisions: 1 setup (validation, bounds, matching, reverse edges), 2 the event loop,
 * 3 the end (deadlock and unmatched reports, avg), 4 the race check, 5 buffer layouts and
 * reachability (barriers).
 *
 * Events are "start step i of rank r" and "complete transfer i of rank r". Each is pushed
 * into one pool exactly once, when it becomes possible (it stays possible until it runs), and
 * the loop pops a random one. So every interleaving that the executor's rules allow can come
 * up, with the link behaviour (eager or rendezvous) chosen by the caller.
 */
#include "sim.h"

#include "reduce/reduce.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX

enum { ST_PENDING = 0, ST_POSTED, ST_DONE };
enum { EV_START = 0, EV_COMPLETE };
enum { PUSHED_START = 1, PUSHED_COMPLETE = 2 };

struct sim_ev {
    int32_t rank;
    uint32_t step;
    uint8_t type;
};

struct sim_rank {
    const struct coll_schedule *s;
    uint8_t *base[COLL_NUM_BUFS];
    size_t cap[COLL_NUM_BUFS];       /* elements */
    uint8_t *scratch;                /* owned */
    uint8_t *state, *pushed;         /* per step */
    uint32_t *deps_left;             /* per step: dependencies not done yet */
    uint32_t *rdep_off, *rdep;       /* per step: the steps that depend on it (CSR) */
    uint32_t *prev_same, *next_same; /* per SEND/RECV: same peer, same direction */
    uint32_t *match;                 /* per SEND/RECV: the peer's matching step, or NONE */
    uint8_t **snap;                  /* per SEND: the data as read when it started */
    uint8_t *consumed;               /* per SEND: its receive has taken snap */
    uint32_t ndone;
};

struct sim {
    int32_t n;
    struct sim_rank *r;
    struct sim_ev *pool;
    size_t npool, cap;
    size_t nlazy; /* events in the pool that lazy mode holds back */
    uint64_t rng;
    const struct sim_opts *o;
    size_t esz;
    struct sim_stats stats;
    char *err;
    size_t errlen;
};

static const char *const kind_names[] = {"send", "recv", "reduce", "copy"};
static const char *const buf_names[COLL_NUM_BUFS] = {"SEND", "RECV", "SCRATCH"};

const char *sim_status_name(int st)
{
    static const char *const names[] = {
        "ok",        "invalid",  "bounds", "count",     "deadlock",
        "unmatched", "inflight", "race",   "too large", "no memory",
    };
    return st >= 0 && (size_t)st < COLL_ARRAY_SIZE(names) ? names[st] : "?";
}

static int fail(char *err, size_t errlen, int st, const char *fmt, ...) COLL_PRINTF(4, 5);
static int fail(char *err, size_t errlen, int st, const char *fmt, ...)
{
    va_list ap;
    if (err && errlen) {
        int w = snprintf(err, errlen, "%s: ", sim_status_name(st));
        va_start(ap, fmt);
        if (w >= 0 && (size_t)w < errlen)
            vsnprintf(err + w, errlen - (size_t)w, fmt, ap);
        va_end(ap);
    }
    return st;
}

static uint64_t rng_next(uint64_t *x)
{
    /* splitmix64: good enough to shuffle event orders, and reproducible from the seed */
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fill_garbage(uint8_t *p, size_t n, uint64_t *rng)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = rng_next(rng);
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

/* Which slices a step reads (bits 0 src, 1 src2) and writes (bit 2 dst). */
static unsigned step_slices(uint8_t kind)
{
    static const unsigned used[] = {1u, 4u, 7u, 5u};
    return kind < COLL_ARRAY_SIZE(used) ? used[kind] : 0;
}

static const char *kind_name(uint8_t kind)
{
    return kind < COLL_ARRAY_SIZE(kind_names) ? kind_names[kind] : "?";
}

static void *slice_ptr(const struct sim *sm, int32_t r, const struct coll_slice *sl)
{
    return sm->r[r].base[sl->buf] + sl->off * sm->esz;
}

/* ---- 1 setup ------------------------------------------------------------------------- */

static void ranks_free(struct sim *sm)
{
    if (!sm->r)
        return;
    for (int32_t r = 0; r < sm->n; r++) {
        struct sim_rank *rk = &sm->r[r];
        if (rk->snap)
            for (uint32_t i = 0; i < (rk->s ? rk->s->nsteps : 0); i++)
                free(rk->snap[i]);
        free(rk->scratch);
        free(rk->state);
        free(rk->pushed);
        free(rk->deps_left);
        free(rk->rdep_off);
        free(rk->rdep);
        free(rk->prev_same);
        free(rk->next_same);
        free(rk->match);
        free(rk->snap);
        free(rk->consumed);
    }
    free(sm->r);
    sm->r = NULL;
}

static int check_rank(struct sim *sm, int32_t r, const struct coll_schedule *s,
                      const struct sim_mem *m)
{
    if (coll__sched_validate(s) != COLL_SUCCESS)
        return fail(sm->err, sm->errlen, SIM_INVALID, "rank %d: %s", r, coll_last_error(NULL));
    if (s->nranks != sm->n || s->rank != r)
        return fail(sm->err, sm->errlen, SIM_INVALID,
                    "schedule %d is for rank %d of %d ranks, not rank %d of %d", r, s->rank,
                    s->nranks, r, sm->n);
    if (s->nsteps && s->elem_size != sm->esz)
        return fail(sm->err, sm->errlen, SIM_INVALID, "rank %d: element size %zu, dtype %s has %zu",
                    r, s->elem_size, coll__dtype_name(sm->o->dtype), sm->esz);
    for (uint32_t i = 0; i < s->nsteps; i++) {
        const struct coll_step *st = &s->steps[i];
        const struct coll_slice *sl[3] = {&st->src, &st->src2, &st->dst};
        unsigned used = step_slices(st->kind);
        for (int k = 0; k < 3; k++) {
            size_t cap;
            if (!(used & (1u << k)))
                continue;
            cap = sl[k]->buf == COLL_BUF_SEND   ? (m->send ? m->send_count : 0)
                  : sl[k]->buf == COLL_BUF_RECV ? (m->recv ? m->recv_count : 0)
                                                : s->buf_count[COLL_BUF_SCRATCH];
            if (sl[k]->off + sl[k]->count > cap)
                return fail(sm->err, sm->errlen, SIM_BOUNDS,
                            "rank %d step %u (%s) %s %s[%zu, %zu) but it holds %zu elements%s", r,
                            i, kind_name(st->kind), k == 2 ? "writes" : "reads",
                            buf_names[sl[k]->buf], sl[k]->off, sl[k]->off + sl[k]->count, cap,
                            cap == 0 ? " (may be NULL here)" : "");
        }
    }
    return SIM_OK;
}

static int setup_rank(struct sim *sm, int32_t r, const struct sim_mem *m)
{
    struct sim_rank *rk = &sm->r[r];
    const struct coll_schedule *s = rk->s;
    uint32_t ns = s->nsteps, ne = 0;
    size_t sc = s->buf_count[COLL_BUF_SCRATCH];

    rk->scratch = malloc(sc * sm->esz + 1);
    rk->state = calloc(ns + 1, 1);
    rk->pushed = calloc(ns + 1, 1);
    rk->deps_left = calloc(ns + 1, sizeof(uint32_t));
    rk->rdep_off = calloc(ns + 2, sizeof(uint32_t));
    rk->prev_same = malloc((ns + 1) * sizeof(uint32_t));
    rk->next_same = malloc((ns + 1) * sizeof(uint32_t));
    rk->match = malloc((ns + 1) * sizeof(uint32_t));
    rk->snap = calloc(ns + 1, sizeof(uint8_t *));
    rk->consumed = calloc(ns + 1, 1);
    if (!rk->scratch || !rk->state || !rk->pushed || !rk->deps_left || !rk->rdep_off ||
        !rk->prev_same || !rk->next_same || !rk->match || !rk->snap || !rk->consumed)
        return fail(sm->err, sm->errlen, SIM_NOMEM, "rank %d: %u steps", r, ns);
    fill_garbage(rk->scratch, sc * sm->esz, &sm->rng);
    rk->base[COLL_BUF_SEND] = m->send;
    rk->base[COLL_BUF_RECV] = m->recv;
    rk->base[COLL_BUF_SCRATCH] = rk->scratch;

    /* reverse edges, counting a dependency listed twice twice (deps_left does too) */
    for (uint32_t i = 0; i < ns; i++) {
        rk->deps_left[i] = s->steps[i].ndeps;
        for (uint32_t d = 0; d < s->steps[i].ndeps; d++)
            rk->rdep_off[s->steps[i].deps[d] + 1]++;
        ne += s->steps[i].ndeps;
    }
    for (uint32_t i = 0; i < ns; i++)
        rk->rdep_off[i + 1] += rk->rdep_off[i];
    rk->rdep = malloc((ne + 1) * sizeof(uint32_t));
    if (!rk->rdep)
        return fail(sm->err, sm->errlen, SIM_NOMEM, "rank %d: %u edges", r, ne);
    {
        uint32_t *fillp = calloc(ns + 1, sizeof(uint32_t));
        if (!fillp)
            return fail(sm->err, sm->errlen, SIM_NOMEM, "rank %d", r);
        for (uint32_t i = 0; i < ns; i++)
            for (uint32_t d = 0; d < s->steps[i].ndeps; d++) {
                uint32_t src = s->steps[i].deps[d];
                rk->rdep[rk->rdep_off[src] + fillp[src]++] = i;
            }
        free(fillp);
    }
    for (uint32_t i = 0; i < ns; i++)
        rk->prev_same[i] = rk->next_same[i] = rk->match[i] = NONE;
    return SIM_OK;
}

/* The k-th send from a to b pairs with the k-th receive from a on b. Links are numbered
 * (from, to, direction) with lists of step indices in step order. */
static int setup_matching(struct sim *sm)
{
    const size_t n = (size_t)sm->n, nlinks = n * n * 2;
    uint32_t *cnt = calloc(nlinks + 1, sizeof(uint32_t)), *off = NULL, *list = NULL, *fillp = NULL,
             *last = NULL;
    size_t total = 0;
    int st = SIM_NOMEM;

    if (!cnt)
        goto out;
#define LINK(self, peer, dir) (((size_t)(self)*n + (size_t)(peer)) * 2 + (dir))
    for (int32_t r = 0; r < sm->n; r++) {
        const struct coll_schedule *s = sm->r[r].s;
        for (uint32_t i = 0; i < s->nsteps; i++) {
            const struct coll_step *p = &s->steps[i];
            if (p->kind == COLL_STEP_SEND || p->kind == COLL_STEP_RECV) {
                cnt[LINK(r, p->peer, p->kind == COLL_STEP_RECV)]++;
                total++;
            }
        }
    }
    off = calloc(nlinks + 1, sizeof(uint32_t));
    list = malloc((total + 1) * sizeof(uint32_t));
    fillp = calloc(nlinks + 1, sizeof(uint32_t));
    last = malloc((nlinks + 1) * sizeof(uint32_t));
    if (!off || !list || !fillp || !last)
        goto out;
    for (size_t l = 0; l < nlinks; l++) {
        off[l + 1] = off[l] + cnt[l];
        last[l] = NONE;
    }
    for (int32_t r = 0; r < sm->n; r++) {
        struct sim_rank *rk = &sm->r[r];
        for (uint32_t i = 0; i < rk->s->nsteps; i++) {
            const struct coll_step *p = &rk->s->steps[i];
            size_t l;
            if (p->kind != COLL_STEP_SEND && p->kind != COLL_STEP_RECV)
                continue;
            l = LINK(r, p->peer, p->kind == COLL_STEP_RECV);
            list[off[l] + fillp[l]++] = i;
            rk->prev_same[i] = last[l];
            if (last[l] != NONE)
                rk->next_same[last[l]] = i;
            last[l] = i;
        }
    }
    for (int32_t r = 0; r < sm->n; r++) {
        for (int32_t p = 0; p < sm->n; p++) {
            size_t ls = LINK(r, p, 0), lr = LINK(p, r, 1); /* r sends to p; p receives from r */
            size_t k, both = COLL_MIN(cnt[ls], cnt[lr]);
            for (k = 0; k < both; k++) {
                sm->r[r].match[list[off[ls] + k]] = list[off[lr] + k];
                sm->r[p].match[list[off[lr] + k]] = list[off[ls] + k];
            }
        }
    }
#undef LINK
    st = SIM_OK;
out:
    if (st != SIM_OK)
        fail(sm->err, sm->errlen, st, "matching %zu transfers", total);
    free(cnt);
    free(off);
    free(list);
    free(fillp);
    free(last);
    return st;
}

/* ---- 2 the event loop ---------------------------------------------------------------- */

/* Is ev one that lazy mode holds back? */
static bool is_lazy(const struct sim *sm, const struct sim_ev *ev)
{
    return ev->type == EV_COMPLETE &&
           (sm->o->lazy >= 2 ||
            (sm->o->lazy == 1 && sm->r[ev->rank].s->steps[ev->step].kind == COLL_STEP_SEND));
}

/* A random event; in lazy mode a held-back one only 1 time in 8 while others are ready, so
 * the completion comes after much else has happened (as a slow link would do it). */
static size_t pick(struct sim *sm)
{
    size_t k = (size_t)(rng_next(&sm->rng) % sm->npool);
    for (int tries = 0; tries < 16 && sm->nlazy < sm->npool; tries++) {
        if (!is_lazy(sm, &sm->pool[k]) || rng_next(&sm->rng) % 8 == 0)
            break;
        k = (size_t)(rng_next(&sm->rng) % sm->npool);
    }
    return k;
}

static int push(struct sim *sm, int32_t r, uint32_t i, uint8_t type)
{
    uint8_t flag = type == EV_START ? PUSHED_START : PUSHED_COMPLETE;

    if (sm->r[r].pushed[i] & flag)
        return SIM_OK;
    if (sm->npool == sm->cap) {
        size_t cap = sm->cap ? sm->cap * 2 : 1024;
        struct sim_ev *p = realloc(sm->pool, cap * sizeof(*p));
        if (!p)
            return fail(sm->err, sm->errlen, SIM_NOMEM, "event pool of %zu", cap);
        sm->pool = p;
        sm->cap = cap;
    }
    sm->r[r].pushed[i] |= flag;
    sm->pool[sm->npool++] = (struct sim_ev){r, i, type};
    if (is_lazy(sm, &sm->pool[sm->npool - 1]))
        sm->nlazy++;
    return SIM_OK;
}

static bool can_start(const struct sim_rank *rk, uint32_t i)
{
    uint32_t prev = rk->prev_same[i];
    return rk->state[i] == ST_PENDING && rk->deps_left[i] == 0 &&
           (prev == NONE || rk->state[prev] != ST_PENDING);
}

static int step_done(struct sim *sm, int32_t r, uint32_t i)
{
    struct sim_rank *rk = &sm->r[r];
    int st;

    rk->state[i] = ST_DONE;
    rk->ndone++;
    for (uint32_t e = rk->rdep_off[i]; e < rk->rdep_off[i + 1]; e++) {
        uint32_t j = rk->rdep[e];
        rk->deps_left[j]--;
        if (can_start(rk, j) && (st = push(sm, r, j, EV_START)) != SIM_OK)
            return st;
    }
    return SIM_OK;
}

/* A transfer was posted: the next one on its link may start, and a completion on either
 * end of the pair may have become possible. */
static int transfer_posted(struct sim *sm, int32_t r, uint32_t i)
{
    struct sim_rank *rk = &sm->r[r];
    const struct coll_step *p = &rk->s->steps[i];
    uint32_t nx = rk->next_same[i], m = rk->match[i];
    int st = SIM_OK;

    if (nx != NONE && can_start(rk, nx) && (st = push(sm, r, nx, EV_START)) != SIM_OK)
        return st;
    if (p->kind == COLL_STEP_SEND) {
        uint8_t peer_state = m == NONE ? ST_PENDING : sm->r[p->peer].state[m];
        if (!sm->o->rendezvous || peer_state != ST_PENDING)
            st = push(sm, r, i, EV_COMPLETE);
        if (st == SIM_OK && peer_state == ST_POSTED)
            st = push(sm, p->peer, m, EV_COMPLETE);
    } else if (m != NONE) {
        uint8_t peer_state = sm->r[p->peer].state[m];
        if (peer_state != ST_PENDING)
            st = push(sm, r, i, EV_COMPLETE);
        if (st == SIM_OK && sm->o->rendezvous && peer_state == ST_POSTED)
            st = push(sm, p->peer, m, EV_COMPLETE);
    }
    return st;
}

static int start_step(struct sim *sm, int32_t r, uint32_t i)
{
    struct sim_rank *rk = &sm->r[r];
    const struct coll_step *p = &rk->s->steps[i];
    coll_op_t op = sm->o->op == COLL_AVG ? COLL_SUM : sm->o->op;

    switch (p->kind) {
    case COLL_STEP_REDUCE:
        coll__reduce(slice_ptr(sm, r, &p->dst), slice_ptr(sm, r, &p->src),
                     slice_ptr(sm, r, &p->src2), p->dst.count, sm->o->dtype, op);
        return step_done(sm, r, i);
    case COLL_STEP_COPY: {
        void *d = slice_ptr(sm, r, &p->dst), *s = slice_ptr(sm, r, &p->src);
        if (d != s)
            memmove(d, s, p->dst.count * sm->esz);
        return step_done(sm, r, i);
    }
    case COLL_STEP_SEND: {
        size_t bytes = p->src.count * sm->esz;
        rk->snap[i] = malloc(bytes ? bytes : 1);
        if (!rk->snap[i])
            return fail(sm->err, sm->errlen, SIM_NOMEM, "message of %zu bytes", bytes);
        memcpy(rk->snap[i], slice_ptr(sm, r, &p->src), bytes);
        rk->state[i] = ST_POSTED;
        sm->stats.messages++;
        sm->stats.bytes += bytes;
        return transfer_posted(sm, r, i);
    }
    case COLL_STEP_RECV:
        /* the transport owns the destination until the receive completes */
        fill_garbage(slice_ptr(sm, r, &p->dst), p->dst.count * sm->esz, &sm->rng);
        rk->state[i] = ST_POSTED;
        return transfer_posted(sm, r, i);
    }
    return fail(sm->err, sm->errlen, SIM_INVALID, "rank %d step %u: kind %u", r, i, p->kind);
}

static int complete_step(struct sim *sm, int32_t r, uint32_t i)
{
    struct sim_rank *rk = &sm->r[r];
    const struct coll_step *p = &rk->s->steps[i];

    if (p->kind == COLL_STEP_SEND) {
        if (memcmp(rk->snap[i], slice_ptr(sm, r, &p->src), p->src.count * sm->esz))
            return fail(sm->err, sm->errlen, SIM_INFLIGHT,
                        "rank %d step %u (send to %d of %s[%zu, +%zu)): its source changed "
                        "before it completed (a missing dependency on it?)",
                        r, i, p->peer, buf_names[p->src.buf], p->src.off, p->src.count);
        if (rk->consumed[i]) {
            free(rk->snap[i]);
            rk->snap[i] = NULL;
        }
    } else {
        struct sim_rank *pk = &sm->r[p->peer];
        uint32_t m = rk->match[i];
        const struct coll_step *q = &pk->s->steps[m];
        if (q->src.count != p->dst.count)
            return fail(sm->err, sm->errlen, SIM_COUNT,
                        "rank %d step %u receives %zu elements from rank %d, whose matching "
                        "step %u sends %zu",
                        r, i, p->dst.count, p->peer, m, q->src.count);
        memcpy(slice_ptr(sm, r, &p->dst), pk->snap[m], p->dst.count * sm->esz);
        pk->consumed[m] = 1;
        if (pk->state[m] == ST_DONE) {
            free(pk->snap[m]);
            pk->snap[m] = NULL;
        }
    }
    return step_done(sm, r, i);
}

/* ---- 3 the end ----------------------------------------------------------------------- */

static int report_deadlock(struct sim *sm)
{
    char buf[768];
    size_t o = 0;
    int listed = 0, stuck = 0;

    buf[0] = '\0';
    for (int32_t r = 0; r < sm->n; r++) {
        const struct sim_rank *rk = &sm->r[r];
        for (uint32_t i = 0; i < rk->s->nsteps; i++) {
            const struct coll_step *p = &rk->s->steps[i];
            const char *why;
            int w;
            if (rk->state[i] == ST_DONE)
                continue;
            stuck++;
            /* name the transfers at the front of the jam, not everything behind them */
            if (rk->state[i] == ST_POSTED)
                why =
                    rk->match[i] == NONE ? "posted; nothing matches it" : "posted; peer not ready";
            else if (rk->deps_left[i] == 0 &&
                     (p->kind == COLL_STEP_SEND || p->kind == COLL_STEP_RECV))
                why = "waits for the transfer before it on its link";
            else
                continue;
            if (listed >= 6 || o + 1 >= sizeof(buf))
                continue;
            w = snprintf(buf + o, sizeof(buf) - o, "%srank %d step %u %s %s %d (%s)",
                         listed ? "; " : "", r, i, kind_name(p->kind),
                         p->kind == COLL_STEP_SEND ? "to" : "from", p->peer, why);
            if (w > 0)
                o += (size_t)w < sizeof(buf) - o ? (size_t)w : sizeof(buf) - o - 1;
            listed++;
        }
    }
    return fail(sm->err, sm->errlen, SIM_DEADLOCK, "%d steps cannot run: %s", stuck,
                listed ? buf : "(every one waits for a dependency)");
}

static int check_unmatched(struct sim *sm)
{
    for (int32_t r = 0; r < sm->n; r++) {
        const struct sim_rank *rk = &sm->r[r];
        for (uint32_t i = 0; i < rk->s->nsteps; i++)
            if (rk->s->steps[i].kind == COLL_STEP_SEND && rk->match[i] == NONE)
                return fail(sm->err, sm->errlen, SIM_UNMATCHED,
                            "rank %d step %u sent %zu elements to rank %d, which never "
                            "receives them",
                            r, i, rk->s->steps[i].src.count, rk->s->steps[i].peer);
    }
    return SIM_OK;
}

int sim_run(const struct coll_schedule *scheds, int32_t n, const struct sim_mem *mem,
            const struct sim_opts *o, struct sim_stats *stats, char *err, size_t errlen)
{
    struct sim sm;
    int st = SIM_OK;

    memset(&sm, 0, sizeof(sm));
    sm.n = n;
    sm.o = o;
    sm.esz = coll__dtype_size(o->dtype);
    sm.rng = o->seed * 0x2545f4914f6cdd1dull + 1;
    sm.err = err;
    sm.errlen = errlen;
    if (err && errlen)
        err[0] = '\0';
    if (n < 1 || sm.esz == 0)
        return fail(err, errlen, SIM_INVALID, "%d ranks, dtype %d", n, (int)o->dtype);
    sm.r = calloc((size_t)n, sizeof(*sm.r));
    if (!sm.r)
        return fail(err, errlen, SIM_NOMEM, "%d ranks", n);
    for (int32_t r = 0; r < n && st == SIM_OK; r++) {
        sm.r[r].s = &scheds[r];
        st = check_rank(&sm, r, &scheds[r], &mem[r]);
        if (st == SIM_OK)
            st = setup_rank(&sm, r, &mem[r]);
    }
    if (st == SIM_OK)
        st = setup_matching(&sm);
    for (int32_t r = 0; r < n && st == SIM_OK; r++)
        for (uint32_t i = 0; i < sm.r[r].s->nsteps && st == SIM_OK; i++)
            if (can_start(&sm.r[r], i))
                st = push(&sm, r, i, EV_START);

    while (st == SIM_OK && sm.npool > 0) {
        size_t k = pick(&sm);
        struct sim_ev ev = sm.pool[k];
        sm.pool[k] = sm.pool[--sm.npool];
        if (is_lazy(&sm, &ev))
            sm.nlazy--;
        sm.stats.events++;
        st = ev.type == EV_START ? start_step(&sm, ev.rank, ev.step)
                                 : complete_step(&sm, ev.rank, ev.step);
    }
    if (st == SIM_OK)
        for (int32_t r = 0; r < n; r++)
            if (sm.r[r].ndone != sm.r[r].s->nsteps) {
                st = report_deadlock(&sm);
                break;
            }
    if (st == SIM_OK)
        st = check_unmatched(&sm);
    if (st == SIM_OK && o->op == COLL_AVG && o->count > 0)
        for (int32_t r = 0; r < n; r++)
            if (coll__colls[o->coll].reduces &&
                coll__desc_uses_recv(&coll__colls[o->coll], r, o->root, 0))
                coll__reduce_div(mem[r].recv,
                                 coll__blocks_count(coll__colls[o->coll].recv_blocks, o->count, n),
                                 o->dtype, (uint64_t)n);
    if (stats)
        *stats = sm.stats;
    ranks_free(&sm);
    free(sm.pool);
    return st;
}

/* ---- 4 the race check ---------------------------------------------------------------- */

/* Ancestor sets as bitsets: nsteps^2 bits. Past this many words the check declines. */
#define RACE_MAX_WORDS ((size_t)1 << 23)

struct race_read {
    uint32_t step, next;
};

int sim_check_races(const struct coll_schedule *s, char *err, size_t errlen)
{
    return sim_check_races_at(s, 0, err, errlen);
}

int sim_check_races_at(const struct coll_schedule *s, int64_t send_at, char *err, size_t errlen)
{
    const uint32_t ns = s->nsteps;
    const size_t words = ((size_t)ns + 63) / 64;
    /* SEND and RECV share element indices [0, ur), overlapping as they do in place: RECV
     * from base[RECV], SEND from base[SEND] = base[RECV] + send_at; SCRATCH follows */
    const size_t rb = send_at < 0 ? (size_t)-send_at : 0, sb = rb + (size_t)send_at;
    const size_t ur = COLL_MAX(sb + s->buf_count[COLL_BUF_SEND], rb + s->buf_count[COLL_BUF_RECV]);
    const size_t base[COLL_NUM_BUFS] = {sb, rb, ur};
    const size_t ne = ur + s->buf_count[COLL_BUF_SCRATCH];
    uint64_t *anc = NULL;
    uint32_t *writer = NULL, *head = NULL;
    struct race_read *reads = NULL;
    size_t nreads = 0, capreads = 0;
    int st = SIM_OK;

    if (err && errlen)
        err[0] = '\0';
    if (words * ns > RACE_MAX_WORDS)
        return fail(err, errlen, SIM_TOO_LARGE, "rank %d: %u steps", s->rank, ns);
    anc = calloc(words * ns + 1, sizeof(uint64_t));
    writer = malloc((ne + 1) * sizeof(uint32_t));
    head = malloc((ne + 1) * sizeof(uint32_t));
    if (!anc || !writer || !head) {
        st = fail(err, errlen, SIM_NOMEM, "rank %d: %u steps", s->rank, ns);
        goto out;
    }
    for (size_t e = 0; e < ne; e++)
        writer[e] = head[e] = NONE;

#define ANC(i) (anc + (size_t)(i)*words)
#define IS_ANC(i, a) ((ANC(i)[(a) / 64] >> ((a) % 64)) & 1u)
    for (uint32_t i = 0; i < ns; i++) {
        const struct coll_step *p = &s->steps[i];
        const struct coll_slice *sl[3] = {&p->src, &p->src2, &p->dst};
        unsigned used = step_slices(p->kind);

        for (uint32_t d = 0; d < p->ndeps; d++) {
            uint32_t a = p->deps[d];
            if (a >= i)
                continue; /* validate reports it */
            for (size_t w = 0; w < words; w++)
                ANC(i)[w] |= ANC(a)[w];
            ANC(i)[a / 64] |= (uint64_t)1 << (a % 64);
        }
        /* reads first: a step may read and write one element (reduce in place) */
        for (int k = 0; k < 3; k++) {
            size_t b0;
            if (k == 2 || !(used & (1u << k)))
                continue;
            b0 = sl[k]->buf < COLL_NUM_BUFS ? base[sl[k]->buf] : ne; /* validate reports it */
            for (size_t x = 0; x < sl[k]->count; x++) {
                size_t e = b0 + sl[k]->off + x;
                uint32_t w;
                if (e >= ne)
                    break; /* validate reports it */
                w = writer[e];
                if (w != NONE && w != i && !IS_ANC(i, w)) {
                    st = fail(err, errlen, SIM_RACE,
                              "rank %d: step %u (%s) reads %s[%zu], which step %u (%s) writes, "
                              "and no dependency orders them",
                              s->rank, i, kind_name(p->kind), buf_names[sl[k]->buf], sl[k]->off + x,
                              w, kind_name(s->steps[w].kind));
                    goto out;
                }
                if (w != NONE && w != i && sl[k]->buf == COLL_BUF_SEND) {
                    st = fail(err, errlen, SIM_RACE,
                              "rank %d: step %u (%s) reads SEND[%zu] after step %u (%s) wrote "
                              "RECV[%zu]: wrong in place",
                              s->rank, i, kind_name(p->kind), sl[k]->off + x, w,
                              kind_name(s->steps[w].kind), sl[k]->off + x);
                    goto out;
                }
                if (nreads == capreads) {
                    size_t cap = capreads ? capreads * 2 : 4096;
                    struct race_read *q = realloc(reads, cap * sizeof(*q));
                    if (!q) {
                        st = fail(err, errlen, SIM_NOMEM, "%zu reads", cap);
                        goto out;
                    }
                    reads = q;
                    capreads = cap;
                }
                reads[nreads] = (struct race_read){i, head[e]};
                head[e] = (uint32_t)nreads++;
            }
        }
        if (!(used & 4u))
            continue;
        {
            const size_t b0 = p->dst.buf < COLL_NUM_BUFS ? base[p->dst.buf] : ne;
            for (size_t x = 0; x < p->dst.count; x++) {
                size_t e = b0 + p->dst.off + x;
                uint32_t w;
                if (e >= ne)
                    break;
                w = writer[e];
                if (w != NONE && w != i && !IS_ANC(i, w)) {
                    st = fail(err, errlen, SIM_RACE,
                              "rank %d: steps %u (%s) and %u (%s) both write %s[%zu], and no "
                              "dependency orders them",
                              s->rank, w, kind_name(s->steps[w].kind), i, kind_name(p->kind),
                              buf_names[p->dst.buf], p->dst.off + x);
                    goto out;
                }
                for (uint32_t q = head[e]; q != NONE; q = reads[q].next) {
                    uint32_t rd = reads[q].step;
                    if (rd != i && !IS_ANC(i, rd)) {
                        st = fail(err, errlen, SIM_RACE,
                                  "rank %d: step %u (%s) writes %s[%zu], which step %u (%s) "
                                  "reads, and does not wait for it",
                                  s->rank, i, kind_name(p->kind), buf_names[p->dst.buf],
                                  p->dst.off + x, rd, kind_name(s->steps[rd].kind));
                        goto out;
                    }
                }
                writer[e] = i;
                head[e] = NONE;
            }
        }
    }
#undef ANC
#undef IS_ANC
out:
    free(anc);
    free(writer);
    free(head);
    free(reads);
    return st;
}

/* ---- 5 buffer layouts and reachability ----------------------------------------------- */

void sim_layout_of(enum coll_coll coll, int32_t n, int32_t rank, int32_t root, size_t count,
                   struct sim_layout *l)
{
    const struct coll_coll_desc *d = coll__coll_desc(coll);
    bool use_send, use_recv;
    size_t at;

    memset(l, 0, sizeof(*l));
    if (!d || d->p2p || !coll__desc_moves_data(d))
        return; /* no builder, or no user buffers */
    use_send = coll__desc_uses_send(d, rank, root, 0);
    use_recv = coll__desc_uses_recv(d, rank, root, 0);
    l->send_count = use_send ? coll__blocks_count(d->send_blocks, count, n) : 0;
    l->recv_count = use_recv ? coll__blocks_count(d->recv_blocks, count, n) : 0;
    l->alias = use_send && use_recv;
    /* in place, the smaller buffer is block `inplace` of the larger (src/algo/colls.h) */
    at = d->inplace == COLL_AT_RANK ? (size_t)rank * count
         : d->inplace == COLL_AT_ROOT ? (size_t)root * count
                                      : 0;
    if (l->alias && d->recv_blocks > d->send_blocks)
        l->send_at = (int64_t)at;
    else if (l->alias && d->send_blocks > d->recv_blocks)
        l->send_at = -(int64_t)at;
}

int sim_reach(const struct coll_schedule *scheds, int32_t n, int32_t from, bool *reached)
{
    uint8_t **mark = calloc((size_t)n, sizeof(*mark));
    uint32_t **match = calloc((size_t)n, sizeof(*match)); /* per RECV: the matched send */
    bool changed = true;
    int st = SIM_NOMEM;

    if (!mark || !match)
        goto out;
    for (int32_t r = 0; r < n; r++) {
        mark[r] = calloc(scheds[r].nsteps + 1, 1);
        match[r] = malloc((scheds[r].nsteps + 1) * sizeof(uint32_t));
        if (!mark[r] || !match[r])
            goto out;
        for (uint32_t i = 0; i < scheds[r].nsteps; i++)
            match[r][i] = NONE;
        reached[r] = false;
    }
    /* the k-th send from a to b is the k-th receive from a on b: two cursors per link */
    for (int32_t b = 0; b < n; b++)
        for (int32_t a = 0; a < n; a++) {
            uint32_t k = 0;
            for (uint32_t i = 0; i < scheds[b].nsteps; i++) {
                const struct coll_step *p = &scheds[b].steps[i];
                if (p->kind != COLL_STEP_RECV || p->peer != a)
                    continue;
                while (k < scheds[a].nsteps &&
                       (scheds[a].steps[k].kind != COLL_STEP_SEND || scheds[a].steps[k].peer != b))
                    k++;
                if (k < scheds[a].nsteps)
                    match[b][i] = k++;
            }
        }
    for (uint32_t i = 0; i < scheds[from].nsteps; i++)
        mark[from][i] = 1;
    /* dependencies point backwards, so a pass per rank in step order settles the rank;
     * passes repeat while messages carry marks across */
    while (changed) {
        changed = false;
        for (int32_t r = 0; r < n; r++)
            for (uint32_t i = 0; i < scheds[r].nsteps; i++) {
                const struct coll_step *p = &scheds[r].steps[i];
                bool m = false;
                if (mark[r][i])
                    continue;
                for (uint32_t d = 0; d < p->ndeps && !m; d++)
                    m = p->deps[d] < i && mark[r][p->deps[d]];
                if (!m && p->kind == COLL_STEP_RECV && match[r][i] != NONE)
                    m = mark[p->peer][match[r][i]];
                if (m) {
                    mark[r][i] = 1;
                    changed = true;
                }
            }
    }
    for (int32_t r = 0; r < n; r++)
        for (uint32_t i = 0; i < scheds[r].nsteps && !reached[r]; i++)
            reached[r] = mark[r][i];
    st = SIM_OK;
out:
    for (int32_t r = 0; mark && match && r < n; r++) {
        free(mark[r]);
        free(match[r]);
    }
    free(mark);
    free(match);
    return st;
}
