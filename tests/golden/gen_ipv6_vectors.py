#!/usr/bin/python3
"""Golden IPv6 packets, built by scapy, for tests/unit/ipv6_wire_test.cpp.

scapy shares no code with xk: what our walk of the extension headers finds
in a packet is checked against where scapy put each header. Run with the
system python (Debian's python3-scapy):

    /usr/bin/python3 tests/golden/gen_ipv6_vectors.py            # rewrite ipv6_vectors.txt
    /usr/bin/python3 tests/golden/gen_ipv6_vectors.py --check F  # compare with F

Fixed inputs only, so the output is the same on every run. One vector per
line ('#' starts a comment), packets in hex, from the IPv6 header on:

    header <packet> <traffic class> <flow label> <payload length> <next header> <hop limit> <src> <dst>
        the fixed header's fields (addresses as 32 hex digits)
    chain <packet> <upper> <upper offset> <headers> <router alert 0|1> <fragment>
        an acceptable packet: the protocol after the extension headers,
        where it starts, how many extension headers came first, and the
        fragment header as offset:more:id:where (or -)
    problem <packet> <error> <icmp 0|1> <code> <pointer> <unless multicast 0|1>
        a refused packet: why (xk::ipv6::ChainError's name) and the
        Parameter Problem to answer with (RFC 8200 4, RFC 4443 3.4)
    link_local <mac> <address>
        the link-local address of an interface with this MAC (RFC 4291 A)
    solicited <address> <group> <group's mac>
        the solicited-node group of an address and its Ethernet address
    icmpv6 <packet> <type> <code> <rest>
        an ICMPv6 message whose checksum scapy computed (pseudo-header and all)
    nd <packet> <type> <target|-> <source lla|-> <target lla|-> <mtu|-> <prefixes|->
        a Neighbor Discovery message and what its options say; prefixes as
        length:L:A:valid:preferred:prefix joined by ','
    nd_bad <ICMPv6 options>
        options an ND message must be dropped for (RFC 4861 4.6)
"""

import sys
from pathlib import Path

import golden_cli

from scapy.layers.inet import TCP, UDP
from scapy.layers.inet6 import (
    HBHOptUnknown,
    ICMPv6DestUnreach,
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6ND_RA,
    ICMPv6ND_RS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptMTU,
    ICMPv6NDOptPrefixInfo,
    ICMPv6NDOptSrcLLAddr,
    ICMPv6PacketTooBig,
    ICMPv6ParamProblem,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    PadN,
    RouterAlert,
    fragment6,
)
from scapy.layers.ipsec import AH
from scapy.packet import Raw
from scapy.utils6 import in6_getnsma, in6_getnsmac, in6_mactoifaceid
import socket

DEFAULT_OUT = Path(__file__).resolve().parent / "ipv6_vectors.txt"
US = "2001:db8::10"
PEER = "2001:db8::20"
EXT = (IPv6ExtHdrHopByHop, IPv6ExtHdrDestOpt, IPv6ExtHdrRouting, IPv6ExtHdrFragment, AH)


def pattern(n, seed):
    return bytes((i * 31 + seed) & 0xFF for i in range(n))


def v6(**kw):
    return IPv6(src=PEER, dst=US, hlim=64, **kw)


def offset_of(pkt, layer):
    """Where `layer` (an instance inside pkt) starts in bytes(pkt)."""
    return len(bytes(pkt)) - len(bytes(layer))


def ext_layers(pkt):
    out = []
    layer = pkt[IPv6].payload
    while isinstance(layer, EXT):
        out.append(layer)
        if isinstance(layer, IPv6ExtHdrFragment) and not (layer.offset == 0 and layer.m == 0):
            break
        layer = layer.payload
    return out


def chain_line(pkt):
    pkt = IPv6(bytes(pkt))  # as it arrives: every length filled in
    exts = ext_layers(pkt)
    last = exts[-1] if exts else pkt[IPv6]
    upper = last.nh
    upper_offset = offset_of(pkt, last.payload) if exts else 40
    alert = int(any(isinstance(o, RouterAlert) for e in exts if isinstance(e, IPv6ExtHdrHopByHop) for o in e.options))
    frag = "-"
    for e in exts:
        if isinstance(e, IPv6ExtHdrFragment):
            frag = f"{e.offset * 8}:{e.m}:{e.id}:{offset_of(pkt, e)}"
    return f"chain {bytes(pkt).hex()} {upper} {upper_offset} {len(exts)} {alert} {frag}"


