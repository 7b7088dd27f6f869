"""A super stream's exchange: a direct exchange declared with ``x-super-stream: true``.

Rule: the exchange owns its partition list; only ``_add``/``_remove`` (the base's ``bind``/
``unbind``) change it, and they clear the per-key cache.

RabbitMQ's topology: partition streams ``NAME-0`` .. ``NAME-(N-1)`` bound with the keys ``"0"`` ..
``"N-1"`` and the binding argument ``x-stream-partition-order``. A routing key that is a binding
key routes as in any direct exchange (RabbitMQ does the same). Any other key goes to the partition
RabbitMQ's stream clients pick for it: ``murmur3_32(UTF-8 key, 104729)`` modulo the number of
partitions, the partitions taken in ``x-stream-partition-order`` order. So an AMQP 0-9-1 publisher
keeps each key in one partition, the one a stream-protocol producer would use. This is a routing
rule of the exchange: the delivery path sees a direct exchange that answers one queue.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from .base import Destination
from .binding import Binding, DestinationKind
from .direct import DirectExchange
from .errors import ArgumentError
from .murmur3 import STREAM_SEED, murmur3_32

__all__ = ["PARTITION_ORDER", "SUPER_STREAM", "SuperStreamExchange", "is_super_stream"]

SUPER_STREAM = "x-super-stream"
PARTITION_ORDER = "x-stream-partition-order"
# keys whose partition is remembered: the hash costs a few microseconds in Python, a dict lookup
# ~50 ns; past this many the cache starts again (bounded memory whatever the key space)
PICK_CACHE_MAX = 10_000


def is_super_stream(arguments: Mapping[str, Any] | None) -> bool:
    """Whether exchange arguments ask for a super stream (a bool as RabbitMQ's tools send it, or
    the text ``true`` from a form or a command line)."""
    value = (arguments or {}).get(SUPER_STREAM)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _order(b: Binding) -> int | None:
    """A partition binding's order (None for any other binding), or the error for a bad one."""
    args = b.arguments_dict()
    if PARTITION_ORDER not in args:
        return None
    value = args[PARTITION_ORDER]
    if isinstance(value, (bytes, str)):
        value = value.decode() if isinstance(value, bytes) else value
        value = int(value) if value.isdigit() else None
    if b.kind is not DestinationKind.QUEUE or isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ArgumentError(f"Invalid argument, '{PARTITION_ORDER}' must be a non-negative integer, "
                            "on a binding to a partition stream")
    return value


class SuperStreamExchange(DirectExchange):
    """Declared as type ``direct``; ``exchanges.make_exchange`` picks it by its argument."""

    def __init__(self, name: str, **kw: Any) -> None:
        super().__init__(name, **kw)
        self._orders: dict[Binding, int] = {}  # the partition bindings and their order
        self._partitions: tuple[Destination, ...] | None = None  # in order, made after a change
        self._picked: dict[str, tuple[Destination]] = {}

    def check_destination(self, b: Binding, is_log: bool) -> None:
        """A partition is a stream: a classic or quorum queue bound with a partition order would
        make a super stream that stream clients and consumer groups cannot read."""
        if not is_log and _order(b) is not None:
            raise ArgumentError(f"Invalid argument, '{PARTITION_ORDER}' on a binding to {b.kind.value} "
                                f"'{b.destination}', which is not a stream: a super stream's partitions are streams")

    def bind(self, b: Binding) -> bool:
        """A partition binding is checked first: its order a non-negative integer, and no other
        stream's (two partitions at one place would make the order, and so the routes, ambiguous)."""
        order = _order(b)
        if order is not None and b not in self._orders:
            for other, taken in self._orders.items():
                if taken == order and other.destination != b.destination:
                    raise ArgumentError(f"Invalid argument, '{PARTITION_ORDER}' {order} is already "
                                        f"that of partition '{other.destination}'")
        return super().bind(b)

    def _add(self, b: Binding) -> None:
        super()._add(b)
        order = _order(b)
        if order is not None:
            self._orders[b] = order
            self._changed()

    def _remove(self, b: Binding) -> None:
        super()._remove(b)
        if self._orders.pop(b, None) is not None:
            self._changed()

    def _changed(self) -> None:
        self._partitions = None
        self._picked.clear()

    def partitions(self) -> tuple[Destination, ...]:
        """The partition streams in partition order (ties, which RabbitMQ's tools never make, by
        name); a stream bound twice counts once, at its first place."""
        parts = self._partitions
        if parts is None:
            ordered = sorted(self._orders.items(), key=lambda item: (item[1], item[0].destination))
            seen: dict[Destination, None] = {}
            for b, _ in ordered:
                seen.setdefault((b.kind, b.destination), None)
            parts = self._partitions = tuple(seen)
        return parts

    def partition_orders(self) -> dict[str, int]:
        """Each partition stream's ``x-stream-partition-order`` (its first, if bound twice)."""
        out: dict[str, int] = {}
        for b, order in sorted(self._orders.items(), key=lambda item: item[1]):
            out.setdefault(b.destination, order)
        return out

    def destinations(self, routing_key: str, headers: Mapping[str, Any] | None,
                     properties: Mapping[str, Any] | None = None) -> Collection[Destination]:
        found = self._routes.get(routing_key)
        if found:
            return found  # type: ignore[return-value]  # holds Destinations (dest_set.py)
        picked = self._picked.get(routing_key)
        if picked is not None:
            return picked
        parts = self.partitions()
        if not parts:
            return ()
        picked = (parts[murmur3_32(routing_key.encode(), STREAM_SEED) % len(parts)],)
        if len(self._picked) >= PICK_CACHE_MAX:
            self._picked.clear()
        self._picked[routing_key] = picked
        return picked
