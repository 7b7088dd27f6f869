"""A run of publishes placed at once: each target queue takes the whole run in one call.

Owned by no state: ``Delivery.publish_run`` (delivery.py) calls ``run_queues`` and then
``RunPlacer.place``, which makes the run's messages and enqueues them; the queues, the store
outbox and the delivery owner's batch stay with their owners. It applies only where a publish
could not be refused, dropped, mirrored or logged (every target a queue that ``takes_runs``: a
classic queue without length bounds), so ``Delivery._place``'s per-message bookkeeping (the
lists of accepted, durable, logged and dropped queues, the dedup commit, the dead letters of what
the bounds dropped) has nothing to do, and what is left of it is done once per run: the store's
Publish records (one per persistent message, for all durable targets, in order) and the queues'
dispatch or place in the batch. A pipelining publisher's read holds a hundred publishes to one
queue; this is what a run of them costs in the broker, about half of placing them one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from headrace.exchanges import Exchange
from headrace.persistence.store_ops import Publish
from headrace.queues import Destination, Message, QueueEntry
from headrace.queues.message import EntryRun
from headrace.server.amqp.compiled import WIRE
from headrace.server.amqp.properties import quick_props

from .outbox import StoreOutbox
from .saturation import Saturation
from .settlement import ROUTED, PublishResult
from .vhost_view import VHostView

__all__ = ["RunPlacer", "run_queues"]

Contents = Sequence[tuple[bytes, bytes]]

# (contents, start, first id, exchange, routing key, now, messages) -> where it stopped: the run's
# messages from ``start`` on made in C (_wire.c) up to the first with a headers table, an
# expiration or properties C does not read, which the loop in ``place`` then takes; and the
# queues' entries of a run made in C. Without the C module the loop makes every one.
MakeMessages = Callable[[list[tuple[bytes, bytes]], int, int, str, str, float, list[Message]], int]
_make_messages: MakeMessages | None = None
_make_entries: EntryRun | None = None
if WIRE is not None:
    WIRE.setup_messages(Message, QueueEntry)
    _make_messages = WIRE.make_messages
    _make_entries = WIRE.make_entries


def run_queues(vhost: VHostView, exchange_name: str, targets: Sequence[str]) -> list[Destination] | None:
    """The target queues when a run can go into them at once, None when it goes one by one."""
    if exchange_name in vhost.mirrored:
        return None
    queues = vhost.queues
    out: list[Destination] = []
    for name in targets:
        queue = queues.get(name)
        if queue is None or not queue.takes_runs():
            return None
        out.append(queue)
    return out


class RunPlacer:
    """Places runs for its delivery owner, with the owner's store outbox, message ids, dispatch
    and saturation tracking, all given at construction."""

    __slots__ = ("_store", "_take_ids", "_dispatch", "_saturation", "_expiration_ms")

    def __init__(self, store: StoreOutbox, take_ids: Callable[[int], int],
                 dispatch: Callable[[VHostView, Destination, float], None], saturation: Saturation,
                 expiration_ms: Callable[[str], int]) -> None:
        self._store = store
        self._take_ids = take_ids  # the owner's: ``count`` message ids at once, the first returned (0: a look)
        self._dispatch = dispatch
        self._saturation = saturation
        self._expiration_ms = expiration_ms  # the owner's parse, with its 406

    def place(self, vhost: VHostView, exchange: Exchange, exchange_name: str, routing_key: str,
              queues: list[Destination], contents: Contents, now: float, results: list[PublishResult],
              batch: dict[Destination, VHostView] | None) -> Contents:
        """Make each publish's message, in order, until one with a headers table (which the
        caller places one by one with the rest: returned) or an invalid expiration (raised, once
        those before it are placed, as one by one would); then every queue takes the run."""
        messages: list[Message] = []
        rest = contents[len(contents):]
        first_id = self._take_ids(0)  # the next id: nothing else takes one until the run is made
        expiring = False
        make = _make_messages
        count = len(contents)
        i = 0
        try:
            while i < count:
                if make is not None and isinstance(contents, list):
                    i = make(contents, i, first_id, exchange_name, routing_key, now, messages)
                    if i == count:
                        break
                props_raw, body = contents[i]
                delivery_mode, priority, expiration, has_headers = quick_props(props_raw)
                if has_headers:
                    rest = contents[i:]
                    break
                expiration_ms = None
                if expiration is not None:
                    expiration_ms = self._expiration_ms(expiration)
                    expiring = True
                messages.append(Message(first_id + i, exchange_name, routing_key, props_raw, body, delivery_mode == 2,
                                        priority or 0, expiration_ms, None, now))
                i += 1
        finally:
            if messages:
                self._take_ids(len(messages))  # those the run used: the same ids as one by one
                self._enqueue(vhost, exchange, queues, messages, now, results, batch, expiring)
        return rest

    def _enqueue(self, vhost: VHostView, exchange: Exchange, queues: list[Destination], messages: list[Message],
                 now: float, results: list[PublishResult], batch: dict[Destination, VHostView] | None,
                 expiring: bool) -> None:
        size = 0
        for message in messages:
            size += len(message.body)
        for queue in queues:
            queue.enqueue_run(messages, size, now, expiring, _make_entries)
        count = len(messages)
        exchange.published_in += count
        exchange.published_out += count * len(queues)
        store = self._store
        durable = tuple(queue.name for queue in queues if queue.durable) if store.enabled else ()
        if durable:
            stamp = int(now * 1000)
            for message in messages:
                if message.persistent:
                    ticket = store.add_ticketed(Publish(message.id, vhost.name, durable, message.exchange,
                                                        message.routing_key, message.props_raw, message.body, stamp))
                    results.append(PublishResult(True, False, ticket))
                else:
                    results.append(ROUTED)
        else:
            results.extend([ROUTED] * count)
        touched = self._saturation.touched
        for queue in queues:
            if batch is None:
                self._dispatch(vhost, queue, now)
            else:
                batch[queue] = vhost
            touched[queue] = None
