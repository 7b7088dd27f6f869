"""Messages over HTTP: publish and publish-batch, get, and streaming consume with settle.

Publishing answers 503 with Retry-After where AMQP would stop reading a publisher; a persistent
publish is answered after the fsync that covers it (``Response.wait_ticket``). Reading message
contents needs the management or administrator tag (``reader=True`` in the route table).
"""

from __future__ import annotations

import base64
import binascii

from pydantic import ValidationError

from headrace.server.amqp.properties import BasicProperties, encode_properties
from headrace.server.broker import Settle, VHost
from headrace.server.broker.core import MIRROR_BACKLOG_MAX
from headrace.server.broker.topic_auth import check_topic_write

from .consume import HTTPConsumer, properties_json
from .models import GetBody, PropertiesBody, PublishBody, SettleBody, from_json_value, validation_reason
from .object_json import exchange_name
from .routes import Context, HTTPError, Request, Response, Routes, json_response, user_of

__all__ = ["MAX_BATCH", "routes"]

routes = Routes()

MAX_BATCH = 10_000  # messages per publish-batch request
ACKMODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false")


# the default exchange is checked as amq.default, as over AMQP (RabbitMQ)
@routes.post("/api/exchanges/{vhost}/{name}/publish", perms=[("write", "name")])
def publish(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    _publishing_allowed(ctx)
    body = PublishBody.model_validate(req.json())
    name = exchange_name(name)
    payload, props_raw = _message_body(body)
    if ctx.broker.users.topic_permissions:  # topic authorisation, as over AMQP
        check_topic_write(ctx.broker.users, vhost, user_of(req).name, name, body.routing_key)
    if vhost.tracing:
        _trace(ctx, req, vhost, name, body.routing_key, props_raw, payload)
    result = ctx.broker.delivery.publish(vhost, name, body.routing_key, props_raw, payload, ctx.now)
    response = json_response(200, {"routed": result.routed})
    response.wait_ticket = result.ticket
    return response


def _trace(ctx: Context, req: Request, vhost: VHost, exchange: str, routing_key: str, props_raw: bytes,
           payload: bytes) -> None:
    """The firehose's copy of an HTTP publish into a traced vhost: no AMQP connection or channel
    (RabbitMQ's management publish names an internal one; here the connection is empty, channel 0)."""
    ctx.broker.firehose.published(vhost, exchange, routing_key, props_raw, payload, None, "", 0, user_of(req).name)


def _message_body(body: PublishBody) -> tuple[bytes, bytes]:
    if body.payload_encoding == "base64":
        try:
            payload = base64.b64decode(body.payload, validate=True)
        except binascii.Error:
            raise HTTPError(400, "bad_request", "payload is not valid base64") from None
    elif body.payload_encoding == "string":
        payload = body.payload.encode()
    else:
        raise HTTPError(400, "bad_request", f"invalid payload_encoding '{body.payload_encoding}'")
    unknown = set(body.properties) - set(BasicProperties.__dataclass_fields__)
    if unknown:
        raise HTTPError(400, "bad_request", f"unknown properties: {', '.join(sorted(unknown))}")
    try:
        props = PropertiesBody.model_validate(body.properties)
    except ValidationError as exc:
        raise HTTPError(400, "bad_request", "properties." + validation_reason(exc)) from None
    fields = props.model_dump(exclude_none=True)
    if "headers" in fields:
        fields["headers"] = from_json_value(fields["headers"])
    return payload, encode_properties(BasicProperties(**fields))


def _publishing_allowed(ctx: Context) -> None:
    """503 + Retry-After where AMQP would stop reading a publisher: an alarm, or the mirror writer or
    the message store too far behind (the backlog bounds AMQP sessions respect)."""
    if ctx.broker.alarms:
        raise HTTPError(503, "service_unavailable", f"publishing blocked: {', '.join(sorted(ctx.broker.alarms))} alarm",
                        [("retry-after", "1")])
    if ctx.broker.mirror_backlog >= MIRROR_BACKLOG_MAX:
        raise HTTPError(503, "service_unavailable", "publishing paused: the mirror writer is behind",
                        [("retry-after", "1")])
    if ctx.broker.store_backlog >= ctx.broker.store_backlog_max:
        raise HTTPError(503, "service_unavailable", "publishing paused: the message store is behind",
                        [("retry-after", "1")])


@routes.post("/api/exchanges/{vhost}/{name}/publish-batch", perms=[("write", "name")])
def publish_batch(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    """NDJSON in, one result per line out (like NSQ's /mpub); answered after the fsync that covers
    the persistent ones."""
    exchange = exchange_name(name)
    _publishing_allowed(ctx)
    lines = [line for line in req.body.splitlines() if line.strip()]
    if len(lines) > MAX_BATCH:
        raise HTTPError(413, "payload_too_large", f"at most {MAX_BATCH} messages per batch")
    parsed = []
    for number, line in enumerate(lines, 1):
        try:
            message = PublishBody.model_validate_json(line)
            parsed.append((*_message_body(message), message))
        except HTTPError as exc:
            raise HTTPError(400, "bad_request", f"line {number}: {exc.reason}") from None
        except ValidationError as exc:
            raise HTTPError(400, "bad_request", f"line {number}: {validation_reason(exc)}") from None
        except ValueError as exc:
            raise HTTPError(400, "bad_request", f"line {number}: {exc}") from None
    if ctx.broker.users.topic_permissions:  # every routing key is checked before any is published
        for _, _, body in parsed:
            check_topic_write(ctx.broker.users, vhost, user_of(req).name, exchange, body.routing_key)
    results = []
    ticket = 0
    for payload, props_raw, body in parsed:
        if vhost.tracing:
            _trace(ctx, req, vhost, exchange, body.routing_key, props_raw, payload)
        result = ctx.broker.delivery.publish(vhost, exchange, body.routing_key, props_raw, payload, ctx.now)
        ticket = max(ticket, result.ticket)
        results.append({"routed": result.routed, "confirmed": not result.rejected})
    response = json_response(200, {"results": results, "published": len(results)})
    response.wait_ticket = ticket
    return response


@routes.post("/api/queues/{vhost}/{name}/get", reader=True, perms=[("read", "name")])
def get_messages(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    body = GetBody.model_validate(req.json())
    queue = vhost.get_queue(name)
    vhost.check_exclusive(queue, None)
    if body.ackmode not in ACKMODES:
        raise HTTPError(400, "bad_request", f"invalid ackmode '{body.ackmode}'")
    if body.encoding not in ("auto", "base64"):
        raise HTTPError(400, "bad_request", f"invalid encoding '{body.encoding}' (auto or base64)")
    owner = object()
    taken = []
    out = []
    for _ in range(body.count):
        entry = ctx.broker.delivery.get(vhost, queue, ctx.now, no_ack=False, owner=owner)
        if entry is None:
            break
        taken.append(entry)
        msg = entry.message
        if vhost.tracing:
            ctx.broker.firehose.delivered(vhost, queue.name, msg, entry.redelivered, "", 0, user_of(req).name)
        payload = msg.body if body.truncate is None else msg.body[:body.truncate]
        if body.encoding == "base64":
            text, encoding = base64.b64encode(payload).decode(), "base64"
        else:
            try:
                text, encoding = payload.decode(), "string"
            except UnicodeDecodeError:
                text, encoding = base64.b64encode(payload).decode(), "base64"
        out.append({"payload": text, "payload_encoding": encoding, "payload_bytes": len(msg.body),
                    "redelivered": entry.redelivered, "exchange": msg.exchange, "routing_key": msg.routing_key,
                    "message_count": queue.messages_ready, "properties": properties_json(msg.props_raw)})
    if body.ackmode.endswith("requeue_true"):
        action = Settle.REQUEUE
    else:
        action = Settle.REJECT if body.ackmode.startswith("reject") else Settle.ACK
    ctx.broker.delivery.settle(vhost, [(queue, entry) for entry in taken], action, ctx.now)
    return json_response(200, out)


@routes.get("/api/queues/{vhost}/{name}/consume", reader=True, perms=[("read", "name")])
def consume(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    """Start a streaming consumer; the shell streams its deliveries (NDJSON, one per line)."""
    queue = vhost.get_queue(name)
    vhost.check_exclusive(queue, None)
    if queue.is_log:  # its consumers read a cursor over the log (AMQP with x-stream-offset)
        raise HTTPError(400, "bad_request", f"streaming consume is not supported by stream queue '{name}' in "
                        f"vhost '{vhost.name}': consume it over AMQP (basic.consume with a prefetch)")
    try:
        prefetch = int(req.arg("prefetch", "10") or 10)
    except ValueError:
        raise HTTPError(400, "bad_request", "prefetch must be an integer") from None
    consumer = HTTPConsumer(ctx.broker.delivery, vhost, queue, prefetch, user=user_of(req).name,
                            firehose=ctx.broker.firehose)
    response = Response(200, content_type="application/x-ndjson")
    response.stream = consumer
    return response


@routes.post("/api/consumers/{tag}/settle")
def settle(ctx: Context, req: Request, tag: str) -> Response:
    consumer = ctx.http_consumers.get(tag)
    if consumer is None or consumer.closed:
        raise HTTPError(404, "not_found", f"no HTTP consumer '{tag}'")
    user = user_of(req)
    if consumer.user != user.name and not user.is_administrator:
        raise HTTPError(403, "access_refused", f"consumer '{tag}' belongs to another user")
    body = SettleBody.model_validate(req.json())
    if body.action not in ("ack", "nack", "reject"):
        raise HTTPError(400, "bad_request", f"invalid action '{body.action}'")
    unknown = consumer.settle(body.delivery_ids, body.action, body.requeue, ctx.now)
    if unknown:
        raise HTTPError(406, "precondition_failed", f"unknown delivery ids {unknown}")
    return Response(204)
