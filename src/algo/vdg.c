/*
 * vdg.c - van de Geijn broadcast: a binomial scatter of the message in n blocks, then a
 * ring all-gather of the blocks (the engine of allgather.c). For large messages on many
 * ranks: the root sends the message about once instead of log2 n times.
 *
 * Ranks are numbered relative to the root (v = rank - root mod n), and relative rank v
 * gets block v of the count elements cut into n nearly equal blocks (when count < n some
 * are empty and move nothing). n = 4, root 0:
 *
 *   scatter:     0 -> 2 (blocks 2,3)      then 0 -> 1 (block 1), 2 -> 3 (block 3)
 *   all-gather:  the ring 0 -> 1 -> 2 -> 3 -> 0, n - 1 steps, chunked
 *
 * The scatter moves whole subtrees (one message per link, largest subtree first) into
 * RECV; the ring then receives every block but its own, including blocks that the scatter
 * passed through this rank, after the scatter send that read them. The root copies only
 * its own block into RECV (nothing in place) and scatters from SEND.
 *
 * Cost (alpha per message, beta per byte; m bytes, C chunks per block):
 *   scatter     ceil(log2 n) alpha + (n-1)/n m beta
 *   all-gather  (n-1) C alpha + (n-1)/n m beta
 *   total       about (log2 n + (n-1) C) alpha + 2 (n-1)/n m beta
 * against binomial's log2 n (alpha + m beta) and chain's (n - 2 + C)(alpha + m/C beta).
 */
#include "schedule.h"

#include <errno.h>
#include <stdlib.h>

COLL_INTERNAL extern const struct coll_algo coll__algo_vdg;

static size_t div_up(size_t a, size_t b)
{
    return a / b + (a % b != 0);
}

static coll_status_t vdg_bcast(const struct coll_algo_args *a, struct coll_schedule *s)
{
    const int64_t n = a->nranks, root = a->root, v = (a->rank - root + n) % n;
    const int64_t low = v ? v & -v : (int64_t)1 << 32, size = COLL_MIN(low, n - v);
    const size_t count = a->count, chunk = a->chunk_count;
    size_t *off = NULL, *len = NULL, q = count / (size_t)n, rem = count % (size_t)n;
    uint32_t *after = NULL, *ready = NULL, got = COLL_NO_STEP, nchild = 0;
    int64_t child[32];
    uint32_t sent[32];
    struct coll_ring_ag g;
    coll_status_t st = COLL_SUCCESS;

#define ACT(x) ((int32_t)(((x) + root) % n)) /* relative rank -> rank */
#define ELEMS(buf, lo, hi) coll__slice(buf, off[lo], off[hi - 1] + len[hi - 1] - off[lo])
    off = malloc((size_t)n * sizeof(*off));
    len = malloc((size_t)n * sizeof(*len));
    after = malloc((size_t)n * sizeof(*after));
    ready = malloc(div_up(q + 1, chunk) * sizeof(*ready));
    if (!off || !len || !after || !ready) {
        st =
            coll__sys_error(NULL, ENOMEM, "vdg broadcast: no memory for %lld blocks", (long long)n);
        goto out_free;
    }
    for (int64_t b = 0; b < n; b++) {
        off[b] = (size_t)b * q + COLL_MIN((size_t)b, rem);
        len[b] = q + ((size_t)b < rem);
        after[b] = COLL_NO_STEP;
    }
    for (int64_t m = 1; m < low && v + m < n; m *= 2)
        child[nchild++] = v + m;

    /* the scatter: v's subtree [v, v + size) arrives in RECV (the root has it in SEND) */
    if (v == 0) {
        COLL_CHECK_GOTO(coll__sched_copy(s, ELEMS(COLL_BUF_RECV, 0, 1), ELEMS(COLL_BUF_SEND, 0, 1),
                                         0, NULL, &got),
                        st, out_free);
    } else if (ELEMS(COLL_BUF_RECV, v, v + size).count) {
        COLL_CHECK_GOTO(
            coll__sched_recv(s, ACT(v & (v - 1)), ELEMS(COLL_BUF_RECV, v, v + size), 0, NULL, &got),
            st, out_free);
    }
    for (uint32_t i = nchild; i-- > 0;) {
        int64_t u = child[i], ue = COLL_MIN(u + (u - v), n); /* the child's subtree */
        struct coll_slice src = ELEMS(v == 0 ? COLL_BUF_SEND : COLL_BUF_RECV, u, ue);
        sent[i] = COLL_NO_STEP;
        if (!src.count)
            continue;
        COLL_CHECK_GOTO(coll__sched_send(s, ACT(u), src, v == 0 ? 0 : 1, &got, &sent[i]), st,
                        out_free);
        /* the ring receives these blocks here again: after this send has read them */
        for (int64_t b = u; b < ue; b++)
            after[b] = sent[i];
    }

    /* the all-gather around the ring of relative ranks */
    for (size_t c = 0; c < div_up(len[v], chunk); c++)
        ready[c] = got;
    g = (struct coll_ring_ag){
        .n = (int32_t)n,
        .pos = (int32_t)v,
        .left = ACT(v + n - 1),
        .right = ACT(v + 1),
        .off = off,
        .len = len,
        .chunk = chunk,
        .own_ready = ready,
        .recv_after = after,
    };
    st = coll__ring_allgather_blocks(s, &g);
#undef ELEMS
#undef ACT

out_free:
    free(ready);
    free(after);
    free(len);
    free(off);
    return st;
}

static coll_status_t vdg_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    coll_status_t st = coll__algo_check(&coll__algo_vdg, a);

    if (st != COLL_SUCCESS)
        return st;
    if (coll__sched_trivial(a, s, &st))
        return st;
    return vdg_bcast(a, s);
}

COLL_INTERNAL const struct coll_algo coll__algo_vdg = {
    .name = "vdg",
    .desc = "van de Geijn: binomial scatter, then ring all-gather: large broadcasts",
    .colls = 1u << COLL_COLL_BROADCAST,
    .applicable = NULL,
    .build = vdg_build,
};
