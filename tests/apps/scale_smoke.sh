#!/usr/bin/env bash
# apps.scale_smoke: a short xk-scale run (the remote side an xk receiver
# over net_memif; root only for step 5), in seconds rather than minutes:
#
# (1) N=1,2 x steer,central x checksum on,off, local launcher, the default
#     (shm) channels: scale.csv has
#     the header and all 8 rows, every figure positive and the bytes exact;
#     the plots are PNG files (signature, IHDR, a sane size); the table's
#     comparisons (steer / central per component, checksum off / on), the
#     model and the paper's figures; nothing is left behind (no process, no
#     memif socket, no temporary folder);
# (1b) --repeat 3, checksum on and off, and a sweep of connections (--conns
#     1,2,8: N=2 with K=4, checksum on), over memif channels: the runs in
#     rounds, the median and min..max of each point, off against on round by
#     round, per-connection spread and Jain's index, the connection plots;
#     report.html names every run and embeds valid PNGs, and headless
#     Chromium renders it;
# (2) the mpirun path: N=2 as one `mpirun -np 2` job (steer, checksum on, shm channels),
#     each rank a node with its own label;
# (3) SIGINT in the middle of a run: xk-scale exits 130 within seconds and
#     stops every process it started;
# (4) --remote xk-filterd: the remote side is another xk machine, its own
#     filterd with a receiver node attached; one steer run, CSV complete;
# (5) nodes on other hosts (root: a network namespace): filterd's node port
#     and two nodes' own ports on a Linux bridge, control over TCP on
#     loopback, the nodes started by mpirun with --rank-port ...%r: both
#     attach on the node port, each sends on its own interface, CSV
#     complete with node_link=ethernet;
# (6) --family 6: steer, central and standalone over IPv6 against the xk
#     receiver (an IPv6-only stack), then steer and central against Linux
#     over IPv6 (root: namespaces): every stream's bytes arrive, the
#     receivers saw IPv6 peers, the CSV says family 6.
#
#   scale_smoke.sh XK_SCALE FILTERD NODE_PROGRAM
#   XK_SCALE_SMOKE_BYTES   bytes per connection (default 8m; 2m under ASan)
set -euo pipefail
TEST_NAME=scale_smoke
source "$(dirname "$0")/../integration/lib.sh"
[ $# -eq 3 ] || die "usage: $0 XK_SCALE FILTERD NODE_PROGRAM"
SCALE=$(readlink -f "$1")
FD=$(readlink -f "$2")
NODE=$(readlink -f "$3")
for x in "$SCALE" "$FD" "$NODE"; do [ -x "$x" ] || die "$x is not executable"; done
command -v mpirun > /dev/null || die "needs mpirun (Debian: openmpi-bin; scripts/packages.sh installs it)"
command -v gnuplot > /dev/null || die "needs gnuplot (Debian: gnuplot-nox; scripts/packages.sh installs it)"
if is_sanitized "$SCALE"; then
  BYTES=${XK_SCALE_SMOKE_BYTES:-2m}
else
  BYTES=${XK_SCALE_SMOKE_BYTES:-8m}
fi
OUT=$PWD/scale_smoke.out
rm -rf "$OUT"
mkdir -p "$OUT"
install_cleanup
COMMON=(--program "$NODE" --filterd-bin "$FD" --bytes "$BYTES" --timeout 300)

# Runs xk-scale in the background (its pid in SCALE_PID), output to $1.
start_scale() {
  local log=$1
  shift
  "$SCALE" "$@" > "$log" 2>&1 &
  SCALE_PID=$!
  PIDS+=("$SCALE_PID")
}

# Nothing of xk-scale $1 is left: no process started by it (their command
# lines name its memif sockets, /run/xk-scale-PID-..., or its temporary
# folder), no memif socket (abstract: in `ss`), no temporary folder.
no_leftovers() {
  local pid=$1 left
  left=$(pgrep -af "xk-scale-$pid-|/tmp/xk-scale\\.[^ ]*/ctl-" | grep -v pgrep || true)
  [ -z "$left" ] || die "processes left by xk-scale $pid: $left"
  left=$(ss -xa 2>/dev/null | grep "xk-scale-$pid-" || true)
  [ -z "$left" ] || die "sockets left by xk-scale $pid: $left"
  for d in /tmp/xk-scale.*; do
    [ -e "$d" ] || continue
    # A folder of another xk-scale still running is not ours.
    pgrep -f "$d" > /dev/null || die "temporary folder left behind: $d"
  done
  echo "   nothing left behind by xk-scale $pid"
}

# check_csv FILE ROWS LAUNCHER [REMOTE [LINK [REPEAT [FAMILY]]]]: the header,
# ROWS rows, each (mode, csum, n, k) of the matrix REPEAT times (default 1),
# every figure positive, bytes = connections x BYTES, the remote REMOTE
# (default xk), node_link LINK (default shm, xk-scale's default; standalone
# rows memif), the streams of IP version FAMILY (default 4).
check_csv() {
  /usr/bin/python3 - "$1" "$2" "$3" "$(numfmt --from=iec "${BYTES^^}")" "${4:-xk}" "${5:-shm}" "${6:-1}" "${7:-4}" <<'PY'
import collections, csv, sys
path, rows_wanted, launcher, per_conn, remote, link, repeat, family = (
    sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6], int(sys.argv[7]),
    sys.argv[8])
header = ("mode,csum,n,repeat,bytes,seconds,aggregate_gbps,aggregate_MBps,per_node_gbps_mean,per_node_gbps_min,"
          "per_node_gbps_max,filterd_cpu_s_per_gb,nodes_cpu_s_per_gb,peer_cpu_s_per_gb,filterd_cpu_s,nodes_cpu_s,"
          "peer_cpu_s,launcher,remote,mtu,wall_seconds,node_link,conns_per_node,connections,system_cpu_s_per_gb,"
          "per_conn_gbps_min,per_conn_gbps_max,jain_index,family")
lines = open(path).read().splitlines()
assert lines[0] == header, "header: %r" % lines[0]
rows = list(csv.DictReader(lines))
assert len(rows) == rows_wanted, "%d rows, %d wanted" % (len(rows), rows_wanted)
keys = collections.Counter()
for r in rows:
    keys[(r["mode"], r["csum"], r["n"], r["conns_per_node"])] += 1
    n, k, conns = int(r["n"]), int(r["conns_per_node"]), int(r["connections"])
    assert conns == n * k, r
    system = sum(float(r[c]) for c in ("filterd_cpu_s_per_gb", "nodes_cpu_s_per_gb", "peer_cpu_s_per_gb"))
    assert abs(system - float(r["system_cpu_s_per_gb"])) <= 0.001 + 1e-3 * system, r
    lo, hi, jain = float(r["per_conn_gbps_min"]), float(r["per_conn_gbps_max"]), float(r["jain_index"])
    assert 0 < lo <= hi and 1.0 / conns - 1e-3 <= jain <= 1.0001, r
    assert conns > 1 or abs(jain - 1) < 1e-3, r
    assert r["mode"] in ("steer", "central", "standalone") and r["csum"] in ("on", "off"), r
    assert r["launcher"] == launcher and r["remote"] == remote and r["mtu"] == "1500", r
    assert r["family"] == family, "family %s, %s wanted" % (r["family"], family)
    assert r["node_link"] == (link if r["mode"] != "standalone" else "memif"), r
    assert int(r["bytes"]) == conns * per_conn, "bytes %s for %d connections" % (r["bytes"], conns)
    for k in header.split(",")[4:17] + ["wall_seconds"]:
        if r["mode"] == "standalone" and k.startswith("filterd"):
            assert float(r[k]) == 0, "standalone: %s=%s, but there is no filterd" % (k, r[k])
            continue
        assert float(r[k]) > 0, "%s=%s is not positive in %r" % (k, r[k], r)
    assert float(r["per_node_gbps_min"]) <= float(r["per_node_gbps_mean"]) <= float(r["per_node_gbps_max"]), r
    mbps = int(r["bytes"]) / float(r["seconds"]) / 1e6
    assert abs(mbps - float(r["aggregate_MBps"])) <= 0.01 * mbps + 0.01, r
assert all(c == repeat for c in keys.values()) and len(keys) * repeat == rows_wanted, \
    "a (mode, csum, n, k) is missing or repeated: %s" % sorted(keys.items())
print("   %s: header and %d complete rows" % (path, len(rows)))
PY
}

