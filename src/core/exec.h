/*
 * exec.h - operations (one issued collective, also the user's request), the executor that
 * runs one rank's schedule, and the engine that drives executors and transports.
 */
#ifndef COLL_EXEC_H
#define COLL_EXEC_H

#include "../algo/schedule.h"
#include "internal.h"
#include "../transport/transport.h"

/* A built schedule with what the executor derives from it once: per step, the message's
 * index among the messages this rank exchanges the same way with the same peer (its tag),
 * and per peer the number of messages each way. Cached per comm and shared by ops with the
 * same arguments; refcounted because a request may outlive a cache eviction. */
struct coll_plan {
    struct coll_schedule sched;
    uint32_t *tag;               /* [nsteps]: message index per (peer, direction) */
    uint32_t *nmsgs;             /* [2 * nranks]: sends to p at 2p, receives from p at 2p+1 */
    struct coll_algo_args args;
    _Atomic int refs;
};

#define COLL_WIRE_SEQ_P2P ((1ull << 48) - 1)

/* How a call reached the API: a blocking call outside a group (0, what a zeroed call is),
 * a request (coll_i*), a member of a group, or a stream-ordered call (coll_*_stream). */
enum { COLL_FORM_BLOCKING = 0, COLL_FORM_REQUEST, COLL_FORM_GROUPED, COLL_FORM_STREAM };

/* A call as the API checked it, before anything is planned (src/path/path.h chooses how it
 * runs). sendbuf/recvbuf are NULL where this rank does not use them. */
struct coll_call {
    struct coll_comm *comm;
    enum coll_coll coll;
    const void *sendbuf;
    void *recvbuf;
    size_t count;                /* elements (all-gather, all-to-all: per rank) */
    coll_dtype_t dtype;
    coll_op_t op;
    int root;
    uint8_t p2p;                 /* COLL_STEP_SEND / COLL_STEP_RECV / COLL_STEP_COPY */
    int peer;
    uint8_t form;                /* COLL_FORM_*: how the API was called (a path's rule may
                                  * depend on it: the quantized all-reduce's) */
    void *stream;                /* COLL_FORM_STREAM: the cudaStream_t (NULL: the default) */
    uint64_t seq;                /* the op number, once issued (for traces) */
    uint64_t cseq;               /* the collective number, once issued */
    struct coll_sig sig;         /* its signature, once issued (src/core/agree.h) */
};

/* A part that a path runs to completion by itself (src/path/path.h: the flat path) rather
 * than through a schedule: the engine calls it, lock released, when the op is at the head. */
typedef coll_status_t (*coll_run_fn)(struct coll_comm *comm, const struct coll_call *c);

enum coll_step_state { STEP_PENDING = 0, STEP_POSTED = 1, STEP_DONE = 2 };

/* One collective (or send, or receive) inside an op. An op issued by a plain call has one
 * part; a group (coll_group_start/end) puts all its calls on one comm into one op, whose
 * parts run at once, so that matched sends and receives in a group never deadlock. */
struct coll_part {
    enum coll_coll coll;
    coll_op_t op;
    int root;
    const void *sendbuf;
    void *recvbuf;
    struct coll_plan *plan;      /* NULL where run is set */
    coll_run_fn run;             /* a path's own runner, or NULL: the executor runs plan */
    struct coll_call call;       /* the call as checked (what run gets) */
    uint64_t sig;                /* hash of the call's arguments (sched parts only) */
    /* executor state */
    uint8_t *state;              /* [nsteps] enum coll_step_state */
    struct coll_xfer *xfers;     /* [nsteps], used by SEND/RECV steps */
    uint32_t *base;              /* [2 * nranks]: messages of earlier parts, per peer/way */
    uint8_t *scratch;            /* this part's share of the comm's scratch */
    uint32_t first_pending;      /* every step below is done */
    uint32_t ndone;
    bool finished;
};

struct coll_op {
    struct coll_comm *comm;
    uint64_t seq;                /* position on the comm: 0, 1, 2, ... */
    uint64_t sig;                /* hash of the collective parts' arguments << 48 */
    bool has_coll;               /* any part is a collective (not send/recv) */
    bool runs;                   /* every part has a run hook: the engine runs them in turn */
    const struct coll_sig *csig; /* the first collective part's signature (NULL: none), which
                                  * names the op in logs and stall checks */
    uint64_t wire_seq;           /* sent in each message with sig: see engine_submit */
    int nparts;
    struct coll_part *parts;     /* [nparts], in call order: part_mem */
    uint32_t *posted;            /* [2 * nranks]: messages posted so far, per peer/way */
    void *exec_mem;              /* posted and the parts' executor arrays, one allocation */
    bool started;
    uint64_t last_progress_ns;   /* coarse clock (coll__now_coarse_ns) */
    uint64_t stall_checked_ns;   /* when the engine last asked why it stalls */
    uint64_t stall_every_ns;     /* ... and how long until it asks again */
    bool stall_said;             /* COLL_STALL_MS passed and was logged */
    _Atomic int status;          /* COLL_IN_PROGRESS until complete */
    bool is_request;             /* the user holds it (non-blocking call) */
    _Atomic bool dequeued;       /* done and out of the queue: no other thread touches it */
    struct coll_op *next;
    struct coll_part part_mem[]; /* allocated with the op: one malloc per call, not two */
};

