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
"""
import argparse
import hashlib
import socket
import sys
import threading


def stream(seed, n):
    out = bytearray()
    c = 0
    while len(out) < n:
        out += hashlib.sha256(seed.to_bytes(8, "little") + c.to_bytes(4, "little")).digest()
        c += 1
    return bytes(out[:n])


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
            s.sendall(data)
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
    ls.bind((args.bind, args.port))
    ls.listen(64)
    ls.settimeout(args.timeout)
    print("READY", flush=True)
    threads = []

    def one(conn, peer):
        h = hashlib.sha256()
        n = 0
        conn.settimeout(args.timeout)
        while True:
            k = conn.recv(65536)
            if not k:
                break
            h.update(k)
            n += len(k)
        conn.close()
        print(f"CONN peer={peer[0]}:{peer[1]} bytes={n} sha256={h.hexdigest()}", flush=True)

    for _ in range(args.conns):
        conn, peer = ls.accept()
        t = threading.Thread(target=one, args=(conn, peer))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["echo", "refused", "unreachable", "sink"])
    p.add_argument("--peer")
    p.add_argument("--bind", default="0.0.0.0")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--conns", type=int, default=1)
    p.add_argument("--bytes", type=int, default=1 << 20)
    p.add_argument("--timeout", type=float, default=60)
    args = p.parse_args()
    return {"echo": echo, "refused": refused, "unreachable": unreachable, "sink": sink}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
