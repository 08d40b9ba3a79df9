/*
 * quant_bench - time the quantized all-reduce against the plain one, count its wire bytes
 * and measure its error. Driven by bench/quant.sh, which prints and plots the numbers.
 *
 *   quant_bench id
 *       print a fresh unique id (hex) on stdout and keep its bootstrap root alive until
 *       killed: for ranks started by hand (COLL_UNIQUE_ID, COLL_RANK, COLL_SIZE), e.g. in
 *       two network namespaces, where one collrun cannot start them all.
 *   quant_bench run [-s 4M,16M,64M] [-c fp32,fp16,int8,...] [-i ITERS] [-e ERRCOUNT]
 *       as one rank (collrun, or the variables above). For each size and codec (fp32: the
 *       plain coll_allreduce), one warm-up call and ITERS timed calls, each after a
 *       barrier; rank 0 prints
 *         time np=N bytes=B codec=C min_ms=.. med_ms=.. wire=W wire_fp32=F
 *       (W: bytes rank 0 sent in one call, counted by coll_comm_bytes_sent), then for
 *       ERRCOUNT elements (every rank can generate every rank's input, so each knows the
 *       exact sum)
 *         error np=N codec=C rel_l2=.. rel_max=..
 *       rel_l2 = |y - exact|_2 / |exact|_2, rel_max = max |y - exact| / max |exact|.
 */
#include <coll.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank, nranks;

