/*
 * test_base.c - the base's helpers that every tool's files rely on: the JSON writer's
 * escaping (one rule for records, traces and pages) and numbers, the tools' integer
 * parser, the settings table's scopes, and the table of collectives (src/algo/colls.h)
 * against the enum, the libraries' exports and what the schedules build.
 */
#include "harness.h"

#include "algo/schedule.h"
#include "base/json.h"

#include <dlfcn.h>
#include <strings.h>

#include <stdlib.h>
#include <string.h>

/* What coll__json_str writes for s, in a buffer the caller frees. */
static char *json_of(const char *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    coll__json_str(f, s);
    fclose(f);
    return buf;
}

static char *num_of(double v)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    coll__json_num(f, v);
    fclose(f);
    return buf;
}

#define ASSERT_JSON(in, want)                                                          \
    do {                                                                               \
        char *got_ = json_of(in);                                                      \
        ASSERT_MSG(strcmp(got_, (want)) == 0, "json of %s: got %s, want %s", #in, got_, \
                   (want));                                                            \
        free(got_);                                                                    \
    } while (0)

TEST(plain_text_is_quoted_unchanged)
{
    ASSERT_JSON("ring allreduce 1,024 ranks", "\"ring allreduce 1,024 ranks\"");
    ASSERT_JSON("", "\"\"");
    ASSERT_JSON(NULL, "null");
}

TEST(quotes_backslashes_and_controls_are_escaped)
{
    ASSERT_JSON("a\"b\\c", "\"a\\\"b\\\\c\"");
    ASSERT_JSON("tab\there\nnl", "\"tab\\u0009here\\u000anl\"");
    ASSERT_JSON("\x01\x1f", "\"\\u0001\\u001f\"");
}

TEST(html_specials_cannot_close_a_script)
{
    ASSERT_JSON("</script><b>&", "\"\\u003c/script\\u003e\\u003cb\\u003e\\u0026\"");
}

TEST(valid_utf8_passes_and_invalid_bytes_become_replacement_characters)
{
    ASSERT_JSON("h\xc3\xb4te \xe2\x86\x92 \xf0\x9f\x96\xa5", "\"h\xc3\xb4te \xe2\x86\x92 \xf0\x9f\x96\xa5\"");
    ASSERT_JSON("a\xffz", "\"a\\ufffdz\"");
    ASSERT_JSON("cut \xe2\x86", "\"cut \\ufffd\\ufffd\"");   /* ends inside a sequence */
    ASSERT_JSON("\xc3(", "\"\\ufffd(\"");                    /* missing continuation */
}

TEST(numbers_keep_nine_digits_and_non_finite_is_null)
{
    char *s = num_of(0.125);
    ASSERT_MSG(strcmp(s, "0.125") == 0, "got %s", s);
    free(s);
    s = num_of(123456789.0);
    ASSERT_MSG(strcmp(s, "123456789") == 0, "got %s", s);
    free(s);
    s = num_of(1.0 / 3.0);
    ASSERT_MSG(strcmp(s, "0.333333333") == 0, "got %s", s);
    free(s);
    s = num_of(strtod("inf", NULL));
    ASSERT_MSG(strcmp(s, "null") == 0, "got %s", s);
    free(s);
    s = num_of(strtod("nan", NULL));
    ASSERT_MSG(strcmp(s, "null") == 0, "got %s", s);
    free(s);
}

TEST(whole_numbers_in_range_and_nothing_else)
{
    long v = -1;

    ASSERT(coll__parse_long("42", 0, 100, &v) && v == 42);
    ASSERT(coll__parse_long("-3", -5, 5, &v) && v == -3);
    ASSERT(!coll__parse_long("101", 0, 100, &v));
    ASSERT(!coll__parse_long("4x", 0, 100, &v));
    ASSERT(!coll__parse_long("", 0, 100, &v));
    ASSERT(!coll__parse_long(NULL, 0, 100, &v));
    ASSERT(!coll__parse_long("99999999999999999999", 0, 100, &v));
    ASSERT(v == -3); /* untouched by a refusal */
}

/* Every setting says whether ranks may differ in it (src/core/settings.c makes a per-comm
 * one rank 0's on every rank): a new entry without a scope fails here. */
