/*
 * ib.h - test hooks of the ib transport (src/transport/ib.c).
 */
#ifndef COLL_IB_H
#define COLL_IB_H

#include "../base/base.h"
#include "ib_ops.h"

/* Does device:port pass a COLL_IB_HCA spec ("mlx5_0:1,mlx5_1", "=mlx5_0", "^mlx5_1")? */
COLL_INTERNAL bool coll__ib_hca_allowed(const char *spec, const char *dev, int port);
/* The verbs table a context uses (its live_objects is the emulator's leak count). */
COLL_INTERNAL const struct coll_ib_ops *coll__ib_ops(const void *ctx);
/* Connection datagrams dropped (strangers, wrong MAC, malformed). */
COLL_INTERNAL uint64_t coll__ib_rejected(const void *ctx);
/* Registrations held by the cache. */
COLL_INTERNAL int coll__ib_cached_regs(const void *ctx);

#endif /* COLL_IB_H */
