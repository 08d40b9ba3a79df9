/*
 * cost_closed.c - the cost model in closed form: each algorithm's price from a formula of
 * n, the size, the chunk and the link classes, in O(log n) time and no memory beyond the
 * stack (O(n) only to read the hosts' shape: the busiest host, a heap tree's crossing
 * edges), so that a decision costs microseconds at thousands of ranks instead of building
 * every rank's schedule. The schedule walker of cost.c stays the reference (COLL_SELECT=
 * exact, collbench --explain --exact, collviz): tests/test_cost.c compares the picks of
 * the two, and what the formulas leave out is where they differ (docs/scale.md).
 *
 * The terms, per link class l and message of b bytes (as cost.c's machine prices them):
 *   occ(b)  = alpha - lat + b beta M (+ rdv from rdv_bytes): the ports' occupancy
 *   hop(b)  = step + occ(b) + lat: a message on the critical path (its issue, its
 *             occupancy, its latency; the receive was posted earlier)
 *   red(b)  = step + gamma b M: a reduction of b bytes of output
 * M is the memory term (cost.c, sim_memory) over the buffers of the busiest host's ranks,
 * and on a host of more ranks than cores the CPU's terms (and TCP's messages, which hold a
 * core) are stretched by ranks / cores.
 *
 * Two pipelines cover the pipelined schedules, with H dependent stages, C chunks, h the
 * time of one stage for one chunk, and bn the time a rank's busiest resource (send port,
 * receive port, CPU) spends per chunk:
 *   tree-like (every rank handles a chunk once per direction):  H h + (C - 1) bn
 *   ring-like (a rank's port carries all H stages):  max(H h + (C - 1) bn, H C bn + h - bn)
 * and the unpipelined ones (recursive doubling and halving, Bruck, dissemination,
 * pairwise) are sums over their rounds of one hop of that round's size, with the messages
 * of a round that share a port (a host's NIC, a root's port) added up.
 *
 * Hosts: ranks of a host are taken to be consecutive (as the launchers place them) with k
 * per host; a hop between hosts uses the inter-host class and, where every rank of a host
 * crosses at once (doubling rounds of distance >= k), the k messages share its NIC.
 */
#include "cost.h"

#include <math.h>
#include <string.h>

struct cf {
    const struct coll_cost_params *p;
    const struct coll_link_cost *in, *out; /* within a host, between hosts */
    bool tcp_in, tcp_out;
    int32_t n, nh, k; /* ranks, hosts, ranks on the busiest host */
    int32_t k_last;   /* ranks on the last host (hosts of consecutive ranks) */
    double e;         /* element size */
    double M;         /* memory term */
    double share;     /* ranks / cores on the busiest host, at least 1 */
    double gamma, copy, step;
};

static double lat_of(const struct coll_link_cost *l)
{
    return l->lat > 0 ? COLL_MIN(l->lat, l->alpha) : 0;
}

static double occ_l(const struct cf *c, const struct coll_link_cost *l, bool tcp, double b)
{
    double t = l->alpha - lat_of(l) + b * l->beta * c->M;

    if (l->rdv_bytes > 0 && b >= l->rdv_bytes)
        t += l->rdv;
    return tcp ? t * c->share : t;
}

static double hop_l(const struct cf *c, const struct coll_link_cost *l, bool tcp, double b)
{
    return c->step + occ_l(c, l, tcp, b) + lat_of(l) * (tcp ? c->share : 1);
}

/* Over the hosts when a flat algorithm's neighbours are spread over them (any hop of a
 * tree or a doubling round of distance >= k), else within. */
static double occ(const struct cf *c, bool cross, double b)
{
    return cross ? occ_l(c, c->out, c->tcp_out, b) : occ_l(c, c->in, c->tcp_in, b);
}
static double hop(const struct cf *c, bool cross, double b)
{
    return cross ? hop_l(c, c->out, c->tcp_out, b) : hop_l(c, c->in, c->tcp_in, b);
}
static double red(const struct cf *c, double b)
{
    return c->step + c->gamma * b;
}

static double pipe_tree(double H, double C, double h, double bn)
{
    return H * h + (C - 1) * bn;
}
/* hb: the stage over the busiest port's link (its hop), which the last chunk still takes
 * once that port has carried everything */
static double pipe_ring(double H, double C, double h, double bn, double hb)
{
    return COLL_MAX(H * h + (C - 1) * bn, H * C * bn + hb - bn);
}

