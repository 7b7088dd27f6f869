"""The ``Exchange`` base: bindings are kept by subclasses; ``route`` is written once here.

Rule 1: an exchange owns its bindings; only ``bind``/``unbind``/``unbind_destination`` change them.
Rule 2: ``route`` follows exchange-to-exchange bindings with a visited set (loops end), adds the
routing keys of CC/BCC headers, and falls back to the alternate exchange when no queue matched
(first exchange only, then through the alternate's own bindings and alternates, loop-protected).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .binding import Binding, DestinationKind

__all__ = ["Destination", "Destinations", "Exchange", "RouteResult"]

Destination = tuple[DestinationKind, str]
QUEUE = DestinationKind.QUEUE


class Destinations:
    """One tuple per destination, shared by an exchange's entries for it, with their count, and
    one tuple of that one destination (``single``), shared by every routing key or pattern that
    leads there alone (``dest_set``), so such a key costs no tuple of its own.

    A destination tuple holds its kind, an enum member the garbage collector tracks, so the tuple
    stays tracked for good: one per destination, not one per binding (ARCHITECTURE.md, "The
    garbage collector")."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[Destination, tuple[Destination, tuple[Destination], int]] = {}

    def take(self, kind: DestinationKind, name: str) -> Destination:
        dest: Destination = (kind, name)
        held = self._held.get(dest)
        if held is None:
            self._held[dest] = (dest, (dest,), 1)
            return dest
        dest, single, uses = held
        self._held[dest] = (dest, single, uses + 1)
        return dest

    def single(self, dest: Destination) -> tuple[Destination]:
        """The shared tuple of ``dest`` alone (taken, so it is held here)."""
        return self._held[dest][1]

    def drop(self, kind: DestinationKind, name: str) -> None:
        dest, single, uses = self._held[(kind, name)]
        if uses > 1:
            self._held[dest] = (dest, single, uses - 1)
        else:
            del self._held[dest]


@dataclass(slots=True)  # not frozen: one per publish, and a frozen __init__ costs ~3x
class RouteResult:
    queues: tuple[str, ...]
    used_alternate: bool = False


def _extra_keys(headers: Mapping[str, Any]) -> list[str]:
    keys: list[str] = []
    for name in ("CC", "BCC"):
        value = headers.get(name)
        if isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, bytes):
                    item = item.decode("utf-8", "replace")
                if isinstance(item, str):
                    keys.append(item)
    return keys