TEST(every_setting_has_a_scope)
{
    size_t ncomm = 0;

    for (size_t i = 0; i < coll__nparams; i++) {
        const struct coll_param *p = &coll__params[i];
        ASSERT_MSG(p->scope == COLL_SCOPE_COMM || p->scope == COLL_SCOPE_RANK,
                   "%s has no scope (COLL_SCOPE_COMM or COLL_SCOPE_RANK, src/base/param.c)",
                   p->name);
        /* the comm's copy is its struct coll_config: a per-comm setting needs a field */
        ASSERT_MSG(p->scope == COLL_SCOPE_RANK || p->offset != SIZE_MAX,
                   "%s is per comm but has no field in struct coll_config", p->name);
        ncomm += p->scope == COLL_SCOPE_COMM;
    }
    ASSERT(ncomm > 0);
}

/* What a rank sends of a per-comm setting reads back to the same value on its peers. */
TEST(per_comm_values_read_back_as_sent)
{
    struct coll_config a, b;
    char text[640], again[640];

    memset(&a, 0, sizeof(a));
    setenv("COLL_CHUNK_BYTES", "64K", 1);
    setenv("COLL_ALGO", "allreduce=ring", 1);
    ASSERT_EQ(coll__config_load(NULL, -1, &a), COLL_SUCCESS);
    b = a;
    memset(b.algo, 0, sizeof(b.algo));
    b.chunk_bytes = 1;
    b.chunk_forced = false;
    for (size_t i = 0; i < coll__nparams; i++) {
        const struct coll_param *p = &coll__params[i];
        if (p->scope != COLL_SCOPE_COMM)
            continue;
        coll__config_format(&a, p, text, sizeof(text));
        ASSERT_MSG(coll__config_set(NULL, &b, p, text) == COLL_SUCCESS, "%s='%s'", p->name,
                   text);
        ASSERT_MSG(!strcmp(coll__config_format(&b, p, again, sizeof(again)), text),
                   "%s: '%s' read back as '%s'", p->name, text, again);
    }
    ASSERT(b.chunk_forced && b.chunk_bytes == 65536 && !strcmp(b.algo, "allreduce=ring"));
    unsetenv("COLL_CHUNK_BYTES");
    ASSERT_EQ(coll__config_load(NULL, -1, &a), COLL_SUCCESS);
    ASSERT(!strcmp(coll__config_format(&a, &coll__params[0], text, sizeof(text)), ""));
    for (size_t i = 0; i < coll__nparams; i++)
        if (!strcmp(coll__params[i].name, "COLL_CHUNK_BYTES")) {
            ASSERT(!strcmp(coll__config_format(&a, &coll__params[i], text, sizeof(text)),
                           "auto"));
            ASSERT_EQ(coll__config_set(NULL, &b, &coll__params[i], "auto"), COLL_SUCCESS);
            ASSERT(!b.chunk_forced && b.chunk_bytes == 128 * 1024);
            ASSERT_EQ(coll__config_set(NULL, &b, &coll__params[i], "12"), COLL_INVALID_ARGUMENT);
        }
}

/* ---- the table of collectives -------------------------------------------------------- */

/* Every enum value has its own row, complete and consistent: a collective added with half a
 * row (no public call, a root it never uses, an in-place block without blocks) fails here. */
TEST(every_collective_has_a_row)
{
    for (int c = 0; c < COLL_NUM_COLLS; c++) {
        const struct coll_coll_desc *d = coll__coll_desc((enum coll_coll)c);
        bool data;

        ASSERT_MSG(d && d->name && d->coll == (enum coll_coll)c, "collective %d has no row", c);
        data = d->send_blocks != COLL_BLOCKS_NONE || d->recv_blocks != COLL_BLOCKS_NONE;
        ASSERT_MSG(d->api && d->perf, "%s: no public call or nccl-tests program", d->name);
        ASSERT_MSG(!d->p2p || (d->nccl && d->nccl_recv && d->root == COLL_ROOT_NONE &&
                               !d->reduces),
                   "%s: a send/receive row names both NCCL calls, no root, no op", d->name);
        ASSERT_MSG(!d->nccl_recv || d->p2p, "%s: only a send/receive has a receive", d->name);
        ASSERT_MSG(d->send_blocks <= COLL_BLOCKS_N && d->recv_blocks <= COLL_BLOCKS_N &&
                       d->inplace <= COLL_AT_ROOT && d->root <= COLL_ROOT_SINK &&
                       d->bus <= COLL_BUS_ALLREDUCE,
                   "%s: a field out of its enum", d->name);
        /* in place puts the smaller buffer at a block of the larger: there must be one */
        ASSERT_MSG(d->inplace == COLL_AT_ZERO || d->send_blocks != d->recv_blocks,
                   "%s: in place at a block, yet both buffers are one size", d->name);
        ASSERT_MSG(d->inplace != COLL_AT_ROOT || d->root != COLL_ROOT_NONE,
                   "%s: in place at the root without one", d->name);
        ASSERT_MSG(!d->reduces || (data && d->send_blocks != COLL_BLOCKS_NONE),
                   "%s: reduces nothing", d->name);
        ASSERT_MSG(!d->stream || data, "%s: a stream-ordered call that moves no data", d->name);
        ASSERT_EQ(strcmp(coll__coll_name((enum coll_coll)c), d->name), 0);
    }
    ASSERT_EQ(coll__coll_desc(COLL_NUM_COLLS), NULL);
    ASSERT_EQ(strcmp(coll__coll_name(COLL_NUM_COLLS), "unknown"), 0);
}

