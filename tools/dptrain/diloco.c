/*
 * diloco.c - DiLoCo (Douillard et al. 2023) and Streaming DiLoCo (Douillard et al. 2025).
 *
 * Workers train alone for H inner steps (their own optimizer, no gradient all-reduce), then
 * average how far they moved from the last global parameters, the "outer gradient"
 * delta = global - local, and take an outer SGD step with Nesterov momentum on it.
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
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "dptrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int diloco_init(struct diloco *dl, const struct mlp *m, const struct opts *o,
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

void diloco_free(struct diloco *dl)
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
void diloco_reduced(struct diloco *dl, struct run *r, int f)
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
void diloco_step(struct diloco *dl, struct run *r, struct mlp *m, const struct opts *o,
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
void diloco_print_schedule(const struct diloco *dl, const struct opts *o, size_t nparams)
{
    printf("schedule: H %d fragments %d parameters %zu\n", o->diloco, dl->nfrag, nparams);
    for (long t = 1; t <= o->diloco; t++)
        for (int f = 0; f < dl->nfrag; f++)
            if (diloco_due(dl, o, f, t))
                printf("step %ld fragment %d params %zu %zu\n", t, f, dl->frag_off[f],
                       dl->frag_off[f + 1]);
}

