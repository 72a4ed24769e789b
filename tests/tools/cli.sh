#!/bin/bash
# tools.cli: the test tools' bad command lines -- exit 2, a message saying
# what is wrong, and the --help hint (xk-connrate, xk-soak, xk-synflood,
# xk-capi-node), and filterd's.
#   cli.sh XK_CONNRATE XK_SOAK XK_SYNFLOOD XK_CAPI_NODE FILTERD
set -uo pipefail
CONNRATE=${1:?usage: cli.sh XK_CONNRATE XK_SOAK}
SOAK=${2:?usage: cli.sh XK_CONNRATE XK_SOAK XK_SYNFLOOD}
FLOOD=${3:?usage: cli.sh XK_CONNRATE XK_SOAK XK_SYNFLOOD XK_CAPI_NODE}
NODE=${4:?usage: cli.sh XK_CONNRATE XK_SOAK XK_SYNFLOOD XK_CAPI_NODE FILTERD}
FILTERD=${5:?usage: cli.sh XK_CONNRATE XK_SOAK XK_SYNFLOOD XK_CAPI_NODE FILTERD}
fails=0 n=0
check() {  # check PROG "expected message" args...
  local prog=$1 want=$2 out rc
  shift 2
  n=$((n + 1))
  out=$("$prog" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" != 2 ] || ! grep -qF -- "$want" <<< "$out" || ! grep -qF -- "--help' " <<< "$out "; then
    echo "FAIL: $(basename "$prog") $*: exit $rc, said: $out (wanted: $want)"
    fails=$((fails + 1))
  fi
}
for prog in "$CONNRATE" "$SOAK"; do
  check "$prog" "say server or client"
  check "$prog" "'foo': server or client" foo
  check "$prog" "--backend kernel|xk is required" client --peer 192.0.2.1:5
  check "$prog" "--backend: kernel or xk, not 'nope'" client --backend nope
  check "$prog" "client: --peer A.B.C.D:P is required" client --backend kernel
  check "$prog" "--peer: '192.0.2.1' is not A.B.C.D:PORT" client --backend kernel --peer 192.0.2.1
  check "$prog" "--peer needs a value" client --backend kernel --peer
  check "$prog" "unknown server option '--peer'" server --backend kernel --peer 192.0.2.1:5
  check "$prog" "--parallel: '0' is not a number in 1..4096" client --backend kernel --peer 192.0.2.1:5 --parallel 0
done
check "$CONNRATE" "--count: 'x' is not a number" server --backend kernel --count x
check "$SOAK" "--counters: 'tcp0' is not INSTANCE.COUNTER" client --backend kernel --peer 192.0.2.1:5 --counters tcp0
check "$SOAK" "--seconds: '0' is not a number in 1..1000000" client --backend kernel --peer 192.0.2.1:5 --seconds 0
STACK=(--port net_memif0 --ip 192.0.2.11/24)
check "$FLOOD" "--port DEVARGS is required"
check "$FLOOD" "--peer A.B.C.D:PORT is required" "${STACK[@]}"
check "$FLOOD" "--flood-rate: 'fast' is neither SYNs per second" "${STACK[@]}" --peer 192.0.2.10:5 --flood-rate fast
check "$FLOOD" "--flood-from: '10.0.0.0/4' is not a.b.c.d/n with n >= 8" "${STACK[@]}" --peer 192.0.2.10:5 --flood-from 10.0.0.0/4
check "$FLOOD" "--flood-burst: '0' is not a number in 1..1024" "${STACK[@]}" --peer 192.0.2.10:5 --flood-burst 0
check "$FLOOD" "--seconds: '0' is not a number of seconds" "${STACK[@]}" --peer 192.0.2.10:5 --seconds 0
check "$FLOOD" "unknown option '--bytes'" "${STACK[@]}" --peer 192.0.2.10:5 --bytes 1g
check "$NODE" "--stacks K is required"
check "$NODE" "--stacks: '0' is not a number in 1..64" --stacks 0
check "$NODE" "--stacks: '65' is not a number in 1..64" --stacks 65
check "$NODE" "--port: 'x' is not a number in 1..65535" --stacks 2 --port x
check "$NODE" "--conns needs a value" --stacks 2 --conns
check "$NODE" "unknown option '--peer'" --stacks 2 --peer 192.0.2.1:5
FD=(--port net_memif0 --ip 192.0.2.10/24)
check "$FILTERD" "--port DEVARGS is required" --ip 192.0.2.10/24
check "$FILTERD" "--ip: '192.0.2.10' is neither A.B.C.D/N nor an IPv6 address/prefix" --port net_memif0 --ip 192.0.2.10
check "$FILTERD" "--ip: one address per family ('192.0.2.11/24' is a second)" "${FD[@]}" --ip 192.0.2.11/24
check "$FILTERD" "--gw 2001:db8::1: no IPv6 --ip" "${FD[@]}" --gw 2001:db8::1
check "$FILTERD" "--gw 2001:db9::1 is neither link-local nor on the IPv6 --ip prefix" "${FD[@]}" --ip 2001:db8::10/64 --gw 2001:db9::1
check "$FILTERD" "--ip A.B.C.D/N is required" --port net_memif0 --ip 2001:db8::10/64
check "$FILTERD" "--gw is not on the --ip subnet" "${FD[@]}" --gw 198.51.100.1
check "$FILTERD" "--mode: steer or central" "${FD[@]}" --mode relay
check "$FILTERD" "--resync-grace: milliseconds, 0..600000" "${FD[@]}" --resync-grace -1
check "$FILTERD" "--heartbeat-ms: milliseconds, 0..600000" "${FD[@]}" --heartbeat-ms 1s
check "$FILTERD" "--idle: spin, busy or yield, not 'poll'" "${FD[@]}" --idle poll
check "$FILTERD" "--spin-us: microseconds, 0..1000000" "${FD[@]}" --spin-us 2000000
check "$FILTERD" "--spin-us needs a value" "${FD[@]}" --spin-us
check "$FILTERD" "--control-tcp needs --control-token FILE" "${FD[@]}" --control-tcp 127.0.0.1:7500
check "$FILTERD" "unknown argument '--queues'" "${FD[@]}" --queues 2
"$NODE" --help | grep -q "^usage: xk-capi-node" || { echo "FAIL: xk-capi-node --help"; fails=$((fails + 1)); }
# xk_node_create without filterd: EINVAL and a message that says so, exit 1.
out=$(env -u XK_FILTERD "$NODE" --stacks 2 2>&1 >/dev/null)
rc=$?
n=$((n + 1))
if [ "$rc" != 1 ] || ! grep -qF "xk_node_create: several stacks sharing an address need filterd" <<< "$out"; then
  echo "FAIL: xk-capi-node without XK_FILTERD: exit $rc, said: $out"
  fails=$((fails + 1))
fi
"$FLOOD" --help | grep -q "^usage: xk-synflood" || { echo "FAIL: xk-synflood --help"; fails=$((fails + 1)); }
"$SOAK" --help | grep -q "^usage: xk-soak" || { echo "FAIL: xk-soak --help"; fails=$((fails + 1)); }
"$CONNRATE" --help | grep -q "^usage: xk-connrate" || { echo "FAIL: xk-connrate --help"; fails=$((fails + 1)); }
"$FILTERD" --help | grep -q -- "--idle spin|busy" || { echo "FAIL: filterd --help"; fails=$((fails + 1)); }
echo "tools.cli: $((n - fails)) of $n bad command lines refused as they should be"
[ "$fails" = 0 ]