/* Names, aliases, public calls, NCCL calls and nccl-tests programs each name one row. */
TEST(collective_names_are_unique_and_found)
{
    for (int c = 0; c < COLL_NUM_COLLS; c++) {
        const struct coll_coll_desc *d = &coll__colls[c];
        const char *mine[] = {d->name, d->alias[0], d->alias[1]};
        enum coll_coll got;

        for (int x = 0; x < COLL_NUM_COLLS; x++) {
            const struct coll_coll_desc *e = &coll__colls[x];
            const char *theirs[] = {e->name, e->alias[0], e->alias[1]};
            if (x == c)
                continue;
            for (size_t i = 0; i < 3; i++)
                for (size_t j = 0; j < 3; j++)
                    ASSERT_MSG(!mine[i] || !theirs[j] || strcasecmp(mine[i], theirs[j]),
                               "'%s' names %s and %s", mine[i], d->name, e->name);
            ASSERT_MSG(strcmp(d->api, e->api) && strcmp(d->perf, e->perf), "%s and %s",
                       d->name, e->name);
            ASSERT_MSG(!d->nccl || !e->nccl || strcmp(d->nccl, e->nccl), "%s and %s", d->name,
                       e->name);
        }
        for (size_t i = 0; i < 3; i++) {
            if (!mine[i])
                continue;
            ASSERT_MSG(coll__coll_from_name(mine[i], strlen(mine[i]), &got) && (int)got == c,
                       "'%s' does not find %s", mine[i], d->name);
        }
    }
    {
        enum coll_coll got = COLL_NUM_COLLS;
        ASSERT(coll__coll_from_name("BCAST=ring", 5, &got) && got == COLL_COLL_BROADCAST);
        ASSERT(!coll__coll_from_name("allreduc", 8, &got));
        ASSERT(!coll__coll_from_name("allreducex", 10, &got));
    }
}

static void *open_lib(const char *env)
{
    const char *path = getenv(env);
    void *h;

    ASSERT_MSG(path && *path, "%s is not set (tests/meson.build sets it)", env);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ASSERT_MSG(h, "dlopen %s: %s", path, dlerror());
    return h;
}

/* The rows' NCCL names are what coll's libnccl.so.2 exports, and each of NCCL's collective
 * and point-to-point calls that the library exports has a row. */
TEST(nccl_names_are_the_nccl_library_exports)
{
    static const char *const nccl_calls[] = {
        "ncclAllReduce", "ncclBroadcast", "ncclReduce",  "ncclAllGather", "ncclReduceScatter",
        "ncclAlltoAll",  "ncclGather",    "ncclScatter", "ncclSend",      "ncclRecv",
    };
    void *h = open_lib("COLL_TEST_LIBNCCL");

    for (int c = 0; c < COLL_NUM_COLLS; c++) {
        const struct coll_coll_desc *d = &coll__colls[c];
        ASSERT_MSG(!d->nccl || dlsym(h, d->nccl), "%s: %s is not exported", d->name, d->nccl);
        ASSERT_MSG(!d->nccl_recv || dlsym(h, d->nccl_recv), "%s: %s is not exported", d->name,
                   d->nccl_recv);
    }
    for (size_t i = 0; i < sizeof(nccl_calls) / sizeof(nccl_calls[0]); i++) {
        bool found = false;
        ASSERT_MSG(dlsym(h, nccl_calls[i]), "%s is not exported", nccl_calls[i]);
        for (int c = 0; c < COLL_NUM_COLLS; c++)
            found = found || (coll__colls[c].nccl && !strcmp(coll__colls[c].nccl, nccl_calls[i])) ||
                    (coll__colls[c].nccl_recv && !strcmp(coll__colls[c].nccl_recv, nccl_calls[i]));
        ASSERT_MSG(found, "%s has no row", nccl_calls[i]);
    }
    dlclose(h);
}

