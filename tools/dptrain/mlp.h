/*
 * mlp.h - a multilayer perceptron for dptrain: dense layers, ReLU between them, softmax
 * cross-entropy at the end, SGD with momentum and AdamW.
 *
 * All parameters live in one float array, layer 0 first; within layer l the weight matrix
 * W_l[in][out] (row-major, so the forward pass and the weight gradient are axpy loops over
 * out) comes before the bias b_l[out]. Gradients use the same layout in a second array, so a
 * contiguous range of layers is a contiguous range of floats: what a gradient bucket
 * all-reduces.
 */
#ifndef DPTRAIN_MLP_H
#define DPTRAIN_MLP_H

#include <stddef.h>
#include <stdint.h>

#define MLP_MAX_LAYERS 16

struct mlp {
    int nlayers;                      /* dense layers; sizes has nlayers + 1 entries */
    int sizes[MLP_MAX_LAYERS + 1];    /* sizes[0] inputs ... sizes[nlayers] classes */
    size_t off[MLP_MAX_LAYERS + 1];   /* float offset of layer l; off[nlayers] = nparams */
    size_t nparams;
    float *params, *grads;
    /* Activations for one micro-batch of up to cap samples: act[0] is the input copy,
     * act[l + 1] the output of layer l (after ReLU except the last, which holds logits and
     * then the softmax). dact is scratch for the gradient w.r.t. an activation. */
    int cap;
    float *act[MLP_MAX_LAYERS + 1];
    float *dact[2];
};

/* Parses "784,256,128,10" into m->sizes; returns 0, or -1 with a message in err. */
int mlp_parse_sizes(struct mlp *m, const char *spec, char *err, size_t errlen);
/* Allocates parameters, gradients and activations for batches of up to cap samples. */
int mlp_init(struct mlp *m, int cap, char *err, size_t errlen);
void mlp_free(struct mlp *m);
/* He-normal weights, zero biases, from seed (only rank 0 calls it; the others receive). */
void mlp_init_weights(struct mlp *m, uint64_t seed);

/* Forward pass over n samples (x: n x sizes[0]); returns the summed cross-entropy loss and
 * adds the number of correct predictions to *correct_p. */
double mlp_forward(struct mlp *m, const float *x, const uint8_t *y, int n, long *correct_p);

/* Backward pass after mlp_forward on the same batch: adds scale * dLoss_sum/dparams to
 * m->grads (scale = 1 / samples in the global batch makes the sum over ranks the mean).
 * Layers are done last first; after layer l's gradient is complete, layer_done(l, arg) is
 * called (when not NULL), so the caller can start its all-reduce while l-1 is computed. */
void mlp_backward(struct mlp *m, const uint8_t *y, int n, float scale,
                  void (*layer_done)(int layer, void *arg), void *arg);

/* Optimizers. state holds 1 (SGD) or 2 (AdamW) arrays of nparams floats. */
enum optim_kind { OPTIM_SGD = 0, OPTIM_ADAMW = 1 };
struct optim {
    enum optim_kind kind;
    double lr, momentum, beta1, beta2, eps, weight_decay;
    uint64_t t;   /* steps taken, for Adam's bias correction */
    float *m, *v; /* SGD: m is the momentum buffer; v unused (NULL) */
};
int optim_init(struct optim *o, size_t nparams, char *err, size_t errlen);
void optim_free(struct optim *o);
/* One step: params -= update(grads). */
void optim_step(struct optim *o, float *params, const float *grads, size_t n);

/* Order-sensitive fingerprint and L2 norm of the parameters, for comparing runs. */
double mlp_norm(const struct mlp *m);
double mlp_checksum(const struct mlp *m);

#endif /* DPTRAIN_MLP_H */
