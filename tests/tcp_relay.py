"""A TCP relay the tests put between a client and a server to hold the traffic at a chosen point.

``stall`` and ``resume`` hold and let go every byte either way: a store out of reach that neither
answers nor refuses. With ``hold_after_publishes=N`` the relay reads the clients' AMQP frames and
holds each connection from its first ``basic.publish`` past the N-th (over all connections) on:
exactly N publishes reach the broker, so a publisher killed then has stopped at a known point,
with no race between a poll and the kill.
"""

from __future__ import annotations

import socket
import struct
import threading
from urllib.parse import urlsplit, urlunsplit

__all__ = ["Relay", "via"]

PROTOCOL_HEADER = 8  # b"AMQP\x00\x00\x09\x01"
FRAME_HEADER = struct.Struct(">BHI")  # type, channel, payload size; then the payload and 0xCE
PUBLISH = struct.pack(">HH", 60, 40)


class Relay:
    def __init__(self, host: str, port: int, *, hold_after_publishes: int | None = None) -> None:
        self.target = (host, port)
        self.flowing = threading.Event()
        self.flowing.set()
        self.held = 0  # bytes received and not passed on (while stalled, or past the publishes)
        self.publishes = 0  # basic.publish frames passed on
        self.hold_after = hold_after_publishes
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.endpoint = f"127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def stall(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(self.target)
            except OSError:
                return
            with self._lock:
                self._sockets += [client, upstream]
            forward = self._pipe if self.hold_after is None else self._amqp
            threading.Thread(target=forward, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _send(self, dst: socket.socket, data: bytes) -> None:
        if not self.flowing.is_set():
            self.held += len(data)
            self.flowing.wait()
        dst.sendall(data)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self._send(dst, data)
        except OSError:
            pass
        finally:
            _shut(src, dst)

    def _amqp(self, src: socket.socket, dst: socket.socket) -> None:
        """Client to server, frame by frame: everything up to the publish past the limit."""
        buffer = b""
        started = False
        try:
            while data := src.recv(65536):
                buffer += data
                if not started:
                    if len(buffer) < PROTOCOL_HEADER:
                        continue
                    self._send(dst, buffer[:PROTOCOL_HEADER])
                    buffer, started = buffer[PROTOCOL_HEADER:], True
                out = 0
                while len(buffer) - out >= FRAME_HEADER.size:
                    kind, _, size = FRAME_HEADER.unpack_from(buffer, out)
                    end = out + FRAME_HEADER.size + size + 1
                    if len(buffer) < end:
                        break
                    if kind == 1 and buffer[out + FRAME_HEADER.size:out + FRAME_HEADER.size + 4] == PUBLISH:
                        with self._lock:
                            full = self.hold_after is not None and self.publishes >= self.hold_after
                            self.publishes += not full
                        if full:
                            self._send(dst, buffer[:out])
                            self.held += len(buffer) - out
                            self._drain(src)
                            return
                    out = end
                self._send(dst, buffer[:out])
                buffer = buffer[out:]
        except OSError:
            pass
        finally:
            _shut(src, dst)

    def _drain(self, src: socket.socket) -> None:
        """Held for good: read on (so the client is not refused) until it goes away."""
        while data := src.recv(65536):
            self.held += len(data)

    def close(self) -> None:
        """Closes every relayed connection (what was held is dropped) and the listener."""
        self.flowing.set()
        self.listener.close()
        with self._lock:
            sockets = list(self._sockets)
        _shut(*sockets)


def _shut(*sockets: socket.socket) -> None:
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def via(url: str, relay: Relay) -> str:
    """``url`` (amqp://...) with the relay's address in place of the server's."""
    parts = urlsplit(url)
    auth = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{auth}@{relay.endpoint}" if auth else relay.endpoint))
