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
expect xk-tcp-perf 2 "client: --peer A.B.C.D:PORT or \[X:X::X\]:PORT is required" client "${STACK[@]}"
expect xk-tcp-perf 2 "--peer port: '0' is not a number in 1..65535" client "${STACK[@]}" --peer 192.0.2.2:0
expect xk-tcp-perf 2 "--peer: '192.0.2' is not an address" client "${STACK[@]}" --peer 192.0.2:5
expect xk-tcp-perf 2 "--peer: '2001:db8::1' is not an address" client "${STACK[@]}" --peer 2001:db8::1:5
expect xk-tcp-perf 2 "--peer: '\[192.0.2.1\]' is not an address" client "${STACK[@]}" --peer [192.0.2.1]:5
expect xk-tcp-perf 2 "--ip: one IPv4 address per stack" server "${STACK[@]}" --ip 192.0.2.2/24
expect xk-tcp-perf 2 "--ip: '2001:db8::1/129' is not an address/prefix" server "${STACK[@]}" --ip 2001:db8::1/129
expect xk-tcp-perf 2 "--gw 2001:db8:1::1 is not on a prefix of --ip \(nor link-local\)" server "${STACK[@]}" --ip 2001:db8::10/64 --gw 2001:db8:1::1
expect xk-tcp-perf 2 "--gw: one gateway per family" server "${STACK[@]}" --ip 2001:db8::10/64 --gw fe80::1 --gw fe80::2
expect xk-tcp-perf 2 "server --mode: sink or echo" server "${STACK[@]}" --mode send
expect xk-tcp-perf 2 "client --mode: send or pingpong" client "${STACK[@]}" "${PEER[@]}" --mode echo
expect xk-tcp-perf 2 "--bytes: 'lots' is not a number" client "${STACK[@]}" "${PEER[@]}" --bytes lots
expect xk-tcp-perf 2 "--verify: on or off" client "${STACK[@]}" "${PEER[@]}" --verify maybe
expect xk-tcp-perf 2 "--nodelay" client "${STACK[@]}" "${PEER[@]}" --nodelay=1
expect xk-tcp-perf 2 "--timeout: '0' is not a number of seconds" client "${STACK[@]}" "${PEER[@]}" --timeout 0
expect xk-tcp-perf 2 "--peer is for the client" server "${STACK[@]}" "${PEER[@]}"

# xk-pingpong
expect xk-pingpong 2 "client: --peer A.B.C.D:PORT or \[X:X::X\]:PORT is required" client "${STACK[@]}"
expect xk-pingpong 2 "--min is larger than --max" client "${STACK[@]}" "${PEER[@]}" --min 9 --max 8
expect xk-pingpong 2 "--max: a message is 1 byte to 64m" client "${STACK[@]}" "${PEER[@]}" --max 65m
expect xk-pingpong 2 "--min: a message is 1 byte to 64m" client "${STACK[@]}" "${PEER[@]}" --min 0
expect xk-pingpong 2 "--trials: '0' is not a number in 1..1000" client "${STACK[@]}" "${PEER[@]}" --trials 0
expect xk-pingpong 2 "--trial-seconds: 'x' is not a number of seconds" client "${STACK[@]}" "${PEER[@]}" --trial-seconds x
expect xk-pingpong 2 "--csv: empty file name" client "${STACK[@]}" "${PEER[@]}" --csv ''
expect xk-pingpong 2 "are for the client" server "${STACK[@]}" --verify
expect xk-pingpong 2 "--tcp-port and --count are for the server" client "${STACK[@]}" "${PEER[@]}" --count 3
expect xk-pingpong 2 "--peer is for the client" server "${STACK[@]}" "${PEER[@]}"
expect xk-pingpong 2 "--echo: whole or stream" client "${STACK[@]}" "${PEER[@]}" --echo both

