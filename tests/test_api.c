/*
 * test_api.c - the public API on one rank: argument checking (every bad argument is a status
 * with a message naming it), statuses, the environment, abort, and every dtype x op through
 * the executor.
 */
#include "harness.h"

#include "coll.h"
#include "algo/cost.h"
#include "core/bootstrap.h"
#include "core/check.h"
#include "core/exec.h"
#include "path/path.h"

#include <stdint.h>
#include <sys/resource.h>

static coll_comm_t *one_rank_comm(void)
{
    coll_unique_id_t id;
    coll_comm_t *comm = NULL;
    ASSERT_EQ(coll_get_unique_id(&id), COLL_SUCCESS);
    ASSERT_EQ(coll_comm_init(&comm, 1, &id, 0), COLL_SUCCESS);
    ASSERT(comm != NULL);
    return comm;
}

/* Every public call that takes a comm, on handle h: each must refuse it with
 * COLL_INVALID_ARGUMENT and say why, touching nothing behind it. */
static void refuse_everywhere(coll_comm_t *h, const char *why)
{
    int buf[8] = {0}, ibuf[8] = {0}, rank = -1, size = -1;
    size_t counts[1] = {1}, displs[1] = {0};
    coll_request_t *req = NULL;
    coll_comm_t *newcomm = NULL;
    coll_quant_feedback_t *fb = NULL;
    coll_status_t async = COLL_SUCCESS;
    uint64_t bytes = 0;
    int exclude[1] = {0};
    coll_unique_id_t gid = {{0}};
    int n = 0;

#define REFUSED(call)                                                                       \
    do {                                                                                    \
        ASSERT_MSG((call) == COLL_INVALID_ARGUMENT, "%s on a %s comm", #call, why);         \
        ASSERT_STR_CONTAINS(coll_last_error(NULL), "not a live communicator");             \
        n++;                                                                                \
    } while (0)
    REFUSED(coll_allreduce(buf, ibuf, 1, COLL_INT32, COLL_SUM, h));
    REFUSED(coll_broadcast(buf, ibuf, 1, COLL_INT32, 0, h));
    REFUSED(coll_reduce(buf, ibuf, 1, COLL_INT32, COLL_SUM, 0, h));
    REFUSED(coll_allgather(buf, ibuf, 1, COLL_INT32, h));
    REFUSED(coll_reduce_scatter(buf, ibuf, 1, COLL_INT32, COLL_SUM, h));
    REFUSED(coll_alltoall(buf, ibuf, 1, COLL_INT32, h));
    REFUSED(coll_alltoallv(buf, counts, displs, ibuf, counts, displs, COLL_INT32, h));
    REFUSED(coll_gather(buf, ibuf, 1, COLL_INT32, 0, h));
    REFUSED(coll_scatter(buf, ibuf, 1, COLL_INT32, 0, h));
    REFUSED(coll_barrier(h));
    REFUSED(coll_send(buf, 1, COLL_INT32, 0, h));
    REFUSED(coll_recv(ibuf, 1, COLL_INT32, 0, h));
    REFUSED(coll_iallreduce(buf, ibuf, 1, COLL_INT32, COLL_SUM, h, &req));
    REFUSED(coll_ibroadcast(buf, ibuf, 1, COLL_INT32, 0, h, &req));
    REFUSED(coll_ireduce(buf, ibuf, 1, COLL_INT32, COLL_SUM, 0, h, &req));
    REFUSED(coll_iallgather(buf, ibuf, 1, COLL_INT32, h, &req));
    REFUSED(coll_ireduce_scatter(buf, ibuf, 1, COLL_INT32, COLL_SUM, h, &req));
    REFUSED(coll_ialltoall(buf, ibuf, 1, COLL_INT32, h, &req));
    REFUSED(coll_igather(buf, ibuf, 1, COLL_INT32, 0, h, &req));
    REFUSED(coll_iscatter(buf, ibuf, 1, COLL_INT32, 0, h, &req));
    REFUSED(coll_ibarrier(h, &req));
    REFUSED(coll_isend(buf, 1, COLL_INT32, 0, h, &req));
    REFUSED(coll_irecv(ibuf, 1, COLL_INT32, 0, h, &req));
    ASSERT(req == NULL);
    REFUSED(coll_allreduce_stream(buf, ibuf, 1, COLL_INT32, COLL_SUM, h, NULL));
    REFUSED(coll_broadcast_stream(buf, ibuf, 1, COLL_INT32, 0, h, NULL));
    REFUSED(coll_reduce_stream(buf, ibuf, 1, COLL_INT32, COLL_SUM, 0, h, NULL));
    REFUSED(coll_allgather_stream(buf, ibuf, 1, COLL_INT32, h, NULL));
    REFUSED(coll_reduce_scatter_stream(buf, ibuf, 1, COLL_INT32, COLL_SUM, h, NULL));
    REFUSED(coll_alltoall_stream(buf, ibuf, 1, COLL_INT32, h, NULL));
    REFUSED(coll_send_stream(buf, 1, COLL_INT32, 0, h, NULL));
    REFUSED(coll_recv_stream(ibuf, 1, COLL_INT32, 0, h, NULL));
    REFUSED(coll_comm_get_async_error(h, &async));
    REFUSED(coll_allreduce_quantized(buf, ibuf, 1, COLL_FLOAT32, COLL_SUM, NULL, NULL, h));
    REFUSED(coll_quant_feedback_create(h, 8, &fb));
    ASSERT(fb == NULL);
    REFUSED(coll_comm_bytes_sent(h, &bytes));
    REFUSED(coll_comm_split(h, 0, 0, &newcomm));
    REFUSED(coll_comm_shrink(h, exclude, 1, &newcomm));
    ASSERT(newcomm == NULL);
    newcomm = h;
    REFUSED(coll_comm_grow(h, 4, &gid, &newcomm));
    ASSERT(newcomm == NULL);
    REFUSED(coll_comm_grow_id(h, &gid));
    REFUSED(coll_comm_rank(h, &rank));
    REFUSED(coll_comm_size(h, &size));
    ASSERT_EQ(rank, -1);
    ASSERT_EQ(size, -1);
    REFUSED(coll_comm_abort(h));
    REFUSED(coll_comm_destroy(h));
    /* inside a group the refusal comes at once too, and the group ends with it */
    ASSERT_EQ(coll_group_start(), COLL_SUCCESS);
    REFUSED(coll_allreduce(buf, ibuf, 1, COLL_INT32, COLL_SUM, h));
    ASSERT_EQ(coll_group_end(), COLL_INVALID_ARGUMENT);
    /* coll_last_error of such a handle is this thread's message, which says so */
    ASSERT_STR_CONTAINS(coll_last_error(h), "not a live communicator");
#undef REFUSED
    ASSERT_EQ(n, 44);
}

TEST(destroyed_and_never_made_comms_are_refused)
{
    coll_comm_t *comm = one_rank_comm(), *live = one_rank_comm();
    int rank = -1, x = 3;
    union {
        uint8_t bytes[4096];
        uint64_t align;
    } junk;
    void *heap = malloc(4096);

    ASSERT(heap != NULL);
    ASSERT_EQ(coll_comm_destroy(comm), COLL_SUCCESS);
    refuse_everywhere(comm, "destroyed");
    /* never made: memory that merely looks allocated, zeroed or not; a number */
    memset(junk.bytes, 0xa5, sizeof(junk.bytes));
    refuse_everywhere((coll_comm_t *)(void *)junk.bytes, "garbage");
    memset(heap, 0, 4096);
    refuse_everywhere(heap, "zeroed");
    refuse_everywhere((coll_comm_t *)(uintptr_t)0x40, "wild");
    free(heap);
    /* and a live comm next to them is untouched */
    ASSERT_EQ(coll_comm_rank(live, &rank), COLL_SUCCESS);
    ASSERT_EQ(rank, 0);
    ASSERT_EQ(coll_allreduce(&x, &x, 1, COLL_INT32, COLL_SUM, live), COLL_SUCCESS);
    ASSERT_EQ(x, 3);
    ASSERT_EQ(coll_comm_destroy(NULL), COLL_SUCCESS);
    ASSERT_EQ(coll_comm_destroy(live), COLL_SUCCESS);
    ASSERT_EQ(coll_comm_destroy(live), COLL_INVALID_ARGUMENT);
}

/* More live comms than the lock-free table holds (1024): the rest are found too. */
TEST(many_live_comms_all_recognized)
{
    enum { N = 1100 };
    static coll_comm_t *comms[N];
    coll_unique_id_t id;
    int size = 0;

    struct rlimit rl;

    setenv("COLL_TRANSPORT", "tcp", 1); /* one listener per comm, nothing else */
    /* about five fds a comm */
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    ASSERT_MSG(rl.rlim_cur >= 8 * N, "RLIMIT_NOFILE %llu is too low for %d comms",
               (unsigned long long)rl.rlim_cur, N);
    for (int i = 0; i < N; i++) {
        ASSERT_EQ(coll_get_unique_id(&id), COLL_SUCCESS);
        ASSERT_EQ(coll_comm_init(&comms[i], 1, &id, 0), COLL_SUCCESS);
    }
    for (int i = 0; i < N; i++) {
        ASSERT_EQ(coll_comm_size(comms[i], &size), COLL_SUCCESS);
        ASSERT_EQ(size, 1);
    }
    for (int i = 0; i < N; i += 2)
        ASSERT_EQ(coll_comm_destroy(comms[i]), COLL_SUCCESS);
    for (int i = 0; i < N; i++)
        ASSERT_EQ(coll_comm_size(comms[i], &size), i % 2 ? COLL_SUCCESS : COLL_INVALID_ARGUMENT);
    for (int i = 1; i < N; i += 2)
        ASSERT_EQ(coll_comm_destroy(comms[i]), COLL_SUCCESS);
}

TEST(status_strings)
{
    ASSERT_STR_CONTAINS(coll_status_string(COLL_SUCCESS), "success");
    ASSERT_STR_CONTAINS(coll_status_string(COLL_TIMEOUT), "COLL_TIMEOUT_MS");
    ASSERT_STR_CONTAINS(coll_status_string((coll_status_t)99), "unknown");
    ASSERT_EQ(COLL_REMOTE_ERROR, 6);
    ASSERT_EQ(COLL_FLOAT8E5M2, 11);
    ASSERT_EQ(COLL_AVG, 4);
    int v = 0;
    ASSERT_EQ(coll_get_version(&v), COLL_SUCCESS);
    ASSERT_EQ(v, COLL_VERSION_CODE);
    ASSERT_EQ(coll_get_version(NULL), COLL_INVALID_ARGUMENT);
}

TEST(init_bad_arguments)
{
    coll_unique_id_t id;
    coll_comm_t *comm = NULL;

    ASSERT_EQ(coll_get_unique_id(NULL), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll_get_unique_id(&id), COLL_SUCCESS);
    ASSERT_EQ(coll_comm_init(NULL, 1, &id, 0), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "comm_p");
    ASSERT_EQ(coll_comm_init(&comm, 1, NULL, 0), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "id");
    ASSERT_EQ(coll_comm_init(&comm, 0, &id, 0), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "nranks");
    ASSERT_EQ(coll_comm_init(&comm, 4, &id, 4), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "rank 4");
    ASSERT_EQ(coll_comm_init(&comm, 4, &id, -1), COLL_INVALID_ARGUMENT);
    ASSERT(comm == NULL);
}

TEST(corrupted_id_rejected)
{
    coll_unique_id_t id, bad;
    coll_comm_t *comm = NULL;
    char text[COLL_UNIQUE_ID_STRLEN];
    int rejected = 0;

    ASSERT_EQ(coll_get_unique_id(&id), COLL_SUCCESS);
    ASSERT_EQ(coll_unique_id_to_string(&id, text, sizeof(text)), COLL_SUCCESS);
    ASSERT_EQ(coll_unique_id_from_string(text, &bad), COLL_SUCCESS);
    ASSERT(memcmp(&bad, &id, sizeof(id)) == 0);
    ASSERT_EQ(coll_unique_id_to_string(&id, text, 10), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll_unique_id_from_string("abc", &bad), COLL_INVALID_ARGUMENT);
    text[5] = 'z';
    ASSERT_EQ(coll_unique_id_from_string(text, &bad), COLL_INVALID_ARGUMENT);
    /* every byte that carries meaning is covered by the checksum */
    for (int i = 0; i < 64; i++) {
        bad = id;
        bad.internal[i] ^= 0x5a;
        if (coll_comm_init(&comm, 1, &bad, 0) == COLL_INVALID_ARGUMENT)
            rejected++;
        ASSERT(comm == NULL);
    }
    ASSERT_EQ(rejected, 64);
    memset(&bad, 0, sizeof(bad));
    ASSERT_EQ(coll_comm_init(&comm, 1, &bad, 0), COLL_INVALID_ARGUMENT);
}

TEST(collective_bad_arguments)
{
    coll_comm_t *comm = one_rank_comm();
    int32_t buf[64] = {0};
    coll_request_t *req = NULL;
    int done;

    ASSERT_EQ(coll_allreduce(buf, buf, 4, COLL_INT32, COLL_SUM, NULL), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "comm is NULL");
    ASSERT_EQ(coll_allreduce(NULL, buf, 4, COLL_INT32, COLL_SUM, comm), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(comm), "sendbuf");
    ASSERT_EQ(coll_allreduce(buf, NULL, 4, COLL_INT32, COLL_SUM, comm), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(comm), "recvbuf");
    ASSERT_EQ(coll_allreduce(NULL, NULL, 0, COLL_INT32, COLL_SUM, comm), COLL_SUCCESS);
    ASSERT_EQ(coll_allreduce(buf, buf, 4, (coll_dtype_t)12, COLL_SUM, comm),
              COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(comm), "dtype");
    ASSERT_EQ(coll_allreduce(buf, buf, 4, (coll_dtype_t)-1, COLL_SUM, comm),
              COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll_allreduce(buf, buf, 4, COLL_INT32, (coll_op_t)5, comm),
              COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(comm), "op");
    ASSERT_EQ(coll_allreduce(buf, buf, SIZE_MAX / 2, COLL_INT32, COLL_SUM, comm),
              COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(comm), "overflows");
    ASSERT_EQ(coll_allreduce(buf, buf + 1, 8, COLL_INT32, COLL_SUM, comm),
              COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(comm), "overlap");
    ASSERT_EQ(coll_broadcast(buf, buf, 4, COLL_INT32, 1, comm), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(comm), "root 1");
    ASSERT_EQ(coll_broadcast(buf, buf, 4, COLL_INT32, -1, comm), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll_reduce(buf, buf, 4, COLL_INT32, COLL_SUM, 7, comm), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll_reduce(buf, NULL, 4, COLL_INT32, COLL_SUM, 0, comm), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll_broadcast(NULL, buf, 4, COLL_INT32, 0, comm), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll_iallreduce(buf, buf, 4, COLL_INT32, COLL_SUM, comm, NULL),
              COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(comm), "req_p");
    ASSERT_EQ(coll_test(NULL, &done), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll_wait(NULL), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll_iallreduce(buf, buf, 4, COLL_INT32, COLL_SUM, comm, &req), COLL_SUCCESS);
    ASSERT_EQ(coll_test(req, NULL), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll_wait(req), COLL_SUCCESS);
    int r = -1, n = -1;
    ASSERT_EQ(coll_comm_rank(comm, &r), COLL_SUCCESS);
    ASSERT_EQ(coll_comm_size(comm, &n), COLL_SUCCESS);
    ASSERT_EQ(r, 0);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(coll_comm_rank(NULL, &r), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll_comm_size(comm, NULL), COLL_INVALID_ARGUMENT);
    /* after all that, the comm still works */
    for (int i = 0; i < 8; i++)
        buf[i] = i;
    ASSERT_EQ(coll_allreduce(buf, buf + 16, 8, COLL_INT32, COLL_SUM, comm), COLL_SUCCESS);
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(buf[16 + i], i);
    ASSERT_EQ(coll_comm_destroy(comm), COLL_SUCCESS);
    ASSERT_EQ(coll_comm_destroy(NULL), COLL_SUCCESS);
}

/* The one argument checker (src/core/check.c) reads the collective's row: in place is the
 * smaller buffer at its block of the larger, other overlaps are refused, and what it hands
 * the paths is normalised (buffers this rank does not pass NULL, op and root only where
 * the collective takes them). Stream-ordered calls take NCCL's ops only. */
TEST(checker_reads_the_row)
{
    coll_comm_t *comm = one_rank_comm();
    int32_t buf[64] = {0};
    struct coll_call c;

    ASSERT_EQ(coll_allgather(buf, buf, 4, COLL_INT32, comm), COLL_SUCCESS);
    ASSERT_EQ(coll_allgather(buf + 1, buf, 4, COLL_INT32, comm), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(comm), "coll_allgather: sendbuf and recvbuf overlap");
    ASSERT_EQ(coll_reduce_scatter(buf, buf, 4, COLL_INT32, COLL_SUM, comm), COLL_SUCCESS);
    ASSERT_EQ(coll_reduce_scatter(buf, buf + 2, 4, COLL_INT32, COLL_SUM, comm),
              COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll_gather(buf, buf, 4, COLL_INT32, 0, comm), COLL_SUCCESS);
    ASSERT_EQ(coll_scatter(buf + 1, buf, 4, COLL_INT32, 0, comm), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll_alltoall(buf, buf + 3, 4, COLL_INT32, comm), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll_gather(buf, NULL, 4, COLL_INT32, 0, comm), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(comm), "coll_gather: recvbuf is NULL with count 4");

    c = (struct coll_call){.comm = comm, .coll = COLL_COLL_BROADCAST, .sendbuf = buf,
                           .recvbuf = buf + 8, .count = 4, .dtype = COLL_INT32,
                           .op = COLL_MAX, .root = 0, .peer = 5};
    ASSERT_EQ(coll__check_call(&c, "t", 0), COLL_SUCCESS);
    ASSERT(c.op == COLL_SUM && c.peer == -1 && c.sendbuf == buf && c.recvbuf == buf + 8);
    c = (struct coll_call){.comm = comm, .coll = COLL_COLL_ALLGATHER, .sendbuf = buf,
                           .recvbuf = buf + 8, .count = 4, .dtype = COLL_INT32, .root = 3};
    ASSERT_EQ(coll__check_call(&c, "t", 0), COLL_SUCCESS);
    ASSERT_EQ(c.root, 0);
    c = (struct coll_call){.comm = comm, .coll = COLL_COLL_SENDRECV, .sendbuf = buf,
                           .recvbuf = buf, .count = 4, .dtype = COLL_INT32,
                           .p2p = COLL_STEP_RECV, .peer = 0};
    ASSERT_EQ(coll__check_call(&c, "t", 0), COLL_SUCCESS);
    ASSERT(c.sendbuf == NULL && c.recvbuf == buf && c.peer == 0);
    c.peer = 1;
    ASSERT_EQ(coll__check_call(&c, "t", 0), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(comm), "t: peer 1 is out of range [0, 1)");
    c = (struct coll_call){.comm = comm, .coll = COLL_COLL_ALLREDUCE, .sendbuf = buf,
                           .recvbuf = buf, .count = 4, .dtype = COLL_INT32, .op = COLL_BAND};
    ASSERT_EQ(coll__check_call(&c, "t", 0), COLL_SUCCESS);
    ASSERT_EQ(c.op, COLL_BAND);
    ASSERT_EQ(coll__check_call(&c, "t", COLL_CHECK_NCCL_OPS), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(comm), "which stream-ordered calls take");
    c.coll = COLL_NUM_COLLS;
    ASSERT_EQ(coll__check_call(&c, "t", 0), COLL_INTERNAL_ERROR);
    ASSERT_EQ(coll_comm_destroy(comm), COLL_SUCCESS);
}

TEST(every_dtype_and_op_one_rank)
{
    coll_comm_t *comm = one_rank_comm();
    static const size_t sizes[COLL_NUM_DTYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    uint8_t in[64 * 8], out[64 * 8];

    for (size_t i = 0; i < sizeof(in); i++)
        in[i] = (uint8_t)(i * 7 + 1) & 0x3f; /* finite, small: no NaN patterns in fp8 */
    for (int dt = 0; dt < COLL_NUM_DTYPES; dt++)
        for (int op = 0; op < COLL_NUM_OPS; op++) {
            memset(out, 0xee, sizeof(out));
            ASSERT_EQ(coll_allreduce(in, out, 64, (coll_dtype_t)dt, (coll_op_t)op, comm),
                      COLL_SUCCESS);
            /* one rank: the result is the input (avg divides by 1) */
            ASSERT_MSG(memcmp(in, out, 64 * sizes[dt]) == 0,
                       "dtype %d op %d", dt, op);
        }
    ASSERT_EQ(coll_comm_destroy(comm), COLL_SUCCESS);
}

TEST(abort_fails_later_calls)
{
    coll_comm_t *comm = one_rank_comm();
    int32_t x = 1;
    ASSERT_EQ(coll_comm_abort(NULL), COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll_comm_abort(comm), COLL_SUCCESS);
    ASSERT_EQ(coll_allreduce(&x, &x, 1, COLL_INT32, COLL_SUM, comm), COLL_REMOTE_ERROR);
    ASSERT_STR_CONTAINS(coll_last_error(comm), "abort");
    ASSERT_EQ(coll_comm_destroy(comm), COLL_SUCCESS);
    /* a new comm can be built in the same process */
    comm = one_rank_comm();
    ASSERT_EQ(coll_allreduce(&x, &x, 1, COLL_INT32, COLL_SUM, comm), COLL_SUCCESS);
    ASSERT_EQ(coll_comm_destroy(comm), COLL_SUCCESS);
}

TEST(init_env_errors)
{
    coll_comm_t *comm = NULL;
    coll_unique_id_t id;
    char text[COLL_UNIQUE_ID_STRLEN];

    unsetenv("COLL_UNIQUE_ID");
    ASSERT_EQ(coll_comm_init_env(&comm), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "COLL_UNIQUE_ID");
    ASSERT_EQ(coll_get_unique_id(&id), COLL_SUCCESS);
    ASSERT_EQ(coll_unique_id_to_string(&id, text, sizeof(text)), COLL_SUCCESS);
    setenv("COLL_UNIQUE_ID", text, 1);
    unsetenv("COLL_RANK");
    setenv("COLL_SIZE", "1", 1);
    ASSERT_EQ(coll_comm_init_env(&comm), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "COLL_RANK");
    setenv("COLL_RANK", "x1", 1);
    ASSERT_EQ(coll_comm_init_env(&comm), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "COLL_RANK");
    setenv("COLL_RANK", "1", 1);
    ASSERT_EQ(coll_comm_init_env(&comm), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "out of range");
    setenv("COLL_RANK", "0", 1);
    setenv("COLL_UNIQUE_ID", "00", 1);
    ASSERT_EQ(coll_comm_init_env(&comm), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "COLL_UNIQUE_ID");
    setenv("COLL_UNIQUE_ID", text, 1);
    ASSERT_EQ(coll_comm_init_env(&comm), COLL_SUCCESS);
    ASSERT_EQ(coll_comm_destroy(comm), COLL_SUCCESS);
}

TEST(bad_config_is_an_error)
{
    coll_unique_id_t id;
    coll_comm_t *comm = NULL;

    setenv("COLL_ALGO", "ring,bogus", 1);
    ASSERT_EQ(coll_get_unique_id(&id), COLL_SUCCESS);
    ASSERT_EQ(coll_comm_init(&comm, 1, &id, 0), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "bogus");
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "valid names");
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "flat"); /* the fast path is a valid name too */
    setenv("COLL_ALGO", "allreduce=chain", 1);
    ASSERT_EQ(coll_comm_init(&comm, 1, &id, 0), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "cannot run allreduce");
    unsetenv("COLL_ALGO");
    setenv("COLL_TIMEOUT_MS", "12ms", 1);
    ASSERT_EQ(coll_comm_init(&comm, 1, &id, 0), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "COLL_TIMEOUT_MS");
    unsetenv("COLL_TIMEOUT_MS");
    setenv("COLL_CHUNK_BYTES", "1X", 1);
    ASSERT_EQ(coll_comm_init(&comm, 1, &id, 0), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "COLL_CHUNK_BYTES");
    unsetenv("COLL_CHUNK_BYTES");
    setenv("COLL_TRANSPORT", "carrier-pigeon", 1);
    ASSERT_EQ(coll_comm_init(&comm, 1, &id, 0), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "tcp");
    unsetenv("COLL_TRANSPORT");
    ASSERT(comm == NULL);
}

