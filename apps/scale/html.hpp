#pragma once
// report.html: the experiment on one self-contained page -- the machine, the
// command, the tables, the comparisons, the model and the plots (embedded as
// data: URLs), and every run (docs/apps-scale.md, "The report").

#include <string>
#include <vector>

#include "analysis.hpp"
#include "report.hpp"

namespace xk::scale {

struct ReportInput {
  std::string command;  // the xk-scale command line
  std::string setup;    // the one-line description of the runs
  std::string started;  // when (local time)
  Machine machine;
  std::vector<Row> runs;     // every run
  std::vector<Row> medians;  // one per point
  std::vector<std::string> plots;  // PNG files in the results folder, embedded in this order
  std::string plot_note;           // why there are no plots, if there are none
};

// Writes `dir`/report.html; throws std::runtime_error if it cannot.
void write_report_html(const std::string& dir, const ReportInput& in);

// RFC 4648 base64 (for the embedded images).
std::string base64(const std::string& bytes);

}  // namespace xk::scale
