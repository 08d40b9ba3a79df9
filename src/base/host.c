/*
 * host.c - this host as the layers above see it: its identity (which ranks share a
 * machine), the CPUs its ranks may run on, and the file descriptor limit.
 */
#include "net.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* boot_id tells two containers with one hostname on different machines apart; the hostname
 * tells containers on one machine (same boot_id, own network namespaces) apart; so does the
 * network namespace itself, for namespaces that share a hostname: shared memory needs its
 * doorbell sockets, which live in the network namespace, so such ranks are not "local". */
void coll__host_identity(struct coll_peer_info *self)
{
    char host[256] = "", boot[64] = "", netns[64] = "", pidns[64] = "";
    size_t n;
    int fd;
    ssize_t nl = readlink("/proc/self/ns/net", netns, sizeof(netns) - 1);
    ssize_t pl = readlink("/proc/self/ns/pid", pidns, sizeof(pidns) - 1);

    if (nl > 0)
        netns[nl] = '\0';
    if (pl > 0)
        pidns[pl] = '\0';

    if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
        snprintf(host, sizeof(host), "unknown-host");
    fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r = read(fd, boot, sizeof(boot) - 1);
        boot[r > 0 ? r : 0] = '\0';
        boot[strcspn(boot, "\n")] = '\0';
        close(fd);
    }
    memset(self->hostname, 0, sizeof(self->hostname));
    n = strnlen(host, COLL_HOSTNAME_MAX - 1);
    memcpy(self->hostname, host, n);
    self->host_hash = coll__hash64(
        netns, strlen(netns),
        coll__hash64(boot, strlen(boot), coll__hash64(host, strlen(host), 0)));
    /* one kernel and one PID namespace: the peers whose CPU affinity this rank can read
     * (coll__host_cpus_of); containers with their own PID namespaces, often their own
     * cpusets too, are machines of their own here */
    self->machine_hash = self->host_hash;
    if (boot[0] && pidns[0])
        self->machine_hash =
            coll__hash64(pidns, strlen(pidns), coll__hash64(boot, strlen(boot), 0));
    self->pid = (int32_t)getpid();
}

int coll__host_cpus_of(int64_t configured, const struct coll_peer_info *self,
                       const struct coll_peer_info *peers, int nranks, int rank,
                       int *machine_cpus)
{
    cpu_set_t host, machine, peer;

    if (configured > 0) { /* ranks pinned one to a CPU see only their own */
        if (machine_cpus)
            *machine_cpus = (int)configured;
        return (int)configured;
    }
    if (sched_getaffinity(0, sizeof(host), &host) < 0) {
        int online = (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (machine_cpus)
            *machine_cpus = online;
        return online;
    }
    machine = host;
    /* Once the peers are known: the union of this host's ranks' affinities, so that ranks
     * a launcher pinned one to a CPU (mpirun --bind-to core, srun --cpu-bind) count all
     * of theirs. A peer whose affinity cannot be read (gone, or in another PID
     * namespace) adds nothing. Each peer's is read once, for the host and the machine. */
    for (int p = 0; peers && p < nranks; p++) {
        bool on_host = peers[p].host_hash == self->host_hash;
        bool on_machine = machine_cpus && peers[p].machine_hash == self->machine_hash;

        if (p == rank || peers[p].pid <= 0 || !(on_host || on_machine) ||
            sched_getaffinity((pid_t)peers[p].pid, sizeof(peer), &peer) != 0)
            continue;
        if (on_host)
            CPU_OR(&host, &host, &peer);
        if (on_machine)
            CPU_OR(&machine, &machine, &peer);
    }
    if (machine_cpus)
        *machine_cpus = CPU_COUNT(&machine);
    return CPU_COUNT(&host);
}

/* A process out of file descriptors whose soft limit is below the hard one raises it, once,
 * rather than refusing connections: listeners under a crowd of strangers may need more than
 * the customary 1024. */
bool coll__raise_nofile(void)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    struct rlimit rl;
    bool raised = false;

    pthread_mutex_lock(&lock);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;

        rl.rlim_cur = rl.rlim_max;
        raised = setrlimit(RLIMIT_NOFILE, &rl) == 0;
        if (raised)
            COLL_INFO(COLL_SUB_BOOTSTRAP,
                      "out of file descriptors: raised the soft RLIMIT_NOFILE from %llu to the "
                      "hard limit %llu",
                      (unsigned long long)was, (unsigned long long)rl.rlim_max);
    }
    pthread_mutex_unlock(&lock);
    return raised;
}

