/*
 * test_cost.c - the cost model: hand-computed prices that must come out exactly (one
 * message, ports and CPU serializing, ring all-reduce, chain broadcast pipelining), the
 * large-scale shape under the defaults (tree vs ring, chunking has an optimum), the ranking
 * helper, the calibration file, and the errors (unmatched, mismatched and deadlocked
 * schedules, malformed files).
 *
 * Divisions: 1 helpers, 2 exact prices, 3 shape under the defaults, 4 ranking, 4b the flat
 * path's row (its formula exactly, what it refuses, its defaults against their evidence), 5
 * the calibration file, 6 errors.
 *
 * Exact cases use dyadic parameters (alpha 2^-16 s, beta 2^-31 s/B, gamma 2^-32 s/B, copy
 * 2^-34 s/B; no latency share, no executor time per step unless a case sets them to powers
 * of two) and power-of-two byte counts, so every sum the simulation forms is exact in
 * double precision and may be compared with ==.
 *
 * Build: gcc -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -Iinclude -Isrc
 *        src/algo/ *.c src/reduce/reduce.c src/base/log.c src/base/status.c
 *        tests/test_cost.c -o test_cost -lpthread -lm
 */
#include "harness.h"

#include "algo/cost.h"

#include <math.h>
#include <time.h>

/* ---- 1 helpers ----------------------------------------------------------------------- */