/* Each row's public call exists in libcoll with its non-blocking form, and the stream-
 * ordered form exactly where the row says there is one. */
TEST(public_calls_are_the_library_exports)
{
    void *h = open_lib("COLL_TEST_LIBCOLL");

    for (int c = 0; c < COLL_NUM_COLLS; c++) {
        const struct coll_coll_desc *d = &coll__colls[c];
        char name[64];

        ASSERT_MSG(!strncmp(d->api, "coll_", 5) && dlsym(h, d->api), "%s: %s", d->name, d->api);
        snprintf(name, sizeof(name), "coll_i%s", d->api + 5);
        ASSERT_MSG(dlsym(h, name), "%s: no %s", d->name, name);
        snprintf(name, sizeof(name), "%s_stream", d->api);
        ASSERT_MSG(!dlsym(h, name) == !d->stream, "%s: %s %s, but the row says %s", d->name,
                   name, dlsym(h, name) ? "exists" : "does not exist",
                   d->stream ? "it does" : "it does not");
    }
    dlclose(h);
}

/* What every schedule builds stays within the row's buffers: a rank that passes no send (no
 * receive) buffer is never given a step on it, and the ones it passes hold the row's block
 * count. Every collective but a send/receive has a builder, and a send/receive none. */
TEST(block_shapes_bound_what_schedules_touch)
{
    static const size_t counts[] = {0, 1, 7, 64};

    for (int c = 0; c < COLL_NUM_COLLS; c++) {
        const struct coll_coll_desc *d = &coll__colls[c];
        int nalgos = 0;

        for (int k = 0; coll__algos[k]; k++) {
            const struct coll_algo *algo = coll__algos[k];
            if (!(algo->colls & (1u << c)))
                continue;
            nalgos++;
            for (int32_t n = 1; n <= 9; n++)
                for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
                    for (int32_t root = 0; root < n; root += n > 1 ? n - 1 : 1)
                        for (int32_t r = 0; r < n; r++) {
                            size_t count = d->send_blocks || d->recv_blocks ? counts[ci] : 0;
                            struct coll_algo_args a = {
                                .coll = (enum coll_coll)c, .nranks = n, .rank = r,
                                .root = d->root != COLL_ROOT_NONE ? root : 0, .count = count,
                                .dtype = COLL_FLOAT32, .elem_size = 4, .chunk_count = 5};
                            struct coll_schedule s;
                            size_t want_s, want_r;

                            if (algo->applicable && !algo->applicable(&a))
                                continue;
                            coll__sched_init(&s, &a);
                            ASSERT_MSG(algo->build(&a, &s) == COLL_SUCCESS, "%s %s n=%d r=%d",
                                       algo->name, d->name, n, r);
                            want_s = coll__desc_uses_send(d, r, a.root, 0)
                                         ? coll__blocks_count(d->send_blocks, count, n)
                                         : 0;
                            want_r = coll__desc_uses_recv(d, r, a.root, 0)
                                         ? coll__blocks_count(d->recv_blocks, count, n)
                                         : 0;
                            ASSERT_MSG(s.buf_count[COLL_BUF_SEND] <= want_s &&
                                           s.buf_count[COLL_BUF_RECV] <= want_r,
                                       "%s %s n=%d rank %d root %d count %zu: touches %zu "
                                       "send and %zu recv elements; the row allows %zu and %zu",
                                       algo->name, d->name, n, r, a.root, count,
                                       s.buf_count[COLL_BUF_SEND], s.buf_count[COLL_BUF_RECV],
                                       want_s, want_r);
                            coll__sched_free(&s);
                        }
        }
        ASSERT_MSG(d->p2p ? nalgos == 0 : nalgos > 0, "%s: %d algorithms", d->name, nalgos);
    }
}

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
