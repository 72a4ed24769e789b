#!/usr/bin/env bash
# filterd's cost per byte, steer mode against central mode, in one run
# (docs/BENCHMARKS.md, "filterd: steer against central").
#
#   filterd_bench.sh BUILD_DIR                   (as root; e.g. build/release)
#   filterd_bench.sh FILTERD XK_TCP_PERF
#
# The topology of integration.filterd_linux: Linux in one network namespace,
# filterd on a veth (DPDK net_af_packet) in another, NODES xk-tcp-perf nodes
# attached to filterd over its default (shm) channels. For each mode, filterd is started
# afresh and the same transfers run:
#
#   in:  CONNS concurrent connections from Linux to a port the nodes listen
#        on as a group (sink), BYTES each;
#   out: each node sends BYTES to a Linux sink.
#
# For each transfer: filterd's CPU seconds (utime + stime from
# /proc/<pid>/stat, before and after) per GB of stream bytes, and the
# throughput (stream bytes / wall time). Last, the ratio steer / central of
# the CPU per GB (the claim: steer costs filterd a small fraction of what
# terminating TCP does). The machine's other load counts: run it on an idle
# machine and compare ratios, not absolute figures.
#
#   XK_BENCH_NODES (2), XK_BENCH_CONNS (8), XK_BENCH_BYTES (32m per connection)
set -euo pipefail
TEST_NAME=filterd_bench
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../integration/lib.sh"

