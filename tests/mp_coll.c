/*
 * mp_coll.c - multi-process collective tests, run under collrun:
 *
 *   collrun -n 4 mp_coll basic|algos|nonblocking|twocomm|mismatch|dtypes
 *
 * Every rank checks its own results and exits non-zero on the first wrong element, naming
 * it; collrun then fails the whole run. New communicators are made the NCCL way: rank 0
 * creates a unique id and broadcasts it over the world communicator.
 */
#include "coll.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mp_util.h"

static coll_comm_t *new_comm(coll_comm_t *world, const char *algo)
{
    coll_unique_id_t id;
    coll_comm_t *comm;

    if (rank == 0)
        CHECK(coll_get_unique_id(&id));
    CHECK(coll_broadcast(&id, &id, sizeof(id), COLL_UINT8, 0, world));
    if (algo)
        setenv("COLL_ALGO", algo, 1);
    else
        unsetenv("COLL_ALGO");
    CHECK(coll_comm_init(&comm, nranks, &id, rank));
    unsetenv("COLL_ALGO");
    return comm;
}

static int32_t val(int r, size_t i)
{
    return (int32_t)((r + 1) * (int)(i % 13 + 1));
}

static void check_allreduce(coll_comm_t *comm, size_t count, coll_op_t op, int inplace,
                            const char *tag)
{
    int32_t *s = malloc((count + 1) * sizeof(*s)), *r = malloc((count + 1) * sizeof(*r));
    int32_t tri = nranks * (nranks + 1) / 2;

    for (size_t i = 0; i < count; i++) {
        s[i] = val(rank, i);
        r[i] = -12345;
    }
    CHECK(coll_allreduce(s, inplace ? s : r, count, COLL_INT32, op, comm));
    for (size_t i = 0; i < count; i++) {
        int32_t k = (int32_t)(i % 13 + 1), want = 0, got = inplace ? s[i] : r[i];
        switch (op) {
        case COLL_SUM: want = k * tri; break;
        case COLL_MAX: want = k * nranks; break;
        case COLL_MIN: want = k; break;
        case COLL_AVG: want = k * tri / nranks; break;
        default: die("op");
        }
        if (got != want)
            die("%s allreduce op %d count %zu inplace %d: [%zu] = %d, want %d", tag, (int)op,
                count, inplace, i, got, want);
    }
    free(s);
    free(r);
}

static void check_bcast(coll_comm_t *comm, size_t count, int root, int inplace, const char *tag)
{
    int32_t *s = malloc((count + 1) * sizeof(*s)), *r = malloc((count + 1) * sizeof(*r));

    for (size_t i = 0; i < count; i++) {
        s[i] = rank == root ? val(root, i) + 7 : -1;
        r[i] = -2;
    }
    CHECK(coll_broadcast(rank == root ? s : NULL, inplace ? (rank == root ? s : r) : r, count,
                         COLL_INT32, root, comm));
    for (size_t i = 0; i < count; i++) {
        int32_t got = inplace && rank == root ? s[i] : r[i];
        if (got != val(root, i) + 7)
            die("%s broadcast count %zu root %d inplace %d: [%zu] = %d, want %d", tag, count,
                root, inplace, i, got, val(root, i) + 7);
    }
    free(s);
    free(r);
}

static void check_reduce(coll_comm_t *comm, size_t count, int root, int inplace,
                         const char *tag)
{
    int32_t *s = malloc((count + 1) * sizeof(*s)), *r = malloc((count + 1) * sizeof(*r));
    int32_t tri = nranks * (nranks + 1) / 2;

    for (size_t i = 0; i < count; i++) {
        s[i] = val(rank, i);
        r[i] = -3;
    }
    CHECK(coll_reduce(s, rank == root ? (inplace ? s : r) : NULL, count, COLL_INT32, COLL_SUM,
                      root, comm));
    for (size_t i = 0; i < count; i++) {
        int32_t want = (int32_t)(i % 13 + 1) * tri;
        if (rank == root) {
            int32_t got = inplace ? s[i] : r[i];
            if (got != want)
                die("%s reduce count %zu root %d inplace %d: [%zu] = %d, want %d", tag, count,
                    root, inplace, i, got, want);
        } else if (s[i] != val(rank, i) || r[i] != -3) {
            die("%s reduce count %zu root %d: non-root buffers were modified at [%zu]", tag,
                count, root, i);
        }
    }
    free(s);
    free(r);
}

