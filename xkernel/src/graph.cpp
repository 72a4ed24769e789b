#include "xk/graph.hpp"

#include "text.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

namespace xk {

namespace {

constexpr std::string_view kBelow = "below";

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Kind, instance and option names: a letter or '_', then letters, digits, '_', '-', '.'.
bool is_name(std::string_view s) {
  if (s.empty() || !(is_alpha(s.front()) || s.front() == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return is_alpha(c) || is_digit(c) || c == '_' || c == '-' || c == '.'; });
}

constexpr std::string_view kNameRule = "letters, digits, '_', '-', '.', starting with a letter or '_'";

// User text inside a message: control and non-ASCII bytes escaped, long text cut.
std::string show(std::string_view s) {
  constexpr std::size_t kMax = 60;
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMax) out += "...";
  return out;
}

using text::join;
using text::lower;

// Edit distance counting a swap of two neighbours as one edit (optimal string
// alignment), case-insensitive: only for "did you mean" hints.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t subst = prev[j - 1] + (lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1])) {
        cur[j] = std::min(cur[j], before[j - 2] + 1);
      }
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// " (did you mean 'tcp'?)" when some candidates are a likely typo of `word`, else "".
std::string suggest(std::string_view word, const std::vector<std::string>& candidates) {
  constexpr std::size_t kLongest = 64;  // garbage gets no hints, and costs nothing
  if (word.empty() || word.size() > kLongest) return {};
  const std::size_t limit = word.size() <= 4 ? 1 : 2;
  std::size_t best = limit;
  std::vector<std::string> close;
  for (const auto& c : candidates) {
    if (c.size() > kLongest) continue;
    const std::size_t d = edit_distance(word, c);
    if (d > best) continue;
    if (d < best) {
      best = d;
      close.clear();
    }
    close.push_back(c);
  }
  if (close.empty()) return {};
  std::sort(close.begin(), close.end());
  if (close.size() > 3) close.resize(3);
  std::string out = " (did you mean ";
  for (std::size_t i = 0; i < close.size(); ++i) {
    if (i > 0) out += i + 1 == close.size() ? " or " : ", ";
    out += "'" + close[i] + "'";
  }
  return out + "?)";
}

std::string plural(std::size_t n, std::string_view word) {
  return std::to_string(n) + " " + std::string(word) + (n == 1 ? "" : "s");
}

// ---- lexing ---------------------------------------------------------------

struct Token {
  std::string text;                    // quotes removed, escapes resolved
  std::size_t eq = std::string::npos;  // first '=' outside quotes, as an index into text
};

// Split one line into words: whitespace separates; double quotes quote (inside
// them a backslash escapes a quote or a backslash); '#' outside quotes ends the
// line. False on an unterminated quote.
bool tokenize(std::string_view line, std::vector<Token>& out) {
  out.clear();
  Token tok;
  bool in_token = false;
  bool in_quote = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_quote) {
      if (c == '\\' && i + 1 < line.size() && (line[i + 1] == '"' || line[i + 1] == '\\')) {
        tok.text += line[++i];
      } else if (c == '"') {
        in_quote = false;
      } else {
        tok.text += c;
      }
      continue;
    }
    if (c == '#') break;
    if (is_space(c)) {
      if (in_token) out.push_back(std::move(tok));
      tok = Token{};
      in_token = false;
      continue;
    }
    in_token = true;
    if (c == '"') {
      in_quote = true;
    } else {
      if (c == '=' && tok.eq == std::string::npos) tok.eq = tok.text.size();
      tok.text += c;
    }
  }
  if (in_quote) return false;
  if (in_token) out.push_back(std::move(tok));
  return true;
}

