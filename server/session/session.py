"""One AMQP connection as the broker sees it: applies protocol events to the broker.

Rule 1: the ``Session`` owns the connection's identity (user, vhost, client capabilities), its
channels and its exclusive queues; the network shell owns the socket and only calls ``handle``,
``connection_lost`` and ``on_drain``.
Rule 2: everything here is synchronous: a batch of events is applied atomically and leaves its
replies in the ``AMQPConnection`` buffer for the writer.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable
from ipaddress import ip_address
from typing import Any

from headrace.exchanges import DestinationKind
from headrace.server.amqp import methods as m
from headrace.server.amqp.connection import AMQPConnection
from headrace.server.amqp.errors import AMQPError, ChannelException, ConnectionException
from headrace.server.amqp.events import (
    BadProtocolHeader,
    ChannelClosed,
    ChannelOpened,
    ConnectionClosed,
    ConnectionCloseOk,
    ContentReceived,
    MethodReceived,
)
from headrace.server.amqp.sasl import parse_response
from headrace.server.amqp.spec import ReplyCode
from headrace.server.auth import LoginThrottled, User
from headrace.server.broker import Broker, VHost, errors
from headrace.server.broker.core import MIRROR_BACKLOG_MAX
from headrace.server.broker.reply_to import REPLY_QUEUE

from .channel import ChannelSession

__all__ = ["Session"]

log = logging.getLogger("headrace.session")
_ids = itertools.count(1)


class Session:
    def __init__(self, broker: Broker, conn: AMQPConnection, *, peer: tuple[str, int] = ("127.0.0.1", 0),
                 loopback_users: Iterable[str] = ("guest",), max_unconfirmed: int = 10_000,
                 wake: Callable[[], None] = lambda: None) -> None:
        self.id = next(_ids)
        self.broker = broker
        self.conn = conn
        self.peer = peer
        self.loopback_users = frozenset(loopback_users)
        self.max_unconfirmed = max_unconfirmed
        self.wake = wake
        self.user: User | None = None
        self.vhost: VHost = None  # type: ignore[assignment]  # set by connection.open
        self.capabilities: dict[str, Any] = {}
        self.client_properties: dict[str, Any] = {}
        self.channels: dict[int, ChannelSession] = {}
        self.confirm_channels: set[ChannelSession] = set()
        self.last_queue = ""  # "the queue last declared on this channel" (spec), kept per connection
        self.outbox_full = False  # a consumer found the outgoing buffer full: dispatch again on drain
        self.unconfirmed = 0  # publishes waiting for the store before their confirm
        self.published = 0
        self.acked = 0
        self.tx_bytes = 0  # uncommitted transactional publishes held by this connection's channels
        self.finished = False  # the socket may be closed once the writer has flushed
        self.closing = False
        self._cleaned = False
        self._perm_cache: dict[tuple[str, str], bool] = {}
        self.now = 0.0  # the time the shell gave with the batch being applied (or the last one)
        self.connected_at = 0.0
        self.blocked_sent = False
        self.deferred: list[tuple[int, Any]] = []  # notifications sent after the current reply
        # (channel, store ticket, reply): tx.commit-ok and queue.purge-ok go out after their fsync
        self.pending_commits: list[tuple[int, int, Any]] = []

    # ------------------------------------------------------------------ shell interface
    @property
    def read_paused(self) -> bool:
        """Stop reading this socket: broker alarm (for connections that publish), too many
        publishes waiting for fsync, or (for connections that publish) a full mirror or store
        outbox: the flusher's ``gate.notify`` after each batch lets them read again."""
        if self.unconfirmed >= self.max_unconfirmed:
            return True
        broker = self.broker
        if self.published and (broker.mirror_backlog >= MIRROR_BACKLOG_MAX
                               or broker.store_backlog >= broker.store_backlog_max):
            return True
        return bool(broker.alarms) and (self.published > 0 or self.tx_bytes > 0)

    def handle(self, events: list[Any], now: float) -> None:
        """Apply one batch of protocol events at time ``now``."""
        self.now = now
        if not self.connected_at:
            self.connected_at = now
        for event in events:
            kind = type(event)
            try:
                if kind is ContentReceived:
                    channel = self.channels.get(event.channel)
                    if channel is not None:
                        channel.publish(event)
                elif kind is MethodReceived:
                    self._method(event.channel, event.method)
                elif kind is ChannelOpened:
                    self._require_open()
                    self.channels[event.channel] = ChannelSession(self, event.channel)
                elif kind is ChannelClosed:
                    self._drop_channel(event.channel)
                elif kind is ConnectionClosed:
                    self.closing = True
                    self.cleanup()
                    if event.by_peer:
                        self.finished = True
                elif kind is ConnectionCloseOk or kind is BadProtocolHeader:
                    self.finished = True
                    self.cleanup()
            except ChannelException as exc:
                channel_id = getattr(event, "channel", 0)
                self._fill_ids(exc, event)
                if channel_id == 0:
                    self._close_connection(ConnectionException(exc.reply_code, exc.reply_text,
                                                               exc.class_id, exc.method_id))
                else:
                    self.conn.close_channel(channel_id, exc)
                    self._drop_channel(channel_id)
            except ConnectionException as exc:
                self._fill_ids(exc, event)
                self._close_connection(exc)
            if self.deferred:
                self.flush_deferred()
        if self.confirm_channels:
            self.release_confirms()
        if self.conn.bytes_pending:
            self.wake()

    def flush_deferred(self) -> None:
        deferred, self.deferred = self.deferred, []
        for channel_id, method in deferred:
            if self.conn.is_channel_open(channel_id):
                self.conn.send_method(channel_id, method)

    def _fill_ids(self, exc: AMQPError, event: Any) -> None:
        method = getattr(event, "method", None)
        if method is not None and not exc.class_id:
            exc.class_id = method.CLASS_ID
            exc.method_id = method.METHOD_ID

    def _close_connection(self, exc: ConnectionException) -> None:
        self.conn.close(exc)
        self.closing = True
        self.cleanup()

    def close_by_admin(self, reason: str) -> None:
        """Management close: connection.close 320 to the client, state dropped now."""
        self._close_connection(ConnectionException(ReplyCode.CONNECTION_FORCED, f"CONNECTION_FORCED - {reason}"))
        self.wake()

    def connection_lost(self, now: float) -> None:
        self.now = now
        self.finished = True
        self.cleanup()

    def on_drain(self, now: float) -> None:
        """The writer emptied the outgoing buffer: consumers that stopped on it may take again."""
        if not self.outbox_full:
            return
        self.now = now
        self.outbox_full = False
        delivery = self.broker.delivery
        for channel in list(self.channels.values()):
            delivery.consumer_ready(self.vhost, [q for q, _ in channel.consumers.values()], now)
        if self.conn.bytes_pending:
            self.wake()

    def check_consumer_timeout(self, now: float, timeout_ms: int) -> None:
        """Close channels that hold a delivery unacked for longer than the consumer timeout; the
        message goes back to its queue (RabbitMQ's consumer_timeout)."""
        limit = timeout_ms / 1000
        self.now = now
        for channel in list(self.channels.values()):
            since = channel.oldest_unacked_since(now)
            if since is not None and now - since > limit:
                exc = ChannelException(
                    ReplyCode.PRECONDITION_FAILED,
                    f"PRECONDITION_FAILED - delivery acknowledgement on channel {channel.id} timed out. "
                    f"Timeout value used: {timeout_ms} ms. This timeout value can be configured, see "
                    "consumers doc guide to learn more")
                log.warning("consumer timeout on channel %d of connection %d", channel.id, self.id)
                self.conn.close_channel(channel.id, exc)
                self._drop_channel(channel.id)
                self.wake()

    # ------------------------------------------------------------------ BrokerObserver
    def store_synced(self, ticket: int) -> None:
        if self.pending_commits:
            failing = self.broker.failing
            waiting = []
            for channel_id, needed, reply in self.pending_commits:
                if needed > ticket:
                    waiting.append((channel_id, needed, reply))
                elif not self.conn.is_channel_open(channel_id):
                    continue
                elif failing is not None and failing[0] < needed:
                    # the store could not write it: the change is not durable, say so (RabbitMQ
                    # closes the channel when its queue cannot take the write)
                    self.conn.close_channel(channel_id, ChannelException(
                        ReplyCode.INTERNAL_ERROR,
                        "INTERNAL_ERROR - the message store could not write to disk"))
                    self._drop_channel(channel_id)
                else:
                    self.conn.send_method(channel_id, reply)
            self.pending_commits = waiting
            self.wake()
        if self.confirm_channels:
            self.release_confirms()
            self.wake()

    def release_confirms(self) -> None:
        synced = self.broker.synced_ticket if self.broker.store_enabled else 1 << 62
        waiting = 0
        for channel in list(self.confirm_channels):
            left = channel.flush_confirms(synced)
            if not left:
                self.confirm_channels.discard(channel)
            waiting += left
        self.unconfirmed = waiting

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

    # ------------------------------------------------------------------ permissions
    def allowed(self, kind: str, name: str) -> bool:
        """``name`` "" is the default exchange, checked as ``amq.default`` as RabbitMQ does (so
        ``^$`` denies publishing to it too)."""
        key = (kind, name)
        ok = self._perm_cache.get(key)
        if ok is None:
            assert self.user is not None
            ok = self.broker.users.allowed(self.user.name, self.vhost.name, kind, name or "amq.default")
            if len(self._perm_cache) < 4096:
                self._perm_cache[key] = ok
        return ok

    def permissions_changed(self) -> None:
        """Called by the broker on any user/permission/vhost change: drop cached decisions."""
        self._perm_cache.clear()
        for channel in self.channels.values():
            channel._write_ok.clear()

    def check_permission(self, kind: str, name: str) -> None:
        if not self.allowed(kind, name):
            assert self.user is not None
            resource = "exchange" if kind == "write" else "queue"
            raise errors.access_refused(
                f"{kind} access to {resource} '{name or 'amq.default'}' in vhost '{self.vhost.name}' "
                f"refused for user '{self.user.name}'"
            )

    def _check(self, kind: str, resource: str, name: str) -> None:
        if not self.allowed(kind, name):
            assert self.user is not None
            raise errors.access_refused(
                f"{kind} access to {resource} '{name or 'amq.default'}' in vhost '{self.vhost.name}' "
                f"refused for user '{self.user.name}'"
            )

    # ------------------------------------------------------------------ methods
    def _require_open(self) -> None:
        if self.vhost is None:
            raise ConnectionException(ReplyCode.COMMAND_INVALID, "COMMAND_INVALID - connection not open")

    def _method(self, channel_id: int, method: Any) -> None:
        if channel_id == 0:
            handler = _CONNECTION_HANDLERS.get(type(method))
            if handler is None:
                raise ConnectionException(ReplyCode.COMMAND_INVALID,
                                          f"COMMAND_INVALID - unexpected method {method.NAME}")
            handler(self, method)
            return
        channel = self.channels.get(channel_id)
        if channel is None:
            return  # the channel is being closed by us: the protocol already discards its frames
        handler = _CHANNEL_HANDLERS.get(type(method))
        if handler is None:
            raise ConnectionException(ReplyCode.COMMAND_INVALID,
                                      f"COMMAND_INVALID - method {method.NAME} not allowed here")
        handler(self, channel, method)

    def _start_ok(self, method: m.ConnectionStartOk) -> None:
        self.client_properties = dict(method.client_properties or {})
        caps = self.client_properties.get("capabilities")
        self.capabilities = dict(caps) if isinstance(caps, dict) else {}
        username, password = parse_response(method.mechanism, method.response)
        try:
            user = self.broker.users.check(username, password)
        except LoginThrottled:
            log.warning("login refused for user '%s' from %s: too many failed logins", username, self.peer[0])
            raise ConnectionException(ReplyCode.ACCESS_REFUSED,
                                      "ACCESS_REFUSED - too many failed logins, try later", 10, 11) from None
        if user is not None and user.name in self.loopback_users and not _is_loopback(self.peer[0]):
            log.warning("user '%s' may only connect from localhost (peer %s)", user.name, self.peer[0])
            user = None
        if user is None:
            log.warning("login refused for user '%s' from %s", username, self.peer[0])
            raise ConnectionException(
                ReplyCode.ACCESS_REFUSED,
                f"ACCESS_REFUSED - Login was refused using authentication mechanism {method.mechanism}. "
                "For details see the broker logfile.", 10, 11)
        self.user = user
        conn = self.conn
        self.conn.send_method(0, m.ConnectionTune(channel_max=conn.channel_max, frame_max=conn.frame_max,
                                                  heartbeat=conn.heartbeat))

    def _tune_ok(self, method: m.ConnectionTuneOk) -> None:
        return None

    def _open(self, method: m.ConnectionOpen) -> None:
        if self.closing:
            return  # the login was refused earlier in this batch (a pipelining client): already closing
        assert self.user is not None
        name = method.virtual_host or "/"
        vhost = self.broker.vhost(name)
        if vhost is None:
            raise ConnectionException(ReplyCode.NOT_ALLOWED, f"NOT_ALLOWED - vhost {name} not found", 10, 40)
        if self.broker.users.permission(self.user.name, name) is None:
            raise ConnectionException(
                ReplyCode.NOT_ALLOWED,
                f"NOT_ALLOWED - access to vhost '{name}' refused for user '{self.user.name}'", 10, 40)
        limits = self.broker.limits
        connections = self.broker.connections
        if len(connections) >= limits.max_connections:
            raise ConnectionException(ReplyCode.NOT_ALLOWED,
                                      f"NOT_ALLOWED - connection limit ({limits.max_connections}) is reached", 10, 40)
        per_user = limits.max_connections_per_user
        if per_user is not None and sum(1 for s in connections.values() if s.user is self.user) >= per_user:
            raise ConnectionException(
                ReplyCode.NOT_ALLOWED,
                f"NOT_ALLOWED - connection limit ({per_user}) for user '{self.user.name}' is reached", 10, 40)
        self.vhost = vhost
        self.conn.send_method(0, m.ConnectionOpenOk())
        self.broker.observers.add(self)
        self.broker.connections[self.id] = self

    def _update_secret(self, method: m.ConnectionUpdateSecret) -> None:
        self.conn.send_method(0, m.ConnectionUpdateSecretOk())

    # channel-level ----------------------------------------------------
    def _exchange_declare(self, ch: ChannelSession, method: m.ExchangeDeclare) -> None:
        if not method.passive:
            self._check("configure", "exchange", method.exchange)
        self.vhost.declare_exchange(method.exchange, method.type, passive=method.passive,
                                    durable=method.durable, auto_delete=method.auto_delete,
                                    internal=method.internal, arguments=method.arguments)
        if not method.nowait:
            self.conn.send_method(ch.id, m.ExchangeDeclareOk())

    def _exchange_delete(self, ch: ChannelSession, method: m.ExchangeDelete) -> None:
        self._check("configure", "exchange", method.exchange)
        self.vhost.delete_exchange(method.exchange, if_unused=method.if_unused)
        if not method.nowait:
            self.conn.send_method(ch.id, m.ExchangeDeleteOk())

    def _exchange_bind(self, ch: ChannelSession, method: m.ExchangeBind) -> None:
        self._check("write", "exchange", method.destination)
        self._check("read", "exchange", method.source)
        self.vhost.bind(method.source, method.destination, DestinationKind.EXCHANGE, method.routing_key,
                        method.arguments)
        if not method.nowait:
            self.conn.send_method(ch.id, m.ExchangeBindOk())

    def _exchange_unbind(self, ch: ChannelSession, method: m.ExchangeUnbind) -> None:
        self._check("write", "exchange", method.destination)
        self._check("read", "exchange", method.source)
        self.vhost.unbind(method.source, method.destination, DestinationKind.EXCHANGE, method.routing_key,
                          method.arguments)
        if not method.nowait:
            self.conn.send_method(ch.id, m.ExchangeUnbindOk())

    def _queue_declare(self, ch: ChannelSession, method: m.QueueDeclare) -> None:
        if method.queue.startswith(REPLY_QUEUE):  # RabbitMQ answers for the pseudo-queue itself
            if not self.broker.replies.exists(method.queue):
                raise errors.not_found("queue", method.queue, self.vhost.name)
            if not method.nowait:
                self.conn.send_method(ch.id, m.QueueDeclareOk(queue=method.queue, message_count=0, consumer_count=1))
            return
        if not method.passive and method.queue:
            if method.queue.startswith("amq."):
                # RabbitMQ's check_name refuses every active declare of a reserved name, even of a
                # queue that exists (a server-named amq.gen-... one redeclared by its name)
                raise errors.access_refused(f"queue name '{method.queue}' contains reserved prefix 'amq.*'")
            self._check("configure", "queue", method.queue)
        queue = self.vhost.declare_queue(
            method.queue, owner=self, now=self.now, passive=method.passive, durable=method.durable,
            exclusive=method.exclusive, auto_delete=method.auto_delete, arguments=method.arguments)
        self.last_queue = queue.name
        if not method.nowait:
            self.conn.send_method(ch.id, m.QueueDeclareOk(queue=queue.name, message_count=queue.messages_ready,
                                                          consumer_count=queue.consumer_count))

    def _queue_bind(self, ch: ChannelSession, method: m.QueueBind) -> None:
        queue = method.queue or self.last_queue
        self._check("write", "queue", queue)
        self._check("read", "exchange", method.exchange)
        q = self.vhost.get_queue(queue)
        self.vhost.check_exclusive(q, self)
        self.vhost.bind(method.exchange, queue, DestinationKind.QUEUE, method.routing_key, method.arguments)
        if not method.nowait:
            self.conn.send_method(ch.id, m.QueueBindOk())

    def _queue_unbind(self, ch: ChannelSession, method: m.QueueUnbind) -> None:
        queue = method.queue or self.last_queue
        self._check("write", "queue", queue)
        self._check("read", "exchange", method.exchange)
        existing = self.vhost.queues.get(queue)
        if existing is not None:  # a queue already gone is unbind-ok (see VHost.unbind)
            self.vhost.check_exclusive(existing, self)  # as for bind: 405 for others
        self.vhost.unbind(method.exchange, queue, DestinationKind.QUEUE, method.routing_key, method.arguments)
        self.conn.send_method(ch.id, m.QueueUnbindOk())

    def _queue_purge(self, ch: ChannelSession, method: m.QueuePurge) -> None:
        queue = method.queue or self.last_queue
        self._check("read", "queue", queue)
        before = self.broker.store_ticket
        count = self.vhost.purge_queue(queue, self)
        if method.nowait:
            return
        if self.broker.store_ticket > before:
            # purge-ok only once the purge record is fsynced: a crash must not bring them back
            self.pending_commits.append((ch.id, self.broker.store_ticket, m.QueuePurgeOk(message_count=count)))
        else:
            self.conn.send_method(ch.id, m.QueuePurgeOk(message_count=count))

    def _queue_delete(self, ch: ChannelSession, method: m.QueueDelete) -> None:
        queue = method.queue or self.last_queue
        self._check("configure", "queue", queue)
        count = self.vhost.delete_queue(queue, owner=self, if_unused=method.if_unused,
                                        if_empty=method.if_empty)
        if not method.nowait:
            self.conn.send_method(ch.id, m.QueueDeleteOk(message_count=count))

    def _confirm_select(self, ch: ChannelSession, method: m.ConfirmSelect) -> None:
        if ch.tx:
            raise errors.precondition_failed("cannot switch from tx to confirm mode")
        ch.confirm = True
        if not method.nowait:
            self.conn.send_method(ch.id, m.ConfirmSelectOk())

    def _tx_select(self, ch: ChannelSession, method: m.TxSelect) -> None:
        if ch.confirm:
            raise errors.precondition_failed("cannot switch from confirm to tx mode")
        ch.tx = True
        self.conn.send_method(ch.id, m.TxSelectOk())

    def _tx_commit(self, ch: ChannelSession, method: m.TxCommit) -> None:
        if not ch.tx:
            raise errors.precondition_failed("channel is not transactional")
        before = ch.last_ticket
        ch.tx_commit()
        if ch.last_ticket > before and self.broker.store_enabled:
            # the whole transaction is on disk with one group fsync before commit-ok goes out
            self.pending_commits.append((ch.id, ch.last_ticket, m.TxCommitOk()))
        else:
            self.conn.send_method(ch.id, m.TxCommitOk())

    def _tx_rollback(self, ch: ChannelSession, method: m.TxRollback) -> None:
        if not ch.tx:
            raise errors.precondition_failed("channel is not transactional")
        ch.tx_rollback()
        self.conn.send_method(ch.id, m.TxRollbackOk())

    def _recover(self, ch: ChannelSession, method: m.BasicRecover) -> None:
        if not method.requeue:
            # RabbitMQ does not redeliver to the original consumer: a connection error, not a
            # silent requeue the client did not ask for
            raise ConnectionException(ReplyCode.NOT_IMPLEMENTED, "NOT_IMPLEMENTED - requeue=false")
        ch.requeue_all()
        if type(method) is m.BasicRecover:
            self.conn.send_method(ch.id, m.BasicRecoverOk())

    # ------------------------------------------------------------------ cleanup
    def _drop_channel(self, channel_id: int) -> None:
        channel = self.channels.pop(channel_id, None)
        if channel is not None:
            channel.close()

    def cleanup(self) -> None:
        """Connection gone or closing: requeue everything unacked, drop exclusive queues."""
        if self._cleaned:
            return
        self._cleaned = True
        for channel_id in list(self.channels):
            self._drop_channel(channel_id)
        self.broker.observers.discard(self)
        self.broker.connections.pop(self.id, None)
        if self.vhost is not None:
            for name in self.vhost.owned_queues(self):
                self.vhost.delete_queue(name)


