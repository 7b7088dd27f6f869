"""Which durable definitions changed since the shell last wrote them.

Owner: the ``Broker`` holds one ``DefinitionChanges`` (``broker.definitions``). Whatever changes a
durable object says which one, by its section of the definitions document and its key there
(``("queues", (vhost, name))``, see persistence/definitions_model.py): vhosts and the broker for
vhosts and policies, ``VHost`` for exchanges, queues, bindings and mirror settings, the user
registry and ``RuntimeParameters`` through hooks the broker installs. After each batch the shell
takes the changes, turns each into a log record with the object's state at that moment
(definitions_io.change_records) and hands them to the flusher, so a change costs O(1) bytes.

A change is kept once, at the place of its last touch, so records are in the order of the last
change of each object; a deletion is kept apart from a later re-creation of the same object, so
a vhost, queue, exchange or user deleted and declared again in one batch still drops (in the
log, as in the broker) what hung off the old one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from headrace.exchanges import Binding
from headrace.persistence.definitions_model import binding_key

__all__ = ["Change", "DefinitionChanges"]

Key = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Change:
    """One durable object that changed: ``deleted`` if it was removed (with what hangs off it)."""
    section: str
    key: Key
    deleted: bool = False


@dataclass(slots=True)
class DefinitionChanges:
    pending: dict[Change, None] = field(default_factory=dict)  # an ordered set

    def __bool__(self) -> bool:
        return bool(self.pending)

    def changed(self, section: str, key: Key) -> None:
        self._touch(Change(section, key))

    def deleted(self, section: str, key: Key) -> None:
        self._touch(Change(section, key, deleted=True))

    def binding(self, vhost: str, b: Binding, *, bound: bool) -> None:
        """A durable binding was added or removed (unbinding deletes it from the log)."""
        key = binding_key(vhost, b.source, b.kind.value, b.destination, b.routing_key, b.arguments_dict())
        self._touch(Change("bindings", key, deleted=not bound))

    def _touch(self, change: Change) -> None:
        pending = self.pending
        pending.pop(change, None)  # to the end: the order of last changes
        pending[change] = None

    def take(self) -> list[Change]:
        taken = list(self.pending)
        self.pending.clear()
        return taken
