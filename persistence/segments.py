"""Segment files: a log split into numbered files that roll at a size limit (go-diskqueue, LavinMQ).

Files are named by a zero-padded sequence number, so a plain sort of the directory listing is log
order and recovery is one sequential read per file. ``SegmentWriter`` frames records in the shared
format of ``records.py`` but takes the payload as parts, so a message body goes from the caller's
``bytes`` straight into the write buffer without being joined into a payload first.

Rule 1: a writer owns its file and its write position; nobody else writes to that file.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from .fsync import fsync_file
from .records import HEADER, HEADER_SIZE

__all__ = [
    "SEGMENT_SUFFIX",
    "WRITE_BUFFER_BYTES",
    "SegmentWriter",
    "list_segments",
    "record_header",
    "segment_path",
]

SEGMENT_SUFFIX = ".seg"
# Python-side write buffer per open segment. 1 MiB turns a group of small records into a few large
# write() calls; a record larger than this bypasses the buffer (BufferedWriter does that itself).
WRITE_BUFFER_BYTES = 1 << 20
# Payloads up to this size are joined and written in one call (cheaper than one call per part);
# larger ones are written part by part so a big body is never copied into a joined payload.
_JOIN_MAX_BYTES = 16 << 10
_KIND_CRC = [zlib.crc32(bytes((k,))) for k in range(256)]  # CRC state after the kind byte
_SEQ_DIGITS = 20  # u64 fits in 20 decimal digits, so names sort lexically in log order


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
    """Appends framed records to one segment file; ``size`` counts buffered bytes too."""

    __slots__ = ("seq", "path", "size", "_file")

    def __init__(self, directory: Path, seq: int, *, start: int = 0) -> None:
        """Open segment ``seq`` for appending; ``start`` is the valid length to keep (a torn tail
        beyond it is cut off first)."""
        self.seq = seq
        self.path = segment_path(directory, seq)
        f: BinaryIO = open(self.path, "ab", buffering=WRITE_BUFFER_BYTES)  # noqa: SIM115 (owned)
        if f.tell() != start:
            f.truncate(start)
            f.seek(start)
        self._file = f
        self.size = start

    def append(self, kind: int, parts: Sequence[bytes]) -> int:
        """Buffer one record; returns its total size on disk."""
        length = 0
        for part in parts:
            length += len(part)
        write = self._file.write
        if length <= _JOIN_MAX_BYTES:
            payload = b"".join(parts)
            write(HEADER.pack(length, zlib.crc32(payload, _KIND_CRC[kind]), kind))
            write(payload)
        else:
            crc = _KIND_CRC[kind]
            for part in parts:
                crc = zlib.crc32(part, crc)
            write(HEADER.pack(length, crc, kind))
            for part in parts:
                write(part)
        n = HEADER_SIZE + length
        self.size += n
        return n

    def flush(self) -> None:
        self._file.flush()

    def fsync(self) -> None:
        fsync_file(self._file)

    def close(self) -> None:
        self._file.close()
