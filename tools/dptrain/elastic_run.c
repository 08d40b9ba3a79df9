/*
 * elastic_run.c - elastic training (--elastic DIR).
 *
 * The job's state is what every replica holds alike: the step reached, the parameters, the
 * optimizer state and, for DiLoCo, the global copy and the outer momentum. A rank changes it only with the result of collectives that
 * succeeded, so after a failure each survivor holds the state of some step, whole. The
 * recovery shrinks the comm to the survivors (the dead are told by their live locks,
 * elastic.h), and every (re)formed comm, first, shrunk or grown, is synced: the rank that
 * got furthest (the lowest among equals) broadcasts its state and everyone adopts it. In
 * DDP a step that failed on the survivor furthest ahead is redone by the survivors, with
 * the same global batch sharded over fewer ranks, so no sample of it is dropped. In DiLoCo
 * the workers take the chosen worker's parameters: their own inner steps since the last
 * outer step are dropped, and pending overlapped syncs are dropped; a joiner takes part
 * from the next outer step on.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "dptrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The first comm: collrun's environment, or --rank/--world through DIR/init.id, or, for a
 * restarted process, a join. */
int el_form(struct run *r, struct el *el, const struct opts *o, char *err,
            size_t errlen)
{
    coll_unique_id_t id;
    coll_status_t st;
    int n, rank;

    if (getenv("COLL_UNIQUE_ID") || o->el_world > 0) {
        const char *env_rank = getenv("COLL_RANK");
        int me = o->el_world > 0 ? o->el_rank : env_rank ? atoi(env_rank) : -1;
        if (me < 0 || elastic_member_publish(&el->dir, me, err, errlen) != 0) {
            if (me < 0)
                snprintf(err, errlen, "--elastic: no rank (COLL_RANK) to publish");
            return -1;
        }
        if (getenv("COLL_UNIQUE_ID")) {
            st = coll_comm_init_env(&r->comm);
        } else {
            if (elastic_initial_id(&el->dir, o->el_rank, o->join_timeout, &id, err,
                                   errlen) != 0)
                return -1;
            st = coll_comm_init(&r->comm, o->el_world, &id, o->el_rank);
        }
        if (st != COLL_SUCCESS) {
            snprintf(err, errlen, "coll_comm_init: %s: %s", coll_status_string(st),
                     coll_last_error(NULL));
            return -1;
        }
        coll_comm_rank(r->comm, &r->rank);
        coll_comm_size(r->comm, &r->nranks);
        el->pids = elastic_members(&el->dir, r->nranks, err, errlen);
        if (!el->pids)
            return -1;
        el->have_state = true;
        return 0;
    }
    double deadline = now_s() + o->join_timeout;
    if (elastic_join_request(&el->dir, err, errlen) != 0)
        return -1;
    printf("dptrain: pid %lld: asking to join the job in '%s'\n", (long long)el->dir.pid,
           o->elastic);
    fflush(stdout);
    for (;;) {
        int64_t *pids = NULL;
        double left = deadline - now_s();
        if (left <= 0 || elastic_join_wait(&el->dir, left, &id, &n, &rank, &pids, err,
                                           errlen) != 0) {
            if (left <= 0)
                snprintf(err, errlen, "--elastic: not admitted within --join-timeout %g s",
                         o->join_timeout);
            elastic_join_done(&el->dir);
            return -1;
        }
        maybe_die(r, "take", 0);
        st = coll_comm_init(&r->comm, n, &id, rank);
        if (st == COLL_SUCCESS) {
            elastic_join_done(&el->dir);
            printf("dptrain: pid %lld: joined as rank %d of %d\n", (long long)el->dir.pid,
                   rank, n);
            fflush(stdout);
            free(el->pids);
            el->pids = pids;
            r->rank = rank;
            r->nranks = n;
            el->have_state = false;
            el->need_sync = true;
            return 0;
        }
        free(pids);
        printf("dptrain: pid %lld: join as rank %d of %d failed (%s); asking again\n",
               (long long)el->dir.pid, rank, n, coll_last_error(NULL));
        fflush(stdout);
    }
}

