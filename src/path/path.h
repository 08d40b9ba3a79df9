/*
 * path.h - the ways a call can run, as peers behind one small interface, and the one
 * chooser that picks among them.
 *
 *   stream (stream.c)  a stream-ordered call (coll_*_stream): queued on its CUDA stream,
 *                      the data moved through page-locked staging by host calls, or
 *                      between the ranks of one host through CUDA IPC (ipc.c)
 *   quant  (qallreduce.c)  a blocking all-reduce outside groups under COLL_QUANT: encoded
 *                      by a codec, exchanged by a sequence of the comm's collectives
 *   flat   (flat.c)    one comm-wide shared segment: a small call is a cache line each way,
 *                      a large all-reduce, broadcast or reduce goes through it in pieces
 *   sched  (choose.c)  the general path: a schedule built by src/algo, run by the executor
 *                      over the transports
 *
 * Every collective call, blocking or not, grouped or not, on the host or on a stream, asks
 * coll__choose which path runs it. The answer depends only on the comm's settings and the
 * call's arguments (its form among them: stream calls are the stream path's, and the quant
 * path takes the blocking form alone, as COLL_QUANT always has), so every rank of a comm
 * answers alike, and a blocking call on one rank meets the non-blocking form of the same
 * call on another wherever no COLL_QUANT codec tells them apart. A path with a run hook
 * (flat) runs a call to completion on whichever thread drives the comm (the caller of a
 * blocking call or of coll_wait, else the comm's progress thread), in issue order with the
 * comm's other ops; the sched path's ops are advanced step by step by the executor; a path with a submit hook
 * (stream, quant) takes the call over from the API and makes it of host calls, which the API
 * hands it (struct coll_path_host), each chosen again like any call.
 *
 * A path's own state on a comm is its slot of comm->path_state (COLL_PATH_STATE_*), made by
 * coll__path_comm_init and freed by coll__path_comm_fini: struct coll_comm names no path's
 * private state but the flat path's (still its own fields there).
 */
#ifndef COLL_PATH_H
#define COLL_PATH_H

#include "../core/exec.h"

struct coll_choice;
struct coll_cost_params;

struct coll_path {
    const char *name; /* "flat", "sched": also what COLL_ALGO and traces call it */
    /* Would this path run call c? The same answer on every rank. why, when not NULL, gets
     * the reason in words (for COLL_DEBUG and collbench --explain). */
    bool (*takes)(struct coll_comm *comm, const struct coll_call *c, char *why, size_t n);
    /* Run c to completion on this thread, the engine lock not held; NULL for the sched
     * path, whose ops the executor advances. */
    coll_status_t (*run)(struct coll_comm *comm, const struct coll_call *c);
    /* Take c over from the API, which issues nothing for it: queue it on its stream, or run
     * it as a sequence of the comm's collectives (by comm->path_host); NULL for the paths
     * whose calls the API issues as ops (flat, sched). */
    coll_status_t (*submit)(struct coll_comm *comm, const struct coll_call *c);
    /* The path's own row of the cost model for c, in seconds (< 0: none), given the rows of
     * the host paths for c as a host call (ch's flat_seconds, sched_seconds); NULL for flat
     * and sched, which the chooser prices itself. */
    double (*price)(struct coll_comm *comm, const struct coll_call *c,
                    const struct coll_cost_params *p, const struct coll_choice *ch);
};

COLL_INTERNAL extern const struct coll_path coll__path_stream;
COLL_INTERNAL extern const struct coll_path coll__path_quant;
COLL_INTERNAL extern const struct coll_path coll__path_flat;
COLL_INTERNAL extern const struct coll_path coll__path_sched;

/* The slots of comm->path_state: each path's own, made and freed through the hooks below. */
enum { COLL_PATH_STATE_STREAM, COLL_PATH_STATE_QUANT, COLL_PATH_NSTATES };
_Static_assert(COLL_PATH_NSTATES <= COLL_PATH_STATES, "core/internal.h: COLL_PATH_STATES");

/*
 * The API's calls that the stream and quant paths are made of. A path sits below the API
 * (tools/layers.py), so the API hands these down at coll__path_comm_init (src/api/paths.c)
 * rather than the paths calling up: each is the public call, arguments checked again, its
 * failures on the comm as any call's.
 */
struct coll_path_host {
    /* c as its public call: blocking (req_p NULL) or a request; recorded in the calling
     * thread's group when one is open. c->coll and its arguments as coll_call has them
     * (COLL_COLL_SENDRECV with p2p COLL_STEP_SEND or COLL_STEP_RECV and peer). */
    coll_status_t (*call)(const struct coll_call *c, coll_request_t **req_p);
    coll_status_t (*alltoallv)(const void *sendbuf, const size_t *sendcounts,
                               const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                               const size_t *rdispls, coll_dtype_t dtype, coll_comm_t *comm);
    coll_status_t (*group_start)(void);
    coll_status_t (*group_end)(void);
    coll_status_t (*wait)(coll_request_t *req);
    bool (*group_active)(void); /* this thread has a group open */
    coll_status_t (*abort)(coll_comm_t *comm);
};

/* What runs a call: the path, and asked in full, the sched path's algorithm and chunk as the
 * selector picks them (also where the flat path takes the call: what the general path would
 * run) and both paths' prices by the cost model, so that they can be read side by side. */
