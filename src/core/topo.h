/*
 * topo.h - what this host has (cores, NUMA nodes, NICs, GPUs and how far apart they sit on
 * the PCI tree) and which ranks share a host (src/core/topo.c).
 */
#ifndef COLL_TOPO_H
#define COLL_TOPO_H

#include "internal.h"

#include <stdio.h>

#define COLL_TOPO_MAX_DEV 16

struct coll_topo_dev {
    char name[32];      /* "eth0", "mlx5_0", "0000:41:00.0" (a GPU by PCI address) */
    char pci[16];       /* PCI bus id, "" for a device without one (virtual NIC) */
    char cpus[128];     /* CPUs near it, as a list ("0-15,32-47"); "" when unknown */
    int numa;           /* NUMA node, -1 when unknown */
    int64_t speed_mbps; /* NICs: link speed, -1 when unknown */
    int near;           /* GPUs: index of the closest NIC in nic[], -1 when none */
    int dist;           /* GPUs: PCI hops to that NIC (fewer is closer), -1 when none */
};

struct coll_topo {
    const char *source; /* "hwloc" or "sysfs" */
    char hostname[COLL_HOSTNAME_MAX];
    int npus, ncores, nnuma;
    int nnics, ngpus;
    struct coll_topo_dev nic[COLL_TOPO_MAX_DEV];
    struct coll_topo_dev gpu[COLL_TOPO_MAX_DEV];
};

/* Discover with hwloc when built with it (COLL_TOPO=sysfs forces sysfs), else from sysfs.
 * Never fails: what cannot be read stays 0 / -1 / "". */
COLL_INTERNAL void coll__topo_discover(struct coll_topo *t, bool use_hwloc);
/* Human-readable, several lines (collbench --topo). */
COLL_INTERNAL void coll__topo_print(const struct coll_topo *t, FILE *f);

/* PCI hops between two sysfs device paths ("/sys/devices/pci0000:00/0000:00:01.0/..."):
 * up from a to the deepest common ancestor and down to b. -1 when they share no root. */
COLL_INTERNAL int coll__topo_path_distance(const char *a, const char *b);

/* Group ranks by host (peer info host_hash): host_p[r] is the host index of rank r, hosts
 * numbered in order of their lowest rank; returns the number of hosts. */
COLL_INTERNAL int coll__topo_group_hosts(const struct coll_peer_info *peers, int nranks,
                                         int *host_p);

/* After the bootstrap: log the host topology and the ranks per host at INFO, and bind the
 * progress thread to the CPUs near the NIC the data listener uses (when that NIC has a
 * locality narrower than the process's CPUs). */
COLL_INTERNAL void coll__topo_comm_start(struct coll_comm *comm);

/* A PCI bus id as CUDA writes it, "0000:41:00.0" (12 characters, hex fields). */
COLL_INTERNAL bool coll__topo_pci_busid_ok(const char *busid);

/* A comm's threads near its CUDA device dev (PCI bus id busid), when the GPU's CPUs narrow
 * the process's: with worker NULL (the comm takes the device), the progress thread, and the
 * GPU's NUMA node and nearest NIC are logged at INFO; otherwise only *worker (the stream
 * worker, started later). */
COLL_INTERNAL void coll__topo_comm_gpu(struct coll_comm *comm, int dev, const char *busid,
                                       const pthread_t *worker);

#endif /* COLL_TOPO_H */
