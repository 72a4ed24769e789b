#!/usr/bin/env bash
# MPI ping-pong under xkrun against the same two ranks over the kernel's
# loopback TCP, in one run (docs/BENCHMARKS.md, "MPI ping-pong").
#
#   tests/bench/mpi_bench.sh BUILD_DIR     (as root: a network namespace of its own)
#
# Two ranks of tests/preload/mpi_pingpong.c ("bench" form: powers of two
# from 1 B to XK_BENCH_MAX, only the exchanges timed, the bytes checked
# after them), launched by mpirun with Open MPI's TCP transport only:
#   kernel  both ranks on the kernel's loopback (btl_tcp_if_include lo)
#   memif   each rank under xkrun, its own stack and address, the two
#           stacks joined by a net_memif link (mpirun's MPMD form)
#   shm     the same over xk's own shared-memory link (docs/shm-driver.md)
# Each is run XK_BENCH_RUNS times, taking turns; the table gives each size's
# median one-way time (half a round trip) and the ratio to the kernel's.
#   XK_BENCH_MAX   largest message (default 8m)
#   XK_BENCH_RUNS  runs of each (default 3)
set -euo pipefail
TEST_NAME=mpi_bench
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../integration/lib.sh"

[ $# -eq 1 ] || die "usage: $0 BUILD_DIR"
BUILD=$(readlink -f "$1")
XKRUN=$BUILD/apps/preload/xkrun
PP=$BUILD/tests/xk-mpi-pingpong
for b in "$XKRUN" "$PP"; do [ -x "$b" ] || die "$b is missing: build the release preset first"; done
[ "$(id -u)" -eq 0 ] || die "must run as root (a network namespace)"
command -v mpirun > /dev/null || die "needs mpirun (apt-get install openmpi-bin libopenmpi-dev)"
MAX=$(numfmt --from=iec "$(echo "${XK_BENCH_MAX:-8m}" | tr '[:lower:]' '[:upper:]')")
RUNS=${XK_BENCH_RUNS:-3}

NSA=xk-mpib-$$
OUT=$(mktemp -d /tmp/xk-mpi-bench.XXXXXX)
install_cleanup
ip netns add "$NSA"
ip -n "$NSA" link set lo up

mpi() {  # LOG ARGS...: mpirun in the namespace, ranks as root, at most 5 minutes
  local log=$1
  shift
  ip netns exec "$NSA" timeout 300 mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self "$@" \
    > "$log" 2>&1 || { tail -20 "$log" >&2; die "mpirun failed ($log)"; }
  grep -q '^MPIBENCH ' "$log" || { tail -20 "$log" >&2; die "no MPIBENCH line in $log"; }
}
kernel_run() { mpi "$OUT/kernel-$1.log" --mca btl_tcp_if_include lo -np 2 "$PP" bench "$MAX"; }
xk_run() {  # LINK RUN
  local sock=@xk-mpib-$$-$1-$2 server client
  case $1 in
    memif) server=(--port "net_memif0,role=server,id=0,socket=$sock")
           client=(--port "net_memif1,role=client,id=0,socket=$sock") ;;
    shm) server=(--link "mpib-$$-$2") client=("${server[@]}") ;;  # the same words: either may come first
  esac
  mpi "$OUT/$1-$2.log" --mca btl_tcp_if_include xk0 \
    -np 1 "$XKRUN" "${server[@]}" --ip 198.51.100.1/24 -- "$PP" bench "$MAX" : \
    -np 1 "$XKRUN" "${client[@]}" --ip 198.51.100.2/24 -- "$PP" bench "$MAX"
}

step "MPI ping-pong, 1 B to $MAX: kernel loopback, xkrun over memif, xkrun over shm; $RUNS runs each, taking turns"
for run in $(seq "$RUNS"); do
  kernel_run "$run"
  xk_run memif "$run"
  xk_run shm "$run"
  echo "   run $run: 1 B one way kernel $(sed -n 's/^MPIBENCH bytes=1 .*half_rtt_us=\([^ ]*\).*/\1/p' "$OUT/kernel-$run.log") us," \
       "memif $(sed -n 's/^MPIBENCH bytes=1 .*half_rtt_us=\([^ ]*\).*/\1/p' "$OUT/memif-$run.log") us," \
       "shm $(sed -n 's/^MPIBENCH bytes=1 .*half_rtt_us=\([^ ]*\).*/\1/p' "$OUT/shm-$run.log") us"
done

echo
echo "MPI ping-pong (Open MPI, btl tcp), one way = half a round trip, medians of $RUNS runs"
echo "machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs, kernel $(uname -r);" \
     "$(mpirun --version 2>/dev/null | head -1)"
python3 - "$OUT" "$RUNS" <<'PY'
import os, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def sweep(name):
    per = {}
    for r in range(1, runs + 1):
        for line in open(os.path.join(out, f"{name}-{r}.log")):
            if line.startswith("MPIBENCH "):
                f = dict(kv.split("=") for kv in line.split()[1:])
                per.setdefault(int(f["bytes"]), []).append(float(f["half_rtt_us"]))
    return {s: statistics.median(v) for s, v in per.items()}
k, m, s = sweep("kernel"), sweep("memif"), sweep("shm")
print("%9s  %10s %10s %7s %10s %7s  %s" % ("bytes", "kernel us", "memif us", "ratio", "shm us", "ratio", "target"))
met = {"memif": 0, "shm": 0}
sizes = sorted(k)
for b in sizes:
    target = 0.5 if b <= 1024 else 1.0
    rm, rs = m[b] / k[b], s[b] / k[b]
    met["memif"] += rm <= target if b <= 1024 else rm < target
    met["shm"] += rs <= target if b <= 1024 else rs < target
    print("%9d  %10.2f %10.2f %6.2fx %10.2f %6.2fx  %s" % (b, k[b], m[b], rm, s[b], rs,
          "<= 0.5x" if b <= 1024 else "< 1x"))
print("RESULT sizes=%d met_memif=%d met_shm=%d one_way_1B_kernel_us=%.2f one_way_1B_memif_us=%.2f one_way_1B_shm_us=%.2f"
      % (len(sizes), met["memif"], met["shm"], k[1], m[1], s[1]))
PY
