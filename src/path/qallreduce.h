/*
 * qallreduce.h - the quantized all-reduce (qallreduce.c) as coll_allreduce reaches it when
 * COLL_QUANT is set. The public calls are in coll.h.
 */
#ifndef COLL_CORE_QALLREDUCE_H
#define COLL_CORE_QALLREDUCE_H

#include "../core/internal.h"

/* True when comm's COLL_QUANT asks for this all-reduce to be quantized: a codec is set (or
 * a value that is not one, which coll__allreduce_quant_env then reports), dtype is fp32,
 * fp16 or bf16, op is sum or avg and the message has at least COLL_QUANT_MIN_BYTES. */
COLL_INTERNAL bool coll__quant_wanted(const struct coll_comm *comm, size_t count,
                                      coll_dtype_t dtype, coll_op_t op);

/* coll_allreduce_quantized with comm's COLL_QUANT codec and no error feedback, for an
 * all-reduce whose arguments coll_allreduce has already checked. */
COLL_INTERNAL coll_status_t coll__allreduce_quant_env(struct coll_comm *comm, const void *sendbuf,
                                                      void *recvbuf, size_t count,
                                                      coll_dtype_t dtype, coll_op_t op);

/* api.c: the calling thread has a group open (coll_group_start without its end). */
COLL_INTERNAL bool coll__group_active(void);

#endif /* COLL_CORE_QALLREDUCE_H */