#define ASSERT_DEQ(a, b)                                                                           \
    do {                                                                                           \
        double harness_x_ = (a), harness_y_ = (b);                                                 \
        if (!(harness_x_ == harness_y_))                                                           \
            HARNESS_FAIL("%s == %s: %.17g != %.17g", #a, #b, harness_x_, harness_y_);              \
    } while (0)

#define ASSERT_OK(expr)                                                                            \
    do {                                                                                           \
        coll_status_t harness_st_ = (expr);                                                        \
        if (harness_st_ != COLL_SUCCESS)                                                           \
            HARNESS_FAIL("%s: status %d: %s", #expr, (int)harness_st_, coll_last_error(NULL));     \
    } while (0)

static const double A = 1.0 / 65536, B = 1.0 / 2147483648.0, G = 1.0 / 4294967296.0,
                    CP = 1.0 / 17179869184.0;

/* Dyadic parameters: every link class alike, every dtype alike. */
static struct coll_cost_params dyadic(void)
{
    struct coll_cost_params p;

    coll__cost_params_default(&p);
    for (int l = 0; l < COLL_NUM_LINKS; l++) {
        p.link[l].alpha = A;
        p.link[l].beta = B;
    }
    for (int d = 0; d < COLL_NUM_DTYPES; d++)
        p.gamma[d] = G;
    p.copy = CP;
    for (int l = 0; l < COLL_NUM_LINKS; l++) {
        p.link[l].rdv = 0;
        p.link[l].lat = 0;
    }
    p.mem = 1;
    p.step = 0;
    return p;
}

static struct coll_algo_args args(enum coll_coll coll, int32_t n, int32_t root, size_t count,
                                  size_t chunk_count)
{
    struct coll_algo_args a = {
        .coll = coll,
        .nranks = n,
        .rank = 0,
        .root = root,
        .count = count,
        .dtype = COLL_FLOAT32,
        .elem_size = 4,
        .chunk_count = chunk_count,
    };
    return a;
}

static double predict(const struct coll_cost_params *p, const char *algo, enum coll_coll coll,
                      int32_t n, size_t count, size_t chunk_count)
{
    struct coll_algo_args a = args(coll, n, 0, count, chunk_count);
    const struct coll_algo *al = coll__algo_find(algo);
    double t = -1;

    ASSERT_MSG(al != NULL, "no algorithm '%s'", algo);
    ASSERT_OK(coll__cost_predict(p, NULL, al, &a, &t, NULL));
    return t;
}

/* n empty float32 schedules, to be filled by hand. */
static void scheds_init(struct coll_schedule *s, int32_t n)
{
    for (int32_t r = 0; r < n; r++) {
        struct coll_algo_args a = args(COLL_COLL_ALLREDUCE, n, 0, 0, 1);
        a.rank = r;
        coll__sched_init(&s[r], &a);
    }
}

static void scheds_free(struct coll_schedule *s, int32_t n)
{
    for (int32_t r = 0; r < n; r++)
        coll__sched_free(&s[r]);
}

static uint32_t send_(struct coll_schedule *s, int32_t peer, size_t count, uint32_t ndeps,
                      const uint32_t *deps)
{
    uint32_t idx;
    ASSERT_OK(coll__sched_send(s, peer, coll__slice(COLL_BUF_SEND, 0, count), ndeps, deps, &idx));
    return idx;
}

static uint32_t recv_(struct coll_schedule *s, int32_t peer, size_t count, uint32_t ndeps,
                      const uint32_t *deps)
{
    uint32_t idx;
    ASSERT_OK(coll__sched_recv(s, peer, coll__slice(COLL_BUF_RECV, 0, count), ndeps, deps, &idx));
    return idx;
}

static uint32_t copy_(struct coll_schedule *s, size_t count)
{
    uint32_t idx;
    ASSERT_OK(coll__sched_copy(s, coll__slice(COLL_BUF_SCRATCH, 0, count),
                               coll__slice(COLL_BUF_SEND, 0, count), 0, NULL, &idx));
    return idx;
}

static double simulate(const struct coll_cost_params *p, const struct coll_cost_links *links,
                       struct coll_schedule *s, int32_t n, double *finish)
{
    double t = -1;
    ASSERT_OK(coll__cost_simulate(p, links, s, n, &t, finish));
    return t;
}

/* ---- 2 exact prices ------------------------------------------------------------------ */

TEST(one_message_costs_alpha_plus_m_beta)
{
    struct coll_cost_params p;
    struct coll_schedule s[2];
    double finish[2], t;
    const size_t count = 1000; /* 4000 bytes */

    coll__cost_params_default(&p);
    scheds_init(s, 2);
    send_(&s[0], 1, count, 0, NULL);
    recv_(&s[1], 0, count, 0, NULL);
    t = simulate(&p, NULL, s, 2, finish);
    /* both ends' executors issue their step at once, then the message: a latency share
     * (none on TCP by default) moves where its time is spent, not how much a lone one costs */
    ASSERT_DEQ(t, p.step + (p.link[COLL_LINK_TCP].alpha - p.link[COLL_LINK_TCP].lat +
                            4000.0 * p.link[COLL_LINK_TCP].beta) +
                      p.link[COLL_LINK_TCP].lat);
    /* rendezvous: the send completes with its receive */
    ASSERT_DEQ(finish[0], t);
    ASSERT_DEQ(finish[1], t);
    /* a single class other than TCP: shm has a latency share, so the send completes that
     * much before its receive */
    struct coll_cost_links shm = coll__cost_links_all(COLL_LINK_SHM);
    const double lat = COLL_MIN(p.link[COLL_LINK_SHM].lat, p.link[COLL_LINK_SHM].alpha);
    ASSERT(lat > 0);
    t = simulate(&p, &shm, s, 2, finish);
    ASSERT_DEQ(t, p.step + (p.link[COLL_LINK_SHM].alpha - lat +
                            4000.0 * p.link[COLL_LINK_SHM].beta) + lat);
    ASSERT_DEQ(finish[0], p.step + (p.link[COLL_LINK_SHM].alpha - lat +
                                    4000.0 * p.link[COLL_LINK_SHM].beta));
    ASSERT_DEQ(finish[1], t);
    scheds_free(s, 2);
}

TEST(sends_of_one_rank_serialize_receives_too)
{
    struct coll_cost_params p = dyadic();
    struct coll_schedule s[3];
    const size_t count = 256; /* 1 KiB */
    const double msg = A + 1024 * B;

    /* rank 0 sends to 1 and 2 at once: its send port carries one after the other */
    scheds_init(s, 3);
    send_(&s[0], 1, count, 0, NULL);
    send_(&s[0], 2, count, 0, NULL);
    recv_(&s[1], 0, count, 0, NULL);
    recv_(&s[2], 0, count, 0, NULL);
    ASSERT_DEQ(simulate(&p, NULL, s, 3, NULL), 2 * msg);
    scheds_free(s, 3);

    /* 1 and 2 send to 0 at once: its receive port takes one after the other */
    scheds_init(s, 3);
    recv_(&s[0], 1, count, 0, NULL);
    recv_(&s[0], 2, count, 0, NULL);
    send_(&s[1], 0, count, 0, NULL);
    send_(&s[2], 0, count, 0, NULL);
    ASSERT_DEQ(simulate(&p, NULL, s, 3, NULL), 2 * msg);
    scheds_free(s, 3);

    /* a ring exchange: every rank sends and receives at once, in one message time */
    scheds_init(s, 3);
    for (int32_t r = 0; r < 3; r++) {
        send_(&s[r], (r + 1) % 3, count, 0, NULL);
        recv_(&s[r], (r + 2) % 3, count, 0, NULL);
    }
    ASSERT_DEQ(simulate(&p, NULL, s, 3, NULL), msg);
    scheds_free(s, 3);
}

static enum coll_link rank0_to_1_is_shm(void *arg, int32_t src, int32_t dst)
{
    (void)arg;
    return (src == 0 && dst == 1) || (src == 1 && dst == 0) ? COLL_LINK_SHM : COLL_LINK_TCP;
}

TEST(ports_of_different_link_classes_run_at_once)
{
    struct coll_cost_params p;
    struct coll_cost_links links = {rank0_to_1_is_shm, NULL, COLL_LINK_TCP};
    struct coll_schedule s[3];
    const double bytes = 1 << 20;
    double tcp, shm;

    coll__cost_params_default(&p);
    p.step = 0; /* the ports alone */
    p.link[COLL_LINK_SHM].lat = 0;
    tcp = p.link[COLL_LINK_TCP].alpha + bytes * p.link[COLL_LINK_TCP].beta;
    shm = p.link[COLL_LINK_SHM].alpha + bytes * p.link[COLL_LINK_SHM].beta;
    scheds_init(s, 3);
    send_(&s[0], 1, 1 << 18, 0, NULL);
    send_(&s[0], 2, 1 << 18, 0, NULL);
    recv_(&s[1], 0, 1 << 18, 0, NULL);
    recv_(&s[2], 0, 1 << 18, 0, NULL);
    ASSERT_DEQ(simulate(&p, &links, s, 3, NULL), COLL_MAX(tcp, shm));
    ASSERT_DEQ(simulate(&p, NULL, s, 3, NULL), tcp + tcp);
    scheds_free(s, 3);
}

TEST(local_steps_share_the_cpu)
{
    struct coll_cost_params p = dyadic();
    struct coll_schedule s[1];
    double finish[1];

    scheds_init(s, 1);
    ASSERT_OK(coll__sched_reduce(&s[0], coll__slice(COLL_BUF_RECV, 0, 1024),
                                 coll__slice(COLL_BUF_SEND, 0, 1024),
                                 coll__slice(COLL_BUF_SCRATCH, 0, 1024), 0, NULL, NULL));
    ASSERT_OK(coll__sched_reduce(&s[0], coll__slice(COLL_BUF_RECV, 1024, 1024),
                                 coll__slice(COLL_BUF_SEND, 1024, 1024),
                                 coll__slice(COLL_BUF_SCRATCH, 1024, 1024), 0, NULL, NULL));
    copy_(&s[0], 512);
    ASSERT_DEQ(simulate(&p, NULL, s, 1, finish), 2 * 4096 * G + 2048 * CP);
    ASSERT_DEQ(finish[0], 2 * 4096 * G + 2048 * CP);
    scheds_free(s, 1);

    /* gamma is per dtype */
    p.gamma[COLL_FLOAT32] = 2 * G;
    scheds_init(s, 1);
    ASSERT_OK(coll__sched_reduce(&s[0], coll__slice(COLL_BUF_RECV, 0, 1024),
                                 coll__slice(COLL_BUF_SEND, 0, 1024),
                                 coll__slice(COLL_BUF_SCRATCH, 0, 1024), 0, NULL, NULL));
    ASSERT_DEQ(simulate(&p, NULL, s, 1, NULL), 2 * 4096 * G);
    scheds_free(s, 1);
}

TEST(a_late_receive_holds_the_message_back)
{
    struct coll_cost_params p = dyadic();
    struct coll_schedule s[2];
    double finish[2], late = 65536 * 4 * CP; /* the copy that the receive waits for */
    uint32_t c;

    scheds_init(s, 2);
    send_(&s[0], 1, 256, 0, NULL);
    c = copy_(&s[1], 65536);
    recv_(&s[1], 0, 256, 1, &c);
    ASSERT_DEQ(simulate(&p, NULL, s, 2, finish), late + A + 1024 * B);
    ASSERT_DEQ(finish[0], late + A + 1024 * B);
    scheds_free(s, 2);
}

TEST(rendezvous_messages_pay_the_handover)
{
    struct coll_cost_params p = dyadic();
    struct coll_cost_links shm = coll__cost_links_all(COLL_LINK_SHM);
    struct coll_cost_links tcp = coll__cost_links_all(COLL_LINK_TCP);
    struct coll_schedule s[2];
    const double R = 1.0 / 262144;

    p.link[COLL_LINK_SHM].rdv = R;
    p.link[COLL_LINK_SHM].rdv_bytes = 16384;
    /* one float short of the rendezvous size: copied through the ring, alpha + m beta */
    scheds_init(s, 2);
    send_(&s[0], 1, 4095, 0, NULL);
    recv_(&s[1], 0, 4095, 0, NULL);
    ASSERT_DEQ(simulate(&p, &shm, s, 2, NULL), A + 16380.0 * B);
    scheds_free(s, 2);
    /* at it: the hand-over too */
    scheds_init(s, 2);
    send_(&s[0], 1, 4096, 0, NULL);
    recv_(&s[1], 0, 4096, 0, NULL);
    ASSERT_DEQ(simulate(&p, &shm, s, 2, NULL), A + R + 16384.0 * B);
    /* a link class without a rendezvous size never pays it */
    p.link[COLL_LINK_TCP].rdv = R;
    ASSERT_DEQ(simulate(&p, &tcp, s, 2, NULL), A + 16384.0 * B);
    scheds_free(s, 2);
}

TEST(calls_larger_than_the_cache_pay_the_memory_term)
{
    struct coll_cost_params p = dyadic();
    struct coll_schedule s[2];

    /* one rank copies 16 KiB: its buffers are 32 KiB; half of them fit in 16 KiB */
    p.mem = 3;
    p.cache_bytes = 16384;
    scheds_init(s, 1);
    copy_(&s[0], 4096);
    ASSERT_DEQ(simulate(&p, NULL, s, 1, NULL), 16384.0 * CP * 2); /* 1 + (3 - 1) x 1/2 */
    p.cache_bytes = 32768; /* all of it fits */
    ASSERT_DEQ(simulate(&p, NULL, s, 1, NULL), 16384.0 * CP);
    p.cache_bytes = 0; /* no cache size: every byte as cached */
    ASSERT_DEQ(simulate(&p, NULL, s, 1, NULL), 16384.0 * CP);
    scheds_free(s, 1);

    /* a message: both ranks' buffers count (16 KiB each on one host), alpha does not grow */
    p.cache_bytes = 16384;
    scheds_init(s, 2);
    send_(&s[0], 1, 4096, 0, NULL);
    recv_(&s[1], 0, 4096, 0, NULL);
    ASSERT_DEQ(simulate(&p, NULL, s, 2, NULL), A + 16384.0 * B * 2);
    p.mem = 1;
    ASSERT_DEQ(simulate(&p, NULL, s, 2, NULL), A + 16384.0 * B);
    scheds_free(s, 2);

    /* on two hosts each holds only its own rank's 16 KiB: all cached */
    {
        const struct coll_algo *chain = coll__algo_find("chain");
        struct coll_algo_args a = args(COLL_COLL_BROADCAST, 2, 0, 4096, 4096);
        const int32_t hosts[2] = {0, 1};
        double one, two;

        ASSERT(chain != NULL);
        p.mem = 3;
        ASSERT_OK(coll__cost_predict(&p, NULL, chain, &a, &one, NULL));
        a.hosts = hosts;
        a.nhosts = 2;
        ASSERT_OK(coll__cost_predict(&p, NULL, chain, &a, &two, NULL));
        ASSERT_MSG(two < one, "two hosts %g s, one host %g s", two, one);
    }
}

TEST(ring_allreduce_unchunked_matches_the_formula)
{
    struct coll_cost_params p = dyadic();

    for (int32_t n = 2; n <= 8; n++) {
        const size_t count = (size_t)n * 1024; /* m = n * 4 KiB, m/n = 4 KiB */
        const double per = 4096;
        double t = predict(&p, "ring", COLL_COLL_ALLREDUCE, n, count, count);
        double want = 2 * (n - 1) * (A + per * B) + (n - 1) * per * G;

        ASSERT_MSG(t == want, "n=%d: %.17g != 2(n-1)(alpha + m/n beta) + (n-1) m/n gamma = %.17g",
                   n, t, want);
    }
}

TEST(ring_allreduce_chunked_hides_the_reductions)
{
    /* C chunks per block, a chunk's reduction shorter than its message: once chunk 0 of a
     * ring step is reduced the next step's chunk 0 is ready before the send port is free,
     * so the port never idles and the time is its work alone, 2(n-1)C messages: gamma is
     * hidden entirely; the 2(n-1)(C-1) extra alphas are what chunking pays for it. */
    struct coll_cost_params p = dyadic();

    for (int32_t n = 2; n <= 6; n++)
        for (size_t C = 2; C <= 8; C *= 2) {
            const size_t chunk = 256; /* 1 KiB */
            double t = predict(&p, "ring", COLL_COLL_ALLREDUCE, n, (size_t)n * C * chunk, chunk);
            double want = 2 * (n - 1) * (double)C * (A + 1024 * B);

            ASSERT_MSG(t == want, "n=%d C=%zu: %.17g != 2(n-1)C(alpha + chunk beta) = %.17g", n, C,
                       t, want);
        }
}

TEST(chain_broadcast_pipelines_exactly)
{
    struct coll_cost_params p = dyadic();

    for (int32_t n = 2; n <= 8; n++)
        for (size_t k = 1; k <= 8; k++) {
            const size_t chunk = 512; /* 2 KiB */
            const double stage = A + 2048 * B;
            double t;

            /* copy 0: exactly (n - 2 + k) message times */
            p.copy = 0;
            t = predict(&p, "chain", COLL_COLL_BROADCAST, n, k * chunk, chunk);
            ASSERT_MSG(t == (n - 2 + (double)k) * stage, "n=%d k=%zu: %.17g != %.17g", n, k, t,
                       (n - 2 + (double)k) * stage);
            /* the root copies SEND to RECV chunk by chunk first: one chunk copy is exposed */
            p.copy = CP;
            t = predict(&p, "chain", COLL_COLL_BROADCAST, n, k * chunk, chunk);
            ASSERT_MSG(t == (n - 2 + (double)k) * stage + 2048 * CP, "n=%d k=%zu: %.17g", n, k, t);
        }
}

TEST(finish_times_follow_the_chain)
{
    struct coll_cost_params p = dyadic();
    struct coll_algo_args a = args(COLL_COLL_BROADCAST, 6, 2, 4 * 512, 512);
    double finish[6], t;

    /* A rank is done when its last send is received (rendezvous), which is before the next
     * rank forwards it; the last two ranks finish with the same message. */
    ASSERT_OK(coll__cost_predict(&p, NULL, coll__algo_find("chain"), &a, &t, finish));
    for (int32_t i = 1; i < 5; i++) {
        int32_t r = (2 + i) % 6, prev = (2 + i - 1) % 6;
        ASSERT_MSG(finish[r] > finish[prev], "rank %d finishes at %g, before rank %d (%g)", r,
                   finish[r], prev, finish[prev]);
    }
    ASSERT_DEQ(finish[0], finish[1]);
    ASSERT_DEQ(t, finish[1]); /* the last rank of the chain from root 2 */
}

TEST(one_rank_and_empty_calls)
{
    struct coll_cost_params p = dyadic();

    ASSERT_DEQ(predict(&p, "ring", COLL_COLL_ALLREDUCE, 1, 1000, 1000), 4000 * CP);
    ASSERT_DEQ(predict(&p, "ring", COLL_COLL_ALLREDUCE, 4, 0, 1), 0);
    ASSERT_DEQ(predict(&p, "tree", COLL_COLL_BROADCAST, 5, 0, 1), 0);
}

TEST(latency_overlaps_but_occupancy_does_not)
{
    /* lat = alpha / 2: a message holds its ports for alpha / 2 + m beta and arrives alpha / 2
     * after it lets them go. Four messages on one channel: the ports serialize their
     * occupancies, the latencies overlap, and the last one arrives one latency after the
     * fourth release; the sender is done at that release. */
    struct coll_cost_params p = dyadic();
    struct coll_schedule s[2];
    double finish[2];
    const double occ = A / 2 + 1024 * B;

    for (int l = 0; l < COLL_NUM_LINKS; l++)
        p.link[l].lat = A / 2;
    scheds_init(s, 2);
    for (int i = 0; i < 4; i++) {
        send_(&s[0], 1, 256, 0, NULL);
        recv_(&s[1], 0, 256, 0, NULL);
    }
    ASSERT_DEQ(simulate(&p, NULL, s, 2, finish), 4 * occ + A / 2);
    ASSERT_DEQ(finish[0], 4 * occ);
    ASSERT_DEQ(finish[1], 4 * occ + A / 2);
    scheds_free(s, 2);

    /* a dependent round trip pays the whole alpha each way: latency only overlaps what is
     * in flight together */
    scheds_init(s, 2);
    {
        uint32_t r0 = recv_(&s[1], 0, 256, 0, NULL);
        send_(&s[0], 1, 256, 0, NULL);
        recv_(&s[0], 1, 256, 0, NULL);
        send_(&s[1], 0, 256, 1, &r0);
    }
    ASSERT_DEQ(simulate(&p, NULL, s, 2, NULL), 2 * (A + 1024 * B));
    scheds_free(s, 2);

    /* lat above alpha is alpha: nothing arrives before it is sent */
    for (int l = 0; l < COLL_NUM_LINKS; l++)
        p.link[l].lat = 4 * A;
    scheds_init(s, 2);
    send_(&s[0], 1, 256, 0, NULL);
    recv_(&s[1], 0, 256, 0, NULL);
    ASSERT_DEQ(simulate(&p, NULL, s, 2, finish), A + 1024 * B);
    ASSERT_DEQ(finish[0], 1024 * B);
    scheds_free(s, 2);
}

TEST(tcp_latency_holds_the_receivers_core)
{
    /* two ranks on one core exchange a TCP message each: a TCP message keeps its
     * receiver's core from its start until it is in, latency included (the kernel's
     * copies, the wake-up), so the two run one after the other; with a core each they
     * overlap completely */
    struct coll_cost_params p = dyadic();
    struct coll_schedule s[2];

    for (int l = 0; l < COLL_NUM_LINKS; l++)
        p.link[l].lat = A / 2;
    scheds_init(s, 2);
    for (int32_t r = 0; r < 2; r++) {
        send_(&s[r], 1 - r, 256, 0, NULL);
        recv_(&s[r], 1 - r, 256, 0, NULL);
    }
    ASSERT_DEQ(simulate(&p, NULL, s, 2, NULL), A + 1024 * B);
    p.cores = 1;
    ASSERT_DEQ(simulate(&p, NULL, s, 2, NULL), 2 * (A / 2 + 1024 * B) + A);
    scheds_free(s, 2);
}

TEST(every_step_costs_the_executor_its_time)
{
    /* step S: rank 0 copies (S + 32 CP on its CPU), then issues its send (S on its CPU),
     * then the message (A + 32 B); rank 1 issued its receive at S, long before. */
    const double S = 1.0 / 1048576;
    struct coll_cost_params p = dyadic();
    struct coll_schedule s[3];
    double finish[3];
    uint32_t c;

    p.step = S;
    scheds_init(s, 2);
    c = copy_(&s[0], 8);
    send_(&s[0], 1, 8, 1, &c);
    recv_(&s[1], 0, 8, 0, NULL);
    ASSERT_DEQ(simulate(&p, NULL, s, 2, finish), S + 32 * CP + S + A + 32 * B);
    ASSERT_DEQ(finish[0], finish[1]);
    scheds_free(s, 2);

    /* one executor issues one step at a time: rank 0's two sends to different ranks are
     * issued S apart; with alpha shorter than S the port is free again by then, so the
     * second ends S after the first. */
    p.link[COLL_LINK_TCP].alpha = S / 4;
    scheds_init(s, 3);
    send_(&s[0], 1, 8, 0, NULL);
    send_(&s[0], 2, 8, 0, NULL);
    recv_(&s[1], 0, 8, 0, NULL);
    recv_(&s[2], 0, 8, 0, NULL);
    ASSERT_DEQ(simulate(&p, NULL, s, 3, finish), 2 * S + S / 4 + 32 * B);
    ASSERT_DEQ(finish[1], S + S / 4 + 32 * B);
    ASSERT_DEQ(finish[2], 2 * S + S / 4 + 32 * B);
    scheds_free(s, 3);

    /* a schedule without steps costs nothing, whatever a step costs */
    ASSERT_DEQ(predict(&p, "ring", COLL_COLL_ALLREDUCE, 4, 0, 1), 0);
}

/* ---- 3 shape under the defaults ------------------------------------------------------ */

TEST(tree_wins_small_ring_wins_large_n8)
{
    struct coll_cost_params p;
    double ring, tree;

    coll__cost_params_default(&p);
    ring = predict(&p, "ring", COLL_COLL_ALLREDUCE, 8, 2, 2);
    tree = predict(&p, "tree", COLL_COLL_ALLREDUCE, 8, 2, 2);
    printf("# 8 B, n=8: ring %.1f us, tree %.1f us\n", ring * 1e6, tree * 1e6);
    ASSERT_MSG(tree < ring, "8 B: tree %g s, ring %g s", tree, ring);

    /* 64 MiB in 256 KiB chunks */
    ring = predict(&p, "ring", COLL_COLL_ALLREDUCE, 8, 16u << 20, 64u << 10);
    tree = predict(&p, "tree", COLL_COLL_ALLREDUCE, 8, 16u << 20, 64u << 10);
    printf("# 64 MiB, n=8: ring %.2f ms, tree %.2f ms\n", ring * 1e3, tree * 1e3);
    ASSERT_MSG(ring < tree, "64 MiB: ring %g s, tree %g s", ring, tree);
    /* ring moves 2(n-1)/n m per rank: the bandwidth bound it cannot beat */
    ASSERT(ring >= 2.0 * 7 / 8 * (64 << 20) * p.link[COLL_LINK_TCP].beta);
}

TEST(more_chunks_help_up_to_a_point)
{
    struct coll_cost_params p;
    const size_t count = 1u << 18;                 /* 1 MiB */
    const size_t chunks[] = {1, 8, 32}, tiny = 16; /* 64-byte chunks: 16384 of them */
    double t[4];

    /* fixed link figures (not the defaults, which follow calibration): where the optimum
     * lies depends on alpha / beta, the shape of the curve does not */
    coll__cost_params_default(&p);
    p.link[COLL_LINK_TCP].alpha = 10e-6;
    p.link[COLL_LINK_TCP].beta = 1 / 2.5e9;
    p.gamma[COLL_FLOAT32] = 1 / 5e9;
    p.copy = 1 / 10e9;
    for (int i = 0; i < 3; i++)
        t[i] = predict(&p, "chain", COLL_COLL_BROADCAST, 8, count, count / chunks[i]);
    t[3] = predict(&p, "chain", COLL_COLL_BROADCAST, 8, count, tiny);
    printf("# chain broadcast 1 MiB n=8: C=1 %.0f us, C=8 %.0f us, C=32 %.0f us, C=16384 %.0f "
           "us\n",
           t[0] * 1e6, t[1] * 1e6, t[2] * 1e6, t[3] * 1e6);
    ASSERT(t[1] < t[0]);
    ASSERT(t[2] < t[1]);
    ASSERT(t[3] > t[2]); /* alpha per chunk takes over */

    /* ring all-reduce: chunks only hide the reductions behind the transfers, so a few per
     * block pay (4 MiB, n = 4: 8 chunks of 128 KiB) and many small ones (2 KiB) lose */
    t[0] = predict(&p, "ring", COLL_COLL_ALLREDUCE, 4, 4 * count, count);
    t[1] = predict(&p, "ring", COLL_COLL_ALLREDUCE, 4, 4 * count, count / 8);
    t[2] = predict(&p, "ring", COLL_COLL_ALLREDUCE, 4, 4 * count, 512);
    printf("# ring all-reduce 4 MiB n=4: C=1 %.0f us, C=8 %.0f us, C=512 %.0f us\n", t[0] * 1e6,
           t[1] * 1e6, t[2] * 1e6);
    ASSERT(t[1] < t[0]);
    ASSERT(t[2] > t[0]);
}

TEST(ring_n64_many_chunks_is_priced)
{
    /* 1.3 M steps: ring all-reduce, n = 64, 64 chunks of 4 KiB per block. The send port of
     * every rank is busy for 2(n-1) x 64 messages; little else shows. */
    struct coll_cost_params p;
    const int32_t n = 64;
    const size_t chunk = 1024, count = (size_t)n * 64 * chunk;
    double t, port;

    coll__cost_params_default(&p);
    t = predict(&p, "ring", COLL_COLL_ALLREDUCE, n, count, chunk);
    port = 2.0 * (n - 1) * 64 * (p.link[COLL_LINK_TCP].alpha + 4096.0 * p.link[COLL_LINK_TCP].beta);
    printf("# ring n=64 16 MiB in 4 KiB chunks: %.3f ms (send-port bound %.3f ms)\n", t * 1e3,
           port * 1e3);
    ASSERT(t >= port * (1 - 1e-12)); /* t is a sum of 8064 terms, port one product */
    ASSERT(t < port * 1.01);
}

TEST(every_algorithm_of_the_table_is_priced)
{
    /* whatever builders coll__algos[] holds, their schedules match up, never deadlock on
     * the simulated machine, and cost at least one message when anything moves */
    struct coll_cost_params p;
    const int32_t ns[] = {1, 2, 3, 5, 8};
    const size_t chunks[] = {1, 64, 100000};
    double finish[8];
    int priced = 0;

    coll__cost_params_default(&p);
    for (int c = 0; c < COLL_NUM_COLLS; c++)
        for (int i = 0; coll__algos[i]; i++) {
            const struct coll_algo *al = coll__algos[i];
            if (!(al->colls & (1u << c)))
                continue;
            for (size_t ni = 0; ni < COLL_ARRAY_SIZE(ns); ni++) {
                const int32_t n = ns[ni];
                const size_t counts[] = {0, 1, (size_t)n + 1, 257};
                for (size_t ci = 0; ci < COLL_ARRAY_SIZE(counts); ci++)
                    for (size_t ki = 0; ki < COLL_ARRAY_SIZE(chunks); ki++)
                        for (int32_t root = 0; root<n; root += n> 1 ? n - 1 : 1) {
                            struct coll_algo_args a =
                                args((enum coll_coll)c, n, root, counts[ci], chunks[ki]);
                            double t = -1, last = 0;
                            coll_status_t st;

                            if (al->applicable && !al->applicable(&a))
                                continue;
                            st = coll__cost_predict(&p, NULL, al, &a, &t, finish);
                            ASSERT_MSG(st == COLL_SUCCESS, "%s %s n=%d count=%zu chunk=%zu: %s",
                                       al->name, coll__coll_name(a.coll), n, a.count, a.chunk_count,
                                       coll_last_error(NULL));
                            for (int32_t r = 0; r < n; r++)
                                last = COLL_MAX(last, finish[r]);
                            ASSERT_DEQ(last, t);
                            if (n > 1 && a.count > 0)
                                ASSERT_MSG(t >= p.link[COLL_LINK_TCP].alpha,
                                           "%s %s n=%d count=%zu: %g s", al->name,
                                           coll__coll_name(a.coll), n, a.count, t);
                            priced++;
                        }
            }
        }
    printf("# %d (algorithm, collective, n, count, chunk, root) cases priced\n", priced);
    ASSERT(priced > 100);
}

static enum coll_link two_hosts(void *arg, int32_t src, int32_t dst)
{
    int32_t per_host = *(const int32_t *)arg;
    return src / per_host == dst / per_host ? COLL_LINK_SHM : COLL_LINK_TCP;
}

TEST(link_callback_prices_mixed_machines)
{
    struct coll_cost_params p;
    int32_t per_host = 4;
    struct coll_cost_links mixed = {two_hosts, &per_host, COLL_LINK_TCP};
    struct coll_cost_links shm = coll__cost_links_all(COLL_LINK_SHM);
    struct coll_algo_args a = args(COLL_COLL_ALLREDUCE, 8, 0, 1u << 20, 1u << 14);
    const struct coll_algo *ring = coll__algo_find("ring");
    double t_tcp, t_shm, t_mixed;

    coll__cost_params_default(&p);
    ASSERT_OK(coll__cost_predict(&p, NULL, ring, &a, &t_tcp, NULL));
    ASSERT_OK(coll__cost_predict(&p, &shm, ring, &a, &t_shm, NULL));
    ASSERT_OK(coll__cost_predict(&p, &mixed, ring, &a, &t_mixed, NULL));
    ASSERT(t_shm < t_mixed);
    ASSERT(t_mixed <= t_tcp);
}

/* ---- 4 ranking ----------------------------------------------------------------------- */

TEST(rank_algos_sorts_every_applicable_algorithm)
{
    struct coll_cost_params p;
    struct coll_cost_result res[64], few[2], all[256];
    struct coll_cost_query q = {.coll = COLL_COLL_ALLREDUCE,
                                .nranks = 8,
                                .root = 0,
                                .count = 1u << 18,
                                .dtype = COLL_FLOAT32};
    size_t nres, nfew, nall, expect = 0;

    coll__cost_params_default(&p);
    for (int i = 0; coll__algos[i]; i++)
        if ((coll__algos[i]->colls & (1u << COLL_COLL_ALLREDUCE)) &&
            (!coll__algos[i]->applicable ||
             coll__algos[i]->applicable(&(struct coll_algo_args){.coll = q.coll,
                                                                 .nranks = q.nranks,
                                                                 .count = q.count,
                                                                 .dtype = q.dtype,
                                                                 .elem_size = 4,
                                                                 .chunk_count = 8192})))
            expect++;
    ASSERT_OK(coll__cost_rank_algos(&p, NULL, &q, res, 64, &nres));
    ASSERT_EQ(nres, expect);
    ASSERT(nres >= 3); /* ring, tree, binomial at least */
    for (size_t i = 0; i < nres; i++) {
        ASSERT(res[i].algo->colls & (1u << COLL_COLL_ALLREDUCE));
        ASSERT(res[i].seconds > 0);
        ASSERT_EQ(res[i].chunk_bytes, res[i].chunk_count * 4);
        ASSERT(res[i].chunk_bytes >= 32u << 10 && res[i].chunk_bytes <= 1u << 20);
        if (i)
            ASSERT(res[i - 1].seconds <= res[i].seconds);
        for (size_t j = 0; j < i; j++)
            ASSERT(res[j].algo != res[i].algo);
        /* the row is what predict says for that chunk */
        struct coll_algo_args a = args(q.coll, 8, 0, q.count, res[i].chunk_count);
        double t;
        ASSERT_OK(coll__cost_predict(&p, NULL, res[i].algo, &a, &t, NULL));
        ASSERT_DEQ(t, res[i].seconds);
    }
    printf("# allreduce 1 MiB n=8:");
    for (size_t i = 0; i < nres; i++)
        printf(" %s/%zuK %.0f us", res[i].algo->name, res[i].chunk_bytes >> 10,
               res[i].seconds * 1e6);
    printf("\n");

    /* a short results array keeps the best rows */
    ASSERT_OK(coll__cost_rank_algos(&p, NULL, &q, few, 2, &nfew));
    ASSERT_EQ(nfew, 2);
    ASSERT(few[0].algo == res[0].algo && few[1].algo == res[1].algo);
    ASSERT_DEQ(few[1].seconds, res[1].seconds);

    /* every chunk: one row per (algorithm, chunk size), the best of each as above */
    q.every_chunk = true;
    ASSERT_OK(coll__cost_rank_algos(&p, NULL, &q, all, 256, &nall));
    ASSERT_EQ(nall, nres * 6);
    ASSERT(all[0].algo == res[0].algo);
    ASSERT_DEQ(all[0].seconds, res[0].seconds);
}

/* The position of algorithm name in res, or n when it is absent. */
static size_t rank_of(const struct coll_cost_result *res, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(res[i].algo->name, name))
            return i;
    return n;
}

TEST(rank_algos_small_and_large)
{
    struct coll_cost_params p;
    struct coll_cost_result res[16];
    const size_t chunk[] = {256u << 10};
    struct coll_cost_query q = {.coll = COLL_COLL_ALLREDUCE,
                                .nranks = 8,
                                .count = 2,
                                .dtype = COLL_FLOAT32,
                                .chunk_bytes = chunk,
                                .nchunk_bytes = 1};
    size_t nres;

    coll__cost_params_default(&p);
    ASSERT_OK(coll__cost_rank_algos(&p, NULL, &q, res, 16, &nres));
    ASSERT(nres >= 2);
    ASSERT_MSG(strcmp(res[0].algo->name, "ring") != 0, "8 B: ring ranked first");
    ASSERT_EQ(res[0].chunk_count, 2); /* clamped to the count */

    q.count = 16u << 20;
    ASSERT_OK(coll__cost_rank_algos(&p, NULL, &q, res, 16, &nres));
    ASSERT_MSG(rank_of(res, nres, "ring") < rank_of(res, nres, "tree"),
               "64 MiB: tree ranked above ring");
    /* broadcast has no ring: only the algorithms that run it appear */
    q.coll = COLL_COLL_BROADCAST;
    q.count = 1024;
    ASSERT_OK(coll__cost_rank_algos(&p, NULL, &q, res, 16, &nres));
    ASSERT(nres >= 1);
    for (size_t i = 0; i < nres; i++)
        ASSERT(res[i].algo->colls & (1u << COLL_COLL_BROADCAST));
}

TEST(small_alltoall_sends_concurrently)
{
    /* n - 1 small messages in flight at once overlap their latencies and pay only their
     * occupancy and the executor's steps; Bruck's log n rounds depend on each other (and
     * on its pack and unpack copies), so each pays the whole alpha. Measured over shm here,
     * linear and pairwise beat Bruck at 4 and 8 ranks up to 8 KiB (docs/algorithms.md);
     * the machine without a latency share and step time ranks them the other way round. */
    struct coll_cost_params p;
    struct coll_cost_result res[8];
    struct coll_cost_links shm = coll__cost_links_all(COLL_LINK_SHM);
    struct coll_cost_query q = {.coll = COLL_COLL_ALLTOALL, .dtype = COLL_FLOAT32};
    size_t nres;

    for (int32_t n = 4; n <= 8; n += 4) {
        q.nranks = n;
        q.count = 8; /* 32 B to each rank */
        coll__cost_params_default(&p);
        ASSERT_OK(coll__cost_rank_algos(&p, &shm, &q, res, 8, &nres));
        ASSERT_MSG(rank_of(res, nres, "bruck") > rank_of(res, nres, "linear") &&
                       rank_of(res, nres, "bruck") > rank_of(res, nres, "pairwise"),
                   "n=%d: bruck ranked %zu of %zu", n, rank_of(res, nres, "bruck"), nres);
        p.link[COLL_LINK_SHM].lat = 0;
        p.step = 0;
        ASSERT_OK(coll__cost_rank_algos(&p, &shm, &q, res, 8, &nres));
        ASSERT_MSG(!strcmp(res[0].algo->name, "bruck"), "n=%d: %s first without lat and step",
                   n, res[0].algo->name);
    }
}

TEST(selector_prices_one_copy_per_block)
{
    static const size_t chunks[] = COLL_COST_SELECT_CHUNKS;
    struct coll_cost_params p;
    struct coll_cost_result res[16];
    struct coll_cost_links shm = coll__cost_links_all(COLL_LINK_SHM);
    struct coll_cost_query q = {.coll = COLL_COLL_BROADCAST,
                                .nranks = 2,
                                .count = 1u << 20, /* 4 MiB of float */
                                .dtype = COLL_FLOAT32,
                                .chunk_bytes = chunks,
                                .nchunk_bytes = COLL_ARRAY_SIZE(chunks)};
    size_t nres, i;

    /* two ranks: a pipeline has one hop, so chunks buy only the overlap of the root's
     * copy into its own receive buffer with the message; where a hand-over costs more than
     * that copy, the selector's sizes must include the one that sends the block whole
     * (priced without the executor's steps, which this case is not about) */
    coll__cost_params_default(&p);
    p.step = 0;
    p.link[COLL_LINK_SHM].rdv = 1e-4;
    ASSERT_OK(coll__cost_rank_algos(&p, &shm, &q, res, 16, &nres));
    i = rank_of(res, nres, "chain");
    ASSERT(i < nres);
    ASSERT_EQ(res[i].chunk_bytes, (size_t)4u << 20);
    ASSERT_EQ(res[i].chunk_count, q.count);
    /* and its price: the copy, then one message with one hand-over */
    ASSERT(fabs(res[i].seconds - (4194304.0 * p.copy + p.link[COLL_LINK_SHM].alpha + 1e-4 +
                                  4194304.0 * p.link[COLL_LINK_SHM].beta)) < 1e-12);
    /* without the hand-over the copy's overlap wins: the largest chunk is not the best */
    p.link[COLL_LINK_SHM].rdv = 0;
    ASSERT_OK(coll__cost_rank_algos(&p, &shm, &q, res, 16, &nres));
    i = rank_of(res, nres, "chain");
    ASSERT(i < nres && res[i].chunk_bytes < (size_t)4u << 20);
}

/* One algorithm alone, as collviz asks: the same row coll__cost_rank_algos ranks it with. */
TEST(one_algorithm_priced_as_the_ranking_prices_it)
{
    static const size_t chunks[] = COLL_COST_SELECT_CHUNKS;
    struct coll_cost_params p;
    struct coll_cost_result res[32], one;
    struct coll_cost_query q = {.coll = COLL_COLL_ALLREDUCE, .nranks = 6, .count = 3u << 20,
                                .dtype = COLL_FLOAT32, .chunk_bytes = chunks,
                                .nchunk_bytes = COLL_ARRAY_SIZE(chunks)};
    size_t nres = 0;
    int found = 0;

    coll__cost_params_default(&p);
    ASSERT_OK(coll__cost_rank_algos(&p, NULL, &q, res, 32, &nres));
    for (size_t i = 0; i < nres; i++) {
        ASSERT_OK(coll__cost_rank_algo(&p, NULL, res[i].algo, &q, &one));
        ASSERT(one.algo == res[i].algo);
        ASSERT_DEQ(one.seconds, res[i].seconds);
        ASSERT_EQ(one.chunk_count, res[i].chunk_count);
        found++;
    }
    ASSERT(found >= 3);
    /* an algorithm that cannot run the call is an error, not a row */
    ASSERT_EQ(coll__cost_rank_algo(&p, NULL, coll__algo_find("chain"), &q, &one),
              COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "chain cannot run allreduce");
}

/* ---- 4b the flat path's row ---------------------------------------------------------- */

/* Dyadic flat parameters: every price below is a sum of exact terms. */
static struct coll_cost_params flat_dyadic(void)
{
    struct coll_cost_params p;

    coll__cost_params_default(&p);
    p.flat.alpha = 1.0 / (1 << 20);
    p.flat.beta = 1.0 / 4294967296.0;
    p.flat.sliced = 1.0 / 8589934592.0;
    p.flat.yield = 1.0 / (1 << 18);
    p.mem = 1;
    p.cache_bytes = 0;
    p.cores = 0;
    return p;
}

static double flat_t(const struct coll_cost_params *p, enum coll_coll c, size_t bytes, int n)
{
    double t = -1;

    ASSERT_OK(coll__cost_predict_flat(p, c, bytes, n, NULL, &t));
    return t;
}

TEST(flat_row_prices_by_its_formula)
{
    struct coll_cost_params p = flat_dyadic();
    const double a = p.flat.alpha, b = p.flat.beta, s = p.flat.sliced, y = p.flat.yield;
    const size_t M = 1u << 20;

    /* small calls: alpha per rank, beta per byte each rank touches (n + 1 inputs for the
     * reductions and all-gather, 2 for broadcast, none for barrier) */
    ASSERT_DEQ(flat_t(&p, COLL_COLL_ALLREDUCE, 4096, 4), 4 * a + b * 4096 * 5);
    ASSERT_DEQ(flat_t(&p, COLL_COLL_ALLGATHER, 1024, 4), 4 * a + b * 1024 * 5);
    ASSERT_DEQ(flat_t(&p, COLL_COLL_REDUCE, 64, 8), 8 * a + b * 64 * 9);
    ASSERT_DEQ(flat_t(&p, COLL_COLL_BROADCAST, 64, 2), 2 * a + b * 64 * 2);
    ASSERT_DEQ(flat_t(&p, COLL_COLL_BARRIER, 4096, 8), 8 * a);
    /* a reduce of up to 64 KiB goes whole to the root: priced as a small call */
    ASSERT_DEQ(flat_t(&p, COLL_COLL_REDUCE, 32768, 4), 4 * a + b * 32768 * 5);
    /* in pieces of 1 MiB: k pieces of w all-rank waits, then the passes over the bytes */
    ASSERT_DEQ(flat_t(&p, COLL_COLL_ALLREDUCE, 4 * M, 4), 4 * 2 * (4 * a) + s * 4 * M * 3);
    ASSERT_DEQ(flat_t(&p, COLL_COLL_ALLREDUCE, 4 * M + 4, 2), 5 * 2 * (2 * a) + s * (4 * M + 4) * 3);
    ASSERT_DEQ(flat_t(&p, COLL_COLL_BROADCAST, 3 * M, 2), 3 * 1 * (2 * a) + s * 3 * M * 2);
    ASSERT_DEQ(flat_t(&p, COLL_COLL_REDUCE, 2 * M, 4), 2 * 2 * (4 * a) + s * 2 * M * 2.75);
    /* the slot sizes are the comm's: 8 KiB small calls, pieces of 256 KiB */
    {
        struct coll_cost_flat_sizes sz = {8192, 256u << 10};
        double t;
        ASSERT_OK(coll__cost_predict_flat(&p, COLL_COLL_ALLGATHER, 8192, 2, &sz, &t));
        ASSERT_DEQ(t, 2 * a + b * 8192 * 3);
        ASSERT_OK(coll__cost_predict_flat(&p, COLL_COLL_ALLREDUCE, M, 2, &sz, &t));
        ASSERT_DEQ(t, 4 * 2 * (2 * a) + s * M * 3);
    }
    /* more ranks than cores: a wait pays yield per rank beyond them, bytes share the cores */
    p.cores = 2;
    ASSERT_DEQ(flat_t(&p, COLL_COLL_ALLREDUCE, 8, 8), 8 * a + 6 * y + b * 8 * 9 * 4);
    ASSERT_DEQ(flat_t(&p, COLL_COLL_ALLREDUCE, 2 * M, 4),
               2 * 2 * (4 * a + 2 * y) + s * 2 * M * 3 * 2);
    ASSERT_DEQ(flat_t(&p, COLL_COLL_ALLREDUCE, 8, 2), 2 * a + b * 8 * 3);
    /* a reduce's root folds alone: its bytes do not share the cores */
    ASSERT_DEQ(flat_t(&p, COLL_COLL_REDUCE, 8192, 8), 8 * a + 6 * y + b * 8192 * 9);
    /* the memory term: 2 ranks' 4 MiB buffers and 1 MiB slots are 20 MiB; with 10 MiB of
     * cache half the bytes come from memory, at mem = 3 twice the per-byte cost */
    p.cores = 0;
    p.mem = 3;
    p.cache_bytes = 10 * (double)M;
    ASSERT_DEQ(flat_t(&p, COLL_COLL_ALLREDUCE, 4 * M, 2), 4 * 2 * (2 * a) + s * 4 * M * 3 * 2);
    ASSERT_DEQ(flat_t(&p, COLL_COLL_ALLREDUCE, 8, 2), 2 * a + b * 8 * 3); /* fits */
}

TEST(flat_row_refuses_what_the_path_does_not_run)
{
    struct coll_cost_params p = flat_dyadic();
    struct coll_cost_flat_sizes none = {4096, 0};
    double t = 7;

    ASSERT_EQ(coll__cost_predict_flat(&p, COLL_COLL_ALLTOALL, 64, 4, NULL, &t),
              COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "does not run alltoall");
    ASSERT_EQ(coll__cost_predict_flat(&p, COLL_COLL_ALLGATHER, 8192, 4, NULL, &t),
              COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__cost_predict_flat(&p, COLL_COLL_ALLREDUCE, 8192, 4, &none, &t),
              COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__cost_predict_flat(&p, COLL_COLL_ALLREDUCE, 8192, 17, NULL, &t),
              COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__cost_predict_flat(&p, COLL_COLL_ALLREDUCE, 8, 0, NULL, &t),
              COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__cost_predict_flat(NULL, COLL_COLL_ALLREDUCE, 8, 2, NULL, &t),
              COLL_INVALID_ARGUMENT);
    ASSERT_EQ(coll__cost_predict_flat(&p, COLL_COLL_ALLREDUCE, 8, 2, NULL, NULL),
              COLL_INVALID_ARGUMENT);
    ASSERT_DEQ(t, 7); /* outputs only on success */
    ASSERT_OK(coll__cost_predict_flat(&p, COLL_COLL_ALLREDUCE, 8192, 16, NULL, &t));
    /* the largest size still counts its pieces (2^44 of 1 MiB), with no wrap-around */
    p.flat.sliced = 0;
    ASSERT_OK(coll__cost_predict_flat(&p, COLL_COLL_ALLREDUCE, SIZE_MAX, 2, NULL, &t));
    ASSERT_DEQ(t, 17592186044416.0 * 2 * (2 * p.flat.alpha));
}

/* The defaults give back the figures they were taken from (docs/performance.md's blocking
 * calls, docs/results/paths-summary.txt), within 15%: a change of formula or of a default
 * that no longer fits its evidence fails here. */
TEST(flat_row_defaults_fit_their_evidence)
{
    struct coll_cost_params p;
    const size_t M = 1u << 20;

    coll__cost_params_default(&p);
#define NEAR(c, bytes, n, nc, us)                                                               \
    do {                                                                                           \
        p.cores = (nc);                                                                            \
        double t_ = flat_t(&p, c, bytes, n) * 1e6;                                                 \
        if (fabs(t_ - (us)) > 0.15 * (us))                                                         \
            HARNESS_FAIL("%s of %zu B on %d ranks (%d cores): %.3g us, measured %.3g",             \
                         #c, (size_t)(bytes), n, nc, t_, (double)(us));                            \
    } while (0)
    NEAR(COLL_COLL_ALLREDUCE, 8, 2, 2, 0.18);
    NEAR(COLL_COLL_ALLREDUCE, 4096, 2, 2, 4096 / 4.88e3);
    NEAR(COLL_COLL_ALLREDUCE, 4 * M, 2, 2, 4 * M / 10.03e3);
    NEAR(COLL_COLL_ALLREDUCE, M, 2, 2, M / 9.12e3);
    NEAR(COLL_COLL_ALLREDUCE, 8, 4, 2, 3.01);
    NEAR(COLL_COLL_ALLREDUCE, 8, 8, 2, 9.22);
    NEAR(COLL_COLL_ALLREDUCE, 4 * M, 4, 2, 4 * M / (7.09e3 / 1.5));
#undef NEAR
}

/* ---- 5 the calibration file ---------------------------------------------------------- */

static char *temp_path(void)
{
    static char path[256];
    const char *dir = getenv("TMPDIR");
    int fd;

    snprintf(path, sizeof(path), "%s/coll_cost_XXXXXX", dir && *dir ? dir : "/tmp");
    fd = mkstemp(path);
    ASSERT_MSG(fd >= 0, "mkstemp failed");
    close(fd);
    return path;
}

static bool params_equal(const struct coll_cost_params *a, const struct coll_cost_params *b)
{
    for (int l = 0; l < COLL_NUM_LINKS; l++)
        if (a->link[l].alpha != b->link[l].alpha || a->link[l].beta != b->link[l].beta ||
            a->link[l].rdv != b->link[l].rdv || a->link[l].rdv_bytes != b->link[l].rdv_bytes ||
            a->link[l].lat != b->link[l].lat || a->link[l].xchg != b->link[l].xchg)
            return false;
    for (int d = 0; d < COLL_NUM_DTYPES; d++)
        if (a->gamma[d] != b->gamma[d])
            return false;
    return a->copy == b->copy && a->mem == b->mem && a->cache_bytes == b->cache_bytes &&
           a->step == b->step && a->flat.alpha == b->flat.alpha &&
           a->flat.beta == b->flat.beta && a->flat.sliced == b->flat.sliced &&
           a->flat.yield == b->flat.yield;
}

TEST(calibration_file_round_trip)
{
    struct coll_cost_params p, q;
    char *path = temp_path(), text[4096];
    FILE *f;
    size_t n;

    coll__cost_params_default(&p);
    p.link[COLL_LINK_TCP].alpha = 1.1e-05;
    p.link[COLL_LINK_SHM].beta = 1 / 7.123456789e9; /* needs all 17 digits */
    p.link[COLL_LINK_IB].alpha = 0;
    p.gamma[COLL_BFLOAT16] = 3.3e-10;
    p.copy = 0.1;
    p.link[COLL_LINK_SHM].rdv = 2.5e-6;
    p.link[COLL_LINK_SHM].rdv_bytes = 16384;
    p.mem = 4.87;
    p.cache_bytes = 14145536;
    p.link[COLL_LINK_TCP].lat = 4.25e-5;
    p.link[COLL_LINK_TCP].xchg = 8.3e-6;
    p.step = 3.3e-7;
    p.flat.alpha = 1.25e-7;
    p.flat.beta = 1 / 17.123456789e9;
    p.flat.sliced = 0;
    p.flat.yield = 2.5e-6;
    ASSERT_OK(coll__cost_params_save(&p, path));
    memset(&q, 0, sizeof(q));
    ASSERT_OK(coll__cost_params_load(&q, path));
    ASSERT(params_equal(&p, &q));

    f = fopen(path, "r");
    ASSERT(f != NULL);
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    ASSERT_STR_CONTAINS(text, "\ntcp.alpha 1.1e-05\n");
    ASSERT_STR_CONTAINS(text, "\ngamma.float ");
    ASSERT_STR_CONTAINS(text, "\ncopy 0.1\n");
    ASSERT_STR_CONTAINS(text, "\nshm.rdv 2.5e-06\n");
    ASSERT_STR_CONTAINS(text, "\nshm.rdv_bytes 16384\n");
    ASSERT_STR_CONTAINS(text, "\nmem 4.87\n");
    ASSERT_STR_CONTAINS(text, "\ncache_bytes 14145536\n");
    ASSERT_STR_CONTAINS(text, "\ntcp.lat 4.25e-05\n");
    ASSERT_STR_CONTAINS(text, "\ntcp.xchg 8.3e-06\n");
    ASSERT_STR_CONTAINS(text, "\nstep 3.3e-07\n");
    ASSERT_STR_CONTAINS(text, "\nflat.alpha 1.25e-07\n");
    ASSERT_STR_CONTAINS(text, "\nflat.sliced 0\n");
    ASSERT_STR_CONTAINS(text, "\nflat.yield 2.5e-06\n");
    ASSERT_STR_CONTAINS(text, "\nflat.beta ");
    unlink(path);
}

/* A file written before the flat path had a row (no flat.* keys) still loads, and the row
 * keeps its defaults; a file that has the row sets it. */
TEST(calibration_file_without_the_flat_row)
{
    struct coll_cost_params p, d;
    char *path = temp_path();
    FILE *f = fopen(path, "w");

    ASSERT(f != NULL);
    fputs("# coll cost model parameters (collbench --calibrate writes this file)\n"
          "tcp.alpha 7.2e-06\ntcp.beta 2.67e-10\nshm.alpha 1e-06\ncopy 2.4e-11\nstep 3e-07\n",
          f);
    fclose(f);
    coll__cost_params_default(&d);
    memset(&p, 0, sizeof(p));
    ASSERT_OK(coll__cost_params_load(&p, path));
    ASSERT_DEQ(p.link[COLL_LINK_TCP].alpha, 7.2e-06);
    ASSERT_DEQ(p.flat.alpha, d.flat.alpha);
    ASSERT_DEQ(p.flat.beta, d.flat.beta);
    ASSERT_DEQ(p.flat.sliced, d.flat.sliced);
    ASSERT_DEQ(p.flat.yield, d.flat.yield);
    ASSERT(d.flat.alpha > 0 && d.flat.beta > 0 && d.flat.sliced > 0 && d.flat.yield > 0);
    unlink(path);

    ASSERT_OK(coll__cost_params_parse(&p, "flat.alpha 2e-7\nflat.yield 3e-6\nflat.beta 1e-10\n"
                                          "flat.sliced 4e-11\nflat.other 1\n",
                                      "test"));
    ASSERT_DEQ(p.flat.alpha, 2e-7);
    ASSERT_DEQ(p.flat.beta, 1e-10);
    ASSERT_DEQ(p.flat.sliced, 4e-11);
    ASSERT_DEQ(p.flat.yield, 3e-6);
    ASSERT_EQ(coll__cost_params_parse(&p, "flat.alpha -1\n", "test"), COLL_INVALID_ARGUMENT);
}

TEST(calibration_file_syntax)
{
    struct coll_cost_params p, d;

    coll__cost_params_default(&d);
    ASSERT_OK(coll__cost_params_parse(&p,
                                      "# measured by hand\n"
                                      "\n"
                                      "   tcp.alpha   2.5e-05   # trailing comment\n"
                                      "shm.beta\t1e-10\r\n"
                                      "gamma.float 2.0e-10\n"
                                      "gamma.half 0\n"
                                      "shm.rdv 3e-6\n"
                                      "mem 2.5\n"
                                      "cache_bytes 8388608\n"
                                      "copy 4e-11", /* no final newline */
                                      "test"));
    ASSERT_DEQ(p.link[COLL_LINK_SHM].rdv, 3e-6);
    ASSERT_DEQ(p.link[COLL_LINK_SHM].rdv_bytes, d.link[COLL_LINK_SHM].rdv_bytes);
    ASSERT_DEQ(p.mem, 2.5);
    ASSERT_DEQ(p.cache_bytes, 8388608);
    ASSERT_DEQ(p.link[COLL_LINK_TCP].alpha, 2.5e-05);
    ASSERT_DEQ(p.link[COLL_LINK_SHM].beta, 1e-10);
    ASSERT_DEQ(p.gamma[COLL_FLOAT32], 2.0e-10);
    ASSERT_DEQ(p.gamma[COLL_FLOAT16], 0);
    ASSERT_DEQ(p.copy, 4e-11);
    /* keys not given keep the defaults */
    ASSERT_DEQ(p.link[COLL_LINK_TCP].beta, d.link[COLL_LINK_TCP].beta);
    ASSERT_DEQ(p.gamma[COLL_FLOAT64], d.gamma[COLL_FLOAT64]);

    /* unknown keys are a note, not an error */
    ASSERT_OK(coll__cost_params_parse(&p,
                                      "nvlink.alpha 1e-6\ngamma.float128 1\ntcp.gamma 1\n"
                                      "tcp.alpha 3e-5\n",
                                      "test"));
    ASSERT_DEQ(p.link[COLL_LINK_TCP].alpha, 3e-5);
    ASSERT_DEQ(p.link[COLL_LINK_TCP].beta, d.link[COLL_LINK_TCP].beta);
}

static void expect_malformed(const char *text, const char *where)
{
    struct coll_cost_params p, before;

    coll__cost_params_default(&p);
    p.copy = 123; /* outputs only on success */
    before = p;
    ASSERT_EQ(coll__cost_params_parse(&p, text, "calib.txt"), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "'calib.txt'");
    ASSERT_STR_CONTAINS(coll_last_error(NULL), where);
    ASSERT(params_equal(&p, &before));
}

TEST(malformed_calibration_file_is_rejected_with_its_line)
{
    expect_malformed("tcp.alpha\n", "line 1:");
    expect_malformed("tcp.alpha 1e-5\n# fine\n\ntcp.beta 1e-9 extra\n", "line 4:");
    expect_malformed("tcp.alpha 1e-5\nshm.alpha abc\n", "line 2:");
    expect_malformed("\n\ntcp.alpha -1e-6\n", "line 3:");
    expect_malformed("tcp.alpha nan\n", "line 1:");
    expect_malformed("tcp.alpha inf\n", "line 1:");
    expect_malformed("tcp.alpha 1e999\n", "line 1:");
    expect_malformed("tcp.alpha 1e-5x\n", "line 1:");
    expect_malformed("a b c\n", "line 1:");
    /* a malformed line is an error even when its key is unknown */
    expect_malformed("ok.key 1\nfuture.key\n", "line 2:");

    /* the same through a file */
    char *path = temp_path();
    FILE *f = fopen(path, "w");
    struct coll_cost_params p;
    ASSERT(f != NULL);
    fputs("# calibration\ntcp.alpha 1e-5\ntcp.beta twelve\n", f);
    fclose(f);
    ASSERT_EQ(coll__cost_params_load(&p, path), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), path);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "line 3:");
    unlink(path);
}