def header_lines():
    out = ["# the fixed header"]
    for tc, fl, hl in ((0, 0, 64), (0xB8, 0xABCDE, 255), (0xFF, 0xFFFFF, 1)):
        pkt = IPv6(bytes(IPv6(src=PEER, dst="ff02::1:ff00:10", tc=tc, fl=fl, hlim=hl) / UDP() / Raw(pattern(9, tc))))
        out.append(
            f"header {bytes(pkt).hex()} {pkt.tc} {pkt.fl} {pkt.plen} {pkt.nh} {pkt.hlim} "
            f"{bytes(pkt)[8:24].hex()} {bytes(pkt)[24:40].hex()}"
        )
    return out


def good_lines():
    out = ["# acceptable chains"]
    udp = UDP(sport=40000, dport=53) / Raw(pattern(11, 1))
    out.append(chain_line(v6() / udp))
    out.append(chain_line(v6() / TCP(sport=1, dport=80) / Raw(pattern(3, 2))))
    out.append(chain_line(v6() / ICMPv6EchoRequest(id=7, seq=1)))
    out.append(chain_line(v6() / IPv6ExtHdrHopByHop(options=[RouterAlert()]) / udp))
    out.append(chain_line(v6() / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / udp))
    # an option a node that does not know it skips (high bits 00)
    out.append(chain_line(v6() / IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=0x1E, optdata=b"ab")]) / udp))
    out.append(chain_line(v6() / IPv6ExtHdrRouting(segleft=0, addresses=["2001:db8::99"]) / udp))
    out.append(chain_line(v6() / AH(nh=17, payloadlen=4, icv=pattern(12, 9)) / udp))
    out.append(chain_line(v6(nh=59) / Raw(pattern(8, 4))))
    # an atomic fragment (RFC 6946): the walk goes on past it
    out.append(chain_line(v6() / IPv6ExtHdrFragment(offset=0, m=0, id=0x1234) / IPv6ExtHdrDestOpt() / udp))
    # real fragments: the walk stops at the fragment header
    whole = v6() / IPv6ExtHdrHopByHop() / IPv6ExtHdrFragment(id=0xCAFE) / UDP(sport=7, dport=9) / Raw(pattern(3000, 5))
    for f in fragment6(whole, 1280):
        out.append(chain_line(f))
    # eight extension headers: the limit
    pkt = v6()
    for _ in range(8):
        pkt = pkt / IPv6ExtHdrDestOpt()
    out.append(chain_line(pkt / udp))
    return out


def problem_lines():
    out = ["# refused chains"]
    udp = UDP(sport=40000, dport=53)

    def problem(pkt, error, icmp=0, code=0, pointer=0, unless_multicast=0):
        pkt = IPv6(bytes(pkt))
        out.append(f"problem {bytes(pkt).hex()} {error} {icmp} {code} {pointer} {unless_multicast}")

    # hop-by-hop after another header: code 1 at the byte that named it
    problem(v6() / IPv6ExtHdrDestOpt() / IPv6ExtHdrHopByHop() / udp, "hop_by_hop_not_first", 1, 1, 40)
    # unknown options: 01 drop, 10 drop and tell, 11 tell unless multicast
    for otype, err in ((0x5E, (0, 0)), (0x9E, (1, 0)), (0xDE, (1, 1))):
        pkt = v6() / IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=otype, optdata=b"ab")]) / udp
        problem(pkt, "unknown_option", err[0], 2 if err[0] else 0, 42 if err[0] else 0, err[1])
    # behind a padding option, the pointer moves with it
    pkt = v6() / IPv6ExtHdrHopByHop(options=[PadN(optdata=b"\x00\x00"), HBHOptUnknown(otype=0x9E, optdata=b"x")]) / udp
    problem(pkt, "unknown_option", 1, 2, 46)
    # a routing header with segments left: code 0 at its routing type
    problem(v6() / IPv6ExtHdrRouting(segleft=1, addresses=["2001:db8::99"]) / udp, "unknown_routing", 1, 0, 42)
    # limits: nine extension headers, nine options, eight bytes of padding
    pkt = v6()
    for _ in range(9):
        pkt = pkt / IPv6ExtHdrDestOpt()
    problem(pkt / udp, "too_many_headers")
    problem(v6() / IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=0x1E, optdata=b"")] * 9) / udp, "too_many_options")
    problem(v6() / IPv6ExtHdrDestOpt(options=[PadN(optdata=b"\x00" * 6)]) / udp, "too_many_options")
    # a header longer than the packet, and an option longer than its header
    problem(v6(nh=60) / Raw(bytes([17, 1]) + bytes(6)), "truncated")
    problem(v6(nh=60) / Raw(bytes([17, 0, 0x1E, 9]) + bytes(4)), "bad_option_length")
    problem(v6(nh=44) / Raw(bytes([17, 0, 0, 8])), "truncated")
    return out


