"""Messages held by ``x-delayed-message`` exchanges until their ``x-delay`` is due.

Rule 1: the ``VHost`` owns one ``DelayedMessages``; only its publish path adds and its tick pops.
A heap keyed by (due time, arrival order) keeps equal due times in publish order.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

__all__ = ["DELAYED_TYPE", "DelayedMessage", "DelayedMessages"]

DELAYED_TYPE = "x-delayed-message"


@dataclass(order=True, slots=True)
class DelayedMessage:
    due: float
    order: int
    exchange: str = field(compare=False)
    routing_key: str = field(compare=False)
    props_raw: bytes = field(compare=False)
    body: bytes = field(compare=False)
    message_id: int = field(compare=False, default=0)  # store id when persistent, else 0


class DelayedMessages:
    def __init__(self) -> None:
        self._heap: list[DelayedMessage] = []
        self._order = itertools.count()

    def add(self, due: float, exchange: str, routing_key: str, props_raw: bytes, body: bytes,
            message_id: int = 0) -> DelayedMessage:
        item = DelayedMessage(due, next(self._order), exchange, routing_key, props_raw, body, message_id)
        heapq.heappush(self._heap, item)
        return item

    def pop_due(self, now: float) -> list[DelayedMessage]:
        heap = self._heap
        out = []
        while heap and heap[0].due <= now:
            out.append(heapq.heappop(heap))
        return out

    def drop_exchange(self, exchange: str) -> list[DelayedMessage]:
        dropped = [m for m in self._heap if m.exchange == exchange]
        if dropped:
            self._heap = [m for m in self._heap if m.exchange != exchange]
            heapq.heapify(self._heap)
        return dropped

    def next_due(self) -> float | None:
        return self._heap[0].due if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
