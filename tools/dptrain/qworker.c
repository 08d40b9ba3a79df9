/*
 * qworker.c - a thread that runs quantized all-reduces on its own communicator.
 */
#include "qworker.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>

static const char *const codec_names[COLL_QUANT_NUM_CODECS] = {
    [COLL_QUANT_FP16] = "fp16", [COLL_QUANT_BF16] = "bf16",   [COLL_QUANT_INT8] = "int8",
    [COLL_QUANT_E4M3] = "e4m3", [COLL_QUANT_E5M2] = "e5m2",   [COLL_QUANT_INT4] = "int4",
    [COLL_QUANT_E3M0] = "e3m0", [COLL_QUANT_SIGN1] = "sign1",
};

int qworker_codec(const char *name)
{
    for (int c = 0; c < COLL_QUANT_NUM_CODECS; c++)
        if (codec_names[c] && strcmp(name, codec_names[c]) == 0)
            return c;
    return -1;
}

const char *qworker_codec_name(int codec)
{
    return codec >= 0 && codec < COLL_QUANT_NUM_CODECS ? codec_names[codec] : "fp32";
}

int qworker_init(struct qworker *w, coll_comm_t *comm, coll_quant_codec_t codec, char *err,
                 size_t errlen)
{
    coll_quant_config_t cfg = COLL_QUANT_CONFIG_INIT(codec);
    coll_status_t st;
    int rank = 0;

    memset(w, 0, sizeof(*w));
    w->config = cfg;
    coll_comm_rank(comm, &rank);
    st = coll_comm_split(comm, 0, rank, &w->comm);
    if (st != COLL_SUCCESS) {
        snprintf(err, errlen, "cannot make the quantized all-reduce communicator: %s: %s",
                 coll_status_string(st), coll_last_error(comm));
        return -1;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->posted, NULL);
    pthread_cond_init(&w->finished, NULL);
    return 0;
}

int qworker_feedback(struct qworker *w, size_t count, coll_quant_feedback_t **fb_p, char *err,
                     size_t errlen)
{
    coll_status_t st = coll_quant_feedback_create(w->comm, count, fb_p);
    if (st != COLL_SUCCESS) {
        snprintf(err, errlen, "coll_quant_feedback_create failed: %s: %s",
                 coll_status_string(st), coll_last_error(w->comm));
        return -1;
    }
    return 0;
}

static void *worker_main(void *arg)
{
    struct qworker *w = arg;

    pthread_mutex_lock(&w->mu);
    for (;;) {
        struct qjob *job;
        uint64_t sent = 0;

        while (!w->head && !w->stop)
            pthread_cond_wait(&w->posted, &w->mu);
        if (!w->head)
            break;
        job = w->head;
        w->head = job->next;
        if (!w->head)
            w->tail = NULL;
        pthread_mutex_unlock(&w->mu);

        job->status = coll_allreduce_quantized(job->buf, job->buf, job->count, COLL_FLOAT32,
                                               job->op, &w->config, job->fb, w->comm);
        if (coll_comm_bytes_sent(w->comm, &sent) == COLL_SUCCESS)
            atomic_store(&w->bytes_sent, sent);

        pthread_mutex_lock(&w->mu);
        atomic_store_explicit(&job->done, 1, memory_order_release);
        pthread_cond_broadcast(&w->finished);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int qworker_start(struct qworker *w, char *err, size_t errlen)
{
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the quantized all-reduce thread: %s",
                 strerror(rc));
        return -1;
    }
    w->started = true;
    return 0;
}

void qworker_post(struct qworker *w, struct qjob *job)
{
    atomic_store(&job->done, 0);
    job->next = NULL;
    pthread_mutex_lock(&w->mu);
    if (w->tail)
        w->tail->next = job;
    else
        w->head = job;
    w->tail = job;
    pthread_cond_signal(&w->posted);
    pthread_mutex_unlock(&w->mu);
}

coll_status_t qworker_wait(struct qworker *w, struct qjob *job)
{
    /* A short spin catches jobs that are about to finish without a sleep and wake-up; the
     * ranks outnumber the cores here, so the spin yields instead of burning its slice. */
    for (int i = 0; i < 64; i++) {
        if (atomic_load_explicit(&job->done, memory_order_acquire))
            return job->status;
        sched_yield();
    }
    pthread_mutex_lock(&w->mu);
    while (!atomic_load_explicit(&job->done, memory_order_acquire))
        pthread_cond_wait(&w->finished, &w->mu);
    pthread_mutex_unlock(&w->mu);
    return job->status;
}

const char *qworker_error(const struct qworker *w)
{
    return coll_last_error(w->comm);
}

void qworker_fini(struct qworker *w)
{
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = true;
        pthread_cond_signal(&w->posted);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
        w->started = false;
    }
    if (w->comm) {
        coll_comm_destroy(w->comm);
        w->comm = NULL;
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->posted);
        pthread_cond_destroy(&w->finished);
    }
}
