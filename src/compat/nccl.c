/*
 * nccl.c - NCCL's API (include/nccl.h) over coll's native API (include/coll.h), built as
 * libnccl.so.2. A program linked against NCCL runs on coll when this library is found first.
 *
 * Divisions: 1 state (comms, groups, messages), 2 NCCL_* variables, 3 errors and checks,
 * 4 communicators, 5 reduction operators, 6 collectives and groups, 7 memory and
 * registration, 8 the pnccl* aliases.
 *
 * How NCCL's model maps onto coll's:
 *   - an ncclComm wraps one coll_comm_t, plus what NCCL has and coll does not: a
 *     non-blocking init (a thread that runs coll_comm_init while ncclCommGetAsyncError says
 *     ncclInProgress), PreMulSum operators, registrations, the revoked/finalized states;
 *   - a call on host buffers completes before it returns, its stream unused; a call with
 *     a CUDA device buffer goes to coll's stream-ordered collectives (coll_*_stream,
 *     src/path/stream.c), queued on its stream as NCCL's are; ncclCommFinalize has nothing
 *     to flush either way (ncclCommDestroy waits for the streams);
 *   - groups are recorded here, per thread, then replayed inside one coll_group_start/end at
 *     the outermost ncclGroupEnd. Recording here (not in coll's group) is what lets
 *     ncclGroupSimulateEnd price a group without running it, lets grouped ncclCommInitRank
 *     calls join concurrently, and keeps the scaled copies of PreMulSum inputs alive until
 *     the group has run;
 *   - a comm that was destroyed keeps its (small) shell with a dead mark, on a list that is
 *     never freed, so a later call on it is refused with ncclInvalidArgument, not a crash.
 */
#include "core/internal.h"
#include "algo/cost.h"
#include "cuda/cuda.h"
#include "reduce/elem.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The shim's own header: its declarations are checked against the definitions below. */
#include "nccl.h"

#define NCCL_EXPORT __attribute__((visibility("default")))

/* coll_comm_shrink lands in the native library with src/api/shrink.c; until a build has it,
 * the reference stays weak and unresolved (NULL), and shrinking a failed comm says so. */
#pragma weak coll_comm_shrink

/* ---- 1 state ------------------------------------------------------------------------- */

#define SHIM_LIVE 0x6c69766543434f4cull /* a comm in use */
#define SHIM_DEAD 0x6465616443434f4cull /* a destroyed comm's shell */
#define SHIM_MSG 512

enum shim_job { JOB_NONE, JOB_INIT, JOB_SPLIT, JOB_SHRINK };

struct shim_premul {
    bool used;
    ncclDataType_t dtype;
    ncclScalarResidence_t residence;
    unsigned char value[8]; /* HostImmediate: the scalar, read at creation */
    const void *ptr;        /* Device: read at each collective */
};

struct shim_reg {
    struct shim_reg *next;
    void *buff;
    size_t size;
    int window; /* 0: ncclCommRegister handle, 1: ncclWindow_t */
    int flags;
};

struct ncclComm {
    uint64_t magic;
    coll_comm_t *c; /* NULL until the init job succeeded */
    int nranks, rank, dev, blocking;
    char name[64];

    /* The init or split that makes c: run inline, at ncclGroupEnd, or in job_thread. */
    enum shim_job job;
    coll_unique_id_t id;
    struct ncclComm *parent;
    int color, key;
    int *exclude, nexclude; /* JOB_SHRINK */
    pthread_t job_thread;
    bool job_joinable;
    /* ncclInProgress while the job runs; afterwards its status, or the first failure of an
     * operation that leaves the comm unusable (peer death, timeout, abort). */
    _Atomic int async;

    bool revoked, finalized;
    pthread_mutex_t lock; /* regs and premul: Register may race with nothing else */
    struct shim_reg *regs;
    struct shim_premul *premul;
    int npremul;
    char msg[SHIM_MSG];
    struct ncclComm *grave_next;
};

struct ncclWindow_vidmem {
    struct shim_reg reg;
};

/* A call: its collective's row (src/algo/colls.h) gives its names and what it takes. */
struct shim_call {
    enum coll_coll coll;
    uint8_t dir; /* a send or receive: COLL_STEP_SEND or COLL_STEP_RECV */
    const void *sbuf;
    void *rbuf;
    size_t count;
    ncclDataType_t dt;
    ncclRedOp_t op;
    int root; /* or peer */
    struct ncclComm *comm;
    cudaStream_t stream;
    bool dev; /* a buffer is device memory: the stream-ordered path */
};

/* Per thread, as NCCL's groups. */
struct shim_group {
    int depth;
    ncclResult_t err;  /* first failure recorded inside the group */
    int blocking;      /* -1 until the first comm of the group */
    struct shim_call *calls;
    size_t ncalls, cap;
    struct ncclComm **inits;
    size_t ninits, icap;
};
static __thread struct shim_group grp = {.blocking = -1};
static __thread char tls_msg[SHIM_MSG];

static pthread_mutex_t glock = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm *graveyard;
struct shim_mem {
    struct shim_mem *next;
    void *ptr;
};
static struct shim_mem *mem_list;

/* ---- 2 NCCL_* variables -------------------------------------------------------------- */

static pthread_once_t env_once = PTHREAD_ONCE_INIT;

/* Set COLL_name from NCCL's value unless the user set COLL_name too (coll's name wins). */
static void env_put(const char *nccl_name, const char *coll_name, const char *value)
{
    const char *have = getenv(coll_name);

    if (have && *have) {
        COLL_INFO(COLL_SUB_ENV, "%s ignored: %s=%s is set and wins", nccl_name, coll_name, have);
        return;
    }
    setenv(coll_name, value, 1);
}

static const char *env_get(const char *name)
{
    const char *v = getenv(name);

    return v && *v ? v : NULL;
}

/* NCCL_DEBUG: VERSION, WARN, INFO, ABORT, TRACE; coll has NONE, WARN, INFO, TRACE. */
static void env_debug(void)
{
    const char *v = env_get("NCCL_DEBUG");

    if (!v)
        return;
    if (!strcasecmp(v, "INFO") || !strcasecmp(v, "TRACE") || !strcasecmp(v, "WARN"))
        env_put("NCCL_DEBUG", "COLL_DEBUG", v);
    else if (!strcasecmp(v, "VERSION") || !strcasecmp(v, "ABORT"))
        env_put("NCCL_DEBUG", "COLL_DEBUG", "WARN");
}

/* NCCL_DEBUG_SUBSYS: coll's subsystems where one corresponds, the rest reported below. */
static void env_subsys(char *unmapped, size_t size)
{
    static const struct {
        const char *nccl, *coll;
    } map[] = {
        {"INIT", "INIT"},   {"COLL", "COLL"}, {"P2P", "NET"},        {"SHM", "SHM"},
        {"NET", "NET"},     {"GRAPH", "ALGO"}, {"TUNING", "ALGO"},   {"ENV", "ENV"},
        {"BOOTSTRAP", "BOOTSTRAP"}, {"ALL", "ALL"},
    };
    const char *v = env_get("NCCL_DEBUG_SUBSYS");
    char in[256], out[256] = "";
    bool exclude;
    char *tok, *save = NULL;
    size_t i;

    unmapped[0] = '\0';
    if (!v)
        return;
    exclude = v[0] == '^';
    snprintf(in, sizeof(in), "%s", v + exclude);
    for (tok = strtok_r(in, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        for (i = 0; i < COLL_ARRAY_SIZE(map); i++)
            if (!strcasecmp(tok, map[i].nccl))
                break;
        if (i == COLL_ARRAY_SIZE(map)) {
            snprintf(unmapped + strlen(unmapped), size - strlen(unmapped), "%s%s",
                     unmapped[0] ? "," : "", tok);
            continue;
        }
        if (strstr(out, map[i].coll))
            continue;
        snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s",
                 out[0] ? "," : (exclude ? "^" : ""), map[i].coll);
    }
    if (out[0])
        env_put("NCCL_DEBUG_SUBSYS", "COLL_DEBUG_SUBSYS", out);
}

/* NCCL_ALGO: "Ring", "Tree", a list, or per function "allreduce:tree;broadcast:ring". coll
 * takes one algorithm per collective: the first of each list that coll has. NCCL's Tree is
 * an all-reduce algorithm; CollNet, NVLS and PAT need hardware coll does not drive. */
static void env_algo(char *dropped, size_t size)
{
    static const char *const funcs[][2] = {
        {"allreduce", "allreduce"}, {"broadcast", "broadcast"}, {"reduce", "reduce"},
        {"allgather", "allgather"}, {"reducescatter", "reducescatter"},
    };
    const char *v = env_get("NCCL_ALGO");
    char in[256], out[256] = "";
    char *part, *save = NULL;

    dropped[0] = '\0';
    if (!v)
        return;
    if (v[0] == '^') {
        snprintf(dropped, size, "%s (exclusion lists)", v);
        return;
    }
    snprintf(in, sizeof(in), "%s", v);
    for (part = strtok_r(in, ";", &save); part; part = strtok_r(NULL, ";", &save)) {
        char *colon = strchr(part, ':'), *list = colon ? colon + 1 : part, *alg, *s2 = NULL;
        const char *func = NULL, *pick = NULL;
        size_t i;

        if (colon) {
            *colon = '\0';
            for (i = 0; i < COLL_ARRAY_SIZE(funcs); i++)
                if (!strcasecmp(part, funcs[i][0]))
                    func = funcs[i][1];
            if (!func) {
                snprintf(dropped + strlen(dropped), size - strlen(dropped), "%s%s:%s",
                         dropped[0] ? ";" : "", part, list);
                continue;
            }
        }
        for (alg = strtok_r(list, ",", &s2); alg && !pick; alg = strtok_r(NULL, ",", &s2)) {
            if (!strcasecmp(alg, "ring"))
                pick = "ring";
            else if (!strcasecmp(alg, "tree"))
                pick = "tree";
            else
                snprintf(dropped + strlen(dropped), size - strlen(dropped), "%s%s",
                         dropped[0] ? "," : "", alg);
        }
        if (!pick)
            continue;
        if (!func && !strcmp(pick, "tree"))
            func = "allreduce";
        if (func)
            snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s=%s", out[0] ? "," : "",
                     func, pick);
        else
            snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s", out[0] ? "," : "",
                     pick);
    }
    if (out[0])
        env_put("NCCL_ALGO", "COLL_ALGO", out);
}