static double ceil_log2(int32_t n)
{
    int32_t l = 0;
    while ((1 << l) < n)
        l++;
    return l;
}
static int32_t floor_pow2(int32_t n)
{
    int32_t p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

/* The most set bits of any v < n: the depth of a binomial tree of n ranks. */
static double max_pop(int32_t n)
{
    uint32_t x = (uint32_t)(n - 1);
    int best = __builtin_popcount(x);

    for (int i = 0; i < 31; i++)
        if (x & (1u << i)) {
            int cand = __builtin_popcount(x >> (i + 1)) + i;
            best = cand > best ? cand : best;
        }
    return best;
}

/* Chunks of at most cb bytes of a range of b bytes: how many, and their size. */
static double chunks(double b, double cb, double e, double *size_p)
{
    double C = b <= 0 ? 1 : ceil(b / COLL_MAX(cb, e));

    *size_p = b <= 0 ? 0 : b / C;
    return C;
}

/* Does any hop of a flat algorithm cross hosts? (one host: never) */
static bool spread(const struct cf *c)
{
    return c->nh > 1;
}

/* A ring (or chain) of n ranks in rank order: nh of its n hops cross hosts. The latency
 * of a stage is the average hop's; the bottleneck is the crossing hop. */
static double ring_hop(const struct cf *c, double b)
{
    if (c->nh <= 1)
        return hop(c, false, b);
    return (c->nh * hop(c, true, b) + (c->n - c->nh) * hop(c, false, b)) / c->n;
}
static double ring_occ(const struct cf *c, double b)
{
    return c->nh > 1 ? occ(c, true, b) : occ(c, false, b);
}

/* ---- per algorithm -------------------------------------------------------------------- */

static double ring_price(const struct cf *c, enum coll_coll coll, double m, double cb)
{
    double n = c->n, blk, s, C, t, hr, bnr, h, bn, hb;

    /* all-reduce: m is the vector, n blocks; all-gather / reduce-scatter: m is n blocks */
    blk = m / n;
    C = chunks(blk, cb, c->e, &s);
    h = ring_hop(c, s);
    hb = c->nh > 1 ? hop(c, true, s) : h;
    bn = COLL_MAX(ring_occ(c, s), 2 * c->step);
    hr = h + red(c, s);
    bnr = COLL_MAX(ring_occ(c, s), 3 * c->step + c->gamma * s);
    if (coll == COLL_COLL_ALLREDUCE && m / c->e < n) {
        /* fewer elements than ranks: the empty blocks move nothing, so a rank's port
         * carries only count of every n stages' messages */
        double part = (m / c->e) / n;
        s = c->e;
        h = ring_hop(c, s);
        hb = c->nh > 1 ? hop(c, true, s) : h;
        hr = h + red(c, s);
        bn *= part;
        bnr *= part;
    }
    switch (coll) {
    case COLL_COLL_ALLREDUCE:
        t = pipe_ring(n - 1, C, hr, bnr, hb + red(c, s)) + pipe_ring(n - 1, C, h, bn, hb);
        break;
    case COLL_COLL_REDUCE_SCATTER:
        t = pipe_ring(n - 1, C, hr, bnr, hb + red(c, s));
        break;
    default: /* all-gather: the own block is copied first */
        t = pipe_ring(n - 1, C, h, bn, hb) + c->step + c->copy * s;
        break;
    }
    return t;
}

/* The heap tree's crossing messages per level (hosts of k consecutive ranks): xs[j], the
 * most that one host's NIC carries (sends or takes in) between levels j and j+1. O(n). */
static void heap_crossings(const struct cf *c, int d, double *xs)
{
    int32_t n = c->n, k = c->k;

    for (int j = 0; j < d; j++) {
        int32_t a = (1 << j) - 1, b = COLL_MIN((int32_t)(1 << (j + 1)) - 1, n);
        int32_t h = -1, cnt = 0, most = 0;

        xs[j] = 0;
        if (c->nh <= 1)
            continue;
        for (int32_t v = a; v < b; v++) { /* senders: parents of this level, by host */
            if (v / k != h)
                h = v / k, cnt = 0;
            for (int32_t ch = 2 * v + 1; ch <= 2 * v + 2 && ch < n; ch++)
                cnt += ch / k != h;
            most = COLL_MAX(most, cnt);
        }
        h = -1, cnt = 0;
        for (int32_t ch = 2 * a + 1; ch < COLL_MIN(2 * b + 1, n); ch++) { /* receivers */
            if (ch / k != h)
                h = ch / k, cnt = 0;
            cnt += (ch - 1) / 2 / k != h;
            most = COLL_MAX(most, cnt);
        }
        xs[j] = most;
    }
}

/* Pipelined trees: depth d, per interior rank and chunk `fan` children. xs[j]: the most
 * messages between levels j and j+1 that one host's NIC carries (0: none cross), in a
 * heap (heap_crossings) or an in-order tree (about one per host, at the levels whose hops
 * span k or more ranks). `extra`: steps on the path that the tree's shape adds (a second
 * child's send after the first's). */
static double tree_like(const struct cf *c, enum coll_coll coll, double d, double fan, double m,
                        double cb, double extra, const double *xs, double bwd, double window)
{
    double s, C = chunks(m, cb, c->e, &s), o = occ(c, false, s), oe = occ(c, true, s);
    double hs = 0, hq = 0, nic = 0, up_x, up_bn, dn_x, dn_bn, path_o = o;

    for (int j = 0; j < (int)d; j++) {
        hs += hop(c, xs[j] > 0, s);
        if (xs[j] > 0) { /* the level's crossing messages queue at the NIC */
            hq += (xs[j] - 1) * oe;
            nic = COLL_MAX(nic, xs[j] * oe);
            path_o = oe;
        }
    }
    hs += hq;
    /* per level of the way up, the later children's messages at the parent's port and the
     * reductions, the last child's after its message, the others' overlapping it */
    up_x = d * COLL_MAX((fan - 1) * path_o + red(c, s), fan * red(c, s));
    up_bn = COLL_MAX(COLL_MAX(fan * o, nic), (2 * fan + 1) * c->step + fan * c->gamma * s);
    dn_x = extra * (c->step + path_o);
    /* what the walker finds for a pipelined broadcast: each level of the tree adds a chunk
     * time to the steady state (a child's receive waits for its sibling's send, level
     * after level), so the deeper tree costs max(fan, d) chunk times per chunk */
    dn_bn = COLL_MAX(COLL_MAX(COLL_MAX(fan, bwd) * o, nic), (fan + 1) * c->step);

    switch (coll) {
    case COLL_COLL_BROADCAST:
        return hs + dn_x + (C - 1) * dn_bn + c->step + c->copy * s;
    case COLL_COLL_REDUCE:
        return hs + up_x + (C - 1) * up_bn;
    default: /* all-reduce: up and down overlap chunk by chunk */
        /* up and down cross the NIC in opposite directions: its two ports. With `window`
         * chunks at most between a chunk's way up and its way back down (two trees whose
         * ways up and down share channels, which are FIFO: a rank's send up of chunk i + 1
         * queues behind its send down of chunk i - lag), the round trip over the depth,
         * shared by the window, bounds the time per chunk too */
        return 2 * hs + up_x + dn_x +
               (C - 1) * COLL_MAX(COLL_MAX(COLL_MAX((fan + 1) * o, nic),
                                           (3 * fan + 2) * c->step + fan * c->gamma * s),
                                  window > 0 ? (2 * hs + d * red(c, s)) / window : 0);
    }
}

static double tree_price(const struct cf *c, enum coll_coll coll, double m, double cb)
{
    double d = floor(log2((double)c->n)), extra = 0;

    /* the path to the last rank: a second child (even position) waits for its sibling */
    double xs[32];

    for (int32_t v = c->n - 1; v > 0; v = (v - 1) / 2)
        extra += v % 2 == 0;
    heap_crossings(c, (int)d, xs);
    return tree_like(c, coll, d, c->n > 2 ? 2 : 1, m, cb, extra, xs, d, 0);
}

static double dbtree_price(const struct cf *c, enum coll_coll coll, double m, double cb)
{
    double d = floor(log2((double)COLL_MAX(c->n - 1, 1))) + 1, half = ceil(m / c->e / 2) * c->e;
    /* two trees of half the data each; a rank is interior in one: about one tree's work
     * with two children per chunk, plus the leaf's in the other, whose steps come first */
    double s, C = chunks(half, cb, c->e, &s), o = occ(c, spread(c), s), xs[32], t;

    for (int j = 0; j < (int)d; j++) /* level j's hops span about 2^(d-1-j) ranks */
        xs[j] = c->nh > 1 && (1 << ((int)d - 1 - j)) >= c->k ? (c->n > 3 ? 2 : 1) : 0;
    /* The window of the round trip (tree_like): tree.c emits chunk i's way up before
     * chunk i - COLL_TREE_SLOTS's way down, so a rank's send up of chunk i + 1 in one tree
     * queues behind its send down of chunk i - COLL_TREE_SLOTS in the other: at most
     * COLL_TREE_SLOTS + 1 chunks per round trip of 2 hs. The round trip is longer than
     * that by each rank's queue of the other tree's sends on the same ports; the walker
     * and collsim at 1,024 and 4,096 ranks (2 MiB, 32 and 128 KiB chunks: 12-13% apart in
     * collsim) are matched by COLL_TREE_SLOTS - 1 chunks per 2 hs (docs/scale.md) */
    t = tree_like(c, coll, d, c->n > 3 ? 2 : 1, half, cb, d / 2, xs, COLL_MAX(d, 3),
                  COLL_TREE_SLOTS - 1);

    /* a reduce's leaf sends of the other tree come first but for the first chunk */
    return t + (coll == COLL_COLL_ALLREDUCE ? 2 * C : coll == COLL_COLL_REDUCE ? C - 1 : 0) * o +
           (coll == COLL_COLL_REDUCE ? 1 : d + 1) * c->step;
}

static double binomial_price(const struct cf *c, enum coll_coll coll, double m, double cb)
{
    double L = ceil_log2(c->n), s, C, o, h = 0, up, dn, D, root = 0, nx = 0;

    if (coll == COLL_COLL_GATHER || coll == COLL_COLL_SCATTER) {
        /* m: the root's n blocks, b each. Subtree by subtree: the child at distance 2^i
         * holds nb = min(2^i, n - 2^i) blocks and a subtree of as many ranks, those at
         * distance k or more across hosts. A gather's node takes its children one after
         * the other, nearest first, so the root's receives are a chain of ceil(log2 n)
         * hops, each of its subtree's blocks (the leaves copy their own block first). A
         * scatter's node sends the largest subtree's blocks first, each class's port one
         * message after another, and each child then scatters its subtree (T[i]). */
        double b = m / c->n, T[32], t = 0;

        if (coll == COLL_COLL_GATHER) {
            for (int i = 0; i < (int)L; i++) {
                bool x = c->nh > 1 && (1 << i) >= c->k;
                t += hop(c, x, COLL_MIN((double)(1 << i), (double)c->n - (1 << i)) * b);
            }
            return t + c->step + c->copy * b;
        }
        for (int j = 0; j <= (int)L; j++) {
            double sent[2] = {0, 0};

            t = 0;
            for (int i = j - 1; i >= 0; i--) {
                bool x = c->nh > 1 && (1 << i) >= c->k;
                double nb = j == (int)L ? COLL_MIN((double)(1 << i), (double)c->n - (1 << i))
                                        : (double)(1 << i);
                if (nb <= 0)
                    continue;
                sent[x] += occ(c, x, nb * b);
                t = COLL_MAX(t, (j - i) * c->step + sent[x] + lat_of(x ? c->out : c->in) +
                                    T[(int)ceil_log2((int32_t)nb)]);
            }
            T[j] = t;
        }
        return T[(int)L];
    }
    C = chunks(m, cb, c->e, &s);
    D = max_pop(c->n);
    /* the deepest path takes one hop of each distance 2^j below 2^D; those of distance
     * k or more cross hosts */
    for (int j = 0; j < (int)D; j++) {
        bool x = c->nh > 1 && (1 << j) >= c->k;
        h += hop(c, x, s);
    }
    if (c->nh > 1) { /* or the path of the crossing hops alone, where it is longer */
        double hx = 0;
        for (int j = 0; j < (int)L; j++)
            hx += (1 << j) >= c->k ? hop(c, true, s) : 0;
        h = COLL_MAX(h, hx);
    }
    /* the root's L children, one after the other on its ports (the far ones over the NIC) */
    for (int j = 0; j < (int)L; j++) {
        bool x = c->nh > 1 && (1 << j) >= c->k;
        root += occ(c, x, s) + c->step;
        nx += x;
    }
    root += lat_of(spread(c) ? c->out : c->in);
    /* per chunk the root's ports: its own for its host's children, the NIC for the rest */
    o = COLL_MAX((L - nx) * occ(c, false, s), nx * occ(c, true, s)) / L;
    up = COLL_MAX(h + D * red(c, s), root + L * red(c, s)) + c->step +
         (C - 1) * COLL_MAX(L * o, 3 * L * c->step + L * c->gamma * s);
    /* the root sends each chunk to its L children one after the other */
    dn = COLL_MAX(h, root) + c->step +
         (C - 1) * COLL_MAX(L * o, 2 * L * c->step);
    switch (coll) {
    case COLL_COLL_BROADCAST:
        return dn + c->step + c->copy * s;
    case COLL_COLL_REDUCE:
        return up;
    default:
        return up + dn;
    }
}

static double chain_price(const struct cf *c, enum coll_coll coll, double m, double cb)
{
    double s, C = chunks(m, cb, c->e, &s), h = ring_hop(c, s), o = ring_occ(c, s);

    if (coll == COLL_COLL_REDUCE)
        return pipe_tree(c->n - 1, C, h + red(c, s),
                         COLL_MAX(o, 3 * c->step + c->gamma * s));
    return pipe_tree(c->n - 1, C, h, COLL_MAX(o, 2 * c->step)) + c->step + c->copy * s;
}

/* One round of `senders` ranks per host exchanging with partners at distance dist: they
 * cross hosts when dist >= k, sharing its NIC. */
static double rd_round_of(const struct cf *c, int32_t dist, double b, int32_t senders)
{
    bool cross = c->nh > 1 && dist >= c->k;
    double h = hop(c, cross, b);

    if (cross && senders > 1)
        h += (senders - 1) * occ(c, true, b);
    return h;
}
static double rd_round(const struct cf *c, int32_t dist, double b)
{
    return rd_round_of(c, dist, b, c->k);
}
/* A round whose b bytes go as `msgs` messages (the fold's groups are two ranges) */
static double rd_round_msgs(const struct cf *c, int32_t dist, double b, int msgs)
{
    bool cross = c->nh > 1 && dist >= c->k;

    if (msgs <= 1)
        return rd_round(c, dist, b);
    b /= msgs;
    return hop(c, cross, b) + ((cross ? c->k : 1) * msgs - 1) * occ(c, cross, b);
}
/* A round of every rank sending to r + dist (mod n), Bruck's and dissemination's: of a
 * host's k consecutive ranks, the last min(k, dist) have partners beyond it, fewer where
 * r + dist wraps around onto the same host (n - dist < k); the others' messages stay in
 * the host, on their own ports. */
static int32_t shift_cross(const struct cf *c, int32_t dist)
{
    int32_t x = 0;

    if (c->nh > 1) { /* the first host, a middle one, the last (k_last ranks) */
        x = COLL_MAX(0, COLL_MIN(c->k, c->n - dist) - COLL_MAX(0, c->k - dist));
        if (c->nh > 2)
            x = COLL_MAX(x, COLL_MIN(c->k, dist));
        x = COLL_MAX(x, COLL_MIN(c->k_last, dist));
    }
    return x;
}
static double shift_round(const struct cf *c, int32_t dist, double b)
{
    int32_t x = shift_cross(c, dist);
    double h = hop(c, false, b);

    if (x > 0)
        h = COLL_MAX(x < c->k ? h : 0, hop(c, true, b) + (x - 1) * occ(c, true, b));
    return h;
}
/* The fold of n - p extra ranks onto ranks 0 .. n-p-1, at distance p. */
static double fold_hop(const struct cf *c, int32_t p, double b)
{
    return rd_round_of(c, p, b, COLL_MIN(c->n - p, c->k));
}

static double rd_price(const struct cf *c, enum coll_coll coll, double m)
{
    int32_t p = floor_pow2(c->n);
    bool fold = p != c->n;
    double t = 0, blk = m / c->n;

    switch (coll) {
    case COLL_COLL_ALLREDUCE:
        for (int32_t d = 1; d < p; d *= 2)
            t += rd_round(c, d, m) + red(c, m);
        if (fold)
            t += fold_hop(c, p, m) + red(c, m) + fold_hop(c, p, m);
        return t + c->step + c->copy * m;
    case COLL_COLL_ALLGATHER:
        for (int32_t d = 1; d < p; d *= 2)
            t += rd_round_msgs(c, d, (fold ? 2 : 1) * d * blk, fold ? 2 : 1);
        if (fold)
            t += fold_hop(c, p, blk) + fold_hop(c, p, m);
        return t + c->step + c->copy * blk;
    default: /* reduce-scatter by halving */
        for (int32_t d = p / 2; d >= 1; d /= 2)
            t += rd_round_msgs(c, d, (double)d * (m / p), fold ? 2 : 1) +
                 red(c, (double)d * (m / p));
        if (fold)
            t += fold_hop(c, p, m) + red(c, m) + fold_hop(c, p, blk);
        return t;
    }
}

static double rabenseifner_price(const struct cf *c, enum coll_coll coll, double m)
{
    int32_t p = floor_pow2(c->n);
    bool fold = p != c->n;
    double t = 0, part = m / p;

    for (int32_t d = p / 2; d >= 1; d /= 2)
        t += rd_round(c, d, d * part) + red(c, d * part);
    for (int32_t d = 1; d < p; d *= 2)
        t += rd_round(c, d, d * part);
    if (fold)
        t += fold_hop(c, p, m) + red(c, m) + (coll == COLL_COLL_ALLREDUCE ? fold_hop(c, p, m) : 0);
    return t + c->step + c->copy * part;
}

static double vdg_price(const struct cf *c, double m, double cb)
{
    double L = ceil_log2(c->n), blk = m / c->n, s, C = chunks(blk, cb, c->e, &s);
    double scatter = L * hop(c, spread(c), 0) + occ(c, spread(c), m - blk) - occ(c, spread(c), 0);

    return scatter +
           pipe_ring(c->n - 1, C, ring_hop(c, s), COLL_MAX(ring_occ(c, s), 2 * c->step),
                     c->nh > 1 ? hop(c, true, s) : ring_hop(c, s)) +
           c->step + c->copy * blk;
}

static double bruck_price(const struct cf *c, enum coll_coll coll, double m)
{
    double blk = m / c->n, t = 0;
    int32_t rounds = 0;

    for (int32_t d = 1; d < c->n; d *= 2, rounds++) {
        /* all-to-all: the slots whose index has this round's bit set */
        double nbit = (double)((c->n / (2 * d)) * d + COLL_MAX(0, c->n % (2 * d) - d));
        double b = coll == COLL_COLL_ALLGATHER ? COLL_MIN(d, c->n - d) * blk
                                               : nbit * blk;
        t += shift_round(c, d, b);
        if (coll == COLL_COLL_ALLTOALL) /* pack and unpack, a copy per run of d slots */
            t += 2 * (ceil((c->n - d) / (2.0 * d)) * c->step + c->copy * b);
    }
    if (coll == COLL_COLL_ALLTOALL) /* the rotation in, one copy per block out */
        return t + 2 * c->step + c->copy * m + c->n * c->step + c->copy * m;
    return t + 3 * c->step + 2 * c->copy * m;
}

static double pairwise_price(const struct cf *c, double m)
{
    double blk = m / c->n, n = c->n;
    bool pow2 = (c->n & (c->n - 1)) == 0;
    /* A round posts its send and its receive (2 steps) after the own block's copy; a block
     * received into one of the two scratch slots is copied out after its own send, and the
     * receive two slot uses later waits for that copy: a chain of receive, hop and copy
     * every second slot use. Power of two n: every round's block goes through a slot.
     * Other n: only the (n - 1) / 2 blocks received before they are sent do, one round
     * after; the others land in place. */
    double lat = lat_of(spread(c) ? c->out : c->in), o = occ(c, spread(c), blk);
    double st = c->step, cp = st + c->copy * blk, link = o + lat;
    double nslot = pow2 ? n - 1 : floor((n - 1) / 2), t, port;
    /* copies whose receive completes before the last receive is posted run before it */
    double before = pow2 ? 0 : COLL_MIN(nslot, COLL_MAX(0, ceil((n - link / (2 * st)) / 2) - 1));
    double post = cp + 2 * (n - 1) * st + before * cp;

    t = post + COLL_MAX(link, (nslot - before) * cp) + (pow2 ? cp : 0);
    t = COLL_MAX(t, cp + 2 * st + (link + cp) + floor((nslot - 1) / 2) * (st + link + cp));
    port = (n - 1) * occ(c, false, blk);
    if (spread(c)) {
        port = COLL_MAX((c->k - 1) * occ(c, false, blk), c->k * (n - c->k) * occ(c, true, blk));
        if (pow2 && c->k > 2) {
            /* rounds 1 .. k-1 stay in the host, and the first crossing round's receive
             * waits for the slot of round k - 2, whose message queued behind the earlier
             * rounds' at the rank's port: the NIC idles till then */
            port += (c->k - 2) * occ(c, false, blk) + lat_of(c->in) + cp;
        } else if (!pow2) {
            /* round by round (shifts s), a host's NIC carries its crossing ranks'
             * messages and a round cannot run far ahead (two slots): the rounds' busiest
             * hosts add up. Over more than two hosts a middle host is the busiest, min(k,
             * s) at shift s; over two, the sum is read off the n - 1 shifts (n <= 2k) */
            double xs = 0, k = c->k;
            if (c->nh > 2)
                xs = k * (k + 1) / 2 + k * (n - 1 - k);
            else
                for (int32_t d = 1; d < c->n; d++)
                    xs += shift_cross(c, d);
            port = COLL_MAX(port, xs * occ(c, true, blk));
        }
    }
    return COLL_MAX(t, cp + 2 * st + port + lat + (pow2 ? cp : 0));
}

static double linear_price(const struct cf *c, enum coll_coll coll, double m)
{
    double n = c->n, blk = m / n, o = occ(c, spread(c), blk);

    if (spread(c)) { /* the root's port for its host's ranks, the NIC for the others' */
        double oi = occ(c, false, blk), oe = occ(c, true, blk);
        /* all-to-all: every rank of the host sends n - k blocks over the one NIC */
        double port = COLL_MAX((c->k - 1) * oi,
                               (coll == COLL_COLL_ALLTOALL ? c->k : 1) * (n - c->k) * oe);
        o = port / (n - 1);
    }
    if (coll == COLL_COLL_BARRIER)
        return 2 * hop(c, spread(c), c->e) + 2 * (n - 2) * COLL_MAX(o, c->step);
    if (coll == COLL_COLL_ALLTOALL) {
        /* the own block's copy, the n - 1 sends, then the n - 1 receives posted (the CPU
         * takes ready steps in order, so the copies out of scratch come after them all):
         * the last receive is posted at 2n - 1 steps. Then the CPU's copies, the last
         * message's hop, or the receive port's n - 1 messages from the first receive on,
         * whichever ends last, and the last copy */
        double lat = lat_of(spread(c) ? c->out : c->in), cp = c->step + c->copy * blk;
        return cp + COLL_MAX(COLL_MAX((2 * n - 2) * c->step + (n - 1) * cp,
                                      (2 * n - 2) * c->step + lat + o + cp),
                             n * c->step + (n - 1) * o + lat + cp);
    }
    if (coll == COLL_COLL_ALLTOALL) /* all posted at once; each receive copied out of scratch */
        return lat_of(spread(c) ? c->out : c->in) + 2 * c->step + c->copy * blk +
               COLL_MAX((3 * n - 6) * c->step + (n - 2) * c->copy * blk, (n - 1) * o);
    /* the root issues its n - 1 messages (and a gather its own block's copy first), its
     * port moves them one after the other */
    return lat_of(spread(c) ? c->out : c->in) +
           COLL_MAX((n - 1 + (coll == COLL_COLL_GATHER)) * c->step + o, c->step + (n - 1) * o) +
           (coll == COLL_COLL_GATHER ? c->copy * blk : 0);
}

static double dissemination_price(const struct cf *c)
{
    double t = 0;
    for (int32_t d = 1; d < c->n; d *= 2)
        t += shift_round(c, d, c->e);
    return t;
}

/* hier: a chain inside each host to its leader, a chain of the leaders between hosts. */
static double hier_price(const struct cf *c, enum coll_coll coll, double m, double cb)
{
    double s, C = chunks(m, cb, c->e, &s);
    double hi = hop(c, false, s), he = hop(c, true, s);
    double oi = occ(c, false, s), oe = occ(c, true, s);
    double H_in = c->k - 1, H_out = c->nh - 1;
    /* the last host's chain may be shorter (k_last ranks): its leader starts the leaders'
     * chain sooner, and the path is the longer of its way and the full hosts' (one leader
     * hop less) */
    double H_last = c->k_last - 1, H_prev = COLL_MAX(H_out - 1, 0);
    double path_up = COLL_MAX(H_in * (hi + red(c, s)) + H_prev * (he + red(c, s)),
                              H_last * (hi + red(c, s)) + H_out * (he + red(c, s)));
    double path_dn = COLL_MAX(H_in * hi + H_prev * he, H_last * hi + H_out * he);
    double bn_up = COLL_MAX(COLL_MAX(oi, oe), 4 * c->step + 2 * c->gamma * s);
    double bn_dn = COLL_MAX(COLL_MAX(oi, oe), 3 * c->step);

    switch (coll) {
    case COLL_COLL_BROADCAST:
        return path_dn + (C - 1) * bn_dn + c->step + c->copy * s;
    case COLL_COLL_REDUCE:
        return path_up + (C - 1) * bn_up;
    default:
        /* a middle leader sends up and down over its NIC, each end only one way */
        return path_up + path_dn +
               (C - 1) * COLL_MAX(COLL_MAX(2 * oi, (c->nh > 2 ? 2 : 1) * oe),
                                  7 * c->step + 2 * c->gamma * s);
    }
}

/* ---- the shape of the query, the price, the ranking --------------------------------- */

static bool can_run(const struct coll_algo *algo, const struct coll_algo_args *a)
{
    return (unsigned)a->coll < COLL_NUM_COLLS && (algo->colls & (1u << a->coll)) &&
           (!algo->applicable || algo->applicable(a));
}

static coll_status_t cf_init(struct cf *c, const struct coll_cost_params *p,
                             const struct coll_cost_links *links, const struct coll_algo_args *a,
                             double in_bytes, double out_bytes, double scratch_bytes)
{
    enum coll_link lin, lout;
    int32_t r_in = -1, r_out = -1, k = 1;
    double w;

    memset(c, 0, sizeof(*c));
    c->p = p;
    c->n = a->nranks;
    c->e = (double)a->elem_size;
    c->nh = 1;
    if (a->hosts && a->nhosts > 1) {
        /* the busiest host's ranks and one partner within it and one beyond it (O(n)) */
        int32_t h0 = a->hosts[0];
        for (int32_t r = 1; r < a->nranks; r++) {
            if (a->hosts[r] == h0) {
                k++;
                if (r_in < 0)
                    r_in = r;
            } else if (r_out < 0) {
                r_out = r;
            }
        }
        c->nh = a->nhosts;
        for (int32_t r = 0; r < a->nranks; r++)
            c->k_last += a->hosts[r] == a->hosts[a->nranks - 1];
        /* hosts of equal size as launchers make them; a lopsided layout is priced by its
         * first host */
        k = COLL_MAX(k, (a->nranks + a->nhosts - 1) / a->nhosts);
    } else {
        k = a->nranks;
        r_in = a->nranks > 1 ? 1 : -1;
    }
    c->k = k;
    if (c->k_last < 1 || c->k_last > k)
        c->k_last = k;
    if (!links || !links->link_of) {
        lin = lout = links ? links->link : COLL_LINK_TCP;
    } else {
        lin = r_in >= 0 ? links->link_of(links->arg, 0, r_in) : links->link;
        lout = r_out >= 0 ? links->link_of(links->arg, 0, r_out) : lin;
    }
    if ((unsigned)lin >= COLL_NUM_LINKS || (unsigned)lout >= COLL_NUM_LINKS)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "closed-form cost: unknown link class");
    c->in = &p->link[lin];
    c->out = &p->link[lout];
    c->tcp_in = lin == COLL_LINK_TCP;
    c->tcp_out = lout == COLL_LINK_TCP;
    c->share = p->cores > 0 && k > p->cores ? (double)k / p->cores : 1;
    c->tcp_in = c->tcp_in && c->share > 1;
    c->tcp_out = c->tcp_out && c->share > 1;
    w = (double)k * (in_bytes + out_bytes + scratch_bytes);
    c->M = p->mem > 1 && p->cache_bytes > 0 && w > p->cache_bytes
               ? 1 + (p->mem - 1) * (1 - p->cache_bytes / w)
               : 1;
    c->gamma = p->gamma[a->dtype] * c->M * c->share;
    c->copy = p->copy * c->M * c->share;
    c->step = p->step * c->share;
    return COLL_SUCCESS;
}

