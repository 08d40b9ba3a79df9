/*
 * trace.c - the trace viewer: COLL_TRACE's Chrome trace JSON (one file per rank) read back,
 * one op's schedules rebuilt and its measured times beside the predicted ones.
 */
#include "collviz.h"
#include "collviz_json.h"

/* ---- measured traces: COLL_TRACE's Chrome trace JSON --------------------------------- */

/* src/core/trace.c writes one file per rank (pid = rank); collviz merges them, takes one op
 * (--op SEQ, else the largest collective every rank ran, the last of those), rebuilds its
 * schedules with the builder the trace names, and pairs each step with the times the trace
 * recorded for it. */

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
bool looks_json(const char *path)
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
int load_json_traces(struct viz *v, struct opts *o, struct measured *m)
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

void measured_free(struct measured *m)
{
    free(m->t0);
    free(m->t1);
    memset(m, 0, sizeof(*m));
}

/* Per round: when the cost model's lockstep rounds put it, and when the trace saw it run
 * (first start to last end of its steps, over all ranks). */
void print_measured(const struct render *rd, const struct measured *m, FILE *f)
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

