/*
 * topo.c - this host's topology and the ranks' hosts.
 *
 * Divisions: 1 sysfs helpers, 2 discovery from sysfs, 3 discovery with hwloc, 4 printing,
 * 5 host groups, 6 at comm start (log, bind the progress thread near the NIC).
 *
 * Both discoveries fill the same struct coll_topo: hwloc knows more machines (and what
 * the BIOS tables say), sysfs needs no library. The PCI distance between a GPU and a NIC is
 * counted in hops on the PCI tree (2: siblings under one bridge or switch port); the more
 * hops, the likelier the path crosses the CPU's root complex, where GPUDirect loses its
 * bandwidth.
 */
#include "topo.h"
#include "../base/sys.h"

#include <coll_config.h>

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#if COLL_HAVE_HWLOC
#include <hwloc.h>
#endif

/* ---- 1 sysfs helpers ----------------------------------------------------------------- */

/* Bounded copy that says nothing when it cuts (device names longer than the field). */
static void copy_str(char *dst, size_t n, const char *src)
{
    size_t l = strnlen(src, n - 1);
    memmove(dst, src, l);
    dst[l] = '\0';
}

/* First line of a small file, newline cut; false when unreadable. */
static bool read_line(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "re");
    bool ok;

    if (!f)
        return false;
    ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    if (ok)
        buf[strcspn(buf, "\n")] = '\0';
    return ok;
}

static long read_long(const char *path, long dflt)
{
    char buf[64], *end;
    long v;

    if (!read_line(path, buf, sizeof(buf)))
        return dflt;
    errno = 0;
    v = strtol(buf, &end, 0);
    return errno || end == buf ? dflt : v;
}

int coll__topo_path_distance(const char *a, const char *b)
{
    int na = 0, nb = 0, common = 0;
    const char *pa = a, *pb = b;

    if (!a || !b || !*a || !*b)
        return -1;
    /* count common leading components, then the rest of each */
    for (;;) {
        size_t la = strcspn(pa, "/"), lb = strcspn(pb, "/");
        if (la != lb || strncmp(pa, pb, la) != 0)
            break;
        if (la > 0)
            common++;
        if (!pa[la] || !pb[lb]) {
            pa += la, pb += lb;
            break;
        }
        pa += la + 1, pb += lb + 1;
    }
    for (const char *p = pa; *p; p += strcspn(p, "/"), p += *p == '/')
        if (*p != '/')
            na++;
    for (const char *p = pb; *p; p += strcspn(p, "/"), p += *p == '/')
        if (*p != '/')
            nb++;
    /* below /sys/devices/pciDDDD:BB a shared root complex is needed for a PCI path */
    if (common < 3 && strstr(a, "/sys/devices/pci"))
        return -1;
    return na + nb;
}

static bool is_pci_addr(const char *c, size_t len)
{
    return len == 12 && c[4] == ':' && c[7] == ':' && c[10] == '.';
}

/* Cut a sysfs device path after its last PCI function ("/sys/devices/pci0000:00/
 * 0000:00:03.0/virtio0" -> ".../0000:00:03.0"), the PCI address into pci; false when no
 * component is one. */
static bool pci_of_path(char *real, char *pci, size_t n)
{
    char *last = NULL;

    for (char *c = real; *c;) {
        size_t len = strcspn(c, "/");
        if (is_pci_addr(c, len))
            last = c;
        c += len;
        c += *c == '/';
    }
    pci[0] = '\0';
    if (!last)
        return false;
    last[12] = '\0';
    copy_str(pci, n, last);
    return true;
}

/* ---- 2 discovery from sysfs ---------------------------------------------------------- */

static void sysfs_cpus(struct coll_topo *t)
{
    char path[PATH_MAX];
    long seen[1024];
    int nseen = 0;
    DIR *d;
    struct dirent *e;

    t->npus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    d = opendir("/sys/devices/system/cpu");
    while (d && (e = readdir(d))) {
        long pkg, core, key;
        bool dup = false;
        if (strncmp(e->d_name, "cpu", 3) || e->d_name[3] < '0' || e->d_name[3] > '9')
            continue;
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/%s/topology/core_id", e->d_name);
        core = read_long(path, -1);
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/%s/topology/physical_package_id",
                 e->d_name);
        pkg = read_long(path, 0);
        if (core < 0)
            continue;
        key = pkg << 20 | core;
        for (int i = 0; i < nseen && !dup; i++)
            dup = seen[i] == key;
        if (!dup && nseen < (int)COLL_ARRAY_SIZE(seen))
            seen[nseen++] = key;
    }
    if (d)
        closedir(d);
    t->ncores = nseen ? nseen : t->npus;
    d = opendir("/sys/devices/system/node");
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, "node", 4) && e->d_name[4] >= '0' && e->d_name[4] <= '9')
            t->nnuma++;
    if (d)
        closedir(d);
    if (t->nnuma == 0)
        t->nnuma = 1;
}

