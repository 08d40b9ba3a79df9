/*
 * collviz.h - what collviz's files share. collviz draws a collective's schedule, round by round,
 * for teaching (tree vs ring).
 *
 *   collviz allreduce --algo ring -n 8 --bytes 1M          the rounds in the terminal
 *   collviz broadcast --algo binomial -n 5 --html b.html   an animated page
 *   collviz allreduce -n 8 --compare ring,tree --bytes 8:64M [--plot t.png]
 *
 * The schedules are the executor's: algo->build for every rank, never a re-implementation.
 * collviz only reads them, in three passes:
 *
 *   rounds    every step gets a round by dependency depth across ranks: a SEND is one round
 *             after the latest step it waits for; a RECV falls in the round of its matching
 *             SEND (or later, if one of its own dependencies is later); REDUCE and COPY fall
 *             in the round of their latest dependency (round 0: local work before any
 *             message). So one round is one message hop, and a chunked pipeline shows as
 *             overlapping hops.
 *   data      every rank starts with the value r+1 in every element of its send buffer; the
 *             steps are applied round by round and each element carries the set of ranks
 *             whose values were summed into it (a 64-bit mask) and which send-buffer element
 *             it came from. That is enough to print "1+2+3" per block and to check at the
 *             end that every rank holds what the collective promises.
 *   prices    with the cost model (src/algo/cost.h), each round is priced in lockstep
 *             (alpha + bytes beta per message a rank's port carries, gamma per reduced
 *             byte) and the whole schedule by coll__cost_predict, which overlaps rounds.
 *
 * Files (tools/collviz/): main.c arguments and main; sched.c the schedule viewer's model
 * (building or loading the schedules, matching, rounds, data); term.c the terminal output;
 * html.c the animated page; price.c prices and --compare; trace.c the trace viewer
 * (COLL_TRACE's JSON, measured times beside the predicted ones).
 */
#ifndef COLLVIZ_H
#define COLLVIZ_H

/* Beyond the public API, collviz asks the library through one header, api/introspect.h: the
 * schedules, the cost model that prices them, and the base's helpers (sizes, names, the
 * JSON writer) that come with it. */
#include "api/introspect.h"

/* The cost model is left out with -DCOLLVIZ_NO_COST (no prices, no --compare). */
#ifdef COLLVIZ_NO_COST
#define COLLVIZ_HAVE_COST 0
#else
#define COLLVIZ_HAVE_COST 1
#endif

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define EXIT_USAGE 2
#define MAX_RANKS 64
#define NONE UINT32_MAX
#define DEFAULT_CHUNK_BYTES (128u << 10) /* COLL_CHUNK_BYTES' default */
#define MAX_SIM_STEPS 2000000u           /* beyond this, no data simulation */
#define MAX_TRACE_ARGS 256

struct opts {
    enum coll_coll coll;
    const struct coll_algo *algo;
    int32_t n, root;
    size_t bytes, bytes_hi; /* bytes_hi: --compare range end (0: not a range) */
    coll_dtype_t dtype;
    size_t chunk_bytes;
    bool chunk_given;
    int width;
    int max_rounds;
    const char *html, *compare, *plot, *trace, *save_trace, *cost_file;
    bool no_cost, no_data;
    const char *traces[MAX_TRACE_ARGS]; /* --trace FILE... (trace = traces[0]) */
    int ntraces;
    long op_seq; /* --op: which op of a COLL_TRACE trace */
    int link;    /* --link: the link class every pair is priced on (enum coll_link) */
    int cores;   /* --cores: the host's cores, 0: one per rank (struct coll_cost_params) */
    bool op_given;
};

struct viz {
    struct coll_algo_args args; /* rank field unused */
    const char *algo_name, *algo_desc;
    int32_t n;
    struct coll_schedule *s; /* n schedules */
    uint32_t *base;          /* global id of rank r's step i: base[r] + i */
    uint32_t total;          /* steps of all ranks */
    uint32_t *match;         /* per global RECV: the global id of its SEND (and back) */
    uint32_t *round;         /* per global step */
    uint32_t nrounds;        /* rounds 0..nrounds-1 */
};

#define SEG_EMPTY 1u /* never written (garbage in a real run) */
#define SEG_DUP 2u   /* some rank was summed in twice */
#define SEG_MIXED 4u /* elements of different positions were combined */
struct seg {
    size_t off, len;
    uint64_t mask; /* ranks summed in */
    size_t origin; /* send-buffer element of the first element */
    uint32_t flags;
};
struct segs {
    struct seg *a;
    size_t n, cap;
};

