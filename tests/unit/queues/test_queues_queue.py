"""Queue behaviour without a network: order, credit, settle, bounds, TTL, dead letters, spill."""

from __future__ import annotations

from collections import deque

import pytest

from headrace.persistence.spill import SpillBacking
from headrace.queues import (
    Consumer,
    EnqueueOutcome,
    Message,
    Queue,
    QueueArgs,
    QueueArgumentError,
    QueueEntry,
    x_death_headers,
)
from headrace.queues.queue import ENTRY_OVERHEAD

NOW = 100.0


class Sink:
    """Collects deliveries; room for ``capacity`` of them (a real ConsumerSink, not a stand-in for
    one of our components)."""

    def __init__(self, capacity: int = 1 << 30) -> None:
        self.capacity = capacity
        self.got: list[tuple[str, QueueEntry]] = []

    def has_capacity(self) -> bool:
        return len(self.got) < self.capacity

    def deliver(self, consumer, queue, entry, now) -> None:
        self.got.append((consumer.tag, entry))


class ListBacking:
    def __init__(self) -> None:
        self.items: deque[QueueEntry] = deque()
        self.wanted = 0

    def append(self, entries):
        self.items.extend(entries)

    def read_batch(self, max_count, max_bytes):
        out = []
        while self.items and len(out) < max_count:
            out.append(self.items.popleft())
        return out

    def depth(self):
        return len(self.items)

    def want_page_in(self):
        self.wanted += 1

    def take_lost(self):
        return 0, 0

    def byte_depth(self):
        return sum(len(e.message.body) for e in self.items)

    def drop(self):
        self.items.clear()

    def close(self):
        pass


_ids = iter(range(1, 1 << 30))


def msg(body: bytes = b"x", **kw) -> Message:
    return Message(next(_ids), "", "rk", b"", body, **kw)


def bodies(entries) -> list[bytes]:
    return [e.message.body for e in entries]


def test_fifo_get_and_requeue_back_to_original_position():
    q = Queue("q")
    for i in range(4):
        q.enqueue(msg(b"%d" % i), NOW)
    e0 = q.get(NOW, no_ack=False, owner="g")
    e1 = q.get(NOW, no_ack=False, owner="g")
    q.requeue(e1)
    q.requeue(e0)
    got = [q.get(NOW, no_ack=True, owner="g") for _ in range(4)]
    assert bodies(got) == [b"0", b"1", b"2", b"3"]
    assert [e.redelivered for e in got] == [True, True, False, False]


def test_round_robin_and_prefetch_credit():
    q = Queue("q")
    sinks = {t: Sink() for t in ("a", "b")}
    consumers = {t: Consumer(t, sinks[t], prefetch=2) for t in ("a", "b")}
    for c in consumers.values():
        q.add_consumer(c)
    for i in range(6):
        q.enqueue(msg(b"%d" % i), NOW)
    q.dispatch(NOW)
    assert [bodies(e for _, e in sinks[t].got) for t in ("a", "b")] == [[b"0", b"2"], [b"1", b"3"]]
    assert q.messages_ready == 2 and q.messages_unacked == 4
    q.ack(sinks["a"].got[0][1])
    q.dispatch(NOW)
    assert bodies(e for _, e in sinks["a"].got) == [b"0", b"2", b"4"]


def test_ack_after_requeue_is_ignored():
    q = Queue("q")
    q.enqueue(msg(), NOW)
    e = q.get(NOW, no_ack=False, owner="g")
    q.requeue(e)
    q.ack(e)  # stale: the entry is ready again
    assert q.messages_ready == 1 and q.messages_unacked == 0


def test_sink_without_room_gets_nothing_until_it_has_room():
    q = Queue("q")
    sink = Sink(capacity=1)
    q.add_consumer(Consumer("c", sink))
    for _ in range(3):
        q.enqueue(msg(), NOW)
    q.dispatch(NOW)
    assert len(sink.got) == 1
    sink.capacity = 3
    q.dispatch(NOW)
    assert len(sink.got) == 3


@pytest.mark.parametrize(
    ("overflow", "outcome", "left", "dead"),
    [("drop-head", EnqueueOutcome.ACCEPTED, [b"1", b"2"], ["maxlen"]),
     ("reject-publish", EnqueueOutcome.REJECTED, [b"0", b"1"], []),
     ("reject-publish-dlx", EnqueueOutcome.REJECTED, [b"0", b"1"], ["maxlen"])],
)
def test_max_length_overflow_modes(overflow, outcome, left, dead):
    q = Queue("q", arguments={"x-max-length": 2, "x-overflow": overflow, "x-dead-letter-exchange": "dlx"})
    gone = []  # what left the queue, as the queue reports it
    assert q.enqueue(msg(b"0"), NOW, gone) is EnqueueOutcome.ACCEPTED
    q.enqueue(msg(b"1"), NOW, gone)
    assert q.enqueue(msg(b"2"), NOW, gone) is outcome
    assert bodies(q.get(NOW, no_ack=True, owner="g") for _ in range(2)) == left
    assert [d.reason for d in gone if d.reason] == dead


