/*
 * qallreduce.c - the quantized all-reduce: gradients cross the wire encoded by one of
 * quant.h's codecs, are summed in fp32 by whoever decodes them, and every rank ends with
 * the same bits.
 *
 * Divisions: 1 arguments and configuration, 2 error feedback objects, 3 local passes,
 * 4 the exchanges, 5 nodes and the hierarchical exchange, 6 public entry points.
 *
 * SCATTER (quantize once), rank r of n, tensor cut into n slices of whole blocks, slice o
 * owned by rank o:
 *
 *   encode the whole input once        E = q(x_r)           (slices of E are q(slice))
 *   all-to-all of bytes                E[o] -> rank o
 *   owner r: acc = sum over p, in rank order, of dq(E_p[r])  (fp32), / n for avg
 *   encode the result once             R_r = q(acc)
 *   R_r -> every rank (direct)         every rank gets R_0 .. R_{n-1}, which in order
 *                                      are the encoding of the whole result
 *   every rank: result = dq(R_0 .. R_{n-1})
 *
 * Error per element: sum_p err(q(x_p)) + err(q(acc)), each bounded by its codec bound on
 * its own block; nothing is requantized per hop (a ring reduce-scatter over encoded data
 * would requantize a partial sum at every hop, n - 1 times). Bytes sent per rank:
 *   sum_{o != r} B(|slice o|)  +  (n - 1) B(|slice r|)
 * with B = coll__quant_bytes. Both exchanges are direct (all-to-all-v), so these are the
 * bytes whatever the selector would pick for an all-gather.
 *
 * GATHER (small messages): encode the whole input once, all-gather the encodings, every
 * rank decodes all n and sums in rank order. One encoding error per input, none of the
 * result; (n - 1) B(count) bytes sent per rank, directly to each rank at once.
 *
 * HIER (nodes: G groups of L ranks each, e.g. hosts; a slow network between them):
 *
 *   within each node, fp32 reduce-scatter: local rank j sums its node's slice j exactly
 *   between nodes, SCATTER on slice j among the G ranks with local index j: encode the
 *     node's partial sum once, to the owners, fp32 sum, encode once, all-gather the bytes
 *   within each node, all-gather of the encoded slices; every rank decodes the whole tensor
 *
 * Only the node-to-node links carry encoded data, and only about 2 (G - 1) / G B(count / L)
 * per rank, where SCATTER's all-to-all sends a share of every rank's input over them. The
 * error is SCATTER's with G inputs, each a node's exact sum: the codec bounds are monotone
 * and subadditive, so sum_g b(node sum g) <= sum_p b(x_p) and SCATTER's bound still holds.
 *
 * Every exchange is a native collective on uint8 or fp32 (all-to-all-v with counts only
 * for the peers concerned), so framing, matching, timeouts and failure handling are the
 * executor's, and the bytes are counted where it posts sends.
 */
#include "qallreduce.h"
#include "path.h"

#include "../algo/cost.h"

#include "../reduce/elem.h"
#include "../reduce/quant.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__)
#define QAR_VECTORIZE __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#else
#define QAR_VECTORIZE
#endif

/* AUTO takes GATHER up to this many bytes of gathered encodings. */
#define GATHER_MAX_BYTES (64u << 10)

struct coll_qfeedback {
    struct coll_comm *comm;
    size_t count;
    struct coll_quant_feedback in;  /* [count]: what encoding this rank's input dropped */
    struct coll_quant_feedback out; /* the slice this rank owns: what encoding the sum dropped */
    size_t out_lo;                  /* first element of that slice */
    struct coll_quant_feedback mid; /* HIER: what encoding the node's partial sum dropped */
    size_t mid_lo;
};

/* What one call does, after the arguments are checked. */
struct qar {
    struct coll_comm *comm;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    coll_dtype_t dtype;
    coll_op_t op;
    struct coll_quant_desc din, dout; /* encodings of the inputs and of the owners' sums */
    coll_quant_algo_t algo;
    struct coll_qfeedback *fb;
};

/* ---- 1 arguments and configuration ------------------------------------------------------ */

static bool dtype_ok(coll_dtype_t dt)
{
    return dt == COLL_FLOAT32 || dt == COLL_FLOAT16 || dt == COLL_BFLOAT16;
}

/* A COLL_QUANT value: -1 off, a codec, or -2 when it names none. */
static int env_codec(const char *v)
{
    if (!v[0] || strcmp(v, "off") == 0 || strcmp(v, "0") == 0 || strcmp(v, "none") == 0)
        return -1;
    for (int c = 0; c < COLL_NUM_CODECS; c++)
        if (strcmp(v, coll__codec_name((enum coll_codec)c)) == 0)
            return c;
    return -2;
}

bool coll__quant_wanted(const struct coll_comm *comm, size_t count, coll_dtype_t dtype,
                        coll_op_t op)
{
    if (env_codec(comm->cfg.quant) == -1 || !dtype_ok(dtype) ||
        (op != COLL_SUM && op != COLL_AVG))
        return false;
    return count * coll__dtype_size(dtype) >= (uint64_t)comm->cfg.quant_min_bytes;
}

