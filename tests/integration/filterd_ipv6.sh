#!/usr/bin/env bash
# integration.filterd_ipv6: filterd between a Linux host and two xk nodes
# over IPv6 (docs/filterd.md, "IPv6").
#
#   filterd_ipv6.sh FILTERD XK_TCP_PERF   (as root; CTest runs it)
#
#   netns xk-f6-<pid>-a: Linux, 192.0.2.1/24 and 2001:db8::1/64
#   netns xk-f6-<pid>-b: filterd (DPDK net_af_packet) sharing 192.0.2.10/24
#                        and 2001:db8::10/64 with two xk-tcp-perf nodes
#                        (--filterd): their graphs get IPv6 from its HELLO
#
# (a) ping -6 of the shared address: filterd's own stack answers, after
#     Linux resolved it by Neighbor Discovery;
# (b) Linux -> a node listening on [::]:5002 over IPv6, sha256 of the stream;
# (c) the other node -> a Linux server on [2001:db8::1]:5001, sha256; the
#     node found Linux's address through filterd's proxy ND;
# (d) a port nobody has over IPv6: Linux's connect is refused (filterd's RST).
# Every frame on Linux's link has good checksums and none is over the MTU.
#   XK_INT_F6_BYTES   bytes each way (default 16m; 4m under ASan)
set -euo pipefail
TEST_NAME=filterd_ipv6
source "$(dirname "$0")/lib.sh"

