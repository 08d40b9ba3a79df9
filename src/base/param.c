/*
 * param.c - the one table of COLL_* knobs: name, default, help, where it lands in struct
 * coll_config. Read once per comm at init; `collbench --help-env` prints the table, and the
 * docs are generated from it. Logging knobs (COLL_DEBUG*) are process-wide and read by log.c,
 * but live here too so that one table documents everything.
 *
 * Each entry has a scope. A per-comm setting decides how calls run on the wire or in the
 * shared segment, so every rank of a comm must hold the same value: src/core/settings.c
 * compares them at comm creation and every rank adopts rank 0's. A per-rank one (logging,
 * files, interfaces, waiting, binding) may differ from rank to rank.
 */
#include "base.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CFG(field) offsetof(struct coll_config, field), sizeof(((struct coll_config *)0)->field)
#define NOCFG SIZE_MAX, 0

const struct coll_param coll__params[] = {
    {"COLL_DEBUG", "WARN", "log level: NONE, WARN, INFO or TRACE", COLL_PARAM_STRING, NOCFG, 0, 0,
     COLL_SCOPE_RANK},
    {"COLL_DEBUG_SUBSYS", "ALL",
     "log subsystems, comma-separated (INIT,BOOTSTRAP,NET,ALGO,COLL,ENV,SHM,ALL); ^ excludes",
     COLL_PARAM_STRING, NOCFG, 0, 0, COLL_SCOPE_RANK},
    {"COLL_DEBUG_FILE", "", "log to this file instead of stderr; %h = host, %p = pid",
     COLL_PARAM_STRING, NOCFG, 0, 0, COLL_SCOPE_RANK},
    {"COLL_LAUNCHER", "",
     "coll_comm_init_env: take rank, size and the id from this launcher's variables "
     "(collrun, torchrun, mpirun, srun) instead of detecting it (docs/multihost.md)",
     COLL_PARAM_STRING, NOCFG, 0, 0, COLL_SCOPE_RANK},
    {"COLL_ID_DIR", "",
     "srun without PMIx: a directory all hosts share where rank 0 leaves the unique id "
     "(mode 0600) for the others; default $HOME/.coll",
     COLL_PARAM_STRING, NOCFG, 0, 0, COLL_SCOPE_RANK},
    {"COLL_TOPO", "", "sysfs: discover the host topology from sysfs even when built with hwloc",
     COLL_PARAM_STRING, NOCFG, 0, 0, COLL_SCOPE_RANK},
    {"COLL_TIMEOUT_MS", "600000",
     "an operation that makes no progress for this long fails with COLL_TIMEOUT on every rank "
     "(0 = wait forever)",
     COLL_PARAM_INT, CFG(timeout_ms), 0, INT64_MAX / 1000000, COLL_SCOPE_RANK},
    {"COLL_STALL_MS", "10000",
     "a call that makes no progress for this long says once (WARN) what it waits for; "
     "SIGUSR1 then prints every rank's call on rank 0 (0 = never say)",
     COLL_PARAM_INT, CFG(stall_ms), 0, INT64_MAX / 1000000, COLL_SCOPE_RANK},
    {"COLL_BOOTSTRAP_TIMEOUT_MS", "300000",
     "how long comm init waits for the root and for all ranks to join", COLL_PARAM_INT,
     CFG(bootstrap_timeout_ms), 1, INT64_MAX / 1000000, COLL_SCOPE_RANK},
    {"COLL_ALGO", "",
     "force an algorithm: a name for every collective (ring) or per collective "
     "(allreduce=ring,broadcast=binomial); empty = chosen by size",
     COLL_PARAM_STRING, CFG(algo), 0, 0, COLL_SCOPE_COMM},
    {"COLL_TRANSPORT", "", "force a transport (shm, tcp); empty = the best one for each peer",
     COLL_PARAM_STRING, CFG(transport), 0, 0, COLL_SCOPE_COMM},
    {"COLL_HOST_ID", "",
     "emulation: ranks given different values count as on different hosts (TCP between them, "
     "shared memory within, hierarchical algorithms); empty = the real host",
     COLL_PARAM_STRING, CFG(host_id), 0, 0, COLL_SCOPE_RANK},
    {"COLL_SOCKET_IFNAME", "",
     "network interfaces to use: prefixes (eth,ens), ^ to exclude (^docker,lo), = for an exact "
     "name; empty = first non-loopback interface that is up, else loopback",
     COLL_PARAM_STRING, CFG(socket_ifname), 0, 0, COLL_SCOPE_RANK},
    {"COLL_CHUNK_BYTES", "128K", "pipelining unit of ring, chain and tree schedules",
     COLL_PARAM_SIZE, CFG(chunk_bytes), 64, (int64_t)1 << 30, COLL_SCOPE_COMM},
    {"COLL_SELECT", "cost",
     "how algorithms are chosen: cost (price every applicable algorithm and chunk size with the "
     "calibrated alpha-beta-gamma model, in closed form), exact (the same model by walking every "
     "rank's schedule: slow from a few hundred ranks) or threshold (trees below "
     "COLL_TREE_THRESHOLD, ring and chain above)",
     COLL_PARAM_STRING, CFG(select), 0, 0, COLL_SCOPE_COMM},
    {"COLL_TREE_THRESHOLD", "64K",
     "with COLL_SELECT=threshold: all-reduce, broadcast and reduce below this many bytes use "
     "tree algorithms, ring/chain above",
     COLL_PARAM_SIZE, CFG(tree_threshold), 0, INT64_MAX, COLL_SCOPE_COMM},
    {"COLL_CALIB_FILE", "",
     "calibration file written by collbench --calibrate; empty = $XDG_CACHE_HOME/coll/calib.txt "
     "(or ~/.cache/coll/calib.txt) when it exists, else built-in defaults",
     COLL_PARAM_STRING, CFG(calib_file), 0, 0, COLL_SCOPE_RANK},
    {"COLL_NSOCKS", "1", "TCP sockets per peer", COLL_PARAM_INT, CFG(nsocks), 1, 64,
     COLL_SCOPE_COMM},
    {"COLL_TCP_CONGESTION", "auto",
     "TCP congestion control of data sockets: auto (reno between ranks of one host, where a "
     "pacing one such as bbr slows large messages; the system's otherwise), system, or a name",
     COLL_PARAM_STRING, NOCFG, 0, 0, COLL_SCOPE_RANK},
    {"COLL_SPIN_US", "50",
     "how long a waiting call polls before it sleeps in the kernel (microseconds)", COLL_PARAM_INT,
     CFG(spin_us), 0, 10000000, COLL_SCOPE_RANK},
    {"COLL_PROGRESS_DELAY_US", "200",
     "how long a non-blocking operation nobody waits for or tests stays with its caller "
     "before the progress thread drives it (microseconds)",
     COLL_PARAM_INT, CFG(progress_delay_us), 0, 10000000, COLL_SCOPE_RANK},
    {"COLL_CUDA_DISABLE", "0",
     "1: never load libcudart; every buffer is then host memory (do not pass device buffers); "
     "read once per process",
     COLL_PARAM_INT, NOCFG, 0, 1, COLL_SCOPE_RANK},
    {"COLL_CUDA_LIBRARY", "",
     "libcudart to dlopen; empty = libcudart.so.13, then libcudart.so; read once per process",
     COLL_PARAM_STRING, NOCFG, 0, 0, COLL_SCOPE_RANK},
    {"COLL_CUDA_WAIT_VALUE", "1",
     "1: a stream waiting for a stream-ordered collective's piece waits with "
     "cuStreamWaitValue32 on a page-locked word (where the runtime or libcuda.so.1 has it); "
     "0: in a host function instead, which rules out CUDA IPC; read once per process",
     COLL_PARAM_INT, NOCFG, 0, 1, COLL_SCOPE_RANK},
    {"COLL_CUDA_STAGING_BYTES", "16M",
     "page-locked host memory per comm through which stream-ordered collectives on device "
     "buffers pass (coll_allreduce_stream, ...): messages move in pieces of an eighth of it, up "
     "to four in flight",
     COLL_PARAM_SIZE, CFG(cuda_staging_bytes), 4096, (int64_t)1 << 40, COLL_SCOPE_COMM},
    {"COLL_CUDA_IPC", "auto",
     "stream-ordered all-reduce, reduce-scatter, all-gather, broadcast and reduce on device "
     "buffers of a comm whose ranks share one host move device to device through CUDA IPC "
     "(scratch of COLL_CUDA_STAGING_BYTES device memory per rank), reduced by kernels reading "
     "the peers' memory: auto = when every rank can, 0 = never (staging), 1 = required (the "
     "first such call fails when IPC cannot be used)",
     COLL_PARAM_STRING, CFG(cuda_ipc), 0, 0, COLL_SCOPE_COMM},
    {"COLL_REDUCE_ISA", "",
     "instruction set of the host reduction kernels: scalar, sse2, avx2, avx512 or avx512vbmi; "
     "empty = the best this CPU runs; read once per process",
     COLL_PARAM_STRING, NOCFG, 0, 0, COLL_SCOPE_RANK},
    {"COLL_REDUCE_STREAM_BYTES", "0",
     "host reductions with outputs of at least this many bytes write them with non-temporal "
     "stores; 0 = half the largest CPU cache (4M where sysfs does not say); read once per process",
     COLL_PARAM_SIZE, NOCFG, 0, INT64_MAX, COLL_SCOPE_RANK},
    {"COLL_QUANT", "",
     "quantize fp32/fp16/bf16 sum and avg all-reduces of at least COLL_QUANT_MIN_BYTES on the "
     "wire with this codec: fp16, bf16, int8, e4m3, e5m2, int4, e3m0 or sign1; empty or off = "
     "never (coll_allreduce_quantized asks for it per call)",
     COLL_PARAM_STRING, CFG(quant), 0, 0, COLL_SCOPE_COMM},
    {"COLL_QUANT_MIN_BYTES", "1M", "with COLL_QUANT: smaller all-reduces are not quantized",
     COLL_PARAM_SIZE, CFG(quant_min_bytes), 0, INT64_MAX, COLL_SCOPE_COMM},
    {"COLL_QUANT_BLOCK", "256",
     "with COLL_QUANT: elements per scale of the block codecs (even for int4 and e3m0)",
     COLL_PARAM_INT, CFG(quant_block), 1, 65536, COLL_SCOPE_COMM},
    {"COLL_QUANT_NODE_RANKS", "0",
     "nodes of the hierarchical quantized all-reduce: 0 = ranks sharing a host and a listen "
     "address; k = consecutive groups of k ranks",
     COLL_PARAM_INT, CFG(quant_node_ranks), 0, 1 << 20, COLL_SCOPE_COMM},
    {"COLL_CHECK", "0",
     "1: checking mode: before every collective all ranks exchange its signature (collective, "
     "count, dtype, op, root), so that ranks that disagree all fail within that call, each "
     "naming a rank that called otherwise; costs one small all-gather per call, and a "
     "non-blocking call then waits at issue for every rank to reach it. 0: a disagreement is "
     "an error within the call on every rank that receives anything in it, and on the others "
     "by their next call on the comm (include/coll.h)",
     COLL_PARAM_INT, CFG(check), 0, 1, COLL_SCOPE_COMM},
    {"COLL_SHM_FLAT", "1",
     "1: small collectives (all-reduce, broadcast, reduce, all-gather, barrier), blocking, "
     "non-blocking or grouped, of a comm whose ranks all share one host go through one shared "
     "segment instead of the general path; 0: off (COLL_ALGO=allreduce=flat forces it, =ring "
     "turns it off; the segment, mapped at init, still holds the calls' log)",
     COLL_PARAM_INT, CFG(shm_flat), 0, 1, COLL_SCOPE_COMM},
    {"COLL_SHM_FLAT_BYTES", "4K",
     "largest call the shared-memory fast path runs: bytes per rank (all-gather: each rank's "
     "part); each rank's share of the segment is twice this",
     COLL_PARAM_SIZE, CFG(shm_flat_bytes), 0, (int64_t)1 << 20, COLL_SCOPE_COMM},
    {"COLL_SHM_SLICED_BYTES", "1M",
     "with the shared-memory fast path on (comms of 2 to 16 ranks): all-reduce, "
     "reduce and broadcast above COLL_SHM_FLAT_BYTES go through the segment in pieces of this "
     "many bytes: every rank copies its piece in, each reduces one slice of all of them, and "
     "all (reduce: the root) copy the result out; a broadcast piece is written once by the "
     "root and copied out by the others. The segment grows to twice this per rank; 0 = off "
     "(the general path runs them)",
     COLL_PARAM_SIZE, CFG(shm_sliced_bytes), 0, (int64_t)16 << 20, COLL_SCOPE_COMM},
    {"COLL_SHM_FLAT_SPIN_US", "1000",
     "the longest a wait on the shared-memory fast path polls (yielding the core when ranks "
     "outnumber cores, or after 20 us) before it sleeps on a futex (microseconds): a sleeping "
     "rank takes tens of microseconds to wake, which calls closer together would each pay; a "
     "wait that has to sleep halves the next ones' polling (down to COLL_SPIN_US), waits that "
     "do not win it back",
     COLL_PARAM_INT, CFG(shm_flat_spin_us), 0, 10000000, COLL_SCOPE_RANK},
    {"COLL_HOST_CPUS", "0",
     "the CPUs this host's ranks share, which decides whether waiting ranks spin or yield "
     "(they yield when ranks outnumber CPUs) and how the cost model shares cores; 0 = the "
     "union of the CPU affinities of this host's ranks (read by their pids, so ranks a "
     "launcher pinned one to a CPU count all of them); ranks of other hosts on the same "
     "machine (one kernel and PID namespace) count against the machine's CPUs, this value "
     "when set. collrun sets it when it binds",
     COLL_PARAM_INT, CFG(host_cpus), 0, 1 << 20, COLL_SCOPE_RANK},
    {"COLL_SOCKBUF_BYTES", "0", "SO_SNDBUF and SO_RCVBUF of data sockets; 0 = kernel default",
     COLL_PARAM_SIZE, CFG(sockbuf_bytes), 0, (int64_t)1 << 30, COLL_SCOPE_RANK},
    {"COLL_IB_HCA", "",
     "RDMA devices and ports the ib transport may use, NCCL's syntax: mlx5_0:1,mlx5_1 (prefix "
     "match), =mlx5_0 (exact), ^mlx5_1 (all but); empty = the first active port",
     COLL_PARAM_STRING, CFG(ib_hca), 0, 0, COLL_SCOPE_RANK},
    {"COLL_IB_GID_INDEX", "-1",
     "GID table index for RoCE (and IB with a GRH); -1 = the first RoCE v2 IPv4 GID, else 0",
     COLL_PARAM_INT, CFG(ib_gid_index), -1, 255, COLL_SCOPE_RANK},
    {"COLL_IB_TIMEOUT", "20",
     "InfiniBand local ACK timeout of the queue pairs: 4.096 us << value; a dead peer is "
     "detected after about (COLL_IB_RETRY_CNT + 1) times that",
     COLL_PARAM_INT, CFG(ib_timeout), 1, 31, COLL_SCOPE_RANK},
    {"COLL_IB_RETRY_CNT", "7", "InfiniBand transport retries before a send fails",
     COLL_PARAM_INT, CFG(ib_retry_cnt), 0, 7, COLL_SCOPE_RANK},
    {"COLL_IB_FAKE", "",
     "tests only: path of a verbs emulation (libcoll_fakeverbs.so) the ib transport loads "
     "instead of libibverbs",
     COLL_PARAM_STRING, CFG(ib_fake), 0, 0, COLL_SCOPE_RANK},
    {"COLL_TRACE", "",
     "write every step with timestamps to this Chrome trace / Perfetto JSON file; %r = rank "
     "(else .r<rank> goes before the extension), %p = pid, %h = host, %c = comm id",
     COLL_PARAM_STRING, CFG(trace), 0, 0, COLL_SCOPE_RANK},
};
const size_t coll__nparams = COLL_ARRAY_SIZE(coll__params);

