"""Export and import of definitions in RabbitMQ's definitions JSON format.

The same document is the snapshot of the durable definitions on disk, the body of
``GET/POST /api/definitions`` and the CLI's ``definitions export|import``, so a RabbitMQ export can
be loaded here and back. ``change_records`` gives the definitions log one entry of that document
per changed object (persistence/definitions_log.py).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from headrace.exchanges import DestinationKind
from headrace.persistence.definitions_model import binding_entry
from headrace.server.auth import Permission, TopicPermission

from .core import Broker
from .definition_changes import Change
from .parameters import VHOST_LIMITS_COMPONENT
from .policies import apply_policies
from .vhost import PREDECLARED, VHost

__all__ = ["change_records", "export_definitions", "import_definitions", "import_settings"]

_PREDECLARED_NAMES = {"", *(name for name, _ in PREDECLARED)}


def export_definitions(broker: Broker, *, version: str = "0") -> dict[str, Any]:
    users = broker.users
    out: dict[str, Any] = {
        "product_name": "headrace",
        "product_version": version,
        "users": [_user_entry(broker, name) for name in users.users],
        "vhosts": [{"name": name} for name in broker.vhosts],
        "permissions": [_permission_entry(broker, *key) for key in users.permissions],
        "topic_permissions": [_topic_permission_entry(broker, *key) for key in users.topic_permissions],
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
        out["exchanges"].extend(e for name in vhost.exchanges if (e := _exchange_entry(vhost, name)))
        out["queues"].extend(q for name in vhost.queues if (q := _queue_entry(vhost, name)))
        # The mirror setting is durable on its own and applied after the exchanges, so it overrides
        # the x-mirror declare argument: an exchange declared with x-mirror and later switched off
        # (or given another retention) stays that way after a restart.
        for ename in sorted(vhost.exchanges):
            for section, entry in _mirror_entries(vhost, ename):
                if entry is not None:
                    out[section].append(entry)
        out["bindings"].extend({"source": b.source, "vhost": vname, "destination": b.destination,
                                "destination_type": b.kind.value, "routing_key": b.routing_key,
                                "arguments": b.arguments_dict()} for b in vhost.bindings() if vhost._binding_durable(b))
    return out


def change_records(broker: Broker, changes: list[Change]) -> list[dict[str, Any]]:
    """The definitions log's records for ``changes`` (DefinitionChanges.take): each changed object's
    entry as it is now, or its deletion. O(changes), whatever the number of objects."""
    records: list[dict[str, Any]] = []
    for change in changes:
        section, key = change.section, change.key
        if change.deleted:
            records.append({"op": "del", "section": section, "key": list(key)})
            continue
        found: list[tuple[str, dict[str, Any] | None]]
        if section in ("mirrors", "exchanges"):  # an exchange's entry comes with its mirror setting
            vhost = broker.vhosts.get(key[0])
            found = _mirror_entries(vhost, key[1]) if vhost is not None else \
                [("mirrors", None), ("mirrors_disabled", None)]
            if section == "exchanges":
                found.insert(0, (section, _LOOKUP[section](broker, *key)))
        elif section == "bindings":  # bound (unbinding is a deletion)
            found = [(section, binding_entry(key))]
        else:
            found = [(section, _LOOKUP[section](broker, *key))]
        for name, current in found:
            if current is None:
                records.append({"op": "del", "section": name, "key": list(key)})
            else:
                records.append({"op": "put", "section": name, "entry": current})
    return records


def _user_entry(broker: Broker, name: str) -> dict[str, Any] | None:
    u = broker.users.users.get(name)
    if u is None:
        return None
    return {"name": u.name, "password_hash": u.password_hash, "hashing_algorithm": "pbkdf2_sha256",
            "tags": list(u.tags), "limits": dict(broker.parameters.user_limits.get(u.name, {}))}


def _permission_entry(broker: Broker, user: str, vhost: str) -> dict[str, Any] | None:
    p = broker.users.permissions.get((user, vhost))
    if p is None:
        return None
    return {"user": user, "vhost": vhost, "configure": p.configure, "write": p.write, "read": p.read}


def _topic_permission_entry(broker: Broker, user: str, vhost: str, exchange: str) -> dict[str, Any] | None:
    p = broker.users.topic_permissions.get((user, vhost, exchange))
    if p is None:
        return None
    return {"user": user, "vhost": vhost, "exchange": exchange, "write": p.write, "read": p.read}


def _parameter_entry(broker: Broker, vhost: str, component: str, name: str) -> dict[str, Any] | None:
    params = broker.parameters
    if component == VHOST_LIMITS_COMPONENT:
        limits = params.vhost_limits.get(vhost)
        if not limits:
            return None
        value: Any = dict(limits)
    elif (component, vhost, name) in params.parameters:
        value = params.parameters[(component, vhost, name)]
    else:
        return None
    return {"vhost": vhost, "component": component, "name": name, "value": value}


def _global_entry(broker: Broker, name: str) -> dict[str, Any] | None:
    params = broker.parameters.global_parameters
    return {"name": name, "value": params[name]} if name in params else None


def _policy_entry(broker: Broker, vhost: str, name: str, *, operator: bool = False) -> dict[str, Any] | None:
    policy = broker.policies.get(vhost, name, operator=operator)
    return policy.as_json() if policy is not None else None


def _vhost_entry(broker: Broker, name: str) -> dict[str, Any] | None:
    return {"name": name} if name in broker.vhosts else None


def _in_vhost(build: Callable[[VHost, str], dict[str, Any] | None]) -> Callable[..., dict[str, Any] | None]:
    def lookup(broker: Broker, vhost_name: str, name: str) -> dict[str, Any] | None:
        vhost = broker.vhosts.get(vhost_name)
        return build(vhost, name) if vhost is not None else None
    return lookup


def _exchange_entry(vhost: VHost, name: str) -> dict[str, Any] | None:
    ex = vhost.exchanges.get(name)
    if ex is None or name in _PREDECLARED_NAMES or not ex.durable:
        return None
    return {"name": name, "vhost": vhost.name, "type": vhost.exchange_type(name), "durable": True,
            "auto_delete": ex.auto_delete, "internal": ex.internal, "arguments": dict(ex.arguments)}


def _queue_entry(vhost: VHost, name: str) -> dict[str, Any] | None:
    q = vhost.queues.get(name)
    if q is None or not q.durable or q.exclusive_owner is not None:
        return None
    return {"name": name, "vhost": vhost.name, "durable": True, "auto_delete": q.auto_delete,
            "arguments": dict(q.arguments)}


def _mirror_entries(vhost: VHost, name: str) -> list[tuple[str, dict[str, Any] | None]]:
    """The exchange's entry in ``mirrors`` or in ``mirrors_disabled`` (None in the other)."""
    ex = vhost.exchanges.get(name)
    mirrored = disabled = None
    if ex is not None and ex.durable and name not in _PREDECLARED_NAMES:
        if name in vhost.mirrored:
            age, size = vhost.mirror_retention.get(name, (None, None))
            mirrored = {"vhost": vhost.name, "exchange": name, "max_age_ms": age, "max_bytes": size}
        elif ex.arguments.get("x-mirror"):
            disabled = {"vhost": vhost.name, "exchange": name}
    return [("mirrors", mirrored), ("mirrors_disabled", disabled)]


_LOOKUP: dict[str, Callable[..., dict[str, Any] | None]] = {
    "vhosts": _vhost_entry,
    "users": _user_entry,
    "permissions": _permission_entry,
    "topic_permissions": _topic_permission_entry,
    "parameters": _parameter_entry,
    "global_parameters": _global_entry,
    "policies": _policy_entry,
    "operator_policies": partial(_policy_entry, operator=True),
    "exchanges": _in_vhost(_exchange_entry),
    "queues": _in_vhost(_queue_entry),
}


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
        apply_policies(broker.policies, broker.delivery, broker.vhosts[vhost_name], now, broker.compat)


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
