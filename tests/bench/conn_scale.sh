#!/usr/bin/env bash
# A million idle connections: what each costs at rest in xk and in Linux,
# measured in one run (docs/BENCHMARKS.md, "A million idle connections").
#
#   conn_scale.sh BUILD_DIR        (as root; e.g. build/release)
#
# One program, tests/bench/conn_scale.cpp (xk-conn-scale), drives both
# stacks through the same calls:
#
#   xk:    two xk processes (the C API) over net_memif; the client opens N
#          connections to P server ports (ephemeral_min=1024, so 64,512
#          ports per server port), both ends report their RSS and heap in
#          use before the first connection and with all N established
#   linux: the same program on kernel sockets, clients and servers in two
#          namespaces over a veth pair (as many pairs of processes as the
#          descriptor limit asks); the kernel's memory is its slab
#          (/proc/meminfo "Slab") before and with all N established, for
#          2N sockets (both ends are in this kernel)
#
# Then one byte goes each way on every connection and is checked (the
# connections are real), and each side's memory per connection is printed
# with the ratio xk / Linux.
#
#   XK_SCALE_CONNS (1000000), XK_SCALE_PORTS (16)
set -euo pipefail
TEST_NAME=conn_scale
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../integration/lib.sh"

[ $# -eq 1 ] || die "usage: $0 BUILD_DIR"
BIN=$(readlink -f "$1/tests/bench/xk-conn-scale")
[ -x "$BIN" ] || die "$BIN is not executable"
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
N=${XK_SCALE_CONNS:-1000000}
P=${XK_SCALE_PORTS:-16}
[ "$N" -ge 1 ] && [ "$P" -ge 1 ] || die "XK_SCALE_CONNS and XK_SCALE_PORTS must be positive"
[ $((N / P)) -le 64000 ] || die "$N connections over $P ports need more than 64,000 ephemeral ports per port: raise XK_SCALE_PORTS"

NSA=xk-cs-$$-a
NSB=xk-cs-$$-b
LNX=xkcs$$
OUT=$(mktemp -d /tmp/xk-conn-scale.XXXXXX)
MEMIF=$OUT/memif.sock
install_cleanup
LIMIT=$((N / 2000 + 120))  # seconds to establish them all

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" "$2" | head -1; }
slab_kb() { sed -n 's/^Slab: *\([0-9]*\) kB/\1/p' /proc/meminfo; }

step "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, kernel $(uname -r)"
OLD_NR_OPEN=$(cat /proc/sys/fs/nr_open)
if [ "$OLD_NR_OPEN" -lt $((N + 8192)) ]; then
  echo $((N + 8192)) > /proc/sys/fs/nr_open
  trap 'rc=$?; echo "$OLD_NR_OPEN" > /proc/sys/fs/nr_open; (exit $rc); cleanup' EXIT
fi

# start_end NAME NETNS ARGS...: one end, in NETNS (or here when empty), whose
# stdin is a fifo this script holds open as ${NAME}_fd: a line on it is the
# go-ahead for the echo.
start_end() {
  local name=$1 ns=$2
  shift 2
  mkfifo "$OUT/$name.go"
  if [ -n "$ns" ]; then
    ip netns exec "$ns" "$BIN" "$@" < "$OUT/$name.go" > "$OUT/$name.log" 2>&1 &
  else
    "$BIN" "$@" < "$OUT/$name.go" > "$OUT/$name.log" 2>&1 &
  fi
  PIDS+=($!)
  eval "exec {${name}_fd}>\"\$OUT/\$name.go\""  # hold the fifo open for writing
}

# finished PID: the status of a client, which exits by itself after its
# ECHOED line -- up to tens of ms later for one tearing down a stack; a
# SIGTERM sent before that would read as its failure. Stopped only if it
# has not exited within 30 s.
finished() {
  local pid=$1 i
  for ((i = 0; i < 600; i++)); do
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.05
  done
  stop "$pid"
}

# ---- xk ------------------------------------------------------------------------
step "xk: $N connections over $P ports, two xk processes over net_memif"
start_end xks "" server xk --count "$N" --ports "$P" --ip 192.0.2.10 \
  --port "net_memif0,role=server,id=0,socket=$MEMIF" --tcp-opts "syn_backlog=65536"
XKS=${PIDS[-1]}
# The server's stack comes up with the memif link, when the client's does.
T0=$(date +%s.%N)
start_end xkc "" client xk --count "$N" --ports "$P" --ip 192.0.2.11 --peer 192.0.2.10 \
  --port "net_memif1,role=client,id=0,socket=$MEMIF" --tcp-opts "ephemeral_min=1024"
XKC=${PIDS[-1]}
wait_for "$OUT/xks.log" "LISTENING" "$XKS" 60
wait_for "$OUT/xkc.log" "ESTABLISHED" "$XKC" "$LIMIT"
wait_for "$OUT/xks.log" "ESTABLISHED" "$XKS" 60
XK_SECS=$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
for side in xks xkc; do
  f=$OUT/$side.log
  rss=$(( $(field rss_kb "$f") - $(field base_rss_kb "$f") ))
  heap=$(( $(field heap "$f") - $(field base_heap "$f") ))
  eval "${side}_rss=$(awk -v r="$rss" -v n="$N" 'BEGIN { printf "%.0f", r * 1024 / n }')"
  eval "${side}_heap=$(awk -v h="$heap" -v n="$N" 'BEGIN { printf "%.0f", h / n }')"
done
echo "   established in $XK_SECS s; per connection: server RSS ${xks_rss} B (heap ${xks_heap} B)," \
     "client RSS ${xkc_rss} B (heap ${xkc_heap} B)"
echo go >&"$xks_fd"
echo go >&"$xkc_fd"
wait_for "$OUT/xkc.log" "ECHOED n=$N" "$XKC" 300
wait_for "$OUT/xks.log" "ECHOED n=$N" "$XKS" 60
echo "   one byte echoed on each of the $N connections"
finished "$XKC" || die "the xk client failed"
stop "$XKS" || true  # it runs until stopped

# ---- Linux ----------------------------------------------------------------------
step "Linux: $N connections over $P ports, two namespaces over a veth"
ip netns add "$NSA"
ip netns add "$NSB"
ip link add "$LNX" type veth peer name "${LNX}b"
ip link set "$LNX" netns "$NSA"
ip link set "${LNX}b" netns "$NSB"
ip -n "$NSA" addr add 192.0.2.1/24 dev "$LNX"
ip -n "$NSB" addr add 192.0.2.2/24 dev "${LNX}b"
for ns in "$NSA" "$NSB"; do
  ip -n "$ns" link set lo up
  ip netns exec "$ns" sysctl -qw net.core.somaxconn=65535 net.ipv4.tcp_max_syn_backlog=65535 \
    net.ipv4.ip_local_port_range="1024 65535"
done
ip -n "$NSA" link set "$LNX" up
ip -n "$NSB" link set "${LNX}b" up
sync
echo 2 > /proc/sys/vm/drop_caches 2>/dev/null || true  # reclaimable slab out of the way
# A process may hold only as many kernel descriptors as its hard limit
# (raising it needs CAP_SYS_RESOURCE, which a container may not grant: here
# 20,000), so Linux's connections are spread over pairs of processes, each
# pair on a port of its own; xk's descriptors are its own, one process holds
# them all.
HARD=$(ulimit -Hn)
[ "$HARD" = unlimited ] && HARD=1048576
PER=$(( HARD - 500 ))
[ "$PER" -gt 60000 ] && PER=60000
[ "$PER" -ge 1 ] || die "the descriptor limit ($HARD) is too low"
PAIRS=$(( (N + PER - 1) / PER ))
echo "   $PAIRS pairs of processes (at most $PER connections each: RLIMIT_NOFILE's hard limit is $HARD)"
SLAB0=$(slab_kb)
T0=$(date +%s.%N)
left=$N
for ((j = 0; j < PAIRS; j++)); do
  n=$(( left < PER ? left : PER )); left=$(( left - n ))
  start_end "lxs$j" "$NSA" server linux --count "$n" --ports 1 --base-port $((5001 + j)) --ip 192.0.2.1
  eval "LXS$j=\${PIDS[-1]}"
  eval "LXN$j=$n"
done
for ((j = 0; j < PAIRS; j++)); do
  eval "pid=\$LXS$j"
  wait_for "$OUT/lxs$j.log" "LISTENING" "$pid" 30
  eval "n=\$LXN$j"
  start_end "lxc$j" "$NSB" client linux --count "$n" --ports 1 --base-port $((5001 + j)) --ip 192.0.2.2 --peer 192.0.2.1
  eval "LXC$j=\${PIDS[-1]}"
done
for ((j = 0; j < PAIRS; j++)); do
  eval "pid=\$LXC$j"; wait_for "$OUT/lxc$j.log" "ESTABLISHED" "$pid" "$LIMIT"
  eval "pid=\$LXS$j"; wait_for "$OUT/lxs$j.log" "ESTABLISHED" "$pid" 60
done
LX_SECS=$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
SLAB1=$(slab_kb)
LX_SLAB=$(awk -v a="$SLAB0" -v b="$SLAB1" -v n="$N" 'BEGIN { printf "%.0f", (b - a) * 1024 / (2 * n) }')
echo "   established in $LX_SECS s; kernel slab $SLAB0 -> $SLAB1 kB: ${LX_SLAB} B per socket"
for ((j = 0; j < PAIRS; j++)); do
  eval "echo go >&\$lxs${j}_fd; echo go >&\$lxc${j}_fd"
done
for ((j = 0; j < PAIRS; j++)); do
  eval "n=\$LXN$j; pid=\$LXC$j"; wait_for "$OUT/lxc$j.log" "ECHOED n=$n" "$pid" 300
  eval "pid=\$LXS$j"; wait_for "$OUT/lxs$j.log" "ECHOED n=$n" "$pid" 60
done
echo "   one byte echoed on each of the $N connections"
for ((j = 0; j < PAIRS; j++)); do
  eval "finished \$LXC$j" || die "a Linux client failed"
  eval "stop \$LXS$j" || true
done

XK_WORST=$(( xks_rss > xkc_rss ? xks_rss : xkc_rss ))
echo "idle established connections: memory per connection (each end)"
printf "%-44s %10s\n" "xk server, RSS (heap)" "$xks_rss ($xks_heap)"
printf "%-44s %10s\n" "xk client, RSS (heap)" "$xkc_rss ($xkc_heap)"
printf "%-44s %10s\n" "Linux, kernel slab per socket" "$LX_SLAB"
echo "RESULT conns=$N xk_rss_per_conn=$XK_WORST xk_heap_server=$xks_heap xk_heap_client=$xkc_heap" \
     "linux_slab_per_socket=$LX_SLAB ratio=$(awk -v a="$XK_WORST" -v b="$LX_SLAB" 'BEGIN { printf "%.2f", a / b }')" \
     "xk_secs=$XK_SECS linux_secs=$LX_SECS"
