#include "ratio.hpp"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>

namespace xk::bench {
namespace {

struct Figures {
  double real_ns = 0;
  double bytes_per_second = 0;
  double items_per_second = 0;
  std::map<std::string, double> counters;
};

// Prints as usual and keeps each run's figures for the ratio table.
class Recorder : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration && r.aggregate_name != "median") continue;
      Figures f;
      f.real_ns = r.GetAdjustedRealTime() * to_ns(r.time_unit);
      for (const auto& [name, c] : r.counters) {
        if (name == "bytes_per_second") f.bytes_per_second = c.value;
        else if (name == "items_per_second") f.items_per_second = c.value;
        else f.counters[name] = c.value;
      }
      // Repetitions: keep the median when there is one, else the last run.
      std::string name = r.run_name.str();
      if (r.run_type == Run::RT_Aggregate || figures.find(name) == figures.end() ||
          !has_median[name]) {
        figures[name] = f;
        if (r.run_type == Run::RT_Aggregate) has_median[name] = true;
      }
    }
  }
  static double to_ns(benchmark::TimeUnit u) {
    switch (u) {
      case benchmark::kNanosecond: return 1;
      case benchmark::kMicrosecond: return 1e3;
      case benchmark::kMillisecond: return 1e6;
      case benchmark::kSecond: return 1e9;
    }
    return 1;
  }
  std::map<std::string, Figures> figures;
  std::map<std::string, bool> has_median;
};

double metric_of(const Figures& f, const Ratio& r) {
  switch (r.metric) {
    case Metric::bytes_per_second: return f.bytes_per_second;
    case Metric::items_per_second: return f.items_per_second;
    case Metric::time_ns: return f.real_ns;
    case Metric::counter: {
      auto it = f.counters.find(r.counter);
      return it == f.counters.end() ? -1 : it->second;
    }
  }
  return 0;
}

}  // namespace

int run_with_ratios(int argc, char** argv, const std::vector<Ratio>& ratios) {
  benchmark::Initialize(&argc, argv);
  Recorder rec;
  benchmark::RunSpecifiedBenchmarks(&rec);
  benchmark::Shutdown();

  std::printf("\n%-58s %12s %12s %9s %8s  %s\n", "ratio", "ours", "reference", "ratio", "target",
              "verdict");
  for (const Ratio& r : ratios) {
    auto o = rec.figures.find(r.ours);
    if (o == rec.figures.end()) continue;  // filtered out by --benchmark_filter
    double ours = metric_of(o->second, r);
    bool lower_better = r.metric == Metric::time_ns || r.metric == Metric::counter;
    if (r.reference.empty()) {
      bool met = lower_better ? ours <= r.target : ours >= r.target;
      std::printf("%-58s %12.4g %12s %9s %8.4g  %s\n", r.label.c_str(), ours, "-", "-", r.target,
                  met ? "met" : "MISSED");
      continue;
    }
    auto ref = rec.figures.find(r.reference);
    if (ref == rec.figures.end()) continue;
    double reference = metric_of(ref->second, r);
    double ratio = lower_better ? reference / ours : ours / reference;
    std::printf("%-58s %12.4g %12.4g %8.2fx %7.2fx  %s\n", r.label.c_str(), ours, reference, ratio,
                r.target, ratio >= r.target ? "met" : "MISSED");
  }
  return 0;
}

}  // namespace xk::bench