static void sweep(coll_comm_t *comm, const char *tag, int all_roots)
{
    size_t n = (size_t)nranks;
    size_t counts[] = {0, 1, n - 1, n, n + 1, 3 * n + 1, 1000, 65537, (1u << 20) + 3};
    coll_op_t ops[] = {COLL_SUM, COLL_MAX, COLL_MIN, COLL_AVG};

    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        size_t count = counts[c];
        int big = count > 1000;
        for (int inplace = 0; inplace < 2; inplace++) {
            for (size_t o = 0; o < 4; o++)
                if (!big || o == 0)
                    check_allreduce(comm, count, ops[o], inplace, tag);
            for (int root = 0; root < nranks; root++) {
                if ((big || !all_roots) && root != nranks - 1 && root != 0)
                    continue;
                check_bcast(comm, count, root, inplace, tag);
                check_reduce(comm, count, root, inplace, tag);
            }
        }
    }
}

static void suite_algos(coll_comm_t *world)
{
    const char *algos[] = {"ring", "tree", "dbtree", "chain", "binomial"};
    for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
        coll_comm_t *comm = new_comm(world, algos[a]);
        sweep(comm, algos[a], 1);
        CHECK(coll_comm_destroy(comm));
    }
}

/* Ranks on emulated hosts (COLL_HOST_ID, set per rank by tests/fakehosts.sh): the model's
 * choice, which may be the two-level one, and the two-level algorithm forced. */
static void suite_hosts(coll_comm_t *world)
{
    coll_comm_t *comm = new_comm(world, "allreduce=hier,broadcast=hier,reduce=hier");
    sweep(world, "default", 1);
    sweep(comm, "hier", 1);
    CHECK(coll_comm_destroy(comm));
}

static void suite_nonblocking(coll_comm_t *world)
{
    enum { K = 8, COUNT = 4099 };
    coll_request_t *req[K];
    int32_t *buf[K];
    int32_t tri = nranks * (nranks + 1) / 2;

    for (int k = 0; k < K; k++) {
        buf[k] = malloc(COUNT * sizeof(int32_t));
        for (size_t i = 0; i < COUNT; i++)
            buf[k][i] = val(rank, i + (size_t)k);
    }
    for (int k = 0; k < K; k++)
        CHECK(coll_iallreduce(buf[k], buf[k], COUNT, COLL_INT32, COLL_SUM, world, &req[k]));
    /* complete out of order: test the last until done, then wait the rest */
    for (int done = 0; !done;)
        CHECK(coll_test(req[K - 1], &done));
    for (int k = 0; k < K - 1; k++)
        CHECK(coll_wait(req[k]));
    for (int k = 0; k < K; k++) {
        for (size_t i = 0; i < COUNT; i++)
            if (buf[k][i] != (int32_t)((i + (size_t)k) % 13 + 1) * tri)
                die("iallreduce %d: [%zu] = %d", k, i, buf[k][i]);
        free(buf[k]);
    }
}

static void suite_twocomm(coll_comm_t *world)
{
    coll_comm_t *a = new_comm(world, "ring"), *b = new_comm(world, "tree");
    enum { COUNT = 100000 };
    int32_t *x = malloc(COUNT * sizeof(int32_t)), *y = malloc(COUNT * sizeof(int32_t));
    int32_t tri = nranks * (nranks + 1) / 2;

    for (int round = 0; round < 5; round++) {
        coll_request_t *ra, *rb;
        for (size_t i = 0; i < COUNT; i++) {
            x[i] = val(rank, i);
            y[i] = val(rank, i + 1);
        }
        CHECK(coll_iallreduce(x, x, COUNT, COLL_INT32, COLL_SUM, a, &ra));
        CHECK(coll_iallreduce(y, y, COUNT, COLL_INT32, COLL_SUM, b, &rb));
        CHECK(coll_wait(rb));
        CHECK(coll_wait(ra));
        for (size_t i = 0; i < COUNT; i++)
            if (x[i] != (int32_t)(i % 13 + 1) * tri || y[i] != (int32_t)((i + 1) % 13 + 1) * tri)
                die("two comms round %d: [%zu] = %d / %d", round, i, x[i], y[i]);
    }
    free(x);
    free(y);
    CHECK(coll_comm_destroy(a));
    CHECK(coll_comm_destroy(b));
}

