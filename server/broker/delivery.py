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
Rule 5: what happens once a message is in a queue (dispatch, settle, get, dead letters, arming a
queue's deadline, the stream read budget) is done by this owner's ``Settlement`` (settlement.py),
a collaborator it makes and which republishes dead letters through ``publish``. ``Delivery`` owns
the rest of the state: the message ids, the batch of queues a read published into, the dedup
windows, the saturation tracker and the deadline heap; ``settle``, ``get``, ``consumer_ready``,
``arm`` and ``stream_continue`` are the settlement's own methods, handed out as this owner's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from headrace.exchanges import Exchange
from headrace.persistence.store_ops import Delay, DropQueue, Publish, Undelay
from headrace.persistence.stream_log import StreamAppend
from headrace.queues import ACCEPTED, LOGGED, Consumer, Destination, Left, Message, QueueArgumentError
from headrace.server.amqp.properties import decode_properties, quick_props, replace_headers

from . import errors
from .dead_letters import completes_cycle
from .deadlines import Deadlines, Timer
from .dedup import Dedup
from .outbox import MirrorOutbox, StoreOutbox, mirror_row
from .publish_checks import checked_expiration_ms, parse_expiration, publish_exchange, routing_properties, took
from .publish_runs import RunPlacer, run_queues
from .ports import ShellPorts
from .reply_to import REPLY_PREFIX, ReplyRegistry
from .saturation import Saturation
from .settlement import ROUTED, UNROUTED, PublishResult, Settle, Settlement
from .stream_queue import StreamQueue
from .vhost_view import VHostView

__all__ = ["Delivery", "PublishResult", "Settle", "parse_expiration"]


class Delivery:
    """The delivery owner (module docstring); its queue side is its ``Settlement`` (settlement.py)."""

    def __init__(self, store: StoreOutbox, mirror: MirrorOutbox, replies: ReplyRegistry, ports: ShellPorts) -> None:
        self.store = store
        self.mirror = mirror
        self.replies = replies
        self.dedup = Dedup()  # publish deduplication windows, journaled by the shell
        # consumer-backed queues behind their publishers (saturation.py)
        self.saturation = Saturation(ports.saturation_released, ports.wake_clock)
        self.deadlines = Deadlines(ports.wake_clock)
        # the queues a batch of publishes went into (``begin_batch``), each dispatched once when it
        # ends instead of after every publish; None outside a batch
        self._batch: dict[Destination, VHostView] | None = None
        self._next_id = 1  # message ids: strictly increasing, also the store's record keys
        self.settlement = settlement = Settlement(store, self.deadlines, self.saturation, ports, self.publish)
        # the settlement's calls, handed out as this owner's (bound once: no extra call per use)
        self.settle = settlement.settle
        self.get = settlement.get
        self.consumer_ready = settlement.consumer_ready
        self.arm = settlement.arm
        self.stream_continue = settlement.stream_continue
        self.purge = settlement.purge
        self.page_in = settlement.page_in
        self.apply_args = settlement.apply_args
        self.recover = settlement.recover
        self.recover_spilled = settlement.recover_spilled
        self._dispatch = settlement.dispatch
        self._settled = settlement.settled
        self._runs = RunPlacer(store, self.take_message_ids, settlement.dispatch, self.saturation, checked_expiration_ms)

    # ------------------------------------------------------------------ ids
    def next_message_id(self) -> int:
        mid = self._next_id
        self._next_id = mid + 1
        return mid

    def take_message_ids(self, count: int) -> int:
        """``count`` ids at once (a run of publishes, once it knows how many it used); returns
        the first, or with 0 the next id without taking it."""
        mid = self._next_id
        self._next_id = mid + count
        return mid

    def set_next_message_id(self, value: int) -> None:
        self._next_id = max(self._next_id, value)

    # ------------------------------------------------------------------ publish
    def publish(self, vhost: VHostView, exchange_name: str, routing_key: str, props_raw: bytes, body: bytes,
                now: float, headers: dict[str, Any] | None = None, check_internal: bool = True,
                cycle_guard: Sequence[Any] | None = None, delayed: bool = True) -> PublishResult:
        """Route, enqueue in every target queue, record the Publish once for all durable ones,
        then settle what the bounds dropped and dispatch. ``headers`` is the headers table when
        the caller has already parsed it (the AMQP frame check has); otherwise it is parsed here.
        ``cycle_guard`` is a dead letter's ``x-death`` history: a target queue it would close a
        cycle through is skipped (``dead_letters.completes_cycle``).
        Every parameter can be passed by position, which the AMQP session does: keyword arguments
        and keyword-only defaults cost a publish a dictionary lookup each."""
        if exchange_name == "" and routing_key.startswith(REPLY_PREFIX):  # direct reply-to
            # delivered to its consumer or dropped, and in both cases routed to no queue: as
            # RabbitMQ 3.10 does, a mandatory reply is returned (312 NO_ROUTE) even when delivered
            self.replies.deliver(routing_key, props_raw, body)
            return UNROUTED
        exchange = publish_exchange(vhost, exchange_name, check_internal)
        delivery_mode, priority, expiration, has_headers = quick_props(props_raw)
        if headers is None and has_headers:
            headers = decode_properties(props_raw).headers
        expiration_ms = None if expiration is None else checked_expiration_ms(expiration)
        if delayed and headers and exchange_name in vhost.delayed_exchanges:
            delay = headers.get("x-delay")
            if isinstance(delay, int) and not isinstance(delay, bool) and delay > 0:
                # as RabbitMQ's delayed-message plugin: only a durable exchange keeps its messages
                # across a restart, so only there are they written to the store
                return self._hold(vhost, exchange_name, routing_key, props_raw, body, now + delay / 1000,
                                  delivery_mode == 2 and exchange.durable, now)
        exchange.published_in += 1
        if exchange.wants_properties:
            result = exchange.route(routing_key, headers, vhost.exchanges.get, routing_properties(props_raw))
        else:
            result = exchange.route(routing_key, headers, vhost.exchanges.get)
        targets = self.dedup.screen(vhost.name, exchange_name, exchange.arguments, result.queues, vhost.queues,
                                    props_raw, headers, now)
        dedup = self.dedup if self.dedup.pending else None  # new keys, remembered once accepted
        if targets is None:  # a duplicate (dedup.py): confirmed once what came before it is, not routed nor stored
            if dedup is not None:
                dedup.commit(now, True)
            return PublishResult(True, False, self.store.ticket)
        if headers is not None and "BCC" in headers:
            headers = {k: v for k, v in headers.items() if k != "BCC"}
            props_raw = replace_headers(props_raw, headers)
        return self._place(vhost, exchange, Message(self.next_message_id(), exchange_name, routing_key, props_raw,
                                                    body, delivery_mode == 2, priority or 0, expiration_ms,
                                                    headers, now), targets, now, cycle_guard, dedup)

    def check_publish(self, vhost: VHostView, exchange_name: str, routing_key: str, props_raw: bytes) -> None:
        """What ``publish`` would refuse, checked without placing anything: the exchange (404, or
        403 for an internal one) and the expiration (406). A transaction checks each publish when
        it arrives and again at commit, so a commit applies all of it or none."""
        if exchange_name == "" and routing_key.startswith(REPLY_PREFIX):
            return
        publish_exchange(vhost, exchange_name, True)
        expiration = quick_props(props_raw)[2]
        if expiration is not None:
            checked_expiration_ms(expiration)

    def publish_run(self, vhost: VHostView, exchange_name: str, routing_key: str,
                    contents: Sequence[tuple[bytes, bytes]], now: float, results: list[PublishResult]) -> None:
        """Publishes one client sent one after another to the same exchange and routing key, none
        with a headers table (``contents``: property bytes and body of each, in order), as
        ``publish`` would take them one by one, with what depends only on the exchange and the key
        done once: the exchange's checks, the route, whether a dedup window applies. Each one's
        result is appended to ``results`` as it is placed, so a publish that fails (an invalid
        expiration) leaves the results of those before it, which are placed, as they would be."""
        publish = self.publish
        if exchange_name == "" and routing_key.startswith(REPLY_PREFIX):
            for props_raw, body in contents:
                results.append(publish(vhost, exchange_name, routing_key, props_raw, body, now))
            return
        exchange = publish_exchange(vhost, exchange_name, True)
        if exchange.wants_properties:  # routed on each one's properties: one by one
            for props_raw, body in contents:
                results.append(publish(vhost, exchange_name, routing_key, props_raw, body, now))
            return
        targets = exchange.route(routing_key, None, vhost.exchanges.get).queues
        if not targets or self.dedup.applies(vhost.name, exchange_name, exchange.arguments, targets, vhost.queues):
            for props_raw, body in contents:  # unroutable (mirrored, counted) or screened: one by one
                results.append(publish(vhost, exchange_name, routing_key, props_raw, body, now))
            return
        queues = run_queues(vhost, exchange_name, targets)
        if queues is not None:  # every target takes the run at once (publish_runs.py)
            contents = self._runs.place(vhost, exchange, exchange_name, routing_key, queues, contents, now, results,
                                        self._batch)
        place = self._place
        next_id = self.next_message_id
        for props_raw, body in contents:
            delivery_mode, priority, expiration, has_headers = quick_props(props_raw)
            if has_headers:  # not what a caller should pass: the whole path, which parses them
                results.append(publish(vhost, exchange_name, routing_key, props_raw, body, now))
                continue
            expiration_ms = None if expiration is None else checked_expiration_ms(expiration)
            exchange.published_in += 1
            results.append(place(vhost, exchange, Message(next_id(), exchange_name, routing_key, props_raw, body,
                                                          delivery_mode == 2, priority or 0, expiration_ms, None,
                                                          now), targets, now, None, None))

    def _place(self, vhost: VHostView, exchange: Exchange, message: Message, targets: Sequence[str], now: float,
               cycle_guard: Sequence[Any] | None, dedup: Dedup | None) -> PublishResult:
        """Enqueue a routed message in its target queues, record the Publish once for all durable
        ones, then settle what the bounds dropped and dispatch (or note the queues for the batch)."""
        exchange_name = message.exchange
        if exchange_name in vhost.mirrored:
            self.mirror.add(vhost.name, exchange_name, message)
        if not targets:
            if dedup is not None:
                dedup.commit(now, True)
            vhost.unroutable += 1
            return UNROUTED
        rejected = False
        durable: list[str] = []
        accepted: list[Destination] = []
        logged: list[Destination] = []  # types that keep their own log: appended by the flusher
        dropped: list[tuple[Destination, list[Left]]] = []
        left: list[Left] = []
        queues = vhost.queues
        ticket = 0
        store = self.store
        record = None
        for qname in targets:
            queue = queues.get(qname)
            if queue is None or (cycle_guard is not None and completes_cycle(qname, cycle_guard)):
                continue
            outcome = queue.enqueue(message, now, left)
            if outcome is ACCEPTED:
                accepted.append(queue)
                if message.persistent and queue.durable:
                    durable.append(qname)
            elif outcome is LOGGED:  # appended once, with an offset, by the flusher
                if record is None:
                    record = mirror_row(message, exchange_name)
                logged.append(queue)
                ticket = store.add_ticketed(StreamAppend(vhost.name, qname, record))
            else:
                rejected = True
            if left:
                dropped.append((queue, left))
                left = []
        if dedup is not None:  # before any dead letter below screens a publish of its own
            dedup.commit(now, not rejected, lambda name: took(name, accepted, logged, queues, cycle_guard))
        if durable and store.enabled:
            ticket = store.add_ticketed(Publish(
                message.id, vhost.name, tuple(durable), message.exchange, message.routing_key,
                message.props_raw, message.body, int(now * 1000)))
        exchange.published_out += len(accepted) + len(logged)
        for queue, gone in dropped:
            self._settled(vhost, queue, gone, now)
        touched = self.saturation.touched
        batch = self._batch
        for queue in accepted:
            if batch is None:
                self._dispatch(vhost, queue, now)
            else:
                batch[queue] = vhost
            touched[queue] = None
        return PublishResult(True, rejected, ticket) if rejected or ticket else ROUTED

    def begin_batch(self) -> bool:
        """A read's worth of publishes follows: each queue they go into is dispatched once, by
        ``end_batch``, not after every publish (a pipelining publisher's read holds a hundred to
        one queue, and a dispatch finding every consumer's credit used is most of them). Whatever
        else the batch does to a queue (a consume, an ack, a get, a purge) sees its new messages
        ready, as it would a moment later anyway. False when a batch is already open: the outer
        one ends it."""
        if self._batch is not None:
            return False
        self._batch = {}
        return True

    def end_batch(self, now: float) -> None:
        """Dispatch every queue the batch published into (one that was deleted meanwhile is
        skipped), in the order they were first published into."""
        batch, self._batch = self._batch, None
        if batch:
            for queue, vhost in batch.items():
                if not queue.deleted:
                    self._dispatch(vhost, queue, now)

    def _hold(self, vhost: VHostView, exchange: str, routing_key: str, props_raw: bytes, body: bytes,
              due: float, persistent: bool, now: float) -> PublishResult:
        message_id = self.next_message_id() if persistent else 0
        ticket = 0
        if persistent and self.store.enabled:
            ticket = self.store.add_ticketed(
                Delay(message_id, vhost.name, exchange, routing_key, props_raw, body, int(due * 1000)))
        vhost.delayed.add(due, exchange, routing_key, props_raw, body, message_id, now=now)
        self.deadlines.arm((vhost.name, None), vhost.delayed.next_due())
        return PublishResult(True, False, ticket)

    def window_deleted(self, kind: str, vhost: str, name: str | None = None) -> None:
        """An exchange or queue (``name``), or a whole vhost (None), is gone: so are its publish
        dedup windows; the flusher is woken to journal that at once."""
        if self.dedup.drop(kind, vhost, name) if name is not None else self.dedup.drop_vhost(vhost):
            self.store.on_pending()

    def exchange_deleted(self, vhost: VHostView, name: str) -> None:
        """A delayed exchange went: the messages it held go with it."""
        for message_id in vhost.delayed.drop_exchange(name):
            self._undelay(message_id)

    def _undelay(self, message_id: int) -> None:
        if message_id and self.store.enabled:
            self.store.add(Undelay(message_id))

    # ------------------------------------------------------------------ consumers
    def check_consumer_allowed(self, vhost: VHostView, queue: Destination, exclusive: bool) -> None:
        """403 while the queue has an exclusive consumer, or for an exclusive one on a used queue."""
        if queue.has_exclusive_consumer or (exclusive and queue.consumer_count):
            raise errors.access_refused(f"queue '{queue.name}' in vhost '{vhost.name}' in exclusive use")

    def prepare_consumer(self, queue: Destination, consumer: Consumer[Any], arguments: Mapping[str, Any] | None,
                         now: float) -> None:
        """Before basic.consume-ok: the queue's type refuses what RabbitMQ refuses (a stream places
        the consumer's cursor)."""
        try:
            queue.prepare_consumer(consumer, arguments or {}, now)
        except QueueArgumentError as exc:
            raise errors.precondition_failed(str(exc)) from None

    def add_consumer(self, vhost: VHostView, queue: Destination, consumer: Consumer[Any], now: float) -> None:
        self.check_consumer_allowed(vhost, queue, consumer.exclusive)
        queue.add_consumer(consumer)
        queue.touch(now)
        self._dispatch(vhost, queue, now)

    def remove_consumer(self, vhost: VHostView, queue: Destination, consumer: Consumer[Any], now: float) -> None:
        """Cancel a consumer; an auto-delete queue goes when its last consumer has. The consumers
        left are dispatched to at once: with a single active consumer the next one is active now,
        and waits for nothing else to happen before it is given what is ready."""
        if queue.deleted:
            return
        queue.remove_consumer(consumer)
        queue.touch(now)
        if queue.auto_delete and not queue.consumer_count and queue.had_consumer:
            vhost.delete_queue(queue.name)
        elif queue.consumer_count:
            self._dispatch(vhost, queue, now)
        else:
            self.arm(vhost, queue)
            self.settlement.demand_changed(queue)

    def stream_appended(self, vhost: VHostView, queue: StreamQueue, end: int, last_ts: int | None, first: int,
                        now: float) -> None:
        """The flusher made the stream's log durable up to ``end``: its consumers read on."""
        queue.appended(end, last_ts, first)
        if not queue.deleted:
            self._dispatch(vhost, queue, now)

    # ------------------------------------------------------------------ whole queues
    def queue_deleted(self, queue: Destination) -> None:
        """The queue is gone from its vhost: drop its contents (one DropQueue record covers every
        message it held) and tell its consumers' sinks."""
        consumers = queue.delete()
        self.deadlines.disarm((queue.vhost, queue.name))
        self.window_deleted("queue", queue.vhost, queue.name)
        if self.store.enabled and queue.durable:
            self.store.add(DropQueue(queue.vhost, queue.name))
        for consumer in consumers:
            consumer.sink.consumer_cancelled(consumer)
        self.settlement.demand_changed(queue)

    # ------------------------------------------------------------------ time
    def arm_all(self, vhost: VHostView) -> None:
        """At start (after recovery) and when a vhost's contents were rebuilt wholesale."""
        for queue in vhost.queues.values():
            self.arm(vhost, queue)
        self.deadlines.arm((vhost.name, None), vhost.delayed.next_due())

    def tick(self, vhosts: Mapping[str, VHostView], now: float) -> list[Timer]:
        """Due delayed messages are published, expired heads leave, idle x-expires queues go: only
        for the keys whose deadline has come. The due timers armed by other owners (a connection's
        consumer timeout) are returned for the caller to run, after the queues' work."""
        timers: list[Timer] = []
        for key in self.deadlines.pop_due(now):
            if not isinstance(key, tuple):
                timers.append(key)
                continue
            vhost_name, queue_name = key
            vhost = vhosts.get(vhost_name)
            if vhost is None:
                continue
            if queue_name is None:  # held while the flusher is behind, as publishers are: bounded
                held = len(self.store.ops) >= self.store.backlog_max  # however many came due at once
                for item in () if held else vhost.delayed.pop_due(now):
                    if item.exchange in vhost.exchanges:
                        self.publish(vhost, item.exchange, item.routing_key, item.props_raw, item.body, now,
                                     check_internal=False, delayed=False)
                    self._undelay(item.message_id)
                self.deadlines.arm((vhost.name, None), now + 0.01 if held else vhost.delayed.next_due())
                continue
            queue = vhost.queues.get(queue_name)
            if queue is None or queue.deleted:
                continue  # a dead letter's publish above may have led to its deletion
            left: list[Left] = []
            if queue.release_delayed(now):
                self._dispatch(vhost, queue, now)
            if queue.expire(now, left):
                self._settled(vhost, queue, left, now)
            if queue.args.expires_ms is not None and queue.idle_expired(now):
                vhost.delete_queue(queue.name)
            else:
                self.arm(vhost, queue)
        return timers

