/*
 * launcher.c - coll_comm_init_env: rank, size and the unique id from the launcher that
 * started this process.
 *
 * Divisions: 1 environment helpers, 2 detection and cross-checks, 3 the TCPStore client
 * (torchrun), 4 a one-key TCPStore server (torch env without an agent store), 5 PMIx
 * (mpirun, srun --mpi=pmix), 6 a private file (srun without PMIx), 7 coll_comm_init_env.
 *
 * The rank that makes the unique id (rank 0) must hand it to the others, and the id holds
 * the 128-bit secret that authenticates every connection, so the channel matters:
 *   collrun   COLL_UNIQUE_ID in the environment (collrun made it);
 *   torchrun  the store torchrun's agent already serves on MASTER_ADDR:MASTER_PORT, as
 *             PyTorch itself passes NCCL's id (rank 0 sets a key, the others wait for it);
 *             without an agent store (TORCHELASTIC_USE_AGENT_STORE != True) rank 0 serves
 *             the one key there itself, as torch.distributed's env:// rank 0 would;
 *   mpirun    PMIx put/commit/fence/get through the launcher's own PMIx server;
 *   srun      PMIx under --mpi=pmix; otherwise a file only this user can read in a
 *             directory all hosts share (COLL_ID_DIR, default $HOME/.coll).
 * The secret is always fresh from getrandom (coll_get_unique_id), never derived from
 * anything a stranger can read in the environment.
 */
#include "launcher.h"
#include "../core/bootstrap.h"
#include "../base/sys.h"

#include <coll_config.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if COLL_HAVE_PMIX
#include <pmix.h>
#endif

#define LAUNCH_DEFAULT_TIMEOUT_MS 300000
#define STORE_KEY_MAX 256
#define STORE_VAL_MAX 4096

/* Every coll_comm_init_env of a process gets the next number, and every rank makes the same
 * calls in the same order, so the number tells one exchange from the next in one store. */
static atomic_uint launch_seq;
static atomic_bool collrun_used; /* COLL_UNIQUE_ID already made a comm in this process */

/* ---- 1 environment helpers ----------------------------------------------------------- */

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* A variable that must hold an integer in [lo, hi]: its value in *out_p, or an error
 * naming it. */
static coll_status_t env_int(const char *launcher, const char *name, int lo, int hi,
                             int *out_p)
{
    const char *v = env(name);
    char *end;
    long x;

    if (!v)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "%s environment: %s is not set",
                           launcher, name);
    errno = 0;
    x = strtol(v, &end, 10);
    if (errno || end == v || *end != '\0')
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "%s environment: %s='%s' is not an integer", launcher, name, v);
    if (x < lo || x > hi)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "%s environment: %s=%ld is out of range [%d, %d]", launcher, name, x,
                           lo, hi);
    *out_p = (int)x;
    return COLL_SUCCESS;
}

static int64_t launch_timeout_ms(void)
{
    const char *v = env("COLL_BOOTSTRAP_TIMEOUT_MS");
    char *end;
    long long x;

    if (!v)
        return LAUNCH_DEFAULT_TIMEOUT_MS;
    errno = 0;
    x = strtoll(v, &end, 10);
    if (errno || *end != '\0' || x <= 0 || x > INT64_MAX / 1000000)
        return LAUNCH_DEFAULT_TIMEOUT_MS; /* the comm's config load names the bad value */
    return x;
}

