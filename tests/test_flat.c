/*
 * test_flat.c - the shared-memory fast path for small blocking collectives, between real
 * processes: every collective it runs at n = 1..8 (all-reduce in every dtype and op, bit
 * for bit what the general path gives, the same bits on every rank), large all-reduce,
 * reduce and broadcast in pieces of one slot (every dtype and op, sizes around each
 * threshold, n = 1..8, a peer killed in the middle), slots reused over many calls, fast
 * calls mixed with non-blocking general ones, mismatched calls, a peer killed or stopped
 * while the others wait in it, a hostile peer's garbage in the segment before a small or a
 * large call (run under ASan in CI), an abort from another thread, the knobs that turn it
 * off or force it, and its COLL_TRACE records.
 *
 * Each case forks its ranks; a process of its own holds the bootstrap root.
 */
#include "harness.h"
#include "core/internal.h"
#include "path/flat_test.h"
#include "transport/transport.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#define MAXR 8

typedef void (*rank_fn)(coll_comm_t *comm, int rank, int n, void *arg);

/* The id comes from a process of its own: a fork beside the root's thread can deadlock the
 * child's allocator (it does under ASan). */
static pid_t id_holder(coll_unique_id_t *id)
{
    int p[2];
    pid_t pid;

    ASSERT(pipe(p) == 0);
    pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        coll_unique_id_t mine;
        close(p[0]);
        if (coll_get_unique_id(&mine) != COLL_SUCCESS ||
            write(p[1], &mine, sizeof(mine)) != (ssize_t)sizeof(mine))
            _exit(3);
        close(p[1]);
        for (;;)
            pause();
    }
    close(p[1]);
    ASSERT(read(p[0], id, sizeof(*id)) == (ssize_t)sizeof(*id));
    close(p[0]);
    return pid;
}

/* Fork n ranks running fn; how many exited 0. The rank `victim` (or -1) is expected to die
 * or stop, and is killed at the end. */
static int run_ranks(int n, rank_fn fn, void *arg, int victim)
{
    coll_unique_id_t id;
    pid_t pids[MAXR], holder = id_holder(&id);
    int ok = 0;

    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        ASSERT(pids[r] >= 0);
        if (pids[r] == 0) {
            coll_comm_t *comm;
            if (coll_comm_init(&comm, n, &id, r) != COLL_SUCCESS) {
                fprintf(stderr, "# rank %d: init: %s\n", r, coll_last_error(NULL));
                _exit(3);
            }
            fn(comm, r, n, arg);
            coll_comm_destroy(comm);
            _exit(0);
        }
    }
    for (int r = 0; r < n; r++) {
        int status;
        if (r == victim)
            continue;
        ASSERT(waitpid(pids[r], &status, 0) == pids[r]);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
            ok++;
        else
            fprintf(stderr, "# rank %d: %s %d\n", r, WIFEXITED(status) ? "exit" : "signal",
                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
    if (victim >= 0) {
        kill(pids[victim], SIGKILL);
        ASSERT(waitpid(pids[victim], NULL, 0) == pids[victim]);
    }
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    return ok;
}

#define RCHECK(cond)                                                                    \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "# rank %d: %s:%d: %s\n", rank, __FILE__, __LINE__, #cond); \
            _exit(1);                                                                   \
        }                                                                               \
    } while (0)

