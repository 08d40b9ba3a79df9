/*
 * allreduce.c - the first coll program: every rank contributes rank + 1 to a sum, and every
 * rank checks that it got 1 + 2 + ... + n. Start it under collrun:
 *
 *     collrun -n 3 ./allreduce
 */
#include <coll.h>

#include <stdio.h>

#define COUNT 1024

int main(void)
{
    static float buf[COUNT];
    coll_comm_t *comm;
    coll_status_t st;
    int rank, size, version, bad = 0;

    /* The headers and the library must come from the same release. */
    if (coll_get_version(&version) != COLL_SUCCESS || version != COLL_VERSION_CODE) {
        fprintf(stderr, "coll.h is %d but libcoll is %d\n", COLL_VERSION_CODE, version);
        return 1;
    }
    /* collrun put the communicator id, rank and size in the environment. */
    st = coll_comm_init_env(&comm);
    if (st != COLL_SUCCESS) {
        fprintf(stderr, "coll_comm_init_env: %s: %s\n", coll_status_string(st),
                coll_last_error(NULL));
        return 1;
    }
    coll_comm_rank(comm, &rank);
    coll_comm_size(comm, &size);

    for (int i = 0; i < COUNT; i++)
        buf[i] = (float)(rank + 1);
    st = coll_allreduce(buf, buf, COUNT, COLL_FLOAT32, COLL_SUM, comm); /* in place */
    if (st != COLL_SUCCESS) {
        fprintf(stderr, "rank %d: coll_allreduce: %s: %s\n", rank, coll_status_string(st),
                coll_last_error(comm));
        coll_comm_destroy(comm);
        return 1;
    }
    for (int i = 0; i < COUNT; i++)
        bad += buf[i] != (float)(size * (size + 1) / 2);
    printf("rank %d of %d: allreduce %s\n", rank, size, bad ? "WRONG" : "ok");
    coll_comm_destroy(comm);
    return bad ? 1 : 0;
}
