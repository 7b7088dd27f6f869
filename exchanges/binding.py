"""A binding from an exchange to a queue or another exchange."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any
from urllib.parse import quote

__all__ = ["Binding", "DestinationKind"]


class DestinationKind(Enum):
    QUEUE = "queue"
    EXCHANGE = "exchange"


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("__list__", tuple(_freeze(v) for v in value))
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple):
        if len(value) == 2 and value[0] == "__list__":
            return [_thaw(v) for v in value[1]]
        return {k: _thaw(v) for k, v in value}
    return value


@dataclass(frozen=True, slots=True)
class Binding:
    source: str
    destination: str
    kind: DestinationKind
    routing_key: str
    arguments: tuple[tuple[str, Any], ...] = ()  # canonical: sorted, nested values frozen

    @classmethod
    def make(cls, source: str, destination: str, kind: DestinationKind, routing_key: str,
             arguments: Mapping[str, Any] | None = None) -> Binding:
        frozen = _freeze(dict(arguments)) if arguments else ()
        return cls(source, destination, kind, routing_key, frozen)

    def arguments_dict(self) -> dict[str, Any]:
        return {k: _thaw(v) for k, v in self.arguments}

    @property
    def properties_key(self) -> str:
        """RabbitMQ management's binding "props" key: routing key, plus a hash of the arguments."""
        key = quote(self.routing_key, safe="") or "~"
        if not self.arguments:
            return key
        digest = hashlib.sha256(json.dumps(self.arguments_dict(), sort_keys=True, default=str).encode()).digest()
        return key + "~" + base64.urlsafe_b64encode(digest[:12]).decode().rstrip("=")
