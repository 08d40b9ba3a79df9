/*
 * choose.c - the one chooser (which path runs a call, and on the sched path which algorithm
 * and chunk), the sched path itself, and the blocking fast lane of paths that run calls by
 * themselves.
 *
 * Paths are asked in order; the first that takes a call runs it. flat goes first: where it
 * takes a call (one host, shared memory, a collective it runs, a size it runs), it beats
 * every schedule measured here (docs/performance.md), at every size it accepts; sched takes
 * everything. Each path's answer is a function of the comm's settings and the call's
 * arguments, never of the API form (blocking, non-blocking, grouped), so every rank
 * chooses alike.
 */
#include "path.h"
#include "flat.h"

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

static const struct coll_path *const paths[] = {&coll__path_flat, &coll__path_sched};

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

coll_status_t coll__choose(struct coll_comm *comm, const struct coll_call *c, bool full,
                           struct coll_choice *out)
{
    char why[256];

    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < COLL_ARRAY_SIZE(paths); i++) {
        const struct coll_path *p = paths[i];
        bool yes;

        why[0] = '\0';
        /* asked without a call to run (collbench --explain, collviz), the flat path answers
         * from this rank's view rather than setting its segment up, which every rank does
         * together */
        if (full && p == &coll__path_flat)
            yes = c->coll != COLL_COLL_SENDRECV &&
                  coll__flat_takes(comm, c->coll, c->count * coll__dtype_size(c->dtype));
        else
            yes = p->takes(comm, c, full ? why : NULL, sizeof(why));
        if (!yes) {
            if (full && why[0])
                snprintf(out->why + strlen(out->why), sizeof(out->why) - strlen(out->why),
                         "%s: %s; ", p->name, why);
            continue;
        }
        out->path = p;
        if (!full || p->run || c->coll == COLL_COLL_SENDRECV) {
            if (full)
                snprintf(out->why + strlen(out->why), sizeof(out->why) - strlen(out->why),
                         "%s%s%s", p->name, why[0] ? ": " : "", why);
            return COLL_SUCCESS;
        }
        {
            struct coll_algo_args a;
            const struct coll_algo *algo = NULL;
            coll_status_t st;

            coll__call_args(c, &a);
            st = coll__select(comm, &a, &algo, why, sizeof(why));
            if (st != COLL_SUCCESS)
                return st;
            out->algo = algo;
            out->chunk_count = a.chunk_count;
            snprintf(out->why + strlen(out->why), sizeof(out->why) - strlen(out->why),
                     "%s: %s", p->name, why);
        }
        return COLL_SUCCESS;
    }
    return coll__error(comm, COLL_INTERNAL_ERROR, "no path takes %s",
                       coll__coll_name(c->coll));
}

coll_status_t coll__path_comm_init(struct coll_comm *comm)
{
    return coll__flat_comm_init(comm);
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
    call.seq = coll__engine_take_seq(comm, call.coll != COLL_COLL_SENDRECV ? &call.sig : NULL,
                                     &call.cseq);
    return path->run(comm, &call);
}
