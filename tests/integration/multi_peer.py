#!/usr/bin/env python3
"""Linux peers for the filterd integration test (stdlib only).

  multi_peer.py echo --peer A --port P --conns N --bytes B
      opens N connections at once; each sends B bytes of its own
      pseudo-random stream, shuts down its side, reads the echo to the end,
      and checks it is the same (SHA-256). Prints "RESULT conns=N ok=K" and
      exits 0 only if every connection came back intact.
  multi_peer.py refused --peer A --port P
      expects the connection to be refused (RST): exits 0 if so.
  multi_peer.py unreachable --peer A --port P
      sends a UDP datagram; expects ICMP port unreachable (ECONNREFUSED on
      the connected socket's next receive): exits 0 if so.
  multi_peer.py sink --bind A --port P --conns N
      accepts N connections, reads each to its end, prints one
      "CONN peer=A:P bytes=N sha256=HEX" line each.
  multi_peer.py rstwatch --peer A --port P --iface IF --trigger FILE
      connects and sends --rate bytes/s until the connection is reset; a
      packet socket on IF timestamps its segments and the RST. FILE appears
      just before the script kills the node; from the first segment sent
      after that (its mtime), the RST must come within --bound s. Prints
      "RESULT rst_after_ms=X" and exits 0 if so.

  echo and sink take --rate B (bytes/s per connection: paced sending for
  echo, paced reading for sink) and sink --rcvbuf B, so that transfers last
  long enough to be cut by a failure in the middle.
"""
import argparse
import ctypes
import hashlib
import os
import socket
import struct
import subprocess
import sys
import threading
import time


def stream(seed, n):
    out = bytearray()
    c = 0
    while len(out) < n:
        out += hashlib.sha256(seed.to_bytes(8, "little") + c.to_bytes(4, "little")).digest()
        c += 1
    return bytes(out[:n])


def send_paced(s, data, rate, chunk=16384):
    if not rate:
        s.sendall(data)
        return
    start = time.monotonic()
    for off in range(0, len(data), chunk):
        s.sendall(data[off:off + chunk])
        ahead = start + (off + chunk) / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)


def echo(args):
    results = [False] * args.conns

    def one(i):
        data = stream(1000 + i, args.bytes)
        try:
            s = socket.create_connection((args.peer, args.port), timeout=args.timeout)
            s.settimeout(args.timeout)
            got = bytearray()

            def reader():
                while True:
                    k = s.recv(65536)
                    if not k:
                        return
                    got.extend(k)

            t = threading.Thread(target=reader)
            t.start()
            send_paced(s, data, args.rate)
            s.shutdown(socket.SHUT_WR)
            t.join(args.timeout)
            s.close()
            results[i] = hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
            if not results[i]:
                print(f"conn {i}: {len(got)} of {len(data)} bytes came back, or not as sent", file=sys.stderr)
        except OSError as e:
            print(f"conn {i}: {e}", file=sys.stderr)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(args.conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = sum(results)
    print(f"RESULT conns={args.conns} ok={ok}", flush=True)
    return 0 if ok == args.conns else 1


def refused(args):
    try:
        socket.create_connection((args.peer, args.port), timeout=args.timeout).close()
    except ConnectionRefusedError:
        print("RESULT refused", flush=True)
        return 0
    except OSError as e:
        print(f"RESULT {e}", flush=True)
        return 1
    print("RESULT connected", flush=True)
    return 1


def unreachable(args):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(args.timeout)
    s.connect((args.peer, args.port))
    s.send(b"anyone?")
    try:
        s.recv(100)
    except ConnectionRefusedError:
        print("RESULT unreachable", flush=True)
        return 0
    except OSError as e:
        print(f"RESULT {e}", flush=True)
        return 1
    print("RESULT answered", flush=True)
    return 1


def sink(args):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if args.rcvbuf:
        # Inherited by the accepted sockets: a small window keeps the sender's
        # bytes on the wire (and in its retransmit queue), not in our buffer.
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.rcvbuf)
    ls.bind((args.bind, args.port))
    ls.listen(64)
    ls.settimeout(args.timeout)
    print("READY", flush=True)
    threads = []

    def one(conn, peer):
        h = hashlib.sha256()
        n = 0
        conn.settimeout(args.timeout)
        start = time.monotonic()
        while True:
            k = conn.recv(16384 if args.rate else 65536)
            if not k:
                break
            h.update(k)
            n += len(k)
            if args.rate:
                ahead = start + n / args.rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
        conn.close()
        print(f"CONN peer={peer[0]}:{peer[1]} bytes={n} sha256={h.hexdigest()}", flush=True)

    for _ in range(args.conns):
        conn, peer = ls.accept()
        print(f"ACCEPTED peer={peer[0]}:{peer[1]}", flush=True)
        t = threading.Thread(target=one, args=(conn, peer))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return 0


ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


