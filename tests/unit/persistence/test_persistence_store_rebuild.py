"""``rebuild`` (``store_recovery.py``): a replay of the segments returns the indexes the writer has.

The store's Rule 2, checked through its collaborators: after writes, acks, deliveries, purges,
drops, delays and compaction, the live figures per segment and in all that ``rebuild`` returns from
the files equal the running store's, and the segments it returns are the ones on disk."""

from __future__ import annotations

from pathlib import Path

from headrace.persistence import (
    Ack,
    Delay,
    Deliver,
    DropQueue,
    FsyncMode,
    MessageStore,
    Publish,
    PurgeQueue,
    Undelay,
)
from headrace.persistence.segments import list_segments
from headrace.persistence.store_delayed import live_delays
from headrace.persistence.store_recovery import Rebuilt, rebuild

VH = "/"


def pub(mid: int, *queues: str) -> Publish:
    return Publish(mid, VH, queues, "ex", f"rk.{mid}", b"\x80\x00", bytes(200), 1_000 + mid)


def delay(mid: int) -> Delay:
    return Delay(mid, VH, "dx", f"rk.{mid}", b"\x80\x00", bytes(100), 9_000 + mid)


def figures(store: MessageStore, rebuilt: Rebuilt) -> tuple[object, object]:
    """(the running store's, the rebuilt) live figures of every segment on disk, and in all."""
    seqs = [seq for seq, _ in list_segments(rebuilt.segments[0].path.parent)]
    mine = [(store._index.live_in(s), store._delayed.live_in(s)) for s in seqs]
    theirs = [(rebuilt.index.live_in(s), rebuilt.delayed.live_in(s)) for s in seqs]
    return ((mine, store.live_bytes(), store.live_messages()),
            (theirs, rebuilt.index.live_bytes() + rebuilt.delayed.live_bytes(),
             rebuilt.index.live_messages() + len(rebuilt.delayed)))


def test_rebuild_returns_the_writers_indexes_and_segments(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync=FsyncMode.OFF, segment_max_bytes=4_000)
    store.recover()
    mid = 0
    for round_ in range(6):
        ops: list[object] = []
        for _ in range(20):
            mid += 1
            ops.append(pub(mid, "a") if mid % 3 else pub(mid, "a", "b", "c"))
        ops += [delay(10_000 + round_), Deliver(mid, VH, "a"), Deliver(mid - 1, VH, "a")]
        store.write_and_sync(ops)  # type: ignore[arg-type]
        store.write_and_sync([Ack(m, VH, "a") for m in range(mid - 19, mid - 4)]
                             + [Undelay(10_000 + round_ - 1)] * (round_ > 0)
                             + [PurgeQueue(VH, "c", (mid - 2,))])
        store.maybe_compact()
    store.write_and_sync([DropQueue(VH, "b")])
    store.maybe_compact()
    store.sync()

    rebuilt = rebuild(tmp_path)

    assert [(s.seq, s.size) for s in rebuilt.segments] == [
        (seq, path.stat().st_size) for seq, path in list_segments(tmp_path)]
    assert sum(s.size for s in rebuilt.segments) == store.disk_bytes()
    assert len(rebuilt.segments) == store.segment_count() > 1
    mine, theirs = figures(store, rebuilt)
    assert mine == theirs
    assert [d.message_id for d in live_delays(rebuilt.delayed, rebuilt.segments)] == [10_005]
    assert rebuilt.next_message_id == 10_006 and rebuilt.damaged == 0
    store.close()
