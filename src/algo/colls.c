/*
 * colls.c - the table of collectives (colls.h): one row each, read by everything that
 * needs a fact of one. tests/test_base.c checks the rows against the enum, the NCCL
 * library's exports and what the schedules build.
 */
#include "colls.h"

#include <string.h>
#include <strings.h>

const struct coll_coll_desc coll__colls[COLL_NUM_COLLS] = {
    [COLL_COLL_ALLREDUCE] = {.coll = COLL_COLL_ALLREDUCE, .name = "allreduce",
                             .api = "coll_allreduce", .nccl = "ncclAllReduce",
                             .perf = "all_reduce_perf", .reduces = true,
                             .send_blocks = COLL_BLOCKS_ONE, .recv_blocks = COLL_BLOCKS_ONE,
                             .stream = true, .bus = COLL_BUS_ALLREDUCE},
    [COLL_COLL_BROADCAST] = {.coll = COLL_COLL_BROADCAST, .name = "broadcast",
                             .alias = {"bcast"}, .api = "coll_broadcast",
                             .nccl = "ncclBroadcast", .perf = "broadcast_perf",
                             .root = COLL_ROOT_SOURCE, .send_blocks = COLL_BLOCKS_ONE,
                             .recv_blocks = COLL_BLOCKS_ONE, .stream = true,
                             .bus = COLL_BUS_ONE},
    [COLL_COLL_REDUCE] = {.coll = COLL_COLL_REDUCE, .name = "reduce", .api = "coll_reduce",
                          .nccl = "ncclReduce", .perf = "reduce_perf", .reduces = true,
                          .root = COLL_ROOT_SINK, .send_blocks = COLL_BLOCKS_ONE,
                          .recv_blocks = COLL_BLOCKS_ONE, .stream = true, .bus = COLL_BUS_ONE},
    [COLL_COLL_ALLGATHER] = {.coll = COLL_COLL_ALLGATHER, .name = "allgather",
                             .api = "coll_allgather", .nccl = "ncclAllGather",
                             .perf = "all_gather_perf", .send_blocks = COLL_BLOCKS_ONE,
                             .recv_blocks = COLL_BLOCKS_N, .inplace = COLL_AT_RANK,
                             .stream = true, .bus = COLL_BUS_SPREAD},
    [COLL_COLL_REDUCE_SCATTER] = {.coll = COLL_COLL_REDUCE_SCATTER, .name = "reducescatter",
                                  .alias = {"reduce_scatter", "reduce-scatter"},
                                  .api = "coll_reduce_scatter", .nccl = "ncclReduceScatter",
                                  .perf = "reduce_scatter_perf", .reduces = true,
                                  .send_blocks = COLL_BLOCKS_N, .recv_blocks = COLL_BLOCKS_ONE,
                                  .inplace = COLL_AT_RANK, .stream = true,
                                  .bus = COLL_BUS_SPREAD},
    [COLL_COLL_ALLTOALL] = {.coll = COLL_COLL_ALLTOALL, .name = "alltoall",
                            .api = "coll_alltoall", .nccl = "ncclAlltoAll",
                            .perf = "alltoall_perf", .send_blocks = COLL_BLOCKS_N,
                            .recv_blocks = COLL_BLOCKS_N, .stream = true,
                            .bus = COLL_BUS_SPREAD},
    [COLL_COLL_GATHER] = {.coll = COLL_COLL_GATHER, .name = "gather", .api = "coll_gather",
                          .nccl = "ncclGather", .perf = "gather_perf", .root = COLL_ROOT_SINK,
                          .send_blocks = COLL_BLOCKS_ONE, .recv_blocks = COLL_BLOCKS_N,
                          .inplace = COLL_AT_ROOT, .bus = COLL_BUS_SPREAD},
    [COLL_COLL_SCATTER] = {.coll = COLL_COLL_SCATTER, .name = "scatter", .api = "coll_scatter",
                           .nccl = "ncclScatter", .perf = "scatter_perf",
                           .root = COLL_ROOT_SOURCE, .send_blocks = COLL_BLOCKS_N,
                           .recv_blocks = COLL_BLOCKS_ONE, .inplace = COLL_AT_ROOT,
                           .bus = COLL_BUS_SPREAD},
    /* NCCL has no barrier call: no NCCL name */
    [COLL_COLL_BARRIER] = {.coll = COLL_COLL_BARRIER, .name = "barrier", .api = "coll_barrier",
                           .perf = "barrier_perf", .bus = COLL_BUS_ZERO},
    [COLL_COLL_SENDRECV] = {.coll = COLL_COLL_SENDRECV, .name = "sendrecv", .api = "coll_send",
                            .nccl = "ncclSend", .nccl_recv = "ncclRecv",
                            .perf = "sendrecv_perf", .p2p = true,
                            .send_blocks = COLL_BLOCKS_ONE, .recv_blocks = COLL_BLOCKS_ONE,
                            .stream = true, .bus = COLL_BUS_ONE},
};

const struct coll_coll_desc *coll__coll_desc(enum coll_coll c)
{
    return (unsigned)c < COLL_NUM_COLLS ? &coll__colls[c] : NULL;
}

const char *coll__coll_name(enum coll_coll c)
{
    return (unsigned)c < COLL_NUM_COLLS ? coll__colls[c].name : "unknown";
}

static bool name_is(const char *s, const char *name, size_t len)
{
    return s && strlen(s) == len && !strncasecmp(s, name, len);
}

bool coll__coll_from_name(const char *name, size_t len, enum coll_coll *c_p)
{
    for (int c = 0; c < COLL_NUM_COLLS; c++) {
        const struct coll_coll_desc *d = &coll__colls[c];
        if (name_is(d->name, name, len) || name_is(d->alias[0], name, len) ||
            name_is(d->alias[1], name, len)) {
            *c_p = (enum coll_coll)c;
            return true;
        }
    }
    return false;
}
