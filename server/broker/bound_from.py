"""Which exchanges of a vhost hold bindings to each of its queues and exchanges.

Owner: the ``VHost`` (its ``bound_from``). It notes each binding made and removed here, and asks
when a queue or an exchange is deleted, so a deletion visits the exchanges bound to what goes
instead of every exchange of the vhost, and ``delete_exchange(if_unused=True)`` knows at once
whether anything is bound to the exchange. Each exchange keeps its own bindings by destination
(``Exchange.bound_to``); this is the reverse of that, by exchange name.

A destination bound from one exchange only (most queues) keeps that exchange's name as such, a
dict of names from the second exchange on: a dict of one was ~200 B per bound queue.
"""

from __future__ import annotations

from collections.abc import Iterable

from headrace.exchanges import DestinationKind, Exchange

__all__ = ["BoundFrom"]


class BoundFrom:
    __slots__ = ("_queues", "_exchanges")

    def __init__(self) -> None:
        # destination name -> the names of the exchanges with bindings to it, per destination kind
        self._queues: dict[str, str | dict[str, None]] = {}
        self._exchanges: dict[str, str | dict[str, None]] = {}

    def _index(self, kind: DestinationKind) -> dict[str, str | dict[str, None]]:
        return self._exchanges if kind is DestinationKind.EXCHANGE else self._queues

    def bound(self, source: str, kind: DestinationKind, destination: str) -> None:
        """A binding from exchange ``source`` to ``destination`` was made."""
        index = self._index(kind)
        sources = index.get(destination)
        if sources is None:
            index[destination] = source
        elif isinstance(sources, dict):
            sources[source] = None
        elif sources != source:
            index[destination] = {sources: None, source: None}

    def unbound(self, source: Exchange, kind: DestinationKind, destination: str) -> None:
        """A binding from ``source`` to ``destination`` was removed: ``source`` stays listed while it
        has others to that destination."""
        if not source.bound_to(destination, kind):
            self._forget(self._index(kind), destination, source.name)

    def take(self, kind: DestinationKind, destination: str) -> list[str]:
        """The exchanges bound to ``destination``, which is being deleted (and forgotten here)."""
        sources = self._index(kind).pop(destination, None)
        return [sources] if isinstance(sources, str) else list(sources or ())

    def source_gone(self, source: Exchange) -> None:
        """Exchange ``source`` was deleted, and its bindings with it."""
        for kind in (DestinationKind.QUEUE, DestinationKind.EXCHANGE):
            index = self._index(kind)
            for destination in source.bound_destinations(kind):
                self._forget(index, destination, source.name)

    def is_bound(self, kind: DestinationKind, destination: str) -> bool:
        return destination in self._index(kind)

    def sources(self, kind: DestinationKind, destination: str) -> Iterable[str]:
        sources = self._index(kind).get(destination, ())
        return (sources,) if isinstance(sources, str) else sources

    @staticmethod
    def _forget(index: dict[str, str | dict[str, None]], destination: str, source: str) -> None:
        sources = index.get(destination)
        if isinstance(sources, str):
            if sources == source:
                del index[destination]
        elif sources is not None:
            sources.pop(source, None)
            if not sources:
                del index[destination]
            elif len(sources) == 1:
                index[destination] = next(iter(sources))
