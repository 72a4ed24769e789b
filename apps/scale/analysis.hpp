#pragma once
// What the runs mean (docs/apps-scale.md, "What the report says"): the
// comparisons the experiment is made for, computed from the median rows --
// steer against central, checksum off against on, the paper's figures
// beside ours -- and the model of a machine with a core per process.
//
// Everything here is a pure function of the rows; the text table and the
// HTML report print the same numbers.

#include <string>
#include <vector>

#include "report.hpp"

namespace xk::scale {

// The machine the runs were made on.
struct Machine {
  std::string cpu;     // /proc/cpuinfo's model name
  unsigned cores = 0;  // online CPUs
  std::string kernel;  // uname -r
  std::string dpdk;    // the version of the DPDK this build uses
  static Machine here();
};

// The model: each process with a core of its own, so each component moves
// at most 1 / (its CPU seconds per GB) GB/s --
//   aggregate(N) = min(N x one node's rate, filterd's rate, the receiver's rate)
// with the per-component costs measured at that point (CPU per GB does not
// depend on how many cores the machine has). The link (memif: a memory copy
// between two processes) is not a separate term: its cost is in the
// processes at its ends.
struct ModelPoint {
  Row row;  // the measured median
  double node_gbps = 0;     // one node with a core: 8 / nodes' CPU s per GB
  double filterd_gbps = 0;  // 8 / filterd's CPU s per GB (0: no filterd)
  double peer_gbps = 0;     // 8 / the receiver's CPU s per GB
  double model_gbps = 0;    // the minimum of N x node, filterd, peer
  std::string bottleneck;   // which term is the minimum: nodes | filterd | receiver
  unsigned processes = 0;   // what the point runs: N nodes, filterd, the receiver (and a remote filterd)
  // Cores busy on average during the run: aggregate GB/s x system CPU s/GB.
  // Near the machine's core count, the run was short of CPU, not of design.
  double busy_cores = 0;
  bool checkable = false;  // processes <= cores: this machine is the model's machine
  double error = 0;        // checkable: measured / model - 1
};
std::vector<ModelPoint> model(const std::vector<Row>& medians, unsigned cores);

// Steer against central at one (csum, N, K): ratios of steer's figure to
// central's.
struct ModeRatio {
  bool csum = true;
  unsigned n = 0, k = 1;
  double throughput = 0;  // aggregate, steer / central
  double filterd = 0, nodes = 0, peer = 0, system = 0;  // CPU s per GB, steer / central (0: not measured)
};
std::vector<ModeRatio> steer_vs_central(const std::vector<Row>& medians);

// Checksum off against on at one (mode, N, K).
struct CsumGain {
  std::string mode;
  unsigned n = 0, k = 1;
  double gain = 0;  // aggregate, off / on
  // The share of each component's CPU per GB that the checksum cost:
  // 1 - off / on (from the two runs' CPU accounting, not a profile).
  double nodes_share = 0, filterd_share = 0, peer_share = 0, system_share = 0;
  // With --repeat, the runs are made in rounds (every point once a round):
  // off against on in the same round, a comparison the machine's drift
  // does not bias.
  unsigned rounds = 0;      // rounds with both an on and an off run
  unsigned off_faster = 0;  // of those, the rounds where off was faster
  double paired = 0;        // the median of the rounds' off / on
  // Off slower than on: with 3 rounds or more, the median round says so;
  // else the medians do.
  bool off_slower = false;
};
std::vector<CsumGain> checksum_ablation(const std::vector<Row>& medians, const std::vector<Row>& runs = {});

// Guedes & Peterson (1997) beside ours.
struct PaperLine {
  std::string what, paper, ours;
};
std::vector<PaperLine> paper_comparison(const std::vector<Row>& medians);

// The text report: the table, then the comparisons, the model and the paper
// (`runs`: every run, for the checksum's rounds).
std::string analysis_text(const std::vector<Row>& medians, const std::vector<Row>& runs, const Machine& m);

}  // namespace xk::scale