TEST(missing_calibration_file)
{
    struct coll_cost_params p;

    ASSERT_EQ(coll__cost_params_load(&p, "/nonexistent/coll/cost.txt"), COLL_SYSTEM_ERROR);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "/nonexistent/coll/cost.txt");
    ASSERT_EQ(coll__cost_params_save(&p, "/nonexistent/coll/cost.txt"), COLL_SYSTEM_ERROR);
}

/* ---- 6 errors ------------------------------------------------------------------------ */

TEST(unmatched_and_mismatched_schedules_are_errors)
{
    struct coll_cost_params p = dyadic();
    struct coll_schedule s[2];
    double t = 42;

    /* a send nobody receives */
    scheds_init(s, 2);
    send_(&s[0], 1, 8, 0, NULL);
    send_(&s[0], 1, 8, 0, NULL);
    recv_(&s[1], 0, 8, 0, NULL);
    ASSERT_EQ(coll__cost_simulate(&p, NULL, s, 2, &t, NULL), COLL_INTERNAL_ERROR);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "receives only 1");
    ASSERT_DEQ(t, 42); /* outputs only on success */
    scheds_free(s, 2);

    /* a receive nobody sends */
    scheds_init(s, 2);
    recv_(&s[1], 0, 8, 0, NULL);
    ASSERT_EQ(coll__cost_simulate(&p, NULL, s, 2, &t, NULL), COLL_INTERNAL_ERROR);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "rank 1 step 0");
    scheds_free(s, 2);

    /* counts that differ */
    scheds_init(s, 2);
    send_(&s[0], 1, 8, 0, NULL);
    recv_(&s[1], 0, 9, 0, NULL);
    ASSERT_EQ(coll__cost_simulate(&p, NULL, s, 2, &t, NULL), COLL_INTERNAL_ERROR);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "takes 9");
    scheds_free(s, 2);
}

