"""One AMQP connection as the broker sees it: applies protocol events to the broker.

Rule 1: the ``Session`` owns the connection's channels, its lifecycle (``Lifecycle``, written only
by ``_enter``) and its list of parts, each a small module for one concern: ``Handshake`` (login,
tune, open), ``Declarations`` (declare, bind, purge, delete), ``ConfirmsAndTx`` (replies that wait
for the store) and ``ReadPause`` (read_pause.py: whether the shell reads more). What the parts and
the channels share (identity, counters, the batch's ``now``, the permission cache) is the
``SessionState`` it makes (``state.py``, ``self.ctx``); the broker, the HTTP API and the shell read
that through the read-only properties below. The parts and the channels import none of this module: each takes
the ``SessionState`` and, from here, the siblings it calls. The network shell owns the socket and
calls ``handle``, ``on_drain``, ``connection_lost`` and ``close``, and reads ``state``.
Rule 2: everything here is synchronous: a batch of events is applied atomically at the ``now`` the
shell passes and leaves its replies in the ``AMQPConnection`` buffer for the writer.
Rule 3: the session asks the broker to change what the broker owns (``register_connection``,
``unregister_connection``) and the delivery owner to change queues; it writes neither directly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, cast

from headrace.queues import Destination
from headrace.server.amqp.connection import AMQPConnection
from headrace.server.amqp.errors import AMQPError, ChannelException, ConnectionException
from headrace.server.amqp.events import (
    BadProtocolHeader,
    ChannelClosed,
    ChannelOpenRequested,
    ConnectionClosed,
    ConnectionCloseOk,
    ContentReceived,
    Event,
    MethodReceived,
)
from headrace.server.amqp import methods as m
from headrace.server.amqp.spec import ReplyCode
from headrace.server.auth import User
from headrace.server.broker import Broker, VHost

from .consume import CHANNEL_METHODS
from .publish import publish, publish_run, run_end
from .channel import ChannelSession
from .consumer_timeout import TIMED_OUT, expire
from .confirms import ConfirmsAndTx
from .declare import Declarations
from .handshake import Handshake
from .lifecycle import LIVE, Lifecycle
from .read_pause import ReadPause
from .state import SessionState, SocketCounters

__all__ = ["Session", "SocketCounters"]  # SocketCounters: state.py's, named here for the shell

log = logging.getLogger("headrace.session")


class Session:
    """The connection's channels, lifecycle and parts (module docstring); what they share is
    ``ctx``, a ``SessionState``."""

    def __init__(self, broker: Broker, conn: AMQPConnection, *, peer: tuple[str, int] = ("127.0.0.1", 0),
                 local: tuple[str, int] = ("127.0.0.1", 0), ssl: bool = False,
                 loopback_users: Iterable[str] = ("guest",), max_unconfirmed: int = 10_000,
                 wake: Callable[[], None]) -> None:
        self.broker = broker
        self.conn = conn
        self.wake = wake  # the shell's handler: output is waiting
        self.ctx = ctx = SessionState(broker, conn, peer=peer, local=local, ssl=ssl, loopback_users=loopback_users,
                                      wake=wake, arm_deadline=self.arm_deadline)
        self.state = Lifecycle.HANDSHAKE
        self.channels: dict[int, ChannelSession] = {}
        # the parts take the shared state and what they need of each other, handed over here
        self.perms = perms = ctx.perms
        self.confirms = ConfirmsAndTx(ctx, self.close_channel, lambda: self.broker.wait_for_sync(self))
        self.read_pause = gate = ReadPause(ctx, self.confirms, max_unconfirmed)
        self.paused_otherwise = gate.paused_otherwise  # the shell's questions, the gate's answers
        self.held_by = gate.held_by
        self.handshake = Handshake(ctx, self)
        self.declares = Declarations(ctx, perms, self.confirms.after_fsync)
        self.alarms_changed = ctx.alarms_changed  # BrokerObserver's alarm notice is the state's
        self.parts = (self.handshake, self.declares, self.confirms)
        self._connection_handlers: dict[type, Callable[[Any], None]] = {}
        self._channel_handlers: dict[type, Callable[[ChannelSession, Any], None]] = dict(CHANNEL_METHODS)
        for part in self.parts:
            self._connection_handlers.update(part.connection_handlers())
            self._channel_handlers.update(part.channel_handlers())

    # ------------------------------------------------------------------ lifecycle
    def _enter(self, state: Lifecycle) -> None:
        """The one place the lifecycle changes, forward only; leaving HANDSHAKE/OPEN drops the
        connection's broker state."""
        before = self.state
        if _ORDER[state] <= _ORDER[before]:
            return
        self.state = state
        if before in LIVE and state not in LIVE:
            self._cleanup()

    def in_handshake(self) -> bool:
        return self.state is Lifecycle.HANDSHAKE

    def register(self, user: User) -> None:
        """The handshake's vhost checks passed: the broker lists this connection (530 at a limit)."""
        self.broker.register_connection(self, user)

    def opened(self) -> None:
        self._enter(Lifecycle.OPEN)

    def arm_deadline(self, when: float) -> None:
        """This connection's consumer-timeout deadline comes at ``when`` or sooner: it sits in the
        broker's one deadline heap with this session as its key, which calls ``deadline_due``."""
        self.broker.delivery.deadlines.arm_earlier(self, when)

    # ------------------------------------------------------------------ the shared state, read-only
    @property
    def id(self) -> int:
        return self.ctx.id

    @property
    def peer(self) -> tuple[str, int]:
        return self.ctx.peer

    @property
    def local(self) -> tuple[str, int]:
        return self.ctx.local

    @property
    def ssl(self) -> bool:
        return self.ctx.ssl

    @property
    def io(self) -> SocketCounters:
        """The socket's counters, which the shell adds to (the object is shared, not replaced)."""
        return self.ctx.io

    @property
    def user(self) -> User | None:
        return self.ctx.user

    @property
    def vhost(self) -> VHost:
        return self.ctx.vhost

    @property
    def client_properties(self) -> dict[str, Any]:
        return self.ctx.client_properties

    @property
    def connected_at(self) -> float:
        return self.ctx.connected_at

    @property
    def now(self) -> float:
        return self.ctx.now

    @property
    def published(self) -> int:
        return self.ctx.published

    @property
    def acked(self) -> int:
        return self.ctx.acked

    @property
    def tx_bytes(self) -> int:
        return self.ctx.tx_bytes

    @property
    def deferred(self) -> list[tuple[int, m.Method]]:
        return self.ctx.deferred

    @property
    def reading(self) -> bool:
        """The shell reads new work only while the connection is in its handshake or open."""
        return self.state in LIVE

    @property
    def closed(self) -> bool:
        return self.state is Lifecycle.CLOSED

    @property
    def unconfirmed(self) -> int:
        return self.confirms.unconfirmed

    # ------------------------------------------------------------------ shell interface
    @property
    def read_paused(self) -> bool:
        """Stop reading this socket (``ReadPause.paused``, read_pause.py)."""
        return self.read_pause.paused()

    @property
    def saturating(self) -> list[Destination]:
        return self.read_pause.saturating

    def handle(self, events: list[Event], now: float) -> None:
        """Apply one batch of protocol events at time ``now``."""
        ctx = self.ctx
        ctx.now = now
        if not ctx.connected_at:
            ctx.connected_at = now
        delivery = self.broker.delivery
        saturation = delivery.saturation
        if saturation.touched:
            saturation.touched.clear()  # publishes made outside a session batch hold nobody
        batch = delivery.begin_batch()
        try:
            self._events(events)
        finally:
            if batch:
                delivery.end_batch(now)
        if saturation.touched:
            self.read_pause.batch_published()
        if batch and self.broker.firehose.pending:  # after the check: trace queues hold no publisher
            self.broker.publish_traces(now)
        if self.confirms.channels:
            self.confirms.release()
        if self.conn.bytes_pending:
            self.wake()

    def _events(self, events: list[Event]) -> None:
        ctx = self.ctx
        count = len(events)
        i = 0
        while i < count:
            event = events[i]
            i += 1
            # ``type(event) is``: one exact-type test per branch, as cheap as the comparison of a
            # stored type, and mypy narrows the event with it (no isinstance walk of the MRO)
            try:
                if type(event) is ContentReceived:
                    channel = self.channels.get(event.channel)
                    if channel is not None:
                        end = run_end(events, event, i - 1, count) if i < count else i
                        if end > i:  # a run of two or more (a failure inside closes the channel: the
                            # rest of the run would find it gone anyway); _run_end took only publishes
                            run = cast("list[ContentReceived]", events[i - 1:end])
                            i = end
                            publish_run(channel, run)
                        else:
                            publish(channel, event)
                elif type(event) is MethodReceived:
                    self._method(event.channel, event.method)
                elif type(event) is ChannelOpenRequested:
                    if self.ctx.vhost is None:
                        raise ConnectionException(ReplyCode.COMMAND_INVALID, "COMMAND_INVALID - connection not open")
                    user = self.ctx.user
                    assert user is not None  # set with the vhost, at connection.open
                    refused = self.broker.channel_refused(user.name, self)  # the user's max-channels
                    if refused is not None:  # RabbitMQ names no failed method here (class and method 0)
                        raise ConnectionException(ReplyCode.NOT_ALLOWED, f"NOT_ALLOWED - {refused}")
                    self.channels[event.channel] = ChannelSession(self.ctx, event.channel, self.perms, self.confirms)
                    self.conn.accept_channel(event.channel)  # open-ok only once every check passed
                    self.broker.churn("channel_created")
                    self.broker.open_channels += 1
                elif type(event) is ChannelClosed:
                    self._drop_channel(event.channel)
                elif type(event) is ConnectionClosed:
                    self._enter(Lifecycle.CLOSED if event.by_peer else Lifecycle.CLOSING)
                elif type(event) is ConnectionCloseOk or type(event) is BadProtocolHeader:
                    self._enter(Lifecycle.CLOSED)
            except ChannelException as exc:
                channel_id = getattr(event, "channel", 0)
                _fill_ids(exc, event)
                if channel_id == 0:
                    self.close(ConnectionException(exc.reply_code, exc.reply_text, exc.class_id, exc.method_id))
                else:
                    self.close_channel(channel_id, exc)
            except ConnectionException as exc:
                _fill_ids(exc, event)
                self.close(exc)
            if ctx.deferred:
                self.flush_deferred()

    def flush_deferred(self) -> None:
        ctx = self.ctx
        deferred, ctx.deferred = ctx.deferred, []
        for channel_id, method in deferred:
            if self.conn.is_channel_open(channel_id):
                self.conn.send_method(channel_id, method)

    def close(self, exc: ConnectionException) -> None:
        """Send connection.close and drop the connection's state; the shell reads only close-ok now."""
        self.conn.close(exc)
        if self.state in LIVE:
            self._enter(Lifecycle.CLOSING)

    def close_channel(self, channel_id: int, exc: ChannelException) -> None:
        self.conn.close_channel(channel_id, exc)
        self._drop_channel(channel_id)

    def close_by_admin(self, reason: str) -> None:
        """Management close: connection.close 320 to the client, state dropped now."""
        self.close(ConnectionException(ReplyCode.CONNECTION_FORCED, f"CONNECTION_FORCED - {reason}"))
        self.wake()

    def connection_lost(self, now: float) -> None:
        self.ctx.now = now
        self._enter(Lifecycle.CLOSED)

    def on_drain(self, now: float) -> None:
        """The writer emptied the outgoing buffer: consumers that stopped on it may take again."""
        ctx = self.ctx
        if not ctx.outbox_full:
            return
        ctx.now = now
        ctx.outbox_full = False
        delivery = self.broker.delivery
        for channel in list(self.channels.values()):
            delivery.consumer_ready(ctx.vhost, [q for q, _ in channel.consumers.values()], now)
        if self.conn.bytes_pending:
            self.wake()

    def deadline_due(self, now: float) -> None:
        """The consumer timeout (the one deadline a connection arms, ``arm_deadline``): channels
        holding a delivery unacked for longer are closed with RabbitMQ's 406 and the message goes
        back to its queue; the deadline moves to the earliest delivery left that could time out."""
        if self.state not in LIVE:
            return
        self.ctx.now = now
        earliest: float | None = None
        cancels = self.broker.compat.timeout_cancels
        for channel in list(self.channels.values()):
            due = expire(channel, now) if cancels else channel.ack_due()
            if due is None:
                continue
            if due > now:  # (TIMED_OUT is -1)
                earliest = due if earliest is None else min(earliest, due)
                continue
            acks = channel.acks
            assert acks is not None  # a channel has a due only with the timeout on
            exc = ChannelException(
                ReplyCode.PRECONDITION_FAILED,
                f"PRECONDITION_FAILED - delivery acknowledgement on channel {channel.id} timed out. "
                f"Timeout value used: {round(acks.limit * 1000)} ms. This timeout value can be configured, see "
                "consumers doc guide to learn more")
            log.warning("consumer timeout on channel %d of connection %d", channel.id, self.id)
            self.close_channel(channel.id, exc)
            self.wake()
        if earliest is not None:
            self.arm_deadline(earliest)

    # ------------------------------------------------------------------ BrokerObserver
    def store_synced(self, ticket: int) -> None:
        self.confirms.store_synced(ticket)

    def permissions_changed(self) -> None:
        """Called by the broker on any user/permission/vhost change: drop cached decisions."""
        self.perms.changed()

    # ------------------------------------------------------------------ methods
    def _method(self, channel_id: int, method: m.Method) -> None:
        if channel_id == 0:
            handler = self._connection_handlers.get(type(method))
            if handler is None:
                raise ConnectionException(ReplyCode.COMMAND_INVALID,
                                          f"COMMAND_INVALID - unexpected method {method.NAME}")
            handler(method)
            return
        channel = self.channels.get(channel_id)
        if channel is None:
            return  # the channel is being closed by us: the protocol already discards its frames
        channel_handler = self._channel_handlers.get(type(method))
        if channel_handler is None:
            raise ConnectionException(ReplyCode.COMMAND_INVALID,
                                      f"COMMAND_INVALID - method {method.NAME} not allowed here")
        channel_handler(channel, method)

    # ------------------------------------------------------------------ cleanup
    def _drop_channel(self, channel_id: int) -> None:
        channel = self.channels.pop(channel_id, None)
        if channel is not None:
            self.broker.churn("channel_closed")
            self.broker.open_channels -= 1
            channel.close()

    def _cleanup(self) -> None:
        """Connection gone or closing: requeue everything unacked, drop exclusive queues."""
        for channel_id in list(self.channels):
            self._drop_channel(channel_id)
        self.broker.delivery.deadlines.disarm(self)
        self.broker.unregister_connection(self)
        vhost = self.ctx.vhost
        if vhost is not None:  # the state is the owner of the connection's exclusive queues
            for name in vhost.owned_queues(self.ctx):
                vhost.delete_queue(name)



_ORDER = {state: i for i, state in enumerate(Lifecycle)}


def _fill_ids(exc: AMQPError, event: Event) -> None:
    method = getattr(event, "method", None)
    if method is not None and not exc.class_id:
        exc.class_id = method.CLASS_ID
        exc.method_id = method.METHOD_ID
