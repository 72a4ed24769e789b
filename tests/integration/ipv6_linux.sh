#!/usr/bin/env bash
# integration.ipv6_linux: a dual-stack xk node (dpdk/af_packet -> eth -> arp +
# nd -> ipv4 + ipv6 -> icmp + icmpv6, udp, tcp) against the Linux kernel over
# a veth pair, IPv6 first (docs/ipv6.md).
#
#   ipv6_linux.sh XK_UDP_ECHO XK_TCP_PERF       (as root; CTest runs it)
#
#   netns xk-v6-<pid>-a: Linux, xk6l<pid> 192.0.2.1/24 and 2001:db8::1/64
#   netns xk-v6-<pid>-b: xk6x<pid>, no address: xk owns it through DPDK
#                        net_af_packet, as 192.0.2.10/24 and 2001:db8::10/64
#
# (a) ping -6 from Linux: echo requests of 56, 1232, 1452 bytes and of 1453,
#     4000 and 8000 (fragmented: xk reassembles them and fragments its
#     replies), every one answered; one ping over IPv4 besides -- one node,
#     both families; Linux's neighbour entry for xk is REACHABLE (ND answered);
# (b) udp_client.py -> xk-udp-echo over IPv6: datagrams of 1..60000 bytes,
#     every byte compared, none lost;
# (c) Linux client -> xk-tcp-perf server over IPv6: the SHA-256 of what xk
#     received equals what Linux sent; (d) xk client -> Linux server, the same;
# then tshark reads tcpdump's capture (Linux side) with the ICMPv6, UDP and
# TCP checksums validated: nothing bad, nothing malformed.
#
# Artifacts stay in ./ipv6_linux.out; namespaces, veths and processes go.
#   XK_INT_V6_BYTES    TCP bytes each way (default 64m; 16m under ASan)
#   XK_INT_V6_UDP      datagrams in (b) (default 2000; 500 under ASan)
set -euo pipefail

