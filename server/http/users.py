"""``/api/users``: list, show, create and delete users (administrators only, as in RabbitMQ)."""

from __future__ import annotations

from typing import Any

from headrace.server.amqp.names import check_name
from headrace.server.auth import User

from .listing import page
from .models import UserBody
from .routes import Context, HTTPError, Request, Response, Routes, json_response

__all__ = ["routes", "user_json"]

routes = Routes()


def user_json(u: User, limits: dict[str, int] | None = None) -> dict[str, Any]:
    # as RabbitMQ's, these administrator-only answers carry the password hash (never the password)
    return {"name": u.name, "password_hash": u.password_hash, "tags": list(u.tags),
            "hashing_algorithm": "pbkdf2_sha256", "limits": dict(limits or {})}


@routes.get("/api/users", admin=True)
def list_users(ctx: Context, req: Request) -> Response:
    limits = ctx.broker.parameters.user_limits
    return page(req, [user_json(u, limits.get(u.name)) for u in ctx.broker.users.users.values()])


@routes.get("/api/users/{name}", admin=True)
def get_user(ctx: Context, req: Request, name: str) -> Response:
    user = ctx.broker.users.users.get(name)
    if user is None:
        raise HTTPError(404, "not_found", f"user '{name}' not found")
    return json_response(200, user_json(user, ctx.broker.parameters.user_limits.get(name)))


@routes.put("/api/users/{name}", admin=True)
def put_user(ctx: Context, req: Request, name: str) -> Response:
    check_name("user name", name, path_segment=True)
    body = UserBody.model_validate(req.json())
    tags = body.tags.split(",") if isinstance(body.tags, str) else body.tags
    existed = name in ctx.broker.users.users
    ctx.broker.users.add_user(name, body.password, [t for t in tags if t], password_hash=body.password_hash)
    return Response(204 if existed else 201)


@routes.delete("/api/users/{name}", admin=True)
def delete_user(ctx: Context, req: Request, name: str) -> Response:
    if not ctx.broker.users.delete_user(name):
        raise HTTPError(404, "not_found", f"user '{name}' not found")
    return Response(204)
