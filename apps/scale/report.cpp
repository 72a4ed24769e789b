// scale.csv, the summary table and the plots (report.hpp).

#include "report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "proc.hpp"

namespace xk::scale {

const char* const kCsvHeader =
    "mode,csum,n,repeat,bytes,seconds,aggregate_gbps,aggregate_MBps,per_node_gbps_mean,per_node_gbps_min,"
    "per_node_gbps_max,filterd_cpu_s_per_gb,nodes_cpu_s_per_gb,peer_cpu_s_per_gb,filterd_cpu_s,nodes_cpu_s,"
    "peer_cpu_s,launcher,remote,mtu,wall_seconds,node_link";

namespace {
std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
}  // namespace

std::string csv_line(const Row& r) {
  std::ostringstream s;
  s << r.mode << ',' << (r.csum ? "on" : "off") << ',' << r.n << ',' << r.repeat << ',' << r.bytes << ','
    << fmt("%.6f", r.seconds) << ',' << fmt("%.4f", r.aggregate_gbps) << ',' << fmt("%.2f", r.aggregate_mbps) << ','
    << fmt("%.4f", r.per_node_mean) << ',' << fmt("%.4f", r.per_node_min) << ',' << fmt("%.4f", r.per_node_max) << ','
    << fmt("%.4f", r.filterd_s_per_gb) << ',' << fmt("%.4f", r.nodes_s_per_gb) << ','
    << fmt("%.4f", r.peer_s_per_gb) << ',' << fmt("%.4f", r.filterd_cpu_s) << ',' << fmt("%.4f", r.nodes_cpu_s)
    << ',' << fmt("%.4f", r.peer_cpu_s) << ',' << r.launcher << ',' << r.remote << ',' << r.mtu << ','
    << fmt("%.3f", r.wall_seconds) << ',' << r.node_link;
  return s.str();
}

void write_csv(const std::string& path, const std::vector<Row>& rows) {
  // Written whole after every run (a temporary file renamed over it): an
  // interrupted experiment leaves a complete CSV of the runs that finished.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << kCsvHeader << "\n";
    for (const Row& r : rows) out << csv_line(r) << "\n";
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + path);
}

std::vector<Row> medians(const std::vector<Row>& rows) {
  std::vector<std::tuple<std::string, bool, unsigned>> order;
  std::map<std::tuple<std::string, bool, unsigned>, std::vector<Row>> groups;
  for (const Row& r : rows) {
    auto key = std::make_tuple(r.mode, r.csum, r.n);
    if (groups.find(key) == groups.end()) order.push_back(key);
    groups[key].push_back(r);
  }
  std::vector<Row> out;
  for (const auto& key : order) {
    auto g = groups[key];
    std::sort(g.begin(), g.end(), [](const Row& a, const Row& b) { return a.aggregate_gbps < b.aggregate_gbps; });
    out.push_back(g[(g.size() - 1) / 2]);  // the lower median of an even count: a run that happened
  }
  return out;
}

std::string summary_table(const std::vector<Row>& rows) {
  std::ostringstream s;
  char b[256];
  std::snprintf(b, sizeof b, "%-10s %-4s %3s  %9s %8s  %-22s  %11s %11s %11s\n", "mode", "csum", "N", "aggregate",
                "", "per node Gbit/s", "filterd", "nodes", "peer");
  s << b;
  std::snprintf(b, sizeof b, "%-10s %-4s %3s  %9s %8s  %-22s  %11s %11s %11s\n", "", "", "", "Gbit/s", "MB/s",
                "mean (min..max)", "CPU s/GB", "CPU s/GB", "CPU s/GB");
  s << b;
  for (const Row& r : rows) {
    std::string per = fmt("%.3f", r.per_node_mean) + " (" + fmt("%.3f", r.per_node_min) + ".." +
                      fmt("%.3f", r.per_node_max) + ")";
    std::snprintf(b, sizeof b, "%-10s %-4s %3u  %9.3f %8.1f  %-22s  %11.3f %11.3f %11.3f\n", r.mode.c_str(),
                  r.csum ? "on" : "off", r.n, r.aggregate_gbps, r.aggregate_mbps, per.c_str(), r.filterd_s_per_gb,
                  r.nodes_s_per_gb, r.peer_s_per_gb);
    s << b;
  }
  // The comparisons the runs were made for, where both rows are here.
  auto find = [&](const char* mode, bool csum, unsigned n) -> const Row* {
    for (const Row& r : rows) {
      if (r.mode == mode && r.csum == csum && r.n == n) return &r;
    }
    return nullptr;
  };
  for (bool csum : {true, false}) {
    const char* c = csum ? "on" : "off";
    if (const Row *st = find("steer", csum, 1), *alone = find("standalone", csum, 1); st && alone) {
      std::snprintf(b, sizeof b, "through filterd / standalone, N=1, csum %s: %.2fx throughput\n", c,
                    st->aggregate_gbps / alone->aggregate_gbps);
      s << b;
    }
    for (const Row& r : rows) {
      const Row* ce = r.mode == "steer" && r.csum == csum ? find("central", csum, r.n) : nullptr;
      if (ce == nullptr || ce->filterd_s_per_gb <= 0) continue;
      std::snprintf(b, sizeof b, "filterd CPU per GB, steer / central, N=%u, csum %s: %.2fx\n", r.n, c,
                    r.filterd_s_per_gb / ce->filterd_s_per_gb);
      s << b;
    }
  }
  return s.str();
}

