/*
 * example_allreduce.c - an NCCL program in the shape of NCCL's own documentation example
 * ("one device per process"): one process per rank, rank 0 makes the unique id and shares
 * it (here through a file, where the documentation uses MPI_Bcast), every rank joins with
 * ncclCommInitRank, runs an all-reduce and checks it. Nothing in it knows about coll.
 * Buffers are host memory, since coll's NCCL library runs without a GPU.
 *
 *   RANK=r WORLD_SIZE=n example_allreduce ID_FILE      (one process per rank)
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* setenv, nanosleep */
#endif
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NCCLCHECK(cmd)                                                                   \
    do {                                                                                 \
        ncclResult_t r_ = cmd;                                                           \
        if (r_ != ncclSuccess) {                                                         \
            printf("Failed, NCCL error %s:%d '%s': %s\n", __FILE__, __LINE__,            \
                   ncclGetErrorString(r_), ncclGetLastError(NULL));                      \
            exit(EXIT_FAILURE);                                                          \
        }                                                                                \
    } while (0)

static void share_id(ncclUniqueId *id, int rank, const char *path)
{
    struct timespec ts = {0, 5000000};
    char tmp[4096];
    FILE *f;

    if (rank == 0) {
        NCCLCHECK(ncclGetUniqueId(id));
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        f = fopen(tmp, "wb");
        if (!f || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) != 0 || rename(tmp, path)) {
            perror(path);
            exit(EXIT_FAILURE);
        }
        return;
    }
    for (int tries = 0; tries < 6000; tries++) { /* up to 30 s */
        f = fopen(path, "rb");
        if (f) {
            size_t n = fread(id, sizeof(*id), 1, f);
            fclose(f);
            if (n == 1)
                return;
        }
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "rank %d: no id in %s\n", rank, path);
    exit(EXIT_FAILURE);
}

int main(int argc, char *argv[])
{
    const char *r = getenv("RANK"), *n = getenv("WORLD_SIZE");
    int size = 32 * 1024 * 1024 / 64, myRank, nRanks, version;
    ncclUniqueId id;
    ncclComm_t comm;
    float *sendbuff, *recvbuff;

    if (argc != 2 || !r || !n) {
        fprintf(stderr, "usage: RANK=r WORLD_SIZE=n %s ID_FILE\n", argv[0]);
        return EXIT_FAILURE;
    }
    myRank = atoi(r);
    nRanks = atoi(n);
    share_id(&id, myRank, argv[1]);

    sendbuff = malloc(size * sizeof(float));
    recvbuff = malloc(size * sizeof(float));
    for (int i = 0; i < size; i++)
        sendbuff[i] = (float)(myRank + 1);

    NCCLCHECK(ncclGetVersion(&version));
    NCCLCHECK(ncclCommInitRank(&comm, nRanks, id, myRank));
    NCCLCHECK(ncclAllReduce((const void *)sendbuff, (void *)recvbuff, size, ncclFloat, ncclSum,
                            comm, NULL));

    for (int i = 0; i < size; i++)
        if (recvbuff[i] != (float)(nRanks * (nRanks + 1) / 2)) {
            printf("[MPI Rank %d] Wrong result at %d: %g\n", myRank, i, (double)recvbuff[i]);
            return EXIT_FAILURE;
        }
    free(sendbuff);
    free(recvbuff);
    NCCLCHECK(ncclCommDestroy(comm));
    printf("[MPI Rank %d] Success (NCCL version code %d)\n", myRank, version);
    return 0;
}