bool coll__parse_size(const char *s, int64_t *out_p)
{
    char *end;
    unsigned long long v, mul = 1;

    if (!s || !*s || *s == '-' || *s == '+')
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s)
        return false;
    switch (*end) {
    case '\0':
        break;
    case 'k': case 'K': mul = 1ull << 10; end++; break;
    case 'm': case 'M': mul = 1ull << 20; end++; break;
    case 'g': case 'G': mul = 1ull << 30; end++; break;
    default:
        return false;
    }
    /* "64K", "64KB" and "64KiB" all mean 65536 */
    if (mul > 1 && *end == 'i' && (end[1] == 'B' || end[1] == 'b'))
        end += 2;
    else if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0' || v > (unsigned long long)INT64_MAX / mul)
        return false;
    *out_p = (int64_t)(v * mul);
    return true;
}

bool coll__parse_long(const char *s, long lo, long hi, long *out_p)
{
    char *end;
    long v;

    if (!s || !*s)
        return false;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *out_p = v;
    return true;
}

static bool parse_int(const char *s, int64_t *out_p)
{
    char *end;
    long long v;

    if (!s || !*s)
        return false;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0')
        return false;
    *out_p = v;
    return true;
}

/* ---- checks of the environment at comm creation ------------------------------------------- */

/* COLL_* names that other parts of the project read, outside the table: the launch variables
 * collrun sets (coll_comm_init_env reads them), and the knobs of tests, benchmarks and build
 * scripts. A name starting with one of the prefixes is theirs too. */