static int ms_left(uint64_t deadline_ns)
{
    uint64_t now = coll__now_ns();
    uint64_t ms;

    if (now >= deadline_ns)
        return 0;
    ms = (deadline_ns - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* ---- 2 detection and cross-checks ---------------------------------------------------- */

/* rank, size, local rank and local size of one launcher, from its variables; the local ones
 * may be absent (NULL name or unset). */
static coll_status_t read_launcher(const char *launcher, const char *rank_v, const char *size_v,
                                   const char *lrank_v, const char *lsize_v,
                                   struct coll_launch *l)
{
    coll_status_t st;

    memset(l, 0, sizeof(*l));
    l->name = launcher;
    l->local_rank = l->local_size = -1;
    st = env_int(launcher, size_v, 1, INT_MAX, &l->size);
    if (st != COLL_SUCCESS)
        return st;
    st = env_int(launcher, rank_v, 0, INT_MAX, &l->rank);
    if (st != COLL_SUCCESS)
        return st;
    if (l->rank >= l->size)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "%s environment: %s=%d is out of range for %s=%d", launcher, rank_v,
                           l->rank, size_v, l->size);
    if (lsize_v && env(lsize_v)) {
        st = env_int(launcher, lsize_v, 1, l->size, &l->local_size);
        if (st != COLL_SUCCESS)
            return st;
    }
    if (lrank_v && env(lrank_v)) {
        st = env_int(launcher, lrank_v, 0, l->size - 1, &l->local_rank);
        if (st != COLL_SUCCESS)
            return st;
        if (l->local_size > 0 && l->local_rank >= l->local_size)
            return coll__error(NULL, COLL_INVALID_ARGUMENT,
                               "%s environment: %s=%d is out of range for %s=%d", launcher,
                               lrank_v, l->local_rank, lsize_v, l->local_size);
    }
    return COLL_SUCCESS;
}

static bool has_collrun(void)
{
    return env("COLL_UNIQUE_ID") || env("COLL_RANK") || env("COLL_SIZE");
}

static bool has_torchrun(void)
{
    return env("MASTER_ADDR") || env("MASTER_PORT") || env("WORLD_SIZE") ||
           env("TORCHELASTIC_RUN_ID");
}

static bool has_mpirun(void)
{
    return env("OMPI_COMM_WORLD_RANK") || env("OMPI_COMM_WORLD_SIZE");
}

/* SLURM_JOB_ID alone is a batch script or salloc shell, not a task of a step. */
static bool has_srun(void)
{
    return env("SLURM_PROCID") != NULL;
}

static coll_status_t read_named(const char *name, struct coll_launch *l)
{
    if (!strcmp(name, "collrun"))
        return read_launcher("collrun", "COLL_RANK", "COLL_SIZE", "COLL_LOCAL_RANK",
                             "COLL_LOCAL_SIZE", l);
    if (!strcmp(name, "torchrun"))
        return read_launcher("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                             l);
    if (!strcmp(name, "mpirun"))
        return read_launcher("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                             "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", l);
    if (!strcmp(name, "srun"))
        return read_launcher("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, l);
    return coll__error(NULL, COLL_INVALID_ARGUMENT,
                       "COLL_LAUNCHER='%s' is not one of collrun, torchrun, mpirun, srun", name);
}

/* PMIx's own idea of our rank must be the launcher's: a PMIx server from another job
 * (a nested launch) would put the id where no peer looks. */
static coll_status_t check_pmix_rank(const struct coll_launch *l, const char *rank_var)
{
    const char *v = env("PMIX_RANK");
    char *end;
    long x;

    if (!v)
        return COLL_SUCCESS;
    errno = 0;
    x = strtol(v, &end, 10);
    if (errno || end == v || *end != '\0' || x != l->rank)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "%s environment: PMIX_RANK='%s' disagrees with %s=%d", l->name, v,
                           rank_var, l->rank);
    return COLL_SUCCESS;
}

bool coll__launcher_present(void)
{
    return env("COLL_LAUNCHER") || has_collrun() || has_torchrun() || has_mpirun() || has_srun();
}

coll_status_t coll__launcher_detect(struct coll_launch *l_p)
{
    const char *forced = env("COLL_LAUNCHER");
    struct coll_launch l, t, m;
    coll_status_t st;

    if (forced) {
        st = read_named(forced, &l);
        if (st != COLL_SUCCESS)
            return st;
    } else if (has_collrun()) {
        /* collrun's own variables win without cross-checks: collrun may itself run as one
         * task of srun or mpirun, whose variables then describe collrun, not us */
        st = read_named("collrun", &l);
        if (st != COLL_SUCCESS)
            return st;
    } else if (has_torchrun() || has_mpirun()) {
        bool ht = has_torchrun(), hm = has_mpirun();
        if (ht && (st = read_named("torchrun", &t)) != COLL_SUCCESS)
            return st;
        if (hm && (st = read_named("mpirun", &m)) != COLL_SUCCESS)
            return st;
        if (ht && hm && (t.rank != m.rank || t.size != m.size))
            return coll__error(NULL, COLL_INVALID_ARGUMENT,
                               "launcher environments disagree: torchrun's RANK=%d "
                               "WORLD_SIZE=%d, mpirun's OMPI_COMM_WORLD_RANK=%d "
                               "OMPI_COMM_WORLD_SIZE=%d (set COLL_LAUNCHER to choose one)",
                               t.rank, t.size, m.rank, m.size);
        l = ht ? t : m;
    } else if (has_srun()) {
        st = read_named("srun", &l);
        if (st != COLL_SUCCESS)
            return st;
    } else {
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "no launcher environment found (COLL_UNIQUE_ID from collrun, "
                           "RANK/WORLD_SIZE/MASTER_ADDR from torchrun, OMPI_COMM_WORLD_RANK "
                           "from mpirun, SLURM_PROCID from srun): start the program under one "
                           "of them, or call coll_comm_init with an id");
    }
    if (!strcmp(l.name, "collrun") && !env("COLL_UNIQUE_ID"))
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "collrun environment: COLL_UNIQUE_ID is not set");
    if (!strcmp(l.name, "mpirun")) {
        if ((st = check_pmix_rank(&l, "OMPI_COMM_WORLD_RANK")) != COLL_SUCCESS)
            return st;
        l.pmix = true;
    }
    if (!strcmp(l.name, "srun") && env("PMIX_RANK")) {
        if ((st = check_pmix_rank(&l, "SLURM_PROCID")) != COLL_SUCCESS)
            return st;
        l.pmix = true;
    }
    *l_p = l;
    return COLL_SUCCESS;
}

/* ---- 3 the TCPStore client ----------------------------------------------------------- */

/* PyTorch c10d's store protocol, as its TCPStore server (the torchrun agent's) reads it:
 * one query-type byte, then strings as a native-endian uint64 length and the bytes.
 *   SET   0 | key | value               (no answer)
 *   GET   2 | key                      -> value
 *   CHECK 4 | u64 n | n keys           -> 1 byte: 0 ready, 1 not ready
 *   WAIT  5 | u64 n | n keys           -> 1 byte 0 once every key is set
 */
enum { Q_SET = 0, Q_GET = 2, Q_CHECK = 4, Q_WAIT = 5 };

static coll_status_t store_resolve(const char *host, const char *port, struct addrinfo **res_p)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC};
    int rc = getaddrinfo(host, port, &hints, res_p);

    if (rc != 0)
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "torchrun environment: MASTER_ADDR='%s' (port MASTER_PORT=%s) does "
                           "not resolve: %s",
                           host, port, gai_strerror(rc));
    return COLL_SUCCESS;
}

