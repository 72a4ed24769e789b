#!/usr/bin/env bash
# apps.ttcp_memif / apps.ttcp_filterd: xk-ttcp over net_memif (no root, no
# namespaces: memif sockets in the test's output directory).
#
#   ttcp_memif.sh XK_TTCP                 standalone: receiver <-memif-> transmitter
#   ttcp_memif.sh XK_TTCP FILTERD         3 transmit nodes behind filterd
#   ttcp_memif.sh XK_TTCP FILTERD shm [central]
#                                         ... over shm channels (--channels shm),
#                                         in steer or central mode
#
# standalone: (1) 16m in 64k writes: both ends print the same sha256 and
# byte count, sane numbers, the aggregate line, STATS only where --stats was
# given; (1a) a transmitter started a second before its receiver (a memif
# client before its server) waits for it and the stream arrives; (1b) one transmitter with --connections 4: four streams at once,
# each intact (its own RESULT line, the receiver's sha256), one total line
# with connections=4 and the transfer's own CPU (xfer_cpu_s, at most the
# whole life's cpu_s); (2) --csum off on both stacks and --seconds 1: the sha256 still
# matches, the transmitter sent for at least a second, the receiver printed
# PROGRESS lines; (3) failures: a transmitter to a port nobody listens on
# exits 1 (refused), and a receiver waiting for a second connection that
# never comes exits 1 after --timeout with no aggregate line; (4) a 16 MB
# window into a receiver of 127 mbufs, 1 in 10^4 segments lost: the stream
# arrives intact (the queues copy frames of a port short of mbufs); (5)
# 64 KB frames (frame_max=65535 both ends) through a fault layer that loses,
# duplicates, reorders and corrupts received segments: the stream arrives
# intact, large frames were sent, and every fault happened.
# filterd: filterd's external port is a memif whose other end is a standalone
# receiver (--connections 3); 3 xk-ttcp transmit nodes attached with
# --filterd (checksums off, as the receiver) send to it at once: all three
# streams arrive intact, from filterd's shared address, and the aggregate
# line adds them up.
set -euo pipefail
TTCP=$(readlink -f "${1:?usage: ttcp_memif.sh XK_TTCP [FILTERD]}")
FD=${2:+$(readlink -f "$2")}
CHANNELS=${3:-memif}
MODE=${4:-steer}
if [ -n "$FD" ]; then TEST_NAME=ttcp_filterd; else TEST_NAME=ttcp_memif; fi
[ "$CHANNELS" = memif ] || TEST_NAME=ttcp_filterd_$CHANNELS
[ "$MODE" = steer ] || TEST_NAME=${TEST_NAME}_$MODE
source "$(dirname "$0")/../integration/lib.sh"
OUT=$PWD/$TEST_NAME.out
rm -rf "$OUT"
mkdir -p "$OUT"
install_cleanup

source "$(dirname "$0")/ttcp_lib.sh"
# receiver LOG ARGS... (background; its pid in RX): memif server on $SOCK,
# waiting for its link (the transmitter, a memif client, brings it up).
receiver() {
  local log=$1
  shift
  "$TTCP" receive --port "net_memif0,role=server,id=0,socket=$SOCK" --ip 192.0.2.10/24 --idle sleep "$@" \
    > "$OUT/$log" 2>&1 &
  RX=$!
  PIDS+=("$RX")
  wait_for "$OUT/$log" "waiting for the link" "$RX" 30
}
transmitter() {  # log args...
  local log=$1
  shift
  timeout 120 "$TTCP" transmit --port "net_memif1,role=client,id=0,socket=$SOCK" --ip 192.0.2.11/24 --idle sleep \
    "$@" > "$OUT/$log" 2>&1
}
# wait_rx: the receiver's exit status.
wait_rx() {
  local rc=0
  wait "$RX" || rc=$?
  local left=()
  for p in "${PIDS[@]}"; do [ "$p" = "$RX" ] || left+=("$p"); done
  PIDS=("${left[@]+"${left[@]}"}")
  return $rc
}
# aggregate LOG CONNS BYTES: the receiver's total line.
aggregate() {
  local agg
  agg=$(grep '^RESULT role=receiver total=1 ' "$OUT/$1" || true)
  [ -n "$agg" ] || die "$1: no aggregate RESULT line"
  echo "   $agg"
  [ "$(key "$agg" connections)" = "$2" ] || die "$1: connections=$(key "$agg" connections), want $2"
  [ "$(key "$agg" bytes)" = "$3" ] || die "$1: bytes=$(key "$agg" bytes), want $3"
  [ "$(key "$agg" failed)" = 0 ] || die "$1: failed=$(key "$agg" failed)"
  for k in seconds gbps cpu_s cpu_s_per_gb; do positive "$k" "$(key "$agg" $k)"; done
  awk -v c="$(key "$agg" cpu_s)" -v b="$3" -v x="$(key "$agg" cpu_s_per_gb)" \
    'BEGIN { exit !((c / (b / 1e9) - x) ^ 2 < 1e-2 * x) }' || die "$1: cpu_s_per_gb is not cpu_s per 1e9 bytes"
}

