/*
 * explain.c - the modes that read the library's own deciders and tables (api/introspect.h):
 * how each row's call runs (records, --explain), --explain itself, --help-env and --topo.
 */
#include "collbench.h"

/* The call a row makes, as the library is asked about it. */
static struct coll_ix_call ix_call(const struct bench *b, const struct rowspec *rs, int nranks)
{
    struct coll_ix_call c = {
        .coll = b->o.coll,
        .count = rs->l.param,
        .dtype = coll__desc_moves_data(&coll__colls[b->o.coll]) ? rs->dt : COLL_UINT8,
        .op = rs->op,
        .root = rs->root < 0 ? 0 : rs->root,
        .device = b->o.memtype_cuda,
        .nranks = nranks,
    };
    return c;
}

/* What runs this row's call on this comm (or on nranks ranks on paper), as the library's
 * chooser says; "?" when it refuses (its message is in the comm's last error). */
const char *algo_for(struct bench *b, const struct rowspec *rs, int nranks, size_t *chunk_bytes_p,
                     char *why, size_t whylen)
{
    struct coll_ix_call c = ix_call(b, rs, nranks);
    struct coll_ix_pick pick;

    *chunk_bytes_p = 0;
    why[0] = '\0';
    if (coll__ix_choose(b->comm, &c, &pick) != COLL_SUCCESS)
        return "?";
    *chunk_bytes_p = pick.chunk_bytes;
    snprintf(why, whylen, "%s", pick.why);
    return pick.algo;
}

/* --------------------------------------------------------------------------------------
 * --help-env and --topo.
 */

int help_env(void)
{
    struct coll_ix_param p;

    printf("COLL_* environment variables (read once per communicator, at init):\n\n");
    for (size_t i = 0; coll__ix_param(NULL, i, &p); i++)
        printf("%s\n    default: %s%s%s%s\n    %s\n", p.name, *p.defval ? p.defval : "(empty)",
               p.env ? "   set: '" : "", p.env ? p.env : "", p.env ? "'" : "", p.help);
    printf("\nSet by the launcher (collrun), read by coll_comm_init_env: COLL_UNIQUE_ID, "
           "COLL_RANK,\nCOLL_SIZE, COLL_LOCAL_RANK, COLL_LOCAL_SIZE.\n");
    return 0;
}

/* --topo: what this host has; under a launcher, rank 0 also lists every host's ranks. */
int print_topo(void)
{
    struct coll_ix_comm d;
    coll_comm_t *comm = NULL;
    coll_status_t st;

    if (!coll__ix_launched()) {
        coll__ix_topo_print(stdout);
        return 0;
    }
    st = comm_open(&comm);
    if (st != COLL_SUCCESS) {
        fprintf(stderr, "%s: --topo: %s\n", prog_name, coll_last_error(NULL));
        return 1;
    }
    st = coll__ix_comm(comm, &d);
    if (st == COLL_SUCCESS && d.rank == 0) {
        coll__ix_topo_print(stdout);
        printf("%d ranks on %d hosts\n", d.nranks, d.nhosts);
        for (int h = 0; h < d.nhosts; h++) {
            const char *name = "";
            printf("  host %d", h);
            for (int r = 0; r < d.nranks; r++)
                if (d.peers[r].host == h && !*name)
                    name = d.peers[r].hostname;
            printf(" %-16s ranks", name);
            for (int r = 0; r < d.nranks; r++)
                if (d.peers[r].host == h)
                    printf(" %d", r);
            printf("\n");
        }
        fflush(stdout);
    }
    if (st == COLL_SUCCESS)
        coll__ix_comm_free(&d);
    /* nobody leaves before rank 0 has read the table: the comm would end under it */
    if (coll_barrier(comm) != COLL_SUCCESS)
        st = COLL_SYSTEM_ERROR;
    coll_comm_destroy(comm);
    return st == COLL_SUCCESS ? 0 : 1;
}

/* --------------------------------------------------------------------------------------
 * --explain: per size, how the call runs and what the cost model says of it.
 */

struct explain_ctx {
    int nranks;
    struct coll_ix_model model;
    double pick_s, pick_max_s; /* the selector's decisions: their total and longest time */
    int picks;
};


