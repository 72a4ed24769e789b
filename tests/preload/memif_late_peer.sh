#!/usr/bin/env bash
# preload.memif_late_peer: the descriptors DPDK opens after the stack has
# started are the library's own too. A program under xkrun on a memif
# server end takes peers one after another; each new peer is taken by
# DPDK's interrupt thread (its control socket, and the memory and
# interrupt descriptors that come over it). The program then closes every
# descriptor it does not know (as a daemon does) and opens files, which
# take the lowest free numbers. If DPDK's were not guarded, the files would
# get their numbers and DPDK would close them under the program when the
# peer leaves -- and would never see the peer leave, so the next could not
# come.
#
#   memif_late_peer.sh XKRUN
set -uo pipefail
XKRUN=$1
PY=/usr/bin/python3
DIR=$(mktemp -d /tmp/xk-late-peer.XXXXXX)
SRV=
cleanup() {
  [ -n "$SRV" ] && kill "$SRV" 2> /dev/null
  wait 2> /dev/null
  rm -rf "$DIR"
}
trap cleanup EXIT
# Python's own allocations at exit are no leak of ours (ASan builds).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
unset XK_PORT XK_IP XK_GRAPH XK_FILTERD XKRUN_PID

cat > "$DIR/server.py" << 'EOF'
import os, socket, stat, sys
l = socket.create_server(("192.0.2.10", 7100))
print("listening", flush=True)
files = []
null = os.stat("/dev/null").st_rdev
while True:
    c, _ = l.accept()
    while True:
        cmd = c.recv(100).decode()
        if not cmd:
            break
        if cmd == "hello":
            c.sendall(b"hello")
        elif cmd == "closeall":
            # Every number above stderr but the listener and this connection.
            keep = sorted({l.fileno(), c.fileno()})
            lo = 3
            for k in keep:
                os.closerange(lo, k)
                lo = k + 1
            os.closerange(lo, 65536)
            files = [os.open("/dev/null", os.O_RDONLY) for _ in range(32)]
            c.sendall(b"closed")
        elif cmd == "check":
            bad = []
            for fd in files:
                try:
                    st = os.fstat(fd)
                    if not stat.S_ISCHR(st.st_mode) or st.st_rdev != null:
                        bad.append(fd)
                except OSError:
                    bad.append(fd)
            c.sendall(("ok" if not bad else "bad %s" % bad).encode())
        elif cmd == "quit":
            c.sendall(b"bye")
            c.close()
            sys.exit(0)
    c.close()
EOF
cat > "$DIR/client.py" << 'EOF'
import socket, sys, time
deadline = time.time() + 10
while True:
    try:
        c = socket.create_connection(("192.0.2.10", 7100), timeout=10)
        break
    except ConnectionRefusedError:
        if time.time() > deadline:
            raise
        time.sleep(0.2)
for cmd in sys.argv[1:]:
    c.sendall(cmd.encode())
    print(cmd, "->", c.recv(100).decode(), flush=True)
# Until the server has closed its end (its stack needs ours for that).
c.shutdown(socket.SHUT_WR)
while c.recv(100):
    pass
c.close()
EOF

"$XKRUN" --port "net_memif0,role=server,id=0,socket=$DIR/memif.sock" --ip 192.0.2.10/24 -- "$PY" "$DIR/server.py" \
  > "$DIR/server.log" 2>&1 &
SRV=$!
fails=0
# client NAME COMMANDS...: one client process (a new memif peer), its replies in NAME.log.
client() {
  local name=$1
  shift
  timeout 30 "$XKRUN" --port "net_memif1,role=client,id=0,socket=$DIR/memif.sock" --ip 192.0.2.11/24 -- \
    "$PY" "$DIR/client.py" "$@" > "$DIR/$name.log" 2>&1
  local rc=$?
  echo "client $name (status $rc):"
  sed 's/^/  /' "$DIR/$name.log"
  return $rc
}
expect_line() {  # NAME LINE
  grep -qx -- "$2" "$DIR/$1.log" || { echo "FAIL: client $1 did not get '$2'"; fails=$((fails + 1)); }
}
# (The socket is abstract; a client that comes first retries for 5 s.)
client first hello
expect_line first "hello -> hello"
# A second peer, taken while the program runs: DPDK's interrupt thread opens its descriptors.
client second hello closeall hello
expect_line second "closeall -> closed"
expect_line second "hello -> hello"
# That peer has gone; a third comes, and the program's files are still its own.
client third check quit
expect_line third "check -> ok"
expect_line third "quit -> bye"
wait "$SRV"
rc=$?
SRV=
[ "$rc" -eq 0 ] || { echo "FAIL: the server exited with $rc"; sed 's/^/  /' "$DIR/server.log"; fails=$((fails + 1)); }
[ "$fails" -eq 0 ] && echo "PASS" || echo "FAILED: $fails"
exit $((fails != 0))
