/*
 * trace.c - COLL_TRACE: the steps a rank ran, with timestamps, in the Chrome trace event
 * format (a JSON array; chrome://tracing, ui.perfetto.dev and collviz --trace read it).
 *
 * File name: COLL_TRACE with %r = rank, %p = process id, %h = host name, %c = comm id (16
 * hex digits), %% = '%'. Without %r, a comm of more than one rank inserts ".r<rank>" before
 * the extension (trace.json -> trace.r3.json), so ranks never share a file. Several comms
 * in one process need %c (or %p with one comm per process) to get a file each.
 *
 * What one rank's file holds (pid = rank, so files of all ranks merge into one view):
 *   M process_name, process_sort_index, thread_name   labels for the viewers
 *   M coll_trace {version, rank, nranks, comm, host, os_pid, clock, realtime_offset_us}
 *                                                      what marks the file as coll's
 *   X on tid 0, cat "coll": one per op, args {seq, status, parts: [{coll, algo, count,
 *     dtype, root, chunk, nranks, nsteps}]}
 *   X on tid 1.., cat "step": one per schedule step (send, recv, reduce, copy), args {op,
 *     part, step, peer, bytes}; tids are lanes, so slices on one tid never overlap
 *   s / f, cat "msg": a send's slice starts a flow whose id the matching receive's slice
 *     ends, on the other rank's file. The id is (src * nranks + dst) << 32 | k for the k-th
 *     message from src to dst on this comm: both ends count them in the same order,
 *     because messages to one peer are posted in order (exec.c) and ops run in order.
 *   M coll_trace_end {events, dropped}                 absent if the process died first
 * ts and dur are microseconds of CLOCK_MONOTONIC, which all ranks of one host share;
 * realtime_offset_us lets a reader line up hosts (to the precision of their clocks).
 *
 * Costs: the hooks append 64-byte records under the engine lock; no formatting and no I/O.
 * A full buffer goes to a writer thread and a spare one takes its place; when the writer is
 * still busy with the previous one, events are dropped and counted rather than making the
 * collective wait for the disk.
 */
#include "trace.h"

#include "../base/json.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TRACE_BUF_EVENTS 32768u /* per buffer; two buffers, 2 MiB each */
#define TRACE_MAX_LANES 64u     /* step lanes per rank; beyond this slices share a lane */
#define FLOW_ID_MASK ((1ull << 53) - 1) /* ids stay exact as JavaScript numbers */

enum trace_ev_type { EV_STEP = 0, EV_PART, EV_OP };

struct trace_ev {
    uint8_t type;      /* enum trace_ev_type */
    uint8_t kind;      /* STEP: enum coll_step_kind; PART: enum coll_coll */
    uint16_t part;     /* STEP, PART: index of the part in its op */
    int32_t peer;      /* STEP: peer or -1; PART: root */
    uint32_t step;     /* STEP: index in the schedule; PART: dtype; OP: nparts */
    uint32_t msg;      /* STEP send/recv: message number with peer; PART: nsteps; OP: status */
    uint64_t seq;      /* op sequence number on the comm */
    uint64_t t0, t1;   /* CLOCK_MONOTONIC ns */
    uint64_t n;        /* STEP: bytes; PART: count */
    uint64_t chunk;    /* PART: chunk_count */
    const char *algo;  /* PART: builder name (static), NULL for point-to-point */
};

struct coll_tracer {
    FILE *f;
    char path[600];
    int rank, nranks;

    /* filled by the hooks (engine lock); cur is theirs alone */
    struct trace_ev *cur;
    uint32_t ncur;
    uint64_t dropped, nevents;

    /* the op being run: per step, when it started and its message number */
    const struct coll_op *op;
    uint64_t op_t0;
    uint64_t *t0s;
    uint32_t *msgs, *part_off;
    size_t steps_cap, parts_cap;
    bool op_ok;
    uint32_t *sent, *recvd; /* [nranks] messages posted to / from each peer */

