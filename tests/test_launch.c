/*
 * test_launch.c - launcher detection and its bad inputs, the TCPStore client against
 * rank 0's one-key server, the Slurm node list, PCI distances and host grouping. Each case
 * runs in its own forked process (tests/harness.h), so environment changes stay in it.
 */
#include "harness.h"

#include "api/launcher.h"
#include "core/topo.h"
#include "base/sys.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *const all_vars[] = {
    "COLL_LAUNCHER", "COLL_UNIQUE_ID", "COLL_RANK", "COLL_SIZE", "COLL_LOCAL_RANK",
    "COLL_LOCAL_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_RANK", "PMIX_NAMESPACE", "SLURM_PROCID",
    "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_ID", "SLURM_STEP_ID",
};

static void clean_env(void)
{
    for (size_t i = 0; i < sizeof(all_vars) / sizeof(all_vars[0]); i++)
        unsetenv(all_vars[i]);
}

static coll_status_t detect(struct coll_launch *l)
{
    memset(l, 0, sizeof(*l));
    return coll__launcher_detect(l);
}

TEST(no_launcher_names_them_all)
{
    struct coll_launch l;

    clean_env();
    ASSERT(!coll__launcher_present());
    ASSERT_EQ(detect(&l), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "COLL_UNIQUE_ID");
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "MASTER_ADDR");
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "OMPI_COMM_WORLD_RANK");
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "SLURM_PROCID");
}

TEST(torchrun_variables)
{
    struct coll_launch l;

    clean_env();
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "8", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    ASSERT(coll__launcher_present());
    ASSERT_EQ(detect(&l), COLL_SUCCESS);
    ASSERT(!strcmp(l.name, "torchrun"));
    ASSERT_EQ(l.rank, 3);
    ASSERT_EQ(l.size, 8);
    ASSERT_EQ(l.local_rank, 1);
    ASSERT_EQ(l.local_size, 2);
    setenv("LOCAL_RANK", "2", 1);
    ASSERT_EQ(detect(&l), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "LOCAL_RANK=2 is out of range for LOCAL_WORLD_SIZE=2");
    setenv("LOCAL_RANK", "1", 1);
    setenv("RANK", "8", 1);
    ASSERT_EQ(detect(&l), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "RANK=8 is out of range for WORLD_SIZE=8");
    setenv("RANK", "x", 1);
    ASSERT_EQ(detect(&l), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "RANK='x' is not an integer");
    unsetenv("RANK");
    ASSERT_EQ(detect(&l), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "RANK is not set");
}

TEST(mpirun_and_torchrun_disagree)
{
    struct coll_launch l;

    clean_env();
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    ASSERT_EQ(detect(&l), COLL_SUCCESS);
    ASSERT(!strcmp(l.name, "mpirun") && l.pmix && l.rank == 1 && l.size == 4);
    setenv("PMIX_RANK", "2", 1);
    ASSERT_EQ(detect(&l), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "PMIX_RANK='2' disagrees with OMPI_COMM_WORLD_RANK=1");
    setenv("PMIX_RANK", "1", 1);
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "h", 1);
    ASSERT_EQ(detect(&l), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "launcher environments disagree");
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "WORLD_SIZE=2");
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "OMPI_COMM_WORLD_SIZE=4");
    /* COLL_LAUNCHER settles it */
    setenv("COLL_LAUNCHER", "mpirun", 1);
    ASSERT_EQ(detect(&l), COLL_SUCCESS);
    ASSERT(!strcmp(l.name, "mpirun"));
    setenv("COLL_LAUNCHER", "qsub", 1);
    ASSERT_EQ(detect(&l), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "COLL_LAUNCHER='qsub'");
}

