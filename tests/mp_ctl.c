/*
 * mp_ctl.c - one rank of the control-plane tests (tests/test_ctl.sh), started without a
 * launcher (COLL_UNIQUE_ID, COLL_RANK, COLL_SIZE), so that no launcher kills the survivors
 * of a failure before they report it themselves:
 *
 *   mp_ctl first   init, READY, then one all-reduce: the comm's first collective; a rank
 *                  the script kills before it never calls it
 *   mp_ctl bcast   as first, with a broadcast from rank 0 as the first collective
 *   mp_ctl loop    init, all-reduces until one fails; READY after the tenth
 *
 * CTL_HOLD_RANK=R CTL_HOLD_MS=T: in "first", rank R sleeps T ms before its all-reduce, so
 * that the others wait on it (the stall table's case).
 *
 * Lines on stdout (the script parses them):
 *   READY
 *   DONE                        (first: the all-reduce succeeded)
 *   ERROR STATUS T_NS MSG       a call failed (STATUS: its number); T_NS is CLOCK_REALTIME
 *                               at its return
 */
#include <coll.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "mp_util.h"

static long long realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    const size_t n = 1024;
    int32_t s[1024], r[1024];
    coll_comm_t *comm;
    coll_status_t st = COLL_SUCCESS;

    CHECK(coll_comm_init_env(&comm));
    CHECK(coll_comm_rank(comm, &rank));
    CHECK(coll_comm_size(comm, &nranks));
    for (size_t i = 0; i < n; i++)
        s[i] = rank + (int32_t)i;
    if (!strcmp(mode, "first") || !strcmp(mode, "bcast")) {
        const char *hr = getenv("CTL_HOLD_RANK"), *hm = getenv("CTL_HOLD_MS");
        printf("READY\n");
        fflush(stdout);
        if (hr && hm && atoi(hr) == rank) {
            long ms = atol(hm);
            struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
            while (nanosleep(&ts, &ts) != 0)
                ;
        }
        st = !strcmp(mode, "bcast") ? coll_broadcast(s, r, n, COLL_INT32, 0, comm)
                                    : coll_allreduce(s, r, n, COLL_INT32, COLL_SUM, comm);
    } else if (!strcmp(mode, "loop")) {
        for (long it = 1; st == COLL_SUCCESS; it++) {
            st = coll_allreduce(s, r, n, COLL_INT32, COLL_SUM, comm);
            if (it == 10) {
                printf("READY\n");
                fflush(stdout);
            }
        }
    } else {
        die("unknown mode '%s'", mode);
    }
    if (st == COLL_SUCCESS)
        printf("DONE\n");
    else
        printf("ERROR %d %lld %s\n", (int)st, realtime_ns(),
               coll_last_error(comm));
    fflush(stdout);
    coll_comm_destroy(comm);
    return st == COLL_SUCCESS ? 0 : 2;
}
