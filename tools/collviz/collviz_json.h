/*
 * collviz_json.h - the small JSON reader collviz needs for COLL_TRACE files: RFC 8259
 * values into a tree, with a depth limit so that hostile input cannot exhaust the stack.
 * The caller parses one trace event at a time (jv_parse at a position) and frees it, so a
 * trace of millions of events never becomes one tree in memory.
 */
#ifndef COLLVIZ_JSON_H
#define COLLVIZ_JSON_H

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define JV_MAX_DEPTH 64

enum jv_type { JV_NULL, JV_BOOL, JV_NUM, JV_STR, JV_ARR, JV_OBJ };

struct jv {
    enum jv_type type;
    double num;          /* JV_NUM, JV_BOOL (0/1) */
    char *str;           /* JV_STR, NUL-terminated (embedded NULs end it early) */
    size_t n;            /* JV_ARR, JV_OBJ: items */
    struct jv *items;
    char **keys;         /* JV_OBJ */
};

struct jv_in {
    const char *p, *end;
    const char *err;     /* first error, static text */
};

static void jv_free(struct jv *v)
{
    if (!v)
        return;
    free(v->str);
    for (size_t i = 0; i < v->n; i++) {
        jv_free(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    memset(v, 0, sizeof(*v));
}

static void jv_ws(struct jv_in *in)
{
    while (in->p < in->end && (*in->p == ' ' || *in->p == '\t' || *in->p == '\n' ||
                               *in->p == '\r'))
        in->p++;
}

static bool jv_fail(struct jv_in *in, const char *why)
{
    if (!in->err)
        in->err = why;
    return false;
}

static int jv_hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static bool jv_string(struct jv_in *in, char **out_p)
{
    size_t cap = 16, n = 0;
    char *s;

    if (in->p >= in->end || *in->p != '"')
        return jv_fail(in, "expected a string");
    in->p++;
    s = malloc(cap);
    if (!s)
        return jv_fail(in, "out of memory");
    for (;;) {
        unsigned c;
        char enc[4];
        size_t k = 1;

        if (in->p >= in->end) {
            free(s);
            return jv_fail(in, "unterminated string");
        }
        c = (unsigned char)*in->p++;
        if (c == '"')
            break;
        if (c < 0x20) {
            free(s);
            return jv_fail(in, "control character in a string");
        }
        enc[0] = (char)c;
        if (c == '\\') {
            if (in->p >= in->end) {
                free(s);
                return jv_fail(in, "unterminated string");
            }
            c = (unsigned char)*in->p++;
            switch (c) {
            case '"': case '\\': case '/': enc[0] = (char)c; break;
            case 'b': enc[0] = '\b'; break;
            case 'f': enc[0] = '\f'; break;
            case 'n': enc[0] = '\n'; break;
            case 'r': enc[0] = '\r'; break;
            case 't': enc[0] = '\t'; break;
            case 'u': {
                unsigned u = 0;
                for (int i = 0; i < 4; i++) {
                    int h = in->p < in->end ? jv_hex(*in->p++) : -1;
                    if (h < 0) {
                        free(s);
                        return jv_fail(in, "bad \\u escape");
                    }
                    u = u << 4 | (unsigned)h;
                }
                /* surrogates stay as they are encoded: names here are ASCII */
                if (u < 0x80) {
                    enc[0] = (char)u;
                } else if (u < 0x800) {
                    enc[0] = (char)(0xc0 | u >> 6), enc[1] = (char)(0x80 | (u & 63)), k = 2;
                } else {
                    enc[0] = (char)(0xe0 | u >> 12), enc[1] = (char)(0x80 | (u >> 6 & 63));
                    enc[2] = (char)(0x80 | (u & 63)), k = 3;
                }
                break;
            }
            default:
                free(s);
                return jv_fail(in, "bad escape in a string");
            }
        }
        if (n + k + 1 > cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) {
                free(s);
                return jv_fail(in, "out of memory");
            }
            s = t;
        }
        memcpy(s + n, enc, k);
        n += k;
    }
    s[n] = '\0';
    *out_p = s;
    return true;
}

static bool jv_number(struct jv_in *in, double *out_p)
{
    const char *p = in->p;
    char buf[64], *end;
    size_t len;

    if (p < in->end && *p == '-')
        p++;
    if (p >= in->end || !isdigit((unsigned char)*p))
        return jv_fail(in, "expected a value");
    if (*p == '0' && p + 1 < in->end && isdigit((unsigned char)p[1]))
        return jv_fail(in, "leading zero in a number");
    while (p < in->end && isdigit((unsigned char)*p))
        p++;
    if (p < in->end && *p == '.') {
        p++;
        if (p >= in->end || !isdigit((unsigned char)*p))
            return jv_fail(in, "bad number");
        while (p < in->end && isdigit((unsigned char)*p))
            p++;
    }
    if (p < in->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < in->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= in->end || !isdigit((unsigned char)*p))
            return jv_fail(in, "bad number");
        while (p < in->end && isdigit((unsigned char)*p))
            p++;
    }
    len = (size_t)(p - in->p);
    if (len >= sizeof(buf))
        return jv_fail(in, "number too long");
    memcpy(buf, in->p, len);
    buf[len] = '\0';
    *out_p = strtod(buf, &end);
    in->p = p;
    return true;
}

