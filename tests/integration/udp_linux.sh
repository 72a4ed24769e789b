#!/usr/bin/env bash
# integration.udp_linux: the whole xk stack (dpdk/af_packet -> eth -> arp ->
# ipv4 -> icmp, udp) against the Linux kernel's stack over a veth pair
# (docs/apps-udp-echo.md).
#
#   udp_linux.sh XK_UDP_ECHO [TESTS_DIR]      (as root; CTest runs it)
#
#   netns xk-int-<pid>-a: Linux host, xklnx<pid> 192.0.2.1/24, offloads off
#   netns xk-int-<pid>-b: xkveth<pid>, no address: xk owns it through DPDK
#                         net_af_packet, as 192.0.2.10/24
#
# (a) ping from Linux: 100 echo requests each of 56, 1472, 1473, 4000 and
#     8000 bytes (the last three fragmented), every one answered;
# (b) udp_client.py from Linux: 10,000 datagrams of 1..60000 bytes to
#     `xk-udp-echo server`, every byte compared, 0 mismatches, 0 lost;
# (c) `xk-udp-echo client` against udp_echo_server.py: 2000 datagrams of
#     1..60000 bytes, 0 mismatches, 0 lost;
# then tshark reads tcpdump's capture (Linux side) and xk's own captures
# with IP/UDP/ICMP checksum validation on: no bad checksum, nothing malformed.
#
# Artifacts (pcaps, logs) stay in ./udp_linux.out under CTest's working
# directory. Everything it creates (namespaces, veths, processes) is removed on
# exit. Environment:
#   XK_INT_UDP_COUNT     datagrams in (b) (default 10000; 2000 under ASan)
#   XK_INT_XK_COUNT      datagrams in (c) (default 2000; 500 under ASan)
#   XK_INT_PING_COUNT    pings per size in (a) (default 100)
set -euo pipefail

TEST_NAME=udp_linux
source "$(dirname "$0")/lib.sh"
[ $# -ge 1 ] || die "usage: $0 XK_UDP_ECHO [af_packet|pcap]"
XK=$(readlink -f "$1")
PMD=${2:-af_packet}
case "$PMD" in af_packet|pcap) ;; *) die "unknown PMD '$PMD': af_packet or pcap" ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "$XK" ] || die "$XK is not executable"
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
PY=/usr/bin/python3
for tool in ip ethtool ping tcpdump tshark "$PY"; do
  command -v "$tool" >/dev/null || die "needs $tool (packages: iproute2 ethtool iputils-ping tcpdump tshark python3)"
done

# A sanitizer build is several times slower: fewer datagrams, and it says so.
if is_sanitized "$XK"; then
  UDP_COUNT=${XK_INT_UDP_COUNT:-2000}
  XK_COUNT=${XK_INT_XK_COUNT:-500}
  echo "udp_linux: NOTE: $XK is an ASan/UBSan build: (b) sends $UDP_COUNT datagrams and (c) $XK_COUNT" \
       "instead of 10000 and 2000 (set XK_INT_UDP_COUNT / XK_INT_XK_COUNT to change)"
else
  UDP_COUNT=${XK_INT_UDP_COUNT:-10000}
  XK_COUNT=${XK_INT_XK_COUNT:-2000}
fi
PING_COUNT=${XK_INT_PING_COUNT:-100}
PING_SIZES="56 1472 1473 4000 8000"

NSA=xk-int-$$-a
NSB=xk-int-$$-b
LNX=xklnx$$
XKIF=xkveth$$
LNX_IP=192.0.2.1
XK_IP=192.0.2.10
OUT=$PWD/udp_linux.$PMD.out
rm -rf "$OUT"
mkdir -p "$OUT"

install_cleanup

step "topology: $NSA ($LNX $LNX_IP/24) <-veth-> $NSB ($XKIF, xk $XK_IP/24)"
make_veth_topology "$NSA" "$NSB" "$LNX" "$XKIF" "$LNX_IP/24"

step "tcpdump on $LNX (Linux side)"
ip netns exec "$NSA" tcpdump -i "$LNX" -s 0 -B 65536 -U -n -w "$OUT/linux.pcap" > "$OUT/tcpdump.log" 2>&1 &
TCPDUMP=$!
PIDS+=("$TCPDUMP")
wait_for "$OUT/tcpdump.log" "listening on" "$TCPDUMP" 20

case "$PMD" in
  af_packet)
    # The form the apps' --help gives, default devargs: DPDK's af_packet PMD
    # joins a PACKET_FANOUT group with PACKET_FANOUT_FLAG_DEFRAG, so the
    # kernel reassembles IPv4 fragments before xk sees them (frames up to
    # 60 KB); the driver sizes the ring and the mbufs for them.
    XK_PORT="net_af_packet0,iface=$XKIF"
    XK_PORT_OPTS=""
    ;;
  pcap)
    # libpcap on the veth: no fanout, no defrag; xk reassembles what Linux
    # fragmented.
    XK_PORT="net_pcap0,iface=$XKIF"
    XK_PORT_OPTS=""
    ;;
