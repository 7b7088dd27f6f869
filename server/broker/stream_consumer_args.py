"""What a stream consumer's ``basic.consume`` arguments say, checked as RabbitMQ checks them.

Owns no state: the stream queue (``stream_queue.StreamQueue.prepare_consumer``) asks these
functions before it keeps anything, so a refused consumer leaves no trace. The name whose acked
offset the broker keeps (``x-stream-consumer-name``, or LavinMQ's automatic tracking under the
consumer tag), single active consumer and a super stream member's partition, and where the
consumer starts (``x-stream-offset``: first, last, next, an offset, a timestamp or an interval).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from headrace.server.amqp.names import InvalidName, check_name

from . import errors
from .queue_types import parse_interval_ms

__all__ = ["AUTO_TRACK_ARG", "NAME_ARG", "SAC_ARG", "SUPER_ARG", "Start", "consumer_name", "partition_index",
           "single_active", "start_offset"]

# the consumer argument naming a consumer whose acked offset the broker keeps; LavinMQ's
# convention (x-stream-automatic-offset-tracking: true, the consumer tag as the name) works too
NAME_ARG = "x-stream-consumer-name"
AUTO_TRACK_ARG = "x-stream-automatic-offset-tracking"
SAC_ARG = "x-single-active-consumer"
SUPER_ARG = "x-super-stream"  # a group member's super stream: its partition index is the name's suffix


@dataclass(frozen=True, slots=True)
class Start:
    """Where a consumer starts: ``offset``, and for a start by time, the time (ms) its records must
    reach (``from_ms``): the offset may be an index entry before it, where finding the exact record
    would mean reading a tiered segment on the event loop."""

    offset: int
    from_ms: int | None = None


def consumer_name(arguments: Mapping[str, Any], tag: str) -> str | None:
    """The name the consumer's acked offset is kept under, if any."""
    name = arguments.get(NAME_ARG)
    if isinstance(name, (str, bytes)):
        # the names rule: read with U+FFFD, two names differing in their bytes would share an offset
        try:
            name = check_name("consumer name", name)
        except InvalidName as exc:
            raise errors.precondition_failed(f"invalid arg '{NAME_ARG}': {exc}") from None
    if name is None and arguments.get(AUTO_TRACK_ARG) is True:
        name = tag
    if name is not None and not isinstance(name, str):
        raise errors.precondition_failed(f"invalid arg '{NAME_ARG}': {name!r} is not a string")
    return name


def single_active(arguments: Mapping[str, Any], name: str | None, where: str) -> bool:
    """Whether the consumer asks to be a member of single-active group ``name``."""
    sac = arguments.get(SAC_ARG, False)
    if not isinstance(sac, bool):
        raise errors.precondition_failed(f"invalid arg '{SAC_ARG}': {sac!r} is not a boolean")
    if sac and name is None:
        raise errors.precondition_failed(f"single active consumer on stream {where} needs a consumer "
                                         f"name ('{NAME_ARG}')")
    return sac


def partition_index(arguments: Mapping[str, Any], stream: str, where: str) -> int:
    """A super stream member's partition: ``stream`` is ``NAME-<i>`` of super stream ``NAME``."""
    super_stream = arguments.get(SUPER_ARG)
    if super_stream is None:
        return 0
    if isinstance(super_stream, bytes):
        super_stream = super_stream.decode("utf-8", "replace")
    suffix = stream[len(super_stream) + 1:] if isinstance(super_stream, str) else ""
    if not stream.startswith(f"{super_stream}-") or not suffix.isdigit():
        raise errors.precondition_failed(f"invalid arg '{SUPER_ARG}': stream {where} is not a partition "
                                         f"of super stream {super_stream!r} (NAME-<n>)")
    return int(suffix)


def start_offset(spec: object, now: float, first: int, end: int, at_time: Callable[[int], int]) -> Start:
    """Where ``x-stream-offset: spec`` starts in a log holding ``first``..``end``; ``at_time`` finds
    a time's offset (at an index entry at or before it)."""
    if isinstance(spec, bytes):
        spec = spec.decode("utf-8", "replace")
    if spec == "first":
        return Start(first)
    if spec == "last":
        return Start(max(end - 1, first))
    if spec == "next":
        return Start(end)
    if isinstance(spec, datetime):
        return _at(at_time, int(spec.timestamp() * 1000), end)
    if isinstance(spec, int) and not isinstance(spec, bool):
        return Start(max(spec, 0))
    interval = parse_interval_ms(spec)
    if interval is not None:
        return _at(at_time, int(now * 1000) - interval, end)
    raise errors.precondition_failed(f"invalid arg 'x-stream-offset': {spec!r} (expected first, last, "
                                     "next, an offset, a timestamp or an interval such as 1h)")


def _at(at_time: Callable[[int], int], ms: int, end: int) -> Start:
    """A time past every record starts at the end, as ``next`` does: what comes later is delivered
    whatever its stamp (a clock behind the consumer's); within the log, records before it are not."""
    offset = at_time(ms)
    return Start(offset, ms if offset < end else None)
