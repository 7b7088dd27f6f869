"""SpillStore / SpillBacking: FIFO on disk, bounded reads, cleanup, a writer and a reader racing."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.persistence import SpillBacking, SpillClosedError, SpillStore
from headrace.persistence.segments import list_segments
from headrace.queues.backing import Backing
from headrace.queues.message import Message, QueueEntry


def entry(seq: int, body: bytes | None = None) -> QueueEntry:
    msg = Message(seq * 10, "ex", f"rk.{seq}", b"\x90\x00\x01", body if body is not None else
                  f"m{seq}".encode())
    return QueueEntry(seq, msg)


def seqs(entries: list[QueueEntry]) -> list[int]:
    return [e.seq for e in entries]


@pytest.fixture
def store(tmp_path: Path) -> SpillStore:
    s = SpillStore(tmp_path / "spill", segment_max_bytes=1_000)
    yield s
    s.close()


def drain(b: SpillBacking, count: int = 7, max_bytes: int = 1 << 30) -> list[QueueEntry]:
    out: list[QueueEntry] = []
    while batch := b.read_batch(count, max_bytes):
        out += batch
    return out


def test_backing_satisfies_the_queue_protocol(store: SpillStore) -> None:
    assert isinstance(store.backing("q"), Backing)


def test_every_field_round_trips_and_headers_are_not_kept(store: SpillStore) -> None:
    b = store.backing("q")
    msg = Message(7, "amq.topic", "a.b.c", b"\xff\xff\x01", b"\x00body", persistent=True,
                  priority=9, expiration_ms=1500, headers={"x": 1}, timestamp=1234.5)
    b.append([QueueEntry(-3, msg, redelivered=True, delivery_count=4, expires_at=99.25),
              QueueEntry(4, Message(8, "", "", b"", b""))])
    got, plain = b.read_batch(10, 1 << 20)
    assert (got.seq, got.redelivered, got.delivery_count, got.expires_at) == (-3, True, 4, 99.25)
    m = got.message
    assert (m.id, m.exchange, m.routing_key, m.props_raw, m.body, m.persistent, m.priority,
            m.expiration_ms, m.headers, m.timestamp) == (
        7, "amq.topic", "a.b.c", b"\xff\xff\x01", b"\x00body", True, 9, 1500, None, 1234.5)
    assert plain.expires_at is None and plain.message.expiration_ms is None
    assert not plain.redelivered and not plain.message.persistent


def test_reads_come_back_in_append_order_across_files(store: SpillStore) -> None:
    b = store.backing("q")
    for start in range(0, 300, 30):
        b.append([entry(i) for i in range(start, start + 30)])
    assert b.depth() == 300
    assert b.byte_depth() == sum(len(f"m{i}") for i in range(300))
    assert seqs(drain(b)) == list(range(300))
    assert b.depth() == 0 and b.byte_depth() == 0


@pytest.mark.parametrize(
    ("sizes", "max_count", "max_bytes", "expected"),
    [
        ([10, 10, 10], 2, 1000, 2),  # count bound
        ([10, 10, 10], 10, 25, 2),  # byte bound stops before the entry that would cross it
        ([10, 10, 10], 10, 30, 3),  # exactly at the bound is allowed
        ([500, 10], 10, 100, 1),  # a body larger than the bound still comes out alone
        ([10, 10], 0, 1000, 0),  # nothing asked, nothing taken
    ],
)
def test_read_batch_bounds(store: SpillStore, sizes: list[int], max_count: int, max_bytes: int,
                           expected: int) -> None:
    b = store.backing("q")
    b.append([entry(i, bytes(n)) for i, n in enumerate(sizes)])
    got = b.read_batch(max_count, max_bytes)
    assert seqs(got) == list(range(expected))
    assert b.depth() == len(sizes) - expected
    assert b.byte_depth() == sum(sizes[expected:])


def test_interleaved_appends_and_reads_keep_fifo(store: SpillStore) -> None:
    b = store.backing("q")
    seen: list[int] = []
    n = 0
    for round_ in range(40):
        b.append([entry(n + i) for i in range(round_ % 7 + 1)])
        n += round_ % 7 + 1
        seen += seqs(b.read_batch(3, 1 << 20))
    seen += seqs(drain(b))
    assert seen == list(range(n))


def test_record_larger_than_a_read_chunk(store: SpillStore) -> None:
    b = store.backing("q")
    big = bytes(range(256)) * 5000  # 1.28 MB, more than one read chunk
    b.append([entry(1), entry(2, big), entry(3)])
    got = drain(b, count=10)
    assert seqs(got) == [1, 2, 3] and got[1].message.body == big


def test_read_files_are_deleted_and_a_drained_backing_holds_no_file(store: SpillStore,
                                                                   tmp_path: Path) -> None:
    b = store.backing("q")
    b.append([entry(i, bytes(100)) for i in range(50)])  # ~8 files of 1000 bytes
    (qdir,) = (tmp_path / "spill").iterdir()
    files_before = len(list_segments(qdir))
    assert files_before > 3
    b.read_batch(25, 1 << 20)
    assert 0 < len(list_segments(qdir)) < files_before
    drain(b)
    assert list_segments(qdir) == [] and b.disk_bytes() == 0
    b.append([entry(99)])
    assert seqs(drain(b)) == [99]


def test_drop_forgets_everything_and_the_backing_stays_usable(store: SpillStore) -> None:
    b = store.backing("q")
    b.append([entry(i) for i in range(100)])
    b.read_batch(5, 1 << 20)
    b.drop()
    assert (b.depth(), b.byte_depth(), b.disk_bytes()) == (0, 0, 0)
    assert b.read_batch(10, 1 << 20) == []
    b.append([entry(1000)])
    assert seqs(drain(b)) == [1000]


def test_close_deletes_the_directory_and_refuses_appends(store: SpillStore, tmp_path: Path) -> None:
    b = store.backing("q")
    b.append([entry(1)])
    b.close()
    assert list((tmp_path / "spill").iterdir()) == []
    assert b.read_batch(1, 100) == []
    with pytest.raises(SpillClosedError):
        b.append([entry(2)])


def test_names_are_sanitised_and_each_backing_is_separate(store: SpillStore,
                                                          tmp_path: Path) -> None:
    b1 = store.backing("../../etc/passwd")
    b2 = store.backing("../../etc/passwd")
    b3 = store.backing("ünïcode queue/with spaces" * 10)
    for i, b in enumerate((b1, b2, b3)):
        b.append([entry(i)])
    dirs = sorted(p.name for p in (tmp_path / "spill").iterdir())
    assert len(dirs) == 3
    assert all(set(d) <= set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ._-")
               and len(d) <= 60 for d in dirs)
    assert [seqs(b.read_batch(5, 100)) for b in (b1, b2, b3)] == [[0], [1], [2]]


def test_store_wipes_its_old_files_at_start_and_nothing_else(tmp_path: Path) -> None:
    first = SpillStore(tmp_path / "spill")
    first.backing("q").append([entry(i) for i in range(10)])
    (tmp_path / "spill" / "keep-me.txt").write_text("not ours")
    second = SpillStore(tmp_path / "spill")
    assert [p.name for p in (tmp_path / "spill").iterdir()] == ["keep-me.txt"]
    assert second.disk_bytes() == 0


def _second(raw: bytearray) -> int:
    """Offset of a spill file's second record."""
    return 9 + int.from_bytes(raw[:4], "big")


