/*
 * shm.c - the shared-memory transport: ranks on one host move messages through rings in
 * memory both map, and large messages in a single copy straight out of the sender's buffer
 * (cross-memory attach, process_vm_readv).
 *
 * Divisions: 1 layout, 2 the doorbell (wake-ups and segment hand-over), 3 segments,
 * 4 channels and connect, 5 moving data, 6 sleeping, 7 vtable.
 *
 * One ring per direction of a pair. The receiver owns it: it creates a memfd, reserves its
 * pages (fallocate, so a full memory cgroup is an error at connect, never a SIGBUS later),
 * maps it and hands the fd to the sender over a unix datagram socket (SCM_RIGHTS). Nothing
 * has a name in /dev/shm: the memory goes away with the last process that maps it, so a
 * rank killed at any point leaks nothing. The same socket carries wake-ups: a rank about to
 * sleep raises a flag in every ring it owns and sleeps in the engine's epoll_wait; a peer
 * that changes something the sleeper waits for (new data, freed slots, a finished single-
 * copy read) and sees the flag rings its socket. The flag and the data follow Dekker's
 * pattern with sequentially consistent atomics, so a wake-up is never lost.
 *
 * Trust: the peer can write anything into a ring we map. Every header read from shared
 * memory is copied out once and checked against the transfer we posted (op, tag, length,
 * fragment offset) before any byte moves; head counters that run ahead of the ring are a
 * protocol error. Datagrams are accepted only from the pid the bootstrap published for the
 * rank they claim (SCM_CREDENTIALS, filled in by the kernel).
 */
#include "transport.h"
#include "shm.h"
#include "../base/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- 1 layout ------------------------------------------------------------------------ */

#define SHM_MAGIC 0x4d485343u /* "CSHM" */
#define SHM_VERSION 1u
#define SHM_SLOTS 16u
#define SHM_SLOT_DATA (16u * 1024u)
#define SHM_SLOT_BYTES (64u + SHM_SLOT_DATA)
/* From this size on a message moves by one process_vm_readv of the receiver (when the
 * pair allows it): below it the two copies through a slot cost less than the syscall. */
#define SHM_RDV_MIN (16u * 1024u)
#define SHM_CL 64

enum { SLOT_EAGER = 1, SLOT_RDV = 2 };

/* A ring's owner_closed word. FAILED (shutdown: its comm failed or was aborted) makes every
 * peer with work for it fail at once. LEFT (fini on a healthy comm: it destroyed the comm,
 * or is exiting) is not a failure by itself: the owner finished its calls, and what it wrote
 * before may still be unread, so a peer fails only when it needs something more from it
 * (as for a peer whose pidfd says it exited). Any other value is read as FAILED. */
enum { SHM_OPEN = 0, SHM_CLOSED_FAILED = 1, SHM_CLOSED_LEFT = 2 };

/* A slot's header as written by the sender; the receiver copies it out before checking. */
struct shm_slot_hdr {
    uint64_t seq;
    uint64_t len;  /* the whole message */
    uint64_t off;  /* EAGER: where this fragment goes; RDV: 0 */
    uint64_t addr; /* RDV: the message in the sender's address space */
    uint32_t tag;
    uint32_t kind;
    uint32_t frag; /* EAGER: bytes in this slot */
    uint32_t pad;
    uint8_t sig[COLL_SIG_CALL_BYTES]; /* the call's: every message carries it (agree.h) */
};
_Static_assert(sizeof(struct shm_slot_hdr) <= 64, "slot header fits its cache line");

/* The ring a receiver owns for one sender. Each field written by one side has its own
 * cache line, so the two sides do not bounce lines they do not share. */
struct shm_ring {
    uint32_t magic, version;
    uint64_t comm_id;
    int32_t owner, sender;
    uint32_t slots, slot_data;
    uint64_t probe_addr;   /* owner's cookie, for the peer's cross-memory-attach probe */
    uint64_t probe_value;
    char closed_reason[256];   /* the owner's error when it closes, NUL-terminated */
    _Alignas(SHM_CL) _Atomic uint32_t owner_sleeping;
    _Alignas(SHM_CL) _Atomic uint32_t owner_closed; /* SHM_OPEN, SHM_CLOSED_* */
    _Alignas(SHM_CL) _Atomic uint64_t head;     /* slots produced (sender) */
    _Alignas(SHM_CL) _Atomic uint64_t tail;     /* slots consumed (owner) */
    _Alignas(SHM_CL) _Atomic uint64_t rdv_done; /* single-copy reads finished (owner) */
    _Alignas(SHM_CL) _Atomic uint32_t cma_ok;   /* owner can read the sender's memory */
    _Alignas(SHM_CL) uint8_t slot[];            /* SHM_SLOTS x SHM_SLOT_BYTES */
};

#define SHM_RING_BYTES (sizeof(struct shm_ring) + (size_t)SHM_SLOTS * SHM_SLOT_BYTES)

/* Doorbell datagrams. */
enum { BELL_RING = 1, BELL_FD = 2, BELL_FLAT = 3 };
struct shm_bell {
    uint32_t magic;
    uint32_t type;
    uint64_t comm_id;
    int32_t from;
    int32_t pad;
};

struct shm_ctx;

struct shm_chan {
    struct coll_chan chan; /* first: the executor holds a struct coll_chan * */
    struct shm_ctx *ctx;
    int peer;
    int rx_fd;                /* our ring for the peer's messages (memfd) */
    struct shm_ring *rx;      /* we own it */
    struct shm_ring *tx;      /* the peer owns it; we produce into it */
    bool fd_sent;
    bool up;
    bool dead;                /* the peer process exited */
    int pidfd;
    struct coll_pollent pid_pe;
    uint64_t tx_head;         /* our copy of tx->head */
    uint64_t rx_tail;         /* our copy of rx->tail */
    uint64_t rdv_sent;        /* single-copy descriptors sent */
    struct coll_xfer *sq_head, *sq_tail;   /* sends not yet wholly in the ring */
    struct coll_xfer *wq_head, *wq_tail;   /* single-copy sends awaiting the peer's read */
    struct coll_xfer *rq_head, *rq_tail;   /* posted receives */
};

