/*
 * tree.c - pipelined trees: the engine that chain.c, binomial.c and this file share, the
 * binary tree "tree" and NCCL's double binary tree "dbtree".
 *
 * Divisions: 1 the pipelined tree engine, 2 "tree" (heap layout), 3 "dbtree" (two
 * complementary in-order trees).
 *
 * The engine moves a range of the buffers along one tree, chunk by chunk. For each chunk a
 * rank receives its children's partials into scratch slots and folds them into an
 * accumulator (RECV for all-reduce and at the root; otherwise the first child's slot, so a
 * reduce never touches RECV off the root), sends it to its parent, and for all-reduce
 * receives the result back into RECV and forwards it to its children. Chunk k's way down
 * overlaps chunk k+1's way up. A broadcast root copies SEND to RECV chunk by chunk (the
 * executor skips the copy in place) and sends from RECV, so SEND is read once per element
 * and never after RECV there is written.
 *
 * "tree": binary tree in heap layout over ranks relative to the root (rank 0 for
 * all-reduce), v's children 2v+1 and 2v+2. n = 7:
 *
 *                 0
 *             /       \
 *            1         2          depth d = floor(log2 n)
 *          /   \     /   \
 *         3     4   5     6
 *
 * "dbtree": a top rank T (the root; rank 0 for all-reduce) above two binary trees over the
 * other n-1 ranks, each carrying half of the data. Both are in-order trees (position p's
 * children are p -+ lowbit(p)/2, so odd positions are leaves); the second tree numbers the
 * ranks so that each rank's positions in the two trees differ in parity (mirrored when n-1
 * is even, shifted by one when it is odd), hence no rank is interior in both: every rank
 * sends and receives about m per direction, like a ring, at tree latency. n = 8, T = 0:
 *
 *     first half:   0 -> 4             second half:   0 -> 3
 *                      /  \                              /  \
 *                     2    6                            1    5
 *                    / \  / \                          / \  / \
 *                   1  3  5  7                        7  2  4  6
 *
 * Cost (alpha per message, beta per byte, gamma per reduced byte; m bytes, C chunks of
 * m/C, d = depth; pipelined, so C >= d amortizes the fill):
 *   tree broadcast   ~ (2C + 2d) (alpha + m/C beta)            interior ranks send 2 per chunk
 *   tree reduce      ~ (2C + 2d) (alpha + m/C beta) + 2 m gamma
 *   tree all-reduce  ~ (3C + 4d) (alpha + m/C beta) + 2 m gamma   (3 sends per chunk: 1 up, 2
 *                                                                  down)
 *   dbtree all-reduce ~ (4C + 4(d+1)) (alpha + m/(2C) beta) + m gamma
 *                      = about 2 m beta: half the data per tree, interior in one tree only
 *   dbtree broadcast ~ (2C + 2(d+1)) (alpha + m/(2C) beta)     (reduce adds m gamma)
 * unchunked (C = 1) they are the latency-optimal forms: tree all-reduce 2d (alpha + m beta).
 */
#include "schedule.h"

#include <string.h>

#define NONE UINT32_MAX

COLL_INTERNAL extern const struct coll_algo coll__algo_tree;
COLL_INTERNAL extern const struct coll_algo coll__algo_dbtree;

/* ---- 1 the pipelined tree engine ----------------------------------------------------- */

size_t coll__tree_part_init(struct coll_tree_part *p, enum coll_tree_mode mode, size_t off,
                            size_t count, size_t chunk, size_t scratch_off)
{
    p->mode = mode;
    p->off = off;
    p->count = count;
    p->chunk = chunk;
    p->scratch_off = scratch_off;
    p->nchunks = count / chunk + (count % chunk != 0);
    p->slot_count = COLL_MIN(chunk, count);
    p->nslots = (uint32_t)COLL_MIN((size_t)COLL_TREE_SLOTS, p->nchunks);
    memset(p->last_read, 0xff, sizeof(p->last_read));
    memset(p->up_done, 0xff, sizeof(p->up_done));
    if (mode == COLL_TREE_BCAST)
        return 0;
    return (size_t)p->nslots * p->nchildren * p->slot_count;
}

