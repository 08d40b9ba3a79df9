/*
 * records.c - what rank 0 keeps and writes: --json (and its snapshot under a signal),
 * --csv, -F, and the modes that read records back (--compare, --plot) or need no
 * communicator (--version).
 */
#include "collbench.h"

/* ---- records -------------------------------------------------------------------------- */

bool record_row(struct bench *b, const struct row_rec *rec)
{
    if (b->nrows == b->caprows) {
        size_t cap = b->caprows ? 2 * b->caprows : 64;
        struct row_rec *p = realloc(b->rows, cap * sizeof(*p));
        if (!p)
            return false;
        b->rows = p;
        b->caprows = cap;
    }
    b->rows[b->nrows++] = *rec;
    return true;
}

static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

const char *op_label(const struct bench *b, coll_op_t op)
{
    return coll__colls[b->o.coll].reduces ? op_names[op] : "none";
}

const char *dtype_label(const struct bench *b, coll_dtype_t dt)
{
    return coll__desc_moves_data(&coll__colls[b->o.coll]) ? dtypes[dt].name : "none";
}

const char *transport_name(const struct bench *b)
{
    return b->comm ? b->desc.transports : "none";
}

/* COLL_SELECT as the comm read it. */
const char *select_name(const struct bench *b)
{
    return b->desc.select;
}

void csv_row(struct bench *b, const struct row_rec *rec)
{
    static const char *const place[2] = {"out-of-place", "in-place"};

    for (int ip = 0; ip < 2; ip++) {
        const struct col_rec *c = &rec->col[ip];
        char wrong[32];
        if (!c->ran)
            continue;
        if (c->checked)
            snprintf(wrong, sizeof(wrong), "%" PRIu64, c->wrong);
        else
            wrong[0] = '\0';
        csv_field(b->csv, coll__colls[b->o.coll].name);
        fprintf(b->csv, ",%d,", b->nranks);
        csv_field(b->csv, transport_name(b));
        fputc(',', b->csv);
        csv_field(b->csv, b->hostname);
        fprintf(b->csv,
                ",%ld,%s,%s,%d,%" PRIu64 ",%zu,%s,%zu,%s,%.6g,%.6g,%.6g,%s,%" PRId64
                ",%.6g,%.6g,%.6g\n",
                rec->cycle, dtype_label(b, rec->dt), op_label(b, rec->op), rec->root, rec->bytes,
                rec->count, rec->algo, rec->chunk_bytes, place[ip], c->time_us, c->algbw, c->busbw,
                wrong, c->iters, c->tmin_us, c->tavg_us, c->tmax_us);
    }
    fflush(b->csv);
}

void times_rows(struct bench *b, const struct row_rec *rec, int ip)
{
    for (int i = 0; i < b->nranks; i++)
        fprintf(b->tfile, "%ld\t%s\t%s\t%d\t%" PRIu64 "\t%zu\t%s\t%d\t%.6g\t%" PRId64 "\n",
                rec->cycle, dtype_label(b, rec->dt), op_label(b, rec->op), rec->root, rec->bytes,
                rec->count, ip ? "in-place" : "out-of-place", i, b->times[i] * 1e6,
                rec->col[ip].iters);
}

static void json_col(FILE *f, const struct col_rec *c)
{
    if (!c->ran) {
        fputs("null", f);
        return;
    }
    fputs("{\"time_us\": ", f);
    coll__json_num(f, c->time_us);
    fputs(", \"algbw_GBps\": ", f);
    coll__json_num(f, c->algbw);
    fputs(", \"busbw_GBps\": ", f);
    coll__json_num(f, c->busbw);
    if (c->checked)
        fprintf(f, ", \"wrong\": %" PRIu64, c->wrong);
    else
        fputs(", \"wrong\": null", f);
    fprintf(f, ", \"iters\": %" PRId64 ", \"time_min_us\": ", c->iters);
    coll__json_num(f, c->tmin_us);
    fputs(", \"time_avg_us\": ", f);
    coll__json_num(f, c->tavg_us);
    fputs(", \"time_max_us\": ", f);
    coll__json_num(f, c->tmax_us);
    fputs(", \"time_span_us\": ", f);
    coll__json_num(f, c->span_us);
    fprintf(f, ", \"late_starts\": %d}", c->late);
}

