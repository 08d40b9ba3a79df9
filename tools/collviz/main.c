/*
 * main.c - collviz's arguments and main (collviz.h says what collviz does).
 *
 * Exit status: 0 done, 1 a schedule or system failure, 2 a usage error.
 */
#include "collviz.h"

/* ---- arguments ----------------------------------------------------------------------- */
static void usage(FILE *f)
{
    fprintf(f,
            "usage: collviz COLLECTIVE [options]\n"
            "  draws the schedule that coll's executor runs, round by round\n"
            "  COLLECTIVE       (or --collective NAME; 'list': the algorithms of each)\n"
            "                   ");
    for (int c = 0; c < COLL_NUM_COLLS; c++)
        if (!coll__colls[c].p2p)
            fprintf(f, "%s%s", c ? ", " : "", coll__colls[c].name);
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

int usage_error(const char *fmt, ...)
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

void list_algos(FILE *f, enum coll_coll coll)
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
/* ---- main ---------------------------------------------------------------------------- */

int parse_coll(const char *name, enum coll_coll *c_p)
{
    /* a send or a receive has no schedule to draw */
    return !coll__coll_from_name(name, strlen(name), c_p) || coll__colls[*c_p].p2p;
}

int parse_dtype(const char *name, coll_dtype_t *dt_p)
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
        for (int c = 0; c < COLL_NUM_COLLS; c++)
            if (!coll__colls[c].p2p)
                list_algos(stdout, (enum coll_coll)c);
        exit(0);
    }
    if (!coll)
        return usage_error("which collective? one of allreduce, broadcast, reduce, allgather, "
                           "reducescatter, alltoall, gather, scatter, barrier");
    if (parse_coll(coll, &o->coll)) {
        fprintf(stderr, "collviz: unknown collective '%s'; collectives:", coll);
        for (int c = 0; c < COLL_NUM_COLLS; c++)
            if (!coll__colls[c].p2p)
                fprintf(stderr, " %s", coll__colls[c].name);
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
        if (!coll__desc_moves_data(&coll__colls[o->coll]))
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
        if (!coll__desc_moves_data(&coll__colls[o.coll]))
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
