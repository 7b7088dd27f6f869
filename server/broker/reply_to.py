"""Direct reply-to: the pseudo-queue ``amq.rabbitmq.reply-to``, as RabbitMQ implements it.

An RPC client consumes from ``amq.rabbitmq.reply-to`` (no-ack, nothing declared) and publishes its
requests with ``reply_to: amq.rabbitmq.reply-to`` on that same channel; the broker rewrites that
``reply_to`` to ``amq.rabbitmq.reply-to.<token>``. A reply published to the default exchange with
that routing key goes straight to the consumer: no queue, no store, no ack. A reply whose consumer
is gone is dropped. A reply reaches no queue either way, so a mandatory one is also returned
(``basic.return`` 312 NO_ROUTE) when it was delivered, as RabbitMQ 3.10 does.

Rule 1: the ``ReplyRegistry`` (one per broker, as RabbitMQ's reply names work across vhosts) owns
the token -> consumer map; a channel registers on consume and unregisters on cancel or close.
Rule 2: the publish path asks ``is_reply_key`` first (one ``startswith``), so ordinary publishes pay
nothing; request rewriting decodes the properties only when a ``reply_to`` property is present.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass
from typing import Protocol

from headrace.server.amqp.properties import decode_properties, encode_properties

from . import errors

__all__ = ["REPLY_QUEUE", "REPLY_PREFIX", "REPLY_TO_FLAG", "ReplyConsumer", "ReplyRegistry", "ReplySink", "is_reply_key"]

REPLY_QUEUE = "amq.rabbitmq.reply-to"
REPLY_PREFIX = REPLY_QUEUE + "."
REPLY_TO_FLAG = 0x02  # reply-to is bit 9 of the property flags: bit 1 of the first byte


class ReplySink(Protocol):
    """What a channel offers its reply consumer: a delivery that needs no ack."""

    def deliver_reply(self, consumer_tag: str, exchange: str, routing_key: str, props_raw: bytes,
                      body: bytes) -> None: ...


@dataclass(frozen=True, slots=True)
class ReplyConsumer:
    tag: str
    token: str

    @property
    def address(self) -> str:
        return REPLY_PREFIX + self.token


def is_reply_key(exchange: str, routing_key: str) -> bool:
    return exchange == "" and routing_key.startswith(REPLY_PREFIX)


class ReplyRegistry:
    def __init__(self) -> None:
        self._sinks: dict[str, tuple[ReplySink, str]] = {}  # token -> (channel, consumer tag)

    def __len__(self) -> int:
        return len(self._sinks)

    def consume(self, sink: ReplySink, current: ReplyConsumer | None, tag: str, no_ack: bool) -> ReplyConsumer:
        """Register ``sink``'s reply consumer; RabbitMQ's refusals (406) for an acking consumer or a
        second one on the channel."""
        if not no_ack:
            raise errors.precondition_failed("reply consumer cannot acknowledge")
        if current is not None:
            raise errors.precondition_failed("reply consumer already set")
        token = secrets.token_urlsafe(24)
        self._sinks[token] = (sink, tag)
        return ReplyConsumer(tag, token)

    def cancel(self, consumer: ReplyConsumer) -> None:
        self._sinks.pop(consumer.token, None)

    def exists(self, name: str) -> bool:
        """A queue.declare of a reply name: the pseudo-queue itself, or a live consumer's address."""
        return name == REPLY_QUEUE or name[len(REPLY_PREFIX):] in self._sinks

    def deliver(self, routing_key: str, props_raw: bytes, body: bytes) -> bool:
        """Hand a reply to its consumer; False when nobody has that address (dropped or returned)."""
        found = self._sinks.get(routing_key[len(REPLY_PREFIX):])
        if found is None:
            return False
        sink, tag = found
        sink.deliver_reply(tag, "", routing_key, props_raw, body)
        return True


def rewrite_request(props_raw: bytes, consumer: ReplyConsumer | None) -> bytes:
    """A request's ``reply_to: amq.rabbitmq.reply-to`` becomes the channel's reply address; without
    a reply consumer on the channel that is RabbitMQ's 406."""
    if len(props_raw) < 2 or not props_raw[0] & REPLY_TO_FLAG:
        return props_raw
    props = decode_properties(props_raw)
    if props.reply_to != REPLY_QUEUE:
        return props_raw
    if consumer is None:
        raise errors.precondition_failed("fast reply consumer does not exist")
    return encode_properties(dataclasses.replace(props, reply_to=consumer.address))
