"""Segment files: a log split into numbered files that roll at a size limit (go-diskqueue, LavinMQ).

Files are named by a zero-padded sequence number, so a plain sort of the directory listing is log
order and recovery is one sequential read per file. ``SegmentWriter`` frames records in the shared
format of ``records.py`` but takes the payload as parts, so a message body goes from the caller's
``bytes`` straight into the write buffer without being joined into a payload first.

Rule 1: a writer owns its file and its write position; nobody else writes to that file.

Why a synced segment ends in zeros: ``fsync`` after an append that grew the file must commit the
new size and block allocation through the filesystem's journal, a second disk write and, on ext4,
a wait for its journal thread, which a busy machine schedules late. So ``fsync`` keeps up to
``PREALLOC_BYTES`` of zeros, written and synced once, past the last record, and the group commits
that follow overwrite them and need only ``fdatasync``: the data, no journal (334 -> 248 us per
sync on an idle machine, 283 -> 180 us on a busy one: benchmarks/RESULTS.md). A zero header
fails its CRC, so every reader already stops there; recovery tells such a tail from damage
(``zero_tail``), and ``close`` cuts it off so sealed segments end at their last record.
"""

from __future__ import annotations

import errno
import os
import zlib
from collections.abc import Sequence
from pathlib import Path

from . import replica_tap
from .records import HEADER, HEADER_SIZE

__all__ = [
    "PREALLOC_BYTES",
    "SEGMENT_SUFFIX",
    "WRITE_BUFFER_BYTES",
    "SegmentWriter",
    "list_segments",
    "record_header",
    "segment_path",
    "zero_tail",
]

SEGMENT_SUFFIX = ".seg"
# Pending bytes past which the message store flushes within a group (a compaction pass copies a
# whole segment forward; this keeps what it holds in memory near 1 MiB).
WRITE_BUFFER_BYTES = 1 << 20
# Payloads up to this size are joined and written in one call (cheaper than one call per part);
# larger ones are written part by part so a big body is never copied into a joined payload.
_JOIN_MAX_BYTES = 16 << 10
_KIND_CRC = [zlib.crc32(bytes((k,))) for k in range(256)]  # CRC state after the kind byte
_SEQ_DIGITS = 20  # u64 fits in 20 decimal digits, so names sort lexically in log order
_IOV_MAX = 1024  # buffers per pwritev call (Linux's IOV_MAX)
# Zeros a syncing writer keeps ahead of its last record (see the module docstring): 1 MiB is a few
# thousand confirmed publishes between two zero-fills, and at most that much disk held ahead.
PREALLOC_BYTES = 1 << 20
# ... refilled when fewer than this are left, so one group never runs past the zeros.
PREALLOC_LOW_BYTES = 256 << 10
_ZEROS = memoryview(bytes(PREALLOC_BYTES))


def zero_tail(data: bytes, end: int) -> bool:
    """Whether everything in ``data`` after ``end`` is zeros: a synced writer's preallocated space
    (``SegmentWriter.fsync``), not a torn or corrupt record."""
    return data.count(0, end) == len(data) - end


def segment_path(directory: Path, seq: int) -> Path:
    return directory / f"{seq:0{_SEQ_DIGITS}d}{SEGMENT_SUFFIX}"


def list_segments(directory: Path) -> list[tuple[int, Path]]:
    """Segment files in ``directory`` in log order; other files are ignored."""
    found: list[tuple[int, Path]] = []
    for entry in os.scandir(directory):
        name = entry.name
        if not name.endswith(SEGMENT_SUFFIX) or not entry.is_file():
            continue
        stem = name[: -len(SEGMENT_SUFFIX)]
        if len(stem) == _SEQ_DIGITS and stem.isdigit():
            found.append((int(stem), Path(entry.path)))
    found.sort()
    return found


def record_header(kind: int, parts: Sequence[bytes]) -> bytes:
    """The 9-byte record header for a payload given as ``parts`` (same bytes as encode_record)."""
    crc = _KIND_CRC[kind]
    length = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
        length += len(part)
    return HEADER.pack(length, crc, kind)


