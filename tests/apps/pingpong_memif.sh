#!/usr/bin/env bash
# apps.pingpong_memif: a short xk-pingpong sweep between two xk stacks over
# net_memif (no root needed), every echoed byte checked (--verify): the table
# and the CSV hold every size of NetPIPE's schedule from 1 byte to 64 KiB, in
# order, with positive times and rates, and the client exits 0.
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
echo "pingpong_memif: OK"
