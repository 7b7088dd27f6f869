"""The durable definitions as keyed sections: what the definitions log's records apply to.

A definitions document (RabbitMQ's JSON: ``vhosts``, ``users``, ``queues``, ...) is a set of lists;
here each list is a dict from the entry's key (a queue's ``(vhost, name)``, a binding's six fields)
to the entry, so one record (``put`` an entry, ``del`` a key) changes one object in O(1) and the
document comes back out in the same format. A ``del`` takes along what hangs off the object, as
the broker does: a vhost its objects, a user its permissions, a queue or exchange its bindings and
an exchange its mirror setting, so a change record never has to list them.

Owner: the ``DefinitionsLog`` holds one model and applies its records to it (in the thread that
writes the log), and writes it out as the snapshot when it compacts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["SECTIONS", "DefinitionsModel", "binding_entry", "binding_key", "entry_key"]

# Section -> the fields that name one entry (RabbitMQ's definitions format, plus headrace's mirrors).
SECTIONS: dict[str, tuple[str, ...]] = {
    "vhosts": ("name",),
    "users": ("name",),
    "permissions": ("user", "vhost"),
    "topic_permissions": ("user", "vhost", "exchange"),
    "parameters": ("vhost", "component", "name"),
    "global_parameters": ("name",),
    "policies": ("vhost", "name"),
    "operator_policies": ("vhost", "name"),
    "exchanges": ("vhost", "name"),
    "queues": ("vhost", "name"),
    "bindings": ("vhost", "source", "destination_type", "destination", "routing_key", "arguments"),
    "mirrors": ("vhost", "exchange"),
    "mirrors_disabled": ("vhost", "exchange"),
}
_DEFAULTS = {"vhost": "/", "destination_type": "queue", "routing_key": "", "arguments": {}}
_VHOST_SCOPED = [s for s, fields in SECTIONS.items() if "vhost" in fields]


def entry_key(section: str, entry: Any) -> tuple[Any, ...]:
    """The key of ``entry`` in ``section`` (binding arguments as canonical JSON)."""
    if not isinstance(entry, dict):
        return ("\x00invalid", json.dumps(entry, sort_keys=True, default=str))
    key = []
    for name in SECTIONS[section]:
        value = entry.get(name, _DEFAULTS.get(name))
        if name == "arguments":
            value = json.dumps(value or {}, sort_keys=True, default=str)
        key.append(value)
    return tuple(key)


def binding_key(vhost: str, source: str, destination_type: str, destination: str, routing_key: str,
                arguments: dict[str, Any]) -> tuple[Any, ...]:
    return (vhost, source, destination_type, destination, routing_key,
            json.dumps(arguments or {}, sort_keys=True, default=str))


def binding_entry(key: tuple[Any, ...]) -> dict[str, Any]:
    """The entry a binding's key names: a binding is nothing but its key."""
    vhost, source, destination_type, destination, routing_key, arguments = key
    return {"source": source, "vhost": vhost, "destination": destination, "destination_type": destination_type,
            "routing_key": routing_key, "arguments": json.loads(arguments)}


class DefinitionsModel:
    def __init__(self) -> None:
        self.meta: dict[str, Any] = {}  # product_name and the like: kept as they came
        self.sections: dict[str, dict[tuple[Any, ...], Any]] = {s: {} for s in SECTIONS}
        # (vhost, "queue"|"exchange", name) -> keys of the bindings from or to it
        self._bindings_of: dict[tuple[str, str, str], set[tuple[Any, ...]]] = {}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> DefinitionsModel:
        model = cls()
        for name, value in doc.items():
            if name in SECTIONS and isinstance(value, list):
                for entry in value:
                    model.put(name, entry)
            elif name not in SECTIONS:
                model.meta[name] = value
        return model

    def to_doc(self) -> dict[str, Any]:
        doc = dict(self.meta)
        for name, entries in self.sections.items():
            doc[name] = list(entries.values())
        return doc

    def __len__(self) -> int:
        return sum(len(entries) for entries in self.sections.values())

    # ------------------------------------------------------------------ records
    def apply(self, record: dict[str, Any]) -> None:
        """One log record: ``{"op": "put", "section", "entry"}`` or ``{"op": "del", "section", "key"}``."""
        section = record["section"]
        if section not in SECTIONS:
            raise ValueError(f"unknown definitions section {section!r}")
        if record["op"] == "put":
            self.put(section, record["entry"])
        elif record["op"] == "del":
            self.delete(section, tuple(record["key"]))
        else:
            raise ValueError(f"unknown definitions record op {record['op']!r}")

    def put(self, section: str, entry: Any) -> None:
        key = entry_key(section, entry)
        self.sections[section][key] = entry
        if section == "bindings":
            for endpoint in _endpoints(key):
                self._bindings_of.setdefault(endpoint, set()).add(key)

    def delete(self, section: str, key: tuple[Any, ...]) -> None:
        """Remove one object and what hangs off it (see the module docstring)."""
        if section == "bindings":
            self._drop_binding(key)
            return
        self.sections[section].pop(key, None)
        if section == "vhosts":
            self._drop_where(_VHOST_SCOPED, "vhost", key[0])
        elif section == "users":
            self._drop_where(("permissions", "topic_permissions"), "user", key[0])
        elif section in ("queues", "exchanges"):
            vhost, name = key
            kind = "queue" if section == "queues" else "exchange"
            for binding in list(self._bindings_of.get((vhost, kind, name), ())):
                self._drop_binding(binding)
            if kind == "exchange":
                self.sections["mirrors"].pop(key, None)
                self.sections["mirrors_disabled"].pop(key, None)

    def _drop_binding(self, key: tuple[Any, ...]) -> None:
        if self.sections["bindings"].pop(key, None) is None:
            return
        for endpoint in _endpoints(key):
            keys = self._bindings_of.get(endpoint)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._bindings_of[endpoint]

    def _drop_where(self, sections: Iterable[str], field: str, value: Any) -> None:
        for section in sections:
            entries = self.sections[section]
            gone = [k for k, e in entries.items() if isinstance(e, dict) and e.get(field, _DEFAULTS.get(field)) == value]
            for key in gone:
                self.delete(section, key) if section == "bindings" else entries.pop(key)


def _endpoints(key: tuple[Any, ...]) -> tuple[tuple[str, str, str], tuple[str, str, str]]:
    vhost, source, destination_type, destination = key[0], key[1], key[2], key[3]
    return (vhost, "exchange", source), (vhost, str(destination_type), destination)
