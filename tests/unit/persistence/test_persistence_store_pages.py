"""A recovered queue's messages past its resident window paged in from the message store's own
segments (``store_pages.StoreTail``): nothing copied at start, every entry as the message path
loads it, exact counts once paged in, the segments kept while a queue still reads them, and
purges, damage and later appends. Real MessageStore, SpillStore, Storage and Broker."""

from __future__ import annotations

from pathlib import Path

from headrace.persistence import FsyncMode, MessageStore
from headrace.persistence.store_ops import Ack, Deliver, Publish, StoreOp
from headrace.persistence.store_pages import NOT_PINNED
from headrace.queues import Queue
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker
from headrace.server.config import Settings
from headrace.server.net.storage import Storage
from shell_ports import no_sender, shell_ports

NOW = 1000.0
PERSISTENT = encode_properties(BasicProperties(delivery_mode=2))
SEGMENT = 64 << 10


def write(directory: Path, ops: list[StoreOp]) -> None:
    store = MessageStore(directory, fsync=FsyncMode.OFF, segment_max_bytes=SEGMENT)
    store.recover()
    store.write_and_sync(ops)
    store.close()


def backlog(count: int, *, other_every: int = 0) -> list[StoreOp]:
    """``count`` messages to queue "a" with bodies of varied sizes and exchange names (so the
    body bytes a run estimates are off until read), one to "b" every ``other_every``."""
    ops: list[StoreOp] = []
    for i in range(1, count + 1):
        queue = "b" if other_every and i % other_every == 0 else "a"
        ops.append(Publish(i, "/", (queue,), "x" * (i % 7), f"k{i}", PERSISTENT, b"%d;" % i + b"z" * (i % 50),
                           1_700_000_000_000 + i))
    return ops


class Started:
    """A broker recovered from ``tmp_path/store`` with a resident window of ``resident``."""

    def __init__(self, tmp_path: Path, resident: int) -> None:
        self.storage = Storage(tmp_path, Settings(fsync="off", segment_max_bytes=SEGMENT),
                               after_group=no_sender)
        self.broker = Broker(ports=shell_ports(), store_enabled=True, resident_max_messages=resident,
                             spill_factory=self.storage.spill_factory)
        self.broker.ensure_default("/", "guest", "guest")
        vhost = self.broker.vhosts["/"]
        self.queues: dict[str, Queue] = {
            q: vhost.declare_queue(q, now=NOW, owner=None, durable=True) for q in ("a", "b")}  # type: ignore[misc]
        self.storage.recover(self.broker)
        self.store: MessageStore = self.storage.store  # type: ignore[assignment]

    def drain(self, name: str, batch: int = 37) -> list[tuple[int, bytes, bool, int, int]]:
        """Every entry of ``name`` taken in order, paging in as the pager does; (id, body,
        redelivered, delivery count, seq). Checks the byte count against the bodies as it goes."""
        queue = self.queues[name]
        out = []
        while True:
            entry = queue._backlog.pop_any() if not queue.spilled_count() or queue.resident_count else None
            if entry is None:
                if not queue.spilled_count():
                    break
                backing = queue.take_backing()
                assert backing is not None
                queue.page_in(backing.read_batch(batch, 1 << 30), queue.generation)
                lost, lost_bytes = backing.take_lost()
                queue.spill_lost(lost, lost_bytes)
                continue
            out.append((entry.message.id, entry.message.body, entry.redelivered, entry.delivery_count, entry.seq))
        return out

    def close(self) -> None:
        self.storage.close()


def test_the_spilled_part_is_paged_in_from_the_segments_in_order(tmp_path: Path) -> None:
    ops = backlog(3000, other_every=5)
    ops += [Deliver(i, "/", "a") for i in (7, 8, 9, 2001)] + [Deliver(8, "/", "a")]
    ops += [Ack(i, "/", "a") for i in range(100, 200)]
    write(tmp_path / "store", ops)
    started = Started(tmp_path, 16)
    a = started.queues["a"]
    expected = [i for i in range(1, 3001) if i % 5 and not 100 <= i < 200]
    assert a.messages_ready == len(expected) and a.resident_count == 16
    backing = a.take_backing()
    assert backing is not None and backing.disk_bytes() == 0  # nothing copied into spill files
    got = started.drain("a")
    assert [g[0] for g in got] == expected
    assert all(body.startswith(b"%d;" % mid) for mid, body, *_ in got)
    counts = {mid: (red, n) for mid, _, red, n, _ in got if n}
    assert counts == {7: (True, 1), 8: (True, 2), 9: (True, 1), 2001: (True, 1)}
    seqs = [g[4] for g in got]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert a.messages_ready == 0 and a.message_bytes_ready == 0 and a.spilled_bytes() == 0
    assert [g[0] for g in started.drain("b")] == list(range(5, 3001, 5))
    started.close()


