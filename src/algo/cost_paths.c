/*
 * cost_paths.c - the cost model's rows for the paths that are made of other calls: a
 * stream-ordered call (copies around a host collective, or CUDA IPC's kernels) and the
 * quantized all-reduce (a codec's bytes through a sequence of exchanges). The formulas and
 * what each term stands for are in cost.h; they price, they do not choose.
 */
#include "cost.h"

double coll__cost_predict_stream(const struct coll_cost_params *p,
                                 const struct coll_cost_stream *q)
{
    const struct coll_link_cost *cuda = &p->link[COLL_LINK_CUDA];

    if (!q->ipc)
        return q->host_seconds + (double)(q->in_bytes + q->out_bytes) * p->copy;
    return (double)(q->pieces + 1) * q->host_seconds + (double)q->pieces * cuda->alpha +
           (double)(q->in_bytes + q->read_bytes + q->out_bytes) * cuda->beta;
}

double coll__cost_predict_quant(const struct coll_cost_params *p,
                                const struct coll_cost_quant *q)
{
    const struct coll_link_cost *l = &p->link[q->link];
    double n = q->nranks > 0 ? (double)q->nranks : 1;
    double f = 4.0 * (double)q->count, g = p->gamma[COLL_FLOAT32];
    double e = q->ratio * (double)q->count * (double)q->elem_size;

    if (n <= 1)
        return f * g * 2;
    if (q->gather)
        return (n - 1) * (l->alpha + e * l->beta) + f * g * (1 + n);
    return 2 * (n - 1) * (l->alpha + e / n * l->beta) + f * g * (3 + 1 / n);
}
