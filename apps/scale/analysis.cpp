// The comparisons and the model (analysis.hpp).

#include "analysis.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <tuple>


namespace xk::scale {
namespace {

// GB/s of a component that spends `s_per_gb` CPU seconds per GB, as Gbit/s.
double rate_gbps(double s_per_gb) { return s_per_gb > 0 ? 8.0 / s_per_gb : 0.0; }

const Row* find(const std::vector<Row>& rows, const std::string& mode, bool csum, unsigned n, unsigned k) {
  for (const Row& r : rows) {
    if (r.mode == mode && r.csum == csum && r.n == n && r.k == k) return &r;
  }
  return nullptr;
}

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

std::string first_line_of(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) {
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      auto v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "unknown";
}

}  // namespace

Machine Machine::here() {
  Machine m;
  m.cpu = first_line_of("/proc/cpuinfo", "model name");
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  m.cores = n > 0 ? static_cast<unsigned>(n) : 1;
  utsname u{};
  m.kernel = uname(&u) == 0 ? u.release : "unknown";
#ifdef XK_DPDK_VERSION
  m.dpdk = XK_DPDK_VERSION;  // the DPDK this build's nodes and filterd run on
#else
  m.dpdk = "none (built without DPDK)";
#endif
  return m;
}

std::vector<ModelPoint> model(const std::vector<Row>& medians, unsigned cores) {
  std::vector<ModelPoint> out;
  for (const Row& r : medians) {
    ModelPoint p;
    p.row = r;
    p.node_gbps = rate_gbps(r.nodes_s_per_gb);
    p.filterd_gbps = rate_gbps(r.filterd_s_per_gb);
    p.peer_gbps = rate_gbps(r.peer_s_per_gb);
    const bool standalone = r.mode == "standalone";
    struct Term {
      double gbps;
      const char* name;
    };
    std::vector<Term> terms{{r.n * p.node_gbps, "nodes"}, {p.peer_gbps, "receiver"}};
    if (!standalone) terms.push_back({p.filterd_gbps, "filterd"});
    const Term* least = nullptr;
    for (const Term& t : terms) {
      if (t.gbps > 0 && (least == nullptr || t.gbps < least->gbps)) least = &t;
    }
    p.model_gbps = least != nullptr ? least->gbps : 0;
    p.bottleneck = least != nullptr ? least->name : "-";
    p.processes = r.n + 1 + (standalone ? 0 : 1) + (r.remote == "xk-filterd" ? 1 : 0);
    p.busy_cores = r.aggregate_gbps / 8.0 * r.system_s_per_gb;
    p.checkable = p.processes <= cores && p.model_gbps > 0;
    p.error = p.checkable ? r.aggregate_gbps / p.model_gbps - 1 : 0;
    out.push_back(p);
  }
  return out;
}

std::vector<ModeRatio> steer_vs_central(const std::vector<Row>& medians) {
  std::vector<ModeRatio> out;
  for (const Row& st : medians) {
    if (st.mode != "steer") continue;
    const Row* ce = find(medians, "central", st.csum, st.n, st.k);
    if (ce == nullptr) continue;
    ModeRatio m;
    m.csum = st.csum;
    m.n = st.n;
    m.k = st.k;
    m.throughput = ratio(st.aggregate_gbps, ce->aggregate_gbps);
    m.filterd = ratio(st.filterd_s_per_gb, ce->filterd_s_per_gb);
    m.nodes = ratio(st.nodes_s_per_gb, ce->nodes_s_per_gb);
    m.peer = ratio(st.peer_s_per_gb, ce->peer_s_per_gb);
    m.system = ratio(st.system_s_per_gb, ce->system_s_per_gb);
    out.push_back(m);
  }
  return out;
}

std::vector<CsumGain> checksum_ablation(const std::vector<Row>& medians, const std::vector<Row>& runs) {
  std::vector<CsumGain> out;
  for (const Row& on : medians) {
    if (!on.csum) continue;
    const Row* off = find(medians, on.mode, false, on.n, on.k);
    if (off == nullptr) continue;
    CsumGain g;
    g.mode = on.mode;
    g.n = on.n;
    g.k = on.k;
    g.gain = ratio(off->aggregate_gbps, on.aggregate_gbps);
    auto share = [](double with, double without) { return with > 0 && without > 0 ? 1 - without / with : 0.0; };
    g.nodes_share = share(on.nodes_s_per_gb, off->nodes_s_per_gb);
    g.filterd_share = share(on.filterd_s_per_gb, off->filterd_s_per_gb);
    g.peer_share = share(on.peer_s_per_gb, off->peer_s_per_gb);
    g.system_share = share(on.system_s_per_gb, off->system_s_per_gb);
    std::vector<double> ratios;
    for (const Row& a : runs) {
      if (a.mode != on.mode || a.n != on.n || a.k != on.k || !a.csum) continue;
      for (const Row& b : runs) {
        if (b.mode == a.mode && b.n == a.n && b.k == a.k && !b.csum && b.repeat == a.repeat && a.aggregate_gbps > 0) {
          ratios.push_back(b.aggregate_gbps / a.aggregate_gbps);
        }
      }
    }
    std::sort(ratios.begin(), ratios.end());
    g.rounds = static_cast<unsigned>(ratios.size());
    g.off_faster = static_cast<unsigned>(std::count_if(ratios.begin(), ratios.end(), [](double x) { return x > 1; }));
    g.paired = ratios.empty() ? 0 : ratios[(ratios.size() - 1) / 2];
    g.off_slower = g.rounds >= 3 ? g.paired < 1 : g.gain < 1;
    out.push_back(g);
  }
  return out;
}

std::vector<PaperLine> paper_comparison(const std::vector<Row>& medians) {
  std::vector<PaperLine> out;
  // Ours at the largest N, one connection a node as in the paper (more a
  // node only where no point has one).
  auto largest = [&](const std::string& mode, bool csum) -> const Row* {
    const Row* best = nullptr;
    for (const Row& r : medians) {
      if (r.mode != mode || r.csum != csum) continue;
      if (best == nullptr || std::make_tuple(r.k == 1, r.n, r.conns) > std::make_tuple(best->k == 1, best->n, best->conns)) {
        best = &r;
      }
    }
    return best;
  };
  auto mbps = [](const Row* r) {
    return r == nullptr ? std::string("not run")
                        : fmt("%.0f MB/s", r->aggregate_mbps) + " (" + std::to_string(r->conns) + " connection" +
                              (r->conns == 1 ? "" : "s") + ")";
  };
  out.push_back({"central: one process runs TCP for every node", "2.2 MB/s", mbps(largest("central", true))});
  out.push_back({"per-node stacks, a filter steering frames", "9.2 MB/s (6 nodes)", mbps(largest("steer", true))});
  std::string ratios;
  for (const ModeRatio& m : steer_vs_central(medians)) {
    if (!m.csum) continue;
    ratios += (ratios.empty() ? "" : ", ") + fmt("%.2fx", m.throughput) + " (N=" + std::to_string(m.n) +
              (m.k > 1 ? " K=" + std::to_string(m.k) : "") + ")";
  }
  out.push_back({"per-node / central throughput", "4.2x (6 nodes)", ratios.empty() ? "not run" : ratios});
  std::string gains;
  for (const CsumGain& g : checksum_ablation(medians)) {
    gains += (gains.empty() ? "" : ", ") + g.mode + " " + fmt("%+.0f %%", (g.gain - 1) * 100) + " (N=" +
             std::to_string(g.n) + (g.k > 1 ? " K=" + std::to_string(g.k) : "") + ")";
  }
  out.push_back({"checksum off", "+50 % (per-node stacks)", gains.empty() ? "not run" : gains});
  return out;
}

std::string analysis_text(const std::vector<Row>& medians, const std::vector<Row>& runs, const Machine& m) {
  std::ostringstream s;
  char b[512];
  s << summary_table(medians);

  const auto ratios = steer_vs_central(medians);
  if (!ratios.empty()) {
    s << "\nsteer / central (below 1: steer spends less CPU per GB)\n";
    std::snprintf(b, sizeof b, "%-4s %4s %5s  %10s  %8s %8s %8s %8s\n", "csum", "N", "conns", "throughput",
                  "filterd", "nodes", "peer", "system");
    s << b;
    for (const ModeRatio& r : ratios) {
      std::snprintf(b, sizeof b, "%-4s %4u %5u  %9.2fx  %7.2fx %7.2fx %7.2fx %7.2fx\n", r.csum ? "on" : "off", r.n,
                    r.n * r.k, r.throughput, r.filterd, r.nodes, r.peer, r.system);
      s << b;
    }
  }

  const auto gains = checksum_ablation(medians, runs);
  if (!gains.empty()) {
    s << "\nchecksum off / on: the throughput gain (of the medians; with rounds, off against on in the same "
         "round too), and the share of each component's CPU per GB the checksum cost (1 - off/on)\n";
    std::snprintf(b, sizeof b, "%-10s %4s %5s  %7s  %-22s  %8s %8s %8s %8s\n", "mode", "N", "conns", "gain",
                  "rounds: off faster", "nodes", "filterd", "peer", "system");
    s << b;
    for (const CsumGain& g : gains) {
      const std::string rounds = g.rounds > 1 ? std::to_string(g.off_faster) + " of " + std::to_string(g.rounds) +
                                                    " (median " + fmt("%+.0f%%", (g.paired - 1) * 100) + ")"
                                              : "-";
      std::snprintf(b, sizeof b, "%-10s %4u %5u  %+6.0f%%  %-22s  %7.0f%% %7.0f%% %7.0f%% %7.0f%%%s\n",
                    g.mode.c_str(), g.n, g.n * g.k, (g.gain - 1) * 100, rounds.c_str(), g.nodes_share * 100,
                    g.filterd_share * 100, g.peer_share * 100, g.system_share * 100,
                    g.off_slower ? "  <- off slower than on" : "");
      s << b;
    }
  }

  const auto points = model(medians, m.cores);
  if (!points.empty()) {
    s << "\nmodel, a core per process (docs/apps-scale.md): min(N x node, filterd, receiver), each 8 / its "
         "CPU s per GB; Gbit/s\n";
    std::snprintf(b, sizeof b, "%-10s %-4s %4s %5s  %9s %9s  %-9s %6s %6s  %s\n", "mode", "csum", "N", "conns",
                  "measured", "model", "limit", "procs", "busy", "check");
    s << b;
    for (const ModelPoint& p : points) {
      const std::string check =
          p.checkable ? "model " + fmt("%+.0f %%", p.error * 100) + " off"
                      : "not here (" + std::to_string(p.processes) + " processes > " + std::to_string(m.cores) +
                            " cores)";
      std::snprintf(b, sizeof b, "%-10s %-4s %4u %5u  %9.3f %9.3f  %-9s %6u %6.2f  %s\n", p.row.mode.c_str(),
                    p.row.csum ? "on" : "off", p.row.n, p.row.conns, p.row.aggregate_gbps, p.model_gbps,
                    p.bottleneck.c_str(), p.processes, p.busy_cores, check.c_str());
      s << b;
    }
    s << "(busy: cores in use on average, aggregate x system CPU per GB; near " << m.cores
      << " the run was short of CPU on this machine)\n";
  }

  s << "\nGuedes & Peterson (1997) beside ours\n";
  for (const PaperLine& l : paper_comparison(medians)) {
    std::snprintf(b, sizeof b, "  %-46s paper %-22s ours %s\n", l.what.c_str(), l.paper.c_str(), l.ours.c_str());
    s << b;
  }
  return s.str();
}

}  // namespace xk::scale
