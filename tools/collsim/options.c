/*
 * options.c - collsim's command line: the usage text, the parsers of sizes, times and
 * bandwidths, and the options' checks.
 */
#include "collsim.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("collsim: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (collsim --help)\n", stderr);
    return EXIT_USAGE;
}

void list_algos(FILE *f, enum coll_coll c)
{
    fprintf(f, "collsim: algorithms for %s: auto (the selector's pick), all", coll__coll_name(c));
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
"  --price HOW          the model(us) column: walk (default; the cost model's\n"
          "                       simulation of every rank's schedule, whose memory grows\n"
          "                       with the steps), closed (the closed forms, any n), none\n"
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
          "  --machine-cores M    the hosts share one machine of M cores (bench/netns_hosts.sh's\n"
          "                       emulated hosts): every rank's per-step, per-message and\n"
          "                       reduction time runs on those M cores, shared\n"
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
          "                       it, network model CM02 without factors; a message that\n"
          "                       reaches a rank while it sends too takes <link>.xchg longer;\n"
          "                       each host's link lets a packet of up to tcp.burst bytes\n"
          "                       cross at tcp.burst_beta while it owes nothing, and owes it\n"
          "                       at its rate after (a shaped link: tc htb); with\n"
          "                       --machine-cores M, every message between hosts also crosses\n"
          "                       a link of M / tcp.cpu bytes a second (the machine's copy path)\n"
          "  --model NAME         SimGrid network model (default CM02; LV08 is SimGrid's\n"
          "                       TCP-fitted default)\n"
          "  --step T, --overhead T   executor time per step, sender time per message\n"
          "  --spin T             with --calib: a wait polls T (COLL_SPIN_US, default 50us),\n"
          "                       then sleeps; its rank runs the calibration's wake later;\n"
          "                       with --machine-cores, the polling holds a core's share for\n"
          "                       T of CPU time (also after a rank's last step, as its next\n"
          "                       call's wait), slowing ranks that work when ranks outnumber\n"
          "                       the cores, and a rank that slept pays the wake only if a\n"
          "                       core idled\n"
          "  --warmup N           N untimed calls of the same before each timed one, each\n"
          "                       followed by a start barrier (an all-reduce of 4 bytes), as\n"
          "                       collbench -w N times: the timed call finds the links'\n"
          "                       debts as those calls left them (default 0: idle links)\n"
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

bool parse_int(const char *s, long lo, long hi, int32_t *out)
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

int parse_args(int argc, char **argv, struct opts *o, int *sg_argc, char **sg_argv)
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
    o->spin_s = 50e-6;
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
        } else if (!strcmp(a, "--price")) {
            NEEDV();
            if (!strcmp(v, "walk"))
                o->price = PRICE_WALK;
            else if (!strcmp(v, "closed"))
                o->price = PRICE_CLOSED;
            else if (!strcmp(v, "none"))
                o->price = PRICE_NONE;
            else
                return usage_error("--price '%s': valid: walk, closed, none", v);
        } else if (!strcmp(a, "--machine-cores")) {
            NEEDV();
            if (!parse_int(v, 1, 1 << 20, &o->machine_cores))
                return usage_error("--machine-cores '%s': a count of 1 or more", v);
        } else if (!strcmp(a, "-c") || !strcmp(a, "--coll")) {
            enum coll_coll c;
            NEEDV();
            /* a send or a receive has no schedule to simulate */
            if (!coll__coll_from_name(v, strlen(v), &c) || coll__colls[c].p2p)
                return usage_error("unknown collective '%s'; valid: allreduce, broadcast, reduce, "
                                   "allgather, reducescatter, alltoall, gather, scatter, barrier",
                                   v);
            o->coll = c;
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
        } else if (!strcmp(a, "--warmup")) {
            NEEDV();
            if (!parse_int(v, 0, 100, &o->warmup))
                return usage_error("--warmup '%s': a count of calls, 0 to 100", v);
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
                   !strcmp(a, "--step") || !strcmp(a, "--overhead") || !strcmp(a, "--spin")) {
            double *dst = a[2] == 'l' ? &o->link_lat : a[2] == 'i' ? &o->intra_lat
                          : !strcmp(a, "--spin") ? &o->spin_s
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
