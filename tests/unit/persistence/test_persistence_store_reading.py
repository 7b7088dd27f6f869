"""Recovered queues read back as runs of the index's chunks (``store_reading.py``): every way of
reading a queue (by index, by slice, iterating, ``rows`` from any start) gives the same messages in
publish order, and a one-queue backlog costs one run per chunk, not a position per message."""

from __future__ import annotations

from pathlib import Path

from headrace.persistence import Ack, Deliver, FsyncMode, MessageStore, Publish
from headrace.persistence.store_index import CHUNK
from headrace.persistence.store_reading import Runs

VH = "/"


def pub(mid: int, *queues: str) -> Publish:
    return Publish(mid, VH, queues, "ex", f"rk.{mid}", b"\x80\x00", b"%d" % mid, 1_000 + mid)


def test_every_read_of_a_recovered_queue_agrees(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync=FsyncMode.OFF)
    store.recover()
    ops: list[object] = []
    for m in range(1, 3 * CHUNK):
        ops.append(pub(m, "a") if m % 3 else pub(m, "b") if m % 2 else pub(m, "a", "b"))
    store.write_and_sync(ops)  # type: ignore[arg-type]
    store.write_and_sync([Ack(m, VH, "a") for m in range(1, 3 * CHUNK, 7)]
                         + [Deliver(6, VH, "b"), Deliver(6, VH, "b")])
    store.close()
    rec = MessageStore(tmp_path, fsync=FsyncMode.OFF).recover()
    for key, q in rec.queues.items():
        listed = [(m.message_id, m.delivery_count, m.body) for m in q]
        assert [m for m, _, _ in listed] == sorted(m for m, _, _ in listed)
        assert [(m.message_id, m.delivery_count, m.body) for m in q[5:40]] == listed[5:40]
        assert (q[-1].message_id, q[0].message_id) == (listed[-1][0], listed[0][0])
        for start in (0, 1, 17, len(q) // 2, len(q) - 1, len(q)):
            rows = [(mid, count, bytes(tail[-len(body):]))
                    for (mid, count, _, tail, *_), (_, _, body) in zip(q.rows(start), listed[start:], strict=True)]
            assert rows == listed[start:], (key, start)
    b = {m.message_id: m.delivery_count for m in rec.queues[(VH, "b")]}
    assert b[6] == 2 and not {1, 8, 22} & {m.message_id for m in rec.queues[(VH, "a")]}


def test_a_one_queue_backlog_is_one_run_per_chunk(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync=FsyncMode.OFF)
    store.recover()
    store.write_and_sync([pub(m, "q") for m in range(1, 4 * CHUNK + 1)])
    store.close()
    q = MessageStore(tmp_path, fsync=FsyncMode.OFF).recover().queues[(VH, "q")]
    runs = q._runs  # noqa: SLF001 - the layout is what this test is about
    assert len(q) == 4 * CHUNK and len(runs.ends) == 4


def test_runs_join_what_follows_and_find_each_entry() -> None:
    runs = Runs()
    runs.add(0, 0, 5)
    runs.add(0, 5, 1)  # follows: the same run
    runs.add(0, 9, 2)
    runs.add(3, 0, 1)
    assert list(runs.ends) == [6, 8, 9] and len(runs) == 9
    assert [runs.at(n) for n in (0, 5, 6, 7, 8)] == [(0, 0), (0, 5), (0, 9), (0, 10), (3, 0)]
