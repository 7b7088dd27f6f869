"""RabbitMQ's firehose tracer: with tracing on in a vhost, a copy of every message published into it
and of every message delivered from its queues goes to its ``amq.rabbitmq.trace`` topic exchange,
routed by ``publish.<exchange>`` and ``deliver.<queue>``, the original body with the headers
RabbitMQ gives it (``exchange_name``, ``routing_keys``, ``properties``, ``node``, ``vhost``,
``connection``, ``channel``, ``user``, and ``routed_queues`` on a publish or ``redelivered`` on a
delivery).

Owner: the broker (``Broker.firehose``). The session's publish and delivery paths (and the HTTP
publish) call ``published`` / ``delivered`` while their vhost's ``tracing`` is on; nothing else
costs a message anything. Switched per vhost (``VHost.tracing``, the management API's vhost
``tracing``), and, as in RabbitMQ, off at every start.

Why the copies wait in ``pending`` (``Broker.publish_traces`` calls ``flush``): a delivery happens
inside the delivery owner's dispatch, and publishing the copy there would enqueue and dispatch
again from within it. Published after the batch, a copy is a plain publish. A session publishes
its batch's copies as soon as the batch is dispatched, so they reach the trace exchange in the
same read; the copies of HTTP publishes and gets wait for the clock (a first pending copy asks it
to look at once; it looks within its 20 ms coalescing of wakes). A message published to the
trace exchange itself (the copies) is never traced, so a consumer of a trace queue in a traced
vhost does not feed itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from headrace.queues import Message
from headrace.server.amqp.properties import BasicProperties, decode_properties, encode_properties

from .node import NODE_NAME
from .vhost_view import VHostView

__all__ = ["TRACE_EXCHANGE", "Firehose"]

TRACE_EXCHANGE = "amq.rabbitmq.trace"
_PROPERTY_NAMES = tuple(f.name for f in fields(BasicProperties))


def _properties_table(props: BasicProperties) -> dict[str, Any]:
    """The message's properties that are set, by their AMQP names, as RabbitMQ's trace table has them."""
    return {name: value for name in _PROPERTY_NAMES if (value := getattr(props, name)) is not None}


def _routing_keys(routing_key: str, headers: Mapping[str, Any] | None) -> list[str]:
    """The routing key and the sender-selected ones (``CC``, ``BCC``), as the message was routed."""
    keys = [routing_key]
    for name in ("CC", "BCC"):
        extra = headers.get(name) if headers else None
        if isinstance(extra, list):
            keys.extend(k for k in extra if isinstance(k, str))
    return keys


class Firehose:
    __slots__ = ("pending", "on_pending")

    def __init__(self, on_pending: Callable[[], None]) -> None:
        # (vhost, routing key, properties, body) of each copy not yet published
        self.pending: list[tuple[VHostView, str, bytes, bytes]] = []
        self.on_pending = on_pending  # the clock's wake (``ShellPorts.wake_clock``)

    def published(self, vhost: VHostView, exchange: str, routing_key: str, props_raw: bytes, body: bytes,
                  headers: dict[str, Any] | None, connection: str, channel: int, user: str) -> None:
        """A publish into ``exchange`` of the traced ``vhost``; the queues it routes to are found
        again here, which costs only while tracing. A session calls this once the publish is
        placed (one refused for its expiration entered nothing), within its batch, whose
        deliveries come after; the HTTP publish before placing it (its properties were checked as
        its body was read), since its deliveries happen inside the placing."""
        target = vhost.exchanges.get(exchange)
        if target is None or target.internal:  # refused (404, 403) as it is placed: nothing entered
            return
        props = decode_properties(props_raw)  # once: for the table, and the headers if not parsed yet
        if headers is None:
            headers = props.headers
        routed = list(target.route(routing_key, headers, vhost.exchanges.get).queues)
        table = {"exchange_name": exchange, "routing_keys": _routing_keys(routing_key, headers),
                 "properties": _properties_table(props), "node": NODE_NAME, "vhost": vhost.name,
                 "connection": connection, "channel": channel, "user": user, "routed_queues": routed}
        self._add(vhost, f"publish.{exchange}", table, body)

    def delivered(self, vhost: VHostView, queue: str, message: Message, redelivered: bool, connection: str,
                  channel: int, user: str) -> None:
        """A delivery (to a consumer or a basic.get) from ``queue`` of the traced ``vhost``."""
        if message.exchange == TRACE_EXCHANGE:
            return
        table = {"exchange_name": message.exchange,
                 "routing_keys": _routing_keys(message.routing_key, message.headers),
                 "properties": _properties_table(decode_properties(message.props_raw)), "node": NODE_NAME,
                 "redelivered": int(redelivered), "vhost": vhost.name, "connection": connection,
                 "channel": channel, "user": user}
        self._add(vhost, f"deliver.{queue}", table, message.body)

    def _add(self, vhost: VHostView, routing_key: str, table: dict[str, Any], body: bytes) -> None:
        if not self.pending:
            self.on_pending()
        self.pending.append((vhost, routing_key, encode_properties(BasicProperties(headers=table)), body))

    def flush(self, publish: Callable[[VHostView, str, str, bytes, bytes], object],
              live: Callable[[VHostView], bool]) -> None:
        """Publish the copies waiting, in order, into each one's vhost if it still exists (``live``)
        and still traces: ``publish(vhost, exchange, routing_key, props, body)``."""
        pending, self.pending = self.pending, []
        for vhost, routing_key, props_raw, body in pending:
            if vhost.tracing and live(vhost):
                publish(vhost, TRACE_EXCHANGE, routing_key, props_raw, body)
