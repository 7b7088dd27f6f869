"""Export and import of definitions in RabbitMQ's definitions JSON format.

The same document is the durable-definitions file on disk, the body of ``GET/POST /api/definitions``
and the CLI's ``definitions export|import``, so a RabbitMQ export can be loaded here and back.
"""

from __future__ import annotations

from typing import Any

from headrace.exchanges import DestinationKind
from headrace.server.auth import Permission, TopicPermission

from .core import Broker
from .policies import apply_policies
from .vhost import PREDECLARED

__all__ = ["export_definitions", "import_definitions", "import_settings"]

_PREDECLARED_NAMES = {"", *(name for name, _ in PREDECLARED)}


def export_definitions(broker: Broker, *, version: str = "0") -> dict[str, Any]:
    users = broker.users
    out: dict[str, Any] = {
        "product_name": "headrace",
        "product_version": version,
        "users": [
            {"name": u.name, "password_hash": u.password_hash, "hashing_algorithm": "pbkdf2_sha256",
             "tags": list(u.tags), "limits": dict(broker.parameters.user_limits.get(u.name, {}))}
            for u in users.users.values()
        ],
        "vhosts": [{"name": name} for name in broker.vhosts],
        "permissions": [
            {"user": user, "vhost": vhost, "configure": p.configure, "write": p.write, "read": p.read}
            for (user, vhost), p in users.permissions.items()
        ],
        "topic_permissions": [
            {"user": user, "vhost": vhost, "exchange": exchange, "write": p.write, "read": p.read}
            for (user, vhost, exchange), p in users.topic_permissions.items()
        ],
        "parameters": broker.parameters.list_parameters(),
        "global_parameters": [{"name": name, "value": value}
                              for name, value in sorted(broker.parameters.global_parameters.items())],
        "exchanges": [],
        "queues": [],
        "bindings": [],
        # headrace's own: exchanges mirrored into the replay log (RabbitMQ ignores unknown keys),
        # and x-mirror exchanges whose mirroring was switched off
        "mirrors": [],
        "mirrors_disabled": [],
        "policies": [p.as_json() for p in broker.policies.list()],
        "operator_policies": [p.as_json() for p in broker.policies.list(operator=True)],
    }
    for vname, vhost in broker.vhosts.items():
        for ename, ex in vhost.exchanges.items():
            if ename in _PREDECLARED_NAMES or not ex.durable:
                continue
            out["exchanges"].append({
                "name": ename, "vhost": vname, "type": vhost.exchange_type(ename), "durable": True,
                "auto_delete": ex.auto_delete, "internal": ex.internal, "arguments": dict(ex.arguments),
            })
        for qname, q in vhost.queues.items():
            if not q.durable or q.exclusive_owner is not None:
                continue
            out["queues"].append({"name": qname, "vhost": vname, "durable": True,
                                  "auto_delete": q.auto_delete, "arguments": dict(q.arguments)})
        # The mirror setting is durable on its own and applied after the exchanges, so it overrides
        # the x-mirror declare argument: an exchange declared with x-mirror and later switched off
        # (or given another retention) stays that way after a restart.
        for ename, ex in sorted(vhost.exchanges.items()):
            if ename in _PREDECLARED_NAMES or not ex.durable:
                continue
            if ename in vhost.mirrored:
                age, size = vhost.mirror_retention.get(ename, (None, None))
                out["mirrors"].append({"vhost": vname, "exchange": ename, "max_age_ms": age, "max_bytes": size})
            elif ex.arguments.get("x-mirror"):
                out["mirrors_disabled"].append({"vhost": vname, "exchange": ename})
        for b in vhost.bindings():
            if vhost._binding_durable(b):
                out["bindings"].append({
                    "source": b.source, "vhost": vname, "destination": b.destination,
                    "destination_type": b.kind.value, "routing_key": b.routing_key,
                    "arguments": b.arguments_dict(),
                })
    return out