def test_byte_counts_are_exact_once_paged_in(tmp_path: Path) -> None:
    write(tmp_path / "store", backlog(2000))
    started = Started(tmp_path, 16)
    a = started.queues["a"]
    bodies = {i: len(b"%d;" % i + b"z" * (i % 50)) for i in range(1, 2001)}
    backing = a.take_backing()
    assert backing is not None
    while a.spilled_count():  # everything resident: the count is the bodies' sum
        a.page_in(backing.read_batch(53, 1 << 30), a.generation)
        a.spill_lost(*backing.take_lost())
    assert a.message_bytes_ready == sum(bodies.values()) and a.spilled_bytes() == 0
    started.close()


def test_compaction_leaves_the_segments_a_queue_still_reads(tmp_path: Path) -> None:
    """Queue "b"'s messages are acked and the store is mostly dead, which would rewrite the head
    forward and delete it; while "a" pages in from it, the head stays, and "a" reads it all."""
    write(tmp_path / "store", backlog(3000, other_every=2))
    started = Started(tmp_path, 16)
    store = started.store
    b = started.drain("b")
    store.write_and_sync([Ack(mid, "/", "b") for mid, *_ in b])
    segments = store.segment_count()
    store.maybe_compact()
    assert store.segment_count() >= segments  # pinned: nothing rewritten, nothing deleted
    got = started.drain("a", batch=400)
    assert [g[0] for g in got] == list(range(1, 3001, 2))
    assert all(t.floor == NOT_PINNED for t in store._tails)
    store.write_and_sync([Ack(mid, "/", "a") for mid, *_ in got])
    store.maybe_compact()
    assert store.live_messages() == 0 and store.segment_count() <= 2
    started.close()


def test_a_purge_unpins_and_later_appends_follow_the_tail(tmp_path: Path) -> None:
    write(tmp_path / "store", backlog(1500))
    started = Started(tmp_path, 16)
    a = started.queues["a"]
    vhost = started.broker.vhosts["/"]
    for n in range(3):  # published after the restart: spilled behind the recovered ones
        started.broker.delivery.publish(vhost, "", "a", PERSISTENT, b"new-%d" % n, NOW)
    got = started.drain("a", batch=100)
    assert [g[0] for g in got[:1500]] == list(range(1, 1501))
    assert [g[1] for g in got[1500:]] == [b"new-0", b"new-1", b"new-2"]
    started.close()

    started = Started(tmp_path, 16)
    a = started.queues["a"]
    assert a.spilled_count() and any(t.floor != NOT_PINNED for t in started.store._tails)
    a.purge()
    assert a.messages_ready == 0 and a.spilled_count() == 0
    assert all(t.floor == NOT_PINNED for t in started.store._tails)
    started.close()


def test_a_damaged_record_is_skipped_and_counted(tmp_path: Path) -> None:
    write(tmp_path / "store", backlog(1000))
    started = Started(tmp_path, 16)
    a = started.queues["a"]
    segment = sorted((tmp_path / "store").glob("*.seg"))[-1]
    data = bytearray(segment.read_bytes())
    at = data.rfind(b"z" * 40)  # a body late in the last segment, well past the window
    data[at] ^= 0xFF
    segment.write_bytes(bytes(data))
    got = started.drain("a", batch=64)
    assert len(got) == 999 and a.stats.spill_damaged == 1
    assert a.messages_ready == 0 and a.spilled_bytes() == 0 and a.spilled_count() == 0
    started.close()


def test_a_page_in_made_stale_by_a_read_on_the_loop_brings_nothing(tmp_path: Path) -> None:
    """The pager's plan runs in a worker thread; a basic.get's read in the meantime (or a purge)
    makes it stale: applied late, it adds nothing, and no entry is lost or doubled."""
    write(tmp_path / "store", backlog(600, other_every=3))  # runs of two records
    started = Started(tmp_path, 16)
    a = started.queues["a"]
    backing = a.take_backing()
    assert backing is not None
    plan = backing.plan_read(100, 1 << 30)
    assert plan is not None and not isinstance(plan, list) and len(plan.ranges) > 1  # type: ignore[union-attr]
    a.page_in(backing.read_batch(5, 1 << 30), a.generation)
    assert backing.finish_read(plan, plan.run()) == []
    got = started.drain("a")
    assert [g[0] for g in got] == [i for i in range(1, 601) if i % 3]
    started.close()
