# Shared by the integration scripts (source it after setting TEST_NAME).
# Gives: die, step (with elapsed time), wait_for, stop, check_pcap, and the
# PIDS array that the script's EXIT trap kills.

die() { echo "$TEST_NAME: FAIL: $*" >&2; exit 1; }

T0=$(date +%s.%N)
elapsed() { awk -v t0="$T0" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.1f", t1 - t0 }'; }
step() { echo "== [$(elapsed) s] $*"; }

PIDS=()
# Sends SIGTERM to every process in PIDS, then SIGKILL after 5 s.
kill_all() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
}

# A sanitizer build is several times slower: scripts scale their counts down.
is_sanitized() { ldd "$1" 2>/dev/null | grep -q 'libasan'; }

# Waits until $1 contains the pattern $2 (or the process $3 died), at most $4 s.
wait_for() {
  local file=$1 pattern=$2 pid=$3 limit=$4 i
  for ((i = 0; i < limit * 20; i++)); do
    grep -q -- "$pattern" "$file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$file" >&2; die "process $pid exited before '$pattern' appeared in $file"; }
    sleep 0.05
  done
  cat "$file" >&2
  die "'$pattern' did not appear in $file within $limit s"
}

# Stops a background process with SIGTERM and returns its exit status.
stop() {
  local pid=$1 rc=0
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" || rc=$?
  local left=()
  for p in "${PIDS[@]}"; do [ "$p" = "$pid" ] || left+=("$p"); done
  PIDS=("${left[@]+"${left[@]}"}")
  return $rc
}

# Checksum validation on (ICMP's is always checked); IP reassembly on (the
# default), so UDP checksums are checked over whole datagrams.
TSHARK_OPTS=(-n -o ip.check_checksum:TRUE -o udp.check_checksum:TRUE -o ip.defragment:TRUE)
BAD='ip.checksum.status == "Bad" || udp.checksum.status == "Bad" || icmp.checksum.status == "Bad" || _ws.malformed || _ws.expert.severity == "Error"'
check_pcap() {
  local f=$1 total bad good
  [ -s "$f" ] || die "$f is missing or empty"
  tshark "${TSHARK_OPTS[@]}" -r "$f" -T fields -e frame.number -e ip.checksum.status -e udp.checksum.status \
    -e icmp.checksum.status -e _ws.malformed -e _ws.expert.severity > "$f.fields" 2> "$f.tshark-err" \
    || { cat "$f.tshark-err" >&2; die "tshark cannot read $f"; }
  total=$(wc -l < "$f.fields")
  bad=$(tshark "${TSHARK_OPTS[@]}" -r "$f" -Y "$BAD" 2>>"$f.tshark-err" | tee "$f.bad" | wc -l)
  good=$(tshark "${TSHARK_OPTS[@]}" -r "$f" -Y 'udp.checksum.status == "Good" || icmp.checksum.status == "Good"' \
           2>>"$f.tshark-err" | wc -l)
  echo "   $(basename "$f"): $total frames, $good with a verified good UDP/ICMP checksum, $bad bad or malformed"
  [ "$bad" -eq 0 ] || { head -20 "$f.bad" >&2; die "$f: $bad frames with a bad checksum or malformed"; }
  [ "$good" -gt 0 ] || die "$f: no checksum was verified at all"
}
