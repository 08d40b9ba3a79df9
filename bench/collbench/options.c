/*
 * options.c - the collectives, dtypes and ops by their nccl-tests names, and the
 * command line: nccl-tests' flags, collbench's own, and the modes they select.
 */
#include "collbench.h"

/* How the swept size maps onto a call: from the row's block shape. */
enum size_rule size_rule(enum coll_coll c)
{
    const struct coll_coll_desc *d = &coll__colls[c];

    if (d->send_blocks == COLL_BLOCKS_NONE && d->recv_blocks == COLL_BLOCKS_NONE)
        return RULE_NONE;
    if (d->send_blocks == COLL_BLOCKS_N && d->recv_blocks == COLL_BLOCKS_N)
        return RULE_ALLTOALL;
    if (d->recv_blocks == COLL_BLOCKS_N)
        return RULE_GATHER;
    if (d->send_blocks == COLL_BLOCKS_N)
        return RULE_SCATTER;
    return RULE_SAME;
}

const struct dtype_info dtypes[COLL_NUM_DTYPES] = {
    [COLL_INT8] = {"int8", "char", NULL, 1, true, false, INT8_MAX, 0, 0, 0},
    [COLL_UINT8] = {"uint8", NULL, NULL, 1, false, false, UINT8_MAX, 0, 0, 0},
    [COLL_INT32] = {"int32", "int", NULL, 4, true, false, INT32_MAX, 0, 0, 0},
    [COLL_UINT32] = {"uint32", NULL, NULL, 4, false, false, UINT32_MAX, 0, 0, 0},
    [COLL_INT64] = {"int64", NULL, NULL, 8, true, false, INT64_MAX, 0, 0, 0},
    [COLL_UINT64] = {"uint64", NULL, NULL, 8, false, false, INT64_MAX, 0, 0, 0}, /* int64 math */
    [COLL_FLOAT16] = {"half", "float16", "fp16", 2, true, true, 1u << 11, 5, 10, 15},
    [COLL_FLOAT32] = {"float", "float32", "fp32", 4, true, true, 1u << 24, 0, 0, 0},
    [COLL_FLOAT64] = {"double", "float64", "fp64", 8, true, true, 1ull << 53, 0, 0, 0},
    [COLL_BFLOAT16] = {"bfloat16", "bf16", NULL, 2, true, true, 1u << 8, 8, 7, 127},
    [COLL_FLOAT8E4M3] = {"f8e4m3", "fp8_e4m3", NULL, 1, true, true, 1u << 4, 4, 3, 7},
    [COLL_FLOAT8E5M2] = {"f8e5m2", "fp8_e5m2", NULL, 1, true, true, 1u << 3, 5, 2, 15},
};

const char *const op_names[COLL_NUM_OPS] = {
    [COLL_SUM] = "sum", [COLL_PROD] = "prod", [COLL_MAX] = "max",
    [COLL_MIN] = "min", [COLL_AVG] = "avg",
};

const char *const average_names[5] = {"rank 0", "mean", "min", "max", "span"};

/* Under a launcher every rank parses the same arguments: only rank 0 complains. */
static bool quiet_rank(void)
{
    static const char *const vars[] = {"COLL_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *r = getenv(vars[i]);
        if (r && *r)
            return strcmp(r, "0") != 0;
    }
    return false;
}

