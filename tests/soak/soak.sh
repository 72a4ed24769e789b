#!/bin/bash
# soak.sh [BUILD_DIR]: the soak test (docs/soak.md). Two xk stacks over
# net_memif (no root), each with a fault layer under its TCP that loses,
# reorders, duplicates and corrupts segments; xk-soak runs connections that
# open, carry 0..N bytes each way (every byte checked) and close, for an hour
# by default. At the end it fails unless
#   - every connection carried its bytes intact (no failure, no mismatch),
#   - nothing is stuck: both ends' TCP tables empty once TIME-WAIT ran out,
#     and no connection still open,
#   - the counters agree: the client's active opens = the server's passive
#     opens = the connections made; the faults were injected (lost, corrupted)
#     and TCP saw them (retransmits, segments dropped for a bad checksum),
#   - memory does not grow: with everything closed at the end, the heap is at
#     most 1 MiB over its peak in the first half of the run, on both ends.
#
# Environment:
#   XK_SOAK_SECONDS    how long to start connections (default 3600)
#   XK_SOAK_REPORT     seconds between progress lines (default 60)
#   XK_SOAK_PARALLEL   connections in flight (default 16)
#   XK_SOAK_MAX_BYTES  bytes per connection at most (default 262144)
#   XK_SOAK_FAULTS     the fault layer's options (default
#                      "loss=0.002 reorder=0.002 duplicate=0.001 corrupt=0.001 dir=tx": each
#                      segment meets the faults once, on its sender's way out)
#   XK_SOAK_OUT        where the logs go (default BUILD_DIR/soak.out)
set -euo pipefail
BUILD=$(readlink -f "${1:-build/release}")
SOAK=$BUILD/tests/xk-soak
[ -x "$SOAK" ] || { echo "soak: no $SOAK (build first: cmake --build $BUILD)" >&2; exit 1; }
SECONDS_RUN=${XK_SOAK_SECONDS:-3600}
REPORT=${XK_SOAK_REPORT:-60}
PARALLEL=${XK_SOAK_PARALLEL:-16}
MAX_BYTES=${XK_SOAK_MAX_BYTES:-262144}
FAULTS=${XK_SOAK_FAULTS:-"loss=0.002 reorder=0.002 duplicate=0.001 corrupt=0.001 dir=tx"}
OUT=${XK_SOAK_OUT:-$BUILD/soak.out}
rm -rf "$OUT"
mkdir -p "$OUT"
SOCK=$OUT/memif.sock

die() { echo "soak: FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -f "$SOCK"
}
trap cleanup EXIT

# graph NAME ROLE IP SEED: a stack on one end of the memif link, with the
# fault layer between IP and TCP (in both directions).
graph() {
  cat > "$OUT/$1.graph" <<EOF
dpdk    net0  devargs=net_memif$2,role=$2,id=0,socket=$SOCK
eth     eth0  below=net0
arp     arp0  below=eth0
ipv4    ip0   below=eth0,arp0 addr=$3/24
icmp    icmp0 below=ip0
udp     udp0  below=ip0
fault   f0    below=ip0 $FAULTS seed=$4
tcp     tcp0  below=f0 rto_min_ms=20 msl_ms=500
EOF
}
graph server server 192.0.2.10 1
graph client client 192.0.2.11 2
COUNTERS=tcp0.active_opens,tcp0.passive_opens,tcp0.retransmits,tcp0.drop_bad_csum,tcp0.drop_paws,tcp0.drop_out_of_window,tcp0.drop_ack_unacceptable,tcp0.challenge_acks,tcp0.challenge_acks_limited,tcp0.time_wait_reused,f0.tx_lost,f0.rx_lost,f0.tx_corrupted,f0.rx_corrupted,f0.tx_duplicated,f0.tx_reordered

step "soak for ${SECONDS_RUN} s: $PARALLEL connections in flight, 0..$MAX_BYTES bytes each, faults: $FAULTS"
XK_GRAPH=$OUT/server.graph XK_IDLE=spin "$SOAK" server --backend xk --listen 192.0.2.10:5001 --report "$REPORT" \
  --drain 5 --counters "$COUNTERS" > "$OUT/server.log" 2>&1 &
SERVER=$!
PIDS+=("$SERVER")
# The server's stack waits for its link, which comes up when the client's
# stack is there. DPDK 22.11's memif client tries its server once, when its
# port starts: the client goes once the server's memif socket is bound (and
# takes a refusal before the server listens as "not yet").
for _ in $(seq 100); do grep -q "$SOCK" /proc/net/unix && break; sleep 0.1; done
grep -q "$SOCK" /proc/net/unix || { cat "$OUT/server.log" >&2; die "the server's memif socket did not appear"; }
rc=0
XK_GRAPH=$OUT/client.graph XK_IDLE=spin "$SOAK" client --backend xk --peer 192.0.2.10:5001 --seconds "$SECONDS_RUN" \
  --parallel "$PARALLEL" --max-bytes "$MAX_BYTES" --report "$REPORT" --drain 5 --counters "$COUNTERS" \
  > "$OUT/client.log" 2>&1 || rc=$?
