"""What the message store writes: the operations, their record payloads, and what recovery returns.

Payloads are big-endian with u16-length UTF-8 strings. A Publish payload ends with the property
bytes and then the body, so both are written as separate parts and never joined (see
``SegmentWriter.append``); the body is simply the rest of the record.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "DECODE_ERRORS",
    "Ack",
    "Delay",
    "Deliver",
    "DecodedPublish",
    "DropQueue",
    "Kind",
    "Publish",
    "QKey",
    "Recovered",
    "RecoveredMessage",
    "StoreOp",
    "Undelay",
    "decode_delay",
    "decode_publish",
    "decode_queue",
    "decode_ref",
    "delay_parts",
    "message_id_of",
    "publish_parts",
    "queue_parts",
    "ref_parts",
    "undelay_parts",
]

@dataclass(frozen=True, slots=True)
class Publish:
    message_id: int
    vhost: str
    queues: tuple[str, ...]
    exchange: str
    routing_key: str
    props_raw: bytes
    body: bytes
    timestamp_ms: int = 0


@dataclass(frozen=True, slots=True)
class Ack:
    """The message left that queue for good."""

    message_id: int
    vhost: str
    queue: str


@dataclass(frozen=True, slots=True)
class Deliver:
    """The message was delivered once from that queue (redelivered + delivery_count on recovery)."""

    message_id: int
    vhost: str
    queue: str


@dataclass(frozen=True, slots=True)
class DropQueue:
    """The queue was deleted or purged: all its messages are gone."""

    vhost: str
    queue: str


@dataclass(frozen=True, slots=True)
class Delay:
    """A delayed message (x-delay) held by an exchange until ``due_ms``."""

    message_id: int
    vhost: str
    exchange: str
    routing_key: str
    props_raw: bytes
    body: bytes
    due_ms: int


@dataclass(frozen=True, slots=True)
class Undelay:
    """The delayed message was released."""

    message_id: int


StoreOp = Publish | Ack | Deliver | DropQueue | Delay | Undelay


@dataclass(frozen=True, slots=True)
class RecoveredMessage:
    message_id: int
    exchange: str
    routing_key: str
    props_raw: bytes
    body: bytes
    redelivered: bool
    delivery_count: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class Recovered:
    queues: dict[tuple[str, str], list[RecoveredMessage]]  # (vhost, queue) -> live, in publish order
    delayed: list[Delay]  # in id order
    next_message_id: int  # > every id seen in any record
    truncated_bytes: int  # bytes after the last good record of any segment (0 if clean)


class Kind(IntEnum):
    PUBLISH = 1
    ACK = 2
    DELIVER = 3
    DROP_QUEUE = 4
    DELAY = 5
    UNDELAY = 6


QKey = tuple[str, str]  # (vhost, queue)

_ID = struct.Struct(">Q")
_PUB_HEAD = struct.Struct(">QQH")  # message id, timestamp ms, queue count
_DELAY_HEAD = struct.Struct(">QQ")  # message id, due ms
_STR_LEN = struct.Struct(">H")
_U32 = struct.Struct(">I")
_ZERO_U32 = _U32.pack(0)
DECODE_ERRORS = (struct.error, UnicodeDecodeError, ValueError)


def _pack_str(s: str) -> bytes:
    b = s.encode()
    return _STR_LEN.pack(len(b)) + b


def _read_str(p: bytes, off: int) -> tuple[str, int]:
    (n,) = _STR_LEN.unpack_from(p, off)
    start = off + 2
    end = start + n
    if end > len(p):
        raise ValueError("string runs past the record")
    return p[start:end].decode(), end


def publish_parts(
    mid: int, ts: int, vhost: str, queues: Sequence[str], counts: Sequence[int] | None,
    exchange: str, routing_key: str, props: bytes, body: bytes,
) -> tuple[bytes, bytes, bytes]:
    """Payload parts of a Publish record: metadata, then the property bytes, then the body.
    ``counts`` are per-queue delivery counts (compaction copies); None means all zero."""
    meta = [_PUB_HEAD.pack(mid, ts, len(queues)), _pack_str(vhost)]
    if counts is None:
        for name in queues:
            meta += (_pack_str(name), _ZERO_U32)
    else:
        for name, count in zip(queues, counts, strict=True):
            meta += (_pack_str(name), _U32.pack(count))
    meta += (_pack_str(exchange), _pack_str(routing_key), _U32.pack(len(props)))
    return (b"".join(meta), props, body)


@dataclass(slots=True)
class DecodedPublish:
    mid: int
    ts: int
    vhost: str
    queues: list[tuple[str, int]]
    exchange: str
    routing_key: str
    props: bytes
    body: bytes


def decode_publish(p: bytes) -> DecodedPublish:
    mid, ts, nq = _PUB_HEAD.unpack_from(p, 0)
    vhost, off = _read_str(p, _PUB_HEAD.size)
    queues: list[tuple[str, int]] = []
    for _ in range(nq):
        name, off = _read_str(p, off)
        (count,) = _U32.unpack_from(p, off)
        off += 4
        queues.append((name, count))
    exchange, off = _read_str(p, off)
    routing_key, off = _read_str(p, off)
    (plen,) = _U32.unpack_from(p, off)
    off += 4
    if off + plen > len(p):
        raise ValueError("properties run past the record")
    return DecodedPublish(mid, ts, vhost, queues, exchange, routing_key, p[off : off + plen],
                           p[off + plen :])


def delay_parts(op: Delay) -> tuple[bytes, bytes, bytes]:
    meta = b"".join((
        _DELAY_HEAD.pack(op.message_id, op.due_ms), _pack_str(op.vhost), _pack_str(op.exchange),
        _pack_str(op.routing_key), _U32.pack(len(op.props_raw)),
    ))
    return (meta, op.props_raw, op.body)


def decode_delay(p: bytes) -> Delay:
    mid, due = _DELAY_HEAD.unpack_from(p, 0)
    vhost, off = _read_str(p, _DELAY_HEAD.size)
    exchange, off = _read_str(p, off)
    routing_key, off = _read_str(p, off)
    (plen,) = _U32.unpack_from(p, off)
    off += 4
    if off + plen > len(p):
        raise ValueError("properties run past the record")
    return Delay(mid, vhost, exchange, routing_key, p[off : off + plen], p[off + plen :], due)


def decode_ref(p: bytes) -> tuple[int, str, str]:
    (mid,) = _ID.unpack_from(p, 0)
    vhost, off = _read_str(p, _ID.size)
    queue, _ = _read_str(p, off)
    return mid, vhost, queue


def decode_queue(p: bytes) -> tuple[str, str]:
    vhost, off = _read_str(p, 0)
    queue, _ = _read_str(p, off)
    return vhost, queue




def ref_parts(mid: int, vhost: str, queue: str) -> tuple[bytes]:
    """Payload of an Ack or Deliver record."""
    return (_ID.pack(mid) + _pack_str(vhost) + _pack_str(queue),)


def queue_parts(vhost: str, queue: str) -> tuple[bytes]:
    """Payload of a DropQueue record."""
    return (_pack_str(vhost) + _pack_str(queue),)


def undelay_parts(mid: int) -> tuple[bytes]:
    return (_ID.pack(mid),)


def message_id_of(p: bytes) -> int:
    """The id that starts every Publish, Delay, Ack, Deliver and Undelay payload."""
    return int(_ID.unpack_from(p, 0)[0])
