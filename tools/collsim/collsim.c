/*
 * collsim - coll's own schedules on SimGrid: every rank's schedule, as the builders of
 * src/algo/ produce it, runs as one SimGrid actor; sends and receives are SimGrid
 * communications over a simulated platform, reductions and copies are computation priced
 * by the cost model's gamma and copy (src/algo/cost.h). It prints nccl-tests' table as
 * collbench does, and optionally JSON and a COLL_TRACE-format trace that collviz draws.
 *
 *   collsim --hosts 128 --per-host 8 --link 200Gbps --latency 2us --fabric fattree:4 \
 *           -c allreduce -b 8 -e 64M --algo ring,tree
 *   collsim --platform my.xml -n 64 -c broadcast -b 8 -e 8
 *   collsim --calib ~/.cache/coll/calib.txt --hosts 1 --per-host 4 -n 4 -b 8 -e 16M
 *
 * How a rank runs (the executor's rules, src/core/exec.c): a step starts once the steps it
 * names are done; sends to one peer are posted in step order and so are receives from one
 * peer, so the k-th send from a to b meets the k-th receive from a in b (one mailbox per
 * ordered pair, whose FIFO matching SimGrid keeps; every message carries its number and the
 * receiver checks it). All posted sends and receives progress at once (asynchronous puts
 * and gets); on the platforms collsim builds a pair's messages go one at a time, each
 * one's latency run by the receiver after its data (o->streams), elsewhere at most
 * RECV_WINDOW a link and direction, one within a host; local steps run one at a time on
 * the rank's core. Within a host, every rank has its own memory port (write_platform)
 * whose bandwidth the messages it receives share (the receiver copies); shared memory's
 * latency runs after a message's data is in, while the next one is copied. Each step costs
 * the rank the
 * executor's per-step time, each message the sender's per-message time (alpha less its
 * latency, plus the rendezvous charge from rdv_bytes on), each reduction gamma per output
 * byte, each copy the copy rate (a copy onto itself costs nothing).
 *
 * Exit status: 0 ok, 1 a simulation failed (a schedule that does not run), 2 usage.
 */
#include "algo/cost.h"
#include "algo/schedule.h"
#include "base/json.h"

#include <simgrid/actor.h>
#include <simgrid/comm.h>
#include <simgrid/engine.h>
#include <simgrid/exec.h>
#include <simgrid/host.h>
#include <simgrid/link.h>
#include <simgrid/mailbox.h>
#include <xbt/dynar.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_SIMFAIL 1
#define EXIT_USAGE 2
#define NONE UINT32_MAX
#define MAX_ALGOS 16
#define COLLSIM_MAX_RANKS 8192 /* -n: twice the largest count docs/scale.md ran */
#define CPU_SPEED 1e9 /* flops per second of a simulated core: seconds x this = flops */
#define TRACE_LANES 64u
/* Messages posted ahead per peer and direction. SimGrid's wait for any of k communications
 * costs O(k), and a schedule can hold hundreds of sends or receives with no dependencies (a
 * tree's chunks from its leaves, or from its parent): posting them all made a 64 MiB tree
 * all-reduce on 64 ranks cost minutes. A send (receive) is posted once the one RECV_WINDOW
 * before it to (from) that peer completed, so at most this many messages per link are in
 * flight, as a transport's buffers would allow; a send waits for its receive (SimGrid's
 * rendezvous). */
#define RECV_WINDOW 8u
#define LAT_SLOT 0x80000000u /* a receive slot that waits for its message's latency */
#define LAT_PUT 0xfffffffeu  /* the sending half of that wait */
/* A rank's own loopback, of no latency and this many bytes per second, is its timer: a
 * message of t x TIMER_BPS bytes to itself takes t seconds (to the picosecond). */
#define TIMER_BPS 1e12

/* ---- options --------------------------------------------------------------------------- */

struct opts {
    enum coll_coll coll;
    coll_dtype_t dtype;
    int32_t nranks, root;
    int32_t hosts, per_host, cores;
    double link_bw, link_lat, intra_bw, intra_lat; /* bytes/s, s */
    const char *fabric, *platform, *calib, *json, *trace, *model;
    size_t minb, maxb, chunk;
    double factor;
    bool chunk_given;
    uint64_t max_msgs; /* --max-messages: 0, none */
    bool ports;           /* one SimGrid host per rank, each with its memory port */
    bool streams;         /* messages of a pair in turn, latency after the data (below) */
    const char *intra_model;
    const char *algo_spec;
    double step_s, overhead_s; /* <0: from the cost model's parameters */
    bool quiet;
    bool exact; /* --exact: the selector's ranking by the schedule walker */
};

static const char *const coll_names[COLL_NUM_COLLS] = {
    "allreduce", "broadcast", "reduce", "allgather", "reducescatter",
    "alltoall",  "gather",    "scatter", "barrier", NULL,
};

static int usage_error(const char *fmt, ...) COLL_PRINTF(1, 2);
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("collsim: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (collsim --help)\n", stderr);
    return EXIT_USAGE;
}

static void list_algos(FILE *f, enum coll_coll c)
{
    fprintf(f, "collsim: algorithms for %s: auto (the selector's pick), all", coll_names[c]);
    for (int i = 0; coll__algos[i]; i++)
        if (coll__algos[i]->colls & (1u << c))
            fprintf(f, ", %s", coll__algos[i]->name);
    fputc('\n', f);
}

static void usage(FILE *f)
{
    fputs("usage: collsim [options] [--cfg=SIMGRID_OPTION:VALUE ...]\n"
          "  -c, --coll NAME      allreduce (default), broadcast, reduce, allgather,\n"
          "                       reducescatter, alltoall, gather, scatter, barrier\n"
          "  -n, --nranks N       ranks (default hosts x per-host)\n"
          "  -b, -e SIZE          smallest and largest size in bytes (nccl-tests' meaning;\n"
          "                       K, M, G suffixes; default 8 .. 64M)\n"
          "  -f FACTOR            size factor between rows (default 2)\n"
          "  -d, --dtype NAME     float (default), double, int32, half, bfloat16, ...\n"
          "  -r, --root R         root of broadcast, reduce, gather, scatter (default 0)\n"
          "  --algo LIST          auto (default: the selector's pick, chunk included), all, or\n"
          "                       names separated by commas (ring,tree,...; auto among them)\n"
          "  --exact              the selector's pick by walking every rank's schedule\n"
          "                       (COLL_SELECT=exact), not by the closed forms the library\n"
          "                       uses (COLL_SELECT=cost)\n"
          "  --chunk SIZE         pipelining unit of a named algorithm (default 128K, as\n"
          "                       COLL_CHUNK_BYTES)\n"
          "  --max-messages M     coarser pieces for large sizes: every algorithm of a size\n"
          "                       gets a chunk of at least 2 x ranks x size / M (a power of\n"
          "                       two; the row says 'coarsened'); one still over M messages\n"
          "                       is not simulated (a '#' line, and 'skipped' in --json)\n"
          "platform (from flags, or --platform):\n"
          "  --hosts H            hosts (default 1)\n"
          "  --per-host K         ranks per host (default 1); they share the host's --cores\n"
          "  --cores C            cores per host (default: per-host)\n"
          "  --link BW            NIC bandwidth (SimGrid units: 100Gbps, 12.5GBps; default\n"
          "                       100Gbps)\n"
          "  --latency T          NIC link latency (1us, 500ns; default 1us)\n"
          "  --intra BW / --intra-latency T   the intra-host (shared memory) link (default\n"
          "                       from coll's shm defaults: 8GBps, 1us)\n"
          "  --intra-model M      ports (default): one SimGrid host per rank, each with a\n"
          "                       memory port of --intra's bandwidth for what it takes in,\n"
          "                       --intra-latency after each message's data, the host's\n"
          "                       ranks sharing its NIC; loopback: the ranks of a host share\n"
          "                       SimGrid's loopback link, one message at a time between two\n"
          "                       of them, each one's latency before the next\n"
          "  --fabric F           switch (default: one non-blocking switch), fattree[:R]\n"
          "                       (two levels, leaves oversubscribed R:1, default 1),\n"
          "                       torus[:X,Y,Z], dragonfly[:G,C,R,N], or the raw SimGrid\n"
          "                       topo_parameters after fattree=, torus=, dragonfly=\n"
          "  --platform FILE      a SimGrid XML platform; ranks go to its hosts in order,\n"
          "                       --per-host to each\n"
          "  --calib FILE         coll's calibration file (collbench --calibrate): the links'\n"
          "                       latency and bandwidth, gamma, copy and per-step time from\n"
          "                       it, network model CM02 without factors\n"
          "  --model NAME         SimGrid network model (default CM02; LV08 is SimGrid's\n"
          "                       TCP-fitted default)\n"
          "  --step T, --overhead T   executor time per step, sender time per message\n"
          "output:\n"
          "  --json FILE          the rows as JSON\n"
          "  --trace FILE         every rank's steps in COLL_TRACE's format (collviz trace)\n"
          "  -q                   no table\n",
          f);
}

/* "100Gbps", "12.5GBps", "1e9" (bytes/s) -> bytes per second. */
static bool parse_bw(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    static const struct {
        const char *u;
        double mult;
    } units[] = {
        {"", 1},          {"Bps", 1},      {"kBps", 1e3},     {"KBps", 1e3},  {"MBps", 1e6},
        {"GBps", 1e9},    {"TBps", 1e12},  {"bps", 0.125},    {"kbps", 125},  {"Kbps", 125},
        {"Mbps", 1.25e5}, {"Gbps", 1.25e8}, {"Tbps", 1.25e11}, {"KiBps", 1024}, {"MiBps", 1048576},
        {"GiBps", 1073741824.0},
    };
    if (end == s || !(v > 0) || !isfinite(v))
        return false;
    for (size_t i = 0; i < COLL_ARRAY_SIZE(units); i++)
        if (!strcmp(end, units[i].u)) {
            *out = v * units[i].mult;
            return true;
        }
    return false;
}