struct shm_ctx {
    struct coll_net *net;
    int bell_fd;              /* our doorbell, bound to an abstract name */
    int send_fd;              /* unbound datagram socket for ringing the others */
    struct coll_pollent bell_pe;
    int nranks;
    struct shm_chan **chans;  /* [nranks] */
    int *peer_fd;             /* [nranks] memfds the peers handed us, -1 until then */
    int spare_fd;             /* one ring reserved at init, proof that memory is there */
    bool shut;
    bool sleeping;
    uint64_t cookie;          /* read by peers to test cross-memory attach */
    char origin[256];         /* the first failure a closing peer told us of, passed on */
    uint64_t strangers;       /* datagrams refused */
    /* the fast path's segment (shm_flat.c): rank 0's verdict, 0 not yet, 1 with flat_fd,
     * -1 none; then the state it runs on */
    int flat_verdict;
    int flat_fd;
    struct coll_shm_segment_owner flat; /* the fast path's segment, once attached */
};

/* ---- 2 the doorbell ------------------------------------------------------------------ */

static socklen_t bell_addr(struct sockaddr_un *sa, uint64_t comm_id, int rank)
{
    int n;

    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    /* abstract namespace: sun_path[0] = 0, nothing on disk to clean up */
    n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "coll-shm-%016" PRIx64 "-%d",
                 comm_id, rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Send a datagram to peer's doorbell, with an fd when fd >= 0. Returns 0, or an errno;
 * EAGAIN means its queue is full (a wake-up is already pending there). */
static int bell_send(struct shm_ctx *ctx, int peer, uint32_t type, int fd)
{
    struct shm_bell b = {SHM_MAGIC, type, ctx->net->comm_id, ctx->net->rank, 0};
    struct sockaddr_un sa;
    struct iovec iov = {&b, sizeof(b)};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct msghdr msg = {0};

    msg.msg_name = &sa;
    msg.msg_namelen = bell_addr(&sa, ctx->net->comm_id, peer);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (fd >= 0) {
        struct cmsghdr *c;
        memset(&cm, 0, sizeof(cm));
        msg.msg_control = cm.buf;
        msg.msg_controllen = sizeof(cm.buf);
        c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    /* a signal that interrupts the call sent nothing: try again, it is no failure */
    while (coll__sys.sendmsg(ctx->send_fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        if (errno != EINTR)
            return errno;
    return 0;
}

/* After changing something in a ring of the pair: ring the peer if it sleeps. ring is the
 * one the peer owns (its flag lives there). */
static void wake_peer(struct shm_chan *ch)
{
    struct shm_ring *r = ch->tx;
    if (!r)
        return;
    /* pairs with the seq_cst store of the flag before the sleeper's last look */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&r->owner_sleeping, memory_order_relaxed) &&
        atomic_exchange(&r->owner_sleeping, 0))
        (void)bell_send(ch->ctx, ch->peer, BELL_RING, -1);
}

static void close_fds(struct cmsghdr *c, struct msghdr *msg)
{
    for (; c; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < n; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                close(fd);
            }
        }
    }
}

static void bell_refuse(struct shm_ctx *ctx, const char *why)
{
    if (ctx->strangers++ == 0)
        COLL_WARN(COLL_SUB_SHM, "rank %d: shm doorbell refused a datagram (%s); further ones "
                  "are counted silently", ctx->net->rank, why);
}

/* Drain the doorbell: wake-ups need nothing more (the engine looks at every ring after an
 * event); an fd is a peer's ring for our messages. */
static void bell_cb(struct coll_pollent *pe, uint32_t events)
{
    struct shm_ctx *ctx = pe->arg;
    (void)events;

    for (;;) {
        struct shm_bell b;
        struct iovec iov = {&b, sizeof(b)};
        union {
            char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(4 * sizeof(int))];
            struct cmsghdr align;
        } cm;
        struct msghdr msg = {0};
        struct ucred cred = {0, (uid_t)-1, (gid_t)-1};
        bool have_cred = false;
        int fd = -1, nfds = 0;
        ssize_t n;

        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cm.buf;
        msg.msg_controllen = sizeof(cm.buf);
        n = coll__sys.recvmsg(ctx->bell_fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return; /* EAGAIN: drained; anything else: nothing we can do here */
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level != SOL_SOCKET)
                continue;
            if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(cred))) {
                memcpy(&cred, CMSG_DATA(c), sizeof(cred));
                have_cred = true;
            } else if (c->cmsg_type == SCM_RIGHTS) {
                nfds += (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                if (nfds == 1)
                    memcpy(&fd, CMSG_DATA(c), sizeof(int));
            }
        }
        if ((size_t)n != sizeof(b) || b.magic != SHM_MAGIC || b.comm_id != ctx->net->comm_id ||
            b.from < 0 || b.from >= ctx->nranks || b.from == ctx->net->rank ||
            (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
            close_fds(CMSG_FIRSTHDR(&msg), &msg);
            bell_refuse(ctx, "malformed or for another communicator");
            continue;
        }
        if (!have_cred || cred.pid != ctx->net->peers[b.from].pid || cred.uid != getuid()) {
            close_fds(CMSG_FIRSTHDR(&msg), &msg);
            bell_refuse(ctx, "sender is not the process the bootstrap named");
            continue;
        }
        if (b.type == BELL_FD) {
            if (nfds != 1 || ctx->peer_fd[b.from] >= 0) {
                close_fds(CMSG_FIRSTHDR(&msg), &msg);
                bell_refuse(ctx, "ring hand-over without exactly one fd, or a second one");
                continue;
            }
            ctx->peer_fd[b.from] = fd;
        } else if (b.type == BELL_FLAT) {
            /* only rank 0 makes the segment, and only once */
            if (b.from != 0 || nfds > 1 || ctx->flat_verdict != 0) {
                close_fds(CMSG_FIRSTHDR(&msg), &msg);
                bell_refuse(ctx, "fast path segment not from rank 0, or a second one");
                continue;
            }
            ctx->flat_fd = nfds ? fd : -1;
            ctx->flat_verdict = nfds ? 1 : -1;
        } else if (nfds) {
            close_fds(CMSG_FIRSTHDR(&msg), &msg);
        }
    }
}

/* ---- 3 segments ---------------------------------------------------------------------- */