/* The comm's COLL_QUANT codec as a config (int8 when off). */
static coll_status_t env_config(struct coll_comm *comm, const char *fn, coll_quant_config_t *cfg)
{
    int c = env_codec(comm->cfg.quant);
    coll_quant_config_t def = COLL_QUANT_CONFIG_INIT(COLL_QUANT_INT8);

    if (c == -2)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: COLL_QUANT='%s' is not a codec (fp16, bf16, int8, e4m3, e5m2, "
                           "int4, e3m0, sign1 or off)",
                           fn, comm->cfg.quant);
    *cfg = def;
    if (c >= 0)
        cfg->codec = (coll_quant_codec_t)c;
    cfg->block = (uint32_t)comm->cfg.quant_block;
    return COLL_SUCCESS;
}

static uint64_t call_seed(uint64_t seed, int rank, uint64_t call, uint64_t which)
{
    uint64_t v[4] = {seed, (uint64_t)rank, call, which};
    return coll__hash64(v, sizeof(v), 0x71617272);
}

static coll_status_t check_args(struct qar *a, const char *fn, const coll_quant_config_t *cfg)
{
    struct coll_comm *comm = a->comm;
    coll_quant_config_t envcfg;
    coll_status_t st;
    size_t bytes;
    uint64_t call;

    /* the API checked the comm, its health and that no group is open */
    if (!dtype_ok(a->dtype))
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: dtype %s is not supported (fp32, fp16 or bf16 only)", fn,
                           coll__dtype_name(a->dtype));
    if (a->op != COLL_SUM && a->op != COLL_AVG)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: op %s is not supported (sum or avg only)", fn,
                           coll__op_name(a->op));
    if (a->count > SIZE_MAX / 8 / (size_t)comm->nranks)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: count %zu overflows the size of a buffer", fn, a->count);
    if (a->count > 0 && (!a->sendbuf || !a->recvbuf))
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: %s is NULL with count %zu", fn,
                           a->sendbuf ? "recvbuf" : "sendbuf", a->count);
    bytes = a->count * coll__dtype_size(a->dtype);
    if (a->count > 0 && a->sendbuf != a->recvbuf &&
        (uintptr_t)a->sendbuf < (uintptr_t)a->recvbuf + bytes &&
        (uintptr_t)a->recvbuf < (uintptr_t)a->sendbuf + bytes)
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: sendbuf and recvbuf overlap without being in place", fn);
    if (!cfg) {
        st = env_config(comm, fn, &envcfg);
        if (st != COLL_SUCCESS)
            return st;
        cfg = &envcfg;
    }
    if (cfg->size < sizeof(*cfg))
        return coll__error(comm, COLL_INVALID_ARGUMENT,
                           "%s: config->size is %zu, not sizeof(coll_quant_config_t) = %zu "
                           "(start from COLL_QUANT_CONFIG_INIT)",
                           fn, cfg->size, sizeof(*cfg));
    if ((unsigned)cfg->codec >= COLL_QUANT_NUM_CODECS)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: codec %d is not a coll_quant_codec_t",
                           fn, (int)cfg->codec);
    if ((unsigned)cfg->algo > COLL_QUANT_ALGO_HIER)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: algo %d is not a coll_quant_algo_t",
                           fn, (int)cfg->algo);
    if (cfg->stochastic != 0 && cfg->stochastic != 1)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "%s: stochastic is %d, not 0 or 1", fn,
                           cfg->stochastic);
    a->din = COLL_QUANT_DESC_INIT((enum coll_codec)cfg->codec);
    a->din.block = cfg->block;
    a->din.scale_dtype = cfg->scale_dtype;
    a->din.stochastic = cfg->stochastic != 0;
    st = coll__quant_validate(comm, &a->din, a->dtype);
    if (st != COLL_SUCCESS)
        return st;
    if (a->fb) {
        if (a->fb->comm != comm)
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "%s: feedback state was made for another communicator", fn);
        if (a->fb->count != a->count)
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "%s: feedback state holds %zu elements, the call has %zu", fn,
                               a->fb->count, a->count);
        if (cfg->codec == COLL_QUANT_SIGN1 && cfg->stochastic)
            return coll__error(comm, COLL_INVALID_ARGUMENT,
                               "%s: stochastic sign1 diverges under error feedback (its error "
                               "exceeds the value); use deterministic sign1",
                               fn);
    }
    a->algo = cfg->algo;
    /* Every rank draws different noise, and every call too: correlated rounding errors
     * would add up instead of averaging out. The call number is the same on all ranks. */
    pthread_mutex_lock(&comm->lock);
    call = comm->next_coll_seq;
    pthread_mutex_unlock(&comm->lock);
    a->dout = a->din;
    a->din.seed = call_seed(cfg->seed, comm->rank, call, 0);
    a->dout.seed = call_seed(cfg->seed, comm->rank, call, 1);
    return COLL_SUCCESS;
}

/* ---- 2 error feedback objects -------------------------------------------------------- */

coll_status_t coll__qfeedback_create(struct coll_comm *comm, size_t count, const char *fn,
                                     coll_quant_feedback_t **fb_p)
{
    struct coll_qfeedback *fb;
    coll_status_t st;

    fb = calloc(1, sizeof(*fb));
    if (!fb)
        return coll__error(comm, COLL_SYSTEM_ERROR, "%s: out of memory", fn);
    st = coll__quant_feedback_init(&fb->in, count);
    if (st != COLL_SUCCESS) {
        free(fb);
        return coll__error(comm, st, "%s: %s", fn, coll__thread_error());
    }
    fb->comm = comm;
    fb->count = count;
    *fb_p = fb;
    return COLL_SUCCESS;
}

void coll__qfeedback_reset(coll_quant_feedback_t *fb)
{
    coll__quant_feedback_reset(&fb->in);
    coll__quant_feedback_reset(&fb->out);
    coll__quant_feedback_reset(&fb->mid);
}

