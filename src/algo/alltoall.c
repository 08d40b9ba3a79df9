/*
 * alltoall.c - all-to-all: pairwise exchange (the "pairwise" entry), linear (for the
 * "linear" entry of gather_scatter.c) and Bruck's (for the "bruck" entry of allgather.c).
 *
 * Divisions: 1 pairwise exchange, 2 linear, 3 Bruck, 4 the "pairwise" entry.
 *
 * Buffers (NCCL's): SEND and RECV hold n blocks of count elements; block j of rank i's
 * SEND becomes block i of rank j's RECV. In place SEND is RECV, so a block may be received
 * only once the same block has been sent: each builder receives such blocks into scratch
 * and copies them over after the send (it cannot tell at build time whether it runs in
 * place). Block r is a local copy (nothing in place).
 *
 * Pairwise, n - 1 rounds, one partner a round. Power of two n: round k exchanges with
 * r XOR k both ways (block q received into a scratch slot, copied once block q is out).
 * Other n: round k sends to r+k and receives from r-k; the rounds go k = 1, n-1, 2, n-2, ...
 * so that block r-k, received in round k, is sent in the very next round (n-k): it waits
 * in a slot for one round, and block r+k, received in round n-k, is already out and lands
 * in RECV directly. Scratch: two slots of count.
 *
 *   n = 4:  round 1: 0<->1 2<->3   round 2: 0<->2 1<->3   round 3: 0<->3 1<->2
 *   n = 5, rank 0:  k=1: ->1 <-4   k=4: ->4 <-1   k=2: ->2 <-3   k=3: ->3 <-2
 *
 * Linear: every send and receive posted at once (receives into scratch, one slot per peer,
 * each copied to RECV once its block has been sent): n - 1 messages each way in one round,
 * for small n. Scratch (n-1) count.
 *
 * Bruck, ceil(log2 n) rounds: rotate SEND into scratch so that slot i holds the block for
 * rank r+i; in round k send every slot whose index has bit k set to rank r+2^k, packed into
 * one message (copies into a pack buffer), and unpack what arrives from r-2^k into the
 * same slots; a block thus travels its index in hops of powers of two. At the end slot i
 * holds rank (r-i)'s block for r: RECV[j] = slot (r-j) mod n, one copy per block. Scratch
 * n count + 2 x floor(n/2) count (the slots and the two packs).
 *
 * Cost (alpha per message, beta per byte; m = n x count bytes, a rank's buffer):
 *   pairwise  (n-1) alpha + (n-1)/n m beta
 *   linear    (n-1) alpha + (n-1)/n m beta, all in one round (contention at scale)
 *   bruck     ceil(log2 n) alpha + ceil(log2 n) m/2 beta   (+ about (2 + log2 n) m of copies)
 * Bruck wins for small blocks and many ranks, pairwise for large blocks.
 */
#include "schedule.h"

#include <errno.h>
#include <stdlib.h>

COLL_INTERNAL extern const struct coll_algo coll__algo_pairwise;

#define PAIR_SLOTS 2

/* ---- 1 pairwise exchange ------------------------------------------------------------- */

