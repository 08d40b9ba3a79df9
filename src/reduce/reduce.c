/*
 * reduce.c - host reductions: dst = a op b (optionally written to a second output in the
 * same pass), the n-input fold, and the division that ends COLL_AVG.
 *
 * The loops themselves are reduce_isa.c's kernel sets; this file picks the set once per
 * process and schedules the loops over the buffers:
 *   - small outputs: one call of the set's loop, straight into dst;
 *   - a second output or an n-input fold: blocks of BLOCK_BYTES, so each block of the
 *     result is still in L1 when it is copied or folded again (one pass over memory);
 *   - outputs of at least coll__reduce_stream_bytes(): each block (STREAM_BLOCK_BYTES) is
 *     reduced into an L1 buffer and leaves it with non-temporal stores, which skip the
 * read-for-ownership of dst and do not evict the inputs; one sfence at the end orders them before
 * whatever the caller does next (e.g. posting the buffer to a peer).
 *
 * Bitwise operators (COLL_BAND, COLL_BOR, COLL_BXOR) skip the kernel sets: on integers
 * they do not depend on the element width, so one byte loop serves every dtype.
 *
 * Divisions: 1 choosing the set, 2 two inputs, 3 n inputs, 4 division, 5 bitwise.
 */
#include "reduce.h"

#include "elem.h"
#include "reduce_isa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fenv.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/*
 * GCC at -O2 vectorizes with the "very cheap" cost model, which refuses any loop that needs
 * a runtime alias check. Ask for the dynamic cost model on the division loops (O3's choice).
 * clang vectorizes them at -O2 already.
 */
#if defined(__GNUC__) && !defined(__clang__)
#define REDUCE_VECTORIZE __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#else
#define REDUCE_VECTORIZE
#endif

/* Bytes of result per block: a multiple of 64 and of every element size, and small enough
 * that the block, its fp32 accumulator and the inputs' lines stay in a 32 KiB L1. */
#define BLOCK_BYTES 8192
/* Blocks that leave through non-temporal stores are smaller: the loads of the next block
 * wait while a block drains, and short drains keep more loads in flight (measured 10-30%
 * faster than 8 KiB at 64 MiB here). A multiple of 64. */
#define STREAM_BLOCK_BYTES 2048
/* Where the cache sizes cannot be read. */
#define STREAM_BYTES_FALLBACK ((size_t)4 << 20)

/* ---- 1 choosing the set ---------------------------------------------------------------- */

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static const struct coll__reduce_isa *isa_best;
static _Atomic(const struct coll__reduce_isa *) isa_cur;
static size_t stream_default;
static _Atomic size_t stream_cur;

static const struct coll__reduce_isa *isa_find(const char *name)
{
    for (size_t i = 0; i < coll__reduce_nisas; i++)
        if (strcmp(coll__reduce_isas[i]->name, name) == 0)
            return coll__reduce_isas[i];
    return NULL;
}

/* Half the largest CPU cache: a result bigger than that would not stay cached anyway. */
static size_t stream_bytes_from_sysfs(void)
{
    int64_t best = 0;

    for (int i = 0; i < 8; i++) {
        char path[96], text[32];
        int64_t v;
        FILE *f;

        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(text, sizeof(text), f)) {
            text[strcspn(text, "\n")] = '\0';
            if (coll__parse_size(text, &v) && v > best)
                best = v;
        }
        fclose(f);
    }
    return best >= (int64_t)1 << 20 ? (size_t)best / 2 : STREAM_BYTES_FALLBACK;
}