/* Float types through the wire (the reduction math itself is tested in test_reduce). */
static void suite_dtypes(coll_comm_t *world)
{
    enum { COUNT = 3001 };
    double *d = malloc(COUNT * sizeof(double));
    float *f = malloc(COUNT * sizeof(float));
    uint64_t *u = malloc(COUNT * sizeof(uint64_t));

    for (size_t i = 0; i < COUNT; i++) {
        d[i] = 0.5 * val(rank, i);
        f[i] = (float)val(rank, i);
        u[i] = ((uint64_t)1 << 40) * (uint64_t)(rank + 1) + i;
    }
    CHECK(coll_allreduce(d, d, COUNT, COLL_FLOAT64, COLL_MAX, world));
    CHECK(coll_allreduce(f, f, COUNT, COLL_FLOAT32, COLL_AVG, world));
    CHECK(coll_allreduce(u, u, COUNT, COLL_UINT64, COLL_MIN, world));
    for (size_t i = 0; i < COUNT; i++) {
        float favg = (float)((int)(i % 13 + 1) * nranks * (nranks + 1) / 2) / (float)nranks;
        if (d[i] != 0.5 * val(nranks - 1, i) || f[i] != favg || u[i] != ((uint64_t)1 << 40) + i)
            die("dtypes [%zu]: %g %g %llu", i, d[i], (double)f[i], (unsigned long long)u[i]);
    }
    free(d);
    free(f);
    free(u);
}

/* The other collectives: all-gather, reduce-scatter, all-to-all, gather, scatter, barrier,
 * in and out of place, every root for small n. */
