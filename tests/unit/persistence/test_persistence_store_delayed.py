"""The store's delayed messages: a bit per message instead of an entry, the same answers as a dict
would give, and recovery reading the live Delay records back one at a time."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

from headrace.persistence import Delay, MessageStore, Undelay
from headrace.persistence.store_delayed import DelayedIndex
from headrace.persistence.store_ops import Recovered


def test_answers_as_a_dict_of_entries_would() -> None:
    rng = random.Random(7)
    idx = DelayedIndex()
    model: dict[int, int] = {}  # id -> segment
    for step in range(20_000):
        roll = rng.random()
        if roll < 0.5:
            mid = step * 3 + 1
            seq = step // 500
            idx.delay(mid, seq, 100)
            model[mid] = seq
        elif roll < 0.8 and model:
            mid = rng.choice(list(model)) if rng.random() < 0.9 else step * 3 + 2  # or never delayed
            assert idx.undelay(mid) == (mid in model)
            model.pop(mid, None)
        elif model:
            mid = rng.choice(list(model))
            seq = step // 500 + 1000  # a copy forward
            idx.move(mid, seq, 120)
            model[mid] = seq
    assert len(idx) == len(model)
    for mid, seq in model.items():
        assert idx.is_in(mid, seq) and not idx.is_in(mid, seq + 1)
    by_seg: dict[int, int] = {}
    for seq in model.values():
        by_seg[seq] = by_seg.get(seq, 0) + 1
    for seq in range(2000):
        assert idx.live_in(seq).count == by_seg.get(seq, 0)
        if not by_seg.get(seq):
            assert idx.live_in(seq).bytes == 0
    for mid in list(model):
        assert idx.undelay(mid)
    assert len(idx) == 0 and idx.live_bytes() == 0


def test_a_million_delayed_take_about_a_bit_each() -> None:
    tracemalloc.start()
    try:
        idx = DelayedIndex()
        before = tracemalloc.get_traced_memory()[0]
        for mid in range(1, 1_000_001):
            idx.delay(mid, mid // 100_000, 350)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(idx) == 1_000_000
    assert used < 1_000_000, used  # under a byte a message (a dict entry each took ~200)


def test_recovery_reads_the_live_delays_back_lazily(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, segment_max_bytes=4096)
    store.recover()
    ops = [Delay(mid, "/", "dx", "k", b"", b"x" * 200, 1_000 + mid) for mid in range(1, 301)]
    store.write_and_sync(ops)
    store.write_and_sync([Undelay(mid) for mid in range(1, 301) if mid % 3])
    while store.maybe_compact():  # copies the live ones forward out of the mostly dead heads
        pass
    store.close()
    again = MessageStore(tmp_path, segment_max_bytes=4096)
    rec: Recovered = again.recover()
    assert not isinstance(rec.delayed, list)  # an iterator over the segments, not a list held
    got = list(rec.delayed)
    assert sorted(d.message_id for d in got) == list(range(3, 301, 3))
    assert all(d.body == b"x" * 200 and d.due_ms == 1_000 + d.message_id for d in got)
    assert again.live_messages() == 100
    again.close()


def test_recovery_batches_group_each_live_record_once_by_vhost_and_exchange(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, segment_max_bytes=8192)
    store.recover()
    ops = [Delay(mid, ("/", "v2")[mid % 2], ("dx", "dé")[mid % 3 == 0], f"k{mid}", b"\x01p" * (mid % 4),
                 b"b" * (mid % 50), 5_000 + mid) for mid in range(1, 401)]
    store.write_and_sync(ops)
    store.write_and_sync([Undelay(mid) for mid in range(1, 401) if mid % 5 == 0])
    store.write_and_sync([ops[6]])  # a newer record of id 7: only that one is live
    store.close()
    again = MessageStore(tmp_path, segment_max_bytes=8192)
    rec = again.recover()
    seen: list[Delay] = []
    for batch in rec.delayed.batches():
        for (vhost, exchange, elen), rows in batch.items():
            assert elen == len(exchange.encode())
            for due, mid, lrk, lprops, tail in rows:  # the tail: exchange, key, properties, body
                r_at, p_at = elen + lrk, elen + lrk + lprops
                assert tail[:elen] == exchange.encode()
                seen.append(Delay(mid, vhost, exchange, tail[r_at - lrk:r_at].decode(), tail[r_at:p_at],
                                  tail[p_at:], due))
    assert sorted(seen, key=lambda d: d.message_id) == [op for op in ops if op.message_id % 5]
    assert seen == list(rec.delayed)  # the same records, in the same (log) order
    again.close()
