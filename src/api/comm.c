/*
 * comm.c - unique ids, communicator init (from an id or from the launcher's environment),
 * abort and destroy.
 *
 * Init order: configuration snapshot -> engine fds -> transport init (data listener, whose
 * address goes into our peer info) -> bootstrap rendezvous (everyone's peer info and
 * settings) -> rank 0's per-comm settings adopted (src/core/settings.c) -> progress
 * thread. Channels to peers are made lazily by the executor, the first time a schedule
 * talks to a peer.
 */
#include "../core/bootstrap.h"
#include "../core/ctl.h"
#include "../core/exec.h"
#include "../core/settings.h"
#include "comm.h"
#include "launcher.h"
#include "../core/trace.h"
#include "../algo/cost.h"
#include "../path/path.h"
#include "../reduce/quant.h"
#include "../reduce/reduce.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

COLL_API coll_status_t coll_get_unique_id(coll_unique_id_t *id_p)
{
    coll__log_init();
    if (!id_p)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "coll_get_unique_id: id_p is NULL");
    return coll__bootstrap_root_start(id_p);
}

COLL_API coll_status_t coll_unique_id_to_string(const coll_unique_id_t *id, char *buf,
                                                size_t buflen)
{
    static const char hex[] = "0123456789abcdef";

    if (!id || !buf)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "coll_unique_id_to_string: %s is NULL",
                           !id ? "id" : "buf");
    if (buflen < COLL_UNIQUE_ID_STRLEN)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "coll_unique_id_to_string: buflen %zu < COLL_UNIQUE_ID_STRLEN (%d)",
                           buflen, COLL_UNIQUE_ID_STRLEN);
    for (int i = 0; i < COLL_UNIQUE_ID_BYTES; i++) {
        uint8_t b = (uint8_t)id->internal[i];
        buf[2 * i] = hex[b >> 4];
        buf[2 * i + 1] = hex[b & 15];
    }
    buf[2 * COLL_UNIQUE_ID_BYTES] = '\0';
    return COLL_SUCCESS;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

