#include "xk/protocols/capture.hpp"

#include <pcap/pcap.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "xk/event_loop.hpp"

namespace xk::capture {

void CaptureProtocol::PcapCloser::operator()(pcap* p) const noexcept { pcap_close(p); }
void CaptureProtocol::DumperCloser::operator()(pcap_dumper* d) const noexcept { pcap_dump_close(d); }

CaptureProtocol::CaptureProtocol(std::string name, Protocol& below, CaptureConfig config, const Clock* clock)
    : PassThrough(std::move(name), "capture", below),
      config_(std::move(config)),
      clock_(clock),
      tx_captured_(counters().add("tx_captured", "messages going down written to the file")),
      rx_captured_(counters().add("rx_captured", "messages going up written to the file")),
      write_errors_(counters().add("write_errors", "flushes that failed")) {
  if (config_.snaplen == 0) throw std::invalid_argument("capture: snaplen must be > 0");
  int dlt = config_.linktype == LinkType::ether ? DLT_EN10MB : DLT_RAW;
  pcap_.reset(pcap_open_dead_with_tstamp_precision(dlt, static_cast<int>(config_.snaplen),
                                                   PCAP_TSTAMP_PRECISION_NANO));
  if (!pcap_) throw std::runtime_error("capture: pcap_open_dead failed");
  dumper_.reset(pcap_dump_open(pcap_.get(), config_.file.c_str()));
  if (!dumper_) {
    throw std::runtime_error("capture: cannot write '" + config_.file + "': " + pcap_geterr(pcap_.get()));
  }
  scratch_.resize(config_.snaplen);
}

CaptureProtocol::~CaptureProtocol() {
  // Closing the dumper flushes it; the pcap handle goes after it.
  dumper_.reset();
  pcap_.reset();
}

void CaptureProtocol::flush() {
  if (dumper_ && pcap_dump_flush(dumper_.get()) != 0) ++write_errors_;
}

void CaptureProtocol::record(const Msg& msg, Counter& count) {
  std::int64_t ns = 0;
  if (clock_ != nullptr) {
    ns = clock_->now().time_since_epoch().count();
  } else {
    ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
             .count();
  }
  std::size_t caplen = std::min<std::size_t>(msg.size(), config_.snaplen);
  (void)msg.copy_out(0, std::span(scratch_).first(caplen));
  pcap_pkthdr hdr{};
  // With nanosecond precision the "usec" field carries nanoseconds.
  hdr.ts.tv_sec = static_cast<decltype(hdr.ts.tv_sec)>(ns / 1'000'000'000);
  hdr.ts.tv_usec = static_cast<decltype(hdr.ts.tv_usec)>(ns % 1'000'000'000);
  if (ns < 0 && hdr.ts.tv_usec != 0) {
    hdr.ts.tv_sec -= 1;
    hdr.ts.tv_usec += 1'000'000'000;
  }
  hdr.caplen = static_cast<bpf_u_int32>(caplen);
  hdr.len = static_cast<bpf_u_int32>(msg.size());
  pcap_dump(reinterpret_cast<u_char*>(dumper_.get()), &hdr, reinterpret_cast<const u_char*>(scratch_.data()));
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
