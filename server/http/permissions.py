"""``/api/permissions``: a user's configure/write/read patterns per vhost (administrators only).

The ``{vhost}`` here names the permission's vhost, not one the caller works in: ``vhost=None``
keeps it a plain name (the caller's own access to it is not what is asked)."""

from __future__ import annotations

from headrace.server.auth import Permission

from .listing import page
from .models import PermissionBody
from .routes import Context, HTTPError, Request, Response, Routes, json_response

__all__ = ["routes"]

routes = Routes()


@routes.get("/api/permissions", admin=True)
def list_permissions(ctx: Context, req: Request) -> Response:
    return page(req, [{"user": u, "vhost": v, "configure": p.configure, "write": p.write, "read": p.read}
                      for (u, v), p in ctx.broker.users.permissions.items()])


@routes.get("/api/permissions/{vhost}/{user}", admin=True, vhost=None)
def get_permission(ctx: Context, req: Request, vhost: str, user: str) -> Response:
    p = ctx.broker.users.permission(user, vhost)
    if p is None:
        raise HTTPError(404, "not_found", f"no permissions for user '{user}' in vhost '{vhost}'")
    return json_response(200, {"user": user, "vhost": vhost, "configure": p.configure, "write": p.write,
                               "read": p.read})


@routes.put("/api/permissions/{vhost}/{user}", admin=True, vhost=None)
def put_permission(ctx: Context, req: Request, vhost: str, user: str) -> Response:
    if vhost not in ctx.broker.vhosts:
        raise HTTPError(404, "not_found", f"vhost '{vhost}' not found")
    if user not in ctx.broker.users.users:
        raise HTTPError(404, "not_found", f"user '{user}' not found")
    body = PermissionBody.model_validate(req.json())
    existed = ctx.broker.users.permission(user, vhost) is not None
    ctx.broker.users.set_permission(user, vhost, Permission(body.configure, body.write, body.read))
    return Response(204 if existed else 201)


@routes.delete("/api/permissions/{vhost}/{user}", admin=True, vhost=None)
def delete_permission(ctx: Context, req: Request, vhost: str, user: str) -> Response:
    if not ctx.broker.users.clear_permission(user, vhost):
        raise HTTPError(404, "not_found", "permission not found")
    return Response(204)
