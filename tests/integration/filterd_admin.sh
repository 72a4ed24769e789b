#!/usr/bin/env bash
# integration.filterd_admin: xkctl against a running filterd (docs/xkctl.md).
#
#   filterd_admin.sh FILTERD XKCTL XK_TCP_PERF XK_TEST_NODE   (as root; CTest runs it)
#
#   netns xk-fa-<pid>-a: Linux, xkal<pid> 192.0.2.1/24
#   netns xk-fa-<pid>-b: filterd on xkax<pid> (DPDK net_af_packet) as
#                        192.0.2.10/24, and its nodes over shm channels:
#                        sink-a, sink-b (xk-test-node: count UDP to 9999),
#                        echo (xk-tcp-perf echo server on TCP 5001), and later
#                        forger (xk-test-node sending frames it does not own)
#
# (0) xkctl nodes/ports/flows while Linux holds a connection to the echo
#     node: the nodes' names and pids, the echo node's listener, and the
#     connection's 4-tuple as an exact flow of that node;
# (a) `xkctl rule add 'udp dst port 9999' --node <sink-b>`: Linux's datagrams
#     to 9999 all reach sink-b and none sink-a; `xkctl rules` (and --json)
#     shows the rule with its hits; after `xkctl rule del` a datagram gets
#     ICMP port unreachable and sink-b no more;
# (b) the forger sends TCP RSTs with the held connection's 4-tuple and UDP
#     from a port it does not own: `xkctl counters --json` shows its
#     egress_denied rise by exactly the number forged (and nobody else's),
#     and the held connection finishes its echo undisturbed.
set -euo pipefail
TEST_NAME=filterd_admin
source "$(dirname "$0")/lib.sh"

