/*
 * ranks.c - how a rank runs: its schedule's steps as one SimGrid actor, by the executor's
 * rules (collsim.c's header), with the cost model's per-step, per-message and per-byte
 * times.
 */
#include "collsim.h"

#include <simgrid/actor.h>
#include <simgrid/comm.h>
#include <simgrid/engine.h>
#include <simgrid/exec.h>
#include <simgrid/host.h>
#include <simgrid/link.h>
#include <simgrid/mailbox.h>
#include <xbt/dynar.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int32_t host_of(int32_t rank)
{
    return rank / S.o.per_host;
}

/* The calibration's terms of the link class between R and its step's peer. */
static const struct coll_link_cost *step_link(const struct srank *R, const struct sstep *st)
{
    return &S.p.link[S.r[st->peer].host == R->host ? COLL_LINK_SHM : COLL_LINK_TCP];
}

static double msg_cpu(const struct srank *R, const struct sstep *st)
{
    const struct coll_link_cost *l = step_link(R, st);
    double c = S.o.overhead_s >= 0 ? S.o.overhead_s : (l->alpha > l->lat ? l->alpha - l->lat : 0);
    if (l->rdv_bytes > 0 && (double)st->bytes >= l->rdv_bytes)
        c += l->rdv;
    return c;
}

static double local_cpu(const struct sstep *st)
{
    if (st->flags & F_FREE)
        return 0;
    if (st->kind == COLL_STEP_REDUCE)
        return S.p.gamma[S.o.dtype] * (double)st->bytes * S.mem_f;
    return S.p.copy * (double)st->bytes * S.mem_f;
}

/* A rank's own time: computation on its host's cores when ranks outnumber them (they share
 * them), else a plain wait, which costs the simulation less and times the same; with
 * --machine-cores, on the one machine's cores that all ranks share. */
static void run_cpu(const struct srank *R, double seconds)
{
    if (S.machine) {
        sg_exec_t e = sg_actor_exec_init(seconds * CPU_SPEED);
        sg_exec_set_host(e, S.machine);
        sg_exec_start(e);
        sg_exec_wait(e);
    } else if (S.o.cores >= S.o.per_host) {
        sg_actor_sleep_for(seconds);
    } else if (S.o.ports) {
        /* the rank's SimGrid host is its memory port; the cores are its host's */
        sg_exec_t e = sg_actor_exec_init(seconds * CPU_SPEED);
        sg_exec_set_host(e, S.hosts[R->host]);
        sg_exec_start(e);
        sg_exec_wait(e);
    } else {
        sg_actor_execute(seconds * CPU_SPEED);
    }
}

/* What a message costs beyond its latency when it reached the rank while it was sending
 * (F_XCHG): the calibration's exchange less its one way, per link class. */
static double xchg_lat(const struct srank *R, uint32_t i)
{
    const struct sstep *st = &R->steps[i];
    if (!(st->flags & F_XCHG))
        return 0;
    return step_link(R, st)->xchg;
}

/* The bytes SimGrid moves for a message between hosts over a shaped link (cost.h, burst),
 * as tc htb passes it: a packet goes whole while the link owes nothing and is billed after,
 * at the link's rate, before anything else goes; TCP hands it packets of up to burst bytes.
 * So a message first waits out what its host's link still owes (paid off at the rate while
 * the link passes nothing at its rate: a start barrier's 4 bytes wait for the warm-up's
 * debt), then goes as packets of burst bytes, each but the first after its predecessor's
 * debt: in SimGrid's terms, the debt and all packets but the last are bytes at the rate; the
 * last crosses at burst_beta a byte, and the link owes it. With --machine-cores the last
 * packet crosses no faster than the machine's cores copy it for the messages in flight (this
 * one among S.flows): fewer bytes would also hide it from the machine's copy path, where two
 * messages at once go at the path's half each (10 Gbit/s on the bed: at the rate). */
