#!/usr/bin/env bash
# The floor of forwarding frames in software on this machine: what any
# process standing where filterd stands -- between a node and the external
# link -- costs, with no filter, no table, no check at all (docs/BENCHMARKS.md,
# "The floor of a forwarder").
#
#   forward_floor.sh BUILD_DIR          (as root; e.g. build/release)
#
# One bulk transfer (xk-ttcp, one connection, XK_BENCH_BYTES, 1 GB) four
# ways, in one run:
#
#   direct:   sender -> receiver, two standalone xk stacks on one net_memif
#             link (xk-scale's "standalone")
#   testpmd:  sender -> DPDK's own testpmd, io forwarding (receive a burst,
#             send it on the other port, nothing looked at) -> receiver, two
#             net_memif links; testpmd's --record-core-cycles counts the
#             cycles its forwarding core spent on bursts that carried frames,
#             so its spinning is not counted: the cost of moving a frame
#             from one memif to the other and nothing else
#   steer, central: the same transfer through filterd, as xk-scale measures
#             it (filterd's CPU seconds per GB)
#
# Prints throughput against direct, and forwarding CPU per GB: testpmd's
# busy cycles turned into seconds at its measured clock, against central
# filterd's CPU per GB in the same run. The figure that bounds the target
# "filterd CPU steer/central <= 0.1x": no forwarder can be cheaper than
# testpmd's io mode, which does strictly less than filterd must.
#
#   XK_BENCH_BYTES (1g), XK_BENCH_MTU (1500), XK_BENCH_IDLE (yield: the xk
#   stacks and filterd give their core away between polls)
set -euo pipefail
TEST_NAME=forward_floor
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../integration/lib.sh"

