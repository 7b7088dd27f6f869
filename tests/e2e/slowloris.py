"""A socket flood for the admission tests, run as its own process (it would otherwise take the test
process's GIL from the client under test): ``python slowloris.py PORT COUNT``.

Holds COUNT sockets to the AMQP port and reopens each one the moment the broker closes it. A third
send nothing, a third send half a protocol header, a third the whole header and then nothing. Prints
``ready`` once all are open; on SIGTERM prints how many times the broker closed one, and exits."""

from __future__ import annotations

import selectors
import signal
import socket
import sys

HEADER = b"AMQP\x00\x00\x09\x01"
OPENING = (b"", HEADER[:4], HEADER)


def main(port: int, count: int) -> None:
    sel = selectors.DefaultSelector()
    closed_by_broker = 0
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)

    def open_one(kind: int) -> None:
        sock = socket.socket()
        sock.settimeout(1)
        try:
            sock.connect(("127.0.0.1", port))
            if OPENING[kind]:
                sock.sendall(OPENING[kind])
        except OSError:
            sock.close()
            return  # the backlog was full: tried again on the next pass
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, kind)

    for i in range(count):
        open_one(i % 3)
    print("ready", flush=True)
    while not stop:
        missing = count - len(sel.get_map())
        for i in range(missing):
            open_one(i % 3)
        for key, _ in sel.select(timeout=0.2):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if not data:  # the broker hung up: come straight back
                closed_by_broker += 1
                sel.unregister(sock)
                sock.close()
                open_one(key.data)
    print(closed_by_broker, flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