static void check_others(coll_comm_t *comm, size_t count, int inplace, const char *tag)
{
    size_t n = (size_t)nranks, me = (size_t)rank, big = n * count + 1;
    int32_t *s = malloc(big * sizeof(int32_t)), *r = malloc(big * sizeof(int32_t));
    int32_t tri = nranks * (nranks + 1) / 2;

    /* all-gather: rank q contributes val(q, i) */
    for (size_t i = 0; i < big; i++)
        r[i] = -1;
    for (size_t i = 0; i < count; i++)
        (inplace ? r + me * count : s)[i] = val(rank, i);
    CHECK(coll_allgather(inplace ? r + me * count : s, r, count, COLL_INT32, comm));
    for (size_t q = 0; q < n; q++)
        for (size_t i = 0; i < count; i++)
            if (r[q * count + i] != val((int)q, i))
                die("%s allgather count %zu inplace %d: from %zu [%zu] = %d", tag, count,
                    inplace, q, i, r[q * count + i]);
    /* reduce-scatter: block b of every rank, summed, lands on rank b */
    for (size_t i = 0; i < n * count; i++)
        s[i] = val(rank, i);
    CHECK(coll_reduce_scatter(s, inplace ? s + me * count : r, count, COLL_INT32, COLL_SUM,
                              comm));
    for (size_t i = 0; i < count; i++) {
        int32_t got = inplace ? s[me * count + i] : r[i];
        int32_t want = (int32_t)((me * count + i) % 13 + 1) * tri;
        if (got != want)
            die("%s reduce_scatter count %zu inplace %d: [%zu] = %d, want %d", tag, count,
                inplace, i, got, want);
    }
    /* all-to-all: block j of rank q holds q * 1000 + j * 10 + i % 7 */
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < count; i++)
            s[j * count + i] = rank * 1000 + (int32_t)(j * 10 + i % 7);
    CHECK(coll_alltoall(s, inplace ? s : r, count, COLL_INT32, comm));
    for (size_t q = 0; q < n; q++)
        for (size_t i = 0; i < count; i++) {
            int32_t got = (inplace ? s : r)[q * count + i];
            if (got != (int32_t)(q * 1000 + me * 10 + i % 7))
                die("%s alltoall count %zu inplace %d: from %zu [%zu] = %d", tag, count,
                    inplace, q, i, got);
        }
    for (int root = 0; root < nranks; root++) {
        if (nranks > 4 && root != 0 && root != nranks - 1)
            continue;
        /* gather */
        for (size_t i = 0; i < big; i++)
            r[i] = -1;
        for (size_t i = 0; i < count; i++)
            (inplace && rank == root ? r + me * count : s)[i] = val(rank, i) + root;
        CHECK(coll_gather(inplace && rank == root ? r + me * count : s,
                          rank == root ? r : NULL, count, COLL_INT32, root, comm));
        if (rank == root)
            for (size_t q = 0; q < n; q++)
                for (size_t i = 0; i < count; i++)
                    if (r[q * count + i] != val((int)q, i) + root)
                        die("%s gather root %d count %zu: from %zu [%zu] = %d", tag, root,
                            count, q, i, r[q * count + i]);
        /* scatter */
        if (rank == root)
            for (size_t i = 0; i < n * count; i++)
                s[i] = (int32_t)i + 5 * root;
        for (size_t i = 0; i < count; i++)
            r[i] = -1;
        CHECK(coll_scatter(rank == root ? s : NULL,
                           inplace && rank == root ? s + me * count : r, count, COLL_INT32,
                           root, comm));
        for (size_t i = 0; i < count; i++) {
            int32_t got = inplace && rank == root ? s[me * count + i] : r[i];
            if (got != (int32_t)(me * count + i) + 5 * root)
                die("%s scatter root %d count %zu: [%zu] = %d", tag, root, count, i, got);
        }
    }
    CHECK(coll_barrier(comm));
    free(s);
    free(r);
}

static void sweep_others(coll_comm_t *comm, const char *tag)
{
    size_t n = (size_t)nranks;
    size_t counts[] = {0, 1, n + 1, 1000, 40003};
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
        for (int inplace = 0; inplace < 2; inplace++)
            check_others(comm, counts[c], inplace, tag);
}

static void suite_colls(coll_comm_t *world)
{
    /* the model's choice, then every algorithm forced where it applies */
    const char *forced[] = {"ring", "rd", "bruck", "pairwise", "linear", "binomial",
                            "rabenseifner", "dissemination"};
    sweep_others(world, "default");
    for (size_t a = 0; a < sizeof(forced) / sizeof(forced[0]); a++) {
        coll_comm_t *comm = new_comm(world, forced[a]);
        sweep_others(comm, forced[a]);
        if (!strcmp(forced[a], "rd") || !strcmp(forced[a], "rabenseifner"))
            sweep(comm, forced[a], 0);
        CHECK(coll_comm_destroy(comm));
    }
}

/* Point to point: blocking pairs, a ring in a group (would deadlock ungrouped if sends
 * waited), non-blocking, and a send to oneself paired in a group. */
