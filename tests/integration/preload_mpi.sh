#!/usr/bin/env bash
# integration.preload_mpi: Open MPI over xk, unmodified. Two ranks of a
# small MPI ping-pong (tests/preload/mpi_pingpong.c, built with mpicc),
# launched by mpirun with the TCP transport only, each rank under xkrun as a
# node of filterd: two nodes sharing one address, so every byte between the
# ranks goes node to node through filterd (docs/filterd.md, "Node to node").
#
#   preload_mpi.sh FILTERD XKCTL XKRUN MPI_PINGPONG   (as root; CTest runs it)
#
#   netns xk-mp-<pid>-a: Linux, only watching (a capture)
#   netns xk-mp-<pid>-b: filterd on DPDK net_af_packet as 192.0.2.10/24;
#                        mpirun and its two ranks (xkrun --filterd)
#
# (1) mpirun -np 2 --mca btl tcp,self --mca btl_tcp_if_include xk0: the
#     ranks find the stack's address as interface xk0 (getifaddrs /
#     SIOCGIFCONF), listen on it through filterd, and send messages of 1 B
#     to 4 MiB both ways, every byte checked by the program;
# (2) filterd attached two nodes and turned their traffic around (st0
#     hairpin), denied nothing, and none of it reached the external link;
# (3) the same program as two standalone stacks, no filterd: mpirun's MPMD
#     form gives each rank its own xkrun -- its own address, 198.51.100.1
#     and .2, and its end of one memif link -- and each stack's counters
#     (--stats) show the messages' bytes arrived through it.
set -euo pipefail
TEST_NAME=preload_mpi
source "$(dirname "$0")/lib.sh"

[ $# -ge 4 ] || die "usage: $0 FILTERD XKCTL XKRUN MPI_PINGPONG"
FD=$(readlink -f "$1")
XKCTL=$(readlink -f "$2")
XKRUN=$(readlink -f "$3")
PINGPONG=$(readlink -f "$4")
for b in "$FD" "$XKCTL" "$XKRUN" "$PINGPONG"; do [ -x "$b" ] || die "$b is not executable"; done
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
for tool in ip ethtool tcpdump tshark mpirun; do
  command -v "$tool" >/dev/null || die "needs $tool (packages: openmpi-bin libopenmpi-dev)"
done
ROUNDS=${XK_MPI_ROUNDS:-3}

filterd_veth_setup mp  # NSA NSB LNX XKIF LNX_IP SHARED OUT CTL MEMIF; capture on

step "filterd"
start_filterd "$FD"

step "(1) mpirun: two ranks, each under xkrun --filterd, btl tcp over xk0"
# --idle yield: four busy processes (filterd, two ranks, mpirun) on what
# may be two cores. ASan builds: the runtime first in LD_PRELOAD (xkrun
# does that) and leak checks off, since Open MPI's own leaks are not ours.
ip netns exec "$NSB" env ASAN_OPTIONS=detect_leaks=0 timeout 240 \
  mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl tcp,self --mca btl_tcp_if_include xk0 \
  "$XKRUN" --filterd "$CTL" --idle yield -- "$PINGPONG" "$ROUNDS" > "$OUT/mpi.log" 2>&1 \
  || { tail -40 "$OUT/mpi.log" >&2; die "(1): mpirun failed"; }
grep "^mpi_pingpong:" "$OUT/mpi.log" | sed 's/^/   /'
grep -q "^mpi_pingpong:  4194304 bytes x $ROUNDS round trips verified" "$OUT/mpi.log" || die "(1): no 4 MiB messages"
# 27 sizes (powers of two to 4 MiB and four odd ones), ROUNDS round trips each.
grep -q "^mpi_pingpong: $((27 * ROUNDS)) messages verified$" "$OUT/mpi.log" || die "(1): not every message was verified"

step "(2) filterd: two nodes, their traffic turned around, nothing denied or leaked"
ip netns exec "$NSB" "$XKCTL" --control "$CTL" counters > "$OUT/counters.txt" 2>&1 || die "xkctl counters failed"
[ "$(grep -c "attached" "$OUT/filterd.log")" -ge 2 ] || die "(2): filterd did not attach two nodes"
stop "$FDPID" || die "filterd did not exit cleanly"
stop_capture
check_no_hairpin_leak 100

step "(3) mpirun: two standalone ranks, each its own stack and address, over memif"
RANK_SOCK=$MEMIF/ranks  # abstract, as MEMIF; the cleanup removes its doorbells too
rank() {  # INDEX ROLE IP: one rank's command line, MPMD style
  echo "-np 1 $XKRUN --port net_memif$1,role=$2,id=0,socket=$RANK_SOCK --ip $3/24 --idle yield" \
    "--stats $OUT/rank$1.stats -- $PINGPONG $ROUNDS"
}
# shellcheck disable=SC2046  # each rank's words
ip netns exec "$NSB" env ASAN_OPTIONS=detect_leaks=0 timeout 240 \
  mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self --mca btl_tcp_if_include xk0 \
  $(rank 0 server 198.51.100.1) : $(rank 1 client 198.51.100.2) > "$OUT/mpi-standalone.log" 2>&1 \
  || { tail -40 "$OUT/mpi-standalone.log" >&2; die "(3): mpirun failed"; }
grep "^mpi_pingpong:" "$OUT/mpi-standalone.log" | sed 's/^/   /'
grep -q "^mpi_pingpong: $((27 * ROUNDS)) messages verified$" "$OUT/mpi-standalone.log" \
  || die "(3): not every message was verified"
# Each rank receives every size once a round trip: 12.6 MB a round.
for r in 0 1; do
  got=$(awk '$1 == "net0" && $2 == "rx_bytes" { print $3 }' "$OUT/rank$r.stats")
  [ "${got:-0}" -ge $((12 * 1024 * 1024 * ROUNDS)) ] || die "(3): rank $r's stack received ${got:-no} bytes"
  echo "   rank $r's stack received $got bytes"
done
