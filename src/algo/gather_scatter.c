/*
 * gather_scatter.c - gather and scatter: binomial trees (for the "binomial" entry of
 * binomial.c) and linear, with the "linear" entry (gather, scatter, all-to-all from
 * alltoall.c, barrier from barrier.c).
 *
 * Divisions: 1 block ranges, 2 binomial gather, 3 binomial scatter, 4 linear, 5 the
 * "linear" entry.
 *
 * Buffers (NCCL's): gather: SEND count everywhere, RECV n x count on the root only (absent
 * elsewhere), rank j's SEND landing in block j; in place the root's SEND is its block of
 * RECV. Scatter: the reverse; SEND n x count on the root only, RECV count everywhere; in
 * place the root's RECV is its block of SEND.
 *
 * Binomial, over ranks relative to the root (v = rank - root mod n): v's parent is v with
 * its lowest set bit cleared, its children v + 2^j below that bit; v's subtree is the
 * relative ranks [v, v + lowbit(v)), cut at n. n = 8 (relative ranks):
 *
 *   gather:  round 1: 1->0 3->2 5->4 7->6   round 2: 2->0 6->4   round 3: 4->0
 *   scatter: the same rounds backwards, largest subtree first
 *
 * A non-root with children collects (gather) or holds (scatter) its subtree's blocks in
 * scratch, in relative order, and moves them as one message per link. The root works on
 * RECV (gather) or SEND (scatter) in place, where a subtree's blocks are contiguous in
 * rank order unless they pass rank n-1: then that child sends (receives) two messages,
 * split there. A rank receives its children one after the other (a gather's children
 * finish in that order anyway). Scratch: lowbit(v) x count at most, n/2 x count.
 *
 * Linear: the root posts all n - 1 receives (gather) or sends (scatter) at once; the
 * others one message. Fewest rounds, all traffic through the root: for small n.
 *
 * Cost (alpha per message, beta per byte; m = n x count bytes, the root's buffer):
 *   binomial  ceil(log2 n) alpha + (n-1)/n m beta
 *   linear    (n-1) alpha + (n-1)/n m beta at the root (one round, root-bound)
 */
#include "schedule.h"

COLL_INTERNAL extern const struct coll_algo coll__algo_linear;

/* ---- 1 block ranges ------------------------------------------------------------------ */

/* Blocks of the relative ranks [u, u + cnt) in rank order: up to two ranges of RECV (gather
 * root) or SEND (scatter root), cut where they pass rank n-1. Returns how many. */
static int wrap_ranges(int32_t n, int32_t root, int32_t u, int32_t cnt, size_t c, size_t off[2],
                       size_t len[2])
{
    const int32_t a0 = (u + root) % n, first = COLL_MIN(cnt, n - a0);

    off[0] = (size_t)a0 * c;
    len[0] = (size_t)first * c;
    if (first == cnt)
        return 1;
    off[1] = 0;
    len[1] = (size_t)(cnt - first) * c;
    return 2;
}

struct binom {
    int32_t v, parent, size; /* relative rank, parent's rank (-1 at the root), subtree */
    int32_t nchildren;
    int32_t child[32], csize[32]; /* relative ranks, smallest subtree first */
};

static void binom_of(const struct coll_algo_args *a, struct binom *b)
{
    const int64_t n = a->nranks, v = (a->rank - a->root + n) % n;
    const int64_t low = v ? v & -v : (int64_t)1 << 32;

    b->v = (int32_t)v;
    b->parent = v ? (int32_t)(((v & (v - 1)) + a->root) % n) : -1;
    b->size = (int32_t)COLL_MIN(low, n - v);
    b->nchildren = 0;
    for (int64_t m = 1; m < low && v + m < n; m *= 2) {
        b->child[b->nchildren] = (int32_t)(v + m);
        b->csize[b->nchildren++] = (int32_t)COLL_MIN(m, n - v - m);
    }
}

/* ---- 2 binomial gather --------------------------------------------------------------- */

