#!/usr/bin/env bash
# integration.filterd_multiqueue: compute nodes that run several stacks each
# (one channel -- queue -- per stack, each stack's thread pinned to a core),
# behind filterd (docs/filterd.md, "Several stacks per node").
#
#   filterd_multiqueue.sh FILTERD XKCTL XK_ECHO   (as root; CTest runs it)
#
#   netns xk-mq-<pid>-a: Linux, xkml<pid> 192.0.2.1/24
#   netns xk-mq-<pid>-b: filterd on xkmx<pid> (DPDK net_af_packet) as
#                        192.0.2.10/24; 2 xk-echo nodes, each --stacks 2
#                        --cpus 0,1, attached over shm (4 channels)
#
# (1) both nodes' 4 stacks listen on 192.0.2.10:7 as one group; Linux opens
#     32 connections at once: every stream comes back intact (SHA-256), and
#     every one of the 4 stacks served at least one connection (its own
#     count, printed at exit);
# (2) filterd made one memif interface per queue, and steered frames to
#     every one of them (its per-channel counters, read with xkctl counters);
# (3) kill -9 of one node: filterd forgets both its queues, and the other
#     node's stacks go on serving (8 more connections intact).
#   XK_INT_MQ_BYTES   bytes per connection (default 256k)
set -euo pipefail
TEST_NAME=filterd_multiqueue
source "$(dirname "$0")/lib.sh"

[ $# -ge 3 ] || die "usage: $0 FILTERD XKCTL XK_ECHO"
FD=$(readlink -f "$1")
XKCTL=$(readlink -f "$2")
XK=$(readlink -f "$3")
HERE=$(cd "$(dirname "$0")" && pwd)
for b in "$FD" "$XKCTL" "$XK"; do [ -x "$b" ] || die "$b is not executable"; done
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
PY=/usr/bin/python3
for tool in ip ethtool tcpdump tshark "$PY"; do command -v "$tool" >/dev/null || die "needs $tool"; done
BYTES=${XK_INT_MQ_BYTES:-262144}
CONNS=32

filterd_veth_setup mq  # NSA NSB LNX XKIF LNX_IP SHARED OUT CTL MEMIF; capture on

step "filterd"
start_filterd "$FD"

step "(1) 2 nodes x 2 stacks (cpus 0,1) listen on $SHARED:7 as a group; Linux opens $CONNS connections"
NODES=()
for i in 1 2; do
  ip netns exec "$NSB" "$XK" --filterd "$CTL" --stacks 2 --cpus 0,1 --tcp-only --tcp-port 7 --idle sleep \
    > "$OUT/node$i.log" 2>&1 &
  NODES+=("$!")
  PIDS+=("$!")
done
for i in 1 2; do wait_for "$OUT/node$i.log" "ready" "${NODES[$((i - 1))]}" 60; done
grep -c "attached with 2 queues" "$OUT/filterd.log" | grep -qx 2 || die "(1): filterd did not attach 2 queues per node"
# Each node's stack threads run where --cpus put them.
for i in 1 2; do
  for t in /proc/"${NODES[$((i - 1))]}"/task/*; do
    name=$(cat "$t/comm")
    case "$name" in
      stack0) grep -q "^Cpus_allowed_list:[[:space:]]*0$" "$t/status" || die "(1): node $i stack0 is not pinned to cpu 0" ;;
      stack1) grep -q "^Cpus_allowed_list:[[:space:]]*1$" "$t/status" || die "(1): node $i stack1 is not pinned to cpu 1" ;;
    esac
  done
done
ip netns exec "$NSA" "$PY" "$HERE/multi_peer.py" echo --peer "$SHARED" --port 7 --conns $CONNS --bytes "$BYTES" \
  > "$OUT/linux-echo.log" 2>&1 || { cat "$OUT/linux-echo.log" >&2; die "(1): not every stream came back intact"; }
sed 's/^/   /' "$OUT/linux-echo.log"

step "(2) a memif channel per queue, and frames steered to each (xkctl counters)"
ip netns exec "$NSB" "$XKCTL" --control "$CTL" counters > "$OUT/counters.txt" 2>&1 || die "(2): xkctl counters failed"
awk '$1 ~ /^st0\/node[12]q[01]$/ && $2 == "rx_frames"' "$OUT/counters.txt" | sed 's/^/   /'
for ch in node1q0 node1q1 node2q0 node2q1; do
  n=$(awk -v o="st0/$ch" '$1 == o && $2 == "rx_frames" { print $3 }' "$OUT/counters.txt")
  [ -n "$n" ] && [ "$n" -gt 0 ] || die "(2): no frame was steered to $ch"
done
others=$(awk '$2 == "tx_other_queue" && $3 != 0' "$OUT/counters.txt")
[ -z "$others" ] || die "(2): a stack sent for another queue's flow: $others"

step "(3) kill -9 of node 2: node 1's stacks go on"
kill -9 "${NODES[1]}"
wait "${NODES[1]}" 2>/dev/null || true
wait_for "$OUT/filterd.log" "gone" "$FDPID" 10
ip netns exec "$NSA" "$PY" "$HERE/multi_peer.py" echo --peer "$SHARED" --port 7 --conns 8 --bytes "$BYTES" \
  > "$OUT/linux-echo2.log" 2>&1 || { cat "$OUT/linux-echo2.log" >&2; die "(3): node 1 did not serve on alone"; }
sed 's/^/   /' "$OUT/linux-echo2.log"

step "capture on Linux's side"
stop_capture
# every frame on Linux's link: checksums, malformed frames, no spurious
# retransmission from the shared address
check_capture "$OUT/linux.pcap" "$SHARED"

step "stop"
stop "${NODES[0]}" || die "node 1 did not exit cleanly"
stop "$FDPID" || die "filterd did not exit cleanly"
sed -n "s/^xk-echo: \\(stack [0-9].*\\)$/   node 1 \\1/p" "$OUT/node1.log"
for q in 0 1; do
  n=$(sed -n "s/^xk-echo: stack $q (cpu $q): tcp: \([0-9]*\) connections.*/\1/p" "$OUT/node1.log")
  [ -n "$n" ] && [ "$n" -gt 0 ] || die "(1): node 1 stack $q served no connection"
done
# Node 1 served both rounds: 8 more connections, so its total is over what
# it had after (1) alone -- all of round (3) went to it.
total=$(sed -n 's/^xk-echo: tcp: \([0-9]*\) connections.*/\1/p' "$OUT/node1.log")
[ "$total" -ge 8 ] || die "(3): node 1 served $total connections, fewer than the 8 of round (3)"
