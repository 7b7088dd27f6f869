"""Views of one object's relations, as RabbitMQ's API offers them: a vhost's connections, channels
and permissions, a user's permissions, an exchange's or queue's bindings, one binding, one
connection or channel; plus the users without any permission and deleting users in bulk."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from pydantic import BaseModel

from headrace.exchanges import DestinationKind
from headrace.server.broker import VHost

from .listing import page
from .object_json import (binding_json, channel_json, connection_json, connection_name, default_binding_json,
                          exchange_name, visible_sessions)
from .parameters import topic_permissions_json
from .routes import Context, HTTPError, Request, Response, Routes, json_response
from .users import user_json

__all__ = ["routes"]

routes = Routes()
QUEUE, EXCHANGE = {"kind": DestinationKind.QUEUE}, {"kind": DestinationKind.EXCHANGE}


class BulkDeleteBody(BaseModel):
    users: list[str]


def _permissions_json(ctx: Context, *, user: str | None = None, vhost: str | None = None) -> list[dict[str, Any]]:
    return [{"user": u, "vhost": v, "configure": p.configure, "write": p.write, "read": p.read}
            for (u, v), p in sorted(ctx.broker.users.permissions.items())
            if (user is None or u == user) and (vhost is None or v == vhost)]


def _known_user(ctx: Context, name: str) -> None:
    if name not in ctx.broker.users.users:
        raise HTTPError(404, "not_found", f"user '{name}' not found")


# ---------------------------------------------------------------------- a vhost's
@routes.get("/api/vhosts/{vhost}/connections")
def vhost_connections(ctx: Context, req: Request, vhost: VHost) -> Response:
    return page(req, [connection_json(ctx, s) for s in visible_sessions(ctx, req) if s.vhost is vhost])


@routes.get("/api/vhosts/{vhost}/channels")
def vhost_channels(ctx: Context, req: Request, vhost: VHost) -> Response:
    return page(req, [channel_json(ctx, s, ch) for s in visible_sessions(ctx, req) if s.vhost is vhost
                      for ch in s.channels.values()])


@routes.get("/api/vhosts/{vhost}/permissions", admin=True)
def vhost_permissions(ctx: Context, req: Request, vhost: VHost) -> Response:
    return page(req, _permissions_json(ctx, vhost=vhost.name))


@routes.get("/api/vhosts/{vhost}/topic-permissions", admin=True)
def vhost_topic_permissions(ctx: Context, req: Request, vhost: VHost) -> Response:
    return page(req, topic_permissions_json(ctx, vhost=vhost.name))


# ---------------------------------------------------------------------- a user's
@routes.get("/api/users/without-permissions", admin=True)
def users_without_permissions(ctx: Context, req: Request) -> Response:
    users = ctx.broker.users
    granted = {u for u, _ in users.permissions}
    limits = ctx.broker.parameters.user_limits
    return page(req, [user_json(u, limits.get(name)) for name, u in sorted(users.users.items()) if name not in granted])


@routes.post("/api/users/bulk-delete", admin=True)
def bulk_delete_users(ctx: Context, req: Request) -> Response:
    body = BulkDeleteBody.model_validate(req.json())
    for name in body.users:  # RabbitMQ skips names that are not users
        ctx.broker.users.delete_user(name)
    return Response(204)


@routes.get("/api/users/{user}/permissions", admin=True)
def user_permissions(ctx: Context, req: Request, user: str) -> Response:
    _known_user(ctx, user)
    return page(req, _permissions_json(ctx, user=user))


@routes.get("/api/users/{user}/topic-permissions", admin=True)
def user_topic_permissions(ctx: Context, req: Request, user: str) -> Response:
    _known_user(ctx, user)
    return page(req, topic_permissions_json(ctx, user=user))


# ---------------------------------------------------------------------- bindings of one object
@routes.get("/api/exchanges/{vhost}/{name}/bindings/source")
def exchange_bindings_source(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    exchange = exchange_name(name)
    vhost.get_exchange(exchange)
    if not exchange:  # the default exchange: its implicit binding of every queue
        return page(req, [default_binding_json(vhost, queue) for queue in vhost.queues])
    return page(req, [binding_json(vhost, b) for b in vhost.bindings() if b.source == exchange])


@routes.get("/api/exchanges/{vhost}/{name}/bindings/destination")
def exchange_bindings_destination(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    name = exchange_name(name)
    vhost.get_exchange(name)
    return page(req, [binding_json(vhost, b) for b in vhost.bindings()
                      if b.destination == name and b.kind is DestinationKind.EXCHANGE])


@routes.get("/api/queues/{vhost}/{name}/bindings")
def queue_bindings(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    vhost.get_queue(name)
    return page(req, _queue_bindings(vhost, name))


def _queue_bindings(vhost: VHost, name: str) -> list[dict[str, Any]]:
    """The queue's bindings with the default exchange's implicit one first, as RabbitMQ lists them."""
    rows = [binding_json(vhost, b) for b in vhost.bindings()
            if b.destination == name and b.kind is DestinationKind.QUEUE and b.source]
    return [default_binding_json(vhost, name), *rows]


@routes.get("/api/bindings/{vhost}/e/{source}/q/{dest}", params=QUEUE)
@routes.get("/api/bindings/{vhost}/e/{source}/e/{dest}", params=EXCHANGE)
def bindings_between(ctx: Context, req: Request, vhost: VHost, source: str, dest: str,
                     kind: DestinationKind) -> Response:
    return page(req, _between(vhost, source, dest, kind))


@routes.get("/api/bindings/{vhost}/e/{source}/q/{dest}/{props}", params=QUEUE)
@routes.get("/api/bindings/{vhost}/e/{source}/e/{dest}/{props}", params=EXCHANGE)
def get_binding(ctx: Context, req: Request, vhost: VHost, source: str, dest: str, props: str,
                kind: DestinationKind) -> Response:
    for row in _between(vhost, source, dest, kind):
        if props in (row["properties_key"], unquote(row["properties_key"])):
            return json_response(200, row)
    raise HTTPError(404, "not_found", "binding not found")


def _between(vhost: VHost, source: str, dest: str, kind: DestinationKind) -> list[dict[str, Any]]:
    source = exchange_name(source)
    vhost.get_exchange(source)
    if kind is DestinationKind.QUEUE:
        vhost.get_queue(dest)  # 404 for a missing queue (RabbitMQ invents amq.default's binding of it)
        if not source:
            return [default_binding_json(vhost, dest)]
    else:
        vhost.get_exchange(dest)
    return [binding_json(vhost, b) for b in vhost.bindings()
            if b.source == source and b.destination == dest and b.kind is kind]


# ---------------------------------------------------------------------- one connection or channel
def _session(ctx: Context, req: Request, name: str) -> Any:
    for s in visible_sessions(ctx, req):
        if name in (str(s.id), connection_name(s)):
            return s
    raise HTTPError(404, "not_found", f"connection '{name}' not found")


@routes.get("/api/connections/{name}")
def get_connection(ctx: Context, req: Request, name: str) -> Response:
    return json_response(200, connection_json(ctx, _session(ctx, req, name)))


@routes.get("/api/connections/{name}/channels")
def connection_channels(ctx: Context, req: Request, name: str) -> Response:
    s = _session(ctx, req, name)
    return page(req, [channel_json(ctx, s, ch) for ch in s.channels.values()])


@routes.get("/api/channels/{name}")
def get_channel(ctx: Context, req: Request, name: str) -> Response:
    for s in visible_sessions(ctx, req):
        for ch in s.channels.values():
            row = channel_json(ctx, s, ch, detailed=True)
            if name == row["name"]:
                return json_response(200, row)
    raise HTTPError(404, "not_found", f"channel '{name}' not found")
