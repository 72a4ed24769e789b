#!/usr/bin/env bash
# TCP benchmark (issue 4): xk <-> xk over net_memif against Linux TCP over a
# veth pair, measured in the same run (docs/BENCHMARKS.md).
#
#   tests/bench/tcp_bench.sh [BUILD_DIR]     (as root: the Linux side uses netns)
#
# Bulk throughput of one connection: iperf3 between two namespaces (Linux's
# defaults: TSO/GSO/GRO on, as a user would run it), and xk-tcp-perf over
# memif at MTU 1500 and 9000, with the TCP checksum on and off; CPU seconds
# per GB on each side. Ping-pong: sockperf --tcp against xk-tcp-perf
# pingpong, with 14-byte messages (sockperf's smallest), and xk with 1 byte
# too; xk-memif-pingpong gives the raw frame ping-pong under xk's. Prints the
# ratios xk / Linux.
#   XK_BENCH_SECONDS  seconds per Linux measurement (default 5)
#   XK_BENCH_BYTES    bytes per xk transfer (default 8g)
set -euo pipefail
TEST_NAME=tcp_bench
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../integration/lib.sh"

BUILD=$(readlink -f "${1:-$HERE/../../build/release}")
PERF=$BUILD/apps/tcp-perf/xk-tcp-perf
[ -x "$PERF" ] || die "$PERF is missing: build the release preset first"
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces for the Linux side)"
for t in iperf3 sockperf; do command -v $t >/dev/null || die "needs $t (apt-get install $t)"; done
SECS=${XK_BENCH_SECONDS:-5}
BYTES=${XK_BENCH_BYTES:-8g}
PP_COUNT=$((SECS * 40000))

OUT=$(mktemp -d /tmp/xk-tcp-bench.XXXXXX)
NSA=xk-bt-$$-a
NSB=xk-bt-$$-b
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
field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" "$2" | head -1; }

step "Linux: veth between two namespaces"
make_veth_pair "$NSA" "$NSB" xkbta$$ xkbtb$$ 192.0.2.1/24 192.0.2.2/24

