"""Reading recovered messages back from the segments, lazily, while the broker loads its queues.

Rule 1: ``RecoveredReader`` owns the memory maps of the segments it reads (one at a time); the
positions and fields of the entries it reads belong to the ``StoreIndex`` (``store_index.py``), which
it asks for them, and the segment paths to ``StoreSegments`` (``store_segments.py``). ``MessageStore``
(``message_store.py``) makes one after recovery and closes it before its first write: the index's
positions are only valid until then. Rule 2: nothing here changes the index or a file.

Why lazily: a large backlog restarts in about the memory of the queues' resident windows plus the
index; the rest goes from the mapped segment to the spill files without becoming messages.
"""

from __future__ import annotations

import mmap
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path

from headrace.queues.backing import RecoveredRow

from .records import HEADER_SIZE
from .store_index import StoreIndex
from .store_ops import PUB_HEAD, PUB_QUEUE, QKey, RecoveredMessage, RecoveredQueue, decode_publish_at

__all__ = ["RecoveredReader"]


class RecoveredReader:
    """The recovered queues of one store, read from its segments as they are iterated."""

    __slots__ = ("_index", "_maps", "_path_of", "loaded")

    def __init__(self, index: StoreIndex, path_of: Callable[[int], Path]) -> None:
        self._index = index
        self._path_of = path_of
        self._maps: dict[int, mmap.mmap] = {}  # segments mapped to load recovered messages
        self.loaded = 0  # messages read back (the store's I/O statistics)

    def queues(self) -> dict[QKey, RecoveredQueue]:
        """Each queue's live messages in publish order, read when iterated."""
        return {key: _Recovering(self, slot, at)
                for key, (slot, at) in self._index.recovered_positions().items()}

    def load(self, at: int, slot: int) -> RecoveredMessage:
        """A recovered message's fields, read from its mapped segment."""
        mid, seq, offset, size, count = self._index.entry(at, slot)
        self.loaded += 1
        view = self._maps.get(seq) or self._map(seq)
        ts, exchange, routing_key, props, body = decode_publish_at(
            view, offset + HEADER_SIZE, offset + size)
        return RecoveredMessage(mid, exchange, routing_key, props, body, count > 0, count, ts)

    def rows(self, positions: array[int], slot: int) -> Iterator[RecoveredRow]:
        """``load`` for recovery's spill: each message as (id, delivery count, timestamp,
        exchange + routing key + props + body as one copied span, three lengths), no decoding."""
        maps = self._maps
        unpack_head, head_size = PUB_HEAD.unpack_from, HEADER_SIZE + PUB_HEAD.size
        unpack_queue, queue_size = PUB_QUEUE.unpack_from, PUB_QUEUE.size
        for mid, seq, offset, size, count in self._index.entries(positions, slot):
            view = maps.get(seq) or self._map(seq)
            end = offset + size
            _, ts, nq, vlen, elen, rlen, plen = unpack_head(view, offset + HEADER_SIZE)
            off = offset + head_size  # past the queue names and the vhost (decode_publish_at's walk)
            for _ in range(nq):
                off += queue_size + unpack_queue(view, off)[0]
            e_at = off + vlen
            if e_at + elen + rlen + plen > end:
                raise ValueError("field runs past the end of the record")
            self.loaded += 1
            yield mid, count, ts, view[e_at:end], elen, rlen, plen

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


class _Recovering(RecoveredQueue):
    """One queue's recovered messages, read from the segments as they are iterated: the shell adds
    them to the queue one by one, and those past the resident window go to spill, so a large
    backlog restarts in about the memory of the window plus the index."""

    __slots__ = ("_at", "_reader", "_slot")

    def __init__(self, reader: RecoveredReader, slot: int, at: array[int]) -> None:
        self._reader = reader
        self._slot = slot
        self._at = at

    def __len__(self) -> int:
        return len(self._at)

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            return [self._reader.load(at, self._slot) for at in self._at[index]]
        return self._reader.load(self._at[index], self._slot)

    def __iter__(self) -> Iterator[RecoveredMessage]:
        load = self._reader.load
        slot = self._slot
        for at in self._at:
            yield load(at, slot)

    def rows(self, start: int) -> Iterator[RecoveredRow]:
        return self._reader.rows(self._at[start:], self._slot)
