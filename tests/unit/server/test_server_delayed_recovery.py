"""Recovered persistent delayed messages into the schedule (server/broker/delayed.py
``add_recovered``): Delay records written to a real message store, read back in batches
(``LiveDelays.batches``) and placed into real bucket files; time passed in."""

from __future__ import annotations

import random
from pathlib import Path

from headrace.persistence import MessageStore
from headrace.persistence.store_ops import Delay, Undelay
from headrace.server.broker.delayed import DelayedMessage, DelayedMessages
from session_support import NOW, durable_broker

T0 = 1_000_000.0


def recovered(tmp_path: Path, dues: list[float], body: bytes = b"x" * 100) -> MessageStore:
    """A store holding one Delay record per due time (ids from 1, in that order), reopened."""
    store = MessageStore(tmp_path / "store", segment_max_bytes=1 << 20)
    store.recover()
    store.write_and_sync([Delay(i + 1, "/", "dx", f"k{i}", b"\x00\x01", body, round(due * 1000))
                          for i, due in enumerate(dues)])
    store.close()
    return MessageStore(tmp_path / "store", segment_max_bytes=1 << 20)


def place(store: MessageStore, d: DelayedMessages, now: float) -> None:
    for batch in store.recover().delayed.batches():
        for (_, exchange, elen), rows in batch.items():
            d.add_recovered(exchange, elen, rows, now=now)


def tick_all(d: DelayedMessages, now: float, until: float) -> list[tuple[float, DelayedMessage, int]]:
    """Tick as the clock does, at each ``next_due`` (at once while one is past), up to ``until``:
    each message with the time it came out and the heap's size before that pop."""
    out: list[tuple[float, DelayedMessage, int]] = []
    while (nxt := d.next_due()) is not None and nxt <= until:
        now = max(now, nxt)
        got = d.pop_due(now)
        held = d.in_memory() + len(got)
        out += [(now, m, held) for m in got]
    return out


def test_recovered_batches_come_out_on_time_in_order_from_disk(tmp_path: Path) -> None:
    rng = random.Random(3)
    dues = [round(T0 + rng.uniform(0.5, 90_000), 3) for _ in range(5000)] + [T0 + 700.0] * 20
    store = recovered(tmp_path, dues)
    d = DelayedMessages(tmp_path / "d")
    place(store, d, T0)
    assert len(d) == len(dues) and d.count("dx") == len(dues)
    assert d.in_memory() == 0  # everything in bucket files, even what is due within the horizon
    assert sum(d.schedule("dx", T0)) == len(dues)
    out = tick_all(d, T0, T0 + 100_000)
    assert [m.due for _, m, _ in out] == sorted(dues)
    assert all(when == m.due for when, m, _ in out)  # never early, never late
    same = [m.message_id for _, m, _ in out if m.due == T0 + 700.0]
    assert same == sorted(same)  # equal due times keep log order
    first = out[0][1]
    assert (first.exchange, first.props_raw, first.body) == ("dx", b"\x00\x01", b"x" * 100)
    assert first.routing_key == f"k{first.message_id - 1}"
    assert len(d) == 0 and not any((tmp_path / "d").glob("*"))
    store.close()


def test_messages_overdue_at_restart_stay_on_disk_and_come_back_in_bounded_chunks(tmp_path: Path) -> None:
    rng = random.Random(5)
    now = T0 + 5000  # the broker was down: 20,000 came due meanwhile, over 5000 s
    overdue = [round(T0 + rng.uniform(0, 4999), 3) for _ in range(20_000)]
    later = [round(now + rng.uniform(0.1, 3000), 3) for _ in range(500)]
    store = recovered(tmp_path, overdue + later)
    chunk = 64 << 10  # ~450 bucket records of 142 to 146 B
    d = DelayedMessages(tmp_path / "d", read_bytes=chunk)
    place(store, d, now)
    assert d.in_memory() == 0 and len(d) == 20_500
    assert d.next_due() is not None and d.next_due() <= now  # the first tick comes at once
    out = tick_all(d, now, now + 4000)
    assert sorted(m.message_id for _, m, _ in out) == list(range(1, 20_501))  # each once, none lost
    assert max(held for _, _, held in out) <= chunk // 142 + 1  # the heap holds a tick's read at most
    first = [(when, m) for when, m, _ in out[:20_000]]
    assert all(when == now for when, _ in first)  # the overdue ones first, as soon as read
    seconds = [int(m.due) for _, m in first]
    assert seconds == sorted(seconds)  # oldest (second) first
    rest = out[20_000:]
    assert all(when == m.due and m.due > now for when, m, _ in rest)  # the rest on time, none early
    assert len(d) == 0 and not any((tmp_path / "d").glob("*"))
    store.close()


def test_a_large_bucket_due_soon_is_read_over_several_ticks_and_still_comes_out_in_order(tmp_path: Path) -> None:
    dues = [T0 + 30 + (i % 97) / 100 for i in range(3000)]  # one second's bucket, ~480 KB
    d = DelayedMessages(tmp_path / "d", read_bytes=32 << 10)
    for due in dues:
        d.add(due, "dx", "k", b"", b"y" * 120, now=T0)
    out = tick_all(d, T0, T0 + 40)
    assert [m.due for _, m, _ in out] == sorted(dues)  # all read before the first came due
    assert all(when == m.due for when, m, _ in out)


def test_due_delayed_messages_wait_while_the_store_outbox_is_full() -> None:
    """Released messages add store ops (their Publish, an Undelay): while the flusher is behind
    (the backlog at which publishers pause), the tick holds them and looks again shortly."""
    b = durable_broker(backlog_max=1)
    v = b.vhosts["/"]
    v.declare_exchange("dx", "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"})
    v.delayed.add(NOW + 1, "dx", "k", b"", b"x", 7, now=NOW)
    b.delivery.deadlines.arm(("/", None), v.delayed.next_due())
    b.store.add(Undelay(99))  # one op waiting: the backlog is full
    b.tick(NOW + 1)
    assert len(v.delayed) == 1  # held, not lost
    assert b.delivery.deadlines.earliest() == NOW + 1.01
    b.store.take()  # the flusher caught up
    b.tick(NOW + 1.01)
    assert len(v.delayed) == 0
    assert [type(op).__name__ for op in b.store.take()[0]] == ["Undelay"]
