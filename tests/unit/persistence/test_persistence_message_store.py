"""MessageStore: what recovery rebuilds after writes, acks, compaction and damaged files."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.persistence import (
    Ack,
    Delay,
    Deliver,
    DropQueue,
    FsyncMode,
    MessageStore,
    Publish,
    Recovered,
    StoreNotOpenError,
    StoreOp,
    Undelay,
)
from headrace.persistence.records import iter_records
from headrace.persistence.segments import list_segments, zero_tail

VH = "/"


def pub(mid: int, *queues: str, body: bytes = b"", vhost: str = VH) -> Publish:
    return Publish(mid, vhost, queues, "ex", f"rk.{mid}", b"\x80\x00" + bytes([mid % 256]),
                   body or f"body-{mid}".encode(), 1_000 + mid)


def open_store(path: Path, **kw: object) -> tuple[MessageStore, Recovered]:
    store = MessageStore(path, fsync=FsyncMode.OFF, **kw)  # type: ignore[arg-type]
    return store, store.recover()


def reopen(path: Path, **kw: object) -> Recovered:
    store, rec = open_store(path, **kw)
    store.close()
    return rec


def summary(rec: Recovered) -> dict[tuple[str, str], list[tuple[int, int]]]:
    return {k: [(m.message_id, m.delivery_count) for m in v] for k, v in rec.queues.items() if v}


class Model:
    """The store's meaning, written the obvious way: the oracle for property tests."""

    def __init__(self) -> None:
        self.msgs: dict[int, dict[tuple[str, str], int]] = {}
        self.delayed: dict[int, Delay] = {}

    def apply(self, op: StoreOp) -> None:
        match op:
            case Publish():
                if op.queues:
                    self.msgs[op.message_id] = {(op.vhost, q): 0 for q in op.queues}
            case Ack():
                qs = self.msgs.get(op.message_id, {})
                qs.pop((op.vhost, op.queue), None)
                if not qs:
                    self.msgs.pop(op.message_id, None)
            case Deliver():
                qs = self.msgs.get(op.message_id, {})
                if (op.vhost, op.queue) in qs:
                    qs[(op.vhost, op.queue)] += 1
            case DropQueue():
                for mid in list(self.msgs):
                    self.msgs[mid].pop((op.vhost, op.queue), None)
                    if not self.msgs[mid]:
                        del self.msgs[mid]
            case Delay():
                self.delayed[op.message_id] = op
            case Undelay():
                self.delayed.pop(op.message_id, None)

    def summary(self) -> dict[tuple[str, str], list[tuple[int, int]]]:
        out: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for mid in sorted(self.msgs):
            for key, count in self.msgs[mid].items():
                out.setdefault(key, []).append((mid, count))
        return out


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


def test_empty_directory_recovers_to_nothing(store_dir: Path) -> None:
    rec = reopen(store_dir)
    assert rec.queues == {} and list(rec.delayed) == [] and rec.truncated_bytes == 0
    assert rec.next_message_id == 1


def test_published_messages_round_trip_every_field(store_dir: Path) -> None:
    store, _ = open_store(store_dir)
    big = os.urandom(70_000)
    store.write_and_sync([pub(1, "a", "b"), pub(2, "b", body=big)])
    store.close()
    rec = reopen(store_dir)
    assert [m.message_id for m in rec.queues[(VH, "a")]] == [1]
    assert [m.message_id for m in rec.queues[(VH, "b")]] == [1, 2]
    m = rec.queues[(VH, "b")][1]
    assert (m.exchange, m.routing_key, m.props_raw, m.body, m.timestamp_ms) == (
        "ex", "rk.2", b"\x80\x00\x02", big, 1002)
    assert not m.redelivered and m.delivery_count == 0
    assert rec.next_message_id == 3


def test_ack_removes_one_queue_and_the_message_dies_with_the_last(store_dir: Path) -> None:
    store, _ = open_store(store_dir)
    store.write([pub(1, "a", "b"), pub(2, "a"), Ack(1, VH, "a")])
    assert store.live_messages() == 2
    store.write([Ack(1, VH, "b")])
    assert store.live_messages() == 1
    store.close()
    assert summary(reopen(store_dir)) == {(VH, "a"): [(2, 0)]}