TEST(deadlocked_schedules_are_errors)
{
    struct coll_cost_params p = dyadic();
    struct coll_schedule s[2];
    double t = 42;

    /* each rank sends only after receiving: nothing can start */
    scheds_init(s, 2);
    for (int32_t r = 0; r < 2; r++) {
        uint32_t rv = recv_(&s[r], 1 - r, 8, 0, NULL);
        send_(&s[r], 1 - r, 8, 1, &rv);
    }
    ASSERT_EQ(coll__cost_simulate(&p, NULL, s, 2, &t, NULL), COLL_INTERNAL_ERROR);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "deadlock");
    ASSERT_DEQ(t, 42);
    scheds_free(s, 2);
}

TEST(messages_of_a_channel_keep_their_order)
{
    /* rank 0's first send waits for a copy, its second is ready at once, and rank 1 has
     * posted both receives: the second message still goes after the first (FIFO links;
     * the k-th send pairs with the k-th receive). */
    struct coll_cost_params p = dyadic();
    struct coll_schedule s[2];
    uint32_t c;

    scheds_init(s, 2);
    c = copy_(&s[0], 8);
    send_(&s[0], 1, 8, 1, &c);
    send_(&s[0], 1, 8, 0, NULL);
    recv_(&s[1], 0, 8, 0, NULL);
    ASSERT_OK(coll__sched_recv(&s[1], 0, coll__slice(COLL_BUF_RECV, 8, 8), 0, NULL, NULL));
    ASSERT_DEQ(simulate(&p, NULL, s, 2, NULL), 8 * 4 * CP + 2 * (A + 32 * B));
    scheds_free(s, 2);
}