static bool env_true(const char *name)
{
    const char *v = env_get(name);

    return v && strcmp(v, "0") != 0;
}

static void env_setup(void)
{
    extern char **environ;
    static const char *const direct[][2] = {
        {"NCCL_DEBUG_FILE", "COLL_DEBUG_FILE"},
        {"NCCL_SOCKET_IFNAME", "COLL_SOCKET_IFNAME"},
        {"NCCL_IB_HCA", "COLL_IB_HCA"},
        {"NCCL_IB_GID_INDEX", "COLL_IB_GID_INDEX"},
    };
    static const char *const handled[] = {
        "NCCL_DEBUG",        "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_SOCKET_IFNAME",
        "NCCL_COMM_ID",      "NCCL_ALGO",         "NCCL_IB_HCA",     "NCCL_IB_GID_INDEX",
        "NCCL_SHM_DISABLE",  "NCCL_P2P_DISABLE",  "NCCL_IB_DISABLE",
    };
    char subsys_left[256], algo_left[256];
    size_t i;
    char **e;

    env_debug();
    env_subsys(subsys_left, sizeof(subsys_left));
    for (i = 0; i < COLL_ARRAY_SIZE(direct); i++)
        if (env_get(direct[i][0]))
            env_put(direct[i][0], direct[i][1], env_get(direct[i][0]));
    env_algo(algo_left, sizeof(algo_left));
    /* coll's host transports are shared memory, InfiniBand and TCP; with both fast ones
     * disabled only TCP is left, which COLL_TRANSPORT forces. */
    if (env_true("NCCL_SHM_DISABLE") && env_true("NCCL_IB_DISABLE"))
        env_put("NCCL_SHM_DISABLE", "COLL_TRANSPORT", "tcp");
    coll__log_init(); /* after COLL_DEBUG* are final: coll reads them once per process */

    if (env_get("NCCL_DEBUG") && !strcasecmp(env_get("NCCL_DEBUG"), "VERSION"))
        COLL_WARN(COLL_SUB_INIT, "NCCL version %d.%d.%d API on coll %d.%d.%d", NCCL_MAJOR,
                  NCCL_MINOR, NCCL_PATCH, COLL_VERSION_MAJOR, COLL_VERSION_MINOR,
                  COLL_VERSION_PATCH);
    if (subsys_left[0])
        COLL_INFO(COLL_SUB_ENV, "NCCL_DEBUG_SUBSYS: %s have no counterpart in coll", subsys_left);
    if (algo_left[0])
        COLL_INFO(COLL_SUB_ENV, "NCCL_ALGO: %s not available in coll; ignored", algo_left);
    if ((env_true("NCCL_SHM_DISABLE") != env_true("NCCL_IB_DISABLE")))
        COLL_INFO(COLL_SUB_ENV, "NCCL_%s_DISABLE: coll disables single transports only all "
                  "together (both SHM and IB: TCP); ignored",
                  env_true("NCCL_SHM_DISABLE") ? "SHM" : "IB");
    if (env_true("NCCL_P2P_DISABLE"))
        COLL_INFO(COLL_SUB_ENV, "NCCL_P2P_DISABLE: coll moves no GPU-to-GPU data in this build "
                  "path (host buffers); nothing to disable");
    if (env_get("NCCL_COMM_ID"))
        COLL_WARN(COLL_SUB_ENV, "NCCL_COMM_ID='%s' ignored: coll's ids carry a random secret, so "
                  "a fixed root address cannot stand for one; pass the id of ncclGetUniqueId "
                  "to every rank", env_get("NCCL_COMM_ID"));
    for (e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
        bool known = false;

        if (strncmp(*e, "NCCL_", 5) != 0)
            continue;
        for (i = 0; i < COLL_ARRAY_SIZE(handled); i++)
            if (strlen(handled[i]) == n && !strncmp(*e, handled[i], n))
                known = true;
        if (!known)
            COLL_INFO(COLL_SUB_ENV, "%.*s has no meaning for coll; ignored", (int)n, *e);
    }
}

static void shim_setup(void)
{
    pthread_once(&env_once, env_setup);
}

/* ---- 3 errors and checks ------------------------------------------------------------- */

/* Record the reason of a failure on the thread (and on comm), log it, return st. */
static ncclResult_t fail(struct ncclComm *comm, ncclResult_t st, const char *fmt, ...)
    COLL_PRINTF(3, 4);
static ncclResult_t fail(struct ncclComm *comm, ncclResult_t st, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(tls_msg, sizeof(tls_msg), fmt, ap);
    va_end(ap);
    if (comm && comm->magic == SHIM_LIVE)
        memcpy(comm->msg, tls_msg, sizeof(comm->msg));
    if (st == ncclInvalidArgument || st == ncclInvalidUsage)
        COLL_INFO(COLL_SUB_COLL, "%s", tls_msg);
    else
        COLL_WARN(COLL_SUB_COLL, "%s", tls_msg);
    return st;
}

/* A coll status as NCCL's, with coll's message. A comm whose peers failed stays failed. */
static ncclResult_t from_coll(struct ncclComm *comm, coll_status_t st)
{
    const char *why;
    ncclResult_t r;

    if (st == COLL_SUCCESS)
        return ncclSuccess;
    why = comm && comm->c ? coll_last_error(comm->c) : "";
    if (!why[0])
        why = coll_last_error(NULL);
    r = st == COLL_TIMEOUT ? ncclRemoteError : (ncclResult_t)st;
    if (r < ncclSuccess || r >= ncclNumResults)
        r = ncclInternalError;
    snprintf(tls_msg, sizeof(tls_msg), "%s", why[0] ? why : coll_status_string(st));
    if (comm && comm->magic == SHIM_LIVE) {
        memcpy(comm->msg, tls_msg, sizeof(comm->msg));
        if (st == COLL_REMOTE_ERROR || st == COLL_TIMEOUT)
            atomic_store(&comm->async, (int)r);
    }
    return r;
}

static ncclResult_t comm_check(struct ncclComm *comm, const char *fn)
{
    if (!comm)
        return fail(NULL, ncclInvalidArgument, "%s: comm is NULL", fn);
    if (comm->magic == SHIM_DEAD)
        return fail(NULL, ncclInvalidArgument, "%s: comm %p was destroyed", fn, (void *)comm);
    if (comm->magic != SHIM_LIVE)
        return fail(NULL, ncclInvalidArgument,
                    "%s: comm %p is not a communicator (never initialized?)", fn, (void *)comm);
    return ncclSuccess;
}

static void job_join(struct ncclComm *comm)
{
    if (comm->job_joinable) {
        pthread_join(comm->job_thread, NULL);
        comm->job_joinable = false;
    }
}

/* comm is usable for operations: its init finished well and it was not revoked. */
static ncclResult_t comm_ready(struct ncclComm *comm, const char *fn)
{
    ncclResult_t st = comm_check(comm, fn);
    int a;

    if (st != ncclSuccess)
        return st;
    /* An operation on a comm still joining waits for the join (NCCL asks users to poll
     * ncclCommGetAsyncError first; waiting is the safe reading of not doing so). */
    if (comm->job_joinable)
        job_join(comm);
    a = atomic_load_explicit(&comm->async, memory_order_acquire);
    if (a != ncclSuccess)
        return fail(comm, (ncclResult_t)a, "%s: comm failed earlier: %s", fn,
                    comm->msg[0] ? comm->msg : ncclGetErrorString((ncclResult_t)a));
    if (comm->revoked)
        return fail(comm, ncclInvalidUsage, "%s: comm was revoked", fn);
    if (comm->finalized)
        return fail(comm, ncclInvalidUsage, "%s: comm was finalized; only ncclCommDestroy is "
                    "allowed now", fn);
    return ncclSuccess;
}

/* Layouts of ncclConfig_t by size: 2.28's, and earlier ones without the later fields. A
 * config must carry the initializer's magic and a size no larger than ours. */
struct shim_config {
    int blocking; /* 1 or 0 */
    char name[64];
};

static ncclResult_t config_read(const ncclConfig_t *cfg, int inherit_blocking,
                                struct shim_config *out_p, const char *fn)
{
    struct shim_config out = {.blocking = inherit_blocking};

