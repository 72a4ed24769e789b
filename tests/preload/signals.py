# Run under xkrun (tests/preload/signals.sh): blocking calls on xk sockets
# that a signal interrupts while the call spins or busy-polls, never
# sleeping -- the handler raises, so each call must end with EINTR for
# Python to run it. Prints one line per call; exits 1 if a call returned.
import select
import signal
import socket
import sys
import time


class Alarm(Exception):
    pass


def on_alarm(sig, frame):
    raise Alarm()


signal.signal(signal.SIGALRM, on_alarm)
listener = socket.socket()
listener.bind(("192.0.2.1", 7400))
listener.listen()
client = socket.create_connection(("192.0.2.1", 7400))
server, _ = listener.accept()
calls = {
    "accept": lambda: listener.accept(),
    "recv": lambda: server.recv(100),
    "select": lambda: select.select([server], [], [], 5),
}
poller = select.poll()
poller.register(server, select.POLLIN)
calls["poll"] = lambda: poller.poll(5000)
failed = 0
for name, call in calls.items():
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    t0 = time.monotonic()
    try:
        call()
        print(f"{name}: returned instead of being interrupted")
        failed += 1
    except Alarm:
        took = time.monotonic() - t0
        print(f"{name}: interrupted after {took:.3f} s")
        if took > 2:
            failed += 1
sys.exit(1 if failed else 0)
