"""The broker: virtual hosts, users, and the hand-off points to the I/O shell.

Rule 1: the ``Broker`` owns vhosts, users/permissions, the open connections and the alarm set, and
holds the delivery owner (``delivery``, a message's life) with the store and mirror outboxes it
writes to. Sessions and the HTTP API call its methods; nothing else mutates them.
Rule 2: it never does I/O and never reads the clock: every call that needs the time takes ``now``.
The shell drains ``take_store_ops``/``take_mirror_records`` in its flusher/writer tasks and reports
back with ``store_synced``, which tells only the sessions that asked (``wait_for_sync``): a group
commit costs the connections waiting on it, not every open connection. What the broker calls in the
shell (wake the clock, the flusher, the mirror writer, the stream pump; a saturated queue released;
policies changed; a user deleted) is one ``ShellPorts`` (ports.py), given at construction and
handed to the parts that call it; nothing is installed later.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from headrace.persistence.store_ops import StoreOp
from headrace.persistence.stream_log import StreamOp
from headrace.queues import Destination, Message
from headrace.queues.backing import Backing
from headrace.queues.held import HeldTally
from headrace.queues.queue import ENTRY_OVERHEAD
from headrace.server.auth import FAILED_LOGINS_PER_SECOND, Permission, User, UserRegistry

from . import limits as limit_rules
from .compat import COMPAT_3_10, Compat
from .definition_changes import DefinitionChanges
from .delivery import Delivery
from .limits import Limits
from .outbox import MIRROR_BACKLOG_MAX, STORE_BACKLOG_MAX, MirrorOutbox, StoreOutbox
from .parameters import RuntimeParameters
from .policies import Policy, PolicyStore, apply_policies, refuse_mirroring
from .ports import ShellPorts
from .reply_to import ReplyRegistry
from .saturation import SATURATION_TICK
from .firehose import Firehose
from .totals import Retired
from .vhost import VHost

__all__ = ["MIRROR_BACKLOG_MAX", "STORE_BACKLOG_MAX", "Broker", "BrokerObserver", "Limits"]

# Failed store groups remembered for late askers (an HTTP publish answering after the flush).
FAILED_RANGES_KEPT = 64


class BrokerObserver(Protocol):
    """What a connection session offers the broker: confirm release and alarm notices."""

    def store_synced(self, ticket: int) -> None: ...
    def alarms_changed(self, alarms: frozenset[str]) -> None: ...


@dataclass(slots=True)
class Counters:
    extra: dict[str, int] = field(default_factory=dict)  # churn events since the start (``churn``)


class Broker:
    def __init__(
        self, *, ports: ShellPorts, resident_max_messages: int = 50_000, resident_max_bytes: int = 64 << 20,
        spill_factory: Callable[[str, str], Backing] | None = None, store_enabled: bool = False,
        limits: Limits = Limits(), failed_logins_per_second: float = FAILED_LOGINS_PER_SECOND,
        compat: Compat = COMPAT_3_10, delayed_data_dir: Path | None = None, delayed_read_bytes: int = 4 << 20,
    ) -> None:
        self.compat = compat  # which RabbitMQ release's semantics (compat.py); fixed for the process
        # deprecated features clients used since the start that leave no object behind (global
        # QoS); /api/deprecated-features/used adds those the broker's objects show (http/deprecated.py)
        self.deprecated_used: set[str] = set()
        self.vhosts: dict[str, VHost] = {}
        self.users = UserRegistry(failed_per_second=failed_logins_per_second, on_change=self._permissions_changed,
                                  on_user_deleted=self._user_deleted, on_definition=self._user_definition)
        self.resident_max_messages = resident_max_messages
        self.resident_max_bytes = resident_max_bytes
        self.held = HeldTally()  # what every queue holds, kept by the queues as it changes (held.py)
        self.limits = limits
        self.counters = Counters()
        self.retired = Retired()  # what deleted queues, exchanges and vhosts had counted (totals.py)
        self.open_channels = 0  # channels open on every connection (the sessions count them)
        self.tx_bytes = 0  # uncommitted transactional publishes held by every connection (``hold_tx``)
        self.firehose = Firehose(ports.wake_clock)  # copies for traced vhosts' amq.rabbitmq.trace, published by tick
        self._spill_factory = spill_factory
        self.store = StoreOutbox(store_enabled, ports.wake_flusher)
        self.mirrors = MirrorOutbox(ports.wake_mirror_writer)
        self.stream_data_dir: Path | None = None  # where stream queues keep their logs (the shell sets it)
        self.stream_handover_timeout = limits.stream_handover_timeout_ms / 1000  # a stream queue's bound, in s
        # where x-delayed-message exchanges spill what is not due soon (delayed.py; wiped at start)
        self.delayed_data_dir = delayed_data_dir
        self.delayed_read_bytes = delayed_read_bytes  # read back from them per clock tick, at most
        self.replies = ReplyRegistry()  # direct reply-to consumers by address
        self.delivery = Delivery(self.store, self.mirrors, self.replies, ports)
        # tickets whose ops the store could not write (disk full): their confirms go out as nacks.
        # ``failing`` is set only while ``store_failed`` releases them; ``failed_ranges`` keeps the
        # last few for answers that look later (HTTP publish waits).
        self.failing: tuple[int, int] | None = None
        self.failed_ranges: deque[tuple[int, int]] = deque(maxlen=FAILED_RANGES_KEPT)
        self.definitions = DefinitionChanges()  # durable changes the shell has not logged yet
        self._saturation_due = 0.0  # wall-clock time of the next Saturation.tick
        self.alarms: frozenset[str] = frozenset()
        self.memory_used = 0  # bytes, per the configured calculation, sampled by the shell
        self.memory_rss = 0  # resident set size of the process, sampled by the shell
        self.memory_topology = 0  # estimated fixed cost of the objects (not the alarm's), sampled by the shell
        self.memory_topology_parts: dict[str, int] = {}  # the same by kind of object
        self.disk_free = 0  # bytes free in the data directory, sampled by the shell
        self.observers: set[BrokerObserver] = set()
        # the observers with a confirm or a reply waiting for the store: told of the next sync (a
        # group commit costs the connections waiting on it, not every connection)
        self.sync_waiters: dict[BrokerObserver, None] = {}
        self.connections: dict[int, Any] = {}  # id -> session (for listings and close)
        self.policies = PolicyStore()
        # called after a policy change: the shell runs stream retention with the new values now
        self._policies_changed = ports.policies_changed
        self._shell_user_deleted = ports.user_deleted  # the HTTP shell ends the user's consume streams
        # runtime and global parameters, vhost and user limits (durable, in the definitions)
        self.parameters = RuntimeParameters(on_change=self.definitions.changed)

    # ------------------------------------------------------------------ vhosts and users
    def add_vhost(self, name: str) -> VHost:
        if not name:
            raise ValueError("vhost name must not be empty")
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VHost(self, name)
            self.definitions.changed("vhosts", (name,))
        return vhost

    def delete_vhost(self, name: str) -> bool:
        vhost = self.vhosts.pop(name, None)
        if vhost is None:
            return False
        # RabbitMQ closes the vhost's connections first (320), so their cleanup finds the queues
        self._close_connections(lambda session: session.vhost is vhost, f"vhost '{name}' is deleted")
        for queue_name in list(vhost.queues):
            vhost.delete_queue(queue_name)
        self.retired.vhost_gone(vhost)
        vhost.delayed.close()
        self.delivery.window_deleted("exchange", name)  # and every other dedup window of the vhost
        for key in [k for k in self.users.permissions if k[1] == name]:
            del self.users.permissions[key]
        for topic_key in [k for k in self.users.topic_permissions if k[1] == name]:
            del self.users.topic_permissions[topic_key]
        self.parameters.vhost_deleted(name)
        self.policies.drop_vhost(name)
        self.users.changed()
        self.definitions.deleted("vhosts", (name,))  # with its permissions, parameters, policies
        return True

    def _permissions_changed(self) -> None:
        """A user or permission changed: open connections forget the decisions they cached, so a
        revoked permission applies to their next operation."""
        for session in list(self.connections.values()):
            session.permissions_changed()

    def _user_definition(self, section: str, key: tuple[str, ...], deleted: bool) -> None:
        (self.definitions.deleted if deleted else self.definitions.changed)(section, key)

    def _user_deleted(self, name: str) -> None:
        """RabbitMQ closes a deleted user's connections with 320 CONNECTION_FORCED."""
        self._close_connections(lambda session: session.user is not None and session.user.name == name,
                                f"user '{name}' is deleted")
        self.parameters.user_deleted(name)
        self._shell_user_deleted(name)

    def register_connection(self, session: Any, user: User) -> None:
        """An AMQP connection opened its vhost: listed, told about syncs and alarms. 530
        NOT_ALLOWED at the broker's or the user's connection limit."""
        connections = self.connections
        limit_rules.check_connection(self.limits, connections.values(), len(connections), user)
        connections[session.id] = session
        self.observers.add(session)
        self.churn("connection_created")

    def unregister_connection(self, session: Any) -> None:
        self.observers.discard(session)
        self.sync_waiters.pop(session, None)
        if self.connections.pop(session.id, None) is not None:
            self.churn("connection_closed")
            # a vhost's traffic counts its closed connections too, as RabbitMQ's vhost recv_oct
            session.vhost.octets_closed[0] += session.io.recv_oct
            session.vhost.octets_closed[1] += session.io.send_oct

    def churn(self, event: str) -> None:
        """Count an object's creation or end (RabbitMQ's churn_rates in the overview)."""
        extra = self.counters.extra
        extra[event] = extra.get(event, 0) + 1

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

    def set_policy(self, vhost: str, name: str, body: Any, now: float, *, operator: bool = False) -> Policy:
        """Add or replace a (operator) policy; it applies at once. ``PolicyError`` if refused."""
        target = self.vhosts.get(vhost)
        if target is None:
            raise KeyError(vhost)
        if not self.compat.classic_mirroring:
            refuse_mirroring(body)
        policy = self.policies.set(vhost, name, body, operator=operator)
        apply_policies(self.policies, self.delivery, target, now, self.compat)
        self._policies_changed()
        self.definitions.changed("operator_policies" if operator else "policies", (vhost, name))
        return policy

    def clear_policy(self, vhost: str, name: str, now: float, *, operator: bool = False) -> bool:
        if not self.policies.clear(vhost, name, operator=operator):
            return False
        target = self.vhosts.get(vhost)
        if target is not None:
            apply_policies(self.policies, self.delivery, target, now, self.compat)
        self._policies_changed()
        self.definitions.changed("operator_policies" if operator else "policies", (vhost, name))
        return True

    def check_limit(self, kind: str, vhost: VHost) -> None:
        if kind == "queues":
            self.churn("queue_created")
        limit_rules.check_declare(self.limits, self.parameters, kind, vhost)

    def connection_refused(self, vhost: str, user: str) -> str | None:
        return limit_rules.connection_refused(self.parameters, self.connections.values(), vhost, user)

    def channel_refused(self, user: str, opening: Any) -> str | None:
        return limit_rules.channel_refused(self.parameters, self.connections.values(), user, opening)

    # ------------------------------------------------------------------ messages and outboxes
    def next_message_id(self) -> int:
        return self.delivery.next_message_id()

    def set_next_message_id(self, value: int) -> None:
        self.delivery.set_next_message_id(value)

    def backing_factory(self, vhost: str, queue: str) -> Callable[[], Backing] | None:
        factory = self._spill_factory
        if factory is None:
            return None
        return lambda: factory(vhost, queue)

    @property
    def store_enabled(self) -> bool:
        return self.store.enabled

    @property
    def store_backlog(self) -> int:
        """Ops waiting for the flusher."""
        return len(self.store.ops)

    @property
    def store_backlog_max(self) -> int:
        return self.store.backlog_max

    @store_backlog_max.setter
    def store_backlog_max(self, value: int) -> None:
        self.store.backlog_max = value

    @property
    def store_ticket(self) -> int:
        return self.store.ticket

    @property
    def synced_ticket(self) -> int:
        return self.store.synced

    def take_store_ops(self, limit: int | None = None) -> tuple[list[StoreOp | StreamOp], int]:
        """The oldest ops (at most ``limit``) and the ticket they cover: one group commit."""
        return self.store.take(limit)

    def wait_for_sync(self, observer: BrokerObserver) -> None:
        """``observer`` waits for the store: its ``store_synced`` is called after the next group
        commit (it asks again if it still waits after that)."""
        self.sync_waiters[observer] = None

    def store_synced(self, ticket: int) -> None:
        if ticket <= self.store.synced:
            return
        self.store.synced = ticket
        waiters, self.sync_waiters = self.sync_waiters, {}
        for observer in waiters:
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

    def take_mirror_records(self) -> dict[tuple[str, str], list[Message]]:
        """The messages published to mirrored exchanges since the last take, by (vhost, exchange);
        the mirror writer frames them (``MirrorLog.append_messages``)."""
        return self.mirrors.take()

    @property
    def mirror_backlog(self) -> int:
        return self.mirrors.count

    # ------------------------------------------------------------------ time and alarms
    def tick(self, now: float) -> None:
        """Only what is due: the clock calls this at ``next_deadline()`` or when woken earlier."""
        if self.firehose.pending:
            self.publish_traces(now)
        for timer in self.delivery.tick(self.vhosts, now):
            timer.deadline_due(now)
        # saturation counts stalls in ticks of its own cadence (1 ms slack: float sums of 0.1)
        if now + 0.001 >= self._saturation_due:
            self._saturation_due = now + SATURATION_TICK
            self.delivery.saturation.tick()

    def publish_traces(self, now: float) -> None:
        """The firehose's waiting copies, published into their vhosts' trace exchange: by a session
        once its batch is dispatched, by the clock for the rest (broker/firehose.py)."""
        delivery = self.delivery
        vhosts = self.vhosts
        self.firehose.flush(
            lambda vhost, exchange, key, props, body: delivery.publish(vhost, exchange, key, props, body, now,
                                                                       None, False),
            lambda vhost: vhosts.get(vhost.name) is vhost)

    def next_deadline(self) -> float | None:
        """Wall-clock time of the next TTL expiry, x-expires or delayed message, if any, or of the
        next saturation tick while a queue is saturated or stalled."""
        when = self.delivery.deadlines.earliest()
        if self.firehose.pending:  # traced publishes and deliveries waiting for their copies
            return float("-inf")
        saturation = self.delivery.saturation
        if saturation.saturated or saturation.stalled:
            due = self._saturation_due
            when = due if when is None else min(when, due)
        return when

    def arm_all(self) -> None:
        """Every queue's deadlines go into the heap (call after recovery, which fills queues
        without arming them one message at a time)."""
        for vhost in self.vhosts.values():
            self.delivery.arm_all(vhost)

    def set_alarm(self, name: str, raised: bool) -> None:
        alarms = self.alarms | {name} if raised else self.alarms - {name}
        if alarms != self.alarms:
            self.alarms = frozenset(alarms)
            for observer in list(self.observers):
                observer.alarms_changed(self.alarms)

    # ------------------------------------------------------------------ observation
    def held_memory(self) -> int:
        """Bytes held for clients: messages in memory in every queue plus uncommitted transactions
        (the shell adds the connections' unsent output, which only it knows without a walk over
        every connection). Unlike RSS this falls as soon as consumers drain, so an alarm on it clears."""
        held = self.held
        return held.entries * ENTRY_OVERHEAD + held.bytes + self.tx_bytes  # queues: the sum of their ``memory``

    def queues(self) -> list[Destination]:
        return [q for vhost in self.vhosts.values() for q in vhost.queues.values()]
