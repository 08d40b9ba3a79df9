/*
 * dptrain - a thin data-parallel trainer on coll's public API: an MLP on Fashion-MNIST (or a
 * synthetic dataset), trained as PyTorch's DistributedDataParallel trains.
 *
 *   collrun -n 4 dptrain [--data DIR | --synthetic N] [--sizes 784,256,128,10]
 *       [--optim sgd|adamw] [--lr X] [--batch B] [--accum K] [--epochs E | --steps S] ...
 *
 * (dptrain --help lists every option.) Without collrun it runs as one process.
 *
 * What makes it data-parallel:
 *   - rank 0 initializes the weights and broadcasts them, so every replica starts equal;
 *   - the sampler shuffles with a seed all ranks share, and each rank takes its slice of
 *     every global batch (data.h);
 *   - each rank scales its gradient by 1 / (global batch), so the SUM all-reduce yields the
 *     global mean exactly, even when the batch does not divide evenly among the ranks;
 *   - gradients go in buckets of whole layers (--bucket-mb, 25 MB by default as DDP's); the
 *     backward pass runs last layer first and launches a bucket's coll_iallreduce as soon as
 *     its lowest layer is done, then goes on computing the layers below while it travels;
 *     all buckets are waited for before the optimizer step;
 *   - with --accum K only every K-th micro-batch's backward launches all-reduces; the others
 *     just accumulate locally (DDP's no_sync()).
 * Since every replica applies the same averaged gradient, the replicas stay equal, and the
 * run matches one process on the same global batch up to float summation order.
 *
 * Instead of DDP, --diloco H runs DiLoCo and, with --fragments/--overlap/--mix, Streaming
 * DiLoCo; --quant sends gradients or outer gradients through coll_allreduce_quantized on a
 * worker thread (qworker.h), overlapped as the fp32 all-reduces are.
 *
 * Divisions: options; timing and the comm wrappers; buckets; DiLoCo; evaluation;
 * checkpoints, weights files and the flag check; plotting; the training loop; main.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <coll.h>

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "ckpt.h"
#include "data.h"
#include "elastic.h"
#include "mlp.h"
#include "qworker.h"

#define EXIT_USAGE 2
#define ERRLEN 512
#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

/* ---------------------------------------------------------------------------------------
 * Options.
 */
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

static void usage(FILE *f)
{
    fprintf(f,
        "usage: [collrun -n N] dptrain [options]\n"
        "data:\n"
        "  --data DIR         Fashion-MNIST IDX files, .gz or not (default " DEFAULT_DATA ")\n"
        "  --synthetic N      N deterministic synthetic samples instead (tests)\n"
        "model and optimizer:\n"
        "  --sizes L0,L1,..   layer sizes, inputs first (default 784,256,128,10)\n"
        "  --optim sgd|adamw  (default sgd: momentum 0.9)\n"
        "  --lr X             learning rate (default 0.05 sgd, 0.001 adamw)\n"
        "  --cosine           decay lr along a half cosine to 0 at the last step\n"
        "  --momentum X       SGD momentum (default 0.9)\n"
        "  --wd X             weight decay (default 0 sgd, 0.01 adamw, decoupled)\n"
        "  --beta1 X --beta2 X --eps X   AdamW (default 0.9 0.999 1e-8)\n"
        "schedule:\n"
        "  --batch B          global micro-batch over all ranks (default 128)\n"
        "  --accum K          micro-batches per step; all-reduce on the last only (default 1)\n"
        "  --epochs E         (default 1)\n"
        "  --steps S          stop after S optimizer steps instead\n"
        "  --seed S           weights and shuffling (default 1)\n"
        "  --bucket-mb X      gradient bucket size in MB (default 25)\n"
        "DiLoCo (instead of DDP):\n"
        "  --diloco H         H local inner steps per worker, then an outer Nesterov step on "
        "the\n"
        "                     averaged parameter deltas (use with --optim adamw)\n"
        "  --fragments P      Streaming DiLoCo: P fragments of layers synced on a staggered "
        "schedule\n"
        "  --outer-lr X --outer-momentum X   outer Nesterov SGD (default 0.7 0.9)\n"
        "  --overlap TAU      a fragment's outer all-reduce runs during the next TAU inner "
        "steps\n"
        "                     (non-blocking; 0 <= TAU < H); default: blocking syncs\n"
        "  --mix ALPHA        after a fragment's outer step, local = ALPHA local + (1 - ALPHA)"
        " global\n"
        "                     (default 0: take the global parameters)\n"
        "  --schedule         print which parameters sync at which step of one period; exit\n"
        "quantized communication:\n"
        "  --quant CODEC      gradients (DDP) or outer gradients (DiLoCo) cross the wire as "
        "CODEC:\n"
        "                     fp16 bf16 int8 e4m3 e5m2 int4 e3m0 sign1 (default: fp32)\n"
        "  --no-feedback      without error feedback (default: with)\n"
        "checkpoints:\n"
        "  --ckpt PATH        rank 0 writes PATH atomically every --ckpt-every steps and at "
        "the end\n"
        "  --ckpt-every N     (default 0: at the end only)\n"
        "  --resume PATH      start from a checkpoint (same sizes, optimizer, ranks)\n"
        "  --stop-after N     end after step N as if killed: no final sync, no final "
        "checkpoint\n"
        "elastic (docs/training.md, \"Elastic training\"):\n"
        "  --elastic DIR      survive failures: the survivors shrink and go on, restarted "
        "processes\n"
        "                     join through grow; DIR (one host) is the rendezvous\n"
        "  --rank R --world N a first member (without collrun); without them and without "
        "collrun\n"
        "                     the process joins the job running in DIR\n"
        "  --join-timeout S   seconds a joiner waits for the job to take it (default 300)\n"
        "  --join-every N     the members look for joiners every N steps (default 10)\n"
        "  --die-at P:STEP    SIGKILL this process at point P first met from step STEP on: "
        "allreduce,\n"
        "                     ckpt, offer (rank 0 after offering a join), take (a joiner after\n"
        "                     taking an offer; STEP 0)\n"
        "output:\n"
        "  --log-every N      print loss every N steps (default 0: per epoch)\n"
        "  --eval-every N     test accuracy every N steps (default 0: per epoch)\n"
        "  --plot PREFIX      PREFIX-accuracy.png, -bytes.png and -time.png (gnuplot)\n"
        "  --metrics FILE     every reported loss and accuracy, with the step's times and\n"
        "                     bytes, as CSV (one row per log line or evaluation)\n"
        "  --dump-weights F   write the final parameters (raw floats) to F\n"
        "  --check-weights F  compare the final parameters with F; exit 1 beyond --tol\n"
        "  --tol X            relative tolerance of --check-weights (default 1e-5)\n");
}