COLL_API coll_status_t coll_unique_id_from_string(const char *str, coll_unique_id_t *id_p)
{
    coll_unique_id_t id;
    struct coll_id_info info;

    if (!str || !id_p)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "coll_unique_id_from_string: %s is NULL", !str ? "str" : "id_p");
    if (strlen(str) != 2 * COLL_UNIQUE_ID_BYTES)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "unique id text has %zu characters, expected %d hex digits",
                           strlen(str), 2 * COLL_UNIQUE_ID_BYTES);
    for (int i = 0; i < COLL_UNIQUE_ID_BYTES; i++) {
        int hi = hexval(str[2 * i]), lo = hexval(str[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return coll__error(NULL, COLL_INVALID_ARGUMENT,
                               "unique id text has a non-hex character at offset %d",
                               hi < 0 ? 2 * i : 2 * i + 1);
        id.internal[i] = (char)(hi << 4 | lo);
    }
    if (coll__id_decode(&id, &info) != COLL_SUCCESS)
        return COLL_INVALID_ARGUMENT; /* message set by the decoder */
    *id_p = id;
    return COLL_SUCCESS;
}

/* ---- live communicators ----------------------------------------------------------------
 *
 * Every public call on a comm first asks whether the handle is one coll_comm_init returned
 * and coll_comm_destroy has not yet taken back. The answer never reads through the handle:
 * a destroyed comm's memory is freed, and a never-initialized handle may point anywhere. A
 * table of live handles (open addressing, linear probing) is read without a lock: a call on
 * a live comm costs a hash and, nearly always, one load. Inserts and removals take the lock;
 * a removed slot becomes a tombstone that a later insert reuses, so the table never needs to
 * move under its lock-free readers. The rare process with more live comms than the table
 * holds keeps the rest in a locked list, searched only when the table has no answer.
 *
 * Where this ends: a handle is a pointer. Once a destroyed comm's memory is handed out
 * again and a new comm is made at the same address, the old handle names the new comm, and
 * nothing in the pointer can tell them apart. */
#define LIVE_SLOTS 1024 /* a power of two */
#define LIVE_TOMB ((uintptr_t)1)

static _Atomic uintptr_t live_slot[LIVE_SLOTS];
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct live_more {
    struct coll_comm *comm;
    struct live_more *next;
} *live_more;
static atomic_bool live_any_more;

static size_t live_hash(const void *p)
{
    return (size_t)(((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ull >> 32) & (LIVE_SLOTS - 1);
}

static bool live_in_table(const void *p)
{
    size_t h = live_hash(p);

    for (size_t i = 0; i < LIVE_SLOTS; i++) {
        uintptr_t v = atomic_load_explicit(&live_slot[(h + i) & (LIVE_SLOTS - 1)],
                                           memory_order_acquire);
        if (v == (uintptr_t)p)
            return true;
        if (v == 0)
            return false;
    }
    return false;
}

static bool live_find(const void *p)
{
    bool found = false;

    if (live_in_table(p))
        return true;
    if (!atomic_load_explicit(&live_any_more, memory_order_acquire))
        return false;
    pthread_mutex_lock(&live_lock);
    for (struct live_more *m = live_more; m && !found; m = m->next)
        found = m->comm == p;
    pthread_mutex_unlock(&live_lock);
    return found;
}

static bool live_add(struct coll_comm *comm)
{
    size_t h = live_hash(comm);
    bool ok = false;

    pthread_mutex_lock(&live_lock);
    for (size_t i = 0; i < LIVE_SLOTS && !ok; i++) {
        _Atomic uintptr_t *slot = &live_slot[(h + i) & (LIVE_SLOTS - 1)];
        uintptr_t v = atomic_load_explicit(slot, memory_order_relaxed);
        if (v == 0 || v == LIVE_TOMB) {
            atomic_store_explicit(slot, (uintptr_t)comm, memory_order_release);
            ok = true;
        }
    }
    if (!ok) {
        struct live_more *m = malloc(sizeof(*m));
        if (m) {
            m->comm = comm;
            m->next = live_more;
            live_more = m;
            atomic_store(&live_any_more, true);
            ok = true;
        }
    }
    pthread_mutex_unlock(&live_lock);
    return ok;
}

/* Take comm out; false when it was not live (destroyed already, by another thread too). */
static bool live_remove(const struct coll_comm *comm)
{
    size_t h = live_hash(comm);
    bool found = false;

    pthread_mutex_lock(&live_lock);
    for (size_t i = 0; i < LIVE_SLOTS; i++) {
        _Atomic uintptr_t *slot = &live_slot[(h + i) & (LIVE_SLOTS - 1)];
        uintptr_t v = atomic_load_explicit(slot, memory_order_relaxed);
        if (v == (uintptr_t)comm) {
            atomic_store_explicit(slot, LIVE_TOMB, memory_order_release);
            found = true;
            break;
        }
        if (v == 0)
            break;
    }
    for (struct live_more **m = &live_more; !found && *m; m = &(*m)->next) {
        if ((*m)->comm == comm) {
            struct live_more *dead = *m;
            *m = dead->next;
            free(dead);
            found = true;
            break;
        }
    }
    atomic_store(&live_any_more, live_more != NULL);
    pthread_mutex_unlock(&live_lock);
    return found;
}

coll_status_t coll__comm_check(const struct coll_comm *comm, const char *fn)
{
    if (!comm)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "%s: comm is NULL", fn);
    if (live_find(comm))
        return COLL_SUCCESS;
    return coll__error(NULL, COLL_INVALID_ARGUMENT,
                       "%s: comm %p is not a live communicator (destroyed, or never made by "
                       "coll_comm_init, coll_comm_split or coll_comm_shrink)",
                       fn, (const void *)comm);
}

static void comm_free(struct coll_comm *comm)
{
    if (!comm)
        return;
    coll__path_comm_fini(comm); /* the stream worker runs collectives on the engine */
    coll__ctl_fini(comm);         /* its thread fails the comm: before the transports go */
    coll__engine_fini(comm);
    pthread_mutex_lock(&comm->lock);
    while (comm->ops_head) {
        struct coll_op *op = comm->ops_head;
        comm->ops_head = op->next;
        atomic_store(&op->status, COLL_INVALID_USAGE);
        op->next = NULL;
        /* nobody may use a request after destroy (coll.h): free it with the comm */
        coll__op_free(op);
    }
    comm->ops_tail = NULL;
    for (int i = 0; coll__transports[i]; i++) {
        if (comm->tp_ctx[i])
            coll__transports[i]->fini(comm->tp_ctx[i]);
        comm->tp_ctx[i] = NULL;
    }
    pthread_mutex_unlock(&comm->lock);
    coll__trace_fini(comm); /* the engine has stopped: no more events */
    if (comm->epfd >= 0)
        close(comm->epfd);
    if (comm->wakefd >= 0)
        close(comm->wakefd);
    coll__plan_cache_free(comm);
    coll__select_fini(comm);
    coll__settings_free(comm);
    free(comm->peers);
    free(comm->chans);
    free(comm->peer_tp);
    free(comm->hosts);
    free(comm->scratch);
    pthread_mutex_destroy(&comm->lock);
    pthread_mutex_destroy(&comm->errlock);
    pthread_cond_destroy(&comm->cond);
    pthread_cond_destroy(&comm->pcond);
    free(comm);
}

static void transport_names(uint32_t mask, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; coll__transports[i]; i++) {
        size_t o = strlen(buf);
        if ((mask & (1u << i)) && o < len)
            snprintf(buf + o, len - o, "%s%s", o ? ", " : "", coll__transports[i]->name);
    }
    if (!buf[0])
        snprintf(buf, len, "none");
}

/* Bring up every transport of the build (or only COLL_TRANSPORT's). One that cannot start
 * here (no /dev/shm, no RDMA device) is left out with a WARN saying why, unless it was
 * forced: then init fails. Runs before the bootstrap, which publishes self.tp_mask. */
static coll_status_t init_transports(struct coll_comm *comm)
{
    const char *forced = comm->cfg.transport;
    int n = 0;

    if (forced[0] && !coll__transport_find(forced)) {
        char names[128];
        transport_names(~0u, names, sizeof(names));
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "COLL_TRANSPORT='%s' is not a transport of this build (%s)", forced,
                           names);
    }
    for (int i = 0; coll__transports[i]; i++) {
        const struct coll_transport *tp = coll__transports[i];
        coll_status_t st;

        if (forced[0] && strcmp(forced, tp->name))
            continue;
        st = tp->init(&comm->net, &comm->tp_ctx[i]);
        if (st != COLL_SUCCESS) {
            comm->tp_ctx[i] = NULL;
            if (forced[0])
                return st;
            COLL_WARN(COLL_SUB_INIT, "rank %d: transport %s is not available, using the others: %s",
                      comm->rank, tp->name, coll_last_error(comm));
            pthread_mutex_lock(&comm->errlock);
            comm->errmsg[0] = '\0';
            pthread_mutex_unlock(&comm->errlock);
            continue;
        }
        comm->self.tp_mask |= 1u << i;
        n++;
    }
    if (!n)
        return coll__error(comm, COLL_SYSTEM_ERROR, "no transport could start on this rank");
    return COLL_SUCCESS;
}