TEST_NAME=ipv6_linux
source "$(dirname "$0")/lib.sh"
[ $# -ge 2 ] || die "usage: $0 XK_UDP_ECHO XK_TCP_PERF"
ECHO=$(readlink -f "$1")
PERF=$(readlink -f "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "$ECHO" ] && [ -x "$PERF" ] || die "$ECHO or $PERF is not executable"
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
PY=/usr/bin/python3
for tool in ip ethtool ping tcpdump tshark "$PY"; do
  command -v "$tool" >/dev/null || die "needs $tool"
done
if is_sanitized "$PERF"; then
  BYTES=${XK_INT_V6_BYTES:-16m}
  UDP_COUNT=${XK_INT_V6_UDP:-500}
  echo "$TEST_NAME: NOTE: ASan/UBSan build: $BYTES each way and $UDP_COUNT datagrams"
else
  BYTES=${XK_INT_V6_BYTES:-64m}
  UDP_COUNT=${XK_INT_V6_UDP:-2000}
fi

NSA=xk-v6-$$-a
NSB=xk-v6-$$-b
LNX=xk6l$$
XKIF=xk6x$$
LNX_IP=192.0.2.1
XK_IP=192.0.2.10
LNX_IP6=2001:db8::1
XK_IP6=2001:db8::10
OUT=$PWD/ipv6_linux.out
rm -rf "$OUT"
mkdir -p "$OUT"

install_cleanup

step "topology: $NSA ($LNX $LNX_IP/24 $LNX_IP6/64) <-veth-> $NSB ($XKIF, xk $XK_IP/24 $XK_IP6/64)"
make_veth_topology "$NSA" "$NSB" "$LNX" "$XKIF" "$LNX_IP/24"
# IPv6 on Linux's side only (make_veth_topology turns it off in both): the
# kernel in NSB must not answer for the veth xk owns.
ip netns exec "$NSA" sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=0 \
  "net.ipv6.conf.$LNX.disable_ipv6=0"
ip netns exec "$NSA" ip -6 addr add "$LNX_IP6/64" dev "$LNX" nodad

start_capture "$NSA" "$LNX" "$OUT/linux.pcap"

XK_PORT="net_af_packet0,iface=$XKIF,framecnt=4096"
XK_STACK=(--port "$XK_PORT" --port-opts "mbufs=16383" --ip "$XK_IP/24" --ip "$XK_IP6/64")

step "xk-udp-echo server in $NSB, both families"
ip netns exec "$NSB" "$ECHO" server "${XK_STACK[@]}" --udp-port 7 --verbose > "$OUT/xk-echo.log" 2>&1 &
SERVER=$!
PIDS+=("$SERVER")
wait_for "$OUT/xk-echo.log" "ready" "$SERVER" 60
grep -m1 "built" "$OUT/xk-echo.log" | sed 's/^/   /'

step "(a) ping -6 $XK_IP6"
for size in 56 1232 1452 1453 4000 8000; do
  log="$OUT/ping6-$size.log"
  ip netns exec "$NSA" ping -6 -n -c 20 -i 0.01 -W 2 -s "$size" "$XK_IP6" > "$log" 2>&1 || true
  got=$(sed -n 's/.* \([0-9]*\) received.*/\1/p' "$log")
  echo "   ping -6 -s $size: ${got:-0}/20 replies; $(grep -o 'rtt.*' "$log" || true)"
  [ "${got:-0}" = 20 ] || { cat "$log" >&2; die "ping -6 -s $size: ${got:-0} of 20 replies"; }
done
ip netns exec "$NSA" ping -n -c 5 -i 0.01 -W 2 "$XK_IP" > "$OUT/ping4.log" 2>&1 || true
grep -q " 5 received" "$OUT/ping4.log" || { cat "$OUT/ping4.log" >&2; die "ping over IPv4 failed"; }
echo "   ping (IPv4) $XK_IP: 5/5"
neigh=$(ip netns exec "$NSA" ip -6 neigh show "$XK_IP6" dev "$LNX")
echo "   Linux's neighbour entry: $neigh"
echo "$neigh" | grep -Eq "lladdr .* (REACHABLE|STALE|DELAY|PROBE)" || die "Linux did not resolve $XK_IP6 (ND)"

step "(b) udp_client.py -> xk over IPv6: $UDP_COUNT datagrams of 1..60000 bytes"
ip netns exec "$NSA" "$PY" "$HERE/udp_client.py" --peer "$XK_IP6" --port 7 --count "$UDP_COUNT" \
  --sizes 1..60000 --timeout 1 --retries 3 > "$OUT/udp_client.log" 2>&1 || {
  tail -30 "$OUT/udp_client.log" >&2
  die "udp_client.py over IPv6 failed"
}
echo "   $(tail -1 "$OUT/udp_client.log")"
kill -TERM "$SERVER" 2>/dev/null || true
wait "$SERVER" 2>/dev/null || true

step "(c) Linux client -> xk-tcp-perf server over IPv6: $BYTES"
ip netns exec "$NSB" "$PERF" server "${XK_STACK[@]}" --idle sleep --tcp-port 5002 --count 1 > "$OUT/xk-server.log" 2>&1 &
XSRV=$!
PIDS+=("$XSRV")
wait_for "$OUT/xk-server.log" "ready" "$XSRV" 60
ip netns exec "$NSA" "$PY" "$HERE/tcp_peer.py" client --peer "$XK_IP6" --port 5002 --bytes "$BYTES" --seed 2 \
  > "$OUT/lnx-client.log" 2>&1 || { cat "$OUT/lnx-client.log" >&2; die "the Linux client failed"; }
wait "$XSRV" || { tail -30 "$OUT/xk-server.log" >&2; die "xk-tcp-perf server failed"; }
sent=$(sed -n 's/^RESULT .*sha256=\([0-9a-f]*\).*/\1/p' "$OUT/lnx-client.log")
got=$(sed -n 's/^RESULT role=server .*sha256=\([0-9a-f]*\).*/\1/p' "$OUT/xk-server.log")
echo "   Linux sent $sent"
echo "   xk got     $got ($(grep -o 'gbps=[0-9.]*' "$OUT/xk-server.log"))"
[ -n "$sent" ] && [ "$sent" = "$got" ] || die "(c): what xk received differs from what Linux sent"

step "(d) xk-tcp-perf client -> Linux server over IPv6: $BYTES"
ip netns exec "$NSA" "$PY" "$HERE/tcp_peer.py" server --bind "$LNX_IP6" --port 5001 --ready "$OUT/lnx-server.ready" \
  > "$OUT/lnx-server.log" 2>&1 &
LSRV=$!
PIDS+=("$LSRV")
wait_for "$OUT/lnx-server.ready" "ready" "$LSRV" 20
ip netns exec "$NSB" "$PERF" client "${XK_STACK[@]}" --idle sleep --peer "[$LNX_IP6]:5001" --bytes "$BYTES" --seed 1 \
  > "$OUT/xk-client.log" 2>&1 || { tail -30 "$OUT/xk-client.log" >&2; die "xk-tcp-perf client failed"; }
wait "$LSRV" || { cat "$OUT/lnx-server.log" >&2; die "the Linux server failed"; }
sent=$(sed -n 's/^RESULT role=client .*sha256=\([0-9a-f]*\).*/\1/p' "$OUT/xk-client.log")
got=$(sed -n 's/^RESULT .*sha256=\([0-9a-f]*\).*/\1/p' "$OUT/lnx-server.log")
echo "   xk sent    $sent ($(grep -o 'gbps=[0-9.]*' "$OUT/xk-client.log"))"
echo "   Linux got  $got"
[ -n "$sent" ] && [ "$sent" = "$got" ] || die "(d): what Linux received differs from what xk sent"

step "stop tcpdump"
stop_capture

step "tshark: checksums and malformed frames"
check_capture "$OUT/linux.pcap" "$XK_IP6"
v6=$(tshark -n -r "$OUT/linux.pcap" -Y "ipv6.src == $XK_IP6" 2>/dev/null | wc -l)
echo "   $v6 frames from $XK_IP6"
[ "$v6" -gt 0 ] || die "no IPv6 frame from xk in the capture"