// How to write a word so that tokenize() reads it back unchanged.
std::string quote_if_needed(std::string_view s, bool positional) {
  bool needs = s.empty();
  for (char c : s) {
    if (is_space(c) || c == '\n' || c == '"' || c == '#' || (positional && c == '=')) needs = true;
  }
  if (!needs) return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// ---- parsing --------------------------------------------------------------

struct Parsed {
  std::size_t line = 0;
  std::string kind_name;
  std::string name;
  std::shared_ptr<const KindSpec> kind;  // null: unknown kind
  std::vector<std::string> below;
  std::string below_text;  // as written, for messages
  Options options;
  std::string who() const { return kind_name + " '" + name + "'"; }
};

class Diagnostics {
 public:
  explicit Diagnostics(std::string_view source) : source_(source) {}

  void add(std::size_t line, std::string_view who, std::string_view what) {
    std::string m = source_;
    if (line != 0) m += ":" + std::to_string(line);
    m += ": ";
    if (!who.empty()) {
      m += who;
      m += ": ";
    }
    m += what;
    list_.push_back(GraphDiagnostic{line, std::move(m)});
  }
  bool empty() const noexcept { return list_.empty(); }
  [[noreturn]] void raise() {
    std::stable_sort(list_.begin(), list_.end(),
                     [](const GraphDiagnostic& a, const GraphDiagnostic& b) { return a.line < b.line; });
    throw GraphError(std::move(list_));
  }

 private:
  std::string source_;
  std::vector<GraphDiagnostic> list_;
};

std::vector<OptionSpec> all_params(const KindSpec& k) {
  std::vector<OptionSpec> params = k.positionals;
  params.insert(params.end(), k.options.begin(), k.options.end());
  return params;
}

std::vector<std::string> param_names(const KindSpec& k) {
  std::vector<std::string> names;
  if (k.max_below > 0) names.emplace_back(kBelow);
  for (const auto& p : k.positionals) names.push_back(p.name);
  for (const auto& p : k.options) names.push_back(p.name);
  return names;
}

// The words after the instance name: positionals, below=, options.
void parse_params(const std::vector<Token>& tokens, Parsed& p, Diagnostics& diags) {
  const KindSpec& k = *p.kind;
  const std::string who = p.who();
  auto fail = [&](const std::string& what) { diags.add(p.line, who, what); };

  // Parameters written on the line, valid or not: a bad value is not also "missing".
  std::set<std::string, std::less<>> written;
  std::size_t next_positional = 0;
  bool seen_option = false;
  bool below_given = false;
  bool below_bad = false;
  for (std::size_t i = 2; i < tokens.size(); ++i) {
    const Token& t = tokens[i];
    if (t.eq == std::string::npos) {
      if (next_positional < k.positionals.size() && !seen_option) {
        const OptionSpec& pos = k.positionals[next_positional++];
        written.insert(pos.name);
        const std::string why = p.options.set(pos.name, t.text);
        if (!why.empty()) fail(pos.name + " '" + show(t.text) + "': " + why);
      } else if (k.positionals.empty()) {
        fail("'" + show(t.text) + "' is not key=value (" + k.kind + " takes no positional parameters)");
      } else if (seen_option) {
        fail("'" + show(t.text) + "' is not key=value (positional parameters come right after the name)");
      } else {
        std::vector<std::string> names;
        for (const auto& pos : k.positionals) names.push_back(pos.name);
        fail("unexpected word '" + show(t.text) + "': " + k.kind + " takes " +
             plural(k.positionals.size(), "positional parameter") + " (" + join(names, ", ") +
             "); options are key=value");
      }
      continue;
    }

    seen_option = true;
    const std::string_view text = t.text;
    const std::string_view key = text.substr(0, t.eq);
    const std::string_view value = text.substr(t.eq + 1);
    if (key.empty()) {
      fail("'" + show(text) + "': missing option name before '='");
    } else if (key == kBelow) {
      if (below_given) {
        fail("below given twice");
        continue;
      }
      below_given = true;
      p.below_text = std::string(value);
      std::size_t start = 0;
      while (true) {
        const auto comma = value.find(',', start);
        const std::string_view item = value.substr(start, comma == value.npos ? value.npos : comma - start);
        if (item.empty()) {
          fail("below=" + show(value) + ": empty instance name");
          below_bad = true;
        } else if (!is_name(item)) {
          fail("below=" + show(value) + ": '" + show(item) + "' is not an instance name (" + std::string(kNameRule) +
               ")");
          below_bad = true;
        } else if (std::find(p.below.begin(), p.below.end(), item) != p.below.end()) {
          fail("below=" + show(value) + ": '" + std::string(item) + "' named twice");
          below_bad = true;
        } else {
          p.below.emplace_back(item);
        }
        if (comma == value.npos) break;
        start = comma + 1;
      }
    } else if (!p.options.declares(key)) {
      const std::vector<std::string> names = param_names(k);
      std::string what = "unknown option '" + show(key) + "'" + suggest(key, names);
      what += names.empty() ? "; " + k.kind + " takes no options" : "; allowed: " + join(names, ", ");
      fail(what);
    } else if (!written.insert(std::string(key)).second) {
      fail(std::string(key) + " given twice");
    } else {
      const std::string why = p.options.set(key, value);
      if (!why.empty()) fail(std::string(key) + "=" + show(value) + ": " + why);
    }
  }

  if (!below_bad) {
    const std::size_t n = p.below.size();
    if (n < k.min_below) {
      fail("needs " + std::string(k.min_below == k.max_below ? "" : "at least ") +
           plural(k.min_below, "lower instance") + " in below=, got " + std::to_string(n));
    } else if (n > k.max_below) {
      if (k.max_below == 0) {
        fail("takes no lower instances (below=)");
      } else {
        fail("takes at most " + plural(k.max_below, "lower instance") + " in below=, got " + std::to_string(n));
      }
    }
  }
  for (const auto& pos : k.positionals) {
    if (pos.required && written.count(pos.name) == 0) {
      fail("missing positional parameter '" + pos.name + "' (" + describe_type(pos) + ")");
    }
  }
  for (const auto& opt : k.options) {
    if (opt.required && written.count(opt.name) == 0) {
      fail("missing required option " + opt.name + "= (" + describe_type(opt) + ")");
    }
  }
  p.options.apply_defaults();
}

// Build order: each instance after everything it names in below=, otherwise in
// spec order. Reports every cycle it meets (once each). Iterative, so a long
// chain cannot exhaust the stack.
std::vector<std::size_t> order_and_find_cycles(const std::vector<Parsed>& all,
                                               const std::vector<std::vector<std::size_t>>& lower, Diagnostics& diags) {
  enum class Mark : std::uint8_t { unseen, active, done };
  std::vector<Mark> mark(all.size(), Mark::unseen);
  std::vector<std::size_t> order;
  std::set<std::vector<std::size_t>> cycles_seen;
  struct Frame {
    std::size_t node;
    std::size_t next;
  };
  std::vector<Frame> stack;
  for (std::size_t root = 0; root < all.size(); ++root) {
    if (mark[root] != Mark::unseen) continue;
    mark[root] = Mark::active;
    stack.push_back({root, 0});
    while (!stack.empty()) {
      const std::size_t v = stack.back().node;
      if (stack.back().next == lower[v].size()) {
        mark[v] = Mark::done;
        order.push_back(v);
        stack.pop_back();
        continue;
      }
      const std::size_t w = lower[v][stack.back().next++];
      if (mark[w] == Mark::unseen) {
        mark[w] = Mark::active;
        stack.push_back({w, 0});
      } else if (mark[w] == Mark::active) {
        // The cycle is w .. v on the stack; start it at its earliest line so
        // each cycle reads the same however it was reached.
        std::vector<std::size_t> cycle;
        auto it = std::find_if(stack.begin(), stack.end(), [w](const Frame& f) { return f.node == w; });
        for (; it != stack.end(); ++it) cycle.push_back(it->node);
        std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()), cycle.end());
        if (!cycles_seen.insert(cycle).second) continue;
        std::string path;
        for (std::size_t n : cycle) path += all[n].name + " -> ";
        path += all[cycle.front()].name;
        diags.add(all[cycle.front()].line, all[cycle.front()].who(), "cycle in below=: " + path);
      }
    }
  }
  return order;
}

}  // namespace