def test_flushed_acks_are_seen_by_a_reader_without_close(store_dir: Path) -> None:
    # a broker killed with SIGKILL never reaches close(): what write_and_flush handed to the OS
    # must be what the next start recovers
    store = MessageStore(store_dir, fsync=FsyncMode.BATCH)
    store.recover()
    store.write_and_sync([pub(1, "a"), pub(2, "a")])
    store.write_and_flush([Ack(1, VH, "a"), Deliver(2, VH, "a")])
    rec = reopen(store_dir)
    (m,) = rec.queues[(VH, "a")]
    assert (m.message_id, m.redelivered) == (2, True)
    store.close()


def test_deliver_records_give_redelivered_and_count_per_queue(store_dir: Path) -> None:
    store, _ = open_store(store_dir)
    store.write([pub(1, "a", "b"), Deliver(1, VH, "a"), Deliver(1, VH, "a"), Deliver(9, VH, "a")])
    store.close()
    rec = reopen(store_dir)
    (ma,) = rec.queues[(VH, "a")]
    (mb,) = rec.queues[(VH, "b")]
    assert (ma.redelivered, ma.delivery_count) == (True, 2)
    assert (mb.redelivered, mb.delivery_count) == (False, 0)


def test_a_queue_listed_twice_is_held_once(store_dir: Path) -> None:
    store, _ = open_store(store_dir)
    store.write([pub(1, "q", "q", "r"), Ack(1, VH, "q")])
    store.write([Ack(1, VH, "r")])
    assert store.live_messages() == 0
    store.close()
    assert summary(reopen(store_dir)) == {}


def test_vhosts_keep_queues_apart(store_dir: Path) -> None:
    store, _ = open_store(store_dir)
    store.write([pub(1, "q", vhost="v1"), pub(2, "q", vhost="v2"), Ack(1, "v2", "q")])
    store.close()
    assert summary(reopen(store_dir)) == {("v1", "q"): [(1, 0)], ("v2", "q"): [(2, 0)]}


def test_drop_queue_kills_earlier_messages_but_not_later_ones(store_dir: Path) -> None:
    store, _ = open_store(store_dir)
    store.write([pub(1, "q", "keep"), pub(2, "q"), DropQueue(VH, "q"), pub(3, "q")])
    assert store.live_messages() == 2
    store.close()
    assert summary(reopen(store_dir)) == {(VH, "keep"): [(1, 0)], (VH, "q"): [(3, 0)]}


def test_delay_survives_until_undelay(store_dir: Path) -> None:
    store, _ = open_store(store_dir)
    d1 = Delay(5, VH, "dx", "k", b"p", b"later", 99_000)
    d2 = Delay(6, VH, "dx", "k", b"p", b"never", 98_000)
    store.write([d1, d2, Undelay(6)])
    store.close()
    rec = reopen(store_dir)
    assert list(rec.delayed) == [d1]
    assert rec.next_message_id == 7


def test_recovery_order_is_publish_order_across_segments(store_dir: Path) -> None:
    store, _ = open_store(store_dir, segment_max_bytes=300)
    store.write([pub(i, "q") for i in range(1, 60)])
    assert store.segment_count() > 5
    store.close()
    assert [m for m, _ in summary(reopen(store_dir))[(VH, "q")]] == list(range(1, 60))


def test_writes_continue_after_recovery_in_the_same_log(store_dir: Path) -> None:
    store, _ = open_store(store_dir)
    store.write([pub(1, "q")])
    store.close()
    store, rec = open_store(store_dir)
    store.write([pub(rec.next_message_id, "q"), Ack(1, VH, "q")])
    store.close()
    assert summary(reopen(store_dir)) == {(VH, "q"): [(2, 0)]}


def test_write_before_recover_and_after_close_is_refused(store_dir: Path) -> None:
    store = MessageStore(store_dir)
    with pytest.raises(StoreNotOpenError):
        store.write([pub(1, "q")])
    store.recover()
    store.close()
    with pytest.raises(StoreNotOpenError):
        store.write([pub(1, "q")])


