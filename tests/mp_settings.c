/*
 * mp_settings.c - ranks configured differently still agree (src/core/settings.c): every
 * per-comm setting set differently on one rank gives rank 0's behaviour on every rank or a
 * clear error on every rank, within seconds, never a wait for COLL_TIMEOUT_MS.
 *
 *   collrun -n N mp_settings adopt     each per-comm setting (and a calibration file) on one
 *                                      rank only: a fresh comm per case, whose calls must
 *                                      give right results, whose ranks must hold the same
 *                                      settings and cost model (and a comm split from one, its
 *                                      parent's), and COLL_TRANSPORT that a rank cannot
 *                                      follow: an error naming it on every rank
 *   collrun -n N mp_settings decide    the last rank keeps its own COLL_ALGO and chunk (the
 *                                      test hook of settings_test.h): the first call must
 *                                      fail on every rank with COLL_REMOTE_ERROR, one of them
 *                                      naming both decisions (shm: flat against ring; TCP:
 *                                      ring in other chunks)
 *
 * Each rank prints one line per case with the milliseconds from creation to the end of its
 * calls (or to the error).
 */
#include "core/internal.h"
#include "core/settings.h"
#include "core/settings_test.h"
#include "algo/cost.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mp_util.h"

#define BOUND_MS 5000.0 /* milliseconds, not the 600 s timeout */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A fresh comm of every rank, made with whatever environment each rank has now. */
static coll_status_t fresh_comm(coll_comm_t *base, coll_comm_t **comm_p)
{
    coll_unique_id_t id;

    if (rank == 0)
        CHECK(coll_get_unique_id(&id));
    CHECK(coll_broadcast(&id, &id, sizeof(id), COLL_UINT8, 0, base));
    return coll_comm_init(comm_p, nranks, &id, rank);
}

/* What must be the same on every rank of a comm: its per-comm settings and its model. */
static uint64_t settings_hash(const struct coll_comm *c)
{
    char v[640];
    uint64_t h = 0x5e7;

    for (size_t i = 0; i < coll__nparams; i++)
        if (coll__params[i].scope == COLL_SCOPE_COMM) {
            coll__config_format(&c->cfg, &coll__params[i], v, sizeof(v));
            h = coll__hash64(v, strlen(v) + 1, h);
        }
    if (c->cost) {
        double m[6] = {c->cost->link[0].alpha, c->cost->link[0].beta, c->cost->link[1].alpha,
                       c->cost->gamma[COLL_FLOAT32], c->cost->step, (double)c->cost->cores};
        h = coll__hash64(m, sizeof(m), h);
    }
    return h;
}

/* Right results at sizes that take every path (flat, sliced, schedules). */
static void calls(coll_comm_t *c, const char *what)
{
    static float in[1 << 18], out[1 << 18];
    const size_t counts[] = {2, 1024, 16384, 1 << 18};

    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        size_t n = counts[k];
        for (size_t i = 0; i < n; i++)
            in[i] = (float)(rank + 1) + (float)(i % 7);
        CHECK(coll_allreduce(in, out, n, COLL_FLOAT32, COLL_SUM, c));
        for (size_t i = 0; i < n; i++)
            if (out[i] != (float)(nranks * (nranks + 1) / 2) + (float)nranks * (float)(i % 7))
                die("%s: allreduce of %zu: element %zu is %g", what, n, i, (double)out[i]);
    }
    for (size_t i = 0; i < 1024; i++)
        in[i] = rank == nranks - 1 ? (float)i : -1.0f;
    CHECK(coll_broadcast(in, out, 1024, COLL_FLOAT32, nranks - 1, c));
    for (size_t i = 0; i < 1024; i++)
        if (out[i] != (float)i)
            die("%s: broadcast: element %zu is %g", what, i, (double)out[i]);
}

struct kase {
    const char *name, *value; /* set on one rank */
    const char *name2, *value2;
    int who;                  /* which rank: -1 the last */
    bool fails;               /* creation fails on every rank, naming name */
};

