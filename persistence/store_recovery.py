"""Recovery of the message store: reads every segment at start and rebuilds the live index.

Owner: ``MessageStore`` (``message_store.py``), which runs ``recover()`` once before any write; the
recovered messages are read lazily from the segments (``_Recovering``) so a large backlog restarts
in about the memory of the resident window plus the index.
"""

from __future__ import annotations

import gc
import logging
import mmap
from array import array
from collections.abc import Iterator, Sequence

from .records import HEADER_SIZE, Record, iter_records
from .segments import SegmentWriter, list_segments
from .store_index import (
    DEAD,
    MULTI,
    REC_ACK,
    REC_DELAY,
    REC_DELIVER,
    REC_DROP_QUEUE,
    REC_PUBLISH,
    REC_PURGE,
    REC_UNDELAY,
    Segment,
    StoreIndex,
    StoreNotOpenError,
)
from .store_ops import (
    DECODE_ERRORS,
    Delay,
    QKey,
    Recovered,
    RecoveredMessage,
    decode_delay,
    decode_publish,
    decode_publish_head,
    decode_purge,
    decode_queue,
    decode_ref,
    message_id_of,
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
        """Replays the log through the live index's own methods, in log order: each record does
        to the index what its op did when it was written (the ``message_store`` docstring), so
        the replay holds no more than the index itself, whatever the backlog."""
        segs = list_segments(self._dir)
        damaged = 0
        delayed: dict[int, Delay] = {}
        max_id = 0
        for index, (seq, path) in enumerate(segs):
            data = path.read_bytes()
            seg = self._segments[seq] = Segment(seq, path, len(data))
            end = 0
            try:
                for rec in iter_records(data):
                    mid = self._replay(rec, seq, delayed)
                    if mid > max_id:
                        max_id = mid
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
                if is_last:
                    seg.size = end
            self._disk_bytes += seg.size
            del data
        queues = self._recovered_queues()
        if segs:
            last = self._segments[segs[-1][0]]
            self._writer = SegmentWriter(self._dir, last.seq, start=last.size)
            self._current = last
        else:
            self._open_segment(1)
        return Recovered(queues, [delayed[mid] for mid in sorted(delayed)], max_id + 1, damaged)

    def _replay(self, rec: Record, seq: int, delayed: dict[int, Delay]) -> int:
        """Apply one record to the index; returns the message id it names (0 if none)."""
        kind = rec.kind
        p = rec.payload
        if kind == REC_PUBLISH:
            mid, _, vhost, names, _ = decode_publish_head(p)
            if names:
                held: dict[int, int] = {}
                for name, count in names:
                    key = (vhost, name)
                    slot = self._slots.get(key)
                    if slot is None or slot not in held:
                        slot = self._slot(key)
                    held[slot] = count  # a queue named twice is kept once, as the index does
                self._put_held(mid, seq, rec.offset, HEADER_SIZE + len(p), held)
            return mid
        if kind == REC_ACK or kind == REC_DELIVER:
            mid, vhost, queue = decode_ref(p)
            slot = self._slots.get((vhost, queue))
            loc = self._holds(mid, slot) if slot is not None else None
            if loc is not None and slot is not None:
                if kind == REC_ACK:
                    self._remove_queue(mid, loc[0], loc[1], slot)
                else:
                    self._count_delivery(mid, loc[0], loc[1], slot)
            return mid
        if kind == REC_DROP_QUEUE:
            self._kill_queue(decode_queue(p), frozenset())
        elif kind == REC_PURGE:
            self._kill_queue(*decode_purge(p))
        elif kind == REC_DELAY:
            delay = decode_delay(p)
            delayed[delay.message_id] = delay
            self._index_delay(delay.message_id, seq, HEADER_SIZE + len(p))
            return delay.message_id
        elif kind == REC_UNDELAY:
            mid = message_id_of(p)
            delayed.pop(mid, None)
            self._index_undelay(mid)
            return mid
        else:
            log.warning("skipping record of unknown kind %d in segment %d", kind, seq)
        return 0

    def _recovered_queues(self) -> dict[QKey, Sequence[RecoveredMessage]]:
        """Each queue's live ids in id (publish) order: 8 bytes a message while they load."""
        per_slot: dict[int, array[int]] = {}
        multi = self._multi
        for c in self._chunks:
            q, ids = c.q, c.ids
            first = q[0]
            if first != DEAD and first != MULTI and q.count(first) == len(q):
                bucket = per_slot.get(first)
                if bucket is None:
                    per_slot[first] = bucket = array("Q")
                bucket.extend(ids)  # the common case: a chunk of one queue, all live
                continue
            for mid, slot in zip(ids, q, strict=True):
                if slot == DEAD:
                    continue
                for s in (multi[mid] if slot == MULTI else (slot,)):
                    bucket = per_slot.get(s)
                    if bucket is None:
                        per_slot[s] = bucket = array("Q")
                    bucket.append(mid)
        keys = self._keys
        return {keys[slot]: _Recovering(self, slot, mids)  # type: ignore[misc]
                for slot, mids in per_slot.items()}

    def _load(self, mid: int, slot: int) -> RecoveredMessage:
        """A recovered message's fields, read from its segment (mapped once, until the next write)."""
        loc = self._find(mid)
        assert loc is not None, "recovered messages are valid until the store's next write"
        c, i = loc
        seq, offset = c.seg[i], c.off[i]
        count = self._multi[mid][slot] if c.q[i] == MULTI else c.cnt[i]
        view = self._maps.get(seq)
        if view is None:
            with open(self._segments[seq].path, "rb") as f:
                view = self._maps[seq] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        pub = decode_publish(view[offset + HEADER_SIZE : offset + c.size[i]])
        return RecoveredMessage(mid, pub.exchange, pub.routing_key, pub.props, pub.body, count > 0,
                                count, pub.ts)

    def _unmap(self) -> None:
        for view in self._maps.values():
            view.close()
        self._maps.clear()


class _Recovering(Sequence[RecoveredMessage]):
    """One queue's recovered messages, read from the segments as they are iterated: the shell adds
    them to the queue one by one, and those past the resident window go to spill, so a large
    backlog restarts in about the memory of the window plus the index."""

    __slots__ = ("_mids", "_slot", "_store")

    def __init__(self, store: StoreRecovery, slot: int, mids: array[int]) -> None:
        self._store = store
        self._slot = slot
        self._mids = mids

    def __len__(self) -> int:
        return len(self._mids)

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            return [self._store._load(mid, self._slot) for mid in self._mids[index]]
        return self._store._load(self._mids[index], self._slot)

    def __iter__(self) -> Iterator[RecoveredMessage]:
        load = self._store._load
        slot = self._slot
        for mid in self._mids:
            yield load(mid, slot)