check_png() {
  local f=$1
  [ -s "$f" ] || die "$f is missing or empty"
  /usr/bin/python3 - "$f" <<'PY' || die "$f is not a valid PNG"
import struct, sys, zlib
d = open(sys.argv[1], "rb").read()
assert d[:8] == b"\x89PNG\r\n\x1a\n", "no PNG signature"
length, kind = struct.unpack(">I4s", d[8:16])
assert kind == b"IHDR" and length == 13, "the first chunk is not IHDR"
w, h = struct.unpack(">II", d[16:24])
assert zlib.crc32(d[12:29]) == struct.unpack(">I", d[29:33])[0], "IHDR's CRC is wrong"
assert 100 <= w <= 10000 and 100 <= h <= 10000, "size %dx%d" % (w, h)
assert d.rstrip(b"\0").endswith(b"IEND\xaeB`\x82"), "no IEND chunk"
print("   %s: PNG %dx%d" % (sys.argv[1], w, h))
PY
  file "$f" | grep -q "PNG image data" || die "file(1) does not call $f a PNG: $(file "$f")"
}

step "(1) N=1,2, steer and central (and standalone at N=1), checksum on and off, $BYTES per connection"
start_scale "$OUT/local.log" --n 1,2 --modes steer,central,standalone --results "$OUT/local" "${COMMON[@]}"
wait "$SCALE_PID" || { cat "$OUT/local.log" >&2; die "(1): xk-scale failed"; }
PIDS=()
sed 's/^/   /' "$OUT/local.log"
check_csv "$OUT/local/scale.csv" 10 local
for p in aggregate per_node filterd_cpu system_cpu; do check_png "$OUT/local/$p.png"; done
grep -q "^central  *off  *2 " "$OUT/local.log" || die "(1): the table has no row for central, csum off, N=2"
grep -q "results: $OUT/local" "$OUT/local.log" || die "(1): xk-scale did not say where the results are"
[ "$(ls "$OUT/local/runs" | wc -l)" -eq 10 ] || die "(1): not 10 run folders in $OUT/local/runs"
for c in on off; do
  grep -q "^through filterd / standalone, N=1, csum $c: [0-9.]*x throughput" "$OUT/local.log" ||
    die "(1): no steer / standalone ratio for csum $c"
  # steer / central: throughput, then filterd, nodes, peer and system CPU per GB.
  for n in 1 2; do
    grep -qE "^$c +$n +$n +([0-9.]+x +){4}[0-9.]+x$" "$OUT/local.log" || die "(1): no steer / central row for csum $c at N=$n"
  done
