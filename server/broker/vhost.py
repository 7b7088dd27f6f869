"""One virtual host: its exchanges, queues and bindings by name.

Rule 1: a ``VHost`` owns the name -> exchange and name -> queue maps, the mirrored and delayed
exchange sets and the delayed messages they hold; bindings live in their source exchange and change
only through ``bind``/``unbind`` here, which cascade on delete. What happens to messages inside a
queue is the delivery owner's (``delivery.py``): a purge or a delete asks it.
Rule 2: everything is synchronous and takes ``now``; the network shell supplies time and does I/O.
Errors are raised as AMQP ``ChannelException``/``ConnectionException`` with RabbitMQ's texts; the
HTTP API maps the same exceptions to status codes. Whether a redeclare matches what exists is
RabbitMQ's equivalence rules, in ``equivalence.py``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from headrace.exchanges import (
    ArgumentError,
    Binding,
    DefaultExchange,
    DestinationKind,
    Exchange,
    UnknownExchangeType,
    make_exchange,
)
from headrace.queues import Backing, Destination, Queue, QueueArgumentError, QueueArgs
from headrace.queues.held import HeldTally

from . import errors
from .bound_from import BoundFrom
from .definition_changes import DefinitionChanges
from .delayed import DELAYED_TYPE, DelayedMessages, spill_dir
from .delivery import Delivery
from .compat import Compat
from .equivalence import check_exchange, check_queue
from .policies import PolicyStore, apply_exchange_policy, apply_queue_dedup, queue_args
from .queue_types import check_declare, queue_type_of
from .stream_queue import StreamQueue
from .firehose import TRACE_EXCHANGE
from .totals import Retired

__all__ = ["PREDECLARED", "VHost", "VHostOwner"]

PREDECLARED: tuple[tuple[str, str], ...] = (
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
    ("amq.rabbitmq.trace", "topic"),  # the firehose's (firehose.py): internal, as RabbitMQ's
)
QUEUE = DestinationKind.QUEUE
EXCHANGE = DestinationKind.EXCHANGE


@runtime_checkable
class PermissionChecker(Protocol):
    """A queue owner that checks its user's permissions (an AMQP session): raises 403 if refused."""

    def check_permission(self, kind: str, name: str) -> None: ...


class VHostOwner(Protocol):
    """What a vhost needs of the broker that holds it (``core.Broker``), and no more: the vhost names
    this protocol rather than importing the broker, which sits above it and creates it. The delivery
    owner and policy store (declare, delete, purge, arm), the definition changes, the accounting
    (limits, churn, deleted objects' totals), and what a new queue is built with. No users,
    connections or alarms: a caller that needs those has the broker itself."""

    delivery: Delivery
    policies: PolicyStore
    compat: Compat  # which RabbitMQ release's defaults a new queue takes (compat.py)
    definitions: DefinitionChanges
    retired: Retired  # the counts of deleted queues and exchanges (totals.py)
    stream_data_dir: Path | None
    stream_handover_timeout: float  # seconds a stream group's demoted member may hold its partition
    delayed_data_dir: Path | None  # where delayed exchanges' bucket files go (None: kept in memory)
    delayed_read_bytes: int  # of them a clock tick reads back at most
    resident_max_messages: int
    resident_max_bytes: int
    held: HeldTally  # shared by every queue (queues/held.py)

    def check_limit(self, kind: str, vhost: VHost) -> None: ...

    def churn(self, event: str) -> None: ...

    def backing_factory(self, vhost: str, queue: str) -> Callable[[], Backing] | None: ...


