"""The message store's flusher: group commit of the broker's store outbox.

Owner: the ``Flusher`` task alone touches the ``MessageStore`` once the broker runs (go-diskqueue's
ioLoop rule); blocking calls run in worker threads. While its fsync runs, new publishes pile up in
the broker's outbox and go to disk together in the next group: that is the group commit, and
every confirm, tx.commit-ok, purge-ok and HTTP answer waits for the fsync that covers it.

A full disk: a group the store cannot write is cut back to the store's last whole record and kept
pending in the store; its waiters are released with a failure (``Broker.store_failed``: nacks),
the disk alarm stays up, and the flusher tries the pending records again every
``WRITE_RETRY_INTERVAL`` until they are written. Nothing confirmed is ever lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

import trio

from headrace.persistence import DropQueue, FsyncMode, MessageStore, PurgeQueue, StoreOp
from headrace.persistence.dedup_journal import DedupJournal
from headrace.server.broker import Broker
from headrace.server.config import Settings

from .alarms import DiskWatch
from .definitions_writer import DefinitionsWriter
from .gate import Gate
from .stream_writer import STREAM_OPS, StreamWriter
from .sync_thread import SyncThread

__all__ = ["Flusher"]

log = logging.getLogger("headrace.storage")

# Compaction runs between groups at most this often (seconds), and on a timer when idle.
COMPACT_INTERVAL = 5.0
# Ops whose store side walks every live message (a thread hop is cheaper than a stalled loop).
WHOLE_QUEUE_OPS = frozenset({DropQueue, PurgeQueue})
# Weight of the newest fsync in the running average that picks inline or threaded syncs.
SYNC_EWMA_WEIGHT = 0.2
# While the store cannot write (disk full), the flusher tries its pending records again this often;
# also how often its timer looks whether compaction is due.
WRITE_RETRY_INTERVAL = 0.5


class Replication(Protocol):
    """The leader's replication stream (``replication_leader.py``), when this node leads a cluster."""

    def ship(self) -> int: ...

    async def replicated(self, wait: bool) -> None: ...


class NotCommitted(Exception):
    """The node stopped leading before a group reached enough disks: its waiters get failures."""