void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s COLLECTIVE [flags]        (or as all_reduce_perf, broadcast_perf, ...)\n"
            "       %s --compare RUN... [--plot OUT.png] [--placement out|in]\n"
            "       %s --calibrate [--np N]\n"
            "       %s --help | --help-env | --version\n"
            "collectives: allreduce broadcast reduce allgather reducescatter alltoall gather\n"
            "             scatter sendrecv barrier\n"
            "nccl-tests flags:\n"
            "  -b,--minbytes SIZE     minimum size in bytes (K, M, G: binary; default 32M, or\n"
            "                         -e when that is smaller)\n"
            "  -e,--maxbytes SIZE     maximum size in bytes (default 32M, or -b when larger)\n"
            "  -f,--stepfactor N      multiply the size by N each step (>= 2; default 2)\n"
            "  -i,--stepbytes SIZE    add SIZE bytes each step instead (without -f)\n"
            "  -n,--iters N           timed iterations per size (default 20)\n"
            "  -w,--warmup_iters N    warmup iterations per size (default 5)\n"
            "  -m,--agg_iters N       calls per iteration, issued as one group (default 1)\n"
            "  -N,--run_cycles N      run the sweep N times, 0 = until stopped (default 1)\n"
            "  -c,--check N           checked calls per size and placement, 0 = off (default 1)\n"
            "  -o,--op OP             sum|prod|min|max|avg|all (default sum)\n"
            "  -d,--datatype TYPE     int8|uint8|int32|uint32|int64|uint64|half|float|double|\n"
            "                         bfloat16|f8e4m3|f8e5m2|all (default float)\n"
            "  -r,--root ROOT         root of broadcast, reduce, gather, scatter; all (default 0)\n"
            "  -z,--blocking 0|1      1: blocking calls; 0: up to %d non-blocking in flight\n"
            "  -a,--average 0-4       time across ranks: 0 rank 0, 1 mean, 2 min, 3 max (def. 1),\n"
            "                         4 span: from the last rank's start to the last rank's\n"
            "                         end, on a clock the ranks share (one machine, netns\n"
            "                         hosts; with --shared-clock, PTP-synchronized hosts)\n"
            "  -T,--timeout SEC       abort the run when one test takes longer (0 = never)\n"
            "  -F FILE                every rank's time per size, placement (TSV, rank 0 writes)\n"
            "  -t 1, -g 1             accepted: one rank per process\n"
            "  -p -y -G -C -S -J -R -x -D -V -M VALUE\n"
            "                         nccl-tests flags that mean nothing here: ignored, with a\n"
            "                         note (--parallel_init --stream_null --cudagraph\n"
            "                         --report_cputime --report_timestamps --output_file\n"
            "                         --local_register --cta_policy --device_implementation\n"
            "                         --device_cta_count --memory_report)\n"
            "collbench flags:\n"
            "  --np N                 start N local ranks (execs collrun next to collbench)\n"
            "  --bind-to auto|core|none  with --np: collrun's binding (core: a CPU per rank;\n"
            "                         auto, collrun's default: core when each rank gets one)\n"
            "  --time-budget SEC      timed seconds per size: picks the iterations (%d..%d)\n"
            "  --algo NAME            COLL_ALGO for this run (ring, tree, allreduce=ring,...)\n"
            "  --transport NAME       COLL_TRANSPORT for this run\n"
            "  --memtype host|cuda    buffer memory (default host); cuda: cudaMalloc'ed buffers\n"
            "                         and the stream-ordered calls (not gather, scatter, barrier)\n"
            "  --device N             with --memtype cuda: CUDA device N on every rank (default:\n"
            "                         the local rank modulo the number of devices)\n"
            "  --inplace-only, --outofplace-only\n"
            "  --shared-clock         the ranks share CLOCK_REALTIME (one machine, netns hosts,\n"
            "                         PTP): timed calls start at one instant rank 0 names, and\n"
            "                         each rank's time runs from it, not from its own exit from\n"
            "                         the start barrier (as collsim times a call)\n"
            "  --json FILE, --csv FILE   every size and the run's metadata\n"
            "  --plot FILE.png        busbw and time vs size (python3 + matplotlib or gnuplot)\n"
            "  --explain              per size, the algorithms the cost model ranks and the one\n"
            "                         the selector picks; runs no collective (--np N: on the N\n"
            "                         ranks --np starts; with --per-host K: N ranks on paper, on\n"
            "                         hosts of K ranks, shm inside, tcp between, none started)\n"
            "  --exact                with --explain: rank by walking every rank's schedule\n"
            "                         (COLL_SELECT=exact; up to 1024 ranks) instead of the\n"
            "                         closed forms the selector uses\n"
            "  --calibrate            measure this machine (links between ranks 0 and 1, host\n"
            "                         reductions, copies) into COLL_CALIB_FILE or the default\n"
            "                         calibration file the selector reads\n"
            "  --help-env             every COLL_* variable with its default\n"
            "  --topo                 this host's cores, NUMA nodes, NICs, GPUs; under a launcher\n"
            "                         also which ranks share a host (COLL_TOPO=sysfs: no hwloc)\n",
            prog, prog, prog, prog, WINDOW, MIN_ITERS, MAX_ITERS);
}