/* "2us", "500ns", "1e-6" (seconds), "0" -> seconds. */
static bool parse_time(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    static const struct {
        const char *u;
        double mult;
    } units[] = {{"", 1}, {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}, {"ps", 1e-12}};
    if (end == s || v < 0 || !isfinite(v))
        return false;
    for (size_t i = 0; i < COLL_ARRAY_SIZE(units); i++)
        if (!strcmp(end, units[i].u)) {
            *out = v * units[i].mult;
            return true;
        }
    return false;
}

static bool parse_int(const char *s, long lo, long hi, int32_t *out)
{
    long v;

    if (!coll__parse_long(s, lo, hi, &v))
        return false;
    *out = (int32_t)v;
    return true;
}

static bool parse_bytes(const char *s, size_t *out)
{
    int64_t v;
    if (!coll__parse_size(s, &v) || v < 0)
        return false;
    *out = (size_t)v;
    return true;
}

static bool parse_dtype(const char *s, coll_dtype_t *out)
{
    for (int d = 0; d < COLL_NUM_DTYPES; d++) {
        const char *name = coll__dtype_name((coll_dtype_t)d);
        if (name && !strcasecmp(name, s)) {
            *out = (coll_dtype_t)d;
            return true;
        }
    }
    if (!strcasecmp(s, "float32") || !strcasecmp(s, "fp32")) {
        *out = COLL_FLOAT32;
        return true;
    }
    return false;
}

/* ---- the platform ---------------------------------------------------------------------- */

/* SimGrid's cluster tag takes its topology's shape; these give one for a host count. */
static int fabric_params(const struct opts *o, char *topo, size_t tlen, char *params, size_t plen,
                         int32_t *nodes_p)
{
    const char *f = o->fabric ? o->fabric : "switch";
    const char *arg = strpbrk(f, ":=");
    size_t nlen = arg ? (size_t)(arg - f) : strlen(f);
    int32_t h = o->hosts;

    topo[0] = params[0] = '\0';
    if (nlen == 6 && !strncmp(f, "switch", 6) && !arg) {
        *nodes_p = h;
        return 0;
    }
    if (nlen == 7 && !strncmp(f, "fattree", 7)) {
        snprintf(topo, tlen, "FAT_TREE");
        if (arg && *arg == '=') { /* raw: levels;downs;ups;parallels */
            int32_t n = 1, d;
            const char *p = strchr(arg + 1, ';');
            snprintf(params, plen, "%s", arg + 1);
            if (!p)
                return usage_error("--fabric '%s': fattree= takes SimGrid's "
                                   "'levels;down,...;up,...;parallel,...'", f);
            for (p++; *p && *p != ';'; p++)
                if (sscanf(p, "%d", &d) == 1) {
                    n *= d;
                    while (p[1] && p[1] != ',' && p[1] != ';')
                        p++;
                }
            *nodes_p = n;
            return 0;
        }
        {
            int32_t r = 1, k = 1, leaves, up;
            if (arg && !parse_int(arg + 1, 1, 1024, &r))
                return usage_error("--fabric '%s': fattree:R takes an oversubscription R of "
                                   "1 to 1024", f);
            /* leaves of k hosts (a power of two near sqrt(hosts)), k / R uplinks each */
            while ((int64_t)k * k * 4 <= h)
                k *= 2;
            if (k < 2)
                k = 2;
            leaves = (h + k - 1) / k;
            if (leaves < 2)
                leaves = 2;
            up = k / r > 0 ? k / r : 1;
            snprintf(params, plen, "2;%d,%d;1,%d;1,1", k, leaves, up);
            *nodes_p = k * leaves;
        }
        return 0;
    }
    if ((nlen == 5 && !strncmp(f, "torus", 5)) || (nlen == 9 && !strncmp(f, "dragonfly", 9))) {
        bool torus = nlen == 5;
        snprintf(topo, tlen, torus ? "TORUS" : "DRAGONFLY");
        if (arg && *arg == '=') {
            snprintf(params, plen, "%s", arg + 1);
        } else if (arg) {
            int32_t d[4] = {0, 0, 0, 0}, nd = 0;
            char buf[64], *save = NULL, *tok;
            snprintf(buf, sizeof(buf), "%s", arg + 1);
            for (tok = strtok_r(buf, ",", &save); tok && nd < 4; tok = strtok_r(NULL, ",", &save))
                if (!parse_int(tok, 1, 65536, &d[nd++]))
                    return usage_error("--fabric '%s': dimensions are numbers", f);
            if (torus)
                snprintf(params, plen, "%d%s%.0d%s%.0d", d[0], nd > 1 ? "," : "", nd > 1 ? d[1] : 0,
                         nd > 2 ? "," : "", nd > 2 ? d[2] : 0);
            else if (nd != 4)
                return usage_error("--fabric '%s': dragonfly:G,C,R,N (groups, chassis per "
                                   "group, routers per chassis, hosts per router)", f);
            else
                snprintf(params, plen, "%d,1;%d,1;%d,1;%d", d[0], d[1], d[2], d[3]);
        } else if (torus) { /* a cube as near as powers of two allow */
            int32_t d[3] = {1, 1, 1}, i = 0;
            while (d[0] * d[1] * d[2] < h)
                d[i++ % 3] *= 2;
            snprintf(params, plen, "%d,%d,%d", d[0], d[1], d[2]);
        } else { /* groups x 4 chassis x 4 routers x 4 hosts */
            int32_t g = (h + 63) / 64;
            snprintf(params, plen, "%d,1;4,1;4,1;4", g < 2 ? 2 : g);
        }
        {
            int32_t n = 1, v;
            const char *p = params;
            /* torus: a,b,c; dragonfly: g,l;c,l;r,l;n (the first of each group) */
            if (torus) {
                while (*p) {
                    if (sscanf(p, "%d", &v) == 1)
                        n *= v;
                    while (*p && *p != ',')
                        p++;
                    if (*p)
                        p++;
                }
            } else {
                while (*p) {
                    if (sscanf(p, "%d", &v) == 1)
                        n *= v;
                    while (*p && *p != ';')
                        p++;
                    if (*p)
                        p++;
                }
            }
            *nodes_p = n;
        }
        return 0;
    }
    return usage_error("unknown fabric '%s'; valid: switch, fattree[:R], torus[:X,Y,Z], "
                       "dragonfly[:G,C,R,N], or fattree=, torus=, dragonfly= with SimGrid's "
                       "topo_parameters", f);
}

/* Intra-host modelling with one SimGrid host per rank (o->ports): ranks of host i are the
 * hosts of cluster "m<i>", each with its own memory port (a private link of the shm
 * bandwidth, split up/down: the way in limits, main() lifts the way out) and a loopback
 * that is its timer (TIMER_BPS); the cluster's router reaches the fabric's host h<i>, whose
 * NIC links its ranks share. The messages a rank receives share its port, and one's
 * latency overlaps the next one's copy (o->streams), as through shared memory; SimGrid's
 * loopback link (--intra-model loopback) gives every flow its full bandwidth instead. The
 * fabric's hosts h<i> run no rank: they hold the host's cores (computations of its ranks
 * when they outnumber them). */
static int write_platform(const struct opts *o, const char *path, int32_t *nodes_p)
{
    char topo[32], params[256];
    int rc = fabric_params(o, topo, sizeof(topo), params, sizeof(params), nodes_p);
    bool ports = o->ports;
    FILE *f;

    if (rc)
        return rc;
    if (*nodes_p < o->hosts)
        return usage_error("--fabric '%s' has %d hosts, fewer than --hosts %d", o->fabric,
                           *nodes_p, o->hosts);
    f = fopen(path, "w");
    if (!f)
        return fprintf(stderr, "collsim: cannot write '%s': %s\n", path, strerror(errno)),
               EXIT_SIMFAIL;
    fprintf(f, "<?xml version='1.0'?>\n"
               "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
               "<platform version=\"4.1\">\n");
    if (ports)
        fputs("<zone id=\"world\" routing=\"Floyd\">\n", f);
    fprintf(f, "  <cluster id=\"fabric\" prefix=\"h\" suffix=\"\" radical=\"0-%d\" "
               "speed=\"%gf\" core=\"%d\" bw=\"%.17gBps\" lat=\"%.17gs\" "
               "sharing_policy=\"SPLITDUPLEX\"",
            *nodes_p - 1, CPU_SPEED, o->cores, o->link_bw, o->link_lat);
    if (!ports && o->streams) /* a rank per host: the loopback is its timer (rank_main) */
        fprintf(f, " loopback_bw=\"%.17gBps\" loopback_lat=\"0s\"", TIMER_BPS);
    else if (!ports)
        fprintf(f, " loopback_bw=\"%.17gBps\" loopback_lat=\"%.17gs\"", o->intra_bw,
                o->intra_lat);
    if (topo[0])
        fprintf(f, " topology=\"%s\" topo_parameters=\"%s\"", topo, params);
    fputs("/>\n", f);
    if (ports) {
        /* SimGrid's order in a zone: the clusters, then the links, then the routes */
        for (int32_t h = 0; h < o->hosts; h++) {
            int32_t first = h * o->per_host, last = first + o->per_host - 1;
            if (last >= o->nranks)
                last = o->nranks - 1;
            fprintf(f, "  <cluster id=\"m%d\" prefix=\"r\" suffix=\"\" radical=\"%d-%d\" "
                       "speed=\"%gf\" core=\"1\" bw=\"%.17gBps\" lat=\"%.17gs\" "
                       "sharing_policy=\"SPLITDUPLEX\" router_id=\"m%d_router\" "
                       "loopback_bw=\"%.17gBps\" loopback_lat=\"0s\"/>\n",
                    h, first, last, CPU_SPEED, o->intra_bw, 0.0, h, TIMER_BPS);
        }
        /* a zone route may not be empty: a link that limits nothing, one per host so that
         * it couples no flows of two hosts in SimGrid's sharing */
        for (int32_t h = 0; h < o->hosts; h++)
            fprintf(f, "  <link id=\"m%d_gw\" bandwidth=\"1e18Bps\" latency=\"0s\" "
                       "sharing_policy=\"FATPIPE\"/>\n", h);
        for (int32_t h = 0; h < o->hosts; h++)
            fprintf(f, "  <zoneRoute src=\"m%d\" dst=\"fabric\" gw_src=\"m%d_router\" "
                       "gw_dst=\"h%d\"><link_ctn id=\"m%d_gw\"/></zoneRoute>\n", h, h, h, h);
        fputs("</zone>\n", f);
    }
    fputs("</platform>\n", f);
    if (fclose(f) != 0)
        return fprintf(stderr, "collsim: cannot write '%s'\n", path), EXIT_SIMFAIL;
    return 0;
}

