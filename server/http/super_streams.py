"""``/api/super-streams``: add, delete and list super streams with their partitions.

RabbitMQ 3.10's management API has no such resource (its super streams are made by
``rabbitmq-streams add_super_stream`` or a stream client), so the paths are headrace's own, in the
API's style: ``PUT /api/super-streams/{vhost}/{name}`` with ``{"partitions": N}`` creates the
exchange, the partition streams and their bindings (``broker/super_streams.py``), which also appear
in ``/api/exchanges``, ``/api/queues`` and ``/api/bindings`` as RabbitMQ's own would. Each super
stream object also lists the consumer groups reading it (``groups``, as ``/api/stream-groups``).
"""

from __future__ import annotations

from typing import Any

from headrace.exchanges import SuperStreamExchange
from headrace.server.broker import VHost
from headrace.server.broker.stream_groups import groups_of
from headrace.server.broker.super_streams import (
    MAX_PARTITIONS,
    add_super_stream,
    delete_super_stream,
    describe,
    partition_names,
    super_stream,
)

from .listing import visible_vhosts
from .models import SuperStreamBody
from .routes import Context, Request, Response, Routes, check_permission, json_response, user_of
from .stream_groups import group_json

__all__ = ["routes"]

routes = Routes()


def super_stream_json(vhost: VHost, exchange: SuperStreamExchange) -> dict[str, Any]:
    """``describe``'s partitions and consistency, and the consumer groups reading it
    (``stream_groups.py``'s objects)."""
    return {**describe(vhost, exchange), "groups": [group_json(vhost, g) for g in groups_of(vhost, exchange)]}


@routes.get("/api/super-streams")
@routes.get("/api/super-streams/{vhost}")
def list_super_streams(ctx: Context, req: Request, vhost: VHost | None = None) -> Response:
    vhosts = [vhost] if vhost is not None else visible_vhosts(ctx, req)
    return json_response(200, [super_stream_json(v, ex) for v in vhosts for _, ex in sorted(v.exchanges.items())
                               if isinstance(ex, SuperStreamExchange)])


@routes.get("/api/super-streams/{vhost}/{name}")
def get_super_stream(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    return json_response(200, super_stream_json(vhost, super_stream(vhost, name)))


@routes.put("/api/super-streams/{vhost}/{name}", perms=[("configure", "name"), ("write", "name")])
def put_super_stream(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    """The permissions each part would need on its own: configure on the exchange and each
    partition stream, write on the exchange and read on each stream (to bind them)."""
    body = SuperStreamBody.model_validate(req.json())
    user = user_of(req)
    for stream in partition_names(name, max(min(body.partitions, MAX_PARTITIONS), 0)):
        check_permission(ctx, user, vhost.name, "configure", stream)
        check_permission(ctx, user, vhost.name, "read", stream)
    created = add_super_stream(vhost, name, body.partitions, ctx.now, body.arguments)
    return Response(201 if created else 204)


@routes.delete("/api/super-streams/{vhost}/{name}", perms=[("configure", "name")])
def delete_super_stream_route(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    user = user_of(req)
    for _, stream in super_stream(vhost, name).partitions():
        check_permission(ctx, user, vhost.name, "configure", stream)
    delete_super_stream(vhost, name)
    return Response(204)