static void isa_setup(void)
{
    const char *env = getenv("COLL_REDUCE_ISA");
    const struct coll__reduce_isa *want;
    int64_t v;

    coll__log_init();
    isa_best = coll__reduce_isas[0];
    for (size_t i = 0; i < coll__reduce_nisas; i++)
        if (coll__reduce_isas[i]->supported())
            isa_best = coll__reduce_isas[i];
    atomic_store(&isa_cur, isa_best);
    if (env && *env) {
        want = isa_find(env);
        if (want && want->supported()) {
            atomic_store(&isa_cur, want);
            COLL_INFO(COLL_SUB_ENV, "COLL_REDUCE_ISA set by environment to %s", env);
        } else {
            COLL_WARN(COLL_SUB_ENV, "COLL_REDUCE_ISA='%s' is %s; using '%s'", env,
                      want ? "not supported by this CPU"
                           : "unknown (scalar, sse2, avx2, avx512, avx512vbmi)",
                      isa_best->name);
        }
    }

    stream_default = stream_bytes_from_sysfs();
    atomic_store(&stream_cur, stream_default);
    env = getenv("COLL_REDUCE_STREAM_BYTES");
    if (env && *env) {
        if (!coll__parse_size(env, &v))
            COLL_WARN(COLL_SUB_ENV, "COLL_REDUCE_STREAM_BYTES='%s' is not a size; using %zu", env,
                      stream_default);
        else if (v > 0)
            atomic_store(&stream_cur, (size_t)v);
    }
}

static const struct coll__reduce_isa *isa_get(void)
{
    pthread_once(&isa_once, isa_setup);
    return atomic_load_explicit(&isa_cur, memory_order_relaxed);
}

/* Whether the vector arithmetic rounds to nearest: on x86 that is MXCSR's mode, which a
 * program can set on its own (_MM_SET_ROUNDING_MODE) while fegetround reads the x87 one. */
static bool rounds_to_nearest(void)
{
#if defined(__x86_64__)
    return (_mm_getcsr() & 0x6000u) == 0; /* MXCSR.RC */
#else
    return fegetround() == FE_TONEAREST;
#endif
}

/* The set for dt. The vector sets narrow fp8 with tables, adds and conversions that give
 * elem.h's bits under the default rounding mode; under another (rare) mode fp8 takes the
 * scalar set, which follows the mode as elem.h does. */
static const struct coll__reduce_isa *isa_for(coll_dtype_t dt)
{
    if ((dt == COLL_FLOAT8E4M3 || dt == COLL_FLOAT8E5M2) && !rounds_to_nearest())
        return coll__reduce_isas[0];
    return isa_get();
}

const char *coll__reduce_isa(void)
{
    return isa_get()->name;
}

const char *coll__reduce_isa_supported(size_t i)
{
    for (size_t j = 0; j < coll__reduce_nisas; j++)
        if (coll__reduce_isas[j]->supported() && i-- == 0)
            return coll__reduce_isas[j]->name;
    return NULL;
}

coll_status_t coll__reduce_set_isa(const char *name)
{
    const struct coll__reduce_isa *want;

    isa_get();
    if (!name || !*name) {
        atomic_store(&isa_cur, isa_best);
        return COLL_SUCCESS;
    }
    want = isa_find(name);
    if (!want)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "unknown reduction ISA '%s'", name);
    if (!want->supported())
        return coll__error(NULL, COLL_INVALID_ARGUMENT,
                           "reduction ISA '%s' is not supported by this CPU", name);
    atomic_store(&isa_cur, want);
    return COLL_SUCCESS;
}

size_t coll__reduce_stream_bytes(void)
{
    isa_get();
    return atomic_load_explicit(&stream_cur, memory_order_relaxed);
}

void coll__reduce_set_stream_bytes(size_t bytes)
{
    isa_get();
    atomic_store(&stream_cur, bytes ? bytes : stream_default);
}

static bool valid(coll_dtype_t dt, coll_op_t op)
{
    return (unsigned)dt < COLL_NUM_DTYPES && (unsigned)op < COLL_NUM_OPS;
}

/* Stream only element-aligned outputs: then a head of whole elements reaches a 64-byte
 * boundary, after which every block starts on one. */
static bool use_stream(const struct coll__reduce_isa *k, const void *dst, size_t bytes, size_t sz)
{
    return k->stream && bytes >= coll__reduce_stream_bytes() && (uintptr_t)dst % sz == 0;
}

