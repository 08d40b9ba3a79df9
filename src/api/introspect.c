/*
 * introspect.c - the tools' view of the library (introspect.h): each answer is read from
 * the part of the library that decides it, and handed out as plain structs.
 *
 * A call on device buffers is asked as the stream-ordered call it is (the stream path's).
 * Ranks on paper cannot go to the chooser (it answers for the comm it is given, and a comm
 * that is not there has no flat path): they go to the general path's selector instead, with
 * the chooser's own view of the call (coll__call_args).
 */
#include "introspect.h"

#include "../core/internal.h"
#include "../core/topo.h"
#include "../cuda/cuda.h"
#include "../path/path.h"
#include "../reduce/reduce.h"
#include "../transport/transport.h"
#include "launcher.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- 1 how a call runs ------------------------------------------------------------------ */

static struct coll_call call_of(coll_comm_t *comm, const struct coll_ix_call *c)
{
    struct coll_call call = {
        .comm = comm,
        .coll = c->coll,
        .count = c->count,
        .dtype = c->dtype,
        .op = c->op,
        .root = c->root,
        .peer = -1,
    };
    return call;
}

/* The arguments the general path would build for c (for nranks ranks on paper: c's hosts,
 * or one host; rank 0). */
static void args_of(coll_comm_t *comm, const struct coll_ix_call *c, int nranks,
                    struct coll_algo_args *a)
{
    struct coll_call call = call_of(comm, c);

    coll__call_args(&call, a);
    if (nranks != comm->nranks) {
        a->nranks = nranks;
        a->rank = 0;
        a->hosts = c->hosts && c->nhosts > 1 ? c->hosts : NULL;
        a->nhosts = a->hosts ? c->nhosts : 0;
    }
}

/* The chosen path's part of the chooser's reasons (with the prices), or a default. */
static void path_reason(const struct coll_choice *ch, char *out, size_t n)
{
    const char *seg = ch->why + ch->reason_at;

    while (*seg == ' ')
        seg++;
    if (*seg && *seg != '[')
        snprintf(out, n, "%s", seg);
    else if (ch->path == &coll__path_flat)
        snprintf(out, n, "flat path (shared segment, one host)");
    else
        snprintf(out, n, "the %s path takes it", ch->path->name);
}

coll_status_t coll__ix_choose(coll_comm_t *comm, const struct coll_ix_call *c,
                              struct coll_ix_pick *out)
{
    int nranks = c->nranks > 0 ? c->nranks : comm->nranks;
    struct coll_algo_args a;
    const struct coll_algo *algo = NULL;
    coll_status_t st;

    memset(out, 0, sizeof(*out));
    out->flat_s = NAN;
    out->path_s = NAN;
    if (c->coll == COLL_COLL_SENDRECV) {
        out->path = coll__path_sched.name;
        out->algo = "p2p";
        snprintf(out->why, sizeof(out->why), "point to point");
        return COLL_SUCCESS;
    }
    if (nranks == comm->nranks) {
        struct coll_call call = call_of(comm, c);
        struct coll_choice ch;

        if (c->device)
            call.form = COLL_FORM_STREAM;
        st = coll__choose(comm, &call, true, &ch);
        if (st != COLL_SUCCESS)
            return st;
        out->path = ch.path->name;
        if (ch.flat_seconds >= 0)
            out->flat_s = ch.flat_seconds;
        if (ch.path_seconds >= 0)
            out->path_s = ch.path_seconds;
        path_reason(&ch, out->why, sizeof(out->why));
        /* asked in full, the chooser also names what the general path would run where a
         * path that runs calls by itself, or takes them over, takes this one: that path is
         * what runs it */
        if (ch.path->run || ch.path->submit || !ch.algo) {
            out->algo = ch.path->name;
        } else {
            out->algo = ch.algo->name;
            out->chunk_bytes = ch.chunk_count * coll__dtype_size(c->dtype);
        }
        return COLL_SUCCESS;
    }
    args_of(comm, c, nranks, &a);
    st = coll__select(comm, &a, &algo, out->why, sizeof(out->why));
    if (st != COLL_SUCCESS)
        return st;
    if (!algo)
        return coll__error(comm, COLL_INTERNAL_ERROR, "the selector picked nothing for %s",
                           coll__coll_name(c->coll));
    out->path = coll__path_sched.name;
    out->algo = algo->name;
    out->chunk_bytes = a.chunk_count * a.elem_size;
    return COLL_SUCCESS;
}

