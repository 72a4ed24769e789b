#!/usr/bin/env python3
"""The Linux end of the TCP integration test (stdlib only).

  tcp_peer.py server --bind A --port P [--ready FILE]
      accepts one connection, reads to end of stream, prints
      "RESULT bytes=N sha256=HEX seconds=S", closes.
  tcp_peer.py client --peer A --port P --bytes N --seed S
      sends N bytes of the xk-tcp-perf test stream (a 1 MiB block of
      SHA-256(seed as 8 little-endian bytes, counter as 4) outputs, repeated),
      shuts down its side, waits for the peer to close, prints
      "RESULT bytes=N sha256=HEX seconds=S".
"""
import argparse
import hashlib
import socket
import struct
import sys
import time


def stream_block(seed):
    return b"".join(hashlib.sha256(struct.pack("<QI", seed, c)).digest() for c in range((1 << 20) // 32))


def parse_bytes(text):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(text[-1].lower(), 1)
    return int(text[:-1] if mult != 1 else text) * mult


def server(args):
    # An IPv6 address (a colon in it) binds an AF_INET6 socket.
    ls = socket.socket(socket.AF_INET6 if ":" in args.bind else socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((args.bind, args.port))
    ls.listen(1)
    if args.ready:
        with open(args.ready, "w") as f:
            f.write("ready\n")
    ls.settimeout(args.timeout)
    conn, peer = ls.accept()
    conn.settimeout(args.timeout)
    h = hashlib.sha256()
    n = 0
    t0 = time.monotonic()
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    while True:
        k = conn.recv_into(buf)
        if k == 0:
            break
        h.update(view[:k])
        n += k
    secs = time.monotonic() - t0
    conn.close()
    ls.close()
    print(f"RESULT bytes={n} sha256={h.hexdigest()} seconds={secs:.6f} peer={peer[0]}:{peer[1]}", flush=True)


def client(args):
    block = stream_block(args.seed)
    total = parse_bytes(args.bytes)
    s = socket.create_connection((args.peer, args.port), timeout=args.timeout)
    h = hashlib.sha256()
    sent = 0
    view = memoryview(block)
    t0 = time.monotonic()
    while sent < total:
        off = sent % len(block)
        chunk = view[off:off + min(total - sent, len(block) - off)]
        s.sendall(chunk)
        h.update(chunk)
        sent += len(chunk)
    s.shutdown(socket.SHUT_WR)
    while s.recv(65536):
        pass
    secs = time.monotonic() - t0
    s.close()
    print(f"RESULT bytes={sent} sha256={h.hexdigest()} seconds={secs:.6f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="role", required=True)
    ps = sub.add_parser("server")
    ps.add_argument("--bind", required=True)
    ps.add_argument("--port", type=int, required=True)
    ps.add_argument("--ready")
    ps.add_argument("--timeout", type=float, default=120)
    pc = sub.add_parser("client")
    pc.add_argument("--peer", required=True)
    pc.add_argument("--port", type=int, required=True)
    pc.add_argument("--bytes", required=True)
    pc.add_argument("--seed", type=int, default=1)
    pc.add_argument("--timeout", type=float, default=120)
    args = p.parse_args()
    try:
        server(args) if args.role == "server" else client(args)
    except OSError as e:
        print(f"tcp_peer.py: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
