#pragma once
// What xk-scale writes: scale.csv (a row per run), the summary table, and the
// plots (gnuplot script, data blocks, PNGs) in the results folder.

#include <cstdint>
#include <string>
#include <vector>

namespace xk::scale {

struct Row {
  std::string mode;  // steer | central
  bool csum = true;
  unsigned n = 0;
  unsigned repeat = 1;
  std::uint64_t bytes = 0;  // received in all (the peer's total)
  double seconds = 0;       // the peer's: first connection to last end
  double aggregate_gbps = 0;
  double aggregate_mbps = 0;  // MB/s (10^6 bytes), the paper's unit
  double per_node_mean = 0, per_node_min = 0, per_node_max = 0;  // Gbit/s, each transmitter's own
  double filterd_cpu_s = 0, nodes_cpu_s = 0, peer_cpu_s = 0;
  double filterd_s_per_gb = 0, nodes_s_per_gb = 0, peer_s_per_gb = 0;
  std::string launcher, remote;
  std::string node_link = "memif";  // how the nodes reach filterd: memif | shm | ethernet
  unsigned mtu = 1500;
  double wall_seconds = 0;  // the run, from the first process to the last exit
};

extern const char* const kCsvHeader;
std::string csv_line(const Row& r);
void write_csv(const std::string& path, const std::vector<Row>& rows);

// The median row (by aggregate throughput) of each (mode, csum, n), in the
// order the runs were made: what the table and the plots show when --repeat
// made several.
std::vector<Row> medians(const std::vector<Row>& rows);

// The table on stdout.
std::string summary_table(const std::vector<Row>& rows);

// Writes plot.dat and plot.gp into `dir` and runs gnuplot: aggregate.png,
// per_node.png, filterd_cpu.png. Returns "" or what went wrong (gnuplot
// missing or failing: the CSV is there anyway).
std::string write_plots(const std::string& dir, const std::vector<Row>& rows, const std::string& title);

}  // namespace xk::scale
