// libFuzzer harness: filterd's user rules (pcap filter syntax, compiled with
// libpcap) and the filter engine that runs them on frames. The input:
//
//   n (1 byte, 0..7) rules: priority (1 byte, signed), length (2), expression
//   then frames to the end: length (2), bytes
//
// The engine shares an IPv6 address beside its IPv4 one and holds an exact
// flow of each family, a listener and a listen group, so a frame of either
// family may stop before the rules. Checked, beyond "no crash, no leak":
//   - an expression with a NUL byte is refused (libpcap would see only the
//     part before it, while the engine would list the whole);
//   - a frame steered by a rule (rule_hit) goes where the first rule, by
//     priority and then insertion, whose program accepts it says -- the
//     programs compiled again here with libpcap;
//   - removing every rule leaves none.
#include <pcap/pcap.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "xk/clock.hpp"
#include "xk/filterd/filter.hpp"

namespace {

using xk::filterd::Target;

struct PcapClose {
  void operator()(pcap_t* p) const noexcept { pcap_close(p); }
};
struct ProgramFree {
  void operator()(bpf_program* p) const noexcept {
    pcap_freecode(p);
    delete p;
  }
};

struct Rule {
  std::string expression;
  int priority = 0;
  Target target;
  std::unique_ptr<bpf_program, ProgramFree> program;
};

std::uint16_t u16(std::span<const std::uint8_t>& in) {
  if (in.size() < 2) {
    in = {};
    return 0;
  }
  std::uint16_t v = static_cast<std::uint16_t>(in[0] | (in[1] << 8));
  in = in.subspan(2);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return -1;
  std::span<const std::uint8_t> in(data, size);
  if (in.empty()) return 0;

  xk::ManualClock clock{xk::Time{} + std::chrono::seconds(1000)};
  xk::filterd::FilterConfig fc;
  fc.shared_ip = xk::Ipv4Addr{0xC000020A};  // 192.0.2.10
  fc.shared_ip6 = *xk::parse_ip("2001:db8::10");
  fc.link_local6 = *xk::parse_ip("fe80::a");
  fc.fragment_max_held_frames = 16;
  xk::filterd::FilterEngine engine(fc, clock);
  using xk::filterd::Proto;
  if (!engine.add_flow({Proto::tcp, xk::Ipv4Addr{0xC6336407}, 40000, 80}, Target{1, 0}).ok()) std::abort();
  if (!engine.listen(Proto::tcp, 22, Target{2, 0}).ok()) std::abort();
  if (!engine.add_flow({Proto::tcp, *xk::parse_ip("2001:db8:1::7"), 40000, 80}, Target{3, 0}).ok()) std::abort();
  if (!engine.join_group(Proto::udp, 53, Target{2, 1}).ok()) std::abort();
  if (!engine.join_group(Proto::udp, 53, Target{3, 0}).ok()) std::abort();

  std::unique_ptr<pcap_t, PcapClose> dead(pcap_open_dead(DLT_EN10MB, 65535));
  if (!dead) std::abort();
  std::vector<Rule> rules;  // as the engine should order them
  std::vector<xk::filterd::RuleId> ids;
  const std::size_t n = in[0] % 8;
  in = in.subspan(1);
  for (std::size_t i = 0; i < n && !in.empty(); ++i) {
    const int priority = static_cast<std::int8_t>(in[0]);
    in = in.subspan(1);
    const std::size_t len = std::min<std::size_t>(u16(in) % 1025, in.size());
    std::string expr(reinterpret_cast<const char*>(in.data()), len);
    in = in.subspan(len);
    const Target target{static_cast<xk::filterd::NodeId>(1 + i % 3), static_cast<std::uint16_t>(i % 2)};
    xk::filterd::RuleResult r = engine.add_rule(expr, target, priority);
    if (expr.find('\0') != std::string::npos) {
      if (r.ok()) std::abort();  // compiled a prefix of what it was given
      continue;
    }
    auto program = std::unique_ptr<bpf_program, ProgramFree>(new bpf_program{});
    bool compiles = pcap_compile(dead.get(), program.get(), expr.c_str(), 1, PCAP_NETMASK_UNKNOWN) == 0;
    if (compiles != r.ok()) std::abort();  // the engine and libpcap disagree on the expression
    if (!r.ok()) {
      if (r.error.empty()) std::abort();  // a refusal says why
      continue;
    }
    ids.push_back(r.id);
    auto at = std::find_if(rules.begin(), rules.end(), [&](const Rule& x) { return x.priority < priority; });
    rules.insert(at, Rule{expr, priority, target, std::move(program)});
  }
  if (engine.rule_count() != rules.size()) std::abort();

  for (int frames = 0; !in.empty() && frames < 64; ++frames) {
    const std::size_t len = std::min<std::size_t>(u16(in), in.size());
    std::span<const std::byte> frame(reinterpret_cast<const std::byte*>(in.data()), len);
    in = in.subspan(len);
    xk::filterd::Decision d = engine.classify(frame);
    if (d.reason == xk::filterd::Reason::rule_hit) {
      pcap_pkthdr hdr{};
      hdr.caplen = hdr.len = static_cast<bpf_u_int32>(frame.size());
      const Rule* first = nullptr;
      for (const Rule& r : rules) {
        if (pcap_offline_filter(r.program.get(), &hdr, reinterpret_cast<const u_char*>(frame.data())) != 0) {
          first = &r;
          break;
        }
      }
      if (first == nullptr || !(first->target == d.target) || d.action != xk::filterd::Action::to_node) std::abort();
    }
    (void)engine.take_released();
    (void)engine.egress_check(frame, static_cast<xk::filterd::NodeId>(1 + frames % 3));
    clock.advance(std::chrono::seconds(frames % 4 == 3 ? 31 : 0));  // now and then, fragments time out
  }
  engine.expire();
  for (xk::filterd::RuleId id : ids) {
    if (!engine.remove_rule(id).ok()) std::abort();
  }
  if (engine.rule_count() != 0) std::abort();
  return 0;
}
