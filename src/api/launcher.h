/*
 * launcher.h - a communicator from the environment of the launcher that started us:
 * collrun, torchrun, Open MPI's mpirun or Slurm's srun (src/api/launch/, a file each).
 */
#ifndef COLL_LAUNCHER_H
#define COLL_LAUNCHER_H

#include "../core/internal.h"

/* What the environment says about this process; filled by coll__launcher_detect. */
struct coll_launch {
    const char *name;          /* "collrun", "torchrun", "mpirun", "srun" */
    int rank, size;
    int local_rank, local_size; /* -1 when the launcher does not say */
    bool pmix;                 /* the id travels through PMIx */
    const char *rank_var, *size_var; /* the variables rank and size came from */
};

/* Read and cross-check the launchers' variables (COLL_LAUNCHER picks one by name). An
 * incomplete or contradictory environment is COLL_INVALID_ARGUMENT naming the variables. */
COLL_INTERNAL coll_status_t coll__launcher_detect(struct coll_launch *l_p);

/* Some launcher's variables are set (complete or not: coll_comm_init_env says what is
 * wrong); programs that also run alone ask this. */
COLL_INTERNAL bool coll__launcher_present(void);

/* coll_comm_init_env: detect, get the unique id from the rank that made it, init. */
COLL_INTERNAL coll_status_t coll__launcher_comm_init(coll_comm_t **comm_p);

/* "n[01-03,7],m2" -> "n01": the first host of a Slurm node list; false when malformed. */
COLL_INTERNAL bool coll__slurm_first_host(const char *list, char *out, size_t n);

/* The minimal TCPStore client (PyTorch's c10d wire protocol): set key to value, or wait for
 * key and read it. host:port is the store; where names it in messages (e.g. "MASTER_ADDR").
 * Unresolvable host, unreachable store or no key before the deadline: an error naming them. */
COLL_INTERNAL coll_status_t coll__tcpstore_set(const char *host, const char *port,
                                               const char *key, const void *val, size_t len,
                                               int64_t timeout_ms);
COLL_INTERNAL coll_status_t coll__tcpstore_get(const char *host, const char *port,
                                               const char *key, void *val, size_t len,
                                               int64_t timeout_ms);

#endif /* COLL_LAUNCHER_H */
