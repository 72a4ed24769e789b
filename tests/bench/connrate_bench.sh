#!/usr/bin/env bash
# Connection setup rate (connect + accept + close) through filterd against
# Linux over a veth, in one run (docs/BENCHMARKS.md, "Connection setup rate").
#
#   connrate_bench.sh BUILD_DIR          (as root; e.g. build/release)
#
# One program, tests/tools/connrate.cpp (xk-connrate), measures every figure:
# the kernel backend for Linux, xk's C API for xk. Each connection: the client
# connects, the server accepts and closes at once, the client reads the end
# and closes; PAR connections in flight.
#
#   linux:        kernel client in one namespace -> kernel server in another,
#                 over a veth pair
#   xk standalone: xk client -> xk server, each a standalone stack, over
#                 net_memif (the floor: no filterd)
#   xk in:        a standalone xk client (the remote host, on filterd's
#                 external net_memif port) -> a node attached to filterd
#                 (steer mode) listening on the shared address
#   xk out:       the node connects out to a standalone xk server on the
#                 remote side, from the ports filterd leased it (a LEASE per
#                 64 connections; XK_FILTERD_LEASE=0 for a CONNECT round trip
#                 per connection instead)
#   xk central in: as "xk in" with filterd --mode central (filterd's TCP
#                 accepts; the node gets the stream over the relay)
#
# Every xk stack, filterd too, spins giving its core away between polls and
# then sleeps (XK_IDLE=yield, filterd --idle yield; docs/timers-and-loop.md,
# "Yielding"): three processes share 2 cores, and a stack that slept and was
# rung awake by its peer's doorbell paid tens of microseconds per frame.
# XK_BENCH_IDLE=spin (the stacks' pause-then-sleep default) or busy, and
# XK_BENCH_FD_IDLE=spin or busy, for the other ways. Compare ratios, not
# absolute figures; the stacks' CPU seconds include their spinning. A
# yielding spin costs the other processes little, so it lasts longer than
# the 50 us default before the sleep: XK_BENCH_SPIN_US (500; the stacks'
# XK_SPIN_US and filterd's --spin-us; 50 gave 55,000 conn/s remote -> node
# where 200-1000 gave 72,000-76,000).
#
#   XK_BENCH_CONNS (20000 per figure), XK_BENCH_PAR (16), XK_BENCH_IDLE (yield),
#   XK_BENCH_FD_IDLE (yield), XK_BENCH_SPIN_US (500)
set -euo pipefail
TEST_NAME=connrate_bench
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../integration/lib.sh"