/* Elements before dst reaches a 64-byte boundary (at most count). */
static size_t head_elems(const void *dst, size_t sz, size_t count)
{
    return COLL_MIN(((64 - ((uintptr_t)dst & 63)) & 63) / sz, count);
}

/* src to dst: non-temporal where dst is 64-byte aligned, the rest plainly. */
static void copy_out(const struct coll__reduce_isa *k, uint8_t *dst, const uint8_t *src,
                     size_t bytes)
{
    if (((uintptr_t)dst & 63) == 0) {
        size_t body = bytes & ~(size_t)63;
        k->stream(dst, src, body);
        dst += body;
        src += body;
        bytes -= body;
    }
    memcpy(dst, src, bytes);
}

static void stream_fence(void)
{
#if defined(__x86_64__)
    _mm_sfence();
#endif
}

static void copy(void *dst_, const void *src_, size_t bytes, size_t stream_from)
{
    const struct coll__reduce_isa *k = isa_get();
    uint8_t *dst = dst_;
    const uint8_t *src = src_;
    size_t head;

    if (!k->stream || bytes < stream_from || bytes < 64) {
        if (bytes)
            memcpy(dst, src, bytes);
        return;
    }
    head = COLL_MIN((64 - ((uintptr_t)dst & 63)) & 63, bytes);
    memcpy(dst, src, head);
    copy_out(k, dst + head, src + head, bytes - head);
    stream_fence();
}

void coll__copy(void *dst, const void *src, size_t bytes)
{
    copy(dst, src, bytes, coll__reduce_stream_bytes());
}

void coll__copy_stream(void *dst, const void *src, size_t bytes)
{
    copy(dst, src, bytes, 0);
}

/* ---- 2 two inputs ---------------------------------------------------------------------- */

static bool is_bitwise(coll_op_t op)
{
    return op == COLL_BAND || op == COLL_BOR || op == COLL_BXOR;
}

static void bitwise(uint8_t *d0, uint8_t *d1, const void *const *src, int nsrc, size_t bytes,
                    coll_op_t op);

void coll__reduce(void *dst, const void *a, const void *b, size_t count, coll_dtype_t dt,
                  coll_op_t op)
{
    coll__reduce2(dst, NULL, a, b, count, dt, op);
}

void coll__reduce2(void *dst0, void *dst1, const void *a_, const void *b_, size_t count,
                   coll_dtype_t dt, coll_op_t op)
{
    _Alignas(64) uint8_t tmp[STREAM_BLOCK_BYTES];
    const struct coll__reduce_isa *k;
    uint8_t *d0 = dst0, *d1 = dst1;
    const uint8_t *a = a_, *b = b_;
    size_t sz, bel, i, n;
    coll__kern_op_fn fn;

    if (is_bitwise(op) && (unsigned)dt <= COLL_UINT64) {
        const void *src[2] = {a, b};
        bitwise(d0, d1, src, 2, count * coll__dtype_size(dt), op);
        return;
    }
    /* dtype and op were validated at the API boundary; an unknown pair reduces nothing
     * rather than jumping through a wild pointer. */
    if (!valid(dt, op) || count == 0)
        return;
    k = isa_for(dt);
    fn = k->op[dt][op];
    sz = coll__dtype_size(dt);
    bel = BLOCK_BYTES / sz;

    if (!use_stream(k, d0, count * sz, sz)) {
        if (!d1) {
            fn(d0, a, b, count);
            return;
        }
        for (i = 0; i < count; i += n) {
            n = COLL_MIN(bel, count - i);
            fn(d0 + i * sz, a + i * sz, b + i * sz, n);
            memcpy(d1 + i * sz, d0 + i * sz, n * sz);
        }
        return;
    }

    bel = STREAM_BLOCK_BYTES / sz;
    i = head_elems(d0, sz, count);
    if (i) {
        fn(d0, a, b, i);
        if (d1)
            memcpy(d1, d0, i * sz);
    }
    for (; i < count; i += n) {
        n = COLL_MIN(bel, count - i);
        fn(tmp, a + i * sz, b + i * sz, n);
        copy_out(k, d0 + i * sz, tmp, n * sz);
        if (d1)
            copy_out(k, d1 + i * sz, tmp, n * sz);
    }
    stream_fence();
}

