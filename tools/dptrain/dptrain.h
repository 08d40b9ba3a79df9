/*
 * dptrain.h - what the parts of dptrain share: the options, the run (comm and its
 * accounting), the DDP buckets, the DiLoCo state, the elastic membership and the step
 * history, and the functions each part offers the training loop in dptrain.c.
 *
 *   options.c      the command line, its usage text, and the check that all ranks agree
 *   ddp.c          timing, the comm wrappers, gradient buckets, evaluation
 *   diloco.c       DiLoCo and Streaming DiLoCo
 *   state.c        checkpoints and weights files
 *   elastic_run.c  forming, syncing, shrinking and growing the comm (--elastic)
 *   plot.c         the step history and its gnuplot plots
 */
#ifndef DPTRAIN_H
#define DPTRAIN_H

#include <coll.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"
#include "data.h"
#include "elastic.h"
#include "mlp.h"
#include "qworker.h"

#define EXIT_USAGE 2
#define ERRLEN 512
#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

struct opts {
    const char *data_dir;
    int synthetic;        /* samples of synthetic data; 0: load data_dir */
    const char *sizes;
    enum optim_kind optim;
    double lr, momentum, weight_decay, beta1, beta2, eps;
    int batch;            /* global micro-batch, summed over ranks */
    int accum;            /* micro-batches per optimizer step */
    int epochs;
    long steps;           /* optimizer steps to run; 0: epochs * steps per epoch */
    uint64_t seed;
    double bucket_mb;
    const char *ckpt;     /* checkpoint path */
    long ckpt_every;      /* in optimizer steps; 0: only at the end (when ckpt is set) */
    const char *resume;
    const char *plot;     /* PNG prefix */
    long log_every, eval_every;
    const char *dump_weights, *check_weights;
    double tol;
    bool cosine;          /* lr follows a half cosine from lr to 0 over the run's steps */
    int diloco;           /* H: inner steps between outer syncs; 0: DDP */
    int fragments;        /* P: Streaming DiLoCo fragments (1: plain DiLoCo) */
    double outer_lr, outer_momentum;
    int overlap;          /* tau: a fragment's outer step lands tau inner steps after its
                           * all-reduce starts; -1: blocking outer syncs */
    double mix;           /* alpha: local = alpha local + (1 - alpha) global after a sync */
    int quant;            /* coll_quant_codec_t of gradients / outer gradients; -1: fp32 */
    bool feedback;        /* error feedback with --quant */
    bool schedule;        /* print one period of the fragment schedule and exit */
    long stop_after;      /* end after this step as a crash would (tests of --resume) */
    const char *metrics;  /* CSV of the reported metrics (rank 0) */
    const char *elastic;  /* --elastic DIR: go on through failures (elastic.h) */
    int el_rank, el_world; /* --rank R --world N: a first member; -1: a joiner */
    double join_timeout;  /* seconds a joiner waits for an offer */
    long join_every;      /* steps between the members' looks for joiners */
    const char *die_at;   /* --die-at POINT:STEP, SIGKILL itself there (tests) */
    long die_step;
    bool lr_set, wd_set, optim_set;
};

/* comm is NULL when dptrain runs alone: the collectives then reduce over one rank, which is
 * the identity. */
struct run {
    coll_comm_t *comm;
    int rank, nranks;
    /* This step's and the whole run's communication accounting. */
    double comm_s, wait_s;         /* inside launching/blocking coll calls; inside coll_wait */
    double payload_bytes;          /* fp32 bytes handed to all-reduces and broadcasts */
    struct qworker *qw;            /* --quant: the thread running quantized all-reduces */
    /* --elastic: a failed call does not end the process; it is recorded here, the callers
     * return without using its result, and the training loop recovers. */
    bool elastic;
    coll_status_t failed;
    char why[ERRLEN];
    const struct opts *o;
};

/* The DDP step's gradient buckets (ddp.c says how they are cut and launched). */
struct bucket {
    int lo, hi;        /* layers lo..hi */
    size_t off, count; /* floats of m->grads */
    coll_request_t *req;
    struct qjob job;   /* --quant: the bucket's all-reduce on the worker thread */
    bool posted;
    coll_quant_feedback_t *fb;
};

struct ddp {
    struct run *run;
    struct mlp *m;
    struct bucket b[MLP_MAX_LAYERS];
    int nbuckets;
    int bucket_of_lo[MLP_MAX_LAYERS]; /* bucket whose lowest layer is l, or -1 */
    bool sync;                        /* this micro-batch launches all-reduces */
    long step;                        /* for --die-at */
};

