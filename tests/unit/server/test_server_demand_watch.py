"""A queue's demand watchers (what a federated queue's link waits on instead of polling): woken
after everything that can change whether the queue's consumers want more, and only for that
queue. Real Broker, VHost and Queue objects; the consumer sink is a plain collector."""

from __future__ import annotations

from headrace.queues import Consumer, Queue, QueueEntry
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker, Settle
from headrace.server.broker.federation import queue_wants
from shell_ports import shell_ports

NOW = 1000.0
TRANSIENT = encode_properties(BasicProperties())


class Sink:
    def __init__(self) -> None:
        self.got: list[tuple[Queue, QueueEntry]] = []

    def has_capacity(self) -> bool:
        return True

    def deliver(self, consumer: Consumer, queue: Queue, entry: QueueEntry, now: float) -> None:
        self.got.append((queue, entry))

    def consumer_cancelled(self, consumer: Consumer) -> None:
        pass


def test_wakes_follow_every_change_of_the_demand_and_only_for_the_watched_queue() -> None:
    broker = Broker(ports=shell_ports(), store_enabled=False)
    broker.ensure_default("/", "guest", "guest")
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("fed", owner=None, now=NOW)
    vhost.declare_queue("other", owner=None, now=NOW)
    seen: list[bool] = []  # the demand as the link would read it when woken
    unwatch = broker.delivery.settlement.watch("/", "fed", lambda: seen.append(queue_wants(broker, "/", "fed")))
    delivery = broker.delivery

    def woke() -> list[bool]:
        out = seen[:]
        seen.clear()
        return out

    sink = Sink()
    consumer = Consumer("c", sink, prefetch=1)
    delivery.add_consumer(vhost, queue, consumer, NOW)
    assert woke() == [True]  # a consumer with credit on an empty queue
    delivery.publish(vhost, "", "other", TRANSIENT, b"x", NOW)
    assert woke() == []  # another queue's traffic wakes nothing
    delivery.publish(vhost, "", "fed", TRANSIENT, b"1", NOW)
    assert woke()[-1] is False  # its one credit taken
    delivery.publish(vhost, "", "fed", TRANSIENT, b"2", NOW)
    assert woke()[-1] is False  # a message ready
    delivery.settle(vhost, sink.got[:1], Settle.ACK, NOW)  # credit back: "2" goes at once
    assert woke()[-1] is False
    delivery.settle(vhost, sink.got[1:], Settle.ACK, NOW)  # credit back on an empty queue
    assert woke()[-1] is True
    delivery.remove_consumer(vhost, queue, consumer, NOW)
    assert woke() == [False]  # the last consumer left
    unwatch()
    delivery.add_consumer(vhost, queue, Consumer("d", Sink(), prefetch=1), NOW)
    assert woke() == []
    assert broker.delivery.settlement.watchers == {}


def test_a_deleted_queue_wakes_its_watchers() -> None:
    broker = Broker(ports=shell_ports(), store_enabled=False)
    broker.ensure_default("/", "guest", "guest")
    vhost = broker.vhosts["/"]
    vhost.declare_queue("fed", owner=None, now=NOW)
    woken: list[bool] = []
    broker.delivery.settlement.watch("/", "fed", lambda: woken.append(queue_wants(broker, "/", "fed")))
    vhost.delete_queue("fed")
    assert woken == [False]
