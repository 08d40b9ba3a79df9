/*
 * plot.c - the step history and its plots: the data go to PREFIX-steps.dat (every
 * step), PREFIX-time.dat (window means) and PREFIX-eval.dat, which gnuplot reads.
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

void hist_step(struct history *h, double compute, double comm, double wait, double loss)
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

void hist_eval(struct history *h, double step, double acc, double bytes)
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

int write_plots(const char *prefix, const struct history *h, long first_step, int nranks)
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

