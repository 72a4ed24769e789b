#!/usr/bin/env bash
# SYN flood against a bulk transfer (docs/BENCHMARKS.md, "SYN flood").
#
#   tests/bench/synflood_bench.sh [BUILD_DIR]
#
# An xk server (xk-tcp-perf server, sink) on one end of a net_memif link; on
# the other end one xk stack (tests/tools/synflood.cpp, xk-synflood) sends a
# bulk stream to it and, on the same link, floods its port with SYNs from
# spoofed addresses of 203.0.113.0/24 at each rate of XK_FLOOD_RATES (SYNs
# per second; "max": as fast as the flooder's loop can write them). The
# server's SYN queue (syn_backlog, 1024) fills at once and every later SYN is
# answered with a SYN cookie (RFC 4987), through its gateway (the client).
# While flooded the client also opens a probe connection every 50 ms: each
# must complete (the listener keeps answering new clients).
#
# Every flooded run is paired with an unflooded one just before it (same
# probes, same length) and the ratio is taken within the pair: this VM's
# speed drifts by tens of per cent over minutes, a reference taken once would
# not do. XK_BENCH_REPEAT pairs per rate; the table shows the median ratio.
# Each rate gets a fresh server, whose counters say how many cookies it sent
# and how many came back valid (the probes').
#
# Two cores: the server busy-polls one, the client (bulk sender and flooder
# in one loop) the other. The flooder therefore takes time from the client's
# own sending too; its CPU is in the client's column.
#
#   XK_BENCH_SECONDS (3 per run), XK_BENCH_REPEAT (3),
#   XK_FLOOD_RATES ("100000 300000 1000000 max")
set -euo pipefail
TEST_NAME=synflood_bench
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../integration/lib.sh"

BUILD=$(readlink -f "${1:-$HERE/../../build/release}")
PERF=$BUILD/apps/tcp-perf/xk-tcp-perf
FLOOD=$BUILD/tests/xk-synflood
[ -x "$PERF" ] && [ -x "$FLOOD" ] || die "$PERF or $FLOOD is missing: build the release preset first"
SECS=${XK_BENCH_SECONDS:-3}
REPEAT=${XK_BENCH_REPEAT:-3}
RATES=${XK_FLOOD_RATES:-100000 300000 1000000 max}

OUT=$(mktemp -d /tmp/xk-synflood.XXXXXX)
MEMIF=$OUT/memif.sock
install_cleanup

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" "$2" | head -1; }
counter() { awk -v n="$2" '$1 == "tcp0" && $2 == n { print $3 }' "$1"; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# run_client LOG RATE: one bulk run; prints "gbps flood_rate probes probes_ok probe_ms_max cpu_s ok".
run_client() {
  local log=$1 rate=$2 rc=0
  timeout 120 "$FLOOD" --port "net_memif1,role=client,id=0,socket=$MEMIF" --ip 192.0.2.11/24 \
    --peer 192.0.2.10:5001 --seconds "$SECS" --flood-rate "$rate" > "$log" 2>&1 || rc=$?
  [ $rc -le 1 ] || { tail "$log" >&2; die "xk-synflood exited with $rc (see $log)"; }
  grep -q '^RESULT' "$log" || { tail "$log" >&2; die "no RESULT in $log"; }
  echo "$(field gbps "$log") $(field flood_rate "$log") $(field probes "$log") $(field probes_ok "$log")" \
       "$(field probe_ms_max "$log") $(field cpu_s "$log") $((rc == 0))"
}

declare -A ROW
step "xk over memif: $REPEAT pairs of $SECS s runs (unflooded, flooded) per rate: $RATES"
for rate in $RATES; do
  slog=$OUT/server-$rate.log
  rm -f "$MEMIF"
  "$PERF" server --port "net_memif0,role=server,id=0,socket=$MEMIF" --ip 192.0.2.10/24 --gw 192.0.2.11 \
    --verify off > "$slog" 2>&1 &
  srv=$!
  PIDS+=("$srv")
  wait_for "$slog" "waiting for the link" "$srv" 30
  ratios="" base_all="" flood_all="" sent_all="" cpu_all="" probes=0 probes_ok=0 probe_max=0 flood_secs=0 failed=0
  for i in $(seq "$REPEAT"); do
    read -r g0 _ p0 k0 m0 _ _ < <(run_client "$OUT/base-$rate-$i.log" 0)
    read -r g1 fr p1 k1 m1 c1 ok1 < <(run_client "$OUT/flood-$rate-$i.log" "$rate")
    ratios+=" $(awk -v a="$g1" -v b="$g0" 'BEGIN { printf("%.3f", (b > 0) ? a / b : 0) }')"
    base_all+=" $g0"
    flood_all+=" $g1"
    sent_all+=" $fr"
    cpu_all+=" $c1"
    probes=$((probes + p0 + p1))
    probes_ok=$((probes_ok + k0 + k1))
    probe_max=$(awk -v a="$probe_max" -v b="$m0" -v c="$m1" 'BEGIN { m = a; if (b > m) m = b; if (c > m) m = c; print m }')
    flood_secs=$(awk -v a="$flood_secs" -v b="$(field seconds "$OUT/flood-$rate-$i.log")" 'BEGIN { print a + b }')
    [ "$ok1" = 1 ] || failed=$((failed + 1))
    echo "   rate $rate, pair $i: unflooded $g0 Gbit/s, flooded $g1 Gbit/s ($fr SYN/s sent), probes $((k0 + k1))/$((p0 + p1))"
  done
  stop "$srv" || die "the server failed under rate $rate (see $slog)"
  cookies=$(counter "$slog" syncookies_sent)
  cookies_ok=$(counter "$slog" syncookies_ok)
  ROW[$rate]="$(median <<< "$base_all") $(median <<< "$flood_all") $(median <<< "$ratios") $(median <<< "$sent_all")"
  ROW[$rate]+=" $(awk -v c="$cookies" -v s="$flood_secs" 'BEGIN { printf("%.0f", (s > 0) ? c / s : 0) }') $cookies_ok"
  ROW[$rate]+=" $probes_ok/$probes $probe_max $failed"
  [ "${cookies:-0}" -gt 0 ] || die "rate $rate: the server sent no SYN cookie (see $slog)"
done

echo
echo "SYN flood on the bulk transfer's link: xk <-> xk over net_memif, $SECS s runs, median of $REPEAT pairs"
printf "%-9s %11s %11s %7s %12s %12s %9s %10s %13s\n" "flood" "unflooded" "flooded" "ratio" "SYN/s sent" \
  "cookies/s" "cookie ok" "probes ok" "probe max ms"
for rate in $RATES; do
  read -r b f r s c cok pr pm failed <<< "${ROW[$rate]}"
  printf "%-9s %11s %11s %6sx %12s %12s %9s %10s %13s%s\n" "$rate" "$b" "$f" "$r" "$s" "$c" "$cok" "$pr" "$pm" \
    "$([ "$failed" = 0 ] || echo "  ($failed flooded runs failed)")"
done
echo "  Gbit/s of the bulk stream; ratio = flooded / unflooded within each pair (target >= 0.80 at the highest rate)."
echo "  cookies/s: SYN-ACK cookies the server sent per second of flooded run; cookie ok: third segments it"
echo "  accepted by cookie (the probes' that came while flooded). Both ends busy-poll one core each."