[ $# -eq 1 ] || die "usage: $0 BUILD_DIR"
FD=$(readlink -f "$1/filterd/filterd")
CR=$(readlink -f "$1/tests/xk-connrate")
[ -x "$FD" ] && [ -x "$CR" ] || die "$FD or $CR is not executable"
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
CONNS=${XK_BENCH_CONNS:-20000}
PAR=${XK_BENCH_PAR:-16}

NSA=xk-cr-$$-a
NSB=xk-cr-$$-b
LNX=xkcl$$
XKIF=xkcx$$
OUT=$(mktemp -d /tmp/xk-connrate.XXXXXX)
install_cleanup

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" "$2" | head -1; }
declare -A RATE

# run_pair NAME SERVER_LOG SERVER_CMD... -- CLIENT_CMD...
run_pair() {
  local name=$1 slog=$OUT/$1-server.log clog=$OUT/$1-client.log server=() spid
  shift
  while [ "$1" != "--" ]; do server+=("$1"); shift; done
  shift
  "${server[@]}" > "$slog" 2>&1 &
  spid=$!
  PIDS+=("$spid")
  # A standalone server's link (and so its "ready") waits for the client.
  [ "$name" = xk_standalone ] && sleep 0.5 || wait_for "$slog" "ready" "$spid" 30
  "$@" > "$clog" 2>&1 || { cat "$clog" >&2; die "$name: the client failed"; }
  wait "$spid" || { cat "$slog" >&2; die "$name: the server failed"; }
  RATE[$name]=$(field rate "$clog")
  echo "   $name: ${RATE[$name]} connections/s ($(field conns "$clog") in $(field seconds "$clog") s," \
    "client CPU $(field cpu_s "$clog") s, server CPU $(field cpu_s "$slog") s)"
}

step "linux: kernel sockets over a veth pair, $CONNS connections, $PAR in flight"
make_veth_topology "$NSA" "$NSB" "$LNX" "$XKIF" 192.0.2.1/24 > /dev/null
ip netns exec "$NSB" ip addr add 192.0.2.2/24 dev "$XKIF"
run_pair linux ip netns exec "$NSB" "$CR" server --backend kernel --listen 192.0.2.2:5001 --count "$CONNS" -- \
  ip netns exec "$NSA" "$CR" client --backend kernel --peer 192.0.2.2:5001 --count "$CONNS" --parallel "$PAR"

export XK_IDLE=${XK_BENCH_IDLE:-yield}
SPIN_US=${XK_BENCH_SPIN_US:-500}
export XK_SPIN_US=$SPIN_US
step "xk standalone: two stacks over net_memif"
run_pair xk_standalone env XK_PORT="net_memif0,role=server,id=0,socket=$OUT/sa.sock" XK_IP=192.0.2.10/24 \
  "$CR" server --backend xk --listen 192.0.2.10:5001 --count "$CONNS" -- \
  env XK_PORT="net_memif1,role=client,id=0,socket=$OUT/sa.sock" XK_IP=192.0.2.1/24 \
  "$CR" client --backend xk --peer 192.0.2.10:5001 --count "$CONNS" --parallel "$PAR"

with_filterd() {  # steer|central: starts filterd with an external memif port
  local mode=$1 log=$OUT/filterd-$1.log
  "$FD" --mode "$mode" --port "net_memif0,role=server,id=0,socket=$OUT/ext-$mode.sock" --ip 192.0.2.10/24 \
    --control "$OUT/fd-$mode.sock" --memif-socket "$OUT/nodes-$mode.memif" --resync-grace 0 \
    --idle "${XK_BENCH_FD_IDLE:-yield}" --spin-us "$SPIN_US" > "$log" 2>&1 &
  FDPID=$!
  PIDS+=("$FDPID")
  wait_for "$log" "ready" "$FDPID" 30
}
# Command prefixes (arrays, not functions: a background function would be a
# subshell whose child the cleanup cannot reach). Each remote process has a
# MAC of its own; it announces itself once its link is up (RFC 5227), so
# filterd forgets the previous process's.
remote_env() { REMOTE=(env XK_PORT="net_memif1,role=client,id=0,socket=$OUT/ext-$1.sock" XK_IP=192.0.2.1/24); }
node_env() { NODE=(env XK_FILTERD="$OUT/fd-$1.sock"); }

remote_env steer
node_env steer
step "xk through filterd (steer): remote -> node (accept), node -> remote (connect)"
with_filterd steer
run_pair xk_in "${NODE[@]}" "$CR" server --backend xk --listen 0.0.0.0:5001 --count "$CONNS" -- \
  "${REMOTE[@]}" "$CR" client --backend xk --peer 192.0.2.10:5001 --count "$CONNS" --parallel "$PAR"
run_pair xk_out "${REMOTE[@]}" "$CR" server --backend xk --listen 192.0.2.1:5002 --count "$CONNS" -- \
  "${NODE[@]}" "$CR" client --backend xk --peer 192.0.2.1:5002 --count "$CONNS" --parallel "$PAR"
stop "$FDPID" || die "filterd (steer) did not exit cleanly"

remote_env central
node_env central
step "xk through filterd (central): remote -> node (accept)"
with_filterd central
run_pair xk_central_in "${NODE[@]}" "$CR" server --backend xk --listen 0.0.0.0:5001 --count "$CONNS" -- \
  "${REMOTE[@]}" "$CR" client --backend xk --peer 192.0.2.10:5001 --count "$CONNS" --parallel "$PAR"
stop "$FDPID" || die "filterd (central) did not exit cleanly"

step "result (connections per second; ratio against Linux over veth)"
for k in linux xk_standalone xk_in xk_out xk_central_in; do
  printf "   %-15s %10s  %s\n" "$k" "${RATE[$k]}" \
    "$(awk -v x="${RATE[$k]}" -v l="${RATE[linux]}" 'BEGIN { printf "%.2fx", x / l }')"
done
echo "RESULT conns=$CONNS parallel=$PAR linux=${RATE[linux]} xk_standalone=${RATE[xk_standalone]}" \
  "xk_in=${RATE[xk_in]} xk_out=${RATE[xk_out]} xk_central_in=${RATE[xk_central_in]}"
