"""Management API handlers, following RabbitMQ's paths and JSON shapes (sync, no I/O).

Each handler takes the context (``broker`` and ``version``), the ``Request`` and the path
parameters, checks the user's tags/permissions, calls the broker and returns a ``Response``.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from typing import Annotated, Any, Protocol
from urllib.parse import unquote

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from headrace.exchanges import DestinationKind
from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.auth import Permission, User
from headrace.server.broker import Broker, Settle, VHost
from headrace.server.broker.core import MIRROR_BACKLOG_MAX
from headrace.server.broker.definitions_io import export_definitions, import_definitions

from .consume import HTTPConsumer, properties_json
from .definitions_body import DefinitionsBody
from .metrics import render_metrics
from .rates import FIELDS, RateTracker
from .routes import HTTPError, Request, Response, Router, json_response

__all__ = ["Context", "router"]


class Context(Protocol):
    broker: Broker
    version: str
    now: float  # the time of the request (the shell stamps it; handlers never read the clock)
    http_consumers: dict[str, Any]
    rates: RateTracker
    metrics: str  # the ``metrics`` setting: off | aggregate | per-queue

    def store_bytes(self) -> int: ...


# ---------------------------------------------------------------------- request bodies
def _flag(value: Any) -> Any:
    """RabbitMQ's ``parse_bool``: true/false or the strings "true"/"false"; anything else ("yes", 1)
    is a 400 rather than pydantic's lax reading of it as a bool."""
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    raise ValueError(f"{value!r} is not a boolean (true or false)")


Flag = Annotated[bool, BeforeValidator(_flag)]


def _object_name(value: str) -> str:
    """``.`` and ``..`` are path segments that clients and proxies resolve away, so a queue or
    exchange of that name could never be addressed by a URL again."""
    if value in (".", ".."):
        raise HTTPError(400, "bad_request", f"'{value}' is not a valid queue or exchange name")
    return value


class ExchangeBody(BaseModel):
    type: str = "direct"
    durable: Flag = True
    auto_delete: Flag = False
    internal: Flag = False
    arguments: dict[str, Any] = Field(default_factory=dict)


class QueueBody(BaseModel):
    durable: Flag = True
    auto_delete: Flag = False
    arguments: dict[str, Any] = Field(default_factory=dict)


class BindingBody(BaseModel):
    routing_key: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)


class PropertiesBody(BaseModel):
    """Message properties of a publish, typed as AMQP carries them: a wrong type is a 400, not a
    failure while encoding. Header values ``{"$base64": "..."}`` become byte arrays."""
    model_config = ConfigDict(extra="forbid", strict=True)
    content_type: str | None = Field(None, max_length=255)
    content_encoding: str | None = Field(None, max_length=255)
    headers: dict[str, Any] | None = None
    delivery_mode: int | None = Field(None, ge=1, le=2)
    priority: int | None = Field(None, ge=0, le=255)
    correlation_id: str | None = Field(None, max_length=255)
    reply_to: str | None = Field(None, max_length=255)
    expiration: str | None = Field(None, max_length=255)
    message_id: str | None = Field(None, max_length=255)
    timestamp: int | None = Field(None, ge=0, lt=1 << 63)
    type: str | None = Field(None, max_length=255)
    user_id: str | None = Field(None, max_length=255)
    app_id: str | None = Field(None, max_length=255)
    cluster_id: str | None = Field(None, max_length=255)


def _from_json_value(value: Any) -> Any:
    """Inverse of ``consume.json_value`` for byte arrays: ``{"$base64": "..."}`` -> bytes."""
    if isinstance(value, dict):
        if set(value) == {"$base64"} and isinstance(value["$base64"], str):
            try:
                return base64.b64decode(value["$base64"], validate=True)
            except binascii.Error:
                raise HTTPError(400, "bad_request", "a $base64 header value is not valid base64") from None
        return {k: _from_json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json_value(v) for v in value]
    return value


def _validation_reason(exc: ValidationError) -> str:
    """One line per problem, e.g. ``properties.priority: Input should be a valid integer``."""
    return "; ".join(".".join(str(p) for p in e["loc"]) + ": " + e["msg"] for e in exc.errors(include_url=False))


class PublishBody(BaseModel):
    routing_key: str = ""
    payload: str = ""
    payload_encoding: str = "string"  # or base64
    properties: dict[str, Any] = Field(default_factory=dict)


class GetBody(BaseModel):
    count: int = Field(1, ge=1, le=10_000)
    ackmode: str = "ack_requeue_true"
    encoding: str = "auto"
    truncate: int | None = Field(None, ge=0)


class UserBody(BaseModel):
    password: str | None = None
    password_hash: str | None = None
    tags: str | list[str] = ""


class PermissionBody(BaseModel):
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


class MirrorBody(BaseModel):
    max_age_ms: int | None = Field(None, ge=1)
    max_bytes: int | None = Field(None, ge=1)


