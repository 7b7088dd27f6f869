"""Turning a dead letter into the message republished to a dead-letter exchange, the rule that
ends a dead-letter cycle, and the ``x-delivery-count`` header of a message that came back to a
queue with a delivery limit.

RabbitMQ's rules: the routing key becomes the queue's ``x-dead-letter-routing-key`` when set; the
``x-death`` history is updated; a per-message ``expiration`` is removed so the message does not
expire again in the dead-letter queue. A dead letter is not delivered to a queue that would close
a cycle no client took part in (``completes_cycle``): without that, queues that dead-letter to
each other on TTL expiry pass their messages around for ever, each turn a publish, at full CPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from headrace.queues import Destination, Left, x_death_headers
from headrace.server.amqp.properties import decode_properties, encode_properties, replace_headers

__all__ = ["DeadLetter", "completes_cycle", "dead_letter_message", "with_counts", "with_delivery_count"]


@dataclass(slots=True)
class DeadLetter:
    """What is republished for a dead letter. ``deaths`` is its new ``x-death`` history (latest
    first) when the death was automatic, to check each target queue against (``completes_cycle``);
    None for a client's reject, which RabbitMQ lets go anywhere, its own queue included."""

    routing_key: str
    props_raw: bytes
    deaths: list[dict[str, Any]] | None


def dead_letter_message(letter: Left, queue: Destination, now: float) -> DeadLetter:
    """``letter``'s copy for the dead-letter exchange."""
    message = letter.entry.message
    assert letter.reason is not None, "only a dead letter (a message with a reason) is republished"
    props = decode_properties(message.props_raw)
    headers = x_death_headers(
        props.headers, queue=queue.name, reason=letter.reason, exchange=message.exchange,
        routing_keys=[message.routing_key], now=now, original_expiration=props.expiration,
    )
    props = dataclasses.replace(props, headers=headers, expiration=None)
    routing_key = queue.args.dead_letter_routing_key
    return DeadLetter(routing_key if routing_key is not None else message.routing_key, encode_properties(props),
                      None if letter.reason == "rejected" else headers["x-death"])


def completes_cycle(queue: str, deaths: Sequence[Any]) -> bool:
    """Whether a dead letter with this ``x-death`` history (latest first, the death just recorded
    included) would close a cycle by entering ``queue``: ``queue`` is in the history, and every
    death since the message last left it, that one included, was automatic (expired, maxlen,
    delivery_limit). RabbitMQ drops the message for that queue then (rabbit_dead_letter's
    ``is_cycle``): nothing would ever take it out of the cycle. A ``rejected`` death means a client
    took part and may decide otherwise next time, so that cycle goes on; an entry that is not a
    table was put there by a client, and counts as such."""
    for death in deaths:
        if not isinstance(death, Mapping) or death.get("reason") == "rejected":
            return False
        if death.get("queue") == queue:
            return True
    return False


def with_delivery_count(props_raw: bytes, count: int) -> bytes:
    """Queues with a delivery limit tell consumers how often a message was returned."""
    headers = dict(decode_properties(props_raw).headers or {})
    headers["x-delivery-count"] = count
    return replace_headers(props_raw, headers)


def with_counts(props_raw: bytes, delivery_count: int, acquired_count: int) -> bytes:
    """RabbitMQ 4.3's two headers of a quorum queue's redelivery: ``x-delivery-count`` the failed
    deliveries (what the delivery limit compares), ``x-acquired-count`` every one; each only once
    above 0."""
    headers = dict(decode_properties(props_raw).headers or {})
    if delivery_count:
        headers["x-delivery-count"] = delivery_count
    if acquired_count:
        headers["x-acquired-count"] = acquired_count
    return replace_headers(props_raw, headers)