static const char *const other_names[] = {
    "COLL_UNIQUE_ID", "COLL_RANK", "COLL_SIZE", "COLL_LOCAL_RANK", "COLL_LOCAL_SIZE",
    "COLL_BUILD_OPTS", "COLL_CMD", "COLL_ENV", "COLL_QUANT_BENCH", "COLL_SWEEP_ALL",
    "COLL_SWEEP_VERBOSE",
};
static const char *const other_prefixes[] = {"COLL_FAKECUDA_", "COLL_TEST_"};

/* log.c: whether every name in a COLL_DEBUG_SUBSYS value is a subsystem; if not, the unknown
 * ones (quoted) go to bad, and the known ones to names. */
COLL_INTERNAL bool coll__log_subsys_valid(const char *spec, char *bad, size_t badlen, char *names,
                                          size_t nameslen);

static pthread_mutex_t warned_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t warned[64];
static size_t nwarned;

/* Whether this exact text was warned about before in this process (and note it): every comm
 * checks the settings, but a user needs to read each complaint once. Past 64 different texts
 * (a program that keeps changing its environment: the fuzz harness) the rest are not shown. */
static bool warned_before(const char *text)
{
    uint64_t h = coll__hash64(text, strlen(text), 0x656e76);
    bool seen = false;

    pthread_mutex_lock(&warned_lock);
    for (size_t i = 0; i < nwarned && !seen; i++)
        seen = warned[i] == h;
    if (!seen && nwarned < COLL_ARRAY_SIZE(warned))
        warned[nwarned++] = h;
    else
        seen = true;
    pthread_mutex_unlock(&warned_lock);
    return seen;
}