TEST(srun_variables_and_precedence)
{
    struct coll_launch l;

    clean_env();
    setenv("SLURM_PROCID", "2", 1);
    setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_LOCALID", "0", 1);
    ASSERT_EQ(detect(&l), COLL_SUCCESS);
    ASSERT(!strcmp(l.name, "srun") && !l.pmix && l.rank == 2 && l.size == 4);
    setenv("PMIX_RANK", "2", 1);
    ASSERT_EQ(detect(&l), COLL_SUCCESS);
    ASSERT(l.pmix);
    setenv("PMIX_RANK", "0", 1);
    ASSERT_EQ(detect(&l), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "disagrees with SLURM_PROCID=2");
    unsetenv("PMIX_RANK");
    setenv("SLURM_NTASKS", "2", 1);
    ASSERT_EQ(detect(&l), COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "SLURM_PROCID=2 is out of range for SLURM_NTASKS=2");
    /* torchrun started by srun (one agent per node): torchrun's variables describe us */
    setenv("RANK", "5", 1);
    setenv("WORLD_SIZE", "8", 1);
    setenv("MASTER_ADDR", "h", 1);
    setenv("MASTER_PORT", "1", 1);
    ASSERT_EQ(detect(&l), COLL_SUCCESS);
    ASSERT(!strcmp(l.name, "torchrun") && l.rank == 5);
    /* collrun's own variables win over everything around it */
    setenv("COLL_UNIQUE_ID", "00", 1);
    setenv("COLL_RANK", "0", 1);
    setenv("COLL_SIZE", "1", 1);
    ASSERT_EQ(detect(&l), COLL_SUCCESS);
    ASSERT(!strcmp(l.name, "collrun") && l.size == 1);
}

/* A port that binds now, from 20000-29999: below Linux's ephemeral range (32768 up by
 * default), so that no socket bound to port 0 in the meantime (a listener, a connecting
 * client) can be handed it before the test's server binds it. */
static int free_port(void)
{
    unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);

    for (int tries = 0; tries < 200; tries++) {
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                 .sin_port = htons((uint16_t)(20000 + rand_r(&seed) % 10000))};
        int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

        if (fd < 0)
            return -1;
        ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
        close(fd);
        if (ok)
            return ntohs(sa.sin_port);
    }
    return -1;
}

/* Two processes in a torch environment without an agent, on MASTER_PORT=port: rank 0 (this
 * process) serves the id there, rank 1 (a child) waits for it with its store client; rounds
 * comms in a row, each checked with an all-reduce. after_fork(rank, arg) runs in both after
 * the fork (NULL: nothing). Returns in rank 0 once rank 1 exited 0. */
