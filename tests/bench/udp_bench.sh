#!/usr/bin/env bash
# UDP benchmark: xk <-> xk over net_memif against Linux UDP over a
# veth pair, measured in the same run (docs/BENCHMARKS.md).
#
#   tests/bench/udp_bench.sh [BUILD_DIR]     (as root: the Linux side uses netns)
#
#   Linux: netns xk-bu-<pid>-a 192.0.2.1 <-veth-> netns xk-bu-<pid>-b 192.0.2.2,
#          sockperf server (sr) and client: ping-pong (pp) and throughput (tp)
#   xk:    two xk-udp-perf processes on net_memif (busy-polling, one core each)
#
# For each payload size: half-RTT (mean, p50, p99) of a ping-pong with one
# datagram in flight, and the datagram rate of a one-way stream (xk: what the
# sink received; Linux: what sockperf's client sent, an upper bound of what
# its server received). Prints a table with the ratios xk / Linux and the CPU
# seconds each process used.
#   XK_BENCH_SECONDS  seconds per measurement (default 5)
#   XK_BENCH_SIZES    payload sizes (default "64 1400")
set -euo pipefail
TEST_NAME=udp_bench
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../integration/lib.sh"

BUILD=$(readlink -f "${1:-$HERE/../../build/release}")
PERF=$BUILD/apps/udp-perf/xk-udp-perf
[ -x "$PERF" ] || die "$PERF is missing: build the release preset first"
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces for the Linux side)"
command -v sockperf >/dev/null || die "needs sockperf (apt-get install sockperf)"
SECS=${XK_BENCH_SECONDS:-5}
SIZES=${XK_BENCH_SIZES:-64 1400}
PP_COUNT=$((SECS * 100000))