/* A connect to a local port that nobody listens on may pick that very port as its own
 * source port, and TCP's simultaneous open then connects the socket to itself: it would
 * read its own query back as the answer, and hold the port that rank 0 is about to serve
 * (MASTER_PORT under torchrun's c10d rendezvous is a port torchrun found free). */
static bool connected_to_itself(int fd)
{
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof(me), pl = sizeof(peer);

    memset(&me, 0, sizeof(me));
    memset(&peer, 0, sizeof(peer));
    return coll__sys.getsockname(fd, (struct sockaddr *)&me, &ml) == 0 &&
           coll__sys.getpeername(fd, (struct sockaddr *)&peer, &pl) == 0 && ml == pl &&
           memcmp(&me, &peer, ml) == 0;
}

/* Connect to the store, retrying while nobody listens yet: the store of a rank-0 process
 * may start after ours. */
static coll_status_t store_connect(const char *host, const char *port, uint64_t deadline_ns,
                                   int64_t timeout_ms, int *fd_p)
{
    struct addrinfo *res = NULL;
    unsigned backoff_ms = 10;
    int last_err = ETIMEDOUT;
    coll_status_t st;

    st = store_resolve(host, port, &res);
    if (st != COLL_SUCCESS)
        return st;
    for (;;) {
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            int fd = coll__sys.socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
                                      SOCK_CLOEXEC, ai->ai_protocol);
            int err = 0, one = 1;
            socklen_t el = sizeof(err);

            if (fd < 0) {
                last_err = errno;
                continue;
            }
            if (coll__sys.connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
                struct pollfd pf = {.fd = fd, .events = POLLOUT};
                err = errno;
                if (err == EINPROGRESS) {
                    int n = coll__sys.poll(&pf, 1, COLL_MAX(1, COLL_MIN(ms_left(deadline_ns),
                                                                        1000)));
                    if (n <= 0)
                        err = ETIMEDOUT;
                    else if (coll__sys.getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
                        err = errno;
                }
            }
            if (!err && connected_to_itself(fd))
                err = ECONNREFUSED; /* nobody listens yet, as far as we can tell */
            if (!err) {
                (void)coll__sys.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                freeaddrinfo(res);
                *fd_p = fd;
                return COLL_SUCCESS;
            }
            last_err = err;
            coll__sys.close(fd);
        }
        if (ms_left(deadline_ns) == 0)
            break;
        coll__sys.poll(NULL, 0, COLL_MIN((int)backoff_ms, ms_left(deadline_ns)));
        backoff_ms = COLL_MIN(backoff_ms * 2, 500u);
    }
    freeaddrinfo(res);
    return coll__error(NULL, COLL_TIMEOUT,
                       "torchrun environment: the store at MASTER_ADDR='%s' MASTER_PORT=%s is "
                       "not reachable within %lld ms (COLL_BOOTSTRAP_TIMEOUT_MS; last error: "
                       "%s)",
                       host, port, (long long)timeout_ms, strerror(last_err));
}

static size_t put_str(uint8_t *p, const void *s, size_t len)
{
    uint64_t n = len;
    memcpy(p, &n, sizeof(n));
    memcpy(p + sizeof(n), s, len);
    return sizeof(n) + len;
}

static coll_status_t store_io_error(const char *host, const char *port, const char *what,
                                    int err, int64_t timeout_ms)
{
    if (err == ETIMEDOUT)
        return coll__error(NULL, COLL_TIMEOUT,
                           "torchrun environment: the store at %s:%s did not %s within %lld ms "
                           "(COLL_BOOTSTRAP_TIMEOUT_MS): did rank 0 start?",
                           host, port, what, (long long)timeout_ms);
    return coll__error(NULL, COLL_REMOTE_ERROR,
                       "torchrun environment: the store at %s:%s failed to %s: %s", host, port,
                       what, err == EPIPE ? "connection closed" : strerror(err));
}

coll_status_t coll__tcpstore_set(const char *host, const char *port, const char *key,
                                 const void *val, size_t len, int64_t timeout_ms)
{
    uint64_t deadline = coll__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    uint8_t q[2 * (1 + 8 + STORE_KEY_MAX) + 8 + 8 + STORE_VAL_MAX], ans;
    size_t klen = strlen(key), o = 0;
    coll_status_t st;
    int fd = -1, err;

    if (klen > STORE_KEY_MAX || len > STORE_VAL_MAX)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "store key or value too long");
    st = store_connect(host, port, deadline, timeout_ms, &fd);
    if (st != COLL_SUCCESS)
        return st;
    /* SET has no answer; the CHECK behind it on the same connection does, and the server
     * handles one connection's queries in order, so its answer means the key is there */
    q[o++] = Q_SET;
    o += put_str(q + o, key, klen);
    o += put_str(q + o, val, len);
    q[o++] = Q_CHECK;
    {
        uint64_t one = 1;
        memcpy(q + o, &one, sizeof(one));
        o += sizeof(one);
    }
    o += put_str(q + o, key, klen);
    err = coll__io_full(fd, q, o, deadline, true);
    if (!err)
        err = coll__io_full(fd, &ans, 1, deadline, false);
    coll__sys.close(fd);
    if (err)
        return store_io_error(host, port, "take the unique id", err, timeout_ms);
    if (ans != 0)
        return coll__error(NULL, COLL_REMOTE_ERROR,
                           "torchrun environment: the store at %s:%s does not hold key '%s' "
                           "right after setting it (answer %u)",
                           host, port, key, ans);
    return COLL_SUCCESS;
}

