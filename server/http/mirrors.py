"""``/api/mirrors``: which exchanges are mirrored to the log the Spark bridge reads, their retention,
and where their logs stand (first and next offset, bytes and segments on disk)."""

from __future__ import annotations

from headrace.server.broker import VHost

from .listing import visible_vhosts
from .models import MirrorBody
from .routes import Context, Request, Response, Routes, json_response

__all__ = ["routes"]

routes = Routes()


@routes.get("/api/mirrors")
def list_mirrors(ctx: Context, req: Request) -> Response:
    out = []
    for v in visible_vhosts(ctx, req):
        for name in sorted(v.mirrored):
            age, size = v.mirror_retention.get(name, (None, None))
            out.append({"vhost": v.name, "exchange": name, "max_age_ms": age, "max_bytes": size,
                        **ctx.mirror_facts(v.name, name)})
    return json_response(200, out)


@routes.put("/api/mirrors/{vhost}/{name}", perms=[("configure", "name")])
def put_mirror(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    body = MirrorBody.model_validate(req.json())
    vhost.set_mirror(name, True, max_age_ms=body.max_age_ms, max_bytes=body.max_bytes)
    return Response(204)


@routes.delete("/api/mirrors/{vhost}/{name}", perms=[("configure", "name")])
def delete_mirror(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    vhost.set_mirror(name, False)
    return Response(204)
