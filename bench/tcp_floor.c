/*
 * tcp_floor.c - the machine's floor for an 8-byte exchange between two processes over
 * loopback TCP, with no collective library in the way: what bounds coll's (and Open MPI's)
 * 8 B all-reduce over TCP at 2 ranks, which is one such exchange.
 *
 *   tcp_floor [-n ITERS] [-r ROUNDS] [-b BYTES]
 *
 * Two processes, one TCP connection (TCP_NODELAY), left where the scheduler puts them (as
 * collrun and mpirun leave ranks by default on this machine). Every iteration both send BYTES, then both receive BYTES, as recursive doubling does at
 * two ranks. Three ways to wait for the peer's bytes:
 *   block   blocking recv (the kernel puts the process to sleep and wakes it)
 *   epoll   non-blocking socket, epoll_wait for readability, then recv (an event loop that
 *           sleeps in the kernel)
 *   epoll0  epoll_wait with a zero timeout in a loop until the socket is readable, then recv
 *           (an event loop that spins, as coll's engine does while a call waits)
 *   spin    non-blocking recv in a loop until the bytes are there
 * Prints, per way, the median over ROUNDS of the mean time per iteration (us), with the
 * smallest and largest round. Links nothing of coll.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum way { WAY_BLOCK, WAY_EPOLL, WAY_EPOLL0, WAY_SPIN, NWAYS };
static const char *const way_name[NWAYS] = {"block", "epoll", "epoll0", "spin"};

static void die(const char *what)
{
    fprintf(stderr, "tcp_floor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            die("send");
        }
        p += w;
        n -= (size_t)w;
    }
}

static void recv_all(int fd, int ep, enum way way, char *p, size_t n)
{
    while (n > 0) {
        ssize_t r = recv(fd, p, n, way == WAY_BLOCK ? 0 : MSG_DONTWAIT);
        if (r > 0) {
            p += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0) {
            errno = ECONNRESET;
            die("recv");
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            die("recv");
        if (way == WAY_EPOLL || way == WAY_EPOLL0) {
            struct epoll_event ev;
            int k;
            while ((k = epoll_wait(ep, &ev, 1, way == WAY_EPOLL ? -1 : 0)) == 0 ||
                   (k < 0 && errno == EINTR))
                ;
            if (k < 0)
                die("epoll_wait");
        }
    }
}

/* Both sides: the same loop. Returns the mean us per iteration (meaningful on side 0). */
static double run(int fd, int ep, enum way way, long iters, size_t bytes)
{
    char sbuf[4096], rbuf[4096];
    double t0;

    memset(sbuf, 1, sizeof(sbuf));
    t0 = now_us();
    for (long i = 0; i < iters; i++) {
        send_all(fd, sbuf, bytes);
        recv_all(fd, ep, way, rbuf, bytes);
    }
    return (now_us() - t0) / (double)iters;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    long iters = 20000, rounds = 7;
    size_t bytes = 8;
    int opt, lfd, fd, one = 1, ep;
    struct sockaddr_in addr;
    socklen_t alen = sizeof(addr);
    pid_t pid;
    struct epoll_event ev = {.events = EPOLLIN};

    while ((opt = getopt(argc, argv, "n:r:b:h")) != -1) {
        switch (opt) {
        case 'n': iters = atol(optarg); break;
        case 'r': rounds = atol(optarg); break;
        case 'b': bytes = (size_t)atol(optarg); break;
        default:
            fprintf(stderr, "usage: tcp_floor [-n ITERS] [-r ROUNDS] [-b BYTES (1-4096)]\n");
            return opt == 'h' ? 0 : 2;
        }
    }
    if (iters < 1 || rounds < 1 || rounds > 99 || bytes < 1 || bytes > 4096) {
        fprintf(stderr, "tcp_floor: -n >= 1, -r 1-99, -b 1-4096\n");
        return 2;
    }
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0)
        die("socket");
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(lfd, 1) < 0 ||
        getsockname(lfd, (struct sockaddr *)&addr, &alen) < 0)
        die("bind/listen");
    pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        close(lfd);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
            die("connect");
    } else {
        fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            die("accept");
        close(lfd);
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ep = epoll_create1(0);
    ev.data.fd = fd;
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
        die("epoll");
    if (pid != 0)
        printf("# tcp_floor: %zu-byte exchange over loopback TCP, 2 processes, %ld iterations x "
               "%ld rounds per way, us per iteration\n# way\tmedian\tmin\tmax\n",
               bytes, iters, rounds);
    /* rounds interleave the ways, so that a slow moment of the machine hits all of them */
    {
        double t[NWAYS][99];
        for (long r = 0; r < rounds; r++)
            for (int w = 0; w < NWAYS; w++) {
                run(fd, ep, (enum way)w, iters / 10 + 1, bytes); /* warm up */
                t[w][r] = run(fd, ep, (enum way)w, iters, bytes);
            }
        if (pid != 0) {
            for (int w = 0; w < NWAYS; w++) {
                qsort(t[w], (size_t)rounds, sizeof(double), cmp_double);
                printf("%s\t%.2f\t%.2f\t%.2f\n", way_name[w], t[w][rounds / 2], t[w][0],
                       t[w][rounds - 1]);
            }
        }
    }
    close(fd);
    if (pid != 0) {
        int status;
        waitpid(pid, &status, 0);
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
    }
    return 0;
}