static void torch_pair(const char *port, int rounds, void (*after_fork)(int, void *), void *arg)
{
    int status = -1;
    pid_t child;

    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("COLL_BOOTSTRAP_TIMEOUT_MS", "20000", 1);
    child = fork();
    ASSERT(child >= 0);
    setenv("RANK", child == 0 ? "1" : "0", 1);
    if (after_fork)
        after_fork(child == 0, arg);
    for (int round = 0; round < rounds; round++) {
        coll_comm_t *comm = NULL;
        int x = 1, rank = -1;
        if (coll_comm_init_env(&comm) != COLL_SUCCESS ||
            coll_comm_rank(comm, &rank) != COLL_SUCCESS ||
            coll_allreduce(&x, &x, 1, COLL_INT32, COLL_SUM, comm) != COLL_SUCCESS || x != 2 ||
            rank != (child == 0)) {
            if (child == 0)
                _exit(1);
            ASSERT_MSG(false, "round %d: %s", round, coll_last_error(comm));
        }
        coll_comm_destroy(comm);
    }
    if (child == 0)
        _exit(0);
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Rank 0 serves the id on MASTER_PORT, rank 1's store client waits for it there; two comms
 * in a row (the second may meet rank 0's first server while it goes down). */
TEST(store_client_against_rank0_server)
{
    char port[16];

    clean_env();
    snprintf(port, sizeof(port), "%d", free_port());
    torch_pair(port, 2, NULL, NULL);
}

/* Holds a port for a while, then lets go: what a peer's socket that connected to itself
 * does (store_client_refuses_a_connection_to_itself) until it sees its own query. */
static void *release_later(void *arg)
{
    usleep(300000);
    close(*(int *)arg);
    return NULL;
}

static pthread_t releaser;

/* rank 0 lets the port go after a while; rank 1 must not hold it at all */
static void release_in_rank0(int rank, void *holder)
{
    if (rank == 0)
        ASSERT_EQ(pthread_create(&releaser, NULL, release_later, holder), 0);
    else
        close(*(int *)holder);
}

/* Rank 0 finds MASTER_PORT taken when it starts to serve the id, and taken only briefly:
 * it waits for the port instead of failing the launch. */
TEST(rank0_waits_for_master_port_held_briefly)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof(a);
    char port[16];
    int holder = socket(AF_INET, SOCK_STREAM, 0);

    clean_env();
    ASSERT(holder >= 0 && bind(holder, (struct sockaddr *)&a, sizeof(a)) == 0 &&
           getsockname(holder, (struct sockaddr *)&a, &len) == 0);
    snprintf(port, sizeof(port), "%u", (unsigned)ntohs(a.sin_port));
    torch_pair(port, 1, release_in_rank0, &holder);
    pthread_join(releaser, NULL);
}

TEST(collrun_id_makes_one_comm)
{
    coll_comm_t *comm = NULL, *again = NULL;
    coll_unique_id_t id;
    char text[COLL_UNIQUE_ID_STRLEN];

    clean_env();
    ASSERT_EQ(coll_get_unique_id(&id), COLL_SUCCESS);
    ASSERT_EQ(coll_unique_id_to_string(&id, text, sizeof(text)), COLL_SUCCESS);
    setenv("COLL_UNIQUE_ID", text, 1);
    setenv("COLL_RANK", "0", 1);
    setenv("COLL_SIZE", "1", 1);
    ASSERT_EQ(coll_comm_init_env(&comm), COLL_SUCCESS);
    /* the root of that id is gone: a second comm fails at once instead of at the timeout */
    ASSERT_EQ(coll_comm_init_env(&again), COLL_INVALID_USAGE);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "COLL_UNIQUE_ID made one communicator");
    ASSERT(again == NULL);
    ASSERT_EQ(coll_comm_destroy(comm), COLL_SUCCESS);
}

TEST(store_get_times_out_naming_the_store)
{
    char buf[8];

    /* port 1 on loopback: nobody listens */
    ASSERT_EQ(coll__tcpstore_get("127.0.0.1", "1", "k", buf, sizeof(buf), 300), COLL_TIMEOUT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "MASTER_ADDR='127.0.0.1' MASTER_PORT=1");
    ASSERT_EQ(coll__tcpstore_get("no-such-host.invalid", "1", "k", buf, sizeof(buf), 300),
              COLL_INVALID_ARGUMENT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "no-such-host.invalid");
}

/* Binds the socket to the port it connects to first, as the kernel does by chance when
 * a connect to a local port nobody listens on picks that very port as its own: TCP's
 * simultaneous open then connects the socket to itself. */
static int self_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    int one = 1;

    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    (void)bind(fd, addr, len);
    return connect(fd, addr, len);
}