/* Every rank adopts the state of the rank that got furthest; then checks that all hold the
 * same bits. Returns 0, or -1 with r->failed set (a collective failed: recover again). A
 * state nobody holds, or replicas that differ after the broadcast, end the process. */
int el_sync(struct run *r, struct el *el, const struct opts *o, struct mlp *m,
            struct optim *opt, struct diloco *dl, long *step_p, char *err,
            size_t errlen)
{
    int64_t key[2], hdr[3], *pids;
    double cs, mm[2];
    coll_status_t st;
    int src;

    if (check_flags(r, o, err, errlen) != 0) {
        fprintf(stderr, "dptrain: rank %d: %s\n", r->rank, err);
        exit(1);
    }
    if (r->failed)
        return -1;
    pids = malloc((size_t)r->nranks * sizeof(*pids));
    if (!pids) {
        fprintf(stderr, "dptrain: rank %d: out of memory\n", r->rank);
        exit(1);
    }
    st = coll_allgather(&el->dir.pid, pids, 1, COLL_INT64, r->comm);
    if (st != COLL_SUCCESS) {
        free(pids);
        die_coll(r, st, "coll_allgather (elastic: processes)");
        return -1;
    }
    free(el->pids);
    el->pids = pids;
    /* the furthest step wins, then the lowest rank */
    key[0] = el->have_state ? (int64_t)*step_p * 65536 + (65535 - r->rank) : -1;
    key[1] = el->reached;
    st = coll_allreduce(key, key, 2, COLL_INT64, COLL_MAX, r->comm);
    if (st != COLL_SUCCESS) {
        die_coll(r, st, "coll_allreduce (elastic: whose state)");
        return -1;
    }
    if (key[0] < 0) {
        fprintf(stderr, "dptrain: rank %d: no rank of the comm holds the model (every member "
                "that had it is gone)\n", r->rank);
        exit(1);
    }
    src = 65535 - (int)(key[0] % 65536);
    hdr[0] = key[0] / 65536;
    hdr[1] = (int64_t)opt->t;
    hdr[2] = o->diloco ? dl->syncs : 0;
    st = coll_broadcast(hdr, hdr, 3, COLL_INT64, src, r->comm);
    if (st == COLL_SUCCESS)
        st = coll_broadcast(m->params, m->params, m->nparams, COLL_FLOAT32, src, r->comm);
    if (st == COLL_SUCCESS)
        st = coll_broadcast(opt->m, opt->m, m->nparams, COLL_FLOAT32, src, r->comm);
    if (st == COLL_SUCCESS && opt->v)
        st = coll_broadcast(opt->v, opt->v, m->nparams, COLL_FLOAT32, src, r->comm);
    if (st == COLL_SUCCESS && o->diloco)
        st = coll_broadcast(dl->global, dl->global, m->nparams, COLL_FLOAT32, src, r->comm);
    if (st == COLL_SUCCESS && o->diloco)
        st = coll_broadcast(dl->momentum, dl->momentum, m->nparams, COLL_FLOAT32, src,
                            r->comm);
    if (st != COLL_SUCCESS) {
        die_coll(r, st, "coll_broadcast (elastic: state)");
        return -1;
    }
    cs = mlp_checksum(m);
    mm[0] = cs;
    mm[1] = -cs;
    st = coll_allreduce(mm, mm, 2, COLL_FLOAT64, COLL_MAX, r->comm);
    if (st != COLL_SUCCESS) {
        die_coll(r, st, "coll_allreduce (elastic: replica check)");
        return -1;
    }
    if (mm[0] != -mm[1]) {
        fprintf(stderr, "dptrain: rank %d: replicas differ after the state broadcast: "
                "checksums from %.17g to %.17g\n", r->rank, -mm[1], mm[0]);
        exit(1);
    }
    *step_p = (long)hdr[0];
    opt->t = (uint64_t)hdr[1];
    if (o->diloco) {
        dl->syncs = (long)hdr[2];
        for (int f = 0; f < dl->nfrag; f++) {
            dl->pending[f] = false;
            dl->req[f] = NULL;
        }
    }
    if (r->rank == 0) {
        if (el->fail_t > 0)
            printf("elastic: recovery %d: lost rank(s)", el->recoveries);
        for (int i = 0; el->fail_t > 0 && i < el->nlost; i++)
            printf(" %d (pid %lld)", el->lost[i], (long long)el->lost_pid[i]);
        if (el->fail_t > 0)
            printf(", %d -> %d ranks; resumed at step %ld from rank %d's state, %ld step(s) "
                   "of work redone (%s), stall %.3f s, at %.3f\n", el->old_nranks, r->nranks,
                   *step_p, src, key[1] - *step_p > 0 ? (long)(key[1] - *step_p) : 0L,
                   o->diloco ? "DiLoCo: inner steps since the last outer step dropped"
                             : "the failed step's global batch, over the survivors",
                   now_s() - el->fail_t, wall_s());
        else
            printf("elastic: %d ranks in sync at step %ld (state of rank %d), checksum "
                   "%.9g, at %.3f\n", r->nranks, *step_p, src, cs, wall_s());
        fflush(stdout);
    }
    if (!el->have_state) {
        printf("dptrain: pid %lld: rank %d holds the job's state as of step %ld\n",
               (long long)el->dir.pid, r->rank, *step_p);
        fflush(stdout);
    }
    el->fail_t = 0;
    el->nlost = 0;
    el->have_state = true;
    el->need_sync = false;
    el->reached = *step_p;
    return 0;
}

