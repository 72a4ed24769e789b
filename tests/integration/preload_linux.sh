#!/usr/bin/env bash
# integration.preload_linux: unmodified Debian programs under xkrun (their
# AF_INET sockets on an xk stack, docs/preload.md) against the same programs
# on Linux, over a veth pair (DPDK net_af_packet).
#
#   preload_linux.sh XKRUN      (as root; CTest runs it)
#
#   netns xk-pre-<pid>-a: Linux, xkpl<pid> 192.0.2.1/24
#   netns xk-pre-<pid>-b: xkpx<pid>, no address: xk owns it as 192.0.2.10/24
#
# (a) iperf3 under xkrun as client (to Linux's server; -R; -P 4) and as
#     server (Linux's client; -R; -P 4), 2 s each: each run ends cleanly on
#     both sides and the receiver counted at most what the sender sent and
#     at least half (iperf3 stops counting at its TEST_END message, with
#     Linux on both ends too: docs/preload.md);
# (b) curl under xkrun fetches a file from python3 -m http.server on Linux,
#     and Linux's curl fetches it from nginx under xkrun (epoll, accept4,
#     sendfile, writev): sha256 equal;
# (c) socat under xkrun sends a file to socat on Linux (cmp), and a python3
#     program under xkrun echoes TCP and UDP through socat on Linux (in the
#     hybrid mode, xkrun's default, and in the service mode);
# (d) sockperf ping-pong and throughput (TCP and UDP) and NPtcp under xkrun
#     against their Linux servers: they finish and report, and every
#     message sockperf's throughput run says it sent reached Linux's interface.
#
# Artifacts (logs) stay in ./preload_linux.out. Everything it creates
# (namespaces, veths, processes) is removed on exit. XK_INT_PRELOAD_MB sets
# the size of each transfer (default 64; 16 under ASan).
set -euo pipefail

