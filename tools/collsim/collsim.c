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
 *
 * This file is main: the model's figures, the platform loaded, the rows run and printed;
 * collsim.h lists the other parts.
 */
#include "collsim.h"

#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/link.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sim S;

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
    const struct coll_coll_desc *d;
    bool data, per_rank;

    sg_argv = calloc((size_t)argc + 8, sizeof(char *));
    if (!sg_argv)
        return EXIT_SIMFAIL;
    sg_argv[0] = argv[0];
    if ((rc = parse_args(argc, argv, o, &sg_argc, sg_argv)))
        return rc;
    esz = coll__dtype_size(o->dtype);
    d = &coll__colls[o->coll];
    /* the size is a buffer of n blocks (count / n per rank), or of one; none for a barrier */
    data = coll__desc_moves_data(d);
    per_rank = d->send_blocks == COLL_BLOCKS_N || d->recv_blocks == COLL_BLOCKS_N;

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
        if (o->machine_cores && t->cpu > 0)
            o->machine_bw = o->machine_cores / t->cpu;
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
    if (o->machine_cores && o->platform)
        return usage_error("--machine-cores with --platform: the platform file says where the "
                           "cores are");
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
                           o->nranks, COLLSIM_MAX_RANKS, coll__coll_name(o->coll));
    if ((rc = parse_algos(o, algos, &nalgos)))
        return rc;

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
        /* the fabric's first host holds the machine's cores (write_platform) */
        S.machine = o->machine_cores ? sg_host_by_name("h0") : NULL;
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
    if (o->calib && !o->platform && o->hosts > 1 && S.p.link[COLL_LINK_TCP].burst > 0) {
        S.debt = calloc((size_t)o->hosts, sizeof(double));
        S.busy = calloc((size_t)o->hosts, sizeof(double));
        if (!S.debt || !S.busy)
            return fprintf(stderr, "collsim: out of memory for %d hosts\n", o->hosts),
                   EXIT_SIMFAIL;
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
                      "  \"platform\": ",
                coll__coll_name(o->coll), o->nranks, o->hosts, o->per_host, o->cores);
        coll__json_str(json, o->platform ? o->platform : o->fabric ? o->fabric : "switch");
        fprintf(json, ",\n  \"network_model\": \"%s\",\n  \"link_Bps\": %.17g,\n"
                      "  \"link_latency_s\": %.17g,\n  \"intra_Bps\": %.17g,\n"
                      "  \"intra_latency_s\": %.17g,\n  \"intra_model\": \"%s\",\n"
                      "  \"streams\": %s,\n  \"price\": \"%s\",\n"
                      "  \"max_messages\": %" PRIu64 ",\n  \"warmup\": %d,\n"
                      "  \"dtype\": \"%s\",\n  \"rows\": [",
                o->model ? o->model : "CM02", o->link_bw, o->link_lat,
                o->intra_bw, o->intra_lat, o->ports ? "ports" : "loopback",
                o->streams ? "true" : "false",
                o->price == PRICE_WALK ? "walk" : o->price == PRICE_CLOSED ? "closed" : "none",
                o->max_msgs, o->warmup,
                coll__dtype_name(o->dtype));
    }

    if (!o->quiet) {
        printf("# collsim %s: %d ranks on %d hosts x %d per host (%d cores each); ",
               coll__coll_name(o->coll), o->nranks, o->hosts, o->per_host, o->cores);
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
        if (o->warmup)
            printf("# --warmup %d: each timed call after %d untimed and a start barrier after "
                   "each, as collbench -w %d\n",
                   o->warmup, o->warmup, o->warmup);
        printf("#       size         count      type   redop    root     time   algbw   busbw"
               " #wrong  algorithm    chunk  model(us)     msgs  sim(s)\n");
        printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
               "                        (B)\n");
        fflush(stdout);
    }

    rc = 0;
    for (size_t bytes = o->minb;; ) {
        size_t count = bytes / esz, per = per_rank ? count / (size_t)o->nranks : count;
        size_t shown = data ? bytes : 0;
        if (!data)
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
                if ((rc = select_pick(&w, bytes, hostmap)))
                    goto out;
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
                           shown, w.algo->name, coll__coll_name(o->coll), per, o->nranks, o->hosts);
                if (nalgos == 1 && algos[k]) {
                    fprintf(stderr, "collsim: %s cannot run %s of %zu elements on %d ranks "
                                    "(%d hosts)\n", w.algo->name, coll__coll_name(o->coll), per,
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
            databytes = per_rank || !data ? per * esz * (size_t)o->nranks : per * esz;
            algbw = w.time_s > 0 ? (double)databytes / w.time_s * 1e-9 : 0;
            busbw = algbw * coll__bus_factor(d, o->nranks);
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
                       shown, data ? count : 0, coll__dtype_name(o->dtype),
                       "sum", o->root, w.time_s * 1e6, algbw, busbw, "N/A", w.algo->name,
                       w.chunk_count * esz, model, w.msgs, w.wall_s, coarse);
                fflush(stdout);
            }
            if (json) {
                fprintf(json, "%s\n    {\"size\": %zu, \"count\": %zu, \"algo\": \"%s\", "
                              "\"chunk_bytes\": %zu, \"picked_by\": \"%s\", \"time_us\": %.6g, "
                              "\"algbw_GBps\": %.6g, \"busbw_GBps\": %.6g, \"model_us\": %.6g, "
                              "\"messages\": %" PRIu64 ", \"steps\": %" PRIu64
                              ", \"sim_wall_s\": %.4g, \"coarsened_from\": %zu, "
                              "\"warmup_us\": %.6g}",
                        nrows > 1 || nskipped ? "," : "", shown, per, w.algo->name,
                        w.chunk_count * esz,
                        !algos[k] ? "selector" : "named", w.time_s * 1e6, algbw, busbw,
                        isfinite(w.model_s) ? w.model_s * 1e6 : -1.0, w.msgs, w.steps, w.wall_s,
                        w.coarsened_from, w.warmup_s * 1e6);
                fflush(json);
            }
        }
    next:
        if (!data || bytes >= o->maxb)
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
    free(S.debt);
    free(S.busy);
    free(sg_argv);
    return rc;
}