std::string spec_value(std::string_view value) { return quote_if_needed(value, false); }

// ---- Registry -------------------------------------------------------------

void Registry::add(KindSpec spec) {
  auto bad = [&](const std::string& what) {
    throw std::invalid_argument("graph registry: kind '" + spec.kind + "': " + what);
  };
  if (!is_name(spec.kind)) bad("invalid kind name (" + std::string(kNameRule) + ")");
  if (kinds_.count(spec.kind) != 0) bad("already registered");
  if (!spec.factory) bad("no factory");
  if (spec.min_below > spec.max_below) bad("min_below > max_below");
  std::set<std::string, std::less<>> names;
  for (const OptionSpec& p : all_params(spec)) {
    if (!is_name(p.name)) bad("invalid option name '" + p.name + "' (" + std::string(kNameRule) + ")");
    if (p.name == kBelow) bad("'below' is reserved for the lower instances");
    if (!names.insert(p.name).second) bad("option '" + p.name + "' declared twice");
    if (p.type == OptionType::choice && p.choices.empty()) bad("option '" + p.name + "': empty choice list");
    if (p.int_min > p.int_max || !(p.real_min <= p.real_max) || p.size_min > p.size_max) {
      bad("option '" + p.name + "': min > max");
    }
    if (p.required && p.default_text) bad("option '" + p.name + "' is required and has a default");
    if (p.default_text) {
      OptionValue v;
      std::string why;
      if (!parse_option_value(p, *p.default_text, v, why)) {
        bad("option '" + p.name + "': default '" + *p.default_text + "': " + why);
      }
    }
  }
  std::string key = spec.kind;
  kinds_.emplace(std::move(key), std::make_shared<const KindSpec>(std::move(spec)));
}

