"""The store's compact index (``store_index.py``): chunks of typed arrays, no object per message.

Small chunks (``CHUNK`` lowered for the test) make a few thousand ops cross every path: appends,
ids out of order inserted and chunks split, chunks shrunk, merged and dropped, messages held by
several queues, purges that keep some ids, queue drops, compaction moves and restarts. The oracle
is a plain dict of what each queue holds."""

from __future__ import annotations

import gc
import random
import tracemalloc
from pathlib import Path

import pytest

from headrace.persistence import (
    Ack,
    Deliver,
    DropQueue,
    FsyncMode,
    MessageStore,
    Publish,
    PurgeQueue,
    Recovered,
    StoreOp,
)
from headrace.persistence import store_index

VH = "/"
QUEUES = ("q0", "q1", "q2", "q3")


def pub(mid: int, *queues: str) -> Publish:
    return Publish(mid, VH, queues, "ex", f"rk.{mid}", b"\x80\x00", f"body-{mid}".encode(), 1_000 + mid)


def open_store(path: Path, **kw: object) -> tuple[MessageStore, Recovered]:
    store = MessageStore(path, fsync=FsyncMode.OFF, **kw)  # type: ignore[arg-type]
    return store, store.recover()


def summary(rec: Recovered) -> dict[str, list[tuple[int, int]]]:
    return {k[1]: [(m.message_id, m.delivery_count) for m in v] for k, v in rec.queues.items() if v}


class Oracle:
    def __init__(self) -> None:
        self.msgs: dict[int, dict[str, int]] = {}

    def apply(self, op: StoreOp) -> None:
        if isinstance(op, Publish):
            self.msgs[op.message_id] = dict.fromkeys(op.queues, 0)
        elif isinstance(op, (Ack, Deliver)):
            held = self.msgs.get(op.message_id, {})
            if op.queue in held:
                if isinstance(op, Deliver):
                    held[op.queue] += 1
                else:
                    del held[op.queue]
                    if not held:
                        del self.msgs[op.message_id]
        elif isinstance(op, (DropQueue, PurgeQueue)):
            keep = op.keep if isinstance(op, PurgeQueue) else ()
            for mid in list(self.msgs):
                if mid not in keep:
                    self.msgs[mid].pop(op.queue, None)
                    if not self.msgs[mid]:
                        del self.msgs[mid]

    def summary(self) -> dict[str, list[tuple[int, int]]]:
        out: dict[str, list[tuple[int, int]]] = {}
        for mid in sorted(self.msgs):
            for name, count in self.msgs[mid].items():
                out.setdefault(name, []).append((mid, count))
        return out


def random_op(rnd: random.Random, oracle: Oracle, pending: list[int]) -> StoreOp | None:
    live = list(oracle.msgs)
    roll = rnd.random()
    if roll < 0.45 and pending:
        # ids come out of a shuffled window: mostly rising, sometimes below ids already indexed
        mid = pending.pop(rnd.randrange(min(len(pending), 40)))
        n = 1 if rnd.random() < 0.8 else rnd.randint(2, 4)
        return pub(mid, *rnd.sample(QUEUES, n))
    if roll < 0.5 and live:
        # the same id again (what a compaction copy looks like at recovery): it replaces the entry
        mid = rnd.choice(live)
        return pub(mid, *rnd.sample(QUEUES, rnd.randint(1, 3)))
    if roll < 0.93 and live:
        mid = live[min(int(rnd.expovariate(0.02)), len(live) - 1)] if rnd.random() < 0.7 \
            else rnd.choice(live)
        name = rnd.choice(list(oracle.msgs[mid]))
        return Ack(mid, VH, name) if roll < 0.85 else Deliver(mid, VH, name)
    if roll < 0.97:
        keep = tuple(rnd.sample(live, min(len(live), rnd.randint(0, 5))))
        return PurgeQueue(VH, rnd.choice(QUEUES), keep)
    if roll < 0.98:
        return DropQueue(VH, rnd.choice(QUEUES))
    return None


