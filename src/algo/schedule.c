/*
 * schedule.c - the helpers every builder uses: appending steps (which keeps buf_count
 * covering every slice), the structural check the plan runs on every schedule it caches, and
 * the argument check of the builders.
 *
 * A step reads and writes these slices (the rest of struct coll_step is ignored):
 *   SEND   reads src           RECV   writes dst
 *   REDUCE reads src, src2, writes dst     COPY   reads src, writes dst
 */
#include "schedule.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {"send", "recv", "reduce", "copy"};
static const char *const buf_names[COLL_NUM_BUFS] = {"send", "recv", "scratch"};

void coll__sched_init(struct coll_schedule *s, const struct coll_algo_args *a)
{
    memset(s, 0, sizeof(*s));
    s->nranks = a->nranks;
    s->rank = a->rank;
    s->dtype = a->dtype;
    s->elem_size = a->elem_size ? a->elem_size : coll__dtype_size(a->dtype);
}

void coll__sched_free(struct coll_schedule *s)
{
    if (!s)
        return;
    free(s->steps);
    s->steps = NULL;
    s->nsteps = s->cap = 0;
}

/* Which slices a step of this kind touches: bit 0 src, bit 1 src2, bit 2 dst. */
static unsigned kind_slices(uint8_t kind)
{
    switch (kind) {
    case COLL_STEP_SEND:
        return 1u;
    case COLL_STEP_RECV:
        return 4u;
    case COLL_STEP_REDUCE:
        return 7u;
    case COLL_STEP_COPY:
        return 5u;
    }
    return 0;
}

static void grow_buf_count(struct coll_schedule *s, const struct coll_slice *sl)
{
    /* Out-of-range buffer ids and overflowing ends are left for validate to name. */
    if (sl->buf < COLL_NUM_BUFS && sl->off + sl->count >= sl->off &&
        s->buf_count[sl->buf] < sl->off + sl->count)
        s->buf_count[sl->buf] = sl->off + sl->count;
}

coll_status_t coll__sched_add(struct coll_schedule *s, uint8_t kind, int32_t peer,
                              struct coll_slice src, struct coll_slice src2, struct coll_slice dst,
                              uint32_t ndeps, const uint32_t *deps, uint32_t *idx_p)
{
    struct coll_step *st;
    unsigned used = kind_slices(kind);

    if (ndeps > COLL_MAX_DEPS)
        return coll__error(NULL, COLL_INTERNAL_ERROR,
                           "schedule step %u: %u dependencies (at most %d)", s->nsteps, ndeps,
                           COLL_MAX_DEPS);
    if (s->nsteps == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 64;
        struct coll_step *p;

        /* step indices are uint32_t; size_t holds cap * sizeof(*p) on 64-bit hosts */
        if (cap <= s->cap)
            return coll__error(NULL, COLL_SYSTEM_ERROR, "schedule too long (%u steps)", s->nsteps);
        p = realloc(s->steps, (size_t)cap * sizeof(*p));
        if (!p)
            return coll__sys_error(NULL, ENOMEM, "cannot grow a schedule to %u steps", cap);
        s->steps = p;
        s->cap = cap;
    }
    st = &s->steps[s->nsteps];
    memset(st, 0, sizeof(*st));
    st->kind = kind;
    st->peer = peer;
    st->src = src;
    st->src2 = src2;
    st->dst = dst;
    st->ndeps = ndeps;
    if (ndeps)
        memcpy(st->deps, deps, ndeps * sizeof(*deps));
    if (used & 1u)
        grow_buf_count(s, &st->src);
    if (used & 2u)
        grow_buf_count(s, &st->src2);
    if (used & 4u)
        grow_buf_count(s, &st->dst);
    if (idx_p)
        *idx_p = s->nsteps;
    s->nsteps++;
    return COLL_SUCCESS;
}

coll_status_t coll__sched_send(struct coll_schedule *s, int32_t peer, struct coll_slice src,
                               uint32_t ndeps, const uint32_t *deps, uint32_t *idx_p)
{
    struct coll_slice none = {0, 0, 0};
    return coll__sched_add(s, COLL_STEP_SEND, peer, src, none, none, ndeps, deps, idx_p);
}