    if (cfg) {
        if (cfg->magic != NCCL_CONFIG_MAGIC_)
            return fail(NULL, ncclInvalidArgument,
                        "%s: config has magic 0x%x, not 0x%x: initialize it with "
                        "NCCL_CONFIG_INITIALIZER", fn, cfg->magic, NCCL_CONFIG_MAGIC_);
        if (cfg->size < offsetof(ncclConfig_t, blocking) + sizeof(int) ||
            cfg->size > sizeof(ncclConfig_t))
            return fail(NULL, ncclInvalidArgument,
                        "%s: config size %zu is not one of an NCCL config (%zu..%zu bytes)", fn,
                        cfg->size, offsetof(ncclConfig_t, blocking) + sizeof(int),
                        sizeof(ncclConfig_t));
        if (cfg->version < NCCL_VERSION(2, 14, 0) || cfg->version > NCCL_VERSION_CODE)
            return fail(NULL, ncclInvalidArgument,
                        "%s: config version %u is not an NCCL version from 2.14 to %d", fn,
                        cfg->version, NCCL_VERSION_CODE);
        if (cfg->blocking != NCCL_CONFIG_UNDEF_INT) {
            if (cfg->blocking != 0 && cfg->blocking != 1)
                return fail(NULL, ncclInvalidArgument,
                            "%s: config blocking = %d, must be 0 or 1", fn, cfg->blocking);
            out.blocking = cfg->blocking;
        }
        if (cfg->size >= offsetof(ncclConfig_t, commName) + sizeof(const char *) &&
            cfg->commName)
            snprintf(out.name, sizeof(out.name), "%s", cfg->commName);
        if (cfg->size >= offsetof(ncclConfig_t, CTAPolicy) + sizeof(int) &&
            cfg->CTAPolicy != NCCL_CONFIG_UNDEF_INT &&
            (cfg->CTAPolicy < 0 || cfg->CTAPolicy > 2))
            return fail(NULL, ncclInvalidArgument, "%s: config CTAPolicy = %d is not a policy",
                        fn, cfg->CTAPolicy);
    }
    *out_p = out;
    return ncclSuccess;
}

static size_t dt_size(ncclDataType_t dt)
{
    return dt >= 0 && dt < ncclNumTypes ? coll__dtype_size((coll_dtype_t)dt) : 0;
}

/* ---- 4 communicators ----------------------------------------------------------------- */

static struct ncclComm *comm_new(int nranks, int rank, const struct shim_config *cfg)
{
    struct ncclComm *comm = calloc(1, sizeof(*comm));

    if (!comm)
        return NULL;
    comm->magic = SHIM_LIVE;
    comm->nranks = nranks;
    comm->rank = rank;
    comm->dev = rank;
    comm->blocking = cfg->blocking;
    snprintf(comm->name, sizeof(comm->name), "%s", cfg->name);
    atomic_init(&comm->async, ncclInProgress);
    pthread_mutex_init(&comm->lock, NULL);
    return comm;
}

/* Free what the comm holds and keep its shell, marked dead, where later calls find it. */
static void comm_bury(struct ncclComm *comm)
{
    struct shim_reg *r, *next;

    job_join(comm);
    if (comm->c)
        coll_comm_destroy(comm->c);
    comm->c = NULL;
    for (r = comm->regs; r; r = next) {
        next = r->next;
        if (r->window)
            free((struct ncclWindow_vidmem *)(void *)r);
        else
            free(r);
    }
    comm->regs = NULL;
    free(comm->premul);
    comm->premul = NULL;
    free(comm->exclude);
    comm->exclude = NULL;
    comm->npremul = 0;
    pthread_mutex_destroy(&comm->lock);
    comm->magic = SHIM_DEAD;
    pthread_mutex_lock(&glock);
    comm->grave_next = graveyard;
    graveyard = comm;
    pthread_mutex_unlock(&glock);
}

/* The job: make comm->c. Runs in the caller, in a group's thread, or in job_thread. */
static void *job_run(void *arg)
{
    struct ncclComm *comm = arg;
    coll_comm_t *c = NULL;
    coll_status_t st;

    if (comm->job == JOB_INIT)
        st = coll_comm_init(&c, comm->nranks, &comm->id, comm->rank);
    else if (comm->job == JOB_SPLIT)
        st = coll_comm_split(comm->parent->c, comm->color, comm->key, &c);
    else
        st = coll_comm_shrink(comm->parent->c, comm->exclude, comm->nexclude, &c);
    if (st != COLL_SUCCESS) {
        snprintf(comm->msg, sizeof(comm->msg), "%s: %s",
                 comm->job == JOB_INIT    ? "ncclCommInitRank"
                 : comm->job == JOB_SPLIT ? "ncclCommSplit"
                                          : "ncclCommShrink",
                 coll_last_error(NULL));
        atomic_store(&comm->async, st == COLL_TIMEOUT ? ncclRemoteError : (int)st);
        return NULL;
    }
    if (c) {
        coll_comm_rank(c, &comm->rank);
        coll_comm_size(c, &comm->nranks);
        if (comm->job != JOB_INIT)
            comm->dev = comm->parent->dev;
    }
    comm->c = c;
    if (comm->name[0])
        COLL_INFO(COLL_SUB_INIT, "comm '%s': rank %d of %d ready", comm->name, comm->rank,
                  comm->nranks);
    atomic_store_explicit(&comm->async, ncclSuccess, memory_order_release);
    return NULL;
}

/* Start comm's job: inline when blocking, else in a thread (ncclInProgress). */
static ncclResult_t job_start(struct ncclComm *comm, bool blocking)
{
    int err;

    if (blocking) {
        job_run(comm);
        return (ncclResult_t)atomic_load(&comm->async);
    }
    err = pthread_create(&comm->job_thread, NULL, job_run, comm);
    if (err) {
        atomic_store(&comm->async, ncclSystemError);
        return fail(comm, ncclSystemError, "cannot start the init thread: %s", strerror(err));
    }
    comm->job_joinable = true;
    return ncclInProgress;
}

static ncclResult_t group_mode(struct ncclComm *comm, bool init, const char *fn)
{
    if (init ? grp.ncalls > 0 : grp.ninits > 0)
        grp.err = fail(NULL, ncclInvalidUsage,
                       "%s: communicator init and operations cannot be in one group", fn);
    else if (grp.blocking != -1 && grp.blocking != comm->blocking)
        grp.err = fail(NULL, ncclInvalidUsage,
                       "%s: blocking and non-blocking communicators cannot be in one group", fn);
    else {
        grp.blocking = comm->blocking;
        return ncclSuccess;
    }
    return grp.err;
}

static ncclResult_t init_rank(ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank,
                              ncclConfig_t *config, const char *fn)
{
    struct shim_config cfg;
    char idstr[COLL_UNIQUE_ID_STRLEN];
    struct ncclComm *comm;
    ncclResult_t st;

    shim_setup();
    if (!out)
        return fail(NULL, ncclInvalidArgument, "%s: comm is NULL", fn);
    if (nranks < 1)
        return fail(NULL, ncclInvalidArgument, "%s: nranks %d is less than 1", fn, nranks);
    if (rank < 0 || rank >= nranks)
        return fail(NULL, ncclInvalidArgument, "%s: rank %d is out of range for nranks %d", fn,
                    rank, nranks);
    if ((st = config_read(config, 1, &cfg, fn)) != ncclSuccess)
        return st;
    /* The checksum catches an id that ncclGetUniqueId did not make (zeros, another
     * library's, a corrupted copy) here, before anything waits on it. */
    coll_unique_id_to_string((const coll_unique_id_t *)(const void *)id, idstr, sizeof(idstr));
    if (coll_unique_id_from_string(idstr, &(coll_unique_id_t){{0}}) != COLL_SUCCESS)
        return fail(NULL, ncclInvalidArgument,
                    "%s: the unique id was not made by this library's ncclGetUniqueId (%s)", fn,
                    coll_last_error(NULL));
    comm = comm_new(nranks, rank, &cfg);
    if (!comm)
        return fail(NULL, ncclSystemError, "%s: out of memory", fn);
    comm->job = JOB_INIT;
    memcpy(&comm->id, id, sizeof(comm->id));
    if (grp.depth > 0) {
        if ((st = group_mode(comm, true, fn)) != ncclSuccess) {
            comm_bury(comm);
            return st;
        }
        if (grp.ninits == grp.icap) {
            size_t cap = grp.icap ? 2 * grp.icap : 8;
            struct ncclComm **p = realloc(grp.inits, cap * sizeof(*p));

            if (!p) {
                comm_bury(comm);
                return grp.err = fail(NULL, ncclSystemError, "%s: out of memory", fn);
            }
            grp.inits = p;
            grp.icap = cap;
        }
        grp.inits[grp.ninits++] = comm;
        *out = comm;
        return ncclSuccess;
    }
    st = job_start(comm, cfg.blocking);
    if (st != ncclSuccess && st != ncclInProgress) {
        snprintf(tls_msg, sizeof(tls_msg), "%s", comm->msg);
        comm_bury(comm);
        return st;
    }
    *out = comm;
    return st;
}

NCCL_EXPORT ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return fail(NULL, ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    coll_unique_id_t id;
    coll_status_t cst;

    shim_setup();
    if (!uniqueId)
        return fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    if ((cst = coll_get_unique_id(&id)) != COLL_SUCCESS)
        return from_coll(NULL, cst);
    _Static_assert(sizeof(id) == sizeof(*uniqueId), "ids differ in size");
    memcpy(uniqueId, &id, sizeof(id));
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                          int rank)
{
    return init_rank(comm, nranks, &commId, rank, NULL, "ncclCommInitRank");
}

NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                                ncclUniqueId commId, int rank,
                                                ncclConfig_t *config)
{
    return init_rank(comm, nranks, &commId, rank, config, "ncclCommInitRankConfig");
}

