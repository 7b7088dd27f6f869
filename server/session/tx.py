"""One channel's open transaction: the publishes and settlements held until tx.commit.

Rule 1: a ``Transaction`` (one per channel, used while the channel is in tx mode) owns the
uncommitted publishes, acks/nacks/rejects and their byte count; the channel adds to it, and takes
everything back at commit or drops it at rollback and close.
Rule 2: the held bytes count as memory the broker holds (the memory alarm sees them, through the
session's total) and are capped per channel: beyond ``max_tx_bytes`` the publish is refused with
406, as RabbitMQ refuses what it cannot hold.
"""

from __future__ import annotations

from headrace.server.amqp import methods as m
from headrace.server.amqp.events import ContentReceived
from headrace.server.broker import errors

__all__ = ["Settlement", "Transaction"]

Settlement = m.BasicAck | m.BasicNack  # a reject is held as a nack of one tag


class Transaction:
    __slots__ = ("publishes", "settlements", "bytes")

    def __init__(self) -> None:
        self.publishes: list[ContentReceived] = []
        self.settlements: list[Settlement] = []
        self.bytes = 0  # bodies and properties of the held publishes

    def hold_publish(self, event: ContentReceived, limit: int) -> int:
        """Hold ``event``; returns its size. 406 past ``limit`` bytes held."""
        size = len(event.body) + len(event.props_raw)
        if self.bytes + size > limit:
            raise errors.precondition_failed(
                f"transaction too large: uncommitted publishes exceed max_tx_bytes ({limit})")
        self.publishes.append(event)
        self.bytes += size
        return size

    def hold_settlement(self, method: Settlement) -> None:
        self.settlements.append(method)

    def take(self) -> tuple[list[ContentReceived], list[Settlement], int]:
        """Everything held, for commit (and the bytes it released); the transaction is empty after."""
        held = (self.publishes, self.settlements, self.bytes)
        self.publishes, self.settlements, self.bytes = [], [], 0
        return held