coll_status_t coll__ix_price(coll_comm_t *comm, const struct coll_ix_call *c,
                             const struct coll_ix_pick *pick, const struct coll_ix_model *m,
                             struct coll_ix_price *out)
{
    static const size_t select_chunks[] = COLL_COST_SELECT_CHUNKS;
    int nranks = c->nranks > 0 ? c->nranks : comm->nranks;
    const struct coll_algo *algo = pick->algo ? coll__algo_find(pick->algo) : NULL;
    size_t forced_chunk = (size_t)comm->cfg.chunk_bytes;
    bool exact = !strcmp(comm->cfg.select, "exact");
    struct coll_cost_query q = {
        .coll = c->coll,
        .nranks = nranks,
        .root = c->root,
        .count = c->count,
        .dtype = c->dtype,
        .hosts = m->hosts,
        .nhosts = m->nhosts,
        .chunk_bytes = select_chunks,
        .nchunk_bytes = COLL_ARRAY_SIZE(select_chunks),
        .closed = !exact,
    };
    struct coll_algo_args a;
    coll_status_t st;

    out->est_s = NAN;
    out->nranked = 0;
    if (c->coll == COLL_COLL_SENDRECV || nranks < 2)
        return COLL_SUCCESS;
    args_of(comm, c, nranks, &a);
    a.hosts = m->hosts;
    a.nhosts = m->nhosts;
    if (pick->path && !strcmp(pick->path, coll__path_flat.name))
        out->est_s = pick->flat_s; /* the flat row's price: the path runs no schedule */
    if (isfinite(pick->path_s))
        out->est_s = pick->path_s; /* the stream or quant path's own row */
    if (algo && pick->chunk_bytes) {
        a.chunk_count = pick->chunk_bytes / a.elem_size ? pick->chunk_bytes / a.elem_size : 1;
        st = exact ? coll__cost_predict(m->params, &m->links, algo, &a, &out->est_s, NULL)
                   : coll__cost_closed(m->params, &m->links, algo, &a, &out->est_s);
        if (st != COLL_SUCCESS)
            out->est_s = NAN;
    }
    /* COLL_CHUNK_BYTES given: the selector tries that chunk alone, and so does the ranking */
    if (comm->cfg.chunk_forced) {
        q.chunk_bytes = &forced_chunk;
        q.nchunk_bytes = 1;
    }
    return coll__cost_rank_algos(m->params, &m->links, &q, out->ranked, COLL_IX_RANKED_MAX,
                                 &out->nranked);
}

/* ---- 2 settings ------------------------------------------------------------------------- */

bool coll__ix_param(const coll_comm_t *comm, size_t i, struct coll_ix_param *out)
{
    const struct coll_param *p;

    if (i >= coll__nparams)
        return false;
    p = &coll__params[i];
    *out = (struct coll_ix_param){
        .name = p->name,
        .defval = p->defval,
        .help = p->help,
        .env = getenv(p->name),
    };
    if (comm && p->offset != SIZE_MAX) {
        const char *field = (const char *)&comm->cfg + p->offset;
        if (p->type == COLL_PARAM_STRING) {
            snprintf(out->value, sizeof(out->value), "%.*s", (int)p->size, field);
        } else {
            int64_t v;
            memcpy(&v, field, sizeof(v));
            snprintf(out->value, sizeof(out->value), "%lld", (long long)v);
        }
    }
    return true;
}

/* ---- 3 the communicator ----------------------------------------------------------------- */

/* The file coll__select_init read the comm's model from, as it finds it: the one named, or
 * the default place when a file there parses. */
static void model_file(const struct coll_comm *comm, char *buf, size_t n)
{
    struct coll_cost_params p;

    if (!coll__ix_calib_path(comm->cfg.calib_file, buf, n) || access(buf, R_OK) != 0 ||
        (!comm->cfg.calib_file[0] && coll__cost_params_load(&p, buf) != COLL_SUCCESS))
        buf[0] = '\0';
}

coll_status_t coll__ix_comm(coll_comm_t *comm, struct coll_ix_comm *out)
{
    memset(out, 0, sizeof(*out));
    out->peers = calloc((size_t)comm->nranks, sizeof(*out->peers));
    if (!out->peers)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for %d ranks", comm->nranks);
    out->rank = comm->rank;
    out->nranks = comm->nranks;
    out->nhosts = comm->nhosts;
    coll__comm_transports(comm, out->transports, sizeof(out->transports));
    out->flat = comm->flat_state;
    snprintf(out->select, sizeof(out->select), "%s", comm->cfg.select);
    snprintf(out->algo, sizeof(out->algo), "%s", comm->cfg.algo);
    out->chunk_bytes = comm->cfg.chunk_bytes;
    out->chunk_forced = comm->cfg.chunk_forced;
    model_file(comm, out->calib_file, sizeof(out->calib_file));
    if (comm->cost)
        out->params = *comm->cost;
    else
        coll__cost_params_default(&out->params);
    out->model.params = &out->params;
    out->model.links = coll__select_links(comm);
    if (comm->nhosts > 1) {
        out->model.hosts = comm->hosts;
        out->model.nhosts = comm->nhosts;
    }
    for (int r = 0; r < comm->nranks; r++) {
        struct coll_ix_peer *p = &out->peers[r];
        p->host = comm->hosts ? comm->hosts[r] : 0;
        p->pid = comm->peers ? comm->peers[r].pid : 0;
        if (comm->peers)
            snprintf(p->hostname, sizeof(p->hostname), "%s", comm->peers[r].hostname);
        p->transport = r == comm->rank                     ? "self"
                       : comm->peer_tp && comm->peer_tp[r] ? comm->peer_tp[r]->name
                                                           : "none";
    }
    return COLL_SUCCESS;
}

