"""The message store's live index: where each live message's latest record is, and for which queues.

Owner: ``MessageStore`` (``message_store.py``) through this base class; the index is only changed by
its op handlers, recovery (``store_recovery.py``, which replays the log through the same methods)
and compaction (``store_compaction.py``, which moves entries). The bookkeeping here keeps the
per-segment and per-queue live counts that compaction decides on.

Layout (why: a persistent backlog of ten million messages must fit in a few hundred MB, so there is
no Python object per message). Entries live in ``Chunk``s (``index_chunks.py``: parallel typed
arrays, one slot per message, sorted by message id, about 29 bytes a message in all):

- A queue is a small slot number (``_slots`` / ``_keys``), so a key costs nothing per message.
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

Delayed messages (x-delay) keep a dict entry each (``_delayed``): they are few and short-lived.
"""

from __future__ import annotations

import mmap
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .fsync import FsyncMode
from .index_chunks import DEAD, MULTI, Chunk
from .segments import SegmentWriter
from .store_ops import Kind, QKey

__all__ = [
    "CHUNK", "DEAD", "MULTI", "SEG", "SIZE", "Segment", "StoreIndex", "StoreNotOpenError",
]


class StoreNotOpenError(RuntimeError):
    """``write`` before ``recover`` (segments and index unknown) or after ``close``."""


@dataclass(slots=True)
class Segment:
    seq: int
    path: Path
    size: int  # bytes in the file (plus buffered bytes for the current segment)
    live_count: int = 0  # live Publish/Delay records whose latest copy is here
    live_bytes: int = 0


# Plain ints for the hot path (an enum member lookup per record is measurable).
REC_PUBLISH, REC_ACK, REC_DELIVER = int(Kind.PUBLISH), int(Kind.ACK), int(Kind.DELIVER)
REC_DROP_QUEUE, REC_DELAY, REC_UNDELAY = int(Kind.DROP_QUEUE), int(Kind.DELAY), int(Kind.UNDELAY)
REC_PURGE = int(Kind.PURGE)

# Entries a chunk takes by appending before a new one starts; inserts may grow it to twice that.
CHUNK = 4096
# A delayed message's index entry: [segment seq, record bytes].
SEG, SIZE = 0, 1


