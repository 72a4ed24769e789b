#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses that take binary input:
tests/fuzz/corpus/{stack,filter,control}/ (the graph harness's seeds are
specs written by hand). Deterministic: running it again gives the same files.

    tests/fuzz/make_seeds.py [CORPUS_DIR]

The formats are the harnesses' own (see the comment at the top of each
*_fuzz.cpp); frames and control messages are built here byte by byte.
"""
import os
import struct
import sys

# ---- frames ------------------------------------------------------------------

STACK_MAC = bytes([2, 0, 0, 0, 0, 0x0A])
PEER_MAC = bytes([2, 0, 0, 0, 0, 0x14])
SHARED_IP = bytes([192, 0, 2, 10])
PEER_IP = bytes([192, 0, 2, 20])
REMOTE_IP = bytes([198, 51, 100, 7])


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ipv4(src, dst, proto, body, ident=1, flags_offset=0x4000):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), ident, flags_offset, 64, proto, 0, src, dst)
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + body


def l4_csum(src, dst, proto, seg, at):
    pseudo = src + dst + struct.pack("!BBH", 0, proto, len(seg))
    c = csum(pseudo + seg)
    if proto == 17 and c == 0:
        c = 0xFFFF
    return seg[:at] + struct.pack("!H", c) + seg[at + 2:]


def tcp(src, dst, sport, dport, seq, ack, flags, opts=b"", payload=b"", window=65535):
    opts += b"\0" * (-len(opts) % 4)
    seg = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, (20 + len(opts)) // 4 << 4, flags, window, 0, 0)
    return l4_csum(src, dst, 6, seg + opts + payload, 16)


def udp(src, dst, sport, dport, payload):
    seg = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    return l4_csum(src, dst, 17, seg, 6)


def eth(dst, src, etype, payload):
    return dst + src + struct.pack("!H", etype) + payload


def arp_request(sender_mac, sender_ip, target_ip):
    return eth(b"\xff" * 6, sender_mac, 0x0806,
               struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, sender_mac, sender_ip, b"\0" * 6, target_ip))


SYN_OPTS = bytes([2, 4, 5, 0xB4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7])

# ---- stack harness records (tests/fuzz/stack_fuzz.cpp) ------------------------


def r_advance(ms):
    return struct.pack("<BH", 0, ms)


def r_next_timer():
    return b"\x01"


def r_raw(frame):
    return struct.pack("<BH", 2, len(frame)) + frame


def r_ip(how, packet):
    return struct.pack("<BBH", 3, how, len(packet)) + packet


def r_tcp(flow, flags, seq_off=0, ack_off=0, window=1024, opts=b"", payload=0, misc=4):
    return struct.pack("<BBBhhHB", 4, flow, flags, seq_off, ack_off, window, len(opts)) + opts + \
        struct.pack("<HB", payload, misc)


def r_icmp(flow, typ, code, aux, quote, seq_off=0):
    return struct.pack("<BBBBHBh", 5, flow, typ, code, aux, quote, seq_off)


def r_fragments(is_tcp, length, ident, pieces):
    out = struct.pack("<BBHHB", 6, 1 if is_tcp else 0, length, ident, len(pieces) - 1)
    for off8, ln, mf in pieces:
        out += struct.pack("<HHB", off8, ln, 1 if mf else 0)
    return out


def r_app(sock, action, *args):
    out = struct.pack("<BBB", 7, sock, action)
    for a in args:
        out += struct.pack("<H", a)
    return out


FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10

STACK = {
    "data_both_ways": r_tcp(0, PSH | ACK, payload=100) + r_app(0, 1, 500) + r_app(0, 0, 3000) + r_advance(50) +
    r_tcp(0, ACK) + r_next_timer(),
    "new_client_accepted": r_tcp(2, SYN, opts=SYN_OPTS, misc=0) + r_tcp(2, ACK) + r_app(0, 5) +
    r_tcp(2, PSH | ACK, payload=10) + r_app(2, 1, 100),
    "fin_then_close": r_tcp(0, FIN | ACK) + r_app(0, 1, 10) + r_app(0, 3) + r_tcp(0, ACK) + r_advance(1000) +
    r_next_timer() + r_next_timer(),
    "rst_in_window": r_tcp(1, RST, seq_off=100, misc=0) + r_app(1, 0, 10),
    "syn_to_closed_port": r_tcp(3, SYN, opts=SYN_OPTS, misc=0) + r_tcp(3, ACK | PSH, payload=5),
    "icmp_frag_needed": r_app(0, 0, 4000) + r_icmp(0, 3, 4, 576, 48) + r_advance(20) + r_tcp(0, ACK),
    "icmp_port_unreachable": r_icmp(1, 3, 3, 0, 28) + r_next_timer(),
    "udp_fragments": r_fragments(False, 2000, 9, [(0, 1000, True), (125, 1000, True), (250, 8, False)]) +
    r_app(0, 6),
    "tcp_fragments_overlap": r_fragments(True, 1200, 10, [(0, 800, True), (64, 800, False)]),
    "retransmissions": r_app(1, 0, 5000) + r_advance(300) + r_advance(600) + r_next_timer() + r_next_timer() +
    r_tcp(1, ACK, ack_off=-2000),
    "sack_blocks": r_app(0, 0, 8000) + r_tcp(0, ACK, opts=bytes([1, 1, 5, 10]) + struct.pack("!II", 1, 2)) +
    r_tcp(0, ACK) + r_tcp(0, ACK),
    "zero_window_probe": r_app(0, 0, 3000) + r_tcp(0, ACK, window=0) + r_advance(500) + r_next_timer() +
    r_tcp(0, ACK, window=4000),
    "out_of_order_data": r_tcp(0, PSH | ACK, seq_off=200, payload=100) + r_tcp(0, PSH | ACK, payload=200) +
    r_app(0, 1, 1000),
    "udp_echo_and_arp": r_ip(7, ipv4(PEER_IP, SHARED_IP, 17, udp(PEER_IP, SHARED_IP, 40100, 7, b"hello"))) +
    r_app(0, 6) + r_app(0, 7, 100, 9) + r_raw(arp_request(bytes([2, 0, 0, 0, 0, 0x1e]), bytes([192, 0, 2, 30]),
                                                            SHARED_IP)),
    "ping": r_ip(7, ipv4(PEER_IP, SHARED_IP, 1, bytes([8, 0, 0, 0, 0, 1, 0, 1]) + b"x" * 56)),
    "time_wait": r_app(1, 2) + r_tcp(1, ACK) + r_tcp(1, FIN | ACK) + r_advance(65000) + r_next_timer(),
    # 8000 bytes written, 7240 in flight (5 segments), then duplicate ACKs of the first byte: fast
    # retransmit, recovery, then everything acknowledged.
    "fast_retransmit": r_app(0, 0, 8000) + b"".join(
        r_tcp(0, ACK, ack_off=-7240)
        for _ in range(4)) + r_tcp(0, ACK, ack_off=-4000) + r_tcp(0, ACK) + r_advance(500),
    # Eight new clients (bits 2..4 of the flow byte) complete their
    # handshakes: the listener's accept queue (backlog 4) overflows.
    "accept_queue_full": b"".join(r_tcp(2 | (k << 2), SYN, opts=SYN_OPTS, misc=0) for k in range(8)) +
    b"".join(r_tcp(2 | (k << 2), ACK) for k in range(8)) + r_app(0, 5) + r_advance(3000) + r_next_timer(),
}

# ---- filter harness (tests/fuzz/filter_fuzz.cpp) ------------------------------


def f_rules(*rules):
    out = bytes([len(rules)])
    for prio, expr in rules:
        e = expr.encode()
        out += struct.pack("<bH", prio, len(e)) + e
    return out


def f_frames(*frames):
    return b"".join(struct.pack("<H", len(f)) + f for f in frames)


def to_shared(l3):
    return eth(STACK_MAC, PEER_MAC, 0x0800, l3)


SYN_80 = to_shared(ipv4(REMOTE_IP, SHARED_IP, 6, tcp(REMOTE_IP, SHARED_IP, 40000, 80, 1, 0, SYN, SYN_OPTS)))
SYN_22 = to_shared(ipv4(REMOTE_IP, SHARED_IP, 6, tcp(REMOTE_IP, SHARED_IP, 40001, 22, 1, 0, SYN)))
UDP_53 = to_shared(ipv4(REMOTE_IP, SHARED_IP, 17, udp(REMOTE_IP, SHARED_IP, 5353, 53, b"q" * 20)))
UDP_9999 = to_shared(ipv4(REMOTE_IP, SHARED_IP, 17, udp(REMOTE_IP, SHARED_IP, 1234, 9999, b"x" * 10)))
ECHO = to_shared(ipv4(REMOTE_IP, SHARED_IP, 1, bytes([8, 0, 0xF7, 0xFE, 0, 1, 0, 0])))
ARP = arp_request(PEER_MAC, REMOTE_IP, SHARED_IP)
FRAG_BODY = udp(REMOTE_IP, SHARED_IP, 1234, 9999, b"f" * 40)
FRAG1 = to_shared(ipv4(REMOTE_IP, SHARED_IP, 17, FRAG_BODY[:24], ident=5, flags_offset=0x2000))
FRAG2 = to_shared(ipv4(REMOTE_IP, SHARED_IP, 17, FRAG_BODY[24:], ident=5, flags_offset=3))

# IPv6 (the engine shares 2001:db8::10 in the harness).
SHARED_IP6 = bytes.fromhex("20010db8000000000000000000000010")
REMOTE_IP6 = bytes.fromhex("20010db8000100000000000000000007")


def ipv6(src, dst, next_header, body, hop_limit=64):
    return struct.pack("!IHBB", 6 << 28, len(body), next_header, hop_limit) + src + dst + body


def to_shared6(l3):
    return eth(STACK_MAC, PEER_MAC, 0x86DD, l3)


def frag6(next_header, offset, more, ident, body):
    return struct.pack("!BBHI", next_header, 0, offset | (1 if more else 0), ident) + body


TCP6_BODY = struct.pack("!HHIIBBHHH", 40002, 22, 1, 0, 0x50, SYN, 65535, 0, 0)
SYN6_22 = to_shared6(ipv6(REMOTE_IP6, SHARED_IP6, 6, TCP6_BODY))
UDP6_BODY = struct.pack("!HHHH", 5353, 53, 8 + 40, 0) + b"u" * 40
UDP6_53 = to_shared6(ipv6(REMOTE_IP6, SHARED_IP6, 17, UDP6_BODY))
NS6 = to_shared6(ipv6(REMOTE_IP6, bytes.fromhex("ff0200000000000000000001ff000010"), 58,
                      bytes([135, 0, 0, 0, 0, 0, 0, 0]) + SHARED_IP6, hop_limit=255))
PTB6 = to_shared6(ipv6(REMOTE_IP6, SHARED_IP6, 58, bytes([2, 0, 0, 0, 0, 0, 5, 0]) +
                       ipv6(SHARED_IP6, REMOTE_IP6, 6, TCP6_BODY)))
FRAG6_1 = to_shared6(ipv6(REMOTE_IP6, SHARED_IP6, 44, frag6(17, 0, True, 9, UDP6_BODY[:24])))
FRAG6_2 = to_shared6(ipv6(REMOTE_IP6, SHARED_IP6, 44, frag6(17, 24, False, 9, UDP6_BODY[24:])))

FILTER = {
    "rule_udp_port": f_rules((0, "udp dst port 9999")) + f_frames(UDP_9999, UDP_53, SYN_80),
    "rules_by_priority": f_rules((0, "udp"), (5, "udp dst port 9999"), (5, "src host 198.51.100.7")) +
    f_frames(UDP_9999, SYN_22, ECHO),
    "bad_expression": f_rules((0, "udp dst port 9999 and"), (0, "tcp port 99999"), (1, "ip[0] & 0xf != 5")) +
    f_frames(UDP_9999),
    "fragments_later_first": f_rules((0, "udp")) + f_frames(FRAG2, FRAG1, FRAG1),
    "arp_and_echo": f_rules((-3, "arp or icmp")) + f_frames(ARP, ECHO),
    "tcp_flags_rule": f_rules((2, "tcp[tcpflags] & tcp-syn != 0 and not port 22")) + f_frames(SYN_80, SYN_22),
    "no_rules": f_rules() + f_frames(SYN_80, SYN_22, UDP_53, UDP_9999, ECHO, ARP, b"\0" * 10),
    "ipv6": f_rules((1, "ip6 and udp port 53")) + f_frames(SYN6_22, UDP6_53, NS6, PTB6, FRAG6_2, FRAG6_1),
}

# ---- control harness (tests/fuzz/control_fuzz.cpp) ----------------------------


def tlv(tag, value):
    return struct.pack("!HH", tag, len(value)) + value


def frame(mtype, req, *tlvs):
    body = b"".join(tlvs)
    return struct.pack("!IBBHII", 0x584B4331, 1, mtype, 0, len(body), req) + body


u8 = lambda v: struct.pack("!B", v)
u16 = lambda v: struct.pack("!H", v)
u32 = lambda v: struct.pack("!I", v)


def hello(req, name, queues=1):
    return frame(0x01, req, tlv(0x0001, name), tlv(0x0002, u32(100)), tlv(0x0003, u16(queues)),
                 tlv(0x0004, bytes([1, 2])))


CONTROL = {
    # Request ids: id & 3 is the connection in the harness.
    "node_lifecycle": hello(4, b"node-a") +
    frame(0x02, 8, tlv(0x0010, u8(6)), tlv(0x0011, u16(80)), tlv(0x0013, u16(0))) +
    frame(0x04, 12, tlv(0x0010, u8(6)), tlv(0x0013, u16(0)), tlv(0x0014, REMOTE_IP), tlv(0x0015, u16(5001))) +
    frame(0x07, 16, tlv(0x0013, u16(0)), tlv(0x0030, b"udp dst port 9999"), tlv(0x0031, u16(3))) +
    frame(0x08, 20, tlv(0x0032, u32(1))) + frame(0x09, 24) + frame(0x0B, 28) + frame(0x0A, 32),
    "two_nodes_group": hello(1, b"a", 2) + hello(2, b"b") +
    frame(0x02, 5, tlv(0x0010, u8(17)), tlv(0x0011, u16(53)), tlv(0x0012, u8(1)), tlv(0x0013, u16(1))) +
    frame(0x02, 6, tlv(0x0010, u8(17)), tlv(0x0011, u16(53)), tlv(0x0012, u8(1)), tlv(0x0013, u16(0))) +
    frame(0x03, 9, tlv(0x0010, u8(17)), tlv(0x0011, u16(53))),
    "admin_lists": frame(0x0C, 3) + frame(0x0D, 7, tlv(0x0071, u32(2))) + frame(0x0E, 11) +
    frame(0x0F, 15, tlv(0x0070, b"\x01")),
    "resync_empty": hello(4, b"n") + frame(0x06, 8, tlv(0x0022, u8(0))),
    "error_and_pad": hello(4, b"n") + frame(0x60, 8, tlv(0x0000, b"pad"), tlv(0x0060, u16(1))) +
    frame(0x02, 12, tlv(0x0010, u8(99)), tlv(0x0011, u16(1)), tlv(0x0013, u16(0))),
    "bad_magic": b"XKC2" + b"\0" * 12,
    "oversized_body": struct.pack("!IBBHII", 0x584B4331, 1, 1, 0, 1 << 20, 1),
}


# The stack harness's first byte: bit 0 gives the stack's port checksum offload.
STACK = {name: b"\x00" + recs for name, recs in STACK.items()}
STACK["offload_data_and_ping"] = b"\x01" + r_tcp(0, PSH | ACK, payload=100) + r_app(0, 0, 3000) + r_tcp(0, ACK) + \
    r_ip(7, ipv4(PEER_IP, SHARED_IP, 1, bytes([8, 0, 0, 0, 0, 1, 0, 1]) + b"x" * 56)) + \
    r_tcp(0, PSH | ACK, payload=10, misc=5)


def write(corpus, name, files):
    d = os.path.join(corpus, name)
    os.makedirs(d, exist_ok=True)
    for fname, data in files.items():
        with open(os.path.join(d, fname), "wb") as f:
            f.write(data)


def main():
    corpus = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    write(corpus, "stack", STACK)
    write(corpus, "filter", FILTER)
    write(corpus, "control", CONTROL)


if __name__ == "__main__":
    main()
