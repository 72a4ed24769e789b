#!/usr/bin/env bash
# integration.filterd_capi_node: a node of several stacks made through the C
# API (xk_node_create), behind filterd: one registration, a channel queue per
# stack, each stack's service thread pinned, and its listeners one group.
#
#   filterd_capi_node.sh FILTERD XKCTL XK_CAPI_NODE   (as root; CTest runs it)
#
#   netns xk-cn-<pid>-a: Linux, xkcl<pid> 192.0.2.1/24
#   netns xk-cn-<pid>-b: filterd on xkcx<pid> (DPDK net_af_packet) as
#                        192.0.2.10/24; xk-capi-node --stacks 2 (C, service
#                        mode, XK_CPU=0: stack q pinned to cpu q) over memif
#
# (1) filterd attached one node with 2 queues; the stacks' threads run on
#     cpus 0 and 1;
# (2) Linux opens 16 echo connections to 192.0.2.10:7 at once: every stream
#     comes back intact (SHA-256) and both stacks served some (their counts,
#     printed at exit, add up to 16), with frames steered to both channels;
# (3) the node exits by itself after the 16th connection, and filterd sees
#     it go; the capture on Linux's side is clean.
set -euo pipefail
TEST_NAME=filterd_capi_node
source "$(dirname "$0")/lib.sh"

[ $# -ge 3 ] || die "usage: $0 FILTERD XKCTL XK_CAPI_NODE"
FD=$(readlink -f "$1")
XKCTL=$(readlink -f "$2")
NODE=$(readlink -f "$3")
HERE=$(cd "$(dirname "$0")" && pwd)
for b in "$FD" "$XKCTL" "$NODE"; do [ -x "$b" ] || die "$b is not executable"; done
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
PY=/usr/bin/python3
for tool in ip ethtool tcpdump tshark "$PY"; do command -v "$tool" >/dev/null || die "needs $tool"; done
CONNS=16
BYTES=262144

filterd_veth_setup cn  # NSA NSB LNX XKIF LNX_IP SHARED OUT CTL MEMIF; capture on

step "filterd"
start_filterd "$FD"

step "(1) xk-capi-node --stacks 2 (C API, service mode, XK_CPU=0)"
ip netns exec "$NSB" env XK_FILTERD="$CTL" XK_MODE=service XK_IDLE=spin XK_CPU=0 \
  "$NODE" --stacks 2 --port 7 > "$OUT/node.log" 2>&1 &
NODE_PID=$!
PIDS+=("$NODE_PID")
wait_for "$OUT/node.log" "ready" "$NODE_PID" 60
grep -c "attached with 2 queues" "$OUT/filterd.log" | grep -qx 1 || die "(1): filterd did not attach one node with 2 queues"
pinned=0
for t in /proc/"$NODE_PID"/task/*; do
  case "$(cat "$t/comm")" in
    stack0) grep -q "^Cpus_allowed_list:[[:space:]]*0$" "$t/status" || die "(1): stack0 is not pinned to cpu 0"; pinned=$((pinned + 1)) ;;
    stack1) grep -q "^Cpus_allowed_list:[[:space:]]*1$" "$t/status" || die "(1): stack1 is not pinned to cpu 1"; pinned=$((pinned + 1)) ;;
  esac
done
[ "$pinned" -eq 2 ] || die "(1): expected the threads stack0 and stack1, found $pinned of them"

step "(2) Linux opens $CONNS echo connections to $SHARED:7 at once"
ip netns exec "$NSA" "$PY" "$HERE/multi_peer.py" echo --peer "$SHARED" --port 7 --conns $CONNS --bytes "$BYTES" \
  > "$OUT/linux-echo.log" 2>&1 || { cat "$OUT/linux-echo.log" >&2; die "(2): not every stream came back intact"; }
sed 's/^/   /' "$OUT/linux-echo.log"
ip netns exec "$NSB" "$XKCTL" --control "$CTL" counters > "$OUT/counters.txt" 2>&1 || die "(2): xkctl counters failed"
for ch in node1q0 node1q1; do
  n=$(awk -v o="st0/$ch" '$1 == o && $2 == "rx_frames" { print $3 }' "$OUT/counters.txt")
  echo "   $ch: ${n:-0} frames steered"
  [ -n "$n" ] && [ "$n" -gt 0 ] || die "(2): no frame was steered to $ch"
done

step "(3) SIGTERM: the node stops its threads and destroys its stacks"
stop "$NODE_PID" || { cat "$OUT/node.log" >&2; die "(3): xk-capi-node did not exit cleanly"; }
sed 's/^/   /' "$OUT/node.log"
total=0
for q in 0 1; do
  n=$(sed -n "s/^xk-capi-node: stack $q: \([0-9]*\) connections, \([0-9]*\) bytes$/\1/p" "$OUT/node.log")
  b=$(sed -n "s/^xk-capi-node: stack $q: \([0-9]*\) connections, \([0-9]*\) bytes$/\2/p" "$OUT/node.log")
  [ -n "$n" ] && [ "$n" -gt 0 ] || die "(2): stack $q served no connection"
  [ "$b" -eq $((n * BYTES)) ] || die "(2): stack $q echoed $b bytes for $n connections of $BYTES"
  total=$((total + n))
done
[ "$total" -eq "$CONNS" ] || die "(2): the stacks served $total connections, not $CONNS"
wait_for "$OUT/filterd.log" "gone" "$FDPID" 10

step "capture on Linux's side"
stop_capture
check_capture "$OUT/linux.pcap" "$SHARED"

step "stop"
stop "$FDPID" || die "filterd did not exit cleanly"
