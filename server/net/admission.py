"""The bound on AMQP sockets that have not authenticated yet, and who gives way at that bound.

A bound that refuses new sockets lets idle ones lock every real client out: 512 sockets that never
speak, reopened as they are closed, kept the broker full indefinitely. So at the bound the socket
that has got least far, and among those the oldest, is evicted to make room for the new one. A
real client sends its protocol header as soon as it connects and authenticates one round trip
later, so it is never the oldest idle socket, while an attacker's sockets only push each other out.

Stages, least advanced first: connected (nothing received yet), then header received. A socket
leaves admission once it has authenticated (``connection.start-ok`` accepted): from then on
``max_connections`` and the per-user limits apply.

Rule: ``Admission`` owns the set of sockets in their handshake; connection tasks enter, report
progress and leave; only ``Admission`` cancels a ticket's scope.
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
    stage: int = 0  # 0: nothing received, 1: protocol header received
    evicted: bool = False


class Admission:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        # one insertion-ordered dict per stage: the first key is the oldest socket of that stage
        self._stages: tuple[dict[Ticket, None], dict[Ticket, None]] = ({}, {})
        self.evicted = 0
        self._last_warning = -WARN_INTERVAL

    def __len__(self) -> int:
        return len(self._stages[0]) + len(self._stages[1])

    def enter(self) -> Ticket:
        """A new socket: admitted always, at the cost of the least advanced, oldest one at the bound."""
        while len(self) >= self.limit:
            self._evict()
        ticket = Ticket()
        self._stages[0][ticket] = None
        return ticket

    def header_received(self, ticket: Ticket) -> None:
        if ticket in self._stages[0]:
            del self._stages[0][ticket]
            ticket.stage = 1
            self._stages[1][ticket] = None

    def leave(self, ticket: Ticket) -> None:
        """Authenticated, or gone: no longer counted, never evicted."""
        self._stages[ticket.stage].pop(ticket, None)

    def _evict(self) -> None:
        stage = self._stages[0] if self._stages[0] else self._stages[1]
        victim = next(iter(stage))
        del stage[victim]
        victim.evicted = True
        victim.scope.cancel()
        self.evicted += 1
        now = time.monotonic()
        if now - self._last_warning >= WARN_INTERVAL:
            self._last_warning = now
            log.warning("%d sockets are in their AMQP handshake (the bound): closing the oldest idle ones "
                        "to admit new connections (%d so far)", self.limit, self.evicted)
