#!/usr/bin/env bash
# integration.filterd_failures: what happens when a node or filterd dies
# (docs/filterd.md, "Failures").
#
#   filterd_failures.sh FILTERD XK_TCP_PERF XKCTL    (as root; CTest runs it)
#
#   netns xk-ff-<pid>-a: Linux, xkffl<pid> 192.0.2.1/24
#   netns xk-ff-<pid>-b: filterd on xkffx<pid> (DPDK net_af_packet) as
#                        192.0.2.10/24; xk-tcp-perf nodes over shm channels
#
# (a) kill -9 of a node mid-transfer. Linux streams into it (port 5002)
#     while 6 paced echo connections run through the two nodes of the
#     listen group on 5001. From the first segment Linux sends after the
#     kill, the RST comes within 1 s (timed on a packet socket; this
#     includes filterd noticing the death); the 6 echo streams come back
#     intact (SHA-256); port 5002 can be listened on again.
# (b) kill -9 of filterd mid-transfer, and a new filterd started in its
#     place (same address and secret): 6 paced echo connections from Linux
#     to the group's nodes (accepted connections) and 2 nodes streaming to
#     a slow Linux sink (connected flows) are all in flight. Every node
#     reconnects, resumes its id and memif channel, and RESYNCs; every
#     stream completes intact (SHA-256), no connection is lost. A user rule
#     added with xkctl before the kill (filterd --rules-file) is back for
#     its node after it resumed.
#   XK_INT_FF_BYTES   bytes per connection (default 768k; 256k under ASan)
set -euo pipefail
TEST_NAME=filterd_failures
source "$(dirname "$0")/lib.sh"

[ $# -ge 3 ] || die "usage: $0 FILTERD XK_TCP_PERF XKCTL"
FD=$(readlink -f "$1")
XK=$(readlink -f "$2")
XKCTL=$(readlink -f "$3")
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "$FD" ] && [ -x "$XK" ] && [ -x "$XKCTL" ] || die "$FD, $XK or $XKCTL is not executable"
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
PY=/usr/bin/python3
for tool in ip ethtool tcpdump tshark "$PY"; do command -v "$tool" >/dev/null || die "needs $tool"; done
if is_sanitized "$XK"; then
  BYTES=${XK_INT_FF_BYTES:-262144}
else
  BYTES=${XK_INT_FF_BYTES:-786432}
fi
# Every stream is paced to last about 5 s, so that the failures, 1.5 s in,
# cut all of them in the middle.
RATE=$((BYTES / 5))
CONNS=6

NSA=xk-ff-$$-a
NSB=xk-ff-$$-b
LNX=xkffl$$
XKIF=xkffx$$
LNX_IP=192.0.2.1
SHARED=192.0.2.10
SECRET=000102030405060708090a0b0c0d0e0f
OUT=$PWD/filterd_failures.out
rm -rf "$OUT"
mkdir -p "$OUT"
CTL=$OUT/filterd.sock
MEMIF=/run/xk-ff-$$.memif  # an abstract-namespace name for memif; no file

install_cleanup

step "topology: $NSA ($LNX $LNX_IP/24) <-veth-> $NSB (filterd on $XKIF as $SHARED/24)"
make_veth_topology "$NSA" "$NSB" "$LNX" "$XKIF" "$LNX_IP/24"
start_capture "$NSA" "$LNX" "$OUT/linux.pcap"  # checked at the end (check_capture)

# start_filterd LOG [ARGS...]: filterd, its pid in FDPID, its log $OUT/LOG.log.
start_filterd() {
  local log=$1
  shift
  ip netns exec "$NSB" "$FD" "$@" --port "net_af_packet0,iface=$XKIF,framecnt=4096" --port-opts "mbufs=16383" \
    --ip "$SHARED/24" --control "$CTL" --memif-socket "$MEMIF" --secret "$SECRET" --rules-file "$OUT/rules" \
    > "$OUT/$log.log" 2>&1 &
  FDPID=$!
  PIDS+=("$FDPID")
  wait_for "$OUT/$log.log" "ready" "$FDPID" 30
}

# A node: xk-tcp-perf attached to filterd, its pid in NODE_PID. It keeps
# trying to reach a filterd that went away for 20 s.
node() {  # name args...
  local name=$1
  shift
  XK_FILTERD_RECONNECT_MS=20000 ip netns exec "$NSB" "$XK" "$@" --filterd "$CTL" --idle sleep \
    > "$OUT/$name.log" 2>&1 &
  NODE_PID=$!
  PIDS+=("$NODE_PID")
}

