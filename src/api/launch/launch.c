/*
 * launch.c - coll_comm_init_env: rank, size and the unique id from the launcher that
 * started this process, through the table of launchers below (one file and one row each).
 *
 * The rank that makes the unique id (rank 0) must hand it to the others, and the id holds
 * the 128-bit secret that authenticates every connection, so the channel matters:
 *   collrun   COLL_UNIQUE_ID in the environment (collrun made it);
 *   torchrun  the store torchrun's agent already serves on MASTER_ADDR:MASTER_PORT, as
 *             PyTorch itself passes NCCL's id (rank 0 sets a key, the others wait for it);
 *             without an agent store (TORCHELASTIC_USE_AGENT_STORE != True) rank 0 serves
 *             the one key there itself, as torch.distributed's env:// rank 0 would;
 *   mpirun    PMIx put/commit/fence/get through the launcher's own PMIx server;
 *   srun      PMIx under --mpi=pmix; otherwise a file only this user can read in a
 *             directory all hosts share (COLL_ID_DIR, default $HOME/.coll).
 * The secret is always fresh from getrandom (coll_get_unique_id), never derived from
 * anything a stranger can read in the environment.
 */
#include "launch.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAUNCH_DEFAULT_TIMEOUT_MS 300000

/* In the order detection tries them (within a group, the first present one is used). */
static const struct coll_launcher *const launchers[] = {
    &coll__launch_collrun,
    &coll__launch_torchrun,
    &coll__launch_mpirun,
    &coll__launch_srun,
};
#define NLAUNCHERS (sizeof(launchers) / sizeof(launchers[0]))

/* Every coll_comm_init_env of a process gets the next number, and every rank makes the same
 * calls in the same order, so the number tells one exchange from the next in one store. */
static atomic_uint launch_seq;

/* ---- environment helpers ------------------------------------------------------------- */

const char *coll__launch_env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