static coll_status_t pairwise(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int32_t n = a->nranks, r = a->rank;
    const size_t c = a->count;
    const bool pow2 = (n & (n - 1)) == 0;
    /* per block: its send, and (received ahead of it) the receive into a slot */
    uint32_t *sent = NULL, *early = NULL, slot_reader[PAIR_SLOTS], deps[2];
    size_t *early_slot = NULL, j = 0;
    coll_status_t st;

    st = coll__sched_copy(s, coll__slice(COLL_BUF_RECV, (size_t)r * c, c),
                          coll__slice(COLL_BUF_SEND, (size_t)r * c, c), 0, NULL, NULL);
    if (st != COLL_SUCCESS || n == 1)
        return st;
    sent = malloc((size_t)n * sizeof(*sent));
    early = malloc((size_t)n * sizeof(*early));
    early_slot = malloc((size_t)n * sizeof(*early_slot));
    if (!sent || !early || !early_slot) {
        st = coll__sys_error(NULL, ENOMEM, "pairwise all-to-all: no memory for %d ranks", n);
        goto out_free;
    }
    for (int32_t b = 0; b < n; b++)
        sent[b] = early[b] = COLL_NO_STEP;
    for (int i = 0; i < PAIR_SLOTS; i++)
        slot_reader[i] = COLL_NO_STEP;

    for (int32_t i = 1; i < n; i++) {
        /* round order: XOR partners 1..n-1; shifts 1, n-1, 2, n-2, ... */
        const int32_t k = pow2 ? i : i % 2 ? (i + 1) / 2 : n - i / 2;
        const int32_t to = pow2 ? r ^ k : (r + k) % n, from = pow2 ? r ^ k : (r - k + n) % n;
        const bool out_before = sent[from] != COLL_NO_STEP; /* in an earlier round */

        COLL_CHECK_GOTO(coll__sched_send(s, to, coll__slice(COLL_BUF_SEND, (size_t)to * c, c), 0,
                                         NULL, &sent[to]),
                        st, out_free);
        if (early[to] != COLL_NO_STEP) { /* received last round; its place is free now */
            deps[0] = early[to];
            deps[1] = sent[to];
            COLL_CHECK_GOTO(coll__sched_copy(s, coll__slice(COLL_BUF_RECV, (size_t)to * c, c),
                                             coll__slice(COLL_BUF_SCRATCH, early_slot[to], c), 2,
                                             deps, &slot_reader[early_slot[to] / c]),
                            st, out_free);
        }
        if (out_before) {
            /* not the same round's send: waiting for that one could deadlock a rendezvous
             * link (each side's receive would wait for its own send to be received) */
            COLL_CHECK_GOTO(coll__sched_recv(s, from,
                                             coll__slice(COLL_BUF_RECV, (size_t)from * c, c), 1,
                                             &sent[from], NULL),
                            st, out_free);
            continue;
        }
        {
            const size_t sl = j++ % PAIR_SLOTS;
            uint32_t *reader = &slot_reader[sl], rv;

            for (int32_t b = 0; b < n; b++)
                if (early[b] != COLL_NO_STEP && sent[b] == COLL_NO_STEP &&
                    early_slot[b] == sl * c) {
                    st = coll__error(NULL, COLL_INTERNAL_ERROR,
                                     "pairwise all-to-all: slot %zu still holds block %d", sl, b);
                    goto out_free;
                }
            COLL_CHECK_GOTO(coll__sched_recv(s, from, coll__slice(COLL_BUF_SCRATCH, sl * c, c),
                                             *reader != COLL_NO_STEP, reader, &rv),
                            st, out_free);
            if (sent[from] != COLL_NO_STEP) { /* out this round: copy over it after the send */
                deps[0] = rv;
                deps[1] = sent[from];
                COLL_CHECK_GOTO(coll__sched_copy(s, coll__slice(COLL_BUF_RECV, (size_t)from * c, c),
                                                 coll__slice(COLL_BUF_SCRATCH, sl * c, c), 2, deps,
                                                 reader),
                                st, out_free);
            } else {
                early[from] = rv;
                early_slot[from] = sl * c;
            }
        }
    }

out_free:
    free(early_slot);
    free(early);
    free(sent);
    return st;
}

/* ---- 2 linear ------------------------------------------------------------------------ */

coll_status_t coll__linear_alltoall_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int32_t n = a->nranks, r = a->rank;
    const size_t c = a->count;
    uint32_t *sent = NULL, deps[2];
    coll_status_t st;

    if (c == 0)
        return COLL_SUCCESS;
    st = coll__sched_copy(s, coll__slice(COLL_BUF_RECV, (size_t)r * c, c),
                          coll__slice(COLL_BUF_SEND, (size_t)r * c, c), 0, NULL, NULL);
    if (st != COLL_SUCCESS || n == 1)
        return st;
    sent = malloc((size_t)n * sizeof(*sent));
    if (!sent)
        return coll__sys_error(NULL, ENOMEM, "linear all-to-all: no memory for %d ranks", n);
    /* rank r-i receives from r as its i-th peer: the i-th send meets the i-th receive */
    for (int32_t i = 1; i < n; i++) {
        int32_t to = (r + i) % n;
        COLL_CHECK_GOTO(coll__sched_send(s, to, coll__slice(COLL_BUF_SEND, (size_t)to * c, c), 0,
                                         NULL, &sent[to]),
                        st, out_free);
    }
    for (int32_t i = 1; i < n; i++) {
        int32_t from = (r - i + n) % n;
        struct coll_slice slot = coll__slice(COLL_BUF_SCRATCH, (size_t)(i - 1) * c, c);
        COLL_CHECK_GOTO(coll__sched_recv(s, from, slot, 0, NULL, &deps[0]), st, out_free);
        deps[1] = sent[from];
        COLL_CHECK_GOTO(coll__sched_copy(s, coll__slice(COLL_BUF_RECV, (size_t)from * c, c), slot,
                                         2, deps, NULL),
                        st, out_free);
    }

out_free:
    free(sent);
    return st;
}

/* ---- 3 Bruck ------------------------------------------------------------------------- */