static long wire_bytes(const struct srank *R, const struct sstep *st, double now)
{
    const struct coll_link_cost *l = &S.p.link[COLL_LINK_TCP];
    double bb = l->burst_beta, m = (double)st->bytes, last, owed, at_rate;
    int32_t h = R->host;

    if (!S.debt || !(l->burst > 0) || !(l->beta > 0) || S.r[st->peer].host == h)
        return (long)st->bytes;
    owed = fmax(S.debt[h] - fmax(now - S.busy[h], 0) / l->beta, 0);
    last = coll__cost_last_packet(l, m);
    at_rate = owed + m - last;
    S.debt[h] = last;
    S.busy[h] = fmax(now, S.busy[h]) + at_rate * l->beta;
    if (S.o.machine_bw > 0)
        bb = fmin(fmax(bb, (double)S.flows / S.o.machine_bw), l->beta);
    return (long)llround(at_rate + last * bb / l->beta);
}

/* --machine-cores: whether, besides R, as many ranks as the machine has cores work or poll
 * now (a wait polls --spin, then sleeps; a rank done with its call polls as its next one
 * waits). Then no core idles, and a rank that slept wakes without the cost of a halted
 * CPU's (the calibration's wake, measured on an idle machine). */
static bool cores_busy(const struct srank *R, double now)
{
    int32_t busy = 0;
    if (!S.machine)
        return false;
    for (int32_t r = 0; r < S.o.nranks && busy < S.o.machine_cores; r++)
        if (&S.r[r] != R && (S.r[r].wait_since < 0 || now - S.r[r].wait_since < S.o.spin_s))
            busy++;
    return busy >= S.o.machine_cores;
}

/* A wait that outlasts the rank's polling (--spin) sleeps, and its rank runs the
 * calibration's wake after its message's first bytes came (cost.h): a message that takes
 * longer than that on its link hides it. slots: the activities' (latency waits have none).
 * With --machine-cores, the polling itself holds one of the machine's cores: where ranks
 * outnumber them, a rank that polls slows the ones that work, as on the bed. It holds the
 * core for --spin of CPU time, where the engine polls --spin of its clock: under sharing a
 * little longer on the wall. (sg_comm_wait_any_for's timeout would end it on the clock, but
 * SimGrid 3.32's frees the waited comms when it times out.) */
static ssize_t wait_any(struct srank *R, sg_comm_t *act, size_t n, const uint32_t *steps,
                        const uint32_t *slots)
{
    double t0 = simgrid_get_clock();
    ssize_t w;
    R->wait_since = t0;
    if (S.machine && S.o.calib && S.o.spin_s > 0) {
        sg_exec_t e = sg_actor_exec_init(S.o.spin_s * CPU_SPEED);
        sg_exec_set_host(e, S.machine);
        sg_exec_start(e);
        w = sg_comm_wait_any(act, n);
        if (!sg_exec_test(e))
            sg_exec_cancel(e);
    } else {
        w = sg_comm_wait_any(act, n);
    }
    R->wait_since = -1;
    if (w >= 0 && S.o.calib && S.p.wake > 0 && simgrid_get_clock() - t0 > S.o.spin_s &&
        !cores_busy(R, simgrid_get_clock()) &&
        slots[w] != LAT_PUT && (slots[w] == NONE || !(slots[w] & LAT_SLOT))) {
        const struct sstep *st = &R->steps[steps[w]];
        double dur = (double)st->bytes * step_link(R, st)->beta;
        if (S.p.wake > dur)
            sg_actor_sleep_for(S.p.wake - dur);
    }
    return w;
}

static double step_cpu(void)
{
    return S.o.step_s >= 0 ? S.o.step_s : S.p.step;
}

static void mailbox_name(char *buf, size_t n, int32_t src, int32_t dst)
{
    snprintf(buf, n, "%d>%d", src, dst);
}

void fail_run(const char *fmt, ...)
{
    va_list ap;
    if (S.failed)
        return;
    va_start(ap, fmt);
    vsnprintf(S.errbuf, sizeof(S.errbuf), fmt, ap);
    va_end(ap);
    S.failed = S.errbuf;
}

/* Receive payload slots that never move while their receive is posted. */
struct slots {
    void ***blocks;
    size_t nblocks;
    uint32_t *free_ids;
    size_t nfree, next;
};

static void **slot_at(struct slots *s, uint32_t id)
{
    return &s->blocks[id / 256][id % 256];
}

