/*
 * srun.c - Slurm's srun (SLURM_PROCID, SLURM_NTASKS): the id through PMIx under
 * --mpi=pmix (mpirun.c's exchange), otherwise through a private file in a directory all
 * hosts share.
 */
#include "launch.h"
#include "../../base/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* SLURM_JOB_ID alone is a batch script or salloc shell, not a task of a step. */
static bool present(void)
{
    return coll__launch_env("SLURM_PROCID") != NULL;
}

static coll_status_t read_env(struct coll_launch *l)
{
    return coll__launch_read("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, l);
}

static coll_status_t settle(struct coll_launch *l)
{
    coll_status_t st;

    if (!coll__launch_env("PMIX_RANK"))
        return COLL_SUCCESS;
    st = coll__launch_check_pmix_rank(l, "SLURM_PROCID");
    l->pmix = st == COLL_SUCCESS;
    return st;
}

/* Under srun without PMIx the only channel all tasks share with nobody else is the file
 * system: rank 0 writes the id to a file of mode 0600 in a directory of mode 0700, the
 * others read it once it appears (rename makes it appear whole) and refuse a file that is
 * not this user's or that others could read. */
static coll_status_t file_path(char *path, size_t n, unsigned seq, char *dir, size_t dn)
{
    const char *d = coll__launch_env("COLL_ID_DIR"), *home = coll__launch_env("HOME");
    const char *job = coll__launch_env("SLURM_JOB_ID"), *step = coll__launch_env("SLURM_STEP_ID");

    if (!step)
        step = coll__launch_env("SLURM_STEPID");
    if (!job || !step)
        return coll__launch_fail("srun", COLL_INVALID_ARGUMENT, 0, "%s is not set",
                                 !job ? "SLURM_JOB_ID" : "SLURM_STEP_ID");
    if (d)
        snprintf(dir, dn, "%s", d);
    else if (home)
        snprintf(dir, dn, "%s/.coll", home);
    else
        return coll__launch_fail("srun", COLL_INVALID_ARGUMENT, 0,
                                 "neither COLL_ID_DIR nor HOME is set (a directory "
                                 "all hosts share, for the unique id; or run srun --mpi=pmix)");
    if ((size_t)snprintf(path, n, "%s/slurm-%s.%s-%u.id", dir, job, step, seq) >= n)
        return coll__launch_fail("srun", COLL_INVALID_ARGUMENT, 0,
                                 "COLL_ID_DIR is too "
                                 "long");
    return COLL_SUCCESS;
}

bool coll__slurm_first_host(const char *list, char *out, size_t n)
{
    size_t o = 0;
    const char *p = list;

    if (!list || !*list || n == 0)
        return false;
    while (*p && *p != ',' && *p != '[') {
        if (o + 1 >= n)
            return false;
        out[o++] = *p++;
    }
    if (*p == '[') { /* the first number of the first range, zero padding kept */
        p++;
        if (*p < '0' || *p > '9')
            return false;
        while (*p >= '0' && *p <= '9') {
            if (o + 1 >= n)
                return false;
            out[o++] = *p++;
        }
        if (*p != '-' && *p != ',' && *p != ']')
            return false;
        if (!strchr(p, ']'))
            return false;
    }
    out[o] = '\0';
    return o > 0;
}

static coll_status_t file_write(const char *dir, const char *path, const coll_unique_id_t *id)
{
    char tmp[PATH_MAX + 16], hex[COLL_UNIQUE_ID_STRLEN];
    coll_status_t st;
    ssize_t w;
    int fd;

    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return coll__launch_fail("srun", COLL_SYSTEM_ERROR, errno ? errno : EIO,
                                 "cannot create COLL_ID_DIR '%s'", dir);
    COLL_CHECK_GOTO(coll_unique_id_to_string(id, hex, sizeof(hex)), st, out);
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return coll__launch_fail("srun", COLL_SYSTEM_ERROR, errno ? errno : EIO,
                                 "cannot create '%s'", tmp);
    w = write(fd, hex, 2 * COLL_UNIQUE_ID_BYTES);
    if (close(fd) < 0 || w != 2 * COLL_UNIQUE_ID_BYTES || rename(tmp, path) < 0) {
        st = coll__launch_fail("srun", COLL_SYSTEM_ERROR, errno ? errno : EIO, "cannot write '%s'",
                               path);
        unlink(tmp);
        return st;
    }
    st = COLL_SUCCESS;
out:
    return st;
}

static coll_status_t file_read(const char *path, coll_unique_id_t *id, int64_t timeout_ms)
{
    uint64_t deadline = coll__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    char hex[COLL_UNIQUE_ID_STRLEN + 1], host[256] = "?";
    unsigned backoff_ms = 10;
    struct stat sb;

    for (;;) {
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t r;
            if (fstat(fd, &sb) < 0 || sb.st_uid != getuid() || (sb.st_mode & 077)) {
                close(fd);
                return coll__launch_fail("srun", COLL_INVALID_ARGUMENT, 0,
                                         "'%s' is not this user's or others may "
                                         "read it: refusing the unique id in it",
                                         path);
            }
            r = read(fd, hex, 2 * COLL_UNIQUE_ID_BYTES);
            close(fd);
            if (r != 2 * COLL_UNIQUE_ID_BYTES)
                return coll__launch_fail("srun", COLL_INVALID_ARGUMENT, 0,
                                         "'%s' holds no unique id", path);
            hex[2 * COLL_UNIQUE_ID_BYTES] = '\0';
            return coll_unique_id_from_string(hex, id);
        }
        if (coll__launch_ms_left(deadline) == 0)
            break;
        coll__sys.poll(NULL, 0, COLL_MIN((int)backoff_ms, coll__launch_ms_left(deadline)));
        backoff_ms = COLL_MIN(backoff_ms * 2, 200u);
    }
    coll__slurm_first_host(coll__launch_env("SLURM_STEP_NODELIST")
                               ? coll__launch_env("SLURM_STEP_NODELIST")
                               : coll__launch_env("SLURM_JOB_NODELIST"),
                           host, sizeof(host));
    return coll__launch_fail("srun", COLL_TIMEOUT, 0,
                             "rank 0 (on host '%s', the first of "
                             "SLURM_STEP_NODELIST) wrote no unique id to '%s' within %lld ms: "
                             "COLL_ID_DIR must be a directory all hosts share, or run srun "
                             "--mpi=pmix",
                             host, path, (long long)timeout_ms);
}

static coll_status_t exchange(const struct coll_launch *l, struct coll_launch_xchg *x,
                              coll_unique_id_t *id)
{
    char path[PATH_MAX], dir[PATH_MAX];
    coll_status_t st;

    if (l->pmix)
        return coll__launch_pmix_exchange(l, x, id);
    st = file_path(path, sizeof(path), x->seq, dir, sizeof(dir));
    if (st != COLL_SUCCESS)
        return st;
    if (l->rank != 0)
        return file_read(path, id, x->timeout_ms);
    st = coll_get_unique_id(id);
    if (st == COLL_SUCCESS)
        st = file_write(dir, path, id);
    if (st == COLL_SUCCESS)
        x->state = strdup(path); /* rank 0 removes the file once every rank joined */
    return st;
}

static void done(const struct coll_launch *l, struct coll_launch_xchg *x, bool joined)
{
    (void)l, (void)joined;
    if (x->state)
        unlink(x->state);
    free(x->state);
}

const struct coll_launcher coll__launch_srun = {
    .name = "srun",
    .group = 2,
    .hint = "SLURM_PROCID from srun",
    .present = present,
    .read = read_env,
    .settle = settle,
    .exchange = exchange,
    .done = done,
};
