/*
 * fuzz_param.c - libFuzzer harness: the COLL_* environment as coll__config_load reads it.
 * The input is split at newlines; piece i becomes the value of the i-th variable of the
 * table (src/base/param.c), so any mix of good, malformed, huge and out-of-range values is
 * reached. A load that succeeds must leave every number inside its declared range and every
 * string NUL-terminated within its field. coll__parse_size and the Slurm node-list parser
 * get the first piece.
 */
#include "core/internal.h"
#include "api/launcher.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), *piece, *save = NULL;
    struct coll_config cfg;
    char host[64];
    int64_t v;
    size_t i = 0;

    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    if (memchr(text, '\0', size)) /* the environment cannot hold a NUL */
        goto out;
    {
        char first[256];
        size_t n = strcspn(text, "\n");
        n = n < sizeof(first) - 1 ? n : sizeof(first) - 1;
        memcpy(first, text, n);
        first[n] = '\0';
        if (coll__parse_size(first, &v) && v < 0)
            abort();
        if (coll__slurm_first_host(first, host, sizeof(host)) &&
            strnlen(host, sizeof(host)) == sizeof(host))
            abort();
    }
    for (piece = strtok_r(text, "\n", &save); piece && i < coll__nparams;
         piece = strtok_r(NULL, "\n", &save), i++)
        if (coll__params[i].offset != SIZE_MAX) /* logging knobs are read once per process */
            setenv(coll__params[i].name, piece, 1);
    if (coll__config_load(NULL, -1, &cfg) == COLL_SUCCESS) {
        for (size_t k = 0; k < coll__nparams; k++) {
            const struct coll_param *p = &coll__params[k];
            const char *field;
            if (p->offset == SIZE_MAX)
                continue;
            field = (const char *)&cfg + p->offset;
            if (p->type == COLL_PARAM_STRING) {
                if (!memchr(field, '\0', p->size))
                    abort();
            } else {
                memcpy(&v, field, sizeof(v));
                if (v < p->min || v > p->max)
                    abort();
            }
        }
    }
    for (size_t k = 0; k < coll__nparams; k++)
        if (coll__params[k].offset != SIZE_MAX)
            unsetenv(coll__params[k].name);
out:
    free(text);
    return 0;
}
