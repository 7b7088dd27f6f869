"""The message store's live index: where each live message's latest record is, and for which queues.

Rule 1: ``StoreIndex`` owns the entries (chunks of ``index_chunks.py``), the multi-queue table and
their live figures per segment and in all; it holds the ``QueueSlots`` (``store_slots.py``).
``MessageStore`` (``message_store.py``) holds the one index and calls it from its op handlers;
recovery (``store_recovery.py``) builds it by replaying the log through the same methods;
compaction (``store_compaction.py``) asks it what is live and tells it where a copy went. Rule 2: it always equals what a replay of the segments would rebuild (``message_store``'s docstring).

Layout (why: a persistent backlog of ten million messages must fit in a few hundred MB, so there is
no Python object per message). Entries live in ``Chunk``s (``index_chunks.py``: parallel typed
arrays, one slot per message, sorted by message id, about 29 bytes a message in all):

- A queue is a small slot number (``QueueSlots``), so a key costs nothing per message.
- A message held by two or more queues has ``q == MULTI`` and its queues and counts in ``_multi``
  (id -> {slot: count}); fanout of one persistent message to several durable queues is the rare
  case, and a message falls back to a plain slot as soon as one queue is left.
- ``_firsts[k]`` is the lowest id chunk ``k`` may hold: chunk ``k`` holds ids in
  ``[_firsts[k], _firsts[k+1])``, so a lookup is two C bisects. Ids grow with publish order, so
  publishing appends to the last chunk; an older id (a compaction copy replayed at recovery, a
  transaction committed late) is inserted in place, and a chunk over ``2 * CHUNK`` is split.
- An acked message is marked ``DEAD`` in place. A chunk with no live entry is dropped; one under a
  quarter live is rewritten with its live entries only and merged with a small neighbour, so dead
  slots never cost more than about three times the live ones, and usually nothing: a drained backlog
  frees whole chunks.

Delayed messages (x-delay) are in ``DelayedIndex`` (``store_delayed.py``). Recovered messages are
read back by position in the chunks (``store_reading.py``, from ``export``), valid until a change.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from .index_chunks import DEAD, MULTI, Chunk
from .store_ops import QKey
from .store_slots import QueueSlots

__all__ = ["CHUNK", "DEAD", "MULTI", "SegmentLive", "StoreIndex"]

# Entries a chunk takes by appending before a new one starts; inserts may grow it to twice that.
CHUNK = 4096


@dataclass(slots=True)
class SegmentLive:
    """Live Publish/Delay records whose latest copy is in one segment: what compaction decides on."""

    count: int = 0
    bytes: int = 0


class StoreIndex:
    """The live entries and their bookkeeping (see the module docstring)."""

    __slots__ = ("slots", "_chunks", "_entries", "_firsts", "_live_bytes", "_multi",
                 "_seg_live")

    def __init__(self) -> None:
        self.slots = QueueSlots()
        self._chunks: list[Chunk] = []
        self._firsts: list[int] = []  # lowest id each chunk may hold
        self._multi: dict[int, dict[int, int]] = {}  # id -> {queue slot: delivery count}, 2+ queues
        self._entries = 0  # live messages in the chunks
        self._seg_live: dict[int, SegmentLive] = {}  # segment seq -> its live records
        self._live_bytes = 0

    def export(self) -> tuple[QueueSlots, list[Chunk], list[int], dict[int, dict[int, int]],
                              dict[int, SegmentLive], int, int]:
        """What a checkpoint saves (``store_checkpoint.py``), as it stands: not copies."""
        return (self.slots, self._chunks, self._firsts, self._multi, self._seg_live, self._entries,
                self._live_bytes)

    @classmethod
    def restore(cls, slots: QueueSlots, chunks: list[Chunk], firsts: list[int],
                multi: dict[int, dict[int, int]], seg_live: dict[int, SegmentLive], entries: int,
                live_bytes: int) -> StoreIndex:
        """The index ``export`` saved."""
        index = cls()
        index.slots, index._chunks, index._firsts, index._multi = slots, chunks, firsts, multi
        index._seg_live, index._entries, index._live_bytes = seg_live, entries, live_bytes
        return index

    # -- lookups --------------------------------------------------------------------------------

    def _find(self, mid: int) -> tuple[Chunk, int] | None:
        """The chunk and position of live message ``mid``, or None."""
        k = bisect_right(self._firsts, mid) - 1
        if k < 0:
            return None
        c = self._chunks[k]
        ids = c.ids
        i = mid - ids[0]  # right when the chunk's ids are consecutive (no transient ones between)
        if not (0 <= i < len(ids) and ids[i] == mid):
            i = bisect_left(ids, mid)
        if i < len(ids) and ids[i] == mid and c.q[i]:
            return c, i
        return None

    def _holds(self, mid: int, slot: int) -> tuple[Chunk, int] | None:
        """Where ``mid`` is, if queue ``slot`` holds it."""
        loc = self._find(mid)
        if loc is None:
            return None
        q = loc[0].q[loc[1]]
        if q == slot or q == MULTI and slot in self._multi[mid]:
            return loc
        return None

    def holds_queue(self, key: QKey) -> bool:
        """Whether queue ``key`` holds any live message."""
        return key in self.slots.ids

    # -- adding ---------------------------------------------------------------------------------

    def put_held(self, mid: int, seq: int, off: int, size: int, held: dict[int, int]) -> None:
        """``put`` with the queues as {slot: delivery count} (each slot already taken)."""
        if len(held) == 1:
            ((q, cnt),) = held.items()
            self.put(mid, seq, off, size, q, cnt)
        else:
            self.put(mid, seq, off, size, MULTI, 0)
            self._multi[mid] = held

    def put(self, mid: int, seq: int, off: int, size: int, q: int, cnt: int) -> None:
        """Index ``mid``'s latest record (its queues already counted by ``slots.take``; for ``MULTI``
        the caller fills ``_multi`` after), replacing an older entry for the same id; counts the
        record live in its segment."""
        chunks = self._chunks
        c = chunks[-1] if chunks else None
        if c is None or mid > c.ids[-1]:
            if c is None or len(c.ids) >= CHUNK:
                c = Chunk()
                chunks.append(c)
                self._firsts.append(mid)
            c.ids.append(mid)
            c.seg.append(seq)
            c.off.append(off)
            c.size.append(size)
            c.q.append(q)
            c.cnt.append(cnt)
            c.live += 1
        else:
            self._put_inside(mid, seq, off, size, q, cnt)
        self._entries += 1
        live = self._seg_live.get(seq)
        if live is None:
            live = self._seg_live[seq] = SegmentLive()
        live.count += 1
        live.bytes += size
        self._live_bytes += size

    def _put_inside(self, mid: int, seq: int, off: int, size: int, q: int, cnt: int) -> None:
        """An id at or below the last indexed one: replace its entry, or insert it in order."""
        firsts = self._firsts
        k = bisect_right(firsts, mid) - 1
        if k < 0:
            k = 0
            firsts[0] = mid
        c = self._chunks[k]
        i = bisect_left(c.ids, mid)
        if i < len(c.ids) and c.ids[i] == mid:
            if c.q[i]:
                self._forget(mid, c, i)
            c.seg[i], c.off[i], c.size[i], c.q[i], c.cnt[i] = seq, off, size, q, cnt
            c.live += 1
            return
        c.insert(i, mid, seq, off, size, q, cnt)
        if len(c.ids) > 2 * CHUNK:
            tail = c.split()
            self._chunks.insert(k + 1, tail)
            firsts.insert(k + 1, tail.ids[0])

    def _forget(self, mid: int, c: Chunk, i: int) -> None:
        """Drop a live entry that a newer record of the same id replaces (slot kept, refilled)."""
        q = c.q[i]
        if q == MULTI:
            for slot in self._multi.pop(mid):
                self.slots.release(slot)
        else:
            self.slots.release(q)
        self._uncount(c, i)

    # -- acks and deliveries: False when the op would change nothing ----------------------------

    def remove(self, mid: int, key: QKey) -> bool:
        """Queue ``key`` no longer holds ``mid`` (Ack); the entry dies with its last queue.

        ``_holds`` and ``_unhold`` inlined for the one-queue message: acks are the other half of
        every persistent message's work."""
        slots = self.slots
        slot = slots.ids.get(key)
        if slot is None:
            return False
        k = bisect_right(self._firsts, mid) - 1
        if k < 0:
            return False
        c = self._chunks[k]
        ids = c.ids
        i = mid - ids[0]  # as in ``_find``
        if not (0 <= i < len(ids) and ids[i] == mid):
            i = bisect_left(ids, mid)
            if i == len(ids) or ids[i] != mid:
                return False
        q = c.q[i]
        if q != slot and (q != MULTI or slot not in self._multi[mid]):
            return False  # DEAD, or another queue's
        if q == MULTI:
            self._unhold(mid, c, i, slot)
            slots.release(slot)
            return True
        size = c.size[i]
        live = self._seg_live[c.seg[i]]
        live.count -= 1
        live.bytes -= size
        self._live_bytes -= size
        c.q[i] = DEAD
        c.live -= 1
        self._entries -= 1
        if c.live * 4 < len(ids):
            self._tidy(c)
        left = slots.live[slot] - 1
        if left:
            slots.live[slot] = left
        else:
            slots.release(slot)
        return True

    def deliver(self, mid: int, key: QKey) -> bool:
        """Count one delivery of ``mid`` from queue ``key``, if it holds it."""
        slot = self.slots.ids.get(key)
        loc = self._holds(mid, slot) if slot is not None else None
        if loc is None or slot is None:
            return False
        c, i = loc
        if c.q[i] == MULTI:
            self._multi[mid][slot] += 1
        else:
            c.cnt[i] += 1
        return True

    # -- removing -------------------------------------------------------------------------------

    def _uncount(self, c: Chunk, i: int) -> None:
        size = c.size[i]
        live = self._seg_live[c.seg[i]]
        live.count -= 1
        live.bytes -= size
        self._live_bytes -= size
        c.q[i] = DEAD
        c.live -= 1
        self._entries -= 1

    def _unhold(self, mid: int, c: Chunk, i: int, slot: int) -> None:
        """Queue ``slot`` no longer holds ``mid``, without the slot count (callers release it)."""
        if c.q[i] == MULTI:
            queues = self._multi[mid]
            del queues[slot]
            if len(queues) == 1:
                ((c.q[i], c.cnt[i]),) = queues.items()
                del self._multi[mid]
        else:
            self._uncount(c, i)
            self._tidy(c)

    def purge_changes(self, key: QKey, keep: tuple[int, ...]) -> bool:
        """Whether purging ``key`` but ``keep`` would remove anything (else no record is written)."""
        slot = self.slots.ids.get(key)
        return slot is not None and not (self.slots.live[slot] <= len(keep) and all(
            self._holds(mid, slot) is not None for mid in keep))

    def kill_queue(self, key: QKey, keep: frozenset[int]) -> None:
        """Remove ``key`` from every live message but ``keep`` (DropQueue, PurgeQueue): one scan
        of the queue slots in C per chunk, then Python work per message removed only."""
        slot = self.slots.ids.get(key)
        if slot is None:
            return
        removed = 0
        for mid in [m for m, qs in self._multi.items() if slot in qs and m not in keep]:
            loc = self._find(mid)
            assert loc is not None
            self._unhold(mid, loc[0], loc[1], slot)  # one queue of several: the entry stays
            removed += 1
        touched = []
        for c in self._chunks:
            q = c.q
            if slot not in q:
                continue
            ids = c.ids
            i = -1
            try:
                while True:
                    i = q.index(slot, i + 1)
                    if keep and ids[i] in keep:
                        continue
                    self._uncount(c, i)
                    removed += 1
            except ValueError:
                pass
            touched.append(c)
        for c in touched:
            self._tidy(c)
        if removed:
            self.slots.release(slot, removed)

    def _tidy(self, c: Chunk) -> None:
        """Drop a chunk with nothing live; rewrite one under a quarter live with its live entries
        and merge it with a neighbour that fits (see the module docstring)."""
        n = len(c.ids)
        if c.live * 4 >= n:
            return
        chunks, firsts = self._chunks, self._firsts
        k = bisect_right(firsts, c.ids[0]) - 1
        if k < 0 or chunks[k] is not c:
            return  # already merged into a neighbour
        if not c.live:
            del chunks[k], firsts[k]
            return
        c.keep_live()
        if k + 1 < len(chunks) and len(c.ids) + len(chunks[k + 1].ids) <= CHUNK:
            c.take_tail(chunks[k + 1])
            del chunks[k + 1], firsts[k + 1]
        if k > 0 and len(chunks[k - 1].ids) + len(c.ids) <= CHUNK:
            chunks[k - 1].take_tail(c)
            del chunks[k], firsts[k]

    def _count_live(self, seq: int, size: int, one: int = 1) -> None:
        """One more (``one=-1``: one fewer) live record of ``size`` bytes in segment ``seq``."""
        live = self._seg_live.get(seq)
        if live is None:
            live = self._seg_live[seq] = SegmentLive()
        live.count += one
        live.bytes += size
        self._live_bytes += size

    # -- compaction: what a segment holds live, and where its copies went -----------------------

    def live_in(self, seq: int) -> SegmentLive:
        """The live records of segment ``seq`` (a fresh zero when it has none; not kept)."""
        return self._seg_live.get(seq) or SegmentLive()

    def forget_segment(self, seq: int) -> None:
        """Segment ``seq`` is deleted (it had nothing live)."""
        self._seg_live.pop(seq, None)

    def queues_at(self, mid: int, seq: int, off: int) -> dict[int, int] | None:
        """{slot: delivery count} of ``mid`` if its latest record is at (``seq``, ``off``)."""
        loc = self._find(mid)
        if loc is None:
            return None
        c, i = loc
        if c.seg[i] != seq or c.off[i] != off:
            return None  # an older copy
        q = c.q[i]
        return dict(self._multi[mid]) if q == MULTI else {q: c.cnt[i]}

    def move(self, mid: int, seq: int, off: int, size: int) -> None:
        """``mid``'s latest record is now the copy at (``seq``, ``off``) of ``size`` bytes."""
        loc = self._find(mid)
        assert loc is not None
        c, i = loc
        self._count_live(c.seg[i], -c.size[i], -1)
        c.seg[i], c.off[i], c.size[i] = seq, off, size
        self._count_live(seq, size)

    # -- figures --------------------------------------------------------------------------------

    def live_bytes(self) -> int:
        return self._live_bytes

    def live_messages(self) -> int:
        """Messages some queue still holds."""
        return self._entries