@pytest.mark.parametrize("mode", list(FsyncMode))
def test_every_fsync_mode_persists_on_close(store_dir: Path, mode: FsyncMode) -> None:
    store = MessageStore(store_dir, fsync=mode, segment_max_bytes=200)
    store.recover()
    store.write_and_sync([pub(i, "q") for i in range(1, 10)])
    store.write([Ack(1, VH, "q")])
    store.close()
    assert [m for m, _ in summary(reopen(store_dir))[(VH, "q")]] == list(range(2, 10))


def test_sync_makes_bytes_visible_to_a_reader(store_dir: Path) -> None:
    store, _ = open_store(store_dir)
    store.write([pub(1, "q")])
    store.sync()
    (_, path), = list_segments(store_dir)
    assert len(list(iter_records(path.read_bytes()))) == 1
    store.close()


# -- compaction --------------------------------------------------------------------------------


def test_compaction_deletes_dead_segments_and_keeps_live(store_dir: Path) -> None:
    store, _ = open_store(store_dir, segment_max_bytes=400)
    store.write([pub(i, "q") for i in range(1, 101)])
    store.write([Ack(i, VH, "q") for i in range(1, 101) if i % 10])  # keep 10, 20, ..., 100
    before_disk, before_segs = store.disk_bytes(), store.segment_count()
    freed = 0
    for _ in range(before_segs):
        freed += store.maybe_compact()
    assert freed > 0
    assert store.disk_bytes() == before_disk - freed
    assert store.segment_count() < before_segs
    assert store.disk_bytes() == sum(p.stat().st_size for _, p in list_segments(store_dir))
    store.close()
    assert summary(reopen(store_dir)) == {(VH, "q"): [(i, 0) for i in range(10, 101, 10)]}


def test_one_old_unacked_message_does_not_pin_the_disk(store_dir: Path) -> None:
    store, _ = open_store(store_dir, segment_max_bytes=1_000)
    store.write([pub(1, "slow")])
    for batch in range(50):
        ids = range(2 + batch * 20, 22 + batch * 20)
        store.write([pub(i, "fast") for i in ids])
        store.write([Ack(i, VH, "fast") for i in ids])
        store.maybe_compact()
    assert store.segment_count() <= 3
    assert store.disk_bytes() < 3_000
    store.close()
    assert summary(reopen(store_dir)) == {(VH, "slow"): [(1, 0)]}


def test_message_acked_after_compaction_is_not_resurrected(store_dir: Path) -> None:
    store, _ = open_store(store_dir, segment_max_bytes=300)
    store.write([pub(1, "a", "b"), Deliver(1, VH, "b"), Ack(1, VH, "a")])
    store.write([pub(i, "x") for i in range(2, 20)] + [Ack(i, VH, "x") for i in range(2, 20)])
    while store.maybe_compact():
        pass
    assert store.segment_count() <= 2
    store.write([Ack(1, VH, "b")])
    store.close()
    assert summary(reopen(store_dir)) == {}


def test_compacted_copy_keeps_delivery_counts_and_live_queues(store_dir: Path) -> None:
    store, _ = open_store(store_dir, segment_max_bytes=300)
    store.write([pub(1, "a", "b", "c"), Deliver(1, VH, "b"), Ack(1, VH, "a"), DropQueue(VH, "c")])
    store.write([pub(i, "x") for i in range(2, 20)] + [Ack(i, VH, "x") for i in range(2, 20)])
    first_seg = list_segments(store_dir)[0][0]
    while store.maybe_compact():
        pass
    assert list_segments(store_dir)[0][0] != first_seg
    store.close()
    assert summary(reopen(store_dir)) == {(VH, "b"): [(1, 1)]}


def test_delayed_messages_are_compacted_forward(store_dir: Path) -> None:
    store, _ = open_store(store_dir, segment_max_bytes=300)
    d = Delay(1, VH, "dx", "k", b"p", b"x" * 50, 7)
    store.write([d] + [pub(i, "x") for i in range(2, 20)] + [Ack(i, VH, "x") for i in range(2, 20)])
    while store.maybe_compact():
        pass
    assert store.segment_count() <= 2
    store.close()
    assert list(reopen(store_dir).delayed) == [d]


