/*
 * base.h - the floor every other folder stands on: the settings (COLL_*), logging, error
 * statuses with messages, the peers' published addresses, and small helpers. It includes
 * only the public header and the wire formats; nothing of the engine, the transports or the
 * communicator's layout (struct coll_comm is a name here, defined in core/internal.h).
 *
 * Divisions: 1 config and params, 2 logging, 3 errors, 4 peers' addresses, 6 misc helpers.
 */
#ifndef COLL_BASE_H
#define COLL_BASE_H

#define COLL_BUILDING 1
#include "coll.h"
#include "wire.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct coll_comm;

#define COLL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define COLL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define COLL_MAX(a, b) ((a) > (b) ? (a) : (b))
#define COLL_DIV_UP(a, b) (((a) + (b) - 1) / (b)) /* a / b rounded up; a, b > 0 */
#define COLL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define COLL_INTERNAL __attribute__((visibility("hidden")))

/* ---- 1 config ------------------------------------------------------------------------ */

/* One snapshot of the COLL_* knobs, taken at comm init (src/base/param.c has the table with
 * defaults and help text; `collbench --help-env` prints it). */
struct coll_config {
    int64_t timeout_ms;     /* COLL_TIMEOUT_MS: no progress for this long is COLL_TIMEOUT */
    int64_t stall_ms;       /* COLL_STALL_MS: no progress for this long is logged, once */
    char algo[256];         /* COLL_ALGO: "" (choose), "ring", or "allreduce=ring,bcast=tree" */
    char transport[32];     /* COLL_TRANSPORT: "" (best) or a transport's name */
    char host_id[48];       /* COLL_HOST_ID: "" or a name that stands for this rank's host */
    char socket_ifname[64]; /* COLL_SOCKET_IFNAME: prefix list, "^" excludes, "=" exact */
    int64_t chunk_bytes;    /* COLL_CHUNK_BYTES: pipelining unit of the schedules */
    int64_t tree_threshold; /* COLL_TREE_THRESHOLD: used by COLL_SELECT=threshold */
    char select[16];        /* COLL_SELECT: "cost" (the model), "exact" or "threshold" */
    char calib_file[512];   /* COLL_CALIB_FILE: alpha/beta/gamma calibration */
    bool chunk_forced;      /* COLL_CHUNK_BYTES came from the environment */
    int64_t nsocks;         /* COLL_NSOCKS: TCP sockets per peer (reserved for striping) */
    int64_t spin_us;        /* COLL_SPIN_US: how long a wait polls before it sleeps */
    int64_t progress_delay_us; /* COLL_PROGRESS_DELAY_US: before the thread takes an op */
    int64_t sockbuf_bytes;  /* COLL_SOCKBUF_BYTES: SO_SNDBUF/SO_RCVBUF, 0 = kernel default */
    char ib_hca[256];       /* COLL_IB_HCA: "mlx5_0:1,mlx5_1", "^mlx5_1", "=mlx5_0" */
    int64_t ib_gid_index;   /* COLL_IB_GID_INDEX: -1 = choose */
    int64_t ib_timeout;     /* COLL_IB_TIMEOUT: local ACK timeout exponent (4.096 us << t) */
    int64_t ib_retry_cnt;   /* COLL_IB_RETRY_CNT */
    char ib_fake[512];      /* COLL_IB_FAKE: verbs emulation to load (tests) */
    int64_t bootstrap_timeout_ms; /* COLL_BOOTSTRAP_TIMEOUT_MS: root rendezvous deadline */
    char trace[512];        /* COLL_TRACE: Chrome trace file name pattern, "" = off */
    char quant[16];         /* COLL_QUANT: "" or "off" (plain), else a codec name */
    int64_t quant_min_bytes; /* COLL_QUANT_MIN_BYTES: smaller all-reduces stay plain */
    int64_t quant_block;    /* COLL_QUANT_BLOCK: elements per scale */
    int64_t quant_node_ranks; /* COLL_QUANT_NODE_RANKS: 0 = by host and address */
    int64_t check;          /* COLL_CHECK: 1 checks every collective's signature first */
    int64_t shm_flat;       /* COLL_SHM_FLAT: 0 turns the shared-memory fast path off */
    int64_t shm_flat_bytes; /* COLL_SHM_FLAT_BYTES: largest call (per rank) it runs */
    int64_t shm_flat_spin_us; /* COLL_SHM_FLAT_SPIN_US: its waits poll this long */
    int64_t shm_sliced_bytes; /* COLL_SHM_SLICED_BYTES: its sliced all-reduce, up to this */
    int64_t host_cpus;      /* COLL_HOST_CPUS: CPUs this host's ranks share; 0 = affinity */
    int64_t cuda_staging_bytes; /* COLL_CUDA_STAGING_BYTES: pinned staging per comm */
    char cuda_ipc[8];       /* COLL_CUDA_IPC: "auto", "0" or "1" (src/path/ipc.c) */
};

