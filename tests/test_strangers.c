/*
 * test_strangers.c - strangers on every listening port while real collectives run over TCP:
 * 3 ranks (threads of this process, one comm each) run all-reduces and broadcasts with
 * every result checked, while a stranger thread finds every TCP listener of the process
 * (the bootstrap root while it lives, each rank's data listener) and connects to them
 * again and again: junk, a well-formed handshake made with a wrong secret, a replay of a
 * real rank's handshake answer (captured on its way out; the acceptor's fresh nonce must
 * make it worthless), a replay of a real join record to the root, connections that leave
 * at once, and connections held open and silent until the end. The collectives must all
 * succeed with the right results, and the data listeners must have counted strangers.
 * Then crowds: 2,000 connections held on every listener (idle, a byte a second, junk), the
 * root's from before the first rank joins, the data listeners' from before the first
 * collective; the listeners drop the oldest at their caps and the crowd dials again, and
 * the ranks must still join and get every result right.
 * (test_tcp.c checks each kind of stranger one by one at the transport level; test_shm.c
 * the shared-memory doorbell.)
 */
#include "harness.h"
#include "core/bootstrap.h"
#include "base/wire.h"
#include "base/sys.h"
#include "transport/tcp_test.h"
#include "transport/transport.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>

#define NRANKS 3
#define ITERS 600
#define MAXCOUNT 20000
#define HS_BYTES 56                /* the data handshake answer (tcp.c) */
#define HS_MAGIC 0x32534843u       /* "CHS2" */
#define JOIN_MAGIC 0x4e4a4243u     /* "CBJN" */
#define JOIN_BYTES 8804            /* the join record (bootstrap.c) */
#define MAX_HELD 64

enum attack { A_JUNK, A_WRONG_SECRET, A_REPLAY_HS, A_REPLAY_JOIN, A_LEAVE, A_IDLE, A_NATTACKS };
static const char *const attack_names[A_NATTACKS] = {
    "junk", "wrong secret", "replayed handshake", "replayed join", "connect and leave",
    "idle"};
static atomic_int attacks[A_NATTACKS];

/* What real ranks wrote first on the connections they opened: a handshake answer to a data
 * listener, a join record to the root. Written by the hook, read by the stranger. */
static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t cap_hs[HS_BYTES], cap_join[JOIN_BYTES];
static bool have_hs, have_join;
static atomic_bool stop;

static void capture(const uint8_t *p, size_t n)
{
    pthread_mutex_lock(&cap_lock);
    if (n >= HS_BYTES && get32(p) == HS_MAGIC && !have_hs) {
        memcpy(cap_hs, p, HS_BYTES);
        have_hs = true;
    }
    if (n >= JOIN_BYTES && get32(p) == JOIN_MAGIC && !have_join) {
        memcpy(cap_join, p, JOIN_BYTES);
        have_join = true;
    }
    pthread_mutex_unlock(&cap_lock);
}

static ssize_t cap_send(int fd, const void *b, size_t n, int f)
{
    capture(b, n);
    return coll__sys_libc.send(fd, b, n, f);
}

static ssize_t cap_sendmsg(int fd, const struct msghdr *m, int f)
{
    if (m->msg_iovlen > 0)
        capture(m->msg_iov[0].iov_base, m->msg_iov[0].iov_len);
    return coll__sys_libc.sendmsg(fd, m, f);
}

static ssize_t cap_write(int fd, const void *b, size_t n)
{
    capture(b, n);
    return coll__sys_libc.write(fd, b, n);
}

static ssize_t cap_writev(int fd, const struct iovec *v, int c)
{
    if (c > 0)
        capture(v[0].iov_base, v[0].iov_len);
    return coll__sys_libc.writev(fd, v, c);
}

/* ---- the stranger ---------------------------------------------------------------------- */

/* The TCP listeners of this process, by scanning its fds: up to max addresses. */
static int find_listeners(struct sockaddr_storage *out, socklen_t *lens, int max)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    if (!d)
        return 0;
    while ((e = readdir(d)) && n < max) {
        int fd = atoi(e->d_name), acc = 0;
        socklen_t l = sizeof(acc);
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);

        if (e->d_name[0] == '.' || fd == dirfd(d))
            continue;
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l) < 0 || !acc)
            continue;
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0 ||
            (ss.ss_family != AF_INET && ss.ss_family != AF_INET6))
            continue;
        out[n] = ss;
        lens[n++] = sl;
    }
    closedir(d);
    return n;
}