class Flusher:
    def __init__(self, store: MessageStore, disk: DiskWatch, settings: Settings, streams: StreamWriter,
                 after_group: Callable[[], None]) -> None:
        self.store = store
        self.streams = streams  # the stream queues' logs: written in the same group as the store
        self.disk = disk
        self.settings = settings
        self._kick = trio.Event()
        self._last_compact = 0.0
        # fsync inline while it is fast: the thread hop costs more than a fast disk's fsync (confirms
        # 1.55x in A/B); a slow disk moves it to the flusher's fsync thread so it cannot stall the loop
        self._inline_sync_max = settings.storage.fsync_inline_below_ms / 1000
        self._sync_ewma = 0.0
        self.dedup: DedupJournal | None = None  # the dedup keys' journal, written with each group
        self.definitions: DefinitionsWriter | None = None  # the definitions log, written with each group
        # one group at a time: the shutdown drain waits for the group the task is writing, so the
        # store files have one writer and groups land in the order they took their ops
        self._group = trio.Lock()
        # writes the replies a group released (confirms) in the same step as its fsync, not one
        # writer wake-up later (app.py passes the sender's ``flush``)
        self.after_group = after_group
        self._sync_thread = SyncThread()  # the group fsyncs of a slow disk (the EWMA above)
        # set on a cluster's leader: each group's writes go to the followers, and its confirms wait
        # for enough of them (ARCHITECTURE.md, "Cluster")
        self.replication: Replication | None = None

    def kick(self) -> None:
        """The broker's store outbox got its first op."""
        self._kick.set()

    def retention_now(self) -> None:
        """A policy changed: stream retention runs with its values at the next wake, not in 5 s."""
        self._last_compact = 0.0
        self._kick.set()

    async def run(self, broker: Broker, gate: Gate) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._timer)
            await self._groups(broker, gate)

    async def _timer(self) -> None:
        """Kicks the flusher when compaction is due (an idle broker must still reclaim the segments
        its last acks killed) and, while records wait for room, every ``WRITE_RETRY_INTERVAL``. A
        task of its own, so that the flusher's wait for ops needs no deadline of its own per group."""
        while True:
            await trio.sleep(WRITE_RETRY_INTERVAL)
            if self.store.failing is not None or (self.definitions is not None and self.definitions.pending) \
                    or trio.current_time() - self._last_compact >= COMPACT_INTERVAL:
                self._kick.set()

    async def _groups(self, broker: Broker, gate: Gate) -> None:
        window = self.settings.storage.fsync_window_ms / 1000
        while True:
            await self._kick.wait()  # ops, or the timer
            if window > 0 and self._kick.is_set() \
                    and broker.store_backlog < self.settings.storage.fsync_batch_max:
                await trio.sleep(window)  # let a bigger group gather behind this one
            self._kick = trio.Event()
            await self.flush_once(broker, gate)
            if broker.store_backlog:
                self._kick.set()  # more than fsync_batch_max were waiting

    async def flush_once(self, broker: Broker, gate: Gate | None) -> None:
        """One group: take the outbox's oldest ops, write them, release their waiters (after the
        group already running, if any)."""
        try:
            self._group.acquire_nowait()  # the usual case, without the extra scheduler round of ``acquire``
        except trio.WouldBlock:
            await self._group.acquire()
        try:
            await self._flush_group(broker, gate)
        finally:
            self._group.release()

    async def _flush_group(self, broker: Broker, gate: Gate | None) -> None:
        definitions_ticket = 0
        if self.definitions is not None:
            # first: a queue is on disk before the messages the same group stores for it
            definitions_ticket = await self.definitions.write_group()
        taken, ticket = broker.take_store_ops(self.settings.storage.fsync_batch_max)
        ops: list[StoreOp] = taken  # type: ignore[assignment]
        stream_ops = [op for op in taken if type(op) in STREAM_OPS] if taken else None
        if stream_ops:
            ops = [op for op in taken if type(op) not in STREAM_OPS]  # type: ignore[misc]
        store = self.store
        before = store.disk_bytes()
        try:
            await self._write_group(broker, ops, ticket)  # first: the store keeps and retries what fails
            if stream_ops or any(type(op) is DropQueue for op in ops):
                # a failed stream append is not retried: its publishers get nacks like the store's
                await self.streams.write_group(broker, (stream_ops or []) + [op for op in ops if type(op) is DropQueue])
            self.journal_dedup(broker)  # keys of the publishes this group confirms, before the confirms
            if self.replication is not None:
                await self.replication.replicated(wait=ticket > broker.synced_ticket or definitions_ticket > 0)
        except NotCommitted:
            broker.store_failed(ticket)  # nacks: the publishers send them again to the new leader
            definitions_ticket = 0
        except OSError as exc:
            # disk full (or failing): the store cut its files back to the last whole record and
            # keeps these records pending; publishers of this group get nacks, not confirms
            if "store" not in self.disk.failures:
                log.warning("message store: writes fail (%s): publishes are nacked until they "
                            "succeed again", exc.strerror or exc)
            self.disk.write_failed("store")
            broker.store_failed(ticket)
        else:
            self.disk.wrote(max(store.disk_bytes() - before, 0))
            if store.failing is None:
                self.disk.write_ok("store")
            broker.store_synced(ticket)
        if definitions_ticket and self.definitions is not None:
            self.definitions.synced = max(self.definitions.synced, definitions_ticket)
        if gate is not None:
            gate.notify()
        self.after_group()
        now = trio.current_time()
        if now - self._last_compact > COMPACT_INTERVAL:
            self._last_compact = now
            try:
                await self.streams.retention(broker)  # idle streams age too
                reclaimed = await trio.to_thread.run_sync(store.maybe_compact)
                if store.checkpoint_due():  # the index at the log's end: restarts replay the rest
                    await trio.to_thread.run_sync(store.maybe_checkpoint)
            except OSError as exc:
                log.warning("message store: compaction stopped: %s", exc)
            else:
                if reclaimed:
                    log.debug("message store: compaction reclaimed %d bytes", reclaimed)

    def journal_dedup(self, broker: Broker) -> None:
        """Appends the dedup keys added since the last group (fsynced unless fsync is off)."""
        added = broker.delivery.dedup.take_added()
        if added and self.dedup is not None:
            self.dedup.append(added, sync=self.store.fsync_mode is not FsyncMode.OFF)
            if self.dedup.wants_compaction:
                self.dedup.rewrite(broker.delivery.dedup.snapshot(time.time()))

    async def drain(self, broker: Broker) -> None:
        """Shutdown: every op still in the outbox goes to disk (or is reported as not written),
        after the group the flusher task may be writing."""
        await self.flush_once(broker, None)
        while broker.store_backlog:
            await self.flush_once(broker, None)

    async def _write_group(self, broker: Broker, ops: list[StoreOp], ticket: int) -> None:
        """Write ``ops`` and, when a confirm waits for them (or earlier records wait for room),
        make them durable; raises the OSError of a failed write."""
        store = self.store
        if not ops:
            if store.failing is not None:
                await trio.to_thread.run_sync(store.sync)  # nothing new: retry what is pending
            return
        need_sync = ticket > broker.synced_ticket or store.failing is not None
        if store.fsync_mode is FsyncMode.ALWAYS:
            await trio.to_thread.run_sync(store.write_and_sync, ops)
            return
        # Appending is a copy into the page cache: done here, without a thread hop. The fsync
        # runs here too while the disk is fast, in a worker thread when it is not, and only
        # when a confirm, tx.commit-ok or HTTP answer waits for these ops: acks and delivery
        # marks alone need only survive a crash of the process, which the page cache gives.
        if any(type(op) in WHOLE_QUEUE_OPS for op in ops):
            # a purge or delete walks the store's whole index: off the event loop
            await trio.to_thread.run_sync(store.write_and_flush, ops)
        else:
            store.write_and_flush(ops)
        if self.replication is not None:
            self.replication.ship()  # the followers write and sync while this node syncs
        if need_sync:
            if self._sync_ewma < self._inline_sync_max:
                took = self._timed_sync()
            else:
                took = await self._sync_thread.run(self._timed_sync)
            self._sync_ewma += SYNC_EWMA_WEIGHT * (took - self._sync_ewma)

    def close(self) -> None:
        """After the last group: the fsync thread, if a slow disk started it, ends."""
        self._sync_thread.close()

    def _timed_sync(self) -> float:
        start = time.perf_counter()
        self.store.sync()
        return time.perf_counter() - start