static void suite_p2p(coll_comm_t *world)
{
    enum { COUNT = 70001 };
    int32_t *a = malloc(COUNT * sizeof(int32_t)), *b = malloc(COUNT * sizeof(int32_t));
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    coll_request_t *rs, *rr;

    for (size_t i = 0; i < COUNT; i++)
        a[i] = val(rank, i);
    /* pairs: 0<->1, 2<->3, ...; an odd last rank sits out */
    if ((rank ^ 1) < nranks) {
        int peer = rank ^ 1;
        memset(b, 0, COUNT * sizeof(int32_t));
        if (rank % 2 == 0) {
            CHECK(coll_send(a, COUNT, COLL_INT32, peer, world));
            CHECK(coll_recv(b, COUNT, COLL_INT32, peer, world));
        } else {
            CHECK(coll_recv(b, COUNT, COLL_INT32, peer, world));
            CHECK(coll_send(a, COUNT, COLL_INT32, peer, world));
        }
        for (size_t i = 0; i < COUNT; i++)
            if (b[i] != val(peer, i))
                die("pair: [%zu] = %d", i, b[i]);
    }
    /* ring shift in a group, receive posted last */
    memset(b, 0, COUNT * sizeof(int32_t));
    CHECK(coll_group_start());
    CHECK(coll_send(a, COUNT, COLL_INT32, right, world));
    CHECK(coll_recv(b, COUNT, COLL_INT32, left, world));
    CHECK(coll_group_end());
    for (size_t i = 0; i < COUNT; i++)
        if (b[i] != val(left, i))
            die("group ring: [%zu] = %d, want %d", i, b[i], val(left, i));
    /* non-blocking pairs; ops on a comm run in issue order (as NCCL's), so the even rank
     * sends first and the odd one receives first */
    if ((rank ^ 1) < nranks) {
        int peer = rank ^ 1;
        memset(b, 0, COUNT * sizeof(int32_t));
        if (rank % 2 == 0) {
            CHECK(coll_isend(a, COUNT, COLL_INT32, peer, world, &rs));
            CHECK(coll_irecv(b, COUNT, COLL_INT32, peer, world, &rr));
        } else {
            CHECK(coll_irecv(b, COUNT, COLL_INT32, peer, world, &rr));
            CHECK(coll_isend(a, COUNT, COLL_INT32, peer, world, &rs));
        }
        CHECK(coll_wait(rr));
        CHECK(coll_wait(rs));
        for (size_t i = 0; i < COUNT; i++)
            if (b[i] != val(peer, i))
                die("nonblocking: [%zu] = %d", i, b[i]);
    }
    /* to oneself */
    memset(b, 0, COUNT * sizeof(int32_t));
    if (coll_send(a, 4, COLL_INT32, rank, world) != COLL_INVALID_USAGE)
        die("an ungrouped send to oneself was accepted");
    CHECK(coll_group_start());
    CHECK(coll_recv(b, COUNT, COLL_INT32, rank, world));
    CHECK(coll_send(a, COUNT, COLL_INT32, rank, world));
    CHECK(coll_group_end());
    if (memcmp(a, b, COUNT * sizeof(int32_t)))
        die("send to oneself");
    if (coll_group_end() != COLL_INVALID_USAGE)
        die("coll_group_end without start was accepted");
    free(a);
    free(b);
}

/* Groups of collectives: two all-reduces on one comm and one on another, nested. */
static void suite_group(coll_comm_t *world)
{
    coll_comm_t *other = new_comm(world, NULL);
    enum { COUNT = 5003 };
    int32_t *x = malloc(COUNT * sizeof(int32_t)), *y = malloc(COUNT * sizeof(int32_t));
    int32_t *z = malloc(COUNT * sizeof(int32_t));
    int32_t tri = nranks * (nranks + 1) / 2;
    coll_request_t *req;

    for (size_t i = 0; i < COUNT; i++) {
        x[i] = val(rank, i);
        y[i] = val(rank, i + 1);
        z[i] = val(rank, i + 2);
    }
    CHECK(coll_group_start());
    CHECK(coll_allreduce(x, x, COUNT, COLL_INT32, COLL_SUM, world));
    CHECK(coll_group_start());
    CHECK(coll_allreduce(z, z, COUNT, COLL_INT32, COLL_MAX, other));
    CHECK(coll_group_end());
    CHECK(coll_allreduce(y, y, COUNT, COLL_INT32, COLL_SUM, world));
    if (coll_iallreduce(y, y, 1, COLL_INT32, COLL_SUM, world, &req) != COLL_INVALID_USAGE)
        die("a non-blocking call inside a group was accepted");
    if (coll_group_end() != COLL_INVALID_USAGE)
        die("a group with a refused call ended well");
    /* the refused call made the whole group fail without issuing: run it again cleanly */
    CHECK(coll_group_start());
    CHECK(coll_allreduce(x, x, COUNT, COLL_INT32, COLL_SUM, world));
    CHECK(coll_allreduce(z, z, COUNT, COLL_INT32, COLL_MAX, other));
    CHECK(coll_allreduce(y, y, COUNT, COLL_INT32, COLL_SUM, world));
    CHECK(coll_group_end());
    for (size_t i = 0; i < COUNT; i++)
        if (x[i] != (int32_t)(i % 13 + 1) * tri || y[i] != (int32_t)((i + 1) % 13 + 1) * tri ||
            z[i] != (int32_t)((i + 2) % 13 + 1) * nranks)
            die("group: [%zu] = %d %d %d", i, x[i], y[i], z[i]);
    free(x);
    free(y);
    free(z);
    CHECK(coll_comm_destroy(other));
}

