#!/usr/bin/python3
"""A plain Linux UDP echo server (stdlib only), the peer of `xk-udp-echo client`.

    udp_echo_server.py --bind 192.0.2.1 --port 7 [--ready FILE]

Echoes every datagram to its sender until SIGTERM/SIGINT, then prints how many
it echoed. --ready FILE is created once the socket is bound.
"""
import argparse
import signal
import socket
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bind", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=7)
    ap.add_argument("--ready", help="create this file once bound")
    args = ap.parse_args()

    stop = False

    def on_signal(_signo, _frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    s.bind((args.bind, args.port))
    s.settimeout(0.2)  # so a signal is noticed promptly
    if args.ready:
        with open(args.ready, "w") as f:
            f.write("ready\n")
    echoed = 0
    nbytes = 0
    while not stop:
        try:
            data, peer = s.recvfrom(65535)
        except socket.timeout:
            continue
        except InterruptedError:
            continue
        s.sendto(data, peer)
        echoed += 1
        nbytes += len(data)
    print(f"udp_echo_server: echoed {echoed} datagrams ({nbytes} bytes)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
