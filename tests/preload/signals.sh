#!/usr/bin/env bash
# preload.signals: a signal handler without SA_RESTART interrupts a blocked
# call on an xk socket (EINTR) even when the call never sleeps -- busy
# polling (--idle busy), or a spin longer than the wait (--spin-us 1000000: 1 s):
# the library counts the program's handlers (docs/preload.md, "Signals").
#
#   signals.sh XKRUN LOOPBACK_GRAPH
set -uo pipefail
XKRUN=$1
GRAPH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
fails=0
# An ASan build: python3's own leaks at exit are not the library's.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
for flags in "--idle busy" "--spin-us 1000000" ""; do
  # shellcheck disable=SC2086
  out=$(env -u XKRUN_PID timeout 60 "$XKRUN" --graph "$GRAPH" $flags -- /usr/bin/python3 "$HERE/signals.py" 2>&1)
  rc=$?
  echo "${flags:-default}:"
  sed 's/^/   /' <<< "$out"
  [ "$rc" -eq 0 ] || { echo "FAIL: ${flags:-default}: status $rc"; fails=$((fails + 1)); }
  [ "$(grep -c "interrupted after" <<< "$out")" -eq 4 ] || { echo "FAIL: ${flags:-default}: not every call"; fails=$((fails + 1)); }
done
[ "$fails" -eq 0 ] || exit 1
echo "signals: PASS"