/* This rank's host's ranks and its machine's (other hosts' on its kernel too), itself
 * included. */
static void count_ranks(const struct coll_comm *comm, int *host, int *machine)
{
    *host = *machine = 0;
    for (int p = 0; p < comm->nranks; p++) {
        *host += comm->peers[p].host_hash == comm->self.host_hash;
        *machine += comm->peers[p].machine_hash == comm->self.machine_hash;
    }
}

/* Hosts numbered by their lowest rank, for the hierarchical algorithms. */
static coll_status_t number_hosts(struct coll_comm *comm)
{
    comm->hosts = malloc((size_t)comm->nranks * sizeof(*comm->hosts));
    if (!comm->hosts)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for %d ranks", comm->nranks);
    comm->nhosts = 0;
    for (int p = 0; p < comm->nranks; p++) {
        int q = 0;
        while (q < p && comm->peers[q].host_hash != comm->peers[p].host_hash)
            q++;
        comm->hosts[p] = q < p ? comm->hosts[q] : comm->nhosts++;
    }
    return COLL_SUCCESS;
}

/* After the bootstrap: per peer, the first transport in preference order that both ends
 * brought up and that can reach the peer. Both ends see the same masks and probes are
 * symmetric, so they agree without another exchange. */
static coll_status_t choose_transports(struct coll_comm *comm)
{
    comm->peer_tp = calloc((size_t)comm->nranks, sizeof(*comm->peer_tp));
    if (!comm->peer_tp)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for %d ranks", comm->nranks);
    /* COLL_TRANSPORT is rank 0's now: a rank that forced none, or another, takes it too
     * where it brought it up (all but a forced transport were, before the bootstrap) */
    const struct coll_transport *forced =
        comm->cfg.transport[0] ? coll__transport_find(comm->cfg.transport) : NULL;
    int fi = forced ? coll__transport_index(forced) : -1;

    /* every rank sees every rank's transports: all of them fail alike, naming the first
     * rank that cannot follow */
    for (int p = 0; comm->cfg.transport[0] && p < comm->nranks; p++) {
        char has[128];
        if (fi >= 0 && (comm->peers[p].tp_mask & (1u << fi)))
            continue;
        transport_names(comm->peers[p].tp_mask, has, sizeof(has));
        return coll__error(comm, COLL_INVALID_USAGE,
                           "COLL_TRANSPORT: rank 0 forces '%s', which rank %d (host %s) did "
                           "not bring up (it has %s, as its own COLL_TRANSPORT asked): set "
                           "COLL_TRANSPORT alike on every rank",
                           comm->cfg.transport, p, comm->peers[p].hostname, has);
    }
    for (int p = 0; p < comm->nranks; p++) {
        uint32_t both = comm->self.tp_mask & comm->peers[p].tp_mask;
        if (fi >= 0)
            both &= 1u << fi;
        if (p == comm->rank)
            continue;
        for (int i = 0; coll__transports[i] && !comm->peer_tp[p]; i++)
            if ((both & (1u << i)) && coll__transports[i]->probe(comm->tp_ctx[i], p))
                comm->peer_tp[p] = coll__transports[i];
        if (comm->peer_tp[p] && comm->peer_tp[p]->fds_only)
            comm->poll_fds_always = true;
        if (!comm->peer_tp[p]) {
            char mine[128], theirs[128];
            transport_names(comm->self.tp_mask, mine, sizeof(mine));
            transport_names(comm->peers[p].tp_mask, theirs, sizeof(theirs));
            return coll__error(comm, COLL_INVALID_USAGE,
                               "no transport reaches rank %d (host %s): this rank has %s, "
                               "it has %s (check COLL_TRANSPORT on both)",
                               p, comm->peers[p].hostname, mine, theirs);
        }
    }
    {
        int mc, cpus = coll__host_cpus_of(comm->cfg.host_cpus, &comm->self, comm->peers,
                                          comm->nranks, comm->rank, &mc);
        int lr, mr;
        bool crowded;

        /* ranks of other hosts on this machine (emulated hosts, containers that share its
         * PID namespace) need its cores as much: a rank that polls without yielding holds
         * one from the peer whose message it waits for until its poll ends (4 emulated
         * hosts on 2 cores: an 8-byte all-reduce took 3x as long) */
        count_ranks(comm, &lr, &mr);
        crowded = mr > mc;
        comm->spin_yield = lr > cpus || crowded;
        if (crowded && lr <= cpus && comm->rank == 0)
            COLL_INFO(COLL_SUB_INIT,
                      "%d ranks of this comm share this machine's %d CPUs (other hosts' too: "
                      "network namespaces): waits yield the core while they poll",
                      mr, mc);
        /* priced before the peers were known with this rank's CPUs alone; now with the
         * number every rank agreed on, so that all of them pick alike */
        if (comm->cost && comm->agreed && comm->agreed->cores > 0)
            comm->cost->cores = comm->agreed->cores;
        else if (comm->cost)
            comm->cost->cores = cpus;
    }
    return number_hosts(comm);
}