esac
XK_PORT=${XK_INT_DEVARGS:-$XK_PORT}
XK_PORT=${XK_PORT//@IF@/$XKIF}
XK_PORT_OPTS=${XK_INT_PORT_OPTS:-$XK_PORT_OPTS}
echo "   xk port: $XK_PORT $XK_PORT_OPTS"

step "xk-udp-echo server in $NSB"
ip netns exec "$NSB" "$XK" server --port "$XK_PORT" --port-opts "$XK_PORT_OPTS" --ip "$XK_IP/24" --udp-port 7 \
  --capture "$OUT/xk-server.pcap" --verbose > "$OUT/xk-server.log" 2>&1 &
SERVER=$!
PIDS+=("$SERVER")
wait_for "$OUT/xk-server.log" "ready" "$SERVER" 60

step "(a) ping $XK_IP: $PING_COUNT requests each of $PING_SIZES bytes"
for size in $PING_SIZES; do
  log="$OUT/ping-$size.log"
  ip netns exec "$NSA" ping -n -c "$PING_COUNT" -i 0.01 -W 2 -s "$size" "$XK_IP" > "$log" 2>&1 || true
  got=$(sed -n 's/.* \([0-9]*\) received.*/\1/p' "$log")
  echo "   ping -s $size: ${got:-0}/$PING_COUNT replies; $(grep -o 'rtt.*' "$log" || true)"
  [ "${got:-0}" = "$PING_COUNT" ] || { cat "$log" >&2; die "ping -s $size: ${got:-0} of $PING_COUNT replies"; }
done

step "(b) udp_client.py -> xk server: $UDP_COUNT datagrams of 1..60000 bytes"
ip netns exec "$NSA" "$PY" "$HERE/udp_client.py" --peer "$XK_IP" --port 7 --count "$UDP_COUNT" \
  --sizes 1..60000 --timeout 1 --retries 3 > "$OUT/udp_client.log" 2>&1 || {
  tail -30 "$OUT/udp_client.log" >&2
  die "udp_client.py failed (log: $OUT/udp_client.log)"
}
echo "   $(tail -1 "$OUT/udp_client.log")"

step "stop the xk server"
stop "$SERVER" || { cat "$OUT/xk-server.log" >&2; die "xk-udp-echo server exited with an error"; }
grep -q "stopped by SIGTERM" "$OUT/xk-server.log" || die "the server did not report a clean stop"
echo "   $(grep 'server:.*received' "$OUT/xk-server.log")"

step "(c) xk-udp-echo client -> udp_echo_server.py: $XK_COUNT datagrams of 1..60000 bytes"
ip netns exec "$NSA" "$PY" "$HERE/udp_echo_server.py" --bind "$LNX_IP" --port 7 \
  --ready "$OUT/echo-server.ready" > "$OUT/udp_echo_server.log" 2>&1 &
ECHO=$!
PIDS+=("$ECHO")
wait_for "$OUT/echo-server.ready" "ready" "$ECHO" 20
ip netns exec "$NSB" "$XK" client --port "$XK_PORT" --port-opts "$XK_PORT_OPTS" --ip "$XK_IP/24" --peer "$LNX_IP:7" \
  --count "$XK_COUNT" --sizes 1..60000 --timeout 1 --retries 3 \
  --capture "$OUT/xk-client.pcap" --verbose > "$OUT/xk-client.log" 2>&1 || {
  tail -60 "$OUT/xk-client.log" >&2
  die "xk-udp-echo client failed (log: $OUT/xk-client.log)"
}
echo "   $(grep 'client summary' "$OUT/xk-client.log")"
stop "$ECHO" || die "udp_echo_server.py exited with an error"
echo "   $(cat "$OUT/udp_echo_server.log")"

step "stop tcpdump"
sleep 0.5
kill -INT "$TCPDUMP" 2>/dev/null || true
stop "$TCPDUMP" || true
tail -3 "$OUT/tcpdump.log" | sed 's/^/   /'

step "tshark: checksums and malformed frames"
dropped=$(sed -n 's/^\([0-9]*\) packets dropped by kernel.*/\1/p' "$OUT/tcpdump.log")
if [ "${dropped:-0}" -eq 0 ]; then
  check_pcap "$OUT/linux.pcap"
else
  check_pcap "$OUT/linux.pcap" incomplete
fi
check_pcap "$OUT/xk-server.pcap"
check_pcap "$OUT/xk-client.pcap"

step "counters"
grep -E "^\s*(net0|eth0|arp0|ip0|icmp0|udp0)\s+(rx_|tx_|drop_)\S*\s+[1-9]" "$OUT/xk-server.log" | sed 's/^/   server /' || true