static bool slot_get(struct slots *s, uint32_t *id_p)
{
    if (s->nfree) {
        *id_p = s->free_ids[--s->nfree];
        return true;
    }
    if (s->next == s->nblocks * 256) {
        void ***b = realloc(s->blocks, (s->nblocks + 1) * sizeof(*b));
        uint32_t *f = realloc(s->free_ids, (s->nblocks + 1) * 256 * sizeof(*f));
        if (b)
            s->blocks = b;
        if (f)
            s->free_ids = f;
        if (!b || !f || !(s->blocks[s->nblocks] = calloc(256, sizeof(void *))))
            return false;
        s->nblocks++;
    }
    *id_p = (uint32_t)s->next++;
    return true;
}

/* The message one window later on the same link may be posted: when this one's data is in
 * (a receive's latency wait does not hold its link). */
static void win_pass(struct srank *R, uint32_t i, uint32_t *ready, uint32_t *nready)
{
    struct sstep *st = &R->steps[i];
    if (st->flags & F_WIN)
        return;
    st->flags |= F_WIN;
    if (st->win_next != NONE && --R->steps[st->win_next].left == 0)
        ready[(*nready)++] = st->win_next;
}

static void done_step(struct srank *R, uint32_t i, uint32_t *ready, uint32_t *nready)
{

    R->steps[i].flags |= F_DONE;
    R->ndone++;
    win_pass(R, i, ready, nready);
    for (uint32_t k = R->rdep_off[i]; k < R->rdep_off[i + 1]; k++) {
        uint32_t j = R->rdep[k];
        if (--R->steps[j].left == 0)
            ready[(*nready)++] = j;
    }
}

static bool act_reserve(sg_comm_t **act, uint32_t **step, uint32_t **slot, uint32_t *cap,
                        uint32_t need)
{
    uint32_t nc = need * 2;
    sg_comm_t *a;
    uint32_t *as, *sl;
    if (need <= *cap)
        return true;
    a = realloc(*act, nc * sizeof(*a));
    if (!a)
        return false;
    *act = a;
    as = realloc(*step, nc * sizeof(*as));
    if (!as)
        return false;
    *step = as;
    sl = realloc(*slot, nc * sizeof(*sl));
    if (!sl)
        return false;
    *slot = sl;
    *cap = nc;
    return true;
}

sg_host_t rank_host(int32_t r)
{
    return S.o.ports ? S.hosts[S.nfab + (size_t)r] : S.hosts[host_of(r)];
}

/* Streams: the latency of a message from peer to R, run after its data is in. Within a
 * host shared memory's; between hosts the route's links' (as the platform gave them). */
static double pair_lat(struct srank *R, int32_t peer)
{
    double lat = 0;
    xbt_dynar_t d;
    if (S.r[peer].host == R->host)
        return S.o.intra_lat;
    for (uint32_t k = 0; k < R->nlat; k++)
        if (R->lat_peer[k] == peer)
            return R->lat_val[k];
    d = xbt_dynar_new(sizeof(sg_link_t), NULL);
    sg_host_get_route(rank_host(peer), rank_host(R->rank), d);
    for (unsigned long k = 0; k < xbt_dynar_length(d); k++) {
        const double *l = sg_link_get_data(xbt_dynar_get_as(d, k, sg_link_t));
        lat += l ? *l : 0;
    }
    xbt_dynar_free(&d);
    if (R->nlat == R->caplat) {
        uint32_t nc = R->caplat ? 2 * R->caplat : 4;
        int32_t *p = realloc(R->lat_peer, nc * sizeof(*p));
        double *v = p ? realloc(R->lat_val, nc * sizeof(*v)) : NULL;
        if (p)
            R->lat_peer = p;
        if (!v)
            return lat; /* not kept: found again next time */
        R->lat_val = v;
        R->caplat = nc;
    }
    R->lat_peer[R->nlat] = peer;
    R->lat_val[R->nlat++] = lat;
    return lat;
}

