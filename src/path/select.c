/*
 * select.c - which algorithm (and chunk size) runs a collective.
 *
 * COLL_ALGO forces one, for every collective ("ring") or per collective
 * ("allreduce=ring,broadcast=binomial"); a name forced for every collective that cannot run
 * one of them (ring has no gather) leaves that collective to the model. Otherwise, with
 * COLL_SELECT=cost (the default), every applicable algorithm is priced at a few chunk sizes
 * by the alpha-beta-gamma model of src/algo/cost.c in closed form (cost_closed.c: a
 * microsecond-scale formula per algorithm, at any n), with this machine's parameters from
 * the calibration file (collbench --calibrate) or the built-in defaults, and the cheapest
 * wins. COLL_SELECT=exact prices the same way by walking every rank's schedule
 * (coll__cost_predict: exact to the model, but O(n) schedules per candidate: seconds and
 * hundreds of MB from a few hundred ranks on). COLL_SELECT=threshold is the plain rule:
 * trees below COLL_TREE_THRESHOLD, ring and chain above. Decisions are made once per request
 * shape (the plan cache keeps them) and logged at INFO with the estimates of the
 * alternatives.
 */
#include "../core/exec.h"
#include "../core/settings.h"
#include "../algo/cost.h"
#include "../transport/transport.h"
#include "flat.h"
#include "path.h"

#include <sched.h>
#include <stdlib.h>

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const char *default_small[COLL_NUM_COLLS] = {
    [COLL_COLL_ALLREDUCE] = "tree",     [COLL_COLL_BROADCAST] = "binomial",
    [COLL_COLL_REDUCE] = "binomial",    [COLL_COLL_ALLGATHER] = "rd",
    [COLL_COLL_REDUCE_SCATTER] = "rd",  [COLL_COLL_ALLTOALL] = "bruck",
    [COLL_COLL_GATHER] = "binomial",    [COLL_COLL_SCATTER] = "binomial",
    [COLL_COLL_BARRIER] = "dissemination",
};
static const char *default_large[COLL_NUM_COLLS] = {
    [COLL_COLL_ALLREDUCE] = "ring",     [COLL_COLL_BROADCAST] = "chain",
    [COLL_COLL_REDUCE] = "chain",       [COLL_COLL_ALLGATHER] = "ring",
    [COLL_COLL_REDUCE_SCATTER] = "ring", [COLL_COLL_ALLTOALL] = "pairwise",
    [COLL_COLL_GATHER] = "binomial",    [COLL_COLL_SCATTER] = "binomial",
    [COLL_COLL_BARRIER] = "dissemination",
};

static void list_algos(char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; coll__algos[i] && o + 1 < n; i++) {
        int w = snprintf(buf + o, n - o, "%s%s", i ? ", " : "", coll__algos[i]->name);
        if (w < 0)
            break;
        o += (size_t)w < n - o ? (size_t)w : n - o - 1;
    }
    /* the shared-memory fast path is no schedule, but COLL_ALGO names it all the same */
    if (o + 1 < n)
        snprintf(buf + o, n - o, ", flat");
}

/* Find what COLL_ALGO says for collective c: the name in *name (len), and whether it was
 * given for c explicitly. Returns false when COLL_ALGO says nothing for c. */
static bool forced_for(const char *spec, enum coll_coll c, char *name, size_t n,
                       bool *explicit_p)
{
    char buf[256], *save = NULL, *tok;
    bool found = false;

    snprintf(buf, sizeof(buf), "%s", spec);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        enum coll_coll tc;
        if (!eq) {
            if (!found) { /* a bare name applies unless a per-collective entry overrides */
                snprintf(name, n, "%s", tok);
                *explicit_p = false;
                found = true;
            }
            continue;
        }
        if (coll__coll_from_name(tok, (size_t)(eq - tok), &tc) && tc == c) {
            snprintf(name, n, "%s", eq + 1);
            *explicit_p = true;
            return true;
        }
    }
    return found;
}