def _damage(tmp_path: Path, change) -> None:
    (qdir,) = (tmp_path / "spill").iterdir()
    (_, path), *_ = list_segments(qdir)
    raw = bytearray(path.read_bytes())
    path.write_bytes(bytes(change(raw)))


def test_a_record_with_a_bad_checksum_is_skipped_and_counted(store: SpillStore,
                                                              tmp_path: Path) -> None:
    b = store.backing("q")
    b.append([entry(i) for i in range(3)])
    assert seqs(b.read_batch(1, 1 << 20)) == [0]  # the first read flushes the buffer to the file

    def flip(raw: bytearray) -> bytearray:
        raw[-2] ^= 0xFF  # inside the last record's body
        return raw

    _damage(tmp_path, flip)
    assert seqs(drain(b)) == [1]
    assert b.damaged == 1 and b.take_lost() == (1, 2) and b.take_lost() == (0, 0)
    assert b.depth() == 0 and b.byte_depth() == 0


@pytest.mark.parametrize("change", [
    lambda raw: raw[:-3],  # cut short by someone else
    lambda raw: raw[:_second(raw)] + b"\xff" * 9 + raw[_second(raw) + 9:],  # garbage header
], ids=["cut-short", "bad-header"])
def test_an_unreadable_rest_of_file_is_skipped_and_the_next_file_still_read(
        store: SpillStore, tmp_path: Path, change) -> None:
    b = store.backing("q")  # files of ~1000 bytes: 30 entries span several files
    b.append([entry(i, b"x" * 60) for i in range(30)])
    assert seqs(b.read_batch(1, 1 << 20)) == [0]
    _damage(tmp_path, change)
    got = seqs(drain(b))
    assert got == sorted(got) and got[-1] == 29  # later files are read on
    lost, lost_bytes = b.take_lost()
    assert len(got) + 1 + lost == 30 and lost_bytes == 60 * lost and lost >= 1
    assert b.damaged >= 1 and b.depth() == 0 and b.byte_depth() == 0