NCCL_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank,
                                                  int nId, ncclUniqueId *commIds,
                                                  ncclConfig_t *config)
{
    shim_setup();
    if (nId < 1 || !commIds)
        return fail(NULL, ncclInvalidArgument,
                    "ncclCommInitRankScalable: %s", !commIds ? "commIds is NULL"
                                                             : "nId is less than 1");
    if (nId > nranks)
        return fail(NULL, ncclInvalidArgument,
                    "ncclCommInitRankScalable: nId %d is more than nranks %d", nId, nranks);
    /* One root is enough for coll's rendezvous: every rank joins the first id's. */
    if (nId > 1)
        COLL_INFO(COLL_SUB_INIT, "ncclCommInitRankScalable: %d ids given; all ranks join the "
                  "first (coll's bootstrap has a single root)", nId);
    return init_rank(newcomm, nranks, &commIds[0], myrank, config, "ncclCommInitRankScalable");
}

struct initall_arg {
    coll_unique_id_t id;
    int nranks, rank;
    coll_comm_t *c;
    coll_status_t st;
    char msg[SHIM_MSG];
};

static void *initall_run(void *p)
{
    struct initall_arg *a = p;

    a->st = coll_comm_init(&a->c, a->nranks, &a->id, a->rank);
    if (a->st != COLL_SUCCESS)
        snprintf(a->msg, sizeof(a->msg), "%s", coll_last_error(NULL));
    return NULL;
}

NCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    struct shim_config cfg = {.blocking = 1};
    struct initall_arg *args;
    pthread_t *tids;
    coll_unique_id_t id;
    coll_status_t cst;
    ncclResult_t st = ncclSuccess;
    int i, j, started = 0;

    shim_setup();
    if (!comm)
        return fail(NULL, ncclInvalidArgument, "ncclCommInitAll: comm is NULL");
    if (ndev < 1)
        return fail(NULL, ncclInvalidArgument, "ncclCommInitAll: ndev %d is less than 1", ndev);
    for (i = 0; devlist && i < ndev; i++) {
        if (devlist[i] < 0)
            return fail(NULL, ncclInvalidArgument, "ncclCommInitAll: devlist[%d] = %d", i,
                        devlist[i]);
        for (j = 0; j < i; j++)
            if (devlist[j] == devlist[i])
                return fail(NULL, ncclInvalidUsage,
                            "ncclCommInitAll: device %d appears twice in devlist", devlist[i]);
    }
    if ((cst = coll_get_unique_id(&id)) != COLL_SUCCESS)
        return from_coll(NULL, cst);
    args = calloc((size_t)ndev, sizeof(*args));
    tids = calloc((size_t)ndev, sizeof(*tids));
    if (!args || !tids) {
        st = fail(NULL, ncclSystemError, "ncclCommInitAll: out of memory");
        goto out_free;
    }
    /* coll_comm_init blocks until all ranks joined: one thread per rank. */
    for (i = 0; i < ndev; i++) {
        args[i] = (struct initall_arg){.id = id, .nranks = ndev, .rank = i};
        if (pthread_create(&tids[i], NULL, initall_run, &args[i]) != 0) {
            st = fail(NULL, ncclSystemError, "ncclCommInitAll: cannot start thread %d", i);
            break;
        }
        started++;
    }
    for (i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    for (i = 0; i < started && st == ncclSuccess; i++)
        if (args[i].st != COLL_SUCCESS)
            st = fail(NULL, args[i].st == COLL_TIMEOUT ? ncclRemoteError
                                                       : (ncclResult_t)args[i].st,
                      "ncclCommInitAll: rank %d: %s", i, args[i].msg);
    if (st == ncclSuccess && started == ndev) {
        for (i = 0; i < ndev; i++) {
            struct ncclComm *c = comm_new(ndev, i, &cfg);

            if (!c) {
                st = fail(NULL, ncclSystemError, "ncclCommInitAll: out of memory");
                for (j = 0; j < i; j++)
                    comm_bury(comm[j]);
                break;
            }
            c->c = args[i].c;
            args[i].c = NULL;
            c->dev = devlist ? devlist[i] : i;
            atomic_store(&c->async, ncclSuccess);
            comm[i] = c;
        }
    }
    for (i = 0; i < started; i++)
        coll_comm_destroy(args[i].c); /* those not handed over, after a failure */
out_free:
    free(args);
    free(tids);
    return st;
}

NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    ncclResult_t st = comm_check(comm, "ncclCommFinalize");

    if (st != ncclSuccess)
        return st;
    if (grp.depth > 0)
        return fail(comm, ncclInvalidUsage, "ncclCommFinalize: not allowed inside a group");
    job_join(comm);
    /* Every operation completed before its call returned: nothing is left to flush. */
    comm->finalized = true;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    ncclResult_t st;

    if (!comm)
        return ncclSuccess;
    if ((st = comm_check(comm, "ncclCommDestroy")) != ncclSuccess)
        return st;
    if (grp.depth > 0)
        return fail(comm, ncclInvalidUsage, "ncclCommDestroy: not allowed inside a group");
    comm_bury(comm);
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    ncclResult_t st;

    if (!comm)
        return ncclSuccess;
    if ((st = comm_check(comm, "ncclCommAbort")) != ncclSuccess)
        return st;
    job_join(comm);
    if (comm->c)
        coll_comm_abort(comm->c);
    comm_bury(comm);
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
    ncclResult_t st = comm_check(comm, "ncclCommRevoke");

    if (st != ncclSuccess)
        return st;
    if (revokeFlags != NCCL_REVOKE_DEFAULT)
        return fail(comm, ncclInvalidArgument, "ncclCommRevoke: revokeFlags %d is not 0",
                    revokeFlags);
    if (grp.depth > 0)
        return fail(comm, ncclInvalidUsage, "ncclCommRevoke: not allowed inside a group");
    job_join(comm);
    /* No operation is in flight between calls, so stopping them is marking the comm. */
    comm->revoked = true;
    return ncclSuccess;
}