@pytest.mark.parametrize("seed", range(3))
def test_small_chunks_match_the_oracle_through_splits_merges_compaction_and_restarts(
    seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_index, "CHUNK", 8)
    rnd = random.Random(seed)
    oracle = Oracle()
    store, _ = open_store(tmp_path, segment_max_bytes=2_000)
    pending = list(range(1, 6_000))
    for step in range(5_000):
        op = random_op(rnd, oracle, pending)
        if op is None:
            continue
        oracle.apply(op)
        store.write([op])
        assert store.live_messages() == len(oracle.msgs)
        if step % 97 == 96:
            store.maybe_compact()
        if step % 1_250 == 1_249:
            store.close()
            store, rec = open_store(tmp_path, segment_max_bytes=2_000)
            assert summary(rec) == oracle.summary()
            assert store.live_messages() == len(oracle.msgs)
    chunks = store._index._chunks  # the structure itself is what this test is about
    assert [c.ids[0] for c in chunks] == sorted(c.ids[0] for c in chunks)
    assert all(c.live * 4 >= len(c.ids) or len(c.ids) <= 8 for c in chunks[:-1])
    assert sum(c.live for c in chunks) == len(oracle.msgs)
    store.close()
    store, rec = open_store(tmp_path)
    assert summary(rec) == oracle.summary()
    store.close()


def test_a_drained_backlog_frees_its_chunks(tmp_path: Path) -> None:
    store, _ = open_store(tmp_path)
    n = 5 * store_index.CHUNK
    for first in range(1, n + 1, 1000):
        store.write([pub(mid, "q") for mid in range(first, min(first + 1000, n + 1))])
    assert len(store._index._chunks) == 5
    store.write([Ack(mid, VH, "q") for mid in range(1, n + 1) if mid % 1000])  # every 1000th stays
    assert store.live_messages() == n // 1000
    assert len(store._index._chunks) == 1  # shrunk and merged: a few live entries cost a few entries
    store.write([Ack(mid, VH, "q") for mid in range(1000, n + 1, 1000)])
    assert store._index._chunks == [] and store.live_messages() == 0
    store.write([pub(n + 1, "q")])
    store.close()
    _, rec = open_store(tmp_path)
    assert summary(rec) == {"q": [(n + 1, 0)]}


def test_multi_queue_messages_fall_back_to_one_slot_and_keep_counts(tmp_path: Path) -> None:
    store, _ = open_store(tmp_path)
    store.write([pub(1, "a", "b", "c"), pub(2, "a"), Deliver(1, VH, "b"), Deliver(1, VH, "b"),
                 Ack(1, VH, "a"), PurgeQueue(VH, "c", (2,))])
    assert list(store._index._multi) == []  # only "b" holds message 1 now: a plain entry again
    store.write([Deliver(1, VH, "b")])
    store.close()
    store, rec = open_store(tmp_path)
    assert summary(rec) == {"a": [(2, 0)], "b": [(1, 3)]}
    assert [m.body for m in rec.queues[(VH, "b")]] == [b"body-1"]
    store.write([DropQueue(VH, "b"), Ack(2, VH, "a")])
    assert store.live_messages() == 0 and store._index.slots.ids == {}
    store.close()


def test_index_costs_under_48_bytes_per_live_message(tmp_path: Path) -> None:
    """Traced bytes the store keeps for 20k one-queue messages, live and after a restart (the
    benchmark measures 1M: ``benchmarks/bench_store_index.py``)."""
    n = 20_000
    store, _ = open_store(tmp_path)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for first in range(1, n + 1, 1000):
            store.write_and_sync([pub(mid, "q") for mid in range(first, first + 1000)])
        gc.collect()
        live = tracemalloc.get_traced_memory()[0] - before
        store.close()
        del store
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        store, rec = open_store(tmp_path)
        del rec  # the per-queue id lists live only while recovery loads the queues
        gc.collect()
        recovered = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert live / n <= 48, live / n
    assert recovered / n <= 48, recovered / n
    store.close()
