/*
 * exec.h - operations (one issued collective, also the user's request), the executor that
 * runs one rank's schedule, and the engine that drives executors and transports.
 */
#ifndef COLL_EXEC_H
#define COLL_EXEC_H

#include "../algo/schedule.h"
#include "../transport/transport.h"

/* A built schedule with what the executor derives from it once: per step, the previous
 * step of the same direction to the same peer (posting order) and the message tag. Cached
 * per comm and shared by ops with the same arguments; refcounted because a request may
 * outlive a cache eviction. */
struct coll_plan {
    struct coll_schedule sched;
    uint32_t *prev_same;         /* [nsteps]: UINT32_MAX when none */
    uint32_t *tag;               /* [nsteps]: message index per (peer, direction) */
    struct coll_algo_args args;
    _Atomic int refs;
};

enum coll_step_state { STEP_PENDING = 0, STEP_POSTED = 1, STEP_DONE = 2 };

struct coll_op {
    struct coll_comm *comm;
    enum coll_coll coll;
    coll_op_t op;
    int root;
    uint64_t seq;                /* position on the comm: 0, 1, 2, ... */
    uint64_t sig;                /* hash of the call's arguments << 48, sent in each message */
    const void *sendbuf;
    void *recvbuf;
    struct coll_plan *plan;
    /* executor state */
    uint8_t *state;              /* [nsteps] enum coll_step_state */
    struct coll_xfer *xfers;     /* [nsteps], used by SEND/RECV steps */
    uint32_t first_pending;      /* every step below is done */
    uint32_t ndone;
    bool started;
    uint64_t last_progress_ns;
    _Atomic int status;          /* COLL_IN_PROGRESS until complete */
    bool is_request;             /* the user holds it (non-blocking call) */
    struct coll_op *next;
};

/* engine.c */
COLL_INTERNAL coll_status_t coll__engine_init(struct coll_comm *comm);
COLL_INTERNAL coll_status_t coll__engine_start(struct coll_comm *comm);
COLL_INTERNAL void coll__engine_fini(struct coll_comm *comm);
/* Unlink op from the comm's queue if it is still there (lock NOT held). */
COLL_INTERNAL void coll__engine_detach(struct coll_comm *comm, struct coll_op *op);
/* Queue op behind the comm's other ops (lock NOT held). */
COLL_INTERNAL void coll__engine_submit(struct coll_comm *comm, struct coll_op *op);
/* Block until op completes; returns its status. Drives progress while waiting. */
COLL_INTERNAL coll_status_t coll__engine_wait(struct coll_comm *comm, struct coll_op *op);
/* One non-blocking pass (coll_test). */
COLL_INTERNAL void coll__engine_poll(struct coll_comm *comm);
COLL_INTERNAL void coll__op_free(struct coll_op *op);

/* exec.c: advance op as far as it goes without blocking. Returns true if anything moved.
 * Sets op->status when it completes or fails. Lock held. */
COLL_INTERNAL bool coll__exec_advance(struct coll_op *op);
/* Describe what op waits for (for timeout messages). */
COLL_INTERNAL void coll__exec_describe_wait(const struct coll_op *op, char *buf, size_t n);
COLL_INTERNAL void coll__exec_release(struct coll_op *op);

/* plan.c: get (build or reuse) the plan for these arguments; algorithm chosen by the
 * selector. Lock NOT held (the cache has its own lock). */
COLL_INTERNAL coll_status_t coll__plan_get(struct coll_comm *comm,
                                           const struct coll_algo_args *args,
                                           struct coll_plan **plan_p);
COLL_INTERNAL void coll__plan_put(struct coll_plan *plan);
COLL_INTERNAL coll_status_t coll__plan_cache_init(struct coll_comm *comm);
COLL_INTERNAL void coll__plan_cache_free(struct coll_comm *comm);

/* select.c */
COLL_INTERNAL coll_status_t coll__select_check_config(struct coll_comm *comm);
COLL_INTERNAL coll_status_t coll__select(struct coll_comm *comm,
                                         const struct coll_algo_args *args,
                                         const struct coll_algo **algo_p,
                                         const char **why_p);

#endif /* COLL_EXEC_H */
