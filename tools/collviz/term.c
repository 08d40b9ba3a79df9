/*
 * term.c - the schedule viewer in the terminal: a header, then each round's messages and
 * local steps, with the receive buffers' blocks as a table.
 */
#include "collviz.h"

/* ---- terminal output ----------------------------------------------------------------- */

static const char *buf_name(uint8_t b)
{
    static const char *names[] = {"SEND", "RECV", "SCRATCH"};
    return b < COLL_NUM_BUFS ? names[b] : "?";
}

void human_bytes(double b, char *buf, size_t len)
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

void human_time(double s, char *buf, size_t len)
{
    if (s >= 1)
        snprintf(buf, len, "%.3g s", s);
    else if (s >= 1e-3)
        snprintf(buf, len, "%.3g ms", s * 1e3);
    else
        snprintf(buf, len, "%.3g us", s * 1e6);
}

/* The blocks of RECV: cut wherever any step's slice of RECV starts or ends. */
static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

bool blocks_find(struct blocks *bl, const struct viz *v)
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

/* A COLL_TRACE run of one op (trace.c). */
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

void slice_text(const struct coll_slice *s, char *buf, size_t len)
{
    snprintf(buf, len, "%s[%zu,%zu)", buf_name(s->buf), s->off, s->off + s->count);
}

/* Order steps by round, sends first within a round (they read what the round starts with),
 * then by rank and index (dependencies point backwards, so index order is safe). */
bool order_steps(struct render *rd)
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

struct round_sum round_summary(const struct render *rd, uint32_t k)
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
bool apply_round(struct render *rd, uint32_t k)
{
    if (!rd->d)
        return true;
    for (uint32_t i = rd->round_start[2 * k]; i < rd->round_start[2 * k + 2]; i++)
        if (!data_step(rd->d, rd->v, rd->order[i]))
            return false;
    return true;
}

void print_header(const struct render *rd, FILE *f)
{
    const struct viz *v = rd->v;
    const struct coll_algo_args *a = &v->args;
    char b1[32], b2[32];

    human_bytes((double)a->count * (double)a->elem_size, b1, sizeof(b1));
    human_bytes((double)a->chunk_count * (double)a->elem_size, b2, sizeof(b2));
    fprintf(f, "%s with %s: %s\n", coll__coll_name(a->coll), v->algo_name, v->algo_desc);
    fprintf(f, "  %d ranks, count %zu x %s (%s), chunk %zu elements (%s)", v->n, a->count,
            coll__dtype_name(a->dtype), b1, a->chunk_count, b2);
    if (coll__colls[a->coll].root != COLL_ROOT_NONE)
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

void print_rounds(struct render *rd, FILE *f)
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

