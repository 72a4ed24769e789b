#!/usr/bin/env bash
# integration.udp_memif: two whole xk stacks in two processes, joined by
# DPDK's net_memif (shared memory over a Unix socket): the same UDP echo test
# as udp_linux.sh, with xk on both ends (docs/apps-udp-echo.md).
#
#   udp_memif.sh XK_UDP_ECHO
#
#   xk-udp-echo server: net_memif0,role=server  192.0.2.10/24, capture -> server.pcap
#   xk-udp-echo client: net_memif1,role=client  192.0.2.11/24, capture -> client.pcap
#
# The client sends 10,000 datagrams of 1..60000 bytes (fragmented into up to
# 41 frames each), one at a time, and compares every echoed byte: 0
# mismatches, 0 lost. Both captures are then read by tshark with IP and UDP
# checksum validation on: no bad checksum, nothing malformed. Runs anywhere
# (no root, no namespace); everything it starts is stopped on exit.
#   XK_INT_UDP_COUNT   datagrams (default 10000; 2000 under ASan)
set -euo pipefail
TEST_NAME=udp_memif
source "$(dirname "$0")/lib.sh"

[ $# -ge 1 ] || die "usage: $0 XK_UDP_ECHO"
XK=$(readlink -f "$1")
[ -x "$XK" ] || die "$XK is not executable"
command -v tshark >/dev/null || die "needs tshark"
if is_sanitized "$XK"; then
  COUNT=${XK_INT_UDP_COUNT:-2000}
  echo "$TEST_NAME: NOTE: ASan/UBSan build: $COUNT datagrams instead of 10000 (XK_INT_UDP_COUNT changes it)"
else
  COUNT=${XK_INT_UDP_COUNT:-10000}
fi

OUT=$PWD/udp_memif.out
rm -rf "$OUT"
mkdir -p "$OUT"
SOCK=$OUT/memif.sock  # abstract (socket-abstract=yes): never a file

install_cleanup

step "xk-udp-echo server on net_memif0 (role=server), 192.0.2.10/24"
"$XK" server --port "net_memif0,role=server,id=0,socket=$SOCK" --ip 192.0.2.10/24 --udp-port 7 \
  --capture "$OUT/server.pcap" --verbose > "$OUT/server.log" 2>&1 &
SERVER=$!
PIDS+=("$SERVER")
# The server waits for its link (the client), so "ready" comes later. memif's
# socket is in the abstract namespace by default: no file to wait for.
wait_for "$OUT/server.log" "waiting for the link" "$SERVER" 30

step "xk-udp-echo client on net_memif1 (role=client), 192.0.2.11/24: $COUNT datagrams of 1..60000 bytes"
"$XK" client --port "net_memif1,role=client,id=0,socket=$SOCK" --ip 192.0.2.11/24 --peer 192.0.2.10:7 \
  --count "$COUNT" --sizes 1..60000 --timeout 1 --retries 3 \
  --capture "$OUT/client.pcap" --verbose > "$OUT/client.log" 2>&1 || {
  tail -60 "$OUT/client.log" >&2
  die "xk-udp-echo client failed (log: $OUT/client.log)"
}
echo "   $(grep 'client summary' "$OUT/client.log")"
grep -q "re-sent 0," "$OUT/client.log" || die "the client had to re-send on a lossless link"

step "stop the server"
stop "$SERVER" || { cat "$OUT/server.log" >&2; die "the server exited with an error"; }
grep -q "stopped by SIGTERM" "$OUT/server.log" || die "the server did not report a clean stop"
echo "   $(grep 'server:.*received' "$OUT/server.log")"

step "tshark: checksums and malformed frames"
check_pcap "$OUT/server.pcap"
check_pcap "$OUT/client.pcap"