void rank_main(int argc, char **argv)
{
    struct srank *R = sg_actor_self_get_data();
    uint32_t n = R->nsteps, nready = 0, nact = 0, cap = 0;
    uint32_t *ready = malloc(sizeof(uint32_t) * (n ? n : 1));
    uint32_t *comms = malloc(sizeof(uint32_t) * (n ? n : 1)), ncomms;
    uint32_t *locals = malloc(sizeof(uint32_t) * (n ? n : 1)), nlocals;
    sg_comm_t *act = NULL;
    uint32_t *act_step = NULL, *act_slot = NULL;
    struct slots slots = {0};
    char mb[32];

    (void)argc, (void)argv;
    if (!ready || !comms || !locals) {
        fail_run("out of memory for rank %d's state", R->rank);
        goto out;
    }
    for (uint32_t i = 0; i < n; i++)
        if (R->steps[i].left == 0)
            ready[nready++] = i;
    /* the call's own cost before its first step (cost.h, call) */
    if (n && S.o.calib && S.p.call > 0)
        run_cpu(R, S.p.call);
    while (R->ndone < n && !S.failed) {
        double cpu = 0, now;
        ncomms = nlocals = 0;
        while (nready) {
            uint32_t i = ready[--nready];
            struct sstep *st = &R->steps[i];
            if (st->kind == COLL_STEP_SEND || st->kind == COLL_STEP_RECV) {
                comms[ncomms++] = i;
                /* the next message on this link may be posted now (order kept) */
                if (st->next_same != NONE && --R->steps[st->next_same].left == 0)
                    ready[nready++] = st->next_same;
            } else {
                locals[nlocals++] = i;
            }
        }
        if (ncomms) {
            bool sends = false;
            for (uint32_t k = 0; k < ncomms; k++) {
                const struct sstep *st = &R->steps[comms[k]];
                cpu += step_cpu();
                if (st->kind == COLL_STEP_SEND) {
                    cpu += msg_cpu(R, st);
                    sends = true;
                }
            }
            if (cpu > 0)
                run_cpu(R, cpu);
            now = simgrid_get_clock();
            if (!act_reserve(&act, &act_step, &act_slot, &cap, nact + ncomms)) {
                fail_run("out of memory for rank %d's messages", R->rank);
                break;
            }
            for (uint32_t k = 0; k < ncomms; k++) {
                uint32_t i = comms[k], slot = NONE;
                struct sstep *st = &R->steps[i];
                if (st->kind == COLL_STEP_SEND) {
                    if (S.o.machine_bw > 0 && S.r[st->peer].host != R->host) {
                        S.flows++;
                        st->flags |= F_FLOW;
                    }
                    mailbox_name(mb, sizeof(mb), R->rank, st->peer);
                    act[nact] = sg_mailbox_put_async(sg_mailbox_by_name(mb),
                                                     (void *)(uintptr_t)(st->tag + 1),
                                                     wire_bytes(R, st, now));
                    R->nmsgs++;
                } else {
                    if (!slot_get(&slots, &slot)) {
                        fail_run("out of memory for rank %d's receives", R->rank);
                        break;
                    }
                    mailbox_name(mb, sizeof(mb), st->peer, R->rank);
                    act[nact] = sg_mailbox_get_async(sg_mailbox_by_name(mb), slot_at(&slots, slot));
                }
                st->flags |= F_POSTED;
                if (R->t0)
                    R->t0[i] = now;
                act_step[nact] = i;
                act_slot[nact] = slot;
                nact++;
            }
            /* the receives still waiting for their message while the rank sends: each
             * message of them meets one going the other way (cost.h, xchg) */
            for (uint32_t k = 0; sends && k < nact; k++)
                if (act_slot[k] != NONE && !(act_slot[k] & LAT_SLOT))
                    R->steps[act_step[k]].flags |= F_XCHG;
            if (!nlocals)
                continue;
            cpu = 0;
        }
        if (nlocals) {
            for (uint32_t k = 0; k < nlocals; k++)
                cpu += step_cpu() + local_cpu(&R->steps[locals[k]]);
            now = simgrid_get_clock();
            if (cpu > 0)
                run_cpu(R, cpu);
            for (uint32_t k = 0; k < nlocals; k++) {
                if (R->t0) {
                    R->t0[locals[k]] = now;
                    R->t1[locals[k]] = simgrid_get_clock();
                }
                done_step(R, locals[k], ready, &nready);
            }
            continue;
        }
        if (!nact) {
            fail_run("rank %d: %u of %u steps cannot start (a dependency never completes)",
                     R->rank, n - R->ndone, n);
            break;
        }
        /* a completed receive may post the two halves of its latency wait */
        if (!act_reserve(&act, &act_step, &act_slot, &cap, nact + 2)) {
            fail_run("out of memory for rank %d's messages", R->rank);
            break;
        }
        {
            ssize_t w = wait_any(R, act, nact, act_step, act_slot);
            uint32_t i, slot;
            double lat_pending = 0;
            if (w < 0 || (size_t)w >= nact) {
                fail_run("rank %d: waiting for a message failed", R->rank);
                break;
            }
            i = act_step[w];
            slot = act_slot[w];
            if (R->steps[i].flags & F_FLOW) { /* a send's put (a latency wait's is a receive's) */
                R->steps[i].flags &= (uint8_t)~F_FLOW;
                S.flows--;
            }
            if (slot == LAT_PUT) {
                /* the sending half of a latency message: nothing to do */
            } else if (slot != NONE && (slot & LAT_SLOT)) {
                /* its latency ran out: the receive is done */
                slots.free_ids[slots.nfree++] = slot & ~LAT_SLOT;
                slot = NONE;
            } else if (slot != NONE) {
                uintptr_t got = (uintptr_t)*slot_at(&slots, slot);
                if (got != (uintptr_t)R->steps[i].tag + 1) {
                    fail_run("rank %d step %u: received message %" PRIuPTR " from rank %d where "
                             "message %u was due", R->rank, i, got - 1, R->steps[i].peer,
                             R->steps[i].tag);
                    break;
                }
                slots.free_ids[slots.nfree++] = slot;
                if (S.o.streams)
                    lat_pending = pair_lat(R, R->steps[i].peer) + xchg_lat(R, i);
            }
            act[w] = act[nact - 1];
            act_step[w] = act_step[nact - 1];
            act_slot[w] = act_slot[nact - 1];
            nact--;
            if (lat_pending > 0) {
                /* the latency runs while the next message of the pair moves: the data is
                 * in, the step completes lat later, when a message to itself over its
                 * timer (TIMER_BPS) arrives; posted in pairs, the k-th get meets the k-th
                 * put */
                uint32_t ls;
                if (!slot_get(&slots, &ls)) {
                    fail_run("out of memory for rank %d's receives", R->rank);
                    break;
                }
                win_pass(R, i, ready, &nready);
                mailbox_name(mb, sizeof(mb), R->rank, R->rank);
                act[nact] = sg_mailbox_put_async(sg_mailbox_by_name(mb), (void *)(uintptr_t)(i + 1),
                                                 (long)llround(lat_pending * TIMER_BPS));
                act_step[nact] = i;
                act_slot[nact++] = LAT_PUT;
                act[nact] = sg_mailbox_get_async(sg_mailbox_by_name(mb), slot_at(&slots, ls));
                act_step[nact] = i;
                act_slot[nact++] = ls | LAT_SLOT;
                continue;
            }
            if (slot == LAT_PUT) {
                continue;
            }
            if (R->t1)
                R->t1[i] = simgrid_get_clock();
            done_step(R, i, ready, &nready);
        }
    }
    R->finish = simgrid_get_clock();
    /* Done, the rank goes on to its next call, whose first wait polls too: on shared cores
     * that slows the ranks still in this one (a 4-rank binomial reduce's leaves, done at
     * once, polled in collbench's next call while the root's subtree worked). Not after a
     * warm-up's calls: the next one, which starts when every rank's actor has ended, would
     * start that much later. */
    R->wait_since = R->finish;
    if (!S.failed && S.timed && S.machine && S.o.calib && S.o.spin_s > 0)
        run_cpu(R, S.o.spin_s);
    /* the sending halves of the last latency waits, done with their gets but not waited
     * for (a wait returns one of the two) */
    if (!S.failed && nact)
        sg_comm_wait_all(act, nact);
    /* a failed run leaves messages posted: SimGrid reports the actors blocked at its end */
out:
    for (size_t b = 0; b < slots.nblocks; b++)
        free(slots.blocks[b]);
    free(slots.blocks);
    free(slots.free_ids);
    free(act);
    free(act_step);
    free(act_slot);
    free(ready);
    free(comms);
    free(locals);
}

