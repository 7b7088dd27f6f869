"""``/api/definitions[/{vhost}]``: export and import RabbitMQ's definitions document
(administrators only). A vhost's document holds its queues, exchanges, bindings, policies and
parameters without ``vhost`` keys, as RabbitMQ's does, and imports into the vhost of the path."""

from __future__ import annotations

from typing import Any

from headrace.server.broker import VHost
from headrace.server.broker.definitions_io import export_definitions, import_definitions

from .definitions_body import DefinitionsBody
from .node_facts import RABBITMQ_API_VERSION
from .routes import Context, HTTPError, Request, Response, Routes, json_response

__all__ = ["routes"]

routes = Routes()
VHOST_SECTIONS = ("parameters", "policies", "queues", "exchanges", "bindings")


def _export(ctx: Context) -> dict[str, Any]:
    return {"rabbit_version": RABBITMQ_API_VERSION, "rabbitmq_version": RABBITMQ_API_VERSION,
            **export_definitions(ctx.broker, version=ctx.version)}


@routes.get("/api/definitions", admin=True)
def get_definitions(ctx: Context, req: Request) -> Response:
    return json_response(200, _export(ctx))


@routes.post("/api/definitions", admin=True)
def post_definitions(ctx: Context, req: Request) -> Response:
    body = DefinitionsBody.model_validate(req.json())
    import_definitions(ctx.broker, body.document(), ctx.now)
    return Response(204)


@routes.get("/api/definitions/{vhost}", admin=True)
def get_vhost_definitions(ctx: Context, req: Request, vhost: VHost) -> Response:
    full = _export(ctx)
    out: dict[str, Any] = {k: full[k] for k in ("rabbit_version", "rabbitmq_version", "product_name",
                                                "product_version")}
    for section in VHOST_SECTIONS:
        out[section] = [{k: v for k, v in item.items() if k != "vhost"}
                        for item in full.get(section, []) if item.get("vhost") == vhost.name]
    return json_response(200, out)


@routes.post("/api/definitions/{vhost}", admin=True)
def post_vhost_definitions(ctx: Context, req: Request, vhost: VHost) -> Response:
    doc = req.json()
    if not isinstance(doc, dict):
        raise HTTPError(400, "bad_request", "definitions must be a JSON object")
    # only the vhost's sections, each item placed in the vhost of the path
    scoped = {section: [{**item, "vhost": vhost.name} if isinstance(item, dict) else item
                        for item in doc.get(section) or []]
              for section in VHOST_SECTIONS if isinstance(doc.get(section) or [], list)}
    body = DefinitionsBody.model_validate(scoped)
    import_definitions(ctx.broker, body.document(), ctx.now)
    return Response(204)
