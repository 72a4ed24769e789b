#!/usr/bin/env bash
# integration.preload_ipv6: unmodified Debian programs under xkrun on a
# dual-stack xk node (their AF_INET6 sockets on xk too, docs/preload.md)
# against the same programs on Linux, over a veth pair.
#
#   preload_ipv6.sh XKRUN      (as root; CTest runs it)
#
#   netns xk-p6-<pid>-a: Linux, xk6pl<pid> 192.0.2.1/24 and 2001:db8::1/64
#   netns xk-p6-<pid>-b: xk6px<pid>, no address and IPv6 off in its kernel:
#                        xk owns it as 192.0.2.10/24 and 2001:db8::10/64, so
#                        only xk can have answered
#
# (a) iperf3 -s under xkrun listens on [::] (no -4): Linux's iperf3 -6 and
#     -4 clients both get through it (iperf3 prints a v4-mapped peer as
#     IPv4: the mapping itself is capi_dual's to check), and
#     iperf3 -6 under xkrun reaches Linux's server, -R too;
# (b) nginx under xkrun with `listen [::]:8080` (both families) and with
#     `listen 8081; listen [::]:8081 ipv6only=on` (two sockets, one port):
#     Linux's curl -6 and curl -4 fetch a file from each, sha256 equal;
# (c) curl -6 under xkrun fetches it from python3 -m http.server on Linux;
# tshark reads the capture of (b) and (c): no bad checksum, nothing malformed.
#
# Artifacts stay in ./preload_ipv6.out; namespaces, veths and processes go.
# XK_INT_PRELOAD_MB sets the file's size (default 16; 4 under ASan).
set -euo pipefail