if [ -z "$FD" ]; then
  SOCK=$OUT/memif.sock
  step "(1) 16m in 64k writes, checksums on"
  receiver rx1.log --buflen 64k --stats
  transmitter tx1.log --peer 192.0.2.10:5001 --bytes 16m --buflen 64k --label first \
    || { cat "$OUT/tx1.log" >&2; die "(1): the transmitter failed"; }
  wait_rx || { cat "$OUT/rx1.log" >&2; die "(1): the receiver failed"; }
  same_stream tx1.log rx1.log 16777216
  aggregate rx1.log 1 16777216
  [ "$(key "$(grep '^RESULT role=transmitter' "$OUT/tx1.log")" label)" = first ] || die "(1): no label=first"
  grep -q '^STATS who=receiver ' "$OUT/rx1.log" || die "(1): no STATS line from the receiver (--stats)"
  ! grep -q '^STATS' "$OUT/tx1.log" || die "(1): a STATS line from the transmitter without --stats"

  step "(1a) a transmitter started before its receiver waits for it (memif client before server)"
  transmitter tx1a.log --peer 192.0.2.10:5001 --bytes 4m &
  EARLY=$!
  sleep 1
  receiver rx1a.log
  wait "$EARLY" || { cat "$OUT/tx1a.log" >&2; die "(1a): the transmitter started first failed"; }
  wait_rx || { cat "$OUT/rx1a.log" >&2; die "(1a): the receiver failed"; }
  same_stream tx1a.log rx1a.log 4194304

  step "(1b) one transmitter, --connections 4, 4m each"
  receiver rx1b.log --connections 4
  transmitter tx1b.log --peer 192.0.2.10:5001 --connections 4 --bytes 4m --label four \
    || { cat "$OUT/tx1b.log" >&2; die "(1b): the transmitter failed"; }
  wait_rx || { cat "$OUT/rx1b.log" >&2; die "(1b): the receiver failed"; }
  aggregate rx1b.log 4 16777216
  total=$(grep '^RESULT role=transmitter bytes=' "$OUT/tx1b.log" || true)
  echo "   $total"
  [ "$(key "$total" connections)" = 4 ] && [ "$(key "$total" bytes)" = 16777216 ] && [ "$(key "$total" label)" = four ] \
    || die "(1b): the transmitter's total line is not 4 connections, 16777216 bytes, label=four"
  awk -v x="$(key "$total" xfer_cpu_s)" -v c="$(key "$total" cpu_s)" 'BEGIN { exit !(x > 0 && x <= c) }' \
    || die "(1b): xfer_cpu_s=$(key "$total" xfer_cpu_s) is not in (0, cpu_s=$(key "$total" cpu_s)]"
  for c in 0 1 2 3; do
    tx=$(grep "^RESULT role=transmitter conn=$c " "$OUT/tx1b.log" || true)
    [ "$(key "$tx" bytes)" = 4194304 ] || die "(1b): connection $c of the transmitter: bytes=$(key "$tx" bytes)"
    rx=$(grep "^RESULT role=receiver conn=$c " "$OUT/rx1b.log" || true)
    [ "$(key "$rx" bytes)" = 4194304 ] && [ "$(key "$rx" sha256)" = "$(key "$tx" sha256)" ] \
      || die "(1b): connection $c: the receiver's bytes or sha256 differ from the transmitter's"
  done
  grep -q '^RESULT role=receiver total=1 .*xfer_cpu_s=[0-9.]*$' "$OUT/rx1b.log" || die "(1b): no receiver xfer_cpu_s"

  step "(2) --csum off on both stacks, --seconds 1, --progress 0.2"
  receiver rx2.log --csum off --progress 0.2 --rcvbuf 256k
  transmitter tx2.log --csum off --peer 192.0.2.10:5001 --seconds 1 --sndbuf 256k --nodelay \
    || { cat "$OUT/tx2.log" >&2; die "(2): the transmitter failed"; }
  wait_rx || { cat "$OUT/rx2.log" >&2; die "(2): the receiver failed"; }
  same_stream tx2.log rx2.log
  tx=$(grep '^RESULT role=transmitter' "$OUT/tx2.log")
  awk -v s="$(key "$tx" seconds)" 'BEGIN { exit !(s >= 1) }' || die "(2): sent for $(key "$tx" seconds) s, not 1"
  grep -qE '^PROGRESS bytes=[0-9]+ gbps=[0-9.]+$' "$OUT/rx2.log" || die "(2): no PROGRESS line"
  aggregate rx2.log 1 "$(key "$tx" bytes)"

  step "(3) failures: connect refused; a connection that never comes"
  receiver rx3.log --tcp-port 5002 --connections 2 --timeout 3
  rc=0
  transmitter tx3a.log --peer 192.0.2.10:5003 --timeout 5 || rc=$?
  [ "$rc" -eq 1 ] || { cat "$OUT/tx3a.log" >&2; die "(3): connect to a closed port: exit $rc, want 1"; }
  grep -q 'connect failed' "$OUT/tx3a.log" || die "(3): no 'connect failed' message"
  transmitter tx3b.log --peer 192.0.2.10:5002 --bytes 1m --verify off \
    || { cat "$OUT/tx3b.log" >&2; die "(3): the transmitter failed"; }
  ! grep -q 'sha256=' "$OUT/tx3b.log" || die "(3): sha256= with --verify off"
  rc=0
  wait_rx || rc=$?
  [ "$rc" -eq 1 ] || { cat "$OUT/rx3.log" >&2; die "(3): the receiver's exit $rc, want 1 (timeout)"; }
  grep -q 'no progress for 3.0 s: 1 of 2 connections accepted' "$OUT/rx3.log" || die "(3): no timeout message"
  grep -q '^RESULT role=receiver conn=0 .*bytes=1048576' "$OUT/rx3.log" || die "(3): the connection that came is not reported"
  ! grep -q 'total=1' "$OUT/rx3.log" || die "(3): an aggregate line after a timeout"
  sed 's/^/   /' "$OUT/rx3.log" | grep -v rte_pmd

  step "(4) a receive window far larger than the receiver's mbuf pool, with loss"
  # 127 mbufs against a 16 MB window, and a fault layer dropping 1 in 10^4
  # received segments: after a loss the out-of-order segments would hold
  # every mbuf and the retransmission could never be received (a deadlock
  # seen with the 8191-mbuf default and 16 MB windows). A port short of
  # mbufs marks its frames and the queues keep copies (docs/tcp.md).
  cat > "$OUT/rx4.graph" <<GRAPH
