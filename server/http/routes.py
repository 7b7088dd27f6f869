"""Request/response values and the route table of the HTTP API (sync, no I/O).

The network shell (``net/http_conn.py``) parses HTTP with h11, authenticates, builds a ``Request``
and calls ``dispatch``; handlers are plain functions ``(ctx, request, **path) -> Response``.
Broker errors (AMQP exceptions) become RabbitMQ management-style JSON errors here.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote

from pydantic import ValidationError

from headrace.server.amqp.errors import AMQPError
from headrace.server.auth import User

__all__ = ["HTTPError", "Request", "Response", "Router", "json_response"]

log = logging.getLogger("headrace.http")

# AMQP reply code -> HTTP status (RabbitMQ's management plugin answers 404 for missing objects,
# 400 for precondition failures such as inequivalent re-declares, 405 for locked queues)
_STATUS = {404: 404, 403: 403, 405: 405, 406: 400, 503: 400, 530: 400, 540: 501}
NESTED_TOO_DEEP = "invalid JSON body: nested too deeply"


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
    stream: Any = None  # an HTTPConsumer whose deliveries the shell streams as the body


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


Handler = Callable[..., Response]


class Router:
    def __init__(self) -> None:
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self._templates: list[tuple[str, str]] = []

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        regex = "^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern) + "$"
        self._routes.append((method, re.compile(regex), handler))
        self._templates.append((method, pattern))

    def templates(self) -> list[tuple[str, str]]:
        """(method, path template) of every route: for documentation and fuzzing."""
        return list(self._templates)

    def dispatch(self, ctx: Any, request: Request) -> Response:
        allowed = []
        for method, regex, handler in self._routes:
            match = regex.match(request.path)
            if match is None:
                continue
            if method != request.method:
                allowed.append(method)
                continue
            params = {k: unquote(v) for k, v in match.groupdict().items()}
            try:
                return handler(ctx, request, **params)
            except HTTPError as exc:
                return error_response(exc)
            except AMQPError as exc:
                status = _STATUS.get(exc.reply_code, 400)
                return error_response(HTTPError(status, "not_found" if status == 404 else "bad_request",
                                                exc.reply_text))
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


def parse_target(target: bytes) -> tuple[str, dict[str, list[str]]]:
    """Path and query of a request target. Every path also answers with one trailing slash, as
    RabbitMQ's does (``/api/queues/%2F/`` is ``/api/queues/%2F``)."""
    text = target.decode("latin-1")
    path, _, query = text.partition("?")
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    return path, parse_qs(query)