/* One WAIT then GET on a fresh connection: 0, or the errno that ended it. */
static int store_get_once(int fd, const char *key, void *val, size_t len, uint64_t deadline,
                          uint64_t *vlen_p)
{
    uint8_t q[1 + 8 + 8 + STORE_KEY_MAX], ans;
    size_t klen = strlen(key), o = 0;
    uint64_t one = 1;
    int err;

    q[o++] = Q_WAIT;
    memcpy(q + o, &one, sizeof(one));
    o += sizeof(one);
    o += put_str(q + o, key, klen);
    err = coll__io_full(fd, q, o, deadline, true);
    if (!err)
        err = coll__io_full(fd, &ans, 1, deadline, false);
    if (err)
        return err;
    o = 0;
    q[o++] = Q_GET;
    o += put_str(q + o, key, klen);
    err = coll__io_full(fd, q, o, deadline, true);
    if (!err)
        err = coll__io_full(fd, vlen_p, sizeof(*vlen_p), deadline, false);
    if (!err && *vlen_p == len)
        err = coll__io_full(fd, val, len, deadline, false);
    return err;
}

coll_status_t coll__tcpstore_get(const char *host, const char *port, const char *key, void *val,
                                 size_t len, int64_t timeout_ms)
{
    uint64_t deadline = coll__now_ns() + (uint64_t)timeout_ms * 1000000ull, vlen = 0;
    unsigned backoff_ms = 10;
    coll_status_t st;
    int fd = -1, err;

    if (strlen(key) > STORE_KEY_MAX)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "store key too long");
    for (;;) {
        st = store_connect(host, port, deadline, timeout_ms, &fd);
        if (st != COLL_SUCCESS)
            return st;
        err = store_get_once(fd, key, val, len, deadline, &vlen);
        coll__sys.close(fd);
        /* A store that closes on us may be the one rank 0 served for an earlier comm and is
         * now taking down: ask again (the next one is rank 0's for this comm). */
        if ((err != EPIPE && err != ECONNRESET) || ms_left(deadline) == 0)
            break;
        coll__sys.poll(NULL, 0, COLL_MIN((int)backoff_ms, ms_left(deadline)));
        backoff_ms = COLL_MIN(backoff_ms * 2, 200u);
    }
    if (err)
        return store_io_error(host, port, "give the unique id from rank 0", err, timeout_ms);
    if (vlen != len)
        return coll__error(NULL, COLL_REMOTE_ERROR,
                           "torchrun environment: key '%s' in the store at %s:%s holds %llu "
                           "bytes, expected %zu",
                           key, host, port, (unsigned long long)vlen, len);
    return COLL_SUCCESS;
}

/* ---- 4 a one-key TCPStore server ----------------------------------------------------- */

/* Outside torchrun's agent (plain RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or an agent with
 * the c10d rendezvous) nobody serves MASTER_PORT, and rank 0 is the one that would. This
 * serves exactly one key: enough for the peers' WAIT and GET, nothing else is kept. */
#define SRV_MAX_CONNS 256
#define SRV_BUF 1024

struct srv_conn {
    int fd;
    size_t len;
    uint8_t buf[SRV_BUF];
};

struct store_srv {
    int lfd, stopfd[2];
    pthread_t tid;
    char key[STORE_KEY_MAX + 1];
    uint8_t val[STORE_VAL_MAX];
    size_t vlen;
    struct srv_conn *conns[SRV_MAX_CONNS];
};

/* Parse one query at the head of c->buf: bytes used, 0 for "need more", -1 to drop. */
static long srv_query(struct store_srv *s, struct srv_conn *c)
{
    const uint8_t *p = c->buf, *end = c->buf + c->len;
    size_t klen = strlen(s->key);
    uint64_t n, nk = 1;
    uint8_t qt;
    bool all_ours = true;

    if (p == end)
        return 0;
    qt = *p++;
    if (qt == Q_CHECK || qt == Q_WAIT) {
        if ((size_t)(end - p) < 8)
            return 0;
        memcpy(&nk, p, 8);
        p += 8;
        if (nk == 0 || nk > 16)
            return -1;
    } else if (qt != Q_SET && qt != Q_GET) {
        return -1;
    }
    for (uint64_t i = 0; i < nk; i++) {
        if ((size_t)(end - p) < 8)
            return 0;
        memcpy(&n, p, 8);
        p += 8;
        if (n > STORE_KEY_MAX)
            return -1;
        if ((size_t)(end - p) < n)
            return 0;
        all_ours = all_ours && n == klen && !memcmp(p, s->key, klen);
        p += n;
    }
    if (qt == Q_SET) { /* the value is skipped: only our own key is served */
        if ((size_t)(end - p) < 8)
            return 0;
        memcpy(&n, p, 8);
        p += 8;
        if (n > SRV_BUF)
            return -1;
        if ((size_t)(end - p) < n)
            return 0;
        p += n;
    } else if (qt == Q_GET) {
        uint8_t out[8 + STORE_VAL_MAX];
        uint64_t vl = s->vlen;
        if (!all_ours)
            return -1; /* PyTorch's server fails a GET of a missing key too */
        memcpy(out, &vl, 8);
        memcpy(out + 8, s->val, s->vlen);
        if (coll__io_full(c->fd, out, 8 + s->vlen, coll__now_ns() + 1000000000ull, true))
            return -1;
    } else {
        uint8_t a = all_ours ? 0 : 1;
        if (qt == Q_WAIT && !all_ours)
            return (long)(p - c->buf); /* never set here: the peer's own deadline ends it */
        if (coll__io_full(c->fd, &a, 1, coll__now_ns() + 1000000000ull, true))
            return -1;
    }
    return (long)(p - c->buf);
}