static void suite_split(coll_comm_t *world)
{
    coll_comm_t *half = NULL, *none = (coll_comm_t *)1;
    int color = rank % 2, r = -1, n = -1;
    int want_n = (nranks + 1 - color) / 2;
    int32_t x;

    /* key = -rank: ranks in reverse order within each color */
    CHECK(coll_comm_split(world, color, -rank, &half));
    CHECK(coll_comm_rank(half, &r));
    CHECK(coll_comm_size(half, &n));
    if (n != want_n || r != (nranks - 1 - rank) / 2)
        die("split: rank %d of %d, want %d of %d", r, n, (nranks - 1 - rank) / 2, want_n);
    x = rank;
    CHECK(coll_allreduce(&x, &x, 1, COLL_INT32, COLL_MAX, half));
    if (x != nranks - 1 - ((nranks - 1 - color) % 2))
        die("split allreduce: %d", x);
    CHECK(coll_comm_destroy(half));
    CHECK(coll_comm_split(world, rank == 0 ? 0 : COLL_SPLIT_NOCOLOR, 0, &none));
    if ((rank == 0) != (none != NULL))
        die("split with NOCOLOR");
    if (none)
        CHECK(coll_comm_destroy(none));
}

static void suite_alltoallv(coll_comm_t *world)
{
    size_t *sc = calloc((size_t)nranks, sizeof(size_t)), *sd = calloc((size_t)nranks, sizeof(size_t));
    size_t *rc = calloc((size_t)nranks, sizeof(size_t)), *rd = calloc((size_t)nranks, sizeof(size_t));
    size_t stot = 0, rtot = 0;
    int32_t *s, *r;

    /* rank i sends (i + j) % 3 * 1000 + j elements to rank j (some are 0 when i = j = 0) */
    for (int j = 0; j < nranks; j++) {
        sc[j] = (size_t)((rank + j) % 3) * 1000 + (size_t)j;
        rc[j] = (size_t)((j + rank) % 3) * 1000 + (size_t)rank;
        sd[j] = stot;
        rd[j] = rtot;
        stot += sc[j];
        rtot += rc[j];
    }
    s = malloc((stot + 1) * sizeof(int32_t));
    r = malloc((rtot + 1) * sizeof(int32_t));
    for (int j = 0; j < nranks; j++)
        for (size_t i = 0; i < sc[j]; i++)
            s[sd[j] + i] = rank * 100000 + j * 1000 + (int32_t)(i % 1000);
    CHECK(coll_alltoallv(s, sc, sd, r, rc, rd, COLL_INT32, world));
    for (int j = 0; j < nranks; j++)
        for (size_t i = 0; i < rc[j]; i++)
            if (r[rd[j] + i] != j * 100000 + rank * 1000 + (int32_t)(i % 1000))
                die("alltoallv from %d [%zu] = %d", j, i, r[rd[j] + i]);
    free(s);
    free(r);

    /* In place (sendbuf == recvbuf, as MPI_IN_PLACE): block j leaves from and lands at
     * rd[j]. Counts must agree pairwise: rank i sends rc_i[j] to j, which receives rc_j[i],
     * so rc[j] is symmetric in (rank, j); large, so no block fits in one eager slot. */
    rtot = 0;
    for (int j = 0; j < nranks; j++) {
        rc[j] = 100000 + (size_t)((rank + j) % 3) * 4099 + (size_t)(rank * j % 5);
        rd[j] = rtot + (size_t)j; /* a gap before each block: nobody writes there */
        rtot = rd[j] + rc[j];
    }
    r = malloc((rtot + 1) * sizeof(int32_t));
    for (size_t i = 0; i <= rtot; i++)
        r[i] = -7;
    for (int j = 0; j < nranks; j++)
        for (size_t i = 0; i < rc[j]; i++)
            r[rd[j] + i] = rank * 1000000 + j * 10000 + (int32_t)(i % 9973);
    CHECK(coll_alltoallv(r, rc, rd, r, rc, rd, COLL_INT32, world));
    for (int j = 0; j < nranks; j++) {
        for (size_t i = 0; i < rc[j]; i++)
            if (r[rd[j] + i] != j * 1000000 + rank * 10000 + (int32_t)(i % 9973))
                die("in-place alltoallv from %d [%zu] = %d", j, i, r[rd[j] + i]);
        if (j > 0 && r[rd[j] - 1] != -7)
            die("in-place alltoallv wrote into the gap before block %d", j);
    }
    if (r[rtot] != -7)
        die("in-place alltoallv wrote past its last block");
    /* sendbuf == recvbuf with other send counts or displacements is not in place: refused
     * on every rank, nothing moved, and the comm goes on */
    sd[0] = rd[0] + 1;
    if (coll_alltoallv(r, rc, sd, r, rc, rd, COLL_INT32, world) != COLL_INVALID_ARGUMENT)
        die("in-place alltoallv with other displacements was not refused");
    /* a partial overlap: sendbuf one element past recvbuf */
    if (coll_alltoallv(r + 1, rc, rd, r, rc, rd, COLL_INT32, world) != COLL_INVALID_ARGUMENT)
        die("alltoallv with overlapping buffers was not refused");
    if (!strstr(coll_last_error(world), "overlaps"))
        die("overlap refused with '%s'", coll_last_error(world));
    /* disjoint blocks interleaved in one buffer are not an overlap */
    {
        size_t n2 = (size_t)nranks * 2 * 1000;
        int32_t *both = malloc(n2 * sizeof(int32_t));
        /* sends from both (even thousands), receives into both + 1 (odd thousands) */
        for (int j = 0; j < nranks; j++) {
            sc[j] = rc[j] = 1000;
            sd[j] = (size_t)j * 2000;
            rd[j] = (size_t)j * 2000 + 998; /* one element early: overlaps send block j */
            for (size_t i = 0; i < 1000; i++)
                both[sd[j] + i] = rank * 1000 + j;
        }
        if (coll_alltoallv(both, sc, sd, both + 1, rc, rd, COLL_INT32, world) !=
            COLL_INVALID_ARGUMENT)
            die("interleaved overlapping alltoallv blocks were not refused");
        for (int j = 0; j < nranks; j++)
            rd[j] = (size_t)j * 2000 + 999;
        CHECK(coll_alltoallv(both, sc, sd, both + 1, rc, rd, COLL_INT32, world));
        for (int j = 0; j < nranks; j++)
            for (size_t i = 0; i < 1000; i++)
                if (both[1 + rd[j] + i] != j * 1000 + rank || both[sd[j] + i] != rank * 1000 + j)
                    die("interleaved alltoallv block %d [%zu] = %d", j, i, both[1 + rd[j] + i]);
        free(both);
    }
    free(r);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
}

