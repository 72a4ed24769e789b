// xk-echo: a TCP and UDP echo server (RFC 862) on one xk stack, for tests and
// demos (docs/apps-echo.md).
//
//   xk-echo STACK [--tcp-port 7] [--udp-port 7] [--tcp-only | --udp-only]
//           [--group] [--count N] [--idle busy|sleep|yield]
//
// TCP: every byte of every connection goes back (xk::apps::TcpEchoServer);
// UDP: every datagram goes back to its sender (xk::apps::UdpEchoServer).
// Behind filterd (--filterd), --group shares the TCP port with other nodes.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "xk/apps/servers.hpp"
#include "xk/apps/stack.hpp"
#include "xk/event_loop.hpp"
#include "xk/protocols/tcp.hpp"
#include "xk/protocols/udp.hpp"

namespace {

constexpr const char* kProg = "xk-echo";
constexpr int kExitOk = 0;
constexpr int kExitFail = 1;

using xk::apps::parse_number;
using xk::apps::UsageError;

constexpr const char* kUsageHead = R"(usage: xk-echo [options]

A TCP and UDP echo server (RFC 862) on one xk stack.

stack:
)";
constexpr const char* kUsageTail = R"(  --link-wait SEC     wait this long for the port's link (default 10)
  --idle MODE         sleep (default), busy or yield: how the loop idles

echo:
  --tcp-port N        TCP port (default 7)
  --udp-port N        UDP port (default 7)
  --tcp-only, --udp-only  serve one protocol only
  --group             behind filterd (--filterd): share the TCP port with other nodes
                      (with --stacks K, the K stacks always join the port's group)
  --count N           exit after N TCP connections have ended, or N datagrams with
                      --udp-only (default 0: run until SIGINT/SIGTERM)
  --help

exit status: 0 success, 1 failure, 2 bad command line
)";

struct Args : xk::apps::CommonArgs {
  Args() { idle_mode = xk::IdleMode::spin_then_sleep; }  // a server that mostly waits
  std::uint16_t tcp_port = 7;
  std::uint16_t udp_port = 7;
  bool tcp = true;
  bool udp = true;
  bool group = false;
  std::uint64_t count = 0;
};

const xk::apps::CommandLineSpec kCommandLine{
    .usage_head = kUsageHead,
    .usage_tail = kUsageTail,
    .role_noun = nullptr,
    .roles = {},  // no role word: flags only
};

Args parse_args(int argc, char** argv) {
  Args a;
  xk::apps::parse_command_line(argc, argv, kCommandLine, a, [&](xk::apps::Flag& f) {
    if (f.name() == "--tcp-port") {
      a.tcp_port = parse_number<std::uint16_t>(f.name(), f.value(), 1, 65535);
    } else if (f.name() == "--udp-port") {
      a.udp_port = parse_number<std::uint16_t>(f.name(), f.value(), 1, 65535);
    } else if (f.name() == "--tcp-only") {
      f.no_value();
      a.udp = false;
    } else if (f.name() == "--udp-only") {
      f.no_value();
      a.tcp = false;
    } else if (f.name() == "--group") {
      f.no_value();
      a.group = true;
    } else if (f.name() == "--count") {
      a.count = parse_number<std::uint64_t>(f.name(), f.value(), 0, std::uint64_t{1} << 40);
    } else {
      throw UsageError{"unknown option '" + std::string(f.name()) + "'"};
    }
  });
  a.stack.validate();
  if (!a.tcp && !a.udp) throw UsageError{"--tcp-only and --udp-only together leave nothing to serve"};
  if (a.stack.stacks > 1 && !a.tcp) throw UsageError{"--stacks serves TCP (a UDP port is one stack's): not with --udp-only"};
  if (a.group && !a.tcp) throw UsageError{"--group is for the TCP port"};
  return a;
}

