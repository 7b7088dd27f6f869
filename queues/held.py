"""What every queue of a broker holds in memory, summed as it changes.

Owner: ``HeldTally`` is written only by the containers that hold the entries (``ReadyList`` for
ready entries, ``Queue`` for unacked ones and for its consumers), each adding its own deltas; the
broker shares one tally between all its queues. Why: the memory alarm samples held memory a few
times a second, and summing it queue by queue cost ~0.5 us per queue, 50 ms of blocked event loop
per sample with 100,000 queues. A tally makes the sample O(1) for two integer updates where an
entry enters or leaves a container; a delivery moves an entry from ready to unacked, so its two
updates cancel and the figure stays what the per-queue sum (``Queue.memory``) gives.
"""

from __future__ import annotations

__all__ = ["HeldTally"]


class HeldTally:
    """Resident entries (ready or unacked), the bytes of their bodies, and consumers."""

    __slots__ = ("entries", "bytes", "consumers")

    def __init__(self) -> None:
        self.entries = 0
        self.bytes = 0
        self.consumers = 0
