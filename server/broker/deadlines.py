"""When the broker next has something to do on its own: the one heap of every deadline.

Owner: ``Delivery`` (``delivery.py``) owns the heap. It arms a queue key whenever what it does to a
queue may have moved that queue's next deadline (a new head with a TTL, the last consumer gone
under x-expires, a delayed message held), and takes the due keys on each tick. Other owners of a
deadline arm a ``Timer`` of their own (a connection's consumer timeout: ``Session.deadline_due``),
which the tick hands back to be called. The clock in the network shell sleeps until
``earliest()``; ``on_earlier`` tells it when a deadline comes before the one it sleeps towards, so
nothing polls and a tick touches only what is due instead of scanning every queue or connection.

A queue key is ``(vhost name, queue name)``, or ``(vhost name, None)`` for the vhost's delayed
messages; any other key is a ``Timer``, compared by identity. An entry whose time differs from the
key's armed time is stale and skipped: re-arming pushes a new entry rather than searching the heap,
and the heap is rebuilt once stale entries outnumber live ones.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Protocol, Union

__all__ = ["Deadlines", "DeadlineKey", "QueueKey", "Timer"]


class Timer(Protocol):
    """A deadline owned outside the delivery owner: called when it is due."""

    def deadline_due(self, now: float) -> None: ...


QueueKey = tuple[str, str | None]
DeadlineKey = Union[QueueKey, Timer]


class Deadlines:
    __slots__ = ("_heap", "_armed", "_seq", "on_earlier")

    def __init__(self, on_earlier: Callable[[], None]) -> None:
        self._heap: list[tuple[float, int, DeadlineKey]] = []
        self._armed: dict[DeadlineKey, float] = {}
        self._seq = 0
        self.on_earlier = on_earlier  # the shell's clock wake (``ShellPorts.wake_clock``)

    def arm(self, key: DeadlineKey, when: float | None) -> None:
        """``key`` is next due at ``when`` (None: nothing to do for it)."""
        armed = self._armed
        if when is None:
            armed.pop(key, None)
            return
        if armed.get(key) == when:
            return
        earliest = self.earliest()
        armed[key] = when
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, key))
        if len(self._heap) > 2 * len(armed) + 64:
            self._heap = [e for e in self._heap if armed.get(e[2]) == e[0]]
            heapq.heapify(self._heap)
        if earliest is None or when < earliest:
            self.on_earlier()

    def arm_earlier(self, key: DeadlineKey, when: float) -> None:
        """``key`` is due at ``when`` unless it is armed sooner already."""
        armed = self._armed.get(key)
        if armed is None or when < armed:
            self.arm(key, when)

    def disarm(self, key: DeadlineKey) -> None:
        self._armed.pop(key, None)

    def earliest(self) -> float | None:
        heap, armed = self._heap, self._armed
        while heap:
            when, _, key = heap[0]
            if armed.get(key) == when:
                return when
            heapq.heappop(heap)
        return None

    def pop_due(self, now: float) -> list[DeadlineKey]:
        """Keys due at ``now``, each once; they are disarmed until armed again."""
        heap, armed = self._heap, self._armed
        due: list[DeadlineKey] = []
        while heap and heap[0][0] <= now:
            when, _, key = heapq.heappop(heap)
            if armed.get(key) == when:
                del armed[key]
                due.append(key)
        return due

    def __len__(self) -> int:
        return len(self._armed)