/* The stream and quant paths' rows (cost.h): the closed forms as written, term by term. */
TEST(stream_and_quant_rows)
{
    struct coll_cost_params p;
    struct coll_cost_stream st = {.in_bytes = 1000, .out_bytes = 3000, .host_seconds = 5e-6};
    struct coll_cost_quant q = {.nranks = 4, .count = 1 << 20, .elem_size = 4, .ratio = 0.25,
                                .link = COLL_LINK_SHM};
    const struct coll_link_cost *l;
    double f = 4.0 * (1 << 20), e = 0.25 * 4.0 * (1 << 20), g, want;

    coll__cost_params_default(&p);
    p.copy = 1e-10;
    p.link[COLL_LINK_CUDA].alpha = 3e-6;
    p.link[COLL_LINK_CUDA].beta = 2e-11;
    /* staging: the host call plus both copies at the copy rate */
    want = 5e-6 + 4000 * 1e-10;
    ASSERT_MSG(fabs(coll__cost_predict_stream(&p, &st) - want) < 1e-15, "staging %g, want %g",
               coll__cost_predict_stream(&p, &st), want);
    /* CUDA IPC: a barrier per piece and one more, a launch per piece, bytes at cuda.beta */
    st.ipc = true;
    st.pieces = 3;
    st.read_bytes = 8000;
    want = 4 * 5e-6 + 3 * 3e-6 + (1000 + 8000 + 3000) * 2e-11;
    ASSERT_MSG(fabs(coll__cost_predict_stream(&p, &st) - want) < 1e-15, "ipc %g, want %g",
               coll__cost_predict_stream(&p, &st), want);
    /* quantized all-reduce: a gather or two all-to-all-v of the encoding, and fp32 passes */
    l = &p.link[COLL_LINK_SHM];
    g = p.gamma[COLL_FLOAT32];
    q.gather = true;
    want = 3 * (l->alpha + e * l->beta) + f * g * 5;
    ASSERT_MSG(fabs(coll__cost_predict_quant(&p, &q) - want) < 1e-12 * want, "gather %g, want %g",
               coll__cost_predict_quant(&p, &q), want);
    q.gather = false;
    want = 2 * 3 * (l->alpha + e / 4 * l->beta) + f * g * (3 + 0.25);
    ASSERT_MSG(fabs(coll__cost_predict_quant(&p, &q) - want) < 1e-12 * want,
               "scatter %g, want %g", coll__cost_predict_quant(&p, &q), want);
    /* fewer bytes on the wire never cost more */
    q.ratio = 0.125;
    ASSERT(coll__cost_predict_quant(&p, &q) < want);
    q.nranks = 1;
    ASSERT_MSG(fabs(coll__cost_predict_quant(&p, &q) - f * g * 2) < 1e-12 * f * g,
               "one rank: two passes");
}

