/*
 * rel_rank.c - one rank of the reliability tests (tests/test_linkdown.sh, bench/soak.py),
 * started without collrun so that no launcher kills the survivors of a failure before they
 * have reported it themselves:
 *
 *   rel_rank id                     print a fresh unique id and serve its bootstrap root
 *                                   until stdin closes
 *   rel_rank run SEED ITERS MAXCOUNT
 *                                   coll_comm_init_env (COLL_UNIQUE_ID, COLL_RANK,
 *                                   COLL_SIZE), then ITERS collectives (0: until killed),
 *                                   drawn from SEED alike on every rank, each with up to
 *                                   MAXCOUNT int32 elements, every result checked
 *
 * Lines on stdout (the scripts parse them):
 *   READY                  after the first collective
 *   DONE n                 all ITERS ran and were right (exit 0)
 *   ERROR st t_ns iter coll msg
 *                          a call failed: its status, CLOCK_REALTIME at the return (to
 *                          compare with when the fault was injected), exit 2
 *   WRONG iter coll i got want
 *                          a wrong element (exit 3)
 */
#include "coll.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { C_ALLREDUCE, C_BROADCAST, C_REDUCE, C_ALLGATHER, C_REDUCE_SCATTER, C_ALLTOALL,
       C_BARRIER, C_NCOLLS };
