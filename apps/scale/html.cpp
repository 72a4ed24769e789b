// report.html (html.hpp).

#include "html.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace xk::scale {
namespace {

std::string esc(const std::string& t) {
  std::string o;
  for (char c : t) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// A table from a header and rows of cells (already escaped).
std::string table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows) {
  std::string s = "<table>\n<tr>";
  for (const auto& h : head) s += "<th>" + h + "</th>";
  s += "</tr>\n";
  for (const auto& r : rows) {
    s += "<tr>";
    for (const auto& c : r) s += "<td>" + c + "</td>";
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

std::string onoff(bool v) { return v ? "on" : "off"; }
std::string num(unsigned v) { return std::to_string(v); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

constexpr const char* kStyle = R"(
body { font-family: sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
.note { color: #555; font-size: 0.9em; }
.bad { color: #a00; font-weight: bold; }
)";

}  // namespace

std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += k[(v >> 6) & 63];
    out += k[v & 63];
  }
  if (i < bytes.size()) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? k[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

void write_report_html(const std::string& dir, const ReportInput& in) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<title>xk-scale report</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n"
    << "<h1>xk-scale: the scaling experiment of Guedes &amp; Peterson (1997)</h1>\n"
    << "<p>" << esc(in.started) << ": " << esc(in.setup) << "</p>\n";

  h << "<h2 id=\"machine\">Machine</h2>\n"
    << table({"", ""}, {{"CPU", esc(in.machine.cpu)},
                        {"cores", num(in.machine.cores)},
                        {"kernel", esc(in.machine.kernel)},
                        {"DPDK", esc(in.machine.dpdk)}})
    << "<p class=\"note\">A ratio holds for the machine it was measured on; CPU seconds per GB do not depend on "
       "how many cores it has.</p>\n";
  h << "<h2 id=\"command\">Command</h2>\n<pre>" << esc(in.command) << "</pre>\n";

  // The points.
  bool many = false;
  for (const Row& r : in.medians) many = many || r.k > 1;
  {
    std::vector<std::vector<std::string>> rows;
    for (const Row& r : in.medians) {
      std::vector<std::string> c{esc(r.mode), onoff(r.csum), num(r.n)};
      if (many) c.insert(c.end(), {num(r.k), num(r.conns)});
      c.push_back(fmt("%.3f", r.aggregate_gbps));
      c.push_back(r.runs > 1 ? fmt("%.3f", r.agg_lo) + " .. " + fmt("%.3f", r.agg_hi) : "-");
      c.push_back(num(r.runs));
      c.push_back(fmt("%.1f", r.aggregate_mbps));
      c.push_back(fmt("%.3f", r.per_node_mean) + " (" + fmt("%.3f", r.per_node_min) + " .. " +
                  fmt("%.3f", r.per_node_max) + ")");
      if (many) c.push_back(fmt("%.3f", r.conn_min) + " .. " + fmt("%.3f", r.conn_max) + " (" + fmt("%.3f", r.jain) + ")");
      for (double v : {r.filterd_s_per_gb, r.nodes_s_per_gb, r.peer_s_per_gb, r.system_s_per_gb}) {
        c.push_back(fmt("%.3f", v));
      }
      rows.push_back(c);
    }
    std::vector<std::string> head{"mode", "checksum", "N"};
    if (many) head.insert(head.end(), {"K per node", "connections"});
    head.insert(head.end(), {"aggregate Gbit/s (median)", "min .. max", "runs", "MB/s", "per node Gbit/s"});
    if (many) head.push_back("per connection Gbit/s (Jain)");
    head.insert(head.end(), {"filterd CPU s/GB", "nodes CPU s/GB", "peer CPU s/GB", "system CPU s/GB"});
    h << "<h2 id=\"results\">Results</h2>\n<p>The median run of each point (by aggregate throughput).</p>\n"
      << table(head, rows);
  }

  if (const auto ratios = steer_vs_central(in.medians); !ratios.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const ModeRatio& m : ratios) {
      rows.push_back({onoff(m.csum), num(m.n), num(m.n * m.k), fmt("%.2fx", m.throughput), fmt("%.2fx", m.filterd),
                      fmt("%.2fx", m.nodes), fmt("%.2fx", m.peer), fmt("%.2fx", m.system)});
    }
    h << "<h2 id=\"modes\">Steer against central</h2>\n<p>Steer's figure over central's: throughput, and the CPU "
         "seconds per GB of each component (below 1: steer spends less). This is the paper's question -- where "
         "did the performance go? -- answered in cycles.</p>\n"
      << table({"checksum", "N", "connections", "throughput", "filterd", "nodes", "peer", "system"}, rows);
  }

  if (const auto gains = checksum_ablation(in.medians, in.runs); !gains.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const CsumGain& g : gains) {
      rows.push_back({esc(g.mode), num(g.n), num(g.n * g.k),
                      (g.off_slower ? "<span class=\"bad\">" : std::string("<span>")) +
                          fmt("%+.0f %%", (g.gain - 1) * 100) + "</span>",
                      g.rounds > 1 ? num(g.off_faster) + " of " + num(g.rounds) + " (median " +
                                         fmt("%+.0f %%", (g.paired - 1) * 100) + ")"
                                   : "-",
                      fmt("%.0f %%", g.nodes_share * 100), fmt("%.0f %%", g.filterd_share * 100),
                      fmt("%.0f %%", g.peer_share * 100), fmt("%.0f %%", g.system_share * 100)});
    }
    h << "<h2 id=\"checksum\">The checksum</h2>\n<p>Throughput with the checksum off over on, and the share of "
         "each component's CPU per GB that the checksum cost (1 - off / on, from the CPU accounting of the two "
         "runs). With --repeat the runs go in rounds, every point once a round, and off is also compared with "
         "on in the same round. Red: off slower than on (the median round's, with three rounds or more).</p>\n"
      << table({"mode", "N", "connections", "gain of off", "rounds where off was faster", "nodes", "filterd",
                "peer", "system"},
               rows);
  }

  if (const auto points = model(in.medians, in.machine.cores); !points.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const ModelPoint& p : points) {
      rows.push_back({esc(p.row.mode), onoff(p.row.csum), num(p.row.n), num(p.row.conns),
                      fmt("%.3f", p.row.aggregate_gbps), fmt("%.3f", p.model_gbps), esc(p.bottleneck),
                      fmt("%.3f", p.node_gbps), p.filterd_gbps > 0 ? fmt("%.3f", p.filterd_gbps) : "-",
                      fmt("%.3f", p.peer_gbps), num(p.processes), fmt("%.2f", p.busy_cores),
                      p.checkable ? fmt("%+.0f %%", p.error * 100) : "not here"});
    }
    h << "<h2 id=\"model\">Model: a core per process</h2>\n"
      << "<p>Labelled a model, not a measurement. With a core for every process, each component moves at most 1 / "
         "(its CPU seconds per GB) GB/s, so<br><code>aggregate(N) = min(N &times; one node's rate, filterd's rate, "
         "the receiver's rate)</code><br>with the costs measured at that point. It is checked where the machine "
         "has a core per process (processes &le; " << in.machine.cores
      << " here); elsewhere <i>busy cores</i> (aggregate &times; system CPU per GB) shows how much of the machine "
         "the run used. Formula and assumptions: docs/apps-scale.md.</p>\n"
      << table({"mode", "checksum", "N", "connections", "measured Gbit/s", "model Gbit/s", "limit", "a node",
                "filterd", "receiver", "processes", "busy cores", "model vs measured"},
               rows);
  }

  {
    std::vector<std::vector<std::string>> rows;
    for (const PaperLine& l : paper_comparison(in.medians)) rows.push_back({esc(l.what), esc(l.paper), esc(l.ours)});
    h << "<h2 id=\"paper\">The paper beside ours</h2>\n"
      << "<p>Guedes &amp; Peterson (1997), Paragon nodes on a 1997 network, against this run; compare the "
         "ratios, not the absolute figures.</p>\n"
      << table({"", "paper", "ours"}, rows);
  }

  h << "<h2 id=\"plots\">Plots</h2>\n";
  if (in.plots.empty()) h << "<p class=\"note\">No plots: " << esc(in.plot_note) << "</p>\n";
  for (const std::string& png : in.plots) {
    const std::string bytes = read_file(dir + "/" + png);
    if (bytes.empty()) throw std::runtime_error("cannot read " + dir + "/" + png + " for the report");
    h << "<figure><img alt=\"" << esc(png) << "\" src=\"data:image/png;base64," << base64(bytes)
      << "\"><figcaption class=\"note\">" << esc(png) << "</figcaption></figure>\n";
  }

  {
    std::vector<std::vector<std::string>> rows;
    for (const Row& r : in.runs) {
      rows.push_back({esc(r.mode), onoff(r.csum), num(r.n), num(r.k), num(r.repeat), fmt("%.3f", r.aggregate_gbps),
                      fmt("%.3f", r.seconds), std::to_string(r.bytes), fmt("%.3f", r.system_s_per_gb),
                      fmt("%.1f", r.wall_seconds)});
    }
    h << "<h2 id=\"runs\">Every run</h2>\n<p>" << in.runs.size()
      << " runs; scale.csv has every column, runs/ every process's log.</p>\n"
      << table({"mode", "checksum", "N", "K", "repeat", "Gbit/s", "seconds", "bytes", "system CPU s/GB", "wall s"},
               rows);
  }
  h << "</body>\n</html>\n";

  const std::string path = dir + "/report.html";
  std::ofstream out(path);
  out << h.str();
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace xk::scale