coll_status_t coll__bruck_alltoall_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int32_t n = a->nranks, r = a->rank;
    const size_t c = a->count, un = (size_t)n, ur = (size_t)r, h = un / 2;
    const size_t spack = un * c, rpack = spack + h * c; /* scratch: slots, packs */
    uint32_t local = COLL_NO_STEP, last_send = COLL_NO_STEP, last_unpack = COLL_NO_STEP, rv;
    struct coll_deps ds = {.n = 0};
    coll_status_t st;

    if (c == 0)
        return COLL_SUCCESS;
    if (n == 1)
        return coll__sched_copy(s, coll__slice(COLL_BUF_RECV, 0, c),
                                coll__slice(COLL_BUF_SEND, 0, c), 0, NULL, NULL);
        /* Local copies run one after the other (each waits for the previous one), so a copy
         * waits for every earlier copy and for what they waited for. */
#define CHAIN_COPY(dst, src, extra)                                                                \
    do {                                                                                           \
        coll__deps_clear(&ds);                                                                     \
        coll__deps_add(&ds, local);                                                                \
        coll__deps_add(&ds, extra);                                                                \
        st = coll__sched_copy(s, dst, src, ds.n, ds.d, &local);                                    \
        if (st != COLL_SUCCESS)                                                                    \
            return st;                                                                             \
    } while (0)

    /* slot i = SEND block r+i: a rotation, two copies */
    CHAIN_COPY(coll__slice(COLL_BUF_SCRATCH, 0, (un - ur) * c),
               coll__slice(COLL_BUF_SEND, ur * c, (un - ur) * c), COLL_NO_STEP);
    if (r > 0)
        CHAIN_COPY(coll__slice(COLL_BUF_SCRATCH, (un - ur) * c, ur * c),
                   coll__slice(COLL_BUF_SEND, 0, ur * c), COLL_NO_STEP);
    for (size_t dist = 1; dist < un; dist *= 2) {
        size_t pos = 0;

        /* slots with bit dist set come in runs of dist: [dist, 2 dist), [3 dist, 4 dist)... */
        for (size_t t = dist; t < un; t += 2 * dist) {
            size_t len = COLL_MIN(dist, un - t);
            /* the first pack waits for the last round's send to have left the pack */
            CHAIN_COPY(coll__slice(COLL_BUF_SCRATCH, spack + pos * c, len * c),
                       coll__slice(COLL_BUF_SCRATCH, t * c, len * c),
                       pos == 0 ? last_send : COLL_NO_STEP);
            pos += len;
        }
        st = coll__sched_send(s, (int32_t)((ur + dist) % un),
                              coll__slice(COLL_BUF_SCRATCH, spack, pos * c), 1, &local, &last_send);
        if (st != COLL_SUCCESS)
            return st;
        /* the same slots arrive from r - dist; the unpack buffer is free once the last
         * round's unpacks have read it */
        st = coll__sched_recv(s, (int32_t)((ur + un - dist) % un),
                              coll__slice(COLL_BUF_SCRATCH, rpack, pos * c),
                              last_unpack != COLL_NO_STEP, &last_unpack, &rv);
        if (st != COLL_SUCCESS)
            return st;
        pos = 0;
        for (size_t t = dist; t < un; t += 2 * dist) {
            size_t len = COLL_MIN(dist, un - t);
            CHAIN_COPY(coll__slice(COLL_BUF_SCRATCH, t * c, len * c),
                       coll__slice(COLL_BUF_SCRATCH, rpack + pos * c, len * c), rv);
            pos += len;
        }
        last_unpack = local;
    }
    /* RECV block j = slot (r - j) mod n: after every copy that read SEND (in place) */
    for (size_t jb = 0; jb < un; jb++)
        CHAIN_COPY(coll__slice(COLL_BUF_RECV, jb * c, c),
                   coll__slice(COLL_BUF_SCRATCH, ((ur + un - jb) % un) * c, c), COLL_NO_STEP);
#undef CHAIN_COPY
    return COLL_SUCCESS;
}

/* ---- 4 the "pairwise" entry ---------------------------------------------------------- */

static bool pairwise_applicable(const struct coll_algo_args *a)
{
    return coll__algo_sizes_fit(a, 1);
}

static coll_status_t pairwise_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    coll_status_t st = coll__algo_check(&coll__algo_pairwise, a);

    if (st != COLL_SUCCESS)
        return st;
    if (!pairwise_applicable(a))
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "pairwise alltoall: %zu elements on %d ranks overflow the buffers' size",
                           a->count, a->nranks);
    if (a->count == 0)
        return COLL_SUCCESS;
    return pairwise(a, s);
}

COLL_INTERNAL const struct coll_algo coll__algo_pairwise = {
    .name = "pairwise",
    .desc = "pairwise exchange, n-1 rounds of one partner each: all-to-all for large blocks",
    .colls = 1u << COLL_COLL_ALLTOALL,
    .applicable = pairwise_applicable,
    .build = pairwise_build,
};
