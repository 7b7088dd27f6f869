"""``/api/vhosts``: list, show, create and delete virtual hosts (creating and deleting: administrators)."""

from __future__ import annotations

from typing import Any

from headrace.server.auth import Permission
from headrace.server.broker import VHost

from .listing import page, visible_vhosts
from .node_facts import NODE_NAME
from .rates import FIELDS
from .routes import Context, HTTPError, Request, Response, Routes, json_response, user_of

__all__ = ["routes"]

routes = Routes()


def _vhost_json(v: VHost) -> dict[str, Any]:
    ready = sum(q.messages_ready for q in v.queues.values())
    unacked = sum(q.messages_unacked for q in v.queues.values())
    counts = {name: sum(getattr(q.stats, f) for q in v.queues.values()) for f, name in FIELDS}
    rate = {"rate": 0.0}  # per-vhost rates are not sampled (the overview and queues carry them)
    return {"name": v.name, "description": "", "tags": [], "metadata": {"description": "", "tags": []},
            "tracing": False, "default_queue_type": "classic", "cluster_state": {NODE_NAME: "running"},
            "messages": ready + unacked, "messages_details": rate, "messages_ready": ready,
            "messages_ready_details": rate, "messages_unacknowledged": unacked,
            "messages_unacknowledged_details": rate,
            "message_stats": {**counts, **{name + "_details": rate for name in counts}},
            "recv_oct": 0, "recv_oct_details": rate, "send_oct": 0, "send_oct_details": rate}


@routes.get("/api/vhosts")
def list_vhosts(ctx: Context, req: Request) -> Response:
    return page(req, [_vhost_json(v) for v in visible_vhosts(ctx, req)])


@routes.get("/api/vhosts/{name}", vhost="name")
def get_vhost(ctx: Context, req: Request, name: VHost) -> Response:
    return json_response(200, _vhost_json(name))


@routes.put("/api/vhosts/{name}", admin=True)
def put_vhost(ctx: Context, req: Request, name: str) -> Response:
    existed = name in ctx.broker.vhosts
    ctx.broker.add_vhost(name)
    user = user_of(req)
    if not existed and ctx.broker.users.permission(user.name, name) is None:
        # as RabbitMQ's management plugin does, the creator gets full permissions on a new vhost
        ctx.broker.users.set_permission(user.name, name, Permission())
    return Response(204 if existed else 201)


@routes.delete("/api/vhosts/{name}", admin=True)
def delete_vhost(ctx: Context, req: Request, name: str) -> Response:
    if not ctx.broker.delete_vhost(name):
        raise HTTPError(404, "not_found", f"vhost '{name}' not found")
    return Response(204)