static coll_status_t select_check_config(struct coll_comm *comm)
{
    char buf[256], *save = NULL, *tok, names[512];

    if (!comm->cfg.algo[0])
        return COLL_SUCCESS;
    list_algos(names, sizeof(names));
    snprintf(buf, sizeof(buf), "%s", comm->cfg.algo);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '='), *name = eq ? eq + 1 : tok;
        const struct coll_algo *algo = coll__algo_find(name);
        enum coll_coll c;

        if (eq && !coll__coll_from_name(tok, (size_t)(eq - tok), &c))
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "COLL_ALGO='%s': unknown collective '%.*s' (allreduce, "
                               "broadcast, reduce, ...)",
                               comm->cfg.algo, (int)(eq - tok), tok);
        if (!strcmp(name, "flat")) { /* the shm fast path (src/transport/shm_flat.c) */
            if (eq && !(COLL_FLAT_COLLS & (1u << c)))
                return coll__error(comm, COLL_INVALID_ARGUMENT,
                                   "COLL_ALGO='%s': the shared-memory fast path 'flat' cannot "
                                   "run %s", comm->cfg.algo, coll__coll_name(c));
            continue;
        }
        if (!algo)
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "COLL_ALGO='%s': unknown algorithm '%s'; valid names: %s",
                               comm->cfg.algo, name, names);
        if (eq && !(algo->colls & (1u << c)))
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "COLL_ALGO='%s': algorithm '%s' cannot run %s", comm->cfg.algo,
                               name, coll__coll_name(c));
    }
    return COLL_SUCCESS;
}

bool coll__select_flat(const struct coll_comm *comm, enum coll_coll c, bool *forced_p)
{
    const struct coll_algo *algo;
    char name[64];
    bool explicit_ = false;

    *forced_p = false;
    if (!comm->cfg.algo[0] || !forced_for(comm->cfg.algo, c, name, sizeof(name), &explicit_))
        return true;
    if (!strcmp(name, "flat")) {
        *forced_p = true;
        return true;
    }
    /* a name given for every collective leaves those it cannot run to the selector */
    algo = coll__algo_find(name);
    return !explicit_ && !(algo && (algo->colls & (1u << c)));
}

static bool usable(const struct coll_algo *algo, const struct coll_algo_args *a)
{
    return algo && (algo->colls & (1u << a->coll)) && (!algo->applicable || algo->applicable(a));
}

/* The cores the host's ranks share (COLL_HOST_CPUS where a launcher pinned them, else this
 * process's affinity): the model shares them among the ranks when they are more
 * (oversubscription), as the machine will. A rank pinned to one CPU must not be priced as
 * if all its peers shared that CPU. */
static coll_status_t with_cores(struct coll_comm *comm)
{
    int n = coll__host_cpus(comm);

    comm->cost->cores = n > 0 ? n : 0;
    return COLL_SUCCESS;
}

/* Parse text (from src) over the defaults into the model and keep it as the comm's. */
static coll_status_t calib_take(struct coll_comm *comm, char *text, const char *src)
{
    struct coll_settings_agreed *a = comm->agreed;
    coll_status_t st = coll__cost_params_parse(comm->cost, text, src);

    if (st != COLL_SUCCESS) {
        free(text);
        return st;
    }
    if (a) {
        free(a->calib_text);
        a->calib_text = text;
        snprintf(a->calib_src, sizeof(a->calib_src), "%s", src);
    } else {
        free(text);
    }
    return COLL_SUCCESS;
}

