"""Replay's publishes encoded straight from Arrow columns: the wire frames of many basic.publish
messages (method, content header, body) in one ``bytes``, for ``ConfirmPublisher.send_encoded``.

Why: a replay of millions of messages cannot afford an object, a dict of headers and a struct
call per frame for each one. The parts that repeat are encoded once: the method frame per routing
key, the split of an original property list around its headers table per distinct property list
(most logs repeat a handful), the header entries' names. What is left per message is the key
``<exchange>:<offset>`` and a few concatenations.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["FrameEncoder"]

_U32 = struct.Struct(">I")
_HEADER_PREFIX = struct.Struct(">BHIHHQ")  # frame type, channel, size; class, weight, body size
_FRAME = struct.Struct(">BHI")
FRAME_END = b"\xce"
# property flag bits of basic's content header (``split_properties`` serves amqp_publisher.with_headers too)
_CONTENT_TYPE, _CONTENT_ENCODING, _HEADERS = 0x8000, 0x4000, 0x2000


def _shortstr(raw: bytes) -> bytes:
    if len(raw) > 255:
        raise ValueError(f"AMQP short string over 255 bytes: {raw[:40]!r}...")
    return bytes((len(raw),)) + raw


def split_properties(props_raw: bytes) -> tuple[bytes, bytes, bytes]:
    """An encoded property list as (before the headers table's length, the table's entries, after
    it), with the headers flag set: entries appended to the middle part stay a valid list."""
    if len(props_raw) < 2:
        return struct.pack(">H", _HEADERS), b"", b""
    flags = (props_raw[0] << 8) | props_raw[1]
    pos = 2
    for bit in (_CONTENT_TYPE, _CONTENT_ENCODING):
        if flags & bit:
            pos += 1 + props_raw[pos]
    if flags & _HEADERS:
        (size,) = _U32.unpack_from(props_raw, pos)
        return props_raw[:pos], props_raw[pos + 4:pos + 4 + size], props_raw[pos + 4 + size:]
    return struct.pack(">H", flags | _HEADERS) + props_raw[2:pos], b"", props_raw[pos:]


@dataclass(slots=True)
class FrameEncoder:
    """Encodes the publishes of one replay partition to ``exchange`` on channel 1; each message
    gets the string headers named ``header_names``, all set to ``<source>:<offset>``."""
    exchange: str
    source: str
    header_names: Sequence[str]
    frame_max: int = 131072
    _methods: dict[str, bytes] = field(default_factory=dict)
    _props: dict[bytes, tuple[bytes, bytes, bytes]] = field(default_factory=dict)

    def _method(self, routing_key: str) -> bytes:
        frame = self._methods.get(routing_key)
        if frame is None:
            payload = b"\x00\x3c\x00\x28\x00\x00" + _shortstr(self.exchange.encode()) \
                + _shortstr(routing_key.encode()) + b"\x00"
            frame = self._methods[routing_key] = _FRAME.pack(1, 1, len(payload)) + payload + FRAME_END
        return frame

    def encode(self, offsets: Sequence[int], routing_keys: Sequence[str], properties: Sequence[bytes | None],
               bodies: Sequence[bytes | None], keys: Sequence[bytes] | None = None) -> bytes:
        """The frames of one publish per row, in row order; ``keys``: the headers' values per row
        instead of ``<source>:<offset>`` (the streaming sink's own keys)."""
        names = [_shortstr(n.encode()) + b"S" for n in dict.fromkeys(self.header_names)]
        prefix = self.source.encode() + b":"
        methods, props_cache = self._methods, self._props
        pack_u32, pack_header = _U32.pack, _HEADER_PREFIX.pack
        body_max = self.frame_max - 8
        out: list[bytes] = []
        append = out.append
        if keys is None:
            keys = [prefix + b"%d" % offset for offset in offsets]
        for key, rk, props_raw, body in zip(keys, routing_keys, properties, bodies):
            method = methods.get(rk) or self._method(rk)
            props_raw = props_raw or b""
            parts = props_cache.get(props_raw)
            if parts is None:
                parts = props_cache[props_raw] = split_properties(props_raw)
            before, entries, after = parts
            value = pack_u32(len(key)) + key
            table = entries + b"".join(name + value for name in names)
            props = before + pack_u32(len(table)) + table + after
            body = body or b""
            size = len(body)
            append(method)
            append(pack_header(2, 1, len(props) + 12, 60, 0, size))
            append(props)
            if 0 < size <= body_max:
                append(b"\xce\x03\x00\x01" + pack_u32(size))
                append(body)
                append(FRAME_END)
            elif size == 0:  # no body frame, as a client sends an empty body
                append(FRAME_END)
            else:
                append(FRAME_END)
                for start in range(0, size, body_max):
                    chunk = body[start:start + body_max]
                    append(_FRAME.pack(3, 1, len(chunk)) + chunk + FRAME_END)
        return b"".join(out)
