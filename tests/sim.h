/*
 * sim.h - the schedule simulator: runs every rank's schedule in one process, over in-memory
 * FIFO links, in a random order of whatever is ready, and reports the first thing that a
 * real executor would trip on.
 *
 * The model follows src/core/exec.c: a step starts once its dependencies are done, and a
 * send (receive) starts only after the previous send to (receive from) the same peer has
 * started. REDUCE and COPY run when they start. A send reads its source when it starts and
 * completes later (at once when the link is eager; in rendezvous mode only after the
 * matching receive has been posted); a receive scribbles over its destination when it
 * starts (the transport may write there any time) and gets the data when it completes. The
 * k-th send from a to b is the k-th receive from a on b. Every choice among ready events
 * draws on the seed, so a missing dependency turns into a wrong result, a changed send
 * source or a race report under some order.
 *
 *   struct sim_opts o = {.seed = 1, .dtype = COLL_INT32, .op = COLL_SUM,
 *                        .coll = COLL_COLL_ALLREDUCE, .count = count};
 *   st = sim_run(scheds, n, mem, &o, err, sizeof(err));   // SIM_OK, or err says why
 */
#ifndef COLL_TEST_SIM_H
#define COLL_TEST_SIM_H

#include "algo/schedule.h"

enum sim_status {
    SIM_OK = 0,
    SIM_INVALID,   /* coll__sched_validate fails, or a schedule does not fit the run */
    SIM_BOUNDS,    /* a step touches memory outside the rank's buffers */
    SIM_COUNT,     /* a matched send and receive differ in count */
    SIM_DEADLOCK,  /* nothing can run and not every step is done */
    SIM_UNMATCHED, /* a message was sent that no receive takes */
    SIM_INFLIGHT,  /* a send's source changed between its start and its completion */
    SIM_RACE,      /* sim_check_races: two accesses to one element, unordered */
    SIM_TOO_LARGE, /* sim_check_races: too many steps to check */
    SIM_NOMEM,
};

/* One rank's user buffers. NULL with count 0 where the call allows NULL (reduce and
 * gather: RECV off the root; broadcast and scatter: SEND off the root; barrier: both).
 * In place the two overlap as sim_layout says (send == recv for all-reduce). Scratch is
 * the simulator's own: buf_count[SCRATCH] elements, filled with garbage. */
struct sim_mem {
    void *send, *recv;
    size_t send_count, recv_count; /* elements the buffers hold */
};

struct sim_opts {
    uint64_t seed;   /* order among ready events and the garbage written */
    bool rendezvous; /* a send completes only once its receive is posted */
    int lazy;        /* 0: completions as likely as anything else; 1: send completions
                        come late (a source is read long after the send started); 2:
                        every transfer completes late */
    coll_dtype_t dtype;
    coll_op_t op;        /* COLL_AVG: sum, then coll__reduce_div on the ranks with a result */
    enum coll_coll coll; /* which ranks hold a reduced result (allreduce and reduce-scatter:
                            all; reduce: root) */
    int32_t root;
    size_t count; /* elements of RECV that hold the result */
};

struct sim_stats {
    uint64_t events; /* steps started plus transfers completed */
    uint64_t messages;
    uint64_t bytes; /* sent over all links */
};

/* Run the n schedules (scheds[r] is rank r's) over mem[r]. Returns SIM_OK, or the first
 * problem with a message in err naming the rank and step. stats may be NULL. */
int sim_run(const struct coll_schedule *scheds, int32_t n, const struct sim_mem *mem,
            const struct sim_opts *o, struct sim_stats *stats, char *err, size_t errlen);

/* A static check of one schedule, independent of any order: every two steps that touch one
 * element, at least one of them writing, are ordered by dependencies (SEND and RECV count as
 * one memory, since they may be), and no step reads SEND[i] once RECV[i] may have been
 * written (the in-place rule). SIM_RACE with a message otherwise. */
int sim_check_races(const struct coll_schedule *s, char *err, size_t errlen);

/* The buffers of one rank in one collective, as NCCL lays them out (count is NCCL's: per
 * rank for all-gather, reduce-scatter, all-to-all, gather and scatter):
 *
 *   coll            SEND          RECV          in place (alias)
 *   allreduce       count         count         SEND == RECV
 *   broadcast       count (root)  count         root: SEND == RECV
 *   reduce          count         count (root)  root: SEND == RECV
 *   allgather       count         n count       SEND == RECV + r count
 *   reducescatter   n count       count         RECV == SEND + r count
 *   alltoall        n count       n count       SEND == RECV
 *   gather          count         n count (root) root: SEND == RECV + root count
 *   scatter         n count (root) count        root: RECV == SEND + root count
 *   barrier         -             -             -
 */
struct sim_layout {
    size_t send_count, recv_count; /* elements; 0: the buffer may be NULL */
    bool alias;                    /* this rank has an in-place form */
    int64_t send_at;               /* in place, SEND[i] is RECV[i + send_at] */
};
void sim_layout_of(enum coll_coll coll, int32_t n, int32_t rank, int32_t root, size_t count,
                   struct sim_layout *l);

/* sim_check_races for a rank whose SEND, in place, starts at RECV[send_at] (negative: RECV
 * starts at SEND[-send_at]): SEND[i] and RECV[i + send_at] are then one element, so the
 * in-place rule reads "no step reads SEND[i] once RECV[i + send_at] may have been
 * written". sim_check_races is send_at 0. */
int sim_check_races_at(const struct coll_schedule *s, int64_t send_at, char *err, size_t errlen);

/* Which ranks wait for rank `from`: reached[r] (n entries) is set when some step of rank r
 * depends, through dependencies and messages (a receive on its matched send), on some
 * step of rank from; reached[from] is set when from has steps. A barrier is correct when
 * this holds for every pair. SIM_OK, or SIM_NOMEM. */
int sim_reach(const struct coll_schedule *scheds, int32_t n, int32_t from, bool *reached);

const char *sim_status_name(int st);

#endif /* COLL_TEST_SIM_H */
