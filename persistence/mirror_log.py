"""The mirror log: an append-only, offset-addressed record of every message published to a
mirrored exchange (Kafka-like), shared by the broker (writer) and the Spark bridge (reader).

Layout: ``<root>/mirror/<vhost>/<exchange>/`` (names percent-quoted) holds segment files
``<base offset, 20 digits>.log`` in the ``records`` framing, and beside each a sparse index
``.idx`` of fixed 24-byte entries (offset, file position, timestamp) written every
``index_interval_bytes``. Records carry their own offset, so readers need no index to be right;
the index only lets them seek. Retention drops whole old segments (never the active one).

Rule: one ``MirrorLog`` per exchange, used by one writer task; readers only read files and
tolerate a torn tail (a record being written).

The files are unbuffered: a batch is built in memory and written with one ``write`` loop, so no
bytes wait in a Python buffer. A buffered file whose write failed on a full disk kept the bytes
it could not write, and its finalizer appended them later, after the records written since the
reopen: a torn record in the middle of the log that hid every record after it from the readers.

This module holds the writer and retention (``MirrorLog``); the record codec and segment layout are
in ``mirror_records.py`` and the readers in ``mirror_reader.py``, re-exported here.
"""

from __future__ import annotations


import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TypeVar, cast

from . import replica_tap
from .mirror_frame import LogMessage, frame_messages, frame_rows
from .records import iter_records
from .stream_filter import FILTER_SUFFIX, chunk_entry, truncate_chunks
from .mirror_reader import (
    ReadRange,
    SpanScan,
    last_timestamp,
    next_offset,
    read_entries,
    read_ranges,
    scan_span,
)
from .mirror_records import (
    INDEX_ENTRY,
    INDEX_SUFFIX,
    SEGMENT_SUFFIX,
    MirrorEntry,
    MirrorRecord,
    MirrorRow,
    Retention,
    SegmentInfo,
    list_mirrors,
    list_segments,
    mirror_dir,
    peek_entry,
    row_of,
)

__all__ = [
    "MirrorEntry",
    "MirrorLog",
    "MirrorRecord",
    "MirrorRow",
    "ReadRange",
    "Retention",
    "SegmentInfo",
    "SpanScan",
    "list_mirrors",
    "list_segments",
    "mirror_dir",
    "next_offset",
    "read_entries",
    "read_ranges",
    "scan_span",
]

log = logging.getLogger("headrace.mirror")

M = TypeVar("M", bound=LogMessage)


