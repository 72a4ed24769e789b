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

# install_cleanup: on exit (also after SIGINT/SIGTERM) stop every process in
# PIDS, delete the namespaces NSA/NSB/NSC and the links LNX/XKIF when the
# script made them, and say PASS or FAILED with the time taken and where OUT is.
cleanup() {
  local rc=$?
  set +e
  kill_all
  [ -n "${NSA:-}" ] && ip netns del "$NSA" 2>/dev/null
  [ -n "${NSB:-}" ] && ip netns del "$NSB" 2>/dev/null
  [ -n "${NSC:-}" ] && ip netns del "$NSC" 2>/dev/null
  [ -n "${LNX:-}" ] && ip link del "$LNX" 2>/dev/null
  [ -n "${XKIF:-}" ] && ip link del "$XKIF" 2>/dev/null
  if [ $rc -eq 0 ]; then
    echo "$TEST_NAME: PASS in $(elapsed) s (artifacts: $OUT)"
  else
    echo "$TEST_NAME: FAILED (rc $rc) after $(elapsed) s; artifacts and logs: $OUT"
  fi
  exit $rc
}
install_cleanup() {
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
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
# check_pcap FILE [incomplete]: with "incomplete" (the capturer dropped
# frames) IP reassembly is off: tshark would otherwise join the fragments it
# has of one datagram with those of a later one that reuses its IP id and
# call the result malformed. Each frame's IP checksum, and the UDP checksum of
# every unfragmented datagram, are still verified.
check_pcap() {
  local f=$1 total bad good
  local -a opts=("${TSHARK_OPTS[@]}")
  if [ "${2:-}" = incomplete ]; then
    opts=("${opts[@]/ip.defragment:TRUE/ip.defragment:FALSE}")
    echo "   $(basename "$f"): the capture is incomplete: reassembly off"
  fi
  [ -s "$f" ] || die "$f is missing or empty"
  tshark "${opts[@]}" -r "$f" -T fields -e frame.number -e ip.checksum.status -e udp.checksum.status \
    -e icmp.checksum.status -e _ws.malformed -e _ws.expert.severity > "$f.fields" 2> "$f.tshark-err" \
    || { cat "$f.tshark-err" >&2; die "tshark cannot read $f"; }
  total=$(wc -l < "$f.fields")
  bad=$(tshark "${opts[@]}" -r "$f" -Y "$BAD" 2>>"$f.tshark-err" | tee "$f.bad" | wc -l)
  good=$(tshark "${opts[@]}" -r "$f" -Y 'udp.checksum.status == "Good" || icmp.checksum.status == "Good"' \
           2>>"$f.tshark-err" | wc -l)
  echo "   $(basename "$f"): $total frames, $good with a verified good UDP/ICMP checksum, $bad bad or malformed"
  [ "$bad" -eq 0 ] || { head -20 "$f.bad" >&2; die "$f: $bad frames with a bad checksum or malformed"; }
  [ "$good" -gt 0 ] || die "$f: no checksum was verified at all"
}

# The integration topology: namespace $1 holds Linux's end $3 of a veth pair
# with address $5 (a.b.c.d/n), namespace $2 holds the other end $4 with no
# address (xk takes it through DPDK). IPv6 is off (no router solicitations or
# MLD in captures), loopbacks are up, and both ends have their offloads off:
# with tx checksum offload a veth hands af_packet frames whose checksum is
# only the pseudo-header sum, with rx checksumming Linux would trust xk's
# checksums instead of checking them, and segmentation offloads would put
# super-frames on the wire. `ethtool -k` of both ends goes to $OUT.
make_veth_topology() {
  local nsa=$1 nsb=$2 lnx=$3 xkif=$4 lnx_cidr=$5 ns
  ip netns add "$nsa"
  ip netns add "$nsb"
  ip link add "$lnx" type veth peer name "$xkif"
  ip link set "$lnx" netns "$nsa"
  ip link set "$xkif" netns "$nsb"
  for ns in "$nsa" "$nsb"; do
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    ip netns exec "$ns" ip link set lo up
  done
  ip netns exec "$nsa" ethtool -K "$lnx" rx off tx off tso off gso off gro off 2>/dev/null \
    || ip netns exec "$nsa" ethtool -K "$lnx" rx off tx off tso off gso off
  ip netns exec "$nsb" ethtool -K "$xkif" rx off tx off tso off gso off gro off 2>/dev/null \
    || ip netns exec "$nsb" ethtool -K "$xkif" rx off tx off tso off gso off
  ip netns exec "$nsa" ethtool -k "$lnx" > "$OUT/offloads-linux.txt"
  ip netns exec "$nsb" ethtool -k "$xkif" > "$OUT/offloads-xk.txt"
  ip netns exec "$nsa" ip addr add "$lnx_cidr" dev "$lnx"
  ip netns exec "$nsa" ip link set "$lnx" up
  ip netns exec "$nsb" ip link set "$xkif" up
}

# Two namespaces joined by a veth pair, addresses $5 and $6 on ends $3 and
# $4, offloads as Linux sets them (the benchmarks' reference).
make_veth_pair() {
  local nsa=$1 nsb=$2 ifa=$3 ifb=$4 ns
  ip netns add "$nsa"
  ip netns add "$nsb"
  ip link add "$ifa" type veth peer name "$ifb"
  ip link set "$ifa" netns "$nsa"
  ip link set "$ifb" netns "$nsb"
  ip -n "$nsa" addr add "$5" dev "$ifa"
  ip -n "$nsb" addr add "$6" dev "$ifb"
  for ns in "$nsa" "$nsb"; do ip -n "$ns" link set lo up; done
  ip -n "$nsa" link set "$ifa" up
  ip -n "$nsb" link set "$ifb" up
}
