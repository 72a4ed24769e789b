#!/usr/bin/python3
"""A Linux UDP client (stdlib only) that checks an echo server byte for byte.

    udp_client.py --peer 192.0.2.10 --port 7 --count 10000 --sizes 1..60000

Datagrams go one at a time: send, wait for the echo (--timeout), re-send up to
--retries times, then count the datagram as lost. Sizes: the first datagram
has size A, the second B, the rest walk through A..B with a step near the
golden ratio of the range (coprime to it), so they spread evenly over it.
Each payload is a slice of a seeded random buffer at an offset that depends on
the sequence number, and datagrams of 4 bytes or more start with the sequence
number, so a late echo of an earlier datagram is told apart from corruption.

Prints a summary; exits 1 on any mismatch or loss, 0 otherwise.
"""
import argparse
import math
import random
import socket
import struct
import sys
import time


def size_cycle(lo: int, hi: int):
    n = hi - lo + 1
    step = max(1, int(n * 0.6180339887498949))
    while math.gcd(step, n) != 1:
        step += 1

    def size(i: int) -> int:
        if i == 0:
            return lo
        if i == 1:
            return hi
        return lo + ((i - 2) * step) % n

    return size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", required=True)
    ap.add_argument("--port", type=int, default=7)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--sizes", default="1..60000")
    ap.add_argument("--timeout", type=float, default=1.0, help="seconds to wait for each echo")
    ap.add_argument("--retries", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    lo, _, hi = args.sizes.partition("..")
    lo, hi = int(lo), int(hi or lo)
    if not 1 <= lo <= hi <= 65507:
        print(f"udp_client: bad --sizes {args.sizes}", file=sys.stderr)
        return 2
    size = size_cycle(lo, hi)
    base = random.Random(args.seed).randbytes(65536 + 8192)

    def payload(seq: int) -> bytes:
        n = size(seq)
        off = (seq * 7919) % 8192
        body = base[off:off + n]
        if n >= 4:
            body = struct.pack("!I", seq & 0xFFFFFFFF) + body[4:]
        return body

    # An IPv6 peer (a colon in its address) needs an AF_INET6 socket.
    s = socket.socket(socket.AF_INET6 if ":" in args.peer else socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    s.connect((args.peer, args.port))

    sent = received = mismatches = lost = resent = late = errors = 0
    nbytes = 0
    t0 = time.monotonic()
    for seq in range(args.count):
        want = payload(seq)
        sent += 1
        ok = False
        for attempt in range(args.retries + 1):
            if attempt:
                resent += 1
            try:
                s.send(want)
            except OSError as e:  # e.g. ECONNREFUSED from an earlier ICMP error
                errors += 1
                print(f"udp_client: send of {seq} failed: {e}", file=sys.stderr)
            deadline = time.monotonic() + args.timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                s.settimeout(left)
                try:
                    got = s.recv(65535)
                except socket.timeout:
                    break
                except OSError as e:
                    errors += 1
                    print(f"udp_client: recv while waiting for {seq}: {e}", file=sys.stderr)
                    continue
                if got == want:
                    ok = True
                    break
                # A duplicate echo of an earlier datagram (we re-sent it)?
                if len(got) >= 4:
                    (gseq,) = struct.unpack("!I", got[:4])
                    if gseq < seq and seq - gseq <= 16 and got == payload(gseq):
                        late += 1
                        continue
                elif any(got == payload(seq - b) for b in range(1, min(seq, 16) + 1)):
                    late += 1
                    continue
                mismatches += 1
                if mismatches <= 10:
                    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                    print(f"udp_client: MISMATCH for datagram {seq}: sent {len(want)} bytes, got {len(got)}, "
                          f"first difference at byte {first}", file=sys.stderr)
                if len(got) == len(want):
                    ok = None  # a corrupted echo of this datagram: counted, move on
                    break
            if ok is not False:
                break
            print(f"udp_client: no echo for datagram {seq} ({len(want)} bytes) within {args.timeout} s "
                  f"(attempt {attempt + 1})", file=sys.stderr)
        if ok:
            received += 1
            nbytes += len(want)
        elif ok is False:
            lost += 1
            print(f"udp_client: datagram {seq} ({len(want)} bytes) LOST after {args.retries + 1} attempts",
                  file=sys.stderr)
    secs = time.monotonic() - t0
    print(f"udp_client: sent {sent}, received {received}, mismatches {mismatches}, lost {lost} "
          f"(re-sent {resent}, late duplicates {late}, socket errors {errors}); "
          f"{nbytes / 1e6:.3f} MB echoed in {secs:.2f} s", flush=True)
    return 0 if mismatches == 0 and lost == 0 and received == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
