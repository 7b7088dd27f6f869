"""The delivery owner: one place for a message's life, from publish to settle.

Rule 1: ``Delivery`` is the only code that changes a queue's contents (enqueue, dispatch, get,
settle, expire, purge, page-in, recovery), the only caller of ``Queue.dispatch``, and the only
writer of message ops to the store outbox. Callers (the AMQP session, the HTTP API, the pager, the
clock) ask it through ``publish``, ``get``, ``settle``, ``consumer_ready``, ``add_consumer``/
``remove_consumer``, ``purge``, ``queue_deleted``, ``page_in`` and ``tick``; each takes ``now``,
and each dispatches on its own, skipping a queue that was deleted meanwhile (``Queue.deleted``).
Rule 2: store ops are in order by construction. A queue reports what left it (``queues.outcome``)
when the call that made it leave returns, so a message's Publish is written before any Ack of it,
and a dead letter's copy for its exchange before the Ack of the original (a crash between the two
loses nothing).
Rule 3: nothing here calls up into a session. A publish returns its effects for the publisher
(``PublishResult``: routed, rejected, the store ticket its confirm waits for); a delivery goes into
the consumer's own sink (``ConsumerSink.deliver``), which encodes it without calling back.
Rule 4: time. ``Delivery`` owns ``deadlines`` (``deadlines.py``): every call that may move a queue's
next TTL expiry or x-expires deadline, or hold a delayed message, re-arms it there, and ``tick``
handles only the keys that are due, so the clock sleeps until the earliest one instead of polling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from headrace.persistence.store_ops import Ack, Delay, Deliver, DropQueue, Publish, PurgeQueue, Undelay
from headrace.persistence.stream_log import StreamAppend, StreamTrack
from headrace.queues import Consumer, EnqueueOutcome, Left, Message, Queue, QueueArgs, QueueEntry
from headrace.server.amqp.properties import decode_properties, quick_props, replace_headers

from . import errors
from .dead_letters import dead_letter_message
from .deadlines import Deadlines
from .dedup import Dedup
from .outbox import MirrorOutbox, StoreOutbox, mirror_record
from .reply_to import REPLY_PREFIX, ReplyRegistry
from .saturation import Saturation
from .stream_queue import ReadBudget, StreamQueue
from .vhost_view import VHostView

__all__ = ["Delivery", "PublishResult", "Settle"]


@dataclass(slots=True)
class PublishResult:
    routed: bool
    rejected: bool = False  # a target queue refused it (reject-publish): the publisher gets a nack
    ticket: int = 0  # store ticket the confirm must wait for (0 = nothing to wait for)


class Settle(Enum):
    ACK = "ack"
    REQUEUE = "requeue"
    REJECT = "reject"  # nack/reject without requeue: dead-lettered where the queue says so


class Delivery:
    def __init__(self, store: StoreOutbox, mirror: MirrorOutbox, replies: ReplyRegistry) -> None:
        self.store = store
        self.mirror = mirror
        self.replies = replies
        self.dedup = Dedup()  # publish deduplication windows, journaled by the shell
        self.saturation = Saturation()  # consumer-backed queues behind their publishers (saturation.py)
        self._next_id = 1  # message ids: strictly increasing, also the store's record keys
        self.deadlines = Deadlines()
        # what stream reads may take in this turn of the event loop (refilled by ``stream_continue``),
        # and the streams it cut short: ``on_stream_backlog`` wakes the shell, which calls
        # ``stream_continue`` once every other runnable task has had its turn
        self.stream_budget = ReadBudget()
        self.stream_backlog: dict[tuple[str, str], None] = {}
        self.on_stream_backlog: Callable[[], None] = _nothing

    # ------------------------------------------------------------------ ids
    def next_message_id(self) -> int:
        mid = self._next_id
        self._next_id = mid + 1
        return mid

    def set_next_message_id(self, value: int) -> None:
        self._next_id = max(self._next_id, value)

    # ------------------------------------------------------------------ publish
    def publish(self, vhost: VHostView, exchange_name: str, routing_key: str, props_raw: bytes, body: bytes,
                now: float, *, check_internal: bool = True, cycle_guard: str | None = None,
                delayed: bool = True) -> PublishResult:
        """Route, enqueue in every target queue, record the Publish once for all durable ones,
        then settle what the bounds dropped and dispatch."""
        if exchange_name == "" and routing_key.startswith(REPLY_PREFIX):  # direct reply-to
            # delivered to its consumer or dropped, and in both cases routed to no queue: as
            # RabbitMQ 3.10 does, a mandatory reply is returned (312 NO_ROUTE) even when delivered
            self.replies.deliver(routing_key, props_raw, body)
            return PublishResult(False)
        exchange = vhost.exchanges.get(exchange_name)
        if exchange is None:
            raise errors.not_found("exchange", exchange_name, vhost.name)
        if check_internal and exchange.internal:
            raise errors.access_refused(
                f"cannot publish to internal exchange '{exchange_name}' in vhost '{vhost.name}'")
        delivery_mode, priority, expiration, has_headers = quick_props(props_raw)
        headers = decode_properties(props_raw).headers if has_headers else None
        expiration_ms = None
        if expiration is not None:
            try:
                expiration_ms = int(expiration)
                if expiration_ms < 0:
                    raise ValueError
            except ValueError:
                raise errors.precondition_failed(f"invalid expiration '{expiration}'") from None
        if delayed and headers and exchange_name in vhost.delayed_exchanges:
            delay = headers.get("x-delay")
            if isinstance(delay, int) and not isinstance(delay, bool) and delay > 0:
                # as RabbitMQ's delayed-message plugin: only a durable exchange keeps its messages
                # across a restart, so only there are they written to the store
                return self._hold(vhost, exchange_name, routing_key, props_raw, body, now + delay / 1000,
                                  delivery_mode == 2 and exchange.durable)
        exchange.published_in += 1
        result = exchange.route(routing_key, headers, vhost.exchanges.get)
        targets = self.dedup.screen(vhost.name, exchange_name, exchange.arguments, result.queues, vhost.queues,
                                    props_raw, headers, now)
        if targets is None:  # a duplicate (dedup.py): confirmed once what came before it is, not routed nor stored
            return PublishResult(True, False, self.store.ticket)
        if headers is not None and "BCC" in headers:
            headers = {k: v for k, v in headers.items() if k != "BCC"}
            props_raw = replace_headers(props_raw, headers)
        message = Message(self.next_message_id(), exchange_name, routing_key, props_raw, body,
                          delivery_mode == 2, priority or 0, expiration_ms, headers, now)
        if exchange_name in vhost.mirrored:
            self.mirror.add(vhost.name, exchange_name, message)
        if not targets:
            vhost.unroutable += 1
            return PublishResult(False)
        rejected = False
        durable: list[str] = []
        accepted: list[Queue] = []
        dropped: list[tuple[Queue, list[Left]]] = []
        left: list[Left] = []
        queues = vhost.queues
        ticket = 0
        store = self.store
        record = None
        for qname in targets:
            queue = queues.get(qname)
            if queue is None or qname == cycle_guard:
                continue
            if type(queue) is StreamQueue:  # appended once, with an offset, by the flusher
                if record is None:
                    record = mirror_record(message, exchange_name)
                queue.enqueue(message, now)
                ticket = store.add_ticketed(StreamAppend(vhost.name, qname, record))
                continue
            if queue.enqueue(message, now, left) is EnqueueOutcome.REJECTED:
                rejected = True
            else:
                accepted.append(queue)
                if message.persistent and queue.durable:
                    durable.append(qname)
            if left:
                dropped.append((queue, left))
                left = []
        if durable and store.enabled:
            ticket = store.add_ticketed(Publish(
                message.id, vhost.name, tuple(durable), message.exchange, message.routing_key,
                message.props_raw, message.body, int(now * 1000)))
        exchange.published_out += len(accepted) + (record is not None)
        for queue, gone in dropped:
            self._settled(vhost, queue, gone, now)
        touched = self.saturation.touched
        for queue in accepted:
            self._dispatch(vhost, queue, now)
            touched[queue] = None
        return PublishResult(True, rejected, ticket)

    def _hold(self, vhost: VHostView, exchange: str, routing_key: str, props_raw: bytes, body: bytes,
              due: float, persistent: bool) -> PublishResult:
        message_id = self.next_message_id() if persistent else 0
        ticket = 0
        if persistent and self.store.enabled:
            ticket = self.store.add_ticketed(
                Delay(message_id, vhost.name, exchange, routing_key, props_raw, body, int(due * 1000)))
        vhost.delayed.add(due, exchange, routing_key, props_raw, body, message_id)
        self.deadlines.arm((vhost.name, None), vhost.delayed.next_due())
        return PublishResult(True, False, ticket)

    def exchange_deleted(self, vhost: VHostView, name: str) -> None:
        """A delayed exchange went: the messages it held go with it."""
        for item in vhost.delayed.drop_exchange(name):
            self._undelay(item.message_id)

    def _undelay(self, message_id: int) -> None:
        if message_id and self.store.enabled:
            self.store.add(Undelay(message_id))

    # ------------------------------------------------------------------ dispatch and settle
    def _dispatch(self, vhost: VHostView, queue: Queue, now: float) -> None:
        if type(queue) is StreamQueue:  # nothing leaves a stream: it only reads, within the budget
            queue.read_on(self.stream_budget)
            if queue.backlogged:
                self.stream_backlog[(vhost.name, queue.name)] = None
                self.on_stream_backlog()
            self.arm(vhost, queue)
            return
        store = self.store
        left: list[Left] | None = [] if _wants_left(queue, store) else None
        if queue.durable and store.enabled:
            delivered: list[QueueEntry] = []
            queue.dispatch(now, left, delivered)
            for entry in delivered:  # recovery marks it redelivered and keeps its delivery count
                if entry.message.persistent:
                    store.add(Deliver(entry.message.id, queue.vhost, queue.name))
        else:
            queue.dispatch(now, left)
        if left:
            self._settled(vhost, queue, left, now)
        self.arm(vhost, queue)

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
                self._dispatch(vhost, queue, now)

    def _settled(self, vhost: VHostView, queue: Queue, left: list[Left], now: float) -> None:
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
                    routing_key, props_raw = dead_letter_message(item, queue, now)
                    self.publish(vhost, dlx, routing_key, props_raw, message.body, now, check_internal=False,
                                 cycle_guard=queue.name if item.reason != "rejected" else None)
            finally:
                if record and item.held and message.persistent:
                    self.store.add(Ack(message.id, queue.vhost, queue.name))

    def consumer_ready(self, vhost: VHostView, queues: Iterable[Queue], now: float) -> None:
        """Consumers of these queues may take more (credit, flow, a drained outbox): dispatch."""
        saturation = self.saturation
        for queue in queues:
            if not queue.deleted:
                self._dispatch(vhost, queue, now)
                if saturation.saturated or saturation.stalled:
                    saturation.drained(queue)

    def settle(self, vhost: VHostView, items: Iterable[tuple[Queue, QueueEntry]], action: Settle, now: float,
               ready: Iterable[Queue] = ()) -> None:
        """ack / requeue / reject deliveries, then dispatch their queues and the ``ready`` ones."""
        touched: dict[Queue, list[Left]] = {}
        for queue, entry in items:
            left = touched.get(queue)
            if left is None:
                left = touched[queue] = []
            if action is Settle.ACK:
                queue.ack(entry, left)
            elif action is Settle.REQUEUE:
                queue.requeue(entry, left)
            else:
                queue.reject(entry, left)
        for queue, left in touched.items():
            if left:
                self._settled(vhost, queue, left, now)
            elif type(queue) is StreamQueue and queue.take_track_request():
                self.store.add(StreamTrack(queue.vhost, queue.name))  # the flusher writes the offsets
        self.consumer_ready(vhost, touched.keys() | set(ready), now)

    def get(self, vhost: VHostView, queue: Queue, now: float, *, no_ack: bool, owner: object) -> QueueEntry | None:
        """basic.get: the next message, held unacked by ``owner`` unless ``no_ack``."""
        store = self.store
        left: list[Left] = []
        entry = queue.get(now, no_ack=no_ack, owner=owner, left=left)
        if entry is not None and not no_ack and entry.message.persistent and queue.durable and store.enabled:
            store.add(Deliver(entry.message.id, queue.vhost, queue.name))
        if left:
            self._settled(vhost, queue, left, now)
        self.arm(vhost, queue)
        return entry

    # ------------------------------------------------------------------ consumers
    def check_consumer_allowed(self, vhost: VHostView, queue: Queue, exclusive: bool) -> None:
        """403 while the queue has an exclusive consumer, or for an exclusive one on a used queue."""
        if queue.has_exclusive_consumer or (exclusive and queue.consumer_count):
            raise errors.access_refused(f"queue '{queue.name}' in vhost '{vhost.name}' in exclusive use")

    def prepare_consumer(self, queue: Queue, consumer: Consumer[Any], arguments: Mapping[str, Any] | None,
                         now: float) -> None:
        """Before basic.consume-ok: a stream refuses what RabbitMQ refuses, and places the cursor."""
        if type(queue) is StreamQueue:
            queue.attach(consumer, arguments or {}, now)

    def add_consumer(self, vhost: VHostView, queue: Queue, consumer: Consumer[Any], now: float) -> None:
        self.check_consumer_allowed(vhost, queue, consumer.exclusive)
        queue.add_consumer(consumer)
        queue.touch(now)
        self._dispatch(vhost, queue, now)

    def remove_consumer(self, vhost: VHostView, queue: Queue, tag: str, now: float) -> None:
        """Cancel a consumer; an auto-delete queue goes when its last consumer has."""
        if queue.deleted:
            return
        queue.remove_consumer(tag)
        queue.touch(now)
        if queue.auto_delete and not queue.consumer_count and queue.had_consumer:
            vhost.delete_queue(queue.name)
        else:
            self.arm(vhost, queue)

    def stream_appended(self, vhost: VHostView, queue: StreamQueue, end: int, last_ts: int | None, first: int,
                        now: float) -> None:
        """The flusher made the stream's log durable up to ``end``: its consumers read on."""
        queue.appended(end, last_ts, first)
        if not queue.deleted:
            self._dispatch(vhost, queue, now)

    # ------------------------------------------------------------------ whole queues
    def purge(self, queue: Queue) -> int:
        """One PurgeQueue record for a purge, sparing the unacked messages (they may be requeued).
        It takes a ticket: purge-ok waits for its fsync, or a crash would bring the messages back."""
        count = queue.purge()
        if self.store.enabled and queue.durable:
            self.store.add_ticketed(PurgeQueue(queue.vhost, queue.name, tuple(queue.unacked_message_ids())))
        return count

    def queue_deleted(self, queue: Queue) -> None:
        """The queue is gone from its vhost: drop its contents (one DropQueue record covers every
        message it held) and tell its consumers' sinks."""
        consumers = queue.delete()
        self.deadlines.disarm((queue.vhost, queue.name))
        if self.store.enabled and queue.durable:
            self.store.add(DropQueue(queue.vhost, queue.name))
        for consumer in consumers:
            consumer.sink.consumer_cancelled(consumer)

    def page_in(self, vhost: VHostView, queue: Queue, entries: list[QueueEntry], generation: int, now: float) -> None:
        """Spilled entries read back by the pager join the ready list (unless a purge or delete
        came first), then the queue's consumers get them."""
        left: list[Left] = []
        queue.page_in(entries, generation, left)
        if left:
            self._settled(vhost, queue, left, now)
        if not queue.deleted:
            self._dispatch(vhost, queue, now)

    def apply_args(self, vhost: VHostView, queue: Queue, args: QueueArgs, now: float) -> None:
        """A policy changed the queue's effective arguments: what a lower limit drops now is
        dead-lettered and acknowledged like any other drop."""
        left: list[Left] = []
        queue.apply_args(args, left)
        if left:
            self._settled(vhost, queue, left, now)
        self.arm(vhost, queue)

    def recover(self, queue: Queue, message: Message, *, redelivered: bool, delivery_count: int) -> None:
        """Rebuild a queue from the store at start, in original order."""
        queue.add_recovered(message, redelivered=redelivered, delivery_count=delivery_count)

    # ------------------------------------------------------------------ time
    def arm(self, vhost: VHostView, queue: Queue) -> None:
        """Re-arm the queue's next deadline: its head's TTL expiry or its x-expires lease."""
        if queue.deleted:
            return
        when = queue.next_deadline()
        idle = queue.idle_deadline()
        if idle is not None and (when is None or idle < when):
            when = idle
        self.deadlines.arm((vhost.name, queue.name), when)

    def arm_all(self, vhost: VHostView) -> None:
        """At start (after recovery) and when a vhost's contents were rebuilt wholesale."""
        for queue in vhost.queues.values():
            self.arm(vhost, queue)
        self.deadlines.arm((vhost.name, None), vhost.delayed.next_due())

    def tick(self, vhosts: Mapping[str, VHostView], now: float) -> None:
        """Due delayed messages are published, expired heads leave, idle x-expires queues go: only
        for the keys whose deadline has come."""
        for vhost_name, queue_name in self.deadlines.pop_due(now):
            vhost = vhosts.get(vhost_name)
            if vhost is None:
                continue
            if queue_name is None:
                for item in vhost.delayed.pop_due(now):
                    if item.exchange in vhost.exchanges:
                        self.publish(vhost, item.exchange, item.routing_key, item.props_raw, item.body, now,
                                     check_internal=False, delayed=False)
                    self._undelay(item.message_id)
                self.deadlines.arm((vhost.name, None), vhost.delayed.next_due())
                continue
            queue = vhost.queues.get(queue_name)
            if queue is None or queue.deleted:
                continue  # a dead letter's publish above may have led to its deletion
            left: list[Left] = []
            if queue.expire(now, left):
                self._settled(vhost, queue, left, now)
            if queue.args.expires_ms is not None and queue.idle_expired(now):
                vhost.delete_queue(queue.name)
            else:
                self.arm(vhost, queue)


def _wants_left(queue: Queue, store: StoreOutbox) -> bool:
    """Whether anything follows from a message leaving ``queue``: a dead-letter exchange to
    republish to, or a store record to acknowledge."""
    return queue.args.dead_letter_exchange is not None or (queue.durable and store.enabled)


def _nothing() -> None:
    pass
