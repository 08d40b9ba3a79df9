/*
 * price.c - prices from the cost model: each round in lockstep, the whole schedule as the
 * model predicts it, the selector's pick, and --compare over a range of sizes.
 */
#include "collviz.h"

/* ---- prices and --compare ------------------------------------------------------------ */

#if COLLVIZ_HAVE_COST
/* Lockstep price of each round: the busiest rank's port (alpha + bytes beta per message it
 * sends or receives in the round) plus its reductions and copies. Link: --link for every
 * pair (TCP, the cost model's default). This is the teaching view of the rounds; the time
 * of the whole schedule is the cost model's own (coll__cost_predict). */
bool price_rounds(struct render *rd, const struct coll_cost_params *cp)
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
void params_text(const struct coll_cost_params *cp, enum coll_link link, coll_dtype_t dt,
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

int load_params(const struct opts *o, struct coll_cost_params *cp)
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
    const bool data = coll__desc_moves_data(&coll__colls[o->coll]);
    struct coll_cost_query q = {.coll = o->coll, .nranks = o->n, .root = o->root,
                                .count = data ? bytes / es : 0,
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
void choice_text(const struct coll_cost_params *cp, const struct opts *o, size_t bytes,
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

int run_compare(const struct opts *o)
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

