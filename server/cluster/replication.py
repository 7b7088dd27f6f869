"""The replication protocol between a leader and its followers, sans-IO (as h11 and the AMQP
codec in ``server/amqp``): bytes in, events out; events in, bytes out.

Owner: one ``ReplicationConnection`` per replication socket holds that socket's parse buffer and
handshake state, and one ``FollowerLog`` per follower holds the epoch and position it has made
durable; the shell that will own the socket (a later ``server/net`` task) only moves bytes and
performs what they say.

What travels is the flusher's own ordered record stream: an ``Append`` carries the store's record
bytes unchanged, numbered by ``position`` (1, 2, 3, ... with no gap), with the leader's epoch and
a CRC-32 of the payload. The follower writes and fsyncs it and answers ``Ack(epoch, position)``;
the leader's confirm will wait for enough of those (not wired yet). Every frame carries the epoch,
so a follower that has seen a newer one refuses an old leader's writes (``Refuse``): a stale
leader cannot write, whatever it believes.

A frame is ``<u8 type><u32 body length><body>``, integers big-endian. Each side's first frame is
``Hello`` (protocol version, epoch, durable position, node name); anything else first, a frame of
the wrong direction, a body of the wrong size, a bad CRC or a frame over the bound is a
``ReplicationError``, after which the connection is done (the shell closes the socket).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Literal

from headrace.persistence.records import MAX_RECORD_SIZE

__all__ = [
    "Ack", "Append", "Closed", "Event", "FollowerLog", "Gap", "Heartbeat", "Hello", "PROTOCOL_VERSION",
    "Leave", "Refuse", "ReplicationConnection", "ReplicationError", "Snapshot", "SnapshotDone",
]

PROTOCOL_VERSION = 1
HEADER = struct.Struct(">BI")
_HELLO = struct.Struct(">HQQH")
_APPEND = struct.Struct(">QQI")
_TWO = struct.Struct(">QQ")  # heartbeat, ack
_REFUSE = struct.Struct(">QH")
# the largest body: an append of the largest store record, plus its own fields
MAX_BODY = MAX_RECORD_SIZE + _APPEND.size
MAX_NAME = 255


class ReplicationError(ValueError):
    """The peer broke the protocol; the connection cannot go on."""


@dataclass(slots=True, frozen=True)
class Hello:
    epoch: int
    position: int  # the sender's last durable position
    node: str
    version: int = PROTOCOL_VERSION


@dataclass(slots=True, frozen=True)
class Append:
    epoch: int
    position: int
    payload: bytes


@dataclass(slots=True, frozen=True)
class Heartbeat:
    epoch: int
    committed: int  # the position the leader counts as committed


@dataclass(slots=True, frozen=True)
class Ack:
    epoch: int
    position: int  # durable on the follower up to here


@dataclass(slots=True, frozen=True)
class Refuse:
    epoch: int  # the newer epoch the follower has seen
    reason: str


@dataclass(slots=True, frozen=True)
class Snapshot:
    """A piece of the leader's copy of its directory (file operations, ``replica_files``): sent to
    a follower whose position the leader cannot continue from (a new epoch, a restart, a gap)."""

    epoch: int
    payload: bytes


@dataclass(slots=True, frozen=True)
class SnapshotDone:
    """The copy is sent: the follower's position is now ``position`` (the leader's when the copy
    started; the appends after it follow), and its files are exact once it has written up to
    ``consistent_at`` (the leader's position when the copy ended)."""

    epoch: int
    position: int
    consistent_at: int


@dataclass(slots=True, frozen=True)
class Leave:
    """The operator removed the follower from the cluster (``headrace cluster leave``): it stops."""

    epoch: int


@dataclass(slots=True, frozen=True)
class Closed:
    """The peer closed its side at a frame boundary."""


Event = Hello | Append | Heartbeat | Ack | Refuse | Snapshot | SnapshotDone | Leave | Closed

_TYPES: dict[type, int] = {Hello: 1, Append: 2, Heartbeat: 3, Ack: 4, Refuse: 5, Snapshot: 6, SnapshotDone: 7,
                           Leave: 8}
_FROM_LEADER = frozenset({1, 2, 3, 6, 7, 8})
_FROM_FOLLOWER = frozenset({1, 4, 5})
_NAMES = {1: "hello", 2: "append", 3: "heartbeat", 4: "ack", 5: "refuse", 6: "snapshot", 7: "snapshot-done",
          8: "leave"}
_ONE = struct.Struct(">Q")  # leave
_THREE = struct.Struct(">QQQ")  # snapshot-done
_SNAP = struct.Struct(">QI")  # snapshot: epoch, crc


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ReplicationError(f"{what} is not UTF-8: {raw[:40]!r}") from None


class ReplicationConnection:
    """One side of a replication socket: ``our_role`` says which frames it sends and expects."""

    def __init__(self, our_role: Literal["leader", "follower"], max_body: int = MAX_BODY) -> None:
        self.our_role = our_role
        self.max_body = max_body
        self._buffer = bytearray()
        self._peer_hello: Hello | None = None
        self._sent_hello = False
        self._closed = False
        self._expect = _FROM_FOLLOWER if our_role == "leader" else _FROM_LEADER
        self._may_send = _FROM_LEADER if our_role == "leader" else _FROM_FOLLOWER

    @property
    def peer(self) -> Hello | None:
        return self._peer_hello

    def send(self, event: Hello | Append | Heartbeat | Ack | Refuse | Snapshot | SnapshotDone | Leave) -> bytes:
        kind = _TYPES[type(event)]
        if kind not in self._may_send:
            raise ReplicationError(f"a {self.our_role} does not send {_NAMES[kind]}")
        if not self._sent_hello and not isinstance(event, Hello):
            raise ReplicationError(f"hello first, not {_NAMES[kind]}")
        if isinstance(event, Hello):
            name = event.node.encode()
            if not 0 < len(name) <= MAX_NAME:
                raise ReplicationError(f"node name of {len(name)} bytes (1 to {MAX_NAME})")
            self._sent_hello = True
            body = _HELLO.pack(event.version, event.epoch, event.position, len(name)) + name
        elif isinstance(event, Append):
            if len(event.payload) > self.max_body - _APPEND.size:
                raise ReplicationError(f"record of {len(event.payload)} bytes is over the bound")
            body = _APPEND.pack(event.epoch, event.position, zlib.crc32(event.payload)) + event.payload
        elif isinstance(event, Snapshot):
            if len(event.payload) > self.max_body - _SNAP.size:
                raise ReplicationError(f"snapshot piece of {len(event.payload)} bytes is over the bound")
            body = _SNAP.pack(event.epoch, zlib.crc32(event.payload)) + event.payload
        elif isinstance(event, SnapshotDone):
            body = _THREE.pack(event.epoch, event.position, event.consistent_at)
        elif isinstance(event, Heartbeat):
            body = _TWO.pack(event.epoch, event.committed)
        elif isinstance(event, Leave):
            body = _ONE.pack(event.epoch)
        elif isinstance(event, Ack):
            body = _TWO.pack(event.epoch, event.position)
        else:
            reason = event.reason.encode()[:MAX_NAME]
            body = _REFUSE.pack(event.epoch, len(reason)) + reason
        return HEADER.pack(kind, len(body)) + body

    def receive_data(self, data: bytes | bytearray) -> list[Event]:
        """The whole events ``data`` completes, in order; ``b""`` is the peer's end of stream."""
        if self._closed:
            raise ReplicationError("data after the end of the stream")
        if not data:
            self._closed = True
            if self._buffer:
                raise ReplicationError(f"stream ended inside a frame ({len(self._buffer)} bytes pending)")
            return [Closed()]
        self._buffer += data
        events: list[Event] = []
        buf = self._buffer
        at = 0
        while len(buf) - at >= HEADER.size:
            kind, length = HEADER.unpack_from(buf, at)
            if kind not in _NAMES:
                raise ReplicationError(f"unknown frame type {kind}")
            if kind not in self._expect:
                raise ReplicationError(f"a {self.our_role} does not receive {_NAMES[kind]}")
            if length > self.max_body:
                raise ReplicationError(f"{_NAMES[kind]} frame of {length} bytes is over the bound {self.max_body}")
            end = at + HEADER.size + length
            if len(buf) < end:
                break
            body = bytes(buf[at + HEADER.size:end])
            at = end
            events.append(self._event(kind, body))
        del buf[:at]
        return events

    def _event(self, kind: int, body: bytes) -> Event:
        if self._peer_hello is None and kind != 1:
            raise ReplicationError(f"expected hello first, got {_NAMES[kind]}")
        if kind == 1:
            if self._peer_hello is not None:
                raise ReplicationError("a second hello")
            if len(body) < _HELLO.size:
                raise ReplicationError(f"hello of {len(body)} bytes")
            version, epoch, position, name_len = _HELLO.unpack_from(body)
            if version != PROTOCOL_VERSION:
                raise ReplicationError(f"protocol version {version}, this node speaks {PROTOCOL_VERSION}")
            if not 0 < name_len <= MAX_NAME or len(body) != _HELLO.size + name_len:
                raise ReplicationError(f"hello with a node name of {name_len} bytes in {len(body)}")
            hello = Hello(epoch, position, _text(body[_HELLO.size:], "node name"), version)
            self._peer_hello = hello
            return hello
        if kind == 2:
            if len(body) < _APPEND.size:
                raise ReplicationError(f"append of {len(body)} bytes")
            epoch, position, crc = _APPEND.unpack_from(body)
            payload = body[_APPEND.size:]
            if zlib.crc32(payload) != crc:
                raise ReplicationError(f"append at position {position}: CRC mismatch")
            return Append(epoch, position, payload)
        if kind == 6:
            if len(body) < _SNAP.size:
                raise ReplicationError(f"snapshot of {len(body)} bytes")
            epoch, crc = _SNAP.unpack_from(body)
            payload = body[_SNAP.size:]
            if zlib.crc32(payload) != crc:
                raise ReplicationError("snapshot piece: CRC mismatch")
            return Snapshot(epoch, payload)
        if kind == 8:
            if len(body) != _ONE.size:
                raise ReplicationError(f"leave of {len(body)} bytes")
            return Leave(*_ONE.unpack(body))
        if kind == 7:
            if len(body) != _THREE.size:
                raise ReplicationError(f"snapshot-done of {len(body)} bytes")
            return SnapshotDone(*_THREE.unpack(body))
        if kind in (3, 4):
            if len(body) != _TWO.size:
                raise ReplicationError(f"{_NAMES[kind]} of {len(body)} bytes")
            a, b = _TWO.unpack(body)
            return Heartbeat(a, b) if kind == 3 else Ack(a, b)
        if len(body) < _REFUSE.size:
            raise ReplicationError(f"refuse of {len(body)} bytes")
        epoch, reason_len = _REFUSE.unpack_from(body)
        if len(body) != _REFUSE.size + reason_len:
            raise ReplicationError(f"refuse with a reason of {reason_len} bytes in {len(body)}")
        return Refuse(epoch, _text(body[_REFUSE.size:], "refuse reason"))


@dataclass(slots=True, frozen=True)
class Gap:
    """An append that does not follow the last durable one: the follower needs ``expected`` next."""

    expected: int
    got: int


class FollowerLog:
    """A follower's view of the stream: the newest epoch it has seen and its durable position.

    ``check`` says whether an append may be written (``None``), must be refused (an older
    epoch: ``Refuse``), or does not follow on (``Gap``: the leader must send from ``expected``).
    ``written`` is called once the record is on disk, and returns the ``Ack`` to send."""

    def __init__(self, epoch: int, position: int) -> None:
        self.epoch = epoch
        self.position = position
        self.committed = 0

    def _stale(self, epoch: int) -> Refuse | None:
        if epoch < self.epoch:
            return Refuse(self.epoch, f"epoch {epoch} is older than {self.epoch}")
        self.epoch = epoch
        return None

    def hello(self, hello: Hello) -> Refuse | None:
        return self._stale(hello.epoch)

    def check(self, append: Append) -> Refuse | Gap | None:
        refused = self._stale(append.epoch)
        if refused is not None:
            return refused
        if append.position != self.position + 1:
            return Gap(self.position + 1, append.position)
        return None

    def written(self, append: Append) -> Ack:
        if append.position != self.position + 1 or append.epoch != self.epoch:
            raise ReplicationError(f"written out of order: position {append.position} after {self.position}")
        self.position = append.position
        return Ack(self.epoch, self.position)

    def snapshot(self, epoch: int) -> Refuse | None:
        return self._stale(epoch)

    def snapshot_done(self, done: SnapshotDone) -> Refuse | None:
        """The copy is written and synced: appends continue from ``done.position``."""
        refused = self._stale(done.epoch)
        if refused is None:
            self.position = done.position
        return refused

    def heartbeat(self, beat: Heartbeat) -> Refuse | None:
        refused = self._stale(beat.epoch)
        if refused is None:
            self.committed = max(self.committed, min(beat.committed, self.position))
        return refused