TEST(invalid_arguments)
{
    struct coll_cost_params p = dyadic();
    struct coll_algo_args a = args(COLL_COLL_BROADCAST, 4, 0, 100, 10);
    struct coll_cost_links bad = {NULL, NULL, (enum coll_link)7};
    struct coll_schedule s[2];
    double t;

    ASSERT_EQ(coll__cost_predict(&p, NULL, coll__algo_find("ring"), &a, &t, NULL),
              COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "ring cannot run broadcast");
    a.nranks = 0;
    ASSERT_EQ(coll__cost_predict(&p, NULL, coll__algo_find("chain"), &a, &t, NULL),
              COLL_INVALID_ARGUMENT);
    scheds_init(s, 2);
    send_(&s[0], 1, 8, 0, NULL);
    recv_(&s[1], 0, 8, 0, NULL);
    ASSERT_EQ(coll__cost_simulate(&p, &bad, s, 2, &t, NULL), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "link class 7");
    /* a schedule handed in for the wrong rank */
    ASSERT_EQ(coll__cost_simulate(&p, NULL, s, 1, &t, NULL), COLL_INTERNAL_ERROR);
    scheds_free(s, 2);
}

/* ---- 7 the closed forms against the schedule walker ------------------------------------ */

/* Hosts of `per` consecutive ranks: shm inside, tcp between (what a comm's links are). */
static int32_t closed_hosts[4096];
static enum coll_link closed_link(void *arg, int32_t a, int32_t b)
{
    (void)arg;
    return closed_hosts[a] == closed_hosts[b] ? COLL_LINK_SHM : COLL_LINK_TCP;
}