/* DiLoCo's state (diloco.c explains the method). */
struct diloco {
    float *global;   /* the parameters as of each fragment's last outer step */
    float *momentum; /* outer Nesterov buffer */
    float *delta;    /* outer gradients; a pending fragment's slice is borrowed by coll */
    int nfrag;
    size_t frag_off[MLP_MAX_LAYERS + 1]; /* fragment f is [frag_off[f], frag_off[f + 1]) */
    int shift[MLP_MAX_LAYERS];           /* inner step mod H at which fragment f syncs */
    long syncs;                          /* fragment syncs done (a full sync counts P) */
    long step;                           /* for --die-at */
    /* Overlapped syncs in flight: started, not yet applied. */
    bool pending[MLP_MAX_LAYERS];
    long due[MLP_MAX_LAYERS];            /* the step after which the outer step lands */
    coll_request_t *req[MLP_MAX_LAYERS]; /* fp32: coll_iallreduce; NULL once reduced */
    struct qjob job[MLP_MAX_LAYERS];     /* --quant: on the worker thread */
    bool posted[MLP_MAX_LAYERS];
    coll_quant_feedback_t *fb[MLP_MAX_LAYERS];
};

/* A process's view of the elastic job (elastic_run.c explains the recovery). */
struct el {
    struct elastic dir;
    int64_t *pids;       /* the current comm's processes by rank; NULL: not known yet */
    bool have_state;     /* false for a joiner until its first sync */
    bool need_sync;
    long reached;        /* the highest step this process started, + 1 */
    int recoveries, grows;
    double fail_t;       /* when this rank saw the failure (0: none pending) */
    int lost[ELASTIC_MAX_JOIN], nlost;
    int64_t lost_pid[ELASTIC_MAX_JOIN];
    int old_nranks;
};

/* Per-step and per-evaluation series, kept by rank 0 for --plot. */
struct history {
    size_t n, cap;
    double *step_compute, *step_comm, *step_wait, *step_loss;
    size_t neval, evcap;
    double *eval_step, *eval_acc, *eval_bytes;
};


/* options.c */
int parse_opts(int argc, char **argv, struct opts *o);
int check_flags(struct run *r, const struct opts *o, char *err, size_t errlen);

/* ddp.c */
double now_s(void);
void die_coll(struct run *r, coll_status_t st, const char *what);
void maybe_die(const struct run *r, const char *point, long step);
double bytes_sent(const struct run *r);
void allreduce_doubles(struct run *r, double *buf, int n);
void broadcast_floats(struct run *r, float *buf, size_t n);
void ddp_make_buckets(struct ddp *d, double bucket_mb);
void ddp_layer_done(int l, void *arg);
void ddp_wait_all(struct ddp *d);
void gather_batch(const struct dataset *ds, const uint32_t *idx, int n, float *x, uint8_t *y);
void evaluate(struct run *r, struct mlp *m, const struct dataset *test, float *x, uint8_t *y,
              double *acc_p, double *loss_p);

/* diloco.c */
int diloco_init(struct diloco *dl, const struct mlp *m, const struct opts *o, char *err,
                size_t errlen);
void diloco_free(struct diloco *dl);
void diloco_reduced(struct diloco *dl, struct run *r, int f);
void diloco_step(struct diloco *dl, struct run *r, struct mlp *m, const struct opts *o, long t,
                 bool last);
void diloco_print_schedule(const struct diloco *dl, const struct opts *o, size_t nparams);

/* state.c */
int save_checkpoint(struct run *r, const struct opts *o, const struct mlp *m,
                    const struct optim *opt, struct diloco *dl, uint64_t step,
                    uint64_t rng_state, char *err, size_t errlen);
int load_checkpoint(struct run *r, const struct opts *o, struct mlp *m, struct optim *opt,
                    struct diloco *dl, struct ckpt_header *got, char *err, size_t errlen);
int dump_weights(const char *path, const struct mlp *m);
int check_weights(const char *path, const struct mlp *m, double tol);

/* elastic_run.c */
int el_form(struct run *r, struct el *el, const struct opts *o, char *err, size_t errlen);
int el_sync(struct run *r, struct el *el, const struct opts *o, struct mlp *m,
            struct optim *opt, struct diloco *dl, long *step_p, char *err, size_t errlen);
void el_recover(struct run *r, struct el *el);
bool el_admit(struct run *r, struct el *el, const struct opts *o, long step);

/* plot.c */
void hist_step(struct history *h, double compute, double comm, double wait, double loss);
void hist_eval(struct history *h, double step, double acc, double bytes);
int write_plots(const char *prefix, const struct history *h, long first_step, int nranks);

#endif
