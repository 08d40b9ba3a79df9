/*
 * rd.c - recursive doubling and halving: "rd" (all-reduce and all-gather by doubling,
 * reduce-scatter by halving) and "rabenseifner" (all-reduce as halving reduce-scatter +
 * doubling all-gather; reduce as halving reduce-scatter + binomial gather).
 *
 * Divisions: 1 the fold, 2 rd all-reduce, 3 rd all-gather, 4 rd reduce-scatter,
 * 5 Rabenseifner, 6 the entries.
 *
 * Power of two n: in round m (m = 1, 2, 4, ... for doubling; n/2, n/4, ... 1 for halving)
 * rank v exchanges with v XOR m. n = 8, rank 5 (binary 101):
 *
 *   doubling   m=1: 5<->4   m=2: 5<->7   m=4: 5<->1      what v holds doubles each round
 *   halving    m=4: 5<->1   m=2: 5<->7   m=1: 5<->4      what v reduces halves each round
 *
 *   all-gather  round m: send the m blocks of v's aligned group [v & ~(m-1), +m), receive
 *               the partner's group next to it.
 *   halving     round m: of v's range of 2m blocks keep the half holding block v, send the
 *               other half to v^m, receive v^m's partial of the kept half and reduce it in.
 *
 * Other n, the fold: with p the largest power of two <= n, the n - p "extra" ranks p + i
 * first hand their input to partner i and sit out; partner i stands for both (for
 * all-gather and reduce-scatter its group covers blocks i and p + i, so a group is two
 * ranges and a round up to two messages), then gives the extra rank its result. n = 6:
 *
 *   fold: 4 -> 0, 5 -> 1;   rounds among 0..3;   unfold: 0 -> 4, 1 -> 5
 *
 * Rabenseifner cuts count into p nearly equal blocks (empty ones, when count < p, move
 * nothing), reduce-scatters them by halving so that rank v holds block v reduced, then
 * all-gathers by doubling (all-reduce) or gathers them to the root along the same pairs
 * (reduce: in round m, ranks with lowest set bit m send what they hold to v - m). A reduce
 * numbers ranks relative to the root, so the root is never an extra rank.
 *
 * Scratch: rd all-reduce count (the partner's vector); rd all-gather none; rd
 * reduce-scatter 2 n count (the partial of every block and the received half; the fold
 * receives everything); Rabenseifner count (received halves), plus count for the partial
 * off the root of a reduce (RECV is absent there).
 *
 * Cost (alpha per message, beta per byte, gamma per reduced byte; L = log2 p; m bytes:
 * the vector for all-reduce/reduce, n x count for all-gather/reduce-scatter):
 *   rd all-reduce           L (alpha + m beta + m gamma)
 *   rd all-gather           L alpha + (n-1)/n m beta
 *   rd reduce-scatter       L alpha + (n-1)/n m (beta + gamma)
 *   rabenseifner all-red.   2 L alpha + 2 (p-1)/p m beta + (p-1)/p m gamma
 *   rabenseifner reduce     2 L alpha + 2 (p-1)/p m beta + (p-1)/p m gamma
 * and where n is not a power of two the fold adds 2 alpha + 2 m beta + m gamma (all-reduce:
 * the extra rank's vector in, the result out; all-gather and reduce-scatter alike, rounds
 * of up to two messages). rd all-reduce is the latency choice; Rabenseifner moves about 2 m
 * instead of L m.
 */
#include "schedule.h"

#include <string.h>

COLL_INTERNAL extern const struct coll_algo coll__algo_rd;
COLL_INTERNAL extern const struct coll_algo coll__algo_rabenseifner;

/* ---- 1 the fold ---------------------------------------------------------------------- */

struct fold {
    int32_t p, rem; /* the largest power of two <= n; the extra ranks */
    bool extra;     /* this rank sits out (v >= p) */
    bool partner;   /* this rank stands for an extra rank too (v < rem) */
    int32_t mate;   /* the other rank of the pair (relative), if any */
};

static struct fold fold_of(int32_t n, int32_t v)
{
    struct fold f;

