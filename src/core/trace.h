/*
 * trace.h - COLL_TRACE: every step a rank runs, with timestamps, as a Chrome trace /
 * Perfetto JSON file (ranks as processes, steps as slices, messages as flow arrows).
 *
 * The executor calls the hooks below through COLL_TRACE_HOOK, which costs one predictable
 * branch on comm->tracer when COLL_TRACE is unset. With it set, hooks append fixed-size
 * records to an in-memory buffer (no formatting, no I/O, engine lock held); a writer thread
 * turns full buffers into JSON, and coll__trace_fini writes the rest at comm destroy. The
 * file format is described in trace.c and docs/teaching.md; collviz reads it.
 */
#ifndef COLL_TRACE_H
#define COLL_TRACE_H

#include "exec.h"

struct coll_tracer;

/* Open COLL_TRACE's file for comm (after the bootstrap: the name may hold the comm id) and
 * start the writer. Does nothing when COLL_TRACE is empty. A file that cannot be created is
 * COLL_SYSTEM_ERROR naming it. */
COLL_INTERNAL coll_status_t coll__trace_init(struct coll_comm *comm);
/* Write what is buffered, close the JSON array and the file, free the tracer. After the
 * engine has stopped; NULL-safe. */
COLL_INTERNAL void coll__trace_fini(struct coll_comm *comm);

/* Hooks, engine lock held. op_begin when an op starts; step_begin when a reduce or copy is
 * about to run; step_posted when a send or receive is handed to the transport; step_done
 * when a step completes; op_end when the op completes or fails (st). */
COLL_INTERNAL void coll__trace_op_begin(struct coll_tracer *t, const struct coll_op *op);
COLL_INTERNAL void coll__trace_step_begin(struct coll_tracer *t, const struct coll_op *op,
                                          const struct coll_part *p, uint32_t i);
COLL_INTERNAL void coll__trace_step_posted(struct coll_tracer *t, const struct coll_op *op,
                                           const struct coll_part *p, uint32_t i);
COLL_INTERNAL void coll__trace_step_done(struct coll_tracer *t, const struct coll_op *op,
                                         const struct coll_part *p, uint32_t i);
COLL_INTERNAL void coll__trace_op_end(struct coll_tracer *t, const struct coll_op *op,
                                      coll_status_t st);

/* A call the shared-memory fast path ran (no op, no steps): one op record, algorithm
 * "flat", from t0 to now. Engine lock held. */
COLL_INTERNAL void coll__trace_flat(struct coll_tracer *t, enum coll_coll coll,
                                    coll_dtype_t dtype, size_t count, int root, uint64_t seq,
                                    uint64_t t0, coll_status_t st);

#define COLL_TRACE_HOOK(comm, hook, ...)                                                  \
    do {                                                                                  \
        if (__builtin_expect((comm)->tracer != NULL, 0))                                  \
            coll__trace_##hook((comm)->tracer, __VA_ARGS__);                              \
    } while (0)

#endif /* COLL_TRACE_H */