static const char *const coll_names[C_NCOLLS] = {
    "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "barrier"};

static uint64_t rng_state;

/* splitmix64: every rank draws the same sequence from the same seed */
static uint64_t rng(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Element i of rank r's contribution in iteration it: small, so sums of 64 ranks fit. */
static int32_t val(int r, size_t i, long it)
{
    return (int32_t)((r + 1) * (int)((i + (size_t)it) % 97 + 1));
}

static int serve_id(void)
{
    coll_unique_id_t id;
    char s[COLL_UNIQUE_ID_STRLEN];
    char buf[64];

    if (coll_get_unique_id(&id) != COLL_SUCCESS ||
        coll_unique_id_to_string(&id, s, sizeof(s)) != COLL_SUCCESS) {
        fprintf(stderr, "rel_rank id: %s\n", coll_last_error(NULL));
        return 1;
    }
    printf("%s\n", s);
    fflush(stdout);
    while (read(0, buf, sizeof(buf)) > 0)
        ;
    return 0;
}

static int wrong(long it, int c, size_t i, long got, long want)
{
    printf("WRONG %ld %s %zu %ld %ld\n", it, coll_names[c], i, got, want);
    fflush(stdout);
    return 3;
}

/* One collective of kind c on count elements: 0 right, 2 error, 3 wrong. */
static int one(coll_comm_t *comm, int rank, int n, long it, int c, size_t count, int root,
               int32_t *s, int32_t *r)
{
    size_t total = count * (size_t)n;
    int32_t tri = (int32_t)(n * (n + 1) / 2);
    coll_status_t st = COLL_SUCCESS;

    for (size_t i = 0; i < total; i++) {
        s[i] = val(rank, i, it);
        r[i] = -7;
    }
    switch (c) {
    case C_ALLREDUCE: st = coll_allreduce(s, r, count, COLL_INT32, COLL_SUM, comm); break;
    case C_BROADCAST: st = coll_broadcast(s, r, count, COLL_INT32, root, comm); break;
    case C_REDUCE: st = coll_reduce(s, r, count, COLL_INT32, COLL_SUM, root, comm); break;
    case C_ALLGATHER: st = coll_allgather(s, r, count, COLL_INT32, comm); break;
    case C_REDUCE_SCATTER:
        st = coll_reduce_scatter(s, r, count, COLL_INT32, COLL_SUM, comm);
        break;
    case C_ALLTOALL: st = coll_alltoall(s, r, count, COLL_INT32, comm); break;
    default: st = coll_barrier(comm); break;
    }
    if (st != COLL_SUCCESS) {
        printf("ERROR %d %llu %ld %s %s\n", (int)st, (unsigned long long)realtime_ns(), it,
               coll_names[c], coll_last_error(comm));
        fflush(stdout);
        return 2;
    }
    for (size_t i = 0; i < count && c != C_BARRIER; i++) {
        int32_t unit = (int32_t)((i + (size_t)it) % 97 + 1);
        switch (c) {
        case C_ALLREDUCE:
            if (r[i] != unit * tri)
                return wrong(it, c, i, r[i], (long)unit * tri);
            break;
        case C_BROADCAST:
            if (r[i] != val(root, i, it))
                return wrong(it, c, i, r[i], val(root, i, it));
            break;
        case C_REDUCE:
            if (rank == root && r[i] != unit * tri)
                return wrong(it, c, i, r[i], (long)unit * tri);
            break;
        case C_ALLGATHER:
            for (int p = 0; p < n; p++)
                if (r[(size_t)p * count + i] != val(p, i, it))
                    return wrong(it, c, (size_t)p * count + i, r[(size_t)p * count + i],
                                 val(p, i, it));
            break;
        case C_REDUCE_SCATTER: {
            size_t g = (size_t)rank * count + i;
            int32_t want = (int32_t)((g + (size_t)it) % 97 + 1) * tri;
            if (r[i] != want)
                return wrong(it, c, i, r[i], want);
            break;
        }
        case C_ALLTOALL:
            for (int p = 0; p < n; p++) {
                size_t src = (size_t)rank * count + i; /* block rank of peer p's buffer */
                if (r[(size_t)p * count + i] != val(p, src, it))
                    return wrong(it, c, (size_t)p * count + i, r[(size_t)p * count + i],
                                 val(p, src, it));
            }
            break;
        }
    }
    return 0;
}

static int run(uint64_t seed, long iters, size_t maxcount)
{
    coll_comm_t *comm;
    int rank, n, rc = 0;
    int32_t *s = NULL, *r = NULL;
    long it;

    if (coll_comm_init_env(&comm) != COLL_SUCCESS) {
        printf("ERROR %d %llu -1 init %s\n", (int)COLL_INVALID_ARGUMENT,
               (unsigned long long)realtime_ns(), coll_last_error(NULL));
        fflush(stdout);
        return 2;
    }
    coll_comm_rank(comm, &rank);
    coll_comm_size(comm, &n);
    s = malloc((maxcount + 1) * (size_t)n * sizeof(*s));
    r = malloc((maxcount + 1) * (size_t)n * sizeof(*r));
    if (!s || !r) {
        fprintf(stderr, "rel_rank: out of memory\n");
        rc = 1;
        goto out;
    }
    rng_state = seed;
    for (it = 0; iters == 0 || it < iters; it++) {
        int c = (int)(rng() % C_NCOLLS), root = (int)(rng() % (uint64_t)n);
        /* mostly small counts, now and then a large one that takes many chunks */
        size_t count = rng() % 4 == 0 ? (size_t)(rng() % (maxcount + 1))
                                      : (size_t)(rng() % (maxcount / 64 + 2));
        rc = one(comm, rank, n, it, c, count, root, s, r);
        if (rc)
            break;
        if (it == 0) {
            printf("READY\n");
            fflush(stdout);
        }
    }
    if (!rc) {
        printf("DONE %ld\n", it);
        fflush(stdout);
    }
out:
    free(s);
    free(r);
    /* after an error, destroy must still return and free everything */
    coll_comm_destroy(comm);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "id"))
        return serve_id();
    if (argc == 5 && !strcmp(argv[1], "run")) {
        size_t maxcount = strtoull(argv[4], NULL, 10);
        return run(strtoull(argv[2], NULL, 10), strtol(argv[3], NULL, 10),
                   maxcount < 64 ? 64 : maxcount);
    }
    fprintf(stderr, "usage: rel_rank id | run SEED ITERS MAXCOUNT\n");
    return 2;
}
