#!/bin/bash
# tools.cli: the test tools' bad command lines -- exit 2, a message saying
# what is wrong, and the --help hint (xk-connrate, xk-soak).
#   cli.sh XK_CONNRATE XK_SOAK
set -uo pipefail
CONNRATE=${1:?usage: cli.sh XK_CONNRATE XK_SOAK}
SOAK=${2:?usage: cli.sh XK_CONNRATE XK_SOAK}
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
"$SOAK" --help | grep -q "^usage: xk-soak" || { echo "FAIL: xk-soak --help"; fails=$((fails + 1)); }
"$CONNRATE" --help | grep -q "^usage: xk-connrate" || { echo "FAIL: xk-connrate --help"; fails=$((fails + 1)); }
echo "tools.cli: $((n - fails)) of $n bad command lines refused as they should be"
[ "$fails" = 0 ]
