"""The disk side of the broker: message store flusher (group commit), spill pager, mirror writer.

Rule 1 (go-diskqueue's ioLoop rule): one task owns each file set. The flusher alone touches the
``MessageStore``, the mirror writer alone the ``MirrorLog``s, and each queue's spill backing is read
only by the pager (its appends come from the event loop under the backing's own lock).
Rule 2: blocking calls (write+fsync, page-in reads) run in worker threads; while the flusher's
thread is in fsync, new publishes pile up in the broker's outbox and go to disk together in the next
group: that is the group commit, and every confirm waits for the fsync that covers it.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from headrace.persistence import DropQueue, FsyncMode, MessageStore, PurgeQueue, StoreOp, Undelay
from headrace.persistence.mirror_log import MirrorLog, Retention
from headrace.persistence.spill import SpillStore
from headrace.queues import Message, QueueEntry
from headrace.queues.backing import Backing
from headrace.server.amqp.properties import quick_props
from headrace.server.broker import Broker
from headrace.server.config import Settings

from .alarms import DiskWatch

if TYPE_CHECKING:
    from .gate import Gate

__all__ = ["Storage"]

log = logging.getLogger("headrace.storage")

# Spilled entries are paged back this many at a time (and at most this many bytes): big enough to
# amortise the thread hop, small enough to keep the resident window near its bound.
PAGE_IN_COUNT = 4096
PAGE_IN_BYTES = 8 << 20
# Compaction runs between groups at most this often (seconds), and on a timer when idle.
COMPACT_INTERVAL = 5.0
# Shortest idle wait of the flusher, so a compaction pass that is due never spins it.
IDLE_COMPACT_MIN_WAIT = 0.5
# Ops whose store side walks every live message (a thread hop is cheaper than a stalled loop).
WHOLE_QUEUE_OPS = frozenset({DropQueue, PurgeQueue})
# Weight of the newest fsync in the running average that picks inline or threaded syncs.
SYNC_EWMA_WEIGHT = 0.2
# While the store cannot write (disk full), the flusher tries its pending records again this often.
WRITE_RETRY_INTERVAL = 0.5


class Storage:
    def __init__(self, data_dir: Path, settings: Settings) -> None:
        self.settings = settings
        self.store = MessageStore(data_dir / "store", segment_max_bytes=settings.segment_max_bytes,
                                  fsync=FsyncMode(settings.fsync))
        self.disk = DiskWatch(data_dir, settings.disk_free_limit)
        self.spill = SpillStore(data_dir / "spill", report=self.disk)
        self.spill.on_page_wanted = self._wake_pager
        self.mirror_root = data_dir
        self.mirrors: dict[tuple[str, str], MirrorLog] = {}
        self._store_kick = trio.Event()
        self._mirror_kick = trio.Event()
        self._pager_kick = trio.Event()
        self._last_compact = 0.0
        self._last_retention = 0.0
        # fsync inline while it is fast: the thread hop costs more than a fast disk's fsync (confirms
        # 1.55x in A/B); a slow disk moves it to a worker thread so it cannot stall the event loop
        self._inline_sync_max = settings.fsync_inline_below_ms / 1000
        self._sync_ewma = 0.0

    def _wake_pager(self) -> None:
        self._pager_kick.set()

    def spill_factory(self, vhost: str, queue: str) -> Backing:
        return self.spill.backing(f"{vhost}\x00{queue}")

    # ------------------------------------------------------------------ recovery
    def recover(self, broker: Broker) -> None:
        recovered = self.store.recover()
        if recovered.truncated_bytes:
            log.warning("message store: truncated %d bytes of torn tail", recovered.truncated_bytes)
        broker.set_next_message_id(recovered.next_message_id)
        count = 0
        # records nothing will ever ack (a queue or delayed exchange that did not survive: exclusive,
        # deleted while down, ...) are killed in the log, or they would pin disk forever and come
        # back the day a queue of that name is declared again
        orphans: list[StoreOp] = []
        for (vname, qname), messages in recovered.queues.items():
            vhost = broker.vhosts.get(vname)
            queue = vhost.queues.get(qname) if vhost is not None else None
            if queue is None or not queue.durable:
                log.warning("message store: %d messages for unknown queue '%s' in vhost '%s' dropped",
                            len(messages), qname, vname)
                orphans.append(DropQueue(vname, qname))
                continue
            for rm in messages:
                delivery_mode, priority, expiration, _ = quick_props(rm.props_raw)
                message = Message(rm.message_id, rm.exchange, rm.routing_key, rm.props_raw, rm.body, True,
                                  priority or 0, int(expiration) if expiration and expiration.isdigit() else None,
                                  None, rm.timestamp_ms / 1000)
                broker.delivery.recover(queue, message, redelivered=rm.redelivered,
                                        delivery_count=rm.delivery_count)
                count += 1
        for delay in recovered.delayed:
            vhost = broker.vhosts.get(delay.vhost)
            exchange = vhost.exchanges.get(delay.exchange) if vhost is not None else None
            if vhost is None or exchange is None or not exchange.durable \
                    or delay.exchange not in vhost.delayed_exchanges:
                orphans.append(Undelay(delay.message_id))
                continue
            vhost.delayed.add(delay.due_ms / 1000, delay.exchange, delay.routing_key, delay.props_raw,
                              delay.body, delay.message_id)
            count += 1
        if orphans:
            try:
                self.store.write_and_sync(orphans)
            except OSError as exc:  # disk full at start: the flusher writes them once it has room
                log.warning("message store: cannot record dropped orphans yet: %s", exc)
        if count:
            log.info("message store: recovered %d messages", count)

    # ------------------------------------------------------------------ tasks
    async def start(self, nursery: trio.Nursery, broker: Broker, gate: Gate) -> None:
        self.disk.broker, self.disk.gate = broker, gate
        broker.on_store_pending = lambda: self._store_kick.set()
        broker.on_mirror_pending = lambda: self._mirror_kick.set()
        nursery.start_soon(self._flusher, broker, gate)
        nursery.start_soon(self._mirror_writer, broker, gate)
        nursery.start_soon(self._pager, broker)

    async def _flusher(self, broker: Broker, gate: Gate) -> None:
        window = self.settings.fsync_window_ms / 1000
        while True:
            # wake for ops, and when compaction is due: an idle broker must still reclaim the
            # segments its last acks killed
            due = max(self._last_compact + COMPACT_INTERVAL - trio.current_time(), IDLE_COMPACT_MIN_WAIT)
            if self.store.failing is not None or "spill" in self.disk.failures:
                due = min(due, WRITE_RETRY_INTERVAL)  # records wait for room: try them again
            with trio.move_on_after(due):
                await self._store_kick.wait()
            if "spill" in self.disk.failures and self.spill.retry():
                self.disk.write_ok("spill")
            if window > 0 and self._store_kick.is_set() \
                    and broker.store_backlog < self.settings.fsync_batch_max:
                await trio.sleep(window)  # let a bigger group gather behind this one
            self._store_kick = trio.Event()
            await self._flush_once(broker, gate)
            if broker.store_backlog:
                self._store_kick.set()  # more than fsync_batch_max were waiting

    async def _flush_once(self, broker: Broker, gate: Gate | None) -> None:
        ops, ticket = broker.take_store_ops(self.settings.fsync_batch_max)
        store = self.store
        before = store.disk_bytes()
        try:
            await self._write_group(broker, ops, ticket)
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
        if gate is not None:
            gate.notify()
        now = trio.current_time()
        if now - self._last_compact > COMPACT_INTERVAL:
            self._last_compact = now
            try:
                reclaimed = await trio.to_thread.run_sync(store.maybe_compact)
            except OSError as exc:
                log.warning("message store: compaction stopped: %s", exc)
            else:
                if reclaimed:
                    log.debug("message store: compaction reclaimed %d bytes", reclaimed)

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
        if need_sync:
            if self._sync_ewma < self._inline_sync_max:
                took = self._timed_sync()
            else:
                took = await trio.to_thread.run_sync(self._timed_sync)
            self._sync_ewma += SYNC_EWMA_WEIGHT * (took - self._sync_ewma)

    def _timed_sync(self) -> float:
        start = time.perf_counter()
        self.store.sync()
        return time.perf_counter() - start

    async def _mirror_writer(self, broker: Broker, gate: Gate) -> None:
        interval = self.settings.mirror_retention_interval
        while True:
            # wake for records, and at least every retention interval: an idle mirror must still
            # drop segments that aged out
            with trio.move_on_after(interval):
                await self._mirror_kick.wait()
            self._mirror_kick = trio.Event()
            await self._write_mirrors(broker)
            gate.notify()  # publishers paused on a full mirror backlog may read again
            if trio.current_time() - self._last_retention >= interval:
                self._last_retention = trio.current_time()
                await self._enforce_mirror_retention(broker)

    def _mirror_log(self, key: tuple[str, str], retention: Retention) -> MirrorLog:
        """The open log of a mirrored exchange, reopened when its retention changed."""
        log_ = self.mirrors.get(key)
        if log_ is None or log_.retention != retention:
            if log_ is not None:
                log_.close()
            log_ = self.mirrors[key] = MirrorLog(self.mirror_root, key[0], key[1], retention=retention,
                                                 segment_max_bytes=self.settings.mirror_segment_max_bytes)
            log_.recover()
        return log_

    async def _enforce_mirror_retention(self, broker: Broker) -> None:
        """Retention of every mirrored exchange with a bound, written to lately or not."""
        targets: list[tuple[tuple[str, str], Retention]] = []
        for vname, vhost in broker.vhosts.items():
            for ename in vhost.mirrored:
                age, size = vhost.mirror_retention.get(ename, (None, None))
                if age is not None or size is not None:
                    targets.append(((vname, ename), Retention(max_age_ms=age, max_bytes=size)))
        if not targets:
            return
        now_ms = int(time.time() * 1000)

        def enforce() -> None:
            for key, retention in targets:
                dropped = self._mirror_log(key, retention).enforce_retention(now_ms)
                if dropped:
                    log.info("mirror %s/%s: retention dropped %d segments", key[0], key[1], dropped)

        await trio.to_thread.run_sync(enforce)

    async def _write_mirrors(self, broker: Broker) -> None:
        records = broker.take_mirror_records()
        if not records:
            return
        groups: dict[tuple[str, str], list] = defaultdict(list)
        for vhost, exchange, record in records:
            groups[(vhost, exchange)].append(record)

        retention: dict[tuple[str, str], Retention] = {}
        for key in groups:
            vhost = broker.vhosts.get(key[0])
            age, size = vhost.mirror_retention.get(key[1], (None, None)) if vhost else (None, None)
            retention[key] = Retention(max_age_ms=age, max_bytes=size)

        def write() -> None:
            for key, recs in groups.items():
                log_ = self._mirror_log(key, retention[key])
                log_.append_many(recs)
                log_.flush(fsync=self.settings.fsync != "off")

        await trio.to_thread.run_sync(write)

    async def _pager(self, broker: Broker) -> None:
        while True:
            await self._pager_kick.wait()  # a queue's resident window ran low (no polling)
            self._pager_kick = trio.Event()
            for vhost in list(broker.vhosts.values()):
                for queue in list(vhost.queues.values()):
                    while queue.page_in_wanted():
                        backing = queue.take_backing()
                        if backing is None:
                            break
                        generation = queue.generation
                        room_count, room_bytes = queue.page_in_room()
                        entries: list[QueueEntry] = await trio.to_thread.run_sync(
                            backing.read_batch, min(PAGE_IN_COUNT, room_count),
                            min(PAGE_IN_BYTES, room_bytes))
                        lost, lost_bytes = backing.take_lost()
                        if lost and generation == queue.generation:
                            queue.spill_lost(lost, lost_bytes)  # damaged records, logged there
                        if not entries:
                            break
                        broker.delivery.page_in(vhost, queue, entries, generation, time.time())

    # ------------------------------------------------------------------ shutdown
    async def drain(self, broker: Broker) -> None:
        await self._flush_once(broker, None)
        while broker.store_backlog:
            await self._flush_once(broker, None)
        await self._write_mirrors(broker)

    def close(self) -> None:
        try:
            self.store.close()
        except OSError as exc:
            log.error("message store: records not written at shutdown (%s); none was confirmed", exc)
        self.spill.close()
        for mirror in self.mirrors.values():
            mirror.close()