/* Split and Shrink read the parent: usable, even when revoked. */
static ncclResult_t parent_ready(struct ncclComm *comm, const char *fn)
{
    ncclResult_t st = comm_check(comm, fn);
    int a;

    if (st != ncclSuccess)
        return st;
    job_join(comm);
    a = atomic_load(&comm->async);
    if (a != ncclSuccess)
        return fail(comm, (ncclResult_t)a, "%s: parent comm failed: %s", fn, comm->msg);
    if (grp.depth > 0)
        return fail(comm, ncclInvalidUsage, "%s: not allowed inside a group", fn);
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                       ncclConfig_t *config)
{
    struct shim_config cfg;
    struct ncclComm *nc;
    ncclResult_t st;

    if ((st = parent_ready(comm, "ncclCommSplit")) != ncclSuccess)
        return st;
    if (!newcomm)
        return fail(comm, ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
        return fail(comm, ncclInvalidArgument,
                    "ncclCommSplit: color %d is negative and not NCCL_SPLIT_NOCOLOR", color);
    if ((st = config_read(config, comm->blocking, &cfg, "ncclCommSplit")) != ncclSuccess)
        return st;
    if (!cfg.name[0] && !config)
        snprintf(cfg.name, sizeof(cfg.name), "%s", comm->name);
    nc = comm_new(0, 0, &cfg);
    if (!nc)
        return fail(comm, ncclSystemError, "ncclCommSplit: out of memory");
    nc->job = JOB_SPLIT;
    nc->parent = comm;
    nc->color = color;
    nc->key = key;
    /* Without a color this rank only takes part in the split: nothing to wait for later. */
    st = job_start(nc, cfg.blocking || color == NCCL_SPLIT_NOCOLOR);
    if (st == ncclInProgress) {
        *newcomm = nc;
        return st;
    }
    if (st != ncclSuccess) {
        st = fail(comm, st, "%s", nc->msg);
        comm_bury(nc);
        return st;
    }
    if (!nc->c) {
        comm_bury(nc);
        *newcomm = NULL;
        return ncclSuccess;
    }
    *newcomm = nc;
    return ncclSuccess;
}

/*
 * Shrink. Two ways, as the parent stands:
 *   - healthy parent, NCCL_SHRINK_DEFAULT: the parent stays usable, as NCCL's does. The
 *     survivors need a fresh id among themselves; a collective of the parent cannot carry
 *     it (the excluded ranks do not call), but its point-to-point messages can: the first
 *     survivor makes the id and sends it to each other survivor, then all join it;
 *   - a parent whose peers failed, or NCCL_SHRINK_ABORT: coll_comm_shrink, which needs no
 *     connection (the survivors derive the new id from the parent's shared secret) and
 *     leaves the parent fit only for ncclCommDestroy.
 * Either way every rank outside excludeRanksList calls, and the excluded ranks do not.
 */
NCCL_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList,
                                        int excludeRanksCount, ncclComm_t *newcomm,
                                        ncclConfig_t *config, int shrinkFlags)
{
    const char *fn = "ncclCommShrink";
    struct shim_config cfg;
    coll_unique_id_t id;
    struct ncclComm *nc;
    coll_status_t cst;
    ncclResult_t st;
    char *excluded = NULL;
    int i, leader = -1, newrank = 0, nsurv = 0, a;
    bool healthy;

    if ((st = comm_check(comm, fn)) != ncclSuccess)
        return st;
    if (grp.depth > 0)
        return fail(comm, ncclInvalidUsage, "%s: not allowed inside a group", fn);
    job_join(comm);
    a = atomic_load(&comm->async);
    if (!comm->c)
        return fail(comm, ncclInvalidUsage, "%s: the parent comm never initialized: %s", fn,
                    comm->msg);
    healthy = a == ncclSuccess;
    if (!newcomm)
        return fail(comm, ncclInvalidArgument, "%s: newcomm is NULL", fn);
    if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
        return fail(comm, ncclInvalidArgument, "%s: shrinkFlags %d is not a flag", fn,
                    shrinkFlags);
    if (excludeRanksCount < 0 || (excludeRanksCount > 0 && !excludeRanksList))
        return fail(comm, ncclInvalidArgument, "%s: excludeRanksList is NULL or its count %d "
                    "is negative", fn, excludeRanksCount);
    if ((st = config_read(config, comm->blocking, &cfg, fn)) != ncclSuccess)
        return st;
    excluded = calloc((size_t)comm->nranks, 1);
    if (!excluded)
        return fail(comm, ncclSystemError, "%s: out of memory", fn);
    for (i = 0; i < excludeRanksCount; i++) {
        int r = excludeRanksList[i];

        if (r < 0 || r >= comm->nranks || excluded[r]) {
            st = fail(comm, ncclInvalidArgument, "%s: excludeRanksList[%d] = %d is %s", fn, i, r,
                      r < 0 || r >= comm->nranks ? "out of range" : "listed twice");
            goto out;
        }
        excluded[r] = 1;
    }
    if (excluded[comm->rank]) {
        st = fail(comm, ncclInvalidUsage, "%s: rank %d is in excludeRanksList and must not call",
                  fn, comm->rank);
        goto out;
    }
    for (i = 0; i < comm->nranks; i++) {
        if (excluded[i])
            continue;
        if (leader < 0)
            leader = i;
        if (i == comm->rank)
            newrank = nsurv;
        nsurv++;
    }
    nc = comm_new(nsurv, newrank, &cfg);
    if (!nc) {
        st = fail(comm, ncclSystemError, "%s: out of memory", fn);
        goto out;
    }
    nc->dev = comm->dev;
    nc->parent = comm;
    if (!healthy || shrinkFlags == NCCL_SHRINK_ABORT) {
        if (!coll_comm_shrink) {
            comm_bury(nc);
            st = fail(comm, ncclInvalidUsage, "%s: %s needs coll_comm_shrink, which this build "
                      "of coll lacks", fn, healthy ? "NCCL_SHRINK_ABORT" : "a failed parent");
            goto out;
        }
        nc->job = JOB_SHRINK;
        nc->exclude = malloc(((size_t)excludeRanksCount + 1) * sizeof(int));
        if (!nc->exclude) {
            comm_bury(nc);
            st = fail(comm, ncclSystemError, "%s: out of memory", fn);
            goto out;
        }
        memcpy(nc->exclude, excludeRanksList, (size_t)excludeRanksCount * sizeof(int));
        nc->nexclude = excludeRanksCount;
        /* coll_comm_shrink leaves the parent failed: say so where NCCL users look. */
        snprintf(comm->msg, sizeof(comm->msg), "%s: this comm was shrunk %s; only "
                 "ncclCommDestroy is left", fn, healthy ? "with NCCL_SHRINK_ABORT" :
                 "after a failure");
        atomic_store(&comm->async, healthy ? ncclInvalidUsage : a);
    } else {
        if (comm->rank == leader) {
            if ((cst = coll_get_unique_id(&id)) == COLL_SUCCESS) {
                coll_group_start();
                for (i = leader + 1; i < comm->nranks; i++)
                    if (!excluded[i])
                        coll_send(&id, sizeof(id), COLL_UINT8, i, comm->c);
                cst = coll_group_end();
            }
        } else {
            cst = coll_recv(&id, sizeof(id), COLL_UINT8, leader, comm->c);
        }
        if (cst != COLL_SUCCESS) {
            comm_bury(nc);
            st = from_coll(comm, cst);
            goto out;
        }
        nc->job = JOB_INIT;
        nc->id = id;
    }
    st = job_start(nc, cfg.blocking);
    if (st != ncclSuccess && st != ncclInProgress) {
        st = fail(comm, st, "%s", nc->msg);
        comm_bury(nc);
        goto out;
    }
    *newcomm = nc;
out:
    free(excluded);
    return st;
}

NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    ncclResult_t st = comm_check(comm, "ncclCommGetAsyncError");
    int a;

    if (st != ncclSuccess)
        return st;
    if (!asyncError)
        return fail(comm, ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
    a = atomic_load_explicit(&comm->async, memory_order_acquire);
    if (a != ncclInProgress)
        job_join(comm); /* finished: reap the thread now rather than at destroy */
    if (a == ncclSuccess && comm->c) {
        /* a stream-ordered collective fails the coll comm after its call has returned */
        coll_status_t cst;
        if (coll_comm_get_async_error(comm->c, &cst) == COLL_SUCCESS && cst != COLL_SUCCESS) {
            a = cst == COLL_TIMEOUT ? ncclRemoteError : (int)cst;
            snprintf(comm->msg, sizeof(comm->msg), "%s", coll_last_error(comm->c));
            atomic_store(&comm->async, a);
        }
    }
    *asyncError = (ncclResult_t)a;
    return ncclSuccess;
}

static ncclResult_t comm_query(const ncclComm_t comm, int *out, const char *fn, int which)
{
    ncclResult_t st = comm_check(comm, fn);

    if (st != ncclSuccess)
        return st;
    if (!out)
        return fail(comm, ncclInvalidArgument, "%s: output pointer is NULL", fn);
    job_join(comm);
    if (atomic_load(&comm->async) == ncclSuccess || comm->c) {
        *out = which == 0 ? comm->nranks : which == 1 ? comm->rank : comm->dev;
        return ncclSuccess;
    }
    return fail(comm, ncclInvalidUsage, "%s: comm did not initialize: %s", fn, comm->msg);
}

NCCL_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    return comm_query(comm, count, "ncclCommCount", 0);
}

NCCL_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    return comm_query(comm, rank, "ncclCommUserRank", 1);
}

NCCL_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    return comm_query(comm, device, "ncclCommCuDevice", 2);
}

NCCL_EXPORT const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled CUDA error (NCCL_DEBUG=INFO tells more)";
    case ncclSystemError: return "system call failed (NCCL_DEBUG=INFO tells more)";
    case ncclInternalError: return "internal error in coll";
    case ncclInvalidArgument: return "invalid argument (ncclGetLastError names it)";
    case ncclInvalidUsage: return "invalid usage (ncclGetLastError says why)";
    case ncclRemoteError: return "a peer failed, disagreed or did not answer in time";
    case ncclInProgress: return "operation in progress";
    default: return "unknown status";
    }
}

NCCL_EXPORT const char *ncclGetLastError(ncclComm_t comm)
{
    if (comm && comm->magic == SHIM_LIVE && comm->msg[0])
        return comm->msg;
    return tls_msg;
}

NCCL_EXPORT void ncclResetDebugInit(void)
{
    /* coll's logging reads its settings once per process (src/base/log.c): only the
     * mapping of NCCL_* onto COLL_* can be redone, for comms made afterwards. */
    env_setup();
}

/* ---- 5 reduction operators ----------------------------------------------------------- */

NCCL_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                                  ncclDataType_t datatype,
                                                  ncclScalarResidence_t residence,
                                                  ncclComm_t comm)
{
    const char *fn = "ncclRedOpCreatePreMulSum";
    ncclResult_t st = comm_check(comm, fn);
    struct shim_premul *p;
    int i;

    if (st != ncclSuccess)
        return st;
    if (!op || !scalar)
        return fail(comm, ncclInvalidArgument, "%s: %s is NULL", fn, !op ? "op" : "scalar");
    if (!dt_size(datatype))
        return fail(comm, ncclInvalidArgument, "%s: datatype %d is not a type", fn,
                    (int)datatype);
    if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
        return fail(comm, ncclInvalidArgument, "%s: residence %d is not a residence", fn,
                    (int)residence);
    pthread_mutex_lock(&comm->lock);
    for (i = 0; i < comm->npremul && comm->premul[i].used; i++)
        ;
    if (i == comm->npremul) {
        if (comm->npremul >= 1 << 20 ||
            !(p = realloc(comm->premul, (size_t)(comm->npremul + 8) * sizeof(*p)))) {
            pthread_mutex_unlock(&comm->lock);
            return fail(comm, ncclSystemError, "%s: out of memory", fn);
        }
        memset(p + comm->npremul, 0, 8 * sizeof(*p));
        comm->premul = p;
        comm->npremul += 8;
    }
    p = &comm->premul[i];
    *p = (struct shim_premul){.used = true, .dtype = datatype, .residence = residence,
                              .ptr = scalar};
    if (residence == ncclScalarHostImmediate)
        memcpy(p->value, scalar, dt_size(datatype));
    pthread_mutex_unlock(&comm->lock);
    *op = (ncclRedOp_t)(ncclNumOps + i);
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    ncclResult_t st = comm_check(comm, "ncclRedOpDestroy");
    int i = (int)op - ncclNumOps;

    if (st != ncclSuccess)
        return st;
    if ((int)op < ncclNumOps)
        return fail(comm, ncclInvalidArgument,
                    "ncclRedOpDestroy: op %d is built in; only created operators are destroyed",
                    (int)op);
    pthread_mutex_lock(&comm->lock);
    if (i >= comm->npremul || !comm->premul[i].used) {
        pthread_mutex_unlock(&comm->lock);
        return fail(comm, ncclInvalidArgument,
                    "ncclRedOpDestroy: op %d was not created on this comm", (int)op);
    }
    comm->premul[i].used = false;
    pthread_mutex_unlock(&comm->lock);
    return ncclSuccess;
}