# xk-echo (no role word)
expect xk-echo 0 "usage: xk-echo" --help
expect xk-echo 2 "^xk-echo: --port DEVARGS is required" --ip 192.0.2.1/24
expect xk-echo 2 "^xk-echo: unknown option '--frob'" "${STACK[@]}" --frob
expect xk-echo 2 "leave nothing to serve" "${STACK[@]}" --tcp-only --udp-only
expect xk-echo 2 "--group is for the TCP port" "${STACK[@]}" --udp-only --group
expect xk-echo 2 "--udp-port: '0' is not a number in 1..65535" "${STACK[@]}" --udp-port 0
expect xk-echo 2 "--tcp-only" "${STACK[@]}" --tcp-only=yes
# several stacks: a node's behind filterd only, 1..64, CPUs a list of numbers
expect xk-echo 2 "--stacks: several stacks are a node's behind filterd" "${STACK[@]}" --stacks 2
expect xk-echo 2 "--stacks: '0' is not a number in 1..64" --filterd /nonexistent.sock --stacks 0
expect xk-echo 2 "--stacks: '65' is not a number in 1..64" --filterd /nonexistent.sock --stacks 65
expect xk-echo 2 "--cpus: 'x' is not a number in 0..4095" --filterd /nonexistent.sock --stacks 2 --cpus 0,x
expect xk-echo 2 "--cpus: empty CPU list" --filterd /nonexistent.sock --stacks 2 --cpus ''
expect xk-echo 2 "--cpus goes with --stacks K" --filterd /nonexistent.sock --cpus 0
expect xk-echo 2 "--stacks serves TCP" --filterd /nonexistent.sock --stacks 2 --udp-only
expect xk-echo 2 "--stacks: a node on another host \(--filterd tcp:...\) runs one stack" --filterd tcp:203.0.113.1:7500 --port net_null0 --stacks 2

# xk-ttcp (roles receive/transmit, -r/-t)
expect xk-ttcp 0 "usage: xk-ttcp" --help
expect xk-ttcp 0 "--connections N" -t -h
expect xk-ttcp 2 "^xk-ttcp: missing role: receive or transmit"
expect xk-ttcp 2 "^xk-ttcp: unknown role 'bogus': expected receive \\(-r\\) or transmit \\(-t\\)" bogus
expect xk-ttcp 2 "^xk-ttcp: unknown option '--frob'" receive "${STACK[@]}" --frob
expect xk-ttcp 2 "^xk-ttcp: --port DEVARGS is required" -r --ip 192.0.2.1/24
expect xk-ttcp 2 "^xk-ttcp: --ip: '300.1.1.1/24' is not an address/prefix" -r --port net_null0 --ip 300.1.1.1/24
expect xk-ttcp 2 "^xk-ttcp: --csum: expected on or off, got 'maybe'" -r "${STACK[@]}" --csum maybe
expect xk-ttcp 2 "--filterd gives the port and the address" -r --filterd /run/x.sock --ip 192.0.2.1/24
# an shm port (docs/shm-driver.md): its own errors, named
expect xk-ttcp 1 "shm 'net0': cannot build: shm: path must be 1..107 bytes" -r --port shm: --ip 192.0.2.1/24
expect xk-ttcp 1 "shm 'net0': role=boss: expected one of server\|client" -r --port shm:/tmp/x.sock,role=boss --ip 192.0.2.1/24
expect xk-ttcp 1 "shm: bind /nonexistent/x.sock: No such file or directory" -r --port shm:/nonexistent/x.sock,role=server \
  --ip 192.0.2.1/24