coll_status_t coll__select_init(struct coll_comm *comm)
{
    char path[600];
    const char *file = comm->cfg.calib_file;
    char *text;
    coll_status_t st;

    COLL_CHECK_GOTO(select_check_config(comm), st, out);
    if (strcmp(comm->cfg.select, "cost") && strcmp(comm->cfg.select, "exact") &&
        strcmp(comm->cfg.select, "threshold"))
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "COLL_SELECT='%s' is none of 'cost', 'exact' and 'threshold'",
                           comm->cfg.select);
    comm->cost = malloc(sizeof(*comm->cost));
    if (!comm->cost)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the cost model");
    coll__cost_params_default(comm->cost);
    if (comm->agreed && comm->agreed->calib_text) { /* a split or shrunk comm: its parent's */
        if (!comm->agreed->calib_text[0])
            return with_cores(comm);
        text = strdup(comm->agreed->calib_text);
        if (!text)
            return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the calibration");
        snprintf(path, sizeof(path), "%s", comm->agreed->calib_src);
        st = calib_take(comm, text, path);
        if (st != COLL_SUCCESS)
            return coll__error(comm, st, "the parent comm's calibration: %s",
                               coll__thread_error());
        return with_cores(comm);
    }
    if (!file[0]) {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (xdg && *xdg)
            snprintf(path, sizeof(path), "%s/coll/calib.txt", xdg);
        else if (home && *home)
            snprintf(path, sizeof(path), "%s/.cache/coll/calib.txt", home);
        else
            path[0] = '\0';
        if (!path[0] || access(path, R_OK) != 0)
            return with_cores(comm); /* no calibration yet: the defaults */
        file = path;
    }
    /* at most what a rank may send (src/core/settings.c passes it on to the others) */
    st = coll__cost_file_read(file, COLL_SETTINGS_BLOB_MAX, &text);
    if (st == COLL_SUCCESS)
        st = calib_take(comm, text, file);
    if (st != COLL_SUCCESS) {
        if (comm->cfg.calib_file[0]) /* asked for by name: an error */
            return coll__error(comm, st, "COLL_CALIB_FILE='%s': %s", file,
                               coll__thread_error());
        COLL_WARN(COLL_SUB_ALGO, "ignoring calibration file '%s' (%s): using defaults", file,
                  coll__thread_error());
        coll__cost_params_default(comm->cost);
        return with_cores(comm);
    }
    COLL_INFO(COLL_SUB_ALGO, "cost model calibrated from '%s'", file);
    return with_cores(comm);
out:
    return st;
}

void coll__select_fini(struct coll_comm *comm)
{
    free(comm->cost);
    comm->cost = NULL;
}

static const struct coll_algo *by_threshold(struct coll_comm *comm,
                                            const struct coll_algo_args *a, const char **why_p)
{
    size_t bytes = a->count * a->elem_size;
    bool small = (int64_t)bytes < comm->cfg.tree_threshold;
    const char *def = small ? default_small[a->coll] : default_large[a->coll];
    const struct coll_algo *algo = def ? coll__algo_find(def) : NULL;

    *why_p = small ? "below COLL_TREE_THRESHOLD" : "at or above COLL_TREE_THRESHOLD";
    if (usable(algo, a))
        return algo;
    for (int i = 0; coll__algos[i]; i++)
        if (usable(coll__algos[i], a)) {
            *why_p = "first applicable";
            return coll__algos[i];
        }
    return NULL;
}

/* The link class between two ranks as the transports will see it: what transport both
 * brought up and can use between them (shared memory within a host). */
static enum coll_link pair_link(void *arg, int32_t src, int32_t dst)
{
    const struct coll_comm *comm = arg;
    const struct coll_peer_info *a, *b;
    uint32_t both;

    if (src < 0 || dst < 0 || src >= comm->nranks || dst >= comm->nranks)
        return COLL_LINK_TCP; /* not this comm's ranks: callers price those uniformly */
    a = &comm->peers[src];
    b = &comm->peers[dst];
    both = a->tp_mask & b->tp_mask;

