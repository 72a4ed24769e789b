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

#include "analysis.hpp"
#include "proc.hpp"

namespace xk::scale {

const char* const kCsvHeader =
    "mode,csum,n,repeat,bytes,seconds,aggregate_gbps,aggregate_MBps,per_node_gbps_mean,per_node_gbps_min,"
    "per_node_gbps_max,filterd_cpu_s_per_gb,nodes_cpu_s_per_gb,peer_cpu_s_per_gb,filterd_cpu_s,nodes_cpu_s,"
    "peer_cpu_s,launcher,remote,mtu,wall_seconds,node_link,conns_per_node,connections,system_cpu_s_per_gb,"
    "per_conn_gbps_min,per_conn_gbps_max,jain_index,family";

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string csv_line(const Row& r) {
  std::ostringstream s;
  s << r.mode << ',' << (r.csum ? "on" : "off") << ',' << r.n << ',' << r.repeat << ',' << r.bytes << ','
    << fmt("%.6f", r.seconds) << ',' << fmt("%.4f", r.aggregate_gbps) << ',' << fmt("%.2f", r.aggregate_mbps) << ','
    << fmt("%.4f", r.per_node_mean) << ',' << fmt("%.4f", r.per_node_min) << ',' << fmt("%.4f", r.per_node_max) << ','
    << fmt("%.4f", r.filterd_s_per_gb) << ',' << fmt("%.4f", r.nodes_s_per_gb) << ','
    << fmt("%.4f", r.peer_s_per_gb) << ',' << fmt("%.4f", r.filterd_cpu_s) << ',' << fmt("%.4f", r.nodes_cpu_s)
    << ',' << fmt("%.4f", r.peer_cpu_s) << ',' << r.launcher << ',' << r.remote << ',' << r.mtu << ','
    << fmt("%.3f", r.wall_seconds) << ',' << r.node_link << ',' << r.k << ',' << r.conns << ','
    << fmt("%.4f", r.system_s_per_gb) << ',' << fmt("%.4f", r.conn_min) << ',' << fmt("%.4f", r.conn_max) << ','
    << fmt("%.4f", r.jain) << ',' << r.family;
  return s.str();
}

double jain_index(const std::vector<double>& x) {
  double sum = 0, sq = 0;
  for (double v : x) {
    sum += v;
    sq += v * v;
  }
  return sq > 0 ? sum * sum / (static_cast<double>(x.size()) * sq) : 0.0;
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
  using Key = std::tuple<std::string, bool, unsigned, unsigned>;
  std::vector<Key> order;
  std::map<Key, std::vector<Row>> groups;
  for (const Row& r : rows) {
    Key key{r.mode, r.csum, r.n, r.k};
    if (groups.find(key) == groups.end()) order.push_back(key);
    groups[key].push_back(r);
  }
  std::vector<Row> out;
  for (const auto& key : order) {
    auto g = groups[key];
    std::sort(g.begin(), g.end(), [](const Row& a, const Row& b) { return a.aggregate_gbps < b.aggregate_gbps; });
    Row m = g[(g.size() - 1) / 2];  // the lower median of an even count: a run that happened
    m.agg_lo = g.front().aggregate_gbps;
    m.agg_hi = g.back().aggregate_gbps;
    m.runs = static_cast<unsigned>(g.size());
    out.push_back(m);
  }
  return out;
}

std::string summary_table(const std::vector<Row>& rows) {
  // Columns for connections and repeats only when the runs have them.
  bool many_conns = false, repeats = false;
  for (const Row& r : rows) {
    many_conns = many_conns || r.k > 1;
    repeats = repeats || r.runs > 1;
  }
  std::ostringstream s;
  char b[512];
  std::snprintf(b, sizeof b, "%-10s %-4s %3s %s %-26s %8s  %-22s %s %9s %9s %9s %9s\n", "mode", "csum", "N",
                many_conns ? "    K conns" : "", repeats ? "aggregate Gbit/s" : "aggregate", "", "per node Gbit/s",
                many_conns ? "per connection Gbit/s      " : "", "filterd", "nodes", "peer", "system");
  s << b;
  std::snprintf(b, sizeof b, "%-10s %-4s %3s %s %-26s %8s  %-22s %s %9s %9s %9s %9s\n", "", "", "",
                many_conns ? "           " : "", repeats ? "median (min..max)" : "Gbit/s", "MB/s", "mean (min..max)",
                many_conns ? "min..max (Jain's index)    " : "", "CPU s/GB", "CPU s/GB", "CPU s/GB", "CPU s/GB");
  s << b;
  for (const Row& r : rows) {
    const std::string agg = fmt("%.3f", r.aggregate_gbps) +
                            (r.runs > 1 ? " (" + fmt("%.3f", r.agg_lo) + ".." + fmt("%.3f", r.agg_hi) + ")" : "");
    const std::string per = fmt("%.3f", r.per_node_mean) + " (" + fmt("%.3f", r.per_node_min) + ".." +
                            fmt("%.3f", r.per_node_max) + ")";
    const std::string kc = many_conns ? fmt("%5.0f", r.k) + " " + fmt("%5.0f", r.conns) : "";
    std::string conn;
    if (many_conns) {
      conn = fmt("%.3f", r.conn_min) + ".." + fmt("%.3f", r.conn_max) + " (" + fmt("%.3f", r.jain) + ")";
      conn.resize(std::max<std::size_t>(conn.size(), 27), ' ');
    }
    std::snprintf(b, sizeof b, "%-10s %-4s %3u %s %-26s %8.1f  %-22s %s %9.3f %9.3f %9.3f %9.3f\n", r.mode.c_str(),
                  r.csum ? "on" : "off", r.n, kc.c_str(), agg.c_str(), r.aggregate_mbps, per.c_str(), conn.c_str(),
                  r.filterd_s_per_gb, r.nodes_s_per_gb, r.peer_s_per_gb, r.system_s_per_gb);
    s << b;
  }
  // Through filterd against the baseline without it, where both rows are here.
  for (const Row& st : rows) {
    if (st.mode != "steer" || st.n != 1) continue;
    for (const Row& alone : rows) {
      if (alone.mode == "standalone" && alone.csum == st.csum && alone.k == st.k && alone.aggregate_gbps > 0) {
        std::snprintf(b, sizeof b, "through filterd / standalone, N=1, csum %s: %.2fx throughput\n",
                      st.csum ? "on" : "off", st.aggregate_gbps / alone.aggregate_gbps);
        s << b;
      }
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

std::string write_plots(const std::string& dir, const std::vector<Row>& rows, const std::string& title,
                        unsigned cores, std::vector<std::string>& pngs) {
  pngs.clear();
  // One data block per series -- (mode, csum, K), N ascending -- so that
  // gnuplot's `index` picks a series; a K sweep adds blocks per (mode, csum,
  // N) with the connections ascending (plot_conns.dat).
  std::map<std::tuple<std::string, bool, unsigned, unsigned>, double> model_of;
  for (const ModelPoint& m : model(rows, cores)) model_of[{m.row.mode, m.row.csum, m.row.n, m.row.k}] = m.model_gbps;
  bool many = false;  // some point has more than one connection a node: the connection plots too
  for (const Row& r : rows) many = many || r.k > 1;
  auto name = [&](const std::string& mode, bool csum, const std::string& extra) {
    return mode + ", checksum " + (csum ? "on" : "off") + extra;
  };
  struct Series {
    std::string title;
    std::vector<Row> rows;
  };
  std::vector<Series> by_n, by_conns;
  auto add = [](std::vector<Series>& v, const std::string& t, const Row& r) {
    auto it = std::find_if(v.begin(), v.end(), [&](const Series& s) { return s.title == t; });
    if (it == v.end()) {
      v.push_back({t, {}});
      it = v.end() - 1;
    }
    it->rows.push_back(r);
  };
  for (const Row& r : rows) {
    add(by_n, name(r.mode, r.csum, many ? ", K=" + std::to_string(r.k) : ""), r);
    if (many) add(by_conns, name(r.mode, r.csum, ""), r);
  }
  auto write_dat = [&](const std::string& file, std::vector<Series>& series, bool x_conns) {
    std::ofstream dat(dir + "/" + file);
    dat << "# x aggregate_gbps per_node_gbps_mean filterd_cpu_s_per_gb per_node_gbps_min per_node_gbps_max "
           "aggregate_min aggregate_max model_gbps system_cpu_s_per_gb connections jain_index\n";
    for (Series& se : series) {
      std::sort(se.rows.begin(), se.rows.end(), [&](const Row& a, const Row& b) {
        return x_conns ? std::tie(a.conns, a.n) < std::tie(b.conns, b.n) : a.n < b.n;
      });
      dat << "# " << se.title << "\n";
      for (const Row& r : se.rows) {
        const double lo = r.runs > 1 ? r.agg_lo : r.aggregate_gbps, hi = r.runs > 1 ? r.agg_hi : r.aggregate_gbps;
        dat << (x_conns ? r.conns : r.n) << ' ' << r.aggregate_gbps << ' ' << r.per_node_mean << ' '
            << r.filterd_s_per_gb << ' ' << r.per_node_min << ' ' << r.per_node_max << ' ' << lo << ' ' << hi << ' '
            << model_of[{r.mode, r.csum, r.n, r.k}] << ' ' << r.system_s_per_gb << ' ' << r.conns << ' '
            << r.jain << "\n";
      }
      dat << "\n\n";
    }
  };
  // A --conns sweep adds points at one N with more connections a node:
  // alone in their (mode, csum, K) series, they draw no line against N
  // (the connection plots show them).
  std::vector<unsigned> ns;
  for (const Row& r : rows) {
    if (std::find(ns.begin(), ns.end(), r.n) == ns.end()) ns.push_back(r.n);
  }
  if (ns.size() > 1) std::erase_if(by_n, [](const Series& se) { return se.rows.size() == 1 && se.rows.front().k > 1; });
  write_dat("plot.dat", by_n, false);
  if (!by_conns.empty()) write_dat("plot_conns.dat", by_conns, true);

  // A plot: each series a line (with error bars when `errors` names the
  // low and high columns), and optionally each series' model dashed.
  auto plot = [&](const std::string& png, const std::string& file, const std::vector<Series>& series,
                  const std::string& what, const std::string& ylabel, int column, const std::string& errors,
                  bool with_model, bool skip_standalone) {
    std::string s = "set output '" + png + "'\nset title \"" + what + "\\n{/*0.8 " + title + "}\"\nset ylabel '" +
                    ylabel + "'\nplot ";
    bool first = true;
    for (std::size_t i = 0; i < series.size(); ++i) {
      if (skip_standalone && series[i].rows.front().mode == "standalone") continue;  // no filterd to measure
      const std::string c = std::to_string(i + 1);
      s += std::string(first ? "" : ", \\\n     ") + "'" + file + "' index " + std::to_string(i) + " using 1:" +
           std::to_string(column) + (errors.empty() ? " with linespoints" : ":" + errors + " with yerrorlines") +
           " lc " + c + " title '" + series[i].title + "'";
      if (with_model) {
        s += ", \\\n     '" + file + "' index " + std::to_string(i) + " using 1:9 with lines dt 2 lc " + c +
             " title 'model (a core each): " + series[i].title + "'";
      }
      first = false;
    }
    pngs.push_back(png);
    return s + "\n";
  };
  {
    const std::string xn = many ? "N (nodes, K connections each)" : "N (concurrent connections, one per node)";
    std::ofstream gp(dir + "/plot.gp");
    gp << "# gnuplot plot.gp (in this folder) redraws the plots from plot.dat (and plot_conns.dat)\n"
       << "set terminal pngcairo size 900,600 enhanced font 'sans,11'\n"
       << "set key top left font ',9' spacing 0.9\nset grid\nset xlabel '" << xn << "'\n"
       << "set logscale x 2\nset yrange [0:*]\nset offsets graph 0.05, graph 0.05, 0, 0\n"
       << plot("aggregate.png", "plot.dat", by_n, "Aggregate throughput vs N (bars: min..max of the runs; dashed: model)",
               "Gbit/s", 2, "7:8", true, false)
       << plot("per_node.png", "plot.dat", by_n, "Per-node throughput vs N (mean; bars: slowest..fastest node)",
               "Gbit/s", 3, "5:6", false, false)
       << plot("filterd_cpu.png", "plot.dat", by_n, "filterd CPU per GB moved vs N", "CPU seconds per GB", 4, "",
               false, true)
       << plot("system_cpu.png", "plot.dat", by_n, "Whole-system CPU per GB moved vs N (filterd + nodes + receiver)",
               "CPU seconds per GB", 10, "", false, false);
    if (!by_conns.empty()) {
      gp << "set xlabel 'concurrent connections (N nodes x K each)'\n"
         << plot("connections.png", "plot_conns.dat", by_conns, "Aggregate throughput vs concurrent connections",
                 "Gbit/s", 2, "7:8", false, false)
         << "set yrange [0:1.05]\n"
         << plot("fairness.png", "plot_conns.dat", by_conns, "Fairness vs concurrent connections",
                 "Jain fairness index (1: all equal)", 12, "", false, false)
         << "set yrange [0:*]\n"
         << plot("connections_cpu.png", "plot_conns.dat", by_conns, "Whole-system CPU per GB vs concurrent connections",
                 "CPU seconds per GB", 10, "", false, false);
    }
  }
  if (!on_path("gnuplot")) {
    pngs.clear();
    return "gnuplot is not installed (Debian: apt-get install gnuplot-nox): no plots; " + dir +
           "/plot.gp draws them once it is";
  }
  std::string log = dir + "/gnuplot.log";
  std::vector<std::string> argv{"sh", "-c", "cd \"$0\" && exec gnuplot plot.gp", dir};
  try {
    run_command(argv, log, 60);
  } catch (const RunFailure& f) {
    pngs.clear();
    return "gnuplot failed (" + log + "): " + f.what;
  }
  for (const std::string& png : pngs) {
    std::ifstream in(dir + "/" + png, std::ios::binary);
    char sig[8] = {};
    if (!in.read(sig, 8) || std::string(sig, 8) != "\x89PNG\r\n\x1a\n") {
      pngs.clear();
      return "gnuplot wrote no valid " + png + " (" + log + ")";
    }
  }
  return "";
}

}  // namespace xk::scale
