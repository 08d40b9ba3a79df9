/*
 * barrier.c - barriers: dissemination (the "dissemination" entry) and linear (for the
 * "linear" entry of gather_scatter.c).
 *
 * A barrier moves no user data (count 0): its messages are one element of SCRATCH (the
 * executor runs barriers with dtype uint8). What matters is the order: no rank may finish
 * before every rank has started, i.e. every rank's last step must depend, through
 * dependencies and messages, on some step of every other rank.
 *
 * Dissemination, ceil(log2 n) rounds: in round k rank r sends to r + 2^k and receives from
 * r - 2^k, and a round's send waits for every earlier round. After round k, rank r has
 * heard (directly or not) from r-1 ... r-(2^(k+1)-1). n = 5, rank 0:
 *
 *   round 0: ->1 <-4     round 1: ->2 <-3     round 2: ->4 <-1
 *
 * Sends read SCRATCH[0] (its content does not matter); round k receives into SCRATCH[1+k],
 * so that the receives of all rounds can be posted at once without writing one place.
 *
 * Linear: every rank sends to rank 0 and waits for its answer; rank 0 receives from each
 * (one after the other, into one place) and then answers everyone. 2 (n-1) messages, two
 * rounds, all through rank 0: for small n.
 *
 * Cost (alpha per message): dissemination ceil(log2 n) alpha; linear 2 alpha + 2 (n-1)
 * messages at rank 0 (about 2 (n-1) alpha there).
 */
#include "schedule.h"

COLL_INTERNAL extern const struct coll_algo coll__algo_dissemination;

/* ---- dissemination ------------------------------------------------------------------- */

static coll_status_t dissemination(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int64_t n = a->nranks, r = a->rank;
    uint32_t deps[2], nd = 0;
    size_t k = 0;
    coll_status_t st;

    /* round k's send waits for round k-1's receive and send (which waited for round k-2's
     * receive, ...): it carries everything this rank has heard */
    for (int64_t d = 1; d < n; d *= 2, k++) {
        st = coll__sched_send(s, (int32_t)((r + d) % n), coll__slice(COLL_BUF_SCRATCH, 0, 1), nd,
                              deps, &deps[0]);
        if (st == COLL_SUCCESS)
            st = coll__sched_recv(s, (int32_t)((r - d + n) % n),
                                  coll__slice(COLL_BUF_SCRATCH, 1 + k, 1), 0, NULL, &deps[1]);
        if (st != COLL_SUCCESS)
            return st;
        nd = 2;
    }
    return COLL_SUCCESS;
}

/* ---- linear -------------------------------------------------------------------------- */

coll_status_t coll__linear_barrier_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int32_t n = a->nranks;
    const struct coll_slice token = coll__slice(COLL_BUF_SCRATCH, 0, 1),
                            in = coll__slice(COLL_BUF_SCRATCH, 1, 1);
    uint32_t prev = COLL_NO_STEP;
    coll_status_t st = COLL_SUCCESS;

    if (a->rank != 0) {
        st = coll__sched_send(s, 0, token, 0, NULL, NULL);
        return st ? st : coll__sched_recv(s, 0, in, 0, NULL, NULL);
    }
    /* one place for every arrival, so one after the other; the answers wait for the last */
    for (int32_t j = 1; j < n && st == COLL_SUCCESS; j++)
        st = coll__sched_recv(s, j, in, prev != COLL_NO_STEP, &prev, &prev);
    for (int32_t j = 1; j < n && st == COLL_SUCCESS; j++)
        st = coll__sched_send(s, j, token, 1, &prev, NULL);
    return st;
}

/* ---- the "dissemination" entry ------------------------------------------------------- */

static coll_status_t dissemination_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    coll_status_t st = coll__algo_check(&coll__algo_dissemination, a);

    if (st != COLL_SUCCESS)
        return st;
    return dissemination(a, s);
}

COLL_INTERNAL const struct coll_algo coll__algo_dissemination = {
    .name = "dissemination",
    .desc = "dissemination barrier: ceil(log2 n) rounds of one message, any n",
    .colls = 1u << COLL_COLL_BARRIER,
    .applicable = NULL,
    .build = dissemination_build,
};