done
for m in steer central standalone; do
  # checksum off / on: the gain, then each component's share of CPU the checksum cost.
  grep -qE "^$m +1 +1 +[-+][0-9]+% +- +(-?[0-9]+% +){3}-?[0-9]+%" "$OUT/local.log" ||
    die "(1): no checksum off / on row for $m at N=1"
done
# The model: a row per point (measured, model, the limiting term, processes,
# busy cores), and the check where this machine has a core per process.
grep -q "^model, a core per process" "$OUT/local.log" || die "(1): no model section"
[ "$(grep -cE "^(steer|central|standalone) +(on|off) +[12] +[12] +[0-9.]+ +[0-9.]+ +(nodes|filterd|receiver) +[0-9]+ +[0-9.]+ +(model [-+][0-9]+ % off|not here)" \
  "$OUT/local.log")" -eq 10 ] || die "(1): not 10 model rows"
grep -q "^Guedes & Peterson (1997) beside ours" "$OUT/local.log" || die "(1): no comparison with the paper"
grep -qE "^  per-node / central throughput +paper 4.2x \(6 nodes\) +ours [0-9.]+x \(N=1\), [0-9.]+x \(N=2\)" \
  "$OUT/local.log" || die "(1): the paper's per-node / central ratio is not beside ours"
