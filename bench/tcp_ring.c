/*
 * tcp_ring.c - the machine's ceiling for a ring over loopback TCP between NP local processes,
 * with no collective library in the way: what bounds a ring all-reduce's busbw over TCP at
 * NP ranks on this host, coll's or Open MPI's.
 *
 *   tcp_ring [-p NP] [-s MIB_PER_RANK] [-c CHUNK_KIB] [-k CONNS] [-r ROUNDS]
 *
 * Process i sends MIB_PER_RANK MiB to process i + 1 and receives as much from i - 1, both at
 * once (non-blocking sockets and poll), in chunks of CHUNK_KIB, over CONNS TCP connections
 * per neighbour pair (default 1; the bytes split evenly, as coll's COLL_NSOCKS does) with
 * the kernel's default buffer autotuning; each process on a CPU of its own where there are
 * as many CPUs as processes (as collrun and mpirun bind), unbound otherwise. A ring all-reduce of S
 * bytes has each rank send and receive 2 (NP - 1) / NP * S, and its busbw is that over the time:
 * the rate of one rank here, which also pays no reduction and no protocol, is its ceiling.
 * Each round warms the connections up with one exchange, then times as many as make a
 * quarter of a GiB per rank. Prints per round the slowest rank's time per exchange and the
 * rate per rank (GB/s, 1 GB = 1e9 B), then the median over ROUNDS. Links nothing of coll.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_NP 64
#define MAX_CONNS 8

static void die(const char *what)
{
    fprintf(stderr, "tcp_ring: %s: %s\n", what, strerror(errno));
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int listener(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, MAX_CONNS) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        die("listen");
    *port = ntohs(a.sin_port);
    return fd;
}

static int connect_to(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
        die("connect");
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* One rank: send `total` bytes over the k connections out[] while receiving as many over
 * in[], each connection carrying total / k (the last one the rest). */