def _is_loopback(host: str) -> bool:
    try:
        return ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


_CONNECTION_HANDLERS: dict[type, Callable[[Session, Any], None]] = {
    m.ConnectionStartOk: Session._start_ok,
    m.ConnectionTuneOk: Session._tune_ok,
    m.ConnectionOpen: Session._open,
    m.ConnectionUpdateSecret: Session._update_secret,
}

_CHANNEL_HANDLERS: dict[type, Callable[[Session, ChannelSession, Any], None]] = {
    m.ExchangeDeclare: Session._exchange_declare,
    m.ExchangeDelete: Session._exchange_delete,
    m.ExchangeBind: Session._exchange_bind,
    m.ExchangeUnbind: Session._exchange_unbind,
    m.QueueDeclare: Session._queue_declare,
    m.QueueBind: Session._queue_bind,
    m.QueueUnbind: Session._queue_unbind,
    m.QueuePurge: Session._queue_purge,
    m.QueueDelete: Session._queue_delete,
    m.BasicQos: lambda s, ch, meth: ch.qos(meth),
    m.BasicConsume: lambda s, ch, meth: ch.consume(meth),
    m.BasicCancel: lambda s, ch, meth: ch.cancel(meth),
    m.BasicGet: lambda s, ch, meth: ch.get(meth),
    m.BasicAck: lambda s, ch, meth: ch.ack(meth),
    m.BasicNack: lambda s, ch, meth: ch.nack(meth.delivery_tag, meth.multiple, meth.requeue),
    m.BasicReject: lambda s, ch, meth: ch.nack(meth.delivery_tag, False, meth.requeue),
    m.BasicRecover: Session._recover,
    m.BasicRecoverAsync: Session._recover,
    m.ChannelFlow: lambda s, ch, meth: ch.flow(meth.active),
    m.ConfirmSelect: Session._confirm_select,
    m.TxSelect: Session._tx_select,
    m.TxCommit: Session._tx_commit,
    m.TxRollback: Session._tx_rollback,
}