/* After a failed call: shrink to the survivors. Ends the process when no shrink succeeds
 * within a bounded number of tries (a peer alive but never coming: stopped, or lost in
 * another comm), so nothing waits forever. */
void el_recover(struct run *r, struct el *el)
{
    int *dead = malloc((size_t)r->nranks * sizeof(*dead));
    coll_comm_t *small = NULL;
    coll_status_t st = COLL_INTERNAL_ERROR;
    int ndead = 0;

    if (!dead) {
        fprintf(stderr, "dptrain: rank %d: out of memory\n", r->rank);
        exit(1);
    }
    if (el->fail_t == 0) {
        el->fail_t = now_s();
        el->old_nranks = r->nranks;
    }
    el->recoveries++;
    printf("elastic: rank %d: %s; recovering\n", r->rank, r->why);
    fflush(stdout);
    if (!el->pids) {
        fprintf(stderr, "dptrain: rank %d: the comm failed before its processes were known: "
                "%s\n", r->rank, r->why);
        exit(1);
    }
    for (int attempt = 0; attempt < 20; attempt++) {
        /* a dead peer's connections may close a moment before its lock file does */
        elastic_nap_ms(attempt == 0 ? 50 : 200);
        ndead = 0;
        for (int k = 0; k < r->nranks; k++)
            if (k != r->rank && !elastic_alive(&el->dir, el->pids[k]))
                dead[ndead++] = k;
        st = coll_comm_shrink(r->comm, dead, ndead, &small);
        if (st == COLL_SUCCESS)
            break;
        printf("elastic: rank %d: shrink without %d rank(s) failed (%s); trying again\n",
               r->rank, ndead, coll_last_error(NULL));
        fflush(stdout);
    }
    if (st != COLL_SUCCESS) {
        fprintf(stderr, "dptrain: rank %d: no shrink succeeded: %s\n", r->rank,
                coll_last_error(NULL));
        exit(1);
    }
    for (int i = 0; i < ndead && el->nlost < ELASTIC_MAX_JOIN; i++) {
        el->lost[el->nlost] = dead[i];
        el->lost_pid[el->nlost++] = el->pids[dead[i]];
    }
    /* pids by new rank: the survivors in their old order */
    int k = 0;
    for (int i = 0, j = 0; i < r->nranks; i++) {
        if (j < ndead && dead[j] == i) {
            j++;
            continue;
        }
        el->pids[k++] = el->pids[i];
    }
    free(dead);
    coll_comm_destroy(r->comm);
    r->comm = small;
    coll_comm_rank(r->comm, &r->rank);
    coll_comm_size(r->comm, &r->nranks);
    r->failed = COLL_SUCCESS;
    el->need_sync = true;
}

