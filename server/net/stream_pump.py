"""The stream pump: carries on the stream dispatches that their per-call bound cut short, and makes
the reads of slow storage that stream consumers wait for.

Owner: this task owns its wake-up event and the worker threads of those reads. A stream queue
reads and delivers at most a bounded amount per dispatch (``stream_queue.WAKE_RECORDS`` /
``WAKE_BYTES``); when that bound stopped it with deliveries left to make, the delivery owner notes
the stream and calls ``wake``. The task then yields once to every other runnable task (publishers,
other queues' consumers, the HTTP API) before it asks the delivery owner to dispatch those streams
again, so a consumer catching up from the start of a long stream shares the event loop instead of
holding it.

A consumer reading a segment that only its tier holds (``s3://``, a shared ``file://``) waits
for a read the delivery owner hands out (``Settlement.take_reads``): it runs here in a worker
thread, at most ``READ_THREADS`` at a time, and its queue is dispatched again once it is done, so
a slow or unreachable store holds up that consumer alone. A failed read is made again after
``RETRY_DELAY``, until the store answers.
"""

from __future__ import annotations

import time

import trio

from headrace.queues import OffLoopRead
from headrace.server.broker import Broker
from headrace.server.broker.settlement import Settlement

__all__ = ["READ_THREADS", "RETRY_DELAY", "StreamPump"]

READ_THREADS = 4  # tier reads in flight at once, over all streams
RETRY_DELAY = 1.0  # seconds before a queue whose read failed is dispatched again (and reads again)


class StreamPump:
    def __init__(self) -> None:
        self._kick = trio.Event()
        self._limiter = trio.CapacityLimiter(READ_THREADS)

    def wake(self) -> None:
        """A stream has deliveries left after its bounded dispatch, or a read to make (called on
        the event loop)."""
        self._kick.set()

    async def run(self, broker: Broker) -> None:
        delivery = broker.delivery  # built with ``wake`` as its ``ShellPorts.wake_stream_pump``
        settlement = delivery.settlement
        async with trio.open_nursery() as nursery:
            while True:
                for vhost, queue, read in settlement.take_reads():
                    nursery.start_soon(self._read, settlement, vhost, queue, read)
                if settlement.stream_backlog:  # (also what dispatches noted before this task started)
                    await trio.sleep(0)  # everything already runnable goes first
                    delivery.stream_continue(broker.vhosts, time.time())
                    continue
                await self._kick.wait()
                self._kick = trio.Event()

    async def _read(self, settlement: Settlement, vhost: str, queue: str, read: OffLoopRead) -> None:
        # abandoned at shutdown: a read of an unreachable store must not hold the broker's exit
        await trio.to_thread.run_sync(read.run, abandon_on_cancel=True, limiter=self._limiter)
        if read.failed:
            await trio.sleep(RETRY_DELAY)
        settlement.read_done(vhost, queue)
        self.wake()
