#!/usr/bin/env bash
# integration.filterd_remote: a compute node on another host, attached to
# filterd over plain Ethernet (the node port) and a TCP control connection
# (docs/filterd.md, "Nodes on other hosts").
#
#   filterd_remote.sh FILTERD XK_TCP_PERF XKCTL XK_TEST_NODE   (as root; CTest runs it)
#
#   netns A (Linux)  xkrl<pid> 192.0.2.1/24
#       |  veth: the external link
#   netns B (filterd) xkrx<pid>: external port (af_packet), 192.0.2.10/24
#                     xkrn<pid>: node port (af_packet), no address
#                     xkrm<pid>: 203.0.113.1/24, Linux's own TCP: the control
#                                socket (--control-tcp 203.0.113.1:7500,
#                                --heartbeat-ms 1000: the nodes ping)
#                     a local node: xk-tcp-perf over memif (echo on 5002)
#       |  veth: the node port's link     |  veth: the management network
#   netns C (remote host) xkrc<pid>: the remote nodes' DPDK port (af_packet)
#                         xkrd<pid>: 203.0.113.2/24, their control connections
#
# The control connections run on a veth of their own (the management
# network, Linux TCP in B and C), not on the node port's link: the node
# port is DPDK's, and C's kernel sending on it would be frames from a MAC
# no node has.
#
# (1) Linux -> 192.0.2.10:5001, served by a remote node (echo): every stream
#     intact (SHA-256); and :5002, served by the local memif node: intact.
# (2) a remote node connects out to Linux, and a local memif node after it:
#     both streams arrive intact (their throughputs are printed).
# (3) a HELLO without a proof of the token, with the token in clear, or with a
#     proof made with a wrong token, gets ERROR
#     permission_denied and the connection closed.
# (4) a remote forger (xk-test-node, registered with its own MAC) sends RSTs
#     on a held connection's 4-tuple and UDP from a port it does not own:
#     its egress_denied is exactly that many, nothing gets out, the held
#     connection finishes intact; frames from a MAC no node has are dropped
#     and counted (st0.node_port_unknown_mac).
# (5) kill -9 of a remote node (a sink on :5003) while Linux streams into
#     it: its control connection closes, filterd forgets it, Linux gets RST
#     on its next segment (within 1 s); a new remote node takes its port and
#     MAC again.
#   XK_INT_FR_BYTES      bytes per connection in (1) (default 1m; 256k under ASan)
#   XK_INT_FR_OUT_BYTES  bytes of each stream in (2) (default: XK_INT_FR_BYTES)
set -euo pipefail
TEST_NAME=filterd_remote
source "$(dirname "$0")/lib.sh"

