// The EAL, once per process. DPDK's environment is process-global by nature
// (one rte_eal_init per process, ever), so this is the one place in the driver
// that keeps global state.
#include <rte_alarm.h>
#include <rte_dev.h>
#include <rte_interrupts.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <semaphore>
#include <stdexcept>
#include <string>
#include <vector>

#include "xk/drivers/dpdk.hpp"
#include "xk/own_fds.hpp"

namespace xk::drivers::dpdk {
namespace {

// The process-wide getopt variables (glibc's parser keeps more of its own,
// which only optind = 0 resets: see the preload's start, apps/preload).
struct GetoptState {
  int ind, err, opt;
  char* arg;
  static GetoptState save() noexcept { return {optind, opterr, optopt, optarg}; }
  void restore() const noexcept {
    optind = ind;
    opterr = err;
    optopt = opt;
    optarg = arg;
  }
};

struct EalState {
  std::mutex mutex;
  bool ready = false;
  std::string failure;  // non-empty: init failed, and the EAL cannot be retried
  std::vector<std::string> args;
  // rte_eal_init keeps pointers into argv (e.g. for --vdev), so the strings
  // and the array live as long as the process.
  std::vector<char*> argv;
};

EalState& state() {
  static EalState* s = new EalState;  // never destroyed: DPDK may read argv until exit
  return *s;
}

std::atomic<bool> g_ready{false};

// "0@(0,1,5)": the main lcore may run on every CPU this thread may run on, so
// initializing the EAL does not pin the application's threads to one core.
std::string lcores_arg() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::string cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &set)) continue;
      if (!cpus.empty()) cpus += ',';
      cpus += std::to_string(cpu);
    }
  }
  if (cpus.empty()) cpus = "0";
  return "--lcores=0@(" + cpus + ")";
}

void remove_runtime_dir() {
  // Empty with --no-shconf; leaves nothing behind in /var/run/dpdk.
  if (const char* dir = rte_eal_get_runtime_dir(); dir != nullptr && *dir != '\0') ::rmdir(dir);
}

}  // namespace

void probe_vdev(const std::string& devargs) {
  if (!eal_ready()) throw std::runtime_error("dpdk: probe of '" + devargs + "' before the EAL is up");
  int rc = 0;
  on_interrupt_thread([&] { rc = rte_dev_probe(devargs.c_str()); });
  if (rc != 0) throw std::runtime_error("dpdk: cannot probe '" + devargs + "': " + rte_strerror(-rc));
}

// An EAL alarm runs its callback on the interrupt thread: the shortest one
// is the way in.
void on_interrupt_thread(const std::function<void()>& fn) {
  if (!eal_ready() || rte_thread_is_intr() != 0) {
    fn();
    return;
  }
  struct Call {
    const std::function<void()>& fn;
    std::exception_ptr error;
    std::binary_semaphore done{0};
  } call{fn, nullptr};
  auto trampoline = [](void* arg) {
    auto* c = static_cast<Call*>(arg);
    try {
      c->fn();
    } catch (...) {
      c->error = std::current_exception();
    }
    c->done.release();
  };
  if (const int rc = rte_eal_alarm_set(1, trampoline, &call); rc != 0) {
    throw std::runtime_error(std::string("dpdk: cannot reach the interrupt thread: ") + rte_strerror(-rc));
  }
  call.done.acquire();
  if (call.error) std::rethrow_exception(call.error);
}

std::vector<std::string> split_args(const std::string& text) {
  std::vector<std::string> out;
  std::string word;
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\n') {
      if (!word.empty()) out.push_back(std::move(word));
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) out.push_back(std::move(word));
  return out;
}

void ensure_eal(const EalConfig& config) {
  if (g_ready.load(std::memory_order_acquire)) return;
  EalState& s = state();
  std::lock_guard lock(s.mutex);
  if (s.ready) return;
  if (!s.failure.empty()) throw std::runtime_error(s.failure);

  static std::atomic<unsigned> counter{0};
  std::vector<std::string> args = {"xk"};
  args.push_back(lcores_arg());
  if (config.no_huge) args.push_back("--no-huge");
  args.push_back("-m");
  args.push_back(std::to_string(config.memory_mb));
  if (config.no_pci) args.push_back("--no-pci");
  args.push_back("--no-shconf");
  args.push_back("--no-telemetry");
  args.push_back("--file-prefix=xk-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  args.push_back("--log-level=" + config.log_level);
  args.insert(args.end(), config.extra_args.begin(), config.extra_args.end());

  s.args = args;
  s.argv.clear();
  for (std::string& a : s.args) s.argv.push_back(a.data());
  s.argv.push_back(nullptr);

  // The threads the EAL makes -- its interrupt thread, and the ports'
  // probes run there -- inherit the mask in force here: every signal
  // blocked, as the stacks' own threads do. Otherwise the kernel may hand a
  // process-directed signal (an nginx told SIGTERM to stop) to the
  // interrupt thread, where the program's handler runs on a thread the
  // program does not know, and its own thread, asleep in poll, never
  // learns of it.
  sigset_t all;
  sigset_t before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  // The EAL parses its arguments with the process's getopt and leaves it
  // set to 1 and its own option string: the program's getopt state comes
  // back as it was (a program that parsed its options before it made the
  // stack still finds its operands at argv[optind]).
  const GetoptState program = GetoptState::save();
  int rc = rte_eal_init(static_cast<int>(s.args.size()), s.argv.data());
  program.restore();
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (rc < 0) {
    if (rte_errno == EALREADY) {
      // The application initialized the EAL itself: use it as it is.
      s.ready = true;
      g_ready.store(true, std::memory_order_release);
      return;
    }
    std::string cmd;
    for (const std::string& a : s.args) cmd += (cmd.empty() ? "" : " ") + a;
    s.failure = "dpdk: EAL initialization failed: " + std::string(rte_strerror(rte_errno)) + " (args: " + cmd + ")";
    throw std::runtime_error(s.failure);
  }
  s.ready = true;
  std::atexit(remove_runtime_dir);
  // The interrupt thread is the library's: what it closes (a memif peer
  // gone) is DPDK's own (own_fds.hpp). Alarms run on that thread.
  (void)rte_eal_alarm_set(1, [](void*) { mark_library_thread(); }, nullptr);
  g_ready.store(true, std::memory_order_release);
}

bool eal_ready() noexcept { return g_ready.load(std::memory_order_acquire); }

std::vector<std::string> eal_args() {
  EalState& s = state();
  std::lock_guard lock(s.mutex);
  return s.ready ? s.args : std::vector<std::string>{};
}

}  // namespace xk::drivers::dpdk