/* ---- 3 n inputs ------------------------------------------------------------------------ */

/* Elements [off, off + n) of the fold into out (dst itself, or the L1 block to stream). */
static void fold_block(const struct coll__reduce_isa *k, uint8_t *out, const void *const *src,
                       int nsrc, size_t off, size_t n, size_t sz, coll_dtype_t dt, coll_op_t op,
                       float *acc, uint8_t *tmp)
{
    const uint8_t *const *s = (const uint8_t *const *)src;

    if (k->widen[dt]) {
        k->widen[dt](acc, s[0] + off * sz, n);
        for (int j = 1; j < nsrc; j++)
            k->accum[dt][op](acc, s[j] + off * sz, n);
        k->narrow[dt](out, acc, n);
        return;
    }
    /* tmp carries the partial result; the last op writes out. Every input's block is read
     * before out's is written, so out may be one of the inputs. */
    k->op[dt][op](nsrc == 2 ? out : tmp, s[0] + off * sz, s[1] + off * sz, n);
    for (int j = 2; j < nsrc; j++)
        k->op[dt][op](j == nsrc - 1 ? out : tmp, tmp, s[j] + off * sz, n);
}

coll_status_t coll__reduce_n(void *dst, const void *const *src, int nsrc, size_t count,
                             coll_dtype_t dt, coll_op_t op)
{
    _Alignas(64) float acc[BLOCK_BYTES / sizeof(float)];
    _Alignas(64) uint8_t tmp[BLOCK_BYTES], out_blk[STREAM_BLOCK_BYTES];
    const struct coll__reduce_isa *k;
    uint8_t *d = dst;
    size_t sz, bel, i, n;
    bool stream;

    if (is_bitwise(op) && (unsigned)dt <= COLL_UINT64 && nsrc >= 1 &&
        nsrc <= COLL_REDUCE_MAX_INPUTS) {
        if (count && !dst)
            return coll__error(NULL, COLL_INVALID_ARGUMENT, "reduce_n: dst is NULL");
        for (int j = 0; j < nsrc && count; j++)
            if (!src || !src[j])
                return coll__error(NULL, COLL_INVALID_ARGUMENT, "reduce_n: input %d is NULL", j);
        bitwise(dst, NULL, src, nsrc, count * coll__dtype_size(dt), op);
        return COLL_SUCCESS;
    }
    if (!valid(dt, op))
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "reduce_n: unknown dtype %d or op %d",
                           (int)dt, (int)op);
    if (nsrc < 1 || nsrc > COLL_REDUCE_MAX_INPUTS)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "reduce_n: %d inputs (1 to %d)", nsrc,
                           COLL_REDUCE_MAX_INPUTS);
    if (count == 0)
        return COLL_SUCCESS;
    if (!dst || !src)
        return coll__error(NULL, COLL_INVALID_ARGUMENT, "reduce_n: NULL %s",
                           dst ? "input list" : "output");
    for (int j = 0; j < nsrc; j++)
        if (!src[j])
            return coll__error(NULL, COLL_INVALID_ARGUMENT, "reduce_n: input %d is NULL", j);
    sz = coll__dtype_size(dt);
    if (nsrc == 1) {
        if (dst != src[0])
            coll__copy(dst, src[0], count * sz);
        return COLL_SUCCESS;
    }

    k = isa_for(dt);
    /* narrow floats: as many elements as the fp32 accumulator holds */
    bel = k->widen[dt] ? COLL_ARRAY_SIZE(acc) : BLOCK_BYTES / sz;
    stream = use_stream(k, d, count * sz, sz);
    if (stream)
        bel = COLL_MIN(bel, STREAM_BLOCK_BYTES / sz);
    i = stream ? head_elems(d, sz, count) : 0;
    if (i)
        fold_block(k, d, src, nsrc, 0, i, sz, dt, op, acc, tmp);
    for (; i < count; i += n) {
        n = COLL_MIN(bel, count - i);
        fold_block(k, stream ? out_blk : d + i * sz, src, nsrc, i, n, sz, dt, op, acc, tmp);
        if (stream)
            copy_out(k, d + i * sz, out_blk, n * sz);
    }
    if (stream)
        stream_fence();
    return COLL_SUCCESS;
}