static bool jv_value(struct jv_in *in, struct jv *v, int depth);

/* '[' or '{' already seen; items until close. */
static bool jv_items(struct jv_in *in, struct jv *v, int depth, char close)
{
    size_t cap = 0;

    jv_ws(in);
    if (in->p < in->end && *in->p == close) {
        in->p++;
        return true;
    }
    for (;;) {
        char *key = NULL;

        jv_ws(in);
        if (close == '}') {
            if (!jv_string(in, &key))
                return false;
            jv_ws(in);
            if (in->p >= in->end || *in->p != ':') {
                free(key);
                return jv_fail(in, "expected ':'");
            }
            in->p++;
        }
        if (v->n == cap) {
            size_t nc = cap ? 2 * cap : 4;
            struct jv *it = realloc(v->items, nc * sizeof(*it));
            char **ks = it && close == '}' ? realloc(v->keys, nc * sizeof(*ks)) : NULL;
            if (it)
                v->items = it;
            if (ks)
                v->keys = ks;
            if (!it || (close == '}' && !ks)) {
                free(key);
                return jv_fail(in, "out of memory");
            }
            cap = nc;
        }
        memset(&v->items[v->n], 0, sizeof(v->items[v->n]));
        if (close == '}')
            v->keys[v->n] = key;
        v->n++;
        if (!jv_value(in, &v->items[v->n - 1], depth + 1))
            return false;
        jv_ws(in);
        if (in->p < in->end && *in->p == ',') {
            in->p++;
            continue;
        }
        if (in->p < in->end && *in->p == close) {
            in->p++;
            return true;
        }
        return jv_fail(in, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static bool jv_value(struct jv_in *in, struct jv *v, int depth)
{
    memset(v, 0, sizeof(*v));
    if (depth > JV_MAX_DEPTH)
        return jv_fail(in, "nested too deeply");
    jv_ws(in);
    if (in->p >= in->end)
        return jv_fail(in, "unexpected end of file");
    switch (*in->p) {
    case '{':
        in->p++;
        v->type = JV_OBJ;
        return jv_items(in, v, depth, '}');
    case '[':
        in->p++;
        v->type = JV_ARR;
        return jv_items(in, v, depth, ']');
    case '"':
        v->type = JV_STR;
        return jv_string(in, &v->str);
    case 't': case 'f': case 'n': {
        static const char *const words[] = {"true", "false", "null"};
        for (int w = 0; w < 3; w++) {
            size_t len = strlen(words[w]);
            if ((size_t)(in->end - in->p) >= len && !memcmp(in->p, words[w], len)) {
                in->p += len;
                v->type = w == 2 ? JV_NULL : JV_BOOL;
                v->num = w == 0;
                return true;
            }
        }
        return jv_fail(in, "expected a value");
    }
    default:
        v->type = JV_NUM;
        return jv_number(in, &v->num);
    }
}

static const struct jv *jv_get(const struct jv *o, const char *key)
{
    if (!o || o->type != JV_OBJ)
        return NULL;
    for (size_t i = 0; i < o->n; i++)
        if (!strcmp(o->keys[i], key))
            return &o->items[i];
    return NULL;
}

static const char *jv_str(const struct jv *o, const char *key)
{
    const struct jv *v = jv_get(o, key);
    return v && v->type == JV_STR ? v->str : NULL;
}

/* A number that is an integer in [lo, hi]. */
static bool jv_int(const struct jv *o, const char *key, double lo, double hi, int64_t *out_p)
{
    const struct jv *v = jv_get(o, key);
    if (!v || v->type != JV_NUM || v->num != v->num || v->num < lo || v->num > hi ||
        v->num != (double)(int64_t)v->num)
        return false;
    *out_p = (int64_t)v->num;
    return true;
}

static bool jv_num(const struct jv *o, const char *key, double *out_p)
{
    const struct jv *v = jv_get(o, key);
    if (!v || v->type != JV_NUM)
        return false;
    *out_p = v->num;
    return true;
}

#endif /* COLLVIZ_JSON_H */