struct data {
    struct segs (*buf)[COLL_NUM_BUFS]; /* per rank */
    struct segs *msg;                  /* per global SEND: what it carried */
    struct segs tmp_a, tmp_b, tmp_c;
};

struct blocks {
    size_t *cut; /* cut[0] = 0 < ... < cut[n] = RECV's size */
    size_t n;
};

struct measured {
    uint64_t seq;
    double *t0, *t1; /* per global step: us from the op's first start on any rank; NAN absent */
    double total;    /* us: first start to last end, over all ranks */
    size_t flows_s, flows_f;
    bool multi_host;
    char status[40];
};

struct render {
    const struct opts *o;
    struct viz *v;
    struct data *d; /* NULL: no data table */
    struct blocks bl;
    int cellw;                /* characters per cell */
    size_t shown;             /* blocks that fit */
    uint32_t *order;          /* global steps sorted by round */
    uint32_t *round_start;    /* nrounds + 1 */
    double *round_cost;       /* per round, lockstep estimate; NULL without the cost model */
    double predicted;         /* coll__cost_predict; < 0 unknown */
    char params[200];         /* the parameters the prices use, as text; "" without */
    char choice[400];         /* the selector's pick and the flat path's price; "" without */
    bool wrong;               /* the data check failed */
    const struct measured *m; /* a COLL_TRACE run's times, or NULL */
};

struct round_sum {
    uint32_t msgs, reduces, copies;
    double bytes;
};

#define TRACE_MAGIC "# coll-trace 1"

/* main.c: arguments and main */
int usage_error(const char *fmt, ...);
void list_algos(FILE *f, enum coll_coll coll);
int parse_coll(const char *name, enum coll_coll *c_p);
int parse_dtype(const char *name, coll_dtype_t *dt_p);

/* sched.c: the schedules (built, or loaded from a coll trace), matched, in rounds, and the data
 * they move */
void viz_free(struct viz *v);
const char *last_error(void);
int viz_build(struct viz *v, const struct coll_algo *algo);
int viz_match(struct viz *v);
int32_t rank_of(const struct viz *v, uint32_t g);
const struct coll_step *step_of(const struct viz *v, uint32_t g);
int viz_rounds(struct viz *v);
void data_free(struct data *d, const struct viz *v);
bool data_init(struct data *d, const struct viz *v);
bool data_step(struct data *d, const struct viz *v, uint32_t g);
bool expected(const struct viz *v, int32_t r, size_t i, uint64_t *mask_p, size_t *origin_p);
bool data_check(const struct data *d, const struct viz *v, char *msg, size_t len);
void cell_text(const struct segs *s, size_t off, size_t count, int w, char *buf, size_t len);
int save_trace(const struct viz *v, const char *path);
int load_trace(struct viz *v, const char *path);

/* term.c: the schedule viewer in the terminal */
void human_bytes(double b, char *buf, size_t len);
void human_time(double s, char *buf, size_t len);
bool blocks_find(struct blocks *bl, const struct viz *v);
void slice_text(const struct coll_slice *s, char *buf, size_t len);
bool order_steps(struct render *rd);
struct round_sum round_summary(const struct render *rd, uint32_t k);
bool apply_round(struct render *rd, uint32_t k);
void print_header(const struct render *rd, FILE *f);
void print_rounds(struct render *rd, FILE *f);

/* html.c: the animated page (--html) and its JSON */
int write_html(struct render *rd, const char *path);

/* price.c: prices and --compare */
bool price_rounds(struct render *rd, const struct coll_cost_params *cp);
void params_text(const struct coll_cost_params *cp, enum coll_link link, coll_dtype_t dt,
                 bool calibrated, char *buf, size_t n);
int load_params(const struct opts *o, struct coll_cost_params *cp);
void choice_text(const struct coll_cost_params *cp, const struct opts *o, size_t bytes, char *buf,
                 size_t n);
int run_compare(const struct opts *o);

/* trace.c: the trace viewer (COLL_TRACE Chrome trace JSON) */
bool looks_json(const char *path);
int load_json_traces(struct viz *v, struct opts *o, struct measured *m);
void measured_free(struct measured *m);
void print_measured(const struct render *rd, const struct measured *m, FILE *f);

#endif /* COLLVIZ_H */
