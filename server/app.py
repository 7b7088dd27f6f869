"""The trio root: builds the broker from settings and data dir, runs listeners and background tasks,
and shuts down gracefully (hypercorn's shape).

Task tree::

    serve                 root nursery: clock, stream pump, sender, flusher (and its timer),
                          mirror writer, pager
      conns               handler nursery for every connection (AMQP and HTTP)
        listeners         serve_listeners(amqp), serve_listeners(http), the Prometheus port's if set,
                          signal watcher

On SIGINT/SIGTERM the listeners stop, every AMQP client gets connection.close 320, connections get
``shutdown_grace`` seconds to finish, then the store and the definitions log make their final fsync.
"""

from __future__ import annotations

import gc
import logging
import signal
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import trio

import headrace
from headrace.server.amqp.spec import ReplyCode
from headrace.server.broker import Broker, Limits
from headrace.server.broker.compat import Compat
from headrace.server.broker.definitions_io import change_records, export_definitions, import_definitions
from headrace.server.broker.ports import ShellPorts
from headrace.server.config import Settings
from headrace.server.net.amqp_conn import AMQPConnectionHandler
from headrace.server.net.admission import Admission
from headrace.server.net.alarms import MemoryWatch, run_alarms
from headrace.server.http.history import History, Policy
from headrace.server.http.sampler import StatsSampler
from headrace.server.net.clock import Clock
from headrace.server.net.flusher import Replication
from headrace.server.net.gate import Gate
from headrace.server.net.sender import Sender
from headrace.server.net.shovels import Shovels
from headrace.server.net.socket_bounds import (HELD_RCVBUF, RCVBUF_MAX, Window, bound_listeners, bound_window,
                                               handshake_rtt, shrinker)
from headrace.server.net.startup import DataDirLock, StartupError, write_ports
from headrace.server.net.storage import Storage
from headrace.server.net.stream_pump import StreamPump

__all__ = ["StartupError", "serve", "run"]

log = logging.getLogger("headrace")


class ClusterView(Protocol):
    """What the broker's API needs of the clustered node that runs it (``server/net/cluster_node.py``,
    imported only when a cluster is configured: it brings httpx, which a standalone broker does
    without)."""

    def status(self) -> list[dict[str, object]]: ...

    def leave(self, name: str) -> bool: ...


