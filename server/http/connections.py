"""``/api/connections``, ``/api/channels`` and ``/api/consumers``: who is connected and consuming.

A user sees their own connections and channels; monitoring and administrator users see all.
Closing a connection is for administrators."""

from __future__ import annotations

from typing import Any

from headrace.server.broker import VHost

from .listing import page, visible_vhosts
from .routes import Context, HTTPError, Request, Response, Routes, user_of

__all__ = ["routes"]

routes = Routes()


def _safe(value: Any) -> Any:
    """Client properties as JSON: byte strings decoded (undecodable bytes replaced)."""
    if isinstance(value, dict):
        return {k: _safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_safe(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


@routes.get("/api/connections")
def list_connections(ctx: Context, req: Request) -> Response:
    user = user_of(req)
    return page(req, [{"name": f"{s.peer[0]}:{s.peer[1]} -> headrace ({s.id})", "id": s.id, "user": s.user.name,
                       "vhost": s.vhost.name, "peer_host": s.peer[0], "peer_port": s.peer[1],
                       "channels": len(s.channels), "client_properties": _safe(s.client_properties)}
                      for s in ctx.broker.connections.values()
                      if s.user is not None and (user.can_monitor or s.user.name == user.name)])


@routes.delete("/api/connections/{name}", admin=True)
def close_connection(ctx: Context, req: Request, name: str) -> Response:
    for session in list(ctx.broker.connections.values()):
        label = f"{session.peer[0]}:{session.peer[1]} -> headrace ({session.id})"
        if name in (str(session.id), label):
            session.close_by_admin(req.headers.get("x-reason", "Closed via management API"))
            return Response(204)
    raise HTTPError(404, "not_found", f"connection '{name}' not found")


@routes.get("/api/channels")
def list_channels(ctx: Context, req: Request) -> Response:
    user = user_of(req)
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
    return page(req, rows)


@routes.get("/api/consumers")
@routes.get("/api/consumers/{vhost}")
def list_consumers(ctx: Context, req: Request, vhost: VHost | None = None) -> Response:
    vhosts = [vhost] if vhost is not None else visible_vhosts(ctx, req)
    rows = []
    for v in vhosts:
        for qname, q in v.queues.items():
            for c in q.consumers():
                rows.append({"consumer_tag": c.tag, "queue": {"name": qname, "vhost": v.name},
                             "ack_required": not c.no_ack, "prefetch_count": c.prefetch, "exclusive": c.exclusive,
                             "priority": c.priority, "channel": c.channel_id, "unacked": c.unacked})
    return page(req, rows)