/* dst[i] = src[i] * s, in the element type (integers wrap modulo 2^bits, as NCCL's
 * PreMulSum does; narrow floats are scaled in fp32 and rounded once). */
static void premul_scale(void *dst, const void *src, size_t n, ncclDataType_t dt,
                         const void *s)
{
    size_t i;

#define SCALE_INT(T)                                                                     \
    do {                                                                                 \
        T sv;                                                                            \
        memcpy(&sv, s, sizeof(T));                                                       \
        for (i = 0; i < n; i++)                                                          \
            ((T *)dst)[i] = (T)(((const T *)src)[i] * sv);                               \
    } while (0)
#define SCALE_NARROW(T, TO32, FROM32)                                                    \
    do {                                                                                 \
        T sv;                                                                            \
        float f;                                                                         \
        memcpy(&sv, s, sizeof(T));                                                       \
        f = TO32(sv);                                                                    \
        for (i = 0; i < n; i++)                                                          \
            ((T *)dst)[i] = FROM32(TO32(((const T *)src)[i]) * f);                       \
    } while (0)
    switch (dt) {
    case ncclInt8:
    case ncclUint8: SCALE_INT(uint8_t); break;
    case ncclInt32:
    case ncclUint32: SCALE_INT(uint32_t); break;
    case ncclInt64:
    case ncclUint64: SCALE_INT(uint64_t); break;
    case ncclFloat32: SCALE_INT(float); break;
    case ncclFloat64: SCALE_INT(double); break;
    case ncclFloat16: SCALE_NARROW(uint16_t, coll__f16_to_f32, coll__f32_to_f16); break;
    case ncclBfloat16: SCALE_NARROW(uint16_t, coll__bf16_to_f32, coll__f32_to_bf16); break;
    case ncclFloat8e4m3: SCALE_NARROW(uint8_t, coll__e4m3_to_f32, coll__f32_to_e4m3); break;
    case ncclFloat8e5m2: SCALE_NARROW(uint8_t, coll__e5m2_to_f32, coll__f32_to_e5m2); break;
    default: break;
    }
#undef SCALE_INT
#undef SCALE_NARROW
}

/* ---- 6 collectives and groups -------------------------------------------------------- */

static bool has_op(const struct shim_call *k)
{
    return coll__colls[k->coll].reduces;
}

static bool has_root(const struct shim_call *k)
{
    return coll__colls[k->coll].root != COLL_ROOT_NONE;
}

/* NCCL's name of the call, for messages. */
static const char *shim_name(const struct shim_call *k)
{
    const struct coll_coll_desc *d = &coll__colls[k->coll];
    return d->p2p && k->dir == COLL_STEP_RECV ? d->nccl_recv : d->nccl;
}

/* Whether p is CUDA device memory (*dev_p set), before anything touches it. */
static ncclResult_t mem_check(struct ncclComm *comm, const void *p, const char *fn, bool *dev_p)
{
    enum coll_mem_kind kind;

    if (!p || !coll__cuda_available())
        return ncclSuccess;
    if (coll__cuda_mem_kind(NULL, p, &kind, NULL) != COLL_SUCCESS)
        return fail(comm, ncclUnhandledCudaError, "%s: %s", fn, coll_last_error(NULL));
    if (kind == COLL_MEM_DEVICE)
        *dev_p = true;
    return ncclSuccess;
}

static ncclResult_t call_check(struct shim_call *k)
{
    const char *fn = shim_name(k);
    struct ncclComm *comm = k->comm;
    ncclResult_t st = comm_ready(comm, fn);

    if (st != ncclSuccess)
        return st;
    if (!dt_size(k->dt))
        return fail(comm, ncclInvalidArgument, "%s: datatype %d is not a type", fn, (int)k->dt);
    if (has_op(k) && (int)k->op >= ncclNumOps) {
        int i = (int)k->op - ncclNumOps;

        if (i >= comm->npremul || !comm->premul[i].used)
            return fail(comm, ncclInvalidArgument, "%s: op %d was not created on this comm", fn,
                        (int)k->op);
        if (comm->premul[i].dtype != k->dt)
            return fail(comm, ncclInvalidArgument,
                        "%s: op %d was created for datatype %d, not %d", fn, (int)k->op,
                        (int)comm->premul[i].dtype, (int)k->dt);
    } else if (has_op(k) && (int)k->op < 0) {
        return fail(comm, ncclInvalidArgument, "%s: op %d is not an operator", fn, (int)k->op);
    }
    if ((has_root(k) || coll__colls[k->coll].p2p) &&
        (k->root < 0 || k->root >= comm->nranks))
        return fail(comm, ncclInvalidArgument, "%s: %s %d is out of range for %d ranks", fn,
                    has_root(k) ? "root" : "peer", k->root, comm->nranks);
    k->dev = false;
    if ((st = mem_check(comm, k->sbuf, fn, &k->dev)) != ncclSuccess ||
        (st = mem_check(comm, k->rbuf, fn, &k->dev)) != ncclSuccess)
        return st;
    /* device buffers: what coll's stream-ordered collectives cover */
    if (k->dev && !coll__colls[k->coll].stream)
        return fail(comm, ncclInvalidUsage,
                    "%s: CUDA device buffers are not supported for this collective by coll's "
                    "NCCL library (host buffers are)", fn);
    if (k->dev && has_op(k) && (int)k->op >= ncclNumOps)
        return fail(comm, ncclInvalidUsage,
                    "%s: PreMulSum operators (ncclRedOpCreatePreMulSum) on CUDA device buffers "
                    "are not supported by coll's NCCL library (host buffers are)", fn);
    return ncclSuccess;
}

/* Issue one checked call to coll. A PreMulSum input is scaled into a copy first: *tmp_p gets
 * the copy, which must outlive the call (until coll_group_end inside a group). */
static coll_status_t call_issue(const struct shim_call *k, void **tmp_p)
{
    coll_comm_t *c = k->comm->c;
    coll_dtype_t dt = (coll_dtype_t)k->dt;
    coll_op_t op = (coll_op_t)k->op;
    const void *sbuf = k->sbuf;

    *tmp_p = NULL;
    if (k->dev) {
        void *s = k->stream;
        switch (k->coll) {
        case COLL_COLL_ALLREDUCE:
            return coll_allreduce_stream(sbuf, k->rbuf, k->count, dt, op, c, s);
        case COLL_COLL_BROADCAST:
            return coll_broadcast_stream(sbuf, k->rbuf, k->count, dt, k->root, c, s);
        case COLL_COLL_REDUCE:
            return coll_reduce_stream(sbuf, k->rbuf, k->count, dt, op, k->root, c, s);
        case COLL_COLL_ALLGATHER: return coll_allgather_stream(sbuf, k->rbuf, k->count, dt, c, s);
        case COLL_COLL_REDUCE_SCATTER:
            return coll_reduce_scatter_stream(sbuf, k->rbuf, k->count, dt, op, c, s);
        case COLL_COLL_ALLTOALL: return coll_alltoall_stream(sbuf, k->rbuf, k->count, dt, c, s);
        case COLL_COLL_SENDRECV:
            return k->dir == COLL_STEP_SEND
                       ? coll_send_stream(sbuf, k->count, dt, k->root, c, s)
                       : coll_recv_stream(k->rbuf, k->count, dt, k->root, c, s);
        default: return COLL_INTERNAL_ERROR; /* refused by call_check */
        }
    }
    if (has_op(k) && (int)k->op >= ncclNumOps) {
        const struct shim_premul *p = &k->comm->premul[(int)k->op - ncclNumOps];
        size_t n = coll__blocks_count(coll__colls[k->coll].send_blocks, k->count,
                                      k->comm->nranks);
        size_t bytes = n * dt_size(k->dt);
        void *tmp;

        if (!sbuf)
            return coll__error(NULL, COLL_INVALID_ARGUMENT, "%s: sendbuff is NULL",
                               shim_name(k));
        tmp = malloc(bytes ? bytes : 1);
        if (!tmp)
            return coll__error(NULL, COLL_SYSTEM_ERROR, "%s: out of memory for a %zu-byte "
                               "scaled copy", shim_name(k), bytes);
        premul_scale(tmp, sbuf, n, k->dt,
                     p->residence == ncclScalarHostImmediate ? p->value : p->ptr);
        *tmp_p = tmp;
        sbuf = tmp;
        op = COLL_SUM;
    }
    switch (k->coll) {
    case COLL_COLL_ALLREDUCE: return coll_allreduce(sbuf, k->rbuf, k->count, dt, op, c);
    case COLL_COLL_BROADCAST: return coll_broadcast(sbuf, k->rbuf, k->count, dt, k->root, c);
    case COLL_COLL_REDUCE: return coll_reduce(sbuf, k->rbuf, k->count, dt, op, k->root, c);
    case COLL_COLL_ALLGATHER: return coll_allgather(sbuf, k->rbuf, k->count, dt, c);
    case COLL_COLL_REDUCE_SCATTER: return coll_reduce_scatter(sbuf, k->rbuf, k->count, dt, op, c);
    case COLL_COLL_ALLTOALL: return coll_alltoall(sbuf, k->rbuf, k->count, dt, c);
    case COLL_COLL_GATHER: return coll_gather(sbuf, k->rbuf, k->count, dt, k->root, c);
    case COLL_COLL_SCATTER: return coll_scatter(sbuf, k->rbuf, k->count, dt, k->root, c);
    case COLL_COLL_SENDRECV:
        return k->dir == COLL_STEP_SEND ? coll_send(sbuf, k->count, dt, k->root, c)
                                        : coll_recv(k->rbuf, k->count, dt, k->root, c);
    default:
        break; /* no NCCL call makes a barrier */
    }
    return COLL_INTERNAL_ERROR;
}

