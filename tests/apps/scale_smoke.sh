#!/usr/bin/env bash
# apps.scale_smoke: a short xk-scale run (the remote side an xk receiver
# over net_memif; root only for step 5), in seconds rather than minutes:
#
# (1) N=1,2 x steer,central x checksum on,off, local launcher: scale.csv has
#     the header and all 8 rows, every figure positive and the bytes exact;
#     the three plots are PNG files (signature, IHDR, a sane size); nothing
#     is left behind (no process, no memif socket, no temporary folder);
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
#     complete with node_link=ethernet.
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

# check_csv FILE ROWS LAUNCHER [REMOTE [LINK]]: the header, ROWS rows, each (mode,
# csum, n) of the matrix once, every figure positive, bytes = n x BYTES, the
# remote REMOTE (default xk), node_link LINK (default memif; standalone rows memif).
check_csv() {
  /usr/bin/python3 - "$1" "$2" "$3" "$(numfmt --from=iec "${BYTES^^}")" "${4:-xk}" "${5:-memif}" <<'PY'
import csv, sys
path, rows_wanted, launcher, per_conn, remote, link = (sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]),
                                                       sys.argv[5], sys.argv[6])
header = ("mode,csum,n,repeat,bytes,seconds,aggregate_gbps,aggregate_MBps,per_node_gbps_mean,per_node_gbps_min,"
          "per_node_gbps_max,filterd_cpu_s_per_gb,nodes_cpu_s_per_gb,peer_cpu_s_per_gb,filterd_cpu_s,nodes_cpu_s,"
          "peer_cpu_s,launcher,remote,mtu,wall_seconds,node_link")
lines = open(path).read().splitlines()
assert lines[0] == header, "header: %r" % lines[0]
rows = list(csv.DictReader(lines))
assert len(rows) == rows_wanted, "%d rows, %d wanted" % (len(rows), rows_wanted)
keys = set()
for r in rows:
    keys.add((r["mode"], r["csum"], r["n"]))
    assert r["mode"] in ("steer", "central", "standalone") and r["csum"] in ("on", "off"), r
    assert r["launcher"] == launcher and r["remote"] == remote and r["mtu"] == "1500", r
    assert r["node_link"] == (link if r["mode"] != "standalone" else "memif"), r
    assert int(r["bytes"]) == int(r["n"]) * per_conn, "bytes %s for n=%s" % (r["bytes"], r["n"])
    for k in header.split(",")[4:17] + ["wall_seconds"]:
        if r["mode"] == "standalone" and k.startswith("filterd"):
            assert float(r[k]) == 0, "standalone: %s=%s, but there is no filterd" % (k, r[k])
            continue
        assert float(r[k]) > 0, "%s=%s is not positive in %r" % (k, r[k], r)
    assert float(r["per_node_gbps_min"]) <= float(r["per_node_gbps_mean"]) <= float(r["per_node_gbps_max"]), r
    mbps = int(r["bytes"]) / float(r["seconds"]) / 1e6
    assert abs(mbps - float(r["aggregate_MBps"])) <= 0.01 * mbps + 0.01, r
assert len(keys) == rows_wanted, "a (mode, csum, n) is missing or repeated: %s" % sorted(keys)
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
for p in aggregate per_node filterd_cpu; do check_png "$OUT/local/$p.png"; done
grep -q "^central  *off  *2 " "$OUT/local.log" || die "(1): the table has no row for central, csum off, N=2"
grep -q "results: $OUT/local" "$OUT/local.log" || die "(1): xk-scale did not say where the results are"
[ "$(ls "$OUT/local/runs" | wc -l)" -eq 10 ] || die "(1): not 10 run folders in $OUT/local/runs"
for c in on off; do
  grep -q "^through filterd / standalone, N=1, csum $c: [0-9.]*x throughput" "$OUT/local.log" ||
    die "(1): no steer / standalone ratio for csum $c"
  grep -q "^filterd CPU per GB, steer / central, N=2, csum $c: [0-9.]*x" "$OUT/local.log" ||
    die "(1): no steer / central filterd CPU ratio for csum $c at N=2"
done
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
grep -q "attached on memif" "$RLOG" || die "(4): the receiver did not attach to the remote filterd ($RLOG)"
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
