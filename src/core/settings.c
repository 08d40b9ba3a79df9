/*
 * settings.c - one set of settings per comm (settings.h): what each rank sends at the
 * bootstrap, and rank 0's values adopted by all.
 *
 * Why rank 0's: a rank cannot stop its peers' creation, and failing every creation where
 * one host's environment differs from another's would turn the likeliest mistake of a
 * multi-host launch into a job that cannot start; with one value per comm it runs as rank
 * 0 asked, every rank alike, and the warning says who differed. Only what this rank cannot
 * follow fails (a transport it did not bring up: src/api/comm.c).
 */
#include "settings.h"
#include "settings_test.h"
#include "../algo/cost.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALIB_KEY "calib"

static atomic_bool keep_own; /* settings_test.h */

void coll__settings_test_keep_own(bool on)
{
    atomic_store(&keep_own, on);
}

static bool per_comm(const struct coll_param *p)
{
    return p->scope == COLL_SCOPE_COMM && p->offset != SIZE_MAX;
}

coll_status_t coll__settings_init(struct coll_comm *comm, const struct coll_comm *parent)
{
    struct coll_settings_agreed *a = calloc(1, sizeof(*a));
    const struct coll_settings_agreed *pa = parent ? parent->agreed : NULL;
    char mine[640], before[640];

    if (!a)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the comm's settings");
    comm->agreed = a;
    a->own = comm->cfg;
    if (!pa)
        return COLL_SUCCESS;
    /* The parent's ranks agreed already: where this rank's environment still says what it
     * said when the parent was made, the child keeps the parent's value, so that a child
     * whose rank 0 is another process does not fall back to that process's environment. A
     * setting changed since (every rank setting it before a split) is the child's own. */
    for (size_t i = 0; i < coll__nparams; i++) {
        const struct coll_param *p = &coll__params[i];
        if (!per_comm(p) || strcmp(coll__config_format(&comm->cfg, p, mine, sizeof(mine)),
                                   coll__config_format(&pa->own, p, before, sizeof(before))))
            continue;
        if (coll__config_set(comm, &comm->cfg, p,
                             coll__config_format(&parent->cfg, p, mine, sizeof(mine))) !=
            COLL_SUCCESS)
            return COLL_INTERNAL_ERROR; /* the parent's own value: cannot happen */
    }
    if (pa->calib_text && !strcmp(comm->cfg.calib_file, parent->cfg.calib_file)) {
        a->calib_text = strdup(pa->calib_text);
        if (!a->calib_text)
            return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the calibration");
        snprintf(a->calib_src, sizeof(a->calib_src), "%s", pa->calib_src);
    }
    return COLL_SUCCESS;
}

/* Append name\0value\0 to x's blob; false when it does not fit. */
static bool blob_put(struct coll_settings_xchg *x, const char *name, const char *value)
{
    size_t ln = strlen(name) + 1, lv = strlen(value) + 1;

    if (COLL_SETTINGS_BLOB_MAX - x->len < ln + lv)
        return false;
    memcpy(x->blob + x->len, name, ln);
    memcpy(x->blob + x->len + ln, value, lv);
    x->len += (uint32_t)(ln + lv);
    return true;
}

