#include "xk/protocols/capture.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "xk/event_loop.hpp"

namespace xk::capture {
namespace {

// pcap-savefile(5): the magic number that says "nanosecond timestamps",
// written in our byte order (readers detect it), version 2.4.
constexpr std::uint32_t kMagicNanoseconds = 0xa1b23c4d;
constexpr std::uint32_t kLinktypeEthernet = 1;
constexpr std::uint32_t kLinktypeRaw = 101;  // the packet starts with its IP header

struct FileHeader {
  std::uint32_t magic;
  std::uint16_t version_major;
  std::uint16_t version_minor;
  std::int32_t thiszone;
  std::uint32_t sigfigs;
  std::uint32_t snaplen;
  std::uint32_t linktype;
};
struct RecordHeader {
  std::uint32_t ts_sec;
  std::uint32_t ts_nsec;
  std::uint32_t caplen;
  std::uint32_t len;
};
static_assert(sizeof(FileHeader) == 24 && sizeof(RecordHeader) == 16);

}  // namespace

CaptureProtocol::CaptureProtocol(std::string name, Protocol& below, CaptureConfig config, const Clock* clock)
    : PassThrough(std::move(name), "capture", below),
      config_(std::move(config)),
      clock_(clock),
      tx_captured_(counters().add("tx_captured", "messages going down written to the file")),
      rx_captured_(counters().add("rx_captured", "messages going up written to the file")),
      write_errors_(counters().add("write_errors", "writes or flushes that failed")) {
  if (config_.snaplen == 0) throw std::invalid_argument("capture: snaplen must be > 0");
  file_.reset(std::fopen(config_.file.c_str(), "wb"));
  if (!file_) throw std::runtime_error("capture: cannot write '" + config_.file + "': " + std::strerror(errno));
  const FileHeader h{kMagicNanoseconds, 2, 4, 0, 0, config_.snaplen,
                     config_.linktype == LinkType::ether ? kLinktypeEthernet : kLinktypeRaw};
  if (std::fwrite(&h, sizeof h, 1, file_.get()) != 1 || std::fflush(file_.get()) != 0) {
    throw std::runtime_error("capture: cannot write '" + config_.file + "': " + std::strerror(errno));
  }
  scratch_.resize(config_.snaplen);
}

CaptureProtocol::~CaptureProtocol() = default;  // closing the file flushes it

void CaptureProtocol::flush() {
  if (file_ && std::fflush(file_.get()) != 0) ++write_errors_;
}

void CaptureProtocol::write(const void* data, std::size_t n) {
  if (n > 0 && std::fwrite(data, n, 1, file_.get()) != 1) ++write_errors_;
}

void CaptureProtocol::record(const Msg& msg, Counter& count) {
  std::int64_t ns = 0;
  if (clock_ != nullptr) {
    ns = clock_->now().time_since_epoch().count();
  } else {
    ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
             .count();
  }
  std::int64_t sec = ns / 1'000'000'000;
  std::int64_t frac = ns % 1'000'000'000;
  if (frac < 0) {
    sec -= 1;
    frac += 1'000'000'000;
  }
  const std::size_t caplen = std::min<std::size_t>(msg.size(), config_.snaplen);
  (void)msg.copy_out(0, std::span(scratch_).first(caplen));
  const RecordHeader r{static_cast<std::uint32_t>(sec), static_cast<std::uint32_t>(frac),
                       static_cast<std::uint32_t>(caplen), static_cast<std::uint32_t>(msg.size())};
  write(&r, sizeof r);
  write(scratch_.data(), caplen);
  ++count;
  if (config_.flush_each) flush();
}

Status CaptureProtocol::on_tx(fault::PassSession& s, Msg msg) {
  if (config_.dir != Direction::rx) record(msg, tx_captured_);
  return s.send_down(std::move(msg));
}

Status CaptureProtocol::on_rx(fault::PassSession& s, Msg msg) {
  if (config_.dir != Direction::tx) record(msg, rx_captured_);
  return s.deliver_up(std::move(msg));
}

// ---- graph kind ---------------------------------------------------------

void register_capture(Registry& registry) {
  registry.add(KindSpec("capture", "pass-through that writes the messages crossing it to a pcap file")
                   .with_below(1, 1)
                   .with_option(OptionSpec::string("file", "pcap file to write").mandatory())
                   .with_option(OptionSpec::choice("linktype", {"ether", "raw"}, "ether: Ethernet frames; raw: IP packets")
                                    .defaults_to("ether"))
                   .with_option(OptionSpec::size("snaplen", 1, 262144, "bytes kept of each message").defaults_to("65535"))
                   .with_option(OptionSpec::boolean("flush", "flush after every record").defaults_to("on"))
                   .with_option(OptionSpec::choice("dir", {"both", "tx", "rx"}, "directions written").defaults_to("both"))
                   .with_option(OptionSpec::choice("clock", {"wall", "loop"}, "timestamps: wall clock or the event loop's clock")
                                    .defaults_to("wall"))
                   .with_factory([](const BuildArgs& args) -> std::unique_ptr<Protocol> {
                     const Options& o = args.options;
                     CaptureConfig c;
                     c.file = o.get_string("file");
                     c.linktype = o.get_string("linktype") == "raw" ? LinkType::raw : LinkType::ether;
                     c.snaplen = static_cast<std::uint32_t>(o.get_size("snaplen"));
                     c.flush_each = o.get_bool("flush");
                     const std::string& dir = o.get_string("dir");
                     c.dir = dir == "tx" ? Direction::tx : dir == "rx" ? Direction::rx : Direction::both;
                     const Clock* clock = nullptr;
                     if (o.get_string("clock") == "loop") {
                       if (args.loop == nullptr) throw std::invalid_argument("clock=loop needs an event loop");
                       clock = &args.loop->clock();
                     }
                     return std::make_unique<CaptureProtocol>(args.name, *args.below[0], std::move(c), clock);
                   }));
}

}  // namespace xk::capture