coll_status_t coll__sched_recv(struct coll_schedule *s, int32_t peer, struct coll_slice dst,
                               uint32_t ndeps, const uint32_t *deps, uint32_t *idx_p)
{
    struct coll_slice none = {0, 0, 0};
    return coll__sched_add(s, COLL_STEP_RECV, peer, none, none, dst, ndeps, deps, idx_p);
}

coll_status_t coll__sched_reduce(struct coll_schedule *s, struct coll_slice dst,
                                 struct coll_slice a, struct coll_slice b, uint32_t ndeps,
                                 const uint32_t *deps, uint32_t *idx_p)
{
    return coll__sched_add(s, COLL_STEP_REDUCE, -1, a, b, dst, ndeps, deps, idx_p);
}

coll_status_t coll__sched_copy(struct coll_schedule *s, struct coll_slice dst,
                               struct coll_slice src, uint32_t ndeps, const uint32_t *deps,
                               uint32_t *idx_p)
{
    struct coll_slice none = {0, 0, 0};
    return coll__sched_add(s, COLL_STEP_COPY, -1, src, none, dst, ndeps, deps, idx_p);
}

/* SEND and RECV may be one memory (in place), so for overlap they are one space. */
static int slice_space(const struct coll_slice *sl)
{
    return sl->buf == COLL_BUF_SCRATCH ? 1 : 0;
}

static bool slices_overlap(const struct coll_slice *a, const struct coll_slice *b)
{
    return slice_space(a) == slice_space(b) && a->off < b->off + b->count &&
           b->off < a->off + a->count;
}

static bool slices_same(const struct coll_slice *a, const struct coll_slice *b)
{
    return slice_space(a) == slice_space(b) && a->off == b->off && a->count == b->count;
}

static coll_status_t step_error(const struct coll_schedule *s, uint32_t i, const char *what)
{
    const struct coll_step *st = &s->steps[i];
    const char *kind = st->kind < COLL_ARRAY_SIZE(kind_names) ? kind_names[st->kind] : "?";

    return coll__error(NULL, COLL_INTERNAL_ERROR, "%s schedule of rank %d/%d: step %u (%s): %s",
                       s->algo ? s->algo->name : "a", s->rank, s->nranks, i, kind, what);
}

static coll_status_t check_slice(const struct coll_schedule *s, uint32_t i,
                                 const struct coll_slice *sl, const char *name)
{
    char msg[160];

    if (sl->buf >= COLL_NUM_BUFS) {
        snprintf(msg, sizeof(msg), "%s names buffer %u", name, sl->buf);
        return step_error(s, i, msg);
    }
    if (sl->count == 0) {
        snprintf(msg, sizeof(msg), "%s is empty (builders skip empty slices)", name);
        return step_error(s, i, msg);
    }
    if (sl->off + sl->count < sl->off || sl->off + sl->count > s->buf_count[sl->buf]) {
        snprintf(msg, sizeof(msg), "%s %s[%zu, +%zu) is outside the %zu elements of buf_count",
                 name, buf_names[sl->buf], sl->off, sl->count, s->buf_count[sl->buf]);
        return step_error(s, i, msg);
    }
    return COLL_SUCCESS;
}