#define CHECK(call)                                                                                \
    do {                                                                                           \
        coll_status_t st_ = (call);                                                                \
        if (st_ != COLL_SUCCESS) {                                                                 \
            fprintf(stderr, "rank %d: %s -> %s: %s\n", rank, #call, coll_status_string(st_),       \
                    coll_last_error(NULL));                                                        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const char *const codec_names[] = {"fp16", "bf16", "int8", "e4m3",
                                          "e5m2", "int4", "e3m0", "sign1"};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A gradient-like input: normal-ish values (sum of two uniforms) with a magnitude that
 * drifts across the tensor, different on every rank. */
static float input(int r, size_t i)
{
    uint64_t h = (uint64_t)i * 0x9e3779b97f4a7c15ull ^ ((uint64_t)r + 1) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 29;
    float u = (float)(h & 0xffffff) / 16777216.0f + (float)((h >> 24) & 0xffffff) / 16777216.0f;
    return (u - 1.0f) * (1.0f + (float)((i >> 12) % 7));
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return -1;
    if (*end == 'K' || *end == 'k')
        v <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        v <<= 20, end++;
    else if (*end == 'G' || *end == 'g')
        v <<= 30, end++;
    if (*end)
        return -1;
    *out = (size_t)v;
    return 0;
}

/* -1: plain fp32 all-reduce; else a coll_quant_codec_t. */
static int codec_of(const char *name)
{
    if (!strcmp(name, "fp32"))
        return -1;
    for (int c = 0; c < COLL_QUANT_NUM_CODECS; c++)
        if (!strcmp(name, codec_names[c]))
            return c;
    fprintf(stderr, "quant_bench: unknown codec '%s'\n", name);
    exit(2);
}

static void allreduce(int codec, const float *x, float *y, size_t n, coll_comm_t *comm)
{
    coll_quant_config_t cfg = COLL_QUANT_CONFIG_INIT((coll_quant_codec_t)(codec < 0 ? 0 : codec));

    if (codec < 0)
        CHECK(coll_allreduce(x, y, n, COLL_FLOAT32, COLL_SUM, comm));
    else
        CHECK(coll_allreduce_quantized(x, y, n, COLL_FLOAT32, COLL_SUM, &cfg, NULL, comm));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int run(int argc, char **argv)
{
    char sizes_arg[256] = "4M,16M,64M", codecs_arg[256] = "fp32,fp16,int8,e4m3,int4,e3m0,sign1";
    size_t sizes[16], nsizes = 0, maxn = 0, errn = 1u << 20;
    int codecs[16], ncodecs = 0, iters = 3;
    coll_comm_t *comm;
    float *x, *y;
    char *tok, *save;

    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-s") && i + 1 < argc)
            snprintf(sizes_arg, sizeof(sizes_arg), "%s", argv[++i]);
        else if (!strcmp(argv[i], "-c") && i + 1 < argc)
            snprintf(codecs_arg, sizeof(codecs_arg), "%s", argv[++i]);
        else if (!strcmp(argv[i], "-i") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-e") && i + 1 < argc && parse_size(argv[i + 1], &errn) == 0)
            i++;
        else {
            fprintf(stderr, "quant_bench run: bad argument '%s'\n", argv[i]);
            return 2;
        }
    }
    for (tok = strtok_r(sizes_arg, ",", &save); tok && nsizes < 16;
         tok = strtok_r(NULL, ",", &save)) {
        if (parse_size(tok, &sizes[nsizes]) != 0 || sizes[nsizes] < 4) {
            fprintf(stderr, "quant_bench: bad size '%s'\n", tok);
            return 2;
        }
        maxn = sizes[nsizes] / 4 > maxn ? sizes[nsizes] / 4 : maxn;
        nsizes++;
    }
    for (tok = strtok_r(codecs_arg, ",", &save); tok && ncodecs < 16;
         tok = strtok_r(NULL, ",", &save))
        codecs[ncodecs++] = codec_of(tok);
    if (iters < 1)
        iters = 1;
    maxn = maxn > errn ? maxn : errn;

    CHECK(coll_comm_init_env(&comm));
    CHECK(coll_comm_rank(comm, &rank));
    CHECK(coll_comm_size(comm, &nranks));
    x = malloc(maxn * sizeof(float));
    y = malloc(maxn * sizeof(float));
    if (!x || !y) {
        fprintf(stderr, "quant_bench: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < maxn; i++)
        x[i] = input(rank, i);

    for (size_t s = 0; s < nsizes; s++) {
        const size_t n = sizes[s] / 4;
        uint64_t wire_fp32 = 0;
        for (int k = 0; k < ncodecs; k++) {
            double t[64];
            uint64_t b0, b1;
            int it = iters < 64 ? iters : 64;
            CHECK(coll_barrier(comm));
            CHECK(coll_comm_bytes_sent(comm, &b0));
            allreduce(codecs[k], x, y, n, comm); /* warm-up, and the byte count */
            CHECK(coll_comm_bytes_sent(comm, &b1));
            if (codecs[k] < 0)
                wire_fp32 = b1 - b0;
            for (int j = 0; j < it; j++) {
                double t0;
                CHECK(coll_barrier(comm));
                t0 = now_ms();
                allreduce(codecs[k], x, y, n, comm);
                t[j] = now_ms() - t0;
            }
            /* the slowest rank's time is the collective's */
            CHECK(coll_allreduce(t, t, (size_t)it, COLL_FLOAT64, COLL_MAX, comm));
            qsort(t, (size_t)it, sizeof(double), cmp_double);
            if (rank == 0) {
                printf("time np=%d bytes=%zu codec=%s min_ms=%.2f med_ms=%.2f wire=%llu "
                       "wire_fp32=%llu\n",
                       nranks, sizes[s], codecs[k] < 0 ? "fp32" : codec_names[codecs[k]], t[0],
                       t[it / 2], (unsigned long long)(b1 - b0), (unsigned long long)wire_fp32);
                fflush(stdout);
            }
        }
    }

    if (errn > 0) {
        double *exact = calloc(errn, sizeof(double));
        for (int p = 0; p < nranks; p++)
            for (size_t i = 0; i < errn; i++)
                exact[i] += input(p, i);
        for (int k = 0; k < ncodecs; k++) {
            double num = 0, den = 0, emax = 0, xmax = 0;
            allreduce(codecs[k], x, y, errn, comm);
            for (size_t i = 0; i < errn; i++) {
                double e = (double)y[i] - exact[i];
                num += e * e;
                den += exact[i] * exact[i];
                emax = fmax(emax, fabs(e));
                xmax = fmax(xmax, fabs(exact[i]));
            }
            if (rank == 0)
                printf("error np=%d codec=%s rel_l2=%.3e rel_max=%.3e\n", nranks,
                       codecs[k] < 0 ? "fp32" : codec_names[codecs[k]], sqrt(num / den),
                       emax / xmax);
        }
        free(exact);
    }
    free(x);
    free(y);
    CHECK(coll_comm_destroy(comm));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "id")) {
        coll_unique_id_t id;
        char buf[COLL_UNIQUE_ID_STRLEN];
        CHECK(coll_get_unique_id(&id));
        CHECK(coll_unique_id_to_string(&id, buf, sizeof(buf)));
        printf("%s\n", buf);
        fflush(stdout);
        for (;;) /* the root thread serves the ranks; quant.sh kills us afterwards */
            pause();
    }
    if (argc >= 2 && !strcmp(argv[1], "run"))
        return run(argc - 2, argv + 2);
    fprintf(stderr, "usage: quant_bench id | run [-s SIZES] [-c CODECS] [-i ITERS] [-e COUNT]\n");
    return 2;
}
