"""Stream filtering over AMQP 0-9-1, RabbitMQ 3.13's contract: a publisher's ``x-stream-filter-value``
header, a consumer's ``x-stream-filter`` (a value or a list) and ``x-stream-match-unfiltered``.

Owns no state: it reads a message's filter value (for the stream writer's per-chunk Bloom filters
and for the exact per-message check) and turns a consumer's arguments into the
``persistence.stream_filter.StreamFilter`` its cursor keeps. The chunk filter is probabilistic, so
the stream queue checks each record read as RabbitMQ's AMQP 0-9-1 path does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from headrace.persistence.stream_filter import StreamFilter
from headrace.server.amqp.properties import decode_properties
from headrace.server.amqp.tables import FrameSyntaxError

from . import errors

__all__ = ["FILTER_ARG", "MATCH_UNFILTERED_ARG", "VALUE_HEADER", "consumer_filter", "filter_value"]

VALUE_HEADER = "x-stream-filter-value"
FILTER_ARG = "x-stream-filter"
MATCH_UNFILTERED_ARG = "x-stream-match-unfiltered"
_VALUE_BYTES = VALUE_HEADER.encode()


def _text(value: object) -> bytes | None:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return None


# the size of a field-table value of each type after its type byte; None: a 4-byte length and that many
_FIXED = {ord(k): n for k, n in (("t", 1), ("b", 1), ("B", 1), ("s", 2), ("u", 2), ("U", 2), ("I", 4), ("i", 4),
                                 ("f", 4), ("l", 8), ("L", 8), ("d", 8), ("T", 8), ("D", 5), ("V", 0))}
_SIZED = frozenset(map(ord, "SxAF"))
_STRING = ord("S")


def filter_value(props: bytes) -> bytes | None:
    """The message's ``x-stream-filter-value`` (UTF-8 bytes); None when it has none, or not a
    string (such a message is unfiltered, as in RabbitMQ). This runs for every record a filtered
    consumer reads: a byte search first (most messages carry no such header), then a walk over
    the headers table's keys that skips the values by their sizes, no decoding (decoding the whole
    properties costs ~15 us a record); anything unusual goes to the full decoder."""
    if _VALUE_BYTES not in props:
        return None
    try:
        return _walk(props)
    except (IndexError, KeyError):
        return _decoded(props)


def _walk(props: bytes) -> bytes | None:
    flags = props[0] << 8 | props[1]
    pos, word = 2, flags
    while word & 1:
        word = props[pos] << 8 | props[pos + 1]
        pos += 2
    if not flags & (1 << 13):  # no headers
        return None
    for bit in (15, 14):  # content-type, content-encoding
        if flags & (1 << bit):
            pos += 1 + props[pos]
    end = pos + 4 + int.from_bytes(props[pos:pos + 4], "big")
    pos += 4
    while pos < end:
        n = props[pos]
        key = props[pos + 1:pos + 1 + n]
        kind = props[pos + 1 + n]
        pos += 2 + n
        if kind in _SIZED:
            size = 4 + int.from_bytes(props[pos:pos + 4], "big")
        else:
            size = _FIXED[kind]
        if key == _VALUE_BYTES:
            return props[pos + 4:pos + size] if kind == _STRING else None
        pos += size
    return None


def _decoded(props: bytes) -> bytes | None:
    try:
        headers = decode_properties(props).headers
    except FrameSyntaxError:
        return None
    value = headers.get(VALUE_HEADER) if headers else None
    return value.encode("utf-8") if isinstance(value, str) else None


def consumer_filter(arguments: Mapping[str, Any], where: str) -> StreamFilter | None:
    """The consumer's filter, None when it has no ``x-stream-filter``. ``x-stream-match-unfiltered``
    alone filters nothing (RabbitMQ ignores it then). A filter that is not a string or a list of
    strings, or a flag that is not a boolean, is refused (406): RabbitMQ silently ignores those,
    which leaves a consumer unknowingly unfiltered."""
    raw = arguments.get(FILTER_ARG)
    match = arguments.get(MATCH_UNFILTERED_ARG, False)
    if not isinstance(match, bool):
        raise errors.precondition_failed(f"invalid arg '{MATCH_UNFILTERED_ARG}': {match!r} is not a boolean "
                                         f"(stream {where})")
    if raw is None:
        return None
    items = list(raw) if isinstance(raw, (list, tuple)) else [raw]
    values = [_text(item) for item in items]
    if not values or any(v is None for v in values):
        raise errors.precondition_failed(f"invalid arg '{FILTER_ARG}': {raw!r} is not a string or a list of "
                                         f"strings (stream {where})")
    return StreamFilter(frozenset(v for v in values if v is not None), match)
