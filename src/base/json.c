/*
 * json.c - the JSON string and number writers (json.h says the rules and why).
 */
#include "json.h"

#include <math.h>

/* Length of the UTF-8 sequence at p, 0 when it is not a valid one (a bad lead byte, a
 * missing continuation byte, or a string that ends inside it). Overlong forms pass: they
 * decode, and nothing here compares decoded text. */
static int utf8_len(const unsigned char *p)
{
    int len = p[0] < 0x80 ? 1 : (p[0] & 0xe0) == 0xc0 ? 2 : (p[0] & 0xf0) == 0xe0 ? 3
            : (p[0] & 0xf8) == 0xf0 ? 4 : 0;

    for (int k = 1; k < len; k++)
        if ((p[k] & 0xc0) != 0x80)
            return 0;
    return len;
}

void coll__json_str(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    while (*p) {
        int len = utf8_len(p);

        if (len == 0) {
            fputs("\\ufffd", f);
            p++;
        } else if (len > 1) {
            fwrite(p, 1, (size_t)len, f);
            p += len;
        } else {
            if (*p == '"' || *p == '\\')
                fprintf(f, "\\%c", *p);
            else if (*p < 0x20 || *p == '<' || *p == '>' || *p == '&')
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
            p++;
        }
    }
    fputc('"', f);
}

void coll__json_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.9g", v);
    else
        fputs("null", f);
}
