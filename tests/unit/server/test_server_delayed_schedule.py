"""The spilled schedule of x-delayed-message exchanges (server/broker/delayed.py): real bucket files
in a temporary directory, time passed in."""

from __future__ import annotations

import random
from pathlib import Path

from headrace.server.broker.delayed import HISTOGRAM_EDGES, DelayedMessage, DelayedMessages

T0 = 1_000_000.0


def drain(d: DelayedMessages, until: float) -> list[tuple[float, DelayedMessage]]:
    """Tick as the clock does, at each ``next_due``, up to ``until``: the messages with the time
    they came out."""
    out: list[tuple[float, DelayedMessage]] = []
    now = T0
    while (nxt := d.next_due()) is not None and nxt <= until:
        now = max(now, nxt)
        out += [(now, m) for m in d.pop_due(now)]
    return out


def test_far_messages_go_to_disk_and_come_out_on_time_in_order(tmp_path: Path) -> None:
    d = DelayedMessages(tmp_path / "d")
    rng = random.Random(7)
    dues = [T0 + rng.uniform(0.5, 5000) for _ in range(3000)]
    for i, due in enumerate(dues):
        d.add(due, "ex", f"k{i}", b"", f"{i}".encode(), now=T0)
    assert len(d) == 3000
    assert d.in_memory() < 10  # only what is due within the horizon
    out = drain(d, T0 + 5001)
    assert len(out) == 3000
    assert all(when == m.due for when, m in out)  # each at its due time, never early nor late
    assert [m.due for _, m in out] == sorted(dues)
    assert len(d) == 0 and d.next_due() is None
    assert not any((tmp_path / "d").glob("*"))  # every bucket file read back and removed


def test_equal_due_times_keep_publish_order_through_the_buckets(tmp_path: Path) -> None:
    d = DelayedMessages(tmp_path / "d")
    for i in range(50):
        d.add(T0 + 600, "ex", "k", b"", str(i).encode(), now=T0 + (i % 3))  # placed at different levels
    out = drain(d, T0 + 601)
    assert [m.body for _, m in out] == [str(i).encode() for i in range(50)]


def test_a_message_added_into_a_bucket_already_read_goes_to_memory(tmp_path: Path) -> None:
    d = DelayedMessages(tmp_path / "d")
    d.add(T0 + 100, "ex", "a", b"", b"a", now=T0)
    assert d.pop_due(T0 + 98.5) == []  # the level-0 bucket of T0+100 was read into memory
    d.add(T0 + 100.5, "ex", "b", b"", b"b", now=T0 + 98.5)
    assert d.in_memory() == 2
    assert [m.body for m in d.pop_due(T0 + 101)] == [b"a", b"b"]


def test_dropping_an_exchange_takes_its_messages_from_memory_and_disk(tmp_path: Path) -> None:
    d = DelayedMessages(tmp_path / "d")
    for i in range(200):
        d.add(T0 + 1 + i * 30, "gone" if i % 2 else "kept", "k", b"", b"x", message_id=i, now=T0)
    mids = d.drop_exchange("gone")
    assert sorted(mids) == [i for i in range(200) if i % 2]
    assert len(d) == 100 and d.count("gone") == 0 and d.count("kept") == 100
    out = drain(d, T0 + 200 * 30 + 2)
    assert [m.message_id for _, m in out] == [i for i in range(200) if i % 2 == 0]


def test_the_schedule_counts_by_due_time(tmp_path: Path) -> None:
    d = DelayedMessages(tmp_path / "d")
    for delay, n in ((10, 3), (200, 4), (7200, 5), (10 * 86400, 6)):
        for _ in range(n):
            d.add(T0 + delay, "ex", "k", b"", b"", now=T0)
    d.add(T0 + 10, "other", "k", b"", b"", now=T0)
    bins = d.schedule("ex", T0)
    assert len(bins) == len(HISTOGRAM_EDGES) + 1
    assert bins[0] == 3 and bins[1] == 4 and bins[4] == 5 and bins[-1] == 6 and sum(bins) == 18
    assert d.count("ex") == 18 and d.count("other") == 1
    d.pop_due(T0 + 11)
    assert d.schedule("ex", T0 + 11)[0] == 0 and d.count("ex") == 15


def test_a_message_due_within_a_minute_is_in_the_first_bin_whatever_the_second(tmp_path: Path) -> None:
    # due 4 s ahead at :58 of a minute: its minute ends 62 s ahead, but it is due within 60 s
    d = DelayedMessages(tmp_path / "d")
    now = 60 * 16_667 + 58.0
    d.add(now + 4, "ex", "k", b"", b"", now=now)
    d.add(now + 59, "ex", "k", b"", b"", now=now)
    assert d.schedule("ex", now)[0] == 2


def test_without_a_directory_everything_stays_in_memory() -> None:
    d = DelayedMessages(None)
    d.add(T0 + 5000, "ex", "k", b"", b"x", now=T0)
    assert d.in_memory() == 1
    assert [m.body for m in d.pop_due(T0 + 5000)] == [b"x"]


def test_a_large_bucket_is_cascaded_a_chunk_per_tick(tmp_path: Path) -> None:
    d = DelayedMessages(tmp_path / "d")
    body = b"y" * 50_000
    for i in range(300):  # 15 MB due within one level-2 bucket
        d.add(T0 + 3000 + i * 0.1, "ex", "k", b"", body, now=T0)
    steps, now = 0, T0
    while d.in_memory() == 0:
        nxt = d.next_due()
        assert nxt is not None
        now = max(now, nxt)
        assert d.pop_due(now) == []
        steps += 1
    assert steps > 3  # several ticks, each bounded
    out = drain(d, T0 + 3031)
    assert len(out) == 300 and all(when == m.due for when, m in out)


def test_any_vhost_name_gets_a_directory_of_its_own(tmp_path: Path) -> None:
    from headrace.server.broker.delayed import spill_dir
    short, long_ = spill_dir(tmp_path, "/"), spill_dir(tmp_path, "v" * 255)
    assert short.name == "2f" and len(long_.name) < 100 and long_ != spill_dir(tmp_path, "v" * 254)
    d = DelayedMessages(long_)
    d.add(T0 + 100, "ex", "k", b"", b"x" * (300 << 10), now=T0)  # past one bucket's buffer: written
    assert long_.is_dir() and [m.body[:1] for m in d.pop_due(T0 + 100)] == [b"x"]
