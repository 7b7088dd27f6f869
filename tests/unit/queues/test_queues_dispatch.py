"""Deliveries to consumers keep the queue's unacked byte count (and so its memory estimate) exact."""

from __future__ import annotations

from headrace.queues import Consumer, Message, Queue, QueueEntry
from headrace.queues.queue import ENTRY_OVERHEAD

NOW = 100.0


class Sink:
    """Collects deliveries (a real ConsumerSink, not a stand-in for one of our components)."""

    def __init__(self) -> None:
        self.got: list[QueueEntry] = []

    def has_capacity(self) -> bool:
        return True

    def deliver(self, consumer: Consumer, queue: Queue, entry: QueueEntry, now: float) -> None:
        self.got.append(entry)


def msg(i: int, body: bytes) -> Message:
    return Message(i, "", "rk", b"", body)


def test_round_robin_dispatch_counts_unacked_bytes_and_ack_returns_them_to_zero():
    q = Queue("q")
    sinks = [Sink(), Sink()]
    for i, sink in enumerate(sinks):
        q.add_consumer(Consumer(f"c{i}", sink, prefetch=10))
    for i in range(4):
        q.enqueue(msg(i, b"x" * 100), NOW)
    assert q.dispatch(NOW) == 4
    assert q.messages_unacked == 4
    assert q.message_bytes_unacked == 400
    assert q.memory == 4 * ENTRY_OVERHEAD + 400
    for sink in sinks:
        for entry in sink.got:
            q.ack(entry)
    assert q.message_bytes_unacked == 0 and q.memory == 0


def test_requeue_and_reject_after_consumer_dispatch_never_go_negative():
    q = Queue("q")
    sink = Sink()
    q.add_consumer(Consumer("c", sink, prefetch=1))
    q.enqueue(msg(1, b"abc"), NOW)
    q.enqueue(msg(2, b"defgh"), NOW)
    q.dispatch(NOW)
    assert q.message_bytes_unacked == 3
    q.requeue(sink.got[0])
    assert q.message_bytes_unacked == 0 and q.message_bytes_ready == 8
    q.dispatch(NOW)
    assert q.message_bytes_unacked == 3  # the requeued one comes back first
    q.reject(sink.got[1])
    q.dispatch(NOW)
    assert q.message_bytes_unacked == 5
    q.ack(sink.got[2])
    assert q.message_bytes_unacked == 0 and q.memory == 0
