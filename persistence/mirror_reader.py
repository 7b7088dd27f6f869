"""Readers of mirror log segments: entries from an offset or time, byte ranges for Spark, bulk scans.

Owned by no state: readers only read the files the writer (``mirror_log.MirrorLog``) owns, and
tolerate a torn tail (a record being written).
"""

from __future__ import annotations


import struct
import zlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from .mirror_records import (
    INDEX_SUFFIX,
    ENTRY_HEAD,
    INDEX_ENTRY,
    KIND_ENTRY,
    MirrorEntry,
    SegmentInfo,
    decode_entry,
    list_segments,
    peek_entry,
)
from .records import MAX_RECORD_SIZE, iter_records
from .tier_manifest import all_segments

__all__ = [
    "ReadRange", "SpanScan", "index_entries", "last_timestamp", "next_offset", "read_entries", "read_ranges",
    "scan_span", "seek_position",
]

# the record framing's header (length, crc, kind) and ENTRY_HEAD in one unpack, for bulk scans
_FRAMED_HEAD = struct.Struct(">IIBQqHHI")


def last_timestamp(path: Path) -> int | None:
    last = None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    for rec in iter_records(data):
        last = peek_entry(rec.payload)[1]
    return last


def seek_position(segment: Path, from_offset: int | None, from_ts: int | None) -> int:
    """Largest indexed position whose offset/timestamp is still before the requested start."""
    idx = segment.with_suffix(INDEX_SUFFIX)
    try:
        data = idx.read_bytes()
    except OSError:
        return 0
    position = 0
    for i in range(0, len(data) - len(data) % INDEX_ENTRY.size, INDEX_ENTRY.size):
        offset, pos, ts = INDEX_ENTRY.unpack_from(data, i)
        if (from_offset is not None and offset > from_offset) or (from_ts is not None and ts > from_ts):
            break
        if from_offset is None and from_ts is None:
            break
        position = pos
    return position


def read_entries(segment: Path | SegmentInfo, *, vhost: str | None = None, exchange: str | None = None,
                 from_offset: int | None = None, to_offset: int | None = None,
                 from_ts: int | None = None, to_ts: int | None = None) -> Iterator[MirrorEntry]:
    """Entries of one segment within the (inclusive) offset and time bounds; stops at a torn tail."""
    if isinstance(segment, SegmentInfo):
        path, vhost, exchange = segment.path, vhost or segment.vhost, exchange or segment.exchange
    else:
        path = Path(segment)
        exchange = exchange if exchange is not None else unquote(path.parent.name)
        vhost = vhost if vhost is not None else unquote(path.parent.parent.name)
    start = seek_position(path, from_offset, from_ts)
    try:
        data = path.read_bytes()
    except OSError:
        return
    for rec in iter_records(data, start):
        offset, ts = peek_entry(rec.payload)
        if from_offset is not None and offset < from_offset:
            continue
        if to_offset is not None and offset > to_offset:
            return
        if from_ts is not None and ts < from_ts:
            continue
        if to_ts is not None and ts > to_ts:
            continue
        yield decode_entry(rec.payload, vhost, exchange)




def index_entries(segment: Path) -> list[tuple[int, int, int]]:
    try:
        data = segment.with_suffix(INDEX_SUFFIX).read_bytes()
    except OSError:
        return []
    return list(INDEX_ENTRY.iter_unpack(data[:len(data) - len(data) % INDEX_ENTRY.size]))


@dataclass(frozen=True, slots=True)
class ReadRange:
    """A byte range of one segment holding whole records, with the offsets it may hold
    (``first_offset`` .. ``end_offset`` exclusive, None: up to the end of the log)."""
    path: str
    start: int
    stop: int | None  # None: to the end of the file (the torn tail excluded by the reader)
    first_offset: int
    end_offset: int | None
    size: int = 0  # bytes (for an open-ended range: as the segment was when listed)
    tier: str | None = None  # the segment's copy in the log's tier: read there when ``path`` is gone


