#!/usr/bin/env bash
# apps.echo_memif: xk-echo between two xk stacks over net_memif (no root):
# an xk-pingpong client sweeps TCP messages of 1 byte to 16 KiB through it
# with every byte checked, then an xk-udp-echo client sends 300 datagrams of
# 1..8000 bytes and checks each echo; xk-echo, stopped with SIGTERM, reports
# the connection and the datagrams it served.
#
#   echo_memif.sh XK_ECHO XK_PINGPONG XK_UDP_ECHO
set -euo pipefail
ECHO=$(readlink -f "${1:?usage: echo_memif.sh XK_ECHO XK_PINGPONG XK_UDP_ECHO}")
PP=$(readlink -f "${2:?}")
UDP=$(readlink -f "${3:?}")
OUT=$PWD/echo_memif.out
rm -rf "$OUT"
mkdir -p "$OUT"
SOCK=$OUT/memif.sock
SERVER_PID=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  return 0
}
trap cleanup EXIT
die() { echo "echo_memif: FAIL: $*" >&2; exit 1; }

# wait_for FILE TEXT PID: until FILE holds TEXT (the process must live).
wait_for() {
  for _ in $(seq 150); do
    local log
    log=$(cat "$1")
    [[ "$log" == *"$2"* ]] && return 0
    kill -0 "$3" 2>/dev/null || die "$(basename "$1" .log) exited: $log"
    sleep 0.1
  done
  die "no '$2' in $1"
}

"$ECHO" --port "net_memif0,role=server,id=0,socket=$SOCK" --ip 192.0.2.10/24 --tcp-port 7 --udp-port 7 \
  > "$OUT/echo.log" 2>&1 &
SERVER_PID=$!
wait_for "$OUT/echo.log" "waiting for the link" "$SERVER_PID"

# TCP, then UDP: each client is its own memif client (the server's link goes
# down and up between them).
timeout 120 "$PP" client --port "net_memif1,role=client,id=0,socket=$SOCK" --ip 192.0.2.11/24 \
  --peer 192.0.2.10:7 --max 16k --trial-seconds 0.002 --trials 1 --warmup 20 --verify --idle sleep --echo stream \
  > "$OUT/pingpong.log" 2>&1 || { cat "$OUT/pingpong.log"; die "the TCP client failed"; }
grep -q '^RESULT role=pingpong' "$OUT/pingpong.log" || die "no RESULT from the TCP client"
wait_for "$OUT/echo.log" "ready" "$SERVER_PID"
timeout 120 "$UDP" client --port "net_memif1,role=client,id=0,socket=$SOCK" --ip 192.0.2.11/24 \
  --peer 192.0.2.10:7 --count 300 --sizes 1..8000 > "$OUT/udp.log" 2>&1 \
  || { cat "$OUT/udp.log"; die "the UDP client failed"; }
summary=$(grep 'client summary' "$OUT/udp.log" || true)
[[ "$summary" == *"received 300, mismatches 0, lost 0, unfinished 0"* ]] || die "UDP: $summary"

kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || die "xk-echo exited non-zero: $(tail -5 "$OUT/echo.log")"
SERVER_PID=
cat "$OUT/echo.log"
tcp=$(grep '^xk-echo: tcp:' "$OUT/echo.log" || true)
[[ "$tcp" == "xk-echo: tcp: 1 connections, "*" 0 failed" ]] || die "TCP summary: '$tcp'"
udp=$(grep '^xk-echo: udp:' "$OUT/echo.log" || true)
[[ "$udp" == *"300 datagrams"*"300 echoed, 0 echo errors" ]] || die "UDP summary: '$udp'"
echo "echo_memif: OK"
