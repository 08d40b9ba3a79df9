/*
 * collbench.h - what collbench's files share: the collectives, dtypes and ops by their
 * nccl-tests names, the options, the run's state (struct bench), and each file's entry
 * points. Private to bench/collbench/.
 */
#ifndef COLLBENCH_H
#define COLLBENCH_H

#include <coll.h>

/* Beyond the public API, collbench asks the library through one header: how a call runs
 * and what the model says of it, the settings, what the comm is made of, the calibration
 * hooks (api/introspect.h); and it uses the base's helpers (sizes, the JSON writer). */
#include "api/introspect.h"
#include "base/base.h"
#include "base/json.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
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
#define COLLBENCH_RUN_MAX 4096        /* --np to start */
#define COLLBENCH_EXPLAIN_MAX (1 << 20) /* --explain --np: the closed forms price any count */
#define COLLBENCH_EXACT_MAX 1024      /* --explain --exact: the walker holds every schedule */
#define COLL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* --------------------------------------------------------------------------------------
 * Collectives, dtypes and ops, by the names nccl-tests prints.
 */

/* The collectives are the library's own enum coll_coll (COLL_COLL_ALLREDUCE, ...) and their
 * rows (coll__colls: names, nccl-tests' program, shapes). */

/* How the swept size maps onto a call (see the file comment). */
enum size_rule { RULE_SAME, RULE_GATHER, RULE_SCATTER, RULE_ALLTOALL, RULE_NONE };

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
/* --------------------------------------------------------------------------------------
 * Options.
 */

enum mode { MODE_RUN, MODE_HELP, MODE_HELP_ENV, MODE_VERSION, MODE_COMPARE, MODE_TOPO };

struct opts {
    enum mode mode;
    enum coll_coll coll;
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
    int np;           /* --np: 0 = not given */
    const char *bind; /* --bind-to auto|core|none for collrun; NULL = not given (auto) */
    int per_host;     /* --per-host: --explain --np N as hosts of this many ranks; 0 = one host */
    bool memtype_cuda;
    int device; /* --device: the CUDA device of every rank; -1 = local rank % devices */
    bool explain, calibrate;
    bool exact; /* --exact: --explain with the schedule walker (COLL_SELECT=exact) */
    bool shared_clock; /* --shared-clock: timed calls start at one instant of CLOCK_REALTIME */
    int nfiles; /* --compare: the files are argv[files[i]] */
    int *files;
    const char *placement; /* --placement for --compare */
};
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
    O_EXACT,
    O_SHARED_CLOCK,
    O_NCCL_IGNORED,
};

struct opt_def {
    char short_name; /* 0: long only */
    const char *long_name;
    bool has_arg;
    enum opt_id id;
};
enum pat_kind { PAT_MOVE, PAT_RED_SEND, PAT_RED_EXPECT };

struct pat {
    enum pat_kind kind;
    int src; /* sender (PAT_MOVE, PAT_RED_SEND) */
    int blk; /* block index in the sender's buffer */
};
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
    int late; /* --shared-clock: ranks that got the start instant after it had passed */
    /* from the last rank's start to the last rank's end, per call; NAN without a clock
     * the ranks share (one_clock or --shared-clock) */
    double span_us;
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
    struct coll_ix_comm desc; /* what the comm is made of (transports, settings, model) */
    void *sendbuf, *recvbuf;  /* what the calls get: host, or device memory with --memtype cuda */
    size_t bufsize;
    /* --memtype cuda: the stream every call is queued on, the rank's device, and host
     * images of the device buffers in which check patterns are made and checked */
    bool cuda;
    const struct coll_ix_cuda *rt; /* coll's CUDA runtime */
    void *stream;
    int device;
    void *hsend, *hrecv;
    int *devices;       /* [nranks]: every rank's device, for the header and the records */
    char cuda_msg[320]; /* a failure of collbench's own CUDA calls, for lib_error */
    void *pat;          /* one period */
    double *times;      /* [nranks]: one column's time per rank */
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
    bool ranks_known;        /* hosts and pids exchanged */
    /* every rank reads one kernel's CLOCK_REALTIME (one boot id: a machine, or netns hosts
     * on it), so that instants taken on different ranks compare (the span, -a 4) */
    bool one_clock;
#ifdef COLLBENCH_TEST_HOOKS
    const char *fault;
    int fault_rank;
#endif
};
#define CUDA_MEMCPY_H2D 1 /* cudaMemcpyKind */
#define CUDA_MEMCPY_D2H 2
#define CUDA_STREAM_NON_BLOCKING 1
/* The sizes of one call (elements): param is the count passed, the others what each
 * buffer holds; nsend/nrecv the blocks they are made of (param elements each). */
