"""Reading recovered messages back from the segments, lazily, while the broker loads its queues.

Rule 1: ``RecoveredReader`` owns the memory maps of the segments it reads (one at a time) and each
queue's ``Runs`` (where its entries are in the chunks); the entries' fields belong to the
``StoreIndex`` (``store_index.py``), whose chunks it reads (``export``), and the segment paths to
``StoreSegments`` (``store_segments.py``). ``MessageStore`` (``message_store.py``) makes one after recovery and closes it before its first write: the index's
positions are only valid until then. Rule 2: nothing here changes the index or a file.

Why lazily: a large backlog restarts in about the memory of the queues' resident windows plus the
index; the rest stays in the segments, handed to the queue's spill backing as a ``StoreTail``
(``store_pages.py``, built here by ``tail``) that pages it in from there.
"""

from __future__ import annotations

import mmap
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path

from headrace.queues.backing import RecoveredRow

from .records import HEADER_SIZE
from .index_chunks import DEAD, MULTI
from .store_index import StoreIndex
from .store_pages import StoreTail, back_to_back, record_overhead
from .store_ops import PUB_HEAD, PUB_QUEUE, QKey, RecoveredMessage, RecoveredQueue, decode_publish_at

__all__ = ["RecoveredReader", "Runs", "recovered_runs"]


class Runs:
    """One queue's recovered entries in publish order, as runs of consecutive entries of one chunk:
    a few bytes a run, and a backlog's chunks are each one run, so a 10M backlog's queues cost
    kilobytes while they load instead of a position per message."""

    __slots__ = ("chunk", "first", "ends")

    def __init__(self) -> None:
        self.chunk = array("Q")  # the run's chunk number
        self.first = array("Q")  # its first entry's index in the chunk
        self.ends = array("Q")  # entries in this run and the runs before it

    def add(self, k: int, i: int, n: int) -> None:
        """``n`` entries from index ``i`` of chunk ``k``, appended to the last run if they follow it."""
        ends = self.ends
        if ends and self.chunk[-1] == k and \
                self.first[-1] + ends[-1] - (ends[-2] if len(ends) > 1 else 0) == i:
            ends[-1] += n
            return
        self.chunk.append(k)
        self.first.append(i)
        ends.append((ends[-1] if ends else 0) + n)

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def at(self, n: int) -> tuple[int, int]:
        """(chunk, index) of the ``n``-th entry, and the run it is in."""
        r = bisect_right(self.ends, n)
        return self.chunk[r], self.first[r] + n - (self.ends[r - 1] if r else 0)


def recovered_runs(index: StoreIndex) -> dict[QKey, tuple[int, Runs]]:
    """Each queue's slot and live entries in id (publish) order, as ``Runs`` of the chunks."""
    slots, chunks, _, multi, _, _, _ = index.export()
    per_slot: dict[int, Runs] = {}
    for k, c in enumerate(chunks):
        q, ids = c.q, c.ids
        first = q[0]
        if first != DEAD and first != MULTI and q.count(first) == len(q):
            runs = per_slot.get(first)
            if runs is None:
                runs = per_slot[first] = Runs()
            runs.add(k, 0, len(q))  # a chunk of one queue, all live
            continue
        for i, slot in enumerate(q):
            if slot == DEAD:
                continue
            for s in (multi[ids[i]] if slot == MULTI else (slot,)):
                runs = per_slot.get(s)
                if runs is None:
                    runs = per_slot[s] = Runs()
                runs.add(k, i, 1)
    keys = slots.keys
    return {keys[slot]: (slot, runs) for slot, runs in per_slot.items()}  # type: ignore[misc]


