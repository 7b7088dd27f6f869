"""``/api/queues``: list, show, declare, delete and purge queues (reading messages: ``messages.py``)."""

from __future__ import annotations

from typing import Any

from headrace.server.broker import VHost
from headrace.server.broker.policies import Applied
from headrace.server.broker.stream_queue import StreamQueue

from .listing import message_stats, page, visible_vhosts
from .models import QueueBody, check_object_name
from .rates import FIELDS
from .routes import Context, Request, Response, Routes, json_response

__all__ = ["routes"]

routes = Routes()


def _queue_json(ctx: Context, vhost: VHost, name: str) -> dict[str, Any]:
    q = vhost.queues[name]
    s = q.stats
    return {
        "name": name, "vhost": vhost.name, "durable": q.durable, "auto_delete": q.auto_delete,
        "exclusive": q.exclusive_owner is not None, "arguments": q.arguments, "type": q.queue_type,
        "messages": q.messages_ready + q.messages_unacked, "messages_ready": q.messages_ready,
        "messages_unacknowledged": q.messages_unacked, "consumers": q.consumer_count,
        "message_bytes_ready": q.message_bytes_ready, "memory": q.memory,
        "message_bytes_unacknowledged": q.message_bytes_unacked,
        "spilled": q.spilled_count(),
        "message_stats": message_stats(ctx, (vhost.name, name), q, tuple(getattr(s, f) for f, _ in FIELDS)),
        "state": "running",
        **policy_json(ctx.broker.policies.applied(vhost.name, "queue", name, q.queue_type)),
        **({"stream": q.describe()} if isinstance(q, StreamQueue) else {}),
    }


def policy_json(applied: Applied) -> dict[str, Any]:
    """RabbitMQ's policy fields of a queue listing."""
    return {"policy": applied.policy.name if applied.policy else None,
            "operator_policy": applied.operator_policy.name if applied.operator_policy else None,
            "effective_policy_definition": applied.definition}


@routes.get("/api/queues")
@routes.get("/api/queues/{vhost}")
def list_queues(ctx: Context, req: Request, vhost: VHost | None = None) -> Response:
    vhosts = [vhost] if vhost is not None else visible_vhosts(ctx, req)
    if vhost is None:
        ctx.rates.forget({(n, q) for n, v in ctx.broker.vhosts.items() for q in v.queues})
    return page(req, [_queue_json(ctx, v, n) for v in vhosts for n in sorted(v.queues)])


@routes.get("/api/queues/{vhost}/{name}")
def get_queue(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    vhost.get_queue(name)
    return json_response(200, _queue_json(ctx, vhost, name))


@routes.put("/api/queues/{vhost}/{name}", perms=[("configure", "name")])
def put_queue(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    check_object_name(name)
    body = QueueBody.model_validate(req.json())
    existed = name in vhost.queues
    vhost.declare_queue(name, owner=None, now=ctx.now, durable=body.durable, auto_delete=body.auto_delete,
                        arguments=body.arguments)
    return Response(204 if existed else 201)


@routes.delete("/api/queues/{vhost}/{name}", perms=[("configure", "name")])
def delete_queue(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    vhost.get_queue(name)
    vhost.delete_queue(name, if_unused=req.arg("if-unused") == "true", if_empty=req.arg("if-empty") == "true")
    return Response(204)


@routes.delete("/api/queues/{vhost}/{name}/contents", perms=[("read", "name")])
def purge_queue(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    before = ctx.broker.store_ticket
    vhost.purge_queue(name, None)
    response = Response(204)
    if ctx.broker.store_ticket > before:
        response.wait_ticket = ctx.broker.store_ticket  # answered once the purge is fsynced
    return response
