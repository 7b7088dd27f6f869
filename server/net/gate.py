"""A broadcast "something changed" signal for readers that paused themselves, and one per
saturated queue for the readers it holds.

Readers check their own predicate (``session.read_paused``) and, while it holds, wait here. Whoever
changes an input of that predicate (alarm raised or cleared, store synced) calls ``notify``, which
wakes every waiting reader. A reader that nothing but a saturated queue holds waits for that queue's
release instead (``released``, from ``Saturation``): releases come hundreds of times a second
under saturation, and a wake costs ~2.4 us per paused reader, so with many publishers held on
different queues a broadcast per release would be milliseconds of the loop each
(benchmarks/bench_gate.py). A reader held by several saturated queues waits for them one at a time:
it may read only once none holds it.
"""

from __future__ import annotations

from collections.abc import Hashable

import trio

__all__ = ["Gate"]


class Gate:
    def __init__(self) -> None:
        self._event = trio.Event()
        self._held: dict[Hashable, trio.Event] = {}  # saturated queue -> its held readers' event

    def notify(self) -> None:
        """Every paused reader looks again."""
        self._event.set()
        self._event = trio.Event()

    def released(self, queue: Hashable) -> None:
        """``queue`` is no longer saturated: the readers it held look again."""
        event = self._held.pop(queue, None)
        if event is not None:
            event.set()

    async def wait_changed(self, held_by: Hashable | None = None) -> None:
        """Until ``notify``; or, with ``held_by`` (the saturated queue that alone holds the
        caller), until that queue is released."""
        if held_by is None:
            await self._event.wait()
            return
        event = self._held.get(held_by)
        if event is None:
            event = self._held[held_by] = trio.Event()
        await event.wait()
