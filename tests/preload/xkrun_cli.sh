#!/usr/bin/env bash
# preload.xkrun_cli: xkrun's command line and a stack that cannot start --
# each a clear one-line message and an exit status (2: the command line, 1:
# the stack), never a crash inside the program.
#
#   xkrun_cli.sh XKRUN LOOPBACK_GRAPH
set -uo pipefail
XKRUN=$1
GRAPH=$2
fails=0
# expect STATUS PATTERN [ENV=...] -- XKRUN ARGS...
expect() {
  local want=$1 pattern=$2
  shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local err rc
  err=$(env -u XK_PORT -u XK_IP -u XK_GRAPH -u XK_FILTERD -u XKRUN_PID "${envs[@]}" "$XKRUN" "$@" 2>&1 >/dev/null)
  rc=$?
  local lines
  lines=$(printf '%s' "$err" | grep -c '')
  if [ "$rc" -ne "$want" ] || ! grep -q -- "$pattern" <<< "$err" || { [ "$want" -ne 0 ] && [ "$lines" -ne 1 ]; }; then
    echo "FAIL: xkrun $* -> status $rc (want $want), stderr ($lines lines): $err"
    fails=$((fails + 1))
  else
    echo "ok: xkrun $* -> $rc${err:+: $err}"
  fi
}
expect 2 "no program" --
expect 2 "unknown flag --bogus" -- --bogus x -- true
expect 2 "--idle: expected" -- --idle fast -- true
expect 2 "--csum: expected on or off" -- --csum maybe -- true
expect 2 "--graph: cannot read" -- --graph /nonexistent/graph -- true
expect 2 "no such program" -- --graph "$GRAPH" -- /nonexistent/program
expect 2 "stack flags come first" -- true
expect 1 "the xk stack did not start.*no port" -- -- true
expect 1 "XK_IDLE='bogus'" XK_IDLE=bogus -- --graph "$GRAPH" -- true
expect 1 "XK_SPIN_US" XK_SPIN_US=lots -- --graph "$GRAPH" -- true
expect 2 "--mode: expected hybrid or service" -- --mode inline -- true
expect 2 "--hand-back-us: 'soon' is not a number" -- --hand-back-us soon -- true
expect 2 "--exit-linger-ms: '-1' is not a number" -- --exit-linger-ms -1 -- true
expect 1 "XK_MODE='inline'" XK_MODE=inline -- --graph "$GRAPH" -- true
expect 1 "XK_HAND_BACK_US=0" XK_HAND_BACK_US=0 -- --graph "$GRAPH" -- true
expect 1 "XK_EXIT_LINGER_MS='x'" XK_EXIT_LINGER_MS=x -- --graph "$GRAPH" -- true
expect 2 "--kernel-poll-us: 'soon' is not a number" -- --kernel-poll-us soon -- true
expect 1 "XK_KERNEL_POLL_US='2000000'" XK_KERNEL_POLL_US=2000000 -- --graph "$GRAPH" -- true
expect 1 "XK_KERNEL_POLL_US='-5'" XK_KERNEL_POLL_US=-5 -- --graph "$GRAPH" -- true
expect 1 "the xk stack did not start" -- --filterd /nonexistent/filterd.sock -- true
expect 1 "XK_PRELOAD_KERNEL: '10.0.0.0/33'" -- --kernel-nets 10.0.0.0/33 --graph "$GRAPH" -- true
expect 0 "" -- --graph "$GRAPH" -- true
out=$("$XKRUN" --help)
grep -q "usage: xkrun" <<< "$out" || { echo "FAIL: --help"; fails=$((fails + 1)); }
# The program's own exit status comes through.
env -u XKRUN_PID "$XKRUN" --graph "$GRAPH" -- sh -c 'exit 7'
[ $? -eq 7 ] || { echo "FAIL: the program's exit status"; fails=$((fails + 1)); }
# The defaults xkrun sets unless told: the hybrid mode, a 200 us spin.
defaults=$(env -u XKRUN_PID -u XK_MODE -u XK_SPIN_US "$XKRUN" --graph "$GRAPH" -- sh -c 'echo "$XK_MODE $XK_SPIN_US"')
[ "$defaults" = "hybrid 200" ] || { echo "FAIL: defaults '$defaults', not 'hybrid 200'"; fails=$((fails + 1)); }
given=$(env -u XKRUN_PID "$XKRUN" --spin-us 7 --graph "$GRAPH" -- sh -c 'echo "$XK_SPIN_US"')
[ "$given" = 7 ] || { echo "FAIL: --spin-us 7 gave XK_SPIN_US='$given'"; fails=$((fails + 1)); }
expect 2 "--link: 'a/b' is not a name" -- --link a/b -- true
expect 2 "--link and --port both name" -- --link job --port net_null0 -- true
given=$(env -u XKRUN_PID "$XKRUN" --link job-7 --graph "$GRAPH" -- sh -c 'echo "$XK_PORT"')
[ "$given" = "shm:@xk-link-job-7,role=auto" ] || { echo "FAIL: --link job-7 gave XK_PORT='$given'"; fails=$((fails + 1)); }
given=$(env -u XKRUN_PID "$XKRUN" --kernel-poll-us 0 --graph "$GRAPH" -- sh -c 'echo "$XK_KERNEL_POLL_US"')
[ "$given" = 0 ] || { echo "FAIL: --kernel-poll-us 0 gave XK_KERNEL_POLL_US='$given'"; fails=$((fails + 1)); }
# A program that execs another (a wrapper script) hands nothing of its
# stack on: the new image has as many descriptors as one started directly
# (DPDK's own -- EAL pipes, epoll set, timer, memfd -- are close-on-exec).
# Over a DPDK port (net_null: no peer needed).
fds_direct=$(env -u XKRUN_PID "$XKRUN" --port net_null0 --ip 192.0.2.1/24 -- ls /proc/self/fd | wc -l)
fds_execd=$(env -u XKRUN_PID "$XKRUN" --port net_null0 --ip 192.0.2.1/24 -- sh -c 'exec ls /proc/self/fd' | wc -l)
if [ "$fds_direct" -lt 4 ] || [ "$fds_execd" != "$fds_direct" ]; then
  echo "FAIL: descriptors after an exec: $fds_execd, started directly: $fds_direct"
  fails=$((fails + 1))