/* Locality of a PCI device directory: NUMA node, CPU list. */
static void sysfs_locality(const char *devdir, struct coll_topo_dev *dev)
{
    char path[PATH_MAX];
    int n;

    /* a path too long for PATH_MAX names no file: read nothing rather than its prefix */
    n = snprintf(path, sizeof(path), "%s/numa_node", devdir);
    dev->numa = n > 0 && (size_t)n < sizeof(path) ? (int)read_long(path, -1) : -1;
    n = snprintf(path, sizeof(path), "%s/local_cpulist", devdir);
    if (n <= 0 || (size_t)n >= sizeof(path) || !read_line(path, dev->cpus, sizeof(dev->cpus)))
        dev->cpus[0] = '\0';
}

static void sysfs_nics(struct coll_topo *t, char real[][PATH_MAX])
{
    char path[PATH_MAX];
    DIR *d = opendir("/sys/class/net");
    struct dirent *e;

    while (d && (e = readdir(d)) && t->nnics < COLL_TOPO_MAX_DEV) {
        struct coll_topo_dev *dev = &t->nic[t->nnics];
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/sys/class/net/%s/device", e->d_name);
        /* virtual interfaces (lo, veth, bridges) have no device behind them */
        if (!realpath(path, real[t->nnics]))
            continue;
        memset(dev, 0, sizeof(*dev));
        copy_str(dev->name, sizeof(dev->name), e->d_name);
        if (!pci_of_path(real[t->nnics], dev->pci, sizeof(dev->pci)))
            continue; /* not on PCI (a platform device): no distance to speak of */
        sysfs_locality(real[t->nnics], dev);
        snprintf(path, sizeof(path), "/sys/class/net/%s/speed", e->d_name);
        dev->speed_mbps = read_long(path, -1);
        dev->near = dev->dist = -1;
        t->nnics++;
    }
    if (d)
        closedir(d);
}

static bool gpu_class(long vendor, long cls)
{
    /* NVIDIA or AMD display/3D controllers: a VM's virtual VGA is not a GPU */
    return (vendor == 0x10de || vendor == 0x1002) &&
           ((cls >> 8) == 0x0300 || (cls >> 8) == 0x0302 || (cls >> 8) == 0x0380);
}

static void sysfs_gpus(struct coll_topo *t, char nic_real[][PATH_MAX])
{
    char path[PATH_MAX], real[PATH_MAX];
    DIR *d = opendir("/sys/bus/pci/devices");
    struct dirent *e;

    while (d && (e = readdir(d)) && t->ngpus < COLL_TOPO_MAX_DEV) {
        struct coll_topo_dev *dev = &t->gpu[t->ngpus];
        long vendor, cls;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", e->d_name);
        vendor = read_long(path, -1);
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/class", e->d_name);
        cls = read_long(path, -1);
        if (!gpu_class(vendor, cls))
            continue;
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s", e->d_name);
        if (!realpath(path, real))
            continue;
        memset(dev, 0, sizeof(*dev));
        copy_str(dev->name, sizeof(dev->name), e->d_name);
        copy_str(dev->pci, sizeof(dev->pci), e->d_name);
        sysfs_locality(real, dev);
        dev->speed_mbps = -1;
        dev->near = dev->dist = -1;
        for (int i = 0; i < t->nnics; i++) {
            int dd = coll__topo_path_distance(real, nic_real[i]);
            if (dd >= 0 && (dev->dist < 0 || dd < dev->dist))
                dev->near = i, dev->dist = dd;
        }
        t->ngpus++;
    }
    if (d)
        closedir(d);
}

static void discover_sysfs(struct coll_topo *t)
{
    static char nic_real[COLL_TOPO_MAX_DEV][PATH_MAX]; /* only under topo_lock */

    t->source = "sysfs";
    sysfs_cpus(t);
    sysfs_nics(t, nic_real);
    sysfs_gpus(t, nic_real);
    /* a machine of one node reports -1 (no ACPI proximity info): it is node 0 */
    for (int i = 0; t->nnuma == 1 && i < t->nnics; i++)
        t->nic[i].numa = t->nic[i].numa < 0 ? 0 : t->nic[i].numa;
    for (int i = 0; t->nnuma == 1 && i < t->ngpus; i++)
        t->gpu[i].numa = t->gpu[i].numa < 0 ? 0 : t->gpu[i].numa;
}