static void utc_now(char *buf, size_t n)
{
    time_t t = time(NULL);
    struct tm tm;

    if (gmtime_r(&t, &tm))
        strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
    else
        snprintf(buf, n, "unknown");
}

void version_string(char *buf, size_t n)
{
    int v = 0;

    if (coll_get_version(&v) != COLL_SUCCESS)
        v = 0;
    snprintf(buf, n, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
}

void write_json(struct bench *b, FILE *f, const char *status)
{
    const struct opts *o = &b->o;
    char date[64], ver[32];
    bool first;

    utc_now(date, sizeof(date));
    version_string(ver, sizeof(ver));
    fputs("{\n  \"tool\": \"collbench\",\n  \"format\": 1,\n  \"collective\": ", f);
    coll__json_str(f, coll__colls[o->coll].name);
    fprintf(f, ",\n  \"coll_version\": \"%s\",\n  \"date\": ", ver);
    coll__json_str(f, date);
    fputs(",\n  \"host\": ", f);
    coll__json_str(f, b->hostname);
    fprintf(f, ",\n  \"nranks\": %d,\n  \"transport\": ", b->nranks);
    coll__json_str(f, transport_name(b));
    fputs(",\n  \"algo_forced\": ", f);
    coll__json_str(f, getenv("COLL_ALGO") ? getenv("COLL_ALGO") : "");
    fputs(",\n  \"status\": ", f);
    coll__json_str(f, status);
    fputs(",\n  \"argv\": [", f);
    for (int i = 0; i < b->argc; i++) {
        if (i)
            fputs(", ", f);
        coll__json_str(f, b->argv[i]);
    }
    fputs("],\n  \"ranks\": [", f);
    for (int i = 0; b->ranks_known && i < b->nranks; i++) {
        fprintf(f, "%s{\"rank\": %d, \"host\": ", i ? ", " : "", i);
        coll__json_str(f, b->hosts[i]);
        fprintf(f, ", \"pid\": %" PRId64, b->pids[i]);
        if (b->cuda)
            fprintf(f, ", \"cuda_device\": %d", b->devices[i]);
        fputc('}', f);
    }
    fprintf(f,
            "],\n  \"options\": {\"minbytes\": %" PRIu64 ", \"maxbytes\": %" PRIu64
            ", \"stepfactor\": %" PRIu64 ", \"stepbytes\": %" PRIu64
            ", \"iters\": %d, \"warmup_iters\": %d, \"agg_iters\": %d, \"run_cycles\": %ld, "
            "\"check\": %d, \"blocking\": %d, \"average\": %d, \"timeout_s\": %d, "
            "\"time_budget_s\": ",
            o->min_bytes, o->max_bytes, o->step_factor, o->step_bytes, o->iters, o->warmup,
            o->agg_iters, o->cycles, o->check, o->blocking, o->average, o->timeout_s);
    coll__json_num(f, o->budget_s);
    fprintf(f,
            ", \"memtype\": \"%s\", \"out_of_place\": %s, \"in_place\": %s, "
            "\"shared_clock\": %s},\n",
            b->cuda ? "cuda" : "host", o->run_oop ? "true" : "false", o->run_ip ? "true" : "false",
            o->shared_clock ? "true" : "false");
    fputs("  \"env\": {", f);
    first = true;
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        char name[256];
        if (strncmp(*e, "COLL_", 5) != 0 || !eq || (size_t)(eq - *e) >= sizeof(name))
            continue;
        /* the id is a password (coll.h), not a setting */
        if (strncmp(*e, "COLL_UNIQUE_ID=", 15) == 0)
            continue;
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = '\0';
        fputs(first ? "" : ", ", f);
        coll__json_str(f, name);
        fputs(": ", f);
        coll__json_str(f, eq + 1);
        first = false;
    }
    fputs("},\n  \"results\": [", f);
    for (size_t i = 0; i < b->nrows; i++) {
        const struct row_rec *r = &b->rows[i];
        fprintf(f, "%s\n    {\"cycle\": %ld, \"type\": \"%s\", \"redop\": \"%s\", \"root\": %d, ",
                i ? "," : "", r->cycle, dtype_label(b, r->dt), op_label(b, r->op), r->root);
        fprintf(f, "\"size_bytes\": %" PRIu64 ", \"count\": %zu, \"algo\": ", r->bytes, r->count);
        coll__json_str(f, r->algo);
        fprintf(f, ", \"chunk_bytes\": %zu, \"algo_why\": ", r->chunk_bytes);
        coll__json_str(f, r->why);
        fputs(",\n     \"out_of_place\": ", f);
        json_col(f, &r->col[0]);
        fputs(",\n     \"in_place\": ", f);
        json_col(f, &r->col[1]);
        fputc('}', f);
    }
    fprintf(f, "\n  ],\n  \"out_of_bounds\": %" PRIu64 ",\n  \"avg_busbw_GBps\": ", b->wrong_total);
    coll__json_num(f, b->nresults ? b->busbw_sum / b->nresults : 0.0);
    fputs("\n}\n", f);
}