fi
# The program's getopt starts afresh after the stack's DPDK EAL parsed its
# own arguments: GNU env stops at its command ('+'), and the command's -c is
# the command's (it was "env: invalid option -- 'c'", status 125).
got=$(env -u XKRUN_PID "$XKRUN" --port net_null0 --ip 192.0.2.1/24 -- env -u XK_NOTHING echo -c ok 2>&1)
[ "$got" = "-c ok" ] || { echo "FAIL: env under xkrun parsed its command's options: '$got'"; fails=$((fails + 1)); }
# A socket starts with a quarter of the core's L2 cache of receive buffer, 256
# KiB to 1 MiB (docs/tcp.md, "Buffer autotuning"), unless the tcp options name
# one. Read back through getsockopt() of a socket bound to the stack's address
# (an xk socket) in a program that knows nothing of xk.
l2=$(getconf LEVEL2_CACHE_SIZE 2> /dev/null)
want=$(( ${l2:-0} > 0 ? l2 / 4 : 262144 ))
want=$(( want < 262144 ? 262144 : want > 1048576 ? 1048576 : want ))
rcvbuf_py='import socket; s = socket.socket(); s.bind(("192.0.2.1", 5000)); print(s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))'
# (As below: python3's allocations at exit are not ours to check.)
no_leaks="ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
got=$(env -u XKRUN_PID -u XK_TCP_OPTS "$no_leaks" "$XKRUN" --port net_null0 --ip 192.0.2.1/24 -- python3 -c "$rcvbuf_py")
[ "$got" = "$want" ] || { echo "FAIL: a socket's receive buffer $got, not $want (L2 ${l2:-unknown})"; fails=$((fails + 1)); }
got=$(env -u XKRUN_PID "$no_leaks" "$XKRUN" --port net_null0 --ip 192.0.2.1/24 --tcp-opts "sack=on rcvbuf=3m" -- python3 -c "$rcvbuf_py")
[ "$got" = 3145728 ] || { echo "FAIL: --tcp-opts rcvbuf=3m gave $got"; fails=$((fails + 1)); }
got=$(env -u XKRUN_PID "$no_leaks" XK_TCP_OPTS="wscale=7" "$XKRUN" --port net_null0 --ip 192.0.2.1/24 -- python3 -c "$rcvbuf_py")
[ "$got" = "$want" ] || { echo "FAIL: XK_TCP_OPTS without rcvbuf gave $got, not $want"; fails=$((fails + 1)); }
# --stats FILE: the stack's counters at exit, after a connection through it
# (python3, a dynamically linked interpreter, over the loopback graph).
stats=$(mktemp /tmp/xkrun-stats.XXXXXX)
# (python3's own allocations at exit are no leak of ours: ASan's leak check off for it.)
env -u XKRUN_PID ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
  "$XKRUN" --stats "$stats" --graph "$GRAPH" -- python3 -c '
import socket
l = socket.create_server(("192.0.2.1", 7000))
c = socket.create_connection(("192.0.2.1", 7000))
s, _ = l.accept()
c.sendall(b"x" * 100000)
c.close()
n = 0
while (b := s.recv(65536)):
    n += len(b)
assert n == 100000, n
'
rc=$?
count() { awk -v o="$1" -v n="$2" '$1 == o && $2 == n { print $3 }' "$stats"; }
passes=$(count stack polls)
if [ "$rc" -ne 0 ] || [ "$(head -1 "$stats" | awk '{ print $1, $2, $3 }')" != "owner counter value" ] ||
  [ "$(count tcp0 passive_opens)" != 1 ] || [ "$(count tcp0 active_opens)" != 1 ] ||
  [ "${passes:-0}" -le 0 ]; then
  echo "FAIL: --stats $stats (program status $rc):"
  head -5 "$stats"
  fails=$((fails + 1))
fi
rm -f "$stats"
expect 1 "XK_STATS=''" XK_STATS= -- --graph "$GRAPH" -- true
[ "$fails" -eq 0 ] || { echo "xkrun_cli: $fails failed"; exit 1; }
echo "xkrun_cli: PASS"