struct pick_stats {
    int points, same, within; /* within: a different pick priced within `tol` by the walker */
    double worst;             /* the walker's price of the closed form's pick over its best */
};

/* Rank q both ways; count whether the closed form picks what the walker picks, and what
 * its pick costs by the walker's own price. */
static void compare_pick(const struct coll_cost_params *p, struct coll_cost_query q, int per,
                         double tol, struct pick_stats *ps, bool verbose)
{
    static const size_t chunks[] = COLL_COST_SELECT_CHUNKS;
    struct coll_cost_result walk[48], closed[48];
    struct coll_cost_links links = coll__cost_links_all(COLL_LINK_SHM);
    size_t nw = 0, nc = 0;
    double ratio = 1;

    q.chunk_bytes = chunks;
    q.nchunk_bytes = COLL_ARRAY_SIZE(chunks);
    if (per > 0 && per < q.nranks) {
        for (int32_t r = 0; r < q.nranks; r++)
            closed_hosts[r] = r / per;
        q.hosts = closed_hosts;
        q.nhosts = (q.nranks + per - 1) / per;
        links = (struct coll_cost_links){closed_link, NULL, COLL_LINK_TCP};
    }
    q.closed = false;
    ASSERT_OK(coll__cost_rank_algos(p, &links, &q, walk, 48, &nw));
    q.closed = true;
    ASSERT_OK(coll__cost_rank_algos(p, &links, &q, closed, 48, &nc));
    ASSERT_EQ(nw, nc);
    if (nw == 0)
        return;
    if (getenv("COST_CLOSED_SHOW")) {
        char key[64];
        snprintf(key, sizeof(key), "%s/%d/%d/%zu", coll__coll_name(q.coll), q.nranks, per,
                 q.count * coll__dtype_size(q.dtype));
        if (!strcmp(key, getenv("COST_CLOSED_SHOW")))
            for (size_t i = 0; i < nw; i++)
                for (size_t j = 0; j < nc; j++)
                    if (walk[i].algo == closed[j].algo)
                        printf("# %-14s walker %9.1f us (chunk %zu)  closed %9.1f us (chunk %zu)\n",
                               walk[i].algo->name, walk[i].seconds * 1e6, walk[i].chunk_bytes,
                               closed[j].seconds * 1e6, closed[j].chunk_bytes);
    }
    ps->points++;
    for (size_t i = 0; i < nw; i++) /* a tie by the walker's price is the same pick */
        if (walk[i].algo == closed[0].algo && walk[i].seconds <= walk[0].seconds * 1.001)
            ratio = 0;
    if (ratio == 0) {
        ratio = 1;
        ps->same++;
    } else if (walk[0].algo == closed[0].algo) {
        ps->same++;
    } else {
        for (size_t i = 0; i < nw; i++)
            if (walk[i].algo == closed[0].algo)
                ratio = walk[i].seconds / walk[0].seconds;
        ps->within += ratio <= 1 + tol;
        if (verbose)
            printf("# %s n=%d per=%d %zu B: walker %s %.1f us, closed %s (%.1f us closed, "
                   "%.1f us walked, x%.2f)\n",
                   coll__coll_name(q.coll), q.nranks, per, q.count * coll__dtype_size(q.dtype),
                   walk[0].algo->name, walk[0].seconds * 1e6, closed[0].algo->name,
                   closed[0].seconds * 1e6, walk[0].seconds * ratio * 1e6, ratio);
    }
    if (ratio > ps->worst)
        ps->worst = ratio;
}

