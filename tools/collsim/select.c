/*
 * select.c - which algorithms a row runs: the --algo list (auto, all, or names), and for
 * auto the selector's pick, ranked as the library ranks (src/algo/cost.h) on this run's
 * platform.
 */
#include "collsim.h"

#include <stdio.h>
#include <string.h>

/* algos[] gets the algorithms of o->algo_spec in order, NULL standing for the selector's
 * pick; EXIT_USAGE (after saying why) for a name that cannot run o->coll. */
int parse_algos(const struct opts *o, const struct coll_algo **algos, int *nalgos_p)
{
    int nalgos = *nalgos_p;

    if (!strcmp(o->algo_spec, "auto")) {
        algos[nalgos++] = NULL; /* NULL: the selector's pick */
    } else if (!strcmp(o->algo_spec, "all")) {
        for (int i = 0; coll__algos[i] && nalgos < MAX_ALGOS; i++)
            if (coll__algos[i]->colls & (1u << o->coll))
                algos[nalgos++] = coll__algos[i];
    } else {
        char buf[256], *save = NULL, *tok;
        snprintf(buf, sizeof(buf), "%s", o->algo_spec);
        for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            const struct coll_algo *al = coll__algo_find(tok);
            if (!strcmp(tok, "auto")) { /* the selector's pick, beside named ones */
                if (nalgos < MAX_ALGOS)
                    algos[nalgos++] = NULL;
                continue;
            }
            if (!al || !(al->colls & (1u << o->coll))) {
                fprintf(stderr, "collsim: unknown algorithm '%s' for %s\n", tok,
                        coll__coll_name(o->coll));
                list_algos(stderr, o->coll);
                return EXIT_USAGE;
            }
            if (nalgos < MAX_ALGOS)
                algos[nalgos++] = al;
        }
    }
    *nalgos_p = nalgos;
    return 0;
}

/* The first of the selector's ranking for query q (on this run's platform): its algorithm
 * and chunk; EXIT_SIMFAIL (after saying why, of what) when the model cannot price it. */
int select_first(const struct coll_cost_query *q, const char *what,
                 const struct coll_algo **algo_p, size_t *chunk_count_p)
{
    struct coll_cost_links links = {link_of, NULL, COLL_LINK_TCP};
    struct coll_cost_result res[48];
    size_t nres = 0;

    if (coll__cost_rank_algos(&S.p, &links, q, res, COLL_ARRAY_SIZE(res), &nres) !=
            COLL_SUCCESS || !nres) {
        fprintf(stderr, "collsim: the selector cannot price %s: %s\n", what,
                coll_last_error(NULL));
        return EXIT_SIMFAIL;
    }
    *algo_p = res[0].algo;
    *chunk_count_p = res[0].chunk_count;
    return 0;
}

/* The selector's pick for row w (its count set): the algorithm and chunk the library would
 * run; EXIT_SIMFAIL (after saying why) when the model cannot price the call. */
int select_pick(struct row *w, size_t bytes, int32_t *hostmap)
{
    const struct opts *o = &S.o;

    /* the selector's ranking (src/algo/select.c by_cost): its chunk sizes, the
     * platform's links, the first row wins */
    static const size_t chunks[] = COLL_COST_SELECT_CHUNKS;
    size_t forced = o->chunk;
    struct coll_cost_query q = {
        .coll = o->coll, .nranks = o->nranks, .root = o->root, .count = w->count,
        .dtype = o->dtype, .chunk_bytes = o->chunk_given ? &forced : chunks,
        .nchunk_bytes = o->chunk_given ? 1 : COLL_ARRAY_SIZE(chunks),
        .hosts = o->hosts > 1 ? hostmap : NULL, .nhosts = o->hosts > 1 ? o->hosts : 0,
        .closed = !o->exact,
    };
    char what[96];

    if (o->nranks == 1) {
        w->algo = coll__algos[0];
        for (int i = 0; coll__algos[i]; i++)
            if (coll__algos[i]->colls & (1u << o->coll)) {
                w->algo = coll__algos[i];
                break;
            }
        return 0;
    }
    snprintf(what, sizeof(what), "%s of %zu bytes on %d ranks", coll__coll_name(o->coll), bytes,
             o->nranks);
    return select_first(&q, what, &w->algo, &w->chunk_count);
}
