/*
 * colls.c - the table of collectives, made from colls.h's list (COLL_COLLS), and the
 * lookups by enum and by name. tests/test_base.c checks the rows against the enum, the NCCL
 * library's exports and what the schedules build.
 */
#include "colls.h"

#include <string.h>
#include <strings.h>

const struct coll_coll_desc coll__colls[COLL_NUM_COLLS] = {
#define COLL_COLL_ROW(id, ...) [COLL_COLL_##id] = {.coll = COLL_COLL_##id, __VA_ARGS__},
    COLL_COLLS(COLL_COLL_ROW)
#undef COLL_COLL_ROW
};

const struct coll_coll_desc *coll__coll_desc(enum coll_coll c)
{
    return (unsigned)c < COLL_NUM_COLLS ? &coll__colls[c] : NULL;
}

const char *coll__coll_name(enum coll_coll c)
{
    return (unsigned)c < COLL_NUM_COLLS ? coll__colls[c].name : "unknown";
}

static bool name_is(const char *s, const char *name, size_t len)
{
    return s && strlen(s) == len && !strncasecmp(s, name, len);
}

bool coll__coll_from_name(const char *name, size_t len, enum coll_coll *c_p)
{
    for (int c = 0; c < COLL_NUM_COLLS; c++) {
        const struct coll_coll_desc *d = &coll__colls[c];
        if (name_is(d->name, name, len) || name_is(d->alias[0], name, len) ||
            name_is(d->alias[1], name, len)) {
            *c_p = (enum coll_coll)c;
            return true;
        }
    }
    return false;
}