coll_status_t coll__binomial_gather_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int32_t n = a->nranks, root = a->root;
    const size_t c = a->count;
    struct binom b;
    uint32_t prev = COLL_NO_STEP, cp, deps[2];
    size_t off[2], len[2];
    coll_status_t st;
    int k;

    if (c == 0)
        return COLL_SUCCESS;
    binom_of(a, &b);
    if (b.parent < 0) {
        /* the root: own block (nothing in place), then each subtree straight into RECV */
        st = coll__sched_copy(s, coll__slice(COLL_BUF_RECV, (size_t)root * c, c),
                              coll__slice(COLL_BUF_SEND, 0, c), 0, NULL, NULL);
        for (int32_t i = 0; i < b.nchildren && st == COLL_SUCCESS; i++) {
            int32_t ch = (b.child[i] + root) % n;
            k = wrap_ranges(n, root, b.child[i], b.csize[i], c, off, len);
            for (int p = 0; p < k && st == COLL_SUCCESS; p++)
                st = coll__sched_recv(s, ch, coll__slice(COLL_BUF_RECV, off[p], len[p]),
                                      prev != COLL_NO_STEP, &prev, &prev);
        }
        return st;
    }
    if (b.nchildren == 0) /* a leaf: one block, which never passes rank n-1 */
        return coll__sched_send(s, b.parent, coll__slice(COLL_BUF_SEND, 0, c), 0, NULL, NULL);
    /* scratch holds the subtree's blocks in relative order, own block first */
    st = coll__sched_copy(s, coll__slice(COLL_BUF_SCRATCH, 0, c), coll__slice(COLL_BUF_SEND, 0, c),
                          0, NULL, &cp);
    for (int32_t i = 0; i < b.nchildren && st == COLL_SUCCESS; i++)
        st = coll__sched_recv(
            s, (b.child[i] + root) % n,
            coll__slice(COLL_BUF_SCRATCH, (size_t)(b.child[i] - b.v) * c, (size_t)b.csize[i] * c),
            prev != COLL_NO_STEP, &prev, &prev);
    if (st != COLL_SUCCESS)
        return st;
    deps[0] = cp;
    deps[1] = prev;
    /* to the root, in the pieces it receives into RECV; else one message */
    k = b.parent == root ? wrap_ranges(n, root, b.v, b.size, c, off, len) : 1;
    if (k == 1)
        return coll__sched_send(s, b.parent, coll__slice(COLL_BUF_SCRATCH, 0, (size_t)b.size * c),
                                2, deps, NULL);
    st = coll__sched_send(s, b.parent, coll__slice(COLL_BUF_SCRATCH, 0, len[0]), 2, deps, NULL);
    return st ? st
              : coll__sched_send(s, b.parent, coll__slice(COLL_BUF_SCRATCH, len[0], len[1]), 2,
                                 deps, NULL);
}

/* ---- 3 binomial scatter -------------------------------------------------------------- */

coll_status_t coll__binomial_scatter_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int32_t n = a->nranks, root = a->root;
    const size_t c = a->count;
    struct binom b;
    struct coll_deps got;
    uint32_t idx;
    size_t off[2], len[2];
    coll_status_t st;
    int k;

    if (c == 0)
        return COLL_SUCCESS;
    binom_of(a, &b);
    if (b.parent < 0) {
        /* the root: largest subtree first, straight from SEND; own block (nothing in place) */
        st = COLL_SUCCESS;
        for (int32_t i = b.nchildren; i-- > 0 && st == COLL_SUCCESS;) {
            k = wrap_ranges(n, root, b.child[i], b.csize[i], c, off, len);
            for (int p = 0; p < k && st == COLL_SUCCESS; p++)
                st = coll__sched_send(s, (b.child[i] + root) % n,
                                      coll__slice(COLL_BUF_SEND, off[p], len[p]), 0, NULL, NULL);
        }
        return st ? st
                  : coll__sched_copy(s, coll__slice(COLL_BUF_RECV, 0, c),
                                     coll__slice(COLL_BUF_SEND, (size_t)root * c, c), 0, NULL,
                                     NULL);
    }
    if (b.nchildren == 0) /* a leaf: its own block only */
        return coll__sched_recv(s, b.parent, coll__slice(COLL_BUF_RECV, 0, c), 0, NULL, NULL);
    /* the subtree's blocks into scratch in relative order, in the pieces the root sends */
    k = b.parent == root ? wrap_ranges(n, root, b.v, b.size, c, off, len) : 1;
    if (k == 1)
        len[0] = (size_t)b.size * c;
    coll__deps_clear(&got);
    for (int p = 0; p < k; p++) {
        st = coll__sched_recv(s, b.parent, coll__slice(COLL_BUF_SCRATCH, p ? len[0] : 0, len[p]), 0,
                              NULL, &idx);
        if (st != COLL_SUCCESS)
            return st;
        coll__deps_add(&got, idx);
    }
    for (int32_t i = b.nchildren; i-- > 0;) {
        st = coll__sched_send(
            s, (b.child[i] + root) % n,
            coll__slice(COLL_BUF_SCRATCH, (size_t)(b.child[i] - b.v) * c, (size_t)b.csize[i] * c),
            got.n, got.d, NULL);
        if (st != COLL_SUCCESS)
            return st;
    }
    return coll__sched_copy(s, coll__slice(COLL_BUF_RECV, 0, c),
                            coll__slice(COLL_BUF_SCRATCH, 0, c), got.n, got.d, NULL);
}

