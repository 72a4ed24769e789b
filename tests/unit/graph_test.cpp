// The graph builder: a spec in, a graph of protocols out, or a GraphError that
// names the line, the instance and what is wrong. The kinds here are fakes
// that record when they are built and destroyed and what options they got.
#include "xk/graph.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace xk {
namespace {

using Log = std::vector<std::string>;

// A protocol that logs its construction and destruction, and opens one session
// on each protocol below it (held until it dies), so destroying a lower layer
// before an upper one would release a session of a dead protocol: ASan sees it.
class Fake : public Protocol {
 public:
  Fake(const BuildArgs& a, std::string kind, Log& log)
      : Protocol(a.name, std::move(kind), a.below), loop(a.loop), log_(log) {
    log_.push_back("+" + name());
    for (Protocol* p : below()) {
      Participants parts;
      auto s = p->open(*this, parts);
      if (s) lower_sessions_.push_back(std::move(*s));
    }
  }
  ~Fake() override {
    lower_sessions_.clear();
    log_.push_back("-" + name());
  }

  class S final : public Session {
   public:
    S(Fake& self, Protocol* upper) : Session(self, upper), self_(self) { ++self_.sessions_open; }
    ~S() override { --self_.sessions_open; }
    Status push(Msg) override { return Errc::unsupported; }
    Status pop(Session&, Msg) override { return Errc::unsupported; }

   private:
    Fake& self_;
  };
  Result<SessionRef> open(Protocol& upper, Participants&) override { return SessionRef(make_ref<S>(*this, &upper)); }

  int sessions_open = 0;
  EventLoop* loop;

 private:
  Log& log_;
  std::vector<SessionRef> lower_sessions_;
};

struct Driver final : Fake {
  Driver(const BuildArgs& a, Log& log)
      : Fake(a, "driver", log),
        type(a.options.get_string("type")),
        devargs(a.options.has("devargs") ? a.options.get_string("devargs") : ""),
        mtu(a.options.get_int("mtu")) {}
  std::string type;
  std::string devargs;
  std::int64_t mtu;
};

struct Eth final : Fake {
  Eth(const BuildArgs& a, Log& log)
      : Fake(a, "eth", log), ring(a.options.get_size("ring")), has_mac(a.options.has("mac")) {
    if (has_mac) mac = a.options.get_mac("mac");
  }
  std::uint64_t ring;
  bool has_mac;
  MacAddr mac;
};

struct Ipv4 final : Fake {
  Ipv4(const BuildArgs& a, Log& log)
      : Fake(a, "ipv4", log),
        addr(a.options.get_cidr("addr")),
        has_gw(a.options.has("gw")),
        ttl(a.options.get_int("ttl")) {
    if (has_gw) gw = a.options.get_ipv4("gw");
  }
  Ipv4Cidr addr;
  bool has_gw;
  Ipv4Addr gw;
  std::int64_t ttl;
};

struct Fault final : Fake {
  Fault(const BuildArgs& a, Log& log)
      : Fake(a, "fault", log), loss(a.options.get_real("loss")), reorder(a.options.get_real("reorder")) {}
  double loss;
  double reorder;
};

struct Tcp final : Fake {
  Tcp(const BuildArgs& a, Log& log)
      : Fake(a, "tcp", log),
        csum(a.options.get_bool("csum")),
        wscale(a.options.get_int("wscale")),
        sack(a.options.get_bool("sack")),
        cc(a.options.get_string("cc")) {
    if (a.options.has("ports")) ports = a.options.get_list("ports");
  }
  bool csum;
  std::int64_t wscale;
  bool sack;
  std::string cc;
  std::vector<std::string> ports;
};

struct Plain final : Fake {
  Plain(const BuildArgs& a, std::string kind, Log& log) : Fake(a, std::move(kind), log) {}
};

class GraphTest : public ::testing::Test {
 protected:
  GraphTest() {
    reg.add(KindSpec("driver", "bottom of the graph")
                .with_positional(OptionSpec::choice("type", {"dpdk", "loopback", "pcap"}, "driver type").mandatory())
                .with_option(OptionSpec::string("devargs", "DPDK device arguments"))
                .with_option(OptionSpec::integer("mtu", 68, 9000).defaults_to("1500"))
                .with_factory([this](const BuildArgs& a) { return std::make_unique<Driver>(a, log); }));
    reg.add(KindSpec("eth")
                .with_below(1, 1)
                .with_option(OptionSpec::mac("mac"))
                .with_option(OptionSpec::size("ring", 64, 65536).defaults_to("1k"))
                .with_factory([this](const BuildArgs& a) { return std::make_unique<Eth>(a, log); }));
    reg.add(KindSpec("arp").with_below(1, 1).with_factory(
        [this](const BuildArgs& a) { return std::make_unique<Plain>(a, "arp", log); }));
    reg.add(KindSpec("ipv4")
                .with_below(1, 2)
                .with_option(OptionSpec::cidr("addr").mandatory())
                .with_option(OptionSpec::ipv4("gw"))
                .with_option(OptionSpec::integer("ttl", 1, 255).defaults_to("64"))
                .with_factory([this](const BuildArgs& a) { return std::make_unique<Ipv4>(a, log); }));
    reg.add(KindSpec("fault")
                .with_below(1, 1)
                .with_option(OptionSpec::real("loss", 0, 1).defaults_to("0"))
                .with_option(OptionSpec::real("reorder", 0, 1).defaults_to("0"))
                .with_factory([this](const BuildArgs& a) { return std::make_unique<Fault>(a, log); }));
    reg.add(KindSpec("tcp")
                .with_below(1, 1)
                .with_option(OptionSpec::boolean("csum").defaults_to("on"))
                .with_option(OptionSpec::integer("wscale", 0, 14).defaults_to("7"))
                .with_option(OptionSpec::boolean("sack").defaults_to("off"))
                .with_option(OptionSpec::choice("cc", {"reno", "cubic"}).defaults_to("reno"))
                .with_option(OptionSpec::list("ports"))
                .with_factory([this](const BuildArgs& a) { return std::make_unique<Tcp>(a, log); }));
    reg.add(KindSpec("udp").with_below(1, 1).with_factory(
        [this](const BuildArgs& a) { return std::make_unique<Plain>(a, "udp", log); }));
    reg.add(KindSpec("capture")
                .with_below(1, 1)
                .with_option(OptionSpec::string("path"))
                .with_factory([this](const BuildArgs& a) { return std::make_unique<Plain>(a, "capture", log); }));
    reg.add(KindSpec("mux").with_below(2, unlimited_below).with_factory([this](const BuildArgs& a) {
      return std::make_unique<Plain>(a, "mux", log);
    }));
    // A plain kind with no options, for chains and cycles.
    reg.add(KindSpec("node").with_below(0, unlimited_below).with_factory([this](const BuildArgs& a) {
      return std::make_unique<Plain>(a, "node", log);
    }));
  }

