"""A weighted consistent-hash ring: which destination owns a 32-bit hash.

Rule: the ring is owned by the exchange that holds it (``ConsistentHashExchange``); only its
``bind``/``unbind`` add and remove members.

Each member puts ``weight * POINTS_PER_WEIGHT`` points on a 32-bit circle; a key belongs to the
first point at or after its hash (wrapping round). A member's points depend only on its identity
(kind and name) and the point's number, never on the other members or on the order of binding,
so the same key lands on the same destination while the members are unchanged (across a restart
too), a member added takes only the keys that fall just before its own points (its share), and a
member removed gives back only its own keys. Points are kept in a ``SortedList`` (a binding costs
O(points x log n)); routing bisects a flat list copied from it by the first route after a change
(a few ms for 100,000 points), because bisecting the ``SortedList`` and indexing it run in Python
and cost ~5 us, the flat list ~1.4 us (most of it cache misses over 100,000 ints). An index of
where each value of the hash's top 17 bits starts cut a whole route from ~3.5 to ~2.1 us, but
took ~0.4 s to make after each change: a publish between binds would pay it every time.

Why ``POINTS_PER_WEIGHT`` = 100: the spread of a member's share shrinks as 1/sqrt(points): with 100
points ten equal members get their share within ~12% (measured over 100,000 keys), with 10 points
within ~40%. It costs ~50 bytes a point. RabbitMQ 3.10's plugin gives a binding ``weight``
buckets and picks one with jump consistent hashing of ``erlang:phash2``; neither can be
reproduced outside Erlang, so which queue a key lands in differs from RabbitMQ's, while the rules
(weights, stability, minimal movement on adding a binding) are the same, and removing a binding
moves only that binding's keys, where the plugin's renumbering of buckets moves others too.
"""

from __future__ import annotations

import bisect
import hashlib
import sys
import zlib
from array import array
from collections.abc import Hashable
from typing import Generic, TypeVar

from sortedcontainers import SortedList

__all__ = ["MAX_WEIGHT", "POINTS_PER_WEIGHT", "HashRing", "key_hash"]

POINTS_PER_WEIGHT = 100
# a binding's weight is its number of points / 100: bounded so one binding cannot take the
# broker's memory (1000 -> 100,000 points, ~5 MB)
MAX_WEIGHT = 1000
_SERIAL_BITS = 32  # a point is stored as (hash << 32 | member serial): ints sort by hash, then member
_SERIAL_MASK = (1 << _SERIAL_BITS) - 1

M = TypeVar("M", bound=Hashable)
V = TypeVar("V")


def key_hash(data: bytes) -> int:
    """The 32-bit hash of a routing key, header or property: CRC-32, which C computes in ~0.1 us
    and spreads keys over the ring as evenly as a cryptographic hash does (measured)."""
    return zlib.crc32(data)


def _points(identity: str, count: int) -> array[int]:
    """A member's first ``count`` points: SHAKE-128 of its identity read as 32-bit numbers, the
    same in every process. One C call makes them all (a hash per point cost ~4 ms a binding), and
    as an extendable output its first points do not change with ``count``: a binding whose
    weight grows keeps the points it had, so only the keys of its new points move."""
    points = array("I", hashlib.shake_128(identity.encode()).digest(4 * count))
    if sys.byteorder == "big":
        points.byteswap()  # the same points on every machine
    return points


class HashRing(Generic[M, V]):
    """Members with weights on a ring of 32-bit points; a route answers a member's value (the
    exchange's destination tuple: a member is a ``Binding``, whose hash is computed anew on each
    lookup, ~1 us)."""

    __slots__ = ("_flat", "_members", "_next_serial", "_owners", "_points")

    def __init__(self) -> None:
        self._points: SortedList = SortedList()
        self._members: dict[M, tuple[int, str, int]] = {}  # member -> (serial, identity, weight)
        self._owners: dict[int, V] = {}  # serial -> the member's value
        self._next_serial = 0
        self._flat: list[int] | None = None  # the points as a plain list, made again after a change

    def __len__(self) -> int:
        return len(self._members)

    def add(self, member: M, identity: str, weight: int, value: V) -> None:
        """Place ``member``'s points; ``identity`` decides where they are (a destination's kind and
        name: two bindings to one queue with other arguments share their points)."""
        if member in self._members:
            return
        serial = self._next_serial
        self._next_serial = (serial + 1) & _SERIAL_MASK
        while serial in self._owners:  # only after 2**32 bindings: skip numbers still in use
            serial = self._next_serial
            self._next_serial = (serial + 1) & _SERIAL_MASK
        self._members[member] = (serial, identity, weight)
        self._owners[serial] = value
        self._points.update((point << _SERIAL_BITS) | serial for point in _points(identity, weight * POINTS_PER_WEIGHT))
        self._flat = None

    def remove(self, member: M) -> None:
        found = self._members.pop(member, None)
        if found is None:
            return
        serial, identity, weight = found
        del self._owners[serial]
        for point in _points(identity, weight * POINTS_PER_WEIGHT):
            self._points.discard((point << _SERIAL_BITS) | serial)
        self._flat = None

    def owner(self, hashed: int) -> V | None:
        """The value of the member owning the 32-bit hash ``hashed``: the first point at or after it."""
        flat = self._flat
        if flat is None:
            if not self._members:
                return None
            flat = self._flat = list(self._points)
        i = bisect.bisect_left(flat, hashed << _SERIAL_BITS)
        if i == len(flat):
            i = 0
        return self._owners[flat[i] & _SERIAL_MASK]
