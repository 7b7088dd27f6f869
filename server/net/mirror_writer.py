"""The mirror writer: appends the broker's mirror records to each mirrored exchange's log, and
applies retention.

Owner: the ``MirrorWriter`` task alone opens, writes and closes the ``MirrorLog``s (the Spark
bridge only reads their files); writes run in a worker thread.

A full disk: a log whose write fails is closed and reopened, which cuts its torn tail back to the
last whole record; the records that did not make it wait here, in order, ahead of the next batch,
and the disk alarm stays up until they are written.

Syncs: a log written since its last fsync is synced once ``mirror_sync_interval`` has passed since
then (the writer wakes for it even with nothing new to write), when a segment rolls, and when it is
closed; each write is in the page cache as soon as its batch is written.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import trio

from headrace.persistence.mirror_log import MirrorLog, Retention
from headrace.queues import Message
from headrace.server.broker import Broker
from headrace.server.broker.outbox import mirror_row
from headrace.server.config import Settings

from .alarms import DiskWatch
from .gate import Gate

__all__ = ["MirrorWriter"]

log = logging.getLogger("headrace.storage")

# While writes fail (disk full), the writer tries its waiting records again this often.
WRITE_RETRY_INTERVAL = 0.5

Key = tuple[str, str]  # (vhost, exchange)


class MirrorWriter:
    def __init__(self, root: Path, disk: DiskWatch, settings: Settings) -> None:
        self.root = root
        self.disk = disk
        self.settings = settings
        self.logs: dict[Key, MirrorLog] = {}
        self._waiting: dict[Key, list[Message]] = {}  # not written for want of room
        self._kick = trio.Event()
        self._last_retention = 0.0
        self._unsynced: set[Key] = set()  # logs written since their last fsync
        self._last_sync = 0.0  # trio time of the last sync pass
        # one pass at a time: shutdown's drain calls ``write`` while the task may be in the middle
        # of one, and two worker threads appending to one log would interleave their records
        self._busy = trio.Lock()

    def kick(self) -> None:
        """The broker's mirror outbox got its first record."""
        self._kick.set()

    async def run(self, broker: Broker, gate: Gate) -> None:
        interval = self.settings.spark.mirror_retention_interval
        while True:
            # wake for records, and at least every retention interval: an idle mirror must still
            # drop segments that aged out
            wait = WRITE_RETRY_INTERVAL if self._waiting else interval
            if self._unsynced:
                wait = min(wait, max(self._last_sync + self.settings.spark.mirror_sync_interval - trio.current_time(), 0))
            with trio.move_on_after(wait):
                await self._kick.wait()
            self._kick = trio.Event()
            await self.write(broker)
            gate.notify()  # publishers paused on a full mirror backlog may read again
            if trio.current_time() - self._last_retention >= interval:
                self._last_retention = trio.current_time()
                async with self._busy:
                    await self._enforce_retention(broker)

    def _log(self, key: Key, retention: Retention) -> MirrorLog:
        """The open log of a mirrored exchange, reopened when its retention changed."""
        log_ = self.logs.get(key)
        if log_ is None or log_.retention != retention:
            if log_ is not None:
                log_.close()
            log_ = self.logs[key] = MirrorLog(self.root, key[0], key[1], retention=retention,
                                              segment_max_bytes=self.settings.spark.mirror_segment_max_bytes)
            log_.recover()
        return log_

    def _reopen_after_failure(self, key: Key) -> None:
        """Close a log whose write failed; reopening it (next write) cuts the torn tail off."""
        log_ = self.logs.pop(key, None)
        if log_ is not None:
            try:
                log_.close()
            except OSError:
                pass  # its unwritten bytes are what the reopen cuts off

    async def _enforce_retention(self, broker: Broker) -> None:
        """Retention of every mirrored exchange with a bound, written to lately or not."""
        targets: list[tuple[Key, Retention]] = []
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
                dropped = self._log(key, retention).enforce_retention(now_ms)
                if dropped:
                    log.info("mirror %s/%s: retention dropped %d segments", key[0], key[1], dropped)

        try:
            await trio.to_thread.run_sync(enforce)
        except OSError as exc:
            log.warning("mirror retention stopped: %s", exc)

    async def write(self, broker: Broker) -> None:
        """Append what the outbox holds (and what waited for room), after any pass under way."""
        async with self._busy:
            await self._write(broker)

    async def _write(self, broker: Broker) -> None:
        groups = broker.take_mirror_records()
        waiting, self._waiting = self._waiting, {}
        for key, recs in waiting.items():  # not written last time: ahead of the new ones
            groups[key] = recs + groups.get(key, [])
        syncing = self.settings.storage.fsync != "off"
        sync_now = syncing and trio.current_time() - self._last_sync >= self.settings.spark.mirror_sync_interval
        if not groups:
            if sync_now and self._unsynced:
                await self._sync_all()
            return
        retention: dict[Key, Retention] = {}
        for key in groups:
            owner = broker.vhosts.get(key[0])
            age, size = owner.mirror_retention.get(key[1], (None, None)) if owner else (None, None)
            retention[key] = Retention(max_age_ms=age, max_bytes=size)
        failed: dict[Key, tuple[list[Message], OSError]] = {}
        unsynced = self._unsynced if syncing else set()  # fsync off: never synced

        def write() -> None:
            for key, recs in groups.items():
                start = -1
                try:
                    log_ = self._log(key, retention[key])
                    start = log_.next_offset
                    log_.append_messages(recs, mirror_row)
                    unsynced.add(key)
                    if sync_now:
                        self._sync(key)
                except OSError as exc:
                    self._reopen_after_failure(key)
                    done = 0
                    if start >= 0:
                        try:  # the records before the torn one are in the log: not again
                            done = max(self._log(key, retention[key]).next_offset - start, 0)
                        except OSError:
                            self._reopen_after_failure(key)
                    failed[key] = (recs[done:], exc)

        await trio.to_thread.run_sync(write)
        if sync_now:
            self._last_sync = trio.current_time()
            if self._unsynced:  # logs written earlier that this batch did not touch
                await self._sync_all()
        for key, (recs, exc) in failed.items():
            if recs:
                self._waiting[key] = recs
            if "mirror" not in self.disk.failures:
                log.warning("mirror %s/%s: %d records wait for room: %s", key[0], key[1], len(recs),
                            exc.strerror or exc)
        if self._waiting:
            self.disk.write_failed("mirror")
        else:
            self.disk.write_ok("mirror")

    def _sync(self, key: Key) -> None:
        """fsync one log written since its last sync (in the writer's thread)."""
        log_ = self.logs.get(key)
        if log_ is not None:
            log_.flush(fsync=True)
        self._unsynced.discard(key)

    async def _sync_all(self) -> None:
        """fsync every log written since its last sync; a failure is the next write's to report."""
        self._last_sync = trio.current_time()

        def sync() -> None:
            for key in list(self._unsynced):
                try:
                    self._sync(key)
                except OSError as exc:
                    log.warning("mirror %s/%s: fsync failed: %s", key[0], key[1], exc.strerror or exc)

        await trio.to_thread.run_sync(sync)

    @property
    def backlog(self) -> int:
        """Records waiting for room (they count against the broker's mirror backlog bound)."""
        return sum(len(recs) for recs in self._waiting.values())

    def close(self) -> None:
        for log_ in self.logs.values():
            try:
                log_.close()
            except OSError as exc:
                log.error("mirror %s/%s: not closed cleanly: %s", log_.vhost, log_.exchange, exc)
