/*
 * data.c - IDX loading (through zlib, which reads plain files too), the synthetic dataset,
 * the generator and the sampler.
 *
 * Built with DPTRAIN_HAVE_ZLIB=1 (meson defines it when zlib is found) it reads .gz files;
 * without, it reads plain files only and names the gunzip it needs.
 *
 * IDX: a big-endian header, magic 0x00000803 for images (u8, 3 dims: n, rows, cols) and
 * 0x00000801 for labels (u8, 1 dim: n), then the bytes.
 */
#include "data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if DPTRAIN_HAVE_ZLIB
#include <zlib.h>
#else
#define DPTRAIN_HAVE_ZLIB 0
#endif

/* Fashion-MNIST's pixel mean and standard deviation over the training set (of x / 255). */
#define FMNIST_MEAN 0.2860f
#define FMNIST_STD 0.3530f

void dp_rng_seed(struct dp_rng *r, uint64_t seed)
{
    r->s = seed;
}

uint64_t dp_rng_next(struct dp_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double dp_rng_uniform(struct dp_rng *r)
{
    return (double)(dp_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

double dp_rng_normal(struct dp_rng *r)
{
    /* Box-Muller; 1 - u keeps the log away from 0. */
    double u = 1.0 - dp_rng_uniform(r), v = dp_rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* A file read through zlib when we have it (gzread passes plain files through), else stdio. */
#if DPTRAIN_HAVE_ZLIB
typedef gzFile idx_file;
static idx_file idx_fopen(const char *path) { return gzopen(path, "rb"); }
static int idx_fread(idx_file f, void *buf, unsigned len) { return gzread(f, buf, len); }
static void idx_fclose(idx_file f) { gzclose(f); }
#else
typedef FILE *idx_file;
static idx_file idx_fopen(const char *path) { return fopen(path, "rb"); }
static int idx_fread(idx_file f, void *buf, unsigned len) { return (int)fread(buf, 1, len, f); }
static void idx_fclose(idx_file f) { fclose(f); }
#endif

/* Opens DIR/NAME.gz, else DIR/NAME; the path tried last goes to path (for messages). */
static idx_file idx_open(const char *dir, const char *name, char *path, size_t pathlen,
                         char *err, size_t errlen)
{
    idx_file f;

    snprintf(path, pathlen, "%s/%s.gz", dir, name);
    if (access(path, R_OK) == 0 && !DPTRAIN_HAVE_ZLIB) {
        snprintf(err, errlen, "dataset file '%s' is gzipped and this dptrain was built "
                 "without zlib: gunzip it", path);
        return NULL;
    }
    if (access(path, R_OK) != 0)
        snprintf(path, pathlen, "%s/%s", dir, name);
    errno = 0;
    f = idx_fopen(path);
    if (!f)
        snprintf(err, errlen, "cannot open dataset file '%s': %s", path,
                 errno ? strerror(errno) : "out of memory");
    return f;
}

static int read_exact(idx_file f, void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        unsigned chunk = len > (1u << 30) ? 1u << 30 : (unsigned)len;
        int got = idx_fread(f, p, chunk);
        if (got <= 0)
            return -1;
        p += got;
        len -= (size_t)got;
    }
    return 0;
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Reads one IDX file of ndims dims with the given magic into a malloc'ed buffer. */
static int idx_read(const char *dir, const char *name, uint32_t magic, int ndims,
                    uint32_t *dims, unsigned char **data_p, char *err, size_t errlen)
{
    char path[4096];
    unsigned char hdr[16];
    unsigned char *data = NULL;
    size_t total = 1;
    idx_file f = idx_open(dir, name, path, sizeof(path), err, errlen);

    if (!f)
        return -1;
    if (read_exact(f, hdr, 4 + 4 * (size_t)ndims) != 0) {
        snprintf(err, errlen, "dataset file '%s' is truncated or corrupt: no IDX header", path);
        goto out_close;
    }
    if (be32(hdr) != magic) {
        snprintf(err, errlen, "dataset file '%s' is not an IDX file of this kind: magic "
                 "0x%08x, want 0x%08x", path, be32(hdr), magic);
        goto out_close;
    }
    for (int i = 0; i < ndims; i++) {
        dims[i] = be32(hdr + 4 + 4 * i);
        if (dims[i] == 0 || dims[i] > (1u << 24)) {
            snprintf(err, errlen, "dataset file '%s' has an implausible dimension %u", path,
                     dims[i]);
            goto out_close;
        }
        total *= dims[i];
    }
    data = malloc(total);
    if (!data) {
        snprintf(err, errlen, "out of memory reading '%s'", path);
        goto out_close;
    }
    if (read_exact(f, data, total) != 0) {
        snprintf(err, errlen, "dataset file '%s' is truncated or corrupt: want %zu bytes of "
                 "data after the header", path, total);
        goto out_free;
    }
    idx_fclose(f);
    *data_p = data;
    return 0;

out_free:
    free(data);
out_close:
    idx_fclose(f);
    return -1;
}

int dataset_load_idx(struct dataset *d, const char *dir, int test, int dim, int classes,
                     char *err, size_t errlen)
{
    const char *pre = test ? "t10k" : "train";
    char name[64];
    uint32_t idims[3], ldims[1];
    unsigned char *img = NULL, *lab = NULL;

    snprintf(name, sizeof(name), "%s-images-idx3-ubyte", pre);
    if (idx_read(dir, name, 0x803, 3, idims, &img, err, errlen) != 0)
        return -1;
    snprintf(name, sizeof(name), "%s-labels-idx1-ubyte", pre);
    if (idx_read(dir, name, 0x801, 1, ldims, &lab, err, errlen) != 0)
        goto out_free;
    if (ldims[0] != idims[0]) {
        snprintf(err, errlen, "dataset '%s' (%s): %u images but %u labels", dir, pre,
                 idims[0], ldims[0]);
        goto out_free;
    }
    if ((size_t)idims[1] * idims[2] != (size_t)dim) {
        snprintf(err, errlen, "dataset '%s' (%s): images are %ux%u = %u pixels, but the "
                 "model's input size is %d", dir, pre, idims[1], idims[2],
                 idims[1] * idims[2], dim);
        goto out_free;
    }
    for (uint32_t i = 0; i < ldims[0]; i++)
        if (lab[i] >= classes) {
            snprintf(err, errlen, "dataset '%s' (%s): label %u of sample %u is out of range "
                     "for %d classes", dir, pre, lab[i], i, classes);
            goto out_free;
        }
    d->n = (int)idims[0];
    d->dim = dim;
    d->classes = classes;
    d->x = malloc((size_t)d->n * dim * sizeof(float));
    if (!d->x) {
        snprintf(err, errlen, "out of memory for dataset '%s'", dir);
        goto out_free;
    }
    for (size_t i = 0; i < (size_t)d->n * dim; i++)
        d->x[i] = (img[i] / 255.0f - FMNIST_MEAN) / FMNIST_STD;
    d->y = lab;
    free(img);
    return 0;

out_free:
    free(img);
    free(lab);
    return -1;
}

int dataset_synthetic(struct dataset *d, int n, int dim, int classes, uint64_t seed,
                      char *err, size_t errlen)
{
    struct dp_rng proto_rng, rng;
    float *proto = malloc((size_t)classes * dim * sizeof(float));

    d->x = malloc((size_t)n * dim * sizeof(float));
    d->y = malloc((size_t)n);
    if (!proto || !d->x || !d->y) {
        snprintf(err, errlen, "out of memory for a synthetic dataset of %d samples", n);
        free(proto);
        dataset_free(d);
        return -1;
    }
    /* Prototypes come from a seed of their own, so train and test sets (different seeds)
     * share their classes. */
    dp_rng_seed(&proto_rng, 0x5eed0f9c1a55e5ull);
    for (size_t i = 0; i < (size_t)classes * dim; i++)
        proto[i] = (float)dp_rng_normal(&proto_rng);
    dp_rng_seed(&rng, seed);
    for (int i = 0; i < n; i++) {
        int c = (int)(dp_rng_next(&rng) % (uint64_t)classes);
        d->y[i] = (uint8_t)c;
        for (int k = 0; k < dim; k++)
            d->x[(size_t)i * dim + k] =
                proto[(size_t)c * dim + k] + (float)(1.5 * dp_rng_normal(&rng));
    }
    free(proto);
    d->n = n;
    d->dim = dim;
    d->classes = classes;
    return 0;
}

void dataset_free(struct dataset *d)
{
    free(d->x);
    free(d->y);
    d->x = NULL;
    d->y = NULL;
}

void sampler_permute(uint32_t *perm, int n, uint64_t seed, int epoch)
{
    struct dp_rng rng;

    dp_rng_seed(&rng, seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(epoch + 1)));
    for (int i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)(dp_rng_next(&rng) % (uint64_t)(i + 1));
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

void sampler_slice(int global_batch, int rank, int nranks, int *begin_p, int *end_p)
{
    *begin_p = (int)((long)global_batch * rank / nranks);
    *end_p = (int)((long)global_batch * (rank + 1) / nranks);
}
