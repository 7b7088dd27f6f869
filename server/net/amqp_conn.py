"""One task per AMQP connection: reader, writer and heartbeat in a child nursery.

Rule 1: only the writer calls ``send_all`` (trio's one-sender rule); everything else appends to the
``AMQPConnection`` buffer and calls ``wake``. While the writer is parked with nothing to do, ``wake``
hands the connection to the shared ``Sender`` (sender.py) instead, whose ``send_now`` makes one
non-blocking write and gives whatever else there is (the rest of a full socket, a reply waiting for
a definitions fsync, a close) to the writer: one writer at a time either way.
Rule 2: the reader reads again only after the previous batch was fully applied, and not at all
while the session says ``read_paused`` (alarm, too many unconfirmed publishes, a saturated queue
it publishes into: ``broker/saturation.py``): TCP then slows the publisher. Handling is
synchronous, so one read -> one atomic batch of broker work.
Rule 3: every close ends in bounded time. After a connection.close we sent (from a batch, the
management API or shutdown) the reader waits ``CLOSE_TIMEOUT`` for close-ok; after the peer's, it
waits as long for the peer to hang up first. The heartbeat task runs only for a connection that
negotiated heartbeats, from connection.open-ok on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from headrace.server.amqp.connection import AMQPConnection, ConnectionState
from headrace.server.amqp.errors import ConnectionException
from headrace.server.amqp.spec import ReplyCode
from headrace.server.broker import Broker
from headrace.server.config import Settings
from headrace.server.session import Lifecycle, Session

from .gate import Gate
from .sender import Sender
from .socket_io import SocketIO, stream_io

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
                 peer: tuple[str, int], version: str, *, local: tuple[str, int] = ("127.0.0.1", 0),
                 after_batch: Callable[[], int], on_header: Callable[[], None], on_authenticated: Callable[[], None],
                 definitions_synced: Callable[[int], Awaitable[None]], on_read: Callable[[int], None],
                 on_first_hold: Callable[[], None], grow: Callable[[int, int], bool] | None = None,
                 sender: Sender | None = None, pending_output: dict[Any, None] | None = None) -> None:
        """What the handler calls in the app (``after_batch`` ... ``on_first_hold``) is given here,
        with no defaults: one the app forgot is a TypeError, not a step silently skipped."""
        self.stream = stream
        # reads and writes: a plain TCP socket's fast path, or the stream itself (TLS)
        socket_io = stream_io(stream)
        self.io: SocketIO | trio.abc.Stream = socket_io or stream
        # output written by the shared sender while the writer task is parked (plain sockets only)
        self._socket_io = socket_io if sender is not None else None
        self._sender = sender if socket_io is not None else None
        self._writer_parked = False
        # the handlers that may have output queued, shared by the shell (MemoryWatch.pending_output): this one
        # is in it from a wake until its writes leave nothing pending, so the memory alarm's sample
        # reads those alone instead of every connection (alarms.held_memory)
        self._pending_output: dict[Any, None] = {} if pending_output is None else pending_output
        # the first time a saturated queue holds this publisher (app.py shrinks its receive window)
        self.on_first_hold: Callable[[], None] | None = on_first_hold
        # told the bytes of each read and the publishes so far while the receive window may grow,
        # until it says it is done or a saturated queue holds this connection (socket_bounds.Window)
        self.grow = grow
        # after each batch: its durable definition changes are handed to the flusher, and the
        # replies wait (``_definitions_ticket``) until ``definitions_synced`` says they are on disk
        self.after_batch = after_batch
        self.definitions_synced = definitions_synced
        self._definitions_ticket = 0
        self.on_read = on_read  # bytes applied after the handshake, for the memory alarm (alarms.py)
        self.on_header = on_header
        self.on_authenticated = on_authenticated
        self.broker = broker
        self.settings = settings
        self.gate = gate
        self.conn = AMQPConnection(
            server_properties=server_properties(version),
            channel_max=settings.network.channel_max,
            frame_max=settings.network.frame_max,
            heartbeat=settings.network.heartbeat,
            max_message_size=settings.max_message_size,
        )
        self._wake_event = trio.Event()
        self._woken = False
        self.session = Session(broker, self.conn, peer=peer, local=local,
                               ssl=isinstance(stream, trio.SSLStream), loopback_users=settings.auth.loopback_users,
                               max_unconfirmed=settings.limits.max_unconfirmed_per_connection, wake=self.wake)
        self.cancel_scope: trio.CancelScope | None = None
        self._closed = trio.Event()
        self._stop_reading = False  # EOF read, or the peer is not worth waiting for any more
        self._open_reads: trio.CancelScope | None = None  # the reader's loop while the connection is open
        self._tasks: trio.Nursery | None = None  # the connection's tasks (``run``)

    def wake(self) -> None:
        """The session queued output: the sender writes it in its next round, or the writer task
        when it is not parked (it sends everything queued once its current send is done)."""
        if not self._woken:
            self._woken = True
            self._pending_output[self] = None
            if self._writer_parked and self._sender is not None:
                self._sender.want(self)
            else:
                self._wake_event.set()

    @property
    def pending_bytes(self) -> int:
        """Output queued and not yet handed to the socket (the memory alarm's sample reads it)."""
        return self.conn.bytes_pending

    def send_now(self) -> None:
        """The sender's round: one non-blocking write of everything queued, when that is all there
        is to do. A reply waiting for a definitions fsync, a closing session, a socket that does
        not take it all, and a writer no longer parked go to the writer task."""
        session = self.session
        io = self._socket_io
        if not self._writer_parked or io is None or self._definitions_ticket or session.closed \
                or not session.reading:
            self._wake_event.set()  # ``_woken`` stays set: the writer task has it now
            return
        self._woken = False
        if session.deferred:
            session.flush_deferred()
        conn = self.conn
        data = conn.data_to_send()
        if not data:
            return
        sent = io.send_now(data)
        partial = sent < len(data)
        if partial:
            conn.unsent(data[sent:])
        self._sent(sent)  # with a partial write, bytes are still pending: no drain yet
        if partial:
            self._woken = True
            self._wake_event.set()  # the writer waits until the socket takes the rest

    def _sent(self, nbytes: int) -> None:
        """One write went out (by the writer task or the sender): count it, and once nothing is left
        to send, let consumers that stopped on a full buffer take again."""
        stats = self.session.io
        stats.send_oct += nbytes
        stats.send_cnt += 1
        if not self.conn.bytes_pending:
            if not self._woken:  # woken since the write began: more may be queued, the writer sends it
                self._pending_output.pop(self, None)
            self.session.on_drain(time.time())

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self.cancel_scope = nursery.cancel_scope
                self._tasks = nursery
                nursery.start_soon(self._writer)
                await self._reader()
                # over for the broker: exclusive queues and unacked deliveries are released now, not
                # when the socket is gone (a client reconnecting at once must find them free)
                self.session.connection_lost(time.time())
                self.wake()
                with trio.move_on_after(CLOSE_TIMEOUT):
                    if not self._stop_reading:
                        # close handshake done: the peer closes first. Closing with its frames unread
                        # would send a reset that may destroy our close-ok before the client reads it
                        await self._discard_until_eof()
                    await self._closed.wait()  # the writer flushed close-ok / our last frames
                nursery.cancel_scope.cancel()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self.session.connection_lost(time.time())
            with trio.CancelScope(shield=True):
                with trio.move_on_after(1):
                    await self.stream.aclose()
            self._pending_output.pop(self, None)  # nothing of it is sent or held any more

    async def _receive(self) -> bytes:
        data = bytes(await self.io.receive_some(READ_SIZE))  # bytes already (sockets, TLS): no copy
        if not data:
            self._stop_reading = True
        io = self.session.io
        io.recv_oct += len(data)
        io.recv_cnt += 1
        return data

    async def _discard_until_eof(self) -> None:
        while await self._receive():
            pass

    async def _reader(self) -> None:
        """Apply what the peer sends until the connection is over for the broker: peer gone, close
        handshake done (``session.closed``) or given up on (``_stop_reading`` set then: the
        socket is not drained)."""
        conn = self.conn
        session = self.session
        receive = self._receive
        connected = trio.current_time()
        with trio.move_on_after(self.settings.network.header_timeout):
            await self._read_while(lambda: conn.state is ConnectionState.AWAIT_HEADER)
        if conn.state is ConnectionState.AWAIT_HEADER or not session.reading:
            # silent (a slowloris holds sockets this way), gone, or a wrong header: ours is queued,
            # and the spec has us hang up at once
            self._stop_reading = True
            return
        self.on_header()
        with trio.move_on_at(connected + self.settings.network.handshake_timeout) as handshake:
            await self._read_while(lambda: session.state is Lifecycle.HANDSHAKE)
        if self._stop_reading:
            return
        if handshake.cancelled_caught:
            log.info("handshake timeout for %s", session.peer)
            session.close(ConnectionException(ReplyCode.CONNECTION_FORCED, "CONNECTION_FORCED - handshake timeout"))
            self._stop_reading = True  # not worth waiting for: the socket goes once the writer flushed
            return
        if session.state is Lifecycle.OPEN and conn.heartbeat and self._tasks is not None:
            self._tasks.start_soon(self._heartbeat)  # as negotiated in tune-ok: 0 means no timer at all
        # a close made elsewhere (the management API, shutdown) ends a read or a paused wait at once:
        # the writer cancels this scope when it finds the session no longer reading
        with trio.CancelScope() as self._open_reads:
            while session.reading:
                if session.read_paused:
                    await self._wait_unpaused()
                    continue
                data = await receive()
                if not data:
                    return
                self._apply(data)
                self.on_read(len(data))
                if self.grow is not None and (session.saturating or not self.grow(len(data), session.published)):
                    self.grow = None
        self._open_reads = None
        if session.closed:
            return  # the peer's connection.close, answered: it hangs up first (``run`` drains till then)
        # we sent connection.close: read until close-ok (the codec discards every other frame), for a
        # bounded time; then we hang up, as close-ok tells its recipient to release the socket
        with trio.move_on_after(CLOSE_TIMEOUT):
            while not session.closed:
                data = await receive()
                if not data:
                    return
                session.handle(conn.receive_data(data), time.time())
        self._stop_reading = True

    def _apply(self, data: bytes) -> None:
        """One read applied as one batch. What it queued for any connection (deliveries to
        consumers, replies) is written at its end by this task, through the shared sender, instead
        of a scheduler round later by the sender's (sender.py)."""
        sender = self._sender  # None for TLS: the writer tasks send
        if sender is not None:
            sender.hold()
        try:
            self.session.handle(self.conn.receive_data(data), time.time())
            self._batch_done()
        finally:
            if sender is not None:
                sender.release()

    def _batch_done(self) -> None:
        ticket = self.after_batch()
        if ticket:
            self._definitions_ticket = ticket

    async def _read_while(self, waiting: Callable[[], bool]) -> None:
        """The handshake: read and apply batches while ``waiting()`` holds and nothing closes."""
        session = self.session
        while waiting() and session.reading:
            data = await self._receive()
            if not data:
                return
            self._apply(data)
            if session.user is not None:
                self.on_authenticated()

    async def _wait_unpaused(self) -> None:
        if self.on_first_hold is not None and self.session.saturating:
            self.on_first_hold()
            self.on_first_hold = None
        session = self.session
        while session.read_paused and session.reading:
            # nothing but a saturated queue holds it: that queue's release, not every broadcast
            await self.gate.wait_changed(None if session.paused_otherwise() else session.held_by())

    async def _writer(self) -> None:
        conn = self.conn
        session = self.session
        send_all = self.io.send_all
        try:
            while True:
                self._writer_parked = True
                await self._wake_event.wait()
                self._writer_parked = False
                self._wake_event = trio.Event()
                self._woken = False
                while self._definitions_ticket:  # a durable change of ours: replies after its fsync
                    ticket = self._definitions_ticket
                    await self.definitions_synced(ticket)
                    if self._definitions_ticket == ticket:  # no later batch changed more meanwhile
                        self._definitions_ticket = 0
                if session.deferred:
                    session.flush_deferred()
                data = conn.data_to_send()
                if data:
                    await send_all(data)
                    self._sent(len(data))
                if session.closed and not conn.bytes_pending:
                    return
                if self._open_reads is not None and not session.reading:
                    self._open_reads.cancel()  # we sent connection.close: the reader waits for close-ok now
        finally:
            self._writer_parked = False  # nothing writes to this socket any more
            self._closed.set()

    async def _heartbeat(self) -> None:
        """From connection.open-ok, for a connection that negotiated heartbeats."""
        interval = max(self.conn.heartbeat / 2, 0.5)
        while not self.session.closed:
            await trio.sleep(interval)
            if self.session.read_paused:
                self.conn.peer_alive()  # we are not reading: its heartbeats wait in the socket
            if not self.conn.tick(trio.current_time()):  # trio's clock: monotonic, and mockable
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