coll_status_t coll__launch_fail(const char *launcher, coll_status_t st, int err, const char *fmt,
                                ...)
{
    char msg[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (err)
        return coll__sys_error(NULL, err, "%s environment: %s", launcher, msg);
    return coll__error(NULL, st, "%s environment: %s", launcher, msg);
}

/* A variable that must hold an integer in [lo, hi]: its value in *out_p, or an error
 * naming it. */
static coll_status_t env_int(const char *launcher, const char *name, int lo, int hi, int *out_p)
{
    const char *v = coll__launch_env(name);
    char *end;
    long x;

    if (!v)
        return coll__launch_fail(launcher, COLL_INVALID_ARGUMENT, 0, "%s is not set", name);
    errno = 0;
    x = strtol(v, &end, 10);
    if (errno || end == v || *end != '\0')
        return coll__launch_fail(launcher, COLL_INVALID_ARGUMENT, 0, "%s='%s' is not an integer",
                                 name, v);
    if (x < lo || x > hi)
        return coll__launch_fail(launcher, COLL_INVALID_ARGUMENT, 0,
                                 "%s=%ld is out of range [%d, %d]", name, x, lo, hi);
    *out_p = (int)x;
    return COLL_SUCCESS;
}

static int64_t launch_timeout_ms(void)
{
    const char *v = coll__launch_env("COLL_BOOTSTRAP_TIMEOUT_MS");
    char *end;
    long long x;

    if (!v)
        return LAUNCH_DEFAULT_TIMEOUT_MS;
    errno = 0;
    x = strtoll(v, &end, 10);
    if (errno || *end != '\0' || x <= 0 || x > INT64_MAX / 1000000)
        return LAUNCH_DEFAULT_TIMEOUT_MS; /* the comm's config load names the bad value */
    return x;
}

int coll__launch_ms_left(uint64_t deadline_ns)
{
    uint64_t now = coll__now_ns();
    uint64_t ms;

    if (now >= deadline_ns)
        return 0;
    ms = (deadline_ns - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* ---- detection and cross-checks ------------------------------------------------------ */

coll_status_t coll__launch_read(const char *launcher, const char *rank_v, const char *size_v,
                                const char *lrank_v, const char *lsize_v, struct coll_launch *l)
{
    coll_status_t st;

    memset(l, 0, sizeof(*l));
    l->name = launcher;
    l->rank_var = rank_v;
    l->size_var = size_v;
    l->local_rank = l->local_size = -1;
    st = env_int(launcher, size_v, 1, INT_MAX, &l->size);
    if (st != COLL_SUCCESS)
        return st;
    st = env_int(launcher, rank_v, 0, INT_MAX, &l->rank);
    if (st != COLL_SUCCESS)
        return st;
    if (l->rank >= l->size)
        return coll__launch_fail(launcher, COLL_INVALID_ARGUMENT, 0,
                                 "%s=%d is out of range for %s=%d", rank_v, l->rank, size_v,
                                 l->size);
    if (lsize_v && coll__launch_env(lsize_v)) {
        st = env_int(launcher, lsize_v, 1, l->size, &l->local_size);
        if (st != COLL_SUCCESS)
            return st;
    }
    if (lrank_v && coll__launch_env(lrank_v)) {
        st = env_int(launcher, lrank_v, 0, l->size - 1, &l->local_rank);
        if (st != COLL_SUCCESS)
            return st;
        if (l->local_size > 0 && l->local_rank >= l->local_size)
            return coll__launch_fail(launcher, COLL_INVALID_ARGUMENT, 0,
                                     "%s=%d is out of range for %s=%d", lrank_v, l->local_rank,
                                     lsize_v, l->local_size);
    }
    return COLL_SUCCESS;
}

coll_status_t coll__launch_check_pmix_rank(const struct coll_launch *l, const char *rank_var)
{
    const char *v = coll__launch_env("PMIX_RANK");
    char *end;
    long x;

    if (!v)
        return COLL_SUCCESS;
    errno = 0;
    x = strtol(v, &end, 10);
    if (errno || end == v || *end != '\0' || x != l->rank)
        return coll__launch_fail(l->name, COLL_INVALID_ARGUMENT, 0,
                                 "PMIX_RANK='%s' disagrees with %s=%d", v, rank_var, l->rank);
    return COLL_SUCCESS;
}

static const struct coll_launcher *find(const char *name)
{
    for (size_t i = 0; i < NLAUNCHERS; i++)
        if (!strcmp(launchers[i]->name, name))
            return launchers[i];
    return NULL;
}

bool coll__launcher_present(void)
{
    if (coll__launch_env("COLL_LAUNCHER"))
        return true;
    for (size_t i = 0; i < NLAUNCHERS; i++)
        if (launchers[i]->present())
            return true;
    return false;
}

/* The launchers of the first group with one present: each read, and all of them agreeing
 * on rank and size (the first one's answer is taken). */
static coll_status_t detect_group(int group, struct coll_launch *l_p, bool *found_p)
{
    const struct coll_launcher *first = NULL;
    struct coll_launch l, mine;
    coll_status_t st;

    for (size_t i = 0; i < NLAUNCHERS; i++) {
        if (launchers[i]->group != group || !launchers[i]->present())
            continue;
        st = launchers[i]->read(first ? &l : &mine);
        if (st != COLL_SUCCESS)
            return st;
        if (!first) {
            first = launchers[i];
            continue;
        }
        if (l.rank != mine.rank || l.size != mine.size)
            return coll__error(NULL, COLL_INVALID_ARGUMENT,
                               "launcher environments disagree: %s's %s=%d %s=%d, %s's %s=%d "
                               "%s=%d (set COLL_LAUNCHER to choose one)",
                               mine.name, mine.rank_var, mine.rank, mine.size_var, mine.size,
                               l.name, l.rank_var, l.rank, l.size_var, l.size);
    }
    *found_p = first != NULL;
    if (!first)
        return COLL_SUCCESS;
    *l_p = mine;
    return first->settle ? first->settle(l_p) : COLL_SUCCESS;
}

coll_status_t coll__launcher_detect(struct coll_launch *l_p)
{
    const char *forced = coll__launch_env("COLL_LAUNCHER");
    char names[128] = "", hints[512] = "";
    int maxgroup = 0;

    if (forced) {
        const struct coll_launcher *row = find(forced);
        coll_status_t st;
        if (row && (st = row->read(l_p)) != COLL_SUCCESS)
            return st;
        if (row)
            return row->settle ? row->settle(l_p) : COLL_SUCCESS;
    }
    for (size_t i = 0; i < NLAUNCHERS; i++) {
        size_t n = strlen(names), h = strlen(hints);
        snprintf(names + n, sizeof(names) - n, "%s%s", i ? ", " : "", launchers[i]->name);
        snprintf(hints + h, sizeof(hints) - h, "%s%s", i ? ", " : "", launchers[i]->hint);
        maxgroup = COLL_MAX(maxgroup, launchers[i]->group);
    }
    if (forced)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "COLL_LAUNCHER='%s' is not one of %s",
                           forced, names);
    for (int g = 0; g <= maxgroup; g++) {
        bool found = false;
        coll_status_t st = detect_group(g, l_p, &found);
        if (st != COLL_SUCCESS || found)
            return st;
    }
    return coll__error(NULL, COLL_INVALID_ARGUMENT,
                       "no launcher environment found (%s): start the program under one of "
                       "them, or call coll_comm_init with an id",
                       hints);
}

/* ---- coll_comm_init_env -------------------------------------------------------------- */

coll_status_t coll__launcher_comm_init(coll_comm_t **comm_p)
{
    struct coll_launch_xchg x = {.seq = atomic_fetch_add(&launch_seq, 1),
                                 .timeout_ms = launch_timeout_ms()};
    const struct coll_launcher *row;
    struct coll_launch l;
    coll_unique_id_t id;
    coll_status_t st;

    st = coll__launcher_detect(&l);
    if (st != COLL_SUCCESS)
        return st;
    COLL_INFO(COLL_SUB_INIT, "launcher %s: rank %d of %d, local rank %d of %d%s", l.name, l.rank,
              l.size, l.local_rank, l.local_size, l.pmix ? ", id through PMIx" : "");
    row = find(l.name);
    st = row->exchange(&l, &x, &id);
    if (st == COLL_SUCCESS)
        st = coll_comm_init(comm_p, l.size, &id, l.rank);
    /* every rank joined (or the init failed): nobody needs the id's channel any more */
    if (row->done)
        row->done(&l, &x, st == COLL_SUCCESS);
    return st;
}
