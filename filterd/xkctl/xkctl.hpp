#pragma once
// xkctl, filterd's administration tool (docs/xkctl.md): its argument
// parsing, its client for the control socket, and its output (aligned
// tables, or JSON). main.cpp only strings them together, so the parts are
// unit-tested without a daemon.

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "xk/filterd/control.hpp"

namespace xk::filterd::xkctl {

// Exit codes (docs/xkctl.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitRefused = 1;      // filterd answered the request with ERROR
inline constexpr int kExitUsage = 2;        // bad arguments
inline constexpr int kExitUnreachable = 3;  // no filterd on the socket, or it broke the protocol

inline constexpr const char* kDefaultControl = "/run/xk/filterd.sock";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Command { help, nodes, ports, flows, rules, counters, stats, rule_add, rule_del };

struct Options {
  Command command = Command::help;
  std::string control = kDefaultControl;
  bool json = false;
  std::uint16_t node = 0;  // flows: only this node's (0: all); rule add: the target
  std::uint16_t queue = 0;
  std::int16_t priority = 0;
  std::string expression;
  std::uint32_t rule_id = 0;
  std::uint32_t limit = 0;  // flows: show at most this many (0: all)
  std::chrono::milliseconds timeout{5000};
};

extern const char* const kUsage;

// Throws UsageError saying what is wrong.
Options parse_args(std::span<const std::string_view> args);

// ---- the client ------------------------------------------------------------------

// Cannot talk to filterd: no socket, refused, closed, timed out, or a reply
// that breaks the protocol.
struct Unreachable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// filterd answered ERROR.
struct Refused : std::runtime_error {
  Refused(ctl::ErrorCode c, const std::string& text)
      : std::runtime_error(std::string(ctl::to_string(c)) + ": " + text), code(c) {}
  ctl::ErrorCode code;
};

class Client {
 public:
  Client(const std::string& path, std::chrono::milliseconds timeout);  // throws Unreachable
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One request and its reply; throws Refused for ERROR, Unreachable for
  // anything but the expected reply type.
  ctl::Body request(ctl::Body body);

  // Whole lists, page after page. flows: at most `limit` (0: all).
  std::vector<ctl::NodeRecord> nodes();
  std::vector<ctl::PortRecord> ports();
  std::vector<ctl::NodeFlow> flows(std::uint16_t node, std::uint32_t limit, std::uint32_t& total);
  std::vector<ctl::RuleRecord> rules();
  std::vector<ctl::Counter> stats();

 private:
  int fd_ = -1;
  std::chrono::milliseconds timeout_;
  std::uint32_t next_id_ = 1;
  ctl::FrameReader reader_;
};

// ---- output --------------------------------------------------------------------------

// A table: a header row, then rows; columns padded to their widest cell,
// numbers (cells of digits) aligned right.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// A JSON string literal (RFC 8259: quote, backslash and control characters
// escaped; other UTF-8 as it is).
std::string json_string(std::string_view s);

std::string format_nodes(const std::vector<ctl::NodeRecord>& nodes, bool json);
std::string format_ports(const std::vector<ctl::PortRecord>& ports, bool json);
std::string format_flows(const std::vector<ctl::NodeFlow>& flows, std::uint32_t total, bool json);
std::string format_rules(const std::vector<ctl::RuleRecord>& rules, bool json);
// The filterd counters as STATS gives them ("owner.name"), flat.
std::string format_stats(const std::vector<ctl::Counter>& counters, bool json);
// The same grouped by owner, and each node's own counts.
std::string format_counters(const std::vector<ctl::Counter>& counters, const std::vector<ctl::NodeRecord>& nodes,
                            bool json);
std::string format_rule_added(std::uint32_t id, bool json);
std::string format_rule_deleted(std::uint32_t id, bool json);

// Runs the command: output to `out`, diagnostics to `err`; the exit code.
int run(const Options& options, std::string& out, std::string& err);

}  // namespace xk::filterd::xkctl