    /* hand-over to the writer, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct trace_ev *full, *spare;
    uint32_t nfull;
    bool stop, thread_started;
    pthread_t thread;

    /* the writer's (then fini's) */
    uint64_t lane_end[TRACE_MAX_LANES];
    uint32_t nlanes;
    uint64_t nwritten;
    struct trace_ev *parts; /* an op's parts, gathered until its OP record */
    uint32_t nparts, parts_buf_cap;
};

/* ---- file name --------------------------------------------------------------------- */

static bool put(char *out, size_t len, size_t *o, const char *s)
{
    size_t n = strlen(s);
    if (*o + n >= len)
        return false;
    memcpy(out + *o, s, n + 1);
    *o += n;
    return true;
}

static bool expand_path(const char *pat, const struct coll_comm *comm, char *out, size_t len)
{
    char tmp[80];
    size_t o = 0;
    bool has_rank = false;

    out[0] = '\0';
    for (const char *c = pat; *c; c++) {
        if (*c != '%' || !c[1]) {
            tmp[0] = *c, tmp[1] = '\0';
        } else {
            switch (*++c) {
            case 'r': snprintf(tmp, sizeof(tmp), "%d", comm->rank); has_rank = true; break;
            case 'p': snprintf(tmp, sizeof(tmp), "%d", (int)getpid()); break;
            case 'h': snprintf(tmp, sizeof(tmp), "%s", comm->self.hostname); break;
            case 'c': snprintf(tmp, sizeof(tmp), "%016" PRIx64, comm->comm_id); break;
            default: snprintf(tmp, sizeof(tmp), "%%%c", *c); break; /* %% and unknowns */
            }
            if (*c == '%')
                tmp[1] = '\0';
        }
        if (!put(out, len, &o, tmp))
            return false;
    }
    if (!has_rank && comm->nranks > 1) {
        const char *slash = strrchr(out, '/'), *dot = strrchr(out, '.');
        size_t at = dot && (!slash || dot > slash) && dot != out && dot[-1] != '/'
                        ? (size_t)(dot - out) : o;
        char tail[600];
        snprintf(tail, sizeof(tail), "%s", out + at);
        snprintf(tmp, sizeof(tmp), ".r%d", comm->rank);
        out[at] = '\0';
        o = at;
        if (!put(out, len, &o, tmp) || !put(out, len, &o, tail))
            return false;
    }
    return true;
}

/* ---- writing (the writer thread, then fini) ------------------------------------------- */

static void begin_event(struct coll_tracer *t)
{
    fputs(t->nwritten++ ? ",\n" : "\n", t->f);
}