void srank_free(struct srank *R)
{
    free(R->lat_peer);
    free(R->lat_val);
    free(R->steps);
    free(R->rdep_off);
    free(R->rdep);
    free(R->t0);
    free(R->t1);
    memset(R, 0, sizeof(*R));
}

/* Take rank r's schedule into the compact form the actor runs; peer_last: 2n entries, all
 * NONE on entry and on return. */
int srank_load(struct srank *R, const struct coll_schedule *s, uint32_t *peer_last,
               bool trace)
{
    uint32_t n = s->nsteps, nedges = 0;
    uint32_t *seen, *prev;

    R->nsteps = n;
    R->ndone = 0;
    R->steps = calloc(n ? n : 1, sizeof(*R->steps));
    R->rdep_off = calloc((size_t)n + 1, sizeof(uint32_t));
    for (uint32_t i = 0; i < n; i++)
        nedges += s->steps[i].ndeps;
    R->rdep = malloc(sizeof(uint32_t) * (nedges ? nedges : 1));
    seen = calloc((size_t)n + 1, sizeof(uint32_t));
    prev = malloc(sizeof(uint32_t) * (n ? n : 1));
    if (trace) {
        R->t0 = calloc(n ? n : 1, sizeof(double));
        R->t1 = calloc(n ? n : 1, sizeof(double));
    }
    if (!R->steps || !R->rdep_off || !R->rdep || !seen || !prev ||
        (trace && (!R->t0 || !R->t1))) {
        free(seen);
        free(prev);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        const struct coll_step *cs = &s->steps[i];
        struct sstep *st = &R->steps[i];
        st->kind = cs->kind;
        st->peer = cs->peer;
        st->next_same = NONE;
        st->left = (uint8_t)cs->ndeps;
        st->bytes = (uint64_t)cs->dst.count * s->elem_size;
        if (cs->kind == COLL_STEP_SEND)
            st->bytes = (uint64_t)cs->src.count * s->elem_size;
        if (cs->kind == COLL_STEP_COPY && cs->src.buf == cs->dst.buf && cs->src.off == cs->dst.off)
            st->flags |= F_FREE;
        st->win_next = NONE;
        if (cs->kind == COLL_STEP_SEND || cs->kind == COLL_STEP_RECV) {
            uint32_t *last = &peer_last[(size_t)cs->peer * 2 + (cs->kind == COLL_STEP_RECV)];
            prev[i] = *last;
            if (*last != NONE) {
                R->steps[*last].next_same = i;
                st->left++;
                st->tag = R->steps[*last].tag + 1;
            }
            *last = i;
            /* SimGrid's loopback link of a host gives every flow its whole bandwidth
             * (a fat pipe): over it, one message at a time between two ranks of a host, as
             * one process copies them, instead of eight at full speed each; over the
             * ranks' memory ports (o->ports) too: one process's copies run in turn, and
             * eight flows sharing a port would each finish late, not one after another */
            uint32_t win = S.o.streams || host_of(cs->peer) == R->host ? 1 : RECV_WINDOW;
            if (st->tag >= win) {
                uint32_t j = i;
                for (uint32_t k = 0; k < win; k++)
                    j = prev[j];
                R->steps[j].win_next = i;
                st->left++;
            }
        }
        for (uint32_t k = 0; k < cs->ndeps; k++)
            R->rdep_off[cs->deps[k] + 1]++;
    }
    for (uint32_t i = 0; i < n; i++)
        R->rdep_off[i + 1] += R->rdep_off[i];
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < s->steps[i].ndeps; k++) {
            uint32_t d = s->steps[i].deps[k];
            R->rdep[R->rdep_off[d] + seen[d]++] = i;
        }
    free(seen);
    free(prev);
    for (uint32_t i = 0; i < n; i++) {
        const struct coll_step *cs = &s->steps[i];
        if (cs->kind == COLL_STEP_SEND || cs->kind == COLL_STEP_RECV)
            peer_last[(size_t)cs->peer * 2 + (cs->kind == COLL_STEP_RECV)] = NONE;
    }
    return 0;
}
