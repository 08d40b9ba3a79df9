/*
 * patterns.c - check data: what each block of a buffer holds before and after a
 * call, made and counted period by period (the scheme is in main.c's opening comment).
 */
#include "collbench.h"

/* --------------------------------------------------------------------------------------
 * Check patterns. A block is a period of PERIOD elements repeated; what a period holds is
 * named by a struct pat: bytes moved from a sender, one rank's contribution to a reduction,
 * or the reduction's expected result.
 */

/* Round x to the nearest (ties to even) value of a small binary float with mbits fraction
 * bits, and return its bits. Finite, in-range x only: the patterns never overflow. */
static uint32_t encode_small_float(double x, const struct dtype_info *d)
{
    uint32_t sign = signbit(x) ? 1u << (d->ebits + d->mbits) : 0;
    double a = fabs(x), m;
    int emin = 1 - d->bias, e;

    if (a == 0)
        return sign;
    (void)frexp(a, &e);
    e -= 1; /* a = 1.f * 2^e */
    if (e < emin)
        e = emin;                          /* subnormal: the quantum stops shrinking */
    m = nearbyint(ldexp(a, d->mbits - e)); /* a in quanta of 2^(e - mbits), rounded */
    if (m >= ldexp(1.0, d->mbits + 1)) {   /* rounded up into the next binade */
        m /= 2;
        e += 1;
    }
    if (m < ldexp(1.0, d->mbits))
        return sign | (uint32_t)m; /* subnormal or zero: exponent field 0 */
    return sign | ((uint32_t)(e + d->bias) << d->mbits) | ((uint32_t)m - (1u << d->mbits));
}

/* Store the value (iv, or fv when use_fv) as element i of buf. */
static void store(void *buf, size_t i, coll_dtype_t dt, int64_t iv, double fv, bool use_fv)
{
    const struct dtype_info *d = &dtypes[dt];
    double x = use_fv ? fv : (double)iv;

    switch (dt) {
    case COLL_INT8:
        ((int8_t *)buf)[i] = (int8_t)iv;
        break;
    case COLL_UINT8:
        ((uint8_t *)buf)[i] = (uint8_t)iv;
        break;
    case COLL_INT32:
        ((int32_t *)buf)[i] = (int32_t)iv;
        break;
    case COLL_UINT32:
        ((uint32_t *)buf)[i] = (uint32_t)iv;
        break;
    case COLL_INT64:
        ((int64_t *)buf)[i] = iv;
        break;
    case COLL_UINT64:
        ((uint64_t *)buf)[i] = (uint64_t)iv;
        break;
    case COLL_FLOAT32:
        ((float *)buf)[i] = (float)x;
        break;
    case COLL_FLOAT64:
        ((double *)buf)[i] = x;
        break;
    case COLL_FLOAT16:
    case COLL_BFLOAT16:
        ((uint16_t *)buf)[i] = (uint16_t)encode_small_float(x, d);
        break;
    case COLL_FLOAT8E4M3:
    case COLL_FLOAT8E5M2:
        ((uint8_t *)buf)[i] = (uint8_t)encode_small_float(x, d);
        break;
    default:
        break;
    }
}

/* Element j of rank r's contribution to a reduction with op over nranks ranks. */
static int64_t red_value(coll_dtype_t dt, coll_op_t op, int r, int nranks, size_t j)
{
    const struct dtype_info *d = &dtypes[dt];
    uint64_t n = (uint64_t)nranks, mag;
    bool neg;

    if (op == COLL_PROD) {
        /* Mostly 1, a few 2: at most k twos per element over all ranks, 2^k exact. */
        uint64_t k = 0, p;
        while (k < 16 && (2ull << k) <= d->exact)
            k++;
        p = COLL_DIV_UP(n, k);
        if (p < 2)
            p = 2;
        mag = ((uint64_t)r + j) % p == 0 ? 2 : 1;
        neg = d->is_signed && ((uint64_t)r * 7 + j) % 5 == 0;
    } else {
        /* |value| <= a, so any partial sum over n ranks stays within exact; when even 1
         * per rank is too much (fp8 with many ranks), a sparse 0/1 does. */
        uint64_t a = d->exact / n;
        if (a > 1000)
            a = 1000;
        if (a >= 1) {
            mag = (((uint64_t)r + 1) * (j % 13 + 1) + j / 13) % (a + 1);
        } else {
            uint64_t p = COLL_DIV_UP(n, d->exact);
            mag = ((uint64_t)r + j) % p == 0;
        }
        neg = d->is_signed && ((uint64_t)r + 2 * j) % 3 == 1;
    }
    return neg ? -(int64_t)mag : (int64_t)mag;
}