static void facts_encode(const struct coll_comm *comm, uint8_t *f)
{
    cpu_set_t set;

    memset(f, 0, COLL_SETTINGS_FACTS);
    put32(f, (uint32_t)comm->cfg.host_cpus);
    if (sched_getaffinity(0, sizeof(set), &set) < 0)
        return; /* an empty set: the host's ranks count without this one */
    for (int c = 0; c < (COLL_SETTINGS_FACTS - 8) * 8 && c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            f[8 + c / 8] |= (uint8_t)(1u << (c % 8));
}

coll_status_t coll__settings_prepare(struct coll_comm *comm)
{
    struct coll_settings_xchg *x = calloc(1, sizeof(*x));
    const struct coll_settings_agreed *a = comm->agreed;
    char value[640];
    bool fits = true;

    if (!x)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the settings exchange");
    comm->xchg = x;
    for (size_t i = 0; i < coll__nparams && fits; i++)
        if (per_comm(&coll__params[i]))
            fits = blob_put(x, coll__params[i].name,
                            coll__config_format(&comm->cfg, &coll__params[i], value,
                                                sizeof(value)));
    /* the calibration: where it came from, then its text */
    fits = fits && blob_put(x, CALIB_KEY, a && a->calib_text ? a->calib_src : "");
    if (fits && COLL_SETTINGS_BLOB_MAX - x->len > strlen(a && a->calib_text ? a->calib_text : "")) {
        const char *t = a && a->calib_text ? a->calib_text : "";
        memcpy(x->blob + x->len, t, strlen(t) + 1);
        x->len += (uint32_t)strlen(t) + 1;
    } else {
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "the per-comm settings and the calibration '%s' (%zu bytes) come to "
                           "more than the %d bytes a rank sends at comm creation",
                           a && a->calib_text ? a->calib_src : "",
                           a && a->calib_text ? strlen(a->calib_text) : 0,
                           COLL_SETTINGS_BLOB_MAX);
    }
    facts_encode(comm, x->facts);
    return COLL_SUCCESS;
}

/* The value of name in a blob (NULL when absent); for CALIB_KEY the source, with the text
 * that follows it in *text_p. */
static const char *blob_get(const uint8_t *blob, uint32_t len, const char *name,
                            const char **text_p)
{
    const char *p = (const char *)blob, *end = (const char *)blob + len;

    while (p < end) {
        const char *k = p, *v = k + strnlen(k, (size_t)(end - k)) + 1;
        if (v >= end)
            return NULL;
        p = v + strnlen(v, (size_t)(end - v)) + 1;
        if (strcmp(k, name))
            continue;
        if (text_p)
            *text_p = p < end ? p : "";
        return v;
    }
    return NULL;
}

/* "1, 3-5, 9" of the ranks whose blob is k (at most about n bytes). */
static void ranks_of(const struct coll_settings_xchg *x, int nranks, const bool *in, char *buf,
                     size_t n)
{
    size_t o = 0;
    int listed = 0;

    buf[0] = '\0';
    for (int r = 0; r < nranks; r++) {
        int e = r;
        if (!in[x->peer_blob[r]])
            continue;
        while (e + 1 < nranks && in[x->peer_blob[e + 1]])
            e++;
        if (listed++ == 6) {
            snprintf(buf + o, n - o, ", ...");
            return;
        }
        o += (size_t)snprintf(buf + o, n - o, e > r ? "%s%d-%d" : "%s%d", o ? ", " : "", r, e);
        if (o >= n)
            return;
        r = e;
    }
}

/* What ranks compare of a setting: its value; of the calibration, its text (two hosts may
 * hold different files under one name). */
static const char *compared(const uint8_t *blob, uint32_t len, const char *name)
{
    const char *text = NULL, *v = blob_get(blob, len, name, &text);

    return v && !strcmp(name, CALIB_KEY) ? text : v;
}

/* The ranks whose value of name is value, as text. */
static void ranks_with(const struct coll_comm *comm, const char *name, const char *value,
                       char *buf, size_t n)
{
    const struct coll_settings_xchg *x = comm->xchg;
    bool in[256], *sel = x->nblobs <= 256 ? in : calloc(x->nblobs, sizeof(bool));

    if (!sel) {
        snprintf(buf, n, "some");
        return;
    }
    for (uint32_t k = 0; k < x->nblobs; k++) {
        const char *v = compared(x->blobs[k], x->blob_len[k], name);
        sel[k] = v && !strcmp(v, value);
    }
    ranks_of(x, comm->nranks, sel, buf, n);
    if (sel != in)
        free(sel);
}

/* A value as the warning shows it; a calibration by where it was read. */
static const char *shown(const uint8_t *blob, uint32_t len, const char *name)
{
    const char *v = blob_get(blob, len, name, NULL);

    if (!strcmp(name, CALIB_KEY))
        return v && v[0] ? v : "built-in defaults";
    return v && v[0] ? v : "(empty: the default)";
}