/* Chunk c of part p in buffer buf (SEND or RECV). */
static struct coll_slice part_chunk(const struct coll_tree_part *p, uint8_t buf, size_t c)
{
    size_t o = c * p->chunk;
    return coll__slice(buf, p->off + o, COLL_MIN(p->chunk, p->count - o));
}

/* Reduce chunk c of p from the children into the accumulator and send it to the parent. */
static coll_status_t tree_up(struct coll_schedule *s, struct coll_tree_part *p, size_t c)
{
    struct coll_slice mine = part_chunk(p, COLL_BUF_SEND, c), acc = mine;
    const uint32_t set = (uint32_t)(c % p->nslots), k = p->nchildren;
    /* all-reduce accumulates in RECV (the result lands there anyway); a reduce off the root
     * must not touch RECV, so it accumulates in the first child's slot */
    const bool acc_in_recv = p->mode == COLL_TREE_ALLREDUCE || p->parent < 0;
    uint32_t prev = NONE, deps[2], recv_idx, send_idx;
    coll_status_t st;

    for (uint32_t i = 0; i < k; i++) {
        size_t slot_off = p->scratch_off + ((size_t)set * k + i) * p->slot_count;
        struct coll_slice slot = coll__slice(COLL_BUF_SCRATCH, slot_off, mine.count);
        uint32_t *reader = &p->last_read[set][i];

        if (i == 0)
            acc = acc_in_recv ? part_chunk(p, COLL_BUF_RECV, c) : slot;
        /* the slot is free once whatever read it COLL_TREE_SLOTS chunks ago is done */
        st = coll__sched_recv(s, p->children[i], slot, *reader == NONE ? 0 : 1, reader, &recv_idx);
        if (st != COLL_SUCCESS)
            return st;
        deps[0] = recv_idx;
        deps[1] = prev;
        st = coll__sched_reduce(s, acc, i == 0 ? mine : acc, slot, i == 0 ? 1 : 2, deps, &prev);
        if (st != COLL_SUCCESS)
            return st;
        *reader = prev;
    }
    if (p->parent < 0) {
        if (k == 0) { /* a root without children: a tree of one rank */
            st = coll__sched_copy(s, part_chunk(p, COLL_BUF_RECV, c), mine, 0, NULL, &prev);
            if (st != COLL_SUCCESS)
                return st;
        }
        p->up_done[c % (COLL_TREE_SLOTS + 1)] = prev;
        return COLL_SUCCESS;
    }
    st = coll__sched_send(s, p->parent, acc, k ? 1 : 0, &prev, &send_idx);
    if (st != COLL_SUCCESS)
        return st;
    if (k && !acc_in_recv)
        p->last_read[set][0] = send_idx; /* the send reads the slot after the reduces */
    p->up_done[c % (COLL_TREE_SLOTS + 1)] = send_idx;
    return COLL_SUCCESS;
}

/* Bring chunk c of p into RECV (from the parent, or from SEND or the reduction at the root)
 * and send it to the children, largest subtree first. */
static coll_status_t tree_down(struct coll_schedule *s, struct coll_tree_part *p, size_t c)
{
    struct coll_slice out = part_chunk(p, COLL_BUF_RECV, c);
    uint32_t have, up = p->up_done[c % (COLL_TREE_SLOTS + 1)];
    coll_status_t st;

    if (p->parent < 0) {
        if (p->mode == COLL_TREE_BCAST) {
            st = coll__sched_copy(s, out, part_chunk(p, COLL_BUF_SEND, c), 0, NULL, &have);
            if (st != COLL_SUCCESS)
                return st;
        } else {
            have = up;
        }
    } else {
        /* all-reduce: RECV (or, in place, SEND) is what went up; wait until it has left */
        bool war = p->mode == COLL_TREE_ALLREDUCE;
        st = coll__sched_recv(s, p->parent, out, war ? 1 : 0, &up, &have);
        if (st != COLL_SUCCESS)
            return st;
    }
    for (uint32_t i = p->nchildren; i-- > 0;) {
        st = coll__sched_send(s, p->children[i], out, 1, &have, NULL);
        if (st != COLL_SUCCESS)
            return st;
    }
    return COLL_SUCCESS;
}

