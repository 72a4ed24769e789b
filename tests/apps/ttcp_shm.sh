#!/usr/bin/env bash
# apps.ttcp_shm: xk-ttcp between two stacks over the shm driver (no root: the
# set-up socket in the test's output directory; docs/shm-driver.md).
#
#   ttcp_shm.sh XK_TTCP
#
# (1) 64m in 64k writes, checksums on: both ends print the same sha256 and
# byte count; the payload crossed by reference (tx_refs), in large frames,
# with nothing refused or dropped; (2) 64 KB frames through a fault layer
# that loses, duplicates, reorders and corrupts received segments (the
# corruption a copy: the payload is the sender's, read-only here): the
# stream arrives intact and every fault happened; (3) the receiver killed
# mid-stream: the transmitter sees its link go and fails cleanly (exit 1,
# no crash).
set -euo pipefail
TTCP=$(readlink -f "${1:?usage: ttcp_shm.sh XK_TTCP}")
TEST_NAME=ttcp_shm
source "$(dirname "$0")/../integration/lib.sh"
OUT=$PWD/$TEST_NAME.out
rm -rf "$OUT"
mkdir -p "$OUT"
install_cleanup
SOCK=$OUT/shm.sock

source "$(dirname "$0")/ttcp_lib.sh"

receiver() {  # log args... (background; pid in RX)
  local log=$1
  shift
  "$TTCP" receive --idle sleep --stats "$@" > "$OUT/$log" 2>&1 &
  RX=$!
  PIDS+=("$RX")
  wait_for "$OUT/$log" "waiting for the link" "$RX" 30
}
transmitter() {  # log args...
  local log=$1
  shift
  timeout 120 "$TTCP" transmit --port "shm:$SOCK" --ip 192.0.2.11/24 --idle sleep --stats \
    --peer 192.0.2.10:5001 "$@" > "$OUT/$log" 2>&1
}
step "(1) 64m over shm"
receiver rx1.log --port "shm:$SOCK,role=server" --ip 192.0.2.10/24
transmitter tx1.log --bytes 64m || { cat "$OUT/tx1.log" >&2; die "(1): the transmitter failed"; }
wait "$RX" || { cat "$OUT/rx1.log" >&2; die "(1): the receiver failed"; }
same_stream tx1.log rx1.log 67108864
refs=$(counter net0 tx_refs tx1.log)
large=$(counter net0 tx_large_frames tx1.log)
[ "$refs" -gt 900 ] || die "(1): tx_refs=$refs: the payload did not cross by reference"
[ "$large" -gt 900 ] || die "(1): tx_large_frames=$large: no large frames"
for c in rx_bad drop_ring_full drop_no_tokens drop_no_arena drop_too_big bad_returns; do
  for log in tx1.log rx1.log; do
    [ "$(counter net0 $c $log)" = 0 ] || die "(1): $log: net0 $c=$(counter net0 $c $log)"
  done
done
echo "   by reference: $refs pieces; copied: $(counter net0 tx_copied tx1.log); large frames: $large"

step "(2) 64 KB frames through loss, duplication, reordering and corruption"
cat > "$OUT/rx2.graph" <<GRAPH
shm   net0 path=$SOCK role=server
eth   eth0 below=net0
arp   arp0 below=eth0
ipv4  ip0  below=eth0,arp0 addr=192.0.2.10/24
fault f0   below=ip0 dir=rx loss=0.005 duplicate=0.01 reorder=0.005 corrupt=0.01 seed=5
tcp   tcp0 below=f0
udp   udp0 below=ip0
GRAPH
receiver rx2.log --graph "$OUT/rx2.graph" --timeout 30
transmitter tx2.log --bytes 32m --timeout 30 || { cat "$OUT/tx2.log" >&2; die "(2): the transmitter failed"; }
wait "$RX" || { cat "$OUT/rx2.log" >&2; die "(2): the receiver failed"; }
same_stream tx2.log rx2.log 33554432
for f in lost duplicated reordered corrupted; do
  [ "$(counter f0 "rx_$f" rx2.log)" -gt 0 ] || die "(2): the fault layer's rx_$f is 0"
done
[ "$(counter tcp0 drop_bad_csum rx2.log)" -gt 0 ] || die "(2): no corrupted segment was caught by the checksum"
echo "   faults: $(for f in lost duplicated reordered corrupted; do printf '%s=%s ' $f "$(counter f0 rx_$f rx2.log)"; done)"

step "(3) the receiver killed mid-stream"
receiver rx3.log --port "shm:$SOCK,role=server" --ip 192.0.2.10/24
( sleep 0.5; kill -KILL "$RX" ) &
rc=0
transmitter tx3.log --seconds 30 --timeout 5 || rc=$?
wait "$RX" 2>/dev/null || true
[ "$rc" = 1 ] || { cat "$OUT/tx3.log" >&2; die "(3): the transmitter exited $rc, want 1 (a clean failure)"; }
[ "$(counter net0 links_down tx3.log)" = 1 ] || die "(3): the transmitter's link did not go down"
echo "   the transmitter failed cleanly; its link went down once"
