"""Recovery of the message store: reads every segment at start and rebuilds the live index.

Owner: ``MessageStore`` (``message_store.py``), which runs ``recover()`` once before any write; the
recovered messages are read lazily from the segments (``_Recovering``) so a large backlog restarts
in about the memory of the resident window plus the index.
"""

from __future__ import annotations

import gc
import logging
import mmap
import zlib
from array import array
from collections.abc import Iterator, Sequence

from headrace.queues.backing import RecoveredRow

from .records import HEADER, HEADER_SIZE, MAX_RECORD_SIZE, Record
from .segments import SegmentWriter, list_segments, zero_tail
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
    RecoveredQueue,
    PUB_HEAD,
    PUB_QUEUE,
    decode_delay,
    decode_publish_at,
    decode_publish_head,
    decode_purge,
    decode_queue,
    decode_ref,
    message_id_of,
)

__all__ = ["StoreRecovery"]

# A recovered entry's position: chunk number << _POS_BITS | index in the chunk.
_POS_BITS = 24
_POS_MASK = (1 << _POS_BITS) - 1

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
            end, top = self._replay_segment(data, seq, delayed)
            max_id = max(max_id, top)
            is_last = index == len(segs) - 1
            if end < len(data) and zero_tail(data, end):
                seg.size = end  # the zeros a syncing writer keeps ahead (segments.py): not damage
            elif end < len(data):
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

    def _replay_segment(self, data: bytes, seq: int, delayed: dict[int, Delay]) -> tuple[int, int]:
        """Apply a segment's good records; returns (end of the last good one, highest id seen).

        ``records.iter_records`` inlined, and a one-queue Publish (nearly every record of a
        backlog) indexed straight from the buffer: no record object and no payload copy."""
        view = memoryview(data)
        end = len(data)
        unpack_header = HEADER.unpack_from
        unpack_head = PUB_HEAD.unpack_from
        unpack_queue = PUB_QUEUE.unpack_from
        crc32 = zlib.crc32
        kind_crc = [crc32(bytes((kind,))) for kind in range(8)]
        head_size, queue_size = PUB_HEAD.size, PUB_QUEUE.size
        names: dict[bytes, tuple[int, QKey]] = {}  # queue name + vhost bytes -> (name length, key)
        slot_of, put = self._slot, self._put
        pos = top = 0
        try:
            while pos + HEADER_SIZE <= end:
                length, crc, kind = unpack_header(data, pos)
                start = pos + HEADER_SIZE
                stop = start + length
                if length > MAX_RECORD_SIZE or stop > end:
                    break
                if crc32(view[start:stop], kind_crc[kind] if kind < 8 else crc32(bytes((kind,)))) != crc:
                    break
                if kind == REC_PUBLISH:
                    mid, _, nq, vlen, _, _, _ = unpack_head(data, start)
                if kind != REC_PUBLISH or nq != 1:
                    mid = self._replay(Record(pos, kind, data[start:stop]), seq, delayed)
                else:
                    nlen, count = unpack_queue(data, start + head_size)
                    at = start + head_size + queue_size
                    if at + nlen + vlen > stop:
                        raise ValueError("field runs past the end of the record")
                    raw = data[at : at + nlen + vlen]
                    known = names.get(raw)
                    if known is None or known[0] != nlen:
                        known = names[raw] = (nlen, (raw[nlen:].decode(), raw[:nlen].decode()))
                    put(mid, seq, pos, HEADER_SIZE + length, slot_of(known[1]), count)
                if mid > top:
                    top = mid
                pos = stop
        except DECODE_ERRORS as exc:
            log.warning("undecodable record in segment %d at offset %d: %s", seq, pos, exc)
        return pos, top

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

    def _recovered_queues(self) -> dict[QKey, RecoveredQueue]:
        """Each queue's live entries in id (publish) order, as positions in the chunks (chunk
        number << ``_POS_BITS`` | index): 8 bytes a message while they load, and no lookup."""
        per_slot: dict[int, array[int]] = {}
        multi = self._multi
        for k, c in enumerate(self._chunks):
            q, ids = c.q, c.ids
            base = k << _POS_BITS
            first = q[0]
            if first != DEAD and first != MULTI and q.count(first) == len(q):
                bucket = per_slot.get(first)
                if bucket is None:
                    per_slot[first] = bucket = array("Q")
                bucket.extend(range(base, base + len(q)))  # a chunk of one queue, all live
                continue
            for i, slot in enumerate(q):
                if slot == DEAD:
                    continue
                for s in (multi[ids[i]] if slot == MULTI else (slot,)):
                    bucket = per_slot.get(s)
                    if bucket is None:
                        per_slot[s] = bucket = array("Q")
                    bucket.append(base | i)
        keys = self._keys
        return {keys[slot]: _Recovering(self, slot, at)  # type: ignore[misc]
                for slot, at in per_slot.items()}

    def _load(self, at: int, slot: int) -> RecoveredMessage:
        """A recovered message's fields, read from its mapped segment (valid until the next write:
        the chunks do not move before it)."""
        c = self._chunks[at >> _POS_BITS]
        i = at & _POS_MASK
        mid, seq, offset = c.ids[i], c.seg[i], c.off[i]
        count = self._multi[mid][slot] if c.q[i] == MULTI else c.cnt[i]
        view = self._maps.get(seq) or self._map(seq)
        ts, exchange, routing_key, props, body = decode_publish_at(
            view, offset + HEADER_SIZE, offset + c.size[i])
        return RecoveredMessage(mid, exchange, routing_key, props, body, count > 0, count, ts)

    def _rows(self, positions: array[int], slot: int) -> Iterator[RecoveredRow]:
        """``_load`` for recovery's spill: each message as (id, delivery count, timestamp,
        exchange + routing key + props + body as one copied span, three lengths), no decoding."""
        chunks, multi, maps = self._chunks, self._multi, self._maps
        unpack_head, head_size = PUB_HEAD.unpack_from, HEADER_SIZE + PUB_HEAD.size
        unpack_queue, queue_size = PUB_QUEUE.unpack_from, PUB_QUEUE.size
        for at in positions:
            c = chunks[at >> _POS_BITS]
            i = at & _POS_MASK
            mid, seq, offset = c.ids[i], c.seg[i], c.off[i]
            count = multi[mid][slot] if c.q[i] == MULTI else c.cnt[i]
            view = maps.get(seq) or self._map(seq)
            end = offset + c.size[i]
            _, ts, nq, vlen, elen, rlen, plen = unpack_head(view, offset + HEADER_SIZE)
            off = offset + head_size  # past the queue names and the vhost (decode_publish_at's walk)
            for _ in range(nq):
                off += queue_size + unpack_queue(view, off)[0]
            e_at = off + vlen
            if e_at + elen + rlen + plen > end:
                raise ValueError("field runs past the end of the record")
            yield mid, count, ts, view[e_at:end], elen, rlen, plen

    def _map(self, seq: int) -> mmap.mmap:
        # one segment mapped at a time: a mapping's touched pages count in the broker's RSS
        # (loads go in id order, so mostly segment by segment)
        self._unmap()
        with open(self._segments[seq].path, "rb") as f:
            view = self._maps[seq] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return view

    def _unmap(self) -> None:
        for view in self._maps.values():
            view.close()
        self._maps.clear()


class _Recovering(RecoveredQueue):
    """One queue's recovered messages, read from the segments as they are iterated: the shell adds
    them to the queue one by one, and those past the resident window go to spill, so a large
    backlog restarts in about the memory of the window plus the index."""

    __slots__ = ("_at", "_slot", "_store")

    def __init__(self, store: StoreRecovery, slot: int, at: array[int]) -> None:
        self._store = store
        self._slot = slot
        self._at = at

    def __len__(self) -> int:
        return len(self._at)

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            return [self._store._load(at, self._slot) for at in self._at[index]]
        return self._store._load(self._at[index], self._slot)

    def __iter__(self) -> Iterator[RecoveredMessage]:
        load = self._store._load
        slot = self._slot
        for at in self._at:
            yield load(at, slot)

    def rows(self, start: int) -> Iterator[RecoveredRow]:
        return self._store._rows(self._at[start:], self._slot)
