/*
 * mlp.c - forward and backward passes of the MLP and its optimizers, in plain C loops.
 *
 * Shapes: a micro-batch of n samples; layer l maps act[l] (n x I) to act[l + 1] (n x O)
 * with W (I x O) and b (O). Inner loops run over O with unit stride, so the compiler
 * vectorizes them without -ffast-math. Samples go in tiles of 4 so that each row of W is
 * loaded once per tile rather than once per sample. Zero inputs (black pixels, ReLU cut-offs)
 * are skipped: they add nothing to the forward sums or to the weight gradient.
 */
#include "mlp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h" /* dp_rng */

#define TILE 4

int mlp_parse_sizes(struct mlp *m, const char *spec, char *err, size_t errlen)
{
    const char *p = spec;
    int n = 0;

    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v <= 0 || v > 1 << 20 || (*end != ',' && *end != '\0')) {
            snprintf(err, errlen, "bad layer sizes '%s': want positive integers like 784,256,10",
                     spec);
            return -1;
        }
        if (n > MLP_MAX_LAYERS) {
            snprintf(err, errlen, "bad layer sizes '%s': at most %d layers", spec,
                     MLP_MAX_LAYERS);
            return -1;
        }
        m->sizes[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (n < 2) {
        snprintf(err, errlen, "bad layer sizes '%s': need inputs and classes at least", spec);
        return -1;
    }
    m->nlayers = n - 1;
    return 0;
}

int mlp_init(struct mlp *m, int cap, char *err, size_t errlen)
{
    size_t off = 0;
    int widest = 0;

    for (int l = 0; l < m->nlayers; l++) {
        m->off[l] = off;
        off += (size_t)m->sizes[l] * m->sizes[l + 1] + m->sizes[l + 1];
    }
    m->off[m->nlayers] = off;
    m->nparams = off;
    for (int l = 0; l <= m->nlayers; l++)
        if (m->sizes[l] > widest)
            widest = m->sizes[l];
    m->cap = cap;
    m->params = calloc(off, sizeof(float));
    m->grads = calloc(off, sizeof(float));
    for (int l = 0; l <= m->nlayers; l++)
        m->act[l] = calloc((size_t)cap * m->sizes[l], sizeof(float));
    m->dact[0] = calloc((size_t)cap * widest, sizeof(float));
    m->dact[1] = calloc((size_t)cap * widest, sizeof(float));
    if (!m->params || !m->grads || !m->dact[0] || !m->dact[1])
        goto out_nomem;
    for (int l = 0; l <= m->nlayers; l++)
        if (!m->act[l])
            goto out_nomem;
    return 0;

out_nomem:
    snprintf(err, errlen, "out of memory for a model of %zu parameters", off);
    mlp_free(m);
    return -1;
}

void mlp_free(struct mlp *m)
{
    free(m->params);
    free(m->grads);
    for (int l = 0; l <= m->nlayers; l++)
        free(m->act[l]);
    free(m->dact[0]);
    free(m->dact[1]);
    m->params = m->grads = m->dact[0] = m->dact[1] = NULL;
    for (int l = 0; l <= m->nlayers; l++)
        m->act[l] = NULL;
}

void mlp_init_weights(struct mlp *m, uint64_t seed)
{
    struct dp_rng rng;

    dp_rng_seed(&rng, seed);
    for (int l = 0; l < m->nlayers; l++) {
        int in = m->sizes[l], out = m->sizes[l + 1];
        float *w = m->params + m->off[l];
        double std = sqrt(2.0 / in); /* He: keeps ReLU activations' variance across layers */

        for (size_t i = 0; i < (size_t)in * out; i++)
            w[i] = (float)(std * dp_rng_normal(&rng));
        memset(w + (size_t)in * out, 0, (size_t)out * sizeof(float));
    }
}

