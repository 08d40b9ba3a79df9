/*
 * plan.c - build schedules once, reuse them: a small per-comm cache of plans keyed by the
 * builder's arguments and the algorithm. Training loops call the same few collectives with
 * the same sizes every step, so after the first step no schedule is built again.
 */
#include "exec.h"

#include <stdlib.h>
#include <string.h>

#define PLAN_CACHE_SIZE 32

struct plan_ent {
    struct coll_algo_args key; /* the request, before selection chose algorithm and chunk */
    struct coll_plan *plan;
    uint64_t last_use;
};

struct coll_sched_cache {
    pthread_mutex_t lock;
    struct plan_ent ents[PLAN_CACHE_SIZE];
    int n;
    uint64_t tick;
};

static bool args_equal(const struct coll_algo_args *a, const struct coll_algo_args *b)
{
    return a->coll == b->coll && a->nranks == b->nranks && a->rank == b->rank &&
           a->root == b->root && a->count == b->count && a->dtype == b->dtype &&
           a->elem_size == b->elem_size && a->chunk_count == b->chunk_count &&
           a->hosts == b->hosts && a->nhosts == b->nhosts;
}

static void plan_free(struct coll_plan *p)
{
    coll__sched_free(&p->sched);
    free(p->tag);
    free(p->nmsgs);
    free(p);
}

void coll__plan_put(struct coll_plan *plan)
{
    if (plan && atomic_fetch_sub(&plan->refs, 1) == 1)
        plan_free(plan);
}

/* Per step, the message's index among this rank's messages to (or from) the same peer: the
 * tag the receiver checks, and the executor's posting order. */
static coll_status_t plan_derive(struct coll_comm *comm, struct coll_plan *p)
{
    const struct coll_schedule *s = &p->sched;
    size_t n = (size_t)s->nranks;

    p->nmsgs = calloc(2 * n, sizeof(*p->nmsgs));
    p->tag = malloc(sizeof(uint32_t) * (s->nsteps ? s->nsteps : 1));
    if (!p->nmsgs || !p->tag)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory deriving a plan");
    for (uint32_t i = 0; i < s->nsteps; i++) {
        const struct coll_step *st = &s->steps[i];
        p->tag[i] = 0;
        if (st->kind == COLL_STEP_SEND || st->kind == COLL_STEP_RECV)
            p->tag[i] = p->nmsgs[(size_t)st->peer * 2 + (st->kind == COLL_STEP_RECV)]++;
    }
    return COLL_SUCCESS;
}

static coll_status_t plan_build(struct coll_comm *comm, const struct coll_algo *algo,
                                const char *why, const struct coll_algo_args *args,
                                struct coll_plan **plan_p)
{
    struct coll_plan *p = calloc(1, sizeof(*p));
    coll_status_t st;

    if (!p)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for a plan");
    p->args = *args;
    atomic_store(&p->refs, 1);
    coll__sched_init(&p->sched, args);
    COLL_CHECK_GOTO(algo->build(args, &p->sched), st, out_free);
    p->sched.algo = algo;
    st = coll__sched_validate(&p->sched);
    if (st != COLL_SUCCESS) {
        coll__error(comm, st, "algorithm %s built an invalid %s schedule: %s", algo->name,
                    coll__coll_name(args->coll), coll__thread_error());
        goto out_free;
    }
    COLL_CHECK_GOTO(plan_derive(comm, p), st, out_free);
    COLL_INFO(COLL_SUB_ALGO, "rank %d: %s %zu bytes n=%d: %s, chunk %zu B, %u steps (%s)",
              comm->rank, coll__coll_name(args->coll), args->count * args->elem_size,
              args->nranks, algo->name, args->chunk_count * args->elem_size, p->sched.nsteps,
              why);
    *plan_p = p;
    return COLL_SUCCESS;

out_free:
    plan_free(p);
    return st;
}

static struct coll_sched_cache *cache_get(struct coll_comm *comm)
{
    /* created at comm init, before any thread but the caller can see the comm */
    return comm->sched_cache;
}

