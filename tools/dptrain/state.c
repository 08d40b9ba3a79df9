/*
 * state.c - checkpoints (the file format is ckpt.h's) and weights files.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "dptrain.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
int save_checkpoint(struct run *r, const struct opts *o, const struct mlp *m,
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
int load_checkpoint(struct run *r, const struct opts *o, struct mlp *m,
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


int dump_weights(const char *path, const struct mlp *m)
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
int check_weights(const char *path, const struct mlp *m, double tol)
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

