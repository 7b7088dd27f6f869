"""The ``x-consistent-hash`` exchange (RabbitMQ's rabbitmq_consistent_hash_exchange plugin).

Rule: the exchange owns its ring (``hash_ring.HashRing``); only ``_add``/``_remove`` (from the
base's ``bind``/``unbind``) change it.

A binding's key is its weight, a positive integer written as a string; a message goes to exactly
one destination: the ring's owner of the hash of its routing key, or of the header named by the
exchange argument ``hash-header``, or of the property named by ``hash-property`` (``message_id``,
``correlation_id`` or ``timestamp``, the latter hashed as its decimal digits, as the plugin does).
A message without that header or property hashes as an absent value: all such messages go to one
destination, as with the plugin. The errors are the plugin's, word for word (406).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from .base import Destination, Destinations, Exchange
from .binding import Binding
from .errors import ArgumentError
from .hash_ring import MAX_WEIGHT, HashRing, key_hash

__all__ = ["HASH_PROPERTIES", "ConsistentHashExchange", "weight_of"]

HASH_PROPERTIES = ("correlation_id", "message_id", "timestamp")
_INTEGER = re.compile(r"[+-]?[0-9]+")  # what Erlang's list_to_integer/1 accepts
_ABSENT = 0  # the hash of a missing header or property: one fixed place on the ring


def weight_of(key: str) -> int:
    """A binding key as a weight, or the plugin's error."""
    if _INTEGER.fullmatch(key) is None:
        quoted = key.replace("\\", "\\\\").replace('"', '\\"')
        raise ArgumentError(f'The binding key must be an integer: <<"{quoted}">>')
    weight = int(key)
    if weight < 1:
        raise ArgumentError("The binding key must be greater than 0")
    if weight > MAX_WEIGHT:  # not in the plugin, which would allocate that many buckets
        raise ArgumentError(f"The binding key must be at most {MAX_WEIGHT}")
    return weight


def _text_arg(args: Mapping[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        raise ArgumentError(f"Invalid argument, '{name}' must be a string")
    return value


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bool):
        return b"true" if value else b"false"
    return str(value).encode()


class ConsistentHashExchange(Exchange):
    TYPE = "x-consistent-hash"

    def __init__(self, name: str, **kw: Any) -> None:
        super().__init__(name, **kw)
        header = _text_arg(self.arguments, "hash-header")
        prop = _text_arg(self.arguments, "hash-property")
        if header is not None and prop is not None:
            raise ArgumentError("hash-header and hash-property are mutually exclusive")
        if prop is not None and prop not in HASH_PROPERTIES:
            raise ArgumentError(f"Unsupported property: {prop}")
        self._header = header
        self.hash_property = prop
        self.needs_properties = prop is not None
        self._ring: HashRing[Binding, Destination] = HashRing()
        self._dests = Destinations()
        self._held: dict[Binding, Destination] = {}

    def bind(self, b: Binding) -> bool:
        weight_of(b.routing_key)  # validate before storing
        return super().bind(b)

    def _add(self, b: Binding) -> None:
        dest = self._held[b] = self._dests.take(b.kind, b.destination)
        self._ring.add(b, f"{b.kind.value}\0{b.destination}", weight_of(b.routing_key), dest)

    def _remove(self, b: Binding) -> None:
        if self._held.pop(b, None) is None:
            return
        self._ring.remove(b)
        self._dests.drop(b.kind, b.destination)

    def destinations(self, routing_key: str, headers: Mapping[str, Any] | None,
                     properties: Mapping[str, Any] | None = None) -> Collection[Destination]:
        if self._header is not None:
            value = None if headers is None else headers.get(self._header)
        elif self.hash_property is not None:
            value = None if properties is None else properties.get(self.hash_property)
        else:
            value = routing_key
        hashed = _ABSENT if value is None else key_hash(_as_bytes(value))
        owner = self._ring.owner(hashed)
        return () if owner is None else (owner,)
