"""What happens to a message once it is in a queue: dispatch, settlement, basic.get, dead letters.

Rule 1: ``Settlement`` is the delivery owner's collaborator for the queue side (``delivery.py``
holds the publish side, consumers coming and going, queue deletion and time, and makes one of
these): dispatch, settle, get, purge, page-in, a policy's new arguments, recovery. It owns the
stream read budget and the streams that budget cut short (``stream_continue`` reads them on); it
writes the store's Deliver and Ack records and a stream's offset request, arms a queue's deadline
in the owner's ``Deadlines`` and tells ``Saturation`` when a queue drained, through their methods.
Rule 2: a dead letter goes back through the publish path it was given (``republish``, the owner's
``Delivery.publish``) before the store's Ack of the original, so a crash between the two loses
nothing. It is the only call that goes back to the publish side.
Rule 3: queues are asked through ``Destination`` (queues/destination.py), never by type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from enum import Enum
from typing import Any, Protocol

from headrace.persistence.store_ops import Ack, Deliver, PurgeQueue
from headrace.persistence.stream_log import StreamTrack
from headrace.queues import Destination, Left, Message, OffLoopRead, Queue, QueueArgs, QueueEntry
from headrace.queues.backing import PropsInfo, RecoveredRow

from .dead_letters import dead_letter_message
from .deadlines import Deadlines
from .outbox import StoreOutbox
from .ports import ShellPorts
from .saturation import Saturation
from .stream_queue import ReadBudget
from .vhost_view import VHostView

__all__ = ["ROUTED", "UNROUTED", "PublishResult", "Settle", "Settlement"]


@dataclass(slots=True)
class PublishResult:
    """Never changed once made: the two results most publishes have are shared (``ROUTED``,
    ``UNROUTED``). Not frozen, as a frozen dataclass costs about three times as much to make, and
    not a NamedTuple, whose ``__new__`` is slower still."""

    routed: bool
    rejected: bool = False  # a target queue refused it (reject-publish): the publisher gets a nack
    ticket: int = 0  # store ticket the confirm must wait for (0 = nothing to wait for)


# a transient publish allocates no result
ROUTED = PublishResult(True)
UNROUTED = PublishResult(False)


class Settle(Enum):
    ACK = "ack"
    REQUEUE = "requeue"
    REJECT = "reject"  # nack/reject without requeue: dead-lettered where the queue says so
    # RabbitMQ 4.3's returns (compat.Compat.split_counts), which count a failure apart from an
    # acquisition: RETURN (a nack, a consumer timeout) counts none, FAIL (a reject, a lost channel) one
    RETURN = "return"
    FAIL = "fail"


class Republish(Protocol):
    """The publish path a dead letter goes back through (``Delivery.publish``)."""

    def __call__(self, vhost: VHostView, exchange_name: str, routing_key: str, props_raw: bytes, body: bytes,
                 now: float, headers: dict[str, Any] | None = None, check_internal: bool = True,
                 cycle_guard: Sequence[Any] | None = None, delayed: bool = True) -> PublishResult: ...


class Settlement:
    __slots__ = ("store", "deadlines", "saturation", "republish", "stream_budget", "stream_backlog", "watchers",
                 "on_stream_backlog", "reads")

    def __init__(self, store: StoreOutbox, deadlines: Deadlines, saturation: Saturation, ports: ShellPorts,
                 republish: Republish) -> None:
        self.store = store
        self.deadlines = deadlines
        self.saturation = saturation
        self.republish = republish
        # what stream reads may take in this turn of the event loop (refilled by ``stream_continue``),
        # and the streams it cut short: ``on_stream_backlog`` wakes the shell, which calls
        # ``stream_continue`` once every other runnable task has had its turn
        self.stream_budget = ReadBudget()
        self.stream_backlog: dict[tuple[str, str], None] = {}
        # reads queues wait for (``Destination.reads_wanted``), for the pump to make off the loop
        # (``take_reads``); each done one notes its queue in ``stream_backlog`` (``read_done``)
        self.reads: list[tuple[str, str, OffLoopRead]] = []
        self.on_stream_backlog = ports.wake_stream_pump
        # (vhost, queue) -> calls made when that queue's demand may have changed (``watch``)
        self.watchers: dict[tuple[str, str], list[Callable[[], None]]] = {}

    # ------------------------------------------------------------------ dispatch and settle
    def dispatch(self, vhost: VHostView, queue: Destination, now: float) -> None:
        """Hand what the queue has ready to its consumers with credit; what left it follows."""
        store = self.store
        left: list[Left] | None = [] if _wants_left(queue, store) else None
        if queue.durable and store.enabled:
            delivered: list[QueueEntry] = []
            queue.dispatch(now, left, delivered, self.stream_budget)
            for entry in delivered:  # recovery marks it redelivered and keeps its delivery count
                if entry.message.persistent:
                    store.add(Deliver(entry.message.id, queue.vhost, queue.name))
        else:
            queue.dispatch(now, left, None, self.stream_budget)
        if left:
            self.settled(vhost, queue, left, now)
        if queue.backlogged:  # a log stopped at the turn's read budget: read on after other work
            self.stream_backlog[(vhost.name, queue.name)] = None
            self.on_stream_backlog()
        if queue.reads_wanted:  # a log waits for slow storage: the pump reads it off the loop
            self.reads += [(vhost.name, queue.name, read) for read in queue.reads_wanted]
            queue.reads_wanted.clear()
            self.on_stream_backlog()
        self.arm(vhost, queue)
        if self.watchers:
            self.demand_changed(queue)

    def stream_continue(self, vhosts: Mapping[str, VHostView], now: float) -> None:
        """A new turn: refill the budget and dispatch the streams it cut short (in the order they
        were cut short, so each gets its turn; the budget may cut them short again)."""
        self.stream_budget.refill()
        keys = list(self.stream_backlog)
        self.stream_backlog.clear()
        for vname, qname in keys:
            vhost = vhosts.get(vname)
            if vhost is None:
                continue
            queue = vhost.queues.get(qname)
            if queue is not None and not queue.deleted:
                self.dispatch(vhost, queue, now)

    def take_reads(self) -> list[tuple[str, str, OffLoopRead]]:
        """The reads queues wait for, each once: (vhost, queue, read)."""
        reads, self.reads = self.reads, []
        return reads

    def read_done(self, vhost: str, queue: str) -> None:
        """A read a queue waited for is done: the pump's next turn dispatches the queue again."""
        self.stream_backlog[(vhost, queue)] = None

    def settled(self, vhost: VHostView, queue: Destination, left: list[Left], now: float) -> None:
        """Messages that left ``queue`` for good: dead letters are republished to the queue's
        dead-letter exchange first, then the store's Ack of the original follows."""
        dlx = queue.args.dead_letter_exchange
        record = self.store.enabled and queue.durable
        if dlx is not None and dlx not in vhost.exchanges:
            dlx = None
        for item in left:
            message = item.entry.message
            try:
                if dlx is not None and item.reason is not None:
                    letter = dead_letter_message(item, queue, now)
                    self.republish(vhost, dlx, letter.routing_key, letter.props_raw, message.body, now,
                                   check_internal=False, cycle_guard=letter.deaths)
            finally:
                if record and item.held and message.persistent:
                    self.store.add(Ack(message.id, queue.vhost, queue.name))

    def consumer_ready(self, vhost: VHostView, queues: Iterable[Destination], now: float) -> None:
        """Consumers of these queues may take more (credit, flow, a drained outbox): dispatch."""
        saturation = self.saturation
        for queue in queues:
            if not queue.deleted:
                self.dispatch(vhost, queue, now)
                if saturation.saturated or saturation.stalled:
                    saturation.drained(queue)

    def settle(self, vhost: VHostView, items: Iterable[tuple[Destination, QueueEntry]], action: Settle, now: float,
               ready: Iterable[Destination] = ()) -> None:
        """ack / requeue / reject deliveries, then dispatch their queues and the ``ready`` ones."""
        touched: dict[Destination, list[Left] | None] = {}
        record = self.store.enabled
        ack = action is Settle.ACK  # once, not per message: an Enum member read costs ~90 ns
        if ack:  # each queue's share at once (an ack of many is mostly one queue's run)
            for queue, run in groupby(items, _queue_of):
                if queue in touched:
                    left = touched[queue]
                else:  # an ack is never dead-lettered: it needs a Left only for the store's Ack
                    # record, so a transient queue's acks make no object per message
                    left = touched[queue] = [] if record and queue.durable else None
                queue.ack_run(list(map(_entry_of, run)), left)
            items = ()
        requeue = action is Settle.REQUEUE
        give_back = action is Settle.RETURN or action is Settle.FAIL
        failed = action is Settle.FAIL
        for queue, entry in items:
            if queue in touched:
                left = touched[queue]
            else:
                left = touched[queue] = []
            if requeue:
                queue.requeue(entry, left)
            elif give_back:
                queue.give_back(entry, left, failed, now)
            else:
                queue.reject(entry, left)
        for queue, left in touched.items():
            if give_back:
                self.arm(vhost, queue)  # a delayed retry's due time
            if left:
                self.settled(vhost, queue, left, now)
            elif queue.settle_request():
                self.store.add(StreamTrack(queue.vhost, queue.name))  # the flusher writes the offsets
        self.consumer_ready(vhost, touched.keys() | set(ready), now)

    def get(self, vhost: VHostView, queue: Destination, now: float, *, no_ack: bool, owner: object) -> QueueEntry | None:
        """basic.get: the next message, held unacked by ``owner`` unless ``no_ack``."""
        store = self.store
        left: list[Left] = []
        entry = queue.get(now, no_ack=no_ack, owner=owner, left=left)
        if entry is not None and not no_ack and entry.message.persistent and queue.durable and store.enabled:
            store.add(Deliver(entry.message.id, queue.vhost, queue.name))
        if left:
            self.settled(vhost, queue, left, now)
        self.arm(vhost, queue)
        return entry

    # ------------------------------------------------------------------ whole queues
    def purge(self, queue: Destination) -> int:
        """One PurgeQueue record for a purge, sparing the unacked messages (they may be requeued).
        It takes a ticket: purge-ok waits for its fsync, or a crash would bring the messages back."""
        count = queue.purge()
        if self.store.enabled and queue.durable:
            self.store.add_ticketed(PurgeQueue(queue.vhost, queue.name, tuple(queue.unacked_message_ids())))
        return count

    def page_in(self, vhost: VHostView, queue: Queue, entries: list[QueueEntry], generation: int, now: float) -> None:
        """Spilled entries read back by the pager join the ready list (unless a purge or delete
        came first), then the queue's consumers get them."""
        left: list[Left] = []
        queue.page_in(entries, generation, left)
        if left:
            self.settled(vhost, queue, left, now)
        if not queue.deleted:
            self.dispatch(vhost, queue, now)

    def apply_args(self, vhost: VHostView, queue: Destination, args: QueueArgs, now: float) -> None:
        """A policy changed the queue's effective arguments: what a lower limit drops now is
        dead-lettered and acknowledged like any other drop."""
        left: list[Left] = []
        queue.apply_args(args, left)
        if left:
            self.settled(vhost, queue, left, now)
        self.arm(vhost, queue)

    def recover(self, queue: Queue, message: Message, *, redelivered: bool, delivery_count: int) -> None:
        """Rebuild a queue from the store at start, in original order."""
        queue.add_recovered(message, redelivered=redelivered, delivery_count=delivery_count)

    def recover_spilled(self, queue: Queue, rows: Iterable[RecoveredRow], props_info: PropsInfo) -> int:
        """The rest of a queue's recovered messages, past its resident window, straight to its
        spill; returns how many."""
        return queue.add_recovered_spilled(rows, props_info)

    # ------------------------------------------------------------------ demand
    def watch(self, vhost: str, queue: str, wake: Callable[[], None]) -> Callable[[], None]:
        """``wake`` is called (on the event loop; it must only note) after anything that may change
        whether the queue's consumers want more: every dispatch (a consumer added, credit given
        back, a flow or a drained outbox, messages delivered or arriving), a consumer leaving, the
        queue deleted. Why: a federated queue's link (``server/net/shovel_link.py``) waits for
        this instead of looking at the queue every few ms. Returns the call that ends the watch."""
        key = (vhost, queue)
        self.watchers.setdefault(key, []).append(wake)

        def unwatch() -> None:
            wakes = self.watchers.get(key)
            if wakes is not None and wake in wakes:
                wakes.remove(wake)
                if not wakes:
                    del self.watchers[key]
        return unwatch

    def demand_changed(self, queue: Destination) -> None:
        for wake in self.watchers.get((queue.vhost, queue.name), ()):
            wake()

    # ------------------------------------------------------------------ time
    def arm(self, vhost: VHostView, queue: Destination) -> None:
        """Re-arm the queue's next deadline: its head's TTL expiry or its x-expires lease (none
        for a queue that never had either: ``Queue.timed``)."""
        if queue.deleted or not queue.timed:
            return
        when = queue.next_deadline()
        idle = queue.idle_deadline()
        if idle is not None and (when is None or idle < when):
            when = idle
        self.deadlines.arm((vhost.name, queue.name), when)


_queue_of = itemgetter(0)
_entry_of = itemgetter(1)


def _wants_left(queue: Destination, store: StoreOutbox) -> bool:
    """Whether anything follows from a message leaving ``queue``: a dead-letter exchange to
    republish to, or a store record to acknowledge."""
    return queue.args.dead_letter_exchange is not None or (queue.durable and store.enabled)
