/*
 * net.c - the comm as its transports see it (struct coll_net, src/transport/transport.h):
 * the fields they read, and the core's calls they make, behind one small table.
 *
 * Why a table and not direct calls: a transport stands on the base alone and links to
 * nothing of the core, so it can be built, read and tested against any owner of a net.
 * The calls cost one indirect jump each, on failure paths and once per received message
 * header (the agreement check), never per byte.
 */
#include "agree.h"
#include "internal.h"

#include <stdio.h>

static void net_error_text(struct coll_comm *comm, char *buf, size_t n)
{
    /* errlock: coll__error may write the text from any thread */
    pthread_mutex_lock(&comm->errlock);
    snprintf(buf, n, "%s", comm->errmsg);
    pthread_mutex_unlock(&comm->errlock);
}

static const struct coll_net_ops core_ops = {
    .fail = coll__comm_fail,
    .agree_xfer = coll__agree_xfer,
    .agree_probe = coll__agree_probe,
    .error_text = net_error_text,
};

void coll__comm_net_init(struct coll_comm *comm)
{
    comm->net = (struct coll_net){
        .rank = comm->rank,
        .nranks = comm->nranks,
        .comm_id = comm->comm_id,
        .secret = comm->secret,
        .cfg = &comm->cfg,
        .self = &comm->self,
        .peers = comm->peers,
        .epfd = comm->epfd,
        .failed = &comm->failed,
        .comm = comm,
        .ops = &core_ops,
    };
}