grep -q "ready" "$OUT/server.log" || { cat "$OUT/server.log" "$OUT/client.log" >&2; die "the server did not come up"; }
kill -TERM "$SERVER"
src=0
wait "$SERVER" || src=$?
PIDS=()
grep -E "^(PROGRESS|RESULT)" "$OUT/client.log" | tail -3 | sed 's/^/   /'
grep -E "^RESULT" "$OUT/server.log" | sed 's/^/   /'
grep -v -E "^(PROGRESS|RESULT)|mp action|: ready$" "$OUT/client.log" "$OUT/server.log" | sed 's/^/   /' || true

field() {  # field LOG KEY: KEY's value in LOG's RESULT line
  sed -n "s/^RESULT .*[ ]$2=\([^ ]*\).*/\1/p" "$1"
}
C=$OUT/client.log
S=$OUT/server.log
[ -n "$(field "$C" conns)" ] || die "the client reported no result (exit $rc)"
[ -n "$(field "$S" conns)" ] || die "the server reported no result (exit $src)"
[ "$(field "$C" failures)" = 0 ] || die "$(field "$C" failures) client connections failed"
[ "$(field "$C" mismatches)" = 0 ] || die "$(field "$C" mismatches) connections echoed wrong bytes"
[ "$(field "$S" failures)" = 0 ] || die "$(field "$S" failures) server connections failed"
[ "$(field "$C" left)" = 0 ] || die "the client's TCP table kept $(field "$C" left) connections"
[ "$(field "$S" left)" = 0 ] || die "the server's TCP table kept $(field "$S" left) connections"
[ "$rc" = 0 ] || die "the client exited $rc"
[ "$src" = 0 ] || die "the server exited $src"
conns=$(field "$C" conns)
[ "$conns" -gt 0 ] || die "no connection was made"
[ "$(field "$S" conns)" = "$conns" ] || die "the server served $(field "$S" conns) connections, the client made $conns"
# Connections refused while the server was still coming up were opened by
# the client's TCP and tried again: in its count, not in conns.
refused=$(field "$C" refused)
[ "$(field "$C" tcp0.active_opens)" = "$(( conns + refused ))" ] ||
  die "the client's TCP counted $(field "$C" tcp0.active_opens) active opens for $conns connections ($refused refused at the start)"
[ "$(field "$S" tcp0.passive_opens)" = "$conns" ] ||
  die "the server's TCP counted $(field "$S" tcp0.passive_opens) passive opens for $conns connections"
sum() {  # sum KEY...: over both ends' RESULT lines
  local t=0 k
  for k in "$@"; do t=$(( t + $(field "$C" "$k") + $(field "$S" "$k") )); done
  echo "$t"
}
lost=$(sum f0.tx_lost f0.rx_lost)
corrupted=$(sum f0.tx_corrupted f0.rx_corrupted)
retrans=$(sum tcp0.retransmits)
badcsum=$(sum tcp0.drop_bad_csum)
echo "   faults: $lost lost, $corrupted corrupted, $(sum f0.tx_duplicated) duplicated, $(sum f0.tx_reordered) reordered;" \
     "TCP: $retrans retransmits, $badcsum dropped for a bad checksum"
case "$FAULTS" in *loss=0[^.]*|*loss=0) ;; *loss=*) [ "$lost" -gt 0 ] && [ "$retrans" -gt 0 ] ||
  die "loss was asked for: $lost lost, $retrans retransmits" ;; esac
# A flipped bit always fails the checksum; a segment corrupted on its way
# out may still be lost on the way in, so some need not arrive.
case "$FAULTS" in *corrupt=0[^.]*|*corrupt=0) ;; *corrupt=*) [ "$badcsum" -gt 0 ] && [ "$badcsum" -le "$corrupted" ] ||
  die "corrupted segments must fail TCP's checksum: $corrupted corrupted, $badcsum dropped" ;; esac

# Memory: a leak raises what is left once every connection is gone. The
# heap at the end (RESULT, all closed, TIME-WAIT over) must not exceed the
# peak of the first half of the run (when connections were in flight, their
# buffers included) by more than 1 MiB; over an hour, a few bytes lost per
# connection would. The peaks of both halves are shown for the trend.
for log in "$C" "$S"; do
  read -r first second n < <(awk '/^PROGRESS/ { for (i = 1; i <= NF; i++) if ($i ~ /^heap_kb=/) { split($i, kv, "="); h[++n] = kv[2] } }
    END { a = 0; b = 0; for (i = 1; i <= n; i++) { if (i <= n / 2) { if (h[i] > a) a = h[i] } else if (h[i] > b) b = h[i] }
          print a, b, n }' "$log")
  [ "$n" -ge 4 ] || die "$(basename "$log"): only $n progress lines: run longer or report more often"
  end=$(field "$log" heap_kb)
  limit=$(( first + 1024 ))
  echo "   $(basename "$log" .log): heap peak ${first} KiB in the first half, ${second} KiB in the second;" \
       "${end} KiB at the end (limit $limit)"
  [ "$end" -le "$limit" ] || die "$(basename "$log" .log)'s heap grew: ${end} KiB left at the end"
done
echo "soak: PASS: $conns connections in ${SECONDS_RUN} s, every byte intact, nothing left behind"
