/*
 * fuzz_unique_id.c - libFuzzer harness: the unique id as text (coll_unique_id_from_string,
 * what COLL_UNIQUE_ID and the launchers carry) and as the 128 raw bytes an application
 * broadcasts itself (coll__id_decode). Beyond "no crash": a decoded id must encode back to
 * the same 128 bytes, and text that parses must be exactly 256 hex digits.
 */
#include "core/bootstrap.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_raw(const uint8_t *p)
{
    coll_unique_id_t id, again;
    struct coll_id_info info;

    memcpy(id.internal, p, COLL_UNIQUE_ID_BYTES);
    if (coll__id_decode(&id, &info) != COLL_SUCCESS)
        return;
    if (info.comm_id == 0 || info.addr_len > COLL_ADDR_MAX)
        abort();
    coll__id_encode(&info, &again);
    if (memcmp(id.internal, again.internal, COLL_UNIQUE_ID_BYTES) != 0)
        abort(); /* an accepted id has exactly one encoding: nothing in it is unchecked */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    coll_unique_id_t id;

    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    if (coll_unique_id_from_string(s, &id) == COLL_SUCCESS) {
        if (strlen(s) != 2 * COLL_UNIQUE_ID_BYTES)
            abort();
        for (size_t i = 0; i < 2 * COLL_UNIQUE_ID_BYTES; i++)
            if (!isxdigit((unsigned char)s[i]))
                abort();
        check_raw((const uint8_t *)id.internal);
    }
    free(s);
    if (size >= COLL_UNIQUE_ID_BYTES)
        check_raw(data);
    return 0;
}