[ $# -ge 4 ] || die "usage: $0 FILTERD XK_TCP_PERF XKCTL XK_TEST_NODE"
FD=$(readlink -f "$1")
XK=$(readlink -f "$2")
XKCTL=$(readlink -f "$3")
TN=$(readlink -f "$4")
HERE=$(cd "$(dirname "$0")" && pwd)
for b in "$FD" "$XK" "$XKCTL" "$TN"; do [ -x "$b" ] || die "$b is not executable"; done
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
PY=/usr/bin/python3
for tool in ip ethtool tcpdump tshark "$PY"; do command -v "$tool" >/dev/null || die "needs $tool"; done
if is_sanitized "$XK"; then
  BYTES=${XK_INT_FR_BYTES:-262144}
else
  BYTES=${XK_INT_FR_BYTES:-1048576}
fi
OUT_BYTES=${XK_INT_FR_OUT_BYTES:-$BYTES}
CONNS=8
FORGED_TCP=25
FORGED_UDP=10
FORGED_MAC=10

NSA=xk-fr-$$-a
NSB=xk-fr-$$-b
NSC=xk-fr-$$-c
LNX=xkrl$$
XKIF=xkrx$$
NPB=xkrn$$   # filterd's node port
NPC=xkrc$$   # the remote host's end of it
MGB=xkrm$$   # management network, B
MGC=xkrd$$   # management network, C
LNX_IP=192.0.2.1
SHARED=192.0.2.10
CTL_IP=203.0.113.1
CTL_PORT=7500
REMOTE_MAC=02:00:00:00:0c:01
CLIENT_MAC=02:00:00:00:0c:02
VICTIM_MAC=02:00:00:00:0c:03
FORGER_MAC=02:00:00:00:0c:77
NOBODY_MAC=02:00:00:00:0c:99
OUT=$PWD/$TEST_NAME.out
rm -rf "$OUT"
mkdir -p "$OUT"
CTL=$OUT/filterd.sock
MEMIF=/run/xk-fr-$$.memif  # an abstract-namespace name for memif; no file

install_cleanup

step "topology: $NSA ($LNX $LNX_IP/24) <-> $NSB (filterd) <-> $NSC (remote host); control on 203.0.113.0/24"
make_veth_topology "$NSA" "$NSB" "$LNX" "$XKIF" "$LNX_IP/24"
start_capture "$NSA" "$LNX" "$OUT/linux.pcap"  # checked at the end (check_capture)
ip netns add "$NSC"
ip netns exec "$NSC" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
ip -n "$NSC" link set lo up
ip link add "$NPB" type veth peer name "$NPC"
ip link set "$NPB" netns "$NSB"
ip link set "$NPC" netns "$NSC"
ip netns exec "$NSB" ethtool -K "$NPB" rx off tx off tso off gso off gro off 2>/dev/null \
  || ip netns exec "$NSB" ethtool -K "$NPB" rx off tx off tso off gso off
ip netns exec "$NSC" ethtool -K "$NPC" rx off tx off tso off gso off gro off 2>/dev/null \
  || ip netns exec "$NSC" ethtool -K "$NPC" rx off tx off tso off gso off
ip -n "$NSB" link set "$NPB" up
ip -n "$NSC" link set "$NPC" up
ip link add "$MGB" type veth peer name "$MGC"
ip link set "$MGB" netns "$NSB"
ip link set "$MGC" netns "$NSC"
ip -n "$NSB" addr add "$CTL_IP/24" dev "$MGB"
ip -n "$NSC" addr add 203.0.113.2/24 dev "$MGC"
ip -n "$NSB" link set "$MGB" up
ip -n "$NSC" link set "$MGC" up

# The shared secret: readable by its owner only (filterd refuses it otherwise).
TOKEN=$OUT/token
( umask 077; "$PY" -c "import secrets; print(secrets.token_hex(32))" > "$TOKEN" )
WRONG=$OUT/wrong-token
( umask 077; "$PY" -c "import secrets; print(secrets.token_hex(32))" > "$WRONG" )

step "filterd: external port $XKIF, node port $NPB, control on $CTL and $CTL_IP:$CTL_PORT"
ip netns exec "$NSB" "$FD" --port "net_af_packet0,iface=$XKIF,framecnt=4096" --port-opts "mbufs=16383" \
  --node-port "net_af_packet1,iface=$NPB,framecnt=4096" --node-port-opts "mbufs=16383" \
  --ip "$SHARED/24" --control "$CTL" --memif-socket "$MEMIF" \
  --control-tcp "$CTL_IP:$CTL_PORT" --control-token "$TOKEN" --heartbeat-ms 1000 > "$OUT/filterd.log" 2>&1 &
FDPID=$!
PIDS+=("$FDPID")
wait_for "$OUT/filterd.log" "ready" "$FDPID" 30
grep -q "control over TCP on $CTL_IP:$CTL_PORT" "$OUT/filterd.log" || die "filterd does not serve TCP"

xkctl() {
  ip netns exec "$NSB" "$XKCTL" --control "$CTL" "$@"
}
jq_py() { "$PY" -c "import json,sys; j=json.load(sys.stdin); print($1)"; }

# A remote node: xk-tcp-perf in C on its own port, attached over TCP; its
# pid in NODE_PID. Sleeping when idle (a small machine).
remote() {  # name mac args...
  local name=$1 mac=$2
  shift 2
  ip netns exec "$NSC" "$XK" "$@" --filterd "tcp:$CTL_IP:$CTL_PORT" --filterd-token "$TOKEN" \
    --port "net_af_packet0,iface=$NPC,framecnt=4096" --port-opts "mbufs=16383" --mac "$mac" --idle sleep \
    > "$OUT/$name.log" 2>&1 &
  NODE_PID=$!
  PIDS+=("$NODE_PID")
}

step "(1) a remote node serves echo on $SHARED:5001, a local memif node on :5002; Linux sends $CONNS streams to each"
remote remote "$REMOTE_MAC" server --mode echo --tcp-port 5001 --count 1000000
REMOTE=$NODE_PID
ip netns exec "$NSB" "$XK" server --mode echo --tcp-port 5002 --count 1000000 --filterd "$CTL" --idle sleep \
  > "$OUT/local.log" 2>&1 &
LOCAL=$!
PIDS+=("$LOCAL")
wait_for "$OUT/remote.log" "ready" "$REMOTE" 30
wait_for "$OUT/local.log" "ready" "$LOCAL" 30
grep -q "attached on the node port, MAC $REMOTE_MAC" "$OUT/filterd.log" || die "(1) the remote node is not on the node port"
xkctl nodes | sed 's/^/   /'
chan=$(xkctl nodes --json | jq_py "[(n['channel'], n.get('mac')) for n in j['nodes'] if n['pid'] == $REMOTE][0]")
[ "$chan" = "('ethernet', '$REMOTE_MAC')" ] || die "(1) xkctl shows the remote node's channel as $chan"
for port in 5001 5002; do
  ip netns exec "$NSA" "$PY" "$HERE/multi_peer.py" echo --peer "$SHARED" --port $port --conns $CONNS \
    --bytes "$BYTES" > "$OUT/linux-echo-$port.log" 2>&1 \
    || { cat "$OUT/linux-echo-$port.log" >&2; die "(1): not every stream to :$port came back intact"; }
  sed 's/^/   /' "$OUT/linux-echo-$port.log"
done
n=$(grep -c '^STATS who=server' "$OUT/remote.log" || true)
[ "$n" -eq $CONNS ] || die "(1): the remote node served $n connections, $CONNS expected"

step "(2) a remote node, then a local one, connects out to Linux"
ip netns exec "$NSA" "$PY" "$HERE/multi_peer.py" sink --bind "$LNX_IP" --port 7001 --conns 2 \
  > "$OUT/linux-sink.log" 2>&1 &
SINK=$!
PIDS+=("$SINK")
wait_for "$OUT/linux-sink.log" "READY" "$SINK" 20
remote client "$CLIENT_MAC" client --peer "$LNX_IP:7001" --bytes "$OUT_BYTES" --seed 3
CLIENT=$NODE_PID
wait "$CLIENT" || { tail "$OUT/client.log" >&2; die "(2): the remote client failed"; }
# The same from a memif node: the two throughputs side by side.
ip netns exec "$NSB" "$XK" client --peer "$LNX_IP:7001" --bytes "$OUT_BYTES" --seed 4 --filterd "$CTL" --idle sleep \
  > "$OUT/local-client.log" 2>&1 || { tail "$OUT/local-client.log" >&2; die "(2): the local client failed"; }
wait "$SINK" || { cat "$OUT/linux-sink.log" >&2; die "(2): the Linux sink failed"; }
for log in client local-client; do
  sent=$(sed -n 's/^RESULT role=client .*sha256=\([0-9a-f]*\).*/\1/p' "$OUT/$log.log")
  [ -n "$sent" ] || { cat "$OUT/$log.log" >&2; die "(2): $log printed no result"; }
  grep -q "sha256=$sent" "$OUT/linux-sink.log" || die "(2): $log's stream ($sent) did not arrive intact"
  echo "   $log: $(sed -n 's/^RESULT role=client .*seconds=\([0-9.]*\) gbps=\([0-9.]*\).*/\1 s, \2 Gbit\/s/p' "$OUT/$log.log")"
done
sed 's/^/   /' "$OUT/linux-sink.log"

step "(3) no proof of the token, the token itself in clear, or a proof made with a wrong one: refused"
ip netns exec "$NSC" "$PY" "$HERE/ctl_hello.py" --connect "$CTL_IP:$CTL_PORT" > "$OUT/no-token.log" 2>&1 \
  || { cat "$OUT/no-token.log" >&2; die "(3): a HELLO without a proof was not refused"; }
ip netns exec "$NSC" "$PY" "$HERE/ctl_hello.py" --connect "$CTL_IP:$CTL_PORT" --token "$TOKEN" \
  > "$OUT/clear-token.log" 2>&1 || { cat "$OUT/clear-token.log" >&2; die "(3): the token in clear was not refused"; }
ip netns exec "$NSC" "$PY" "$HERE/ctl_hello.py" --connect "$CTL_IP:$CTL_PORT" --prove "$WRONG" \
  > "$OUT/wrong-token.log" 2>&1 || { cat "$OUT/wrong-token.log" >&2; die "(3): a proof with a wrong token was not refused"; }
cat "$OUT/no-token.log" "$OUT/clear-token.log" "$OUT/wrong-token.log" | sed 's/^/   /'
refused=$(xkctl counters --json | jq_py "j['counters']['control']['refused_token']")
[ "$refused" -eq 3 ] || die "(3): control.refused_token is $refused, not 3"
# Python's hmac, not ours, makes the right proof and checks filterd's.
ip netns exec "$NSC" "$PY" "$HERE/ctl_hello.py" --connect "$CTL_IP:$CTL_PORT" --prove "$TOKEN" --expect-ok \
  > "$OUT/proof.log" 2>&1 || { cat "$OUT/proof.log" >&2; die "(3): the right proof (Python's HMAC) was not taken"; }
sed 's/^/   /' "$OUT/proof.log"

step "(4) a remote forger: $FORGED_TCP RSTs on a held connection's 4-tuple, $FORGED_UDP datagrams from a port not its own"
ip netns exec "$NSA" "$PY" "$HERE/admin_peer.py" hold --peer "$SHARED" --port 5001 --go "$OUT/go" \
  > "$OUT/held.log" 2>&1 &
HELD=$!
PIDS+=("$HELD")
wait_for "$OUT/held.log" "CONNECTED" "$HELD" 30
CPORT=$(sed -n 's/^CONNECTED lport=\([0-9]*\)$/\1/p' "$OUT/held.log")
before=$(xkctl counters --json | jq_py "j['counters']['filter']['egress_denied']")
ip netns exec "$NSC" "$TN" --filterd "tcp:$CTL_IP:$CTL_PORT" --token "$TOKEN" --name forger \
  --port "net_af_packet1,iface=$NPC" --mac "$FORGER_MAC" \
  --forge "tcp:5001:$LNX_IP:$CPORT:$FORGED_TCP" --forge "udp:7777:$LNX_IP:9:$FORGED_UDP" > "$OUT/forger.log" 2>&1 &
FORGER=$!
PIDS+=("$FORGER")
wait_for "$OUT/forger.log" "SENT n=$((FORGED_TCP + FORGED_UDP))" "$FORGER" 30
ID_F=$(sed -n 's/^ready node=\([0-9]*\) .*/\1/p' "$OUT/forger.log")
FORGED=$((FORGED_TCP + FORGED_UDP))
denied=0
for _ in $(seq 100); do
  denied=$(xkctl counters --json | jq_py "[n['egress_denied'] for n in j['nodes'] if n['id'] == $ID_F][0]")
  [ "$denied" -ge $FORGED ] && break
  sleep 0.1
done
COUNTERS=$(xkctl counters --json)
[ "$denied" = "$FORGED" ] || die "(4) the forger's egress_denied is $denied, expected $FORGED"
allowed=$(echo "$COUNTERS" | jq_py "[n['egress_allowed'] for n in j['nodes'] if n['id'] == $ID_F][0]")
[ "$allowed" = 0 ] || die "(4) $allowed of the forger's frames got out"
others=$(echo "$COUNTERS" | jq_py "sum(n['egress_denied'] for n in j['nodes'] if n['id'] != $ID_F)")
[ "$others" = 0 ] || die "(4) $others denials attributed to honest nodes"
after=$(echo "$COUNTERS" | jq_py "j['counters']['filter']['egress_denied']")
[ $((after - before)) -eq $FORGED ] || die "(4) filter.egress_denied rose by $((after - before)), not $FORGED"
echo "   forger (node $ID_F): $denied denied, $allowed allowed"
# The same frames from a MAC nobody registered: not even attributed.
unknown_before=$(echo "$COUNTERS" | jq_py "j['counters']['st0']['node_port_unknown_mac']")
ip netns exec "$NSC" "$TN" --filterd "tcp:$CTL_IP:$CTL_PORT" --token "$TOKEN" --name spoofer \
  --port "net_af_packet2,iface=$NPC" --mac 02:00:00:00:0c:78 --forge-from "$NOBODY_MAC" \
  --forge "udp:7778:$LNX_IP:9:$FORGED_MAC" > "$OUT/spoofer.log" 2>&1 &
SPOOFER=$!
PIDS+=("$SPOOFER")
wait_for "$OUT/spoofer.log" "SENT n=$FORGED_MAC" "$SPOOFER" 30
unknown=0
for _ in $(seq 100); do
  unknown=$(xkctl counters --json | jq_py "j['counters']['st0']['node_port_unknown_mac']")
  [ $((unknown - unknown_before)) -ge $FORGED_MAC ] && break
  sleep 0.1
done
[ $((unknown - unknown_before)) -eq $FORGED_MAC ] \
  || die "(4) st0.node_port_unknown_mac rose by $((unknown - unknown_before)), not $FORGED_MAC"
echo "   $FORGED_MAC frames from $NOBODY_MAC dropped (st0.node_port_unknown_mac)"
touch "$OUT/go"
wait "$HELD" || { cat "$OUT/held.log" >&2; die "(4) the held connection was disturbed"; }
drop_pid() { local left=() p; for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || left+=("$p"); done; PIDS=("${left[@]}"); }
drop_pid "$HELD"
sed 's/^/   /' "$OUT/held.log"
stop "$FORGER" || true
stop "$SPOOFER" || true

step "(5) kill -9 of a remote node (a sink on :5003) while Linux streams into it: RST on Linux's next segment"
remote victim "$VICTIM_MAC" server --mode sink --tcp-port 5003 --count 1000000
VICTIM=$NODE_PID
wait_for "$OUT/victim.log" "ready" "$VICTIM" 30
TRIGGER=$OUT/victim.gone
ip netns exec "$NSA" "$PY" "$HERE/multi_peer.py" rstwatch --peer "$SHARED" --port 5003 --iface "$LNX" \
  --trigger "$TRIGGER" --rate 262144 --bound 1 --timeout 30 > "$OUT/rstwatch.log" 2>&1 &
WATCH=$!
PIDS+=("$WATCH")
wait_for "$OUT/rstwatch.log" "CONNECTED" "$WATCH" 10
sleep 1
victim_id=$(sed -n 's/^filterd: node \([0-9]*\) (xk-tcp-perf, pid '"$VICTIM"').*/\1/p' "$OUT/filterd.log" | head -1)
[ -n "$victim_id" ] || die "filterd.log names no node with the victim's pid $VICTIM"
touch "$TRIGGER"
kill -9 "$VICTIM"
wait "$VICTIM" 2>/dev/null || true
drop_pid "$VICTIM"
wait_for "$OUT/filterd.log" "node $victim_id gone" "$FDPID" 10
wait "$WATCH" || { cat "$OUT/rstwatch.log" >&2; die "(5): Linux saw no RST within 1 s of its next segment"; }
drop_pid "$WATCH"
sed 's/^/   /' "$OUT/rstwatch.log"
remote again "$VICTIM_MAC" server --mode sink --tcp-port 5003 --count 1000000
AGAIN=$NODE_PID
wait_for "$OUT/again.log" "ready" "$AGAIN" 30
echo "   port 5003 and MAC $VICTIM_MAC are taken again by a new remote node"

step "capture on Linux's side"
stop_capture
# every frame on Linux's link: checksums, malformed frames, no spurious
# retransmission from the shared address
check_capture "$OUT/linux.pcap" "$SHARED"

step "stop"
stop "$AGAIN" || true
stop "$REMOTE" || true
stop "$LOCAL" || true
stop "$FDPID" || die "filterd did not exit cleanly"
grep -E "rx_to_node|tx_from_nodes|node_port_unknown_mac|egress_denied|tcp_accepted|refused_token" \
  "$OUT/filterd.log" | sed 's/^/   /'
# The remote nodes pinged every second throughout: none was taken for dead.
if grep -q "heartbeat_lost" "$OUT/filterd.log"; then die "filterd lost the heartbeat of a live remote node"; fi