/* out (n x O) = in (n x I) W + b, then ReLU when relu. */
static void dense_forward(const float *in, float *out, const float *w, const float *b, int n,
                          int I, int O, int relu)
{
    for (int i0 = 0; i0 < n; i0 += TILE) {
        int t = n - i0 < TILE ? n - i0 : TILE;
        float *o[TILE];
        const float *x[TILE];

        for (int j = 0; j < TILE; j++) {
            int r = j < t ? j : 0; /* rows past a short last tile are never used */
            o[j] = out + (size_t)(i0 + r) * O;
            x[j] = in + (size_t)(i0 + r) * I;
        }
        for (int j = 0; j < t; j++)
            memcpy(o[j], b, (size_t)O * sizeof(float));
        if (t == TILE) {
            for (int k = 0; k < I; k++) {
                float a0 = x[0][k], a1 = x[1][k], a2 = x[2][k], a3 = x[3][k];
                const float *wk = w + (size_t)k * O;
                if (a0 == 0.0f && a1 == 0.0f && a2 == 0.0f && a3 == 0.0f)
                    continue;
                for (int c = 0; c < O; c++) {
                    float wv = wk[c];
                    o[0][c] += a0 * wv;
                    o[1][c] += a1 * wv;
                    o[2][c] += a2 * wv;
                    o[3][c] += a3 * wv;
                }
            }
        } else {
            for (int j = 0; j < t; j++)
                for (int k = 0; k < I; k++) {
                    float a = x[j][k];
                    const float *wk = w + (size_t)k * O;
                    if (a == 0.0f)
                        continue;
                    for (int c = 0; c < O; c++)
                        o[j][c] += a * wk[c];
                }
        }
        if (relu)
            for (int j = 0; j < t; j++)
                for (int c = 0; c < O; c++)
                    o[j][c] = o[j][c] > 0.0f ? o[j][c] : 0.0f;
    }
}

double mlp_forward(struct mlp *m, const float *x, const uint8_t *y, int n, long *correct_p)
{
    int L = m->nlayers, C = m->sizes[L];
    double loss = 0.0;
    long correct = 0;

    memcpy(m->act[0], x, (size_t)n * m->sizes[0] * sizeof(float));
    for (int l = 0; l < L; l++) {
        const float *w = m->params + m->off[l];
        const float *b = w + (size_t)m->sizes[l] * m->sizes[l + 1];
        dense_forward(m->act[l], m->act[l + 1], w, b, n, m->sizes[l], m->sizes[l + 1],
                      l + 1 < L);
    }
    /* Softmax in place, with the max subtracted so exp cannot overflow. */
    for (int i = 0; i < n; i++) {
        float *z = m->act[L] + (size_t)i * C;
        float mx = z[0];
        int arg = 0;
        double sum = 0.0;

        for (int c = 1; c < C; c++)
            if (z[c] > mx) {
                mx = z[c];
                arg = c;
            }
        for (int c = 0; c < C; c++)
            sum += exp((double)z[c] - mx);
        loss += log(sum) - ((double)z[y[i]] - mx);
        for (int c = 0; c < C; c++)
            z[c] = (float)(exp((double)z[c] - mx) / sum);
        correct += arg == y[i];
    }
    *correct_p += correct;
    return loss;
}

