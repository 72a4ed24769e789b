#include "filter_rules.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace xk::filterd {

// The largest frame the compiled programs look at; also what pcap_compile
// assumes for the captured length.
inline constexpr int kSnapLen = 65535;

RuleTable::RuleTable() : pcap_(pcap_open_dead(DLT_EN10MB, kSnapLen)) {
  if (!pcap_) throw std::runtime_error("filterd: pcap_open_dead failed");
}

RuleResult RuleTable::add(std::string_view expression, Target target, int priority) {
  // libpcap reads a C string: with a NUL inside, it would compile only the
  // part before it while the table lists the whole (found by tests/fuzz).
  if (expression.find('\0') != std::string_view::npos) {
    RuleResult r;
    r.error = "the expression contains a NUL byte";
    return r;
  }
  const std::string text(expression);
  std::unique_ptr<bpf_program, ProgramFree> program(new bpf_program{});
  if (pcap_compile(pcap_.get(), program.get(), text.c_str(), /*optimize=*/1, PCAP_NETMASK_UNKNOWN) != 0) {
    RuleResult r;
    r.error = pcap_geterr(pcap_.get());
    if (r.error.empty()) r.error = "pcap_compile failed";
    return r;  // pcap_freecode of the untouched, zeroed program is a no-op
  }
  if (next_id_ == 0) next_id_ = 1;  // 0 is never an id
  const RuleId id = next_id_++;
  // Higher priority first; a new rule goes after every rule of its priority.
  auto at = std::find_if(rules_.begin(), rules_.end(), [&](const Rule& r) { return r.priority < priority; });
  rules_.insert(at, Rule{id, priority, target, std::move(program), text});
  return RuleResult{id, {}};
}

Status RuleTable::remove(RuleId id) noexcept {
  auto it = std::find_if(rules_.begin(), rules_.end(), [&](const Rule& r) { return r.id == id; });
  if (it == rules_.end()) return Errc::not_found;
  rules_.erase(it);
  return {};
}

void RuleTable::remove_node(NodeId node) {
  std::erase_if(rules_, [&](const Rule& r) { return r.target.node == node; });
}

std::vector<RuleInfo> RuleTable::list() const {
  std::vector<RuleInfo> out;
  out.reserve(rules_.size());
  for (const Rule& r : rules_) out.push_back(RuleInfo{r.id, r.expression, r.target, r.priority, r.hits});
  return out;
}

const Target* RuleTable::match(Frame frame) const noexcept {
  if (rules_.empty()) return nullptr;
  pcap_pkthdr hdr{};
  hdr.caplen = static_cast<bpf_u_int32>(std::min<std::size_t>(frame.size(), kSnapLen));
  hdr.len = static_cast<bpf_u_int32>(frame.size());
  const auto* data = reinterpret_cast<const u_char*>(frame.data());
  for (const Rule& r : rules_) {
    if (pcap_offline_filter(r.program.get(), &hdr, data) != 0) {
      ++r.hits;
      return &r.target;
    }
  }
  return nullptr;
}

}  // namespace xk::filterd