static void exchange(const int *out, const int *in, int k, size_t total, size_t chunk, char *sbuf,
                     char *rbuf)
{
    size_t sent[MAX_CONNS] = {0}, got[MAX_CONNS] = {0}, want[MAX_CONNS];
    size_t left = 2 * total;

    for (int j = 0; j < k; j++)
        want[j] = j < k - 1 ? total / (size_t)k : total - (size_t)(k - 1) * (total / (size_t)k);
    while (left > 0) {
        struct pollfd p[2 * MAX_CONNS];
        for (int j = 0; j < k; j++) {
            p[2 * j] = (struct pollfd){.fd = out[j], .events = sent[j] < want[j] ? POLLOUT : 0};
            p[2 * j + 1] = (struct pollfd){.fd = in[j], .events = got[j] < want[j] ? POLLIN : 0};
        }
        if (poll(p, (nfds_t)(2 * k), -1) < 0) {
            if (errno == EINTR)
                continue;
            die("poll");
        }
        for (int j = 0; j < k; j++) {
            if (p[2 * j].revents & POLLOUT) {
                size_t n = want[j] - sent[j] < chunk ? want[j] - sent[j] : chunk;
                ssize_t w = send(out[j], sbuf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (w < 0 && errno != EAGAIN && errno != EINTR)
                    die("send");
                sent[j] += w > 0 ? (size_t)w : 0;
                left -= w > 0 ? (size_t)w : 0;
            }
            if (p[2 * j + 1].revents & (POLLIN | POLLHUP | POLLERR)) {
                size_t n = want[j] - got[j] < chunk ? want[j] - got[j] : chunk;
                ssize_t r = recv(in[j], rbuf, n, MSG_DONTWAIT);
                if (r == 0) {
                    errno = ECONNRESET;
                    die("recv");
                }
                if (r < 0 && errno != EAGAIN && errno != EINTR)
                    die("recv");
                got[j] += r > 0 ? (size_t)r : 0;
                left -= r > 0 ? (size_t)r : 0;
            }
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    long np = 8, mib = 256, chunk_kib = 512, rounds = 3, conns = 1, ncpu;
    int lfd[MAX_NP], port[MAX_NP], opt, go[2], back[2], ready[2];
    double rate[99];

    while ((opt = getopt(argc, argv, "p:s:c:k:r:h")) != -1) {
        switch (opt) {
        case 'p':
            np = atol(optarg);
            break;
        case 's':
            mib = atol(optarg);
            break;
        case 'c':
            chunk_kib = atol(optarg);
            break;
        case 'k':
            conns = atol(optarg);
            break;
        case 'r':
            rounds = atol(optarg);
            break;
        default:
            fprintf(stderr, "usage: tcp_ring [-p NP] [-s MIB_PER_RANK] [-c CHUNK_KIB] "
                            "[-k CONNS] [-r ROUNDS]\n");
            return opt == 'h' ? 0 : 2;
        }
    }
    if (np < 2 || np > MAX_NP || mib < 1 || mib > 4096 || chunk_kib < 1 || chunk_kib > 65536 ||
        conns < 1 || conns > MAX_CONNS || rounds < 1 || rounds > 99) {
        fprintf(stderr, "tcp_ring: -p 2-%d, -s 1-4096, -c 1-65536, -k 1-%d, -r 1-99\n", MAX_NP,
                MAX_CONNS);
        return 2;
    }
    ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < np; i++)
        lfd[i] = listener(&port[i]);
    for (long r = 0; r < rounds; r++) {
        double slowest = 0;
        if (pipe(go) < 0 || pipe(back) < 0 || pipe(ready) < 0)
            die("pipe");
        for (long i = 0; i < np; i++) {
            pid_t pid = fork();
            if (pid < 0)
                die("fork");
            if (pid == 0) {
                size_t chunk = (size_t)chunk_kib << 10, total = (size_t)mib << 20;
                long reps = mib >= 256 ? 1 : 256 / mib;
                char *sbuf = malloc(chunk), *rbuf = malloc(chunk), c;
                int out[MAX_CONNS], in[MAX_CONNS];
                double t0;

                /* one CPU per rank where there are enough, as collrun and mpirun bind */
                if (np <= ncpu) {
                    cpu_set_t set;
                    CPU_ZERO(&set);
                    CPU_SET((int)i, &set);
                    sched_setaffinity(0, sizeof(set), &set);
                }
                /* k connects to the next rank's listener, k accepts from our own: the
                 * backlog holds the next rank's connects until we accept */
                for (long j = 0; j < conns; j++)
                    out[j] = connect_to(port[(i + 1) % np]);
                for (long j = 0; j < conns; j++)
                    if ((in[j] = accept(lfd[i], NULL, NULL)) < 0)
                        die("accept");
                if (!sbuf || !rbuf)
                    die("setup");
                memset(sbuf, 1, chunk);
                /* warm the connections up (a new one starts with a small window, which a
                 * library's long-lived ones have long outgrown), then start together and
                 * repeat the exchange to a quarter of a GiB */
                exchange(out, in, (int)conns, total, chunk, sbuf, rbuf);
                if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) != 1)
                    die("pipe");
                t0 = now_s();
                for (long it = 0; it < reps; it++)
                    exchange(out, in, (int)conns, total, chunk, sbuf, rbuf);
                t0 = (now_s() - t0) / (double)reps;
                if (write(back[1], &t0, sizeof(t0)) != sizeof(t0))
                    die("write");
                _exit(0);
            }
        }
        for (long i = 0; i < np; i++) {
            char c;
            if (read(ready[0], &c, 1) != 1)
                die("read");
        }
        for (long i = 0; i < np; i++)
            if (write(go[1], "g", 1) != 1)
                die("write");
        for (long i = 0; i < np; i++) {
            double t;
            if (read(back[0], &t, sizeof(t)) != sizeof(t))
                die("read");
            slowest = t > slowest ? t : slowest;
        }
        while (wait(NULL) > 0)
            ;
        close(go[0]), close(go[1]), close(back[0]), close(back[1]);
        close(ready[0]), close(ready[1]);
        rate[r] = (double)((size_t)mib << 20) / slowest / 1e9;
        printf("round %ld\tnp %ld\t%ld conns\t%ld MiB per rank\t%.3f s\t%.3f GB/s per rank\n",
               r + 1, np, conns, mib, slowest, rate[r]);
    }
    qsort(rate, (size_t)rounds, sizeof(rate[0]), cmp_double);
    printf("median\tnp %ld\t%ld conns\t%.3f GB/s per rank (%.3f .. %.3f)\n", np, conns,
           rate[rounds / 2], rate[0], rate[rounds - 1]);
    return 0;
}
