"""The mirror writer (``server/net/mirror_writer.py``) over real mirror logs under trio's mock clock:
a batch is readable as soon as it is written, and a log is fsynced once per
``mirror_sync_interval``, not once per batch (interval 0: every batch). ``os.fsync`` is watched,
not replaced: every sync still reaches the disk."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio

from headrace.persistence.mirror_log import list_segments, read_entries
from headrace.queues.message import Message
from headrace.server.broker import Broker
from headrace.server.config import Settings
from headrace.server.net.alarms import DiskWatch
from headrace.server.net.gate import Gate
from headrace.server.net.mirror_writer import MirrorWriter
from shell_ports import shell_ports


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def watched(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", watched)
    return calls


def publish(broker: Broker, first: int, count: int) -> None:
    for i in range(first, first + count):
        broker.mirrors.add("/", "events", Message(i, "events", "k", b"\x00\x00", b"%d" % i, timestamp=1000.0 + i))


def entries(root: Path) -> list[int]:
    return [int(e.body) for s in list_segments(root, "/", "events") for e in read_entries(s)]


async def test_batches_are_readable_at_once_and_synced_once_per_interval(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, fsyncs: list[int]
) -> None:
    settings = Settings(mirror_sync_interval=5.0)
    writer = MirrorWriter(tmp_path, DiskWatch(tmp_path, 0), settings)
    broker = Broker(ports=shell_ports())
    await trio.sleep(10)  # a sync pass is due for the first batch
    publish(broker, 0, 10)
    await writer.write(broker)
    assert len(fsyncs) == 1 and entries(tmp_path) == list(range(10))
    for batch in range(1, 4):  # within the interval: written, readable, not synced
        await trio.sleep(1)
        publish(broker, batch * 10, 10)
        await writer.write(broker)
    assert len(fsyncs) == 1 and entries(tmp_path) == list(range(40))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.run, broker, Gate())
        await trio.sleep(1.5)  # the idle writer wakes when the interval since the last sync is over
        assert len(fsyncs) == 1
        # past it: the sync runs in a worker thread, which the mock clock does not wait for, so the
        # test waits for it in real time (bounded)
        deadline = time.monotonic() + 10
        while len(fsyncs) < 2 and time.monotonic() < deadline:
            await trio.sleep(0.01)
        assert len(fsyncs) == 2
        await trio.sleep(30)  # nothing written since: nothing to sync
        assert len(fsyncs) == 2
        nursery.cancel_scope.cancel()
    writer.close()


async def test_interval_zero_syncs_every_batch(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, fsyncs: list[int]
) -> None:
    writer = MirrorWriter(tmp_path, DiskWatch(tmp_path, 0), Settings(mirror_sync_interval=0))
    broker = Broker(ports=shell_ports())
    for batch in range(4):
        publish(broker, batch * 10, 10)
        await writer.write(broker)
    assert len(fsyncs) == 4 and entries(tmp_path) == list(range(40))
    writer.close()


async def test_with_fsync_off_the_mirror_is_never_synced_and_the_writer_does_not_spin(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, fsyncs: list[int]
) -> None:
    writer = MirrorWriter(tmp_path, DiskWatch(tmp_path, 0), Settings(fsync="off", mirror_sync_interval=0))
    broker = Broker(ports=shell_ports())
    publish(broker, 0, 10)
    await writer.write(broker)
    passes = 0
    real_write = writer.write

    async def counted(b: Broker) -> None:
        nonlocal passes
        passes += 1
        await real_write(b)

    writer.write = counted  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.run, broker, Gate())
        await trio.sleep(25)
        nursery.cancel_scope.cancel()
    assert passes <= 4  # woken by the retention interval (10 s), not in a loop
    assert fsyncs == [] and entries(tmp_path) == list(range(10))


async def test_shutdown_write_waits_for_the_pass_under_way(tmp_path: Path) -> None:
    """Shutdown's drain calls ``write`` while the writer task may be appending in its worker thread:
    the drain's records go after the task's, not into the same log at the same time."""
    writer = MirrorWriter(tmp_path, DiskWatch(tmp_path, 0), Settings(mirror_sync_interval=60))
    broker = Broker(ports=shell_ports(wake_mirror_writer=writer.kick))
    first = 100_000  # a batch the task's thread is still appending when the drain begins
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.run, broker, Gate())
        await trio.testing.wait_all_tasks_blocked()  # the task waits for records
        publish(broker, 0, first)
        await trio.testing.wait_all_tasks_blocked()  # the task is in its worker thread
        assert broker.mirrors.count == 0
        publish(broker, first, 10)
        await writer.write(broker)  # as ``Storage.drain`` does
        nursery.cancel_scope.cancel()
    writer.close()
    assert entries(tmp_path) == list(range(first + 10))