/* The selector prices algorithms with the model: latency-bound sizes get a log-n algorithm,
 * bandwidth-bound ones a bandwidth-optimal one, and the calibration moves the choice. */
TEST(selector_follows_the_model)
{
    struct coll_comm c;
    struct coll_cost_params p;
    const struct coll_algo *algo = NULL;
    char why[512];
    struct coll_algo_args a = {.coll = COLL_COLL_ALLREDUCE, .nranks = 8, .rank = 0,
                               .dtype = COLL_FLOAT32, .elem_size = 4, .chunk_count = 32768};

    memset(&c, 0, sizeof(c));
    pthread_mutex_init(&c.errlock, NULL);
    c.nranks = 8;
    strcpy(c.cfg.select, "cost");
    c.cfg.chunk_bytes = 128 << 10;
    coll__cost_params_default(&p);
    c.cost = &p;
    a.count = 2;
    ASSERT_EQ(coll__select(&c, &a, &algo, why, sizeof(why)), COLL_SUCCESS);
    ASSERT_MSG(strcmp(algo->name, "ring") && strcmp(algo->name, "chain"), "8 B: %s (%s)",
               algo->name, why);
    ASSERT_STR_CONTAINS(why, "cost model");
    a.count = 16 << 20;
    ASSERT_EQ(coll__select(&c, &a, &algo, why, sizeof(why)), COLL_SUCCESS);
    ASSERT_MSG(!strcmp(algo->name, "ring") || !strcmp(algo->name, "rabenseifner"),
               "64 MiB: %s (%s)", algo->name, why);
    /* messages that cost a second each: the fewest messages win even at 64 MiB */
    p.link[COLL_LINK_TCP].alpha = 1.0;
    a.chunk_count = 32768;
    ASSERT_EQ(coll__select(&c, &a, &algo, why, sizeof(why)), COLL_SUCCESS);
    ASSERT_MSG(strcmp(algo->name, "ring"), "alpha = 1 s still picked ring (%s)", why);
    /* COLL_ALGO wins over the model */
    strcpy(c.cfg.algo, "allreduce=tree");
    ASSERT_EQ(coll__select(&c, &a, &algo, why, sizeof(why)), COLL_SUCCESS);
    ASSERT(!strcmp(algo->name, "tree"));
}

TEST(calibration_file_errors)
{
    coll_unique_id_t id;
    coll_comm_t *comm = NULL;
    char path[] = "/tmp/coll-calib-XXXXXX";
    int fd = mkstemp(path);

    ASSERT(fd >= 0);
    ASSERT(write(fd, "tcp.alpha banana\n", 17) == 17);
    close(fd);
    ASSERT_EQ(coll_get_unique_id(&id), COLL_SUCCESS);
    setenv("COLL_CALIB_FILE", path, 1);
    ASSERT_EQ(coll_comm_init(&comm, 1, &id, 0), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "COLL_CALIB_FILE");
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "line 1");
    unlink(path);
    unsetenv("COLL_CALIB_FILE");
    setenv("COLL_SELECT", "magic", 1);
    ASSERT_EQ(coll_comm_init(&comm, 1, &id, 0), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "COLL_SELECT");
    unsetenv("COLL_SELECT");
}

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