def test_max_length_bytes():
    q = Queue("q", arguments={"x-max-length-bytes": 10})
    for _ in range(3):
        q.enqueue(msg(b"12345"), NOW)
    assert q.messages_ready == 2


def test_ttl_expiry_at_head_and_per_message_expiration():
    q = Queue("q", arguments={"x-message-ttl": 1000, "x-dead-letter-exchange": "dlx"})
    gone = []
    q.enqueue(msg(b"queue-ttl"), NOW)
    q.enqueue(msg(b"short", expiration_ms=10), NOW)
    assert q.next_deadline() == NOW + 1
    assert q.expire(NOW + 0.5, gone) == 0
    assert bodies([q.get(NOW + 0.5, no_ack=True, owner="g", left=gone)]) == [b"queue-ttl"]
    assert q.get(NOW + 0.5, no_ack=True, owner="g", left=gone) is None  # the short one expired on the way
    assert [d.reason for d in gone if d.reason] == ["expired"]


def test_reject_dead_letters_and_delivery_limit():
    q = Queue("q", arguments={"x-dead-letter-exchange": "dlx", "x-delivery-limit": 1})
    q.enqueue(msg(b"poison"), NOW)
    q.enqueue(msg(b"bad"), NOW)
    gone = []
    e = q.get(NOW, no_ack=False, owner="g")
    q.requeue(e, gone)
    e = q.get(NOW, no_ack=False, owner="g")
    q.requeue(e, gone)  # second return exceeds the limit of 1
    e2 = q.get(NOW, no_ack=False, owner="g")
    assert e2.message.body == b"bad"
    q.reject(e2, gone)
    assert [(d.entry.message.body, d.reason) for d in gone] == [(b"poison", "delivery_limit"),
                                                                (b"bad", "rejected")]


def test_priority_lanes_serve_highest_first():
    q = Queue("q", arguments={"x-max-priority": 5})
    for body, prio in ((b"low", 0), (b"high", 5), (b"mid", 3), (b"over", 9)):
        q.enqueue(msg(body, priority=prio), NOW)
    assert bodies(q.get(NOW, no_ack=True, owner="g") for _ in range(4)) == [b"high", b"over", b"mid", b"low"]


def test_single_active_consumer_and_consumer_priority():
    q = Queue("q", arguments={"x-single-active-consumer": True})
    a, b = Sink(), Sink()
    q.add_consumer(Consumer("a", a))
    q.add_consumer(Consumer("b", b))
    for _ in range(3):
        q.enqueue(msg(), NOW)
    q.dispatch(NOW)
    assert len(a.got) == 3 and not b.got
    p = Queue("p")
    lo, hi = Sink(), Sink(capacity=2)
    p.add_consumer(Consumer("lo", lo, priority=0))
    p.add_consumer(Consumer("hi", hi, priority=10))
    for _ in range(3):
        p.enqueue(msg(), NOW)
    p.dispatch(NOW)
    assert len(hi.got) == 2 and len(lo.got) == 1


def test_no_ack_delivery_discards_at_once():
    q = Queue("q")
    left = []
    q.add_consumer(Consumer("c", Sink(), no_ack=True))
    q.enqueue(msg(b"m"), NOW)
    q.dispatch(NOW, left)
    gone = [item.entry.message.body for item in left]
    assert gone == [b"m"] and q.messages_unacked == 0


def test_purge_counts_ready_only_and_delete_returns_consumers():
    q = Queue("q")
    for _ in range(3):
        q.enqueue(msg(), NOW)
    held = q.get(NOW, no_ack=False, owner="g")
    assert q.purge() == 2 and q.messages_unacked == 1
    q.ack(held)
    c = Consumer("c", Sink())
    q.add_consumer(c)
    assert q.delete() == [c]


def test_x_expires_idle():
    q = Queue("q", arguments={"x-expires": 1000})
    q.touch(NOW)
    assert not q.idle_expired(NOW + 0.5) and q.idle_expired(NOW + 1.5)
    q.add_consumer(Consumer("c", Sink()))
    assert not q.idle_expired(NOW + 5)


def test_spill_keeps_fifo_across_page_in():
    backing = ListBacking()
    q = Queue("q", resident_max_messages=16, backing_factory=lambda: backing)
    for i in range(100):
        q.enqueue(msg(b"%d" % i), NOW)
    assert q.resident_count == 16 and q.spilled_count() == 84 and q.messages_ready == 100
    out = []
    while q.messages_ready:
        if q.page_in_wanted() and len(out) % 3 == 0:  # the pager, between gets
            q.page_in(q.take_backing().read_batch(10, 1 << 20), q.generation)
            q.enqueue(msg(b"late-%d" % len(out)), NOW)  # new arrivals queue behind the spilled ones
        e = q.get(NOW, no_ack=True, owner="g")
        assert e is not None  # never get-empty while entries are spilled
        out.append(e.message.body)
    spilled_part = [b for b in out if not b.startswith(b"late")]
    assert spilled_part == [b"%d" % i for i in range(100)]
    late = [b for b in out if b.startswith(b"late")]
    assert out.index(late[0]) > out.index(b"99")