/* ---- 3 discovery with hwloc ---------------------------------------------------------- */

#if COLL_HAVE_HWLOC
static void hw_locality(hwloc_topology_t topo, hwloc_obj_t o, struct coll_topo_dev *dev)
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, o);
    hwloc_obj_t pci = o;

    dev->numa = -1;
    dev->cpus[0] = '\0';
    if (anc && anc->cpuset)
        hwloc_bitmap_list_snprintf(dev->cpus, sizeof(dev->cpus), anc->cpuset);
    if (anc && anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1)
        dev->numa = hwloc_bitmap_first(anc->nodeset);
    while (pci && pci->type != HWLOC_OBJ_PCI_DEVICE)
        pci = pci->parent;
    if (pci)
        snprintf(dev->pci, sizeof(dev->pci), "%04x:%02x:%02x.%01x", pci->attr->pcidev.domain,
                 pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
}

/* Hops between two objects through their deepest common ancestor. */
static int hw_distance(hwloc_obj_t a, hwloc_obj_t b)
{
    int i = 0;
    for (hwloc_obj_t x = a; x; x = x->parent, i++) {
        int j = 0;
        for (hwloc_obj_t y = b; y; y = y->parent, j++)
            if (x == y)
                return i + j;
    }
    return -1;
}

static bool discover_hwloc(struct coll_topo *t)
{
    /* Loaded once per process and kept (callers hold topo_lock): loading costs tens of
     * milliseconds, and destroying the last topology unloads hwloc's I/O plugins, whose
     * own allocations then show up as leaks. */
    static hwloc_topology_t topo;
    static bool loaded, failed;
    hwloc_obj_t nic_obj[COLL_TOPO_MAX_DEV];
    hwloc_obj_t o = NULL;

    if (failed)
        return false;
    if (!loaded) {
        if (hwloc_topology_init(&topo) < 0) {
            failed = true;
            return false;
        }
        hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
        if (hwloc_topology_load(topo) < 0) {
            hwloc_topology_destroy(topo);
            failed = true;
            return false;
        }
        loaded = true;
    }
    t->source = "hwloc";
    t->npus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    t->ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    t->nnuma = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    while ((o = hwloc_get_next_osdev(topo, o)) && t->nnics < COLL_TOPO_MAX_DEV) {
        struct coll_topo_dev *dev = &t->nic[t->nnics];
        char path[PATH_MAX];
        if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK &&
            o->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS)
            continue;
        memset(dev, 0, sizeof(*dev));
        copy_str(dev->name, sizeof(dev->name), o->name ? o->name : "?");
        hw_locality(topo, o, dev);
        snprintf(path, sizeof(path), "/sys/class/net/%s/speed", dev->name);
        dev->speed_mbps = read_long(path, -1);
        dev->near = dev->dist = -1;
        nic_obj[t->nnics++] = o;
    }
    o = NULL;
    while ((o = hwloc_get_next_pcidev(topo, o)) && t->ngpus < COLL_TOPO_MAX_DEV) {
        struct coll_topo_dev *dev = &t->gpu[t->ngpus];
        if (!gpu_class(o->attr->pcidev.vendor_id, (long)o->attr->pcidev.class_id << 8))
            continue;
        memset(dev, 0, sizeof(*dev));
        hw_locality(topo, o, dev);
        copy_str(dev->name, sizeof(dev->name), dev->pci);
        dev->speed_mbps = -1;
        dev->near = dev->dist = -1;
        for (int i = 0; i < t->nnics; i++) {
            hwloc_obj_t np = nic_obj[i];
            int dd;
            while (np && np->type == HWLOC_OBJ_OS_DEVICE)
                np = np->parent; /* from the PCI function, as sysfs counts */
            dd = hw_distance(o, np);
            if (dd >= 0 && (dev->dist < 0 || dd < dev->dist))
                dev->near = i, dev->dist = dd;
        }
        t->ngpus++;
    }
    return true;
}
#endif

void coll__topo_discover(struct coll_topo *t, bool use_hwloc)
{
    static pthread_mutex_t topo_lock = PTHREAD_MUTEX_INITIALIZER;
    char host[256] = "";

    memset(t, 0, sizeof(*t));
    if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
        snprintf(host, sizeof(host), "unknown-host");
    copy_str(t->hostname, sizeof(t->hostname), host);
    pthread_mutex_lock(&topo_lock);
#if COLL_HAVE_HWLOC
    if (use_hwloc && discover_hwloc(t)) {
        pthread_mutex_unlock(&topo_lock);
        return;
    }
#else
    (void)use_hwloc;
#endif
    discover_sysfs(t);
    pthread_mutex_unlock(&topo_lock);
}

