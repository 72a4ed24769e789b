#!/usr/bin/env bash
# The NetPIPE sweep: xk-pingpong between two xk stacks over
# net_memif, and over the shm driver, against NetPIPE's own NPtcp between two Linux namespaces over a
# veth, in one run (docs/BENCHMARKS.md, "NetPIPE sweep").
#
#   pingpong_bench.sh BUILD_DIR        (as root: the Linux side uses netns)
#
# Both sweep message sizes from 1 byte to XK_BENCH_MAX (default 8m) with
# NetPIPE's +/-3 byte perturbations and report, per size, the half
# round-trip time and the throughput (bytes x 8 / half-RTT). The table shows
# the powers of two both measured, xk's figure next to Linux's and their
# ratio. NPtcp is NetPIPE 3.7 from Debian (netpipe-tcp): its receiver in one
# namespace, its transmitter in the other; xk-pingpong busy-polls (both
# sides), as NPtcp's processes spin in recv on their own cores, and its
# server reads each message in full before sending it back (--echo whole,
# the default), as NPtcp's receiver does.
set -euo pipefail
TEST_NAME=pingpong_bench
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../integration/lib.sh"

[ $# -eq 1 ] || die "usage: $0 BUILD_DIR"
PP=$(readlink -f "$1/apps/pingpong/xk-pingpong")
[ -x "$PP" ] || die "$PP is not executable: build the release preset first"
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces for the Linux side)"
command -v NPtcp > /dev/null || die "needs NPtcp (apt-get install netpipe-tcp)"
MAX=${XK_BENCH_MAX:-8m}
MAX_BYTES=$(numfmt --from=iec "${MAX^^}")

NSA=xk-pp-$$-a
NSB=xk-pp-$$-b
OUT=$(mktemp -d /tmp/xk-pingpong-bench.XXXXXX)
install_cleanup

step "Linux: NPtcp over a veth between two namespaces, 1 byte to $MAX"
make_veth_pair "$NSA" "$NSB" xkppa$$ xkppb$$ 192.0.2.1/24 192.0.2.2/24
# The receiver answers one sweep and exits with the transmitter.
(cd "$OUT" && exec ip netns exec "$NSA" NPtcp) > "$OUT/np-recv.log" 2>&1 &
NPR=$!
PIDS+=("$NPR")
sleep 0.5
(cd "$OUT" && ip netns exec "$NSB" NPtcp -h 192.0.2.1 -o "$OUT/np.out" -l 1 -u "$MAX_BYTES") > "$OUT/np-send.log" 2>&1 \
  || { tail "$OUT/np-send.log" >&2; die "NPtcp failed"; }
wait "$NPR" || true
[ -s "$OUT/np.out" ] || die "NPtcp wrote no $OUT/np.out"
echo "   $(wc -l < "$OUT/np.out") sizes"

step "xk: xk-pingpong over net_memif, 1 byte to $MAX"
SOCK=/run/xk-ppb-$$.memif  # abstract: no file
"$PP" server --port "net_memif0,role=server,id=0,socket=$SOCK" --ip 192.0.2.10/24 --count 1 \
  > "$OUT/xk-server.log" 2>&1 &
SRV=$!
PIDS+=("$SRV")
wait_for "$OUT/xk-server.log" "waiting for the link" "$SRV" 30
"$PP" client --port "net_memif1,role=client,id=0,socket=$SOCK" --ip 192.0.2.11/24 --peer 192.0.2.10:5002 \
  --max "$MAX" --csv "$OUT/xk.csv" > "$OUT/xk-client.log" 2>&1 || { tail "$OUT/xk-client.log" >&2; die "xk-pingpong failed"; }
wait "$SRV" || true
echo "   $(grep -m1 '^RESULT' "$OUT/xk-client.log")"

step "xk: xk-pingpong over the shm driver, 1 byte to $MAX"
SHM=@xk-ppb-$$.shm  # abstract: no file
"$PP" server --port "shm:$SHM,role=server" --ip 192.0.2.10/24 --count 1 > "$OUT/shm-server.log" 2>&1 &
SRV=$!
PIDS+=("$SRV")
wait_for "$OUT/shm-server.log" "waiting for the link" "$SRV" 30
"$PP" client --port "shm:$SHM" --ip 192.0.2.11/24 --peer 192.0.2.10:5002 \
  --max "$MAX" --csv "$OUT/xk-shm.csv" > "$OUT/shm-client.log" 2>&1 || { tail "$OUT/shm-client.log" >&2; die "xk-pingpong over shm failed"; }
wait "$SRV" || true
echo "   $(grep -m1 '^RESULT' "$OUT/shm-client.log")"

