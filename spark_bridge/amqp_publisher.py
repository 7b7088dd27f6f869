"""A minimal AMQP 0-9-1 publisher with a window of publisher confirms in flight, for replay.

pika's BlockingConnection waits for each confirm before the next publish (one round trip per
message); this client writes publishes back to back, up to ``window`` unconfirmed, and reads the
broker's acks as they come (``multiple`` acks included). It speaks only what replay needs:
PLAIN login, one channel in confirm mode, passive exchange declares, basic.publish with the
message's own encoded properties, and basic.ack/nack/channel.close/connection.close back.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from .replay_frames import split_properties

__all__ = ["AMQPError", "ConfirmPublisher", "with_headers"]

FRAME_END = b"\xce"
_FRAME = struct.Struct(">BHI")
_METHOD = struct.Struct(">HH")
_CONTENT_HEADER = struct.Struct(">HHQ")
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


class AMQPError(Exception):
    """The broker closed the channel or connection, nacked a publish, or the socket died."""


def _shortstr(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > 255:
        raise ValueError(f"AMQP short string over 255 bytes: {value[:40]!r}...")
    return bytes((len(raw),)) + raw


def _longstr(raw: bytes) -> bytes:
    return struct.pack(">I", len(raw)) + raw


def _string_entries(headers: dict[str, str]) -> bytes:
    return b"".join(_shortstr(k) + b"S" + _longstr(v.encode()) for k, v in headers.items())


def with_headers(props_raw: bytes, extra: dict[str, str]) -> bytes:
    """``props_raw`` (an encoded basic content header's flags and properties) with ``extra`` string
    headers appended to its headers table (or a table added), the rest left byte for byte."""
    entries = _string_entries(extra)
    before, table, after = split_properties(props_raw)
    return before + struct.pack(">I", len(table) + len(entries)) + table + entries + after


def _method(channel: int, class_id: int, method_id: int, args: bytes) -> bytes:
    payload = _METHOD.pack(class_id, method_id) + args
    return _FRAME.pack(1, channel, len(payload)) + payload + FRAME_END


@dataclass(frozen=True, slots=True)
class _Url:
    host: str
    port: int
    user: str
    password: str
    vhost: str

    @classmethod
    def parse(cls, url: str) -> _Url:
        u = urlsplit(url)
        if u.scheme != "amqp":
            raise ValueError(f"only amqp:// URLs are supported for replay, got {url!r}")
        vhost = unquote(u.path[1:]) if len(u.path) > 1 else "/"
        return cls(u.hostname or "127.0.0.1", u.port or 5672, unquote(u.username or "guest"),
                   unquote(u.password or "guest"), vhost)


class ConfirmPublisher:
    """Publishes with up to ``window`` confirms outstanding. ``on_confirmed(tag)`` is called with the
    highest delivery tag below which every publish is confirmed, once per batch of acks read."""

    def __init__(self, url: str, *, window: int = 1000, timeout: float = 30.0) -> None:
        self.url = _Url.parse(url)
        self.window = window
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.frame_max = 131072
        self._rx = bytearray()
        self._tx: list[bytes] = []
        self._tx_bytes = 0
        self.next_tag = 1
        self.confirmed = 0  # every tag <= this is confirmed
        self._acked: set[int] = set()  # single acks beyond ``confirmed``
        self.on_confirmed: Callable[[int], None] = lambda tag: None

    # ------------------------------------------------------------------ connection
    def connect(self) -> ConfirmPublisher:
        u = self.url
        sock = socket.create_connection((u.host, u.port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        sock.sendall(PROTOCOL_HEADER)
        self._expect(0, 10, 10)  # connection.start
        response = b"\x00" + u.user.encode() + b"\x00" + u.password.encode()
        self._send_now(_method(0, 10, 11, struct.pack(">I", 0) + _shortstr("PLAIN") + _longstr(response)
                               + _shortstr("en_US")))
        tune = self._expect(0, 10, 30)
        channel_max, frame_max, _heartbeat = struct.unpack_from(">HIH", tune)
        self.frame_max = frame_max or self.frame_max
        self._send_now(_method(0, 10, 31, struct.pack(">HIH", channel_max, self.frame_max, 0)))
        self._send_now(_method(0, 10, 40, _shortstr(u.vhost) + _shortstr("") + b"\x00"))
        self._expect(0, 10, 41)
        self._send_now(_method(1, 20, 10, _shortstr("")))
        self._expect(1, 20, 11)
        self._send_now(_method(1, 85, 10, b"\x00"))  # confirm.select
        self._expect(1, 85, 11)
        return self

    def exchange_exists(self, name: str) -> bool:
        """A passive declare; a missing exchange closes the channel, so this is for a check
        before publishing (the publisher is unusable after a False)."""
        if name == "":
            return True
        self._send_now(_method(1, 40, 10, struct.pack(">H", 0) + _shortstr(name) + _shortstr("") + b"\x01"
                               + struct.pack(">I", 0)))
        try:
            self._expect(1, 40, 11)
        except AMQPError:
            return False
        return True

    def close(self) -> None:
        """connection.close after every queued publish: the broker discards what follows a close,
        so publishes still queued here (less than a flush's worth) would otherwise be lost."""
        if self.sock is None:
            return
        try:
            self._flush()
            self._send_now(_method(0, 10, 50, struct.pack(">H", 200) + _shortstr("bye") + struct.pack(">HH", 0, 0)))
            self._expect(0, 10, 51)
        except (OSError, AMQPError):
            pass
        finally:
            self.sock.close()
            self.sock = None

    # ------------------------------------------------------------------ publish
    def publish(self, exchange: str, routing_key: str, props_raw: bytes, body: bytes) -> int:
        """Queues one publish (written out in batches); returns its delivery tag. Blocks reading
        confirms while ``window`` publishes are unconfirmed."""
        args = b"\x00\x00" + _shortstr(exchange) + _shortstr(routing_key) + b"\x00"
        method = _METHOD.pack(60, 40) + args
        header = _CONTENT_HEADER.pack(60, 0, len(body)) + props_raw
        parts = [_FRAME.pack(1, 1, len(method)), method, FRAME_END, _FRAME.pack(2, 1, len(header)), header, FRAME_END]
        limit = self.frame_max - 8
        for start in range(0, len(body), limit):
            chunk = body[start:start + limit]
            parts += (_FRAME.pack(3, 1, len(chunk)), chunk, FRAME_END)
        frame = b"".join(parts)
        self._tx.append(frame)
        self._tx_bytes += len(frame)
        tag = self.next_tag
        self.next_tag += 1
        if self._tx_bytes >= 65536:
            self._flush()
        self._wait_unconfirmed(self.window - 1)
        return tag

    def send_encoded(self, frames: bytes, count: int) -> int:
        """Sends ``count`` publishes already encoded as frames for channel 1 (``replay_frames``);
        returns the last one's delivery tag. Waits first until they fit in the window (a batch of
        more than ``window`` waits for every earlier publish instead)."""
        self._wait_unconfirmed(max(self.window - count, 0))
        self._tx.append(frames)
        self._tx_bytes += len(frames)
        self.next_tag += count
        if self._tx_bytes >= 65536:
            self._flush()
        return self.next_tag - 1

    def wait_confirms(self) -> None:
        """Returns once every publish so far is confirmed."""
        self._wait_unconfirmed(0)

    def _wait_unconfirmed(self, most: int) -> None:
        """Returns once at most ``most`` publishes are unconfirmed, having sent every queued one.
        The condition is checked again after the flush, before any blocking read: the flush's own
        read may take the very confirms waited for, and a blocking read after that would wait for
        a confirm that never comes (until the socket timeout)."""
        if self.next_tag - 1 - self.confirmed <= most:
            return
        self._flush()
        while self.next_tag - 1 - self.confirmed > most:
            self._read(block=True)

    # ------------------------------------------------------------------ I/O
    def _flush(self) -> None:
        if self._tx:
            data = b"".join(self._tx)
            self._tx, self._tx_bytes = [], 0
            self._send_now(data)
            self._read(block=False)

    def _send_now(self, data: bytes) -> None:
        assert self.sock is not None
        try:
            # a non-blocking read (``_recv``) leaves the socket without its timeout: sendall would
            # then fail with EAGAIN as soon as a slow broker lets the send buffer fill
            self.sock.settimeout(self.timeout)
            self.sock.sendall(data)
        except OSError as exc:
            raise AMQPError(f"connection lost: {exc}") from None

    def _recv(self, block: bool) -> bool:
        assert self.sock is not None
        try:
            self.sock.settimeout(self.timeout if block else 0.0)
            data = self.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            raise AMQPError(f"connection lost: {exc}") from None
        if not data:
            raise AMQPError("the broker closed the connection")
        self._rx += data
        return True

    def _frames(self) -> list[tuple[int, int, bytes]]:
        out = []
        rx = self._rx
        pos = 0
        while len(rx) - pos >= 8:
            kind, channel, size = _FRAME.unpack_from(rx, pos)
            if len(rx) - pos < size + 8:
                break
            out.append((kind, channel, bytes(rx[pos + 7:pos + 7 + size])))
            pos += size + 8
        del rx[:pos]
        return out

    def _read(self, block: bool) -> None:
        got = self._recv(block)
        while got:
            before = self.confirmed
            for kind, channel, payload in self._frames():
                if kind == 1:
                    self._on_method(channel, payload)
            if self.confirmed != before:
                self.on_confirmed(self.confirmed)
            got = self._recv(False)

    def _on_method(self, channel: int, payload: bytes) -> None:
        class_id, method_id = _METHOD.unpack_from(payload)
        if (class_id, method_id) == (60, 80):  # basic.ack
            tag, multiple = struct.unpack_from(">QB", payload, 4)
            if multiple & 1:
                self.confirmed = max(self.confirmed, tag)
                if self._acked:
                    self._acked = {t for t in self._acked if t > self.confirmed}
            elif tag > self.confirmed:
                self._acked.add(tag)
            while self.confirmed + 1 in self._acked:
                self.confirmed += 1
                self._acked.discard(self.confirmed)
        elif (class_id, method_id) == (60, 120):  # basic.nack
            tag = struct.unpack_from(">Q", payload, 4)[0]
            raise AMQPError(f"the broker refused publish #{tag} (basic.nack)")
        elif (class_id, method_id) in ((20, 40), (10, 50)):  # channel.close / connection.close
            code = struct.unpack_from(">H", payload, 4)[0]
            text = payload[7:7 + payload[6]].decode("utf-8", "replace")
            raise AMQPError(f"{code} {text}")

    def _expect(self, channel: int, class_id: int, method_id: int) -> bytes:
        self._flush()
        while True:
            for kind, ch, payload in self._frames():
                if kind != 1:
                    continue
                cid, mid = _METHOD.unpack_from(payload)
                if (cid, mid) == (class_id, method_id):
                    return payload[4:]
                self._on_method(ch, payload)
            self._recv(block=True)

