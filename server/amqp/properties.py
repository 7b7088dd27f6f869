"""Basic-class content properties.

The broker keeps the publisher's property bytes (``props_raw``: the 16-bit flag word(s) then the
property list) and hands them to consumers untouched. It only looks inside when it must:
``quick_props`` reads delivery mode, priority and expiration without building anything (in C,
``_wire.c``, when it was built: ``compiled.py``; ``quick_props_py`` otherwise), full
``decode_properties`` runs when there are headers to route on, and ``replace_headers`` re-encodes
when the broker itself changes headers (BCC removal, x-death, x-delivery-count).
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from .compiled import WIRE
from .tables import FrameSyntaxError, decode_table, encode_table

__all__ = [
    "FIXED_SIZES",
    "BasicProperties",
    "check_properties",
    "decode_properties",
    "encode_properties",
    "quick_props",
    "quick_props_py",
    "replace_headers",
]

_H = struct.Struct(">H")
_Q = struct.Struct(">Q")

# (field, type, flag bit) in wire order
_FIELDS: tuple[tuple[str, str, int], ...] = (
    ("content_type", "shortstr", 15),
    ("content_encoding", "shortstr", 14),
    ("headers", "table", 13),
    ("delivery_mode", "octet", 12),
    ("priority", "octet", 11),
    ("correlation_id", "shortstr", 10),
    ("reply_to", "shortstr", 9),
    ("expiration", "shortstr", 8),
    ("message_id", "shortstr", 7),
    ("timestamp", "timestamp", 6),
    ("type", "shortstr", 5),
    ("user_id", "shortstr", 4),
    ("app_id", "shortstr", 3),
    ("cluster_id", "shortstr", 2),
)
# what ``check_properties`` skips per flag, in wire order: a fixed size, or _SHORTSTR / _TABLE
_SHORTSTR = -1
_TABLE = -2
_SKIPS: tuple[tuple[int, int, int], ...] = tuple(
    (1 << bit, {"shortstr": _SHORTSTR, "table": _TABLE, "octet": 1, "timestamp": 8}[kind], (1 << bit) - 2)
    for _, kind, bit in _FIELDS
)  # (flag, skip, mask of the flags after this one)
# property lists of fixed size: flags with only delivery mode, priority and timestamp -> length
FIXED_SIZES = {
    dm | pri | ts: 2 + (dm and 1) + (pri and 1) + (ts and 8)
    for dm in (0, 1 << 12) for pri in (0, 1 << 11) for ts in (0, 1 << 6)
}
_HEADERS = 1 << 13
_DELIVERY_MODE = 1 << 12
_PRIORITY = 1 << 11


@dataclass(frozen=True, slots=True)
class BasicProperties:
    content_type: str | None = None
    content_encoding: str | None = None
    headers: dict[str, Any] | None = None
    delivery_mode: int | None = None
    priority: int | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    expiration: str | None = None
    message_id: str | None = None
    timestamp: int | None = None
    type: str | None = None
    user_id: str | None = None
    app_id: str | None = None
    cluster_id: str | None = None


def _flags(raw: bytes) -> tuple[int, int]:
    """First flag word and the offset of the property list (extra flag words are skipped: no
    property is defined in them)."""
    if len(raw) < 2:
        return 0, len(raw)
    flags = (raw[0] << 8) | raw[1]
    offset = 2
    word = flags
    while word & 1:
        if offset + 2 > len(raw):
            raise FrameSyntaxError("truncated property flags")
        word = (raw[offset] << 8) | raw[offset + 1]
        offset += 2
    return flags, offset


def check_properties(raw: bytes) -> dict[str, Any] | None:
    """Raise ``FrameSyntaxError`` unless ``raw`` is exactly one property list: the flag word(s),
    a next word wherever the continuation bit says so, the values the flags announce and nothing
    after them. Runs once per published message, so it only skips over values. The headers table
    is parsed, since later readers of it must not fail, and returned (None without one): routing
    and deduplication use it instead of parsing it a second time."""
    headers = None
    end = len(raw)
    if end < 2:
        raise FrameSyntaxError("no property flags")
    flags = (raw[0] << 8) | raw[1]
    size = FIXED_SIZES.get(flags)
    if size is not None:  # the common case: no property but delivery mode, priority or timestamp
        if end != size:
            raise FrameSyntaxError("content properties longer or shorter than their flags announce")
        return None
    if flags & 1:
        flags, offset = _flags(raw)
    else:
        offset = 2
    if flags & 0xFFFE:
        try:
            for flag, skip, rest in _SKIPS:
                if flags & flag:
                    if skip > 0:
                        offset += skip
                    elif skip == _SHORTSTR:
                        offset += 1 + raw[offset]
                    else:
                        headers, offset = decode_table(raw, offset)
                    if not flags & rest:
                        break
        except IndexError:
            raise FrameSyntaxError("truncated content properties") from None
    if offset != end:
        raise FrameSyntaxError("content properties longer or shorter than their flags announce")
    return headers


def decode_properties(raw: bytes) -> BasicProperties:
    if not raw:
        return BasicProperties()
    flags, offset = _flags(raw)
    values: dict[str, Any] = {}
    try:
        for name, kind, bit in _FIELDS:
            if not flags & (1 << bit):
                continue
            if kind == "shortstr":
                n = raw[offset]
                end = offset + 1 + n
                if end > len(raw):
                    raise FrameSyntaxError("property string past the end")
                values[name] = raw[offset + 1:end].decode("utf-8", "replace")
                offset = end
            elif kind == "octet":
                values[name] = raw[offset]
                offset += 1
            elif kind == "table":
                values[name], offset = decode_table(raw, offset)
            else:
                values[name] = _Q.unpack_from(raw, offset)[0]
                offset += 8
    except (IndexError, struct.error):
        raise FrameSyntaxError("truncated content properties") from None
    return BasicProperties(**values)


def encode_properties(props: BasicProperties) -> bytes:
    flags = 0
    parts: list[bytes] = []
    for name, kind, bit in _FIELDS:
        value = getattr(props, name)
        if value is None:
            continue
        flags |= 1 << bit
        if kind == "shortstr":
            raw = value.encode() if isinstance(value, str) else bytes(value)
            parts.append(bytes((min(len(raw), 255),)) + raw[:255])
        elif kind == "octet":
            parts.append(bytes((value & 0xFF,)))
        elif kind == "table":
            parts.append(encode_table(value))
        else:
            parts.append(_Q.pack(int(value)))
    return _H.pack(flags) + b"".join(parts)


def quick_props_py(raw: bytes) -> tuple[int | None, int | None, str | None, bool]:
    """(delivery_mode, priority, expiration, has_headers) read straight from the bytes."""
    if len(raw) < 2:
        return None, None, None, False
    flags = (raw[0] << 8) | raw[1]
    if not flags & 0xFFFE:
        return None, None, None, False
    if flags & 1:
        flags, offset = _flags(raw)
    else:
        offset = 2
    try:
        if flags & 0x8000:
            offset += 1 + raw[offset]
        if flags & 0x4000:
            offset += 1 + raw[offset]
        has_headers = bool(flags & _HEADERS)
        if has_headers:
            offset += 4 + ((raw[offset] << 24) | (raw[offset + 1] << 16) | (raw[offset + 2] << 8) | raw[offset + 3])
        delivery_mode = priority = None
        if flags & _DELIVERY_MODE:
            delivery_mode = raw[offset]
            offset += 1
        if flags & _PRIORITY:
            priority = raw[offset]
            offset += 1
        expiration = None
        if flags & 0x0100:
            if flags & 0x0400:
                offset += 1 + raw[offset]
            if flags & 0x0200:
                offset += 1 + raw[offset]
            n = raw[offset]
            expiration = raw[offset + 1:offset + 1 + n].decode("utf-8", "replace")
    except IndexError:
        raise FrameSyntaxError("truncated content properties") from None
    return delivery_mode, priority, expiration, has_headers


QuickProps = Callable[[bytes], tuple[int | None, int | None, str | None, bool]]
quick_props: QuickProps = quick_props_py
if WIRE is not None:
    WIRE.setup_props(FrameSyntaxError, quick_props_py)
    quick_props = WIRE.quick_props


def replace_headers(raw: bytes, headers: dict[str, Any] | None) -> bytes:
    return encode_properties(dataclasses.replace(decode_properties(raw), headers=headers or None))


def with_int_header(raw: bytes, name: bytes, value: int) -> bytes:
    """``raw`` with the signed 64-bit header ``name`` added, spliced into the bytes (no decode and
    re-encode: stream queues stamp every delivery's offset this way). A header of that name
    already there is replaced through the full decode."""
    if len(raw) < 2:
        raw = b"\x00\x00"
    flags = (raw[0] << 8) | raw[1]
    field = bytes((len(name),)) + name + b"l" + value.to_bytes(8, "big", signed=True)
    if flags & 1 or len(name) > 255:
        return _replace_int_header(raw, name, value)  # a second flag word: not worth a fast path
    pos = 2
    try:
        if flags & 0x8000:
            pos += 1 + raw[pos]
        if flags & 0x4000:
            pos += 1 + raw[pos]
        if not flags & _HEADERS:
            flags |= _HEADERS
            return bytes((flags >> 8, flags & 0xFF)) + raw[2:pos] + len(field).to_bytes(4, "big") + field + raw[pos:]
        size = int.from_bytes(raw[pos:pos + 4], "big")
        table = raw[pos + 4:pos + 4 + size]
    except IndexError:
        return _replace_int_header(raw, name, value)
    if name in table:
        return _replace_int_header(raw, name, value)
    return raw[:pos] + (size + len(field)).to_bytes(4, "big") + table + field + raw[pos + 4 + size:]


def _replace_int_header(raw: bytes, name: bytes, value: int) -> bytes:
    headers = dict(decode_properties(raw).headers or {})
    headers[name.decode()] = value
    return replace_headers(raw, headers)