    for (int i = 0; coll__transports[i]; i++) {
        const char *name = coll__transports[i]->name;
        if (!(both & (1u << i)))
            continue;
        if (!strcmp(name, "shm") && a->host_hash != b->host_hash)
            continue;
        for (int l = 0; l < COLL_NUM_LINKS; l++)
            if (!strcmp(coll__link_name((enum coll_link)l), name))
                return (enum coll_link)l;
    }
    return COLL_LINK_TCP;
}

struct coll_cost_links coll__select_links(struct coll_comm *comm)
{
    struct coll_cost_links links = {pair_link, comm, COLL_LINK_TCP};
    if (!comm->peers)
        return coll__cost_links_all(COLL_LINK_TCP);
    return links;
}

/* Ranks on paper with hosts (collbench --explain --np N --per-host K): shared memory within
 * a host, TCP between, as the explain's model has them. */
static enum coll_link paper_link(void *arg, int32_t src, int32_t dst)
{
    const struct coll_algo_args *a = arg;

    if (src < 0 || dst < 0 || src >= a->nranks || dst >= a->nranks)
        return COLL_LINK_TCP;
    return a->hosts[src] == a->hosts[dst] ? COLL_LINK_SHM : COLL_LINK_TCP;
}

/* The links the selector prices a's ranks on: a comm's own ranks on its own links; other
 * rank counts (collbench --explain --np N) every pair as this comm's first pair, or, with
 * hosts on paper, shm within a host and tcp between. */
static struct coll_cost_links links_for(struct coll_comm *comm, const struct coll_algo_args *a)
{
    if (a->nranks == comm->nranks)
        return coll__select_links(comm);
    if (a->hosts && a->nhosts > 1) {
        struct coll_cost_links links = {paper_link, (void *)a, COLL_LINK_TCP};
        return links;
    }
    return coll__cost_links_all(comm->peers && comm->nranks > 1 ? pair_link(comm, 0, 1)
                                                                : COLL_LINK_TCP);
}

/* Price the candidates; pick the cheapest. Falls back to the threshold rule on a model
 * failure (logged), so a gap in the model never stops a collective. */
static const struct coll_algo *by_cost(struct coll_comm *comm, struct coll_algo_args *a,
                                       double *seconds_p, char *why, size_t whylen)
{
    static const size_t chunks[] = COLL_COST_SELECT_CHUNKS;
    struct coll_cost_result res[48];
    struct coll_cost_query q = {
        .coll = a->coll,
        .nranks = a->nranks,
        .root = a->root,
        .count = a->count,
        .dtype = a->dtype,
        .hosts = a->hosts,
        .nhosts = a->nhosts,
    };
    size_t forced = a->chunk_count * a->elem_size, nres = 0, o;
    coll_status_t st;
    const char *tw;
    const struct coll_algo *algo;

    struct coll_cost_params paper;
    const struct coll_cost_params *p = comm->cost;

    q.chunk_bytes = comm->cfg.chunk_forced ? &forced : chunks;
    q.nchunk_bytes = comm->cfg.chunk_forced ? 1 : COLL_ARRAY_SIZE(chunks);
    q.closed = strcmp(comm->cfg.select, "exact") != 0;
    if (a->nranks != comm->nranks && a->hosts && a->nhosts > 1) {
        /* hosts on paper have their own cores: no time-slicing of this machine's */
        paper = *comm->cost;
        paper.cores = 0;
        p = &paper;
    }
    struct coll_cost_links links = links_for(comm, a);
    st = coll__cost_rank_algos(p, &links, &q, res, COLL_ARRAY_SIZE(res), &nres);
    if (st != COLL_SUCCESS || nres == 0) {
        COLL_WARN(COLL_SUB_ALGO, "cost model could not price %s on %d ranks (%s): using the "
                  "size threshold", coll__coll_name(a->coll), a->nranks,
                  st != COLL_SUCCESS ? coll__thread_error() : "no applicable algorithm");
        algo = by_threshold(comm, a, &tw);
        snprintf(why, whylen, "%s", tw);
        return algo;
    }
    a->chunk_count = res[0].chunk_count;
    *seconds_p = res[0].seconds;
    o = (size_t)snprintf(why, whylen, "cost model%s: est %.1f us", q.closed ? "" : " (exact)",
                         res[0].seconds * 1e6);
    for (size_t i = 1; i < nres && i < 6 && o < whylen; i++)
        o += (size_t)snprintf(why + o, whylen - o, "%s %s %.1f us", i == 1 ? ";" : ",",
                              res[i].algo->name, res[i].seconds * 1e6);
    return res[0].algo;
}