enum coll_param_type { COLL_PARAM_INT, COLL_PARAM_SIZE, COLL_PARAM_STRING };
/* Whose a setting is (0 is no scope: tests/test_base.c fails on an entry without one). */
enum coll_param_scope {
    COLL_SCOPE_COMM = 1, /* decides how calls run: one value per comm, rank 0's */
    COLL_SCOPE_RANK = 2, /* may differ per rank (logging, files, interfaces, waiting) */
};

struct coll_param {
    const char *name;       /* "COLL_TIMEOUT_MS" */
    const char *defval;     /* as text, parsed like the environment */
    const char *help;
    enum coll_param_type type;
    size_t offset;          /* into struct coll_config; SIZE_MAX: read elsewhere (logging) */
    size_t size;            /* field size for strings */
    int64_t min, max;       /* bounds for numbers */
    enum coll_param_scope scope;
};

COLL_INTERNAL extern const struct coll_param coll__params[];
COLL_INTERNAL extern const size_t coll__nparams;

/* Fill cfg from defaults and the environment. A malformed or out-of-range value is
 * COLL_INVALID_ARGUMENT naming the variable (message through coll__error(comm, ...)); a
 * word that is not one of a setting's choices is warned about (rank 0, or rank < 0 when
 * there is no comm, warns; the others say it at INFO). */
COLL_INTERNAL coll_status_t coll__config_load(struct coll_comm *comm, int rank,
                                              struct coll_config *cfg);
/* A setting's value in cfg as text that coll__config_set reads back to the same value (a
 * COLL_CHUNK_BYTES the selector picks is "auto"); p must have a field in cfg. Returns buf. */
COLL_INTERNAL const char *coll__config_format(const struct coll_config *cfg,
                                              const struct coll_param *p, char *buf, size_t n);
/* Set p's field of cfg from text as coll__config_format writes it (or as the environment
 * gives it); COLL_INVALID_ARGUMENT naming p when malformed or out of range, cfg unchanged. */
COLL_INTERNAL coll_status_t coll__config_set(struct coll_comm *comm, struct coll_config *cfg,
                                             const struct coll_param *p, const char *text);
/* Such a warning about a setting, once per text in this process (settings checked above the
 * base: COLL_QUANT's codec names live in src/reduce). */
COLL_INTERNAL void coll__env_warn(int rank, const char *fmt, ...) COLL_PRINTF(2, 3);
/* Parse "64K", "1M", "2G", "123" (binary suffixes); false when malformed or overflowing. */
COLL_INTERNAL bool coll__parse_size(const char *s, int64_t *out_p);
/* A whole decimal number in [lo, hi], nothing before or after it; false otherwise (the
 * tools' flags). */
COLL_INTERNAL bool coll__parse_long(const char *s, long lo, long hi, long *out_p);

/* ---- 2 logging ----------------------------------------------------------------------- */

enum coll_log_level { COLL_LOG_NONE = 0, COLL_LOG_WARN = 1, COLL_LOG_INFO = 2,
                      COLL_LOG_TRACE = 3 };