def addr_hex(a):
    return socket.inet_pton(socket.AF_INET6, a).hex()


def address_lines():
    out = ["# addresses Neighbor Discovery derives"]
    for mac in ("02:00:00:00:00:0a", "00:11:22:33:44:55", "fe:ff:ff:ff:ff:ff"):
        iid = in6_mactoifaceid(mac).lower()
        out.append(f"link_local {mac} {addr_hex('fe80::' + iid)}")
    for a in ("2001:db8::10", "fe80::ff:fe00:a", "2001:db8::1:2:3"):
        group = in6_getnsma(socket.inet_pton(socket.AF_INET6, a))
        out.append(f"solicited {addr_hex(a)} {group.hex()} {in6_getnsmac(group)}")
    return out


def icmpv6_lines():
    out = ["# ICMPv6 messages with scapy's checksums"]
    msgs = (
        ICMPv6EchoRequest(id=0x1234, seq=1, data=pattern(56, 1)),
        ICMPv6EchoReply(id=7, seq=65535, data=b""),
        ICMPv6DestUnreach(code=4) / Raw(pattern(48, 2)),
        ICMPv6PacketTooBig(mtu=1280) / Raw(pattern(48, 3)),
        ICMPv6ParamProblem(code=1, ptr=40) / Raw(pattern(48, 4)),
    )
    for m in msgs:
        pkt = IPv6(bytes(v6() / m))
        raw = bytes(pkt)[40:]
        rest = raw[4:8].hex()
        out.append(f"icmpv6 {bytes(pkt).hex()} {raw[0]} {raw[1]} {rest}")
    return out


def nd_lines():
    out = ["# Neighbor Discovery"]
    mac = "02:00:00:00:00:14"

    def nd(pkt, target="-", src="-", tgt="-", mtu="-", prefixes="-"):
        pkt = IPv6(bytes(pkt))
        t = bytes(pkt)[40]
        out.append(f"nd {bytes(pkt).hex()} {t} {target} {src} {tgt} {mtu} {prefixes}")

    nd(IPv6(src=PEER, dst="ff02::1:ff00:10", hlim=255) / ICMPv6ND_NS(tgt=US) / ICMPv6NDOptSrcLLAddr(lladdr=mac),
       target=addr_hex(US), src=mac)
    # DAD's solicitation: from ::, no source link-layer option
    nd(IPv6(src="::", dst="ff02::1:ff00:10", hlim=255) / ICMPv6ND_NS(tgt=US), target=addr_hex(US))
    nd(IPv6(src=PEER, dst=US, hlim=255) / ICMPv6ND_NA(tgt=PEER, R=0, S=1, O=1) / ICMPv6NDOptDstLLAddr(lladdr=mac),
       target=addr_hex(PEER), tgt=mac)
    nd(IPv6(src="fe80::1", dst="ff02::2", hlim=255) / ICMPv6ND_RS() / ICMPv6NDOptSrcLLAddr(lladdr=mac), src=mac)
    ra = (IPv6(src="fe80::1", dst="ff02::1", hlim=255) / ICMPv6ND_RA(chlim=64, routerlifetime=1800)
          / ICMPv6NDOptSrcLLAddr(lladdr=mac) / ICMPv6NDOptMTU(mtu=9000)
          / ICMPv6NDOptPrefixInfo(prefixlen=64, L=1, A=1, validlifetime=86400, preferredlifetime=14400,
                                  prefix="2001:db8::")
          / ICMPv6NDOptPrefixInfo(prefixlen=48, L=1, A=0, validlifetime=0xFFFFFFFF, preferredlifetime=0,
                                  prefix="2001:db8:1::"))
    nd(ra, src=mac, mtu="9000",
       prefixes=f"64:1:1:86400:14400:{addr_hex('2001:db8::')},48:1:0:4294967295:0:{addr_hex('2001:db8:1::')}")
    out.append("nd_bad 0100020000000014")            # length 0
    out.append("nd_bad 010102000000")                # runs past the message
    out.append("nd_bad 0301" + "00" * 6)             # prefix information of 8 bytes, not 32
    return out


def generate():
    lines = ["# IPv6 golden vectors. Generated by gen_ipv6_vectors.py (scapy); do not edit."]
    lines += header_lines() + good_lines() + problem_lines() + address_lines() + icmpv6_lines() + nd_lines()
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(golden_cli.run(__doc__, generate, DEFAULT_OUT))