# ---------------------------------------------------------------------- helpers
def _user(req: Request) -> User:
    assert req.user is not None
    return req.user


def _require(req: Request, *, admin: bool = False, monitor: bool = False) -> None:
    user = _user(req)
    if not user.can_manage:  # RabbitMQ: 401, as for a failed login (the user may not use the API at all)
        raise HTTPError(401, "not_authorised", "Not management user")
    if admin and not user.is_administrator:
        raise HTTPError(403, "not_authorised", "Not administrator user")
    if monitor and not user.can_monitor:
        raise HTTPError(403, "not_authorised", "Not monitor user")


def _vhost(ctx: Context, req: Request, name: str) -> VHost:
    vhost = ctx.broker.vhost(name)
    if vhost is None:
        raise HTTPError(404, "not_found", f"vhost '{name}' not found")
    if not _user(req).is_administrator and ctx.broker.users.permission(_user(req).name, name) is None:
        raise HTTPError(403, "not_authorised", f"access to vhost '{name}' refused")
    return vhost


def _perm(ctx: Context, req: Request, vhost: str, kind: str, name: str) -> None:
    if not ctx.broker.users.allowed(_user(req).name, vhost, kind, name):
        raise HTTPError(403, "access_refused", f"{kind} access to '{name}' in vhost '{vhost}' refused for "
                                               f"user '{_user(req).name}'")


MAX_PAGE_SIZE = 500


def _require_reader(req: Request) -> None:
    """Reading message contents over HTTP needs the administrator or management tag: monitoring
    and policymaker only grant visibility of stats (then the queue's read permission applies)."""
    if not {"administrator", "management"} & set(_user(req).tags):
        raise HTTPError(403, "not_authorised", "reading messages needs the management or administrator tag")


def _page(req: Request, items: list[Any]) -> Response:
    page = req.arg("page")
    if page is None:
        return json_response(200, items)
    try:
        number = max(1, int(page))
        size = max(1, int(req.arg("page_size", "100") or 100))
    except ValueError:
        raise HTTPError(400, "bad_request", "page and page_size must be integers") from None
    if size > MAX_PAGE_SIZE:  # RabbitMQ refuses rather than silently capping
        raise HTTPError(400, "bad_request", f"page_size must be <= {MAX_PAGE_SIZE}")
    chunk = items[(number - 1) * size:number * size]
    return json_response(200, {"items": chunk, "page": number, "page_size": size,
                               "page_count": (len(items) + size - 1) // size, "total_count": len(items),
                               "item_count": len(chunk), "filtered_count": len(items)})


def _message_stats(ctx: Context, key: tuple[str, str], owner: object, counts: tuple[int, ...]) -> dict[str, Any]:
    """Counters with their rates, in RabbitMQ's shape: ``publish`` and ``publish_details: {"rate"}``."""
    rates = ctx.rates.sample(key, owner, counts, ctx.now)
    out: dict[str, Any] = {}
    for (_, name), count in zip(FIELDS, counts, strict=True):
        out[name] = count
        out[name + "_details"] = {"rate": rates[name]}
    return out


def _queue_json(ctx: Context, vhost: VHost, name: str) -> dict[str, Any]:
    q = vhost.queues[name]
    s = q.stats
    return {
        "name": name, "vhost": vhost.name, "durable": q.durable, "auto_delete": q.auto_delete,
        "exclusive": q.exclusive_owner is not None, "arguments": q.arguments, "type": "classic",
        "messages": q.messages_ready + q.messages_unacked, "messages_ready": q.messages_ready,
        "messages_unacknowledged": q.messages_unacked, "consumers": q.consumer_count,
        "message_bytes_ready": q.message_bytes_ready, "memory": q.memory,
        "message_bytes_unacknowledged": q.message_bytes_unacked,
        "spilled": q.spilled_count(),
        "message_stats": _message_stats(ctx, (vhost.name, name), q, tuple(getattr(s, f) for f, _ in FIELDS)),
        "state": "running",
    }


def _exchange_json(vhost: VHost, name: str) -> dict[str, Any]:
    ex = vhost.exchanges[name]
    return {"name": name, "vhost": vhost.name, "type": vhost.exchange_type(name), "durable": ex.durable,
            "auto_delete": ex.auto_delete, "internal": ex.internal, "arguments": ex.arguments,
            "mirrored": name in vhost.mirrored}


def _visible_vhosts(ctx: Context, req: Request) -> list[VHost]:
    user = _user(req)
    return [v for n, v in ctx.broker.vhosts.items()
            if user.is_administrator or ctx.broker.users.permission(user.name, n) is not None]