struct layout {
    size_t param;
    int nsend, nrecv;
};
struct rowspec {
    uint64_t size; /* swept size */
    coll_dtype_t dt;
    coll_op_t op;
    int root;
    struct layout l;
};

/* The tables (options.c). */
extern const struct dtype_info dtypes[COLL_NUM_DTYPES];
extern const char *const op_names[COLL_NUM_OPS];
extern const char *const average_names[5];
extern const char *prog_name; /* argv[0]'s basename, for messages */

/* options.c */
void usage(FILE *f, const char *prog);
__attribute__((format(printf, 1, 2))) int usage_error(const char *fmt, ...);
bool coll_by_name(const char *s, enum coll_coll *c_p);
enum size_rule size_rule(enum coll_coll c);
const struct opt_def *find_opt(const char *a, const char **inline_p);
int parse_opts(int argc, char **argv, struct opts *o);

/* patterns.c */
void make_period(void *out, struct pat p, coll_dtype_t dt, coll_op_t op, int nranks,
                 unsigned round);
void fill_periodic(void *buf, const void *pat, size_t count, size_t esize);
struct pat send_pat(const struct bench *b, int blk);
struct pat recv_pat(const struct bench *b, int root, int t);
bool checks_recv(const struct bench *b, bool in_place, int root);
bool column_checked(const struct bench *b, bool in_place);
void fill_blocks(struct bench *b, void *buf, int nblk, const struct rowspec *rs, unsigned round,
                 bool recv_side, bool complement);
uint64_t check_blocks(struct bench *b, const void *buf, int nblk, const struct rowspec *rs,
                      unsigned round, bool recv_side);
void fault_after(struct bench *b, void *r, const struct rowspec *rs);
void fault_before(struct bench *b);

/* run.c */
double now_s(void);
int watchdog_start(struct watchdog *w, coll_comm_t *comm, int rank, int timeout_s);
void watchdog_arm(struct watchdog *w, const char *what);
void watchdog_stop(struct watchdog *w);
int lib_error(struct bench *b, const char *what, coll_status_t st);
void progress_clear(struct bench *b);
int for_each_row(struct bench *b, int (*fn)(struct bench *, const struct rowspec *, void *),
                 void *arg);
int run_sweeps(struct bench *b);
coll_status_t exchange_ranks(struct bench *b);
coll_status_t one_clock(struct bench *b);
/* the start barrier before each column's timed calls (a polled 4-byte all-reduce) */
coll_status_t start_barrier(struct bench *b);
/* CLOCK_REALTIME in ns: the instants -a 4 compares across ranks */
int64_t realtime_ns(void);
void print_header(const struct bench *b);

/* device.c */
int cuda_pick_device(const struct opts *o, const struct coll_ix_cuda **rt_p, int *dev_p, char *msg,
                     size_t size);
bool cuda_alloc(struct bench *b);
void cuda_free(struct bench *b);
coll_status_t cuda_sync(struct bench *b);
coll_status_t cuda_copy(struct bench *b, void *dst, const void *src, size_t bytes, int kind);
int cuda_agree(struct bench *b, int rc);

/* explain.c */
const char *algo_for(struct bench *b, const struct rowspec *rs, int nranks, size_t *chunk_bytes_p,
                     char *why, size_t whylen);
int help_env(void);
int print_topo(void);
int explain(struct bench *b);

/* calibrate.c */
int calibrate(struct bench *b);

/* records.c */
bool record_row(struct bench *b, const struct row_rec *rec);
const char *op_label(const struct bench *b, coll_op_t op);
const char *dtype_label(const struct bench *b, coll_dtype_t dt);
const char *transport_name(const struct bench *b);
const char *select_name(const struct bench *b);
void csv_row(struct bench *b, const struct row_rec *rec);
void times_rows(struct bench *b, const struct row_rec *rec, int ip);
void version_string(char *buf, size_t n);
void write_json(struct bench *b, FILE *f, const char *status);
void snap_update(struct bench *b);
void snap_start(struct bench *b);
/* Around the final record (rank 0): from begin on a signal only is noted (snap_signalled);
 * end puts the default handlers back and ends the process by the signal noted. */
void snap_final_begin(void);
bool snap_signalled(void);
void snap_final_end(void);
int print_version(void);
bool exe_dir(char *buf, size_t n);
bool is_file(const char *path, bool exec);
int run_compare(const struct opts *o, char **argv);
int run_plot(const char *json_path, const char *png);
bool open_outputs(struct bench *b);
bool close_outputs(struct bench *b);

/* launch.c */
int exec_launcher(const struct opts *o, int argc, char **argv);
coll_status_t comm_open(coll_comm_t **comm_p);

/* main.c */

#endif /* COLLBENCH_H */