[ $# -eq 1 ] || die "usage: $0 BUILD_DIR"
TTCP=$(readlink -f "$1/apps/ttcp/xk-ttcp")
SCALE=$(readlink -f "$1/apps/scale/xk-scale")
[ -x "$TTCP" ] && [ -x "$SCALE" ] || die "$TTCP or $SCALE is not executable"
[ "$(id -u)" -eq 0 ] || die "must run as root (testpmd's EAL, xk-scale's namespaces)"
if ! command -v dpdk-testpmd > /dev/null; then
  # Debian ships testpmd in dpdk-dev, not in the runtime package.
  apt-get update -qq && apt-get install -y -qq dpdk-dev > /dev/null || die "cannot install dpdk-dev (dpdk-testpmd)"
fi
BYTES=${XK_BENCH_BYTES:-1g}
MTU=${XK_BENCH_MTU:-1500}
IDLE=${XK_BENCH_IDLE:-yield}
OUT=$(mktemp -d /tmp/xk-floor.XXXXXX)
MEMIF=$OUT  # the cleanup removes the doorbell pages of both links
install_cleanup

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" "$2" | head -1; }
PORT_OPTS=()
[ "$MTU" != 1500 ] && PORT_OPTS=(--port-opts "mtu=$MTU")

# receive SOCKET NAME: a receiver on the server end of net_memif SOCKET,
# on the CPUs of PIN (taskset -c; all of them unless set).
PIN=()
receive() {
  "${PIN[@]}" "$TTCP" receive --port "net_memif0,role=server,id=0,socket=$1" "${PORT_OPTS[@]}" --ip 192.0.2.20/24 \
    --tcp-port 5001 --verify off --idle "$IDLE" --timeout 120 --link-wait 60 > "$OUT/$2-receiver.log" 2>&1 &
  RPID=$!
  PIDS+=("$RPID")
  wait_for "$OUT/$2-receiver.log" "waiting for the link" "$RPID" 30
}
# transmit SOCKET NAME --bytes N|--seconds S: the sender on the client end
# of net_memif SOCKET.
transmit() {
  "${PIN[@]}" "$TTCP" transmit --port "net_memif1,role=client,id=0,socket=$1" "${PORT_OPTS[@]}" --ip 192.0.2.10/24 \
    --peer 192.0.2.20:5001 "$3" "$4" --verify off --idle "$IDLE" --timeout 120 \
    > "$OUT/$2-sender.log" 2>&1 || { cat "$OUT/$2-sender.log" >&2; die "$2: the sender failed"; }
  wait "$RPID" || { cat "$OUT/$2-receiver.log" >&2; die "$2: the receiver failed"; }
}

step "direct: two standalone xk stacks on one net_memif link, $BYTES, MTU $MTU"
receive "$OUT/direct.sock" direct
transmit "$OUT/direct.sock" direct --bytes "$BYTES"
DIRECT=$(field gbps "$OUT/direct-sender.log")
echo "   $DIRECT Gbit/s"

step "testpmd io forwarding between two net_memif links (testpmd on CPU 1, the stacks on CPU 0)"
# testpmd's forwarding core has CPU 1 to itself: its busy cycles are then
# its own (a preempted burst would count the other process's time), and a
# forwarder cannot be placed better on two cores.
PIN=(taskset -c 0)
receive "$OUT/ext.sock" testpmd
# Frames over 2 KB: memif slots (bsize) and mbufs a frame long, as xk's
# driver makes them (docs/dpdk-driver.md, "memif slots as large as a
# frame"); testpmd's --max-pkt-len would be refused (memif says 1518).
BSIZE=""
MBUF=2176
if [ $((MTU + 18)) -gt 2048 ]; then
  BSIZE=",bsize=$(((MTU + 18 + 127) / 128 * 128))"
  MBUF=$(((MTU + 18 + 127) / 128 * 128 + 128))
fi
# Interactive, its commands through a fifo: net_memif forgets a port's
# counters when its link goes down, so they are read while the sender runs.
mkfifo "$OUT/tp.in"
exec 7<> "$OUT/tp.in"
dpdk-testpmd -l 0,1 --no-huge -m 512 --no-pci --file-prefix "xk-floor-$$" \
  --vdev "net_memif0,role=client,id=0,socket=$OUT/ext.sock$BSIZE" \
  --vdev "net_memif1,role=server,id=0,socket=$OUT/node.sock$BSIZE" \
  -- -i --forward-mode=io --nb-cores=1 --record-core-cycles --total-num-mbufs=16384 --mbuf-size="$MBUF" \
  < "$OUT/tp.in" > "$OUT/testpmd.log" 2>&1 &
TPID=$!
PIDS+=("$TPID")
wait_for "$OUT/testpmd.log" "testpmd>" "$TPID" 30
echo start >&7
# Counted from "start": busy cycles from the first frame on; the read
# comes 2 s into the 4 s transfer.
(sleep 3; echo "show fwd stats all" >&7; echo "show port stats all" >&7) &
transmit "$OUT/node.sock" testpmd --seconds 4
sleep 0.5
echo quit >&7
wait "$TPID" || true
exec 7>&-
rm -rf "/var/run/dpdk/xk-floor-$$"  # testpmd's EAL files (xk's stacks run with --no-shconf)
PIN=()
TESTPMD=$(field gbps "$OUT/testpmd-sender.log")
# "CPU cycles/packet=C (total cycles=B / total io packets=P) at M MHz Clock":
# B counts only the bursts that carried frames.
read -r CPP BUSY PKTS MHZ < <(sed -n 's/.*CPU cycles\/packet=\([0-9.]*\) ([a-z ]*cycles=\([0-9]*\) \/ total [a-z ]*packets=\([0-9]*\)) at \([0-9]*\) MHz.*/\1 \2 \3 \4/p' \
  "$OUT/testpmd.log" | head -1) || true
[ -n "${PKTS:-}" ] && [ "$PKTS" -gt 0 ] || { cat "$OUT/testpmd.log" >&2; die "testpmd printed no cycle count"; }
# The bytes of those frames: both ports' RX-bytes, read just after.
FRAME_BYTES=$(sed -n 's/.*RX-bytes: *\([0-9]*\).*/\1/p' "$OUT/testpmd.log" | head -2 | awk '{ s += $1 } END { printf "%.0f", s }')
[ "$FRAME_BYTES" -gt 0 ] || { cat "$OUT/testpmd.log" >&2; die "testpmd printed no byte count"; }
TP_S_PER_GB=$(awk -v c="$BUSY" -v m="$MHZ" -v b="$FRAME_BYTES" 'BEGIN { printf "%.3f", c / (m * 1e6) / (b / 1e9) }')
echo "   $TESTPMD Gbit/s; forwarding: $CPP cycles/frame over $PKTS frames, $TP_S_PER_GB s/GB of frames (busy cycles only)"

step "through filterd (xk-scale steer and central: yielding for throughput, sleeping for CPU per GB)"
# filterd's CPU per GB is measured with sleeping processes, as the target's
# figure is: a yielding or busy filterd's CPU time is mostly its spinning.
scale_run() {  # NAME [IDLE]: IDLE for every process, or xk-scale's defaults (sleeping)
  local idle=()
  [ $# -gt 1 ] && idle=(--idle "$2" --peer-idle "$2" --filterd-idle "$2")
  "$SCALE" --n 1 --modes steer,central --csum on --bytes "$BYTES" --mtu "$MTU" "${idle[@]}" \
    --results "$OUT/$1" > "$OUT/$1.log" 2>&1 || { cat "$OUT/$1.log" >&2; die "xk-scale ($1) failed"; }
  [ -s "$OUT/$1/scale.csv" ] || { cat "$OUT/$1.log" >&2; die "xk-scale ($1) wrote no csv"; }
}
col() {  # NAME MODE COLUMN
  awk -F, -v m="$2" -v k="$3" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["mode"] == m { print $c[k]; exit }' \
    "$OUT/$1/scale.csv"
}
scale_run fast "$IDLE"
scale_run sleeping
STEER=$(col fast steer aggregate_gbps)
CENTRAL=$(col fast central aggregate_gbps)
STEER_CPU=$(col sleeping steer filterd_cpu_s_per_gb)
CENTRAL_CPU=$(col sleeping central filterd_cpu_s_per_gb)

step "result (MTU $MTU, one connection, $BYTES)"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
printf "   %-28s %8s Gbit/s\n" direct "$DIRECT"
printf "   %-28s %8s Gbit/s  %s of direct\n" "testpmd io forwarding" "$TESTPMD" "$(ratio "$TESTPMD" "$DIRECT")"
printf "   %-28s %8s Gbit/s  %s of direct\n" "filterd steer" "$STEER" "$(ratio "$STEER" "$DIRECT")"
printf "   %-28s %8s Gbit/s  %s of direct\n" "filterd central" "$CENTRAL" "$(ratio "$CENTRAL" "$DIRECT")"
printf "   forwarder CPU per GB: testpmd %s s (busy cycles), filterd (sleeping) steer %s s, central %s s\n" \
  "$TP_S_PER_GB" "$STEER_CPU" "$CENTRAL_CPU"
printf "   against central: testpmd %s, filterd steer %s\n" "$(ratio "$TP_S_PER_GB" "$CENTRAL_CPU")" \
  "$(ratio "$STEER_CPU" "$CENTRAL_CPU")"
echo "RESULT mtu=$MTU direct=$DIRECT testpmd=$TESTPMD steer=$STEER central=$CENTRAL" \
  "testpmd_cycles_per_frame=$CPP testpmd_s_per_gb=$TP_S_PER_GB steer_s_per_gb=$STEER_CPU central_s_per_gb=$CENTRAL_CPU"
