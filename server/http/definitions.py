"""``/api/definitions[/{vhost}]``: export and import RabbitMQ's definitions document
(administrators only). A vhost's document holds its queues, exchanges, bindings, policies and
parameters without ``vhost`` keys, as RabbitMQ's does, and imports into the vhost of the path.

RabbitMQ's UI downloads with ``?download=<file name>`` (an attachment) and uploads the file as a
``multipart/form-data`` form whose ``file`` part is the document (``uploaded_json``)."""

from __future__ import annotations

import json
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from headrace.server.broker import VHost
from headrace.server.broker.definitions_io import export_definitions, import_definitions

from .definitions_body import DefinitionsBody
from .node_facts import RABBITMQ_API_VERSION
from .routes import Context, HTTPError, Request, Response, Routes, json_response

__all__ = ["routes"]

routes = Routes()
VHOST_SECTIONS = ("parameters", "policies", "queues", "exchanges", "bindings")


def uploaded_json(req: Request) -> Any:
    """The definitions document of a request: its JSON body, or the ``file`` part of a
    ``multipart/form-data`` upload (parsed by the standard library's MIME parser)."""
    content_type = req.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        return req.json()
    message = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + req.body)
    if not message.is_multipart():
        raise HTTPError(400, "bad_request", "multipart/form-data body without a boundary")
    for part in message.iter_parts():
        if part.get_param("name", header="content-disposition") == "file":
            data = part.get_payload(decode=True)
            try:
                return json.loads(data if isinstance(data, bytes) else b"")
            except (ValueError, UnicodeDecodeError) as exc:
                raise HTTPError(400, "bad_request", f"invalid JSON in the uploaded file: {exc}") from None
    raise HTTPError(400, "bad_request", "multipart/form-data upload without a 'file' part")


def _download(req: Request, payload: dict[str, Any]) -> Response:
    """The document, as an attachment named by ``?download=`` when the UI's link asks for one."""
    name = req.arg("download")
    headers = []
    if name:
        safe = "".join(c for c in name if c.isascii() and c.isprintable() and c not in '"\\')
        headers.append(("content-disposition", f'attachment; filename="{safe}"'))
    return json_response(200, payload, headers)


def _export(ctx: Context) -> dict[str, Any]:
    return {"rabbit_version": RABBITMQ_API_VERSION, "rabbitmq_version": RABBITMQ_API_VERSION,
            **export_definitions(ctx.broker, version=ctx.version)}


@routes.get("/api/definitions", admin=True)
def get_definitions(ctx: Context, req: Request) -> Response:
    return _download(req, _export(ctx))


@routes.post("/api/definitions", admin=True)
def post_definitions(ctx: Context, req: Request) -> Response:
    body = DefinitionsBody.model_validate(uploaded_json(req))
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
    return _download(req, out)


@routes.post("/api/definitions/{vhost}", admin=True)
def post_vhost_definitions(ctx: Context, req: Request, vhost: VHost) -> Response:
    doc = uploaded_json(req)
    if not isinstance(doc, dict):
        raise HTTPError(400, "bad_request", "definitions must be a JSON object")
    # only the vhost's sections, each item placed in the vhost of the path
    scoped = {section: [{**item, "vhost": vhost.name} if isinstance(item, dict) else item
                        for item in doc.get(section) or []]
              for section in VHOST_SECTIONS if isinstance(doc.get(section) or [], list)}
    body = DefinitionsBody.model_validate(scoped)
    import_definitions(ctx.broker, body.document(), ctx.now)
    return Response(204)
