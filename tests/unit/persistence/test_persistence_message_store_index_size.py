"""The store keeps an index entry per live persistent message, so its size is RAM per message of a
backlog: a one-queue entry is an exact-size four-slot list, after a publish and after recovery."""

from __future__ import annotations

import sys
from pathlib import Path

from headrace.persistence import Ack, Deliver, MessageStore, Publish

EXACT = sys.getsizeof([0, 0, 0, 0])


def pub(mid: int, *queues: str) -> Publish:
    return Publish(mid, "/", queues, "ex", "rk", b"\x80\x00", b"body", 1_000 + mid)


def entry_sizes(store: MessageStore) -> list[int]:
    return [sys.getsizeof(e) for e in store._live.values()]  # the index itself is what is measured


def test_one_queue_entries_are_exact_size_live_and_recovered(tmp_path: Path) -> None:
    store = MessageStore(tmp_path)
    store.recover()
    store.write_and_sync([pub(1, "a"), pub(2, "b"), pub(3, "a", "b"), Deliver(1, "/", "a"), Ack(3, "/", "a")])
    sizes = entry_sizes(store)
    assert sizes[:2] == [EXACT, EXACT]
    store.close()
    store = MessageStore(tmp_path)
    recovered = store.recover()
    assert entry_sizes(store) == [EXACT, EXACT, EXACT]  # message 3 is left in "b" only
    assert [(m.message_id, m.redelivered) for m in recovered.queues[("/", "a")]] == [(1, True)]
    assert [m.message_id for m in recovered.queues[("/", "b")]] == [2, 3]
    store.close()