class Exchange(ABC):
    """``BY_ROUTE`` (direct, topic): ``_add`` only for the first binding of a routing key and
    destination, ``_remove`` only for the last, so a subclass keeps no count of bindings that
    differ in their arguments alone. What tells: bindings with arguments are counted by route in
    ``_with_args`` (rare for these types, so usually None), and one without is looked up. Its
    keys are strings only, so the garbage collector does not track them.

    Bindings by destination (``_to_queues``): the binding itself while it is the only one to that
    destination, a dict of them from the second on, as an empty queue's one binding is common and
    a dict costs ~180 B."""

    TYPE: ClassVar[str]
    USES_HEADERS: ClassVar[bool] = False
    BY_ROUTE: ClassVar[bool] = False
    # routes on a message property (set per exchange by the consistent-hash type's hash-property)
    needs_properties: bool = False

    def __init__(self, name: str, *, durable: bool = False, auto_delete: bool = False, internal: bool = False,
                 arguments: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments: dict[str, Any] = dict(arguments or {})
        alternate = self.arguments.get("alternate-exchange")
        if isinstance(alternate, bytes):
            alternate = alternate.decode()
        self.alternate: str | None = alternate if isinstance(alternate, str) and alternate else None
        self._bindings: dict[Binding, None] = {}
        # destination name -> its bindings here, per kind: deleting a queue or an exchange unbinds
        # its own bindings instead of scanning all of them (per deletion: quadratic over many queues)
        self._to_queues: dict[str, Binding | dict[Binding, None]] = {}
        self._to_exchanges: dict[str, Binding | dict[Binding, None]] = {}  # route() only walks when not empty
        self._with_args: dict[tuple[str, str, str], int] | None = None  # BY_ROUTE only
        self.cache_hits = 0
        self.cache_misses = 0
        # the management API's publish_in / publish_out: messages published to this exchange, and
        # the copies of them it routed into queues (counted by the broker's delivery owner)
        self.published_in = 0
        self.published_out = 0

    # ------------------------------------------------------------------ bindings
    def check_destination(self, b: Binding, is_log: bool) -> None:
        """Before ``bind``: refuse (``ArgumentError``) a destination this exchange cannot bind
        that way; ``is_log`` says the destination is a stream. Any will do here."""

    def bind(self, b: Binding) -> bool:
        if b in self._bindings:
            return False
        if not self.BY_ROUTE or not self._route_shared(b):
            self._add(b)
        self._bindings[b] = None
        if self.BY_ROUTE and b.arguments:
            counts = self._with_args if self._with_args is not None else {}
            route = (b.routing_key, b.kind.value, b.destination)
            counts[route] = counts.get(route, 0) + 1
            self._with_args = counts
        index = self._to(b.kind)
        mine = index.get(b.destination)
        if mine is None:
            index[b.destination] = b
        elif isinstance(mine, dict):
            mine[b] = None
        else:
            index[b.destination] = {mine: None, b: None}
        return True

    def unbind(self, b: Binding) -> bool:
        if b not in self._bindings:
            return False
        del self._bindings[b]
        if self.BY_ROUTE:
            counts = self._with_args
            if b.arguments and counts is not None:
                route = (b.routing_key, b.kind.value, b.destination)
                left = counts[route] - 1
                if left:
                    counts[route] = left
                elif len(counts) > 1:
                    del counts[route]
                else:
                    self._with_args = None
            if not self._route_shared(b):
                self._remove(b)
        else:
            self._remove(b)
        index = self._to(b.kind)
        mine = index[b.destination]
        if isinstance(mine, dict):
            del mine[b]
            if len(mine) == 1:
                index[b.destination] = next(iter(mine))
        else:
            del index[b.destination]
        return True

    def _route_shared(self, b: Binding) -> bool:
        """Whether a binding other than ``b`` (which is not in ``_bindings``) has its routing key
        and destination: it then differs in its arguments, or one of them has none."""
        if b.arguments and Binding(b.source, b.destination, b.kind, b.routing_key) in self._bindings:
            return True
        counts = self._with_args
        return bool(counts) and (b.routing_key, b.kind.value, b.destination) in counts  # type: ignore[operator]

    def bindings(self) -> list[Binding]:
        return list(self._bindings)

    @property
    def binding_count(self) -> int:
        """How many bindings, without listing them (the memory alarm counts them often)."""
        return len(self._bindings)

    def _to(self, kind: DestinationKind) -> dict[str, Binding | dict[Binding, None]]:
        return self._to_exchanges if kind is DestinationKind.EXCHANGE else self._to_queues

    def bound_to(self, destination: str, kind: DestinationKind) -> bool:
        return destination in self._to(kind)

    def bound_destinations(self, kind: DestinationKind) -> list[str]:
        """The names of the queues (or exchanges) this exchange has bindings to."""
        return list(self._to(kind))

    def unbind_destination(self, destination: str, kind: DestinationKind) -> list[Binding]:
        """Every binding to ``destination`` removed (it was deleted), in the order they were made."""
        mine = self._to(kind).get(destination)
        removed = [mine] if isinstance(mine, Binding) else list(mine or ())
        for b in removed:
            self.unbind(b)
        return removed

    def has_bindings(self) -> bool:
        return bool(self._bindings)

    @abstractmethod
    def _add(self, b: Binding) -> None: ...

    @abstractmethod
    def _remove(self, b: Binding) -> None: ...

    @abstractmethod
    def destinations(self, routing_key: str, headers: Mapping[str, Any] | None,
                     properties: Mapping[str, Any] | None = None) -> Collection[Destination]: ...

    @property
    def wants_properties(self) -> bool:
        """Whether ``route`` needs the message's properties (``properties``): only when this
        exchange routes on one (consistent hash's ``hash-property``) or may pass a message on to
        an exchange that does, so the publishes of every other exchange decode nothing more."""
        return self.needs_properties or bool(self._to_exchanges)

    # ------------------------------------------------------------------ routing
    def route(self, routing_key: str, headers: Mapping[str, Any] | None,
              lookup: Callable[[str], Exchange | None],
              properties: Mapping[str, Any] | None = None) -> RouteResult:
        """``properties``: the message properties an exchange may route on (``correlation_id``,
        ``message_id``, ``timestamp``), passed when ``wants_properties`` says so."""
        carbon_copies = headers is not None and ("CC" in headers or "BCC" in headers)
        if not carbon_copies and not self._to_exchanges:
            found = self.destinations(routing_key, headers, properties)  # fast path: one key, queues only
            if found:
                return RouteResult(tuple([name for _, name in found]))
            if self.alternate is None:
                return RouteResult(())
        keys = [routing_key]
        if carbon_copies and headers is not None:
            keys += _extra_keys(headers)
        visited = {self.name}
        queues = self._walk(self, keys, headers, lookup, visited, properties)
        if queues or self.alternate is None:
            return RouteResult(tuple(queues))
        alternate: str | None = self.alternate
        while alternate is not None and alternate not in visited:
            visited.add(alternate)
            ex = lookup(alternate)
            if ex is None:
                break
            queues = self._walk(ex, keys, headers, lookup, visited, properties)
            if queues:
                return RouteResult(tuple(queues), True)
            alternate = ex.alternate
        return RouteResult((), False)

    @staticmethod
    def _walk(start: Exchange, keys: list[str], headers: Mapping[str, Any] | None,
              lookup: Callable[[str], Exchange | None], visited: set[str],
              properties: Mapping[str, Any] | None) -> dict[str, None]:
        queues: dict[str, None] = {}
        stack = [start]
        while stack:
            ex = stack.pop()
            for key in keys:
                for kind, dest in ex.destinations(key, headers, properties):
                    if kind is QUEUE:
                        queues[dest] = None
                    elif dest not in visited:
                        visited.add(dest)
                        nxt = lookup(dest)
                        if nxt is not None:
                            stack.append(nxt)
        return queues

    def equivalent(self, type_: str, durable: bool, auto_delete: bool, internal: bool,
                   arguments: Mapping[str, Any] | None) -> bool:
        return (type_ == self.TYPE and durable == self.durable and auto_delete == self.auto_delete
                and internal == self.internal and dict(arguments or {}) == self.arguments)