void mlp_backward(struct mlp *m, const uint8_t *y, int n, float scale,
                  void (*layer_done)(int layer, void *arg), void *arg)
{
    int L = m->nlayers, C = m->sizes[L];
    float *dz = m->dact[0], *dh = m->dact[1];

    /* d(sum of losses)/dlogits = softmax - onehot, times scale. */
    for (int i = 0; i < n; i++) {
        const float *p = m->act[L] + (size_t)i * C;
        for (int c = 0; c < C; c++)
            dz[(size_t)i * C + c] = scale * (p[c] - (c == y[i] ? 1.0f : 0.0f));
    }
    for (int l = L - 1; l >= 0; l--) {
        int I = m->sizes[l], O = m->sizes[l + 1];
        const float *in = m->act[l];
        const float *w = m->params + m->off[l];
        float *dw = m->grads + m->off[l];
        float *db = dw + (size_t)I * O;

        /* dW[k][:] += sum_i in[i][k] dz[i][:], four samples per pass over dW. */
        for (int i0 = 0; i0 < n; i0 += TILE) {
            int t = n - i0 < TILE ? n - i0 : TILE;
            if (t == TILE) {
                const float *x0 = in + (size_t)i0 * I, *x1 = x0 + I, *x2 = x1 + I, *x3 = x2 + I;
                const float *g0 = dz + (size_t)i0 * O, *g1 = g0 + O, *g2 = g1 + O, *g3 = g2 + O;
                for (int k = 0; k < I; k++) {
                    float a0 = x0[k], a1 = x1[k], a2 = x2[k], a3 = x3[k];
                    float *dwk = dw + (size_t)k * O;
                    if (a0 == 0.0f && a1 == 0.0f && a2 == 0.0f && a3 == 0.0f)
                        continue;
                    for (int c = 0; c < O; c++)
                        dwk[c] += a0 * g0[c] + a1 * g1[c] + a2 * g2[c] + a3 * g3[c];
                }
            } else {
                for (int i = i0; i < n; i++)
                    for (int k = 0; k < I; k++) {
                        float a = in[(size_t)i * I + k];
                        float *dwk = dw + (size_t)k * O;
                        if (a == 0.0f)
                            continue;
                        for (int c = 0; c < O; c++)
                            dwk[c] += a * dz[(size_t)i * O + c];
                    }
            }
        }
        for (int i = 0; i < n; i++)
            for (int c = 0; c < O; c++)
                db[c] += dz[(size_t)i * O + c];
        /* dh = dz W^T, masked by ReLU' of the layer below (in > 0 iff its pre-activation
         * was). Not needed below the first layer. */
        if (l > 0) {
            for (int i = 0; i < n; i++) {
                const float *g = dz + (size_t)i * O;
                for (int k = 0; k < I; k++) {
                    const float *wk = w + (size_t)k * O;
                    float acc[8] = {0};
                    float s = 0.0f;
                    int c = 0;

                    if (in[(size_t)i * I + k] <= 0.0f) {
                        dh[(size_t)i * I + k] = 0.0f;
                        continue;
                    }
                    for (; c + 8 <= O; c += 8)
                        for (int j = 0; j < 8; j++)
                            acc[j] += g[c + j] * wk[c + j];
                    for (; c < O; c++)
                        s += g[c] * wk[c];
                    for (int j = 0; j < 8; j++)
                        s += acc[j];
                    dh[(size_t)i * I + k] = s;
                }
            }
        }
        if (layer_done)
            layer_done(l, arg);
        float *tmp = dz;
        dz = dh;
        dh = tmp;
    }
}

int optim_init(struct optim *o, size_t nparams, char *err, size_t errlen)
{
    o->t = 0;
    o->m = calloc(nparams, sizeof(float));
    o->v = o->kind == OPTIM_ADAMW ? calloc(nparams, sizeof(float)) : NULL;
    if (!o->m || (o->kind == OPTIM_ADAMW && !o->v)) {
        snprintf(err, errlen, "out of memory for optimizer state");
        optim_free(o);
        return -1;
    }
    return 0;
}

void optim_free(struct optim *o)
{
    free(o->m);
    free(o->v);
    o->m = o->v = NULL;
}

void optim_step(struct optim *o, float *params, const float *grads, size_t n)
{
    float lr = (float)o->lr, wd = (float)o->weight_decay;

    o->t++;
    if (o->kind == OPTIM_SGD) {
        /* PyTorch's form: v = mu v + (g + wd w); w -= lr v. */
        float mu = (float)o->momentum;
        for (size_t i = 0; i < n; i++) {
            float g = grads[i] + wd * params[i];
            o->m[i] = mu * o->m[i] + g;
            params[i] -= lr * o->m[i];
        }
        return;
    }
    /* AdamW: decay decoupled from the adaptive step (Loshchilov and Hutter). */
    float b1 = (float)o->beta1, b2 = (float)o->beta2, eps = (float)o->eps;
    float c1 = (float)(1.0 - pow(o->beta1, (double)o->t));
    float c2 = (float)(1.0 - pow(o->beta2, (double)o->t));
    for (size_t i = 0; i < n; i++) {
        float g = grads[i];
        o->m[i] = b1 * o->m[i] + (1.0f - b1) * g;
        o->v[i] = b2 * o->v[i] + (1.0f - b2) * g * g;
        float mh = o->m[i] / c1, vh = o->v[i] / c2;
        params[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * params[i]);
    }
}

double mlp_norm(const struct mlp *m)
{
    double s = 0.0;
    for (size_t i = 0; i < m->nparams; i++)
        s += (double)m->params[i] * m->params[i];
    return sqrt(s);
}

double mlp_checksum(const struct mlp *m)
{
    /* Weighted by position so that swapped parameters change it. */
    double s = 0.0;
    for (size_t i = 0; i < m->nparams; i++)
        s += (double)m->params[i] * (double)(i % 1009 + 1);
    return s;
}
