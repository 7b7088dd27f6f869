"""The shape of a management API answer, as ``benchmarks/api_compare.py`` records RabbitMQ's and
``test_e2e_http_endpoints.py`` checks headrace's against the recording: the status, the kind of
body (object, list, empty list) and the dotted key paths of the object or of a list's first item.

``ENDPOINTS`` is RabbitMQ 3.10's documented GET list (its ``/api/index.html``), as templates over
the names of the objects both sides declare; ``{node}`` and ``{port}`` are each broker's own.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ENDPOINTS", "OPAQUE", "key_paths", "shape_of"]

ENDPOINTS = [
    "/api/overview", "/api/cluster-name", "/api/nodes", "/api/nodes/{node}", "/api/extensions",
    "/api/definitions", "/api/definitions/%2F", "/api/connections", "/api/vhosts/%2F/connections",
    "/api/connections/{conn}", "/api/connections/{conn}/channels", "/api/channels", "/api/vhosts/%2F/channels",
    "/api/channels/{chan}", "/api/consumers", "/api/consumers/%2F", "/api/exchanges", "/api/exchanges/%2F",
    "/api/exchanges/%2F/{x}", "/api/exchanges/%2F/{x}/bindings/source", "/api/exchanges/%2F/{x2}/bindings/destination",
    "/api/queues", "/api/queues/%2F", "/api/queues/detailed", "/api/queues/%2F/{q}", "/api/queues/%2F/{q}/bindings",
    "/api/bindings", "/api/bindings/%2F", "/api/bindings/%2F/e/{x}/q/{q}", "/api/bindings/%2F/e/{x}/q/{q}/{props_q}",
    "/api/bindings/%2F/e/{x}/e/{x2}", "/api/bindings/%2F/e/{x}/e/{x2}/{props_e}", "/api/vhosts", "/api/vhosts/%2F",
    "/api/vhosts/%2F/permissions", "/api/vhosts/%2F/topic-permissions", "/api/users", "/api/users/without-permissions",
    "/api/users/guest", "/api/users/guest/permissions", "/api/users/guest/topic-permissions", "/api/user-limits",
    "/api/user-limits/guest", "/api/whoami", "/api/permissions", "/api/permissions/%2F/guest",
    "/api/topic-permissions", "/api/topic-permissions/%2F/guest", "/api/parameters",
    "/api/parameters/federation-upstream", "/api/parameters/federation-upstream/%2F",
    "/api/parameters/federation-upstream/%2F/up", "/api/global-parameters", "/api/global-parameters/walk",
    "/api/policies", "/api/policies/%2F", "/api/policies/%2F/walk", "/api/aliveness-test/%2F",
    "/api/health/checks/alarms", "/api/health/checks/local-alarms",
    "/api/health/checks/certificate-expiration/1/months", "/api/health/checks/port-listener/{port}",
    "/api/health/checks/protocol-listener/amqp", "/api/health/checks/virtual-hosts",
    "/api/health/checks/node-is-mirror-sync-critical", "/api/health/checks/node-is-quorum-critical",
    "/api/vhost-limits", "/api/vhost-limits/{v}", "/api/auth", "/api/feature-flags",
    # not found, as clients meet it
    "/api/queues/%2F/no-such-queue", "/api/exchanges/no-such-vhost", "/api/users/no-such-user",
]
# values whose keys are data, not schema (client properties, arguments, policy definitions, ...),
# or lists of objects with shapes of their own: their key paths stop at the value itself
OPAQUE = {"client_properties", "arguments", "value", "definition", "effective_policy_definition", "cluster_state",
          "garbage_collection", "backing_queue_status", "socket_opts", "exchange_types", "auth_mechanisms",
          "applications", "contexts", "listeners", "enabled_plugins", "log_files", "config_files",
          "metrics_gc_queue_length", "limits", "capabilities", "sample_retention_policies", "tags", "metadata",
          "users", "vhosts", "permissions", "topic_permissions", "parameters", "global_parameters", "policies",
          "queues", "exchanges", "bindings", "items", "alarms", "partitions", "cluster_links", "consumer_details",
          "incoming", "deliveries", "outgoing", "publishes", "stream"}


def key_paths(value: Any, prefix: str = "") -> set[str]:
    """Dotted key paths of a JSON object (of a list of objects: its first item's, as ``name[].key``)."""
    paths: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            path = prefix + key
            paths.add(path)
            if key not in OPAQUE:
                paths |= key_paths(item, path + ".")
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        paths |= key_paths(value[0], prefix.rstrip(".") + "[].")
    return paths


def shape_of(status: int, body: Any) -> dict[str, Any]:
    """Status, kind (object / list / list0 for an empty list / other) and key paths of an answer."""
    if isinstance(body, list):
        first = body[0] if body else None
        return {"status": status, "kind": "list" if body else "list0",
                "keys": sorted(key_paths(first)) if isinstance(first, dict) else []}
    if isinstance(body, dict):
        return {"status": status, "kind": "object", "keys": sorted(key_paths(body))}
    return {"status": status, "kind": type(body).__name__, "keys": []}
