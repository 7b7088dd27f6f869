"""A socket flood for the admission tests, run as its own process (it would otherwise take the test
process's GIL from the client under test): ``python slowloris.py PORT COUNT [mixed|header]``.

Holds COUNT sockets to the AMQP port and reopens each one the moment the broker closes it. Mixed (the
default): a third send nothing, a third half a protocol header, a third the whole header and then
nothing; header: every socket sends the whole header, then nothing. Prints
``ready`` once all are open; on SIGTERM prints how many times the broker closed one, and exits."""

from __future__ import annotations

import selectors
import signal
import socket
import sys

HEADER = b"AMQP\x00\x00\x09\x01"
OPENINGS = {"mixed": (b"", HEADER[:4], HEADER), "header": (HEADER,)}


def main(port: int, count: int, mode: str = "mixed") -> None:
    opening = OPENINGS[mode]
    sel = selectors.DefaultSelector()
    closed_by_broker = 0
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)

    def open_one(i: int) -> None:
        kind = i % len(opening)
        sock = socket.socket()
        sock.settimeout(1)
        try:
            sock.connect(("127.0.0.1", port))
            if opening[kind]:
                sock.sendall(opening[kind])
        except OSError:
            sock.close()
            return  # the backlog was full: tried again on the next pass
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, kind)

    for i in range(count):
        open_one(i)
    print("ready", flush=True)
    while not stop:
        missing = count - len(sel.get_map())
        for i in range(missing):
            open_one(i)
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
    main(int(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:4])