# ---------------------------------------------------------------------- overview and listings
def overview(ctx: Context, req: Request) -> Response:
    """Totals over the vhosts the user can see (all of them for an administrator), as RabbitMQ's."""
    _require(req)
    b = ctx.broker
    user = _user(req)
    vhosts = _visible_vhosts(ctx, req)
    names = {v.name for v in vhosts}
    queues = [q for v in vhosts for q in v.queues.values()]
    sessions = [s for s in b.connections.values() if s.user is not None and s.vhost.name in names
                and (user.can_monitor or s.user.name == user.name)]
    rate_key = ("", "") if user.is_administrator else ("", "user:" + user.name)
    return json_response(200, {
        "product_name": "headrace", "product_version": ctx.version, "management_version": ctx.version,
        "node": "headrace@localhost",
        "object_totals": {"connections": len(sessions), "channels": sum(len(s.channels) for s in sessions),
                          "exchanges": sum(len(v.exchanges) for v in vhosts), "queues": len(queues),
                          "consumers": sum(q.consumer_count for q in queues)},
        "queue_totals": {"messages": sum(q.messages_ready + q.messages_unacked for q in queues),
                         "messages_ready": sum(q.messages_ready for q in queues),
                         "messages_unacknowledged": sum(q.messages_unacked for q in queues)},
        "message_stats": _message_stats(ctx, rate_key, ctx.rates,
                                        tuple(sum(getattr(q.stats, f) for q in queues) for f, _ in FIELDS)),
        "alarms": sorted(b.alarms), "mem_used": b.memory_used, "mem_rss": b.memory_rss,
        "disk_free": b.disk_free,
    })


def whoami(ctx: Context, req: Request) -> Response:
    _require(req)
    user = _user(req)
    return json_response(200, {"name": user.name, "tags": list(user.tags)})


def _vhost_json(v: VHost) -> dict[str, Any]:
    ready = sum(q.messages_ready for q in v.queues.values())
    unacked = sum(q.messages_unacked for q in v.queues.values())
    return {"name": v.name, "description": "", "tags": [], "tracing": False, "messages": ready + unacked,
            "messages_ready": ready, "messages_unacknowledged": unacked}


def list_vhosts(ctx: Context, req: Request) -> Response:
    _require(req)
    return _page(req, [_vhost_json(v) for v in _visible_vhosts(ctx, req)])


def get_vhost(ctx: Context, req: Request, name: str) -> Response:
    _require(req)
    return json_response(200, _vhost_json(_vhost(ctx, req, name)))


def put_vhost(ctx: Context, req: Request, name: str) -> Response:
    _require(req, admin=True)
    existed = name in ctx.broker.vhosts
    ctx.broker.add_vhost(name)
    if not existed and ctx.broker.users.permission(_user(req).name, name) is None:
        # as RabbitMQ's management plugin does, the creator gets full permissions on a new vhost
        ctx.broker.users.set_permission(_user(req).name, name, Permission())
        ctx.broker.definitions_changed()
    return Response(204 if existed else 201)


def delete_vhost(ctx: Context, req: Request, name: str) -> Response:
    _require(req, admin=True)
    if not ctx.broker.delete_vhost(name):
        raise HTTPError(404, "not_found", f"vhost '{name}' not found")
    return Response(204)


def list_queues(ctx: Context, req: Request, vhost: str | None = None) -> Response:
    _require(req)
    vhosts = [_vhost(ctx, req, vhost)] if vhost is not None else _visible_vhosts(ctx, req)
    if vhost is None:
        ctx.rates.forget({(n, q) for n, v in ctx.broker.vhosts.items() for q in v.queues})
    return _page(req, [_queue_json(ctx, v, n) for v in vhosts for n in sorted(v.queues)])


def get_queue(ctx: Context, req: Request, vhost: str, name: str) -> Response:
    _require(req)
    v = _vhost(ctx, req, vhost)
    v.get_queue(name)
    return json_response(200, _queue_json(ctx, v, name))


def put_queue(ctx: Context, req: Request, vhost: str, name: str) -> Response:
    _require(req)
    v = _vhost(ctx, req, vhost)
    _perm(ctx, req, vhost, "configure", name)
    _object_name(name)
    body = QueueBody.model_validate(req.json())
    existed = name in v.queues
    v.declare_queue(name, owner=None, now=ctx.now, durable=body.durable, auto_delete=body.auto_delete, arguments=body.arguments)
    return Response(204 if existed else 201)


def delete_queue(ctx: Context, req: Request, vhost: str, name: str) -> Response:
    _require(req)
    v = _vhost(ctx, req, vhost)
    _perm(ctx, req, vhost, "configure", name)
    v.get_queue(name)
    v.delete_queue(name, if_unused=req.arg("if-unused") == "true", if_empty=req.arg("if-empty") == "true")
    return Response(204)


def purge_queue(ctx: Context, req: Request, vhost: str, name: str) -> Response:
    _require(req)
    v = _vhost(ctx, req, vhost)
    _perm(ctx, req, vhost, "read", name)
    before = ctx.broker.store_ticket
    v.purge_queue(name, None)
    response = Response(204)
    if ctx.broker.store_ticket > before:
        response.wait_ticket = ctx.broker.store_ticket  # answered once the purge is fsynced
    return response


