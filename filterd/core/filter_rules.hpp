#pragma once
// User rules: pcap filter expressions compiled by libpcap for Ethernet frames
// and run with pcap_offline_filter (libpcap's BPF interpreter). Private to
// the engine; pcap.h stays out of the public header.

#include <pcap/pcap.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "xk/filterd/filter.hpp"

namespace xk::filterd {

class RuleTable {
 public:
  // Opens libpcap's dead handle the compiler needs; throws std::runtime_error
  // when libpcap cannot (configuration time).
  RuleTable();
  RuleTable(const RuleTable&) = delete;
  RuleTable& operator=(const RuleTable&) = delete;

  RuleResult add(std::string_view expression, Target target, int priority);
  Status remove(RuleId id) noexcept;
  void remove_node(NodeId node);
  std::vector<RuleInfo> list() const;
  std::size_t size() const noexcept { return rules_.size(); }
  bool empty() const noexcept { return rules_.empty(); }

  // The target of the first rule that matches, in rule order; nullptr if none.
  const Target* match(Frame frame) const noexcept;

 private:
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
    RuleId id = 0;
    int priority = 0;
    Target target;
    std::unique_ptr<bpf_program, ProgramFree> program;
    std::string expression;
    mutable std::uint64_t hits = 0;  // counted by match(), which is const for the data path's callers
  };

  std::unique_ptr<pcap_t, PcapClose> pcap_;
  std::vector<Rule> rules_;  // in the order they are tried
  RuleId next_id_ = 1;
};

}  // namespace xk::filterd