/* ---- the ranks -------------------------------------------------------------------------- */

enum {
    F_POSTED = 1,
    F_DONE = 2,
    F_FREE = 4, /* a copy onto itself */
    F_WIN = 8,  /* the window passed on to the next message of the link */
};

static int32_t host_of(int32_t rank);

struct sstep {
    uint64_t bytes;
    int32_t peer;
    uint32_t next_same; /* the next send (receive) to (from) the same peer, or NONE */
    uint32_t tag;       /* the message's number among those between the two ranks */
    uint32_t win_next;  /* the message RECV_WINDOW later on the same link, or NONE */
    uint8_t kind, left, flags;
};

struct srank {
    int32_t rank, host;
    uint32_t nsteps, ndone;
    struct sstep *steps;
    uint32_t *rdep_off, *rdep; /* the steps that wait for each step (CSR) */
    double *t0, *t1;           /* trace only */
    double finish;
    uint64_t nmsgs;
    int32_t *lat_peer; /* streams: the latency from each peer seen so far */
    double *lat_val;
    uint32_t nlat, caplat;
};

struct sim {
    struct opts o;
    struct coll_cost_params p;
    sg_host_t *hosts;
    size_t nhosts_plat;
    size_t nfab; /* with ports: the fabric's hosts h*, which sort before the ranks' r* */
    struct srank *r;
    double start;
    /* The cost model's memory term (cost.c): a row whose busiest host's buffers exceed
     * cache_bytes pays mem_f times the per-byte costs of the CPU and of shared memory. */
    double mem_f;
    sg_link_t *links;
    double *link_bw;  /* as the platform gave them */
    double *link_lat; /* streams: every link's latency, which SimGrid's links no longer carry */
    size_t nlinks;
    const char *failed; /* first failure, reported once the run ends */
    char errbuf[256];
};
static struct sim S;

static double msg_cpu(const struct sstep *st, bool same_host)
{
    const struct coll_link_cost *l = &S.p.link[same_host ? COLL_LINK_SHM : COLL_LINK_TCP];
    double c = S.o.overhead_s >= 0 ? S.o.overhead_s : (l->alpha > l->lat ? l->alpha - l->lat : 0);
    if (l->rdv_bytes > 0 && (double)st->bytes >= l->rdv_bytes)
        c += l->rdv;
    return c;
}

static double local_cpu(const struct sstep *st)
{
    if (st->flags & F_FREE)
        return 0;
    if (st->kind == COLL_STEP_REDUCE)
        return S.p.gamma[S.o.dtype] * (double)st->bytes * S.mem_f;
    return S.p.copy * (double)st->bytes * S.mem_f;
}

/* A rank's own time: computation on its host's cores when ranks outnumber them (they share
 * them), else a plain wait, which costs the simulation less and times the same. */
static void run_cpu(const struct srank *R, double seconds)
{
    if (S.o.cores >= S.o.per_host) {
        sg_actor_sleep_for(seconds);
    } else if (S.o.ports) {
        /* the rank's SimGrid host is its memory port; the cores are its host's */
        sg_exec_t e = sg_actor_exec_init(seconds * CPU_SPEED);
        sg_exec_set_host(e, S.hosts[R->host]);
        sg_exec_start(e);
        sg_exec_wait(e);
    } else {
        sg_actor_execute(seconds * CPU_SPEED);
    }
}

static double step_cpu(void)
{
    return S.o.step_s >= 0 ? S.o.step_s : S.p.step;
}

static void mailbox_name(char *buf, size_t n, int32_t src, int32_t dst)
{
    snprintf(buf, n, "%d>%d", src, dst);
}

static void fail_run(const char *fmt, ...) COLL_PRINTF(1, 2);
static void fail_run(const char *fmt, ...)
{
    va_list ap;
    if (S.failed)
        return;
    va_start(ap, fmt);
    vsnprintf(S.errbuf, sizeof(S.errbuf), fmt, ap);
    va_end(ap);
    S.failed = S.errbuf;
}

/* Receive payload slots that never move while their receive is posted. */
struct slots {
    void ***blocks;
    size_t nblocks;
    uint32_t *free_ids;
    size_t nfree, next;
};

static void **slot_at(struct slots *s, uint32_t id)
{
    return &s->blocks[id / 256][id % 256];
}

static bool slot_get(struct slots *s, uint32_t *id_p)
{
    if (s->nfree) {
        *id_p = s->free_ids[--s->nfree];
        return true;
    }
    if (s->next == s->nblocks * 256) {
        void ***b = realloc(s->blocks, (s->nblocks + 1) * sizeof(*b));
        uint32_t *f = realloc(s->free_ids, (s->nblocks + 1) * 256 * sizeof(*f));
        if (b)
            s->blocks = b;
        if (f)
            s->free_ids = f;
        if (!b || !f || !(s->blocks[s->nblocks] = calloc(256, sizeof(void *))))
            return false;
        s->nblocks++;
    }
    *id_p = (uint32_t)s->next++;
    return true;
}

/* The message one window later on the same link may be posted: when this one's data is in
 * (a receive's latency wait does not hold its link). */
static void win_pass(struct srank *R, uint32_t i, uint32_t *ready, uint32_t *nready)
{
    struct sstep *st = &R->steps[i];
    if (st->flags & F_WIN)
        return;
    st->flags |= F_WIN;
    if (st->win_next != NONE && --R->steps[st->win_next].left == 0)
        ready[(*nready)++] = st->win_next;
}

static void done_step(struct srank *R, uint32_t i, uint32_t *ready, uint32_t *nready)
{

    R->steps[i].flags |= F_DONE;
    R->ndone++;
    win_pass(R, i, ready, nready);
    for (uint32_t k = R->rdep_off[i]; k < R->rdep_off[i + 1]; k++) {
        uint32_t j = R->rdep[k];
        if (--R->steps[j].left == 0)
            ready[(*nready)++] = j;
    }
}

static bool act_reserve(sg_comm_t **act, uint32_t **step, uint32_t **slot, uint32_t *cap,
                        uint32_t need)
{
    uint32_t nc = need * 2;
    sg_comm_t *a;
    uint32_t *as, *sl;
    if (need <= *cap)
        return true;
    a = realloc(*act, nc * sizeof(*a));
    if (!a)
        return false;
    *act = a;
    as = realloc(*step, nc * sizeof(*as));
    if (!as)
        return false;
    *step = as;
    sl = realloc(*slot, nc * sizeof(*sl));
    if (!sl)
        return false;
    *slot = sl;
    *cap = nc;
    return true;
}

static sg_host_t rank_host(int32_t r)
{
    return S.o.ports ? S.hosts[S.nfab + (size_t)r] : S.hosts[host_of(r)];
}

/* Streams: the latency of a message from peer to R, run after its data is in. Within a
 * host shared memory's; between hosts the route's links' (as the platform gave them). */
static double pair_lat(struct srank *R, int32_t peer)
{
    double lat = 0;
    xbt_dynar_t d;
    if (S.r[peer].host == R->host)
        return S.o.intra_lat;
    for (uint32_t k = 0; k < R->nlat; k++)
        if (R->lat_peer[k] == peer)
            return R->lat_val[k];
    d = xbt_dynar_new(sizeof(sg_link_t), NULL);
    sg_host_get_route(rank_host(peer), rank_host(R->rank), d);
    for (unsigned long k = 0; k < xbt_dynar_length(d); k++) {
        const double *l = sg_link_get_data(xbt_dynar_get_as(d, k, sg_link_t));
        lat += l ? *l : 0;
    }
    xbt_dynar_free(&d);
    if (R->nlat == R->caplat) {
        uint32_t nc = R->caplat ? 2 * R->caplat : 4;
        int32_t *p = realloc(R->lat_peer, nc * sizeof(*p));
        double *v = p ? realloc(R->lat_val, nc * sizeof(*v)) : NULL;
        if (p)
            R->lat_peer = p;
        if (!v)
            return lat; /* not kept: found again next time */
        R->lat_val = v;
        R->caplat = nc;
    }
    R->lat_peer[R->nlat] = peer;
    R->lat_val[R->nlat++] = lat;
    return lat;
}

