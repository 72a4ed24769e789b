// Linked into every harness: libpcap resolves the host names in a rule
// expression ("host foo") with getaddrinfo and gethostbyname, which may ask
// a DNS server -- a blocking network query per input, different answers on
// different machines, and a fuzzer sending made-up names to somebody's
// resolver. These definitions take the place of libc's for the whole
// program: numeric addresses and service names (/etc/services) still go to
// libc, a host name that would need resolving is an unknown host.
#include <dlfcn.h>
#include <netdb.h>

#include <cstdlib>

namespace {

using GetaddrinfoFn = int (*)(const char*, const char*, const addrinfo*, addrinfo**);

GetaddrinfoFn libc_getaddrinfo() {
  static const auto fn = reinterpret_cast<GetaddrinfoFn>(dlsym(RTLD_NEXT, "getaddrinfo"));
  if (fn == nullptr) std::abort();
  return fn;
}

}  // namespace

extern "C" int getaddrinfo(const char* node, const char* service, const addrinfo* hints, addrinfo** res) {
  if (node == nullptr) return libc_getaddrinfo()(node, service, hints, res);
  addrinfo numeric{};
  if (hints != nullptr) numeric = *hints;
  numeric.ai_flags |= AI_NUMERICHOST;
  return libc_getaddrinfo()(node, service, &numeric, res);
}

extern "C" hostent* gethostbyname(const char*) {
  h_errno = HOST_NOT_FOUND;
  return nullptr;
}
