"""Turning a dead letter into the message republished to a dead-letter exchange, and the
``x-delivery-count`` header of a message that came back to a queue with a delivery limit.

RabbitMQ's rules: the routing key becomes the queue's ``x-dead-letter-routing-key`` when set; the
``x-death`` history is updated; a per-message ``expiration`` is removed so the message does not
expire again in the dead-letter queue.
"""

from __future__ import annotations

import dataclasses

from headrace.queues import Left, Queue, x_death_headers
from headrace.server.amqp.properties import decode_properties, encode_properties, replace_headers

__all__ = ["dead_letter_message", "with_delivery_count"]


def dead_letter_message(letter: Left, queue: Queue, now: float) -> tuple[str, bytes]:
    """The routing key and properties of ``letter``'s copy for the dead-letter exchange."""
    message = letter.entry.message
    assert letter.reason is not None, "only a dead letter (a message with a reason) is republished"
    props = decode_properties(message.props_raw)
    headers = x_death_headers(
        props.headers, queue=queue.name, reason=letter.reason, exchange=message.exchange,
        routing_keys=[message.routing_key], now=now, original_expiration=props.expiration,
    )
    props = dataclasses.replace(props, headers=headers, expiration=None)
    routing_key = queue.args.dead_letter_routing_key
    return (routing_key if routing_key is not None else message.routing_key), encode_properties(props)


def with_delivery_count(props_raw: bytes, count: int) -> bytes:
    """Queues with a delivery limit tell consumers how often a message was returned."""
    headers = dict(decode_properties(props_raw).headers or {})
    headers["x-delivery-count"] = count
    return replace_headers(props_raw, headers)
