"""Consuming over HTTP: a queue consumer whose deliveries stream to an HTTP response as NDJSON.

Rule 1: an ``HTTPConsumer`` owns its delivery ids -> entries and the lines not yet sent; its
prefetch window bounds both (``has_capacity`` is false when ``prefetch`` deliveries are unacked).
Rule 2: it is synchronous; the HTTP shell drains ``take_lines`` when woken and calls ``close``
when the client goes away, which returns every unacked message to the queue. Settling goes through
the broker's delivery owner, which dispatches the queue again on its own.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections import deque
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

from headrace.queues import Consumer, Destination, QueueEntry
from headrace.server.amqp.properties import decode_properties
from headrace.server.broker import Delivery, Settle, VHost
from headrace.server.broker.firehose import Firehose

__all__ = ["HTTPConsumer", "json_value", "properties_json"]

MAX_PREFETCH = 10_000  # an HTTP consumer holds at most this many unacked messages


class HTTPConsumer:
    def __init__(self, delivery: Delivery, vhost: VHost, queue: Destination, prefetch: int,
                 user: str = "", firehose: Firehose | None = None) -> None:
        self.delivery = delivery
        self.firehose = firehose  # copies deliveries while the vhost traces (broker/firehose.py)
        self.vhost = vhost
        self.user = user  # who opened the stream: only they (or an administrator) may settle
        self.queue = queue
        self.prefetch = max(1, min(prefetch, MAX_PREFETCH))
        # the HTTP shell's wake for its streaming task, given by ``start``: nothing reaches this
        # consumer before it is added to its queue there
        self.wake: Callable[[], None]
        self.tag = "http-" + secrets.token_urlsafe(12)
        self.consumer = Consumer(self.tag, self, prefetch=self.prefetch, owner=self)
        self.unacked: dict[int, QueueEntry] = {}
        self.lines: deque[bytes] = deque()
        self._next = 1
        self.closed = False

    # ConsumerSink
    def has_capacity(self) -> bool:
        return not self.closed and len(self.unacked) < self.prefetch

    def deliver(self, consumer: Consumer[Any], queue: Destination, entry: QueueEntry, now: float) -> None:
        if self.vhost.tracing and self.firehose is not None:  # no connection or channel: "" and 0
            self.firehose.delivered(self.vhost, queue.name, entry.message, entry.redelivered, "", 0, self.user)
        delivery_id = self._next
        self._next += 1
        self.unacked[delivery_id] = entry
        msg = entry.message
        try:
            payload, encoding = msg.body.decode(), "string"
        except UnicodeDecodeError:
            payload, encoding = base64.b64encode(msg.body).decode(), "base64"
        event: dict[str, Any] = {
            "delivery_id": delivery_id, "exchange": msg.exchange, "routing_key": msg.routing_key,
            "redelivered": entry.redelivered, "payload": payload, "payload_encoding": encoding,
            "properties": properties_json(msg.props_raw),
        }
        self.lines.append(json.dumps(event, default=str).encode() + b"\n")
        self.wake()

    def consumer_cancelled(self, consumer: Consumer[Any]) -> None:
        """The queue was deleted: the stream ends with a line saying so (like basic.cancel over AMQP)."""
        if self.closed:
            return
        self.closed = True
        self.unacked.clear()  # the messages went with the queue
        self.lines.append(self.final_line("queue deleted"))
        self.wake()

    def final_line(self, reason: str) -> bytes:
        return json.dumps({"cancelled": self.tag, "reason": reason}).encode() + b"\n"

    def start(self, now: float, wake: Callable[[], None]) -> None:
        """The stream begins: deliveries and the stream's end call ``wake`` (the shell's task) from now on."""
        self.wake = wake
        self.delivery.add_consumer(self.vhost, self.queue, self.consumer, now)
        self.lines.appendleft(json.dumps({"consumer": self.tag, "queue": self.queue.name,
                                          "prefetch": self.prefetch}).encode() + b"\n")

    def take_lines(self) -> bytes:
        data = b"".join(self.lines)
        self.lines.clear()
        return data

    def settle(self, ids: list[int], action: str, requeue: bool, now: float) -> list[int]:
        """ack / nack / reject by delivery id; returns the ids that were not (or no longer) held."""
        unknown = []
        taken = []
        queue = self.queue
        for delivery_id in ids:
            entry = self.unacked.pop(delivery_id, None)
            if entry is None:
                unknown.append(delivery_id)
            else:
                taken.append((queue, entry))
        how = Settle.ACK if action == "ack" else Settle.REQUEUE if requeue else Settle.REJECT
        self.delivery.settle(self.vhost, taken, how, now)
        return unknown

    def end(self, reason: str, now: float) -> None:
        """The broker ends the stream (its user was deleted): unacked messages go back to the queue
        and the client gets a final line saying why before the terminating chunk."""
        if self.closed:
            return
        self._stop(now)
        self.lines.append(self.final_line(reason))
        self.wake()

    def close(self, now: float) -> None:
        """The client went away: stop consuming and give every unacked message back."""
        if self.closed:
            return
        self._stop(now)
        self.lines.clear()

    def _stop(self, now: float) -> None:
        self.closed = True
        queue = self.queue
        self.delivery.remove_consumer(self.vhost, queue, self.consumer, now)
        self.delivery.settle(self.vhost, [(queue, entry) for entry in self.unacked.values()], Settle.REQUEUE, now)
        self.unacked.clear()


def json_value(value: Any) -> Any:
    """A field-table value as JSON: byte strings (AMQP 'x', or 'S' that is not UTF-8) become
    ``{"$base64": "..."}`` (publish accepts the same form back), timestamps ISO 8601, decimals text."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def properties_json(props_raw: bytes) -> dict[str, Any]:
    """The message properties that are set, JSON-ready (see ``json_value``)."""
    props = decode_properties(props_raw)
    return {k: json_value(getattr(props, k)) for k in props.__dataclass_fields__ if getattr(props, k) is not None}