/* ---- 4 linear ------------------------------------------------------------------------ */

static coll_status_t linear_gather(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int32_t n = a->nranks, r = a->rank, root = a->root;
    const size_t c = a->count;
    coll_status_t st;

    if (c == 0)
        return COLL_SUCCESS;
    if (r != root)
        return coll__sched_send(s, root, coll__slice(COLL_BUF_SEND, 0, c), 0, NULL, NULL);
    st = coll__sched_copy(s, coll__slice(COLL_BUF_RECV, (size_t)root * c, c),
                          coll__slice(COLL_BUF_SEND, 0, c), 0, NULL, NULL);
    for (int32_t i = 1; i < n && st == COLL_SUCCESS; i++) {
        size_t j = (size_t)((root + i) % n);
        st = coll__sched_recv(s, (int32_t)j, coll__slice(COLL_BUF_RECV, j * c, c), 0, NULL, NULL);
    }
    return st;
}

static coll_status_t linear_scatter(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int32_t n = a->nranks, r = a->rank, root = a->root;
    const size_t c = a->count;
    coll_status_t st = COLL_SUCCESS;

    if (c == 0)
        return COLL_SUCCESS;
    if (r != root)
        return coll__sched_recv(s, root, coll__slice(COLL_BUF_RECV, 0, c), 0, NULL, NULL);
    for (int32_t i = 1; i < n && st == COLL_SUCCESS; i++) {
        size_t j = (size_t)((root + i) % n);
        st = coll__sched_send(s, (int32_t)j, coll__slice(COLL_BUF_SEND, j * c, c), 0, NULL, NULL);
    }
    return st ? st
              : coll__sched_copy(s, coll__slice(COLL_BUF_RECV, 0, c),
                                 coll__slice(COLL_BUF_SEND, (size_t)root * c, c), 0, NULL, NULL);
}

/* ---- 5 the "linear" entry ------------------------------------------------------------ */

static bool linear_applicable(const struct coll_algo_args *a)
{
    return coll__algo_sizes_fit(a, 1);
}

static coll_status_t linear_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    coll_status_t st = coll__algo_check(&coll__algo_linear, a);

    if (st != COLL_SUCCESS)
        return st;
    if (!linear_applicable(a))
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "linear %s: %zu elements on %d ranks overflow the buffers' size",
                           coll__coll_name(a->coll), a->count, a->nranks);
    switch (a->coll) {
    case COLL_COLL_GATHER:
        return linear_gather(a, s);
    case COLL_COLL_SCATTER:
        return linear_scatter(a, s);
    case COLL_COLL_ALLTOALL:
        return coll__linear_alltoall_build(a, s); /* alltoall.c */
    default:
        return coll__linear_barrier_build(a, s); /* barrier.c */
    }
}

COLL_INTERNAL const struct coll_algo coll__algo_linear = {
    .name = "linear",
    .desc = "everything posted at once, one round through the root or all pairs: small n",
    .colls = 1u << COLL_COLL_GATHER | 1u << COLL_COLL_SCATTER | 1u << COLL_COLL_ALLTOALL |
             1u << COLL_COLL_BARRIER,
    .applicable = linear_applicable,
    .build = linear_build,
};
