/*
 * data.h - datasets and sampling for dptrain: Fashion-MNIST IDX files (gzipped or not), a
 * deterministic synthetic dataset, the random generator, and the sharded sampler.
 */
#ifndef DPTRAIN_DATA_H
#define DPTRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

/* splitmix64: tiny, seedable from any 64-bit value, and its whole state is one word, which
 * a checkpoint stores. */
struct dp_rng {
    uint64_t s;
};
void dp_rng_seed(struct dp_rng *r, uint64_t seed);
uint64_t dp_rng_next(struct dp_rng *r);
double dp_rng_uniform(struct dp_rng *r); /* [0, 1) */
double dp_rng_normal(struct dp_rng *r);

struct dataset {
    int n, dim, classes;
    float *x;   /* n x dim, normalized */
    uint8_t *y; /* n labels in [0, classes) */
};

/* Loads DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]: train when test == 0.
 * Checks magic numbers, dimensions against dim, label range against classes, and that the
 * files hold as many bytes as their headers say. */
int dataset_load_idx(struct dataset *d, const char *dir, int test, int dim, int classes,
                     char *err, size_t errlen);
/* n samples of dim features in classes classes: a fixed random prototype per class plus
 * noise, all from seed, so every rank (and every run) builds the same data. */
int dataset_synthetic(struct dataset *d, int n, int dim, int classes, uint64_t seed,
                      char *err, size_t errlen);
void dataset_free(struct dataset *d);

/* The sampler, as PyTorch's DistributedSampler with drop_last: every epoch all ranks
 * shuffle 0..n-1 with the same seed (seed, epoch), global batch b is perm[b*B, (b+1)*B),
 * and rank r of R takes the slice [B*r/R, B*(r+1)/R) of it. Writes the permutation. */
void sampler_permute(uint32_t *perm, int n, uint64_t seed, int epoch);
void sampler_slice(int global_batch, int rank, int nranks, int *begin_p, int *end_p);

#endif /* DPTRAIN_DATA_H */
