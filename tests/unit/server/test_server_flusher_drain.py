"""The shutdown drain waits for the group the flusher task is writing: the store files have one
writer, and no confirm is released for a group that is not on disk yet."""

from __future__ import annotations

from pathlib import Path

import trio

from headrace.server.config import Settings
from headrace.server.net.storage import Storage
from session_support import durable_broker
from shell_ports import no_sender

NOW = 1000.0


class SyncedWatch:
    """A broker observer that notes how much the store had written when each ticket was released."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.seen: list[tuple[int, int]] = []

    def store_synced(self, ticket: int) -> None:
        self.seen.append((ticket, self.storage.store.disk_bytes()))

    def alarms_changed(self, alarms: frozenset[str]) -> None:
        pass


def test_drain_waits_for_the_running_group(tmp_path: Path) -> None:
    storage = Storage(tmp_path, Settings(fsync_batch_max=100_000), after_group=no_sender)  # one group holds every op
    storage.store.recover()
    broker = durable_broker(1_000_000, wake_flusher=storage.flusher.kick)
    vhost = broker.vhosts["/"]
    queue = vhost.queues["d"]
    for i in range(20_000):
        broker.delivery.publish(vhost, "", "d", b"\x10\x00\x02", b"m%d" % i, NOW)
    vhost.purge_queue("d", None)  # a PurgeQueue: the group is written in a worker thread
    assert queue.durable and broker.store_backlog > 20_000
    before = storage.store.disk_bytes()
    watch = SyncedWatch(storage)
    broker.wait_for_sync(watch)
    target = broker.store_ticket

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(storage.flusher.run, broker, None)
            storage.flusher.kick()
            with trio.fail_after(20):
                while broker.store_backlog:  # the task took the group and is writing it
                    await trio.sleep(0.001)
            await storage.flusher.drain(broker)
            assert broker.synced_ticket >= target
            assert storage.store.disk_bytes() > before
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert watch.seen and all(written > before for _, written in watch.seen), watch.seen
    storage.close()
