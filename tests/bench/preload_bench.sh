#!/usr/bin/env bash
# Unmodified programs over xk (docs/preload.md), against the same binaries on
# Linux, in one run (docs/BENCHMARKS.md, "Unmodified programs").
#
#   preload_bench.sh BUILD_DIR        (as root: the Linux side uses netns)
#
# Linux: sockperf ping-pong (TCP, 14-byte messages; at full rate and at 100
# messages a second, where every message wakes both ends) and iperf3 (one stream)
# between two namespaces over a veth. xkrun: the same two programs, both
# ends under xkrun, two stacks over net_memif. And the native xk app
# (xk-tcp-perf, ping-pong and bulk over memif) for what the shim costs, and
# a plain-socket ping-pong (xk-sock-pingpong) on both, for what sockperf's
# own per-message work adds. Each figure
# XK_BENCH_RUNS times (default 3), interleaved; the median is reported, with
# the CPU time per GB of each side (iperf3's own accounting), and the median
# and mean of each run's own ratio (the two figures of a ratio measured
# seconds, not minutes, apart: this machine's speed drifts by a third between
# runs). The server end of every pair runs on CPU 0 and the client end on
# CPU 1 (Linux, xkrun and native alike), so no figure gains or loses from
# where the scheduler put the two ends; and xkrun's iperf3 and the native app
# take turns going first. Beside every bulk run xk-core-probe samples how
# far apart the two CPUs are (the host moves a VM's vCPUs; far, bulk over
# memif runs at half speed), and the target's ratio is taken over the runs
# whose iperf3 and native app ran in one placement. Then one
# NetPIPE sweep (NPtcp, 1 byte to XK_BENCH_NP_MAX, default 1m) on Linux and
# under xkrun, half round trip and throughput per size.
set -euo pipefail
TEST_NAME=preload_bench
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../integration/lib.sh"

[ $# -eq 1 ] || die "usage: $0 BUILD_DIR"
BUILD=$(readlink -f "$1")
XKRUN=$BUILD/apps/preload/xkrun
PERF=$BUILD/apps/tcp-perf/xk-tcp-perf
LEAN=$BUILD/tests/bench/xk-sock-pingpong
FLOOR=$BUILD/tests/bench/xk-wake-floor
PROBE=$BUILD/tests/bench/xk-core-probe
COPY_FLOOR=$BUILD/tests/bench/xk-copy-floor
for b in "$XKRUN" "$PERF" "$LEAN" "$FLOOR" "$PROBE" "$COPY_FLOOR"; do [ -x "$b" ] || die "build the release preset first ($b)"; done
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces for the Linux side)"
for t in iperf3 sockperf NPtcp; do command -v $t > /dev/null || die "needs $t"; done
SECS=${XK_BENCH_SECONDS:-3}
RUNS=${XK_BENCH_RUNS:-3}
BYTES=${XK_BENCH_BYTES:-8g}  # ~2-3 s, as long as iperf3's run
NP_MAX=${XK_BENCH_NP_MAX:-1m}
NP_MAX_BYTES=$(numfmt --from=iec "${NP_MAX^^}")

NSA=xk-pb-$$-a
NSB=xk-pb-$$-b
OUT=$(mktemp -d /tmp/xk-preload-bench.XXXXXX)
# The cleanup removes the doorbell pages of every memif socket under OUT
# (a server stopped by SIGTERM cannot remove its own).
MEMIF=$OUT
install_cleanup
make_veth_pair "$NSA" "$NSB" xkpba$$ xkpbb$$ 192.0.2.1/24 192.0.2.2/24

# The server end on CPU 0, the client end on CPU 1 (2 cores or more).
PIN_S=() PIN_C=()
if [ "$(nproc)" -ge 2 ]; then PIN_S=(taskset -c 0) PIN_C=(taskset -c 1); fi

