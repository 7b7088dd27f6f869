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

The module holds the writing side (segments, group commits, op handlers); the index and its
bookkeeping are in ``store_index.py``, recovery in ``store_recovery.py`` and reclaiming disk in
``store_compaction.py``: one ``MessageStore`` owns all of it.
"""

from __future__ import annotations

import logging
import mmap
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .fsync import FsyncMode, fsync_dir
from .segments import WRITE_BUFFER_BYTES, SegmentWriter
from .store_compaction import LIVE_RATIO_LOW, MAX_REWRITES_PER_CALL, StoreCompaction
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
    StoreNotOpenError,
)
from .store_ops import (
    Ack,
    Delay,
    Deliver,
    DropQueue,
    Publish,
    PurgeQueue,
    StoreOp,
    Undelay,
    delay_parts,
    publish_parts,
    purge_parts,
    queue_parts,
    ref_parts,
    undelay_parts,
)
from .store_recovery import StoreRecovery

__all__ = [
    "DEFAULT_SEGMENT_MAX_BYTES",
    "LIVE_RATIO_LOW",
    "MAX_REWRITES_PER_CALL",
    "MessageStore",
    "StoreNotOpenError",
]

log = logging.getLogger(__name__)

# Soft size of one segment file: a segment rolls once it reaches this. Big enough that rolling (an
# fsync and a directory sync) is rare, small enough that rewriting one in maybe_compact is quick.
DEFAULT_SEGMENT_MAX_BYTES = 32 << 20

class MessageStore(StoreRecovery, StoreCompaction):
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
        self._segments: dict[int, Segment] = {}  # in log order (insertion order)
        self._writer: SegmentWriter | None = None
        self._current: Segment | None = None
        self._init_index()  # the live index: store_index.py
        self._disk_bytes = 0
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

    def _append(self, kind: int, parts: Sequence[bytes]) -> tuple[Segment, int, int]:
        """(segment, offset, bytes) of the record appended."""
        w = self._writer
        assert w is not None and self._current is not None
        if w.size >= self._max and self.failing is None:
            w = self._roll()
        off = w.size
        n = w.append(kind, parts)
        if w.pending >= WRITE_BUFFER_BYTES and self.failing is None:
            try:
                self._flush_writer()
            except OSError:
                pass  # kept pending; the group's own flush or sync reports it
        seg = self._current
        seg.size += n
        self._disk_bytes += n
        return seg, off, n

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
        seg = Segment(seq, w.path, w.size)
        self._segments[seq] = seg
        self._disk_bytes += seg.size
        self._writer, self._current = w, seg
        self._dir_dirty = True
        return w

    # -- op handlers: write the record only if it changes something, then update the index -----

    def _on_publish(self, op: Publish) -> None:
        queues = op.queues
        if not queues:
            return
        seg, off, n = self._append(REC_PUBLISH, publish_parts(
            op.message_id, op.timestamp_ms, op.vhost, queues, None, op.exchange,
            op.routing_key, op.props_raw, op.body))
        vhost = op.vhost
        if len(queues) == 1:
            self._put(op.message_id, seg.seq, off, n, self._slot((vhost, queues[0])), 0)
        else:
            # Recovery keeps each queue once, so the index does too.
            self._put_held(op.message_id, seg.seq, off, n,
                           {self._slot((vhost, name)): 0 for name in dict.fromkeys(queues)})

    def _on_ack(self, op: Ack) -> None:
        # ``_holds`` and ``_remove_queue`` inlined for the one-queue message: acks are the other
        # half of every persistent message's work
        mid = op.message_id
        slot = self._slots.get((op.vhost, op.queue))
        if slot is None:
            return
        k = bisect_right(self._firsts, mid) - 1
        if k < 0:
            return
        c = self._chunks[k]
        ids = c.ids
        i = mid - ids[0]  # as in ``_find``
        if not (0 <= i < len(ids) and ids[i] == mid):
            i = bisect_left(ids, mid)
            if i == len(ids) or ids[i] != mid:
                return
        q = c.q[i]
        if q != slot and (q != MULTI or slot not in self._multi[mid]):
            return  # DEAD, or another queue's
        self._append(REC_ACK, ref_parts(mid, op.vhost, op.queue))
        if q == MULTI:
            self._remove_queue(mid, c, i, slot)
            return
        size = c.size[i]
        seg = self._segments[c.seg[i]]
        seg.live_count -= 1
        seg.live_bytes -= size
        self._live_bytes -= size
        c.q[i] = DEAD
        c.live -= 1
        self._entries -= 1
        if c.live * 4 < len(ids):
            self._tidy(c)
        left = self._slot_live[slot] - 1
        if left:
            self._slot_live[slot] = left
        else:
            self._release(slot)

    def _on_deliver(self, op: Deliver) -> None:
        slot = self._slots.get((op.vhost, op.queue))
        if slot is None:
            return
        loc = self._holds(op.message_id, slot)
        if loc is None:
            return
        self._append(REC_DELIVER, ref_parts(op.message_id, op.vhost, op.queue))
        self._count_delivery(op.message_id, loc[0], loc[1], slot)

    def _on_drop_queue(self, op: DropQueue) -> None:
        key = (op.vhost, op.queue)
        if key not in self._slots:
            return
        self._append(REC_DROP_QUEUE, queue_parts(op.vhost, op.queue))
        self._kill_queue(key, frozenset())

    def _on_purge(self, op: PurgeQueue) -> None:
        key = (op.vhost, op.queue)
        slot = self._slots.get(key)
        if slot is None or self._slot_live[slot] <= len(op.keep) and all(
                self._holds(mid, slot) is not None for mid in op.keep):
            return  # nothing but kept messages: the record would change nothing
        self._append(REC_PURGE, purge_parts(op))
        self._kill_queue(key, frozenset(op.keep))

    def _on_delay(self, op: Delay) -> None:
        seg, _, n = self._append(REC_DELAY, delay_parts(op))
        self._index_delay(op.message_id, seg.seq, n)

    def _on_undelay(self, op: Undelay) -> None:
        if op.message_id not in self._delayed:
            return
        self._append(REC_UNDELAY, undelay_parts(op.message_id))
        self._index_undelay(op.message_id)

    # -- figures and shutdown -------------------------------------------------------------------

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
