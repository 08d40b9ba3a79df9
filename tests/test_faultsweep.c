/*
 * test_faultsweep.c - fail the k-th socket/epoll call of each kind while 3 ranks (threads of
 * this process, one comm each, over TCP or shared memory) build a comm and run a few small
 * all-reduces, for the k that a clean run reaches; every rank must return (no hang:
 * COLL_TIMEOUT_MS and COLL_BOOTSTRAP_TIMEOUT_MS are short), with right data when it
 * succeeds, and once one rank has failed at iteration e no rank may complete iteration e + 2
 * (the failure reached the others as an error, not a hang). Destroy after the error must
 * free everything: the CI sanitizer pass runs this under LSan.
 *
 * The calls go through src/base/sys.h, which the bootstrap (its root included), the
 * TCP transport, the shared-memory doorbell and interface discovery all use (the TCP data
 * path reads with readv, so recvmsg is swept over shared memory only). A clean run counts
 * the calls of each kind; then k = 1, 2, 3 and about three later k up to the last one are
 * failed with the errno that call plausibly returns (COLL_SWEEP_ALL=1: every k). EINTR is
 * injected too, on the calls where the library must retry it: there every rank must
 * succeed.
 */
#include "harness.h"
#include "core/internal.h"
#include "base/sys.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define NRANKS 3
#define ITERS 3
#define COUNT 1500  /* floats: a few frames per step */
#define JOIN_S 20   /* far beyond the 0.7 s deadlines: a rank still running here hangs */

enum kind { K_SOCKET, K_BIND, K_LISTEN, K_ACCEPT4, K_CONNECT, K_GETSOCKNAME, K_SETSOCKOPT,
            K_GETSOCKOPT, K_SEND, K_RECV, K_SENDMSG, K_RECVMSG, K_READV, K_POLL, K_EPOLL_CTL,
            K_TIMERFD, K_GETIFADDRS, K_NKINDS };
static const char *const kind_names[K_NKINDS] = {
    "socket", "bind", "listen", "accept4", "connect", "getsockname", "setsockopt",
    "getsockopt", "send", "recv", "sendmsg", "recvmsg", "readv", "poll", "epoll_ctl",
    "timerfd_create", "getifaddrs"};

static atomic_long calls[K_NKINDS];
/* atomic: a root thread left from the previous trial may still be calling */
static atomic_int fail_kind;
static atomic_long fail_k; /* 0: count only */
static atomic_int fail_errno;
static atomic_int failed_rank = -2; /* -2: nothing failed yet, -1: a thread of no rank */
static _Thread_local int my_rank = -1;

/* True when this call is the one to fail (errno set). */
static bool inject(enum kind k)
{
    long n = atomic_fetch_add(&calls[k], 1) + 1;

    if (atomic_load(&fail_k) == 0 || (int)k != atomic_load(&fail_kind) ||
        n != atomic_load(&fail_k))
        return false;
    atomic_store(&failed_rank, my_rank);
    errno = atomic_load(&fail_errno);
    return true;
}

#define HOOK(kind, ret, name, params, args)                                            \
    static ret hook_##name params                                                      \
    {                                                                                  \
        if (inject(kind))                                                              \
            return -1;                                                                 \
        return coll__sys_libc.name args;                                               \
    }
HOOK(K_SOCKET, int, socket, (int d, int t, int p), (d, t, p))
HOOK(K_BIND, int, bind, (int fd, const struct sockaddr *a, socklen_t l), (fd, a, l))
HOOK(K_LISTEN, int, listen, (int fd, int b), (fd, b))
HOOK(K_ACCEPT4, int, accept4, (int fd, struct sockaddr *a, socklen_t *l, int f), (fd, a, l, f))
HOOK(K_CONNECT, int, connect, (int fd, const struct sockaddr *a, socklen_t l), (fd, a, l))
HOOK(K_GETSOCKNAME, int, getsockname, (int fd, struct sockaddr *a, socklen_t *l), (fd, a, l))
HOOK(K_SETSOCKOPT, int, setsockopt, (int fd, int lv, int nm, const void *v, socklen_t l),
     (fd, lv, nm, v, l))
