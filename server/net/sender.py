"""Output of many connections written in one scheduler round.

Owner: the ``Sender`` owns the set of connections whose output waits while their writer task is
parked. Connection handlers add themselves (``want``) when their session queues frames; the sender
task, or a task that just released many replies at once (the flusher after a group's fsync),
writes each one's output with one non-blocking ``write(2)`` (``flush``).

Why: a publisher waiting on each confirm and a consumer taking one delivery at a time make every
message wake two writer tasks, one scheduler round each, and those rounds were about a fifth of
the broker's CPU per confirmed message. One sender round writes every connection the last round
touched. Whatever the socket does not take at once, and every case with more to it than a write
(a reply waiting for a definitions fsync, a close, a full socket, TLS), goes to the connection's
own writer task as before; so each connection still has one writer at a time.
"""

from __future__ import annotations

from typing import Protocol

import trio

__all__ = ["Sender", "Sendable"]


class Sendable(Protocol):
    def send_now(self) -> None:
        """Write the queued output at once, or hand it to the connection's writer task."""


class Sender:
    __slots__ = ("_pending", "_event")

    def __init__(self) -> None:
        self._pending: dict[Sendable, None] = {}  # insertion-ordered: connections write in wake order
        self._event = trio.Event()

    def want(self, conn: Sendable) -> None:
        """``conn`` has output and a parked writer: write it in the next round."""
        self._pending[conn] = None
        self._event.set()

    def flush(self) -> None:
        """Write every pending connection now (a write may queue more, e.g. consumers released by a
        drained socket: those are written in the same call)."""
        while self._pending:
            pending, self._pending = self._pending, {}
            for conn in pending:
                conn.send_now()

    async def run(self) -> None:
        while True:
            await self._event.wait()
            self._event = trio.Event()
            self.flush()
