"""Which consumer-backed queues are falling behind their publishers: the publishers' read gate.

Rule 1: one ``Saturation`` per broker, owned by the delivery owner (``Delivery.saturation``). The
delivery owner notes each queue a publish enqueued into (``touched``, one dict store per routed
message); the session turns that into the signal once per batch (``check``) and keeps the
saturated queues it published into; its ``read_paused`` holds while any of them stays saturated.
Rule 2: a queue is saturated when it has consumers and at least ``high`` messages ready (the
``saturation_ready`` setting): its consumers are being fed, yet the publishers are ahead of them,
so every message more waits behind the others and only adds latency. A queue without consumers is
a backlog, never saturated.
Rule 3: release is the owner's: after a dispatch that follows acks or new credit (``drained``) once
the queue is down to ``low`` (``saturation_resume_ready``), and on the clock (``tick``) for a queue
that lost its consumers, was deleted, or delivered nothing for ``STALLED_TICKS`` ticks (its
consumers stalled: a backlog again, which must not hold publishers; it stays exempt until it
drains). Each release calls ``on_release`` with the queue (the shell's ``Gate.released``), so the
readers that queue held, and only those, look again.
"""

from __future__ import annotations

from collections.abc import Callable

from headrace.queues import Destination

__all__ = ["RESUME_READY", "SATURATED_READY", "SATURATION_TICK", "STALLED_TICKS", "Saturation"]

# Ready messages behind which a consumer-backed queue holds its publishers (the default of the
# saturation_ready setting). At the 20-35k msg/s a pair of pika consumers takes on this machine,
# 100 messages are 3-5 ms of waiting. Bounds this low hold because each connection starts with a
# small receive window (amqp_rcvbuf): a resumed read brings about a hundred publishes, so a held
# publisher is read about once per release. With Linux's autotuned windows one read brings ~1000,
# past any bound under that (1000/250 there). 500/150 measured the same throughput at a ~10% higher
# saturated p50 (benchmarks/RESULTS.md, "Saturated p50 with BBR clients").
SATURATED_READY = 100
# Publishers read again once the queue is down to this (saturation_resume_ready): enough left that
# the consumers keep working while the first batch after the pause arrives.
RESUME_READY = 30
# Clock ticks (100 ms each) without a single delivery after which a saturated queue's consumers
# count as stalled: a second, so a loaded machine that starves the consumers' processes for a
# moment does not count, while a consumer that stopped acking holds its publishers at most that long.
STALLED_TICKS = 10
# Seconds between ticks: the clock ticks saturation on this cadence while a queue is saturated or
# stalled (``on_saturated`` wakes it when the first one is), and not at all otherwise.
SATURATION_TICK = 0.1


class Saturation:
    __slots__ = ("touched", "saturated", "stalled", "on_release", "on_saturated", "high", "low")

    def __init__(self, on_release: Callable[[Destination], None], on_saturated: Callable[[], None],
                 high: int = SATURATED_READY, low: int = RESUME_READY) -> None:
        self.high = high  # ready messages at which a consumer-backed queue holds its publishers
        self.low = low  # ... and at which it releases them
        self.touched: dict[Destination, None] = {}  # queues published into by the batch being applied
        self.saturated: dict[Destination, tuple[int, int]] = {}  # queue -> (delivered count, ticks without)
        self.stalled: set[Destination] = set()  # consumers delivered nothing for a tick: exempt till drained
        self.on_release = on_release  # the shell's ``ShellPorts.saturation_released`` (``Gate.released``)
        self.on_saturated = on_saturated  # the clock's wake (``ShellPorts.wake_clock``): ticks are due again

    def check(self) -> list[Destination]:
        """Once per publishing batch: the queues it published into that are now saturated."""
        found: list[Destination] = []
        saturated = self.saturated
        high = self.high
        for queue in self.touched:
            if (queue.consumer_count and queue.messages_ready >= high and not queue.deleted
                    and queue not in self.stalled):
                if queue not in saturated:
                    if not saturated and not self.stalled:
                        self.on_saturated()
                    saturated[queue] = (queue.stats.delivered, 0)
                found.append(queue)
        self.touched.clear()
        return found

    def drained(self, queue: Destination) -> None:
        """After a dispatch that followed acks or new credit: release the queue once it drained."""
        if queue.messages_ready <= self.low:
            self.stalled.discard(queue)
            if self.saturated.pop(queue, None) is not None:
                self.on_release(queue)

    def tick(self) -> None:
        """The clock, every 100 ms: release the queues no longer fed, or not draining at all."""
        self.touched.clear()  # left by publishes outside a session batch (HTTP, delayed, expiry)
        if self.stalled:
            self.stalled = {q for q in self.stalled if not q.deleted and q.messages_ready > self.low}
        if not self.saturated:
            return
        released: list[Destination] = []
        for queue, (seen, idle) in list(self.saturated.items()):
            delivered = queue.stats.delivered
            if queue.deleted or not queue.consumer_count or queue.messages_ready <= self.low:
                del self.saturated[queue]
                released.append(queue)
            elif delivered != seen:
                self.saturated[queue] = (delivered, 0)
            elif idle + 1 >= STALLED_TICKS:
                del self.saturated[queue]
                self.stalled.add(queue)
                released.append(queue)
            else:
                self.saturated[queue] = (seen, idle + 1)
        for queue in released:
            self.on_release(queue)