# The floor under any xk figure: 80-byte frames bounced over memif by the
# DPDK driver alone (no stack). Where a quarter of Linux's time is below
# it, the <= 0.25x target is out of reach over memif on this machine.
step "floor: raw 80-byte frames over net_memif (the driver alone)"
RAW=$(readlink -f "$1/tests/bench/xk-memif-pingpong")
[ -x "$RAW" ] || die "$RAW is missing"
"$RAW" server "$OUT/raw.sock" > "$OUT/raw-srv.log" 2>&1 &
RS=$!
PIDS+=("$RS")
wait_for "$OUT/raw-srv.log" "waiting for the link" "$RS" 30
"$RAW" client "$OUT/raw.sock" --size 80 --count 200000 > "$OUT/raw-cli.log" 2>&1 || die "raw ping-pong failed"
wait "$RS" || true
FLOOR=$(sed -n 's/.*half_rtt_avg_us=\([^ ]*\).*/\1/p' "$OUT/raw-cli.log" | head -1)
echo "   half-RTT $FLOOR us"

# The machine's floor for bulk (tests/bench/copy_floor.cpp): two copies
# through shared memory in 64 KiB slots, no protocol. Its time for a message
# of S bytes is S x 8 / rate; each figure's share of the floor's speed at
# that size is that time over the figure's.
step "floor: the copy floor, 64 KiB slots"
CF=$(readlink -f "$1/tests/bench/xk-copy-floor")
[ -x "$CF" ] || die "$CF is missing"
"$CF" --slot 65536 --bytes 4g --runs 3 > "$OUT/copy-floor.log" 2>&1 || { cat "$OUT/copy-floor.log" >&2; die "the copy floor failed"; }
COPY_FLOOR=$(sed -n 's/^RESULT .*gbps=\([^ ]*\) .*/\1/p' "$OUT/copy-floor.log")
echo "   $COPY_FLOOR Gbit/s (median of 3)"

step "result: half round trip (us) and throughput (Mbit/s) per size; ratio xk / Linux"
python3 - "$OUT/xk.csv" "$OUT/np.out" "$FLOOR" "$OUT/xk-shm.csv" "$COPY_FLOOR" <<'PY'
import csv, sys
def sweep(path):
    got = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            got[int(r["bytes"])] = (float(r["half_rtt_us"]), float(r["mbit_s"]))
    return got
xk = sweep(sys.argv[1])
shm = sweep(sys.argv[4])
np = {}
for line in open(sys.argv[2]):
    p = line.split()
    if len(p) >= 3:
        # NPtcp's np.out: bytes, Mbit/s, and the half round trip in seconds.
        np[int(p[0])] = (float(p[2]) * 1e6, float(p[1]))
sizes = sorted(s for s in xk if s in np and s & (s - 1) == 0)
if not sizes:
    sys.exit("no size measured by both")
print("   %9s  %10s %10s %7s   %10s %10s %7s   %10s %7s" % ("bytes", "xk us", "Linux us", "ratio", "xk Mbit/s", "Linux",
                                                          "ratio", "shm us", "ratio"))
for s in sizes:
    (xl, xt), (ll, lt) = xk[s], np[s]
    sl = shm.get(s, (float("nan"), 0))[0]
    print("   %9d  %10.2f %10.2f %6.2fx   %10.1f %10.1f %6.2fx   %10.2f %6.2fx" % (s, xl, ll, xl / ll, xt, lt, xt / lt,
                                                                           sl, sl / ll))
print("   (xk: over net_memif; shm: xk over its own shared-memory link, docs/shm-driver.md; ratios against Linux)")
copy_floor = float(sys.argv[5])
print("   as a fraction of the copy floor's speed (%.1f Gbit/s, 64 KiB slots): floor time / figure's time" % copy_floor)
print("   %9s  %10s %8s %8s %8s" % ("bytes", "floor us", "xk", "shm", "Linux"))
for s in sizes:
    if s < 4096:
        continue
    f_us = s * 8 / (copy_floor * 1e3)
    sl = shm.get(s, (float("nan"), 0))[0]
    print("   %9d  %10.2f %8.3f %8.3f %8.3f" % (s, f_us, f_us / xk[s][0], f_us / sl, f_us / np[s][0]))
floor = float(sys.argv[3])
out_of_reach = [s for s in sizes if s <= 4096 and np[s][0] * 0.25 < floor]
print("   floor: raw memif frames %.2f us half-RTT; 0.25x of Linux's figure is below it at %s"
      % (floor, ", ".join("%d B" % s for s in out_of_reach) if out_of_reach else "no size up to 4 KiB"))
lo, hi = sizes[0], sizes[-1]
print("RESULT sizes=%d half_rtt_1B_xk_us=%.2f half_rtt_1B_linux_us=%.2f mbit_%d_xk=%.0f mbit_%d_linux=%.0f floor_us=%.2f"
      " copy_floor_gbps=%.1f" % (len(sizes), xk[lo][0], np[lo][0], hi, xk[hi][1], hi, np[hi][1], floor, copy_floor))
PY
