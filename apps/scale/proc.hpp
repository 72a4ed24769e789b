#pragma once
// The processes one xk-scale run starts: each in a process group of its own
// (so a signal reaches `ip netns exec`'s and mpirun's children too), its
// stdout and stderr in a log file, and killed with SIGTERM if xk-scale dies
// (PR_SET_PDEATHSIG). xk-scale is single-threaded: it forks and polls.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xk::scale {

// Set by SIGINT/SIGTERM (the signal's number); every wait polls it.
extern std::atomic<int> g_stop_signal;
void install_signal_handlers();

// A run that must stop: its message names the process and the log to read.
struct RunFailure {
  std::string what;
};

class Child {
 public:
  // Starts argv[0] (searched in PATH) with stdout and stderr appended to `log`.
  Child(std::string name, const std::vector<std::string>& argv, const std::string& log);
  ~Child();  // kills (TERM, then KILL) and reaps a child still running
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  const std::string& name() const noexcept { return name_; }
  const std::string& log() const noexcept { return log_; }
  pid_t pid() const noexcept { return pid_; }
  bool running();  // reaps it when it has exited
  // Exit status (0..255), or 128 + signal; only once !running().
  int status() const noexcept { return status_; }
  std::string describe_status() const;
  // SIGTERM to the group, then SIGKILL after `grace_ms`; reaps. True if it
  // exited with status 0.
  bool stop(int grace_ms = 5000);
  void kill_now();
  // The log's text (the whole file: logs of a run are small).
  std::string log_text() const;
  // The last `lines` lines of the log, indented, for error messages.
  std::string log_tail(int lines = 12) const;
  // Lines appended to the log since the last call.
  std::vector<std::string> new_lines();

 private:
  std::string name_, log_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = -1;
  std::size_t read_offset_ = 0;
  std::string partial_;
};

// Waits (polling, 20 ms) until `pattern` appears in the child's log. Throws
// RunFailure if the child exits first, on timeout, or on SIGINT/SIGTERM.
void wait_for_text(Child& c, std::string_view pattern, double seconds);

// Runs a command to completion (setup: ip, ethtool), its output in `log`.
// Throws RunFailure on a non-zero exit.
void run_command(const std::vector<std::string>& argv, const std::string& log, double timeout_s = 30);

// CPU seconds (all threads) a live process has used: the sum of
// /proc/PID/task/*/schedstat (nanoseconds), or utime+stime of /proc/PID/stat
// (clock ticks) where schedstat is missing. nullopt if the process is gone.
std::optional<double> process_cpu_seconds(pid_t pid);

// Every `RESULT k=v ...` line of `text` whose role is `role` (also lines
// prefixed by mpirun's --tag-output). Keys are not checked: extra keys are
// fine, the caller asks for the ones it needs.
using Fields = std::map<std::string, std::string, std::less<>>;
std::vector<Fields> result_lines(std::string_view text, std::string_view role);
// A field as a number; throws RunFailure naming `who` if missing or bad.
double number(const Fields& f, std::string_view key, std::string_view who);

double now_seconds();  // steady clock
void sleep_ms(int ms);

}  // namespace xk::scale
