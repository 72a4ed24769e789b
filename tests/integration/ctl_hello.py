#!/usr/bin/env python3
"""A raw HELLO on filterd's TCP control socket (stdlib only), for
integration.filterd_remote: a connection without the token (or with the
wrong one) must get ERROR permission_denied and be closed.

  ctl_hello.py --connect A:P [--token FILE]
      sends one HELLO (for a node on the node port) and prints
      "REPLY type=0xTT code=N closed=yes|no"; exits 0 if filterd answered
      ERROR permission_denied (6) and closed the connection.
"""
import argparse
import socket
import struct
import sys


def tlv(tag, value):
    return struct.pack(">HH", tag, len(value)) + value


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--connect", required=True)
    p.add_argument("--token")
    p.add_argument("--timeout", type=float, default=10)
    a = p.parse_args()
    host, port = a.connect.rsplit(":", 1)
    body = tlv(1, b"intruder") + tlv(2, struct.pack(">I", 1)) + tlv(3, struct.pack(">H", 1)) + tlv(4, b"\x01\x01")
    if a.token:
        body += tlv(7, open(a.token, "rb").read().strip())
    body += tlv(0x8008, bytes([2, 0, 0, 0, 0x0C, 0x66]))
    frame = struct.pack(">IBBHII", 0x584B4331, 1, 1, 0, len(body), 1) + body
    s = socket.create_connection((host, int(port)), timeout=a.timeout)
    s.sendall(frame)
    data = b""
    closed = False
    while True:
        try:
            chunk = s.recv(4096)
        except socket.timeout:
            break
        if not chunk:
            closed = True
            break
        data += chunk
    typ, code = None, None
    if len(data) >= 16:
        _, _, typ, _, blen, _ = struct.unpack(">IBBHII", data[:16])
        b = data[16:16 + blen]
        off = 0
        while off + 4 <= len(b):
            tag, n = struct.unpack(">HH", b[off:off + 4])
            if tag == 0x60 and n == 2:
                code = struct.unpack(">H", b[off + 4:off + 6])[0]
            off += 4 + n
    print("REPLY type=%s code=%s closed=%s" % (hex(typ) if typ is not None else None, code,
                                              "yes" if closed else "no"))
    return 0 if typ == 0xFF and code == 6 and closed else 1


if __name__ == "__main__":
    sys.exit(main())
