"""Pure queue logic: messages, ready lists, consumers' credit, bounds, TTL, dead letters, spill.

Nothing here calls up into the broker: what happened to a message comes back as ``Left`` outcomes."""

from .args import Overflow, QueueArgs, QueueArgumentError
from .backing import Backing
from .consumer import Consumer, ConsumerSink, GroupPosition
from .dead_letter import x_death_headers
from .destination import Destination, OffLoopRead
from .message import Message, QueueEntry
from .outcome import ACCEPTED, LOGGED, REJECTED, EnqueueOutcome, Left, QueueStats
from .queue import Queue
from .ready import ReadyList

__all__ = [
    "ACCEPTED",
    "LOGGED",
    "REJECTED",
    "Backing",
    "Consumer",
    "ConsumerSink",
    "Destination",
    "EnqueueOutcome",
    "GroupPosition",
    "Left",
    "Message",
    "OffLoopRead",
    "Overflow",
    "Queue",
    "QueueArgs",
    "QueueArgumentError",
    "QueueEntry",
    "QueueStats",
    "ReadyList",
    "x_death_headers",
]
