/*
 * reduce_scatter.c - ring reduce-scatter, pipelined in chunks (the "ring" entry of ring.c
 * calls it; recursive halving is in rd.c).
 *
 * Buffers (NCCL's): SEND holds n blocks of count elements, RECV count: rank r gets block
 * r reduced over every rank. In place, RECV is block r of SEND.
 *
 * Block b's partial starts at rank b+1 (its SEND block b alone), travels right, and each
 * rank on the way folds in its own SEND block b; rank b folds in last, into RECV. Step k
 * of rank r sends the partial of block r-k-1 and receives that of block r-k-2. n = 4,
 * rank 0:
 *
 *              step 0          step 1          step 2
 *   send       3 (SEND)        2 (partial)     1 (partial)     to rank 1
 *   recv       2 -> partial    1 -> partial    0 -> RECV       from rank 3
 *
 * Each block moves in chunks of chunk_count elements, each its own message, forwarded as
 * soon as it is reduced. A chunk lands in one of RING_SLOTS scratch slots (reused once the
 * reduce that read it is done) and is reduced with SEND into the partial, which lives in a
 * count-element scratch block: not in RECV, because in place RECV is SEND's block r, which
 * the last step still reads. The partial of a chunk is overwritten only after the send
 * that read it. Scratch: count + RING_SLOTS chunks.
 *
 * Cost (alpha per message, beta per byte, gamma per reduced byte; m = n x count bytes, the
 * input; C chunks per block):
 *   (n-1) C alpha + (n-1)/n m beta + (n-1)/n m gamma
 */
#include "schedule.h"

#include <errno.h>
#include <stdlib.h>

#define RING_SLOTS 4

static size_t div_up(size_t a, size_t b)
{
    return a / b + (a % b != 0);
}

coll_status_t coll__ring_reduce_scatter_build(const struct coll_algo_args *a,
                                              struct coll_schedule *s)
{
    const int32_t n = a->nranks, r = a->rank, right = (r + 1) % n, left = (r + n - 1) % n;
    const size_t c = a->count, chunk = a->chunk_count, nch = div_up(c, chunk);
    const size_t slot_count = COLL_MIN(chunk, c), slots_off = c; /* scratch: partial, slots */
    uint32_t slot_reader[RING_SLOTS], *made = NULL, *sent = NULL;
    size_t j = 0;
    coll_status_t st = COLL_SUCCESS;

    if (c == 0)
        return COLL_SUCCESS;
    if (n == 1)
        return coll__sched_copy(s, coll__slice(COLL_BUF_RECV, 0, c),
                                coll__slice(COLL_BUF_SEND, 0, c), 0, NULL, NULL);
    /* made[ch]: the reduce that wrote chunk ch of the partial; sent[ch]: the send that read
     * it since (the next reduce into the place waits for it) */
    made = malloc(nch * sizeof(*made));
    sent = malloc(nch * sizeof(*sent));
    if (!made || !sent) {
        st = coll__sys_error(NULL, ENOMEM, "ring reduce-scatter: no memory for %zu chunks", nch);
        goto out_free;
    }
    for (int i = 0; i < RING_SLOTS; i++)
        slot_reader[i] = COLL_NO_STEP;

    for (int32_t k = 0; k < n - 1; k++) {
        const size_t sb = (size_t)((r - k - 1 + 2 * n) % n), rb = (size_t)((r - k - 2 + 2 * n) % n);
        const bool last = k == n - 2; /* rb == r: the result */

        for (size_t ch = 0; ch < nch; ch++) {
            const size_t o = ch * chunk, l = COLL_MIN(chunk, c - o);
            struct coll_slice slot =
                coll__slice(COLL_BUF_SCRATCH, slots_off + (j % RING_SLOTS) * slot_count, l);
            struct coll_slice part = coll__slice(COLL_BUF_SCRATCH, o, l);
            uint32_t *reader = &slot_reader[j % RING_SLOTS], rv, deps[2], nd = 0;

            /* step 0 sends our own SEND block; later steps the partial reduced last step */
            if (k == 0)
                COLL_CHECK_GOTO(coll__sched_send(s, right,
                                                 coll__slice(COLL_BUF_SEND, sb * c + o, l), 0, NULL,
                                                 &sent[ch]),
                                st, out_free);
            else
                COLL_CHECK_GOTO(coll__sched_send(s, right, part, 1, &made[ch], &sent[ch]), st,
                                out_free);
            COLL_CHECK_GOTO(coll__sched_recv(s, left, slot, *reader != COLL_NO_STEP, reader, &rv),
                            st, out_free);
            deps[nd++] = rv;
            if (last) {
                /* RECV = SEND block r op slot: in place the same memory, exactly */
                COLL_CHECK_GOTO(coll__sched_reduce(s, coll__slice(COLL_BUF_RECV, o, l),
                                                   coll__slice(COLL_BUF_SEND, rb * c + o, l), slot,
                                                   nd, deps, reader),
                                st, out_free);
            } else {
                if (k > 0)
                    deps[nd++] = sent[ch]; /* the partial there has left */
                COLL_CHECK_GOTO(coll__sched_reduce(s, part,
                                                   coll__slice(COLL_BUF_SEND, rb * c + o, l), slot,
                                                   nd, deps, &made[ch]),
                                st, out_free);
                *reader = made[ch];
            }
            j++;
        }
    }

out_free:
    free(sent);
    free(made);
    return st;
}