void coll__qfeedback_destroy(coll_quant_feedback_t *fb)
{
    coll__quant_feedback_fini(&fb->in);
    coll__quant_feedback_fini(&fb->out);
    coll__quant_feedback_fini(&fb->mid);
    free(fb);
}

/* A slice residual covers [lo, lo + n); a different slice (another block size, exchange or
 * number of ranks) starts from zero, as the old residual belongs to other elements. */
static coll_status_t feedback_slice(struct coll_quant_feedback *f, size_t *lo_p, size_t lo,
                                    size_t n)
{
    if (f->count == n && *lo_p == lo && (f->residual || n == 0))
        return COLL_SUCCESS;
    coll__quant_feedback_fini(f);
    *lo_p = lo;
    return coll__quant_feedback_init(f, n);
}

/* ---- 3 local passes --------------------------------------------------------------------- */

static QAR_VECTORIZE void widen(const void *restrict src, coll_dtype_t dt, size_t n,
                                float *restrict dst)
{
    const uint16_t *s = src;

    if (dt == COLL_FLOAT16)
        for (size_t i = 0; i < n; i++)
            dst[i] = coll__f16_to_f32(s[i]);
    else
        for (size_t i = 0; i < n; i++)
            dst[i] = coll__bf16_to_f32(s[i]);
}

static QAR_VECTORIZE void divide(float *restrict x, size_t n, float d)
{
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] / d;
}

/* Inf (from an fp16/bf16 code or an overflowing sum) becomes NaN: the result of a sum
 * with a non-finite term is reported as unusable, never as a value. */
static QAR_VECTORIZE void nonfinite_to_nan(float *restrict x, size_t n)
{
    const uint32_t qnan = 0x7fc00000u;

    for (size_t i = 0; i < n; i++) {
        uint32_t b = coll__f32_bits(x[i]);
        uint32_t bad = 0u - (uint32_t)((b & 0x7f800000u) == 0x7f800000u);
        x[i] = coll__bits_f32((b & ~bad) | (qnan & bad));
    }
}

static QAR_VECTORIZE void narrow(const float *restrict src, coll_dtype_t dt, size_t n,
                                 void *restrict dst)
{
    uint16_t *d = dst;

    if (dt == COLL_FLOAT16)
        for (size_t i = 0; i < n; i++)
            d[i] = coll__f32_to_f16(src[i]);
    else
        for (size_t i = 0; i < n; i++)
            d[i] = coll__f32_to_bf16(src[i]);
}

/* E = q(input) (+ the residual, which is then updated), whole tensor. tmp: count floats,
 * needed with feedback on fp16/bf16 input. */
static coll_status_t encode_input(const struct qar *a, float *tmp, uint8_t *out)
{
    const float *g;

    if (!a->fb)
        return coll__quant_encode(&a->din, a->sendbuf, a->dtype, a->count, out);
    if (a->dtype == COLL_FLOAT32) {
        g = a->sendbuf;
    } else {
        widen(a->sendbuf, a->dtype, a->count, tmp);
        g = tmp;
    }
    return coll__quant_feedback_apply(&a->fb->in, g, a->count, &a->din, out);
}

/* The fp32 result (count floats) into recvbuf. res may be recvbuf itself (fp32). */
static void finish(const struct qar *a, float *res, bool check_finite)
{
    if (check_finite)
        nonfinite_to_nan(res, a->count);
    if (a->dtype != COLL_FLOAT32)
        narrow(res, a->dtype, a->count, a->recvbuf);
}

/* ---- 4 the two exchanges ---------------------------------------------------------------- */

/* The comm's all-to-all-v: the API's call, handed down to the paths (path.h). */
static coll_status_t a2av(struct coll_comm *comm, const void *sendbuf, const size_t *scounts,
                          const size_t *sdispls, void *recvbuf, const size_t *rcounts,
                          const size_t *rdispls, coll_dtype_t dtype)
{
    return comm->path_host->alltoallv(sendbuf, scounts, sdispls, recvbuf, rcounts, rdispls, dtype,
                                      comm);
}

/* A rank that cannot get its memory would leave the others waiting in the first exchange
 * until COLL_TIMEOUT_MS; failing the comm tells them at once. */
static coll_status_t no_memory(struct coll_comm *comm, const char *fn, size_t bytes)
{
    comm->path_host->abort(comm);
    return coll__error(comm, COLL_SYSTEM_ERROR, "%s: out of memory for %zu bytes of buffers", fn,
                       bytes);
}

