"""``/api/policies`` and ``/api/operator-policies``: RabbitMQ's management endpoints for policies.

Bodies are RabbitMQ's ``{"pattern", "definition", "priority", "apply-to"}``; a refused policy is a
400 whose reason is RabbitMQ's validation text. Policies need the ``policymaker`` or
``administrator`` tag (and, for a policymaker, access to the vhost); operator policies need
``administrator``. The broker owns the policies (``Broker.set_policy``); these are thin handlers.
"""

from __future__ import annotations

from typing import Any, Protocol

from headrace.server.broker import Broker
from headrace.server.broker.policies import Policy, PolicyError

from .routes import Handler, HTTPError, Request, Response, json_response

__all__ = ["ROUTES"]


class _Context(Protocol):
    broker: Broker


def _allowed(ctx: _Context, req: Request, vhost: str | None, operator: bool) -> None:
    user = req.user
    assert user is not None
    if operator:
        if not user.is_administrator:
            raise HTTPError(403, "not_authorised", "Not administrator user")
    elif not user.is_administrator and "policymaker" not in user.tags:
        raise HTTPError(403, "not_authorised", "Not policymaker user")
    if vhost is not None:
        if ctx.broker.vhost(vhost) is None:
            raise HTTPError(404, "Object Not Found", "Not Found")
        if not user.is_administrator and ctx.broker.users.permission(user.name, vhost) is None:
            raise HTTPError(403, "not_authorised", f"access to vhost '{vhost}' refused")


def _visible(ctx: _Context, req: Request, policy: Policy) -> bool:
    user = req.user
    assert user is not None
    return user.is_administrator or ctx.broker.users.permission(user.name, policy.vhost) is not None


def _list(operator: bool) -> Handler:
    def handler(ctx: _Context, req: Request, vhost: str | None = None) -> Response:
        _allowed(ctx, req, vhost, operator)
        policies = ctx.broker.policies.list(vhost, operator=operator)
        return json_response(200, [p.as_json() for p in policies if _visible(ctx, req, p)])
    return handler


def _get(operator: bool) -> Handler:
    def handler(ctx: _Context, req: Request, vhost: str, name: str) -> Response:
        _allowed(ctx, req, vhost, operator)
        policy = ctx.broker.policies.get(vhost, name, operator=operator)
        if policy is None:
            raise HTTPError(404, "Object Not Found", "Not Found")
        return json_response(200, policy.as_json())
    return handler


def _put(operator: bool) -> Handler:
    def handler(ctx: _Context, req: Request, vhost: str, name: str) -> Response:
        _allowed(ctx, req, vhost, operator)
        body: Any = req.json()
        existed = ctx.broker.policies.get(vhost, name, operator=operator) is not None
        try:
            ctx.broker.set_policy(vhost, name, body, operator=operator)
        except PolicyError as exc:
            raise HTTPError(400, "bad_request", str(exc)) from None
        return Response(204 if existed else 201)
    return handler


def _delete(operator: bool) -> Handler:
    def handler(ctx: _Context, req: Request, vhost: str, name: str) -> Response:
        _allowed(ctx, req, vhost, operator)
        if not ctx.broker.clear_policy(vhost, name, operator=operator):
            raise HTTPError(404, "Object Not Found", "Not Found")
        return Response(204)
    return handler


ROUTES: list[tuple[str, str, Handler]] = []
for _base, _operator in (("/api/policies", False), ("/api/operator-policies", True)):
    ROUTES += [
        ("GET", _base, _list(_operator)),
        ("GET", _base + "/{vhost}", _list(_operator)),
        ("GET", _base + "/{vhost}/{name}", _get(_operator)),
        ("PUT", _base + "/{vhost}/{name}", _put(_operator)),
        ("DELETE", _base + "/{vhost}/{name}", _delete(_operator)),
    ]
