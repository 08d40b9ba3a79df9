/*
 * explain.c - the modes that read the library's tables: the algorithm the selector
 * picks (records, --explain), --explain itself, --help-env and --topo.
 */
#include "collbench.h"

/* The arguments coll's selector sees for this call (as src/api/api.c builds them). */
static struct coll_algo_args algo_args(const struct bench *b, const struct rowspec *rs, int nranks)
{
    const struct coll_comm *comm = b->comm;
    struct coll_algo_args a = {
        .coll = (enum coll_coll)colls[b->o.coll].internal,
        .nranks = nranks,
        .rank = 0,
        .root = rs->root < 0 ? 0 : rs->root,
        .count = rs->l.param,
        .dtype = b->o.coll == B_BARRIER ? COLL_UINT8 : rs->dt,
        .elem_size = b->o.coll == B_BARRIER ? 1 : dtypes[rs->dt].size,
    };

    a.chunk_count = (size_t)comm->cfg.chunk_bytes / a.elem_size;
    if (a.chunk_count == 0)
        a.chunk_count = 1;
    return a;
}

/* The algorithm (and chunk) coll picks for this call, by the same selector the call goes
 * through; "?" when it refuses (its message is in the comm's last error). */
const char *algo_for(struct bench *b, const struct rowspec *rs, int nranks,
                            size_t *chunk_bytes_p, char *why, size_t whylen)
{
    struct coll_algo_args a = algo_args(b, rs, nranks);
    const struct coll_algo *algo = NULL;

    *chunk_bytes_p = 0;
    why[0] = '\0';
    if (b->o.coll == B_SENDRECV) {
        snprintf(why, whylen, "point to point");
        return "p2p";
    }
    /* what the calls of this run take on this comm, as the library's chooser says (host
     * buffers: device ones stage through the stream path) */
    if (!b->o.memtype_cuda && nranks == b->comm->nranks) {
        struct coll_call c = {.comm = b->comm, .coll = a.coll, .count = a.count,
                              .dtype = a.dtype, .op = COLL_SUM, .root = a.root, .peer = -1};
        struct coll_choice ch;
        if (coll__choose(b->comm, &c, false, &ch) == COLL_SUCCESS && ch.path->run) {
            snprintf(why, whylen, "%s path (shared segment, one host)", ch.path->name);
            return ch.path->name;
        }
    }
    if (coll__select(b->comm, &a, &algo, why, whylen) != COLL_SUCCESS || !algo)
        return "?";
    *chunk_bytes_p = a.chunk_count * a.elem_size;
    return algo->name;
}

/* --------------------------------------------------------------------------------------
 * Modes that need no communicator: --help-env, --version, --compare; and --np, --plot.
 */

int help_env(void)
{
    printf("COLL_* environment variables (read once per communicator, at init):\n\n");
    for (size_t i = 0; i < coll__nparams; i++) {
        const struct coll_param *p = &coll__params[i];
        const char *cur = getenv(p->name);
        printf("%s\n    default: %s%s%s%s\n    %s\n", p->name, *p->defval ? p->defval : "(empty)",
               cur ? "   set: '" : "", cur ? cur : "", cur ? "'" : "", p->help);
    }
    printf("\nSet by the launcher (collrun), read by coll_comm_init_env: COLL_UNIQUE_ID, "
           "COLL_RANK,\nCOLL_SIZE, COLL_LOCAL_RANK, COLL_LOCAL_SIZE.\n");
    return 0;
}


/* --topo: what this host has; under a launcher, rank 0 also lists every host's ranks. */
int print_topo(void)
{
    const char *v = getenv("COLL_TOPO");
    struct coll_topo t;
    coll_comm_t *comm = NULL;
    coll_status_t st;
    int *host, nhosts;

    if (!launched()) {
        coll__topo_discover(&t, !(v && !strcmp(v, "sysfs")));
        coll__topo_print(&t, stdout);
        return 0;
    }
    st = comm_open(&comm);
    if (st != COLL_SUCCESS) {
        fprintf(stderr, "%s: --topo: %s\n", prog_name, coll_last_error(NULL));
        return 1;
    }
    host = malloc((size_t)comm->nranks * sizeof(*host));
    if (comm->rank == 0 && host) {
        coll__topo_discover(&t, !(v && !strcmp(v, "sysfs")));
        coll__topo_print(&t, stdout);
        nhosts = coll__topo_group_hosts(comm->peers, comm->nranks, host);
        printf("%d ranks on %d hosts\n", comm->nranks, nhosts);
        for (int h = 0; h < nhosts; h++) {
            const char *name = "";
            printf("  host %d", h);
            for (int r = 0; r < comm->nranks; r++)
                if (host[r] == h && !*name)
                    name = comm->peers[r].hostname;
            printf(" %-16s ranks", name);
            for (int r = 0; r < comm->nranks; r++)
                if (host[r] == h)
                    printf(" %d", r);
            printf("\n");
        }
        fflush(stdout);
    }
    free(host);
    /* nobody leaves before rank 0 has read the table: the comm would end under it */
    st = coll_barrier(comm);
    coll_comm_destroy(comm);
    return st == COLL_SUCCESS ? 0 : 1;
}

