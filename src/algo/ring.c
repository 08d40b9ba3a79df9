/*
 * ring.c - ring all-reduce: a reduce-scatter then an all-gather around the ring, pipelined
 * in chunks. Bandwidth-optimal: every rank sends and receives 2(n-1)/n of the data. The
 * "ring" entry also runs all-gather (allgather.c) and reduce-scatter (reduce_scatter.c), the
 * two halves on their own, with NCCL's buffers.
 *
 * The count elements form n blocks (sizes differ by at most one; with count < n some are
 * empty and move nothing). Rank r sends to r+1 and receives from r-1 only. n = 4, rank 0:
 *
 *   reduce-scatter          step 0       step 1       step 2
 *     send block            0 (SEND)     3 (RECV)     2 (RECV)
 *     recv block, reduce    3            2            1   -> block 1 complete on rank 0
 *   all-gather
 *     send block            1            0            3
 *     recv block            0            3            2   -> every block complete
 *
 *        +-> r0 --> r1 --> r2 --> r3 --+
 *        +-----------------------------+
 *
 * Each block is cut into chunks of chunk_count elements, and every chunk is its own message:
 * rank r forwards chunk c of a block as soon as it has reduced it, so chunks of one ring step
 * overlap with the next step (receive, reduce, send run concurrently). A reduce-scatter
 * chunk lands in one of RING_SLOTS scratch slots and is reduced from there into RECV
 * (RECV = SEND op slot: each block is reduced once per rank, so the first write of RECV
 * reads SEND and no later step reads SEND there, as the in-place rule asks). A slot is
 * received into again only after the reduce that read it: scratch is RING_SLOTS chunks,
 * whatever count is.
 *
 * Cost (alpha latency, beta per byte, gamma per reduced byte; m bytes, n ranks, C chunks per
 * block, C = ceil(m / (n * chunk))):
 *   unchunked (C = 1):  2(n-1) alpha + 2(n-1)/n m beta + (n-1)/n m gamma
 *   chunked:            2(n-1) C alpha + 2(n-1)/n m beta + (n-1)/n m gamma
 * chunking adds messages and buys overlap of the reductions with the transfers (the gamma
 * term hides behind beta) and bounded scratch.
 */
#include "schedule.h"

#include <errno.h>
#include <stdlib.h>

#define RING_SLOTS 4
#define NONE UINT32_MAX

COLL_INTERNAL extern const struct coll_algo coll__algo_ring;

/* Block b of the n blocks of count elements: the first count % n blocks get one more. */
static void ring_block(size_t count, int32_t n, int32_t b, size_t *off_p, size_t *len_p)
{
    size_t q = count / (size_t)n, rem = count % (size_t)n, ub = (size_t)b;

    *off_p = ub * q + (ub < rem ? ub : rem);
    *len_p = q + (ub < rem ? 1 : 0);
}

static size_t div_up(size_t a, size_t b)
{
    return a / b + (a % b != 0);
}

/* Chunk c of a block at off of len elements. */
static struct coll_slice chunk_of(uint8_t buf, size_t off, size_t len, size_t chunk, size_t c)
{
    size_t o = c * chunk;
    return coll__slice(buf, off + o, COLL_MIN(chunk, len - o));
}