    f.p = 1;
    while (f.p <= n / 2)
        f.p *= 2;
    f.rem = n - f.p;
    f.extra = v >= f.p;
    f.partner = v < f.rem;
    f.mate = f.extra ? v - f.p : f.partner ? v + f.p : -1;
    return f;
}

/* The blocks that virtual ranks [lo, hi) stand for under the fold: [lo, hi) and
 * [p + lo, p + min(hi, rem)). */
static void vrange(const struct fold *f, int32_t lo, int32_t hi, int32_t out[2][2])
{
    out[0][0] = lo;
    out[0][1] = hi;
    out[1][0] = f->p + lo;
    out[1][1] = f->p + (lo < f->rem ? COLL_MIN(hi, f->rem) : lo);
}

static struct coll_slice blocks(uint8_t buf, size_t base, const int32_t rg[2], size_t c)
{
    return coll__slice(buf, base + (size_t)rg[0] * c, (size_t)(rg[1] - rg[0]) * c);
}

/* ---- 2 rd all-reduce ----------------------------------------------------------------- */

static coll_status_t rd_allreduce(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int32_t n = a->nranks, r = a->rank;
    const size_t c = a->count;
    const struct fold f = fold_of(n, r);
    const struct coll_slice recv = coll__slice(COLL_BUF_RECV, 0, c),
                            send = coll__slice(COLL_BUF_SEND, 0, c),
                            tmp = coll__slice(COLL_BUF_SCRATCH, 0, c);
    struct coll_slice src = send;
    uint32_t last = COLL_NO_STEP, sd, rv, deps[2];
    coll_status_t st;

    if (f.extra) {
        /* in place the result overwrites what the send reads: after it */
        st = coll__sched_send(s, f.mate, send, 0, NULL, &sd);
        return st ? st : coll__sched_recv(s, f.mate, recv, 1, &sd, NULL);
    }
    if (f.partner) {
        st = coll__sched_recv(s, f.mate, tmp, 0, NULL, &rv);
        if (st == COLL_SUCCESS)
            st = coll__sched_reduce(s, recv, send, tmp, 1, &rv, &last); /* r < mate */
        if (st != COLL_SUCCESS)
            return st;
        src = recv;
    }
    for (int32_t m = 1; m < f.p; m *= 2) {
        const int32_t q = r ^ m;
        const uint32_t nl = last != COLL_NO_STEP;

        st = coll__sched_send(s, q, src, nl, &last, &sd);
        /* tmp is free once the last reduce has read it */
        if (st == COLL_SUCCESS)
            st = coll__sched_recv(s, q, tmp, nl, &last, &rv);
        if (st != COLL_SUCCESS)
            return st;
        /* the lower rank's value first on both sides: every rank gets the same bits; and
         * after the send, which reads the place (in place, or RECV from round 1 on) */
        deps[0] = rv;
        deps[1] = sd;
        st = coll__sched_reduce(s, recv, r < q ? src : tmp, r < q ? tmp : src, 2, deps, &last);
        if (st != COLL_SUCCESS)
            return st;
        src = recv;
    }
    if (f.partner)
        return coll__sched_send(s, f.mate, recv, 1, &last, NULL);
    return COLL_SUCCESS;
}

/* ---- 3 rd all-gather ----------------------------------------------------------------- */

