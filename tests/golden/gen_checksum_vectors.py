#!/usr/bin/python3
"""Golden vectors for the Internet checksum, computed by scapy.

The values come from an independent implementation (scapy.utils.checksum, and
the header checksums scapy fills in when it builds IP/UDP/TCP/ICMP packets), so
tests/unit/checksum_test.cpp checks xk against something that shares no code
with it. Run with the system python (Debian's python3-scapy):

    /usr/bin/python3 tests/golden/gen_checksum_vectors.py            # rewrite the file
    /usr/bin/python3 tests/golden/gen_checksum_vectors.py --check F  # compare with F

Everything is drawn from one fixed-seed random.Random, so the output is the
same on every run. File format, one vector per line ('#' starts a comment):

    buf <len> hex <bytes>     <csum>    the bytes, in hex
    buf <len> fill <byte>     <csum>    every byte equal to <byte> (hex)
    buf <len> pattern <seed>  <csum>    byte i = (i * 31 + seed) & 0xff
    buf <len> lcg <seed>      <csum>    x = seed; per byte: x = (x * 1103515245
                                        + 12345) mod 2^32, byte = x >> 24
    pkt <kind> <ip packet hex> ip=<csum> l4=<csum>

<csum> is the checksum field value as scapy gives it (4 hex digits, the
big-endian value of the two checksum bytes). For 'pkt' lines, ip= and l4= are
the IPv4 header checksum and the UDP/TCP/ICMP checksum scapy wrote into the
packet; UDP and TCP include the pseudo-header.
"""

import argparse
import random
import sys
from pathlib import Path

from scapy.layers.inet import ICMP, IP, TCP, UDP, IPOption_RR
from scapy.packet import Raw
from scapy.utils import checksum

SEED = 0x1071_1624
DEFAULT_OUT = Path(__file__).resolve().parent / "checksum_vectors.txt"

# scapy.utils.checksum folds the plain integer sum twice, which is exact only
# while that sum stays below 2^32: at most 65536 words of 0xffff.
MAX_LEN = 2 * 65536


def pattern_bytes(n, seed):
    return bytes((i * 31 + seed) & 0xFF for i in range(n))


def lcg_bytes(n, seed):
    out = bytearray(n)
    x = seed
    for i in range(n):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        out[i] = x >> 24
    return bytes(out)


def buf_line(data, rule):
    assert len(data) <= MAX_LEN
    return f"buf {len(data)} {rule} {checksum(data):04x}"


def buffers(rng):
    lines = ["# plain buffers: random bytes"]
    lengths = list(range(0, 71))
    lengths += [127, 128, 129, 255, 256, 257, 511, 512, 1023, 1024, 1499, 1500, 1501,
                2047, 2048, 4095, 4096, 8191, 8192, 8999, 9000]
    lengths += sorted(rng.randrange(71, 9001) for _ in range(12))
    for n in lengths:
        data = rng.randbytes(n)
        lines.append(buf_line(data, f"hex {data.hex() if n else '-'}"))

    lines.append("# plain buffers: all-zero and all-0xff (the +0 and -0 sums)")
    for byte, lens in ((0x00, [1, 2, 3, 64, 1500, 65536]),
                       (0xFF, [1, 2, 3, 4, 5, 64, 1500, 9000, 65535, 65536, 65537, MAX_LEN])):
        for n in lens:
            lines.append(buf_line(bytes([byte]) * n, f"fill {byte:02x}"))

    lines.append("# plain buffers: large, described by a rule")
    for n, seed in ((65535, 1), (65536, 2), (65537, 3), (100001, 200), (MAX_LEN - 1, 77)):
        lines.append(buf_line(pattern_bytes(n, seed), f"pattern {seed}"))
    for n in (9001, 65535, 65536, 65537, 99999, MAX_LEN):
        seed = rng.getrandbits(32)
        lines.append(buf_line(lcg_bytes(n, seed), f"lcg {seed}"))
    return lines


