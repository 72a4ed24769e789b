#!/usr/bin/env bash
# Where the cycles go in a bulk transfer: xk-tcp-perf client and
# sink server over the shm link (or net_memif), each sampled by `perf record -e cpu-clock`
# (software events work in a VM), then the top symbols of each side, and the
# share of samples spent in the Internet checksum (the checksum ablation's
# cost, in CPU seconds per GB: share x the side's CPU s/GB).
#
#   tests/bench/profile_bulk.sh [BUILD_DIR]      (perf from linux-perf)
#   XK_PROF_LINK    shm (default, xk's own link) or memif
#   XK_PROF_MTU     MTU (default 1500)
#   XK_PROF_CSUM    on|off (default on)
#   XK_PROF_BYTES   bytes to send (default 8g)
#   XK_PROF_TOP     symbols shown per side (default 25)
#   XK_PROF_OUT     keep perf-{client,server}.data here (default: a temp dir, removed)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(readlink -f "${1:-$HERE/../../build/release}")
PERF_APP=$BUILD/apps/tcp-perf/xk-tcp-perf
[ -x "$PERF_APP" ] || { echo "profile_bulk: $PERF_APP is missing" >&2; exit 1; }
command -v perf > /dev/null || { echo "profile_bulk: needs perf (apt-get install linux-perf)" >&2; exit 1; }
LINK=${XK_PROF_LINK:-shm}
MTU=${XK_PROF_MTU:-1500}
CSUM=${XK_PROF_CSUM:-on}
BYTES=${XK_PROF_BYTES:-8g}
TOP=${XK_PROF_TOP:-25}
OUT=${XK_PROF_OUT:-$(mktemp -d /tmp/xk-prof.XXXXXX)}
mkdir -p "$OUT"
SOCK=$OUT/link.sock
case $LINK in
  shm) SPORT="shm:$SOCK,role=server" CPORT="shm:$SOCK" ;;
  memif) SPORT="net_memif0,role=server,id=0,socket=$SOCK" CPORT="net_memif1,role=client,id=0,socket=$SOCK" ;;
  *) echo "profile_bulk: XK_PROF_LINK is shm or memif" >&2; exit 2 ;;
esac
SRV=
cleanup() {
  [ -z "$SRV" ] || kill "$SRV" 2> /dev/null || true
  [ -n "${XK_PROF_OUT:-}" ] || rm -rf "$OUT"
}
trap cleanup EXIT

echo "machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs, kernel $(uname -r)"
echo "bulk over $LINK: MTU $MTU, checksum $CSUM, $BYTES, sink reading into its own buffer (--read copy)"
"$PERF_APP" server --port "$SPORT" --port-opts "mtu=$MTU" --ip 192.0.2.10/24 \
  --csum "$CSUM" --count 1 --verify off > "$OUT/server.log" 2>&1 &
SRV=$!
for _ in $(seq 100); do grep -q "waiting for the link" "$OUT/server.log" && break; sleep 0.1; done
perf record -e cpu-clock -F 4999 -g -o "$OUT/perf-server.data" -p "$SRV" > /dev/null 2>&1 &
REC=$!
perf record -e cpu-clock -F 4999 -g -o "$OUT/perf-client.data" -- \
  "$PERF_APP" client --port "$CPORT" --port-opts "mtu=$MTU" --ip 192.0.2.11/24 \
  --peer 192.0.2.10:5001 --csum "$CSUM" --bytes "$BYTES" --verify off > "$OUT/client.log" 2>&1
wait "$SRV"
SRV=
wait "$REC" || true
grep '^RESULT' "$OUT/server.log" "$OUT/client.log" | sed 's/^[^:]*://'
for side in client server; do
  # CPU seconds over the transfer per GB.
  cpu=$(awk '/^RESULT/ { for (i = 1; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] } }
             END { if (v["bytes"] > 0) printf "%.3f", v["xfer_cpu_s"] / (v["bytes"] / 1e9) }' "$OUT/$side.log")
  echo
  echo "== $side (CPU s/GB ${cpu:-?}): top $TOP symbols, self time"
  report() { perf report -i "$OUT/perf-$side.data" --no-children -g none "$@" 2> /dev/null | grep -E '^ +[0-9]' || true; }
  report --sort dso,symbol | cut -c1-110 | head -"$TOP" || true
  # The checksum kernels, and memif's copies (its symbols are stripped: the
  # whole PMD library), for the record.
  share=$(report --sort symbol | awk '/csum|checksum|cksum/ { gsub("%", "", $1); s += $1 } END { printf "%.1f", s }')
  if [ "$LINK" = memif ]; then
    pmd=$(report --sort dso | awk '/librte_net_memif/ { gsub("%", "", $1); s += $1 } END { printf "%.1f", s }')
    echo "   memif PMD (its ring copies): $pmd % of samples"
  fi
  copies=$(report --sort symbol | awk '/memmove|memcpy|copy_avx2/ { gsub("%", "", $1); s += $1 } END { printf "%.1f", s }')
  echo "   the program's copies into and out of the stack: $copies % of samples"
  echo "   checksum: $share % of samples$( [ -n "$cpu" ] && awk -v s="$share" -v c="$cpu" \
    'BEGIN { printf " = %.3f CPU s/GB", s / 100 * c }')"
done
