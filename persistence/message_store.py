"""The durable message store: an append-only log of publish/ack records in rolling segments.

Rule 1: one flusher owns a ``MessageStore``; every call comes from that owner (through a worker
thread), never concurrently, so there is no lock. Rule 2: the in-memory index always equals what
``recover()`` would rebuild from the files, so a record that would change nothing is not written.

Log semantics (applied in log order at recovery):

- ``Publish`` lists every durable queue the message went to. A later Publish with the same id
  *replaces* the earlier one: compaction writes such copies, carrying the live queues and their
  delivery counts at the moment of the copy.
- ``Ack`` removes one queue; a message with no queue left is dead. ``Deliver`` counts a delivery.
- ``DropQueue`` kills that queue's membership of every message whose latest Publish came before it.
- ``PurgeQueue`` does the same except for the ids it keeps (delivered and unacked at the purge).
- ``Delay`` holds a message for a delaying exchange until ``Undelay``.

Reclaiming disk (the choice, and why it cannot resurrect anything): segments are only ever deleted
from the head (the oldest). A kill record (Ack, DropQueue, PurgeQueue, Undelay) only affects Publish/Delay
records that come before it in the log, and everything before the head has already been deleted, so
the head's kill records only concern the head itself. Deleting a head with no live message therefore
changes no recovery outcome. A head that still holds a few live messages would pin every newer
segment, so ``maybe_compact`` rewrites the head's live records forward into the current segment
(a replacing Publish with the current queues and counts), syncs, and then deletes the head. It does
that when the head is mostly dead, or when the whole store is mostly dead, which bounds the disk at
about twice the live bytes plus one segment. Ids are kept, and recovery sorts by id, which is
publish order. A crash between the copy and the unlink leaves both records; the later one wins.
"""

from __future__ import annotations

import gc
import logging
import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .fsync import FsyncMode, fsync_dir
from .records import HEADER_SIZE, iter_file_records, iter_records
from .segments import WRITE_BUFFER_BYTES, SegmentWriter, list_segments
from .store_ops import (
    DECODE_ERRORS,
    Ack,
    Delay,
    Deliver,
    DropQueue,
    Kind,
    Publish,
    PurgeQueue,
    QKey,
    Recovered,
    RecoveredMessage,
    Replay,
    StoreOp,
    Undelay,
    decode_publish,
    decode_publish_tail,
    delay_parts,
    message_id_of,
    publish_parts,
    purge_parts,
    purged,
    queue_parts,
    ref_parts,
    undelay_parts,
)

__all__ = [
    "DEFAULT_SEGMENT_MAX_BYTES",
    "MessageStore",
    "StoreNotOpenError",
]

log = logging.getLogger(__name__)

# Soft size of one segment file: a segment rolls once it reaches this. Big enough that rolling (an
# fsync and a directory sync) is rare, small enough that rewriting one in maybe_compact is quick.
DEFAULT_SEGMENT_MAX_BYTES = 32 << 20
# A head segment whose live bytes fall under this share of its size is rewritten forward; so is
# any head while the whole store's live share is under it (bounds the disk at ~2x the live bytes).
LIVE_RATIO_LOW = 0.5
# Rewrites per maybe_compact() call: each copies at most one segment, which keeps a call (and the
# confirms waiting behind it in the flusher) short. Deleting dead segments is not limited.
MAX_REWRITES_PER_CALL = 1


class StoreNotOpenError(RuntimeError):
    """``write`` before ``recover`` (segments and index unknown) or after ``close``."""


@dataclass(slots=True)
class _Segment:
    seq: int
    path: Path
    size: int  # bytes in the file (plus buffered bytes for the current segment)
    live_count: int = 0  # live Publish/Delay records whose latest copy is here
    live_bytes: int = 0


# Plain ints for the hot path (an enum member lookup per record is measurable).
_PUBLISH, _ACK, _DELIVER = int(Kind.PUBLISH), int(Kind.ACK), int(Kind.DELIVER)
_DROP_QUEUE, _DELAY, _UNDELAY = int(Kind.DROP_QUEUE), int(Kind.DELAY), int(Kind.UNDELAY)
_PURGE = int(Kind.PURGE)

# Index entry of a live message, a flat list to keep per-message memory small (one list instead of
# an object plus a dict): [segment seq, record bytes, qkey0, count0, qkey1, count1, ...].
_Entry = list[Any]
_SEG, _SIZE, _FIRST_Q = 0, 1, 2