drop_pid() {
  local left=() p
  for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || left+=("$p"); done
  PIDS=("${left[@]+"${left[@]}"}")
}

echo_peer() {  # log
  ip netns exec "$NSA" "$PY" "$HERE/multi_peer.py" echo --peer "$SHARED" --port 5001 --conns $CONNS \
    --bytes "$BYTES" --rate "$RATE" --timeout 40 > "$OUT/$1" 2>&1 &
  PEER=$!
  PIDS+=("$PEER")
}

step "filterd; two nodes listen on $SHARED:5001 as a group (echo), a third alone on 5002 (sink)"
# A first start has nothing to resync: no quiet grace, or (a)'s RST -- a
# second after the start on a fast machine -- would be held back by it. The
# restart in (b) keeps the default grace.
start_filterd filterd --resync-grace 0
node grp1 server --mode echo --group --count 1000000
GRP1=$NODE_PID
node grp2 server --mode echo --group --count 1000000
GRP2=$NODE_PID
node victim server --mode sink --tcp-port 5002 --count 1000000
VICTIM=$NODE_PID
for n in grp1:$GRP1 grp2:$GRP2 victim:$VICTIM; do wait_for "$OUT/${n%%:*}.log" "ready" "${n#*:}" 30; done

step "(a) kill -9 of the node on 5002 while Linux streams into it and $CONNS echo streams run"
TRIGGER=$OUT/victim.gone
ip netns exec "$NSA" "$PY" "$HERE/multi_peer.py" rstwatch --peer "$SHARED" --port 5002 --iface "$LNX" \
  --trigger "$TRIGGER" --rate 262144 --bound 1 --timeout 30 > "$OUT/rstwatch.log" 2>&1 &
WATCH=$!
PIDS+=("$WATCH")
wait_for "$OUT/rstwatch.log" "CONNECTED" "$WATCH" 10
echo_peer echo-a.log
ECHO_A=$PEER
sleep 1.5
victim_id=$(sed -n 's/^filterd: node \([0-9]*\) (xk-tcp-perf, pid '"$VICTIM"'.*/\1/p' "$OUT/filterd.log" | head -1)
[ -n "$victim_id" ] || die "filterd.log names no node with the victim's pid $VICTIM"
touch "$TRIGGER"
kill -9 "$VICTIM"
wait "$VICTIM" 2>/dev/null || true
drop_pid "$VICTIM"
wait_for "$OUT/filterd.log" "node $victim_id gone" "$FDPID" 10
wait "$WATCH" || { cat "$OUT/rstwatch.log" >&2; die "(a): Linux saw no RST within 1 s of its next segment"; }
drop_pid "$WATCH"
sed 's/^/   /' "$OUT/rstwatch.log"
wait "$ECHO_A" || { cat "$OUT/echo-a.log" >&2; die "(a): the other nodes' streams were hurt"; }
drop_pid "$ECHO_A"
sed 's/^/   /' "$OUT/echo-a.log"
node again server --mode sink --tcp-port 5002 --count 1000000
AGAIN=$NODE_PID
wait_for "$OUT/again.log" "ready" "$AGAIN" 30
echo "   port 5002 is listened on again"
stop "$AGAIN" || die "(a): the new node on 5002 did not stop cleanly"

step "(b) kill -9 of filterd while $CONNS echo streams (Linux -> group) and 2 node -> Linux streams run"
ip netns exec "$NSA" "$PY" "$HERE/multi_peer.py" sink --bind "$LNX_IP" --port 7001 --conns 2 --rate "$RATE" \
  --rcvbuf 32768 --timeout 40 > "$OUT/linux-sink.log" 2>&1 &
SINK=$!
PIDS+=("$SINK")
wait_for "$OUT/linux-sink.log" "READY" "$SINK" 20
node cli1 client --peer "$LNX_IP:7001" --bytes "$BYTES" --seed 1 --timeout 40
CLI1=$NODE_PID
node cli2 client --peer "$LNX_IP:7001" --bytes "$BYTES" --seed 2 --timeout 40
CLI2=$NODE_PID
echo_peer echo-b.log
ECHO_B=$PEER
# Every stream under way before filterd goes: both nodes' connections
# accepted by the sink, all six echo connections established.
for _ in $(seq 200); do
  [ "$(grep -c '^ACCEPTED' "$OUT/linux-sink.log")" -ge 2 ] &&
    [ "$(ip netns exec "$NSA" ss -Htn state established '( dport = :5001 )' | wc -l)" -ge $CONNS ] && break
  sleep 0.1
