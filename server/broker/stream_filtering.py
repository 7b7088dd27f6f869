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


def filter_value(props: bytes) -> bytes | None:
    """The message's ``x-stream-filter-value`` (UTF-8 bytes); None when it has none, or not a
    string (such a message is unfiltered, as in RabbitMQ). A byte search first: most messages
    carry no header of that name and are not decoded at all."""
    if _VALUE_BYTES not in props:
        return None
    try:
        headers = decode_properties(props).headers
    except FrameSyntaxError:
        return None
    return _text(headers.get(VALUE_HEADER)) if headers else None


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
