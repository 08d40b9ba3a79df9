/*
 * bcast.c - rank 0 broadcasts a message to every rank, then all ranks meet at a barrier.
 * Start it under collrun:  collrun -n 3 ./bcast
 */
#include <coll.h>

#include <stdio.h>
#include <string.h>

int main(void)
{
    char msg[64] = "";
    coll_comm_t *comm;
    coll_status_t st;
    int rank;

    st = coll_comm_init_env(&comm);
    if (st != COLL_SUCCESS) {
        fprintf(stderr, "coll_comm_init_env: %s\n", coll_last_error(NULL));
        return 1;
    }
    coll_comm_rank(comm, &rank);
    if (rank == 0)
        snprintf(msg, sizeof(msg), "hello from rank 0");
    /* Only the root's buffer is read; every rank's is written. */
    st = coll_broadcast(msg, msg, sizeof(msg), COLL_INT8, 0, comm);
    if (st == COLL_SUCCESS)
        st = coll_barrier(comm);
    if (st != COLL_SUCCESS) {
        fprintf(stderr, "rank %d: %s\n", rank, coll_last_error(comm));
        coll_comm_destroy(comm);
        return 1;
    }
    printf("rank %d: broadcast %s\n", rank, strcmp(msg, "hello from rank 0") ? "WRONG" : "ok");
    coll_comm_destroy(comm);
    return strcmp(msg, "hello from rank 0") != 0;
}