expect xk-ttcp 2 "transmit: --peer A.B.C.D:PORT or \[X:X::X\]:PORT is required" transmit "${STACK[@]}"
expect xk-ttcp 2 "--peer port: '0' is not a number in 1..65535" -t "${STACK[@]}" --peer 192.0.2.2:0
expect xk-ttcp 2 "--peer: '192.0.2' is not an address" -t "${STACK[@]}" --peer 192.0.2:5
expect xk-ttcp 2 "--peer: expected A.B.C.D:PORT" -t "${STACK[@]}" --peer 192.0.2.2
expect xk-ttcp 2 "--peer is for transmit" -r "${STACK[@]}" "${PEER[@]}"
expect xk-ttcp 2 "--bytes is for transmit" -r "${STACK[@]}" --bytes 1m
expect xk-ttcp 2 "--seconds is for transmit" -r "${STACK[@]}" --seconds 1
expect xk-ttcp 2 "--seed is for transmit" -r "${STACK[@]}" --seed 3
expect xk-ttcp 2 "--label is for transmit" -r "${STACK[@]}" --label x
expect xk-ttcp 2 "--tcp-port is for receive" -t "${STACK[@]}" "${PEER[@]}" --tcp-port 5001
expect xk-ttcp 2 "--connections: '0' is not a number in 1..65536" -t "${STACK[@]}" "${PEER[@]}" --connections 0
expect xk-ttcp 2 "--group is for receive" -t "${STACK[@]}" "${PEER[@]}" --group
expect xk-ttcp 2 "--progress is for receive" -t "${STACK[@]}" "${PEER[@]}" --progress 1
expect xk-ttcp 2 "--bytes: 'lots' is not a number" -t "${STACK[@]}" "${PEER[@]}" --bytes lots
expect xk-ttcp 2 "--bytes: '1x' is not a number" -t "${STACK[@]}" "${PEER[@]}" --bytes 1x
expect xk-ttcp 2 "--bytes and --seconds: give one of them" -t "${STACK[@]}" "${PEER[@]}" --bytes 1m --seconds 2
expect xk-ttcp 2 "--seconds: '0' is not a number of seconds" -t "${STACK[@]}" "${PEER[@]}" --seconds 0
expect xk-ttcp 2 "--seconds: '-1' is not a number of seconds" -t "${STACK[@]}" "${PEER[@]}" --seconds -1
expect xk-ttcp 2 "--seed: 'x' is not a number" -t "${STACK[@]}" "${PEER[@]}" --seed x
expect xk-ttcp 2 "--label: 1 to 200 characters, no spaces" -t "${STACK[@]}" "${PEER[@]}" --label 'a b'
expect xk-ttcp 2 "--label: 1 to 200 characters, no spaces" -t "${STACK[@]}" "${PEER[@]}" --label ''
expect xk-ttcp 2 "--label needs a value" -t "${STACK[@]}" "${PEER[@]}" --label
expect xk-ttcp 2 "--tcp-port: '0' is not a number in 1..65535" -r "${STACK[@]}" --tcp-port 0
expect xk-ttcp 2 "--connections: '0' is not a number in 1..65536" -r "${STACK[@]}" --connections 0
expect xk-ttcp 2 "--connections: 'many' is not a number" -r "${STACK[@]}" --connections many
expect xk-ttcp 2 "--group takes no value" -r "${STACK[@]}" --group=yes
expect xk-ttcp 2 "--progress: 'x' is not a number of seconds" -r "${STACK[@]}" --progress x
expect xk-ttcp 2 "--buflen: 1 byte to 64m" -r "${STACK[@]}" --buflen 0
expect xk-ttcp 2 "--buflen: 1 byte to 64m" -t "${STACK[@]}" "${PEER[@]}" --buflen 65m
expect xk-ttcp 2 "--buflen: 'big' is not a number of bytes" -t "${STACK[@]}" "${PEER[@]}" --buflen big
expect xk-ttcp 2 "--sndbuf: 1 byte to 1g" -t "${STACK[@]}" "${PEER[@]}" --sndbuf 0
expect xk-ttcp 2 "--rcvbuf: 1 byte to 1g" -r "${STACK[@]}" --rcvbuf 2g
expect xk-ttcp 2 "--nodelay takes no value" -t "${STACK[@]}" "${PEER[@]}" --nodelay=1
expect xk-ttcp 2 "--verify: on or off" -r "${STACK[@]}" --verify maybe
expect xk-ttcp 2 "--timeout: '0' is not a number of seconds" -t "${STACK[@]}" "${PEER[@]}" --timeout 0
expect xk-ttcp 2 "--stats takes no value" -r "${STACK[@]}" --stats=on
expect xk-ttcp 2 "--idle: expected busy, sleep or yield" -r "${STACK[@]}" --idle lazy
expect xk-ttcp 2 "--link-wait: 'never' is not a number of seconds" -r "${STACK[@]}" --link-wait never
expect xk-ttcp 2 "--filterd: empty socket path" -r --filterd ''

# xk-udp-echo, xk-udp-perf
expect xk-udp-perf 2 "unknown mode 'bogus': expected server, pingpong or rate" bogus
expect xk-udp-perf 2 "--pps is for rate" server "${STACK[@]}" --pps 1000
expect xk-udp-perf 2 "--pps: '0' is not a number" rate "${STACK[@]}" --peer 192.0.2.1:9 --pps 0
expect xk-udp-echo 2 "unknown mode 'bogus': expected server or client" bogus

# xk-scale (no stack of its own: every case fails before a process starts)
expect xk-scale 0 "usage: xk-scale" --help
expect xk-scale 0 "--launcher local\|mpirun" run -h
expect xk-scale 2 "^xk-scale: unknown command 'bogus': expected run or rank" bogus
expect xk-scale 2 "^xk-scale: unknown option '--frob'" --frob
expect xk-scale 2 "^xk-scale: unknown option '--frob'" run --n 1 --frob
expect xk-scale 2 "--n: '0' is not a number in 1..256" --n 0
expect xk-scale 2 "--n: '300' is not a number in 1..256" --n 1,300
expect xk-scale 2 "--n: empty item in '1,,2'" --n 1,,2
expect xk-scale 2 "--n: '2' is listed twice" --n 2,1,2
expect xk-scale 2 "--n needs a value" --n
expect xk-scale 2 "--modes: expected steer, central or standalone, got 'fast'" --modes steer,fast
expect xk-scale 2 "--modes standalone runs at N=1 only" --modes steer,standalone --n 2,4
expect xk-scale 2 "--csum: expected on or off, got 'maybe'" --csum maybe
expect xk-scale 2 "--bytes: 'lots' is not a number" --bytes lots
expect xk-scale 2 "--bytes: at least 1 byte per connection" --bytes 0
expect xk-scale 2 "--bytes and --seconds: give one of them" --bytes 1m --seconds 2
expect xk-scale 2 "--seconds: '0' is not a number of seconds" --seconds 0
expect xk-scale 2 "--repeat: '0' is not a number in 1..100" --repeat 0
expect xk-scale 2 "--conns-per-node: '0' is not a number in 1..4096" --conns-per-node 0
expect xk-scale 2 "--conns-per-node: '5000' is not a number in 1..4096" --conns-per-node 1,5000
expect xk-scale 2 "N=8 x --conns-per-node 4096 = 32768 connections: beyond the 16384 ephemeral ports filterd leases" \
  --n 1,8 --conns-per-node 4096
