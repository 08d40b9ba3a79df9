/*
 * launch_check.c - a rank started by a real launcher (torchrun, mpirun, srun, collrun):
 *
 *   launch_check RANKVAR [SIZEVAR]
 *
 * builds two communicators from the environment (the second proves that two exchanges of
 * one process do not mix), checks that coll's rank and size are the launcher's (RANKVAR,
 * SIZEVAR), that an all-reduce and a broadcast give the right numbers, and prints
 * "launch_check: rank R of N on HOST OK". Any mismatch exits 1 naming it.
 */
#include "coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int check_comm(coll_comm_t *comm, int want_rank, int want_size, int round)
{
    int rank = -1, size = -1;
    double sum = 0, root_val;

    if (coll_comm_rank(comm, &rank) != COLL_SUCCESS || coll_comm_size(comm, &size) != COLL_SUCCESS)
        return fprintf(stderr, "launch_check: rank/size query failed\n"), 1;
    if (rank != want_rank || (want_size > 0 && size != want_size)) {
        fprintf(stderr, "launch_check: coll says rank %d of %d, the launcher %d of %d\n", rank,
                size, want_rank, want_size);
        return 1;
    }
    sum = rank + 1 + round;
    if (coll_allreduce(&sum, &sum, 1, COLL_FLOAT64, COLL_SUM, comm) != COLL_SUCCESS)
        return fprintf(stderr, "launch_check: allreduce: %s\n", coll_last_error(comm)), 1;
    if (sum != (double)size * (size + 1) / 2 + (double)size * round) {
        fprintf(stderr, "launch_check: rank %d: allreduce gave %g\n", rank, sum);
        return 1;
    }
    root_val = rank == size - 1 ? 42.0 + round : -1.0;
    if (coll_broadcast(&root_val, &root_val, 1, COLL_FLOAT64, size - 1, comm) != COLL_SUCCESS)
        return fprintf(stderr, "launch_check: broadcast: %s\n", coll_last_error(comm)), 1;
    if (root_val != 42.0 + round) {
        fprintf(stderr, "launch_check: rank %d: broadcast gave %g\n", rank, root_val);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *rv, *sv;
    coll_comm_t *a = NULL, *b = NULL;
    char host[256] = "";
    int want_rank, want_size = 0, rc = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: launch_check RANKVAR [SIZEVAR]\n");
        return 2;
    }
    rv = getenv(argv[1]);
    sv = argc > 2 ? getenv(argv[2]) : NULL;
    if (!rv) {
        fprintf(stderr, "launch_check: %s is not set\n", argv[1]);
        return 1;
    }
    want_rank = atoi(rv);
    want_size = sv ? atoi(sv) : 0;
    if (coll_comm_init_env(&a) != COLL_SUCCESS) {
        fprintf(stderr, "launch_check: init: %s\n", coll_last_error(NULL));
        return 1;
    }
    if (coll_comm_init_env(&b) != COLL_SUCCESS) {
        fprintf(stderr, "launch_check: second init: %s\n", coll_last_error(NULL));
        coll_comm_destroy(a);
        return 1;
    }
    rc = check_comm(a, want_rank, want_size, 0) || check_comm(b, want_rank, want_size, 1);
    gethostname(host, sizeof(host) - 1);
    if (!rc)
        printf("launch_check: rank %d of %d on %s OK\n", want_rank,
               want_size ? want_size : -1, host);
    fflush(stdout);
    coll_comm_destroy(b);
    coll_comm_destroy(a);
    return rc;
}
