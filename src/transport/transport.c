/*
 * transport.c - the registry of transports, in preference order. Only this file knows which
 * transports a build has.
 */
#include "coll_config.h"
#include "transport.h"

#include <string.h>

const struct coll_transport *const coll__transports[] = {
    &coll__shm_transport,
    &coll__tcp_transport,
#if COLL_HAVE_IBVERBS
    &coll__ib_transport, /* after tcp for now: used where COLL_TRANSPORT=ib asks for it */
#endif
    NULL,
};
_Static_assert(COLL_ARRAY_SIZE(coll__transports) <= COLL_MAX_TRANSPORTS + 1,
               "comm->tp_ctx[] and the peer info's tp_mask hold COLL_MAX_TRANSPORTS");

const struct coll_transport *coll__transport_find(const char *name)
{
    for (int i = 0; coll__transports[i]; i++)
        if (!strcmp(coll__transports[i]->name, name))
            return coll__transports[i];
    return NULL;
}

int coll__transport_index(const struct coll_transport *tp)
{
    for (int i = 0; coll__transports[i]; i++)
        if (coll__transports[i] == tp)
            return i;
    return -1;
}