static coll_status_t rd_allgather(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int32_t n = a->nranks, r = a->rank;
    const size_t c = a->count, ur = (size_t)r;
    const struct fold f = fold_of(n, r);
    struct coll_deps last, next;
    uint32_t idx, sd;
    coll_status_t st;

    if (f.extra) {
        const size_t un = (size_t)n;
        st = coll__sched_send(s, f.mate, coll__slice(COLL_BUF_SEND, 0, c), 0, NULL, &sd);
        /* everything but our own block, around it */
        if (st == COLL_SUCCESS)
            st = coll__sched_recv(s, f.mate, coll__slice(COLL_BUF_RECV, 0, ur * c), 0, NULL, NULL);
        if (st == COLL_SUCCESS && ur + 1 < un)
            st = coll__sched_recv(s, f.mate,
                                  coll__slice(COLL_BUF_RECV, (ur + 1) * c, (un - ur - 1) * c), 0,
                                  NULL, NULL);
        /* in place a no-op; it waits for the send that reads SEND all the same */
        if (st == COLL_SUCCESS)
            st = coll__sched_copy(s, coll__slice(COLL_BUF_RECV, ur * c, c),
                                  coll__slice(COLL_BUF_SEND, 0, c), 1, &sd, NULL);
        return st;
    }
    coll__deps_clear(&last);
    st = coll__sched_copy(s, coll__slice(COLL_BUF_RECV, ur * c, c),
                          coll__slice(COLL_BUF_SEND, 0, c), 0, NULL, &idx);
    if (st != COLL_SUCCESS)
        return st;
    coll__deps_add(&last, idx);
    if (f.partner) {
        st = coll__sched_recv(s, f.mate, coll__slice(COLL_BUF_RECV, (size_t)f.mate * c, c), 0, NULL,
                              &idx);
        if (st != COLL_SUCCESS)
            return st;
        coll__deps_add(&last, idx);
    }
    for (int32_t m = 1; m < f.p; m *= 2) {
        const int32_t q = r ^ m, g = r & ~(m - 1), gq = g ^ m;
        int32_t mine[2][2], theirs[2][2];

        vrange(&f, g, g + m, mine);
        vrange(&f, gq, gq + m, theirs);
        coll__deps_clear(&next);
        for (int k = 0; k < 2; k++) {
            if (mine[k][1] == mine[k][0])
                continue;
            st = coll__sched_send(s, q, blocks(COLL_BUF_RECV, 0, mine[k], c), last.n, last.d, &sd);
            if (st != COLL_SUCCESS)
                return st;
            if (k == 0)
                coll__deps_add(&next, sd); /* it waited for everything before */
        }
        /* fresh places: every block of RECV is received once */
        for (int k = 0; k < 2; k++) {
            if (theirs[k][1] == theirs[k][0])
                continue;
            st = coll__sched_recv(s, q, blocks(COLL_BUF_RECV, 0, theirs[k], c), 0, NULL, &idx);
            if (st != COLL_SUCCESS)
                return st;
            coll__deps_add(&next, idx);
        }
        last = next;
    }
    if (f.partner) {
        const size_t e = (size_t)f.mate, un = (size_t)n;
        st =
            coll__sched_send(s, f.mate, coll__slice(COLL_BUF_RECV, 0, e * c), last.n, last.d, NULL);
        if (st == COLL_SUCCESS && e + 1 < un)
            st = coll__sched_send(s, f.mate,
                                  coll__slice(COLL_BUF_RECV, (e + 1) * c, (un - e - 1) * c), last.n,
                                  last.d, NULL);
    }
    return st;
}

/* ---- 4 rd reduce-scatter (recursive halving) ----------------------------------------- */