/* A warning about a setting, once per text, from rank 0 of the comm (the others say it at
 * INFO: a launch gives every rank the same environment, and one copy is enough to read); a
 * load without a comm (NULL: the fuzz harness) warns. It ignores COLL_DEBUG_SUBSYS, which
 * may be the very setting that is wrong. */
void coll__env_warn(int rank, const char *fmt, ...)
{
    int level = rank <= 0 ? COLL_LOG_WARN : COLL_LOG_INFO;
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (coll__log_level >= level && !warned_before(msg))
        coll__log(level, COLL_SUB_ENV, "%s", msg);
}

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64], prev, tmp;

    if (lb >= COLL_ARRAY_SIZE(row))
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        prev = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t best = prev + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            tmp = row[j];
            row[j] = best;
            prev = tmp;
        }
    }
    return row[lb];
}

static bool known_name(const char *name)
{
    for (size_t i = 0; i < coll__nparams; i++)
        if (!strcmp(name, coll__params[i].name))
            return true;
    for (size_t i = 0; i < COLL_ARRAY_SIZE(other_names); i++)
        if (!strcmp(name, other_names[i]))
            return true;
    for (size_t i = 0; i < COLL_ARRAY_SIZE(other_prefixes); i++)
        if (!strncmp(name, other_prefixes[i], strlen(other_prefixes[i])))
            return true;
    return false;
}

