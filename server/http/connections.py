"""``/api/connections``, ``/api/channels`` and ``/api/consumers``: who is connected and consuming.

A user sees their own connections and channels; monitoring and administrator users see all.
Closing a connection is for administrators."""

from __future__ import annotations

from headrace.server.broker import VHost

from .list_query import flag
from .listing import page, visible_vhosts
from .object_json import channel_json, connection_basic_json, connection_json, connection_name, consumer_json, visible_sessions
from .routes import Context, HTTPError, Request, Response, Routes

__all__ = ["routes"]

routes = Routes()


@routes.get("/api/connections")
def list_connections(ctx: Context, req: Request) -> Response:
    if flag(req, "disable_stats"):
        return page(req, [connection_basic_json(s) for s in visible_sessions(ctx, req)])
    return page(req, [connection_json(ctx, s) for s in visible_sessions(ctx, req)])


@routes.delete("/api/connections/{name}", admin=True)
def close_connection(ctx: Context, req: Request, name: str) -> Response:
    for session in list(ctx.broker.connections.values()):
        if name in (str(session.id), connection_name(session)):
            session.close_by_admin(req.headers.get("x-reason", "Closed via management API"))
            return Response(204)
    raise HTTPError(404, "not_found", f"connection '{name}' not found")


@routes.get("/api/channels")
def list_channels(ctx: Context, req: Request) -> Response:
    return page(req, [channel_json(ctx, s, ch) for s in visible_sessions(ctx, req) for ch in s.channels.values()])


@routes.get("/api/consumers")
@routes.get("/api/consumers/{vhost}")
def list_consumers(ctx: Context, req: Request, vhost: VHost | None = None) -> Response:
    vhosts = [vhost] if vhost is not None else visible_vhosts(ctx, req)
    return page(req, [consumer_json(v, qname, c) for v in vhosts for qname, q in v.queues.items()
                      for c in q.consumers()])
