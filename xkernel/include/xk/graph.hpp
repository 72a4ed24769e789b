#pragma once
// The graph builder: a protocol graph composed at start-up from a text spec,
// in the spirit of x-kernel's graph.comp (docs/graph-spec.md has the syntax):
//
//   driver  net0  dpdk  devargs=net_memif0,role=client
//   eth     eth0  below=net0
//   ipv4    ip0   below=eth0,arp0  addr=192.0.2.10/24 gw=192.0.2.1
//
// A Registry maps kind names ("tcp") to KindSpecs: the kind's parameters and a
// factory. GraphSpec::parse checks a spec against a registry and reports every
// problem it finds, each with its line; Graph::build then calls the factories
// lower layers first, owns the protocols, and destroys them upper layers first.
// All of it is configuration time: errors are exceptions (GraphError).

#include <cstddef>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xk/options.hpp"
#include "xk/protocol.hpp"

namespace xk {

class EventLoop;

// What a factory gets to build one instance.
struct BuildArgs {
  std::string name;              // the instance name ("tcp0")
  std::vector<Protocol*> below;  // already built, in the order of below=
  const Options& options;        // valid during the factory call only: copy what you keep
  EventLoop* loop;               // passed through from Graph::build (may be null)
};

using Factory = std::function<std::unique_ptr<Protocol>(const BuildArgs&)>;

inline constexpr std::size_t unlimited_below = std::numeric_limits<std::size_t>::max();

// One kind of protocol that a spec may instantiate, built by chaining:
//
//   registry.add(KindSpec("tcp", "TCP over IPv4")
//                    .with_below(1, 1)
//                    .with_option(OptionSpec::boolean("csum", "checksum").defaults_to("on"))
//                    .with_factory([](const BuildArgs& a) { return std::make_unique<Tcp>(a); }));
//
// (Not an aggregate with designated initializers: GCC 12's -Wextra wants every
// field of those spelled out.)
struct KindSpec {
  KindSpec() = default;
  explicit KindSpec(std::string kind_name, std::string help_text = {})
      : kind(std::move(kind_name)), help(std::move(help_text)) {}

  KindSpec& with_below(std::size_t min, std::size_t max) & {
    min_below = min;
    max_below = max;
    return *this;
  }
  KindSpec&& with_below(std::size_t min, std::size_t max) && { return std::move(with_below(min, max)); }
  KindSpec& with_positional(OptionSpec p) & {
    positionals.push_back(std::move(p));
    return *this;
  }
  KindSpec&& with_positional(OptionSpec p) && { return std::move(with_positional(std::move(p))); }
  KindSpec& with_option(OptionSpec o) & {
    options.push_back(std::move(o));
    return *this;
  }
  KindSpec&& with_option(OptionSpec o) && { return std::move(with_option(std::move(o))); }
  KindSpec& with_factory(Factory f) & {
    factory = std::move(f);
    return *this;
  }
  KindSpec&& with_factory(Factory f) && { return std::move(with_factory(std::move(f))); }

  std::string kind;
  std::string help;
  // Words after the instance name that are not key=value, in order ("driver
  // net0 dpdk": `type` = dpdk). Each may also be given as name=value.
  std::vector<OptionSpec> positionals;
  // How many instances below= must name (max: unlimited_below for no limit).
  std::size_t min_below = 0;
  std::size_t max_below = 0;
  std::vector<OptionSpec> options;
  Factory factory;
};

// The kinds a spec may use. Callers make their own registry and fill it, e.g.
// with the protocols' register_tcp(Registry&): there is no global one.
class Registry {
 public:
  // Throws std::invalid_argument for a duplicate kind or an inconsistent spec
  // (bad names, no factory, min_below > max_below, a default that does not
  // parse, two parameters with one name, a parameter called "below").
  void add(KindSpec spec);
  const KindSpec* find(std::string_view kind) const noexcept;
  std::shared_ptr<const KindSpec> find_shared(std::string_view kind) const noexcept;
  // Kind names, sorted.
  std::vector<std::string> kinds() const;
  // Every kind with its parameters, for --help.
  std::string help() const;

