#!/usr/bin/env bash
# TCP benchmark: xk <-> xk over net_memif against Linux TCP
# over a veth pair, measured in the same run (docs/BENCHMARKS.md).
#
#   tests/bench/tcp_bench.sh [BUILD_DIR]     (as root: the Linux side uses netns)
#
# Bulk throughput of one connection: iperf3 between two namespaces (Linux's
# defaults: TSO/GSO/GRO on, as a user would run it) at MTU 1500 and 9000,
# and xk-tcp-perf over memif at the same MTUs, with the TCP checksum on and
# off; the xk sink reads into a buffer of its own as iperf3 does (--read
# copy). CPU seconds per GB on each side (iperf3's own CPU figures for
# Linux; getrusage for xk, whose loops busy-poll). Ping-pong: sockperf --tcp
# against xk-tcp-perf pingpong, with 14-byte messages (sockperf's smallest),
# and xk with 1 byte too; xk-memif-pingpong gives the raw frame ping-pong
# under xk's. Each bulk figure is the median of XK_BENCH_RUNS runs, Linux's
# and xk's interleaved; prints the machine, then the ratios xk / Linux.
#   XK_BENCH_SECONDS  seconds per Linux measurement (default 5)
#   XK_BENCH_BYTES    bytes per xk transfer (default 8g)
#   XK_BENCH_RUNS     runs of each bulk figure (default 3)
#   XK_FLOOR_BYTES    bytes per copy-floor run (default 4g)
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

RUNS=${XK_BENCH_RUNS:-3}
echo "machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs, kernel $(uname -r)"
# median V...: the middle value (the lower middle of an even count).
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
declare -A R

step "Linux: veth between two namespaces"
make_veth_pair "$NSA" "$NSB" xkbta$$ xkbtb$$ 192.0.2.1/24 192.0.2.2/24

