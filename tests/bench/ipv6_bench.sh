#!/usr/bin/env bash
# IPv6 against IPv4 on the same dual-stack xk stacks, same run
# (docs/BENCHMARKS.md, docs/ipv6.md).
#
#   tests/bench/ipv6_bench.sh [BUILD_DIR]
#
# Two xk-tcp-perf (or xk-udp-perf) processes, each with --ip of both
# families, over one link; every figure is measured over IPv4 and over IPv6
# alternately (the order swapped every run) and the medians compared:
#   - TCP bulk, one connection, over memif and over the shm link;
#   - TCP ping-pong of 14 bytes over memif (half the round trip);
#   - UDP datagrams of 60000 bytes over memif: 41 IPv4 or IPv6 fragments
#     each, reassembled by the sink -- the most it counts a second over a
#     sweep of paced offered loads (XK_BENCH_PPS). Unpaced, a sender faster
#     than the sink overflows its ring: fragments are lost, nearly every
#     datagram misses one, and the count collapses to what loss allows
#     rather than what reassembly costs.
# Prints the machine and, for each figure, IPv4's, IPv6's and v6 / v4.
#   XK_BENCH_BYTES    bytes per bulk run (default 4g)
#   XK_BENCH_RUNS     runs of each figure per family (default 3)
#   XK_BENCH_SECONDS  seconds per UDP rate run (default 2)
#   XK_BENCH_PPS      the offered loads of the UDP sweep, datagrams/s
#                     (default "20000 40000 60000 80000 120000")
set -euo pipefail
TEST_NAME=ipv6_bench
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../integration/lib.sh"