dpdk  net0 devargs=net_memif0,role=server,id=0,socket=$SOCK mbufs=127
eth   eth0 below=net0
arp   arp0 below=eth0
ipv4  ip0  below=eth0,arp0 addr=192.0.2.10/24
fault f0   below=ip0 dir=rx loss=0.0001 seed=3
tcp   tcp0 below=f0
udp   udp0 below=ip0
GRAPH
  "$TTCP" receive --graph "$OUT/rx4.graph" --idle sleep --rcvbuf 16m --stats --timeout 15 > "$OUT/rx4.log" 2>&1 &
  RX=$!
  PIDS+=("$RX")
  wait_for "$OUT/rx4.log" "waiting for the link" "$RX" 30
  transmitter tx4.log --peer 192.0.2.10:5001 --bytes 64m --sndbuf 16m --stats --timeout 15 \
    || { cat "$OUT/tx4.log" >&2; die "(4): the transmitter failed (stalled?)"; }
  wait_rx || { cat "$OUT/rx4.log" >&2; die "(4): the receiver failed"; }
  same_stream tx4.log rx4.log 67108864
  tx=$(grep '^STATS who=transmitter' "$OUT/tx4.log")
  [ "$(key "$tx" retransmits)" -gt 0 ] || die "(4): no retransmission: the fault layer dropped nothing"

  step "(5) 64 KB frames through loss, duplication, reordering and corruption"
  cat > "$OUT/rx5.graph" <<GRAPH
dpdk  net0 devargs=net_memif0,role=server,id=0,socket=$SOCK frame_max=65535
eth   eth0 below=net0
arp   arp0 below=eth0
ipv4  ip0  below=eth0,arp0 addr=192.0.2.10/24
fault f0   below=ip0 dir=rx loss=0.002 duplicate=0.002 reorder=0.005 corrupt=0.002 seed=5
tcp   tcp0 below=f0
udp   udp0 below=ip0
GRAPH
  "$TTCP" receive --graph "$OUT/rx5.graph" --idle sleep --stats --timeout 15 > "$OUT/rx5.log" 2>&1 &
  RX=$!
  PIDS+=("$RX")
  wait_for "$OUT/rx5.log" "waiting for the link" "$RX" 30
  transmitter tx5.log --port-opts frame_max=65535 --peer 192.0.2.10:5001 --bytes 64m --stats --timeout 15 \
    || { cat "$OUT/tx5.log" >&2; die "(5): the transmitter failed"; }
  wait_rx || { cat "$OUT/rx5.log" >&2; die "(5): the receiver failed"; }
  same_stream tx5.log rx5.log 67108864
  large=$(counter net0 tx_large_frames tx5.log)
  [ "$large" -gt 1000 ] || die "(5): tx_large_frames=$large: the transmitter sent no large frames"
  big=$(counter net0 rx_multi_seg rx5.log)
  [ "$big" -gt 1000 ] || die "(5): rx_multi_seg=$big: the receiver got no large frames"
  for f in lost duplicated reordered corrupted; do
    n=$(counter f0 "rx_$f" rx5.log)
    [ "$n" -gt 0 ] || die "(5): the fault layer's rx_$f is 0"
  done
  [ "$(counter tcp0 drop_bad_csum rx5.log)" -gt 0 ] || die "(5): no corrupted segment was caught by the checksum"
  echo "   large frames sent: $large; faults: $(for f in lost duplicated reordered corrupted; do printf '%s=%s ' $f "$(counter f0 rx_$f rx5.log)"; done)"
