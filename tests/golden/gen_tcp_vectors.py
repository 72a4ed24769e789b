#!/usr/bin/python3
"""Golden TCP/IPv4 segments, built by scapy, for tests/unit/tcp_wire_test.cpp.

scapy shares no code with xk, so a segment whose header, options and checksum
xk reads (and writes) the way scapy built them is checked against an
independent implementation. Run with the system python (Debian's python3-scapy):

    /usr/bin/python3 tests/golden/gen_tcp_vectors.py            # rewrite tcp_vectors.txt
    /usr/bin/python3 tests/golden/gen_tcp_vectors.py --check F  # compare with F

Fixed inputs only, so the output is the same on every run. One vector per
line ('#' starts a comment): the word 'tcp', the IPv4 packet in hex, then
key=value fields as scapy dissects the packet it built:

    src dst                  IPv4 addresses (dotted quad)
    sport dport seq ack      TCP fields, decimal
    dataofs reserved flags   scapy's split of bytes 12-13: 4, 3 and 9 bits
                             (flags bit 8 is the former NS bit, RFC 3540)
    window chksum urgptr     decimal; chksum is the value scapy computed
    mss ws ts sack           options ('-' when absent); ts=tsval:tsecr,
                             sack=left:right,left:right,...
    sackok                   1 when SACK-permitted is present
    unknown                  kinds scapy did not name, comma-separated, or '-'
    payload                  payload length in bytes
    layout                   'xk' when the options are in the order and
                             alignment tcp::write_options uses, so xk must
                             reproduce the header byte for byte; 'other' when
                             they are only to be parsed
"""

import sys
from pathlib import Path

import golden_cli

from scapy.layers.inet import IP, TCP
from scapy.packet import Raw

DEFAULT_OUT = Path(__file__).resolve().parent / "tcp_vectors.txt"
US = "192.0.2.10"
PEER = "192.0.2.20"
FAR = "198.51.100.7"

NOP = ("NOP", None)


def pattern(n, seed):
    return bytes((i * 29 + seed) & 0xFF for i in range(n))


