"""When a channel's deliveries were made, coarsely: what the consumer timeout needs to know.

Rule 1: an ``AckStamps`` (one per channel, while the consumer timeout is on) owns the stamps of
that channel's deliveries that need an ack: ``(first tag, time)`` once per ``grain`` seconds, not
one per delivery, so a busy channel keeps at most a few thousand of them between two checks and a
delivery costs one comparison. The stamp of a delivery is the time of the stamp before its tag or
at it; a deadline adds one grain to it, so a channel is never timed out early.
Rule 2: the deadline itself is the session's (``Session.deadline_due``): it sits in the broker's one
deadline heap (``broker/deadlines.py``), armed when a channel's first stamp is made and re-armed
at its channels' earliest due when it fires. So nothing scans connections on a clock tick, and the
clock sleeps until the first delivery that could time out.
"""

from __future__ import annotations

from collections import deque

__all__ = ["AckStamps"]

# The coarsest a stamp may be: late by at most a second against a timeout of minutes (RabbitMQ
# checks its consumer timeout on a channel tick of about a minute), finer for a short timeout.
MAX_GRAIN = 1.0


class AckStamps:
    __slots__ = ("limit", "grain", "slack", "stamps", "next_at")

    def __init__(self, limit: float) -> None:
        self.limit = limit  # seconds a delivery may stay unacked
        self.grain = min(MAX_GRAIN, limit / 10)
        self.slack = self.grain  # the largest grain a stamp was made with (grains only shrink)
        self.stamps: deque[tuple[int, float]] = deque()  # (first tag, time), tags and times rising
        self.next_at = 0.0  # deliveries before this time share the last stamp

    def tighten(self, limit: float) -> None:
        """A consumer with a shorter timeout joined (RabbitMQ 4.3's per-consumer timeout): the
        channel's deadline follows the shortest; older stamps keep their own grain (``slack``)."""
        if limit < self.limit:
            self.limit = limit
            self.grain = min(self.grain, limit / 10)

    def times(self) -> tuple[list[int], list[float]]:
        """The stamps' first tags and times, for a walk over the unacked deliveries."""
        return [tag for tag, _ in self.stamps], [at for _, at in self.stamps]

    def stamp(self, tag: int, now: float) -> bool:
        """A delivery needing an ack at ``now`` opens a new stamp (the caller checked ``next_at``).
        True when it is the channel's first: its session arms the deadline then."""
        first = not self.stamps
        self.stamps.append((tag, now))
        self.next_at = now + self.grain
        return first

    def due(self, oldest: int | None) -> float | None:
        """When the oldest unacked delivery (its tag, or None: none unacked) times out; stamps of
        deliveries all settled are dropped on the way."""
        stamps = self.stamps
        if oldest is None:
            stamps.clear()
            self.next_at = 0.0
            return None
        while len(stamps) > 1 and stamps[1][0] <= oldest:
            stamps.popleft()
        return stamps[0][1] + self.grain + self.limit if stamps else None
