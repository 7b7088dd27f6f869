"""A broadcast "something changed" signal for readers that paused themselves.

Readers check their own predicate (``session.read_paused``) and, while it holds, wait here. Whoever
changes an input of that predicate (alarm raised or cleared, store synced) calls ``notify``.
"""

from __future__ import annotations

import trio

__all__ = ["Gate"]


class Gate:
    def __init__(self) -> None:
        self._event = trio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def wait_changed(self) -> None:
        await self._event.wait()