static int explain_row(struct bench *b, const struct rowspec *rs, void *arg)
{
    struct explain_ctx *x = arg;
    struct coll_ix_call c = ix_call(b, rs, x->nranks);
    struct coll_ix_pick pick;
    struct coll_ix_price price;
    bool first;
    double t0;
    uint64_t bytes = (uint64_t)rs->l.param * dtypes[rs->dt].size *
                     (uint64_t)(rs->l.nsend > rs->l.nrecv ? rs->l.nsend : rs->l.nrecv);
    char line[1024];
    size_t len;

    /* ranks on paper: the selector picks on the hosts the ranking prices */
    if (x->nranks != b->desc.nranks) {
        c.hosts = x->model.hosts;
        c.nhosts = x->model.nhosts;
    }
    if (coll__colls[b->o.coll].p2p) {
        printf("%12" PRIu64 "  %12zu  %-14s  point to point: no algorithm to choose\n", bytes,
               rs->l.param, "p2p");
        return 0;
    }
    t0 = now_s();
    if (coll__ix_choose(b->comm, &c, &pick) != COLL_SUCCESS) {
        fprintf(stderr, "collbench: --explain: the selector refuses %s of %zu elements: %s\n",
                coll__colls[b->o.coll].name, rs->l.param, coll_last_error(b->comm));
        return 1;
    }
    t0 = now_s() - t0;
    x->pick_s += t0;
    x->pick_max_s = t0 > x->pick_max_s ? t0 : x->pick_max_s;
    x->picks++;
    if (coll__ix_price(b->comm, &c, &pick, &x->model, &price) != COLL_SUCCESS) {
        fprintf(stderr, "collbench: --explain: the cost model cannot price %s: %s\n",
                coll__colls[b->o.coll].name, coll_last_error(NULL));
        return 1;
    }
    len = (size_t)snprintf(line, sizeof(line), "%12" PRIu64 "  %12zu  %-14s %8zu  ", bytes,
                           rs->l.param, pick.algo, pick.chunk_bytes);
    if (isfinite(price.est_s))
        len += (size_t)snprintf(line + len, sizeof(line) - len, "%9.1f ", price.est_s * 1e6);
    else
        len += (size_t)snprintf(line + len, sizeof(line) - len, "%9s ", "-");
    for (size_t i = 0; i < price.nranked && len < sizeof(line); i++)
        len += (size_t)snprintf(line + len, sizeof(line) - len, " %s %.1f/%zu",
                                price.ranked[i].algo->name, price.ranked[i].seconds * 1e6,
                                price.ranked[i].chunk_bytes);
    printf("%s\n", line);
    /* the selector takes the ranking's first row unless a rule overrode the model: then
     * the rule is printed (a pick the ranking does not explain is never left unsaid) */
    first = price.nranked > 0 && !strcmp(price.ranked[0].algo->name, pick.algo) &&
            price.ranked[0].chunk_bytes == pick.chunk_bytes;
    if (pick.why[0] && (strncmp(pick.why, "cost model", 10) != 0 || !first))
        printf("#%12s  selector: %s%s\n", "", pick.why,
               first || price.nranked == 0 ? ""
               : !strncmp(pick.why, "cost model", 10)
                   ? " (not the ranking's first row: the selector and the ranking disagree)"
                   : "");
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
    int32_t *hosts = NULL;
    const struct coll_ix_comm *d = &b->desc;
    struct coll_cost_params pooled;
    struct explain_ctx x = {b->o.np ? b->o.np : b->nranks, d->model, 0, 0, 0};
    char linkdesc[64];
    const char *algo = getenv("COLL_ALGO");
    int rc;

    if (b->rank != 0)
        return 0;
    /* the comm's own links when it is the comm explained; else every pair as ranks 0-1 */
    if (x.nranks == b->nranks) {
        snprintf(linkdesc, sizeof(linkdesc), "links as this comm's transports (%s)",
                 transport_name(b));
    } else {
        const struct coll_cost_links *own = &d->model.links;
        enum coll_link l = b->nranks > 1 && own->link_of ? own->link_of(own->arg, 0, 1) : own->link;
        x.model.links = coll__cost_links_all(l);
        x.model.hosts = NULL;
        x.model.nhosts = 0;
        snprintf(linkdesc, sizeof(linkdesc), "every link %s", coll__link_name(l));
    }
    if (b->o.per_host > 0 && b->o.np) {
        hosts = malloc((size_t)x.nranks * sizeof(*hosts));
        if (!hosts) {
            fprintf(stderr, "collbench: --explain: no memory for %d ranks' hosts\n", x.nranks);
            return 1;
        }
        explain_per_host = b->o.per_host;
        for (int r = 0; r < x.nranks; r++)
            hosts[r] = r / b->o.per_host;
        x.model.hosts = hosts;
        x.model.nhosts = COLL_DIV_UP(x.nranks, b->o.per_host);
        x.model.links.link_of = explain_host_link;
        x.model.links.arg = NULL;
        /* hosts on paper: as many cores as ranks (no time-slicing of this machine) */
        pooled = *x.model.params;
        pooled.cores = 0;
        x.model.params = &pooled;
        snprintf(linkdesc, sizeof(linkdesc), "%d hosts of %d ranks (shm inside, tcp between)",
                 x.model.nhosts, b->o.per_host);
    }
    b->nranks = x.nranks; /* the rows' layout is for the ranks explained, not the comm's */
    printf("# collbench %s --explain: %d ranks, %s; selection %s%s%s%s\n",
           coll__colls[b->o.coll].name, x.nranks, linkdesc, d->select,
           !strcmp(d->select, "cost")    ? " (closed forms; --exact walks the schedules)"
           : !strcmp(d->select, "exact") ? " (every rank's schedule walked)"
                                         : "",
           algo && *algo ? ", COLL_ALGO=" : "", algo && *algo ? algo : "");
    if (d->calib_file[0])
        printf("# cost model calibrated from %s\n", d->calib_file);
    else
        printf("# cost model: built-in defaults (no calibration file; see --calibrate)\n");
    printf("#       size         count  selected          chunk   est(us)  model's ranking: "
           "algorithm est(us)/best chunk(B)\n");
    rc = for_each_row(b, explain_row, &x);
    /* what a rank pays for the first call of each size (bench/select_scale.sh reads it) */
    if (rc == 0 && x.picks > 0)
        printf("# selector: %d decisions, %.1f us each on average, %.1f us at most\n", x.picks,
               x.pick_s / x.picks * 1e6, x.pick_max_s * 1e6);
    fflush(stdout);
    free(hosts);
    return rc;
}