# linux_bulk MTU RUN: one iperf3 run; Gbit/s and CPU s per GB each side.
linux_bulk() {
  local mtu=$1 run=$2 j=$OUT/iperf3-$1-$2.json
  ip -n "$NSA" link set xkbta$$ mtu "$mtu"
  ip -n "$NSB" link set xkbtb$$ mtu "$mtu"
  ip netns exec "$NSA" iperf3 -s -1 -J > "$OUT/iperf3-s.json" 2>&1 &
  local is=$!
  PIDS+=("$is")
  sleep 0.5
  ip netns exec "$NSB" iperf3 -c 192.0.2.1 -t "$SECS" -J > "$j" 2>&1 || die "iperf3 failed"
  wait "$is" || true
  local g c s
  read -r g c s < <(python3 -c '
import json,sys
e=json.load(open(sys.argv[1]))["end"]
r=e["sum_received"]; gb=r["bytes"]/1e9; cpu=e["cpu_utilization_percent"]
print("%.3f %.3f %.3f" % (r["bits_per_second"]/1e9, cpu["host_total"]/100*r["seconds"]/gb,
                          cpu["remote_total"]/100*r["seconds"]/gb))' "$j")
  R[lnx${mtu}_gbps_$run]=$g
  R[lnx${mtu}_cpu_c_$run]=$c
  R[lnx${mtu}_cpu_s_$run]=$s
  echo "   Linux MTU $mtu run $run: $g Gbit/s, CPU s/GB sender $c receiver $s"
}

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

xk_bulk() {  # name mtu csum run link (memif or shm)
  local name=$1 mtu=$2 csum=$3 run=$4 link=${5:-memif} sock=$OUT/$5-$1.sock
  local sport="net_memif0,role=server,id=0,socket=$sock" cport="net_memif1,role=client,id=0,socket=$sock"
  if [ "$link" = shm ]; then sport="shm:$sock,role=server" cport="shm:$sock"; fi
  "$PERF" server --port "$sport" --port-opts "mtu=$mtu" --ip 192.0.2.10/24 \
    --csum "$csum" --count 1 --verify off > "$OUT/srv-$name.log" 2>&1 &
  local srv=$!
  PIDS+=("$srv")
  wait_for "$OUT/srv-$name.log" "waiting for the link" "$srv" 30
  "$PERF" client --port "$cport" --port-opts "mtu=$mtu" --ip 192.0.2.11/24 \
    --csum "$csum" --peer 192.0.2.10:5001 --bytes "$BYTES" --verify off > "$OUT/cli-$name.log" 2>&1 \
    || { tail "$OUT/cli-$name.log" >&2; die "xk bulk $name failed"; }
  wait "$srv" || die "xk server $name failed"
  R[${name}_gbps_$run]=$(field gbps "$OUT/srv-$name.log")
  local bytes ccpu scpu
  bytes=$(field bytes "$OUT/srv-$name.log")
  ccpu=$(field xfer_cpu_s "$OUT/cli-$name.log")  # over the transfer, as iperf3 counts
  scpu=$(field xfer_cpu_s "$OUT/srv-$name.log")
  R[${name}_cpu_c_$run]=$(awk -v c="$ccpu" -v b="$bytes" 'BEGIN { printf "%.3f", c / (b / 1e9) }')
  R[${name}_cpu_s_$run]=$(awk -v c="$scpu" -v b="$bytes" 'BEGIN { printf "%.3f", c / (b / 1e9) }')
  local rexmit
  rexmit=$(sed -n 's/.*who=client.*retransmits=\([0-9]*\).*/\1/p' "$OUT/cli-$name.log")
  echo "   xk $name run $run: ${R[${name}_gbps_$run]} Gbit/s, CPU s/GB client ${R[${name}_cpu_c_$run]}" \
       "server ${R[${name}_cpu_s_$run]}, retransmits $rexmit"
}
# The machine's floor (tests/bench/copy_floor.cpp): two copies through
# shared memory in 64 KiB slots and in 1500-byte ones, once per run beside
# the bulk figures, which are also printed as a fraction of it.
FLOOR=$BUILD/tests/bench/xk-copy-floor
[ -x "$FLOOR" ] || die "$FLOOR is missing"
floor_run() {  # run
  local slot
  for slot in 65536 1500; do
    "$FLOOR" --slot "$slot" --bytes "${XK_FLOOR_BYTES:-4g}" --runs 1 > "$OUT/floor-$slot-$1.log" 2>&1 \
      || { cat "$OUT/floor-$slot-$1.log" >&2; die "the copy floor failed"; }
    R[floor${slot}_gbps_$1]=$(field gbps "$OUT/floor-$slot-$1.log")
  done
  echo "   copy floor run $1: ${R[floor65536_gbps_$1]} Gbit/s in 64 KiB slots, ${R[floor1500_gbps_$1]} in 1500-byte slots"
}
# Over net_memif, and over our own shm link (docs/shm-driver.md: the
# payload by reference, two copies end to end).
XK_RUNS=(mtu1500:1500:on:memif mtu9000:9000:on:memif mtu1500_nocsum:1500:off:memif mtu9000_nocsum:9000:off:memif
         shm1500:1500:on:shm shm9000:9000:on:shm shm1500_nocsum:1500:off:shm shm9000_nocsum:9000:off:shm)
step "bulk: Linux iperf3 $SECS s and xk over memif and shm $BYTES, $RUNS runs each, interleaved"
for run in $(seq "$RUNS"); do
  floor_run "$run"
  linux_bulk 1500 "$run"
  linux_bulk 9000 "$run"
  for x in "${XK_RUNS[@]}"; do
    IFS=: read -r name mtu csum link <<< "$x"
    xk_bulk "$name" "$mtu" "$csum" "$run" "$link"
  done
done
# The medians: R[key] from R[key_1..RUNS].
for key in floor65536_gbps floor1500_gbps lnx1500_gbps lnx1500_cpu_c lnx1500_cpu_s lnx9000_gbps lnx9000_cpu_c lnx9000_cpu_s; do
  vals=()
  for run in $(seq "$RUNS"); do vals+=("${R[${key}_$run]}"); done
  R[$key]=$(median "${vals[@]}")
done
for x in "${XK_RUNS[@]}"; do
  name=${x%%:*}
  for k in gbps cpu_c cpu_s; do
    vals=()
    for run in $(seq "$RUNS"); do vals+=("${R[${name}_${k}_$run]}"); done
    R[${name}_$k]=$(median "${vals[@]}")
  done
done

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
echo "machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs, kernel $(uname -r);" \
     "bulk: medians of $RUNS runs"
printf "%-44s %10s %10s %8s %s\n" "what" "xk" "Linux" "ratio" "target"
printf "%-44s %10s %10s %8s %s\n" "bulk, MTU 1500, Gbit/s" "${R[mtu1500_gbps]}" "${R[lnx1500_gbps]}" "$(ratio "${R[mtu1500_gbps]}" "${R[lnx1500_gbps]}")" ">= 1.5x"
printf "%-44s %10s %10s %8s %s\n" "bulk, MTU 9000, Gbit/s" "${R[mtu9000_gbps]}" "${R[lnx9000_gbps]}" "$(ratio "${R[mtu9000_gbps]}" "${R[lnx9000_gbps]}")" ">= 1.5x"
for m in 1500 9000; do
  printf "%-44s %10s %10s %8s %s\n" "bulk, MTU $m, sender CPU s/GB" "${R[mtu${m}_cpu_c]}" "${R[lnx${m}_cpu_c]}" \
    "$(ratio "${R[mtu${m}_cpu_c]}" "${R[lnx${m}_cpu_c]}")" "< 1x"
  printf "%-44s %10s %10s %8s %s\n" "bulk, MTU $m, receiver CPU s/GB" "${R[mtu${m}_cpu_s]}" "${R[lnx${m}_cpu_s]}" \
    "$(ratio "${R[mtu${m}_cpu_s]}" "${R[lnx${m}_cpu_s]}")" "< 1x"
done
printf "%-44s %10s %10s %8s %s\n" "bulk, MTU 1500, checksum off, Gbit/s" "${R[mtu1500_nocsum_gbps]}" "${R[mtu1500_gbps]}" "$(ratio "${R[mtu1500_nocsum_gbps]}" "${R[mtu1500_gbps]}")" ">= 1x"
printf "%-44s %10s %10s %8s %s\n" "bulk, MTU 9000, checksum off, Gbit/s" "${R[mtu9000_nocsum_gbps]}" "${R[mtu9000_gbps]}" "$(ratio "${R[mtu9000_nocsum_gbps]}" "${R[mtu9000_gbps]}")" ">= 1x"
printf "%-44s %10s %10s %8s %s\n" "shm: bulk, MTU 1500, Gbit/s" "${R[shm1500_gbps]}" "${R[lnx1500_gbps]}" "$(ratio "${R[shm1500_gbps]}" "${R[lnx1500_gbps]}")" ">= 1.5x"
printf "%-44s %10s %10s %8s %s\n" "shm: bulk, MTU 9000, Gbit/s" "${R[shm9000_gbps]}" "${R[lnx9000_gbps]}" "$(ratio "${R[shm9000_gbps]}" "${R[lnx9000_gbps]}")" ">= 1.5x"
for m in 1500 9000; do
  printf "%-44s %10s %10s %8s %s\n" "shm: MTU $m, sender / receiver CPU s/GB" "${R[shm${m}_cpu_c]} / ${R[shm${m}_cpu_s]}" \
    "${R[lnx${m}_cpu_c]} / ${R[lnx${m}_cpu_s]}" \
    "$(ratio "${R[shm${m}_cpu_c]}" "${R[lnx${m}_cpu_c]}")/$(ratio "${R[shm${m}_cpu_s]}" "${R[lnx${m}_cpu_s]}")" "< 1x"
done
printf "%-44s %10s %10s %8s %s\n" "shm: MTU 1500, checksum off, Gbit/s" "${R[shm1500_nocsum_gbps]}" "${R[shm1500_gbps]}" "$(ratio "${R[shm1500_nocsum_gbps]}" "${R[shm1500_gbps]}")" ">= 1x"
printf "%-44s %10s %10s %8s %s\n" "shm: MTU 9000, checksum off, Gbit/s" "${R[shm9000_nocsum_gbps]}" "${R[shm9000_gbps]}" "$(ratio "${R[shm9000_nocsum_gbps]}" "${R[shm9000_gbps]}")" ">= 1x"
printf "%-44s %10s %10s %8s %s\n" "shm against memif, MTU 1500, Gbit/s" "${R[shm1500_gbps]}" "${R[mtu1500_gbps]}" "$(ratio "${R[shm1500_gbps]}" "${R[mtu1500_gbps]}")" "(xk with itself)"
printf "%-44s %10s %10s %8s %s\n" "14-byte ping-pong half-RTT, us" "$XK_PP" "$LNX_PP" "$(ratio "$XK_PP" "$LNX_PP")" "<= 0.25x"
printf "%-44s %10s %10s\n" "1-byte ping-pong half-RTT, us (xk only)" "${R[pp1]}" "-"
printf "%-44s %10s %10s %8s %s\n" "xk's overhead over raw memif frames, us" \
  "$(awk -v a="$XK_PP" -v b="$RAW_PP" 'BEGIN { printf "%.3f", a - b }')" "$RAW_PP" "" "<= 1 us (raw half-RTT in the Linux column)"
echo
echo "As a fraction of the copy floor (two copies through shared memory, no protocol; same runs):" \
     "${R[floor65536_gbps]} Gbit/s in 64 KiB slots, ${R[floor1500_gbps]} in 1500-byte slots"
fraction() { awk -v a="$1" -v b="${R[floor65536_gbps]}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
printf "%-44s %10s %10s %s\n" "what" "Gbit/s" "of floor" "target"
for row in "xk memif, MTU 1500:mtu1500:>= 0.5" "xk memif, MTU 9000:mtu9000:>= 0.5" \
           "xk shm, MTU 1500:shm1500:>= 0.5" "xk shm, MTU 9000:shm9000:>= 0.5" \
           "xk shm, MTU 1500, checksum off:shm1500_nocsum:" "xk memif, MTU 1500, checksum off:mtu1500_nocsum:" \
           "Linux veth, MTU 1500:lnx1500:" "Linux veth, MTU 9000:lnx9000:" \
           "copy floor, 1500-byte slots:floor1500:"; do
  IFS=: read -r label key target <<< "$row"
  printf "%-44s %10s %10s %s\n" "$label" "${R[${key}_gbps]}" "$(fraction "${R[${key}_gbps]}")" "$target"
done
echo "  (checksum rows compare xk with itself: off / on; checksum off, xk CPU s/GB client / server:" \
     "MTU 1500 ${R[mtu1500_nocsum_cpu_c]} / ${R[mtu1500_nocsum_cpu_s]}, MTU 9000 ${R[mtu9000_nocsum_cpu_c]} / ${R[mtu9000_nocsum_cpu_s]})"
echo "  xk's CPU: getrusage of each process over the transfer, whose loop busy-polls a core (so CPU s/GB is about 1 / rate);" \
     "Linux's: iperf3's own host/remote CPU percentages times the run's seconds"