if [ $# -eq 1 ]; then
  set -- "$1/filterd/filterd" "$1/apps/tcp-perf/xk-tcp-perf"
fi
[ $# -ge 2 ] || die "usage: $0 BUILD_DIR | FILTERD XK_TCP_PERF"
FD=$(readlink -f "$1")
XK=$(readlink -f "$2")
[ -x "$FD" ] && [ -x "$XK" ] || die "$FD or $XK is not executable"
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
PY=/usr/bin/python3
NODES=${XK_BENCH_NODES:-2}
CONNS=${XK_BENCH_CONNS:-8}
XK_BENCH_BYTES=${XK_BENCH_BYTES:-32M}
BYTES=$(numfmt --from=iec "${XK_BENCH_BYTES^^}")  # 4m or 4M
TICK=$(getconf CLK_TCK)

NSA=xk-fb-$$-a
NSB=xk-fb-$$-b
LNX=xkbl$$
XKIF=xkbx$$
LNX_IP=192.0.2.1
SHARED=192.0.2.10
# Its logs go to a directory of its own under /tmp, as the other benchmarks',
# never into the directory it runs from (the checkout, in scripts/test).
OUT=$(mktemp -d /tmp/xk-filterd-bench.XXXXXX)
CTL=$OUT/filterd.sock

cleanup() {
  local rc=$?
  set +e
  kill_all
  ip netns del "$NSA" 2>/dev/null
  ip netns del "$NSB" 2>/dev/null
  ip link del "$LNX" 2>/dev/null
  ip link del "$XKIF" 2>/dev/null
  [ $rc -eq 0 ] || echo "$TEST_NAME: FAILED (rc $rc); logs: $OUT"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
now() { date +%s.%N; }

# Linux side: CONNS connections each sending BYTES (zeros: the sender's cost
# stays low), printing the wall time.
BLAST='
import socket, sys, threading, time
peer, port, conns, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
buf = memoryview(bytes(1 << 20))
ok = [False] * conns
def one(i):
    s = socket.create_connection((peer, port), timeout=120)
    left = n
    while left > 0:
        k = s.send(buf[: min(left, len(buf))])
        left -= k
    s.shutdown(socket.SHUT_WR)
    while s.recv(65536):
        pass
    s.close()
    ok[i] = True
t0 = time.time()
ts = [threading.Thread(target=one, args=(i,)) for i in range(conns)]
for t in ts: t.start()
for t in ts: t.join()
print("BLAST ok=%d seconds=%.3f" % (sum(ok), time.time() - t0))
sys.exit(0 if all(ok) else 1)
'

step "topology: $NSA ($LNX $LNX_IP/24) <-veth-> $NSB (filterd on $XKIF as $SHARED/24)"
make_veth_topology "$NSA" "$NSB" "$LNX" "$XKIF" "$LNX_IP/24"

declare -A CPU_PER_GB GBPS
run_mode() {  # steer|central
  local mode=$1 memif=/run/xk-fb-$$-$1.memif fdpid i before after t0 t1 total
  step "$mode: filterd and $NODES nodes"
  ip netns exec "$NSB" "$FD" --mode "$mode" --port "net_af_packet0,iface=$XKIF,framecnt=4096" \
    --port-opts "mbufs=16383" --ip "$SHARED/24" --control "$CTL" --memif-socket "$memif" \
    > "$OUT/filterd-$mode.log" 2>&1 &
  fdpid=$!
  PIDS+=("$fdpid")
  wait_for "$OUT/filterd-$mode.log" "ready" "$fdpid" 30
  local servers=()
  for i in $(seq 1 "$NODES"); do
    ip netns exec "$NSB" "$XK" server --mode sink --group --verify off --count 1000000 --filterd "$CTL" \
      --idle sleep > "$OUT/$mode-server$i.log" 2>&1 &
    servers+=($!)
    PIDS+=($!)
  done
  for i in $(seq 1 "$NODES"); do wait_for "$OUT/$mode-server$i.log" "ready" "${servers[$((i - 1))]}" 30; done
  total=$((CONNS * BYTES))

  step "$mode in: $CONNS connections from Linux, $(numfmt --to=iec $BYTES) each"
  before=$(cpu_ticks "$fdpid")
  t0=$(now)
  ip netns exec "$NSA" "$PY" -c "$BLAST" "$SHARED" 5001 "$CONNS" "$BYTES" > "$OUT/$mode-blast.log" 2>&1 \
    || { cat "$OUT/$mode-blast.log" >&2; die "$mode: the Linux senders failed"; }
  t1=$(now)
  after=$(cpu_ticks "$fdpid")
  CPU_PER_GB[$mode-in]=$(awk -v c=$((after - before)) -v t="$TICK" -v b=$total 'BEGIN { printf "%.3f", c / t / (b / 1e9) }')
  GBPS[$mode-in]=$(awk -v b=$total -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.3f", b * 8 / (t1 - t0) / 1e9 }')
  echo "   filterd CPU $(awk -v c=$((after - before)) -v t="$TICK" 'BEGIN { printf "%.2f", c / t }') s for $(numfmt --to=iec $total): ${CPU_PER_GB[$mode-in]} s/GB, ${GBPS[$mode-in]} Gbit/s"

  step "$mode out: each of $NODES nodes sends $(numfmt --to=iec $BYTES) to Linux"
  ip netns exec "$NSA" "$PY" "$HERE/../integration/multi_peer.py" sink --bind "$LNX_IP" --port 7001 \
    --conns "$NODES" --timeout 300 > "$OUT/$mode-sink.log" 2>&1 &
  local sink=$!
  PIDS+=("$sink")
  wait_for "$OUT/$mode-sink.log" "READY" "$sink" 20
  local clients=()
  before=$(cpu_ticks "$fdpid")
  t0=$(now)
  for i in $(seq 1 "$NODES"); do
    ip netns exec "$NSB" "$XK" client --peer "$LNX_IP:7001" --bytes "$BYTES" --verify off --timeout 120 \
      --filterd "$CTL" --idle sleep > "$OUT/$mode-client$i.log" 2>&1 &
    clients+=($!)
    PIDS+=($!)
  done
  for i in $(seq 1 "$NODES"); do
    wait "${clients[$((i - 1))]}" || { tail "$OUT/$mode-client$i.log" >&2; die "$mode: node client $i failed"; }
  done
  wait "$sink" || { cat "$OUT/$mode-sink.log" >&2; die "$mode: the Linux sink failed"; }
  t1=$(now)
  after=$(cpu_ticks "$fdpid")
  total=$((NODES * BYTES))
  CPU_PER_GB[$mode-out]=$(awk -v c=$((after - before)) -v t="$TICK" -v b=$total 'BEGIN { printf "%.3f", c / t / (b / 1e9) }')
  GBPS[$mode-out]=$(awk -v b=$total -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.3f", b * 8 / (t1 - t0) / 1e9 }')
  echo "   filterd CPU $(awk -v c=$((after - before)) -v t="$TICK" 'BEGIN { printf "%.2f", c / t }') s for $(numfmt --to=iec $total): ${CPU_PER_GB[$mode-out]} s/GB, ${GBPS[$mode-out]} Gbit/s"

  for pid in "${servers[@]}"; do stop "$pid" || true; done
  stop "$fdpid" || die "$mode: filterd did not exit cleanly"
}

run_mode steer
run_mode central

step "result"
printf "   %-10s %14s %14s %12s %12s\n" direction "steer s/GB" "central s/GB" "steer/central" "Gbit/s s|c"
for d in in out; do
  printf "   %-10s %14s %14s %12s %12s\n" "$d" "${CPU_PER_GB[steer-$d]}" "${CPU_PER_GB[central-$d]}" \
    "$(awk -v s="${CPU_PER_GB[steer-$d]}" -v c="${CPU_PER_GB[central-$d]}" 'BEGIN { if (c > 0) printf "%.3fx", s / c; else print "n/a" }')" \
    "${GBPS[steer-$d]}|${GBPS[central-$d]}"
done
echo "RESULT nodes=$NODES conns=$CONNS bytes=$BYTES" \
  "steer_in_s_per_gb=${CPU_PER_GB[steer-in]} central_in_s_per_gb=${CPU_PER_GB[central-in]}" \
  "steer_out_s_per_gb=${CPU_PER_GB[steer-out]} central_out_s_per_gb=${CPU_PER_GB[central-out]}"
