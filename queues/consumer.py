"""A consumer as its queue sees it, and the sink deliveries go into.

The sink is the consumer's side of the hand-over (an AMQP channel's outgoing buffer, an HTTP
stream): the queue hands an entry down into it during dispatch and learns nothing back but
``has_capacity``, so no delivery climbs back up into the broker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .message import QueueEntry

if TYPE_CHECKING:
    from .queue import Queue

__all__ = ["Consumer", "ConsumerSink"]


class ConsumerSink(Protocol):
    """Where a consumer's deliveries go (an AMQP channel, an HTTP stream). ``deliver`` must not
    call back into the queue's dispatch."""

    def has_capacity(self) -> bool: ...

    def deliver(self, consumer: Consumer, queue: Queue, entry: QueueEntry) -> None: ...

    def consumer_cancelled(self, consumer: Consumer) -> None:
        """The queue was deleted under the consumer."""


@dataclass(slots=True, eq=False)
class Consumer:
    tag: str
    sink: ConsumerSink
    no_ack: bool = False
    prefetch: int = 0  # 0 = unlimited
    exclusive: bool = False
    priority: int = 0
    channel_id: int = 0
    owner: object | None = None
    unacked: int = 0

    def can_take(self) -> bool:
        """nsq's RDY predicate: credit left and a sink with room."""
        if not self.no_ack and self.prefetch and self.unacked >= self.prefetch:
            return False
        return self.sink.has_capacity()
