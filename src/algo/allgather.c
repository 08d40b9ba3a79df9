/*
 * allgather.c - all-gather: the ring engine (also vdg's second half), ring all-gather, and
 * Bruck's all-gather with the "bruck" table entry (whose all-to-all is in alltoall.c).
 *
 * Divisions: 1 the ring all-gather engine, 2 ring all-gather, 3 Bruck all-gather, 4 the
 * "bruck" entry.
 *
 * Buffers (NCCL's): SEND holds count elements, RECV n x count; rank r's SEND lands in
 * block r, RECV[r count, +count). In place, SEND is that block of RECV.
 *
 * Ring all-gather, n = 4, rank 1 (blocks named by their owner):
 *
 *              step 0     step 1     step 2
 *   send       1          0          3           to rank 2
 *   recv       0          3          2           from rank 0
 *
 *        +-> r0 --> r1 --> r2 --> r3 --+
 *        +-----------------------------+
 *
 * Each block moves in chunks of chunk_count elements, each chunk forwarded as soon as it
 * is in, so the n-1 steps overlap. No scratch: each block of RECV is written once.
 * Own block: copied SEND -> RECV chunk by chunk first (nothing in place), then sent from
 * RECV like every other block.
 *
 * Bruck all-gather, n = 5, rank r, blocks named by their offset from r ("+2": rank r+2's):
 *
 *   SCRATCH  [+0]                    after the copy of SEND
 *   round 0  [+0 +1]                 sent [+0] to r-1, got [+1] from r+1
 *   round 1  [+0 +1 +2 +3]           sent [+0 +1] to r-2, got [+2 +3] from r+2
 *   round 2  [+0 +1 +2 +3 +4]        sent [+0] to r-4, got [+4] from r+4
 *   then RECV[(r + i) mod n] = SCRATCH[i]: two copies (a rotation)
 *
 * ceil(log2 n) messages per rank whatever n is, at the price of n x count scratch and the
 * final rotation. Round 0 sends straight from SEND.
 *
 * Cost (alpha per message, beta per byte; m = n x count bytes, the result; C chunks per
 * block):
 *   ring   (n-1) C alpha + (n-1)/n m beta
 *   bruck  ceil(log2 n) alpha + (n-1)/n m beta   (+ 2 local copies of up to m)
 */
#include "schedule.h"

#include <errno.h>
#include <stdlib.h>

COLL_INTERNAL extern const struct coll_algo coll__algo_bruck;

static size_t div_up(size_t a, size_t b)
{
    return a / b + (a % b != 0);
}

/* ---- 1 the ring all-gather engine ---------------------------------------------------- */

coll_status_t coll__ring_allgather_blocks(struct coll_schedule *s, const struct coll_ring_ag *g)
{
    const int32_t n = g->n;
    const size_t chunk = g->chunk;
    size_t cmax = 0;
    uint32_t *prev = NULL, *cur = NULL, *t;
    coll_status_t st = COLL_SUCCESS;

    for (int32_t b = 0; b < n; b++)
        cmax = COLL_MAX(cmax, div_up(g->len[b], chunk));
    if (n < 2 || cmax == 0)
        return COLL_SUCCESS;
    /* prev[c]: the step that brought chunk c of the block this step sends */
    prev = malloc(cmax * sizeof(*prev));
    cur = malloc(cmax * sizeof(*cur));
    if (!prev || !cur) {
        st = coll__sys_error(NULL, ENOMEM, "ring all-gather: no memory for %zu chunks", cmax);
        goto out_free;
    }
    for (size_t c = 0; c < cmax; c++) /* step 0 sends the own block's chunks */
        prev[c] =
            g->own_ready && c < div_up(g->len[g->pos], chunk) ? g->own_ready[c] : COLL_NO_STEP;
    for (int32_t k = 0; k < n - 1; k++) {
        const int32_t sb = (g->pos - k + n) % n, rb = (g->pos - k - 1 + 2 * n) % n;
        const size_t cs = div_up(g->len[sb], chunk), cr = div_up(g->len[rb], chunk);
        const uint32_t after = g->recv_after ? g->recv_after[rb] : COLL_NO_STEP;

        for (size_t c = 0; c < COLL_MAX(cs, cr); c++) {
            size_t o = c * chunk;
            cur[c] = COLL_NO_STEP;
            if (c < cs) {
                struct coll_slice src =
                    coll__slice(COLL_BUF_RECV, g->off[sb] + o, COLL_MIN(chunk, g->len[sb] - o));
                uint32_t nd = prev[c] != COLL_NO_STEP;
                COLL_CHECK_GOTO(coll__sched_send(s, g->right, src, nd, &prev[c], NULL), st,
                                out_free);
            }
            if (c < cr) {
                struct coll_slice dst =
                    coll__slice(COLL_BUF_RECV, g->off[rb] + o, COLL_MIN(chunk, g->len[rb] - o));
                uint32_t nd = after != COLL_NO_STEP;
                COLL_CHECK_GOTO(coll__sched_recv(s, g->left, dst, nd, &after, &cur[c]), st,
                                out_free);
            }
        }
        t = prev, prev = cur, cur = t;
    }

out_free:
    free(cur);
    free(prev);
    return st;
}

/* ---- 2 ring all-gather --------------------------------------------------------------- */

