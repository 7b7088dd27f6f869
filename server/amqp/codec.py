"""Frame encoding, with hand-written fast paths for what every message crosses.

A frame is ``type:u8 channel:u16 size:u32 payload 0xCE``. ``encode_deliver`` builds the deliver
method, content header and body frames of one delivery as a single ``bytes`` with precompiled
structs, keeping the publisher's property bytes as they came: the C one of ``_wire.c`` when it
was built (``compiled.py``), ``encode_deliver_py`` otherwise, the same bytes either way. ``encode_delivers`` does a consumer's
whole turn of queue entries in one call. ``decode_publish`` and
``decode_ack`` parse the two methods a busy connection receives most without the generic,
table-driven path in ``methods.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from . import methods as m
from .compiled import WIRE
from .spec import FRAME_END, FrameType

__all__ = [
    "FRAME_HEADER",
    "decode_ack",
    "decode_publish",
    "encode_content",
    "encode_deliver",
    "encode_deliver_py",
    "encode_delivers",
    "encode_delivers_py",
    "encode_frame",
    "encode_method_frame",
]

FRAME_HEADER = struct.Struct(">BHI")
_CONTENT_HEADER = struct.Struct(">HHQ")  # class id, weight, body size
_Q = struct.Struct(">Q")
_END = bytes((FRAME_END,))
_DELIVER_ID = struct.pack(">HH", m.BasicDeliver.CLASS_ID, m.BasicDeliver.METHOD_ID)
_METHOD = int(FrameType.METHOD)
_HEADER = int(FrameType.HEADER)
_BODY = int(FrameType.BODY)
_BASIC = m.BasicDeliver.CLASS_ID
_DELIVER_METHOD = m.BasicDeliver.METHOD_ID
_pack_frame = FRAME_HEADER.pack
_pack_header = _CONTENT_HEADER.pack
_pack_q = _Q.pack
# a delivery's fixed parts, each packed in one call: the deliver method frame's head (frame
# header, class and method ids); its delivery tag and redelivered bit; the end of the method frame
# with the content header frame's head; the end of that frame with the body frame's head
_pack_deliver_head = struct.Struct(">BHIHH").pack
_pack_tag = struct.Struct(">Q?").pack
_pack_content_head = struct.Struct(">BBHIHHQ").pack
_pack_body_head = struct.Struct(">BBHI").pack
_SHORT = [bytes((n,)) for n in range(256)]  # a shortstr's length byte


def encode_frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return _pack_frame(frame_type, channel, len(payload)) + payload + _END


def encode_method_frame(channel: int, method: m.Method) -> bytes:
    payload = m.encode_method(method)
    return _pack_frame(_METHOD, channel, len(payload)) + payload + _END


def _body_frames(channel: int, body: bytes, frame_max: int, parts: list[bytes]) -> None:
    size = len(body)
    if not size:
        return
    chunk = frame_max - 8 if frame_max else size  # frame_max 0: no limit
    if size <= chunk:
        parts.append(_pack_frame(_BODY, channel, size))
        parts.append(body)
        parts.append(_END)
        return
    view = memoryview(body)
    for start in range(0, size, chunk):
        piece = view[start:start + chunk]
        parts.append(_pack_frame(_BODY, channel, len(piece)))
        parts.append(piece)  # type: ignore[arg-type]
        parts.append(_END)


def encode_content(channel: int, class_id: int, props_raw: bytes, body: bytes, frame_max: int) -> bytes:
    """Content header frame (with the raw property bytes) and body frames split at frame_max."""
    parts = [
        _pack_frame(_HEADER, channel, 12 + len(props_raw)),
        _pack_header(class_id, 0, len(body)),
        props_raw,
        _END,
    ]
    _body_frames(channel, body, frame_max, parts)
    return b"".join(parts)


def encode_deliver_py(channel: int, consumer_tag: str, delivery_tag: int, redelivered: bool, exchange: str,
                   routing_key: str, props_raw: bytes, body: bytes, frame_max: int) -> bytes:
    ct = consumer_tag.encode()
    ex = exchange.encode()
    rk = routing_key.encode()
    size = len(body)
    if size and size <= frame_max - 8:  # the common case: one body frame, one join
        return b"".join((
            _pack_deliver_head(_METHOD, channel, 16 + len(ct) + len(ex) + len(rk), _BASIC, _DELIVER_METHOD),
            _SHORT[len(ct)], ct, _pack_tag(delivery_tag, redelivered), _SHORT[len(ex)], ex, _SHORT[len(rk)], rk,
            _pack_content_head(FRAME_END, _HEADER, channel, 12 + len(props_raw), _BASIC, 0, size), props_raw,
            _pack_body_head(FRAME_END, _BODY, channel, size), body, _END,
        ))
    args = b"".join((
        _DELIVER_ID, bytes((len(ct),)), ct, _pack_q(delivery_tag), b"\x01" if redelivered else b"\x00",
        bytes((len(ex),)), ex, bytes((len(rk),)), rk,
    ))
    parts = [
        _pack_frame(_METHOD, channel, len(args)), args, _END,
        _pack_frame(_HEADER, channel, 12 + len(props_raw)), _pack_header(_BASIC, 0, size), props_raw, _END,
    ]
    _body_frames(channel, body, frame_max, parts)
    return b"".join(parts)


EncodeDeliver = Callable[[int, str, int, bool, str, str, bytes, bytes, int], bytes]
encode_deliver: EncodeDeliver = WIRE.encode_deliver if WIRE is not None else encode_deliver_py


def encode_delivers_py(channel: int, consumer_tag: str, first_tag: int, entries: Sequence[Any],
                       frame_max: int) -> bytes:
    """One consumer's turn: ``encode_deliver`` of each queue entry (its ``redelivered``, its
    message's exchange, routing key, property bytes and body), tagged ``first_tag`` on, joined."""
    return b"".join([encode_deliver(channel, consumer_tag, tag, entry.redelivered, entry.message.exchange,
                                    entry.message.routing_key, entry.message.props_raw, entry.message.body,
                                    frame_max)
                     for tag, entry in enumerate(entries, first_tag)])


EncodeDelivers = Callable[[int, str, int, Sequence[Any], int], bytes]
encode_delivers: EncodeDelivers = WIRE.encode_delivers if WIRE is not None else encode_delivers_py


def decode_publish(payload: bytes, offset: int = 4) -> m.BasicPublish:
    """basic.publish arguments (after class/method ids): ticket, exchange, routing key, bits."""
    n = payload[offset + 2]
    ex_end = offset + 3 + n
    exchange = payload[offset + 3:ex_end].decode()
    k = payload[ex_end]
    rk_end = ex_end + 1 + k
    routing_key = payload[ex_end + 1:rk_end].decode()
    if rk_end >= len(payload):
        raise IndexError("basic.publish truncated")
    bits = payload[rk_end]
    return m.BasicPublish(0, exchange, routing_key, bool(bits & 1), bool(bits & 2))


def decode_ack(payload: bytes) -> m.BasicAck:
    (tag,) = _Q.unpack_from(payload, 4)
    return m.BasicAck(tag, bool(payload[12] & 1))