def get_messages(ctx: Context, req: Request, vhost: str, name: str) -> Response:
    _require(req)
    v = _vhost(ctx, req, vhost)
    _require_reader(req)
    _perm(ctx, req, vhost, "read", name)
    body = GetBody.model_validate(req.json())
    queue = v.get_queue(name)
    v.check_exclusive(queue, None)
    if body.ackmode not in ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false"):
        raise HTTPError(400, "bad_request", f"invalid ackmode '{body.ackmode}'")
    if body.encoding not in ("auto", "base64"):
        raise HTTPError(400, "bad_request", f"invalid encoding '{body.encoding}' (auto or base64)")
    owner = object()
    taken = []
    out = []
    for _ in range(body.count):
        entry = ctx.broker.delivery.get(v, queue, ctx.now, no_ack=False, owner=owner)
        if entry is None:
            break
        taken.append(entry)
        msg = entry.message
        payload = msg.body if body.truncate is None else msg.body[:body.truncate]
        if body.encoding == "base64":
            text, encoding = base64.b64encode(payload).decode(), "base64"
        else:
            try:
                text, encoding = payload.decode(), "string"
            except UnicodeDecodeError:
                text, encoding = base64.b64encode(payload).decode(), "base64"
        out.append({"payload": text, "payload_encoding": encoding, "payload_bytes": len(msg.body),
                    "redelivered": entry.redelivered, "exchange": msg.exchange, "routing_key": msg.routing_key,
                    "message_count": queue.messages_ready, "properties": properties_json(msg.props_raw)})
    if body.ackmode.endswith("requeue_true"):
        action = Settle.REQUEUE
    else:
        action = Settle.REJECT if body.ackmode.startswith("reject") else Settle.ACK
    ctx.broker.delivery.settle(v, [(queue, entry) for entry in taken], action, ctx.now)
    return json_response(200, out)


def list_exchanges(ctx: Context, req: Request, vhost: str | None = None) -> Response:
    _require(req)
    vhosts = [_vhost(ctx, req, vhost)] if vhost is not None else _visible_vhosts(ctx, req)
    return _page(req, [_exchange_json(v, n) for v in vhosts for n in sorted(v.exchanges)])


def get_exchange(ctx: Context, req: Request, vhost: str, name: str) -> Response:
    _require(req)
    v = _vhost(ctx, req, vhost)
    v.get_exchange(name)
    return json_response(200, _exchange_json(v, name))


def put_exchange(ctx: Context, req: Request, vhost: str, name: str) -> Response:
    _require(req)
    v = _vhost(ctx, req, vhost)
    _perm(ctx, req, vhost, "configure", name)
    _object_name(name)
    body = ExchangeBody.model_validate(req.json())
    existed = name in v.exchanges
    v.declare_exchange(name, body.type, durable=body.durable, auto_delete=body.auto_delete,
                       internal=body.internal, arguments=body.arguments)
    return Response(204 if existed else 201)


def delete_exchange(ctx: Context, req: Request, vhost: str, name: str) -> Response:
    _require(req)
    v = _vhost(ctx, req, vhost)
    _perm(ctx, req, vhost, "configure", name)
    v.get_exchange(name)
    v.delete_exchange(name, if_unused=req.arg("if-unused") == "true")
    return Response(204)


def publish(ctx: Context, req: Request, vhost: str, name: str) -> Response:
    _require(req)
    v = _vhost(ctx, req, vhost)
    _perm(ctx, req, vhost, "write", name)  # the default exchange as amq.default, as over AMQP (RabbitMQ)
    _publishing_allowed(ctx)
    body = PublishBody.model_validate(req.json())
    if name == "amq.default":  # the management API's name for the default exchange
        name = ""
    payload, props_raw = _message_body(body)
    result = ctx.broker.delivery.publish(v, name, body.routing_key, props_raw, payload, ctx.now)
    response = json_response(200, {"routed": result.routed})
    response.wait_ticket = result.ticket
    return response


def _message_body(body: PublishBody) -> tuple[bytes, bytes]:
    if body.payload_encoding == "base64":
        try:
            payload = base64.b64decode(body.payload, validate=True)
        except binascii.Error:
            raise HTTPError(400, "bad_request", "payload is not valid base64") from None
    elif body.payload_encoding == "string":
        payload = body.payload.encode()
    else:
        raise HTTPError(400, "bad_request", f"invalid payload_encoding '{body.payload_encoding}'")
    unknown = set(body.properties) - set(BasicProperties.__dataclass_fields__)
    if unknown:
        raise HTTPError(400, "bad_request", f"unknown properties: {', '.join(sorted(unknown))}")
    try:
        props = PropertiesBody.model_validate(body.properties)
    except ValidationError as exc:
        raise HTTPError(400, "bad_request", "properties." + _validation_reason(exc)) from None
    fields = props.model_dump(exclude_none=True)
    if "headers" in fields:
        fields["headers"] = _from_json_value(fields["headers"])
    return payload, encode_properties(BasicProperties(**fields))


