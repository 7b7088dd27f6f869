"""Request/response values and the route table of the HTTP API (sync, no I/O).

The network shell (``net/http_conn.py``) parses HTTP with h11, authenticates, builds a ``Request``
and calls ``Router.dispatch``. Path parameters are percent-decoded to bytes and read as UTF-8
(``path_segment``): one that is not UTF-8 is a 400. Broker errors (AMQP exceptions) become RabbitMQ
management-style JSON errors here.

The route table
---------------
Each resource module (``overview.py``, ``queues.py``, ...) has ``routes = Routes()`` and declares
its handlers on it::

    @routes.put("/api/queues/{vhost}/{name}", perms=[("configure", "name")])
    def put_queue(ctx: Context, req: Request, vhost: VHost, name: str) -> Response: ...

``api.py`` lists the modules; a new resource is one module with its ``routes`` plus one entry in
that list. A handler is ``(ctx, request, **path parameters) -> Response`` and runs only after the
preamble its route declares, applied once here in this order:

1. the user: every route needs a user with a management tag (administrator, management,
   monitoring or policymaker; else 401 "Not management user", as RabbitMQ), and ``admin=True``
   the administrator tag (401 "Not administrator user"). ``auth=False`` routes (``/metrics``) take no user at all.
2. the vhost: the path parameter named by ``vhost`` (``"vhost"`` by default, when the path has it)
   is looked up and replaced by the ``VHost``: 404 if unknown, 401 if the user has no permissions
   there (administrators see every vhost). ``vhost=None`` leaves such a parameter a plain string.
3. ``reader=True``: reading message contents needs the management or administrator tag (401).
4. ``perms``: ``(kind, parameter)`` pairs, each the user's configure/write/read permission on the
   object that parameter names (401 not_authorised), in the order given.

Every refusal of access is 401 ``not_authorised``, as RabbitMQ 3.10's management plugin answers;
the console tells a failed login (reason "Login failed") from a refused action by the reason.

``params`` adds fixed keyword arguments, so one handler can serve several paths.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote_to_bytes

from pydantic import ValidationError

from headrace.server.amqp.errors import AMQPError
from headrace.server.amqp.names import decode_name
from headrace.server.auth import User
from headrace.server.broker import Broker

from .node_facts import NodeFacts
from .history import MAX_RANGE, History

__all__ = ["Context", "HTTPError", "LogSlice", "Request", "Response", "Route", "Router", "Routes", "json_response",
           "history_ranges", "user_of"]

log = logging.getLogger("headrace.http")

# AMQP reply code -> HTTP status. RabbitMQ's management plugin answers 404 for a missing object and
# 400 bad_request for every other channel error it meets (precondition failed, resource locked, not
# implemented: a stream's basic.get is 400 "540 basic.get not supported ..."); refused access
# (AMQP 403 ACCESS_REFUSED) is 401 not_authorised, as RabbitMQ answers and as the permission checks of
# the route preamble do. The label follows the status, so a client branching on either reads the
# same thing.
_STATUS = {404: 404, 403: 401}
_LABELS = {404: "not_found", 401: "not_authorised", 400: "bad_request"}
NESTED_TOO_DEEP = "invalid JSON body: nested too deeply"
# an AMQP reply text's leading reply name ("PRECONDITION_FAILED - "): RabbitMQ's HTTP API gives the
# reason without it ("inequivalent arg 'durable' for queue ...")
_REPLY_NAME = re.compile(r"^[A-Z_]+ - ")


class Context(Protocol):
    """What handlers see of the HTTP server (``net/http_conn.HTTPServer``)."""
    broker: Broker
    version: str
    now: float  # the time of the request (the shell stamps it; handlers never read the clock)
    http_consumers: dict[str, Any]
    history: History  # the rate history the sampler keeps (``history.py``)
    metrics: str  # the ``metrics`` setting: off | aggregate | per-queue
    # the history the request asks for (``history_ranges``): prefix -> (age, incr) in ms
    ranges: dict[str, tuple[int, int]]

    def store_bytes(self) -> int: ...

    def store_io(self) -> dict[str, int]: ...

    def node_facts(self) -> NodeFacts: ...

    def cluster_leave(self, name: str) -> bool | None: ...  # None: not clustered

    def mirror_facts(self, vhost: str, exchange: str) -> dict[str, int]: ...

    def shovel_status(self, vhost: str | None) -> list[dict[str, Any]]: ...

    def federation_status(self, vhost: str | None) -> list[dict[str, Any]]: ...

    def log_plan(self, kind: str, vhost: str, name: str, target_bytes: int,
                 bounds: dict[str, int | None]) -> dict[str, Any] | None: ...


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    user: User | None = None

    def json(self) -> Any:
        if not self.body:
            return {}
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HTTPError(400, "bad_request", f"invalid JSON body: {exc}") from None
        except RecursionError:
            raise HTTPError(400, "bad_request", NESTED_TOO_DEEP) from None

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default


@dataclass(slots=True)
class Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    content_type: str = "application/json"
    wait_ticket: int = 0  # answer only once the store has synced this ticket (persistent publish)
    definitions_ticket: int = 0  # answer only once the definitions log has this durable change
    stream: Any = None  # an HTTPConsumer whose deliveries the shell streams as the body
    file: LogSlice | None = None  # bytes of a log segment the shell sends as the body (``logs.py``)


@dataclass(frozen=True, slots=True)
class LogSlice:
    """Bytes ``start`` .. ``stop`` (exclusive; None: the segment's end as the shell finds it) of the
    segment at ``base`` of a mirror's (``kind`` "mirror") or a stream's ("stream") log: the shell
    opens the file and sends the bytes straight from it."""
    kind: str
    vhost: str
    name: str
    base: int
    start: int
    stop: int | None


class HTTPError(Exception):
    def __init__(self, status: int, error: str, reason: str, headers: list[tuple[str, str]] | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason
        self.headers = headers or []


def json_response(status: int, payload: Any, headers: list[tuple[str, str]] | None = None) -> Response:
    return Response(status, json.dumps(payload, default=str).encode(), headers or [])


def error_response(exc: HTTPError) -> Response:
    return json_response(exc.status, {"error": exc.error, "reason": exc.reason}, exc.headers)


# the query parameters by which RabbitMQ's UI asks for history: ``<prefix>_age`` and
# ``<prefix>_incr`` (seconds), for lengths, message rates, data rates and node statistics
HISTORY_PREFIXES = ("lengths", "msg_rates", "data_rates", "node_stats")


def history_ranges(req: Request) -> dict[str, tuple[int, int]]:
    """(age, incr) in ms per prefix the request gives both of as integers, as RabbitMQ reads them
    (``rabbit_mgmt_util:range``: anything else is no range); 400 unless both are positive and ask
    for at most ``MAX_RANGE`` points."""
    out: dict[str, tuple[int, int]] = {}
    for prefix in HISTORY_PREFIXES:
        age, incr = _int_arg(req, prefix + "_age"), _int_arg(req, prefix + "_incr")
        if age is None or incr is None:
            continue
        if age <= 0 or incr <= 0 or age // incr > MAX_RANGE:
            raise HTTPError(400, "bad_request", f"Invalid range parameters: age {age}, incr {incr}")
        out[prefix] = (age * 1000, incr * 1000)
    return out


def _int_arg(req: Request, name: str) -> int | None:
    value = req.arg(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def user_of(req: Request) -> User:
    """The authenticated user (every route but ``auth=False`` ones has one)."""
    assert req.user is not None
    return req.user


Handler = Callable[..., Response]


@dataclass(frozen=True, slots=True)
class Route:
    """One path and method, its handler and the preamble applied before it (module docstring)."""
    method: str
    pattern: str
    handler: Handler
    auth: bool = True
    admin: bool = False
    vhost: str | None = "vhost"
    reader: bool = False
    perms: tuple[tuple[str, str], ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)


class Routes:
    """The routes one resource module declares (``@routes.get(...)`` on each handler)."""

    def __init__(self) -> None:
        self.routes: list[Route] = []

    def add(self, method: str, pattern: str, *, perms: Iterable[tuple[str, str]] = (),
            **options: Any) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            self.routes.append(Route(method, pattern, handler, perms=tuple(perms), **options))
            return handler
        return register

    def get(self, pattern: str, **options: Any) -> Callable[[Handler], Handler]:
        return self.add("GET", pattern, **options)

    def put(self, pattern: str, **options: Any) -> Callable[[Handler], Handler]:
        return self.add("PUT", pattern, **options)

    def post(self, pattern: str, **options: Any) -> Callable[[Handler], Handler]:
        return self.add("POST", pattern, **options)

    def delete(self, pattern: str, **options: Any) -> Callable[[Handler], Handler]:
        return self.add("DELETE", pattern, **options)


def admit(ctx: Context, route: Route, req: Request, params: dict[str, Any]) -> None:
    """The route's preamble (module docstring): raises HTTPError, or resolves ``params`` in place."""
    if not route.auth:
        return
    user = user_of(req)
    if not user.can_manage:  # RabbitMQ: 401, as for a failed login (the user may not use the API at all)
        raise HTTPError(401, "not_authorised", "Not management user")
    if route.admin and not user.is_administrator:
        raise HTTPError(401, "not_authorised", "Not administrator user")
    vhost_name: str | None = None
    if route.vhost is not None and route.vhost in params:
        vhost_name = params[route.vhost]
        vhost = ctx.broker.vhost(vhost_name)
        if vhost is None:
            raise HTTPError(404, "not_found", f"vhost '{vhost_name}' not found")
        if not user.is_administrator and ctx.broker.users.permission(user.name, vhost_name) is None:
            raise HTTPError(401, "not_authorised", f"access to vhost '{vhost_name}' refused")
        params[route.vhost] = vhost
    if route.reader and not {"administrator", "management"} & set(user.tags):
        # monitoring and policymaker only grant visibility of stats
        raise HTTPError(401, "not_authorised", "reading messages needs the management or administrator tag")
    for kind, param in route.perms:
        assert vhost_name is not None, f"{route.pattern}: permissions need a vhost"
        check_permission(ctx, user, vhost_name, kind, params[param])


def check_permission(ctx: Context, user: User, vhost: str, kind: str, name: str) -> None:
    if not ctx.broker.users.allowed(user.name, vhost, kind, name):
        raise HTTPError(401, "not_authorised", f"{kind} access to '{name}' in vhost '{vhost}' refused for user "
                                       f"'{user.name}'")


class Router:
    def __init__(self, route_sets: Iterable[Routes] = ()) -> None:
        self._routes: list[tuple[re.Pattern[str], Route]] = []
        for routes in route_sets:
            self.include(routes)

    def include(self, routes: Routes) -> None:
        for route in routes.routes:
            regex = "^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", route.pattern) + "$"
            self._routes.append((re.compile(regex), route))

    def is_public(self, path: str) -> bool:
        """True for a path that takes no credentials (an ``auth=False`` route: ``/metrics``)."""
        return any(not route.auth and regex.match(path) for regex, route in self._routes)

    def templates(self) -> list[tuple[str, str]]:
        """(method, path template) of every route: for documentation and fuzzing."""
        return [(route.method, route.pattern) for _, route in self._routes]

    def dispatch(self, ctx: Context, request: Request) -> Response:
        allowed = []
        for regex, route in self._routes:
            match = regex.match(request.path)
            if match is None:
                continue
            if route.method != request.method:
                allowed.append(route.method)
                continue
            try:
                params: dict[str, Any] = {k: path_segment(v) for k, v in match.groupdict().items()}
                admit(ctx, route, request, params)
                # a GET's history ranges: an invalid one is a 400 (the statistics' readers take them)
                ctx.ranges = history_ranges(request) if request.method == "GET" else {}
                return route.handler(ctx, request, **params, **route.params)
            except HTTPError as exc:
                return error_response(exc)
            except AMQPError as exc:
                status = _STATUS.get(exc.reply_code, 400)
                return error_response(HTTPError(status, _LABELS[status], _REPLY_NAME.sub("", exc.reply_text, 1)))
            except ValidationError as exc:
                return error_response(HTTPError(400, "bad_request", str(exc.errors(include_url=False))))
            except (ValueError, KeyError) as exc:
                return error_response(HTTPError(400, "bad_request", str(exc)))
            except RecursionError:  # a value nested deeper than validating or encoding it can go
                return error_response(HTTPError(400, "bad_request", NESTED_TOO_DEEP))
            except Exception:  # a bug in a handler: answer it and keep the connection (and broker) up
                log.exception("HTTP handler failed: %s %s", request.method, request.path)
                return error_response(HTTPError(500, "internal_error", "the handler failed; see the broker log"))
        if allowed:
            return error_response(HTTPError(405, "method_not_allowed", f"allowed: {', '.join(sorted(set(allowed)))}",
                                            [("allow", ", ".join(sorted(set(allowed))))]))
        return error_response(HTTPError(404, "not_found", "Object Not Found"))


def path_segment(segment: str) -> str:
    """A path parameter, percent-decoded as bytes and read as UTF-8 (``names.decode_name``): a
    segment that is not UTF-8 is a 400, never a name with U+FFFD that another name's bytes also give.
    The target was read as latin-1, so each character is one byte of the request as sent."""
    return decode_name("path segment", unquote_to_bytes(segment.encode("latin-1")))


def parse_target(target: bytes) -> tuple[str, dict[str, list[str]]]:
    """Path and query of a request target. Every path also answers with one trailing slash, as
    RabbitMQ's does (``/api/queues/%2F/`` is ``/api/queues/%2F``)."""
    text = target.decode("latin-1")
    path, _, query = text.partition("?")
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    return path, parse_qs(query)
