"""The message store's segment files: which exist, the one being written, rolling, syncing, deleting.

Rule 1: ``StoreSegments`` owns the list of segments (log order), the current segment's
``SegmentWriter`` (``segments.py``, which owns the file and its write position), the disk figure,
whether the directory needs a sync, and the last write error (``failing``). ``MessageStore``
(``message_store.py``) holds the one instance: its op handlers append through it, compaction
(``store_compaction.py``) appends copies and deletes the head through it. Rule 2: records are
appended only at the end of the current segment, and segments are deleted only from the head
(why that is safe is in ``message_store``'s docstring).

What is live in a segment is not known here: the indexes count that (``store_index.py``).

``StoreIO`` counts what the segments did to their files (writes, bytes, fsyncs, records by kind)
for the management API's I/O and persistence statistics: plain ints the flusher's thread bumps and
the HTTP API reads as they stand (an int read needs no lock), no clock read on the write path.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import replica_tap
from .fsync import FsyncMode, fsync_dir
from .segments import WRITE_BUFFER_BYTES, SegmentWriter

__all__ = ["Segment", "StoreIO", "StoreSegments"]

log = logging.getLogger("headrace.persistence.message_store")


@dataclass(slots=True)
class Segment:
    seq: int
    path: Path
    size: int  # bytes in the file (plus buffered bytes for the current segment)


@dataclass(slots=True)
class StoreIO:
    """Since the store opened: write(2)/pwritev calls that wrote records and their bytes, fsyncs
    (a segment's or the directory's), records appended by kind (``store_ops.REC_*``)."""
    writes: int = 0
    write_bytes: int = 0
    syncs: int = 0
    records: dict[int, int] = field(default_factory=dict)


class StoreSegments:
    """The segments of one store directory, opened after recovery read them (or empty)."""

    __slots__ = ("failing", "io", "mode", "_current", "_dir", "_dir_dirty", "_disk_bytes", "_max",
                 "_segments", "_writer")

    def __init__(self, directory: Path, found: Sequence[Segment], *, max_bytes: int,
                 fsync: FsyncMode) -> None:
        """Take over ``found`` (recovery's segments, in log order, their sizes cut to the last good
        record) and append after the last one; start segment 1 in an empty directory."""
        self._dir = directory
        self._max = max_bytes
        self.mode = fsync
        self._segments: dict[int, Segment] = {seg.seq: seg for seg in found}  # insertion = log order
        self._disk_bytes = sum(seg.size for seg in found)
        self._dir_dirty = False  # a segment was created since the last directory sync
        # the last write error while records are still pending (disk full): None once written
        self.failing: OSError | None = None
        self.io = StoreIO()
        self._writer: SegmentWriter | None
        if found:
            last = found[-1]
            self._writer = SegmentWriter(directory, last.seq, start=last.size)
            self._current = last
        else:
            self._open(1, SegmentWriter(directory, 1))

    @property
    def is_open(self) -> bool:
        return self._writer is not None

    def append(self, kind: int, parts: Sequence[bytes]) -> tuple[int, int, int]:
        """(segment seq, offset, bytes) of the record appended (buffered; rolls when full)."""
        w = self._writer
        assert w is not None
        if w.size >= self._max and self.failing is None:
            w = self._roll()
        off = w.size
        n = w.append(kind, parts)
        records = self.io.records
        records[kind] = records.get(kind, 0) + 1
        if w.pending >= WRITE_BUFFER_BYTES and self.failing is None:
            try:
                self.flush()
            except OSError:
                pass  # kept pending; the group's own flush or sync reports it
        self._current.size += n
        self._disk_bytes += n
        return w.seq, off, n

    def flush(self) -> None:
        """Hand the pending records to the OS; raises (and keeps them pending) on a write error."""
        w = self._writer
        assert w is not None
        pending = w.pending
        try:
            w.flush()
        except OSError as exc:
            if self.failing is None:
                log.error("message store: cannot write %s (%s); %d bytes wait in memory for room",
                          w.path, exc.strerror or exc, w.pending)
            self.failing = exc
            raise
        if pending:
            self.io.writes += 1
            self.io.write_bytes += pending
        if self.failing is not None:
            log.warning("message store: pending records written, the disk takes writes again")
            self.failing = None

    def sync(self) -> None:
        """Flush and fsync the current segment (and the directory after a roll); raises the
        ``OSError`` of a failed write or fsync, the records staying pending."""
        w = self._writer
        if w is None:
            return
        self.flush()
        if self.mode is not FsyncMode.OFF:
            try:
                w.fsync()
                self.io.syncs += 1
                if self._dir_dirty:
                    fsync_dir(self._dir)
                    self.io.syncs += 1
            except OSError as exc:
                self.failing = exc
                raise
        self._dir_dirty = False

    def _roll(self) -> SegmentWriter:
        """The next segment; on a write error the current one grows on (its size limit is soft)
        and its records stay pending, so the disk being full never loses an appended record."""
        old = self._writer
        assert old is not None
        try:
            self.flush()
            if self.mode is not FsyncMode.OFF:
                old.fsync()  # the next sync() only covers the new segment
                self.io.syncs += 1
            new = SegmentWriter(self._dir, old.seq + 1)
        except OSError as exc:
            self.failing = exc
            return old
        old.close()
        return self._open(old.seq + 1, new)

    def _open(self, seq: int, w: SegmentWriter) -> SegmentWriter:
        seg = Segment(seq, w.path, w.size)
        self._segments[seq] = seg
        self._disk_bytes += seg.size
        self._writer, self._current = w, seg
        self._dir_dirty = True
        return w

    # -- reclaiming (compaction) ----------------------------------------------------------------

    def head(self) -> Segment | None:
        """The oldest segment, unless it is the one being written."""
        if len(self._segments) < 2:
            return None
        head = next(iter(self._segments.values()))
        return None if head is self._current else head

    def delete_head(self) -> int:
        """Delete the oldest segment (its file first); returns its bytes."""
        seg = next(iter(self._segments.values()))
        assert seg is not self._current
        try:
            os.unlink(seg.path)
        except FileNotFoundError:
            pass
        replica_tap.deleted(seg.path)
        if self.mode is not FsyncMode.OFF:
            fsync_dir(self._dir)  # deletions must land in order: head first
            self.io.syncs += 1
        del self._segments[seg.seq]
        self._disk_bytes -= seg.size
        return seg.size

    # -- figures and shutdown -------------------------------------------------------------------

    def position(self) -> tuple[int, int]:
        """(current segment, bytes of it in the file): where the log ends once flushed."""
        w = self._writer
        assert w is not None
        return w.seq, w.flushed

    def sealed(self) -> list[tuple[int, Path, int]]:
        """(seq, path, size) of every segment before the current one, in log order."""
        return [(seg.seq, seg.path, seg.size) for seg in self._segments.values()
                if seg is not self._current]

    def path_of(self, seq: int) -> Path:
        return self._segments[seq].path

    def disk_bytes(self) -> int:
        return self._disk_bytes

    def __len__(self) -> int:
        return len(self._segments)

    def close(self) -> None:
        """Sync and close the current segment; raises the write error if pending records could
        not be written (disk still full)."""
        w = self._writer
        if w is None:
            return
        try:
            self.sync()
        finally:
            self._writer = None
            w.close()
