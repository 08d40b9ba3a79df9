/*
 * elastic.h - the rendezvous directory of dptrain --elastic DIR: who is alive, how a
 * restarted process asks to join, and how the job's rank 0 hands it an id.
 *
 * Liveness: every process holds an exclusive flock on DIR/live.PID for its whole life. The
 * kernel drops the lock when the process dies, however it dies (SIGKILL included), so any
 * process can tell a dead peer from a live one by trying the lock, without a message from
 * the dead. That is what lets the survivors of a failed comm agree on whom to exclude
 * (coll_comm_shrink needs the same list on every survivor). It needs one host, or a shared
 * filesystem whose flock is coherent between hosts.
 *
 * Files, each written to a temporary name and renamed, so a reader sees it whole or not:
 *   live.PID   locked by process PID while it lives
 *   init.id    the first comm's id, written by the first rank 0 (--rank 0 --world N)
 *   member.R   the process of first rank R, written before it joins the first comm, so
 *              that a failure during the first sync can be recovered from too
 *   join.PID   process PID wants to join (a restarted rank); removed once it has joined
 *   grow.PID   the offer to PID: "ID-HEX NRANKS RANK PID0 .. PID(NRANKS-1)" (the grown
 *              comm's processes by rank), written by the job's rank 0; the joiner removes
 *              it when it takes it
 */
#ifndef DPTRAIN_ELASTIC_H
#define DPTRAIN_ELASTIC_H

#include <coll.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ELASTIC_MAX_JOIN 64

struct elastic {
    const char *dir;
    int live_fd; /* holds the flock on live.PID */
    int64_t pid;
};

/* Takes this process's live lock in dir (which must exist). */
int elastic_open(struct elastic *e, const char *dir, char *err, size_t errlen);
void elastic_close(struct elastic *e);

/* Whether process pid of this job still lives (holds its live lock). */
bool elastic_alive(const struct elastic *e, int64_t pid);

/* The first comm's id: rank 0 makes and publishes it, the others wait up to timeout_s. */
int elastic_initial_id(const struct elastic *e, int rank, double timeout_s,
                       coll_unique_id_t *id, char *err, size_t errlen);

/* A first member: publishes its process as rank's before the first comm forms; once it has
 * formed, every rank's (all published before anyone could pass init). */
int elastic_member_publish(const struct elastic *e, int rank, char *err, size_t errlen);
int64_t *elastic_members(const struct elastic *e, int nranks, char *err, size_t errlen);

/* A joiner: asks to join (join.PID), then waits up to timeout_s for an offer. */
int elastic_join_request(const struct elastic *e, char *err, size_t errlen);
int elastic_join_wait(const struct elastic *e, double timeout_s, coll_unique_id_t *id,
                      int *nranks_p, int *rank_p, int64_t **pids_p, char *err, size_t errlen);
/* Once joined: the request is gone. */
void elastic_join_done(const struct elastic *e);

/* The job's rank 0: up to max live joiners that have no offer pending (dead ones' requests
 * are removed); then an offer to each. */
int elastic_joiners(const struct elastic *e, int64_t *pids, int max);
int elastic_offer(const struct elastic *e, int64_t pid, const coll_unique_id_t *id,
                  int nranks, int rank, const int64_t *pids, char *err, size_t errlen);

/* Sleep ms milliseconds (the waits between tries, here and in dptrain.c). */
void elastic_nap_ms(long ms);

#endif /* DPTRAIN_ELASTIC_H */