HOOK(K_GETSOCKOPT, int, getsockopt, (int fd, int lv, int nm, void *v, socklen_t *l),
     (fd, lv, nm, v, l))
HOOK(K_SEND, ssize_t, send, (int fd, const void *b, size_t n, int f), (fd, b, n, f))
HOOK(K_RECV, ssize_t, recv, (int fd, void *b, size_t n, int f), (fd, b, n, f))
HOOK(K_SENDMSG, ssize_t, sendmsg, (int fd, const struct msghdr *m, int f), (fd, m, f))
HOOK(K_RECVMSG, ssize_t, recvmsg, (int fd, struct msghdr *m, int f), (fd, m, f))
HOOK(K_READV, ssize_t, readv, (int fd, const struct iovec *v, int c), (fd, v, c))
HOOK(K_POLL, int, poll, (struct pollfd *f, nfds_t n, int t), (f, n, t))
HOOK(K_EPOLL_CTL, int, epoll_ctl, (int e, int op, int fd, struct epoll_event *ev),
     (e, op, fd, ev))
HOOK(K_TIMERFD, int, timerfd_create, (int c, int f), (c, f))
HOOK(K_GETIFADDRS, int, getifaddrs, (struct ifaddrs **i), (i))

static void hooks_install(void)
{
    coll__sys.socket = hook_socket;
    coll__sys.bind = hook_bind;
    coll__sys.listen = hook_listen;
    coll__sys.accept4 = hook_accept4;
    coll__sys.connect = hook_connect;
    coll__sys.getsockname = hook_getsockname;
    coll__sys.setsockopt = hook_setsockopt;
    coll__sys.getsockopt = hook_getsockopt;
    coll__sys.send = hook_send;
    coll__sys.recv = hook_recv;
    coll__sys.sendmsg = hook_sendmsg;
    coll__sys.recvmsg = hook_recvmsg;
    coll__sys.readv = hook_readv;
    coll__sys.poll = hook_poll;
    coll__sys.epoll_ctl = hook_epoll_ctl;
    coll__sys.timerfd_create = hook_timerfd_create;
    coll__sys.getifaddrs = hook_getifaddrs;
}

struct rank_run {
    int rank;
    coll_unique_id_t id;
    pthread_t thread;
    coll_status_t init_st, st; /* st: of the first failing collective */
    int done;                  /* all-reduces completed (right) */
    int err_iter;              /* -1: init failed; ITERS: no error */
    bool wrong;
    char msg[256];
};

static void *rank_main(void *arg)
{
    struct rank_run *r = arg;
    coll_comm_t *comm = NULL;
    float *buf = malloc(COUNT * sizeof(*buf));

    my_rank = r->rank;
    r->err_iter = ITERS;
    r->init_st = coll_comm_init(&comm, NRANKS, &r->id, r->rank);
    if (r->init_st != COLL_SUCCESS) {
        r->err_iter = -1;
        snprintf(r->msg, sizeof(r->msg), "%s", coll_last_error(NULL));
        free(buf);
        return NULL;
    }
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < COUNT; i++)
            buf[i] = (float)((r->rank + 1) * (i % 7 + it));
        r->st = coll_allreduce(buf, buf, COUNT, COLL_FLOAT32, COLL_SUM, comm);
        if (r->st != COLL_SUCCESS) {
            r->err_iter = it;
            snprintf(r->msg, sizeof(r->msg), "%s", coll_last_error(comm));
            break;
        }
        for (int i = 0; i < COUNT; i++)
            if (buf[i] != (float)(NRANKS * (NRANKS + 1) / 2 * (i % 7 + it)))
                r->wrong = true;
        r->done++;
    }
    coll_comm_destroy(comm);
    free(buf);
    return NULL;
}