enum coll_subsys {
    COLL_SUB_INIT = 1u << 0,
    COLL_SUB_BOOTSTRAP = 1u << 1,
    COLL_SUB_NET = 1u << 2,
    COLL_SUB_ALGO = 1u << 3,
    COLL_SUB_COLL = 1u << 4,
    COLL_SUB_ENV = 1u << 5,
    COLL_SUB_SHM = 1u << 6,
    COLL_SUB_ALL = 0xffffffffu
};

/* Process-wide, set once from COLL_DEBUG, COLL_DEBUG_SUBSYS, COLL_DEBUG_FILE. */
COLL_INTERNAL extern int coll__log_level;
COLL_INTERNAL extern uint32_t coll__log_mask;
COLL_INTERNAL void coll__log_init(void);
COLL_INTERNAL void coll__log(int level, uint32_t subsys, const char *fmt, ...)
    COLL_PRINTF(3, 4);

/* The level is checked before the arguments are evaluated. */
#define COLL_LOG(level, subsys, ...)                                                   \
    do {                                                                               \
        if (coll__log_level >= (level) && (coll__log_mask & (subsys)))                 \
            coll__log((level), (subsys), __VA_ARGS__);                                 \
    } while (0)
#define COLL_WARN(subsys, ...) COLL_LOG(COLL_LOG_WARN, subsys, __VA_ARGS__)
#define COLL_INFO(subsys, ...) COLL_LOG(COLL_LOG_INFO, subsys, __VA_ARGS__)
#define COLL_TRACE(subsys, ...) COLL_LOG(COLL_LOG_TRACE, subsys, __VA_ARGS__)

/* ---- 3 errors ------------------------------------------------------------------------ */

/* What the base asks of whoever knows a comm's layout (the core, src/core/error.c, registers
 * it at startup): the rank to prefix a message with (< 0: none yet), and keeping the message
 * as the comm's error text. Without a sink, a comm's errors are the thread's alone. */
struct coll_error_sink {
    int (*rank)(const struct coll_comm *comm);
    void (*record)(struct coll_comm *comm, const char *msg);
    /* The comm's status: COLL_SUCCESS while healthy, else its first failure's. */
    coll_status_t (*status)(const struct coll_comm *comm);
    /* Fail the comm with st (a no-op once failed). Engine lock held. */
    void (*fail)(struct coll_comm *comm, coll_status_t st);
};
COLL_INTERNAL void coll__error_sink_set(const struct coll_error_sink *sink);

/* Record st with a message on comm (or on the calling thread when comm is NULL), log it at
 * WARN (INFO for COLL_INVALID_ARGUMENT, which is the caller's to report), return st.
 * The message is prefixed "rank R: " when comm knows its rank. */
COLL_INTERNAL coll_status_t coll__error(struct coll_comm *comm, coll_status_t st,
                                        const char *fmt, ...) COLL_PRINTF(3, 4);
/* As coll__error with COLL_SYSTEM_ERROR and ": <strerror(err)>" appended. */
COLL_INTERNAL coll_status_t coll__sys_error(struct coll_comm *comm, int err,
                                            const char *fmt, ...) COLL_PRINTF(3, 4);
/* Fail comm with st and a message, first failure wins: a healthy comm records the message
 * (as coll__error) and fails (the sink's fail: every link shuts, every op ends with st); a
 * failed one keeps its message and status, and logs nothing more. Returns the status in
 * force, the first failure's. Engine lock held. Without a comm or a sink, as coll__error. */
COLL_INTERNAL coll_status_t coll__fail(struct coll_comm *comm, coll_status_t st,
                                       const char *fmt, ...) COLL_PRINTF(3, 4);
COLL_INTERNAL coll_status_t coll__failv(struct coll_comm *comm, coll_status_t st,
                                        const char *fmt, va_list ap) COLL_PRINTF(3, 0);
/* The thread's own last message (for calls without a comm), set and read. */
COLL_INTERNAL void coll__set_thread_error(const char *msg);
COLL_INTERNAL const char *coll__thread_error(void);

