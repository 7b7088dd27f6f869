"""A consumer as its queue sees it, and the sink deliveries go into.

The sink is the consumer's side of the hand-over (an AMQP channel's outgoing buffer, an HTTP
stream): the queue hands an entry down into it during dispatch and learns nothing back but
``has_capacity``, so no delivery climbs back up into the broker.

Rule: this module sits below ``queue.py``, which holds the consumers. A sink is told which queue a
delivery came from (the AMQP channel keeps it with the delivery tag, to settle it there later), so
the sink protocol is generic in that queue type (``ConsumerSink[Queue]``) rather than importing the
queue: the queue depends on its consumers, never the other way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from .message import QueueEntry

__all__ = ["Consumer", "ConsumerSink"]

Q = TypeVar("Q")  # the queue a consumer takes from (``queue.Queue`` and its subclasses)
Q_contra = TypeVar("Q_contra", contravariant=True)


class ConsumerSink(Protocol[Q_contra]):
    """Where a consumer's deliveries go (an AMQP channel, an HTTP stream). ``deliver`` must not
    call back into the queue's dispatch."""

    def has_capacity(self) -> bool: ...

    def deliver(self, consumer: Consumer[Any], queue: Q_contra, entry: QueueEntry, now: float) -> None:
        """Hand ``entry`` over at ``now`` (the time the consumer timeout counts from)."""

    def consumer_cancelled(self, consumer: Consumer[Any]) -> None:
        """The queue was deleted under the consumer."""


@dataclass(slots=True, eq=False)
class Consumer(Generic[Q]):
    tag: str
    sink: ConsumerSink[Q]
    no_ack: bool = False
    prefetch: int = 0  # 0 = unlimited
    exclusive: bool = False
    priority: int = 0
    channel_id: int = 0
    owner: object | None = None
    unacked: int = 0
    # its sink takes a turn's deliveries at once: ``credit()`` (-1: no count bound, 0: no room)
    # and ``deliver_run(consumer, queue, entries, now)`` besides ``ConsumerSink``'s calls
    runs: bool = False
    # basic.consume's arguments as the client sent them, for the management API (None: none)
    arguments: dict[str, Any] | None = None

    def can_take(self) -> bool:
        """nsq's RDY predicate: credit left and a sink with room."""
        if not self.no_ack and self.prefetch and self.unacked >= self.prefetch:
            return False
        return self.sink.has_capacity()


@dataclass(slots=True)
class GroupPosition:
    """One consumer group's place on one log (a stream, or a super stream's partition), as the
    HTTP API and ``/metrics`` show it. A group is a consumer name: its single-active members now,
    or only the offset it acked last (a group whose members all left keeps that)."""
    group: str
    members: int  # single-active members on this log now (0: none, or plain named consumers)
    active: Consumer[Any] | None  # the member that reads now
    committed: int | None  # the group's last acked offset
    lag: int  # committed messages after the committed offset (none yet: after the active one's position)
