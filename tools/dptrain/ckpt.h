/*
 * ckpt.h - dptrain checkpoints: one file, written atomically by rank 0.
 *
 * Layout (native byte order, little-endian on every machine we run): struct ckpt_header,
 * then ckpt_narrays(h) arrays of nparams floats each, then a 64-bit FNV-1a checksum of
 * everything before it. The arrays are:
 *   DDP (diloco 0): the parameters, then the optimizer state (1 array for SGD, 2 for AdamW);
 *     every replica holds the same, so rank 0's copy is the job's.
 *   DiLoCo: the global parameters, the outer momentum, the outer gradient (averaged, for the
 *     fragments whose all-reduce was in flight: see pending), then for each worker w in rank
 *     order its own parameters and inner optimizer state. Workers drift apart between outer
 *     steps, so the job's state is every worker's, gathered to rank 0.
 */
#ifndef DPTRAIN_CKPT_H
#define DPTRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "mlp.h"

#define CKPT_MAGIC "DPTRCKPT"
#define CKPT_VERSION 2

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
    /* DiLoCo (all 0 for DDP). The schedule must match on resume: it decides which fragment
     * is due when, and a pending fragment's outer step lands at due[f]. */
    uint32_t diloco;     /* H */
    uint32_t fragments;  /* P */
    int32_t overlap;     /* tau; -1: blocking outer syncs */
    uint32_t pad;
    uint64_t pending;    /* bit f: fragment f's averaged outer gradient is stored, not applied */
    uint64_t due[MLP_MAX_LAYERS]; /* step after which pending fragment f's outer step lands */
};

/* Arrays of nparams floats that follow a header like h. */
size_t ckpt_narrays(const struct ckpt_header *h);
/* Index of worker w's first array (its parameters) in a DiLoCo checkpoint. */
size_t ckpt_worker_array(const struct ckpt_header *h, int w);

/* Writes path.tmp, fsyncs it, renames it over path and fsyncs the directory, so a crash
 * leaves either the old or the new checkpoint, never a torn one. arrays holds
 * ckpt_narrays(h) pointers. */
int ckpt_write(const char *path, const struct ckpt_header *h, const float *const *arrays,
               char *err, size_t errlen);

/* One array to copy out of a checkpoint: array number index into dst (nparams floats). */
struct ckpt_pick {
    size_t index;
    float *dst;
};

/* Reads path into h after checking the magic, version, length and checksum, then that the
 * layer sizes, optimizer, world size and DiLoCo schedule equal those in want; then copies
 * the picked arrays. Nothing is written to the arrays on failure. */
int ckpt_read(const char *path, const struct ckpt_header *want, struct ckpt_header *h,
              const struct ckpt_pick *picks, int npicks, char *err, size_t errlen);

#endif /* DPTRAIN_CKPT_H */