static coll_status_t ring_allreduce(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int32_t n = a->nranks, r = a->rank, right = (r + 1) % n, left = (r + n - 1) % n;
    const size_t count = a->count, chunk = a->chunk_count;
    size_t cmax, slot_count, j = 0;
    uint32_t slot_reader[RING_SLOTS], *rs_send = NULL, *prev = NULL, *cur = NULL, *t;
    coll_status_t st = COLL_SUCCESS;

    if (count == 0)
        return COLL_SUCCESS;
    if (n == 1)
        return coll__sched_copy(s, coll__slice(COLL_BUF_RECV, 0, count),
                                coll__slice(COLL_BUF_SEND, 0, count), 0, NULL, NULL);

    cmax = div_up(div_up(count, (size_t)n), chunk); /* chunks of the largest block */
    slot_count = COLL_MIN(chunk, div_up(count, (size_t)n));
    /* rs_send[s * cmax + c]: the reduce-scatter send of chunk c at step s, which the
     * all-gather receive into the same place must wait for. prev/cur: per chunk, the step
     * that produced what the next ring step sends. */
    rs_send = malloc((size_t)(n - 1) * cmax * sizeof(*rs_send));
    prev = malloc(cmax * sizeof(*prev));
    cur = malloc(cmax * sizeof(*cur));
    if (!rs_send || !prev || !cur) {
        st = coll__sys_error(NULL, ENOMEM, "ring allreduce: no memory for %zu chunks", cmax);
        goto out_free;
    }
    for (int i = 0; i < RING_SLOTS; i++)
        slot_reader[i] = NONE;

    /* Reduce-scatter: step k sends block r-k and reduces block r-k-1 into RECV. */
    for (int32_t k = 0; k < n - 1; k++) {
        size_t so, sl, ro, rl, cs, cr;

        ring_block(count, n, (r - k + n) % n, &so, &sl);
        ring_block(count, n, (r - k - 1 + 2 * n) % n, &ro, &rl);
        cs = div_up(sl, chunk);
        cr = div_up(rl, chunk);
        for (size_t c = 0; c < COLL_MAX(cs, cr); c++) {
            if (c < cs) {
                /* step 0 sends our own data; later steps what the previous one reduced */
                struct coll_slice src =
                    chunk_of(k == 0 ? COLL_BUF_SEND : COLL_BUF_RECV, so, sl, chunk, c);
                COLL_CHECK_GOTO(coll__sched_send(s, right, src, k == 0 ? 0 : 1, &prev[c],
                                                 &rs_send[(size_t)k * cmax + c]),
                                st, out_free);
            }
            if (c < cr) {
                struct coll_slice mine = chunk_of(COLL_BUF_SEND, ro, rl, chunk, c);
                struct coll_slice acc = chunk_of(COLL_BUF_RECV, ro, rl, chunk, c);
                struct coll_slice slot =
                    coll__slice(COLL_BUF_SCRATCH, (j % RING_SLOTS) * slot_count, acc.count);
                uint32_t *reader = &slot_reader[j % RING_SLOTS], rv;

                COLL_CHECK_GOTO(
                    coll__sched_recv(s, left, slot, *reader == NONE ? 0 : 1, reader, &rv), st,
                    out_free);
                COLL_CHECK_GOTO(coll__sched_reduce(s, acc, mine, slot, 1, &rv, &cur[c]), st,
                                out_free);
                *reader = cur[c];
                j++;
            }
        }
        t = prev, prev = cur, cur = t;
    }

    /* All-gather: step k sends block r+1-k (complete here) and receives block r-k, which
     * overwrites what reduce-scatter step k sent from there (or read from SEND, k = 0). */
    for (int32_t k = 0; k < n - 1; k++) {
        size_t so, sl, ro, rl, cs, cr;

        ring_block(count, n, (r + 1 - k + n) % n, &so, &sl);
        ring_block(count, n, (r - k + n) % n, &ro, &rl);
        cs = div_up(sl, chunk);
        cr = div_up(rl, chunk);
        for (size_t c = 0; c < COLL_MAX(cs, cr); c++) {
            if (c < cs)
                COLL_CHECK_GOTO(coll__sched_send(s, right,
                                                 chunk_of(COLL_BUF_RECV, so, sl, chunk, c), 1,
                                                 &prev[c], NULL),
                                st, out_free);
            if (c < cr)
                COLL_CHECK_GOTO(coll__sched_recv(s, left, chunk_of(COLL_BUF_RECV, ro, rl, chunk, c),
                                                 1, &rs_send[(size_t)k * cmax + c], &cur[c]),
                                st, out_free);
        }
        t = prev, prev = cur, cur = t;
    }

out_free:
    free(cur);
    free(prev);
    free(rs_send);
    return st;
}

/* All-gather and reduce-scatter buffers hold n x count elements. */
static bool ring_applicable(const struct coll_algo_args *a)
{
    return a->coll == COLL_COLL_ALLREDUCE || coll__algo_sizes_fit(a, 1);
}

static coll_status_t ring_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    coll_status_t st = coll__algo_check(&coll__algo_ring, a);

    if (st != COLL_SUCCESS)
        return st;
    if (!ring_applicable(a))
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "ring %s: %zu elements on %d ranks overflow the buffers' size",
                           coll__coll_name(a->coll), a->count, a->nranks);
    switch (a->coll) {
    case COLL_COLL_ALLGATHER:
        return coll__ring_allgather_build(a, s); /* allgather.c */
    case COLL_COLL_REDUCE_SCATTER:
        return coll__ring_reduce_scatter_build(a, s); /* reduce_scatter.c */
    default:
        return ring_allreduce(a, s);
    }
}

COLL_INTERNAL const struct coll_algo coll__algo_ring = {
    .name = "ring",
    .desc = "around a ring in chunks, every byte once per link: bandwidth-optimal",
    .colls = 1u << COLL_COLL_ALLREDUCE | 1u << COLL_COLL_ALLGATHER | 1u << COLL_COLL_REDUCE_SCATTER,
    .applicable = ring_applicable,
    .build = ring_build,
};
