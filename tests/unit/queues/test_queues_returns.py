"""RabbitMQ 4.3's returns on a queue without a network: failures counted apart from acquisitions,
the delivery limit on failures, delayed retry held and released by the clock; and the compat
release's quorum defaults."""

from __future__ import annotations

import itertools

import pytest

from headrace.queues import Message, Queue, QueueArgs, QueueArgumentError
from headrace.queues.retry import retry_delay
from headrace.server.broker.compat import Compat

NOW = 100.0
_ids = itertools.count(1)


def quorum(**arguments: object) -> Queue:
    args = Compat.of("4.3").queue_defaults(QueueArgs.parse({"x-queue-type": "quorum", **arguments}, "q"), "quorum")
    return Queue("q", durable=True, arguments={"x-queue-type": "quorum", **arguments}, args=args,
                 queue_type="quorum")


def take(q: Queue, now: float = NOW):  # type: ignore[no-untyped-def]
    return q.get(now, no_ack=False, owner="g")


def test_a_return_without_failure_counts_no_delivery() -> None:
    q = quorum(**{"x-delivery-limit": 1})
    q.enqueue(Message(next(_ids), "", "q", b"", b"m"), NOW)
    for _ in range(5):  # nacks: acquired, never failed
        entry = take(q)
        q.give_back(entry, [], False, NOW)
    assert (entry.delivery_count, entry.acquired_count) == (0, 5)
    left: list = []
    q.give_back(take(q), left, True, NOW)
    q.give_back(take(q), left, True, NOW)  # the second failure passes the limit of 1
    assert [item.reason for item in left] == ["delivery_limit"] and q.messages_ready == 0


def test_delayed_retry_waits_and_the_clock_releases() -> None:
    q = quorum(**{"x-delayed-retry-type": "all", "x-delayed-retry-min": 1000, "x-delayed-retry-max": 1500})
    assert q.timed
    q.enqueue(Message(next(_ids), "", "q", b"", b"m"), NOW)
    q.give_back(take(q), [], False, NOW)
    assert q.messages_ready == 0 and q.next_deadline() == NOW + 1.0
    assert not q.release_delayed(NOW + 0.999)
    assert q.release_delayed(NOW + 1.0) and q.messages_ready == 1
    q.give_back(take(q, NOW + 1), [], False, NOW + 1)
    assert q.next_deadline() == NOW + 1 + 1.5  # 2 x 1000 ms, capped at 1500


@pytest.mark.parametrize(("kind", "failed", "waits"), [
    ("failed", True, True), ("failed", False, False), ("returned", False, True), ("returned", True, False),
    ("all", True, True), ("disabled", True, False)])
def test_which_returns_wait(kind: str, failed: bool, waits: bool) -> None:
    arguments = {"x-delayed-retry-type": kind, "x-delayed-retry-min": 10}
    args = QueueArgs.parse(arguments, "q")
    q = quorum(**arguments)
    q.enqueue(Message(next(_ids), "", "q", b"", b"m"), NOW)
    entry = take(q)
    assert (retry_delay(args, entry, failed) > 0) is waits


def test_delayed_retry_type_needs_a_minimum() -> None:
    with pytest.raises(QueueArgumentError, match="x-delayed-retry-min"):
        QueueArgs.parse({"x-delayed-retry-type": "failed"}, "q")
    with pytest.raises(QueueArgumentError, match="expected disabled, all, failed or returned"):
        QueueArgs.parse({"x-delayed-retry-type": "later", "x-delayed-retry-min": 5}, "q")


@pytest.mark.parametrize(("version", "limit", "priority", "retry"), [
    ("3.10", None, None, "disabled"), ("4.0", 20, None, "disabled"), ("4.2", 20, None, "disabled"),
    ("4.3", 20, 31, "all")])
def test_quorum_defaults_by_release(version: str, limit: int | None, priority: int | None, retry: str) -> None:
    declared = QueueArgs.parse({"x-delayed-retry-type": "all", "x-delayed-retry-min": 5}, "q")
    args = Compat.of(version).queue_defaults(declared, "quorum")
    assert (args.delivery_limit, args.max_priority, args.delayed_retry) == (limit, priority, retry)
    assert Compat.of(version).queue_defaults(declared, "classic") is declared
    unlimited = Compat.of(version).queue_defaults(QueueArgs.parse({"x-delivery-limit": -1}, "q"), "quorum")
    assert unlimited.delivery_limit is None