grep -qE "^  checksum off +paper \+50 % .* ours steer [-+][0-9]+ % \(N=1\)" "$OUT/local.log" ||
  die "(1): the paper's checksum gain is not beside ours"
grep -q "^machine: .*, [0-9]* cores, kernel $(uname -r), DPDK " "$OUT/local.log" || die "(1): no machine line"
no_leftovers "$SCALE_PID"

step "(1b) --repeat 3, checksum on and off, a sweep of connections (--conns 1,2,8: N=2, K=4), memif channels; the report"
start_scale "$OUT/sweep.log" --n 1,2 --modes steer --csum on,off --conns 1,2,8 --repeat 3 --channels memif --results "$OUT/sweep" \
  "${COMMON[@]}"
wait "$SCALE_PID" || { cat "$OUT/sweep.log" >&2; die "(1b): xk-scale failed"; }
PIDS=()
sed 's/^/   /' "$OUT/sweep.log"
check_csv "$OUT/sweep/scale.csv" 15 local xk memif 3
grep -q "^median of 3 runs each" "$OUT/sweep.log" || die "(1b): the table does not say it shows medians"
# Rounds: every point once, then again; the run lines say "#1" for the first five.
/usr/bin/python3 - "$OUT/sweep.log" <<'PY' || die "(1b): the runs did not go in rounds"
import re, sys
rounds = [int(m) for m in re.findall(r"^\[\d+/15\] .* #(\d) \.\.\.$", open(sys.argv[1]).read(), re.M)]
assert rounds == [1] * 5 + [2] * 5 + [3] * 5, rounds
PY
for n in 1 2; do
  grep -qE "^steer +$n +$n +[-+][0-9]+% +[0-3] of 3 \(median [-+][0-9]+%\) +(-?[0-9]+% +){3}-?[0-9]+%" "$OUT/sweep.log" ||
    die "(1b): no round-by-round checksum row at N=$n"
done
# A row: mode csum N K conns median (min..max) MB/s per-node per-connection (Jain) and four CPU figures.
for nk in "on 1 1 1" "on 2 1 2" "on 2 4 8" "off 1 1 1" "off 2 1 2"; do
  read -r cs n k c <<< "$nk"
  grep -qE "^steer +$cs +$n +$k +$c +[0-9.]+ \(([0-9.]+)\.\.([0-9.]+)\) +[0-9.]+ +[0-9.]+ \([0-9.]+\.\.[0-9.]+\) +[0-9.]+\.\.[0-9.]+ \([01]\.[0-9]+\)" \
    "$OUT/sweep.log" || die "(1b): no table row with median (min..max) and Jain's index for csum $cs N=$n K=$k"
done
/usr/bin/python3 - "$OUT/sweep.log" <<'PY' || die "(1b): a median outside its min..max"
import re, sys
for m in re.finditer(r"^steer +o[nf]+ +\d+ +\d+ +\d+ +([0-9.]+) \(([0-9.]+)\.\.([0-9.]+)\)", open(sys.argv[1]).read(), re.M):
    med, lo, hi = map(float, m.groups())
    assert lo <= med <= hi, m.group(0)
PY
for p in aggregate per_node filterd_cpu system_cpu connections fairness connections_cpu; do
  check_png "$OUT/sweep/$p.png"