static void rank_main(int argc, char **argv)
{
    struct srank *R = sg_actor_self_get_data();
    uint32_t n = R->nsteps, nready = 0, nact = 0, cap = 0;
    uint32_t *ready = malloc(sizeof(uint32_t) * (n ? n : 1));
    uint32_t *comms = malloc(sizeof(uint32_t) * (n ? n : 1)), ncomms;
    uint32_t *locals = malloc(sizeof(uint32_t) * (n ? n : 1)), nlocals;
    sg_comm_t *act = NULL;
    uint32_t *act_step = NULL, *act_slot = NULL;
    struct slots slots = {0};
    char mb[32];

    (void)argc, (void)argv;
    if (!ready || !comms || !locals) {
        fail_run("out of memory for rank %d's state", R->rank);
        goto out;
    }
    for (uint32_t i = 0; i < n; i++)
        if (R->steps[i].left == 0)
            ready[nready++] = i;
    while (R->ndone < n && !S.failed) {
        double cpu = 0, now;
        ncomms = nlocals = 0;
        while (nready) {
            uint32_t i = ready[--nready];
            struct sstep *st = &R->steps[i];
            if (st->kind == COLL_STEP_SEND || st->kind == COLL_STEP_RECV) {
                comms[ncomms++] = i;
                /* the next message on this link may be posted now (order kept) */
                if (st->next_same != NONE && --R->steps[st->next_same].left == 0)
                    ready[nready++] = st->next_same;
            } else {
                locals[nlocals++] = i;
            }
        }
        if (ncomms) {
            for (uint32_t k = 0; k < ncomms; k++) {
                const struct sstep *st = &R->steps[comms[k]];
                cpu += step_cpu();
                if (st->kind == COLL_STEP_SEND)
                    cpu += msg_cpu(st, S.r[st->peer].host == R->host);
            }
            if (cpu > 0)
                run_cpu(R, cpu);
            now = simgrid_get_clock();
            if (!act_reserve(&act, &act_step, &act_slot, &cap, nact + ncomms)) {
                fail_run("out of memory for rank %d's messages", R->rank);
                break;
            }
            for (uint32_t k = 0; k < ncomms; k++) {
                uint32_t i = comms[k], slot = NONE;
                struct sstep *st = &R->steps[i];
                if (st->kind == COLL_STEP_SEND) {
                    mailbox_name(mb, sizeof(mb), R->rank, st->peer);
                    act[nact] = sg_mailbox_put_async(sg_mailbox_by_name(mb),
                                                     (void *)(uintptr_t)(st->tag + 1),
                                                     (long)st->bytes);
                    R->nmsgs++;
                } else {
                    if (!slot_get(&slots, &slot)) {
                        fail_run("out of memory for rank %d's receives", R->rank);
                        break;
                    }
                    mailbox_name(mb, sizeof(mb), st->peer, R->rank);
                    act[nact] = sg_mailbox_get_async(sg_mailbox_by_name(mb), slot_at(&slots, slot));
                }
                st->flags |= F_POSTED;
                if (R->t0)
                    R->t0[i] = now;
                act_step[nact] = i;
                act_slot[nact] = slot;
                nact++;
            }
            if (!nlocals)
                continue;
            cpu = 0;
        }
        if (nlocals) {
            for (uint32_t k = 0; k < nlocals; k++)
                cpu += step_cpu() + local_cpu(&R->steps[locals[k]]);
            now = simgrid_get_clock();
            if (cpu > 0)
                run_cpu(R, cpu);
            for (uint32_t k = 0; k < nlocals; k++) {
                if (R->t0) {
                    R->t0[locals[k]] = now;
                    R->t1[locals[k]] = simgrid_get_clock();
                }
                done_step(R, locals[k], ready, &nready);
            }
            continue;
        }
        if (!nact) {
            fail_run("rank %d: %u of %u steps cannot start (a dependency never completes)",
                     R->rank, n - R->ndone, n);
            break;
        }
        /* a completed receive may post the two halves of its latency wait */
        if (!act_reserve(&act, &act_step, &act_slot, &cap, nact + 2)) {
            fail_run("out of memory for rank %d's messages", R->rank);
            break;
        }
        {
            ssize_t w = sg_comm_wait_any(act, nact);
            uint32_t i, slot;
            double lat_pending = 0;
            if (w < 0 || (size_t)w >= nact) {
                fail_run("rank %d: waiting for a message failed", R->rank);
                break;
            }
            i = act_step[w];
            slot = act_slot[w];
            if (slot == LAT_PUT) {
                /* the sending half of a latency message: nothing to do */
            } else if (slot != NONE && (slot & LAT_SLOT)) {
                /* its latency ran out: the receive is done */
                slots.free_ids[slots.nfree++] = slot & ~LAT_SLOT;
                slot = NONE;
            } else if (slot != NONE) {
                uintptr_t got = (uintptr_t)*slot_at(&slots, slot);
                if (got != (uintptr_t)R->steps[i].tag + 1) {
                    fail_run("rank %d step %u: received message %" PRIuPTR " from rank %d where "
                             "message %u was due", R->rank, i, got - 1, R->steps[i].peer,
                             R->steps[i].tag);
                    break;
                }
                slots.free_ids[slots.nfree++] = slot;
                if (S.o.streams)
                    lat_pending = pair_lat(R, R->steps[i].peer);
            }
            act[w] = act[nact - 1];
            act_step[w] = act_step[nact - 1];
            act_slot[w] = act_slot[nact - 1];
            nact--;
            if (lat_pending > 0) {
                /* the latency runs while the next message of the pair moves: the data is
                 * in, the step completes lat later, when a message to itself over its
                 * timer (TIMER_BPS) arrives; posted in pairs, the k-th get meets the k-th
                 * put */
                uint32_t ls;
                if (!slot_get(&slots, &ls)) {
                    fail_run("out of memory for rank %d's receives", R->rank);
                    break;
                }
                win_pass(R, i, ready, &nready);
                mailbox_name(mb, sizeof(mb), R->rank, R->rank);
                act[nact] = sg_mailbox_put_async(sg_mailbox_by_name(mb), (void *)(uintptr_t)(i + 1),
                                                 (long)llround(lat_pending * TIMER_BPS));
                act_step[nact] = i;
                act_slot[nact++] = LAT_PUT;
                act[nact] = sg_mailbox_get_async(sg_mailbox_by_name(mb), slot_at(&slots, ls));
                act_step[nact] = i;
                act_slot[nact++] = ls | LAT_SLOT;
                continue;
            }
            if (slot == LAT_PUT) {
                continue;
            }
            if (R->t1)
                R->t1[i] = simgrid_get_clock();
            done_step(R, i, ready, &nready);
        }
    }
    R->finish = simgrid_get_clock();
    /* the sending halves of the last latency waits, done with their gets but not waited
     * for (a wait returns one of the two) */
    if (!S.failed && nact)
        sg_comm_wait_all(act, nact);
    /* a failed run leaves messages posted: SimGrid reports the actors blocked at its end */
out:
    for (size_t b = 0; b < slots.nblocks; b++)
        free(slots.blocks[b]);
    free(slots.blocks);
    free(slots.free_ids);
    free(act);
    free(act_step);
    free(act_slot);
    free(ready);
    free(comms);
    free(locals);
}

static void srank_free(struct srank *R)
{
    free(R->lat_peer);
    free(R->lat_val);
    free(R->steps);
    free(R->rdep_off);
    free(R->rdep);
    free(R->t0);
    free(R->t1);
    memset(R, 0, sizeof(*R));
}

/* Take rank r's schedule into the compact form the actor runs; peer_last: 2n entries, all
 * NONE on entry and on return. */
static int srank_load(struct srank *R, const struct coll_schedule *s, uint32_t *peer_last,
                      bool trace)
{
    uint32_t n = s->nsteps, nedges = 0;
    uint32_t *seen, *prev;

    R->nsteps = n;
    R->ndone = 0;
    R->steps = calloc(n ? n : 1, sizeof(*R->steps));
    R->rdep_off = calloc((size_t)n + 1, sizeof(uint32_t));
    for (uint32_t i = 0; i < n; i++)
        nedges += s->steps[i].ndeps;
    R->rdep = malloc(sizeof(uint32_t) * (nedges ? nedges : 1));
    seen = calloc((size_t)n + 1, sizeof(uint32_t));
    prev = malloc(sizeof(uint32_t) * (n ? n : 1));
    if (trace) {
        R->t0 = calloc(n ? n : 1, sizeof(double));
        R->t1 = calloc(n ? n : 1, sizeof(double));
    }
    if (!R->steps || !R->rdep_off || !R->rdep || !seen || !prev ||
        (trace && (!R->t0 || !R->t1))) {
        free(seen);
        free(prev);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        const struct coll_step *cs = &s->steps[i];
        struct sstep *st = &R->steps[i];
        st->kind = cs->kind;
        st->peer = cs->peer;
        st->next_same = NONE;
        st->left = (uint8_t)cs->ndeps;
        st->bytes = (uint64_t)cs->dst.count * s->elem_size;
        if (cs->kind == COLL_STEP_SEND)
            st->bytes = (uint64_t)cs->src.count * s->elem_size;
        if (cs->kind == COLL_STEP_COPY && cs->src.buf == cs->dst.buf && cs->src.off == cs->dst.off)
            st->flags |= F_FREE;
        st->win_next = NONE;
        if (cs->kind == COLL_STEP_SEND || cs->kind == COLL_STEP_RECV) {
            uint32_t *last = &peer_last[(size_t)cs->peer * 2 + (cs->kind == COLL_STEP_RECV)];
            prev[i] = *last;
            if (*last != NONE) {
                R->steps[*last].next_same = i;
                st->left++;
                st->tag = R->steps[*last].tag + 1;
            }
            *last = i;
            /* SimGrid's loopback link of a host gives every flow its whole bandwidth
             * (a fat pipe): over it, one message at a time between two ranks of a host, as
             * one process copies them, instead of eight at full speed each; over the
             * ranks' memory ports (o->ports) too: one process's copies run in turn, and
             * eight flows sharing a port would each finish late, not one after another */
            uint32_t win = S.o.streams || host_of(cs->peer) == R->host ? 1 : RECV_WINDOW;
            if (st->tag >= win) {
                uint32_t j = i;
                for (uint32_t k = 0; k < win; k++)
                    j = prev[j];
                R->steps[j].win_next = i;
                st->left++;
            }
        }
        for (uint32_t k = 0; k < cs->ndeps; k++)
            R->rdep_off[cs->deps[k] + 1]++;
    }
    for (uint32_t i = 0; i < n; i++)
        R->rdep_off[i + 1] += R->rdep_off[i];
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < s->steps[i].ndeps; k++) {
            uint32_t d = s->steps[i].deps[k];
            R->rdep[R->rdep_off[d] + seen[d]++] = i;
        }
    free(seen);
    free(prev);
    for (uint32_t i = 0; i < n; i++) {
        const struct coll_step *cs = &s->steps[i];
        if (cs->kind == COLL_STEP_SEND || cs->kind == COLL_STEP_RECV)
            peer_last[(size_t)cs->peer * 2 + (cs->kind == COLL_STEP_RECV)] = NONE;
    }
    return 0;
}

/* ---- one row ---------------------------------------------------------------------------- */

struct row {
    size_t bytes, count; /* the size column, the builder's count */
    const struct coll_algo *algo;
    size_t chunk_count;
    double time_s, model_s, wall_s;
    uint64_t msgs, steps;
    size_t coarsened_from; /* the chunk asked for, where --max-messages raised it */
    const char *why;
};

static int32_t host_of(int32_t rank)
{
    return rank / S.o.per_host;
}

