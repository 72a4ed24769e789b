#!/usr/bin/env bash
# apps.cli: every app's command line -- --help, and bad command lines that must
# be refused with exit status 2, the app's name, a message saying what is
# wrong, and the "try --help" hint. No stack is built: each case fails in
# argument parsing, before DPDK starts.
#
#   cli.sh BIN_DIR        (the build's apps/ directory)
set -uo pipefail
BIN=${1:?usage: cli.sh BIN_DIR}
fails=0
cases=0

# expect APP EXIT REGEX ARGS...: run APP ARGS, want exit status EXIT and
# output (stdout + stderr) matching REGEX (grep -E).
expect() {
  local app=$1 want=$2 re=$3
  shift 3
  local exe
  exe=$(find "$BIN" -type f -name "$app" -perm -u+x | head -1)
  if [ -z "$exe" ]; then
    echo "FAIL: $app is not built under $BIN"; fails=$((fails + 1)); return
  fi
  cases=$((cases + 1))
  local out rc
  out=$(timeout 10 "$exe" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL: $app $*: exit $rc, want $want; output:"; echo "$out" | sed 's/^/    /'
    fails=$((fails + 1)); return
  fi
  if ! [[ "$out" =~ $re ]]; then
    echo "FAIL: $app $*: output does not match /$re/:"; echo "$out" | sed 's/^/    /'
    fails=$((fails + 1)); return
  fi
  if [ "$want" -eq 2 ] && ! [[ "$out" == *"try '$app --help'"* ]]; then
    echo "FAIL: $app $*: no \"try '$app --help'\" hint"; fails=$((fails + 1)); return
  fi
  echo "ok: $app $* -> $rc"
}

STACK=(--port net_null0 --ip 192.0.2.1/24)
PEER=(--peer 192.0.2.2:5001)

for app in xk-udp-echo xk-udp-perf xk-tcp-perf xk-pingpong; do
  expect "$app" 0 "usage: $app" --help
  expect "$app" 0 "--port DEVARGS" -h
  expect "$app" 2 "^$app: missing (mode|role)"
  expect "$app" 2 "^$app: unknown (mode|role) 'bogus'" bogus
  expect "$app" 2 "^$app: unknown option '--frob'" server "${STACK[@]}" --frob
  expect "$app" 2 "^$app: --port DEVARGS is required" server --ip 192.0.2.1/24
  expect "$app" 2 "^$app: --ip: '300.1.1.1/24' is not an address/prefix" server --port net_null0 --ip 300.1.1.1/24
  expect "$app" 2 "^$app: --csum" server "${STACK[@]}" --csum maybe
done

# xk-tcp-perf
# A node on another host (--filterd tcp:...): its own port, the address from filterd.
expect xk-tcp-perf 2 "--filterd tcp:... gives the address" server --filterd tcp:203.0.113.1:7500 --port net_null0 --ip 192.0.2.1/24
expect xk-tcp-perf 2 "--filterd tcp:... needs --port DEVARGS" server --filterd tcp:203.0.113.1:7500
expect xk-tcp-perf 2 "--filterd-token goes with --filterd tcp:HOST:PORT" server "${STACK[@]}" --filterd-token /nonexistent
expect xk-tcp-perf 2 "client: --peer A.B.C.D:PORT is required" client "${STACK[@]}"
expect xk-tcp-perf 2 "--peer port: '0' is not a number in 1..65535" client "${STACK[@]}" --peer 192.0.2.2:0
expect xk-tcp-perf 2 "--peer: '192.0.2' is not an IPv4 address" client "${STACK[@]}" --peer 192.0.2:5
expect xk-tcp-perf 2 "server --mode: sink or echo" server "${STACK[@]}" --mode send
expect xk-tcp-perf 2 "client --mode: send or pingpong" client "${STACK[@]}" "${PEER[@]}" --mode echo
expect xk-tcp-perf 2 "--bytes: 'lots' is not a number" client "${STACK[@]}" "${PEER[@]}" --bytes lots
expect xk-tcp-perf 2 "--verify: on or off" client "${STACK[@]}" "${PEER[@]}" --verify maybe
expect xk-tcp-perf 2 "--nodelay" client "${STACK[@]}" "${PEER[@]}" --nodelay=1
expect xk-tcp-perf 2 "--timeout: '0' is not a number of seconds" client "${STACK[@]}" "${PEER[@]}" --timeout 0
expect xk-tcp-perf 2 "--peer is for the client" server "${STACK[@]}" "${PEER[@]}"

# xk-pingpong
expect xk-pingpong 2 "client: --peer A.B.C.D:PORT is required" client "${STACK[@]}"
expect xk-pingpong 2 "--min is larger than --max" client "${STACK[@]}" "${PEER[@]}" --min 9 --max 8
expect xk-pingpong 2 "--max: a message is 1 byte to 64m" client "${STACK[@]}" "${PEER[@]}" --max 65m
expect xk-pingpong 2 "--min: a message is 1 byte to 64m" client "${STACK[@]}" "${PEER[@]}" --min 0
expect xk-pingpong 2 "--trials: '0' is not a number in 1..1000" client "${STACK[@]}" "${PEER[@]}" --trials 0
expect xk-pingpong 2 "--trial-seconds: 'x' is not a number of seconds" client "${STACK[@]}" "${PEER[@]}" --trial-seconds x
expect xk-pingpong 2 "--csv: empty file name" client "${STACK[@]}" "${PEER[@]}" --csv ''
expect xk-pingpong 2 "are for the client" server "${STACK[@]}" --verify
expect xk-pingpong 2 "--tcp-port and --count are for the server" client "${STACK[@]}" "${PEER[@]}" --count 3
expect xk-pingpong 2 "--peer is for the client" server "${STACK[@]}" "${PEER[@]}"

# xk-echo (no role word)
expect xk-echo 0 "usage: xk-echo" --help
expect xk-echo 2 "^xk-echo: --port DEVARGS is required" --ip 192.0.2.1/24
expect xk-echo 2 "^xk-echo: unknown option '--frob'" "${STACK[@]}" --frob
expect xk-echo 2 "leave nothing to serve" "${STACK[@]}" --tcp-only --udp-only
expect xk-echo 2 "--group is for the TCP port" "${STACK[@]}" --udp-only --group
expect xk-echo 2 "--udp-port: '0' is not a number in 1..65535" "${STACK[@]}" --udp-port 0
expect xk-echo 2 "--tcp-only" "${STACK[@]}" --tcp-only=yes

# xk-udp-echo, xk-udp-perf
expect xk-udp-perf 2 "unknown mode 'bogus': expected server, pingpong or rate" bogus
expect xk-udp-echo 2 "unknown mode 'bogus': expected server or client" bogus

echo "$cases cases, $fails failed"
[ "$fails" -eq 0 ] && [ "$cases" -ge 40 ]