def test_crash_between_copy_and_delete_recovers_the_same(store_dir: Path, tmp_path: Path) -> None:
    store, _ = open_store(store_dir, segment_max_bytes=300)
    model = Model()
    ops: list[StoreOp] = [pub(1, "a", "b"), Deliver(1, VH, "a"), Ack(1, VH, "b")]
    ops += [pub(i, "x") for i in range(2, 20)] + [Ack(i, VH, "x") for i in range(2, 20)]
    for op in ops:
        model.apply(op)
    store.write_and_sync(ops)
    snapshot = tmp_path / "snap"
    shutil.copytree(store_dir, snapshot)
    while store.maybe_compact():
        pass
    store.sync()
    for _, path in list_segments(store_dir):  # the copies land, the old head is still there
        shutil.copy(path, snapshot / path.name)
    assert summary(reopen(snapshot)) == model.summary()
    store.close()


def test_next_message_id_stays_above_ids_of_deleted_segments(store_dir: Path) -> None:
    store, _ = open_store(store_dir, segment_max_bytes=200)
    store.write([pub(i, "q") for i in range(1, 30)] + [Ack(i, VH, "q") for i in range(1, 30)])
    while store.maybe_compact():
        pass
    store.close()
    assert reopen(store_dir).next_message_id == 30


# -- damage ------------------------------------------------------------------------------------


def _write_log(path: Path, ops: Sequence[StoreOp], seg_max: int) -> None:
    store = MessageStore(path, fsync=FsyncMode.OFF, segment_max_bytes=seg_max)
    store.recover()
    store.write(ops)
    store.close()


def _ops_for_damage() -> list[StoreOp]:
    ops: list[StoreOp] = []
    for i in range(1, 25):
        ops.append(pub(i, "a", "b") if i % 3 else pub(i, "a"))
        if i % 4 == 0:
            ops.append(Ack(i - 2, VH, "a"))
        if i % 5 == 0:
            ops.append(Deliver(i - 1, VH, "a"))
    return ops


def _expected_after_damage(ops: Sequence[StoreOp], store_dir: Path, keep_records: int) -> Model:
    """Model of the log when only ``keep_records`` of the last segment's records survive."""
    segs = list_segments(store_dir)
    before = sum(len(list(iter_records(p.read_bytes()))) for _, p in segs[:-1])
    model = Model()
    for op in ops[: before + keep_records]:
        model.apply(op)
    return model


@settings(max_examples=60, deadline=None)
@given(data=st.data(), corrupt=st.booleans())
def test_torn_or_corrupt_last_segment_keeps_everything_before_the_damage(
    data: st.DataObject, corrupt: bool
) -> None:
    ops = _ops_for_damage()
    with tempfile.TemporaryDirectory() as tmp:
        store_dir = Path(tmp)
        _write_log(store_dir, ops, seg_max=700)
        _, last = list_segments(store_dir)[-1]
        raw = last.read_bytes()
        at = data.draw(st.integers(0, len(raw) - 1), label="offset")
        if corrupt:
            damaged = raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1 :]
        else:
            damaged = raw[:at]
        last.write_bytes(damaged)
        keep = sum(1 for r in iter_records(raw) if r.end <= at)
        expected = _expected_after_damage(ops, store_dir, keep)
        store = MessageStore(store_dir, fsync=FsyncMode.OFF, segment_max_bytes=700)
        rec = store.recover()
        valid_end = max((r.end for r in iter_records(raw) if r.end <= at), default=0)
        # a tail of zeros alone is a syncing writer's space ahead (segments.py): cut, not damage
        assert rec.truncated_bytes == (0 if zero_tail(damaged, valid_end) else len(damaged) - valid_end)
        assert last.stat().st_size == valid_end  # the tail is cut off
        assert summary(rec) == expected.summary()
        store.write([pub(1000, "after")])  # and the log goes on after the cut
        store.close()
        assert summary(reopen(store_dir))[(VH, "after")] == [(1000, 0)]


