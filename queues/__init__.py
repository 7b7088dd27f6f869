"""Pure queue logic: messages, ready lists, consumers' credit, bounds, TTL, dead letters, spill."""

from .args import Overflow, QueueArgs, QueueArgumentError
from .backing import Backing
from .consumer import Consumer, ConsumerSink
from .dead_letter import DeadLetter, x_death_headers
from .message import Message, QueueEntry
from .queue import EnqueueOutcome, Queue, QueueStats
from .ready import ReadyList

__all__ = [
    "Backing",
    "Consumer",
    "ConsumerSink",
    "DeadLetter",
    "EnqueueOutcome",
    "Message",
    "Overflow",
    "Queue",
    "QueueArgs",
    "QueueArgumentError",
    "QueueEntry",
    "QueueStats",
    "ReadyList",
    "x_death_headers",
]