const KindSpec* Registry::find(std::string_view kind) const noexcept {
  auto it = kinds_.find(kind);
  return it == kinds_.end() ? nullptr : it->second.get();
}

std::shared_ptr<const KindSpec> Registry::find_shared(std::string_view kind) const noexcept {
  auto it = kinds_.find(kind);
  return it == kinds_.end() ? nullptr : it->second;
}

std::vector<std::string> Registry::kinds() const {
  std::vector<std::string> out;
  for (const auto& [name, spec] : kinds_) out.push_back(name);
  return out;
}

std::string Registry::help() const {
  std::string out;
  auto param = [&](const OptionSpec& p, bool positional) {
    out += "  " + p.name + (positional ? " (positional)" : "=") + "  " + describe_type(p);
    if (p.required) out += ", required";
    if (p.default_text) out += ", default " + *p.default_text;
    if (!p.help.empty()) out += ": " + p.help;
    out += "\n";
  };
  for (const auto& [name, k] : kinds_) {
    out += name;
    if (!k->help.empty()) out += ": " + k->help;
    out += "\n";
    if (k->max_below > 0) {
      out += "  below=  ";
      if (k->min_below == k->max_below) {
        out += plural(k->min_below, "lower instance");
      } else if (k->max_below == unlimited_below) {
        out += "at least " + plural(k->min_below, "lower instance");
      } else {
        out += std::to_string(k->min_below) + " to " + plural(k->max_below, "lower instance");
      }
      out += "\n";
    }
    for (const auto& p : k->positionals) param(p, true);
    for (const auto& p : k->options) param(p, false);
  }
  return out;
}

// ---- GraphError -----------------------------------------------------------

namespace {
std::string join_messages(const std::vector<GraphDiagnostic>& d) {
  std::string out;
  for (const auto& x : d) {
    if (!out.empty()) out += "\n";
    out += x.message;
  }
  return out;
}
}  // namespace

GraphError::GraphError(std::vector<GraphDiagnostic> diagnostics)
    : std::runtime_error(join_messages(diagnostics)), diagnostics_(std::move(diagnostics)) {}

// ---- GraphSpec ------------------------------------------------------------