static coll_status_t run_gather(const struct qar *a, const char *fn)
{
    struct coll_comm *comm = a->comm;
    const size_t n = (size_t)comm->nranks, qb = coll__quant_bytes(&a->din, a->count);
    const bool f32 = a->dtype == COLL_FLOAT32;
    const size_t need_tmp = !f32 ? a->count : 0;
    uint8_t *all = malloc(n * qb), *own = malloc(qb);
    float *tmp = need_tmp ? malloc(need_tmp * sizeof(float)) : NULL;
    float *res;
    coll_status_t st;

    if (!all || !own || (need_tmp && !tmp)) {
        free(all);
        free(own);
        free(tmp);
        return no_memory(comm, fn, (n + 1) * qb + need_tmp * sizeof(float));
    }
    COLL_CHECK_GOTO(encode_input(a, tmp, all + (size_t)comm->rank * qb), st, out);
    if (n > 1) {
        size_t *cnt = calloc(4 * n, sizeof(size_t));
        if (!cnt) {
            st = no_memory(comm, fn, 4 * n * sizeof(size_t));
            goto out;
        }
        /* Direct: the bytes are (n - 1) B(count) per rank, as documented, whatever algorithm
         * the selector would choose for an all-gather. Sent from a copy: all-to-all-v is
         * not in place. */
        for (size_t p = 0; p < n; p++) {
            cnt[p] = p == (size_t)comm->rank ? 0 : qb;             /* sendcounts */
            cnt[2 * n + p] = cnt[p];                               /* recvcounts */
            cnt[3 * n + p] = p * qb;                               /* rdispls */
        }
        memcpy(own, all + (size_t)comm->rank * qb, qb);
        st = a2av(comm, own, cnt, cnt + n, all, cnt + 2 * n, cnt + 3 * n, COLL_UINT8);
        free(cnt);
        if (st != COLL_SUCCESS)
            goto out;
    }
    /* Rank order, from the same bytes on every rank: the same sum everywhere. The input
     * has been read, so an in-place fp32 result can go straight into recvbuf. */
    res = f32 ? (float *)a->recvbuf : tmp;
    COLL_CHECK_GOTO(coll__quant_decode(&a->din, all, a->count, res), st, out);
    for (size_t p = 1; p < n; p++)
        COLL_CHECK_GOTO(coll__quant_decode_add(&a->din, all + p * qb, a->count, res), st, out);
    if (a->op == COLL_AVG)
        divide(res, a->count, (float)n);
    finish(a, res, true);
out:
    free(all);
    free(own);
    free(tmp);
    return st;
}

static coll_status_t run_scatter(const struct qar *a, const char *fn)
{
    struct coll_comm *comm = a->comm;
    const int n = comm->nranks, r = comm->rank;
    const bool f32 = a->dtype == COLL_FLOAT32;
    /* Slices of whole blocks (fp16/bf16 have none; the default block keeps slices aligned). */
    const size_t blk = a->din.codec == COLL_CODEC_FP16 || a->din.codec == COLL_CODEC_BF16
                           ? COLL_QUANT_BLOCK_DEFAULT
                           : a->din.block;
    const size_t nblocks = a->count / blk + (a->count % blk != 0);
    const size_t per = (nblocks / (size_t)n + (nblocks % (size_t)n != 0)) * blk;
    const size_t lo = COLL_MIN((size_t)r * per, a->count), hi = COLL_MIN(lo + per, a->count);
    const size_t mine = hi - lo, qmine = coll__quant_bytes(&a->din, mine);
    const size_t qall = coll__quant_bytes(&a->din, a->count);
    size_t *cnt = calloc(4 * (size_t)n, sizeof(size_t)), bytes;
    uint8_t *enc = NULL, *rbuf = NULL, *gbuf = NULL;
    float *tmp = NULL, *res, *acc;
    coll_status_t st = COLL_SUCCESS;

    /* tmp: the fp32 result of an fp16/bf16 all-reduce (also the widened input, which is
     * dead by the time the result is written); the owner sums into its slice of it. */
    bytes = qall + (size_t)n * qmine + qmine + (f32 ? 0 : a->count * sizeof(float));
    enc = malloc(qall ? qall : 1);
    rbuf = malloc((size_t)n * qmine + 1);
    gbuf = malloc(qmine + 1);
    if (!f32)
        tmp = malloc(a->count * sizeof(float));
    if (!cnt || !enc || !rbuf || !gbuf || (!f32 && !tmp)) {
        st = no_memory(comm, fn, bytes);
        goto out;
    }
    if (a->fb && (st = feedback_slice(&a->fb->out, &a->fb->out_lo, lo, mine)) != COLL_SUCCESS) {
        st = no_memory(comm, fn, mine * sizeof(float));
        goto out;
    }
    COLL_CHECK_GOTO(encode_input(a, tmp, enc), st, out);

    /* E[o] -> rank o. Slice o of the encoding starts at B(o * per): slices are whole blocks. */
    if (n > 1) {
        size_t *scnt = cnt, *sdis = cnt + n, *rcnt = cnt + 2 * n, *rdis = cnt + 3 * n;
        for (int o = 0; o < n; o++) {
            size_t olo = COLL_MIN((size_t)o * per, a->count);
            size_t ohi = COLL_MIN(olo + per, a->count);
            sdis[o] = coll__quant_bytes(&a->din, olo);
            scnt[o] = o == r ? 0 : coll__quant_bytes(&a->din, ohi) - sdis[o];
            rcnt[o] = o == r ? 0 : qmine;
            rdis[o] = (size_t)o * qmine;
        }
        COLL_CHECK_GOTO(a2av(comm, enc, scnt, sdis, rbuf, rcnt, rdis, COLL_UINT8), st,
                        out);
    }

    /* Owner: the fp32 sum of every rank's piece, in rank order. */
    res = f32 ? (float *)a->recvbuf : tmp;
    acc = res + lo;
    for (int p = 0; p < n && mine > 0; p++) {
        const uint8_t *src = p == r ? enc + coll__quant_bytes(&a->din, lo) : rbuf + p * qmine;
        COLL_CHECK_GOTO(p == 0 ? coll__quant_decode(&a->din, src, mine, acc)
                               : coll__quant_decode_add(&a->din, src, mine, acc),
                        st, out);
    }
    if (a->op == COLL_AVG)
        divide(acc, mine, (float)n);
    /* Our encoded sum goes to every rank, each owner's into its place in enc (spent by now):
     * the slots in order are the encoding of the whole result. Direct, with exact sizes:
     * no padding, and the same bytes whatever algorithm would serve an all-gather. */
    if (mine > 0) {
        uint8_t *slot = gbuf;
        if (a->fb)
            COLL_CHECK_GOTO(coll__quant_feedback_apply(&a->fb->out, acc, mine, &a->dout, slot), st,
                            out);
        else
            COLL_CHECK_GOTO(coll__quant_encode_at(&a->dout, acc, COLL_FLOAT32, mine, lo, slot), st,
                            out);
    }
    if (n > 1) {
        size_t *scnt = cnt, *sdis = cnt + n, *rcnt = cnt + 2 * n, *rdis = cnt + 3 * n;
        for (int o = 0; o < n; o++) {
            size_t olo = COLL_MIN((size_t)o * per, a->count);
            size_t ohi = COLL_MIN(olo + per, a->count);
            scnt[o] = o == r ? 0 : qmine;
            sdis[o] = 0;
            rdis[o] = coll__quant_bytes(&a->din, olo);
            rcnt[o] = o == r ? 0 : coll__quant_bytes(&a->din, ohi) - rdis[o];
        }
        COLL_CHECK_GOTO(a2av(comm, gbuf, scnt, sdis, enc, rcnt, rdis, COLL_UINT8), st,
                        out);
    }
    memcpy(enc + coll__quant_bytes(&a->din, lo), gbuf, qmine);

    /* Everyone, the owner too, keeps what the bytes say: the same result on every rank. */
    COLL_CHECK_GOTO(coll__quant_decode(&a->din, enc, a->count, res), st, out);
    /* Block codecs decode a finite block as finite values (an overflowing sum became a NaN
     * block when it was encoded); fp16 and bf16 codes can hold Inf. */
    finish(a, res, a->din.codec == COLL_CODEC_FP16 || a->din.codec == COLL_CODEC_BF16);
out:
    free(cnt);
    free(enc);
    free(rbuf);
    free(gbuf);
    free(tmp);
    return st;
}

