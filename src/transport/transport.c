/*
 * transport.c - the registry of transports, in preference order. Only this file knows which
 * transports a build has.
 */
#include "coll_config.h"
#include "transport.h"

#include <stdarg.h>
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
               "a comm's tp_ctx[] and the peer info's tp_mask hold COLL_MAX_TRANSPORTS");

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

const char *coll__peer_hostname(const struct coll_net *net, int peer)
{
    if (net->peers && peer >= 0 && peer < net->nranks)
        return net->peers[peer].hostname;
    return "?";
}

coll_status_t coll__comm_failed_status(const struct coll_net *net)
{
    int st = atomic_load(net->failed);
    return st != COLL_SUCCESS ? (coll_status_t)st : COLL_REMOTE_ERROR;
}

coll_status_t coll__transport_failv(struct coll_net *net, coll_status_t st, const char *fmt,
                                    va_list ap)
{
    /* the comm is failed before any transfer completes with the error */
    return coll__failv(net->comm, st, fmt, ap);
}

coll_status_t coll__transport_fail(struct coll_net *net, coll_status_t st, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    st = coll__transport_failv(net, st, fmt, ap);
    va_end(ap);
    return st;
}