class App:
    def __init__(self, settings: Settings, *, lock: DataDirLock | None = None, replication: Replication | None = None,
                 cluster: ClusterView | None = None) -> None:
        """``lock``, ``replication``, ``cluster``: given by a cluster's leader (``cluster_node.py``),
        which holds the directory's lock for its whole life and streams the group's writes."""
        self.settings = settings
        self.own_process = False  # serve(own_process=True): tune the collector once serving
        self.data_dir = Path(settings.storage.data_dir)
        self.cluster = cluster
        self.finished = trio.Event()
        # before anything in the directory is read or created: a second broker stops here
        self._own_lock = lock is None
        self.lock = lock if lock is not None else DataDirLock(self.data_dir)
        if self._own_lock:
            self.lock.acquire()
        self.cluster_failure = ""  # why the cluster agent made the broker stop
        self._stopping = False
        self._stop_scope: trio.CancelScope | None = None  # the listeners' scope: cancelled, the broker stops
        # the shell's parts the broker calls are built first, so its ports name them (ARCHITECTURE.md,
        # "The shell's ports"); none of them needs the broker before its task runs
        self.gate = Gate()
        self.clock = Clock()
        self.sender = Sender()  # writes the output of connections whose writer tasks are parked
        self.stream_pump = StreamPump()
        self.storage = Storage(self.data_dir, settings, after_group=self.sender.flush)
        self.storage.flusher.replication = replication
        flusher = self.storage.flusher
        ports = ShellPorts(wake_clock=self.clock.wake, wake_flusher=flusher.kick,
                           wake_mirror_writer=self.storage.mirror_writer.kick,
                           wake_stream_pump=self.stream_pump.wake,
                           saturation_released=self.gate.released,  # a saturated queue drained: the readers it held
                           policies_changed=flusher.retention_now, user_deleted=self.user_deleted)
        self.broker = Broker(
            ports=ports,
            resident_max_messages=settings.storage.queue_max_resident_messages,
            resident_max_bytes=settings.storage.queue_max_resident_bytes,
            spill_factory=self.storage.spill_factory,
            delayed_data_dir=self.storage.delayed_dir,
            delayed_read_bytes=settings.storage.delayed_read_bytes,
            store_enabled=True,
            failed_logins_per_second=settings.limits.failed_logins_per_second,
            limits=Limits(
                max_queues_per_vhost=settings.limits.max_queues_per_vhost,
                max_exchanges_per_vhost=settings.limits.max_exchanges_per_vhost,
                max_connections=settings.limits.max_connections,
                max_connections_per_user=settings.limits.max_connections_per_user,
                max_tx_bytes=settings.limits.max_tx_bytes,
                consumer_timeout_ms=settings.limits.consumer_timeout_ms,
                stream_handover_timeout_ms=settings.limits.stream_handover_timeout_ms,
            ),
            compat=Compat.of(settings.compat.rabbitmq_compat),
        )
        self.broker.stream_data_dir = self.data_dir
        saturation = self.broker.delivery.saturation
        saturation.high, saturation.low = settings.network.saturation_ready, settings.network.saturation_resume_ready
        # the management API's rate history, sampled on the broker's clock (server/http/sampler.py)
        self.stats_history = History(Policy(tuple(settings.http.stats_retention_global)),
                                     Policy(tuple(settings.http.stats_retention_basic)))
        self.sampler = StatsSampler(self.broker, self.stats_history, self.storage.store.io_counts)
        self.memory = MemoryWatch(self.broker, self.gate, settings.limits.memory_limit_bytes,
                                  settings.limits.memory_calculation_strategy)
        self.amqp_handlers: set[AMQPConnectionHandler] = set()
        self.shovels = Shovels(self.broker, self._local_amqp, settings.auth.default_user, settings.auth.default_pass,
                               self.after_batch)
        self.admission = Admission(settings.limits.max_unauthenticated)
        self.bound: dict[str, tuple[str, int]] = {}
        self._tls: ssl.SSLContext | None = None

    # ------------------------------------------------------------------ definitions
    def load(self) -> None:
        broker = self.broker
        definitions = self.storage.definitions.log
        doc = definitions.load()  # the snapshot (an older headrace's definitions.json) plus the log
        if doc is not None:
            # declare starts each queue's x-expires lease at the real time: a lease dated 0 would
            # make every x-expires queue expire at the first tick
            import_definitions(broker, doc, time.time())
            log.info("loaded definitions: %d vhosts, %d users", len(broker.vhosts), len(broker.users.users))
        s = self.settings
        if doc is None:
            broker.ensure_default(s.auth.default_vhost, s.auth.default_user, s.auth.default_pass)
            if s.auth.admin_user:
                broker.ensure_default(s.auth.default_vhost, s.auth.admin_user, s.auth.admin_pass or "")
        self.storage.recover(broker)
        broker.arm_all()  # recovered queues' deadlines into the clock's heap
        if s.http.http_enabled or s.http.prometheus_port is not None:
            self.sampler.start(time.time())  # its first tick at the next multiple of its interval
        broker.definitions.take()  # what loading declared is in the snapshot written now
        # compacted at every start: a new snapshot of what was loaded, and an empty log
        definitions.compact(export_definitions(broker, version=headrace.__version__))

    def after_batch(self) -> int:
        """Called by connection tasks after each batch: the batch's durable definition changes go
        to the flusher as log records. Returns the ticket the batch's replies wait for (0: none)."""
        if not self.broker.definitions:
            return 0
        changes = self.broker.definitions.take()
        self.shovels.definitions_changed(changes)  # a shovel parameter among them: start or stop it
        return self.storage.definitions.add(change_records(self.broker, changes))

    def _local_amqp(self) -> tuple[str, int]:
        """Where a shovel's ``amqp://`` (no host) connects: this broker's AMQP listener."""
        host, port = self.bound["amqp"]
        return ("127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host), port

    async def definitions_synced(self, ticket: int) -> None:
        """Until the definition changes of ``ticket`` are on disk."""
        await self.storage.definitions.wait_synced(ticket, self.gate)

    def _tick(self, now: float) -> None:
        self.broker.tick(now)
        self.after_batch()

    def _next_deadline(self, now: float) -> float | None:
        """Every deadline, consumer timeouts too, is in the broker's one heap."""
        return self.broker.next_deadline()

    # ------------------------------------------------------------------ connections
    async def handle_amqp(self, stream: trio.abc.Stream) -> None:
        try:
            sock = _socket_of(stream)
            peer = sock.getpeername()[:2]
            local = sock.getsockname()[:2]
        except OSError:  # gone before we got to it
            await trio.aclose_forcefully(stream)
            return
        settings = self.settings
        rtt = handshake_rtt(sock)
        bounded = bound_window(sock, settings.network.amqp_rcvbuf, settings.network.amqp_rcvbuf_long_link_rtt, rtt)
        window = Window(sock, settings.network.amqp_rcvbuf if bounded else 0, RCVBUF_MAX, rtt)
        ticket = self.admission.enter()
        admission = self.admission
        handler = AMQPConnectionHandler(stream, self.broker, self.settings, self.gate, peer,
                                        headrace.__version__, local=local, after_batch=self.after_batch,
                                        definitions_synced=self.definitions_synced, on_read=self.memory.read,
                                        on_first_hold=shrinker(sock, HELD_RCVBUF),
                                        grow=window.read if window.growing else None,
                                        sender=self.sender, pending_output=self.memory.pending_output,
                                        on_header=lambda: admission.header_received(ticket),
                                        on_authenticated=lambda: admission.leave(ticket))
        self.amqp_handlers.add(handler)
        try:
            with ticket.scope:  # cancelled if evicted before it authenticates
                await handler.run()
        finally:
            admission.leave(ticket)
            self.amqp_handlers.discard(handler)
            self.after_batch()

    async def serve(self, *, task_status: trio.TaskStatus[App] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self._serve(task_status)
        finally:
            if self._own_lock:
                self.lock.release()
            self.finished.set()

    def stop(self) -> None:
        """Stop as on SIGTERM (a clustered node that stops leading)."""
        self._stopping = True
        if self._stop_scope is not None:
            self._stop_scope.cancel()

    async def _serve(self, task_status: trio.TaskStatus[App]) -> None:
        s = self.settings
        bound = await self._bind()
        self.load()
        async with trio.open_nursery() as root:
            root.start_soon(self.clock.run, self._tick, self._next_deadline)
            root.start_soon(self.stream_pump.run, self.broker)
            root.start_soon(self.sender.run)
            root.start_soon(run_alarms, self.memory, self.storage.disk)
            root.start_soon(self.shovels.run)
            await self.storage.start(root, self.broker, self.gate)
            async with trio.open_nursery() as conns:
                async with trio.open_nursery() as listeners:
                    self._stop_scope = listeners.cancel_scope
                    if self._stopping:
                        listeners.cancel_scope.cancel()
                    self._start_listeners(bound, listeners, conns)
                    self._write_ports()
                    for name, (host, port) in self.bound.items():
                        log.info("%s listening on %s:%d", name.upper(), host, port)
                    log.info("data directory %s", self.data_dir.resolve())
                    if self.cluster is None:  # a clustered node watches the signals itself
                        listeners.start_soon(self._watch_signals, listeners.cancel_scope)
                    task_status.started(self)
                    if self.own_process:
                        tune_gc()
                self.shovels.stop()
                log.info("shutting down: closing %d AMQP connections", len(self.amqp_handlers))
                for handler in list(self.amqp_handlers):
                    handler.force_close(ReplyCode.CONNECTION_FORCED, "CONNECTION_FORCED - broker shutdown")
                conns.cancel_scope.deadline = trio.current_time() + s.shutdown_grace
                self.http_shutdown()
            self.after_batch()  # the last connections' cleanup
            await self.storage.drain(self.broker)
            root.cancel_scope.cancel()
        self.storage.close()
        log.info("stopped" if self.cluster is None else "stopped leading")

    async def _bind(self) -> dict[str, list[trio.SocketListener]]:
        """Every listening socket, bound before recovery: a port in use is one line at once, not a
        traceback after the whole data directory was loaded. Clients that connect meanwhile wait in
        the backlog until recovery is over."""
        s = self.settings
        self._tls = self._tls_context()
        wanted = [("amqp", s.network.amqp_host, s.network.amqp_port)]
        if self._tls is not None and s.network.amqps_port is not None:
            wanted.append(("amqps", s.network.amqp_host, s.network.amqps_port))
        if s.http.http_enabled and _http_available():
            wanted.append(("http", s.http.http_host, s.http.http_port))
            if self._tls is not None and s.http.https_port is not None:
                wanted.append(("https", s.http.http_host, s.http.https_port))
            if s.http.prometheus_port is not None:
                wanted.append(("prometheus", s.http.http_host, s.http.prometheus_port))
        bound: dict[str, list[trio.SocketListener]] = {}
        for name, host, port in wanted:
            try:
                bound[name] = await trio.open_tcp_listeners(port, host=host)
            except OSError as exc:
                for sockets in bound.values():
                    for listener in sockets:
                        listener.socket.close()
                raise StartupError(f"cannot listen for {name.upper()} on {host}:{port}: "
                                   f"{exc.strerror or exc}") from None
            self.bound[name] = bound[name][0].socket.getsockname()[:2]
            if name.startswith("amqp"):
                bound_listeners(bound[name], s.network.amqp_mss)
        return bound

    def _start_listeners(self, bound: dict[str, list[trio.SocketListener]], listeners: trio.Nursery,
                         conns: trio.Nursery) -> None:
        tls = self._tls
        for name, sockets in bound.items():
            if name == "amqp":
                listeners.start_soon(_serve, sockets, self.handle_amqp, conns)
            elif name == "amqps" and tls is not None:
                listeners.start_soon(_serve, _tls(sockets, tls), self.handle_amqp, conns)
            elif name == "http":
                from headrace.server.net.http_conn import HTTPServer

                self.http_server = HTTPServer(self)
                listeners.start_soon(_serve, sockets, self.http_server.handle, conns)
            elif name == "https" and tls is not None:
                wrapped = [trio.SSLListener(lst, tls, https_compatible=True) for lst in sockets]
                listeners.start_soon(_serve, wrapped, self.http_server.handle, conns)
            elif name == "prometheus":
                from headrace.server.http.prometheus import router as prometheus_routes
                from headrace.server.net.http_conn import HTTPServer

                self.prometheus_server = HTTPServer(self, prometheus_routes)
                listeners.start_soon(_serve, sockets, self.prometheus_server.handle, conns)

    def _tls_context(self) -> ssl.SSLContext | None:
        s = self.settings
        if s.network.tls_certfile is None or s.network.tls_keyfile is None:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=s.network.tls_cafile)
        ctx.load_cert_chain(s.network.tls_certfile, s.network.tls_keyfile)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if s.network.tls_verify_peer:
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def user_deleted(self, name: str) -> None:
        """The broker's ``user_deleted`` port: the management API's consume streams of that user end.
        The HTTP server is made when its listener starts, after the broker; before that there is
        no stream to end."""
        server = getattr(self, "http_server", None)
        if server is not None:
            server.user_deleted(name)

    def http_shutdown(self) -> None:
        for name in ("http_server", "prometheus_server"):
            server = getattr(self, name, None)
            if server is not None:
                server.shutdown()

    def _write_ports(self) -> None:
        write_ports(self.settings.network.ports_file, {name: port for name, (_, port) in self.bound.items()})

    async def _watch_signals(self, scope: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                log.info("received %s", signal.Signals(signum).name)
                scope.cancel()
                return


def _http_available() -> bool:
    try:
        import headrace.server.net.http_conn  # noqa: F401  (the HTTP API is an optional extra)
    except ImportError:
        return False
    return True


def _tls(listeners: list[trio.SocketListener], ctx: ssl.SSLContext) -> list[trio.SSLListener[trio.SocketStream]]:
    return [trio.SSLListener(listener, ctx, https_compatible=False) for listener in listeners]


def _socket_of(stream: trio.abc.Stream) -> trio.socket.SocketType:
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    assert isinstance(stream, trio.SocketStream)
    return stream.socket


async def _serve(listeners: list[Any], handler: Callable[[Any], Awaitable[None]],
                 nursery: trio.Nursery) -> None:
    async def guarded(stream: Any) -> None:
        # the boundary between one client and the broker: whatever a connection task raises ends
        # that connection only, never the connections nursery (and so the broker)
        try:
            await handler(stream)
        except Exception:
            log.exception("connection task failed")
            await trio.aclose_forcefully(stream)

    await trio.serve_listeners(guarded, listeners, handler_nursery=nursery)


async def serve(settings: Settings, own_process: bool = False, *,
                task_status: trio.TaskStatus[App] = trio.TASK_STATUS_IGNORED) -> None:
    """The broker until it stops; ``own_process``: the process is the broker's alone (``run``), so
    its garbage collector is tuned for it once serving (``tune_gc``)."""
    if settings.cluster.etcd_endpoints:
        from headrace.server.net.cluster_node import ClusterNode

        await ClusterNode(settings, App).serve()
        return
    app = App(settings)
    app.own_process = own_process
    await app.serve(task_status=task_status)


# Young collections every this many container allocations, not CPython's 700. A message's objects
# (its Message, queue entries, frames' tuples) live about one batch; at 700 most of those in flight
# outlived a young collection and were traversed again in the older ones, and the collector took
# ~4 us of a message's ~40 (benchmarks/RESULTS.md, "Garbage collection").
GC_YOUNG_THRESHOLD = 10_000


def tune_gc() -> None:
    """Once the broker serves: what start-up built (modules, classes, recovered definitions and
    messages) leaves the collector's sight for good (``gc.freeze``; refcounting still frees it), so
    full collections traverse only what the broker made since; young collections run every
    ``GC_YOUNG_THRESHOLD`` allocations. For the broker's own process only (``run``), not for a
    process that embeds ``serve``, such as a test."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def run(settings: Settings) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    trio.run(serve, settings, True)