class MessageStore:
    """Segments, write position and the live index; see the module docstring for the log rules."""

    def __init__(
        self,
        directory: Path,
        *,
        segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES,
        fsync: FsyncMode = FsyncMode.BATCH,
    ) -> None:
        self._dir = Path(directory)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._max = segment_max_bytes
        self._mode = fsync
        self._segments: dict[int, _Segment] = {}  # in log order (insertion order)
        self._writer: SegmentWriter | None = None
        self._current: _Segment | None = None
        self._live: dict[int, _Entry] = {}
        self._delayed: dict[int, list[int]] = {}  # id -> [segment seq, record bytes]
        self._queue_live: dict[QKey, int] = {}  # live messages per queue
        self._qkeys: dict[QKey, QKey] = {}  # one shared key object per queue, for the index
        self._disk_bytes = 0
        self._live_bytes = 0
        self._dir_dirty = False  # a segment was created since the last directory sync
        # the last write error while records are still pending (disk full): None once written
        self.failing: OSError | None = None
        self._recovered = False
        self._maps: dict[int, mmap.mmap] = {}  # segments mapped to load recovered messages
        self._handlers: dict[type, Callable[[Any], None]] = {
            Publish: self._on_publish,
            Ack: self._on_ack,
            Deliver: self._on_deliver,
            DropQueue: self._on_drop_queue,
            PurgeQueue: self._on_purge,
            Delay: self._on_delay,
            Undelay: self._on_undelay,
        }

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
            seg = _Segment(seq, path, end if is_last else len(data))
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
            entry: _Entry = [msg.seg, msg.size]
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
            if len(entry) > _FIRST_Q:
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

    # -- writing --------------------------------------------------------------------------------

    def write(self, ops: Sequence[StoreOp]) -> None:
        """Append records for ``ops`` (buffered) and update the index; rolls segments as needed."""
        if self._writer is None:
            raise StoreNotOpenError("call recover() first; the store may also be closed")
        if self._maps:
            self._unmap()  # recovery's reads are over
        handlers = self._handlers
        for op in ops:
            handlers[type(op)](op)
        if self._mode is FsyncMode.ALWAYS:
            self.sync()

    def sync(self) -> None:
        """Flush the buffer and fsync the current segment (and the directory after a roll).

        Raises the ``OSError`` of a failed write or fsync: the records stay pending (the file is
        cut back to its last whole record) and the next flush or sync writes them again."""
        w = self._writer
        if w is None:
            return
        self._flush_writer()
        if self._mode is not FsyncMode.OFF:
            try:
                w.fsync()
                if self._dir_dirty:
                    fsync_dir(self._dir)
            except OSError as exc:
                self.failing = exc
                raise
        self._dir_dirty = False

    def _flush_writer(self) -> None:
        w = self._writer
        assert w is not None
        try:
            w.flush()
        except OSError as exc:
            if self.failing is None:
                log.error("message store: cannot write %s (%s); %d bytes wait in memory for room",
                          w.path, exc.strerror or exc, w.pending)
            self.failing = exc
            raise
        if self.failing is not None:
            log.warning("message store: pending records written, the disk takes writes again")
            self.failing = None

    def write_and_sync(self, ops: Sequence[StoreOp]) -> None:
        """One group commit: every op in ``ops`` is on disk when this returns."""
        mode = self._mode
        if mode is FsyncMode.ALWAYS:
            self._mode = FsyncMode.BATCH  # write() would sync once more
            try:
                self.write(ops)
            finally:
                self._mode = mode
        else:
            self.write(ops)
        self.sync()

    @property
    def fsync_mode(self) -> FsyncMode:
        return self._mode

    def write_and_flush(self, ops: Sequence[StoreOp]) -> None:
        """Records no confirm waits for (acks, deliveries, drops): handed to the OS, which keeps
        them across a crash of the broker process; the next group commit's fsync covers them
        against power loss. ``always`` mode still fsyncs every write."""
        self.write(ops)
        if self._writer is not None:
            self._flush_writer()

    def _append(self, kind: int, parts: Sequence[bytes]) -> tuple[_Segment, int]:
        w = self._writer
        assert w is not None and self._current is not None
        if w.size >= self._max and self.failing is None:
            w = self._roll()
        n = w.append(kind, parts)
        if w.pending >= WRITE_BUFFER_BYTES and self.failing is None:
            try:
                self._flush_writer()
            except OSError:
                pass  # kept pending; the group's own flush or sync reports it
        seg = self._current
        seg.size += n
        self._disk_bytes += n
        return seg, n

    def _roll(self) -> SegmentWriter:
        """The next segment; on a write error the current one grows on (its size limit is soft)
        and its records stay pending, so the disk being full never loses an appended record."""
        old = self._writer
        assert old is not None
        try:
            self._flush_writer()
            if self._mode is not FsyncMode.OFF:
                old.fsync()  # the next sync() only covers the new segment
            new = SegmentWriter(self._dir, old.seq + 1)
        except OSError as exc:
            self.failing = exc
            return old
        old.close()
        return self._open_segment(old.seq + 1, new)

    def _open_segment(self, seq: int, w: SegmentWriter | None = None) -> SegmentWriter:
        if w is None:
            w = SegmentWriter(self._dir, seq)
        seg = _Segment(seq, w.path, w.size)
        self._segments[seq] = seg
        self._disk_bytes += seg.size
        self._writer, self._current = w, seg
        self._dir_dirty = True
        return w

    # -- op handlers: write the record only if it changes something, then update the index -----

    def _on_publish(self, op: Publish) -> None:
        if not op.queues:
            return
        seg, n = self._append(_PUBLISH, publish_parts(
            op.message_id, op.timestamp_ms, op.vhost, op.queues, None, op.exchange,
            op.routing_key, op.props_raw, op.body))
        vhost = op.vhost
        if len(op.queues) == 1:
            # built whole: ``+=`` over-allocates the list (120 bytes instead of 88 per message)
            entry: _Entry = [seg.seq, n, self._qkey((vhost, op.queues[0])), 0]
        else:
            entry = [seg.seq, n]
            # Recovery keeps each queue once, so the index does too.
            for name in dict.fromkeys(op.queues):
                entry += (self._qkey((vhost, name)), 0)
        old = self._live.get(op.message_id)
        if old is not None:
            self._forget(op.message_id, old)
        self._live[op.message_id] = entry
        self._count_live(seg, n)

    def _on_ack(self, op: Ack) -> None:
        entry = self._live.get(op.message_id)
        if entry is None:
            return
        i = _find(entry, (op.vhost, op.queue))
        if i < 0:
            return
        self._append(_ACK, ref_parts(op.message_id, op.vhost, op.queue))
        self._remove_queue(op.message_id, entry, i)

    def _on_deliver(self, op: Deliver) -> None:
        entry = self._live.get(op.message_id)
        if entry is None:
            return
        i = _find(entry, (op.vhost, op.queue))
        if i < 0:
            return
        self._append(_DELIVER, ref_parts(op.message_id, op.vhost, op.queue))
        entry[i + 1] += 1

    def _on_drop_queue(self, op: DropQueue) -> None:
        key = (op.vhost, op.queue)
        if key not in self._queue_live:
            return
        self._append(_DROP_QUEUE, queue_parts(op.vhost, op.queue))
        self._kill_queue(key, frozenset())

    def _on_purge(self, op: PurgeQueue) -> None:
        key = (op.vhost, op.queue)
        live = self._queue_live.get(key, 0)
        if live == 0 or live <= len(op.keep) and all(
                _find(self._live.get(mid, ()), key) >= 0 for mid in op.keep):
            return  # nothing but kept messages: the record would change nothing
        self._append(_PURGE, purge_parts(op))
        self._kill_queue(key, frozenset(op.keep))

    def _kill_queue(self, key: QKey, keep: frozenset[int]) -> None:
        """Remove ``key`` from every live message but ``keep``: ``_remove_queue`` inlined, since a
        purge or delete of a long queue walks the whole index."""
        live = self._live
        segments = self._segments
        hits = [mid for mid, entry in live.items() if key in entry and mid not in keep]
        single = _FIRST_Q + 2
        freed = 0
        for mid in hits:
            entry = live[mid]
            if len(entry) == single:
                del live[mid]
                seg = segments[entry[_SEG]]
                size = entry[_SIZE]
                seg.live_count -= 1
                seg.live_bytes -= size
                freed += size
            else:
                i = entry.index(key, _FIRST_Q)
                del entry[i : i + 2]
        self._live_bytes -= freed
        left = self._queue_live[key] - len(hits)
        if left:
            self._queue_live[key] = left
        else:
            del self._queue_live[key]
            del self._qkeys[key]

    def _on_delay(self, op: Delay) -> None:
        seg, n = self._append(_DELAY, delay_parts(op))
        old = self._delayed.pop(op.message_id, None)
        if old is not None:
            self._uncount_live(self._segments[old[_SEG]], old[_SIZE])
        self._delayed[op.message_id] = [seg.seq, n]
        self._count_live(seg, n)

    def _on_undelay(self, op: Undelay) -> None:
        old = self._delayed.pop(op.message_id, None)
        if old is None:
            return
        self._append(_UNDELAY, undelay_parts(op.message_id))
        self._uncount_live(self._segments[old[_SEG]], old[_SIZE])

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

    def _remove_queue(self, mid: int, entry: _Entry, i: int) -> None:
        self._release_qkey(entry[i])
        del entry[i : i + 2]
        if len(entry) == _FIRST_Q:
            del self._live[mid]
            self._uncount_live(self._segments[entry[_SEG]], entry[_SIZE])

    def _forget(self, mid: int, entry: _Entry) -> None:
        while len(entry) > _FIRST_Q:
            self._remove_queue(mid, entry, len(entry) - 2)

    def _count_live(self, seg: _Segment, size: int) -> None:
        seg.live_count += 1
        seg.live_bytes += size
        self._live_bytes += size

    def _uncount_live(self, seg: _Segment, size: int) -> None:
        seg.live_count -= 1
        seg.live_bytes -= size
        self._live_bytes -= size

    # -- reclaiming disk ------------------------------------------------------------------------

    def maybe_compact(self) -> int:
        """Delete dead head segments and rewrite a mostly-dead head forward; returns net bytes
        freed (deleted minus copied)."""
        freed = 0
        rewrites = 0
        while len(self._segments) > 1:
            head = next(iter(self._segments.values()))
            if head is self._current:
                break
            if head.live_count == 0:
                freed += self._delete(head)
                continue
            if rewrites >= MAX_REWRITES_PER_CALL or self.failing is not None \
                    or not self._worth_rewriting(head):
                break  # (no copies while writes fail: deleting dead heads only frees room)
            rewrites += 1
            freed -= self._rewrite_forward(head)
            if head.live_count:
                log.error("segment %d still holds %d live records after a rewrite; keeping it",
                          head.seq, head.live_count)
                break
        return freed

    def _worth_rewriting(self, head: _Segment) -> bool:
        return (head.live_bytes < head.size * LIVE_RATIO_LOW
                or self._live_bytes < self._disk_bytes * LIVE_RATIO_LOW)

    def _rewrite_forward(self, head: _Segment) -> int:
        """Copy the head's live records to the current segment and make the copies durable."""
        copied = 0
        for rec in iter_file_records(head.path):
            if rec.kind == Kind.PUBLISH:
                entry = self._live.get(message_id_of(rec.payload))
                if entry is None or entry[_SEG] != head.seq:
                    continue
                pub = decode_publish(rec.payload)
                names = [entry[i][1] for i in range(_FIRST_Q, len(entry), 2)]
                counts = [entry[i + 1] for i in range(_FIRST_Q, len(entry), 2)]
                seg, n = self._append(_PUBLISH, publish_parts(
                    pub.mid, pub.ts, pub.vhost, names, counts, pub.exchange, pub.routing_key,
                    pub.props, pub.body))
            elif rec.kind == Kind.DELAY:
                entry = self._delayed.get(message_id_of(rec.payload))
                if entry is None or entry[_SEG] != head.seq:
                    continue
                seg, n = self._append(_DELAY, (rec.payload,))
            else:
                continue
            self._uncount_live(head, entry[_SIZE])
            entry[_SEG], entry[_SIZE] = seg.seq, n
            self._count_live(seg, n)
            copied += n
        self.sync()
        return copied

    def _delete(self, seg: _Segment) -> int:
        try:
            os.unlink(seg.path)
        except FileNotFoundError:
            pass
        if self._mode is not FsyncMode.OFF:
            fsync_dir(self._dir)  # deletions must land in order: head first
        del self._segments[seg.seq]
        self._disk_bytes -= seg.size
        return seg.size

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

    def close(self) -> None:
        """Sync and close the current segment; the store is not used again. Raises the write
        error if pending records could not be written (disk still full)."""
        self._unmap()
        w = self._writer
        if w is None:
            return
        try:
            self.sync()
        finally:
            self._writer = None
            w.close()


# Where a recovered message's record is: id, segment, offset, record bytes, exchange offset in the
# payload, timestamp ms, delivery count.
_Ref = tuple[int, int, int, int, int, int, int]


class _Recovering(Sequence[RecoveredMessage]):
    """One queue's recovered messages, read from the segments as they are iterated: the shell adds
    them to the queue one by one, and those past the resident window go to spill, so a large
    backlog restarts in about the memory of the window plus the index."""

    __slots__ = ("_refs", "_store")

    def __init__(self, store: MessageStore, refs: list[_Ref]) -> None:
        self._store = store
        self._refs = refs

    def __len__(self) -> int:
        return len(self._refs)

    def __getitem__(self, index):  # type: ignore[no-untyped-def,override]
        if isinstance(index, slice):
            return [self._store._load(ref) for ref in self._refs[index]]
        return self._store._load(self._refs[index])

    def __iter__(self) -> Iterator[RecoveredMessage]:
        load = self._store._load
        for ref in self._refs:
            yield load(ref)


def _find(entry: _Entry, key: QKey) -> int:
    """Position of ``key`` in an index entry, or -1 (ints in the entry never equal a tuple)."""
    try:
        return entry.index(key, _FIRST_Q)
    except ValueError:
        return -1