#define RCALL(call)                                                                     \
    do {                                                                                \
        coll_status_t st_ = (call);                                                     \
        if (st_ != COLL_SUCCESS) {                                                      \
            fprintf(stderr, "# rank %d: %s:%d: %s: %s: %s\n", rank, __FILE__, __LINE__,  \
                    #call, coll_status_string(st_), coll_last_error(NULL));             \
            _exit(1);                                                                   \
        }                                                                               \
    } while (0)

/* ---- every collective at n = 1..8 --------------------------------------------------- */

/* Small integers every dtype holds exactly, and whose sums, products, minima and maxima
 * over 8 ranks it holds exactly too: so the general path's order of operations cannot
 * change a bit, and the two paths must agree bit for bit. */
static int small_value(coll_op_t op, int rank, size_t i)
{
    if (op == COLL_SUM || op == COLL_AVG)
        return (int)((rank + i) % 2);
    if (op == COLL_PROD)
        return 1 + (int)((rank + 3 * i) % 2);
    return (int)((7 * rank + 3 * i) % 5);
}

static void put_value(coll_dtype_t dt, void *buf, size_t i, int v)
{
    /* 0..4 in the narrow float formats */
    static const uint16_t f16[5] = {0x0000, 0x3c00, 0x4000, 0x4200, 0x4400};
    static const uint16_t bf16[5] = {0x0000, 0x3f80, 0x4000, 0x4040, 0x4080};
    static const uint8_t e4m3[5] = {0x00, 0x38, 0x40, 0x44, 0x48};
    static const uint8_t e5m2[5] = {0x00, 0x3c, 0x40, 0x42, 0x44};

    switch (dt) {
    case COLL_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case COLL_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case COLL_INT32: ((int32_t *)buf)[i] = v; break;
    case COLL_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case COLL_INT64: ((int64_t *)buf)[i] = v; break;
    case COLL_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case COLL_FLOAT16: ((uint16_t *)buf)[i] = f16[v]; break;
    case COLL_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case COLL_FLOAT64: ((double *)buf)[i] = v; break;
    case COLL_BFLOAT16: ((uint16_t *)buf)[i] = bf16[v]; break;
    case COLL_FLOAT8E4M3: ((uint8_t *)buf)[i] = e4m3[v]; break;
    case COLL_FLOAT8E5M2: ((uint8_t *)buf)[i] = e5m2[v]; break;
    default: break;
    }
}

/* A second comm over the same ranks on the general path (COLL_SHM_FLAT=0 at its init). */
static coll_comm_t *general_comm(coll_comm_t *comm, int rank)
{
    coll_comm_t *gen;

    setenv("COLL_SHM_FLAT", "0", 1);
    RCALL(coll_comm_split(comm, 0, rank, &gen));
    unsetenv("COLL_SHM_FLAT");
    return gen;
}

static void check_allreduce_all(coll_comm_t *comm, coll_comm_t *gen, int rank, int n)
{
    const size_t counts[] = {0, 1, 5, 300, 0 /* the largest the fast path takes */};
    uint8_t *in = malloc(4096), *fast = malloc(4096), *slow = malloc(4096);
    uint64_t sum = 0x9e3779b97f4a7c15ull, *sums = calloc((size_t)n, sizeof(*sums));

    RCHECK(in && fast && slow && sums);
    for (int dt = 0; dt < COLL_NUM_DTYPES; dt++) {
        size_t esz = coll__dtype_size((coll_dtype_t)dt);
        for (int op = 0; op < COLL_NUM_OPS; op++) {
            for (size_t k = 0; k < COLL_ARRAY_SIZE(counts); k++) {
                size_t count = counts[k] ? counts[k] : 4096 / esz;
                uint64_t before = coll__flat_calls(comm);
                if (k == 0)
                    count = 0;
                for (size_t i = 0; i < count; i++)
                    put_value((coll_dtype_t)dt, in, i, small_value((coll_op_t)op, rank, i));
                memset(fast, 0x5a, 4096);
                memset(slow, 0xa5, 4096);
                RCALL(coll_allreduce(in, fast, count, (coll_dtype_t)dt, (coll_op_t)op, comm));
                RCHECK(coll__flat_calls(comm) == before + 1);
                RCALL(coll_allreduce(in, slow, count, (coll_dtype_t)dt, (coll_op_t)op, gen));
                if (memcmp(fast, slow, count * esz) != 0)
                    fprintf(stderr, "# rank %d: %s %s count %zu differs from the general path\n",
                            rank, coll__dtype_name((coll_dtype_t)dt),
                            coll__op_name((coll_op_t)op), count);
                RCHECK(memcmp(fast, slow, count * esz) == 0);
                /* in place too */
                RCALL(coll_allreduce(in, in, count, (coll_dtype_t)dt, (coll_op_t)op, comm));
                RCHECK(memcmp(in, slow, count * esz) == 0);
                sum = coll__hash64(fast, count * esz, sum);
            }
        }
    }
    RCHECK(coll__flat_calls(gen) == 0);
    /* the same bits on every rank */
    RCALL(coll_allgather(&sum, sums, 1, COLL_UINT64, gen));
    for (int r = 0; r < n; r++)
        RCHECK(sums[r] == sum);
    free(in);
    free(fast);
    free(slow);
    free(sums);
}

static void check_rooted(coll_comm_t *comm, int rank, int n)
{
    const size_t counts[] = {3, 1000};
    int32_t *a = malloc(1000 * sizeof(*a)), *b = malloc(1000 * sizeof(*b));
    int32_t *g = malloc((size_t)n * 1000 * sizeof(*g));

    RCHECK(a && b && g);
    for (size_t k = 0; k < COLL_ARRAY_SIZE(counts); k++) {
        size_t count = counts[k];
        for (int root = 0; root < n; root++) {
            uint64_t before = coll__flat_calls(comm);
            for (size_t i = 0; i < count; i++)
                a[i] = rank == root ? (int32_t)(i * 7 + (size_t)root) : -1;
            RCALL(coll_broadcast(a, a, count, COLL_INT32, root, comm));
            for (size_t i = 0; i < count; i++)
                RCHECK(a[i] == (int32_t)(i * 7 + (size_t)root));
            for (size_t i = 0; i < count; i++)
                a[i] = (int32_t)(rank * 3 + (int)i);
            memset(b, 0, count * sizeof(*b));
            RCALL(coll_reduce(a, b, count, COLL_INT32, COLL_SUM, root, comm));
            for (size_t i = 0; rank == root && i < count; i++)
                RCHECK(b[i] == (int32_t)(3 * n * (n - 1) / 2 + n * (int)i));
            RCALL(coll_reduce(a, b, count, COLL_INT32, COLL_MAX, root, comm));
            for (size_t i = 0; rank == root && i < count; i++)
                RCHECK(b[i] == (int32_t)(3 * (n - 1) + (int)i));
            RCALL(coll_barrier(comm));
            RCHECK(coll__flat_calls(comm) == before + 4);
        }
        /* all-gather, out of place and in place */
        for (size_t i = 0; i < count; i++)
            a[i] = (int32_t)(rank * 100000 + (int)i);
        RCALL(coll_allgather(a, g, count, COLL_INT32, comm));
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < count; i++)
                RCHECK(g[(size_t)r * count + i] == (int32_t)(r * 100000 + (int)i));
        memset(g, 0, (size_t)n * count * sizeof(*g));
        memcpy(g + (size_t)rank * count, a, count * sizeof(*a));
        RCALL(coll_allgather(g + (size_t)rank * count, g, count, COLL_INT32, comm));
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < count; i++)
                RCHECK(g[(size_t)r * count + i] == (int32_t)(r * 100000 + (int)i));
    }
    free(a);
    free(b);
    free(g);
}

static void rank_colls(coll_comm_t *comm, int rank, int n, void *arg)
{
    coll_comm_t *gen = general_comm(comm, rank);
    (void)arg;
    check_allreduce_all(comm, gen, rank, n);
    check_rooted(comm, rank, n);
    RCALL(coll_comm_destroy(gen));
}