static coll_status_t rd_reduce_scatter(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int32_t n = a->nranks, r = a->rank;
    const size_t c = a->count, un = (size_t)n, tmp0 = un * c; /* scratch: partials, tmp */
    const struct fold f = fold_of(n, r);
    bool have_acc = false; /* partials in scratch, else still SEND */
    struct coll_deps last, next;
    int32_t lo = 0, hi = f.p;
    uint32_t idx, sd;
    coll_status_t st;

    if (f.extra) {
        st = coll__sched_send(s, f.mate, coll__slice(COLL_BUF_SEND, 0, un * c), 0, NULL, &sd);
        /* in place RECV is inside SEND: after the send */
        return st ? st
                  : coll__sched_recv(s, f.mate, coll__slice(COLL_BUF_RECV, 0, c), 1, &sd, NULL);
    }
    coll__deps_clear(&last);
    if (f.partner) {
        uint32_t rv;
        st = coll__sched_recv(s, f.mate, coll__slice(COLL_BUF_SCRATCH, tmp0, un * c), 0, NULL, &rv);
        if (st == COLL_SUCCESS)
            st = coll__sched_reduce(s, coll__slice(COLL_BUF_SCRATCH, 0, un * c),
                                    coll__slice(COLL_BUF_SEND, 0, un * c),
                                    coll__slice(COLL_BUF_SCRATCH, tmp0, un * c), 1, &rv, &idx);
        if (st != COLL_SUCCESS)
            return st;
        coll__deps_add(&last, idx);
        have_acc = true;
    }
    for (int32_t m = f.p / 2; m >= 1; m /= 2) {
        const int32_t q = r ^ m, mid = lo + m;
        const uint8_t srcbuf = have_acc ? COLL_BUF_SCRATCH : COLL_BUF_SEND;
        int32_t keep[2][2], give[2][2];
        struct coll_slice t[2];
        size_t toff = tmp0;
        uint32_t rv[2] = {COLL_NO_STEP, COLL_NO_STEP};

        if (r & m) {
            vrange(&f, mid, hi, keep);
            vrange(&f, lo, mid, give);
            lo = mid;
        } else {
            vrange(&f, lo, mid, keep);
            vrange(&f, mid, hi, give);
            hi = mid;
        }
        for (int k = 0; k < 2; k++)
            if (give[k][1] > give[k][0] &&
                (st = coll__sched_send(s, q, blocks(srcbuf, 0, give[k], c), last.n, last.d, &sd)) !=
                    COLL_SUCCESS)
                return st;
        /* the kept ranges arrive one after the other in tmp, which is free once the
         * reduces of the last round have read it */
        for (int k = 0; k < 2; k++) {
            t[k] = coll__slice(COLL_BUF_SCRATCH, toff, (size_t)(keep[k][1] - keep[k][0]) * c);
            toff += t[k].count;
            if (t[k].count &&
                (st = coll__sched_recv(s, q, t[k], last.n, last.d, &rv[k])) != COLL_SUCCESS)
                return st;
        }
        coll__deps_clear(&next);
        for (int k = 0; k < 2; k++) {
            struct coll_deps ds = last;
            struct coll_slice dst;
            if (!t[k].count)
                continue;
            /* the last round's block r is the result: straight into RECV (in place the
             * same memory as SEND's block r, exactly) */
            dst = m == 1 && k == 0 ? coll__slice(COLL_BUF_RECV, 0, c)
                                   : blocks(COLL_BUF_SCRATCH, 0, keep[k], c);
            coll__deps_add(&ds, rv[k]);
            st = coll__sched_reduce(s, dst, blocks(srcbuf, 0, keep[k], c), t[k], ds.n, ds.d, &idx);
            if (st != COLL_SUCCESS)
                return st;
            coll__deps_add(&next, idx);
        }
        last = next;
        have_acc = true;
    }
    if (f.partner) /* block p + r, reduced in scratch by the last round */
        return coll__sched_send(s, f.mate, coll__slice(COLL_BUF_SCRATCH, (size_t)f.mate * c, c),
                                last.n, last.d, NULL);
    return COLL_SUCCESS;
}

/* ---- 5 Rabenseifner ------------------------------------------------------------------ */

/* Offset of block b of p over count elements: the first count % p blocks get one more. */
static size_t boff(size_t count, int32_t p, int32_t b)
{
    size_t q = count / (size_t)p, rem = count % (size_t)p, ub = (size_t)b;
    return ub * q + COLL_MIN(ub, rem);
}

static struct coll_slice brange(uint8_t buf, size_t base, size_t count, int32_t p, int32_t lo,
                                int32_t hi)
{
    size_t o = boff(count, p, lo);
    return coll__slice(buf, base + o, boff(count, p, hi) - o);
}

#define LOG2_MAX 32