const char *coll__comm_transports(const struct coll_comm *comm, char *buf, size_t len)
{
    uint32_t used = 0;

    for (int p = 0; comm->peer_tp && p < comm->nranks; p++)
        if (comm->peer_tp[p])
            used |= 1u << coll__transport_index(comm->peer_tp[p]);
    transport_names(used ? used : comm->self.tp_mask, buf, len);
    return buf;
}
/* The settings whose choices live above the base (src/base/param.c checks the others):
 * COLL_QUANT names a codec of src/reduce; the reduction kernels read COLL_REDUCE_ISA and
 * COLL_REDUCE_STREAM_BYTES when first used, so use them now and a wrong value shows at
 * creation. */
static void check_upper_settings(int rank, const struct coll_config *cfg)
{
    char names[256];
    size_t o = 0;
    bool known = !cfg->quant[0] || !strcmp(cfg->quant, "none") || !strcmp(cfg->quant, "0") ||
                 !strcmp(cfg->quant, "off");

    o += (size_t)snprintf(names, sizeof(names), "off");
    for (int c = 0; c < COLL_NUM_CODECS; c++) {
        const char *name = coll__codec_name((enum coll_codec)c);
        known |= !strcmp(cfg->quant, name);
        if (o < sizeof(names))
            o += (size_t)snprintf(names + o, sizeof(names) - o, ", %s", name);
    }
    if (!known)
        coll__env_warn(rank, "COLL_QUANT='%s' is not a codec (%s): the all-reduces it "
                       "would quantize fail with COLL_INVALID_ARGUMENT", cfg->quant, names);
    (void)coll__reduce_isa();
}


