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
  unsigned k = 1;      // connections per node
  unsigned conns = 0;  // n x k: concurrent connections
  unsigned repeat = 1;
  std::uint64_t bytes = 0;  // received in all (the peer's total)
  double seconds = 0;       // the peer's: first connection to last end
  double aggregate_gbps = 0;
  double aggregate_mbps = 0;  // MB/s (10^6 bytes), the paper's unit
  double per_node_mean = 0, per_node_min = 0, per_node_max = 0;  // Gbit/s, each transmitter's own
  double filterd_cpu_s = 0, nodes_cpu_s = 0, peer_cpu_s = 0;
  double filterd_s_per_gb = 0, nodes_s_per_gb = 0, peer_s_per_gb = 0;
  double system_s_per_gb = 0;        // the three together: the whole system's CPU per GB
  double conn_min = 0, conn_max = 0;  // Gbit/s, each connection's own (the receiver's view)
  double jain = 0;                    // Jain's fairness index over the connections (1: all equal)
  // Set by medians(): the spread of the point's runs (aggregate Gbit/s) and
  // how many there were.
  double agg_lo = 0, agg_hi = 0;
  unsigned runs = 1;
  std::string launcher, remote;
  std::string node_link = "memif";  // how the nodes reach filterd: memif | shm | ethernet
  unsigned mtu = 1500;
  unsigned family = 4;  // the streams' IP version (--family)
  double wall_seconds = 0;  // the run, from the first process to the last exit
};

// One number through a printf format ("%.3f"), as a string.
std::string fmt(const char* f, double v);

extern const char* const kCsvHeader;
std::string csv_line(const Row& r);

// Jain's fairness index of rates: (sum x)^2 / (n sum x^2); 1 when all are
// equal, 1/n when one has everything; 0 for none.
double jain_index(const std::vector<double>& x);
void write_csv(const std::string& path, const std::vector<Row>& rows);

// The median row (by aggregate throughput) of each (mode, csum, n, k), in
// the order the runs were made, with the spread of its runs (agg_lo, agg_hi,
// runs): what the table and the plots show when --repeat made several.
std::vector<Row> medians(const std::vector<Row>& rows);

// The table on stdout.
std::string summary_table(const std::vector<Row>& rows);

// Writes plot.dat (and plot_conns.dat for a connection sweep) and plot.gp
// into `dir` and runs gnuplot; `pngs` gets the plots made (aggregate.png with
// the model dashed, per_node.png, filterd_cpu.png, system_cpu.png; for a
// sweep of --conns-per-node also connections.png, fairness.png,
// connections_cpu.png). Returns "" or what went wrong (gnuplot missing or
// failing: the CSV is there anyway, and `pngs` is empty).
std::string write_plots(const std::string& dir, const std::vector<Row>& rows, const std::string& title,
                        unsigned cores, std::vector<std::string>& pngs);

}  // namespace xk::scale
