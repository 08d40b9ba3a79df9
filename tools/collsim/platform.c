/*
 * platform.c - the SimGrid platform collsim runs on: written from the flags, or a file
 * checked before SimGrid reads it; its hosts in name order.
 */
#include "collsim.h"

#include <simgrid/engine.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
int write_platform(const struct opts *o, const char *path, int32_t *nodes_p)
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
            *nodes_p - 1, CPU_SPEED,
            o->machine_cores > o->cores ? o->machine_cores : o->cores, o->link_bw, o->link_lat);
    if (!ports && o->streams) /* a rank per host: the loopback is its timer (rank_main) */
        fprintf(f, " loopback_bw=\"%.17gBps\" loopback_lat=\"0s\"", TIMER_BPS);
    else if (!ports)
        fprintf(f, " loopback_bw=\"%.17gBps\" loopback_lat=\"%.17gs\"", o->intra_bw,
                o->intra_lat);
    if (topo[0])
        fprintf(f, " topology=\"%s\" topo_parameters=\"%s\"", topo, params);
    else if (o->machine_bw > 0) /* the hosts' bytes share the one machine's cores */
        fprintf(f, " bb_bw=\"%.17gBps\" bb_lat=\"0s\" bb_sharing_policy=\"SHARED\"",
                o->machine_bw);
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

/* A platform file SimGrid cannot read ends the process (its parser's message names the
 * line): load it first in a child, so that the answer is a usage error, not a crash. */
int check_platform(const char *path)
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

int host_cmp(const void *x, const void *y)
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