/* Evaluate expr; on failure store its status in st and jump to label. The label shows. */
#define COLL_CHECK_GOTO(expr, st, label)                                               \
    do {                                                                               \
        (st) = (expr);                                                                 \
        if ((st) != COLL_SUCCESS)                                                      \
            goto label;                                                                \
    } while (0)

/* ---- 4 peers' addresses ---------------------------------------------------------------- */

#define COLL_HOSTNAME_MAX 64
#define COLL_ADDR_MAX 28 /* bytes of a sockaddr_in6 */
#define COLL_MAX_TRANSPORTS 8
#define COLL_TP_ADDR_MAX 32 /* bytes of a transport's own address in the peer info */

/* What each rank publishes at bootstrap; fixed size, sent as is (same ABI on both ends:
 * every field is validated by the receiver). */
struct coll_peer_info {
    int32_t rank;
    int32_t pid;
    uint64_t host_hash;               /* hash of hostname + boot id: "same host" */
    uint64_t machine_hash;            /* hash of the boot id and the PID namespace: ranks on
                                       * one kernel, whatever their hostnames and network
                                       * namespaces, share its CPUs (emulated hosts) */
    char hostname[COLL_HOSTNAME_MAX]; /* NUL-terminated, for messages */
    uint16_t addr_len;                /* bytes used in addr */
    uint8_t addr[COLL_ADDR_MAX];      /* sockaddr of this rank's data listener */
    uint16_t ctl_addr_len;            /* bytes used in ctl_addr */
    uint8_t ctl_addr[COLL_ADDR_MAX];  /* its control plane's listener (src/core/ctl.c) */
    uint32_t tp_mask;                 /* bit i: coll__transports[i] is up on this rank */
    /* slot i: what coll__transports[i] needs to reach this rank when that is not the socket
     * address above (ib: LID, GID and the QP that answers connection requests); its init
     * fills it, the bootstrap carries it as opaque bytes, its probe and connect read it */
    uint8_t tp_addr[COLL_MAX_TRANSPORTS][COLL_TP_ADDR_MAX];
};

/* The bootstrap's view of an id (src/core/bootstrap.c). */
#define COLL_SECRET_BYTES 16
struct coll_id_info {
    uint8_t secret[COLL_SECRET_BYTES];
    uint64_t comm_id;
    uint16_t addr_len;
    uint8_t addr[COLL_ADDR_MAX];      /* the root's sockaddr */
};

/* ---- 6 misc -------------------------------------------------------------------------- */

/* A spinning wait's pause: the engine's and the flat path's. */
static inline void coll__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

COLL_INTERNAL uint64_t coll__now_ns(void); /* CLOCK_MONOTONIC */
/* CLOCK_MONOTONIC_COARSE: a few ns to read, a clock tick (1-10 ms) of resolution; for
 * timeouts counted in milliseconds, read on every call's path */
COLL_INTERNAL uint64_t coll__now_coarse_ns(void);
/* n bytes from the kernel's CSPRNG (getrandom); COLL_SYSTEM_ERROR if unavailable. */
COLL_INTERNAL coll_status_t coll__random(void *buf, size_t n);
/* 64-bit FNV-1a, for host identity and checksums that are not security relevant. */
COLL_INTERNAL uint64_t coll__hash64(const void *data, size_t n, uint64_t seed);
COLL_INTERNAL const char *coll__dtype_name(coll_dtype_t dt);
COLL_INTERNAL const char *coll__op_name(coll_op_t op);
/* A dtype's name and size (src/base/status.c); the size is read inline: a call's path asks
 * for it several times, and the call into status.c cost more than the lookup. */
struct coll_dtype_info {
    const char *name;
    size_t size;
};
COLL_INTERNAL extern const struct coll_dtype_info coll__dtypes[COLL_NUM_DTYPES];
static inline size_t coll__dtype_size(coll_dtype_t dt) /* 0 for an unknown dtype */
{
    return (unsigned)dt < COLL_NUM_DTYPES ? coll__dtypes[dt].size : 0;
}

#endif /* COLL_BASE_H */