  // The first problem reported for `spec`; fails the test if it builds.
  GraphError error_of(std::string_view spec) {
    try {
      Graph g = Graph::build(spec, reg);
      ADD_FAILURE() << "built, but expected an error:\n" << spec;
    } catch (const GraphError& e) {
      return e;
    }
    return GraphError({});
  }

  // Expects `spec` to fail with a problem on `line` whose message has every phrase.
  void expect_error(std::string_view spec, std::size_t line, std::initializer_list<std::string_view> phrases) {
    const GraphError e = error_of(spec);
    bool found = false;
    for (const auto& d : e.diagnostics()) {
      if (d.line != line) continue;
      bool all = true;
      for (auto ph : phrases) all = all && d.message.find(ph) != std::string::npos;
      found = found || all;
    }
    EXPECT_TRUE(found) << "no problem on line " << line << " with the expected phrases; got:\n" << e.what();
  }

  Log log;
  Registry reg;
};

constexpr std::string_view kExample =
    "driver  net0  dpdk  devargs=net_memif0,role=client,socket=/run/xk/filterd.memif\n"
    "eth     eth0  below=net0\n"
    "arp     arp0  below=eth0\n"
    "ipv4    ip0   below=eth0,arp0  addr=192.0.2.10/24 gw=192.0.2.1\n"
    "fault   f0    below=ip0 loss=0.01 reorder=0.005   # optional micro-protocol\n"
    "tcp     tcp0  below=ip0 csum=on wscale=14 sack=on cc=cubic\n";

// ---- building ---------------------------------------------------------------

TEST_F(GraphTest, ExampleBuildsWithTypedOptions) {
  Graph g = Graph::build(kExample, reg);
  ASSERT_EQ(g.size(), 6u);

  auto* net0 = g.find_as<Driver>("net0");
  ASSERT_NE(net0, nullptr);
  EXPECT_EQ(net0->type, "dpdk");
  EXPECT_EQ(net0->devargs, "net_memif0,role=client,socket=/run/xk/filterd.memif") << "split at the first '='";
  EXPECT_EQ(net0->mtu, 1500) << "default";
  EXPECT_TRUE(net0->below().empty());

  auto* eth0 = g.find_as<Eth>("eth0");
  ASSERT_NE(eth0, nullptr);
  EXPECT_EQ(eth0->ring, 1024u);
  EXPECT_FALSE(eth0->has_mac);

  auto* ip0 = g.find_as<Ipv4>("ip0");
  ASSERT_NE(ip0, nullptr);
  EXPECT_EQ(ip0->addr.addr, Ipv4Addr{0xC000020A});
  EXPECT_EQ(ip0->addr.prefix_len, 24);
  EXPECT_EQ(ip0->addr.network(), Ipv4Addr{0xC0000200});
  EXPECT_EQ(ip0->addr.netmask(), Ipv4Addr{0xFFFFFF00});
  ASSERT_TRUE(ip0->has_gw);
  EXPECT_EQ(ip0->gw, Ipv4Addr{0xC0000201});
  EXPECT_EQ(ip0->ttl, 64);
  ASSERT_EQ(ip0->below().size(), 2u);
  EXPECT_EQ(ip0->below()[0], g.find("eth0")) << "below= order kept";
  EXPECT_EQ(ip0->below()[1], g.find("arp0"));

  auto* f0 = g.find_as<Fault>("f0");
  ASSERT_NE(f0, nullptr);
  EXPECT_DOUBLE_EQ(f0->loss, 0.01);
  EXPECT_DOUBLE_EQ(f0->reorder, 0.005);

  auto* tcp0 = g.find_as<Tcp>("tcp0");
  ASSERT_NE(tcp0, nullptr);
  EXPECT_TRUE(tcp0->csum);
  EXPECT_EQ(tcp0->wscale, 14);
  EXPECT_TRUE(tcp0->sack);
  EXPECT_EQ(tcp0->cc, "cubic");
  EXPECT_EQ(tcp0->below(), std::vector<Protocol*>{ip0});
  EXPECT_EQ(tcp0->kind(), "tcp");

  EXPECT_EQ(g.find("nope"), nullptr);
  EXPECT_EQ(g.find_as<Tcp>("ip0"), nullptr) << "wrong type";
}

TEST_F(GraphTest, BuildsBottomUpAndDestroysTopDown) {
  {
    Graph g = Graph::build(kExample, reg);
    EXPECT_EQ(log, (Log{"+net0", "+eth0", "+arp0", "+ip0", "+f0", "+tcp0"}));
    std::vector<std::string> names;
    for (Protocol* p : g.protocols()) names.push_back(p->name());
    EXPECT_EQ(names, (std::vector<std::string>{"net0", "eth0", "arp0", "ip0", "f0", "tcp0"}));
    EXPECT_EQ(g.find_as<Ipv4>("ip0")->sessions_open, 2) << "f0 and tcp0 hold sessions of ip0";
    log.clear();
  }
  EXPECT_EQ(log, (Log{"-tcp0", "-f0", "-ip0", "-arp0", "-eth0", "-net0"}));
}

TEST_F(GraphTest, ForwardReferencesAreBuiltLowerFirst) {
  // Written top-down: each line names instances defined after it.
  Graph g = Graph::build(
      "tcp tcp0 below=ip0\n"
      "udp udp0 below=ip0\n"
      "ipv4 ip0 below=eth0 addr=10.0.0.1/8\n"
      "eth eth0 below=net0\n"
      "driver net0 loopback\n",
      reg);
  EXPECT_EQ(log, (Log{"+net0", "+eth0", "+ip0", "+tcp0", "+udp0"}));
  EXPECT_EQ(g.find("tcp0")->below()[0], g.find("ip0"));
  EXPECT_EQ(g.spec().find("ip0")->line, 3u);
}

TEST_F(GraphTest, PassesTheEventLoopThrough) {
  alignas(64) unsigned char storage[64] = {};
  auto* loop = reinterpret_cast<EventLoop*>(storage);
  Graph g = Graph::build("driver net0 loopback\n", reg, loop);
  EXPECT_EQ(g.find_as<Driver>("net0")->loop, loop);
  Graph h = Graph::build("driver net0 loopback\n", reg);
  EXPECT_EQ(h.find_as<Driver>("net0")->loop, nullptr);
}

TEST_F(GraphTest, CollectsCountersInBuildOrder) {
  Graph g = Graph::build(kExample, reg);
  g.find("tcp0")->counters().add("retransmits").inc(3);
  const auto sets = g.counters();
  ASSERT_EQ(sets.size(), 6u);
  EXPECT_EQ(sets.front()->owner(), "net0");
  EXPECT_EQ(sets.back()->owner(), "tcp0");
  const std::string table = counters_table(sets);
  EXPECT_NE(table.find("retransmits"), std::string::npos);
  EXPECT_NE(table.find("eth0"), std::string::npos);
}

TEST_F(GraphTest, MoveKeepsOneOwnerAndAssignmentDestroysTheOldGraphTopDown) {
  Graph a = Graph::build("driver n0 loopback\neth e0 below=n0\n", reg);
  Graph b = std::move(a);
  EXPECT_EQ(b.size(), 2u);
  EXPECT_NE(b.find("e0"), nullptr);
  Graph c = Graph::build("driver n1 pcap\n", reg);
  log.clear();
  c = std::move(b);
  EXPECT_EQ(log, (Log{"-n1"}));
  EXPECT_NE(c.find("e0"), nullptr);
  log.clear();
  { Graph d = std::move(c); }
  EXPECT_EQ(log, (Log{"-e0", "-n0"}));
}

TEST_F(GraphTest, ParseThenBuildAndOutliveTheRegistry) {
  std::optional<GraphSpec> spec;
  {
    Registry local;
    local.add(KindSpec("node")
                  .with_below(0, unlimited_below)
                  .with_option(OptionSpec::integer("n", 0, 9).defaults_to("4"))
                  .with_factory([this](const BuildArgs& a) { return std::make_unique<Plain>(a, "node", log); }));
    spec = GraphSpec::parse("node top below=bottom\nnode bottom n=2\n", local);
  }
  // The spec shares the kinds it uses, so it stays whole after the registry goes.
  EXPECT_EQ(spec->instances().size(), 2u);
  EXPECT_EQ(spec->find("top")->options.get_int("n"), 4);
  Graph g = Graph::build(std::move(*spec));
  EXPECT_EQ(log, (Log{"+bottom", "+top"}));
  EXPECT_EQ(g.to_string(), "node bottom n=2\nnode top    below=bottom\n");
}

TEST_F(GraphTest, LongChainNeedsNoDeepRecursion) {
  // Written top-down, so ordering it walks the whole chain from the first line.
  constexpr int kDepth = 20000;
  std::string spec;
  for (int i = 0; i < kDepth; ++i) spec += "node n" + std::to_string(i) + " below=n" + std::to_string(i + 1) + "\n";
  spec += "node n" + std::to_string(kDepth) + "\n";
  GraphSpec parsed = GraphSpec::parse(spec, reg);
  ASSERT_EQ(parsed.instances().size(), static_cast<std::size_t>(kDepth + 1));
  EXPECT_EQ(parsed.instances().front().name, "n" + std::to_string(kDepth));
  EXPECT_EQ(parsed.instances().back().name, "n0");
}

// ---- lexical details --------------------------------------------------------

TEST_F(GraphTest, CommentsBlankLinesTabsAndCrlf) {
  Graph g = Graph::build(
      "# a comment line\r\n"
      "\r\n"
      "   \t  \r\n"
      "\tdriver\tnet0\tpcap\t# trailing comment\r\n"
      "eth eth0 below=net0 ring=4k#no space before the comment\r\n"
      "  # indented comment\r\n"
      "capture cap0 below=eth0 path=\"/tmp/a # b.pcap\"\r\n"
      "ipv4 ip0 below=cap0 addr=192.0.2.10/24",  // no final newline
      reg);
  ASSERT_EQ(g.size(), 4u);
  EXPECT_EQ(g.find_as<Driver>("net0")->type, "pcap");
  EXPECT_EQ(g.find_as<Eth>("eth0")->ring, 4096u);
  EXPECT_EQ(g.spec().find("cap0")->options.get_string("path"), "/tmp/a # b.pcap");
  EXPECT_EQ(g.spec().find("cap0")->line, 7u);
  EXPECT_EQ(g.spec().find("ip0")->line, 8u);
}

TEST_F(GraphTest, QuotedValues) {
  Graph g = Graph::build(
      "driver net0 \"loopback\"\n"
      "capture c0 below=net0 path=\"my \\\"odd\\\" file\\\\x.pcap\"\n"
      "capture c1 below=c0 path=\"\"\n"
      "capture c2 below=c1 path=a\\b\n",
      reg);
  EXPECT_EQ(g.find_as<Driver>("net0")->type, "loopback");
  EXPECT_EQ(g.spec().find("c0")->options.get_string("path"), "my \"odd\" file\\x.pcap");
  EXPECT_EQ(g.spec().find("c1")->options.get_string("path"), "");
  EXPECT_EQ(g.spec().find("c2")->options.get_string("path"), "a\\b") << "backslash is literal outside quotes";
}

TEST_F(GraphTest, PositionalMayBeGivenByName) {
  Graph g = Graph::build("driver net0 type=pcap mtu=9000\n", reg);
  EXPECT_EQ(g.find_as<Driver>("net0")->type, "pcap");
  EXPECT_EQ(g.find_as<Driver>("net0")->mtu, 9000);
  EXPECT_EQ(g.to_string(), "driver net0 pcap mtu=9000\n");
}

// ---- options ------------------------------------------------------------------

TEST_F(GraphTest, OptionTypesParseAndDefaultsApply) {
  GraphSpec s = GraphSpec::parse(
      "driver net0 dpdk mtu=0x100\n"
      "eth eth0 below=net0 mac=02:00:5E:10:00:ff ring=64\n"
      "ipv4 ip0 below=eth0 addr=10.1.2.3/0\n"
      "tcp t0 below=ip0 csum=FALSE sack=yes ports=80,443,8080\n"
      "tcp t1 below=ip0 csum=0 sack=1 ports=\"\"\n"
      "tcp t2 below=ip0\n"
      "fault f0 below=ip0 loss=1 reorder=2.5e-1\n",
      reg);
  const Options& drv = s.find("net0")->options;
  EXPECT_EQ(drv.get_int("mtu"), 256);
  EXPECT_TRUE(drv.given("mtu"));
  EXPECT_FALSE(drv.has("devargs"));
  EXPECT_EQ(s.find("eth0")->options.get_mac("mac"), (MacAddr{{0x02, 0x00, 0x5e, 0x10, 0x00, 0xff}}));
  EXPECT_EQ(s.find("eth0")->options.get_size("ring"), 64u);
  const Ipv4Cidr any = s.find("ip0")->options.get_cidr("addr");
  EXPECT_EQ(any.prefix_len, 0);
  EXPECT_EQ(any.netmask(), Ipv4Addr{0});
  EXPECT_TRUE(any.contains(Ipv4Addr{0x01020304}));

  const Options& t0 = s.find("t0")->options;
  EXPECT_FALSE(t0.get_bool("csum"));
  EXPECT_TRUE(t0.get_bool("sack"));
  EXPECT_EQ(t0.get_list("ports"), (std::vector<std::string>{"80", "443", "8080"}));
  EXPECT_EQ(t0.get_int("wscale"), 7) << "default";
  EXPECT_TRUE(t0.has("wscale"));
  EXPECT_FALSE(t0.given("wscale"));
  const Options& t1 = s.find("t1")->options;
  EXPECT_FALSE(t1.get_bool("csum"));
  EXPECT_TRUE(t1.get_bool("sack"));
  EXPECT_TRUE(t1.get_list("ports").empty());
  const Options& t2 = s.find("t2")->options;
  EXPECT_TRUE(t2.get_bool("csum"));
  EXPECT_FALSE(t2.get_bool("sack"));
  EXPECT_EQ(t2.get_string("cc"), "reno");
  EXPECT_FALSE(t2.has("ports"));
  EXPECT_DOUBLE_EQ(s.find("f0")->options.get_real("loss"), 1.0);
  EXPECT_DOUBLE_EQ(s.find("f0")->options.get_real("reorder"), 0.25);
  EXPECT_DOUBLE_EQ(t2.get_real("wscale"), 7.0) << "an integer reads as a real";
}

TEST_F(GraphTest, GettersRejectUndeclaredWrongTypeAndMissingValues) {
  GraphSpec s = GraphSpec::parse("driver net0 dpdk\neth eth0 below=net0\n", reg);
  const Options& o = s.find("eth0")->options;
  EXPECT_THROW((void)o.get_int("nope"), std::invalid_argument);
  EXPECT_THROW((void)o.has("nope"), std::invalid_argument);
  EXPECT_THROW((void)o.get_bool("ring"), std::invalid_argument);
  EXPECT_THROW((void)o.get_mac("mac"), std::invalid_argument) << "optional, not given, no default";
  try {
    (void)o.get_int("nope");
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "get_int(\"nope\"): kind 'eth' declares no option 'nope'");
  }
}