def _publishing_allowed(ctx: Context) -> None:
    """503 + Retry-After where AMQP would stop reading a publisher: an alarm, or the mirror writer or
    the message store too far behind (the backlog bounds AMQP sessions respect)."""
    if ctx.broker.alarms:
        raise HTTPError(503, "service_unavailable", f"publishing blocked: {', '.join(sorted(ctx.broker.alarms))} alarm",
                        [("retry-after", "1")])
    if ctx.broker.mirror_backlog >= MIRROR_BACKLOG_MAX:
        raise HTTPError(503, "service_unavailable", "publishing paused: the mirror writer is behind",
                        [("retry-after", "1")])
    if ctx.broker.store_backlog >= ctx.broker.store_backlog_max:
        raise HTTPError(503, "service_unavailable", "publishing paused: the message store is behind",
                        [("retry-after", "1")])


MAX_BATCH = 10_000  # messages per publish-batch request


def publish_batch(ctx: Context, req: Request, vhost: str, name: str) -> Response:
    """NDJSON in, one result per line out (like NSQ's /mpub); answered after the fsync that covers
    the persistent ones."""
    _require(req)
    v = _vhost(ctx, req, vhost)
    exchange = "" if name == "amq.default" else name
    _perm(ctx, req, vhost, "write", name)  # the default exchange as amq.default, as over AMQP (RabbitMQ)
    _publishing_allowed(ctx)
    lines = [line for line in req.body.splitlines() if line.strip()]
    if len(lines) > MAX_BATCH:
        raise HTTPError(413, "payload_too_large", f"at most {MAX_BATCH} messages per batch")
    parsed = []
    for number, line in enumerate(lines, 1):
        try:
            message = PublishBody.model_validate_json(line)
            parsed.append((*_message_body(message), message))
        except HTTPError as exc:
            raise HTTPError(400, "bad_request", f"line {number}: {exc.reason}") from None
        except ValidationError as exc:
            raise HTTPError(400, "bad_request", f"line {number}: {_validation_reason(exc)}") from None
        except ValueError as exc:
            raise HTTPError(400, "bad_request", f"line {number}: {exc}") from None
    results = []
    ticket = 0
    for payload, props_raw, body in parsed:
        result = ctx.broker.delivery.publish(v, exchange, body.routing_key, props_raw, payload, ctx.now)
        ticket = max(ticket, result.ticket)
        results.append({"routed": result.routed, "confirmed": not result.rejected})
    response = json_response(200, {"results": results, "published": len(results)})
    response.wait_ticket = ticket
    return response


def consume(ctx: Context, req: Request, vhost: str, name: str) -> Response:
    """Start a streaming consumer; the shell streams its deliveries (NDJSON, one per line)."""
    _require(req)
    v = _vhost(ctx, req, vhost)
    _require_reader(req)
    _perm(ctx, req, vhost, "read", name)
    queue = v.get_queue(name)
    v.check_exclusive(queue, None)
    try:
        prefetch = int(req.arg("prefetch", "10") or 10)
    except ValueError:
        raise HTTPError(400, "bad_request", "prefetch must be an integer") from None
    consumer = HTTPConsumer(ctx.broker.delivery, v, queue, prefetch, lambda: None, user=_user(req).name)
    response = Response(200, content_type="application/x-ndjson")
    response.stream = consumer
    return response


class SettleBody(BaseModel):
    delivery_ids: list[int]
    action: str = "ack"  # ack | nack | reject
    requeue: bool = True


def settle(ctx: Context, req: Request, tag: str) -> Response:
    _require(req)
    consumer = ctx.http_consumers.get(tag)
    if consumer is None or consumer.closed:
        raise HTTPError(404, "not_found", f"no HTTP consumer '{tag}'")
    if consumer.user != _user(req).name and not _user(req).is_administrator:
        raise HTTPError(403, "access_refused", f"consumer '{tag}' belongs to another user")
    body = SettleBody.model_validate(req.json())
    if body.action not in ("ack", "nack", "reject"):
        raise HTTPError(400, "bad_request", f"invalid action '{body.action}'")
    unknown = consumer.settle(body.delivery_ids, body.action, body.requeue, ctx.now)
    if unknown:
        raise HTTPError(406, "precondition_failed", f"unknown delivery ids {unknown}")
    return Response(204)


def close_connection(ctx: Context, req: Request, name: str) -> Response:
    _require(req, admin=True)
    for session in list(ctx.broker.connections.values()):
        label = f"{session.peer[0]}:{session.peer[1]} -> headrace ({session.id})"
        if name in (str(session.id), label):
            session.close_by_admin(req.headers.get("x-reason", "Closed via management API"))
            return Response(204)
    raise HTTPError(404, "not_found", f"connection '{name}' not found")


