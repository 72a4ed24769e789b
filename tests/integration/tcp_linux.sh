#!/usr/bin/env bash
# integration.tcp_linux: xk's TCP against the Linux kernel's over a veth pair
# (docs/apps-tcp-perf.md).
#
#   tcp_linux.sh XK_TCP_PERF          (as root; CTest runs it)
#
#   netns xk-tcp-<pid>-a: Linux, xktl<pid> 192.0.2.1/24, offloads off, tcpdump
#   netns xk-tcp-<pid>-b: xktx<pid>, no address: xk owns it through DPDK
#                         net_af_packet, as 192.0.2.10/24
#
# (1) xk client -> Linux server: 256 MiB, the SHA-256 the server computed over
#     what it received equals the one xk computed over what it sent;
# (2) Linux client -> xk server: the same the other way;
# then tshark reads tcpdump's capture with TCP checksum validation on: no bad
# checksum, nothing malformed, no spurious retransmission by xk, and both
# SYNs of each connection carry window scaling, SACK-permitted and timestamps.
# Linux's own retransmissions are reported, not judged: xk's af_packet receive
# ring drops frames when the machine is loaded, and Linux's tail-loss probes
# are spurious by design whenever the ACK was merely late.
#   XK_INT_TCP_BYTES   bytes each way (default 256m; 32m under ASan)
set -euo pipefail
TEST_NAME=tcp_linux
source "$(dirname "$0")/lib.sh"