done
REPORT=$OUT/sweep/report.html
grep -q "report.html" "$OUT/sweep.log" || die "(1b): xk-scale did not name the report"
/usr/bin/python3 - "$REPORT" "$OUT/sweep/scale.csv" <<'PY' || die "(1b): report.html is incomplete"
import base64, csv, html.parser, struct, sys, zlib
text = open(sys.argv[1]).read()
runs = list(csv.DictReader(open(sys.argv[2])))
class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.imgs, self.tables, self.rows, self.in_runs = set(), [], 0, [], False
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
            self.in_runs = a["id"] == "runs"
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        if tag == "table":
            self.tables += 1
        if tag == "tr" and self.in_runs:
            self.rows.append(tag)
p = Page()
p.feed(text)
for section in ("machine", "command", "results", "checksum", "model", "paper", "plots", "runs"):
    assert section in p.ids, "no section %s" % section
assert len(p.rows) == len(runs) + 1, "the runs table has %d rows for %d runs" % (len(p.rows) - 1, len(runs))
assert len(p.imgs) == 7, "%d images" % len(p.imgs)
for src in p.imgs:
    assert src.startswith("data:image/png;base64,"), src[:40]
    d = base64.b64decode(src.split(",", 1)[1], validate=True)
    assert d[:8] == b"\x89PNG\r\n\x1a\n" and d[12:16] == b"IHDR", "an embedded image is not a PNG"
    assert zlib.crc32(d[12:29]) == struct.unpack(">I", d[29:33])[0], "IHDR's CRC"
    w, h = struct.unpack(">II", d[16:24])
    assert 100 <= w <= 10000 and 100 <= h <= 10000, (w, h)
    assert len(d) > 5000, "an embedded plot of %d bytes has no data in it" % len(d)
assert "xk-scale" in text and "--conns 1,2,8" in text, "the command is not on the page"
assert " of 3 (median " in text, "the checksum's rounds are not on the page"
print("   report.html: %d sections, %d embedded PNGs, %d runs named" % (len(p.ids), len(p.imgs), len(runs)))
PY
# Rendered by a browser: Chromium, headless, prints the page's DOM after
# layout and draws it; the DOM has the sections, the screenshot is a PNG.
CHROME=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROME" ] || die "needs chromium (Debian: chromium; scripts/packages.sh installs it)"
timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --user-data-dir="$OUT/chrome" \
  --dump-dom "file://$REPORT" > "$OUT/report.dom" 2> "$OUT/chrome.log" || { tail "$OUT/chrome.log" >&2; die "(1b): chromium failed"; }
for h in "Machine" "Results" "The checksum" "Model: a core per process" "The paper beside ours" "Every run"; do
  grep -q "<h2[^>]*>$h</h2>" "$OUT/report.dom" || die "(1b): chromium's DOM of the report has no '$h'"
done
timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --user-data-dir="$OUT/chrome" --window-size=1200,2400 \
  --screenshot="$OUT/report-shot.png" "file://$REPORT" >> "$OUT/chrome.log" 2>&1 || { tail "$OUT/chrome.log" >&2; die "(1b): chromium's screenshot failed"; }
check_png "$OUT/report-shot.png"
no_leftovers "$SCALE_PID"

step "(2) mpirun: N=2 as one mpirun job, over shm channels"
start_scale "$OUT/mpirun.log" --n 2 --modes steer --csum on --launcher mpirun --channels shm --results "$OUT/mpirun" \
  "${COMMON[@]}"
wait "$SCALE_PID" || { cat "$OUT/mpirun.log" >&2; die "(2): xk-scale --launcher mpirun failed"; }
PIDS=()
sed 's/^/   /' "$OUT/mpirun.log"
check_csv "$OUT/mpirun/scale.csv" 1 mpirun xk shm
grep -q "attached on shm" "$OUT/mpirun/runs/steer-csumon-n2/filterd.log" || die "(2): no node attached on an shm channel"
MLOG=$OUT/mpirun/runs/steer-csumon-n2/mpirun.log
for r in 0 1; do
  grep -q "^\[1,$r\]<stdout>:RESULT role=transmitter .*label=rank$r" "$MLOG" \
    || die "(2): no result of rank $r in $MLOG"
