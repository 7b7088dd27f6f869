"""``/api/vhosts``: list, show, create and delete virtual hosts (creating and deleting: administrators)."""

from __future__ import annotations

from typing import Any

from headrace.server.amqp.names import check_name
from headrace.server.auth import Permission
from headrace.server.broker import VHost

from .list_query import flag
from .listing import page, rated, visible_vhosts
from .models import parse_flag
from .node_facts import NODE_NAME
from .rates import (DEPTH, OCTETS, QUEUE_STATS, VHOST_DEPTH_AT, VHOST_OCTETS_AT, VHOST_STATS, queue_counts,
                    vhost_counts_from)
from .routes import Context, HTTPError, Request, Response, Routes, json_response, user_of

__all__ = ["routes", "vhost_counts"]

routes = Routes()


def vhost_counts(v: VHost) -> tuple[int, ...]:
    """The vhost's ``VHOST_STATS`` counts: its queues' counters, publishes into its exchanges, and
    what the channels and the delivery owner count per vhost (confirms, unroutable)."""
    sums = [0] * len(QUEUE_STATS)
    for queue in v.queues.values():
        for i, count in enumerate(queue_counts(queue.stats)):
            sums[i] += count
    return vhost_counts_from(v, sums)


def vhost_octets(ctx: Context, v: VHost) -> tuple[int, int]:
    """Bytes received and sent by the vhost's connections, closed ones included."""
    recv, send = v.octets_closed
    for s in ctx.broker.connections.values():
        if s.vhost is v:
            recv += s.io.recv_oct
            send += s.io.send_oct
    return recv, send


def _vhost_json(ctx: Context, v: VHost, *, stats: bool = True) -> dict[str, Any]:
    """RabbitMQ's vhost object; ``stats=False`` (``disable_stats``) is its definition alone."""
    out = {"name": v.name, "description": "", "tags": [], "metadata": {"description": "", "tags": []},
           "tracing": v.tracing, "default_queue_type": "classic", "cluster_state": {NODE_NAME: "running"}}
    if not stats:
        return out
    ready = sum(q.messages_ready for q in v.queues.values())
    unacked = sum(q.messages_unacked for q in v.queues.values())
    return {**out,
            **rated(ctx, ("vhost", v.name), DEPTH, (ready + unacked, ready, unacked), ages="lengths", signed=True,
                    column=VHOST_DEPTH_AT),
            "message_stats": rated(ctx, ("vhost", v.name), VHOST_STATS, vhost_counts(v)),
            **rated(ctx, ("vhost", v.name), OCTETS, vhost_octets(ctx, v), ages="data_rates", column=VHOST_OCTETS_AT)}


@routes.get("/api/vhosts")
def list_vhosts(ctx: Context, req: Request) -> Response:
    vhosts = visible_vhosts(ctx, req)
    if flag(req, "disable_stats"):
        return page(req, [_vhost_json(ctx, v, stats=False) for v in vhosts])
    return page(req, [_vhost_json(ctx, v) for v in vhosts])


@routes.get("/api/vhosts/{name}", vhost="name")
def get_vhost(ctx: Context, req: Request, name: VHost) -> Response:
    return json_response(200, _vhost_json(ctx, name))


@routes.put("/api/vhosts/{name}", admin=True)
def put_vhost(ctx: Context, req: Request, name: str) -> Response:
    """Creates the vhost if need be; ``tracing`` (true or false, as JSON or as the strings
    rabbitmqadmin sends) switches the firehose (broker/firehose.py), which every start leaves off."""
    check_name("vhost name", name, path_segment=True)
    body = req.json()
    tracing = _flag(body.get("tracing")) if isinstance(body, dict) else None
    existed = name in ctx.broker.vhosts
    vhost = ctx.broker.add_vhost(name)
    if tracing is not None:
        vhost.tracing = tracing
    user = user_of(req)
    if not existed and ctx.broker.users.permission(user.name, name) is None:
        # as RabbitMQ's management plugin does, the creator gets full permissions on a new vhost
        ctx.broker.users.set_permission(user.name, name, Permission())
    return Response(204 if existed else 201)


def _flag(value: Any) -> bool | None:
    if value is None:
        return None
    try:
        return parse_flag(value)
    except ValueError:
        raise HTTPError(400, "bad_request", f"tracing must be true or false, not {value!r}") from None


@routes.delete("/api/vhosts/{name}", admin=True)
def delete_vhost(ctx: Context, req: Request, name: str) -> Response:
    if not ctx.broker.delete_vhost(name):
        raise HTTPError(404, "not_found", f"vhost '{name}' not found")
    return Response(204)


@routes.post("/api/vhosts/{name}/start/{node}", admin=True, vhost="name")
def start_vhost(ctx: Context, req: Request, name: VHost, node: str) -> Response:
    """RabbitMQ restarts a vhost that failed on a node; a headrace vhost runs while it exists."""
    if node != NODE_NAME:
        raise HTTPError(404, "not_found", f"node '{node}' not found")
    return Response(204)
