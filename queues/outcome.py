"""What happened to a queue's messages, reported to the caller instead of through hooks.

A ``Queue`` never calls up: every method that can make a message leave (enqueue with its bounds,
dispatch, get, ack/requeue/reject, expire, purge, page-in) takes an optional ``left`` list and
appends a ``Left`` for each message that left the queue for good. The broker's delivery owner reads
the list right after the call and does what follows from it, in order: republish a dead letter to
its exchange, then write the store's Ack.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from .message import QueueEntry

__all__ = ["ACCEPTED", "REJECTED", "EnqueueOutcome", "Left", "QueueStats", "left_entry"]


class Left(NamedTuple):
    """One message gone from a queue. ``reason`` is why it was dead: ``expired``, ``maxlen``,
    ``rejected`` or ``delivery_limit`` (the x-death reasons); None when it was acked, consumed
    without ack, or purged. ``held`` is False for a message the queue refused (reject-publish with
    dead-lettering): the queue never held it, so there is no record of it to acknowledge."""

    entry: QueueEntry
    reason: str | None
    held: bool


_new = tuple.__new__  # NamedTuple's own __new__ costs ~4x this on the no-ack delivery path


def left_entry(entry: QueueEntry, reason: str | None, held: bool = True) -> Left:
    return _new(Left, (entry, reason, held))


class EnqueueOutcome(Enum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"  # overflow reject-publish: the publisher gets a nack
    LOGGED = "logged"  # taken into the type's own log: the delivery owner appends it with the store


# the members as module names, for the publish path: reading one off the Enum class costs ~90 ns,
# a global ~8 (timeit), and every enqueue returns one that its caller compares
ACCEPTED = EnqueueOutcome.ACCEPTED
REJECTED = EnqueueOutcome.REJECTED
LOGGED = EnqueueOutcome.LOGGED


@dataclass(slots=True)
class QueueStats:
    """Counters since the queue was created (the management API's message_stats). ``delivered``
    counts every delivery and get (RabbitMQ's deliver_get); the ``got*`` and ``delivered_no_ack``
    ones split it as RabbitMQ does, the rest being deliveries to consumers that ack."""
    published: int = 0
    delivered: int = 0
    got: int = 0  # basic.get with ack
    got_no_ack: int = 0
    get_empty: int = 0
    delivered_no_ack: int = 0  # to consumers without ack
    acked: int = 0
    redelivered: int = 0
    expired: int = 0
    dropped: int = 0  # drop-head, reject-publish
    dead_lettered: int = 0
    spill_damaged: int = 0  # spilled entries lost to a damaged spill record
