"""``/api/exchanges``: list, show, declare and delete exchanges (publishing: ``messages.py``)."""

from __future__ import annotations

from typing import Any

from headrace.server.amqp.names import check_name
from headrace.server.broker import VHost
from headrace.server.broker.delayed import DELAYED_TYPE, HISTOGRAM_EDGES

from .list_query import flag
from .listing import page, rated, visible_vhosts
from .models import ExchangeBody
from .object_json import exchange_name
from .routes import Context, HTTPError, Request, Response, Routes, json_response

__all__ = ["routes"]

routes = Routes()


def _exchange_json(ctx: Context, vhost: VHost, name: str, *, stats: bool = True) -> dict[str, Any]:
    """RabbitMQ's exchange object; ``stats=False`` (``disable_stats``) leaves out message_stats."""
    ex = vhost.exchanges[name]
    out = {"name": name, "vhost": vhost.name, "type": vhost.exchange_type(name), "durable": ex.durable,
           "auto_delete": ex.auto_delete, "internal": ex.internal, "arguments": ex.arguments,
           "mirrored": name in vhost.mirrored, "user_who_performed_action": ""}
    if stats:
        out["message_stats"] = rated(ctx, ("exchange", vhost.name, name), ("publish_in", "publish_out"),
                                     (ex.published_in, ex.published_out))
    if name in vhost.delayed_exchanges:  # what it holds until due (its histogram: ``/schedule``)
        out["messages_delayed"] = vhost.delayed.count(name)
    policy = ctx.broker.policies.applied(vhost.name, "exchange", name).policy if name else None
    if policy is not None:  # as RabbitMQ, only an exchange a policy applies to lists one
        out["policy"] = policy.name
    return out


@routes.get("/api/exchanges")
@routes.get("/api/exchanges/{vhost}")
def list_exchanges(ctx: Context, req: Request, vhost: VHost | None = None) -> Response:
    vhosts = [vhost] if vhost is not None else visible_vhosts(ctx, req)
    stats = not flag(req, "disable_stats")
    return page(req, [_exchange_json(ctx, v, n, stats=stats) for v in vhosts for n in sorted(v.exchanges)])


@routes.get("/api/exchanges/{vhost}/{name}")
def get_exchange(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    name = exchange_name(name)
    vhost.get_exchange(name)
    # the per-channel and per-queue breakdowns: empty, as RabbitMQ's in its default (basic) rates mode
    return json_response(200, {**_exchange_json(ctx, vhost, name), "incoming": [], "outgoing": []})


@routes.put("/api/exchanges/{vhost}/{name}", perms=[("configure", "name")])
def put_exchange(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    check_name("exchange name", name, path_segment=True)
    body = ExchangeBody.model_validate(req.json())
    existed = name in vhost.exchanges
    vhost.declare_exchange(name, body.type, durable=body.durable, auto_delete=body.auto_delete,
                           internal=body.internal, arguments=body.arguments)
    return Response(204 if existed else 201)


@routes.delete("/api/exchanges/{vhost}/{name}", perms=[("configure", "name")])
def delete_exchange(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    name = exchange_name(name)  # the default exchange: refused (401), as every amq.* one
    vhost.get_exchange(name)
    vhost.delete_exchange(name, if_unused=req.arg("if-unused") == "true")
    return Response(204)


@routes.get("/api/exchanges/{vhost}/{name}/schedule")
def get_schedule(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    """An x-delayed-message exchange's held messages counted by when they are due (bins of
    ``delayed.HISTOGRAM_EDGES`` seconds from now, the last unbounded), as of the request's ``now``.
    400 for an exchange of another type: it holds nothing to schedule."""
    name = exchange_name(name)
    vhost.get_exchange(name)
    if vhost.exchange_type(name) != DELAYED_TYPE:
        raise HTTPError(400, "bad_request", f"exchange '{name}' in vhost '{vhost.name}' is not of type "
                        f"'{DELAYED_TYPE}': it schedules nothing")
    bins = vhost.delayed.schedule(name, ctx.now)
    edges: list[int | None] = [*HISTOGRAM_EDGES, None]
    return json_response(200, {
        "name": name, "vhost": vhost.name, "messages_delayed": sum(bins),
        "granularity_seconds": 60,
        "histogram": [{"due_within_seconds": edge, "count": n} for edge, n in zip(edges, bins)],
    })
