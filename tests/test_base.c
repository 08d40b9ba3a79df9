/*
 * test_base.c - the base's helpers that every tool's files rely on: the JSON writer's
 * escaping (one rule for records, traces and pages) and numbers, and the tools' integer
 * parser.
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

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
