"""``/api/shovels`` and ``/api/federation-links``: the dynamic shovels' and federation links' status, in the shape of RabbitMQ's shovel management
plugin (3.10's keys; 4.1's ``forwarded`` / ``remaining`` counters). The definitions themselves are
runtime parameters (``/api/parameters/shovel``, checked by ``parameters.py``); the status is the
shell's (``server/net/shovels.py``), read through ``Context.shovel_status``."""

from __future__ import annotations

from headrace.server.broker import VHost

from .listing import page, visible_vhosts
from .routes import Context, HTTPError, Request, Response, Routes, json_response

__all__ = ["routes"]

routes = Routes()


@routes.get("/api/shovels")
def list_shovels(ctx: Context, req: Request) -> Response:
    names = {v.name for v in visible_vhosts(ctx, req)}
    return page(req, [s for s in ctx.shovel_status(None) if s["vhost"] in names])


@routes.get("/api/shovels/{vhost}")
def list_vhost_shovels(ctx: Context, req: Request, vhost: VHost) -> Response:
    return page(req, ctx.shovel_status(vhost.name))


@routes.get("/api/shovels/vhost/{vhost}/{name}")
def get_shovel(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    for status in ctx.shovel_status(vhost.name):
        if status["name"] == name:
            return json_response(200, status)
    raise HTTPError(404, "not_found", f"shovel '{name}' not found in vhost '{vhost.name}'")


@routes.get("/api/federation-links")
def list_federation_links(ctx: Context, req: Request) -> Response:
    names = {v.name for v in visible_vhosts(ctx, req)}
    return page(req, [s for s in ctx.federation_status(None) if s["vhost"] in names])


@routes.get("/api/federation-links/{vhost}")
def list_vhost_federation_links(ctx: Context, req: Request, vhost: VHost) -> Response:
    return page(req, ctx.federation_status(vhost.name))
