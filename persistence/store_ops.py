"""What the message store writes: the operations, their record payloads, and what
recovery returns.

Payloads are big-endian; strings are UTF-8 whose u16 lengths sit in a fixed head, so a decode is
one ``unpack_from`` and a few slices. A Publish payload ends with the property bytes and then the
body, written as separate parts and never joined (see ``SegmentWriter.append``); the body is simply
the rest of the record.
"""

from __future__ import annotations

import functools
import mmap
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

from headrace.queues.backing import RecoveredRow


__all__ = [
    "DECODE_ERRORS",
    "DELAY_HEAD",
    "DelayRow",
    "DelayTarget",
    "LiveDelayed",
    "Ack",
    "Delay",
    "Deliver",
    "DecodedPublish",
    "DropQueue",
    "Kind",
    "Publish",
    "PurgeQueue",
    "QKey",
    "REC_ACK",
    "REC_DELAY",
    "REC_DELIVER",
    "REC_DROP_QUEUE",
    "REC_PUBLISH",
    "REC_PURGE",
    "REC_UNDELAY",
    "Recovered",
    "RecoveredMessage",
    "RecoveredQueue",
    "StoreOp",
    "Undelay",
    "decode_delay",
    "decode_publish",
    "decode_publish_head",
    "decode_publish_at",
    "publish_offsets_at",
    "PUB_HEAD",
    "PUB_QUEUE",
    "decode_queue",
    "decode_ref",
    "delay_parts",
    "message_id_of",
    "decode_purge",
    "publish_parts",
    "purge_parts",
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
class PurgeQueue:
    """The queue was purged: every message it held goes except ``keep``, the ids delivered and
    still unacked (they may yet be requeued). One record instead of one Ack per message."""

    vhost: str
    queue: str
    keep: tuple[int, ...] = ()


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


StoreOp = Publish | Ack | Deliver | DropQueue | PurgeQueue | Delay | Undelay


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


class RecoveredQueue(Sequence[RecoveredMessage]):
    """One queue's recovered messages, read from the segments as they are iterated; ``rows``
    gives them from ``start`` on still in the store's bytes, for recovery to spill."""

    def rows(self, start: int) -> Iterable[RecoveredRow]:
        raise NotImplementedError


# One live delayed message as recovery reads it back: (due ms, message id, routing key length,
# properties length, its record's tail), the tail being exchange, routing key, properties and body
# back to back as the Delay record has them, which is also how a schedule bucket file has them
# (``delay_buckets.HEAD`` before them), so the tail is copied on as it is, never decoded.
DelayRow = tuple[int, int, int, int, bytes]
# (vhost, exchange, exchange length in bytes): one tuple per pair, shared by all its batches
DelayTarget = tuple[str, str, int]


class LiveDelayed(Protocol):
    """A recovered store's live delayed messages in log order (``store_delayed.LiveDelays``)."""

    def __iter__(self) -> Iterator[Delay]: ...

    def batches(self) -> Iterator[dict[DelayTarget, list[DelayRow]]]: ...


@dataclass(frozen=True, slots=True)
class Recovered:
    # (vhost, queue) -> live messages in publish order, read from the segments as they are iterated
    # (valid until the store's next write)
    queues: dict[tuple[str, str], RecoveredQueue]
    # live delayed messages in log order, read from the segments as iterated (until the next write)
    delayed: LiveDelayed
    next_message_id: int  # > every id seen in any record
    truncated_bytes: int  # bytes after the last good record of any segment (0 if clean)


class Kind(IntEnum):
    PUBLISH = 1
    ACK = 2
    DELIVER = 3
    DROP_QUEUE = 4
    DELAY = 5
    UNDELAY = 6
    PURGE = 7


# Plain ints for the hot path (an enum member lookup per record is measurable).
REC_PUBLISH, REC_ACK, REC_DELIVER = int(Kind.PUBLISH), int(Kind.ACK), int(Kind.DELIVER)
REC_DROP_QUEUE, REC_DELAY, REC_UNDELAY = int(Kind.DROP_QUEUE), int(Kind.DELAY), int(Kind.UNDELAY)
REC_PURGE = int(Kind.PURGE)

QKey = tuple[str, str]  # (vhost, queue)

# Every variable-length field's size is in the fixed head, so decoding is one unpack and slices.
_ID = struct.Struct(">Q")
_PUB_HEAD = struct.Struct(">QQHHHHI")  # id, timestamp ms, queue count, len vhost/exchange/rk/props
_PUB_QUEUE = struct.Struct(">HI")  # queue name length, delivery count; then the name
PUB_HEAD, PUB_QUEUE = _PUB_HEAD, _PUB_QUEUE  # for recovery's in-place replay
_REF_HEAD = struct.Struct(">QHH")  # id, len vhost, len queue (Ack, Deliver)
_QUEUE_HEAD = struct.Struct(">HH")  # len vhost, len queue (DropQueue)
_COUNT = struct.Struct(">I")  # ids kept by a PurgeQueue record, then the ids (>Q each)
DELAY_HEAD = struct.Struct(">QQHHHI")  # id, due ms, len vhost/exchange/rk/props
DECODE_ERRORS = (struct.error, UnicodeDecodeError, ValueError)
# Encoded (vhost, queue) pairs kept for Ack/Deliver records; the set of durable queues is small,
# and a miss only costs an encode.
_QUEUE_CACHE_SIZE = 1024


@functools.lru_cache(maxsize=_QUEUE_CACHE_SIZE)
def _queue_bytes(vhost: str, queue: str) -> bytes:
    v, q = vhost.encode(), queue.encode()
    return _QUEUE_HEAD.pack(len(v), len(q)) + v + q


def _check(end: int, p: bytes) -> None:
    if end > len(p):
        raise ValueError("field runs past the end of the record")


def publish_parts(
    mid: int, ts: int, vhost: str, queues: Sequence[str], counts: Sequence[int] | None,
    exchange: str, routing_key: str, props: bytes, body: bytes,
) -> tuple[bytes, bytes, bytes]:
    """Payload parts of a Publish record: metadata, then the property bytes, then the body.
    ``counts`` are per-queue delivery counts (compaction copies); None means all zero.

    Layout: head, queues (``>HI`` + name each), vhost, exchange, routing key, props, body."""
    v, e, r = vhost.encode(), exchange.encode(), routing_key.encode()
    meta = [_PUB_HEAD.pack(mid, ts, len(queues), len(v), len(e), len(r), len(props))]
    for i, name in enumerate(queues):
        n = name.encode()
        meta += (_PUB_QUEUE.pack(len(n), counts[i] if counts is not None else 0), n)
    meta += (v, e, r)
    return (b"".join(meta), props, body)


def decode_publish_head(p: bytes) -> tuple[int, int, str, list[tuple[str, int]], int]:
    """(id, timestamp ms, vhost, [(queue, delivery count)], offset of the exchange): what
    recovery needs of a Publish to index it (a one-queue Publish takes a faster path there)."""
    mid, ts, nq, vlen, _, _, _ = _PUB_HEAD.unpack_from(p, 0)
    off = _PUB_HEAD.size
    queues: list[tuple[str, int]] = []
    for _ in range(nq):
        nlen, count = _PUB_QUEUE.unpack_from(p, off)
        off += _PUB_QUEUE.size
        _check(off + nlen, p)
        queues.append((p[off : off + nlen].decode(), count))
        off += nlen
    _check(off + vlen, p)
    return mid, ts, p[off : off + vlen].decode(), queues, off + vlen


def publish_offsets_at(buf: bytes | mmap.mmap, start: int, end: int) -> tuple[int, int, int, int, int, int]:
    """(id, timestamp ms, exchange at, routing key at, props at, body at) of the Publish payload
    at ``buf[start:end]``: the one walk past its queue names that in-place readers share."""
    mid, ts, nq, vlen, elen, rlen, plen = _PUB_HEAD.unpack_from(buf, start)
    off = start + _PUB_HEAD.size
    for _ in range(nq):
        off += _PUB_QUEUE.size + _PUB_QUEUE.unpack_from(buf, off)[0]
    e_at = off + vlen
    rk_at = e_at + elen
    props_at = rk_at + rlen
    body_at = props_at + plen
    if body_at > end:
        raise ValueError("field runs past the end of the record")
    return mid, ts, e_at, rk_at, props_at, body_at


def decode_publish_at(buf: bytes | mmap.mmap, start: int, end: int) -> tuple[int, str, str, bytes, bytes]:
    """(timestamp ms, exchange, routing key, props, body) of the Publish payload at
    ``buf[start:end]``, read in place (recovery's loads: a mapped segment, no copy of the whole
    record)."""
    _, ts, e_at, rk_at, props_at, body_at = publish_offsets_at(buf, start, end)
    return (ts, buf[e_at:rk_at].decode(), buf[rk_at:props_at].decode(), buf[props_at:body_at],
            buf[body_at:end])


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
    mid, ts, vhost, queues, _ = decode_publish_head(p)
    return DecodedPublish(mid, ts, vhost, queues, *decode_publish_at(p, 0, len(p))[1:])


def delay_parts(op: Delay) -> tuple[bytes, bytes, bytes]:
    v, e, r = op.vhost.encode(), op.exchange.encode(), op.routing_key.encode()
    head = DELAY_HEAD.pack(op.message_id, op.due_ms, len(v), len(e), len(r), len(op.props_raw))
    return (b"".join((head, v, e, r)), op.props_raw, op.body)


def decode_delay(p: bytes) -> Delay:
    mid, due, vlen, elen, rlen, plen = DELAY_HEAD.unpack_from(p, 0)
    e_at = DELAY_HEAD.size + vlen
    r_at = e_at + elen
    props_at = r_at + rlen
    body_at = props_at + plen
    _check(body_at, p)
    return Delay(mid, p[DELAY_HEAD.size : e_at].decode(), p[e_at:r_at].decode(),
                 p[r_at:props_at].decode(), p[props_at:body_at], p[body_at:], due)


def decode_ref(p: bytes) -> tuple[int, str, str]:
    """(id, vhost, queue) of an Ack or Deliver record."""
    mid, vlen, qlen = _REF_HEAD.unpack_from(p, 0)
    v_end = _REF_HEAD.size + vlen
    _check(v_end + qlen, p)
    return mid, p[_REF_HEAD.size : v_end].decode(), p[v_end : v_end + qlen].decode()


def decode_queue(p: bytes) -> tuple[str, str]:
    """(vhost, queue) of a DropQueue record."""
    vlen, qlen = _QUEUE_HEAD.unpack_from(p, 0)
    v_end = _QUEUE_HEAD.size + vlen
    _check(v_end + qlen, p)
    return p[_QUEUE_HEAD.size : v_end].decode(), p[v_end : v_end + qlen].decode()


def purge_parts(op: PurgeQueue) -> tuple[bytes, bytes, bytes]:
    """Payload of a PurgeQueue record: the queue, the count of kept ids, the ids."""
    keep = op.keep
    return (_queue_bytes(op.vhost, op.queue), _COUNT.pack(len(keep)),
            struct.pack(f">{len(keep)}Q", *keep))


def decode_purge(p: bytes) -> tuple[QKey, frozenset[int]]:
    """((vhost, queue), kept ids) of a PurgeQueue record."""
    vlen, qlen = _QUEUE_HEAD.unpack_from(p, 0)
    end = _QUEUE_HEAD.size + vlen + qlen
    key = decode_queue(p)
    (n,) = _COUNT.unpack_from(p, end)
    _check(end + _COUNT.size + 8 * n, p)
    return key, frozenset(struct.unpack_from(f">{n}Q", p, end + _COUNT.size))


def ref_parts(mid: int, vhost: str, queue: str) -> tuple[bytes, bytes]:
    """Payload of an Ack or Deliver record."""
    return (_ID.pack(mid), _queue_bytes(vhost, queue))


def queue_parts(vhost: str, queue: str) -> tuple[bytes]:
    """Payload of a DropQueue record."""
    return (_queue_bytes(vhost, queue),)


def undelay_parts(mid: int) -> tuple[bytes]:
    return (_ID.pack(mid),)


def message_id_of(p: bytes) -> int:
    """The id that starts every Publish, Delay, Ack, Deliver and Undelay payload."""
    return int(_ID.unpack_from(p, 0)[0])
