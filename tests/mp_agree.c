/*
 * mp_agree.c - ranks that disagree on a call (include/coll.h, "Agreement"): every rank
 * must get an error, within the call or by its next call on the comm or coll_comm_destroy,
 * and never by waiting for COLL_TIMEOUT_MS. Rank 0 makes one call, the others another.
 *
 *   collrun -n N mp_agree CASE small|large
 *
 * small: 1000-byte calls (the shared-memory fast path takes them where it runs); large: 1.2
 * MB (its sliced pieces). tests/test_agree.sh runs the matrix of cases, sizes, paths
 * (COLL_SHM_FLAT=0, COLL_TRANSPORT=tcp) and rank counts. Each rank prints one line:
 *
 *   agree CASE rank R: call STATUS next STATUS destroy STATUS ms T
 *
 * where T is the time from the call to the first error (or to the end), and exits 1 when
 * its own outcome breaks the contract: no error anywhere for a disagreement, an error for
 * the one case whose calls agree ("nbmix": blocking against non-blocking), or an error that
 * took longer than half of COLL_TIMEOUT_MS (so it came from the timeout), unless
 * AGREE_TIMEOUT_OK=1 allows the timeout, or no error at all where AGREE_SENDER_OK=1 allows
 * it (for trying an exception by hand: the matrix allows neither).
 *
 * AGREE_FIRST=1: the disagreeing call is the comm's first (no barrier before it, so no
 * data connection exists yet); AGREE_LIMIT_MS: the bound on the time to the error instead
 * of half of COLL_TIMEOUT_MS; AGREE_NO_NEXT=1: no call after it, straight to
 * coll_comm_destroy (which must then return the error a receiver found).
 */