static ncclResult_t call_submit(struct shim_call *k)
{
    ncclResult_t st = call_check(k);
    coll_status_t cst;
    void *tmp;

    if (grp.depth > 0) {
        if (st == ncclSuccess)
            st = group_mode(k->comm, false, shim_name(k));
        if (st != ncclSuccess) {
            if (grp.err == ncclSuccess)
                grp.err = st;
            return st;
        }
        if (grp.ncalls == grp.cap) {
            size_t cap = grp.cap ? 2 * grp.cap : 16;
            struct shim_call *p = realloc(grp.calls, cap * sizeof(*p));

            if (!p)
                return grp.err = fail(k->comm, ncclSystemError, "%s: out of memory",
                                      shim_name(k));
            grp.calls = p;
            grp.cap = cap;
        }
        grp.calls[grp.ncalls++] = *k;
        return ncclSuccess;
    }
    if (st != ncclSuccess)
        return st;
    cst = call_issue(k, &tmp);
    free(tmp);
    return from_coll(k->comm, cst);
}

static void group_clear(void)
{
    free(grp.calls);
    free(grp.inits);
    grp = (struct shim_group){.blocking = -1};
}

NCCL_EXPORT ncclResult_t ncclGroupStart(void)
{
    if (grp.depth == INT32_MAX)
        return fail(NULL, ncclInvalidUsage, "ncclGroupStart: groups nested too deep");
    grp.depth++;
    return ncclSuccess;
}

/* Run the recorded inits: all joins at once (each blocks until every rank has joined). */
static ncclResult_t group_run_inits(void)
{
    ncclResult_t st = ncclSuccess;
    size_t i;

    for (i = 0; i < grp.ninits; i++) {
        ncclResult_t s = job_start(grp.inits[i], false);

        if (s != ncclInProgress && st == ncclSuccess)
            st = s;
    }
    if (grp.blocking == 0)
        return st == ncclSuccess ? ncclInProgress : st;
    for (i = 0; i < grp.ninits; i++) {
        struct ncclComm *c = grp.inits[i];
        int a;

        job_join(c);
        a = atomic_load(&c->async);
        if (a != ncclSuccess && st == ncclSuccess)
            st = fail(c, (ncclResult_t)a, "%s", c->msg);
    }
    return st;
}

static ncclResult_t group_run_calls(void)
{
    void **tmps = calloc(grp.ncalls ? grp.ncalls : 1, sizeof(*tmps));
    struct ncclComm *failed = NULL;
    coll_status_t cst = COLL_SUCCESS, gst;
    size_t i;

    if (!tmps)
        return fail(NULL, ncclSystemError, "ncclGroupEnd: out of memory");
    coll_group_start();
    for (i = 0; i < grp.ncalls && cst == COLL_SUCCESS; i++) {
        cst = call_issue(&grp.calls[i], &tmps[i]);
        if (cst != COLL_SUCCESS)
            failed = grp.calls[i].comm;
    }
    /* coll's group_end returns a recorded failure without issuing anything. */
    gst = coll_group_end();
    if (cst == COLL_SUCCESS)
        cst = gst;
    for (i = 0; i < grp.ncalls; i++)
        free(tmps[i]);
    free(tmps);
    if (cst != COLL_SUCCESS && !failed && grp.ncalls == 1)
        failed = grp.calls[0].comm;
    return from_coll(failed, cst);
}

NCCL_EXPORT ncclResult_t ncclGroupEnd(void)
{
    ncclResult_t st;

    if (grp.depth == 0)
        return fail(NULL, ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart before it");
    if (--grp.depth > 0)
        return grp.err;
    if (grp.err != ncclSuccess) {
        size_t i;

        st = grp.err;
        for (i = 0; i < grp.ninits; i++) {
            snprintf(grp.inits[i]->msg, sizeof(grp.inits[i]->msg),
                     "not initialized: its group failed");
            atomic_store(&grp.inits[i]->async, (int)st);
        }
        group_clear();
        return st;
    }
    st = grp.ninits ? group_run_inits() : ncclSuccess;
    if (st == ncclSuccess && grp.ncalls)
        st = group_run_calls();
    group_clear();
    return st;
}

/* Price the group with coll's cost model instead of running it; estimatedTime in
 * microseconds. A group's calls on one comm run concurrently, so summing them is an upper
 * bound. */
NCCL_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo)
{
    struct coll_cost_params p;
    double total = 0;
    ncclResult_t st = ncclSuccess;
    size_t i;

    if (!simInfo)
        return fail(NULL, ncclInvalidArgument, "ncclGroupSimulateEnd: simInfo is NULL");
    if (simInfo->magic != NCCL_SIM_INFO_MAGIC_ || simInfo->size != sizeof(ncclSimInfo_t))
        return fail(NULL, ncclInvalidArgument, "ncclGroupSimulateEnd: simInfo was not "
                    "initialized with NCCL_SIM_INFO_INITIALIZER");
    if (grp.depth == 0)
        return fail(NULL, ncclInvalidUsage, "ncclGroupSimulateEnd: no ncclGroupStart before it");
    if (--grp.depth > 0)
        return grp.err;
    if (grp.err != ncclSuccess || grp.ninits) {
        st = grp.err != ncclSuccess
                 ? grp.err
                 : fail(NULL, ncclInvalidUsage,
                        "ncclGroupSimulateEnd: a group of communicator inits cannot be "
                        "simulated");
        for (i = 0; i < grp.ninits; i++)
            comm_bury(grp.inits[i]);
        group_clear();
        return st;
    }
    coll__cost_params_default(&p);
    for (i = 0; i < grp.ncalls; i++) {
        const struct shim_call *k = &grp.calls[i];
        struct coll_cost_query q = {.coll = k->coll, .nranks = k->comm->nranks,
                                    .root = has_root(k) ? k->root : 0,
                                    .count = k->count, .dtype = (coll_dtype_t)k->dt};
        struct coll_cost_result res[4];
        size_t nres = 0;

        if (q.coll == COLL_COLL_SENDRECV) {
            total += p.link[COLL_LINK_TCP].alpha +
                     p.link[COLL_LINK_TCP].beta * (double)(k->count * dt_size(k->dt));
            continue;
        }
        if (k->comm->nranks > 1 &&
            coll__cost_rank_algos(&p, NULL, &q, res, COLL_ARRAY_SIZE(res), &nres) ==
                COLL_SUCCESS &&
            nres > 0)
            total += res[0].seconds;
    }
    simInfo->estimatedTime = (float)(total * 1e6);
    group_clear();
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream)
{
    return call_submit(&(struct shim_call){.coll = COLL_COLL_ALLREDUCE, .sbuf = sendbuff,
                                           .rbuf = recvbuff, .count = count, .dt = datatype,
                                           .op = op, .comm = comm, .stream = stream});
}

NCCL_EXPORT ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream)
{
    return call_submit(&(struct shim_call){.coll = COLL_COLL_BROADCAST, .sbuf = sendbuff,
                                           .rbuf = recvbuff, .count = count, .dt = datatype,
                                           .op = ncclSum, .root = root, .comm = comm,
                                           .stream = stream});
}

NCCL_EXPORT ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                                   ncclComm_t comm, cudaStream_t stream)
{
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

NCCL_EXPORT ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, int root,
                                    ncclComm_t comm, cudaStream_t stream)
{
    return call_submit(&(struct shim_call){.coll = COLL_COLL_REDUCE, .sbuf = sendbuff,
                                           .rbuf = recvbuff, .count = count, .dt = datatype,
                                           .op = op, .root = root, .comm = comm, .stream = stream});
}

NCCL_EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream)
{
    return call_submit(&(struct shim_call){.coll = COLL_COLL_ALLGATHER, .sbuf = sendbuff,
                                           .rbuf = recvbuff, .count = sendcount, .dt = datatype,
                                           .op = ncclSum, .comm = comm, .stream = stream});
}

NCCL_EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                                           size_t recvcount, ncclDataType_t datatype,
                                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return call_submit(&(struct shim_call){.coll = COLL_COLL_REDUCE_SCATTER, .sbuf = sendbuff,
                                           .rbuf = recvbuff, .count = recvcount, .dt = datatype,
                                           .op = op, .comm = comm, .stream = stream});
}

NCCL_EXPORT ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclComm_t comm,
                                      cudaStream_t stream)
{
    return call_submit(&(struct shim_call){.coll = COLL_COLL_ALLTOALL, .sbuf = sendbuff,
                                           .rbuf = recvbuff, .count = count, .dt = datatype,
                                           .op = ncclSum, .comm = comm, .stream = stream});
}

NCCL_EXPORT ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, int root, ncclComm_t comm,
                                    cudaStream_t stream)
{
    return call_submit(&(struct shim_call){.coll = COLL_COLL_GATHER, .sbuf = sendbuff,
                                           .rbuf = recvbuff, .count = count, .dt = datatype,
                                           .op = ncclSum, .root = root, .comm = comm,
                                           .stream = stream});
}

NCCL_EXPORT ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream)
{
    return call_submit(&(struct shim_call){.coll = COLL_COLL_SCATTER, .sbuf = sendbuff,
                                           .rbuf = recvbuff, .count = count, .dt = datatype,
                                           .op = ncclSum, .root = root, .comm = comm,
                                           .stream = stream});
}