BUILD=$(readlink -f "${1:-$HERE/../../build/release}")
PERF=$BUILD/apps/tcp-perf/xk-tcp-perf
UDP=$BUILD/apps/udp-perf/xk-udp-perf
[ -x "$PERF" ] && [ -x "$UDP" ] || die "$PERF or $UDP is missing: build the release preset first"
BYTES=${XK_BENCH_BYTES:-4g}
RUNS=${XK_BENCH_RUNS:-3}
SECS=${XK_BENCH_SECONDS:-2}
PPS_LEVELS=(${XK_BENCH_PPS:-20000 40000 60000 80000 120000})
OUT=$(mktemp -d /tmp/xk-ipv6-bench.XXXXXX)
cleanup() {
  local rc=$?
  set +e
  kill_all
  [ $rc -eq 0 ] && rm -rf "$OUT" || echo "$TEST_NAME: failed (rc $rc); logs in $OUT"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" "$2" | head -1; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs, kernel $(uname -r)"

SRV_IPS=(--ip 192.0.2.10/24 --ip 2001:db8::10/64)
CLI_IPS=(--ip 192.0.2.11/24 --ip 2001:db8::11/64)
peer() { [ "$1" = 4 ] && echo 192.0.2.10:$2 || echo "[2001:db8::10]:$2"; }
ports() {  # link tag -> server and client devargs
  local sock=$OUT/$2.sock
  if [ "$1" = shm ]; then echo "shm:$sock,role=server shm:$sock"; else
    echo "net_memif0,role=server,id=0,socket=$sock net_memif1,role=client,id=0,socket=$sock"; fi
}
declare -A V

bulk() {  # link family run
  local link=$1 fam=$2 run=$3 tag=bulk-$1-$2-$3 sp cp
  read -r sp cp < <(ports "$link" "$tag")
  "$PERF" server --port "$sp" "${SRV_IPS[@]}" --count 1 --verify off > "$OUT/srv-$tag.log" 2>&1 &
  local srv=$!
  PIDS+=("$srv")
  wait_for "$OUT/srv-$tag.log" "waiting for the link" "$srv" 30
  "$PERF" client --port "$cp" "${CLI_IPS[@]}" --peer "$(peer "$fam" 5001)" --bytes "$BYTES" --verify off \
    > "$OUT/cli-$tag.log" 2>&1 || { tail "$OUT/cli-$tag.log" >&2; die "bulk $tag failed"; }
  wait "$srv" || die "server $tag failed"
  V[$tag]=$(field gbps "$OUT/srv-$tag.log")
  echo "   $link IPv$fam run $run: ${V[$tag]} Gbit/s"
}

pingpong() {  # family run
  local fam=$1 run=$2 tag=pp-$1-$2 sp cp
  read -r sp cp < <(ports memif "$tag")
  "$PERF" server --port "$sp" "${SRV_IPS[@]}" --mode echo --count 1 > "$OUT/srv-$tag.log" 2>&1 &
  local srv=$!
  PIDS+=("$srv")
  wait_for "$OUT/srv-$tag.log" "waiting for the link" "$srv" 30
  "$PERF" client --port "$cp" "${CLI_IPS[@]}" --peer "$(peer "$fam" 5001)" --mode pingpong --size 14 \
    --count 100000 > "$OUT/cli-$tag.log" 2>&1 || { tail "$OUT/cli-$tag.log" >&2; die "pingpong $tag failed"; }
  wait "$srv" || true
  V[$tag]=$(field half_rtt_avg_us "$OUT/cli-$tag.log")
  echo "   IPv$fam run $run: half-RTT ${V[$tag]} us"
}

reasm() {  # family run
  local fam=$1 run=$2 best=0 pps
  for pps in "${PPS_LEVELS[@]}"; do
    local tag=udp-$fam-$run-$pps sp cp got
    read -r sp cp < <(ports memif "$tag")
    "$UDP" server --port "$sp" "${SRV_IPS[@]}" --sink > "$OUT/srv-$tag.log" 2>&1 &
    local srv=$!
    PIDS+=("$srv")
    wait_for "$OUT/srv-$tag.log" "waiting for the link" "$srv" 30
    "$UDP" rate --port "$cp" "${CLI_IPS[@]}" --peer "$(peer "$fam" 9000)" --size 60000 --seconds "$SECS" \
      --pps "$pps" > "$OUT/cli-$tag.log" 2>&1 || { tail "$OUT/cli-$tag.log" >&2; die "udp $tag failed"; }
    sleep 0.5
    stop "$srv" || true
    got=$(field rate "$OUT/srv-$tag.log")
    got=${got:-0}
    awk -v a="$got" -v b="$best" 'BEGIN { exit !(a > b) }' && best=$got
  done
  V[udp-$fam-$run]=$best
  echo "   IPv$fam run $run: the sink counted at most $best datagrams/s of 60000 bytes (offered ${PPS_LEVELS[*]})"
}

# figure NAME FN ARGS...: RUNS runs of each family, alternating, the order
# swapped every run.
figure() {
  local name=$1 fn=$2
  shift 2
  step "$name"
  for ((r = 1; r <= RUNS; r++)); do
    if ((r % 2)); then "$fn" "$@" 4 "$r"; "$fn" "$@" 6 "$r"; else "$fn" "$@" 6 "$r"; "$fn" "$@" 4 "$r"; fi
  done
}
figure "TCP bulk over memif ($BYTES)" bulk memif
figure "TCP bulk over shm ($BYTES)" bulk shm
figure "TCP ping-pong, 14 bytes, memif" pingpong
figure "UDP 60000-byte datagrams (reassembled), memif, $SECS s at each offered load" reasm

summary() {  # label prefix unit
  local label=$1 prefix=$2 unit=$3 f v4=() v6=()
  for ((r = 1; r <= RUNS; r++)); do
    v4+=("${V[$prefix-4-$r]}")
    v6+=("${V[$prefix-6-$r]}")
  done
  local m4 m6
  m4=$(median "${v4[@]}")
  m6=$(median "${v6[@]}")
  printf '| %s | %s %s | %s %s | %.2fx |\n' "$label" "$m4" "$unit" "$m6" "$unit" \
    "$(awk -v a="$m6" -v b="$m4" 'BEGIN { print (b > 0 ? a / b : 0) }')"
}
step "medians of $RUNS"
echo "| figure | IPv4 | IPv6 | v6 / v4 |"
echo "|---|---|---|---|"
summary "TCP bulk, memif" bulk-memif Gbit/s
summary "TCP bulk, shm" bulk-shm Gbit/s
summary "14-byte half-RTT, memif" pp us
summary "60000-byte UDP datagrams, memif" udp datagrams/s