def test_reads_run_in_a_thread_while_the_owner_appends_without_loss(store: SpillStore) -> None:
    """The pager's shape: plan on the owner's thread, read in another thread while the owner
    keeps appending to the same files, apply on the owner's thread."""
    b = store.backing("q")
    total = 8_000
    got: list[int] = []
    appended = 0
    with ThreadPoolExecutor(1) as pool:
        while len(got) < total:
            if appended < total:
                b.append([entry(i, bytes(i % 40)) for i in range(appended, appended + 50)])
                appended += 50
            plan = b.plan_read(97, 4096)
            if plan is None:
                continue
            if isinstance(plan, list):
                got += seqs(plan)
                continue
            running = pool.submit(plan.run)
            if appended < total:  # the owner writes on while the thread reads
                b.append([entry(i, bytes(i % 40)) for i in range(appended, appended + 50)])
                appended += 50
            got += seqs(b.finish_read(plan, running.result()))
    assert got == list(range(total))
    assert b.depth() == 0 and b.byte_depth() == 0


def test_a_read_planned_before_a_drop_or_a_direct_read_is_stale(store: SpillStore) -> None:
    b = store.backing("q")
    b.append([entry(i) for i in range(100)])
    plan = b.plan_read(10, 1 << 20)
    assert not isinstance(plan, list) and plan is not None
    result = plan.run()
    assert seqs(b.read_batch(5, 1 << 20)) == [0, 1, 2, 3, 4]  # read directly meanwhile
    assert b.finish_read(plan, result) == []  # not taken twice
    plan = b.plan_read(10, 1 << 20)
    result = plan.run()
    b.drop()
    assert b.finish_read(plan, result) == [] and b.depth() == 0
    b.append([entry(7)])
    assert seqs(drain(b)) == [7]


def test_memory_stays_bounded_while_many_entries_are_spilled(tmp_path: Path) -> None:
    store = SpillStore(tmp_path / "big", segment_max_bytes=1 << 20)
    b = store.backing("q")
    body = bytes(256)
    batch = [entry(i, body) for i in range(1000)]
    tracemalloc.start()
    try:
        for _ in range(40):  # 40k entries, ~12 MB on disk
            b.append(batch)
        current, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert b.depth() == 40_000
    assert current < 1_000_000  # buffers and the file list, nothing per entry
    assert seqs(b.read_batch(3, 1 << 20)) == [0, 1, 2]
    store.close()


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(1, 30), st.integers(0, 700)),
                    max_size=60))
def test_any_mix_of_appends_and_bounded_reads_is_a_fifo(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[bool, int, int]]
) -> None:
    s = SpillStore(tmp_path_factory.mktemp("spill"), segment_max_bytes=600)
    b = s.backing("q")
    expected: list[int] = []
    got: list[int] = []
    n = 0
    for is_append, count, size in ops:
        if is_append:
            b.append([entry(n + i, bytes(size)) for i in range(count)])
            expected += range(n, n + count)
            n += count
        else:
            batch = b.read_batch(count, size)
            assert len(batch) <= count
            assert sum(len(e.message.body) for e in batch) <= size or len(batch) == 1
            got += seqs(batch)
        assert b.depth() == len(expected) - len(got)
    got += seqs(drain(b))
    assert got == expected
    s.close()
