"""``/api/deprecated-features`` and ``/api/deprecated-features/used`` (RabbitMQ 3.13 and 4.x), and
the health checks 4.x added (``is-in-service``, ``below-node-connection-limit``,
``ready-to-serve-clients``, ``metadata-store/initialized[/with-data]``,
``quorum-queues-without-elected-leaders/...``), in RabbitMQ's shapes.

What counts as used is read from the broker as it is now, as RabbitMQ's checks do: transient
non-exclusive queues and queues or policies naming a queue master locator or classic mirroring
that exist; global QoS once a client asked for it since the start (the broker's
``deprecated_used``, which only ``basic.qos`` adds to).
"""

from __future__ import annotations

import re
from typing import Any

from headrace.server.broker import VHost
from headrace.server.broker.policies import MIRRORING_KEYS

from .node_facts import NODE_NAME
from .nodes import require_monitor
from .routes import Context, HTTPError, Request, Response, Routes, json_response

__all__ = ["DEPRECATED_FEATURES", "routes", "used_features"]

routes = Routes()

# RabbitMQ 4.x's deprecated features (name, description, phase, docs): the list its
# rabbit_deprecated_features registry answers on a node without AMQP 1.0 addresses of its own
DEPRECATED_FEATURES: tuple[tuple[str, str, str, str], ...] = (
    ("classic_queue_mirroring", "Classic mirrored queues", "removed", "https://www.rabbitmq.com/docs/3.13/ha"),
    ("global_qos", "Global QoS", "permitted_by_default", "https://www.rabbitmq.com/docs/consumer-prefetch"),
    ("management_metrics_collection", "Management metrics collection", "permitted_by_default",
     "https://www.rabbitmq.com/docs/prometheus"),
    ("queue_master_locator", "queue-master-locator queue argument", "permitted_by_default",
     "https://www.rabbitmq.com/docs/clustering#replica-placement"),
    ("ram_node_type", "RAM nodes", "permitted_by_default", "https://www.rabbitmq.com/docs/clustering#cluster-node-types"),
    ("transient_nonexcl_queues", "Transient non-exclusive queues", "permitted_by_default",
     "https://www.rabbitmq.com/docs/queues#durability"),
)


def used_features(ctx: Context) -> set[str]:
    broker = ctx.broker
    used = set(broker.deprecated_used)
    for vhost in broker.vhosts.values():
        for queue in vhost.queues.values():
            if not queue.durable and queue.exclusive_owner is None:
                used.add("transient_nonexcl_queues")
            if "x-queue-master-locator" in queue.arguments:
                used.add("queue_master_locator")
    for policy in broker.policies.list():
        if any(key in policy.definition for key in MIRRORING_KEYS):
            used.add("classic_queue_mirroring")
        if "queue-master-locator" in policy.definition:
            used.add("queue_master_locator")
    return used


def _features(ctx: Context, names: set[str] | None) -> list[dict[str, Any]]:
    mirroring = ctx.broker.compat.classic_mirroring  # 3.10 semantics: still permitted
    return [{"name": name, "desc": desc, "doc_url": doc, "provided_by": "rabbit",
             "deprecation_phase": "permitted_by_default" if name == "classic_queue_mirroring" and mirroring else phase}
            for name, desc, phase, doc in DEPRECATED_FEATURES if names is None or name in names]


@routes.get("/api/deprecated-features")
def deprecated_features(ctx: Context, req: Request) -> Response:
    require_monitor(req)
    return json_response(200, _features(ctx, None))


@routes.get("/api/deprecated-features/used")
def deprecated_features_used(ctx: Context, req: Request) -> Response:
    require_monitor(req)
    return json_response(200, _features(ctx, used_features(ctx)))


def _ok(**extra: Any) -> Response:
    return json_response(200, {"status": "ok", **extra})


def _below_limit(ctx: Context) -> Response | None:
    limit = ctx.broker.limits.max_connections
    count = len(ctx.broker.connections)
    if count >= limit:
        return json_response(503, {"status": "failed", "reason": f"node {NODE_NAME} has reached the maximum "
                                   f"number of connections ({limit})", "limit": limit, "connections": count})
    return None


@routes.get("/api/health/checks/is-in-service")
def is_in_service(ctx: Context, req: Request) -> Response:
    return _ok()  # a node that answers has booted, and headrace has no maintenance mode


@routes.get("/api/health/checks/below-node-connection-limit")
def below_node_connection_limit(ctx: Context, req: Request) -> Response:
    return _below_limit(ctx) or _ok(limit=ctx.broker.limits.max_connections, connections=len(ctx.broker.connections))


@routes.get("/api/health/checks/ready-to-serve-clients")
def ready_to_serve_clients(ctx: Context, req: Request) -> Response:
    """is-in-service, an AMQP listener, and below the connection limit, as RabbitMQ combines them."""
    if not any(lst.name in ("amqp", "amqps") for lst in ctx.node_facts().listeners):
        return json_response(503, {"status": "failed", "reason": "no active AMQP listener"})
    return _below_limit(ctx) or _ok()


@routes.get("/api/health/checks/metadata-store/initialized")
def metadata_store_initialized(ctx: Context, req: Request) -> Response:
    return _ok()  # the definitions are loaded before the listeners open


@routes.get("/api/health/checks/metadata-store/initialized/with-data")
def metadata_store_with_data(ctx: Context, req: Request) -> Response:
    if not ctx.broker.vhosts:
        return json_response(503, {"status": "failed", "reason": "the metadata store has no virtual host"})
    return _ok()


def _no_leaderless(pattern: str) -> Response:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise HTTPError(400, "bad_request", f"invalid pattern '{pattern}': {exc}") from None
    # one node holds every quorum queue and leads it: none is without an elected leader
    return _ok(reason="No quorum queues without an elected leader")


@routes.get("/api/health/checks/quorum-queues-without-elected-leaders/all-vhosts/{pattern}")
def leaderless_all(ctx: Context, req: Request, pattern: str) -> Response:
    return _no_leaderless(pattern)


@routes.get("/api/health/checks/quorum-queues-without-elected-leaders/vhost/{vhost}/{pattern}")
def leaderless_vhost(ctx: Context, req: Request, vhost: VHost, pattern: str) -> Response:
    return _no_leaderless(pattern)