def read_ranges(root: Path, vhost: str, exchange: str, *, target_bytes: int, from_offset: int | None = None,
                to_offset: int | None = None, from_ts: int | None = None,
                to_ts: int | None = None) -> list[ReadRange]:
    """The log cut into ranges of about ``target_bytes`` at sparse-index entries (record boundaries),
    without the ranges the bounds exclude. Offsets prune exactly; times prune on the index's
    timestamps, which never decrease along a log (``MirrorLog._stamp``). Readers still filter every
    record, so a range is a superset of what it must yield. Segments in the log's tier count as
    local ones (their ``.idx`` stays local); their ranges name the tier copy (``tier``)."""
    segs = all_segments(root, vhost, exchange)
    out: list[ReadRange] = []
    for i, seg in enumerate(segs):
        seg_end = segs[i + 1].base_offset if i + 1 < len(segs) else None
        if to_offset is not None and seg.base_offset > to_offset:
            break
        if from_offset is not None and seg_end is not None and seg_end <= from_offset:
            continue
        start, first = 0, seg.base_offset
        stop, end = None, seg_end
        entries = index_entries(seg.path)
        for offset, position, ts in entries:
            # everything before an entry that fails a start bound fails it too
            if from_offset is not None and offset <= from_offset or from_ts is not None and ts < from_ts:
                start, first = position, offset
            # everything from an entry beyond an end bound is beyond it too
            if to_offset is not None and offset > to_offset or to_ts is not None and ts > to_ts:
                stop, end = position, offset
                break
        if stop is not None and stop <= start:
            continue
        cut, cut_first = start, first
        for offset, position, _ in entries:
            if position <= cut or stop is not None and position >= stop:
                continue
            if position - cut >= target_bytes:
                out.append(ReadRange(str(seg.path), cut, position, cut_first, offset, position - cut, seg.tier))
                cut, cut_first = position, offset
        out.append(ReadRange(str(seg.path), cut, stop, cut_first, end, (seg.size if stop is None else stop) - cut,
                             seg.tier))
    return out


@dataclass(slots=True)
class SpanScan:
    """Where the fields of consecutive entry records lie in a buffer, for building columns in bulk:
    ``bounds`` holds, per record, the positions of its frame, routing key, meta, properties and
    body (five int32), then one closing position; the i-th field of record r is
    ``data[bounds[5r + i]:bounds[5r + i + 1]]``."""
    offsets: array[int]  # int64 per record
    timestamps: array[int]  # int64 ms per record
    bounds: array[int]  # int32, 5 per record + 1
    has_meta: bool
    end: int  # where the scan stopped: the next record, or the torn/corrupt tail
    torn: bool  # stopped at a torn or corrupt record (nothing after it is readable)


def scan_span(data: bytes | bytearray | memoryview, start: int, stop: int, max_records: int) -> SpanScan:
    """Walks up to ``max_records`` consecutive entry records of ``data[start:stop]`` (checking each
    CRC) and notes where their fields lie: one struct unpack and one CRC per record, no per-record
    objects. Stops early before a record of another kind (the caller skips it)."""
    view = memoryview(data)
    unpack = _FRAMED_HEAD.unpack_from
    crc32 = zlib.crc32
    head = _FRAMED_HEAD.size
    offsets, stamps, bounds = array("q"), array("q"), array("i")
    add_offset, add_stamp, add_bounds = offsets.append, stamps.append, bounds.extend
    has_meta = 0
    pos = start
    torn = False
    n = 0
    while n < max_records:
        if pos + head > stop:
            torn = pos < stop
            break
        length, crc, kind, offset, ts, rk_len, meta_len, props_len = unpack(view, pos)
        end = pos + 9 + length
        if end > stop or length > MAX_RECORD_SIZE or crc32(view[pos + 8:end]) != crc:
            torn = True
            break
        if kind != KIND_ENTRY:
            break
        rk = pos + head
        meta = rk + rk_len
        props = meta + meta_len
        add_bounds((pos, rk, meta, props, props + props_len))
        add_offset(offset)
        add_stamp(ts)
        has_meta |= meta_len
        pos = end
        n += 1
    bounds.append(pos)
    return SpanScan(offsets, stamps, bounds, bool(has_meta), pos, torn)


def next_offset(root: Path, vhost: str, exchange: str) -> int:
    """The offset the next appended record will get, reading only the last segment's tail
    (from its last index entry)."""
    segs = list_segments(root, vhost, exchange)
    if not segs:
        return 0
    last = segs[-1]
    entries = index_entries(last.path)
    position, nxt = (entries[-1][1], entries[-1][0]) if entries else (0, last.base_offset)
    try:
        with open(last.path, "rb") as f:
            f.seek(position)
            data = f.read()
    except OSError:
        return nxt
    for rec in iter_records(data):
        nxt = peek_entry(rec.payload)[0] + 1
    return nxt
