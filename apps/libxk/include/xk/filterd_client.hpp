#pragma once
// A node's side of filterd (docs/filterd.md): the control connection, and
// the PortAuthority that TCP and UDP ask for every port. libxk makes one when
// a stack is configured with a filterd socket (XK_FILTERD=/run/xk/filterd.sock
// or StackConfig::filterd): the node's graph then comes from filterd's HELLO
// reply -- a memif channel, the shared address, the ISN secret -- and the
// application's code is the same as standalone.
//
// The calls block for one control round trip; they happen at listen(),
// connect(), bind() and when a connection or listener is over, never per
// packet. One thread at a time (the stack's).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "xk/filterd/control.hpp"
#include "xk/port_authority.hpp"

namespace xk {

class FilterdClient final : public PortAuthority {
 public:
  // Connects and registers (HELLO). Throws std::runtime_error saying why not.
  static std::unique_ptr<FilterdClient> connect(const std::string& path, const std::string& name,
                                                std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~FilterdClient() override;  // BYE, then close
  FilterdClient(const FilterdClient&) = delete;
  FilterdClient& operator=(const FilterdClient&) = delete;

  const filterd::ctl::HelloReply& hello() const noexcept { return hello_; }
  // The node's graph: its memif channel to filterd, the shared address, the
  // ISN/SYN-cookie secret, and `tcp_opts` added to the tcp line. In central
  // mode (the HELLO reply says so) tcp sits on a relay layer instead of ip0:
  // the same sockets, carried by filterd's TCP (docs/filterd.md).
  std::string graph_spec(const std::string& tcp_opts = {}) const;

  // One request, its reply (an Error reply is a reply, not a failure);
  // timed_out or closed when filterd does not answer.
  Result<filterd::ctl::Message> request(filterd::ctl::Body body);

  Result<std::uint16_t> claim_listen(std::uint8_t proto, std::uint16_t port, bool group) override;
  void release_listen(std::uint8_t proto, std::uint16_t port) noexcept override;
  Result<std::uint16_t> claim_connect(std::uint8_t proto, std::uint16_t local_port, Ipv4Addr remote,
                                      std::uint16_t remote_port) override;
  void release_connect(std::uint8_t proto, std::uint16_t local_port, Ipv4Addr remote,
                       std::uint16_t remote_port) noexcept override;

 private:
  FilterdClient(int fd, std::chrono::milliseconds timeout) : fd_(fd), timeout_(timeout) {}
  Status send_all(const std::vector<std::byte>& bytes);

  int fd_;
  std::chrono::milliseconds timeout_;
  filterd::ctl::FrameReader reader_;
  std::uint32_t next_id_ = 1;
  filterd::ctl::HelloReply hello_;
};

}  // namespace xk