/* ---- a row ---------------------------------------------------------------------------- */

/* --json under Ctrl-C. The file is written at the end of a run; a signal that ends the run
 * early (SIGINT, and the SIGTERM or SIGHUP collrun forwards) must not leave it empty. From
 * the moment the file is opened (truncated) until it is closed, rank 0 keeps the record as
 * it stands, with status "interrupted", rendered in memory (again after every row); the
 * handler writes that text over the file (ftruncate and pwrite are async-signal-safe, stdio
 * is not) and ends the process by the same signal, so that the exit status still says what
 * happened. Two slots: the handler reads the current one while the next is rendered into
 * the other.
 *
 * One writer at a time (snap_owner): a handler that finds the final record being written
 * (or another handler at work: SIGTERM from collrun can land inside the SIGINT handler)
 * only notes its signal; the final writer raises it once the file is closed. Without that,
 * a signal landing between the last snapshot and the final write found no handler and ended
 * the process with the final record still in stdio's buffer: an empty file. */
enum { SNAP_RUNNING, SNAP_HANDLER, SNAP_FINAL };
static char *snap_buf[2];
static size_t snap_len[2];
static volatile sig_atomic_t snap_cur = -1, snap_pending;
static atomic_int snap_owner = SNAP_RUNNING;
static int snap_fd = -1;
static const int snap_sigs[] = {SIGINT, SIGTERM, SIGHUP};