int coll__shm_segment_new(const char *name, size_t size)
{
    int fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC);
    int err;

    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)size) < 0)
        goto fail;
    /* reserve now: tmpfs pages are otherwise allocated on first touch, and a failure there
     * is a SIGBUS in the middle of a collective */
    err = posix_fallocate(fd, 0, (off_t)size);
    if (err) {
        errno = err;
        goto fail;
    }
    return fd;
fail:
    err = errno;
    close(fd);
    errno = err;
    return -1;
}

int64_t coll__shm_segment_size(int fd)
{
    struct stat sb;

    return fstat(fd, &sb) < 0 ? -1 : (int64_t)sb.st_size;
}

void *coll__shm_segment_map(int fd, size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

void coll__shm_segment_unmap(void *base, size_t size)
{
    if (base)
        munmap(base, size);
}

/* A memfd holding one ring. -1 with errno on failure. */
static int ring_fd_new(void)
{
    return coll__shm_segment_new("coll-shm", SHM_RING_BYTES);
}

static struct shm_ring *ring_map(int fd)
{
    return coll__shm_segment_map(fd, SHM_RING_BYTES);
}

/* ---- 4 channels and connect ---------------------------------------------------------- */

void (*coll__shm_test_hold)(int peer);

static coll_status_t chan_fail(struct shm_chan *ch, coll_status_t st, const char *fmt, ...)
    COLL_PRINTF(3, 4);

static void xq_push(struct coll_xfer **h, struct coll_xfer **t, struct coll_xfer *x)
{
    x->next = NULL;
    if (*t)
        (*t)->next = x;
    else
        *h = x;
    *t = x;
}

static struct coll_xfer *xq_pop(struct coll_xfer **h, struct coll_xfer **t)
{
    struct coll_xfer *x = *h;
    if (x) {
        *h = x->next;
        if (!*h)
            *t = NULL;
        x->next = NULL;
    }
    return x;
}

static void xq_fail(struct coll_xfer **h, struct coll_xfer **t, coll_status_t st)
{
    struct coll_xfer *x;
    while ((x = xq_pop(h, t)))
        atomic_store(&x->status, st);
}

static void chan_fail_all(struct shm_chan *ch, coll_status_t st)
{
    xq_fail(&ch->sq_head, &ch->sq_tail, st);
    xq_fail(&ch->wq_head, &ch->wq_tail, st);
    xq_fail(&ch->rq_head, &ch->rq_tail, st);
}

static coll_status_t chan_fail(struct shm_chan *ch, coll_status_t st, const char *fmt, ...)
{
    struct coll_net *net = ch->ctx->net;
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (atomic_load(net->failed) == COLL_SUCCESS)
        coll__error(net->comm, st, "%s", msg);
    else
        st = (coll_status_t)atomic_load(net->failed);
    coll__net_fail(net, st);
    chan_fail_all(ch, st);
    return st;
}

static const char *peer_host(const struct shm_chan *ch)
{
    return ch->ctx->net->peers ? ch->ctx->net->peers[ch->peer].hostname : "?";
}

static void pid_cb(struct coll_pollent *pe, uint32_t events)
{
    struct shm_chan *ch = pe->arg;
    (void)events;
    if (ch->pidfd >= 0) {
        coll__sys.epoll_ctl(ch->ctx->net->epfd, EPOLL_CTL_DEL, ch->pidfd, NULL);
        close(ch->pidfd);
        ch->pidfd = -1;
    }
    ch->dead = true;
    COLL_INFO(COLL_SUB_SHM, "rank %d: rank %d (pid %d) exited; fine unless it is still needed",
              ch->ctx->net->rank, ch->peer, (int)ch->ctx->net->peers[ch->peer].pid);
}

static bool shm_probe(void *arg, int peer)
{
    const struct shm_ctx *ctx = arg;
    const struct coll_net *net = ctx ? ctx->net : NULL;

    return net && net->peers && peer >= 0 && peer < net->nranks && peer != net->rank &&
           net->peers[peer].host_hash == net->self->host_hash;
}

/* Can we read the peer's memory? It published where its cookie lives and what it holds. */
static bool cma_probe(struct shm_chan *ch)
{
    uint64_t v = 0;
    struct iovec l = {&v, sizeof(v)};
    struct iovec r = {(void *)(uintptr_t)ch->tx->probe_addr, sizeof(v)};
    ssize_t n = process_vm_readv(ch->ctx->net->peers[ch->peer].pid, &l, 1, &r, 1, 0);
    return n == (ssize_t)sizeof(v) && v == ch->tx->probe_value;
}

static coll_status_t chan_new(struct shm_ctx *ctx, int peer, struct shm_chan **ch_p)
{
    struct coll_net *net = ctx->net;
    struct shm_chan *ch = calloc(1, sizeof(*ch));
    int fd;

    if (!ch)
        return coll__error(net->comm, COLL_SYSTEM_ERROR, "out of memory for a shm channel");
    ch->chan.tp = &coll__shm_transport;
    ch->chan.net = net;
    ch->chan.peer = peer;
    ch->ctx = ctx;
    ch->peer = peer;
    ch->pidfd = -1;
    if (ctx->spare_fd >= 0) {
        fd = ctx->spare_fd;
        ctx->spare_fd = -1;
    } else {
        fd = ring_fd_new();
    }
    if (fd < 0) {
        int err = errno;
        free(ch);
        return coll__sys_error(net->comm, err,
                               "shm: reserving %zu bytes of shared memory for rank %d",
                               SHM_RING_BYTES, peer);
    }
    ch->rx_fd = fd;
    ch->rx = ring_map(fd);
    if (!ch->rx) {
        int err = errno;
        close(fd);
        free(ch);
        return coll__sys_error(net->comm, err, "shm: mmap of the ring for rank %d", peer);
    }
    ch->rx->magic = SHM_MAGIC;
    ch->rx->version = SHM_VERSION;
    ch->rx->comm_id = net->comm_id;
    ch->rx->owner = net->rank;
    ch->rx->sender = peer;
    ch->rx->slots = SHM_SLOTS;
    ch->rx->slot_data = SHM_SLOT_DATA;
    ch->rx->probe_addr = (uint64_t)(uintptr_t)&ctx->cookie;
    ch->rx->probe_value = ctx->cookie;
    /* a peer that exits is seen at once through its pidfd (Linux 5.3+); without one, the
     * timeout still catches it */
    ch->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)net->peers[peer].pid, 0);
    if (ch->pidfd >= 0) {
        struct epoll_event ev = {.events = EPOLLIN};
        ch->pid_pe.cb = pid_cb;
        ch->pid_pe.arg = ch;
        ev.data.ptr = &ch->pid_pe;
        if (coll__sys.epoll_ctl(net->epfd, EPOLL_CTL_ADD, ch->pidfd, &ev) < 0) {
            close(ch->pidfd);
            ch->pidfd = -1;
        }
    } else if (errno == ESRCH) {
        ch->dead = true;
    }
    *ch_p = ch;
    return COLL_SUCCESS;
}

