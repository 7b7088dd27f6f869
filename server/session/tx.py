"""One channel's open transaction: the publishes and settlements held until tx.commit.

Rule 1: a ``Transaction`` (one per channel, used while the channel is in tx mode) owns the
uncommitted publishes, the deliveries its acks/nacks/rejects took and their byte count; the
channel adds to it, and takes everything back at commit, rollback and close.
Rule 2: everything held was checked when it arrived, as RabbitMQ checks it: a publish's exchange,
permissions and properties, a settlement's delivery tags (taken out of the channel's unacked table
then, so a tag acked twice in one transaction is unknown the second time). A commit checks the
publishes once more before it applies anything, so it applies all of the transaction or none.
A rollback (or the channel closing) gives the taken deliveries back to the channel.
Rule 3: the held bytes count as memory the broker holds (the memory alarm sees them, through the
session's total) and are capped per channel: beyond ``max_tx_bytes`` the publish is refused with
406, as RabbitMQ refuses what it cannot hold.
"""

from __future__ import annotations

from headrace.queues import Destination, QueueEntry
from headrace.server.amqp.events import ContentReceived
from headrace.server.broker import Settle, errors

__all__ = ["HeldSettlement", "Tagged", "Transaction"]

Tagged = list[tuple[int, tuple[Destination, QueueEntry]]]  # (delivery tag, (queue, entry)) in tag order
HeldSettlement = tuple[Tagged, Settle]


class Transaction:
    __slots__ = ("publishes", "settlements", "bytes", "taken")

    def __init__(self) -> None:
        self.publishes: list[ContentReceived] = []
        self.settlements: list[HeldSettlement] = []
        self.bytes = 0  # bodies and properties of the held publishes
        self.taken = 0  # deliveries the held settlements took: they still count against prefetch

    def hold_publish(self, event: ContentReceived, limit: int) -> int:
        """Hold ``event``; returns its size. 406 past ``limit`` bytes held."""
        size = len(event.body) + len(event.props_raw)
        if self.bytes + size > limit:
            raise errors.precondition_failed(
                f"transaction too large: uncommitted publishes exceed max_tx_bytes ({limit})")
        self.publishes.append(event)
        self.bytes += size
        return size

    def hold_settlement(self, taken: Tagged, action: Settle) -> None:
        self.settlements.append((taken, action))
        self.taken += len(taken)

    def take(self) -> tuple[list[ContentReceived], list[HeldSettlement], int]:
        """Everything held, for commit or rollback (and the bytes it released); the transaction
        is empty after."""
        held = (self.publishes, self.settlements, self.bytes)
        self.publishes, self.settlements, self.bytes, self.taken = [], [], 0, 0
        return held