static int dial(const struct sockaddr_storage *ss, socklen_t len)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)ss, len) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Read what the listener sends first (a 16-byte nonce), without waiting long. */
static void drain(int fd, int ms)
{
    uint8_t buf[64];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) > 0)
        (void)!recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
}

static void *stranger_main(void *arg)
{
    int held[MAX_HELD], nheld = 0;
    unsigned round = 0;

    (void)arg;
    while (!atomic_load(&stop)) {
        struct sockaddr_storage ls[16];
        socklen_t lens[16];
        int n = find_listeners(ls, lens, 16);

        for (int i = 0; i < n; i++) {
            enum attack a = (enum attack)((round + (unsigned)i) % A_NATTACKS);
            uint8_t buf[JOIN_BYTES];
            size_t len = 0;
            int fd = dial(&ls[i], lens[i]);

            if (fd < 0)
                continue;
            switch (a) {
            case A_JUNK:
                for (size_t k = 0; k < 200; k++)
                    buf[k] = (uint8_t)(k * 37 + round);
                len = 200;
                break;
            case A_WRONG_SECRET: {
                uint8_t nonce[16] = {0}, m[9 + 16 + 20];
                static const uint8_t wrong[COLL_SECRET_BYTES] = "not-the-secret!";
                uint32_t magic = HS_MAGIC, from = 0, to = 1;
                uint16_t idx = 0, ns = 1;
                pthread_mutex_lock(&cap_lock);
                if (have_hs)
                    memcpy(buf + 4, cap_hs + 4, 8); /* the real comm id */
                else
                    memset(buf + 4, 0x11, 8);
                pthread_mutex_unlock(&cap_lock);
                memcpy(buf, &magic, 4); /* little-endian, as the wire */
                memcpy(buf + 12, &from, 4);
                memcpy(buf + 16, &to, 4);
                memcpy(buf + 20, &idx, 2);
                memcpy(buf + 22, &ns, 2);
                memcpy(m, "coll-data", 9);
                memcpy(m + 9, nonce, 16);
                memcpy(m + 25, buf + 4, 20);
                coll__hmac_sha256(wrong, COLL_SECRET_BYTES, m, sizeof(m), buf + 24);
                len = HS_BYTES;
                break;
            }
            case A_REPLAY_HS:
                pthread_mutex_lock(&cap_lock);
                if (have_hs)
                    memcpy(buf, cap_hs, len = HS_BYTES);
                pthread_mutex_unlock(&cap_lock);
                break;
            case A_REPLAY_JOIN:
                pthread_mutex_lock(&cap_lock);
                if (have_join)
                    memcpy(buf, cap_join, len = JOIN_BYTES);
                pthread_mutex_unlock(&cap_lock);
                break;
            default:
                break;
            }
            if (a == A_IDLE && nheld < MAX_HELD) {
                held[nheld++] = fd;
                atomic_fetch_add(&attacks[a], 1);
                continue;
            }
            if (a != A_LEAVE && a != A_IDLE) {
                drain(fd, 20);
                if (len == 0 || send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len) {
                    close(fd);
                    continue;
                }
                drain(fd, 20);
            }
            atomic_fetch_add(&attacks[a], 1);
            close(fd);
        }
        round++;
        {
            struct timespec ts = {0, 5 * 1000000};
            nanosleep(&ts, NULL);
        }
    }
    for (int i = 0; i < nheld; i++)
        close(held[i]);
    return NULL;
}

/* ---- the ranks ------------------------------------------------------------------------- */

struct rank_run {
    int rank;
    coll_unique_id_t id;
    pthread_t thread;
    coll_status_t st;
    int done;
    bool wrong;
    uint64_t rejected; /* strangers this rank's TCP listener refused */
    char msg[256];
};

static void *rank_main(void *arg)
{
    struct rank_run *r = arg;
    coll_comm_t *comm;
    float *buf = malloc(MAXCOUNT * sizeof(*buf));

    r->st = coll_comm_init(&comm, NRANKS, &r->id, r->rank);
    if (r->st != COLL_SUCCESS) {
        snprintf(r->msg, sizeof(r->msg), "init: %s", coll_last_error(NULL));
        free(buf);
        return NULL;
    }
    for (int it = 0; it < ITERS; it++) {
        size_t count = (size_t)(it * 7919) % MAXCOUNT;
        bool bcast = it % 3 == 2;
        int root = it % NRANKS;

        for (size_t i = 0; i < count; i++)
            buf[i] = (float)((r->rank + 1) * (int)(i % 11 + 1));
        r->st = bcast ? coll_broadcast(buf, buf, count, COLL_FLOAT32, root, comm)
                      : coll_allreduce(buf, buf, count, COLL_FLOAT32, COLL_SUM, comm);
        if (r->st != COLL_SUCCESS) {
            snprintf(r->msg, sizeof(r->msg), "iteration %d: %s", it, coll_last_error(comm));
            break;
        }
        for (size_t i = 0; i < count; i++) {
            int unit = (int)(i % 11 + 1);
            float want = bcast ? (float)((root + 1) * unit)
                               : (float)(NRANKS * (NRANKS + 1) / 2 * unit);
            if (buf[i] != want)
                r->wrong = true;
        }
        r->done++;
    }
    pthread_mutex_lock(&comm->lock);
    r->rejected = coll__tcp_rejected(comm->tp_ctx[coll__transport_index(&coll__tcp_transport)]);
    pthread_mutex_unlock(&comm->lock);
    coll_comm_destroy(comm);
    free(buf);
    return NULL;
}