/* Every collective, n and size of the grid; COST_CLOSED_FULL=1 for n = 2..64 and
 * 8 B..256 MiB (minutes), else a grid that runs in seconds. */
static void compare_grid(int per, double tol, struct pick_stats *ps)
{
    struct coll_cost_params p;
    const char *full_env = getenv("COST_CLOSED_FULL");
    bool full = full_env && full_env[0] == '1', verbose = getenv("COST_CLOSED_VERBOSE");
    static const int32_t quick_n[] = {2, 3, 4, 5, 6, 8, 12, 16, 24, 32};
    int32_t nmax = full ? 64 : (int32_t)COLL_ARRAY_SIZE(quick_n);
    size_t max_bytes = full ? (size_t)256 << 20 : (size_t)4 << 20;

    coll__cost_params_default(&p);
    memset(ps, 0, sizeof(*ps));
    for (int32_t i = 0; i < nmax; i++) {
        int32_t n = full ? i + 2 : quick_n[i];
        if (full && n > 64)
            break;
        for (int c = 0; c < COLL_NUM_COLLS; c++) {
            size_t last = SIZE_MAX;
            for (size_t bytes = 8; bytes <= max_bytes; bytes *= full ? 4 : 8) {
                struct coll_cost_query q = {
                    .coll = (enum coll_coll)c,
                    .nranks = n,
                    .dtype = COLL_FLOAT32,
                };
                size_t total = bytes;
                /* the block collectives: bytes is the whole buffer, n blocks of it */
                if (c == COLL_COLL_ALLGATHER || c == COLL_COLL_REDUCE_SCATTER ||
                    c == COLL_COLL_ALLTOALL || c == COLL_COLL_GATHER || c == COLL_COLL_SCATTER)
                    total = COLL_MAX(bytes / (size_t)n, (size_t)4);
                q.count = c == COLL_COLL_BARRIER ? 0 : total / 4;
                if (q.count == last)
                    continue;
                last = q.count;
                if (c == COLL_COLL_BARRIER && bytes > 8)
                    break;
                compare_pick(&p, q, per, tol, ps, verbose);
            }
        }
    }
    printf("# closed form against the walker, %s: %d points, same pick at %d (%.1f%%), "
           "%d more within %.0f%%, worst x%.2f\n",
           per ? "4 ranks per host" : "one host", ps->points, ps->same,
           100.0 * ps->same / COLL_MAX(ps->points, 1), ps->within, tol * 100, ps->worst);
}

TEST(closed_form_picks_as_the_walker_one_host)
{
    struct pick_stats ps;

    compare_grid(0, 0.25, &ps);
    ASSERT(ps.points > 100);
    ASSERT_MSG(ps.same >= 0.95 * ps.points, "same pick at %d of %d", ps.same, ps.points);
    ASSERT_MSG(ps.same + ps.within >= 0.99 * ps.points, "%d + %d of %d", ps.same, ps.within,
               ps.points);
}

TEST(closed_form_picks_as_the_walker_hosts)
{
    struct pick_stats ps;

    compare_grid(4, 0.25, &ps);
    ASSERT(ps.points > 100);
    ASSERT_MSG(ps.same >= 0.95 * ps.points, "same pick at %d of %d", ps.same, ps.points);
    ASSERT_MSG(ps.same + ps.within >= 0.99 * ps.points, "%d + %d of %d", ps.same, ps.within,
               ps.points);
}

/* The closed forms answer at any n: every collective and size at 4,096 ranks in hosts of 8
 * and at 100,000 on one host, well inside the bound that separates milliseconds from the
 * walker's minutes (it took 18 GB at 4,096). */
TEST(closed_form_ranks_at_scale)
{
    static const size_t chunks[] = COLL_COST_SELECT_CHUNKS;
    struct coll_cost_params p;
    struct coll_cost_result res[48];
    struct timespec t0, t1;
    int rankings = 0;

    coll__cost_params_default(&p);
    for (int32_t r = 0; r < 4096; r++)
        closed_hosts[r] = r / 8;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int big = 0; big < 2; big++) {
        int32_t n = big ? 100000 : 4096;
        struct coll_cost_links links = big ? coll__cost_links_all(COLL_LINK_SHM)
                                           : (struct coll_cost_links){closed_link, NULL,
                                                                      COLL_LINK_TCP};
        for (int c = 0; c < COLL_NUM_COLLS; c++)
            for (size_t count = 1; c != COLL_COLL_SENDRECV && count <= ((size_t)1 << 28);
                 count *= 16) {
                struct coll_cost_query q = {
                    .coll = (enum coll_coll)c,
                    .nranks = n,
                    .count = c == COLL_COLL_BARRIER ? 0 : count,
                    .dtype = COLL_FLOAT32,
                    .chunk_bytes = chunks,
                    .nchunk_bytes = COLL_ARRAY_SIZE(chunks),
                    .hosts = big ? NULL : closed_hosts,
                    .nhosts = big ? 0 : 4096 / 8,
                    .closed = true,
                };
                size_t nres = 0;
                ASSERT_OK(coll__cost_rank_algos(&p, &links, &q, res, 48, &nres));
                ASSERT_MSG(nres > 0, "%s of %zu on %d ranks: nothing", coll__coll_name(q.coll),
                           count, n);
                for (size_t i = 0; i < nres; i++)
                    ASSERT(isfinite(res[i].seconds) && res[i].seconds >= 0);
                rankings++;
            }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("# %d rankings at 4,096 and 100,000 ranks in %.3f s (%.1f us each)\n", rankings, s,
           s / rankings * 1e6);
    ASSERT_MSG(s < 5, "%d rankings took %.1f s", rankings, s);
}

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
