"""Length-prefixed, checksummed records: the one on-disk framing shared by the message store, the
spill files and the mirror log (go-diskqueue's format plus a CRC and a kind byte).

Layout of one record, big-endian::

    u32 length   bytes of ``payload`` only
    u32 crc32    over kind byte + payload
    u8  kind     what the payload means (owner-defined)
    ... payload

A reader stops at the first record that is short (torn write) or fails its CRC (corruption): that
offset is the valid end of the file, and everything before it is kept.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "HEADER",
    "HEADER_SIZE",
    "MAX_RECORD_SIZE",
    "Record",
    "ScanResult",
    "encode_record",
    "iter_file_records",
    "iter_records",
    "scan_bytes",
]

HEADER = struct.Struct(">IIB")
HEADER_SIZE = HEADER.size  # 9 bytes
# A record larger than this is treated as corruption: no message we accept comes near it
# (max message size is bounded far below), so a garbage length cannot make us allocate gigabytes.
MAX_RECORD_SIZE = 1 << 30


@dataclass(frozen=True, slots=True)
class Record:
    offset: int  # file position of the record's header
    kind: int
    payload: bytes

    @property
    def end(self) -> int:
        return self.offset + HEADER_SIZE + len(self.payload)


@dataclass(frozen=True, slots=True)
class ScanResult:
    records: list[Record]
    valid_end: int  # offset just past the last good record
    torn: bool  # bytes after valid_end that do not form a good record


def encode_record(kind: int, payload: bytes) -> bytes:
    kind_b = bytes((kind,))
    crc = zlib.crc32(payload, zlib.crc32(kind_b))
    return HEADER.pack(len(payload), crc, kind) + payload


def iter_records(data: bytes | memoryview, start: int = 0) -> Iterator[Record]:
    """Yield good records from ``start``; stop silently at the first torn or corrupt one."""
    view = memoryview(data)
    pos = start
    end = len(view)
    unpack = HEADER.unpack_from
    while pos + HEADER_SIZE <= end:
        length, crc, kind = unpack(view, pos)
        body_start = pos + HEADER_SIZE
        body_end = body_start + length
        if length > MAX_RECORD_SIZE or body_end > end:
            return
        payload = bytes(view[body_start:body_end])
        if zlib.crc32(payload, zlib.crc32(bytes((kind,)))) != crc:
            return
        yield Record(pos, kind, payload)
        pos = body_end


def iter_file_records(path: Path, chunk: int = 1 << 20) -> Iterator[Record]:
    """``iter_records`` over a whole file, read ``chunk`` bytes at a time: a compaction pass over a
    32 MiB segment then holds about a chunk in RAM, not the file. A record cut by a chunk boundary
    (or a torn/corrupt one, which never completes) is carried into the next read."""
    with open(path, "rb") as f:
        buf = b""
        base = 0  # file offset of buf[0]
        while data := f.read(chunk):
            buf = buf + data if buf else data
            done = 0
            for rec in iter_records(buf):
                yield Record(base + rec.offset, rec.kind, rec.payload)
                done = rec.end
            if done:
                base += done
                buf = buf[done:]


def scan_bytes(data: bytes | memoryview, start: int = 0) -> ScanResult:
    records = list(iter_records(data, start))
    valid_end = records[-1].end if records else start
    return ScanResult(records, valid_end, valid_end < len(data))
