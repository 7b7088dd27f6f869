"""AMQP field tables and arrays with RabbitMQ's type letters (the 0-9-1 errata), both ways.

Decoding returns plain Python values: ``S`` long strings become ``str`` when they are UTF-8 (else
``bytes``), ``x`` byte arrays stay ``bytes``, ``T`` timestamps become ``datetime`` in UTC, ``D``
decimals ``Decimal``. Encoding picks the narrowest of RabbitMQ's integer types that pika and
RabbitMQ both read (``I`` then ``l``). Malformed input raises ``FrameSyntaxError``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

__all__ = ["FrameSyntaxError", "decode_table", "encode_table", "decode_value", "encode_value"]

_B = struct.Struct(">B")
_b = struct.Struct(">b")
_H = struct.Struct(">H")
_h = struct.Struct(">h")
_I = struct.Struct(">I")
_i = struct.Struct(">i")
_Q = struct.Struct(">Q")
_q = struct.Struct(">q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")
# Nested tables/arrays deeper than this are refused: a hostile header cannot exhaust the stack.
MAX_DEPTH = 64


class FrameSyntaxError(ValueError):
    """The bytes do not form a valid field table / value."""


def encode_table(table: Mapping[str, Any] | None) -> bytes:
    if not table:
        return b"\x00\x00\x00\x00"
    parts: list[bytes] = []
    for key, value in table.items():
        k = str(key).encode()
        if len(k) > 255:
            raise ValueError(f"table key too long: {key!r}")
        parts.append(bytes((len(k),)))
        parts.append(k)
        parts.append(encode_value(value))
    payload = b"".join(parts)
    return _I.pack(len(payload)) + payload


def encode_value(value: Any) -> bytes:
    if value is None:
        return b"V"
    if isinstance(value, bool):
        return b"t\x01" if value else b"t\x00"
    if isinstance(value, int):
        if -(1 << 31) <= value < (1 << 31):
            return b"I" + _i.pack(value)
        if -(1 << 63) <= value < (1 << 63):
            return b"l" + _q.pack(value)
        raise ValueError(f"integer out of range for a field table: {value}")
    if isinstance(value, str):
        raw = value.encode()
        return b"S" + _I.pack(len(raw)) + raw
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        return b"x" + _I.pack(len(raw)) + raw
    if isinstance(value, float):
        return b"d" + _d.pack(value)
    if isinstance(value, Decimal):
        sign, digits, exponent = value.as_tuple()
        if not isinstance(exponent, int):
            raise ValueError(f"cannot encode decimal {value}")
        scale = max(0, -exponent)
        unscaled = int(value.scaleb(scale))
        return b"D" + _B.pack(scale) + _i.pack(unscaled)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return b"T" + _Q.pack(int(value.timestamp()))
    if isinstance(value, Mapping):
        return b"F" + encode_table(value)
    if isinstance(value, (list, tuple)):
        payload = b"".join(encode_value(v) for v in value)
        return b"A" + _I.pack(len(payload)) + payload
    raise ValueError(f"cannot encode {type(value).__name__} in a field table")


def decode_table(buf: bytes | memoryview, offset: int, depth: int = 0) -> tuple[dict[str, Any], int]:
    try:
        (length,) = _I.unpack_from(buf, offset)
    except struct.error:
        raise FrameSyntaxError("truncated table length") from None
    offset += 4
    end = offset + length
    if end > len(buf):
        raise FrameSyntaxError("table longer than its frame")
    table: dict[str, Any] = {}
    while offset < end:
        klen = buf[offset]
        offset += 1
        key_raw = bytes(buf[offset:offset + klen])
        offset += klen
        try:
            key = key_raw.decode()
        except UnicodeDecodeError:
            raise FrameSyntaxError("table key is not UTF-8") from None
        value, offset = decode_value(buf, offset, depth)
        table[key] = value
    if offset != end:
        raise FrameSyntaxError("table content overruns its length")
    return table, offset


def _decode_array(buf: bytes | memoryview, offset: int, depth: int) -> tuple[list[Any], int]:
    (length,) = _I.unpack_from(buf, offset)
    offset += 4
    end = offset + length
    if end > len(buf):
        raise FrameSyntaxError("array longer than its frame")
    items = []
    while offset < end:
        value, offset = decode_value(buf, offset, depth)
        items.append(value)
    if offset != end:
        raise FrameSyntaxError("array content overruns its length")
    return items, offset


def decode_value(buf: bytes | memoryview, offset: int, depth: int = 0) -> tuple[Any, int]:
    if depth > MAX_DEPTH:
        raise FrameSyntaxError("field table nested too deeply")
    try:
        kind = buf[offset]
        offset += 1
        if kind == 0x53:  # S
            (n,) = _I.unpack_from(buf, offset)
            offset += 4
            if offset + n > len(buf):
                raise FrameSyntaxError("long string longer than its frame")
            raw = bytes(buf[offset:offset + n])
            try:
                return raw.decode(), offset + n
            except UnicodeDecodeError:
                return raw, offset + n
        if kind == 0x49:  # I
            return _i.unpack_from(buf, offset)[0], offset + 4
        if kind == 0x74:  # t
            return buf[offset] != 0, offset + 1
        if kind == 0x46:  # F
            return decode_table(buf, offset, depth + 1)
        if kind == 0x41:  # A
            return _decode_array(buf, offset, depth + 1)
        if kind == 0x6C:  # l
            return _q.unpack_from(buf, offset)[0], offset + 8
        if kind == 0x54:  # T
            (ts,) = _Q.unpack_from(buf, offset)
            try:
                return datetime.fromtimestamp(ts, timezone.utc), offset + 8
            except (OverflowError, OSError, ValueError):
                return ts, offset + 8
        if kind == 0x56:  # V
            return None, offset
        if kind == 0x78:  # x
            (n,) = _I.unpack_from(buf, offset)
            offset += 4
            if offset + n > len(buf):
                raise FrameSyntaxError("byte array longer than its frame")
            return bytes(buf[offset:offset + n]), offset + n
        if kind == 0x62:  # b
            return _b.unpack_from(buf, offset)[0], offset + 1
        if kind == 0x42:  # B
            return buf[offset], offset + 1
        if kind == 0x73:  # s
            return _h.unpack_from(buf, offset)[0], offset + 2
        if kind == 0x75:  # u
            return _H.unpack_from(buf, offset)[0], offset + 2
        if kind == 0x69:  # i
            return _I.unpack_from(buf, offset)[0], offset + 4
        if kind == 0x4C:  # L (unsigned 64, some clients)
            return _Q.unpack_from(buf, offset)[0], offset + 8
        if kind == 0x66:  # f
            return _f.unpack_from(buf, offset)[0], offset + 4
        if kind == 0x64:  # d
            return _d.unpack_from(buf, offset)[0], offset + 8
        if kind == 0x44:  # D
            scale = buf[offset]
            (unscaled,) = _i.unpack_from(buf, offset + 1)
            return Decimal(unscaled).scaleb(-scale), offset + 5
    except (struct.error, IndexError):
        raise FrameSyntaxError("truncated field value") from None
    raise FrameSyntaxError(f"unknown field type {chr(kind)!r}")
