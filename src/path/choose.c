/*
 * choose.c - the one chooser (which path runs a call, and on the sched path which algorithm
 * and chunk), the sched path itself, the paths' set-up and state, and the blocking fast lane
 * of paths that run calls by themselves.
 *
 * Paths are asked in order; the first that takes a call runs it. stream goes first: every
 * stream-ordered call is its own, and no other path takes one. quant next: COLL_QUANT
 * turns a blocking all-reduce outside groups into the quantized one (a rule of the setting,
 * not of prices: the user asked for fewer bytes). flat then: where it takes a call (one host,
 * shared memory, a collective it runs, a size it runs), it beats every schedule measured
 * here (docs/performance.md), at every size it accepts; sched takes everything. The cost
 * model prices the rows (the flat path's row, the schedules' simulation, and the stream and
 * quant paths' own rows over those) for collbench --explain and collviz to show side by
 * side, but the rules decide: they are what every rank evaluates alike without a model, and
 * no measurement has shown a call the model would move to a faster path. Each path's answer
 * is a function of the comm's settings and the call's arguments (its form, for stream and
 * quant: path.h), so every rank chooses alike.
 */
#include "path.h"
#include "flat.h"
#include "qallreduce.h"
#include "stream.h"

#include "../core/agree.h"

#include "../algo/cost.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bool sched_takes(struct coll_comm *comm, const struct coll_call *c, char *why, size_t n)
{
    (void)comm;
    (void)c;
    if (why)
        snprintf(why, n, "the general path takes every call");
    return true;
}

const struct coll_path coll__path_sched = {
    .name = "sched",
    .takes = sched_takes,
    .run = NULL,
};

static const struct coll_path *const paths[] = {&coll__path_stream, &coll__path_quant,
                                                 &coll__path_flat, &coll__path_sched};

void coll__call_args(const struct coll_call *c, struct coll_algo_args *a)
{
    const struct coll_comm *comm = c->comm;

    *a = (struct coll_algo_args){
        .coll = c->coll,
        .nranks = comm->nranks,
        .rank = comm->rank,
        .root = c->root,
        .count = c->count,
        .dtype = c->dtype,
        .elem_size = coll__dtype_size(c->dtype),
        .hosts = comm->nhosts > 1 ? comm->hosts : NULL,
        .nhosts = comm->nhosts > 1 ? comm->nhosts : 0,
    };
    a->chunk_count = a->elem_size ? (size_t)comm->cfg.chunk_bytes / a->elem_size : 1;
    if (a->chunk_count == 0)
        a->chunk_count = 1;
}

void coll__flat_sizes(struct coll_comm *comm, struct coll_cost_flat_sizes *s)
{
    s->small_bytes = (size_t)comm->cfg.shm_flat_bytes;
    s->piece_bytes = comm->flat_sliced ? (size_t)comm->cfg.shm_sliced_bytes : 0;
}

/* Asked in full: the host paths' prices (the flat row where the path could run, the sched
 * path's pick: what the general path would run the call with where another path takes it),
 * and the chosen path's own row where it has one (stream, quant: over those). */
static coll_status_t price_rows(struct coll_comm *comm, const struct coll_call *c,
                               struct coll_choice *out, char *why, size_t n)
{
    struct coll_cost_params defaults;
    const struct coll_cost_params *p = comm->cost;
    struct coll_cost_flat_sizes sizes;
    struct coll_algo_args a;
    const struct coll_algo *algo = NULL;
    coll_status_t st;
    double t;

    out->sched_seconds = out->flat_seconds = out->path_seconds = -1;
    why[0] = '\0';
    if (c->coll == COLL_COLL_SENDRECV)
        return COLL_SUCCESS;
    if (!p) {
        coll__cost_params_default(&defaults);
        p = &defaults;
    }
    /* the flat row where the path could run at all, every rank on one host over shared
     * memory (COLL_SHM_FLAT and its sizes may still turn it off: its rules decide) */
    coll__flat_sizes(comm, &sizes);
    if (comm->flat_segment && coll__cost_predict_flat(p, c->coll, c->count *
                                                     coll__dtype_size(c->dtype),
                                                     comm->nranks, &sizes, &t) == COLL_SUCCESS)
        out->flat_seconds = t;
    /* COLL_ALGO=flat for this collective leaves the selector nothing to pick */
    if (out->path == &coll__path_sched || !(comm->flat_forced & (1u << c->coll))) {
        coll__call_args(c, &a);
        st = coll__select_priced(comm, &a, &algo, &out->sched_seconds, why, n);
        if (st != COLL_SUCCESS && out->path == &coll__path_sched)
            return st;
        if (st == COLL_SUCCESS) {
            out->algo = algo;
            out->chunk_count = a.chunk_count;
        }
    }
    if (out->path->price)
        out->path_seconds = out->path->price(comm, c, p, out);
    return COLL_SUCCESS;
}

static void why_add(struct coll_choice *out, const char *fmt, ...) COLL_PRINTF(2, 3);
static void why_add(struct coll_choice *out, const char *fmt, ...)
{
    size_t o = strlen(out->why);
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(out->why + o, sizeof(out->why) - o, fmt, ap);
    va_end(ap);
}

