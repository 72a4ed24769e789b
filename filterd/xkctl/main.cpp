// xkctl: filterd's administration tool (docs/xkctl.md).
//
//   xkctl [--control PATH] [--json] nodes|ports|flows [--node N]|rules|counters|stats
//   xkctl rule add 'EXPR' --node N [--queue Q] [--priority P]
//   xkctl rule del ID

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "xkctl.hpp"

int main(int argc, char** argv) {
  namespace x = xk::filterd::xkctl;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  x::Options o;
  try {
    o = x::parse_args(args);
  } catch (const x::UsageError& e) {
    std::fprintf(stderr, "xkctl: %s\ntry 'xkctl --help'\n", e.what());
    return x::kExitUsage;
  }
  std::string out, err;
  const int rc = x::run(o, out, err);
  std::fputs(out.c_str(), stdout);
  std::fputs(err.c_str(), stderr);
  return rc;
}
