/*
 * select.c - which algorithm runs a collective.
 *
 * COLL_ALGO forces one, for every collective ("ring") or per collective
 * ("allreduce=ring,broadcast=binomial"); a name forced for every collective that cannot run
 * one of them (ring has no broadcast) leaves that collective to the default choice. Until the
 * cost model lands, the default is a size threshold (COLL_TREE_THRESHOLD): trees below it
 * (latency: ~log n messages), ring and chain above (bandwidth: each byte crosses each link
 * about once). Each new decision is logged at INFO with its reason.
 */
#include "../core/exec.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *default_small[COLL_NUM_COLLS] = {
    [COLL_COLL_ALLREDUCE] = "tree", [COLL_COLL_BROADCAST] = "binomial",
    [COLL_COLL_REDUCE] = "binomial",
};
static const char *default_large[COLL_NUM_COLLS] = {
    [COLL_COLL_ALLREDUCE] = "ring", [COLL_COLL_BROADCAST] = "chain",
    [COLL_COLL_REDUCE] = "chain",
};

static bool coll_from_name(const char *name, size_t len, enum coll_coll *c_p)
{
    for (int c = 0; c < COLL_NUM_COLLS; c++) {
        const char *cn = coll__coll_name((enum coll_coll)c);
        if (strlen(cn) == len && !strncasecmp(cn, name, len)) {
            *c_p = (enum coll_coll)c;
            return true;
        }
    }
    if (len == 5 && !strncasecmp(name, "bcast", 5)) {
        *c_p = COLL_COLL_BROADCAST;
        return true;
    }
    return false;
}

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
        if (coll_from_name(tok, (size_t)(eq - tok), &tc) && tc == c) {
            snprintf(name, n, "%s", eq + 1);
            *explicit_p = true;
            return true;
        }
    }
    return found;
}

coll_status_t coll__select_check_config(struct coll_comm *comm)
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

        if (eq && !coll_from_name(tok, (size_t)(eq - tok), &c))
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "COLL_ALGO='%s': unknown collective '%.*s' (allreduce, "
                               "broadcast, reduce, ...)",
                               comm->cfg.algo, (int)(eq - tok), tok);
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

static bool usable(const struct coll_algo *algo, const struct coll_algo_args *a)
{
    return algo && (algo->colls & (1u << a->coll)) && (!algo->applicable || algo->applicable(a));
}

coll_status_t coll__select(struct coll_comm *comm, const struct coll_algo_args *a,
                           const struct coll_algo **algo_p, const char **why_p)
{
    size_t bytes = a->count * a->elem_size;
    const struct coll_algo *algo = NULL;
    const char *why = "";
    char name[64];
    bool explicit_ = false;

    if (comm->cfg.algo[0] && forced_for(comm->cfg.algo, a->coll, name, sizeof(name), &explicit_)) {
        algo = coll__algo_find(name);
        if (usable(algo, a)) {
            why = "forced by COLL_ALGO";
        } else if (explicit_) {
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "COLL_ALGO forces '%s' for %s, which cannot run %zu elements on "
                               "%d ranks",
                               name, coll__coll_name(a->coll), a->count, a->nranks);
        } else {
            algo = NULL; /* e.g. ring for broadcast: fall back to the default */
        }
    }
    if (!algo) {
        const char *def = (int64_t)bytes < comm->cfg.tree_threshold ? default_small[a->coll]
                                                                    : default_large[a->coll];
        algo = def ? coll__algo_find(def) : NULL;
        why = (int64_t)bytes < comm->cfg.tree_threshold ? "below COLL_TREE_THRESHOLD"
                                                         : "at or above COLL_TREE_THRESHOLD";
        if (!usable(algo, a)) {
            algo = NULL;
            for (int i = 0; coll__algos[i]; i++)
                if (usable(coll__algos[i], a)) {
                    algo = coll__algos[i];
                    why = "first applicable";
                    break;
                }
        }
    }
    if (!algo)
        return coll__error(comm, COLL_INTERNAL_ERROR, "no algorithm can run %s on %d ranks",
                           coll__coll_name(a->coll), a->nranks);
    *algo_p = algo;
    *why_p = why;
    return COLL_SUCCESS;
}
