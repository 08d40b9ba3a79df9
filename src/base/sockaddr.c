/*
 * sockaddr.c - which address a listener binds (COLL_SOCKET_IFNAME), and addresses as text.
 *
 * The choice, in order of preference:
 *   spec given ("eth,ib", "=eth0", "^docker,lo", "^=eth1"): the interfaces it selects, an
 *   interface matching an earlier name of a list before one matching a later name;
 *   no spec: the first interface that is up and not loopback (docker and virbr bridges
 *   last, since other hosts rarely reach them), else loopback, so that a laptop or a
 *   container with only `lo` still works on one host.
 * Within each step IPv4 wins over IPv6, and a global IPv6 address over a link-local one
 * (which needs its scope id to be usable at all).
 */
#include "sys.h"
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#define SPEC_MAX_NAMES 16

struct ifspec {
    bool exclude; /* "^": everything but the names */
    bool exact;   /* "=": whole names, not prefixes */
    int n;
    char names[SPEC_MAX_NAMES][IF_NAMESIZE + 1];
};

static void spec_parse(const char *spec, struct ifspec *s)
{
    char buf[256], *save = NULL, *tok;

    memset(s, 0, sizeof(*s));
    if (*spec == '^')
        s->exclude = true, spec++;
    if (*spec == '=')
        s->exact = true, spec++;
    snprintf(buf, sizeof(buf), "%s", spec);
    for (tok = strtok_r(buf, ", ", &save); tok && s->n < SPEC_MAX_NAMES;
         tok = strtok_r(NULL, ", ", &save))
        snprintf(s->names[s->n++], sizeof(s->names[0]), "%s", tok);
}

/* Index of the first name of the list that ifname matches, -1 when none does. */
static int spec_find(const struct ifspec *s, const char *ifname)
{
    for (int i = 0; i < s->n; i++)
        if (s->exact ? !strcmp(ifname, s->names[i])
                     : !strncmp(ifname, s->names[i], strlen(s->names[i])))
            return i;
    return -1;
}

/* 0: IPv4, 1: global IPv6, 2: link-local IPv6, -1: not an address we can listen on. */
static int addr_class(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return 0;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a) || IN6_IS_ADDR_MULTICAST(a))
            return -1;
        return IN6_IS_ADDR_LINKLOCAL(a) ? 2 : 1;
    }
    return -1;
}

static bool is_bridge(const char *ifname)
{
    return !strncmp(ifname, "docker", 6) || !strncmp(ifname, "virbr", 5);
}

/* Tier of an interface, lower is better; -1 when it must not be used. */
static int if_tier(const struct ifaddrs *ifa, const struct ifspec *spec)
{
    bool loop = ifa->ifa_flags & IFF_LOOPBACK;

    if (!(ifa->ifa_flags & IFF_UP) || !(ifa->ifa_flags & IFF_RUNNING))
        return -1;
    if (spec && spec->n > 0) {
        int i = spec_find(spec, ifa->ifa_name);
        if (!spec->exclude)
            return i; /* named on purpose (loopback too); earlier names first */
        if (i >= 0)
            return -1;
    }
    if (loop)
        return 2;
    return is_bridge(ifa->ifa_name) ? 1 : 0;
}

/* Append name to a ", "-separated list unless it is there already (for messages). */
static void list_add(char *list, size_t size, const char *name)
{
    size_t o = strlen(list), n = strlen(name);

    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0'))
            return;
    snprintf(list + o, size - o, "%s%s", o ? ", " : "", name);
}