static void srv_drop(struct store_srv *s, int i)
{
    coll__sys.close(s->conns[i]->fd);
    free(s->conns[i]);
    s->conns[i] = NULL;
}

static void *srv_main(void *arg)
{
    struct store_srv *s = arg;
    struct pollfd pf[SRV_MAX_CONNS + 2];
    int idx[SRV_MAX_CONNS + 2];

    for (;;) {
        nfds_t n = 0;
        pf[n++] = (struct pollfd){.fd = s->stopfd[0], .events = POLLIN};
        pf[n++] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
        for (int i = 0; i < SRV_MAX_CONNS; i++)
            if (s->conns[i]) {
                idx[n] = i;
                pf[n++] = (struct pollfd){.fd = s->conns[i]->fd, .events = POLLIN};
            }
        if (coll__sys.poll(pf, n, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[0].revents)
            break;
        for (nfds_t k = 2; k < n; k++) {
            struct srv_conn *c = s->conns[idx[k]];
            ssize_t r;
            long used;
            if (!pf[k].revents)
                continue;
            r = coll__sys.recv(c->fd, c->buf + c->len, SRV_BUF - c->len, 0);
            if (r <= 0) {
                if (r < 0 && (errno == EAGAIN || errno == EINTR))
                    continue;
                srv_drop(s, idx[k]);
                continue;
            }
            c->len += (size_t)r;
            while ((used = srv_query(s, c)) > 0) {
                memmove(c->buf, c->buf + used, c->len - (size_t)used);
                c->len -= (size_t)used;
            }
            if (used < 0 || c->len == SRV_BUF)
                srv_drop(s, idx[k]);
        }
        if (pf[1].revents & POLLIN) {
            int fd = coll__sys.accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            int slot = -1;
            for (int i = 0; fd >= 0 && i < SRV_MAX_CONNS && slot < 0; i++)
                if (!s->conns[i])
                    slot = i;
            if (fd >= 0 && slot >= 0 && (s->conns[slot] = calloc(1, sizeof(struct srv_conn))))
                s->conns[slot]->fd = fd;
            else if (fd >= 0)
                coll__sys.close(fd);
        }
    }
    return NULL;
}

/* Bind MASTER_PORT, waiting out a short-lived holder. The peers dial MASTER_PORT before
 * rank 0 listens; on loopback such a dial can pick MASTER_PORT itself as its source port
 * and connect to itself, and until that peer sees its own query come back and closes the
 * socket (milliseconds; it then dials again), the port is taken. A holder that stays is
 * reported as before, after SRV_BIND_WAIT_MS. */
#define SRV_BIND_WAIT_MS 5000
static int srv_bind(int fd, const struct addrinfo *res)
{
    const struct timespec pause = {0, 10 * 1000000L};

    for (int waited = 0;; waited += 10) {
        if (coll__sys.bind(fd, res->ai_addr, res->ai_addrlen) == 0)
            return 0;
        if (errno != EADDRINUSE || waited >= SRV_BIND_WAIT_MS)
            return -1;
        nanosleep(&pause, NULL);
    }
}

static coll_status_t srv_start(const char *port, const char *key, const void *val, size_t len,
                               struct store_srv **srv_p)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_family = AF_INET6,
                             .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    struct store_srv *s;
    int one = 1, zero = 0, rc;

    s = calloc(1, sizeof(*s));
    if (!s)
        return coll__error(NULL, COLL_SYSTEM_ERROR, "out of memory for the store server");
    s->lfd = s->stopfd[0] = s->stopfd[1] = -1;
    snprintf(s->key, sizeof(s->key), "%s", key);
    memcpy(s->val, val, len);
    s->vlen = len;
    rc = getaddrinfo(NULL, port, &hints, &res);
    if (rc != 0) {
        hints.ai_family = AF_INET;
        rc = getaddrinfo(NULL, port, &hints, &res);
    }
    if (rc != 0) {
        free(s);
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "torchrun environment: MASTER_PORT=%s is not a port: %s", port,
                           gai_strerror(rc));
    }
    s->lfd = coll__sys.socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->lfd < 0 && res->ai_family == AF_INET6) { /* a kernel without IPv6 */
        freeaddrinfo(res);
        res = NULL;
        hints.ai_family = AF_INET;
        if (getaddrinfo(NULL, port, &hints, &res) == 0)
            s->lfd = coll__sys.socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (!res) {
            free(s);
            return coll__error(NULL, COLL_SYSTEM_ERROR,
                               "torchrun environment: no address to serve MASTER_PORT=%s on",
                               port);
        }
    }
    if (s->lfd >= 0) {
        (void)coll__sys.setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (res->ai_family == AF_INET6) /* one socket for IPv4 and IPv6 peers */
            (void)coll__sys.setsockopt(s->lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (s->lfd < 0 || srv_bind(s->lfd, res) < 0 ||
        coll__sys.listen(s->lfd, SOMAXCONN) < 0 || pipe2(s->stopfd, O_CLOEXEC) < 0) {
        coll_status_t st = coll__sys_error(NULL, errno,
                                           "torchrun environment: rank 0 cannot serve the "
                                           "unique id on MASTER_PORT=%s",
                                           port);
        freeaddrinfo(res);
        if (s->lfd >= 0)
            coll__sys.close(s->lfd);
        if (s->stopfd[0] >= 0)
            close(s->stopfd[0]), close(s->stopfd[1]);
        free(s);
        return st;
    }
    freeaddrinfo(res);
    rc = pthread_create(&s->tid, NULL, srv_main, s);
    if (rc) {
        coll__sys.close(s->lfd);
        close(s->stopfd[0]), close(s->stopfd[1]);
        free(s);
        return coll__sys_error(NULL, rc, "cannot start the store server thread");
    }
    *srv_p = s;
    return COLL_SUCCESS;
}

static void srv_stop(struct store_srv *s)
{
    ssize_t r;

    if (!s)
        return;
    r = write(s->stopfd[1], "x", 1);
    (void)r;
    pthread_join(s->tid, NULL);
    for (int i = 0; i < SRV_MAX_CONNS; i++)
        if (s->conns[i])
            srv_drop(s, i);
    coll__sys.close(s->lfd);
    close(s->stopfd[0]);
    close(s->stopfd[1]);
    free(s);
}

static coll_status_t torch_exchange(const struct coll_launch *l, coll_unique_id_t *id,
                                    unsigned seq, int64_t timeout_ms, struct store_srv **srv_p)
{
    const char *host = env("MASTER_ADDR"), *port = env("MASTER_PORT");
    const char *run = env("TORCHELASTIC_RUN_ID"), *attempt = env("TORCHELASTIC_RESTART_COUNT");
    const char *agent = env("TORCHELASTIC_USE_AGENT_STORE");
    char key[STORE_KEY_MAX], hex[COLL_UNIQUE_ID_STRLEN];
    struct addrinfo *res = NULL;
    coll_status_t st;

    if (!host || !port)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "torchrun environment: %s is not set",
                           !host ? "MASTER_ADDR" : "MASTER_PORT");
    /* a name that does not resolve fails here, on every rank, before anyone waits */
    st = store_resolve(host, port, &res);
    if (st != COLL_SUCCESS)
        return st;
    freeaddrinfo(res);
    /* a restarted worker group reuses the agent's store: the attempt keeps ids apart */
    snprintf(key, sizeof(key), "coll/unique_id/%s/%s/%u", run ? run : "-",
             attempt ? attempt : "0", seq);
    if (l->rank == 0) {
        COLL_CHECK_GOTO(coll_get_unique_id(id), st, out);
        COLL_CHECK_GOTO(coll_unique_id_to_string(id, hex, sizeof(hex)), st, out);
        if (agent && !strcmp(agent, "True"))
            st = coll__tcpstore_set(host, port, key, hex, 2 * COLL_UNIQUE_ID_BYTES, timeout_ms);
        else
            st = srv_start(port, key, hex, 2 * COLL_UNIQUE_ID_BYTES, srv_p);
        goto out;
    }
    COLL_CHECK_GOTO(coll__tcpstore_get(host, port, key, hex, 2 * COLL_UNIQUE_ID_BYTES,
                                       timeout_ms),
                    st, out);
    hex[2 * COLL_UNIQUE_ID_BYTES] = '\0';
    st = coll_unique_id_from_string(hex, id);
    if (st != COLL_SUCCESS)
        st = coll__error(NULL, COLL_REMOTE_ERROR,
                         "torchrun environment: key '%s' in the store at %s:%s is not a unique "
                         "id",
                         key, host, port);
out:
    return st;
}

