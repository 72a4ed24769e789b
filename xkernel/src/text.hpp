#pragma once
// Small text helpers shared by the configuration parsers (graph, options).
// Private to the framework: not installed, not part of the API.

#include <string>
#include <string_view>
#include <vector>

namespace xk::text {

inline std::string join(const std::vector<std::string>& words, std::string_view sep) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += sep;
    out += w;
  }
  return out;
}

// ASCII only: specs are ASCII, and the C locale must not change the answer.
inline char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace xk::text
