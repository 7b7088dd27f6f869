"""The durable message store: an append-only log of publish/ack records in rolling segments.

Rule 1: one flusher owns a ``MessageStore``; every call comes from that owner (through a worker
thread), never concurrently, so there is no lock. The store owns its collaborators, each the owner
of its own state: ``StoreSegments`` (``store_segments.py``: the files, the write position, rolling,
syncing), ``StoreIndex`` (``store_index.py``: live messages and their queues) and ``DelayedIndex``
(``store_delayed.py``: delayed messages), which ``rebuild`` (``store_recovery.py``) makes at open;
``RecoveredReader`` (``store_reading.py``) reads recovered messages back until the first write, and
``maybe_compact`` (``store_compaction.py``) reclaims disk. Rule 2: the indexes always equal what
``recover()`` would rebuild from the files, so a record that would change nothing is not written.

Log semantics (applied in log order at recovery):

- ``Publish`` lists every durable queue the message went to. A later Publish with the same id
  *replaces* the earlier one: compaction writes such copies, carrying the live queues and their
  delivery counts at the moment of the copy.
- ``Ack`` removes one queue; a message with no queue left is dead. ``Deliver`` counts a delivery.
- ``DropQueue`` kills that queue's membership of every message whose latest Publish came before it.
- ``PurgeQueue`` does the same except for the ids it keeps (delivered and unacked at the purge).
- ``Delay`` holds a message for a delaying exchange until ``Undelay``.

Restarting fast: ``maybe_checkpoint`` writes the index as it stands at the end of the log
(``store_checkpoint.py``) once segments sealed since the last checkpoint hold at least
``CHECKPOINT_LOG_RATIO`` times its size (and ``checkpoint_min_bytes``), so a restart reads the
checkpoint and replays only the log after it; checkpoints then cost at most about half the log's
own writes, and the log left to replay stays within a fraction of the backlog. A clean stop
writes one at the end of the log when worth it (``_checkpoint_at_close``).

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
A head a recovered queue still pages its messages in from (``store_pages.StoreTail.floor``) is
not rewritten until the queue has read past it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .fsync import FsyncMode
from .store_checkpoint import write_checkpoint
from .store_compaction import LIVE_RATIO_LOW, MAX_REWRITES_PER_CALL, maybe_compact
from .store_delayed import DelayedIndex, live_delays
from .store_index import StoreIndex
from .store_ops import (
    REC_ACK,
    REC_DELAY,
    REC_DELIVER,
    REC_DROP_QUEUE,
    REC_PUBLISH,
    REC_PURGE,
    REC_UNDELAY,
    Ack,
    Delay,
    Deliver,
    DropQueue,
    Publish,
    PurgeQueue,
    Recovered,
    StoreOp,
    Undelay,
    delay_parts,
    publish_parts,
    purge_parts,
    queue_parts,
    ref_parts,
    undelay_parts,
)
from .store_pages import NOT_PINNED, StoreTail
from .store_reading import RecoveredReader
from .store_recovery import rebuild
from .store_segments import StoreSegments

__all__ = [
    "CHECKPOINT_LOG_RATIO",
    "DEFAULT_CHECKPOINT_MIN_BYTES",
    "DEFAULT_SEGMENT_MAX_BYTES",
    "LIVE_RATIO_LOW",
    "MAX_REWRITES_PER_CALL",
    "MessageStore",
    "StoreNotOpenError",
]

log = logging.getLogger("headrace.persistence.message_store")

# Soft size of one segment file: a segment rolls once it reaches this. Big enough that rolling (an
# fsync and a directory sync) is rare, small enough that rewriting one in maybe_compact is quick.
DEFAULT_SEGMENT_MAX_BYTES = 32 << 20
# Log written since the last checkpoint, as a multiple of that checkpoint's size, before the next
# one (module docstring). 2: a 256 B message is ~290 B of log and ~29 B of checkpoint, so the log
# replayed at restart stays under ~20% of the backlog while checkpoints add ~half the log's writes.
CHECKPOINT_LOG_RATIO = 2
DEFAULT_CHECKPOINT_MIN_BYTES = 64 << 20
# At a clean stop the checkpoint is written when the log since the last one is at least this
# share of the checkpoint's size (about CHECKPOINT_BYTES_PER_MESSAGE a live message): replaying
# a record at start costs several times writing its share of the checkpoint now.
CLOSE_CHECKPOINT_SHARE = 0.25
CHECKPOINT_BYTES_PER_MESSAGE = 30


class StoreNotOpenError(RuntimeError):
    """``write`` before ``recover`` (segments and index unknown) or after ``close``."""


class MessageStore:
    """The segments and the indexes of one store directory; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        *,
        segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES,
        fsync: FsyncMode = FsyncMode.BATCH,
        checkpoint_min_bytes: int = DEFAULT_CHECKPOINT_MIN_BYTES,
    ) -> None:
        self._dir = Path(directory)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._max = segment_max_bytes
        self._mode = fsync
        self._index = StoreIndex()  # empty until recover() replaces it with the rebuilt one
        self._delayed = DelayedIndex()
        self._segments: StoreSegments | None = None  # opened by recover()
        self._reader: RecoveredReader | None = None  # until the first write after recover()
        self._read_before = 0  # messages the closed recovery reader read back
        self._tails: list[StoreTail] = []  # their ``floor`` pins segments against compaction
        self._top = 0  # >= every message id in the log (a checkpoint records it)
        self._ckpt_min = checkpoint_min_bytes
        self._ckpt_seq = 0  # the segment the last checkpoint (or recovery) stood in
        self._ckpt_mark = 0  # bytes written when it was taken (``StoreIO.write_bytes``)
        self._ckpt_bytes = 0  # its size
        # ``StoreSegments.append`` once open: (segment seq, offset, bytes) of the record appended
        self._append: Callable[[int, Sequence[bytes]], tuple[int, int, int]] = _not_open
        self._handlers: dict[type, Callable[[Any], None]] = {
            Publish: self._on_publish,
            Ack: self._on_ack,
            Deliver: self._on_deliver,
            DropQueue: self._on_drop_queue,
            PurgeQueue: self._on_purge,
            Delay: self._on_delay,
            Undelay: self._on_undelay,
        }

    def recover(self) -> Recovered:
        """Read every segment in order and rebuild the indexes (``store_recovery.rebuild``); call
        once, before any write. The recovered messages are read from the segments as the queues
        iterate them, and the live delayed messages likewise, until the first write."""
        if self._segments is not None:
            raise StoreNotOpenError("recover() runs once")
        rebuilt = rebuild(self._dir)
        self._index, self._delayed = rebuilt.index, rebuilt.delayed
        segments = self._segments = StoreSegments(
            self._dir, rebuilt.segments, max_bytes=self._max, fsync=self._mode)
        self._append = segments.append
        self._top = rebuilt.next_message_id - 1
        self._ckpt_seq = segments.position()[0]
        self._reader = RecoveredReader(rebuilt.index, segments.path_of)
        self._tails = self._reader.tails  # recovered queues paging in from the segments (pins)
        return Recovered(self._reader.queues(), live_delays(rebuilt.delayed, list(rebuilt.segments)),
                         rebuilt.next_message_id, rebuilt.damaged)

    # -- writing --------------------------------------------------------------------------------

    def write(self, ops: Sequence[StoreOp]) -> None:
        """Append records for ``ops`` (buffered) and update the index; rolls segments as needed."""
        self._apply(ops)
        if self._mode is FsyncMode.ALWAYS:
            self.sync()

    def _apply(self, ops: Sequence[StoreOp]) -> None:
        segments = self._segments
        if segments is None or not segments.is_open:
            raise StoreNotOpenError("call recover() first; the store may also be closed")
        if self._reader is not None:
            self._reader.close()  # recovery's reads are over: the index's positions move now
            self._read_before += self._reader.loaded
            self._reader = None
        handlers = self._handlers
        for op in ops:
            handlers[type(op)](op)

    def sync(self) -> None:
        """Flush the buffer and fsync the current segment (and the directory after a roll).

        Raises the ``OSError`` of a failed write or fsync: the records stay pending (the file is
        cut back to its last whole record) and the next flush or sync writes them again."""
        if self._segments is not None:
            self._segments.sync()

    def write_and_sync(self, ops: Sequence[StoreOp]) -> None:
        """One group commit: every op in ``ops`` is on disk when this returns."""
        self._apply(ops)  # (``always`` mode: one sync for the group, not one more in write())
        self.sync()

    @property
    def fsync_mode(self) -> FsyncMode:
        return self._mode

    @property
    def failing(self) -> OSError | None:
        """The last write error while records are still pending (disk full): None once written."""
        return self._segments.failing if self._segments is not None else None

    def write_and_flush(self, ops: Sequence[StoreOp]) -> None:
        """Records no confirm waits for (acks, deliveries, drops): handed to the OS, which keeps
        them across a crash of the broker process; the next group commit's fsync covers them
        against power loss. ``always`` mode still fsyncs every write."""
        self.write(ops)
        segments = self._segments
        if segments is not None and segments.is_open:
            segments.flush()

    # -- op handlers: write the record only if it changes something, then update the index -----

    def _on_publish(self, op: Publish) -> None:
        queues = op.queues
        if not queues:
            return
        if op.message_id > self._top:
            self._top = op.message_id
        seq, off, n = self._append(REC_PUBLISH, publish_parts(
            op.message_id, op.timestamp_ms, op.vhost, queues, None, op.exchange,
            op.routing_key, op.props_raw, op.body))
        vhost = op.vhost
        index = self._index
        if len(queues) == 1:
            index.put(op.message_id, seq, off, n, index.slots.take((vhost, queues[0])), 0)
        else:
            # Recovery keeps each queue once, so the index does too.
            take = index.slots.take
            index.put_held(op.message_id, seq, off, n,
                           {take((vhost, name)): 0 for name in dict.fromkeys(queues)})

    def _on_ack(self, op: Ack) -> None:
        if self._index.remove(op.message_id, (op.vhost, op.queue)):
            self._append(REC_ACK, ref_parts(op.message_id, op.vhost, op.queue))

    def _on_deliver(self, op: Deliver) -> None:
        if self._index.deliver(op.message_id, (op.vhost, op.queue)):
            self._append(REC_DELIVER, ref_parts(op.message_id, op.vhost, op.queue))

    def _on_drop_queue(self, op: DropQueue) -> None:
        key = (op.vhost, op.queue)
        if not self._index.holds_queue(key):
            return
        self._append(REC_DROP_QUEUE, queue_parts(op.vhost, op.queue))
        self._index.kill_queue(key, frozenset())

    def _on_purge(self, op: PurgeQueue) -> None:
        key = (op.vhost, op.queue)
        if not self._index.purge_changes(key, op.keep):
            return  # nothing but kept messages: the record would change nothing
        self._append(REC_PURGE, purge_parts(op))
        self._index.kill_queue(key, frozenset(op.keep))

    def _on_delay(self, op: Delay) -> None:
        if op.message_id > self._top:
            self._top = op.message_id
        seq, _, n = self._append(REC_DELAY, delay_parts(op))
        self._delayed.delay(op.message_id, seq, n)

    def _on_undelay(self, op: Undelay) -> None:
        if self._delayed.undelay(op.message_id):
            self._append(REC_UNDELAY, undelay_parts(op.message_id))

    # -- reclaiming disk, figures and shutdown --------------------------------------------------

    def maybe_compact(self) -> int:
        """Delete dead head segments and rewrite a mostly-dead head forward
        (``store_compaction.py``); returns net bytes freed (deleted minus copied)."""
        if self._segments is None or not self._segments.is_open:
            return 0
        tails = self._tails = [t for t in self._tails if t.floor != NOT_PINNED]
        return maybe_compact(self._index, self._delayed, self._segments,
                             min((t.floor for t in tails), default=NOT_PINNED))

    def checkpoint_due(self) -> bool:
        """Whether ``maybe_checkpoint`` would write: a segment sealed since the last checkpoint,
        enough log written since (module docstring), no delayed message held (their records are
        not in the checkpoint) and no write failing. Cheap: the flusher asks on the event loop."""
        segments = self._segments
        if segments is None or not segments.is_open or segments.failing is not None \
                or len(self._delayed) or segments.position()[0] == self._ckpt_seq:
            return False
        written = segments.io.write_bytes - self._ckpt_mark
        return written >= max(self._ckpt_min, CHECKPOINT_LOG_RATIO * self._ckpt_bytes)

    def maybe_checkpoint(self) -> int:
        """Sync, then write the index checkpoint at the end of the log if ``checkpoint_due``;
        returns its bytes (0: not written). A failed write leaves the previous checkpoint (the
        new one is renamed into place only once whole) and is retried after as much log again."""
        return self._checkpoint() if self.checkpoint_due() else 0

    def _checkpoint(self) -> int:
        segments = self._segments
        assert segments is not None
        self.sync()  # the checkpoint's position must be in the file (and on disk with fsync)
        seq, offset = segments.position()
        self._ckpt_seq, self._ckpt_mark = seq, segments.io.write_bytes
        try:
            self._ckpt_bytes = write_checkpoint(self._dir, self._index, seq, offset, self._top,
                                                segments.sealed(),
                                                sync=self._mode is not FsyncMode.OFF)
        except OSError as exc:
            log.warning("message store: cannot write the index checkpoint (%s); restarts replay "
                        "the log from the previous one", exc.strerror or exc)
            return 0
        return self._ckpt_bytes

    def _checkpoint_at_close(self) -> None:
        """A clean stop writes the checkpoint at the end of the log when the log since the last
        one is worth more to a restart than the write costs now: replaying a byte of log costs
        several times writing a byte of checkpoint (``CLOSE_CHECKPOINT_SHARE``)."""
        segments = self._segments
        if segments is None or not segments.is_open or segments.failing is not None or len(self._delayed):
            return
        written = segments.io.write_bytes - self._ckpt_mark
        if written and written >= max(self._ckpt_min, CLOSE_CHECKPOINT_SHARE * CHECKPOINT_BYTES_PER_MESSAGE
                                      * self._index.live_messages()):
            self._checkpoint()

    def disk_bytes(self) -> int:
        return self._segments.disk_bytes() if self._segments is not None else 0

    def io_counts(self) -> dict[str, int]:
        """What the store did since it opened (``StoreIO``), by meaning: write calls and their bytes,
        fsyncs, message records written and read back, and the per-queue position records
        (acks, deliveries, drops, purges: what RabbitMQ's queue index journal holds)."""
        segments = self._segments
        if segments is None:
            return {}
        io, records = segments.io, segments.io.records
        reader = self._reader
        return {"writes": io.writes, "write_bytes": io.write_bytes, "syncs": io.syncs,
                "message_writes": records.get(REC_PUBLISH, 0),
                "message_reads": self._read_before + (reader.loaded if reader is not None else 0),
                "index_writes": sum(records.get(k, 0) for k in (REC_ACK, REC_DELIVER, REC_DROP_QUEUE, REC_PURGE))}

    def live_bytes(self) -> int:
        return self._index.live_bytes() + self._delayed.live_bytes()

    def segment_count(self) -> int:
        return len(self._segments) if self._segments is not None else 0

    def live_messages(self) -> int:
        """Messages some queue still holds, plus delayed messages not yet released."""
        return self._index.live_messages() + len(self._delayed)

    def close(self) -> None:
        """Sync, checkpoint the index if worth it (``_checkpoint_at_close``: the next start then
        replays no log) and close the current segment; the store is not used again. Raises the
        write error if pending records could not be written (disk still full)."""
        if self._reader is not None:
            self._reader.close()
        if self._segments is not None:
            self._checkpoint_at_close()
            self._segments.close()


def _not_open(kind: int, parts: Sequence[bytes]) -> tuple[int, int, int]:
    raise StoreNotOpenError("call recover() first")