TEST(strangers_on_every_port_during_collectives)
{
    struct rank_run rs[NRANKS];
    pthread_t stranger;
    coll_unique_id_t id;
    uint64_t rejected = 0;

    setenv("COLL_TRANSPORT", "tcp", 1);
    setenv("COLL_TIMEOUT_MS", "20000", 1);
    setenv("COLL_SOCKET_IFNAME", "lo", 1);
    coll__sys.send = cap_send;
    coll__sys.sendmsg = cap_sendmsg;
    coll__sys.write = cap_write;
    coll__sys.writev = cap_writev;
    ASSERT_EQ(pthread_create(&stranger, NULL, stranger_main, NULL), 0);
    ASSERT_EQ(coll_get_unique_id(&id), COLL_SUCCESS);
    {
        struct timespec ts = {0, 100 * 1000000}; /* the root alone meets strangers first */
        nanosleep(&ts, NULL);
    }
    memset(rs, 0, sizeof(rs));
    for (int r = 0; r < NRANKS; r++) {
        rs[r].rank = r;
        rs[r].id = id;
        ASSERT_EQ(pthread_create(&rs[r].thread, NULL, rank_main, &rs[r]), 0);
    }
    for (int r = 0; r < NRANKS; r++)
        ASSERT_EQ(pthread_join(rs[r].thread, NULL), 0);
    atomic_store(&stop, true);
    ASSERT_EQ(pthread_join(stranger, NULL), 0);

    for (int a = 0; a < A_NATTACKS; a++)
        fprintf(stderr, "# %s: %d connections\n", attack_names[a], atomic_load(&attacks[a]));
    for (int r = 0; r < NRANKS; r++) {
        ASSERT_MSG(rs[r].st == COLL_SUCCESS, "rank %d: %s", r, rs[r].msg);
        ASSERT_EQ(rs[r].done, ITERS);
        ASSERT_MSG(!rs[r].wrong, "rank %d got a wrong result", r);
        rejected += rs[r].rejected;
    }
    fprintf(stderr, "# data listeners refused %llu connections\n", (unsigned long long)rejected);
    ASSERT(have_hs);
    for (int a = 0; a < A_NATTACKS; a++)
        if (a != A_REPLAY_JOIN) /* the root may be gone before a join was captured */
            ASSERT_MSG(atomic_load(&attacks[a]) > 0, "no '%s' stranger reached a listener",
                       attack_names[a]);
    ASSERT(rejected > 0);
}

/* ---- crowds: thousands of strangers held on every listener ------------------------------ */

/* CROWD connections are held on every TCP listener of the process (the bootstrap root from
 * before the first rank joins, each data listener from its creation, so before the first
 * collective too): a third idle, a third slow (a byte a second), a third sending junk. The
 * listeners drop some (junk, deadlines, the oldest at their caps); the crowd dials them
 * again, at most REFILL per listener per sweep, so the crowd stays and churns. */
#define CROWD 2000
#define REFILL 200
#define SWEEP_MS 20
#define MAX_LISTENERS 8
#define CROWD_ITERS 150

enum crowd_kind { K_IDLE, K_SLOW, K_JUNK };

struct crowd_listener {
    struct sockaddr_storage ss;
    socklen_t len;
    bool gone;
    int fd[CROWD];
    long dials, drops;
    bool filled; /* a whole crowd dialed (a listener that drops some holds fewer) */
};

static struct crowd_listener crowd[MAX_LISTENERS];
static atomic_int crowd_n, crowd_filled, crowd_size = CROWD;
static atomic_bool crowd_stop;

