"""The ready list of one queue: FIFO by sequence number, requeued entries back in their place.

Rule 1: a ``ReadyList`` owns the resident ready entries. New entries are appended to a deque (O(1));
entries that come back (nack/reject with requeue, channel close) go into a list sorted by ``seq``,
and ``pop`` takes whichever head is older, so a requeued message is delivered again from its
original position. Priority queues keep one such pair per priority and serve the highest first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

from sortedcontainers import SortedKeyList

from .held import HeldTally
from .message import QueueEntry

__all__ = ["ReadyList"]


def _seq(entry: QueueEntry) -> int:
    return entry.seq


class _Lane:
    """Both containers are made on first use: an idle queue holds neither (an empty deque is
    ~620 B, an empty ``SortedKeyList`` ~1.1 KiB, and most queues never see a requeue), and None
    reads as empty wherever a lane is asked whether it has entries."""

    __slots__ = ("fresh", "returned")

    def __init__(self) -> None:
        self.fresh: deque[QueueEntry] | None = None
        self.returned: SortedKeyList | None = None

    def __len__(self) -> int:
        return (len(self.fresh) if self.fresh else 0) + (len(self.returned) if self.returned else 0)

    def peek(self) -> QueueEntry | None:
        fresh, returned = self.fresh, self.returned
        if returned and (not fresh or returned[0].seq < fresh[0].seq):
            return returned[0]  # type: ignore[no-any-return]
        return fresh[0] if fresh else None

    def pop(self) -> QueueEntry:
        fresh, returned = self.fresh, self.returned
        if returned and (not fresh or returned[0].seq < fresh[0].seq):
            return returned.pop(0)  # type: ignore[no-any-return]
        assert fresh  # the lane is not empty (the caller checked the count)
        return fresh.popleft()

    def add_returned(self, entry: QueueEntry) -> None:
        returned = self.returned
        if returned is None:
            returned = self.returned = SortedKeyList(key=_seq)
        returned.add(entry)


class ReadyList:
    """``count`` is the entries in every lane, so an empty list is seen without asking a lane.
    Without priorities there is one lane, kept as ``_one``: append, peek and pop go straight to
    it (they run once per message). Slotted, like its lanes: one per queue. Every change to
    ``count`` and ``bytes`` goes to ``held`` too, the tally the queue shares with the others of
    its broker (held.py)."""

    __slots__ = ("_lanes", "_max", "_one", "count", "bytes", "held")

    def __init__(self, max_priority: int | None = None, held: HeldTally | None = None) -> None:
        self._lanes = [_Lane() for _ in range((max_priority or 0) + 1)]
        self._max = max_priority or 0
        self._one = self._lanes[0]
        self.count = 0
        self.bytes = 0
        self.held = held if held is not None else HeldTally()

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def _lane(self, entry: QueueEntry) -> _Lane:
        if not self._max:
            return self._lanes[0]
        return self._lanes[min(entry.message.priority, self._max)]

    def append(self, entry: QueueEntry) -> None:
        lane = self._lane(entry) if self._max else self._one
        fresh = lane.fresh
        if fresh is None:  # the lane's first entry (an idle queue holds no deque)
            fresh = lane.fresh = deque()
        fresh.append(entry)
        size = len(entry.message.body)
        self.count += 1
        self.bytes += size
        held = self.held
        held.entries += 1
        held.bytes += size

    def extend(self, entries: Iterable[QueueEntry]) -> None:
        for entry in entries:
            self.append(entry)

    def append_run(self, entries: list[QueueEntry], size: int) -> None:
        """``append`` of each entry in order (``size``: their body bytes), the counts added once
        (a run of publishes)."""
        if self._max:
            self.extend(entries)
            return
        lane = self._one
        fresh = lane.fresh
        if fresh is None:
            fresh = lane.fresh = deque()
        fresh.extend(entries)
        self.count += len(entries)
        self.bytes += size
        held = self.held
        held.entries += len(entries)
        held.bytes += size

    def requeue(self, entry: QueueEntry) -> None:
        self._lane(entry).add_returned(entry)
        size = len(entry.message.body)
        self.count += 1
        self.bytes += size
        held = self.held
        held.entries += 1
        held.bytes += size

    def _head_lane(self) -> _Lane:
        """The lane served next; only called when ``count`` is not 0."""
        if not self._max:
            return self._one
        for lane in reversed(self._lanes):
            if len(lane):
                return lane
        raise AssertionError("count says entries are ready, no lane has one")

    def peek(self) -> QueueEntry | None:
        if not self.count:
            return None
        lane = self._one if not self._max else self._head_lane()
        return lane.fresh[0] if not lane.returned else lane.peek()  # type: ignore[index]

    def pop(self) -> QueueEntry | None:
        """The head, gone from memory as far as ``held`` goes (dropped, expired)."""
        entry = self.take()
        if entry is not None:
            held = self.held
            held.entries -= 1
            held.bytes -= len(entry.message.body)
        return entry

    def take(self) -> QueueEntry | None:
        """The head, still held: its queue either keeps it unacked, which leaves ``held`` as it
        is (most deliveries: no tally update at all), or lets it go and says so there."""
        if not self.count:
            return None
        lane = self._one if not self._max else self._head_lane()
        entry = lane.fresh.popleft() if not lane.returned else lane.pop()  # type: ignore[union-attr]
        self.count -= 1
        self.bytes -= len(entry.message.body)
        return entry

    def take_run(self, count: int) -> list[QueueEntry]:
        """``take`` of the next ``count`` entries (at most ``count`` are ready), the counts
        updated once: a plain queue with nothing returned pops its deque straight."""
        lane = self._one
        if self._max or lane.returned:
            take = self.take
            return [take() for _ in range(count)]  # type: ignore[misc]
        fresh: deque[QueueEntry] = lane.fresh  # type: ignore[assignment]  # count says it has them
        if count == len(fresh):  # all of them (a queue its consumers keep up with)
            entries = list(fresh)
            fresh.clear()
        else:
            popleft = fresh.popleft
            entries = [popleft() for _ in range(count)]
        self.count -= count
        self.bytes -= sum([len(entry.message.body) for entry in entries])
        return entries

    def clear(self) -> list[QueueEntry]:
        out = [e for e in self]
        for lane in self._lanes:
            lane.fresh = lane.returned = None  # an emptied queue goes back to an idle one's size
        self.held.entries -= self.count
        self.held.bytes -= self.bytes
        self.count = 0
        self.bytes = 0
        return out

    def __iter__(self) -> Iterator[QueueEntry]:
        for lane in reversed(self._lanes):
            yield from lane.returned or ()
            yield from lane.fresh or ()