/* "12.345": ns as microseconds with three decimals, exactly. */
static void put_us(FILE *f, uint64_t ns)
{
    fprintf(f, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

static uint32_t pick_lane(struct coll_tracer *t, const struct trace_ev *e)
{
    uint32_t l;

    for (l = 0; l < t->nlanes; l++)
        if (t->lane_end[l] <= e->t0)
            break;
    if (l == t->nlanes) {
        if (t->nlanes < TRACE_MAX_LANES)
            t->nlanes++;
        else
            l = TRACE_MAX_LANES - 1;
    }
    if (e->t1 > t->lane_end[l])
        t->lane_end[l] = e->t1;
    return l + 1; /* tid 0 holds the ops */
}

static const char *kind_name(uint8_t kind)
{
    static const char *const names[] = {"send", "recv", "reduce", "copy"};
    return kind < COLL_ARRAY_SIZE(names) ? names[kind] : "step";
}

static void write_step(struct coll_tracer *t, const struct trace_ev *e)
{
    uint32_t tid = pick_lane(t, e);
    FILE *f = t->f;

    begin_event(t);
    fputs("{\"name\":", f);
    coll__json_str(f, kind_name(e->kind));
    fprintf(f, ",\"cat\":\"step\",\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"ts\":", t->rank, tid);
    put_us(f, e->t0);
    fputs(",\"dur\":", f);
    put_us(f, e->t1 - e->t0);
    fprintf(f, ",\"args\":{\"op\":%" PRIu64 ",\"part\":%u,\"step\":%u,\"peer\":%d,"
               "\"bytes\":%" PRIu64 "}}",
            e->seq, e->part, e->step, e->peer, e->n);
    if ((e->kind == COLL_STEP_SEND || e->kind == COLL_STEP_RECV) && e->peer >= 0) {
        int src = e->kind == COLL_STEP_SEND ? t->rank : e->peer;
        int dst = e->kind == COLL_STEP_SEND ? e->peer : t->rank;
        uint64_t id = (((uint64_t)src * (uint64_t)t->nranks + (uint64_t)dst) << 32 | e->msg) &
                      FLOW_ID_MASK;
        begin_event(t);
        /* bound to the slice around ts: its middle is inside it whatever its length */
        fprintf(f, "{\"name\":\"msg\",\"cat\":\"msg\",\"ph\":\"%s\",%s\"id\":%" PRIu64
                   ",\"pid\":%d,\"tid\":%u,\"ts\":",
                e->kind == COLL_STEP_SEND ? "s" : "f",
                e->kind == COLL_STEP_SEND ? "" : "\"bp\":\"e\",", id, t->rank, tid);
        put_us(f, e->t0 + (e->t1 - e->t0) / 2);
        fputs("}", f);
    }
}

static void write_op(struct coll_tracer *t, const struct trace_ev *e)
{
    FILE *f = t->f;
    char name[96];

    if (t->nparts == 1 && t->parts[0].kind < COLL_NUM_COLLS)
        snprintf(name, sizeof(name), "%s %s", coll__coll_name((enum coll_coll)t->parts[0].kind),
                 t->parts[0].algo ? t->parts[0].algo : "p2p");
    else
        snprintf(name, sizeof(name), "group of %u", e->step);
    begin_event(t);
    fputs("{\"name\":", f);
    coll__json_str(f, name);
    fprintf(f, ",\"cat\":\"coll\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":", t->rank);
    put_us(f, e->t0);
    fputs(",\"dur\":", f);
    put_us(f, e->t1 - e->t0);
    fprintf(f, ",\"args\":{\"seq\":%" PRIu64 ",\"status\":", e->seq);
    coll__json_str(f, coll_status_string((coll_status_t)e->msg));
    fputs(",\"parts\":[", f);
    for (uint32_t k = 0; k < t->nparts; k++) {
        const struct trace_ev *p = &t->parts[k];
        fprintf(f, "%s{\"coll\":", k ? "," : "");
        coll__json_str(f, coll__coll_name((enum coll_coll)p->kind));
        fputs(",\"algo\":", f);
        coll__json_str(f, p->algo ? p->algo : "p2p");
        fprintf(f, ",\"count\":%" PRIu64 ",\"dtype\":", p->n);
        coll__json_str(f, coll__dtype_name((coll_dtype_t)p->step));
        fprintf(f, ",\"root\":%d,\"chunk\":%" PRIu64 ",\"nranks\":%d,\"nsteps\":%u}",
                p->peer, p->chunk, t->nranks, p->msg);
    }
    fprintf(f, "]%s}}", e->step > t->nparts ? ",\"parts_dropped\":true" : "");
    t->nparts = 0;
}

static void write_events(struct coll_tracer *t, const struct trace_ev *ev, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        const struct trace_ev *e = &ev[i];
        switch (e->type) {
        case EV_STEP:
            write_step(t, e);
            break;
        case EV_PART:
            if (t->nparts == t->parts_buf_cap) {
                uint32_t cap = t->parts_buf_cap ? 2 * t->parts_buf_cap : 8;
                struct trace_ev *p = realloc(t->parts, cap * sizeof(*p));
                if (!p)
                    break; /* the op's args list fewer parts; parts_dropped says so */
                t->parts = p;
                t->parts_buf_cap = cap;
            }
            t->parts[t->nparts++] = *e;
            break;
        case EV_OP:
            write_op(t, e);
            break;
        }
    }
}

static void *writer_main(void *arg)
{
    struct coll_tracer *t = arg;

    pthread_mutex_lock(&t->mu);
    for (;;) {
        struct trace_ev *buf;
        uint32_t n;

        while (!t->full && !t->stop)
            pthread_cond_wait(&t->cv, &t->mu);
        if (!t->full)
            break;
        buf = t->full;
        n = t->nfull;
        pthread_mutex_unlock(&t->mu);
        write_events(t, buf, n);
        fflush(t->f);
        pthread_mutex_lock(&t->mu);
        t->full = NULL;
        t->spare = buf;
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* ---- recording (engine lock held) ------------------------------------------------------ */

/* Room for n more records in cur: hand a full buffer to the writer if it is free. */
static bool reserve(struct coll_tracer *t, uint32_t n)
{
    if (TRACE_BUF_EVENTS - t->ncur >= n)
        return true;
    pthread_mutex_lock(&t->mu);
    if (t->spare && !t->full) {
        t->full = t->cur;
        t->nfull = t->ncur;
        t->cur = t->spare;
        t->spare = NULL;
        t->ncur = 0;
        pthread_cond_signal(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return TRACE_BUF_EVENTS - t->ncur >= n;
}

static struct trace_ev *append(struct coll_tracer *t)
{
    if (!reserve(t, 1)) {
        t->dropped++;
        return NULL;
    }
    t->nevents++;
    return memset(&t->cur[t->ncur++], 0, sizeof(struct trace_ev));
}

void coll__trace_op_begin(struct coll_tracer *t, const struct coll_op *op)
{
    size_t total = 0;

    t->op = op;
    t->op_ok = false;
    t->op_t0 = coll__now_ns();
    for (int k = 0; k < op->nparts; k++)
        total += op->parts[k].plan->sched.nsteps;
    if (total > t->steps_cap) {
        uint64_t *a = realloc(t->t0s, total * sizeof(*a));
        if (a)
            t->t0s = a;
        uint32_t *b = a ? realloc(t->msgs, total * sizeof(*b)) : NULL;
        if (b)
            t->msgs = b;
        if (!a || !b) {
            t->dropped++; /* this op goes untraced; coll_trace_end counts it */
            return;
        }
        t->steps_cap = total;
    }
    if ((size_t)op->nparts + 1 > t->parts_cap) {
        uint32_t *c = realloc(t->part_off, ((size_t)op->nparts + 1) * sizeof(*c));
        if (!c) {
            t->dropped++;
            return;
        }
        t->part_off = c;
        t->parts_cap = (size_t)op->nparts + 1;
    }
    total = 0;
    for (int k = 0; k < op->nparts; k++) {
        t->part_off[k] = (uint32_t)total;
        total += op->parts[k].plan->sched.nsteps;
    }
    if (total)
        memset(t->t0s, 0, total * sizeof(*t->t0s));
    t->op_ok = true;
}

static bool step_index(struct coll_tracer *t, const struct coll_op *op,
                       const struct coll_part *p, uint32_t i, size_t *g_p)
{
    if (!t->op_ok || t->op != op)
        return false;
    *g_p = t->part_off[p - op->parts] + i;
    return true;
}

void coll__trace_step_begin(struct coll_tracer *t, const struct coll_op *op,
                            const struct coll_part *p, uint32_t i)
{
    size_t g;

    if (step_index(t, op, p, i, &g))
        t->t0s[g] = coll__now_ns();
}

void coll__trace_step_posted(struct coll_tracer *t, const struct coll_op *op,
                             const struct coll_part *p, uint32_t i)
{
    const struct coll_step *st = &p->plan->sched.steps[i];
    uint32_t *count;
    size_t g;

    if (st->peer < 0 || st->peer >= t->nranks)
        return;
    count = st->kind == COLL_STEP_SEND ? &t->sent[st->peer] : &t->recvd[st->peer];
    /* counted even for an untraced op, so later ids still match the peer's */
    if (step_index(t, op, p, i, &g)) {
        t->t0s[g] = coll__now_ns();
        t->msgs[g] = *count;
    }
    (*count)++;
}

void coll__trace_step_done(struct coll_tracer *t, const struct coll_op *op,
                           const struct coll_part *p, uint32_t i)
{
    const struct coll_schedule *s = &p->plan->sched;
    const struct coll_step *st = &s->steps[i];
    struct trace_ev *e;
    size_t g;

    if (!step_index(t, op, p, i, &g) || !(e = append(t)))
        return;
    e->type = EV_STEP;
    e->kind = st->kind;
    e->part = (uint16_t)(p - op->parts);
    e->peer = st->kind == COLL_STEP_SEND || st->kind == COLL_STEP_RECV ? st->peer : -1;
    e->step = i;
    e->msg = t->msgs[g];
    e->seq = op->seq;
    e->t1 = coll__now_ns();
    e->t0 = t->t0s[g] && t->t0s[g] <= e->t1 ? t->t0s[g] : e->t1;
    e->n = (uint64_t)(st->kind == COLL_STEP_SEND ? st->src.count : st->dst.count) *
           s->elem_size;
}

void coll__trace_op_end(struct coll_tracer *t, const struct coll_op *op, coll_status_t st)
{
    uint32_t nparts = (uint32_t)op->nparts, fit;
    struct trace_ev *e;

    if (!t->op_ok || t->op != op)
        return;
    t->op_ok = false;
    t->op = NULL;
    /* the parts and their op go into one buffer, so the writer sees them together */
    fit = nparts + 1 <= TRACE_BUF_EVENTS ? nparts : TRACE_BUF_EVENTS - 1;
    if (!reserve(t, fit + 1)) {
        t->dropped += fit + 1;
        return;
    }
    for (uint32_t k = 0; k < fit; k++) {
        const struct coll_part *p = &op->parts[k];
        e = append(t);
        e->type = EV_PART;
        e->kind = (uint8_t)p->coll;
        e->part = (uint16_t)k;
        e->peer = p->root;
        e->step = (uint32_t)p->plan->args.dtype;
        e->msg = p->plan->sched.nsteps;
        e->seq = op->seq;
        e->n = p->plan->args.count;
        e->chunk = p->plan->args.chunk_count;
        e->algo = p->plan->sched.algo ? p->plan->sched.algo->name : NULL;
    }
    e = append(t);
    e->type = EV_OP;
    e->step = nparts;
    e->msg = (uint32_t)st;
    e->seq = op->seq;
    e->t0 = t->op_t0;
    e->t1 = coll__now_ns();
}

void coll__trace_flat(struct coll_tracer *t, enum coll_coll coll, coll_dtype_t dtype,
                      size_t count, int root, uint64_t seq, uint64_t t0, coll_status_t st)
{
    struct trace_ev *e;

    if (!reserve(t, 2)) {
        t->dropped += 2;
        return;
    }
    e = append(t);
    e->type = EV_PART;
    e->kind = (uint8_t)coll;
    e->peer = root;
    e->step = (uint32_t)dtype;
    e->seq = seq;
    e->n = count;
    e->chunk = count;
    e->algo = "flat";
    e = append(t);
    e->type = EV_OP;
    e->step = 1;
    e->msg = (uint32_t)st;
    e->seq = seq;
    e->t0 = t0;
    e->t1 = coll__now_ns();
}

/* ---- init and fini ----------------------------------------------------------------- */

static void tracer_free(struct coll_tracer *t)
{
    if (t->f)
        fclose(t->f);
    free(t->cur);
    free(t->spare);
    free(t->full);
    free(t->t0s);
    free(t->msgs);
    free(t->part_off);
    free(t->sent);
    free(t->recvd);
    free(t->parts);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

coll_status_t coll__trace_init(struct coll_comm *comm)
{
    struct coll_tracer *t;
    struct timespec rt;
    int64_t offset_us;
    coll_status_t st;

    if (!comm->cfg.trace[0])
        return COLL_SUCCESS;
    t = calloc(1, sizeof(*t));
    if (!t)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for COLL_TRACE");
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->rank = comm->rank;
    t->nranks = comm->nranks;
    if (!expand_path(comm->cfg.trace, comm, t->path, sizeof(t->path))) {
        st = coll__error(comm, COLL_INVALID_ARGUMENT, "COLL_TRACE='%s' makes a name too long",
                         comm->cfg.trace);
        goto out_free;
    }
    t->cur = malloc(TRACE_BUF_EVENTS * sizeof(*t->cur));
    t->spare = malloc(TRACE_BUF_EVENTS * sizeof(*t->spare));
    t->sent = calloc((size_t)comm->nranks, sizeof(*t->sent));
    t->recvd = calloc((size_t)comm->nranks, sizeof(*t->recvd));
    if (!t->cur || !t->spare || !t->sent || !t->recvd) {
        st = coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for COLL_TRACE buffers");
        goto out_free;
    }
    t->f = fopen(t->path, "w");
    if (!t->f) {
        st = coll__sys_error(comm, errno, "cannot create COLL_TRACE file '%s'", t->path);
        goto out_free;
    }
    clock_gettime(CLOCK_REALTIME, &rt);
    offset_us = ((int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec - (int64_t)coll__now_ns()) / 1000;
    fputs("[", t->f);
    begin_event(t);
    fprintf(t->f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                  "\"args\":{\"name\":\"rank %d\"}}", t->rank, t->rank);
    begin_event(t);
    fprintf(t->f, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                  "\"args\":{\"sort_index\":%d}}", t->rank, t->rank);
    begin_event(t);
    fprintf(t->f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                  "\"args\":{\"name\":\"collectives\"}}", t->rank);
    begin_event(t);
    fprintf(t->f, "{\"name\":\"coll_trace\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{"
                  "\"version\":1,\"rank\":%d,\"nranks\":%d,\"comm\":\"%016" PRIx64 "\","
                  "\"host\":", t->rank, t->rank, t->nranks, comm->comm_id);
    coll__json_str(t->f, comm->self.hostname);
    fprintf(t->f, ",\"os_pid\":%d,\"clock\":\"CLOCK_MONOTONIC\",\"realtime_offset_us\":%" PRId64
                  "}}", (int)getpid(), offset_us);
    if (fflush(t->f) != 0) {
        st = coll__sys_error(comm, errno, "cannot write COLL_TRACE file '%s'", t->path);
        goto out_free;
    }
    if (pthread_create(&t->thread, NULL, writer_main, t) != 0) {
        st = coll__error(comm, COLL_SYSTEM_ERROR, "cannot start the COLL_TRACE writer");
        goto out_free;
    }
    t->thread_started = true;
    COLL_INFO(COLL_SUB_INIT, "rank %d: tracing to '%s'", comm->rank, t->path);
    comm->tracer = t;
    return COLL_SUCCESS;

out_free:
    tracer_free(t);
    return st;
}

void coll__trace_fini(struct coll_comm *comm)
{
    struct coll_tracer *t = comm ? comm->tracer : NULL;

    if (!t)
        return;
    comm->tracer = NULL;
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (t->thread_started)
        pthread_join(t->thread, NULL);
    write_events(t, t->cur, t->ncur);
    for (uint32_t l = 1; l <= t->nlanes; l++) {
        begin_event(t);
        fprintf(t->f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,"
                      "\"args\":{\"name\":\"steps %u\"}}", t->rank, l, l);
    }
    begin_event(t);
    fprintf(t->f, "{\"name\":\"coll_trace_end\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                  "\"args\":{\"events\":%" PRIu64 ",\"dropped\":%" PRIu64 "}}",
            t->rank, t->nevents, t->dropped);
    fputs("\n]\n", t->f);
    if (ferror(t->f) || fclose(t->f) != 0)
        COLL_WARN(COLL_SUB_INIT, "rank %d: writing COLL_TRACE file '%s' failed: %s", t->rank,
                  t->path, strerror(errno));
    else if (t->dropped)
        COLL_WARN(COLL_SUB_INIT, "rank %d: COLL_TRACE dropped %" PRIu64 " events (the writer "
                  "could not keep up)", t->rank, t->dropped);
    t->f = NULL;
    tracer_free(t);
}