TEST(Options, SizeIntegerAndRealEdges) {
  auto check = [](const OptionSpec& spec, std::string_view text) {
    OptionValue v;
    std::string why;
    const bool ok = parse_option_value(spec, text, v, why);
    return ok ? format_option_value(spec, v) : "error: " + why;
  };
  const OptionSpec size = OptionSpec::size("s", 0, std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(check(size, "2K"), "2k");
  EXPECT_EQ(check(size, "3m"), "3m");
  EXPECT_EQ(check(size, "1g"), "1g");
  EXPECT_EQ(check(size, "1536"), "1536");
  EXPECT_EQ(check(size, "2048"), "2k");
  EXPECT_EQ(check(size, "0"), "0");
  EXPECT_EQ(check(size, "17179869184g"), "error: too large for 64 bits");
  EXPECT_EQ(check(size, "99999999999999999999999"), "error: too large for 64 bits");
  for (std::string_view bad : {"", "k", "-1", "+1", "1kb", "1 k", "0x10", "1.5k"}) {
    EXPECT_EQ(check(size, bad).rfind("error: expected a size", 0), 0u) << bad;
  }
  const OptionSpec ranged = OptionSpec::size("r", 1024, 65536);
  EXPECT_EQ(check(ranged, "65537"), "error: out of range 1k..64k");

  const OptionSpec any =
      OptionSpec::integer("i", std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(check(any, "-9223372036854775808"), "-9223372036854775808");
  EXPECT_EQ(check(any, "0xff"), "255");
  EXPECT_EQ(check(any, "9223372036854775808"), "error: out of the 64-bit range");
  for (std::string_view bad : {"", "+1", "1e3", "0x", "0x-1", "12a", " 1", "--1"}) {
    EXPECT_EQ(check(any, bad), "error: expected an integer") << bad;
  }
  const OptionSpec small = OptionSpec::integer("w", 0, 14);
  EXPECT_EQ(check(small, "15"), "error: out of range 0..14");
  EXPECT_EQ(check(small, "99999999999999999999"), "error: out of range 0..14");

  const OptionSpec real = OptionSpec::real("x", 0, 1);
  EXPECT_EQ(check(real, "0.5"), "0.5");
  EXPECT_EQ(check(real, "1e-3"), "0.001");
  for (std::string_view bad : {"", "inf", "nan", "0x1p-1", ".", "1,5"}) {
    EXPECT_EQ(check(real, bad), "error: expected a number") << bad;
  }
  EXPECT_EQ(check(real, "-0.1"), "error: out of range 0..1");

  const OptionSpec cidr = OptionSpec::cidr("c");
  EXPECT_EQ(check(cidr, "192.0.2.10/32"), "192.0.2.10/32");
  for (std::string_view bad : {"192.0.2.10", "192.0.2.10/", "192.0.2.10/33", "192.0.2.10/+1", "/24", "1.2.3.4/024"}) {
    EXPECT_EQ(check(cidr, bad).rfind("error:", 0), 0u) << bad;
  }
  const OptionSpec ip = OptionSpec::ip("a");
  EXPECT_EQ(check(ip, "192.0.2.1"), "192.0.2.1");
  EXPECT_EQ(check(ip, "2001:DB8:0:0::1"), "2001:db8::1") << "RFC 5952 text";
  EXPECT_EQ(check(ip, "::ffff:192.0.2.1"), "192.0.2.1") << "a mapped address is the IPv4 one";
  for (std::string_view bad : {"", "2001:db8::1::2", "2001:db8::g", "192.0.2", "[::1]", "fe80::1%eth0"}) {
    EXPECT_EQ(check(ip, bad).rfind("error: expected an IPv4 or IPv6 address", 0), 0u) << bad;
  }
  const OptionSpec cidrs = OptionSpec::ip_cidrs("p");
  EXPECT_EQ(check(cidrs, "192.0.2.10/24,2001:db8::10/64"), "192.0.2.10/24,2001:db8::10/64");
  for (std::string_view bad : {"2001:db8::10", "2001:db8::10/129", "192.0.2.10/33", "2001:db8::10/64,", "/64"}) {
    EXPECT_EQ(check(cidrs, bad).rfind("error:", 0), 0u) << bad;
  }
  const OptionSpec list = OptionSpec::list("l");
  EXPECT_EQ(check(list, "a,,b"), "error: empty element in list");
  EXPECT_EQ(check(list, "a,"), "error: empty element in list");
}

TEST(Options, IpCidrContainsItsFamilysPrefixOnly) {
  const IpCidr v6 = *parse_ip_cidr("2001:db8:1:2::10/60");
  EXPECT_TRUE(v6.contains(*parse_ip("2001:db8:1:f::1")));
  EXPECT_FALSE(v6.contains(*parse_ip("2001:db8:1:12::1")));
  EXPECT_FALSE(v6.contains(IpAddr(Ipv4Addr{0xC0000201})));
  const IpCidr v4 = *parse_ip_cidr("192.0.2.10/24");
  EXPECT_TRUE(v4.contains(IpAddr(Ipv4Addr{0xC00002FE})));
  EXPECT_FALSE(v4.contains(IpAddr(Ipv4Addr{0xC0000301})));
  EXPECT_FALSE(v4.contains(*parse_ip("::c000:201"))) << "not the mapped form: another family";
  EXPECT_TRUE(parse_ip_cidr("::/0")->contains(*parse_ip("2001:db8::1")));
  EXPECT_FALSE(parse_ip_cidr("::/0")->contains(IpAddr(Ipv4Addr{1})));
}

// ---- canonical form -----------------------------------------------------------

TEST_F(GraphTest, ToStringIsCanonicalAndReparses) {
  Graph g = Graph::build(kExample, reg);
  const std::string canonical =
      "driver net0 dpdk devargs=net_memif0,role=client,socket=/run/xk/filterd.memif\n"
      "eth    eth0 below=net0\n"
      "arp    arp0 below=eth0\n"
      "ipv4   ip0  below=eth0,arp0 addr=192.0.2.10/24 gw=192.0.2.1\n"
      "fault  f0   below=ip0 loss=0.01 reorder=0.005\n"
      "tcp    tcp0 below=ip0 csum=on wscale=14 sack=on cc=cubic\n";
  EXPECT_EQ(g.to_string(), canonical);
  EXPECT_EQ(GraphSpec::parse(canonical, reg).to_string(), canonical);

  // Values are normalized and quoted when they must be; defaults on request.
  GraphSpec s = GraphSpec::parse(
      "tcp t below=d csum=YES wscale=0x3\n"
      "capture c below=d path=\"a b#c\\\"d\"\n"
      "driver d loopback\n",
      reg);
  EXPECT_EQ(s.to_string(),
            "driver  d loopback\n"
            "tcp     t below=d csum=on wscale=3\n"
            "capture c below=d path=\"a b#c\\\"d\"\n");
  EXPECT_EQ(GraphSpec::parse(s.to_string(), reg).to_string(), s.to_string());
  EXPECT_EQ(s.to_string(true),
            "driver  d loopback mtu=1500\n"
            "tcp     t below=d csum=on wscale=3 sack=off cc=reno\n"
            "capture c below=d path=\"a b#c\\\"d\"\n");
}

// ---- errors ---------------------------------------------------------------------

TEST_F(GraphTest, ErrorBelowNamesUndefinedInstance) {
  const GraphError e = error_of(
      "driver net0 dpdk\n"
      "eth eth0 below=net0\n"
      "ipv4 ip0 below=eth0 addr=192.0.2.10/24\n"
      "tcp tcp0 below=ip9\n");
  EXPECT_EQ(e.line(), 4u);
  ASSERT_EQ(e.diagnostics().size(), 1u);
  EXPECT_EQ(e.diagnostics()[0].message,
            "graph:4: tcp 'tcp0': below=ip9: no instance named 'ip9' (did you mean 'ip0'?)");
}

TEST_F(GraphTest, ErrorUnknownKind) {
  expect_error("driver n loopback\ntpc t0 below=n\n", 2, {"graph:2: unknown kind 'tpc'", "(did you mean 'tcp'?)"});
  expect_error("quic q0\n", 1, {"unknown kind 'quic' for instance 'q0'", "known kinds: arp, capture, driver, eth"});
  // The name is still defined: no second complaint about below=t0.
  const GraphError e = error_of("tpc t0\nnode n below=t0\n");
  EXPECT_EQ(e.diagnostics().size(), 1u) << e.what();
}

TEST_F(GraphTest, ErrorDuplicateInstanceName) {
  expect_error("driver net0 dpdk\n\neth net0 below=net0\n", 3,
               {"graph:3: eth 'net0': duplicate instance name 'net0' (first defined on line 1)"});
}

TEST_F(GraphTest, ErrorMalformedLines) {
  expect_error("driver net0 dpdk\neth\n", 2, {"graph:2: eth: missing instance name"});
  expect_error("driver net0 dpdk\neth below=net0\n", 2,
               {"graph:2: eth: expected an instance name after the kind, found 'below=net0'"});
  expect_error("eth 0eth\n", 1, {"invalid instance name '0eth'"});
  expect_error("below=x\n", 1, {"graph:1: expected a kind at the start of the line, found 'below=x'"});
  expect_error("driver net0 dpdk\ntcp t0 below=net0 csum\n", 2,
               {"graph:2: tcp 't0': 'csum' is not key=value (tcp takes no positional parameters)"});
  expect_error("driver net0 dpdk extra\n", 1,
               {"unexpected word 'extra': driver takes 1 positional parameter (type); options are key=value"});
  expect_error("driver net0 mtu=1500 dpdk\n", 1, {"'dpdk' is not key=value (positional parameters come right after"});
  expect_error("driver net0 dpdk =5\n", 1, {"'=5': missing option name before '='"});
  expect_error("driver net0 dpdk devargs=\"abc\n", 1, {"graph:1: unterminated quote"});
  expect_error("# nothing here\n\n", 0, {"graph: the spec defines no instances"});
  expect_error("driver net0 dpdk\nnode n below=net0,,x\n", 2, {"below=net0,,x: empty instance name"});
  expect_error("driver net0 dpdk\nnode n below=net0,net0\n", 2, {"'net0' named twice"});
}

TEST_F(GraphTest, ErrorLowerLayerCounts) {
  expect_error("driver net0 dpdk\neth eth0\n", 2, {"graph:2: eth 'eth0': needs 1 lower instance in below=, got 0"});
  expect_error("driver a dpdk\ndriver b dpdk\ndriver c dpdk\nipv4 ip0 below=a,b,c addr=1.2.3.4/8\n", 4,
               {"takes at most 2 lower instances in below=, got 3"});
  expect_error("driver a dpdk\nmux m below=a\n", 2, {"needs at least 2 lower instances in below=, got 1"});
  expect_error("driver a dpdk\ndriver b dpdk below=a\n", 2, {"graph:2: driver 'b': takes no lower instances (below=)"});
}

TEST_F(GraphTest, ErrorCycles) {
  expect_error("node a below=b\nnode b below=a\n", 1, {"graph:1: node 'a': cycle in below=: a -> b -> a"});
  expect_error("node x\nnode a below=a\n", 2, {"cycle in below=: a -> a"});
  // Found from c first, reported from its earliest line, once.
  const GraphError e = error_of(
      "node c below=a\n"
      "node b below=c\n"
      "node a below=b,x\n"
      "node x\n");
  ASSERT_EQ(e.diagnostics().size(), 1u) << e.what();
  EXPECT_EQ(e.diagnostics()[0].message, "graph:1: node 'c': cycle in below=: c -> a -> b -> c");
}

TEST_F(GraphTest, ErrorOptions) {
  const std::string pre = "driver net0 dpdk\neth eth0 below=net0\nipv4 ip0 below=eth0 addr=192.0.2.10/24\n";
  expect_error(pre + "tcp tcp0 below=ip0 wscal=3\n", 4,
               {"graph:4: tcp 'tcp0': unknown option 'wscal' (did you mean 'wscale'?); allowed: below, csum, wscale, "
                "sack, cc, ports"});
  expect_error(pre + "arp a0 below=eth0 zzz=1\n", 4, {"unknown option 'zzz'; allowed: below"});
  expect_error(pre + "tcp tcp0 below=ip0 wscale=15\n", 4, {"graph:4: tcp 'tcp0': wscale=15: out of range 0..14"});
  expect_error(pre + "tcp tcp0 below=ip0 wscale=-1\n", 4, {"wscale=-1: out of range 0..14"});
  expect_error(pre + "tcp tcp0 below=ip0 cc=vegas\n", 4, {"cc=vegas: expected one of reno|cubic"});
  expect_error(pre + "tcp tcp0 below=ip0 csum=maybe\n", 4, {"csum=maybe: expected on/off"});
  expect_error(pre + "fault f0 below=ip0 loss=1.5\n", 4, {"loss=1.5: out of range 0..1"});
  expect_error(pre + "fault f0 below=ip0 loss=lots\n", 4, {"loss=lots: expected a number"});
  expect_error("driver net0 dpdk\neth eth0 below=net0\nipv4 ip0 below=eth0 addr=192.0.2.300/24\n", 3,
               {"addr=192.0.2.300/24: expected an IPv4 address with prefix length"});
  expect_error("driver net0 dpdk\neth eth0 below=net0\nipv4 ip0 below=eth0 addr=192.0.2.3/24 gw=1.2.3\n", 3,
               {"gw=1.2.3: expected an IPv4 address (a.b.c.d)"});
  expect_error("driver net0 dpdk\neth eth0 below=net0 mac=02:00:00:00:00\n", 2, {"mac=02:00:00:00:00: expected a MAC"});
  expect_error("driver net0 dpdk\neth eth0 below=net0 ring=1m\n", 2, {"ring=1m: out of range 64..64k"});
  expect_error("driver net0 dpdk mtu=abc\n", 1, {"mtu=abc: expected an integer"});
  expect_error("driver net0 virtio\n", 1, {"driver 'net0': type 'virtio': expected one of dpdk|loopback|pcap"});
}

TEST_F(GraphTest, ErrorMissingRequiredAndRepeatedKeys) {
  expect_error("driver net0 dpdk\nipv4 ip0 below=net0 gw=1.2.3.4\n", 2,
               {"graph:2: ipv4 'ip0': missing required option addr= (IPv4 address/prefix"});
  expect_error("driver net0\n", 1, {"graph:1: driver 'net0': missing positional parameter 'type' (one of dpdk|"});
  expect_error("driver net0 dpdk\ntcp t below=net0 wscale=1 wscale=2\n", 2, {"tcp 't': wscale given twice"});
  expect_error("driver net0 dpdk\ntcp t below=net0 below=net0\n", 2, {"below given twice"});
  expect_error("driver net0 dpdk type=pcap\n", 1, {"type given twice"});
}

TEST_F(GraphTest, ErrorsAreAllCollectedSortedByLine) {
  const GraphError e = error_of(
      "tcp t0 below=nowhere\n"  // 1: resolved after all lines are read
      "driver net0 dpdk\n"
      "eth eth0 below=net0 ring=big\n"  // 3
      "eth eth0 below=net0\n"           // 4
      "fault f0 below=eth0 loss=2\n");  // 5
  ASSERT_EQ(e.diagnostics().size(), 4u) << e.what();
  EXPECT_EQ(e.line(), 1u);
  EXPECT_EQ(e.diagnostics()[0].line, 1u);
  EXPECT_EQ(e.diagnostics()[1].line, 3u);
  EXPECT_EQ(e.diagnostics()[2].line, 4u);
  EXPECT_EQ(e.diagnostics()[3].line, 5u);
  EXPECT_EQ(std::string(e.what()),
            "graph:1: tcp 't0': below=nowhere: no instance named 'nowhere'\n"
            "graph:3: eth 'eth0': ring=big: expected a size (a number, optionally followed by k, m or g)\n"
            "graph:4: eth 'eth0': duplicate instance name 'eth0' (first defined on line 3)\n"
            "graph:5: fault 'f0': loss=2: out of range 0..1");
}

TEST_F(GraphTest, SourceNameAndGarbageAreShownSafely) {
  try {
    (void)GraphSpec::parse("driver net0 dpdk\n\x01\xff=1\n", reg, "/etc/xk/node.graph");
    FAIL() << "parsed";
  } catch (const GraphError& e) {
    EXPECT_STREQ(e.what(), "/etc/xk/node.graph:2: expected a kind at the start of the line, found '\\x01\\xff=1'");
  }
}

// ---- factories that fail --------------------------------------------------------

TEST_F(GraphTest, FactoryThrowingNamesTheLineAndDestroysWhatWasBuilt) {
  reg.add(KindSpec("picky")
              .with_below(1, 1)
              .with_option(OptionSpec::boolean("strict").defaults_to("off"))
              .with_factory([](const BuildArgs& a) -> std::unique_ptr<Protocol> {
                if (a.options.get_bool("strict")) throw std::runtime_error("strict needs a gateway");
                return nullptr;
              }));
  const std::string spec =
      "driver net0 dpdk\n"
      "eth eth0 below=net0\n"
      "ipv4 ip0 below=eth0 addr=192.0.2.10/24\n"
      "picky p0 below=ip0 strict=on\n"
      "tcp tcp0 below=ip0\n";
  try {
    Graph g = Graph::build(spec, reg);
    FAIL() << "built";
  } catch (const GraphError& e) {
    EXPECT_EQ(e.line(), 4u);
    EXPECT_STREQ(e.what(), "graph:4: picky 'p0': cannot build: strict needs a gateway");
  }
  // Built in order up to the failure, then destroyed upper layers first.
  EXPECT_EQ(log, (Log{"+net0", "+eth0", "+ip0", "-ip0", "-eth0", "-net0"}));

  expect_error("driver net0 dpdk\npicky p0 below=net0\n", 2, {"picky 'p0': the factory returned no protocol"});
}

TEST_F(GraphTest, FactoryMisuseSurfacesAsGraphError) {
  reg.add(KindSpec("sloppy").with_factory([](const BuildArgs& a) -> std::unique_ptr<Protocol> {
    (void)a.options.get_int("timeout");
    return nullptr;
  }));
  reg.add(KindSpec("misnamed").with_factory([](const BuildArgs&) { return std::make_unique<Protocol>("other", "x"); }));
  reg.add(KindSpec("weird").with_factory([](const BuildArgs&) -> std::unique_ptr<Protocol> { throw 42; }));
  expect_error("sloppy s\n", 1,
               {"graph:1: sloppy 's': cannot build: get_int(\"timeout\"): kind 'sloppy' declares no option 'timeout'"});
  expect_error("misnamed m\n", 1, {"the factory built a protocol named 'other'"});
  expect_error("weird w\n", 1, {"cannot build: unknown exception"});
}

// ---- registry -----------------------------------------------------------------

TEST_F(GraphTest, RegistryRejectsBadKinds) {
  auto factory = [](const BuildArgs&) { return std::unique_ptr<Protocol>(); };
  EXPECT_THROW(reg.add(KindSpec("tcp").with_factory(factory)), std::invalid_argument);
  EXPECT_THROW(reg.add(KindSpec("no factory").with_factory(factory)), std::invalid_argument);
  EXPECT_THROW(reg.add(KindSpec("nofactory")), std::invalid_argument);
  EXPECT_THROW(reg.add(KindSpec("k1").with_below(2, 1).with_factory(factory)), std::invalid_argument);
  EXPECT_THROW(reg.add(KindSpec("k2").with_option(OptionSpec::string("below")).with_factory(factory)),
               std::invalid_argument);
  EXPECT_THROW(reg.add(KindSpec("k3")
                           .with_positional(OptionSpec::string("x"))
                           .with_option(OptionSpec::integer("x", 0, 1))
                           .with_factory(factory)),
               std::invalid_argument);
  EXPECT_THROW(
      reg.add(KindSpec("k4").with_option(OptionSpec::integer("x", 0, 1).defaults_to("2")).with_factory(factory)),
      std::invalid_argument);
  EXPECT_THROW(
      reg.add(
          KindSpec("k5").with_option(OptionSpec::ipv4("x").mandatory().defaults_to("1.2.3.4")).with_factory(factory)),
      std::invalid_argument);
  EXPECT_THROW(reg.add(KindSpec("k6").with_option(OptionSpec::choice("x", {})).with_factory(factory)),
               std::invalid_argument);
  EXPECT_THROW(reg.add(KindSpec("k7").with_option(OptionSpec::string("bad name")).with_factory(factory)),
               std::invalid_argument);
  try {
    reg.add(KindSpec("tcp").with_factory(factory));
    ADD_FAILURE() << "added twice";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "graph registry: kind 'tcp': already registered");
  }
  EXPECT_EQ(reg.find("k1"), nullptr) << "a rejected kind is not added";
  EXPECT_NE(reg.find("tcp"), nullptr);
  EXPECT_EQ(reg.kinds().front(), "arp");
  const std::string help = reg.help();
  EXPECT_NE(
      help.find("driver: bottom of the graph\n  type (positional)  one of dpdk|loopback|pcap, required: driver type\n"),
      std::string::npos)
      << help;
  EXPECT_NE(help.find("  wscale=  integer 0..14, default 7\n"), std::string::npos) << help;
  EXPECT_NE(help.find("  below=  at least 2 lower instances\n"), std::string::npos) << help;
}

// ---- files ----------------------------------------------------------------------

TEST_F(GraphTest, BuildFromFile) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("xk_graph_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".graph");
  {
    std::ofstream out(path, std::ios::binary);
    out << "driver net0 loopback\neth eth0 below=net0 ring=3\n";
  }
  try {
    (void)Graph::build_file(path, reg);
    ADD_FAILURE() << "built";
  } catch (const GraphError& e) {
    EXPECT_EQ(std::string(e.what()), path.string() + ":2: eth 'eth0': ring=3: out of range 64..64k");
  }
  {
    std::ofstream out(path, std::ios::binary);
    out << "driver net0 loopback\n";
  }
  EXPECT_EQ(Graph::build_file(path, reg).size(), 1u);
  std::filesystem::remove(path);
  EXPECT_THROW((void)Graph::build_file(path, reg), GraphError);
}

// ---- robustness -----------------------------------------------------------------

// Whatever the text, the builder either builds or throws GraphError.
void build_or_graph_error(std::string_view text, const Registry& reg) {
  try {
    Graph g = Graph::build(text, reg);
    (void)g.to_string();
  } catch (const GraphError& e) {
    EXPECT_FALSE(e.diagnostics().empty());
  }
}

TEST_F(GraphTest, RandomGarbageNeverCrashes) {
  std::mt19937 rng(12345);
  const std::vector<std::string> words = {"driver",
                                          "eth",
                                          "arp",
                                          "ipv4",
                                          "tcp",
                                          "fault",
                                          "node",
                                          "mux",
                                          "net0",
                                          "eth0",
                                          "ip0",
                                          "a",
                                          "b",
                                          "below=",
                                          "below=net0",
                                          "below=eth0,ip0",
                                          "below=a",
                                          "below=b",
                                          "addr=1.2.3.4/8",
                                          "loss=0.5",
                                          "=",
                                          "dpdk",
                                          "csum=on",
                                          "wscale=",
                                          "\"",
                                          "#",
                                          "\\",
                                          ",",
                                          "type=pcap",
                                          "ring=1k",
                                          "\t",
                                          "\r",
                                          "x=y=z"};
  auto byte = [&] { return static_cast<char>(rng() % 256); };
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    const int lines = static_cast<int>(rng() % 8);
    for (int l = 0; l < lines; ++l) {
      const int n = static_cast<int>(rng() % 7);
      for (int w = 0; w < n; ++w) {
        if (rng() % 4 == 0) {
          for (int k = static_cast<int>(rng() % 6); k > 0; --k) text += byte();
        } else {
          text += words[rng() % words.size()];
        }
        text += rng() % 5 == 0 ? "" : " ";
      }
      text += rng() % 10 == 0 ? "\r\n" : "\n";
    }
    build_or_graph_error(text, reg);
  }
}

TEST_F(GraphTest, MutatedExampleNeverCrashes) {
  std::mt19937 rng(777);
  const std::string alphabet = " \t\n\r=,#\"\\/.:0123456789abcdefghijklmnopqrstuvwxyz_-";
  for (int round = 0; round < 3000; ++round) {
    std::string text(kExample);
    for (int m = static_cast<int>(rng() % 4) + 1; m > 0; --m) {
      const std::size_t at = rng() % (text.size() + 1);
      switch (rng() % 3) {
        case 0:
          if (at < text.size()) text.erase(at, 1 + rng() % 8);
          break;
        case 1:
          text.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
        default:
          if (at < text.size()) text[at] = alphabet[rng() % alphabet.size()];
          break;
      }
    }
    build_or_graph_error(text, reg);
  }
  log.clear();
}

}  // namespace
}  // namespace xk
