/*
 * sched.c - the schedule viewer's model: every rank's schedule from the builder (or a coll
 * trace file), each RECV matched with its SEND, every step in a round, and the data the
 * steps move (collviz.h describes the passes).
 */
#include "collviz.h"

/* ---- building and matching ----------------------------------------------------------- */
void viz_free(struct viz *v)
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

const char *last_error(void)
{
    const char *e = coll_last_error(NULL);
    return e && *e ? e : "unknown error";
}

int viz_build(struct viz *v, const struct coll_algo *algo)
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
int viz_match(struct viz *v)
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

int32_t rank_of(const struct viz *v, uint32_t g)
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

const struct coll_step *step_of(const struct viz *v, uint32_t g)
{
    int32_t r = rank_of(v, g);
    return &v->s[r].steps[g - v->base[r]];
}

/* ---- rounds -------------------------------------------------------------------------- */

/* Kahn's order over dependencies and send -> receive edges; a step is placed once everything
 * it waits for is, so a receive may be placed before earlier steps of its own rank. */
int viz_rounds(struct viz *v)
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

/* ---- data ---------------------------------------------------------------------------- */

/* A run of elements with the same contributors, from consecutive send-buffer elements. */
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

void data_free(struct data *d, const struct viz *v)
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

bool data_init(struct data *d, const struct viz *v)
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
bool data_step(struct data *d, const struct viz *v, uint32_t g)
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
bool expected(const struct viz *v, int32_t r, size_t i, uint64_t *mask_p, size_t *origin_p)
{
    const struct coll_algo_args *a = &v->args;
    const uint64_t all = v->n == 64 ? ~0ull : (1ull << v->n) - 1;
    const size_t c = a->count;
    const struct coll_coll_desc *d = coll__coll_desc(a->coll);
    size_t blk, in;

    /* from the row: block b of an n-block RECV comes from rank b (or from every rank, or
     * the root's), at this rank's block of an n-block SEND */
    if (!d || d->p2p || !coll__desc_uses_recv(d, r, a->root, 0) ||
        i >= coll__blocks_count(d->recv_blocks, c, v->n))
        return false;
    blk = d->recv_blocks == COLL_BLOCKS_N ? i / c : 0;
    in = d->recv_blocks == COLL_BLOCKS_N ? i % c : i;
    *origin_p = (d->send_blocks == COLL_BLOCKS_N ? (size_t)r * c : 0) + in;
    *mask_p = d->reduces                    ? all
              : d->root == COLL_ROOT_SOURCE ? 1ull << a->root
                                            : 1ull << blk;
    return true;
}

/* Check every rank's RECV against the collective's promise; writes a sentence into msg. */
bool data_check(const struct data *d, const struct viz *v, char *msg, size_t len)
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
void cell_text(const struct segs *s, size_t off, size_t count, int w, char *buf,
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

/* ---- trace files --------------------------------------------------------------------- */

/* A coll trace: the schedules of every rank as text, one step a line.
 *   # coll-trace 1
 *   run COLL ALGO N COUNT DTYPE ROOT CHUNK
 *   rank R STEPS
 *   KIND PEER SRC.BUF SRC.OFF SRC.COUNT SRC2.BUF ... DST.COUNT NDEPS DEP...
 */

int save_trace(const struct viz *v, const char *path)
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


/* Fill v (args, names, schedules) from a trace; EXIT_USAGE when the file is not one. */
int load_trace(struct viz *v, const char *path)
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

