"""Topic exchange: a trie of patterns plus a bounded per-exchange cache of routing results."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, cast

from .base import Destination, Destinations, Exchange
from .binding import Binding
from .topic_trie import TopicTrie

__all__ = ["ROUTE_CACHE_MAX", "TopicExchange"]

# Distinct routing keys remembered per exchange. Publishers usually reuse a small set of keys, so
# 4096 covers them; a publisher cycling through unique keys only costs a cleared dict now and then.
ROUTE_CACHE_MAX = 4096


class TopicExchange(Exchange):
    """``BY_ROUTE`` (see the base): several bindings that differ in their arguments only are one
    entry in the trie, added with the first and removed with the last, with no count kept here."""

    TYPE = "topic"
    BY_ROUTE = True

    def __init__(self, name: str, **kw: Any) -> None:
        super().__init__(name, **kw)
        self._trie = TopicTrie()
        self._dests = Destinations()  # the one tuple per destination the trie's values hold
        self._cache: dict[str, tuple[Destination, ...]] = {}

    def _add(self, b: Binding) -> None:
        dest = self._dests.take(b.kind, b.destination)
        self._trie.add(b.routing_key, dest, self._dests.single(dest))
        self._cache.clear()

    def _remove(self, b: Binding) -> None:
        if self._trie.remove(b.routing_key, (b.kind, b.destination)):
            self._dests.drop(b.kind, b.destination)
        self._cache.clear()

    def destinations(self, routing_key: str, headers: Mapping[str, Any] | None,
                     properties: Mapping[str, Any] | None = None) -> Collection[Destination]:
        cached = self._cache.get(routing_key)
        if cached is not None:
            self.cache_hits += 1
            return cached
        self.cache_misses += 1
        # the trie holds what ``_add`` put in: destinations
        found = cast(tuple[Destination, ...], tuple(self._trie.match(routing_key)))
        if len(self._cache) >= ROUTE_CACHE_MAX:
            self._cache.clear()
        self._cache[routing_key] = found
        return found