else
  EXT=$OUT/ext.sock
  CTL=$OUT/filterd.sock
  # (--csum off: in central mode filterd's own TCP talks to the receiver,
  # whose checksums are off.)
  step "filterd (external port: memif server on $EXT; $CHANNELS channels, $MODE mode)"
  "$FD" --port "net_memif0,role=server,id=0,socket=$EXT" --ip 192.0.2.10/24 --control "$CTL" \
    --memif-socket "$OUT/nodes.sock" --channels "$CHANNELS" --mode "$MODE" --csum off --resync-grace 0 > "$OUT/filterd.log" 2>&1 &
  FDPID=$!
  PIDS+=("$FDPID")
  wait_for "$OUT/filterd.log" "ready" "$FDPID" 30
  step "a standalone receiver of 3 connections on filterd's external link"
  "$TTCP" -r --port "net_memif1,role=client,id=0,socket=$EXT" --ip 192.0.2.1/24 --connections 3 --csum off \
    --idle sleep > "$OUT/rx.log" 2>&1 &
  RX=$!
  PIDS+=("$RX")
  wait_for "$OUT/rx.log" "ready" "$RX" 30
  step "3 transmit nodes attached to filterd, at once"
  TX=()
  for i in 1 2 3; do
    "$TTCP" -t --filterd "$CTL" --csum off --peer 192.0.2.1:5001 --bytes 4m --seed "$i" --idle sleep \
      --label "node$i" --stats > "$OUT/tx$i.log" 2>&1 &
    TX+=($!)
    PIDS+=($!)
  done
  for i in 1 2 3; do
    wait "${TX[$((i - 1))]}" || { cat "$OUT/tx$i.log" >&2; die "node $i failed"; }
  done
  wait_rx || { cat "$OUT/rx.log" >&2; die "the receiver failed"; }
  for i in 1 2 3; do
    tx=$(grep '^RESULT role=transmitter' "$OUT/tx$i.log" || true)
    echo "   $tx"
    sha=$(key "$tx" sha256)
    [ -n "$sha" ] && [ "$(key "$tx" label)" = "node$i" ] || die "node $i: RESULT line: $tx"
    rx=$(grep "^RESULT role=receiver conn=.* sha256=$sha" "$OUT/rx.log" || true)
    [ -n "$rx" ] || die "node $i's stream ($sha) did not arrive intact"
    [ "$(key "$rx" bytes)" = 4194304 ] || die "node $i: the receiver got $(key "$rx" bytes) bytes"
    [[ "$(key "$rx" peer)" == 192.0.2.10:* ]] || die "node $i: not from filterd's address: $rx"
  done
  # Three different streams (seeds), from three different ports.
  [ "$(grep -c '^RESULT role=receiver conn=' "$OUT/rx.log")" -eq 3 ] || die "not 3 connection lines"
  [ "$(sed -n 's/.* sha256=\([0-9a-f]*\).*/\1/p' "$OUT/rx.log" | sort -u | wc -l)" -eq 3 ] || die "streams not distinct"
  [ "$(sed -n 's/.* peer=\([0-9.:]*\).*/\1/p' "$OUT/rx.log" | sort -u | wc -l)" -eq 3 ] || die "ports not distinct"
  aggregate rx.log 3 $((3 * 4194304))
  # The nodes' channels were what filterd offered.
  grep -q "attached on $CHANNELS id" "$OUT/filterd.log" || die "filterd attached no node on a $CHANNELS channel"
  if [ "$CHANNELS" = shm ]; then
    # Steer: the nodes' segments cross by reference. Central: their relay
    # frames, copied once into the node's arena.
    what=tx_refs
    [ "$MODE" = steer ] || what=tx_copied
    for i in 1 2 3; do
      n=$(awk -v k=$what '$1 == "net0" && $2 == k { v = $3 } END { print v + 0 }' "$OUT/tx$i.log")
      [ "$n" -gt 0 ] || die "node $i: $what=$n over its shm channel"
    done
  fi
  stop "$FDPID" || die "filterd did not exit cleanly"
fi