static enum coll_link link_of(void *arg, int32_t src, int32_t dst)
{
    (void)arg;
    return host_of(src) == host_of(dst) ? COLL_LINK_SHM : COLL_LINK_TCP;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static FILE *trace_f;
static uint64_t trace_seq;

static void trace_header(int32_t n)
{
    for (int32_t r = 0; r < n; r++) {
        fprintf(trace_f, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                         "\"args\":{\"name\":\"rank %d\"}}",
                r ? ",\n" : "\n", r, r);
        fprintf(trace_f, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                         "\"args\":{\"sort_index\":%d}}", r, r);
        fprintf(trace_f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                         "\"args\":{\"name\":\"collectives\"}}", r);
        fprintf(trace_f, ",\n{\"name\":\"coll_trace\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{"
                         "\"version\":1,\"rank\":%d,\"nranks\":%d,\"comm\":\"5349400000000000\","
                         "\"host\":\"h%d\",\"os_pid\":%d,\"clock\":\"simgrid\","
                         "\"realtime_offset_us\":0}}",
                r, r, n, host_of(r), (int)getpid());
    }
}

static void trace_row(const struct row *w, int32_t n)
{
    static double lane_end[TRACE_LANES];
    uint64_t seq = trace_seq++;

    for (int32_t r = 0; r < n; r++) {
        const struct srank *R = &S.r[r];
        uint32_t nlanes = 0;
        uint32_t *sent = calloc((size_t)n, sizeof(uint32_t));
        uint32_t *recvd = calloc((size_t)n, sizeof(uint32_t));
        if (!sent || !recvd) {
            free(sent);
            free(recvd);
            return;
        }
        fprintf(trace_f, ",\n{\"name\":");
        {
            char name[96];
            snprintf(name, sizeof(name), "%s %s", coll__coll_name(S.o.coll), w->algo->name);
            coll__json_str(trace_f, name);
        }
        fprintf(trace_f, ",\"cat\":\"coll\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,"
                         "\"dur\":%.3f,\"args\":{\"seq\":%" PRIu64 ",\"status\":\"success\","
                         "\"parts\":[{\"coll\":\"%s\",\"algo\":\"%s\",\"count\":%zu,"
                         "\"dtype\":\"%s\",\"root\":%d,\"chunk\":%zu,\"nranks\":%d,"
                         "\"nsteps\":%u}]}}",
                r, S.start * 1e6, (R->finish - S.start) * 1e6, seq, coll__coll_name(S.o.coll),
                w->algo->name, w->count, coll__dtype_name(S.o.dtype), S.o.root, w->chunk_count, n,
                R->nsteps);
        for (uint32_t i = 0; i < R->nsteps; i++) {
            static const char *const kinds[] = {"send", "recv", "reduce", "copy"};
            const struct sstep *st = &R->steps[i];
            double t0 = R->t0[i] * 1e6, t1 = R->t1[i] * 1e6;
            uint32_t l;
            for (l = 0; l < nlanes; l++)
                if (lane_end[l] <= t0)
                    break;
            if (l == nlanes) {
                if (nlanes < TRACE_LANES)
                    nlanes++;
                else
                    l = TRACE_LANES - 1;
            }
            if (t1 > lane_end[l])
                lane_end[l] = t1;
            fprintf(trace_f, ",\n{\"name\":\"%s\",\"cat\":\"step\",\"ph\":\"X\",\"pid\":%d,"
                             "\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"op\":%" PRIu64
                             ",\"part\":0,\"step\":%u,\"peer\":%d,\"bytes\":%" PRIu64 "}}",
                    kinds[st->kind & 3], r, l + 1, t0, t1 - t0, seq, i,
                    st->kind <= COLL_STEP_RECV ? st->peer : -1, st->bytes);
            if (st->kind <= COLL_STEP_RECV) {
                bool snd = st->kind == COLL_STEP_SEND;
                int32_t src = snd ? r : st->peer, dst = snd ? st->peer : r;
                uint32_t k = snd ? sent[st->peer]++ : recvd[st->peer]++;
                uint64_t id = ((((uint64_t)seq * (uint64_t)n + (uint64_t)src) * (uint64_t)n +
                                (uint64_t)dst) << 20 | k) & ((1ull << 53) - 1);
                fprintf(trace_f, ",\n{\"name\":\"msg\",\"cat\":\"msg\",\"ph\":\"%s\",%s\"id\":%"
                                 PRIu64 ",\"pid\":%d,\"tid\":%u,\"ts\":%.3f}",
                        snd ? "s" : "f", snd ? "" : "\"bp\":\"e\",", id, r, l + 1,
                        (t0 + t1) / 2);
            }
        }
        for (uint32_t l = 0; l < nlanes; l++)
            lane_end[l] = 0;
        free(sent);
        free(recvd);
    }
}

static void trace_end(int32_t n)
{
    for (int32_t r = 0; r < n; r++) {
        for (uint32_t l = 1; l <= TRACE_LANES; l++)
            fprintf(trace_f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,"
                             "\"args\":{\"name\":\"steps %u\"}}", r, l, l);
        fprintf(trace_f, ",\n{\"name\":\"coll_trace_end\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                         "\"args\":{\"events\":0,\"dropped\":0}}", r);
    }
    fputs("\n]\n", trace_f);
}

/* Build every rank's schedule, run them on the platform, collect the time. */
static int run_row(struct row *w, uint32_t *peer_last, int32_t *hostmap)
{
    int32_t n = S.o.nranks;
    struct coll_algo_args a = {
        .coll = S.o.coll,
        .nranks = n,
        .root = S.o.root,
        .count = w->count,
        .dtype = S.o.dtype,
        .elem_size = coll__dtype_size(S.o.dtype),
        .chunk_count = w->chunk_count,
        .hosts = S.o.hosts > 1 ? hostmap : NULL,
        .nhosts = S.o.hosts > 1 ? S.o.hosts : 0,
    };
    struct coll_cost_links links = {link_of, NULL, COLL_LINK_TCP};
    double t_wall = wall_now(), end = 0;

    double *ws = calloc((size_t)S.o.hosts, sizeof(double)), most = 0;
    uint64_t planned = 0;

    if (!ws)
        return fprintf(stderr, "collsim: out of memory\n"), EXIT_SIMFAIL;
    w->msgs = w->steps = 0;
    if (w->algo->applicable && !w->algo->applicable(&a)) {
        free(ws);
        return -1;
    }
    for (int32_t r = 0; r < n; r++) {
        struct coll_schedule s;
        coll_status_t st;
        a.rank = r;
        coll__sched_init(&s, &a);
        st = w->algo->build(&a, &s);
        if (st == COLL_SUCCESS)
            st = coll__sched_validate(&s);
        if (st != COLL_SUCCESS) {
            fprintf(stderr, "collsim: %s cannot build rank %d's %s schedule: %s\n", w->algo->name,
                    r, coll_names[S.o.coll], coll_last_error(NULL));
            coll__sched_free(&s);
            return EXIT_USAGE;
        }
        S.r[r].rank = r;
        S.r[r].host = host_of(r);
        if (srank_load(&S.r[r], &s, peer_last, trace_f != NULL)) {
            coll__sched_free(&s);
            fprintf(stderr, "collsim: out of memory for rank %d's schedule (%u steps)\n", r,
                    s.nsteps);
            return EXIT_SIMFAIL;
        }
        w->steps += s.nsteps;
        for (uint32_t i = 0; i < s.nsteps; i++)
            planned += s.steps[i].kind == COLL_STEP_SEND;
        if (S.o.max_msgs && planned > S.o.max_msgs) {
            /* over the budget even at the point's coarsest pieces: not simulated */
            coll__sched_free(&s);
            for (int32_t q = 0; q <= r; q++)
                srank_free(&S.r[q]);
            free(ws);
            return -2;
        }
        ws[host_of(r)] += (double)(s.buf_count[COLL_BUF_SEND] + s.buf_count[COLL_BUF_RECV] +
                                   s.buf_count[COLL_BUF_SCRATCH]) * (double)s.elem_size;
        coll__sched_free(&s);
    }
    for (int32_t h = 0; h < S.o.hosts; h++)
        most = ws[h] > most ? ws[h] : most;
    free(ws);
    S.mem_f = 1;
    if (S.p.mem > 1 && S.p.cache_bytes > 0 && most > S.p.cache_bytes)
        S.mem_f = 1 + (S.p.mem - 1) * (1 - S.p.cache_bytes / most);
    for (size_t l = 0; l < S.nlinks; l++)
        sg_link_set_bandwidth(S.links[l], S.link_bw[l] / S.mem_f);
    /* the cost model's figure for the same schedules, on its own machine */
    /* (a platform file's links are not the model's: no figure then) */
    if (S.o.platform && !S.o.calib)
        w->model_s = NAN;
    else if (n > 1 &&
             coll__cost_predict(&S.p, &links, w->algo, &a, &w->model_s, NULL) != COLL_SUCCESS)
        w->model_s = NAN;
    else if (n == 1)
        w->model_s = 0;
    S.start = simgrid_get_clock();
    for (int32_t r = 0; r < n; r++) {
        char name[32];
        sg_actor_t act;
        snprintf(name, sizeof(name), "rank%d", r);
        act = sg_actor_init(name, rank_host(r));
        sg_actor_set_data(act, &S.r[r]);
        sg_actor_start(act, rank_main, 0, NULL);
    }
    simgrid_run();
    for (int32_t r = 0; r < n; r++) {
        if (S.r[r].finish > end)
            end = S.r[r].finish;
        w->msgs += S.r[r].nmsgs;
        if (!S.failed && S.r[r].ndone != S.r[r].nsteps)
            fail_run("rank %d finished %u of its %u steps", r, S.r[r].ndone, S.r[r].nsteps);
    }
    w->time_s = end > S.start ? end - S.start : 0;
    w->wall_s = wall_now() - t_wall;
    if (trace_f && !S.failed)
        trace_row(w, n);
    for (int32_t r = 0; r < n; r++)
        srank_free(&S.r[r]);
    if (S.failed) {
        fprintf(stderr, "collsim: %s %s of %zu bytes did not run to its end: %s\n", w->algo->name,
                coll_names[S.o.coll], w->bytes, S.failed);
        return EXIT_SIMFAIL;
    }
    return 0;
}

static double bus_factor(enum coll_coll c, int32_t n)
{
    switch (c) {
    case COLL_COLL_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case COLL_COLL_ALLGATHER:
    case COLL_COLL_REDUCE_SCATTER:
    case COLL_COLL_ALLTOALL:
    case COLL_COLL_GATHER:
    case COLL_COLL_SCATTER:
        return (double)(n - 1) / n;
    default:
        return 1;
    }
}

/* ---- main ------------------------------------------------------------------------------- */

static int parse_args(int argc, char **argv, struct opts *o, int *sg_argc, char **sg_argv)
{
    o->coll = COLL_COLL_ALLREDUCE;
    o->dtype = COLL_FLOAT32;
    o->hosts = 1;
    o->per_host = 1;
    o->link_bw = 12.5e9;
    o->link_lat = 1e-6;
    o->intra_bw = -1;
    o->intra_lat = -1;
    o->minb = 8;
    o->maxb = 64u << 20;
    o->factor = 2;
    o->chunk = 128u << 10;
    o->algo_spec = "auto";
    o->step_s = o->overhead_s = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV()                                                                                    \
    do {                                                                                           \
        if (!v)                                                                                    \
            return usage_error("%s needs a value", a);                                             \
        i++;                                                                                       \
    } while (0)
        if (!strncmp(a, "--cfg=", 6) || !strncmp(a, "--log=", 6)) {
            sg_argv[(*sg_argc)++] = argv[i];
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "-q")) {
            o->quiet = true;
        } else if (!strcmp(a, "--exact")) {
            o->exact = true;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--coll")) {
            int c;
            NEEDV();
            for (c = 0; c < COLL_COLL_SENDRECV && strcasecmp(v, coll_names[c]); c++)
                ;
            if (c == COLL_COLL_SENDRECV && !strcasecmp(v, "bcast"))
                c = COLL_COLL_BROADCAST;
            if (c == COLL_COLL_SENDRECV)
                return usage_error("unknown collective '%s'; valid: allreduce, broadcast, reduce, "
                                   "allgather, reducescatter, alltoall, gather, scatter, barrier",
                                   v);
            o->coll = (enum coll_coll)c;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--nranks")) {
            NEEDV();
            if (!parse_int(v, 1, 1 << 20, &o->nranks))
                return usage_error("-n '%s': a rank count of 1 or more", v);
        } else if (!strcmp(a, "-b") || !strcmp(a, "-e") || !strcmp(a, "--chunk")) {
            size_t *dst = a[1] == 'b' ? &o->minb : a[1] == 'e' ? &o->maxb : &o->chunk;
            NEEDV();
            if (!parse_bytes(v, dst))
                return usage_error("%s '%s': a size in bytes (K, M, G suffixes)", a, v);
            if (dst == &o->chunk)
                o->chunk_given = true;
        } else if (!strcmp(a, "-f")) {
            NEEDV();
            o->factor = strtod(v, NULL);
            if (!(o->factor > 1))
                return usage_error("-f '%s': a factor above 1", v);
        } else if (!strcmp(a, "-d") || !strcmp(a, "--dtype")) {
            NEEDV();
            if (!parse_dtype(v, &o->dtype))
                return usage_error("unknown dtype '%s'", v);
        } else if (!strcmp(a, "-r") || !strcmp(a, "--root")) {
            NEEDV();
            if (!parse_int(v, 0, 1 << 20, &o->root))
                return usage_error("--root '%s': a rank", v);
        } else if (!strcmp(a, "--algo")) {
            NEEDV();
            o->algo_spec = v;
        } else if (!strcmp(a, "--hosts") || !strcmp(a, "--per-host") || !strcmp(a, "--cores")) {
            int32_t *dst = a[2] == 'h' ? &o->hosts : a[2] == 'p' ? &o->per_host : &o->cores;
            NEEDV();
            if (!parse_int(v, 1, 1 << 20, dst))
                return usage_error("%s '%s': a count of 1 or more", a, v);
        } else if (!strcmp(a, "--link") || !strcmp(a, "--intra")) {
            NEEDV();
            if (!parse_bw(v, a[2] == 'l' ? &o->link_bw : &o->intra_bw))
                return usage_error("%s '%s': a bandwidth (100Gbps, 12.5GBps, bytes per second)",
                                   a, v);
        } else if (!strcmp(a, "--latency") || !strcmp(a, "--intra-latency") ||
                   !strcmp(a, "--step") || !strcmp(a, "--overhead")) {
            double *dst = a[2] == 'l' ? &o->link_lat : a[2] == 'i' ? &o->intra_lat
                          : a[2] == 's' ? &o->step_s : &o->overhead_s;
            NEEDV();
            if (!parse_time(v, dst))
                return usage_error("%s '%s': a time (2us, 500ns, seconds)", a, v);
        } else if (!strcmp(a, "--max-messages")) {
            size_t m;
            NEEDV();
            if (!parse_bytes(v, &m) || m < 1000)
                return usage_error("--max-messages '%s': a message count of 1000 or more (K, M "
                                   "suffixes: 4M is 4 x 2^20)", v);
            o->max_msgs = m;
        } else if (!strcmp(a, "--intra-model")) {
            NEEDV();
            if (strcmp(v, "ports") && strcmp(v, "loopback"))
                return usage_error("--intra-model '%s': valid: ports (a memory port per rank), "
                                   "loopback (SimGrid's loopback link, one message at a time "
                                   "between two ranks)", v);
            o->intra_model = v;
        } else if (!strcmp(a, "--fabric")) {
            NEEDV();
            o->fabric = v;
        } else if (!strcmp(a, "--platform")) {
            NEEDV();
            o->platform = v;
        } else if (!strcmp(a, "--calib")) {
            NEEDV();
            o->calib = v;
        } else if (!strcmp(a, "--model")) {
            NEEDV();
            o->model = v;
        } else if (!strcmp(a, "--json")) {
            NEEDV();
            o->json = v;
        } else if (!strcmp(a, "--trace")) {
            NEEDV();
            o->trace = v;
        } else {
            return usage_error("unknown option '%s'", a);
        }
#undef NEEDV
    }
    if (o->maxb < o->minb)
        return usage_error("-e %zu is below -b %zu", o->maxb, o->minb);
    if (o->platform && o->fabric)
        return usage_error("--platform and --fabric exclude each other");
    if (o->platform && o->intra_model && !strcmp(o->intra_model, "ports"))
        return usage_error("--intra-model ports builds its own platform; with --platform the "
                           "ranks of a host share its loopback (valid: --intra-model loopback)");
    return 0;
}