TEST_NAME=preload_ipv6
source "$(dirname "$0")/lib.sh"
[ $# -ge 1 ] || die "usage: $0 XKRUN"
XKRUN=$(readlink -f "$1")
[ -x "$XKRUN" ] || die "$XKRUN is not executable"
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
PY=/usr/bin/python3
for tool in ip ethtool iperf3 curl nginx sha256sum "$PY"; do
  command -v "$tool" > /dev/null || die "needs $tool (packages: iperf3 curl nginx-light python3)"
done

LIB=$(dirname "$XKRUN")/libxk_preload.so
MB=${XK_INT_PRELOAD_MB:-16}
FETCH=(curl -sS --fail -o)
if is_sanitized "$LIB"; then
  MB=${XK_INT_PRELOAD_MB:-4}
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  # Debian's curl hangs at start with the ASan runtime preloaded (see
  # preload_linux.sh): python3's urllib is the client under xkrun there.
  FETCH=("$PY" -c 'import sys, urllib.request; open(sys.argv[1], "wb").write(urllib.request.urlopen(sys.argv[2]).read())')
fi

NSA=xk-p6-$$-a
NSB=xk-p6-$$-b
LNX=xk6pl$$
XKIF=xk6px$$
LNX_IP=192.0.2.1
XK_IP=192.0.2.10
LNX_IP6=2001:db8::1
XK_IP6=2001:db8::10
OUT=$PWD/preload_ipv6.out
rm -rf "$OUT"
mkdir -p "$OUT/www" "$OUT/nginx"
install_cleanup

step "topology: $NSA ($LNX $LNX_IP/24 $LNX_IP6/64) <-veth-> $NSB ($XKIF, xk $XK_IP/24 $XK_IP6/64)"
make_veth_topology "$NSA" "$NSB" "$LNX" "$XKIF" "$LNX_IP/24"
ip netns exec "$NSA" sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=0 \
  "net.ipv6.conf.$LNX.disable_ipv6=0"
ip netns exec "$NSA" ip -6 addr add "$LNX_IP6/64" dev "$LNX" nodad
LNXC=(ip netns exec "$NSA")
XKC=(ip netns exec "$NSB" "$XKRUN" --port "net_af_packet0,iface=$XKIF" --ip "$XK_IP/24" --ip "$XK_IP6/64" --)
lnx() { "${LNXC[@]}" "$@"; }
xk() { "${XKC[@]}" "$@"; }
until_up() {
  local i
  for ((i = 0; i < 100; i++)); do
    "$@" && return 0
    sleep 0.2
  done
  return 1
}
# iperf_client BASE ARGS...: Linux's iperf3 client, its report in BASE.json;
# fails when the report holds an error.
iperf_client() {
  local base=$1
  shift
  lnx iperf3 -J "$@" > "$base.json" 2> "$base.err" || return 1
  ! grep -q '"error"' "$base.json"
}
# The sender sent, the receiver counted no more and at least half.
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
peer = s["start"]["connected"][0]["remote_host"]
print(f"{name}: sent {sent} B, the receiver counted {got} B; the server saw {peer}")
if sent == 0 or not (sent // 2 <= got <= sent):
    sys.exit(f"{name}: the receiver counted {got} of {sent} bytes")
EOF
}

step "(a) iperf3 -s under xkrun on [::]: Linux's -6 and -4 clients; iperf3 -6 under xkrun to Linux"
for fam in 6 4; do
  port=$((5300 + RANDOM % 500))
  (exec "${XKC[@]}" iperf3 -s -1 -J -p "$port") > "$OUT/srv$fam.json" 2> "$OUT/srv$fam.err" &
  spid=$!
  PIDS+=("$spid")
  target=$XK_IP6
  [ "$fam" = 4 ] && target=$XK_IP
  # A try before the server listens is refused -- and iperf3 -J says so in
  # its report but exits 0: each try writes its own, and the last counts.
  until_up iperf_client "$OUT/cli$fam" -"$fam" -c "$target" -p "$port" -t 2 \
    || { cat "$OUT/cli$fam.json" "$OUT/srv$fam.err" >&2; die "Linux's iperf3 -$fam against iperf3 -s under xkrun failed"; }
  wait "$spid" || die "iperf3 -s under xkrun exited with $?"
  iperf_check "iperf3 -$fam -> xkrun" "$OUT/cli$fam.json" "$OUT/srv$fam.json" 0
done
for r in "" -R; do
  port=$((5300 + RANDOM % 500))
  (exec "${LNXC[@]}" iperf3 -s -1 -J -p "$port") > "$OUT/lsrv$r.json" 2> "$OUT/lsrv$r.err" &
  spid=$!
  PIDS+=("$spid")
  sleep 0.5
  xk iperf3 -6 -c "$LNX_IP6" -p "$port" -t 2 -J $r > "$OUT/xcli$r.json" 2> "$OUT/xcli$r.err" \
    || { cat "$OUT/xcli$r.err" >&2; die "iperf3 -6 under xkrun failed"; }
  wait "$spid" || die "Linux's iperf3 server exited with $?"
  iperf_check "iperf3 -6 $r under xkrun -> Linux" "$OUT/xcli$r.json" "$OUT/lsrv$r.json" "$([ -n "$r" ] && echo 1 || echo 0)"
done

head -c "$((MB * 1048576))" /dev/urandom > "$OUT/www/blob"
WANT=$(sha256sum < "$OUT/www/blob" | cut -d' ' -f1)

# The capture from here on (iperf3's gigabytes would take tshark minutes).
start_capture "$NSA" "$LNX" "$OUT/linux.pcap"

step "(b) nginx under xkrun: [::]:8080 for both families, 8081 and [::]:8081 ipv6only ($MB MiB)"
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
  client_body_temp_path $OUT/nginx/body;
  proxy_temp_path $OUT/nginx/proxy;
  fastcgi_temp_path $OUT/nginx/fastcgi;
  uwsgi_temp_path $OUT/nginx/uwsgi;
  scgi_temp_path $OUT/nginx/scgi;
  server {
    listen [::]:8080 ipv6only=off;
    root $OUT/www;
  }
  server {
    listen 8081;
    listen [::]:8081 ipv6only=on;
    root $OUT/www;
  }
}
EOF
(exec "${XKC[@]}" nginx -c "$OUT/nginx/nginx.conf" -p "$OUT/nginx") > "$OUT/nginx.log" 2>&1 &
NGINX=$!
PIDS+=("$NGINX")
until_up lnx curl -s -o /dev/null "http://[$XK_IP6]:8080/" || { cat "$OUT/nginx.log" >&2; die "nginx under xkrun did not answer over IPv6"; }
for url in "http://[$XK_IP6]:8080/blob" "http://$XK_IP:8080/blob" "http://[$XK_IP6]:8081/blob" "http://$XK_IP:8081/blob"; do
  lnx curl -sS --fail -o "$OUT/nginx.got" "$url" || { cat "$OUT/nginx.log" >&2; die "Linux curl $url failed"; }
  [ "$(sha256sum < "$OUT/nginx.got" | cut -d' ' -f1)" = "$WANT" ] || die "nginx under xkrun, $url: the file differs"
  echo "   curl $url: sha256 equal"
done
stop "$NGINX" || true

step "(c) $(basename "${FETCH[0]}") under xkrun <- python3 -m http.server on Linux, over IPv6"
(cd "$OUT/www" && exec ip netns exec "$NSA" "$PY" -m http.server 8000 --bind "$LNX_IP6") > "$OUT/http.log" 2>&1 &
PIDS+=($!)
until_up lnx curl -s -o /dev/null "http://[$LNX_IP6]:8000/" || die "http.server did not start"
xk "${FETCH[@]}" "$OUT/curl.got" "http://[$LNX_IP6]:8000/blob" || die "${FETCH[0]} under xkrun failed"
[ "$(sha256sum < "$OUT/curl.got" | cut -d' ' -f1)" = "$WANT" ] || die "curl -6 under xkrun: the file differs"
echo "   sha256 equal"

step "tshark: checksums and malformed frames"
stop_capture
check_capture "$OUT/linux.pcap" "$XK_IP6" lossy
