"""One task that gives the broker its sense of time: TTL expiry, idle queues, delayed messages.

The domain never reads the clock; this task passes ``now`` to ``broker.tick`` (wall-clock seconds, because
message timestamps and x-death times are wall-clock) and calls ``broker.tick`` on a fixed
cadence. 100 ms bounds how late a message TTL or x-expires fires, at a cost of ten cheap scans a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import trio

from headrace.server.broker import Broker

__all__ = ["TICK_INTERVAL", "run_clock"]

TICK_INTERVAL = 0.1


async def run_clock(broker: Broker, on_tick: Callable[[], None] | None = None) -> None:
    while True:
        await trio.sleep(TICK_INTERVAL)
        broker.tick(time.time())
        if on_tick is not None:
            on_tick()
