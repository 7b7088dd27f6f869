"""What every queue type is to the delivery owner: the ``Destination`` protocol, and the state
all types share.

Rule 1: the delivery owner (``server/broker/delivery.py`` and ``settlement.py``) and everything
above it talk to a queue of any type through this class only: nobody tests a queue's type. Where
types differ, each answers the same question its own way:
- ``enqueue`` says ``LOGGED`` when the message goes to the type's own log (a stream: the delivery
  owner appends the record with the store, and dispatches once the flusher made it durable);
- ``dispatch`` takes the turn's read budget, which a log reads within (``backlogged`` says it was
  cut short); a classic queue ignores it. A log whose next bytes lie in slow storage (a stream's
  tiered segment) leaves the reads in ``reads_wanted``: the shell makes them off the event loop,
  then the queue is dispatched again;
- ``prepare_consumer`` checks a new consumer's arguments as the type's RabbitMQ rules say;
- ``settle_request`` says whether settling left something for the store to write (a stream's
  tracked offsets);
- ``purge`` and ``get`` raise the type's refusal where it has one (``is_log`` is there for the
  HTTP API, which answers a log's refusals its own way before asking).
Rule 2: ``Destination`` owns what every type has: identity and arguments, its consumers (the
list, whether their priorities differ, whether one ever came), counters, last use (x-expires) and
the deleted flag. Each sibling owns its contents: ``queue.Queue`` (classic and quorum: ready list,
spill, unacked entries) and the stream log (``server/broker/stream_queue.py``).
Rule 3: type rules are data. ``queue_type`` is the declared type; ``counts_deliveries`` (a
``x-delivery-limit``, or a quorum queue, which always counts) says whether deliveries carry
``x-delivery-count``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .args import QueueArgs, QueueArgumentError
from .consumer import Consumer, GroupPosition
from .held import HeldTally
from .message import EntryRun, Message, QueueEntry
from .outcome import EnqueueOutcome, Left, QueueStats

__all__ = ["Destination", "OffLoopRead"]


class OffLoopRead(Protocol):
    """A read the shell makes in a worker thread for a queue (a stream's tiered segment): ``run``
    touches nothing but the read's own object, which the queue looks at when dispatched again;
    ``failed`` says the shell is to wait a moment before that."""

    failed: bool

    def run(self) -> None: ...


class Destination(ABC):
    __slots__ = ("name", "vhost", "queue_type", "durable", "exclusive_owner", "auto_delete", "arguments",
                 "args", "counts_deliveries", "stats", "had_consumer", "deleted", "timed", "backlogged",
                 "reads_wanted",
                 "_consumers", "_mixed_priorities", "_held", "_last_used")

    # a log (a stream): consuming removes nothing, retention alone truncates it, so it refuses
    # basic.get, purge and the HTTP streaming consume
    is_log = False

    def __init__(self, name: str, queue_type: str, *, vhost: str, durable: bool, exclusive_owner: object | None,
                 auto_delete: bool, arguments: Mapping[str, Any] | None, args: QueueArgs | None,
                 held: HeldTally | None) -> None:
        self.name = name
        self.vhost = vhost
        self.queue_type = queue_type
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments: dict[str, Any] = dict(arguments or {})
        self.args = args if args is not None else QueueArgs.parse(self.arguments, name)
        self.counts_deliveries = queue_type == "quorum" or self.args.delivery_limit is not None
        self.stats = QueueStats()
        self.had_consumer = False
        self.deleted = False
        # whether this queue has ever had a reason for a deadline (a TTL, an x-expires lease, a
        # message with an expiration): until then the delivery owner need not re-arm its timer
        # after every dispatch; once set it stays set, as entries keep their expiry
        self.timed = (self.args.message_ttl_ms is not None or self.args.expires_ms is not None
                      or self.args.delayed_retry != "disabled")
        self.backlogged = False  # the last dispatch stopped at its read budget with more to deliver
        self.reads_wanted: list[OffLoopRead] = []  # reads its dispatch waits for (taken by the delivery owner)
        self._held = held if held is not None else HeldTally()  # shared by the broker's queues (held.py)
        self._consumers: list[Consumer[Any]] = []
        self._mixed_priorities = False  # consumers of more than one priority: kept by add/remove
        self._last_used = 0.0

    # ------------------------------------------------------------------ what the type holds
    @property
    @abstractmethod
    def messages_ready(self) -> int: ...

    @property
    @abstractmethod
    def messages_unacked(self) -> int: ...

    @property
    def message_bytes_ready(self) -> int:
        return 0

    @property
    def message_bytes_unacked(self) -> int:
        return 0

    @property
    def memory(self) -> int:
        """Estimated RAM held for this queue's messages."""
        return 0

    @property
    def resident_count(self) -> int:
        return 0

    def spilled_count(self) -> int:
        return 0

    def spilled_bytes(self) -> int:
        return 0

    def head(self) -> QueueEntry | None:
        """The next resident entry to go out, where the type keeps one."""
        return None

    def log_info(self) -> dict[str, Any] | None:
        """What the HTTP API and CLI show of a type that is a log (None for the others)."""
        return None

    def describe_consumers(self) -> list[dict[str, Any]]:
        """Each consumer's position and lag, where the type reads by position (a log)."""
        return []

    def describe_groups(self) -> list[GroupPosition]:
        """Each consumer group's active member, committed offset and lag, where the type has
        groups (a log's single active consumers and named consumers)."""
        return []

    # ------------------------------------------------------------------ the message path
    @abstractmethod
    def enqueue(self, message: Message, now: float, left: list[Left] | None = None) -> EnqueueOutcome:
        """Take a routed message: ACCEPTED, REJECTED (overflow: the publisher is nacked) or LOGGED
        (the delivery owner appends it to the type's log with the store). What the length bounds
        dropped goes to ``left``."""

    def takes_runs(self) -> bool:
        """Whether ``enqueue_run`` may take a run of publishes now: only where none of them can be
        refused, dropped or logged (a classic queue without length bounds)."""
        return False

    def enqueue_run(self, messages: Sequence[Message], size: int, now: float, expiring: bool = True,
                    make_entries: EntryRun | None = None) -> None:
        """``enqueue`` of each message in order (``size``: their body bytes), every one ACCEPTED,
        nothing in ``left``; called only after ``takes_runs`` said True. ``expiring``: some
        message of the run may carry an expiration (False: none does)."""
        raise NotImplementedError(f"{self.queue_type} queues take publishes one by one")

    @abstractmethod
    def dispatch(self, now: float, left: list[Left] | None = None, delivered: list[QueueEntry] | None = None,
                 budget: Any = None) -> int:
        """Hand messages to consumers with credit; returns how many. Entries now unacked go to
        ``delivered`` when given; messages that left for good to ``left``; a log reads within
        ``budget`` and sets ``backlogged`` when it stopped at it."""

    @abstractmethod
    def get(self, now: float, *, no_ack: bool, owner: object, left: list[Left] | None = None) -> QueueEntry | None:
        """basic.get: the next message, unacked under ``owner`` unless ``no_ack``."""

    @abstractmethod
    def ack(self, entry: QueueEntry, left: list[Left] | None = None) -> None: ...

    def ack_run(self, entries: list[QueueEntry], left: list[Left] | None = None) -> None:
        """``ack`` of each of ``entries`` (an ack of many settles each queue's share at once)."""
        for entry in entries:
            self.ack(entry, left)

    @abstractmethod
    def requeue(self, entry: QueueEntry, left: list[Left] | None = None) -> None: ...

    @abstractmethod
    def reject(self, entry: QueueEntry, left: list[Left] | None = None) -> None: ...

    def give_back(self, entry: QueueEntry, left: list[Left] | None, failed: bool, now: float) -> None:
        """A return under RabbitMQ 4.3's counting (``Queue.give_back``); a log just requeues."""
        self.requeue(entry, left)

    def release_delayed(self, now: float) -> bool:
        """Whether returns waiting for a delayed retry became ready (only a queue holds any)."""
        return False

    def settle_request(self) -> bool:
        """Whether settling left something for the store to write (and forget it)."""
        return False

    def prepare_consumer(self, consumer: Consumer[Any], arguments: Mapping[str, Any], now: float) -> None:
        """Before basic.consume-ok: refuse what the type refuses, place what it places. A queue
        that is no log takes no group arguments: ``x-super-stream`` is a stream consumer's, and
        ``x-single-active-consumer`` on a consumer asks for a stream's group; on a classic or
        quorum queue single active consumer is the queue's argument. RabbitMQ ignores both here,
        which leaves a consumer believing it reads alone while it shares the queue round-robin,
        so they are refused (``QueueArgumentError``, a 406); ``false``, or ``true`` on a queue
        declared single-active, asks nothing the queue does not do and is accepted."""
        where = f"queue '{self.name}' in vhost '{self.vhost}' of queue type rabbit_{self.queue_type}_queue"
        if "x-super-stream" in arguments:
            raise QueueArgumentError(f"invalid arg 'x-super-stream' for {where}: a consumer argument of stream "
                                     "queues only")
        sac = arguments.get("x-single-active-consumer")
        if sac is not None and sac is not False and not (sac is True and self.args.single_active_consumer):
            raise QueueArgumentError(f"invalid arg 'x-single-active-consumer' for {where}: as a consumer argument "
                                     "it is for stream queues; declare the queue with it instead")

    # ------------------------------------------------------------------ upkeep
    @abstractmethod
    def purge(self, left: list[Left] | None = None) -> int: ...

    def unacked_message_ids(self) -> list[int]:
        """Ids of the stored messages delivered and not yet settled (a purge spares them)."""
        return []

    def expire(self, now: float, left: list[Left] | None = None) -> int:
        """Drop expired messages at the head; returns how many."""
        return 0

    def next_deadline(self) -> float | None:
        """When the next message expires."""
        return None

    def apply_args(self, args: QueueArgs, left: list[Left] | None = None) -> None:
        """New effective arguments (a policy changed)."""
        self.args = args
        self.counts_deliveries = self.queue_type == "quorum" or args.delivery_limit is not None
        self.timed = (self.timed or args.message_ttl_ms is not None or args.expires_ms is not None
                      or args.delayed_retry != "disabled")

    def page_in_wanted(self) -> bool:
        """Whether spilled messages should be read back now."""
        return False

    def delete(self) -> list[Consumer[Any]]:
        """Everything goes; returns the consumers, to be told."""
        return self._drop_consumers()

    def _drop_consumers(self) -> list[Consumer[Any]]:
        consumers, self._consumers = self._consumers, []
        self._held.consumers -= len(consumers)
        self.deleted = True
        return consumers

    # ------------------------------------------------------------------ consumers
    @property
    def consumer_count(self) -> int:
        return len(self._consumers)

    @property
    def has_exclusive_consumer(self) -> bool:
        return any(c.exclusive for c in self._consumers)

    def consumers(self) -> list[Consumer[Any]]:
        return list(self._consumers)

    def add_consumer(self, consumer: Consumer[Any]) -> None:
        self._consumers.append(consumer)
        self._held.consumers += 1
        self.had_consumer = True  # auto-delete applies only after the first consumer left
        self._mixed_priorities = len({c.priority for c in self._consumers}) > 1

    def remove_consumer(self, consumer: Consumer[Any]) -> Consumer[Any] | None:
        """By identity, not tag: a tag is unique on its channel only, so two channels may both
        consume from this queue under the same tag."""
        for i, c in enumerate(self._consumers):
            if c is consumer:
                del self._consumers[i]
                self._held.consumers -= 1
                self._mixed_priorities = len({c.priority for c in self._consumers}) > 1
                return consumer
        return None

    # ------------------------------------------------------------------ last use (x-expires)
    def touch(self, now: float) -> None:
        self._last_used = now

    @property
    def last_used(self) -> float:
        """When the queue was last declared, consumed from or got from (RabbitMQ's idle_since)."""
        return self._last_used

    def idle_deadline(self) -> float | None:
        """When x-expires deletes this queue if nothing uses it (``idle_expired`` is true after it)."""
        expires = self.args.expires_ms
        if expires is None or self._consumers:
            return None
        return self._last_used + expires / 1000

    def idle_expired(self, now: float) -> bool:
        expires = self.args.expires_ms
        return expires is not None and not self._consumers and now - self._last_used > expires / 1000