def list_bindings(ctx: Context, req: Request, vhost: str | None = None) -> Response:
    _require(req)
    vhosts = [_vhost(ctx, req, vhost)] if vhost is not None else _visible_vhosts(ctx, req)
    return _page(req, [{"source": b.source, "vhost": v.name, "destination": b.destination,
                        "destination_type": b.kind.value, "routing_key": b.routing_key,
                        "arguments": b.arguments_dict(), "properties_key": b.properties_key}
                       for v in vhosts for b in v.bindings()])


def _bind(ctx: Context, req: Request, vhost: str, source: str, dest: str, kind: DestinationKind) -> Response:
    _require(req)
    v = _vhost(ctx, req, vhost)
    _perm(ctx, req, vhost, "write", dest)
    _perm(ctx, req, vhost, "read", source)
    body = BindingBody.model_validate(req.json())
    v.bind(source, dest, kind, body.routing_key, body.arguments)
    from headrace.exchanges import Binding

    key = Binding.make(source, dest, kind, body.routing_key, body.arguments).properties_key
    letter = "q" if kind is DestinationKind.QUEUE else "e"
    return Response(201, headers=[("location", f"/api/bindings/{_q(vhost)}/e/{_q(source)}/{letter}/{_q(dest)}/{key}")])


def _unbind(ctx: Context, req: Request, vhost: str, source: str, dest: str, props: str,
            kind: DestinationKind) -> Response:
    _require(req)
    v = _vhost(ctx, req, vhost)
    _perm(ctx, req, vhost, "write", dest)
    _perm(ctx, req, vhost, "read", source)  # as bind (and RabbitMQ's queue.unbind) checks
    for b in v.exchanges.get(source, None).bindings() if source in v.exchanges else []:
        if b.destination == dest and b.kind is kind and props in (b.properties_key, unquote(b.properties_key)):
            v.unbind(source, dest, kind, b.routing_key, b.arguments_dict())
            return Response(204)
    raise HTTPError(404, "not_found", "binding not found")