/* A COLL_* variable nobody reads is most often a typo of one that would have applied
 * (COLL_ALOG for COLL_ALGO): name the nearest table entry. */
static void check_names(int rank)
{
    extern char **environ;

    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        char name[128];
        const char *near = NULL;
        size_t best = SIZE_MAX;

        if (strncmp(*e, "COLL_", 5) || !eq || (size_t)(eq - *e) >= sizeof(name))
            continue;
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = '\0';
        if (known_name(name))
            continue;
        for (size_t i = 0; i < coll__nparams; i++) {
            size_t d = edit_distance(name, coll__params[i].name);
            if (d < best) {
                best = d;
                near = coll__params[i].name;
            }
        }
        if (near && best <= 3)
            coll__env_warn(rank, "%s is not a setting of coll and is ignored; did you mean %s? "
                     "(collbench --help-env lists them all)",
                     name, near);
        else
            coll__env_warn(rank, "%s is not a setting of coll and is ignored (collbench --help-env lists "
                     "them all)",
                     name);
    }
}

/* Whether v is one of the NULL-terminated list, in any case when caseless. */
static bool one_of(const char *v, const char *const *list, bool caseless)
{
    for (; *list; list++)
        if (caseless ? !strcasecmp(v, *list) : !strcmp(v, *list))
            return true;
    return false;
}