// --stacks K: K stacks of one node, each on its own thread and channel,
// every one a member of the TCP port's listen group (new connections spread
// over the stacks by the 4-tuple); UDP on stack 0 only. --count counts the
// connections of the whole node.
int run_node(const Args& a) {
  xk::apps::AppNode node(kProg, a.stack, a.idle());
  const std::size_t k = node.size();
  for (std::size_t q = 0; q < k; ++q) node.stack(q).wait_for_link(a.link_wait_s, q == 0);
  std::vector<std::optional<xk::tcp::TcpListener>> listeners(k);
  std::vector<std::unique_ptr<xk::apps::TcpEchoServer>> echo(k);
  for (std::size_t q = 0; q < k; ++q) {
    auto& tcp = node.stack(q).require<xk::tcp::TcpProtocol>("tcp0");
    auto l = tcp.listen(xk::IpAddr{}, xk::Port{a.tcp_port}, 128, true);
    if (!l) {
      std::fprintf(stderr, "%s: stack %zu: cannot listen on tcp port %u: %s\n", kProg, q, a.tcp_port,
                   xk::to_string(l.error()));
      return kExitFail;
    }
    listeners[q].emplace(std::move(*l));
    echo[q] = std::make_unique<xk::apps::TcpEchoServer>(kProg, *listeners[q], node.stack(q).loop(), 0);
  }
  std::optional<xk::udp::UdpSocket> sock;
  std::optional<xk::apps::UdpEchoServer> udp_echo;
  if (a.udp) {
    auto& udp = node.stack(0).require<xk::udp::UdpProtocol>("udp0");
    sock.emplace(udp.socket());
    if (xk::Status s = sock->bind(xk::IpAddr{}, xk::Port{a.udp_port}); !s) {
      std::fprintf(stderr, "%s: cannot bind udp port %u: %s\n", kProg, a.udp_port, xk::to_string(s.error()));
      return kExitFail;
    }
    udp_echo.emplace(kProg, *sock, node.stack(0).loop(), 0, false);
  }
  std::printf("%s: %s: %zu stacks: tcp port %u (group)", kProg, xk::apps::describe_stack(node.stack(0).graph()).c_str(),
              k, a.tcp_port);
  if (a.udp) std::printf(" udp port %u (stack 0)", a.udp_port);
  std::printf(": ready\n");
  std::fflush(stdout);
  auto total = [&] {
    std::uint64_t n = 0;
    for (const auto& e : echo) n += e->connections();
    return n;
  };
  node.run(
      [&](std::size_t q) {
        xk::EventLoop& loop = node.stack(q).loop();
        loop.add(*echo[q]);
        if (q == 0 && udp_echo) loop.add(*udp_echo);
        loop.run();
        loop.remove(*echo[q]);
        if (q == 0 && udp_echo) loop.remove(*udp_echo);
        (void)listeners[q]->close();
        xk::apps::finish_handshakes(loop, node.stack(q).require<xk::tcp::TcpProtocol>("tcp0"));
      },
      [&] { return a.count != 0 && total() >= a.count; });
  int rc = kExitOk;
  std::uint64_t bytes = 0, failed = 0;
  for (std::size_t q = 0; q < k; ++q) {
    std::printf("%s: stack %zu (cpu %d): tcp: %llu connections, %llu bytes echoed, %llu failed\n", kProg, q, node.cpu(q),
                static_cast<unsigned long long>(echo[q]->connections()),
                static_cast<unsigned long long>(echo[q]->bytes()), static_cast<unsigned long long>(echo[q]->failures()));
    bytes += echo[q]->bytes();
    failed += echo[q]->failures();
  }
  std::printf("%s: tcp: %llu connections, %llu bytes echoed, %llu failed\n", kProg,
              static_cast<unsigned long long>(total()), static_cast<unsigned long long>(bytes),
              static_cast<unsigned long long>(failed));
  if (failed != 0) rc = kExitFail;
  if (udp_echo) {
    std::printf("%s: udp: %llu datagrams (%llu bytes) received, %llu echoed, %llu echo errors\n", kProg,
                static_cast<unsigned long long>(udp_echo->received()),
                static_cast<unsigned long long>(udp_echo->bytes()),
                static_cast<unsigned long long>(udp_echo->echoed()),
                static_cast<unsigned long long>(udp_echo->send_errors()));
    (void)sock->close();
  }
  std::fflush(stdout);
  return rc;
}