def _q(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def get_definitions(ctx: Context, req: Request) -> Response:
    _require(req, admin=True)
    return json_response(200, export_definitions(ctx.broker, version=ctx.version))


def post_definitions(ctx: Context, req: Request) -> Response:
    _require(req, admin=True)
    body = DefinitionsBody.model_validate(req.json())
    import_definitions(ctx.broker, body.document(), ctx.now)
    return Response(204)


def _user_json(u: User) -> dict[str, Any]:
    return {"name": u.name, "tags": list(u.tags), "hashing_algorithm": "pbkdf2_sha256", "limits": {}}


def list_users(ctx: Context, req: Request) -> Response:
    _require(req, admin=True)
    return _page(req, [_user_json(u) for u in ctx.broker.users.users.values()])


def get_user(ctx: Context, req: Request, name: str) -> Response:
    _require(req, admin=True)
    user = ctx.broker.users.users.get(name)
    if user is None:
        raise HTTPError(404, "not_found", f"user '{name}' not found")
    return json_response(200, _user_json(user))


def put_user(ctx: Context, req: Request, name: str) -> Response:
    _require(req, admin=True)
    body = UserBody.model_validate(req.json())
    tags = body.tags.split(",") if isinstance(body.tags, str) else body.tags
    existed = name in ctx.broker.users.users
    ctx.broker.users.add_user(name, body.password, [t for t in tags if t], password_hash=body.password_hash)
    ctx.broker.definitions_changed()
    return Response(204 if existed else 201)


def delete_user(ctx: Context, req: Request, name: str) -> Response:
    _require(req, admin=True)
    if not ctx.broker.users.delete_user(name):
        raise HTTPError(404, "not_found", f"user '{name}' not found")
    ctx.broker.definitions_changed()
    return Response(204)


def list_permissions(ctx: Context, req: Request) -> Response:
    _require(req, admin=True)
    return _page(req, [{"user": u, "vhost": v, "configure": p.configure, "write": p.write, "read": p.read}
                       for (u, v), p in ctx.broker.users.permissions.items()])


def get_permission(ctx: Context, req: Request, vhost: str, user: str) -> Response:
    _require(req, admin=True)
    p = ctx.broker.users.permission(user, vhost)
    if p is None:
        raise HTTPError(404, "not_found", f"no permissions for user '{user}' in vhost '{vhost}'")
    return json_response(200, {"user": user, "vhost": vhost, "configure": p.configure, "write": p.write,
                               "read": p.read})


def put_permission(ctx: Context, req: Request, vhost: str, user: str) -> Response:
    _require(req, admin=True)
    if vhost not in ctx.broker.vhosts:
        raise HTTPError(404, "not_found", f"vhost '{vhost}' not found")
    if user not in ctx.broker.users.users:
        raise HTTPError(404, "not_found", f"user '{user}' not found")
    body = PermissionBody.model_validate(req.json())
    existed = ctx.broker.users.permission(user, vhost) is not None
    ctx.broker.users.set_permission(user, vhost, Permission(body.configure, body.write, body.read))
    ctx.broker.definitions_changed()
    return Response(204 if existed else 201)


def delete_permission(ctx: Context, req: Request, vhost: str, user: str) -> Response:
    _require(req, admin=True)
    if not ctx.broker.users.clear_permission(user, vhost):
        raise HTTPError(404, "not_found", "permission not found")
    ctx.broker.definitions_changed()
    return Response(204)


def list_connections(ctx: Context, req: Request) -> Response:
    _require(req)
    user = _user(req)
    return _page(req, [{"name": f"{s.peer[0]}:{s.peer[1]} -> headrace ({s.id})", "id": s.id, "user": s.user.name,
                        "vhost": s.vhost.name, "peer_host": s.peer[0], "peer_port": s.peer[1],
                        "channels": len(s.channels), "client_properties": _safe(s.client_properties)}
                       for s in ctx.broker.connections.values()
                       if s.user is not None and (user.can_monitor or s.user.name == user.name)])


def list_channels(ctx: Context, req: Request) -> Response:
    _require(req)
    user = _user(req)
    rows = []
    for s in ctx.broker.connections.values():
        if s.user is None or not (user.can_monitor or s.user.name == user.name):
            continue
        for ch in s.channels.values():
            rows.append({"name": f"{s.peer[0]}:{s.peer[1]} ({ch.id})", "connection": s.id, "number": ch.id,
                         "user": s.user.name, "vhost": s.vhost.name, "consumer_count": len(ch.consumers),
                         "messages_unacknowledged": len(ch.unacked), "prefetch_count": ch.prefetch_count,
                         "global_prefetch_count": ch.global_prefetch, "confirm": ch.confirm,
                         "transactional": ch.tx})
    return _page(req, rows)


def list_consumers(ctx: Context, req: Request, vhost: str | None = None) -> Response:
    _require(req)
    vhosts = [_vhost(ctx, req, vhost)] if vhost is not None else _visible_vhosts(ctx, req)
    rows = []
    for v in vhosts:
        for qname, q in v.queues.items():
            for c in q.consumers():
                rows.append({"consumer_tag": c.tag, "queue": {"name": qname, "vhost": v.name},
                             "ack_required": not c.no_ack, "prefetch_count": c.prefetch, "exclusive": c.exclusive,
                             "priority": c.priority, "channel": c.channel_id, "unacked": c.unacked})
    return _page(req, rows)


def _safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_safe(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def alarms(ctx: Context, req: Request) -> Response:
    _require(req)
    if ctx.broker.alarms:
        return json_response(503, {"status": "failed", "reason": f"alarms in effect: {', '.join(sorted(ctx.broker.alarms))}"})
    return json_response(200, {"status": "ok"})


ALIVENESS_QUEUE = "aliveness-test"


def aliveness(ctx: Context, req: Request, vhost: str) -> Response:
    """RabbitMQ's aliveness test: declare, publish, get. The caller needs the rights those use on
    ``aliveness-test`` (401 otherwise, as RabbitMQ answers). The round trip runs through a queue of
    its own, declared and deleted within this one synchronous call, so it never takes a message
    somebody else published to ``aliveness-test``."""
    _require(req)
    v = _vhost(ctx, req, vhost)
    user = _user(req)
    for kind in ("configure", "write", "read"):
        if not ctx.broker.users.allowed(user.name, vhost, kind, ALIVENESS_QUEUE):
            raise HTTPError(401, "not_authorised", f"{kind} access to '{ALIVENESS_QUEUE}' in vhost '{vhost}' "
                                                   f"refused for user '{user.name}'")
    name = f"{ALIVENESS_QUEUE}.{secrets.token_hex(8)}"
    token = secrets.token_bytes(16)
    queue = v.declare_queue(name, owner=None, now=ctx.now, durable=False)
    try:
        ctx.broker.delivery.publish(v, "", name, encode_properties(BasicProperties()), token, ctx.now)
        entry = ctx.broker.delivery.get(v, queue, ctx.now, no_ack=True, owner=None)
        ok = entry is not None and entry.message.body == token
    finally:
        v.delete_queue(name)
    return json_response(200 if ok else 500, {"status": "ok" if ok else "failed"})


def list_mirrors(ctx: Context, req: Request) -> Response:
    _require(req)
    out = []
    for v in _visible_vhosts(ctx, req):
        for name in sorted(v.mirrored):
            age, size = v.mirror_retention.get(name, (None, None))
            out.append({"vhost": v.name, "exchange": name, "max_age_ms": age, "max_bytes": size})
    return json_response(200, out)


def put_mirror(ctx: Context, req: Request, vhost: str, name: str) -> Response:
    _require(req)
    v = _vhost(ctx, req, vhost)
    _perm(ctx, req, vhost, "configure", name)
    body = MirrorBody.model_validate(req.json())
    v.set_mirror(name, True, max_age_ms=body.max_age_ms, max_bytes=body.max_bytes)
    return Response(204)


def delete_mirror(ctx: Context, req: Request, vhost: str, name: str) -> Response:
    _require(req)
    v = _vhost(ctx, req, vhost)
    _perm(ctx, req, vhost, "configure", name)
    v.set_mirror(name, False)
    return Response(204)


def metrics(ctx: Context, req: Request) -> Response:
    """Open to scrapers without credentials, so off unless the ``metrics`` setting says otherwise."""
    if ctx.metrics == "off":
        raise HTTPError(404, "not_found", "metrics are off (the 'metrics' setting: aggregate or per-queue)")
    text = render_metrics(ctx.broker, store_bytes=ctx.store_bytes(), per_queue=ctx.metrics == "per-queue")
    return Response(200, text.encode(), content_type="text/plain; version=0.0.4")


router = Router()
_r = router.add
_r("GET", "/api/overview", overview)
_r("GET", "/api/whoami", whoami)
_r("GET", "/api/vhosts", list_vhosts)
_r("GET", "/api/vhosts/{name}", get_vhost)
_r("PUT", "/api/vhosts/{name}", put_vhost)
_r("DELETE", "/api/vhosts/{name}", delete_vhost)
_r("GET", "/api/queues", list_queues)
_r("GET", "/api/queues/{vhost}", list_queues)
_r("GET", "/api/queues/{vhost}/{name}", get_queue)
_r("PUT", "/api/queues/{vhost}/{name}", put_queue)
_r("DELETE", "/api/queues/{vhost}/{name}", delete_queue)
_r("DELETE", "/api/queues/{vhost}/{name}/contents", purge_queue)
_r("POST", "/api/queues/{vhost}/{name}/get", get_messages)
_r("GET", "/api/exchanges", list_exchanges)
_r("GET", "/api/exchanges/{vhost}", list_exchanges)
_r("GET", "/api/exchanges/{vhost}/{name}", get_exchange)
_r("PUT", "/api/exchanges/{vhost}/{name}", put_exchange)
_r("DELETE", "/api/exchanges/{vhost}/{name}", delete_exchange)
_r("POST", "/api/exchanges/{vhost}/{name}/publish", publish)
_r("GET", "/api/bindings", list_bindings)
_r("GET", "/api/bindings/{vhost}", list_bindings)
router.add("POST", "/api/bindings/{vhost}/e/{source}/q/{dest}",
           lambda ctx, req, vhost, source, dest: _bind(ctx, req, vhost, source, dest, DestinationKind.QUEUE))
router.add("POST", "/api/bindings/{vhost}/e/{source}/e/{dest}",
           lambda ctx, req, vhost, source, dest: _bind(ctx, req, vhost, source, dest, DestinationKind.EXCHANGE))
router.add("DELETE", "/api/bindings/{vhost}/e/{source}/q/{dest}/{props}",
           lambda ctx, req, vhost, source, dest, props: _unbind(ctx, req, vhost, source, dest, props,
                                                               DestinationKind.QUEUE))
router.add("DELETE", "/api/bindings/{vhost}/e/{source}/e/{dest}/{props}",
           lambda ctx, req, vhost, source, dest, props: _unbind(ctx, req, vhost, source, dest, props,
                                                               DestinationKind.EXCHANGE))
_r("GET", "/api/definitions", get_definitions)
_r("POST", "/api/definitions", post_definitions)
_r("GET", "/api/users", list_users)
_r("GET", "/api/users/{name}", get_user)
_r("PUT", "/api/users/{name}", put_user)
_r("DELETE", "/api/users/{name}", delete_user)
_r("GET", "/api/permissions", list_permissions)
_r("GET", "/api/permissions/{vhost}/{user}", get_permission)
_r("PUT", "/api/permissions/{vhost}/{user}", put_permission)
_r("DELETE", "/api/permissions/{vhost}/{user}", delete_permission)
_r("GET", "/api/connections", list_connections)
_r("DELETE", "/api/connections/{name}", close_connection)
_r("GET", "/api/channels", list_channels)
_r("GET", "/api/consumers", list_consumers)
_r("GET", "/api/consumers/{vhost}", list_consumers)
_r("POST", "/api/exchanges/{vhost}/{name}/publish-batch", publish_batch)
_r("GET", "/api/queues/{vhost}/{name}/consume", consume)
_r("POST", "/api/consumers/{tag}/settle", settle)
_r("GET", "/api/health/checks/alarms", alarms)
_r("GET", "/api/aliveness-test/{vhost}", aliveness)
_r("GET", "/api/mirrors", list_mirrors)
_r("PUT", "/api/mirrors/{vhost}/{name}", put_mirror)
_r("DELETE", "/api/mirrors/{vhost}/{name}", delete_mirror)
_r("GET", "/metrics", metrics)