coll_status_t coll__plan_get(struct coll_comm *comm, const struct coll_algo_args *args,
                             coll_select_fn *select, struct coll_plan **plan_p)
{
    struct coll_sched_cache *c = cache_get(comm);
    struct coll_algo_args sel = *args;
    const struct coll_algo *algo;
    char why[512];
    struct coll_plan *p = NULL;
    coll_status_t st;
    int victim = 0;

    /* Keyed by the request, so that a hit costs no pricing. */
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n; i++) {
        if (args_equal(&c->ents[i].key, args)) {
            c->ents[i].last_use = ++c->tick;
            p = c->ents[i].plan;
            atomic_fetch_add(&p->refs, 1);
            pthread_mutex_unlock(&c->lock);
            *plan_p = p;
            return COLL_SUCCESS;
        }
    }
    pthread_mutex_unlock(&c->lock);

    COLL_CHECK_GOTO(select(comm, &sel, &algo, why, sizeof(why)), st, out);
    COLL_CHECK_GOTO(plan_build(comm, algo, why, &sel, &p), st, out);
    pthread_mutex_lock(&c->lock);
    if (c->n < PLAN_CACHE_SIZE) {
        victim = c->n++;
    } else {
        for (int i = 1; i < c->n; i++)
            if (c->ents[i].last_use < c->ents[victim].last_use)
                victim = i;
        coll__plan_put(c->ents[victim].plan);
    }
    c->ents[victim].key = *args;
    c->ents[victim].plan = p;
    c->ents[victim].last_use = ++c->tick;
    atomic_fetch_add(&p->refs, 1); /* one for the cache, one for the caller */
    pthread_mutex_unlock(&c->lock);
    *plan_p = p;
    return COLL_SUCCESS;
out:
    return st;
}

coll_status_t coll__plan_cache_init(struct coll_comm *comm)
{
    struct coll_sched_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the plan cache");
    pthread_mutex_init(&c->lock, NULL);
    comm->sched_cache = c;
    return COLL_SUCCESS;
}

void coll__plan_cache_free(struct coll_comm *comm)
{
    struct coll_sched_cache *c = comm->sched_cache;
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        coll__plan_put(c->ents[i].plan);
    pthread_mutex_destroy(&c->lock);
    free(c);
    comm->sched_cache = NULL;
}

coll_status_t coll__plan_p2p(struct coll_comm *comm, uint8_t kind, int peer, size_t count,
                             coll_dtype_t dtype, struct coll_plan **plan_p)
{
    struct coll_plan *p = calloc(1, sizeof(*p));
    coll_status_t st;

    if (!p)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for a plan");
    p->args = (struct coll_algo_args){
        .coll = COLL_COLL_SENDRECV,
        .nranks = comm->nranks,
        .rank = comm->rank,
        .root = 0,
        .count = count,
        .dtype = dtype,
        .elem_size = coll__dtype_size(dtype),
        .chunk_count = count ? count : 1,
    };
    atomic_store(&p->refs, 1);
    coll__sched_init(&p->sched, &p->args);
    if (count == 0)
        st = COLL_SUCCESS; /* nothing moves: an empty schedule */
    else if (kind == COLL_STEP_SEND)
        st = coll__sched_send(&p->sched, peer, coll__slice(COLL_BUF_SEND, 0, count), 0, NULL,
                              NULL);
    else if (kind == COLL_STEP_RECV)
        st = coll__sched_recv(&p->sched, peer, coll__slice(COLL_BUF_RECV, 0, count), 0, NULL,
                              NULL);
    else
        st = coll__sched_copy(&p->sched, coll__slice(COLL_BUF_RECV, 0, count),
                              coll__slice(COLL_BUF_SEND, 0, count), 0, NULL, NULL);
    if (st == COLL_SUCCESS)
        st = plan_derive(comm, p);
    if (st != COLL_SUCCESS) {
        plan_free(p);
        return st;
    }
    *plan_p = p;
    return COLL_SUCCESS;
}