const char *prog_name = "collbench";

__attribute__((format(printf, 1, 2))) int usage_error(const char *fmt, ...)
{
    va_list ap;

    if (quiet_rank())
        return EXIT_USAGE;
    fprintf(stderr, "%s: ", prog_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fprintf(stderr,
            "usage: %s COLLECTIVE [-b MIN] [-e MAX] [-f FACTOR|-i STEP] [-n ITERS] [-c N] ...\n"
            "       %s --compare RUN... | --help | --help-env | --version\n"
            "Try '%s --help' for every flag.\n",
            prog_name, prog_name, prog_name);
    return EXIT_USAGE;
}

/* A size as the COLL_* settings take one (coll__parse_size: decimal, K, M or G binary,
 * "64K", "64KiB", "64KB"), starting with a digit (no sign, no blank), and no larger than
 * buffers of it can be: addressable twice, with room to spare. */
static bool parse_size(const char *s, uint64_t *v_p)
{
    int64_t v;

    if (*s < '0' || *s > '9' || !coll__parse_size(s, &v) || (uint64_t)v > SIZE_MAX / 4)
        return false;
    *v_p = (uint64_t)v;
    return true;
}

static bool parse_int(const char *s, long lo, long hi, int *v_p)
{
    long v;

    if (!coll__parse_long(s, lo, hi, &v))
        return false;
    *v_p = (int)v;
    return true;
}

bool coll_by_name(const char *s, enum coll_coll *c_p)
{
    return coll__coll_from_name(s, strlen(s), c_p);
}

/* argv[0]'s basename as nccl-tests names its programs; "_mpi" suffixes too. */
static bool coll_by_prog(const char *argv0, enum coll_coll *c_p)
{
    const char *base = strrchr(argv0, '/');
    size_t len;

    base = base ? base + 1 : argv0;
    len = strlen(base);
    if (len > 4 && strcmp(base + len - 4, "_mpi") == 0)
        len -= 4;
    for (int c = 0; c < COLL_NUM_COLLS; c++)
        if (strlen(coll__colls[c].perf) == len && strncmp(base, coll__colls[c].perf, len) == 0) {
            *c_p = (enum coll_coll)c;
            return true;
        }
    return false;
}

static const struct opt_def opt_defs[] = {
    {'b', "minbytes", true, O_MINBYTES},
    {'e', "maxbytes", true, O_MAXBYTES},
    {'i', "stepbytes", true, O_STEPBYTES},
    {'f', "stepfactor", true, O_STEPFACTOR},
    {'n', "iters", true, O_ITERS},
    {'w', "warmup_iters", true, O_WARMUP},
    {'m', "agg_iters", true, O_AGG},
    {'N', "run_cycles", true, O_CYCLES},
    {'c', "check", true, O_CHECK},
    {'o', "op", true, O_OP},
    {'d', "datatype", true, O_DTYPE},
    {'r', "root", true, O_ROOT},
    {'z', "blocking", true, O_BLOCKING},
    {'a', "average", true, O_AVERAGE},
    {'T', "timeout", true, O_TIMEOUT},
    {'F', NULL, true, O_TIMESFILE},
    {'t', "nthreads", true, O_NTHREADS},
    {'g', "ngpus", true, O_NGPUS},
    {'h', "help", false, O_HELP},
    {0, "np", true, O_NP},
    {0, "bind-to", true, O_BIND},
    {0, "per-host", true, O_PER_HOST},
    {0, "time-budget", true, O_BUDGET},
    {0, "algo", true, O_ALGO},
    {0, "transport", true, O_TRANSPORT},
    {0, "memtype", true, O_MEMTYPE},
    {0, "device", true, O_DEVICE},
    {0, "inplace-only", false, O_IPONLY},
    {0, "outofplace-only", false, O_OOPONLY},
    {0, "json", true, O_JSON},
    {0, "csv", true, O_CSV},
    {0, "plot", true, O_PLOT},
    {0, "help-env", false, O_HELPENV},
    {0, "topo", false, O_TOPO},
    {0, "version", false, O_VERSION},
    {0, "compare", false, O_COMPARE},
    {0, "placement", true, O_PLACEMENT},
    {0, "calibrate", false, O_CALIBRATE},
    {0, "explain", false, O_EXPLAIN},
    {0, "exact", false, O_EXACT},
    {0, "shared-clock", false, O_SHARED_CLOCK},
    /* nccl-tests 2.x flags that mean nothing here (CUDA graphs, CTA policies, registration,
     * parallel init, ...): scripts pass them, so they are accepted and ignored with a note */
    {'p', "parallel_init", true, O_NCCL_IGNORED},
    {'y', "stream_null", true, O_NCCL_IGNORED},
    {'G', "cudagraph", true, O_NCCL_IGNORED},
    {'C', "report_cputime", true, O_NCCL_IGNORED},
    {'S', "report_timestamps", true, O_NCCL_IGNORED},
    {'J', "output_file", true, O_NCCL_IGNORED},
    {'R', "local_register", true, O_NCCL_IGNORED},
    {'x', "cta_policy", true, O_NCCL_IGNORED},
    {'D', "device_implementation", true, O_NCCL_IGNORED},
    {'V', "device_cta_count", true, O_NCCL_IGNORED},
    {'M', "memory_report", true, O_NCCL_IGNORED},
};

/* Finds the option a names: "-b", "-b8", "--minbytes", "--minbytes=8". *inline_p is the
 * value glued to it, or NULL. */
const struct opt_def *find_opt(const char *a, const char **inline_p)
{
    *inline_p = NULL;
    if (a[0] == '-' && a[1] == '-') {
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        for (size_t k = 0; k < COLL_ARRAY_SIZE(opt_defs); k++) {
            const char *ln = opt_defs[k].long_name;
            if (ln && strlen(ln) == len && strncmp(ln, name, len) == 0) {
                if (eq)
                    *inline_p = eq + 1;
                return &opt_defs[k];
            }
        }
        return NULL;
    }
    for (size_t k = 0; k < COLL_ARRAY_SIZE(opt_defs); k++)
        if (opt_defs[k].short_name && opt_defs[k].short_name == a[1]) {
            if (a[2] != '\0')
                *inline_p = a + 2;
            return &opt_defs[k];
        }
    return NULL;
}

static bool parse_dtype(const char *v, struct opts *o)
{
    o->ndtypes = 0;
    for (int k = 0; k < COLL_NUM_DTYPES; k++) {
        const struct dtype_info *d = &dtypes[k];
        if (strcmp(v, "all") == 0 || strcmp(v, d->name) == 0 ||
            (d->alias1 && strcmp(v, d->alias1) == 0) || (d->alias2 && strcmp(v, d->alias2) == 0))
            o->dtype_list[o->ndtypes++] = (coll_dtype_t)k;
    }
    return o->ndtypes > 0;
}

static bool parse_op(const char *v, struct opts *o)
{
    o->nops = 0;
    for (int k = 0; k < COLL_NUM_OPS; k++)
        if (strcmp(v, "all") == 0 || strcmp(v, op_names[k]) == 0)
            o->op_list[o->nops++] = (coll_op_t)k;
    return o->nops > 0;
}

/* One option's value into o. Returns -1 when fine, else an exit status. */
static int apply_opt(const struct opt_def *d, const char *a, const char *v, struct opts *o,
                     int *factor_p, bool *factor_set_p, bool *step_set_p)
{
    int iv;

    switch (d->id) {
    case O_MINBYTES:
        if (!parse_size(v, &o->min_bytes))
            return usage_error("bad size '%s' for %s", v, a);
        break;
    case O_MAXBYTES:
        if (!parse_size(v, &o->max_bytes))
            return usage_error("bad size '%s' for %s", v, a);
        break;
    case O_STEPBYTES:
        if (!parse_size(v, &o->step_bytes) || o->step_bytes == 0)
            return usage_error("bad step '%s' for %s (bytes, > 0)", v, a);
        *step_set_p = true;
        break;
    case O_STEPFACTOR:
        if (!parse_int(v, 0, 1 << 20, factor_p))
            return usage_error("bad step factor '%s'", v);
        *factor_set_p = true;
        break;
    case O_ITERS:
        if (!parse_int(v, 1, 1000000000, &o->iters))
            return usage_error("bad iteration count '%s' (>= 1)", v);
        break;
    case O_WARMUP:
        if (!parse_int(v, 0, 1000000000, &o->warmup))
            return usage_error("bad warmup count '%s' (>= 0)", v);
        break;
    case O_AGG:
        if (!parse_int(v, 1, 1000000, &o->agg_iters))
            return usage_error("bad aggregation count '%s' for %s (>= 1)", v, a);
        break;
    case O_CYCLES:
        if (!coll__parse_long(v, 0, LONG_MAX, &o->cycles))
            return usage_error("bad cycle count '%s' for %s (>= 0; 0 = until stopped)", v, a);
        break;
    case O_CHECK:
        if (!parse_int(v, 0, 1000000, &o->check))
            return usage_error("bad value '%s' for %s (checked calls, >= 0)", v, a);
        break;
    case O_BLOCKING:
        if (!parse_int(v, 0, 1, &iv))
            return usage_error("bad value '%s' for %s (0 or 1)", v, a);
        o->blocking = iv;
        break;
    case O_AVERAGE:
        if (!parse_int(v, 0, 4, &o->average))
            return usage_error("bad value '%s' for %s (0 rank 0, 1 mean, 2 min, 3 max, 4 span)",
                               v, a);
        break;
    case O_TIMEOUT:
        if (!parse_int(v, 0, 86400 * 365, &o->timeout_s))
            return usage_error("bad timeout '%s' for %s (whole seconds, 0 = none; the time "
                               "budget per size is --time-budget)",
                               v, a);
        break;
    case O_BUDGET: {
        char *end;
        errno = 0;
        o->budget_s = strtod(v, &end);
        if (errno || end == v || *end != '\0' || !isfinite(o->budget_s) || o->budget_s <= 0 ||
            o->budget_s > 86400)
            return usage_error("bad time budget '%s' (seconds, > 0)", v);
        break;
    }
    case O_ROOT:
        if (strcmp(v, "all") == 0) {
            o->all_roots = true;
            o->root = 0;
        } else if (!parse_int(v, 0, INT32_MAX, &o->root)) {
            return usage_error("bad root '%s' (a rank, or all)", v);
        } else {
            o->all_roots = false;
        }
        break;
    case O_OP:
        if (!parse_op(v, o))
            return usage_error("unknown op '%s' (sum, prod, max, min, avg, all)", v);
        break;
    case O_DTYPE:
        if (!parse_dtype(v, o))
            return usage_error("unknown dtype '%s'", v);
        break;
    case O_TIMESFILE:
        o->times_path = v;
        break;
    case O_NTHREADS:
    case O_NGPUS:
        if (!parse_int(v, 1, 1, &iv))
            return usage_error("%s %s: collbench runs one rank per process (start more with "
                               "--np or collrun -n)",
                               a, v);
        break;
    case O_NP:
        if (!parse_int(v, 1, COLLBENCH_EXPLAIN_MAX, &o->np))
            return usage_error("bad rank count '%s' for --np (1..%d to run, 1..%d on paper "
                               "with --explain --per-host K)", v, COLLBENCH_RUN_MAX,
                               COLLBENCH_EXPLAIN_MAX);
        break;
    case O_BIND:
        if (strcmp(v, "auto") && strcmp(v, "core") && strcmp(v, "none"))
            return usage_error("bad --bind-to '%s' (auto, core or none)", v);
        o->bind = v;
        break;
    case O_PER_HOST:
        if (!parse_int(v, 1, 4096, &o->per_host))
            return usage_error("bad rank count '%s' for --per-host (1..4096)", v);
        break;
    case O_ALGO:
        if (!*v)
            return usage_error("--algo needs a name");
        o->algo = v;
        break;
    case O_TRANSPORT:
        if (!*v)
            return usage_error("--transport needs a name");
        o->transport = v;
        break;
    case O_MEMTYPE:
        if (strcmp(v, "host") == 0)
            o->memtype_cuda = false;
        else if (strcmp(v, "cuda") == 0)
            o->memtype_cuda = true;
        else
            return usage_error("unknown memory type '%s' (host or cuda)", v);
        break;
    case O_DEVICE:
        if (!parse_int(v, 0, 1023, &o->device))
            return usage_error("bad CUDA device '%s' for --device (0..1023)", v);
        break;
    case O_IPONLY:
        o->run_oop = false;
        if (!o->run_ip)
            return usage_error("--inplace-only and --outofplace-only exclude each other");
        break;
    case O_OOPONLY:
        o->run_ip = false;
        if (!o->run_oop)
            return usage_error("--inplace-only and --outofplace-only exclude each other");
        break;
    case O_JSON:
        o->json_path = v;
        break;
    case O_CSV:
        o->csv_path = v;
        break;
    case O_PLOT:
        o->plot_path = v;
        break;
    case O_PLACEMENT:
        if (strcmp(v, "out") != 0 && strcmp(v, "in") != 0)
            return usage_error("bad placement '%s' (out or in)", v);
        o->placement = v;
        break;
    case O_CALIBRATE:
        o->calibrate = true;
        break;
    case O_EXPLAIN:
        o->explain = true;
        break;
    case O_EXACT:
        o->exact = true;
        break;
    case O_SHARED_CLOCK:
        o->shared_clock = true;
        break;
    case O_NCCL_IGNORED:
        if (!quiet_rank())
            fprintf(stderr,
                    "%s: note: -%c %s (nccl-tests' --%s) means nothing to collbench; "
                    "ignored%s\n",
                    prog_name, d->short_name, v, d->long_name,
                    d->short_name == 'J' ? " (collbench writes JSON with --json FILE)" : "");
        break;
    case O_HELP:
    case O_HELPENV:
    case O_TOPO:
    case O_VERSION:
    case O_COMPARE:
        break; /* modes: handled by the caller */
    }
    return -1;
}

int parse_opts(int argc, char **argv, struct opts *o)
{
    bool factor_set = false, step_set = false, coll_set, min_set = false, max_set = false;
    int factor = 2;

    *o = (struct opts){
        .min_bytes = 32u << 20,
        .max_bytes = 32u << 20,
        .step_bytes = 1u << 20,
        .iters = 20,
        .warmup = 5,
        .agg_iters = 1,
        .cycles = 1,
        .check = 1,
        .average = 1,
        .blocking = false,
        .device = -1,
        .root = 0,
        .ndtypes = 1,
        .dtype_list = {COLL_FLOAT32},
        .nops = 1,
        .op_list = {COLL_SUM},
        .run_oop = true,
        .run_ip = true,
        .placement = "out",
    };
    coll_set = coll_by_prog(argv[0], &o->coll);
    o->files = calloc((size_t)argc, sizeof(*o->files));
    if (!o->files) {
        fprintf(stderr, "%s: out of memory\n", prog_name);
        return 1;
    }
    /* The mode first: --compare takes files where a run takes a collective. */
    for (int i = 1; i < argc; i++) {
        const char *inl;
        const struct opt_def *d = argv[i][0] == '-' ? find_opt(argv[i], &inl) : NULL;
        if (strcmp(argv[i], "--") == 0)
            break;
        if (!d)
            continue;
        if (d->id == O_HELP) {
            o->mode = MODE_HELP;
            return -1;
        }
        if (d->id == O_TOPO)
            o->mode = MODE_TOPO;
        if (d->id == O_HELPENV || d->id == O_VERSION || d->id == O_COMPARE)
            o->mode = d->id == O_HELPENV   ? MODE_HELP_ENV
                      : d->id == O_VERSION ? MODE_VERSION
                                           : MODE_COMPARE;
        if (d->has_arg && !inl)
            i++; /* skip its value, which may look like anything */
    }
    if (o->mode == MODE_HELP_ENV || o->mode == MODE_VERSION || o->mode == MODE_TOPO)
        return -1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL, *inl;
        const struct opt_def *d;
        int rc;

        if (a[0] != '-' || a[1] == '\0') {
            if (o->mode == MODE_COMPARE) {
                o->files[o->nfiles++] = i;
            } else if (!coll_set) {
                if (!coll_by_name(a, &o->coll))
                    return usage_error("unknown collective '%s'", a);
                coll_set = true;
            } else {
                return usage_error("unexpected argument '%s'", a);
            }
            continue;
        }
        d = find_opt(a, &inl);
        if (!d)
            return usage_error("unknown flag '%s'", a);
        if (d->has_arg) {
            if (inl)
                v = inl;
            else if (i + 1 < argc)
                v = argv[++i];
            else
                return usage_error("flag '%s' needs a value", a);
        } else if (inl) {
            return usage_error("flag '%s' takes no value", a);
        }
        rc = apply_opt(d, a, v, o, &factor, &factor_set, &step_set);
        if (rc >= 0)
            return rc;
        min_set |= d->id == O_MINBYTES;
        max_set |= d->id == O_MAXBYTES;
    }
    if (o->mode == MODE_COMPARE) {
        if (o->nfiles < 1)
            return usage_error("--compare needs at least one run (JSON, peers' results.tsv or "
                               "a table)");
        return -1;
    }
    if (o->calibrate && o->explain)
        return usage_error("--calibrate and --explain exclude each other");
    if (o->exact && !o->explain)
        return usage_error("--exact is --explain's (rank by walking every rank's schedule)");
    /* the schedule walker holds every rank's schedule: 18 GB for an all-reduce at 4,096 */
    if (o->exact && o->np > COLLBENCH_EXACT_MAX)
        return usage_error("--explain --exact walks every rank's schedule: at most %d ranks "
                           "(--np %d); without --exact the closed forms price any count",
                           COLLBENCH_EXACT_MAX, o->np);
    /* more ranks than a launch takes only on paper: --explain --per-host K starts nothing */
    if (o->np > COLLBENCH_RUN_MAX && !(o->explain && o->per_host > 0))
        return usage_error("bad rank count %d for --np (1..%d; on paper, --explain --per-host "
                           "K: up to %d)", o->np, COLLBENCH_RUN_MAX, COLLBENCH_EXPLAIN_MAX);
    if (o->calibrate && !coll_set) {
        o->coll =
            COLL_COLL_ALLREDUCE; /* calibration measures links and reductions, not a collective */
        coll_set = true;
    }
    if (!coll_set)
        return usage_error("missing collective (allreduce, broadcast, reduce, allgather, "
                           "reducescatter, alltoall, gather, scatter, sendrecv, barrier)");
    /* As nccl-tests: a factor of 2 or more multiplies; otherwise -i adds. */
    if (factor_set && factor < 2 && !step_set)
        return usage_error("step factor %d: must be >= 2 (or give -i)", factor);
    o->step_factor = (factor_set && factor < 2) || (step_set && !factor_set) ? 0 : (uint64_t)factor;
    /* One bound given alone moves the other's default: -e 8 runs 8 bytes, -b 64M runs 64M,
     * instead of blaming the flag the user never typed. */
    if (o->min_bytes > o->max_bytes && !min_set)
        o->min_bytes = o->max_bytes;
    if (o->min_bytes > o->max_bytes && !max_set)
        o->max_bytes = o->min_bytes;
    if (o->min_bytes > o->max_bytes)
        return usage_error("minimum size %" PRIu64 " (-b) exceeds the maximum %" PRIu64 " (-e)",
                           o->min_bytes, o->max_bytes);
    if (!coll__colls[o->coll].reduces) {
        o->nops = 1; /* one pass, printed "none" */
        o->op_list[0] = COLL_SUM;
    }
    if (coll__colls[o->coll].root == COLL_ROOT_NONE) {
        o->root = -1;
        o->all_roots = false;
    }
    if (!coll__desc_moves_data(&coll__colls[o->coll])) {
        o->ndtypes = 1;
        o->dtype_list[0] = COLL_UINT8;
    }
    if (o->memtype_cuda && !coll__colls[o->coll].stream)
        return usage_error("--memtype cuda: coll has no stream-ordered %s (device buffers go "
                           "through the coll_*_stream calls: allreduce, broadcast, reduce, "
                           "allgather, reducescatter, alltoall, sendrecv)",
                           coll__colls[o->coll].name);
    if (o->memtype_cuda && o->calibrate)
        return usage_error("%s", "--calibrate measures host memory: drop --memtype cuda");
    if (o->device >= 0 && !o->memtype_cuda)
        return usage_error("--device %d needs --memtype cuda", o->device);
    return -1;
}
