/*
 * row.c - one row of the table: every rank's schedule built, run on the platform, timed,
 * and priced by the cost model; and the bus bandwidth's factor.
 */
#include "collsim.h"

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/link.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum coll_link link_of(void *arg, int32_t src, int32_t dst)
{
    (void)arg;
    return host_of(src) == host_of(dst) ? COLL_LINK_SHM : COLL_LINK_TCP;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Every rank's schedule of algo for a, into S.r, with the steps' times kept for --trace
 * when timed. With ws (the timed call's first build): w's steps counted, the message budget
 * checked (-2: over it, nothing loaded) and each host's working set added to ws. 0, -2 or an
 * exit status (after saying why). */
static int load_ranks(struct row *w, const struct coll_algo *algo, struct coll_algo_args *a,
                      uint32_t *peer_last, double *ws, bool timed)
{
    uint64_t planned = 0;

    for (int32_t r = 0; r < a->nranks; r++) {
        struct coll_schedule s;
        coll_status_t st;
        a->rank = r;
        coll__sched_init(&s, a);
        st = algo->build(a, &s);
        if (st == COLL_SUCCESS)
            st = coll__sched_validate(&s);
        if (st != COLL_SUCCESS) {
            fprintf(stderr, "collsim: %s cannot build rank %d's %s schedule: %s\n", algo->name,
                    r, coll__coll_name(a->coll), coll_last_error(NULL));
            coll__sched_free(&s);
            for (int32_t q = 0; q < r; q++)
                srank_free(&S.r[q]);
            return EXIT_USAGE;
        }
        S.r[r].rank = r;
        S.r[r].host = host_of(r);
        if (srank_load(&S.r[r], &s, peer_last, timed && trace_f != NULL)) {
            coll__sched_free(&s);
            fprintf(stderr, "collsim: out of memory for rank %d's schedule (%u steps)\n", r,
                    s.nsteps);
            for (int32_t q = 0; q <= r; q++)
                srank_free(&S.r[q]);
            return EXIT_SIMFAIL;
        }
        if (ws) {
            w->steps += s.nsteps;
            for (uint32_t i = 0; i < s.nsteps; i++)
                planned += s.steps[i].kind == COLL_STEP_SEND;
            if (S.o.max_msgs && planned > S.o.max_msgs) {
                /* over the budget even at the point's coarsest pieces: not simulated */
                coll__sched_free(&s);
                for (int32_t q = 0; q <= r; q++)
                    srank_free(&S.r[q]);
                return -2;
            }
            ws[host_of(r)] += (double)(s.buf_count[COLL_BUF_SEND] + s.buf_count[COLL_BUF_RECV] +
                                       s.buf_count[COLL_BUF_SCRATCH]) * (double)s.elem_size;
        }
        coll__sched_free(&s);
    }
    return 0;
}

/* Start every rank's actor now and run S.r's schedules to their end: the latest finish. */
static double run_ranks(int32_t n)
{
    double end = 0;

    S.flows = 0; /* a run's last sends are not waited for one by one: none is in flight now */
    for (int32_t r = 0; r < n; r++)
        S.r[r].wait_since = -1;
    for (int32_t r = 0; r < n; r++) {
        char name[32];
        sg_actor_t act;
        snprintf(name, sizeof(name), "rank%d", r);
        act = sg_actor_init(name, rank_host(r));
        sg_actor_set_data(act, &S.r[r]);
        sg_actor_start(act, rank_main, 0, NULL);
    }
    simgrid_run();
    for (int32_t r = 0; r < n; r++) {
        if (S.r[r].finish > end)
            end = S.r[r].finish;
        if (!S.failed && S.r[r].ndone != S.r[r].nsteps)
            fail_run("rank %d finished %u of its %u steps", r, S.r[r].ndone, S.r[r].nsteps);
    }
    return end;
}

static void free_ranks(int32_t n)
{
    for (int32_t r = 0; r < n; r++)
        srank_free(&S.r[r]);
}

/* Each host's link idle since long: nothing owed. */
static void idle_links(void)
{
    for (int32_t h = 0; S.debt && h < S.o.hosts; h++) {
        S.debt[h] = 0;
        S.busy[h] = simgrid_get_clock();
    }
}

/* --warmup: the call untimed, then collbench's start barrier (an all-reduce of one int32,
 * the selector's pick), each time; the first finds the links idle. */
static int warm_up(struct row *w, struct coll_algo_args *a, uint32_t *peer_last)
{
    struct coll_algo_args b = *a;
    const struct coll_algo *balgo = NULL;
    static const size_t chunks[] = COLL_COST_SELECT_CHUNKS;
    struct coll_cost_query q = {
        .coll = COLL_COLL_ALLREDUCE, .nranks = a->nranks, .root = 0, .count = 1,
        .dtype = COLL_INT32, .chunk_bytes = chunks, .nchunk_bytes = COLL_ARRAY_SIZE(chunks),
        .hosts = a->hosts, .nhosts = a->nhosts, .closed = !S.o.exact,
    };
    int rc = select_first(&q, "the start barrier", &balgo, &b.chunk_count);

    if (rc)
        return rc;
    b.coll = COLL_COLL_ALLREDUCE;
    b.root = 0;
    b.count = 1;
    b.dtype = COLL_INT32;
    b.elem_size = coll__dtype_size(COLL_INT32);
    idle_links();
    for (int32_t k = 0; k < S.o.warmup && !S.failed; k++) {
        rc = load_ranks(w, w->algo, a, peer_last, NULL, false);
        if (rc)
            return rc;
        run_ranks(a->nranks);
        free_ranks(a->nranks);
        if (S.failed)
            break;
        rc = load_ranks(w, balgo, &b, peer_last, NULL, false);
        if (rc)
            return rc;
        run_ranks(a->nranks);
        free_ranks(a->nranks);
    }
    return 0;
}

/* Build every rank's schedule, run them on the platform, collect the time. */
int run_row(struct row *w, uint32_t *peer_last, int32_t *hostmap)
{
    int32_t n = S.o.nranks;
    struct coll_algo_args a = {
        .coll = S.o.coll,
        .nranks = n,
        .root = S.o.root,
        .count = w->count,
        .dtype = S.o.dtype,
        .elem_size = coll__dtype_size(S.o.dtype),
        .chunk_count = w->chunk_count,
        .hosts = S.o.hosts > 1 ? hostmap : NULL,
        .nhosts = S.o.hosts > 1 ? S.o.hosts : 0,
    };
    struct coll_cost_links links = {link_of, NULL, COLL_LINK_TCP};
    double t_wall = wall_now(), end = 0;
    double *ws = calloc((size_t)S.o.hosts, sizeof(double)), most = 0;
    int rc;

    if (!ws)
        return fprintf(stderr, "collsim: out of memory\n"), EXIT_SIMFAIL;
    w->msgs = w->steps = 0;
    if (w->algo->applicable && !w->algo->applicable(&a)) {
        free(ws);
        return -1;
    }
    rc = load_ranks(w, w->algo, &a, peer_last, ws, true);
    if (rc) {
        free(ws);
        return rc;
    }
    for (int32_t h = 0; h < S.o.hosts; h++)
        most = ws[h] > most ? ws[h] : most;
    free(ws);
    S.mem_f = 1;
    if (S.p.mem > 1 && S.p.cache_bytes > 0 && most > S.p.cache_bytes)
        S.mem_f = 1 + (S.p.mem - 1) * (1 - S.p.cache_bytes / most);
    for (size_t l = 0; l < S.nlinks; l++)
        sg_link_set_bandwidth(S.links[l], S.link_bw[l] / S.mem_f);
    /* the cost model's figure for the same schedules, on its own machine */
    /* (a platform file's links are not the model's: no figure then) */
    if (S.o.platform && !S.o.calib)
        w->model_s = NAN;
    else if (S.o.price == PRICE_NONE)
        w->model_s = NAN;
    else if (n > 1 && S.o.price == PRICE_CLOSED)
        w->model_s = coll__cost_closed(&S.p, &links, w->algo, &a, &w->model_s) == COLL_SUCCESS
                         ? w->model_s
                         : NAN;
    else if (n > 1 &&
             coll__cost_predict(&S.p, &links, w->algo, &a, &w->model_s, NULL) != COLL_SUCCESS)
        w->model_s = NAN;
    else if (n == 1)
        w->model_s = 0;
    w->warmup_s = 0;
    if (S.o.warmup > 0 && n > 1) {
        double t0 = simgrid_get_clock();
        /* the timed call's ranks are loaded again after the warm-up's (S.r holds one call) */
        free_ranks(n);
        rc = warm_up(w, &a, peer_last);
        w->warmup_s = simgrid_get_clock() - t0;
        if (!rc && !S.failed)
            rc = load_ranks(w, w->algo, &a, peer_last, NULL, true);
        if (rc)
            return rc;
    } else {
        idle_links();
    }
    S.start = simgrid_get_clock();
    S.timed = true;
    if (!S.failed)
        end = run_ranks(n);
    S.timed = false;
    for (int32_t r = 0; r < n; r++)
        w->msgs += S.r[r].nmsgs;
    w->time_s = end > S.start ? end - S.start : 0;
    w->wall_s = wall_now() - t_wall;
    if (trace_f && !S.failed)
        trace_row(w, n);
    free_ranks(n);
    if (S.failed) {
        fprintf(stderr, "collsim: %s %s of %zu bytes did not run to its end: %s\n", w->algo->name,
                coll__coll_name(S.o.coll), w->bytes, S.failed);
        return EXIT_SIMFAIL;
    }
    return 0;
}