static void snap_signal(int sig)
{
    int expect = SNAP_RUNNING;
    int c = snap_cur;

    if (!atomic_compare_exchange_strong(&snap_owner, &expect, SNAP_HANDLER)) {
        snap_pending = sig;
        return;
    }
    if (snap_fd >= 0 && c >= 0 && ftruncate(snap_fd, 0) == 0) {
        size_t off = 0;
        while (off < snap_len[c]) {
            ssize_t w = pwrite(snap_fd, snap_buf[c] + off, snap_len[c] - off, (off_t)off);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

void snap_update(struct bench *b)
{
    int next = snap_cur == 0 ? 1 : 0;
    char *buf = NULL;
    size_t len = 0;
    FILE *f;

    if (!b->json || snap_fd < 0 || atomic_load(&snap_owner) != SNAP_RUNNING)
        return;
    f = open_memstream(&buf, &len);
    if (!f)
        return;
    write_json(b, f, "interrupted");
    if (fclose(f) != 0) {
        free(buf);
        return;
    }
    free(snap_buf[next]);
    snap_buf[next] = buf;
    snap_len[next] = len;
    snap_cur = next;
}

void snap_start(struct bench *b)
{
    struct sigaction sa = {.sa_handler = snap_signal};

    if (!b->json)
        return;
    snap_fd = fileno(b->json);
    snap_update(b);
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < COLL_ARRAY_SIZE(snap_sigs); i++) {
        struct sigaction old;
        /* a signal the caller ignores (nohup, a background job) stays ignored */
        if (sigaction(snap_sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(snap_sigs[i], &sa, NULL);
    }
}

void snap_final_begin(void)
{
    int expect = SNAP_RUNNING;

    if (!atomic_compare_exchange_strong(&snap_owner, &expect, SNAP_FINAL)) {
        /* a handler is writing the snapshot and ends the process when it is done */
        for (;;)
            pause();
    }
}

bool snap_signalled(void)
{
    return snap_pending != 0;
}

void snap_final_end(void)
{
    int sig;

    for (size_t i = 0; i < COLL_ARRAY_SIZE(snap_sigs); i++) {
        struct sigaction old;
        if (sigaction(snap_sigs[i], NULL, &old) == 0 && old.sa_handler == snap_signal)
            signal(snap_sigs[i], SIG_DFL);
    }
    snap_cur = -1;
    snap_fd = -1;
    for (int k = 0; k < 2; k++) {
        free(snap_buf[k]);
        snap_buf[k] = NULL;
    }
    sig = snap_pending;
    if (sig) {
        fflush(NULL);
        raise(sig);
    }
}

int print_version(void)
{
    char ver[32];

    version_string(ver, sizeof(ver));
    printf("collbench (coll) %d.%d.%d, library %s\n", COLL_VERSION_MAJOR, COLL_VERSION_MINOR,
           COLL_VERSION_PATCH, ver);
    return 0;
}

/* The directory of this executable, for what ships beside it. */
bool exe_dir(char *buf, size_t n)
{
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    char *slash;

    if (len <= 0 || (size_t)len >= n - 1)
        return false;
    buf[len] = '\0';
    slash = strrchr(buf, '/');
    if (!slash)
        return false;
    *slash = '\0';
    return true;
}

bool is_file(const char *path, bool exec)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (!exec || access(path, X_OK) == 0);
}

/* bench/collbench_plot.py: $COLLBENCH_PLOT, beside the executable, in the source tree a
 * build directory sits in, or where meson installs it. */
static bool find_plot_script(char *buf, size_t n)
{
    const char *env = getenv("COLLBENCH_PLOT");
    char dir[PATH_MAX];
    static const char *const rel[] = {"/collbench_plot.py", "/../bench/collbench_plot.py",
                                      "/../../bench/collbench_plot.py",
                                      "/../share/coll/collbench_plot.py"};

    if (env && *env) {
        snprintf(buf, n, "%s", env);
        return is_file(buf, false);
    }
    if (exe_dir(dir, sizeof(dir)))
        for (size_t i = 0; i < COLL_ARRAY_SIZE(rel); i++) {
            if ((size_t)snprintf(buf, n, "%s%s", dir, rel[i]) < n && is_file(buf, false))
                return true;
        }
#ifdef COLLBENCH_DATADIR
    if ((size_t)snprintf(buf, n, "%s/collbench_plot.py", COLLBENCH_DATADIR) < n &&
        is_file(buf, false))
        return true;
#endif
    return false;
}

static const char *python(void)
{
    const char *p = getenv("COLLBENCH_PYTHON");
    return p && *p ? p : "python3";
}

/* Runs argv (a NULL-terminated list) and waits; its exit status, or 1. */
static int spawn_wait(char *const argv[])
{
    pid_t pid = fork();
    int status;

    if (pid < 0) {
        fprintf(stderr, "collbench: fork: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        execvp(argv[0], argv);
        fprintf(stderr, "collbench: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return 1;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int run_compare(const struct opts *o, char **argv)
{
    char script[PATH_MAX];
    char **args = calloc((size_t)o->nfiles + 10, sizeof(*args));
    int k = 0;

    if (!args) {
        fprintf(stderr, "collbench: out of memory\n");
        return 1;
    }
    if (!find_plot_script(script, sizeof(script))) {
        fprintf(stderr, "collbench: --compare needs collbench_plot.py (beside collbench, in "
                        "bench/, or named by COLLBENCH_PLOT)\n");
        free(args);
        return 1;
    }
    args[k++] = (char *)python();
    args[k++] = script;
    args[k++] = "compare";
    for (int i = 0; i < o->nfiles; i++)
        args[k++] = argv[o->files[i]];
    args[k++] = "--placement";
    args[k++] = (char *)o->placement;
    if (o->plot_path) {
        args[k++] = "-o";
        args[k++] = (char *)o->plot_path;
    }
    args[k] = NULL;
    fflush(stdout);
    execvp(args[0], args);
    fprintf(stderr, "collbench: cannot run %s: %s\n", args[0], strerror(errno));
    free(args);
    return 1;
}

int run_plot(const char *json_path, const char *png)
{
    char script[PATH_MAX];
    char *args[] = {(char *)python(), script, "plot", (char *)json_path, "-o", (char *)png, NULL};
    int rc;

    if (!find_plot_script(script, sizeof(script))) {
        fprintf(stderr, "collbench: --plot needs collbench_plot.py (beside collbench, in bench/, "
                        "or named by COLLBENCH_PLOT)\n");
        return 1;
    }
    fflush(stdout);
    rc = spawn_wait(args);
    if (rc)
        fprintf(stderr, "collbench: --plot %s failed (status %d)\n", png, rc);
    return rc ? 1 : 0;
}

/* Rank 0's output files; false (with a message) when one cannot be opened. */
bool open_outputs(struct bench *b)
{
    const struct opts *o = &b->o;

    if (o->json_path && !(b->json = fopen(o->json_path, "w"))) {
        fprintf(stderr, "collbench: cannot write --json '%s': %s\n", o->json_path, strerror(errno));
        return false;
    }
    if (o->csv_path) {
        char ver[32], date[64];
        if (!(b->csv = fopen(o->csv_path, "w"))) {
            fprintf(stderr, "collbench: cannot write --csv '%s': %s\n", o->csv_path,
                    strerror(errno));
            return false;
        }
        version_string(ver, sizeof(ver));
        utc_now(date, sizeof(date));
        fprintf(b->csv, "# collbench %s, coll %s, %s, host %s, nranks %d, transport %s%s\n",
                coll__colls[o->coll].name, ver, date, b->hostname, b->nranks, transport_name(b),
                b->cuda ? ", memtype cuda" : "");
        for (char **e = environ; *e; e++)
            if (strncmp(*e, "COLL_", 5) == 0 && strncmp(*e, "COLL_UNIQUE_ID=", 15) != 0)
                fprintf(b->csv, "# env %s\n", *e);
        fprintf(b->csv,
                "collective,nranks,transport,host,cycle,type,redop,root,size_bytes,"
                "count,algo,chunk_bytes,placement,time_us,algbw_GBps,busbw_GBps,wrong,iters,"
                "time_min_us,time_avg_us,time_max_us\n");
        fflush(b->csv);
    }
    if (o->times_path) {
        if (!(b->tfile = fopen(o->times_path, "w"))) {
            fprintf(stderr, "collbench: cannot write -F '%s': %s\n", o->times_path,
                    strerror(errno));
            return false;
        }
        fprintf(b->tfile,
                "cycle\ttype\tredop\troot\tsize_bytes\tcount\tplacement\trank\ttime_us\titers\n");
    }
    return true;
}

/* Closes rank 0's files; false when one of them could not be written completely. */
bool close_outputs(struct bench *b)
{
    bool ok = true;
    FILE **files[] = {&b->json, &b->csv, &b->tfile};
    const char *names[] = {b->o.json_path, b->o.csv_path, b->o.times_path};

    for (size_t i = 0; i < COLL_ARRAY_SIZE(files); i++) {
        if (!*files[i])
            continue;
        if (ferror(*files[i]) | (fclose(*files[i]) != 0)) {
            fprintf(stderr, "collbench: error writing '%s'\n", names[i]);
            ok = false;
        }
        *files[i] = NULL;
    }
    return ok;
}