static int crowd_dial(const struct sockaddr_storage *ss, socklen_t len, enum crowd_kind kind)
{
    /* a full backlog must not stall the crowd: the connect gives up after 100 ms */
    struct timeval tv = {0, 100000};
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (const struct sockaddr *)ss, len) < 0) {
        close(fd);
        return -1;
    }
    if (kind == K_JUNK) {
        uint8_t junk[200];
        for (size_t k = 0; k < sizeof(junk); k++)
            junk[k] = (uint8_t)(k * 131 + 7);
        (void)!send(fd, junk, sizeof(junk), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    return fd;
}

static void *crowd_main(void *arg)
{
    static struct pollfd pfds[MAX_LISTENERS * CROWD];
    static int owner[MAX_LISTENERS * CROWD], slot[MAX_LISTENERS * CROWD];
    uint64_t last_slow = 0;
    int size = atomic_load(&crowd_size);

    (void)arg;
    while (!atomic_load(&crowd_stop)) {
        struct sockaddr_storage ls[16];
        socklen_t lens[16];
        int n = find_listeners(ls, lens, 16), np = 0;
        struct timespec ts;
        uint64_t now;

        /* new listeners join the table; vanished ones lose their crowd */
        for (int i = 0; i < n; i++) {
            int j, nl = atomic_load(&crowd_n);
            for (j = 0; j < nl; j++)
                if (crowd[j].len == lens[i] && !memcmp(&crowd[j].ss, &ls[i], lens[i]))
                    break;
            if (j == nl && nl < MAX_LISTENERS) {
                crowd[nl].ss = ls[i];
                crowd[nl].len = lens[i];
                for (int k = 0; k < CROWD; k++)
                    crowd[nl].fd[k] = -1;
                atomic_store(&crowd_n, nl + 1);
            }
        }
        for (int j = 0; j < atomic_load(&crowd_n); j++) {
            struct crowd_listener *c = &crowd[j];
            bool present = false;
            int dialed = 0;

            if (c->gone)
                continue;
            for (int i = 0; i < n; i++)
                present |= c->len == lens[i] && !memcmp(&c->ss, &ls[i], lens[i]);
            if (!present) {
                c->gone = true;
                for (int k = 0; k < size; k++)
                    if (c->fd[k] >= 0)
                        close(c->fd[k]), c->fd[k] = -1;
                continue;
            }
            for (int k = 0; k < size; k++) {
                if (c->fd[k] < 0 && dialed < REFILL) {
                    c->fd[k] = crowd_dial(&c->ss, c->len, (enum crowd_kind)(k % 3));
                    dialed++;
                    c->dials++;
                }
                if (c->fd[k] >= 0) {
                    pfds[np] = (struct pollfd){.fd = c->fd[k], .events = POLLIN};
                    owner[np] = j;
                    slot[np++] = k;
                }
            }
            if (c->dials >= size && !c->filled) {
                c->filled = true;
                atomic_fetch_add(&crowd_filled, 1);
            }
        }
        /* connections the listeners closed (reading what they sent: nonces) */
        if (np > 0 && poll(pfds, (nfds_t)np, 0) > 0) {
            for (int i = 0; i < np; i++) {
                uint8_t buf[64];
                ssize_t r;

                if (!pfds[i].revents)
                    continue;
                r = recv(pfds[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                    close(pfds[i].fd);
                    crowd[owner[i]].fd[slot[i]] = -1;
                    crowd[owner[i]].drops++;
                }
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &ts);
        now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        if (now - last_slow >= 1000000000ull) { /* the slow third: a byte a second */
            last_slow = now;
            for (int i = 0; i < np; i++)
                if (slot[i] % 3 == K_SLOW && crowd[owner[i]].fd[slot[i]] >= 0)
                    (void)!send(pfds[i].fd, "c", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        ts = (struct timespec){0, SWEEP_MS * 1000000};
        nanosleep(&ts, NULL);
    }
    for (int j = 0; j < atomic_load(&crowd_n); j++)
        for (int k = 0; k < size; k++)
            if (crowd[j].fd[k] >= 0)
                close(crowd[j].fd[k]);
    return NULL;
}

static pthread_barrier_t crowd_ready;

static void wait_filled(int want)
{
    struct timespec ts = {0, 10 * 1000000};
    while (atomic_load(&crowd_filled) < want)
        nanosleep(&ts, NULL);
}

static void *crowd_rank_main(void *arg)
{
    struct rank_run *r = arg;
    coll_comm_t *comm;
    int *buf = malloc(MAXCOUNT * sizeof(*buf));

    r->st = coll_comm_init(&comm, NRANKS, &r->id, r->rank);
    pthread_barrier_wait(&crowd_ready);
    if (r->st != COLL_SUCCESS) {
        snprintf(r->msg, sizeof(r->msg), "init: %s", coll_last_error(NULL));
        free(buf);
        return NULL;
    }
    /* the root and the three data listeners each held a full crowd before this */
    wait_filled(1 + NRANKS);
    for (int it = 0; it < CROWD_ITERS; it++) {
        size_t count = it == 0 ? 1 : (size_t)(it * 7919) % MAXCOUNT;
        bool bcast = it % 3 == 2;
        int root = it % NRANKS;

        for (size_t i = 0; i < count; i++)
            buf[i] = (r->rank + 1) * (int)(i % 11 + 1);
        r->st = bcast ? coll_broadcast(buf, buf, count, COLL_INT32, root, comm)
                      : coll_allreduce(buf, buf, count, COLL_INT32, COLL_SUM, comm);
        if (r->st != COLL_SUCCESS) {
            snprintf(r->msg, sizeof(r->msg), "iteration %d: %s", it, coll_last_error(comm));
            break;
        }
        for (size_t i = 0; i < count; i++) {
            int unit = (int)(i % 11 + 1);
            if (buf[i] != (bcast ? (root + 1) * unit : NRANKS * (NRANKS + 1) / 2 * unit))
                r->wrong = true;
        }
        r->done++;
    }
    pthread_mutex_lock(&comm->lock);
    r->rejected = coll__tcp_rejected(comm->tp_ctx[coll__transport_index(&coll__tcp_transport)]);
    pthread_mutex_unlock(&comm->lock);
    coll_comm_destroy(comm);
    free(buf);
    return NULL;
}

TEST(crowds_held_on_every_listener_from_bootstrap_on)
{
    struct rank_run rs[NRANKS];
    pthread_t th;
    coll_unique_id_t id;
    struct rlimit rl;
    uint64_t rejected = 0;
    long drops = 0;

    setenv("COLL_TRANSPORT", "tcp", 1);
    setenv("COLL_TIMEOUT_MS", "20000", 1);
    setenv("COLL_SOCKET_IFNAME", "lo", 1);
    /* the crowd's ends and the listeners' ends of four crowds live in this one process */
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < (rlim_t)(4 * CROWD + 4000)) {
        int size = (int)((rl.rlim_cur > 5000 ? rl.rlim_cur - 4000 : 1000) / 4);
        atomic_store(&crowd_size, size);
        fprintf(stderr, "# RLIMIT_NOFILE %llu: crowds of %d, not %d\n",
                (unsigned long long)rl.rlim_cur, size, CROWD);
    }
    ASSERT_EQ(pthread_barrier_init(&crowd_ready, NULL, NRANKS), 0);
    ASSERT_EQ(pthread_create(&th, NULL, crowd_main, NULL), 0);
    ASSERT_EQ(coll_get_unique_id(&id), COLL_SUCCESS);
    wait_filled(1); /* the root's crowd is there before any rank */
    memset(rs, 0, sizeof(rs));
    for (int r = 0; r < NRANKS; r++) {
        rs[r].rank = r;
        rs[r].id = id;
        ASSERT_EQ(pthread_create(&rs[r].thread, NULL, crowd_rank_main, &rs[r]), 0);
    }
    for (int r = 0; r < NRANKS; r++)
        ASSERT_EQ(pthread_join(rs[r].thread, NULL), 0);
    atomic_store(&crowd_stop, true);
    ASSERT_EQ(pthread_join(th, NULL), 0);

    for (int j = 0; j < atomic_load(&crowd_n); j++) {
        fprintf(stderr, "# listener %d: %ld dials, %ld closed by the listener\n", j,
                crowd[j].dials, crowd[j].drops);
        drops += crowd[j].drops;
    }
    for (int r = 0; r < NRANKS; r++) {
        ASSERT_MSG(rs[r].st == COLL_SUCCESS, "rank %d: %s", r, rs[r].msg);
        ASSERT_EQ(rs[r].done, CROWD_ITERS);
        ASSERT_MSG(!rs[r].wrong, "rank %d got a wrong result", r);
        rejected += rs[r].rejected;
    }
    fprintf(stderr, "# data listeners refused %llu connections\n", (unsigned long long)rejected);
    /* the root's and the ranks' data listeners; the control plane's listeners (src/core/ctl.c,
     * one per parent in its tree) stand only while the tree forms, and a loaded machine
     * lets the crowd find them too */
    ASSERT_MSG(atomic_load(&crowd_n) >= 1 + NRANKS && atomic_load(&crowd_n) <= 1 + 2 * NRANKS,
               "%d listeners", atomic_load(&crowd_n));
    ASSERT(rejected > 0);
    ASSERT(drops > 0);
}

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