namespace {
bool on_path(const std::string& prog) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    if (!d.empty() && access((d + "/" + prog).c_str(), X_OK) == 0) return true;
  }
  return false;
}
}  // namespace

std::string write_plots(const std::string& dir, const std::vector<Row>& rows, const std::string& title) {
  // One data block per (mode, csum) series, N ascending; gnuplot's `index`
  // picks a block, so each series is one line of each plot.
  std::vector<std::pair<std::string, bool>> series;
  for (const Row& r : rows) {
    auto k = std::make_pair(r.mode, r.csum);
    if (std::find(series.begin(), series.end(), k) == series.end()) series.push_back(k);
  }
  {
    std::ofstream dat(dir + "/plot.dat");
    dat << "# n aggregate_gbps per_node_gbps_mean filterd_cpu_s_per_gb per_node_gbps_min per_node_gbps_max\n";
    for (std::size_t i = 0; i < series.size(); ++i) {
      std::vector<Row> s;
      for (const Row& r : rows) {
        if (r.mode == series[i].first && r.csum == series[i].second) s.push_back(r);
      }
      std::sort(s.begin(), s.end(), [](const Row& a, const Row& b) { return a.n < b.n; });
      dat << "# " << series[i].first << " csum " << (series[i].second ? "on" : "off") << "\n";
      for (const Row& r : s) {
        dat << r.n << ' ' << r.aggregate_gbps << ' ' << r.per_node_mean << ' ' << r.filterd_s_per_gb << ' '
            << r.per_node_min << ' ' << r.per_node_max << "\n";
      }
      dat << "\n\n";
    }
  }
  auto plot = [&](const std::string& png, const std::string& what, const std::string& ylabel, int column) {
    std::string s = "set output '" + png + "'\nset title \"" + what + "\\n{/*0.8 " + title + "}\"\nset ylabel '" +
                    ylabel + "'\nplot ";
    bool first = true;
    for (std::size_t i = 0; i < series.size(); ++i) {
      if (column == 4 && series[i].first == "standalone") continue;  // no filterd to measure
      s += std::string(first ? "" : ", \\\n     ") + "'plot.dat' index " + std::to_string(i) + " using 1:" +
           std::to_string(column) + " with linespoints title '" + series[i].first + ", checksum " +
           (series[i].second ? "on" : "off") + "'";
      first = false;
    }
    return s + "\n";
  };
  {
    std::ofstream gp(dir + "/plot.gp");
    gp << "# gnuplot plot.gp (in this folder) redraws the plots from plot.dat\n"
       << "set terminal pngcairo size 900,600 enhanced font 'sans,11'\n"
       << "set key top left\nset grid\nset xlabel 'N (concurrent connections, one per node)'\n"
       << "set logscale x 2\nset yrange [0:*]\nset offsets graph 0.05, graph 0.05, 0, 0\n"
       << plot("aggregate.png", "Aggregate throughput vs N", "Gbit/s", 2)
       << plot("per_node.png", "Per-node throughput vs N (mean)", "Gbit/s", 3)
       << plot("filterd_cpu.png", "filterd CPU per GB moved vs N", "CPU seconds per GB", 4);
  }
  if (!on_path("gnuplot")) {
    return "gnuplot is not installed (Debian: apt-get install gnuplot-nox): no plots; " + dir +
           "/plot.gp draws them once it is";
  }
  std::string log = dir + "/gnuplot.log";
  std::vector<std::string> argv{"sh", "-c", "cd \"$0\" && exec gnuplot plot.gp", dir};
  try {
    run_command(argv, log, 60);
  } catch (const RunFailure& f) {
    return "gnuplot failed (" + log + "): " + f.what;
  }
  for (const char* png : {"aggregate.png", "per_node.png", "filterd_cpu.png"}) {
    std::ifstream in(dir + "/" + png, std::ios::binary);
    char sig[8] = {};
    if (!in.read(sig, 8) || std::string(sig, 8) != "\x89PNG\r\n\x1a\n") {
      return std::string("gnuplot wrote no valid ") + png + " (" + log + ")";
    }
  }
  return "";
}

}  // namespace xk::scale