struct coll_choice {
    const struct coll_path *path;
    const struct coll_algo *algo; /* the sched path's pick; NULL unless asked */
    size_t chunk_count;           /* its elements per chunk, when algo is set */
    double sched_seconds;         /* the model's price of algo; < 0: none */
    double flat_seconds;          /* the flat path's row for the call (coll__cost_predict_flat)
                                   * on a one-host comm; < 0: not a call that row prices */
    double path_seconds;          /* the stream or quant path's own row, where it takes the
                                   * call (coll__cost_predict_stream, _quant); < 0: none */
    char why[512];
    size_t reason_at;             /* asked in full: where, in why, the chosen path's own reason
                                   * (and the prices) begins; strlen(why) when it gave none */
};

/* The one chooser: the path for c, and with full also the sched path's algorithm and chunk
 * (as the plan cache would pick them), both paths' prices and the reasons. The API and
 * collbench ask it; without full it prices nothing. Which path runs a call stays the paths'
 * rules (flat first where it takes a call: path.h's "every rank answers alike"); the prices
 * are for reading, measured against the rules in docs/performance.md. */
COLL_INTERNAL coll_status_t coll__choose(struct coll_comm *comm, const struct coll_call *c,
                                         bool full, struct coll_choice *out);

/* select.c: load the cost model's parameters (COLL_CALIB_FILE) and check COLL_ALGO; free. */
COLL_INTERNAL coll_status_t coll__select_init(struct coll_comm *comm);
COLL_INTERNAL void coll__select_fini(struct coll_comm *comm);
/* Choose the algorithm (and, unless COLL_CHUNK_BYTES is set, the chunk size: args is
 * updated) for args; why receives the reason and the alternatives' estimates. */
COLL_INTERNAL coll_status_t coll__select(struct coll_comm *comm, struct coll_algo_args *args,
                                         const struct coll_algo **algo_p, char *why,
                                         size_t whylen);

/* coll__select with the model's price of what it picks (*seconds_p; -1 when the model
 * cannot price it, or the comm has one rank). */
COLL_INTERNAL coll_status_t coll__select_priced(struct coll_comm *comm,
                                                struct coll_algo_args *a,
                                                const struct coll_algo **algo_p,
                                                double *seconds_p, char *why, size_t whylen);

/* The flat path's sizes on comm (its COLL_SHM_FLAT_BYTES and, where the sliced protocol is
 * on, COLL_SHM_SLICED_BYTES), for coll__cost_predict_flat. */
struct coll_cost_flat_sizes;
COLL_INTERNAL void coll__flat_sizes(struct coll_comm *comm, struct coll_cost_flat_sizes *s);

/* flat.c: measure the flat path's row of the cost model (struct coll_flat_cost) on comm:
 * collective, every rank of a comm of two or more ranks on one host calls it; it runs
 * blocking all-reduces of 8 bytes, COLL_SHM_FLAT_BYTES and four pieces on the flat path
 * (about 10-100 ms) and fits p->flat to them through coll__cost_predict_flat, every rank
 * the same values (the slowest rank's times). *fitted_p: COLL_FLAT_FIT_* bits of what was
 * measured; where the flat path does not take a call of that size on this comm (off,
 * another host, COLL_ALGO), that parameter keeps its value. */
enum {
    COLL_FLAT_FIT_ALPHA = 1,  /* flat.alpha (one rank per core), or */
    COLL_FLAT_FIT_YIELD = 2,  /* flat.yield (more ranks than cores: alpha kept) */
    COLL_FLAT_FIT_BETA = 4,   /* flat.beta */
    COLL_FLAT_FIT_SLICED = 8, /* flat.sliced */
};
struct coll_cost_params;
COLL_INTERNAL coll_status_t coll__flat_calibrate(struct coll_comm *comm,
                                                 struct coll_cost_params *p, unsigned *fitted_p);

/* The sched path's view of a call (what the builders and the plan cache get). */
COLL_INTERNAL void coll__call_args(const struct coll_call *c, struct coll_algo_args *a);

/* At the end of comm init: each path that needs set-up (the flat path's segment, the
 * stream and quant paths' slots); host is what those run their calls with, kept for the
 * comm's life. */
COLL_INTERNAL coll_status_t coll__path_comm_init(struct coll_comm *comm,
                                                 const struct coll_path_host *host);

/* First thing when a comm goes (destroyed, or its creation failed), while it is still
 * live: each path's own threads and slots (the stream worker runs what is queued, at once
 * with an error on an aborted comm, and stops). Idempotent. */
COLL_INTERNAL void coll__path_comm_fini(struct coll_comm *comm);

/* At coll_comm_destroy, before anything is torn down: what the paths still have to say about
 * the calls made (a disagreement found late); the comm's first failure otherwise. */
COLL_INTERNAL coll_status_t coll__path_comm_end(struct coll_comm *comm);

/* Tell the flat path that this comm has non-blocking ops it has not seen complete; the next
 * blocking call drains them first (the API's thread only). */
COLL_INTERNAL void coll__path_note_request(struct coll_comm *comm);

/* A blocking call on a path with a run hook, run at once on the caller's thread when no op
 * of the comm is pending (else it queues like any op). */
COLL_INTERNAL coll_status_t coll__path_run_now(struct coll_comm *comm,
                                               const struct coll_path *path,
                                               const struct coll_call *c);

#endif /* COLL_PATH_H */