/* ---- 5 nodes and the hierarchical exchange ------------------------------------------------ */

/* What makes ranks one node: the same host and the same listen address (network
 * namespaces on one host, or containers, are separate nodes: their traffic to each other
 * leaves through a network interface). */
static uint64_t node_key(const struct coll_peer_info *pi)
{
    struct sockaddr_storage ss;
    const void *ip = NULL;
    size_t iplen = 0;

    memset(&ss, 0, sizeof(ss));
    memcpy(&ss, pi->addr, COLL_MIN((size_t)pi->addr_len, sizeof(pi->addr)));
    if (ss.ss_family == AF_INET) {
        ip = &((const struct sockaddr_in *)(const void *)&ss)->sin_addr;
        iplen = sizeof(struct in_addr);
    } else if (ss.ss_family == AF_INET6) {
        ip = &((const struct sockaddr_in6 *)(const void *)&ss)->sin6_addr;
        iplen = sizeof(struct in6_addr);
    }
    return coll__hash64(ip ? ip : (const void *)"", iplen, pi->host_hash);
}

/* The nodes: member[g * L + j] is the rank with local index j on node g (nodes in order of
 * their lowest rank, ranks in order within a node). Returns G, or 0 when the ranks do not
 * form at least two nodes of the same size L >= 2 (HIER then has nothing to gain). */
static int find_nodes(const struct coll_comm *comm, int *member, int *L_p)
{
    const int n = comm->nranks;
    const int64_t k = comm->cfg.quant_node_ranks;
    int G = 0, L = 0, *node = calloc((size_t)n, sizeof(int)), *fill = NULL;
    uint64_t *key = calloc((size_t)n, sizeof(uint64_t));

    if (!node || !key)
        goto fail;
    for (int r = 0; r < n; r++) {
        key[r] = k > 0 ? (uint64_t)(r / k) : node_key(&comm->peers[r]);
        node[r] = -1;
        for (int q = 0; q < r && node[r] < 0; q++)
            if (key[q] == key[r])
                node[r] = node[q];
        if (node[r] < 0)
            node[r] = G++;
    }
    if (G < 2 || n % G != 0 || (L = n / G) < 2)
        goto fail;
    fill = calloc((size_t)G, sizeof(int));
    if (!fill)
        goto fail;
    for (int r = 0; r < n; r++) {
        if (fill[node[r]] == L)
            goto fail; /* nodes of different sizes */
        member[node[r] * L + fill[node[r]]++] = r;
    }
    free(node);
    free(key);
    free(fill);
    *L_p = L;
    return G;
fail:
    free(node);
    free(key);
    free(fill);
    return 0;
}

/* Slice k of m over [lo, hi), whole blocks of blk: [*lo_p, *hi_p). */
static void slice_of(size_t lo, size_t hi, size_t blk, int m, int k, size_t *lo_p, size_t *hi_p)
{
    const size_t len = hi - lo, nb = len / blk + (len % blk != 0);
    const size_t per = (nb / (size_t)m + (nb % (size_t)m != 0)) * blk;

    *lo_p = lo + COLL_MIN((size_t)k * per, len);
    *hi_p = lo + COLL_MIN((size_t)k * per + per, len);
}

static QAR_VECTORIZE void add_into(float *restrict acc, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        acc[i] += x[i];
}