static bool several(const char *ranks)
{
    return strchr(ranks, ',') || strchr(ranks, '-');
}

/* One warning per differing setting, naming every value and its ranks. */
static void warn_differs(const struct coll_comm *comm, const char *name, const char *what)
{
    const struct coll_settings_xchg *x = comm->xchg;
    const uint8_t *b0 = x->blobs[x->peer_blob[0]];
    const uint32_t l0 = x->blob_len[x->peer_blob[0]];
    const char *adopted = compared(b0, l0, name);
    char msg[1024], ranks[160];
    size_t o;

    ranks_with(comm, name, adopted, ranks, sizeof(ranks));
    o = (size_t)snprintf(msg, sizeof(msg), "%s differs between the ranks of comm %016llx: "
                         "rank%s %s ha%s '%s'", what, (unsigned long long)comm->comm_id,
                         several(ranks) ? "s" : "", ranks, several(ranks) ? "ve" : "s",
                         shown(b0, l0, name));
    for (uint32_t k = 0; k < x->nblobs && o < sizeof(msg); k++) {
        const char *v = compared(x->blobs[k], x->blob_len[k], name);
        bool seen = false;
        if (!v || !strcmp(v, adopted))
            continue;
        for (uint32_t j = 0; j < k && !seen; j++) {
            const char *w = compared(x->blobs[j], x->blob_len[j], name);
            seen = w && !strcmp(w, v);
        }
        if (seen)
            continue;
        ranks_with(comm, name, v, ranks, sizeof(ranks));
        o += (size_t)snprintf(msg + o, sizeof(msg) - o, ", rank%s %s '%s'",
                              several(ranks) ? "s" : "", ranks,
                              shown(x->blobs[k], x->blob_len[k], name));
    }
    if (o < sizeof(msg))
        snprintf(msg + o, sizeof(msg) - o, "; every rank uses rank 0's");
    coll__env_warn(comm->rank, "%s", msg);
}

/* The calibration: rank 0's text, parsed over the defaults, unless this rank's is the same. */
static coll_status_t agree_calib(struct coll_comm *comm, const uint8_t *b0, uint32_t l0,
                                 const uint8_t *mine, uint32_t lm)
{
    struct coll_settings_agreed *a = comm->agreed;
    const char *t0 = "", *tm = "", *s0 = blob_get(b0, l0, CALIB_KEY, &t0);
    const char *sm = blob_get(mine, lm, CALIB_KEY, &tm);
    struct coll_cost_params p;
    bool differs = false;
    coll_status_t st;

    if (!s0 || !sm)
        return coll__error(comm, COLL_REMOTE_ERROR, "rank 0 sent no calibration at comm "
                           "creation (a different version of coll?)");
    for (uint32_t k = 0; k < comm->xchg->nblobs && !differs; k++) {
        const char *t = compared(comm->xchg->blobs[k], comm->xchg->blob_len[k], CALIB_KEY);
        differs = !t || strcmp(t, t0);
    }
    if (differs)
        warn_differs(comm, CALIB_KEY, "the cost model's calibration (COLL_CALIB_FILE)");
    if (!strcmp(t0, tm))
        return COLL_SUCCESS;
    coll__cost_params_default(&p);
    if (t0[0]) {
        st = coll__cost_params_parse(&p, t0, s0);
        if (st != COLL_SUCCESS)
            return coll__error(comm, st, "rank 0's calibration '%s' does not parse here: %s", s0,
                               coll__thread_error());
    }
    if (comm->cost) {
        p.cores = comm->cost->cores;
        *comm->cost = p;
    }
    free(a->calib_text);
    a->calib_text = strdup(t0);
    if (!a->calib_text)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the calibration");
    snprintf(a->calib_src, sizeof(a->calib_src), "%s", s0);
    return COLL_SUCCESS;
}