[ $# -ge 2 ] || die "usage: $0 FILTERD XK_TCP_PERF"
FD=$(readlink -f "$1")
XK=$(readlink -f "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "$FD" ] && [ -x "$XK" ] || die "$FD or $XK is not executable"
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
PY=/usr/bin/python3
for tool in ip ethtool ping tcpdump tshark "$PY"; do command -v "$tool" >/dev/null || die "needs $tool"; done
if is_sanitized "$XK"; then BYTES=${XK_INT_F6_BYTES:-4m}; else BYTES=${XK_INT_F6_BYTES:-16m}; fi
LNX_IP6=2001:db8::1
SHARED6=2001:db8::10

filterd_veth_setup f6  # NSA NSB LNX XKIF LNX_IP SHARED OUT CTL MEMIF; capture on
# IPv6 on Linux's side only (the topology turns it off in both): the kernel
# in NSB must not hold the link-local address of the port filterd owns.
ip netns exec "$NSA" sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=0 \
  "net.ipv6.conf.$LNX.disable_ipv6=0"
ip netns exec "$NSA" ip -6 addr add "$LNX_IP6/64" dev "$LNX" nodad

step "filterd sharing $SHARED and $SHARED6"
start_filterd "$FD" --ip "$SHARED6/64"

node() {  # name args...: NODE_PID (see filterd_linux.sh)
  local name=$1
  shift
  ip netns exec "$NSB" "$XK" "$@" --filterd "$CTL" --idle sleep > "$OUT/$name.log" 2>&1 &
  NODE_PID=$!
  PIDS+=("$NODE_PID")
}

step "(a) ping -6 $SHARED6 (filterd's own)"
ip netns exec "$NSA" ping -6 -n -c 10 -i 0.05 -W 2 "$SHARED6" > "$OUT/ping6.log" 2>&1 || true
got=$(sed -n 's/.* \([0-9]*\) received.*/\1/p' "$OUT/ping6.log")
echo "   ${got:-0}/10 replies; $(ip netns exec "$NSA" ip -6 neigh show "$SHARED6" dev "$LNX")"
[ "${got:-0}" = 10 ] || { cat "$OUT/ping6.log" >&2; die "(a): ping -6 got ${got:-0} of 10 replies"; }

step "(b) Linux -> a node on [::]:5002 over IPv6: $BYTES"
node server server --tcp-port 5002 --count 1
SRV=$NODE_PID
wait_for "$OUT/server.log" "ready" "$SRV" 30
grep -m1 "built" "$OUT/server.log" | sed 's/^/   /' || true
ip netns exec "$NSA" "$PY" "$HERE/tcp_peer.py" client --peer "$SHARED6" --port 5002 --bytes "$BYTES" --seed 2 \
  > "$OUT/lnx-client.log" 2>&1 || { cat "$OUT/lnx-client.log" >&2; die "(b): the Linux client failed"; }
wait "$SRV" || { tail -30 "$OUT/server.log" >&2; die "(b): the node's server failed"; }
sent=$(sed -n 's/^RESULT .*sha256=\([0-9a-f]*\).*/\1/p' "$OUT/lnx-client.log")
got=$(sed -n 's/^RESULT role=server .*sha256=\([0-9a-f]*\).*/\1/p' "$OUT/server.log")
echo "   Linux sent $sent"
echo "   node got   $got"
[ -n "$sent" ] && [ "$sent" = "$got" ] || die "(b): what the node received differs from what Linux sent"

step "(c) a node -> Linux [$LNX_IP6]:5001 over IPv6: $BYTES"
ip netns exec "$NSA" "$PY" "$HERE/tcp_peer.py" server --bind "$LNX_IP6" --port 5001 --ready "$OUT/lnx-server.ready" \
  > "$OUT/lnx-server.log" 2>&1 &
LSRV=$!
PIDS+=("$LSRV")
wait_for "$OUT/lnx-server.ready" "ready" "$LSRV" 20
node client client --peer "[$LNX_IP6]:5001" --bytes "$BYTES" --seed 1
CLI=$NODE_PID
wait "$CLI" || { tail -30 "$OUT/client.log" >&2; die "(c): the node's client failed"; }
wait "$LSRV" || { cat "$OUT/lnx-server.log" >&2; die "(c): the Linux server failed"; }
sent=$(sed -n 's/^RESULT role=client .*sha256=\([0-9a-f]*\).*/\1/p' "$OUT/client.log")
got=$(sed -n 's/^RESULT .*sha256=\([0-9a-f]*\).*/\1/p' "$OUT/lnx-server.log")
echo "   node sent  $sent"
echo "   Linux got  $got (from $(sed -n 's/^RESULT .*peer=\(.*\)$/\1/p' "$OUT/lnx-server.log"))"
[ -n "$sent" ] && [ "$sent" = "$got" ] || die "(c): what Linux received differs from what the node sent"

step "(d) a port nobody has over IPv6: refused"
if ip netns exec "$NSA" timeout 10 "$PY" -c "
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.settimeout(8)
try:
    s.connect(('$SHARED6', 6666))
except ConnectionRefusedError:
    print('refused'); sys.exit(0)
sys.exit(1)
" > "$OUT/refused.log" 2>&1; then
  echo "   connect to [$SHARED6]:6666 refused"
else
  cat "$OUT/refused.log" >&2
  die "(d): no RST for a port nobody listens on"
fi

step "capture on Linux's side"
stop_capture
check_capture "$OUT/linux.pcap" "$SHARED6"
v6=$(tshark -n -r "$OUT/linux.pcap" -Y "ipv6.src == $SHARED6 && tcp" 2>/dev/null | wc -l)
echo "   $v6 TCP frames from $SHARED6"
[ "$v6" -gt 0 ] || die "no IPv6 TCP frame from the shared address in the capture"

step "stop"
stop "$FDPID" || die "filterd did not exit cleanly"
grep -E "proxy_nd|node_nd_ignored|rx_to_node|tx_from_nodes|learned_flows|default_rst|local_nd|egress_denied|dad_" \
  "$OUT/filterd.log" | sed 's/^/   /'
if grep -q "egress_denied" "$OUT/filterd.log"; then die "filterd denied frames of honest nodes"; fi
proxied=$(sed -n 's/^ *st0 *proxy_nd *\([0-9]*\)$/\1/p' "$OUT/filterd.log")
[ "${proxied:-0}" -gt 0 ] || die "no node neighbour solicitation was answered by filterd"
if grep -q "dad_duplicate" "$OUT/filterd.log"; then die "filterd's duplicate check failed on the external link"; fi
