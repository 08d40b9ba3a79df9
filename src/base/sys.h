/*
 * sys.h - every socket, epoll and interface call that tcp.c, bootstrap.c and sockaddr.c
 * make goes through this table (SQLite's VFS idea), so a fault test can replace one entry:
 * "fail the 3rd sendmsg with ECONNRESET", "short reads of 7 bytes", "no interfaces".
 *
 * The entries keep the libc signatures and the libc contract (-1 and errno on failure).
 * coll__sys starts as a copy of coll__sys_libc; a test overrides entries before it starts
 * the code under test and puts coll__sys_libc back afterwards. The table is not locked:
 * change it only while no other thread of coll is running.
 */
#ifndef COLL_SYS_H
#define COLL_SYS_H

#include "base.h"

#include <ifaddrs.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/types.h>
#include <sys/uio.h>

struct coll_sys {
    int (*socket)(int domain, int type, int protocol);
    int (*bind)(int fd, const struct sockaddr *addr, socklen_t len);
    int (*listen)(int fd, int backlog);
    int (*accept4)(int fd, struct sockaddr *addr, socklen_t *len_p, int flags);
    int (*connect)(int fd, const struct sockaddr *addr, socklen_t len);
    int (*getsockname)(int fd, struct sockaddr *addr, socklen_t *len_p);
    int (*getpeername)(int fd, struct sockaddr *addr, socklen_t *len_p);
    int (*setsockopt)(int fd, int level, int name, const void *val, socklen_t len);
    int (*getsockopt)(int fd, int level, int name, void *val, socklen_t *len_p);
    int (*shutdown)(int fd, int how);
    int (*close)(int fd);
    ssize_t (*read)(int fd, void *buf, size_t n);
    ssize_t (*write)(int fd, const void *buf, size_t n);
    ssize_t (*readv)(int fd, const struct iovec *iov, int iovcnt);
    ssize_t (*writev)(int fd, const struct iovec *iov, int iovcnt);
    ssize_t (*send)(int fd, const void *buf, size_t n, int flags);
    ssize_t (*recv)(int fd, void *buf, size_t n, int flags);
    ssize_t (*sendmsg)(int fd, const struct msghdr *msg, int flags);
    ssize_t (*recvmsg)(int fd, struct msghdr *msg, int flags);
    int (*poll)(struct pollfd *fds, nfds_t nfds, int timeout_ms);
    int (*epoll_ctl)(int epfd, int op, int fd, struct epoll_event *ev);
    int (*timerfd_create)(int clockid, int flags);
    int (*timerfd_settime)(int fd, int flags, const struct itimerspec *new_value,
                           struct itimerspec *old_value);
    int (*getifaddrs)(struct ifaddrs **ifap);
    void (*freeifaddrs)(struct ifaddrs *ifa);
};

COLL_INTERNAL extern struct coll_sys coll__sys;            /* what the library calls */
COLL_INTERNAL extern const struct coll_sys coll__sys_libc; /* the real calls, to restore */

#endif /* COLL_SYS_H */
