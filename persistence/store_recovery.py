"""Recovery of the message store: reads every segment at start and rebuilds the live index.

Owner: ``MessageStore`` (``message_store.py``), which runs ``recover()`` once before any write; the
recovered messages are read lazily from the segments (``_Recovering``) so a large backlog restarts
in about the memory of the resident window plus the index.
"""

from __future__ import annotations

import gc
import logging
import mmap
from collections.abc import Iterator, Sequence

from .records import HEADER_SIZE, iter_records
from .segments import SegmentWriter, list_segments
from .store_index import FIRST_Q, Entry, Segment, StoreIndex, StoreNotOpenError
from .store_ops import (
    DECODE_ERRORS,
    Delay,
    QKey,
    Recovered,
    RecoveredMessage,
    Replay,
    decode_publish_tail,
    purged,
)

__all__ = ["StoreRecovery"]

log = logging.getLogger("headrace.persistence.message_store")


class StoreRecovery(StoreIndex):
    """``recover()`` and the lazy loading of recovered messages."""

    # -- recovery -------------------------------------------------------------------------------

    def recover(self) -> Recovered:
        """Read every segment in order and rebuild the index; call once, before any write.

        A torn or corrupt tail of the last segment is cut off (writes continue after the last good
        record); in older segments the bytes after the bad record are ignored."""
        if self._recovered:
            raise StoreNotOpenError("recover() runs once")
        self._recovered = True
        gc_was_enabled = gc.isenabled()
        gc.disable()  # a bulk load of acyclic objects: collections would only rescan the heap
        try:
            return self._recover()
        finally:
            if gc_was_enabled:
                gc.enable()

    def _recover(self) -> Recovered:
        replay = Replay({}, {}, {})
        segs = list_segments(self._dir)
        damaged = 0
        for index, (seq, path) in enumerate(segs):
            data = path.read_bytes()
            end = 0
            try:
                for rec in iter_records(data):
                    replay.apply(rec, seq)
                    end = rec.end
            except DECODE_ERRORS as exc:
                log.warning("undecodable record in %s at offset %d: %s", path, end, exc)
            is_last = index == len(segs) - 1
            if end < len(data):
                damaged += len(data) - end
                log.warning(
                    "%s: %d bytes after offset %d are torn or corrupt; %s",
                    path, len(data) - end, end, "truncating" if is_last else "ignoring them",
                )
            seg = Segment(seq, path, end if is_last else len(data))
            self._segments[seq] = seg
            self._disk_bytes += seg.size
        queues = self._index_recovered(replay)
        delayed = self._index_delayed(replay)
        if segs:
            last = self._segments[segs[-1][0]]
            self._writer = SegmentWriter(self._dir, last.seq, start=last.size)
            self._current = last
        else:
            self._open_segment(1)
        return Recovered(queues, delayed, replay.max_id + 1, damaged)

    def _index_recovered(self, replay: Replay) -> dict[QKey, Sequence[RecoveredMessage]]:
        refs: dict[QKey, list[_Ref]] = {}
        drop_pos = replay.drop_pos
        purges = replay.purges
        messages = replay.messages
        for mid in sorted(messages):
            msg = messages.pop(mid)  # freed as it is indexed: the peak is one copy, not two
            entry: Entry = [msg.seg, msg.size]
            for key, count in msg.queues.items():
                if drop_pos.get(key, 0) > msg.pos:
                    continue
                if purges:
                    queue_purges = purges.get(key)
                    if queue_purges and purged(queue_purges, msg.pos, mid):
                        continue
                qkey = self._qkey(key)
                entry += (qkey, count)
                bucket = refs.get(qkey)
                if bucket is None:
                    refs[qkey] = bucket = []
                bucket.append((mid, msg.seg, msg.offset, msg.size, msg.tail, msg.ts, count))
            if len(entry) > FIRST_Q:
                self._live[mid] = entry[:]  # an exact-size copy: ``+=`` over-allocated it
                self._count_live(self._segments[msg.seg], msg.size)
        return {key: _Recovering(self, bucket) for key, bucket in refs.items()}

    def _load(self, ref: _Ref) -> RecoveredMessage:
        """A recovered message's fields, read from its segment (mapped once, until the next write)."""
        mid, seq, offset, size, tail, ts, count = ref
        view = self._maps.get(seq)
        if view is None:
            with open(self._segments[seq].path, "rb") as f:
                view = self._maps[seq] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        exchange, routing_key, props, body = decode_publish_tail(
            view[offset + HEADER_SIZE : offset + size], tail)
        return RecoveredMessage(mid, exchange, routing_key, props, body, count > 0, count, ts)

    def _unmap(self) -> None:
        for view in self._maps.values():
            view.close()
        self._maps.clear()

    def _index_delayed(self, replay: Replay) -> list[Delay]:
        out: list[Delay] = []
        for mid in sorted(replay.delayed):
            delay, seg, size = replay.delayed[mid]
            self._delayed[mid] = [seg, size]
            self._count_live(self._segments[seg], size)
            out.append(delay)
        return out


# Where a recovered message's record is: id, segment, offset, record bytes, exchange offset in the
# payload, timestamp ms, delivery count.
_Ref = tuple[int, int, int, int, int, int, int]


class _Recovering(Sequence[RecoveredMessage]):
    """One queue's recovered messages, read from the segments as they are iterated: the shell adds
    them to the queue one by one, and those past the resident window go to spill, so a large
    backlog restarts in about the memory of the window plus the index."""

    __slots__ = ("_refs", "_store")

    def __init__(self, store: StoreRecovery, refs: list[_Ref]) -> None:
        self._store = store
        self._refs = refs

    def __len__(self) -> int:
        return len(self._refs)

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            return [self._store._load(ref) for ref in self._refs[index]]
        return self._store._load(self._refs[index])

    def __iter__(self) -> Iterator[RecoveredMessage]:
        load = self._store._load
        for ref in self._refs:
            yield load(ref)