/* --------------------------------------------------------------------------------------
 * --explain and --calibrate: the cost model of src/algo/cost.h, read and fed.
 */

/* Where the selector reads its calibration (src/algo/select.c): named (COLL_CALIB_FILE)
 * when not empty, else $XDG_CACHE_HOME/coll/calib.txt, else ~/.cache/coll/calib.txt. */
bool calib_path(const char *named, char *buf, size_t n)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");

    if (named && *named)
        return (size_t)snprintf(buf, n, "%s", named) < n;
    if (xdg && *xdg)
        return (size_t)snprintf(buf, n, "%s/coll/calib.txt", xdg) < n;
    if (home && *home)
        return (size_t)snprintf(buf, n, "%s/.cache/coll/calib.txt", home) < n;
    return false;
}

struct explain_ctx {
    const struct coll_cost_params *params;
    int nranks;
    struct coll_cost_links links;
    const int32_t *hosts; /* the comm's hosts when it is the comm explained, else NULL */
    int32_t nhosts;
};

static int explain_row(struct bench *b, const struct rowspec *rs, void *arg)
{
    const struct explain_ctx *x = arg;
    struct coll_algo_args a = algo_args(b, rs, x->nranks);
    struct coll_cost_query q = {
        .coll = a.coll,
        .nranks = a.nranks,
        .root = a.root,
        .count = a.count,
        .dtype = a.dtype,
        .hosts = x->hosts,
        .nhosts = x->nhosts,
    };
    size_t forced_chunk = (size_t)b->comm->cfg.chunk_bytes;
    /* COLL_CHUNK_BYTES given: the selector tries that chunk alone, and so does the ranking */
    if (b->comm->cfg.chunk_forced) {
        q.chunk_bytes = &forced_chunk;
        q.nchunk_bytes = 1;
    }
    struct coll_cost_result res[32];
    size_t nres = 0, chunk = 0;
    uint64_t bytes = (uint64_t)rs->l.param * dtypes[rs->dt].size *
                     (uint64_t)(rs->l.nsend > rs->l.nrecv ? rs->l.nsend : rs->l.nrecv);
    char why[256], line[1024];
    const char *name;
    double est = NAN;
    size_t len;

    if (b->o.coll == B_SENDRECV) {
        printf("%12" PRIu64 "  %12zu  %-14s  point to point: no algorithm to choose\n", bytes,
               rs->l.param, "p2p");
        return 0;
    }
    name = algo_for(b, rs, x->nranks, &chunk, why, sizeof(why));
    if (strcmp(name, "?") == 0) {
        fprintf(stderr, "collbench: --explain: the selector refuses %s of %zu elements: %s\n",
                colls[b->o.coll].name, rs->l.param, coll_last_error(b->comm));
        return 1;
    }
    if (x->nranks > 1) {
        const struct coll_algo *algo = coll__algo_find(name);
        struct coll_algo_args sel = a;
        sel.hosts = x->hosts;
        sel.nhosts = x->nhosts;
        sel.chunk_count = chunk / a.elem_size ? chunk / a.elem_size : 1;
        if (!algo ||
            coll__cost_predict(x->params, &x->links, algo, &sel, &est, NULL) != COLL_SUCCESS)
            est = NAN;
        if (coll__cost_rank_algos(x->params, &x->links, &q, res, ARRAY_SIZE(res), &nres) !=
            COLL_SUCCESS) {
            fprintf(stderr, "collbench: --explain: the cost model cannot price %s: %s\n",
                    colls[b->o.coll].name, coll_last_error(NULL));
            return 1;
        }
    }
    len = (size_t)snprintf(line, sizeof(line), "%12" PRIu64 "  %12zu  %-14s %8zu  ", bytes,
                           rs->l.param, name, chunk);
    if (isfinite(est))
        len += (size_t)snprintf(line + len, sizeof(line) - len, "%9.1f ", est * 1e6);
    else
        len += (size_t)snprintf(line + len, sizeof(line) - len, "%9s ", "-");
    for (size_t i = 0; i < nres && len < sizeof(line); i++)
        len += (size_t)snprintf(line + len, sizeof(line) - len, " %s %.1f/%zu", res[i].algo->name,
                                res[i].seconds * 1e6, res[i].chunk_bytes);
    printf("%s\n", line);
    if (why[0] && strncmp(why, "cost model", 10) != 0) /* the ranking says the rest */
        printf("#%12s  selector: %s\n", "", why);
    return 0;
}