def test_a_queue_asks_for_a_page_in_when_its_window_runs_low():
    backing = ListBacking()
    q = Queue("q", resident_max_messages=16, backing_factory=lambda: backing)
    for i in range(40):
        q.enqueue(msg(b"%d" % i), NOW)
    for _ in range(8):  # down to half the window: no page-in wanted yet
        q.get(NOW, no_ack=True, owner="g")
    assert backing.wanted == 0
    q.get(NOW, no_ack=True, owner="g")  # below half: the pager is woken, not polled
    assert backing.wanted == 1 and q.page_in_wanted()


def test_a_queue_that_cannot_open_a_first_spill_file_keeps_the_entry_in_memory():
    def no_room():
        raise OSError(28, "No space left on device")

    q = Queue("q", resident_max_messages=16, backing_factory=no_room)
    for i in range(20):
        q.enqueue(msg(b"%d" % i), NOW)
    assert q.spilled_count() == 0 and q.messages_ready == 20
    assert [q.get(NOW, no_ack=True, owner="g").message.body for _ in range(20)] == \
        [b"%d" % i for i in range(20)]


def test_large_bodies_spill_and_page_in_by_bytes(tmp_path):
    backing = SpillBacking(tmp_path / "spill")
    q = Queue("q", resident_max_messages=1000, resident_max_bytes=100_000, backing_factory=lambda: backing)
    for _ in range(50):
        q.enqueue(msg(b"x" * 10_000), NOW)
    assert q.resident_count == 10 and q.spilled_count() == 40
    assert not q.page_in_wanted()  # 100 kB resident: the count bound alone would page in
    for _ in range(6):
        q.get(NOW, no_ack=True, owner="g")
    assert q.page_in_wanted()
    count, room = q.page_in_room()
    assert count == 996 and room == 60_000
    q.page_in(q.take_backing().read_batch(count, room), q.generation)
    assert q.resident_count == 10 and q.spilled_count() == 34
    backing.close()


def test_page_in_after_purge_is_dropped():
    backing = ListBacking()
    q = Queue("q", resident_max_messages=16, backing_factory=lambda: backing)
    for i in range(40):
        q.enqueue(msg(), NOW)
    generation = q.generation
    batch = backing.read_batch(10, 1 << 20)
    left = []
    q.purge(left)
    discarded = [item.entry.seq for item in left]
    assert len(discarded) == 30  # 16 resident, 14 left in the backing
    q.page_in(batch, generation, left)
    discarded = [item.entry.seq for item in left]
    assert q.messages_ready == 0
    assert sorted(discarded) == list(range(1, 41))  # the in-flight batch is settled too


def test_args_validation():
    with pytest.raises(QueueArgumentError):
        QueueArgs.parse({"x-max-length": "ten"}, "q")
    with pytest.raises(QueueArgumentError):
        QueueArgs.parse({"x-overflow": "explode"}, "q")
    assert QueueArgs.parse({"x-unknown": 1}).max_length is None


def test_x_death_counts_and_order():
    h1 = x_death_headers(None, queue="a", reason="expired", exchange="e", routing_keys=["k"], now=NOW)
    h2 = x_death_headers(h1, queue="b", reason="rejected", exchange="e", routing_keys=["k"], now=NOW)
    h3 = x_death_headers(h2, queue="a", reason="expired", exchange="e", routing_keys=["k"], now=NOW)
    assert [(d["queue"], d["count"]) for d in h3["x-death"]] == [("a", 2), ("b", 1)]
    assert h3["x-first-death-queue"] == "a" and h3["x-last-death-reason"] == "expired"


def test_memory_counts_resident_and_unacked_bodies_not_spilled_ones():
    backing = ListBacking()
    q = Queue("q", resident_max_messages=16, backing_factory=lambda: backing)
    for _ in range(20):
        q.enqueue(msg(b"x" * 1000), NOW)
    assert q.memory == 16 * (ENTRY_OVERHEAD + 1000)  # 4 spilled cost nothing
    taken = [q.get(NOW, no_ack=False, owner="g") for _ in range(3)]
    assert q.memory == 16 * (ENTRY_OVERHEAD + 1000) and q.message_bytes_unacked == 3000
    for entry in taken:
        q.ack(entry)
    assert q.memory == 13 * (ENTRY_OVERHEAD + 1000) and q.message_bytes_unacked == 0
