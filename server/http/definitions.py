"""``/api/definitions``: export and import RabbitMQ's definitions document (administrators only)."""

from __future__ import annotations

from headrace.server.broker.definitions_io import export_definitions, import_definitions

from .definitions_body import DefinitionsBody
from .routes import Context, Request, Response, Routes, json_response

__all__ = ["routes"]

routes = Routes()


@routes.get("/api/definitions", admin=True)
def get_definitions(ctx: Context, req: Request) -> Response:
    return json_response(200, export_definitions(ctx.broker, version=ctx.version))


@routes.post("/api/definitions", admin=True)
def post_definitions(ctx: Context, req: Request) -> Response:
    body = DefinitionsBody.model_validate(req.json())
    import_definitions(ctx.broker, body.document(), ctx.now)
    return Response(204)
