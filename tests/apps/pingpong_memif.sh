#!/usr/bin/env bash
# apps.pingpong_memif: a short xk-pingpong sweep between two xk stacks over
# net_memif (no root needed), every echoed byte checked (--verify): the table
# and the CSV hold every size of NetPIPE's schedule from 1 byte to 64 KiB, in
# order, with positive times and rates, and the client exits 0. Then the two
# echo modes, read back from the server's capture: with --echo whole (the
# default) no byte of a 64 KiB message goes back before its last byte came
# in, as NetPIPE's receiver does; with --echo stream the echo starts while
# the message still arrives; and each mode refuses the other's peer with a
# message saying so.
#
#   pingpong_memif.sh XK_PINGPONG
set -euo pipefail
PP=$(readlink -f "${1:?usage: pingpong_memif.sh XK_PINGPONG}")
OUT=$PWD/pingpong_memif.out
rm -rf "$OUT"
mkdir -p "$OUT"
SOCK=$OUT/memif.sock
SERVER_PID=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  return 0
}
trap cleanup EXIT
die() { echo "pingpong_memif: FAIL: $*" >&2; exit 1; }

"$PP" server --port "net_memif0,role=server,id=0,socket=$SOCK" --ip 192.0.2.10/24 --count 1 --idle sleep \
  > "$OUT/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do
  log=$(cat "$OUT/server.log")
  [[ "$log" == *"waiting for the link"* ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || die "the server exited: $log"
  sleep 0.1
done
timeout 120 "$PP" client --port "net_memif1,role=client,id=0,socket=$SOCK" --ip 192.0.2.11/24 \
  --peer 192.0.2.10:5002 --max 64k --trial-seconds 0.002 --trials 2 --warmup 50 --verify --idle sleep \
  --csv "$OUT/sweep.csv" > "$OUT/client.log" 2>&1 || { cat "$OUT/client.log"; die "the client failed"; }
wait "$SERVER_PID" || die "the server failed: $(tail -5 "$OUT/server.log")"
SERVER_PID=
cat "$OUT/client.log"

# NetPIPE's schedule: 1, then 2^k - 3, 2^k, 2^k + 3 for 2^k up to 65536,
# within 1..65536 (45 sizes).
want=$(python3 -c '
s = {1}
p = 1
while p <= 65536:
    s.update(x for x in (p - 3, p, p + 3) if 1 <= x <= 65536)
    p *= 2
print(" ".join(map(str, sorted(s))))')
got=$(awk -F, 'NR > 1 { printf "%s%s", sep, $1; sep = " " }' "$OUT/sweep.csv")
[ "$(head -1 "$OUT/sweep.csv")" = "bytes,reps,half_rtt_us,mbit_s" ] || die "CSV header: $(head -1 "$OUT/sweep.csv")"
[ "$got" = "$want" ] || die "CSV sizes: got '$got', want '$want'"
n=$(echo "$want" | wc -w)
bad=$(awk -F, 'NR > 1 && !($2 >= 3 && $3 > 0 && $4 > 0)' "$OUT/sweep.csv")
[ -z "$bad" ] || die "rows with a bad count, time or rate: $bad"
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+$' "$OUT/client.log" || true)
[ "$rows" -eq "$n" ] || die "the table has $rows rows, want $n"
result=$(grep "^RESULT role=pingpong sizes=$n " "$OUT/client.log" || true)
[ -n "$result" ] || die "no RESULT line for $n sizes"

# One size, 64 KiB over an MTU of 1500 (45 segments a message): the server's
# capture in each echo mode. The server's receive window is 16 KiB, a
# quarter of a message, so a stream echo must send some of a message back
# before the rest can come, on any host and however the two are scheduled.
pair() {  # NAME SERVER-ECHO CLIENT-ECHO: one run; the client's status
  local name=$1 srv_echo=$2 cli_echo=$3 rc=0
  rm -f "$SOCK"
  "$PP" server --port "net_memif0,role=server,id=0,socket=$SOCK" --ip 192.0.2.10/24 --count 1 --idle sleep \
    --echo "$srv_echo" --tcp-opts "rcvbuf=16384" --capture "$OUT/$name.pcap" > "$OUT/$name-server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do
    grep -q "waiting for the link" "$OUT/$name-server.log" && break
    kill -0 "$SERVER_PID" 2>/dev/null || die "the $name server exited: $(cat "$OUT/$name-server.log")"
    sleep 0.1
  done
  timeout 60 "$PP" client --port "net_memif1,role=client,id=0,socket=$SOCK" --ip 192.0.2.11/24 \
    --peer 192.0.2.10:5002 --min 64k --max 64k --perturb 0 --warmup 2 --trials 1 --trial-seconds 0.001 \
    --timeout 3 --echo "$cli_echo" --idle sleep > "$OUT/$name-client.log" 2>&1 || rc=$?
  wait "$SERVER_PID" || true
  SERVER_PID=
  return "$rc"
}
# The server's capture as "direction length" lines, data segments only: 0
# for the client's bytes coming in, 1 for the echo going out.
segments() {
  tshark -r "$OUT/$1.pcap" -Y "tcp.len > 0" -T fields -e tcp.srcport -e tcp.len 2>/dev/null |
    awk '{ print ($1 == 5002) ? 1 : 0, $2 }'
}
# How many times an echo segment left while the message it belongs to was
# still coming in: the server has sent out beyond what it has received, in
# whole messages of 65536 bytes (the run headers, 16 bytes in and 8 out,
# are segments of their own: the client sends a header only when nothing
# else is under way).
overlaps() {
  segments "$1" | awk '
    ($1 == 0 && $2 == 16) || ($1 == 1 && $2 == 8) { next }   # a run header or its answer
    $1 == 0 { got += $2; next }
    { msg = int(sent / 65536); if (got < (msg + 1) * 65536) n++; sent += $2 }
    END { print n + 0 }'
}

pair whole whole whole || die "--echo whole failed: $(tail -3 "$OUT/whole-client.log")"
pair stream stream stream || die "--echo stream failed: $(tail -3 "$OUT/stream-client.log")"
[ "$(segments whole | awk '$1 == 1' | wc -l)" -ge 100 ] || die "the whole-echo capture holds too few echo segments"
n=$(overlaps whole)
[ "$n" -eq 0 ] || die "--echo whole: $n echo segments left before their message was all in"
n=$(overlaps stream)
[ "$n" -gt 0 ] || die "--echo stream: no echo segment left before its message was all in (the check sees nothing)"

if pair mixed1 stream whole; then die "a --echo whole client ran against a stream echo"; fi
grep -q "the server echoed the run header" "$OUT/mixed1-client.log" ||
  die "no clear error for a whole client against a stream echo: $(tail -2 "$OUT/mixed1-client.log")"
if pair mixed2 whole stream; then die "a --echo stream client ran against a whole-message server"; fi
grep -qE "did not start a run|inside a run header" "$OUT/mixed2-server.log" ||
  die "no clear error from a whole server with a stream client: $(tail -2 "$OUT/mixed2-server.log")"
echo "pingpong_memif: OK"
