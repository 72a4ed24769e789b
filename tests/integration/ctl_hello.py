#!/usr/bin/env python3
"""A raw HELLO on filterd's TCP control socket (stdlib only), for
integration.filterd_remote: a connection without a proof of the token (no
token, the token itself in clear, a proof made with a wrong one) must get
ERROR permission_denied and be closed; one with the right proof registers.

  ctl_hello.py --connect A:P [--token FILE]
      sends one HELLO carrying the token in clear (the old way, refused)
  ctl_hello.py --connect A:P --prove FILE [--expect-ok]
      AUTH, then HELLO with the node's proof made with FILE's token, both
      computed here with Python's own hmac (docs/control-protocol.md,
      "Proving the token"), as an independent check of filterd's
  Prints "REPLY type=0xTT code=N closed=yes|no"; exits 0 if filterd answered
  ERROR permission_denied (6) and closed the connection, or with
  --expect-ok if it answered HELLO_REPLY and filterd's own proof checked.
"""
import argparse
import hashlib
import hmac
import os
import socket
import struct
import sys

NODE_LABEL = b"xk-filterd control v1: the node proves the token"
SERVER_LABEL = b"xk-filterd control v1: filterd proves the token"


def tlv(tag, value):
    return struct.pack(">HH", tag, len(value)) + value


def frame(typ, rid, body):
    return struct.pack(">IBBHII", 0x584B4331, 1, typ, 0, len(body), rid) + body


def read_frame(s):
    """One frame: (type, {tag: value}, raw body); (None, {}, b"") if the peer closed."""
    data = b""
    while len(data) < 16:
        chunk = s.recv(16 - len(data))
        if not chunk:
            return None, {}, b""
        data += chunk
    _, _, typ, _, blen, _ = struct.unpack(">IBBHII", data)
    body = b""
    while len(body) < blen:
        chunk = s.recv(blen - len(body))
        if not chunk:
            return None, {}, b""
        body += chunk
    fields, off = {}, 0
    while off + 4 <= len(body):
        tag, n = struct.unpack(">HH", body[off:off + 4])
        fields[tag] = body[off + 4:off + 4 + n]
        off += 4 + n
    return typ, fields, body


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--connect", required=True)
    p.add_argument("--token")
    p.add_argument("--prove")
    p.add_argument("--expect-ok", action="store_true")
    p.add_argument("--timeout", type=float, default=10)
    a = p.parse_args()
    host, port = a.connect.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=a.timeout)
    body = tlv(1, b"intruder") + tlv(2, struct.pack(">I", 1)) + tlv(3, struct.pack(">H", 1)) + tlv(4, b"\x01\x03")
    if a.token:
        body += tlv(7, open(a.token, "rb").read().strip())
    server_ok = None
    if a.prove:
        token = open(a.prove, "rb").read().strip()
        ours = os.urandom(32)
        s.sendall(frame(0x11, 1, tlv(9, ours)))
        typ, fields, _ = read_frame(s)
        if typ != 0x91:
            print("AUTH answered with type %s" % (hex(typ) if typ is not None else None))
            return 1
        theirs = fields[9]
        server_ok = hmac.compare_digest(fields[10], hmac.new(token, SERVER_LABEL + ours + theirs, hashlib.sha256).digest())
        body += tlv(10, hmac.new(token, NODE_LABEL + ours + theirs, hashlib.sha256).digest())
    body += tlv(0x8008, bytes([2, 0, 0, 0, 0x0C, 0x66]))
    s.sendall(frame(0x01, 2, body))
    if a.expect_ok:
        typ, fields, _ = read_frame(s)
        print("REPLY type=%s server_proof=%s" % (hex(typ) if typ is not None else None, server_ok))
        return 0 if typ == 0x81 and server_ok else 1
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