def rand_ip(rng):
    return ".".join(str(rng.randrange(1, 255)) for _ in range(4))


def ip_layer(rng, **kw):
    return IP(src=rand_ip(rng), dst=rand_ip(rng), id=rng.getrandbits(16),
              ttl=rng.randrange(1, 256), **kw)


def pkt_line(kind, pkt):
    wire = bytes(pkt)
    built = IP(wire)  # re-parse to read back the checksums scapy filled in
    l4 = built.payload
    return f"pkt {kind} {wire.hex()} ip={built.chksum:04x} l4={l4.chksum:04x}"


def packets(rng):
    lines = ["# packets built by scapy, which filled in every checksum"]
    for n in (0, 1, 2, 7, 8, 33, 512, 1471, 1472):
        p = ip_layer(rng) / UDP(sport=rng.getrandbits(16), dport=rng.getrandbits(16)) / \
            Raw(rng.randbytes(n))
        lines.append(pkt_line("udp", p))
    opts = [("MSS", 1460), ("NOP", None), ("WScale", 7), ("SAckOK", b""),
            ("Timestamp", (123456789, 987654321))]
    for n in (0, 1, 3, 100, 537, 1448, 1459):
        p = ip_layer(rng) / TCP(sport=rng.getrandbits(16), dport=rng.getrandbits(16),
                                seq=rng.getrandbits(32), ack=rng.getrandbits(32), flags="PA",
                                window=rng.getrandbits(16), options=opts) / \
            Raw(rng.randbytes(n))
        lines.append(pkt_line("tcp", p))
    for n in (0, 1, 56, 57, 1000):
        p = ip_layer(rng) / ICMP(type=8, id=rng.getrandbits(16), seq=rng.getrandbits(16)) / \
            Raw(rng.randbytes(n))
        lines.append(pkt_line("icmp", p))
    # IP options make the header longer than 20 bytes.
    p = ip_layer(rng, options=[IPOption_RR(routers=["10.0.0.1", "10.0.0.2"])]) / \
        UDP(sport=53, dport=rng.getrandbits(16)) / Raw(rng.randbytes(45))
    lines.append(pkt_line("udp", p))
    p = ip_layer(rng, options=[IPOption_RR(routers=["192.0.2.7"])]) / \
        TCP(sport=80, dport=rng.getrandbits(16), seq=rng.getrandbits(32), options=opts) / \
        Raw(rng.randbytes(99))
    lines.append(pkt_line("tcp", p))
    return lines


def generate():
    rng = random.Random(SEED)
    lines = ["# Internet checksum golden vectors. Generated by gen_checksum_vectors.py",
             "# (scapy); do not edit. See that script for the format."]
    lines += buffers(rng)
    lines += packets(rng)
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", metavar="FILE",
                    help="regenerate in memory and fail if FILE differs")
    ap.add_argument("--out", metavar="FILE", default=str(DEFAULT_OUT),
                    help=f"where to write (default {DEFAULT_OUT})")
    args = ap.parse_args()

    text = generate()
    if args.check is None:
        Path(args.out).write_text(text)
        print(f"wrote {args.out} ({text.count(chr(10))} lines)")
        return 0

    try:
        have = Path(args.check).read_text()
    except OSError as e:
        print(f"golden check: cannot read {args.check}: {e}", file=sys.stderr)
        return 1
    if have == text:
        print(f"golden check: {args.check} matches scapy's output")
        return 0
    want_lines, have_lines = text.splitlines(), have.splitlines()
    for i, (w, h) in enumerate(zip(want_lines, have_lines), 1):
        if w != h:
            print(f"golden check: {args.check} line {i} differs from scapy's output\n"
                  f"  file:  {h[:120]}\n  scapy: {w[:120]}", file=sys.stderr)
            break
    else:
        print(f"golden check: {args.check} has {len(have_lines)} lines, scapy gives "
              f"{len(want_lines)}", file=sys.stderr)
    print("golden check: regenerate with gen_checksum_vectors.py and review the diff",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