/* engine.c */
COLL_INTERNAL coll_status_t coll__engine_init(struct coll_comm *comm);
COLL_INTERNAL coll_status_t coll__engine_start(struct coll_comm *comm);
COLL_INTERNAL void coll__engine_fini(struct coll_comm *comm);
/* Unlink op from the comm's queue if it is still there (lock NOT held). */
COLL_INTERNAL void coll__engine_detach(struct coll_comm *comm, struct coll_op *op);
/* Queue op behind the comm's other ops (lock NOT held). */
COLL_INTERNAL void coll__engine_submit(struct coll_comm *comm, struct coll_op *op);
/* Block until op completes; returns its status. Drives progress while waiting. With unlink,
 * op also leaves the queue (as coll__engine_detach, under the same lock). */
COLL_INTERNAL coll_status_t coll__engine_wait(struct coll_comm *comm, struct coll_op *op,
                                              bool unlink);
/* One non-blocking pass (coll_test). An op whose parts run to completion by themselves is
 * not started here (that would block): the progress thread takes it. */
COLL_INTERNAL void coll__engine_poll(struct coll_comm *comm);
/* For a call that runs outside the queue on the caller's thread (a blocking call on a path
 * with a run hook): wait until every op issued before is complete, then take the op numbers
 * an op would have taken. Returns the first failure of the ops waited for, or the comm's. */
COLL_INTERNAL coll_status_t coll__engine_drain(struct coll_comm *comm);
COLL_INTERNAL uint64_t coll__engine_take_seq(struct coll_comm *comm,
                                             const struct coll_sig *coll_sig,
                                             uint64_t *cseq_p);
/* The signature of a checked call. */
COLL_INTERNAL void coll__call_sig(const struct coll_call *c, struct coll_sig *s);
/* Let comm's progress thread drive its ops (after its grace delay) while this thread waits
 * on another comm: the other ops of a group that spans comms, whose ranks may all live in
 * this process (ncclCommInitAll). */
COLL_INTERNAL void coll__engine_kick(struct coll_comm *comm);
/* An op of nparts parts on comm, zeroed but for its parts pointer and comm; NULL when out
 * of memory. op_done ends one (plans and executor arrays released) and keeps a one-part op
 * for comm's next call: a request in a loop then costs no allocation. */
COLL_INTERNAL struct coll_op *coll__op_new(struct coll_comm *comm, int nparts);
COLL_INTERNAL void coll__op_done(struct coll_comm *comm, struct coll_op *op);
/* Release what op holds (executor arrays, plans); op_free also frees op itself. */
COLL_INTERNAL void coll__op_clear(struct coll_op *op);
COLL_INTERNAL void coll__op_free(struct coll_op *op);

/* exec.c: advance op as far as it goes without blocking. Returns true if anything moved.
 * Sets op->status when it completes or fails. Lock held. */
COLL_INTERNAL bool coll__exec_advance(struct coll_op *op);
/* Tell the peers op waits to receive from which collective it is stuck in (the transports'
 * stalled hook). Lock held. */
COLL_INTERNAL void coll__exec_probe_waits(const struct coll_op *op);
/* Describe what op waits for (for timeout messages). */
COLL_INTERNAL void coll__exec_describe_wait(const struct coll_op *op, char *buf, size_t n);
COLL_INTERNAL void coll__exec_release(struct coll_op *op);

/* plan.c: get (build or reuse) the plan for these arguments; algorithm chosen by the
 * selector. Lock NOT held (the cache has its own lock). */
/* The selector a plan cache miss asks for the algorithm and chunk: the path layer's
 * coll__select (src/path/select.c), passed down by the caller, since the core does not call
 * up. It updates args' chunk and says why in why. */
typedef coll_status_t coll_select_fn(struct coll_comm *comm, struct coll_algo_args *args,
                                     const struct coll_algo **algo_p, char *why,
                                     size_t whylen);
COLL_INTERNAL coll_status_t coll__plan_get(struct coll_comm *comm,
                                           const struct coll_algo_args *args,
                                           coll_select_fn *select, struct coll_plan **plan_p);
COLL_INTERNAL void coll__plan_put(struct coll_plan *plan);
/* A one-step plan, not cached: kind COLL_STEP_SEND (SEND buffer to peer), COLL_STEP_RECV
 * (peer to RECV buffer) or COLL_STEP_COPY (SEND to RECV: a send to oneself in a group). */
COLL_INTERNAL coll_status_t coll__plan_p2p(struct coll_comm *comm, uint8_t kind, int peer,
                                           size_t count, coll_dtype_t dtype,
                                           struct coll_plan **plan_p);
COLL_INTERNAL coll_status_t coll__plan_cache_init(struct coll_comm *comm);
COLL_INTERNAL void coll__plan_cache_free(struct coll_comm *comm);


#endif /* COLL_EXEC_H */
