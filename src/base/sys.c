/*
 * sys.c - the overridable system-call table (see sys.h).
 *
 * The calls that take a struct sockaddr go through small wrappers: with _GNU_SOURCE glibc
 * declares them with a transparent union parameter, which a plain function pointer type
 * cannot name.
 */
#include "sys.h"

#include <unistd.h>

static int sys_bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    return bind(fd, addr, len);
}

static int sys_accept4(int fd, struct sockaddr *addr, socklen_t *len_p, int flags)
{
    return accept4(fd, addr, len_p, flags);
}

static int sys_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    return connect(fd, addr, len);
}

static int sys_getsockname(int fd, struct sockaddr *addr, socklen_t *len_p)
{
    return getsockname(fd, addr, len_p);
}

static int sys_getpeername(int fd, struct sockaddr *addr, socklen_t *len_p)
{
    return getpeername(fd, addr, len_p);
}

#define SYS_LIBC_TABLE                                                                             \
    {                                                                                              \
        .socket = socket, .bind = sys_bind, .listen = listen, .accept4 = sys_accept4,              \
        .connect = sys_connect, .getsockname = sys_getsockname, .getpeername = sys_getpeername,    \
        .setsockopt = setsockopt, .getsockopt = getsockopt, .shutdown = shutdown, .close = close,  \
        .read = read, .write = write, .readv = readv, .writev = writev, .send = send,              \
        .recv = recv, .sendmsg = sendmsg, .recvmsg = recvmsg, .poll = poll,                        \
        .epoll_ctl = epoll_ctl, .timerfd_create = timerfd_create,                                  \
        .timerfd_settime = timerfd_settime, .getifaddrs = getifaddrs, .freeifaddrs = freeifaddrs,  \
    }

const struct coll_sys coll__sys_libc = SYS_LIBC_TABLE;
struct coll_sys coll__sys = SYS_LIBC_TABLE;