int run(const Args& a) {
  if (a.stack.stacks > 1) return run_node(a);
  xk::apps::AppStack stack(kProg, a.stack, a.idle());
  xk::EventLoop& loop = stack.loop();
  std::string where = xk::apps::describe_stack(stack.graph());
  stack.wait_for_link(a.link_wait_s);

  std::optional<xk::tcp::TcpListener> listener;
  std::optional<xk::apps::TcpEchoServer> tcp_echo;
  std::optional<xk::udp::UdpSocket> sock;
  std::optional<xk::apps::UdpEchoServer> udp_echo;
  if (a.tcp) {
    auto& tcp = stack.require<xk::tcp::TcpProtocol>("tcp0");
    auto l = tcp.listen(xk::IpAddr{}, xk::Port{a.tcp_port}, 128, a.group);
    if (!l) {
      std::fprintf(stderr, "%s: cannot listen on tcp port %u: %s\n", kProg, a.tcp_port, xk::to_string(l.error()));
      return kExitFail;
    }
    listener.emplace(std::move(*l));
    tcp_echo.emplace(kProg, *listener, loop, a.count);
    loop.add(*tcp_echo);
  }
  if (a.udp) {
    auto& udp = stack.require<xk::udp::UdpProtocol>("udp0");
    xk::udp::SocketOptions so;
    so.rcvbuf_bytes = 16u << 20;
    so.rcvbuf_datagrams = 4096;
    sock.emplace(udp.socket(so));
    if (xk::Status s = sock->bind(xk::IpAddr{}, xk::Port{a.udp_port}); !s) {
      std::fprintf(stderr, "%s: cannot bind udp port %u: %s\n", kProg, a.udp_port, xk::to_string(s.error()));
      if (tcp_echo) loop.remove(*tcp_echo);
      return kExitFail;
    }
    udp_echo.emplace(kProg, *sock, loop, a.tcp ? 0 : a.count, false);
    loop.add(*udp_echo);
  }
  std::printf("%s: %s:", kProg, where.c_str());
  if (a.tcp) std::printf(" tcp port %u%s", a.tcp_port, a.group ? " (group)" : "");
  if (a.udp) std::printf(" udp port %u", a.udp_port);
  std::printf(": ready\n");
  std::fflush(stdout);
  loop.run();

  int rc = kExitOk;
  if (tcp_echo) {
    loop.remove(*tcp_echo);
    std::printf("%s: tcp: %llu connections, %llu bytes echoed, %llu failed\n", kProg,
                static_cast<unsigned long long>(tcp_echo->connections()),
                static_cast<unsigned long long>(tcp_echo->bytes()),
                static_cast<unsigned long long>(tcp_echo->failures()));
    if (tcp_echo->failures() != 0) rc = kExitFail;
    (void)listener->close();
    xk::apps::finish_handshakes(loop, stack.require<xk::tcp::TcpProtocol>("tcp0"));
  }
  if (udp_echo) {
    loop.remove(*udp_echo);
    std::printf("%s: udp: %llu datagrams (%llu bytes) received, %llu echoed, %llu echo errors\n", kProg,
                static_cast<unsigned long long>(udp_echo->received()),
                static_cast<unsigned long long>(udp_echo->bytes()),
                static_cast<unsigned long long>(udp_echo->echoed()),
                static_cast<unsigned long long>(udp_echo->send_errors()));
    (void)sock->close();
  }
  stack.report_signal();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  return xk::apps::app_main(kProg, [&] { args = parse_args(argc, argv); }, [&] { return run(args); });
}
