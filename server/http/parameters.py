"""Runtime parameters, global parameters, vhost and user limits, and topic permissions: RabbitMQ's
``/api/parameters``, ``/api/global-parameters``, ``/api/vhost-limits``, ``/api/user-limits`` and
``/api/topic-permissions``. The broker keeps them (``broker.parameters``, ``broker.users``) and
enforces the limits and topic permissions; these handlers only read and change them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from headrace.server.auth import TopicPermission
from headrace.server.broker import VHost
from headrace.server.broker.federation import parse_upstream, parse_upstream_set
from headrace.server.broker.shovels import parse_shovel

from .listing import page, visible_vhosts
from .routes import Context, HTTPError, Request, Response, Routes, json_response, user_of

__all__ = ["routes"]

routes = Routes()


class ValueBody(BaseModel):
    value: Any


class TopicPermissionBody(BaseModel):
    exchange: str
    write: str = ".*"
    read: str = ".*"


def _policymaker(req: Request) -> None:
    """RabbitMQ: parameters need the policymaker (or administrator) tag."""
    if not {"administrator", "policymaker"} & set(user_of(req).tags):
        raise HTTPError(401, "not_authorised", "Not policymaker user")


def _known_user(ctx: Context, name: str) -> None:
    if name not in ctx.broker.users.users:
        raise HTTPError(404, "not_found", f"user '{name}' not found")


# ---------------------------------------------------------------------- runtime parameters
@routes.get("/api/parameters")
@routes.get("/api/parameters/{component}")
def list_parameters(ctx: Context, req: Request, component: str | None = None) -> Response:
    _policymaker(req)
    names = {v.name for v in visible_vhosts(ctx, req)}
    return page(req, [p for p in ctx.broker.parameters.list_parameters(component) if p["vhost"] in names])


@routes.get("/api/parameters/{component}/{vhost}")
def list_vhost_parameters(ctx: Context, req: Request, component: str, vhost: VHost) -> Response:
    _policymaker(req)
    return page(req, ctx.broker.parameters.list_parameters(component, vhost.name))


@routes.get("/api/parameters/{component}/{vhost}/{name}")
def get_parameter(ctx: Context, req: Request, component: str, vhost: VHost, name: str) -> Response:
    _policymaker(req)
    for p in ctx.broker.parameters.list_parameters(component, vhost.name):
        if p["name"] == name:
            return json_response(200, p)
    raise HTTPError(404, "not_found", f"parameter '{name}' of component '{component}' not found")


@routes.put("/api/parameters/{component}/{vhost}/{name}")
def put_parameter(ctx: Context, req: Request, component: str, vhost: VHost, name: str) -> Response:
    _policymaker(req)
    body = ValueBody.model_validate(req.json())
    # checked as RabbitMQ's shovel and federation plugins check them, before they are stored
    checks: dict[str, Callable[[Any], object]] = {"shovel": parse_shovel, "federation-upstream": parse_upstream,
                                                  "federation-upstream-set": parse_upstream_set}
    check = checks.get(component)
    if check is not None:
        try:
            check(body.value)
        except ValueError as exc:
            raise HTTPError(400, "bad_request", f"Validation failed: {exc}") from None
    existed = ctx.broker.parameters.set_parameter(component, vhost.name, name, body.value)
    return Response(204 if existed else 201)


@routes.delete("/api/parameters/{component}/{vhost}/{name}")
def delete_parameter(ctx: Context, req: Request, component: str, vhost: VHost, name: str) -> Response:
    _policymaker(req)
    if not ctx.broker.parameters.clear_parameter(component, vhost.name, name):
        raise HTTPError(404, "not_found", f"parameter '{name}' of component '{component}' not found")
    return Response(204)


# ---------------------------------------------------------------------- global parameters
@routes.get("/api/global-parameters", admin=True)
def list_globals(ctx: Context, req: Request) -> Response:
    return page(req, [{"name": n, "value": v} for n, v in sorted(ctx.broker.parameters.global_parameters.items())])


@routes.get("/api/global-parameters/{name}", admin=True)
def get_global(ctx: Context, req: Request, name: str) -> Response:
    params = ctx.broker.parameters.global_parameters
    if name not in params:
        raise HTTPError(404, "not_found", f"global parameter '{name}' not found")
    return json_response(200, {"name": name, "value": params[name]})


@routes.put("/api/global-parameters/{name}", admin=True)
def put_global(ctx: Context, req: Request, name: str) -> Response:
    body = ValueBody.model_validate(req.json())
    return Response(204 if ctx.broker.parameters.set_global(name, body.value) else 201)


@routes.delete("/api/global-parameters/{name}", admin=True)
def delete_global(ctx: Context, req: Request, name: str) -> Response:
    if not ctx.broker.parameters.clear_global(name):
        raise HTTPError(404, "not_found", f"global parameter '{name}' not found")
    return Response(204)


# ---------------------------------------------------------------------- limits
@routes.get("/api/vhost-limits")
@routes.get("/api/vhost-limits/{vhost}")
def list_vhost_limits(ctx: Context, req: Request, vhost: VHost | None = None) -> Response:
    names = [vhost.name] if vhost is not None else [v.name for v in visible_vhosts(ctx, req)]
    limits = ctx.broker.parameters.vhost_limits
    return page(req, [{"vhost": n, "value": dict(limits[n])} for n in names if limits.get(n)])


@routes.put("/api/vhost-limits/{vhost}/{name}", admin=True)
def put_vhost_limit(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    body = ValueBody.model_validate(req.json())
    ctx.broker.parameters.set_vhost_limit(vhost.name, name, body.value)
    return Response(204)


@routes.delete("/api/vhost-limits/{vhost}/{name}", admin=True)
def delete_vhost_limit(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    ctx.broker.parameters.clear_vhost_limit(vhost.name, name)
    return Response(204)


@routes.get("/api/user-limits", admin=True)
@routes.get("/api/user-limits/{user}", admin=True)
def list_user_limits(ctx: Context, req: Request, user: str | None = None) -> Response:
    if user is not None:
        _known_user(ctx, user)
    limits = ctx.broker.parameters.user_limits
    names = [user] if user is not None else sorted(limits)
    return page(req, [{"user": n, "value": dict(limits[n])} for n in names if limits.get(n)])


@routes.put("/api/user-limits/{user}/{name}", admin=True)
def put_user_limit(ctx: Context, req: Request, user: str, name: str) -> Response:
    _known_user(ctx, user)
    body = ValueBody.model_validate(req.json())
    ctx.broker.parameters.set_user_limit(user, name, body.value)
    return Response(204)


@routes.delete("/api/user-limits/{user}/{name}", admin=True)
def delete_user_limit(ctx: Context, req: Request, user: str, name: str) -> Response:
    _known_user(ctx, user)
    ctx.broker.parameters.clear_user_limit(user, name)
    return Response(204)


# ---------------------------------------------------------------------- topic permissions
def topic_permissions_json(ctx: Context, *, user: str | None = None, vhost: str | None = None) -> list[dict[str, Any]]:
    return [{"user": u, "vhost": v, "exchange": e, "write": p.write, "read": p.read}
            for (u, v, e), p in sorted(ctx.broker.users.topic_permissions.items())
            if (user is None or u == user) and (vhost is None or v == vhost)]


@routes.get("/api/topic-permissions", admin=True)
def list_topic_permissions(ctx: Context, req: Request) -> Response:
    return page(req, topic_permissions_json(ctx))


@routes.get("/api/topic-permissions/{vhost}/{user}", admin=True)
def get_topic_permissions(ctx: Context, req: Request, vhost: VHost, user: str) -> Response:
    _known_user(ctx, user)
    rows = topic_permissions_json(ctx, user=user, vhost=vhost.name)
    if not rows:
        raise HTTPError(404, "not_found", f"no topic permissions for user '{user}' in vhost '{vhost.name}'")
    return json_response(200, rows)


@routes.put("/api/topic-permissions/{vhost}/{user}", admin=True)
def put_topic_permission(ctx: Context, req: Request, vhost: VHost, user: str) -> Response:
    _known_user(ctx, user)
    body = TopicPermissionBody.model_validate(req.json())
    existed = ctx.broker.users.set_topic_permission(user, vhost.name, TopicPermission(body.exchange, body.write,
                                                                                     body.read))
    return Response(204 if existed else 201)


@routes.delete("/api/topic-permissions/{vhost}/{user}", admin=True)
def delete_topic_permissions(ctx: Context, req: Request, vhost: VHost, user: str) -> Response:
    if not ctx.broker.users.clear_topic_permissions(user, vhost.name, req.arg("exchange")):
        raise HTTPError(404, "not_found", f"no topic permissions for user '{user}' in vhost '{vhost.name}'")
    return Response(204)