/* ---- 4 division ------------------------------------------------------------------------ */

typedef void (*div_fn)(void *dst, size_t count, uint64_t n);

/* div_<tag>: dst[i] = coll__div_<tag>(dst[i], n), n converted once to the divisor type that
 * elem.h gives the tag (the avg kernels of src/cuda/ convert it the same way) */
#define DIV_LOOP(tag, T)                                                                           \
    static REDUCE_VECTORIZE void div_##tag(void *dst_, size_t count, uint64_t n)                   \
    {                                                                                              \
        T *dst = dst_;                                                                             \
        const coll__divisor_##tag nn = (coll__divisor_##tag)n;                                     \
        for (size_t i = 0; i < count; i++)                                                         \
            dst[i] = coll__div_##tag(dst[i], nn);                                                  \
    }

DIV_LOOP(i8, int8_t)
DIV_LOOP(u8, uint8_t)
DIV_LOOP(i32, int32_t)
DIV_LOOP(u32, uint32_t)
DIV_LOOP(i64, int64_t)
DIV_LOOP(u64, uint64_t)
DIV_LOOP(f16, uint16_t)
DIV_LOOP(f32, float)
DIV_LOOP(f64, double)
DIV_LOOP(bf16, uint16_t)
DIV_LOOP(e4m3, uint8_t)
DIV_LOOP(e5m2, uint8_t)

static const div_fn div_table[COLL_NUM_DTYPES] = {
    [COLL_INT8] = div_i8,       [COLL_UINT8] = div_u8,        [COLL_INT32] = div_i32,
    [COLL_UINT32] = div_u32,    [COLL_INT64] = div_i64,       [COLL_UINT64] = div_u64,
    [COLL_FLOAT16] = div_f16,   [COLL_FLOAT32] = div_f32,     [COLL_FLOAT64] = div_f64,
    [COLL_BFLOAT16] = div_bf16, [COLL_FLOAT8E4M3] = div_e4m3, [COLL_FLOAT8E5M2] = div_e5m2,
};

void coll__reduce_div(void *dst, size_t count, coll_dtype_t dt, uint64_t n)
{
    /* n is the group size. Dividing by 1 changes nothing; n = 0 is a caller bug that must
     * not trap (integer division by zero), so it leaves dst alone too. */
    if ((unsigned)dt >= COLL_NUM_DTYPES || n <= 1)
        return;
    div_table[dt](dst, count, n);
}

/* ---- 5 bitwise ------------------------------------------------------------------------- */

REDUCE_VECTORIZE static void bit_step(uint8_t *restrict acc, const uint8_t *restrict s, size_t n,
                                      coll_op_t op)
{
    size_t i;

    if (op == COLL_BAND)
        for (i = 0; i < n; i++)
            acc[i] &= s[i];
    else if (op == COLL_BOR)
        for (i = 0; i < n; i++)
            acc[i] |= s[i];
    else
        for (i = 0; i < n; i++)
            acc[i] ^= s[i];
}

/* The fold goes through an L1 block, so dst may be one of the inputs. */
static void bitwise(uint8_t *d0, uint8_t *d1, const void *const *src, int nsrc, size_t bytes,
                    coll_op_t op)
{
    _Alignas(64) uint8_t acc[BLOCK_BYTES];
    size_t off, n;

    for (off = 0; off < bytes; off += n) {
        n = COLL_MIN((size_t)BLOCK_BYTES, bytes - off);
        memcpy(acc, (const uint8_t *)src[0] + off, n);
        for (int j = 1; j < nsrc; j++)
            bit_step(acc, (const uint8_t *)src[j] + off, n, op);
        memcpy(d0 + off, acc, n);
        if (d1)
            memcpy(d1 + off, acc, n);
    }
}
