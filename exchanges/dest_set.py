"""The destinations one routing key (direct) or one topic pattern (the trie) leads to: a tuple
while they are few, a dict past ``TUPLE_MAX``.

Why: most keys and patterns lead to one queue, and a dict of one entry costs ~180 B where a tuple
of one costs 48: with thousands of bindings that was the largest part of each binding's cost
(benchmarks/RESULTS.md, "What an object costs"). A dict past a few entries keeps adding and
removing O(1) when thousands of queues share a key. Both are collections of the destinations, so
a route iterates either the same way. The functions return the new value for the caller to store
(a tuple cannot change in place); None is "no destination".
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeAlias

__all__ = ["TUPLE_MAX", "DestSet", "added", "removed"]

TUPLE_MAX = 8
DestSet: TypeAlias = "tuple[Hashable, ...] | dict[Hashable, None]"


def added(held: DestSet | None, value: Hashable, single: tuple[Hashable] | None = None) -> DestSet:
    """``held`` with ``value`` in it (the same dict, or a new tuple); ``single``: a shared tuple of
    ``value`` alone, used when it is the first (``Destinations.single``)."""
    if held is None:
        return single if single is not None else (value,)
    if type(held) is tuple:
        if value in held:
            return held
        if len(held) < TUPLE_MAX:
            return (*held, value)
        grown = dict.fromkeys(held)
        grown[value] = None
        return grown
    held[value] = None  # type: ignore[index]
    return held


def removed(held: DestSet | None, value: Hashable) -> DestSet | None:
    """``held`` without ``value``; None once it is empty."""
    if held is None:
        return None
    if type(held) is tuple:
        if value not in held:
            return held
        left = tuple(v for v in held if v != value)
        return left or None
    held.pop(value, None)  # type: ignore[union-attr]
    return held or None
