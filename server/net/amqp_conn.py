"""One task per AMQP connection: reader, writer and heartbeat in a child nursery.

Rule 1: only the writer calls ``send_all`` (trio's one-sender rule); everything else appends to the
``AMQPConnection`` buffer and calls ``wake``.
Rule 2: the reader reads again only after the previous batch was fully applied, and not at all
while the session says ``read_paused`` (alarm, too many unconfirmed publishes): TCP then slows the
publisher. Handling is synchronous, so one read -> one atomic batch of broker work.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import trio

from headrace.server.amqp.connection import AMQPConnection
from headrace.server.amqp.errors import ConnectionException
from headrace.server.amqp.spec import ReplyCode
from headrace.server.broker import Broker
from headrace.server.config import Settings
from headrace.server.session import Lifecycle, Session

from .gate import Gate

__all__ = ["READ_SIZE", "AMQPConnectionHandler", "server_properties"]

log = logging.getLogger("headrace.amqp")

# One receive takes up to 256 KiB: enough for ~1000 small publishes per batch, small enough that a
# batch is applied in well under a millisecond per connection and others get their turn.
READ_SIZE = 256 * 1024
# After we send connection.close, how long the peer has to answer close-ok before the socket goes.
CLOSE_TIMEOUT = 3.0


def server_properties(version: str) -> dict[str, Any]:
    return {
        "product": "headrace",
        "version": version,
        "platform": "Python/trio",
        "copyright": "the headrace authors",
        "information": "AMQP 0-9-1 broker, https://github.com/headrace",
        "capabilities": {
            "publisher_confirms": True,
            "exchange_exchange_bindings": True,
            "basic.nack": True,
            "consumer_cancel_notify": True,
            "connection.blocked": True,
            "consumer_priorities": True,
            "authentication_failure_close": True,
            "per_consumer_qos": True,
            "direct_reply_to": True,
        },
    }


class AMQPConnectionHandler:
    def __init__(self, stream: trio.abc.Stream, broker: Broker, settings: Settings, gate: Gate,
                 peer: tuple[str, int], version: str, after_batch: Callable[[], None] = lambda: None) -> None:
        self.stream = stream
        self.after_batch = after_batch
        self.broker = broker
        self.settings = settings
        self.gate = gate
        self.conn = AMQPConnection(
            server_properties=server_properties(version),
            channel_max=settings.channel_max,
            frame_max=settings.frame_max,
            heartbeat=settings.heartbeat,
            max_message_size=settings.max_message_size,
        )
        self._wake_event = trio.Event()
        self._woken = False
        self.session = Session(broker, self.conn, peer=peer, loopback_users=settings.loopback_users,
                               max_unconfirmed=settings.max_unconfirmed_per_connection, wake=self.wake)
        self.cancel_scope: trio.CancelScope | None = None
        self._closed = trio.Event()

    def wake(self) -> None:
        if not self._woken:
            self._woken = True
            self._wake_event.set()

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self.cancel_scope = nursery.cancel_scope
                nursery.start_soon(self._writer)
                nursery.start_soon(self._heartbeat)
                await self._reader()
                # reader finished (peer closed, or close handshake over): let the writer flush
                self.wake()
                with trio.move_on_after(CLOSE_TIMEOUT):
                    await self._closed.wait()
                nursery.cancel_scope.cancel()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self.session.connection_lost(time.time())
            with trio.CancelScope(shield=True):
                with trio.move_on_after(1):
                    await self.stream.aclose()

    async def _reader(self) -> None:
        conn = self.conn
        session = self.session
        receive = self.stream.receive_some
        with trio.move_on_after(self.settings.handshake_timeout) as handshake:
            await self._read_until_open()
        if handshake.cancelled_caught:
            log.info("handshake timeout for %s", session.peer)
            session.close(ConnectionException(ReplyCode.CONNECTION_FORCED, "CONNECTION_FORCED - handshake timeout"))
            self.wake()
            return
        while session.reading:
            if session.read_paused:
                await self._wait_unpaused()
                continue
            data = await receive(READ_SIZE)
            if not data:
                return
            session.handle(conn.receive_data(data), time.time())
            self.after_batch()
        # we sent connection.close: read until close-ok, for a bounded time
        with trio.move_on_after(CLOSE_TIMEOUT):
            while not session.closed:
                data = await receive(READ_SIZE)
                if not data:
                    return
                session.handle(conn.receive_data(data), time.time())

    async def _read_until_open(self) -> None:
        session = self.session
        conn = self.conn
        while session.state is Lifecycle.HANDSHAKE:
            data = await self.stream.receive_some(READ_SIZE)
            if not data:
                session.connection_lost(time.time())
                return
            session.handle(conn.receive_data(data), time.time())
            self.after_batch()

    async def _wait_unpaused(self) -> None:
        while self.session.read_paused and not self.session.closed:
            await self.gate.wait_changed()

    async def _writer(self) -> None:
        conn = self.conn
        session = self.session
        send_all = self.stream.send_all
        try:
            while True:
                await self._wake_event.wait()
                self._wake_event = trio.Event()
                self._woken = False
                if session.deferred:
                    session.flush_deferred()
                data = conn.data_to_send()
                if data:
                    await send_all(data)
                    if not conn.bytes_pending:
                        session.on_drain(time.time())
                if session.closed and not conn.bytes_pending:
                    return
        finally:
            self._closed.set()

    async def _heartbeat(self) -> None:
        while self.conn.heartbeat == 0 or self.session.vhost is None:
            await trio.sleep(1)
            if self.session.closed:
                return
        interval = max(self.conn.heartbeat / 2, 0.5)
        while not self.session.closed:
            await trio.sleep(interval)
            if self.session.read_paused:
                self.conn.peer_alive()  # we are not reading: its heartbeats wait in the socket
            if not self.conn.tick(time.monotonic()):
                log.info("missed heartbeats from %s, closing", self.session.peer)
                self.session.connection_lost(time.time())
                if self.cancel_scope is not None:
                    self.cancel_scope.cancel()
                return
            if self.conn.bytes_pending:
                self.wake()

    def force_close(self, code: ReplyCode, text: str) -> None:
        """Shutdown: tell the client with connection.close and stop reading."""
        if self.session.closed:
            if self.cancel_scope is not None:
                self.cancel_scope.cancel()
            return
        self.session.close(ConnectionException(code, text))
        self.wake()
