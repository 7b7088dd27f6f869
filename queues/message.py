"""The message as it travels through the broker.

Rule 1: a ``Message`` is created once per publish and never changed; every queue it is routed to
holds the same object, so bodies are never copied. It is not a frozen dataclass only because a
frozen ``__init__`` costs ~3.5 us per message (one ``object.__setattr__`` per field) against ~0.6 us
here, on the hot path of every publish, spill read and recovery; nothing assigns to its fields. Rule 2: per-queue state (position, redelivery,
delivery count, deadline) lives in the queue's ``QueueEntry``, never in the message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EntryRun", "Message", "QueueEntry"]


@dataclass(slots=True, eq=False)
class Message:
    """One published message; ``props_raw`` is the publisher's content-header property bytes
    (flags word(s) then property list), passed to consumers untouched."""

    id: int  # broker-wide, strictly increasing; also the store's record key
    exchange: str
    routing_key: str
    props_raw: bytes
    body: bytes
    persistent: bool = False  # delivery_mode == 2
    priority: int = 0
    expiration_ms: int | None = None  # per-message TTL from the 'expiration' property
    headers: Mapping[str, Any] | None = None  # decoded headers table, read only
    timestamp: float = 0.0  # broker clock (seconds) at publish

    @property
    def size(self) -> int:
        return len(self.body)


@dataclass(slots=True)
class QueueEntry:
    """A message's place in one queue. ``seq`` orders the queue: a requeued entry goes back to the
    position its ``seq`` names, not to the tail."""

    seq: int
    message: Message
    redelivered: bool = False
    delivery_count: int = 0  # times delivered and returned (nack/reject requeue, consumer loss)
    expires_at: float | None = None  # absolute deadline from queue TTL / per-message expiration
    owner: object | None = field(default=None, compare=False)  # consumer (or getter) holding it
    # every return, failed or not, where the failures are counted apart (RabbitMQ 4.3 semantics:
    # ``delivery_count`` then counts the failures alone); not kept through a spill or a restart
    acquired_count: int = 0


# (the first seq, messages) -> a fresh QueueEntry of each, seqs counting up from the first: a run
# of publishes' entries at once (``Queue.enqueue_run``), made in C by the server where it can
EntryRun = Callable[[int, Sequence[Message]], list[QueueEntry]]
