/*
 * settings.h - one set of settings per comm: the per-comm COLL_* values (src/base/param.c
 * marks them) and the inputs of per-call decisions that would otherwise be each rank's own
 * (the cost model's calibration, the cores the model shares), agreed at comm creation.
 *
 * Every rank hands the bootstrap two things with its join record: a blob (its per-comm
 * settings as NAME\0VALUE\0 pairs, then the calibration it loaded as "calib\0SOURCE\0TEXT\0")
 * and a few bytes of facts (what it measured: the CPUs it may run on). The root relays every
 * rank's facts, and each distinct blob once (a launch gives most ranks the same settings),
 * so that every rank sees every rank's values. Then each rank adopts rank 0's blob: the
 * settings into comm->cfg, the calibration into the cost model; and where ranks differed,
 * rank 0 warns naming the setting, the ranks and their values (the others say it at INFO).
 * What cannot be adopted (a transport this rank did not bring up) fails the creation with a
 * message that names the setting and the ranks.
 */
#ifndef COLL_SETTINGS_H
#define COLL_SETTINGS_H

#include "internal.h"

/* bytes of facts per rank: COLL_HOST_CPUS (u32), 0 (u32), the CPUs the rank may run on (a
 * bitmap of CPUs 0..1023) */
#define COLL_SETTINGS_FACTS 136
#define COLL_SETTINGS_BLOB_MAX 8192  /* bytes of one rank's blob */

struct coll_settings_xchg {
    /* this rank's, sent with its join record */
    uint8_t facts[COLL_SETTINGS_FACTS];
    uint32_t len;
    uint8_t blob[COLL_SETTINGS_BLOB_MAX];
    /* every rank's, from the root's table (NULL until then) */
    uint8_t (*peer_facts)[COLL_SETTINGS_FACTS]; /* [nranks] */
    uint32_t *peer_blob;                        /* [nranks]: index into blobs */
    uint32_t nblobs;
    uint8_t **blobs;                            /* [nblobs], each NUL-terminated past len */
    uint32_t *blob_len;                         /* [nblobs] */
};

/* What a comm agreed on besides comm->cfg: kept for the comms split or shrunk from it. */
struct coll_settings_agreed {
    struct coll_config own; /* this rank's environment at creation, before any adoption */
    char *calib_text;      /* the calibration the comm's model was made from; "" = defaults */
    char calib_src[600];   /* where rank 0 read it, for messages */
    int32_t cores;         /* the CPUs the cost model shares: the fewest of any rank's host */
};

/* At creation, once comm->cfg holds this rank's environment: comm->agreed, and for a comm
 * split or shrunk from parent (NULL otherwise) the parent's per-comm settings in comm->cfg
 * where this rank's environment has not changed since the parent was made, and the parent's
 * calibration in comm->agreed unless COLL_CALIB_FILE changed (the selector then takes it,
 * not a file). */
COLL_INTERNAL coll_status_t coll__settings_init(struct coll_comm *comm,
                                                const struct coll_comm *parent);
/* Before the bootstrap: this rank's blob and facts into comm->xchg, from comm->cfg and the
 * calibration the selector loaded (comm->agreed). */
COLL_INTERNAL coll_status_t coll__settings_prepare(struct coll_comm *comm);
/* After the bootstrap filled comm->xchg's peers: compare, warn, adopt rank 0's values (into
 * comm->cfg and the cost model), and agree on the cores the model shares
 * (comm->agreed->cores). */
COLL_INTERNAL coll_status_t coll__settings_agree(struct coll_comm *comm);
/* The exchange's buffers (after agreeing), and everything (at destroy). */
COLL_INTERNAL void coll__settings_xchg_free(struct coll_comm *comm);
COLL_INTERNAL void coll__settings_free(struct coll_comm *comm);

#endif /* COLL_SETTINGS_H */