class VHost:
    def __init__(self, broker: VHostOwner, name: str) -> None:
        self.broker = broker
        self.name = name
        self.queues: dict[str, Destination] = {}
        # exclusive queues by owning connection: one closing finds its own without scanning every
        # queue (per close: quadratic when thousands of connections go at once)
        self._owned: dict[object, dict[str, None]] = {}
        self.exchanges: dict[str, Exchange] = {"": DefaultExchange(self.queues.__contains__)}
        self.bound_from = BoundFrom()  # the exchanges bound to each queue and exchange
        for ex_name, ex_type in PREDECLARED:
            self.exchanges[ex_name] = make_exchange(ex_type, ex_name, durable=True,
                                                    internal=ex_name == TRACE_EXCHANGE)
        self.tracing = False  # the firehose copies its publishes and deliveries (firehose.py); off at start
        self.mirrored: set[str] = set()
        # mirror retention per exchange: (max_age_ms, max_bytes), None meaning unbounded
        self.mirror_retention: dict[str, tuple[int | None, int | None]] = {}
        # x-delayed-message exchanges (routing by their x-delayed-type) and the messages they hold
        self.delayed_exchanges: set[str] = set()
        self.delayed = DelayedMessages(
            None if broker.delayed_data_dir is None else spill_dir(broker.delayed_data_dir, name),
            read_bytes=broker.delayed_read_bytes)
        # the management API's per-vhost message_stats that no queue or exchange holds: publishes
        # routed nowhere (counted by the delivery owner), returned to a mandatory publisher,
        # received on a channel in confirm mode and confirmed (counted by the channels, the last per
        # batch); received and confirmed differ by the publishes nacked (reject-publish)
        self.unroutable = 0
        self.unroutable_returned = 0
        self.received_confirm = 0
        self.confirmed = 0
        self.octets_closed = [0, 0]  # bytes received and sent by its connections now closed

    # ------------------------------------------------------------------ exchanges
    def declare_exchange(
        self, name: str, type_: str, *, passive: bool = False, durable: bool = False,
        auto_delete: bool = False, internal: bool = False, arguments: Mapping[str, Any] | None = None,
    ) -> Exchange:
        if name == "":
            # RabbitMQ's check_not_default_exchange, for passive and active declares alike
            raise errors.access_refused("operation not permitted on the default exchange")
        existing = self.exchanges.get(name)
        if passive:
            if existing is None:
                raise errors.not_found("exchange", name, self.name)
            return existing
        if existing is None and name.startswith("amq."):
            raise errors.access_refused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
        arguments = dict(arguments or {})
        routing_type = type_
        if type_ == DELAYED_TYPE:
            delayed_type = arguments.get("x-delayed-type")
            if not isinstance(delayed_type, str) or delayed_type == DELAYED_TYPE:
                raise errors.precondition_failed(
                    "Invalid argument, 'x-delayed-type' must be an existing exchange type")
            routing_type = delayed_type
        if existing is not None:
            check_exchange(existing, self.name, declared_type=type_, current_type=self.exchange_type(name),
                           durable=durable, auto_delete=auto_delete, internal=internal, arguments=arguments)
            return existing
        try:
            exchange = make_exchange(routing_type, name, durable=durable, auto_delete=auto_delete,
                                     internal=internal, arguments=arguments)
        except UnknownExchangeType:
            raise errors.command_invalid(f"unknown exchange type '{type_}'") from None
        except ArgumentError as exc:
            raise errors.precondition_failed(str(exc)) from None
        self.broker.check_limit("exchanges", self)
        # its alternate and dedup keys, if a policy applies
        apply_exchange_policy(self.broker.policies, self.broker.delivery.dedup, self.name, exchange)
        self.exchanges[name] = exchange
        if arguments.get("x-mirror"):
            self.mirrored.add(name)
            age, size = arguments.get("x-mirror-max-age-ms"), arguments.get("x-mirror-max-bytes")
            self.mirror_retention[name] = (age if isinstance(age, int) else None,
                                           size if isinstance(size, int) else None)
        if type_ == DELAYED_TYPE:
            self.delayed_exchanges.add(name)
        if durable:
            self.broker.definitions.changed("exchanges", (self.name, name))  # with its mirror setting
        return exchange

    def delete_exchange(self, name: str, *, if_unused: bool = False) -> None:
        if name == "" or name.startswith("amq."):
            raise errors.access_refused(f"operation not permitted on exchange '{name}' in vhost '{self.name}'")
        exchange = self.exchanges.get(name)
        if exchange is None:
            return  # RabbitMQ: deleting an absent exchange is not an error
        if if_unused and (exchange.has_bindings() or self.bound_from.is_bound(EXCHANGE, name)):
            raise errors.in_use("exchange", name, self.name)
        del self.exchanges[name]
        self.broker.retired.exchange_gone(exchange)
        self.bound_from.source_gone(exchange)
        self.broker.delivery.window_deleted("exchange", self.name, name)
        self.mirrored.discard(name)
        self.mirror_retention.pop(name, None)
        if name in self.delayed_exchanges:
            self.delayed_exchanges.discard(name)
            self.broker.delivery.exchange_deleted(self, name)
        self._unbind_everywhere(EXCHANGE, name)
        if exchange.durable:  # with its bindings and mirror setting
            self.broker.definitions.deleted("exchanges", (self.name, name))

    def set_mirror(self, name: str, enabled: bool, *, max_age_ms: int | None = None,
                   max_bytes: int | None = None) -> None:
        """Switch mirroring of an exchange into its append-only log on or off (a durable setting)."""
        if name == "":
            raise errors.access_refused("the default exchange cannot be mirrored")
        self.get_exchange(name)
        if enabled:
            self.mirrored.add(name)
            self.mirror_retention[name] = (max_age_ms, max_bytes)
        else:
            self.mirrored.discard(name)
            self.mirror_retention.pop(name, None)
        self.broker.definitions.changed("mirrors", (self.name, name))

    def _unbind_everywhere(self, kind: DestinationKind, name: str) -> None:
        """``name`` was deleted: the exchanges bound to it drop those bindings (and go, if that was
        their last and they auto-delete)."""
        for source in self.bound_from.take(kind, name):
            other = self.exchanges.get(source)
            if other is not None and other.unbind_destination(name, kind):
                self._maybe_auto_delete_exchange(other)

    def get_exchange(self, name: str) -> Exchange:
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise errors.not_found("exchange", name, self.name)
        return exchange

    def _maybe_auto_delete_exchange(self, exchange: Exchange) -> None:
        if exchange.auto_delete and not exchange.has_bindings() and exchange.name in self.exchanges:
            self.delete_exchange(exchange.name)

    # ------------------------------------------------------------------ queues
    def declare_queue(
        self, name: str, *, owner: object, now: float, passive: bool = False, durable: bool = False,
        exclusive: bool = False, auto_delete: bool = False, arguments: Mapping[str, Any] | None = None,
    ) -> Destination:
        """Declare (or check, ``passive``) a queue; ``now`` starts or renews its x-expires lease."""
        if passive:
            queue = self.get_queue(name)
            self.check_exclusive(queue, owner)
            queue.touch(now)  # a declare renews the x-expires lease, as in RabbitMQ
            return queue
        self.broker.churn("queue_declared")  # every active declare, new queue or not (RabbitMQ's churn)
        existing = self.queues.get(name) if name else None
        if existing is None and name.startswith("amq."):
            raise errors.access_refused(f"queue name '{name}' contains reserved prefix 'amq.*'")
        if not name:
            name = "amq.gen-" + secrets.token_urlsafe(16)
            # the caller could not check a name it did not know: RabbitMQ checks configure on the
            # generated one, so '^x-.*' cannot create server-named queues
            if isinstance(owner, PermissionChecker):
                owner.check_permission("configure", name)
        arguments = dict(arguments or {})
        # RabbitMQ: an exclusive queue is never durable (it dies with its connection), so the
        # durable flag of an exclusive declare is ignored, on creation and on redeclare alike
        durable = durable and not exclusive
        if existing is not None:
            # RabbitMQ's strict check: another connection's exclusive queue, or an exclusive flag
            # that differs from the original declaration, is 405 RESOURCE_LOCKED (not 406)
            self.check_exclusive(existing, owner)
            check_queue(existing, self.name, exclusive=exclusive, durable=durable, auto_delete=auto_delete,
                        arguments=arguments)
            existing.touch(now)  # a redeclare renews the x-expires lease
            return existing
        kind = queue_type_of(arguments, name, self.name)
        check_declare(kind, name, self.name, durable=durable, exclusive=exclusive, auto_delete=auto_delete,
                      arguments=arguments)
        if kind == "stream" and self.broker.stream_data_dir is None:
            raise errors.precondition_failed(f"stream queues need a data directory (queue '{name}')")
        try:
            args = QueueArgs.parse(arguments, name)
        except QueueArgumentError as exc:
            raise errors.precondition_failed(str(exc)) from None
        args = queue_args(self.broker.policies, self.name, name, arguments, args, kind, self.broker.compat)
        self.broker.check_limit("queues", self)
        if kind == "stream":
            assert self.broker.stream_data_dir is not None
            queue = StreamQueue(name, data_dir=self.broker.stream_data_dir, vhost=self.name, durable=durable,
                                arguments=arguments, args=args, held=self.broker.held,
                                handover_timeout=self.broker.stream_handover_timeout)
        else:  # classic, and quorum: the same queue under quorum rules (Destination.counts_deliveries)
            queue = Queue(name, vhost=self.name, durable=durable, exclusive_owner=owner if exclusive else None,
                          auto_delete=auto_delete, arguments=arguments, args=args,
                          resident_max_messages=self.broker.resident_max_messages,
                          resident_max_bytes=self.broker.resident_max_bytes, held=self.broker.held,
                          backing_factory=self.broker.backing_factory(self.name, name), queue_type=kind)
        self.queues[name] = queue
        if queue.exclusive_owner is not None:
            self._owned.setdefault(queue.exclusive_owner, {})[name] = None
        apply_queue_dedup(self.broker.policies, self.broker.delivery.dedup, self.name, name, arguments, kind)
        queue.touch(now)
        self.broker.delivery.arm(self, queue)  # an x-expires lease starts now
        if durable:
            self.broker.definitions.changed("queues", (self.name, name))
        return queue

    def get_queue(self, name: str) -> Destination:
        queue = self.queues.get(name)
        if queue is None:
            raise errors.not_found("queue", name, self.name)
        return queue

    def check_exclusive(self, queue: Destination, owner: object) -> None:
        if queue.exclusive_owner is not None and queue.exclusive_owner is not owner:
            raise errors.resource_locked(queue.name, self.name)

    def delete_queue(self, name: str, *, owner: object | None = None, if_unused: bool = False,
                     if_empty: bool = False) -> int:
        queue = self.queues.get(name)
        if queue is None:
            return 0  # RabbitMQ 3.x: idempotent
        if owner is not None:
            self.check_exclusive(queue, owner)
        if if_unused and queue.consumer_count:
            raise errors.in_use("queue", name, self.name)
        if if_empty and queue.messages_ready:
            raise errors.precondition_failed(f"queue '{name}' in vhost '{self.name}' not empty")
        count = queue.messages_ready
        del self.queues[name]
        if queue.exclusive_owner is not None:
            mine = self._owned[queue.exclusive_owner]
            del mine[name]
            if not mine:
                del self._owned[queue.exclusive_owner]
        self.broker.churn("queue_deleted")
        self.broker.retired.queue_gone(queue)
        self.broker.delivery.queue_deleted(queue)
        self._unbind_everywhere(QUEUE, name)
        if queue.durable:  # with its bindings
            self.broker.definitions.deleted("queues", (self.name, name))
        return count

    def purge_queue(self, name: str, owner: object | None) -> int:
        queue = self.get_queue(name)
        if owner is not None:
            self.check_exclusive(queue, owner)
        return self.broker.delivery.purge(queue)  # a stream refuses (retention alone truncates it)

    # ------------------------------------------------------------------ bindings
    def bind(self, source: str, destination: str, kind: DestinationKind, routing_key: str,
             arguments: Mapping[str, Any] | None) -> bool:
        exchange = self._bindable(source)
        # the objects' own name strings, so a binding adds no copy of them
        source = exchange.name
        destination = (self.get_queue(destination) if kind is QUEUE else self._bindable(destination)).name
        binding = Binding.make(source, destination, kind, routing_key, arguments)
        try:
            exchange.check_destination(binding, kind is QUEUE and self.queues[destination].is_log)
            added = exchange.bind(binding)
        except ArgumentError as exc:
            raise errors.precondition_failed(str(exc)) from None
        if added:
            self.bound_from.bound(source, kind, destination)
            if self._binding_durable(binding):
                self.broker.definitions.binding(self.name, binding, bound=True)
        return added

    def unbind(self, source: str, destination: str, kind: DestinationKind, routing_key: str,
               arguments: Mapping[str, Any] | None) -> bool:
        if source == "":
            raise errors.access_refused("operation not permitted on the default exchange")
        exchange = self.exchanges.get(source)
        present = self.queues if kind is QUEUE else self.exchanges
        if exchange is None or destination not in present:
            # RabbitMQ 3.x: unbinding from or to something already gone is unbind-ok (RPC helpers
            # unbind their auto-deleted reply queues when they close)
            return False
        binding = Binding.make(source, destination, kind, routing_key, arguments)
        removed = exchange.unbind(binding)
        if removed:
            self.bound_from.unbound(exchange, kind, destination)
            if self._binding_durable(binding):
                self.broker.definitions.binding(self.name, binding, bound=False)
            self._maybe_auto_delete_exchange(exchange)
        return removed

    def _bindable(self, name: str) -> Exchange:
        """An exchange a binding may name, as its source or its destination: not the default one."""
        if name == "":
            raise errors.access_refused(f"operation not permitted on the default exchange")
        return self.get_exchange(name)

    def _binding_durable(self, b: Binding) -> bool:
        source = self.exchanges.get(b.source)
        if b.kind is QUEUE:
            dest: Destination | Exchange | None = self.queues.get(b.destination)
        else:
            dest = self.exchanges.get(b.destination)
        return bool(source is not None and source.durable and dest is not None and dest.durable)

    def bindings(self) -> list[Binding]:
        out: list[Binding] = []
        for name in sorted(self.exchanges):
            if name:
                out.extend(self.exchanges[name].bindings())
        return out

    # ------------------------------------------------------------------ lookups
    def exchange_type(self, name: str) -> str:
        return DELAYED_TYPE if name in self.delayed_exchanges else self.exchanges[name].TYPE

    def owned_queues(self, owner: object) -> list[str]:
        return list(self._owned.get(owner, ()))

