/*
 * test_schedule.c - every algorithm on every collective it claims, run by the simulator for
 * n = 1..64 ranks, counts 0, 1, n-1, n, n+1, 3n+1 and 10000, roots, chunk sizes, in place
 * and out of place, eager and rendezvous links, several orders; results checked against a
 * reference computed here. Also the schedule helpers, the structural promises (scratch
 * bounds, which buffers a rank may touch) and the simulator's own ability to fail.
 *
 * Divisions: 1 element encoding and the reference, 2 one simulated run, 3 helpers and
 * table, 4 the sweeps, 5 dtype x op, 6 structure, 7 the checker can fail.
 *
 * Build: gcc -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -Iinclude -Isrc
 *        src/algo/ *.c src/reduce/reduce.c src/core/log.c src/core/status.c tests/sim.c
 *        tests/test_schedule.c -o test_schedule -lpthread -lm
 */
#include "harness.h"
#include "sim.h"

#include "reduce/reduce.h"

#include <math.h>
#include <stdarg.h>

/* ---- 1 element encoding and the reference -------------------------------------------- */

static bool dt_is_float(coll_dtype_t dt)
{
    return dt == COLL_FLOAT16 || dt == COLL_FLOAT32 || dt == COLL_FLOAT64 || dt == COLL_BFLOAT16 ||
           dt == COLL_FLOAT8E4M3 || dt == COLL_FLOAT8E5M2;
}

static bool dt_is_signed(coll_dtype_t dt)
{
    return dt == COLL_INT8 || dt == COLL_INT32 || dt == COLL_INT64 || dt_is_float(dt);
}

/* exponent bits, mantissa bits, bias of the narrow floats */
static void narrow_format(coll_dtype_t dt, int *eb, int *mb, int *bias)
{
    switch (dt) {
    case COLL_FLOAT16:
        *eb = 5, *mb = 10, *bias = 15;
        break;
    case COLL_BFLOAT16:
        *eb = 8, *mb = 7, *bias = 127;
        break;
    case COLL_FLOAT8E4M3:
        *eb = 4, *mb = 3, *bias = 7;
        break;
    default: /* COLL_FLOAT8E5M2 */
        *eb = 5, *mb = 2, *bias = 15;
        break;
    }
}

static int mant_bits(coll_dtype_t dt)
{
    int eb, mb, bias;
    if (dt == COLL_FLOAT32)
        return 23;
    if (dt == COLL_FLOAT64)
        return 52;
    narrow_format(dt, &eb, &mb, &bias);
    return mb;
}

/* Our own decoding of the narrow floats (finite values, what the tests produce). */
static double narrow_decode(coll_dtype_t dt, uint32_t bits)
{
    int eb, mb, bias;
    uint32_t sign, e, m;
    double v;

    narrow_format(dt, &eb, &mb, &bias);
    sign = bits >> (eb + mb) & 1u;
    e = bits >> mb & ((1u << eb) - 1);
    m = bits & ((1u << mb) - 1);
    if (dt == COLL_FLOAT8E4M3 ? (e == 15 && m == 7) : e == (1u << eb) - 1)
        return NAN;
    if (e == 0)
        v = ldexp((double)m, 1 - bias - mb);
    else
        v = ldexp((double)(m | 1u << mb), (int)e - bias - mb);
    return sign ? -v : v;
}

/* Exact encoding of a small integer-valued v; the tests only use such values. */
static uint32_t narrow_encode(coll_dtype_t dt, double v)
{
    int eb, mb, bias, e;
    uint32_t sign = v < 0, mant;
    double a = fabs(v), frac;

    narrow_format(dt, &eb, &mb, &bias);
    if (a == 0)
        return 0;
    frac = frexp(a, &e); /* a = frac * 2^e, frac in [0.5, 1) */
    e -= 1;
    mant = (uint32_t)ldexp(frac * 2 - 1, mb);
    if (ldexp((double)(mant | 1u << mb), e - mb) != a)
        HARNESS_FAIL("%g is not exact in %s", v, coll__dtype_name(dt));
    return sign << (eb + mb) | (uint32_t)(e + bias) << mb | mant;
}

/* An element as a double (floats) or its bits zero-extended (integers, in *bits). */
static double get_elem(coll_dtype_t dt, const void *buf, size_t i, uint64_t *bits)
{
    const uint8_t *p = (const uint8_t *)buf + i * coll__dtype_size(dt);
    uint64_t u = 0;
    float f;
    double d;

    switch (dt) {
    case COLL_FLOAT32:
        memcpy(&f, p, 4);
        return f;
    case COLL_FLOAT64:
        memcpy(&d, p, 8);
        return d;
    case COLL_FLOAT16:
    case COLL_BFLOAT16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return narrow_decode(dt, h);
    }
    case COLL_FLOAT8E4M3:
    case COLL_FLOAT8E5M2:
        return narrow_decode(dt, *p);
    default:
        memcpy(&u, p, coll__dtype_size(dt)); /* little-endian host */
        *bits = u;
        return 0;
    }
}