/* Non-blocking: hand our ring to the peer, take the peer's ring for us, check it. */
static coll_status_t shm_connect(void *arg, int peer, struct coll_chan **chan_p)
{
    struct shm_ctx *ctx = arg;
    struct coll_net *net = ctx->net;
    struct shm_chan *ch;
    struct shm_ring *tx;
    coll_status_t st;

    *chan_p = NULL;
    if (ctx->shut)
        return (coll_status_t)atomic_load(net->failed);
    if (peer < 0 || peer >= ctx->nranks || peer == net->rank)
        return coll__error(net->comm, COLL_INTERNAL_ERROR, "shm: connect to rank %d", peer);
    ch = ctx->chans[peer];
    if (!ch) {
        st = chan_new(ctx, peer, &ctx->chans[peer]);
        if (st != COLL_SUCCESS) {
            coll__net_fail(net, st);
            return st;
        }
        ch = ctx->chans[peer];
    }
    if (!ch->fd_sent) {
        int err = bell_send(ctx, peer, BELL_FD, ch->rx_fd);
        if (err == 0)
            ch->fd_sent = true;
        else if (err == ECONNREFUSED) /* bound since before the bootstrap: it is gone */
            return chan_fail(ch, COLL_REMOTE_ERROR,
                             "rank %d (%s, pid %d) has left the communicator (its doorbell is "
                             "closed)",
                             peer, peer_host(ch), (int)net->peers[peer].pid);
        else if (err != EAGAIN)
            return chan_fail(ch, COLL_SYSTEM_ERROR,
                             "shm: handing the ring to rank %d (%s) failed: %s", peer,
                             peer_host(ch), strerror(err));
    }
    /* A peer may hand over its ring, write its messages into ours and exit before we get
     * here (a root that broadcasts and leaves): its hand-over is still queued on the
     * doorbell, and what it wrote can be read. Without its ring, or without ours, it has
     * sent us nothing. */
    if (ctx->peer_fd[peer] < 0 && ctx->bell_fd >= 0)
        bell_cb(&ctx->bell_pe, EPOLLIN);
    if (ch->dead && (ctx->peer_fd[peer] < 0 || !ch->fd_sent))
        return chan_fail(ch, COLL_REMOTE_ERROR,
                         "rank %d (%s, pid %d) exited before the shared-memory channel was up",
                         peer, peer_host(ch), (int)net->peers[peer].pid);
    if (!ch->fd_sent || ctx->peer_fd[peer] < 0)
        return COLL_SUCCESS; /* not yet: the engine calls again */
    if (coll__shm_segment_size(ctx->peer_fd[peer]) < (int64_t)SHM_RING_BYTES)
        return chan_fail(ch, COLL_REMOTE_ERROR,
                         "shm: the ring rank %d (%s) handed over is too small", peer,
                         peer_host(ch));
    tx = ring_map(ctx->peer_fd[peer]);
    if (!tx)
        return chan_fail(ch, COLL_SYSTEM_ERROR, "shm: mmap of rank %d's ring failed: %s", peer,
                         strerror(errno));
    if (tx->magic != SHM_MAGIC || tx->version != SHM_VERSION || tx->comm_id != net->comm_id ||
        tx->owner != peer || tx->sender != net->rank || tx->slots != SHM_SLOTS ||
        tx->slot_data != SHM_SLOT_DATA) {
        coll__shm_segment_unmap(tx, SHM_RING_BYTES);
        return chan_fail(ch, COLL_REMOTE_ERROR,
                         "shm: the ring rank %d (%s) handed over is not one for this pair", peer,
                         peer_host(ch));
    }
    ch->tx = tx;
    ch->tx_head = atomic_load(&tx->head);
    if (ch->tx_head != 0)
        return chan_fail(ch, COLL_REMOTE_ERROR, "shm: a fresh ring from rank %d is not empty",
                         peer);
    /* single copy for this direction (peer -> us) when we may read its memory */
    atomic_store(&ch->rx->cma_ok, cma_probe(ch) ? 1u : 0u);
    ch->up = true;
    COLL_INFO(COLL_SUB_SHM, "rank %d: shm channel to rank %d up (single copy %s)", net->rank,
              peer, atomic_load(&ch->rx->cma_ok) ? "on" : "off: process_vm_readv refused");
    *chan_p = &ch->chan;
    return COLL_SUCCESS;
}

/* ---- 5 moving data ------------------------------------------------------------------- */

static uint8_t *slot_at(struct shm_ring *r, uint64_t i)
{
    return r->slot + (size_t)(i % SHM_SLOTS) * SHM_SLOT_BYTES;
}

/* Fill free slots of the tx ring from the send queue. */
static bool push_sends(struct shm_chan *ch)
{
    struct shm_ring *r = ch->tx;
    bool moved = false;
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    bool cma = atomic_load_explicit(&r->cma_ok, memory_order_relaxed) != 0;

    if (ch->tx_head - tail > SHM_SLOTS)
        return chan_fail(ch, COLL_REMOTE_ERROR,
                         "shm: rank %d's ring reports more slots consumed than sent", ch->peer),
               true;
    while (ch->sq_head && ch->tx_head - tail < SHM_SLOTS) {
        struct coll_xfer *x = ch->sq_head;
        uint8_t *s = slot_at(r, ch->tx_head);
        struct shm_slot_hdr h = {0};

        h.seq = x->seq;
        h.tag = x->tag;
        h.len = x->len;
        if (x->sig)
            coll__sig_put_call(h.sig, x->sig);
        if (cma && x->len >= SHM_RDV_MIN) {
            h.kind = SLOT_RDV;
            h.addr = (uint64_t)(uintptr_t)x->buf;
            memcpy(s, &h, sizeof(h));
            xq_pop(&ch->sq_head, &ch->sq_tail);
            x->off = ++ch->rdv_sent; /* done when the peer's rdv_done reaches it */
            xq_push(&ch->wq_head, &ch->wq_tail, x);
        } else {
            size_t n = COLL_MIN(x->len - x->off, (size_t)SHM_SLOT_DATA);
            h.kind = SLOT_EAGER;
            h.off = x->off;
            h.frag = (uint32_t)n;
            memcpy(s, &h, sizeof(h));
            if (n)
                memcpy(s + 64, (const uint8_t *)x->buf + x->off, n);
            x->off += n;
            if (x->off == x->len) {
                xq_pop(&ch->sq_head, &ch->sq_tail);
                atomic_store(&x->status, COLL_SUCCESS);
            }
        }
        ch->tx_head++;
        atomic_store_explicit(&r->head, ch->tx_head, memory_order_seq_cst);
        moved = true;
    }
    if (moved)
        wake_peer(ch);
    return moved;
}