/* A platform file SimGrid cannot read ends the process (its parser's message names the
 * line): load it first in a child, so that the answer is a usage error, not a crash. */
static int check_platform(const char *path)
{
    pid_t pid;
    int status;

    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0)
        return fprintf(stderr, "collsim: fork: %s\n", strerror(errno)), EXIT_SIMFAIL;
    if (pid == 0) {
        char arg0[] = "collsim", log[] = "--log=root.thres:error", fmt[] = "--log=root.fmt:%m%n";
        char *av[] = {arg0, log, fmt, NULL};
        int ac = 3;
        simgrid_init(&ac, av);
        simgrid_load_platform(path);
        fflush(stdout);
        _exit(0);
    }
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return EXIT_SIMFAIL;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    fprintf(stderr, "collsim: SimGrid cannot load the platform '%s' (the line above says "
                    "where)\n", path);
    return EXIT_USAGE;
}

static int host_cmp(const void *x, const void *y)
{
    const char *a = sg_host_get_name(*(const sg_host_t *)x);
    const char *b = sg_host_get_name(*(const sg_host_t *)y);
    /* numbers in names in numeric order: h2 before h10 */
    while (*a && *b) {
        if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
            char *ea, *eb;
            unsigned long long na = strtoull(a, &ea, 10), nb = strtoull(b, &eb, 10);
            if (na != nb)
                return na < nb ? -1 : 1;
            a = ea, b = eb;
            continue;
        }
        if (*a != *b)
            return (unsigned char)*a - (unsigned char)*b;
        a++, b++;
    }
    return (unsigned char)*a - (unsigned char)*b;
}