TEST_NAME=preload_linux
source "$(dirname "$0")/lib.sh"
[ $# -ge 1 ] || die "usage: $0 XKRUN"
XKRUN=$(readlink -f "$1")
[ -x "$XKRUN" ] || die "$XKRUN is not executable"
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
PY=/usr/bin/python3
for tool in ip ethtool iperf3 curl nginx socat sockperf NPtcp sha256sum "$PY"; do
  command -v "$tool" > /dev/null || die "needs $tool (packages: iperf3 curl nginx-light socat sockperf netpipe-tcp python3)"
done

LIB=$(dirname "$XKRUN")/libxk_preload.so
MB=${XK_INT_PRELOAD_MB:-64}
FETCH=(curl -sS --fail -o)
if is_sanitized "$LIB"; then
  MB=${XK_INT_PRELOAD_MB:-16}
  # The programs are Debian's: their own leaks are not ours to report.
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  # Debian's curl hangs in setlocale() at start with the ASan runtime
  # preloaded, xk or not (LD_PRELOAD=libasan.so curl -V never returns):
  # the client under xkrun is python3's urllib there.
  FETCH=("$PY" -c 'import sys, urllib.request; open(sys.argv[1], "wb").write(urllib.request.urlopen(sys.argv[2]).read())')
  echo "preload_linux: NOTE: an ASan/UBSan build: $MB MiB per transfer; python3's urllib instead of curl under xkrun"
fi

NSA=xk-pre-$$-a
NSB=xk-pre-$$-b
LNX=xkpl$$
XKIF=xkpx$$
LNX_IP=192.0.2.1
XK_IP=192.0.2.10
OUT=$PWD/preload_linux.out
rm -rf "$OUT"
mkdir -p "$OUT/www" "$OUT/nginx"
install_cleanup

step "topology: $NSA ($LNX $LNX_IP/24) <-veth-> $NSB ($XKIF, xk $XK_IP/24)"
make_veth_topology "$NSA" "$NSB" "$LNX" "$XKIF" "$LNX_IP/24"
# A command on Linux's side; one under xkrun with the apps' flags (a fresh
# stack per program). Background ones run as (exec ...) & so that $! is the
# program itself.
LNXC=(ip netns exec "$NSA")
XKC=(ip netns exec "$NSB" "$XKRUN" --port "net_af_packet0,iface=$XKIF" --ip "$XK_IP/24" --)
lnx() { "${LNXC[@]}" "$@"; }
xk() { "${XKC[@]}" "$@"; }

# until_up CMD...: retries CMD (a Linux client of a server under xkrun that
# is still starting) for up to 20 s.
until_up() {
  local i
  for ((i = 0; i < 100; i++)); do
    "$@" && return 0
    sleep 0.2
  done
  return 1
}

# ---- (a) iperf3 ---------------------------------------------------------------------
# iperf_check NAME CLIENT_JSON SERVER_JSON REVERSE: the sender sent, the
# receiver counted no more and at least half.
iperf_check() {
  "$PY" - "$@" <<'EOF'
import json, sys
name, cj, sj, reverse = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
c, s = json.load(open(cj)), json.load(open(sj))
for who, j in (("client", c), ("server", s)):
    if "error" in j:
        sys.exit(f"{name}: the {who} failed: {j['error']}")
sender, receiver = (s, c) if reverse else (c, s)
sent = sender["end"]["sum_sent"]["bytes"]
got = receiver["end"]["sum_received"]["bytes"]
print(f"{name}: sent {sent} B, the receiver counted {got} B")
if sent == 0:
    sys.exit(f"{name}: nothing sent")
if not (sent // 2 <= got <= sent):
    sys.exit(f"{name}: the receiver counted {got} of {sent} bytes")
EOF
}

run_iperf() {
  local name=$1 where=$2
  shift 2
  local port=$((5300 + RANDOM % 500))
  if [ "$where" = linux-server ]; then
    (exec "${LNXC[@]}" iperf3 -s -1 -J -p "$port") > "$OUT/$name.server.json" 2> "$OUT/$name.server.err" &
    local spid=$!
    PIDS+=("$spid")
    sleep 0.5
    xk iperf3 -c "$LNX_IP" -p "$port" -t 2 -J "$@" > "$OUT/$name.client.json" 2> "$OUT/$name.client.err" \
      || { cat "$OUT/$name.client.err" >&2; die "$name: iperf3 under xkrun failed"; }
  else
    # iperf3's server opens an IPv6 socket unless told -4 (AF_INET6 stays with the kernel).
    (exec "${XKC[@]}" iperf3 -s -1 -4 -J -p "$port") > "$OUT/$name.server.json" 2> "$OUT/$name.server.err" &
    local spid=$!
    PIDS+=("$spid")
    until_up lnx iperf3 -c "$XK_IP" -p "$port" -t 2 -J "$@" > "$OUT/$name.client.json" 2> "$OUT/$name.client.err" \
      || { cat "$OUT/$name.client.err" >&2; die "$name: Linux's iperf3 against the xkrun server failed"; }
  fi
  wait "$spid" || die "$name: the iperf3 server exited with $?"
  local reverse=0
  for a in "$@"; do [ "$a" = -R ] && reverse=1; done
  iperf_check "$name" "$OUT/$name.client.json" "$OUT/$name.server.json" "$reverse"
}

step "(a) iperf3 under xkrun: client, reverse, 4 streams; server, reverse, 4 streams"
run_iperf iperf-xk-client linux-server
run_iperf iperf-xk-client-R linux-server -R
run_iperf iperf-xk-client-P4 linux-server -P 4
run_iperf iperf-xk-server xk-server
run_iperf iperf-xk-server-R xk-server -R
run_iperf iperf-xk-server-P4 xk-server -P 4

# ---- (b) curl and nginx -------------------------------------------------------------------
head -c "$((MB * 1048576))" /dev/urandom > "$OUT/www/blob"
WANT=$(sha256sum < "$OUT/www/blob" | cut -d' ' -f1)

step "(b) $(basename "${FETCH[0]}") under xkrun <- python3 -m http.server on Linux ($MB MiB)"
(cd "$OUT/www" && exec ip netns exec "$NSA" "$PY" -m http.server 8000 --bind "$LNX_IP") > "$OUT/http.log" 2>&1 &
PIDS+=($!)
until_up lnx curl -s -o /dev/null "http://$LNX_IP:8000/" || die "http.server did not start"
xk "${FETCH[@]}" "$OUT/curl.got" "http://$LNX_IP:8000/blob" || die "${FETCH[0]} under xkrun failed"
[ "$(sha256sum < "$OUT/curl.got" | cut -d' ' -f1)" = "$WANT" ] || die "curl under xkrun: the file differs"
echo "$(basename "${FETCH[0]}") under xkrun: sha256 equal"

step "(b) Linux curl <- nginx under xkrun ($MB MiB; sendfile, epoll, accept4)"
cat > "$OUT/nginx/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $OUT/nginx/nginx.pid;
error_log stderr info;
events { worker_connections 64; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  client_body_temp_path $OUT/nginx/body;
  proxy_temp_path $OUT/nginx/proxy;
  fastcgi_temp_path $OUT/nginx/fastcgi;
  uwsgi_temp_path $OUT/nginx/uwsgi;
  scgi_temp_path $OUT/nginx/scgi;
  server {
    listen 8080;
    root $OUT/www;
  }
}
EOF
(exec "${XKC[@]}" nginx -c "$OUT/nginx/nginx.conf" -p "$OUT/nginx") > "$OUT/nginx.log" 2>&1 &
NGINX=$!
PIDS+=("$NGINX")
until_up lnx curl -s -o /dev/null "http://$XK_IP:8080/" || { cat "$OUT/nginx.log" >&2; die "nginx under xkrun did not answer"; }
for i in 1 2; do
  lnx curl -sS --fail -o "$OUT/nginx.got" "http://$XK_IP:8080/blob" || die "Linux curl from nginx failed"
  [ "$(sha256sum < "$OUT/nginx.got" | cut -d' ' -f1)" = "$WANT" ] || die "nginx under xkrun: the file differs"
done
[ "$(lnx curl -s -o /dev/null -w '%{http_code}' "http://$XK_IP:8080/nothing")" = 404 ] || die "nginx: no 404"
stop "$NGINX" || true
echo "nginx under xkrun: sha256 equal (twice), 404 for a missing file"

# ---- (c) socat and python3 ---------------------------------------------------------------
step "(c) socat under xkrun -> socat on Linux; python3 under xkrun, TCP and UDP echo"
head -c 8M /dev/urandom > "$OUT/socat.in"
(exec "${LNXC[@]}" socat -u TCP-LISTEN:9000,reuseaddr "OPEN:$OUT/socat.got,creat,trunc") > "$OUT/socat-server.log" 2>&1 &
SOCAT=$!
PIDS+=("$SOCAT")
sleep 0.3
xk socat -u "OPEN:$OUT/socat.in" "TCP:$LNX_IP:9000" || die "socat under xkrun failed"
wait "$SOCAT" || die "socat on Linux failed"
cmp "$OUT/socat.in" "$OUT/socat.got" || die "socat: the file differs"
echo "socat under xkrun: 8 MiB, equal"

(exec "${LNXC[@]}" socat TCP-LISTEN:9100,reuseaddr,fork EXEC:cat) > /dev/null 2>&1 &
PIDS+=($!)
(exec "${LNXC[@]}" socat UDP-RECVFROM:9101,fork EXEC:cat) > /dev/null 2>&1 &
PIDS+=($!)
sleep 0.3
cat > "$OUT/echo.py" <<'EOF'
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
data = bytes(range(256)) * 4096
with socket.create_connection((host, port)) as s:
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    got = bytearray()
    while chunk := s.recv(65536):
        got += chunk
assert got == data, f"TCP echo: {len(got)} bytes back of {len(data)}, or different"
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
    u.settimeout(2)
    for n in (1, 1000, 1472):
        msg = bytes([n % 256]) * n
        u.sendto(msg, (host, port + 1))
        back, peer = u.recvfrom(65536)
        assert back == msg and peer == (host, port + 1), f"UDP echo of {n} bytes: {len(back)} from {peer}"
print("python3 under xkrun: TCP echo of", len(data), "bytes and 3 UDP echoes intact")
EOF
xk "$PY" "$OUT/echo.py" "$LNX_IP" 9100 || die "python3 under xkrun failed"
# The same in service mode (the stack on a thread of its own, every caller
# sleeping on its socket), which xkrun's default hybrid mode falls back to.
ip netns exec "$NSB" "$XKRUN" --mode service --port "net_af_packet0,iface=$XKIF" --ip "$XK_IP/24" -- \
  "$PY" "$OUT/echo.py" "$LNX_IP" 9100 || die "python3 under xkrun --mode service failed"

# ---- (d) sockperf and NetPIPE -------------------------------------------------------------
step "(d) sockperf ping-pong and throughput (TCP, UDP) and NPtcp under xkrun"
for proto in tcp udp; do
  flag=()
  [ "$proto" = tcp ] && flag=(--tcp)
  (exec "${LNXC[@]}" sockperf server -i "$LNX_IP" -p 11111 "${flag[@]}") > "$OUT/sockperf-server-$proto.log" 2>&1 &
  SP=$!
  PIDS+=("$SP")
  sleep 0.5
  xk sockperf ping-pong -i "$LNX_IP" -p 11111 "${flag[@]}" -t 1 > "$OUT/sockperf-$proto.log" 2>&1 \
    || { tail "$OUT/sockperf-$proto.log" >&2; die "sockperf ping-pong ($proto) under xkrun failed"; }
  grep -q "Summary: Latency is" "$OUT/sockperf-$proto.log" || die "sockperf ($proto): no summary"
  echo "sockperf $proto: $(grep -o 'Summary: Latency is [0-9.]* usec' "$OUT/sockperf-$proto.log")"
  # Throughput: 1400-byte messages one way for 1 s. sockperf's server
  # reports nothing of what it got, so Linux's interface does: the bytes it
  # received over the run hold at least every message sockperf says it sent
  # (TCP's and UDP's payload alike; headers only add).
  rx0=$(lnx cat "/sys/class/net/$LNX/statistics/rx_bytes")
  xk sockperf throughput -i "$LNX_IP" -p 11111 "${flag[@]}" -t 1 -m 1400 > "$OUT/sockperf-tp-$proto.log" 2>&1 \
    || { tail "$OUT/sockperf-tp-$proto.log" >&2; die "sockperf throughput ($proto) under xkrun failed"; }
  sleep 0.2
  rx=$(($(lnx cat "/sys/class/net/$LNX/statistics/rx_bytes") - rx0))
  sent=$(sed -n 's/.*Total of \([0-9]*\) messages sent.*/\1/p' "$OUT/sockperf-tp-$proto.log")
  [ -n "$sent" ] && [ "$sent" -gt 1000 ] || { cat "$OUT/sockperf-tp-$proto.log" >&2; die "sockperf throughput ($proto): ${sent:-no} messages sent"; }
  [ "$rx" -ge $((sent * 1400)) ] || die "sockperf throughput ($proto): $sent messages of 1400 B sent, Linux's $LNX received $rx B"
  echo "sockperf throughput $proto: $sent messages of 1400 B sent, $rx B on Linux's interface;" \
    "$(grep -o 'BandWidth is [0-9.]* MBps' "$OUT/sockperf-tp-$proto.log")"
  stop "$SP" || true
done
(cd "$OUT" && exec ip netns exec "$NSA" NPtcp -p 0 -u 65536) > "$OUT/nptcp-receiver.log" 2>&1 &
NP=$!
PIDS+=("$NP")
sleep 0.5
(cd "$OUT" && xk NPtcp -h "$LNX_IP" -p 0 -u 65536 -o "$OUT/np.out") > "$OUT/nptcp.log" 2>&1 \
  || { tail "$OUT/nptcp.log" >&2; die "NPtcp under xkrun failed"; }
wait "$NP" || true
[ "$(wc -l < "$OUT/np.out")" -ge 20 ] || die "NPtcp: $(wc -l < "$OUT/np.out") sizes measured, not the whole sweep"
echo "NPtcp under xkrun: $(wc -l < "$OUT/np.out") message sizes up to 64 KiB"
