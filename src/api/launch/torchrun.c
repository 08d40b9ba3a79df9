/*
 * torchrun.c - the torch environment (torchrun, or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
 * set by hand): the id goes through the TCPStore on MASTER_ADDR:MASTER_PORT (tcpstore.c),
 * the agent's when TORCHELASTIC_USE_AGENT_STORE=True, else one rank 0 serves itself.
 */
#include "launch.h"

#include <stdio.h>
#include <string.h>

static bool present(void)
{
    return coll__launch_env("MASTER_ADDR") || coll__launch_env("MASTER_PORT") ||
           coll__launch_env("WORLD_SIZE") || coll__launch_env("TORCHELASTIC_RUN_ID");
}

static coll_status_t read_env(struct coll_launch *l)
{
    return coll__launch_read("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", l);
}

static coll_status_t exchange(const struct coll_launch *l, struct coll_launch_xchg *x,
                              coll_unique_id_t *id)
{
    const char *host = coll__launch_env("MASTER_ADDR");
    const char *port = coll__launch_env("MASTER_PORT");
    const char *run = coll__launch_env("TORCHELASTIC_RUN_ID");
    const char *attempt = coll__launch_env("TORCHELASTIC_RESTART_COUNT");
    const char *agent = coll__launch_env("TORCHELASTIC_USE_AGENT_STORE");
    char key[COLL_LAUNCH_STORE_KEY_MAX], hex[COLL_UNIQUE_ID_STRLEN];
    struct coll_store_srv *srv = NULL;
    struct addrinfo *res = NULL;
    coll_status_t st;

    if (!host || !port)
        return coll__launch_fail(l->name, COLL_INVALID_ARGUMENT, 0, "%s is not set",
                                 !host ? "MASTER_ADDR" : "MASTER_PORT");
    /* a name that does not resolve fails here, on every rank, before anyone waits */
    st = coll__tcpstore_resolve(host, port, &res);
    if (st != COLL_SUCCESS)
        return st;
    freeaddrinfo(res);
    /* a restarted worker group reuses the agent's store: the attempt keeps ids apart */
    snprintf(key, sizeof(key), "coll/unique_id/%s/%s/%u", run ? run : "-", attempt ? attempt : "0",
             x->seq);
    if (l->rank == 0) {
        COLL_CHECK_GOTO(coll_get_unique_id(id), st, out);
        COLL_CHECK_GOTO(coll_unique_id_to_string(id, hex, sizeof(hex)), st, out);
        if (agent && !strcmp(agent, "True")) {
            st = coll__tcpstore_set(host, port, key, hex, 2 * COLL_UNIQUE_ID_BYTES, x->timeout_ms);
        } else {
            st = coll__tcpstore_serve(port, key, hex, 2 * COLL_UNIQUE_ID_BYTES, &srv);
            x->state = srv;
        }
        goto out;
    }
    COLL_CHECK_GOTO(
        coll__tcpstore_get(host, port, key, hex, 2 * COLL_UNIQUE_ID_BYTES, x->timeout_ms), st, out);
    hex[2 * COLL_UNIQUE_ID_BYTES] = '\0';
    st = coll_unique_id_from_string(hex, id);
    if (st != COLL_SUCCESS)
        st =
            coll__launch_fail(l->name, COLL_REMOTE_ERROR, 0,
                              "key '%s' in the store at %s:%s is not a unique id", key, host, port);
out:
    return st;
}

static void done(const struct coll_launch *l, struct coll_launch_xchg *x, bool joined)
{
    (void)l, (void)joined;
    coll__tcpstore_serve_stop(x->state);
}

/* torchrun and mpirun are read together (group 1): either may have started the other, and
 * they must agree. */
const struct coll_launcher coll__launch_torchrun = {
    .name = "torchrun",
    .group = 1,
    .hint = "RANK/WORLD_SIZE/MASTER_ADDR from torchrun",
    .present = present,
    .read = read_env,
    .exchange = exchange,
    .done = done,
};