[ $# -ge 1 ] || die "usage: $0 XK_TCP_PERF"
XK=$(readlink -f "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "$XK" ] || die "$XK is not executable"
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
PY=/usr/bin/python3
for tool in ip ethtool tcpdump tshark "$PY"; do
  command -v "$tool" >/dev/null || die "needs $tool"
done
if is_sanitized "$XK"; then
  BYTES=${XK_INT_TCP_BYTES:-32m}
  echo "$TEST_NAME: NOTE: ASan/UBSan build: $BYTES each way instead of 256m (XK_INT_TCP_BYTES changes it)"
else
  BYTES=${XK_INT_TCP_BYTES:-256m}
fi

NSA=xk-tcp-$$-a
NSB=xk-tcp-$$-b
LNX=xktl$$
XKIF=xktx$$
LNX_IP=192.0.2.1
XK_IP=192.0.2.10
OUT=$PWD/tcp_linux.out
rm -rf "$OUT"
mkdir -p "$OUT"

install_cleanup

step "topology: $NSA ($LNX $LNX_IP/24) <-veth-> $NSB ($XKIF, xk $XK_IP/24)"
make_veth_topology "$NSA" "$NSB" "$LNX" "$XKIF" "$LNX_IP/24"
ip netns exec "$NSA" sysctl -a 2>/dev/null | grep -E "net.ipv4.tcp_(window_scaling|sack|timestamps) " > "$OUT/linux-tcp-sysctl.txt" || true

step "tcpdump on $LNX (Linux side)"
# A 256 MiB capture buffer: at a gigabit, writing the file can fall behind.
start_capture "$NSA" "$LNX" "$OUT/linux.pcap"

# The af_packet ring must hold a burst: 4096 frames of 2 KiB.
XK_PORT="net_af_packet0,iface=$XKIF,framecnt=4096"
XK_STACK=(--port "$XK_PORT" --port-opts "mbufs=16383" --ip "$XK_IP/24" --idle sleep)

step "(1) xk client -> Linux server: $BYTES"
ip netns exec "$NSA" "$PY" "$HERE/tcp_peer.py" server --bind "$LNX_IP" --port 5001 --ready "$OUT/lnx-server.ready" \
  > "$OUT/lnx-server.log" 2>&1 &
LSRV=$!
PIDS+=("$LSRV")
wait_for "$OUT/lnx-server.ready" "ready" "$LSRV" 20
ip netns exec "$NSB" "$XK" client "${XK_STACK[@]}" --peer "$LNX_IP:5001" --bytes "$BYTES" --seed 1 \
  > "$OUT/xk-client.log" 2>&1 || { tail -30 "$OUT/xk-client.log" >&2; die "xk-tcp-perf client failed"; }
wait "$LSRV" || { cat "$OUT/lnx-server.log" >&2; die "the Linux server failed"; }
sent=$(sed -n 's/^RESULT role=client .*sha256=\([0-9a-f]*\).*/\1/p' "$OUT/xk-client.log")
got=$(sed -n 's/^RESULT .*sha256=\([0-9a-f]*\).*/\1/p' "$OUT/lnx-server.log")
echo "   xk sent    $sent ($(grep -o 'gbps=[0-9.]*' "$OUT/xk-client.log"))"
echo "   Linux got  $got ($(grep -o 'bytes=[0-9]*' "$OUT/lnx-server.log"))"
[ -n "$sent" ] && [ "$sent" = "$got" ] || die "(1): the SHA-256 of what Linux received differs from what xk sent"
grep '^STATS' "$OUT/xk-client.log" | sed 's/^/   /'

step "(2) Linux client -> xk server: $BYTES"
ip netns exec "$NSB" "$XK" server "${XK_STACK[@]}" --tcp-port 5002 --count 1 > "$OUT/xk-server.log" 2>&1 &
XSRV=$!
PIDS+=("$XSRV")
wait_for "$OUT/xk-server.log" "ready" "$XSRV" 60
ip netns exec "$NSA" "$PY" "$HERE/tcp_peer.py" client --peer "$XK_IP" --port 5002 --bytes "$BYTES" --seed 2 \
  > "$OUT/lnx-client.log" 2>&1 || { cat "$OUT/lnx-client.log" >&2; die "the Linux client failed"; }
wait "$XSRV" || { tail -30 "$OUT/xk-server.log" >&2; die "xk-tcp-perf server failed"; }
sent=$(sed -n 's/^RESULT .*sha256=\([0-9a-f]*\).*/\1/p' "$OUT/lnx-client.log")
got=$(sed -n 's/^RESULT role=server .*sha256=\([0-9a-f]*\).*/\1/p' "$OUT/xk-server.log")
echo "   Linux sent $sent"
echo "   xk got     $got ($(grep -o 'gbps=[0-9.]*' "$OUT/xk-server.log"))"
[ -n "$sent" ] && [ "$sent" = "$got" ] || die "(2): the SHA-256 of what xk received differs from what Linux sent"
grep '^STATS' "$OUT/xk-server.log" | sed 's/^/   /'

step "stop tcpdump"
stop_capture
tail -3 "$OUT/linux.pcap.log" | sed 's/^/   /'

step "tshark: checksums, malformed frames, retransmissions, negotiated options"
check_capture "$OUT/linux.pcap" "$XK_IP"
# tshark's retransmission analysis needs every frame: when tcpdump could not
# keep up, xk's own counters say whether xk retransmitted on this clean link.
if [ "$CAP_DROPPED" -ne 0 ]; then
  xk_rexmit=$(sed -n 's/^STATS .*retransmits=\([0-9]*\).*/\1/p' "$OUT/xk-client.log" "$OUT/xk-server.log" | awk '{ s += $1 } END { print s + 0 }')
  echo "   NOTE: tcpdump dropped $CAP_DROPPED frames, so tshark's retransmission analysis is incomplete;" \
       "xk's own count of retransmissions: $xk_rexmit"
  [ "$xk_rexmit" -eq 0 ] || die "xk retransmitted $xk_rexmit segments on a clean link"
fi
# Every SYN and SYN-ACK carries window scale, SACK-permitted and timestamps.
echo "   $CAP_SYNS SYN/SYN-ACK segments, $CAP_SYNS_FULL with window scale + SACK-permitted + timestamps"
[ "$CAP_SYNS" -ge 4 ] || die "expected at least 4 SYN segments (2 connections), saw $CAP_SYNS"
[ "$CAP_SYNS_FULL" -eq "$CAP_SYNS" ] || die "a SYN lacks window scale, SACK-permitted or timestamps (see $OUT/linux.pcap.fields)"