/* ---- 4 printing ---------------------------------------------------------------------- */

void coll__topo_print(const struct coll_topo *t, FILE *f)
{
    fprintf(f, "host %s (%s): %d PUs, %d cores, %d NUMA nodes, %d NICs, %d GPUs\n", t->hostname,
            t->source, t->npus, t->ncores, t->nnuma, t->nnics, t->ngpus);
    for (int i = 0; i < t->nnics; i++) {
        const struct coll_topo_dev *d = &t->nic[i];
        fprintf(f, "  nic %-10s pci %-12s numa %2d cpus %-12s speed %lld Mbit/s\n", d->name,
                d->pci[0] ? d->pci : "-", d->numa, d->cpus[0] ? d->cpus : "-",
                (long long)d->speed_mbps);
    }
    for (int i = 0; i < t->ngpus; i++) {
        const struct coll_topo_dev *d = &t->gpu[i];
        fprintf(f, "  gpu %-12s numa %2d cpus %-12s nearest nic %s (%d PCI hops)\n", d->name,
                d->numa, d->cpus[0] ? d->cpus : "-", d->near >= 0 ? t->nic[d->near].name : "-",
                d->dist);
    }
}

/* ---- 5 host groups ------------------------------------------------------------------- */

int coll__topo_group_hosts(const struct coll_peer_info *peers, int nranks, int *host_p)
{
    int nhosts = 0;

    for (int r = 0; r < nranks; r++) {
        host_p[r] = -1;
        for (int q = 0; q < r && host_p[r] < 0; q++)
            if (peers[q].host_hash == peers[r].host_hash &&
                !strcmp(peers[q].hostname, peers[r].hostname))
                host_p[r] = host_p[q];
        if (host_p[r] < 0)
            host_p[r] = nhosts++;
    }
    return nhosts;
}

/* ---- 6 at comm start ----------------------------------------------------------------- */

/* "0-3,8,10-11" into set; false when malformed. */
static bool parse_cpulist(const char *s, cpu_set_t *set)
{
    CPU_ZERO(set);
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10), b;
        if (end == s || a < 0 || a >= CPU_SETSIZE)
            return false;
        b = a;
        if (*end == '-') {
            s = end + 1;
            b = strtol(s, &end, 10);
            if (end == s || b < a || b >= CPU_SETSIZE)
                return false;
        }
        for (long c = a; c <= b; c++)
            CPU_SET((int)c, set);
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return false;
    }
    return CPU_COUNT(set) > 0;
}

/* The interface that holds addr (the data listener's), "" when none does. */
static void iface_of_addr(const uint8_t *addr, size_t len, char *ifname, size_t n)
{
    struct ifaddrs *ifs = NULL;
    struct sockaddr_storage ss;

    ifname[0] = '\0';
    if (len < sizeof(sa_family_t) || len > sizeof(ss) || coll__sys.getifaddrs(&ifs) < 0)
        return;
    memset(&ss, 0, sizeof(ss));
    memcpy(&ss, addr, len);
    for (struct ifaddrs *i = ifs; i && !ifname[0]; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != ss.ss_family)
            continue;
        if (ss.ss_family == AF_INET &&
            !memcmp(&((struct sockaddr_in *)i->ifa_addr)->sin_addr,
                    &((struct sockaddr_in *)&ss)->sin_addr, sizeof(struct in_addr)))
            snprintf(ifname, n, "%s", i->ifa_name);
        if (ss.ss_family == AF_INET6 &&
            !memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
                    &((struct sockaddr_in6 *)&ss)->sin6_addr, sizeof(struct in6_addr)))
            snprintf(ifname, n, "%s", i->ifa_name);
    }
    coll__sys.freeifaddrs(ifs);
}

/* Bind thread to the CPUs listed in the sysfs file `cpulist` when that narrows what this
 * process may use; "what" names the device in the log. */
