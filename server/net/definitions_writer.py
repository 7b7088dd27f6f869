"""The definitions log's writer: durable definition changes go to disk in the flusher's group.

Owner: once the broker runs, the ``DefinitionsWriter`` alone touches the ``DefinitionsLog``, and
only from the flusher's group (one group at a time), in a worker thread: appending, fsyncing and,
past the log's size bound, compacting never block the event loop. After each batch the app adds
the batch's records (``add``) and gets a ticket; the connection that made the change holds its
replies until ``synced`` reaches that ticket, so a declare-ok or an HTTP 201 means the change is
on disk, and every connection's changes waiting at that moment share one fsync.

A failed write (disk full) keeps the records, raises the disk alarm (logged once per failure
streak) and is tried again with the next group, which the flusher runs every 0.5 s while records
wait, with or without traffic. The waiting replies go out meanwhile, as RabbitMQ answers a declare
on a full disk: the broker keeps serving, and the change is written as soon as there is room.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from headrace.persistence.definitions_log import DefinitionsLog

from .alarms import DiskWatch
from .gate import Gate

__all__ = ["DefinitionsWriter"]

log = logging.getLogger("headrace.definitions")


class DefinitionsWriter:
    def __init__(self, definitions: DefinitionsLog, disk: DiskWatch, on_pending: Callable[[], None], *,
                 sync: bool = True) -> None:
        self.log = definitions
        self.disk = disk
        self.sync = sync
        self.pending: list[dict[str, Any]] = []
        self.ticket = 0  # bumped by every ``add``
        self.synced = 0  # the highest ticket written (or given up on for now: see the docstring)
        self.on_pending = on_pending  # the flusher's kick

    def add(self, records: list[dict[str, Any]]) -> int:
        """Records of one batch; returns the ticket its replies wait for."""
        first = not self.pending
        self.pending.extend(records)
        self.ticket += 1
        if first:
            self.on_pending()
        return self.ticket

    async def write_group(self) -> int:
        """Called by the flusher in its group: append what is pending and fsync; returns the ticket
        the flusher releases once the group is committed (0: nothing was pending)."""
        if not self.pending:
            return 0
        records, ticket = self.pending, self.ticket
        self.pending = []
        before = self.log.bytes_written
        try:
            await trio.to_thread.run_sync(lambda: self.log.append(records, sync=self.sync))
        except OSError as exc:
            self.pending = records + self.pending  # tried again with the next group
            if "definitions" not in self.disk.failures:
                log.error("definitions not saved: %s (tried again until it succeeds)", exc.strerror or exc)
            self.disk.write_failed("definitions")
        else:
            self.disk.wrote(self.log.bytes_written - before)
            if "definitions" in self.disk.failures:
                log.warning("definitions saved")
                self.disk.write_ok("definitions")
        return ticket

    async def wait_synced(self, ticket: int, gate: Gate) -> None:
        """Until the records of ``ticket`` were written (the flusher notifies ``gate`` per group)."""
        while self.synced < ticket:
            await gate.wait_changed()

    def close(self) -> None:
        self.log.close()
