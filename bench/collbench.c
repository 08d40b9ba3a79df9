/*
 * collbench - a benchmark of coll's collectives in the manner of nccl-tests: the same
 * programs, flags, table and bandwidth arithmetic, on host memory or (--memtype cuda) on
 * CUDA device memory through the stream-ordered calls; plus JSON/CSV records, plots,
 * comparisons and its own local launch.
 *
 *   collrun -n 4 collbench allreduce -b 8 -e 128M -f 2 -c 1
 *   collbench allreduce --np 4 -b 8 -e 128M -f 2 --json run.json --plot run.png
 *   all_reduce_perf -b 8 -e 128M -f 2          (a link to collbench: argv[0] selects)
 *   collbench --compare before.json after.json --plot cmp.png
 *
 * Under a launcher (collrun: COLL_UNIQUE_ID in the environment) it joins the launcher's
 * communicator; with --np N it execs the collrun found next to itself (so collrun's job
 * control, Ctrl-C included, is the one that applies); otherwise it is a communicator of one.
 *
 * Sizes follow nccl-tests: the swept size S gives count = S / sizeof(dtype) elements and
 *   allreduce, broadcast, reduce, sendrecv   count elements per rank; busbw factor
 *                                            2(n-1)/n (allreduce) or 1
 *   allgather, gather                        count/n elements sent per rank, n of them
 *                                            received; size column = received bytes
 *   reducescatter, scatter                   n * (count/n) sent, count/n received
 *   alltoall                                 count/n to each peer
 * and for the last three groups algbw = n * (count/n) * sizeof / time, busbw = algbw (n-1)/n.
 * The count column is the count passed to the call. barrier has one row of size 0.
 *
 * Per row (a size, dtype, op and root), out-of-place then in-place: with -c N, N rounds of
 * fill, one call, count the wrong elements on every rank and sum them; then warm up, time
 * the iterations, and combine the ranks' average times per call as -a says (nccl-tests:
 * 0 rank 0, 1 mean, 2 min, 3 max).
 *
 * Check data: every buffer is a sequence of blocks (one, or one per rank), each block a
 * period of PERIOD elements repeated. Blocks that only move (gathers, scatters, all-to-all,
 * broadcast, send/recv) hold bytes hashed from (sender, block, index, round), so a block in
 * the wrong place or from the wrong sender differs almost everywhere. Blocks that are
 * reduced hold small integers (rotated per block and round) chosen so that any partial sum
 * or product over n ranks is exact in the dtype: the expected result does not depend on the
 * order in which ranks are combined, and a missing or doubled contribution shows. Receive
 * buffers start as the bitwise complement of what is expected, so an element nobody wrote
 * is wrong.
 *
 * --memtype cuda: buffers from cudaMalloc on the rank's device (--device, else the local
 * rank modulo the devices), calls queued on one stream; a timed batch is the host clock
 * around the calls and the cudaStreamSynchronize that follows, as nccl-tests times them.
 * Check patterns are made and checked in host images copied with cudaMemcpy.
 *
 * Exit status: 0 right; 1 wrong results, a failed call, or (--memtype cuda) no usable CUDA
 * runtime or device; 2 bad arguments; 124 -T fired.
 *
 * Divisions: collectives, dtypes and ops; options; check patterns; watchdog (-T); records;
 * device memory; running calls; one row; progress, records and JSON; sweeps; header; modes
 * without a communicator (--help-env, --compare, --plot, --np); --explain and --calibrate;
 * main.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* environ, mkstemp; consistent with the tree */
#endif
#include <coll.h>

/* Internal tables: the COLL_* knob table (--help-env), the algorithm the selector picks
 * for a size (records, --explain), the cost model (--explain, --calibrate), the host
 * reductions (--calibrate) and the transport the comm uses: collbench links coll_internal.
 * Built against the public library alone (no src/ on the include path) it still measures
 * and checks everything, but records the algorithm and transport as "unknown" and refuses
 * --help-env, --explain and --calibrate. */
#if defined(__has_include)
#if __has_include("core/exec.h")
#define COLLBENCH_INTERNAL 1
#endif
#endif
#ifndef COLLBENCH_INTERNAL
#define COLLBENCH_INTERNAL 0
#endif
#if COLLBENCH_INTERNAL
#include "algo/cost.h"
#include "core/exec.h"
#include "core/internal.h"
#include "api/launcher.h"
#include "core/topo.h"
#include "cuda/cuda.h"
#include "reduce/reduce.h"
#include "path/path.h"
#include "transport/transport.h"
#define CI(x) (x) /* an internal enum value */
#else
#define CI(x) 0
#endif

#if defined(__has_include)
#if __has_include("coll_config.h")
#include "coll_config.h"
#endif
#endif
#ifndef COLL_HAVE_CUDA
#define COLL_HAVE_CUDA 0
#endif

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define EXIT_USAGE 2
#define EXIT_TIMEOUT 124 /* -T fired: as timeout(1) */
/* Check patterns repeat every PERIOD elements: a prime, so that a chunk misplaced by a
 * power-of-two offset shows. */
#define PERIOD 1021
#define WINDOW 8    /* -z 0: requests in flight at once */
#define MIN_ITERS 3 /* --time-budget bounds */
#define MAX_ITERS 20000
#define MAX_RANKS_SHOWN 64 /* header lines "#  Rank ..." beyond this are summarised */
#define HOST_MAX 64
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* --------------------------------------------------------------------------------------
 * Collectives, dtypes and ops, by the names nccl-tests prints.
 */

enum bench_coll {
    B_ALLREDUCE,
    B_BROADCAST,
    B_REDUCE,
    B_ALLGATHER,
    B_REDUCESCATTER,
    B_ALLTOALL,
    B_GATHER,
    B_SCATTER,
    B_SENDRECV,
    B_BARRIER,
    B_NUM
};

/* How the swept size maps onto a call (see the file comment). */
enum size_rule { RULE_SAME, RULE_GATHER, RULE_SCATTER, RULE_ALLTOALL, RULE_NONE };

struct coll_desc {
    const char *name;  /* first argument */
    const char *prog;  /* nccl-tests' program name: argv[0] selects */
    const char *alias; /* another accepted name, or NULL */
    int internal;      /* enum coll_coll: the selector's name for it */
    enum size_rule rule;
    bool has_op, has_root, reduces;
    double (*bus_factor)(int n);
};

static double factor_one(int n)
{
    (void)n;
    return 1.0;
}
static double factor_allreduce(int n)
{
    return 2.0 * (n - 1) / n;
}
static double factor_spread(int n)
{
    return (double)(n - 1) / n;
}
static double factor_zero(int n)
{
    (void)n;
    return 0.0;
}

static const struct coll_desc colls[B_NUM] = {
    [B_ALLREDUCE] = {"allreduce", "all_reduce_perf", NULL, CI(COLL_COLL_ALLREDUCE), RULE_SAME, true,
                     false, true, factor_allreduce},
    [B_BROADCAST] = {"broadcast", "broadcast_perf", "bcast", CI(COLL_COLL_BROADCAST), RULE_SAME,
                     false, true, false, factor_one},
    [B_REDUCE] = {"reduce", "reduce_perf", NULL, CI(COLL_COLL_REDUCE), RULE_SAME, true, true, true,
                  factor_one},
    [B_ALLGATHER] = {"allgather", "all_gather_perf", NULL, CI(COLL_COLL_ALLGATHER), RULE_GATHER,
                     false, false, false, factor_spread},
    [B_REDUCESCATTER] = {"reducescatter", "reduce_scatter_perf", "reduce_scatter",
                         CI(COLL_COLL_REDUCE_SCATTER), RULE_SCATTER, true, false, true,
                         factor_spread},
    [B_ALLTOALL] = {"alltoall", "alltoall_perf", NULL, CI(COLL_COLL_ALLTOALL), RULE_ALLTOALL, false,
                    false, false, factor_spread},
    [B_GATHER] = {"gather", "gather_perf", NULL, CI(COLL_COLL_GATHER), RULE_GATHER, false, true,
                  false, factor_spread},
    [B_SCATTER] = {"scatter", "scatter_perf", NULL, CI(COLL_COLL_SCATTER), RULE_SCATTER, false,
                   true, false, factor_spread},
    [B_SENDRECV] = {"sendrecv", "sendrecv_perf", NULL, CI(COLL_COLL_SENDRECV), RULE_SAME, false,
                    false, false, factor_one},
    [B_BARRIER] = {"barrier", "barrier_perf", NULL, CI(COLL_COLL_BARRIER), RULE_NONE, false, false,
                   false, factor_zero},
};

struct dtype_info {
    const char *name;
    const char *alias1, *alias2; /* other spellings accepted by -d */
    size_t size;
    bool is_signed;
    bool is_float;
    /* Every integer in [-exact, exact] (or [0, exact] unsigned) is representable. */
    uint64_t exact;
    /* Small floats: exponent and fraction bits and the bias (0 for the others). */
    int ebits, mbits, bias;
};

static const struct dtype_info dtypes[COLL_NUM_DTYPES] = {
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

static const char *const op_names[COLL_NUM_OPS] = {
    [COLL_SUM] = "sum", [COLL_PROD] = "prod", [COLL_MAX] = "max",
    [COLL_MIN] = "min", [COLL_AVG] = "avg",
};

/* Device buffers go through the stream-ordered calls (coll.h), which exist for these. */
static bool has_stream_call(enum bench_coll c)
{
    return c != B_GATHER && c != B_SCATTER && c != B_BARRIER;
}

static const char *const average_names[4] = {"rank 0", "mean", "min", "max"};

/* --------------------------------------------------------------------------------------
 * Options.
 */

enum mode { MODE_RUN, MODE_HELP, MODE_HELP_ENV, MODE_VERSION, MODE_COMPARE, MODE_TOPO };

struct opts {
    enum mode mode;
    enum bench_coll coll;
    uint64_t min_bytes, max_bytes, step_bytes;
    uint64_t step_factor; /* > 1: multiply; 0: add step_bytes */
    int iters, warmup, agg_iters;
    long cycles;     /* -N: 0 = until stopped */
    int check;       /* -c: checked rounds per column, 0 = none */
    bool blocking;   /* -z */
    int average;     /* -a: 0 rank 0, 1 mean, 2 min, 3 max */
    int timeout_s;   /* -T: 0 = none */
    double budget_s; /* --time-budget; 0: use iters */
    int root;        /* -r; -1 with all_roots */
    bool all_roots;
    int ndtypes, nops;
    coll_dtype_t dtype_list[COLL_NUM_DTYPES];
    coll_op_t op_list[COLL_NUM_OPS];
    bool run_oop, run_ip;
    const char *json_path, *csv_path, *times_path, *plot_path;
    const char *algo, *transport;
    int np; /* --np: 0 = not given */
    const char *bind; /* --bind-to auto|core|none for collrun; NULL = not given (auto) */
    int per_host; /* --per-host: --explain --np N as hosts of this many ranks; 0 = one host */
    bool memtype_cuda;
    int device; /* --device: the CUDA device of every rank; -1 = local rank % devices */
    bool explain, calibrate;
    int nfiles; /* --compare: the files are argv[files[i]] */
    int *files;
    const char *placement; /* --placement for --compare */
};

/* Under a launcher every rank parses the same arguments: only rank 0 complains. */
static bool quiet_rank(void)
{
    static const char *const vars[] = {"COLL_RANK", "RANK", "OMPI_COMM_WORLD_RANK",
                                       "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *r = getenv(vars[i]);
        if (r && *r)
            return strcmp(r, "0") != 0;
    }
    return false;
}

static void usage(FILE *f, const char *prog)
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
            "  -a,--average 0-3       time across ranks: 0 rank 0, 1 mean, 2 min, 3 max (def. 1)\n"
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
            "  --json FILE, --csv FILE   every size and the run's metadata\n"
            "  --plot FILE.png        busbw and time vs size (python3 + matplotlib or gnuplot)\n"
            "  --explain              per size, the algorithms the cost model ranks and the one\n"
            "                         the selector picks (--np N: for N ranks; --per-host K: on\n"
            "                         hosts of K ranks, shm inside, tcp between); runs nothing\n"
            "  --calibrate            measure this machine (links between ranks 0 and 1, host\n"
            "                         reductions, copies) into COLL_CALIB_FILE or the default\n"
            "                         calibration file the selector reads\n"
            "  --help-env             every COLL_* variable with its default\n"
            "  --topo                 this host's cores, NUMA nodes, NICs, GPUs; under a launcher\n"
            "                         also which ranks share a host (COLL_TOPO=sysfs: no hwloc)\n",
            prog, prog, prog, prog, WINDOW, MIN_ITERS, MAX_ITERS);
}

static const char *prog_name = "collbench";

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
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

/* Decimal bytes with an optional binary suffix K, M or G. */
static bool parse_size(const char *s, uint64_t *v_p)
{
    uint64_t v = 0, mult = 1;
    const char *p = s;

    if (*p < '0' || *p > '9')
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    switch (*p) {
    case 'K':
    case 'k':
        mult = 1ull << 10;
        p++;
        break;
    case 'M':
    case 'm':
        mult = 1ull << 20;
        p++;
        break;
    case 'G':
    case 'g':
        mult = 1ull << 30;
        p++;
        break;
    default:
        break;
    }
    /* Buffers of this size must be addressable, twice, with room to spare. */
    if (*p != '\0' || v > (SIZE_MAX / 4) / mult)
        return false;
    *v_p = v * mult;
    return true;
}

static bool parse_long(const char *s, long lo, long hi, long *v_p)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *v_p = v;
    return true;
}

static bool parse_int(const char *s, long lo, long hi, int *v_p)
{
    long v;

    if (!parse_long(s, lo, hi, &v))
        return false;
    *v_p = (int)v;
    return true;
}

static bool coll_by_name(const char *s, enum bench_coll *c_p)
{
    for (int c = 0; c < B_NUM; c++)
        if (strcmp(s, colls[c].name) == 0 || (colls[c].alias && strcmp(s, colls[c].alias) == 0)) {
            *c_p = (enum bench_coll)c;
            return true;
        }
    return false;
}

/* argv[0]'s basename as nccl-tests names its programs; "_mpi" suffixes too. */
static bool coll_by_prog(const char *argv0, enum bench_coll *c_p)
{
    const char *base = strrchr(argv0, '/');
    size_t len;

    base = base ? base + 1 : argv0;
    len = strlen(base);
    if (len > 4 && strcmp(base + len - 4, "_mpi") == 0)
        len -= 4;
    for (int c = 0; c < B_NUM; c++)
        if (strlen(colls[c].prog) == len && strncmp(base, colls[c].prog, len) == 0) {
            *c_p = (enum bench_coll)c;
            return true;
        }
    return false;
}

enum opt_id {
    O_MINBYTES,
    O_MAXBYTES,
    O_STEPBYTES,
    O_STEPFACTOR,
    O_ITERS,
    O_WARMUP,
    O_AGG,
    O_CYCLES,
    O_CHECK,
    O_OP,
    O_DTYPE,
    O_ROOT,
    O_BLOCKING,
    O_AVERAGE,
    O_TIMEOUT,
    O_TIMESFILE,
    O_NTHREADS,
    O_NGPUS,
    O_HELP,
    O_NP,
    O_BIND,
    O_PER_HOST,
    O_BUDGET,
    O_ALGO,
    O_TRANSPORT,
    O_MEMTYPE,
    O_DEVICE,
    O_IPONLY,
    O_OOPONLY,
    O_JSON,
    O_CSV,
    O_PLOT,
    O_HELPENV,
    O_TOPO,
    O_VERSION,
    O_COMPARE,
    O_PLACEMENT,
    O_CALIBRATE,
    O_EXPLAIN,
    O_NCCL_IGNORED,
};