def import_definitions(broker: Broker, doc: dict[str, Any], now: float) -> None:
    """Apply a definitions document; raises ValueError (bad document) or the AMQP exceptions of the
    declare it failed on. Existing objects are kept (declare is idempotent)."""
    if not isinstance(doc, dict):
        raise ValueError("definitions must be a JSON object")
    users = broker.users
    for vh in doc.get("vhosts", []):
        broker.add_vhost(_field(vh, "name"))
    for u in doc.get("users", []):
        tags = u.get("tags", [])
        if isinstance(tags, str):
            tags = [t for t in tags.split(",") if t]
        algorithm = u.get("hashing_algorithm", "pbkdf2_sha256")
        if "password" in u:
            users.add_user(_field(u, "name"), u["password"], tags)
        elif algorithm == "pbkdf2_sha256" or not u.get("password_hash"):
            users.add_user(_field(u, "name"), None, tags, password_hash=u.get("password_hash", ""))
        else:
            raise ValueError(f"unsupported hashing_algorithm '{algorithm}' for user '{u.get('name')}'")
    for p in doc.get("permissions", []):
        users.set_permission(_field(p, "user"), _field(p, "vhost"),
                             Permission(p.get("configure", ".*"), p.get("write", ".*"), p.get("read", ".*")))
    import_settings(broker, doc)
    # policies first: the queues and exchanges declared below take them as they are created
    touched: set[str] = set()
    for key, operator in (("policies", False), ("operator_policies", True)):
        for p in doc.get(key, []):
            vhost_name = p.get("vhost", "/") if isinstance(p, dict) else "/"
            broker.add_vhost(vhost_name)
            broker.policies.set(vhost_name, _field(p, "name"), p, operator=operator)
            touched.add(vhost_name)
    for e in doc.get("exchanges", []):
        vhost = broker.add_vhost(e.get("vhost", "/"))
        vhost.declare_exchange(_field(e, "name"), e.get("type", "direct"), durable=e.get("durable", True),
                               auto_delete=e.get("auto_delete", False), internal=e.get("internal", False),
                               arguments=e.get("arguments") or {})
    for q in doc.get("queues", []):
        vhost = broker.add_vhost(q.get("vhost", "/"))
        vhost.declare_queue(_field(q, "name"), owner=None, now=now, durable=q.get("durable", True),
                            auto_delete=q.get("auto_delete", False), arguments=q.get("arguments") or {})
    for b in doc.get("bindings", []):
        vhost = broker.add_vhost(b.get("vhost", "/"))
        kind = DestinationKind(b.get("destination_type", "queue"))
        vhost.bind(_field(b, "source"), _field(b, "destination"), kind, b.get("routing_key", ""),
                   b.get("arguments") or {})
    for mirror in doc.get("mirrors", []):
        vhost = broker.add_vhost(mirror.get("vhost", "/"))
        vhost.set_mirror(_field(mirror, "exchange"), True, max_age_ms=mirror.get("max_age_ms"),
                         max_bytes=mirror.get("max_bytes"))
    for mirror in doc.get("mirrors_disabled", []):
        vhost = broker.add_vhost(mirror.get("vhost", "/"))
        vhost.set_mirror(_field(mirror, "exchange"), False)
    for vhost_name in touched:  # queues and exchanges that existed before the import
        apply_policies(broker.policies, broker.delivery, broker.vhosts[vhost_name], now)
    broker.definitions_changed()


def import_settings(broker: Broker, doc: dict[str, Any]) -> None:
    """User limits, topic permissions, runtime and global parameters of a definitions document."""
    params = broker.parameters
    for u in doc.get("users", []):
        for name, value in (u.get("limits") or {}).items():
            params.set_user_limit(_field(u, "name"), name, value)
    for p in doc.get("topic_permissions", []):
        broker.users.set_topic_permission(_field(p, "user"), _field(p, "vhost"), TopicPermission(
            _field(p, "exchange"), p.get("write", ".*"), p.get("read", ".*")))
    for p in doc.get("parameters", []):
        params.set_parameter(_field(p, "component"), _field(p, "vhost"), _field(p, "name"), _field(p, "value"))
    for p in doc.get("global_parameters", []):
        params.set_global(_field(p, "name"), _field(p, "value"))


def _field(obj: Any, key: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise ValueError(f"definition entry {obj!r} lacks '{key}'")
    return obj[key]
