/*
 * introspect.h - what the tools (collbench, collviz, collsim) may ask of the library beyond
 * coll.h: how a call would run and what the model says it
 * costs, the COLL_* settings, what a communicator is made of, and the few hooks that
 * --calibrate needs. Everything takes the opaque coll_comm_t and answers in plain structs;
 * the communicator's layout stays in core/internal.h, which no tool includes.
 *
 *   struct coll_ix_call c = {.coll = COLL_COLL_ALLREDUCE, .count = 1 << 20,
 *                            .dtype = COLL_FLOAT32, .op = COLL_SUM};
 *   struct coll_ix_pick pick;
 *   coll__ix_choose(comm, &c, &pick);   // path "sched", algo "ring", chunk, why
 *
 * The answers come from the library's own deciders, never from a copy of them: the pick is
 * coll__choose's (src/path/path.h, asked in full), prices are the cost model's
 * (src/algo/cost.h), settings the table of src/base/param.c. The cost model's header comes
 * with this one: its parameters, links and results are plain structs and pure functions,
 * which explaining and calibrating are about; and with it the schedules' (algo/schedule.h:
 * the builders and their steps), which collviz draws and collsim runs, and the base's
 * helpers (base/base.h: names, sizes, parsing). The base's JSON writer comes with it too
 * (base/json.h), so that what one tool writes another reads back. A tool includes this
 * header and coll.h, nothing else of src/; tools/layers.py --check holds the tools' objects
 * to the symbols these headers declare.
 *
 * Divisions: 1 how a call runs, 2 settings, 3 the communicator, 4 --calibrate, 5 device
 * memory and launchers.
 */
#ifndef COLL_INTROSPECT_H
#define COLL_INTROSPECT_H

#include "../algo/cost.h"
#include "../base/base.h"
#include "../base/json.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- 1 how a call runs ------------------------------------------------------------------ */

/* A call to explain, as its caller would make it. */
struct coll_ix_call {
    enum coll_coll coll;
    size_t count; /* the count passed to the call (all-gather, all-to-all: per rank) */
    coll_dtype_t dtype;
    coll_op_t op;
    int root;
    /* Buffers from cudaMalloc: a stream-ordered call (the stream path's). */
    bool device;
    /* Ranks on paper: 0 (or the comm's size) explains this comm's own calls; another count
     * asks the general path's selector what it would pick for that many ranks on one host,
     * with this comm's settings and model. */
    int nranks;
    /* With ranks on paper: rank r's host (NULL: one host), as coll_ix_model's hosts, so
     * that the selector picks on the machine the ranking prices. */
    const int32_t *hosts;
    int32_t nhosts;
};

/* How a call runs. */
struct coll_ix_pick {
    const char *path;   /* "stream", "quant", "flat", "sched" */
    const char *algo;   /* what runs it: the algorithm on the sched path, the path's name
                         * where a path runs calls by itself, "p2p" for send/recv */
    size_t chunk_bytes; /* the schedule's pipelining chunk; 0 without a schedule */
    char why[512];      /* the chosen path's reason ("cost model: est ...", "forced by ...") */
    double flat_s;      /* the cost model's flat row for the call (a flat path's price); NAN
                         * where the flat path cannot run it */
    double path_s;      /* the stream or quant path's own row where it takes the call; NAN
                         * otherwise */
};

/* The pick for c on comm: coll__choose asked in full (with the selector alone where the
 * chooser cannot see the call: device buffers, ranks on paper). An error status (message
 * in coll_last_error(comm)) when the selector refuses the call. */
COLL_INTERNAL coll_status_t coll__ix_choose(coll_comm_t *comm, const struct coll_ix_call *c,
                                            struct coll_ix_pick *out);

/* The machine the model prices on: its parameters, which link each pair of ranks uses, and
 * where the ranks are (hosts NULL: one host). */
struct coll_ix_model {
    const struct coll_cost_params *params;
    struct coll_cost_links links;
    const int32_t *hosts;
    int32_t nhosts;
};

#define COLL_IX_RANKED_MAX 32
/* What the model says of a call. */
struct coll_ix_price {
    double est_s; /* the pick's predicted time (for the flat path, its row's); NAN when it
                   * cannot be priced (one rank, send/recv) */
    struct coll_cost_result ranked[COLL_IX_RANKED_MAX]; /* every algorithm, cheapest first */
    size_t nranked;
};

/* The model's price of pick (from coll__ix_choose for c) and its ranking of every algorithm
 * that can run c, on machine m, at the chunk sizes the selector tries (COLL_CHUNK_BYTES
 * alone when the comm was given it), priced as the selector prices (closed forms, or the
 * schedule walker with COLL_SELECT=exact): its first row is the selector's pick unless a
 * rule overrode the model (COLL_ALGO, COLL_SELECT=threshold, the flat path). Nothing is ranked for send/recv or one rank. An error
 * status with the model's message (coll_last_error(NULL)) when it cannot rank c. */
COLL_INTERNAL coll_status_t coll__ix_price(coll_comm_t *comm, const struct coll_ix_call *c,
                                           const struct coll_ix_pick *pick,
                                           const struct coll_ix_model *m,
                                           struct coll_ix_price *out);

/* ---- 2 settings ------------------------------------------------------------------------- */

/* One COLL_* setting of the table in src/base/param.c. */
struct coll_ix_param {
    const char *name;   /* "COLL_TIMEOUT_MS" */
    const char *defval; /* its default, as text ("" for none) */
    const char *help;
    const char *env; /* as this process's environment has it now; NULL when unset */
    /* As the comm read it at init ("" without a comm, or for a setting read elsewhere, such
     * as logging's). */
    char value[520];
};

