"""Direct and fanout exchanges, and the default exchange."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from .base import Destination, Destinations, Exchange
from .binding import Binding, DestinationKind
from .dest_set import DestSet, added, removed
from .errors import OperationNotPermitted

__all__ = ["DefaultExchange", "DirectExchange", "FanoutExchange"]


class DirectExchange(Exchange):
    """Routing key -> its destinations (``dest_set``: a tuple while few). ``BY_ROUTE``: the base
    calls ``_add`` for the first binding of a key and destination and ``_remove`` for the last, so
    bindings that differ only in their arguments need no count here."""

    TYPE = "direct"
    BY_ROUTE = True

    def __init__(self, name: str, **kw: Any) -> None:
        super().__init__(name, **kw)
        self._routes: dict[str, DestSet] = {}
        self._dests = Destinations()  # the one tuple per destination that the routes hold

    def _add(self, b: Binding) -> None:
        routes, dests = self._routes, self._dests
        dest = dests.take(b.kind, b.destination)
        routes[b.routing_key] = added(routes.get(b.routing_key), dest, dests.single(dest))

    def _remove(self, b: Binding) -> None:
        routes = self._routes
        left = removed(routes.get(b.routing_key), (b.kind, b.destination))
        self._dests.drop(b.kind, b.destination)
        if left is None:
            routes.pop(b.routing_key, None)
        else:
            routes[b.routing_key] = left

    def destinations(self, routing_key: str, headers: Mapping[str, Any] | None,
                     properties: Mapping[str, Any] | None = None) -> Collection[Destination]:
        return self._routes.get(routing_key, ())  # type: ignore[return-value]  # holds Destinations


class FanoutExchange(Exchange):
    TYPE = "fanout"

    def __init__(self, name: str, **kw: Any) -> None:
        super().__init__(name, **kw)
        self._dests: dict[Destination, int] = {}

    def _add(self, b: Binding) -> None:
        key = (b.kind, b.destination)
        self._dests[key] = self._dests.get(key, 0) + 1

    def _remove(self, b: Binding) -> None:
        key = (b.kind, b.destination)
        left = self._dests.get(key, 0) - 1
        if left > 0:
            self._dests[key] = left
        else:
            self._dests.pop(key, None)

    def destinations(self, routing_key: str, headers: Mapping[str, Any] | None,
                     properties: Mapping[str, Any] | None = None) -> Collection[Destination]:
        return self._dests


class DefaultExchange(DirectExchange):
    """The nameless exchange: every queue is implicitly bound by its own name."""

    def __init__(self, queue_exists: Callable[[str], bool]) -> None:
        super().__init__("", durable=True)
        self._queue_exists = queue_exists

    def bind(self, b: Binding) -> bool:
        raise OperationNotPermitted("operation not permitted on the default exchange")

    def unbind(self, b: Binding) -> bool:
        raise OperationNotPermitted("operation not permitted on the default exchange")

    def destinations(self, routing_key: str, headers: Mapping[str, Any] | None,
                     properties: Mapping[str, Any] | None = None) -> Collection[Destination]:
        if self._queue_exists(routing_key):
            return ((DestinationKind.QUEUE, routing_key),)
        return ()
