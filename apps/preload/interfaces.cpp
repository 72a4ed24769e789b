// libxk_preload.so: the stack as a network interface, "xk0", in the lists
// a program reads to learn its host's addresses -- getifaddrs() and the
// SIOCGIFCONF family of ioctls -- so that a program that publishes its
// addresses to its peers (Open MPI's TCP transport, say) publishes the
// stack's. docs/preload.md, "Interfaces".

#include "interfaces.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "exports.hpp"
#include "process.hpp"

namespace xk::preload {
namespace {

constexpr char kName[] = "xk0";
constexpr int kIndex = 0x786b;  // 'x' 'k': far above the kernel's interface numbers
constexpr int kMtu = 1500;
constexpr short kFlags = IFF_UP | IFF_BROADCAST | IFF_RUNNING | IFF_MULTICAST;

// The stack's address and mask, host order; false without a stack.
bool stack_address(std::uint32_t& addr, std::uint32_t& mask) {
  const Process* p = Process::instance();
  if (p == nullptr || p->stack() == nullptr || p->policy().addr4() == 0) return false;
  addr = p->policy().addr4();
  mask = p->policy().mask4();
  return true;
}

sockaddr_in inet(std::uint32_t host_order) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(host_order);
  return a;
}

void put(sockaddr& into, std::uint32_t host_order) {
  const sockaddr_in a = inet(host_order);
  std::memcpy(&into, &a, sizeof a);
}

// SIOCGIFCONF: the kernel's list, then xk0 -- in the caller's buffer, whose
// room the kernel is given less one entry, so the whole list fits or the
// caller sees a full buffer and grows it, as with the kernel alone.
int interface_list(int fd, ifconf* ifc, std::uint32_t addr) {
  constexpr int kEntry = static_cast<int>(sizeof(ifreq));
  if (ifc->ifc_req == nullptr) {  // asking how much room the list takes
    const int r = libc().ioctl(fd, SIOCGIFCONF, ifc);
    if (r == 0) ifc->ifc_len += kEntry;
    return r;
  }
  const int room = ifc->ifc_len;
  if (room < kEntry) return libc().ioctl(fd, SIOCGIFCONF, ifc);
  ifc->ifc_len = room - kEntry;
  const int r = libc().ioctl(fd, SIOCGIFCONF, ifc);
  if (r != 0) return r;
  ifreq* ours = reinterpret_cast<ifreq*>(ifc->ifc_buf + ifc->ifc_len);
  std::memset(ours, 0, sizeof *ours);
  std::memcpy(ours->ifr_name, kName, sizeof kName);
  put(ours->ifr_addr, addr);
  ifc->ifc_len += kEntry;
  return 0;
}

}  // namespace

bool interface_ioctl(int fd, unsigned long request, void* arg, int& result) {
  // Only the interface requests: `arg` is an ifconf or ifreq for these and
  // anything at all (an int for FIONREAD) for the others.
  switch (request) {
    case SIOCGIFCONF:
    case SIOCGIFNAME:
    case SIOCGIFFLAGS:
    case SIOCGIFADDR:
    case SIOCGIFNETMASK:
    case SIOCGIFBRDADDR:
    case SIOCGIFINDEX:
    case SIOCGIFMTU:
    case SIOCGIFHWADDR:
    case SIOCSIFFLAGS:
    case SIOCSIFADDR:
    case SIOCSIFNETMASK:
    case SIOCSIFBRDADDR:
    case SIOCSIFMTU:
    case SIOCSIFHWADDR:
    case SIOCSIFNAME:
      break;
    default:
      return false;
  }
  std::uint32_t addr = 0, mask = 0;
  if (arg == nullptr || !stack_address(addr, mask)) return false;
  if (request == SIOCGIFCONF) {
    result = interface_list(fd, static_cast<ifconf*>(arg), addr);
    return true;
  }
  auto* ifr = static_cast<ifreq*>(arg);
  if (request == SIOCGIFNAME) {
    if (ifr->ifr_ifindex != kIndex) return false;
    std::memcpy(ifr->ifr_name, kName, sizeof kName);
    result = 0;
    return true;
  }
  if (std::strncmp(ifr->ifr_name, kName, IFNAMSIZ) != 0) return false;
  result = 0;
  switch (request) {
    case SIOCGIFFLAGS:
      ifr->ifr_flags = kFlags;
      return true;
    case SIOCGIFADDR:
      put(ifr->ifr_addr, addr);
      return true;
    case SIOCGIFNETMASK:
      put(ifr->ifr_netmask, mask);
      return true;
    case SIOCGIFBRDADDR:
      put(ifr->ifr_broadaddr, addr | ~mask);
      return true;
    case SIOCGIFINDEX:
      ifr->ifr_ifindex = kIndex;
      return true;
    case SIOCGIFMTU:
      ifr->ifr_mtu = kMtu;
      return true;
    case SIOCGIFHWADDR:
      std::memset(&ifr->ifr_hwaddr, 0, sizeof ifr->ifr_hwaddr);
      ifr->ifr_hwaddr.sa_family = ARPHRD_ETHER;
      return true;
    default:
      errno = EOPNOTSUPP;  // setting anything about xk0
      result = -1;
      return true;
  }
}

namespace {

// xk0's entry: one allocation, put first in the list, its ifa_data the
// mark by which freeifaddrs tells it from libc's (whose list is one block
// of its own, its ifa_data null or inside that block).
const char kMark = 0;
struct Entry {
  ifaddrs ifa;
  sockaddr_in addr, mask, broadcast;
  char name[sizeof kName];
};

}  // namespace
}  // namespace xk::preload

using namespace xk::preload;

XK_EXPORT int getifaddrs(ifaddrs** list) {
  if (const int r = libc().getifaddrs(list); r != 0) return r;
  std::uint32_t addr = 0, mask = 0;
  if (!stack_address(addr, mask)) return 0;
  auto* e = static_cast<Entry*>(std::calloc(1, sizeof(Entry)));
  if (e == nullptr) return 0;  // the kernel's list, without xk0
  std::memcpy(e->name, kName, sizeof kName);
  e->addr = inet(addr);
  e->mask = inet(mask);
  e->broadcast = inet(addr | ~mask);
  e->ifa.ifa_name = e->name;
  e->ifa.ifa_flags = static_cast<unsigned>(kFlags);
  e->ifa.ifa_addr = reinterpret_cast<sockaddr*>(&e->addr);
  e->ifa.ifa_netmask = reinterpret_cast<sockaddr*>(&e->mask);
  e->ifa.ifa_broadaddr = reinterpret_cast<sockaddr*>(&e->broadcast);
  e->ifa.ifa_data = const_cast<char*>(&kMark);
  e->ifa.ifa_next = *list;
  *list = &e->ifa;
  return 0;
}

XK_EXPORT void freeifaddrs(ifaddrs* list) {
  if (list != nullptr && list->ifa_data == &kMark) {
    ifaddrs* rest = list->ifa_next;
    std::free(list);
    list = rest;
  }
  if (list != nullptr) libc().freeifaddrs(list);
}
