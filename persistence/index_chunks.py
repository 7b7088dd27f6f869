"""The entries of the message store's live index: chunks of parallel typed arrays.

Owner: ``StoreIndex`` (``store_index.py``) holds every ``Chunk`` in its ``_chunks`` and decides when
one is made, split, rewritten or merged; this module only holds the per-chunk layout and the array
work on one or two chunks, so the index's bookkeeping (segment live counts, policy) stays in
``store_index.py``, its queue slots in ``store_slots.py``, and the typed-array layout has one place. The per-message paths
(append on publish, lookup on ack) stay inline in ``StoreIndex``: a method call per message there is
measurable; what is here runs per chunk or on the rare in-place insert.

Layout (why: a persistent backlog of ten million messages must fit in a few hundred MB, so there is
no Python object per message): one slot per message in each array, sorted by message id, about 29
bytes a message in all:

- ``ids`` (u64), ``seg`` (u32, segment seq), ``off`` (u32, record offset in its segment),
  ``size`` (u32, record bytes), ``q`` (u32, the queue's slot number, ``DEAD`` or ``MULTI``),
  ``cnt`` (u32, delivery count).
- An acked message is marked ``DEAD`` in place; ``live`` counts the entries that are not.
"""

from __future__ import annotations

from array import array
from itertools import compress

__all__ = ["DEAD", "FIELDS", "MULTI", "Chunk"]

DEAD = 0  # ``q`` of an entry no queue holds any more (slot 0 is never a queue)
MULTI = 0xFFFFFFFF  # ``q`` of an entry held by several queues: see ``StoreIndex._multi``
FIELDS = (("ids", "Q"), ("seg", "I"), ("off", "I"), ("size", "I"), ("q", "I"), ("cnt", "I"))
assert array("I").itemsize == 4 and array("Q").itemsize == 8


class Chunk:
    """Entries of a run of message ids, sorted by id (see the module docstring)."""

    __slots__ = ("cnt", "ids", "live", "off", "q", "seg", "size")

    def __init__(self) -> None:
        self.ids = array("Q")
        self.seg = array("I")
        self.off = array("I")
        self.size = array("I")
        self.q = array("I")
        self.cnt = array("I")
        self.live = 0  # entries whose q is not DEAD

    def insert(self, i: int, mid: int, seq: int, off: int, size: int, q: int, cnt: int) -> None:
        """A live entry at position ``i`` (an id older than the chunk's last, kept in order)."""
        for (name, _), value in zip(FIELDS, (mid, seq, off, size, q, cnt), strict=True):
            getattr(self, name).insert(i, value)
        self.live += 1

    def split(self) -> Chunk:
        """Keep the first half of the entries; return a new chunk with the second half."""
        half = len(self.ids) // 2
        tail = Chunk()
        for name, _ in FIELDS:
            whole = getattr(self, name)
            setattr(tail, name, whole[half:])
            setattr(self, name, whole[:half])
        tail.live = len(tail.q) - tail.q.count(DEAD)
        self.live -= tail.live
        return tail

    def keep_live(self) -> None:
        """Rewrite the arrays with the live entries only."""
        dead = len(self.ids) - self.live
        if not self.q[dead:].count(DEAD):
            # the live entries are the tail (a queue drained in order): slices, no ints made
            for name, _ in FIELDS:
                setattr(self, name, getattr(self, name)[dead:])
            return
        mask = self.q
        for name, code in FIELDS:
            setattr(self, name, array(code, compress(getattr(self, name), mask)))

    def take_tail(self, other: Chunk) -> None:
        """Append ``other``'s entries (all above this chunk's ids) to this chunk."""
        for name, _ in FIELDS:
            getattr(self, name).extend(getattr(other, name))
        self.live += other.live
