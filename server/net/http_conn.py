"""One task per HTTP connection: h11 as the protocol, the sync API in ``server/http`` as handlers.

Keep-alive, a bound on header and body size (413), and timeouts for slow or silent clients
(``move_on_after``), so a broken client never holds the event loop or grows memory.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import logging
import math
import os
import resource
import ssl
import time
from typing import Any
from urllib.parse import unquote

import h11
import trio

import headrace
from headrace.persistence.mirror_log import list_segments, next_offset
from headrace.server.auth import LoginThrottled
from headrace.server.http import router
from headrace.server.http.node_facts import Listener, NodeFacts
from headrace.server.net.http_logs import log_plan, send_slice
from headrace.server.http.routes import HTTPError, Request, Response, Router, error_response, json_response, \
    parse_target

__all__ = ["HTTPServer"]

DEFINITIONS_PATH = "/api/definitions"  # where the ``auth`` query parameter is read (``_credentials``)

log = logging.getLogger("headrace.http")

READ_SIZE = 64 * 1024
# An idle consume stream sends a blank line this often, so dead clients are noticed.
STREAM_KEEPALIVE = 10.0
# after refusing a request whose body is not read, how long the rest of it is read and dropped
LINGER_SECONDS = 5.0


class HTTPServer:
    """One listener's requests: the management API's routes by default, or another table (the
    Prometheus port's, ``server/http/prometheus.py``)."""

    def __init__(self, app: Any, routes: Router = router) -> None:
        self.app = app
        self.router = routes
        self.broker = app.broker
        self.version = headrace.__version__
        self.max_body = app.settings.http.http_max_body
        self.max_header = app.settings.http.http_max_header_bytes
        self.loopback_users = frozenset(app.settings.auth.loopback_users)
        self.request_timeout = app.settings.http.http_request_timeout
        self.metrics = app.settings.http.metrics
        self._closing = False
        # each connection's wait for its next request: shutdown ends the ones with nothing read yet
        self._reading: dict[trio.CancelScope, h11.Connection] = {}
        self.now = 0.0  # the time of the request being answered (handlers take it from here)
        self.ranges: dict[str, tuple[int, int]] = {}  # the history that request asks for (the router sets it)
        self.http_consumers: dict[str, Any] = {}  # tag -> HTTPConsumer streaming right now
        self.history = app.stats_history  # the rate history the app's sampler keeps
        self.started_at = time.time()
        self._cert_not_after = _cert_expiry(app.settings.network.tls_certfile)

    def cluster_leave(self, name: str) -> bool | None:
        """``DELETE /api/cluster/nodes/{name}``: None when this broker is not clustered."""
        cluster = getattr(self.app, "cluster", None)
        return None if cluster is None else bool(cluster.leave(name))

    def node_facts(self) -> NodeFacts:
        """What /api/nodes and the health checks say of this process: descriptors from /proc, the
        listeners the app bound, the TLS certificate's expiry (read once at start)."""
        settings = self.app.settings
        try:
            fd_used = len(os.listdir("/proc/self/fd"))
        except OSError:
            fd_used = 0
        return NodeFacts(
            started_at=self.started_at, os_pid=os.getpid(), fd_used=fd_used,
            fd_total=resource.getrlimit(resource.RLIMIT_NOFILE)[0], processors=os.cpu_count() or 1,
            listeners=[Listener(name, host, port) for name, (host, port) in getattr(self.app, "bound", {}).items()],
            mem_limit=settings.limits.memory_limit_bytes, disk_free_limit=settings.limits.disk_free_limit,
            cert_not_after=self._cert_not_after, data_dir=str(settings.storage.data_dir),
            cluster=self.app.cluster.status() if getattr(self.app, "cluster", None) is not None else [])

    def mirror_facts(self, vhost: str, exchange: str) -> dict[str, int]:
        """A mirror log's span on disk: first and next offset, bytes, segments (stats its files; the
        writer task owns the open log, whose next offset is an int read as it stands)."""
        writer = getattr(getattr(self.app, "storage", None), "mirror_writer", None)
        if writer is None:
            return {}
        segments = list_segments(writer.root, vhost, exchange)
        open_log = writer.logs.get((vhost, exchange))
        following = open_log.next_offset if open_log is not None else next_offset(writer.root, vhost, exchange)
        return {"first_offset": segments[0].base_offset if segments else following, "next_offset": following,
                "bytes": sum(s.size for s in segments), "segments": len(segments)}

    def log_plan(self, kind: str, vhost: str, name: str, target_bytes: int,
                 bounds: dict[str, int | None]) -> dict[str, Any] | None:
        """A mirror's or stream's segments and ranges for a remote reader (``http_logs.log_plan``)."""
        return log_plan(self.app, kind, vhost, name, target_bytes, bounds)

    def store_bytes(self) -> int:
        """Message store size on disk (an int the flusher keeps; reading it needs no lock)."""
        storage = getattr(self.app, "storage", None)
        return storage.store.disk_bytes() if storage is not None else 0

    def shovel_status(self, vhost: str | None) -> list[dict[str, Any]]:
        return self.app.shovels.status(vhost)  # type: ignore[no-any-return]

    def federation_status(self, vhost: str | None) -> list[dict[str, Any]]:
        return self.app.shovels.link_status(vhost)  # type: ignore[no-any-return]

    def store_io(self) -> dict[str, int]:
        """The message store's I/O counts (``MessageStore.io_counts``: ints the flusher's thread
        keeps; reading them needs no lock)."""
        storage = getattr(self.app, "storage", None)
        return storage.store.io_counts() if storage is not None else {}

    def user_deleted(self, name: str) -> None:
        """A deleted user's consume streams end, as their AMQP connections are closed (320): the
        broker's ``ShellPorts.user_deleted``, through the app, which forwards it to the management
        API's server only (the Prometheus port has no consume streams)."""
        for consumer in list(self.http_consumers.values()):
            if consumer.user == name:
                consumer.end("user deleted", time.time())

    def shutdown(self) -> None:
        """Stop serving: each open consume stream is woken so it ends with its terminating chunk."""
        self._closing = True
        for scope, conn in self._reading.items():
            # idle between requests (a scraper's or a browser's kept-alive connection): closed at
            # once, instead of holding shutdown for its grace period; one being read finishes
            if conn.their_state is h11.IDLE and not conn.trailing_data[0]:
                scope.cancel()
        for consumer in list(self.http_consumers.values()):
            consumer.wake()

    async def handle(self, stream: trio.abc.Stream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.max_header)
        try:
            while not self._closing:
                # only reading the request and answering it are bounded: a consume stream lives on
                with trio.move_on_after(self.request_timeout) as reading:
                    self._reading[reading] = conn
                    try:
                        request = await self._read_request(stream, conn)
                    finally:
                        del self._reading[reading]
                if reading.cancelled_caught or request is None:
                    return  # timed out (slow or idle client) or the client went away
                head_only = request.method == "HEAD"
                if head_only:  # GET without the body (RFC 9110 9.3.2), as RabbitMQ's cowboy does
                    request.method = "GET"
                response = self._respond(request, _peer_host(stream))
                if request.body:  # a publish's bodies count towards the memory alarm's next sample
                    self.app.memory.read(len(request.body))
                if response.stream is not None and head_only:
                    response.stream.close()
                    response = error_response(HTTPError(405, "method_not_allowed", "HEAD on a stream"))
                if response.stream is not None:
                    await self._stream(stream, conn, response)
                    return
                if response.file is not None:  # a log segment's bytes, each step bounded, not the whole
                    refused = await send_slice(self.app, stream, conn, response, f"headrace/{self.version}",
                                               self._closing, head_only, self.request_timeout)
                    if refused is None:
                        if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                            return
                        conn.start_next_cycle()
                        continue
                    response = refused
                with trio.move_on_after(self.request_timeout) as answering:
                    if response.definitions_ticket:  # a durable change: answered once it is on disk
                        await self.app.definitions_synced(response.definitions_ticket)
                    if response.wait_ticket:
                        await self._wait_synced(response.wait_ticket)
                        if self.broker.ticket_failed(response.wait_ticket):
                            response = error_response(HTTPError(
                                503, "service_unavailable", "the message store could not write to disk",
                                [("retry-after", "1")]))
                    await self._send(stream, conn, response, head_only)
                if answering.cancelled_caught:
                    return
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (h11.RemoteProtocolError, trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            if isinstance(exc, h11.RemoteProtocolError) and conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                status = exc.error_status_hint
                try:
                    await self._send(stream, conn, json_response(status, {"error": "bad_request", "reason": str(exc)}))
                except (h11.LocalProtocolError, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
        except (h11.LocalProtocolError, trio.TooSlowError):
            pass
        finally:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(1):
                    await stream.aclose()

    async def _read_request(self, stream: trio.abc.Stream, conn: h11.Connection) -> Request | None:
        head: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = bytes(await stream.receive_some(READ_SIZE))  # bytes already: no copy
                conn.receive_data(data)
                if not data and conn.their_state is not h11.DONE:
                    return None
                continue
            if isinstance(event, h11.Request):
                head = event
                # h11 bounds a head that arrives in pieces; one that arrived whole is measured here
                head_size = len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers)
                if head_size > self.max_header:
                    await self._refuse(stream, conn, HTTPError(
                        431, "request_header_fields_too_large",
                        f"request head of about {head_size} bytes exceeds {self.max_header}"))
                    return None
                length = _content_length(event)
                if length is not None and length > self.max_body:
                    await self._refuse(stream, conn, HTTPError(
                        413, "payload_too_large", f"body of {length} bytes exceeds {self.max_body}"))
                    return None
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > self.max_body:
                    await self._refuse(stream, conn, HTTPError(
                        413, "payload_too_large", f"body exceeds {self.max_body} bytes"))
                    return None
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                path, query = parse_target(head.target)
                headers = {k.decode().lower(): v.decode("latin-1") for k, v in head.headers}
                return Request(head.method.decode(), path, query, headers, bytes(body))
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return None

    async def _refuse(self, stream: trio.abc.Stream, conn: h11.Connection, error: HTTPError) -> None:
        """Answer a request that will not be read (413, 431), then close gracefully: the client may
        still be sending its body, and closing a socket with unread data resets it, which destroys
        the answer before the client reads it. So: the answer, then our FIN, then the rest of what the
        client sends is read and dropped (bounded in time) until it closes too ("lingering close")."""
        error.headers.append(("connection", "close"))
        await self._send(stream, conn, error_response(error))
        send_eof = getattr(stream, "send_eof", None)
        if send_eof is not None:
            await send_eof()
        with trio.move_on_after(LINGER_SECONDS):
            while await stream.receive_some(READ_SIZE):
                pass

    def _respond(self, request: Request, peer_host: str | None = None) -> Response:
        self.now = time.time()
        if not self.router.is_public(request.path):
            try:
                user = self._authenticate(self._credentials(request), peer_host)
            except LoginThrottled as exc:
                # a throttled login was never checked: 401 would tell the client the password is wrong
                wait = max(1, math.ceil(exc.retry_after))
                return error_response(HTTPError(429, "too_many_requests", f"{exc}; retry after {wait} s",
                                                [("retry-after", str(wait))]))
            if user is None:  # no challenge to a script (the console): the browser would prompt
                script = request.headers.get("x-requested-with", "").lower() == "xmlhttprequest"
                return error_response(HTTPError(401, "not_authorised", "Login failed",
                                                [] if script else [("www-authenticate", 'Basic realm="headrace"')]))
            request.user = user
        response = self.router.dispatch(self, request)
        response.definitions_ticket = self.app.after_batch()
        return response

    @staticmethod
    def _credentials(request: Request) -> str | None:
        """The Authorization header, or on the definitions paths only RabbitMQ's ``auth`` query
        parameter: its UI's definitions download is a plain link and its upload a form, so they
        carry the login's base64 ``user:password`` there (percent-encoded once more, as the UI's
        cookie keeps it). RabbitMQ reads it on those paths only, and so does headrace: credentials
        in a URL end up in proxies' logs."""
        header = request.headers.get("authorization")
        if header is None and request.path.startswith(DEFINITIONS_PATH) and (auth := request.arg("auth")):
            header = "Basic " + unquote(auth).replace(" ", "+")  # a "+" a form decoding made a space
        return header

    def _authenticate(self, header: str | None, peer_host: str | None) -> Any:
        """Basic auth; a user of ``loopback_users`` (guest) is refused from a non-loopback peer, as
        over AMQP (RabbitMQ applies loopback_users to the management listener too). Raises
        ``LoginThrottled`` while failed logins are over their rate."""
        if not header or not header.lower().startswith("basic "):
            return None
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not login_allowed(user, peer_host, self.loopback_users):
            return None
        return self.broker.users.check(user, password)  # LoginThrottled goes to _respond (429)

    async def _stream(self, stream: trio.abc.Stream, conn: h11.Connection, response: Response) -> None:
        """Stream an HTTP consumer's deliveries until the client goes away (its unacked messages then
        return to the queue) or the broker shuts down."""
        consumer = response.stream
        wake = trio.Event()

        def kick() -> None:
            wake.set()

        self.http_consumers[consumer.tag] = consumer
        try:
            consumer.start(time.time(), kick)
            headers = [("content-type", response.content_type), ("server", f"headrace/{self.version}"),
                       ("cache-control", "no-store")]
            await stream.send_all(conn.send(h11.Response(status_code=200, headers=headers)))
            try:
                async with trio.open_nursery() as nursery:
                    async def watch_eof() -> None:
                        while await stream.receive_some(READ_SIZE):
                            pass  # a consumer client sends nothing more; EOF means it left
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(watch_eof)
                    while True:
                        data = consumer.take_lines()  # the {"consumer": tag} line goes out at once
                        if data:
                            await stream.send_all(conn.send(h11.Data(data=data)))
                        if self._closing or consumer.closed:
                            break
                        with trio.move_on_after(STREAM_KEEPALIVE) as idle:
                            await wake.wait()
                        wake = trio.Event()
                        if idle.cancelled_caught and not consumer.lines:
                            # a blank line keeps idle proxies from timing out and notices dead clients
                            await stream.send_all(conn.send(h11.Data(data=b"\n")))
                    rest = consumer.take_lines()  # a final line added while the last send was under way
                    if rest:
                        await stream.send_all(conn.send(h11.Data(data=rest)))
                    if self._closing and not consumer.closed:
                        await stream.send_all(conn.send(h11.Data(data=consumer.final_line("broker shutdown"))))
                    await stream.send_all(conn.send(h11.EndOfMessage()))  # the terminating chunk
                    nursery.cancel_scope.cancel()
            except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass  # the client went away
        finally:
            self.http_consumers.pop(consumer.tag, None)
            consumer.close(time.time())
            self.app.after_batch()

    async def _wait_synced(self, ticket: int) -> None:
        with trio.move_on_after(self.request_timeout):
            while self.broker.synced_ticket < ticket:
                await self.app.gate.wait_changed()

    async def _send(self, stream: trio.abc.Stream, conn: h11.Connection, response: Response,
                    head_only: bool = False) -> None:
        headers = [("content-type", response.content_type), ("content-length", str(len(response.body))),
                   ("server", f"headrace/{self.version}"), *response.headers]
        if self._closing:
            headers.append(("connection", "close"))
        data = conn.send(h11.Response(status_code=response.status, headers=headers))
        data += conn.send(h11.Data(data=response.body)) if response.body and not head_only else b""
        data += conn.send(h11.EndOfMessage())
        await stream.send_all(data)


def _cert_expiry(certfile: Any) -> float | None:
    """The certificate's notAfter as epoch seconds (for the certificate-expiration health check)."""
    if not certfile:
        return None
    try:
        decoded = ssl._ssl._test_decode_cert(str(certfile))  # type: ignore[attr-defined]
        return float(ssl.cert_time_to_seconds(decoded["notAfter"]))
    except (OSError, ValueError, KeyError, ssl.SSLError):
        log.warning("could not read the expiry of TLS certificate %s", certfile)
        return None


def login_allowed(user: str, peer_host: str | None, loopback_users: frozenset[str]) -> bool:
    """False for a loopback-only user connecting from another address (RabbitMQ's loopback_users)."""
    if user not in loopback_users:
        return True
    if peer_host is None:
        return False
    try:
        return ipaddress.ip_address(peer_host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _peer_host(stream: trio.abc.Stream) -> str | None:
    """The client's address (through TLS too); None when the transport has none."""
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    sock = getattr(stream, "socket", None)
    if sock is None:
        return None
    try:
        peer = sock.getpeername()
    except OSError:
        return None
    if isinstance(peer, tuple):
        return str(peer[0])
    return "127.0.0.1" if isinstance(peer, str) else None  # a unix socket is local


def _content_length(request: h11.Request) -> int | None:
    for name, value in request.headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
