"""Whether the network shell reads more from one connection (the session's read gate).

Rule 1: a ``ReadPause`` (one per connection, made by its ``Session``) owns the saturated
consumer-backed queues the last batch published into (``saturating``) and the limit of publishes
waiting for an fsync (``max_unconfirmed``); the rest of what it decides by it reads from their
owners: the confirms' count (``ConfirmsAndTx``), the broker's outbox backlogs and alarms, the
delivery owner's saturation tracker (broker/saturation.py) and the connection's counters
(``SessionState``).
Rule 2: the shell asks ``paused`` (through ``Session.read_paused``) before each read; the owner of
each input calls ``gate.notify`` when it changes (a saturated queue's release, ``gate.released``,
wakes only the readers it held), and the reader asks again.
"""

from __future__ import annotations

from headrace.queues import Destination
from headrace.server.broker.outbox import MIRROR_BACKLOG_MAX

from .confirms import ConfirmsAndTx
from .state import SessionState

__all__ = ["ReadPause"]


class ReadPause:
    """The connection's read gate (module docstring)."""

    __slots__ = ("ctx", "confirms", "max_unconfirmed", "saturating")

    def __init__(self, ctx: SessionState, confirms: ConfirmsAndTx, max_unconfirmed: int) -> None:
        self.ctx = ctx
        self.confirms = confirms
        self.max_unconfirmed = max_unconfirmed
        self.saturating: list[Destination] = []  # saturated queues the last batch published into

    def paused(self) -> bool:
        """Stop reading this socket: broker alarm (for connections that publish), too many
        publishes waiting for fsync, a consumer-backed queue the last batch published into is
        saturated, or (for connections that publish) a full mirror or store outbox."""
        return self.paused_otherwise() or (bool(self.saturating) and self.held_by() is not None)

    def paused_otherwise(self) -> bool:
        """``paused`` for a reason other than a saturated queue: what ``Gate.notify`` announces."""
        if self.confirms.unconfirmed >= self.max_unconfirmed:
            return True
        ctx = self.ctx
        broker = ctx.broker
        if ctx.published and (broker.mirror_backlog >= MIRROR_BACKLOG_MAX
                              or broker.store_backlog >= broker.store_backlog_max):
            return True
        return bool(broker.alarms) and (ctx.published > 0 or ctx.tx_bytes > 0)

    def held_by(self) -> Destination | None:
        """A saturated queue the last batch published into (delivery's share of the loop,
        broker/saturation.py), whose release the reader waits for (``Gate.released``); None once
        none is saturated any more."""
        saturated = self.ctx.broker.delivery.saturation.saturated
        for queue in self.saturating:
            if queue in saturated:
                return queue
        self.saturating = []
        return None

    def batch_published(self) -> None:
        """After a batch that published: which of the queues it touched are saturated now."""
        self.saturating = self.ctx.broker.delivery.saturation.check()