def test_damage_in_an_older_segment_ignores_only_the_rest_of_that_segment(store_dir: Path) -> None:
    ops: list[StoreOp] = [pub(i, "q") for i in range(1, 40)]
    _write_log(store_dir, ops, seg_max=300)
    segs = list_segments(store_dir)
    _, second = segs[1]
    raw = second.read_bytes()
    records = list(iter_records(raw))
    second.write_bytes(raw[: records[1].end + 5])  # two good records, then a torn one (past its zero bytes)
    lost = {r for r in range(len(records)) if r >= 2}
    first_count = len(list(iter_records(segs[0][1].read_bytes())))
    rec = reopen(store_dir, segment_max_bytes=300)
    ids = [m for m, _ in summary(rec)[(VH, "q")]]
    dropped = {first_count + 1 + r for r in lost}
    assert ids == [i for i in range(1, 40) if i not in dropped]
    assert rec.truncated_bytes == 5


# -- the model, with compaction and restarts in between ----------------------------------------


SEG = 250  # small segments: rolls and rewrites happen within a few dozen ops


def _op_strategy() -> st.SearchStrategy[tuple[str, int, int]]:
    return st.tuples(
        st.sampled_from(["pub", "pub", "pub", "ack", "ack", "deliver", "drop", "delay", "undelay",
                         "compact", "restart"]),
        st.integers(0, 1000),
        st.integers(0, 2),
    )


def _to_op(kind: str, pick: int, q: int, next_id: int, model: Model) -> StoreOp | None:
    queues = ("q0", "q1", "q2")
    live = sorted(model.msgs)
    if kind == "pub":
        return Publish(next_id, VH, queues[: q + 1], "e", "k", b"p", bytes(40 + pick % 60))
    if kind in ("ack", "deliver") and live:
        mid = live[pick % len(live)]
        names = sorted(k[1] for k in model.msgs[mid])
        name = names[q % len(names)]
        return Ack(mid, VH, name) if kind == "ack" else Deliver(mid, VH, name)
    if kind == "drop":
        return DropQueue(VH, queues[q])
    if kind == "delay":
        return Delay(next_id, VH, "dx", "k", b"", bytes(pick % 50), pick)
    if kind == "undelay" and model.delayed:
        return Undelay(sorted(model.delayed)[pick % len(model.delayed)])
    return None