 private:
  std::map<std::string, std::shared_ptr<const KindSpec>, std::less<>> kinds_;
};

// `value` written as an option value (key=VALUE) of a spec line, quoted and
// escaped when it has spaces, quotes or '#', so parsing gives it back.
std::string spec_value(std::string_view value);

// One problem in a spec. `line` is 1-based; 0 when no line is to blame.
struct GraphDiagnostic {
  std::size_t line = 0;
  std::string message;  // complete: "graph:4: tcp 'tcp0': below=ip9: no instance named 'ip9'"
};

// Every problem found in a spec (sorted by line), or a factory that failed.
// what() is all the messages, one per line.
class GraphError : public std::runtime_error {
 public:
  explicit GraphError(std::vector<GraphDiagnostic> diagnostics);
  // The line of the first problem.
  std::size_t line() const noexcept { return diagnostics_.empty() ? 0 : diagnostics_.front().line; }
  const std::vector<GraphDiagnostic>& diagnostics() const noexcept { return diagnostics_; }

 private:
  std::vector<GraphDiagnostic> diagnostics_;
};

// One checked line of a spec.
struct InstanceSpec {
  std::size_t line = 0;
  std::string name;
  std::shared_ptr<const KindSpec> kind;
  std::vector<std::string> below;  // instance names, in spec order
  Options options;                 // positionals and options, defaults applied
};

// A spec checked against a registry, instances in build order (every instance
// after all those it names in below=; otherwise in spec order).
class GraphSpec {
 public:
  // Throws GraphError listing every problem found.
  static GraphSpec parse(std::string_view text, const Registry& registry, std::string_view source_name = "graph");

  const std::vector<InstanceSpec>& instances() const noexcept { return instances_; }
  const InstanceSpec* find(std::string_view name) const noexcept;
  const std::string& source_name() const noexcept { return source_; }
  // The spec in canonical form, in build order: aligned columns, positionals,
  // below=, then options in declaration order with canonical values (quoted
  // when needed). Only options given in the spec, unless `with_defaults`.
  // Parsing the result gives the same graph.
  std::string to_string(bool with_defaults = false) const;

 private:
  std::string source_;
  std::vector<InstanceSpec> instances_;
  std::map<std::string, std::size_t, std::less<>> by_name_;
};

// A built graph: owns its protocols. Destroying it (or a build that fails
// half-way) destroys them in reverse build order, upper layers first.
class Graph {
 public:
  // Parse and build. Throws GraphError: the spec's problems, or the line of a
  // factory that threw (its message included) or returned null.
  static Graph build(std::string_view text, const Registry& registry, EventLoop* loop = nullptr,
                     std::string_view source_name = "graph");
  static Graph build(GraphSpec spec, EventLoop* loop = nullptr);
  // Read `path` and build; the path names the source in messages.
  static Graph build_file(const std::filesystem::path& path, const Registry& registry, EventLoop* loop = nullptr);

  Graph(Graph&& other) noexcept = default;
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  // nullptr if there is no such instance.
  Protocol* find(std::string_view name) const noexcept;
  template <class T>
  T* find_as(std::string_view name) const noexcept {
    return dynamic_cast<T*>(find(name));
  }
  // In build order (lower layers first).
  std::vector<Protocol*> protocols() const;
  std::size_t size() const noexcept { return protocols_.size(); }
  // Each protocol's counters, in build order: ready for counters_table().
  std::vector<const CounterSet*> counters() const;
  const GraphSpec& spec() const noexcept { return spec_; }
  std::string to_string() const { return spec_.to_string(); }

 private:
  Graph() = default;
  void destroy() noexcept;

  GraphSpec spec_;
  std::vector<std::unique_ptr<Protocol>> protocols_;  // build order; index as in spec_.instances()
};

}  // namespace xk
