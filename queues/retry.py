"""Delayed retry (RabbitMQ 4.3's ``x-delayed-retry-*`` on a quorum queue): a returned message waits
before it is ready again, ``min(x-delayed-retry-min x count, x-delayed-retry-max)`` ms, linear in
the count its type reads (the failures for ``failed``, every return for ``returned`` and ``all``).

Owner: the ``Queue`` whose entries wait here; only its ``give_back`` adds and its ``release_due``
takes, so a waiting entry is neither ready nor unacked (as RabbitMQ counts it) and keeps its place
(``seq``) for when it is ready again.
"""

from __future__ import annotations

import heapq

from .args import QueueArgs
from .message import QueueEntry

__all__ = ["RetryHold", "retry_delay"]


def retry_delay(args: QueueArgs, entry: QueueEntry, failed: bool) -> float:
    """Seconds ``entry`` waits after this return (0: ready at once)."""
    kind = args.delayed_retry
    if kind == "disabled" or (kind == "failed" and not failed) or (kind == "returned" and failed):
        return 0.0
    count = entry.delivery_count if kind == "failed" else max(entry.acquired_count, entry.delivery_count)
    delay_ms = args.delayed_retry_min_ms * max(count, 1)
    if args.delayed_retry_max_ms is not None:
        delay_ms = min(delay_ms, args.delayed_retry_max_ms)
    return delay_ms / 1000


class RetryHold:
    """Entries waiting for their retry, by due time (ties in queue order)."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, QueueEntry]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def hold(self, entry: QueueEntry, due: float) -> None:
        heapq.heappush(self._heap, (due, entry.seq, entry))

    def next_due(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def release_due(self, now: float) -> list[QueueEntry]:
        heap = self._heap
        out: list[QueueEntry] = []
        while heap and heap[0][0] <= now:
            out.append(heapq.heappop(heap)[2])
        return out

    def clear(self) -> list[QueueEntry]:
        out = [item[2] for item in self._heap]
        self._heap.clear()
        return out