def tcp_of(frame):
    """(src port, dst port, flags, payload length) of an IPv4 TCP frame, or None."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[23] != 6:
        return None
    ihl = (frame[14] & 0x0F) * 4
    total = struct.unpack("!H", frame[16:18])[0]
    t = 14 + ihl
    if len(frame) < t + 20:
        return None
    sport, dport = struct.unpack("!HH", frame[t:t + 4])
    doff = (frame[t + 12] >> 4) * 4
    return sport, dport, frame[t + 13], total - ihl - doff


SO_ATTACH_FILTER = 26
SO_RCVBUFFORCE = 33


def attach_filter(sock, iface, expression):
    """Lets only what `expression` matches into the packet socket: tcpdump
    compiles it (-dd: the classic BPF program as C initializers), the kernel
    filters. With every frame of the link coming in, a slow reader on a busy
    machine let the socket's queue overflow and lost the very RST it waits for."""
    code = subprocess.run(["tcpdump", "-i", iface, "-dd", expression], capture_output=True, text=True,
                          check=True).stdout
    insns = [tuple(int(x, 0) for x in line.strip(" {},").split(",")) for line in code.splitlines() if line.strip()]
    prog = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in insns))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("HL", len(insns), ctypes.addressof(prog)))
    return prog  # the kernel copied it; kept alive until then anyway


def rstwatch(args):
    cap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    cap.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
    attach_filter(cap, args.iface, f"tcp port {args.port}")
    cap.bind((args.iface, 0))
    cap.settimeout(0.05)
    s = socket.create_connection((args.peer, args.port), timeout=args.timeout)
    lport = s.getsockname()[1]
    print(f"CONNECTED local_port={lport}", flush=True)
    out_times = []  # monotonic times of our segments
    rst = []
    trig = [None]
    stop = threading.Event()

    def take(frame, addr):
        now = time.monotonic()
        t = tcp_of(frame)
        if t is None:
            return
        sport, dport, flags, _ = t
        if addr[2] == PACKET_OUTGOING and sport == lport and dport == args.port:
            out_times.append(now)
        elif addr[2] != PACKET_OUTGOING and sport == args.port and dport == lport and flags & 0x04:
            rst.append(now)
            stop.set()

    def capture():
        while not stop.is_set():
            try:
                frame, addr = cap.recvfrom(65536)
            except socket.timeout:
                continue
            take(frame, addr)
        # The kernel hands the RST to the TCP socket and to this one at once:
        # the sender may have failed with ECONNRESET and stopped us before we
        # read its frame. What is queued still is read now.
        cap.settimeout(0.2)
        while not rst:
            try:
                frame, addr = cap.recvfrom(65536)
            except socket.timeout:
                break
            take(frame, addr)

    c = threading.Thread(target=capture)
    c.start()
    chunk = bytes(4096)
    err = None
    # The trigger's mtime is wall-clock time; the capture's, monotonic.
    wall_minus_mono = time.time() - time.monotonic()
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if trig[0] is None and os.path.exists(args.trigger):
            trig[0] = os.stat(args.trigger).st_mtime - wall_minus_mono
        try:
            s.send(chunk, socket.MSG_DONTWAIT)
        except BlockingIOError:
            pass
        except OSError as e:
            err = e
            break
        if rst and trig[0] is not None:
            break
        time.sleep(len(chunk) / args.rate)
    # The reset reaches the socket too (ECONNRESET, or EPIPE after it).
    if err is None:
        try:
            s.settimeout(2)
            s.recv(1)
        except OSError as e:
            err = e
    stop.set()
    c.join()
    s.close()
    if not rst:
        print(f"RESULT no_rst error={err}", flush=True)
        return 1
    t_rst = rst[0]
    after = [t for t in out_times if trig[0] is not None and t >= trig[0]]
    if after and after[0] <= t_rst:
        seg, how = after[0], "from the first segment after the kill"
    else:
        # The reset came before the script said so: the segment it answers
        # is the last one we sent before it.
        seg, how = max(t for t in out_times if t <= t_rst), "segment the RST answers"
    ms = (t_rst - seg) * 1000
    print(f"RESULT rst_after_ms={ms:.3f} ({how}) socket_error={err!r}", flush=True)
    ok = ms <= args.bound * 1000 and isinstance(err, (ConnectionResetError, BrokenPipeError))
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["echo", "refused", "unreachable", "sink", "rstwatch"])
    p.add_argument("--peer")
    p.add_argument("--bind", default="0.0.0.0")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--conns", type=int, default=1)
    p.add_argument("--bytes", type=int, default=1 << 20)
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--rate", type=float, default=0, help="bytes/s per connection (0: as fast as it goes)")
    p.add_argument("--rcvbuf", type=int, default=0, help="sink: SO_RCVBUF of the accepted connections")
    p.add_argument("--iface", help="rstwatch: the interface to watch")
    p.add_argument("--trigger", help="rstwatch: a file that appears when the node is gone")
    p.add_argument("--bound", type=float, default=1.0, help="rstwatch: seconds the RST may take")
    args = p.parse_args()
    if args.mode == "rstwatch" and not args.rate:
        args.rate = 65536
    return {"echo": echo, "refused": refused, "unreachable": unreachable, "sink": sink,
            "rstwatch": rstwatch}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