static coll_status_t run_hier(const struct qar *a, const char *fn, int G, int L,
                              const int *member)
{
    struct coll_comm *comm = a->comm;
    const int n = comm->nranks, r = comm->rank;
    const struct coll_quant_desc *d = &a->din;
    const bool f32 = a->dtype == COLL_FLOAT32;
    const size_t blk = d->codec == COLL_CODEC_FP16 || d->codec == COLL_CODEC_BF16
                           ? COLL_QUANT_BLOCK_DEFAULT
                           : d->block;
    size_t lo, hi, len, sub_lo, sub_hi, sub, qlen, qsub, qall, bytes;
    size_t *cnt = calloc(4 * (size_t)n, sizeof(size_t));
    size_t *scnt = cnt, *sdis = cnt + n, *rcnt = cnt + 2 * n, *rdis = cnt + 3 * n;
    float *in32 = NULL, *part = NULL, *pieces = NULL, *res;
    uint8_t *enc = NULL, *rbuf = NULL, *rslice = NULL, *whole = NULL;
    coll_status_t st = COLL_SUCCESS;
    int g = 0, j = 0;

    for (int k = 0; k < n; k++)
        if (member[k] == r)
            g = k / L, j = k % L;
    slice_of(0, a->count, blk, L, j, &lo, &hi);
    len = hi - lo;
    slice_of(lo, hi, blk, G, g, &sub_lo, &sub_hi);
    sub = sub_hi - sub_lo;
    qlen = coll__quant_bytes(d, len);
    qsub = coll__quant_bytes(d, sub);
    qall = coll__quant_bytes(d, a->count);

    bytes = (f32 ? 0 : a->count * sizeof(float)) + (size_t)L * len * sizeof(float) +
            qlen + (size_t)G * qsub + qlen + qall;
    if (!f32)
        in32 = malloc(a->count * sizeof(float));
    pieces = malloc((size_t)L * len * sizeof(float) + 1);
    enc = malloc(qlen + 1);
    rbuf = malloc((size_t)G * qsub + 1);
    rslice = malloc(qlen + 1);
    whole = malloc(qall + 1);
    if (!cnt || (!f32 && !in32) || !pieces || !enc || !rbuf || !rslice || !whole) {
        st = no_memory(comm, fn, bytes);
        goto out;
    }
    if (a->fb && ((st = feedback_slice(&a->fb->mid, &a->fb->mid_lo, lo, len)) != COLL_SUCCESS ||
                  (st = feedback_slice(&a->fb->out, &a->fb->out_lo, sub_lo, sub)) !=
                      COLL_SUCCESS)) {
        st = no_memory(comm, fn, (len + sub) * sizeof(float));
        goto out;
    }
    if (!f32)
        widen(a->sendbuf, a->dtype, a->count, in32);
    else
        in32 = (float *)a->sendbuf; /* read only */

    /* 1: within the node, slice j' of the input (fp32) to local rank j'. */
    memset(cnt, 0, 4 * (size_t)n * sizeof(size_t));
    for (int jj = 0; jj < L; jj++) {
        int peer = member[g * L + jj];
        size_t l2, h2;
        slice_of(0, a->count, blk, L, jj, &l2, &h2);
        if (peer == r)
            continue;
        scnt[peer] = h2 - l2;
        sdis[peer] = l2;
        rcnt[peer] = len;
        rdis[peer] = (size_t)jj * len;
    }
    COLL_CHECK_GOTO(a2av(comm, in32, scnt, sdis, pieces, rcnt, rdis, COLL_FLOAT32), st,
                    out);
    /* The node's exact (fp32) partial sum of slice j, in local rank order. */
    memcpy(pieces + (size_t)j * len, in32 + lo, len * sizeof(float)); /* our own slot */
    part = pieces;
    for (int jj = 1; jj < L; jj++)
        add_into(part, pieces + (size_t)jj * len, len);

    /* 2: between nodes, sub-slice g' of the encoded partial sum to node g', rank j. */
    if (len > 0 && a->fb)
        COLL_CHECK_GOTO(coll__quant_feedback_apply(&a->fb->mid, part, len, d, enc), st, out);
    else if (len > 0)
        COLL_CHECK_GOTO(coll__quant_encode_at(d, part, COLL_FLOAT32, len, lo, enc), st, out);
    memset(cnt, 0, 4 * (size_t)n * sizeof(size_t));
    for (int gg = 0; gg < G; gg++) {
        int peer = member[gg * L + j];
        size_t l2, h2;
        slice_of(lo, hi, blk, G, gg, &l2, &h2);
        if (peer == r)
            continue;
        sdis[peer] = coll__quant_bytes(d, l2 - lo);
        scnt[peer] = coll__quant_bytes(d, h2 - lo) - sdis[peer];
        rcnt[peer] = qsub;
        rdis[peer] = (size_t)gg * qsub;
    }
    COLL_CHECK_GOTO(a2av(comm, enc, scnt, sdis, rbuf, rcnt, rdis, COLL_UINT8), st, out);

    /* 3: the owner of sub-slice g of slice j: fp32 sum over nodes in node order, / n for
     * avg, encoded once. The sum goes into the (now encoded) node partial sum's memory. */
    {
        float *acc = part;
        uint8_t *mine = rbuf + (size_t)g * qsub; /* its slot held nothing: ours came in enc */
        for (int gg = 0; gg < G && sub > 0; gg++) {
            const uint8_t *src = gg == g ? enc + coll__quant_bytes(d, sub_lo - lo)
                                         : rbuf + (size_t)gg * qsub;
            COLL_CHECK_GOTO(gg == 0 ? coll__quant_decode(d, src, sub, acc)
                                    : coll__quant_decode_add(d, src, sub, acc),
                            st, out);
        }
        if (a->op == COLL_AVG)
            divide(acc, sub, (float)n);
        if (sub > 0 && a->fb)
            COLL_CHECK_GOTO(coll__quant_feedback_apply(&a->fb->out, acc, sub, &a->dout, mine),
                            st, out);
        else if (sub > 0)
            COLL_CHECK_GOTO(coll__quant_encode_at(&a->dout, acc, COLL_FLOAT32, sub, sub_lo, mine),
                            st, out);
    }

    /* 4: between nodes, all-gather of the encoded sub-slices: rslice becomes slice j's. */
    memcpy(rslice + coll__quant_bytes(d, sub_lo - lo), rbuf + (size_t)g * qsub, qsub);
    memset(cnt, 0, 4 * (size_t)n * sizeof(size_t));
    for (int gg = 0; gg < G; gg++) {
        int peer = member[gg * L + j];
        size_t l2, h2;
        slice_of(lo, hi, blk, G, gg, &l2, &h2);
        if (peer == r)
            continue;
        scnt[peer] = qsub;
        sdis[peer] = (size_t)g * qsub;
        rdis[peer] = coll__quant_bytes(d, l2 - lo);
        rcnt[peer] = coll__quant_bytes(d, h2 - lo) - rdis[peer];
    }
    COLL_CHECK_GOTO(a2av(comm, rbuf, scnt, sdis, rslice, rcnt, rdis, COLL_UINT8), st,
                    out);

    /* 5: within the node, all-gather of the encoded slices: the whole tensor's encoding. */
    memset(cnt, 0, 4 * (size_t)n * sizeof(size_t));
    for (int jj = 0; jj < L; jj++) {
        int peer = member[g * L + jj];
        size_t l2, h2;
        slice_of(0, a->count, blk, L, jj, &l2, &h2);
        if (peer == r)
            continue;
        scnt[peer] = qlen;
        sdis[peer] = 0;
        rdis[peer] = coll__quant_bytes(d, l2);
        rcnt[peer] = coll__quant_bytes(d, h2) - rdis[peer];
    }
    memcpy(whole + coll__quant_bytes(d, lo), rslice, qlen);
    COLL_CHECK_GOTO(a2av(comm, rslice, scnt, sdis, whole, rcnt, rdis, COLL_UINT8), st,
                    out);

    /* Everyone decodes the same bytes. The input has been read (and copied) by now. */
    res = f32 ? (float *)a->recvbuf : in32;
    COLL_CHECK_GOTO(coll__quant_decode(d, whole, a->count, res), st, out);
    finish(a, res, d->codec == COLL_CODEC_FP16 || d->codec == COLL_CODEC_BF16);
out:
    if (!f32)
        free(in32);
    free(cnt);
    free(pieces);
    free(enc);
    free(rbuf);
    free(rslice);
    free(whole);
    return st;
}

