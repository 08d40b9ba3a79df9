/*
 * test_schedule.c - every algorithm on every collective it claims, run by the simulator for
 * n = 1..64 ranks (every n up to 24, a sample above where buffers hold n x count), counts 0,
 * 1, n-1, n, n+1, 3n+1 and a large one, every root, chunk sizes, in place (with each
 * collective's own overlap of SEND and RECV) and out of place, eager and rendezvous links,
 * several orders; results checked against a reference computed here. Also the schedule
 * helpers, the structural promises (scratch bounds, which buffers a rank may touch, message
 * counts of each pattern, barriers that wait for everyone) and the simulator's own ability
 * to fail.
 *
 * Divisions: 1 element encoding and the reference, 2 one simulated run (buffer layouts,
 * references per collective), 3 helpers and table, 4 the sweeps, 5 dtype x op, 6
 * structure, 7 the checker can fail.
 *
 * Build: gcc -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -Iinclude -Isrc
 *        src/algo/ *.c src/reduce/reduce.c src/base/log.c src/base/status.c tests/sim.c
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

/* What the sweeps vary comes from the collective's row (src/algo/colls.h). */
static bool is_rooted(enum coll_coll coll)
{
    return coll__colls[coll].root != COLL_ROOT_NONE;
}

static bool is_reducing(enum coll_coll coll)
{
    return coll__colls[coll].reduces;
}

/* count is per rank: a buffer holds n x count */
static bool is_per_rank(enum coll_coll coll)
{
    return coll__colls[coll].send_blocks == COLL_BLOCKS_N ||
           coll__colls[coll].recv_blocks == COLL_BLOCKS_N;
}

/* Host layouts for the hierarchical builders, varied by seed: blocks of consecutive
 * ranks, ranks dealt round-robin, and an uneven spread; 1 to 4 hosts (never more than n). */
static int32_t test_hosts[4096];
static int32_t layout_hosts(int32_t n, uint64_t seed)
{
    int32_t k = (int32_t)(1 + seed % 4 > (uint64_t)n ? (uint64_t)n : 1 + seed % 4);
    int32_t used = 0;
    for (int32_t r = 0; r < n && r < 4096; r++) {
        switch ((seed / 4) % 3) {
        case 0: test_hosts[r] = (int32_t)((int64_t)r * k / n); break;
        case 1: test_hosts[r] = r % k; break;
        default: test_hosts[r] = r < k ? r : (int32_t)((uint64_t)r * r % (uint64_t)k); break;
        }
        used = test_hosts[r] + 1 > used ? test_hosts[r] + 1 : used;
    }
    return used;
}