step "Linux: iperf3, $SECS s"
ip netns exec "$NSA" iperf3 -s -1 -J > "$OUT/iperf3-s.json" 2>&1 &
IS=$!
PIDS+=("$IS")
sleep 0.5
ip netns exec "$NSB" iperf3 -c 192.0.2.1 -t "$SECS" -J > "$OUT/iperf3-c.json" 2>&1 || die "iperf3 failed"
wait "$IS" || true
read -r LNX_GBPS LNX_CPU_C LNX_CPU_S < <(python3 -c '
import json,sys
c=json.load(open(sys.argv[1]))
e=c["end"]
print("%.3f %.1f %.1f" % (e["sum_received"]["bits_per_second"]/1e9, e["cpu_utilization_percent"]["host_total"],
                          e["cpu_utilization_percent"]["remote_total"]))' "$OUT/iperf3-c.json")
echo "   $LNX_GBPS Gbit/s (CPU: sender $LNX_CPU_C %, receiver $LNX_CPU_S % of one core... as iperf3 reports)"

step "Linux: sockperf --tcp ping-pong, 14 bytes (its minimum), $SECS s"
ip netns exec "$NSA" sockperf sr --tcp -i 192.0.2.1 -p 11112 > "$OUT/sr.log" 2>&1 &
SR=$!
PIDS+=("$SR")
sleep 0.5
ip netns exec "$NSB" sockperf pp --tcp -i 192.0.2.1 -p 11112 -m 14 -t "$SECS" --full-rtt > "$OUT/pp.log" 2>&1 \
  || { cat "$OUT/pp.log" >&2; die "sockperf pp failed"; }
stop "$SR" || true
LNX_PP=$(awk '/Summary: Round trip is/ { printf "%.3f", $6 / 2 }' "$OUT/pp.log")
echo "   half-RTT $LNX_PP us"

declare -A R
xk_bulk() {  # name mtu csum
  local name=$1 mtu=$2 csum=$3 sock=$OUT/memif-$1.sock
  "$PERF" server --port "net_memif0,role=server,id=0,socket=$sock" --port-opts "mtu=$mtu" --ip 192.0.2.10/24 \
    --csum "$csum" --count 1 --verify off > "$OUT/srv-$name.log" 2>&1 &
  local srv=$!
  PIDS+=("$srv")
  wait_for "$OUT/srv-$name.log" "waiting for the link" "$srv" 30
  "$PERF" client --port "net_memif1,role=client,id=0,socket=$sock" --port-opts "mtu=$mtu" --ip 192.0.2.11/24 \
    --csum "$csum" --peer 192.0.2.10:5001 --bytes "$BYTES" --verify off > "$OUT/cli-$name.log" 2>&1 \
    || { tail "$OUT/cli-$name.log" >&2; die "xk bulk $name failed"; }
  wait "$srv" || die "xk server $name failed"
  R[${name}_gbps]=$(field gbps "$OUT/srv-$name.log")
  local bytes secs ccpu scpu
  bytes=$(field bytes "$OUT/srv-$name.log")
  ccpu=$(field cpu_s "$OUT/cli-$name.log")
  scpu=$(field cpu_s "$OUT/srv-$name.log")
  R[${name}_cpu_c]=$(awk -v c="$ccpu" -v b="$bytes" 'BEGIN { printf "%.2f", c / (b / 1e9) }')
  R[${name}_cpu_s]=$(awk -v c="$scpu" -v b="$bytes" 'BEGIN { printf "%.2f", c / (b / 1e9) }')
  R[${name}_rexmit]=$(sed -n 's/.*who=client.*retransmits=\([0-9]*\).*/\1/p' "$OUT/cli-$name.log")
  echo "   $name: ${R[${name}_gbps]} Gbit/s, CPU s/GB client ${R[${name}_cpu_c]} server ${R[${name}_cpu_s]}, retransmits ${R[${name}_rexmit]}"
}
step "xk over memif: bulk, $BYTES each"
xk_bulk mtu1500 1500 on
xk_bulk mtu9000 9000 on
xk_bulk mtu1500_nocsum 1500 off
xk_bulk mtu9000_nocsum 9000 off

xk_pp() {  # size
  local size=$1 sock=$OUT/memif-pp$1.sock
  "$PERF" server --port "net_memif0,role=server,id=0,socket=$sock" --ip 192.0.2.10/24 --mode echo --count 1 \
    > "$OUT/srv-pp$size.log" 2>&1 &
  local srv=$!
  PIDS+=("$srv")
  wait_for "$OUT/srv-pp$size.log" "waiting for the link" "$srv" 30
  "$PERF" client --port "net_memif1,role=client,id=0,socket=$sock" --ip 192.0.2.11/24 --peer 192.0.2.10:5001 \
    --mode pingpong --size "$size" --count "$PP_COUNT" > "$OUT/cli-pp$size.log" 2>&1 \
    || { tail "$OUT/cli-pp$size.log" >&2; die "pingpong failed"; }
  wait "$srv" || true
  R[pp${size}]=$(field half_rtt_avg_us "$OUT/cli-pp$size.log")
  R[pp${size}_p50]=$(field half_rtt_p50_us "$OUT/cli-pp$size.log")
  echo "   $size bytes: half-RTT ${R[pp${size}]} us (p50 ${R[pp${size}_p50]})"
}
step "xk over memif: ping-pong"
xk_pp 14
xk_pp 1
XK_PP=${R[pp14]}

step "raw frames over memif (the driver alone): ping-pong"
RAW=$BUILD/tests/bench/xk-memif-pingpong
[ -x "$RAW" ] || die "$RAW is missing"
"$RAW" server "$OUT/memif-raw.sock" > "$OUT/raw-srv.log" 2>&1 &
RS=$!
PIDS+=("$RS")
wait_for "$OUT/raw-srv.log" "waiting for the link" "$RS" 30
# 14 bytes of TCP payload make an 80-byte frame (14 + 20 + 32 with timestamps + 14).
"$RAW" client "$OUT/memif-raw.sock" --size 80 --count "$PP_COUNT" > "$OUT/raw-cli.log" 2>&1 || die "raw ping-pong failed"
wait "$RS" || true
RAW_PP=$(field half_rtt_avg_us "$OUT/raw-cli.log")
echo "   80-byte frames: half-RTT $RAW_PP us"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }
echo
echo "TCP, one connection: xk <-> xk over net_memif against Linux <-> Linux over veth"
printf "%-44s %10s %10s %8s %s\n" "what" "xk" "Linux" "ratio" "target"
printf "%-44s %10s %10s %8s %s\n" "bulk, MTU 1500, Gbit/s" "${R[mtu1500_gbps]}" "$LNX_GBPS" "$(ratio "${R[mtu1500_gbps]}" "$LNX_GBPS")" ">= 1.5x"
printf "%-44s %10s %10s %8s %s\n" "bulk, MTU 9000, Gbit/s" "${R[mtu9000_gbps]}" "$LNX_GBPS" "$(ratio "${R[mtu9000_gbps]}" "$LNX_GBPS")" ">= 1.5x"
printf "%-44s %10s %10s %8s\n" "bulk, MTU 1500, checksum off, Gbit/s" "${R[mtu1500_nocsum_gbps]}" "${R[mtu1500_gbps]}" "$(ratio "${R[mtu1500_nocsum_gbps]}" "${R[mtu1500_gbps]}")"
printf "%-44s %10s %10s %8s\n" "bulk, MTU 9000, checksum off, Gbit/s" "${R[mtu9000_nocsum_gbps]}" "${R[mtu9000_gbps]}" "$(ratio "${R[mtu9000_nocsum_gbps]}" "${R[mtu9000_gbps]}")"
printf "%-44s %10s %10s %8s %s\n" "14-byte ping-pong half-RTT, us" "$XK_PP" "$LNX_PP" "$(ratio "$XK_PP" "$LNX_PP")" "<= 0.25x"
printf "%-44s %10s %10s\n" "1-byte ping-pong half-RTT, us (xk only)" "${R[pp1]}" "-"
printf "%-44s %10s %10s %8s %s\n" "xk's overhead over raw memif frames, us" \
  "$(awk -v a="$XK_PP" -v b="$RAW_PP" 'BEGIN { printf "%.3f", a - b }')" "$RAW_PP" "" "<= 1 us (raw half-RTT in the Linux column)"
echo "  (checksum rows compare xk with itself: off / on)"
echo "  xk CPU s per GB (client / server): MTU 1500 ${R[mtu1500_cpu_c]} / ${R[mtu1500_cpu_s]}," \
     "MTU 9000 ${R[mtu9000_cpu_c]} / ${R[mtu9000_cpu_s]}; both busy-poll one core each"
echo "  Linux iperf3 CPU: sender $LNX_CPU_C %, receiver $LNX_CPU_S % (iperf3's own figures)"