done
no_leftovers "$SCALE_PID"

step "(3) SIGINT during a run"
start_scale "$OUT/sigint.log" --n 2 --modes central --csum on --results "$OUT/sigint" --program "$NODE" \
  --filterd-bin "$FD" --bytes 16g --timeout 300
wait_for "$OUT/sigint.log" "\[1/1\]" "$SCALE_PID" 30
for _ in $(seq 200); do
  [ -e "$OUT/sigint/runs/central-csumon-n2/node1.log" ] && break
  sleep 0.05
done
sleep 1
pgrep -f "xk-scale-$SCALE_PID-" > /dev/null || die "(3): no process of the run was running"
kill -INT "$SCALE_PID"
t0=$(date +%s)
rc=0
wait "$SCALE_PID" || rc=$?
PIDS=()
cat "$OUT/sigint.log" | sed 's/^/   /'
[ "$rc" -eq 130 ] || die "(3): exit $rc after SIGINT, 130 wanted"
[ $(($(date +%s) - t0)) -le 20 ] || die "(3): xk-scale took more than 20 s to stop"
grep -q "stopped by Interrupt" "$OUT/sigint.log" || die "(3): xk-scale did not say it was interrupted"
no_leftovers "$SCALE_PID"

step "(4) the remote side as another xk machine: its own filterd and a receiver node"
start_scale "$OUT/remote-filterd.log" --n 1 --modes steer --csum on --remote xk-filterd --results "$OUT/rfd" \
  "${COMMON[@]}"
wait "$SCALE_PID" || { cat "$OUT/remote-filterd.log" >&2; die "(4): xk-scale --remote xk-filterd failed"; }
PIDS=()
sed 's/^/   /' "$OUT/remote-filterd.log"
check_csv "$OUT/rfd/scale.csv" 1 local xk-filterd
RLOG=$OUT/rfd/runs/steer-csumon-n1/remote-filterd.log
grep -q "attached on shm" "$RLOG" || die "(4): the receiver did not attach to the remote filterd ($RLOG)"
no_leftovers "$SCALE_PID"

step "(5) nodes on other hosts: node port, TCP control, mpirun ranks on their own ports (%r)"
[ "$(id -u)" -eq 0 ] || die "(5) needs root (a network namespace with a bridge)"
# One namespace stands for the cluster's Ethernet: a bridge (the switch),
# filterd's node port on one veth into it, each node host's NIC on another.
NSA=xk-ss-$$-a
FPORT=xks$$f
ip netns add "$NSA"
ip netns exec "$NSA" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
ip -n "$NSA" link set lo up
ip -n "$NSA" link add br0 type bridge
for end in "$FPORT" xks$$r0 xks$$r1; do
  ip -n "$NSA" link add "$end" type veth peer name "${end}b"
  ip -n "$NSA" link set "${end}b" master br0
  for d in "$end" "${end}b"; do
    ip netns exec "$NSA" ethtool -K "$d" rx off tx off tso off gso off gro off > /dev/null 2>&1 \
      || ip netns exec "$NSA" ethtool -K "$d" rx off tx off tso off gso off > /dev/null
    ip -n "$NSA" link set "$d" up
  done
done
ip -n "$NSA" link set br0 up
tx_packets() { ip netns exec "$NSA" cat "/sys/class/net/$1/statistics/tx_packets"; }
before0=$(tx_packets xks$$r0)
before1=$(tx_packets xks$$r1)
ip netns exec "$NSA" "$SCALE" --n 2 --modes steer --csum on --launcher mpirun --results "$OUT/eth" "${COMMON[@]}" \
  --node-port "net_af_packet0,iface=$FPORT,framecnt=4096" --node-port-opts "mbufs=16383" \
  --node-control 127.0.0.1:7577 \
  --rank-port "net_af_packet0,iface=xks$$r%r,framecnt=4096" --rank-port-opts "mbufs=16383" \
  > "$OUT/eth.log" 2>&1 &