static void bind_thread_near(struct coll_comm *comm, pthread_t thread, const char *thread_name,
                             const char *cpulist, const char *what)
{
    char list[256];
    cpu_set_t near, mine, both;

    if (!read_line(cpulist, list, sizeof(list)) || !parse_cpulist(list, &near))
        return;
    if (sched_getaffinity(0, sizeof(mine), &mine) < 0)
        return;
    CPU_AND(&both, &near, &mine);
    if (CPU_COUNT(&both) == 0 || CPU_COUNT(&both) == CPU_COUNT(&mine))
        return;
    if (pthread_setaffinity_np(thread, sizeof(both), &both) == 0)
        COLL_INFO(COLL_SUB_INIT, "rank %d: %s bound to CPUs %s near %s", comm->rank,
                  thread_name, list, what);
}

static void bind_progress(struct coll_comm *comm)
{
    char ifname[IF_NAMESIZE + 1], path[PATH_MAX];

    if (!comm->progress_started)
        return;
    iface_of_addr(comm->self.addr, comm->self.addr_len, ifname, sizeof(ifname));
    if (!ifname[0])
        return;
    /* no such file: a virtual NIC, or no locality known */
    snprintf(path, sizeof(path), "/sys/class/net/%s/device/local_cpulist", ifname);
    bind_thread_near(comm, comm->progress_thread, "progress thread", path, ifname);
}

bool coll__topo_pci_busid_ok(const char *busid)
{
    unsigned dom, bus, dev, fn;
    char tail;

    return busid && strlen(busid) == 12 &&
           sscanf(busid, "%4x:%2x:%2x.%1x%c", &dom, &bus, &dev, &fn, &tail) == 4;
}

void coll__topo_comm_gpu(struct coll_comm *comm, int dev, const char *busid,
                         const pthread_t *worker)
{
    char path[PATH_MAX], what[64];

    if (!coll__topo_pci_busid_ok(busid))
        return;
    snprintf(what, sizeof(what), "CUDA device %d (%s)", dev, busid);
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/local_cpulist", busid);
    /* as for the NIC: host-side work for this GPU (the progress thread moving its staged
     * pieces, the stream worker copying them) runs best on the socket the GPU hangs off */
    if (worker) {
        bind_thread_near(comm, *worker, "stream worker", path, what);
        return;
    }
    if (comm->progress_started)
        bind_thread_near(comm, comm->progress_thread, "progress thread", path, what);
    if (coll__log_level >= COLL_LOG_INFO && (coll__log_mask & COLL_SUB_INIT)) {
        struct coll_topo t;
        const char *v = getenv("COLL_TOPO");

        coll__topo_discover(&t, !(v && !strcmp(v, "sysfs")));
        for (int i = 0; i < t.ngpus; i++) {
            if (strcasecmp(t.gpu[i].pci, busid) && strcasecmp(t.gpu[i].name, busid))
                continue;
            if (t.gpu[i].near >= 0)
                COLL_INFO(COLL_SUB_INIT, "rank %d: %s: nearest NIC %s (%d PCI hops), NUMA %d",
                          comm->rank, what, t.nic[t.gpu[i].near].name, t.gpu[i].dist,
                          t.gpu[i].numa);
            else
                COLL_INFO(COLL_SUB_INIT, "rank %d: %s: NUMA %d, no NIC on its PCI tree",
                          comm->rank, what, t.gpu[i].numa);
        }
    }
}

static void log_topo_once(void)
{
    struct coll_topo t;
    const char *v = getenv("COLL_TOPO");
    char *buf = NULL;
    size_t len = 0;
    FILE *f;

    coll__topo_discover(&t, !(v && !strcmp(v, "sysfs")));
    f = open_memstream(&buf, &len);
    if (!f)
        return;
    coll__topo_print(&t, f);
    fclose(f);
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        COLL_INFO(COLL_SUB_INIT, "topo: %s", line);
    free(buf);
}

void coll__topo_comm_start(struct coll_comm *comm)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    if (coll__log_level >= COLL_LOG_INFO && (coll__log_mask & COLL_SUB_INIT) && comm->peers) {
        int *host = malloc((size_t)comm->nranks * sizeof(*host));
        char ranks[256] = "";
        int nhosts, mine;

        pthread_once(&once, log_topo_once);
        if (host) {
            nhosts = coll__topo_group_hosts(comm->peers, comm->nranks, host);
            mine = host[comm->rank];
            for (int r = 0; r < comm->nranks; r++) {
                size_t o = strlen(ranks);
                if (host[r] == mine && o + 16 < sizeof(ranks))
                    snprintf(ranks + o, sizeof(ranks) - o, "%s%d", o ? "," : "", r);
            }
            COLL_INFO(COLL_SUB_INIT, "rank %d: host %d of %d (%s), ranks on it: %s", comm->rank,
                      mine, nhosts, comm->self.hostname, ranks);
            free(host);
        }
    }
    bind_progress(comm);
}
