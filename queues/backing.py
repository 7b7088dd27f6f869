"""Where a queue keeps the entries that do not fit in its resident window.

Dependency inversion: ``queues`` defines the protocol, ``persistence.spill`` implements it, so the
pure queue code never imports file I/O. Shape follows nsq's BackendQueue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from .message import QueueEntry

__all__ = ["Backing", "PropsInfo", "RecoveredRow"]

# A persistent message recovered from the message store, still in the store's bytes: (message id,
# delivery count, timestamp ms, exchange + routing key + props + body back to back, and the
# lengths of the first three). Recovery spills these without building a message per row.
RecoveredRow = tuple[int, int, int, bytes, int, int, int]
# (priority, expiration ms) read from property bytes whose flags announce either.
PropsInfo = Callable[[bytes], tuple[int | None, int | None]]


@runtime_checkable
class Backing(Protocol):
    """FIFO of spilled entries. Every method runs on the event loop, so there is no lock: a pager
    that reads off the loop asks ``plan_read`` for a plan, runs ``plan.run()`` in its worker
    thread (a pure read of bytes that are never written again) and applies the result with
    ``finish_read``."""

    generation: int  # bumped whenever an outstanding read plan becomes stale (purge, drop)

    def append(self, entries: Sequence[QueueEntry]) -> None:
        """Add entries at the tail, in order."""

    def append_recovered(self, first_seq: int, rows: Iterable[RecoveredRow], props_info: PropsInfo,
                         ttl: float | None) -> tuple[int, int]:
        """Add recovered persistent messages at the tail, in order, numbered from ``first_seq``,
        with the queue's message TTL ``ttl`` (seconds); returns (entries, body bytes) added."""

    def read_batch(self, max_count: int, max_bytes: int) -> list[QueueEntry]:
        """Remove and return up to ``max_count`` entries (or ``max_bytes`` of bodies) from the head."""

    def plan_read(self, max_count: int, max_bytes: int) -> Any:
        """A read plan with a thread-safe ``run()``, entries ready now (a list), or None."""

    def finish_read(self, plan: Any, result: Any) -> list[QueueEntry]:
        """Apply ``plan.run()``'s result: the entries it took (none if the plan went stale)."""

    def want_page_in(self) -> None:
        """The queue's resident window ran low: whoever pages in should wake (event loop)."""

    def take_lost(self) -> tuple[int, int]:
        """Entries and body bytes skipped as unreadable since the last call."""

    def depth(self) -> int:
        """Number of entries held."""

    def byte_depth(self) -> int:
        """Sum of the body sizes held."""

    def drop(self) -> None:
        """Forget everything (purge, queue delete) and free the files."""

    def close(self) -> None:
        """Release files; the backing is not used again."""
