"""A queue's in-flight entries: handed to a consumer (or a basic.get) and not settled yet.

Why apart from queue.py: the table has invariants of its own that every hand-out and every
settle must keep together (its byte count matches its entries, each entry's holder counts it
against its credit, a release updates the broker's ``HeldTally``), and the delivery and settle
paths work on it alone; the queue's ordering, bounds, TTL and returns stay in queue.py.

Rule 1: an ``Unacked`` is owned by one ``Queue``, which is its only caller. It owns the entries
keyed by ``seq`` and the sum of their body bytes.
Rule 2 (nsq's ownership check): ``release`` lets go only of the very entry it holds, so a late
ack after a requeue, or after the queue was purged, changes nothing.
Rule 3: keeping an entry does not touch the ``HeldTally`` (it was held while ready, and is held
still); releasing one takes it off the tally and off its consumer's unacked count.
"""

from __future__ import annotations

from typing import Any

from .consumer import Consumer
from .held import HeldTally
from .message import QueueEntry

__all__ = ["Unacked"]


class Unacked:
    __slots__ = ("entries", "bytes", "_held")

    def __init__(self, held: HeldTally) -> None:
        self.entries: dict[int, QueueEntry] = {}
        self.bytes = 0  # bodies of ``entries``
        self._held = held

    def __len__(self) -> int:
        return len(self.entries)

    def keep(self, entry: QueueEntry, owner: object) -> None:
        """``entry`` (taken from the ready list, still held) is now out with ``owner``; a
        ``Consumer`` owner counts it against its credit."""
        entry.owner = owner
        self.entries[entry.seq] = entry
        self.bytes += len(entry.message.body)
        if isinstance(owner, Consumer):
            owner.unacked += 1

    def keep_run(self, consumer: Consumer[Any], entries: list[QueueEntry]) -> None:
        """``keep`` of a consumer's whole turn of deliveries."""
        table = self.entries
        size = 0
        for entry in entries:
            entry.owner = consumer
            table[entry.seq] = entry
            size += len(entry.message.body)
        self.bytes += size
        consumer.unacked += len(entries)

    def release(self, entry: QueueEntry) -> bool:
        """Settle ``entry`` if this table still holds it (rule 2); False when it does not."""
        table = self.entries
        if table.get(entry.seq) is not entry:
            return False
        del table[entry.seq]
        size = len(entry.message.body)
        self.bytes -= size
        held = self._held
        held.entries -= 1
        held.bytes -= size
        owner = entry.owner
        if isinstance(owner, Consumer):
            owner.unacked -= 1
        entry.owner = None
        return True

    def release_run(self, entries: list[QueueEntry]) -> list[QueueEntry]:
        """``release`` of each of ``entries`` (an ack of many), the counts updated once; returns
        the ones this table held (rule 2), in order."""
        table = self.entries
        pop = table.pop
        released: list[QueueEntry] = []
        size = 0
        for entry in entries:
            held_entry = pop(entry.seq, None)
            if held_entry is not entry:
                if held_entry is not None:
                    table[held_entry.seq] = held_entry  # not this one (rule 2): it stays
                continue
            size += len(entry.message.body)
            owner = entry.owner
            if isinstance(owner, Consumer):
                owner.unacked -= 1
            entry.owner = None
            released.append(entry)
        self.bytes -= size
        held = self._held
        held.entries -= len(released)
        held.bytes -= size
        return released

    def message_ids(self) -> list[int]:
        return [entry.message.id for entry in self.entries.values()]

    def drop_all(self) -> None:
        """The queue is deleted: nothing is held any more."""
        held = self._held
        held.entries -= len(self.entries)
        held.bytes -= self.bytes
        self.entries.clear()
        self.bytes = 0
