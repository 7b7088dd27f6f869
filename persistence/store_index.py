"""The message store's live index: which segment holds each live message, and for which queues.

Owner: ``MessageStore`` (``message_store.py``) through this base class; the index is only changed by
its op handlers, recovery (``store_recovery.py``) and compaction (``store_compaction.py``). The
bookkeeping here keeps the per-segment and per-queue live counts that compaction decides on.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import Any

from .fsync import FsyncMode
from .segments import SegmentWriter
from .store_ops import Kind, QKey

__all__ = [
    "FIRST_Q", "SEG", "SIZE", "Entry", "Segment", "StoreIndex", "StoreNotOpenError", "find_queue",
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

# Index entry of a live message, a flat list to keep per-message memory small (one list instead of
# an object plus a dict): [segment seq, record bytes, qkey0, count0, qkey1, count1, ...].
Entry = list[Any]
SEG, SIZE, FIRST_Q = 0, 1, 2


def find_queue(entry: Sequence[Any], key: QKey) -> int:
    """Position of ``key`` in an index entry, or -1 (ints in the entry never equal a tuple)."""
    try:
        return entry.index(key, FIRST_Q)
    except ValueError:
        return -1


class StoreIndex:
    """The index state and its bookkeeping; ``MessageStore.__init__`` sets every field."""

    _dir: Path
    _max: int
    _mode: FsyncMode
    _segments: dict[int, Segment]  # in log order (insertion order)
    _writer: SegmentWriter | None
    _current: Segment | None
    _live: dict[int, Entry]
    _delayed: dict[int, list[int]]  # id -> [segment seq, record bytes]
    _queue_live: dict[QKey, int]  # live messages per queue
    _qkeys: dict[QKey, QKey]  # one shared key object per queue, for the index
    _disk_bytes: int
    _live_bytes: int
    _dir_dirty: bool
    failing: OSError | None
    _recovered: bool
    _maps: dict[int, mmap.mmap]

    # The segment writing, provided by ``MessageStore``.
    def _append(self, kind: int, parts: Any) -> tuple[Segment, int]:
        raise NotImplementedError

    def _open_segment(self, seq: int, w: SegmentWriter | None = None) -> SegmentWriter:
        raise NotImplementedError

    def sync(self) -> None:
        raise NotImplementedError

    def _kill_queue(self, key: QKey, keep: frozenset[int]) -> None:
        """Remove ``key`` from every live message but ``keep``: ``_remove_queue`` inlined, since a
        purge or delete of a long queue walks the whole index."""
        live = self._live
        segments = self._segments
        hits = [mid for mid, entry in live.items() if key in entry and mid not in keep]
        single = FIRST_Q + 2
        freed = 0
        for mid in hits:
            entry = live[mid]
            if len(entry) == single:
                del live[mid]
                seg = segments[entry[SEG]]
                size = entry[SIZE]
                seg.live_count -= 1
                seg.live_bytes -= size
                freed += size
            else:
                i = entry.index(key, FIRST_Q)
                del entry[i : i + 2]
        self._live_bytes -= freed
        left = self._queue_live[key] - len(hits)
        if left:
            self._queue_live[key] = left
        else:
            del self._queue_live[key]
            del self._qkeys[key]

    # -- index bookkeeping ----------------------------------------------------------------------

    def _qkey(self, key: QKey) -> QKey:
        qkey = self._qkeys.setdefault(key, key)
        self._queue_live[qkey] = self._queue_live.get(qkey, 0) + 1
        return qkey

    def _release_qkey(self, key: QKey) -> None:
        left = self._queue_live[key] - 1
        if left:
            self._queue_live[key] = left
        else:
            del self._queue_live[key]
            del self._qkeys[key]

    def _remove_queue(self, mid: int, entry: Entry, i: int) -> None:
        self._release_qkey(entry[i])
        del entry[i : i + 2]
        if len(entry) == FIRST_Q:
            del self._live[mid]
            self._uncount_live(self._segments[entry[SEG]], entry[SIZE])

    def _forget(self, mid: int, entry: Entry) -> None:
        while len(entry) > FIRST_Q:
            self._remove_queue(mid, entry, len(entry) - 2)

    def _count_live(self, seg: Segment, size: int) -> None:
        seg.live_count += 1
        seg.live_bytes += size
        self._live_bytes += size

    def _uncount_live(self, seg: Segment, size: int) -> None:
        seg.live_count -= 1
        seg.live_bytes -= size
        self._live_bytes -= size

    # -- figures and shutdown -------------------------------------------------------------------

    def disk_bytes(self) -> int:
        return self._disk_bytes

    def live_bytes(self) -> int:
        return self._live_bytes

    def segment_count(self) -> int:
        return len(self._segments)

    def live_messages(self) -> int:
        """Messages some queue still holds, plus delayed messages not yet released."""
        return len(self._live) + len(self._delayed)