struct opt_def {
    char short_name; /* 0: long only */
    const char *long_name;
    bool has_arg;
    enum opt_id id;
};

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
static const struct opt_def *find_opt(const char *a, const char **inline_p)
{
    *inline_p = NULL;
    if (a[0] == '-' && a[1] == '-') {
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        for (size_t k = 0; k < ARRAY_SIZE(opt_defs); k++) {
            const char *ln = opt_defs[k].long_name;
            if (ln && strlen(ln) == len && strncmp(ln, name, len) == 0) {
                if (eq)
                    *inline_p = eq + 1;
                return &opt_defs[k];
            }
        }
        return NULL;
    }
    for (size_t k = 0; k < ARRAY_SIZE(opt_defs); k++)
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
        if (!parse_long(v, 0, LONG_MAX, &o->cycles))
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
        if (!parse_int(v, 0, 3, &o->average))
            return usage_error("bad value '%s' for %s (0 rank 0, 1 mean, 2 min, 3 max)", v, a);
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
        if (!parse_int(v, 1, 4096, &o->np))
            return usage_error("bad rank count '%s' for --np (1..4096)", v);
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
    case O_NCCL_IGNORED:
        if (!quiet_rank())
            fprintf(stderr, "%s: note: -%c %s (nccl-tests' --%s) means nothing to collbench; "
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

static int parse_opts(int argc, char **argv, struct opts *o)
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
    if (o->calibrate && !coll_set) {
        o->coll = B_ALLREDUCE; /* calibration measures links and reductions, not a collective */
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
    if (!colls[o->coll].has_op) {
        o->nops = 1; /* one pass, printed "none" */
        o->op_list[0] = COLL_SUM;
    }
    if (!colls[o->coll].has_root) {
        o->root = -1;
        o->all_roots = false;
    }
    if (o->coll == B_BARRIER) {
        o->ndtypes = 1;
        o->dtype_list[0] = COLL_UINT8;
    }
    if (o->memtype_cuda && !has_stream_call(o->coll))
        return usage_error("--memtype cuda: coll has no stream-ordered %s (device buffers go "
                           "through the coll_*_stream calls: allreduce, broadcast, reduce, "
                           "allgather, reducescatter, alltoall, sendrecv)",
                           colls[o->coll].name);
    if (o->memtype_cuda && o->calibrate)
        return usage_error("%s", "--calibrate measures host memory: drop --memtype cuda");
    if (o->device >= 0 && !o->memtype_cuda)
        return usage_error("--device %d needs --memtype cuda", o->device);
    return -1;
}

/* --------------------------------------------------------------------------------------
 * Check patterns. A block is a period of PERIOD elements repeated; what a period holds is
 * named by a struct pat: bytes moved from a sender, one rank's contribution to a reduction,
 * or the reduction's expected result.
 */

enum pat_kind { PAT_MOVE, PAT_RED_SEND, PAT_RED_EXPECT };

struct pat {
    enum pat_kind kind;
    int src; /* sender (PAT_MOVE, PAT_RED_SEND) */
    int blk; /* block index in the sender's buffer */
};

/* Round x to the nearest (ties to even) value of a small binary float with mbits fraction
 * bits, and return its bits. Finite, in-range x only: the patterns never overflow. */
static uint32_t encode_small_float(double x, const struct dtype_info *d)
{
    uint32_t sign = signbit(x) ? 1u << (d->ebits + d->mbits) : 0;
    double a = fabs(x), m;
    int emin = 1 - d->bias, e;

    if (a == 0)
        return sign;
    (void)frexp(a, &e);
    e -= 1; /* a = 1.f * 2^e */
    if (e < emin)
        e = emin;                          /* subnormal: the quantum stops shrinking */
    m = nearbyint(ldexp(a, d->mbits - e)); /* a in quanta of 2^(e - mbits), rounded */
    if (m >= ldexp(1.0, d->mbits + 1)) {   /* rounded up into the next binade */
        m /= 2;
        e += 1;
    }
    if (m < ldexp(1.0, d->mbits))
        return sign | (uint32_t)m; /* subnormal or zero: exponent field 0 */
    return sign | ((uint32_t)(e + d->bias) << d->mbits) | ((uint32_t)m - (1u << d->mbits));
}

/* Store the value (iv, or fv when use_fv) as element i of buf. */
static void store(void *buf, size_t i, coll_dtype_t dt, int64_t iv, double fv, bool use_fv)
{
    const struct dtype_info *d = &dtypes[dt];
    double x = use_fv ? fv : (double)iv;

    switch (dt) {
    case COLL_INT8:
        ((int8_t *)buf)[i] = (int8_t)iv;
        break;
    case COLL_UINT8:
        ((uint8_t *)buf)[i] = (uint8_t)iv;
        break;
    case COLL_INT32:
        ((int32_t *)buf)[i] = (int32_t)iv;
        break;
    case COLL_UINT32:
        ((uint32_t *)buf)[i] = (uint32_t)iv;
        break;
    case COLL_INT64:
        ((int64_t *)buf)[i] = iv;
        break;
    case COLL_UINT64:
        ((uint64_t *)buf)[i] = (uint64_t)iv;
        break;
    case COLL_FLOAT32:
        ((float *)buf)[i] = (float)x;
        break;
    case COLL_FLOAT64:
        ((double *)buf)[i] = x;
        break;
    case COLL_FLOAT16:
    case COLL_BFLOAT16:
        ((uint16_t *)buf)[i] = (uint16_t)encode_small_float(x, d);
        break;
    case COLL_FLOAT8E4M3:
    case COLL_FLOAT8E5M2:
        ((uint8_t *)buf)[i] = (uint8_t)encode_small_float(x, d);
        break;
    default:
        break;
    }
}

/* Element j of rank r's contribution to a reduction with op over nranks ranks. */
static int64_t red_value(coll_dtype_t dt, coll_op_t op, int r, int nranks, size_t j)
{
    const struct dtype_info *d = &dtypes[dt];
    uint64_t n = (uint64_t)nranks, mag;
    bool neg;

    if (op == COLL_PROD) {
        /* Mostly 1, a few 2: at most k twos per element over all ranks, 2^k exact. */
        uint64_t k = 0, p;
        while (k < 16 && (2ull << k) <= d->exact)
            k++;
        p = (n + k - 1) / k;
        if (p < 2)
            p = 2;
        mag = ((uint64_t)r + j) % p == 0 ? 2 : 1;
        neg = d->is_signed && ((uint64_t)r * 7 + j) % 5 == 0;
    } else {
        /* |value| <= a, so any partial sum over n ranks stays within exact; when even 1
         * per rank is too much (fp8 with many ranks), a sparse 0/1 does. */
        uint64_t a = d->exact / n;
        if (a > 1000)
            a = 1000;
        if (a >= 1) {
            mag = (((uint64_t)r + 1) * (j % 13 + 1) + j / 13) % (a + 1);
        } else {
            uint64_t p = (n + d->exact - 1) / d->exact;
            mag = ((uint64_t)r + j) % p == 0;
        }
        neg = d->is_signed && ((uint64_t)r + 2 * j) % 3 == 1;
    }
    return neg ? -(int64_t)mag : (int64_t)mag;
}

static uint64_t mix64(uint64_t x)
{
    /* splitmix64's finaliser: every input bit moves every output bit */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* Where a reduction block starts in the period: blocks and rounds differ by a rotation. */
static size_t red_rotation(int blk, unsigned round)
{
    return ((size_t)blk * 389 + (size_t)round * 97) % PERIOD;
}

/* One period of what p names, for dt (and op over nranks for reductions), round `round`. */
static void make_period(void *out, struct pat p, coll_dtype_t dt, coll_op_t op, int nranks,
                        unsigned round)
{
    const struct dtype_info *d = &dtypes[dt];
    size_t rot = red_rotation(p.blk, round);

    if (p.kind == PAT_MOVE) {
        uint64_t seed = mix64(((uint64_t)round << 48) ^ ((uint64_t)(uint32_t)p.src << 24) ^
                              (uint64_t)(uint32_t)p.blk ^ 0x636f6c6cull);
        for (size_t j = 0; j < PERIOD; j++) {
            uint64_t h = mix64(seed + j);
            memcpy((char *)out + j * d->size, &h, d->size); /* little or big end: any bytes */
        }
        return;
    }
    if (p.kind == PAT_RED_SEND) {
        for (size_t j = 0; j < PERIOD; j++)
            store(out, j, dt, red_value(dt, op, p.src, nranks, (j + rot) % PERIOD), 0, false);
        return;
    }
    /* The result, rounded as coll documents: exact sums and products, then for AVG one
     * division by nranks (truncating for integers; in fp32, then rounded once, for the 16-
     * and 8-bit floats). */
    for (size_t j = 0; j < PERIOD; j++) {
        size_t jj = (j + rot) % PERIOD;
        int64_t acc = red_value(dt, op, 0, nranks, jj);

        for (int r = 1; r < nranks; r++) {
            int64_t v = red_value(dt, op, r, nranks, jj);
            switch (op) {
            case COLL_SUM:
            case COLL_AVG:
                acc += v;
                break;
            case COLL_PROD:
                acc *= v;
                break;
            case COLL_MAX:
                acc = v > acc ? v : acc;
                break;
            case COLL_MIN:
                acc = v < acc ? v : acc;
                break;
            default:
                break;
            }
        }
        if (op != COLL_AVG)
            store(out, j, dt, acc, 0, false);
        else if (!d->is_float)
            store(out, j, dt, acc / nranks, 0, false);
        else if (dt == COLL_FLOAT64)
            store(out, j, dt, 0, (double)acc / (double)nranks, true);
        else
            store(out, j, dt, 0, (double)((float)acc / (float)nranks), true);
    }
}

/* buf[0, count) = the period pat repeated. */
static void fill_periodic(void *buf, const void *pat, size_t count, size_t esize)
{
    size_t total = count * esize, done = (count < PERIOD ? count : PERIOD) * esize;

    if (total == 0)
        return;
    memcpy(buf, pat, done);
    /* Doubling keeps every copy a whole number of periods from the start. */
    while (done < total) {
        size_t n = done < total - done ? done : total - done;
        memcpy((char *)buf + done, buf, n);
        done += n;
    }
}

/* Elements of buf[0, count) that differ from the period exp repeated. */
static uint64_t count_wrong(const void *buf, const void *exp, size_t count, size_t esize)
{
    const char *b = buf, *e = exp;
    uint64_t wrong = 0;

    for (size_t start = 0; start < count; start += PERIOD) {
        size_t n = count - start < PERIOD ? count - start : PERIOD;
        if (memcmp(b + start * esize, e, n * esize) == 0)
            continue;
        for (size_t j = 0; j < n; j++)
            wrong += memcmp(b + (start + j) * esize, e + j * esize, esize) != 0;
    }
    return wrong;
}

/* --------------------------------------------------------------------------------------
 * Watchdog: -T SEC, as nccl-tests' timeout. Each phase of a test (checked calls, warmup,
 * timed calls, the bookkeeping collectives) re-arms it; when one phase takes longer than
 * SEC it says so and aborts the communicator, so that every call in progress returns and
 * the peers see the connections close.
 */

struct watchdog {
    bool started, stop;
    int timeout_s, rank;
    double deadline; /* CLOCK_MONOTONIC seconds; 0: disarmed */
    const char *what;
    coll_comm_t *comm;
    atomic_bool fired;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *watchdog_main(void *arg)
{
    struct watchdog *w = arg;

    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        double now = now_s();
        if (w->deadline == 0) {
            pthread_cond_wait(&w->cond, &w->lock);
        } else if (now < w->deadline) {
            struct timespec ts;
            double until = w->deadline;
            ts.tv_sec = (time_t)until;
            ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
            pthread_cond_timedwait(&w->cond, &w->lock, &ts);
        } else {
            w->deadline = 0;
            atomic_store(&w->fired, true);
            fprintf(stderr,
                    "collbench: rank %d: test timeout: %s took more than %d s (-T); aborting\n",
                    w->rank, w->what ? w->what : "a call", w->timeout_s);
            coll_comm_abort(w->comm);
        }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static int watchdog_start(struct watchdog *w, coll_comm_t *comm, int rank, int timeout_s)
{
    pthread_condattr_t ca;
    int err;

    w->comm = comm;
    w->rank = rank;
    w->timeout_s = timeout_s;
    atomic_init(&w->fired, false);
    if (timeout_s == 0)
        return 0;
    pthread_mutex_init(&w->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are CLOCK_MONOTONIC */
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    err = pthread_create(&w->thread, NULL, watchdog_main, w);
    if (err) {
        fprintf(stderr, "collbench: rank %d: cannot start the -T watchdog: %s\n", rank,
                strerror(err));
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->lock);
        return 1;
    }
    w->started = true;
    return 0;
}

/* (Re)arm for a phase named what; NULL disarms. */
static void watchdog_arm(struct watchdog *w, const char *what)
{
    if (!w->started)
        return;
    pthread_mutex_lock(&w->lock);
    w->what = what;
    w->deadline = what ? now_s() + w->timeout_s : 0;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static void watchdog_stop(struct watchdog *w)
{
    if (!w->started)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    w->started = false;
}

/* --------------------------------------------------------------------------------------
 * Records: what rank 0 keeps of each row for --json, --csv and -F.
 */

struct col_rec {
    bool ran, checked;
    double time_us; /* combined as -a says */
    double tmin_us, tavg_us, tmax_us;
    double algbw, busbw;
    uint64_t wrong;
    int64_t iters;
};

struct row_rec {
    long cycle;
    coll_dtype_t dt;
    coll_op_t op;
    int root;
    uint64_t bytes;        /* size column */
    size_t count;          /* count column */
    const char *algo;      /* what the selector picks for this call */
    size_t chunk_bytes;    /* ... and its pipelining chunk */
    char why[160];         /* ... and why (the model's estimates) */
    struct col_rec col[2]; /* out-of-place, in-place */
};

/* --------------------------------------------------------------------------------------
 * Running calls.
 */

struct bench {
    struct opts o;
    int argc;
    char **argv;
    coll_comm_t *comm;
    int rank, nranks;
    void *sendbuf, *recvbuf; /* what the calls get: host, or device memory with --memtype cuda */
    size_t bufsize;
    /* --memtype cuda: the stream every call is queued on, the rank's device, and host
     * images of the device buffers in which check patterns are made and checked */
    bool cuda;
    void *stream;
    int device;
    void *hsend, *hrecv;
    int *devices;       /* [nranks]: every rank's device, for the header and the records */
    char cuda_msg[320]; /* a failure of collbench's own CUDA calls, for lib_error */
    void *pat;     /* one period */
    double *times; /* [nranks]: one column's time per rank */
    uint64_t wrong_total;
    double busbw_sum;
    int nresults;
    struct watchdog wd;
    /* rank 0 */
    FILE *json, *csv, *tfile;
    struct row_rec *rows;
    size_t nrows, caprows;
    bool rows_oom;
    /* progress */
    bool progress;
    bool progress_shown;
    double progress_delay; /* seconds before the line shows: 1, or COLLBENCH_PROGRESS_DELAY */
    double t_start, cost_total, cost_done;
    long rows_total, rows_done;
    char hostname[HOST_MAX];
    const char *calib_out;   /* --calibrate: COLL_CALIB_FILE as given, or NULL */
    char (*hosts)[HOST_MAX]; /* [nranks] */
    int64_t *pids;           /* [nranks] */
#ifdef COLLBENCH_TEST_HOOKS
    const char *fault;
    int fault_rank;
#endif
};

static int lib_error(struct bench *b, const char *what, coll_status_t st)
{
    fprintf(stderr, "collbench: rank %d: %s failed: %s: %s\n", b->rank, what,
            coll_status_string(st), b->cuda_msg[0] ? b->cuda_msg : coll_last_error(b->comm));
    return atomic_load(&b->wd.fired) ? EXIT_TIMEOUT : 1;
}

/* --------------------------------------------------------------------------------------
 * Device memory (--memtype cuda). The CUDA runtime is the one coll itself loaded (dlopen,
 * COLL_CUDA_LIBRARY honoured; src/cuda/cuda.c), never linked: collbench uses coll's table
 * of entry points, so the benchmark and the library agree on which runtime and which
 * device. Buffers come from cudaMalloc; check patterns are made in host images and moved
 * with cudaMemcpy; every call is queued on one non-blocking stream of collbench's, and a
 * batch of calls ends with cudaStreamSynchronize.
 */

#define CUDA_MEMCPY_H2D 1 /* cudaMemcpyKind */
#define CUDA_MEMCPY_D2H 2
#define CUDA_STREAM_NON_BLOCKING 1

static bool launched(void);

#if COLLBENCH_INTERNAL
/* The rank's local index, for the default device: the launcher's word, else the rank. */
static int local_rank(void)
{
    struct coll_launch l;

    if (!launched() || coll__launcher_detect(&l) != COLL_SUCCESS)
        return 0;
    return l.local_rank >= 0 ? l.local_rank : l.rank;
}

/* Before the comm exists: a usable runtime and a device, made current so that the comm
 * takes it (coll.h: the device current at coll_comm_init). 0, or the exit status with the
 * reason in msg (cuda_agree says it once the comm exists). */
static int cuda_pick_device(const struct opts *o, int *dev_p, char *msg, size_t size)
{
    const struct coll_cudart *rt;
    const char *why = NULL;
    char text[200];
    int n = 0, dev, err;

    if (coll__cuda_state(&why) != COLL_CUDA_READY) {
        snprintf(msg, size, "%s: --memtype cuda: no usable CUDA runtime or device: %s", prog_name,
                 why ? why : "unknown reason");
        return 1;
    }
    rt = coll__cudart();
    err = rt->GetDeviceCount(&n);
    if (err != 0 || n < 1) {
        coll__cuda_error_text(err, text, sizeof(text));
        snprintf(msg, size, "%s: --memtype cuda: no CUDA device: cudaGetDeviceCount: %s",
                 prog_name, err ? text : "0 devices");
        return 1;
    }
    if (o->device >= n) {
        snprintf(msg, size, "%s: --device %d: this process sees %d CUDA device%s (0..%d)",
                 prog_name, o->device, n, n == 1 ? "" : "s", n - 1);
        return EXIT_USAGE;
    }
    dev = o->device >= 0 ? o->device : local_rank() % n;
    err = rt->SetDevice(dev);
    if (err != 0) {
        coll__cuda_error_text(err, text, sizeof(text));
        snprintf(msg, size, "%s: --memtype cuda: cudaSetDevice(%d): %s", prog_name, dev, text);
        return 1;
    }
    *dev_p = dev;
    return 0;
}

/* A failed CUDA call of collbench's: its text for lib_error, COLL_CUDA_ERROR. */
static coll_status_t cuda_fail(struct bench *b, const char *what, int err)
{
    char text[200];

    coll__cuda_error_text(err, text, sizeof(text));
    snprintf(b->cuda_msg, sizeof(b->cuda_msg), "%s: %s", what, text);
    return COLL_CUDA_ERROR;
}

/* The device buffers, their host images and the stream; false after a message. */
static bool cuda_alloc(struct bench *b)
{
    const struct coll_cudart *rt = coll__cudart();
    coll_status_t st = COLL_SUCCESS;
    int err;

    if ((err = rt->Malloc(&b->sendbuf, b->bufsize)) != 0 ||
        (err = rt->Malloc(&b->recvbuf, b->bufsize)) != 0)
        st = cuda_fail(b, "cudaMalloc", err);
    else if ((err = rt->Memset(b->sendbuf, 0, b->bufsize)) != 0 ||
             (err = rt->Memset(b->recvbuf, 0, b->bufsize)) != 0)
        st = cuda_fail(b, "cudaMemset", err);
    else if ((err = rt->StreamCreateWithFlags(&b->stream, CUDA_STREAM_NON_BLOCKING)) != 0)
        st = cuda_fail(b, "cudaStreamCreateWithFlags", err);
    if (st != COLL_SUCCESS) {
        fprintf(stderr, "collbench: rank %d: device %d, 2 x %zu bytes: %s\n", b->rank, b->device,
                b->bufsize, b->cuda_msg);
        b->cuda_msg[0] = '\0';
        return false;
    }
    b->hsend = malloc(b->bufsize);
    b->hrecv = malloc(b->bufsize);
    if (!b->hsend || !b->hrecv) {
        fprintf(stderr, "collbench: rank %d: cannot allocate 2 x %zu bytes of host images\n",
                b->rank, b->bufsize);
        return false;
    }
    return true;
}

static void cuda_free(struct bench *b)
{
    const struct coll_cudart *rt = coll__cudart();

    if (!rt)
        return;
    if (b->stream) {
        (void)rt->StreamSynchronize(b->stream);
        (void)rt->StreamDestroy(b->stream);
    }
    if (b->sendbuf)
        (void)rt->Free(b->sendbuf);
    if (b->recvbuf)
        (void)rt->Free(b->recvbuf);
    b->stream = b->sendbuf = b->recvbuf = NULL;
}

/* Wait for everything queued on the stream. A collective that failed after it was queued
 * fails the comm (coll.h): that failure is the answer then, with the comm's message. */
static coll_status_t cuda_sync(struct bench *b)
{
    coll_status_t st, ast = COLL_SUCCESS;
    int err = coll__cudart()->StreamSynchronize(b->stream);

    if (err != 0)
        return cuda_fail(b, "cudaStreamSynchronize", err);
    st = coll_comm_get_async_error(b->comm, &ast);
    return st != COLL_SUCCESS ? st : ast;
}

/* bytes between a host image and its device buffer (kind: CUDA_MEMCPY_H2D or _D2H). */
static coll_status_t cuda_copy(struct bench *b, void *dst, const void *src, size_t bytes, int kind)
{
    int err;

    if (bytes == 0)
        return COLL_SUCCESS;
    err = coll__cudart()->Memcpy(dst, src, bytes, kind);
    if (err != 0)
        return cuda_fail(
            b, kind == CUDA_MEMCPY_H2D ? "cudaMemcpy to the device" : "cudaMemcpy from the device",
            err);
    /* From pageable memory, cudaMemcpy may return before its DMA has landed, and the
     * collective's stream is non-blocking: it would not wait for the legacy stream. */
    if (kind == CUDA_MEMCPY_H2D && (err = coll__cudart()->StreamSynchronize(NULL)) != 0)
        return cuda_fail(b, "cudaStreamSynchronize of the legacy stream", err);
    return COLL_SUCCESS;
}
#else
/* Built against the public library alone: coll's CUDA loader is out of reach. */
static int cuda_pick_device(const struct opts *o, int *dev_p, char *msg, size_t size)
{
    (void)o;
    (void)dev_p;
    snprintf(msg, size, "%s: --memtype cuda: built without coll_internal (coll's CUDA loader)",
             prog_name);
    return EXIT_USAGE;
}
static bool cuda_alloc(struct bench *b)
{
    (void)b;
    return false;
}
static void cuda_free(struct bench *b)
{
    (void)b;
}
static coll_status_t cuda_sync(struct bench *b)
{
    (void)b;
    return COLL_INVALID_USAGE;
}
static coll_status_t cuda_copy(struct bench *b, void *dst, const void *src, size_t bytes, int kind)
{
    (void)b, (void)dst, (void)src, (void)bytes, (void)kind;
    return COLL_INVALID_USAGE;
}
#endif

/* Every rank learns whether all could take their device (rc: this rank's cuda_pick_device).
 * Rank 0 says why it could not; another rank speaks only when rank 0 could, and nobody
 * leaves before all have spoken (a launcher kills the others when the first one exits).
 * 0 when all can go on, else the exit status. */
static int cuda_agree(struct bench *b, int rc)
{
    int v[2] = {rc, b->rank == 0 ? rc : 0}, w[2], one = 1;
    char msg[sizeof(b->cuda_msg)];
    coll_status_t st;

    memcpy(msg, b->cuda_msg, sizeof(msg));
    b->cuda_msg[0] = '\0'; /* lib_error: the comm's message from here on */
    st = coll_allreduce(v, w, 2, COLL_INT32, COLL_MAX, b->comm);
    if (st != COLL_SUCCESS) {
        if (rc)
            fprintf(stderr, "%s\n", msg);
        return lib_error(b, "allreduce of the CUDA checks", st);
    }
    if (!w[0])
        return 0;
    if (rc && b->rank == 0)
        fprintf(stderr, "%s\n", msg);
    else if (rc && !w[1])
        fprintf(stderr, "rank %d: %s\n", b->rank, msg);
    fflush(stderr);
    (void)coll_allreduce(&one, &v[0], 1, COLL_INT32, COLL_SUM, b->comm);
    return w[0];
}

/* The host image of a pointer into a device buffer (itself for host memory). */
static void *host_image(const struct bench *b, const void *p)
{
    uintptr_t u = (uintptr_t)p, s = (uintptr_t)b->sendbuf;

    if (!b->cuda)
        return (void *)(uintptr_t)p;
    if (u >= s && u < s + b->bufsize)
        return (char *)b->hsend + (u - s);
    return (char *)b->hrecv + (u - (uintptr_t)b->recvbuf);
}

/* The sizes of one call (elements): param is the count passed, the others what each
 * buffer holds; nsend/nrecv the blocks they are made of (param elements each). */
struct layout {
    size_t param;
    int nsend, nrecv;
};

static struct layout layout_for(const struct bench *b, uint64_t size, coll_dtype_t dt)
{
    size_t count = (size_t)(size / dtypes[dt].size), n = (size_t)b->nranks;
    struct layout l = {count, 1, 1};

    switch (colls[b->o.coll].rule) {
    case RULE_SAME:
        break;
    case RULE_GATHER:
        l.param = count / n;
        l.nrecv = b->nranks;
        break;
    case RULE_SCATTER:
        l.param = count / n;
        l.nsend = b->nranks;
        break;
    case RULE_ALLTOALL:
        l.param = count / n;
        l.nsend = l.nrecv = b->nranks;
        break;
    case RULE_NONE:
        l.param = 0;
        break;
    }
    return l;
}

/* The buffers of one call: in place, the send or receive part lies inside the other buffer
 * where coll's in-place convention puts it (sendbuf == recvbuf + rank * count and so on). */
static void call_ptrs(const struct bench *b, bool in_place, const struct layout *l, size_t es,
                      void **s_p, void **r_p)
{
    size_t off = (size_t)b->rank * l->param * es;

    *s_p = b->sendbuf;
    *r_p = in_place ? b->sendbuf : b->recvbuf;
    if (!in_place)
        return;
    switch (b->o.coll) {
    case B_ALLGATHER:
    case B_GATHER:
        *r_p = b->recvbuf;
        *s_p = (char *)b->recvbuf + off;
        break;
    case B_REDUCESCATTER:
    case B_SCATTER:
        *r_p = (char *)b->sendbuf + off;
        break;
    default:
        break;
    }
}

/* One call queued on the stream (--memtype cuda). */
static coll_status_t post_stream(struct bench *b, const void *s, void *r, size_t count,
                                 coll_dtype_t dt, coll_op_t op, int root)
{
    coll_comm_t *c = b->comm;
    void *q = b->stream;

    switch (b->o.coll) {
    case B_ALLREDUCE:
        return coll_allreduce_stream(s, r, count, dt, op, c, q);
    case B_BROADCAST:
        return coll_broadcast_stream(s, r, count, dt, root, c, q);
    case B_REDUCE:
        return coll_reduce_stream(s, r, count, dt, op, root, c, q);
    case B_ALLGATHER:
        return coll_allgather_stream(s, r, count, dt, c, q);
    case B_REDUCESCATTER:
        return coll_reduce_scatter_stream(s, r, count, dt, op, c, q);
    case B_ALLTOALL:
        return coll_alltoall_stream(s, r, count, dt, c, q);
    case B_SENDRECV: {
        coll_status_t st, st2;
        int n = b->nranks;
        st = coll_group_start();
        if (st != COLL_SUCCESS)
            return st;
        st = coll_send_stream(s, count, dt, (b->rank + 1) % n, c, q);
        if (st == COLL_SUCCESS)
            st = coll_recv_stream(r, count, dt, (b->rank + n - 1) % n, c, q);
        st2 = coll_group_end();
        return st != COLL_SUCCESS ? st : st2;
    }
    default: /* refused by parse_opts: no stream-ordered call */
        break;
    }
    return COLL_INTERNAL_ERROR;
}

/* One call, blocking (req_p NULL) or not. Send/recv is always a group of both: a receive
 * issued alone before its send would wait for it. */
static coll_status_t post(struct bench *b, const void *s, void *r, size_t count, coll_dtype_t dt,
                          coll_op_t op, int root, coll_request_t **req_p)
{
    coll_comm_t *c = b->comm;

    if (b->cuda)
        return post_stream(b, s, r, count, dt, op, root);
    switch (b->o.coll) {
    case B_ALLREDUCE:
        return req_p ? coll_iallreduce(s, r, count, dt, op, c, req_p)
                     : coll_allreduce(s, r, count, dt, op, c);
    case B_BROADCAST:
        return req_p ? coll_ibroadcast(s, r, count, dt, root, c, req_p)
                     : coll_broadcast(s, r, count, dt, root, c);
    case B_REDUCE:
        return req_p ? coll_ireduce(s, r, count, dt, op, root, c, req_p)
                     : coll_reduce(s, r, count, dt, op, root, c);
    case B_ALLGATHER:
        return req_p ? coll_iallgather(s, r, count, dt, c, req_p)
                     : coll_allgather(s, r, count, dt, c);
    case B_REDUCESCATTER:
        return req_p ? coll_ireduce_scatter(s, r, count, dt, op, c, req_p)
                     : coll_reduce_scatter(s, r, count, dt, op, c);
    case B_ALLTOALL:
        return req_p ? coll_ialltoall(s, r, count, dt, c, req_p)
                     : coll_alltoall(s, r, count, dt, c);
    case B_GATHER:
        return req_p ? coll_igather(s, r, count, dt, root, c, req_p)
                     : coll_gather(s, r, count, dt, root, c);
    case B_SCATTER:
        return req_p ? coll_iscatter(s, r, count, dt, root, c, req_p)
                     : coll_scatter(s, r, count, dt, root, c);
    case B_BARRIER:
        return req_p ? coll_ibarrier(c, req_p) : coll_barrier(c);
    case B_SENDRECV: {
        coll_status_t st, st2;
        int n = b->nranks;
        st = coll_group_start();
        if (st != COLL_SUCCESS)
            return st;
        st = coll_send(s, count, dt, (b->rank + 1) % n, c);
        if (st == COLL_SUCCESS)
            st = coll_recv(r, count, dt, (b->rank + n - 1) % n, c);
        st2 = coll_group_end(); /* closes the group even after a failed call */
        return st != COLL_SUCCESS ? st : st2;
    }
    case B_NUM:
        break;
    }
    return COLL_INTERNAL_ERROR;
}

/* -m > 1: one iteration is a group of agg blocking calls. */
static coll_status_t post_group(struct bench *b, const void *s, void *r, size_t count,
                                coll_dtype_t dt, coll_op_t op, int root)
{
    coll_status_t st = coll_group_start(), st2;

    if (st != COLL_SUCCESS)
        return st;
    for (int a = 0; a < b->o.agg_iters && st == COLL_SUCCESS; a++)
        st = post(b, s, r, count, dt, op, root, NULL);
    st2 = coll_group_end();
    return st != COLL_SUCCESS ? st : st2;
}

/* --memtype cuda: iters iterations queued on the stream (each a group of agg calls with
 * -m), then one cudaStreamSynchronize, as nccl-tests times a batch; -z 1 synchronizes after
 * every iteration instead. The stream is always drained, even after a failed call: the host
 * calls that follow must not run while stream-ordered ones are pending (coll.h). */
static coll_status_t run_calls_stream(struct bench *b, const void *s, void *r, size_t count,
                                      coll_dtype_t dt, coll_op_t op, int root, int64_t iters,
                                      int agg)
{
    coll_status_t first = COLL_SUCCESS, st;

    for (int64_t it = 0; it < iters && first == COLL_SUCCESS; it++) {
        first = agg > 1 ? post_group(b, s, r, count, dt, op, root)
                        : post_stream(b, s, r, count, dt, op, root);
        if (first == COLL_SUCCESS && b->o.blocking)
            first = cuda_sync(b);
    }
    st = cuda_sync(b);
    return first != COLL_SUCCESS ? first : st;
}

/* iters iterations: blocking, grouped (-m), or with up to WINDOW non-blocking calls in
 * flight. Every request is waited for, even after a failure: coll owns them until then. */
static coll_status_t run_calls(struct bench *b, const void *s, void *r, size_t count,
                               coll_dtype_t dt, coll_op_t op, int root, int64_t iters, int agg)
{
    coll_request_t *win[WINDOW];
    coll_status_t first = COLL_SUCCESS, st;
    int head = 0, inflight = 0;
    bool blocking = b->o.blocking || b->o.coll == B_SENDRECV;

    if (b->cuda)
        return run_calls_stream(b, s, r, count, dt, op, root, iters, agg);

    for (int64_t it = 0; it < iters && first == COLL_SUCCESS; it++) {
        if (agg > 1) {
            first = post_group(b, s, r, count, dt, op, root);
            continue;
        }
        if (blocking) {
            first = post(b, s, r, count, dt, op, root, NULL);
            continue;
        }
        if (inflight == WINDOW) {
            st = coll_wait(win[head]);
            head = (head + 1) % WINDOW;
            inflight--;
            if (st != COLL_SUCCESS) {
                first = st;
                break;
            }
        }
        st = post(b, s, r, count, dt, op, root, &win[(head + inflight) % WINDOW]);
        if (st != COLL_SUCCESS)
            first = st;
        else
            inflight++;
    }
    while (inflight > 0) {
        st = coll_wait(win[head]);
        head = (head + 1) % WINDOW;
        inflight--;
        if (first == COLL_SUCCESS)
            first = st;
    }
    return first;
}

/* --------------------------------------------------------------------------------------
 * One row: a size, a dtype, an op and a root; out-of-place then in-place.
 */

struct rowspec {
    uint64_t size; /* swept size */
    coll_dtype_t dt;
    coll_op_t op;
    int root;
    struct layout l;
};

static struct pat send_pat(const struct bench *b, int blk)
{
    struct pat p = {colls[b->o.coll].reduces ? PAT_RED_SEND : PAT_MOVE, b->rank, blk};
    return p;
}

/* What block t of this rank's receive buffer must hold. */
static struct pat recv_pat(const struct bench *b, int root, int t)
{
    int r = b->rank, n = b->nranks;
    struct pat p = {PAT_MOVE, 0, 0};

    switch (b->o.coll) {
    case B_ALLREDUCE:
    case B_REDUCE:
        p.kind = PAT_RED_EXPECT;
        break;
    case B_REDUCESCATTER:
        p.kind = PAT_RED_EXPECT;
        p.blk = r;
        break;
    case B_BROADCAST:
        p.src = root;
        break;
    case B_ALLGATHER:
    case B_GATHER:
        p.src = t;
        break;
    case B_ALLTOALL:
        p.src = t;
        p.blk = r;
        break;
    case B_SCATTER:
        p.src = root;
        p.blk = r;
        break;
    case B_SENDRECV:
        p.src = (r + n - 1) % n;
        break;
    default:
        break;
    }
    return p;
}

/* Does this rank's receive buffer hold a result worth checking? */
static bool checks_recv(const struct bench *b, bool in_place, int root)
{
    switch (b->o.coll) {
    case B_REDUCE:
    case B_GATHER:
        return b->rank == root;
    case B_SENDRECV:
        return !in_place; /* as nccl-tests: in-place send/recv is timed, not checked */
    case B_BARRIER:
        return false;
    default:
        return true;
    }
}

static bool column_checked(const struct bench *b, bool in_place)
{
    if (b->o.check == 0 || b->o.coll == B_BARRIER)
        return false;
    return !(b->o.coll == B_SENDRECV && in_place);
}

/* buf (nblk blocks of param elements) = the periods named by pat_of(t), or their bitwise
 * complement (for receive buffers: every element nobody writes is then wrong). */
static void fill_blocks(struct bench *b, void *buf, int nblk, const struct rowspec *rs,
                        unsigned round, bool recv_side, bool complement)
{
    size_t es = dtypes[rs->dt].size;

    for (int t = 0; t < nblk; t++) {
        struct pat p = recv_side ? recv_pat(b, rs->root, t) : send_pat(b, t);
        make_period(b->pat, p, rs->dt, rs->op, b->nranks, round);
        if (complement)
            for (size_t k = 0; k < PERIOD * es; k++)
                ((unsigned char *)b->pat)[k] ^= 0xff;
        fill_periodic((char *)buf + (size_t)t * rs->l.param * es, b->pat, rs->l.param, es);
    }
}

static uint64_t check_blocks(struct bench *b, const void *buf, int nblk, const struct rowspec *rs,
                             unsigned round, bool recv_side)
{
    size_t es = dtypes[rs->dt].size;
    uint64_t wrong = 0;

    for (int t = 0; t < nblk; t++) {
        struct pat p = recv_side ? recv_pat(b, rs->root, t) : send_pat(b, t);
        make_period(b->pat, p, rs->dt, rs->op, b->nranks, round);
        wrong +=
            count_wrong((const char *)buf + (size_t)t * rs->l.param * es, b->pat, rs->l.param, es);
    }
    return wrong;
}

#ifdef COLLBENCH_TEST_HOOKS
/* Test builds only: COLLBENCH_FAULT makes the checked call look wrong on one rank
 * (COLLBENCH_FAULT_RANK, default the last), so that the tests can see collbench report it:
 *   elem  one element of the result flipped (a wrong reduction)
 *   swap  blocks 0 and 1 of the result exchanged, or a one-rank result shifted by one
 *         element (a misplaced contribution)
 *   hang  the rank stops before its call until -T fires (a stuck peer) */
static void fault_after(struct bench *b, void *r, const struct rowspec *rs)
{
    size_t es = dtypes[rs->dt].size, blk = rs->l.param * es;
    unsigned char *p = r;

    if (!b->fault || b->rank != b->fault_rank || rs->l.param == 0)
        return;
    if (strcmp(b->fault, "swap") == 0) {
        if (rs->l.nrecv >= 2) {
            for (size_t k = 0; k < blk; k++) {
                unsigned char t = p[k];
                p[k] = p[blk + k];
                p[blk + k] = t;
            }
        } else if (rs->l.param >= 2) {
            memmove(p + es, p, blk - es);
        }
        return;
    }
    if (strcmp(b->fault, "hang") != 0)
        p[(rs->l.param / 2) * es] ^= 0x01;
}

static void fault_before(struct bench *b)
{
    double t0 = now_s();

    if (!b->fault || b->rank != b->fault_rank || strcmp(b->fault, "hang") != 0)
        return;
    /* bounded, so that a test without -T still ends */
    while (!atomic_load(&b->wd.fired) && now_s() - t0 < 60)
        usleep(1000);
}
#endif

/* Round `round`: fill, one call, count this rank's wrong elements. With --memtype cuda the
 * patterns are made in the host images, copied to the device buffers (both, whole, so that
 * an element nobody writes keeps its complement there too), and read back after the call. */
static int check_once(struct bench *b, bool in_place, const struct rowspec *rs, unsigned round,
                      uint64_t *wrong_p)
{
    const struct layout *l = &rs->l;
    size_t es = dtypes[rs->dt].size, off = (size_t)b->rank * l->param * es;
    size_t sbytes = (size_t)l->nsend * l->param * es, rbytes = (size_t)l->nrecv * l->param * es;
    void *s, *r, *hr;
    void *sendimg = b->cuda ? b->hsend : b->sendbuf, *recvimg = b->cuda ? b->hrecv : b->recvbuf;
    coll_status_t st;
    uint64_t wrong = 0;
    bool recv_checked = checks_recv(b, in_place, rs->root);

    call_ptrs(b, in_place, l, es, &s, &r);
    if (!in_place) {
        fill_blocks(b, sendimg, l->nsend, rs, round, false, false);
        fill_blocks(b, recvimg, l->nrecv, rs, round, true, true);
    } else {
        switch (b->o.coll) {
        case B_ALLGATHER:
        case B_GATHER:
            /* the others' blocks as nobody would leave them; ours where it is sent from */
            fill_blocks(b, recvimg, l->nrecv, rs, round, true, true);
            make_period(b->pat, send_pat(b, 0), rs->dt, rs->op, b->nranks, round);
            fill_periodic((char *)recvimg + off, b->pat, l->param, es);
            break;
        case B_REDUCESCATTER:
        case B_SCATTER:
            fill_blocks(b, sendimg, l->nsend, rs, round, false, false);
            if (b->o.coll == B_SCATTER && b->rank != rs->root) {
                /* a rank's own block is what it must receive: start from its complement */
                make_period(b->pat, recv_pat(b, rs->root, 0), rs->dt, rs->op, b->nranks, round);
                for (size_t k = 0; k < PERIOD * es; k++)
                    ((unsigned char *)b->pat)[k] ^= 0xff;
                fill_periodic((char *)sendimg + off, b->pat, l->param, es);
            }
            break;
        default:
            fill_blocks(b, sendimg, l->nsend, rs, round, false, false);
            break;
        }
    }
    if (b->cuda) {
        st = cuda_copy(b, b->sendbuf, b->hsend, sbytes, CUDA_MEMCPY_H2D);
        if (st == COLL_SUCCESS)
            st = cuda_copy(b, b->recvbuf, b->hrecv, rbytes, CUDA_MEMCPY_H2D);
        if (st != COLL_SUCCESS)
            return lib_error(b, "filling the device buffers", st);
    }
#ifdef COLLBENCH_TEST_HOOKS
    fault_before(b);
#endif
    st = run_calls(b, s, r, l->param, rs->dt, rs->op, rs->root, 1, 1);
    if (st != COLL_SUCCESS)
        return lib_error(b, colls[b->o.coll].name, st);
    if (b->cuda) {
        st = cuda_copy(b, b->hsend, b->sendbuf, sbytes, CUDA_MEMCPY_D2H);
        if (st == COLL_SUCCESS)
            st = cuda_copy(b, b->hrecv, b->recvbuf, rbytes, CUDA_MEMCPY_D2H);
        if (st != COLL_SUCCESS)
            return lib_error(b, "reading the device buffers back", st);
    }
    hr = host_image(b, r);
#ifdef COLLBENCH_TEST_HOOKS
    if (recv_checked)
        fault_after(b, hr, rs);
#endif
    if (recv_checked) {
        int nblk = l->nrecv;
        if (in_place && (b->o.coll == B_REDUCESCATTER || b->o.coll == B_SCATTER))
            nblk = 1; /* r points at this rank's block of the send buffer */
        wrong += check_blocks(b, hr, nblk, rs, round, true);
    }
    /* An out-of-place call must leave the send buffer alone, on every rank. */
    if (!in_place)
        wrong += check_blocks(b, sendimg, l->nsend, rs, round, false);
    *wrong_p = wrong;
    return 0;
}

/* The ranks' times (seconds per call, each rank's own) in b->times, every rank. */
static coll_status_t gather_times(struct bench *b, double t)
{
    for (int i = 0; i < b->nranks; i++)
        b->times[i] = 0;
    b->times[b->rank] = t;
    /* a sum of one non-zero value per slot: exact, and allreduce is what every algorithm
     * set supports */
    return coll_allreduce(b->times, b->times, (size_t)b->nranks, COLL_FLOAT64, COLL_SUM, b->comm);
}

static int time_column(struct bench *b, bool in_place, const struct rowspec *rs,
                       struct col_rec *col)
{
    const struct layout *l = &rs->l;
    size_t es = dtypes[rs->dt].size;
    void *s, *r;
    const char *what = colls[b->o.coll].name;
    int warmup = b->o.warmup, one = 1, agg = b->o.agg_iters;
    double t0, t, sum = 0;
    int64_t iters = b->o.iters;
    coll_status_t st;

    memset(col, 0, sizeof(*col));
    col->ran = true;
    col->checked = column_checked(b, in_place);
    if (col->checked) {
        watchdog_arm(&b->wd, "a checked call");
        for (int c = 0; c < b->o.check; c++) {
            uint64_t wrong, total;
            int rc = check_once(b, in_place, rs, (unsigned)c, &wrong);
            if (rc)
                return rc;
            st = coll_allreduce(&wrong, &total, 1, COLL_UINT64, COLL_SUM, b->comm);
            if (st != COLL_SUCCESS)
                return lib_error(b, "allreduce of the wrong-element counts", st);
            col->wrong = total;
            if (total)
                break; /* as nccl-tests: the first wrong round is reported */
        }
    }
    call_ptrs(b, in_place, l, es, &s, &r);
    if (b->o.budget_s > 0 && warmup == 0)
        warmup = 1; /* the budget needs one call to measure */
    watchdog_arm(&b->wd, "the warmup calls");
    t0 = now_s();
    st = run_calls(b, s, r, l->param, rs->dt, rs->op, rs->root, warmup, agg);
    t = now_s() - t0;
    if (st != COLL_SUCCESS)
        return lib_error(b, what, st);
    if (b->o.budget_s > 0) {
        /* Rank 0 decides, so that every rank runs the same number of calls. Half the
         * budget goes to each column. */
        double per_iter = t / warmup;
        double want = per_iter > 0 ? b->o.budget_s / 2 / per_iter : MAX_ITERS;
        iters = want < MIN_ITERS ? MIN_ITERS : want > MAX_ITERS ? MAX_ITERS : (int64_t)want;
        st = coll_broadcast(&iters, &iters, 1, COLL_INT64, 0, b->comm);
        if (st != COLL_SUCCESS)
            return lib_error(b, "broadcast of the iteration count", st);
        if (iters < MIN_ITERS || iters > MAX_ITERS) {
            fprintf(stderr, "collbench: rank %d: rank 0 sent iteration count %" PRId64 "\n",
                    b->rank, iters);
            return 1;
        }
    }
    /* Start together, so that a rank's time is not its wait for the others. */
    watchdog_arm(&b->wd, "the start barrier");
    st = coll_allreduce(&one, &one, 1, COLL_INT32, COLL_SUM, b->comm);
    if (st != COLL_SUCCESS)
        return lib_error(b, "allreduce (start barrier)", st);
    watchdog_arm(&b->wd, "the timed calls");
    t0 = now_s();
    st = run_calls(b, s, r, l->param, rs->dt, rs->op, rs->root, iters, agg);
    t = (now_s() - t0) / ((double)iters * agg);
    if (st != COLL_SUCCESS)
        return lib_error(b, what, st);
    watchdog_arm(&b->wd, "the allreduce of the times");
    st = gather_times(b, t);
    watchdog_arm(&b->wd, NULL);
    if (st != COLL_SUCCESS)
        return lib_error(b, "allreduce of the times", st);
    col->tmin_us = col->tmax_us = b->times[0];
    for (int i = 0; i < b->nranks; i++) {
        sum += b->times[i];
        col->tmin_us = fmin(col->tmin_us, b->times[i]);
        col->tmax_us = fmax(col->tmax_us, b->times[i]);
    }
    col->tavg_us = sum / b->nranks * 1e6;
    col->tmin_us *= 1e6;
    col->tmax_us *= 1e6;
    switch (b->o.average) {
    case 0:
        col->time_us = b->times[0] * 1e6;
        break;
    case 1:
        col->time_us = col->tavg_us;
        break;
    case 2:
        col->time_us = col->tmin_us;
        break;
    default:
        col->time_us = col->tmax_us;
        break;
    }
    col->iters = iters;
    return 0;
}

static void format_time(char *buf, size_t n, double us)
{
    snprintf(buf, n, us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
}

/* algbw and busbw of a column, nccl-tests' arithmetic. */
static void bandwidths(const struct bench *b, const struct rowspec *rs, struct col_rec *col)
{
    double bytes = (double)rs->l.param * (double)dtypes[rs->dt].size;
    const struct coll_desc *c = &colls[b->o.coll];

    if (c->rule == RULE_GATHER || c->rule == RULE_SCATTER || c->rule == RULE_ALLTOALL)
        bytes *= b->nranks;
    col->algbw = col->time_us > 0 ? bytes / (col->time_us * 1e3) : 0;
    col->busbw = col->algbw * c->bus_factor(b->nranks);
}

#if COLLBENCH_INTERNAL
/* The arguments coll's selector sees for this call (as src/api/api.c builds them). */
static struct coll_algo_args algo_args(const struct bench *b, const struct rowspec *rs, int nranks)
{
    const struct coll_comm *comm = b->comm;
    struct coll_algo_args a = {
        .coll = (enum coll_coll)colls[b->o.coll].internal,
        .nranks = nranks,
        .rank = 0,
        .root = rs->root < 0 ? 0 : rs->root,
        .count = rs->l.param,
        .dtype = b->o.coll == B_BARRIER ? COLL_UINT8 : rs->dt,
        .elem_size = b->o.coll == B_BARRIER ? 1 : dtypes[rs->dt].size,
    };

    a.chunk_count = (size_t)comm->cfg.chunk_bytes / a.elem_size;
    if (a.chunk_count == 0)
        a.chunk_count = 1;
    return a;
}

/* The algorithm (and chunk) coll picks for this call, by the same selector the call goes
 * through; "?" when it refuses (its message is in the comm's last error). */
static const char *algo_for(struct bench *b, const struct rowspec *rs, int nranks,
                            size_t *chunk_bytes_p, char *why, size_t whylen)
{
    struct coll_algo_args a = algo_args(b, rs, nranks);
    const struct coll_algo *algo = NULL;

    *chunk_bytes_p = 0;
    why[0] = '\0';
    if (b->o.coll == B_SENDRECV) {
        snprintf(why, whylen, "point to point");
        return "p2p";
    }
    /* what the calls of this run take on this comm, as the library's chooser says (host
     * buffers: device ones stage through the stream path) */
    if (!b->o.memtype_cuda && nranks == b->comm->nranks) {
        struct coll_call c = {.comm = b->comm, .coll = a.coll, .count = a.count,
                              .dtype = a.dtype, .op = COLL_SUM, .root = a.root, .peer = -1};
        struct coll_choice ch;
        if (coll__choose(b->comm, &c, false, &ch) == COLL_SUCCESS && ch.path->run) {
            snprintf(why, whylen, "%s path (shared segment, one host)", ch.path->name);
            return ch.path->name;
        }
    }
    if (coll__select(b->comm, &a, &algo, why, whylen) != COLL_SUCCESS || !algo)
        return "?";
    *chunk_bytes_p = a.chunk_count * a.elem_size;
    return algo->name;
}
#else
static const char *algo_for(struct bench *b, const struct rowspec *rs, int nranks,
                            size_t *chunk_bytes_p, char *why, size_t whylen)
{
    (void)b, (void)rs, (void)nranks;
    *chunk_bytes_p = 0;
    snprintf(why, whylen, "collbench built without coll_internal");
    return "unknown";
}
#endif

/* ---- progress (rank 0, stderr a terminal) -------------------------------------------- */

static double row_cost(uint64_t size)
{
    return (double)size + 65536.0; /* bytes, plus a latency's worth */
}

static void progress_clear(struct bench *b)
{
    if (b->progress_shown) {
        fprintf(stderr, "\r\033[K");
        b->progress_shown = false;
    }
}

static void progress_show(struct bench *b, const struct rowspec *rs)
{
    double el;
    char eta[32] = "?";

    if (!b->progress)
        return;
    el = now_s() - b->t_start;
    if (el < b->progress_delay)
        return; /* short sweeps stay quiet */
    if (b->cost_done > 0 && b->cost_total > 0) {
        double left = el * (b->cost_total - b->cost_done) / b->cost_done;
        snprintf(eta, sizeof(eta), "%d:%02d", (int)(left / 60), (int)fmod(left, 60));
    }
    fprintf(stderr, "\r\033[K[collbench] %s %s %" PRIu64 " B  row %ld", colls[b->o.coll].name,
            dtypes[rs->dt].name, rs->size, b->rows_done + 1);
    if (b->rows_total > 0)
        fprintf(stderr, "/%ld  eta %s", b->rows_total, eta);
    fprintf(stderr, "  elapsed %d:%02d", (int)(el / 60), (int)fmod(el, 60));
    fflush(stderr);
    b->progress_shown = true;
}

/* ---- records -------------------------------------------------------------------------- */

static bool record_row(struct bench *b, const struct row_rec *rec)
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

static const char *op_label(const struct bench *b, coll_op_t op)
{
    return colls[b->o.coll].has_op ? op_names[op] : "none";
}

static const char *dtype_label(const struct bench *b, coll_dtype_t dt)
{
    return b->o.coll == B_BARRIER ? "none" : dtypes[dt].name;
}

static const char *transport_name(const struct bench *b)
{
#if COLLBENCH_INTERNAL
    static char names[128];
    const struct coll_comm *c = b->comm;
    return c ? coll__comm_transports(c, names, sizeof(names)) : "none";
#else
    (void)b;
    return "unknown";
#endif
}

/* COLL_SELECT as the comm read it. */
static const char *select_name(const struct bench *b)
{
#if COLLBENCH_INTERNAL
    return b->comm->cfg.select;
#else
    const char *s = getenv("COLL_SELECT");
    (void)b;
    return s && *s ? s : "default";
#endif
}

static void csv_row(struct bench *b, const struct row_rec *rec)
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
        csv_field(b->csv, colls[b->o.coll].name);
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

static void times_rows(struct bench *b, const struct row_rec *rec, int ip)
{
    for (int i = 0; i < b->nranks; i++)
        fprintf(b->tfile, "%ld\t%s\t%s\t%d\t%" PRIu64 "\t%zu\t%s\t%d\t%.6g\t%" PRId64 "\n",
                rec->cycle, dtype_label(b, rec->dt), op_label(b, rec->op), rec->root, rec->bytes,
                rec->count, ip ? "in-place" : "out-of-place", i, b->times[i] * 1e6,
                rec->col[ip].iters);
}

/* A JSON string: escapes, and invalid UTF-8 replaced by U+FFFD so the file always parses. */
static void json_str(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    fputc('"', f);
    while (*p) {
        unsigned char c = *p;
        int len = c < 0x80             ? 1
                  : (c & 0xe0) == 0xc0 ? 2
                  : (c & 0xf0) == 0xe0 ? 3
                  : (c & 0xf8) == 0xf0 ? 4
                                       : 0;
        bool valid = len > 0;
        for (int k = 1; valid && k < len; k++)
            valid = (p[k] & 0xc0) == 0x80;
        if (!valid) {
            fputs("\\ufffd", f);
            p++;
            continue;
        }
        if (len > 1) {
            fwrite(p, 1, (size_t)len, f);
            p += len;
            continue;
        }
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
        p++;
    }
    fputc('"', f);
}

static void json_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.9g", v);
    else
        fputs("null", f);
}

static void json_col(FILE *f, const struct col_rec *c)
{
    if (!c->ran) {
        fputs("null", f);
        return;
    }
    fputs("{\"time_us\": ", f);
    json_num(f, c->time_us);
    fputs(", \"algbw_GBps\": ", f);
    json_num(f, c->algbw);
    fputs(", \"busbw_GBps\": ", f);
    json_num(f, c->busbw);
    if (c->checked)
        fprintf(f, ", \"wrong\": %" PRIu64, c->wrong);
    else
        fputs(", \"wrong\": null", f);
    fprintf(f, ", \"iters\": %" PRId64 ", \"time_min_us\": ", c->iters);
    json_num(f, c->tmin_us);
    fputs(", \"time_avg_us\": ", f);
    json_num(f, c->tavg_us);
    fputs(", \"time_max_us\": ", f);
    json_num(f, c->tmax_us);
    fputc('}', f);
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

static void version_string(char *buf, size_t n)
{
    int v = 0;

    if (coll_get_version(&v) != COLL_SUCCESS)
        v = 0;
    snprintf(buf, n, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
}

static void write_json(struct bench *b, FILE *f, const char *status)
{
    const struct opts *o = &b->o;
    char date[64], ver[32];
    bool first;

    utc_now(date, sizeof(date));
    version_string(ver, sizeof(ver));
    fputs("{\n  \"tool\": \"collbench\",\n  \"format\": 1,\n  \"collective\": ", f);
    json_str(f, colls[o->coll].name);
    fprintf(f, ",\n  \"coll_version\": \"%s\",\n  \"date\": ", ver);
    json_str(f, date);
    fputs(",\n  \"host\": ", f);
    json_str(f, b->hostname);
    fprintf(f, ",\n  \"nranks\": %d,\n  \"transport\": ", b->nranks);
    json_str(f, transport_name(b));
    fputs(",\n  \"algo_forced\": ", f);
    json_str(f, getenv("COLL_ALGO") ? getenv("COLL_ALGO") : "");
    fputs(",\n  \"status\": ", f);
    json_str(f, status);
    fputs(",\n  \"argv\": [", f);
    for (int i = 0; i < b->argc; i++) {
        if (i)
            fputs(", ", f);
        json_str(f, b->argv[i]);
    }
    fputs("],\n  \"ranks\": [", f);
    for (int i = 0; i < b->nranks; i++) {
        fprintf(f, "%s{\"rank\": %d, \"host\": ", i ? ", " : "", i);
        json_str(f, b->hosts[i]);
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
    json_num(f, o->budget_s);
    fprintf(f, ", \"memtype\": \"%s\", \"out_of_place\": %s, \"in_place\": %s},\n",
            b->cuda ? "cuda" : "host", o->run_oop ? "true" : "false", o->run_ip ? "true" : "false");
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
        json_str(f, name);
        fputs(": ", f);
        json_str(f, eq + 1);
        first = false;
    }
    fputs("},\n  \"results\": [", f);
    for (size_t i = 0; i < b->nrows; i++) {
        const struct row_rec *r = &b->rows[i];
        fprintf(f, "%s\n    {\"cycle\": %ld, \"type\": \"%s\", \"redop\": \"%s\", \"root\": %d, ",
                i ? "," : "", r->cycle, dtype_label(b, r->dt), op_label(b, r->op), r->root);
        fprintf(f, "\"size_bytes\": %" PRIu64 ", \"count\": %zu, \"algo\": ", r->bytes, r->count);
        json_str(f, r->algo);
        fprintf(f, ", \"chunk_bytes\": %zu, \"algo_why\": ", r->chunk_bytes);
        json_str(f, r->why);
        fputs(",\n     \"out_of_place\": ", f);
        json_col(f, &r->col[0]);
        fputs(",\n     \"in_place\": ", f);
        json_col(f, &r->col[1]);
        fputc('}', f);
    }
    fprintf(f, "\n  ],\n  \"out_of_bounds\": %" PRIu64 ",\n  \"avg_busbw_GBps\": ", b->wrong_total);
    json_num(f, b->nresults ? b->busbw_sum / b->nresults : 0.0);
    fputs("\n}\n", f);
}

/* ---- a row ---------------------------------------------------------------------------- */

/* --json under Ctrl-C. The file is written at the end of a run; a signal that ends the run
 * early (SIGINT, and the SIGTERM or SIGHUP collrun forwards) must not leave it empty. After
 * every row, rank 0 renders the record as it stands, with status "interrupted", into
 * memory; the handler writes that text over the file (open, write and ftruncate are
 * async-signal-safe, stdio is not) and ends the process by the same signal, so that the exit
 * status still says what happened. Two slots: the handler reads the current one while the
 * next is rendered into the other. */
static char *snap_buf[2];
static size_t snap_len[2];
static volatile sig_atomic_t snap_cur = -1, snap_in_handler;
static int snap_fd = -1;

static void snap_signal(int sig)
{
    int c = snap_cur;

    snap_in_handler = 1;
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

static void snap_update(struct bench *b)
{
    int next = snap_cur == 0 ? 1 : 0;
    char *buf = NULL;
    size_t len = 0;
    FILE *f;

    if (!b->json || snap_in_handler)
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

static void snap_start(struct bench *b)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction sa = {.sa_handler = snap_signal};

    if (!b->json)
        return;
    snap_fd = fileno(b->json);
    snap_update(b);
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < ARRAY_SIZE(sigs); i++) {
        struct sigaction old;
        /* a signal the caller ignores (nohup, a background job) stays ignored */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(sigs[i], &sa, NULL);
    }
}

/* Before the file is written for good: the handlers go, and the snapshots with them. */
static void snap_stop(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};

    if (snap_fd < 0)
        return;
    for (size_t i = 0; i < ARRAY_SIZE(sigs); i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == snap_signal)
            signal(sigs[i], SIG_DFL);
    }
    snap_cur = -1;
    snap_fd = -1;
    for (int k = 0; k < 2; k++) {
        free(snap_buf[k]);
        snap_buf[k] = NULL;
    }
}

static int run_row(struct bench *b, const struct rowspec *rs, long cycle)
{
    size_t es = dtypes[rs->dt].size;
    struct row_rec rec = {
        .cycle = cycle,
        .dt = rs->dt,
        .op = rs->op,
        .root = rs->root,
        .count = rs->l.param,
        .algo = "",
    };
    uint64_t sendb = (uint64_t)rs->l.param * es * (uint64_t)rs->l.nsend;
    uint64_t recvb = (uint64_t)rs->l.param * es * (uint64_t)rs->l.nrecv;
    char line[512];
    size_t len;
    int rc;

    rec.bytes = sendb > recvb ? sendb : recvb;
    if (b->rank == 0) {
        rec.algo = algo_for(b, rs, b->nranks, &rec.chunk_bytes, rec.why, sizeof(rec.why));
        progress_show(b, rs);
    }
    for (int ip = 0; ip < 2; ip++) {
        if (!(ip ? b->o.run_ip : b->o.run_oop))
            continue;
        rc = time_column(b, ip == 1, rs, &rec.col[ip]);
        if (rc)
            return rc;
        bandwidths(b, rs, &rec.col[ip]);
        if (b->rank == 0 && b->tfile)
            times_rows(b, &rec, ip);
    }
    len = (size_t)snprintf(line, sizeof(line), "%12" PRIu64 "  %12zu  %8s  %6s  %6d", rec.bytes,
                           rec.count, dtype_label(b, rs->dt), op_label(b, rs->op), rs->root);
    for (int ip = 0; ip < 2; ip++) {
        const struct col_rec *c = &rec.col[ip];
        char tbuf[32], wbuf[32];

        if (!c->ran) {
            if (len < sizeof(line))
                len += (size_t)snprintf(line + len, sizeof(line) - len, "  %7s  %6s  %6s  %5s",
                                        "N/A", "N/A", "N/A", "N/A");
            continue;
        }
        format_time(tbuf, sizeof(tbuf), c->time_us);
        if (c->checked)
            snprintf(wbuf, sizeof(wbuf), "%5" PRIu64, c->wrong);
        else
            snprintf(wbuf, sizeof(wbuf), "%5s", "N/A");
        /* Fields are bounded (times and rates are finite and small); the check only keeps
         * a surprise from writing past the line. */
        if (len < sizeof(line))
            len += (size_t)snprintf(line + len, sizeof(line) - len, "  %7s  %6.2f  %6.2f  %5s",
                                    tbuf, c->algbw, c->busbw, wbuf);
        b->wrong_total += c->wrong;
        b->busbw_sum += c->busbw;
        b->nresults++;
    }
    if (b->rank == 0) {
        progress_clear(b);
        printf("%s\n", line);
        fflush(stdout);
        if (b->csv)
            csv_row(b, &rec);
        if (b->tfile)
            fflush(b->tfile);
        if (b->json && !b->rows_oom && !record_row(b, &rec)) {
            fprintf(stderr,
                    "collbench: out of memory for the JSON records; %s will stop at "
                    "%zu rows\n",
                    b->o.json_path, b->nrows);
            b->rows_oom = true;
        }
        snap_update(b);
    }
    b->rows_done++;
    b->cost_done += row_cost(rs->size);
    return 0;
}

/* --------------------------------------------------------------------------------------
 * Sweeps.
 */

static uint64_t next_size(const struct opts *o, uint64_t size)
{
    uint64_t next;

    if (o->step_factor == 0)
        next = size + o->step_bytes;
    else if (size == 0)
        next = 1; /* 0 * factor would never grow */
    else
        next = size > UINT64_MAX / o->step_factor ? UINT64_MAX : size * o->step_factor;
    return next < size ? UINT64_MAX : next;
}

/* Calls fn for every row of one cycle (in order); stops at the first non-zero return. */
static int for_each_row(struct bench *b, int (*fn)(struct bench *, const struct rowspec *, void *),
                        void *arg)
{
    int nroots = b->o.all_roots ? b->nranks : 1;

    for (int d = 0; d < b->o.ndtypes; d++) {
        coll_dtype_t dt = b->o.dtype_list[d];
        for (int k = 0; k < b->o.nops; k++) {
            for (int ri = 0; ri < nroots; ri++) {
                size_t last = SIZE_MAX;
                for (uint64_t size = b->o.min_bytes; size <= b->o.max_bytes;
                     size = next_size(&b->o, size)) {
                    struct rowspec rs = {
                        .size = b->o.coll == B_BARRIER ? 0 : size,
                        .dt = dt,
                        .op = b->o.op_list[k],
                        .root = b->o.all_roots ? ri : b->o.root,
                    };
                    int rc;

                    rs.l = layout_for(b, rs.size, dt);
                    /* sizes below one element (or one per rank) repeat a count */
                    if (rs.l.param != last) {
                        last = rs.l.param;
                        rc = fn(b, &rs, arg);
                        if (rc)
                            return rc;
                    }
                    if (size == UINT64_MAX || b->o.coll == B_BARRIER)
                        break;
                }
            }
        }
    }
    return 0;
}

static int count_row(struct bench *b, const struct rowspec *rs, void *arg)
{
    (void)arg;
    b->rows_total++;
    b->cost_total += row_cost(rs->size);
    return 0;
}

static int do_row(struct bench *b, const struct rowspec *rs, void *arg)
{
    return run_row(b, rs, *(long *)arg);
}

static int run_sweeps(struct bench *b)
{
    int rc;

    b->t_start = now_s();
    if (b->o.cycles > 0) {
        for (long c = 0; c < b->o.cycles; c++)
            for_each_row(b, count_row, NULL);
    }
    for (long c = 0; b->o.cycles == 0 || c < b->o.cycles; c++) {
        rc = for_each_row(b, do_row, &c);
        if (rc)
            return rc;
    }
    return 0;
}

/* --------------------------------------------------------------------------------------
 * Header.
 */

/* Every rank's host name and pid, for the header and the records: a sum in which each
 * rank fills only its own slot. */
static coll_status_t exchange_ranks(struct bench *b)
{
    size_t n = (size_t)b->nranks;
    coll_status_t st;

    memset(b->hosts, 0, n * HOST_MAX);
    memset(b->pids, 0, n * sizeof(*b->pids));
    memset(b->devices, 0, n * sizeof(*b->devices));
    memcpy(b->hosts[b->rank], b->hostname, HOST_MAX);
    b->pids[b->rank] = (int64_t)getpid();
    b->devices[b->rank] = b->cuda ? b->device : -1;
    st = coll_allreduce(b->hosts, b->hosts, n * HOST_MAX, COLL_UINT8, COLL_MAX, b->comm);
    if (st == COLL_SUCCESS)
        st = coll_allreduce(b->pids, b->pids, n, COLL_INT64, COLL_SUM, b->comm);
    if (st == COLL_SUCCESS)
        st = coll_allreduce(b->devices, b->devices, n, COLL_INT32, COLL_SUM, b->comm);
    for (size_t i = 0; i < n; i++)
        b->hosts[i][HOST_MAX - 1] = '\0';
    return st;
}

static void print_header(const struct bench *b)
{
    const struct opts *o = &b->o;
    char iters[64], ver[32];
    const char *algo = getenv("COLL_ALGO");

    if (b->rank != 0)
        return;
    version_string(ver, sizeof(ver));
    if (o->budget_s > 0)
        snprintf(iters, sizeof(iters), "auto (%g s per size)", o->budget_s);
    else
        snprintf(iters, sizeof(iters), "%d", o->iters);
    printf("# collbench %s: nranks %d minBytes %" PRIu64 " maxBytes %" PRIu64, colls[o->coll].name,
           b->nranks, o->min_bytes, o->max_bytes);
    if (o->step_factor)
        printf(" step: %" PRIu64 "(factor)", o->step_factor);
    else
        printf(" step: %" PRIu64 "(bytes)", o->step_bytes);
    printf(" warmup iters: %d iters: %s agg iters: %d validation: %d blocking: %d"
           " average: %d (%s) cycles: %ld timeout: %d\n",
           o->warmup, iters, o->agg_iters, o->check, o->blocking, o->average,
           average_names[o->average], o->cycles, o->timeout_s);
    printf("#\n# Using %s memory, coll %s, transport %s, ", b->cuda ? "CUDA device" : "host", ver,
           transport_name(b));
    if (algo && *algo)
        printf("algorithm COLL_ALGO=%s\n", algo);
    else
        printf("algorithm chosen per size (COLL_SELECT=%s; --json records each)\n",
               select_name(b));
    if (b->cuda)
        printf("# Stream-ordered calls on one stream per rank; time = host clock around a batch "
               "of calls and cudaStreamSynchronize\n");
    for (int i = 0; i < b->nranks; i++) {
        if (i == MAX_RANKS_SHOWN && b->nranks > MAX_RANKS_SHOWN + 1) {
            printf("#  ... ranks %d to %d not shown\n", i, b->nranks - 2);
            i = b->nranks - 1;
        }
        if (b->cuda)
            printf("#  Rank %2d Pid %6" PRId64 " on %s device %2d\n", i, b->pids[i], b->hosts[i],
                   b->devices[i]);
        else
            printf("#  Rank %2d Pid %6" PRId64 " on %s\n", i, b->pids[i], b->hosts[i]);
    }
    printf("#\n");
    printf("#                                                              out-of-place"
           "                       in-place\n");
    printf("#       size         count      type   redop    root     time   algbw   busbw"
           " #wrong     time   algbw   busbw #wrong\n");
    printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
           "            (us)  (GB/s)  (GB/s)\n");
    fflush(stdout);
}

/* --------------------------------------------------------------------------------------
 * Modes that need no communicator: --help-env, --version, --compare; and --np, --plot.
 */

static int help_env(void)
{
#if !COLLBENCH_INTERNAL
    fprintf(stderr,
            "%s: --help-env: built without coll_internal (the table is "
            "src/base/param.c)\n",
            prog_name);
    return EXIT_USAGE;
#else
    printf("COLL_* environment variables (read once per communicator, at init):\n\n");
    for (size_t i = 0; i < coll__nparams; i++) {
        const struct coll_param *p = &coll__params[i];
        const char *cur = getenv(p->name);
        printf("%s\n    default: %s%s%s%s\n    %s\n", p->name, *p->defval ? p->defval : "(empty)",
               cur ? "   set: '" : "", cur ? cur : "", cur ? "'" : "", p->help);
    }
    printf("\nSet by the launcher (collrun), read by coll_comm_init_env: COLL_UNIQUE_ID, "
           "COLL_RANK,\nCOLL_SIZE, COLL_LOCAL_RANK, COLL_LOCAL_SIZE.\n");
    return 0;
#endif
}

static coll_status_t comm_open(coll_comm_t **comm_p);
static bool launched(void);

/* --topo: what this host has; under a launcher, rank 0 also lists every host's ranks. */
static int print_topo(void)
{
#if !COLLBENCH_INTERNAL
    fprintf(stderr, "%s: --topo: built without coll_internal\n", prog_name);
    return EXIT_USAGE;
#else
    const char *v = getenv("COLL_TOPO");
    struct coll_topo t;
    coll_comm_t *comm = NULL;
    coll_status_t st;
    int *host, nhosts;

    if (!launched()) {
        coll__topo_discover(&t, !(v && !strcmp(v, "sysfs")));
        coll__topo_print(&t, stdout);
        return 0;
    }
    st = comm_open(&comm);
    if (st != COLL_SUCCESS) {
        fprintf(stderr, "%s: --topo: %s\n", prog_name, coll_last_error(NULL));
        return 1;
    }
    host = malloc((size_t)comm->nranks * sizeof(*host));
    if (comm->rank == 0 && host) {
        coll__topo_discover(&t, !(v && !strcmp(v, "sysfs")));
        coll__topo_print(&t, stdout);
        nhosts = coll__topo_group_hosts(comm->peers, comm->nranks, host);
        printf("%d ranks on %d hosts\n", comm->nranks, nhosts);
        for (int h = 0; h < nhosts; h++) {
            const char *name = "";
            printf("  host %d", h);
            for (int r = 0; r < comm->nranks; r++)
                if (host[r] == h && !*name)
                    name = comm->peers[r].hostname;
            printf(" %-16s ranks", name);
            for (int r = 0; r < comm->nranks; r++)
                if (host[r] == h)
                    printf(" %d", r);
            printf("\n");
        }
        fflush(stdout);
    }
    free(host);
    /* nobody leaves before rank 0 has read the table: the comm would end under it */
    st = coll_barrier(comm);
    coll_comm_destroy(comm);
    return st == COLL_SUCCESS ? 0 : 1;
#endif
}

static int print_version(void)
{
    char ver[32];

    version_string(ver, sizeof(ver));
    printf("collbench (coll) %d.%d.%d, library %s\n", COLL_VERSION_MAJOR, COLL_VERSION_MINOR,
           COLL_VERSION_PATCH, ver);
    return 0;
}

/* The directory of this executable, for what ships beside it. */
static bool exe_dir(char *buf, size_t n)
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

static bool is_file(const char *path, bool exec)
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
        for (size_t i = 0; i < ARRAY_SIZE(rel); i++) {
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

static int run_compare(const struct opts *o, char **argv)
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

static int run_plot(const char *json_path, const char *png)
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

static bool launched(void)
{
#if COLLBENCH_INTERNAL
    return coll__launcher_present(); /* collrun, torchrun, mpirun or srun */
#else
    return getenv("COLL_UNIQUE_ID") || getenv("COLL_SIZE");
#endif
}

/* --np N outside a launcher: exec collrun -n N (found beside this executable, else on PATH)
 * on this executable, with the same arguments less --np. collrun then owns the job: it
 * forwards Ctrl-C and the like to every rank and kills them all when one fails. */
static int exec_launcher(const struct opts *o, int argc, char **argv)
{
    char dir[PATH_MAX], collrun[PATH_MAX + 16], self[PATH_MAX], np[16];
    char **args = calloc((size_t)argc + 8, sizeof(*args));
    ssize_t len;
    int k = 0;

    if (!args) {
        fprintf(stderr, "collbench: out of memory\n");
        return 1;
    }
    len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0 || (size_t)len >= sizeof(self) - 1) {
        fprintf(stderr, "collbench: --np: cannot find this executable: %s\n", strerror(errno));
        free(args);
        return 1;
    }
    self[len] = '\0';
    if (exe_dir(dir, sizeof(dir)) &&
        (size_t)snprintf(collrun, sizeof(collrun), "%s/collrun", dir) < sizeof(collrun) &&
        is_file(collrun, true))
        args[k++] = collrun;
    else
        args[k++] = "collrun"; /* execvp searches PATH */
    snprintf(np, sizeof(np), "%d", o->np);
    args[k++] = "-n";
    args[k++] = np;
    if (o->bind) {
        args[k++] = "--bind-to";
        args[k++] = (char *)o->bind;
    }
    args[k++] = "--";
    args[k++] = self;
    /* the collective by name: the ranks run as collbench, whatever argv[0] said */
    args[k++] = (char *)colls[o->coll].name;
    for (int i = 1; i < argc; i++) {
        const char *inl;
        const struct opt_def *d = argv[i][0] == '-' ? find_opt(argv[i], &inl) : NULL;
        enum bench_coll c;
        if (d && (d->id == O_NP || d->id == O_BIND)) {
            if (!inl)
                i++;
            continue;
        }
        if (!d && argv[i][0] != '-' && coll_by_name(argv[i], &c))
            continue; /* already passed */
        args[k++] = argv[i];
        if (d && d->has_arg && !inl && i + 1 < argc)
            args[k++] = argv[++i];
    }
    args[k] = NULL;
    fflush(stdout);
    execvp(args[0], args);
    fprintf(stderr, "collbench: --np: cannot run %s: %s (it is built beside collbench)\n", args[0],
            strerror(errno));
    free(args);
    return 1;
}

/* --------------------------------------------------------------------------------------
 * --explain and --calibrate: the cost model of src/algo/cost.h, read and fed.
 */
#if COLLBENCH_INTERNAL

/* Where the selector reads its calibration (src/algo/select.c): named (COLL_CALIB_FILE)
 * when not empty, else $XDG_CACHE_HOME/coll/calib.txt, else ~/.cache/coll/calib.txt. */
static bool calib_path(const char *named, char *buf, size_t n)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");

    if (named && *named)
        return (size_t)snprintf(buf, n, "%s", named) < n;
    if (xdg && *xdg)
        return (size_t)snprintf(buf, n, "%s/coll/calib.txt", xdg) < n;
    if (home && *home)
        return (size_t)snprintf(buf, n, "%s/.cache/coll/calib.txt", home) < n;
    return false;
}

struct explain_ctx {
    const struct coll_cost_params *params;
    int nranks;
    struct coll_cost_links links;
    const int32_t *hosts; /* the comm's hosts when it is the comm explained, else NULL */
    int32_t nhosts;
};

static int explain_row(struct bench *b, const struct rowspec *rs, void *arg)
{
    const struct explain_ctx *x = arg;
    struct coll_algo_args a = algo_args(b, rs, x->nranks);
    struct coll_cost_query q = {
        .coll = a.coll,
        .nranks = a.nranks,
        .root = a.root,
        .count = a.count,
        .dtype = a.dtype,
        .hosts = x->hosts,
        .nhosts = x->nhosts,
    };
    size_t forced_chunk = (size_t)b->comm->cfg.chunk_bytes;
    /* COLL_CHUNK_BYTES given: the selector tries that chunk alone, and so does the ranking */
    if (b->comm->cfg.chunk_forced) {
        q.chunk_bytes = &forced_chunk;
        q.nchunk_bytes = 1;
    }
    struct coll_cost_result res[32];
    size_t nres = 0, chunk = 0;
    uint64_t bytes = (uint64_t)rs->l.param * dtypes[rs->dt].size *
                     (uint64_t)(rs->l.nsend > rs->l.nrecv ? rs->l.nsend : rs->l.nrecv);
    char why[256], line[1024];
    const char *name;
    double est = NAN;
    size_t len;

    if (b->o.coll == B_SENDRECV) {
        printf("%12" PRIu64 "  %12zu  %-14s  point to point: no algorithm to choose\n", bytes,
               rs->l.param, "p2p");
        return 0;
    }
    name = algo_for(b, rs, x->nranks, &chunk, why, sizeof(why));
    if (strcmp(name, "?") == 0) {
        fprintf(stderr, "collbench: --explain: the selector refuses %s of %zu elements: %s\n",
                colls[b->o.coll].name, rs->l.param, coll_last_error(b->comm));
        return 1;
    }
    if (x->nranks > 1) {
        const struct coll_algo *algo = coll__algo_find(name);
        struct coll_algo_args sel = a;
        sel.hosts = x->hosts;
        sel.nhosts = x->nhosts;
        sel.chunk_count = chunk / a.elem_size ? chunk / a.elem_size : 1;
        if (!algo ||
            coll__cost_predict(x->params, &x->links, algo, &sel, &est, NULL) != COLL_SUCCESS)
            est = NAN;
        if (coll__cost_rank_algos(x->params, &x->links, &q, res, ARRAY_SIZE(res), &nres) !=
            COLL_SUCCESS) {
            fprintf(stderr, "collbench: --explain: the cost model cannot price %s: %s\n",
                    colls[b->o.coll].name, coll_last_error(NULL));
            return 1;
        }
    }
    len = (size_t)snprintf(line, sizeof(line), "%12" PRIu64 "  %12zu  %-14s %8zu  ", bytes,
                           rs->l.param, name, chunk);
    if (isfinite(est))
        len += (size_t)snprintf(line + len, sizeof(line) - len, "%9.1f ", est * 1e6);
    else
        len += (size_t)snprintf(line + len, sizeof(line) - len, "%9s ", "-");
    for (size_t i = 0; i < nres && len < sizeof(line); i++)
        len += (size_t)snprintf(line + len, sizeof(line) - len, " %s %.1f/%zu", res[i].algo->name,
                                res[i].seconds * 1e6, res[i].chunk_bytes);
    printf("%s\n", line);
    if (why[0] && strncmp(why, "cost model", 10) != 0) /* the ranking says the rest */
        printf("#%12s  selector: %s\n", "", why);
    return 0;
}

/* --explain --np N --per-host K: hosts of K consecutive ranks, shared memory inside, the
 * calibration's tcp between them. */
static int explain_per_host = 1;
static enum coll_link explain_host_link(void *arg, int32_t src, int32_t dst)
{
    (void)arg;
    return src / explain_per_host == dst / explain_per_host ? COLL_LINK_SHM : COLL_LINK_TCP;
}

static int explain(struct bench *b)
{
    static int32_t hosts[4096];
    struct coll_cost_params pooled;
    struct coll_cost_params defaults;
    struct explain_ctx x = {b->comm->cost, b->o.np ? b->o.np : b->nranks,
                            coll__cost_links_all(COLL_LINK_TCP), NULL, 0};
    char linkdesc[64];
    char path[PATH_MAX];
    const char *algo = getenv("COLL_ALGO");
    int rc;

    if (b->rank != 0)
        return 0;
    if (!x.params) {
        coll__cost_params_default(&defaults);
        x.params = &defaults;
    }
    /* the comm's own links when it is the comm explained; else every pair as ranks 0-1 */
    if (x.nranks == b->nranks) {
        x.links = coll__select_links(b->comm);
        if (b->comm->nhosts > 1) {
            x.hosts = b->comm->hosts;
            x.nhosts = b->comm->nhosts;
        }
        snprintf(linkdesc, sizeof(linkdesc), "links as this comm's transports (%s)",
                 transport_name(b));
    } else {
        struct coll_cost_links own = coll__select_links(b->comm);
        enum coll_link l = b->nranks > 1 && own.link_of ? own.link_of(own.arg, 0, 1) : own.link;
        x.links = coll__cost_links_all(l);
        snprintf(linkdesc, sizeof(linkdesc), "every link %s", coll__link_name(l));
    }
    if (b->o.per_host > 0 && b->o.np) {
        explain_per_host = b->o.per_host;
        for (int r = 0; r < x.nranks; r++)
            hosts[r] = r / b->o.per_host;
        x.hosts = hosts;
        x.nhosts = (x.nranks + b->o.per_host - 1) / b->o.per_host;
        x.links.link_of = explain_host_link;
        x.links.arg = NULL;
        /* hosts on paper: as many cores as ranks (no time-slicing of this machine) */
        pooled = *x.params;
        pooled.cores = 0;
        x.params = &pooled;
        snprintf(linkdesc, sizeof(linkdesc), "%d hosts of %d ranks (shm inside, tcp between)",
                 x.nhosts, b->o.per_host);
    }
    b->nranks = x.nranks; /* the rows' layout is for the ranks explained, not the comm's */
    printf("# collbench %s --explain: %d ranks, %s; selection %s%s%s\n",
           colls[b->o.coll].name, x.nranks, linkdesc, b->comm->cfg.select,
           algo && *algo ? ", COLL_ALGO=" : "", algo && *algo ? algo : "");
    if (calib_path(b->comm->cfg.calib_file, path, sizeof(path)) && access(path, R_OK) == 0)
        printf("# cost model calibrated from %s\n", path);
    else
        printf("# cost model: built-in defaults (no calibration file; see --calibrate)\n");
    printf("#       size         count  selected          chunk   est(us)  model's ranking: "
           "algorithm est(us)/best chunk(B)\n");
    rc = for_each_row(b, explain_row, &x);
    fflush(stdout);
    return rc;
}

/* One-way time of a message of `bytes` between ranks 0 and 1 (seconds; 0 elsewhere), the
 * best of several trials of ping-pongs. Small messages get many short trials: on a machine
 * shared with other work a trial that overlaps a burst of it is slower by whole wake-ups,
 * and the best short trial is the one that had the cores. Every rank calls it. */
static int pingpong(struct bench *b, size_t bytes, int peer, double *oneway_p)
{
    int reps = bytes <= 4096 ? 50 : (int)((32u << 20) / bytes);
    int trials = bytes <= 4096 ? 24 : 4;
    double best = INFINITY;
    coll_status_t st = COLL_SUCCESS;
    bool in = b->rank == 0 || b->rank == peer;

    if (reps < 10)
        reps = 10;
    for (int trial = 0; trial < trials && in; trial++) {
        double t0 = now_s();
        /* trial 0 warms up: connections, pages, caches */
        for (int i = 0; i < (trial ? reps : 5) && st == COLL_SUCCESS; i++) {
            if (b->rank == 0) {
                st = coll_send(b->sendbuf, bytes, COLL_UINT8, peer, b->comm);
                if (st == COLL_SUCCESS)
                    st = coll_recv(b->recvbuf, bytes, COLL_UINT8, peer, b->comm);
            } else {
                st = coll_recv(b->recvbuf, bytes, COLL_UINT8, 0, b->comm);
                if (st == COLL_SUCCESS)
                    st = coll_send(b->sendbuf, bytes, COLL_UINT8, 0, b->comm);
            }
        }
        if (st != COLL_SUCCESS)
            return lib_error(b, "send/recv (--calibrate)", st);
        if (trial)
            best = fmin(best, (now_s() - t0) / (2.0 * reps));
    }
    *oneway_p = in ? best : 0;
    return 0;
}

/* Seconds per message that a sender spends on a burst of small messages: rank 0 issues
 * BURST_MSGS 8-byte sends to peer in one group, then one; the difference of the best times
 * of their coll_group_end over BURST_MSGS - 1. Sends this small complete once the transport
 * holds them, so this is the part of a message's alpha that holds the sender (the
 * executor's step and the transport's hand-over), not the latency to the receiver that
 * messages in flight share. peer answers each burst, so every one starts on drained
 * links. Every rank calls it. */
#define BURST_MSGS 16
static int burst(struct bench *b, int peer, double *per_msg_p)
{
    double best[2] = {INFINITY, INFINITY};
    coll_status_t st = COLL_SUCCESS;
    bool in = b->rank == 0 || b->rank == peer;

    for (int trial = 0; trial < 40 && in && st == COLL_SUCCESS; trial++) {
        int k = trial & 1, nmsg = k ? BURST_MSGS : 1;
        double t0 = now_s(), t;

        st = coll_group_start();
        for (int i = 0; i < nmsg && st == COLL_SUCCESS; i++)
            st = b->rank == 0 ? coll_send((char *)b->sendbuf + 8 * i, 8, COLL_UINT8, peer, b->comm)
                              : coll_recv((char *)b->recvbuf + 8 * i, 8, COLL_UINT8, 0, b->comm);
        if (st == COLL_SUCCESS)
            st = coll_group_end();
        t = now_s() - t0;
        if (st == COLL_SUCCESS)
            st = b->rank == 0 ? coll_recv(b->recvbuf, 8, COLL_UINT8, peer, b->comm)
                              : coll_send(b->sendbuf, 8, COLL_UINT8, 0, b->comm);
        if (trial >= 2) /* the first two warm up */
            best[k] = fmin(best[k], t);
    }
    if (st != COLL_SUCCESS)
        return lib_error(b, "grouped send/recv (--calibrate)", st);
    *per_msg_p = in ? fmax((best[1] - best[0]) / (BURST_MSGS - 1), 0) : 0;
    return 0;
}

/* Seconds per byte of output of a host reduction of dt (sum), and of a copy: the best of a
 * few runs over 1 MiB, about what a chunk of a schedule touches. */
static double time_reduce(struct bench *b, coll_dtype_t dt)
{
    size_t bytes = 1u << 20, es = dtypes[dt].size, count = bytes / es;
    char *x = b->sendbuf, *y = x + bytes, *dst = b->recvbuf;
    double best = INFINITY;

    /* small values, as in the checks: no denormals, no overflow to special cases */
    make_period(b->pat, (struct pat){PAT_RED_SEND, 0, 0}, dt, COLL_SUM, 2, 0);
    fill_periodic(x, b->pat, count, es);
    fill_periodic(y, b->pat, count, es);
    for (int i = 0; i < 12; i++) {
        double t0 = now_s();
        coll__reduce(dst, x, y, count, dt, COLL_SUM);
        if (i >= 2)
            best = fmin(best, now_s() - t0);
    }
    return best / (double)(count * es);
}

static double time_copy(struct bench *b)
{
    size_t bytes = 1u << 20;
    double best = INFINITY;

    for (int i = 0; i < 12; i++) {
        double t0 = now_s();
        memcpy(b->recvbuf, b->sendbuf, bytes); /* into memory others see: never elided */
        if (i >= 2)
            best = fmin(best, now_s() - t0);
    }
    return best / (double)bytes;
}

/* Seconds per byte of a copy whose source and destination together are ws bytes: the best
 * of a few, each pass over fresh lines only once the pair outgrows the cache. */
static double time_copy_ws(char *src, char *dst, size_t ws)
{
    size_t bytes = ws / 2;
    double best = INFINITY;
    int reps = ws <= (16u << 20) ? 12 : 8;

    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        memcpy(dst, src, bytes);
        __asm__ __volatile__("" : : "r"(dst) : "memory"); /* the copy is observed */
        if (i >= 2)
            best = fmin(best, now_s() - t0);
    }
    return best / (double)bytes;
}

/* The memory term of the model (cost.h: mem, cache_bytes) from copies over working sets
 * of 1 MiB to 256 MiB: mem is the largest one's cost per byte over the cheapest one's (the
 * smallest copies pay their start-up too), and cache_bytes the size that best explains the
 * curve from the cheapest on, where the share 1 - cache / ws of the bytes pays mem. Leaves
 * *p as it is when memory is short. */
static void calibrate_memory(struct coll_cost_params *p)
{
    enum { NWS = 9 };
    const size_t max_ws = 256u << 20;
    double t[NWS], best_err = INFINITY, mem, ref = INFINITY;
    int lo = 0;
    size_t ws[NWS];
    char *buf = malloc(max_ws);

    if (!buf)
        return;
    memset(buf, 1, max_ws); /* pages in before anything is timed */
    for (int i = 0; i < NWS; i++) {
        ws[i] = (size_t)1 << (20 + i);
        t[i] = time_copy_ws(buf, buf + ws[i] / 2, ws[i]);
    }
    free(buf);
    for (int i = 0; i < NWS; i++)
        if (t[i] < ref) {
            ref = t[i];
            lo = i;
        }
    mem = t[NWS - 1] / ref;
    printf("# memory: copy of working set (MiB) -> ns per byte:");
    for (int i = 0; i < NWS; i++)
        printf(" %zu:%.3f", ws[i] >> 20, t[i] * 1e9);
    printf("\n");
    if (!(mem > 1.05) || !isfinite(mem)) {
        p->mem = 1; /* no cliff measured: every byte as cached */
        p->cache_bytes = 0;
        return;
    }
    /* candidate cache sizes: every quarter power of two across the range measured */
    for (double c = (double)ws[0]; c <= (double)max_ws; c *= 1.189207115) {
        double err = 0;
        for (int i = lo; i < NWS; i++) {
            double share = (double)ws[i] > c ? 1 - c / (double)ws[i] : 0;
            double e = log(t[i] / (ref * (1 + (mem - 1) * share)));
            err += e * e;
        }
        if (err < best_err) {
            best_err = err;
            p->cache_bytes = floor(c);
        }
    }
    p->mem = mem;
    printf("# mem %.2f (out of cache / in cache), cache_bytes %.3g (%.1f MiB)\n", p->mem,
           p->cache_bytes, p->cache_bytes / (1 << 20));
}

/* The rendezvous probe of --calibrate: a 2-rank chain reduce of RDV_PROBE_BYTES of float,
 * once in RDV_PROBE_CHUNK chunks and once whole. The bytes, the reductions and the buffers'
 * place in the cache are the same; what differs is the number of hand-overs. */
#define RDV_PROBE_BYTES (2u << 20)
#define RDV_PROBE_CHUNK (128u << 10)

/* Seconds per call of that reduce in chunks of chunk bytes: the best of eight trials of
 * back-to-back calls (a trial's mean), after a warm-up. Both ranks call it; COLL_ALGO and
 * COLL_CHUNK_BYTES of the comm are what the probe says for its duration. */
static int time_rdv_probe(struct bench *b, size_t chunk, double *t_p)
{
    struct coll_config *cfg = &b->comm->cfg;
    char algo[sizeof(cfg->algo)];
    int64_t chunk_bytes = cfg->chunk_bytes;
    const size_t count = RDV_PROBE_BYTES / sizeof(float);
    const int reps = 10;
    double best = INFINITY;
    coll_status_t st = COLL_SUCCESS;

    memcpy(algo, cfg->algo, sizeof(algo));
    snprintf(cfg->algo, sizeof(cfg->algo), "reduce=chain");
    cfg->chunk_bytes = (int64_t)chunk;
    memset(b->sendbuf, 0, RDV_PROBE_BYTES); /* zeros: no denormals, no overflow */
    for (int trial = 0; trial < 9 && st == COLL_SUCCESS; trial++) {
        double t0 = now_s();
        for (int i = 0; i < (trial ? reps : 3) && st == COLL_SUCCESS; i++)
            st = coll_reduce(b->sendbuf, b->recvbuf, count, COLL_FLOAT32, COLL_SUM, 0, b->comm);
        if (trial)
            best = fmin(best, (now_s() - t0) / reps);
    }
    memcpy(cfg->algo, algo, sizeof(algo));
    cfg->chunk_bytes = chunk_bytes;
    if (st != COLL_SUCCESS)
        return lib_error(b, "reduce (--calibrate)", st);
    *t_p = best;
    return 0;
}

/* <link>.rdv fitted to the probe: the model, with everything else calibrated and no
 * hand-over cost, prices both reduces; the part of the measured difference it does not
 * explain is spread over the extra hand-overs of the chunked one. A ping-pong cannot show
 * this cost: there the receiver is always waiting, while in a pipeline it is often busy
 * reducing the previous chunk when the next one is offered. */
static double fit_rdv(const struct coll_cost_params *p, enum coll_link l, const double t[2])
{
    struct coll_cost_params q = *p;
    struct coll_cost_links links = coll__cost_links_all(l);
    const struct coll_algo *chain = coll__algo_find("chain");
    struct coll_algo_args a = {
        .coll = COLL_COLL_REDUCE,
        .nranks = 2,
        .count = RDV_PROBE_BYTES / sizeof(float),
        .dtype = COLL_FLOAT32,
        .elem_size = sizeof(float),
    };
    double pred[2];
    const double extra = RDV_PROBE_BYTES / RDV_PROBE_CHUNK - 1;

    q.link[l].rdv = 0;
    q.cores = 0;
    for (int k = 0; k < 2; k++) {
        a.chunk_count = (k ? RDV_PROBE_BYTES : RDV_PROBE_CHUNK) / sizeof(float);
        if (!chain || coll__cost_predict(&q, &links, chain, &a, &pred[k], NULL) != COLL_SUCCESS)
            return p->link[l].rdv;
    }
    printf("# %s hand-over probe: 2-rank chain reduce of %u KiB, in %u KiB chunks %.1f us "
           "(model without hand-over %.1f), whole %.1f us (%.1f)\n",
           coll__link_name(l), RDV_PROBE_BYTES >> 10, RDV_PROBE_CHUNK >> 10, t[0] * 1e6,
           pred[0] * 1e6, t[1] * 1e6, pred[1] * 1e6);
    return fmax(((t[0] - t[1]) - (pred[0] - pred[1])) / extra, 0);
}

static int mkdir_parents(const char *path)
{
    char buf[PATH_MAX];

    if ((size_t)snprintf(buf, sizeof(buf), "%s", path) >= sizeof(buf))
        return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return 0;
}

static int calibrate(struct bench *b)
{
    static const size_t sizes[] = {8, 64, 512, 4096, 32768, 262144, 1u << 20, 4u << 20};
    double oneway[COLL_NUM_LINKS][ARRAY_SIZE(sizes)] = {{0}};
    double rdv_oneway[COLL_NUM_LINKS][2] = {{0}}, probe[2] = {0, 0};
    double per_msg[COLL_NUM_LINKS] = {0};
    int probe_link = -1;
    int peer_of[COLL_NUM_LINKS];
    struct coll_cost_params p;
    struct coll_cost_links links = coll__select_links(b->comm);
    char path[PATH_MAX];
    const char *tp = transport_name(b);
    int one = 1, rc, nlinks = 0;
    coll_status_t st;

    if (b->bufsize < (8u << 20) + 64) {
        fprintf(stderr, "collbench: rank %d: --calibrate needs -e 8M or more\n", b->rank);
        return EXIT_USAGE;
    }
    /* one pair per link class the comm has, from rank 0: e.g. shm to a rank of its host,
     * tcp to one of another host (every rank computes the same pairs) */
    for (int l = 0; l < COLL_NUM_LINKS; l++)
        peer_of[l] = -1;
    for (int r = 1; r < b->nranks; r++) {
        enum coll_link l = links.link_of ? links.link_of(links.arg, 0, r) : links.link;
        if (peer_of[l] < 0) {
            peer_of[l] = r;
            nlinks++;
        }
    }
    /* what an earlier run measured (another transport, COLL_TRANSPORT=tcp) stays; the first
     * run finds no file, which is no reason for a warning */
    if (!calib_path(b->calib_out, path, sizeof(path)) || access(path, F_OK) != 0 ||
        coll__cost_params_load(&p, path) != COLL_SUCCESS)
        coll__cost_params_default(&p);
    for (int l = 0; l < COLL_NUM_LINKS; l++) {
        for (size_t i = 0; peer_of[l] >= 0 && i < ARRAY_SIZE(sizes); i++) {
            watchdog_arm(&b->wd, "a ping-pong of --calibrate");
            rc = pingpong(b, sizes[i], peer_of[l], &oneway[l][i]);
            if (rc)
                return rc;
        }
        if (peer_of[l] >= 0) {
            watchdog_arm(&b->wd, "a burst of --calibrate");
            rc = burst(b, peer_of[l], &per_msg[l]);
            if (rc)
                return rc;
        }
        /* the same bytes once below and once at the transport's rendezvous size: what the
         * hand-over costs beyond a copied message, with the buffers equally in cache */
        for (int k = 0; k < 2 && peer_of[l] >= 0 && p.link[l].rdv_bytes >= 128 &&
                        p.link[l].rdv_bytes <= (double)(4u << 20);
             k++) {
            watchdog_arm(&b->wd, "a ping-pong of --calibrate");
            rc = pingpong(b, (size_t)p.link[l].rdv_bytes - (k ? 0 : 64), peer_of[l],
                          &rdv_oneway[l][k]);
            if (rc)
                return rc;
        }
        /* the probe needs the comm to be that pair, and chunks that are hand-overs */
        if (peer_of[l] >= 0 && b->nranks == 2 && p.link[l].rdv_bytes > 0 &&
            p.link[l].rdv_bytes <= RDV_PROBE_CHUNK) {
            for (int k = 0; k < 2; k++) {
                watchdog_arm(&b->wd, "the hand-over probe of --calibrate");
                rc = time_rdv_probe(b, k ? RDV_PROBE_BYTES : RDV_PROBE_CHUNK, &probe[k]);
                if (rc)
                    return rc;
            }
            probe_link = l;
        }
    }
    for (int l = 0; b->rank == 0 && l < COLL_NUM_LINKS; l++) {
        size_t last = ARRAY_SIZE(sizes) - 1;
        enum coll_link link = (enum coll_link)l;
        if (peer_of[l] < 0)
            continue;
        {
            /* beta from the two largest messages, alpha what the small ones have left */
            double beta = (oneway[l][last] - oneway[l][last - 1]) /
                          (double)(sizes[last] - sizes[last - 1]);
            double alphas[4];
            if (!(beta > 0))
                beta = oneway[l][last] / (double)sizes[last];
            for (int i = 0; i < 4; i++)
                alphas[i] = fmax(oneway[l][i] - beta * (double)sizes[i], 0);
            /* the median of four */
            for (int i = 0; i < 4; i++)
                for (int j = i + 1; j < 4; j++)
                    if (alphas[j] < alphas[i]) {
                        double t = alphas[i];
                        alphas[i] = alphas[j];
                        alphas[j] = t;
                    }
            p.link[link].alpha = (alphas[1] + alphas[2]) / 2;
            p.link[link].beta = beta;
            /* a burst's messages follow each other per_msg apart: that much of alpha holds
             * the link (and the executor: step), the rest is latency they overlap */
            p.link[link].lat = fmax(p.link[link].alpha - per_msg[l], 0);
            if (l == COLL_LINK_SHM && per_msg[l] > 0) /* 0: lost in the noise, keep it */
                p.step = fmin(per_msg[l], p.link[link].alpha);
            if (rdv_oneway[l][1] > 0) /* replaced by the probe's where there is one */
                p.link[link].rdv = fmax(rdv_oneway[l][1] - rdv_oneway[l][0] - 64 * beta, 0);
            printf("# collbench --calibrate: %s between rank 0 (%s) and rank %d (%s)\n",
                   coll__link_name(link), b->hosts[0], peer_of[l], b->hosts[peer_of[l]]);
            printf("#       size   one-way (us)   model (us)\n");
            for (size_t i = 0; i < ARRAY_SIZE(sizes); i++)
                printf("%12zu   %12.2f   %10.2f\n", sizes[i], oneway[l][i] * 1e6,
                       (p.link[link].alpha + p.link[link].beta * (double)sizes[i]) * 1e6);
            printf("# %s.alpha %.3g s (per message), %s.beta %.3g s/B (%.2f GB/s)\n",
                   coll__link_name(link), p.link[link].alpha, coll__link_name(link),
                   p.link[link].beta, p.link[link].beta > 0 ? 1e-9 / p.link[link].beta : 0.0);
            printf("# burst of %d messages: %.2f us each at the sender: %s.lat %.3g s%s\n",
                   BURST_MSGS,
                   per_msg[l] * 1e6, coll__link_name(link), p.link[link].lat,
                   l == COLL_LINK_SHM ? ", step (the executor's time per step) the same" : "");
            if (rdv_oneway[l][1] > 0)
                printf("# ping-pong: %s.rdv %.3g s more per message from %.0f B (one-way "
                       "%.2f us at %.0f B, %.2f us at %.0f B)\n",
                       coll__link_name(link), p.link[link].rdv, p.link[link].rdv_bytes,
                       rdv_oneway[l][0] * 1e6, p.link[link].rdv_bytes - 64,
                       rdv_oneway[l][1] * 1e6, p.link[link].rdv_bytes);
        }
    }
    if (b->rank == 0) {
        if (nlinks == 0)
            printf("# collbench --calibrate: one rank: links keep their values (run it with "
                   "--np 2, or under collrun -n 2, to measure %s)\n",
                   tp);
        for (int d = 0; d < COLL_NUM_DTYPES; d++) {
            double g = time_reduce(b, (coll_dtype_t)d);
            if (isfinite(g) && g > 0)
                p.gamma[d] = g;
        }
        {
            double c = time_copy(b);
            if (isfinite(c) && c > 0)
                p.copy = c;
        }
        printf("# gamma.float %.3g s/B (%.2f GB/s of output), copy %.3g s/B (%.2f GB/s)\n",
               p.gamma[COLL_FLOAT32], 1e-9 / p.gamma[COLL_FLOAT32], p.copy, 1e-9 / p.copy);
        calibrate_memory(&p);
        if (probe_link >= 0 && probe[0] > 0 && probe[1] > 0) {
            p.link[probe_link].rdv = fit_rdv(&p, (enum coll_link)probe_link, probe);
            printf("# %s.rdv %.3g s more per message from %.0f B (fitted to the probe)\n",
                   coll__link_name((enum coll_link)probe_link), p.link[probe_link].rdv,
                   p.link[probe_link].rdv_bytes);
        }
        rc = 1;
        if (!calib_path(b->calib_out, path, sizeof(path))) {
            fprintf(stderr, "collbench: --calibrate: no place for the file: set COLL_CALIB_FILE "
                            "(or HOME)\n");
        } else if (mkdir_parents(path) != 0) {
            fprintf(stderr, "collbench: --calibrate: cannot create the directory of '%s': %s\n",
                    path, strerror(errno));
        } else if ((st = coll__cost_params_save(&p, path)) != COLL_SUCCESS) {
            fprintf(stderr, "collbench: --calibrate: %s\n", coll_last_error(NULL));
        } else {
            printf("# wrote %s: the selector of every new communicator reads it%s\n", path,
                   b->calib_out ? " (while COLL_CALIB_FILE names it)" : "");
            rc = 0;
        }
        fflush(stdout);
        one = rc == 0;
    }
    /* everyone waits for rank 0's verdict, so that all ranks end alike */
    watchdog_arm(&b->wd, "the end of --calibrate");
    st = coll_broadcast(&one, &one, 1, COLL_INT32, 0, b->comm);
    watchdog_arm(&b->wd, NULL);
    if (st != COLL_SUCCESS)
        return lib_error(b, "broadcast (--calibrate)", st);
    return one ? 0 : 1;
}
#else
static int explain(struct bench *b)
{
    if (b->rank == 0)
        fprintf(stderr, "%s: --explain: built without coll_internal (no cost model)\n", prog_name);
    return EXIT_USAGE;
}

static int calibrate(struct bench *b)
{
    if (b->rank == 0)
        fprintf(stderr, "%s: --calibrate: built without coll_internal (no cost model)\n",
                prog_name);
    return EXIT_USAGE;
}
#endif

/* --------------------------------------------------------------------------------------
 * main
 */

static coll_status_t comm_open(coll_comm_t **comm_p)
{
    coll_unique_id_t id;
    coll_status_t st;

    if (launched())
        return coll_comm_init_env(comm_p);
    /* Alone: a communicator of one rank, its root in this process. */
    st = coll_get_unique_id(&id);
    if (st != COLL_SUCCESS)
        return st;
    return coll_comm_init(comm_p, 1, &id, 0);
}

/* Rank 0's output files; false (with a message) when one cannot be opened. */
static bool open_outputs(struct bench *b)
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
                colls[o->coll].name, ver, date, b->hostname, b->nranks, transport_name(b),
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
static bool close_outputs(struct bench *b)
{
    bool ok = true;
    FILE **files[] = {&b->json, &b->csv, &b->tfile};
    const char *names[] = {b->o.json_path, b->o.csv_path, b->o.times_path};

    for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
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

int main(int argc, char **argv)
{
    struct bench b = {.comm = NULL, .argc = argc, .argv = argv};
    char plot_json[64] = "";
    coll_status_t st;
    int rc, ok, all_ok, cuda_rc = 0;
    bool have_ranks = false;

    prog_name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    rc = parse_opts(argc, argv, &b.o);
    if (rc >= 0)
        goto out_opts;
    switch (b.o.mode) {
    case MODE_HELP:
        usage(stdout, prog_name);
        rc = 0;
        goto out_opts;
    case MODE_HELP_ENV:
        rc = help_env();
        goto out_opts;
    case MODE_TOPO:
        rc = print_topo();
        goto out_opts;
    case MODE_VERSION:
        rc = print_version();
        goto out_opts;
    case MODE_COMPARE:
        rc = run_compare(&b.o, argv);
        goto out_opts;
    case MODE_RUN:
        break;
    }
    if (b.o.bind && (!b.o.np || b.o.explain || launched())) {
        rc = usage_error("%s", "--bind-to is collrun's: it needs --np N outside a launcher "
                               "(bind with the launcher's own option otherwise)");
        goto out_opts;
    }
    if (b.o.np && !b.o.explain) { /* --explain --np N: N is what to explain, nothing starts */
        if (!launched()) {
            rc = exec_launcher(&b.o, argc, argv);
            goto out_opts;
        }
        /* Under a launcher already: --np must agree with it. */
        if (!getenv("COLL_SIZE") || atoi(getenv("COLL_SIZE")) != b.o.np) {
            rc = usage_error("--np %d, but the launcher started %s ranks (COLL_SIZE)", b.o.np,
                             getenv("COLL_SIZE") ? getenv("COLL_SIZE") : "an unknown number of");
            goto out_opts;
        }
    }
    /* --algo and --transport are the environment the comm reads at init. */
    if ((b.o.algo && setenv("COLL_ALGO", b.o.algo, 1) != 0) ||
        (b.o.transport && setenv("COLL_TRANSPORT", b.o.transport, 1) != 0)) {
        fprintf(stderr, "collbench: setenv: %s\n", strerror(errno));
        rc = 1;
        goto out_opts;
    }
    if (b.o.calibrate && getenv("COLL_CALIB_FILE") && *getenv("COLL_CALIB_FILE")) {
        /* the file is what --calibrate writes: the comm must not insist on reading it */
        b.calib_out = strdup(getenv("COLL_CALIB_FILE"));
        if (!b.calib_out || unsetenv("COLL_CALIB_FILE") != 0) {
            fprintf(stderr, "collbench: out of memory\n");
            rc = 1;
            goto out_opts;
        }
    }
#ifdef COLLBENCH_TEST_HOOKS
    b.fault = getenv("COLLBENCH_FAULT");
    if (b.fault && !*b.fault)
        b.fault = NULL;
#endif
    if (gethostname(b.hostname, sizeof(b.hostname)) != 0)
        snprintf(b.hostname, sizeof(b.hostname), "unknown");
    b.hostname[sizeof(b.hostname) - 1] = '\0';

    /* The device is current before the comm exists: the comm takes it (coll.h). */
    if (b.o.memtype_cuda && !b.o.explain) {
        cuda_rc = cuda_pick_device(&b.o, &b.device, b.cuda_msg, sizeof(b.cuda_msg));
        b.cuda = cuda_rc == 0;
    }
    st = comm_open(&b.comm);
    if (st != COLL_SUCCESS) {
        fprintf(stderr, "collbench: cannot join the communicator: %s: %s\n", coll_status_string(st),
                coll_last_error(NULL));
        if (cuda_rc)
            fprintf(stderr, "%s\n", b.cuda_msg);
        rc = st == COLL_INVALID_ARGUMENT ? EXIT_USAGE : 1;
        goto out_opts;
    }
    rc = 1;
    if ((st = coll_comm_rank(b.comm, &b.rank)) != COLL_SUCCESS ||
        (st = coll_comm_size(b.comm, &b.nranks)) != COLL_SUCCESS) {
        lib_error(&b, "coll_comm_rank/size", st);
        goto out_destroy;
    }
    if (b.o.memtype_cuda && !b.o.explain) {
        rc = cuda_agree(&b, cuda_rc);
        if (rc)
            goto out_destroy;
        rc = 1;
    }
#ifdef COLLBENCH_TEST_HOOKS
    b.fault_rank = b.nranks - 1;
    if (getenv("COLLBENCH_FAULT_RANK"))
        b.fault_rank = atoi(getenv("COLLBENCH_FAULT_RANK"));
#endif
    {
        int n = b.o.explain && b.o.np ? b.o.np : b.nranks;
        if (colls[b.o.coll].has_root && !b.o.all_roots && b.o.root >= n) {
            if (b.rank == 0) {
                fprintf(stderr, "%s: root %d out of range for %d rank%s\n", prog_name, b.o.root, n,
                        n == 1 ? "" : "s");
                fprintf(stderr, "Try '%s --help'.\n", prog_name);
            }
            /* every rank exits 2: none before rank 0 has said why (a launcher kills the
             * others when the first one ends) */
            (void)coll_allreduce(&n, &ok, 1, COLL_INT32, COLL_SUM, b.comm);
            rc = EXIT_USAGE;
            goto out_destroy;
        }
    }
    if (b.o.explain) {
        rc = explain(&b);
        goto out_destroy;
    }
    if (b.o.calibrate) {
        /* nothing is recorded: the calibration file is the output */
        b.o.json_path = b.o.csv_path = b.o.times_path = b.o.plot_path = NULL;
        if (b.o.max_bytes < (8u << 20))
            b.o.max_bytes = 8u << 20;
    }
    if (b.o.plot_path && !b.o.json_path && b.rank == 0) {
        /* --plot reads the run's JSON: keep one for it when none was asked for */
        int fd;
        snprintf(plot_json, sizeof(plot_json), "/tmp/collbench-plot.XXXXXX");
        fd = mkstemp(plot_json);
        if (fd < 0) {
            fprintf(stderr, "collbench: --plot: cannot make a temporary file: %s\n",
                    strerror(errno));
            plot_json[0] = '\0';
        } else {
            close(fd);
            b.o.json_path = plot_json;
        }
    }

    /* Every rank must get its buffers and rank 0 its files, or none goes on: one rank
     * missing from the first collective would hold the others until the timeout. */
    b.bufsize = (size_t)b.o.max_bytes + 64; /* never 0; a little slack against overruns */
    if (b.cuda) {
        ok = cuda_alloc(&b);
    } else {
        b.sendbuf = malloc(b.bufsize);
        b.recvbuf = malloc(b.bufsize);
        ok = b.sendbuf && b.recvbuf;
        if (!ok)
            fprintf(stderr, "collbench: rank %d: cannot allocate 2 x %zu bytes\n", b.rank,
                    b.bufsize);
    }
    b.pat = malloc(PERIOD * sizeof(uint64_t));
    b.times = malloc((size_t)b.nranks * sizeof(*b.times));
    b.hosts = malloc((size_t)b.nranks * HOST_MAX);
    b.pids = malloc((size_t)b.nranks * sizeof(*b.pids));
    b.devices = malloc((size_t)b.nranks * sizeof(*b.devices));
    if (ok && !(b.pat && b.times && b.hosts && b.pids && b.devices)) {
        fprintf(stderr, "collbench: rank %d: out of memory\n", b.rank);
        ok = 0;
    }
    if (ok && b.rank == 0 && !open_outputs(&b))
        ok = 0;
    if (ok && watchdog_start(&b.wd, b.comm, b.rank, b.o.timeout_s))
        ok = 0;
    st = coll_allreduce(&ok, &all_ok, 1, COLL_INT32, COLL_MIN, b.comm);
    if (st != COLL_SUCCESS) {
        lib_error(&b, "allreduce", st);
        goto out_free;
    }
    if (!all_ok)
        goto out_free;
    /* Untouched pages would make the first size pay for page faults (cuda_alloc sets the
     * device buffers). */
    if (!b.cuda) {
        memset(b.sendbuf, 0, b.bufsize);
        memset(b.recvbuf, 0, b.bufsize);
    }
    watchdog_arm(&b.wd, "the exchange of host names");
    st = exchange_ranks(&b);
    watchdog_arm(&b.wd, NULL);
    if (st != COLL_SUCCESS) {
        rc = lib_error(&b, "allreduce of the host names", st);
        goto out_free;
    }
    have_ranks = true;
    b.progress = b.rank == 0 && isatty(STDERR_FILENO);
    b.progress_delay = 1.0;
    if (getenv("COLLBENCH_PROGRESS_DELAY"))
        b.progress_delay = atof(getenv("COLLBENCH_PROGRESS_DELAY"));

    if (b.o.calibrate) {
        rc = calibrate(&b);
        goto out_free;
    }
    if (b.rank == 0)
        snap_start(&b);
    print_header(&b);
    rc = run_sweeps(&b);
    if (b.rank == 0)
        progress_clear(&b);
    if (rc == 0) {
        if (b.rank == 0) {
            printf("# Out of bounds values : %" PRIu64 " %s\n", b.wrong_total,
                   b.wrong_total ? "FAILED" : "OK");
            printf("# Avg bus bandwidth    : %g\n", b.nresults ? b.busbw_sum / b.nresults : 0.0);
            printf("#\n");
            fflush(stdout);
        }
        rc = b.wrong_total ? 1 : 0;
    }

out_free:
    watchdog_stop(&b.wd);
    snap_stop();
    if (b.json && have_ranks)
        write_json(&b, b.json, rc == 0 ? "ok" : b.wrong_total ? "wrong results" : "failed");
    if (b.rank == 0 && !close_outputs(&b) && rc == 0)
        rc = 1;
    if (b.rank == 0 && b.o.plot_path && have_ranks && b.o.json_path) {
        int prc = run_plot(b.o.json_path, b.o.plot_path);
        if (prc && rc == 0)
            rc = prc;
    }
    if (have_ranks) {
        /* Nobody leaves before rank 0 has its files written: a launcher kills the others
         * when one rank exits non-zero (wrong results do that on every rank). On a failed
         * comm this returns at once. */
        int one = 1;
        (void)coll_allreduce(&one, &all_ok, 1, COLL_INT32, COLL_SUM, b.comm);
    }
    if (b.cuda) {
        cuda_free(&b);
        free(b.hsend);
        free(b.hrecv);
    } else {
        free(b.sendbuf);
        free(b.recvbuf);
    }
    free(b.devices);
    free(b.pat);
    free(b.times);
    free(b.hosts);
    free(b.pids);
    free(b.rows);
out_destroy:
    st = coll_comm_destroy(b.comm);
    if (st != COLL_SUCCESS && rc == 0)
        rc = lib_error(&b, "coll_comm_destroy", st);
    if (plot_json[0])
        unlink(plot_json);
out_opts:
    free((char *)b.calib_out);
    free(b.o.files);
    return rc;
}
