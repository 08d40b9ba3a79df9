/*
 * shrink.c - coll_comm_shrink: a new communicator of the survivors, so that a job can go on
 * after a rank died without a restart (as ULFM's MPIX_Comm_shrink and ncclCommShrink).
 *
 * The parent's connections are no use (a failed comm has closed them all), and nobody
 * outside the survivors can hand them a new id. So every survivor derives the same id
 * from what they already share: the secret and comm id of the parent and the list of
 * excluded ranks, through HMAC-SHA256 keyed with the parent's secret (a stranger who saw the
 * parent's traffic learns nothing: the secret never crossed the wire). The new root is the
 * lowest surviving rank, listening on the address its data listener had in the parent (taken
 * again with SO_REUSEADDR once the parent let it go), which every survivor knows from the
 * parent's bootstrap table. Then it is an ordinary bootstrap: the joins are authenticated,
 * a survivor that passes a different exclusion list derives another secret and is refused,
 * and one that never comes turns into COLL_TIMEOUT for the others.
 */
#include "comm.h"
#include "../core/bootstrap.h"
#include "../transport/transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static coll_status_t check_exclusions(struct coll_comm *comm, const int *exclude, int nexclude,
                                      bool *gone)
{
    if (nexclude < 0 || (nexclude > 0 && !exclude))
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "coll_comm_shrink: %d excluded ranks at %p", nexclude,
                           (const void *)exclude);
    for (int i = 0; i < nexclude; i++) {
        int r = exclude[i];
        if (r < 0 || r >= comm->nranks)
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "coll_comm_shrink: excluded rank %d is out of range [0, %d)", r,
                               comm->nranks);
        if (gone[r])
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "coll_comm_shrink: rank %d is excluded twice", r);
        gone[r] = true;
    }
    if (gone[comm->rank])
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "coll_comm_shrink: this rank (%d) is in the excluded list; excluded "
                           "ranks do not call it",
                           comm->rank);
    return COLL_SUCCESS;
}

/* What every survivor computes alike: secret and comm id of the child. */
static bool derive_id(const struct coll_comm *comm, const bool *gone, struct coll_id_info *id)
{
    uint8_t mac[COLL_MAC_BYTES];
    size_t len = 12 + 8 + 4 + ((size_t)comm->nranks + 7) / 8;
    uint8_t *msg = calloc(1, len);

    if (!msg)
        return false;
    memcpy(msg, "coll-shrink", 12); /* with its NUL: a label no other MAC uses */
    for (int i = 0; i < 8; i++)
        msg[12 + i] = (uint8_t)(comm->comm_id >> (8 * i));
    for (int i = 0; i < 4; i++)
        msg[20 + i] = (uint8_t)((uint32_t)comm->nranks >> (8 * i));
    for (int r = 0; r < comm->nranks; r++)
        if (gone[r])
            msg[24 + r / 8] |= (uint8_t)(1u << (r % 8));
    coll__hmac_sha256(comm->secret, COLL_SECRET_BYTES, msg, len, mac);
    free(msg);
    memcpy(id->secret, mac, COLL_SECRET_BYTES);
    id->comm_id = 0;
    for (int i = 0; i < 8; i++)
        id->comm_id |= (uint64_t)mac[COLL_SECRET_BYTES + i] << (8 * i);
    if (id->comm_id == 0)
        id->comm_id = 1;
    return true;
}

COLL_API coll_status_t coll_comm_shrink(coll_comm_t *comm, const int *exclude, int nexclude,
                                        coll_comm_t **newcomm_p)
{
    struct coll_id_info id;
    coll_unique_id_t uid;
    bool *gone;
    int root = -1, newrank = 0, n = 0;
    uint64_t deadline;
    coll_status_t st;

    if (!newcomm_p)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "coll_comm_shrink: newcomm_p is NULL");
    *newcomm_p = NULL;
    if (coll__comm_check(comm, "coll_comm_shrink") != COLL_SUCCESS)
        return COLL_INVALID_ARGUMENT;
    gone = calloc((size_t)comm->nranks, sizeof(*gone));
    if (!gone)
        return coll__error(comm, COLL_SYSTEM_ERROR, "coll_comm_shrink: out of memory");
    st = check_exclusions(comm, exclude, nexclude, gone);
    if (st != COLL_SUCCESS)
        goto out;
    for (int r = 0; r < comm->nranks; r++) {
        if (gone[r])
            continue;
        if (root < 0)
            root = r;
        if (r == comm->rank)
            newrank = n;
        n++;
    }
    memset(&id, 0, sizeof(id));
    if (!derive_id(comm, gone, &id)) {
        st = coll__error(comm, COLL_SYSTEM_ERROR, "coll_comm_shrink: out of memory");
        goto out;
    }
    if (comm->peers[root].addr_len == 0 || comm->peers[root].addr_len > COLL_ADDR_MAX) {
        st = coll__error(comm, COLL_INVALID_USAGE,
                         "coll_comm_shrink: rank %d, the new root, has no TCP listener address "
                         "(COLL_TRANSPORT=%s)",
                         root, comm->cfg.transport);
        goto out;
    }
    id.addr_len = comm->peers[root].addr_len;
    memcpy(id.addr, comm->peers[root].addr, id.addr_len);
    /* The parent is done: fail it (if it has not failed already), which closes its
     * connections and the listener whose address the new root takes over. */
    pthread_mutex_lock(&comm->lock);
    if (atomic_load(&comm->failed) == COLL_SUCCESS) {
        coll__error(comm, COLL_INVALID_USAGE, "communicator was shrunk: use the new one");
        coll__comm_fail(comm, COLL_INVALID_USAGE);
    }
    pthread_mutex_unlock(&comm->lock);
    COLL_INFO(COLL_SUB_INIT, "rank %d: shrinking comm %016llx of %d to %d ranks (new rank %d, "
              "root rank %d)", comm->rank, (unsigned long long)comm->comm_id, comm->nranks, n,
              newrank, root);
    if (comm->rank == root) {
        st = coll__bootstrap_root_start_at(&id);
        if (st != COLL_SUCCESS) {
            coll__error(comm, st, "coll_comm_shrink: cannot start the new root: %s",
                        coll_last_error(NULL));
            goto out;
        }
    }
    coll__id_encode(&id, &uid);
    /* A survivor may reach the new root's address before the root's parent let its old
     * listener go: that listener takes the join and drops it. Try again until the bootstrap
     * deadline; a survivor that disagrees on the list is dropped every time and ends in
     * COLL_TIMEOUT, as documented. */
    deadline = coll__now_ns() + (uint64_t)comm->cfg.bootstrap_timeout_ms * 1000000ull;
    for (;;) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        st = coll__comm_init_child(newcomm_p, n, &uid, newrank, comm);
        if (st == COLL_SUCCESS || st == COLL_INVALID_ARGUMENT || coll__now_ns() >= deadline)
            break;
        COLL_INFO(COLL_SUB_INIT, "rank %d: coll_comm_shrink: joining again after: %s",
                  comm->rank, coll_last_error(NULL));
        nanosleep(&ts, NULL);
    }
    if (st != COLL_SUCCESS)
        coll__error(NULL, st, "coll_comm_shrink: %s", coll_last_error(NULL));
out:
    free(gone);
    return st;
}