/* ---- 5 PMIx -------------------------------------------------------------------------- */

#if COLL_HAVE_PMIX
static coll_status_t pmix_exchange(const struct coll_launch *l, coll_unique_id_t *id,
                                   unsigned seq, int64_t timeout_ms)
{
    pmix_proc_t me, all, root;
    pmix_value_t val, *vp = NULL;
    pmix_info_t info[2];
    pmix_status_t rc;
    pmix_key_t key;
    bool collect = true;
    int tmo = (int)COLL_MAX(1, COLL_MIN(timeout_ms / 1000, INT_MAX));
    coll_status_t st = COLL_SUCCESS;

    /* Init and finalize around each exchange: mpirun counts a process that ends inside
     * PMIx as failed, and PMIx counts inits, so an application's own MPI_Init shares it. */
    rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS)
        return coll__error(NULL, COLL_SYSTEM_ERROR,
                           "%s environment: PMIx_Init failed: %s (PMIX_NAMESPACE='%s')",
                           l->name, PMIx_Error_string(rc),
                           env("PMIX_NAMESPACE") ? env("PMIX_NAMESPACE") : "");
    if ((int)me.rank != l->rank) {
        st = coll__error(NULL, COLL_INVALID_ARGUMENT,
                         "%s environment: PMIx says rank %u, the launcher's variables say %d",
                         l->name, me.rank, l->rank);
        goto out_fini;
    }
    PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
    PMIX_LOAD_PROCID(&root, me.nspace, 0);
    if (PMIx_Get(&all, PMIX_JOB_SIZE, NULL, 0, &vp) == PMIX_SUCCESS && vp) {
        bool bad = vp->type == PMIX_UINT32 && (int64_t)vp->data.uint32 != l->size;
        uint32_t got = vp->type == PMIX_UINT32 ? vp->data.uint32 : 0;
        PMIX_VALUE_RELEASE(vp);
        vp = NULL;
        if (bad) {
            st = coll__error(NULL, COLL_INVALID_ARGUMENT,
                             "%s environment: PMIx job size %u disagrees with the launcher's "
                             "size %d",
                             l->name, got, l->size);
            goto out_fini;
        }
    }
    snprintf(key, sizeof(key), "coll.uid.%u", seq);
    if (l->rank == 0) {
        COLL_CHECK_GOTO(coll_get_unique_id(id), st, out_fini);
        val.type = PMIX_BYTE_OBJECT;
        val.data.bo.bytes = id->internal;
        val.data.bo.size = COLL_UNIQUE_ID_BYTES;
        rc = PMIx_Put(PMIX_GLOBAL, key, &val);
        if (rc == PMIX_SUCCESS)
            rc = PMIx_Commit();
        if (rc != PMIX_SUCCESS) {
            st = coll__error(NULL, COLL_SYSTEM_ERROR, "%s environment: PMIx_Put/Commit: %s",
                             l->name, PMIx_Error_string(rc));
            goto out_fini;
        }
    }
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &tmo, PMIX_INT);
    rc = PMIx_Fence(&all, 1, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc != PMIX_SUCCESS) {
        st = coll__error(NULL, rc == PMIX_ERR_TIMEOUT ? COLL_TIMEOUT : COLL_REMOTE_ERROR,
                         "%s environment: PMIx_Fence over %d ranks failed: %s (timeout %d s)",
                         l->name, l->size, PMIx_Error_string(rc), tmo);
        goto out_fini;
    }
    if (l->rank != 0) {
        uint64_t deadline = coll__now_ns() + (uint64_t)tmo * 1000000000ull;
        bool refresh = false;

        /* After the fence the key is there, but a client that re-initialized may answer
         * from what it cached of rank 0 at an earlier exchange (NOT-FOUND, seen under
         * mpirun at the second comm): ask again with its cache refreshed. */
        for (;;) {
            pmix_info_t gi;
            struct timespec ts = {0, 10 * 1000000L};

            PMIX_INFO_LOAD(&gi, PMIX_GET_REFRESH_CACHE, &refresh, PMIX_BOOL);
            rc = PMIx_Get(&root, key, &gi, 1, &vp);
            PMIX_INFO_DESTRUCT(&gi);
            if (rc != PMIX_ERR_NOT_FOUND || coll__now_ns() >= deadline)
                break;
            refresh = true;
            nanosleep(&ts, NULL);
        }
        if (rc != PMIX_SUCCESS || !vp || vp->type != PMIX_BYTE_OBJECT ||
            vp->data.bo.size != COLL_UNIQUE_ID_BYTES) {
            st = coll__error(NULL, COLL_REMOTE_ERROR,
                             "%s environment: no unique id from rank 0 through PMIx: %s",
                             l->name, rc != PMIX_SUCCESS ? PMIx_Error_string(rc)
                                                         : "wrong type or size");
        } else {
            struct coll_id_info info;
            memcpy(id->internal, vp->data.bo.bytes, COLL_UNIQUE_ID_BYTES);
            if (coll__id_decode(id, &info) != COLL_SUCCESS)
                st = coll__error(NULL, COLL_REMOTE_ERROR,
                                 "%s environment: rank 0's PMIx value '%s' is not a unique id",
                                 l->name, key);
        }
        if (vp)
            PMIX_VALUE_RELEASE(vp);
    }
