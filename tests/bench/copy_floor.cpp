// xk-copy-floor: the machine's floor for moving a byte stream between two
// programs through shared memory -- the reference every bulk figure of xk and
// Linux is given as a fraction of (docs/BENCHMARKS.md, "The copy floor").
//
//   xk-copy-floor [--slot BYTES] [--slots N] [--buffer BYTES] [--bytes N]
//                 [--runs N] [--cpus A,B]
//
// A writer thread copies its private buffer, piece by piece, into a ring of
// --slot-sized slots in shared memory (MAP_SHARED); a reader thread copies
// each slot out into a private buffer of its own. One flag per slot, on a
// cache line of its own, is the whole handshake: the writer waits for it to
// be clear, fills the slot and raises it; the reader waits for it, empties
// the slot and clears it. Those are the two copies the POSIX contract asks
// of any stack (write() in, read() out), with no protocol at all: at 64 KiB
// slots the cost per byte, at 1500-byte slots the cost per unit shows too.
// The threads are pinned to two CPUs (default 0 and 1, when there are two)
// and spin; each slot carries its sequence number, which the reader checks,
// so the figure is of a stream that arrived whole and in order.
//
// Prints one line per run and then the median:
//   RUN slot=B run=K bytes=N seconds=S gbps=G
//   RESULT slot=B slots=N buffer=B gbps=G gbps_min=A gbps_max=C runs=K

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

constexpr const char* kProg = "xk-copy-floor";

struct Args {
  std::size_t slot = 64 * 1024;
  std::size_t slots = 32;
  std::size_t buffer = 256 * 1024;  // each side's private buffer
  std::uint64_t bytes = 8ull << 30;
  int runs = 3;
  int cpu_a = -1, cpu_b = -1;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s [--slot BYTES] [--slots N] [--buffer BYTES] [--bytes N] [--runs N] [--cpus A,B]\n",
               kProg, why.c_str(), kProg);
  std::exit(2);
}

// 64k, 8m, 2g, or plain bytes.
std::uint64_t parse_size(std::string_view flag, const char* v) {
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  std::uint64_t mult = 1;
  if (end != nullptr && *end != '\0') {
    switch (*end) {
      case 'k': case 'K': mult = 1ull << 10; break;
      case 'm': case 'M': mult = 1ull << 20; break;
      case 'g': case 'G': mult = 1ull << 30; break;
      default: usage(std::string(flag) + ": not a size: " + v);
    }
    if (end[1] != '\0') usage(std::string(flag) + ": not a size: " + v);
  }
  if (end == v || n == 0) usage(std::string(flag) + ": not a positive size: " + v);
  return n * mult;
}

Args parse(int argc, char** argv) {
  Args a;
  if (std::thread::hardware_concurrency() >= 2) {
    a.cpu_a = 0;
    a.cpu_b = 1;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string_view f = argv[i];
    if (i + 1 >= argc) usage(std::string(f) + " needs a value");
    const char* v = argv[++i];
    if (f == "--slot") a.slot = parse_size(f, v);
    else if (f == "--slots") a.slots = parse_size(f, v);
    else if (f == "--buffer") a.buffer = parse_size(f, v);
    else if (f == "--bytes") a.bytes = parse_size(f, v);
    else if (f == "--runs") a.runs = static_cast<int>(parse_size(f, v));
    else if (f == "--cpus") {
      if (std::sscanf(v, "%d,%d", &a.cpu_a, &a.cpu_b) != 2 || a.cpu_a < 0 || a.cpu_b < 0) usage("--cpus: A,B");
    } else {
      usage("unknown option " + std::string(f));
    }
  }
  if (a.slot < sizeof(std::uint64_t)) usage("--slot: at least 8 bytes (the sequence number)");
  if (a.buffer < a.slot) a.buffer = a.slot;
  if (a.slots < 2) usage("--slots: at least 2");
  return a;
}

// One flag per slot, each on its own cache line (no false sharing between
// the writer's next slot and the reader's current one).
struct alignas(64) Flag {
  std::atomic<std::uint32_t> full{0};
};

struct Ring {
  std::byte* data = nullptr;
  std::size_t bytes = 0;
  Flag* flags = nullptr;
};

