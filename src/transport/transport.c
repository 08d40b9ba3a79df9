/*
 * transport.c - the registry of transports, in preference order. Only this file knows which
 * transports a build has.
 */
#include "transport.h"

#include <string.h>

const struct coll_transport *const coll__transports[] = {
    &coll__tcp_transport,
    NULL,
};

const struct coll_transport *coll__transport_find(const char *name)
{
    for (int i = 0; coll__transports[i]; i++)
        if (!strcmp(coll__transports[i]->name, name))
            return coll__transports[i];
    return NULL;
}