int main(int argc, char **argv)
{
    struct opts *o = &S.o;
    /* static: reachable until exit, whichever return is taken */
    static char **sg_argv;
    int sg_argc = 1, rc, nalgos = 0;
    const struct coll_algo *algos[MAX_ALGOS];
    char platform_path[64] = "";
    char model_cfg[96], log_cfg[] = "--log=root.thres:warning", cross_cfg[] =
        "--cfg=network/crosstraffic:0";
    int32_t nodes = 0, *hostmap = NULL;
    uint32_t *peer_last = NULL;
    FILE *json = NULL;
    size_t esz, floor_count = 0;
    int nrows = 0, nskipped = 0;

    sg_argv = calloc((size_t)argc + 8, sizeof(char *));
    if (!sg_argv)
        return EXIT_SIMFAIL;
    sg_argv[0] = argv[0];
    if ((rc = parse_args(argc, argv, o, &sg_argc, sg_argv)))
        return rc;
    esz = coll__dtype_size(o->dtype);

    /* the machine's figures: calibration file, else the cost model's defaults */
    coll__cost_params_default(&S.p);
    if (o->calib && coll__cost_params_load(&S.p, o->calib) != COLL_SUCCESS)
        return usage_error("--calib: %s", coll_last_error(NULL));
    if (o->calib) {
        /* a message of b bytes: alpha - lat of the sender's time (msg_cpu), lat on the wire
         * (two NIC links between hosts, the loopback within one), b beta */
        const struct coll_link_cost *t = &S.p.link[COLL_LINK_TCP], *m = &S.p.link[COLL_LINK_SHM];
        o->link_bw = t->beta > 0 ? 1 / t->beta : 1e15;
        o->link_lat = (t->lat < t->alpha ? t->lat : t->alpha) / 2;
        o->intra_bw = m->beta > 0 ? 1 / m->beta : 1e15;
        o->intra_lat = m->lat < m->alpha ? m->lat : m->alpha;
    } else {
        /* the platform's links are the cost model's links (so the selector and the model's
         * column see this platform): inter-host over tcp's entry, intra-host over shm's */
        struct coll_link_cost *t = &S.p.link[COLL_LINK_TCP], *m = &S.p.link[COLL_LINK_SHM];
        if (o->intra_bw < 0)
            o->intra_bw = m->beta > 0 ? 1 / m->beta : 8e9;
        if (o->intra_lat < 0)
            o->intra_lat = m->lat;
        t->lat = 2 * o->link_lat;
        t->alpha = t->lat + (o->overhead_s > 0 ? o->overhead_s : 0);
        t->beta = 1 / o->link_bw;
        t->rdv = t->rdv_bytes = 0;
        m->lat = o->intra_lat;
        m->alpha = m->lat + (o->overhead_s > 0 ? o->overhead_s : 0);
        m->beta = 1 / o->intra_bw;
        m->rdv = m->rdv_bytes = 0;
    }
    /* a memory port per rank wherever a host holds several (not with a platform file, whose
     * hosts are what it says) */
    {
        bool cm02 = !o->model || !strcmp(o->model, "CM02");
        if (!cm02 && o->intra_model && !strcmp(o->intra_model, "ports"))
            return usage_error("--intra-model ports times latencies itself, with CM02's "
                               "plain links; with --model %s: --intra-model loopback", o->model);
        o->ports = cm02 && !o->platform && o->per_host > 1 &&
                   !(o->intra_model && !strcmp(o->intra_model, "loopback"));
        o->streams = cm02 && !o->platform && (o->ports || o->per_host == 1);
    }
    if (o->step_s >= 0)
        S.p.step = o->step_s;
    if (!o->cores)
        o->cores = o->per_host;
    S.p.cores = o->cores;
    snprintf(model_cfg, sizeof(model_cfg), "--cfg=network/model:%s", o->model ? o->model : "CM02");
    if (o->model && strcmp(o->model, "CM02") && strcmp(o->model, "LV08") &&
        strcmp(o->model, "SMPI") && strcmp(o->model, "Constant") && strcmp(o->model, "IB"))
        return usage_error("unknown network model '%s'; valid: CM02, LV08, SMPI, IB, Constant",
                           o->model);

    if (!o->platform) {
        if (!o->nranks)
            o->nranks = o->hosts * o->per_host;
        if (o->nranks > (int64_t)o->hosts * o->per_host)
            return usage_error("%d ranks do not fit on %d hosts x %d ranks per host", o->nranks,
                               o->hosts, o->per_host);
        if (o->hosts > (o->nranks + o->per_host - 1) / o->per_host)
            o->hosts = (o->nranks + o->per_host - 1) / o->per_host;
    } else if ((rc = check_platform(o->platform))) {
        return rc;
    }
    if (o->root >= (o->nranks ? o->nranks : 1) && o->nranks)
        return usage_error("--root %d is not a rank of %d", o->root, o->nranks);

    /* algorithms */
    if (!o->platform && o->nranks > COLLSIM_MAX_RANKS)
        return usage_error("-n %d: collsim runs every rank's schedule as a SimGrid actor, up "
                           "to %d ranks (4,096 is minutes and GBs at large sizes); the "
                           "selector's pick at any count: collbench %s --explain --np N",
                           o->nranks, COLLSIM_MAX_RANKS, coll_names[o->coll]);
    if (!strcmp(o->algo_spec, "auto")) {
        algos[nalgos++] = NULL; /* NULL: the selector's pick */
    } else if (!strcmp(o->algo_spec, "all")) {
        for (int i = 0; coll__algos[i] && nalgos < MAX_ALGOS; i++)
            if (coll__algos[i]->colls & (1u << o->coll))
                algos[nalgos++] = coll__algos[i];
    } else {
        char buf[256], *save = NULL, *tok;
        snprintf(buf, sizeof(buf), "%s", o->algo_spec);
        for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            const struct coll_algo *al = coll__algo_find(tok);
            if (!strcmp(tok, "auto")) { /* the selector's pick, beside named ones */
                if (nalgos < MAX_ALGOS)
                    algos[nalgos++] = NULL;
                continue;
            }
            if (!al || !(al->colls & (1u << o->coll))) {
                fprintf(stderr, "collsim: unknown algorithm '%s' for %s\n", tok,
                        coll_names[o->coll]);
                list_algos(stderr, o->coll);
                return EXIT_USAGE;
            }
            if (nalgos < MAX_ALGOS)
                algos[nalgos++] = al;
        }
    }

    sg_argv[sg_argc++] = log_cfg;
    sg_argv[sg_argc++] = model_cfg;
    sg_argv[sg_argc++] = cross_cfg;
    if (!o->platform) {
        int fd;
        snprintf(platform_path, sizeof(platform_path), "/tmp/collsim-XXXXXX.xml");
        fd = mkstemps(platform_path, 4);
        if (fd < 0)
            return fprintf(stderr, "collsim: cannot create a platform file: %s\n",
                           strerror(errno)), EXIT_SIMFAIL;
        close(fd);
        rc = write_platform(o, platform_path, &nodes);
        if (rc) {
            unlink(platform_path);
            return rc;
        }
    }
    simgrid_init(&sg_argc, sg_argv);
    simgrid_load_platform(o->platform ? o->platform : platform_path);
    if (platform_path[0])
        unlink(platform_path);
    {
        sg_host_t *list = sg_host_list();
        S.nhosts_plat = sg_host_count();
        S.hosts = list;
        qsort(S.hosts, S.nhosts_plat, sizeof(*S.hosts), host_cmp);
        S.nfab = o->ports ? S.nhosts_plat - (size_t)o->nranks : 0;
    }
    if (o->streams) {
        /* the latencies leave SimGrid's links for pair_lat: a pair's messages go in turn,
         * and each one's latency overlaps the next one's transfer, as on a TCP stream or
         * through shared memory (SimGrid would run k messages of a pair side by side, each
         * at 1/k of the rate: none done until all are) */
        size_t all = sg_link_count();
        sg_link_t *ls = sg_link_list();
        S.link_lat = malloc(sizeof(double) * (all ? all : 1));
        if (!ls || !S.link_lat)
            return fprintf(stderr, "collsim: out of memory\n"), EXIT_SIMFAIL;
        for (size_t l = 0; l < all; l++) {
            S.link_lat[l] = sg_link_get_latency(ls[l]);
            sg_link_set_data(ls[l], &S.link_lat[l]);
            sg_link_set_latency(ls[l], 0);
        }
        free(ls);
    }
    if (o->ports) {
        /* coll's shm moves a message by the receiver's copy (out of the sender's slots, or
         * straight out of its buffer from 16 KiB on): a rank's port limits what it takes
         * in, not what others take from it */
        size_t all = sg_link_count();
        sg_link_t *ls = sg_link_list();
        for (size_t l = 0; ls && l < all; l++) {
            const char *nm = sg_link_get_name(ls[l]);
            size_t len = strlen(nm);
            if (nm[0] == 'm' && strstr(nm, "_link_") && len > 3 && !strcmp(nm + len - 3, "_UP"))
                sg_link_set_bandwidth(ls[l], 1e18);
        }
        free(ls);
    }
    if (o->calib && S.p.mem > 1 && S.p.cache_bytes > 0) {
        /* shared memory's links only (the ranks' memory ports in, or the loopbacks): memory
         * bounds the copies of shared memory, not a NIC
         * (the cost model stretches every link's beta; a 1 Gbit/s link is not slowed by
         * the memory behind it) */
        size_t all = sg_link_count();
        S.links = sg_link_list();
        S.link_bw = malloc(sizeof(double) * (all ? all : 1));
        if (!S.links || !S.link_bw)
            return fprintf(stderr, "collsim: out of memory\n"), EXIT_SIMFAIL;
        for (size_t l = 0; l < all; l++)
            if (o->ports ? sg_link_get_name(S.links[l])[0] == 'm' &&
                               strstr(sg_link_get_name(S.links[l]), "_link_") &&
                               strstr(sg_link_get_name(S.links[l]), "_DOWN")
                         : !o->streams && strstr(sg_link_get_name(S.links[l]), "loopback")) {
                S.links[S.nlinks] = S.links[l];
                S.link_bw[S.nlinks++] = sg_link_get_bandwidth(S.links[l]);
            }
    }
    if (o->platform) {
        int64_t cap = (int64_t)S.nhosts_plat * o->per_host;
        if (!o->nranks)
            o->nranks = (int32_t)(cap < (1 << 20) ? cap : 1 << 20);
        if (o->nranks > cap)
            return usage_error("%d ranks do not fit on the platform's %zu hosts x %d ranks per "
                               "host", o->nranks, S.nhosts_plat, o->per_host);
        o->hosts = (o->nranks + o->per_host - 1) / o->per_host;
        if (o->root >= o->nranks)
            return usage_error("--root %d is not a rank of %d", o->root, o->nranks);
    }
    S.r = calloc((size_t)o->nranks, sizeof(*S.r));
    peer_last = malloc(sizeof(uint32_t) * 2 * (size_t)o->nranks);
    hostmap = malloc(sizeof(int32_t) * (size_t)o->nranks);
    if (!S.r || !peer_last || !hostmap)
        return fprintf(stderr, "collsim: out of memory for %d ranks\n", o->nranks), EXIT_SIMFAIL;
    for (int32_t i = 0; i < 2 * o->nranks; i++)
        peer_last[i] = NONE;
    for (int32_t r = 0; r < o->nranks; r++)
        hostmap[r] = host_of(r);

    if (o->trace) {
        trace_f = fopen(o->trace, "w");
        if (!trace_f)
            return fprintf(stderr, "collsim: cannot create '%s': %s\n", o->trace,
                           strerror(errno)), EXIT_USAGE;
        fputs("[", trace_f);
        trace_header(o->nranks);
    }
    if (o->json) {
        json = fopen(o->json, "w");
        if (!json)
            return fprintf(stderr, "collsim: cannot create '%s': %s\n", o->json,
                           strerror(errno)), EXIT_USAGE;
        fprintf(json, "{\n  \"tool\": \"collsim\",\n  \"coll\": \"%s\",\n  \"nranks\": %d,\n"
                      "  \"hosts\": %d,\n  \"per_host\": %d,\n  \"cores\": %d,\n"
                      "  \"platform\": ", coll_names[o->coll], o->nranks, o->hosts, o->per_host,
                o->cores);
        coll__json_str(json, o->platform ? o->platform : o->fabric ? o->fabric : "switch");
        fprintf(json, ",\n  \"network_model\": \"%s\",\n  \"link_Bps\": %.17g,\n"
                      "  \"link_latency_s\": %.17g,\n  \"intra_Bps\": %.17g,\n"
                      "  \"intra_latency_s\": %.17g,\n  \"intra_model\": \"%s\",\n"
                      "  \"streams\": %s,\n"
                      "  \"max_messages\": %" PRIu64 ",\n  \"dtype\": \"%s\",\n  \"rows\": [",
                o->model ? o->model : "CM02", o->link_bw, o->link_lat,
                o->intra_bw, o->intra_lat, o->ports ? "ports" : "loopback",
                o->streams ? "true" : "false", o->max_msgs,
                coll__dtype_name(o->dtype));
    }

    if (!o->quiet) {
        printf("# collsim %s: %d ranks on %d hosts x %d per host (%d cores each); ",
               coll_names[o->coll], o->nranks, o->hosts, o->per_host, o->cores);
        if (o->platform)
            printf("platform %s\n", o->platform);
        else
            printf("fabric %s of %d hosts, NIC %.4g Gbit/s %.3g us, intra-host %.4g GB/s %.3g us"
                   " (%s)%s\n", o->fabric ? o->fabric : "switch", nodes, o->link_bw * 8e-9,
                   o->link_lat * 1e6, o->intra_bw * 1e-9,
                   o->intra_lat * 1e6, o->ports ? "a memory port per rank" : "loopback",
                   o->streams ? "; a pair's messages in turn, latency overlapped" : "");
        printf("# SimGrid %s network model, %s; %s per step, %s\n",
               o->model ? o->model : "CM02",
               (o->model && strcmp(o->model, "CM02")) ? "the model's own factors"
                                                      : "no latency or bandwidth factors",
               o->calib ? "calibration file's time" : "cost model's default time",
               o->calib ? o->calib : "cost model defaults for gamma and copy");
        if (o->max_msgs)
            printf("# --max-messages %" PRIu64 ": a size's chunks at least 2 x ranks x size / %"
                   PRIu64 "; a row whose chunk this raised ends in 'coarsened from' the asked\n",
                   o->max_msgs, o->max_msgs);
        printf("#       size         count      type   redop    root     time   algbw   busbw"
               " #wrong  algorithm    chunk  model(us)     msgs  sim(s)\n");
        printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
               "                        (B)\n");
        fflush(stdout);
    }

    rc = 0;
    for (size_t bytes = o->minb;; ) {
        size_t count = bytes / esz, per = o->coll == COLL_COLL_ALLREDUCE ||
                                                  o->coll == COLL_COLL_BROADCAST ||
                                                  o->coll == COLL_COLL_REDUCE
                                              ? count
                                              : count / (size_t)o->nranks;
        size_t shown = o->coll == COLL_COLL_BARRIER ? 0 : bytes;
        if (o->coll == COLL_COLL_BARRIER)
            per = 1;
        if (per == 0)
            goto next;
        if (o->max_msgs && o->nranks > 1) {
            /* the point's coarsest pieces: pipelined algorithms send about 2 n size / chunk
             * messages (ring, trees, chains); the same floor for all keeps them comparable */
            double fl = 2.0 * o->nranks * (double)bytes / (double)o->max_msgs;
            size_t c = esz;
            while ((double)c < fl)
                c *= 2;
            floor_count = c / esz;
        }
        for (int k = 0; k < nalgos; k++) {
            struct row w = {.bytes = shown, .count = per, .chunk_count = o->chunk / esz};
            double algbw, busbw;
            size_t databytes;
            if (!w.chunk_count)
                w.chunk_count = 1;
            if (!algos[k]) {
                /* the selector's ranking (src/algo/select.c by_cost): its chunk sizes, the
                 * platform's links, the first row wins */
                static const size_t chunks[] = COLL_COST_SELECT_CHUNKS;
                size_t forced = o->chunk;
                struct coll_cost_result res[48];
                size_t nres = 0;
                struct coll_cost_links links = {link_of, NULL, COLL_LINK_TCP};
                struct coll_cost_query q = {
                    .coll = o->coll, .nranks = o->nranks, .root = o->root, .count = per,
                    .dtype = o->dtype, .chunk_bytes = o->chunk_given ? &forced : chunks,
                    .nchunk_bytes = o->chunk_given ? 1 : COLL_ARRAY_SIZE(chunks),
                    .hosts = o->hosts > 1 ? hostmap : NULL, .nhosts = o->hosts > 1 ? o->hosts : 0,
                    .closed = !o->exact,
                };
                if (o->nranks == 1) {
                    w.algo = coll__algos[0];
                    for (int i = 0; coll__algos[i]; i++)
                        if (coll__algos[i]->colls & (1u << o->coll)) {
                            w.algo = coll__algos[i];
                            break;
                        }
                } else if (coll__cost_rank_algos(&S.p, &links, &q, res, COLL_ARRAY_SIZE(res),
                                                 &nres) != COLL_SUCCESS || !nres) {
                    fprintf(stderr, "collsim: the selector cannot price %s of %zu bytes on %d "
                                    "ranks: %s\n", coll_names[o->coll], bytes, o->nranks,
                            coll_last_error(NULL));
                    rc = EXIT_SIMFAIL;
                    goto out;
                } else {
                    w.algo = res[0].algo;
                    w.chunk_count = res[0].chunk_count;
                }
            } else {
                w.algo = algos[k];
            }
            if (floor_count > w.chunk_count) {
                w.coarsened_from = w.chunk_count * esz;
                w.chunk_count = floor_count;
            }
            rc = run_row(&w, peer_last, hostmap);
            if (rc == -2) {
                rc = 0;
                if (!o->quiet)
                    printf("# %12zu  %s: more than --max-messages %" PRIu64 " messages in "
                           "%zu-byte pieces; not simulated\n", shown, w.algo->name, o->max_msgs,
                           w.chunk_count * esz);
                if (json) {
                    fprintf(json, "%s\n    {\"size\": %zu, \"count\": %zu, \"algo\": \"%s\", "
                                  "\"chunk_bytes\": %zu, \"picked_by\": \"%s\", "
                                  "\"skipped\": \"max-messages\", \"messages_over\": %" PRIu64
                                  "}", nrows > 0 || nskipped > 0 ? "," : "", shown, per,
                            w.algo->name, w.chunk_count * esz, !algos[k] ? "selector" : "named",
                            o->max_msgs);
                    fflush(json);
                }
                nskipped++;
                continue;
            }
            if (rc < 0) {
                /* one of several: say so and go on; the only one named: a usage error */
                rc = 0;
                if (!o->quiet)
                    printf("# %12zu  %s cannot run %s of %zu elements on %d ranks (%d hosts)\n",
                           shown, w.algo->name, coll_names[o->coll], per, o->nranks, o->hosts);
                if (nalgos == 1 && algos[k]) {
                    fprintf(stderr, "collsim: %s cannot run %s of %zu elements on %d ranks "
                                    "(%d hosts)\n", w.algo->name, coll_names[o->coll], per,
                            o->nranks, o->hosts);
                    list_algos(stderr, o->coll);
                    rc = EXIT_USAGE;
                    goto out;
                }
                continue;
            }
            if (rc)
                goto out;
            nrows++;
            databytes = o->coll == COLL_COLL_ALLREDUCE || o->coll == COLL_COLL_BROADCAST ||
                                o->coll == COLL_COLL_REDUCE
                            ? per * esz
                            : per * esz * (size_t)o->nranks;
            algbw = w.time_s > 0 ? (double)databytes / w.time_s * 1e-9 : 0;
            busbw = algbw * bus_factor(o->coll, o->nranks);
            if (!o->quiet) {
                char model[32];
                if (isfinite(w.model_s))
                    snprintf(model, sizeof(model), "%9.2f", w.model_s * 1e6);
                else
                    snprintf(model, sizeof(model), "%9s", "-");
                char coarse[48] = "";
                if (w.coarsened_from)
                    snprintf(coarse, sizeof(coarse), "  coarsened from %zu", w.coarsened_from);
                printf("%12zu  %12zu  %8s  %6s  %6d  %7.2f  %6.2f  %6.2f  %5s  %-10s %8zu  %s"
                       "  %7" PRIu64 "  %6.2f%s\n",
                       shown, o->coll == COLL_COLL_BARRIER ? 0 : count, coll__dtype_name(o->dtype),
                       "sum", o->root, w.time_s * 1e6, algbw, busbw, "N/A", w.algo->name,
                       w.chunk_count * esz, model, w.msgs, w.wall_s, coarse);
                fflush(stdout);
            }
            if (json) {
                fprintf(json, "%s\n    {\"size\": %zu, \"count\": %zu, \"algo\": \"%s\", "
                              "\"chunk_bytes\": %zu, \"picked_by\": \"%s\", \"time_us\": %.6g, "
                              "\"algbw_GBps\": %.6g, \"busbw_GBps\": %.6g, \"model_us\": %.6g, "
                              "\"messages\": %" PRIu64 ", \"steps\": %" PRIu64
                              ", \"sim_wall_s\": %.4g, \"coarsened_from\": %zu}",
                        nrows > 1 || nskipped ? "," : "", shown, per, w.algo->name,
                        w.chunk_count * esz,
                        !algos[k] ? "selector" : "named", w.time_s * 1e6, algbw, busbw,
                        isfinite(w.model_s) ? w.model_s * 1e6 : -1.0, w.msgs, w.steps, w.wall_s,
                        w.coarsened_from);
                fflush(json);
            }
        }
    next:
        if (o->coll == COLL_COLL_BARRIER || bytes >= o->maxb)
            break;
        {
            double nb = (double)bytes * o->factor;
            bytes = nb > (double)o->maxb || (size_t)nb == bytes ? o->maxb : (size_t)nb;
        }
    }
out:
    if (json) {
        fputs("\n  ]\n}\n", json);
        fclose(json);
    }
    if (trace_f) {
        trace_end(o->nranks);
        fclose(trace_f);
    }
    free(S.r);
    free(peer_last);
    free(hostmap);
    free(S.hosts);
    free(S.links);
    free(S.link_bw);
    free(S.link_lat);
    free(sg_argv);
    return rc;
}
