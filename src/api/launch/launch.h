/*
 * launch.h - what the launchers' files share: a launcher is one row of
 * {name, present, read rank/size, exchange the id} (one file each: collrun.c, torchrun.c,
 * mpirun.c, srun.c) listed in launch.c's table, plus the environment helpers and the one
 * failure helper they all use.
 *
 * A new launcher is one file that defines its row and one line in launch.c's table.
 */
#ifndef COLL_LAUNCH_H
#define COLL_LAUNCH_H

#include "../launcher.h"

#include <coll_config.h>

#include <netdb.h>

#define COLL_LAUNCH_STORE_KEY_MAX 256
#define COLL_LAUNCH_STORE_VAL_MAX 4096

/* One exchange of the unique id: what the row's exchange needs and leaves behind. */
struct coll_launch_xchg {
    unsigned seq;       /* this process's coll_comm_init_env number: one exchange's keys */
    int64_t timeout_ms; /* COLL_BOOTSTRAP_TIMEOUT_MS, or the default */
    void *state;        /* what the row's done releases once every rank joined (or not) */
};

struct coll_launcher {
    const char *name;
    /* Rows of one group are read together and must agree on rank and size (torchrun and
     * mpirun: either may have started the other); the lowest group present wins. */
    int group;
    /* "COLL_UNIQUE_ID from collrun": what "no launcher environment found" lists */
    const char *hint;
    /* Some of its variables are set, complete or not. */
    bool (*present)(void);
    /* Rank, size and the local ones from its variables. */
    coll_status_t (*read)(struct coll_launch *l);
    /* Optional: the chosen launcher's checks beyond rank and size (they do not apply to a
     * launcher that only agreed with the chosen one); may set l->pmix. */
    coll_status_t (*settle)(struct coll_launch *l);
    /* Rank 0 makes the id and hands it on; the others wait for it. */
    coll_status_t (*exchange)(const struct coll_launch *l, struct coll_launch_xchg *x,
                              coll_unique_id_t *id);
    /* Optional: the id's channel is no longer needed; joined says whether the init
     * succeeded. */
    void (*done)(const struct coll_launch *l, struct coll_launch_xchg *x, bool joined);
};

COLL_INTERNAL extern const struct coll_launcher coll__launch_collrun;
COLL_INTERNAL extern const struct coll_launcher coll__launch_torchrun;
COLL_INTERNAL extern const struct coll_launcher coll__launch_mpirun;
COLL_INTERNAL extern const struct coll_launcher coll__launch_srun;

/* The variable's value, NULL when unset or empty. */
COLL_INTERNAL const char *coll__launch_env(const char *name);

/* The one failure helper: a status whose message begins "<launcher> environment: ".
 * err != 0 makes it COLL_SYSTEM_ERROR with ": <strerror(err)>" appended (st is ignored). */
COLL_INTERNAL coll_status_t coll__launch_fail(const char *launcher, coll_status_t st, int err,
                                              const char *fmt, ...) COLL_PRINTF(4, 5);

/* Milliseconds until deadline_ns (rounded up, 0 once past, at most INT_MAX). */
COLL_INTERNAL int coll__launch_ms_left(uint64_t deadline_ns);

/* Rank, size, local rank and local size from the named variables (the local ones may be
 * absent: NULL name or unset), each checked to be an integer in range. */
COLL_INTERNAL coll_status_t coll__launch_read(const char *launcher, const char *rank_v,
                                              const char *size_v, const char *lrank_v,
                                              const char *lsize_v, struct coll_launch *l);

/* PMIx's own idea of our rank must be the launcher's: a PMIx server from another job (a
 * nested launch) would put the id where no peer looks. */
COLL_INTERNAL coll_status_t coll__launch_check_pmix_rank(const struct coll_launch *l,
                                                         const char *rank_var);

/* The id through PMIx (mpirun; srun --mpi=pmix): put/commit/fence by rank 0, get by the
 * others. Without PMIx in the build, an error saying so. */
COLL_INTERNAL coll_status_t coll__launch_pmix_exchange(const struct coll_launch *l,
                                                       struct coll_launch_xchg *x,
                                                       coll_unique_id_t *id);

/* The TCPStore's address as the torch environment names it (MASTER_ADDR, MASTER_PORT):
 * an error naming them when it does not resolve. */
COLL_INTERNAL coll_status_t coll__tcpstore_resolve(const char *host, const char *port,
                                                   struct addrinfo **res_p);

/* A one-key TCPStore on port, serving key = val until coll__tcpstore_serve_stop (torch
 * environment without an agent store: rank 0 serves the key itself). */
struct coll_store_srv;
COLL_INTERNAL coll_status_t coll__tcpstore_serve(const char *port, const char *key, const void *val,
                                                 size_t len, struct coll_store_srv **srv_p);
COLL_INTERNAL void coll__tcpstore_serve_stop(struct coll_store_srv *srv);

#endif /* COLL_LAUNCH_H */
