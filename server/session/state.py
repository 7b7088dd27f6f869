"""What one AMQP connection knows about itself, shared by the session's parts and its channels.

Rule 1: a ``SessionState`` (one per connection, made by its ``Session``) owns the connection's
identity (user, vhost, client capabilities and properties, peer and local addresses), its counters
(publishes, acks, uncommitted transactional bytes, socket traffic), the ``now`` of the batch being
applied, notifications deferred behind the current reply, the queue last declared and its
``Permissions`` (permissions.py: the cached decisions). It is also the connection's identity as
an exclusive queue's owner. The handshake part writes the identity, the declarations part
``last_queue``, the channels the counters; the ``Session`` (session.py) owns the rest: the
channels, the parts, the lifecycle.
Rule 2: this module sits under the rest of ``server/session`` but permissions: the parts and the
channels take a ``SessionState``, never the ``Session`` that lists them, and reach a sibling only
through what the session hands them when it creates them (a permission check, a callback). So the
import graph runs one way: session over its parts over the channel over this state over
permissions.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from headrace.server.amqp import methods as m
from headrace.server.amqp.connection import AMQPConnection
from headrace.server.auth import User
from headrace.server.broker import Broker, VHost

from .permissions import Permissions

__all__ = ["SessionState", "SocketCounters"]

_ids = itertools.count(1)


@dataclass(slots=True)
class SocketCounters:
    """The socket's traffic, as RabbitMQ's connection recv_oct/send_oct and recv_cnt/send_cnt:
    bytes and socket reads/writes. Written by the network shell, once per read or write."""
    recv_oct: int = 0
    recv_cnt: int = 0
    send_oct: int = 0
    send_cnt: int = 0


class SessionState:
    """The connection's shared context (module docstring)."""

    __slots__ = ("id", "broker", "conn", "peer", "local", "ssl", "io", "loopback_users", "wake", "arm_deadline",
                 "perms", "user", "vhost", "capabilities", "client_properties", "outbox_full", "published",
                 "acked", "tx_bytes", "now", "connected_at", "blocked_sent", "deferred", "last_queue")

    def __init__(self, broker: Broker, conn: AMQPConnection, *, peer: tuple[str, int], local: tuple[str, int],
                 ssl: bool, loopback_users: Iterable[str], wake: Callable[[], None],
                 arm_deadline: Callable[[float], None]) -> None:
        self.id = next(_ids)
        self.broker = broker
        self.conn = conn
        self.peer = peer
        self.local = local  # the broker's end of the socket (RabbitMQ's host and port)
        self.ssl = ssl
        self.io = SocketCounters()
        self.loopback_users = frozenset(loopback_users)
        self.wake = wake  # the shell's handler: output is waiting (given at construction, never a no-op)
        # the session's: this connection's consumer-timeout deadline comes at the time given or
        # sooner (the session is the key in the broker's one deadline heap, and handles it when due)
        self.arm_deadline = arm_deadline
        self.perms = Permissions(self)
        self.user: User | None = None
        self.vhost: VHost = None  # type: ignore[assignment]  # set by connection.open
        self.capabilities: dict[str, Any] = {}
        self.client_properties: dict[str, Any] = {}
        self.outbox_full = False  # a consumer found the outgoing buffer full: dispatch again on drain
        self.published = 0
        self.acked = 0
        self.tx_bytes = 0  # uncommitted transactional publishes held by this connection's channels
        self.now = 0.0  # the time the shell gave with the batch being applied (or the last one)
        self.connected_at = 0.0
        self.blocked_sent = False
        self.deferred: list[tuple[int, m.Method]] = []  # notifications sent after the current reply
        self.last_queue = ""  # "the queue last declared on this channel" (spec), kept per connection

    def hold_tx(self, nbytes: int) -> None:
        """Uncommitted transactional publishes grew (or, negative, were released) by ``nbytes``:
        this connection's count and the broker's total, which the memory alarm reads."""
        self.tx_bytes += nbytes
        self.broker.tx_bytes += nbytes

    def check_permission(self, kind: str, name: str) -> None:
        """As an exclusive queue's owner, for the vhost's check of a server-named queue
        (``PermissionChecker``): raises 403 if refused."""
        self.perms.check(kind, name)

    def alarms_changed(self, alarms: frozenset[str]) -> None:
        """RabbitMQ's rule: connections that publish are blocked (and told so) while an alarm is up."""
        if self.vhost is None or not self.capabilities.get("connection.blocked"):
            return
        if alarms and not self.blocked_sent and (self.published or self.tx_bytes):
            reason = "low on " + " and ".join(sorted(alarms))
            self.conn.send_method(0, m.ConnectionBlocked(reason=reason))
            self.blocked_sent = True
        elif not alarms and self.blocked_sent:
            self.conn.send_method(0, m.ConnectionUnblocked())
            self.blocked_sent = False
        self.wake()
