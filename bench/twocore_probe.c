/*
 * twocore_probe.c - how fast two CPUs of this machine hand data to each other right now,
 * with no coll code involved: the yardstick bench/slow_state.sh holds coll's runs against.
 *
 *   twocore_probe [-a CPU] [-b CPU] [-n samples] [-i ms] [-s bytes]
 *
 * Two threads, pinned to CPUs -a and -b (default 0 and 1). Per sample:
 *   rtt_ns        a cache line bounced between them 100000 times: ns per round trip
 *   handoff_GBps  thread a rewrites a buffer of -s bytes (default 1 MiB, which fits a core's
 *                 cache), thread b reads all of it, 200 times: bytes handed over per second
 *                 (each byte written by one core and then fetched from it by the other, as
 *                 a rank's input is in a shared-memory collective)
 * One line per sample, -i ms apart: "unix_time rtt_ns handoff_GBps" (TSV). Exit 0; 2 on
 * bad arguments or CPUs this process may not use.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RTT_ITERS 100000u
#define HANDOFF_ROUNDS 200u

static _Alignas(64) _Atomic uint64_t ping;
static _Alignas(64) _Atomic uint64_t pong;
static _Alignas(64) _Atomic uint64_t written;
static _Alignas(64) _Atomic uint64_t read_back;
static uint8_t *buf;
static size_t buf_bytes = (size_t)1 << 20;
static int cpu_b = 1;
static volatile uint64_t sink;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* Thread b: answers each ping, then reads each buffer thread a wrote. Counters only grow
 * (over all samples), so a sample is "the next RTT_ITERS values". */
static void *side_b(void *arg)
{
    const unsigned samples = *(const unsigned *)arg;
    uint64_t p = 0, h = 0;

    (void)pin(cpu_b);
    for (unsigned s = 0; s < samples; s++) {
        for (unsigned i = 0; i < RTT_ITERS; i++) {
            p++;
            while (atomic_load_explicit(&ping, memory_order_acquire) != p)
                ;
            atomic_store_explicit(&pong, p, memory_order_release);
        }
        for (unsigned r = 0; r < HANDOFF_ROUNDS; r++) {
            const uint64_t *w = (const uint64_t *)(const void *)buf;
            uint64_t sum = 0;
            h++;
            while (atomic_load_explicit(&written, memory_order_acquire) != h)
                ;
            for (size_t i = 0; i < buf_bytes / sizeof(uint64_t); i++)
                sum += w[i];
            sink = sum;
            atomic_store_explicit(&read_back, h, memory_order_release);
        }
    }
    return NULL;
}

static int parse(const char *s, long lo, long hi, long *v)
{
    char *end;
    long x;

    errno = 0;
    x = strtol(s, &end, 10);
    if (errno || end == s || (*end && *end != 'K' && *end != 'M'))
        return -1;
    if (*end == 'K')
        x <<= 10;
    else if (*end == 'M')
        x <<= 20;
    if (x < lo || x > hi)
        return -1;
    *v = x;
    return 0;
}

int main(int argc, char **argv)
{
    long a = 0, b = 1, n = 1, ms = 0, bytes = 1 << 20;
    unsigned samples;
    uint64_t p = 0, h = 0;
    pthread_t t;
    int c;

    while ((c = getopt(argc, argv, "a:b:n:i:s:h")) != -1) {
        long *dst = c == 'a' ? &a : c == 'b' ? &b : c == 'n' ? &n : c == 'i' ? &ms : &bytes;
        long lo = c == 'n' ? 1 : c == 's' ? 64 : 0;
        long hi = c == 'n' ? 1000000 : c == 'i' ? 3600000 : c == 's' ? 1 << 30 : CPU_SETSIZE - 1;
        if (c == 'h' || c == '?' || parse(optarg, lo, hi, dst)) {
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: twocore_probe [-a CPU] [-b CPU] [-n samples] [-i ms] [-s bytes]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (optind < argc || a == b) {
        fprintf(stderr, "twocore_probe: %s\n",
                a == b ? "-a and -b must name two CPUs" : "unexpected argument");
        return 2;
    }
    {
        /* a thread that could not be pinned would share a CPU with the other, and both spin */
        cpu_set_t allowed;
        if (sched_getaffinity(0, sizeof(allowed), &allowed) || !CPU_ISSET((int)a, &allowed) ||
            !CPU_ISSET((int)b, &allowed)) {
            fprintf(stderr, "twocore_probe: CPU %ld or %ld is not one this process may use\n",
                    a, b);
            return 2;
        }
    }
    buf_bytes = (size_t)bytes / 64 * 64;
    buf = aligned_alloc(4096, (buf_bytes + 4095) / 4096 * 4096);
    if (!buf || pin((int)a)) {
        fprintf(stderr, "twocore_probe: %s\n", buf ? "cannot run on CPU -a" : "out of memory");
        return 2;
    }
    memset(buf, 1, buf_bytes);
    cpu_b = (int)b;
    samples = (unsigned)n;
    if (pthread_create(&t, NULL, side_b, &samples)) {
        fprintf(stderr, "twocore_probe: cannot start the second thread\n");
        return 2;
    }
    for (unsigned s = 0; s < samples; s++) {
        double t0 = now(), t1, t2;
        struct timespec wall;

        for (unsigned i = 0; i < RTT_ITERS; i++) {
            p++;
            atomic_store_explicit(&ping, p, memory_order_release);
            while (atomic_load_explicit(&pong, memory_order_acquire) != p)
                ;
        }
        t1 = now();
        for (unsigned r = 0; r < HANDOFF_ROUNDS; r++) {
            h++;
            memset(buf, (int)(h & 0xff), buf_bytes);
            atomic_store_explicit(&written, h, memory_order_release);
            while (atomic_load_explicit(&read_back, memory_order_acquire) != h)
                ;
        }
        t2 = now();
        clock_gettime(CLOCK_REALTIME, &wall);
        printf("%.3f\t%.0f\t%.2f\n", (double)wall.tv_sec + (double)wall.tv_nsec * 1e-9,
               (t1 - t0) / RTT_ITERS * 1e9, (double)buf_bytes * HANDOFF_ROUNDS / (t2 - t1) / 1e9);
        fflush(stdout);
        if (ms && s + 1 < samples)
            usleep((useconds_t)ms * 1000u);
    }
    pthread_join(t, NULL);
    free(buf);
    return 0;
}