Ring map_ring(const Args& a) {
  Ring r;
  r.bytes = a.slot * a.slots;
  void* p = ::mmap(nullptr, r.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  void* f = ::mmap(nullptr, a.slots * sizeof(Flag), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED || f == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  r.data = static_cast<std::byte*>(p);
  r.flags = new (f) Flag[a.slots];
  std::memset(r.data, 0, r.bytes);  // every page in before the clock starts
  return r;
}

void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0) {
    std::fprintf(stderr, "%s: cannot pin to CPU %d; running unpinned\n", kProg, cpu);
  }
}

struct Run {
  double seconds = 0;
  bool intact = true;
};

Run one_run(const Args& a, Ring& ring, std::vector<std::byte>& src, std::vector<std::byte>& dst) {
  const std::uint64_t units = a.bytes / a.slot;
  const std::size_t pieces = a.buffer / a.slot;  // of the private buffers
  for (std::size_t i = 0; i < a.slots; ++i) ring.flags[i].full.store(0, std::memory_order_relaxed);
  std::atomic<int> ready{0};
  std::chrono::steady_clock::time_point start, end;
  Run run;

  std::thread reader([&] {
    pin(a.cpu_b);
    ready.fetch_add(1);
    while (ready.load() < 2) _mm_pause();
    for (std::uint64_t u = 0; u < units; ++u) {
      Flag& f = ring.flags[u % a.slots];
      while (f.full.load(std::memory_order_acquire) == 0) _mm_pause();
      const std::byte* slot = ring.data + (u % a.slots) * a.slot;
      std::memcpy(dst.data() + (u % pieces) * a.slot, slot, a.slot);
      std::uint64_t seq;
      std::memcpy(&seq, slot, sizeof seq);
      if (seq != u) run.intact = false;
      f.full.store(0, std::memory_order_release);
    }
    end = std::chrono::steady_clock::now();
  });

  pin(a.cpu_a);
  ready.fetch_add(1);
  while (ready.load() < 2) _mm_pause();
  start = std::chrono::steady_clock::now();
  for (std::uint64_t u = 0; u < units; ++u) {
    Flag& f = ring.flags[u % a.slots];
    while (f.full.load(std::memory_order_acquire) != 0) _mm_pause();
    std::byte* slot = ring.data + (u % a.slots) * a.slot;
    std::memcpy(slot, src.data() + (u % pieces) * a.slot, a.slot);
    std::memcpy(slot, &u, sizeof u);  // the sequence number, over the first 8 bytes
    f.full.store(1, std::memory_order_release);
  }
  reader.join();
  run.seconds = std::chrono::duration<double>(end - start).count();
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  Ring ring = map_ring(a);
  std::vector<std::byte> src(a.buffer), dst(a.buffer);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 131 + 7);
  std::vector<double> rates;
  const std::uint64_t moved = a.bytes / a.slot * a.slot;
  for (int k = 1; k <= a.runs; ++k) {
    const Run r = one_run(a, ring, src, dst);
    if (!r.intact) {
      std::fprintf(stderr, "%s: a slot arrived out of order: the handshake is broken\n", kProg);
      return 1;
    }
    const double gbps = r.seconds > 0 ? static_cast<double>(moved) * 8 / r.seconds / 1e9 : 0;
    rates.push_back(gbps);
    std::printf("RUN slot=%zu run=%d bytes=%llu seconds=%.6f gbps=%.3f\n", a.slot, k,
                static_cast<unsigned long long>(moved), r.seconds, gbps);
  }
  // The bytes past each slot's sequence number are the writer's buffer's.
  if (std::memcmp(dst.data() + 8, src.data() + 8, a.slot - 8) != 0) {
    std::fprintf(stderr, "%s: the reader's bytes differ from the writer's\n", kProg);
    return 1;
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  std::printf("RESULT slot=%zu slots=%zu buffer=%zu gbps=%.3f gbps_min=%.3f gbps_max=%.3f runs=%d cpus=%d,%d\n", a.slot,
              a.slots, a.buffer, sorted[(sorted.size() - 1) / 2], sorted.front(), sorted.back(), a.runs, a.cpu_a,
              a.cpu_b);
  return 0;
}
