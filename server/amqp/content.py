"""A published message as its frames arrive: the basic.publish method, a content header frame,
then body frames until the announced size is reached.

``AMQPConnection`` owns one ``PendingContent`` per channel that is between a publish and its last
body frame; ``parse_header`` is the check every content header frame passes.
"""

from __future__ import annotations

import struct
from typing import Any

from . import methods as m
from .errors import ConnectionException
from .properties import FIXED_SIZES, check_properties
from .spec import ReplyCode
from .tables import FrameSyntaxError

__all__ = ["PendingContent", "parse_header"]

_CONTENT_HEADER = struct.Struct(">HHQ")  # class id, weight, body size
_BASIC = m.BasicPublish.CLASS_ID


class PendingContent:
    """A basic.publish waiting for its header and body frames."""

    __slots__ = ("method", "props_raw", "headers", "size", "parts", "received")

    def __init__(self, method: m.BasicPublish) -> None:
        self.method = method
        self.props_raw = b""
        self.headers: dict[str, Any] | None = None  # the headers table, parsed once by parse_header
        self.size = -1  # unknown until the header frame
        self.parts: list[bytes] = []
        self.received = 0


def parse_header(src: bytes, start: int = 0, end: int = -1) -> tuple[int, bytes, dict[str, Any] | None]:
    """(body size, property bytes, headers table or None) of a content header frame's payload,
    ``src[start:end]`` (the whole of ``src`` by default): read in place, so a publish read whole
    from a socket's bytes copies only its property bytes."""
    if end < 0:
        end = len(src)
    if end - start < 14:
        raise ConnectionException(ReplyCode.FRAME_ERROR, "FRAME_ERROR - content header too short")
    class_id, weight, size = _CONTENT_HEADER.unpack_from(src, start)
    # a header that is not basic's, or has a weight (which must be 0), is not the frame the publish
    # waits for: RabbitMQ's command assembler answers both as an unexpected frame
    if class_id != _BASIC or weight:
        got = f"one for class {class_id}" if class_id != _BASIC else "non content header frame"
        raise ConnectionException(ReplyCode.UNEXPECTED_FRAME, f"UNEXPECTED_FRAME - expected content header for "
                                  f"class {_BASIC}, got {got} instead", _BASIC, m.BasicPublish.METHOD_ID)
    props_raw = src[start + 12:end]
    if FIXED_SIZES.get(src[start + 12] << 8 | src[start + 13]) == len(props_raw):
        return size, props_raw, None  # the common case, and nothing to walk
    try:
        headers = check_properties(props_raw)
    except FrameSyntaxError as exc:
        # RabbitMQ fails to parse such a property list in the channel and closes the connection
        # with 541; consumers could not parse these bytes either, so they go no further.
        raise ConnectionException(ReplyCode.INTERNAL_ERROR,
                                  f"INTERNAL_ERROR - malformed content header properties: {exc}",
                                  _BASIC, m.BasicPublish.METHOD_ID) from None
    return size, props_raw, headers