/* One trial: 1 when some rank ended with an error, else 0. */
static int trial(enum kind kind, long k, int err, bool must_succeed)
{
    struct rank_run rs[NRANKS];
    coll_unique_id_t id;
    coll_status_t st;
    struct timespec until;

    for (int i = 0; i < K_NKINDS; i++)
        atomic_store(&calls[i], 0);
    atomic_store(&failed_rank, -2);
    atomic_store(&fail_kind, (int)kind);
    atomic_store(&fail_k, k);
    atomic_store(&fail_errno, err);
    my_rank = -1;
    st = coll_get_unique_id(&id);
    if (st != COLL_SUCCESS) {
        /* the root could not start: a status with a message, and nothing else to check */
        ASSERT_MSG(atomic_load(&failed_rank) != -2, "%s k=%ld: get_unique_id failed with no "
                   "fault injected: %s", kind_names[kind], k, coll_last_error(NULL));
        ASSERT(!must_succeed);
        ASSERT(coll_last_error(NULL)[0] != '\0');
        return 1;
    }
    memset(rs, 0, sizeof(rs));
    for (int r = 0; r < NRANKS; r++) {
        rs[r].rank = r;
        rs[r].id = id;
        ASSERT_EQ(pthread_create(&rs[r].thread, NULL, rank_main, &rs[r]), 0);
    }
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += JOIN_S;
    for (int r = 0; r < NRANKS; r++)
        ASSERT_MSG(pthread_timedjoin_np(rs[r].thread, NULL, &until) == 0,
                   "%s k=%ld errno %d: rank %d still running after %d s (a hang)",
                   kind_names[kind], k, err, r, JOIN_S);
    /* the root may still be answering late joiners: let it notice they are gone */
    for (int r = 0; r < NRANKS; r++) {
        ASSERT_MSG(!rs[r].wrong, "%s k=%ld: rank %d got a wrong result", kind_names[kind], k, r);
        if (rs[r].err_iter < ITERS) {
            coll_status_t s = rs[r].err_iter < 0 ? rs[r].init_st : rs[r].st;
            ASSERT_MSG(s == COLL_SYSTEM_ERROR || s == COLL_REMOTE_ERROR || s == COLL_TIMEOUT ||
                           s == COLL_INTERNAL_ERROR,
                       "%s k=%ld: rank %d: unexpected status %d", kind_names[kind], k, r, (int)s);
            ASSERT_MSG(rs[r].msg[0] != '\0', "%s k=%ld: rank %d failed without a message",
                       kind_names[kind], k, r);
            for (int q = 0; q < NRANKS; q++)
                ASSERT_MSG(rs[q].done <= rs[r].err_iter + 1,
                           "%s k=%ld: rank %d failed at iteration %d, yet rank %d completed %d",
                           kind_names[kind], k, r, rs[r].err_iter, q, rs[q].done);
        }
        if (must_succeed || atomic_load(&failed_rank) == -2)
            ASSERT_MSG(rs[r].done == ITERS, "%s k=%ld errno %d: rank %d failed (%s) where it "
                       "should not", kind_names[kind], k, err, r, rs[r].msg);
    }
    if (getenv("COLL_SWEEP_VERBOSE"))
        fprintf(stderr, "# %s k=%ld errno %d: failed rank %d; done %d %d %d\n", kind_names[kind],
                k, err, atomic_load(&failed_rank), rs[0].done, rs[1].done, rs[2].done);
    for (int r = 0; r < NRANKS; r++)
        if (rs[r].err_iter < ITERS)
            return 1;
    return 0;
}