coll_status_t coll__tree_build(struct coll_schedule *s, struct coll_tree_part *parts,
                               uint32_t nparts)
{
    const enum coll_tree_mode mode = nparts ? parts[0].mode : COLL_TREE_BCAST;
    /* All-reduce emits chunk i's way up before chunk i-lag's way down. Only the order of
     * posting to one peer follows emission order; a lag lets a link shared by the way up
     * of one part and the way down of another run lag chunks ahead. */
    const size_t lag = mode == COLL_TREE_ALLREDUCE ? COLL_TREE_SLOTS : 0;
    size_t maxc = 0;
    coll_status_t st;

    for (uint32_t q = 0; q < nparts; q++) {
        if (parts[q].mode != mode)
            return coll__error(NULL, COLL_INTERNAL_ERROR, "tree parts of different modes");
        maxc = COLL_MAX(maxc, parts[q].nchunks);
    }
    for (size_t i = 0; i < maxc + lag; i++) {
        for (uint32_t q = 0; q < nparts && mode != COLL_TREE_BCAST; q++)
            if (i < parts[q].nchunks && (st = tree_up(s, &parts[q], i)) != COLL_SUCCESS)
                return st;
        for (uint32_t q = 0; q < nparts && mode != COLL_TREE_REDUCE && i >= lag; q++)
            if (i - lag < parts[q].nchunks &&
                (st = tree_down(s, &parts[q], i - lag)) != COLL_SUCCESS)
                return st;
    }
    return COLL_SUCCESS;
}

static enum coll_tree_mode tree_mode(enum coll_coll c)
{
    return c == COLL_COLL_ALLREDUCE ? COLL_TREE_ALLREDUCE
           : c == COLL_COLL_REDUCE  ? COLL_TREE_REDUCE
                                    : COLL_TREE_BCAST;
}

/* ---- 2 "tree": heap layout ----------------------------------------------------------- */

static coll_status_t tree_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    struct coll_tree_part part;
    int32_t n = a->nranks, root, v;
    coll_status_t st = coll__algo_check(&coll__algo_tree, a);

    if (st != COLL_SUCCESS)
        return st;
    if (coll__sched_trivial(a, s, &st))
        return st;
    root = a->coll == COLL_COLL_ALLREDUCE ? 0 : a->root;
    v = (a->rank - root + n) % n;
    memset(&part, 0, sizeof(part));
    part.parent = v ? ((v - 1) / 2 + root) % n : -1;
    /* reduction order: the right subtree is never the larger, so it comes first */
    for (int64_t ch = 2 * (int64_t)v + 2; ch >= 2 * (int64_t)v + 1; ch--)
        if (ch < n)
            part.children[part.nchildren++] = (int32_t)((ch + root) % n);
    coll__tree_part_init(&part, tree_mode(a->coll), 0, a->count, a->chunk_count, 0);
    return coll__tree_build(s, &part, 1);
}

COLL_INTERNAL const struct coll_algo coll__algo_tree = {
    .name = "tree",
    .desc = "pipelined binary tree (heap layout): reduce up, broadcast down, overlapped",
    .colls = 1u << COLL_COLL_ALLREDUCE | 1u << COLL_COLL_BROADCAST | 1u << COLL_COLL_REDUCE,
    .applicable = NULL,
    .build = tree_build,
};

/* ---- 3 "dbtree": two complementary in-order trees ------------------------------------ */

/* Positions 1..m of an in-order binary tree: p's lowest set bit says its height. */
static uint64_t lowbit(uint64_t p)
{
    return p & (~p + 1);
}

static uint64_t inorder_top(uint64_t m)
{
    uint64_t t = 1;
    while (t * 2 <= m)
        t *= 2;
    return t;
}

/* Parent of position p (not the top): of p-b and p+b (b = lowbit(p)) the one with lowbit 2b;
 * when it is past m, p hangs from the first ancestor that is not. */