coll_status_t coll__socket_pick_addr(struct coll_comm *comm, const char *spec,
                                     struct sockaddr_storage *ss, socklen_t *len_p, char *ifname,
                                     size_t ifname_len)
{
    struct ifaddrs *list, *ifa, *best = NULL;
    struct ifspec parsed;
    int best_rank = -1;
    bool have_spec = spec && *spec;
    char up[256] = "";

    if (!ss || !len_p)
        return coll__error(comm, COLL_INVALID_ARGUMENT, "socket_pick_addr: NULL output");
    if (have_spec)
        spec_parse(spec, &parsed);
    if (coll__sys.getifaddrs(&list) < 0)
        return coll__sys_error(comm, errno, "cannot list network interfaces (getifaddrs)");

    for (ifa = list; ifa; ifa = ifa->ifa_next) {
        int tier, cls, rank;

        if (!ifa->ifa_addr || (cls = addr_class(ifa->ifa_addr)) < 0)
            continue;
        if (ifa->ifa_flags & IFF_UP)
            list_add(up, sizeof(up), ifa->ifa_name);
        tier = if_tier(ifa, have_spec ? &parsed : NULL);
        if (tier < 0)
            continue;
        rank = tier * 3 + cls; /* strictly better only: the first one of a rank */
        if (!best || rank < best_rank)
            best = ifa, best_rank = rank;
    }

    if (!best) {
        coll_status_t st;
        if (have_spec)
            st = coll__error(comm, COLL_INVALID_ARGUMENT,
                             "COLL_SOCKET_IFNAME='%s' selects no interface that is up with an "
                             "IPv4 or IPv6 address (up: %s)",
                             spec, up[0] ? up : "none");
        else
            st = coll__error(comm, COLL_SYSTEM_ERROR,
                             "no network interface is up with an IPv4 or IPv6 address");
        coll__sys.freeifaddrs(list);
        return st;
    }

    memset(ss, 0, sizeof(*ss));
    if (best->ifa_addr->sa_family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)ss;
        memcpy(sin, best->ifa_addr, sizeof(*sin));
        sin->sin_port = 0;
        *len_p = sizeof(*sin);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
        memcpy(sin6, best->ifa_addr, sizeof(*sin6));
        sin6->sin6_port = 0;
        sin6->sin6_flowinfo = 0;
        /* a link-local address means nothing without the interface it lives on */
        if (IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr) && sin6->sin6_scope_id == 0)
            sin6->sin6_scope_id = if_nametoindex(best->ifa_name);
        *len_p = sizeof(*sin6);
    }
    if (ifname && ifname_len > 0)
        snprintf(ifname, ifname_len, "%s", best->ifa_name);
    if (coll__log_level >= COLL_LOG_INFO) {
        char str[INET6_ADDRSTRLEN + 32];
        coll__sockaddr_str(ss, *len_p, str, sizeof(str));
        COLL_INFO(COLL_SUB_NET, "using interface %s, address %s%s%s%s", best->ifa_name, str,
                  have_spec ? " (COLL_SOCKET_IFNAME='" : "", have_spec ? spec : "",
                  have_spec ? "')" : "");
    }
    coll__sys.freeifaddrs(list);
    return COLL_SUCCESS;
}

void coll__sockaddr_str(const void *sa, socklen_t len, char *buf, size_t n)
{
    struct sockaddr_storage ss;
    char host[INET6_ADDRSTRLEN], scope[IF_NAMESIZE + 2] = "";

    if (!buf || n == 0)
        return;
    /* addresses live unaligned in peer records (uint8_t addr[]): copy before reading */
    memset(&ss, 0, sizeof(ss));
    if (sa)
        memcpy(&ss, sa, COLL_MIN((size_t)len, sizeof(ss)));
    if (sa && ss.ss_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
        snprintf(buf, n, "%s:%u", host, (unsigned)ntohs(sin->sin_port));
    } else if (sa && ss.ss_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&ss;
        char name[IF_NAMESIZE];
        inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
        if (sin6->sin6_scope_id) {
            if (if_indextoname(sin6->sin6_scope_id, name))
                snprintf(scope, sizeof(scope), "%%%s", name);
            else
                snprintf(scope, sizeof(scope), "%%%u", (unsigned)sin6->sin6_scope_id);
        }
        snprintf(buf, n, "[%s%s]:%u", host, scope, (unsigned)ntohs(sin6->sin6_port));
    } else {
        snprintf(buf, n, "<no address>");
    }
}