GraphSpec GraphSpec::parse(std::string_view text, const Registry& registry, std::string_view source_name) {
  Diagnostics diags(source_name);
  std::vector<Parsed> all;
  std::map<std::string, std::size_t, std::less<>> by_name;
  const std::vector<std::string> kind_names = registry.kinds();

  std::vector<Token> tokens;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t nl = text.find('\n', pos);
    const std::string_view line = text.substr(pos, nl == text.npos ? text.npos : nl - pos);
    pos = nl == text.npos ? text.size() + 1 : nl + 1;
    ++line_no;

    if (!tokenize(line, tokens)) {
      diags.add(line_no, {}, "unterminated quote");
      continue;
    }
    if (tokens.empty()) continue;

    const Token& kind_tok = tokens[0];
    if (kind_tok.eq != std::string::npos || !is_name(kind_tok.text)) {
      diags.add(line_no, {}, "expected a kind at the start of the line, found '" + show(kind_tok.text) + "'");
      continue;
    }
    const std::string& kind_name = kind_tok.text;
    const bool has_name = tokens.size() >= 2 && tokens[1].eq == std::string::npos && is_name(tokens[1].text);
    const auto earlier = has_name ? by_name.find(tokens[1].text) : by_name.end();

    Parsed p;
    p.line = line_no;
    p.kind_name = kind_name;
    p.kind = registry.find_shared(kind_name);
    if (!p.kind) {
      std::string what = "unknown kind '" + kind_name + "'";
      if (has_name) what += " for instance '" + tokens[1].text + "'";
      const std::string hint = suggest(kind_name, kind_names);
      what += hint.empty() ? "; known kinds: " + join(kind_names, ", ") : hint;
      diags.add(line_no, {}, what);
      // Still define the name, so lines naming it in below= are not blamed too.
      if (has_name && earlier == by_name.end()) {
        p.name = tokens[1].text;
        by_name.emplace(p.name, all.size());
        all.push_back(std::move(p));
      }
      continue;
    }
    if (tokens.size() < 2) {
      diags.add(line_no, kind_name, "missing instance name");
      continue;
    }
    if (tokens[1].eq != std::string::npos) {
      diags.add(line_no, kind_name, "expected an instance name after the kind, found '" + show(tokens[1].text) + "'");
      continue;
    }
    if (!has_name) {
      diags.add(line_no, kind_name,
                "invalid instance name '" + show(tokens[1].text) + "' (" + std::string(kNameRule) + ")");
      continue;
    }
    p.name = tokens[1].text;
    if (earlier != by_name.end()) {
      diags.add(line_no, p.who(),
                "duplicate instance name '" + p.name + "' (first defined on line " +
                    std::to_string(all[earlier->second].line) + ")");
      continue;
    }
    p.options = Options(p.kind->kind, all_params(*p.kind));
    parse_params(tokens, p, diags);
    by_name.emplace(p.name, all.size());
    all.push_back(std::move(p));
  }

  if (all.empty() && diags.empty()) diags.add(0, {}, "the spec defines no instances");

  // Resolve below= now that every line is read: forward references are fine.
  std::vector<std::string> instance_names;
  for (const auto& p : all) instance_names.push_back(p.name);
  std::vector<std::vector<std::size_t>> lower(all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    for (const auto& name : all[i].below) {
      auto it = by_name.find(name);
      if (it == by_name.end()) {
        diags.add(
            all[i].line, all[i].who(),
            "below=" + show(all[i].below_text) + ": no instance named '" + name + "'" + suggest(name, instance_names));
        continue;
      }
      lower[i].push_back(it->second);
    }
  }
  const std::vector<std::size_t> order = order_and_find_cycles(all, lower, diags);
  if (!diags.empty()) diags.raise();

  GraphSpec spec;
  spec.source_ = std::string(source_name);
  spec.instances_.reserve(all.size());
  for (std::size_t i : order) {
    Parsed& p = all[i];
    spec.by_name_.emplace(p.name, spec.instances_.size());
    spec.instances_.push_back(
        InstanceSpec{p.line, std::move(p.name), std::move(p.kind), std::move(p.below), std::move(p.options)});
  }
  return spec;
}

const InstanceSpec* GraphSpec::find(std::string_view name) const noexcept {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &instances_[it->second];
}

