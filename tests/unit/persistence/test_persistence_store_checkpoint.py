"""The index checkpoint (``store_checkpoint.py``): a restart from it and the log after it recovers
exactly what a replay of the whole log recovers; a checkpoint that is missing, torn, corrupt, cut
short or stale is ignored (the whole log is replayed), and a checkpoint write interrupted at any
byte leaves the previous one in force. Real files throughout; the "whole log" answer is the same
directory reopened with the checkpoint moved aside."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

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
from headrace.persistence.store_checkpoint import CHECKPOINT_FILE, load_checkpoint
from headrace.persistence.store_ops import StoreOp

VH = "/"
State = tuple[dict[tuple[str, str], list[tuple[int, int, bytes]]], list[int], int, int]


def pub(mid: int, *queues: str) -> Publish:
    return Publish(mid, VH, queues, "ex", f"rk.{mid}", b"\x80\x00", b"%d" % mid * 20, 1_000 + mid)


def opened(directory: Path, **kw: int) -> tuple[MessageStore, State]:
    store = MessageStore(directory, fsync=FsyncMode.BATCH, segment_max_bytes=kw.get("segment", 3_000),
                         checkpoint_min_bytes=kw.get("min_bytes", 0))
    rec = store.recover()
    state: State = ({key: [(m.message_id, m.delivery_count, m.body) for m in q]
                     for key, q in rec.queues.items()},
                    [d.message_id for d in rec.delayed], rec.next_message_id, store.live_bytes())
    return store, state


def whole_log(directory: Path, tmp: Path) -> State:
    """What a replay of every segment recovers: a copy of the directory without the checkpoint."""
    copy = tmp / "whole-log"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(directory, copy)
    (copy / CHECKPOINT_FILE).unlink(missing_ok=True)
    store, state = opened(copy)
    store.close()
    return state


def busy_log(store: MessageStore, start: int, rounds: int) -> int:
    """Publishes (some to three queues), deliveries, acks, a purge and a drop, with checkpoints
    and compaction between groups as the flusher makes them; returns the next id."""
    mid = start
    for r in range(rounds):
        ops: list[StoreOp] = []
        for _ in range(15):
            ops.append(pub(mid, "a") if mid % 4 else pub(mid, "a", "b", "c"))
            mid += 1
        ops += [Deliver(mid - 1, VH, "a"), Deliver(mid - 2, VH, "a"), Deliver(mid - 2, VH, "a")]
        store.write_and_sync(ops)
        store.write_and_flush([Ack(m, VH, "a") for m in range(mid - 15, mid - 6)])
        if r % 5 == 4:
            store.write_and_flush([PurgeQueue(VH, "c", (mid - 3,))])
        if r == rounds - 2:
            store.write_and_flush([DropQueue(VH, "b")])
        store.maybe_compact()
        store.maybe_checkpoint()
    return mid


def test_restart_from_checkpoint_equals_whole_log_replay(tmp_path: Path, caplog) -> None:
    d = tmp_path / "store"
    store, _ = opened(d)
    mid = busy_log(store, 1, 30)
    assert (d / CHECKPOINT_FILE).exists()
    ckpt = load_checkpoint(d)
    assert ckpt is not None and ckpt.offset > 0
    # records after the checkpoint: its tail is replayed on top (acks of checkpointed messages too)
    store.write_and_sync([pub(mid, "a"), pub(mid + 1, "a"), Ack(mid - 10, VH, "a"), Ack(mid, VH, "a")])
    expected = whole_log(d, tmp_path)  # (the store is still open: a kill -9 leaves it like this)
    with caplog.at_level(logging.INFO, "headrace.persistence.message_store"):
        store2, state = opened(d)
    assert "index checkpoint at segment" in caplog.text
    assert state == expected
    ids = [m for m, _, _ in state[0][(VH, "a")]]
    assert mid - 10 not in ids and mid not in ids and mid + 1 in ids
    # and it goes on: more writes, another checkpoint, another restart, same answer
    busy_log(store2, mid + 2, 12)
    expected = whole_log(d, tmp_path)
    assert opened(d)[1] == expected


def test_acked_after_checkpoint_is_not_resurrected_and_next_id_holds(tmp_path: Path) -> None:
    d = tmp_path / "store"
    store, _ = opened(d)
    store.write_and_sync([pub(m, "q") for m in range(1, 200)])
    assert store.maybe_checkpoint() > 0
    store.write_and_flush([Ack(m, VH, "q") for m in range(1, 200)])  # every one acked after it
    store.write_and_sync([pub(500, "other"), Ack(500, VH, "other")])  # highest id: dead
    _, state = opened(d)
    assert state[0] == {} and state[2] == 501


def test_delivery_counts_and_multi_queue_entries_survive_the_checkpoint(tmp_path: Path) -> None:
    d = tmp_path / "store"
    store, _ = opened(d)
    store.write_and_sync([pub(m, "a", "b") for m in range(1, 120)] + [Deliver(5, VH, "b")] * 3)
    store.write_and_sync([Ack(6, VH, "a"), Deliver(7, VH, "a")])
    assert store.maybe_checkpoint() > 0
    _, state = opened(d)
    a = {m: n for m, n, _ in state[0][(VH, "a")]}
    b = {m: n for m, n, _ in state[0][(VH, "b")]}
    assert 6 not in a and b[6] == 0 and b[5] == 3 and a[7] == 1 and len(b) == 119
    assert state == whole_log(d, tmp_path)


def _with_checkpoint(tmp_path: Path) -> tuple[Path, State]:
    d = tmp_path / "store"
    store, _ = opened(d)
    busy_log(store, 1, 20)
    store.write_and_sync([pub(10_000, "a")])
    return d, whole_log(d, tmp_path)


@pytest.mark.parametrize("damage", ["flip", "cut", "empty", "garbage", "header", "counts"])
def test_a_damaged_checkpoint_is_ignored(tmp_path: Path, damage: str, caplog) -> None:
    d, expected = _with_checkpoint(tmp_path)
    path = d / CHECKPOINT_FILE
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x40
    elif damage == "cut":
        data = data[: len(data) - 5]
    elif damage == "empty":
        data = bytearray()
    elif damage == "garbage":
        data = bytearray(b"\x07" * len(data))
    elif damage == "header":
        data[9:17] = (10**9).to_bytes(8, "little")  # the position's segment, past the header CRC
    else:
        data[57:65] = (2**62).to_bytes(8, "little")  # the chunk count: nothing is allocated by it
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, "headrace.persistence.message_store"):
        assert opened(d)[1] == expected
    if damage != "empty":
        assert "replaying the whole log" in caplog.text


@pytest.mark.parametrize("change", ["covered-grown", "covered-rewritten", "position-cut",
                                    "unknown-segment", "live-segment-deleted"])
def test_a_stale_checkpoint_is_ignored(tmp_path: Path, change: str, caplog) -> None:
    """The segments are no longer the ones the checkpoint covered: whatever the checkpoint says,
    the answer is the replay of the files as they are."""
    d = tmp_path / "store"
    store, _ = opened(d)
    store.write_and_sync([pub(m, "q") for m in range(1, 150)])
    assert store.maybe_checkpoint() > 0
    ckpt = load_checkpoint(d)
    assert ckpt is not None
    store.close()
    segs = dict(list_segments(d))
    first = min(segs)
    if change == "covered-grown":
        with open(segs[first], "ab") as f:
            f.write(b"\x00" * 7)
    elif change == "covered-rewritten":  # same size, other bytes: a foreign directory's segment
        data = bytearray(segs[first].read_bytes())
        data[-3] ^= 0xFF
        segs[first].write_bytes(bytes(data))
    elif change == "position-cut":
        with open(segs[ckpt.seq], "r+b") as f:
            f.truncate(ckpt.offset - 1)
    elif change == "unknown-segment":
        shutil.copy(segs[first], d / f"{0:020d}.seg")
    else:
        segs[first].unlink()  # it held live messages: the checkpoint would point into nothing
    expected = whole_log(d, tmp_path)
    with caplog.at_level(logging.WARNING, "headrace.persistence.message_store"):
        assert opened(d)[1] == expected
    assert "does not match the segments" in caplog.text


def test_heads_compacted_away_after_the_checkpoint_keep_it_valid(tmp_path: Path, caplog) -> None:
    d = tmp_path / "store"
    store, _ = opened(d)
    store.write_and_sync([pub(m, "q") for m in range(1, 120)])
    store.write_and_flush([Ack(m, VH, "q") for m in range(1, 110)])
    store.write_and_sync([pub(m, "keep") for m in range(120, 130)])
    assert store.maybe_checkpoint() > 0
    store.write_and_sync([pub(m, "q") for m in range(200, 260)])
    before = len(list_segments(d))
    while store.maybe_compact():
        pass
    assert len(list_segments(d)) < before  # covered heads are gone, their live records copied
    store.write_and_flush([Ack(m, VH, "q") for m in range(110, 115)])
    expected = whole_log(d, tmp_path)
    with caplog.at_level(logging.INFO, "headrace.persistence.message_store"):
        assert opened(d)[1] == expected
    assert "index checkpoint at segment" in caplog.text


def test_acks_lost_with_a_compacted_segment_make_the_checkpoint_stale(tmp_path: Path, caplog) -> None:
    """Acks written after the checkpoint into the segment of its position, that segment then
    compacted away: the checkpoint's entries for those messages point into a deleted segment,
    so it is not used (the whole log, as it now is, decides)."""
    d = tmp_path / "store"
    store, _ = opened(d, min_bytes=10**9)  # no checkpoint but the one taken below
    store.write_and_sync([pub(m, "q") for m in range(1, 120)])
    store.write_and_sync([pub(m, "keep") for m in range(120, 130)])
    store._ckpt_min = 0  # noqa: SLF001 - take exactly one checkpoint here
    assert store.maybe_checkpoint() > 0
    store._ckpt_min = 10**9  # noqa: SLF001
    store.write_and_flush([Ack(m, VH, "q") for m in range(1, 120)])
    store.write_and_sync([pub(m, "q") for m in range(200, 260)])
    while store.maybe_compact():
        pass
    expected = whole_log(d, tmp_path)
    with caplog.at_level(logging.INFO, "headrace.persistence.message_store"):
        assert opened(d)[1] == expected
    assert "does not match the segments" in caplog.text


def test_an_interrupted_write_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    """A kill mid-write leaves ``index.ckpt.tmp`` at any length beside the previous checkpoint:
    every prefix of the new file, left as the temporary, changes nothing at the next open."""
    d = tmp_path / "store"
    store, _ = opened(d)
    busy_log(store, 1, 8)
    old = (d / CHECKPOINT_FILE).read_bytes()
    busy_log(store, 1_000, 8)
    new = (d / CHECKPOINT_FILE).read_bytes()
    assert new != old
    expected = whole_log(d, tmp_path)
    for cut in sorted({0, 1, 8, 57, len(new) // 3, len(new) // 2, len(new) - 9, len(new) - 1}):
        (d / CHECKPOINT_FILE).write_bytes(old)
        (d / (CHECKPOINT_FILE + ".tmp")).write_bytes(new[:cut])
        assert opened(d)[1] == expected
        assert not (d / (CHECKPOINT_FILE + ".tmp")).exists()


def test_no_checkpoint_while_delayed_messages_are_held(tmp_path: Path) -> None:
    d = tmp_path / "store"
    store, _ = opened(d)
    store.write_and_sync([Delay(1, VH, "dx", "rk", b"\x80\x00", bytes(500), 9_000)]
                         + [pub(m, "q") for m in range(2, 100)])
    assert not store.checkpoint_due() and store.maybe_checkpoint() == 0
    store.write_and_sync([Undelay(1)] + [pub(m, "q") for m in range(100, 130)])
    assert store.maybe_checkpoint() > 0
    _, state = opened(d)
    assert state == whole_log(d, tmp_path) and state[1] == []


def test_checkpoints_follow_the_log_ratio(tmp_path: Path) -> None:
    """Not one per segment: the next comes once twice its size in log was written since."""
    d = tmp_path / "store"
    store, _ = opened(d, segment=2_000)
    sizes = []
    for m in range(1, 3_000, 10):
        store.write_and_sync([pub(i, "q") for i in range(m, m + 10)])
        written = store.maybe_checkpoint()
        if written:
            sizes.append((written, store.segment_count()))
    assert len(sizes) >= 3
    assert len(sizes) < store.segment_count() / 2