NCCL_EXPORT ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclComm_t comm, cudaStream_t stream)
{
    return call_submit(&(struct shim_call){.coll = COLL_COLL_SENDRECV, .dir = COLL_STEP_SEND,
                                           .sbuf = sendbuff, .count = count, .dt = datatype,
                                           .op = ncclSum, .root = peer, .comm = comm,
                                           .stream = stream});
}

NCCL_EXPORT ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclComm_t comm, cudaStream_t stream)
{
    return call_submit(&(struct shim_call){.coll = COLL_COLL_SENDRECV, .dir = COLL_STEP_RECV,
                                           .rbuf = recvbuff, .count = count, .dt = datatype,
                                           .op = ncclSum, .root = peer, .comm = comm,
                                           .stream = stream});
}

/* ---- 7 memory and registration ------------------------------------------------------- */

NCCL_EXPORT ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
    struct shim_mem *m;
    void *p = NULL;
    int err;

    if (!ptr)
        return fail(NULL, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
    if (size == 0)
        return fail(NULL, ncclInvalidArgument, "ncclMemAlloc: size is 0");
    m = malloc(sizeof(*m));
    if (!m)
        return fail(NULL, ncclSystemError, "ncclMemAlloc: out of memory");
    /* Page-aligned, as the granularity of NCCL's allocations makes them. */
    err = posix_memalign(&p, 4096, size);
    if (err) {
        free(m);
        return fail(NULL, ncclSystemError, "ncclMemAlloc: %zu bytes: %s", size, strerror(err));
    }
    m->ptr = p;
    pthread_mutex_lock(&glock);
    m->next = mem_list;
    mem_list = m;
    pthread_mutex_unlock(&glock);
    *ptr = p;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclMemFree(void *ptr)
{
    struct shim_mem **pp, *m;

    if (!ptr)
        return ncclSuccess;
    pthread_mutex_lock(&glock);
    for (pp = &mem_list; *pp && (*pp)->ptr != ptr; pp = &(*pp)->next)
        ;
    m = *pp;
    if (m)
        *pp = m->next;
    pthread_mutex_unlock(&glock);
    if (!m)
        return fail(NULL, ncclInvalidArgument, "ncclMemFree: %p was not made by ncclMemAlloc",
                    ptr);
    free(m->ptr);
    free(m);
    return ncclSuccess;
}

static ncclResult_t reg_add(struct ncclComm *comm, struct shim_reg *r, void *buff, size_t size,
                            int window, int flags)
{
    r->buff = buff;
    r->size = size;
    r->window = window;
    r->flags = flags;
    pthread_mutex_lock(&comm->lock);
    r->next = comm->regs;
    comm->regs = r;
    pthread_mutex_unlock(&comm->lock);
    return ncclSuccess;
}

static bool reg_remove(struct ncclComm *comm, struct shim_reg *r, int window)
{
    struct shim_reg **pp;
    bool found = false;

    pthread_mutex_lock(&comm->lock);
    for (pp = &comm->regs; *pp; pp = &(*pp)->next)
        if (*pp == r && r->window == window) {
            *pp = r->next;
            found = true;
            break;
        }
    pthread_mutex_unlock(&comm->lock);
    return found;
}

NCCL_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                                          void **handle)
{
    ncclResult_t st = comm_check(comm, "ncclCommRegister");
    struct shim_reg *r;

    if (st != ncclSuccess)
        return st;
    if (!buff || !handle)
        return fail(comm, ncclInvalidArgument, "ncclCommRegister: %s is NULL",
                    !buff ? "buff" : "handle");
    r = calloc(1, sizeof(*r));
    if (!r)
        return fail(comm, ncclSystemError, "ncclCommRegister: out of memory");
    reg_add(comm, r, buff, size, 0, 0);
    *handle = r;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
    ncclResult_t st = comm_check(comm, "ncclCommDeregister");

    if (st != ncclSuccess)
        return st;
    if (!handle || !reg_remove(comm, handle, 0))
        return fail(comm, ncclInvalidArgument,
                    "ncclCommDeregister: handle %p was not registered on this comm", handle);
    free(handle);
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                                ncclWindow_t *win, int winFlags)
{
    ncclResult_t st = comm_check(comm, "ncclCommWindowRegister");
    struct ncclWindow_vidmem *w;

    if (st != ncclSuccess)
        return st;
    if (!buff || !win)
        return fail(comm, ncclInvalidArgument, "ncclCommWindowRegister: %s is NULL",
                    !buff ? "buff" : "win");
    if (winFlags & ~(NCCL_WIN_DEFAULT | NCCL_WIN_COLL_SYMMETRIC))
        return fail(comm, ncclInvalidArgument, "ncclCommWindowRegister: winFlags 0x%x unknown",
                    (unsigned)winFlags);
    w = calloc(1, sizeof(*w));
    if (!w)
        return fail(comm, ncclSystemError, "ncclCommWindowRegister: out of memory");
    reg_add(comm, &w->reg, buff, size, 1, winFlags);
    *win = w;
    return ncclSuccess;
}

NCCL_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
    ncclResult_t st = comm_check(comm, "ncclCommWindowDeregister");

    if (st != ncclSuccess)
        return st;
    if (!win || !reg_remove(comm, &win->reg, 1))
        return fail(comm, ncclInvalidArgument,
                    "ncclCommWindowDeregister: window %p was not registered on this comm",
                    (void *)win);
    free(win);
    return ncclSuccess;
}

/* ---- 8 the pnccl* aliases ------------------------------------------------------------ */

/* Profilers interpose nccl* and call pnccl* for the real work: same code, second name. */
#define PNCCL_ALIAS(ret, name, params) \
    NCCL_EXPORT ret p##name params __attribute__((alias(#name)));
PNCCL_ALIAS(ncclResult_t, ncclMemAlloc, (void **ptr, size_t size))
PNCCL_ALIAS(ncclResult_t, ncclMemFree, (void *ptr))
PNCCL_ALIAS(ncclResult_t, ncclGetVersion, (int *version))
PNCCL_ALIAS(ncclResult_t, ncclGetUniqueId, (ncclUniqueId *uniqueId))
PNCCL_ALIAS(ncclResult_t, ncclCommInitRankConfig,
            (ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config))
PNCCL_ALIAS(ncclResult_t, ncclCommInitRank,
            (ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank))
PNCCL_ALIAS(ncclResult_t, ncclCommInitAll, (ncclComm_t *comm, int ndev, const int *devlist))
PNCCL_ALIAS(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))
PNCCL_ALIAS(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))
PNCCL_ALIAS(ncclResult_t, ncclCommAbort, (ncclComm_t comm))
PNCCL_ALIAS(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))
PNCCL_ALIAS(ncclResult_t, ncclCommSplit,
            (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config))
PNCCL_ALIAS(ncclResult_t, ncclCommShrink,
            (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,
             ncclConfig_t *config, int shrinkFlags))
PNCCL_ALIAS(ncclResult_t, ncclCommInitRankScalable,
            (ncclComm_t *newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds,
             ncclConfig_t *config))
PNCCL_ALIAS(const char *, ncclGetErrorString, (ncclResult_t result))
PNCCL_ALIAS(const char *, ncclGetLastError, (ncclComm_t comm))
PNCCL_ALIAS(void, ncclResetDebugInit, (void))
PNCCL_ALIAS(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t *asyncError))
PNCCL_ALIAS(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int *count))
PNCCL_ALIAS(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int *device))
PNCCL_ALIAS(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int *rank))
PNCCL_ALIAS(ncclResult_t, ncclCommRegister,
            (const ncclComm_t comm, void *buff, size_t size, void **handle))
PNCCL_ALIAS(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void *handle))
PNCCL_ALIAS(ncclResult_t, ncclCommWindowRegister,
            (ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags))
PNCCL_ALIAS(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))
PNCCL_ALIAS(ncclResult_t, ncclRedOpCreatePreMulSum,
            (ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
             ncclScalarResidence_t residence, ncclComm_t comm))
PNCCL_ALIAS(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))
PNCCL_ALIAS(ncclResult_t, ncclReduce,
            (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
             ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream))
PNCCL_ALIAS(ncclResult_t, ncclBcast,
            (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
             cudaStream_t stream))
PNCCL_ALIAS(ncclResult_t, ncclBroadcast,
            (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
             int root, ncclComm_t comm, cudaStream_t stream))
PNCCL_ALIAS(ncclResult_t, ncclAllReduce,
            (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
             ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))
PNCCL_ALIAS(ncclResult_t, ncclReduceScatter,
            (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
             ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))
PNCCL_ALIAS(ncclResult_t, ncclAllGather,
            (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
             ncclComm_t comm, cudaStream_t stream))
PNCCL_ALIAS(ncclResult_t, ncclAlltoAll,
            (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
             ncclComm_t comm, cudaStream_t stream))
PNCCL_ALIAS(ncclResult_t, ncclGather,
            (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
             int root, ncclComm_t comm, cudaStream_t stream))
PNCCL_ALIAS(ncclResult_t, ncclScatter,
            (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
             int root, ncclComm_t comm, cudaStream_t stream))
PNCCL_ALIAS(ncclResult_t, ncclSend,
            (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
             ncclComm_t comm, cudaStream_t stream))
PNCCL_ALIAS(ncclResult_t, ncclRecv,
            (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
             cudaStream_t stream))
PNCCL_ALIAS(ncclResult_t, ncclGroupStart, (void))
PNCCL_ALIAS(ncclResult_t, ncclGroupEnd, (void))
PNCCL_ALIAS(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t *simInfo))
