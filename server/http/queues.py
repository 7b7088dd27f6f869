"""``/api/queues``: list, show, declare, delete and purge queues (reading messages: ``messages.py``)."""

from __future__ import annotations

from typing import Any

from headrace.server.amqp.names import check_name
from headrace.server.broker import VHost
from headrace.server.broker.policies import Applied

from .list_query import flag, sort_path
from .listing import page, visible_vhosts
from .models import QueueBody
from .node_facts import NODE_NAME
from .object_json import queue_detail_json, queue_stats_json
from .routes import Context, HTTPError, Request, Response, Routes, json_response

__all__ = ["routes"]

routes = Routes()
# what a queue object has without its statistics (and "consumers"): sorting on these needs no stats
CHEAP_FIELDS = {"name", "vhost", "durable", "auto_delete", "exclusive", "arguments", "type", "node", "state", "policy",
                "operator_policy", "effective_policy_definition", "messages", "messages_ready",
                "messages_unacknowledged", "consumers"}


def _queue_json(ctx: Context, vhost: VHost, name: str, *, stats: bool = True, totals: bool = True,
                detailed: bool = False) -> dict[str, Any]:
    """RabbitMQ's queue object. ``stats=False`` is ``disable_stats`` (no statistics, no rate
    sampling); ``totals`` keeps the message counts then (``enable_queue_totals``)."""
    q = vhost.queues[name]
    out: dict[str, Any] = {
        "name": name, "vhost": vhost.name, "durable": q.durable, "auto_delete": q.auto_delete,
        "exclusive": q.exclusive_owner is not None, "arguments": q.arguments, "type": q.queue_type,
        "node": NODE_NAME, "state": "running",
        **policy_json(ctx.broker.policies.applied(vhost.name, "queue", name, q.queue_type)),
        **({"stream": q.log_info()} if q.is_log else {}),
    }
    if stats or totals:
        out.update({"messages": q.messages_ready + q.messages_unacked, "messages_ready": q.messages_ready,
                    "messages_unacknowledged": q.messages_unacked})
    if stats:
        out.update(queue_stats_json(ctx, vhost, q))
    if detailed:
        out.update(queue_detail_json(ctx, vhost, q))
    return out


def _list(ctx: Context, req: Request, vhosts: list[VHost], *, detailed: bool = False) -> Response:
    stats = not flag(req, "disable_stats")
    totals = stats or flag(req, "enable_queue_totals")
    if not stats:
        return page(req, [_queue_json(ctx, v, n, stats=False, totals=totals) for v in vhosts for n in sorted(v.queues)])
    # a page sorted by a plain field is chosen on the cheap objects and only its rows get statistics
    # (rate sampling and all); a sort on a statistic needs them all
    path = sort_path(req)
    cheap = req.arg("page") is not None and (path is None or path[0] in CHEAP_FIELDS)
    if cheap:
        by_name = {v.name: v for v in vhosts}
        return page(req, [_queue_json(ctx, v, n, stats=False) | {"consumers": v.queues[n].consumer_count}
                          for v in vhosts for n in sorted(v.queues)],
                    expand=lambda row: _queue_json(ctx, by_name[row["vhost"]], row["name"], detailed=detailed))
    return page(req, [_queue_json(ctx, v, n, detailed=detailed) for v in vhosts for n in sorted(v.queues)])


@routes.get("/api/queues/detailed")
def list_queues_detailed(ctx: Context, req: Request) -> Response:
    """Every queue with its consumers (registered before ``/api/queues/{vhost}``, which it would match)."""
    return _list(ctx, req, visible_vhosts(ctx, req), detailed=True)


def policy_json(applied: Applied) -> dict[str, Any]:
    """RabbitMQ's policy fields of a queue listing."""
    return {"policy": applied.policy.name if applied.policy else None,
            "operator_policy": applied.operator_policy.name if applied.operator_policy else None,
            "effective_policy_definition": applied.definition}


@routes.get("/api/queues")
@routes.get("/api/queues/{vhost}")
def list_queues(ctx: Context, req: Request, vhost: VHost | None = None) -> Response:
    return _list(ctx, req, [vhost] if vhost is not None else visible_vhosts(ctx, req))


@routes.get("/api/queues/{vhost}/{name}")
def get_queue(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    vhost.get_queue(name)
    return json_response(200, _queue_json(ctx, vhost, name, detailed=True))


@routes.put("/api/queues/{vhost}/{name}", perms=[("configure", "name")])
def put_queue(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    check_name("queue name", name, path_segment=True)
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
    if vhost.get_queue(name).is_log:  # RabbitMQ's HTTP answer for a stream (AMQP's is 540)
        raise HTTPError(400, "bad_request",
                        f"queue.purge not supported by stream queues queue '{name}' in vhost '{vhost.name}'")
    before = ctx.broker.store_ticket
    vhost.purge_queue(name, None)
    response = Response(204)
    if ctx.broker.store_ticket > before:
        response.wait_ticket = ctx.broker.store_ticket  # answered once the purge is fsynced
    return response


@routes.post("/api/queues/{vhost}/{name}/actions", perms=[("configure", "name")])
def queue_action(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    """RabbitMQ's ``sync`` / ``cancel_sync`` of a mirrored classic queue. One node has no mirrors
    to bring up to date, so both are done at once (204), as RabbitMQ answers for an unmirrored queue."""
    vhost.get_queue(name)
    body = req.json()
    action = body.get("action") if isinstance(body, dict) else None
    if action not in ("sync", "cancel_sync"):
        raise HTTPError(400, "bad_request", f"Unknown action: {action!r}; expected sync or cancel_sync")
    return Response(204)
