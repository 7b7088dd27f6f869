"""Dead-letter cycles: the rule (``completes_cycle``, table-driven, histories as ``x_death_headers``
writes them, latest first) and the delivery owner applying it to queues that dead-letter to each
other. Real Broker, VHost and Queue objects; time is the argument each call takes."""

from __future__ import annotations

from typing import Any

import pytest
from headrace.exchanges import DestinationKind
from headrace.queues import Consumer
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker, Settle
from headrace.server.broker.dead_letters import completes_cycle
from shell_ports import shell_ports

NOW = 1000.0
TRANSIENT = encode_properties(BasicProperties())


class Sink:
    """Collects deliveries (a ConsumerSink as a client library would be)."""

    def __init__(self) -> None:
        self.got: list[tuple[Any, Any]] = []

    def has_capacity(self) -> bool:
        return True

    def deliver(self, consumer: Consumer, queue: Any, entry: Any, now: float) -> None:
        self.got.append((queue, entry))

    def consumer_cancelled(self, consumer: Consumer) -> None:
        pass


def deaths(*entries: str) -> list[Any]:
    """``"queue:reason"`` strings as x-death tables, latest first."""
    return [{"queue": q, "reason": r, "count": 1} for q, _, r in (e.partition(":") for e in entries)]


@pytest.mark.parametrize(("queue", "history", "cycle"), [
    # no history of that queue: no cycle
    ("b", deaths("a:expired"), False),
    ("c", deaths("b:expired", "a:expired"), False),
    # back to its own queue, or around two or three queues, automatic all the way: a cycle
    ("a", deaths("a:expired"), True),
    ("a", deaths("b:expired", "a:expired"), True),
    ("a", deaths("c:maxlen", "b:delivery_limit", "a:expired"), True),
    # only the deaths since the message last left that queue count: an older reject does not
    ("a", deaths("b:expired", "a:expired", "a:rejected"), True),
    ("b", deaths("a:expired", "b:expired", "a:rejected"), True),
    # a reject on the way, or as the death in that queue itself: a client took part, it goes on
    ("a", deaths("b:rejected", "a:expired"), False),
    ("a", deaths("b:expired", "a:rejected"), False),
    ("a", deaths("a:rejected"), False),
    ("a", deaths("c:expired", "b:rejected", "a:expired"), False),
    # something other than a table in the history: put there by a client
    ("a", ["junk", *deaths("a:expired")], False),
    ("a", [], False),
])
def test_completes_cycle(queue: str, history: list[Any], cycle: bool) -> None:
    assert completes_cycle(queue, history) is cycle


def pair(broker: Broker, ttl_b: int = 1) -> tuple[Any, Any]:
    """Queues a and b dead-letter to each other through the default exchange; a has a 1 ms TTL."""
    vhost = broker.vhosts["/"]
    a = vhost.declare_queue("a", owner=None, now=NOW, arguments={
        "x-message-ttl": 1, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "b"})
    b = vhost.declare_queue("b", owner=None, now=NOW, arguments={
        "x-message-ttl": ttl_b, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "a"})
    return a, b


def make_broker() -> Broker:
    broker = Broker(ports=shell_ports(), store_enabled=False)
    broker.ensure_default("/", "guest", "guest")
    return broker


def test_a_ttl_cycle_between_two_queues_drops_each_message_after_one_turn() -> None:
    broker = make_broker()
    vhost = broker.vhosts["/"]
    a, b = pair(broker)
    for i in range(10):
        broker.delivery.publish(vhost, "", "a", TRANSIENT, b"%d" % i, NOW)
    now = NOW
    for _ in range(10):
        now += 0.002
        broker.tick(now)
        assert a.messages_ready + b.messages_ready <= 10
    assert (a.messages_ready, b.messages_ready) == (0, 0)
    assert (a.stats.published, b.stats.published) == (10, 10)
    assert broker.delivery.deadlines.earliest() is None  # nothing left to wake the clock for


def test_a_queue_dead_lettering_to_itself_drops_an_expired_message_but_keeps_a_rejected_one() -> None:
    broker = make_broker()
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("self", owner=None, now=NOW, arguments={
        "x-message-ttl": 1, "x-dead-letter-exchange": ""})
    broker.delivery.publish(vhost, "", "self", TRANSIENT, b"m", NOW)
    broker.tick(NOW + 0.002)
    assert queue.messages_ready == 0 and queue.stats.published == 1
    # rejected: RabbitMQ checks no cycle at all, the message comes back to its own queue
    broker.delivery.publish(vhost, "", "self", TRANSIENT, b"r", NOW)
    sink = Sink()
    broker.delivery.add_consumer(vhost, queue, Consumer("c", sink, prefetch=1), NOW)
    broker.delivery.settle(vhost, sink.got[:1], Settle.REJECT, NOW)
    assert len(sink.got) == 2 and sink.got[1][1].message.body == b"r"
    assert sink.got[1][1].message.headers is not None
    assert sink.got[1][1].message.headers["x-death"][0]["reason"] == "rejected"


def test_a_fanout_dead_letter_skips_only_the_queue_that_closes_the_cycle() -> None:
    """a's dead letters go to a fanout bound to a, b and c: a would close the cycle, b and c not;
    b's go back to a, which closes it, and c has no dead-letter exchange."""
    broker = make_broker()
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("fan", "fanout", durable=False)
    a = vhost.declare_queue("a", owner=None, now=NOW, arguments={"x-message-ttl": 1, "x-dead-letter-exchange": "fan"})
    b = vhost.declare_queue("b", owner=None, now=NOW, arguments={
        "x-message-ttl": 1, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "a"})
    c = vhost.declare_queue("c", owner=None, now=NOW)
    for name in ("a", "b", "c"):
        vhost.bind("fan", name, DestinationKind.QUEUE, "", None)
    broker.delivery.publish(vhost, "", "a", TRANSIENT, b"m", NOW)
    broker.tick(NOW + 0.002)
    assert (a.messages_ready, b.messages_ready, c.messages_ready) == (0, 1, 1)
    broker.tick(NOW + 0.004)
    assert (a.messages_ready, b.messages_ready, c.messages_ready) == (0, 0, 1)
    assert a.stats.published == 1


def test_a_dead_letter_dropped_as_a_cycle_writes_no_publish_and_still_acks_its_original() -> None:
    broker = Broker(ports=shell_ports(), store_enabled=True)
    broker.ensure_default("/", "guest", "guest")
    vhost = broker.vhosts["/"]
    for name, other in (("a", "b"), ("b", "a")):
        vhost.declare_queue(name, owner=None, now=NOW, durable=True, arguments={
            "x-message-ttl": 1, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": other})
    broker.delivery.publish(vhost, "", "a", encode_properties(BasicProperties(delivery_mode=2)), b"m", NOW)
    broker.tick(NOW + 0.002)
    broker.tick(NOW + 0.004)
    ops, _ = broker.take_store_ops()
    assert [(type(op).__name__, getattr(op, "queues", None) or getattr(op, "queue", None)) for op in ops] == [
        ("Publish", ("a",)), ("Publish", ("b",)), ("Ack", "a"), ("Ack", "b")]
