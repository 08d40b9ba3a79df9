/*
 * ckpt.h - dptrain checkpoints: one file, written atomically by rank 0.
 *
 * Layout (native byte order, little-endian on every machine we run): struct ckpt_header,
 * then nparams floats of parameters, then the optimizer state (1 array for SGD, 2 for
 * AdamW, nparams floats each), then a 64-bit FNV-1a checksum of everything before it.
 */
#ifndef DPTRAIN_CKPT_H
#define DPTRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "mlp.h"

#define CKPT_MAGIC "DPTRCKPT"
#define CKPT_VERSION 1

struct ckpt_header {
    char magic[8];
    uint32_t version;
    uint32_t nlayers;
    uint32_t sizes[MLP_MAX_LAYERS + 1];
    uint32_t optim;      /* enum optim_kind */
    uint32_t world_size; /* ranks that wrote it: resuming with another count is refused */
    uint32_t batch, accum;
    uint64_t step;       /* optimizer steps done */
    uint64_t optim_t;    /* the optimizer's own step count (Adam's bias correction) */
    uint64_t seed;       /* the sampler's seed: with step it fixes where the data resumes */
    uint64_t rng_state;  /* state of the run's generator after initialization */
    uint64_t nparams;
};

/* Writes path.tmp, fsyncs it, renames it over path and fsyncs the directory, so a crash
 * leaves either the old or the new checkpoint, never a torn one. */
int ckpt_write(const char *path, const struct ckpt_header *h, const float *params,
               const float *m, const float *v, char *err, size_t errlen);

/* Reads path into h and the arrays (each of want->nparams floats; v only for AdamW) after
 * checking the magic, version, length and checksum, then that the layer sizes, optimizer and
 * world size equal those in want. Nothing is written to the arrays on failure. */
int ckpt_read(const char *path, const struct ckpt_header *want, struct ckpt_header *h,
              float *params, float *m, float *v, char *err, size_t errlen);

#endif /* DPTRAIN_CKPT_H */
