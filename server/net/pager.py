"""The pager: brings spilled entries back into their queues' resident windows.

Owner: the ``Pager`` task pages spilled entries in and hands them to the broker's delivery
owner. The backing plans each read and applies its result on the event loop; only the read itself
(``ReadPlan.run``, a pure function of a file and a byte range) runs in a worker thread, so the loop
and the thread share no lock and no mutable state; a queue whose resident window runs low asks its spill backing, which wakes
the pager (``wake``) with the queue's (vhost, name): no polling, and a wake looks at the queues
that asked, not at every queue of the broker (with 100,000 queues a walk over all of them took
tens of milliseconds per page-in). A queue asks again at every message it hands out while its
window is low, so one the pager left wanting is seen again. It also retries spill writes that
failed for want of room (the entries wait in memory meanwhile, and the disk alarm holds publishers).
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import cast

import trio

from headrace.persistence.spill_store import SpillStore
from headrace.queues import Queue, QueueEntry
from headrace.server.broker import Broker
from headrace.server.broker.vhost import VHost

from .alarms import DiskWatch

__all__ = ["Pager"]

# Spilled entries are paged back this many at a time (and at most this many bytes): big enough to
# amortise the thread hop, small enough to keep the resident window near its bound.
PAGE_IN_COUNT = 4096
PAGE_IN_BYTES = 8 << 20
# While spill writes fail (disk full), they are tried again this often.
WRITE_RETRY_INTERVAL = 0.5


class Pager:
    def __init__(self, spill: SpillStore, disk: DiskWatch) -> None:
        self.spill = spill
        self.disk = disk
        self._kick = trio.Event()
        self._wanted: dict[tuple[str, str], None] = {}  # (vhost, queue name), in the order they asked

    def wake(self, key: Hashable) -> None:
        """The queue ``key`` (vhost, name) wants spilled entries back (called on the event loop)."""
        self._wanted[cast(tuple[str, str], key)] = None  # as storage.spill_factory makes it
        self._kick.set()

    async def run(self, broker: Broker) -> None:
        while True:
            with trio.move_on_after(WRITE_RETRY_INTERVAL if "spill" in self.disk.failures else 1e9):
                await self._kick.wait()
            self._kick = trio.Event()
            if "spill" in self.disk.failures and self.spill.retry():
                self.disk.write_ok("spill")
            wanted, self._wanted = self._wanted, {}
            for vhost_name, queue_name in wanted:
                vhost = broker.vhosts.get(vhost_name)
                queue = vhost.queues.get(queue_name) if vhost is not None else None
                if vhost is not None and isinstance(queue, Queue):  # only a classic queue spills
                    await self._page_in(broker, vhost, queue)

    async def _page_in(self, broker: Broker, vhost: VHost, queue: Queue) -> None:
        """Page ``queue`` in until its resident window is full again (or nothing more comes)."""
        while queue.page_in_wanted():
            backing = queue.take_backing()
            if backing is None:
                return
            generation = queue.generation
            room_count, room_bytes = queue.page_in_room()
            plan = backing.plan_read(min(PAGE_IN_COUNT, room_count), min(PAGE_IN_BYTES, room_bytes))
            if plan is None:
                return
            progress = True
            if isinstance(plan, list):
                entries: list[QueueEntry] = plan  # from memory (the disk was full)
            else:
                result = await trio.to_thread.run_sync(plan.run)  # the only thread part
                entries = backing.finish_read(plan, result)
                # a stale plan (dropped or read meanwhile) or damaged records: plan again
                progress = plan.generation != backing.generation or bool(result.used) \
                    or result.fatal is not None
            lost, lost_bytes = backing.take_lost()
            if (lost or lost_bytes) and generation == queue.generation:
                queue.spill_lost(lost, lost_bytes)  # damaged records (logged there), or a correction
            if not entries:
                if progress:
                    continue
                return
            broker.delivery.page_in(vhost, queue, entries, generation, time.time())
