"""A queue's upkeep: purge, TTL expiry, idle deadlines, delete, and paging spilled entries back in.

Owner: ``Queue`` (``queue.py``), which inherits these methods; the state they touch is the queue's
own (see its module docstring for the rules), set in ``Queue.__init__``. Like every queue method,
each is synchronous and takes ``now`` from the caller.
"""

from __future__ import annotations

from typing import Any

from .args import QueueArgs
from .backing import Backing
from .consumer import Consumer
from .destination import Destination
from .held import HeldTally
from .message import QueueEntry
from .outcome import Left, QueueStats, left_entry
from .ready import ReadyList
from .spilled import SpilledRange

__all__ = ["QueueUpkeep"]


class QueueUpkeep(Destination):
    """Maintenance and spill methods of ``Queue``; the fields are declared here, set by ``Queue``."""

    __slots__ = ("resident_max_messages", "resident_max_bytes", "generation", "_spill", "_ready", "_unacked",
                 "_unacked_bytes")

    args: QueueArgs
    resident_max_messages: int
    resident_max_bytes: int
    generation: int
    stats: QueueStats
    deleted: bool
    _spill: SpilledRange
    _ready: ReadyList
    _unacked: dict[int, QueueEntry]
    _unacked_bytes: int
    _held: HeldTally

    # provided by ``Queue``
    def _gone(self, left: list[Left] | None, entry: QueueEntry, reason: str | None, held: bool = True) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ maintenance
    def purge(self, left: list[Left] | None = None) -> int:
        """Drop every ready message. Without ``left`` the spill backing is dropped unread (reading
        it back was seconds of blocked event loop for a large spilled queue): the broker records the
        purge as one store record that spares the unacked ids (``unacked_message_ids``). With
        ``left`` every purged entry is reported, the spilled ones read back first."""
        count = self.messages_ready
        ready = self._ready.clear()
        if left is not None:
            for entry in ready + self._spill.read_all():
                left.append(left_entry(entry, None))
        self._spill.drop()
        self.generation += 1
        return count

    def unacked_message_ids(self) -> list[int]:
        """Ids of the messages delivered from this queue and not yet settled."""
        return [entry.message.id for entry in self._unacked.values()]

    def expire(self, now: float, left: list[Left] | None = None) -> int:
        """Drop expired entries at the head (RabbitMQ expires from the head only)."""
        ready = self._ready
        expired = 0
        while True:
            head = ready.peek()
            if head is None or head.expires_at is None or head.expires_at >= now:
                return expired
            ready.pop()
            expired += 1
            self.stats.expired += 1
            self._gone(left, head, "expired")

    def next_deadline(self) -> float | None:
        head = self._ready.peek()
        return head.expires_at if head is not None else None

    def delete(self) -> list[Consumer[Any]]:
        """Everything goes (the broker records the store side as one DropQueue)."""
        consumers = self._drop_consumers()
        self._ready.clear()
        held = self._held
        held.entries -= len(self._unacked)
        held.bytes -= self._unacked_bytes
        self._unacked.clear()
        self._unacked_bytes = 0
        self._spill.close()
        self.generation += 1
        return consumers

    # ------------------------------------------------------------------ spill
    def spilled_count(self) -> int:
        return self._spill.count

    def page_in_wanted(self) -> bool:
        # both bounds: a queue of large bodies reaches the byte bound long before the count one
        return bool(self._spill.count) and self._spill.backing is not None and \
            self._ready.count < self.resident_max_messages // 2 and \
            self._ready.bytes < self.resident_max_bytes // 2

    def page_in_room(self) -> tuple[int, int]:
        """How many entries and body bytes one page-in may bring back without passing the bounds."""
        return (max(self.resident_max_messages - self._ready.count, 1),
                max(self.resident_max_bytes - self._ready.bytes, 1))

    def spill_lost(self, count: int, body_bytes: int) -> None:
        """The backing skipped ``count`` spilled entries it could not read back (damaged)."""
        self._spill.lost(count, body_bytes)
        self.stats.spill_damaged += count

    def take_backing(self) -> Backing | None:
        return self._spill.backing

    def page_in(self, entries: list[QueueEntry], generation: int, left: list[Left] | None = None) -> None:
        if self.deleted:
            return  # the store drops the whole queue
        if generation != self.generation:
            if left is not None:  # purged while this batch was being read: they still owe store acks
                left.extend(left_entry(entry, None) for entry in entries)
            return
        self._spill.returned(entries)
        self._ready.extend(entries)
