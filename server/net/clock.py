"""One task that gives the broker its sense of time: TTL expiry, idle queues, delayed messages,
consumer timeouts.

The domain never reads the clock: this task passes ``now`` (wall-clock seconds, because message
timestamps and x-death times are wall-clock) to ``tick`` and sleeps until the earliest deadline
``next_deadline`` reports, instead of polling. The delivery owner keeps those deadlines in a heap
(``server/broker/deadlines.py``) and calls ``Clock.wake`` (through a plain callback, so the domain
stays trio-free) when one comes before the time this task sleeps towards; it then recomputes.
Nothing due means no wake-ups at all.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import trio

__all__ = ["MIN_SLEEP", "WAKE_COALESCE", "Clock"]

# expiry checks are strict (a message with expires_at == now stays): the clock never re-ticks sooner
# than this after a tick, so a deadline that is due but not yet past cannot spin the loop
MIN_SLEEP = 0.001
# after a wake the clock waits this long before it looks, so a burst of wakes (a new earliest
# deadline after each publish into a TTL queue) costs at most 50 looks a second
WAKE_COALESCE = 0.02


class Clock:
    """Owner of the wake-up event; ``wall`` is the wall clock (tests pass trio's mock clock)."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self.wall = wall
        self._wake = trio.Event()
        self.ticks = 0

    def wake(self) -> None:
        """A deadline was added or moved earlier: recompute (safe to call from any trio task)."""
        self._wake.set()

    async def run(self, tick: Callable[[float], None], next_deadline: Callable[[float], float | None]) -> None:
        while True:
            now = self.wall()
            tick(now)
            self.ticks += 1
            # no await between here and the wait: a wake from now on is seen, and one during the
            # tick is already in what ``next_deadline`` reports
            self._wake = trio.Event()
            deadline = next_deadline(now)
            if deadline is None:
                at = math.inf
            else:
                at = trio.current_time() + max(deadline - self.wall(), MIN_SLEEP)
            with trio.move_on_at(at):
                await self._wake.wait()
            if self._wake.is_set():
                await trio.sleep(WAKE_COALESCE)