class MirrorLog:
    def __init__(self, root: Path, vhost: str, exchange: str, *, segment_max_bytes: int = 64 << 20,
                 retention: Retention = Retention(), index_interval_bytes: int = 4096) -> None:
        self.root = Path(root)
        self.vhost = vhost
        self.exchange = exchange
        self.directory = mirror_dir(root, vhost, exchange)
        self.segment_max_bytes = segment_max_bytes
        self.retention = retention
        self.index_interval_bytes = index_interval_bytes
        self.next_offset = 0
        self._file: BinaryIO | None = None
        self._index: BinaryIO | None = None
        self._side: BinaryIO | None = None  # the active segment's chunk filters (streams), opened at first use
        self._size = 0
        self._since_index = 0
        self._base = 0
        # newest timestamp written: records are stamped no earlier, so timestamps never decrease
        # along the log (a wall clock stepping back would otherwise break time seeks on the index)
        self._stamp = 0
        # last record time of closed segments (immutable), so periodic retention reads each once
        self._last_ts: dict[Path, int | None] = {}

    # ------------------------------------------------------------------ writer
    def recover(self) -> int:
        self.directory.mkdir(parents=True, exist_ok=True)
        segs = list_segments(self.root, self.vhost, self.exchange)
        if not segs:
            self._open(0)
            return 0
        last = segs[-1]
        data = last.path.read_bytes()
        valid_end = 0
        next_offset = last.base_offset
        for rec in iter_records(data):
            valid_end = rec.end
            offset, self._stamp = peek_entry(rec.payload)
            next_offset = offset + 1
        if valid_end < len(data):
            log.warning("mirror %s/%s: truncating %d bytes of torn tail in %s", self.vhost, self.exchange,
                        len(data) - valid_end, last.path.name)
            with open(last.path, "r+b") as f:
                f.truncate(valid_end)
                os.fsync(f.fileno())
            replica_tap.truncated(last.path, valid_end)
            self._truncate_index(last.path.with_suffix(INDEX_SUFFIX), valid_end)
            truncate_chunks(last.path, valid_end)
        self.next_offset = next_offset
        self._file = _append_only(last.path)
        self._index = _append_only(last.path.with_suffix(INDEX_SUFFIX))
        self._size = valid_end
        self._base = last.base_offset
        return next_offset

    @staticmethod
    def _truncate_index(path: Path, valid_end: int) -> None:
        if not path.exists():
            return
        data = path.read_bytes()
        keep = bytearray()
        for i in range(0, len(data) - len(data) % INDEX_ENTRY.size, INDEX_ENTRY.size):
            _, position, _ = INDEX_ENTRY.unpack_from(data, i)
            if position < valid_end:
                keep += data[i:i + INDEX_ENTRY.size]
        path.write_bytes(bytes(keep))
        replica_tap.replaced(path, bytes(keep))

    def _open(self, base: int) -> None:
        self.close()  # the segment before, if any: synced and closed
        path = self.directory / f"{base:020d}{SEGMENT_SUFFIX}"
        self._file = _append_only(path)
        self._index = _append_only(path.with_suffix(INDEX_SUFFIX))
        self._size = path.stat().st_size
        self._since_index = self.index_interval_bytes  # index the first record
        self._base = base

    def append_many(self, records: Sequence[MirrorRecord]) -> tuple[int, int]:
        """``append_rows`` of the records' rows."""
        return self.append_rows([row_of(rec) for rec in records])

    def append_rows(self, rows: Sequence[MirrorRow], filters: Sequence[bytes | None] | None = None) -> tuple[int, int]:
        """Appends in one write per segment touched; returns the first and last offsets given.
        The index gets an entry every ``index_interval_bytes``; timestamps are clamped to never
        go back (``stamp_ms`` is the last one written). ``mirror_frame.frame_rows`` builds the
        bytes: this runs for every mirrored or streamed publish, in the writer's thread but under
        the GIL, so its cost per record is the mirror's share of the broker's CPU.

        ``filters`` (a stream's records: each one's ``x-stream-filter-value`` or None) makes each
        write into a segment one chunk, whose Bloom filter entry goes to the segment's side file
        right after its records (``stream_filter``)."""
        return self._append(rows, None, filters)

    def append_messages(self, messages: Sequence[M], slow_row: Callable[[M], MirrorRow]) -> tuple[int, int]:
        """``append_rows`` of the broker's messages, framed straight from them (``frame_messages``);
        ``slow_row`` makes the row of one with headers, a content type or a message id."""
        return self._append(messages, slow_row)

    def _append(self, items: Sequence[Any], slow_row: Callable[[Any], MirrorRow] | None,
                filters: Sequence[bytes | None] | None = None) -> tuple[int, int]:
        if self._file is None:
            self.recover()
        first = self.next_offset
        done, count = 0, len(items)
        while done < count:
            if self._size >= self.segment_max_bytes:
                self._open(self.next_offset)
            begin, first_offset, start = done, self.next_offset, self._size
            state = (done, self.next_offset, self._size, self._since_index, self._stamp, self.segment_max_bytes,
                     self.index_interval_bytes)
            if slow_row is None:
                data, index, done, offset, size, since, stamp = frame_rows(items, *state)
            else:
                data, index, done, offset, size, since, stamp = frame_messages(items, slow_row, *state)
            self._write(data, index, size, since, offset, stamp)
            if filters is not None and done > begin:
                self._write_chunk(chunk_entry(first_offset, offset, start, size, filters[begin:done]))
        return first, self.next_offset - 1

    def _write_chunk(self, entry: bytes) -> None:
        """A chunk's filter entry to the segment's side file, after its records. On a failed write
        (a full disk) the side file goes: a torn entry would shift every later one, while chunks
        without an entry are only read whole (``stream_filter``), and the records stand."""
        try:
            if self._side is None:
                self._side = _append_only(self._side_path())
            _write_all(self._side, entry)
        except OSError as exc:
            side = self._side_path()
            log.warning("stream %s/%s: chunk filters of %s dropped (%s)", self.vhost, self.exchange, side.name, exc)
            self._close_side()
            side.unlink(missing_ok=True)
            replica_tap.deleted(side)

    def _side_path(self) -> Path:
        return self.directory / f"{self._base:020d}{FILTER_SUFFIX}"

    def _close_side(self) -> None:
        side, self._side = self._side, None
        if side is not None:
            try:
                side.close()
            except OSError:
                pass

    @property
    def stamp_ms(self) -> int:
        """The timestamp of the last record written (clamped: never lower than an earlier one)."""
        return self._stamp

    def _write(self, data: bytes, index: bytes, size: int, since: int, offset: int, stamp: int) -> None:
        assert self._file is not None and self._index is not None
        if data:
            _write_all(self._file, data)
        if index:
            _write_all(self._index, index)
        self._size, self._since_index, self.next_offset, self._stamp = size, since, offset, stamp

    def flush(self, fsync: bool = True) -> None:
        """Every write is already in the OS (the files are unbuffered); ``fsync`` makes it durable."""
        if self._file is not None and fsync:
            os.fsync(self._file.fileno())

    def enforce_retention(self, now_ms: int) -> int:
        """Drop whole old segments beyond the size or age bound; safe to call on an idle log (the
        broker does so periodically), and from a fresh ``MirrorLog`` that was never recovered."""
        segs = list_segments(self.root, self.vhost, self.exchange)
        dropped = 0
        total = sum(s.size for s in segs)
        for seg in segs[:-1]:  # never the active one
            too_big = self.retention.max_bytes is not None and total > self.retention.max_bytes
            too_old = False
            if self.retention.max_age_ms is not None:
                if seg.path not in self._last_ts:
                    self._last_ts[seg.path] = last_timestamp(seg.path)
                last_ts = self._last_ts[seg.path]
                too_old = last_ts is not None and now_ms - last_ts > self.retention.max_age_ms
            if not (too_big or too_old):
                break
            seg.path.unlink(missing_ok=True)
            seg.path.with_suffix(INDEX_SUFFIX).unlink(missing_ok=True)
            seg.path.with_suffix(FILTER_SUFFIX).unlink(missing_ok=True)
            for gone in (seg.path, seg.path.with_suffix(INDEX_SUFFIX), seg.path.with_suffix(FILTER_SUFFIX)):
                replica_tap.deleted(gone)
            self._last_ts.pop(seg.path, None)
            total -= seg.size
            dropped += 1
        return dropped

    def close(self) -> None:
        """Sync and close; the files are closed even when the sync fails (which is raised)."""
        self._close_side()
        if self._file is not None:
            file, index = self._file, self._index
            self._file = self._index = None
            try:
                os.fsync(file.fileno())
            finally:
                file.close()
                assert index is not None
                index.close()


def _append_only(path: Path) -> BinaryIO:
    """An unbuffered append-mode file (module docstring: nothing may wait in a Python buffer)."""
    return cast(BinaryIO, open(path, "ab", buffering=0))  # noqa: SIM115 - owned until close()


def _write_all(file: BinaryIO, data: bytes) -> None:
    """``data`` to an unbuffered file, through short writes; an OSError (a full disk) leaves a
    torn tail in the file, which the next ``recover`` cuts back to the last whole record."""
    offset = file.tell() if replica_tap.current() is not None else -1
    view = memoryview(data)
    while view:
        view = view[file.write(view):]
    if offset >= 0:
        replica_tap.wrote(file.name, offset, data)