COLL_API coll_status_t coll_comm_init(coll_comm_t **comm_p, int nranks,
                                      const coll_unique_id_t *id, int rank)
{
    return coll__comm_init_child(comm_p, nranks, id, rank, NULL);
}

coll_status_t coll__comm_init_child(struct coll_comm **comm_p, int nranks,
                                    const coll_unique_id_t *id, int rank,
                                    const struct coll_comm *parent)
{
    struct coll_id_info info;
    struct coll_comm *comm;
    coll_status_t st;

    coll__log_init();
    if (!comm_p)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "coll_comm_init: comm_p is NULL");
    if (!id)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "coll_comm_init: id is NULL");
    if (nranks < 1)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "coll_comm_init: nranks %d < 1", nranks);
    if (rank < 0 || rank >= nranks)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "coll_comm_init: rank %d is out of range [0, %d)", rank, nranks);
    st = coll__id_decode(id, &info);
    if (st != COLL_SUCCESS)
        return st;

    comm = calloc(1, sizeof(*comm));
    if (!comm)
        return coll__error(NULL, COLL_SYSTEM_ERROR, "out of memory for a communicator");
    comm->epfd = comm->wakefd = -1;
    pthread_mutex_init(&comm->lock, NULL);
    pthread_mutex_init(&comm->errlock, NULL);
    pthread_cond_init(&comm->cond, NULL);
    pthread_cond_init(&comm->pcond, NULL);
    comm->rank = rank;
    comm->nranks = nranks;
    atomic_store(&comm->failed, COLL_SUCCESS);

    COLL_CHECK_GOTO(coll__config_load(comm, rank, &comm->cfg), st, out_free);
    COLL_CHECK_GOTO(coll__settings_init(comm, parent), st, out_free);
    check_upper_settings(rank, &comm->cfg);
    COLL_CHECK_GOTO(coll__select_init(comm), st, out_free);
    COLL_CHECK_GOTO(coll__plan_cache_init(comm), st, out_free);
    comm->chans = calloc((size_t)nranks, sizeof(*comm->chans));
    if (!comm->chans) {
        st = coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for %d channels", nranks);
        goto out_free;
    }
    COLL_CHECK_GOTO(coll__engine_init(comm), st, out_free);
    comm->self.rank = rank;
    comm->self.pid = (int32_t)getpid();
    coll__host_identity(&comm->self);
    if (comm->cfg.host_id[0]) {
        char host[COLL_HOSTNAME_MAX];
        snprintf(host, sizeof(host), "%s", comm->self.hostname);
        snprintf(comm->self.hostname, sizeof(comm->self.hostname), "%.15s/%s", host,
                 comm->cfg.host_id);
        comm->self.host_hash = coll__hash64(comm->cfg.host_id, strlen(comm->cfg.host_id),
                                            comm->self.host_hash);
    }
    comm->comm_id = info.comm_id; /* transports name their resources after it */
    coll__comm_net_init(comm);
    COLL_CHECK_GOTO(init_transports(comm), st, out_free);
    COLL_CHECK_GOTO(coll__settings_prepare(comm), st, out_free);
    COLL_CHECK_GOTO(coll__bootstrap_join(comm, &info), st, out_free);
    COLL_CHECK_GOTO(coll__settings_agree(comm), st, out_free);
    coll__settings_xchg_free(comm);
    COLL_CHECK_GOTO(coll__ctl_start(comm), st, out_free);
    COLL_CHECK_GOTO(choose_transports(comm), st, out_free);
    COLL_CHECK_GOTO(coll__trace_init(comm), st, out_free);
    COLL_CHECK_GOTO(coll__engine_start(comm), st, out_free);
    COLL_CHECK_GOTO(coll__path_comm_init(comm, &coll__api_host), st, out_free);
    COLL_CHECK_GOTO(coll__ctl_run(comm), st, out_free);
    if (coll__log_level >= COLL_LOG_INFO) {
        char names[128];
        COLL_INFO(COLL_SUB_INIT, "rank %d/%d: comm %016llx ready on %s (pid %d), transport %s",
                  rank, nranks, (unsigned long long)comm->comm_id, comm->self.hostname,
                  (int)getpid(), coll__comm_transports(comm, names, sizeof(names)));
    }
    if (!live_add(comm)) {
        st = coll__error(comm, COLL_SYSTEM_ERROR, "out of memory to register a communicator");
        goto out_free;
    }
    *comm_p = comm;
    return COLL_SUCCESS;