/* --explain --np N --per-host K: hosts of K consecutive ranks, shared memory inside, the
 * calibration's tcp between them. */
static int explain_per_host = 1;
static enum coll_link explain_host_link(void *arg, int32_t src, int32_t dst)
{
    (void)arg;
    return src / explain_per_host == dst / explain_per_host ? COLL_LINK_SHM : COLL_LINK_TCP;
}

int explain(struct bench *b)
{
    static int32_t hosts[4096];
    struct coll_cost_params pooled;
    struct coll_cost_params defaults;
    struct explain_ctx x = {b->comm->cost, b->o.np ? b->o.np : b->nranks,
                            coll__cost_links_all(COLL_LINK_TCP), NULL, 0};
    char linkdesc[64];
    char path[PATH_MAX];
    const char *algo = getenv("COLL_ALGO");
    int rc;

    if (b->rank != 0)
        return 0;
    if (!x.params) {
        coll__cost_params_default(&defaults);
        x.params = &defaults;
    }
    /* the comm's own links when it is the comm explained; else every pair as ranks 0-1 */
    if (x.nranks == b->nranks) {
        x.links = coll__select_links(b->comm);
        if (b->comm->nhosts > 1) {
            x.hosts = b->comm->hosts;
            x.nhosts = b->comm->nhosts;
        }
        snprintf(linkdesc, sizeof(linkdesc), "links as this comm's transports (%s)",
                 transport_name(b));
    } else {
        struct coll_cost_links own = coll__select_links(b->comm);
        enum coll_link l = b->nranks > 1 && own.link_of ? own.link_of(own.arg, 0, 1) : own.link;
        x.links = coll__cost_links_all(l);
        snprintf(linkdesc, sizeof(linkdesc), "every link %s", coll__link_name(l));
    }
    if (b->o.per_host > 0 && b->o.np) {
        explain_per_host = b->o.per_host;
        for (int r = 0; r < x.nranks; r++)
            hosts[r] = r / b->o.per_host;
        x.hosts = hosts;
        x.nhosts = (x.nranks + b->o.per_host - 1) / b->o.per_host;
        x.links.link_of = explain_host_link;
        x.links.arg = NULL;
        /* hosts on paper: as many cores as ranks (no time-slicing of this machine) */
        pooled = *x.params;
        pooled.cores = 0;
        x.params = &pooled;
        snprintf(linkdesc, sizeof(linkdesc), "%d hosts of %d ranks (shm inside, tcp between)",
                 x.nhosts, b->o.per_host);
    }
    b->nranks = x.nranks; /* the rows' layout is for the ranks explained, not the comm's */
    printf("# collbench %s --explain: %d ranks, %s; selection %s%s%s\n",
           colls[b->o.coll].name, x.nranks, linkdesc, b->comm->cfg.select,
           algo && *algo ? ", COLL_ALGO=" : "", algo && *algo ? algo : "");
    if (calib_path(b->comm->cfg.calib_file, path, sizeof(path)) && access(path, R_OK) == 0)
        printf("# cost model calibrated from %s\n", path);
    else
        printf("# cost model: built-in defaults (no calibration file; see --calibrate)\n");
    printf("#       size         count  selected          chunk   est(us)  model's ranking: "
           "algorithm est(us)/best chunk(B)\n");
    rc = for_each_row(b, explain_row, &x);
    fflush(stdout);
    return rc;
}

