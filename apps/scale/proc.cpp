// Processes of a run (proc.hpp).

#include "proc.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace xk::scale {

std::atomic<int> g_stop_signal{0};

namespace {
void on_signal(int sig) { g_stop_signal.store(sig); }
}  // namespace

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

Child::Child(std::string name, const std::vector<std::string>& argv, const std::string& log)
    : name_(std::move(name)), log_(log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw RunFailure{"cannot write " + log + ": " + std::strerror(errno)};
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    ::close(fd);
    throw RunFailure{"fork: " + std::string(std::strerror(e))};
  }
  if (pid == 0) {
    // The child: its own process group; TERM when xk-scale goes away (even by
    // SIGKILL), so no node outlives the runner.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    dup2(fd, 1);
    dup2(fd, 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    signal(SIGPIPE, SIG_DFL);
    execvp(args[0], args.data());
    dprintf(2, "xk-scale: cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  ::close(fd);
  setpgid(pid, pid);  // also from here: no race with a kill before the child's own setpgid
  pid_ = pid;
}

Child::~Child() {
  if (pid_ > 0 && !reaped_) stop(2000);
}

bool Child::running() {
  if (reaped_) return false;
  int st = 0;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == 0) return true;
  reaped_ = true;
  if (r < 0) {
    status_ = 255;
  } else if (WIFEXITED(st)) {
    status_ = WEXITSTATUS(st);
  } else if (WIFSIGNALED(st)) {
    status_ = 128 + WTERMSIG(st);
  }
  // Whatever the leader left in its group (an mpirun's ranks, ...) goes too.
  ::kill(-pid_, SIGKILL);
  return false;
}

std::string Child::describe_status() const {
  if (status_ > 128) return "was killed by signal " + std::to_string(status_ - 128) + " (" + strsignal(status_ - 128) + ")";
  return "exited with status " + std::to_string(status_);
}

bool Child::stop(int grace_ms) {
  if (running()) {
    ::kill(-pid_, SIGTERM);
    for (int waited = 0; waited < grace_ms && running(); waited += 20) sleep_ms(20);
    if (running()) kill_now();
  }
  return status_ == 0;
}

void Child::kill_now() {
  if (reaped_) return;
  ::kill(-pid_, SIGKILL);
  int st = 0;
  waitpid(pid_, &st, 0);
  reaped_ = true;
  status_ = 128 + SIGKILL;
}

std::string Child::log_text() const {
  std::ifstream in(log_);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Child::log_tail(int lines) const {
  std::string text = log_text();
  std::vector<std::string> all;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) all.push_back(l);
  std::string out;
  for (std::size_t i = all.size() > static_cast<std::size_t>(lines) ? all.size() - lines : 0; i < all.size(); ++i) {
    out += "    " + all[i] + "\n";
  }
  return out.empty() ? "    (the log is empty)\n" : out;
}

std::vector<std::string> Child::new_lines() {
  std::vector<std::string> out;
  std::ifstream in(log_, std::ios::binary);
  if (!in) return out;
  in.seekg(static_cast<std::streamoff>(read_offset_));
  std::ostringstream s;
  s << in.rdbuf();
  std::string chunk = s.str();
  read_offset_ += chunk.size();
  partial_ += chunk;
  std::size_t start = 0;
  for (std::size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    out.push_back(partial_.substr(start, nl - start));
  }
  partial_.erase(0, start);
  return out;
}

void wait_for_text(Child& c, std::string_view pattern, double seconds) {
  const double deadline = now_seconds() + seconds;
  for (;;) {
    if (c.log_text().find(pattern) != std::string::npos) return;
    if (g_stop_signal.load() != 0) throw RunFailure{"stopped by signal"};
    if (!c.running()) {
      throw RunFailure{c.name() + " " + c.describe_status() + " before saying '" + std::string(pattern) + "'; " +
                       c.log() + " ends:\n" + c.log_tail()};
    }
    if (now_seconds() > deadline) {
      throw RunFailure{c.name() + " did not say '" + std::string(pattern) + "' within " +
                       std::to_string(static_cast<int>(seconds)) + " s; " + c.log() + " ends:\n" + c.log_tail()};
    }
    sleep_ms(20);
  }
}

void run_command(const std::vector<std::string>& argv, const std::string& log, double timeout_s) {
  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
  {
    std::ofstream l(log, std::ios::app);
    l << "$ " << line << "\n";
  }
  Child c(argv[0], argv, log);
  const double deadline = now_seconds() + timeout_s;
  while (c.running()) {
    if (now_seconds() > deadline) {
      c.kill_now();
      throw RunFailure{"'" + line + "' did not finish within " + std::to_string(static_cast<int>(timeout_s)) + " s"};
    }
    sleep_ms(10);
  }
  if (c.status() != 0) throw RunFailure{"'" + line + "' " + c.describe_status() + ":\n" + c.log_tail(6)};
}

std::optional<double> process_cpu_seconds(pid_t pid) {
  const std::string base = "/proc/" + std::to_string(pid);
  if (DIR* d = opendir((base + "/task").c_str())) {
    double ns = 0;
    bool any = false;
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream in(base + "/task/" + e->d_name + "/schedstat");
      double run_ns = 0;
      if (in >> run_ns) {
        ns += run_ns;
        any = true;
      }
    }
    closedir(d);
    if (any) return ns / 1e9;
  }
  std::ifstream in(base + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  // Fields after the command name (which may hold spaces): state is field 3,
  // utime 14, stime 15.
  auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 2));
  std::string w;
  double utime = 0, stime = 0;
  for (int field = 3; field <= 15 && rest >> w; ++field) {
    if (field == 14) utime = std::strtod(w.c_str(), nullptr);
    if (field == 15) stime = std::strtod(w.c_str(), nullptr);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::vector<Fields> result_lines(std::string_view text, std::string_view role) {
  std::vector<Fields> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    std::size_t at = line.find("RESULT ");
    if (at == std::string_view::npos) continue;
    Fields f;
    std::string_view rest = line.substr(at + 7);
    while (!rest.empty()) {
      std::size_t sp = rest.find(' ');
      std::string_view word = rest.substr(0, sp);
      rest = sp == std::string_view::npos ? std::string_view{} : rest.substr(sp + 1);
      if (auto eq = word.find('='); eq != std::string_view::npos && eq > 0) {
        f.emplace(std::string(word.substr(0, eq)), std::string(word.substr(eq + 1)));
      }
    }
    if (auto r = f.find("role"); r != f.end() && r->second == role) out.push_back(std::move(f));
  }
  return out;
}

double number(const Fields& f, std::string_view key, std::string_view who) {
  auto it = f.find(key);
  if (it == f.end()) throw RunFailure{std::string(who) + ": its RESULT line has no " + std::string(key) + "="};
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0') {
    throw RunFailure{std::string(who) + ": " + std::string(key) + "='" + it->second + "' is not a number"};
  }
  return v;
}

}  // namespace xk::scale