static void sweep_over(const char *transport, enum kind kind, int err, bool must_succeed)
{
    long n, tried = 0, step, errors = 0;
    bool all = getenv("COLL_SWEEP_ALL") != NULL;

    setenv("COLL_TRANSPORT", transport, 1);
    setenv("COLL_TIMEOUT_MS", "700", 1);
    setenv("COLL_BOOTSTRAP_TIMEOUT_MS", "700", 1);
    setenv("COLL_SOCKET_IFNAME", "lo", 1);
    hooks_install();
    trial(kind, 0, 0, true); /* the clean run, counting */
    n = atomic_load(&calls[kind]);
    /* k = 1, 2, 3, then about 3 more spread up to the last call reached */
    step = all || n <= 7 ? 1 : (n - 3) / 3 + 1;
    for (long k = 1; k <= n; k = k < 3 ? k + 1 : k + step) {
        if (k > 3 && k + step > n)
            k = n; /* the last call reached is always tried */
        errors += trial(kind, k, err, must_succeed);
        tried++;
    }
    fprintf(stderr, "# %s over %s: %ld calls in a clean run, %ld tried with errno %d, %ld of "
            "them ended in an error (the others were retried or not needed)\n",
            kind_names[kind], transport, n, tried, err, errors);
    /* the table stays hooked: a root thread of the last trial may still be using it, and
     * the case's process ends here */
}

static void sweep(enum kind kind, int err, bool must_succeed)
{
    sweep_over("tcp", kind, err, must_succeed);
}

TEST(fail_socket_emfile) { sweep(K_SOCKET, EMFILE, false); }
TEST(fail_bind_eaddrinuse) { sweep(K_BIND, EADDRINUSE, false); }
TEST(fail_listen_eaddrinuse) { sweep(K_LISTEN, EADDRINUSE, false); }
TEST(fail_accept4_emfile) { sweep(K_ACCEPT4, EMFILE, false); }
TEST(fail_accept4_econnaborted) { sweep(K_ACCEPT4, ECONNABORTED, false); }
TEST(fail_connect_econnrefused) { sweep(K_CONNECT, ECONNREFUSED, false); }
TEST(fail_getsockname_enobufs) { sweep(K_GETSOCKNAME, ENOBUFS, false); }
TEST(fail_setsockopt_enobufs) { sweep(K_SETSOCKOPT, ENOBUFS, false); }
TEST(fail_getsockopt_enobufs) { sweep(K_GETSOCKOPT, ENOBUFS, false); }
TEST(fail_send_epipe) { sweep(K_SEND, EPIPE, false); }
TEST(fail_recv_econnreset) { sweep(K_RECV, ECONNRESET, false); }
TEST(fail_sendmsg_econnreset) { sweep(K_SENDMSG, ECONNRESET, false); }
TEST(fail_readv_econnreset) { sweep(K_READV, ECONNRESET, false); }
TEST(fail_poll_enomem) { sweep(K_POLL, ENOMEM, false); }
TEST(fail_epoll_ctl_enomem) { sweep(K_EPOLL_CTL, ENOMEM, false); }
TEST(fail_timerfd_create_emfile) { sweep(K_TIMERFD, EMFILE, false); }
TEST(fail_getifaddrs_enomem) { sweep(K_GETIFADDRS, ENOMEM, false); }
/* interrupted calls are retried, never reported */
TEST(eintr_send_is_retried) { sweep(K_SEND, EINTR, true); }
TEST(eintr_recv_is_retried) { sweep(K_RECV, EINTR, true); }
TEST(eintr_sendmsg_is_retried) { sweep(K_SENDMSG, EINTR, true); }
TEST(eintr_readv_is_retried) { sweep(K_READV, EINTR, true); }
TEST(eintr_poll_is_retried) { sweep(K_POLL, EINTR, true); }

/* shared memory: its doorbell sockets and epoll registrations (memfd and mmap are direct
 * calls); the bootstrap still runs over TCP */
TEST(shm_fail_socket_emfile) { sweep_over("shm", K_SOCKET, EMFILE, false); }
TEST(shm_fail_sendmsg_econnreset) { sweep_over("shm", K_SENDMSG, ECONNRESET, false); }
TEST(shm_fail_recvmsg_econnreset) { sweep_over("shm", K_RECVMSG, ECONNRESET, false); }
TEST(shm_fail_epoll_ctl_enomem) { sweep_over("shm", K_EPOLL_CTL, ENOMEM, false); }
TEST(shm_eintr_sendmsg_is_retried) { sweep_over("shm", K_SENDMSG, EINTR, true); }
TEST(shm_eintr_recvmsg_is_retried) { sweep_over("shm", K_RECVMSG, EINTR, true); }

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