static void adopt(coll_comm_t *base, const char *calib)
{
    const bool tcp = getenv("COLL_TRANSPORT") && !strcmp(getenv("COLL_TRANSPORT"), "tcp");
    const struct kase cases[] = {
        {"COLL_ALGO", "ring", NULL, NULL, -1, false},
        {"COLL_ALGO", "ring", NULL, NULL, 0, false},
        {"COLL_CHUNK_BYTES", "32K", NULL, NULL, -1, false},
        {"COLL_SELECT", "threshold", "COLL_TREE_THRESHOLD", "1K", -1, false},
        {"COLL_NSOCKS", "3", NULL, NULL, -1, false},
        {"COLL_SHM_FLAT", "0", NULL, NULL, -1, false},
        {"COLL_SHM_FLAT", "0", NULL, NULL, 0, false},
        {"COLL_SHM_FLAT_BYTES", "256", NULL, NULL, -1, false},
        {"COLL_SHM_SLICED_BYTES", "0", NULL, NULL, -1, false},
        {"COLL_CHECK", "1", NULL, NULL, -1, false},
        {"COLL_QUANT", "bf16", "COLL_QUANT_MIN_BYTES", "0", -1, false},
        {"COLL_QUANT_BLOCK", "32", "COLL_QUANT_NODE_RANKS", "1", -1, false},
        {"COLL_CUDA_STAGING_BYTES", "64K", "COLL_CUDA_IPC", "0", -1, false},
        {"COLL_CALIB_FILE", calib, NULL, NULL, -1, false},
        {"COLL_CALIB_FILE", calib, NULL, NULL, 0, false},
        /* over shm: the rank that forced tcp has only tcp, rank 0's "" takes what each pair
         * has; over tcp: rank 0 forces tcp, which the rank that asked for shm lacks */
        {"COLL_TRANSPORT", tcp ? "shm" : "tcp", NULL, NULL, -1, tcp},
        {"COLL_TRANSPORT", "tcp", NULL, NULL, 0, false},
    };

    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const struct kase *c = &cases[k];
        const int who = c->who < 0 ? nranks - 1 : c->who;
        char *old = getenv(c->name) ? strdup(getenv(c->name)) : NULL, what[96];
        coll_comm_t *comm = NULL;
        uint64_t h, *all = calloc((size_t)nranks, sizeof(*all));
        double t0 = now_ms(), ms;
        coll_status_t st;

        if (nranks == 1 || !all)
            break;
        snprintf(what, sizeof(what), "%s=%s on rank %d", c->name, c->value, who);
        if (rank == who) {
            setenv(c->name, c->value, 1);
            if (c->name2)
                setenv(c->name2, c->value2, 1);
        }
        st = fresh_comm(base, &comm);
        if (st == COLL_SUCCESS && !strcmp(c->name, "COLL_ALGO") && c->who < 0) {
            /* a comm split from it in reverse order has the differing rank as its rank 0,
             * whose environment still says ring: the child keeps the parent's value */
            coll_comm_t *child;
            CHECK(coll_comm_split(comm, 0, nranks - 1 - rank, &child));
            if (strcmp(child->cfg.algo, comm->cfg.algo) || comm->cfg.algo[0])
                die("%s: the split comm has COLL_ALGO '%s', its parent '%s'", what,
                    child->cfg.algo, comm->cfg.algo);
            CHECK(coll_comm_destroy(child));
        }
        if (rank == who) {
            if (old)
                setenv(c->name, old, 1);
            else
                unsetenv(c->name);
            if (c->name2)
                unsetenv(c->name2);
        }
        if (c->fails) {
            ms = now_ms() - t0;
            if (st == COLL_SUCCESS)
                die("%s: creation succeeded", what);
            if (!strstr(coll_last_error(NULL), c->name))
                die("%s: the error does not name %s: %s", what, c->name,
                    coll_last_error(NULL));
            printf("settings %s rank %d: creation failed as it should in %.1f ms: %s\n", what,
                   rank, ms, coll_last_error(NULL));
        } else {
            if (st != COLL_SUCCESS)
                die("%s: creation: %s: %s", what, coll_status_string(st), coll_last_error(NULL));
            calls(comm, what);
            ms = now_ms() - t0;
            h = settings_hash(comm);
            CHECK(coll_allgather(&h, all, 1, COLL_UINT64, base));
            for (int r = 0; r < nranks; r++)
                if (all[r] != all[0])
                    die("%s: rank %d holds other settings or another model than rank 0", what,
                        r);
            CHECK(coll_comm_destroy(comm));
            printf("settings %s rank %d: adopted, calls right, %.1f ms\n", what, rank, ms);
        }
        if (ms > BOUND_MS)
            die("%s: took %.0f ms", what, ms);
        free(all);
        free(old);
    }
}