# (layout, src, dst, TCP fields, options, payload length)
CASES = [
    # SYN as a client sends it: MSS, SACK-permitted folded into the timestamp
    # option's padding, window scale.
    ("xk", PEER, US, dict(sport=40001, dport=80, seq=0x12345678, flags="S", window=64240),
     [("MSS", 1460), ("SAckOK", b""), ("Timestamp", (0x01020304, 0)), NOP, ("WScale", 7)], 0),
    # The SYN-ACK answering it.
    ("xk", US, PEER, dict(sport=80, dport=40001, seq=0xFEDCBA98, ack=0x12345679, flags="SA", window=65160),
     [("MSS", 1440), ("SAckOK", b""), ("Timestamp", (0xA0B0C0D0, 0x01020304)), NOP, ("WScale", 9)], 0),
    # SYN with the MSS alone (RFC 9293 3.7.1).
    ("xk", PEER, US, dict(sport=1024, dport=22, seq=1, flags="S", window=8192), [("MSS", 536)], 0),
    # SYN without timestamps: SACK-permitted, with its own two NOPs, before
    # the window scale (the order Linux, the BSDs and Windows write).
    ("xk", PEER, US, dict(sport=50000, dport=443, seq=0x80000000, flags="S", window=29200),
     [("MSS", 1460), NOP, NOP, ("SAckOK", b""), NOP, ("WScale", 14)], 0),
    # SYN with timestamps but no SACK-permitted: NOP NOP before them.
    ("xk", PEER, FAR, dict(sport=33333, dport=8080, seq=0x7FFFFFFF, flags="S", window=1024),
     [("MSS", 8960), NOP, NOP, ("Timestamp", (0xFFFFFFFF, 0)), NOP, ("WScale", 0)], 0),
    # ACK with timestamps and three SACK blocks: the full 40 bytes.
    ("xk", US, PEER, dict(sport=80, dport=40001, seq=0xFEDCBA99, ack=0x12349000, flags="A", window=501),
     [NOP, NOP, ("Timestamp", (0xA0B0C1D0, 0x01020404)), NOP, NOP,
      ("SAck", (0x1234A000, 0x1234B000, 0x1234C000, 0x1234C5B4, 0x1234D000, 0x1234E000))], 0),
    # ACK with four SACK blocks and no timestamps (36 bytes).
    ("xk", US, PEER, dict(sport=80, dport=40001, seq=5, ack=0x10000, flags="A", window=1000),
     [NOP, NOP, ("SAck", (0x20000, 0x20100, 0x30000, 0x30001, 0x40000, 0x40500, 0x50000, 0x5FFFF))], 0),
    # One SACK block across the wrap of the sequence space.
    ("xk", US, PEER, dict(sport=80, dport=40001, seq=0xFFFFFF00, ack=0xFFFFFFF0, flags="A", window=2048),
     [NOP, NOP, ("Timestamp", (7, 8)), NOP, NOP, ("SAck", (0xFFFFFFF8, 0x00000010))], 0),
    # Data: odd payload lengths with timestamps.
    ("xk", PEER, US, dict(sport=40001, dport=80, seq=0x12345679, ack=0xFEDCBA99, flags="PA", window=502),
     [NOP, NOP, ("Timestamp", (0x01020405, 0xA0B0C0D0))], 1),
    ("xk", PEER, US, dict(sport=40001, dport=80, seq=0x1234567A, ack=0xFEDCBA99, flags="PA", window=502),
     [NOP, NOP, ("Timestamp", (0x01020406, 0xA0B0C0D0))], 1459),
    # Data without options, odd length.
    ("xk", US, FAR, dict(sport=8080, dport=33333, seq=0xDEADBEEF, ack=0x80000001, flags="A", window=65535),
     [], 3),
    # Urgent data, ECN bits and the former NS bit (a reserved bit to xk).
    ("xk", PEER, US, dict(sport=7, dport=7, seq=1000, ack=2000, flags="UAPEC" + "N", window=4096, urgptr=5),
     [], 7),
    # FIN and RST.
    ("xk", US, PEER, dict(sport=80, dport=40001, seq=0xFFFFFFFF, ack=0x12349000, flags="FA", window=501), [], 0),
    ("xk", PEER, US, dict(sport=40001, dport=80, seq=0, ack=0, flags="R", window=0), [], 0),
    # Options in an order xk does not write: unaligned, padded with EOL.
    ("other", PEER, US, dict(sport=2000, dport=3000, seq=42, flags="S", window=5840),
     [("MSS", 1380), ("WScale", 2)], 0),
    # An option kind xk does not know (30) between known ones: skipped.
    ("other", PEER, US, dict(sport=2001, dport=3001, seq=43, flags="S", window=5840),
     [("MSS", 1220), (30, b"\x01\x02\x03"), ("SAckOK", b""), ("EOL", None)], 0),
    # A SACK option with an odd offset before it.
    ("other", US, PEER, dict(sport=80, dport=40001, seq=77, ack=88, flags="A", window=10),
     [NOP, ("SAck", (100, 200, 300, 400))], 5),
]


def options_fields(opts):
    mss = ws = ts = sack = "-"
    sackok = 0
    unknown = []
    for name, value in opts:
        if name == "MSS":
            mss = str(value)
        elif name == "WScale":
            ws = str(value)
        elif name == "SAckOK":
            sackok = 1
        elif name == "Timestamp":
            ts = f"{value[0]}:{value[1]}"
        elif name == "SAck":
            sack = ",".join(f"{value[i]}:{value[i + 1]}" for i in range(0, len(value), 2))
        elif name in ("NOP", "EOL"):
            pass
        else:
            unknown.append(str(name))
    return f"mss={mss} ws={ws} sackok={sackok} ts={ts} sack={sack} unknown={','.join(unknown) or '-'}"


def vector(layout, src, dst, fields, opts, n):
    pkt = IP(src=src, dst=dst, id=0x3131, ttl=64, flags="DF") / TCP(options=opts, **fields)
    if n:
        pkt = pkt / Raw(pattern(n, fields["sport"] & 0xFF))
    raw = bytes(pkt)
    got = IP(raw)  # dissect what scapy built: these are scapy's fields and checksum
    t = got[TCP]
    return (
        f"tcp {raw.hex()} src={got.src} dst={got.dst} sport={t.sport} dport={t.dport} "
        f"seq={t.seq} ack={t.ack} dataofs={t.dataofs} reserved={t.reserved} flags={int(t.flags)} "
        f"window={t.window} chksum={t.chksum} urgptr={t.urgptr} {options_fields(t.options)} "
        f"payload={len(t.payload)} layout={layout}"
    )


def generate():
    lines = ["# TCP/IPv4 golden vectors. Generated by gen_tcp_vectors.py (scapy); do not edit."]
    lines += [vector(*case) for case in CASES]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(golden_cli.run(__doc__, generate, DEFAULT_OUT))