out_free:
    /* the comm's message is already this thread's message too (coll__error sets both) */
    coll__ctl_abandon(comm, st);
    comm_free(comm);
    return st;
}

/* The launchers and how the id reaches every rank: src/api/launch/. */
COLL_API coll_status_t coll_comm_init_env(coll_comm_t **comm_p)
{
    coll__log_init();
    if (!comm_p)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "coll_comm_init_env: comm_p is NULL");
    return coll__launcher_comm_init(comm_p);
}

COLL_API coll_status_t coll_comm_destroy(coll_comm_t *comm)
{
    if (!comm)
        return COLL_SUCCESS;
    coll_status_t st;

    coll_status_t before;

    if (coll__comm_check(comm, "coll_comm_destroy") != COLL_SUCCESS)
        return COLL_INVALID_ARGUMENT;
    /* the stream worker's queued calls run on comm first, while it is still live */
    coll__path_comm_fini(comm);
    /* a disagreement this rank's calls did not see (a peer found it after they returned, or
     * nobody could until now: src/path/flat.c coll__flat_comm_end) is this call's error; a
     * failure known before (which a call returned, or an abort) is not told again */
    before = (coll_status_t)atomic_load(&comm->failed);
    st = coll__path_comm_end(comm);
    coll__ctl_leave(comm); /* a failure already on its way arrives first */
    if (before == COLL_SUCCESS && st == COLL_SUCCESS)
        st = (coll_status_t)atomic_load(&comm->failed);
    if (before != COLL_SUCCESS || atomic_load(&comm->aborted) ||
        atomic_load(&comm->next_seq) == 0) /* no call of this rank's to disagree with */
        st = COLL_SUCCESS;
    else if (st != COLL_SUCCESS)
        coll__set_thread_error(comm->errmsg);
    /* out of the table: from here on every call on comm is refused */
    live_remove(comm);
    comm_free(comm);
    return st;
}

COLL_API coll_status_t coll_comm_abort(coll_comm_t *comm)
{
    coll_status_t st = coll__comm_check(comm, "coll_comm_abort");

    if (st != COLL_SUCCESS)
        return st;
    atomic_store(&comm->aborted, 1);
    pthread_mutex_lock(&comm->lock);
    if (atomic_load(&comm->failed) == COLL_SUCCESS)
        coll__error(comm, COLL_REMOTE_ERROR, "communicator aborted by coll_comm_abort");
    coll__comm_fail(comm, COLL_REMOTE_ERROR);
    pthread_mutex_unlock(&comm->lock);
    return COLL_SUCCESS;
}

COLL_API coll_status_t coll_comm_rank(const coll_comm_t *comm, int *rank_p)
{
    coll_status_t st = coll__comm_check(comm, "coll_comm_rank");

    if (st != COLL_SUCCESS)
        return st;
    if (!rank_p)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "coll_comm_rank: rank_p is NULL");
    *rank_p = comm->rank;
    return COLL_SUCCESS;
}

COLL_API coll_status_t coll_comm_size(const coll_comm_t *comm, int *size_p)
{
    coll_status_t st = coll__comm_check(comm, "coll_comm_size");

    if (st != COLL_SUCCESS)
        return st;
    if (!size_p)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "coll_comm_size: size_p is NULL");
    *size_p = comm->nranks;
    return COLL_SUCCESS;
}
