/*
 * options.c - dptrain's command line: the usage text, the parsing and its checks, and
 * the check that every rank was started with the same flags.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "dptrain.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int parse_opts(int argc, char **argv, struct opts *o)
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

/* Every rank must run the same schedule: flags that decide which collectives run, with
 * what sizes, or what the replicas compute. Compared at start (the max and min of each over
 * the ranks must agree), so a launch with mixed flags fails with a message instead of
 * hanging in mismatched collectives or silently diverging. */
int check_flags(struct run *r, const struct opts *o, char *err, size_t errlen)
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

