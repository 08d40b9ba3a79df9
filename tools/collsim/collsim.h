/*
 * collsim.h - what the parts of collsim share: its options, the state of the simulation,
 * the table's row, and the functions each part offers main (collsim.c).
 *
 *   options.c   the command line and its usage text
 *   platform.c  the SimGrid platform: written from the flags, or a file checked first
 *   ranks.c     a rank's schedule run as a SimGrid actor
 *   row.c       one row: every rank's schedule built, run and timed, and the model's price
 *   select.c    which algorithms a row runs: the --algo list and the selector's pick
 *   trace.c     --trace: the rows' steps in COLL_TRACE's format
 */
#ifndef COLLSIM_H
#define COLLSIM_H

/* Beyond the public API, collsim asks the library through one header, api/introspect.h: the
 * schedules' builders, the cost model and the selector's ranking, and the base's helpers
 * (names, sizes, the JSON writer) that come with it. */
#include "api/introspect.h"

#include <simgrid/host.h>
#include <simgrid/link.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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

/* The command line, as options.c reads it. */
struct opts {
    enum coll_coll coll;
    coll_dtype_t dtype;
    int32_t nranks, root;
    int32_t hosts, per_host, cores;
    /* --machine-cores: the hosts are emulated on one machine of this many cores, which
     * every rank's computation shares (0: each host has its own --cores) */
    int32_t machine_cores;
    /* ... and its copy path: every message between hosts crosses one shared link of this
     * many bytes a second, machine_cores / tcp.cpu of the calibration (0: none) */
    double machine_bw;
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
    double spin_s; /* --spin: a wait polls this long, then sleeps (the calibration's wake) */
    /* --warmup: calls of the same before the timed one, each followed by a start barrier (an
     * all-reduce of 4 bytes), as collbench -w times: the links' debts carry over */
    int32_t warmup;
    bool quiet;
    bool exact; /* --exact: the selector's ranking by the schedule walker */
    /* --price: the model(us) column from the schedule walker (its memory and time grow with
     * every rank's steps: 4.5 GB for a 4,096-rank ring), the closed forms, or nothing */
    enum { PRICE_WALK, PRICE_CLOSED, PRICE_NONE } price;
};

/* A rank as ranks.c runs it: its steps, with their flags, and what waits for each. */
enum {
    F_POSTED = 1,
    F_DONE = 2,
    F_FREE = 4, /* a copy onto itself */
    F_WIN = 8,  /* the window passed on to the next message of the link */
    F_XCHG = 16, /* a receive the rank waited on while it sent: pays the link's xchg */
    F_FLOW = 32, /* a send between hosts counted in S.flows until it completes */
};

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
    double wait_since; /* --machine-cores: when its current wait began; < 0 while it works */
    uint64_t nmsgs;
    int32_t *lat_peer; /* streams: the latency from each peer seen so far */
    double *lat_val;
    uint32_t nlat, caplat;
};

/* The run: its options, the model's parameters, the platform, and the ranks of the row
 * being simulated (one process, one simulation at a time). */
struct sim {
    struct opts o;
    struct coll_cost_params p;
    sg_host_t *hosts;
    sg_host_t machine; /* --machine-cores: the host whose cores every rank computes on */
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
    /* a shaped link's burst (cost.h, <link>.burst), per host: the bytes its link let go
     * ahead of its rate and still owes (debt), and when the bytes it passes at its rate are
     * through, as far as it knows (busy; the debt is paid off at the rate from then on) */
    double *debt, *busy;
    /* --machine-cores: the messages between hosts in flight, which share the machine's
     * copy path (its link of machine_bw bytes a second) */
    int32_t flows;
    bool timed; /* the row's timed call runs (not a --warmup call or its barrier) */
    const char *failed; /* first failure, reported once the run ends */
    char errbuf[256];
};

/* One row of the table: an algorithm at a size (row.c). */
struct row {
    size_t bytes, count; /* the size column, the builder's count */
    const struct coll_algo *algo;
    size_t chunk_count;
    double time_s, model_s, wall_s;
    double warmup_s; /* --warmup: the untimed calls' and their barriers' simulated time */
    uint64_t msgs, steps;
    size_t coarsened_from; /* the chunk asked for, where --max-messages raised it */
    const char *why;
};

extern struct sim S;
extern FILE *trace_f; /* --trace, open while the rows run */

/* options.c */
int usage_error(const char *fmt, ...) COLL_PRINTF(1, 2);
void list_algos(FILE *f, enum coll_coll c);
bool parse_int(const char *s, long lo, long hi, int32_t *out);
int parse_args(int argc, char **argv, struct opts *o, int *sg_argc, char **sg_argv);

/* platform.c */
int write_platform(const struct opts *o, const char *path, int32_t *nodes_p);
int check_platform(const char *path);
int host_cmp(const void *x, const void *y);

/* ranks.c */
int32_t host_of(int32_t rank);
sg_host_t rank_host(int32_t r);
void fail_run(const char *fmt, ...) COLL_PRINTF(1, 2);
void rank_main(int argc, char **argv);
void srank_free(struct srank *R);
int srank_load(struct srank *R, const struct coll_schedule *s, uint32_t *peer_last,
               bool trace);

/* row.c */
enum coll_link link_of(void *arg, int32_t src, int32_t dst);
int run_row(struct row *w, uint32_t *peer_last, int32_t *hostmap);

/* select.c */
int parse_algos(const struct opts *o, const struct coll_algo **algos, int *nalgos_p);
int select_pick(struct row *w, size_t bytes, int32_t *hostmap);
struct coll_cost_query;
int select_first(const struct coll_cost_query *q, const char *what,
                 const struct coll_algo **algo_p, size_t *chunk_count_p);

/* trace.c */
void trace_header(int32_t n);
void trace_row(const struct row *w, int32_t n);
void trace_end(int32_t n);

#endif