static void decide(coll_comm_t *base)
{
    const bool tcp = getenv("COLL_TRANSPORT") && !strcmp(getenv("COLL_TRANSPORT"), "tcp");
    static float in[4096], out[4096];
    coll_comm_t *comm = NULL;
    int named = 0, *all = calloc((size_t)nranks, sizeof(*all));
    double t0, ms;
    coll_status_t st;

    if (!all)
        die("out of memory");
    /* shm: the last rank runs ring where the others take the flat path; TCP: every rank
     * runs ring, the last in other chunks, so that its ring neighbours, which post receives
     * from it, read its frames (a TCP rank reads nothing from a peer it expects nothing
     * from: docs/status.md) */
    if (tcp)
        setenv("COLL_ALGO", "allreduce=ring", 1);
    if (rank == nranks - 1) {
        coll__settings_test_keep_own(true);
        setenv("COLL_ALGO", "allreduce=ring", 1);
        setenv("COLL_CHUNK_BYTES", "64", 1);
    }
    CHECK(fresh_comm(base, &comm));
    coll__settings_test_keep_own(false);
    unsetenv("COLL_ALGO");
    unsetenv("COLL_CHUNK_BYTES");
    t0 = now_ms();
    st = coll_allreduce(in, out, 4096, COLL_FLOAT32, COLL_SUM, comm);
    ms = now_ms() - t0;
    named = strstr(coll_last_error(comm), "decided differently") != NULL;
    printf("settings decide rank %d: %s in %.1f ms: %s\n", rank, coll_status_string(st), ms,
           coll_last_error(comm));
    if (st != COLL_REMOTE_ERROR)
        die("decide: the call returned %s, not COLL_REMOTE_ERROR", coll_status_string(st));
    if (ms > BOUND_MS)
        die("decide: the error took %.0f ms", ms);
    coll_comm_destroy(comm);
    CHECK(coll_allgather(&named, all, 1, COLL_INT32, base));
    named = 0;
    for (int r = 0; r < nranks; r++)
        named += all[r];
    if (!named)
        die("decide: no rank's error names both decisions");
    free(all);
}

int main(int argc, char **argv)
{
    coll_comm_t *base;
    char calib[] = "/tmp/mp_settings_calib_XXXXXX";
    int fd;

    if (argc != 2 || (strcmp(argv[1], "adopt") && strcmp(argv[1], "decide"))) {
        fprintf(stderr, "usage: mp_settings adopt|decide\n");
        return 2;
    }
    CHECK(coll_comm_init_env(&base));
    CHECK(coll_comm_rank(base, &rank));
    CHECK(coll_comm_size(base, &nranks));
    /* a calibration only this rank's "host" has: other link costs than the defaults */
    fd = mkstemp(calib);
    if (fd < 0 || dprintf(fd, "tcp.alpha 3e-4\ntcp.beta 2e-9\nshm.alpha 7e-5\nstep 4e-6\n") < 0)
        die("cannot write a calibration file");
    close(fd);
    if (!strcmp(argv[1], "adopt"))
        adopt(base, calib);
    else
        decide(base);
    unlink(calib);
    CHECK(coll_comm_destroy(base));
    return 0;
}