TEST(store_client_refuses_a_connection_to_itself)
{
    char buf[8], port[16];
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    coll_status_t st;

    /* a free port, closed again: nobody listens there (rank 0 has not started yet) */
    ASSERT(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
           getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    snprintf(port, sizeof(port), "%u", (unsigned)ntohs(a.sin_port));
    coll__sys.connect = self_connect;
    st = coll__tcpstore_get("127.0.0.1", port, "k", buf, sizeof(buf), 300);
    coll__sys = coll__sys_libc;
    /* not an answer read back from our own query: still waiting for the store to appear */
    ASSERT_EQ(st, COLL_TIMEOUT);
    ASSERT_STR_CONTAINS(coll_last_error(NULL), "is not reachable");
}

TEST(slurm_first_host)
{
    char h[64];

    ASSERT(coll__slurm_first_host("node7", h, sizeof(h)) && !strcmp(h, "node7"));
    ASSERT(coll__slurm_first_host("n[01-04,7],m2", h, sizeof(h)) && !strcmp(h, "n01"));
    ASSERT(coll__slurm_first_host("gpu-a,gpu-b", h, sizeof(h)) && !strcmp(h, "gpu-a"));
    ASSERT(coll__slurm_first_host("rack1-n[3]", h, sizeof(h)) && !strcmp(h, "rack1-n3"));
    ASSERT(!coll__slurm_first_host("n[x-2]", h, sizeof(h)));
    ASSERT(!coll__slurm_first_host("n[1-2", h, sizeof(h)));
    ASSERT(!coll__slurm_first_host("", h, sizeof(h)));
    ASSERT(!coll__slurm_first_host("averyveryverylongname", h, 8));
}

TEST(pci_distance)
{
    const char *gpu = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0";
    const char *nic_same_switch =
        "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:04:00.0";
    const char *nic_other_root = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0";
    const char *nic_root_port = "/sys/devices/pci0000:00/0000:00:03.0";

    ASSERT_EQ(coll__topo_path_distance(gpu, nic_same_switch), 4);
    ASSERT_EQ(coll__topo_path_distance(gpu, nic_root_port), 5);
    ASSERT_EQ(coll__topo_path_distance(gpu, nic_other_root), -1);
    ASSERT_EQ(coll__topo_path_distance(gpu, gpu), 0);
    ASSERT_EQ(coll__topo_path_distance("", gpu), -1);
}

TEST(pci_busid)
{
    /* CUDA's spelling, which the GPU binding turns into a sysfs path: nothing else passes */
    ASSERT(coll__topo_pci_busid_ok("0000:41:00.0"));
    ASSERT(coll__topo_pci_busid_ok("0001:b3:1f.7"));
    ASSERT(!coll__topo_pci_busid_ok(NULL));
    ASSERT(!coll__topo_pci_busid_ok(""));
    ASSERT(!coll__topo_pci_busid_ok("0000:41:00.0/"));
    ASSERT(!coll__topo_pci_busid_ok("../../../etc"));
    ASSERT(!coll__topo_pci_busid_ok("0000:41:00:0"));
    ASSERT(!coll__topo_pci_busid_ok("000g:41:00.0"));
}

TEST(group_hosts)
{
    struct coll_peer_info p[6];
    int host[6];
    const uint64_t hash[6] = {7, 9, 7, 9, 11, 7};

    memset(p, 0, sizeof(p));
    for (int i = 0; i < 6; i++) {
        p[i].rank = i;
        p[i].host_hash = hash[i];
        strcpy(p[i].hostname, hash[i] == 7 ? "a" : hash[i] == 9 ? "b" : "c");
    }
    ASSERT_EQ(coll__topo_group_hosts(p, 6, host), 3);
    ASSERT(host[0] == 0 && host[2] == 0 && host[5] == 0);
    ASSERT(host[1] == 1 && host[3] == 1);
    ASSERT_EQ(host[4], 2);
    /* one hash, two names (containers of one boot): two hosts */
    strcpy(p[2].hostname, "a2");
    ASSERT_EQ(coll__topo_group_hosts(p, 6, host), 4);
}

TEST(topology_sources_agree)
{
    struct coll_topo a, b;

    coll__topo_discover(&a, true);
    coll__topo_discover(&b, false);
    ASSERT(!strcmp(b.source, "sysfs"));
    ASSERT(a.npus >= 1 && a.ncores >= 1 && a.nnuma >= 1);
    ASSERT_EQ(a.npus, b.npus);
    ASSERT_EQ(a.nnuma, b.nnuma);
    ASSERT_EQ(a.ngpus, b.ngpus);
    for (int i = 0; i < b.nnics; i++)
        ASSERT(b.nic[i].pci[0] != '\0'); /* sysfs lists only NICs on PCI */
}

int main(int argc, char **argv)
{
    return harness_main(argc, argv);
}
