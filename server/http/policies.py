"""``/api/policies`` and ``/api/operator-policies``: RabbitMQ's management endpoints for policies.

Bodies are RabbitMQ's ``{"pattern", "definition", "priority", "apply-to"}``; a refused policy is a
400 whose reason is RabbitMQ's validation text. Policies need the ``policymaker`` or
``administrator`` tag; operator policies need ``administrator``. The broker owns the policies
(``Broker.set_policy``); these are thin handlers.
"""

from __future__ import annotations

from collections.abc import Callable

from headrace.server.broker import VHost
from headrace.server.broker.policies import PolicyError

from .listing import page, visible_vhosts
from .routes import Context, Handler, HTTPError, Request, Response, Routes, json_response, user_of

__all__ = ["routes"]

routes = Routes()
NOT_FOUND = HTTPError(404, "Object Not Found", "Not Found")  # RabbitMQ's body for a missing policy


def _allowed(req: Request, operator: bool) -> None:
    user = user_of(req)
    if operator and not user.is_administrator:
        raise HTTPError(401, "not_authorised", "Not administrator user")
    if not user.is_administrator and "policymaker" not in user.tags:
        raise HTTPError(401, "not_authorised", "Not policymaker user")


def _each(method: str, suffix: str) -> Callable[[Handler], Handler]:
    """Register a handler for both ``/api/policies`` and ``/api/operator-policies``."""
    def register(handler: Handler) -> Handler:
        for base, operator in (("/api/policies", False), ("/api/operator-policies", True)):
            routes.add(method, base + suffix, params={"operator": operator})(handler)
        return handler
    return register


@_each("GET", "")
@_each("GET", "/{vhost}")
def list_policies(ctx: Context, req: Request, operator: bool, vhost: VHost | None = None) -> Response:
    _allowed(req, operator)
    names = {v.name for v in ([vhost] if vhost is not None else visible_vhosts(ctx, req))}
    return page(req, [p.as_json() for p in ctx.broker.policies.list(operator=operator) if p.vhost in names])


@_each("GET", "/{vhost}/{name}")
def get_policy(ctx: Context, req: Request, vhost: VHost, name: str, operator: bool) -> Response:
    _allowed(req, operator)
    policy = ctx.broker.policies.get(vhost.name, name, operator=operator)
    if policy is None:
        raise NOT_FOUND
    return json_response(200, policy.as_json())


@_each("PUT", "/{vhost}/{name}")
def put_policy(ctx: Context, req: Request, vhost: VHost, name: str, operator: bool) -> Response:
    _allowed(req, operator)
    existed = ctx.broker.policies.get(vhost.name, name, operator=operator) is not None
    try:
        ctx.broker.set_policy(vhost.name, name, req.json(), ctx.now, operator=operator)
    except PolicyError as exc:
        raise HTTPError(400, "bad_request", str(exc)) from None
    return Response(204 if existed else 201)


@_each("DELETE", "/{vhost}/{name}")
def delete_policy(ctx: Context, req: Request, vhost: VHost, name: str, operator: bool) -> Response:
    _allowed(req, operator)
    if not ctx.broker.clear_policy(vhost.name, name, ctx.now, operator=operator):
        raise NOT_FOUND
    return Response(204)