coll_status_t coll__ring_allgather_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int32_t n = a->nranks, r = a->rank;
    const size_t count = a->count, chunk = a->chunk_count, nch = div_up(count, chunk);
    size_t *off = NULL, *len = NULL;
    uint32_t *ready = NULL;
    struct coll_ring_ag g;
    coll_status_t st = COLL_SUCCESS;

    if (count == 0)
        return COLL_SUCCESS;
    if (n == 1)
        return coll__sched_copy(s, coll__slice(COLL_BUF_RECV, 0, count),
                                coll__slice(COLL_BUF_SEND, 0, count), 0, NULL, NULL);
    off = malloc((size_t)n * sizeof(*off));
    len = malloc((size_t)n * sizeof(*len));
    ready = malloc(nch * sizeof(*ready));
    if (!off || !len || !ready) {
        st = coll__sys_error(NULL, ENOMEM, "ring all-gather: no memory for %d blocks", n);
        goto out_free;
    }
    for (int32_t b = 0; b < n; b++) {
        off[b] = (size_t)b * count;
        len[b] = count;
    }
    /* own block into RECV chunk by chunk, so that chunk 0 leaves after one chunk's copy */
    for (size_t c = 0; c < nch; c++) {
        size_t o = c * chunk, l = COLL_MIN(chunk, count - o);
        COLL_CHECK_GOTO(coll__sched_copy(s, coll__slice(COLL_BUF_RECV, (size_t)r * count + o, l),
                                         coll__slice(COLL_BUF_SEND, o, l), 0, NULL, &ready[c]),
                        st, out_free);
    }
    g = (struct coll_ring_ag){
        .n = n,
        .pos = r,
        .left = (r + n - 1) % n,
        .right = (r + 1) % n,
        .off = off,
        .len = len,
        .chunk = chunk,
        .own_ready = ready,
        .recv_after = NULL,
    };
    st = coll__ring_allgather_blocks(s, &g);

out_free:
    free(ready);
    free(len);
    free(off);
    return st;
}

/* ---- 3 Bruck all-gather -------------------------------------------------------------- */

static coll_status_t bruck_allgather(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int32_t n = a->nranks, r = a->rank;
    const size_t c = a->count, un = (size_t)n, ur = (size_t)r;
    uint32_t copy0, snd = COLL_NO_STEP, rcv = COLL_NO_STEP, idx;
    struct coll_deps ds;
    coll_status_t st;

    if (c == 0)
        return COLL_SUCCESS;
    if (n == 1)
        return coll__sched_copy(s, coll__slice(COLL_BUF_RECV, 0, c),
                                coll__slice(COLL_BUF_SEND, 0, c), 0, NULL, NULL);
    st = coll__sched_copy(s, coll__slice(COLL_BUF_SCRATCH, 0, c), coll__slice(COLL_BUF_SEND, 0, c),
                          0, NULL, &copy0);
    if (st != COLL_SUCCESS)
        return st;
    for (size_t dist = 1; dist < un; dist *= 2) {
        size_t cnt = COLL_MIN(dist, un - dist); /* blocks this round */
        int32_t to = (int32_t)((ur + un - dist) % un), from = (int32_t)((ur + dist) % un);
        /* round 0 sends SEND itself; later rounds what SCRATCH holds so far */
        struct coll_slice src = dist == 1 ? coll__slice(COLL_BUF_SEND, 0, c)
                                          : coll__slice(COLL_BUF_SCRATCH, 0, cnt * c);

        coll__deps_clear(&ds);
        if (dist > 1) {
            coll__deps_add(&ds, rcv);
            coll__deps_add(&ds, snd); /* which waited for every earlier round */
            coll__deps_add(&ds, copy0);
        }
        st = coll__sched_send(s, to, src, ds.n, ds.d, &snd);
        if (st != COLL_SUCCESS)
            return st;
        /* a fresh place: nothing read or wrote it before */
        st = coll__sched_recv(s, from, coll__slice(COLL_BUF_SCRATCH, dist * c, cnt * c), 0, NULL,
                              &rcv);
        if (st != COLL_SUCCESS)
            return st;
    }
    /* the rotation: SCRATCH[i] is rank r+i's block; it overwrites SEND's place in place,
     * after the copy and the sends that read SEND */
    coll__deps_clear(&ds);
    coll__deps_add(&ds, rcv);
    coll__deps_add(&ds, snd);
    coll__deps_add(&ds, copy0);
    st = coll__sched_copy(s, coll__slice(COLL_BUF_RECV, ur * c, (un - ur) * c),
                          coll__slice(COLL_BUF_SCRATCH, 0, (un - ur) * c), ds.n, ds.d, &idx);
    if (st != COLL_SUCCESS || r == 0)
        return st;
    return coll__sched_copy(s, coll__slice(COLL_BUF_RECV, 0, ur * c),
                            coll__slice(COLL_BUF_SCRATCH, (un - ur) * c, ur * c), ds.n, ds.d, NULL);
}

/* ---- 4 the "bruck" entry ------------------------------------------------------------- */

static bool bruck_applicable(const struct coll_algo_args *a)
{
    return coll__algo_sizes_fit(a, 3); /* all-to-all: n x count scratch and two half-size packs */
}

static coll_status_t bruck_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    coll_status_t st = coll__algo_check(&coll__algo_bruck, a);

    if (st != COLL_SUCCESS)
        return st;
    if (!bruck_applicable(a))
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "bruck %s: %zu elements on %d ranks "
                           "overflow the buffers' size",
                           coll__coll_name(a->coll), a->count, a->nranks);
    return a->coll == COLL_COLL_ALLGATHER ? bruck_allgather(a, s)
                                          : coll__bruck_alltoall_build(a, s);
}

COLL_INTERNAL const struct coll_algo coll__algo_bruck = {
    .name = "bruck",
    .desc = "Bruck's log2 n rounds with local rotations: latency-optimal all-gather/all-to-all",
    .colls = 1u << COLL_COLL_ALLGATHER | 1u << COLL_COLL_ALLTOALL,
    .applicable = bruck_applicable,
    .build = bruck_build,
};
