"""Queue types (``x-queue-type``): which declarations and arguments each accepts, with RabbitMQ
3.10's codes and texts, so clients written for RabbitMQ stream and quorum queues get the answers
they expect. ``classic`` is the default; ``quorum`` is a classic queue held to quorum rules (one
node, not replicated); ``stream`` is an append-only log (``stream_queue.StreamQueue``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from . import errors

__all__ = ["QUEUE_TYPES", "check_declare", "parse_interval_ms", "queue_type_of"]

QUEUE_TYPES = ("classic", "quorum", "stream")
# RabbitMQ's declare-time arguments (rabbit_amqqueue:declare_args) each type does not support
_ALL_CHECKED = (
    "x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-max-length",
    "x-max-length-bytes", "x-max-priority", "x-overflow", "x-queue-mode", "x-single-active-consumer",
    "x-delivery-limit", "x-max-age", "x-stream-max-segment-size-bytes", "x-max-in-memory-length",
    "x-max-in-memory-bytes", "x-quorum-initial-group-size", "x-initial-cluster-size",
)
_SUPPORTED = {
    "stream": frozenset({"x-max-length-bytes", "x-max-age", "x-stream-max-segment-size-bytes",
                         "x-initial-cluster-size"}),
    "quorum": frozenset({"x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
                         "x-max-length", "x-max-length-bytes", "x-overflow", "x-single-active-consumer",
                         "x-delivery-limit", "x-max-in-memory-length", "x-max-in-memory-bytes",
                         "x-quorum-initial-group-size"}),
}
_MODULE = {"stream": "rabbit_stream_queue", "quorum": "rabbit_quorum_queue"}
MAX_SEGMENT_SIZE = 3_000_000_000  # RabbitMQ's ?MAX_STREAM_MAX_SEGMENT_SIZE
_INTERVAL = re.compile(r"^([0-9]+)([YMDhms])$")
_UNIT_MS = {"Y": 365 * 86_400_000, "M": 30 * 86_400_000, "D": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000}


def queue_type_of(arguments: Mapping[str, Any] | None, queue: str, vhost: str) -> str:
    value = (arguments or {}).get("x-queue-type", "classic")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if value not in QUEUE_TYPES:
        raise errors.precondition_failed(
            f"invalid arg 'x-queue-type' for queue '{queue}' in vhost '{vhost}': \"{value}\" is not one of "
            "classic, quorum, stream")
    return str(value)


def parse_interval_ms(value: object) -> int | None:
    """RabbitMQ's max-age form: a positive integer and one unit of Y M D h m s (``7D``, ``12h``)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    match = _INTERVAL.match(value)
    if match is None:
        return None
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def check_declare(kind: str, name: str, vhost: str, *, durable: bool, exclusive: bool, auto_delete: bool,
                  arguments: Mapping[str, Any]) -> None:
    """406 for what a quorum or stream queue cannot be, in RabbitMQ's order of checks."""
    if kind == "classic":
        return
    rs = f"queue '{name}' in vhost '{vhost}'"
    if auto_delete:
        raise errors.precondition_failed(f"invalid property 'auto-delete' for {rs}")
    if exclusive:
        raise errors.precondition_failed(f"invalid property 'exclusive-owner' for {rs}")
    if not durable:
        raise errors.precondition_failed(f"invalid property 'non-durable' for {rs}")
    supported = _SUPPORTED[kind]
    for key in _ALL_CHECKED:
        if key in arguments and key not in supported:
            raise errors.precondition_failed(f"invalid arg '{key}' for {rs} of queue type {_MODULE[kind]}")
    if kind != "stream":
        return
    if "x-max-age" in arguments and parse_interval_ms(arguments["x-max-age"]) is None:
        raise errors.precondition_failed(f"invalid arg 'x-max-age' for {rs}: {arguments['x-max-age']!r} "
                                         "(expected a positive integer with a unit of Y, M, D, h, m or s)")
    for key in ("x-max-length-bytes", "x-stream-max-segment-size-bytes"):
        value = arguments.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise errors.precondition_failed(f"invalid arg '{key}' for {rs}: {value!r} is not a positive integer")
    if arguments.get("x-stream-max-segment-size-bytes", 0) > MAX_SEGMENT_SIZE:
        raise errors.precondition_failed("Exceeded max value for x-stream-max-segment-size-bytes")