std::string GraphSpec::to_string(bool with_defaults) const {
  std::size_t kind_width = 0;
  std::size_t name_width = 0;
  for (const auto& inst : instances_) {
    kind_width = std::max(kind_width, inst.kind->kind.size());
    name_width = std::max(name_width, inst.name.size());
  }
  std::string out;
  for (const auto& inst : instances_) {
    const KindSpec& k = *inst.kind;
    const Options& o = inst.options;
    auto shown = [&](const OptionSpec& p) { return with_defaults ? o.has(p.name) : o.given(p.name); };
    std::vector<std::string> words;
    // Positionals by position while they run unbroken from the first; any
    // after a gap by name.
    bool by_position = true;
    for (const auto& p : k.positionals) {
      if (!shown(p)) {
        by_position = false;
        continue;
      }
      const std::string v = o.text(p.name);
      words.push_back(by_position ? quote_if_needed(v, true) : p.name + "=" + quote_if_needed(v, false));
    }
    if (!inst.below.empty()) words.push_back(std::string(kBelow) + "=" + join(inst.below, ","));
    for (const auto& p : k.options) {
      if (shown(p)) words.push_back(p.name + "=" + quote_if_needed(o.text(p.name), false));
    }
    std::string line = k.kind;
    line.resize(kind_width, ' ');
    line += " ";
    if (words.empty()) {
      line += inst.name;
    } else {
      std::string name = inst.name;
      name.resize(name_width, ' ');
      line += name + " " + join(words, " ");
    }
    out += line + "\n";
  }
  return out;
}

// ---- Graph ----------------------------------------------------------------

Graph Graph::build(std::string_view text, const Registry& registry, EventLoop* loop, std::string_view source_name) {
  return build(GraphSpec::parse(text, registry, source_name), loop);
}

Graph Graph::build(GraphSpec spec, EventLoop* loop) {
  Graph g;
  g.spec_ = std::move(spec);
  const auto& instances = g.spec_.instances();
  g.protocols_.reserve(instances.size());
  for (const InstanceSpec& inst : instances) {
    std::vector<Protocol*> below;
    // Build order puts every lower instance first, so each is already here.
    for (const auto& name : inst.below) {
      const auto i = static_cast<std::size_t>(g.spec_.find(name) - instances.data());
      below.push_back(g.protocols_.at(i).get());
    }
    const BuildArgs args{inst.name, std::move(below), inst.options, loop};
    std::string failure;
    try {
      std::unique_ptr<Protocol> p = inst.kind->factory(args);
      if (!p) {
        failure = "the factory returned no protocol";
      } else if (p->name() != inst.name) {
        failure = "the factory built a protocol named '" + p->name() + "'";
      } else {
        g.protocols_.push_back(std::move(p));
      }
    } catch (const std::exception& e) {
      failure = std::string("cannot build: ") + e.what();
    } catch (...) {
      failure = "cannot build: unknown exception";
    }
    // Throwing unwinds `g`, which destroys what was built, upper layers first.
    if (!failure.empty()) {
      Diagnostics diags(g.spec_.source_name());
      diags.add(inst.line, inst.kind->kind + " '" + inst.name + "'", failure);
      diags.raise();
    }
  }
  return g;
}

Graph Graph::build_file(const std::filesystem::path& path, const Registry& registry, EventLoop* loop) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad()) {
    throw GraphError({GraphDiagnostic{0, path.string() + ": cannot read the graph spec"}});
  }
  return build(text.str(), registry, loop, path.string());
}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    destroy();
    spec_ = std::move(other.spec_);
    protocols_ = std::move(other.protocols_);
  }
  return *this;
}

Graph::~Graph() { destroy(); }

void Graph::destroy() noexcept {
  // Upper layers first: a protocol may still hold sessions of those below it.
  while (!protocols_.empty()) protocols_.pop_back();
}

Protocol* Graph::find(std::string_view name) const noexcept {
  const InstanceSpec* inst = spec_.find(name);
  if (inst == nullptr) return nullptr;
  const auto i = static_cast<std::size_t>(inst - spec_.instances().data());
  return i < protocols_.size() ? protocols_[i].get() : nullptr;
}

std::vector<Protocol*> Graph::protocols() const {
  std::vector<Protocol*> out;
  for (const auto& p : protocols_) out.push_back(p.get());
  return out;
}

std::vector<const CounterSet*> Graph::counters() const {
  std::vector<const CounterSet*> out;
  for (const auto& p : protocols_) out.push_back(&p->counters());
  return out;
}

}  // namespace xk