class RecoveredReader:
    """The recovered queues of one store, read from its segments as they are iterated."""

    __slots__ = ("_chunks", "_index", "_maps", "_multi", "_path_of", "loaded", "tails")

    def __init__(self, index: StoreIndex, path_of: Callable[[int], Path]) -> None:
        self._index = index
        _, self._chunks, _, self._multi, _, _, _ = index.export()
        self._path_of = path_of
        self._maps: dict[int, mmap.mmap] = {}  # segments mapped to load recovered messages
        self.loaded = 0  # messages read back (the store's I/O statistics)
        self.tails: list[StoreTail] = []  # handed out by ``tail``: the store keeps their pins

    def queues(self) -> dict[QKey, RecoveredQueue]:
        """Each queue's live messages in publish order, read when iterated."""
        return {key: _Recovering(self, slot, runs)
                for key, (slot, runs) in recovered_runs(self._index).items()}

    def _entry(self, k: int, i: int, slot: int) -> tuple[int, int, int, int, int]:
        c = self._chunks[k]
        mid = c.ids[i]
        count = self._multi[mid][slot] if c.q[i] == MULTI else c.cnt[i]
        return mid, c.seg[i], c.off[i], c.size[i], count

    def load(self, k: int, i: int, slot: int) -> RecoveredMessage:
        """A recovered message's fields, read from its mapped segment."""
        mid, seq, offset, size, count = self._entry(k, i, slot)
        self.loaded += 1
        view = self._maps.get(seq) or self._map(seq)
        ts, exchange, routing_key, props, body = decode_publish_at(
            view, offset + HEADER_SIZE, offset + size)
        return RecoveredMessage(mid, exchange, routing_key, props, body, count > 0, count, ts)

    def rows(self, runs: Runs, start: int, slot: int) -> Iterator[RecoveredRow]:
        """``load`` for recovery's spill, from the ``start``-th entry: each message as (id,
        delivery count, timestamp, exchange + routing key + props + body as one copied span,
        three lengths), no decoding; a loop over each run's slice of its chunk's arrays."""
        maps, chunks, multi = self._maps, self._chunks, self._multi
        unpack_head, head_size = PUB_HEAD.unpack_from, HEADER_SIZE + PUB_HEAD.size
        unpack_queue, queue_size = PUB_QUEUE.unpack_from, PUB_QUEUE.size
        if start >= len(runs):
            return
        r = bisect_right(runs.ends, start)
        skip = start - (runs.ends[r - 1] if r else 0)
        for r in range(r, len(runs.ends)):
            c = chunks[runs.chunk[r]]
            i0 = runs.first[r] + skip
            i1 = runs.first[r] + runs.ends[r] - (runs.ends[r - 1] if r else 0)
            skip = 0
            ids, segs, offs, sizes, qs, cnts = c.ids, c.seg, c.off, c.size, c.q, c.cnt
            for i in range(i0, i1):
                mid, seq, offset = ids[i], segs[i], offs[i]
                count = multi[mid][slot] if qs[i] == MULTI else cnts[i]
                view = maps.get(seq) or self._map(seq)
                end = offset + sizes[i]
                _, ts, nq, vlen, elen, rlen, plen = unpack_head(view, offset + HEADER_SIZE)
                off = offset + head_size  # past the queue names and the vhost (decode_publish_at's walk)
                for _ in range(nq):
                    off += queue_size + unpack_queue(view, off)[0]
                e_at = off + vlen
                if e_at + elen + rlen + plen > end:
                    raise ValueError("field runs past the end of the record")
                self.loaded += 1
                yield mid, count, ts, view[e_at:end], elen, rlen, plen

    def tail(self, runs: Runs, start: int, slot: int) -> StoreTail:
        """The queue's entries from the ``start``-th on, to be paged in from the segments where
        they lie (``store_pages.StoreTail``), or copied as ``rows`` by a backing that cannot."""
        tail = StoreTail(lambda: self.rows(runs, start, slot), lambda t: self._fill(t, runs, start, slot))
        self.tails.append(tail)
        return tail

    def _fill(self, tail: StoreTail, runs: Runs, start: int, slot: int) -> None:
        """``tail``'s runs of records back to back, and its delivery counts that are not 0: C
        loops over each run's slice of its chunk's arrays, a Python step per entry only where
        records are not back to back (copies, other queues' records between) or counted."""
        if start >= len(runs):
            return
        chunks, multi = self._chunks, self._multi
        counts = tail.counts
        r = bisect_right(runs.ends, start)
        skip = start - (runs.ends[r - 1] if r else 0)
        last = (-1, -1)  # (segment, end) of the run added last, to extend it across chunks
        for r in range(r, len(runs.ends)):
            c = chunks[runs.chunk[r]]
            i0 = runs.first[r] + skip
            i1 = runs.first[r] + runs.ends[r] - (runs.ends[r - 1] if r else 0)
            skip = 0
            ids, segs, offs, sizes, qs, cnts = c.ids, c.seg, c.off, c.size, c.q, c.cnt
            if qs[i0:i1].count(MULTI) or cnts[i0:i1].count(0) != i1 - i0:
                for i in range(i0, i1):
                    count = multi[ids[i]][slot] if qs[i] == MULTI else cnts[i]
                    if count:
                        counts[ids[i]] = count
            stretches = [(i0, i1)] if back_to_back(offs, sizes, segs, i0, i1) else _stretches(
                offs, sizes, segs, i0, i1)
            for a, b in stretches:
                seq, off = segs[a], offs[a]
                end = offs[b - 1] + sizes[b - 1]
                if (seq, off) == last:
                    tail.extend_run(end, b - a)
                else:
                    view = self._maps.get(seq) or self._map(seq)
                    tail.add_run(seq, self._path_of(seq), off, end, b - a,
                                 record_overhead(view, off, off + sizes[a]))
                last = (seq, end)

    def _map(self, seq: int) -> mmap.mmap:
        # one segment mapped at a time: a mapping's touched pages count in the broker's RSS
        # (loads go in id order, so mostly segment by segment)
        self.close()
        with open(self._path_of(seq), "rb") as f:
            view = self._maps[seq] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return view

    def close(self) -> None:
        """Unmap; the store writes next (the index's positions move)."""
        for view in self._maps.values():
            view.close()
        self._maps.clear()