void coll__ix_comm_free(struct coll_ix_comm *d)
{
    free(d->peers);
    d->peers = NULL;
}

void coll__ix_topo_print(FILE *f)
{
    static struct coll_topo t; /* large: not on the stack */
    const char *v = getenv("COLL_TOPO");

    coll__topo_discover(&t, !(v && !strcmp(v, "sysfs")));
    coll__topo_print(&t, f);
}

/* ---- 4 --calibrate ---------------------------------------------------------------------- */

bool coll__ix_calib_path(const char *named, char *buf, size_t n)
{
    /* the places coll__select_init (src/path/select.c) looks, in its order */
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");

    if (named && *named)
        return (size_t)snprintf(buf, n, "%s", named) < n;
    if (xdg && *xdg)
        return (size_t)snprintf(buf, n, "%s/coll/calib.txt", xdg) < n;
    if (home && *home)
        return (size_t)snprintf(buf, n, "%s/.cache/coll/calib.txt", home) < n;
    return false;
}

_Static_assert((int)COLL_IX_FLAT_FIT_ALPHA == (int)COLL_FLAT_FIT_ALPHA &&
                   (int)COLL_IX_FLAT_FIT_YIELD == (int)COLL_FLAT_FIT_YIELD &&
                   (int)COLL_IX_FLAT_FIT_BETA == (int)COLL_FLAT_FIT_BETA &&
                   (int)COLL_IX_FLAT_FIT_SLICED == (int)COLL_FLAT_FIT_SLICED,
               "introspect.h says what path.h fits");

coll_status_t coll__ix_calibrate_flat(coll_comm_t *comm, struct coll_cost_params *p,
                                      unsigned *fitted_p)
{
    return coll__flat_calibrate(comm, p, fitted_p);
}

void coll__ix_reduce(void *dst, const void *a, const void *b, size_t count, coll_dtype_t dt,
                     coll_op_t op)
{
    coll__reduce(dst, a, b, count, dt, op);
}

_Static_assert(sizeof(((struct coll_ix_forced *)0)->algo) ==
                   sizeof(((struct coll_config *)0)->algo),
               "coll_ix_forced keeps COLL_ALGO whole");

void coll__ix_force(coll_comm_t *comm, const char *algo, int64_t chunk_bytes,
                    struct coll_ix_forced *was)
{
    memcpy(was->algo, comm->cfg.algo, sizeof(was->algo));
    was->chunk_bytes = comm->cfg.chunk_bytes;
    snprintf(comm->cfg.algo, sizeof(comm->cfg.algo), "%s", algo);
    comm->cfg.chunk_bytes = chunk_bytes;
}

void coll__ix_unforce(coll_comm_t *comm, const struct coll_ix_forced *was)
{
    memcpy(comm->cfg.algo, was->algo, sizeof(comm->cfg.algo));
    comm->cfg.chunk_bytes = was->chunk_bytes;
}

/* ---- 5 device memory and launchers ------------------------------------------------------ */

static struct coll_ix_cuda cuda_table;
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;

static void cuda_fill(void)
{
    const struct coll_cudart *rt = coll__cudart();

    cuda_table = (struct coll_ix_cuda){
        .GetDeviceCount = rt->GetDeviceCount,
        .SetDevice = rt->SetDevice,
        .Malloc = rt->Malloc,
        .Free = rt->Free,
        .Memcpy = rt->Memcpy,
        .Memset = rt->Memset,
        .StreamCreateWithFlags = rt->StreamCreateWithFlags,
        .StreamSynchronize = rt->StreamSynchronize,
        .StreamDestroy = rt->StreamDestroy,
    };
}

const struct coll_ix_cuda *coll__ix_cuda(const char **why_p)
{
    *why_p = NULL;
    if (coll__cuda_state(why_p) != COLL_CUDA_READY || !coll__cudart()) {
        if (!*why_p)
            *why_p = "unknown reason";
        return NULL;
    }
    pthread_once(&cuda_once, cuda_fill);
    return &cuda_table;
}

void coll__ix_cuda_error_text(int err, char *buf, size_t n)
{
    coll__cuda_error_text(err, buf, n);
}

bool coll__ix_launched(void)
{
    return coll__launcher_present(); /* collrun, torchrun, mpirun or srun */
}

int coll__ix_local_rank(void)
{
    struct coll_launch l;

    if (!coll__launcher_present() || coll__launcher_detect(&l) != COLL_SUCCESS)
        return 0;
    return l.local_rank >= 0 ? l.local_rank : l.rank;
}
