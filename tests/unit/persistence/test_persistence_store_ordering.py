"""What the broker writes to the message store and in which order: a message discarded while it is
being published, dead-lettering, purges of spilled queues, delivery counts, records nobody will ack,
and the group-commit cap. Real Broker, MessageStore, SpillStore and Storage; no mocks."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
import trio

from headrace.exchanges import DestinationKind
from headrace.persistence import FsyncMode, MessageStore, SpillStore
from headrace.persistence.store_ops import Ack, Delay, Deliver, Publish, PurgeQueue, StoreOp
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Broker, Settle
from headrace.server.config import Settings
from headrace.server.net.storage import Storage
from shell_ports import no_sender, shell_ports

NOW = 1000.0  # the broker time the calls below pass

PERSISTENT = encode_properties(BasicProperties(delivery_mode=2))


def make_broker(**kw: object) -> Broker:
    broker = Broker(ports=shell_ports(), store_enabled=True, **kw)  # type: ignore[arg-type]
    broker.ensure_default("/", "guest", "guest")
    return broker


def write(directory: Path, ops: list[StoreOp], segment_max_bytes: int = 32 << 20) -> None:
    store = MessageStore(directory, fsync=FsyncMode.OFF, segment_max_bytes=segment_max_bytes)
    store.recover()
    store.write_and_sync(ops)
    store.close()


def recovered(directory: Path) -> dict[tuple[str, str], list]:
    store = MessageStore(directory, fsync=FsyncMode.OFF)
    try:
        return store.recover().queues
    finally:
        store.close()


def kinds(ops: list[StoreOp]) -> list[str]:
    return [type(op).__name__ for op in ops]


@pytest.mark.parametrize("arguments", [{"x-max-length-bytes": 10}, {"x-max-length": 0}])
def test_message_dropped_by_its_own_enqueue_does_not_come_back(tmp_path: Path, arguments: dict) -> None:
    broker = make_broker()
    vhost = broker.vhosts["/"]
    vhost.declare_queue("d", now=NOW, owner=None, durable=True, arguments=arguments)
    vhost.broker.delivery.publish(vhost, "", "d", PERSISTENT, b"x" * 100, NOW)
    assert vhost.queues["d"].messages_ready == 0
    ops, _ = broker.take_store_ops()
    assert kinds(ops) == ["Publish", "Ack"]  # the Ack after the Publish it kills
    write(tmp_path, ops)
    assert recovered(tmp_path) == {}


def test_drop_head_of_older_message_still_acks_it(tmp_path: Path) -> None:
    broker = make_broker()
    vhost = broker.vhosts["/"]
    vhost.declare_queue("d", now=NOW, owner=None, durable=True, arguments={"x-max-length": 1})
    vhost.broker.delivery.publish(vhost, "", "d", PERSISTENT, b"first", NOW)
    vhost.broker.delivery.publish(vhost, "", "d", PERSISTENT, b"second", NOW)
    write(tmp_path, broker.take_store_ops()[0])
    assert [m.body for m in recovered(tmp_path)[("/", "d")]] == [b"second"]


def test_dead_letter_copy_is_recorded_before_the_source_ack(tmp_path: Path) -> None:
    broker = make_broker()
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("dlx", "fanout", durable=True)
    vhost.declare_queue("dead", now=NOW, owner=None, durable=True)
    vhost.bind("dlx", "dead", DestinationKind.QUEUE, "", None)
    vhost.declare_queue("src", now=NOW, owner=None, durable=True, arguments={"x-dead-letter-exchange": "dlx"})
    vhost.broker.delivery.publish(vhost, "", "src", PERSISTENT, b"m", NOW)
    src = vhost.queues["src"]
    entry = src.get(NOW, no_ack=False, owner=object())
    assert entry is not None
    broker.take_store_ops()
    broker.delivery.settle(vhost, [(src, entry)], Settle.REJECT, NOW)
    ops, _ = broker.take_store_ops()
    assert kinds(ops) == ["Publish", "Ack"]
    assert isinstance(ops[0], Publish) and ops[0].queues == ("dead",)
    assert isinstance(ops[1], Ack) and ops[1].queue == "src"
    # a crash that tears the group after the DLX copy loses nothing: the source is still live
    write(tmp_path, ops[:1])
    store = MessageStore(tmp_path, fsync=FsyncMode.OFF)
    assert store.recover().queues[("/", "dead")][0].body == b"m"
    store.close()


def test_drop_head_dead_letter_of_the_new_message_keeps_order(tmp_path: Path) -> None:
    broker = make_broker()
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("dlx", "fanout", durable=True)
    vhost.declare_queue("dead", now=NOW, owner=None, durable=True)
    vhost.bind("dlx", "dead", DestinationKind.QUEUE, "", None)
    vhost.declare_queue("src", now=NOW, owner=None, durable=True,
                        arguments={"x-dead-letter-exchange": "dlx", "x-max-length": 0})
    vhost.broker.delivery.publish(vhost, "", "src", PERSISTENT, b"m", NOW)
    ops, _ = broker.take_store_ops()
    assert kinds(ops) == ["Publish", "Publish", "Ack"]
    write(tmp_path, ops)
    rec = recovered(tmp_path)
    assert list(rec) == [("/", "dead")] and rec[("/", "dead")][0].body == b"m"


def test_purge_of_a_spilled_queue_is_one_record_and_spares_unacked(tmp_path: Path) -> None:
    spill = SpillStore(tmp_path / "spill")
    broker = make_broker(resident_max_messages=100,
                         spill_factory=lambda v, q: spill.backing(f"{v}\x00{q}"))
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("p", now=NOW, owner=None, durable=True)
    for i in range(5_000):
        vhost.broker.delivery.publish(vhost, "", "p", PERSISTENT, b"%d" % i, NOW)
    assert queue.spilled_count() > 4_000
    owner = object()
    held = [queue.get(NOW, no_ack=False, owner=owner) for _ in range(3)]
    assert all(held)
    ops, _ = broker.take_store_ops()
    assert vhost.purge_queue("p", None) == 4_997
    assert queue.messages_ready == 0 and queue.spilled_count() == 0
    purge_ops, _ = broker.take_store_ops()
    assert kinds(purge_ops) == ["PurgeQueue"]  # not one Ack per message read back from the spill
    assert isinstance(purge_ops[0], PurgeQueue)
    assert sorted(purge_ops[0].keep) == sorted(e.message.id for e in held if e)
    assert spill.disk_bytes() == 0
    broker.delivery.settle(vhost, [(queue, held[0])], Settle.ACK, NOW)  # acked after the purge
    broker.delivery.settle(vhost, [(queue, held[1])], Settle.REQUEUE, NOW)  # back in the queue
    late = broker.take_store_ops()[0]
    vhost.broker.delivery.publish(vhost, "", "p", PERSISTENT, b"after", NOW)
    write(tmp_path / "store", ops + purge_ops + late + broker.take_store_ops()[0])
    bodies = [m.body for m in recovered(tmp_path / "store")[("/", "p")]]
    assert bodies == [b"1", b"2", b"after"]  # unacked at the purge: kept; the rest gone
    spill.close()


def test_purge_record_of_kept_messages_only_is_not_written(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, fsync=FsyncMode.OFF)
    store.recover()
    store.write([Publish(1, "/", ("q",), "", "q", b"", b"a")])
    size = store.disk_bytes()
    store.write([PurgeQueue("/", "q", (1,))])
    assert store.disk_bytes() == size
    store.write([PurgeQueue("/", "q", ())])
    assert store.live_messages() == 0
    store.close()


def test_delivery_count_survives_restart(tmp_path: Path) -> None:
    broker = make_broker()
    vhost = broker.vhosts["/"]
    queue = vhost.declare_queue("c", now=NOW, owner=None, durable=True, arguments={"x-delivery-limit": 5})
    vhost.broker.delivery.publish(vhost, "", "c", PERSISTENT, b"m", NOW)
    for _ in range(3):  # as a channel does for every basic.get / delivery
        entry = broker.delivery.get(vhost, queue, NOW, no_ack=False, owner=object())
        assert entry is not None
        queue.requeue(entry)
    ops, _ = broker.take_store_ops()
    assert kinds(ops).count("Deliver") == 3
    write(tmp_path / "store", ops)
    settings = Settings(fsync="off")
    storage = Storage(tmp_path, settings, after_group=no_sender)
    again = make_broker()
    again.vhosts["/"].declare_queue("c", now=NOW, owner=None, durable=True, arguments={"x-delivery-limit": 5})
    storage.recover(again)
    queue = again.vhosts["/"].queues["c"]
    entry = queue.get(NOW, no_ack=False, owner=object())
    assert entry is not None and entry.redelivered and entry.delivery_count == 3
    storage.close()


def test_orphaned_records_are_killed_at_recovery(tmp_path: Path) -> None:
    write(tmp_path / "store", [
        Publish(1, "/", ("gone-exclusive",), "", "k", b"", b"x" * 100),
        Delay(2, "/", "nondurable-delayed", "k", b"", b"y", 10**13),
        Publish(3, "/", ("kept",), "", "k", b"", b"z"),
    ])
    storage = Storage(tmp_path, Settings(fsync="off"), after_group=no_sender)
    broker = make_broker()
    broker.vhosts["/"].declare_queue("kept", now=NOW, owner=None, durable=True)
    storage.recover(broker)
    assert storage.store.live_messages() == 1
    storage.close()
    # and they stay dead: a queue of that name declared later does not get the old message
    storage = Storage(tmp_path, Settings(fsync="off"), after_group=no_sender)
    broker = make_broker()
    for name in ("gone-exclusive", "kept"):
        broker.vhosts["/"].declare_queue(name, now=NOW, owner=None, durable=True)
    storage.recover(broker)
    assert broker.vhosts["/"].queues["gone-exclusive"].messages_ready == 0
    assert broker.vhosts["/"].queues["kept"].messages_ready == 1
    storage.close()


def test_delayed_messages_of_a_non_durable_exchange_are_not_stored() -> None:
    broker = make_broker()
    vhost = broker.vhosts["/"]
    args = {"x-delayed-type": "direct"}
    vhost.declare_exchange("tmp-delay", "x-delayed-message", durable=False, arguments=args)
    vhost.declare_exchange("dur-delay", "x-delayed-message", durable=True, arguments=args)
    props = encode_properties(BasicProperties(delivery_mode=2, headers={"x-delay": 60_000}))
    vhost.broker.delivery.publish(vhost, "tmp-delay", "k", props, b"t", NOW)
    assert broker.take_store_ops()[0] == []
    vhost.broker.delivery.publish(vhost, "dur-delay", "k", props, b"d", NOW)
    assert kinds(broker.take_store_ops()[0]) == ["Delay"]
    assert len(vhost.delayed) == 2


def test_group_commit_takes_at_most_fsync_batch_max_ops(tmp_path: Path) -> None:
    storage = Storage(tmp_path, Settings(fsync="batch", fsync_batch_max=10), after_group=no_sender)
    storage.store.recover()
    broker = make_broker()
    vhost = broker.vhosts["/"]
    vhost.declare_queue("b", now=NOW, owner=None, durable=True)
    queue = vhost.queues["b"]
    for i in range(24):
        vhost.broker.delivery.publish(vhost, "", "b", PERSISTENT, b"%d" % i, NOW)
    entry = broker.delivery.get(vhost, queue, NOW, no_ack=False, owner=object())  # a ticketless op at the end
    assert entry is not None
    groups: list[tuple[int, int]] = []

    async def flush_all() -> None:
        while broker.store_backlog:
            await storage.flusher.flush_once(broker, None)
            groups.append((storage.store.live_messages(), broker.synced_ticket))

    trio.run(flush_all)
    # each group is covered by its own fsync and releases exactly the confirms it holds
    assert groups == [(10, 10), (20, 20), (24, 24)]
    storage.close()
    rec = recovered(tmp_path / "store")
    assert rec[("/", "b")][0].delivery_count == 1 and len(rec[("/", "b")]) == 24


def test_recovery_streams_bodies_into_the_queue_and_its_spill(tmp_path: Path) -> None:
    total, size = 3_000, 4_096
    write(tmp_path / "store", [Publish(i, "/", ("big",), "", "big", b"", b"%06d" % i + b"x" * size)
                               for i in range(1, total + 1)], segment_max_bytes=1 << 20)
    # a segment is read whole during the replay: that, not the backlog, bounds the transient part
    storage = Storage(tmp_path, Settings(fsync="off", segment_max_bytes=1 << 20), after_group=no_sender)
    broker = make_broker(resident_max_messages=100, spill_factory=storage.spill_factory)
    queue = broker.vhosts["/"].declare_queue("big", now=NOW, owner=None, durable=True)
    tracemalloc.start()
    try:
        storage.recover(broker)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert queue.messages_ready == total and queue.resident_count == 100
    assert peak < total * size // 2, peak  # the bodies (12 MB) were never all in memory at once
    bodies = []
    while (entry := queue.get(NOW, no_ack=True, owner=None)) is not None or queue.spilled_count():
        if entry is None:
            queue.page_in(queue.take_backing().read_batch(500, 1 << 30), queue.generation)
            continue
        bodies.append(int(entry.message.body[:6]))
    assert bodies == list(range(1, total + 1))
    storage.close()


def _entries_after_recovery(tmp_path: Path, name: str, resident: int, arguments: dict) -> list[tuple]:
    """Every entry of queue ``name`` recovered from ``tmp_path/store``, paged back in order."""
    storage = Storage(tmp_path, Settings(fsync="off"), after_group=no_sender)
    broker = make_broker(resident_max_messages=resident, spill_factory=storage.spill_factory)
    queues = {q: broker.vhosts["/"].declare_queue(q, now=NOW, owner=None, durable=True, arguments=arguments)
              for q in ("a", "b")}
    storage.recover(broker)
    queue = queues[name]
    out = []
    while (entry := queue._backlog.pop_any()) is not None or queue.spilled_count():
        if entry is None:
            queue.page_in(queue.take_backing().read_batch(7, 1 << 30), queue.generation)
            continue
        m = entry.message
        out.append((m.id, m.exchange, m.routing_key, m.props_raw, m.body, m.persistent, m.priority,
                    m.expiration_ms, m.timestamp, entry.redelivered, entry.delivery_count, entry.expires_at))
    storage.close()
    return out


@pytest.mark.parametrize("arguments", [{}, {"x-message-ttl": 60_000}])
def test_recovery_spills_past_the_window_exactly_what_the_message_path_loads(tmp_path: Path,
                                                                            arguments: dict) -> None:
    """Past the resident window recovery leaves the messages in the store's segments
    (``Queue.add_recovered_spilled``, ``store_pages.StoreTail``); paged in from there, every
    entry equals what loading each message into the queue gives: ids, keys, properties (priority
    and expiration read where present), bodies, timestamps, delivery counts, and expiry under the
    queue's TTL."""
    variants = [
        BasicProperties(delivery_mode=2),
        BasicProperties(delivery_mode=2, priority=7),
        BasicProperties(delivery_mode=2, expiration="90000", headers={"h": 1}),
        BasicProperties(delivery_mode=2, expiration="soon"),  # not a number: no expiration
        BasicProperties(delivery_mode=2, content_type="text/plain", priority=0, expiration="30000"),
        BasicProperties(),
    ]
    ops: list[StoreOp] = []
    for i in range(1, 121):
        queues = ("a", "b") if i % 4 == 0 else ("a",)  # some records name two queues
        ops.append(Publish(i, "/", queues, "ex-%d" % (i % 3), "rk.é.%d" % i,
                           encode_properties(variants[i % len(variants)]), b"body-%d" % i * (i % 5),
                           1_700_000_000_000 + i * 7))
        if i % 3 == 0:
            ops.append(Deliver(i, "/", "a"))
        if i % 9 == 0:
            ops.append(Deliver(i, "/", "a"))
        if i % 10 == 0:
            ops.append(Ack(i, "/", "a"))
    write(tmp_path / "store", ops)
    for name in ("a", "b"):
        loaded = _entries_after_recovery(tmp_path, name, 1_000_000, arguments)  # all through Message
        spilled = _entries_after_recovery(tmp_path, name, 5, arguments)  # 5 resident, the rest paged in from the store
        assert len(loaded) == (108 if name == "a" else 30)
        assert spilled == loaded
        if name == "a":  # the cases the copy must get right are all there
            assert {e[10] for e in loaded} == {0, 1, 2} and {e[6] for e in loaded} == {0, 7}
            assert {e[7] for e in loaded} == {None, 90_000, 30_000}
            assert all(e[11] is not None for e in loaded) if arguments else \
                {e[11] is None for e in loaded} == {True, False}