/* The model's price of algo as chosen (forced, or by the threshold rule), in closed form
 * unless COLL_SELECT=exact; -1 when it has none. */
static double price_of(struct coll_comm *comm, const struct coll_algo *algo,
                       const struct coll_algo_args *a)
{
    struct coll_cost_links links;
    double t;

    if (!comm->cost || a->nranks < 2)
        return -1;
    links = links_for(comm, a);
    if (strcmp(comm->cfg.select, "exact") != 0)
        return coll__cost_closed(comm->cost, &links, algo, a, &t) == COLL_SUCCESS ? t : -1;
    return coll__cost_predict(comm->cost, &links, algo, a, &t, NULL) == COLL_SUCCESS ? t : -1;
}

coll_status_t coll__select(struct coll_comm *comm, struct coll_algo_args *a,
                           const struct coll_algo **algo_p, char *why, size_t whylen)
{
    return coll__select_priced(comm, a, algo_p, NULL, why, whylen);
}

coll_status_t coll__select_priced(struct coll_comm *comm, struct coll_algo_args *a,
                                  const struct coll_algo **algo_p, double *seconds_p, char *why,
                                  size_t whylen)
{
    const struct coll_algo *algo = NULL;
    const char *tw = "";
    char name[64];
    bool explicit_ = false;
    double seconds = -1;

    if (comm->cfg.algo[0] && forced_for(comm->cfg.algo, a->coll, name, sizeof(name), &explicit_)) {
        algo = coll__algo_find(name);
        if (usable(algo, a)) {
            snprintf(why, whylen, "forced by COLL_ALGO");
            *algo_p = algo;
            if (seconds_p)
                *seconds_p = price_of(comm, algo, a);
            return COLL_SUCCESS;
        }
        if (explicit_ && !strcmp(name, "flat"))
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "COLL_ALGO forces 'flat' for %s, which runs only blocking calls "
                               "outside groups of at most COLL_SHM_FLAT_BYTES (%lld) per rank "
                               "(all-reduce, broadcast and reduce: larger too, on 2 to 16 ranks "
                               "with COLL_SHM_SLICED_BYTES > COLL_SHM_FLAT_BYTES), on comms "
                               "whose ranks all share one host over shm (COLL_SHM_FLAT=1)",
                               coll__coll_name(a->coll), (long long)comm->cfg.shm_flat_bytes);
        if (explicit_)
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "COLL_ALGO forces '%s' for %s, which cannot run %zu elements on "
                               "%d ranks",
                               name, coll__coll_name(a->coll), a->count, a->nranks);
        algo = NULL; /* e.g. ring for gather: the model decides */
    }
    if (comm->cost && strcmp(comm->cfg.select, "threshold") && a->nranks > 1) {
        algo = by_cost(comm, a, &seconds, why, whylen);
    } else {
        algo = by_threshold(comm, a, &tw);
        snprintf(why, whylen, "%s", tw);
    }
    if (!algo)
        return coll__error(comm, COLL_INTERNAL_ERROR, "no algorithm can run %s on %d ranks",
                           coll__coll_name(a->coll), a->nranks);
    *algo_p = algo;
    if (seconds_p)
        *seconds_p = seconds >= 0 ? seconds : price_of(comm, algo, a);
    return COLL_SUCCESS;
}
