"""What a publish is checked and read for before ``Delivery`` places it (delivery.py): the
exchange it names, its ``expiration``, the properties an exchange routes on, and whether a queue
took it (for the dedup window). Pure functions of their arguments; no state of their own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from headrace.exchanges import Exchange
from headrace.queues import Destination
from headrace.server.amqp.properties import decode_properties

from . import errors
from .dead_letters import completes_cycle
from .vhost_view import VHostView


def publish_exchange(vhost: VHostView, name: str, check_internal: bool) -> Exchange:
    """The exchange a publish names: 404 when there is none, 403 for an internal one (unless a
    dead letter or a delayed message is republished through it)."""
    exchange = vhost.exchanges.get(name)
    if exchange is None:
        raise errors.not_found("exchange", name, vhost.name)
    if check_internal and exchange.internal:
        raise errors.access_refused(f"cannot publish to internal exchange '{name}' in vhost '{vhost.name}'")
    return exchange


def parse_expiration(expiration: str) -> int:
    """The ``expiration`` property as milliseconds; ValueError for anything but a non-negative
    integer (the one rule, for AMQP's 406 here and the HTTP publish's 400)."""
    expiration_ms = int(expiration)
    if expiration_ms < 0:
        raise ValueError(f"negative expiration {expiration_ms}")
    return expiration_ms


def checked_expiration_ms(expiration: str) -> int:
    """``parse_expiration``, with a 406 for what it refuses."""
    try:
        return parse_expiration(expiration)
    except ValueError:
        raise errors.precondition_failed(f"invalid expiration '{expiration}'") from None


def took(name: str, accepted: list[Destination], logged: list[Destination], queues: Mapping[str, Destination],
          cycle_guard: Sequence[Any] | None) -> bool:
    """Whether queue ``name`` took the message just published (a log always does, unless it
    was skipped as the end of a dead-letter cycle)."""
    queue = queues.get(name)
    if queue is None or (cycle_guard is not None and completes_cycle(name, cycle_guard)):
        return False
    return queue in accepted or queue in logged


def routing_properties(props_raw: bytes) -> dict[str, Any]:
    """The properties an exchange may route on (``exchanges.HASH_PROPERTIES``), decoded only for
    the exchanges that ask (``Exchange.wants_properties``)."""
    props = decode_properties(props_raw)
    return {"correlation_id": props.correlation_id, "message_id": props.message_id, "timestamp": props.timestamp}
