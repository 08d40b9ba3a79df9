/*
 * comm.h - communicator creation inside the API: a comm made from another (coll_comm_split,
 * coll_comm_shrink) keeps the settings its parent's ranks agreed on.
 */
#ifndef COLL_API_COMM_H
#define COLL_API_COMM_H

#include "../core/internal.h"

/* coll_comm_init, with parent's per-comm settings and calibration in place of this rank's
 * environment and files (parent NULL: coll_comm_init itself). */
COLL_INTERNAL coll_status_t coll__comm_init_child(struct coll_comm **comm_p, int nranks,
                                                  const coll_unique_id_t *id, int rank,
                                                  const struct coll_comm *parent);

/* api.c: the calling thread has a group open (coll_group_start without its end). */
COLL_INTERNAL bool coll__group_active(void);

/* src/api/paths.c: the public calls the paths made of host calls (stream, quant) run their
 * calls with, handed to them at coll__path_comm_init. */
struct coll_path_host;
COLL_INTERNAL extern const struct coll_path_host coll__api_host;

#endif /* COLL_API_COMM_H */