out_fini:
    PMIx_Finalize(NULL, 0);
    return st;
}
#endif

/* ---- 6 a private file ---------------------------------------------------------------- */

/* Under srun without PMIx the only channel all tasks share with nobody else is the file
 * system: rank 0 writes the id to a file of mode 0600 in a directory of mode 0700, the
 * others read it once it appears (rename makes it appear whole) and refuse a file that is
 * not this user's or that others could read. */
static coll_status_t file_path(char *path, size_t n, unsigned seq, char *dir, size_t dn)
{
    const char *d = env("COLL_ID_DIR"), *home = env("HOME");
    const char *job = env("SLURM_JOB_ID"), *step = env("SLURM_STEP_ID");

    if (!step)
        step = env("SLURM_STEPID");
    if (!job || !step)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "srun environment: %s is not set",
                           !job ? "SLURM_JOB_ID" : "SLURM_STEP_ID");
    if (d)
        snprintf(dir, dn, "%s", d);
    else if (home)
        snprintf(dir, dn, "%s/.coll", home);
    else
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "srun environment: neither COLL_ID_DIR nor HOME is set (a directory "
                           "all hosts share, for the unique id; or run srun --mpi=pmix)");
    if ((size_t)snprintf(path, n, "%s/slurm-%s.%s-%u.id", dir, job, step, seq) >= n)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "srun environment: COLL_ID_DIR is too "
                                                        "long");
    return COLL_SUCCESS;
}

bool coll__slurm_first_host(const char *list, char *out, size_t n)
{
    size_t o = 0;
    const char *p = list;

    if (!list || !*list || n == 0)
        return false;
    while (*p && *p != ',' && *p != '[') {
        if (o + 1 >= n)
            return false;
        out[o++] = *p++;
    }
    if (*p == '[') { /* the first number of the first range, zero padding kept */
        p++;
        if (*p < '0' || *p > '9')
            return false;
        while (*p >= '0' && *p <= '9') {
            if (o + 1 >= n)
                return false;
            out[o++] = *p++;
        }
        if (*p != '-' && *p != ',' && *p != ']')
            return false;
        if (!strchr(p, ']'))
            return false;
    }
    out[o] = '\0';
    return o > 0;
}

