"""``/api/bindings``: list, create and delete bindings (queue and exchange destinations).

Binding needs write on the destination and read on the source, as RabbitMQ's queue.bind checks;
unbinding checks the same. The ``props`` of a binding's URL is its ``properties_key``."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote

from headrace.exchanges import Binding, DestinationKind
from headrace.server.broker import VHost

from .listing import page, visible_vhosts
from .models import BindingBody
from .object_json import binding_json, default_binding_json, exchange_name
from .routes import Context, HTTPError, Request, Response, Routes

__all__ = ["routes"]

routes = Routes()
QUEUE, EXCHANGE = {"kind": DestinationKind.QUEUE}, {"kind": DestinationKind.EXCHANGE}
RIGHTS = [("write", "dest"), ("read", "source")]


@routes.get("/api/bindings")
@routes.get("/api/bindings/{vhost}")
def list_bindings(ctx: Context, req: Request, vhost: VHost | None = None) -> Response:
    """Each vhost's bindings after the default exchange's implicit one of each of its queues, as
    RabbitMQ lists them (and rabbitmqadmin's ``list bindings`` shows them)."""
    rows: list[dict[str, Any]] = []
    for v in [vhost] if vhost is not None else visible_vhosts(ctx, req):
        rows += [default_binding_json(v, queue) for queue in v.queues]
        rows += [binding_json(v, b) for b in v.bindings()]
    return page(req, rows)


@routes.post("/api/bindings/{vhost}/e/{source}/q/{dest}", perms=RIGHTS, params=QUEUE)
@routes.post("/api/bindings/{vhost}/e/{source}/e/{dest}", perms=RIGHTS, params=EXCHANGE)
def bind(ctx: Context, req: Request, vhost: VHost, source: str, dest: str, kind: DestinationKind) -> Response:
    body = BindingBody.model_validate(req.json())
    source = exchange_name(source)  # the default exchange: refused (401) as over AMQP
    vhost.bind(source, dest, kind, body.routing_key, body.arguments)
    key = Binding.make(source, dest, kind, body.routing_key, body.arguments).properties_key
    letter = "q" if kind is DestinationKind.QUEUE else "e"
    return Response(201, headers=[("location", f"/api/bindings/{_q(vhost.name)}/e/{_q(source)}/{letter}/"
                                               f"{_q(dest)}/{key}")])


@routes.delete("/api/bindings/{vhost}/e/{source}/q/{dest}/{props}", perms=RIGHTS, params=QUEUE)
@routes.delete("/api/bindings/{vhost}/e/{source}/e/{dest}/{props}", perms=RIGHTS, params=EXCHANGE)
def unbind(ctx: Context, req: Request, vhost: VHost, source: str, dest: str, props: str,
           kind: DestinationKind) -> Response:
    source = exchange_name(source)
    if not source:  # an implicit binding: the default exchange refuses it (401 here, 403 over AMQP)
        vhost.unbind(source, dest, kind, dest, None)
    for b in vhost.exchanges[source].bindings() if source in vhost.exchanges else []:
        if b.destination == dest and b.kind is kind and props in (b.properties_key, unquote(b.properties_key)):
            vhost.unbind(source, dest, kind, b.routing_key, b.arguments_dict())
            return Response(204)
    raise HTTPError(404, "not_found", "binding not found")


def _q(text: str) -> str:
    return quote(text, safe="")