/* Rank 0 passes a different count: every rank must see an error, none may hang. */
static void suite_mismatch(coll_comm_t *world)
{
    coll_comm_t *comm;
    coll_status_t st;
    size_t count = rank == 0 ? 1000 : 2000;
    int32_t *buf = calloc(2000, sizeof(int32_t));

    setenv("COLL_TIMEOUT_MS", "10000", 1);
    comm = new_comm(world, "ring");
    st = coll_allreduce(buf, buf, count, COLL_INT32, COLL_SUM, comm);
    if (st != COLL_REMOTE_ERROR && st != COLL_TIMEOUT)
        die("mismatched counts returned %s, want a remote error or timeout",
            coll_status_string(st));
    fprintf(stderr, "rank %d: mismatch detected as expected: %s\n", rank, coll_last_error(comm));
    /* the comm stays failed */
    if (coll_allreduce(buf, buf, 1, COLL_INT32, COLL_SUM, comm) != st)
        die("a failed comm accepted another collective");
    CHECK(coll_comm_destroy(comm));
    free(buf);
}

/* Rank 0 gives up first (a short COLL_TIMEOUT_MS) while the last rank is late: every other
 * rank's error names rank 0's reason, passed on by the transport (an abort frame over TCP,
 * the closed rings' reason over shm), not just a closed connection. */
