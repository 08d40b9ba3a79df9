/*
 * ddp.c - timing, the comm wrappers, the gradient buckets of the DDP step, and the
 * evaluation. comm is NULL when dptrain runs alone: the collectives then reduce over one
 * rank, which is the identity.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "dptrain.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void die_coll(struct run *r, coll_status_t st, const char *what)
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
void maybe_die(const struct run *r, const char *point, long step)
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
double bytes_sent(const struct run *r)
{
    uint64_t b = 0;

    if (!r->comm)
        return 0;
    coll_comm_bytes_sent(r->comm, &b);
    return (double)b + (r->qw ? (double)atomic_load(&r->qw->bytes_sent) : 0.0);
}

void allreduce_doubles(struct run *r, double *buf, int n)
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

void broadcast_floats(struct run *r, float *buf, size_t n)
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

void ddp_make_buckets(struct ddp *d, double bucket_mb)
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
void ddp_layer_done(int l, void *arg)
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

void ddp_wait_all(struct ddp *d)
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
 * Evaluation: each rank scores its share of the test set; the counts are summed.
 */
void gather_batch(const struct dataset *ds, const uint32_t *idx, int n, float *x,
                  uint8_t *y)
{
    for (int i = 0; i < n; i++) {
        uint32_t s = idx[i];
        memcpy(x + (size_t)i * ds->dim, ds->x + (size_t)s * ds->dim, ds->dim * sizeof(float));
        y[i] = ds->y[s];
    }
}

void evaluate(struct run *r, struct mlp *m, const struct dataset *test, float *x,
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

