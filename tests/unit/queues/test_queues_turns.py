"""A consumer's turn handed over at once (``Consumer.runs``: ``credit`` and ``deliver_run``)
gives the same entries to the same consumers, in the same order, as one delivery at a time."""

from __future__ import annotations

import random

import pytest

from headrace.queues import Consumer, Message, Queue, QueueEntry

NOW = 100.0


class Sink:
    """Collects deliveries one by one (a real ConsumerSink)."""

    def __init__(self, room: int = -1) -> None:
        self.got: dict[str, list[QueueEntry]] = {}  # by consumer tag
        self.room = room  # deliveries the sink itself still takes (-1: no count bound)
        self.runs = 0

    def has_capacity(self) -> bool:
        return self.room != 0

    def deliver(self, consumer: Consumer, queue: Queue, entry: QueueEntry, now: float) -> None:
        self.got.setdefault(consumer.tag, []).append(entry)
        if self.room > 0:
            self.room -= 1


class RunSink(Sink):
    """The same sink taking a whole turn in one call."""

    def credit(self) -> int:
        return self.room

    def deliver_run(self, consumer: Consumer, queue: Queue, entries: list[QueueEntry], now: float) -> None:
        self.runs += 1
        for entry in entries:
            self.deliver(consumer, queue, entry, now)


def _by_consumer(sinks: list[Sink]) -> dict[str, list[QueueEntry]]:
    """Each consumer's undelivered-to-settle list (a sink shared by consumers holds several)."""
    out: dict[str, list[QueueEntry]] = {}
    for sink in {id(s): s for s in sinks}.values():
        out.update(sink.got)
    return out


def _setup(runs: bool, seed: int) -> tuple[Queue, list[Sink]]:
    rnd = random.Random(seed)
    q = Queue("q")
    shared = (RunSink if runs else Sink)(rnd.choice([-1, 3, 7]))  # a channel-wide prefetch, or none
    sinks: list[Sink] = []
    for i in range(rnd.randint(1, 4)):
        sink = shared if rnd.random() < 0.5 else (RunSink if runs else Sink)()
        sinks.append(sink)
        q.add_consumer(Consumer(f"c{i}", sink, prefetch=rnd.choice([1, 2, 5, 50]), runs=runs))
    return q, sinks


@pytest.mark.parametrize("seed", range(40))
def test_turns_hand_out_as_one_by_one(seed: int) -> None:
    rnd = random.Random(seed * 7 + 1)
    one, one_sinks = _setup(False, seed)
    turns, turn_sinks = _setup(True, seed)
    mid = 0
    for _ in range(6):
        for _ in range(rnd.randint(0, 12)):
            mid += 1
            for q in (one, turns):
                q.enqueue(Message(mid, "", "rk", b"", b"x" * (mid % 5)), NOW)
        assert one.dispatch(NOW) == turns.dispatch(NOW)
        got_one = _by_consumer(one_sinks)
        got_turns = _by_consumer(turn_sinks)
        assert {tag: [e.message.id for e in got] for tag, got in got_one.items()} == \
            {tag: [e.message.id for e in got] for tag, got in got_turns.items()}
        settle = rnd.choice(["ack", "requeue", "none"])
        for tag, got in got_one.items():
            take = rnd.randint(0, len(got))
            done_one, got[:] = got[:take], got[take:]
            done_turns, got_turns[tag][:] = got_turns[tag][:take], got_turns[tag][take:]
            if settle == "ack":
                for entry in done_one:
                    one.ack(entry)
                turns.ack_run(done_turns)
            elif settle == "requeue":
                for entry in done_one:
                    one.requeue(entry)
                for entry in done_turns:
                    turns.requeue(entry)
        assert (one.messages_ready, one.messages_unacked, one.message_bytes_unacked) == \
            (turns.messages_ready, turns.messages_unacked, turns.message_bytes_unacked)
    assert all(s.runs <= 6 * 4 for s in turn_sinks)


def test_a_turn_is_one_call_per_consumer_and_an_ack_of_many_releases_once() -> None:
    q = Queue("q")
    sinks = [RunSink(), RunSink()]
    for i, sink in enumerate(sinks):
        q.add_consumer(Consumer(f"c{i}", sink, prefetch=100, runs=True))
    for i in range(10):
        q.enqueue(Message(i, "", "rk", b"", b"abc"), NOW)
    assert q.dispatch(NOW) == 10
    assert [s.runs for s in sinks] == [1, 1]
    assert [e.message.id for e in sinks[0].got["c0"]] == [0, 2, 4, 6, 8]
    first = sinks[0].got["c0"]
    q.ack_run(first + first)  # an entry named twice is released once (the ownership check)
    assert q.messages_unacked == 5 and q.message_bytes_unacked == 15
    q.ack_run(first)  # a late ack changes nothing
    assert q.messages_unacked == 5