static bool finish_rdv_sends(struct shm_chan *ch)
{
    uint64_t done = atomic_load_explicit(&ch->tx->rdv_done, memory_order_acquire);
    bool moved = false;

    if (done > ch->rdv_sent)
        return chan_fail(ch, COLL_REMOTE_ERROR,
                         "shm: rank %d reports more single-copy reads than were offered",
                         ch->peer),
               true;
    while (ch->wq_head && ch->wq_head->off <= done) {
        struct coll_xfer *x = xq_pop(&ch->wq_head, &ch->wq_tail);
        atomic_store(&x->status, COLL_SUCCESS);
        moved = true;
    }
    return moved;
}

static bool check_slot(struct shm_chan *ch, const struct shm_slot_hdr *h,
                       const struct coll_xfer *x)
{
    char why[640];
    struct coll_sig theirs;

    /* the slot is the peer's to write: copied out once by the caller, so what is checked
     * here is what is used */
    coll__sig_get_call(h->sig, &theirs);
    if (ch->ctx->net->ops->agree_xfer(ch->ctx->net->comm, ch->peer, x, h->seq, h->tag, h->len,
                                      &theirs, why, sizeof(why)) != COLL_SUCCESS) {
        chan_fail(ch, COLL_REMOTE_ERROR, "%s", why);
        return false;
    }
    if (h->kind == SLOT_EAGER && (h->off != x->off || h->frag > SHM_SLOT_DATA ||
                                  h->frag > x->len - x->off || (h->frag == 0 && x->len != 0))) {
        chan_fail(ch, COLL_REMOTE_ERROR,
                  "shm: rank %d sent a fragment of %u bytes at %llu for a message of %zu "
                  "bytes, %zu received so far",
                  ch->peer, h->frag, (unsigned long long)h->off, x->len, x->off);
        return false;
    }
    if (h->kind != SLOT_EAGER && h->kind != SLOT_RDV) {
        chan_fail(ch, COLL_REMOTE_ERROR, "shm: rank %d wrote a slot of unknown kind %u",
                  ch->peer, h->kind);
        return false;
    }
    if (h->kind == SLOT_RDV && !atomic_load(&ch->rx->cma_ok)) {
        chan_fail(ch, COLL_REMOTE_ERROR,
                  "shm: rank %d offered a single-copy message on a pair without it", ch->peer);
        return false;
    }
    return true;
}

/* The peer left the comm (a normal close) with our single-copy read of its message not done:
 * its send was abandoned, so the message is lost. */
static void rdv_left(struct shm_chan *ch)
{
    chan_fail(ch, COLL_REMOTE_ERROR,
              "rank %d (%s, pid %d) left the communicator before rank %d read its single-copy "
              "message", ch->peer, peer_host(ch), (int)ch->ctx->net->peers[ch->peer].pid,
              ch->ctx->net->rank);
}

/* The peer closed its rings: it failed or was aborted, and says why (its text is copied
 * out once and cut at the field's end: it is the peer's memory). */
static void peer_closed(struct shm_chan *ch)
{
    char why[sizeof(ch->tx->closed_reason)];

    memcpy(why, ch->tx->closed_reason, sizeof(why));
    why[sizeof(why) - 1] = '\0';
    for (char *c = why; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
            *c = '?';
    /* pass on the cause, not a chain of who told whom */
    if (!ch->ctx->origin[0])
        memcpy(ch->ctx->origin, why, sizeof(why));
    chan_fail(ch, COLL_REMOTE_ERROR, "rank %d (%s) failed or was aborted%s%s", ch->peer,
              peer_host(ch), why[0] ? ", first failure: " : "", why);
}

/* Consume slots into posted receives, in order. */
static bool pull_recvs(struct shm_chan *ch)
{
    struct shm_ring *r = ch->rx;
    bool moved = false;
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);

    if (head - ch->rx_tail > SHM_SLOTS)
        return chan_fail(ch, COLL_REMOTE_ERROR,
                         "shm: rank %d's ring claims %llu slots ahead of a %u-slot ring",
                         ch->peer, (unsigned long long)(head - ch->rx_tail), SHM_SLOTS),
               true;
    while (ch->rq_head && ch->rx_tail != head) {
        struct coll_xfer *x = ch->rq_head;
        const uint8_t *s = slot_at(r, ch->rx_tail);
        struct shm_slot_hdr h;

        memcpy(&h, s, sizeof(h)); /* one read of what the peer wrote; checks use the copy */
        if (!check_slot(ch, &h, x))
            return true;
        if (h.kind == SLOT_EAGER) {
            if (h.frag)
                memcpy((uint8_t *)x->buf + x->off, s + 64, h.frag);
            x->off += h.frag;
        } else if (x->len) {
            struct iovec l = {x->buf, x->len};
            struct iovec rv = {(void *)(uintptr_t)h.addr, x->len};
            ssize_t n = process_vm_readv(ch->ctx->net->peers[ch->peer].pid, &l, 1, &rv, 1, 0);
            /* The sender's send completes only when our rdv_done covers it, so a sender that
             * closed its rings before that abandoned the offer (it destroyed the comm, or
             * failed, with the send in flight): its buffer may already hold something else,
             * and what was read is not the message. */
            if (n == (ssize_t)x->len && atomic_load(&ch->tx->owner_closed) != SHM_OPEN) {
                if (atomic_load(&ch->tx->owner_closed) == SHM_CLOSED_LEFT)
                    rdv_left(ch);
                else
                    peer_closed(ch);
                return true;
            }
            if (n != (ssize_t)x->len) {
                int err = n < 0 ? errno : 0;
                if (atomic_load(&ch->tx->owner_closed) == SHM_CLOSED_LEFT)
                    rdv_left(ch);
                else if (atomic_load(&ch->tx->owner_closed))
                    peer_closed(ch);
                else if (err == ESRCH || ch->dead)
                    chan_fail(ch, COLL_REMOTE_ERROR,
                              "rank %d (%s, pid %d) exited in the middle of a collective",
                              ch->peer, peer_host(ch), (int)ch->ctx->net->peers[ch->peer].pid);
                else
                    chan_fail(ch, COLL_REMOTE_ERROR,
                              "shm: reading %zu bytes from rank %d (%s) failed: %s", x->len,
                              ch->peer, peer_host(ch), err ? strerror(err) : "short read");
                return true;
            }
            x->off = x->len;
        }
        ch->rx_tail++;
        atomic_store_explicit(&r->tail, ch->rx_tail, memory_order_release);
        if (h.kind == SLOT_RDV)
            atomic_fetch_add_explicit(&r->rdv_done, 1, memory_order_release);
        if (x->off == x->len) {
            xq_pop(&ch->rq_head, &ch->rq_tail);
            atomic_store(&x->status, COLL_SUCCESS);
        }
        moved = true;
    }
    if (moved)
        wake_peer(ch);
    return moved;
}