coll_status_t coll__choose(struct coll_comm *comm, const struct coll_call *c, bool full,
                           struct coll_choice *out)
{
    char why[256], swhy[256];

    /* field by field: clearing the whole struct (its why) was a fifth of what a blocking
     * 8 B call spends here */
    out->path = NULL;
    out->algo = NULL;
    out->chunk_count = 0;
    out->sched_seconds = out->flat_seconds = out->path_seconds = -1;
    out->why[0] = '\0';
    out->reason_at = 0;
    for (size_t i = 0; i < COLL_ARRAY_SIZE(paths); i++) {
        const struct coll_path *p = paths[i];
        bool yes;
        coll_status_t st;

        why[0] = '\0';
        /* asked without a call to run (collbench --explain, collviz), the flat path answers
         * from this rank's view rather than setting its segment up, which every rank does
         * together */
        if (full && p == &coll__path_flat) {
            yes = c->coll != COLL_COLL_SENDRECV &&
                  coll__flat_takes(comm, c->coll, c->count * coll__dtype_size(c->dtype));
            if (yes)
                snprintf(why, sizeof(why), "one host, shared memory%s",
                         (comm->flat_forced & (1u << c->coll)) ? ", forced by COLL_ALGO" : "");
        } else
            yes = p->takes(comm, c, full ? why : NULL, sizeof(why));
        if (!yes) {
            if (full && why[0])
                why_add(out, "%s: %s; ", p->name, why);
            continue;
        }
        out->path = p;
        if (!full)
            return COLL_SUCCESS;
        st = price_rows(comm, c, out, swhy, sizeof(swhy));
        if (st != COLL_SUCCESS)
            return st;
        if (p == &coll__path_sched && swhy[0])
            snprintf(why, sizeof(why), "%s", swhy);
        why_add(out, "%s%s", p->name, why[0] ? ": " : "");
        out->reason_at = strlen(out->why);
        why_add(out, "%s", why);
        if (out->flat_seconds >= 0 || out->sched_seconds >= 0 || out->path_seconds >= 0) {
            why_add(out, " [priced:");
            if (out->path_seconds >= 0)
                why_add(out, " %s %.2f us%s", p->name, out->path_seconds * 1e6,
                        out->flat_seconds >= 0 || out->sched_seconds >= 0 ? "," : "");
            if (out->flat_seconds >= 0)
                why_add(out, " flat %.2f us%s", out->flat_seconds * 1e6,
                        out->sched_seconds >= 0 ? "," : "");
            if (out->sched_seconds >= 0)
                why_add(out, " sched %s %.2f us", out->algo ? out->algo->name : "?",
                        out->sched_seconds * 1e6);
            why_add(out, "]");
        }
        return COLL_SUCCESS;
    }
    return coll__error(comm, COLL_INTERNAL_ERROR, "no path takes %s",
                       coll__coll_name(c->coll));
}

coll_status_t coll__path_comm_init(struct coll_comm *comm, const struct coll_path_host *host)
{
    coll_status_t st;

    comm->path_host = host;
    st = coll__stream_comm_init(comm);
    if (st == COLL_SUCCESS)
        st = coll__quant_comm_init(comm);
    if (st == COLL_SUCCESS)
        st = coll__flat_comm_init(comm);
    return st;
}

void coll__path_comm_fini(struct coll_comm *comm)
{
    /* the stream worker first: what it has queued runs on the comm's other paths */
    coll__stream_comm_fini(comm);
    coll__quant_comm_fini(comm);
}

coll_status_t coll__path_comm_end(struct coll_comm *comm)
{
    /* with requests nobody waited for, the last calls may not have run: nothing to settle
     * (destroy does not wait for them) */
    if (comm->reqs_issued != comm->reqs_drained) {
        pthread_mutex_lock(&comm->lock);
        bool idle = comm->ops_head == NULL;
        pthread_mutex_unlock(&comm->lock);
        if (!idle)
            return (coll_status_t)atomic_load(&comm->failed);
    }
    return coll__flat_comm_end(comm);
}

void coll__path_note_request(struct coll_comm *comm)
{
    comm->reqs_issued++;
}

coll_status_t coll__path_run_now(struct coll_comm *comm, const struct coll_path *path,
                                 const struct coll_call *c)
{
    struct coll_call call = *c;
    coll_status_t st;

    /* ops on a comm run in issue order: requests issued earlier finish first */
    if (comm->reqs_issued != comm->reqs_drained) {
        st = coll__engine_drain(comm);
        if (st != COLL_SUCCESS) {
            coll__set_thread_error(comm->errmsg);
            return st;
        }
        comm->reqs_drained = comm->reqs_issued;
    }
    coll__call_sig(&call, &call.sig);
    coll__sig_how(&call.sig, NULL, 0); /* the one path with a run hook: flat */
    call.seq = coll__engine_take_seq(comm, call.coll != COLL_COLL_SENDRECV ? &call.sig : NULL,
                                     &call.cseq);
    return path->run(comm, &call);
}