coll_status_t coll__sched_validate(const struct coll_schedule *s)
{
    char msg[160];
    coll_status_t st;

    if (s->nranks < 1 || s->rank < 0 || s->rank >= s->nranks)
        return coll__error(NULL, COLL_INTERNAL_ERROR, "schedule of rank %d of %d ranks", s->rank,
                           s->nranks);
    if (s->nsteps > 0 && s->elem_size == 0)
        return coll__error(NULL, COLL_INTERNAL_ERROR, "schedule of rank %d: element size 0",
                           s->rank);
    for (uint32_t i = 0; i < s->nsteps; i++) {
        const struct coll_step *p = &s->steps[i];
        unsigned used = kind_slices(p->kind);

        if (!used)
            return step_error(s, i, "unknown step kind");
        if (p->ndeps > COLL_MAX_DEPS)
            return step_error(s, i, "too many dependencies");
        for (uint32_t d = 0; d < p->ndeps; d++)
            if (p->deps[d] >= i) {
                snprintf(msg, sizeof(msg), "depends on step %u, not an earlier one", p->deps[d]);
                return step_error(s, i, msg);
            }
        if (p->kind == COLL_STEP_SEND || p->kind == COLL_STEP_RECV) {
            if (p->peer < 0 || p->peer >= s->nranks || p->peer == s->rank) {
                snprintf(msg, sizeof(msg), "peer %d is not another rank", p->peer);
                return step_error(s, i, msg);
            }
        } else if (p->peer != -1) {
            return step_error(s, i, "a local step names a peer");
        }
        if ((used & 1u) && (st = check_slice(s, i, &p->src, "src")) != COLL_SUCCESS)
            return st;
        if ((used & 2u) && (st = check_slice(s, i, &p->src2, "src2")) != COLL_SUCCESS)
            return st;
        if ((used & 4u) && (st = check_slice(s, i, &p->dst, "dst")) != COLL_SUCCESS)
            return st;
        /* The user's send buffer is const: nothing may write it. */
        if ((used & 4u) && p->dst.buf == COLL_BUF_SEND)
            return step_error(s, i, "writes the send buffer");
        if (p->kind == COLL_STEP_COPY && p->src.count != p->dst.count)
            return step_error(s, i, "src and dst counts differ");
        if (p->kind == COLL_STEP_REDUCE) {
            if (p->src.count != p->dst.count || p->src2.count != p->dst.count)
                return step_error(s, i, "src, src2 and dst counts differ");
            /* coll__reduce allows dst to be a source exactly, never partly. */
            if ((slices_overlap(&p->dst, &p->src) && !slices_same(&p->dst, &p->src)) ||
                (slices_overlap(&p->dst, &p->src2) && !slices_same(&p->dst, &p->src2)))
                return step_error(s, i, "dst partly overlaps a source (in place included)");
        }
    }
    return COLL_SUCCESS;
}

coll_status_t coll__algo_check(const struct coll_algo *algo, const struct coll_algo_args *a)
{
    if ((unsigned)a->coll >= COLL_NUM_COLLS || !(algo->colls & (1u << a->coll)))
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "algorithm %s cannot run %s", algo->name,
                           coll__coll_name(a->coll));
    if (a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "%s %s: rank %d of %d ranks", algo->name,
                           coll__coll_name(a->coll), a->rank, a->nranks);
    if (a->root < 0 || a->root >= a->nranks)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "%s %s: root %d of %d ranks", algo->name,
                           coll__coll_name(a->coll), a->root, a->nranks);
    if (a->chunk_count < 1)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "%s %s: chunk_count is 0", algo->name,
                           coll__coll_name(a->coll));
    if (a->elem_size < 1 && coll__dtype_size(a->dtype) < 1)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "%s %s: unknown dtype %d", algo->name,
                           coll__coll_name(a->coll), (int)a->dtype);
    return COLL_SUCCESS;
}

bool coll__algo_sizes_fit(const struct coll_algo_args *a, size_t mult)
{
    size_t esz = a->elem_size ? a->elem_size : coll__dtype_size(a->dtype);
    size_t n = a->nranks > 0 ? (size_t)a->nranks : 1, lim = SIZE_MAX / 2;

    /* halved: offsets plus counts of two slices side by side stay below SIZE_MAX */
    if (esz == 0 || mult == 0)
        return true;
    return a->count <= lim / n / mult / esz;
}

bool coll__sched_trivial(const struct coll_algo_args *a, struct coll_schedule *s,
                         coll_status_t *st_p)
{
    *st_p = COLL_SUCCESS;
    if (a->count == 0)
        return true;
    if (a->nranks != 1)
        return false;
    *st_p = coll__sched_copy(s, coll__slice(COLL_BUF_RECV, 0, a->count),
                             coll__slice(COLL_BUF_SEND, 0, a->count), 0, NULL, NULL);
    return true;
}
