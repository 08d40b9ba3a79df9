/*
 * qallreduce.h - the quant path (path.h's coll__path_quant): the quantized all-reduce
 * (qallreduce.c), as coll_allreduce reaches it through the chooser when COLL_QUANT is set
 * and as coll_allreduce_quantized runs it. The public calls are in coll.h, their entry
 * points in src/api/paths.c.
 */
#ifndef COLL_CORE_QALLREDUCE_H
#define COLL_CORE_QALLREDUCE_H

#include "../core/internal.h"

/* True when comm's COLL_QUANT asks for this all-reduce to be quantized: a codec is set (or
 * a value that is not one, which the quantized all-reduce then reports), dtype is fp32,
 * fp16 or bf16, op is sum or avg and the message has at least COLL_QUANT_MIN_BYTES. */
COLL_INTERNAL bool coll__quant_wanted(const struct coll_comm *comm, size_t count,
                                      coll_dtype_t dtype, coll_op_t op);

/* The quantized all-reduce, once the API has checked comm (live, not failed) and that no
 * group is open: its own arguments checked here (fn names the call in messages); config
 * NULL: comm's COLL_QUANT codec; fb NULL: no error feedback. */
COLL_INTERNAL coll_status_t coll__allreduce_quant(struct coll_comm *comm, const void *sendbuf,
                                                  void *recvbuf, size_t count,
                                                  coll_dtype_t dtype, coll_op_t op,
                                                  const coll_quant_config_t *config,
                                                  coll_quant_feedback_t *fb, const char *fn);

/* Error feedback state of count elements for comm (the API checked comm and fb_p). */
COLL_INTERNAL coll_status_t coll__qfeedback_create(struct coll_comm *comm, size_t count,
                                                   const char *fn, coll_quant_feedback_t **fb_p);
COLL_INTERNAL void coll__qfeedback_reset(coll_quant_feedback_t *fb);
COLL_INTERNAL void coll__qfeedback_destroy(coll_quant_feedback_t *fb);

/* The path's slot of comm (coll__path_comm_init / coll__path_comm_fini). */
COLL_INTERNAL coll_status_t coll__quant_comm_init(struct coll_comm *comm);
COLL_INTERNAL void coll__quant_comm_fini(struct coll_comm *comm);

/* How the quantized all-reduce of count elements of dtype would go on comm with its
 * COLL_QUANT codec and block: bytes on the wire per byte of input (*ratio_p: the encoding's
 * size over the plain one) and whether it gathers (*gather_p) or scatters, as its automatic
 * choice makes it. false when COLL_QUANT names no codec (or count is 0). */
COLL_INTERNAL bool coll__quant_shape(const struct coll_comm *comm, coll_dtype_t dtype,
                                     size_t count, double *ratio_p, bool *gather_p);

#endif /* COLL_CORE_QALLREDUCE_H */