done
[ "$(grep -c '^ACCEPTED' "$OUT/linux-sink.log")" -ge 2 ] || die "(b): the nodes did not connect to the Linux sink"
xkctl() { ip netns exec "$NSB" "$XKCTL" --control "$CTL" "$@"; }
jq_py() { "$PY" -c "import json,sys; j=json.load(sys.stdin); print($1)"; }
ID_GRP1=$(xkctl nodes --json | jq_py "[n['id'] for n in j['nodes'] if n['pid'] == $GRP1][0]")
xkctl rule add 'udp dst port 9999' --node "$ID_GRP1" --priority 3 > /dev/null
grep -q "udp dst port 9999" "$OUT/rules" || die "(b): the rule is not in the rules file"
sleep 1
kill -9 "$FDPID"
wait "$FDPID" 2>/dev/null || true
drop_pid "$FDPID"
T_KILL=$(date +%s.%N)
sleep 1  # the gap: filterd is down
for n in grp1 grp2 cli1 cli2; do
  grep -q "control connection closed" "$OUT/$n.log" || { tail -5 "$OUT/$n.log" >&2; die "(b): $n did not notice filterd go"; }
done
step "    a new filterd, $(awk -v a="$T_KILL" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s after the kill"
start_filterd filterd2
step "    the new filterd is ready"
for n in grp1:$GRP1 grp2:$GRP2 cli1:$CLI1 cli2:$CLI2; do
  wait_for "$OUT/${n%%:*}.log" "resumed as node" "${n#*:}" 25
  echo "   ${n%%:*}: $(grep -m1 'resumed as node' "$OUT/${n%%:*}.log")"
done
wait "$ECHO_B" || { cat "$OUT/echo-b.log" >&2; die "(b): an echo stream was lost or damaged"; }
drop_pid "$ECHO_B"
sed 's/^/   /' "$OUT/echo-b.log"
for i in 1 2; do
  pid_var=CLI$i
  wait "${!pid_var}" || { tail "$OUT/cli$i.log" >&2; die "(b): node client $i failed"; }
  drop_pid "${!pid_var}"
done
wait "$SINK" || { cat "$OUT/linux-sink.log" >&2; die "(b): the Linux sink failed"; }
drop_pid "$SINK"
for i in 1 2; do
  sent=$(sed -n 's/^RESULT role=client .*sha256=\([0-9a-f]*\).*/\1/p' "$OUT/cli$i.log")
  [ -n "$sent" ] || die "(b): node client $i reported no result"
  grep -q "bytes=$BYTES sha256=$sent" "$OUT/linux-sink.log" || die "(b): node $i's stream ($sent) did not arrive intact"
  echo "   cli$i: $(grep -m1 '^STATS who=client' "$OUT/cli$i.log" | grep -o 'retransmits=[0-9]* rto_expiries=[0-9]*')"
done
sed 's/^/   /' "$OUT/linux-sink.log"
got=$(xkctl rules --json | jq_py "[(r['node'], r['priority'], r['expression']) for r in j['rules']]")
[ "$got" = "[($ID_GRP1, 3, 'udp dst port 9999')]" ] || die "(b): after the restart, xkctl rules shows $got"
echo "   the user rule is back for node $ID_GRP1: $got"

step "capture on Linux's side"
stop_capture
# every frame on Linux's link: checksums, malformed frames; the kills
# make retransmissions expected, so none is judged spurious
check_capture "$OUT/linux.pcap" "$SHARED" lossy

step "stop"
for pid in "$GRP1" "$GRP2"; do stop "$pid" || die "a node did not stop cleanly"; done
stop "$FDPID" || die "the new filterd did not exit cleanly"
grep -E "resumes|resynced|resync_refused|rules_restored|rx_quiet|default_rst|egress_denied|learned_flows" "$OUT/filterd2.log" \
  | sed 's/^/   /'
grep -q "resumes *4$" "$OUT/filterd2.log" || die "the new filterd did not take all four nodes back"
grep -q "rules_restored *1$" "$OUT/filterd2.log" || die "the new filterd did not give the user rule back"
if grep -q "resync_refused" "$OUT/filterd2.log"; then die "the new filterd refused RESYNC entries"; fi
if grep -q "egress_denied" "$OUT/filterd2.log"; then die "the new filterd denied frames of honest nodes"; fi