/* What a peer that is gone did before it went can still complete our transfers: data it
 * wrote into our ring for a posted receive, or its finished reads of our single-copy sends.
 * Read after its exit or its LEFT mark was seen, this is the last word on them. */
static bool chan_deliverable(struct shm_chan *ch)
{
    if (ch->rq_head &&
        atomic_load_explicit(&ch->rx->head, memory_order_acquire) != ch->rx_tail)
        return true;
    return ch->wq_head &&
           atomic_load_explicit(&ch->tx->rdv_done, memory_order_acquire) >= ch->wq_head->off;
}

/* A peer that failed, aborted or left while we still need it. The caller found nothing to
 * move just before; the peer may have written its last messages (or finished reading ours),
 * completed its call and left since, so its being gone is a failure only once nothing it
 * did is left to take (the next progress takes it). */
static bool check_peer(struct shm_chan *ch)
{
    bool pending = ch->sq_head || ch->wq_head || ch->rq_head;
    uint32_t closed;

    if (!pending)
        return false;
    closed = atomic_load_explicit(&ch->tx->owner_closed, memory_order_seq_cst);
    if (closed != SHM_OPEN && closed != SHM_CLOSED_LEFT) {
        peer_closed(ch);
        return true;
    }
    if (closed == SHM_OPEN && !ch->dead)
        return false;
    if (chan_deliverable(ch))
        return false;
    if (ch->dead)
        chan_fail(ch, COLL_REMOTE_ERROR,
                  "rank %d (%s, pid %d) exited in the middle of a collective", ch->peer,
                  peer_host(ch), (int)ch->ctx->net->peers[ch->peer].pid);
    else
        chan_fail(ch, COLL_REMOTE_ERROR,
                  "rank %d (%s, pid %d) left the communicator (destroyed it or exited) while "
                  "rank %d still needed it in a collective",
                  ch->peer, peer_host(ch), (int)ch->ctx->net->peers[ch->peer].pid,
                  ch->ctx->net->rank);
    return true;
}

static bool chan_progress(struct shm_chan *ch)
{
    bool moved = false;

    if (!ch->up)
        return false;
    if (ch->sq_head)
        moved |= push_sends(ch);
    if (ch->wq_head)
        moved |= finish_rdv_sends(ch);
    if (ch->rq_head)
        moved |= pull_recvs(ch);
    if (!moved && coll__shm_test_hold && (ch->sq_head || ch->wq_head || ch->rq_head))
        coll__shm_test_hold(ch->peer);
    if (!moved && check_peer(ch))
        moved = true;
    return moved;
}

static bool shm_progress(void *arg)
{
    struct shm_ctx *ctx = arg;
    bool moved = false;

    if (ctx->shut)
        return false;
    for (int p = 0; p < ctx->nranks; p++)
        if (ctx->chans[p])
            moved |= chan_progress(ctx->chans[p]);
    return moved;
}

static coll_status_t post_check(struct shm_chan *ch, struct coll_xfer *x)
{
    coll_status_t st = (coll_status_t)atomic_load(ch->ctx->net->failed);

    if (st != COLL_SUCCESS || ch->ctx->shut) {
        atomic_store(&x->status, st != COLL_SUCCESS ? st : COLL_REMOTE_ERROR);
        return st != COLL_SUCCESS ? st : COLL_REMOTE_ERROR;
    }
    x->off = 0;
    return COLL_SUCCESS;
}

static coll_status_t shm_post_send(struct coll_chan *c, struct coll_xfer *x)
{
    struct shm_chan *ch = (struct shm_chan *)c;
    coll_status_t st = post_check(ch, x);

    if (st != COLL_SUCCESS)
        return st;
    xq_push(&ch->sq_head, &ch->sq_tail, x);
    chan_progress(ch);
    return (coll_status_t)atomic_load(ch->ctx->net->failed);
}

static coll_status_t shm_post_recv(struct coll_chan *c, struct coll_xfer *x)
{
    struct shm_chan *ch = (struct shm_chan *)c;
    coll_status_t st = post_check(ch, x);

    if (st != COLL_SUCCESS)
        return st;
    xq_push(&ch->rq_head, &ch->rq_tail, x);
    chan_progress(ch);
    return (coll_status_t)atomic_load(ch->ctx->net->failed);
}

/* ---- 6 sleeping ---------------------------------------------------------------------- */

static bool chan_ready(struct shm_chan *ch)
{
    if (!ch->up)
        return false;
    if (ch->rq_head && atomic_load(&ch->rx->head) != ch->rx_tail)
        return true;
    if (ch->sq_head && ch->tx_head - atomic_load(&ch->tx->tail) < SHM_SLOTS)
        return true;
    if (ch->wq_head && atomic_load(&ch->tx->rdv_done) >= ch->wq_head->off)
        return true;
    if ((ch->sq_head || ch->wq_head || ch->rq_head) &&
        (ch->dead || atomic_load(&ch->tx->owner_closed)))
        return true;
    return false;
}