static coll_status_t qar_run(struct qar *a, const char *fn)
{
    const size_t n = (size_t)a->comm->nranks;
    size_t qb, blk, nblocks;
    bool gather;

    if (a->count == 0)
        return COLL_SUCCESS;
    qb = coll__quant_bytes(&a->din, a->count);
    blk = a->din.codec == COLL_CODEC_FP16 || a->din.codec == COLL_CODEC_BF16
              ? COLL_QUANT_BLOCK_DEFAULT
              : a->din.block;
    nblocks = a->count / blk + (a->count % blk != 0);
    if (a->algo == COLL_QUANT_ALGO_AUTO)
        gather = n == 1 || nblocks < n || qb <= GATHER_MAX_BYTES / n;
    else
        gather = a->algo == COLL_QUANT_ALGO_GATHER;
    if (!gather && (a->algo == COLL_QUANT_ALGO_AUTO || a->algo == COLL_QUANT_ALGO_HIER)) {
        int *member = malloc(n * sizeof(int)), G, L = 0;
        coll_status_t st;
        if (!member)
            return no_memory(a->comm, fn, n * sizeof(int));
        G = find_nodes(a->comm, member, &L);
        if (G > 0) {
            COLL_INFO(COLL_SUB_COLL,
                      "quantized all-reduce of %zu %s (%s): hier, %d nodes of %d ranks, %zu "
                      "bytes encoded",
                      a->count, coll__dtype_name(a->dtype), coll__codec_name(a->din.codec), G, L,
                      qb);
            st = run_hier(a, fn, G, L, member);
            free(member);
            return st;
        }
        free(member);
    }
    COLL_INFO(COLL_SUB_COLL, "quantized all-reduce of %zu %s (%s): %s, %zu bytes encoded", a->count,
              coll__dtype_name(a->dtype), coll__codec_name(a->din.codec),
              gather ? "gather" : "scatter", qb);
    return gather ? run_gather(a, fn) : run_scatter(a, fn);
}

/* The message of a failure inside the call, on the comm and the thread: the exchanges put
 * theirs on both already, the codecs (which have no comm) on the thread only. */
static coll_status_t report(struct coll_comm *comm, coll_status_t st)
{
    char msg[sizeof(comm->errmsg)];

    if (st == COLL_SUCCESS)
        return st;
    if (atomic_load(&comm->failed) != COLL_SUCCESS) {
        coll__set_thread_error(comm->errmsg);
        return st;
    }
    snprintf(msg, sizeof(msg), "%s", coll__thread_error());
    return coll__error(comm, st, "%s", msg);
}