# Where the two CPUs are while a bulk run goes on: a VM's host moves its
# vCPUs between cores that share a cache (a cache line's round trip ~100 ns
# here) and cores that do not (~400 ns), and a transfer whose every frame one
# core writes and the other reads runs at half speed while they are far
# (docs/BENCHMARKS.md). xk-core-probe samples the round trip every 100 ms
# beside each bulk run; a run is "near" or "far" when at most 10 % of its
# samples say otherwise, else "mixed" (far = over three times the lowest
# round trip seen in the whole benchmark). The probe also times a fixed piece
# of arithmetic on each CPU, the vCPUs' own speed.
probe_start() {  # NAME
  PROBE_PID=
  [ ${#PIN_S[@]} -gt 0 ] || return 0
  PROBE_LOG=$OUT/probe-$1.log
  "$PROBE" 0 1 100 > "$PROBE_LOG" 2>&1 &
  PROBE_PID=$!
  PIDS+=("$PROBE_PID")
}
probe_stop() {
  [ -n "$PROBE_PID" ] || return 0
  stop "$PROBE_PID" || { cat "$PROBE_LOG" >&2; die "xk-core-probe failed"; }
  grep -q '^RESULT bursts=[1-9]' "$PROBE_LOG" || { cat "$PROBE_LOG" >&2; die "xk-core-probe took no sample"; }
}

declare -A R
mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { if (NR > 0) printf "%.2f", s / NR }'; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
latency() { sed -n 's/.*Summary: Latency is \([0-9.]*\) usec.*/\1/p' "$1"; }
# sockperf's median half-RTT (its summary is the mean, which a few
# descheduled exchanges of hundreds of microseconds move).
latency_p50() { sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' "$1"; }
# iperf3 JSON: Gbit/s at the receiver, CPU s per GB of the sender and receiver.
iperf_fields() {
  python3 - "$1" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
e = j["end"]
gb = e["sum_received"]["bytes"] / 1e9
secs = e["sum_received"]["seconds"]
cpu = e["cpu_utilization_percent"]
# host = the client (the sender here), remote = the server; percent of one core over the run.
print(f'{e["sum_received"]["bits_per_second"] / 1e9:.2f} {cpu["host_total"] / 100 * secs / gb:.3f} {cpu["remote_total"] / 100 * secs / gb:.3f}')
EOF
}

xk_pair_start() {  # NAME SERVER-COMMAND...: a program under xkrun on the memif server end
  local name=$1
  shift
  "${PIN_S[@]}" "$XKRUN" --port "net_memif0,role=server,id=0,socket=$OUT/$name.sock" --ip 192.0.2.10/24 -- "$@" \
    > "$OUT/$name-server.log" 2>&1 &
  XSRV=$!
  PIDS+=("$XSRV")
  sleep 0.5
}
xk_client() {  # NAME CLIENT-COMMAND...: the other end, memif client
  # The server's program listens only once its stack is up, which waits for
  # this client's link: a connect that comes first is refused. Try again
  # (a new client stack each time), and print the last attempt's output.
  # iperf3 -J exits 0 even when refused (its JSON names the error): the
  # output decides, not the status (NPtcp says "Cannot Connect! errno=111").
  local name=$1 try rc
  shift
  refused() { grep -qiE "refused|errno=111" "$OUT/$name-client.out" "$OUT/$name-client.err"; }
  for try in 1 2 3 4 5 6 7 8 9 10; do
    rc=0
    "${PIN_C[@]}" "$XKRUN" --port "net_memif1,role=client,id=0,socket=$OUT/$name.sock" --ip 192.0.2.11/24 -- "$@" \
      > "$OUT/$name-client.out" 2> "$OUT/$name-client.err" || rc=$?
    refused || break
    echo "   ($name: the server was not listening yet; again)" >&2
    sleep 0.3
  done
  refused && rc=1
  cat "$OUT/$name-client.err" >&2
  cat "$OUT/$name-client.out"
  return "$rc"
}

# native_pair NAME "SERVER FLAGS" "CLIENT FLAGS": the native xk app, xk-tcp-perf,
# both ends over net_memif (no shim); logs NAME-server.log, NAME-client.log.
native_pair() {
  local name=$1 sock=$OUT/$1.sock ps
  # shellcheck disable=SC2086  # the flags are words
  "${PIN_S[@]}" "$PERF" server --port "net_memif0,role=server,id=0,socket=$sock" --ip 192.0.2.10/24 --count 1 $2 \
    > "$OUT/$name-server.log" 2>&1 &
  ps=$!
  PIDS+=("$ps")
  wait_for "$OUT/$name-server.log" "waiting for the link" "$ps" 30
  # shellcheck disable=SC2086
  "${PIN_C[@]}" "$PERF" client --port "net_memif1,role=client,id=0,socket=$sock" --ip 192.0.2.11/24 --peer 192.0.2.10:5001 $3 \
    > "$OUT/$name-client.log" 2>&1 || { tail "$OUT/$name-client.log" >&2; die "xk-tcp-perf ($name) failed"; }
  wait "$ps" || true
}
# native_bulk RUN: the native app's bulk transfer of BYTES, its Gbit/s in R[nat_gbps_RUN].
native_bulk() {
  probe_start nat-$1
  native_pair "perf-$1" "--verify off" "--bytes $BYTES --verify off"
  probe_stop
  R[nat_gbps_$1]=$(sed -n 's/.*gbps=\([0-9.]*\).*/\1/p' "$OUT/perf-$1-server.log" | tail -1)
}
# runs_of KEY: the figure KEY of every run, in order.
runs_of() { local k=$1 out=() run; for run in $(seq "$RUNS"); do out+=("${R[${k}_$run]}"); done; echo "${out[*]}"; }

for run in $(seq "$RUNS"); do
  step "run $run/$RUNS: sockperf ping-pong, Linux then xkrun; xk-tcp-perf ping-pong"
  ip netns exec "$NSA" "${PIN_S[@]}" sockperf server -i 192.0.2.1 --tcp > "$OUT/lnx-sp-server.log" 2>&1 &
  SP=$!
  PIDS+=("$SP")
  sleep 0.5
  ip netns exec "$NSB" "${PIN_C[@]}" sockperf ping-pong -i 192.0.2.1 --tcp -t "$SECS" > "$OUT/lnx-sp-$run.log" 2>&1
  stop "$SP" || true
  R[lnx_lat_$run]=$(latency "$OUT/lnx-sp-$run.log")
  R[lnx_p50_$run]=$(latency_p50 "$OUT/lnx-sp-$run.log")
  xk_pair_start sp$run sockperf server -i 192.0.2.10 --tcp
  xk_client sp$run sockperf ping-pong -i 192.0.2.10 --tcp -t "$SECS" > "$OUT/xk-sp-$run.log" 2>&1 \
    || { tail "$OUT/xk-sp-$run.log" >&2; die "sockperf under xkrun failed"; }
  stop "$XSRV" || true
  # The floor: the native xk app's own ping-pong (xk-tcp-perf, the same
  # 14 bytes over net_memif, no shim), what xkrun can at best approach.
  native_pair nat-pp-$run "--mode echo" "--mode pingpong --size 14 --count $((SECS * 100000))"
  R[nat_lat_$run]=$(sed -n 's/.*half_rtt_avg_us=\([0-9.]*\).*/\1/p' "$OUT/nat-pp-$run-client.log")
  R[nat_p50_$run]=$(sed -n 's/.*half_rtt_p50_us=\([0-9.]*\).*/\1/p' "$OUT/nat-pp-$run-client.log")
  R[nat_lat_ratio_$run]=$(ratio "${R[nat_lat_$run]}" "${R[lnx_lat_$run]}")
  R[xk_lat_$run]=$(latency "$OUT/xk-sp-$run.log")
  R[xk_p50_$run]=$(latency_p50 "$OUT/xk-sp-$run.log")
  R[lat_ratio_$run]=$(ratio "${R[xk_lat_$run]}" "${R[lnx_lat_$run]}")
  R[p50_ratio_$run]=$(ratio "${R[xk_p50_$run]}" "${R[lnx_p50_$run]}")
  echo "   half-RTT mean (median): Linux ${R[lnx_lat_$run]} (${R[lnx_p50_$run]}) us," \
    "xkrun ${R[xk_lat_$run]} (${R[xk_p50_$run]}) us, native xk-tcp-perf ${R[nat_lat_$run]} (${R[nat_p50_$run]}) us"

  # At a low rate (--mps 100: 10 ms between exchanges) every message finds
  # both ends asleep: the figure is the cost of waking up, which full-rate
  # ping-pong never pays.
  ip netns exec "$NSA" "${PIN_S[@]}" sockperf server -i 192.0.2.1 --tcp > "$OUT/lnx-slow-server.log" 2>&1 &
  SP=$!
  PIDS+=("$SP")
  sleep 0.5
  ip netns exec "$NSB" "${PIN_C[@]}" sockperf ping-pong -i 192.0.2.1 --tcp -t "$SECS" --mps 100 \
    > "$OUT/lnx-slow-$run.log" 2>&1
  stop "$SP" || true
  xk_pair_start slow$run sockperf server -i 192.0.2.10 --tcp
  xk_client slow$run sockperf ping-pong -i 192.0.2.10 --tcp -t "$SECS" --mps 100 > "$OUT/xk-slow-$run.log" 2>&1 \
    || { tail "$OUT/xk-slow-$run.log" >&2; die "sockperf --mps 100 under xkrun failed"; }
  stop "$XSRV" || true
  R[lnx_slow_$run]=$(latency_p50 "$OUT/lnx-slow-$run.log")
  R[xk_slow_$run]=$(latency_p50 "$OUT/xk-slow-$run.log")
  R[slow_ratio_$run]=$(ratio "${R[xk_slow_$run]}" "${R[lnx_slow_$run]}")
  # The floor under it: one process waking another that slept 10 ms,
  # over a pipe, with no network stack (xk-wake-floor), pinned the same way.
  R[wake_$run]=$("$FLOOR" 10000 $((SECS * 100)) 0 1 | sed -n 's/.*half_rtt_p50_us=\([0-9.]*\).*/\1/p')
  echo "   at 100 messages/s, median half-RTT: Linux ${R[lnx_slow_$run]} us, xkrun ${R[xk_slow_$run]} us;" \
    "waking a process over a pipe: ${R[wake_$run]} us"

  # The same 14-byte exchange from a program with nothing but blocking
  # read/write (xk-sock-pingpong): the shim's own cost, without sockperf's
  # per-message work, which Linux pays too and which pulls its ratio up.
  ip netns exec "$NSA" "${PIN_S[@]}" "$LEAN" server 7100 > "$OUT/lnx-lean-server.log" 2>&1 &
  LS=$!
  PIDS+=("$LS")
  for try in 1 2 3 4 5 6 7 8 9 10; do
    sleep 0.2
    ip netns exec "$NSB" "${PIN_C[@]}" "$LEAN" client 192.0.2.1 7100 14 "$SECS" > "$OUT/lnx-lean-$run.log" 2>&1 && break
    grep -q refused "$OUT/lnx-lean-$run.log" || { cat "$OUT/lnx-lean-$run.log" >&2; die "xk-sock-pingpong on Linux failed"; }
  done
  wait "$LS" || true
  xk_pair_start lean$run "$LEAN" server 7100
  xk_client lean$run "$LEAN" client 192.0.2.10 7100 14 "$SECS" > "$OUT/xk-lean-$run.log" \
    || { tail "$OUT/xk-lean-$run.log" >&2; die "xk-sock-pingpong under xkrun failed"; }
  wait "$XSRV" || true
  R[lnx_lean_$run]=$(sed -n 's/.*half_rtt_avg_us=\([0-9.]*\).*/\1/p' "$OUT/lnx-lean-$run.log")
  R[xk_lean_$run]=$(sed -n 's/.*half_rtt_avg_us=\([0-9.]*\).*/\1/p' "$OUT/xk-lean-$run.log")
  [ -n "${R[lnx_lean_$run]}" ] && [ -n "${R[xk_lean_$run]}" ] || die "xk-sock-pingpong printed no result"
  R[lean_ratio_$run]=$(ratio "${R[xk_lean_$run]}" "${R[lnx_lean_$run]}")
  echo "   plain-socket ping-pong half-RTT mean: Linux ${R[lnx_lean_$run]} us, xkrun ${R[xk_lean_$run]} us"

  step "run $run/$RUNS: iperf3 one stream, Linux then xkrun; xk-tcp-perf $BYTES; the copy floor"
  # The machine's floor for bulk (tests/bench/copy_floor.cpp): two copies
  # through shared memory in 64 KiB slots, no protocol.
  "$COPY_FLOOR" --slot 65536 --bytes 4g --runs 1 > "$OUT/copy-floor-$run.log" 2>&1 \
    || { cat "$OUT/copy-floor-$run.log" >&2; die "the copy floor failed"; }
  R[floor_gbps_$run]=$(sed -n 's/^RESULT .*gbps=\([^ ]*\) .*/\1/p' "$OUT/copy-floor-$run.log")
  ip netns exec "$NSA" "${PIN_S[@]}" iperf3 -s -1 > /dev/null 2>&1 &
  IS=$!
  PIDS+=("$IS")
  sleep 0.5
  probe_start lnx-$run
  ip netns exec "$NSB" "${PIN_C[@]}" iperf3 -c 192.0.2.1 -t "$SECS" -J > "$OUT/lnx-iperf-$run.json"
  probe_stop
  wait "$IS" || true
  read -r R[lnx_gbps_$run] R[lnx_cpu_c_$run] R[lnx_cpu_s_$run] < <(iperf_fields "$OUT/lnx-iperf-$run.json")
  # Taking turns: the machine's speed drifts within a run as well.
  if [ $((run % 2)) -eq 0 ]; then native_bulk "$run"; fi
  xk_pair_start ip$run iperf3 -s -1 -4
  probe_start xk-$run
  xk_client ip$run iperf3 -c 192.0.2.10 -t "$SECS" -J > "$OUT/xk-iperf-$run.json" \
    || die "iperf3 under xkrun failed"
  probe_stop
  wait "$XSRV" || true
  read -r R[xk_gbps_$run] R[xk_cpu_c_$run] R[xk_cpu_s_$run] < <(iperf_fields "$OUT/xk-iperf-$run.json")
  if [ $((run % 2)) -eq 1 ]; then native_bulk "$run"; fi
  R[nat_ratio_$run]=$(ratio "${R[xk_gbps_$run]}" "${R[nat_gbps_$run]}")
  echo "   Gbit/s: Linux ${R[lnx_gbps_$run]}, xkrun iperf3 ${R[xk_gbps_$run]}, native xk-tcp-perf ${R[nat_gbps_$run]}"
done

# Each bulk run's placement, from its probe's samples.
if [ ${#PIN_S[@]} -gt 0 ]; then
  while read -r key val; do R[$key]=$val; done < <(python3 - "$OUT" <<'PY'
import glob, os, statistics, sys
runs = {}
for path in glob.glob(os.path.join(sys.argv[1], "probe-*.log")):
    name = os.path.basename(path)[len("probe-"):-len(".log")]
    runs[name] = [dict(f.split("=") for f in l.split()[1:]) for l in open(path) if l.startswith("BURST ")]
every = [float(b["rt_ns"]) for bursts in runs.values() for b in bursts]
if every:
    far = 3 * min(every)
    print("far_ns", f"{far:.0f}")
    for name, bursts in runs.items():
        if not bursts:
            print(f"place_{name}", "-")
            continue
        share = sum(float(b["rt_ns"]) > far for b in bursts) / len(bursts)
        print(f"place_{name}", "near" if share <= 0.1 else "far" if share >= 0.9 else "mixed")
        print(f"far_share_{name}", f"{share:.2f}")
        # The CPUs' own speed: the median time of the probe's fixed work on each.
        work = lambda k: statistics.median(int(b[k]) for b in bursts) / 1e3
        print(f"work_{name}", f"{work('work_a_ns'):.1f}/{work('work_b_ns'):.1f}")
PY
  )
fi
# The runs whose iperf3 and native app each ran in one placement, the same.
LIKE=()
for run in $(seq "$RUNS"); do
  p=${R[place_xk-$run]:--}
  if [ "$p" = "${R[place_nat-$run]:--}" ] && { [ "$p" = near ] || [ "$p" = far ]; }; then LIKE+=("${R[nat_ratio_$run]}"); fi
done

for k in lnx_lat xk_lat nat_lat lnx_p50 xk_p50 nat_p50 lat_ratio p50_ratio nat_lat_ratio lnx_lean xk_lean lean_ratio \
  lnx_slow xk_slow slow_ratio wake \
  lnx_gbps xk_gbps nat_gbps nat_ratio floor_gbps \
  lnx_cpu_c lnx_cpu_s xk_cpu_c xk_cpu_s; do
  # shellcheck disable=SC2046  # one word a run
  R[$k]=$(median $(runs_of "$k"))
done

echo
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, kernel $(uname -r)"
echo "medians of $RUNS runs; xkrun: both ends under xkrun, two stacks over net_memif; Linux: two namespaces over a veth"
printf "%-46s %10s %10s %8s %s\n" "figure" "xkrun" "Linux" "ratio" "target"
printf "%-46s %10s %10s %8s %s\n" "sockperf ping-pong TCP 14 B, half-RTT us" "${R[xk_lat]}" "${R[lnx_lat]}" \
  "$(ratio "${R[xk_lat]}" "${R[lnx_lat]}")" "<= 0.25x"
printf "%-46s %10s %10s %8s %s\n" "sockperf ping-pong TCP 14 B, median half-RTT us" "${R[xk_p50]}" "${R[lnx_p50]}" \
  "$(ratio "${R[xk_p50]}" "${R[lnx_p50]}")" ""
printf "%-46s %10s %10s %8s %s\n" "sockperf at 100 msg/s, median half-RTT us" "${R[xk_slow]}" "${R[lnx_slow]}" \
  "$(ratio "${R[xk_slow]}" "${R[lnx_slow]}")" "(every message wakes a sleeper)"
printf "%-46s %10s %10s %8s %s\n" "  floor: a pipe waking a process, half-RTT us" "${R[wake]}" "${R[wake]}" \
  "" "(xk-wake-floor: no network stack)"
printf "%-46s %10s %10s %8s %s\n" "native xk-tcp-perf ping-pong 14 B, half-RTT us" "${R[nat_lat]}" "${R[lnx_lat]}" \
  "$(ratio "${R[nat_lat]}" "${R[lnx_lat]}")" "(the floor: no shim)"
printf "%-46s %10s %10s %8s %s\n" "plain-socket ping-pong 14 B, half-RTT us" "${R[xk_lean]}" "${R[lnx_lean]}" \
  "$(ratio "${R[xk_lean]}" "${R[lnx_lean]}")" "(xk-sock-pingpong: no app work)"
printf "%-46s %10s %10s %8s %s\n" "iperf3 one stream, Gbit/s" "${R[xk_gbps]}" "${R[lnx_gbps]}" \
  "$(ratio "${R[xk_gbps]}" "${R[lnx_gbps]}")" ""
printf "%-46s %10s %10s %8s %s\n" "iperf3 under xkrun vs native xk-tcp-perf, Gbit/s" "${R[xk_gbps]}" "${R[nat_gbps]}" \
  "$(ratio "${R[xk_gbps]}" "${R[nat_gbps]}")" "(medians of each)"
# Each run's two programs are measured seconds apart, and the host may move
# the vCPUs between them: a run where one program ran near and the other far
# compares the placements, not the programs. The target's figure is the
# median over the runs where both ran in one placement, the same.
printf "%-46s %10s %10s %8s %s\n" "  the same, median of the runs' own ratios" "" "" "$(printf '%sx' "${R[nat_ratio]}")" \
  "(all $RUNS runs)"
if [ ${#LIKE[@]} -gt 0 ]; then
  printf "%-46s %10s %10s %8s %s\n" "  ... of the runs with one placement for both" "" "" \
    "$(printf '%sx' "$(median "${LIKE[@]}")")" ">= 0.9x (${#LIKE[@]} of $RUNS runs)"
else
  echo "  no run had iperf3 and the native app in one placement: no like-for-like ratio (more runs: XK_BENCH_RUNS)"
fi
if [ -n "${R[far_ns]:-}" ]; then
  echo "placement of each bulk run (xk-core-probe, CPU 0 <-> CPU 1; far = round trip over ${R[far_ns]} ns;"
  echo "share of far samples; median us of the probe's fixed work on CPU 0/CPU 1):"
  where() { echo "${R[place_$1]:--} (${R[far_share_$1]:--}; ${R[work_$1]:--})"; }  # NAME-RUN
  for run in $(seq "$RUNS"); do
    echo "  run $run: Linux $(where lnx-$run), xkrun iperf3 $(where xk-$run), native $(where nat-$run);" \
      "iperf3/native ${R[nat_ratio_$run]}x"
  done
fi
echo "median of each run's own ratio: half-RTT mean $(printf '%sx' "${R[lat_ratio]}") (runs $(runs_of lat_ratio))," \
  "median $(printf '%sx' "${R[p50_ratio]}") (runs $(runs_of p50_ratio)), native floor" \
  "$(printf '%sx' "${R[nat_lat_ratio]}") (runs $(runs_of nat_lat_ratio)), plain-socket ping-pong" \
  "$(printf '%sx' "${R[lean_ratio]}") (runs $(runs_of lean_ratio)), 100 msg/s" \
  "$(printf '%sx' "${R[slow_ratio]}") (runs $(runs_of slow_ratio)); iperf3 under xkrun / native" \
  "$(printf '%sx' "${R[nat_ratio]}") (mean $(mean $(runs_of nat_ratio))x; runs $(runs_of nat_ratio))"
# The best run of each: what each program does when the vCPUs are in their
# fast state (their speed swings by half from run to run here, docs/BENCHMARKS.md).
xk_best=$(printf '%s\n' $(runs_of xk_gbps) | sort -g | tail -1)
nat_best=$(printf '%s\n' $(runs_of nat_gbps) | sort -g | tail -1)
printf "%-46s %10s %10s %8s %s\n" "iperf3 under xkrun vs native, best run, Gbit/s" "$xk_best" "$nat_best" \
  "$(ratio "$xk_best" "$nat_best")" "(the fastest of $RUNS runs each)"
printf "%-46s %10s %10s %8s %s\n" "iperf3, as a fraction of the copy floor" "$(ratio "${R[xk_gbps]}" "${R[floor_gbps]}")" \
  "$(ratio "${R[lnx_gbps]}" "${R[floor_gbps]}")" "" "(floor: ${R[floor_gbps]} Gbit/s, two copies in 64 KiB slots;" \
  "native xk-tcp-perf $(ratio "${R[nat_gbps]}" "${R[floor_gbps]}"))"
printf "%-46s %10s %10s\n" "iperf3 CPU s/GB, sender" "${R[xk_cpu_c]}" "${R[lnx_cpu_c]}"
printf "%-46s %10s %10s\n" "iperf3 CPU s/GB, receiver" "${R[xk_cpu_s]}" "${R[lnx_cpu_s]}"

step "NetPIPE: NPtcp 1 byte to $NP_MAX, Linux then xkrun"
(cd "$OUT" && exec ip netns exec "$NSA" NPtcp -p 0 -u "$NP_MAX_BYTES") > "$OUT/np-lnx-recv.log" 2>&1 &
NPR=$!
PIDS+=("$NPR")
sleep 0.5
(cd "$OUT" && ip netns exec "$NSB" NPtcp -h 192.0.2.1 -p 0 -u "$NP_MAX_BYTES" -o "$OUT/np-lnx.out") \
  > "$OUT/np-lnx-send.log" 2>&1 || { tail "$OUT/np-lnx-send.log" >&2; die "NPtcp on Linux failed"; }
wait "$NPR" || true
xk_pair_start np NPtcp -p 0 -u "$NP_MAX_BYTES"
xk_client np NPtcp -h 192.0.2.10 -p 0 -u "$NP_MAX_BYTES" -o "$OUT/np-xk.out" > "$OUT/np-xk-send.log" 2>&1 \
  || { tail "$OUT/np-xk-send.log" >&2; die "NPtcp under xkrun failed"; }
wait "$XSRV" || true
python3 - "$OUT/np-lnx.out" "$OUT/np-xk.out" <<'PY'
import sys
def sweep(path):
    # NPtcp's output: bytes, Mbit/s, and the half round trip in seconds.
    got = {}
    for line in open(path):
        p = line.split()
        if len(p) >= 3:
            got[int(p[0])] = (float(p[2]) * 1e6, float(p[1]))
    return got
lnx, xk = sweep(sys.argv[1]), sweep(sys.argv[2])
sizes = sorted(s for s in xk if s in lnx and s & (s - 1) == 0)
if not sizes:
    sys.exit("NPtcp: no size measured on both")
print("NetPIPE (NPtcp, both ends under xkrun over net_memif; Linux: two namespaces over a veth)")
print("%9s  %10s %10s %7s   %12s %12s %7s" % ("bytes", "xkrun us", "Linux us", "ratio", "xkrun Mbit/s", "Linux", "ratio"))
for s in sizes:
    (xl, xt), (ll, lt) = xk[s], lnx[s]
    print("%9d  %10.2f %10.2f %6.2fx   %12.1f %12.1f %6.2fx" % (s, xl, ll, xl / ll, xt, lt, xt / lt))
PY

