// The C API's stacks: building one from a configuration or the environment
// (xk_stack_create, xk_node_create), adopting a C++ Stack, polling, reading
// counters, and destroying a stack with the descriptors on it.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <arpa/inet.h>
#include <unistd.h>

#include "socket_api_internal.hpp"
#include "xk/counters.hpp"
#include "xk/protocols/ipv4.hpp"
#include "xk/protocols/ipv6.hpp"

using namespace xk;
using namespace xk::capi;

// ---- stacks ----------------------------------------------------------------------

extern "C" void xk_stack_config_init(struct xk_stack_config* c) {
  *c = xk_stack_config{};
  c->csum = 1;
  c->mode = XK_MODE_INLINE;
  c->idle = XK_IDLE_SPIN_THEN_SLEEP;
  c->spin_us = 50;
  c->cpu = -1;
  c->link_wait_ms = 5000;
}

namespace {
std::string env_or(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

std::string read_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) throw std::invalid_argument("cannot read " + path + ": " + std::strerror(errno));
  std::string text;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

// enum xk_idle and the loop's IdleMode (whose names parse_idle_mode knows).
constexpr std::pair<int, IdleMode> kIdleModes[] = {{XK_IDLE_SPIN_THEN_SLEEP, IdleMode::spin_then_sleep},
                                                   {XK_IDLE_BUSY_POLL, IdleMode::busy_poll},
                                                   {XK_IDLE_YIELD_THEN_SLEEP, IdleMode::yield_then_sleep}};

unsigned env_number(const char* name, unsigned fallback, unsigned max) {
  std::string v = env_or(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  unsigned long n = std::strtoul(v.c_str(), &end, 10);
  if (*end != '\0' || n > max) throw std::invalid_argument(std::string(name) + "='" + v + "' is not a number in 0.." + std::to_string(max));
  return static_cast<unsigned>(n);
}

StackConfig config_from(const xk_stack_config* c) {
  StackConfig sc;
  xk_stack_config env;
  std::string graph_text;
  SimpleGraph g;
  std::string filterd;
  if (c == nullptr) {
    xk_stack_config_init(&env);
    filterd = env_or("XK_FILTERD");
    std::string file = env_or("XK_GRAPH");
    if (!file.empty()) {
      graph_text = read_file(file);
      sc.source = file;
    }
    g.port = env_or("XK_PORT");
    g.port_opts = env_or("XK_PORT_OPTS");
    g.ip = env_or("XK_IP");
    g.gw = env_or("XK_GW");
    g.mac = env_or("XK_MAC");
    g.tcp_opts = env_or("XK_TCP_OPTS");
    std::string csum = env_or("XK_CSUM", "on");
    if (csum != "on" && csum != "off") throw std::invalid_argument("XK_CSUM='" + csum + "': on or off");
    g.csum = csum == "on";
    std::string mode = env_or("XK_MODE", "inline");
    if (mode != "inline" && mode != "service" && mode != "hybrid") {
      throw std::invalid_argument("XK_MODE='" + mode + "': inline, service or hybrid");
    }
    env.mode = mode == "service" ? XK_MODE_SERVICE : mode == "hybrid" ? XK_MODE_HYBRID : XK_MODE_INLINE;
    sc.hand_back = std::chrono::microseconds(env_number("XK_HAND_BACK_US", 500, 1'000'000));
    if (sc.hand_back.count() == 0) throw std::invalid_argument("XK_HAND_BACK_US=0: at least 1");
    std::string idle = env_or("XK_IDLE", "spin");
    std::optional<IdleMode> m = parse_idle_mode(idle);
    if (!m) throw std::invalid_argument("XK_IDLE='" + idle + "': spin, busy or yield");
    for (const auto& [c_idle, loop_idle] : kIdleModes) {
      if (loop_idle == *m) env.idle = c_idle;
    }
    env.spin_us = env_number("XK_SPIN_US", 50, 1'000'000);
    std::string cpu = env_or("XK_CPU");
    env.cpu = cpu.empty() ? -1 : static_cast<int>(env_number("XK_CPU", 0, 4095));
    if (!env_or("XK_MAX_FDS").empty()) {
      const unsigned max_fds = env_number("XK_MAX_FDS", 0, FdTable::kMaxLimit);
      if (max_fds == 0) throw std::invalid_argument("XK_MAX_FDS=0: at least 1");
      if (!table().set_limit(static_cast<int>(max_fds))) {
        throw std::invalid_argument("XK_MAX_FDS=" + std::to_string(max_fds) + ": a descriptor at or above it is open");
      }
    }
    c = &env;
  } else {
    if (c->filterd != nullptr) filterd = c->filterd;
    if (c->graph != nullptr) graph_text = c->graph;
    g.port = c->port != nullptr ? c->port : "";
    g.ip = c->ip != nullptr ? c->ip : "";
    g.gw = c->gw != nullptr ? c->gw : "";
    g.mac = c->mac != nullptr ? c->mac : "";
    g.tcp_opts = c->tcp_opts != nullptr ? c->tcp_opts : "";
    g.csum = c->csum != 0;
  }
  if (c->mode != XK_MODE_INLINE && c->mode != XK_MODE_SERVICE && c->mode != XK_MODE_HYBRID) {
    throw std::invalid_argument("mode: inline, service or hybrid");
  }
  const auto* idle = std::find_if(std::begin(kIdleModes), std::end(kIdleModes),
                                  [c](const auto& e) { return e.first == c->idle; });
  if (idle == std::end(kIdleModes)) throw std::invalid_argument("idle: spin, busy or yield");
  if (!filterd.empty()) {
    sc.filterd = filterd;  // the graph comes from filterd
    sc.tcp_opts = g.tcp_opts;
    // Over TCP, on another host: the node's own port and MAC (XK_PORT, XK_MAC).
    sc.node_port = g.port;
    sc.node_mac = g.mac;
  } else {
    sc.graph = graph_text.empty() ? compose_graph(g) : graph_text;
  }
  sc.mode = c->mode == XK_MODE_SERVICE  ? StackMode::service_thread
            : c->mode == XK_MODE_HYBRID ? StackMode::hybrid
                                        : StackMode::inline_calls;
  sc.loop.idle = idle->second;
  sc.loop.spin = std::chrono::microseconds(c->spin_us);
  sc.thread.cpu = c->cpu;
  sc.link_wait = std::chrono::milliseconds(c->link_wait_ms);
  return sc;
}
}  // namespace

extern "C" xk_stack* xk_stack_create(const struct xk_stack_config* config) {
  StackConfig sc;
  try {
    sc = config_from(config);
  } catch (const std::exception& e) {
    fail(EINVAL, std::string("xk_stack_create: ") + e.what());
    return nullptr;
  }
  try {
    auto* h = new xk_stack{Stack::create(std::move(sc))};
    t_last_error.clear();
    return h;
  } catch (const GraphError& e) {
    fail(EINVAL, std::string("xk_stack_create: bad graph:\n") + e.what());
  } catch (const std::bad_alloc&) {
    fail(ENOMEM, "xk_stack_create: out of memory");
  } catch (const std::exception& e) {
    fail(EIO, std::string("xk_stack_create: ") + e.what());
  }
  return nullptr;
}

extern "C" int xk_node_create(const struct xk_stack_config* config, unsigned count, xk_stack** stacks) {
  if (stacks == nullptr) return fail(EINVAL, "xk_node_create: no array for the stacks");
  if (count == 0 || count > 64) return fail(EINVAL, "xk_node_create: count " + std::to_string(count) + " is not in 1..64");
  const char* filterd = config != nullptr ? config->filterd : std::getenv("XK_FILTERD");
  if (filterd == nullptr || *filterd == '\0') {
    return fail(EINVAL, "xk_node_create: several stacks sharing an address need filterd (XK_FILTERD)");
  }
  StackConfig sc;
  try {
    sc = config_from(config);
  } catch (const std::exception& e) {
    return fail(EINVAL, std::string("xk_node_create: ") + e.what());
  }
  try {
    std::vector<std::unique_ptr<Stack>> built = Stack::create_node(std::move(sc), count);
    std::vector<std::unique_ptr<xk_stack>> handles;
    for (auto& st : built) handles.push_back(std::make_unique<xk_stack>(xk_stack{std::move(st)}));
    for (unsigned i = 0; i < count; ++i) stacks[i] = handles[i].release();
    t_last_error.clear();
    return 0;
  } catch (const std::invalid_argument& e) {
    return fail(EINVAL, std::string("xk_node_create: ") + e.what());
  } catch (const std::bad_alloc&) {
    return fail(ENOMEM, "xk_node_create: out of memory");
  } catch (const std::exception& e) {
    return fail(EIO, std::string("xk_node_create: ") + e.what());
  }
}

xk_stack* xk::adopt_for_c_api(std::unique_ptr<Stack> stack) {
  if (stack == nullptr) throw std::invalid_argument("adopt_for_c_api: no stack");
  return new xk_stack{std::move(stack)};
}

extern "C" void xk_stack_destroy(xk_stack* h) {
  if (h == nullptr) return;
  Stack* stack = h->stack.get();
  // Sockets first (reset: nobody will read what they hold), then epoll sets.
  std::vector<int> fds = table().select([&](const File& f) {
    return f.kind == File::Kind::socket && static_cast<const Sock&>(f).stack == stack;
  });
  for (int fd : fds) {
    if (auto f = table().take(fd)) (void)guarded("close", [&] { return close_sock(std::static_pointer_cast<Sock>(f), true); });
  }
  std::vector<int> eps = table().select([&](const File& f) {
    if (f.kind != File::Kind::epoll) return false;
    auto& ep = const_cast<Epoll&>(static_cast<const Epoll&>(f));
    std::lock_guard<std::mutex> lock(ep.mu);
    return ep.stack == stack;
  });
  for (int fd : eps) {
    if (auto f = table().get(fd)) {
      auto& ep = static_cast<Epoll&>(*f);
      std::lock_guard<std::mutex> lock(ep.mu);
      ep.stack = nullptr;  // its sockets are gone; it may watch another stack's
    }
  }
  delete h;
}

extern "C" int xk_stack_drain(xk_stack* h, int timeout_ms) {
  if (h == nullptr) return fail(EINVAL, "xk_stack_drain: no stack");
  return guarded("xk_stack_drain", [&]() -> int {
    Stack& stack = *h->stack;
    if (stack.tcp() == nullptr) return 0;
    Deadline deadline;
    if (timeout_ms >= 0) deadline = capi::Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      // (An inline or hybrid call runs the stack before and after itself.)
      const std::size_t open = stack.call([&] {
        const tcp::TcpProtocol& t = *stack.tcp();
        return t.connection_count() - t.time_wait_count();
      });
      if (open == 0 || (deadline && capi::Clock::now() >= *deadline)) return static_cast<int>(std::min<std::size_t>(open, INT32_MAX));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
}

extern "C" int xk_stack_poll(xk_stack* h) {
  if (h == nullptr) return fail(EINVAL, "xk_stack_poll: no stack");
  return guarded("xk_stack_poll", [&] { return static_cast<int>(std::min<std::size_t>(h->stack->poll(), INT32_MAX)); });
}

extern "C" int xk_stack_counter(xk_stack* h, const char* instance, const char* name, unsigned long long* value) {
  if (h == nullptr || instance == nullptr || name == nullptr || value == nullptr) {
    return fail(EINVAL, "xk_stack_counter: a null argument");
  }
  return guarded("xk_stack_counter", [&] {
    const std::optional<std::uint64_t> got = h->stack->call([&]() -> std::optional<std::uint64_t> {
      const Protocol* p = h->stack->graph().find(instance);
      if (p == nullptr) return std::nullopt;
      const std::string_view n = name;
      if (const auto* t = dynamic_cast<const tcp::TcpProtocol*>(p); t != nullptr) {
        if (n == "connections") return t->connection_count();
        if (n == "time_wait") return t->time_wait_count();
        if (n.starts_with("state:")) {
          std::uint64_t k = 0;
          for (const tcp::TcpProtocol::ConnectionInfo& c : t->connections()) k += n.substr(6) == tcp::to_string(c.state);
          return k;
        }
      }
      const Counter* c = p->counters().find(n);
      if (c == nullptr) return std::nullopt;
      return c->value();
    });
    if (!got) return fail(ENOENT, std::string("xk_stack_counter: no counter ") + instance + "." + name);
    *value = *got;
    return 0;
  });
}

extern "C" int xk_stack_write_counters(xk_stack* h, int fd) {
  if (h == nullptr) return fail(EINVAL, "xk_stack_write_counters: a null stack");
  return guarded("xk_stack_write_counters", [&] {
    const std::string text = h->stack->call([&] {
      h->stack->sync_counters();
      std::vector<const CounterSet*> sets = h->stack->graph().counters();
      sets.push_back(&h->stack->loop().counters());
      return counters_table(sets);
    });
    for (std::size_t done = 0; done < text.size();) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail(errno, "xk_stack_write_counters: write");
      done += static_cast<std::size_t>(n);
    }
    return 0;
  });
}

extern "C" int xk_stack_addr(xk_stack* h, struct in_addr* addr, int* prefix_len, struct in_addr* gw) {
  if (h == nullptr) return fail(EINVAL, "xk_stack_addr: a null stack");
  return guarded("xk_stack_addr", [&] {
    const std::optional<ipv4::Config> cfg = h->stack->call([&]() -> std::optional<ipv4::Config> {
      for (Protocol* p : h->stack->graph().protocols()) {
        if (const auto* ip = dynamic_cast<const ipv4::Ipv4Protocol*>(p); ip != nullptr) return ip->config();
      }
      return std::nullopt;
    });
    if (!cfg) return fail(ENOENT, "xk_stack_addr: the stack has no IPv4 layer");
    if (addr != nullptr) addr->s_addr = htonl(cfg->addr.addr.value);
    if (prefix_len != nullptr) *prefix_len = cfg->addr.prefix_len;
    if (gw != nullptr) gw->s_addr = cfg->gw ? htonl(cfg->gw->value) : 0;
    return 0;
  });
}

extern "C" int xk_stack_addr6(xk_stack* h, unsigned index, struct in6_addr* addr, int* prefix_len,
                              struct in6_addr* gw) {
  if (h == nullptr) return fail(EINVAL, "xk_stack_addr6: a null stack");
  return guarded("xk_stack_addr6", [&] {
    struct Found {
      IpCidr addr;
      std::optional<IpAddr> gw;
    };
    const std::optional<Found> f = h->stack->call([&]() -> std::optional<Found> {
      for (Protocol* p : h->stack->graph().protocols()) {
        const auto* ip = dynamic_cast<const ipv6::Ipv6Protocol*>(p);
        if (ip == nullptr) continue;
        if (index >= ip->addresses().size()) return std::nullopt;
        return Found{ip->addresses()[index], ip->config().gw};
      }
      return std::nullopt;
    });
    if (!f) return fail(ENOENT, "xk_stack_addr6: no IPv6 address of that index");
    if (addr != nullptr) std::memcpy(addr->s6_addr, f->addr.addr.bytes().data(), 16);
    if (prefix_len != nullptr) *prefix_len = f->addr.prefix_len;
    if (gw != nullptr) {
      *gw = in6_addr{};
      if (f->gw) std::memcpy(gw->s6_addr, f->gw->bytes().data(), 16);
    }
    return 0;
  });
}