#define COLLS_CASE(n)                                                                   \
    TEST(colls_np##n)                                                                   \
    {                                                                                   \
        ASSERT_EQ(run_ranks(n, rank_colls, NULL, -1), n);                               \
    }
COLLS_CASE(1)
COLLS_CASE(2)
COLLS_CASE(3)
COLLS_CASE(4)
COLLS_CASE(5)
COLLS_CASE(6)
COLLS_CASE(7)
COLLS_CASE(8)

/* ---- the sliced all-reduce (COLL_SHM_SLICED_BYTES) ------------------------------------ */

static void rank_sliced(coll_comm_t *comm, int rank, int n, void *arg)
{
    const size_t max = 64 << 10, sizes[] = {4097, 12004, 40000, 64 << 10};
    uint8_t *in = malloc(max), *fast = malloc(max), *slow = malloc(max);
    coll_comm_t *gen = general_comm(comm, rank);
    uint64_t sum = 1, *sums = calloc((size_t)n, sizeof(*sums));
    (void)arg;

    RCHECK(in && fast && slow && sums);
    for (int dt = 0; dt < COLL_NUM_DTYPES; dt++) {
        size_t esz = coll__dtype_size((coll_dtype_t)dt);
        for (int op = 0; op < COLL_NUM_OPS; op++) {
            for (size_t k = 0; k < COLL_ARRAY_SIZE(sizes); k++) {
                size_t count = sizes[k] / esz;
                uint64_t before = coll__flat_calls(comm);
                for (size_t i = 0; i < count; i++)
                    put_value((coll_dtype_t)dt, in, i, small_value((coll_op_t)op, rank, i));
                RCALL(coll_allreduce(in, fast, count, (coll_dtype_t)dt, (coll_op_t)op, comm));
                RCHECK(coll__flat_calls(comm) == before + 1);
                RCALL(coll_allreduce(in, slow, count, (coll_dtype_t)dt, (coll_op_t)op, gen));
                RCHECK(memcmp(fast, slow, count * esz) == 0);
                RCALL(coll_allreduce(in, in, count, (coll_dtype_t)dt, (coll_op_t)op, comm));
                RCHECK(memcmp(in, slow, count * esz) == 0);
                sum = coll__hash64(fast, count * esz, sum);
            }
        }
    }
    RCALL(coll_allgather(&sum, sums, 1, COLL_UINT64, gen));
    for (int r = 0; r < n; r++)
        RCHECK(sums[r] == sum);
    RCALL(coll_comm_destroy(gen));
    free(in);
    free(fast);
    free(slow);
    free(sums);
}

static void sliced_case(int n)
{
    setenv("COLL_SHM_SLICED_BYTES", "64K", 1);
    ASSERT_EQ(run_ranks(n, rank_sliced, NULL, -1), n);
    unsetenv("COLL_SHM_SLICED_BYTES");
}

TEST(sliced_np2)
{
    sliced_case(2);
}

TEST(sliced_np3)
{
    sliced_case(3);
}

TEST(sliced_np8)
{
    sliced_case(8);
}

/* ---- large calls: all-reduce, broadcast and reduce in pieces of one slot ------------- */

/* With COLL_SHM_SLICED_BYTES=16K (slots of 16 KiB): sizes just above COLL_SHM_FLAT_BYTES,
 * around one slot, and several slots with a last piece that is small enough for the line. */
static const size_t large_sizes[] = {4097, 16383, 16384, 16385, 16384 + 4096, 3 * 16384 + 77,
                                     5 * 16384 + 4100};
#define LARGE_MAX (6 * 16384)

static void rank_large(coll_comm_t *comm, int rank, int n, void *arg)
{
    uint8_t *in = malloc(LARGE_MAX), *fast = malloc(LARGE_MAX), *slow = malloc(LARGE_MAX);
    uint8_t *red = malloc(LARGE_MAX);
    coll_comm_t *gen = general_comm(comm, rank);
    uint64_t sum = 1, *sums = calloc((size_t)n, sizeof(*sums));
    (void)arg;

    RCHECK(in && fast && slow && red && sums);
    for (int dt = 0; dt < COLL_NUM_DTYPES; dt++) {
        size_t esz = coll__dtype_size((coll_dtype_t)dt);
        for (int op = 0; op < COLL_NUM_OPS; op++) {
            for (size_t k = 0; k < COLL_ARRAY_SIZE(large_sizes); k++) {
                size_t count = large_sizes[k] / esz, bytes = count * esz;
                int root = (int)(k + (size_t)op) % n;
                /* one rank: the general path runs every call above COLL_SHM_FLAT_BYTES */
                const uint64_t per_call = n > 1 || bytes <= 4096;
                uint64_t before = coll__flat_calls(comm);
                for (size_t i = 0; i < count; i++)
                    put_value((coll_dtype_t)dt, in, i, small_value((coll_op_t)op, rank, i));
                memset(fast, 0x5a, bytes);
                RCALL(coll_allreduce(in, fast, count, (coll_dtype_t)dt, (coll_op_t)op, comm));
                RCHECK(coll__flat_calls(comm) == before + per_call);
                RCALL(coll_allreduce(in, slow, count, (coll_dtype_t)dt, (coll_op_t)op, gen));
                if (memcmp(fast, slow, bytes) != 0)
                    fprintf(stderr, "# rank %d: %s %s %zu bytes differs from the general path\n",
                            rank, coll__dtype_name((coll_dtype_t)dt),
                            coll__op_name((coll_op_t)op), bytes);
                RCHECK(memcmp(fast, slow, bytes) == 0);
                /* reduce to a root: out of place, then in place at the root */
                memset(red, 0xa5, bytes);
                RCALL(coll_reduce(in, red, count, (coll_dtype_t)dt, (coll_op_t)op, root, comm));
                RCHECK(rank != root || memcmp(red, slow, bytes) == 0);
                RCHECK(rank == root || red[0] == 0xa5); /* nothing written off the root */
                memcpy(red, in, bytes);
                RCALL(coll_reduce(red, red, count, (coll_dtype_t)dt, (coll_op_t)op, root, comm));
                RCHECK(rank != root || memcmp(red, slow, bytes) == 0);
                /* broadcast of the root's result, out of place and in place */
                memset(red, rank == root ? 0 : 0x33, bytes);
                if (rank == root)
                    memcpy(red, slow, bytes);
                RCALL(coll_broadcast(rank == root ? slow : NULL, red, count,
                                     (coll_dtype_t)dt, root, comm));
                RCHECK(memcmp(red, slow, bytes) == 0);
                if (rank != root)
                    memset(red, 0x33, bytes);
                RCALL(coll_broadcast(red, red, count, (coll_dtype_t)dt, root, comm));
                RCHECK(memcmp(red, slow, bytes) == 0);
                /* in place all-reduce */
                RCALL(coll_allreduce(in, in, count, (coll_dtype_t)dt, (coll_op_t)op, comm));
                RCHECK(memcmp(in, slow, bytes) == 0);
                RCHECK(coll__flat_calls(comm) == before + 6 * per_call);
                sum = coll__hash64(fast, bytes, sum);
            }
        }
    }
    RCHECK(coll__flat_calls(gen) == 0);
    RCALL(coll_allgather(&sum, sums, 1, COLL_UINT64, gen));
    for (int r = 0; r < n; r++)
        RCHECK(sums[r] == sum);
    RCALL(coll_comm_destroy(gen));
    free(in);
    free(fast);
    free(slow);
    free(red);
    free(sums);
}

#define LARGE_CASE(n)                                                                   \
    TEST(large_np##n)                                                                   \
    {                                                                                   \
        setenv("COLL_SHM_SLICED_BYTES", "16K", 1);                                      \
        ASSERT_EQ(run_ranks(n, rank_large, NULL, -1), n);                               \
        unsetenv("COLL_SHM_SLICED_BYTES");                                              \
    }
LARGE_CASE(1)
LARGE_CASE(2)
LARGE_CASE(3)
LARGE_CASE(5)
LARGE_CASE(8)

/* The same calls with copies into recvbuf streaming past the cache, as large calls make
 * them (a threshold of 64 KiB puts every size above 8 KiB on that path at 3 ranks). */
TEST(large_streaming_np3)
{
    setenv("COLL_SHM_SLICED_BYTES", "16K", 1);
    setenv("COLL_REDUCE_STREAM_BYTES", "64K", 1);
    ASSERT_EQ(run_ranks(3, rank_large, NULL, -1), 3);
    unsetenv("COLL_REDUCE_STREAM_BYTES");
    unsetenv("COLL_SHM_SLICED_BYTES");
}

/* A rank killed at a random moment while all run large all-reduces, broadcasts and reduces
 * (many pieces each): every survivor fails with COLL_REMOTE_ERROR, long before the timeout. */
static void *killer(void *arg)
{
    struct timespec ts = {0, (long)(intptr_t)arg * 1000000L};
    nanosleep(&ts, NULL);
    raise(SIGKILL);
    return NULL;
}

static void rank_large_killed(coll_comm_t *comm, int rank, int n, void *arg)
{
    const size_t count = 256 << 10; /* 1 MiB of float: 64 pieces of 16 KiB */
    float *x = calloc(count, sizeof(*x));
    coll_status_t st = COLL_SUCCESS;
    pthread_t t;
    (void)arg;

    RCHECK(x);
    RCALL(coll_allreduce(x, x, count, COLL_FLOAT32, COLL_SUM, comm));
    if (rank == n - 1)
        RCHECK(pthread_create(&t, NULL, killer, (void *)(intptr_t)(50 + 37 * rank)) == 0);
    for (int i = 0; st == COLL_SUCCESS; i++) {
        switch (i % 3) {
        case 0: st = coll_allreduce(x, x, count, COLL_FLOAT32, COLL_SUM, comm); break;
        case 1: st = coll_broadcast(x, x, count, COLL_FLOAT32, i % n, comm); break;
        default: st = coll_reduce(x, x, count, COLL_FLOAT32, COLL_MAX, i % n, comm); break;
        }
    }
    if (st != COLL_REMOTE_ERROR)
        fprintf(stderr, "# rank %d: got %s: %s\n", rank, coll_status_string(st),
                coll_last_error(comm));
    RCHECK(st == COLL_REMOTE_ERROR);
    RCHECK(coll_allreduce(x, x, count, COLL_FLOAT32, COLL_SUM, comm) == st);
    free(x);
}

TEST(large_peer_killed_np4)
{
    setenv("COLL_SHM_SLICED_BYTES", "16K", 1);
    setenv("COLL_TIMEOUT_MS", "60000", 1); /* a dead peer is seen by its pidfd, not this */
    ASSERT_EQ(run_ranks(4, rank_large_killed, NULL, 3), 3);
    unsetenv("COLL_TIMEOUT_MS");
    unsetenv("COLL_SHM_SLICED_BYTES");
}

/* ---- slots reused over many calls; non-blocking general calls in between ---------- */

static void rank_reuse(coll_comm_t *comm, int rank, int n, void *arg)
{
    const int iters = *(const int *)arg;

    for (int it = 0; it < iters; it++) {
        int64_t v = (int64_t)it * (rank + 1), w[500];
        int root = it % n;
        size_t count = it % 3 == 0 ? 500 : 1; /* the line and the slot, in turn */

        for (size_t i = 0; i < count; i++)
            w[i] = v + (int64_t)i;
        RCALL(coll_allreduce(w, w, count, COLL_INT64, COLL_SUM, comm));
        RCHECK(w[0] == (int64_t)it * n * (n + 1) / 2 && w[count - 1] == w[0] + (int64_t)(n * (count - 1)));
        if (rank == root)
            v = it;
        RCALL(coll_broadcast(&v, &v, 1, COLL_INT64, root, comm));
        RCHECK(v == it);
        if (it % 5 == 0) {
            int64_t s = rank, r = -1;
            RCALL(coll_reduce(&s, &r, 1, COLL_INT64, COLL_SUM, root, comm));
            RCHECK(rank != root || r == (int64_t)n * (n - 1) / 2);
        }
    }
    RCHECK(coll__flat_calls(comm) >= (uint64_t)(2 * iters));
}

TEST(slot_reuse_np3)
{
    int iters = 3000;
    ASSERT_EQ(run_ranks(3, rank_reuse, &iters, -1), 3);
}

TEST(slot_reuse_np8)
{
    int iters = 800;
    ASSERT_EQ(run_ranks(8, rank_reuse, &iters, -1), 8);
}

/* Reduces and broadcasts only, in runs of 40 alike: a reduce's leaves and a broadcast's root
 * write and go on, so they run as far ahead of the reading ranks as the segment lets them.
 * The readers sometimes sleep, so every line and slot is rewritten while some rank is still
 * behind; each call's values are its own, so a slot rewritten before its reader got to it
 * shows as a wrong result. Sizes take the line, a small slot and a big slot in turn. */
static void rank_run_ahead(coll_comm_t *comm, int rank, int n, void *arg)
{
    const int iters = *(const int *)arg;
    const size_t counts[] = {1, 300, 3000}; /* x 8 bytes: line, small slot, sliced piece */
    int64_t *v = malloc(3000 * sizeof(*v)), *r = malloc(3000 * sizeof(*r));

    RCHECK(v && r);
    for (int it = 0; it < iters; it++) {
        const int root = (it / 80) % n;
        const size_t count = counts[(it / 3) % 3];
        const bool reduce = (it / 40) % 2 == 0;

        if (reduce) {
            if (rank == root && it % 13 == 0)
                usleep(it % 3 ? 50 : 2000);
            for (size_t i = 0; i < count; i++)
                v[i] = (int64_t)it * 1000003 + (int64_t)rank * 101 + (int64_t)i;
            RCALL(coll_reduce(v, r, count, COLL_INT64, COLL_SUM, root, comm));
            if (rank == root)
                for (size_t i = 0; i < count; i += count / 3 + 1)
                    RCHECK(r[i] == n * ((int64_t)it * 1000003 + (int64_t)i) +
                                       101 * (int64_t)n * (n - 1) / 2);
            continue;
        }
        if (rank != root && it % 11 == rank)
            usleep(it % 2 ? 50 : 2000);
        for (size_t i = 0; i < count; i++)
            r[i] = rank == root ? (int64_t)it * 7 + (int64_t)i : -1;
        RCALL(coll_broadcast(r, r, count, COLL_INT64, root, comm));
        RCHECK(r[0] == (int64_t)it * 7 && r[count - 1] == (int64_t)it * 7 + (int64_t)count - 1);
    }
    RCHECK(coll__flat_calls(comm) == (uint64_t)iters);
    free(v);
    free(r);
}

TEST(run_ahead_np4)
{
    int iters = 1500;
    setenv("COLL_SHM_SLICED_BYTES", "16K", 1);
    ASSERT_EQ(run_ranks(4, rank_run_ahead, &iters, -1), 4);
    unsetenv("COLL_SHM_SLICED_BYTES");
}

/* The root of a broadcast settles it at its next call (flat_settle): it waits there for the
 * peers' lines of the broadcast, and a wait that stalls looks up what the peers logged. The
 * lookup must compare the peers' broadcast with the broadcast, not with the call that
 * settles it: a peer slower than the stall check (20 ms) is late, not in disagreement. */
static void rank_settle_late_peer(coll_comm_t *comm, int rank, int n, void *arg)
{
    int32_t b = rank == 0 ? 77 : -1, s = rank + 1, t = 0;
    float x[64];
    (void)arg;

    for (int i = 0; i < 64; i++)
        x[i] = (float)rank;
    if (rank == n - 1)
        usleep(150000);
    RCALL(coll_broadcast(&b, &b, 1, COLL_INT32, 0, comm));
    RCHECK(b == 77);
    RCALL(coll_allreduce(x, x, 64, COLL_FLOAT32, COLL_SUM, comm));
    RCHECK(x[0] == (float)(n * (n - 1) / 2));
    RCALL(coll_allreduce(&s, &t, 1, COLL_INT32, COLL_SUM, comm));
    RCHECK(t == n * (n + 1) / 2);
}

TEST(broadcast_root_settles_with_a_late_peer_np3)
{
    ASSERT_EQ(run_ranks(3, rank_settle_late_peer, NULL, -1), 3);
}

static void rank_mixed(coll_comm_t *comm, int rank, int n, void *arg)
{
    const size_t big = 100000;
    float *x = malloc(big * sizeof(*x));
    (void)arg;

    RCHECK(x);
    for (int it = 0; it < 30; it++) {
        coll_request_t *r1, *r2;
        int32_t s = rank + it, b = rank == it % n ? 1000 + it : -1, t = 0;
        uint64_t before = coll__flat_calls(comm);
        int done = 0;

        for (size_t i = 0; i < big; i++)
            x[i] = (float)(rank + 1);
        RCALL(coll_iallreduce(x, x, big, COLL_FLOAT32, COLL_SUM, comm, &r1));
        /* the fast call runs after the request issued before it, whatever the request */
        RCALL(coll_allreduce(&s, &t, 1, COLL_INT32, COLL_SUM, comm));
        RCHECK(t == n * (n - 1) / 2 + n * it);
        RCHECK(x[0] == (float)(n * (n + 1) / 2) && x[big - 1] == x[0]);
        RCALL(coll_ibroadcast(&b, &b, 1, COLL_INT32, it % n, comm, &r2));
        if (it % 2)
            RCALL(coll_test(r2, &done));
        RCALL(coll_barrier(comm));
        /* the requests took the fast path too (the choice of a path does not depend on the
         * call's form), and the blocking barrier ran after both */
        RCHECK(coll__flat_calls(comm) == before + 4);
        if (!done)
            RCALL(coll_wait(r2));
        RCHECK(b == 1000 + it);
        RCALL(coll_wait(r1));
    }
    free(x);
}

TEST(mixed_with_nonblocking_np4)
{
    ASSERT_EQ(run_ranks(4, rank_mixed, NULL, -1), 4);
}

/* A peer that finishes a fast-path call and goes on to one of the general path (a grouped
 * send/recv) leaves that call's message in this rank's ring while this rank, asleep in the
 * fast-path call, has yet to read the peer's word again: not a stray. Rank 1 comes to the
 * all-reduce first and sleeps in it; rank 0 comes 30 ms later. The pause holds rank 1
 * between its read of rank 0's word (short) and its look at its ring, while rank 0 ends
 * the all-reduce and sends. */
static void rank_flat_then_p2p(coll_comm_t *comm, int rank, int n, void *arg)
{
    int32_t s = rank + 1, t = 0, out = 100 + rank, in = -1;
    (void)arg;
    (void)n;

    /* the general path's ring between the two up, so that the message lands in it */
    for (int i = 0; i < 2; i++) {
        RCALL(coll_group_start());
        RCALL(coll_send(&out, 1, COLL_INT32, 1 - rank, comm));
        RCALL(coll_recv(&in, 1, COLL_INT32, 1 - rank, comm));
        RCALL(coll_group_end());
        RCALL(coll_allreduce(&s, &t, 1, COLL_INT32, COLL_SUM, comm));
    }
    if (rank == 1)
        coll__flat_test_pause_deep(60000);
    else
        usleep(30000);
    RCALL(coll_allreduce(&s, &t, 1, COLL_INT32, COLL_SUM, comm));
    RCHECK(t == 3);
    RCALL(coll_group_start());
    RCALL(coll_send(&out, 1, COLL_INT32, 1 - rank, comm));
    RCALL(coll_recv(&in, 1, COLL_INT32, 1 - rank, comm));
    RCALL(coll_group_end());
    RCHECK(in == 101 - rank);
}

TEST(general_message_after_a_fast_call_np2)
{
    ASSERT_EQ(run_ranks(2, rank_flat_then_p2p, NULL, -1), 2);
}

/* ---- mismatched calls ------------------------------------------------------------- */

enum { MIS_COUNT, MIS_DTYPE, MIS_COLL, MIS_PATH };

static void rank_mismatch(coll_comm_t *comm, int rank, int n, void *arg)
{
    const int how = *(const int *)arg;
    int32_t buf[4000] = {0};
    coll_status_t st;
    (void)n;

    RCALL(coll_allreduce(buf, buf, 3, COLL_INT32, COLL_SUM, comm));
    if (how == MIS_PATH) /* every channel up, so the general path's messages can arrive */
        RCALL(coll_allreduce(buf, buf, 4000, COLL_INT32, COLL_SUM, comm));
    switch (how) {
    case MIS_COUNT:
        st = coll_allreduce(buf, buf, rank == 0 ? 2 : 3, COLL_INT32, COLL_SUM, comm);
        break;
    case MIS_DTYPE:
        st = coll_allreduce(buf, buf, 2, rank == 0 ? COLL_INT32 : COLL_FLOAT32, COLL_SUM, comm);
        break;
    case MIS_COLL:
        st = rank == 0 ? coll_barrier(comm)
                       : coll_allreduce(buf, buf, 2, COLL_INT32, COLL_SUM, comm);
        break;
    default: /* rank 0 takes the general path (over COLL_SHM_FLAT_BYTES), the others not */
        st = coll_allreduce(buf, buf, rank == 0 ? 4000 : 10, COLL_INT32, COLL_SUM, comm);
        break;
    }
    if (st != COLL_REMOTE_ERROR)
        fprintf(stderr, "# rank %d: got %s: %s\n", rank, coll_status_string(st),
                coll_last_error(comm));
    RCHECK(st == COLL_REMOTE_ERROR);
    if (how != MIS_PATH)
        RCHECK(strstr(coll_last_error(comm), "where this rank called") != NULL);
    /* sticky: the comm stays failed with the same status */
    RCHECK(coll_allreduce(buf, buf, 1, COLL_INT32, COLL_SUM, comm) == st);
    RCHECK(coll_barrier(comm) == st);
}

static void mismatch_case(int n, int how)
{
    setenv("COLL_TIMEOUT_MS", "60000", 1); /* an error long before it */
    ASSERT_EQ(run_ranks(n, rank_mismatch, &how, -1), n);
    unsetenv("COLL_TIMEOUT_MS");
}

TEST(mismatch_count_np3)
{
    mismatch_case(3, MIS_COUNT);
}

TEST(mismatch_dtype_np2)
{
    mismatch_case(2, MIS_DTYPE);
}

TEST(mismatch_collective_np2)
{
    mismatch_case(2, MIS_COLL);
}

TEST(mismatch_fast_and_general_np2)
{
    mismatch_case(2, MIS_PATH);
}

/* ---- faults: killed, stopped, hostile, aborted ------------------------------------- */

static void rank_fault(coll_comm_t *comm, int rank, int n, void *arg)
{
    const int sig = *(const int *)arg;
    coll_status_t st = COLL_SUCCESS;
    int32_t v = 1;

    for (int i = 0; i < 10; i++)
        RCALL(coll_allreduce(&v, &v, 1, COLL_INT32, COLL_MAX, comm));
    if (rank == n - 1) {
        /* the others are asleep in the fast path by now */
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
        raise(sig);
        _exit(9);
    }
    for (int i = 0; i < 5 && st == COLL_SUCCESS; i++)
        st = coll_allreduce(&v, &v, 1, COLL_INT32, COLL_MAX, comm);
    if (sig == SIGKILL ? st != COLL_REMOTE_ERROR : st != COLL_REMOTE_ERROR && st != COLL_TIMEOUT)
        fprintf(stderr, "# rank %d: got %s: %s\n", rank, coll_status_string(st),
                coll_last_error(comm));
    RCHECK(sig == SIGKILL ? st == COLL_REMOTE_ERROR : st == COLL_REMOTE_ERROR || st == COLL_TIMEOUT);
    RCHECK(coll_allreduce(&v, &v, 1, COLL_INT32, COLL_MAX, comm) == st);
}

TEST(peer_killed_while_others_wait_np4)
{
    int sig = SIGKILL;
    setenv("COLL_TIMEOUT_MS", "60000", 1); /* a dead peer is seen by its pidfd, not this */
    ASSERT_EQ(run_ranks(4, rank_fault, &sig, 3), 3);
}

TEST(peer_stopped_past_timeout_np3)
{
    int sig = SIGSTOP;
    setenv("COLL_TIMEOUT_MS", "1000", 1);
    ASSERT_EQ(run_ranks(3, rank_fault, &sig, 2), 2);
}

#define HOSTILE_LARGE 0x100

static void rank_hostile(coll_comm_t *comm, int rank, int n, void *arg)
{
    const int how = *(const int *)arg & 0xff;
    /* large: the call after the corruption is one of many pieces (COLL_SHM_SLICED_BYTES) */
    const size_t count = *(const int *)arg & HOSTILE_LARGE ? 40000 : 100;
    int64_t *v = calloc(count, sizeof(*v));
    coll_status_t st;

    RCHECK(v);
    for (int i = 0; i < 3; i++)
        RCALL(coll_allreduce(v, v, count, COLL_INT64, COLL_SUM, comm));
    if (rank == n - 1) {
        coll__flat_test_corrupt(comm, how);
        for (;;)
            pause(); /* killed by the parent */
    }
    st = coll_allreduce(v, v, count, COLL_INT64, COLL_SUM, comm);
    if (st != COLL_REMOTE_ERROR)
        fprintf(stderr, "# rank %d: got %s: %s\n", rank, coll_status_string(st),
                coll_last_error(comm));
    RCHECK(st == COLL_REMOTE_ERROR);
    free(v);
}

static void hostile_case(int how)
{
    setenv("COLL_TIMEOUT_MS", "60000", 1);
    ASSERT_EQ(run_ranks(3, rank_hostile, &how, 2), 2);
    setenv("COLL_SHM_SLICED_BYTES", "16K", 1);
    how |= HOSTILE_LARGE;
    ASSERT_EQ(run_ranks(3, rank_hostile, &how, 2), 2);
    unsetenv("COLL_SHM_SLICED_BYTES");
}

TEST(hostile_junk_in_segment)
{
    hostile_case(COLL_FLAT_CORRUPT_JUNK);
}

TEST(hostile_count_in_line)
{
    hostile_case(COLL_FLAT_CORRUPT_COUNT);
}

TEST(hostile_abort_word)
{
    hostile_case(COLL_FLAT_CORRUPT_ABORT);
}

static void *aborter(void *arg)
{
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
    coll_comm_abort(arg);
    return NULL;
}

/* Rank 0 waits in the fast path for rank 1, which is late; another thread aborts rank 0's
 * comm: rank 0 returns, and rank 1 learns of it when it comes. */
static void rank_abort(coll_comm_t *comm, int rank, int n, void *arg)
{
    int32_t v = 1;
    pthread_t t;
    (void)n;
    (void)arg;

    RCALL(coll_allreduce(&v, &v, 1, COLL_INT32, COLL_SUM, comm));
    if (rank == 0) {
        RCHECK(pthread_create(&t, NULL, aborter, comm) == 0);
        RCHECK(coll_allreduce(&v, &v, 1, COLL_INT32, COLL_SUM, comm) == COLL_REMOTE_ERROR);
        pthread_join(t, NULL);
    } else {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
        RCHECK(coll_allreduce(&v, &v, 1, COLL_INT32, COLL_SUM, comm) == COLL_REMOTE_ERROR);
        RCHECK(strstr(coll_last_error(comm), "rank 0") != NULL);
    }
}

TEST(abort_while_blocked_np2)
{
    setenv("COLL_TIMEOUT_MS", "60000", 1);
    ASSERT_EQ(run_ranks(2, rank_abort, NULL, -1), 2);
}

/* ---- the knobs ------------------------------------------------------------------- */

enum { KNOB_OFF, KNOB_RING, KNOB_FORCED_TCP, KNOB_FORCED_BIG };

static void rank_knobs(coll_comm_t *comm, int rank, int n, void *arg)
{
    const int how = *(const int *)arg;
    int32_t v[2000] = {0};
    coll_status_t st;
    (void)n;

    switch (how) {
    case KNOB_OFF:
        RCALL(coll_allreduce(v, v, 1, COLL_INT32, COLL_SUM, comm));
        RCALL(coll_barrier(comm));
        RCHECK(coll__flat_calls(comm) == 0);
        break;
    case KNOB_RING: /* all-reduce on the ring; barrier, which ring cannot run, still fast */
        RCALL(coll_allreduce(v, v, 1, COLL_INT32, COLL_SUM, comm));
        RCHECK(coll__flat_calls(comm) == 0);
        RCALL(coll_barrier(comm));
        RCHECK(coll__flat_calls(comm) == 1);
        break;
    case KNOB_FORCED_TCP:
        st = coll_allreduce(v, v, 1, COLL_INT32, COLL_SUM, comm);
        RCHECK(st == COLL_INVALID_ARGUMENT);
        RCHECK(strstr(coll_last_error(comm), "'flat'") != NULL);
        break;
    default: {
        /* with COLL_SHM_SLICED_BYTES=0 nothing of the fast path runs more than
         * COLL_SHM_FLAT_BYTES (4K) */
        size_t big = 4096 / sizeof(int32_t) + 1;
        int32_t *w = calloc(big, sizeof(*w));
        RCHECK(w);
        RCALL(coll_allreduce(v, v, 10, COLL_INT32, COLL_SUM, comm));
        RCHECK(coll__flat_calls(comm) == 1);
        st = coll_allreduce(w, w, big, COLL_INT32, COLL_SUM, comm);
        RCHECK(st == COLL_INVALID_ARGUMENT);
        free(w);
        break;
    }
    }
}

TEST(knobs_off_ring_forced)
{
    int how;

    setenv("COLL_SHM_FLAT", "0", 1);
    how = KNOB_OFF;
    ASSERT_EQ(run_ranks(2, rank_knobs, &how, -1), 2);
    unsetenv("COLL_SHM_FLAT");
    setenv("COLL_ALGO", "ring", 1);
    how = KNOB_RING;
    ASSERT_EQ(run_ranks(2, rank_knobs, &how, -1), 2);
    setenv("COLL_ALGO", "allreduce=ring", 1);
    ASSERT_EQ(run_ranks(2, rank_knobs, &how, -1), 2);
    setenv("COLL_ALGO", "allreduce=flat", 1);
    setenv("COLL_TRANSPORT", "tcp", 1);
    how = KNOB_FORCED_TCP;
    ASSERT_EQ(run_ranks(2, rank_knobs, &how, -1), 2);
    unsetenv("COLL_TRANSPORT");
    how = KNOB_FORCED_BIG;
    setenv("COLL_SHM_SLICED_BYTES", "0", 1);
    ASSERT_EQ(run_ranks(2, rank_knobs, &how, -1), 2);
    unsetenv("COLL_SHM_SLICED_BYTES");
    unsetenv("COLL_ALGO");
}

/* ---- COLL_TRACE: one record per fast call ------------------------------------------- */

static void rank_trace(coll_comm_t *comm, int rank, int n, void *arg)
{
    int32_t v = rank;
    (void)n;
    (void)arg;
    for (int i = 0; i < 5; i++)
        RCALL(coll_allreduce(&v, &v, 1, COLL_INT32, COLL_SUM, comm));
    RCALL(coll_barrier(comm));
}

static int count_in_file(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char *text;
    long len;
    int k = 0;

    ASSERT(f);
    ASSERT(fseek(f, 0, SEEK_END) == 0);
    len = ftell(f);
    ASSERT(len >= 0 && fseek(f, 0, SEEK_SET) == 0);
    text = calloc(1, (size_t)len + 1);
    ASSERT(text && fread(text, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    for (const char *p = text; (p = strstr(p, needle)); p++)
        k++;
    free(text);
    return k;
}

TEST(trace_records_np2)
{
    char pat[64], path[80];

    snprintf(pat, sizeof(pat), "/tmp/coll-flat-trace-%d-%%r.json", (int)getpid());
    setenv("COLL_TRACE", pat, 1);
    ASSERT_EQ(run_ranks(2, rank_trace, NULL, -1), 2);
    unsetenv("COLL_TRACE");
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof(path), "/tmp/coll-flat-trace-%d-%d.json", (int)getpid(), r);
        ASSERT_EQ(count_in_file(path, "\"allreduce flat\""), 5);
        ASSERT_EQ(count_in_file(path, "\"barrier flat\""), 1);
        unlink(path);
    }
}

/* ---- rooted small calls of an oversubscribed host take the general path ------------- */

static void rank_rooted(coll_comm_t *comm, int rank, int n, void *arg)
{
    const bool forced = arg != NULL;
    int64_t v[1024], r[1024];
    uint64_t before;

    for (int i = 0; i < 1024; i++)
        v[i] = rank + i;
    for (int it = 0; it < 20; it++) {
        const int root = it % n;
        const size_t count = it % 2 ? 4 : 512; /* 32 B and 4 KiB: both small */

        before = coll__flat_calls(comm);
        RCALL(coll_reduce(v, r, count, COLL_INT64, COLL_SUM, root, comm));
        RCHECK(rank != root || (r[0] == (int64_t)n * (n - 1) / 2 &&
                                r[count - 1] == (int64_t)n * (n - 1) / 2 + n * (int64_t)(count - 1)));
        for (size_t i = 0; i < count; i++)
            r[i] = rank == root ? it + (int64_t)i : -1;
        RCALL(coll_broadcast(r, r, count, COLL_INT64, root, comm));
        RCHECK(r[0] == it && r[count - 1] == it + (int64_t)count - 1);
        /* forced by COLL_ALGO: the fast path; else the general path, every rank alike */
        RCHECK(coll__flat_calls(comm) == before + (forced ? 2 : 0));
        /* all-reduce stays on the fast path, and so does a reduce above COLL_SHM_FLAT_BYTES */
        RCALL(coll_allreduce(v, r, 4, COLL_INT64, COLL_SUM, comm));
        RCALL(coll_reduce(v, r, 1024, COLL_INT64, COLL_SUM, root, comm));
        RCHECK(coll__flat_calls(comm) == before + (forced ? 4 : 2));
    }
}

TEST(rooted_small_general_oversubscribed_np4)
{
    setenv("COLL_HOST_CPUS", "2", 1);
    ASSERT_EQ(run_ranks(4, rank_rooted, NULL, -1), 4);
    setenv("COLL_ALGO", "reduce=flat,broadcast=flat", 1);
    ASSERT_EQ(run_ranks(4, rank_rooted, "forced", -1), 4);
    unsetenv("COLL_ALGO");
    setenv("COLL_HOST_CPUS", "64", 1);
}

int main(int argc, char **argv)
{
    /* a CPU per rank, as the tests above count calls on the fast path; the case just above
     * sets fewer */
    setenv("COLL_HOST_CPUS", "64", 0);
    return harness_main(argc, argv);
}
