/*
 * trace.c - collsim --trace: every rank's steps of every row in COLL_TRACE's format,
 * which collviz draws.
 */
#include "collsim.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

FILE *trace_f;
static uint64_t trace_seq;

void trace_header(int32_t n)
{
    for (int32_t r = 0; r < n; r++) {
        fprintf(trace_f, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                         "\"args\":{\"name\":\"rank %d\"}}",
                r ? ",\n" : "\n", r, r);
        fprintf(trace_f, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                         "\"args\":{\"sort_index\":%d}}", r, r);
        fprintf(trace_f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                         "\"args\":{\"name\":\"collectives\"}}", r);
        fprintf(trace_f, ",\n{\"name\":\"coll_trace\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{"
                         "\"version\":1,\"rank\":%d,\"nranks\":%d,\"comm\":\"5349400000000000\","
                         "\"host\":\"h%d\",\"os_pid\":%d,\"clock\":\"simgrid\","
                         "\"realtime_offset_us\":0}}",
                r, r, n, host_of(r), (int)getpid());
    }
}

void trace_row(const struct row *w, int32_t n)
{
    static double lane_end[TRACE_LANES];
    uint64_t seq = trace_seq++;

    for (int32_t r = 0; r < n; r++) {
        const struct srank *R = &S.r[r];
        uint32_t nlanes = 0;
        uint32_t *sent = calloc((size_t)n, sizeof(uint32_t));
        uint32_t *recvd = calloc((size_t)n, sizeof(uint32_t));
        if (!sent || !recvd) {
            free(sent);
            free(recvd);
            return;
        }
        fprintf(trace_f, ",\n{\"name\":");
        {
            char name[96];
            snprintf(name, sizeof(name), "%s %s", coll__coll_name(S.o.coll), w->algo->name);
            coll__json_str(trace_f, name);
        }
        fprintf(trace_f, ",\"cat\":\"coll\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,"
                         "\"dur\":%.3f,\"args\":{\"seq\":%" PRIu64 ",\"status\":\"success\","
                         "\"parts\":[{\"coll\":\"%s\",\"algo\":\"%s\",\"count\":%zu,"
                         "\"dtype\":\"%s\",\"root\":%d,\"chunk\":%zu,\"nranks\":%d,"
                         "\"nsteps\":%u}]}}",
                r, S.start * 1e6, (R->finish - S.start) * 1e6, seq, coll__coll_name(S.o.coll),
                w->algo->name, w->count, coll__dtype_name(S.o.dtype), S.o.root, w->chunk_count, n,
                R->nsteps);
        for (uint32_t i = 0; i < R->nsteps; i++) {
            static const char *const kinds[] = {"send", "recv", "reduce", "copy"};
            const struct sstep *st = &R->steps[i];
            double t0 = R->t0[i] * 1e6, t1 = R->t1[i] * 1e6;
            uint32_t l;
            for (l = 0; l < nlanes; l++)
                if (lane_end[l] <= t0)
                    break;
            if (l == nlanes) {
                if (nlanes < TRACE_LANES)
                    nlanes++;
                else
                    l = TRACE_LANES - 1;
            }
            if (t1 > lane_end[l])
                lane_end[l] = t1;
            fprintf(trace_f, ",\n{\"name\":\"%s\",\"cat\":\"step\",\"ph\":\"X\",\"pid\":%d,"
                             "\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"op\":%" PRIu64
                             ",\"part\":0,\"step\":%u,\"peer\":%d,\"bytes\":%" PRIu64 "}}",
                    kinds[st->kind & 3], r, l + 1, t0, t1 - t0, seq, i,
                    st->kind <= COLL_STEP_RECV ? st->peer : -1, st->bytes);
            if (st->kind <= COLL_STEP_RECV) {
                bool snd = st->kind == COLL_STEP_SEND;
                int32_t src = snd ? r : st->peer, dst = snd ? st->peer : r;
                uint32_t k = snd ? sent[st->peer]++ : recvd[st->peer]++;
                uint64_t id = ((((uint64_t)seq * (uint64_t)n + (uint64_t)src) * (uint64_t)n +
                                (uint64_t)dst) << 20 | k) & ((1ull << 53) - 1);
                fprintf(trace_f, ",\n{\"name\":\"msg\",\"cat\":\"msg\",\"ph\":\"%s\",%s\"id\":%"
                                 PRIu64 ",\"pid\":%d,\"tid\":%u,\"ts\":%.3f}",
                        snd ? "s" : "f", snd ? "" : "\"bp\":\"e\",", id, r, l + 1,
                        (t0 + t1) / 2);
            }
        }
        for (uint32_t l = 0; l < nlanes; l++)
            lane_end[l] = 0;
        free(sent);
        free(recvd);
    }
}

void trace_end(int32_t n)
{
    for (int32_t r = 0; r < n; r++) {
        for (uint32_t l = 1; l <= TRACE_LANES; l++)
            fprintf(trace_f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%u,"
                             "\"args\":{\"name\":\"steps %u\"}}", r, l, l);
        fprintf(trace_f, ",\n{\"name\":\"coll_trace_end\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                         "\"args\":{\"events\":0,\"dropped\":0}}", r);
    }
    fputs("\n]\n", trace_f);
}
