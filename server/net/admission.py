"""The bound on AMQP sockets that have not authenticated yet, and who gives way at that bound.

A bound that refuses new sockets lets idle ones lock every real client out: 512 sockets that never
speak, reopened as they are closed, kept the broker full indefinitely. So at the bound a new socket
is always admitted, and the socket that has been stuck longest makes room: the one whose last step
(connecting, then sending the whole protocol header) is oldest. A real client sends its header as
soon as it connects and authenticates one round trip later, so it is never stuck for long, while an
attacker's sockets, stuck by design, only push each other out. Dribbling bytes does not count as a
step; only a complete header does.

A socket leaves admission once it has authenticated (``connection.start-ok`` accepted): from then on
``max_connections`` and the per-user limits apply.

Rule: ``Admission`` owns the set of sockets in their handshake; connection tasks enter, report the
header and leave; only ``Admission`` cancels a ticket's scope.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import trio

__all__ = ["Admission", "Ticket"]

log = logging.getLogger("headrace.amqp")

# Evictions are logged as one warning per quiet period, not one line per socket of a flood.
WARN_INTERVAL = 60.0


@dataclass(slots=True, eq=False)
class Ticket:
    """One socket in its handshake; cancelling ``scope`` ends its connection task."""

    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    evicted: bool = False


class Admission:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        # insertion-ordered by last step: the first key is the socket stuck longest
        self._waiting: dict[Ticket, None] = {}
        self.evicted = 0
        self._last_warning = -WARN_INTERVAL

    def __len__(self) -> int:
        return len(self._waiting)

    def enter(self) -> Ticket:
        """A new socket: always admitted, at the cost of the one stuck longest at the bound."""
        while len(self._waiting) >= self.limit:
            self._evict()
        ticket = Ticket()
        self._waiting[ticket] = None
        return ticket

    def header_received(self, ticket: Ticket) -> None:
        """A step forward: the socket goes to the back of the line."""
        if self._waiting.pop(ticket, 0) is None:
            self._waiting[ticket] = None

    def leave(self, ticket: Ticket) -> None:
        """Authenticated, or gone: no longer counted, never evicted."""
        self._waiting.pop(ticket, None)

    def _evict(self) -> None:
        victim = next(iter(self._waiting))
        del self._waiting[victim]
        victim.evicted = True
        victim.scope.cancel()
        self.evicted += 1
        now = time.monotonic()
        if now - self._last_warning >= WARN_INTERVAL:
            self._last_warning = now
            log.warning("%d sockets are in their AMQP handshake (the bound): closing the ones stuck longest "
                        "to admit new connections (%d so far)", self.limit, self.evicted)
