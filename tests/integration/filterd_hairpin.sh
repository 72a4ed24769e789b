#!/usr/bin/env bash
# integration.filterd_hairpin: TCP between two nodes behind filterd, which
# share one address (docs/filterd.md, "Node to node"). A node's stack sends
# what it does not own for the shared address to filterd (ipv4 hairpin=on),
# and filterd steers it to the node that owns it, after the egress check.
#
#   filterd_hairpin.sh FILTERD XKCTL XK_TCP_PERF   (as root; CTest runs it)
#
#   netns xk-hp-<pid>-a: Linux, only watching (a capture)
#   netns xk-hp-<pid>-b: filterd on DPDK net_af_packet as 192.0.2.10/24, and
#                        two xk-tcp-perf nodes over memif
#
# (1) node A listens on 5001; node B sends it 64 MiB to 192.0.2.10:5001: the
#     SHA-256 of both ends agree, and filterd counted the frames it turned
#     around (st0 hairpin);
# (2) A echoes, B ping-pongs 2000 exchanges of 100 bytes through filterd;
# (3) B connects to a port nobody listens on: refused at once (filterd hands
#     the SYN back to B, whose own stack answers it: st0 hairpin_answered);
# (4) no node's frame was denied, and none of the nodes' traffic reached the
#     external link.
set -euo pipefail
TEST_NAME=filterd_hairpin
source "$(dirname "$0")/lib.sh"

[ $# -ge 3 ] || die "usage: $0 FILTERD XKCTL XK_TCP_PERF"
FD=$(readlink -f "$1")
XKCTL=$(readlink -f "$2")
PERF=$(readlink -f "$3")
for b in "$FD" "$XKCTL" "$PERF"; do [ -x "$b" ] || die "$b is not executable"; done
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
for tool in ip ethtool tcpdump tshark; do command -v "$tool" >/dev/null || die "needs $tool"; done

filterd_veth_setup hp  # NSA NSB LNX XKIF LNX_IP SHARED OUT CTL MEMIF; capture on

step "filterd"
start_filterd "$FD"

counter() { awk -v o="$1" -v n="$2" '$1 == o && $2 == n { print $3 }' "$OUT/counters.txt"; }
node() {  # LOG ARGS...: an xk-tcp-perf node in the background; sets NPID
  local log=$1
  shift
  ip netns exec "$NSB" "$PERF" "$@" --filterd "$CTL" --idle yield > "$OUT/$log" 2>&1 &
  NPID=$!
  PIDS+=("$NPID")
}
result() { sed -n "s/^RESULT role=$2 .*$3=\([^ ]*\).*/\1/p" "$OUT/$1"; }

step "(1) node A sinks on 5001; node B sends it 64 MiB through filterd"
node sink.log server --tcp-port 5001 --count 1
SINK=$NPID
wait_for "$OUT/sink.log" "ready" "$SINK" 60
ip netns exec "$NSB" "$PERF" client --filterd "$CTL" --idle yield --peer "$SHARED:5001" --bytes 64m \
  > "$OUT/send.log" 2>&1 || { cat "$OUT/send.log" >&2; die "(1): node B's transfer failed"; }
wait "$SINK" || { cat "$OUT/sink.log" >&2; die "(1): node A failed"; }
sent=$(result send.log client sha256)
got=$(result sink.log server sha256)
[ "$(result sink.log server bytes)" = 67108864 ] || die "(1): node A received $(result sink.log server bytes) bytes"
[ -n "$sent" ] && [ "$sent" = "$got" ] || die "(1): SHA-256 sent $sent, received $got"
echo "   64 MiB node to node at $(result sink.log server gbps) Gbit/s, SHA-256 equal"

step "(2) node A echoes; node B ping-pongs 2000 x 100 bytes"
node echo.log server --tcp-port 5002 --mode echo --count 1
ECHO=$NPID
wait_for "$OUT/echo.log" "ready" "$ECHO" 60
ip netns exec "$NSB" "$PERF" client --filterd "$CTL" --idle yield --peer "$SHARED:5002" --mode pingpong \
  --size 100 --count 2000 --warmup 100 > "$OUT/pingpong.log" 2>&1 \
  || { cat "$OUT/pingpong.log" >&2; die "(2): the ping-pong failed"; }
wait "$ECHO" || { cat "$OUT/echo.log" >&2; die "(2): the echo node failed"; }
grep "^RESULT" "$OUT/pingpong.log" | sed 's/^/   /'

step "(3) node B connects to port 5999, where nobody listens: refused"
if ip netns exec "$NSB" "$PERF" client --filterd "$CTL" --idle yield --peer "$SHARED:5999" --bytes 1k --timeout 5 \
  > "$OUT/refused.log" 2>&1; then
  die "(3): a connect to a port nobody listens on succeeded"
fi
grep -q "connection refused" "$OUT/refused.log" || { cat "$OUT/refused.log" >&2; die "(3): not refused"; }

step "(4) filterd's counters; the external link"
ip netns exec "$NSB" "$XKCTL" --control "$CTL" counters > "$OUT/counters.txt" 2>&1 || die "xkctl counters failed"
[ "$(counter st0 hairpin_answered)" -ge 1 ] || die "(3): no SYN went back to its sender"
stop "$FDPID" || die "filterd did not exit cleanly"
stop_capture
check_no_hairpin_leak 1000
