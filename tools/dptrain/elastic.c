/*
 * elastic.c - the rendezvous directory of dptrain --elastic (elastic.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "elastic.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void elastic_nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void path_of(const struct elastic *e, char *buf, size_t len, const char *name,
                    int64_t pid)
{
    if (pid >= 0)
        snprintf(buf, len, "%s/%s.%" PRId64, e->dir, name, pid);
    else
        snprintf(buf, len, "%s/%s", e->dir, name);
}

/* Whole or not at all: a temporary file of this process, renamed over path. */
static int write_atomic(const struct elastic *e, const char *path, const char *text,
                        char *err, size_t errlen)
{
    char tmp[4096];
    size_t len = strlen(text);
    int fd;

    snprintf(tmp, sizeof(tmp), "%s/.tmp.%" PRId64, e->dir, e->pid);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, text, len) != (ssize_t)len || close(fd) != 0 ||
        rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot write '%s': %s", path, strerror(errno));
        if (fd >= 0)
            unlink(tmp);
        return -1;
    }
    return 0;
}

/* The file's text (up to len - 1 bytes), or -1 when it is not there. */
static int read_small(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -1;
    n = read(fd, buf, len - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

int elastic_open(struct elastic *e, const char *dir, char *err, size_t errlen)
{
    char path[4096];

    e->dir = dir;
    e->pid = (int64_t)getpid();
    path_of(e, path, sizeof(path), "live", e->pid);
    e->live_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (e->live_fd < 0) {
        snprintf(err, errlen, "--elastic: cannot create '%s': %s (does the directory exist?)",
                 path, strerror(errno));
        return -1;
    }
    if (flock(e->live_fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(err, errlen, "--elastic: cannot lock '%s': %s", path, strerror(errno));
        close(e->live_fd);
        e->live_fd = -1;
        return -1;
    }
    return 0;
}

void elastic_close(struct elastic *e)
{
    char path[4096];

    if (e->live_fd < 0)
        return;
    path_of(e, path, sizeof(path), "live", e->pid);
    unlink(path);
    close(e->live_fd);
    e->live_fd = -1;
}

bool elastic_alive(const struct elastic *e, int64_t pid)
{
    char path[4096];
    int fd;
    bool alive;

    if (pid == e->pid)
        return true;
    path_of(e, path, sizeof(path), "live", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    /* Shared, so that two processes probing the same peer at once do not see each other's
     * probe as the peer's lock. */
    alive = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd); /* drops the probe's lock, if it got one */
    return alive;
}

int elastic_initial_id(const struct elastic *e, int rank, double timeout_s,
                       coll_unique_id_t *id, char *err, size_t errlen)
{
    char path[4096], text[COLL_UNIQUE_ID_STRLEN + 8];
    double deadline = mono_s() + timeout_s;
    coll_status_t st;

    path_of(e, path, sizeof(path), "init.id", -1);
    if (rank == 0) {
        st = coll_get_unique_id(id);
        if (st != COLL_SUCCESS || coll_unique_id_to_string(id, text, sizeof(text)) !=
                                      COLL_SUCCESS) {
            snprintf(err, errlen, "coll_get_unique_id: %s", coll_last_error(NULL));
            return -1;
        }
        return write_atomic(e, path, text, err, errlen);
    }
    while (read_small(path, text, sizeof(text)) != 0 ||
           coll_unique_id_from_string(text, id) != COLL_SUCCESS) {
        if (mono_s() > deadline) {
            snprintf(err, errlen, "--elastic: no id in '%s' after %.0f s: did rank 0 start?",
                     path, timeout_s);
            return -1;
        }
        elastic_nap_ms(20);
    }
    return 0;
}

int elastic_member_publish(const struct elastic *e, int rank, char *err, size_t errlen)
{
    char path[4096], text[32];

    path_of(e, path, sizeof(path), "member", rank);
    snprintf(text, sizeof(text), "%" PRId64 "\n", e->pid);
    return write_atomic(e, path, text, err, errlen);
}

int64_t *elastic_members(const struct elastic *e, int nranks, char *err, size_t errlen)
{
    int64_t *pids = malloc((size_t)nranks * sizeof(*pids));

    if (!pids) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (int r = 0; r < nranks; r++) {
        char path[4096], text[32];
        long long v;
        path_of(e, path, sizeof(path), "member", r);
        if (read_small(path, text, sizeof(text)) != 0 || sscanf(text, "%lld", &v) != 1 ||
            v <= 0) {
            snprintf(err, errlen, "--elastic: no process in '%s'", path);
            free(pids);
            return NULL;
        }
        pids[r] = (int64_t)v;
    }
    return pids;
}

int elastic_join_request(const struct elastic *e, char *err, size_t errlen)
{
    char path[4096];

    path_of(e, path, sizeof(path), "join", e->pid);
    return write_atomic(e, path, "", err, errlen);
}

/* An offer: the id, the size, the rank and every rank's process. */
static int parse_offer(const char *text, coll_unique_id_t *id, int *nranks_p, int *rank_p,
                       int64_t **pids_p)
{
    char hex[COLL_UNIQUE_ID_STRLEN];
    const char *p = text;
    int used = 0;
    int64_t *pids;

    if (sscanf(p, "%256s %d %d%n", hex, nranks_p, rank_p, &used) != 3 ||
        coll_unique_id_from_string(hex, id) != COLL_SUCCESS || *nranks_p < 1 ||
        *nranks_p > 1 << 20 || *rank_p < 0 || *rank_p >= *nranks_p)
        return -1;
    pids = malloc((size_t)*nranks_p * sizeof(*pids));
    if (!pids)
        return -1;
    p += used;
    for (int r = 0; r < *nranks_p; r++) {
        long long v;
        if (sscanf(p, "%lld%n", &v, &used) != 1 || v <= 0) {
            free(pids);
            return -1;
        }
        pids[r] = (int64_t)v;
        p += used;
    }
    *pids_p = pids;
    return 0;
}

int elastic_join_wait(const struct elastic *e, double timeout_s, coll_unique_id_t *id,
                      int *nranks_p, int *rank_p, int64_t **pids_p, char *err, size_t errlen)
{
    char path[4096];
    double deadline = mono_s() + timeout_s;
    size_t cap = COLL_UNIQUE_ID_STRLEN + 64 + (size_t)24 * 4096;
    char *text = malloc(cap);

    if (!text) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    path_of(e, path, sizeof(path), "grow", e->pid);
    for (;;) {
        if (read_small(path, text, cap) == 0) {
            unlink(path); /* taken: a failed join asks again with a fresh offer */
            if (parse_offer(text, id, nranks_p, rank_p, pids_p) == 0) {
                free(text);
                return 0;
            }
            snprintf(err, errlen, "--elastic: malformed offer in '%s'", path);
            free(text);
            return -1;
        }
        if (mono_s() > deadline) {
            snprintf(err, errlen, "--elastic: no offer to join within %.0f s (is a job "
                     "running in '%s'?)", timeout_s, e->dir);
            free(text);
            return -1;
        }
        elastic_nap_ms(20);
    }
}

void elastic_join_done(const struct elastic *e)
{
    char path[4096];

    path_of(e, path, sizeof(path), "join", e->pid);
    unlink(path);
}

int elastic_joiners(const struct elastic *e, int64_t *pids, int max)
{
    DIR *d = opendir(e->dir);
    struct dirent *de;
    int n = 0;

    if (!d)
        return 0;
    while (n < max && (de = readdir(d)) != NULL) {
        char path[4096], *end;
        long long pid;

        if (strncmp(de->d_name, "join.", 5) != 0)
            continue;
        errno = 0;
        pid = strtoll(de->d_name + 5, &end, 10);
        if (errno || *end || pid <= 0)
            continue;
        if (!elastic_alive(e, (int64_t)pid)) {
            path_of(e, path, sizeof(path), "join", (int64_t)pid);
            unlink(path);
            continue;
        }
        path_of(e, path, sizeof(path), "grow", (int64_t)pid);
        if (access(path, F_OK) == 0)
            continue; /* an offer is waiting to be taken */
        pids[n++] = (int64_t)pid;
    }
    closedir(d);
    return n;
}

int elastic_offer(const struct elastic *e, int64_t pid, const coll_unique_id_t *id,
                  int nranks, int rank, const int64_t *pids, char *err, size_t errlen)
{
    char path[4096], hex[COLL_UNIQUE_ID_STRLEN];
    size_t cap = COLL_UNIQUE_ID_STRLEN + 64 + (size_t)24 * (size_t)nranks, len;
    char *text = malloc(cap);
    int ret;

    if (!text) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (coll_unique_id_to_string(id, hex, sizeof(hex)) != COLL_SUCCESS) {
        snprintf(err, errlen, "coll_unique_id_to_string: %s", coll_last_error(NULL));
        free(text);
        return -1;
    }
    len = (size_t)snprintf(text, cap, "%s %d %d", hex, nranks, rank);
    for (int r = 0; r < nranks && len < cap; r++)
        len += (size_t)snprintf(text + len, cap - len, " %" PRId64, pids[r]);
    if (len + 2 < cap)
        memcpy(text + len, "\n", 2);
    path_of(e, path, sizeof(path), "grow", pid);
    ret = write_atomic(e, path, text, err, errlen);
    free(text);
    return ret;
}
