#ifndef XK_PACKETDRILL_INTERFACE_H
#define XK_PACKETDRILL_INTERFACE_H
/*
 * The table of entry points packetdrill's --so_filename mode calls instead of
 * the kernel (docs/packetdrill.md). packetdrill dlopen()s the shared object,
 * looks up packetdrill_interface_init and calls it with the --so_flags string
 * and a table to fill; from then on every system call of a script, the
 * packets it injects and sniffs, and its clock go through the table.
 *
 * Written for xk from the interface's description; the members, their order
 * and their types must stay exactly those packetdrill's struct has (it is
 * the ABI between the two): every entry takes the userdata pointer first.
 */

#include <poll.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

struct packetdrill_interface {
  void* userdata;
  void (*free)(void* userdata);
  int (*socket)(void* userdata, int domain, int type, int protocol);
  int (*bind)(void* userdata, int sockfd, const struct sockaddr* addr, socklen_t addrlen);
  int (*listen)(void* userdata, int sockfd, int backlog);
  int (*accept)(void* userdata, int sockfd, struct sockaddr* addr, socklen_t* addrlen);
  int (*connect)(void* userdata, int sockfd, const struct sockaddr* addr, socklen_t addrlen);
  ssize_t (*read)(void* userdata, int fd, void* buf, size_t count);
  ssize_t (*readv)(void* userdata, int fd, const struct iovec* iov, int iovcnt);
  ssize_t (*recv)(void* userdata, int sockfd, void* buf, size_t len, int flags);
  ssize_t (*recvfrom)(void* userdata, int sockfd, void* buf, size_t len, int flags, struct sockaddr* src_addr,
                      socklen_t* addrlen);
  ssize_t (*recvmsg)(void* userdata, int sockfd, struct msghdr* msg, int flags);
  ssize_t (*write)(void* userdata, int fd, const void* buf, size_t count);
  ssize_t (*writev)(void* userdata, int fd, const struct iovec* iov, int iovcnt);
  ssize_t (*send)(void* userdata, int sockfd, const void* buf, size_t len, int flags);
  ssize_t (*sendto)(void* userdata, int sockfd, const void* buf, size_t len, int flags,
                    const struct sockaddr* dest_addr, socklen_t addrlen);
  ssize_t (*sendmsg)(void* userdata, int sockfd, const struct msghdr* msg, int flags);
  int (*fcntl)(void* userdata, int fd, int cmd, ...);
  int (*ioctl)(void* userdata, int fd, unsigned long request, ...);
  int (*close)(void* userdata, int fd);
  int (*shutdown)(void* userdata, int sockfd, int how);
  int (*getsockopt)(void* userdata, int sockfd, int level, int optname, void* optval, socklen_t* optlen);
  int (*setsockopt)(void* userdata, int sockfd, int level, int optname, const void* optval, socklen_t optlen);
  int (*poll)(void* userdata, struct pollfd* fds, nfds_t nfds, int timeout);
  /* Inject one IP packet (no link header) into the stack: 0, or -1. */
  int (*netdev_send)(void* userdata, const void* buf, size_t count);
  /* The next IP packet the stack sent: *count is the buffer's size on entry
   * and the packet's on return (0: nothing), *time_usecs when it was sent on
   * the clock gettimeofday reads. 0, or -1 (packetdrill then asks again). */
  int (*netdev_receive)(void* userdata, void* buf, size_t* count, long long* time_usecs);
  int (*usleep)(void* userdata, useconds_t usec);
  int (*gettimeofday)(void* userdata, struct timeval* tv, struct timezone* tz);
  int (*epoll_create)(void* userdata, int size);
  int (*epoll_ctl)(void* userdata, int epfd, int op, int fd, struct epoll_event* event);
  int (*epoll_wait)(void* userdata, int epfd, struct epoll_event* events, int maxevents, int timeout);
  int (*pipe)(void* userdata, int pipefd[2]);
  int (*splice)(void* userdata, int fd_in, loff_t* off_in, int fd_out, loff_t* off_out, size_t len,
                unsigned int flags);
};

/* The one symbol the shared object exports. `flags` is --so_flags (may be
 * NULL). */
void packetdrill_interface_init(const char* flags, struct packetdrill_interface* ifc);

typedef void (*packetdrill_interface_init_t)(const char* flags, struct packetdrill_interface* ifc);

#ifdef __cplusplus
}
#endif

#endif /* XK_PACKETDRILL_INTERFACE_H */