class SegmentWriter:
    """Appends framed records to one segment file; ``size`` counts pending bytes too.

    Records collect in memory (small ones copied into a chunk, large bodies referenced, never
    joined) and go to the file in ``flush`` with one ``pwritev`` per 1024 chunks, at the offset
    just past the last whole record written. A write that fails (ENOSPC, EIO) is undone: the file
    is cut back to that offset, the records stay pending, and the next ``flush`` writes them again.
    So the file never ends in a torn record while the broker runs, whatever the disk does."""

    __slots__ = ("seq", "path", "size", "flushed", "_fd", "_chunks", "_open_chunk", "_pending",
                 "_cut_needed", "_reserved")

    def __init__(self, directory: Path, seq: int, *, start: int = 0) -> None:
        """Open segment ``seq`` for appending; ``start`` is the valid length to keep (a torn tail
        beyond it is cut off first)."""
        self.seq = seq
        self.path = segment_path(directory, seq)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != start:
                os.ftruncate(fd, start)
                replica_tap.truncated(self.path, start)
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        self.size = start
        self.flushed = start  # bytes in the file: always the end of a whole record
        self._chunks: list[bytes | bytearray] = []
        self._open_chunk: bytearray | None = None  # the chunk small records are copied into
        self._pending = 0
        self._cut_needed = False  # a failed write left bytes past ``flushed`` that a cut missed
        self._reserved = start  # the file's end: zeros from ``flushed`` up to here (``fsync``)

    @property
    def pending(self) -> int:
        """Bytes appended and not yet in the file."""
        return self._pending

    def append(self, kind: int, parts: Sequence[bytes]) -> int:
        """Buffer one record (no I/O); returns its total size on disk."""
        length = 0
        for part in parts:
            length += len(part)
        chunk = self._open_chunk
        if chunk is None:
            chunk = self._open_chunk = bytearray()
            self._chunks.append(chunk)
        if length <= _JOIN_MAX_BYTES:
            payload = b"".join(parts)
            chunk += HEADER.pack(length, zlib.crc32(payload, _KIND_CRC[kind]), kind)
            chunk += payload
        else:
            crc = _KIND_CRC[kind]
            for part in parts:
                crc = zlib.crc32(part, crc)
            chunk += HEADER.pack(length, crc, kind)
            self._chunks += parts  # referenced, not copied
            self._open_chunk = None
        n = HEADER_SIZE + length
        self.size += n
        self._pending += n
        return n

    def flush(self) -> None:
        """Write every pending record, or none of them (see the class docstring); raises the
        ``OSError`` of a failed write after cutting the file back."""
        if not self._pending:
            return
        fd, chunks, offset = self._fd, self._chunks, self.flushed
        written = chunks if replica_tap.current() is not None else None
        try:
            if len(chunks) == 1 and os.pwrite(fd, chunks[0], offset) == self._pending:
                offset += self._pending  # the common small group: one plain write
                chunks = []
            for i in range(0, len(chunks), _IOV_MAX):
                batch = chunks[i : i + _IOV_MAX]
                want = sum(len(c) for c in batch)
                done = os.pwritev(fd, batch, offset)
                offset += done
                if done < want:  # a short write: the rest one chunk at a time (raises when full)
                    _write_rest(fd, batch, done, offset)
                    offset += want - done
            if self._cut_needed:
                os.ftruncate(fd, offset)
                replica_tap.truncated(self.path, offset)
                self._cut_needed = False
                self._reserved = offset
        except OSError:
            self._cut_back()
            self._open_chunk = None  # a view of it may live on in the traceback: never resize it
            raise
        if written is not None:
            replica_tap.wrote(self.path, self.flushed, written)
        self.flushed = offset
        self._chunks = []
        self._open_chunk = None
        self._pending = 0

    def _cut_back(self) -> None:
        """Drop what a failed flush wrote: the file ends at the last whole record again."""
        try:
            os.ftruncate(self._fd, self.flushed)
            self._reserved = self.flushed
        except OSError:
            self._cut_needed = True  # the next write starts at ``flushed`` anyway; cut then

    def fsync(self) -> None:
        """Flush, keep zeros ahead of the last record (module docstring), make both durable."""
        self.flush()
        if self._reserved - self.flushed < PREALLOC_LOW_BYTES:
            self._preallocate()
        os.fdatasync(self._fd)  # also commits a new size or new blocks, when there are any

    def _preallocate(self) -> None:
        """Zeros up to ``PREALLOC_BYTES`` past the last record. On a full disk the zeros already
        there are kept (records written into them are on disk like any other) and only this
        attempt's are given back; the sync then commits what there is, as a plain append would."""
        start = max(self._reserved, self.flushed)
        want = self.flushed + PREALLOC_BYTES - start
        try:
            done = os.pwrite(self._fd, _ZEROS[:want], start)
        except OSError:
            done = 0
        if done < want:  # no room for all of it: give back this attempt's part
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                pass  # zeros past ``start`` are still zeros: readers stop there, close cuts them
            self._reserved = start
            return
        self._reserved = start + done

    def close(self) -> None:
        """Flush, cut the preallocated zeros off, close; the fd is closed even when the flush
        fails (its records are lost, as the caller was told by the raised error)."""
        try:
            self.flush()
            if self._reserved > self.flushed:
                os.ftruncate(self._fd, self.flushed)
                replica_tap.truncated(self.path, self.flushed)
        finally:
            os.close(self._fd)


def _write_rest(fd: int, chunks: Sequence[bytes | bytearray], done: int, offset: int) -> None:
    """Finish a short ``pwritev``: skip the ``done`` bytes already written, write the rest."""
    for chunk in chunks:
        if done >= len(chunk):
            done -= len(chunk)
            continue
        view = memoryview(chunk)[done:]
        done = 0
        while view:
            n = os.pwrite(fd, view, offset)
            if n == 0:
                raise OSError(errno.ENOSPC, "short write")
            offset += n
            view = view[n:]
