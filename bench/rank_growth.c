/*
 * rank_growth.c - what one rank of a comm costs as the comm grows: under collrun -n N,
 * every rank times coll_comm_init_env, a first 8-byte all-reduce (the selector's decision,
 * the plan, the connections it needs) and a first 1 MiB all-reduce, and reads its VmRSS
 * and VmHWM (/proc/self/status) before init, after init and after the calls. Rank 0
 * prints one line of the medians and maxima over the ranks (bench/rank_growth.sh):
 *
 *   n init_med_ms init_max_ms first8_med_us first1m_med_us rss_init_med_kB hwm_med_kB
 *     hwm_max_kB grow_init_med_kB grow_calls_med_kB
 *
 * grow_init is VmRSS after init less before it (the comm's own memory), grow_calls the
 * growth over the two first calls (plans, connections, buffers).
 */
#include <coll.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NVALS 8

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* VmRSS and VmHWM in kB */
static void mem_kb(double *rss, double *hwm)
{
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");

    *rss = *hwm = -1;
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        if (!strncmp(line, "VmRSS:", 6))
            *rss = atof(line + 6);
        else if (!strncmp(line, "VmHWM:", 6))
            *hwm = atof(line + 6);
    }
    fclose(f);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void)
{
    coll_comm_t *comm = NULL;
    double v[NVALS], rss0, hwm0, rss1, hwm1, rss2, hwm2, t0, t_init, t8, t1m, *all = NULL;
    size_t big = (1u << 20) / sizeof(float);
    float *x = calloc(big, sizeof(float)), *y = calloc(big, sizeof(float));
    int rank, n;

    if (!x || !y)
        return 1;
    mem_kb(&rss0, &hwm0);
    t0 = now();
    if (coll_comm_init_env(&comm) != COLL_SUCCESS) {
        fprintf(stderr, "rank_growth: init: %s\n", coll_last_error(NULL));
        return 1;
    }
    t_init = now() - t0;
    mem_kb(&rss1, &hwm1);
    coll_comm_rank(comm, &rank);
    coll_comm_size(comm, &n);
    t0 = now();
    if (coll_allreduce(x, y, 2, COLL_FLOAT32, COLL_SUM, comm) != COLL_SUCCESS)
        return 1;
    t8 = now() - t0;
    t0 = now();
    if (coll_allreduce(x, y, big, COLL_FLOAT32, COLL_SUM, comm) != COLL_SUCCESS)
        return 1;
    t1m = now() - t0;
    mem_kb(&rss2, &hwm2);
    v[0] = t_init * 1e3;
    v[1] = t8 * 1e6;
    v[2] = t1m * 1e6;
    v[3] = rss1;
    v[4] = hwm2;
    v[5] = rss1 - rss0;
    v[6] = rss2 - rss1;
    v[7] = 0;
    if (rank == 0 && !(all = malloc((size_t)n * NVALS * sizeof(double))))
        return 1;
    if (coll_gather(v, all, NVALS, COLL_FLOAT64, 0, comm) != COLL_SUCCESS)
        return 1;
    if (rank == 0) {
        double col[NVALS][2], *tmp = malloc((size_t)n * sizeof(double));
        if (!tmp)
            return 1;
        for (int k = 0; k < NVALS; k++) {
            for (int r = 0; r < n; r++)
                tmp[r] = all[(size_t)r * NVALS + k];
            qsort(tmp, (size_t)n, sizeof(double), cmp_d);
            col[k][0] = tmp[n / 2];
            col[k][1] = tmp[n - 1];
        }
        printf("%d %.2f %.2f %.1f %.1f %.0f %.0f %.0f %.0f %.0f\n", n, col[0][0], col[0][1],
               col[1][0], col[2][0], col[3][0], col[4][0], col[4][1], col[5][0], col[6][0]);
        free(tmp);
        free(all);
    }
    coll_comm_destroy(comm);
    free(x);
    free(y);
    return 0;
}
