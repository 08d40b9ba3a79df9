/*
 * collviz - draw a collective's schedule, round by round, for teaching (tree vs ring).
 *
 *   collviz allreduce --algo ring -n 8 --bytes 1M          the rounds in the terminal
 *   collviz broadcast --algo binomial -n 5 --html b.html   an animated page
 *   collviz allreduce -n 8 --compare ring,tree --bytes 8:64M [--plot t.png]
 *
 * The schedules are the executor's: algo->build for every rank, never a re-implementation.
 * collviz only reads them, in three passes:
 *
 *   rounds    every step gets a round by dependency depth across ranks: a SEND is one round
 *             after the latest step it waits for; a RECV falls in the round of its matching
 *             SEND (or later, if one of its own dependencies is later); REDUCE and COPY fall
 *             in the round of their latest dependency (round 0: local work before any
 *             message). So one round is one message hop, and a chunked pipeline shows as
 *             overlapping hops.
 *   data      every rank starts with the value r+1 in every element of its send buffer; the
 *             steps are applied round by round and each element carries the set of ranks
 *             whose values were summed into it (a 64-bit mask) and which send-buffer element
 *             it came from. That is enough to print "1+2+3" per block and to check at the
 *             end that every rank holds what the collective promises.
 *   prices    with the cost model (src/algo/cost.h), each round is priced in lockstep
 *             (alpha + bytes beta per message a rank's port carries, gamma per reduced
 *             byte) and the whole schedule by coll__cost_predict, which overlaps rounds.
 *
 * Divisions: 1 arguments, 2 building and matching, 3 rounds, 4 data, 5 terminal output,
 * 6 HTML, 7 prices and --compare, 8 main.
 *
 * Exit status: 0 done, 1 a schedule or system failure, 2 a usage error.
 */
#include "algo/schedule.h"

/* The cost model is used when its header is in the tree (-DCOLLVIZ_NO_COST leaves it out). */
#if defined(__has_include) && !defined(COLLVIZ_NO_COST)
#if __has_include("algo/cost.h")
#include "algo/cost.h"
#define COLLVIZ_HAVE_COST 1
#endif
#endif
#ifndef COLLVIZ_HAVE_COST
#define COLLVIZ_HAVE_COST 0
#endif

#include "base/json.h"
#include "collviz_html.h"
#include "collviz_json.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define EXIT_USAGE 2
#define MAX_RANKS 64
#define NONE UINT32_MAX
#define DEFAULT_CHUNK_BYTES (128u << 10) /* COLL_CHUNK_BYTES' default */
#define MAX_SIM_STEPS 2000000u           /* beyond this, no data simulation */
#define MAX_TRACE_ARGS 256

/* ---- 1 arguments ------------------------------------------------------------------------ */

struct opts {
    enum coll_coll coll;
    const struct coll_algo *algo;
    int32_t n, root;
    size_t bytes, bytes_hi; /* bytes_hi: --compare range end (0: not a range) */
    coll_dtype_t dtype;
    size_t chunk_bytes;
    bool chunk_given;
    int width;
    int max_rounds;
    const char *html, *compare, *plot, *trace, *save_trace, *cost_file;
    bool no_cost, no_data;
    const char *traces[MAX_TRACE_ARGS]; /* --trace FILE... (trace = traces[0]) */
    int ntraces;
    long op_seq; /* --op: which op of a COLL_TRACE trace */
    int link;    /* --link: the link class every pair is priced on (enum coll_link) */
    int cores;   /* --cores: the host's cores, 0: one per rank (struct coll_cost_params) */
    bool op_given;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: collviz COLLECTIVE [options]\n"
            "  draws the schedule that coll's executor runs, round by round\n"
            "  COLLECTIVE       (or --collective NAME; 'list': the algorithms of each)\n"
            "                   ");
    for (int c = 0; c < COLL_COLL_SENDRECV; c++)
        fprintf(f, "%s%s", c ? ", " : "", coll__coll_name((enum coll_coll)c));
    fprintf(f, "\n"
               "  --algo NAME      algorithm (default: the first in coll's table that can run it;\n"
               "                   'list': the algorithms of this collective)\n"
               "  -n N             ranks, 1..%d (default 4)\n"
               "  --bytes SIZE     message size, NCCL's count x dtype size; K, M, G suffixes\n"
               "                   (powers of 1024); with --compare a range LO:HI\n"
               "  --dtype NAME     element type (default float)\n"
               "  --root R         root of broadcast, reduce, gather, scatter (default 0)\n"
               "  --chunk BYTES    pipelining unit (default 128K, as COLL_CHUNK_BYTES)\n"
               "  --width COLS     terminal width (default 100)\n"
               "  --rounds N       print at most N rounds (default 64; 0: all)\n"
               "  --html FILE      also write an animated, self-contained page\n"
               "  --compare A,B    predicted time of algorithms A and B over --bytes LO:HI;\n"
               "                   'flat': the shared-memory fast path, 'best': what the\n"
               "                   selector picks at each size\n"
               "  --plot FILE.png  with --compare: plot through gnuplot\n"
               "  --cost FILE      cost model calibration file (collbench --calibrate)\n"
               "  --link NAME      price every pair on this link: tcp (default), shm, ib, cuda\n"
               "                   (the flat path's estimate is for one host over shm)\n"
               "  --cores N        the ranks share N cores (default 0: one core per rank)\n"
               "  --no-cost        leave out prices   --no-data  leave out the data table\n"
               "  --save-trace F   write the schedules as a coll trace\n"
               "  --trace F        draw the schedules of a coll trace instead of building\n"
               "  collviz trace FILE... [--op SEQ] [--html OUT.html]\n"
               "                   (or --trace FILE, repeated) draw one op of a COLL_TRACE run\n"
               "                   (JSON, one file per rank, or the name COLL_TRACE had) with\n"
               "                   its measured timeline beside the predicted one; --op SEQ\n"
               "                   picks the op (default: the largest collective every rank\n"
               "                   ran, the last of those)\n",
            MAX_RANKS);
}

static int usage_error(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "collviz: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(collviz --help for usage)\n");
    return EXIT_USAGE;
}

/* "64", "1M", "128K", "2G", "3KB", "1MiB": powers of 1024, as the COLL_* settings take
 * them (coll__parse_size); false when malformed. */
static bool parse_size(const char *s, size_t *out_p)
{
    int64_t v;

    if (!coll__parse_size(s, &v) || (uint64_t)v > SIZE_MAX)
        return false;
    *out_p = (size_t)v;
    return true;
}

static bool parse_int(const char *s, long lo, long hi, long *out_p)
{
    return coll__parse_long(s, lo, hi, out_p);
}

static void list_algos(FILE *f, enum coll_coll coll)
{
    bool first = true;

    fprintf(f, "algorithms for %s:", coll__coll_name(coll));
    for (int i = 0; coll__algos[i]; i++)
        if (coll__algos[i]->colls & (1u << coll)) {
            fprintf(f, "%s %s", first ? "" : ",", coll__algos[i]->name);
            first = false;
        }
    fprintf(f, "%s\n", first ? " none" : "");
}

static bool usable(const struct coll_algo *algo, const struct coll_algo_args *a)
{
    return (algo->colls & (1u << a->coll)) && (!algo->applicable || algo->applicable(a));
}

/* ---- 2 building and matching ------------------------------------------------------------ */

struct viz {
    struct coll_algo_args args; /* rank field unused */
    const char *algo_name, *algo_desc;
    int32_t n;
    struct coll_schedule *s;  /* n schedules */
    uint32_t *base;           /* global id of rank r's step i: base[r] + i */
    uint32_t total;           /* steps of all ranks */
    uint32_t *match;          /* per global RECV: the global id of its SEND (and back) */
    uint32_t *round;          /* per global step */
    uint32_t nrounds;         /* rounds 0..nrounds-1 */
};

static void viz_free(struct viz *v)
{
    if (v->s)
        for (int32_t r = 0; r < v->n; r++)
            coll__sched_free(&v->s[r]);
    free(v->s);
    free(v->base);
    free(v->match);
    free(v->round);
    memset(v, 0, sizeof(*v));
}

static const char *last_error(void)
{
    const char *e = coll_last_error(NULL);
    return e && *e ? e : "unknown error";
}

static int viz_build(struct viz *v, const struct coll_algo *algo)
{
    v->s = calloc((size_t)v->n, sizeof(*v->s));
    if (!v->s)
        return fprintf(stderr, "collviz: out of memory\n"), 1;
    for (int32_t r = 0; r < v->n; r++) {
        struct coll_algo_args a = v->args;
        coll_status_t st;

        a.rank = r;
        coll__sched_init(&v->s[r], &a);
        st = algo->build(&a, &v->s[r]);
        if (st == COLL_SUCCESS)
            st = coll__sched_validate(&v->s[r]);
        if (st != COLL_SUCCESS) {
            fprintf(stderr, "collviz: %s %s, rank %d: %s\n", algo->name,
                    coll__coll_name(v->args.coll), r, last_error());
            return st == COLL_INVALID_ARGUMENT ? EXIT_USAGE : 1;
        }
    }
    return 0;
}

/* Pair the k-th SEND a->b with the k-th RECV from a on b (schedule.h's matching rule). */
static int viz_match(struct viz *v)
{
    uint64_t total = 0;
    uint32_t *cursor = NULL;
    int rc = 1;

    v->base = calloc((size_t)v->n + 1, sizeof(*v->base));
    if (!v->base)
        goto out;
    for (int32_t r = 0; r < v->n; r++) {
        v->base[r] = (uint32_t)total;
        total += v->s[r].nsteps;
    }
    if (total >= UINT32_MAX / 2) {
        fprintf(stderr, "collviz: %" PRIu64 " steps are too many to draw\n", total);
        return 1;
    }
    v->total = (uint32_t)total;
    v->base[v->n] = v->total;
    v->match = malloc(((size_t)v->total + 1) * sizeof(*v->match));
    cursor = calloc((size_t)v->n, sizeof(*cursor));
    if (!v->match || !cursor)
        goto out;
    for (uint32_t g = 0; g < v->total; g++)
        v->match[g] = NONE;
    for (int32_t b = 0; b < v->n; b++) {
        memset(cursor, 0, (size_t)v->n * sizeof(*cursor));
        for (uint32_t i = 0; i < v->s[b].nsteps; i++) {
            const struct coll_step *p = &v->s[b].steps[i];
            int32_t a = p->peer;
            uint32_t k;

            if (p->kind != COLL_STEP_RECV)
                continue;
            for (k = cursor[a]; k < v->s[a].nsteps; k++)
                if (v->s[a].steps[k].kind == COLL_STEP_SEND && v->s[a].steps[k].peer == b)
                    break;
            if (k == v->s[a].nsteps) {
                fprintf(stderr, "collviz: rank %d step %u: receive from rank %d has no send\n", b,
                        i, a);
                goto out;
            }
            if (v->s[a].steps[k].src.count != p->dst.count) {
                fprintf(stderr,
                        "collviz: rank %d step %u: receives %zu elements, rank %d step %u sends "
                        "%zu\n",
                        b, i, p->dst.count, a, k, v->s[a].steps[k].src.count);
                goto out;
            }
            cursor[a] = k + 1;
            v->match[v->base[b] + i] = v->base[a] + k;
            v->match[v->base[a] + k] = v->base[b] + i;
        }
    }
    for (int32_t a = 0; a < v->n; a++)
        for (uint32_t k = 0; k < v->s[a].nsteps; k++)
            if (v->s[a].steps[k].kind == COLL_STEP_SEND && v->match[v->base[a] + k] == NONE) {
                fprintf(stderr, "collviz: rank %d step %u: send to rank %d is never received\n",
                        a, k, v->s[a].steps[k].peer);
                goto out;
            }
    rc = 0;
out:
    if (rc && !v->match)
        fprintf(stderr, "collviz: out of memory\n");
    free(cursor);
    return rc;
}

