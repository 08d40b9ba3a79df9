/*
 * html.c - the animated page (--html): the rounds, tables and timelines as one JSON object
 * in collviz_html.h's page.
 */
#include "collviz.h"
#include "collviz_html.h"

/* ---- HTML ---------------------------------------------------------------------------- */

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
int write_html(struct render *rd, const char *path)
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

