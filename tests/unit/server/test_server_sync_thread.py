"""The flusher's fsync thread (``server/net/sync_thread.py``), and the flusher using it for a slow
disk: results and errors come back to the caller, a cancelled caller still waits for the call it
started, and groups fsynced in the thread release their confirms only after the fsync."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import trio

from headrace.server.config import Settings
from headrace.server.net.storage import Storage
from headrace.server.net.sync_thread import SyncThread
from session_support import durable_broker
from shell_ports import no_sender

NOW = 1000.0


async def test_a_call_runs_in_the_thread_and_its_result_or_error_comes_back() -> None:
    sync = SyncThread()
    try:
        assert await sync.run(threading.get_ident) != threading.get_ident()
        assert await sync.run(lambda: 42) == 42

        def fail() -> None:
            raise OSError(5, "Input/output error")

        with pytest.raises(OSError, match="Input/output error"):
            await sync.run(fail)
        assert await sync.run(lambda: "still there") == "still there"
    finally:
        sync.close()


async def test_a_cancelled_caller_waits_for_the_call_it_started() -> None:
    sync = SyncThread()
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        release.wait(5)
        finished.set()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sync.run, slow)
            await trio.to_thread.run_sync(started.wait)
            threading.Timer(0.2, release.set).start()  # the call ends well after the cancel
            nursery.cancel_scope.cancel()  # cancel the caller mid-call
        assert finished.is_set()  # the caller returned only once the call had ended
        assert await sync.run(lambda: 1) == 1  # and the pipe holds no stale byte for the next
    finally:
        sync.close()


def test_groups_fsynced_in_the_thread_confirm_only_what_is_on_disk(tmp_path: Path) -> None:
    storage = Storage(tmp_path, Settings(fsync_inline_below_ms=0), after_group=no_sender)  # every fsync in the thread
    storage.store.recover()
    broker = durable_broker(1_000_000, wake_flusher=storage.flusher.kick)
    vhost = broker.vhosts["/"]
    synced_at: list[tuple[int, int]] = []

    class Watch:
        def store_synced(self, ticket: int) -> None:
            synced_at.append((ticket, storage.store.disk_bytes()))
            if ticket < target:
                broker.wait_for_sync(self)

        def alarms_changed(self, alarms: frozenset[str]) -> None:
            pass

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(storage.flusher.run, broker, None)
            for i in range(200):
                broker.delivery.publish(vhost, "", "d", b"\x10\x00\x02", b"m%d" % i, NOW)
                if i % 50 == 49:
                    await trio.sleep(0)
            with trio.fail_after(20):
                while broker.synced_ticket < target:
                    await trio.sleep(0.001)
            nursery.cancel_scope.cancel()

    watch = Watch()
    broker.wait_for_sync(watch)
    target = broker.store_ticket + 200
    trio.run(main)
    assert storage.flusher._sync_thread._thread is not None  # noqa: SLF001 - the thread path was taken
    assert synced_at and synced_at[-1][0] >= target
    storage.close()
    assert storage.flusher._sync_thread._thread is None  # noqa: SLF001 - closed with the storage
    reopened = Storage(tmp_path, Settings(), after_group=no_sender)
    reopened.store.recover()
    assert reopened.store.live_messages() == 200  # what the thread's fsyncs confirmed is on disk
    reopened.close()
