#pragma once
// Runs the registered Google Benchmarks and then prints, for each pair the
// program names, the ratio of our figure to a reference measured in the same
// run (and whether it meets the target). Benchmarks never assert on time: the
// ratio table is the result, recorded in docs/BENCHMARKS.md.

#include <string>
#include <vector>

namespace xk::bench {

enum class Metric {
  bytes_per_second,  // higher is better
  items_per_second,  // higher is better
  time_ns,           // real time per iteration, lower is better
  counter,           // a user counter (named in `counter`), lower is better
};

struct Ratio {
  std::string label;      // what the line means
  std::string ours;       // benchmark name (exact, as printed)
  std::string reference;  // benchmark name of the reference, or "" for an absolute target
  Metric metric = Metric::bytes_per_second;
  double target = 0;      // ours/reference >= target (for time/counter: ours <= target)
  std::string counter;    // for Metric::counter
};

// Initialize Google Benchmark with argc/argv, run, print the ratio table.
// Returns 0 (a missed target is reported, not a failure: see docs/BENCHMARKS.md).
int run_with_ratios(int argc, char** argv, const std::vector<Ratio>& ratios);

}  // namespace xk::bench