expect xk-scale 2 "--conns: '0' is not a number in 1..16384" --conns 0,4
expect xk-scale 2 "--conns: '20000' is not a number in 1..16384" --conns 20000
expect xk-scale 2 "--conns 6: beyond N=4 nodes, a multiple of it" --n 1,4 --conns 1,6
expect xk-scale 2 "--conns 16384: 8192 connections a node, beyond the 4096 ports filterd leases a node" --n 2 --conns 16384
expect xk-scale 2 "--mtu: '9001' is not a number in 576..9000" --mtu 9001
expect xk-scale 2 "--frame-max: '65536' is not a number in 0..65535" --frame-max 65536
expect xk-scale 2 "--frame-max is for the memif external link" --remote linux --csum on --frame-max 9000
expect xk-scale 2 "--family: expected 4 or 6, got '5'" --family 5
expect xk-scale 2 "--shared 2001:db8::10/64 is IPv6, --family 4: give --family 6" --shared 2001:db8::10/64
expect xk-scale 2 "--shared: '2001:db8::10' is not ADDR/LEN" --shared 2001:db8::10
expect xk-scale 2 "--peer-ip 192.0.2.1 is not of --family 6" --family 6 --peer-ip 192.0.2.1
expect xk-scale 2 "--peer-ip: .nowhere. is not an address" --peer-ip nowhere --n 1
expect xk-scale 2 "--peer-ip 198.51.100.1: the receiver is on the link" --peer-ip 198.51.100.1
expect xk-scale 2 "--peer-ip 2001:db8::20: the receiver is on the link" --family 6 --shared 2001:db8:1::10/64
expect xk-scale 2 "--buflen: 1 byte to 64m" --buflen 0
expect xk-scale 2 "--launcher: expected local or mpirun, got 'slurm'" --launcher slurm
expect xk-scale 2 "--remote: expected xk, xk-filterd or linux, got 'vm'" --remote vm
expect xk-scale 2 "--remote linux: Linux checks the checksum.*give --csum on" --remote linux
expect xk-scale 2 "--idle: expected busy, sleep or yield, got 'nap'" --idle nap
expect xk-scale 2 "--filterd-idle: expected spin, busy or yield, got 'nap'" --filterd-idle nap
expect xk-scale 2 "--verify: expected on or off" --verify=1
expect xk-scale 2 "--timeout: 'x' is not a number of seconds" --timeout x
expect xk-scale 2 "--program: '/nonexistent/xk-ttcp' is not an executable file" --program /nonexistent/xk-ttcp
expect xk-scale 2 "--filterd-bin: '/etc/passwd' is not an executable file" --filterd-bin /etc/passwd
expect xk-scale 2 "--results: empty folder name" --results ''
expect xk-scale 2 "--mpirun-args is for --launcher mpirun" --mpirun-args '--hostfile h'
expect xk-scale 2 "--node-port and --rank-port go together" --node-port net_af_packet0,iface=x
expect xk-scale 2 "--node-port and --rank-port go together" --rank-port 'net_af_packet0,iface=eth%r'
expect xk-scale 2 "--rank-port: empty devargs" --node-port x --rank-port ''
expect xk-scale 2 "--node-control, --control-token .* give --node-port and --rank-port" --node-control 127.0.0.1:7000
expect xk-scale 2 "--node-control, --control-token .* give --node-port and --rank-port" --control-token /tmp/t
expect xk-scale 2 "--node-control: expected A.B.C.D:PORT" --node-port x --rank-port y --node-control localhost
expect xk-scale 2 "--node-port: central mode relays to memif nodes only" --node-port x --rank-port y
expect xk-scale 2 "rank: missing the program to run" rank
expect xk-scale 2 "rank: missing the program to run" rank --
expect xk-scale 2 "not started by mpirun" rank -- /bin/true

echo "$cases cases, $fails failed"
[ "$fails" -eq 0 ] && [ "$cases" -ge 40 ]