static coll_status_t rabenseifner(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const bool reduce = a->coll == COLL_COLL_REDUCE;
    const int32_t n = a->nranks, root = reduce ? a->root : 0, v = (a->rank - root + n) % n;
    const size_t c = a->count;
    const struct fold f = fold_of(n, v);
    /* the partial lives in RECV, except off the root of a reduce, where RECV is absent */
    const bool acc_recv = !reduce || v == 0;
    const uint8_t accbuf = acc_recv ? COLL_BUF_RECV : COLL_BUF_SCRATCH;
    const size_t tmp0 = acc_recv ? 0 : c;
    uint32_t gave[LOG2_MAX], idx, sd, rv;
    uint8_t srcbuf = COLL_BUF_SEND;
    struct coll_deps last;
    int32_t lo = 0, hi = f.p, bit;
    coll_status_t st;

#define ACT(x) (((x) + root) % n) /* relative rank -> rank */
    if (f.extra) {
        st = coll__sched_send(s, ACT(f.mate), coll__slice(COLL_BUF_SEND, 0, c), 0, NULL, &sd);
        if (st != COLL_SUCCESS || reduce)
            return st;
        return coll__sched_recv(s, ACT(f.mate), coll__slice(COLL_BUF_RECV, 0, c), 1, &sd, NULL);
    }
    coll__deps_clear(&last);
    if (f.partner) {
        struct coll_slice t = coll__slice(COLL_BUF_SCRATCH, tmp0, c);
        st = coll__sched_recv(s, ACT(f.mate), t, 0, NULL, &rv);
        if (st == COLL_SUCCESS)
            st = coll__sched_reduce(s, coll__slice(accbuf, 0, c), coll__slice(COLL_BUF_SEND, 0, c),
                                    t, 1, &rv, &idx);
        if (st != COLL_SUCCESS)
            return st;
        coll__deps_add(&last, idx);
        srcbuf = accbuf;
    }

    /* reduce-scatter by halving: v ends with block v of p reduced */
    for (int32_t m = f.p / 2; m >= 1; m /= 2) {
        const int32_t q = v ^ m, mid = lo + m;
        const int32_t klo = v & m ? mid : lo, khi = v & m ? hi : mid;
        const int32_t glo = v & m ? lo : mid, ghi = v & m ? mid : hi;
        struct coll_slice give = brange(srcbuf, 0, c, f.p, glo, ghi);
        struct coll_slice keep = brange(accbuf, 0, c, f.p, klo, khi);

        gave[__builtin_ctz((unsigned)m)] = COLL_NO_STEP;
        if (give.count) {
            st = coll__sched_send(s, ACT(q), give, last.n, last.d, &sd);
            if (st != COLL_SUCCESS)
                return st;
            gave[__builtin_ctz((unsigned)m)] = sd;
        }
        if (keep.count) {
            struct coll_slice t = coll__slice(COLL_BUF_SCRATCH, tmp0, keep.count), mine = keep;
            mine.buf = srcbuf;
            /* tmp is free once the last reduce has read it */
            st = coll__sched_recv(s, ACT(q), t, last.n, last.d, &rv);
            if (st != COLL_SUCCESS)
                return st;
            coll__deps_add(&last, rv);
            st = coll__sched_reduce(s, keep, mine, t, last.n, last.d, &idx);
            if (st != COLL_SUCCESS)
                return st;
            coll__deps_clear(&last);
            coll__deps_add(&last, idx);
        }
        srcbuf = accbuf;
        lo = klo;
        hi = khi;
    }

    if (!reduce) {
        /* all-gather by doubling: v's range [g, g+m) doubles each round */
        for (int32_t m = 1; m < f.p; m *= 2) {
            const int32_t q = v ^ m, g = v & ~(m - 1), gq = g ^ m;
            struct coll_slice mine = brange(COLL_BUF_RECV, 0, c, f.p, g, g + m);
            struct coll_slice theirs = brange(COLL_BUF_RECV, 0, c, f.p, gq, gq + m);
            struct coll_deps next;

            coll__deps_clear(&next);
            if (mine.count) {
                st = coll__sched_send(s, ACT(q), mine, last.n, last.d, &sd);
                if (st != COLL_SUCCESS)
                    return st;
                coll__deps_add(&next, sd); /* it waited for everything before */
            } else {
                next = last;
            }
            if (theirs.count) {
                /* the place is the half this rank gave away in the halving round m */
                uint32_t war = gave[__builtin_ctz((unsigned)m)];
                st = coll__sched_recv(s, ACT(q), theirs, war != COLL_NO_STEP, &war, &rv);
                if (st != COLL_SUCCESS)
                    return st;
                coll__deps_add(&next, rv);
            }
            last = next;
        }
        if (f.partner)
            return coll__sched_send(s, ACT(f.mate), coll__slice(COLL_BUF_RECV, 0, c), last.n,
                                    last.d, NULL);
        return COLL_SUCCESS;
    }

    /* reduce: gather to v = 0 along the same pairs; v sends in the round of its lowest set
     * bit, having received from v + m in every round before (one after the other) */
    bit = v ? __builtin_ctz((unsigned)v) : LOG2_MAX;
    rv = COLL_NO_STEP;
    for (int32_t m = 1; m < f.p; m *= 2) {
        if (__builtin_ctz((unsigned)m) == bit) {
            struct coll_slice mine = brange(accbuf, 0, c, f.p, v, v + m);
            coll__deps_add(&last, rv);
            if (mine.count)
                return coll__sched_send(s, ACT(v - m), mine, last.n, last.d, NULL);
            return COLL_SUCCESS;
        } else {
            struct coll_slice theirs = brange(accbuf, 0, c, f.p, v + m, v + 2 * m);
            struct coll_deps ds;
            if (!theirs.count)
                continue;
            /* the place is the half given away in halving round m */
            coll__deps_clear(&ds);
            coll__deps_add(&ds, gave[__builtin_ctz((unsigned)m)]);
            coll__deps_add(&ds, rv);
            st = coll__sched_recv(s, ACT(v + m), theirs, ds.n, ds.d, &rv);
            if (st != COLL_SUCCESS)
                return st;
        }
    }
    return COLL_SUCCESS;
#undef ACT
}