static uint64_t mix64(uint64_t x)
{
    /* splitmix64's finaliser: every input bit moves every output bit */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* Where a reduction block starts in the period: blocks and rounds differ by a rotation. */
static size_t red_rotation(int blk, unsigned round)
{
    return ((size_t)blk * 389 + (size_t)round * 97) % PERIOD;
}

/* One period of what p names, for dt (and op over nranks for reductions), round `round`. */
void make_period(void *out, struct pat p, coll_dtype_t dt, coll_op_t op, int nranks, unsigned round)
{
    const struct dtype_info *d = &dtypes[dt];
    size_t rot = red_rotation(p.blk, round);

    if (p.kind == PAT_MOVE) {
        uint64_t seed = mix64(((uint64_t)round << 48) ^ ((uint64_t)(uint32_t)p.src << 24) ^
                              (uint64_t)(uint32_t)p.blk ^ 0x636f6c6cull);
        for (size_t j = 0; j < PERIOD; j++) {
            uint64_t h = mix64(seed + j);
            memcpy((char *)out + j * d->size, &h, d->size); /* little or big end: any bytes */
        }
        return;
    }
    if (p.kind == PAT_RED_SEND) {
        for (size_t j = 0; j < PERIOD; j++)
            store(out, j, dt, red_value(dt, op, p.src, nranks, (j + rot) % PERIOD), 0, false);
        return;
    }
    /* The result, rounded as coll documents: exact sums and products, then for AVG one
     * division by nranks (truncating for integers; in fp32, then rounded once, for the 16-
     * and 8-bit floats). */
    for (size_t j = 0; j < PERIOD; j++) {
        size_t jj = (j + rot) % PERIOD;
        int64_t acc = red_value(dt, op, 0, nranks, jj);

        for (int r = 1; r < nranks; r++) {
            int64_t v = red_value(dt, op, r, nranks, jj);
            switch (op) {
            case COLL_SUM:
            case COLL_AVG:
                acc += v;
                break;
            case COLL_PROD:
                acc *= v;
                break;
            case COLL_MAX:
                acc = v > acc ? v : acc;
                break;
            case COLL_MIN:
                acc = v < acc ? v : acc;
                break;
            default:
                break;
            }
        }
        if (op != COLL_AVG)
            store(out, j, dt, acc, 0, false);
        else if (!d->is_float)
            store(out, j, dt, acc / nranks, 0, false);
        else if (dt == COLL_FLOAT64)
            store(out, j, dt, 0, (double)acc / (double)nranks, true);
        else
            store(out, j, dt, 0, (double)((float)acc / (float)nranks), true);
    }
}

/* buf[0, count) = the period pat repeated. */
void fill_periodic(void *buf, const void *pat, size_t count, size_t esize)
{
    size_t total = count * esize, done = (count < PERIOD ? count : PERIOD) * esize;

    if (total == 0)
        return;
    memcpy(buf, pat, done);
    /* Doubling keeps every copy a whole number of periods from the start. */
    while (done < total) {
        size_t n = done < total - done ? done : total - done;
        memcpy((char *)buf + done, buf, n);
        done += n;
    }
}

/* Elements of buf[0, count) that differ from the period exp repeated. */
static uint64_t count_wrong(const void *buf, const void *exp, size_t count, size_t esize)
{
    const char *b = buf, *e = exp;
    uint64_t wrong = 0;

    for (size_t start = 0; start < count; start += PERIOD) {
        size_t n = count - start < PERIOD ? count - start : PERIOD;
        if (memcmp(b + start * esize, e, n * esize) == 0)
            continue;
        for (size_t j = 0; j < n; j++)
            wrong += memcmp(b + (start + j) * esize, e + j * esize, esize) != 0;
    }
    return wrong;
}

struct pat send_pat(const struct bench *b, int blk)
{
    struct pat p = {coll__colls[b->o.coll].reduces ? PAT_RED_SEND : PAT_MOVE, b->rank, blk};
    return p;
}

/* What block t of this rank's receive buffer must hold, from the row: every rank's data
 * reduced, or block t's rank's, or the root's; at this rank's block of an n-block send
 * buffer. A send/receive comes from the rank before (run.c pairs them in a ring). */
struct pat recv_pat(const struct bench *b, int root, int t)
{
    const struct coll_coll_desc *d = &coll__colls[b->o.coll];
    int r = b->rank, n = b->nranks;
    struct pat p = {PAT_MOVE, 0, 0};

    if (!coll__desc_moves_data(d))
        return p;
    p.blk = d->send_blocks == COLL_BLOCKS_N ? r : 0;
    if (d->reduces)
        p.kind = PAT_RED_EXPECT;
    else if (d->p2p)
        p.src = (r + n - 1) % n;
    else if (d->root == COLL_ROOT_SOURCE)
        p.src = root;
    else if (d->recv_blocks == COLL_BLOCKS_N)
        p.src = t;
    return p;
}

/* Does this rank's receive buffer hold a result worth checking? */
bool checks_recv(const struct bench *b, bool in_place, int root)
{
    const struct coll_coll_desc *d = &coll__colls[b->o.coll];

    if (!coll__desc_moves_data(d))
        return false;
    if (d->p2p)
        return !in_place; /* as nccl-tests: in-place send/recv is timed, not checked */
    return coll__desc_uses_recv(d, b->rank, root, 0);
}

bool column_checked(const struct bench *b, bool in_place)
{
    const struct coll_coll_desc *d = &coll__colls[b->o.coll];

    if (b->o.check == 0 || !coll__desc_moves_data(d))
        return false;
    return !(d->p2p && in_place);
}

/* buf (nblk blocks of param elements) = the periods named by pat_of(t), or their bitwise
 * complement (for receive buffers: every element nobody writes is then wrong). */
void fill_blocks(struct bench *b, void *buf, int nblk, const struct rowspec *rs, unsigned round,
                 bool recv_side, bool complement)
{
    size_t es = dtypes[rs->dt].size;

    for (int t = 0; t < nblk; t++) {
        struct pat p = recv_side ? recv_pat(b, rs->root, t) : send_pat(b, t);
        make_period(b->pat, p, rs->dt, rs->op, b->nranks, round);
        if (complement)
            for (size_t k = 0; k < PERIOD * es; k++)
                ((unsigned char *)b->pat)[k] ^= 0xff;
        fill_periodic((char *)buf + (size_t)t * rs->l.param * es, b->pat, rs->l.param, es);
    }
}

uint64_t check_blocks(struct bench *b, const void *buf, int nblk, const struct rowspec *rs,
                      unsigned round, bool recv_side)
{
    size_t es = dtypes[rs->dt].size;
    uint64_t wrong = 0;

    for (int t = 0; t < nblk; t++) {
        struct pat p = recv_side ? recv_pat(b, rs->root, t) : send_pat(b, t);
        make_period(b->pat, p, rs->dt, rs->op, b->nranks, round);
        wrong +=
            count_wrong((const char *)buf + (size_t)t * rs->l.param * es, b->pat, rs->l.param, es);
    }
    return wrong;
}

#ifdef COLLBENCH_TEST_HOOKS
/* Test builds only: COLLBENCH_FAULT makes the checked call look wrong on one rank
 * (COLLBENCH_FAULT_RANK, default the last), so that the tests can see collbench report it:
 *   elem  one element of the result flipped (a wrong reduction)
 *   swap  blocks 0 and 1 of the result exchanged, or a one-rank result shifted by one
 *         element (a misplaced contribution)
 *   hang  the rank stops before its call until -T fires (a stuck peer) */
void fault_after(struct bench *b, void *r, const struct rowspec *rs)
{
    size_t es = dtypes[rs->dt].size, blk = rs->l.param * es;
    unsigned char *p = r;

    if (!b->fault || b->rank != b->fault_rank || rs->l.param == 0)
        return;
    if (strcmp(b->fault, "swap") == 0) {
        if (rs->l.nrecv >= 2) {
            for (size_t k = 0; k < blk; k++) {
                unsigned char t = p[k];
                p[k] = p[blk + k];
                p[blk + k] = t;
            }
        } else if (rs->l.param >= 2) {
            memmove(p + es, p, blk - es);
        }
        return;
    }
    if (strcmp(b->fault, "hang") != 0)
        p[(rs->l.param / 2) * es] ^= 0x01;
}

void fault_before(struct bench *b)
{
    double t0 = now_s();

    if (!b->fault || b->rank != b->fault_rank || strcmp(b->fault, "hang") != 0)
        return;
    /* bounded, so that a test without -T still ends */
    while (!atomic_load(&b->wd.fired) && now_s() - t0 < 60)
        usleep(1000);
}
#endif