/* ---- 6 entry points and the path ----------------------------------------------------- */

coll_status_t coll__allreduce_quant(struct coll_comm *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, coll_dtype_t dtype, coll_op_t op,
                                    const coll_quant_config_t *config, coll_quant_feedback_t *fb,
                                    const char *fn)
{
    struct qar a = {.comm = comm, .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                    .dtype = dtype, .op = op, .fb = fb};
    coll_status_t st = check_args(&a, fn, config);

    if (st != COLL_SUCCESS)
        return st;
    return report(comm, qar_run(&a, fn));
}

/* The quant path's slot of a comm (comm->path_state[COLL_PATH_STATE_QUANT]). */
struct quant_slot {
    bool nb_said; /* COLL_QUANT skipped a non-blocking or grouped call: said once */
};

coll_status_t coll__quant_comm_init(struct coll_comm *comm)
{
    struct quant_slot *slot = calloc(1, sizeof(*slot));

    if (!slot)
        return coll__error(comm, COLL_SYSTEM_ERROR, "out of memory for the quant path's state");
    comm->path_state[COLL_PATH_STATE_QUANT] = slot;
    return COLL_SUCCESS;
}

void coll__quant_comm_fini(struct coll_comm *comm)
{
    free(comm->path_state[COLL_PATH_STATE_QUANT]);
    comm->path_state[COLL_PATH_STATE_QUANT] = NULL;
}

/* A blocking all-reduce outside groups that COLL_QUANT asks for (coll__quant_wanted). The
 * quantized all-reduce is a blocking sequence of collectives: a request or a group member
 * runs plain, which the user who set COLL_QUANT hears of once, when such a call is about to
 * run (why NULL: not when a tool only asks). */
static bool quant_takes(struct coll_comm *comm, const struct coll_call *c, char *why, size_t n)
{
    struct quant_slot *slot = comm->path_state[COLL_PATH_STATE_QUANT];

    if (c->coll != COLL_COLL_ALLREDUCE || c->form == COLL_FORM_STREAM ||
        !coll__quant_wanted(comm, c->count, c->dtype, c->op))
        return false;
    if (c->form != COLL_FORM_BLOCKING) {
        if (why)
            snprintf(why, n, "COLL_QUANT=%s applies to blocking all-reduce outside groups",
                     comm->cfg.quant);
        else if (slot && !slot->nb_said) {
            slot->nb_said = true;
            COLL_WARN(COLL_SUB_ENV, "rank %d: COLL_QUANT=%s applies to blocking all-reduce "
                      "outside groups; %s runs unquantized (so do later ones like it)",
                      comm->rank, comm->cfg.quant,
                      c->form == COLL_FORM_REQUEST ? "coll_iallreduce" : "coll_allreduce");
        }
        return false;
    }
    if (why)
        snprintf(why, n, "COLL_QUANT=%s, at least COLL_QUANT_MIN_BYTES (%lld): encoded, "
                 "exchanged by all-to-all-v", comm->cfg.quant,
                 (long long)comm->cfg.quant_min_bytes);
    return true;
}

static coll_status_t quant_submit(struct coll_comm *comm, const struct coll_call *c)
{
    return coll__allreduce_quant(comm, c->sendbuf, c->recvbuf, c->count, c->dtype, c->op, NULL,
                                 NULL, "coll_allreduce");
}

/* The quant path's row (algo/cost.h, coll__cost_predict_quant): the codec's bytes through
 * the exchange its automatic choice makes, over shared memory on one host, else tcp. */
static double quant_price(struct coll_comm *comm, const struct coll_call *c,
                          const struct coll_cost_params *p, const struct coll_choice *ch)
{
    struct coll_cost_quant q = {.nranks = comm->nranks, .count = c->count,
                                .elem_size = coll__dtype_size(c->dtype),
                                .link = comm->nhosts > 1 ? COLL_LINK_TCP : COLL_LINK_SHM};

    (void)ch;
    if (!coll__quant_shape(comm, c->dtype, c->count, &q.ratio, &q.gather))
        return -1;
    return coll__cost_predict_quant(p, &q);
}

const struct coll_path coll__path_quant = {
    .name = "quant",
    .takes = quant_takes,
    .run = NULL,
    .submit = quant_submit,
    .price = quant_price,
};

bool coll__quant_shape(const struct coll_comm *comm, coll_dtype_t dtype, size_t count,
                       double *ratio_p, bool *gather_p)
{
    int c = env_codec(comm->cfg.quant);
    const size_t n = (size_t)comm->nranks;
    struct coll_quant_desc d;
    size_t qb, blk, nblocks;

    if (c < 0 || count == 0)
        return false;
    d = COLL_QUANT_DESC_INIT((enum coll_codec)c);
    d.block = (uint32_t)comm->cfg.quant_block;
    qb = coll__quant_bytes(&d, count);
    /* qar_run's choice under COLL_QUANT_ALGO_AUTO, the env config's algo */
    blk = d.codec == COLL_CODEC_FP16 || d.codec == COLL_CODEC_BF16 ? COLL_QUANT_BLOCK_DEFAULT
                                                                   : d.block;
    nblocks = count / blk + (count % blk != 0);
    *gather_p = n == 1 || nblocks < n || qb <= GATHER_MAX_BYTES / n;
    *ratio_p = (double)qb / ((double)count * (double)coll__dtype_size(dtype));
    return true;
}