/* ---- 6 the entries ------------------------------------------------------------------- */

static bool rd_applicable(const struct coll_algo_args *a)
{
    /* reduce-scatter scratch: 2 n count */
    return a->coll == COLL_COLL_ALLREDUCE || coll__algo_sizes_fit(a, 2);
}

static coll_status_t rd_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    coll_status_t st = coll__algo_check(&coll__algo_rd, a);

    if (st != COLL_SUCCESS)
        return st;
    if (!rd_applicable(a))
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "rd %s: %zu elements on %d ranks overflow the buffers' size",
                           coll__coll_name(a->coll), a->count, a->nranks);
    if (coll__sched_trivial(a, s, &st))
        return st;
    switch (a->coll) {
    case COLL_COLL_ALLGATHER:
        return rd_allgather(a, s);
    case COLL_COLL_REDUCE_SCATTER:
        return rd_reduce_scatter(a, s);
    default:
        return rd_allreduce(a, s);
    }
}

static coll_status_t rabenseifner_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    coll_status_t st = coll__algo_check(&coll__algo_rabenseifner, a);

    if (st != COLL_SUCCESS)
        return st;
    if (coll__sched_trivial(a, s, &st))
        return st;
    return rabenseifner(a, s);
}

COLL_INTERNAL const struct coll_algo coll__algo_rd = {
    .name = "rd",
    .desc = "recursive doubling (all-reduce, all-gather) and halving (reduce-scatter): log2 n "
            "rounds",
    .colls = 1u << COLL_COLL_ALLREDUCE | 1u << COLL_COLL_ALLGATHER | 1u << COLL_COLL_REDUCE_SCATTER,
    .applicable = rd_applicable,
    .build = rd_build,
};

COLL_INTERNAL const struct coll_algo coll__algo_rabenseifner = {
    .name = "rabenseifner",
    .desc = "halving reduce-scatter, then doubling all-gather or gather: 2 log2 n rounds, 2 m "
            "moved",
    .colls = 1u << COLL_COLL_ALLREDUCE | 1u << COLL_COLL_REDUCE,
    .applicable = NULL,
    .build = rabenseifner_build,
};
