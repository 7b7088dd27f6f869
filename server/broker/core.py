"""The broker: virtual hosts, users, and the hand-off points to the I/O shell.

Rule 1: the ``Broker`` owns vhosts, users/permissions, the message-id counter, the store and mirror
outboxes and the alarm set. Sessions and the HTTP API call its methods; nothing else mutates them.
Rule 2: it never does I/O and never reads the clock. The shell sets ``now`` before each batch of work,
drains ``take_store_ops``/``take_mirror_records`` in its flusher/writer tasks, and reports back with
``store_synced``. Callbacks (``on_store_pending`` ...) are plain functions the shell installs; the
broker only calls them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from headrace.persistence.mirror_log import MirrorRecord
from headrace.persistence.store_ops import (
    Ack,
    Delay,
    Deliver,
    DropQueue,
    Publish,
    PurgeQueue,
    StoreOp,
    Undelay,
)
from headrace.queues import Message, Queue, QueueEntry
from headrace.queues.backing import Backing
from headrace.server.amqp.errors import ChannelException
from headrace.server.amqp.properties import decode_properties
from headrace.server.amqp.spec import ReplyCode
from headrace.server.auth import Permission, UserRegistry

from .reply_to import ReplyRegistry
from .vhost import VHost

__all__ = ["MIRROR_BACKLOG_MAX", "STORE_BACKLOG_MAX", "Broker", "BrokerObserver", "Limits"]

# Mirror records waiting for the writer task. Beyond this, connections that publish stop being
# read until the writer catches up: ~50k records of a few hundred bytes bound the backlog to tens
# of MB while absorbing a disk hiccup of a second or two at full publish rate.
MIRROR_BACKLOG_MAX = 50_000
# Store ops waiting for the flusher, the same bound for the same reason: publishers without confirms
# are not held back by the fsync, and a Publish op keeps its body alive after the queue has spilled
# the message, so two fast producers of persistent messages grew this to ~500k ops (~200 MB).
STORE_BACKLOG_MAX = 50_000
# Failed store groups remembered for late askers (an HTTP publish answering after the flush).
FAILED_RANGES_KEPT = 64


class BrokerObserver(Protocol):
    """What a connection session offers the broker: confirm release and alarm notices."""

    def store_synced(self, ticket: int) -> None: ...
    def alarms_changed(self, alarms: frozenset[str]) -> None: ...


@dataclass(frozen=True, slots=True)
class Limits:
    max_queues_per_vhost: int = 100_000
    max_exchanges_per_vhost: int = 100_000
    max_connections: int = 10_000
    max_connections_per_user: int | None = None
    max_tx_bytes: int = 64 << 20  # uncommitted publishes one transactional channel may hold


@dataclass(slots=True)
class Counters:
    published: int = 0
    delivered: int = 0
    acked: int = 0
    confirmed: int = 0
    returned_unroutable: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class Broker:
    def __init__(
        self, *, resident_max_messages: int = 50_000, resident_max_bytes: int = 64 << 20,
        spill_factory: Callable[[str, str], Backing] | None = None, store_enabled: bool = False,
        limits: Limits = Limits(),
    ) -> None:
        self.now = 0.0
        self.vhosts: dict[str, VHost] = {}
        self.users = UserRegistry()
        self.resident_max_messages = resident_max_messages
        self.resident_max_bytes = resident_max_bytes
        self.limits = limits
        self.counters = Counters()
        self._spill_factory = spill_factory
        self._next_id = 1
        # store outbox: ops in order; the ticket counts ops whose fsync a confirm may wait for
        self.store_enabled = store_enabled
        self._store_ops: list[StoreOp] = []
        self.store_backlog_max = STORE_BACKLOG_MAX  # publishing connections pause at this backlog
        # Acks of dead-lettered messages, held until their DLX copy is in the outbox
        self._deferred_acks: dict[tuple[str, str, int], Ack] = {}
        # the message a queue is enqueueing: a drop-head may discard it before its Publish is in
        # the outbox, and an Ack before its Publish would be ignored (the message would come back
        # at restart), so its Acks wait in _held_acks for store_publish
        self.enqueueing: Message | None = None
        self._held_acks: list[Ack] = []
        self.store_ticket = 0
        self.synced_ticket = 0
        # tickets whose ops the store could not write (disk full): their confirms go out as nacks.
        # ``failing`` is set only while ``store_failed`` releases them; ``failed_ranges`` keeps the
        # last few for answers that look later (HTTP publish waits).
        self.failing: tuple[int, int] | None = None
        self.failed_ranges: deque[tuple[int, int]] = deque(maxlen=FAILED_RANGES_KEPT)
        self.on_store_pending: Callable[[], None] = _noop
        # mirror outbox: (vhost, exchange, record)
        self._mirror: list[tuple[str, str, MirrorRecord]] = []
        self.on_mirror_pending: Callable[[], None] = _noop
        self.on_definitions_changed: Callable[[], None] = _noop
        self.alarms: frozenset[str] = frozenset()
        self.memory_used = 0  # bytes, per the configured calculation, sampled by the shell
        self.memory_rss = 0  # resident set size of the process, sampled by the shell
        self.disk_free = 0  # bytes free in the data directory, sampled by the shell
        self.observers: set[BrokerObserver] = set()
        self.connections: dict[int, Any] = {}  # id -> session (for listings and close)
        self.replies = ReplyRegistry()  # direct reply-to consumers by address
        self.users.on_change = self._permissions_changed
        self.users.on_user_deleted = self._user_deleted
        # called with a deleted user's name: the HTTP shell ends that user's consume streams there
        self.user_deleted_hooks: list[Callable[[str], None]] = []

    # ------------------------------------------------------------------ vhosts and users
    def add_vhost(self, name: str) -> VHost:
        if not name:
            raise ValueError("vhost name must not be empty")
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VHost(self, name)
            self.definitions_changed()
        return vhost

    def delete_vhost(self, name: str) -> bool:
        vhost = self.vhosts.pop(name, None)
        if vhost is None:
            return False
        # RabbitMQ closes the vhost's connections first (320), so their cleanup finds the queues
        self._close_connections(lambda session: session.vhost is vhost, f"vhost '{name}' is deleted")
        for queue_name in list(vhost.queues):
            vhost.delete_queue(queue_name)
        for key in [k for k in self.users.permissions if k[1] == name]:
            del self.users.permissions[key]
        self.users.changed()
        self.definitions_changed()
        return True

    @property
    def permissions_generation(self) -> int:
        """Bumped on every user, permission or vhost change."""
        return self.users.generation

    def _permissions_changed(self) -> None:
        """A user or permission changed: open connections forget the decisions they cached, so a
        revoked permission applies to their next operation."""
        for session in list(self.connections.values()):
            session.permissions_changed()

    def _user_deleted(self, name: str) -> None:
        """RabbitMQ closes a deleted user's connections with 320 CONNECTION_FORCED."""
        self._close_connections(lambda session: session.user is not None and session.user.name == name,
                                f"user '{name}' is deleted")
        for hook in list(self.user_deleted_hooks):
            hook(name)

    def _close_connections(self, match: Callable[[Any], bool], reason: str) -> None:
        for session in list(self.connections.values()):
            if match(session):
                session.close_by_admin(reason)

    def vhost(self, name: str) -> VHost | None:
        return self.vhosts.get(name)

    def ensure_default(self, vhost: str, user: str, password: str) -> None:
        """First start: a vhost and an administrator with full permissions on it (RabbitMQ's guest)."""
        self.add_vhost(vhost)
        if user and user not in self.users.users:
            self.users.add_user(user, password, ("administrator",))
            self.users.set_permission(user, vhost, Permission())
            self.definitions_changed()

    def check_limit(self, kind: str, vhost: VHost) -> None:
        if kind == "queues" and len(vhost.queues) >= self.limits.max_queues_per_vhost:
            raise ChannelException(ReplyCode.PRECONDITION_FAILED,
                                   f"PRECONDITION_FAILED - queue limit in vhost '{vhost.name}' "
                                   f"({self.limits.max_queues_per_vhost}) is reached")
        if kind == "exchanges" and len(vhost.exchanges) >= self.limits.max_exchanges_per_vhost:
            raise ChannelException(ReplyCode.PRECONDITION_FAILED,
                                   f"PRECONDITION_FAILED - exchange limit in vhost '{vhost.name}' "
                                   f"({self.limits.max_exchanges_per_vhost}) is reached")

    def definitions_changed(self) -> None:
        self.on_definitions_changed()

    # ------------------------------------------------------------------ messages
    def next_message_id(self) -> int:
        mid = self._next_id
        self._next_id = mid + 1
        return mid

    def set_next_message_id(self, value: int) -> None:
        self._next_id = max(self._next_id, value)

    def backing_factory(self, vhost: str, queue: str) -> Callable[[], Backing] | None:
        factory = self._spill_factory
        if factory is None:
            return None
        return lambda: factory(vhost, queue)

    def store_publish(self, vhost: str, message: Message, queues: list[str]) -> int:
        """Record a publish, then the Acks held while it was enqueued (see ``enqueueing``)."""
        if not self.store_enabled:
            return 0
        ops = self._store_ops
        ops.append(Publish(
            message.id, vhost, tuple(queues), message.exchange, message.routing_key,
            message.props_raw, message.body, int(message.timestamp * 1000),
        ))
        self.store_ticket += 1
        if self._held_acks:
            ops += self._held_acks
            self._held_acks = []
        if len(ops) == 1:
            self.on_store_pending()
        return self.store_ticket

    def store_delay(self, message_id: int, vhost: str, exchange: str, routing_key: str, props_raw: bytes,
                    body: bytes, due: float) -> int:
        if not self.store_enabled:
            return 0
        self._store_ops.append(Delay(message_id, vhost, exchange, routing_key, props_raw, body, int(due * 1000)))
        self.store_ticket += 1
        if len(self._store_ops) == 1:
            self.on_store_pending()
        return self.store_ticket

    def store_undelay(self, message_id: int) -> None:
        if self.store_enabled:
            self._store_ops.append(Undelay(message_id))
            if len(self._store_ops) == 1:
                self.on_store_pending()

    def on_discard(self, queue: Queue, entry: QueueEntry) -> None:
        """A message left ``queue`` for good: its store record may go once every queue is done.
        A dead-lettered message keeps its record until its DLX copy is recorded
        (``dead_letter_published``): a crash between the two must not lose it."""
        if self.store_enabled and queue.durable and entry.message.persistent:
            ack = Ack(entry.message.id, queue.vhost, queue.name)
            if queue.dead_letter_pending(entry.message):
                self._deferred_acks[(queue.vhost, queue.name, entry.message.id)] = ack
                return
            if entry.message is self.enqueueing:
                self._held_acks.append(ack)  # its Publish is not recorded yet
                return
            self._store_ops.append(ack)
            if len(self._store_ops) == 1:
                self.on_store_pending()

    def dead_letter_published(self, queue: Queue, message: Message) -> None:
        """The dead-lettered ``message`` was republished to the DLX (or dropped for want of one):
        now its Ack may follow."""
        if self._deferred_acks:
            ack = self._deferred_acks.pop((queue.vhost, queue.name, message.id), None)
            if ack is not None:
                self._store_ops.append(ack)
                if len(self._store_ops) == 1:
                    self.on_store_pending()

    def on_deliver(self, queue: Queue, entry: QueueEntry) -> None:
        """Every delivery of a stored message is recorded: recovery marks it redelivered and restores
        its delivery count, so x-delivery-limit is not reset by a restart."""
        if self.store_enabled and queue.durable and entry.message.persistent:
            self._store_ops.append(Deliver(entry.message.id, queue.vhost, queue.name))
            if len(self._store_ops) == 1:
                self.on_store_pending()

    def queue_deleted(self, vhost: VHost, queue: Queue) -> None:
        if self._deferred_acks:  # the DropQueue below covers them
            for key in [k for k in self._deferred_acks if k[0] == vhost.name and k[1] == queue.name]:
                del self._deferred_acks[key]
        if self.store_enabled and queue.durable:
            self._store_ops.append(DropQueue(vhost.name, queue.name))
            if len(self._store_ops) == 1:
                self.on_store_pending()

    def queue_purged(self, queue: Queue) -> int:
        """One PurgeQueue record for a purge, sparing the unacked messages (they may be requeued).
        It takes a ticket: purge-ok waits for its fsync, or a crash would bring the messages back."""
        if not (self.store_enabled and queue.durable):
            return 0
        self._store_ops.append(PurgeQueue(queue.vhost, queue.name, tuple(queue.unacked_message_ids())))
        self.store_ticket += 1
        if len(self._store_ops) == 1:
            self.on_store_pending()
        return self.store_ticket

    def take_store_ops(self, limit: int | None = None) -> tuple[list[StoreOp], int]:
        """The oldest ops (at most ``limit``) and the ticket they cover: one group commit."""
        ops = self._store_ops
        if limit is None or len(ops) <= limit:
            self._store_ops = []
            return ops, self.store_ticket
        taken, self._store_ops = ops[:limit], ops[limit:]
        # only Publish, Delay and PurgeQueue ops take a ticket; those left behind are not covered yet
        left = sum(1 for op in self._store_ops if isinstance(op, (Publish, Delay, PurgeQueue)))
        return taken, self.store_ticket - left

    @property
    def store_backlog(self) -> int:
        """Ops waiting for the flusher."""
        return len(self._store_ops)

    def store_synced(self, ticket: int) -> None:
        if ticket <= self.synced_ticket:
            return
        self.synced_ticket = ticket
        for observer in list(self.observers):
            observer.store_synced(ticket)

    def store_failed(self, ticket: int) -> None:
        """The store could not write the ops up to ``ticket`` (disk full or failing): whoever waits
        on them is released now with a failure (basic.nack, a channel error, HTTP 503) instead of
        a confirm. The store keeps retrying their records, so nothing it acknowledged is lost."""
        if ticket <= self.synced_ticket:
            return
        failed = (self.synced_ticket, ticket)
        self.failed_ranges.append(failed)
        self.failing = failed
        try:
            self.store_synced(ticket)
        finally:
            self.failing = None

    def ticket_failed(self, ticket: int) -> bool:
        return any(lo < ticket <= hi for lo, hi in self.failed_ranges)

    def mirror(self, vhost: str, exchange: str, message: Message) -> None:
        headers = message.headers
        raw = message.props_raw
        # decode only when content-type (flag bit 15) or message-id (bit 7) is present
        props = decode_properties(raw) if len(raw) >= 2 and (raw[0] & 0x80 or raw[1] & 0x80) else None
        record = MirrorRecord(
            timestamp_ms=int(message.timestamp * 1000),
            routing_key=message.routing_key,
            props_raw=message.props_raw,
            body=message.body,
            headers={str(k): _text(v) for k, v in headers.items()} if headers else None,
            content_type=props.content_type if props else None,
            message_id=props.message_id if props else None,
        )
        self._mirror.append((vhost, exchange, record))
        if len(self._mirror) == 1:
            self.on_mirror_pending()

    def take_mirror_records(self) -> list[tuple[str, str, MirrorRecord]]:
        records, self._mirror = self._mirror, []
        return records

    @property
    def mirror_backlog(self) -> int:
        return len(self._mirror)

    # ------------------------------------------------------------------ time and alarms
    def tick(self, now: float) -> None:
        self.now = now
        for vhost in list(self.vhosts.values()):
            vhost.tick(now)

    def set_alarm(self, name: str, raised: bool) -> None:
        alarms = self.alarms | {name} if raised else self.alarms - {name}
        if alarms != self.alarms:
            self.alarms = frozenset(alarms)
            for observer in list(self.observers):
                observer.alarms_changed(self.alarms)

    # ------------------------------------------------------------------ observation
    def held_memory(self) -> int:
        """Bytes held for clients: messages in memory in every queue plus connections' unsent
        output and uncommitted transactions. Unlike RSS this falls as soon as consumers drain, so an alarm on it clears."""
        total = sum(q.memory for vhost in self.vhosts.values() for q in vhost.queues.values())
        for session in self.connections.values():
            total += session.conn.bytes_pending + session.tx_bytes
        return total

    def queues(self) -> list[Queue]:
        return [q for vhost in self.vhosts.values() for q in vhost.queues.values()]


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _noop() -> None:
    return None