OUT=$(mktemp -d /tmp/xk-udp-bench.XXXXXX)
NSA=xk-bu-$$-a
NSB=xk-bu-$$-b
cleanup() {
  local rc=$?
  set +e
  kill_all
  ip netns del "$NSA" 2>/dev/null
  ip netns del "$NSB" 2>/dev/null
  [ $rc -eq 0 ] && rm -rf "$OUT" || echo "$TEST_NAME: failed (rc $rc); logs in $OUT"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# cpu seconds (user+sys) of a finished child, from /usr/bin/time's output
field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" "$2" | tail -1; }

step "Linux: veth between two namespaces"
make_veth_pair "$NSA" "$NSB" xkbua$$ xkbub$$ 192.0.2.1/24 192.0.2.2/24

declare -A R
for size in $SIZES; do
  step "Linux sockperf, $size-byte payload"
  ip netns exec "$NSA" sockperf sr -i 192.0.2.1 -p 11111 > "$OUT/sr.log" 2>&1 &
  SR=$!
  PIDS+=("$SR")
  sleep 0.5
  ip netns exec "$NSB" sockperf pp -i 192.0.2.1 -p 11111 -m "$size" -t "$SECS" --full-rtt > "$OUT/pp-$size.log" 2>&1 \
    || { cat "$OUT/pp-$size.log" >&2; die "sockperf pp failed"; }
  # --full-rtt reports round trips: halve them.
  R[lnx_pp_avg_$size]=$(awk '/Summary: Round trip is/ { printf "%.3f", $6 / 2 }' "$OUT/pp-$size.log")
  R[lnx_pp_p50_$size]=$(awk '/percentile 50.000/ { printf "%.3f", $NF / 2 }' "$OUT/pp-$size.log")
  R[lnx_pp_p99_$size]=$(awk '/percentile 99.000/ { printf "%.3f", $NF / 2 }' "$OUT/pp-$size.log")
  ip netns exec "$NSB" sockperf tp -i 192.0.2.1 -p 11111 -m "$size" -t "$SECS" > "$OUT/tp-$size.log" 2>&1 \
    || { cat "$OUT/tp-$size.log" >&2; die "sockperf tp failed"; }
  R[lnx_tp_$size]=$(awk '/Summary: Message Rate is/ { print $6 }' "$OUT/tp-$size.log")
  stop "$SR" || true
  [ -n "${R[lnx_pp_avg_$size]}" ] && [ -n "${R[lnx_tp_$size]}" ] || die "could not read sockperf's output ($OUT)"

  step "xk over memif, $size-byte payload"
  SOCK=$OUT/memif-$size.sock
  "$PERF" server --port "net_memif0,role=server,id=0,socket=$SOCK" --ip 192.0.2.10/24 > "$OUT/echo-$size.log" 2>&1 &
  SRV=$!
  PIDS+=("$SRV")
  wait_for "$OUT/echo-$size.log" "waiting for the link" "$SRV" 30
  "$PERF" pingpong --port "net_memif1,role=client,id=0,socket=$SOCK" --ip 192.0.2.11/24 --peer 192.0.2.10:9000 \
    --size "$size" --count "$PP_COUNT" > "$OUT/xpp-$size.log" 2>&1 || { cat "$OUT/xpp-$size.log" >&2; die "pingpong failed"; }
  stop "$SRV" || true
  R[xk_pp_avg_$size]=$(field half_rtt_avg_us "$OUT/xpp-$size.log")
  R[xk_pp_p50_$size]=$(field half_rtt_p50_us "$OUT/xpp-$size.log")
  R[xk_pp_p99_$size]=$(field half_rtt_p99_us "$OUT/xpp-$size.log")
  R[xk_pp_cpu_c_$size]=$(field cpu_s "$OUT/xpp-$size.log")
  R[xk_pp_cpu_s_$size]=$(field cpu_s "$OUT/echo-$size.log")

  "$PERF" server --sink --idle-exit 1 --port "net_memif0,role=server,id=0,socket=$SOCK" --ip 192.0.2.10/24 \
    > "$OUT/sink-$size.log" 2>&1 &
  SINK=$!
  PIDS+=("$SINK")
  wait_for "$OUT/sink-$size.log" "waiting for the link" "$SINK" 30
  "$PERF" rate --port "net_memif1,role=client,id=0,socket=$SOCK" --ip 192.0.2.11/24 --peer 192.0.2.10:9000 \
    --size "$size" --seconds "$SECS" > "$OUT/xrate-$size.log" 2>&1 || { cat "$OUT/xrate-$size.log" >&2; die "rate failed"; }
  wait "$SINK" || die "the sink failed"
  R[xk_tp_$size]=$(field rate "$OUT/sink-$size.log")
  R[xk_tp_sent_$size]=$(field rate "$OUT/xrate-$size.log")
  R[xk_tp_cpu_c_$size]=$(field cpu_s "$OUT/xrate-$size.log")
  R[xk_tp_cpu_s_$size]=$(field cpu_s "$OUT/sink-$size.log")
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }
echo
echo "UDP, xk <-> xk over net_memif against Linux <-> Linux over veth (sockperf), ${SECS} s each"
printf "%-34s %12s %12s %8s %s\n" "what" "xk" "Linux" "ratio" "target"
for size in $SIZES; do
  printf "%-34s %12s %12s %8s %s\n" "half-RTT mean, ${size} B (us)" "${R[xk_pp_avg_$size]}" "${R[lnx_pp_avg_$size]}" \
    "$(ratio "${R[xk_pp_avg_$size]}" "${R[lnx_pp_avg_$size]}")" "lower is better"
  printf "%-34s %12s %12s %8s\n" "half-RTT p50, ${size} B (us)" "${R[xk_pp_p50_$size]}" "${R[lnx_pp_p50_$size]}" \
    "$(ratio "${R[xk_pp_p50_$size]}" "${R[lnx_pp_p50_$size]}")"
  printf "%-34s %12s %12s %8s\n" "half-RTT p99, ${size} B (us)" "${R[xk_pp_p99_$size]}" "${R[lnx_pp_p99_$size]}" \
    "$(ratio "${R[xk_pp_p99_$size]}" "${R[lnx_pp_p99_$size]}")"
  printf "%-34s %12s %12s %8s %s\n" "datagrams/s, ${size} B" "${R[xk_tp_$size]}" "${R[lnx_tp_$size]}" \
    "$(ratio "${R[xk_tp_$size]}" "${R[lnx_tp_$size]}")" "higher is better (xk: received; Linux: sent)"
  echo "  xk CPU s: ping-pong client ${R[xk_pp_cpu_c_$size]}, echo server ${R[xk_pp_cpu_s_$size]};" \
       "rate sender ${R[xk_tp_cpu_c_$size]} (sent ${R[xk_tp_sent_$size]}/s), sink ${R[xk_tp_cpu_s_$size]}" \
       "(both busy-poll: about 1 CPU s per second)"
done
