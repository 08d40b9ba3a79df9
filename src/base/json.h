/*
 * json.h - the one JSON writer of coll's files: collbench's records, traces (COLL_TRACE,
 * collsim --trace), collviz's pages. One escaping rule for all of them, so a string that
 * one tool writes another reads back unchanged:
 *   - quote and backslash escaped, control characters as \u00XX;
 *   - '<', '>' and '&' as \u003c, \u003e, \u0026, so that a string inside an HTML page's
 *     <script> can never close it (JSON readers decode them to the same characters);
 *   - invalid UTF-8 (a stray byte of a hostname, a truncated name) as U+FFFD, so the file
 *     always parses.
 */
#ifndef COLL_JSON_H
#define COLL_JSON_H

#include "base.h"

#include <stdio.h>

/* s as a JSON string, quotes included; NULL writes null. */
COLL_INTERNAL void coll__json_str(FILE *f, const char *s);
/* v with 9 significant digits (a double read back is within 1e-9 of it); null when v is
 * not finite, which JSON cannot say. */
COLL_INTERNAL void coll__json_num(FILE *f, double v);

#endif /* COLL_JSON_H */
