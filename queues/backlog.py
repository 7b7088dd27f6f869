"""What a classic queue holds ready, in FIFO order: the resident window and the spill behind it.

Rule 1: a ``Backlog`` (one per classic queue) owns the ready entries in memory (its ``ReadyList``),
the spilled range behind them (its ``SpilledRange``, on the queue's spill backing), the resident
bounds and the generation that makes a page-in planned before a purge or delete go stale. The
queue (``queue.py``) owns everything else (unacked entries, consumers, counters) and asks this
object for entries; nothing else touches it.
Rule 2: order. Once the resident window is full, new entries go to the spill and keep going
there until every spilled entry has been paged back (``page_in``), so FIFO holds; requeued
entries always stay resident; a queue with priorities never spills.
Rule 3: what is in memory is added to the broker's ``HeldTally`` by the ``ReadyList``; an entry
taken out (``take``) is still counted until the queue keeps it unacked or lets it go.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .backing import Backing, PropsInfo, RecoveredRow
from .held import HeldTally
from .message import QueueEntry
from .outcome import Left, left_entry
from .ready import ReadyList
from .spilled import GET_READ_BATCH, SpilledRange

__all__ = ["Backlog"]


class Backlog:
    __slots__ = ("ready", "spill", "max_messages", "max_bytes", "generation")

    def __init__(self, max_priority: int | None, held: HeldTally, backing_factory: Callable[[], Backing] | None,
                 max_messages: int, max_bytes: int) -> None:
        self.ready = ReadyList(max_priority, held)
        self.spill = SpilledRange(None if max_priority else backing_factory)
        self.max_messages = max_messages  # the resident window: entries and body bytes in memory
        self.max_bytes = max_bytes
        self.generation = 0  # moves on a purge or delete: a page-in read before it is stale

    # ------------------------------------------------------------------ counts
    @property
    def count(self) -> int:
        return self.ready.count + self.spill.count

    @property
    def bytes(self) -> int:
        return self.ready.bytes + self.spill.bytes

    # ------------------------------------------------------------------ in and out
    def push(self, entry: QueueEntry) -> None:
        ready = self.ready
        spill = self.spill
        if spill.enabled and (spill.count or ready.count >= self.max_messages or ready.bytes >= self.max_bytes):
            if spill.append(entry):
                return
        ready.append(entry)

    def push_run(self, entries: list[QueueEntry], size: int) -> None:
        """``push`` of each entry in order (``size``: their body bytes); at once when they all fit
        in the resident window with nothing spilled, one by one otherwise."""
        ready = self.ready
        spill = self.spill
        if spill.enabled and (spill.count or ready.count + len(entries) > self.max_messages
                              or ready.bytes + size >= self.max_bytes):
            for entry in entries:
                self.push(entry)
            return
        ready.append_run(entries, size)

    def take(self) -> QueueEntry | None:
        """The next resident entry, still counted as held (``ReadyList.take``); the pager is asked
        for more when the window runs low."""
        entry = self.ready.take()
        if entry is not None and self.spill.count and self.page_in_wanted():
            self.spill.backing.want_page_in()  # type: ignore[union-attr]  # (checked there)
        return entry

    def take_run(self, count: int) -> list[QueueEntry]:
        """``take`` of the next ``count`` resident entries (the caller counted them ready)."""
        entries = self.ready.take_run(count)
        if self.spill.count and self.page_in_wanted():
            self.spill.backing.want_page_in()  # type: ignore[union-attr]  # (checked there)
        return entries

    def pop_any(self) -> QueueEntry | None:
        """The head, resident or spilled, no longer held (a bound dropped it)."""
        entry = self.ready.pop()
        if entry is None:
            entry = self.spill.pop_one()
        return entry

    def requeue(self, entry: QueueEntry) -> None:
        self.ready.requeue(entry)

    def read_head(self) -> tuple[int, int]:
        """basic.get found the window empty while entries are spilled: a small batch of them comes
        back at once (a page-in planned meanwhile goes stale). Returns (read, lost to damage)."""
        batch, lost, _ = self.spill.read_head(*GET_READ_BATCH)
        if batch:
            self.ready.extend(batch)
        return len(batch), lost

    def expired_head(self, now: float) -> QueueEntry | None:
        """The resident head when it has expired (taken out, no longer held), else None: RabbitMQ
        expires from the head only."""
        head = self.ready.peek()
        if head is None or head.expires_at is None or head.expires_at >= now:
            return None
        return self.ready.pop()

    def next_deadline(self) -> float | None:
        head = self.ready.peek()
        return head.expires_at if head is not None else None

    def purge(self, left: list[Left] | None) -> None:
        """Drop every ready entry. Without ``left`` the spill backing is dropped unread (reading it
        back was seconds of blocked event loop for a large spilled queue); with ``left`` every
        purged entry is reported, the spilled ones read back first."""
        ready = self.ready.clear()
        if left is not None:
            for entry in ready + self.spill.read_all():
                left.append(left_entry(entry, None))
        self.spill.drop()
        self.generation += 1

    def close(self) -> None:
        """The queue is deleted: everything goes (the store drops it as one record)."""
        self.ready.clear()
        self.spill.close()
        self.generation += 1

    # ------------------------------------------------------------------ paging
    def page_in_wanted(self) -> bool:
        # both bounds: a queue of large bodies reaches the byte bound long before the count one
        spill, ready = self.spill, self.ready
        return bool(spill.count) and spill.backing is not None and \
            ready.count < self.max_messages // 2 and ready.bytes < self.max_bytes // 2

    def page_in_room(self) -> tuple[int, int]:
        """How many entries and body bytes one page-in may bring back without passing the bounds."""
        return max(self.max_messages - self.ready.count, 1), max(self.max_bytes - self.ready.bytes, 1)

    def page_in(self, entries: list[QueueEntry], generation: int) -> bool:
        """Entries the pager read back join the window; False when a purge or delete came first."""
        if generation != self.generation:
            return False
        self.spill.returned(entries)
        self.ready.extend(entries)
        return True

    # ------------------------------------------------------------------ recovery
    def spills_next(self) -> bool:
        """The next entry added would go to the spill (the window is full, or entries are spilled)."""
        spill, ready = self.spill, self.ready
        return spill.enabled and (spill.count > 0 or ready.count >= self.max_messages
                                  or ready.bytes >= self.max_bytes)

    def append_recovered(self, first_seq: int, rows: Iterable[RecoveredRow], props_info: PropsInfo,
                         ttl: float | None) -> int:
        return self.spill.append_recovered(first_seq, rows, props_info, ttl)