static struct coll_algo_args cfg_args(const struct run_cfg *c, int32_t r)
{
    struct coll_algo_args a = {
        .coll = c->coll,
        .nranks = c->n,
        .rank = r,
        .root = is_rooted(c->coll) ? c->root : 0,
        .count = c->coll == COLL_COLL_BARRIER ? 0 : c->count,
        .dtype = c->dtype,
        .elem_size = coll__dtype_size(c->dtype),
        .chunk_count = c->chunk,
    };
    if (!strcmp(c->algo->name, "hier")) {
        a.nhosts = layout_hosts(c->n, c->seed);
        a.hosts = test_hosts;
    }
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

static bool is(const struct run_cfg *c, const char *name, enum coll_coll coll)
{
    return !strcmp(c->algo->name, name) && c->coll == coll;
}

/* The scratch each algorithm promises: a few chunks for the pipelined ones; what the
 * pattern needs (a file header says why) for the others. */
static size_t scratch_bound(const struct run_cfg *c)
{
    const size_t cnt = c->count, ch = COLL_MIN(c->chunk, cnt), un = (size_t)c->n;
    const char *nm = c->algo->name;

    if (c->coll == COLL_COLL_BARRIER)
        return !strcmp(nm, "dissemination") ? ceil_log2(c->n) + 1 : 2;
    if (is(c, "ring", COLL_COLL_ALLGATHER) || !strcmp(nm, "vdg"))
        return 0;
    if (is(c, "ring", COLL_COLL_REDUCE_SCATTER))
        return cnt + 4 * ch;
    if (!strcmp(nm, "ring"))
        return 4 * ch;
    if (!strcmp(nm, "chain"))
        return COLL_TREE_SLOTS * ch;
    if (!strcmp(nm, "tree") || !strcmp(nm, "hier")) /* hier: a host chain + the next leader */
        return COLL_TREE_SLOTS * 2 * ch;
    if (!strcmp(nm, "dbtree"))
        return COLL_TREE_SLOTS * 2 * ch; /* two halves, one child each at the top */
    if (is(c, "binomial", COLL_COLL_GATHER) || is(c, "binomial", COLL_COLL_SCATTER))
        return un / 2 * cnt;
    if (!strcmp(nm, "binomial"))
        return COLL_TREE_SLOTS * ceil_log2(c->n) * ch;
    if (is(c, "rd", COLL_COLL_ALLREDUCE))
        return cnt;
    if (is(c, "rd", COLL_COLL_ALLGATHER))
        return 0;
    if (is(c, "rd", COLL_COLL_REDUCE_SCATTER))
        return 2 * un * cnt;
    if (is(c, "rabenseifner", COLL_COLL_ALLREDUCE))
        return cnt;
    if (is(c, "rabenseifner", COLL_COLL_REDUCE))
        return 2 * cnt;
    if (is(c, "bruck", COLL_COLL_ALLGATHER))
        return un * cnt;
    if (is(c, "bruck", COLL_COLL_ALLTOALL))
        return un * cnt + 2 * (un / 2) * cnt;
    if (!strcmp(nm, "pairwise"))
        return 2 * cnt;
    if (is(c, "linear", COLL_COLL_ALLTOALL))
        return (un - 1) * cnt;
    if (!strcmp(nm, "linear"))
        return 0; /* gather, scatter */
    HARNESS_FAIL("no scratch bound for %s %s", nm, coll__coll_name(c->coll));
}

/* What one schedule must satisfy whatever the order: the buffers it may touch, scratch,
 * and the bandwidth that the patterns promise. */
static int check_structure(const struct run_cfg *c, const struct coll_schedule *s, int32_t r,
                           const struct sim_layout *l)
{
    const size_t cnt = c->count, un = (size_t)c->n;
    size_t sent = 0, bound = scratch_bound(c);

    if (c->coll == COLL_COLL_BARRIER) {
        if (s->buf_count[COLL_BUF_SEND] || s->buf_count[COLL_BUF_RECV])
            return cfg_fail(c, "rank %d: a barrier touches user buffers", r);
        if (c->n == 1 && s->nsteps)
            return cfg_fail(c, "one rank: a barrier of %u steps", s->nsteps);
        if (c->n > 1 && !s->nsteps)
            return cfg_fail(c, "rank %d: an empty barrier", r);
        for (uint32_t i = 0; i < s->nsteps; i++)
            if ((s->steps[i].kind == COLL_STEP_SEND && s->steps[i].src.count != 1) ||
                (s->steps[i].kind == COLL_STEP_RECV && s->steps[i].dst.count != 1))
                return cfg_fail(c, "rank %d step %u: a barrier message of more than one element", r,
                                i);
    } else if (cnt == 0 && s->nsteps != 0) {
        return cfg_fail(c, "rank %d: %u steps for count 0", r, s->nsteps);
    }
    /* where the call allows NULL the schedule must not touch the buffer */
    if (s->buf_count[COLL_BUF_SEND] > l->send_count)
        return cfg_fail(c, "rank %d: touches %zu elements of SEND, which holds %zu", r,
                        s->buf_count[COLL_BUF_SEND], l->send_count);
    if (s->buf_count[COLL_BUF_RECV] > l->recv_count)
        return cfg_fail(c, "rank %d: touches %zu elements of RECV, which holds %zu", r,
                        s->buf_count[COLL_BUF_RECV], l->recv_count);
    if (s->buf_count[COLL_BUF_SCRATCH] > bound)
        return cfg_fail(c, "rank %d: %zu scratch elements, more than %zu", r,
                        s->buf_count[COLL_BUF_SCRATCH], bound);
    if (c->n == 1 && cnt > 0 && c->coll != COLL_COLL_BARRIER &&
        (s->nsteps != 1 || s->steps[0].kind != COLL_STEP_COPY))
        return cfg_fail(c, "one rank: %u steps, not a single copy", s->nsteps);
    for (uint32_t i = 0; i < s->nsteps; i++)
        if (s->steps[i].kind == COLL_STEP_SEND)
            sent += s->steps[i].src.count;
    /* bandwidth promises: ring all-reduce sends 2(n-1) blocks; ring all-gather and
     * reduce-scatter, Bruck all-gather, pairwise and linear all-to-all send every block but
     * their own once; dbtree ranks are interior in one tree at most, so an all-reduce sends
     * at most 2 count (3 halves up and down, plus one leaf half), a broadcast or reduce at
     * most count (2 halves down or 1 up, plus 1 up) */
    if (is(c, "ring", COLL_COLL_ALLREDUCE) && c->n > 1 &&
        sent > 2 * (un - 1) * ((cnt + un - 1) / un))
        return cfg_fail(c, "rank %d sends %zu elements", r, sent);
    if ((is(c, "ring", COLL_COLL_ALLGATHER) || is(c, "ring", COLL_COLL_REDUCE_SCATTER) ||
         is(c, "bruck", COLL_COLL_ALLGATHER) || is(c, "pairwise", COLL_COLL_ALLTOALL) ||
         is(c, "linear", COLL_COLL_ALLTOALL)) &&
        sent != (un - 1) * cnt)
        return cfg_fail(c, "rank %d sends %zu elements, not (n-1) count", r, sent);
    if (!strcmp(c->algo->name, "dbtree") && c->coll == COLL_COLL_ALLREDUCE && sent > 2 * cnt + 2)
        return cfg_fail(c, "rank %d sends %zu elements, more than 2 count", r, sent);
    if (!strcmp(c->algo->name, "dbtree") && c->coll != COLL_COLL_ALLREDUCE && sent > cnt + 1)
        return cfg_fail(c, "rank %d sends %zu elements", r, sent);
    return 0;
}

/* Does rank r hold the collective's result in RECV? */
static bool has_result(const struct run_cfg *c, int32_t r)
{
    const struct coll_coll_desc *d = &coll__colls[c->coll];
    return coll__desc_moves_data(d) && coll__desc_uses_recv(d, r, c->root, 0);
}

/* Element i of every rank's SEND folded in rank order, and the sum of magnitudes. */
static void ref_reduced(const struct run_cfg *c, size_t i, double *ref_p, uint64_t *iref_p,
                        double *sumabs_p)
{
    const coll_dtype_t dt = c->dtype;
    double ref = 0, sumabs = 0, v;
    uint64_t iref = 0, bits;

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
    *ref_p = ref;
    *iref_p = iref;
    *sumabs_p = sumabs;
}

/* Compare element e of rank d's RECV with a reduced reference. */
static int check_reduced(const struct run_cfg *c, const void *recv, int32_t d, size_t e, double ref,
                         uint64_t iref, double sumabs)
{
    const coll_dtype_t dt = c->dtype;
    uint64_t gbits = 0;
    double got = get_elem(dt, recv, e, &gbits);

    if (!dt_is_float(dt)) {
        if ((gbits & int_mask(dt)) != (iref & int_mask(dt)))
            return cfg_fail(c, "rank %d element %zu: got %#llx, want %#llx", d, e,
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
            return cfg_fail(c, "rank %d element %zu: got %.9g, want %.9g (tol %.3g)", d, e, got,
                            ref, tol);
    }
    return 0;
}

/* Compare element e of rank d's RECV with element i of rank src's SEND, bit for bit. */
static int check_moved(const struct run_cfg *c, const void *recv, int32_t d, size_t e, int32_t src,
                       size_t i)
{
    const size_t esz = coll__dtype_size(c->dtype);
    uint8_t want[8];
    double v;
    uint64_t bits;

    gen_input(c->dtype, c->op, c->gen, c->n, src, i, c->seed, &v, &bits);
    put_elem(c->dtype, want, 0, v, bits);
    if (memcmp((const uint8_t *)recv + e * esz, want, esz))
        return cfg_fail(c, "rank %d element %zu: not element %zu of rank %d's input", d, e, i, src);
    return 0;
}

/* The reference, from the row: element e of rank d's RECV is block e / count's (with an
 * n-block RECV) of every rank's SEND reduced, of the root's, or of that block's rank's; it
 * is taken at d's block of an n-block SEND. */
static int check_results(const struct run_cfg *c, void **recv)
{
    const struct coll_coll_desc *cd = &coll__colls[c->coll];
    const size_t cnt = c->count, esz = coll__dtype_size(c->dtype);
    double ref, sumabs;
    uint64_t iref;

    for (int32_t d = 0; d < c->n; d++) {
        size_t nrecv = coll__blocks_count(cd->recv_blocks, cnt, c->n);
        for (size_t e = 0; has_result(c, d) && e < nrecv; e++) {
            size_t blk = cd->recv_blocks == COLL_BLOCKS_N ? e / cnt : 0;
            size_t in = cd->recv_blocks == COLL_BLOCKS_N ? e % cnt : e;
            size_t at = (cd->send_blocks == COLL_BLOCKS_N ? (size_t)d * cnt : 0) + in;
            int32_t src = cd->root == COLL_ROOT_SOURCE ? c->root : (int32_t)blk;

            if (cd->reduces) {
                ref_reduced(c, at, &ref, &iref, &sumabs);
                if (check_reduced(c, recv[d], d, e, ref, iref, sumabs))
                    return 1;
            } else if (check_moved(c, recv[d], d, e, src, at)) {
                return 1;
            }
        }
    }
    /* where every rank gets the whole reduced vector, every rank ends with the same bits,
     * whatever the order of its folds */
    if (cd->reduces && cd->root == COLL_ROOT_NONE && cd->send_blocks == cd->recv_blocks)
        for (int32_t r = 1; r < c->n; r++)
            if (cnt && memcmp(recv[r], recv[0], cnt * esz))
                return cfg_fail(c, "ranks 0 and %d hold different %s results", r, cd->name);
    return 0;
}

/* The user buffers of every rank, laid out as sim_layout_of says, in place (overlapping as
 * the call defines it) or not: SEND filled with the inputs, the rest of RECV with a
 * pattern that a result never written shows. */
struct bufs {
    struct sim_mem *mem;
    void **recv; /* mem[r].recv, for check_results */
    void **own;  /* two allocations per rank */
};

static void bufs_setup(const struct run_cfg *c, struct bufs *b)
{
    const size_t esz = coll__dtype_size(c->dtype);

    b->mem = calloc((size_t)c->n, sizeof(*b->mem));
    b->recv = calloc((size_t)c->n, sizeof(*b->recv));
    b->own = calloc(2 * (size_t)c->n, sizeof(*b->own));
    ASSERT(b->mem && b->recv && b->own);
    for (int32_t r = 0; r < c->n; r++) {
        struct sim_layout l;
        uint8_t *send = NULL, *recv = NULL;

        sim_layout_of(c->coll, c->n, r, c->root, c->count, &l);
        if (c->in_place && l.alias && l.send_count && l.recv_count) {
            /* one allocation covering both, SEND at RECV + send_at */
            const int64_t lo = COLL_MIN(0, l.send_at),
                          hi = COLL_MAX(l.send_at + (int64_t)l.send_count, (int64_t)l.recv_count);
            uint8_t *p = malloc((size_t)(hi - lo) * esz + 1);
            ASSERT(p);
            memset(p, 0x5a, (size_t)(hi - lo) * esz);
            b->own[2 * r] = p;
            recv = p + (size_t)(-lo) * esz;
            send = p + (size_t)(l.send_at - lo) * esz;
        } else {
            if (l.send_count) {
                send = b->own[2 * r] = malloc(l.send_count * esz + 1);
                ASSERT(send);
            }
            if (l.recv_count) {
                recv = b->own[2 * r + 1] = malloc(l.recv_count * esz + 1);
                ASSERT(recv);
                memset(recv, 0x5a, l.recv_count * esz);
            }
        }
        for (size_t i = 0; i < l.send_count; i++) {
            double v;
            uint64_t bits;
            gen_input(c->dtype, c->op, c->gen, c->n, r, i, c->seed, &v, &bits);
            put_elem(c->dtype, send, i, v, bits);
        }
        b->mem[r] = (struct sim_mem){send, recv, l.send_count, l.recv_count};
        b->recv[r] = recv;
    }
}

static void bufs_free(const struct run_cfg *c, struct bufs *b)
{
    for (int32_t r = 0; r < 2 * c->n; r++)
        free(b->own[r]);
    free(b->own);
    free(b->recv);
    free(b->mem);
}

/* Simulate c's schedules s and compare. 0 when everything holds; else fail_msg. *st_p: the
 * simulator's status. */
static int simulate(const struct run_cfg *c, const struct coll_schedule *s, int *st_p)
{
    struct bufs b;
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

    bufs_setup(c, &b);
    st = sim_run(s, c->n, b.mem, &o, NULL, err, sizeof(err));
    if (st_p)
        *st_p = st;
    if (st != SIM_OK)
        rc = cfg_fail(c, "%s", err);
    if (!rc)
        rc = check_results(c, b.recv);
    bufs_free(c, &b);
    return rc;
}

/* Build, check structure (and races), simulate, compare. 0 when everything holds; else
 * fail_msg. */
static int run_case(const struct run_cfg *c)
{
    struct coll_schedule *s = build_all(c);
    char err[1024];
    int rc = 0, st;

    if (!s)
        return 1;
    for (int32_t r = 0; r < c->n && !rc; r++) {
        struct sim_layout l;
        sim_layout_of(c->coll, c->n, r, c->root, c->count, &l);
        rc = check_structure(c, &s[r], r, &l);
        if (!rc && c->races && (st = sim_check_races_at(&s[r], l.send_at, err, sizeof(err))) &&
            st != SIM_TOO_LARGE)
            rc = cfg_fail(c, "%s", err);
    }
    /* a barrier: every rank's schedule waits for a step of every other rank */
    for (int32_t a = 0; c->coll == COLL_COLL_BARRIER && a < c->n && !rc; a++) {
        bool *reached = calloc((size_t)c->n, sizeof(*reached));
        ASSERT(reached && sim_reach(s, c->n, a, reached) == SIM_OK);
        for (int32_t b = 0; b < c->n && !rc; b++)
            if (b != a && !reached[b])
                rc = cfg_fail(c, "rank %d can leave the barrier before rank %d enters", b, a);
        free(reached);
    }
    if (!rc)
        rc = simulate(c, s, NULL);
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
    ASSERT_EQ(count, 13);
    ASSERT(coll__algo_find("nope") == NULL);
    ASSERT(coll__algo_find(NULL) == NULL);
    ASSERT(algo("ring")->colls == (1u << COLL_COLL_ALLREDUCE | 1u << COLL_COLL_ALLGATHER |
                                   1u << COLL_COLL_REDUCE_SCATTER));
    /* every collective has an algorithm */
    for (int c = 0; c < COLL_NUM_COLLS; c++) {
        bool any = c == COLL_COLL_SENDRECV; /* point-to-point: no builder */
        for (int i = 0; coll__algos[i]; i++)
            any |= (coll__algos[i]->colls >> c) & 1u;
        ASSERT_MSG(any, "nothing runs %s", coll__coll_name((enum coll_coll)c));
    }
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

/* Buffers of n x count elements that overflow size_t are refused, not built. */
TEST(builders_refuse_overflowing_sizes)
{
    static const struct {
        const char *name;
        enum coll_coll coll;
    } cases[] = {
        {"ring", COLL_COLL_ALLGATHER}, {"rd", COLL_COLL_REDUCE_SCATTER},
        {"bruck", COLL_COLL_ALLTOALL}, {"pairwise", COLL_COLL_ALLTOALL},
        {"linear", COLL_COLL_GATHER},  {"binomial", COLL_COLL_SCATTER},
    };
    coll__log_level = COLL_LOG_NONE; /* the errors below are expected: keep TAP clean */
    for (size_t i = 0; i < COLL_ARRAY_SIZE(cases); i++) {
        struct coll_algo_args a = {.coll = cases[i].coll,
                                   .nranks = 64,
                                   .rank = 3,
                                   .count = SIZE_MAX / 64,
                                   .dtype = COLL_FLOAT32,
                                   .elem_size = 4,
                                   .chunk_count = 1024};
        struct coll_schedule s;
        const struct coll_algo *al = algo(cases[i].name);

        coll__sched_init(&s, &a);
        ASSERT(al->applicable && !al->applicable(&a));
        ASSERT_EQ(al->build(&a, &s), COLL_INVALID_ARGUMENT);
        ASSERT_STR_CONTAINS(coll_last_error(NULL), "overflow");
        ASSERT_EQ(s.nsteps, 0);
        a.count = 1000;
        ASSERT(al->applicable(&a));
        coll__sched_free(&s);
    }
}

/* ---- 4 the sweeps -------------------------------------------------------------------- */

static const size_t sweep_chunks[] = {1, 2, 3, 5, 16, 1u << 20};
#define NCHUNKS COLL_ARRAY_SIZE(sweep_chunks)

/* The n a sweep covers: every n up to 24, then every stride-th (stride 1: all) and the
 * edges around powers of two, 31..33 and 63..64. */
static bool n_swept(int32_t n, int32_t stride)
{
    return n <= 24 || n % stride == 0 || (n >= 31 && n <= 33) || n >= 63;
}

/* n = 1..64 x counts {0, 1, n-1, n, n+1, 3n+1} x roots (all for n <= 16, three above,
 * three runs of root 0 for unrooted collectives); the chunk size, placement, link mode and
 * seed rotate across the cases so that each value meets many others. The race check runs
 * on every schedule. A barrier has no count: three runs per n. */
static void sweep(const char *name, enum coll_coll coll, int32_t stride)
{
    const bool rooted = is_rooted(coll);
    unsigned k = 0;

    for (int32_t n = 1; n <= 64; n++) {
        const size_t counts[] = {0, 1, (size_t)n - 1, (size_t)n, (size_t)n + 1, 3 * (size_t)n + 1};
        const size_t ncounts = coll == COLL_COLL_BARRIER ? 1 : COLL_ARRAY_SIZE(counts);
        int32_t roots[16], nroots = 0;

        if (!n_swept(n, stride))
            continue;
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
        for (size_t ci = 0; ci < ncounts; ci++)
            for (int32_t ri = 0; ri < nroots; ri++, k++) {
                struct run_cfg c = {
                    .algo = algo(name),
                    .coll = coll,
                    .n = n,
                    .root = roots[ri],
                    .count = counts[ci],
                    .dtype = coll == COLL_COLL_BARRIER ? COLL_UINT8 : COLL_INT32,
                    .op = COLL_SUM,
                    .gen = GEN_WIDE,
                    .seed = mix(k * 7919u + (uint64_t)n),
                };
                c.chunk = sweep_chunks[(k + ci) % NCHUNKS];
                /* n blocks of tiny chunks on many ranks only make the run long: small n
                 * covers tiny chunks; above n = 12 at most 8 chunks a block, above 24 two
                 * (sweep_large pipelines many chunks on 33 and 64 ranks) */
                if (is_per_rank(coll) && n > 12)
                    c.chunk = COLL_MAX(c.chunk, (c.count + 7) / 8);
                if (is_per_rank(coll) && n > 24)
                    c.chunk = COLL_MAX(c.chunk, (c.count + 1) / 2);
                c.in_place = (k / 3) % 2;
                c.rendezvous = k % 2;
                c.races = true;
                RUN_OK(&c);
            }
    }
    fprintf(stderr, "# %s %s: %u cases\n", name, coll__coll_name(coll), k);
}

/* A large count cut into many chunks, for a spread of n, with the race check: 10000
 * elements for the collectives on one vector, about 4000 in all for those of n blocks. */
static void sweep_large(const char *name, enum coll_coll coll)
{
    static const int32_t ns[] = {2, 3, 7, 16, 33, 64};
    for (size_t i = 0; i < COLL_ARRAY_SIZE(ns) && coll != COLL_COLL_BARRIER; i++) {
        struct run_cfg c = {
            .algo = algo(name),
            .coll = coll,
            .n = ns[i],
            .root = is_rooted(coll) ? (int32_t)(mix(i) % (uint64_t)ns[i]) : 0,
            .count = is_per_rank(coll) ? 4000 / (size_t)ns[i] + 37 : 10000,
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
        for (int32_t root = 0; root < (is_rooted(coll) ? ns[i] : 1); root++)
            for (int v = 0; v < 8; v++) {
                struct run_cfg c = {
                    .algo = algo(name),
                    .coll = coll,
                    .n = ns[i],
                    .root = root,
                    .count = (is_per_rank(coll) ? 2 : 3 * (size_t)ns[i] + 2) + (size_t)v,
                    .chunk = 1 + (size_t)(v / 2),
                    .in_place = v & 1,
                    .dtype = coll == COLL_COLL_BARRIER ? COLL_UINT8 : COLL_INT32,
                    .op = COLL_SUM,
                    .gen = GEN_WIDE,
                    .seed = mix(((uint64_t)i << 32) ^ ((uint64_t)root << 8) ^ (uint64_t)v),
                    .rendezvous = (v >> 1) & 1,
                    .races = v == 0,
                };
                RUN_OK(&c);
            }
}

#define SWEEPS(algoname, collname, coll, stride)                                                   \
    TEST(algoname##_##collname##_sweep)                                                            \
    {                                                                                              \
        sweep(#algoname, coll, stride);                                                            \
    }                                                                                              \
    TEST(algoname##_##collname##_large)                                                            \
    {                                                                                              \
        sweep_large(#algoname, coll);                                                              \
    }                                                                                              \
    TEST(algoname##_##collname##_orders)                                                           \
    {                                                                                              \
        sweep_orders(#algoname, coll);                                                             \
    }

/* stride: the n above 24 that the sweep samples (1: all), kept where n x count buffers
 * would make the whole file slow */
SWEEPS(ring, allreduce, COLL_COLL_ALLREDUCE, 1)
SWEEPS(ring, allgather, COLL_COLL_ALLGATHER, 3)
SWEEPS(ring, reducescatter, COLL_COLL_REDUCE_SCATTER, 3)
SWEEPS(tree, allreduce, COLL_COLL_ALLREDUCE, 1)
SWEEPS(tree, broadcast, COLL_COLL_BROADCAST, 1)
SWEEPS(tree, reduce, COLL_COLL_REDUCE, 1)
SWEEPS(dbtree, allreduce, COLL_COLL_ALLREDUCE, 1)
SWEEPS(dbtree, broadcast, COLL_COLL_BROADCAST, 1)
SWEEPS(dbtree, reduce, COLL_COLL_REDUCE, 1)
SWEEPS(chain, broadcast, COLL_COLL_BROADCAST, 1)
SWEEPS(chain, reduce, COLL_COLL_REDUCE, 1)
SWEEPS(binomial, broadcast, COLL_COLL_BROADCAST, 1)
SWEEPS(binomial, reduce, COLL_COLL_REDUCE, 1)
SWEEPS(binomial, allreduce, COLL_COLL_ALLREDUCE, 1)
SWEEPS(binomial, gather, COLL_COLL_GATHER, 3)
SWEEPS(binomial, scatter, COLL_COLL_SCATTER, 3)
SWEEPS(rd, allreduce, COLL_COLL_ALLREDUCE, 1)
SWEEPS(rd, allgather, COLL_COLL_ALLGATHER, 3)
SWEEPS(rd, reducescatter, COLL_COLL_REDUCE_SCATTER, 3)
SWEEPS(rabenseifner, allreduce, COLL_COLL_ALLREDUCE, 1)
SWEEPS(rabenseifner, reduce, COLL_COLL_REDUCE, 1)
SWEEPS(bruck, allgather, COLL_COLL_ALLGATHER, 3)
SWEEPS(bruck, alltoall, COLL_COLL_ALLTOALL, 5)
SWEEPS(pairwise, alltoall, COLL_COLL_ALLTOALL, 5)
SWEEPS(linear, gather, COLL_COLL_GATHER, 3)
SWEEPS(linear, scatter, COLL_COLL_SCATTER, 3)
SWEEPS(linear, alltoall, COLL_COLL_ALLTOALL, 5)
SWEEPS(linear, barrier, COLL_COLL_BARRIER, 1)
SWEEPS(vdg, broadcast, COLL_COLL_BROADCAST, 1)
SWEEPS(dissemination, barrier, COLL_COLL_BARRIER, 1)
SWEEPS(hier, allreduce, COLL_COLL_ALLREDUCE, 1)
SWEEPS(hier, broadcast, COLL_COLL_BROADCAST, 1)
SWEEPS(hier, reduce, COLL_COLL_REDUCE, 1)

TEST(every_claimed_collective_is_swept)
{
    /* the SWEEPS list above must cover the table: a new pairing needs a sweep */
    static const char *const swept[] = {
        "ring allreduce",   "ring allgather",         "ring reducescatter",
        "tree allreduce",   "tree broadcast",         "tree reduce",
        "dbtree allreduce", "dbtree broadcast",       "dbtree reduce",
        "chain broadcast",  "chain reduce",           "binomial broadcast",
        "binomial reduce",  "binomial allreduce",     "binomial gather",
        "binomial scatter", "rd allreduce",           "rd allgather",
        "rd reducescatter", "rabenseifner allreduce", "rabenseifner reduce",
        "bruck allgather",  "bruck alltoall",         "pairwise alltoall",
        "linear gather",    "linear scatter",         "linear alltoall",
        "linear barrier",   "vdg broadcast",          "dissemination barrier",
        "hier allreduce",   "hier broadcast",         "hier reduce",
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

/* Every dtype and op at a few (n, count, chunk) points for every pairing (every dtype with
 * one op for the collectives that only move data). Narrow floats only up to n = 8, where
 * sums of -1/0/1 stay exact in fp8. */
TEST(dtypes_and_ops)
{
    static const struct {
        int32_t n;
        size_t count, chunk;
    } pts[] = {{2, 5, 2}, {3, 7, 2}, {6, 11, 3}, {8, 29, 3}, {13, 40, 4}};
    unsigned k = 0;

    for (int i = 0; coll__algos[i]; i++)
        for (int c = 0; c < COLL_NUM_COLLS; c++) {
            if (!(coll__algos[i]->colls & (1u << c)) || c == COLL_COLL_BARRIER)
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
                        if (!is_reducing(cfg.coll) && op != COLL_SUM)
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
        for (int c = 0; c < COLL_NUM_COLLS; c++) {
            if (!(coll__algos[i]->colls & (1u << c)) || !is_reducing((enum coll_coll)c))
                continue;
            for (int dt = 0; dt < 2; dt++)
                for (size_t o = 0; o < COLL_ARRAY_SIZE(ops); o++, k++) {
                    struct run_cfg cfg = {
                        .algo = coll__algos[i],
                        .coll = (enum coll_coll)c,
                        .n = k % 2 ? 11 : 12,
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

/* Messages per rank of a schedule: sends[r], recvs[r]. */
static void count_messages(const struct coll_schedule *s, int32_t n, uint32_t *sends,
                           uint32_t *recvs)
{
    for (int32_t r = 0; r < n; r++) {
        sends[r] = recvs[r] = 0;
        for (uint32_t i = 0; i < s[r].nsteps; i++) {
            sends[r] += s[r].steps[i].kind == COLL_STEP_SEND;
            recvs[r] += s[r].steps[i].kind == COLL_STEP_RECV;
        }
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

/* The same for the other algorithms, n = 1..64, unchunked, every pattern's message count:
 *   ring all-gather, reduce-scatter       n-1 per rank
 *   rd (power of two n)                   log2 n per rank (all three collectives)
 *   rd other n                            extra ranks 1, partners log2 p + 1 (all-reduce)
 *   rabenseifner all-reduce (2^k, c >= n) 2 log2 n per rank
 *   rabenseifner reduce (2^k, c >= n)     log2 n + 1 per non-root, log2 n at the root
 *   bruck all-gather and all-to-all       ceil(log2 n) per rank
 *   pairwise, linear all-to-all           n-1 per rank
 *   binomial gather/scatter               the root receives/sends ceil(log2 n) (+1 where a
 *                                         subtree passes rank n-1), n-1 (+1) in all
 *   linear gather/scatter                 n-1 at the root, 1 elsewhere
 *   vdg                                   the root sends ceil(log2 n) + n-1
 *   dissemination                         ceil(log2 n) per rank
 *   linear barrier                        n-1 from rank 0, 1 from the others */
static struct coll_schedule *build_msgs(const char *name, enum coll_coll coll, int32_t n,
                                        int32_t root, size_t count, uint32_t *sends,
                                        uint32_t *recvs)
{
    struct run_cfg c = {.algo = algo(name),
                        .coll = coll,
                        .n = n,
                        .root = root,
                        .count = count,
                        .chunk = 1u << 30,
                        .dtype = coll == COLL_COLL_BARRIER ? COLL_UINT8 : COLL_INT32};
    struct coll_schedule *s = build_all(&c);
    ASSERT_MSG(s, "%s", fail_msg);
    count_messages(s, n, sends, recvs);
    return s;
}

TEST(message_counts_of_the_other_patterns)
{
    uint32_t sends[64], recvs[64];

    for (int32_t n = 1; n <= 64; n++) {
        const uint32_t l = ceil_log2(n), un = (uint32_t)n;
        const bool pow2 = (n & (n - 1)) == 0;
        const int32_t root = (int32_t)(mix((uint64_t)n) % (uint64_t)n);
        int32_t p = 1;
        struct coll_schedule *s;
        uint32_t total;

        while (p * 2 <= n)
            p *= 2;
#define EACH(expr)                                                                                 \
    for (int32_t r = 0; r < n; r++)                                                                \
    ASSERT_MSG(expr, "n=%d rank %d: %u sends, %u receives (%s)", n, r, sends[r], recvs[r], #expr)
#define BUILD(name, coll, cnt) (s = build_msgs(name, coll, n, root, cnt, sends, recvs))
#define DONE() free_scheds(s, n)
        if (n > 1) {
            BUILD("ring", COLL_COLL_ALLGATHER, 5);
            EACH(sends[r] == un - 1 && recvs[r] == un - 1);
            DONE();
            BUILD("ring", COLL_COLL_REDUCE_SCATTER, 5);
            EACH(sends[r] == un - 1 && recvs[r] == un - 1);
            DONE();
            BUILD("pairwise", COLL_COLL_ALLTOALL, 3);
            EACH(sends[r] == un - 1 && recvs[r] == un - 1);
            DONE();
            BUILD("linear", COLL_COLL_ALLTOALL, 3);
            EACH(sends[r] == un - 1 && recvs[r] == un - 1);
            DONE();
        }
        BUILD("bruck", COLL_COLL_ALLGATHER, 3);
        EACH(sends[r] == l && recvs[r] == l);
        DONE();
        BUILD("bruck", COLL_COLL_ALLTOALL, 3);
        EACH(sends[r] == l && recvs[r] == l);
        DONE();
        BUILD("dissemination", COLL_COLL_BARRIER, 0);
        EACH(sends[r] == l && recvs[r] == l);
        DONE();
        BUILD("linear", COLL_COLL_BARRIER, 0);
        EACH(sends[r] == (r == 0 ? un - 1 : 1) && recvs[r] == (r == 0 ? un - 1 : 1));
        DONE();
        BUILD("linear", COLL_COLL_GATHER, 3);
        EACH(sends[r] == (r == root ? 0 : 1) && recvs[r] == (r == root ? un - 1 : 0));
        DONE();
        BUILD("linear", COLL_COLL_SCATTER, 3);
        EACH(sends[r] == (r == root ? un - 1 : 0) && recvs[r] == (r == root ? 0 : 1));
        DONE();
        BUILD("binomial", COLL_COLL_GATHER, 3);
        total = 0;
        EACH((total += sends[r], r != root || (recvs[r] >= l && recvs[r] <= l + 1)));
        ASSERT(total >= un - 1 && total <= un);
        DONE();
        BUILD("binomial", COLL_COLL_SCATTER, 3);
        total = 0;
        EACH((total += sends[r], r != root || (sends[r] >= l && sends[r] <= l + 1)));
        ASSERT(total >= un - 1 && total <= un);
        DONE();
        if (n > 1) {
            BUILD("vdg", COLL_COLL_BROADCAST, 7 * (size_t)n);
            EACH(r != root || sends[r] == l + un - 1);
            DONE();
        }
        for (int k = 0; k < 3 && n > 1; k++) {
            static const enum coll_coll rdc[] = {COLL_COLL_ALLREDUCE, COLL_COLL_ALLGATHER,
                                                 COLL_COLL_REDUCE_SCATTER};
            BUILD("rd", rdc[k], 5);
            if (pow2)
                EACH(sends[r] == l && recvs[r] == l);
            else if (rdc[k] == COLL_COLL_ALLREDUCE)
                EACH(sends[r] == (r >= p ? 1 : r < n - p ? ceil_log2(p) + 1 : ceil_log2(p)));
            DONE();
        }
        if (pow2 && n > 1) {
            BUILD("rabenseifner", COLL_COLL_ALLREDUCE, 3 * (size_t)n);
            EACH(sends[r] == 2 * l && recvs[r] == 2 * l);
            DONE();
            BUILD("rabenseifner", COLL_COLL_REDUCE, 3 * (size_t)n);
            /* halving: l each way; the gather: v receives in the rounds below its lowest
             * set bit (the root in all l), sends in that bit's round */
            EACH(sends[r] == (r == root ? l : l + 1) &&
                 recvs[r] ==
                     l + (r == root ? l : (uint32_t)__builtin_ctz((unsigned)((r - root + n) % n))));
            DONE();
        }
#undef EACH
#undef BUILD
#undef DONE
    }
}

/* Rounds of a run: message hops on its longest chain, through local dependencies and from
 * each send to the receive that matches it (the k-th message of a way). A send made to wait
 * for a receive it need not (serialising an exchange) lengthens the chain. */
static uint32_t sched_rounds(const struct coll_schedule *s, int32_t n)
{
    uint32_t *val[64], *match[64], rounds = 0;
    bool changed = true;

    for (int32_t r = 0; r < n; r++) {
        val[r] = calloc(s[r].nsteps + 1, sizeof(uint32_t));
        match[r] = calloc(s[r].nsteps + 1, sizeof(uint32_t));
        ASSERT(val[r] && match[r]);
    }
    /* match[b][i] for b's i-th step, a receive from a: the index of a's matching send */
    for (int32_t b = 0; b < n; b++)
        for (uint32_t i = 0, k; i < s[b].nsteps; i++) {
            const struct coll_step *rv = &s[b].steps[i];
            uint32_t seen = 0;
            if (rv->kind != COLL_STEP_RECV)
                continue;
            for (uint32_t j = 0; j < i; j++)
                seen += s[b].steps[j].kind == COLL_STEP_RECV && s[b].steps[j].peer == rv->peer;
            for (k = 0; k < s[rv->peer].nsteps; k++) {
                const struct coll_step *sd = &s[rv->peer].steps[k];
                if (sd->kind == COLL_STEP_SEND && sd->peer == b && seen-- == 0)
                    break;
            }
            ASSERT(k < s[rv->peer].nsteps);
            match[b][i] = k;
        }
    while (changed) {
        changed = false;
        for (int32_t r = 0; r < n; r++)
            for (uint32_t i = 0; i < s[r].nsteps; i++) {
                const struct coll_step *st = &s[r].steps[i];
                uint32_t v = 0;
                for (uint32_t d = 0; d < st->ndeps; d++)
                    v = COLL_MAX(v, val[r][st->deps[d]]);
                if (st->kind == COLL_STEP_RECV)
                    v = COLL_MAX(v, val[st->peer][match[r][i]] + 1);
                if (v != val[r][i]) {
                    ASSERT(v < 1000); /* a cycle would grow forever */
                    val[r][i] = v;
                    changed = true;
                }
                rounds = COLL_MAX(rounds, v);
            }
    }
    for (int32_t r = 0; r < n; r++) {
        free(val[r]);
        free(match[r]);
    }
    return rounds;
}

/* Unchunked schedules take the classic number of rounds: at 2 ranks one exchange (ring, rd
 * and bruck all-gather alike), no send waiting for a receive. */
TEST(rounds_match_the_patterns)
{
    static const struct {
        const char *name;
        enum coll_coll coll;
        int rounds; /* 0: n-1, 1: 2(n-1), 2: ceil(log2 n) (powers of two only if pow2) */
        bool pow2;
    } pats[] = {
        {"ring", COLL_COLL_ALLGATHER, 0, false},      {"ring", COLL_COLL_REDUCE_SCATTER, 0, false},
        {"ring", COLL_COLL_ALLREDUCE, 1, false},      {"bruck", COLL_COLL_ALLGATHER, 2, false},
        {"rd", COLL_COLL_ALLGATHER, 2, true},         {"rd", COLL_COLL_REDUCE_SCATTER, 2, true},
        {"rd", COLL_COLL_ALLREDUCE, 2, true},         {"bruck", COLL_COLL_ALLTOALL, 2, false},
    };
    uint32_t sends[64], recvs[64];

    for (size_t k = 0; k < COLL_ARRAY_SIZE(pats); k++)
        for (int32_t n = 2; n <= 16; n++) {
            const uint32_t want = pats[k].rounds == 0   ? (uint32_t)n - 1
                                  : pats[k].rounds == 1 ? 2 * (uint32_t)n - 2
                                                        : ceil_log2(n);
            struct coll_schedule *s;
            uint32_t got;

            if (pats[k].pow2 && (n & (n - 1)) != 0)
                continue;
            s = build_msgs(pats[k].name, pats[k].coll, n, 0, 3 * (size_t)n, sends, recvs);
            got = sched_rounds(s, n);
            ASSERT_MSG(got == want, "%s %s n=%d: %u rounds, not %u", pats[k].name,
                       coll__coll_name(pats[k].coll), n, got, want);
            free_scheds(s, n);
        }
}

/* A barrier: no rank's schedule can finish before every other rank has started: some step
 * of every rank depends (through messages) on some step of every other rank. */
static void check_barrier(const char *name, int32_t n, void (*mutate)(struct coll_schedule *),
                          int *broken_pairs_p)
{
    struct run_cfg c = {
        .algo = algo(name), .coll = COLL_COLL_BARRIER, .n = n, .chunk = 1, .dtype = COLL_UINT8};
    struct coll_schedule *s = build_all(&c);
    bool reached[64];
    int broken = 0;

    ASSERT_MSG(s, "%s", fail_msg);
    if (mutate)
        mutate(s);
    for (int32_t a = 0; a < n; a++) {
        ASSERT_EQ(sim_reach(s, n, a, reached), SIM_OK);
        for (int32_t b = 0; b < n; b++)
            broken += b != a && !reached[b];
    }
    free_scheds(s, n);
    *broken_pairs_p = broken;
}

TEST(barriers_wait_for_every_rank)
{
    static const char *const names[] = {"dissemination", "linear"};
    for (size_t i = 0; i < COLL_ARRAY_SIZE(names); i++)
        for (int32_t n = 1; n <= 64; n++) {
            int broken;
            check_barrier(names[i], n, NULL, &broken);
            ASSERT_MSG(broken == 0, "%s n=%d: %d pairs (a, b) where b can finish before a starts",
                       names[i], n, broken);
        }
}

/* A dissemination barrier whose rounds do not wait for the previous round's message on
 * rank 0 lets some rank out early; sim_reach says so. */
static void unchain_rank0(struct coll_schedule *s)
{
    for (uint32_t i = 0; i < s[0].nsteps; i++)
        s[0].steps[i].ndeps = 0;
}

TEST(barrier_check_catches_a_broken_barrier)
{
    int broken;
    check_barrier("dissemination", 8, unchain_rank0, &broken);
    fprintf(stderr, "# dissemination without its dependencies on rank 0: %d broken pairs\n",
            broken);
    ASSERT(broken > 0);
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
 * the runs fail (a simulator error or a wrong result), with the last simulator status in
 * *st_p and the last failure in err. */
static int broken_runs(const struct run_cfg *base, void (*mutate)(struct coll_schedule *),
                       int seeds, int *st_p, char *err, size_t errlen)
{
    int failures = 0;
    *st_p = SIM_OK;
    for (int k = 0; k < seeds; k++) {
        struct run_cfg c = *base;
        struct coll_schedule *s;
        int st = SIM_OK;

        c.seed = (uint64_t)k;
        s = build_all(&c);
        ASSERT(s);
        mutate(s);
        if (simulate(&c, s, &st)) {
            failures++;
            snprintf(err, errlen, "%.*s", (int)(errlen - 1), fail_msg);
            if (st != SIM_OK)
                *st_p = st;
        }
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

/* All-gather in place puts rank r's SEND at RECV[r count]: a schedule that receives there
 * before sending SEND is wrong in place only, and only the race check that knows the
 * offset says so. */
TEST(checker_catches_in_place_violation_at_an_offset)
{
    struct coll_algo_args a = {.coll = COLL_COLL_ALLGATHER,
                               .nranks = 2,
                               .rank = 1,
                               .count = 4,
                               .dtype = COLL_INT32,
                               .elem_size = 4,
                               .chunk_count = 4};
    struct coll_schedule s;
    struct sim_layout l;
    char err[512];
    uint32_t rv;

    sim_layout_of(COLL_COLL_ALLGATHER, 2, 1, 0, 4, &l);
    ASSERT(l.alias && l.send_at == 4 && l.send_count == 4 && l.recv_count == 8);
    sim_layout_of(COLL_COLL_REDUCE_SCATTER, 3, 2, 0, 5, &l);
    ASSERT(l.alias && l.send_at == -10 && l.send_count == 15 && l.recv_count == 5);
    sim_layout_of(COLL_COLL_GATHER, 3, 1, 0, 5, &l);
    ASSERT(!l.alias && l.send_count == 5 && l.recv_count == 0);
    sim_layout_of(COLL_COLL_SCATTER, 3, 2, 2, 5, &l);
    ASSERT(l.alias && l.send_at == -10 && l.send_count == 15 && l.recv_count == 5);
    /* rank 1: receive block 1 (its own place: SEND in place), then send SEND */
    coll__sched_init(&s, &a);
    ASSERT_EQ(coll__sched_recv(&s, 0, coll__slice(COLL_BUF_RECV, 4, 4), 0, NULL, &rv), 0);
    ASSERT_EQ(coll__sched_send(&s, 0, coll__slice(COLL_BUF_SEND, 0, 4), 1, &rv, NULL), 0);
    ASSERT_EQ(coll__sched_validate(&s), COLL_SUCCESS);
    ASSERT_EQ(sim_check_races_at(&s, 0, err, sizeof(err)), SIM_OK); /* all-reduce's view */
    ASSERT_EQ(sim_check_races_at(&s, 4, err, sizeof(err)), SIM_RACE);
    ASSERT_STR_CONTAINS(err, "wrong in place");
    /* unordered, it is a plain race at that offset */
    s.steps[1].ndeps = 0;
    ASSERT_EQ(sim_check_races_at(&s, 4, err, sizeof(err)), SIM_RACE);
    ASSERT_STR_CONTAINS(err, "no dependency orders them");
    coll__sched_free(&s);
}

/* Rank 1's pairwise all-to-all copies out of scratch lose their wait for the send of the
 * same block: harmless out of place, wrong in place. */
static void drop_copy_after_send(struct coll_schedule *s)
{
    for (uint32_t i = 0; i < s[1].nsteps; i++)
        if (s[1].steps[i].kind == COLL_STEP_COPY && s[1].steps[i].src.buf == COLL_BUF_SCRATCH)
            s[1].steps[i].ndeps = 1; /* keeps the receive */
}

TEST(checker_catches_missing_in_place_dependency)
{
    struct run_cfg c = {.algo = algo("pairwise"),
                        .coll = COLL_COLL_ALLTOALL,
                        .n = 4,
                        .count = 6,
                        .chunk = 6,
                        .dtype = COLL_INT32,
                        .op = COLL_SUM,
                        .gen = GEN_WIDE};
    struct coll_schedule *s = build_all(&c);
    char err[2048];
    int st, bad, races = 0;

    ASSERT(s);
    drop_copy_after_send(s);
    for (int32_t r = 0; r < c.n; r++) {
        int rs = sim_check_races_at(&s[r], 0, err, sizeof(err));
        if (rs == SIM_RACE)
            fprintf(stderr, "# %s\n", err);
        races += rs == SIM_RACE;
    }
    ASSERT_EQ(races, 1);
    free_scheds(s, c.n);
    ASSERT_EQ(broken_runs(&c, drop_copy_after_send, 20, &st, err, sizeof(err)), 0);
    c.in_place = true;
    bad = broken_runs(&c, drop_copy_after_send, 40, &st, err, sizeof(err));
    fprintf(stderr, "# in place: %d of 40 orders fail (last simulator status: %s)\n", bad,
            sim_status_name(st));
    ASSERT(bad > 0);
}

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
