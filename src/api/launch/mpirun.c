/*
 * mpirun.c - Open MPI's mpirun (OMPI_COMM_WORLD_*): the id travels through PMIx, by the
 * launcher's own PMIx server; the PMIx exchange here also serves srun --mpi=pmix.
 */
#include "launch.h"
#include "../../core/bootstrap.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#if COLL_HAVE_PMIX
#include <pmix.h>
#endif

static bool present(void)
{
    return coll__launch_env("OMPI_COMM_WORLD_RANK") || coll__launch_env("OMPI_COMM_WORLD_SIZE");
}

static coll_status_t read_env(struct coll_launch *l)
{
    return coll__launch_read("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                             "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", l);
}

static coll_status_t settle(struct coll_launch *l)
{
    coll_status_t st = coll__launch_check_pmix_rank(l, "OMPI_COMM_WORLD_RANK");

    l->pmix = st == COLL_SUCCESS;
    return st;
}

#if COLL_HAVE_PMIX
coll_status_t coll__launch_pmix_exchange(const struct coll_launch *l, struct coll_launch_xchg *x,
                                         coll_unique_id_t *id)
{
    int64_t timeout_ms = x->timeout_ms;
    pmix_proc_t me, all, root;
    pmix_value_t val, *vp = NULL;
    pmix_info_t info[2];
    pmix_status_t rc;
    pmix_key_t key;
    bool collect = true;
    int tmo = (int)COLL_MAX(1, COLL_MIN(timeout_ms / 1000, INT_MAX));
    coll_status_t st = COLL_SUCCESS;

    /* Init and finalize around each exchange: mpirun counts a process that ends inside
     * PMIx as failed, and PMIx counts inits, so an application's own MPI_Init shares it. */
    rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS)
        return coll__launch_fail(
            l->name, COLL_SYSTEM_ERROR, 0, "PMIx_Init failed: %s (PMIX_NAMESPACE='%s')",
            PMIx_Error_string(rc),
            coll__launch_env("PMIX_NAMESPACE") ? coll__launch_env("PMIX_NAMESPACE") : "");
    if ((int)me.rank != l->rank) {
        st = coll__launch_fail(l->name, COLL_INVALID_ARGUMENT, 0,
                               "PMIx says rank %u, the launcher's variables say %d", me.rank,
                               l->rank);
        goto out_fini;
    }
    PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
    PMIX_LOAD_PROCID(&root, me.nspace, 0);
    if (PMIx_Get(&all, PMIX_JOB_SIZE, NULL, 0, &vp) == PMIX_SUCCESS && vp) {
        bool bad = vp->type == PMIX_UINT32 && (int64_t)vp->data.uint32 != l->size;
        uint32_t got = vp->type == PMIX_UINT32 ? vp->data.uint32 : 0;
        PMIX_VALUE_RELEASE(vp);
        vp = NULL;
        if (bad) {
            st = coll__launch_fail(l->name, COLL_INVALID_ARGUMENT, 0,
                                   "PMIx job size %u disagrees with the launcher's "
                                   "size %d",
                                   got, l->size);
            goto out_fini;
        }
    }
    snprintf(key, sizeof(key), "coll.uid.%u", x->seq);
    if (l->rank == 0) {
        COLL_CHECK_GOTO(coll_get_unique_id(id), st, out_fini);
        val.type = PMIX_BYTE_OBJECT;
        val.data.bo.bytes = id->internal;
        val.data.bo.size = COLL_UNIQUE_ID_BYTES;
        rc = PMIx_Put(PMIX_GLOBAL, key, &val);
        if (rc == PMIX_SUCCESS)
            rc = PMIx_Commit();
        if (rc != PMIX_SUCCESS) {
            st = coll__launch_fail(l->name, COLL_SYSTEM_ERROR, 0, "PMIx_Put/Commit: %s",
                                   PMIx_Error_string(rc));
            goto out_fini;
        }
    }
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &tmo, PMIX_INT);
    rc = PMIx_Fence(&all, 1, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc != PMIX_SUCCESS) {
        st = coll__launch_fail(l->name, rc == PMIX_ERR_TIMEOUT ? COLL_TIMEOUT : COLL_REMOTE_ERROR,
                               0, "PMIx_Fence over %d ranks failed: %s (timeout %d s)", l->size,
                               PMIx_Error_string(rc), tmo);
        goto out_fini;
    }
    if (l->rank != 0) {
        uint64_t deadline = coll__now_ns() + (uint64_t)tmo * 1000000000ull;
        bool refresh = false;

        /* After the fence the key is there, but a client that re-initialized may answer
         * from what it cached of rank 0 at an earlier exchange (NOT-FOUND, seen under
         * mpirun at the second comm): ask again with its cache refreshed. */
        for (;;) {
            pmix_info_t gi;
            struct timespec ts = {0, 10 * 1000000L};

            PMIX_INFO_LOAD(&gi, PMIX_GET_REFRESH_CACHE, &refresh, PMIX_BOOL);
            rc = PMIx_Get(&root, key, &gi, 1, &vp);
            PMIX_INFO_DESTRUCT(&gi);
            if (rc != PMIX_ERR_NOT_FOUND || coll__now_ns() >= deadline)
                break;
            refresh = true;
            nanosleep(&ts, NULL);
        }
        if (rc != PMIX_SUCCESS || !vp || vp->type != PMIX_BYTE_OBJECT ||
            vp->data.bo.size != COLL_UNIQUE_ID_BYTES) {
            st = coll__launch_fail(
                l->name, COLL_REMOTE_ERROR, 0, "no unique id from rank 0 through PMIx: %s",
                rc != PMIX_SUCCESS ? PMIx_Error_string(rc) : "wrong type or size");
        } else {
            struct coll_id_info info;
            memcpy(id->internal, vp->data.bo.bytes, COLL_UNIQUE_ID_BYTES);
            if (coll__id_decode(id, &info) != COLL_SUCCESS)
                st = coll__launch_fail(l->name, COLL_REMOTE_ERROR, 0,
                                       "rank 0's PMIx value '%s' is not a unique id", key);
        }
        if (vp)
            PMIX_VALUE_RELEASE(vp);
    }
out_fini:
    PMIx_Finalize(NULL, 0);
    return st;
}
#else
coll_status_t coll__launch_pmix_exchange(const struct coll_launch *l, struct coll_launch_xchg *x,
                                         coll_unique_id_t *id)
{
    (void)x, (void)id;
    return coll__launch_fail(l->name, COLL_INVALID_ARGUMENT, 0,
                             "the unique id travels through PMIx, and this coll was built "
                             "without it (install libpmix-dev and rebuild)");
}
#endif

/* torchrun and mpirun are read together (group 1): either may have started the other. */
const struct coll_launcher coll__launch_mpirun = {
    .name = "mpirun",
    .group = 1,
    .hint = "OMPI_COMM_WORLD_RANK from mpirun",
    .present = present,
    .read = read_env,
    .settle = settle,
    .exchange = coll__launch_pmix_exchange,
};