def _stretches(offs: array[int], sizes: array[int], segs: array[int], i0: int, i1: int
               ) -> list[tuple[int, int]]:
    """``[i0, i1)`` cut where the next record does not follow the one before in its segment."""
    out = []
    a = i0
    while a < i1:
        s, expect, b = segs[a], offs[a] + sizes[a], a + 1
        while b < i1 and segs[b] == s and offs[b] == expect:
            expect += sizes[b]
            b += 1
        out.append((a, b))
        a = b
    return out


class _Recovering(RecoveredQueue):
    """One queue's recovered messages, read from the segments as they are iterated: the shell adds
    them to the queue one by one, and those past the resident window stay in the segments
    (``rows``), so a large backlog restarts in about the memory of the window plus the index."""

    __slots__ = ("_reader", "_runs", "_slot")

    def __init__(self, reader: RecoveredReader, slot: int, runs: Runs) -> None:
        self._reader = reader
        self._slot = slot
        self._runs = runs

    def __len__(self) -> int:
        return len(self._runs)

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            return [self[n] for n in range(*index.indices(len(self)))]
        n = len(self) + index if index < 0 else index
        if not 0 <= n < len(self):
            raise IndexError(index)
        return self._reader.load(*self._runs.at(n), self._slot)

    def __iter__(self) -> Iterator[RecoveredMessage]:
        for n in range(len(self)):
            yield self[n]

    def rows(self, start: int) -> StoreTail:
        """The messages from the ``start``-th on as a ``StoreTail``: a spill backing pages them in
        from the segments where they lie; iterated, the rows to copy."""
        return self._reader.tail(self._runs, start, self._slot)
