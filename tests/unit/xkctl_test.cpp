// xkctl (filterd/xkctl, docs/xkctl.md): its arguments, its tables and JSON,
// and the whole tool against a control socket served in-process by the
// real ControlServer and NodeRegistry.

#include "xkctl.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "xk/clock.hpp"
#include "xk/event_loop.hpp"
#include "xk/filterd/control_server.hpp"
#include "xk/filterd/registry.hpp"

namespace xk::filterd::xkctl {
namespace {

Options parse(std::vector<std::string_view> args) { return parse_args(args); }

std::string usage_error(std::vector<std::string_view> args) {
  try {
    parse_args(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// ---- arguments ---------------------------------------------------------------------

TEST(XkctlArgs, ListCommandsAndGlobalOptionsAnywhere) {
  Options o = parse({"nodes"});
  EXPECT_EQ(o.command, Command::nodes);
  EXPECT_EQ(o.control, kDefaultControl);
  EXPECT_FALSE(o.json);
  o = parse({"--json", "ports", "--control", "/tmp/x.sock"});
  EXPECT_EQ(o.command, Command::ports);
  EXPECT_TRUE(o.json);
  EXPECT_EQ(o.control, "/tmp/x.sock");
  o = parse({"rules", "--control=/a", "--timeout", "2"});
  EXPECT_EQ(o.command, Command::rules);
  EXPECT_EQ(o.control, "/a");
  EXPECT_EQ(o.timeout, std::chrono::milliseconds(2000));
  EXPECT_EQ(parse({"counters"}).command, Command::counters);
  EXPECT_EQ(parse({"stats", "--json"}).command, Command::stats);
  o = parse({"flows"});
  EXPECT_EQ(o.command, Command::flows);
  EXPECT_EQ(o.node, 0);
  EXPECT_EQ(o.limit, 0u);
  o = parse({"flows", "--node", "3", "--limit=100"});
  EXPECT_EQ(o.node, 3);
  EXPECT_EQ(o.limit, 100u);
  EXPECT_EQ(parse({"--help"}).command, Command::help);
  EXPECT_EQ(parse({"nodes", "-h"}).command, Command::help);
}

TEST(XkctlArgs, RuleAddAndDel) {
  Options o = parse({"rule", "add", "udp dst port 9999", "--node", "2"});
  EXPECT_EQ(o.command, Command::rule_add);
  EXPECT_EQ(o.expression, "udp dst port 9999");
  EXPECT_EQ(o.node, 2);
  EXPECT_EQ(o.queue, 0);
  EXPECT_EQ(o.priority, 0);
  o = parse({"rule", "add", "--node=7", "--queue", "63", "--priority", "-5", "tcp"});
  EXPECT_EQ(o.expression, "tcp");
  EXPECT_EQ(o.node, 7);
  EXPECT_EQ(o.queue, 63);
  EXPECT_EQ(o.priority, -5);
  o = parse({"rule", "del", "42", "--json"});
  EXPECT_EQ(o.command, Command::rule_del);
  EXPECT_EQ(o.rule_id, 42u);
  EXPECT_TRUE(o.json);
}

TEST(XkctlArgs, BadArgumentsSayWhatIsWrong) {
  struct Case {
    std::vector<std::string_view> args;
    const char* says;
  };
  const std::vector<Case> cases = {
      {{}, "no command"},
      {{"nodez"}, "unknown command 'nodez'"},
      {{"nodes", "extra"}, "unexpected argument 'extra'"},
      {{"nodes", "--node", "1"}, "--node does not go with 'nodes'"},
      {{"--bogus", "nodes"}, "unknown option '--bogus'"},
      {{"--json=1", "nodes"}, "--json takes no value"},
      {{"nodes", "--control"}, "--control needs a value"},
      {{"nodes", "--control="}, "--control: empty path"},
      {{"flows", "--node", "0"}, "--node: '0' is not a number in 1..65535"},
      {{"flows", "--node", "65536"}, "--node: '65536' is not a number"},
      {{"flows", "--node", "3x"}, "--node: '3x' is not a number"},
      {{"flows", "--limit", "0"}, "--limit: '0' is not a number"},
      {{"flows", "--queue", "1"}, "--queue and --priority go with 'rule add' only"},
      {{"rules", "--limit", "5"}, "--limit goes with 'flows' only"},
      {{"rule"}, "'rule' needs 'add' or 'del'"},
      {{"rule", "edit", "1"}, "'rule edit': add or del"},
      {{"rule", "add", "--node", "2"}, "the filter expression is missing"},
      {{"rule", "add", "udp"}, "--node N is required"},
      {{"rule", "add", "udp", "tcp", "--node", "2"}, "unexpected argument 'tcp'"},
      {{"rule", "add", "udp", "--node", "2", "--queue", "64"}, "--queue: '64' is not a number in 0..63"},
      {{"rule", "add", "udp", "--node", "2", "--priority", "40000"}, "--priority: '40000'"},
      {{"rule", "del"}, "the rule id is missing"},
      {{"rule", "del", "0"}, "rule del: '0' is not a number"},
      {{"rule", "del", "x"}, "rule del: 'x' is not a number"},
      {{"rule", "del", "1", "--node", "1"}, "--node does not go with 'rule'"},
      {{"--timeout", "0", "nodes"}, "--timeout: '0'"},
  };
  for (const Case& c : cases) {
    const std::string e = usage_error(c.args);
    EXPECT_NE(e.find(c.says), std::string::npos) << "got '" << e << "', wanted '" << c.says << "'";
  }
  const std::string long_expr(ctl::kMaxExpression + 1, 'x');
  EXPECT_NE(usage_error({"rule", "add", long_expr, "--node", "1"}).find("1..1024 bytes"), std::string::npos);
}

// ---- output ------------------------------------------------------------------------

TEST(XkctlFormat, TablesAlignColumnsAndRightAlignNumbers) {
  Table t({"ID", "NAME", "COUNT"});
  t.add({"1", "a", "5"});
  t.add({"12", "longer name", "12345"});
  EXPECT_EQ(t.render(),
            "ID  NAME         COUNT\n"
            " 1  a                5\n"
            "12  longer name  12345\n");
  // Multi-byte characters take one column.
  Table u({"N", "X"});
  u.add({"n\xC3\xA9", "1"});
  EXPECT_EQ(u.render(), "N   X\nn\xC3\xA9  1\n");
  EXPECT_EQ(Table({"A", "B"}).render(), "A  B\n");
}

TEST(XkctlFormat, JsonStringsAreEscaped) {
  EXPECT_EQ(json_string("plain"), "\"plain\"");
  EXPECT_EQ(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
  // RFC 8259 7: control characters escaped; DEL (0x7F) may stay as it is.
  EXPECT_EQ(json_string("t\tn\nr\r\x01"), "\"t\\tn\\nr\\r\\u0001\"");
  EXPECT_EQ(json_string("\xC3\xA9"), "\"\xC3\xA9\"");
  // Whatever goes in reads back the same through a JSON parser.
  for (std::string_view s : {"t\tn\nr\r\x01\x7F", "\"\\/", "\xE2\x9C\x93 ok"})
    EXPECT_EQ(nlohmann::json::parse(json_string(s)).get<std::string>(), s);
}

ctl::NodeRecord sample_node() {
  return ctl::NodeRecord{.id = 2, .queues = 1, .pid = 4242, .memif_id = 128, .listeners = 1, .flows = 3, .rules = 1,
                         .rx_frames = 20, .egress_allowed = 19, .egress_denied = 35, .name = "sink \"b\""};
}

TEST(XkctlFormat, NodesPortsFlowsRules) {
  EXPECT_EQ(format_nodes({sample_node()}, true),
            "{\"nodes\":[{\"id\":2,\"name\":\"sink \\\"b\\\"\",\"pid\":4242,\"queues\":1,\"channel\":\"memif\","
            "\"memif_id\":128,\"listeners\":1,\"flows\":3,\"rules\":1,\"rx_frames\":20,\"egress_allowed\":19,"
            "\"egress_denied\":35}]}\n");
  EXPECT_EQ(format_nodes({sample_node()}, false),
            "ID  NAME       PID  QUEUES  CHANNEL    LISTENERS  FLOWS  RULES  RX  TX  DENIED\n"
            " 2  sink \"b\"  4242       1  memif:128          1      3      1  20  19      35\n");
  // A node on another host, on the node port: its MAC is its channel.
  ctl::NodeRecord remote = sample_node();
  remote.ethernet = true;
  remote.memif_id = 0;
  remote.mac = MacAddr{{0x02, 0x00, 0x00, 0x00, 0x0c, 0x01}};
  EXPECT_EQ(format_nodes({remote}, true),
            "{\"nodes\":[{\"id\":2,\"name\":\"sink \\\"b\\\"\",\"pid\":4242,\"queues\":1,\"channel\":\"ethernet\","
            "\"mac\":\"02:00:00:00:0c:01\",\"memif_id\":0,\"listeners\":1,\"flows\":3,\"rules\":1,\"rx_frames\":20,"
            "\"egress_allowed\":19,\"egress_denied\":35}]}\n");
  EXPECT_EQ(format_nodes({remote}, false),
            "ID  NAME       PID  QUEUES  CHANNEL                  LISTENERS  FLOWS  RULES  RX  TX  DENIED\n"
            " 2  sink \"b\"  4242       1  ether:02:00:00:00:0c:01          1      3      1  20  19      35\n");
  EXPECT_EQ(format_nodes({}, true), "{\"nodes\":[]}\n");

  const std::vector<ctl::PortRecord> ports = {{ctl::Proto::tcp, 5001, false, true, 3, 0},
                                              {ctl::Proto::udp, 53, true, true, 1, 2}};
  EXPECT_EQ(format_ports(ports, true),
            "{\"ports\":[{\"proto\":\"tcp\",\"port\":5001,\"use\":\"listen\",\"group\":false,\"node\":3,\"queue\":0},"
            "{\"proto\":\"udp\",\"port\":53,\"use\":\"listen\",\"group\":true,\"node\":1,\"queue\":2}]}\n");
  EXPECT_EQ(format_ports(ports, false),
            "PROTO  PORT  USE     GROUP  NODE  QUEUE\n"
            "tcp    5001  listen  no        3      0\n"
            "udp      53  listen  yes       1      2\n");
  const std::vector<ctl::PortRecord> leased = {{ctl::Proto::tcp, 49152, false, false, 4, 1, /*lease=*/true},
                                               {ctl::Proto::tcp, 50000, false, false, 2, 0}};
  EXPECT_EQ(format_ports(leased, true),
            "{\"ports\":[{\"proto\":\"tcp\",\"port\":49152,\"use\":\"lease\",\"group\":false,\"node\":4,"
            "\"queue\":1},{\"proto\":\"tcp\",\"port\":50000,\"use\":\"connection\",\"group\":false,\"node\":2,"
            "\"queue\":0}]}\n");
  EXPECT_EQ(format_ports(leased, false),
            "PROTO   PORT  USE         GROUP  NODE  QUEUE\n"
            "tcp    49152  lease       no        4      1\n"
            "tcp    50000  connection  no        2      0\n");

  const IpAddr v6 = IpAddr::v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
  const std::vector<ctl::NodeFlow> flows = {{3, {ctl::Proto::tcp, 5001, Ipv4Addr{0xC0000201}, 40000, 0}},
                                            {4, {ctl::Proto::udp, 53, v6, 40001, 1}}};
  EXPECT_EQ(format_flows(flows, 2, true),
            "{\"total\":2,\"flows\":[{\"node\":3,\"queue\":0,\"proto\":\"tcp\",\"local_port\":5001,"
            "\"remote_addr\":\"192.0.2.1\",\"remote_port\":40000},{\"node\":4,\"queue\":1,\"proto\":\"udp\","
            "\"local_port\":53,\"remote_addr\":\"2001:db8::1\",\"remote_port\":40001}]}\n");
  EXPECT_EQ(format_flows(flows, 5, false),
            "NODE  QUEUE  PROTO  LOCAL  REMOTE\n"
            "   3      0  tcp     5001  192.0.2.1:40000\n"
            "   4      1  udp       53  [2001:db8::1]:40001\n"
            "(2 of 5 flows shown)\n");

  const std::vector<ctl::RuleRecord> rules = {{7, 2, 0, -1, 20, "udp dst port 9999"}};
  EXPECT_EQ(format_rules(rules, true),
            "{\"rules\":[{\"id\":7,\"node\":2,\"queue\":0,\"priority\":-1,\"hits\":20,"
            "\"expression\":\"udp dst port 9999\"}]}\n");
  EXPECT_EQ(format_rules(rules, false),
            "ID  NODE  QUEUE  PRIORITY  HITS  EXPRESSION\n"
            " 7     2      0        -1    20  udp dst port 9999\n");
  EXPECT_EQ(format_rule_added(7, false), "rule 7 added\n");
  EXPECT_EQ(format_rule_added(7, true), "{\"rule_id\":7}\n");
  EXPECT_EQ(format_rule_deleted(7, true), "{\"deleted\":7}\n");
}

TEST(XkctlFormat, CountersGroupedByOwnerWithEachNodes) {
  const std::vector<ctl::Counter> counters = {
      {"registry.hellos", 4}, {"filter.rule_hit", 20}, {"filter.egress_denied", 35}, {"st0.tx_denied", 35}};
  EXPECT_EQ(format_counters(counters, {sample_node()}, true),
            "{\"counters\":{\"registry\":{\"hellos\":4},\"filter\":{\"rule_hit\":20,\"egress_denied\":35},"
            "\"st0\":{\"tx_denied\":35}},\"nodes\":[{\"id\":2,\"name\":\"sink \\\"b\\\"\",\"rx_frames\":20,"
            "\"egress_allowed\":19,\"egress_denied\":35}]}\n");
  EXPECT_EQ(format_counters(counters, {sample_node()}, false),
            "OWNER     COUNTER        VALUE\n"
            "registry  hellos             4\n"
            "filter    rule_hit          20\n"
            "filter    egress_denied     35\n"
            "st0       tx_denied         35\n"
            "\n"
            "NODE  NAME      RX  EGRESS_ALLOWED  EGRESS_DENIED\n"
            "   2  sink \"b\"  20              19             35\n");
  EXPECT_EQ(format_stats(counters, true),
            "{\"counters\":{\"registry.hellos\":4,\"filter.rule_hit\":20,\"filter.egress_denied\":35,"
            "\"st0.tx_denied\":35}}\n");
}

// ---- the tool against a control socket --------------------------------------------

TEST(XkctlRun, NoDaemonIsExitThree) {
  Options o = parse({"nodes", "--control", "/nonexistent/xkctl-test.sock"});
  std::string out, err;
  EXPECT_EQ(run(o, out, err), kExitUnreachable);
  EXPECT_TRUE(out.empty());
  EXPECT_NE(err.find("cannot connect to /nonexistent/xkctl-test.sock"), std::string::npos) << err;
  EXPECT_NE(err.find("is filterd running?"), std::string::npos);
}

// A ControlServer and its registry, served by a loop on a thread of its own.
class XkctlServer : public ::testing::Test {
 protected:
  XkctlServer() {
    path = "/tmp/xkctl-test-" + std::to_string(::getpid()) + ".sock";
    FilterConfig f;
    f.shared_ip = Ipv4Addr{0xC000020A};
    filter = std::make_unique<FilterEngine>(f, clock);
    RegistryConfig c;
    c.shared = Ipv4Cidr{Ipv4Addr{0xC000020A}, 24};
    registry = std::make_unique<NodeRegistry>(c, *filter, NodeRegistry::Hooks{});
    ControlServer::Config sc;
    sc.path = path;
    server = std::make_unique<ControlServer>(loop, *registry, sc);
  }
  ~XkctlServer() override {
    stop();
    server.reset();
  }
  void start() {
    thread = std::thread([this] { loop.run(); });
  }
  void stop() {
    if (thread.joinable()) {
      loop.stop();
      thread.join();
    }
  }
  int xkctl(std::vector<std::string_view> args, std::string& out, std::string& err) {
    args.push_back("--control");
    args.push_back(path);
    out.clear();
    err.clear();
    return run(parse_args(args), out, err);
  }

  std::string path;
  ManualClock clock;
  EventLoop loop;
  std::unique_ptr<FilterEngine> filter;
  std::unique_ptr<NodeRegistry> registry;
  std::unique_ptr<ControlServer> server;
  std::thread thread;
};

TEST_F(XkctlServer, ListsAddsAndDeletesThroughTheSocket) {
  // Two nodes, registered before the loop runs (the registry is the loop's
  // once it does).
  NodeId a = 0, b = 0;
  ASSERT_TRUE(std::holds_alternative<ctl::HelloReply>(registry->handle({1, ctl::Hello{"alpha", 0, 1}}, a, 0).body));
  ASSERT_TRUE(std::holds_alternative<ctl::HelloReply>(registry->handle({1, ctl::Hello{"beta", 0, 2}}, b, 0).body));
  ASSERT_TRUE(
      std::holds_alternative<ctl::ListenReply>(registry->handle({2, ctl::Listen{ctl::Proto::tcp, 5001}}, a, 0).body));
  // 5000 flows: the tool fetches them page by page.
  for (std::uint32_t i = 0; i < 5000; ++i) {
    ASSERT_TRUE(filter
                    ->add_flow(FlowKey{Proto::tcp, Ipv4Addr{0xC0000201}, static_cast<std::uint16_t>(10000 + i), 5001},
                               Target{a, 0})
                    .ok());
  }
  start();
  std::string out, err;
  ASSERT_EQ(xkctl({"nodes"}, out, err), kExitOk) << err;
  EXPECT_NE(out.find("alpha"), std::string::npos);
  EXPECT_NE(out.find("beta"), std::string::npos);
  ASSERT_EQ(xkctl({"flows", "--node", "1", "--json"}, out, err), kExitOk) << err;
  EXPECT_EQ(out.rfind("{\"total\":5000,\"flows\":[", 0), 0u);
  std::size_t records = 0;
  for (std::size_t at = out.find("\"node\":1"); at != std::string::npos; at = out.find("\"node\":1", at + 1)) ++records;
  EXPECT_EQ(records, 5000u);
  ASSERT_EQ(xkctl({"flows", "--limit", "10"}, out, err), kExitOk) << err;
  EXPECT_NE(out.find("(10 of 5000 flows shown)"), std::string::npos) << out;

  ASSERT_EQ(xkctl({"rule", "add", "udp dst port 9999", "--node", "2", "--queue", "1", "--json"}, out, err), kExitOk)
      << err;
  EXPECT_EQ(out, "{\"rule_id\":1}\n");
  ASSERT_EQ(xkctl({"rules", "--json"}, out, err), kExitOk) << err;
  EXPECT_EQ(out, "{\"rules\":[{\"id\":1,\"node\":2,\"queue\":1,\"priority\":0,\"hits\":0,"
                 "\"expression\":\"udp dst port 9999\"}]}\n");
  // Refusals are exit 1 with filterd's reason.
  EXPECT_EQ(xkctl({"rule", "add", "udp port banana", "--node", "2"}, out, err), kExitRefused);
  EXPECT_NE(err.find("filterd refused: bad_rule"), std::string::npos) << err;
  EXPECT_EQ(xkctl({"rule", "add", "udp", "--node", "9"}, out, err), kExitRefused);
  EXPECT_NE(err.find("not_found: no node 9"), std::string::npos) << err;
  EXPECT_EQ(xkctl({"rule", "del", "1"}, out, err), kExitOk) << err;
  EXPECT_EQ(out, "rule 1 deleted\n");
  EXPECT_EQ(xkctl({"rule", "del", "1"}, out, err), kExitRefused);
  EXPECT_NE(err.find("not_found"), std::string::npos);

  ASSERT_EQ(xkctl({"counters", "--json"}, out, err), kExitOk) << err;
  EXPECT_NE(out.find("\"registry\":{\"hellos\":2"), std::string::npos) << out;
  EXPECT_NE(out.find("\"nodes\":[{\"id\":1,\"name\":\"alpha\""), std::string::npos) << out;
  const nlohmann::json counters = nlohmann::json::parse(out);
  EXPECT_EQ(counters["counters"]["registry"]["hellos"], 2);
  EXPECT_EQ(counters["nodes"][0]["name"], "alpha");
  EXPECT_EQ(counters["nodes"].size(), 2u);
  ASSERT_EQ(xkctl({"ports"}, out, err), kExitOk) << err;
  EXPECT_NE(out.find("tcp    5001  listen"), std::string::npos) << out;
  stop();
  // The admin connections came and went without touching the nodes.
  EXPECT_EQ(registry->node_count(), 2u);
  EXPECT_EQ(filter->flow_count(), 5000u);
}

}  // namespace
}  // namespace xk::filterd::xkctl