coll_status_t coll__cost_closed(const struct coll_cost_params *p,
                                const struct coll_cost_links *links, const struct coll_algo *algo,
                                const struct coll_algo_args *tmpl, double *time_p)
{
    struct coll_algo_args a;
    struct cf c;
    double count, e, m, in, out, cb, t;
    const char *nm;
    coll_status_t st;

    if (!p || !algo || !tmpl || !time_p)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "closed-form cost: NULL argument");
    a = *tmpl;
    if (!a.elem_size)
        a.elem_size = coll__dtype_size(a.dtype);
    if (a.nranks < 1 || !a.elem_size || (unsigned)a.dtype >= COLL_NUM_DTYPES)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "closed-form cost: %d ranks, dtype %d", a.nranks, (int)a.dtype);
    if (!can_run(algo, &a))
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "closed-form cost: %s cannot run %s on %d ranks", algo->name,
                           coll__coll_name(a.coll), a.nranks);
    count = (double)a.count;
    e = (double)a.elem_size;
    cb = (double)COLL_MAX(a.chunk_count, (size_t)1) * e;
    /* m: the bytes the formulas speak of (the vector; n blocks for the block collectives) */
    {
        const struct coll_coll_desc *d = coll__coll_desc(a.coll);
        double blk = count * e;
        /* the row's block shape; in and out are what this rank's buffers hold */
        in = (double)coll__blocks_count(d->send_blocks, 1, a.nranks) * blk;
        out = (double)coll__blocks_count(d->recv_blocks, 1, a.nranks) * blk;
        m = COLL_MAX(in, out);
    }
    nm = algo->name;
    st = cf_init(&c, p, links, &a, in, out,
                 !strcmp(nm, "rd") || !strcmp(nm, "rabenseifner") || !strcmp(nm, "bruck") ? m : 0);
    if (st != COLL_SUCCESS)
        return st;
    if (a.nranks == 1 || (m == 0 && a.coll != COLL_COLL_BARRIER)) {
        *time_p = m > 0 ? c.step + c.copy * m : 0;
        return COLL_SUCCESS;
    }
    if (!strcmp(nm, "ring"))
        t = ring_price(&c, a.coll, m, cb);
    else if (!strcmp(nm, "tree"))
        t = tree_price(&c, a.coll, m, cb);
    else if (!strcmp(nm, "dbtree"))
        t = dbtree_price(&c, a.coll, m, cb);
    else if (!strcmp(nm, "binomial"))
        t = binomial_price(&c, a.coll, m, cb);
    else if (!strcmp(nm, "chain"))
        t = chain_price(&c, a.coll, m, cb);
    else if (!strcmp(nm, "rd"))
        t = rd_price(&c, a.coll, m);
    else if (!strcmp(nm, "rabenseifner"))
        t = rabenseifner_price(&c, a.coll, m);
    else if (!strcmp(nm, "vdg"))
        t = vdg_price(&c, m, cb);
    else if (!strcmp(nm, "bruck"))
        t = bruck_price(&c, a.coll, m);
    else if (!strcmp(nm, "pairwise"))
        t = pairwise_price(&c, m);
    else if (!strcmp(nm, "linear"))
        t = linear_price(&c, a.coll, m);
    else if (!strcmp(nm, "dissemination"))
        t = dissemination_price(&c);
    else if (!strcmp(nm, "hier"))
        t = hier_price(&c, a.coll, m, cb);
    else
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "closed-form cost: no formula for algorithm '%s'", nm);
    *time_p = t;
    return COLL_SUCCESS;
}