static uint64_t inorder_parent(uint64_t p, uint64_t m)
{
    do {
        uint64_t b = lowbit(p);
        p = (p & ~b) | (b << 1);
    } while (p > m);
    return p;
}

/* Children of p in reduction order (right, the smaller, first); a right child past m is
 * replaced by the first left descendant of it that is within m. */
static uint32_t inorder_children(uint64_t p, uint64_t m, uint64_t out[2])
{
    uint64_t b = lowbit(p), right, step;
    uint32_t k = 0;

    if (b == 1)
        return 0;
    step = b / 2;
    right = p + step;
    while (right > m && step > 1) {
        step /= 2;
        right -= step;
    }
    if (right <= m)
        out[k++] = right;
    out[k++] = p - b / 2;
    return k;
}

/* The second tree's position of u (0..m-1; the first tree's is u+1), and back. */
static uint64_t pos2_of(uint64_t u, uint64_t m)
{
    return m % 2 == 0 ? m - u : (u + 1) % m + 1;
}

static uint64_t u_of_pos2(uint64_t p, uint64_t m)
{
    return m % 2 == 0 ? m - p : (p + m - 2) % m;
}

/* The rank at position p of tree which (0: first, 1: second) over m positions: ranks other
 * than the top are numbered u = 0..m-1 from top + 1 on. */
static int32_t dbtree_rank(int which, uint64_t p, uint64_t m, int32_t top, int32_t n)
{
    uint64_t u = which == 0 ? p - 1 : u_of_pos2(p, m);
    return (int32_t)((u + (uint64_t)top + 1) % (uint64_t)n);
}

/* Fill part with the links of rank number u in tree which; the tree's top hangs from top. */
static void dbtree_links(struct coll_tree_part *part, int which, uint64_t u, uint64_t m,
                         int32_t top, int32_t n)
{
    uint64_t p = which == 0 ? u + 1 : pos2_of(u, m), ch[2];
    uint32_t k = inorder_children(p, m, ch);

    part->parent = p == inorder_top(m) ? top : dbtree_rank(which, inorder_parent(p, m), m, top, n);
    part->nchildren = k;
    for (uint32_t i = 0; i < k; i++)
        part->children[i] = dbtree_rank(which, ch[i], m, top, n);
}

static coll_status_t dbtree_build(const struct coll_algo_args *a, struct coll_schedule *s)
{
    struct coll_tree_part parts[2];
    const int32_t n = a->nranks;
    const uint64_t m = (uint64_t)n - 1;
    const size_t half = a->count / 2 + a->count % 2;
    int32_t top;
    size_t scratch;
    coll_status_t st = coll__algo_check(&coll__algo_dbtree, a);

    if (st != COLL_SUCCESS)
        return st;
    if (coll__sched_trivial(a, s, &st))
        return st;
    top = a->coll == COLL_COLL_ALLREDUCE ? 0 : a->root;
    memset(parts, 0, sizeof(parts));
    for (int w = 0; w < 2; w++) {
        if (a->rank == top) {
            parts[w].parent = -1;
            if (m > 0) {
                parts[w].nchildren = 1;
                parts[w].children[0] = dbtree_rank(w, inorder_top(m), m, top, n);
            }
        } else {
            uint64_t u = (uint64_t)((a->rank - top - 1 + 2 * n) % n);
            dbtree_links(&parts[w], w, u, m, top, n);
        }
    }
    scratch = coll__tree_part_init(&parts[0], tree_mode(a->coll), 0, half, a->chunk_count, 0);
    coll__tree_part_init(&parts[1], tree_mode(a->coll), half, a->count - half, a->chunk_count,
                         scratch);
    return coll__tree_build(s, parts, 2);
}

COLL_INTERNAL const struct coll_algo coll__algo_dbtree = {
    .name = "dbtree",
    .desc = "double binary tree: two pipelined trees, each moving half the data",
    .colls = 1u << COLL_COLL_ALLREDUCE | 1u << COLL_COLL_BROADCAST | 1u << COLL_COLL_REDUCE,
    .applicable = NULL,
    .build = dbtree_build,
};