static int32_t rank_of(const struct viz *v, uint32_t g)
{
    int32_t lo = 0, hi = v->n - 1;

    while (lo < hi) { /* the last rank whose base <= g */
        int32_t mid = (lo + hi + 1) / 2;
        if (v->base[mid] <= g)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static const struct coll_step *step_of(const struct viz *v, uint32_t g)
{
    int32_t r = rank_of(v, g);
    return &v->s[r].steps[g - v->base[r]];
}

/* ---- 3 rounds --------------------------------------------------------------------------- */

/* Kahn's order over dependencies and send -> receive edges; a step is placed once everything
 * it waits for is, so a receive may be placed before earlier steps of its own rank. */
static int viz_rounds(struct viz *v)
{
    uint32_t *indeg = NULL, *succ_start = NULL, *succ = NULL, *queue = NULL, *fill = NULL;
    uint32_t qh = 0, qt = 0, placed = 0;
    uint64_t nedges = 0;
    int rc = 1;

    v->round = calloc((size_t)v->total + 1, sizeof(*v->round));
    indeg = calloc((size_t)v->total + 1, sizeof(*indeg));
    succ_start = calloc((size_t)v->total + 2, sizeof(*succ_start));
    queue = malloc(((size_t)v->total + 1) * sizeof(*queue));
    fill = calloc((size_t)v->total + 1, sizeof(*fill));
    if (!v->round || !indeg || !succ_start || !queue || !fill)
        goto out;
    for (uint32_t g = 0; g < v->total; g++) {
        const struct coll_step *p = step_of(v, g);
        uint32_t b = v->base[rank_of(v, g)];
        for (uint32_t d = 0; d < p->ndeps; d++)
            succ_start[b + p->deps[d] + 1]++;
        indeg[g] = p->ndeps;
        if (p->kind == COLL_STEP_RECV) {
            succ_start[v->match[g] + 1]++;
            indeg[g]++;
        }
        nedges += p->ndeps + (p->kind == COLL_STEP_RECV);
    }
    for (uint32_t g = 0; g < v->total; g++)
        succ_start[g + 1] += succ_start[g];
    succ = malloc((size_t)(nedges + 1) * sizeof(*succ));
    if (!succ)
        goto out;
    for (uint32_t g = 0; g < v->total; g++) {
        const struct coll_step *p = step_of(v, g);
        uint32_t b = v->base[rank_of(v, g)];
        for (uint32_t d = 0; d < p->ndeps; d++) {
            uint32_t from = b + p->deps[d];
            succ[succ_start[from] + fill[from]++] = g;
        }
        if (p->kind == COLL_STEP_RECV) {
            uint32_t from = v->match[g];
            succ[succ_start[from] + fill[from]++] = g;
        }
    }
    for (uint32_t g = 0; g < v->total; g++)
        if (!indeg[g])
            queue[qt++] = g;
    v->nrounds = 1;
    while (qh < qt) {
        uint32_t g = queue[qh++];
        const struct coll_step *p = step_of(v, g);
        uint32_t b = v->base[rank_of(v, g)], r = 0;

        for (uint32_t d = 0; d < p->ndeps; d++)
            if (v->round[b + p->deps[d]] > r)
                r = v->round[b + p->deps[d]];
        if (p->kind == COLL_STEP_SEND)
            r++;
        else if (p->kind == COLL_STEP_RECV && v->round[v->match[g]] > r)
            r = v->round[v->match[g]];
        v->round[g] = r;
        if (r + 1 > v->nrounds)
            v->nrounds = r + 1;
        placed++;
        for (uint32_t e = succ_start[g]; e < succ_start[g + 1]; e++)
            if (--indeg[succ[e]] == 0)
                queue[qt++] = succ[e];
    }
    if (placed != v->total) {
        for (uint32_t g = 0; g < v->total; g++)
            if (indeg[g]) {
                int32_t r = rank_of(v, g);
                fprintf(stderr, "collviz: the schedules deadlock: rank %d step %u never runs\n",
                        r, g - v->base[r]);
                break;
            }
        goto out;
    }
    rc = 0;
out:
    if (rc && placed == 0 && v->total)
        fprintf(stderr, "collviz: out of memory\n");
    free(indeg);
    free(succ_start);
    free(succ);
    free(queue);
    free(fill);
    return rc;
}

/* ---- 4 data ----------------------------------------------------------------------------- */

/* A run of elements with the same contributors, from consecutive send-buffer elements. */
#define SEG_EMPTY 1u  /* never written (garbage in a real run) */
#define SEG_DUP 2u    /* some rank was summed in twice */
#define SEG_MIXED 4u  /* elements of different positions were combined */
struct seg {
    size_t off, len;
    uint64_t mask;  /* ranks summed in */
    size_t origin;  /* send-buffer element of the first element */
    uint32_t flags;
};
struct segs {
    struct seg *a;
    size_t n, cap;
};

struct data {
    struct segs (*buf)[COLL_NUM_BUFS]; /* per rank */
    struct segs *msg;                  /* per global SEND: what it carried */
    struct segs tmp_a, tmp_b, tmp_c;
};

static bool segs_push(struct segs *s, struct seg x)
{
    if (x.len == 0)
        return true;
    if (s->n) { /* merge with a continuation of the last run */
        struct seg *l = &s->a[s->n - 1];
        if (l->off + l->len == x.off && l->mask == x.mask && l->flags == x.flags &&
            ((x.flags & SEG_EMPTY) || l->origin + l->len == x.origin)) {
            l->len += x.len;
            return true;
        }
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        struct seg *a = realloc(s->a, cap * sizeof(*a));
        if (!a)
            return false;
        s->a = a;
        s->cap = cap;
    }
    s->a[s->n++] = x;
    return true;
}

/* out = the runs of s over [off, off + count), re-based to start at 0. */
static bool segs_read(const struct segs *s, size_t off, size_t count, struct segs *out)
{
    out->n = 0;
    for (size_t i = 0; i < s->n; i++) {
        const struct seg *x = &s->a[i];
        size_t lo = x->off > off ? x->off : off;
        size_t hi = x->off + x->len < off + count ? x->off + x->len : off + count;
        if (lo >= hi)
            continue;
        if (!segs_push(out, (struct seg){lo - off, hi - lo, x->mask,
                                         x->origin + (lo - x->off), x->flags}))
            return false;
    }
    return true;
}

/* Write src (based at 0, covering count) over [off, off + count) of s; tmp is scratch. */
static bool segs_write(struct segs *s, size_t off, size_t count, const struct segs *src,
                       struct segs *tmp)
{
    struct segs t;

    tmp->n = 0;
    for (size_t i = 0; i < s->n; i++) { /* before */
        const struct seg *x = &s->a[i];
        if (x->off >= off)
            break;
        struct seg y = *x;
        if (y.off + y.len > off)
            y.len = off - y.off;
        if (!segs_push(tmp, y))
            return false;
    }
    for (size_t i = 0; i < src->n; i++) {
        struct seg y = src->a[i];
        y.off += off;
        if (!segs_push(tmp, y))
            return false;
    }
    for (size_t i = 0; i < s->n; i++) { /* after */
        const struct seg *x = &s->a[i];
        if (x->off + x->len <= off + count)
            continue;
        struct seg y = *x;
        if (y.off < off + count) {
            size_t cut = off + count - y.off;
            y.off += cut;
            y.len -= cut;
            y.origin += cut;
        }
        if (!segs_push(tmp, y))
            return false;
    }
    t = *s;
    *s = *tmp;
    *tmp = t;
    return true;
}

/* out = a op b, both based at 0 and covering count. */
static bool segs_combine(const struct segs *a, const struct segs *b, size_t count,
                         struct segs *out)
{
    size_t i = 0, j = 0, pos = 0;

    out->n = 0;
    while (pos < count && i < a->n && j < b->n) {
        const struct seg *x = &a->a[i], *y = &b->a[j];
        size_t end = x->off + x->len < y->off + y->len ? x->off + x->len : y->off + y->len;
        struct seg z = {pos, end - pos, x->mask | y->mask, x->origin + (pos - x->off),
                        (x->flags | y->flags) & ~SEG_EMPTY};

        if ((x->flags & SEG_EMPTY) || (y->flags & SEG_EMPTY))
            z.flags |= SEG_EMPTY; /* garbage in, garbage out */
        if (x->mask & y->mask)
            z.flags |= SEG_DUP;
        if (x->origin + (pos - x->off) != y->origin + (pos - y->off))
            z.flags |= SEG_MIXED;
        if (!segs_push(out, z))
            return false;
        pos = end;
        if (x->off + x->len == end)
            i++;
        if (y->off + y->len == end)
            j++;
    }
    return true;
}

static void data_free(struct data *d, const struct viz *v)
{
    if (d->buf)
        for (int32_t r = 0; r < v->n; r++)
            for (int b = 0; b < COLL_NUM_BUFS; b++)
                free(d->buf[r][b].a);
    if (d->msg)
        for (uint32_t g = 0; g < v->total; g++)
            free(d->msg[g].a);
    free(d->buf);
    free(d->msg);
    free(d->tmp_a.a);
    free(d->tmp_b.a);
    free(d->tmp_c.a);
    memset(d, 0, sizeof(*d));
}

static bool data_init(struct data *d, const struct viz *v)
{
    d->buf = calloc((size_t)v->n, sizeof(*d->buf));
    d->msg = calloc((size_t)v->total + 1, sizeof(*d->msg));
    if (!d->buf || !d->msg)
        return false;
    for (int32_t r = 0; r < v->n; r++)
        for (int b = 0; b < COLL_NUM_BUFS; b++) {
            size_t cnt = v->s[r].buf_count[b];
            struct seg x = {0, cnt, 0, 0, SEG_EMPTY};
            if (b == COLL_BUF_SEND)
                x = (struct seg){0, cnt, 1ull << r, 0, 0};
            if (!segs_push(&d->buf[r][b], x))
                return false;
        }
    return true;
}

/* Apply one step (its data effect). Sends record what they carry; receives take it. */
static bool data_step(struct data *d, const struct viz *v, uint32_t g)
{
    int32_t r = rank_of(v, g);
    const struct coll_step *p = &v->s[r].steps[g - v->base[r]];
    struct segs(*B)[COLL_NUM_BUFS] = d->buf;

    switch (p->kind) {
    case COLL_STEP_SEND:
        return segs_read(&B[r][p->src.buf], p->src.off, p->src.count, &d->msg[g]);
    case COLL_STEP_RECV:
        return segs_write(&B[r][p->dst.buf], p->dst.off, p->dst.count, &d->msg[v->match[g]],
                          &d->tmp_c);
    case COLL_STEP_COPY:
        return segs_read(&B[r][p->src.buf], p->src.off, p->src.count, &d->tmp_a) &&
               segs_write(&B[r][p->dst.buf], p->dst.off, p->dst.count, &d->tmp_a, &d->tmp_c);
    case COLL_STEP_REDUCE: {
        struct segs out;
        bool ok = segs_read(&B[r][p->src.buf], p->src.off, p->dst.count, &d->tmp_a) &&
                  segs_read(&B[r][p->src2.buf], p->src2.off, p->dst.count, &d->tmp_b);
        out = (struct segs){0};
        ok = ok && segs_combine(&d->tmp_a, &d->tmp_b, p->dst.count, &out) &&
             segs_write(&B[r][p->dst.buf], p->dst.off, p->dst.count, &out, &d->tmp_c);
        free(out.a);
        return ok;
    }
    default:
        return true;
    }
}

/* What RECV must hold at the end, per element (false: nothing is promised there). */
static bool expected(const struct viz *v, int32_t r, size_t i, uint64_t *mask_p, size_t *origin_p)
{
    const struct coll_algo_args *a = &v->args;
    const uint64_t all = v->n == 64 ? ~0ull : (1ull << v->n) - 1;
    const size_t c = a->count;

    switch (a->coll) {
    case COLL_COLL_ALLREDUCE:
        *mask_p = all, *origin_p = i;
        return i < c;
    case COLL_COLL_BROADCAST:
        *mask_p = 1ull << a->root, *origin_p = i;
        return i < c;
    case COLL_COLL_REDUCE:
        *mask_p = all, *origin_p = i;
        return r == a->root && i < c;
    case COLL_COLL_ALLGATHER:
        *mask_p = 1ull << (i / c), *origin_p = i % c;
        return c && i < (size_t)v->n * c;
    case COLL_COLL_REDUCE_SCATTER:
        *mask_p = all, *origin_p = (size_t)r * c + i;
        return i < c;
    case COLL_COLL_ALLTOALL:
        *mask_p = 1ull << (i / c), *origin_p = (size_t)r * c + i % c;
        return c && i < (size_t)v->n * c;
    case COLL_COLL_GATHER:
        *mask_p = 1ull << (i / c), *origin_p = i % c;
        return r == a->root && c && i < (size_t)v->n * c;
    case COLL_COLL_SCATTER:
        *mask_p = 1ull << a->root, *origin_p = (size_t)r * c + i;
        return i < c;
    default:
        return false;
    }
}

/* Check every rank's RECV against the collective's promise; writes a sentence into msg. */
static bool data_check(const struct data *d, const struct viz *v, char *msg, size_t len)
{
    for (int32_t r = 0; r < v->n; r++) {
        const struct segs *s = &d->buf[r][COLL_BUF_RECV];
        for (size_t k = 0; k < s->n; k++) {
            const struct seg *x = &s->a[k];
            for (size_t i = x->off; i < x->off + x->len; i++) {
                uint64_t m;
                size_t o;
                if (!expected(v, r, i, &m, &o))
                    continue;
                if ((x->flags & (SEG_EMPTY | SEG_DUP | SEG_MIXED)) || x->mask != m ||
                    x->origin + (i - x->off) != o) {
                    snprintf(msg, len,
                             "WRONG: rank %d element %zu of its receive buffer is not what %s "
                             "promises",
                             r, i, coll__coll_name(v->args.coll));
                    return false;
                }
            }
        }
    }
    snprintf(msg, len, "every rank holds what %s promises", coll__coll_name(v->args.coll));
    return true;
}

/* "1+2+3", runs of three or more as "1..8"; ranks print as their values r+1. */
static void mask_text(uint64_t mask, char *buf, size_t len)
{
    size_t used = 0;
    int r = 0;

    buf[0] = 0;
    while (r < 64) {
        int e = r;
        if (!(mask >> r & 1)) {
            r++;
            continue;
        }
        while (e + 1 < 64 && (mask >> (e + 1) & 1))
            e++;
        if (e - r >= 4)
            used += (size_t)snprintf(buf + used, used < len ? len - used : 0, "%s%d..%d",
                                     used ? "+" : "", r + 1, e + 1);
        else
            for (int q = r; q <= e; q++)
                used += (size_t)snprintf(buf + used, used < len ? len - used : 0, "%s%d",
                                         used ? "+" : "", q + 1);
        r = e + 1;
    }
}

static uint64_t mask_value(uint64_t mask)
{
    uint64_t v = 0;
    for (int r = 0; r < 64; r++)
        if (mask >> r & 1)
            v += (uint64_t)r + 1;
    return v;
}

/* One cell: what [off, off + count) of a buffer holds, in at most w characters. */
static void cell_text(const struct segs *s, size_t off, size_t count, int w, char *buf,
                      size_t len)
{
    const struct seg *first = NULL;
    bool uniform = true;
    char t[512];

    for (size_t i = 0; i < s->n; i++) {
        const struct seg *x = &s->a[i];
        if (x->off + x->len <= off || x->off >= off + count)
            continue;
        if (!first)
            first = x;
        else if (x->mask != first->mask || (x->flags & SEG_EMPTY) != (first->flags & SEG_EMPTY))
            uniform = false;
    }
    if (!first || (first->flags & SEG_EMPTY && uniform)) {
        snprintf(buf, len, ".");
        return;
    }
    if (!uniform) {
        snprintf(buf, len, "~");
        return;
    }
    mask_text(first->mask, t, sizeof(t));
    if ((int)strlen(t) > w - 1)
        snprintf(t, sizeof(t), "=%" PRIu64, mask_value(first->mask));
    snprintf(buf, len, "%s%s", t,
             first->flags & SEG_DUP ? "!" : first->flags & SEG_MIXED ? "?" : "");
}

/* ---- 5 terminal output ------------------------------------------------------------------ */

static const char *buf_name(uint8_t b)
{
    static const char *names[] = {"SEND", "RECV", "SCRATCH"};
    return b < COLL_NUM_BUFS ? names[b] : "?";
}

static void human_bytes(double b, char *buf, size_t len)
{
    if (b >= 1 << 30)
        snprintf(buf, len, "%.3g GiB", b / (1 << 30));
    else if (b >= 1 << 20)
        snprintf(buf, len, "%.3g MiB", b / (1 << 20));
    else if (b >= 1 << 10)
        snprintf(buf, len, "%.3g KiB", b / (1 << 10));
    else
        snprintf(buf, len, "%.0f B", b);
}

static void human_time(double s, char *buf, size_t len)
{
    if (s >= 1)
        snprintf(buf, len, "%.3g s", s);
    else if (s >= 1e-3)
        snprintf(buf, len, "%.3g ms", s * 1e3);
    else
        snprintf(buf, len, "%.3g us", s * 1e6);
}

/* The blocks of RECV: cut wherever any step's slice of RECV starts or ends. */
struct blocks {
    size_t *cut; /* cut[0] = 0 < ... < cut[n] = RECV's size */
    size_t n;
};

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static bool blocks_find(struct blocks *bl, const struct viz *v)
{
    size_t cap = 2, n = 0, maxc = 0;
    size_t *c;

    for (int32_t r = 0; r < v->n; r++) {
        cap += 6 * (size_t)v->s[r].nsteps;
        if (v->s[r].buf_count[COLL_BUF_RECV] > maxc)
            maxc = v->s[r].buf_count[COLL_BUF_RECV];
    }
    c = malloc(cap * sizeof(*c));
    if (!c)
        return false;
    c[n++] = 0;
    c[n++] = maxc;
    for (int32_t r = 0; r < v->n; r++)
        for (uint32_t i = 0; i < v->s[r].nsteps; i++) {
            const struct coll_step *p = &v->s[r].steps[i];
            const struct coll_slice *sl[3] = {&p->src, &p->src2, &p->dst};
            for (int k = 0; k < 3; k++)
                if (sl[k]->buf == COLL_BUF_RECV && sl[k]->count) {
                    c[n++] = sl[k]->off;
                    c[n++] = sl[k]->off + sl[k]->count;
                }
        }
    qsort(c, n, sizeof(*c), cmp_size);
    bl->n = 0;
    for (size_t i = 1; i < n; i++)
        if (c[i] != c[bl->n])
            c[++bl->n] = c[i];
    bl->cut = c;
    return true;
}

/* A COLL_TRACE run of one op (section 7b). */
struct measured {
    uint64_t seq;
    double *t0, *t1; /* per global step: us from the op's first start on any rank; NAN absent */
    double total;    /* us: first start to last end, over all ranks */
    size_t flows_s, flows_f;
    bool multi_host;
    char status[40];
};

struct render {
    const struct opts *o;
    struct viz *v;
    struct data *d; /* NULL: no data table */
    struct blocks bl;
    int cellw;      /* characters per cell */
    size_t shown;   /* blocks that fit */
    uint32_t *order; /* global steps sorted by round */
    uint32_t *round_start; /* nrounds + 1 */
    double *round_cost;    /* per round, lockstep estimate; NULL without the cost model */
    double predicted;      /* coll__cost_predict; < 0 unknown */
    char params[200];      /* the parameters the prices use, as text; "" without */
    char choice[400];      /* the selector's pick and the flat path's price; "" without */
    bool wrong;            /* the data check failed */
    const struct measured *m; /* a COLL_TRACE run's times, or NULL */
};

static void print_table(const struct render *rd, FILE *f)
{
    char cell[64];

    fprintf(f, "       ");
    for (size_t b = 0; b < rd->shown; b++) {
        snprintf(cell, sizeof(cell), "b%zu", b);
        fprintf(f, b + 1 < rd->shown || rd->shown < rd->bl.n ? " %-*s" : " %.*s", rd->cellw,
                cell);
    }
    if (rd->shown < rd->bl.n)
        fprintf(f, " (+%zu blocks)", rd->bl.n - rd->shown);
    fprintf(f, "\n");
    for (int32_t r = 0; r < rd->v->n; r++) {
        fprintf(f, "    r%-2d", r);
        for (size_t b = 0; b < rd->shown; b++) {
            size_t lo = rd->bl.cut[b], hi = rd->bl.cut[b + 1];
            if (lo >= rd->v->s[r].buf_count[COLL_BUF_RECV])
                snprintf(cell, sizeof(cell), "-");
            else
                cell_text(&rd->d->buf[r][COLL_BUF_RECV], lo, hi - lo, rd->cellw, cell,
                          sizeof(cell));
            if (b + 1 < rd->shown)
                fprintf(f, " %-*s", rd->cellw, cell);
            else
                fprintf(f, " %s", cell); /* no trailing blanks */
        }
        fprintf(f, "\n");
    }
}

static void slice_text(const struct coll_slice *s, char *buf, size_t len)
{
    snprintf(buf, len, "%s[%zu,%zu)", buf_name(s->buf), s->off, s->off + s->count);
}

/* Order steps by round, sends first within a round (they read what the round starts with),
 * then by rank and index (dependencies point backwards, so index order is safe). */
static bool order_steps(struct render *rd)
{
    struct viz *v = rd->v;
    uint32_t *fill;

    rd->order = malloc(((size_t)v->total + 1) * sizeof(*rd->order));
    rd->round_start = calloc((size_t)v->nrounds * 2 + 2, sizeof(*rd->round_start));
    fill = calloc((size_t)v->nrounds * 2 + 1, sizeof(*fill));
    if (!rd->order || !rd->round_start || !fill) {
        free(fill);
        return false;
    }
    /* bucket 2k: sends of round k; 2k + 1: the rest of round k */
    for (uint32_t g = 0; g < v->total; g++)
        rd->round_start[2 * v->round[g] + (step_of(v, g)->kind != COLL_STEP_SEND) + 1]++;
    for (uint32_t k = 0; k < 2 * v->nrounds; k++)
        rd->round_start[k + 1] += rd->round_start[k];
    for (uint32_t g = 0; g < v->total; g++) {
        uint32_t k = 2 * v->round[g] + (step_of(v, g)->kind != COLL_STEP_SEND);
        rd->order[rd->round_start[k] + fill[k]++] = g;
    }
    free(fill);
    return true;
}

struct round_sum {
    uint32_t msgs, reduces, copies;
    double bytes;
};

static struct round_sum round_summary(const struct render *rd, uint32_t k)
{
    struct round_sum rs = {0};
    for (uint32_t i = rd->round_start[2 * k]; i < rd->round_start[2 * k + 2]; i++) {
        const struct coll_step *p = step_of(rd->v, rd->order[i]);
        if (p->kind == COLL_STEP_SEND) {
            rs.msgs++;
            rs.bytes += (double)p->src.count * (double)rd->v->args.elem_size;
        }
        rs.reduces += p->kind == COLL_STEP_REDUCE;
        rs.copies += p->kind == COLL_STEP_COPY;
    }
    return rs;
}

/* Apply round k's steps to the data (sends first: they read the round's starting state). */
static bool apply_round(struct render *rd, uint32_t k)
{
    if (!rd->d)
        return true;
    for (uint32_t i = rd->round_start[2 * k]; i < rd->round_start[2 * k + 2]; i++)
        if (!data_step(rd->d, rd->v, rd->order[i]))
            return false;
    return true;
}

static void print_header(const struct render *rd, FILE *f)
{
    const struct viz *v = rd->v;
    const struct coll_algo_args *a = &v->args;
    char b1[32], b2[32];

    human_bytes((double)a->count * (double)a->elem_size, b1, sizeof(b1));
    human_bytes((double)a->chunk_count * (double)a->elem_size, b2, sizeof(b2));
    fprintf(f, "%s with %s: %s\n", coll__coll_name(a->coll), v->algo_name, v->algo_desc);
    fprintf(f, "  %d ranks, count %zu x %s (%s), chunk %zu elements (%s)", v->n, a->count,
            coll__dtype_name(a->dtype), b1, a->chunk_count, b2);
    if (a->coll == COLL_COLL_BROADCAST || a->coll == COLL_COLL_REDUCE ||
        a->coll == COLL_COLL_GATHER || a->coll == COLL_COLL_SCATTER)
        fprintf(f, ", root %d", a->root);
    fprintf(f, "\n  %u steps over all ranks, %u rounds with messages\n", v->total,
            v->nrounds ? v->nrounds - 1 : 0);
    if (rd->d) {
        fprintf(f, "  data: rank r starts with the value r+1 in every element; a cell shows which\n"
                   "  values a block of the receive buffer holds summed ('1+2' = ranks 0 and 1,\n"
                   "  '1..5' = ranks 0 to 4, '=36' the sum when long, '.' not written yet)\n");
        int col = fprintf(f, "  blocks (elements):");
        for (size_t b = 0; b < rd->bl.n; b++) {
            char t[96];
            int len;
            if (b == 16 && rd->bl.n > 17) { /* the first ones show the pattern */
                snprintf(t, sizeof(t), " ... b%zu [%zu,%zu)", rd->bl.n - 1,
                         rd->bl.cut[rd->bl.n - 1], rd->bl.cut[rd->bl.n]);
                b = rd->bl.n;
            } else {
                snprintf(t, sizeof(t), " b%zu [%zu,%zu)", b, rd->bl.cut[b], rd->bl.cut[b + 1]);
            }
            len = (int)strlen(t);
            if (col + len > rd->o->width) /* wrap at --width */
                col = fprintf(f, "\n                   ");
            col += fprintf(f, "%s", t);
        }
        fprintf(f, "\n");
    }
}

static void print_rounds(struct render *rd, FILE *f)
{
    struct viz *v = rd->v;
    uint32_t printed = 0, max = rd->o->max_rounds ? (uint32_t)rd->o->max_rounds : UINT32_MAX;
    const uint32_t max_msgs = 32;
    double sum = 0;
    char t1[32], t2[32], s1[48], s2[48], carried[512];

    for (uint32_t k = 0; k < v->nrounds; k++) {
        struct round_sum rs = round_summary(rd, k);
        uint32_t nmsg = 0;
        bool show = printed < max;

        if (rs.msgs + rs.reduces + rs.copies == 0)
            continue;
        if (rd->round_cost)
            sum += rd->round_cost[k];
        if (show) {
            human_bytes(rs.bytes, t1, sizeof(t1));
            if (k == 0)
                fprintf(f, "\nround 0: local steps before any message");
            else
                fprintf(f, "\nround %u: %u message%s, %s", k, rs.msgs, rs.msgs == 1 ? "" : "s",
                        t1);
            if (rs.reduces || rs.copies)
                fprintf(f, "; %u reduce, %u copy", rs.reduces, rs.copies);
            if (rd->round_cost) {
                human_time(rd->round_cost[k], t1, sizeof(t1));
                human_time(sum, t2, sizeof(t2));
                fprintf(f, "; cost %s (total %s)", t1, t2);
            }
            fprintf(f, "\n");
        }
        /* messages are printed before the round is applied: what they carry is read then */
        for (uint32_t i = rd->round_start[2 * k]; show && i < rd->round_start[2 * k + 1]; i++) {
            uint32_t g = rd->order[i];
            const struct coll_step *p = step_of(v, g);
            const struct coll_step *q = step_of(v, v->match[g]);
            if (++nmsg > max_msgs)
                continue;
            slice_text(&p->src, s1, sizeof(s1));
            slice_text(&q->dst, s2, sizeof(s2));
            fprintf(f, "  r%-2d -> r%-2d %-20s -> %-20s", rank_of(v, g), p->peer, s1, s2);
            if (rd->d) {
                cell_text(&rd->d->buf[rank_of(v, g)][p->src.buf], p->src.off, p->src.count,
                          rd->o->width - 68 > 8 ? rd->o->width - 68 : 8, carried,
                          sizeof(carried));
                fprintf(f, " carries %s", carried);
            }
            fprintf(f, "\n");
        }
        if (show && nmsg > max_msgs)
            fprintf(f, "  ... and %u more messages\n", nmsg - max_msgs);
        if (!apply_round(rd, k)) {
            fprintf(stderr, "collviz: out of memory\n");
            return;
        }
        if (show && rd->d) {
            fprintf(f, "  receive buffers after round %u:\n", k);
            print_table(rd, f);
        }
        printed++;
    }
    if (printed > max)
        fprintf(f, "\n... %u more rounds not shown (--rounds 0 shows all)\n", printed - max);
    if (rd->d) {
        char msg[160];
        rd->wrong = !data_check(rd->d, v, msg, sizeof(msg));
        fprintf(f, "\nresult: %s\n", msg);
    }
    if (rd->round_cost) {
        human_time(sum, t1, sizeof(t1));
        fprintf(f, "time: %s round by round (each round waits for its slowest rank)\n", t1);
        if (rd->predicted >= 0) {
            human_time(rd->predicted, t2, sizeof(t2));
            fprintf(f, "      %s simulated with rounds overlapping (the cost model's "
                       "simulation)",
                    t2);
        }
        fprintf(f, "\n");
        if (rd->params[0])
            fprintf(f, "      %s\n", rd->params);
        if (rd->choice[0])
            fprintf(f, "%s", rd->choice);
    }
}

/* ---- 6 HTML ----------------------------------------------------------------------------- */

static void json_table(const struct render *rd, FILE *f)
{
    char cell[64];

    fprintf(f, "[");
    for (int32_t r = 0; r < rd->v->n; r++) {
        fprintf(f, "%s[", r ? "," : "");
        for (size_t b = 0; b < rd->shown; b++) {
            size_t lo = rd->bl.cut[b], hi = rd->bl.cut[b + 1];
            if (lo >= rd->v->s[r].buf_count[COLL_BUF_RECV])
                snprintf(cell, sizeof(cell), "-");
            else
                cell_text(&rd->d->buf[r][COLL_BUF_RECV], lo, hi - lo, 14, cell, sizeof(cell));
            fprintf(f, "%s", b ? "," : "");
            coll__json_str(f, cell);
        }
        fprintf(f, "]");
    }
    fprintf(f, "]");
}

/* D.timeline: per rank, bars on a time axis, the round each belongs to (as an index into
 * D.rounds) so the page can light up the current round in both. pred: one bar per rank and
 * round, at the cost model's lockstep times; meas: one bar per step, at the times the trace
 * recorded, with the index of a send's matching receive. Times in microseconds. */
static void json_timeline(const struct render *rd, FILE *f)
{
    const struct viz *v = rd->v;
    const struct measured *m = rd->m;
    const uint32_t max_items = 20000;
    uint32_t *j_of = calloc((size_t)v->nrounds + 1, sizeof(*j_of));
    uint32_t *item_of = m ? malloc(((size_t)v->total + 1) * sizeof(*item_of)) : NULL;
    uint32_t j = 0, nitems = 0;
    double sum = 0;

    if (!j_of || (m && !item_of) || (!rd->round_cost && !m)) {
        fprintf(f, "null");
        free(j_of);
        free(item_of);
        return;
    }
    for (uint32_t k = 0; k < v->nrounds; k++) {
        struct round_sum rs = round_summary(rd, k);
        j_of[k] = rs.msgs + rs.reduces + rs.copies ? j++ : UINT32_MAX;
    }
    fprintf(f, "{\"pred\":");
    if (rd->round_cost) {
        bool first = true;
        for (uint32_t k = 0; k < v->nrounds; k++)
            sum += rd->round_cost[k];
        fprintf(f, "{\"total\":%.3f,\"note\":", sum * 1e6);
        coll__json_str(f, "the cost model's rounds in lockstep");
        fprintf(f, ",\"items\":[");
        sum = 0;
        for (uint32_t k = 0; k < v->nrounds; k++) {
            for (int32_t r = 0; r < v->n && j_of[k] != UINT32_MAX; r++) {
                int kind = -1;
                for (uint32_t i = rd->round_start[2 * k]; i < rd->round_start[2 * k + 2]; i++) {
                    uint32_t g = rd->order[i];
                    const struct coll_step *p = step_of(v, g);
                    if (p->kind == COLL_STEP_SEND && (rank_of(v, g) == r || p->peer == r))
                        kind = 0;
                    else if (rank_of(v, g) == r && kind < 0)
                        kind = 2;
                }
                if (kind < 0 || nitems >= max_items)
                    continue;
                fprintf(f, "%s[%d,%d,%.3f,%.3f,%u,-1]", first ? "" : ",", r, kind, sum * 1e6,
                        (sum + rd->round_cost[k]) * 1e6, j_of[k]);
                first = false;
                nitems++;
            }
            sum += rd->round_cost[k];
        }
        fprintf(f, "]}");
    } else {
        fprintf(f, "null");
    }
    fprintf(f, ",\"meas\":");
    if (m) {
        bool first = true;
        char note[96];
        snprintf(note, sizeof(note), "op #%" PRIu64 " of the trace, %s", m->seq, m->status);
        fprintf(f, "{\"total\":%.3f,\"note\":", m->total);
        coll__json_str(f, note);
        nitems = 0;
        for (uint32_t g = 0; g < v->total; g++)
            item_of[g] = !isnan(m->t0[g]) && nitems < max_items ? nitems++ : UINT32_MAX;
        fprintf(f, ",\"items\":[");
        for (uint32_t g = 0; g < v->total; g++) {
            const struct coll_step *p = step_of(v, g);
            long peer_item = -1;
            if (item_of[g] == UINT32_MAX)
                continue;
            if (p->kind == COLL_STEP_SEND && item_of[v->match[g]] != UINT32_MAX)
                peer_item = item_of[v->match[g]];
            fprintf(f, "%s[%d,%u,%.3f,%.3f,%d,%ld]", first ? "" : ",", rank_of(v, g), p->kind,
                    m->t0[g], m->t1[g],
                    j_of[v->round[g]] == UINT32_MAX ? -1 : (int)j_of[v->round[g]], peer_item);
            first = false;
        }
        fprintf(f, "]}");
    } else {
        fprintf(f, "null");
    }
    fprintf(f, "}");
    free(j_of);
    free(item_of);
}

/* The page: collviz_html.h's template with the schedule as JSON where it says so. Rounds
 * are re-applied from scratch (the data was consumed by the terminal pass). */
static int write_html(struct render *rd, const char *path)
{
    struct viz *v = rd->v;
    const char *mark = "/*COLLVIZ_DATA*/";
    const char *at = strstr(collviz_html_template, mark);
    const uint32_t max_msgs = 512;
    char buf[256], s1[48], s2[48];
    double sum = 0;
    bool first = true;
    FILE *f = fopen(path, "w");

    if (!f || !at) {
        fprintf(stderr, "collviz: cannot write '%s': %s\n", path, strerror(errno));
        if (f)
            fclose(f);
        return 1;
    }
    fwrite(collviz_html_template, 1, (size_t)(at - collviz_html_template), f);
    fprintf(f, "{\"coll\":");
    coll__json_str(f, coll__coll_name(v->args.coll));
    fprintf(f, ",\"algo\":");
    coll__json_str(f, v->algo_name);
    fprintf(f, ",\"desc\":");
    coll__json_str(f, v->algo_desc);
    human_bytes((double)v->args.count * (double)v->args.elem_size, buf, sizeof(buf));
    fprintf(f, ",\"n\":%d,\"count\":%zu,\"dtype\":", v->n, v->args.count);
    coll__json_str(f, coll__dtype_name(v->args.dtype));
    fprintf(f, ",\"size\":");
    coll__json_str(f, buf);
    fprintf(f, ",\"root\":%d,\"blocks\":[", v->args.root);
    for (size_t b = 0; rd->d && b < rd->shown; b++)
        fprintf(f, "%s[%zu,%zu]", b ? "," : "", rd->bl.cut[b], rd->bl.cut[b + 1]);
    fprintf(f, "],\"moreBlocks\":%zu,\"initial\":", rd->d ? rd->bl.n - rd->shown : 0);
    if (rd->d)
        json_table(rd, f);
    else
        fprintf(f, "null");
    fprintf(f, ",\"rounds\":[");
    for (uint32_t k = 0; k < v->nrounds; k++) {
        struct round_sum rs = round_summary(rd, k);
        uint32_t nmsg = 0;

        if (rs.msgs + rs.reduces + rs.copies == 0)
            continue;
        fprintf(f, "%s{\"k\":%u,\"msgs\":[", first ? "" : ",\n", k);
        first = false;
        for (uint32_t i = rd->round_start[2 * k]; i < rd->round_start[2 * k + 1]; i++) {
            uint32_t g = rd->order[i];
            const struct coll_step *p = step_of(v, g);
            const struct coll_step *q = step_of(v, v->match[g]);
            char carried[64] = "";
            if (++nmsg > max_msgs)
                continue;
            slice_text(&p->src, s1, sizeof(s1));
            slice_text(&q->dst, s2, sizeof(s2));
            if (rd->d)
                cell_text(&rd->d->buf[rank_of(v, g)][p->src.buf], p->src.off, p->src.count, 20,
                          carried, sizeof(carried));
            snprintf(buf, sizeof(buf), "%s -> %s%s%s", s1, s2, rd->d ? "  carries " : "", carried);
            fprintf(f, "%s[%d,%d,", nmsg > 1 ? "," : "", rank_of(v, g), p->peer);
            coll__json_str(f, buf);
            fprintf(f, "]");
        }
        human_bytes(rs.bytes, s1, sizeof(s1));
        snprintf(buf, sizeof(buf), "%u message%s, %s; %u reduce, %u copy", rs.msgs,
                 rs.msgs == 1 ? "" : "s", s1, rs.reduces, rs.copies);
        if (rd->round_cost) {
            sum += rd->round_cost[k];
            human_time(rd->round_cost[k], s1, sizeof(s1));
            human_time(sum, s2, sizeof(s2));
            snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "; cost %s (total %s)", s1,
                     s2);
        }
        fprintf(f, "],\"more\":%u,\"info\":", nmsg > max_msgs ? nmsg - max_msgs : 0);
        coll__json_str(f, buf);
        if (!apply_round(rd, k)) {
            fclose(f);
            fprintf(stderr, "collviz: out of memory\n");
            return 1;
        }
        fprintf(f, ",\"holds\":");
        if (rd->d)
            json_table(rd, f);
        else
            fprintf(f, "null");
        fprintf(f, "}");
    }
    fprintf(f, "],\"result\":");
    if (rd->d) {
        data_check(rd->d, v, buf, sizeof(buf));
        coll__json_str(f, buf);
    } else {
        coll__json_str(f, "");
    }
    fprintf(f, ",\"timeline\":");
    json_timeline(rd, f);
    fprintf(f, "}");
    at += strlen(mark);
    fputs(at, f);
    if (fclose(f) != 0) {
        fprintf(stderr, "collviz: cannot write '%s': %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

/* ---- 7 prices and --compare ------------------------------------------------------------- */

#if COLLVIZ_HAVE_COST
/* Lockstep price of each round: the busiest rank's port (alpha + bytes beta per message it
 * sends or receives in the round) plus its reductions and copies. Link: --link for every
 * pair (TCP, the cost model's default). This is the teaching view of the rounds; the time
 * of the whole schedule is the cost model's own (coll__cost_predict). */
static bool price_rounds(struct render *rd, const struct coll_cost_params *cp)
{
    struct viz *v = rd->v;
    const struct coll_link_cost *lc = &cp->link[rd->o->link];
    double *port = calloc((size_t)v->n * 3, sizeof(*port));
    const double es = (double)v->args.elem_size;

    rd->round_cost = calloc((size_t)v->nrounds + 1, sizeof(*rd->round_cost));
    if (!port || !rd->round_cost) {
        free(port);
        return false;
    }
    for (uint32_t k = 0; k < v->nrounds; k++) {
        double worst = 0;
        memset(port, 0, (size_t)v->n * 3 * sizeof(*port));
        for (uint32_t i = rd->round_start[2 * k]; i < rd->round_start[2 * k + 2]; i++) {
            uint32_t g = rd->order[i];
            int32_t r = rank_of(v, g);
            const struct coll_step *p = step_of(v, g);
            switch (p->kind) {
            case COLL_STEP_SEND:
                port[3 * r] += lc->alpha + (double)p->src.count * es * lc->beta;
                port[3 * p->peer + 1] += lc->alpha + (double)p->src.count * es * lc->beta;
                break;
            case COLL_STEP_REDUCE:
                port[3 * r + 2] += (double)p->dst.count * es * cp->gamma[v->args.dtype];
                break;
            case COLL_STEP_COPY:
                port[3 * r + 2] += (double)p->dst.count * es * cp->copy;
                break;
            default:
                break;
            }
        }
        for (int32_t r = 0; r < v->n; r++) {
            double t = (port[3 * r] > port[3 * r + 1] ? port[3 * r] : port[3 * r + 1]) +
                       port[3 * r + 2];
            if (t > worst)
                worst = t;
        }
        rd->round_cost[k] = worst;
    }
    free(port);
    return true;
}

/* The parameters behind the prices, so that a reader can redo the arithmetic: the link's
 * alpha and beta (every message is priced on it), the reduction's gamma for the dtype, and
 * the executor's time per step. */
static void params_text(const struct coll_cost_params *cp, enum coll_link link, coll_dtype_t dt,
                        bool calibrated, char *buf, size_t n)
{
    const struct coll_link_cost *lc = &cp->link[link];
    double g = cp->gamma[dt];

    snprintf(buf, n,
             "%s: alpha %.3g us, beta %.3g ns/B (%.3g GB/s), gamma %.3g ns/B (%s; %.3g GB/s), "
             "%.3g us per step",
             calibrated ? "calibrated" : "default parameters", lc->alpha * 1e6, lc->beta * 1e9,
             lc->beta > 0 ? 1e-9 / lc->beta : 0.0, g * 1e9, coll__dtype_name(dt),
             g > 0 ? 1e-9 / g : 0.0, cp->step * 1e6);
}

static int load_params(const struct opts *o, struct coll_cost_params *cp)
{
    coll__cost_params_default(cp);
    if (o->cost_file && coll__cost_params_load(cp, o->cost_file) != COLL_SUCCESS) {
        fprintf(stderr, "collviz: %s\n", last_error());
        return EXIT_USAGE;
    }
    cp->cores = o->cores;
    return 0;
}

/* The query the selector prices for a call of bytes (src/path/select.c): its chunk sizes
 * (COLL_COST_SELECT_CHUNKS), or --chunk alone as COLL_CHUNK_BYTES makes it. */
static struct coll_cost_query query_of(const struct opts *o, size_t bytes, size_t *chunk_p)
{
    static const size_t chunks[] = COLL_COST_SELECT_CHUNKS;
    const size_t es = coll__dtype_size(o->dtype);
    struct coll_cost_query q = {.coll = o->coll, .nranks = o->n, .root = o->root,
                                .count = o->coll == COLL_COLL_BARRIER ? 0 : bytes / es,
                                .dtype = o->dtype, .chunk_bytes = chunks,
                                .nchunk_bytes = sizeof(chunks) / sizeof(chunks[0])};

    if (o->chunk_given) {
        *chunk_p = o->chunk_bytes;
        q.chunk_bytes = chunk_p;
        q.nchunk_bytes = 1;
    }
    return q;
}

/* Predicted time of a call of bytes by `name`: an algorithm at its best chunk as the
 * selector prices it, "flat" the flat path's row (one host over shared memory, the
 * default COLL_SHM_FLAT_BYTES and COLL_SHM_SLICED_BYTES), "best" the selector's pick;
 * *pick_p (may be NULL) names what was priced. < 0 when it cannot run the call. */
static double predict(const struct coll_cost_params *cp, const char *name, const struct opts *o,
                      size_t bytes, const char **pick_p)
{
    struct coll_cost_links links = coll__cost_links_all((enum coll_link)o->link);
    size_t chunk;
    struct coll_cost_query q = query_of(o, bytes, &chunk);
    struct coll_cost_result res[48];
    size_t nres = 0;
    double t;

    if (pick_p)
        *pick_p = name;
    if (!strcmp(name, "flat"))
        return coll__cost_predict_flat(cp, o->coll, bytes, o->n, NULL, &t) == COLL_SUCCESS ? t
                                                                                          : -1;
    if (!strcmp(name, "best")) {
        if (o->n < 2 || coll__cost_rank_algos(cp, &links, &q, res, 48, &nres) != COLL_SUCCESS ||
            nres == 0)
            return -1;
        if (pick_p)
            *pick_p = res[0].algo->name;
        return res[0].seconds;
    }
    if (coll__cost_rank_algo(cp, &links, coll__algo_find(name), &q, res) != COLL_SUCCESS)
        return -1;
    return res[0].seconds;
}

/* Below a drawing: what the selector would pick for this call and at what price, and the
 * flat path's price where its row covers the call. */
static void choice_text(const struct coll_cost_params *cp, const struct opts *o, size_t bytes,
                        char *buf, size_t n)
{
    const char *pick = NULL;
    double best = predict(cp, "best", o, bytes, &pick), flat = predict(cp, "flat", o, bytes, NULL);
    char t1[32], t2[32];
    size_t len = 0;

    buf[0] = '\0';
    if (best >= 0) {
        human_time(best, t1, sizeof(t1));
        len += (size_t)snprintf(buf + len, n - len,
                                "      the selector's pick for this call: %s, %s\n", pick, t1);
    }
    if (flat >= 0 && len < n) {
        human_time(flat, t2, sizeof(t2));
        snprintf(buf + len, n - len,
                 "      the flat path (one host over shared memory; --link shm to compare): %s\n",
                 t2);
    }
}

static int run_compare(const struct opts *o)
{
    char names[2][64], tmp[200];
    struct coll_cost_params cp;
    size_t lo = o->bytes, hi = o->bytes_hi ? o->bytes_hi : o->bytes;
    const size_t es = coll__dtype_size(o->dtype);
    int sign_prev = 0, rc;
    size_t prev_b = 0;
    FILE *dat = NULL;
    char datpath[4096];
    const char *comma = strchr(o->compare, ',');

    if (!comma || strchr(comma + 1, ',') || comma == o->compare || !comma[1] ||
        (size_t)(comma - o->compare) >= sizeof(names[0]) || strlen(comma + 1) >= sizeof(names[1]))
        return usage_error("--compare takes two algorithms, as in --compare ring,tree");
    memcpy(names[0], o->compare, (size_t)(comma - o->compare));
    names[0][comma - o->compare] = 0;
    snprintf(names[1], sizeof(names[1]), "%s", comma + 1);
    for (int i = 0; i < 2; i++) {
        if (!strcmp(names[i], "flat") || !strcmp(names[i], "best"))
            continue;
        const struct coll_algo *alg = coll__algo_find(names[i]);
        if (!alg || !(alg->colls & (1u << o->coll))) {
            fprintf(stderr, "collviz: unknown algorithm '%s' for %s\n", names[i],
                    coll__coll_name(o->coll));
            list_algos(stderr, o->coll);
            return EXIT_USAGE;
        }
    }
    if (lo < es)
        lo = es;
    if (hi < lo)
        return usage_error("--bytes %zu:%zu is an empty range", lo, hi);
    rc = load_params(o, &cp);
    if (rc)
        return rc;
    if (o->plot) {
        snprintf(datpath, sizeof(datpath), "%s.dat", o->plot);
        dat = fopen(datpath, "w");
        if (!dat) {
            fprintf(stderr, "collviz: cannot write '%s': %s\n", datpath, strerror(errno));
            return 1;
        }
    }
    printf("%s on %d ranks, %s, predicted by the cost model (%s link%s",
           coll__coll_name(o->coll), o->n, coll__dtype_name(o->dtype),
           o->link == COLL_LINK_TCP ? "TCP" : coll__link_name((enum coll_link)o->link),
           o->cost_file ? ", calibrated" : ", default parameters");
    if (o->cores)
        printf(", %d cores", o->cores);
    printf(")\n");
    params_text(&cp, (enum coll_link)o->link, o->dtype, o->cost_file != NULL, tmp, sizeof(tmp));
    printf("  %s\n", tmp);
    printf("%12s %14s %14s  faster\n", "bytes", names[0], names[1]);
    for (size_t b = lo;; b = b > hi / 2 ? hi : b * 2) {
        size_t bb = b / es * es;
        double t0 = predict(&cp, names[0], o, bb, NULL), t1 = predict(&cp, names[1], o, bb, NULL);
        char c0[32] = "-", c1[32] = "-";
        int sign = t0 < 0 || t1 < 0 ? 0 : t0 < t1 ? -1 : t0 > t1 ? 1 : 0;

        if (t0 >= 0)
            human_time(t0, c0, sizeof(c0));
        if (t1 >= 0)
            human_time(t1, c1, sizeof(c1));
        human_bytes((double)bb, tmp, sizeof(tmp));
        printf("%12s %14s %14s  %s\n", tmp, c0, c1,
               sign < 0 ? names[0] : sign > 0 ? names[1] : "-");
        if (dat)
            fprintf(dat, "%zu %.9g %.9g\n", bb, t0 >= 0 ? t0 : NAN, t1 >= 0 ? t1 : NAN);
        if (sign && sign_prev && sign != sign_prev) {
            /* bisect between the two sizes, in whole elements */
            size_t l = prev_b / es, h = bb / es;
            while (h - l > 1 && h - l > l / 100) {
                size_t m = l + (h - l) / 2;
                double m0 = predict(&cp, names[0], o, m * es, NULL);
                double m1 = predict(&cp, names[1], o, m * es, NULL);
                int s = m0 < m1 ? -1 : m0 > m1 ? 1 : 0;
                if (s == sign_prev || s == 0)
                    l = m;
                else
                    h = m;
            }
            human_bytes((double)(h * es), tmp, sizeof(tmp));
            printf("%12s crossover: %s is faster from about %s (%zu bytes)\n", "", 
                   sign < 0 ? names[0] : names[1], tmp, h * es);
        }
        if (sign)
            sign_prev = sign, prev_b = bb;
        if (b >= hi)
            break;
    }
    if (dat) {
        char cmd[16384];
        FILE *gp;
        fclose(dat);
        snprintf(cmd, sizeof(cmd), "gnuplot");
        gp = popen(cmd, "w");
        if (!gp) {
            fprintf(stderr, "collviz: cannot run gnuplot: %s\n", strerror(errno));
            return 1;
        }
        fprintf(gp,
                "set terminal pngcairo size 900,560\nset output '%s'\n"
                "set logscale xy\nset xlabel 'bytes'\nset ylabel 'predicted seconds'\n"
                "set title '%s, %d ranks: %s vs %s'\nset key left top\nset grid\n"
                "plot '%s' using 1:2 with linespoints title '%s', "
                "'%s' using 1:3 with linespoints title '%s'\n",
                o->plot, coll__coll_name(o->coll), o->n, names[0], names[1], datpath, names[0],
                datpath, names[1]);
        if (pclose(gp) != 0) {
            fprintf(stderr, "collviz: gnuplot failed (is it installed, with pngcairo?)\n");
            return 1;
        }
        printf("plot: %s (data %s)\n", o->plot, datpath);
    }
    return 0;
}
#endif /* COLLVIZ_HAVE_COST */

/* ---- trace files ------------------------------------------------------------------------ */

/* A coll trace: the schedules of every rank as text, one step a line.
 *   # coll-trace 1
 *   run COLL ALGO N COUNT DTYPE ROOT CHUNK
 *   rank R STEPS
 *   KIND PEER SRC.BUF SRC.OFF SRC.COUNT SRC2.BUF ... DST.COUNT NDEPS DEP...
 */
#define TRACE_MAGIC "# coll-trace 1"

static int save_trace(const struct viz *v, const char *path)
{
    FILE *f = fopen(path, "w");
    const struct coll_algo_args *a = &v->args;

    if (!f) {
        fprintf(stderr, "collviz: cannot write '%s': %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "%s\nrun %s %s %d %zu %s %d %zu\n", TRACE_MAGIC, coll__coll_name(a->coll),
            v->algo_name, v->n, a->count, coll__dtype_name(a->dtype), a->root, a->chunk_count);
    for (int32_t r = 0; r < v->n; r++) {
        fprintf(f, "rank %d %u\n", r, v->s[r].nsteps);
        for (uint32_t i = 0; i < v->s[r].nsteps; i++) {
            const struct coll_step *p = &v->s[r].steps[i];
            fprintf(f, "%u %d %u %zu %zu %u %zu %zu %u %zu %zu %u", p->kind, p->peer, p->src.buf,
                    p->src.off, p->src.count, p->src2.buf, p->src2.off, p->src2.count,
                    p->dst.buf, p->dst.off, p->dst.count, p->ndeps);
            for (uint32_t d = 0; d < p->ndeps && d < COLL_MAX_DEPS; d++)
                fprintf(f, " %u", p->deps[d]);
            fprintf(f, "\n");
        }
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "collviz: cannot write '%s': %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

static int parse_coll(const char *name, enum coll_coll *c_p);
static int parse_dtype(const char *name, coll_dtype_t *dt_p);

/* Fill v (args, names, schedules) from a trace; EXIT_USAGE when the file is not one. */
static int load_trace(struct viz *v, const char *path)
{
    FILE *f = fopen(path, "r");
    char line[512], coll[64], algo[64], dtype[64];
    static char algo_name[64];
    int rc = EXIT_USAGE;
    int n, root;
    size_t count, chunk;
    unsigned lineno = 2;

    if (!f) {
        fprintf(stderr, "collviz: cannot read '%s': %s\n", path, strerror(errno));
        return EXIT_USAGE;
    }
    if (!fgets(line, sizeof(line), f) || strncmp(line, TRACE_MAGIC, strlen(TRACE_MAGIC)) ||
        (line[strlen(TRACE_MAGIC)] != '\n' && line[strlen(TRACE_MAGIC)] != 0)) {
        fprintf(stderr, "collviz: '%s' is not a coll trace (line 1 must be '%s')\n", path,
                TRACE_MAGIC);
        goto out;
    }
    if (!fgets(line, sizeof(line), f) ||
        sscanf(line, "run %63s %63s %d %zu %63s %d %zu", coll, algo, &n, &count, dtype, &root,
               &chunk) != 7 ||
        parse_coll(coll, &v->args.coll) || parse_dtype(dtype, &v->args.dtype) || n < 1 ||
        n > MAX_RANKS || root < 0 || root >= n || chunk < 1)
        goto bad;
    snprintf(algo_name, sizeof(algo_name), "%s", algo);
    v->algo_name = algo_name;
    v->algo_desc = "read from a coll trace";
    v->n = n;
    v->args.nranks = n;
    v->args.root = root;
    v->args.count = count;
    v->args.elem_size = coll__dtype_size(v->args.dtype);
    v->args.chunk_count = chunk;
    v->s = calloc((size_t)n, sizeof(*v->s));
    if (!v->s)
        goto out;
    for (int r = 0; r < n; r++) {
        int rr;
        unsigned ns;
        struct coll_algo_args a = v->args;
        a.rank = r;
        coll__sched_init(&v->s[r], &a);
        lineno++;
        if (!fgets(line, sizeof(line), f) || sscanf(line, "rank %d %u", &rr, &ns) != 2 ||
            rr != r || ns > 50000000u)
            goto bad;
        for (unsigned i = 0; i < ns; i++) {
            unsigned kind, b0, b1, b2, nd, deps[COLL_MAX_DEPS] = {0};
            int peer, used;
            size_t o0, c0, o1, c1, o2, c2;
            char *q = line;
            lineno++;
            if (!fgets(line, sizeof(line), f) ||
                sscanf(line, "%u %d %u %zu %zu %u %zu %zu %u %zu %zu %u%n", &kind, &peer, &b0,
                       &o0, &c0, &b1, &o1, &c1, &b2, &o2, &c2, &nd, &used) != 12 ||
                kind > COLL_STEP_COPY || b0 >= COLL_NUM_BUFS || b1 >= COLL_NUM_BUFS ||
                b2 >= COLL_NUM_BUFS || nd > COLL_MAX_DEPS)
                goto bad;
            q += used;
            for (unsigned d = 0; d < nd; d++) {
                char *end;
                unsigned long x = strtoul(q, &end, 10);
                if (end == q || x >= i)
                    goto bad;
                deps[d] = (unsigned)x;
                q = end;
            }
            if (coll__sched_add(&v->s[r], (uint8_t)kind, peer, coll__slice((uint8_t)b0, o0, c0),
                                coll__slice((uint8_t)b1, o1, c1),
                                coll__slice((uint8_t)b2, o2, c2), nd, deps, NULL) != COLL_SUCCESS)
                goto bad;
        }
        if (coll__sched_validate(&v->s[r]) != COLL_SUCCESS) {
            fprintf(stderr, "collviz: '%s': rank %d: %s\n", path, r, last_error());
            goto out;
        }
    }
    rc = 0;
    goto out;
bad:
    fprintf(stderr, "collviz: '%s' line %u: not a coll trace line\n", path, lineno);
out:
    fclose(f);
    return rc;
}

/* ---- 7b measured traces: COLL_TRACE's Chrome trace JSON ------------------------------------ */

/* src/core/trace.c writes one file per rank (pid = rank); collviz merges them, takes one op
 * (--op SEQ, else the largest collective every rank ran, the last of those), rebuilds its schedules with the
 * builder the trace names, and pairs each step with the times the trace recorded for it. */

#define MAX_TRACE_FILES 256

struct tstep {
    int32_t rank;
    uint8_t kind;
    uint32_t part, step;
    uint64_t seq;
    double t0, t1; /* us, the rank's clock */
};

struct top {
    int32_t rank;
    uint64_t seq;
    double t0, t1;
    size_t nparts;
    int64_t count, root, chunk, nsteps;
    char status[40], coll[32], algo[32], dtype[32];
};

struct tmeta {
    bool seen;
    int64_t nranks;
    double offset_us; /* realtime - monotonic */
    char comm[40], host[80];
};

struct jtrace {
    struct tmeta meta[MAX_RANKS];
    struct tstep *steps;
    size_t nsteps, capsteps;
    struct top *ops;
    size_t nops, capops;
    size_t flows_s, flows_f;
};

static void copy_str(char *dst, size_t len, const char *src)
{
    snprintf(dst, len, "%s", src ? src : "");
}

static int trace_event(struct jtrace *jt, const struct jv *e, const char *path)
{
    const char *ph = jv_str(e, "ph"), *name = jv_str(e, "name"), *cat = jv_str(e, "cat");
    const struct jv *args = jv_get(e, "args");
    int64_t pid;
    double ts, dur;

    if (e->type != JV_OBJ || !ph)
        return fprintf(stderr, "collviz: '%s': an event is not an object with \"ph\"\n", path),
               EXIT_USAGE;
    if (!jv_int(e, "pid", 0, 1e9, &pid))
        return 0; /* another tool's event in a merged file: not ours to judge */
    if (!strcmp(ph, "M") && name && !strcmp(name, "coll_trace")) {
        struct tmeta *m;
        int64_t ver, rank, nranks;
        if (!jv_int(args, "version", 0, 1e9, &ver) || ver != 1 ||
            !jv_int(args, "rank", 0, 1e9, &rank) || !jv_int(args, "nranks", 1, 1e9, &nranks) ||
            rank != pid || rank >= nranks || !jv_str(args, "comm"))
            return fprintf(stderr, "collviz: '%s': coll_trace metadata of rank %" PRId64
                                   " is malformed (or a version this collviz does not read)\n",
                           path, pid), EXIT_USAGE;
        if (nranks > MAX_RANKS)
            return fprintf(stderr, "collviz: '%s': %" PRId64 " ranks; collviz draws at most %d\n",
                           path, nranks, MAX_RANKS), EXIT_USAGE;
        m = &jt->meta[rank];
        if (m->seen)
            return fprintf(stderr, "collviz: rank %" PRId64 " appears twice (again in '%s')\n",
                           rank, path), EXIT_USAGE;
        m->seen = true;
        m->nranks = nranks;
        copy_str(m->comm, sizeof(m->comm), jv_str(args, "comm"));
        copy_str(m->host, sizeof(m->host), jv_str(args, "host"));
        if (!jv_num(args, "realtime_offset_us", &m->offset_us))
            m->offset_us = 0;
        return 0;
    }
    if (!strcmp(ph, "s") || !strcmp(ph, "f")) {
        if (cat && !strcmp(cat, "msg"))
            *(*ph == 's' ? &jt->flows_s : &jt->flows_f) += 1;
        return 0;
    }
    if (strcmp(ph, "X") || !cat || (strcmp(cat, "coll") && strcmp(cat, "step")))
        return 0;
    if (pid >= MAX_RANKS || !jv_num(e, "ts", &ts) || !jv_num(e, "dur", &dur) || dur < 0)
        return fprintf(stderr, "collviz: '%s': a %s event of rank %" PRId64
                               " has no valid pid, ts or dur\n", path, cat, pid), EXIT_USAGE;
    if (!strcmp(cat, "step")) {
        static const char *const kinds[] = {"send", "recv", "reduce", "copy"};
        struct tstep s = {.rank = (int32_t)pid, .t0 = ts, .t1 = ts + dur};
        int64_t seq, part, step;
        int k;
        for (k = 0; k < 4 && (!name || strcmp(name, kinds[k])); k++)
            ;
        if (k == 4 || !jv_int(args, "op", 0, 9e15, &seq) ||
            !jv_int(args, "part", 0, 65535, &part) || !jv_int(args, "step", 0, 4e9, &step))
            return fprintf(stderr, "collviz: '%s': a step event of rank %" PRId64
                                   " is malformed\n", path, pid), EXIT_USAGE;
        s.kind = (uint8_t)k, s.seq = (uint64_t)seq, s.part = (uint32_t)part;
        s.step = (uint32_t)step;
        if (jt->nsteps == jt->capsteps) {
            size_t cap = jt->capsteps ? 2 * jt->capsteps : 1024;
            struct tstep *a = realloc(jt->steps, cap * sizeof(*a));
            if (!a)
                return fprintf(stderr, "collviz: out of memory\n"), 1;
            jt->steps = a, jt->capsteps = cap;
        }
        jt->steps[jt->nsteps++] = s;
    } else {
        const struct jv *parts = jv_get(args, "parts"), *p0;
        struct top o = {.rank = (int32_t)pid, .t0 = ts, .t1 = ts + dur};
        int64_t seq;
        if (!jv_int(args, "seq", 0, 9e15, &seq) || !parts || parts->type != JV_ARR ||
            !parts->n || (p0 = &parts->items[0])->type != JV_OBJ ||
            !jv_str(p0, "coll") || !jv_str(p0, "algo") || !jv_str(p0, "dtype") ||
            !jv_int(p0, "count", 0, 9e15, &o.count) || !jv_int(p0, "root", 0, 1e9, &o.root) ||
            !jv_int(p0, "chunk", 0, 9e15, &o.chunk) || !jv_int(p0, "nsteps", 0, 4e9, &o.nsteps))
            return fprintf(stderr, "collviz: '%s': an op event of rank %" PRId64
                                   " is malformed\n", path, pid), EXIT_USAGE;
        o.seq = (uint64_t)seq;
        o.nparts = parts->n;
        copy_str(o.status, sizeof(o.status), jv_str(args, "status"));
        copy_str(o.coll, sizeof(o.coll), jv_str(p0, "coll"));
        copy_str(o.algo, sizeof(o.algo), jv_str(p0, "algo"));
        copy_str(o.dtype, sizeof(o.dtype), jv_str(p0, "dtype"));
        if (jt->nops == jt->capops) {
            size_t cap = jt->capops ? 2 * jt->capops : 64;
            struct top *a = realloc(jt->ops, cap * sizeof(*a));
            if (!a)
                return fprintf(stderr, "collviz: out of memory\n"), 1;
            jt->ops = a, jt->capops = cap;
        }
        jt->ops[jt->nops++] = o;
    }
    return 0;
}

static char *read_file(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    size_t cap = 1 << 16, n = 0;
    char *buf = NULL;

    if (!f)
        return NULL;
    for (;;) {
        char *b = n + 1 >= cap || !buf ? realloc(buf, cap *= 2) : buf;
        size_t got;
        if (!b) {
            free(buf);
            fclose(f);
            errno = ENOMEM;
            return NULL;
        }
        buf = b;
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        free(buf);
        fclose(f);
        errno = EIO;
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    *len_p = n;
    return buf;
}

/* Is the file's first non-blank character '[' or '{' (a JSON trace, not a schedule trace)? */
static bool looks_json(const char *path)
{
    FILE *f = fopen(path, "r");
    int c;

    if (!f)
        return false;
    while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r')
        ;
    fclose(f);
    return c == '[' || c == '{';
}

/* Read the events of one file: a JSON array of events, or an object whose traceEvents is
 * one. A missing ']' at the very end is accepted (a rank that died before its comm was
 * destroyed), as the trace viewers do. */
static int trace_file(struct jtrace *jt, const char *path)
{
    size_t len = 0;
    char *buf = read_file(path, &len);
    struct jv_in in;
    bool in_object = false;
    int rc = EXIT_USAGE;

    if (!buf) {
        fprintf(stderr, "collviz: cannot read '%s': %s\n", path, strerror(errno));
        return EXIT_USAGE;
    }
    in = (struct jv_in){buf, buf + len, NULL};
    jv_ws(&in);
    if (in.p < in.end && *in.p == '{') {
        /* {"traceEvents": [...], ...}: find the array, skip the rest */
        in.p++;
        in_object = true;
        for (;;) {
            char *key = NULL;
            struct jv skip;
            jv_ws(&in);
            if (!jv_string(&in, &key))
                goto bad;
            jv_ws(&in);
            if (in.p >= in.end || *in.p != ':') {
                free(key);
                jv_fail(&in, "expected ':'");
                goto bad;
            }
            in.p++;
            jv_ws(&in);
            if (!strcmp(key, "traceEvents")) {
                free(key);
                break;
            }
            free(key);
            if (!jv_value(&in, &skip, 1)) {
                jv_free(&skip);
                goto bad;
            }
            jv_free(&skip);
            jv_ws(&in);
            if (in.p >= in.end || *in.p != ',') {
                jv_fail(&in, "no traceEvents array");
                goto bad;
            }
            in.p++;
        }
    }
    if (in.p >= in.end || *in.p != '[') {
        jv_fail(&in, "not a JSON array of trace events");
        goto bad;
    }
    in.p++;
    jv_ws(&in);
    if (in.p < in.end && *in.p == ']') {
        in.p++;
    } else {
        for (;;) {
            struct jv e;
            int erc;
            if (!jv_value(&in, &e, 1)) {
                jv_free(&e);
                goto bad;
            }
            erc = trace_event(jt, &e, path);
            jv_free(&e);
            if (erc) {
                rc = erc;
                goto out;
            }
            jv_ws(&in);
            if (in.p >= in.end && !in_object)
                break; /* unterminated: the rank stopped writing */
            if (in.p < in.end && *in.p == ',') {
                in.p++;
                continue;
            }
            if (in.p < in.end && *in.p == ']') {
                in.p++;
                break;
            }
            jv_fail(&in, "expected ',' or ']' between events");
            goto bad;
        }
    }
    rc = 0;
    goto out;
bad:
    fprintf(stderr, "collviz: '%s' is not a coll trace: %s at byte %zu\n", path,
            in.err ? in.err : "malformed JSON", (size_t)(in.p - buf));
out:
    free(buf);
    return rc;
}

/* COLL_TRACE=t.json wrote t.r0.json, t.r1.json, ...: given t.json that does not exist, take
 * those. Returns how many names went into files (0: none found). */
static int rank_files(const char *path, char files[][4096], int max)
{
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    size_t at = dot && (!slash || dot > slash) && dot != path && dot[-1] != '/'
                    ? (size_t)(dot - path) : strlen(path);
    int n = 0;

    for (; n < max; n++) {
        FILE *f;
        snprintf(files[n], 4096, "%.*s.r%d%s", (int)at, path, n, path + at);
        f = fopen(files[n], "r");
        if (!f)
            break;
        fclose(f);
    }
    return n;
}

static size_t coll_dtype_bytes(const char *name)
{
    coll_dtype_t dt;
    return parse_dtype(name, &dt) ? 1 : coll__dtype_size(dt);
}

static int cmp_tstep(const void *a, const void *b)
{
    const struct tstep *x = a, *y = b;
    return x->seq != y->seq ? (x->seq < y->seq ? -1 : 1) : 0;
}

/* Fill v (args, names, schedules built by this build's builders) and m from JSON traces. */
static int load_json_traces(struct viz *v, struct opts *o, struct measured *m)
{
    static char files[MAX_TRACE_FILES][4096];
    static char algo_name[32];
    struct jtrace jt;
    int nfiles = 0, rc = EXIT_USAGE;
    int64_t nranks = 0;
    const char *comm = NULL;
    const struct top *pick = NULL;
    double origin = INFINITY, last = -INFINITY;
    const struct coll_algo *algo;
    uint64_t total = 0;
    bool first_host_set = false;
    const char *host0 = NULL;

    memset(&jt, 0, sizeof(jt));
    memset(m, 0, sizeof(*m));
    for (int i = 0; i < o->ntraces; i++) {
        FILE *f = fopen(o->traces[i], "r");
        if (f) {
            fclose(f);
            if (nfiles == MAX_TRACE_FILES)
                return usage_error("more than %d trace files", MAX_TRACE_FILES);
            snprintf(files[nfiles++], sizeof(files[0]), "%s", o->traces[i]);
            continue;
        }
        int got = rank_files(o->traces[i], files + nfiles, MAX_TRACE_FILES - nfiles);
        if (!got) {
            fprintf(stderr, "collviz: cannot read '%s': %s\n", o->traces[i], strerror(ENOENT));
            return EXIT_USAGE;
        }
        nfiles += got;
    }
    for (int i = 0; i < nfiles; i++)
        if ((rc = trace_file(&jt, files[i])))
            goto out;
    rc = EXIT_USAGE;
    for (int r = 0; r < MAX_RANKS; r++) {
        if (!jt.meta[r].seen)
            continue;
        if (!nranks) {
            nranks = jt.meta[r].nranks;
            comm = jt.meta[r].comm;
            host0 = jt.meta[r].host;
            first_host_set = true;
        } else if (jt.meta[r].nranks != nranks || strcmp(jt.meta[r].comm, comm)) {
            fprintf(stderr, "collviz: rank %d's trace is of another communicator (%s, %" PRId64
                            " ranks) than rank 0's (%s, %" PRId64 " ranks)\n",
                    r, jt.meta[r].comm, jt.meta[r].nranks, comm, nranks);
            goto out;
        }
        if (first_host_set && strcmp(jt.meta[r].host, host0))
            m->multi_host = true;
    }
    if (!nranks) {
        fprintf(stderr, "collviz: '%s' is not a coll trace (no coll_trace metadata event: "
                        "write one with COLL_TRACE=FILE)\n", files[0]);
        goto out;
    }
    for (int r = 0; r < nranks; r++)
        if (!jt.meta[r].seen) {
            fprintf(stderr, "collviz: the trace has no file for rank %d of %" PRId64
                            " (give every rank's file, or the name COLL_TRACE had)\n", r, nranks);
            goto out;
        }
    /* the op: --op SEQ, else the largest collective that every rank traced */
    for (size_t i = 0; i < jt.nops; i++) {
        const struct top *a = &jt.ops[i];
        int have = 0;
        if (a->rank != 0 || a->nparts != 1 || !strcmp(a->algo, "p2p") ||
            (o->op_given && a->seq != (uint64_t)o->op_seq))
            continue;
        for (size_t j = 0; j < jt.nops; j++)
            have += jt.ops[j].seq == a->seq;
        /* the largest call, the last of those: warm-up and timing ops are usually small */
        if (have == nranks &&
            (!pick || a->count * (int64_t)coll_dtype_bytes(a->dtype) >
                          pick->count * (int64_t)coll_dtype_bytes(pick->dtype) ||
             (a->count * (int64_t)coll_dtype_bytes(a->dtype) ==
                  pick->count * (int64_t)coll_dtype_bytes(pick->dtype) && a->seq > pick->seq)))
            pick = a;
    }
    if (!pick) {
        if (o->op_given)
            fprintf(stderr, "collviz: no collective op #%ld on every rank of the trace\n",
                    o->op_seq);
        else
            fprintf(stderr, "collviz: the trace holds no collective that every rank ran\n");
        goto out;
    }
    m->seq = pick->seq;
    copy_str(m->status, sizeof(m->status), pick->status);
    for (size_t j = 0; j < jt.nops; j++) {
        const struct top *b = &jt.ops[j];
        if (b->seq != pick->seq)
            continue;
        if (b->nparts != 1 || strcmp(b->coll, pick->coll) || strcmp(b->algo, pick->algo) ||
            strcmp(b->dtype, pick->dtype) || b->count != pick->count || b->root != pick->root ||
            b->chunk != pick->chunk) {
            fprintf(stderr, "collviz: op #%" PRIu64 " is not the same call on rank %d as on "
                            "rank 0\n", pick->seq, b->rank);
            goto out;
        }
    }
    if (parse_coll(pick->coll, &v->args.coll) || parse_dtype(pick->dtype, &v->args.dtype) ||
        pick->root >= nranks || pick->chunk < 1) {
        fprintf(stderr, "collviz: op #%" PRIu64 " names a collective, dtype or root this "
                        "collviz does not know\n", pick->seq);
        goto out;
    }
    algo = coll__algo_find(pick->algo);
    if (!algo || !(algo->colls & (1u << v->args.coll))) {
        fprintf(stderr, "collviz: op #%" PRIu64 " ran algorithm '%s', which this build does "
                        "not have for %s\n", pick->seq, pick->algo, pick->coll);
        list_algos(stderr, v->args.coll);
        goto out;
    }
    copy_str(algo_name, sizeof(algo_name), algo->name);
    o->algo = algo;
    o->coll = v->args.coll;
    o->n = (int32_t)nranks;
    v->n = (int32_t)nranks;
    v->algo_name = algo_name;
    v->algo_desc = algo->desc;
    v->args.nranks = (int32_t)nranks;
    v->args.root = (int32_t)pick->root;
    v->args.count = (size_t)pick->count;
    v->args.elem_size = coll__dtype_size(v->args.dtype);
    v->args.chunk_count = (size_t)pick->chunk;
    if ((rc = viz_build(v, algo)))
        goto out;
    rc = EXIT_USAGE;
    for (size_t j = 0; j < jt.nops; j++)
        if (jt.ops[j].seq == pick->seq &&
            (uint64_t)jt.ops[j].nsteps != v->s[jt.ops[j].rank].nsteps) {
            fprintf(stderr, "collviz: rank %d ran %" PRId64 " steps in op #%" PRIu64 "; this "
                            "build's %s gives it %u: the trace is of another version\n",
                    jt.ops[j].rank, jt.ops[j].nsteps, pick->seq, algo->name,
                    v->s[jt.ops[j].rank].nsteps);
            goto out;
        }
    for (int32_t r = 0; r < v->n; r++)
        total += v->s[r].nsteps;
    m->t0 = malloc((total + 1) * sizeof(*m->t0));
    m->t1 = malloc((total + 1) * sizeof(*m->t1));
    if (!m->t0 || !m->t1) {
        fprintf(stderr, "collviz: out of memory\n");
        rc = 1;
        goto out;
    }
    for (uint64_t g = 0; g < total; g++)
        m->t0[g] = m->t1[g] = NAN;
    /* one clock: CLOCK_MONOTONIC is shared on a host; across hosts, realtime lines them up */
    for (size_t j = 0; j < jt.nops; j++) {
        const struct top *b = &jt.ops[j];
        double off = m->multi_host ? jt.meta[b->rank].offset_us : 0;
        if (b->seq == pick->seq) {
            origin = fmin(origin, b->t0 + off);
            last = fmax(last, b->t1 + off);
        }
    }
    qsort(jt.steps, jt.nsteps, sizeof(*jt.steps), cmp_tstep);
    for (size_t i = 0; i < jt.nsteps; i++) {
        const struct tstep *s = &jt.steps[i];
        uint64_t base = 0;
        double off = m->multi_host ? jt.meta[s->rank].offset_us : 0;
        if (s->seq != pick->seq || s->part != 0)
            continue;
        if (s->rank >= v->n || s->step >= v->s[s->rank].nsteps ||
            v->s[s->rank].steps[s->step].kind != s->kind) {
            fprintf(stderr, "collviz: rank %d step %u of op #%" PRIu64 " is not that step of "
                            "this build's %s\n", s->rank, s->step, pick->seq, algo->name);
            goto out;
        }
        for (int32_t r = 0; r < s->rank; r++)
            base += v->s[r].nsteps;
        m->t0[base + s->step] = s->t0 + off - origin;
        m->t1[base + s->step] = s->t1 + off - origin;
    }
    m->total = last - origin;
    m->flows_s = jt.flows_s;
    m->flows_f = jt.flows_f;
    rc = 0;
out:
    free(jt.steps);
    free(jt.ops);
    return rc;
}

static void measured_free(struct measured *m)
{
    free(m->t0);
    free(m->t1);
    memset(m, 0, sizeof(*m));
}

/* Per round: when the cost model's lockstep rounds put it, and when the trace saw it run
 * (first start to last end of its steps, over all ranks). */
static void print_measured(const struct render *rd, const struct measured *m, FILE *f)
{
    const struct viz *v = rd->v;
    double sum = 0;
    char a[32], b[32];

    fprintf(f, "\ntimeline of op #%" PRIu64 " (%s): measured by COLL_TRACE%s\n", m->seq,
            m->status, rd->round_cost ? ", predicted by the cost model's lockstep rounds" : "");
    fprintf(f, "  round %21s %21s\n", rd->round_cost ? "predicted (us)" : "", "measured (us)");
    for (uint32_t k = 0; k < v->nrounds; k++) {
        double lo = INFINITY, hi = -INFINITY;
        for (uint32_t i = rd->round_start[2 * k]; i < rd->round_start[2 * k + 2]; i++) {
            uint32_t g = rd->order[i];
            if (isnan(m->t0[g]))
                continue;
            /* a receive is posted early and waits: its start is not when the round ran */
            if (step_of(v, g)->kind != COLL_STEP_RECV)
                lo = fmin(lo, m->t0[g]);
            hi = fmax(hi, m->t1[g]);
        }
        if (rd->round_start[2 * k] == rd->round_start[2 * k + 2])
            continue;
        a[0] = '\0';
        if (rd->round_cost) {
            snprintf(a, sizeof(a), "%9.1f - %9.1f", sum * 1e6, (sum + rd->round_cost[k]) * 1e6);
            sum += rd->round_cost[k];
        }
        if (lo <= hi)
            snprintf(b, sizeof(b), "%9.1f - %9.1f", lo, hi);
        else
            snprintf(b, sizeof(b), "%21s", "not traced");
        fprintf(f, "  %5u %21s %21s\n", k, a, b);
    }
    human_time(m->total * 1e-6, b, sizeof(b));
    fprintf(f, "  total: measured %s (first start to last end over all ranks%s)", b,
            m->multi_host ? ", hosts lined up by their realtime clocks" : "");
    if (rd->round_cost) {
        human_time(sum, a, sizeof(a));
        fprintf(f, "; predicted %s in lockstep", a);
    }
    if (rd->predicted >= 0) {
        human_time(rd->predicted, a, sizeof(a));
        fprintf(f, ", %s simulated", a);
    }
    fprintf(f, "\n  flow events in the files: %zu sends, %zu receives%s\n", m->flows_s,
            m->flows_f, m->flows_s == m->flows_f ? "" : " (some ranks stopped early)");
}

/* ---- 8 main ----------------------------------------------------------------------------- */

static int parse_coll(const char *name, enum coll_coll *c_p)
{
    for (int c = 0; c < COLL_COLL_SENDRECV; c++)
        if (!strcasecmp(name, coll__coll_name((enum coll_coll)c))) {
            *c_p = (enum coll_coll)c;
            return 0;
        }
    if (!strcasecmp(name, "reduce_scatter") || !strcasecmp(name, "reduce-scatter")) {
        *c_p = COLL_COLL_REDUCE_SCATTER;
        return 0;
    }
    return 1;
}

static int parse_dtype(const char *name, coll_dtype_t *dt_p)
{
    for (int d = 0; d < COLL_NUM_DTYPES; d++)
        if (!strcasecmp(name, coll__dtype_name((coll_dtype_t)d))) {
            *dt_p = (coll_dtype_t)d;
            return 0;
        }
    if (!strcasecmp(name, "float32") || !strcasecmp(name, "fp32")) {
        *dt_p = COLL_FLOAT32;
        return 0;
    }
    return 1;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    const char *coll = NULL, *algo = NULL, *bytes = NULL;
    long x;

    memset(o, 0, sizeof(*o));
    o->n = 4;
    o->bytes = 64;
    o->dtype = COLL_FLOAT32;
    o->chunk_bytes = DEFAULT_CHUNK_BYTES;
    o->width = 100;
    o->max_rounds = 64;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true;

        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(arg, "--no-cost")) {
            o->no_cost = true, takes = false;
        } else if (!strcmp(arg, "--no-data")) {
            o->no_data = true, takes = false;
        } else if (arg[0] != '-' && coll && !strcmp(coll, "trace")) {
            if (o->ntraces == MAX_TRACE_ARGS)
                return usage_error("more than %d trace files", MAX_TRACE_ARGS);
            o->traces[o->ntraces++] = arg, takes = false;
        } else if (arg[0] != '-') {
            if (coll)
                return usage_error("one collective at a time ('%s' and '%s')", coll, arg);
            coll = arg, takes = false;
        } else if (!val) {
            return usage_error("%s needs a value", arg);
        } else if (!strcmp(arg, "--collective") || !strcmp(arg, "-c")) {
            if (coll)
                return usage_error("one collective at a time ('%s' and '%s')", coll, val);
            coll = val;
        } else if (!strcmp(arg, "--algo") || !strcmp(arg, "-a")) {
            algo = val;
        } else if (!strcmp(arg, "-n") || !strcmp(arg, "--nranks")) {
            if (!parse_int(val, 1, MAX_RANKS, &x))
                return usage_error("-n '%s': ranks must be 1..%d", val, MAX_RANKS);
            o->n = (int32_t)x;
        } else if (!strcmp(arg, "--bytes") || !strcmp(arg, "-b")) {
            bytes = val;
        } else if (!strcmp(arg, "--dtype") || !strcmp(arg, "-d")) {
            if (parse_dtype(val, &o->dtype)) {
                fprintf(stderr, "collviz: unknown dtype '%s'; dtypes:", val);
                for (int d = 0; d < COLL_NUM_DTYPES; d++)
                    fprintf(stderr, " %s", coll__dtype_name((coll_dtype_t)d));
                fprintf(stderr, "\n");
                return EXIT_USAGE;
            }
        } else if (!strcmp(arg, "--root")) {
            if (!parse_int(val, 0, MAX_RANKS - 1, &x))
                return usage_error("--root '%s' is not a rank", val);
            o->root = (int32_t)x;
        } else if (!strcmp(arg, "--chunk")) {
            if (!parse_size(val, &o->chunk_bytes) || !o->chunk_bytes)
                return usage_error("--chunk '%s' is not a size in bytes (K, M, G suffixes)", val);
            o->chunk_given = true;
        } else if (!strcmp(arg, "--width")) {
            if (!parse_int(val, 40, 1000, &x))
                return usage_error("--width '%s': columns must be 40..1000", val);
            o->width = (int)x;
        } else if (!strcmp(arg, "--rounds")) {
            if (!parse_int(val, 0, INT_MAX, &x))
                return usage_error("--rounds '%s' is not a count", val);
            o->max_rounds = (int)x;
        } else if (!strcmp(arg, "--html")) {
            o->html = val;
        } else if (!strcmp(arg, "--compare")) {
            o->compare = val;
        } else if (!strcmp(arg, "--plot")) {
            o->plot = val;
        } else if (!strcmp(arg, "--cost")) {
            o->cost_file = val;
        } else if (!strcmp(arg, "--cores")) {
            if (!parse_int(val, 0, 4096, &x))
                return usage_error("--cores '%s' is not a count of cores (0-4096)", val ? val : "");
            o->cores = (int)x;
        } else if (!strcmp(arg, "--link")) {
            static const char *const links[] = {"tcp", "shm", "ib", "cuda"};
            o->link = -1;
            for (int l = 0; val && l < 4; l++)
                if (!strcmp(val, links[l]))
                    o->link = l;
            if (o->link < 0)
                return usage_error("--link '%s': one of tcp, shm, ib, cuda", val ? val : "");
        } else if (!strcmp(arg, "--trace")) {
            if (o->ntraces == MAX_TRACE_ARGS)
                return usage_error("more than %d trace files", MAX_TRACE_ARGS);
            o->traces[o->ntraces++] = val;
        } else if (!strcmp(arg, "--op")) {
            if (!parse_int(val, 0, LONG_MAX, &x))
                return usage_error("--op '%s' is not an op number", val);
            o->op_seq = x;
            o->op_given = true;
        } else if (!strcmp(arg, "--save-trace")) {
            o->save_trace = val;
        } else {
            return usage_error("unknown option '%s'", arg);
        }
        if (takes)
            i++;
    }
    if (coll && !strcmp(coll, "trace") && !o->ntraces)
        return usage_error("collviz trace FILE...: which trace files?");
    if (o->ntraces) {
        if (coll && strcmp(coll, "trace"))
            return usage_error("a trace says which collective it ran: leave out '%s'", coll);
        o->trace = o->traces[0];
        return 0; /* the trace says what it is */
    }
    if (o->op_given)
        return usage_error("--op goes with a trace");
    if (coll && !strcmp(coll, "list")) {
        for (int c = 0; c < COLL_COLL_SENDRECV; c++)
            list_algos(stdout, (enum coll_coll)c);
        exit(0);
    }
    if (!coll)
        return usage_error("which collective? one of allreduce, broadcast, reduce, allgather, "
                           "reducescatter, alltoall, gather, scatter, barrier");
    if (parse_coll(coll, &o->coll)) {
        fprintf(stderr, "collviz: unknown collective '%s'; collectives:", coll);
        for (int c = 0; c < COLL_COLL_SENDRECV; c++)
            fprintf(stderr, " %s", coll__coll_name((enum coll_coll)c));
        fprintf(stderr, "\n");
        return EXIT_USAGE;
    }
    if (o->root >= o->n)
        return usage_error("--root %d is not one of the %d ranks", o->root, o->n);
    if (bytes) {
        const char *colon = strchr(bytes, ':');
        size_t es = coll__dtype_size(o->dtype);
        if (colon) {
            char lo[64];
            if (!o->compare)
                return usage_error("--bytes LO:HI is for --compare; draw one size at a time");
            if ((size_t)(colon - bytes) >= sizeof(lo))
                return usage_error("--bytes '%s' is not a size range", bytes);
            memcpy(lo, bytes, (size_t)(colon - bytes));
            lo[colon - bytes] = 0;
            if (!parse_size(lo, &o->bytes) || !parse_size(colon + 1, &o->bytes_hi))
                return usage_error("--bytes '%s' is not a size range LO:HI", bytes);
        } else if (!parse_size(bytes, &o->bytes)) {
            return usage_error("--bytes '%s' is not a size (digits, then K, M or G)", bytes);
        }
        if (!colon && o->bytes % es)
            return usage_error("--bytes %zu is not a whole number of %s elements (%zu B)",
                               o->bytes, coll__dtype_name(o->dtype), es);
    }
    if (o->compare)
        return 0;
    {
        struct coll_algo_args a = {.coll = o->coll, .nranks = o->n, .root = o->root,
                                   .count = o->bytes / coll__dtype_size(o->dtype),
                                   .dtype = o->dtype, .elem_size = coll__dtype_size(o->dtype)};
        a.chunk_count = o->chunk_bytes / a.elem_size ? o->chunk_bytes / a.elem_size : 1;
        if (o->coll == COLL_COLL_BARRIER)
            a.count = 0;
        if (algo && !strcmp(algo, "list")) {
            for (int i = 0; coll__algos[i]; i++)
                if (coll__algos[i]->colls & (1u << o->coll))
                    printf("%-14s %s%s\n", coll__algos[i]->name, coll__algos[i]->desc,
                           usable(coll__algos[i], &a) ? "" : " (cannot run these arguments)");
            exit(0);
        }
        if (algo) {
            o->algo = coll__algo_find(algo);
            if (!o->algo || !(o->algo->colls & (1u << o->coll))) {
                fprintf(stderr, "collviz: unknown algorithm '%s' for %s\n", algo,
                        coll__coll_name(o->coll));
                list_algos(stderr, o->coll);
                return EXIT_USAGE;
            }
            if (!usable(o->algo, &a))
                return usage_error("%s cannot run %s of %zu elements on %d ranks", algo,
                                   coll__coll_name(o->coll), a.count, o->n);
        } else {
            for (int i = 0; coll__algos[i] && !o->algo; i++)
                if (usable(coll__algos[i], &a))
                    o->algo = coll__algos[i];
            if (!o->algo)
                return usage_error("no algorithm can run %s on %d ranks",
                                   coll__coll_name(o->coll), o->n);
        }
    }
    if (o->plot && !o->compare)
        return usage_error("--plot goes with --compare");
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    struct viz v = {0};
    struct data d = {0};
    struct render rd = {0};
    struct measured meas = {0};
    int rc;

    /* collviz prints its own messages; the library's WARN lines would repeat them (a user's
     * COLL_DEBUG still wins) */
    if (!getenv("COLL_DEBUG"))
        coll__log_level = COLL_LOG_NONE;
    rc = parse_args(argc, argv, &o);

    if (rc)
        return rc;
    if (o.compare) {
#if COLLVIZ_HAVE_COST
        return run_compare(&o);
#else
        fprintf(stderr, "collviz: cost model not built (src/algo/cost.h); --compare needs it\n");
        return EXIT_USAGE;
#endif
    }
    if (o.trace) {
        FILE *f = fopen(o.trace, "r");
        bool json = o.ntraces > 1 || !f || looks_json(o.trace);
        if (f)
            fclose(f);
        if (json) {
            rc = load_json_traces(&v, &o, &meas);
            rd.m = &meas;
        } else if ((rc = load_trace(&v, o.trace)) == 0) {
            o.no_cost = true; /* the trace's algorithm may not be in this build */
        }
        if (rc)
            goto out;
        o.coll = v.args.coll;
    } else {
        v.n = o.n;
        v.args = (struct coll_algo_args){.coll = o.coll, .nranks = o.n, .root = o.root,
                                         .count = o.bytes / coll__dtype_size(o.dtype),
                                         .dtype = o.dtype,
                                         .elem_size = coll__dtype_size(o.dtype)};
        if (o.coll == COLL_COLL_BARRIER)
            v.args.count = 0;
        v.args.chunk_count = o.chunk_bytes / v.args.elem_size ? o.chunk_bytes / v.args.elem_size
                                                              : 1;
        v.algo_name = o.algo->name;
        v.algo_desc = o.algo->desc;
        rc = viz_build(&v, o.algo);
        if (rc)
            goto out;
    }
    if (o.save_trace && (rc = save_trace(&v, o.save_trace)))
        goto out;
    if ((rc = viz_match(&v)) || (rc = viz_rounds(&v)))
        goto out;
    rd.o = &o;
    rd.v = &v;
    rd.predicted = -1;
    rc = 1;
    if (!order_steps(&rd))
        goto out_nomem;
    if (!o.no_data && v.total <= MAX_SIM_STEPS) {
        if (!data_init(&d, &v) || !blocks_find(&rd.bl, &v))
            goto out_nomem;
        rd.d = &d;
        rd.cellw = 8;
        for (int w = 12; w > 3; w--) /* the widest cell that fits every block */
            if (7 + (size_t)(w + 1) * rd.bl.n <= (size_t)o.width || w == 4) {
                rd.cellw = w;
                break;
            }
        rd.shown = ((size_t)o.width - 7) / (size_t)(rd.cellw + 1);
        if (rd.shown > rd.bl.n)
            rd.shown = rd.bl.n;
    }
#if COLLVIZ_HAVE_COST
    if (!o.no_cost) {
        struct coll_cost_params cp;
        if ((rc = load_params(&o, &cp)))
            goto out;
        rc = 1;
        struct coll_cost_links links = coll__cost_links_all((enum coll_link)o.link);
        if (!price_rounds(&rd, &cp))
            goto out_nomem;
        if (coll__cost_predict(&cp, &links, o.algo, &v.args, &rd.predicted, NULL) != COLL_SUCCESS)
            rd.predicted = -1;
        if (!o.trace)
            choice_text(&cp, &o, v.args.count * v.args.elem_size, rd.choice, sizeof(rd.choice));
        params_text(&cp, (enum coll_link)o.link, o.dtype, o.cost_file != NULL, rd.params,
                    sizeof(rd.params));
    }
#else
    if (!o.no_cost)
        printf("(cost model not built: rounds are not priced)\n");
#endif
    print_header(&rd, stdout);
    print_rounds(&rd, stdout);
    if (rd.m)
        print_measured(&rd, rd.m, stdout);
    if (o.html) {
        if (rd.d) { /* the page replays the data from the start */
            data_free(&d, &v);
            if (!data_init(&d, &v))
                goto out_nomem;
        }
        if ((rc = write_html(&rd, o.html)))
            goto out;
        printf("page: %s\n", o.html);
    }
    rc = rd.wrong ? 1 : 0; /* a schedule that computes the wrong thing is a failure */
    goto out;
out_nomem:
    fprintf(stderr, "collviz: out of memory\n");
out:
    data_free(&d, &v);
    free(rd.bl.cut);
    free(rd.order);
    free(rd.round_start);
    free(rd.round_cost);
    measured_free(&meas);
    viz_free(&v);
    return rc;
}
