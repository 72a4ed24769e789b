#pragma once
// capture: a pass-through that writes every message crossing its edge, in both
// directions, to a pcap file, for Wireshark/tshark:
//
//   capture c0 below=net0 file=/tmp/eth0.pcap              # Ethernet frames
//   capture c1 below=ip0  file=/tmp/ip.pcap linktype=raw   # bare IPv4 packets
//
// linktype=ether writes LINKTYPE_ETHERNET, linktype=raw LINKTYPE_RAW (the
// packet starts with its IP header). Records carry nanosecond timestamps: the
// wall clock (clock=wall), or the event loop's clock as it reads
// (clock=loop), which makes a run under a ManualClock reproducible. Each
// record is flushed to the file as it is written unless flush=off; the file is
// always flushed and closed with the protocol. The classic pcap format has no
// field for the direction, so dir=tx|rx can limit a capture to one.
//
// The file is written here, not through libpcap: the format is a 24-byte
// file header and a 16-byte header per record (pcap-savefile(5)), and a
// library that only wrote it would put libpcap under every program linking
// libxk.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "xk/clock.hpp"
#include "xk/graph.hpp"
#include "xk/protocols/passthrough.hpp"

namespace xk::capture {

enum class LinkType : std::uint8_t { ether, raw };
enum class Direction : std::uint8_t { both, tx, rx };

struct CaptureConfig {
  std::string file;
  LinkType linktype = LinkType::ether;
  std::uint32_t snaplen = 65535;
  bool flush_each = true;
  Direction dir = Direction::both;
};

class CaptureProtocol final : public fault::PassThrough {
 public:
  // `clock`: timestamps from this clock (must outlive us); null: wall clock.
  // Throws std::runtime_error if the file cannot be created.
  CaptureProtocol(std::string name, Protocol& below, CaptureConfig config, const Clock* clock = nullptr);
  ~CaptureProtocol() override;

  const CaptureConfig& config() const noexcept { return config_; }
  // Push what was written so far to the file.
  void flush();

 protected:
  Status on_tx(fault::PassSession& s, Msg msg) override;
  Status on_rx(fault::PassSession& s, Msg msg) override;

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const noexcept { (void)std::fclose(f); }
  };
  void record(const Msg& msg, Counter& count);
  void write(const void* data, std::size_t n);

  CaptureConfig config_;
  const Clock* clock_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::vector<std::byte> scratch_;
  Counter& tx_captured_;
  Counter& rx_captured_;
  Counter& write_errors_;
};

// Make the kind `capture` available to graph specs:
//   capture c0 below=X file=PATH [linktype=ether|raw] [snaplen=N] [flush=on|off]
//           [dir=both|tx|rx] [clock=wall|loop]
void register_capture(Registry& registry);

}  // namespace xk::capture
