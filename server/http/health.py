"""Health: the alarms check, RabbitMQ's aliveness test, and ``/metrics`` for Prometheus."""

from __future__ import annotations

import secrets

from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import VHost

from .metrics import render_metrics
from .routes import Context, HTTPError, Request, Response, Routes, check_permission, json_response, user_of

__all__ = ["ALIVENESS_QUEUE", "routes"]

routes = Routes()

ALIVENESS_QUEUE = "aliveness-test"


@routes.get("/api/health/checks/alarms")
def alarms(ctx: Context, req: Request) -> Response:
    if ctx.broker.alarms:
        return json_response(503, {"status": "failed", "reason": f"alarms in effect: {', '.join(sorted(ctx.broker.alarms))}"})
    return json_response(200, {"status": "ok"})


@routes.get("/api/aliveness-test/{vhost}")
def aliveness(ctx: Context, req: Request, vhost: VHost) -> Response:
    """RabbitMQ's aliveness test: declare, publish, get. The caller needs the rights those use on
    ``aliveness-test`` (401 otherwise, as RabbitMQ answers). The round trip runs through a queue of
    its own, declared and deleted within this one synchronous call, so it never takes a message
    somebody else published to ``aliveness-test``."""
    for kind in ("configure", "write", "read"):
        check_permission(ctx, user_of(req), vhost.name, kind, ALIVENESS_QUEUE)
    name = f"{ALIVENESS_QUEUE}.{secrets.token_hex(8)}"
    token = secrets.token_bytes(16)
    queue = vhost.declare_queue(name, owner=None, now=ctx.now, durable=False)
    try:
        ctx.broker.delivery.publish(vhost, "", name, encode_properties(BasicProperties()), token, ctx.now)
        entry = ctx.broker.delivery.get(vhost, queue, ctx.now, no_ack=True, owner=None)
        ok = entry is not None and entry.message.body == token
    finally:
        vhost.delete_queue(name)
    return json_response(200 if ok else 500, {"status": "ok" if ok else "failed"})


@routes.get("/metrics", auth=False)
def metrics(ctx: Context, req: Request) -> Response:
    """Open to scrapers without credentials, so off unless the ``metrics`` setting says otherwise."""
    if ctx.metrics == "off":
        raise HTTPError(404, "not_found", "metrics are off (the 'metrics' setting: aggregate or per-queue)")
    text = render_metrics(ctx.broker, store_bytes=ctx.store_bytes(), per_queue=ctx.metrics == "per-queue",
                          cluster=ctx.node_facts().cluster)
    return Response(200, text.encode(), content_type="text/plain; version=0.0.4")
