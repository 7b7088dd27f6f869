"""The stream pump: carries on the stream dispatches that their per-call bound cut short.

Owner: this task owns only its wake-up event. A stream queue reads and delivers at most a bounded
amount per dispatch (``stream_queue.WAKE_RECORDS`` / ``WAKE_BYTES``); when that bound stopped it
with deliveries left to make, the delivery owner notes the stream and calls ``wake``. The task
then yields once to every other runnable task (publishers, other queues' consumers, the HTTP API)
before it asks the delivery owner to dispatch those streams again, so a consumer catching up from
the start of a long stream shares the event loop instead of holding it.
"""

from __future__ import annotations

import time

import trio

from headrace.server.broker import Broker

__all__ = ["StreamPump"]


class StreamPump:
    def __init__(self) -> None:
        self._kick = trio.Event()

    def wake(self) -> None:
        """A stream has deliveries left after its bounded dispatch (called on the event loop)."""
        self._kick.set()

    async def run(self, broker: Broker) -> None:
        delivery = broker.delivery  # built with ``wake`` as its ``ShellPorts.wake_stream_pump``
        while True:
            while delivery.settlement.stream_backlog:  # (also what dispatches noted before this task started)
                await trio.sleep(0)  # everything already runnable goes first
                delivery.stream_continue(broker.vhosts, time.time())
            await self._kick.wait()
            self._kick = trio.Event()
