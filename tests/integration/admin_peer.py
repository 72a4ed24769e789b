#!/usr/bin/env python3
"""Linux peers for integration.filterd_admin (stdlib only).

  admin_peer.py hold --peer A --port P --go FILE [--bytes B]
      opens one TCP connection to an echo server, sends B bytes and checks
      the echo, prints "CONNECTED lport=N", waits until FILE exists, sends B
      more bytes, shuts its side down and checks the whole echo to the end.
      Exits 0 only if the connection was never disturbed.
  admin_peer.py udp --peer A --port P --count N
      sends N datagrams (each "dgram <i>") from one socket, 2 ms apart;
      prints "SENT n=N".
"""
import argparse
import hashlib
import os
import socket
import sys
import time


def data(seed, n):
    out = bytearray()
    c = 0
    while len(out) < n:
        out += hashlib.sha256(bytes([seed]) + c.to_bytes(4, "little")).digest()
        c += 1
    return bytes(out[:n])


def recv_exactly(s, n):
    got = bytearray()
    while len(got) < n:
        b = s.recv(n - len(got))
        if not b:
            raise RuntimeError("connection closed after %d of %d bytes" % (len(got), n))
        got += b
    return bytes(got)


def hold(args):
    s = socket.create_connection((args.peer, args.port), timeout=30)
    first = data(1, args.bytes)
    s.sendall(first)
    if recv_exactly(s, len(first)) != first:
        print("FAIL first echo differs")
        return 1
    print("CONNECTED lport=%d" % s.getsockname()[1], flush=True)
    deadline = time.time() + 120
    while not os.path.exists(args.go):
        if time.time() > deadline:
            print("FAIL no go")
            return 1
        time.sleep(0.05)
    second = data(2, args.bytes)
    s.sendall(second)
    s.shutdown(socket.SHUT_WR)
    rest = bytearray()
    while True:
        b = s.recv(65536)
        if not b:
            break
        rest += b
    if bytes(rest) != second:
        print("FAIL second echo differs (%d bytes of %d)" % (len(rest), len(second)))
        return 1
    print("RESULT ok bytes=%d" % (2 * args.bytes))
    return 0


def udp(args):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(args.count):
        s.sendto(b"dgram %d" % i, (args.peer, args.port))
        time.sleep(0.002)
    print("SENT n=%d" % args.count)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["hold", "udp"])
    p.add_argument("--peer", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--go", default="")
    p.add_argument("--bytes", type=int, default=65536)
    p.add_argument("--count", type=int, default=10)
    args = p.parse_args()
    try:
        return hold(args) if args.mode == "hold" else udp(args)
    except (OSError, RuntimeError) as e:
        print("FAIL %s" % e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
