"""``/api/stream-groups``: consumer groups on streams and super streams, per partition.

RabbitMQ 3.10's management API has no such resource (its stream groups live in the stream
protocol's plugin), so the path is headrace's own, in the API's style. One object per group:
``{"vhost", "name" (the group), "stream" (the super stream's name, or the stream's), "super_stream",
"members", "lag", "partitions": [{"stream", "partition", "active_consumer", "waiting",
"committed_offset", "lag"}]}``; ``active_consumer`` is ``{"consumer_tag", "channel_details"}`` as in
``/api/consumers``, or null. The same list is the ``groups`` of ``/api/super-streams/{vhost}/{name}``.
"""

from __future__ import annotations

from typing import Any

from headrace.exchanges import SuperStreamExchange
from headrace.server.broker import VHost
from headrace.server.broker.errors import not_found
from headrace.server.broker.stream_groups import GroupView, stream_groups

from .listing import visible_vhosts
from .object_json import consumer_json
from .routes import Context, Request, Response, Routes, json_response

__all__ = ["group_json", "routes"]

routes = Routes()


def group_json(vhost: VHost, view: GroupView) -> dict[str, Any]:
    rows = []
    for p in view.partitions:
        position = p.position
        active = None if position is None else position.active
        member: dict[str, Any] | None = None
        if active is not None:
            described = consumer_json(vhost, p.stream, active)
            member = {"consumer_tag": described["consumer_tag"], "channel_details": described["channel_details"]}
        rows.append({"stream": p.stream, "partition": p.partition, "active_consumer": member,
                     "waiting": 0 if position is None else max(position.members - (active is not None), 0),
                     "committed_offset": None if position is None else position.committed, "lag": p.lag})
    return {"vhost": view.vhost, "name": view.name, "stream": view.stream, "super_stream": view.super_stream,
            "members": view.members, "lag": view.lag, "partitions": rows}


@routes.get("/api/stream-groups")
@routes.get("/api/stream-groups/{vhost}")
def list_groups(ctx: Context, req: Request, vhost: VHost | None = None) -> Response:
    vhosts = [vhost] if vhost is not None else visible_vhosts(ctx, req)
    return json_response(200, [group_json(v, g) for v in vhosts for g in stream_groups(v)])


@routes.get("/api/stream-groups/{vhost}/{name}")
def stream_groups_of(ctx: Context, req: Request, vhost: VHost, name: str) -> Response:
    """The groups on super stream or stream ``name``: 404 when it is neither."""
    queue = vhost.queues.get(name)
    if not isinstance(vhost.exchanges.get(name), SuperStreamExchange) and (queue is None or not queue.is_log):
        raise not_found("stream", name, vhost.name)
    return json_response(200, [group_json(vhost, g) for g in stream_groups(vhost, name)])