static void put_elem(coll_dtype_t dt, void *buf, size_t i, double v, uint64_t bits)
{
    uint8_t *p = (uint8_t *)buf + i * coll__dtype_size(dt);
    float f;

    switch (dt) {
    case COLL_FLOAT32:
        f = (float)v;
        memcpy(p, &f, 4);
        break;
    case COLL_FLOAT64:
        memcpy(p, &v, 8);
        break;
    case COLL_FLOAT16:
    case COLL_BFLOAT16: {
        uint16_t h = (uint16_t)narrow_encode(dt, v);
        memcpy(p, &h, 2);
        break;
    }
    case COLL_FLOAT8E4M3:
    case COLL_FLOAT8E5M2:
        *p = (uint8_t)narrow_encode(dt, v);
        break;
    default:
        memcpy(p, &bits, coll__dtype_size(dt));
        break;
    }
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Input of rank r at element i. wide: any bits (integer sums, broadcasts), where nothing
 * rounds; otherwise small values chosen per op so that every partial result is exact in
 * every dtype whatever the order: sums of -1/0/1, products of -1/1 with at most one 2 per
 * element, max/min of -4..4 (unsigned: 0..2, one 2 per element, 0..8). frac: random
 * fractions in [-1, 1) for the tolerance tests of fp32/fp64. */
enum gen_kind { GEN_SMALL, GEN_WIDE, GEN_FRAC };

static void gen_input(coll_dtype_t dt, coll_op_t op, enum gen_kind g, int32_t n, int32_t r,
                      size_t i, uint64_t salt, double *v_p, uint64_t *bits_p)
{
    uint64_t h = mix(salt ^ mix(((uint64_t)r << 40) ^ i));
    bool sg = dt_is_signed(dt);
    int64_t v;

    *bits_p = 0;
    if (g == GEN_WIDE) {
        *bits_p = h;
        *v_p = (double)(int64_t)(h % 2001) - 1000; /* floats: -1000..1000, exact */
        return;
    }
    if (g == GEN_FRAC) {
        *v_p = (double)(h >> 11) / 9007199254740992.0 * 2 - 1;
        return;
    }
    switch (op) {
    case COLL_PROD:
        v = (r == (int32_t)(i % (size_t)n) && i % 3 == 0) ? 2 : 1;
        if (sg && h % 4 == 1)
            v = -v;
        break;
    case COLL_MAX:
    case COLL_MIN:
        v = sg ? (int64_t)(h % 9) - 4 : (int64_t)(h % 9);
        break;
    default: /* SUM, AVG */
        v = sg ? (int64_t)(h % 3) - 1 : (int64_t)(h % 3);
        break;
    }
    *v_p = (double)v;
    *bits_p = (uint64_t)v;
}

static uint64_t int_mask(coll_dtype_t dt)
{
    size_t b = coll__dtype_size(dt) * 8;
    return b >= 64 ? ~0ull : (1ull << b) - 1;
}

static int64_t sign_extend(coll_dtype_t dt, uint64_t u)
{
    size_t b = coll__dtype_size(dt) * 8;
    if (b >= 64)
        return (int64_t)u;
    u &= int_mask(dt);
    return (u >> (b - 1)) & 1 ? (int64_t)(u | ~int_mask(dt)) : (int64_t)u;
}

/* Fold x into acc for integers, in the dtype's width (wrapping like coll__reduce). */
static uint64_t int_op(coll_dtype_t dt, coll_op_t op, uint64_t acc, uint64_t x)
{
    bool sg = dt_is_signed(dt);
    switch (op) {
    case COLL_PROD:
        return (acc * x) & int_mask(dt);
    case COLL_MAX:
        if (sg)
            return sign_extend(dt, x) > sign_extend(dt, acc) ? x : acc;
        return (x & int_mask(dt)) > (acc & int_mask(dt)) ? x : acc;
    case COLL_MIN:
        if (sg)
            return sign_extend(dt, x) < sign_extend(dt, acc) ? x : acc;
        return (x & int_mask(dt)) < (acc & int_mask(dt)) ? x : acc;
    default:
        return (acc + x) & int_mask(dt);
    }
}

static double float_op(coll_op_t op, double acc, double x)
{
    switch (op) {
    case COLL_PROD:
        return acc * x;
    case COLL_MAX:
        return x > acc ? x : acc;
    case COLL_MIN:
        return x < acc ? x : acc;
    default:
        return acc + x;
    }
}

/* ---- 2 one simulated run ------------------------------------------------------------- */

struct run_cfg {
    const struct coll_algo *algo;
    enum coll_coll coll;
    int32_t n, root;
    size_t count, chunk;
    bool in_place;
    coll_dtype_t dtype;
    coll_op_t op;
    enum gen_kind gen;
    uint64_t seed;
    bool rendezvous;
    bool races; /* also run sim_check_races on every rank */
};

static char fail_msg[2048];

static int cfg_fail(const struct run_cfg *c, const char *fmt, ...) COLL_PRINTF(2, 3);
static int cfg_fail(const struct run_cfg *c, const char *fmt, ...)
{
    va_list ap;
    int w = snprintf(
        fail_msg, sizeof(fail_msg),
        "%s %s n=%d root=%d count=%zu chunk=%zu %s %s %s seed=%llu %s lazy=%d: ", c->algo->name,
        coll__coll_name(c->coll), c->n, c->root, c->count, c->chunk,
        c->in_place ? "in-place" : "out-of-place", coll__dtype_name(c->dtype), coll__op_name(c->op),
        (unsigned long long)c->seed, c->rendezvous ? "rendezvous" : "eager", (int)(c->seed % 3));
    va_start(ap, fmt);
    if (w >= 0 && (size_t)w < sizeof(fail_msg))
        vsnprintf(fail_msg + w, sizeof(fail_msg) - (size_t)w, fmt, ap);
    va_end(ap);
    return 1;
}

static struct coll_algo_args cfg_args(const struct run_cfg *c, int32_t r)
{
    struct coll_algo_args a = {
        .coll = c->coll,
        .nranks = c->n,
        .rank = r,
        .root = c->coll == COLL_COLL_ALLREDUCE ? 0 : c->root,
        .count = c->count,
        .dtype = c->dtype,
        .elem_size = coll__dtype_size(c->dtype),
        .chunk_count = c->chunk,
    };
    return a;
}

static void free_scheds(struct coll_schedule *s, int32_t n)
{
    for (int32_t r = 0; s && r < n; r++)
        coll__sched_free(&s[r]);
    free(s);
}

/* Build every rank's schedule and validate it; NULL (and fail_msg) on failure. */
static struct coll_schedule *build_all(const struct run_cfg *c)
{
    struct coll_schedule *s = calloc((size_t)c->n, sizeof(*s));

    ASSERT(s);
    for (int32_t r = 0; r < c->n; r++) {
        struct coll_algo_args a = cfg_args(c, r);
        coll_status_t st;
        coll__sched_init(&s[r], &a);
        st = c->algo->build(&a, &s[r]);
        s[r].algo = c->algo;
        if (st == COLL_SUCCESS)
            st = coll__sched_validate(&s[r]);
        if (st != COLL_SUCCESS) {
            cfg_fail(c, "rank %d: %s: %s", r, coll_status_string(st), coll_last_error(NULL));
            free_scheds(s, c->n);
            return NULL;
        }
    }
    return s;
}

static uint32_t ceil_log2(int32_t n)
{
    uint32_t l = 0;
    while ((1ll << l) < n)
        l++;
    return l;
}

/* The scratch each algorithm promises: a few chunks, never a multiple of count. */
static size_t scratch_bound(const struct run_cfg *c)
{
    size_t ch = COLL_MIN(c->chunk, c->count);
    const char *nm = c->algo->name;

    if (!strcmp(nm, "ring"))
        return 4 * ch;
    if (!strcmp(nm, "chain"))
        return COLL_TREE_SLOTS * ch;
    if (!strcmp(nm, "tree"))
        return COLL_TREE_SLOTS * 2 * ch;
    if (!strcmp(nm, "dbtree"))
        return COLL_TREE_SLOTS * 2 * ch;           /* two halves, one child each at the top */
    return COLL_TREE_SLOTS * ceil_log2(c->n) * ch; /* binomial */
}

/* What one schedule must satisfy whatever the order: the buffers it may touch, scratch. */
static int check_structure(const struct run_cfg *c, const struct coll_schedule *s, int32_t r)
{
    bool root = r == c->root;
    size_t sent = 0, bound = scratch_bound(c);

    if (c->count == 0 && s->nsteps != 0)
        return cfg_fail(c, "rank %d: %u steps for count 0", r, s->nsteps);
    if (c->coll == COLL_COLL_BROADCAST && !root && s->buf_count[COLL_BUF_SEND] != 0)
        return cfg_fail(c, "rank %d: a broadcast non-root touches SEND", r);
    if (c->coll == COLL_COLL_REDUCE && !root && s->buf_count[COLL_BUF_RECV] != 0)
        return cfg_fail(c, "rank %d: a reduce non-root touches RECV", r);
    if (s->buf_count[COLL_BUF_SCRATCH] > bound)
        return cfg_fail(c, "rank %d: %zu scratch elements, more than %zu", r,
                        s->buf_count[COLL_BUF_SCRATCH], bound);
    if (c->n == 1 && c->count > 0 && (s->nsteps != 1 || s->steps[0].kind != COLL_STEP_COPY))
        return cfg_fail(c, "one rank: %u steps, not a single copy", s->nsteps);
    for (uint32_t i = 0; i < s->nsteps; i++)
        if (s->steps[i].kind == COLL_STEP_SEND)
            sent += s->steps[i].src.count;
    /* bandwidth promises: ring sends 2(n-1) blocks; dbtree ranks are interior in one tree at
     * most, so an all-reduce sends at most 2 count (3 halves up and down, plus one leaf
     * half), a broadcast or reduce at most count (2 halves down or 1 up, plus 1 up) */
    if (!strcmp(c->algo->name, "ring") && c->n > 1 &&
        sent > 2 * (size_t)(c->n - 1) * ((c->count + (size_t)c->n - 1) / (size_t)c->n))
        return cfg_fail(c, "rank %d sends %zu elements", r, sent);
    if (!strcmp(c->algo->name, "dbtree") && c->coll == COLL_COLL_ALLREDUCE &&
        sent > 2 * c->count + 2)
        return cfg_fail(c, "rank %d sends %zu elements, more than 2 count", r, sent);
    if (!strcmp(c->algo->name, "dbtree") && c->coll != COLL_COLL_ALLREDUCE && sent > c->count + 1)
        return cfg_fail(c, "rank %d sends %zu elements", r, sent);
    return 0;
}

/* Does rank r hold the collective's result in RECV? */
static bool has_result(const struct run_cfg *c, int32_t r)
{
    return c->coll != COLL_COLL_REDUCE || r == c->root;
}

static int check_results(const struct run_cfg *c, void **recv)
{
    const coll_dtype_t dt = c->dtype;
    const bool fl = dt_is_float(dt);

    for (size_t i = 0; i < c->count; i++) {
        double ref = 0, sumabs = 0, v;
        uint64_t iref = 0, bits;

        /* the reference, folded in rank order */
        if (c->coll == COLL_COLL_BROADCAST) {
            gen_input(dt, c->op, c->gen, c->n, c->root, i, c->seed, &ref, &iref);
        } else {
            for (int32_t r = 0; r < c->n; r++) {
                gen_input(dt, c->op, c->gen, c->n, r, i, c->seed, &v, &bits);
                sumabs += fabs(v);
                if (r == 0) {
                    ref = v;
                    iref = bits & int_mask(dt);
                } else {
                    ref = float_op(c->op, ref, v);
                    iref = int_op(dt, c->op, iref, bits);
                }
            }
            if (c->op == COLL_AVG) {
                ref /= c->n;
                if (dt_is_signed(dt))
                    iref = (uint64_t)(sign_extend(dt, iref) / (int64_t)c->n) & int_mask(dt);
                else
                    iref = (iref & int_mask(dt)) / (uint64_t)c->n;
            }
        }
        for (int32_t r = 0; r < c->n; r++) {
            double got;
            uint64_t gbits = 0;
            if (!has_result(c, r))
                continue;
            got = get_elem(dt, recv[r], i, &gbits);
            if (!fl) {
                if ((gbits & int_mask(dt)) != (iref & int_mask(dt)))
                    return cfg_fail(c, "rank %d element %zu: got %#llx, want %#llx", r, i,
                                    (unsigned long long)(gbits & int_mask(dt)),
                                    (unsigned long long)(iref & int_mask(dt)));
            } else {
                /* exact where the inputs make it exact; otherwise one rounding per fold */
                double eps = ldexp(1.0, -mant_bits(dt));
                double tol = c->gen == GEN_FRAC  ? 4 * c->n * eps * (sumabs + fabs(ref))
                             : c->op == COLL_AVG ? eps * fabs(ref)
                                                 : 0;
                if (c->gen == GEN_FRAC && c->op == COLL_PROD)
                    tol = 4 * c->n * eps * fabs(ref);
                if (!(fabs(got - ref) <= tol))
                    return cfg_fail(c, "rank %d element %zu: got %.9g, want %.9g (tol %.3g)", r, i,
                                    got, ref, tol);
            }
        }
    }
    return 0;
}

/* Build, check structure, simulate, compare. 0 when everything holds; else fail_msg. */
static int run_case(const struct run_cfg *c)
{
    const size_t esz = coll__dtype_size(c->dtype), bytes = c->count * esz;
    struct coll_schedule *s = build_all(c);
    struct sim_mem *mem;
    void **sendb, **recvb;
    struct sim_opts o = {
        .seed = c->seed,
        .rendezvous = c->rendezvous,
        .lazy = (int)(c->seed % 3),
        .dtype = c->dtype,
        .op = c->op,
        .coll = c->coll,
        .root = c->root,
        .count = c->count,
    };
    char err[1024];
    int rc = 0, st;

    if (!s)
        return 1;
    mem = calloc((size_t)c->n, sizeof(*mem));
    sendb = calloc((size_t)c->n, sizeof(*sendb));
    recvb = calloc((size_t)c->n, sizeof(*recvb));
    ASSERT(mem && sendb && recvb);
    for (int32_t r = 0; r < c->n && !rc; r++) {
        bool root = r == c->root;
        /* where the API allows NULL, pass NULL: a touch is then a bounds error */
        bool want_send = c->coll != COLL_COLL_BROADCAST || root;
        bool want_recv = c->coll != COLL_COLL_REDUCE || root;

        rc = check_structure(c, &s[r], r);
        if (!rc && c->races && (st = sim_check_races(&s[r], err, sizeof(err))) != SIM_OK &&
            st != SIM_TOO_LARGE)
            rc = cfg_fail(c, "%s", err);
        if (want_send) {
            sendb[r] = malloc(bytes + 1);
            ASSERT(sendb[r]);
            for (size_t i = 0; i < c->count; i++) {
                double v;
                uint64_t bits;
                gen_input(c->dtype, c->op, c->gen, c->n, r, i, c->seed, &v, &bits);
                put_elem(c->dtype, sendb[r], i, v, bits);
            }
            mem[r].send = sendb[r];
            mem[r].send_count = c->count;
        }
        if (want_recv) {
            if (c->in_place && want_send) {
                recvb[r] = sendb[r];
            } else {
                recvb[r] = malloc(bytes + 1);
                ASSERT(recvb[r]);
                memset(recvb[r], 0x5a, bytes); /* a result never written shows */
            }
            mem[r].recv = recvb[r];
            mem[r].recv_count = c->count;
        }
    }
    if (!rc) {
        st = sim_run(s, c->n, mem, &o, NULL, err, sizeof(err));
        if (st != SIM_OK)
            rc = cfg_fail(c, "%s", err);
    }
    if (!rc)
        rc = check_results(c, recvb);
    for (int32_t r = 0; r < c->n; r++) {
        if (recvb[r] != sendb[r])
            free(recvb[r]);
        free(sendb[r]);
    }
    free(recvb);
    free(sendb);
    free(mem);
    free_scheds(s, c->n);
    return rc;
}

#define RUN_OK(cfg)                                                                                \
    do {                                                                                           \
        if (run_case(cfg))                                                                         \
            HARNESS_FAIL("%s", fail_msg);                                                          \
    } while (0)

/* ---- 3 helpers and the table --------------------------------------------------------- */

static const struct coll_algo *algo(const char *name)
{
    const struct coll_algo *a = coll__algo_find(name);
    if (!a)
        HARNESS_FAIL("no algorithm '%s'", name);
    return a;
}

TEST(table_names_and_lookup)
{
    int count = 0;
    for (int i = 0; coll__algos[i]; i++, count++) {
        const struct coll_algo *a = coll__algos[i];
        ASSERT(a->name && a->desc && a->build && a->colls);
        ASSERT(coll__algo_find(a->name) == a);
        for (int j = 0; j < i; j++)
            ASSERT(strcmp(coll__algos[j]->name, a->name) != 0);
    }
    ASSERT_EQ(count, 5);
    ASSERT(coll__algo_find("nope") == NULL);
    ASSERT(coll__algo_find(NULL) == NULL);
    ASSERT(algo("ring")->colls == 1u << COLL_COLL_ALLREDUCE);
    ASSERT(!strcmp(coll__coll_name(COLL_COLL_ALLREDUCE), "allreduce"));
    ASSERT(!strcmp(coll__coll_name(COLL_COLL_BROADCAST), "broadcast"));
    ASSERT(!strcmp(coll__coll_name(COLL_COLL_REDUCE), "reduce"));
    ASSERT(!strcmp(coll__coll_name(COLL_NUM_COLLS), "unknown"));
    for (int c = 0; c < COLL_NUM_COLLS; c++)
        ASSERT(strcmp(coll__coll_name((enum coll_coll)c), "unknown") != 0);
}

TEST(builders_reject_bad_arguments)
{
    struct coll_algo_args a = {.coll = COLL_COLL_BROADCAST,
                               .nranks = 4,
                               .rank = 1,
                               .root = 0,
                               .count = 10,
                               .dtype = COLL_FLOAT32,
                               .elem_size = 4,
                               .chunk_count = 4};
    struct coll_schedule s;

    coll__sched_init(&s, &a);
    ASSERT_EQ(algo("ring")->build(&a, &s), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "cannot run broadcast");
    a.coll = COLL_COLL_ALLREDUCE;
    a.rank = 4;
    ASSERT_EQ(algo("ring")->build(&a, &s), COLL_INVALID_ARGUMENT);
    a.rank = 1;
    a.chunk_count = 0;
    ASSERT_EQ(algo("tree")->build(&a, &s), COLL_INVALID_ARGUMENT);
    a.chunk_count = 4;
    a.coll = COLL_COLL_REDUCE;
    a.root = -1;
    ASSERT_EQ(algo("chain")->build(&a, &s), COLL_INVALID_ARGUMENT);
    a.root = 3;
    ASSERT_EQ(algo("chain")->build(&a, &s), COLL_SUCCESS);
    ASSERT(s.nsteps > 0);
    coll__sched_free(&s);
    ASSERT(s.steps == NULL && s.nsteps == 0);
}

TEST(sched_add_grows_buf_count)
{
    struct coll_algo_args a = {.nranks = 3, .rank = 1, .dtype = COLL_INT64, .chunk_count = 1};
    struct coll_schedule s;
    uint32_t idx = 99, deps[5] = {0, 1, 2, 3, 4};

    coll__log_level = COLL_LOG_NONE; /* the errors below are expected: keep TAP clean */
    coll__sched_init(&s, &a);
    ASSERT_EQ(s.elem_size, 8);
    ASSERT_EQ(coll__sched_recv(&s, 0, coll__slice(COLL_BUF_SCRATCH, 4, 6), 0, NULL, &idx),
              COLL_SUCCESS);
    ASSERT_EQ(idx, 0);
    ASSERT_EQ(s.buf_count[COLL_BUF_SCRATCH], 10);
    ASSERT_EQ(coll__sched_reduce(&s, coll__slice(COLL_BUF_RECV, 2, 6),
                                 coll__slice(COLL_BUF_SEND, 2, 6),
                                 coll__slice(COLL_BUF_SCRATCH, 4, 6), 1, &idx, &idx),
              COLL_SUCCESS);
    ASSERT_EQ(idx, 1);
    ASSERT_EQ(s.buf_count[COLL_BUF_SEND], 8);
    ASSERT_EQ(s.buf_count[COLL_BUF_RECV], 8);
    ASSERT_EQ(coll__sched_send(&s, 2, coll__slice(COLL_BUF_RECV, 0, 20), 1, &idx, NULL),
              COLL_SUCCESS);
    ASSERT_EQ(s.buf_count[COLL_BUF_RECV], 20);
    ASSERT_EQ(s.buf_count[COLL_BUF_SCRATCH], 10);
    ASSERT_EQ(s.steps[2].peer, 2);
    ASSERT_EQ(s.steps[1].peer, -1);
    ASSERT_EQ(s.steps[1].deps[0], 0);
    ASSERT_EQ(coll__sched_copy(&s, coll__slice(COLL_BUF_RECV, 0, 1),
                               coll__slice(COLL_BUF_SEND, 0, 1), 5, deps, NULL),
              COLL_INTERNAL_ERROR);
    for (int i = 0; i < 200; i++) /* growth */
        ASSERT_EQ(coll__sched_copy(&s, coll__slice(COLL_BUF_RECV, (size_t)i, 1),
                                   coll__slice(COLL_BUF_SEND, (size_t)i, 1), 0, NULL, &idx),
                  COLL_SUCCESS);
    ASSERT_EQ(s.nsteps, 203);
    ASSERT_EQ(idx, 202);
    ASSERT_EQ(coll__sched_validate(&s), COLL_SUCCESS);
    coll__sched_free(&s);
}

/* A small valid schedule of rank 0 of 2, then one corruption at a time. */
static void make_small(struct coll_schedule *s)
{
    struct coll_algo_args a = {
        .nranks = 2, .rank = 0, .dtype = COLL_INT32, .elem_size = 4, .chunk_count = 1};
    uint32_t r;
    coll__sched_init(s, &a);
    ASSERT_EQ(coll__sched_recv(s, 1, coll__slice(COLL_BUF_SCRATCH, 0, 4), 0, NULL, &r), 0);
    ASSERT_EQ(coll__sched_reduce(s, coll__slice(COLL_BUF_RECV, 0, 4),
                                 coll__slice(COLL_BUF_SEND, 0, 4),
                                 coll__slice(COLL_BUF_SCRATCH, 0, 4), 1, &r, &r),
              0);
    ASSERT_EQ(coll__sched_send(s, 1, coll__slice(COLL_BUF_RECV, 0, 4), 1, &r, NULL), 0);
    ASSERT_EQ(coll__sched_validate(s), COLL_SUCCESS);
}

#define EXPECT_INVALID(mutation, text)                                                             \
    do {                                                                                           \
        struct coll_schedule s_;                                                                   \
        make_small(&s_);                                                                           \
        {                                                                                          \
            struct coll_schedule *s = &s_;                                                         \
            mutation;                                                                              \
        }                                                                                          \
        ASSERT_EQ(coll__sched_validate(&s_), COLL_INTERNAL_ERROR);                                 \
        ASSERT_STR_CONTAINS(coll_last_error(NULL), text);                                          \
        coll__sched_free(&s_);                                                                     \
    } while (0)

TEST(validate_names_what_is_wrong)
{
    coll__log_level = COLL_LOG_NONE; /* the errors below are expected: keep TAP clean */
    EXPECT_INVALID(s->steps[1].deps[0] = 1, "depends on step 1");
    EXPECT_INVALID(s->steps[2].deps[0] = 7, "depends on step 7");
    EXPECT_INVALID(s->steps[2].peer = 0, "not another rank");
    EXPECT_INVALID(s->steps[2].peer = 2, "not another rank");
    EXPECT_INVALID(s->steps[0].dst.count = 0, "empty");
    EXPECT_INVALID(s->steps[2].src.count = 9, "outside");
    EXPECT_INVALID(s->steps[0].dst.buf = 7, "buffer 7");
    EXPECT_INVALID(s->steps[1].dst.buf = COLL_BUF_SEND, "writes the send buffer");
    EXPECT_INVALID(s->steps[1].src.off = 1; s->steps[1].src.count = 3, "counts differ");
    EXPECT_INVALID(
        (s->steps[1].src = coll__slice(COLL_BUF_SEND, 1, 4), s->buf_count[COLL_BUF_SEND] = 5),
        "partly overlaps");
    EXPECT_INVALID(s->steps[1].peer = 1, "names a peer");
    EXPECT_INVALID(s->steps[1].kind = 9, "unknown step kind");
    EXPECT_INVALID(s->steps[1].ndeps = 5, "too many");
    EXPECT_INVALID(s->rank = 2, "rank 2 of 2");
}

/* ---- 4 the sweeps -------------------------------------------------------------------- */

static const size_t sweep_chunks[] = {1, 2, 3, 5, 16, 1u << 20};
#define NCHUNKS COLL_ARRAY_SIZE(sweep_chunks)

/* n = 1..64 x counts {0, 1, n-1, n, n+1, 3n+1} x roots (all for n <= 16, three above, three
 * runs of root 0 for all-reduce); the chunk size, placement, link mode and seed rotate
 * across the cases so that each value meets many others. The race check runs on every
 * schedule. */
static void sweep(const char *name, enum coll_coll coll)
{
    const bool rooted = coll != COLL_COLL_ALLREDUCE;
    unsigned k = 0;

    for (int32_t n = 1; n <= 64; n++) {
        const size_t counts[] = {0, 1, (size_t)n - 1, (size_t)n, (size_t)n + 1, 3 * (size_t)n + 1};
        int32_t roots[16], nroots = 0;

        if (!rooted) /* one root: three variants (chunk, placement, seed) instead */
            for (int v = 0; v < 3; v++)
                roots[nroots++] = 0;
        else if (n <= 16)
            for (int32_t r = 0; r < n; r++)
                roots[nroots++] = r;
        else {
            roots[nroots++] = 0;
            roots[nroots++] = n - 1;
            roots[nroots++] = (int32_t)(mix((uint64_t)n) % (uint64_t)n);
        }
        for (size_t ci = 0; ci < COLL_ARRAY_SIZE(counts); ci++)
            for (int32_t ri = 0; ri < nroots; ri++, k++) {
                struct run_cfg c = {
                    .algo = algo(name),
                    .coll = coll,
                    .n = n,
                    .root = roots[ri],
                    .count = counts[ci],
                    .dtype = COLL_INT32,
                    .op = COLL_SUM,
                    .gen = GEN_WIDE,
                    .seed = mix(k * 7919u + (uint64_t)n),
                };
                c.chunk = sweep_chunks[(k + ci) % NCHUNKS];
                c.in_place = (k / 3) % 2;
                c.rendezvous = k % 2;
                c.races = true;
                RUN_OK(&c);
            }
    }
    fprintf(stderr, "# %s %s: %u cases\n", name, coll__coll_name(coll), k);
}

/* count 10000 cut into many chunks, for a spread of n, with the race check. */
static void sweep_large(const char *name, enum coll_coll coll)
{
    static const int32_t ns[] = {2, 3, 7, 16, 33, 64};
    for (size_t i = 0; i < COLL_ARRAY_SIZE(ns); i++) {
        struct run_cfg c = {
            .algo = algo(name),
            .coll = coll,
            .n = ns[i],
            .root = coll == COLL_COLL_ALLREDUCE ? 0 : (int32_t)(mix(i) % (uint64_t)ns[i]),
            .count = 10000,
            .chunk = i % 2 ? 37 : 128,
            .in_place = i % 2 == 0,
            .dtype = COLL_INT32,
            .op = COLL_SUM,
            .gen = GEN_WIDE,
            .seed = 1000 + i,
            .rendezvous = i % 3 == 0,
            .races = true,
        };
        RUN_OK(&c);
    }
}

/* Small n, every root, both placements, both link modes, several seeds: orders. */
static void sweep_orders(const char *name, enum coll_coll coll)
{
    static const int32_t ns[] = {2, 3, 4, 5, 7, 8, 9, 12};
    for (size_t i = 0; i < COLL_ARRAY_SIZE(ns); i++)
        for (int32_t root = 0; root < (coll == COLL_COLL_ALLREDUCE ? 1 : ns[i]); root++)
            for (int v = 0; v < 8; v++) {
                struct run_cfg c = {
                    .algo = algo(name),
                    .coll = coll,
                    .n = ns[i],
                    .root = root,
                    .count = 3 * (size_t)ns[i] + 2 + (size_t)v,
                    .chunk = 1 + (size_t)(v / 2),
                    .in_place = v & 1,
                    .dtype = COLL_INT32,
                    .op = COLL_SUM,
                    .gen = GEN_WIDE,
                    .seed = mix(((uint64_t)i << 32) ^ ((uint64_t)root << 8) ^ (uint64_t)v),
                    .rendezvous = (v >> 1) & 1,
                    .races = v == 0,
                };
                RUN_OK(&c);
            }
}

#define SWEEPS(algoname, collname, coll)                                                           \
    TEST(algoname##_##collname##_sweep)                                                            \
    {                                                                                              \
        sweep(#algoname, coll);                                                                    \
    }                                                                                              \
    TEST(algoname##_##collname##_large)                                                            \
    {                                                                                              \
        sweep_large(#algoname, coll);                                                              \
    }                                                                                              \
    TEST(algoname##_##collname##_orders)                                                           \
    {                                                                                              \
        sweep_orders(#algoname, coll);                                                             \
    }

SWEEPS(ring, allreduce, COLL_COLL_ALLREDUCE)
SWEEPS(tree, allreduce, COLL_COLL_ALLREDUCE)
SWEEPS(tree, broadcast, COLL_COLL_BROADCAST)
SWEEPS(tree, reduce, COLL_COLL_REDUCE)
SWEEPS(dbtree, allreduce, COLL_COLL_ALLREDUCE)
SWEEPS(dbtree, broadcast, COLL_COLL_BROADCAST)
SWEEPS(dbtree, reduce, COLL_COLL_REDUCE)
SWEEPS(chain, broadcast, COLL_COLL_BROADCAST)
SWEEPS(chain, reduce, COLL_COLL_REDUCE)
SWEEPS(binomial, broadcast, COLL_COLL_BROADCAST)
SWEEPS(binomial, reduce, COLL_COLL_REDUCE)
SWEEPS(binomial, allreduce, COLL_COLL_ALLREDUCE)

TEST(every_claimed_collective_is_swept)
{
    /* the SWEEPS list above must cover the table: a new pairing needs a sweep */
    static const char *const swept[] = {
        "ring allreduce",   "tree allreduce",     "tree broadcast",  "tree reduce",
        "dbtree allreduce", "dbtree broadcast",   "dbtree reduce",   "chain broadcast",
        "chain reduce",     "binomial broadcast", "binomial reduce", "binomial allreduce",
    };
    int claimed = 0;
    for (int i = 0; coll__algos[i]; i++)
        for (int c = 0; c < COLL_NUM_COLLS; c++) {
            char key[64];
            bool found = false;
            if (!(coll__algos[i]->colls & (1u << c)))
                continue;
            claimed++;
            snprintf(key, sizeof(key), "%s %s", coll__algos[i]->name,
                     coll__coll_name((enum coll_coll)c));
            for (size_t j = 0; j < COLL_ARRAY_SIZE(swept); j++)
                found |= !strcmp(swept[j], key);
            ASSERT_MSG(found, "%s is not swept", key);
        }
    ASSERT_EQ(claimed, (int)COLL_ARRAY_SIZE(swept));
}

/* ---- 5 dtype x op -------------------------------------------------------------------- */

/* Every dtype and op at a few (n, count, chunk) points for every pairing. Narrow floats only
 * up to n = 8, where sums of -1/0/1 stay exact in fp8. */
TEST(dtypes_and_ops)
{
    static const struct {
        int32_t n;
        size_t count, chunk;
    } pts[] = {{2, 5, 2}, {3, 7, 2}, {8, 29, 3}, {13, 40, 4}};
    unsigned k = 0;

    for (int i = 0; coll__algos[i]; i++)
        for (int c = 0; c < 3; c++) {
            if (!(coll__algos[i]->colls & (1u << c)))
                continue;
            for (int dt = 0; dt < COLL_NUM_DTYPES; dt++)
                for (int op = 0; op < COLL_NUM_OPS; op++)
                    for (size_t p = 0; p < COLL_ARRAY_SIZE(pts); p++, k++) {
                        struct run_cfg cfg = {
                            .algo = coll__algos[i],
                            .coll = (enum coll_coll)c,
                            .n = pts[p].n,
                            .root = (int32_t)(k % (unsigned)pts[p].n),
                            .count = pts[p].count,
                            .chunk = pts[p].chunk,
                            .in_place = k % 2,
                            .dtype = (coll_dtype_t)dt,
                            .op = (coll_op_t)op,
                            .gen = GEN_SMALL,
                            .seed = k,
                            .rendezvous = (k / 2) % 2,
                        };
                        if (pts[p].n > 8 && coll__dtype_size(cfg.dtype) == 1 &&
                            dt_is_float(cfg.dtype))
                            continue;
                        if (c == COLL_COLL_BROADCAST && op != COLL_SUM)
                            continue; /* op-agnostic */
                        RUN_OK(&cfg);
                    }
        }
}

/* fp32/fp64 with random fractions: order-dependent rounding, within n * eps * magnitude. */
TEST(float_fractions_within_tolerance)
{
    static const coll_op_t ops[] = {COLL_SUM, COLL_AVG, COLL_PROD, COLL_MAX, COLL_MIN};
    unsigned k = 0;
    for (int i = 0; coll__algos[i]; i++)
        for (int c = 0; c < 3; c++) {
            if (!(coll__algos[i]->colls & (1u << c)) || c == COLL_COLL_BROADCAST)
                continue;
            for (int dt = 0; dt < 2; dt++)
                for (size_t o = 0; o < COLL_ARRAY_SIZE(ops); o++, k++) {
                    struct run_cfg cfg = {
                        .algo = coll__algos[i],
                        .coll = (enum coll_coll)c,
                        .n = 11,
                        .root = (int32_t)(k % 11),
                        .count = 100,
                        .chunk = 7,
                        .in_place = k % 2,
                        .dtype = dt ? COLL_FLOAT64 : COLL_FLOAT32,
                        .op = ops[o],
                        .gen = GEN_FRAC,
                        .seed = 77 + k,
                        .rendezvous = k % 3 == 0,
                    };
                    RUN_OK(&cfg);
                }
        }
}

/* ---- 6 structure --------------------------------------------------------------------- */

/* Every rank of the double binary tree is interior (has children) in one tree at most. */
TEST(dbtree_interior_in_one_tree_at_most)
{
    for (int32_t n = 1; n <= 64; n++)
        for (int32_t root = 0; root < n; root += 1 + n / 5) {
            struct run_cfg c = {.algo = algo("dbtree"),
                                .coll = COLL_COLL_BROADCAST,
                                .n = n,
                                .root = root,
                                .count = 2 * 64,
                                .chunk = 64,
                                .dtype = COLL_INT32};
            struct coll_schedule *s = build_all(&c);
            ASSERT_MSG(s, "%s", fail_msg);
            for (int32_t r = 0; r < n; r++) {
                /* a broadcast rank sends each of its two chunks to its children in that
                 * chunk's tree: count the chunks that it sends at all */
                bool sends_half[2] = {false, false};
                for (uint32_t i = 0; i < s[r].nsteps; i++)
                    if (s[r].steps[i].kind == COLL_STEP_SEND)
                        sends_half[s[r].steps[i].src.off >= 64] = true;
                ASSERT_MSG(r == root || !(sends_half[0] && sends_half[1]),
                           "n=%d root=%d: rank %d is interior in both trees", n, root, r);
            }
            free_scheds(s, n);
        }
}

/* Unchunked schedules have the classic shapes: message counts per rank. */
TEST(message_counts_match_the_patterns)
{
    for (int32_t n = 2; n <= 40; n++) {
        struct run_cfg c = {.algo = algo("ring"),
                            .coll = COLL_COLL_ALLREDUCE,
                            .n = n,
                            .count = 10 * (size_t)n,
                            .chunk = 1u << 20,
                            .dtype = COLL_INT32};
        struct coll_schedule *s = build_all(&c);
        uint32_t l = ceil_log2(n);
        ASSERT_MSG(s, "%s", fail_msg);
        for (int32_t r = 0; r < n; r++) {
            uint32_t sends = 0;
            for (uint32_t i = 0; i < s[r].nsteps; i++)
                sends += s[r].steps[i].kind == COLL_STEP_SEND;
            ASSERT_EQ(sends, 2 * (uint32_t)(n - 1)); /* 2(n-1) alpha */
        }
        free_scheds(s, n);

        c.algo = algo("binomial");
        c.coll = COLL_COLL_BROADCAST;
        c.root = n / 3;
        s = build_all(&c);
        ASSERT_MSG(s, "%s", fail_msg);
        {
            uint32_t root_sends = 0, total = 0;
            for (int32_t r = 0; r < n; r++)
                for (uint32_t i = 0; i < s[r].nsteps; i++)
                    if (s[r].steps[i].kind == COLL_STEP_SEND) {
                        total++;
                        root_sends += r == c.root;
                    }
            ASSERT_EQ(root_sends, l); /* ceil(log2 n) rounds */
            ASSERT_EQ(total, (uint32_t)n - 1);
        }
        free_scheds(s, n);
    }
}

/* ---- 7 the checker can fail ---------------------------------------------------------- */

/* Remove step i from s: later steps shift down, dependencies on it disappear. */
static void remove_step(struct coll_schedule *s, uint32_t i)
{
    for (uint32_t j = i + 1; j < s->nsteps; j++) {
        struct coll_step st = s->steps[j];
        uint32_t nd = 0;
        for (uint32_t d = 0; d < st.ndeps; d++)
            if (st.deps[d] != i)
                st.deps[nd++] = st.deps[d] > i ? st.deps[d] - 1 : st.deps[d];
        st.ndeps = nd;
        s->steps[j - 1] = st;
    }
    s->nsteps--;
}

/* Run c's schedules after mutate(s) through the simulator for seeds; returns how many of
 * the runs fail (a simulator error or a wrong result), with the last status in *st_p. */
static int broken_runs(const struct run_cfg *base, void (*mutate)(struct coll_schedule *),
                       int seeds, int *st_p, char *err, size_t errlen)
{
    int failures = 0;
    *st_p = SIM_OK;
    for (int k = 0; k < seeds; k++) {
        struct run_cfg c = *base;
        struct coll_schedule *s = build_all(&c);
        struct sim_mem *mem = calloc((size_t)c.n, sizeof(*mem));
        void **bufs = calloc((size_t)c.n * 2, sizeof(void *));
        struct sim_opts o = {.seed = (uint64_t)k,
                             .rendezvous = c.rendezvous,
                             .lazy = k % 3,
                             .dtype = c.dtype,
                             .op = c.op,
                             .coll = c.coll,
                             .root = c.root,
                             .count = c.count};
        int st;

        ASSERT(s && mem && bufs);
        mutate(s);
        c.seed = (uint64_t)k;
        for (int32_t r = 0; r < c.n; r++) {
            bufs[2 * r] = calloc(c.count + 1, coll__dtype_size(c.dtype));
            bufs[2 * r + 1] =
                c.in_place ? bufs[2 * r] : calloc(c.count + 1, coll__dtype_size(c.dtype));
            for (size_t i = 0; i < c.count; i++) {
                double v;
                uint64_t bits;
                gen_input(c.dtype, c.op, c.gen, c.n, r, i, c.seed, &v, &bits);
                put_elem(c.dtype, bufs[2 * r], i, v, bits);
            }
            mem[r] = (struct sim_mem){bufs[2 * r], bufs[2 * r + 1], c.count, c.count};
        }
        st = sim_run(s, c.n, mem, &o, NULL, err, errlen);
        if (st != SIM_OK) {
            *st_p = st;
            failures++;
        } else {
            void **recv = calloc((size_t)c.n, sizeof(void *));
            ASSERT(recv);
            for (int32_t r = 0; r < c.n; r++)
                recv[r] = bufs[2 * r + 1];
            failures += check_results(&c, recv) != 0;
            free(recv);
        }
        for (int32_t r = 0; r < c.n; r++) {
            if (bufs[2 * r + 1] != bufs[2 * r])
                free(bufs[2 * r + 1]);
            free(bufs[2 * r]);
        }
        free(bufs);
        free(mem);
        free_scheds(s, c.n);
    }
    return failures;
}

static const struct run_cfg ring5 = {
    .coll = COLL_COLL_ALLREDUCE,
    .n = 5,
    .count = 60,
    .chunk = 2,
    .dtype = COLL_INT32,
    .op = COLL_SUM,
    .gen = GEN_WIDE,
};

/* Rank 2's receives into scratch lose their wait for the reduce that last read the slot. */
static void drop_slot_deps(struct coll_schedule *s)
{
    for (uint32_t i = 0; i < s[2].nsteps; i++)
        if (s[2].steps[i].kind == COLL_STEP_RECV && s[2].steps[i].dst.buf == COLL_BUF_SCRATCH)
            s[2].steps[i].ndeps = 0;
}

/* Rank 1's all-gather receives lose their wait for the send that read the same place. */
static void drop_war_deps(struct coll_schedule *s)
{
    for (uint32_t i = 0; i < s[1].nsteps; i++)
        if (s[1].steps[i].kind == COLL_STEP_RECV && s[1].steps[i].dst.buf == COLL_BUF_RECV)
            s[1].steps[i].ndeps = 0;
}

/* Rank 3's reduce-scatter sends lose their wait for the reduce that produced the data. */
static void drop_raw_deps(struct coll_schedule *s)
{
    for (uint32_t i = 0; i < s[3].nsteps; i++)
        if (s[3].steps[i].kind == COLL_STEP_SEND && s[3].steps[i].ndeps == 1 &&
            s[3].steps[i].src.off > 10)
            s[3].steps[i].ndeps = 0;
}

static void check_drop(void (*mutate)(struct coll_schedule *), const char *what)
{
    struct run_cfg c = ring5;
    struct coll_schedule *s;
    char err[1024];
    int st, bad, races = 0;

    c.algo = algo("ring");
    /* the static check names the race on the mutated rank */
    s = build_all(&c);
    ASSERT(s);
    mutate(s);
    for (int32_t r = 0; r < c.n; r++) {
        int rs = sim_check_races(&s[r], err, sizeof(err));
        ASSERT(rs == SIM_OK || rs == SIM_RACE);
        if (rs == SIM_RACE)
            fprintf(stderr, "# %s: %s\n", what, err);
        races += rs == SIM_RACE;
    }
    ASSERT_MSG(races == 1, "%s: %d ranks with races", what, races);
    free_scheds(s, c.n);
    /* and some random orders turn it into a wrong result or a changed send source */
    c.in_place = true;
    bad = broken_runs(&c, mutate, 40, &st, err, sizeof(err));
    fprintf(stderr, "# %s: %d of 40 orders fail (last simulator status: %s)\n", what, bad,
            sim_status_name(st));
    ASSERT_MSG(bad > 0, "%s: no order exposes it", what);
}

TEST(checker_catches_missing_slot_dependency)
{
    check_drop(drop_slot_deps, "slot reuse");
}
TEST(checker_catches_missing_war_dependency)
{
    check_drop(drop_war_deps, "write after read");
}
TEST(checker_catches_missing_raw_dependency)
{
    check_drop(drop_raw_deps, "read after write");
}

static void noop(struct coll_schedule *s)
{
    (void)s;
}

TEST(checker_passes_the_unbroken_schedule)
{
    struct run_cfg c = ring5;
    char err[1024];
    int st;
    c.algo = algo("ring");
    c.in_place = true;
    ASSERT_EQ(broken_runs(&c, noop, 40, &st, err, sizeof(err)), 0);
    c.rendezvous = true;
    ASSERT_EQ(broken_runs(&c, noop, 10, &st, err, sizeof(err)), 0);
}

/* Rank 0's last send to rank 1 disappears: rank 1 waits for it forever. */
static void drop_last_send(struct coll_schedule *s)
{
    for (uint32_t i = s[0].nsteps; i-- > 0;)
        if (s[0].steps[i].kind == COLL_STEP_SEND) {
            remove_step(&s[0], i);
            return;
        }
}

TEST(checker_catches_deadlock)
{
    struct run_cfg c = ring5;
    char err[1024];
    int st;
    c.algo = algo("ring");
    ASSERT_EQ(broken_runs(&c, drop_last_send, 3, &st, err, sizeof(err)), 3);
    ASSERT_EQ(st, SIM_DEADLOCK);
    ASSERT_STR_CONTAINS(err, "rank 1");
    ASSERT_STR_CONTAINS(err, "recv from 0");
    ASSERT_STR_CONTAINS(err, "nothing matches it");
    fprintf(stderr, "# %s\n", err);
}

/* Replace the schedules of both ranks: each receives from the other, then sends what it
 * got. Each waits for the other's send: a cycle through the data. */
static void cyclic_wait(struct coll_schedule *s)
{
    for (int32_t r = 0; r < 2; r++) {
        struct coll_algo_args a = {
            .nranks = 2, .rank = r, .dtype = COLL_INT32, .elem_size = 4, .chunk_count = 1};
        uint32_t idx;
        coll__sched_free(&s[r]);
        coll__sched_init(&s[r], &a);
        ASSERT_EQ(coll__sched_recv(&s[r], 1 - r, coll__slice(COLL_BUF_RECV, 0, 4), 0, NULL, &idx),
                  0);
        ASSERT_EQ(coll__sched_send(&s[r], 1 - r, coll__slice(COLL_BUF_RECV, 0, 4), 1, &idx, NULL),
                  0);
    }
}

TEST(checker_catches_cyclic_wait)
{
    struct run_cfg c = {.algo = algo("tree"),
                        .coll = COLL_COLL_ALLREDUCE,
                        .n = 2,
                        .count = 4,
                        .chunk = 4,
                        .dtype = COLL_INT32,
                        .op = COLL_SUM,
                        .gen = GEN_WIDE};
    char err[1024];
    int st;
    ASSERT_EQ(broken_runs(&c, cyclic_wait, 2, &st, err, sizeof(err)), 2);
    ASSERT_EQ(st, SIM_DEADLOCK);
}

static void shorten_a_send(struct coll_schedule *s)
{
    for (uint32_t i = 0; i < s[1].nsteps; i++)
        if (s[1].steps[i].kind == COLL_STEP_SEND && s[1].steps[i].src.count > 1) {
            s[1].steps[i].src.count--;
            return;
        }
}

TEST(checker_catches_count_mismatch)
{
    struct run_cfg c = ring5;
    char err[1024];
    int st;
    c.algo = algo("ring");
    ASSERT_EQ(broken_runs(&c, shorten_a_send, 3, &st, err, sizeof(err)), 3);
    ASSERT_EQ(st, SIM_COUNT);
    ASSERT_STR_CONTAINS(err, "from rank 1");
}

static void extra_send(struct coll_schedule *s)
{
    ASSERT_EQ(coll__sched_send(&s[2], 4, coll__slice(COLL_BUF_SEND, 0, 3), 0, NULL, NULL), 0);
}

TEST(checker_catches_unmatched_message)
{
    struct run_cfg c = ring5;
    char err[1024];
    int st;
    c.algo = algo("ring");
    ASSERT_EQ(broken_runs(&c, extra_send, 3, &st, err, sizeof(err)), 3);
    ASSERT_EQ(st, SIM_UNMATCHED);
    ASSERT_STR_CONTAINS(err, "rank 2");
    c.rendezvous = true; /* a rendezvous send never completes without its receive */
    ASSERT_EQ(broken_runs(&c, extra_send, 2, &st, err, sizeof(err)), 2);
    ASSERT_EQ(st, SIM_DEADLOCK);
}

/* A reduce non-root that writes RECV (NULL there) is caught as out of bounds. */
TEST(checker_catches_out_of_bounds)
{
    struct coll_schedule s[2];
    struct coll_algo_args a = {.coll = COLL_COLL_REDUCE,
                               .nranks = 2,
                               .rank = 0,
                               .root = 0,
                               .count = 4,
                               .dtype = COLL_INT32,
                               .elem_size = 4,
                               .chunk_count = 4};
    int32_t sendv[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}}, recv0[4];
    struct sim_mem mem[2] = {{sendv[0], recv0, 4, 4}, {sendv[1], NULL, 4, 0}};
    struct sim_opts o = {.seed = 1,
                         .dtype = COLL_INT32,
                         .op = COLL_SUM,
                         .coll = COLL_COLL_REDUCE,
                         .root = 0,
                         .count = 4};
    char err[512];

    coll__log_level = COLL_LOG_NONE; /* the errors below are expected: keep TAP clean */
    for (int r = 0; r < 2; r++) {
        a.rank = r;
        coll__sched_init(&s[r], &a);
        ASSERT_EQ(algo("chain")->build(&a, &s[r]), COLL_SUCCESS);
    }
    ASSERT_EQ(sim_run(s, 2, mem, &o, NULL, err, sizeof(err)), SIM_OK);
    ASSERT_EQ(recv0[0], 6);
    ASSERT_EQ(recv0[3], 12);
    ASSERT_EQ(coll__sched_copy(&s[1], coll__slice(COLL_BUF_RECV, 0, 4),
                               coll__slice(COLL_BUF_SEND, 0, 4), 0, NULL, NULL),
              0);
    ASSERT_EQ(sim_run(s, 2, mem, &o, NULL, err, sizeof(err)), SIM_BOUNDS);
    ASSERT_STR_CONTAINS(err, "rank 1");
    ASSERT_STR_CONTAINS(err, "may be NULL");
    /* and scratch beyond buf_count is refused before anything runs */
    s[1].steps[s[1].nsteps - 1].dst = coll__slice(COLL_BUF_SCRATCH, 0, 4);
    ASSERT_EQ(sim_run(s, 2, mem, &o, NULL, err, sizeof(err)), SIM_INVALID);
    ASSERT_STR_CONTAINS(err, "outside");
    for (int r = 0; r < 2; r++)
        coll__sched_free(&s[r]);
}

/* A schedule that reads SEND after writing RECV there is wrong in place: the race check
 * says so statically, and the simulator gets a wrong answer in place only. */
TEST(checker_catches_in_place_violation)
{
    struct coll_schedule s;
    struct coll_algo_args a = {.coll = COLL_COLL_ALLREDUCE,
                               .nranks = 1,
                               .rank = 0,
                               .count = 4,
                               .dtype = COLL_INT32,
                               .elem_size = 4,
                               .chunk_count = 4};
    int32_t buf[4] = {1, 2, 3, 4}, out[4];
    struct sim_mem mem = {buf, out, 4, 4};
    struct sim_opts o = {
        .seed = 3, .dtype = COLL_INT32, .op = COLL_SUM, .coll = COLL_COLL_ALLREDUCE, .count = 4};
    char err[512];
    uint32_t i0, i1;

    /* RECV[0..2) = SEND[2..4); then RECV[2..4) = SEND[0..2): SEND[0] is read after RECV[0]
     * was written */
    coll__sched_init(&s, &a);
    ASSERT_EQ(coll__sched_copy(&s, coll__slice(COLL_BUF_RECV, 0, 2),
                               coll__slice(COLL_BUF_SEND, 2, 2), 0, NULL, &i0),
              0);
    ASSERT_EQ(coll__sched_copy(&s, coll__slice(COLL_BUF_RECV, 2, 2),
                               coll__slice(COLL_BUF_SEND, 0, 2), 1, &i0, &i1),
              0);
    ASSERT_EQ(coll__sched_validate(&s), COLL_SUCCESS);
    ASSERT_EQ(sim_check_races(&s, err, sizeof(err)), SIM_RACE);
    ASSERT_STR_CONTAINS(err, "wrong in place");
    ASSERT_EQ(sim_run(&s, 1, &mem, &o, NULL, err, sizeof(err)), SIM_OK);
    ASSERT(out[0] == 3 && out[2] == 1); /* out of place: fine */
    mem.recv = buf;
    ASSERT_EQ(sim_run(&s, 1, &mem, &o, NULL, err, sizeof(err)), SIM_OK);
    ASSERT(buf[2] != 1); /* in place: SEND[0] was already overwritten */
    /* without the dependency it is a plain race */
    s.steps[1].ndeps = 0;
    ASSERT_EQ(sim_check_races(&s, err, sizeof(err)), SIM_RACE);
    ASSERT_STR_CONTAINS(err, "no dependency orders them");
    coll__sched_free(&s);
}

/* avg divides by n on the ranks with a result, as the executor does. */
TEST(avg_divides_on_result_ranks_only)
{
    struct run_cfg c = {.algo = algo("chain"),
                        .coll = COLL_COLL_REDUCE,
                        .n = 4,
                        .root = 2,
                        .count = 9,
                        .chunk = 2,
                        .dtype = COLL_INT64,
                        .op = COLL_AVG,
                        .gen = GEN_WIDE,
                        .seed = 5};
    RUN_OK(&c);
    c.algo = algo("ring");
    c.coll = COLL_COLL_ALLREDUCE;
    RUN_OK(&c);
}

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