[ $# -ge 4 ] || die "usage: $0 FILTERD XKCTL XK_TCP_PERF XK_TEST_NODE"
FD=$(readlink -f "$1")
XKCTL=$(readlink -f "$2")
XK=$(readlink -f "$3")
TN=$(readlink -f "$4")
HERE=$(cd "$(dirname "$0")" && pwd)
for b in "$FD" "$XKCTL" "$XK" "$TN"; do [ -x "$b" ] || die "$b is not executable"; done
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
PY=/usr/bin/python3
for tool in ip ethtool tcpdump tshark "$PY"; do command -v "$tool" >/dev/null || die "needs $tool"; done
DGRAMS=20
FORGED_TCP=25
FORGED_UDP=10

NSA=xk-fa-$$-a
NSB=xk-fa-$$-b
LNX=xkal$$
XKIF=xkax$$
LNX_IP=192.0.2.1
SHARED=192.0.2.10
OUT=$PWD/filterd_admin.out
rm -rf "$OUT"
mkdir -p "$OUT"
CTL=$OUT/filterd.sock
MEMIF=/run/xk-fa-$$.memif  # an abstract-namespace name for memif; no file

install_cleanup

# xkctl in filterd's namespace; every call's output is kept.
N_CALL=0
xkctl() {
  N_CALL=$((N_CALL + 1))
  local log="$OUT/xkctl-$N_CALL.txt" rc=0
  ip netns exec "$NSB" "$XKCTL" --control "$CTL" "$@" > "$log" 2> "$log.err" || rc=$?
  echo "\$ xkctl $*" >> "$OUT/xkctl.log"
  cat "$log" "$log.err" >> "$OUT/xkctl.log"
  [ $rc -eq 0 ] || { cat "$log.err" >&2; die "xkctl $* exited $rc"; }
  cat "$log"
}
# A JSON document on stdin, a Python expression on `j` as $1.
jq_py() { "$PY" -c "import json,sys; j=json.load(sys.stdin); print($1)"; }

step "topology: $NSA ($LNX $LNX_IP/24) <-veth-> $NSB (filterd on $XKIF as $SHARED/24)"
make_veth_topology "$NSA" "$NSB" "$LNX" "$XKIF" "$LNX_IP/24"
start_capture "$NSA" "$LNX" "$OUT/linux.pcap"  # checked at the end (check_capture)

step "filterd"
# --resync-grace 0: a first start (the grace would hold back the ICMP (a)
# checks when the steps come within 3 s of the start, as on a fast machine).
ip netns exec "$NSB" "$FD" --resync-grace 0 --port "net_af_packet0,iface=$XKIF,framecnt=1024" \
  --ip "$SHARED/24" --control "$CTL" --memif-socket "$MEMIF" > "$OUT/filterd.log" 2>&1 &
FDPID=$!
PIDS+=("$FDPID")
wait_for "$OUT/filterd.log" "ready" "$FDPID" 30

# An unreachable daemon is exit 3, bad arguments exit 2.
rc=0; "$XKCTL" --control "$OUT/nobody.sock" nodes > /dev/null 2>&1 || rc=$?
[ $rc -eq 3 ] || die "xkctl against no daemon exited $rc, not 3"
rc=0; "$XKCTL" --control "$CTL" flows --node 0 > /dev/null 2>&1 || rc=$?
[ $rc -eq 2 ] || die "xkctl with a bad --node exited $rc, not 2"

# Nodes start one after another, each attached before the next.
test_node() {  # name args...
  local name=$1
  shift
  ip netns exec "$NSB" "$TN" --filterd "$CTL" --name "$name" "$@" > "$OUT/$name.log" 2>&1 &
  NODE_PID=$!
  PIDS+=("$NODE_PID")
  wait_for "$OUT/$name.log" "^ready" "$NODE_PID" 30
}
step "nodes: sink-a, sink-b (xk-test-node), echo (xk-tcp-perf echo on 5001)"
test_node sink-a --sink-udp 9999
SINK_A=$NODE_PID
test_node sink-b --sink-udp 9999
SINK_B=$NODE_PID
ip netns exec "$NSB" "$XK" server --mode echo --tcp-port 5001 --count 1000000 --filterd "$CTL" --idle sleep \
  > "$OUT/echo.log" 2>&1 &
ECHO=$!
PIDS+=("$ECHO")
wait_for "$OUT/echo.log" "ready" "$ECHO" 30

node_id() { xkctl nodes --json | jq_py "[n['id'] for n in j['nodes'] if n['pid'] == $1][0]"; }
ID_A=$(node_id "$SINK_A")
ID_B=$(node_id "$SINK_B")
ID_ECHO=$(node_id "$ECHO")
grep -q "^ready node=$ID_A " "$OUT/sink-a.log" || die "sink-a's HELLO reply named another node than xkctl shows"
grep -q "^ready node=$ID_B " "$OUT/sink-b.log" || die "sink-b's HELLO reply named another node than xkctl shows"

step "(0) Linux holds a connection to the echo node; xkctl nodes/ports/flows show what the nodes hold"
ip netns exec "$NSA" "$PY" "$HERE/admin_peer.py" hold --peer "$SHARED" --port 5001 --go "$OUT/go" \
  > "$OUT/held.log" 2>&1 &
HELD=$!
PIDS+=("$HELD")
wait_for "$OUT/held.log" "CONNECTED" "$HELD" 30
CPORT=$(sed -n 's/^CONNECTED lport=\([0-9]*\)$/\1/p' "$OUT/held.log")
xkctl nodes | sed 's/^/   /'
NODES_JSON=$(xkctl nodes --json)
got=$(echo "$NODES_JSON" | jq_py "sorted((n['name'], n['pid']) for n in j['nodes'])")
want=$("$PY" -c "print(sorted([('sink-a', $SINK_A), ('sink-b', $SINK_B), ('xk-tcp-perf', $ECHO)]))")
[ "$got" = "$want" ] || die "(0) xkctl nodes: $got, expected $want"
[ "$(echo "$NODES_JSON" | jq_py "[n['listeners'] for n in j['nodes'] if n['id'] == $ID_ECHO][0]")" = 1 ] \
  || die "(0) the echo node should hold one listener"
xkctl ports | sed 's/^/   /'
got=$(xkctl ports --json | jq_py "[(p['proto'], p['port'], p['use'], p['node']) for p in j['ports']]")
[ "$got" = "[('tcp', 5001, 'listen', $ID_ECHO)]" ] || die "(0) xkctl ports: $got"
xkctl flows --node "$ID_ECHO" | sed 's/^/   /'
got=$(xkctl flows --node "$ID_ECHO" --json |
      jq_py "(j['total'], [(f['proto'], f['local_port'], f['remote_addr'], f['remote_port']) for f in j['flows']])")
[ "$got" = "(1, [('tcp', 5001, '$LNX_IP', $CPORT)])" ] || die "(0) xkctl flows --node $ID_ECHO: $got"
[ "$(xkctl flows --node "$ID_A" --json | jq_py "j['total']")" = 0 ] || die "(0) sink-a has flows"

step "(a) xkctl rule add 'udp dst port 9999' --node $ID_B; Linux sends $DGRAMS datagrams to 9999"
RULE=$(xkctl rule add 'udp dst port 9999' --node "$ID_B" --json | jq_py "j['rule_id']")
xkctl rules | sed 's/^/   /'
got=$(xkctl rules --json | jq_py "[(r['id'], r['node'], r['queue'], r['expression'], r['hits']) for r in j['rules']]")
[ "$got" = "[($RULE, $ID_B, 0, 'udp dst port 9999', 0)]" ] || die "(a) xkctl rules: $got"
ip netns exec "$NSA" "$PY" "$HERE/admin_peer.py" udp --peer "$SHARED" --port 9999 --count $DGRAMS \
  > "$OUT/udp1.log" 2>&1 || { cat "$OUT/udp1.log" >&2; die "(a) cannot send the datagrams"; }
wait_for "$OUT/sink-b.log" "RX udp dport=9999 n=$DGRAMS\$" "$SINK_B" 20
grep -q "n=[1-9]" "$OUT/sink-a.log" && die "(a) sink-a got datagrams meant for sink-b"
got=$(xkctl rules --json | jq_py "[r['hits'] for r in j['rules']]")
[ "$got" = "[$DGRAMS]" ] || die "(a) the rule's hits are $got, expected [$DGRAMS]"
got=$(xkctl nodes --json | jq_py "[n['rx_frames'] for n in j['nodes'] if n['id'] == $ID_B][0]")
[ "$got" -ge $DGRAMS ] || die "(a) xkctl nodes says sink-b got $got frames"
echo "   sink-b received $DGRAMS of $DGRAMS, sink-a none; the rule counted $DGRAMS hits"

step "(a) xkctl rule del $RULE: the next datagram gets ICMP port unreachable"
xkctl rule del "$RULE" | sed 's/^/   /'
[ "$(xkctl rules --json | jq_py "len(j['rules'])")" = 0 ] || die "(a) the rule is still listed"
ip netns exec "$NSA" "$PY" "$HERE/multi_peer.py" unreachable --peer "$SHARED" --port 9999 --timeout 10 \
  > "$OUT/unreachable.log" 2>&1 || { cat "$OUT/unreachable.log" >&2; die "(a) no port unreachable after rule del"; }
sed 's/^/   /' "$OUT/unreachable.log"
grep -q "n=$((DGRAMS + 1))" "$OUT/sink-b.log" && die "(a) sink-b still gets datagrams after rule del"
# A rule for a node that does not exist, or a bad expression, is refused (exit 1).
rc=0; ip netns exec "$NSB" "$XKCTL" --control "$CTL" rule add 'udp' --node 999 > /dev/null 2>&1 || rc=$?
[ $rc -eq 1 ] || die "(a) a rule for node 999 exited $rc, not 1"
rc=0; ip netns exec "$NSB" "$XKCTL" --control "$CTL" rule add 'udp port banana' --node "$ID_B" > /dev/null 2>&1 || rc=$?
[ $rc -eq 1 ] || die "(a) a bad expression exited $rc, not 1"

step "(b) a forger sends $FORGED_TCP RSTs on the held connection's 4-tuple and $FORGED_UDP datagrams from a port it does not own"
COUNTERS=$(xkctl counters --json)
before_total=$(echo "$COUNTERS" | jq_py "j['counters']['filter']['egress_denied']")
test_node forger --forge "tcp:5001:$LNX_IP:$CPORT:$FORGED_TCP" --forge "udp:7777:$LNX_IP:9:$FORGED_UDP"
FORGER=$NODE_PID
ID_F=$(node_id "$FORGER")
wait_for "$OUT/forger.log" "SENT n=$((FORGED_TCP + FORGED_UDP))" "$FORGER" 20
FORGED=$((FORGED_TCP + FORGED_UDP))
denied=""
for _ in $(seq 100); do
  denied=$(xkctl counters --json | jq_py "[n['egress_denied'] for n in j['nodes'] if n['id'] == $ID_F][0]")
  [ "$denied" -ge $FORGED ] && break
  sleep 0.1
done
xkctl counters | grep -E "OWNER|egress_denied|tx_denied|NODE|^ *[0-9]+ " | sed 's/^/   /'
COUNTERS=$(xkctl counters --json)
[ "$denied" = "$FORGED" ] || die "(b) the forger's egress_denied is $denied, expected $FORGED"
others=$(echo "$COUNTERS" | jq_py "sum(n['egress_denied'] for n in j['nodes'] if n['id'] != $ID_F)")
[ "$others" = 0 ] || die "(b) $others denials attributed to honest nodes"
after_total=$(echo "$COUNTERS" | jq_py "j['counters']['filter']['egress_denied']")
[ $((after_total - before_total)) -eq $FORGED ] || die "(b) filter.egress_denied rose by $((after_total - before_total))"
allowed=$(echo "$COUNTERS" | jq_py "[n['egress_allowed'] for n in j['nodes'] if n['id'] == $ID_F][0]")
[ "$allowed" = 0 ] || die "(b) $allowed of the forger's frames got out"
echo "   forger (node $ID_F): $denied denied, $allowed allowed; filter.egress_denied $before_total -> $after_total"

step "(b) the held connection finishes undisturbed"
touch "$OUT/go"
wait "$HELD" || { cat "$OUT/held.log" >&2; die "(b) the held connection was disturbed"; }
left=()
for p in "${PIDS[@]}"; do [ "$p" = "$HELD" ] || left+=("$p"); done
PIDS=("${left[@]}")
sed 's/^/   /' "$OUT/held.log"

step "capture on Linux's side"
stop_capture
# every frame on Linux's link: checksums, malformed frames, no spurious
# retransmission from the shared address
check_capture "$OUT/linux.pcap" "$SHARED"

step "stop"
for pid in "$FORGER" "$SINK_A" "$SINK_B" "$ECHO"; do stop "$pid" || true; done
stop "$FDPID" || die "filterd did not exit cleanly"
grep -E "rx_to_node|rule_hit|egress_denied|tx_denied" "$OUT/filterd.log" | sed 's/^/   /'
