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

#endif /* COLL_API_COMM_H */
