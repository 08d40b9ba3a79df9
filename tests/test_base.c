/*
 * test_base.c - the base's helpers that every tool's files rely on: the JSON writer's
 * escaping (one rule for records, traces and pages) and numbers, the tools' integer
 * parser, and the settings table's scopes.
 */
#include "harness.h"

#include "base/json.h"

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

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
