// The capture micro-protocol: frames crossing it in both directions land in a
// pcap file, read back here with libpcap and, as an independent parser, with
// tshark (which scripts/test installs).
#include <gtest/gtest.h>

#include <pcap/pcap.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "doubles.hpp"
#include "xk/event_loop.hpp"
#include "xk/protocols/capture.hpp"

namespace xk {
namespace {

using capture::CaptureConfig;
using capture::CaptureProtocol;
using capture::LinkType;

std::vector<std::byte> from_hex(std::string_view hex) {
  std::vector<std::byte> v;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    v.push_back(static_cast<std::byte>(std::stoul(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return v;
}

// Produced by scapy 2.5.0 (/usr/bin/python3):
//   raw(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")/
//       IP(src="192.0.2.1", dst="192.0.2.10", id=1)/UDP(sport=1234, dport=5678)/b"hello").hex()
const char* kEtherUdp =
    "020000000002020000000001080045000021000100004011f6bfc0000201c000020a04d2162e000d1cf668656c6c6f";
// The same frame from the IP header on.
const char* kIpUdp = "45000021000100004011f6bfc0000201c000020a04d2162e000d1cf668656c6c6f";

using test::FakeLink;

using test::App;

std::string temp_file(const std::string& stem) {
  return (std::filesystem::temp_directory_path() /
          ("xk_capture_" + stem + "_" + std::to_string(::getpid()) + ".pcap"))
      .string();
}

struct Record {
  std::int64_t sec;
  std::int64_t nsec;
  std::uint32_t len;
  std::vector<std::byte> bytes;
};

std::vector<Record> read_back(const std::string& path, int* linktype) {
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, err);
  EXPECT_NE(p, nullptr) << err;
  std::vector<Record> out;
  if (p == nullptr) return out;
  *linktype = pcap_datalink(p);
  pcap_pkthdr* h = nullptr;
  const u_char* data = nullptr;
  while (pcap_next_ex(p, &h, &data) == 1) {
    const auto* b = reinterpret_cast<const std::byte*>(data);
    out.push_back(Record{h->ts.tv_sec, h->ts.tv_usec, h->len, std::vector<std::byte>(b, b + h->caplen)});
  }
  pcap_close(p);
  return out;
}

// Runs a command and returns its standard output.
std::string run(const std::string& cmd) {
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f) != nullptr) out += buf;
  ::pclose(f);
  return out;
}

bool have_tshark() { return std::system("command -v tshark >/dev/null 2>&1") == 0; }

TEST(Capture, BothDirectionsAreWrittenAndReadBack) {
  std::string path = temp_file("ether");
  ManualClock clock(Time(std::chrono::seconds(1'700'000'000)));
  FakeLink link("net0");
  App app;
  {
    CaptureConfig c;
    c.file = path;
    CaptureProtocol c0("c0", link, c, &clock);
    Participants none;
    Result<SessionRef> s = c0.open(app, none);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(c0.open_enable(app, none).ok());
    ASSERT_TRUE((*s)->push(Msg::copy_of(from_hex(kEtherUdp))).ok());
    clock.advance(std::chrono::nanoseconds(1'500'000'123));
    ASSERT_TRUE(link.deliver(Msg::copy_of(from_hex(kEtherUdp))).ok());
    EXPECT_EQ(link.sent.size(), 1u);
    EXPECT_EQ(app.received.size(), 1u);
    EXPECT_EQ(c0.counters().value("tx_captured"), 1u);
    EXPECT_EQ(c0.counters().value("rx_captured"), 1u);
    // Flushed per record: readable while the capture is still open.
    int lt = 0;
    EXPECT_EQ(read_back(path, &lt).size(), 2u);
  }
  int linktype = 0;
  std::vector<Record> recs = read_back(path, &linktype);
  EXPECT_EQ(linktype, DLT_EN10MB);
  ASSERT_EQ(recs.size(), 2u);
  for (const Record& r : recs) {
    EXPECT_EQ(r.bytes, from_hex(kEtherUdp));
    EXPECT_EQ(r.len, r.bytes.size());
  }
  EXPECT_EQ(recs[0].sec, 1'700'000'000);
  EXPECT_EQ(recs[0].nsec, 0);
  EXPECT_EQ(recs[1].sec, 1'700'000'001);
  EXPECT_EQ(recs[1].nsec, 500'000'123);

  ASSERT_TRUE(have_tshark()) << "tshark is needed to check the capture (apt-get install tshark)";
  std::string protocols = run("tshark -n -r " + path + " -T fields -e frame.protocols 2>/dev/null");
  EXPECT_EQ(protocols, "eth:ethertype:ip:udp:data\neth:ethertype:ip:udp:data\n");
  EXPECT_EQ(run("tshark -n -r " + path + " -Y _ws.malformed 2>/dev/null"), "") << "no malformed frames";
  std::filesystem::remove(path);
}

TEST(Capture, RawLinkTypeAndSnaplen) {
  std::string path = temp_file("raw");
  FakeLink link("net0");
  App app;
  {
    CaptureConfig c;
    c.file = path;
    c.linktype = LinkType::raw;
    c.snaplen = 30;
    c.dir = capture::Direction::tx;
    CaptureProtocol c0("c0", link, c);
    Participants none;
    Result<SessionRef> s = c0.open(app, none);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(c0.open_enable(app, none).ok());
    ASSERT_TRUE((*s)->push(Msg::copy_of(from_hex(kIpUdp))).ok());
    ASSERT_TRUE(link.deliver(Msg::copy_of(from_hex(kIpUdp))).ok());
    EXPECT_EQ(c0.counters().value("rx_captured"), 0u) << "dir=tx";
  }
  int linktype = 0;
  std::vector<Record> recs = read_back(path, &linktype);
  EXPECT_EQ(linktype, DLT_RAW);
  ASSERT_EQ(recs.size(), 1u);
  std::vector<std::byte> full = from_hex(kIpUdp);
  EXPECT_EQ(recs[0].len, full.size());
  EXPECT_EQ(recs[0].bytes, std::vector<std::byte>(full.begin(), full.begin() + 30));
  EXPECT_GT(recs[0].sec, 1'600'000'000) << "wall clock";
  ASSERT_TRUE(have_tshark());
  EXPECT_EQ(run("tshark -n -r " + path + " -T fields -e ip.src 2>/dev/null"), "192.0.2.1\n");
  std::filesystem::remove(path);
}

TEST(CaptureGraph, OptionsAndErrors) {
  std::string path = temp_file("graph");
  ManualClock clock;
  EventLoop loop(clock);
  Registry reg;
  reg.add(KindSpec("fakelink", "test link").with_factory([](const BuildArgs&) -> std::unique_ptr<Protocol> {
    return std::make_unique<FakeLink>("net0");
  }));
  capture::register_capture(reg);
  {
    Graph g = Graph::build("fakelink net0\ncapture c0 below=net0 file=\"" + path +
                               "\" linktype=raw snaplen=128 flush=off clock=loop\n",
                           reg, &loop);
    auto* c0 = g.find_as<CaptureProtocol>("c0");
    ASSERT_NE(c0, nullptr);
    EXPECT_EQ(c0->config().snaplen, 128u);
    EXPECT_FALSE(c0->config().flush_each);
  }
  EXPECT_TRUE(std::filesystem::exists(path));
  std::filesystem::remove(path);
  EXPECT_THROW((void)Graph::build("fakelink net0\ncapture c0 below=net0\n", reg), GraphError);
  EXPECT_THROW((void)Graph::build("fakelink net0\ncapture c0 below=net0 file=/nonexistent/dir/x.pcap\n", reg),
               GraphError);
  EXPECT_THROW((void)Graph::build("fakelink net0\ncapture c0 below=net0 file=" + path + " clock=loop\n", reg),
               GraphError)
      << "clock=loop needs a loop";
}

}  // namespace
}  // namespace xk