class StoreIndex:
    """The index state and its bookkeeping; ``MessageStore.__init__`` sets every field."""

    _dir: Path
    _max: int
    _mode: FsyncMode
    _segments: dict[int, Segment]  # in log order (insertion order)
    _writer: SegmentWriter | None
    _current: Segment | None
    _chunks: list[Chunk]
    _firsts: list[int]  # lowest id each chunk may hold
    _multi: dict[int, dict[int, int]]  # id -> {queue slot: delivery count}, 2+ queues
    _entries: int  # live messages in the chunks
    _slots: dict[QKey, int]  # queue -> slot, for queues holding live messages
    _keys: list[QKey | None]  # slot -> queue (None: free)
    _slot_live: list[int]  # slot -> live messages
    _free_slots: list[int]
    _delayed: dict[int, list[int]]  # id -> [segment seq, record bytes]
    _disk_bytes: int
    _live_bytes: int
    _dir_dirty: bool
    failing: OSError | None
    _recovered: bool
    _maps: dict[int, mmap.mmap]

    def _init_index(self) -> None:
        self._chunks = []
        self._firsts = []
        self._multi = {}
        self._entries = 0
        self._slots = {}
        self._keys = [None]  # slot 0 is DEAD
        self._slot_live = [0]
        self._free_slots = []
        self._delayed = {}
        self._live_bytes = 0

    # The segment writing, provided by ``MessageStore``.
    def _append(self, kind: int, parts: Any) -> tuple[Segment, int, int]:
        raise NotImplementedError

    def _open_segment(self, seq: int, w: SegmentWriter | None = None) -> SegmentWriter:
        raise NotImplementedError

    def sync(self) -> None:
        raise NotImplementedError

    # -- queue slots ----------------------------------------------------------------------------

    def _slot(self, key: QKey) -> int:
        """The slot of ``key`` (a new one if it holds nothing yet); counts one more message."""
        slot = self._slots.get(key)
        if slot is None:
            if self._free_slots:
                slot = self._free_slots.pop()
                self._keys[slot] = key
            else:
                slot = len(self._keys)
                self._keys.append(key)
                self._slot_live.append(0)
            self._slots[key] = slot
        self._slot_live[slot] += 1
        return slot

    def _release(self, slot: int, n: int = 1) -> None:
        left = self._slot_live[slot] - n
        self._slot_live[slot] = left
        if not left:
            key = self._keys[slot]
            assert key is not None
            del self._slots[key]
            self._keys[slot] = None
            self._free_slots.append(slot)

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

    def _queues_of(self, mid: int, c: Chunk, i: int) -> dict[int, int]:
        """{slot: delivery count} of a live entry."""
        q = c.q[i]
        return self._multi[mid] if q == MULTI else {q: c.cnt[i]}

    # -- adding ---------------------------------------------------------------------------------

    def _put_held(self, mid: int, seq: int, off: int, size: int, held: dict[int, int]) -> None:
        """``_put`` with the queues as {slot: delivery count}."""
        if len(held) == 1:
            ((q, cnt),) = held.items()
            self._put(mid, seq, off, size, q, cnt)
        else:
            self._put(mid, seq, off, size, MULTI, 0)
            self._multi[mid] = held

    def _put(self, mid: int, seq: int, off: int, size: int, q: int, cnt: int) -> None:
        """Index ``mid``'s latest record (its queues already counted by ``_slot``; for ``MULTI``
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
        seg = self._segments[seq]
        seg.live_count += 1
        seg.live_bytes += size
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
                self._release(slot)
        else:
            self._release(q)
        self._uncount(c, i)

    # -- removing -------------------------------------------------------------------------------

    def _uncount(self, c: Chunk, i: int) -> None:
        size = c.size[i]
        seg = self._segments[c.seg[i]]
        seg.live_count -= 1
        seg.live_bytes -= size
        self._live_bytes -= size
        c.q[i] = DEAD
        c.live -= 1
        self._entries -= 1

    def _remove_queue(self, mid: int, c: Chunk, i: int, slot: int) -> None:
        """Queue ``slot`` no longer holds ``mid``; the entry dies with its last queue."""
        self._unhold(mid, c, i, slot)
        self._release(slot)

    def _unhold(self, mid: int, c: Chunk, i: int, slot: int) -> None:
        """``_remove_queue`` without the slot count (``_kill_queue`` releases them at once)."""
        if c.q[i] == MULTI:
            queues = self._multi[mid]
            del queues[slot]
            if len(queues) == 1:
                ((c.q[i], c.cnt[i]),) = queues.items()
                del self._multi[mid]
        else:
            self._uncount(c, i)
            self._tidy(c)

    def _count_delivery(self, mid: int, c: Chunk, i: int, slot: int) -> None:
        if c.q[i] == MULTI:
            self._multi[mid][slot] += 1
        else:
            c.cnt[i] += 1

    def _kill_queue(self, key: QKey, keep: frozenset[int]) -> None:
        """Remove ``key`` from every live message but ``keep`` (DropQueue, PurgeQueue): one scan
        of the queue slots in C per chunk, then Python work per message removed only."""
        slot = self._slots.get(key)
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
            self._release(slot, removed)

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

    # -- delayed messages -----------------------------------------------------------------------

    def _count_live(self, seg: Segment, size: int) -> None:
        seg.live_count += 1
        seg.live_bytes += size
        self._live_bytes += size

    def _uncount_live(self, seg: Segment, size: int) -> None:
        seg.live_count -= 1
        seg.live_bytes -= size
        self._live_bytes -= size

    def _index_delay(self, mid: int, seq: int, size: int) -> None:
        old = self._delayed.pop(mid, None)
        if old is not None:
            self._uncount_live(self._segments[old[SEG]], old[SIZE])
        self._delayed[mid] = [seq, size]
        self._count_live(self._segments[seq], size)

    def _index_undelay(self, mid: int) -> bool:
        old = self._delayed.pop(mid, None)
        if old is None:
            return False
        self._uncount_live(self._segments[old[SEG]], old[SIZE])
        return True

    # -- figures and shutdown -------------------------------------------------------------------

    def disk_bytes(self) -> int:
        return self._disk_bytes

    def live_bytes(self) -> int:
        return self._live_bytes

    def segment_count(self) -> int:
        return len(self._segments)

    def live_messages(self) -> int:
        """Messages some queue still holds, plus delayed messages not yet released."""
        return self._entries + len(self._delayed)