/* Values of knobs that take one of a few words. The ones not here take free text, or are
 * refused where they are used at comm creation (COLL_ALGO, COLL_TRANSPORT, COLL_SELECT). A
 * wrong value is warned about rather than refused: the reader falls back to its default. */
static void check_words(int rank, const struct coll_config *cfg)
{
    static const char *const debug[] = {"NONE", "OFF", "WARN", "INFO", "TRACE", NULL};
    static const char *const topo[] = {"sysfs", NULL};
    static const char *const ipc[] = {"auto", "0", "1", NULL};
    static const char *const launcher[] = {"collrun", "torchrun", "mpirun", "srun", NULL};
    char names[256], bad[128];
    const char *v;

    v = getenv("COLL_DEBUG");
    if (v && *v && !one_of(v, debug, true))
        coll__env_warn(rank, "COLL_DEBUG='%s' is not a log level (NONE, WARN, INFO or TRACE); using WARN", v);
    if (!coll__log_subsys_valid(getenv("COLL_DEBUG_SUBSYS"), bad, sizeof(bad), names,
                                sizeof(names)))
        coll__env_warn(rank, "COLL_DEBUG_SUBSYS: no subsystem is called %s (%s); ignored", bad, names);
    v = getenv("COLL_TOPO");
    if (v && *v && !one_of(v, topo, false))
        coll__env_warn(rank, "COLL_TOPO='%s' is not 'sysfs' (or empty); ignored", v);
    v = getenv("COLL_LAUNCHER");
    if (v && *v && !one_of(v, launcher, false))
        coll__env_warn(rank, "COLL_LAUNCHER='%s' is not one of collrun, torchrun, mpirun, srun", v);
    if (cfg->cuda_ipc[0] && !one_of(cfg->cuda_ipc, ipc, false))
        coll__env_warn(rank, "COLL_CUDA_IPC='%s' is not auto, 0 or 1; taking auto", cfg->cuda_ipc);
}

/* COLL_CUDA_WAIT_VALUE is read once per process where CUDA is loaded, and anything but "0"
 * counts as 1 there. (COLL_CUDA_DISABLE's reader warns about a wrong value itself.) */
static void check_numbers(int rank)
{
    const char *v = getenv("COLL_CUDA_WAIT_VALUE");

    if (v && *v && strcmp(v, "0") && strcmp(v, "1"))
        coll__env_warn(rank, "COLL_CUDA_WAIT_VALUE='%s' is not 0 or 1; taking 1", v);
}

