/*
 * qworker.h - quantized all-reduces that run while the trainer computes.
 *
 * coll_allreduce_quantized blocks, but dptrain wants gradient buckets (DDP) and outer
 * gradients (Streaming DiLoCo) to travel while it computes, as coll_iallreduce's do. So a
 * worker thread owns a second communicator (split from the job's, so one thread per comm as
 * coll.h asks) and runs the posted all-reduces one by one, in the order posted; every rank
 * posts the same sequence, so the collectives match. Each tensor has its own error feedback
 * state, made on the worker's comm before the thread starts.
 */
#ifndef DPTRAIN_QWORKER_H
#define DPTRAIN_QWORKER_H

#include <coll.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct qjob {
    float *buf;            /* in place, count floats */
    size_t count;
    coll_op_t op;
    coll_quant_feedback_t *fb; /* NULL: no error feedback */
    coll_status_t status;
    atomic_int done;
    struct qjob *next;
};

struct qworker {
    coll_comm_t *comm;
    coll_quant_config_t config;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t posted, finished;
    struct qjob *head, *tail;
    bool stop, started;
    atomic_uint_least64_t bytes_sent; /* the worker comm's counter after its last job */
};

/* Splits comm (collective over it) and sets up codec; no thread yet, so feedback states
 * can be made with qworker_feedback. Returns 0, or -1 with a message. */
int qworker_init(struct qworker *w, coll_comm_t *comm, coll_quant_codec_t codec, char *err,
                 size_t errlen);
/* A zero error feedback state for count floats on the worker's comm; before qworker_start. */
int qworker_feedback(struct qworker *w, size_t count, coll_quant_feedback_t **fb_p, char *err,
                     size_t errlen);
int qworker_start(struct qworker *w, char *err, size_t errlen);
/* Queues job (its buf, count, op, fb set); the buffer is the worker's until qworker_wait. */
void qworker_post(struct qworker *w, struct qjob *job);
/* Blocks until job is done (spins briefly, then sleeps); returns its status. */
coll_status_t qworker_wait(struct qworker *w, struct qjob *job);
/* The worker comm's error text (valid after a job failed). */
const char *qworker_error(const struct qworker *w);
/* Stops the thread after the queued jobs and destroys the comm; a zeroed w is accepted. */
void qworker_fini(struct qworker *w);

/* Codec by name as coll_quant_codec_t in lower case (int8, int4, e3m0, ...); -1 if none. */
int qworker_codec(const char *name);
const char *qworker_codec_name(int codec);

#endif /* DPTRAIN_QWORKER_H */
