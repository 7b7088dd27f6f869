"""The spilled range of one queue: entries that went to its ``Backing`` and are not back yet.

Rule 1: the ``Queue`` owns one ``SpilledRange`` and is its only caller. The range creates the
backing on first use and keeps the counters the queue reports (depth and body bytes), so a spilled
message costs two integers in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .backing import Backing, PropsInfo, RecoveredRow
from .message import QueueEntry

__all__ = ["GET_READ_BATCH", "PURGE_READ_BATCH", "SpilledRange"]

# A purge that must account for every spilled entry reads them back this many at a time (or this
# many bytes): the batch bounds the memory one purge holds.
PURGE_READ_BATCH = (4096, 64 << 20)
# A basic.get that finds the resident window empty while entries are spilled reads this many (or
# this many bytes) back at once, on the loop: small enough to keep the get prompt, and the pager
# brings the rest in its own batches.
GET_READ_BATCH = (64, 1 << 20)


class SpilledRange:
    __slots__ = ("_factory", "backing", "count", "bytes")

    def __init__(self, factory: Callable[[], Backing] | None) -> None:
        self._factory = factory
        self.backing: Backing | None = None
        self.count = 0
        self.bytes = 0

    @property
    def enabled(self) -> bool:
        return self._factory is not None

    def append(self, entry: QueueEntry) -> bool:
        """Spill ``entry``; False when the disk has no room even for a first spill file (nothing
        is spilled yet, so the queue keeps it in memory without breaking FIFO order)."""
        try:
            self._open().append((entry,))
        except OSError:
            if self.count:
                raise
            return False
        self.count += 1
        self.bytes += len(entry.message.body)
        return True

    def append_recovered(self, first_seq: int, rows: Iterable[RecoveredRow], props_info: PropsInfo,
                         ttl: float | None) -> int:
        """Spill recovered messages straight from the store's bytes (``Backing.append_recovered``);
        returns how many. Only at start, before anything reads the queue."""
        count, body_bytes = self._open().append_recovered(first_seq, rows, props_info, ttl)
        self.count += count
        self.bytes += body_bytes
        return count

    def _open(self) -> Backing:
        """The backing, created on first use (may raise OSError: no room for a spill file)."""
        backing = self.backing
        if backing is None:
            assert self._factory is not None
            backing = self.backing = self._factory()
        return backing

    def lost(self, count: int, body_bytes: int) -> None:
        """The backing skipped ``count`` entries it could not read back (damaged records), or
        corrects the body bytes it estimated (``count`` 0, ``body_bytes`` of either sign)."""
        self.count = max(self.count - count, 0)
        self.bytes = max(self.bytes - body_bytes, 0) if self.count else 0

    def pop_one(self) -> QueueEntry | None:
        """The head entry, read back at once (rare: a length bound enforced on a spilled head)."""
        if not self.count or self.backing is None:
            return None
        batch = self.backing.read_batch(1, 1 << 30)
        if not batch:
            return None
        self.returned(batch)
        return batch[0]

    def read_head(self, max_count: int, max_bytes: int) -> tuple[list[QueueEntry], int, int]:
        """The next entries read back here and now (any page-in planned before goes stale and is
        planned again), with the entries and body bytes skipped as unreadable on the way."""
        if not self.count or self.backing is None:
            return [], 0, 0
        batch = self.backing.read_batch(max_count, max_bytes)
        self.returned(batch)
        lost, lost_bytes = self.backing.take_lost()
        if lost or lost_bytes:  # (bytes alone: a correction of an estimate, persistence/store_pages.py)
            self.lost(lost, lost_bytes)
        return batch, lost, lost_bytes

    def returned(self, entries: list[QueueEntry]) -> None:
        """Entries the pager read back are no longer spilled."""
        self.count -= len(entries)
        self.bytes -= sum(len(e.message.body) for e in entries)

    def read_all(self) -> list[QueueEntry]:
        """Every spilled entry, read back in batches (a purge that must see each one)."""
        out: list[QueueEntry] = []
        if self.backing is not None:
            while batch := self.backing.read_batch(*PURGE_READ_BATCH):
                out.extend(batch)
        return out

    def drop(self) -> None:
        if self.backing is not None:
            self.backing.drop()
        self.count = 0
        self.bytes = 0

    def close(self) -> None:
        self.drop()
        if self.backing is not None:
            self.backing.close()
            self.backing = None