static coll_status_t config_parse(struct coll_comm *comm, struct coll_config *cfg);

coll_status_t coll__config_load(struct coll_comm *comm, int rank, struct coll_config *cfg)
{
    coll_status_t st = config_parse(comm, cfg);

    if (st != COLL_SUCCESS)
        return st;
    check_names(rank);
    check_words(rank, cfg);
    check_numbers(rank);
    return COLL_SUCCESS;
}

/* Parse text into v (a number) or check it fits (a string) without touching cfg. */
static coll_status_t value_parse(struct coll_comm *comm, const struct coll_param *p,
                                 const char *val, int64_t *v_p)
{
    if (p->type == COLL_PARAM_STRING) {
        if (strlen(val) >= p->size)
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "%s is too long (%zu characters, at most %zu)", p->name,
                               strlen(val), p->size - 1);
        return COLL_SUCCESS;
    }
    if (!(p->type == COLL_PARAM_SIZE ? coll__parse_size(val, v_p) : parse_int(val, v_p)))
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s='%s' is not a valid %s", p->name,
                           val, p->type == COLL_PARAM_SIZE ? "size (e.g. 4096, 64K, 1M)"
                                                           : "integer");
    if (*v_p < p->min || *v_p > p->max)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s=%" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", p->name,
                           *v_p, p->min, p->max);
    return COLL_SUCCESS;
}

static bool is_chunk(const struct coll_param *p)
{
    return p->offset == offsetof(struct coll_config, chunk_bytes);
}

/* val: the text; given: it came from the environment (or a peer), not the default. */
static coll_status_t value_set(struct coll_comm *comm, struct coll_config *cfg,
                               const struct coll_param *p, const char *val, bool given)
{
    char *field = (char *)cfg + p->offset;
    int64_t v = 0;
    coll_status_t st = value_parse(comm, p, val, &v);

    if (st != COLL_SUCCESS)
        return st;
    if (p->type == COLL_PARAM_STRING)
        memcpy(field, val, strlen(val) + 1);
    else
        memcpy(field, &v, sizeof(v));
    if (is_chunk(p))
        cfg->chunk_forced = given;
    return COLL_SUCCESS;
}

const char *coll__config_format(const struct coll_config *cfg, const struct coll_param *p,
                                char *buf, size_t n)
{
    const char *field = (const char *)cfg + p->offset;
    int64_t v;

    if (p->offset == SIZE_MAX) {
        snprintf(buf, n, "%s", "");
        return buf;
    }
    if (p->type == COLL_PARAM_STRING) {
        snprintf(buf, n, "%s", field);
        return buf;
    }
    if (is_chunk(p) && !cfg->chunk_forced) {
        snprintf(buf, n, "auto");
        return buf;
    }
    memcpy(&v, field, sizeof(v));
    snprintf(buf, n, "%" PRId64, v);
    return buf;
}

coll_status_t coll__config_set(struct coll_comm *comm, struct coll_config *cfg,
                               const struct coll_param *p, const char *text)
{
    if (p->offset == SIZE_MAX)
        return coll__error(comm, COLL_INTERNAL_ERROR, "%s is not a comm's setting", p->name);
    if (is_chunk(p) && !strcmp(text, "auto"))
        return value_set(comm, cfg, p, p->defval, false);
    return value_set(comm, cfg, p, text, true);
}

static coll_status_t config_parse(struct coll_comm *comm, struct coll_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < coll__nparams; i++) {
        const struct coll_param *p = &coll__params[i];
        const char *env = getenv(p->name), *val = env && *env ? env : p->defval;
        coll_status_t st;

        /* SIZE_MAX marks knobs read elsewhere; cfg + SIZE_MAX would be undefined behaviour */
        if (p->offset == SIZE_MAX)
            continue;
        st = value_set(comm, cfg, p, val, env && *env);
        if (st != COLL_SUCCESS)
            return st;
        if (env && *env)
            COLL_INFO(COLL_SUB_ENV, "%s set by environment to %s", p->name, env);
    }
    return COLL_SUCCESS;
}