/* The CPUs the cost model shares, from every rank's facts: per host, its lowest rank's
 * COLL_HOST_CPUS where set, else the union of its ranks' affinities; the fewest of any host,
 * the same number on every rank (each rank's own view would price, and pick, differently). */
static int32_t agree_cores(const struct coll_comm *comm)
{
    const struct coll_settings_xchg *x = comm->xchg;
    int32_t best = 0;

    for (int h = 0; h < comm->nranks; h++) {
        uint8_t mask[COLL_SETTINGS_FACTS - 8] = {0};
        int32_t cpus = 0;
        bool first = true;

        for (int q = 0; q < h && first; q++)
            first = comm->peers[q].host_hash != comm->peers[h].host_hash;
        if (!first)
            continue; /* host counted at its lowest rank */
        for (int r = h; r < comm->nranks; r++)
            if (comm->peers[r].host_hash == comm->peers[h].host_hash)
                for (size_t i = 0; i < sizeof(mask); i++)
                    mask[i] |= x->peer_facts[r][8 + i];
        if (get32(x->peer_facts[h]) > 0) {
            cpus = (int32_t)get32(x->peer_facts[h]);
        } else {
            for (size_t i = 0; i < sizeof(mask); i++)
                cpus += __builtin_popcount(mask[i]);
        }
        if (cpus > 0 && (best == 0 || cpus < best))
            best = cpus;
    }
    return best;
}

coll_status_t coll__settings_agree(struct coll_comm *comm)
{
    struct coll_settings_xchg *x = comm->xchg;
    const uint8_t *b0, *mine;
    uint32_t l0, lm;
    coll_status_t st;

    if (!x || !x->blobs)
        return COLL_SUCCESS; /* no exchange (a comm made without one) */
    b0 = x->blobs[x->peer_blob[0]];
    l0 = x->blob_len[x->peer_blob[0]];
    mine = x->blobs[x->peer_blob[comm->rank]];
    lm = x->blob_len[x->peer_blob[comm->rank]];
    for (size_t i = 0; i < coll__nparams && x->nblobs > 1; i++) {
        const struct coll_param *p = &coll__params[i];
        const char *v0, *vm;
        bool differs = false;

        if (!per_comm(p))
            continue;
        v0 = blob_get(b0, l0, p->name, NULL);
        vm = blob_get(mine, lm, p->name, NULL);
        if (!v0)
            return coll__error(comm, COLL_REMOTE_ERROR,
                               "rank 0 sent no value of %s at comm creation (a different "
                               "version of coll?)", p->name);
        for (uint32_t k = 0; k < x->nblobs && !differs; k++) {
            const char *v = blob_get(x->blobs[k], x->blob_len[k], p->name, NULL);
            differs = !v || strcmp(v, v0);
        }
        if (!differs)
            continue;
        warn_differs(comm, p->name, p->name);
        if ((!vm || strcmp(vm, v0)) && !atomic_load(&keep_own)) {
            st = coll__config_set(comm, &comm->cfg, p, v0);
            if (st != COLL_SUCCESS)
                return coll__error(comm, st, "cannot take rank 0's %s: %s", p->name,
                                   coll__thread_error());
        }
    }
    if (x->nblobs > 1 && !atomic_load(&keep_own)) {
        st = agree_calib(comm, b0, l0, mine, lm);
        if (st != COLL_SUCCESS)
            return st;
    }
    comm->agreed->cores = agree_cores(comm);
    return COLL_SUCCESS;
}

void coll__settings_xchg_free(struct coll_comm *comm)
{
    struct coll_settings_xchg *x = comm->xchg;

    if (!x)
        return;
    for (uint32_t k = 0; x->blobs && k < x->nblobs; k++)
        free(x->blobs[k]);
    free(x->blobs);
    free(x->blob_len);
    free(x->peer_blob);
    free(x->peer_facts);
    free(x);
    comm->xchg = NULL;
}

void coll__settings_free(struct coll_comm *comm)
{
    coll__settings_xchg_free(comm);
    if (comm->agreed)
        free(comm->agreed->calib_text);
    free(comm->agreed);
    comm->agreed = NULL;
}
