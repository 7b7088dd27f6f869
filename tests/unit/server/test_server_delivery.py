"""The delivery owner without a network: settle and dispatch after a queue was deleted, time given
as an argument, dead letters and their store Acks, and deliveries recorded for recovery. Real
Broker, VHost and Queue objects; the consumer sink is a plain collector."""

from __future__ import annotations

from headrace.exchanges import DestinationKind
from headrace.persistence.store_ops import Ack, Deliver, Publish
from headrace.queues import Consumer, Queue, QueueEntry
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker, Settle
from shell_ports import shell_ports

NOW = 1000.0
PERSISTENT = encode_properties(BasicProperties(delivery_mode=2))
TRANSIENT = encode_properties(BasicProperties())


class Sink:
    """Collects deliveries, room for ``capacity`` (a ConsumerSink as a client library would be)."""

    def __init__(self, capacity: int = 1 << 30) -> None:
        self.capacity = capacity
        self.got: list[tuple[Queue, QueueEntry]] = []
        self.cancelled: list[str] = []

    def has_capacity(self) -> bool:
        return len(self.got) < self.capacity

    def deliver(self, consumer: Consumer, queue: Queue, entry: QueueEntry, now: float) -> None:
        self.got.append((queue, entry))

    def consumer_cancelled(self, consumer: Consumer) -> None:
        self.cancelled.append(consumer.tag)


def make_broker() -> Broker:
    broker = Broker(ports=shell_ports(), store_enabled=True)
    broker.ensure_default("/", "guest", "guest")
    return broker


def test_settling_deliveries_of_a_deleted_queue_changes_nothing_and_tells_the_consumer():
    broker = make_broker()
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("q", owner=None, now=NOW)
    sink = Sink()
    consumer = Consumer("c", sink, prefetch=10)
    broker.delivery.add_consumer(vhost, queue, consumer, NOW)
    for _ in range(3):
        broker.delivery.publish(vhost, "", "q", TRANSIENT, b"m", NOW)
    assert len(sink.got) == 3
    vhost.delete_queue("q")
    assert sink.cancelled == ["c"]
    broker.delivery.settle(vhost, sink.got, Settle.REQUEUE, NOW)
    broker.delivery.consumer_ready(vhost, [queue], NOW)
    broker.delivery.remove_consumer(vhost, queue, consumer, NOW)
    assert queue.messages_ready == 0 and len(sink.got) == 3
    # a queue of the same name declared afterwards is a new queue: nothing comes back into it
    again = vhost.declare_queue("q", owner=None, now=NOW)
    assert again is not queue and again.messages_ready == 0


def test_ack_frees_credit_and_the_owner_dispatches_the_next_message_itself():
    broker = make_broker()
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("q", owner=None, now=NOW)
    sink = Sink()
    broker.delivery.add_consumer(vhost, queue, Consumer("c", sink, prefetch=1), NOW)
    for body in (b"1", b"2"):
        broker.delivery.publish(vhost, "", "q", TRANSIENT, body, NOW)
    assert [e.message.body for _, e in sink.got] == [b"1"]
    broker.delivery.settle(vhost, sink.got[:1], Settle.ACK, NOW)
    assert [e.message.body for _, e in sink.got] == [b"1", b"2"]


def test_message_ttl_counts_from_the_publish_time_given():
    broker = make_broker()
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("ttl", owner=None, now=NOW, arguments={"x-message-ttl": 1000})
    broker.delivery.publish(vhost, "", "ttl", TRANSIENT, b"m", NOW)
    broker.tick(NOW + 0.9)
    assert queue.messages_ready == 1
    broker.tick(NOW + 1.1)
    assert queue.messages_ready == 0


def test_expired_dead_letter_is_republished_before_the_source_ack():
    broker = make_broker()
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("dlx", "fanout", durable=True)
    dead = vhost.declare_queue("dead", owner=None, now=NOW, durable=True)
    vhost.bind("dlx", "dead", DestinationKind.QUEUE, "", None)
    vhost.declare_queue("src", owner=None, now=NOW, durable=True,
                        arguments={"x-message-ttl": 10, "x-dead-letter-exchange": "dlx"})
    broker.delivery.publish(vhost, "", "src", PERSISTENT, b"m", NOW)
    broker.take_store_ops()
    broker.tick(NOW + 1)
    ops, _ = broker.take_store_ops()
    assert [type(op) for op in ops] == [Publish, Ack]
    assert ops[0].queues == ("dead",) and ops[1].queue == "src"  # type: ignore[union-attr]
    assert dead.messages_ready == 1


def test_every_acked_mode_delivery_of_a_stored_message_is_recorded_for_recovery():
    broker = make_broker()
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("d", owner=None, now=NOW, durable=True)
    broker.delivery.publish(vhost, "", "d", PERSISTENT, b"m", NOW)
    sink = Sink()
    broker.delivery.add_consumer(vhost, queue, Consumer("c", sink), NOW)
    broker.delivery.settle(vhost, sink.got, Settle.REQUEUE, NOW)  # and delivered again at once
    ops, _ = broker.take_store_ops()
    assert [type(op) for op in ops] == [Publish, Deliver, Deliver]
    broker.delivery.settle(vhost, sink.got[1:], Settle.ACK, NOW)
    assert [type(op) for op in broker.take_store_ops()[0]] == [Ack]


def test_a_batch_dispatches_each_queue_it_published_into_once_at_its_end():
    broker = make_broker()
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("q", owner=None, now=NOW)
    vhost.declare_queue("gone", owner=None, now=NOW)
    sink, other = Sink(), Sink()
    broker.delivery.add_consumer(vhost, queue, Consumer("c", sink, prefetch=2), NOW)
    broker.delivery.add_consumer(vhost, vhost.queues["gone"], Consumer("g", other), NOW)
    assert broker.delivery.begin_batch()
    assert not broker.delivery.begin_batch()  # already open: the outer batch ends it
    for body in (b"1", b"2", b"3"):
        broker.delivery.publish(vhost, "", "q", TRANSIENT, body, NOW)
    broker.delivery.publish(vhost, "", "gone", TRANSIENT, b"x", NOW)
    vhost.delete_queue("gone")  # within the batch: its end skips the queue
    assert sink.got == [] and queue.messages_ready == 3  # ready, not yet handed to the consumer
    broker.delivery.end_batch(NOW)
    assert [e.message.body for _, e in sink.got] == [b"1", b"2"]  # in order, up to the prefetch
    assert queue.messages_ready == 1 and other.got == []
    broker.delivery.publish(vhost, "", "q", TRANSIENT, b"4", NOW)  # no batch open: dispatched at once
    broker.delivery.settle(vhost, sink.got[:1], Settle.ACK, NOW)
    assert [e.message.body for _, e in sink.got] == [b"1", b"2", b"3"]