SCALE_PID=$!
PIDS+=("$SCALE_PID")
wait "$SCALE_PID" || { cat "$OUT/eth.log" >&2; die "(5): xk-scale with nodes on the node port failed"; }
PIDS=()
sed 's/^/   /' "$OUT/eth.log"
grep -q "nodes over Ethernet + TCP control" "$OUT/eth.log" || die "(5): xk-scale does not say the nodes are remote"
check_csv "$OUT/eth/scale.csv" 1 mpirun xk ethernet
ELOG=$OUT/eth/runs/steer-csumon-n2
[ "$(grep -c "attached on the node port" "$ELOG/filterd.log")" -eq 2 ] \
  || die "(5): not 2 nodes attached on the node port ($ELOG/filterd.log)"
grep -q "control over TCP on 127.0.0.1:7577" "$ELOG/filterd.log" || die "(5): filterd does not serve TCP control"
for r in 0 1; do
  grep -q "^\[1,$r\]<stdout>:RESULT role=transmitter .*label=rank$r" "$ELOG/mpirun.log" \
    || die "(5): no result of rank $r in $ELOG/mpirun.log"
done
# Each rank sent its stream through its own interface (%r): at least one
# frame per 1448-byte segment of its share went out of each.
segs=$(($(numfmt --from=iec "${BYTES^^}") / 1448))
sent0=$(($(tx_packets xks$$r0) - before0))
sent1=$(($(tx_packets xks$$r1) - before1))
echo "   frames sent on xks$$r0: $sent0, on xks$$r1: $sent1 (a stream is $segs segments)"
[ "$sent0" -ge "$segs" ] && [ "$sent1" -ge "$segs" ] || die "(5): a rank did not send on its own interface"
[ "$(stat -c %a "$OUT/eth/control-token")" = 600 ] || die "(5): the control token is not owner-only"
no_leftovers "$SCALE_PID"

step "(6) IPv6: steer, central and standalone against an IPv6-only xk receiver, then against Linux"
start_scale "$OUT/v6.log" --family 6 --n 1,2 --modes steer,central,standalone --csum on --results "$OUT/v6" \
  "${COMMON[@]}"
wait "$SCALE_PID" || { cat "$OUT/v6.log" >&2; die "(6): xk-scale --family 6 failed"; }
PIDS=()
sed 's/^/   /' "$OUT/v6.log"
grep -q "IPv6 (2001:db8::10/64 to 2001:db8::20)" "$OUT/v6.log" || die "(6): xk-scale does not name the IPv6 addresses"
check_csv "$OUT/v6/scale.csv" 5 local xk shm 1 6
for run in steer-csumon-n2 central-csumon-n2 standalone-csumon-n1; do
  grep -q "stack 2001:db8::20/64 on" "$OUT/v6/runs/$run/peer.log" || die "(6): $run: the receiver is not on IPv6"
done
no_leftovers "$SCALE_PID"
"$SCALE" --family 6 --n 2 --modes steer,central --csum on --remote linux --results "$OUT/v6linux" "${COMMON[@]}" \
  > "$OUT/v6linux.log" 2>&1 &
SCALE_PID=$!
PIDS+=("$SCALE_PID")
wait "$SCALE_PID" || { cat "$OUT/v6linux.log" >&2; die "(6): xk-scale --family 6 --remote linux failed"; }
PIDS=()
sed 's/^/   /' "$OUT/v6linux.log"
check_csv "$OUT/v6linux/scale.csv" 2 local linux shm 1 6
for run in steer-csumon-n2 central-csumon-n2; do
  [ "$(grep -c "RESULT role=receiver conn=.* peer=2001:db8::10:" "$OUT/v6linux/runs/$run/peer.log")" -eq 2 ] \
    || die "(6): $run: Linux did not take both streams from 2001:db8::10"
done
no_leftovers "$SCALE_PID"
