# Shared by the integration scripts (source it after setting TEST_NAME).
# Gives: die, step (with elapsed time), wait_for, stop, check_pcap,
# start_capture/stop_capture/check_capture, and the PIDS array that the
# script's EXIT trap kills.

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
# PIDS, delete the namespaces NSA/NSB/NSC, the links LNX/XKIF and the memif
# doorbell pages of MEMIF when the script made them, and say PASS or FAILED with the time taken and where OUT is.
cleanup() {
  local rc=$?
  set +e
  kill_all
  [ -n "${NSA:-}" ] && ip netns del "$NSA" 2>/dev/null
  [ -n "${NSB:-}" ] && ip netns del "$NSB" 2>/dev/null
  [ -n "${NSC:-}" ] && ip netns del "$NSC" 2>/dev/null
  [ -n "${LNX:-}" ] && ip link del "$LNX" 2>/dev/null
  [ -n "${XKIF:-}" ] && ip link del "$XKIF" 2>/dev/null
  # The doorbell pages of a memif socket (docs/dpdk-driver.md): a process
  # killed with -9 could not remove its own.
  [ -n "${MEMIF:-}" ] && rm -f /dev/shm/xk-bell-"${MEMIF//\//_}"_*
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
# (Not `ldd | grep -q`: grep leaves at the first match, ldd may get SIGPIPE
# writing the rest, and under pipefail that read as "not sanitized".)
is_sanitized() { grep -q 'libasan' <<< "$(ldd "$1" 2>/dev/null)"; }

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
# Payloads are test data, not application protocols: every TCP and UDP port
# decodes as plain data, so that no heuristic dissector (Thrift, say) reads
# random bytes as a broken message of its own and calls the frame malformed.
AS_DATA=(-d 'tcp.port==1-65535,data' -d 'udp.port==1-65535,data')
TSHARK_OPTS=(-n "${AS_DATA[@]}" -o ip.check_checksum:TRUE -o udp.check_checksum:TRUE -o ip.defragment:TRUE)
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

# ---- Linux-side captures of TCP/UDP/ICMP links (capture checks) ----
# start_capture NS IFACE FILE: tcpdump in namespace NS on IFACE, every frame
# whole (checksums need the payload), into FILE; its pid in CAPTURE_PID,
# its messages in FILE.log.
start_capture() {
  local ns=$1 iface=$2 file=$3
  ip netns exec "$ns" tcpdump -i "$iface" -s 0 -B 262144 -U -n -w "$file" > "$file.log" 2>&1 &
  CAPTURE_PID=$!
  PIDS+=("$CAPTURE_PID")
  wait_for "$file.log" "listening on" "$CAPTURE_PID" 20
}
# stop_capture: lets the last frames in, then stops tcpdump (its drop count
# is in the log for check_capture).
stop_capture() {
  sleep 0.5
  kill -INT "$CAPTURE_PID" 2>/dev/null || true
  stop "$CAPTURE_PID" || true
}
# check_capture FILE XK_IP [lossy]: tshark over FILE with IP, TCP, UDP and
# ICMP checksum validation on. Fails on any bad checksum, malformed frame or
# expert error, and -- unless "lossy" (the test kills something mid-stream),
# or tcpdump dropped frames (tshark's analysis then lacks some) -- on a
# spurious retransmission sent by XK_IP (data the peer had acknowledged: on
# a loss-free link, a protocol bug). A tail loss probe (RFC 8985 7.3: the
# last segment sent, again, when its ACK is later than the probe timeout) is
# spurious by design whenever the ACK was merely late -- a busy host, a peer
# whose application reads slowly and so delays its ACK 40 ms -- and costs one
# segment and no window reduction: those are counted apart and reported, not
# judged (as Linux's own probes are in tcp_linux.sh). So is a timeout's one
# segment when the ACKs were later still (a node that shares two busy cores
# under ASan has seen its ACKs 300 ms late): the first segment sent again at
# least rto_min (CAP_RTO_MIN, 0.2 s) after its last copy, and the only such on
# its connection within rto_min. The ACK's timestamp echo proves the timeout
# spurious and xk undoes it (RFC 3522/4015, docs/tcp.md) -- whatever else went
# again after it, going back through the flight, is judged. Sets CAP_FRAMES, CAP_RETRANS,
# CAP_DROPPED, CAP_SYNS, CAP_SYNS_FULL (SYNs with window scale, SACK-permitted
# and timestamps) for the caller's own checks.
check_capture() {
  local f=$1 xk=$2 mode=${3:-} good bad spurious xk_spurious xk_probes xk_rtos
  [ -s "$f" ] || die "capture $f is missing or empty"
  # Checksum status: 0 bad, 1 good, 2 unverified. Severity 0x800000 is
  # Error. A TCP checksum of 0xffff where tshark computes 0x0000 is the same
  # one's-complement zero (RFC 1624 section 3); Linux sends it now and then
  # and tshark calls it bad: it counts as good here.
  tshark -n "${AS_DATA[@]}" -o tcp.check_checksum:TRUE -o ip.check_checksum:TRUE -o udp.check_checksum:TRUE \
    -o tcp.desegment_tcp_streams:FALSE -o ip.defragment:FALSE -r "$f" \
    -T fields -E separator=/t -e frame.number -e tcp.checksum.status -e ip.checksum.status -e _ws.malformed \
    -e _ws.expert.severity -e tcp.analysis.spurious_retransmission -e tcp.analysis.retransmission \
    -e tcp.analysis.fast_retransmission -e tcp.flags.syn -e tcp.options.wscale.shift -e tcp.options.sack_perm \
    -e tcp.options.timestamp.tsval -e udp.checksum.status -e tcp.checksum -e tcp.checksum_calculated -e ip.src \
    -e icmp.checksum.status -e frame.len -e tcp.stream -e tcp.seq -e tcp.len -e frame.time_relative \
    -e icmpv6.checksum.status -e ipv6.src \
    > "$f.fields" 2> "$f.tshark-err" \
    || { cat "$f.tshark-err" >&2; die "tshark cannot read $f"; }
  # A link with an MTU carries no frame over it, whatever the stacks move
  # inside their own processes (large frames, coalesced segments).
  local max_frame=$(( ${CAP_MTU:-1500} + 14 ))
  read -r CAP_FRAMES good bad spurious CAP_RETRANS CAP_SYNS CAP_SYNS_FULL xk_spurious oversize xk_probes xk_rtos \
    < <(awk -v xk="$xk" -v max="$max_frame" -v rto_min="${CAP_RTO_MIN:-0.2}" -F'\t' '
    { total++
      if ($18 + 0 > max) { oversize++; print $1 > "/dev/stderr" }
      if ($2 == "0" && $14 == "0xffff" && $15 == "0x0000") $2 = "1"
      if ($16 == "") $16 = $24  # an IPv6 packet names its source here
      if ($2 == "1" || $13 == "1" || $17 == "1" || $23 == "1") good++
      sev = 0; n = split($5, s, ","); for (i = 1; i <= n; i++) if (s[i] + 0 >= 8388608) sev = 1
      if ($2 == "0" || $3 == "0" || $13 == "0" || $17 == "0" || $23 == "0" || $4 != "" || sev) { bad++; print $1 > "/dev/stderr" }
      # A tail probe: data ending where the highest data its sender sent on
      # that connection ends.
      probe = 0; rto = 0
      if ($21 + 0 > 0) {
        key = $19 "/" $16; end = $20 + $21
        probe = ($6 != "" && end == hi[key]); if (end > hi[key]) hi[key] = end
        # A timeout: a segment again rto_min after its last copy, the first
        # such of its connection within rto_min.
        copy = key "/" $20
        rto = ($6 != "" && (copy in sent) && $22 - sent[copy] >= rto_min && \
               (!(key in timeout) || $22 - timeout[key] >= rto_min))
        if (rto) timeout[key] = $22
        sent[copy] = $22
      }
      if ($6 != "") { spurious++; if ($16 == xk) { if (probe) probes++; else if (rto) rtos++; else xk_spurious++ } }
      if ($7 != "" || $8 != "") retrans++
      if ($9 == "1") { syns++; if ($10 != "" && $11 != "" && $12 != "") full++ } }
    END { print total+0, good+0, bad+0, spurious+0, retrans+0, syns+0, full+0, xk_spurious+0, oversize+0, probes+0, rtos+0 }' \
    "$f.fields" \
    2> "$f.bad-frames")
  CAP_DROPPED=$(sed -n 's/^\([0-9]*\) packets dropped by kernel.*/\1/p' "$f.log" 2>/dev/null)
  CAP_DROPPED=${CAP_DROPPED:-0}
  echo "   $(basename "$f"): $CAP_FRAMES frames, $good with a verified good checksum, $bad bad or malformed," \
       "$CAP_RETRANS retransmissions ($spurious spurious: $xk_spurious by $xk, and $xk_probes tail loss probes and" \
       "$xk_rtos timeouts' first segments of $xk that came before a late ACK); tcpdump dropped $CAP_DROPPED;" \
       "$oversize over $max_frame bytes"
  [ "$bad" -eq 0 ] || die "$f: $bad bad or malformed frames (frame numbers in $f.bad-frames)"
  [ "$oversize" -eq 0 ] || die "$f: $oversize frames longer than the MTU allows (frame numbers in $f.bad-frames)"
  [ "$good" -gt 0 ] || die "$f: no checksum was verified at all"
  if [ "$mode" != lossy ] && [ "$CAP_DROPPED" -eq 0 ]; then
    [ "$xk_spurious" -eq 0 ] || die "$f: $xk sent $xk_spurious spurious retransmissions on a loss-free link"
  fi
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

# filterd_veth_setup TAG: the filterd tests' topology -- Linux in netns
# xk-TAG-<pid>-a on xk<T>l<pid> (LNX_IP 192.0.2.1/24, T the tag's first
# letter), and netns xk-TAG-<pid>-b with the veth's other end xk<T>x<pid>
# (XKIF) for filterd as SHARED 192.0.2.10/24 -- with OUT made afresh, the
# cleanup installed, and a capture started on Linux's side (check_capture it
# at the end). Sets NSA NSB LNX XKIF LNX_IP SHARED OUT CTL MEMIF.
filterd_veth_setup() {
  local tag=$1
  NSA=xk-$tag-$$-a
  NSB=xk-$tag-$$-b
  LNX=xk${tag:0:1}l$$
  XKIF=xk${tag:0:1}x$$
  LNX_IP=192.0.2.1
  SHARED=192.0.2.10
  OUT=$PWD/$TEST_NAME.out
  rm -rf "$OUT"
  mkdir -p "$OUT"
  CTL=$OUT/filterd.sock
  MEMIF=/run/xk-$tag-$$.memif  # an abstract-namespace name for memif; no file
  install_cleanup
  step "topology: $NSA ($LNX $LNX_IP/24) <-veth-> $NSB (filterd on $XKIF as $SHARED/24)"
  make_veth_topology "$NSA" "$NSB" "$LNX" "$XKIF" "$LNX_IP/24"
  start_capture "$NSA" "$LNX" "$OUT/linux.pcap"
}

# start_filterd FILTERD [ARGS...]: filterd in NSB on XKIF (DPDK af_packet) as
# SHARED, control socket CTL, memif socket MEMIF, log $OUT/filterd.log, more
# flags in ARGS; waits for it to be ready. Sets FDPID. A first start has
# nothing to resync: --resync-grace 0 unless ARGS say otherwise (the grace
# would hold back the RSTs and ICMP errors a test's first seconds check).
start_filterd() {
  local fd=$1
  shift
  ip netns exec "$NSB" "$fd" --resync-grace 0 "$@" --port "net_af_packet0,iface=$XKIF,framecnt=4096" --port-opts "mbufs=16383" \
    --ip "$SHARED/24" --control "$CTL" --memif-socket "$MEMIF" > "$OUT/filterd.log" 2>&1 &
  FDPID=$!
  PIDS+=("$FDPID")
  wait_for "$OUT/filterd.log" "ready" "$FDPID" 30
}

# check_no_hairpin_leak: filterd counted more than MIN frames turned around
# between its nodes (st0 hairpin in $OUT/counters.txt, `xkctl counters`),
# denied none, and none of them reached the external link ($OUT/linux.pcap,
# after stop_capture).
check_no_hairpin_leak() {
  local min=$1 turned denied leaked
  turned=$(awk '$1 == "st0" && $2 == "hairpin" { print $3 }' "$OUT/counters.txt")
  denied=$(awk '$1 == "st0" && $2 == "tx_denied" { print $3 }' "$OUT/counters.txt")
  echo "   filterd turned ${turned:-0} frames around between nodes, denied ${denied:-0}"
  [ "${turned:-0}" -gt "$min" ] || die "filterd turned only ${turned:-0} frames around (more than $min expected)"
  [ "${denied:-0}" -eq 0 ] || die "the egress check denied $denied node frames"
  leaked=$(tshark -n -r "$OUT/linux.pcap" -Y "ip.src == $SHARED && ip.dst == $SHARED" 2>/dev/null | wc -l)
  [ "$leaked" -eq 0 ] || die "$leaked node-to-node frames reached the external link"
  echo "   no node-to-node frame on the external link"
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
