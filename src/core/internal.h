/*
 * internal.h - the communicator: its transports, engine state, paths' state and error
 * text, for the core, the paths and the API (the settings, logging and errors it uses are
 * the base's: base/base.h). Nothing here is part of the public ABI.
 *
 * Divisions: 4 the communicator, 5 engine (ops and progress).
 */
#ifndef COLL_INTERNAL_H
#define COLL_INTERNAL_H

#include "../base/base.h"
#include "../base/net.h"
#include "../transport/transport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- 4 the communicator ---------------------------------------------------------------- */

struct coll_op;
struct coll_path_host;
struct coll_settings_xchg;
struct coll_settings_agreed;

/* Slots of per-path state in a comm (src/path/path.h names them). */
#define COLL_PATH_STATES 4

/* A comm's log of its last COLL_AGREE_LOG collectives (src/core/agree.c), one entry each. */
#define COLL_AGREE_LOG 16
struct coll_sig_rec {
    _Atomic uint64_t cseq;            /* 1 + the collective's number, 0: empty */
    struct coll_sig sig;
};

/* Every object that knows the comm's layout links src/core/error.c, the base's error sink for
 * comms (registered at startup): a comm's errors always carry its rank and stay its text. */
COLL_INTERNAL extern const char coll__core_error_sink;
__attribute__((used)) static const char *const coll__core_error_sink_ref = &coll__core_error_sink;

struct coll_comm {
    int rank, nranks;
    uint64_t comm_id;
    uint8_t secret[COLL_SECRET_BYTES];
    struct coll_config cfg;           /* per-comm settings: rank 0's on every rank */
    /* the settings exchange at creation, and what the comm agreed on besides cfg
     * (src/core/settings.c) */
    struct coll_settings_xchg *xchg;  /* NULL once agreed */
    struct coll_settings_agreed *agreed;
    struct coll_peer_info self;
    struct coll_peer_info *peers;     /* [nranks], from the bootstrap */
    /* what the transports see of this comm (src/core/net.c) */
    struct coll_net net;

    /* transports: every one this rank brought up (slot i is coll__transports[i], NULL
     * when absent or declined), and per peer the one both ends agreed on (src/api/comm.c) */
    void *tp_ctx[COLL_MAX_TRANSPORTS];
    const struct coll_transport **peer_tp; /* [nranks] */
    int32_t *hosts;                   /* [nranks]: host of each rank, 0 .. nhosts-1 */
    int32_t nhosts;
    struct coll_chan **chans;         /* [nranks], NULL until connected */

    /* engine: everything below is guarded by lock unless atomic */
    pthread_mutex_t lock;
    pthread_cond_t cond;              /* waiters: op completion, driver hand-over */
    pthread_cond_t pcond;             /* the progress thread: work for it, or stop */
    int epfd;                         /* transports register their fds here (struct coll_pollent) */
    int wakefd;                       /* eventfd in epfd: wakes a sleeping driver */
    struct coll_pollent wake_pe;
    struct coll_op *ops_head, *ops_tail; /* issued, not yet completed, in order */
    /* atomic: a call that runs outside the queue takes its numbers without the lock */
    _Atomic uint64_t next_seq;        /* sequence number of the next op issued */
    _Atomic uint64_t next_coll_seq;   /* ... of the next op holding a collective */
    int waiters;                      /* threads waiting that want to drive progress */
    int cond_sleepers;                /* threads asleep on cond: the only ones a completion wakes */
    /* the last freed one-part op, kept for the next call (coll__op_new); freed at fini */
    struct coll_op *_Atomic spare_op;
    bool driving;                     /* some thread is inside coll__engine_progress */
    uint64_t polled_ns;               /* coll_test's last poll (coll__now_ns) */
    uint64_t progress_drives;         /* times the progress thread took the drive (tests) */
    bool poll_only;                   /* the driver is coll_test's: it must not block */
    bool stopping;                    /* destroy in progress: progress thread exits */
    bool progress_idle;               /* the progress thread sleeps until signalled */
    bool spin_yield;                  /* more ranks on this host than cores: yield in spins */
    bool poll_fds_always;             /* some peer's transport is driven by fds only */
    pthread_t progress_thread;
    bool progress_started;

    /* payload bytes handed to the transport for sending (coll_comm_bytes_sent) */
    _Atomic uint64_t bytes_sent;
    /* messages posted to send minus those posted to receive (engine lock): summed over the
     * ranks at a clean destroy (src/core/ctl.c), anything but 0 is a message sent that no
     * rank received, a disagreement no receiver could see */
    int64_t msg_balance;