@settings(max_examples=80, deadline=None)
@given(steps=st.lists(_op_strategy(), min_size=1, max_size=200))
def test_store_matches_the_model_through_compaction_and_restarts(
    steps: list[tuple[str, int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        model = Model()
        store, rec = open_store(path, segment_max_bytes=SEG)
        next_id = rec.next_message_id
        for kind, pick, q in steps:
            if kind == "compact":
                store.maybe_compact()
                continue
            if kind == "restart":
                store.close()
                store, rec = open_store(path, segment_max_bytes=SEG)
                assert summary(rec) == model.summary()
                assert rec.next_message_id > max([*model.msgs, *model.delayed], default=0)
                next_id = max(next_id, rec.next_message_id)
                continue
            op = _to_op(kind, pick, q, next_id, model)
            if op is None:
                continue
            if isinstance(op, (Publish, Delay)):
                next_id += 1
            model.apply(op)
            store.write([op])
            assert store.live_messages() == len(model.msgs) + len(model.delayed)
        store.close()
        rec = reopen(path, segment_max_bytes=SEG)
        assert summary(rec) == model.summary()
        assert sorted(d.message_id for d in rec.delayed) == sorted(model.delayed)


@pytest.mark.parametrize("seed", range(4))
def test_long_random_walk_matches_the_model(seed: int, store_dir: Path) -> None:
    """Thousands of ops with a skewed ack pattern (old messages linger), compaction and restarts."""
    rnd = random.Random(seed)
    model = Model()
    store, rec = open_store(store_dir, segment_max_bytes=SEG * 4)
    next_id = rec.next_message_id
    rewrites_seen = 0
    for step in range(3_000):
        kind = rnd.choices(["pub", "ack", "deliver", "drop", "delay", "undelay"],
                           [10, 9, 3, 0.05, 0.5, 0.4])[0]
        pick = int(rnd.expovariate(0.05)) if rnd.random() < 0.9 else rnd.randrange(1000)
        op = _to_op(kind, pick, rnd.randrange(3), next_id, model)
        if op is not None:
            if isinstance(op, (Publish, Delay)):
                next_id += 1
            model.apply(op)
            store.write([op])
        if step % 50 == 49:
            first = list_segments(store_dir)[0][0]
            store.maybe_compact()
            rewrites_seen += list_segments(store_dir)[0][0] != first
            store.sync()
            on_disk = [p.stat().st_size for _, p in list_segments(store_dir)]
            assert (store.disk_bytes(), store.segment_count()) == (sum(on_disk), len(on_disk))
        if step % 700 == 699:
            store.close()
            store, rec = open_store(store_dir, segment_max_bytes=SEG * 4)
            assert summary(rec) == model.summary()
    assert store.live_bytes() <= store.disk_bytes()
    store.close()
    assert rewrites_seen > 0
    assert summary(reopen(store_dir)) == model.summary()


def test_always_mode_puts_each_write_on_disk_without_a_sync_call(store_dir: Path) -> None:
    store = MessageStore(store_dir, fsync=FsyncMode.ALWAYS)
    store.recover()
    store.write([pub(1, "q")])
    (_, path), = list_segments(store_dir)
    assert len(list(iter_records(path.read_bytes()))) == 1
    store.close()


def test_a_fully_live_store_is_not_rewritten(store_dir: Path) -> None:
    store, _ = open_store(store_dir, segment_max_bytes=300)
    store.write([pub(i, "q") for i in range(1, 40)])
    store.sync()
    before = [(p.name, p.stat().st_size) for _, p in list_segments(store_dir)]
    assert store.maybe_compact() == 0
    assert [(p.name, p.stat().st_size) for _, p in list_segments(store_dir)] == before
    store.close()


def test_a_store_killed_after_a_sync_recovers_its_zeros_ahead_as_no_damage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A syncing store keeps zeros past its last record (segments.py); after kill -9 they are still
    there: recovery keeps every record, reports no damage, warns of none, and writes on after them."""
    live = tmp_path / "live"
    store = MessageStore(live)  # fsync on: each group commit keeps the zeros ahead
    store.recover()
    store.write_and_sync([pub(i, "q") for i in range(1, 21)])
    store.write_and_sync([Ack(3, VH, "q")])
    _, segment = list_segments(live)[-1]
    assert zero_tail(segment.read_bytes(), 0) is False and segment.read_bytes().endswith(bytes(1024))
    killed = tmp_path / "killed"
    shutil.copytree(live, killed)  # the files as a kill -9 leaves them: nothing closed
    store.close()
    with caplog.at_level("WARNING", logger="headrace"):
        again = MessageStore(killed)
        rec = again.recover()
    assert rec.truncated_bytes == 0 and not [r for r in caplog.records if "torn" in r.getMessage()]
    assert [m for m, _ in summary(rec)[(VH, "q")]] == [i for i in range(1, 21) if i != 3]
    again.write_and_sync([pub(21, "q")])  # on after the last record, not after the zeros
    again.close()
    assert [m for m, _ in summary(reopen(killed))[(VH, "q")]] == [i for i in range(1, 22) if i != 3]


def test_io_counts_follow_writes_syncs_and_recovered_reads(tmp_path: Path) -> None:
    """The figures the management API's node I/O statistics show: write calls and bytes, fsyncs,
    message records written, position records (acks, deliveries), messages read back at recovery."""
    store = MessageStore(tmp_path, fsync=FsyncMode.BATCH)
    store.recover()
    assert store.io_counts() == {"writes": 0, "write_bytes": 0, "syncs": 0, "message_writes": 0,
                                 "message_reads": 0, "index_writes": 0}
    store.write_and_sync([pub(1, "q"), pub(2, "q")])
    store.write_and_flush([Deliver(1, VH, "q"), Ack(1, VH, "q")])
    counts = store.io_counts()
    assert counts["message_writes"] == 2 and counts["index_writes"] == 2
    assert counts["writes"] == 2 and counts["write_bytes"] == store.disk_bytes() > 0
    assert counts["syncs"] >= 1
    store.close()
    store, rec = open_store(tmp_path)
    assert store.io_counts()["message_reads"] == 0
    assert [m.message_id for q in rec.queues.values() for m in q] == [2]  # read as iterated
    assert store.io_counts()["message_reads"] == 1
    store.write([pub(3, "q")])  # the first write ends recovery's reads; their count stays
    assert store.io_counts()["message_reads"] == 1
    store.close()