static int parse_num(const char *name, const char *s, double lo, double hi, double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "dptrain: bad value '%s' for --%s: want a number in [%g, %g]\n", s,
                name, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {
        {"data", 1, 0, 'D'},        {"synthetic", 1, 0, 'S'},  {"sizes", 1, 0, 'z'},
        {"optim", 1, 0, 'o'},       {"lr", 1, 0, 'l'},         {"momentum", 1, 0, 'm'},
        {"wd", 1, 0, 'w'},          {"beta1", 1, 0, '1'},      {"beta2", 1, 0, '2'},
        {"eps", 1, 0, 'E'},         {"batch", 1, 0, 'b'},      {"accum", 1, 0, 'a'},
        {"epochs", 1, 0, 'e'},      {"steps", 1, 0, 's'},      {"seed", 1, 0, 'r'},
        {"bucket-mb", 1, 0, 'B'},   {"ckpt", 1, 0, 'c'},       {"ckpt-every", 1, 0, 'C'},
        {"resume", 1, 0, 'R'},      {"plot", 1, 0, 'p'},       {"log-every", 1, 0, 'L'},
        {"eval-every", 1, 0, 'V'},  {"dump-weights", 1, 0, 'd'},
        {"check-weights", 1, 0, 'k'}, {"tol", 1, 0, 't'},      {"help", 0, 0, 'h'},
        {"cosine", 0, 0, 'K'},      {"diloco", 1, 0, 'H'},     {"fragments", 1, 0, 'P'},
        {"outer-lr", 1, 0, 'O'},    {"outer-momentum", 1, 0, 'M'},
        {"overlap", 1, 0, 'T'},     {"mix", 1, 0, 'A'},        {"quant", 1, 0, 'Q'},
        {"no-feedback", 0, 0, 'F'}, {"schedule", 0, 0, 'G'},  {"stop-after", 1, 0, 'X'},
        {"metrics", 1, 0, 'U'},     {"elastic", 1, 0, 'Y'},   {"rank", 1, 0, 'g'},
        {"world", 1, 0, 'W'},       {"join-timeout", 1, 0, 'J'}, {"die-at", 1, 0, 'Z'},
        {"join-every", 1, 0, 'N'},
        {0, 0, 0, 0},
    };
    int c;
    double v;

    *o = (struct opts){
        .data_dir = DEFAULT_DATA, .sizes = "784,256,128,10", .optim = OPTIM_SGD,
        .momentum = 0.9, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .batch = 128, .accum = 1,
        .epochs = 1, .seed = 1, .bucket_mb = 25.0, .tol = 1e-5, .fragments = 1,
        .outer_lr = 0.7, .outer_momentum = 0.9, .overlap = -1, .quant = -1,
        .feedback = true, .el_rank = -1, .el_world = -1, .join_timeout = 300,
        .join_every = 10,
    };
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int st = 0;
        switch (c) {
        case 'D': o->data_dir = optarg; break;
        case 'S': st = parse_num("synthetic", optarg, 1, 1e7, &v); o->synthetic = (int)v; break;
        case 'z': o->sizes = optarg; break;
        case 'U': o->metrics = optarg; break;
        case 'o':
            o->optim_set = true;
            if (strcmp(optarg, "sgd") == 0)
                o->optim = OPTIM_SGD;
            else if (strcmp(optarg, "adamw") == 0)
                o->optim = OPTIM_ADAMW;
            else {
                fprintf(stderr, "dptrain: unknown optimizer '%s': want sgd or adamw\n", optarg);
                st = -1;
            }
            break;
        case 'l': st = parse_num("lr", optarg, 0, 1e3, &o->lr); o->lr_set = true; break;
        case 'm': st = parse_num("momentum", optarg, 0, 1, &o->momentum); break;
        case 'w': st = parse_num("wd", optarg, 0, 1e3, &o->weight_decay); o->wd_set = true;
            break;
        case '1': st = parse_num("beta1", optarg, 0, 1, &o->beta1); break;
        case '2': st = parse_num("beta2", optarg, 0, 1, &o->beta2); break;
        case 'E': st = parse_num("eps", optarg, 0, 1, &o->eps); break;
        case 'b': st = parse_num("batch", optarg, 1, 1 << 20, &v); o->batch = (int)v; break;
        case 'a': st = parse_num("accum", optarg, 1, 1 << 16, &v); o->accum = (int)v; break;
        case 'e': st = parse_num("epochs", optarg, 1, 1e6, &v); o->epochs = (int)v; break;
        case 's': st = parse_num("steps", optarg, 1, 1e12, &v); o->steps = (long)v; break;
        case 'r': st = parse_num("seed", optarg, 0, 1e18, &v); o->seed = (uint64_t)v; break;
        case 'B': st = parse_num("bucket-mb", optarg, 1e-6, 1e6, &o->bucket_mb); break;
        case 'c': o->ckpt = optarg; break;
        case 'C': st = parse_num("ckpt-every", optarg, 0, 1e12, &v); o->ckpt_every = (long)v;
            break;
        case 'R': o->resume = optarg; break;
        case 'p': o->plot = optarg; break;
        case 'L': st = parse_num("log-every", optarg, 0, 1e12, &v); o->log_every = (long)v;
            break;
        case 'V': st = parse_num("eval-every", optarg, 0, 1e12, &v); o->eval_every = (long)v;
            break;
        case 'd': o->dump_weights = optarg; break;
        case 'k': o->check_weights = optarg; break;
        case 't': st = parse_num("tol", optarg, 0, 1, &o->tol); break;
        case 'K': o->cosine = true; break;
        case 'H': st = parse_num("diloco", optarg, 1, 1e9, &v); o->diloco = (int)v; break;
        case 'P': st = parse_num("fragments", optarg, 1, MLP_MAX_LAYERS, &v);
            o->fragments = (int)v;
            break;
        case 'O': st = parse_num("outer-lr", optarg, 0, 1e3, &o->outer_lr); break;
        case 'M': st = parse_num("outer-momentum", optarg, 0, 1, &o->outer_momentum); break;
        case 'T': st = parse_num("overlap", optarg, 0, 1e9, &v); o->overlap = (int)v; break;
        case 'A': st = parse_num("mix", optarg, 0, 1, &o->mix); break;
        case 'Q':
            o->quant = qworker_codec(optarg);
            if (o->quant < 0) {
                fprintf(stderr, "dptrain: unknown codec '%s' for --quant: want fp16, bf16, "
                        "int8, e4m3, e5m2, int4, e3m0 or sign1\n", optarg);
                st = -1;
            }
            break;
        case 'F': o->feedback = false; break;
        case 'G': o->schedule = true; break;
        case 'X': st = parse_num("stop-after", optarg, 1, 1e12, &v); o->stop_after = (long)v;
            break;
        case 'Y': o->elastic = optarg; break;
        case 'g': st = parse_num("rank", optarg, 0, 1 << 20, &v); o->el_rank = (int)v; break;
        case 'W': st = parse_num("world", optarg, 1, 1 << 20, &v); o->el_world = (int)v; break;
        case 'J': st = parse_num("join-timeout", optarg, 0, 1e6, &o->join_timeout); break;
        case 'N': st = parse_num("join-every", optarg, 1, 1e9, &v); o->join_every = (long)v;
            break;
        case 'Z': {
            const char *c = strchr(optarg, ':');
            static const char *const points[] = {"allreduce", "ckpt", "offer", "take"};
            bool known = false;
            for (size_t i = 0; c && i < sizeof(points) / sizeof(points[0]); i++)
                known |= strlen(points[i]) == (size_t)(c - optarg) &&
                         strncmp(points[i], optarg, (size_t)(c - optarg)) == 0;
            if (!known) {
                fprintf(stderr, "dptrain: --die-at '%s': want allreduce, ckpt, offer or "
                        "take, ':' and a step\n", optarg);
                st = -1;
                break;
            }
            st = parse_num("die-at", c + 1, 0, 1e12, &v);
            o->die_at = optarg;
            o->die_step = (long)v;
            break;
        }
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        if (st != 0)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "dptrain: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!o->diloco && (o->fragments > 1 || o->overlap >= 0 || o->mix != 0 || o->schedule)) {
        fprintf(stderr, "dptrain: --fragments, --overlap, --mix and --schedule need "
                "--diloco H\n");
        return -1;
    }
    /* A fragment's next all-reduce starts H steps after its last: that one must have
     * landed by then, so its delta buffer is free again. */
    if (o->diloco && o->overlap >= o->diloco) {
        fprintf(stderr, "dptrain: --overlap %d must be below --diloco %d: a fragment's outer "
                "step must land before its next sync starts\n", o->overlap, o->diloco);
        return -1;
    }
    if (!o->elastic && (o->el_rank >= 0 || o->el_world >= 0 || o->die_at)) {
        fprintf(stderr, "dptrain: --rank, --world and --die-at need --elastic DIR\n");
        return -1;
    }
    if ((o->el_rank >= 0) != (o->el_world >= 0) || (o->el_world >= 0 && o->el_rank >= o->el_world)) {
        fprintf(stderr, "dptrain: --rank R and --world N go together, with R < N\n");
        return -1;
    }
    /* The quantized all-reduces run on a worker thread of their own over the job's comm,
     * which a recovery would have to move to the new comm: not done. */
    if (o->elastic && o->quant >= 0) {
        fprintf(stderr, "dptrain: --elastic does not take --quant\n");
        return -1;
    }
    if (!o->lr_set)
        o->lr = o->optim == OPTIM_ADAMW ? 1e-3 : 0.05;
    if (!o->wd_set)
        o->weight_decay = o->optim == OPTIM_ADAMW ? 0.01 : 0.0;
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Timing and the comm wrappers. comm is NULL when dptrain runs alone: the collectives then
 * reduce over one rank, which is the identity.
 */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

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

static void die_coll(struct run *r, coll_status_t st, const char *what)
{
    if (r->elastic) {
        if (r->failed == COLL_SUCCESS) {
            r->failed = st;
            snprintf(r->why, sizeof(r->why), "%s: %s: %s", what, coll_status_string(st),
                     coll_last_error(r->comm));
        }
        return;
    }
    fprintf(stderr, "dptrain: rank %d: %s failed: %s: %s\n", r->rank, what,
            coll_status_string(st), coll_last_error(r->comm));
    exit(1);
}

/* --die-at: a failure at a chosen point, for the tests of --elastic. */
static void maybe_die(const struct run *r, const char *point, long step)
{
    const struct opts *o = r->o;

    if (o && o->die_at && step >= o->die_step && strncmp(o->die_at, point, strlen(point)) == 0
        && o->die_at[strlen(point)] == ':') {
        printf("dptrain: rank %d (pid %d): killed at %s, step %ld (--die-at)\n", r->rank,
               (int)getpid(), point, step);
        fflush(stdout);
        raise(SIGKILL);
    }
}

/* Payload bytes this rank has handed to coll's transports, as coll counts them, on the
 * job's comm and the quantized all-reduce thread's. */
static double bytes_sent(const struct run *r)
{
    uint64_t b = 0;

    if (!r->comm)
        return 0;
    coll_comm_bytes_sent(r->comm, &b);
    return (double)b + (r->qw ? (double)atomic_load(&r->qw->bytes_sent) : 0.0);
}

static void allreduce_doubles(struct run *r, double *buf, int n)
{
    coll_status_t st;
    double t0 = now_s();

    if (!r->comm)
        return;
    if (r->failed)
        return;
    st = coll_allreduce(buf, buf, (size_t)n, COLL_FLOAT64, COLL_SUM, r->comm);
    if (st != COLL_SUCCESS) {
        die_coll(r, st, "coll_allreduce");
        return;
    }
    r->comm_s += now_s() - t0;
    r->payload_bytes += n * sizeof(double);
}

static void broadcast_floats(struct run *r, float *buf, size_t n)
{
    coll_status_t st;
    double t0 = now_s();

    if (!r->comm)
        return;
    if (r->failed)
        return;
    st = coll_broadcast(buf, buf, n, COLL_FLOAT32, 0, r->comm);
    if (st != COLL_SUCCESS) {
        die_coll(r, st, "coll_broadcast");
        return;
    }
    r->comm_s += now_s() - t0;
    r->payload_bytes += n * sizeof(float);
}

/* ---------------------------------------------------------------------------------------
 * Buckets: contiguous runs of whole layers, filled from the last layer down until each
 * holds at least bucket_bytes (so one bucket is launched per few layers, not per tensor).
 */
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

static void ddp_make_buckets(struct ddp *d, double bucket_mb)
{
    struct mlp *m = d->m;
    double cap = bucket_mb * 1e6;
    int hi = m->nlayers - 1;

    d->nbuckets = 0;
    for (int l = 0; l < m->nlayers; l++)
        d->bucket_of_lo[l] = -1;
    while (hi >= 0) {
        int lo = hi;
        double bytes = (double)(m->off[hi + 1] - m->off[hi]) * sizeof(float);
        while (lo > 0 && bytes < cap) {
            lo--;
            bytes += (double)(m->off[lo + 1] - m->off[lo]) * sizeof(float);
        }
        d->b[d->nbuckets] = (struct bucket){
            .lo = lo, .hi = hi, .off = m->off[lo], .count = m->off[hi + 1] - m->off[lo],
        };
        d->bucket_of_lo[lo] = d->nbuckets++;
        hi = lo - 1;
    }
}

/* mlp_backward's callback: layer l's gradient is final; launch its bucket if l completes it. */
static void ddp_layer_done(int l, void *arg)
{
    struct ddp *d = arg;
    struct run *r = d->run;
    int k = d->bucket_of_lo[l];
    struct bucket *b;
    coll_status_t st;
    double t0;

    if (!d->sync || k < 0 || !r->comm || r->failed)
        return;
    b = &d->b[k];
    t0 = now_s();
    if (r->qw) {
        b->job = (struct qjob){.buf = d->m->grads + b->off, .count = b->count, .op = COLL_SUM,
                               .fb = b->fb};
        qworker_post(r->qw, &b->job);
        b->posted = true;
    } else {
        st = coll_iallreduce(d->m->grads + b->off, d->m->grads + b->off, b->count,
                             COLL_FLOAT32, COLL_SUM, r->comm, &b->req);
        if (st != COLL_SUCCESS) {
            die_coll(r, st, "coll_iallreduce");
            return;
        }
        maybe_die(r, "allreduce", d->step);
    }
    r->comm_s += now_s() - t0;
    r->payload_bytes += b->count * sizeof(float);
}

static void ddp_wait_all(struct ddp *d)
{
    struct run *r = d->run;

    for (int k = 0; k < d->nbuckets; k++) {
        coll_status_t st;
        double t0;

        if (d->b[k].posted) {
            t0 = now_s();
            st = qworker_wait(r->qw, &d->b[k].job);
            d->b[k].posted = false;
            if (st != COLL_SUCCESS) {
                fprintf(stderr, "dptrain: rank %d: quantized gradient all-reduce failed: "
                        "%s: %s\n", r->rank, coll_status_string(st), qworker_error(r->qw));
                exit(1);
            }
            r->wait_s += now_s() - t0;
            continue;
        }
        if (!d->b[k].req)
            continue;
        t0 = now_s();
        st = coll_wait(d->b[k].req);
        d->b[k].req = NULL;
        if (st != COLL_SUCCESS)
            die_coll(r, st, "coll_wait (gradient all-reduce)");
        r->wait_s += now_s() - t0;
    }
}

/* ---------------------------------------------------------------------------------------
 * DiLoCo (Douillard et al. 2023) and Streaming DiLoCo (Douillard et al. 2025). Workers train
 * alone for H inner steps (their own optimizer, no gradient all-reduce), then average how
 * far they moved from the last global parameters, the "outer gradient" delta = global -
 * local, and take an outer SGD step with Nesterov momentum on it.
 *
 * Streaming splits the layers into P fragments and syncs fragment p at inner steps t with
 * t mod H = p H / P, so the traffic of one full sync is spread over the H steps. With
 * --overlap tau the fragment's all-reduce is non-blocking: the worker goes on with tau more
 * inner steps while it travels, and only then applies the outer step to the global copy
 * and merges it into its (moved-on) local parameters with the mixing factor alpha:
 *     local = alpha * local + (1 - alpha) * global_after_outer_step.
 * The next outer gradient is taken against the global copy, never the mixed local one. The
 * last step syncs every fragment, blocking and with alpha 0, so all replicas end equal.
 */
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

static int diloco_init(struct diloco *dl, const struct mlp *m, const struct opts *o,
                       char *err, size_t errlen)
{
    int nfrag = o->fragments < m->nlayers ? o->fragments : m->nlayers;

    dl->global = malloc(m->nparams * sizeof(float));
    dl->momentum = calloc(m->nparams, sizeof(float));
    dl->delta = calloc(m->nparams, sizeof(float));
    if (!dl->global || !dl->momentum || !dl->delta) {
        snprintf(err, errlen, "out of memory for DiLoCo's outer state");
        return -1;
    }
    /* Fragments of whole, consecutive layers, as even in count as the layers allow. */
    dl->nfrag = nfrag;
    for (int f = 0; f <= nfrag; f++)
        dl->frag_off[f] = m->off[(long)m->nlayers * f / nfrag];
    for (int f = 0; f < nfrag; f++)
        dl->shift[f] = (int)((long)o->diloco * f / nfrag);
    return 0;
}

static void diloco_free(struct diloco *dl)
{
    for (int f = 0; f < MLP_MAX_LAYERS; f++)
        coll_quant_feedback_destroy(dl->fb[f]);
    free(dl->global);
    free(dl->momentum);
    free(dl->delta);
}

/* Whether fragment f's turn comes after inner step t (1-based). The schedule test prints
 * this very predicate over a period. */
static bool diloco_due(const struct diloco *dl, const struct opts *o, int f, long t)
{
    return t % o->diloco == dl->shift[f];
}

/* Starts the averaging of fragment f's outer gradient (already in dl->delta). */
static void diloco_launch(struct diloco *dl, struct run *r, int f)
{
    size_t a = dl->frag_off[f], n = dl->frag_off[f + 1] - a;
    double t0 = now_s();

    if (!r->comm || r->failed)
        return;
    if (r->qw) {
        dl->job[f] = (struct qjob){.buf = dl->delta + a, .count = n, .op = COLL_AVG,
                                   .fb = dl->fb[f]};
        qworker_post(r->qw, &dl->job[f]);
        dl->posted[f] = true;
    } else {
        coll_status_t st = coll_iallreduce(dl->delta + a, dl->delta + a, n, COLL_FLOAT32,
                                           COLL_AVG, r->comm, &dl->req[f]);
        if (st != COLL_SUCCESS) {
            die_coll(r, st, "coll_iallreduce (DiLoCo outer gradient)");
            return;
        }
        maybe_die(r, "allreduce", dl->step);
    }
    r->comm_s += now_s() - t0;
    r->payload_bytes += n * sizeof(float);
}

/* Waits for fragment f's averaged outer gradient, if it is still travelling. */
static void diloco_reduced(struct diloco *dl, struct run *r, int f)
{
    double t0 = now_s();
    coll_status_t st;

    if (dl->posted[f]) {
        st = qworker_wait(r->qw, &dl->job[f]);
        dl->posted[f] = false;
        if (st != COLL_SUCCESS) {
            fprintf(stderr, "dptrain: rank %d: quantized outer gradient all-reduce failed: "
                    "%s: %s\n", r->rank, coll_status_string(st), qworker_error(r->qw));
            exit(1);
        }
    } else if (dl->req[f]) {
        st = coll_wait(dl->req[f]);
        dl->req[f] = NULL;
        if (st != COLL_SUCCESS)
            die_coll(r, st, "coll_wait (DiLoCo outer gradient)");
    }
    r->wait_s += now_s() - t0;
}

/* The outer step on fragment f's global copy, then the merge into the local parameters. */
static void diloco_apply(struct diloco *dl, struct mlp *m, const struct opts *o, int f,
                         float alpha)
{
    size_t a = dl->frag_off[f], b = dl->frag_off[f + 1];
    float lr = (float)o->outer_lr, mu = (float)o->outer_momentum;

    for (size_t i = a; i < b; i++) {
        dl->momentum[i] = mu * dl->momentum[i] + dl->delta[i];
        dl->global[i] -= lr * (dl->delta[i] + mu * dl->momentum[i]); /* Nesterov */
        m->params[i] = alpha * m->params[i] + (1.0f - alpha) * dl->global[i];
    }
}

/* After inner step t (1-based): land the overlapped syncs that are due, then start (or, when
 * blocking, do) the syncs whose turn it is; last syncs everything. */
static void diloco_step(struct diloco *dl, struct run *r, struct mlp *m, const struct opts *o,
                        long t, bool last)
{
    float alpha = (float)o->mix;

    for (int f = 0; f < dl->nfrag; f++) {
        if (dl->pending[f] && (t >= dl->due[f] || last)) {
            diloco_reduced(dl, r, f);
            if (r->failed)
                return;
            diloco_apply(dl, m, o, f, alpha);
            dl->pending[f] = false;
        }
    }
    for (int f = 0; f < dl->nfrag; f++) {
        size_t a = dl->frag_off[f], b = dl->frag_off[f + 1];

        if (!last && !diloco_due(dl, o, f, t))
            continue;
        dl->syncs++;
        for (size_t i = a; i < b; i++)
            dl->delta[i] = dl->global[i] - m->params[i];
        if (last || o->overlap < 0) {
            if (r->comm && !r->qw) { /* the blocking path, as DiLoCo describes it */
                double t0 = now_s();
                coll_status_t st = COLL_SUCCESS;
                maybe_die(r, "allreduce", dl->step);
                if (!r->failed)
                    st = coll_allreduce(dl->delta + a, dl->delta + a, b - a, COLL_FLOAT32,
                                        COLL_AVG, r->comm);
                if (st != COLL_SUCCESS)
                    die_coll(r, st, "coll_allreduce (DiLoCo outer gradient)");
                r->comm_s += now_s() - t0;
                r->payload_bytes += (b - a) * sizeof(float);
            } else {
                diloco_launch(dl, r, f);
                diloco_reduced(dl, r, f);
            }
            if (r->failed)
                return;
            diloco_apply(dl, m, o, f, last ? 0.0f : alpha);
            continue;
        }
        diloco_launch(dl, r, f);
        dl->pending[f] = true;
        dl->due[f] = t + o->overlap;
        if (o->overlap == 0) {
            diloco_reduced(dl, r, f);
            if (r->failed)
                return;
            diloco_apply(dl, m, o, f, alpha);
            dl->pending[f] = false;
        }
    }
}

/* --schedule: one period of diloco_due, as "step T fragment F params A B" lines. */
static void diloco_print_schedule(const struct diloco *dl, const struct opts *o, size_t nparams)
{
    printf("schedule: H %d fragments %d parameters %zu\n", o->diloco, dl->nfrag, nparams);
    for (long t = 1; t <= o->diloco; t++)
        for (int f = 0; f < dl->nfrag; f++)
            if (diloco_due(dl, o, f, t))
                printf("step %ld fragment %d params %zu %zu\n", t, f, dl->frag_off[f],
                       dl->frag_off[f + 1]);
}

/* ---------------------------------------------------------------------------------------
 * Evaluation: each rank scores its share of the test set; the counts are summed.
 */
static void gather_batch(const struct dataset *ds, const uint32_t *idx, int n, float *x,
                         uint8_t *y)
{
    for (int i = 0; i < n; i++) {
        uint32_t s = idx[i];
        memcpy(x + (size_t)i * ds->dim, ds->x + (size_t)s * ds->dim, ds->dim * sizeof(float));
        y[i] = ds->y[s];
    }
}

static void evaluate(struct run *r, struct mlp *m, const struct dataset *test, float *x,
                     uint8_t *y, double *acc_p, double *loss_p)
{
    int begin, end;
    double t[3] = {0, 0, 0}; /* correct, samples, loss sum */

    sampler_slice(test->n, r->rank, r->nranks, &begin, &end);
    for (int i = begin; i < end; i += m->cap) {
        int n = end - i < m->cap ? end - i : m->cap;
        long correct = 0;
        memcpy(x, test->x + (size_t)i * test->dim, (size_t)n * test->dim * sizeof(float));
        memcpy(y, test->y + i, (size_t)n);
        t[2] += mlp_forward(m, x, y, n, &correct);
        t[0] += (double)correct;
        t[1] += n;
    }
    allreduce_doubles(r, t, 3);
    *acc_p = t[1] > 0 ? t[0] / t[1] : 0.0;
    *loss_p = t[1] > 0 ? t[2] / t[1] : 0.0;
}

/* ---------------------------------------------------------------------------------------
 * Checkpoints and weights files.
 */
static void fill_header(struct ckpt_header *h, const struct mlp *m, const struct opts *o,
                        const struct run *r, const struct optim *opt,
                        const struct diloco *dl, uint64_t step, uint64_t rng_state)
{
    memset(h, 0, sizeof(*h));
    memcpy(h->magic, CKPT_MAGIC, 8);
    h->version = CKPT_VERSION;
    h->nlayers = (uint32_t)m->nlayers;
    for (int l = 0; l <= m->nlayers; l++)
        h->sizes[l] = (uint32_t)m->sizes[l];
    h->optim = (uint32_t)o->optim;
    h->world_size = (uint32_t)r->nranks;
    h->batch = (uint32_t)o->batch;
    h->accum = (uint32_t)o->accum;
    h->step = step;
    h->optim_t = opt->t;
    h->seed = o->seed;
    h->rng_state = rng_state;
    h->nparams = m->nparams;
    if (o->diloco) {
        h->diloco = (uint32_t)o->diloco;
        h->fragments = (uint32_t)dl->nfrag;
        h->overlap = o->overlap;
    }
}

/* Rank 0 writes the job's state. DDP: its own, since every replica is equal. DiLoCo: every
 * worker's parameters and optimizer state, gathered to rank 0 (so collective); overlapped
 * syncs still travelling are waited for and their averaged outer gradients stored, so that
 * the resumed run lands them at the same step as an uninterrupted one. */
static int save_checkpoint(struct run *r, const struct opts *o, const struct mlp *m,
                           const struct optim *opt, struct diloco *dl, uint64_t step,
                           uint64_t rng_state, char *err, size_t errlen)
{
    struct ckpt_header h;
    size_t k = opt->v ? 3 : 2, n = m->nparams, na;
    float *mine = NULL, *all = NULL;
    const float **arrays = NULL;
    int ret = -1;

    maybe_die(r, "ckpt", (long)step - 1);
    fill_header(&h, m, o, r, opt, dl, step, rng_state);
    if (!o->diloco) {
        const float *ddp[3] = {m->params, opt->m, opt->v};
        return r->rank == 0 ? ckpt_write(o->ckpt, &h, ddp, err, errlen) : 0;
    }
    for (int f = 0; f < dl->nfrag; f++) {
        if (!dl->pending[f])
            continue;
        diloco_reduced(dl, r, f);
        if (r->failed)
            return 0; /* the training loop recovers */
        h.pending |= 1ull << f;
        h.due[f] = (uint64_t)dl->due[f];
    }
    na = ckpt_narrays(&h);
    mine = malloc(k * n * sizeof(float));
    all = r->rank == 0 ? malloc((size_t)r->nranks * k * n * sizeof(float)) : NULL;
    arrays = malloc(na * sizeof(*arrays));
    if (!mine || !arrays || (r->rank == 0 && !all)) {
        snprintf(err, errlen, "out of memory for a checkpoint");
        goto out_free;
    }
    memcpy(mine, m->params, n * sizeof(float));
    memcpy(mine + n, opt->m, n * sizeof(float));
    if (opt->v)
        memcpy(mine + 2 * n, opt->v, n * sizeof(float));
    if (r->comm) {
        coll_status_t st = coll_gather(mine, all, k * n, COLL_FLOAT32, 0, r->comm);
        if (st != COLL_SUCCESS) {
            die_coll(r, st, "coll_gather (checkpoint)");
            ret = 0; /* the training loop recovers */
            goto out_free;
        }
    } else {
        memcpy(all, mine, k * n * sizeof(float));
    }
    if (r->rank == 0) {
        arrays[0] = dl->global;
        arrays[1] = dl->momentum;
        arrays[2] = dl->delta;
        for (size_t i = 3; i < na; i++)
            arrays[i] = all + (i - 3) * n;
        if (ckpt_write(o->ckpt, &h, arrays, err, errlen) != 0)
            goto out_free;
    }
    ret = 0;
out_free:
    free(arrays);
    free(all);
    free(mine);
    return ret;
}

/* --resume: every rank reads the file itself and takes its own worker's state. */
static int load_checkpoint(struct run *r, const struct opts *o, struct mlp *m,
                           struct optim *opt, struct diloco *dl, struct ckpt_header *got,
                           char *err, size_t errlen)
{
    struct ckpt_header want;
    struct ckpt_pick picks[6];
    int np = 0;

    fill_header(&want, m, o, r, opt, dl, 0, 0);
    if (!o->diloco) {
        picks[np++] = (struct ckpt_pick){0, m->params};
        picks[np++] = (struct ckpt_pick){1, opt->m};
        if (opt->v)
            picks[np++] = (struct ckpt_pick){2, opt->v};
    } else {
        size_t w = ckpt_worker_array(&want, r->rank);
        picks[np++] = (struct ckpt_pick){0, dl->global};
        picks[np++] = (struct ckpt_pick){1, dl->momentum};
        picks[np++] = (struct ckpt_pick){2, dl->delta};
        picks[np++] = (struct ckpt_pick){w, m->params};
        picks[np++] = (struct ckpt_pick){w + 1, opt->m};
        if (opt->v)
            picks[np++] = (struct ckpt_pick){w + 2, opt->v};
    }
    if (ckpt_read(o->resume, &want, got, picks, np, err, errlen) != 0)
        return -1;
    if (o->diloco)
        for (int f = 0; f < dl->nfrag; f++) {
            dl->pending[f] = (got->pending >> f) & 1;
            dl->due[f] = (long)got->due[f];
        }
    return 0;
}

/* Every rank must run the same schedule: flags that decide which collectives run, with
 * what sizes, or what the replicas compute. Compared at start (the max and min of each over
 * the ranks must agree), so a launch with mixed flags fails with a message instead of
 * hanging in mismatched collectives or silently diverging. */
static int check_flags(struct run *r, const struct opts *o, char *err, size_t errlen)
{
    uint64_t sizes_hash = 0xcbf29ce484222325ull;
    for (const char *c = o->sizes; *c; c++)
        sizes_hash = (sizes_hash ^ (unsigned char)*c) * 0x100000001b3ull;
    const struct {
        const char *name;
        double v;
    } f[] = {
        {"--sizes", (double)(sizes_hash >> 12)}, {"--optim", o->optim}, {"--lr", o->lr},
        {"--momentum", o->momentum}, {"--wd", o->weight_decay}, {"--beta1", o->beta1},
        {"--beta2", o->beta2}, {"--eps", o->eps}, {"--batch", o->batch},
        {"--accum", o->accum}, {"--epochs", o->epochs}, {"--steps", (double)o->steps},
        {"--seed", (double)o->seed}, {"--bucket-mb", o->bucket_mb}, {"--cosine", o->cosine},
        {"--diloco", o->diloco}, {"--fragments", o->fragments}, {"--outer-lr", o->outer_lr},
        {"--outer-momentum", o->outer_momentum}, {"--overlap", o->overlap},
        {"--mix", o->mix}, {"--quant", o->quant}, {"--no-feedback", !o->feedback},
        {"--synthetic", o->synthetic}, {"--ckpt (given or not)", o->ckpt != NULL},
        {"--ckpt-every", (double)o->ckpt_every}, {"--resume (given or not)", o->resume != NULL},
        {"--log-every", (double)o->log_every}, {"--eval-every", (double)o->eval_every},
        {"--stop-after", (double)o->stop_after}, {"--join-every", (double)o->join_every},
    };
    enum { N = sizeof(f) / sizeof(f[0]) };
    double mm[2 * N];
    coll_status_t st;

    if (!r->comm)
        return 0;
    for (int i = 0; i < N; i++) {
        mm[i] = f[i].v;
        mm[N + i] = -f[i].v;
    }
    st = coll_allreduce(mm, mm, 2 * N, COLL_FLOAT64, COLL_MAX, r->comm);
    if (st != COLL_SUCCESS) {
        die_coll(r, st, "coll_allreduce (flag check)");
        return 0; /* the caller sees r->failed */
    }
    for (int i = 0; i < N; i++) {
        if (mm[i] != -mm[N + i]) {
            snprintf(err, errlen, "the ranks were started with different %s (from %g to %g "
                     "across ranks; this rank has %g): start every rank with the same flags",
                     f[i].name, -mm[N + i], mm[i], f[i].v);
            return -1;
        }
    }
    return 0;
}

static int dump_weights(const char *path, const struct mlp *m)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(m->params, sizeof(float), m->nparams, f) != m->nparams) {
        fprintf(stderr, "dptrain: cannot write weights to '%s': %s\n", path, strerror(errno));
        if (f)
            fclose(f);
        return -1;
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "dptrain: cannot write weights to '%s': %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Returns 0 when every parameter is within tol * max(1, |reference|) of the reference. */
static int check_weights(const char *path, const struct mlp *m, double tol)
{
    FILE *f = fopen(path, "rb");
    float *ref;
    double worst = 0.0;
    size_t worst_i = 0;

    if (!f) {
        fprintf(stderr, "dptrain: cannot open reference weights '%s': %s\n", path,
                strerror(errno));
        return -1;
    }
    ref = malloc(m->nparams * sizeof(float) + 1);
    if (!ref || fread(ref, sizeof(float), m->nparams, f) != m->nparams ||
        fgetc(f) != EOF) {
        fprintf(stderr, "dptrain: reference weights '%s' do not hold exactly %zu floats\n",
                path, m->nparams);
        free(ref);
        fclose(f);
        return -1;
    }
    fclose(f);
    for (size_t i = 0; i < m->nparams; i++) {
        double a = fabs((double)ref[i]);
        double d = fabs((double)m->params[i] - ref[i]) / (a > 1.0 ? a : 1.0);
        if (!(d <= worst)) { /* NaN counts as worst */
            worst = isnan(d) ? INFINITY : d;
            worst_i = i;
        }
    }
    free(ref);
    printf("check-weights: max relative difference %.3g (parameter %zu), tolerance %.3g: %s\n",
           worst, worst_i, tol, worst <= tol ? "match" : "MISMATCH");
    return worst <= tol ? 0 : 1;
}

/* ---------------------------------------------------------------------------------------
 * Elastic training (--elastic DIR). The job's state is what every replica holds alike: the
 * step reached, the parameters, the optimizer state and, for DiLoCo, the global copy and
 * the outer momentum. A rank changes it only with the result of collectives that
 * succeeded, so after a failure each survivor holds the state of some step, whole. The
 * recovery shrinks the comm to the survivors (the dead are told by their live locks,
 * elastic.h), and every (re)formed comm, first, shrunk or grown, is synced: the rank that
 * got furthest (the lowest among equals) broadcasts its state and everyone adopts it. In
 * DDP a step that failed on the survivor furthest ahead is redone by the survivors, with
 * the same global batch sharded over fewer ranks, so no sample of it is dropped. In DiLoCo
 * the workers take the chosen worker's parameters: their own inner steps since the last
 * outer step are dropped, and pending overlapped syncs are dropped; a joiner takes part
 * from the next outer step on.
 */
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

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The first comm: collrun's environment, or --rank/--world through DIR/init.id, or, for a
 * restarted process, a join. */
static int el_form(struct run *r, struct el *el, const struct opts *o, char *err,
                   size_t errlen)
{
    coll_unique_id_t id;
    coll_status_t st;
    int n, rank;

    if (getenv("COLL_UNIQUE_ID") || o->el_world > 0) {
        const char *env_rank = getenv("COLL_RANK");
        int me = o->el_world > 0 ? o->el_rank : env_rank ? atoi(env_rank) : -1;
        if (me < 0 || elastic_member_publish(&el->dir, me, err, errlen) != 0) {
            if (me < 0)
                snprintf(err, errlen, "--elastic: no rank (COLL_RANK) to publish");
            return -1;
        }
        if (getenv("COLL_UNIQUE_ID")) {
            st = coll_comm_init_env(&r->comm);
        } else {
            if (elastic_initial_id(&el->dir, o->el_rank, o->join_timeout, &id, err,
                                   errlen) != 0)
                return -1;
            st = coll_comm_init(&r->comm, o->el_world, &id, o->el_rank);
        }
        if (st != COLL_SUCCESS) {
            snprintf(err, errlen, "coll_comm_init: %s: %s", coll_status_string(st),
                     coll_last_error(NULL));
            return -1;
        }
        coll_comm_rank(r->comm, &r->rank);
        coll_comm_size(r->comm, &r->nranks);
        el->pids = elastic_members(&el->dir, r->nranks, err, errlen);
        if (!el->pids)
            return -1;
        el->have_state = true;
        return 0;
    }
    double deadline = now_s() + o->join_timeout;
    if (elastic_join_request(&el->dir, err, errlen) != 0)
        return -1;
    printf("dptrain: pid %lld: asking to join the job in '%s'\n", (long long)el->dir.pid,
           o->elastic);
    fflush(stdout);
    for (;;) {
        int64_t *pids = NULL;
        double left = deadline - now_s();
        if (left <= 0 || elastic_join_wait(&el->dir, left, &id, &n, &rank, &pids, err,
                                           errlen) != 0) {
            if (left <= 0)
                snprintf(err, errlen, "--elastic: not admitted within --join-timeout %g s",
                         o->join_timeout);
            elastic_join_done(&el->dir);
            return -1;
        }
        maybe_die(r, "take", 0);
        st = coll_comm_init(&r->comm, n, &id, rank);
        if (st == COLL_SUCCESS) {
            elastic_join_done(&el->dir);
            printf("dptrain: pid %lld: joined as rank %d of %d\n", (long long)el->dir.pid,
                   rank, n);
            fflush(stdout);
            free(el->pids);
            el->pids = pids;
            r->rank = rank;
            r->nranks = n;
            el->have_state = false;
            el->need_sync = true;
            return 0;
        }
        free(pids);
        printf("dptrain: pid %lld: join as rank %d of %d failed (%s); asking again\n",
               (long long)el->dir.pid, rank, n, coll_last_error(NULL));
        fflush(stdout);
    }
}

/* Every rank adopts the state of the rank that got furthest; then checks that all hold the
 * same bits. Returns 0, or -1 with r->failed set (a collective failed: recover again). A
 * state nobody holds, or replicas that differ after the broadcast, end the process. */
static int el_sync(struct run *r, struct el *el, const struct opts *o, struct mlp *m,
                   struct optim *opt, struct diloco *dl, long *step_p, char *err,
                   size_t errlen)
{
    int64_t key[2], hdr[3], *pids;
    double cs, mm[2];
    coll_status_t st;
    int src;

    if (check_flags(r, o, err, errlen) != 0) {
        fprintf(stderr, "dptrain: rank %d: %s\n", r->rank, err);
        exit(1);
    }
    if (r->failed)
        return -1;
    pids = malloc((size_t)r->nranks * sizeof(*pids));
    if (!pids) {
        fprintf(stderr, "dptrain: rank %d: out of memory\n", r->rank);
        exit(1);
    }
    st = coll_allgather(&el->dir.pid, pids, 1, COLL_INT64, r->comm);
    if (st != COLL_SUCCESS) {
        free(pids);
        die_coll(r, st, "coll_allgather (elastic: processes)");
        return -1;
    }
    free(el->pids);
    el->pids = pids;
    /* the furthest step wins, then the lowest rank */
    key[0] = el->have_state ? (int64_t)*step_p * 65536 + (65535 - r->rank) : -1;
    key[1] = el->reached;
    st = coll_allreduce(key, key, 2, COLL_INT64, COLL_MAX, r->comm);
    if (st != COLL_SUCCESS) {
        die_coll(r, st, "coll_allreduce (elastic: whose state)");
        return -1;
    }
    if (key[0] < 0) {
        fprintf(stderr, "dptrain: rank %d: no rank of the comm holds the model (every member "
                "that had it is gone)\n", r->rank);
        exit(1);
    }
    src = 65535 - (int)(key[0] % 65536);
    hdr[0] = key[0] / 65536;
    hdr[1] = (int64_t)opt->t;
    hdr[2] = o->diloco ? dl->syncs : 0;
    st = coll_broadcast(hdr, hdr, 3, COLL_INT64, src, r->comm);
    if (st == COLL_SUCCESS)
        st = coll_broadcast(m->params, m->params, m->nparams, COLL_FLOAT32, src, r->comm);
    if (st == COLL_SUCCESS)
        st = coll_broadcast(opt->m, opt->m, m->nparams, COLL_FLOAT32, src, r->comm);
    if (st == COLL_SUCCESS && opt->v)
        st = coll_broadcast(opt->v, opt->v, m->nparams, COLL_FLOAT32, src, r->comm);
    if (st == COLL_SUCCESS && o->diloco)
        st = coll_broadcast(dl->global, dl->global, m->nparams, COLL_FLOAT32, src, r->comm);
    if (st == COLL_SUCCESS && o->diloco)
        st = coll_broadcast(dl->momentum, dl->momentum, m->nparams, COLL_FLOAT32, src,
                            r->comm);
    if (st != COLL_SUCCESS) {
        die_coll(r, st, "coll_broadcast (elastic: state)");
        return -1;
    }
    cs = mlp_checksum(m);
    mm[0] = cs;
    mm[1] = -cs;
    st = coll_allreduce(mm, mm, 2, COLL_FLOAT64, COLL_MAX, r->comm);
    if (st != COLL_SUCCESS) {
        die_coll(r, st, "coll_allreduce (elastic: replica check)");
        return -1;
    }
    if (mm[0] != -mm[1]) {
        fprintf(stderr, "dptrain: rank %d: replicas differ after the state broadcast: "
                "checksums from %.17g to %.17g\n", r->rank, -mm[1], mm[0]);
        exit(1);
    }
    *step_p = (long)hdr[0];
    opt->t = (uint64_t)hdr[1];
    if (o->diloco) {
        dl->syncs = (long)hdr[2];
        for (int f = 0; f < dl->nfrag; f++) {
            dl->pending[f] = false;
            dl->req[f] = NULL;
        }
    }
    if (r->rank == 0) {
        if (el->fail_t > 0)
            printf("elastic: recovery %d: lost rank(s)", el->recoveries);
        for (int i = 0; el->fail_t > 0 && i < el->nlost; i++)
            printf(" %d (pid %lld)", el->lost[i], (long long)el->lost_pid[i]);
        if (el->fail_t > 0)
            printf(", %d -> %d ranks; resumed at step %ld from rank %d's state, %ld step(s) "
                   "of work redone (%s), stall %.3f s, at %.3f\n", el->old_nranks, r->nranks,
                   *step_p, src, key[1] - *step_p > 0 ? (long)(key[1] - *step_p) : 0L,
                   o->diloco ? "DiLoCo: inner steps since the last outer step dropped"
                             : "the failed step's global batch, over the survivors",
                   now_s() - el->fail_t, wall_s());
        else
            printf("elastic: %d ranks in sync at step %ld (state of rank %d), checksum "
                   "%.9g, at %.3f\n", r->nranks, *step_p, src, cs, wall_s());
        fflush(stdout);
    }
    if (!el->have_state) {
        printf("dptrain: pid %lld: rank %d holds the job's state as of step %ld\n",
               (long long)el->dir.pid, r->rank, *step_p);
        fflush(stdout);
    }
    el->fail_t = 0;
    el->nlost = 0;
    el->have_state = true;
    el->need_sync = false;
    el->reached = *step_p;
    return 0;
}

/* After a failed call: shrink to the survivors. Ends the process when no shrink succeeds
 * within a bounded number of tries (a peer alive but never coming: stopped, or lost in
 * another comm), so nothing waits forever. */
static void el_recover(struct run *r, struct el *el)
{
    int *dead = malloc((size_t)r->nranks * sizeof(*dead));
    coll_comm_t *small = NULL;
    coll_status_t st = COLL_INTERNAL_ERROR;
    int ndead = 0;

    if (!dead) {
        fprintf(stderr, "dptrain: rank %d: out of memory\n", r->rank);
        exit(1);
    }
    if (el->fail_t == 0) {
        el->fail_t = now_s();
        el->old_nranks = r->nranks;
    }
    el->recoveries++;
    printf("elastic: rank %d: %s; recovering\n", r->rank, r->why);
    fflush(stdout);
    if (!el->pids) {
        fprintf(stderr, "dptrain: rank %d: the comm failed before its processes were known: "
                "%s\n", r->rank, r->why);
        exit(1);
    }
    for (int attempt = 0; attempt < 20; attempt++) {
        /* a dead peer's connections may close a moment before its lock file does */
        elastic_nap_ms(attempt == 0 ? 50 : 200);
        ndead = 0;
        for (int k = 0; k < r->nranks; k++)
            if (k != r->rank && !elastic_alive(&el->dir, el->pids[k]))
                dead[ndead++] = k;
        st = coll_comm_shrink(r->comm, dead, ndead, &small);
        if (st == COLL_SUCCESS)
            break;
        printf("elastic: rank %d: shrink without %d rank(s) failed (%s); trying again\n",
               r->rank, ndead, coll_last_error(NULL));
        fflush(stdout);
    }
    if (st != COLL_SUCCESS) {
        fprintf(stderr, "dptrain: rank %d: no shrink succeeded: %s\n", r->rank,
                coll_last_error(NULL));
        exit(1);
    }
    for (int i = 0; i < ndead && el->nlost < ELASTIC_MAX_JOIN; i++) {
        el->lost[el->nlost] = dead[i];
        el->lost_pid[el->nlost++] = el->pids[dead[i]];
    }
    /* pids by new rank: the survivors in their old order */
    int k = 0;
    for (int i = 0, j = 0; i < r->nranks; i++) {
        if (j < ndead && dead[j] == i) {
            j++;
            continue;
        }
        el->pids[k++] = el->pids[i];
    }
    free(dead);
    coll_comm_destroy(r->comm);
    r->comm = small;
    coll_comm_rank(r->comm, &r->rank);
    coll_comm_size(r->comm, &r->nranks);
    r->failed = COLL_SUCCESS;
    el->need_sync = true;
}

/* At a step boundary: rank 0 looks for joiners and tells the others (one small broadcast
 * a step); if there are, the members grow the comm. A grow that fails leaves the members
 * on the old comm. Returns true when the comm changed (sync next). */
static bool el_admit(struct run *r, struct el *el, const struct opts *o, long step)
{
    struct {
        int64_t n;
        int64_t pids[ELASTIC_MAX_JOIN];
        coll_unique_id_t id;
    } ctl;
    char err[ERRLEN];
    coll_comm_t *big = NULL;
    coll_status_t st;
    int64_t *pids;
    int n;

    memset(&ctl, 0, sizeof(ctl));
    if (r->rank == 0) {
        int room = o->batch - r->nranks; /* every rank needs a sample */
        ctl.n = elastic_joiners(&el->dir, ctl.pids, room < ELASTIC_MAX_JOIN ? room
                                                                           : ELASTIC_MAX_JOIN);
    }
    if (r->rank == 0 && ctl.n > 0) {
        st = coll_comm_grow_id(r->comm, &ctl.id);
        if (st != COLL_SUCCESS) {
            fprintf(stderr, "dptrain: rank 0: coll_comm_grow_id: %s\n", coll_last_error(NULL));
            ctl.n = 0;
        }
    }
    /* the grown comm's processes by rank: the members', then the joiners' */
    n = r->nranks + (int)ctl.n;
    pids = malloc((size_t)(r->nranks + ELASTIC_MAX_JOIN) * sizeof(*pids));
    if (!pids) {
        fprintf(stderr, "dptrain: rank %d: out of memory\n", r->rank);
        exit(1);
    }
    memcpy(pids, el->pids, (size_t)r->nranks * sizeof(*pids));
    for (int j = 0; r->rank == 0 && j < (int)ctl.n; j++)
        pids[r->nranks + j] = ctl.pids[j];
    for (int j = 0; r->rank == 0 && j < (int)ctl.n; j++)
        if (elastic_offer(&el->dir, ctl.pids[j], &ctl.id, n, r->nranks + j, pids, err,
                          sizeof(err)) != 0)
            fprintf(stderr, "dptrain: rank 0: %s\n", err);
    if (ctl.n > 0)
        maybe_die(r, "offer", step);
    st = coll_broadcast(&ctl, &ctl, sizeof(ctl), COLL_UINT8, 0, r->comm);
    if (st != COLL_SUCCESS) {
        free(pids);
        die_coll(r, st, "coll_broadcast (elastic: joiners)");
        return false;
    }
    if (ctl.n <= 0 || ctl.n > ELASTIC_MAX_JOIN) {
        free(pids);
        return false;
    }
    n = r->nranks + (int)ctl.n;
    for (int j = 0; j < (int)ctl.n; j++)
        pids[r->nranks + j] = ctl.pids[j];
    double t0 = now_s();
    st = coll_comm_grow(r->comm, n, &ctl.id, &big);
    if (st != COLL_SUCCESS) {
        if (r->rank == 0)
            printf("elastic: grow to %d ranks failed (%s); going on with %d\n", n,
                   coll_last_error(NULL), r->nranks);
        fflush(stdout);
        free(pids);
        return false;
    }
    coll_comm_destroy(r->comm);
    r->comm = big;
    r->nranks = n;
    free(el->pids);
    el->pids = pids;
    el->grows++;
    el->need_sync = true;
    if (r->rank == 0) {
        printf("elastic: grow %d: %lld rank(s) joined at step %ld, %d ranks, in %.3f s\n",
               el->grows, (long long)ctl.n, step, n, now_s() - t0);
        fflush(stdout);
    }
    return true;
}

/* ---------------------------------------------------------------------------------------
 * Plotting: the data go to PREFIX-steps.dat (every step), PREFIX-time.dat (window means) and
 * PREFIX-eval.dat, which gnuplot reads.
 */
struct history {
    size_t n, cap;
    double *step_compute, *step_comm, *step_wait, *step_loss;
    size_t neval, evcap;
    double *eval_step, *eval_acc, *eval_bytes;
};

/* Appends one row to ncols parallel arrays of n rows, growing them all together. */
static void hist_push(size_t n, size_t *cap, size_t ncols, double *vals[], const double add[])
{
    if (n == *cap) {
        *cap = *cap ? *cap * 2 : 1024;
        for (size_t c = 0; c < ncols; c++) {
            double *p = realloc(vals[c], *cap * sizeof(double));
            if (!p) {
                fprintf(stderr, "dptrain: out of memory for step history\n");
                exit(1);
            }
            vals[c] = p;
        }
    }
    for (size_t c = 0; c < ncols; c++)
        vals[c][n] = add[c];
}

static void hist_step(struct history *h, double compute, double comm, double wait, double loss)
{
    double *cols[4] = {h->step_compute, h->step_comm, h->step_wait, h->step_loss};
    double add[4] = {compute, comm, wait, loss};
    hist_push(h->n, &h->cap, 4, cols, add);
    h->step_compute = cols[0];
    h->step_comm = cols[1];
    h->step_wait = cols[2];
    h->step_loss = cols[3];
    h->n++;
}

static void hist_eval(struct history *h, double step, double acc, double bytes)
{
    double *cols[3] = {h->eval_step, h->eval_acc, h->eval_bytes};
    double add[3] = {step, acc, bytes};
    hist_push(h->neval, &h->evcap, 3, cols, add);
    h->eval_step = cols[0];
    h->eval_acc = cols[1];
    h->eval_bytes = cols[2];
    h->neval++;
}

/* gnuplot's range of an axis: automatic, unless the data span a single value (one
 * evaluation, one window of steps), which gnuplot would widen itself with a warning. */
static void plot_range(FILE *f, const char *axis, const double *v, size_t n, double scale)
{
    double lo = INFINITY, hi = -INFINITY, d;

    for (size_t i = 0; i < n; i++) {
        lo = fmin(lo, v[i] * scale);
        hi = fmax(hi, v[i] * scale);
    }
    if (n == 0 || hi > lo) {
        fprintf(f, "set %srange [*:*]\n", axis);
        return;
    }
    d = fabs(lo) * 0.05 + 1e-3;
    fprintf(f, "set %srange [%.9g:%.9g]\n", axis, lo - d, hi + d);
}

static int write_plots(const char *prefix, const struct history *h, long first_step, int nranks)
{
    char path[4096];
    double tx[2] = {0, 0}, tmax = 0; /* the time plot's first and last step, largest sum */
    size_t trows = 0;
    FILE *f;
    int st;

    snprintf(path, sizeof(path), "%s-steps.dat", prefix);
    if (!(f = fopen(path, "w")))
        goto out_file;
    fprintf(f, "# step compute_ms comm_ms wait_ms loss\n");
    for (size_t i = 0; i < h->n; i++)
        fprintf(f, "%ld %.4f %.4f %.4f %.6f\n", first_step + (long)i + 1,
                h->step_compute[i] * 1e3, h->step_comm[i] * 1e3, h->step_wait[i] * 1e3,
                h->step_loss[i]);
    fclose(f);
    /* Per-step times are noisy (a shared machine): the plot shows means over about 200
     * windows. */
    snprintf(path, sizeof(path), "%s-time.dat", prefix);
    if (!(f = fopen(path, "w")))
        goto out_file;
    fprintf(f, "# step compute_ms comm_ms wait_ms (means over %zu steps)\n",
            h->n / 200 + 1);
    for (size_t i = 0, w = h->n / 200 + 1; i < h->n; i += w) {
        double c = 0, m = 0, wt = 0;
        size_t k;
        for (k = i; k < i + w && k < h->n; k++) {
            c += h->step_compute[k];
            m += h->step_comm[k];
            wt += h->step_wait[k];
        }
        k -= i;
        fprintf(f, "%ld %.4f %.4f %.4f\n", first_step + (long)i + 1, c / k * 1e3, m / k * 1e3,
                wt / k * 1e3);
        tx[trows ? 1 : 0] = (double)(first_step + (long)i + 1);
        if (!trows)
            tx[1] = tx[0];
        tmax = fmax(tmax, (c + m + wt) / k * 1e3);
        trows++;
    }
    fclose(f);
    snprintf(path, sizeof(path), "%s-eval.dat", prefix);
    if (!(f = fopen(path, "w")))
        goto out_file;
    fprintf(f, "# step test_accuracy bytes_sent_by_rank0\n");
    for (size_t i = 0; i < h->neval; i++)
        fprintf(f, "%.0f %.6f %.0f\n", h->eval_step[i], h->eval_acc[i], h->eval_bytes[i]);
    fclose(f);

    f = popen("gnuplot", "w");
    if (!f) {
        fprintf(stderr, "dptrain: cannot run gnuplot: %s\n", strerror(errno));
        return -1;
    }
    fprintf(f,
            "set terminal pngcairo size 900,500\n"
            "set grid\n"
            "set output '%1$s-accuracy.png'\n"
            "set title 'test accuracy, %2$d rank(s)'\n"
            "set xlabel 'optimizer step'\nset ylabel 'accuracy'\n",
            prefix, nranks);
    plot_range(f, "x", h->eval_step, h->neval, 1.0);
    plot_range(f, "y", h->eval_acc, h->neval, 1.0);
    fprintf(f,
            "plot '%1$s-eval.dat' using 1:2 with linespoints title 'test accuracy'\n"
            "set output '%1$s-bytes.png'\n"
            "set title 'test accuracy vs bytes sent by rank 0 (coll counter), %2$d rank(s)'\n"
            "set xlabel 'MB sent'\n",
            prefix, nranks);
    plot_range(f, "x", h->eval_bytes, h->neval, 1e-6);
    fprintf(f,
            "plot '%1$s-eval.dat' using ($3/1e6):2 with linespoints title 'test accuracy'\n"
            "set xlabel 'optimizer step'\n"
            "set output '%1$s-time.png'\n"
            "set title 'time per step (window means), %2$d rank(s)'\n"
            "set ylabel 'ms'\nset style fill solid 0.8 noborder\n",
            prefix, nranks);
    plot_range(f, "x", tx, trows ? 2 : 0, 1.0);
    fprintf(f, "set yrange [0:%.9g]\n", tmax > 0 ? tmax * 1.1 : 1.0);
    fprintf(f,
            "plot '%1$s-time.dat' using 1:($2+$3+$4) with filledcurves x1 title 'wait', "
            "'' using 1:($2+$3) with filledcurves x1 title 'communication (in coll calls)', "
            "'' using 1:2 with filledcurves x1 title 'compute'\n",
            prefix);
    st = pclose(f);
    if (st != 0) {
        fprintf(stderr, "dptrain: gnuplot failed (status %d)\n", st);
        return -1;
    }
    return 0;

out_file:
    fprintf(stderr, "dptrain: cannot write '%s': %s\n", path, strerror(errno));
    return -1;
}

/* ---------------------------------------------------------------------------------------
 * The training loop and main.
 */
int main(int argc, char **argv)
{
    struct opts o;
    struct run r = {.rank = 0, .nranks = 1};
    struct mlp m = {0};
    struct optim opt = {0};
    struct dataset train = {0}, test = {0};
    struct ddp d = {0};
    struct history hist = {0};
    struct diloco dl = {0};
    struct qworker qw = {0};
    struct dp_rng rng;
    char err[ERRLEN];
    uint32_t *perm = NULL;
    float *xb = NULL;
    uint8_t *yb = NULL;
    long steps_per_epoch, total_steps, start_step = 0;
    int perm_epoch = -1, ret = 1;
    double tot_compute = 0, tot_comm = 0, tot_wait = 0, run_t0, epoch_t0, epoch_time_sum = 0;
    int epochs_timed = 0;
    double acc = 0, test_loss = 0;
    FILE *metrics = NULL;
    coll_status_t st;
    struct el el = {.dir = {.live_fd = -1}};
    long step, acc_step = -1;

    if (parse_opts(argc, argv, &o) != 0)
        return EXIT_USAGE;
    r.o = &o;
    if (mlp_parse_sizes(&m, o.sizes, err, sizeof(err)) != 0) {
        fprintf(stderr, "dptrain: %s\n", err);
        return EXIT_USAGE;
    }
    if (o.schedule) { /* no data, no ranks: just the fragments and their turns */
        if (mlp_init(&m, 1, err, sizeof(err)) != 0 || diloco_init(&dl, &m, &o, err,
                                                                  sizeof(err)) != 0) {
            fprintf(stderr, "dptrain: %s\n", err);
            ret = 1;
        } else {
            diloco_print_schedule(&dl, &o, m.nparams);
            ret = 0;
        }
        diloco_free(&dl);
        mlp_free(&m);
        return ret;
    }

    if (o.elastic) {
        /* Recoveries and grows bootstrap while the job waits: a member or joiner that
         * never comes must cost seconds, not the default minutes. */
        setenv("COLL_BOOTSTRAP_TIMEOUT_MS", "5000", 0);
        r.elastic = true;
        if (elastic_open(&el.dir, o.elastic, err, sizeof(err)) != 0 ||
            el_form(&r, &el, &o, err, sizeof(err)) != 0) {
            fprintf(stderr, "dptrain: %s\n", err);
            elastic_close(&el.dir);
            return 1;
        }
        el.need_sync = true;
    } else if (getenv("COLL_UNIQUE_ID")) {
        st = coll_comm_init_env(&r.comm);
        if (st != COLL_SUCCESS) {
            fprintf(stderr, "dptrain: coll_comm_init_env failed: %s: %s\n",
                    coll_status_string(st), coll_last_error(NULL));
            return 1;
        }
        coll_comm_rank(r.comm, &r.rank);
        coll_comm_size(r.comm, &r.nranks);
        if (check_flags(&r, &o, err, sizeof(err)) != 0) {
            fprintf(stderr, "dptrain: rank %d: %s\n", r.rank, err);
            goto out_comm;
        }
    }
    if (o.batch < r.nranks) {
        fprintf(stderr, "dptrain: --batch %d is smaller than the %d ranks: every rank needs a "
                "sample per micro-batch\n", o.batch, r.nranks);
        ret = EXIT_USAGE;
        goto out_comm;
    }

    /* Data: every rank holds the whole set and reads only its slices (it is small). */
    if (o.synthetic) {
        if (dataset_synthetic(&train, o.synthetic, m.sizes[0], m.sizes[m.nlayers], o.seed,
                              err, sizeof(err)) != 0 ||
            dataset_synthetic(&test, o.synthetic / 4 + 1, m.sizes[0], m.sizes[m.nlayers],
                              o.seed + 0x7e57, err, sizeof(err)) != 0)
            goto out_err;
    } else if (dataset_load_idx(&train, o.data_dir, 0, m.sizes[0], m.sizes[m.nlayers], err,
                                sizeof(err)) != 0 ||
               dataset_load_idx(&test, o.data_dir, 1, m.sizes[0], m.sizes[m.nlayers], err,
                                sizeof(err)) != 0) {
        /* a first run most often has no dataset at all: say how to get one */
        if (strncmp(err, "cannot open dataset file", 24) == 0) {
            size_t l = strlen(err);
            snprintf(err + l, sizeof(err) - l,
                     "\n  install Fashion-MNIST (apt-get install dataset-fashion-mnist puts it "
                     "in " DEFAULT_DATA "),\n  point --data DIR at a directory of its IDX "
                     "files, or train on --synthetic N generated samples");
        }
        goto out_err;
    }
    steps_per_epoch = train.n / ((long)o.batch * o.accum);
    if (steps_per_epoch < 1) {
        snprintf(err, sizeof(err), "the training set (%d samples) is smaller than one step "
                 "(batch %d x accum %d)", train.n, o.batch, o.accum);
        goto out_err;
    }
    total_steps = o.steps ? o.steps : steps_per_epoch * o.epochs;

    /* The micro-batch buffer holds a rank's slice, or an evaluation chunk; elastic: the
     * slice of a comm shrunk to one rank. */
    int cap_ranks = o.elastic ? 1 : r.nranks;
    if (mlp_init(&m, o.batch / cap_ranks + 1 > 256 ? o.batch / cap_ranks + 1 : 256, err,
                 sizeof(err)) != 0)
        goto out_err;
    opt = (struct optim){
        .kind = o.optim, .lr = o.lr, .momentum = o.momentum, .beta1 = o.beta1,
        .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay,
    };
    if (optim_init(&opt, m.nparams, err, sizeof(err)) != 0)
        goto out_err;
    perm = malloc((size_t)train.n * sizeof(*perm));
    xb = malloc((size_t)m.cap * m.sizes[0] * sizeof(float));
    yb = malloc((size_t)m.cap);
    if (!perm || !xb || !yb) {
        snprintf(err, sizeof(err), "out of memory");
        goto out_err;
    }

    d = (struct ddp){.run = &r, .m = &m};
    ddp_make_buckets(&d, o.bucket_mb);
    if (o.diloco && diloco_init(&dl, &m, &o, err, sizeof(err)) != 0)
        goto out_err;
    if (o.quant >= 0 && r.comm) {
        if (qworker_init(&qw, r.comm, (coll_quant_codec_t)o.quant, err, sizeof(err)) != 0)
            goto out_err;
        r.qw = &qw;
        for (int k = 0; o.feedback && !o.diloco && k < d.nbuckets; k++)
            if (qworker_feedback(&qw, d.b[k].count, &d.b[k].fb, err, sizeof(err)) != 0)
                goto out_err;
        for (int f = 0; o.feedback && o.diloco && f < dl.nfrag; f++)
            if (qworker_feedback(&qw, dl.frag_off[f + 1] - dl.frag_off[f], &dl.fb[f], err,
                                 sizeof(err)) != 0)
                goto out_err;
        if (qworker_start(&qw, err, sizeof(err)) != 0)
            goto out_err;
    }

    dp_rng_seed(&rng, o.seed);
    if (o.resume) {
        /* Every rank reads the file (it is on a shared or local filesystem) and checks it,
         * so a rank with a bad copy fails loudly instead of diverging. */
        struct ckpt_header got;
        if (load_checkpoint(&r, &o, &m, &opt, &dl, &got, err, sizeof(err)) != 0)
            goto out_err;
        start_step = (long)got.step;
        if (start_step >= total_steps) {
            snprintf(err, sizeof(err), "checkpoint '%s' is at step %ld: nothing left to do "
                     "for a run of %ld steps (raise --steps or --epochs)", o.resume,
                     start_step, total_steps);
            goto out_err;
        }
        opt.t = got.optim_t;
        rng.s = got.rng_state;
        if (got.seed != o.seed || got.batch != (uint32_t)o.batch ||
            got.accum != (uint32_t)o.accum)
            if (r.rank == 0)
                fprintf(stderr, "dptrain: note: checkpoint had seed %llu batch %u accum %u; "
                        "continuing with this run's settings\n",
                        (unsigned long long)got.seed, got.batch, got.accum);
    } else {
        if (r.rank == 0)
            mlp_init_weights(&m, dp_rng_next(&rng));
        else
            dp_rng_next(&rng); /* keep every rank's generator in the same state */
        if (!o.elastic) /* elastic: the first sync broadcasts everything */
            broadcast_floats(&r, m.params, m.nparams);
        if (o.diloco)
            memcpy(dl.global, m.params, m.nparams * sizeof(float));
    }
    step = start_step;
    if (o.elastic) {
        /* the first members' state: rank 0's (or the checkpoint's); a joiner has none */
        el.have_state = el.have_state && (r.rank == 0 || o.resume);
        while (el_sync(&r, &el, &o, &m, &opt, &dl, &step, err, sizeof(err)) != 0)
            el_recover(&r, &el);
    }

    if (r.rank == 0) {
        printf("dptrain: %d rank(s), model %s (%zu parameters, %.2f MB), %s lr %g, global "
               "batch %d x accum %d, %ld steps/epoch, %d bucket(s) of <= %g MB, %s\n",
               r.nranks, o.sizes, m.nparams, m.nparams * 4 / 1e6,
               o.optim == OPTIM_ADAMW ? "adamw" : "sgd", o.lr, o.batch, o.accum,
               steps_per_epoch, d.nbuckets, o.bucket_mb,
               o.synthetic ? "synthetic data" : o.data_dir);
        if (o.diloco)
            printf("dptrain: DiLoCo: %d inner steps per sync, %d fragment(s), outer Nesterov "
                   "lr %g momentum %g (no gradient all-reduce), %s\n", o.diloco, dl.nfrag,
                   o.outer_lr, o.outer_momentum,
                   o.overlap < 0 ? "blocking syncs" : "overlapped syncs");
        if (o.diloco && o.overlap >= 0)
            printf("dptrain: overlap: outer step lands %d inner step(s) after its all-reduce "
                   "starts, mixing factor alpha %g\n", o.overlap, o.mix);
        if (o.quant >= 0)
            printf("dptrain: %s cross the wire as %s, %s error feedback%s\n",
                   o.diloco ? "outer gradients" : "gradients", qworker_codec_name(o.quant),
                   o.feedback ? "with" : "without", r.comm ? "" : " (alone: no effect)");
        if (o.diloco && o.optim == OPTIM_SGD)
            printf("dptrain: note: DiLoCo's inner optimizer is AdamW (--optim adamw); this "
                   "run's is sgd%s\n", o.optim_set ? "" : ", the default");
        if (start_step)
            printf("dptrain: resumed from '%s' at step %ld\n", o.resume, start_step);
        if (start_step && o.quant >= 0 && o.feedback && r.comm)
            printf("dptrain: note: error feedback starts again from zero residuals (the "
                   "checkpoint holds none), so the run differs a little from one that was "
                   "not interrupted\n");
        fflush(stdout);
        if (o.metrics) {
            metrics = fopen(o.metrics, "w");
            if (!metrics) {
                snprintf(err, sizeof(err), "cannot write --metrics '%s': %s", o.metrics,
                         strerror(errno));
                goto out_err;
            }
            fprintf(metrics, "step,epoch,train_loss,test_accuracy,test_loss,compute_ms,comm_ms,"
                             "wait_ms,bytes_sent_rank0\n");
        }
    }

    r.comm_s = r.wait_s = 0; /* the run's accounting starts with its steps */
    run_t0 = epoch_t0 = now_s();
    double epoch_loss = 0, epoch_samples = 0;
    for (;;) {
        if (o.elastic && el.need_sync &&
            el_sync(&r, &el, &o, &m, &opt, &dl, &step, err, sizeof(err)) != 0)
            goto recover;
        if (step >= total_steps)
            break;
        if (o.elastic) {
            /* every member is at the same step between syncs, so all look alike */
            if (step % o.join_every == 0 && el_admit(&r, &el, &o, step))
                continue; /* a grown comm: sync first */
            if (r.failed)
                goto recover;
            el.reached = step + 1;
        }
        d.step = dl.step = step;
        int epoch = (int)(step / steps_per_epoch);
        long pos = step % steps_per_epoch;
        double t0 = now_s(), comm0 = r.comm_s, wait0 = r.wait_s, loss = 0;
        int begin, end;
        float scale = 1.0f / ((float)o.batch * o.accum);

        if (epoch != perm_epoch) {
            sampler_permute(perm, train.n, o.seed, epoch);
            perm_epoch = epoch;
        }
        memset(m.grads, 0, m.nparams * sizeof(float));
        sampler_slice(o.batch, r.rank, r.nranks, &begin, &end);
        if (o.diloco) /* workers step alone: the mean over their own samples */
            scale = 1.0f / ((float)(end - begin) * o.accum);
        for (int a = 0; a < o.accum; a++) {
            long first = (pos * o.accum + a) * (long)o.batch;
            long correct = 0;
            int n = end - begin;

            gather_batch(&train, perm + first + begin, n, xb, yb);
            loss += mlp_forward(&m, xb, yb, n, &correct);
            d.sync = a == o.accum - 1 && !o.diloco;
            mlp_backward(&m, yb, n, scale, ddp_layer_done, &d);
        }
        ddp_wait_all(&d);
        if (r.failed) /* the gradients are not the global ones: no step with them */
            goto recover;
        if (o.cosine) /* a function of the step alone, so a resumed run follows it too */
            opt.lr = o.lr * 0.5 * (1.0 + cos(M_PI * (double)step / (double)total_steps));
        optim_step(&opt, m.params, m.grads, m.nparams);
        if (o.diloco) /* the last step syncs everything, so all replicas end equal */
            diloco_step(&dl, &r, &m, &o, step + 1, step + 1 == total_steps);
        if (r.failed)
            goto recover;

        double comm = r.comm_s - comm0, wait = r.wait_s - wait0;
        double compute = now_s() - t0 - comm - wait;
        tot_compute += compute;
        tot_comm += comm;
        tot_wait += wait;
        epoch_loss += loss;
        epoch_samples += end - begin;
        if (r.rank == 0)
            hist_step(&hist, compute, comm, wait, loss / ((end - begin) * (double)o.accum));

        bool last = step + 1 == total_steps;
        bool epoch_end = (step + 1) % steps_per_epoch == 0;
        if ((o.log_every && (step + 1) % o.log_every == 0) || (!o.log_every && epoch_end)) {
            double t[2] = {epoch_loss, epoch_samples};
            allreduce_doubles(&r, t, 2);
            if (r.failed)
                goto recover_done; /* the step itself is done */
            if (r.rank == 0)
                printf("step %ld epoch %d: train loss %.4f (mean since last report); step "
                       "compute %.2f ms, comm %.2f ms, wait %.2f ms\n", step + 1, epoch,
                       t[0] / t[1], compute * 1e3, comm * 1e3, wait * 1e3);
            if (metrics)
                fprintf(metrics, "%ld,%d,%.6f,,,%.4f,%.4f,%.4f,%.0f\n", step + 1, epoch,
                        t[0] / t[1], compute * 1e3, comm * 1e3, wait * 1e3, bytes_sent(&r));
            epoch_loss = epoch_samples = 0;
        }
        if (epoch_end) {
            double dt = now_s() - epoch_t0;
            epoch_time_sum += dt;
            epochs_timed++;
            if (r.rank == 0)
                printf("epoch %d done in %.2f s\n", epoch, dt);
        }
        if ((o.eval_every && (step + 1) % o.eval_every == 0) ||
            (!o.eval_every && epoch_end) || last) {
            evaluate(&r, &m, &test, xb, yb, &acc, &test_loss);
            if (r.failed)
                goto recover_done;
            acc_step = step + 1;
            if (r.rank == 0) {
                printf("step %ld: test accuracy %.4f, test loss %.4f\n", step + 1, acc,
                       test_loss);
                hist_eval(&hist, (double)(step + 1), acc, bytes_sent(&r));
                if (metrics)
                    fprintf(metrics, "%ld,%d,,%.6f,%.6f,,,,%.0f\n", step + 1, epoch, acc,
                            test_loss, bytes_sent(&r));
            }
        }
        if (o.ckpt && ((o.ckpt_every && (step + 1) % o.ckpt_every == 0) || last) &&
            save_checkpoint(&r, &o, &m, &opt, &dl, (uint64_t)(step + 1), rng.s, err,
                            sizeof(err)) != 0)
            goto out_err;
        if (r.failed)
            goto recover_done;
        fflush(stdout);
        if (epoch_end)
            epoch_t0 = now_s(); /* evaluation and checkpoints are not the epoch's time */
        if (o.stop_after && step + 1 == o.stop_after && !last) {
            /* As a crash would: no final sync, so DiLoCo replicas still differ. The
             * outer all-reduces in flight are drained so the comm closes cleanly. */
            for (int f = 0; o.diloco && f < dl.nfrag; f++)
                if (dl.pending[f])
                    diloco_reduced(&dl, &r, f);
            if (r.rank == 0)
                printf("dptrain: stopped after step %ld (--stop-after)\n", o.stop_after);
            ret = 0;
            goto out_free;
        }
        step++;
        continue;
    recover_done:
        step++; /* this rank finished the step; the sync decides where all go on */
    recover:
        for (int k = 0; k < d.nbuckets; k++)
            d.b[k].req = NULL; /* freed with the failed comm */
        el_recover(&r, &el);
    }
    /* elastic: an evaluation of the last step lost to a failure is done again */
    while (o.elastic && acc_step != total_steps) {
        evaluate(&r, &m, &test, xb, yb, &acc, &test_loss);
        if (!r.failed) {
            acc_step = total_steps;
            if (r.rank == 0)
                printf("step %ld: test accuracy %.4f, test loss %.4f\n", total_steps, acc,
                       test_loss);
            break;
        }
        el_recover(&r, &el);
        while (el_sync(&r, &el, &o, &m, &opt, &dl, &step, err, sizeof(err)) != 0)
            el_recover(&r, &el);
        if (step < total_steps) {
            snprintf(err, sizeof(err), "a recovery after the last step went back to step "
                     "%ld", step);
            goto out_err;
        }
    }

    /* Every replica must hold the same parameters now (DDP: always; DiLoCo: after the
     * final sync). Bitwise: the max and min of a fingerprint over the ranks must agree. */
    {
        double cs = mlp_checksum(&m), mm[2] = {cs, -cs};
        coll_status_t cst;
        if (r.comm) {
            cst = coll_allreduce(mm, mm, 2, COLL_FLOAT64, COLL_MAX, r.comm);
            if (cst != COLL_SUCCESS && o.elastic) {
                /* the sync after the recovery checks the replicas bit for bit itself */
                die_coll(&r, cst, "coll_allreduce (replica check)");
                el_recover(&r, &el);
                while (el_sync(&r, &el, &o, &m, &opt, &dl, &step, err, sizeof(err)) != 0)
                    el_recover(&r, &el);
                mm[0] = cs;
                mm[1] = -cs;
            } else if (cst != COLL_SUCCESS) {
                die_coll(&r, cst, "coll_allreduce (replica check)");
            }
        }
        if (mm[0] != -mm[1]) {
            snprintf(err, sizeof(err), "replicas differ at the end: parameter checksums range "
                     "from %.17g to %.17g", -mm[1], mm[0]);
            goto out_err;
        }
        if (r.rank == 0)
            printf("replicas: all %d hold identical parameters\n", r.nranks);
    }
    if (r.rank == 0) {
        long steps = total_steps - start_step;
        double wall = now_s() - run_t0;
        /* The log lines give one step each; these are means over the run's steps, of the
         * steps alone: evaluations, checkpoints and the log are in the wall time only. */
        printf("summary: %ld steps in %.2f s (evaluations and checkpoints included); per step, "
               "mean over the steps alone: compute %.3f ms, communication %.3f ms (inside coll "
               "calls), waiting %.3f ms (coll_wait)\n", steps, wall,
               steps ? tot_compute / steps * 1e3 : 0, steps ? tot_comm / steps * 1e3 : 0,
               steps ? tot_wait / steps * 1e3 : 0);
        printf("summary: all-reduce/broadcast payload %.1f MB (fp32), bytes sent by rank 0 "
               "%.3f MB (coll_comm_bytes_sent)\n", r.payload_bytes / 1e6,
               bytes_sent(&r) / 1e6);
        if (epochs_timed)
            printf("summary: %.3f s per epoch (mean of %d), final test accuracy %.4f\n",
                   epoch_time_sum / epochs_timed, epochs_timed, acc);
        else
            printf("summary: final test accuracy %.4f\n", acc);
        if (o.diloco)
            printf("summary: DiLoCo: %ld fragment syncs of %d fragment(s)\n", dl.syncs,
                   dl.nfrag);
        printf("weights: step %ld norm %.9g checksum %.9g\n", total_steps, mlp_norm(&m),
               mlp_checksum(&m));
        if (o.elastic)
            printf("summary: elastic: %d recovery(ies), %d grow(s), %d ranks at the end\n",
                   el.recoveries, el.grows, r.nranks);
        fflush(stdout);
        if (o.plot && write_plots(o.plot, &hist, start_step, r.nranks) != 0)
            goto out_free;
        if (o.dump_weights && dump_weights(o.dump_weights, &m) != 0)
            goto out_free;
        if (o.check_weights) {
            ret = check_weights(o.check_weights, &m, o.tol);
            goto out_free;
        }
    }
    ret = 0;
    goto out_free;

out_err:
    fprintf(stderr, "dptrain: rank %d: %s\n", r.rank, err);
    ret = 1;
out_free:
    if (metrics && (ferror(metrics) | (fclose(metrics) != 0))) {
        fprintf(stderr, "dptrain: error writing --metrics '%s'\n", o.metrics);
        ret = 1;
    }
    free(hist.step_compute);
    free(hist.step_comm);
    free(hist.step_wait);
    free(hist.step_loss);
    free(hist.eval_step);
    free(hist.eval_acc);
    free(hist.eval_bytes);
    diloco_free(&dl);
    for (int k = 0; k < d.nbuckets; k++)
        coll_quant_feedback_destroy(d.b[k].fb);
    qworker_fini(&qw);
    free(perm);
    free(xb);
    free(yb);
    optim_free(&opt);
    mlp_free(&m);
    dataset_free(&train);
    dataset_free(&test);
out_comm:
    coll_comm_destroy(r.comm);
    free(el.pids);
    elastic_close(&el.dir);
    return ret;
}