/* Setting i (0 ..) into *out; false past the last. comm may be NULL. */
COLL_INTERNAL bool coll__ix_param(const coll_comm_t *comm, size_t i, struct coll_ix_param *out);

/* ---- 3 the communicator ----------------------------------------------------------------- */

struct coll_ix_peer {
    int32_t host; /* 0 .. nhosts - 1, numbered by their lowest rank */
    int32_t pid;
    char hostname[COLL_HOSTNAME_MAX];
    const char *transport; /* how this rank reaches it: "shm", "tcp", ...; "self"; "none"
                            * before the first connection to it */
};

struct coll_ix_comm {
    int rank, nranks;
    int nhosts;
    char transports[128]; /* every transport this rank uses, "shm, tcp" */
    /* The flat path: 1 on, -1 off, 0 not decided yet (at the first call that could use it). */
    int flat;
    char select[16];     /* COLL_SELECT as the comm read it */
    char algo[256];      /* COLL_ALGO as the comm read it */
    int64_t chunk_bytes; /* COLL_CHUNK_BYTES ... */
    bool chunk_forced;   /* ... given in the environment */
    /* The calibration file its model was read from; "": the built-in defaults. */
    char calib_file[600];
    /* Its model: the parameters, the links as its transports connect the ranks, the hosts
     * when more than one (links and hosts point into the comm: valid while it is). */
    struct coll_ix_model model;
    struct coll_cost_params params; /* what model.params points at */
    struct coll_ix_peer *peers;     /* [nranks] */
};

/* What comm is made of, into *out (free it with coll__ix_comm_free). */
COLL_INTERNAL coll_status_t coll__ix_comm(coll_comm_t *comm, struct coll_ix_comm *out);
COLL_INTERNAL void coll__ix_comm_free(struct coll_ix_comm *d);

/* This host's cores, NUMA nodes, NICs and GPUs, as `collbench --topo` prints them
 * (COLL_TOPO=sysfs: without hwloc). */
COLL_INTERNAL void coll__ix_topo_print(FILE *f);

/* ---- 4 --calibrate ---------------------------------------------------------------------- */

/* Where the selector reads its calibration: named when not empty (COLL_CALIB_FILE), else
 * $XDG_CACHE_HOME/coll/calib.txt, else ~/.cache/coll/calib.txt. false when there is no such
 * place (or it does not fit n). */
COLL_INTERNAL bool coll__ix_calib_path(const char *named, char *buf, size_t n);

/* The flat path's row of the cost model measured on comm (src/path/path.h,
 * coll__flat_calibrate): every rank calls it; *fitted_p gets COLL_IX_FLAT_FIT_* bits of the
 * parameters it measured (the others keep their values in *p). */
enum {
    COLL_IX_FLAT_FIT_ALPHA = 1,
    COLL_IX_FLAT_FIT_YIELD = 2,
    COLL_IX_FLAT_FIT_BETA = 4,
    COLL_IX_FLAT_FIT_SLICED = 8,
};
COLL_INTERNAL coll_status_t coll__ix_calibrate_flat(coll_comm_t *comm, struct coll_cost_params *p,
                                                    unsigned *fitted_p);

/* The host reduction every path uses: dst = a op b, count elements of dt. */
COLL_INTERNAL void coll__ix_reduce(void *dst, const void *a, const void *b, size_t count,
                                   coll_dtype_t dt, coll_op_t op);

/* For a probe: comm's calls run as if COLL_ALGO were algo and COLL_CHUNK_BYTES chunk_bytes,
 * until coll__ix_unforce gives back what *was holds. Only between calls, on every rank. */
struct coll_ix_forced {
    char algo[256];
    int64_t chunk_bytes;
};
COLL_INTERNAL void coll__ix_force(coll_comm_t *comm, const char *algo, int64_t chunk_bytes,
                                  struct coll_ix_forced *was);
COLL_INTERNAL void coll__ix_unforce(coll_comm_t *comm, const struct coll_ix_forced *was);

/* ---- 5 device memory and launchers ------------------------------------------------------ */

/* The CUDA runtime coll loaded (dlopen, COLL_CUDA_LIBRARY honoured: src/cuda/cuda.c), for a
 * tool that must use the same runtime and device as the library. Return values are
 * cudaError_t; kinds and flags are the runtime's numbers. */
struct coll_ix_cuda {
    int (*GetDeviceCount)(int *n);
    int (*SetDevice)(int dev);
    int (*Malloc)(void **p, size_t bytes);
    int (*Free)(void *p);
    int (*Memcpy)(void *dst, const void *src, size_t bytes, int kind);
    int (*Memset)(void *p, int value, size_t bytes);
    int (*StreamCreateWithFlags)(void **stream_p, unsigned int flags);
    int (*StreamSynchronize)(void *stream);
    int (*StreamDestroy)(void *stream);
};
/* The runtime, or NULL with the reason in *why_p when there is no usable runtime and device. */
COLL_INTERNAL const struct coll_ix_cuda *coll__ix_cuda(const char **why_p);
/* "cudaErrorX: text" for a runtime's status. */
COLL_INTERNAL void coll__ix_cuda_error_text(int err, char *buf, size_t n);

/* Is this process one rank of a launcher's job (collrun, torchrun, mpirun, srun)? */
COLL_INTERNAL bool coll__ix_launched(void);
/* This rank's index among the ranks of its host, as the launcher says (else its rank, else
 * 0). */
COLL_INTERNAL int coll__ix_local_rank(void);

#endif /* COLL_INTROSPECT_H */
