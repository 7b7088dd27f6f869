"""Direct and fanout exchanges, and the default exchange."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from .base import Destination, Destinations, Exchange
from .binding import Binding, DestinationKind
from .errors import OperationNotPermitted

__all__ = ["DefaultExchange", "DirectExchange", "FanoutExchange"]


class DirectExchange(Exchange):
    TYPE = "direct"

    def __init__(self, name: str, **kw: Any) -> None:
        super().__init__(name, **kw)
        self._routes: dict[str, dict[Destination, int]] = {}
        self._dests = Destinations()  # the one tuple per destination that the routes' dicts hold

    def _add(self, b: Binding) -> None:
        dests = self._routes.setdefault(b.routing_key, {})
        key = (b.kind, b.destination)
        count = dests.get(key, 0)
        if not count:
            key = self._dests.take(b.kind, b.destination)
        dests[key] = count + 1  # same destination may be bound with different arguments

    def _remove(self, b: Binding) -> None:
        dests = self._routes.get(b.routing_key)
        if not dests:
            return
        key = (b.kind, b.destination)
        left = dests.get(key, 0) - 1
        if left > 0:
            dests[key] = left
        elif left == 0:
            del dests[key]
            self._dests.drop(b.kind, b.destination)
            if not dests:
                del self._routes[b.routing_key]

    def destinations(self, routing_key: str, headers: Mapping[str, Any] | None,
                     properties: Mapping[str, Any] | None = None) -> Collection[Destination]:
        return self._routes.get(routing_key, ())


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