static void suite_cause(coll_comm_t *world)
{
    static const char *const tps[] = {"tcp", "shm"};
    int32_t buf[64] = {0};

    for (size_t t = 0; t < sizeof(tps) / sizeof(tps[0]); t++) {
        char first[256] = "";
        coll_comm_t *comm;
        coll_status_t st;

        setenv("COLL_TRANSPORT", tps[t], 1);
        setenv("COLL_TIMEOUT_MS", rank == 0 ? "500" : "30000", 1);
        comm = new_comm(world, "ring");
        setenv("COLL_TIMEOUT_MS", "60000", 1);
        unsetenv("COLL_TRANSPORT");
        CHECK(coll_allreduce(buf, buf, 64, COLL_INT32, COLL_SUM, comm)); /* links up */
        if (rank == nranks - 1)
            usleep(2000 * 1000);
        st = coll_allreduce(buf, buf, 64, COLL_INT32, COLL_SUM, comm);
        if (st == COLL_SUCCESS)
            die("%s: the all-reduce succeeded with rank 0 timing out", tps[t]);
        if (rank == 0)
            snprintf(first, 61, "%s", coll_last_error(comm));
        CHECK(coll_broadcast(first, first, sizeof(first), COLL_UINT8, 0, world));
        if (rank != 0 && !strstr(coll_last_error(comm), first))
            die("%s: rank %d's error does not carry rank 0's '%s': %s", tps[t], rank, first,
                coll_last_error(comm));
        fprintf(stderr, "rank %d (%s): %s\n", rank, tps[t], coll_last_error(comm));
        CHECK(coll_comm_destroy(comm));
        CHECK(coll_barrier(world));
    }
}

int main(int argc, char **argv)
{
    const char *suite = argc > 1 ? argv[1] : "basic";
    coll_comm_t *world;

    CHECK(coll_comm_init_env(&world));
    CHECK(coll_comm_rank(world, &rank));
    CHECK(coll_comm_size(world, &nranks));
    if (!strcmp(suite, "basic"))
        sweep(world, "default", nranks <= 4);
    else if (!strcmp(suite, "algos"))
        suite_algos(world);
    else if (!strcmp(suite, "hosts"))
        suite_hosts(world);
    else if (!strcmp(suite, "nonblocking"))
        suite_nonblocking(world);
    else if (!strcmp(suite, "twocomm"))
        suite_twocomm(world);
    else if (!strcmp(suite, "dtypes"))
        suite_dtypes(world);
    else if (!strcmp(suite, "colls"))
        suite_colls(world);
    else if (!strcmp(suite, "p2p"))
        suite_p2p(world);
    else if (!strcmp(suite, "group"))
        suite_group(world);
    else if (!strcmp(suite, "split"))
        suite_split(world);
    else if (!strcmp(suite, "alltoallv"))
        suite_alltoallv(world);
    else if (!strcmp(suite, "mismatch"))
        suite_mismatch(world);
    else if (!strcmp(suite, "cause"))
        suite_cause(world);
    else
        die("unknown suite '%s'", suite);
    CHECK(coll_comm_destroy(world));
    if (rank == 0)
        printf("mp_coll %s: %d ranks OK\n", suite, nranks);
    return 0;
}