/* Before the engine sleeps: raise our flag in every ring we own, then look once more.
 * Returns true when something is ready (the flag is lowered again: do not sleep). */
static bool shm_arm(void *arg)
{
    struct shm_ctx *ctx = arg;
    bool ready = false;

    if (ctx->shut)
        return false;
    for (int p = 0; p < ctx->nranks; p++)
        if (ctx->chans[p])
            atomic_store(&ctx->chans[p]->rx->owner_sleeping, 1u);
    ctx->sleeping = true;
    for (int p = 0; p < ctx->nranks && !ready; p++)
        if (ctx->chans[p])
            ready = chan_ready(ctx->chans[p]);
    return ready;
}

static void shm_disarm(void *arg)
{
    struct shm_ctx *ctx = arg;

    if (!ctx->sleeping)
        return;
    ctx->sleeping = false;
    for (int p = 0; p < ctx->nranks; p++)
        if (ctx->chans[p])
            atomic_store_explicit(&ctx->chans[p]->rx->owner_sleeping, 0u, memory_order_relaxed);
}

/* ---- 7 vtable ------------------------------------------------------------------------ */

static coll_status_t shm_init(struct coll_net *net, void **ctx_p)
{
    struct shm_ctx *ctx = calloc(1, sizeof(*ctx));
    struct epoll_event ev = {.events = EPOLLIN};
    struct sockaddr_un sa;
    socklen_t salen;
    int one = 1;
    coll_status_t st;

    *ctx_p = NULL;
    if (!ctx)
        return coll__error(net->comm, COLL_SYSTEM_ERROR, "out of memory for the shm transport");
    ctx->net = net;
    ctx->nranks = net->nranks;
    ctx->bell_fd = ctx->send_fd = ctx->spare_fd = ctx->flat_fd = -1;
    ctx->chans = calloc((size_t)net->nranks, sizeof(*ctx->chans));
    ctx->peer_fd = malloc((size_t)net->nranks * sizeof(*ctx->peer_fd));
    if (!ctx->chans || !ctx->peer_fd) {
        st = coll__error(net->comm, COLL_SYSTEM_ERROR, "out of memory for the shm transport");
        goto fail;
    }
    for (int i = 0; i < net->nranks; i++)
        ctx->peer_fd[i] = -1;
    if (net->nranks > 1) {
        /* one ring now: if shared memory cannot be had, say so before the bootstrap, while
         * the other ranks can still be told (through tp_mask) to use TCP with us */
        ctx->spare_fd = ring_fd_new();
        if (ctx->spare_fd < 0) {
            st = coll__sys_error(net->comm, errno, "shm: cannot reserve %zu bytes of shared memory",
                                 SHM_RING_BYTES);
            goto fail;
        }
    }
    st = coll__random(&ctx->cookie, sizeof(ctx->cookie));
    if (st != COLL_SUCCESS)
        goto fail;
    ctx->bell_fd = coll__sys.socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ctx->send_fd = coll__sys.socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ctx->bell_fd < 0 || ctx->send_fd < 0) {
        st = coll__sys_error(net->comm, errno, "shm: doorbell socket");
        goto fail;
    }
    if (coll__sys.setsockopt(ctx->bell_fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0 ||
        coll__sys.setsockopt(ctx->send_fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0) {
        st = coll__sys_error(net->comm, errno, "shm: SO_PASSCRED");
        goto fail;
    }
    salen = bell_addr(&sa, net->comm_id, net->rank);
    if (coll__sys.bind(ctx->bell_fd, (struct sockaddr *)&sa, salen) < 0) {
        st = coll__sys_error(net->comm, errno, "shm: binding the doorbell @%s", sa.sun_path + 1);
        goto fail;
    }
    ctx->bell_pe.cb = bell_cb;
    ctx->bell_pe.arg = ctx;
    ev.data.ptr = &ctx->bell_pe;
    if (coll__sys.epoll_ctl(net->epfd, EPOLL_CTL_ADD, ctx->bell_fd, &ev) < 0) {
        st = coll__sys_error(net->comm, errno, "shm: epoll_ctl(doorbell)");
        goto fail;
    }
    *ctx_p = ctx;
    return COLL_SUCCESS;
fail:
    if (ctx->bell_fd >= 0)
        coll__sys.close(ctx->bell_fd);
    if (ctx->send_fd >= 0)
        coll__sys.close(ctx->send_fd);
    if (ctx->spare_fd >= 0)
        close(ctx->spare_fd);
    free(ctx->chans);
    free(ctx->peer_fd);
    free(ctx);
    return st;
}

/* Close every channel: peers with work for us see our flag and fail instead of waiting. */
static void shm_shutdown(void *arg)
{
    struct shm_ctx *ctx = arg;
    char why[sizeof(ctx->origin)];
    coll_status_t st;

    if (!ctx || ctx->shut)
        return;
    st = (coll_status_t)atomic_load(ctx->net->failed);
    if (st == COLL_SUCCESS)
        st = COLL_REMOTE_ERROR;
    ctx->shut = true;
    /* a rank that tries to start a channel with us now is refused at once */
    if (ctx->bell_fd >= 0) {
        coll__sys.epoll_ctl(ctx->net->epfd, EPOLL_CTL_DEL, ctx->bell_fd, NULL);
        coll__sys.close(ctx->bell_fd);
        ctx->bell_fd = -1;
    }
    /* pass on the cause, not a chain of who told whom */
    if (ctx->origin[0])
        memcpy(why, ctx->origin, sizeof(why));
    else
        ctx->net->ops->error_text(ctx->net->comm, why, sizeof(why));
    for (int p = 0; p < ctx->nranks; p++) {
        if (ctx->chans[p]) {
            char *dst = ctx->chans[p]->rx->closed_reason;
            size_t n = strnlen(why, sizeof(ctx->chans[p]->rx->closed_reason) - 1);
            memcpy(dst, why, n);
            dst[n] = '\0';
        }
    }
    if (ctx->flat.shutdown)
        ctx->flat.shutdown(ctx->flat.arg);
    for (int p = 0; p < ctx->nranks; p++) {
        struct shm_chan *ch = ctx->chans[p];
        if (!ch)
            continue;
        atomic_store(&ch->rx->owner_closed, (uint32_t)SHM_CLOSED_FAILED);
        (void)bell_send(ctx, p, BELL_RING, -1);
        chan_fail_all(ch, st);
    }
}

static void shm_fini(void *arg)
{
    struct shm_ctx *ctx = arg;

    if (!ctx)
        return;
    if (ctx->flat.fini)
        ctx->flat.fini(ctx->flat.arg);
    memset(&ctx->flat, 0, sizeof(ctx->flat));
    if (ctx->flat_fd >= 0)
        close(ctx->flat_fd);
    for (int p = 0; p < ctx->nranks; p++) {
        struct shm_chan *ch = ctx->chans[p];
        if (ctx->peer_fd[p] >= 0)
            close(ctx->peer_fd[p]);
        if (!ch)
            continue;
        /* leaving: a peer still waiting on us learns it from the flag (after a shutdown it
         * already says FAILED, which stays). Everything this rank wrote before is visible to
         * a peer that sees LEFT (seq_cst). */
        {
            uint32_t open = SHM_OPEN;
            atomic_compare_exchange_strong(&ch->rx->owner_closed, &open,
                                           (uint32_t)SHM_CLOSED_LEFT);
        }
        if (ch->up)
            wake_peer(ch);
        chan_fail_all(ch, COLL_INVALID_USAGE);
        if (ch->pidfd >= 0) {
            coll__sys.epoll_ctl(ctx->net->epfd, EPOLL_CTL_DEL, ch->pidfd, NULL);
            close(ch->pidfd);
        }
        coll__shm_segment_unmap(ch->tx, SHM_RING_BYTES);
        coll__shm_segment_unmap(ch->rx, SHM_RING_BYTES);
        close(ch->rx_fd);
        free(ch);
    }
    if (ctx->bell_fd >= 0) {
        coll__sys.epoll_ctl(ctx->net->epfd, EPOLL_CTL_DEL, ctx->bell_fd, NULL);
        coll__sys.close(ctx->bell_fd);
    }
    if (ctx->send_fd >= 0)
        coll__sys.close(ctx->send_fd);
    if (ctx->spare_fd >= 0)
        close(ctx->spare_fd);
    free(ctx->chans);
    free(ctx->peer_fd);
    free(ctx);
}

/* ---- the fast path's side (shm.h) --- ------------------------------------------------ */

int coll__shm_flat_send(void *arg, int peer, int fd)
{
    return bell_send(arg, peer, BELL_FLAT, fd);
}

int coll__shm_flat_take(void *arg, int *fd_p)
{
    struct shm_ctx *ctx = arg;

    if (ctx->flat_verdict == 0 && ctx->bell_fd >= 0)
        bell_cb(&ctx->bell_pe, EPOLLIN);
    *fd_p = ctx->flat_fd;
    ctx->flat_fd = -1;
    return ctx->flat_verdict;
}

int coll__shm_flat_bell_fd(void *arg)
{
    return ((struct shm_ctx *)arg)->bell_fd;
}

int coll__shm_flat_peer(void *arg, int peer)
{
    struct shm_ctx *ctx = arg;
    struct shm_chan *ch = peer >= 0 && peer < ctx->nranks ? ctx->chans[peer] : NULL;

    if (ch && ch->rx &&
        atomic_load_explicit(&ch->rx->head, memory_order_acquire) !=
            atomic_load_explicit(&ch->rx->tail, memory_order_relaxed))
        return COLL_SHM_PEER_STRAY;
    if (ch && ch->tx && atomic_load(&ch->tx->owner_closed))
        return COLL_SHM_PEER_GONE;
    /* no ring with it yet: its doorbell, bound from init to shutdown, says whether it is
     * still in the comm (a wake-up datagram costs it nothing but a read) */
    if (!ch || !ch->tx)
        return bell_send(ctx, peer, BELL_RING, -1) == ECONNREFUSED ? COLL_SHM_PEER_GONE
                                                                   : COLL_SHM_PEER_OK;
    return COLL_SHM_PEER_OK;
}

void coll__shm_flat_attach(void *arg, const struct coll_shm_segment_owner *o)
{
    ((struct shm_ctx *)arg)->flat = *o;
}

uint64_t coll__shm_refused(const void *arg)
{
    const struct shm_ctx *ctx = arg;
    return ctx ? ctx->strangers : 0;
}

/* Test hook: play a peer that writes garbage into the last slot it sent us (see
 * transport.h). Only for tests/test_shm.c; production code never calls it. */
void coll__shm_test_corrupt(void *arg, int peer, int how)
{
    struct shm_ctx *ctx = arg;
    struct shm_chan *ch = ctx && peer >= 0 && peer < ctx->nranks ? ctx->chans[peer] : NULL;
    struct shm_slot_hdr h;
    uint8_t *s;

    if (!ch || !ch->tx || ch->tx_head == 0)
        return;
    s = slot_at(ch->tx, ch->tx_head - 1);
    memcpy(&h, s, sizeof(h));
    switch (how) {
    case COLL_SHM_CORRUPT_JUNK:
        memset(s, 0xa5, SHM_SLOT_BYTES);
        return;
    case COLL_SHM_CORRUPT_HEAD:
        atomic_store(&ch->tx->head, ch->tx_head + 1000 * SHM_SLOTS);
        return;
    case COLL_SHM_CORRUPT_FRAG:
        h.frag = SHM_SLOT_DATA;
        h.off = (uint64_t)1 << 40;
        break;
    case COLL_SHM_CORRUPT_RDV:
        h.kind = SLOT_RDV;
        h.addr = 16; /* nothing is mapped there */
        break;
    default:
        return;
    }
    memcpy(s, &h, sizeof(h));
}

const struct coll_transport coll__shm_transport = {
    .name = "shm",
    .probe = shm_probe,
    .init = shm_init,
    .connect = shm_connect,
    .post_send = shm_post_send,
    .post_recv = shm_post_recv,
    .progress = shm_progress,
    .arm = shm_arm,
    .disarm = shm_disarm,
    .shutdown = shm_shutdown,
    .fini = shm_fini,
};