#include <coll.h>

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "mp_util.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The case's call on this rank; rank 0 is "a", the others "b". */
static coll_status_t one_call(const char *c, coll_comm_t *comm, size_t n, int32_t *s, int32_t *r)
{
    const int a = rank == 0;
    coll_request_t *req;
    coll_status_t st;

    if (!strcmp(c, "count"))
        return coll_allreduce(s, r, a ? n : 2 * n, COLL_INT32, COLL_SUM, comm);
    if (!strcmp(c, "dtype"))
        return coll_allreduce(s, r, n, a ? COLL_INT32 : COLL_FLOAT32, COLL_SUM, comm);
    if (!strcmp(c, "op"))
        return coll_allreduce(s, r, n, COLL_INT32, a ? COLL_SUM : COLL_MAX, comm);
    if (!strcmp(c, "allgather"))
        return a ? coll_allreduce(s, r, n, COLL_INT32, COLL_SUM, comm)
                 : coll_allgather(s, r, n, COLL_INT32, comm);
    if (!strcmp(c, "reducescatter"))
        return a ? coll_allreduce(s, r, n * (size_t)nranks, COLL_INT32, COLL_SUM, comm)
                 : coll_reduce_scatter(s, r, n, COLL_INT32, COLL_SUM, comm);
    if (!strcmp(c, "alltoall"))
        return a ? coll_allreduce(s, r, n * (size_t)nranks, COLL_INT32, COLL_SUM, comm)
                 : coll_alltoall(s, r, n, COLL_INT32, comm);
    if (!strcmp(c, "gatherscatter"))
        return a ? coll_gather(s, r, n, COLL_INT32, 0, comm)
                 : coll_scatter(s, r, n, COLL_INT32, 0, comm);
    if (!strcmp(c, "agcount"))
        return coll_allgather(s, r, a ? n : 2 * n, COLL_INT32, comm);
    if (!strcmp(c, "gatherroot"))
        return coll_gather(s, r, n, COLL_INT32, a ? 0 : 1, comm);
    if (!strcmp(c, "scatterroot"))
        return coll_scatter(s, r, n, COLL_INT32, a ? 0 : 1, comm);
    if (!strcmp(c, "bcastroot"))
        return coll_broadcast(s, s, n, COLL_INT32, a ? 0 : 1, comm);
    if (!strcmp(c, "reduceroot"))
        return coll_reduce(s, r, n, COLL_INT32, COLL_SUM, a ? 0 : 1, comm);
    if (!strcmp(c, "reducecount"))
        return coll_reduce(s, r, a ? n : 2 * n, COLL_INT32, COLL_SUM, 0, comm);
    if (!strcmp(c, "p2p")) { /* rank 0 sends n, rank 1 receives 2n; the others wait */
        if (rank == 0)
            return coll_send(s, n, COLL_INT32, 1, comm);
        if (rank == 1)
            return coll_recv(r, 2 * n, COLL_INT32, 0, comm);
        return COLL_SUCCESS;
    }
    if (!strcmp(c, "nbmix")) { /* agree: the blocking and non-blocking forms meet */
        if (a)
            return coll_allreduce(s, r, n, COLL_INT32, COLL_SUM, comm);
        st = coll_iallreduce(s, r, n, COLL_INT32, COLL_SUM, comm, &req);
        return st != COLL_SUCCESS ? st : coll_wait(req);
    }
    die("unknown case %s", c);
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    const size_t n = argc > 2 && !strcmp(argv[2], "large") ? 300000 : 250;
    const bool agrees = !strcmp(c, "nbmix");
    const char *tmo = getenv("COLL_TIMEOUT_MS");
    const char *lim = getenv("AGREE_LIMIT_MS");
    const bool first = getenv("AGREE_FIRST") && atoi(getenv("AGREE_FIRST"));
    double limit = lim ? atof(lim) : (tmo ? atof(tmo) : 600000.0) / 2, t0, t_err = -1;
    coll_status_t st_call, st_next = COLL_SUCCESS, st_destroy;
    coll_comm_t *comm;
    int32_t *s, *r;
    char msg[1024] = "";

    CHECK(coll_comm_init_env(&comm));
    CHECK(coll_comm_rank(comm, &rank));
    CHECK(coll_comm_size(comm, &nranks));
    s = calloc(2 * n * (size_t)nranks, sizeof(*s));
    r = calloc(2 * n * (size_t)nranks, sizeof(*r));
    if (!s || !r)
        die("out of memory");
    /* a fast rank may start the case, fail and fail the comm while a slow one still
     * leaves this barrier: the failure then reaches the slow one here, which counts */
    t0 = now_ms();
    st_call = first ? COLL_SUCCESS : coll_barrier(comm);
    if (st_call == COLL_SUCCESS) {
        t0 = now_ms();
        st_call = one_call(c, comm, n, s, r);
    }
    if (st_call != COLL_SUCCESS) {
        t_err = now_ms() - t0;
        snprintf(msg, sizeof(msg), "%s", coll_last_error(NULL));
    } else if (!getenv("AGREE_NO_NEXT")) {
        st_next = coll_barrier(comm);
        if (st_next != COLL_SUCCESS) {
            t_err = now_ms() - t0;
            snprintf(msg, sizeof(msg), "%s", coll_last_error(NULL));
        }
    }
    st_destroy = coll_comm_destroy(comm);
    if (t_err < 0 && st_destroy != COLL_SUCCESS) {
        t_err = now_ms() - t0;
        snprintf(msg, sizeof(msg), "%s", coll_last_error(NULL));
    }
    printf("agree %s rank %d: call %s next %s destroy %s ms %.1f: %s\n", c, rank,
           coll_status_string(st_call), coll_status_string(st_next),
           coll_status_string(st_destroy), t_err < 0 ? now_ms() - t0 : t_err, msg);
    fflush(stdout);
    if (agrees && t_err >= 0)
        die("%s: the calls agree, yet: %s", c, msg);
    if (!agrees && t_err < 0 && !getenv("AGREE_SENDER_OK"))
        die("%s: the ranks disagree, yet this rank saw no error by coll_comm_destroy", c);
    if (!agrees && t_err > limit && !getenv("AGREE_TIMEOUT_OK"))
        die("%s: the error took %.0f ms, beyond half of COLL_TIMEOUT_MS: %s", c, t_err, msg);
    free(s);
    free(r);
    return 0;
}