static coll_status_t file_write(const char *dir, const char *path, const coll_unique_id_t *id)
{
    char tmp[PATH_MAX], hex[COLL_UNIQUE_ID_STRLEN];
    coll_status_t st;
    ssize_t w;
    int fd;

    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return coll__sys_error(NULL, errno, "srun environment: cannot create COLL_ID_DIR '%s'",
                               dir);
    COLL_CHECK_GOTO(coll_unique_id_to_string(id, hex, sizeof(hex)), st, out);
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return coll__sys_error(NULL, errno, "srun environment: cannot create '%s'", tmp);
    w = write(fd, hex, 2 * COLL_UNIQUE_ID_BYTES);
    if (close(fd) < 0 || w != 2 * COLL_UNIQUE_ID_BYTES || rename(tmp, path) < 0) {
        st = coll__sys_error(NULL, errno, "srun environment: cannot write '%s'", path);
        unlink(tmp);
        return st;
    }
    st = COLL_SUCCESS;
out:
    return st;
}

static coll_status_t file_read(const char *path, coll_unique_id_t *id, int64_t timeout_ms)
{
    uint64_t deadline = coll__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    char hex[COLL_UNIQUE_ID_STRLEN + 1], host[256] = "?";
    unsigned backoff_ms = 10;
    struct stat sb;

    for (;;) {
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t r;
            if (fstat(fd, &sb) < 0 || sb.st_uid != getuid() || (sb.st_mode & 077)) {
                close(fd);
                return coll__error(NULL, COLL_INVALID_ARGUMENT,
                                   "srun environment: '%s' is not this user's or others may "
                                   "read it: refusing the unique id in it",
                                   path);
            }
            r = read(fd, hex, 2 * COLL_UNIQUE_ID_BYTES);
            close(fd);
            if (r != 2 * COLL_UNIQUE_ID_BYTES)
                return coll__error(NULL, COLL_INVALID_ARGUMENT,
                                   "srun environment: '%s' holds no unique id", path);
            hex[2 * COLL_UNIQUE_ID_BYTES] = '\0';
            return coll_unique_id_from_string(hex, id);
        }
        if (ms_left(deadline) == 0)
            break;
        coll__sys.poll(NULL, 0, COLL_MIN((int)backoff_ms, ms_left(deadline)));
        backoff_ms = COLL_MIN(backoff_ms * 2, 200u);
    }
    coll__slurm_first_host(env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST")
                                                      : env("SLURM_JOB_NODELIST"),
                           host, sizeof(host));
    return coll__error(NULL, COLL_TIMEOUT,
                       "srun environment: rank 0 (on host '%s', the first of "
                       "SLURM_STEP_NODELIST) wrote no unique id to '%s' within %lld ms: "
                       "COLL_ID_DIR must be a directory all hosts share, or run srun "
                       "--mpi=pmix",
                       host, path, (long long)timeout_ms);
}

/* ---- 7 coll_comm_init_env ------------------------------------------------------------ */

coll_status_t coll__launcher_comm_init(coll_comm_t **comm_p)
{
    unsigned seq = atomic_fetch_add(&launch_seq, 1);
    int64_t timeout_ms = launch_timeout_ms();
    struct store_srv *srv = NULL;
    char path[PATH_MAX] = "", dir[PATH_MAX];
    struct coll_launch l;
    coll_unique_id_t id;
    coll_status_t st;

    st = coll__launcher_detect(&l);
    if (st != COLL_SUCCESS)
        return st;
    COLL_INFO(COLL_SUB_INIT, "launcher %s: rank %d of %d, local rank %d of %d%s", l.name,
              l.rank, l.size, l.local_rank, l.local_size, l.pmix ? ", id through PMIx" : "");
    if (!strcmp(l.name, "collrun")) {
        /* collrun's root serves one rendezvous: a second comm would wait out the timeout */
        if (atomic_load(&collrun_used))
            return coll__error(NULL, COLL_INVALID_USAGE,
                               "collrun environment: COLL_UNIQUE_ID made one communicator "
                               "already; make more with coll_comm_split, or with an id that "
                               "one rank broadcasts over the first");
        st = coll_unique_id_from_string(env("COLL_UNIQUE_ID"), &id);
        if (st != COLL_SUCCESS)
            return coll__error(NULL, st, "COLL_UNIQUE_ID is malformed: %s",
                               coll_last_error(NULL));
    } else if (!strcmp(l.name, "torchrun")) {
        st = torch_exchange(&l, &id, seq, timeout_ms, &srv);
    } else if (l.pmix) {
#if COLL_HAVE_PMIX
        st = pmix_exchange(&l, &id, seq, timeout_ms);
#else
        st = coll__error(NULL, COLL_INVALID_ARGUMENT,
                         "%s environment: the unique id travels through PMIx, and this coll "
                         "was built without it (install libpmix-dev and rebuild)",
                         l.name);
#endif
    } else {
        st = file_path(path, sizeof(path), seq, dir, sizeof(dir));
        if (st == COLL_SUCCESS && l.rank == 0) {
            st = coll_get_unique_id(&id);
            if (st == COLL_SUCCESS)
                st = file_write(dir, path, &id);
        } else if (st == COLL_SUCCESS) {
            st = file_read(path, &id, timeout_ms);
            path[0] = '\0'; /* only rank 0 removes it */
        }
    }
    if (st == COLL_SUCCESS)
        st = coll_comm_init(comm_p, l.size, &id, l.rank);
    if (st == COLL_SUCCESS && !strcmp(l.name, "collrun"))
        atomic_store(&collrun_used, true);
    /* every rank joined (or the init failed): nobody needs the id's channel any more */
    srv_stop(srv);
    if (path[0] && l.rank == 0)
        unlink(path);
    return st;
}