/* At a step boundary: rank 0 looks for joiners and tells the others (one small broadcast
 * a step); if there are, the members grow the comm. A grow that fails leaves the members
 * on the old comm. Returns true when the comm changed (sync next). */
bool el_admit(struct run *r, struct el *el, const struct opts *o, long step)
{
    struct {
        int64_t n;
        int64_t pids[ELASTIC_MAX_JOIN];
        coll_unique_id_t id;
    } ctl;
    char err[ERRLEN];
    coll_comm_t *big = NULL;
    coll_status_t st;
    int64_t *pids;
    int n;

    memset(&ctl, 0, sizeof(ctl));
    if (r->rank == 0) {
        int room = o->batch - r->nranks; /* every rank needs a sample */
        ctl.n = elastic_joiners(&el->dir, ctl.pids, room < ELASTIC_MAX_JOIN ? room
                                                                           : ELASTIC_MAX_JOIN);
    }
    if (r->rank == 0 && ctl.n > 0) {
        st = coll_comm_grow_id(r->comm, &ctl.id);
        if (st != COLL_SUCCESS) {
            fprintf(stderr, "dptrain: rank 0: coll_comm_grow_id: %s\n", coll_last_error(NULL));
            ctl.n = 0;
        }
    }
    /* the grown comm's processes by rank: the members', then the joiners' */
    n = r->nranks + (int)ctl.n;
    pids = malloc((size_t)(r->nranks + ELASTIC_MAX_JOIN) * sizeof(*pids));
    if (!pids) {
        fprintf(stderr, "dptrain: rank %d: out of memory\n", r->rank);
        exit(1);
    }
    memcpy(pids, el->pids, (size_t)r->nranks * sizeof(*pids));
    for (int j = 0; r->rank == 0 && j < (int)ctl.n; j++)
        pids[r->nranks + j] = ctl.pids[j];
    for (int j = 0; r->rank == 0 && j < (int)ctl.n; j++)
        if (elastic_offer(&el->dir, ctl.pids[j], &ctl.id, n, r->nranks + j, pids, err,
                          sizeof(err)) != 0)
            fprintf(stderr, "dptrain: rank 0: %s\n", err);
    if (ctl.n > 0)
        maybe_die(r, "offer", step);
    st = coll_broadcast(&ctl, &ctl, sizeof(ctl), COLL_UINT8, 0, r->comm);
    if (st != COLL_SUCCESS) {
        free(pids);
        die_coll(r, st, "coll_broadcast (elastic: joiners)");
        return false;
    }
    if (ctl.n <= 0 || ctl.n > ELASTIC_MAX_JOIN) {
        free(pids);
        return false;
    }
    n = r->nranks + (int)ctl.n;
    for (int j = 0; j < (int)ctl.n; j++)
        pids[r->nranks + j] = ctl.pids[j];
    double t0 = now_s();
    st = coll_comm_grow(r->comm, n, &ctl.id, &big);
    if (st != COLL_SUCCESS) {
        if (r->rank == 0)
            printf("elastic: grow to %d ranks failed (%s); going on with %d\n", n,
                   coll_last_error(NULL), r->nranks);
        fflush(stdout);
        free(pids);
        return false;
    }
    coll_comm_destroy(r->comm);
    r->comm = big;
    r->nranks = n;
    free(el->pids);
    el->pids = pids;
    el->grows++;
    el->need_sync = true;
    if (r->rank == 0) {
        printf("elastic: grow %d: %lld rank(s) joined at step %ld, %d ranks, in %.3f s\n",
               el->grows, (long long)ctl.n, step, n, now_s() - t0);
        fflush(stdout);
    }
    return true;
}