    /* failure: first error wins; later calls fail fast with it */
    _Atomic int failed;               /* coll_status_t, COLL_SUCCESS while healthy */
    _Atomic int aborted;

    /* scratch memory for schedules, grown on demand, owned by the engine */
    void *scratch;
    size_t scratch_bytes;

    /* caches */
    struct coll_sched_cache *sched_cache;
    struct coll_cost_params *cost;    /* the selector's model of this machine */
    struct coll_tracer *tracer;       /* COLL_TRACE (src/core/trace.c), NULL = off */
    struct coll_ctl *ctl;             /* the control plane (src/core/ctl.c), NULL: 1 rank */

    /* the shared-memory fast path (src/path/flat.c): decided at the first call that could
     * use it, the same way on every rank */
    struct coll_flat *flat;           /* its segment, NULL until first used */
    int8_t flat_state;                /* 0 undecided, 1 on, -1 off */
    bool flat_segment;                /* one host over shm: the segment is mapped (its log) */
    bool flat_cuda;                   /* CUDA is up: device buffers take the general path */
    bool flat_sliced;                 /* its sliced all-reduce runs on this comm */
    uint32_t flat_colls, flat_forced; /* collectives it may run; those COLL_ALGO forces */
    uint64_t reqs_issued;             /* non-blocking ops issued (the API's thread) ... */
    uint64_t reqs_drained;            /* ... and that count when the queue was seen empty */
    /* the paths' hooks into the engine (src/path/flat.c; NULL when absent): a collective op
     * starts; one has made no progress for a while (true, with the reason in why, when a
     * peer is known to have called something else) */
    void (*on_call_start)(struct coll_comm *comm, uint64_t cseq, const struct coll_sig *s);
    bool (*on_call_stall)(struct coll_comm *comm, uint64_t cseq, const struct coll_sig *s,
                          char *why, size_t n);

    /* the paths' own state, one slot per path that keeps any (src/path/path.h,
     * COLL_PATH_STATE_*), made and freed by the paths' hooks; and the API's calls that the
     * paths made of host calls run their calls with (handed down at coll__path_comm_init) */
    void *path_state[COLL_PATH_STATES];
    const struct coll_path_host *path_host;

    /* the signatures of the last COLL_AGREE_LOG collectives, by number (src/core/agree.c) */
    struct coll_sig_rec sig_log[COLL_AGREE_LOG];

    /* last error text (coll_last_error); errlock because abort can come from any thread */
    pthread_mutex_t errlock;
    char errmsg[1024];
};

/* The names of the transports this comm uses to reach its peers ("shm, tcp"), into buf. */
COLL_INTERNAL const char *coll__comm_transports(const struct coll_comm *comm, char *buf,
                                                size_t len);

/* ---- 5 engine ------------------------------------------------------------------------ */

/* Mark comm failed with st (first failure wins; its message stays), wake every waiter,
 * and let peers know by closing connections (the transport's close). Engine lock held. */
COLL_INTERNAL void coll__comm_fail(struct coll_comm *comm, coll_status_t st);
/* COLL_INVALID_ARGUMENT, with a message naming fn, unless comm is live: made by
 * coll_comm_init and not yet destroyed (src/api/comm.c; never reads through comm). */
COLL_INTERNAL coll_status_t coll__comm_check(const struct coll_comm *comm, const char *fn);
/* The CPUs this host's ranks share: COLL_HOST_CPUS when set (ranks pinned one to a CPU see
 * only their own in their affinity), else the affinity of this host's ranks (the base's
 * coll__host_cpus_of, src/base/host.c). */
static inline int coll__host_cpus(const struct coll_comm *comm)
{
    return coll__host_cpus_of(comm->cfg.host_cpus, &comm->self, comm->peers, comm->nranks,
                              comm->rank, NULL);
}
/* Wake a thread sleeping in the engine's epoll_wait (any thread, no lock needed). */
COLL_INTERNAL void coll__engine_wake(struct coll_comm *comm);
/* Fill comm->net from the comm (ids, secret, settings, self, peers, epoll set, failure
 * state) and the core's ops, once, before the transports' init; the bootstrap sets
 * net.peers with comm->peers (src/core/net.c). */
COLL_INTERNAL void coll__comm_net_init(struct coll_comm *comm);

#endif /* COLL_INTERNAL_H */
