"""The mirror log: an append-only, offset-addressed record of every message published to a
mirrored exchange (Kafka-like), shared by the broker (writer) and the Spark bridge (reader).

Layout: ``<root>/mirror/<vhost>/<exchange>/`` (names percent-quoted) holds segment files
``<base offset, 20 digits>.log`` in the ``records`` framing, and beside each a sparse index
``.idx`` of fixed 24-byte entries (offset, file position, timestamp) written every
``index_interval_bytes``. Records carry their own offset, so readers need no index to be right;
the index only lets them seek. Retention drops whole old segments (never the active one).

Rule: one ``MirrorLog`` per exchange, used by one writer task; readers only read files and
tolerate a torn tail (a record being written).
"""

from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote, unquote

from .records import HEADER as _FRAME_HEADER
from .records import MAX_RECORD_SIZE, iter_records

__all__ = [
    "MirrorEntry",
    "MirrorLog",
    "MirrorRecord",
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

KIND_ENTRY = 1
_HEAD = struct.Struct(">QqHHI")  # offset, timestamp ms, routing key len, meta len, props len
_INDEX = struct.Struct(">QQq")  # offset, file position, timestamp ms
# the record framing's header (length, crc, kind) and _HEAD in one unpack, for bulk scans
_FRAMED_HEAD = struct.Struct(">IIBQqHHI")
SEGMENT_SUFFIX = ".log"
INDEX_SUFFIX = ".idx"


@dataclass(slots=True, eq=False)
class MirrorRecord:  # built once per mirrored publish: a plain slotted class costs a sixth of a frozen one
    timestamp_ms: int
    routing_key: str
    props_raw: bytes
    body: bytes
    headers: dict[str, str] | None = None
    content_type: str | None = None
    message_id: str | None = None
    source: str | None = None  # the exchange it was published to, kept by stream queues


@dataclass(frozen=True, slots=True)
class MirrorEntry:
    offset: int
    timestamp_ms: int
    vhost: str
    exchange: str
    routing_key: str
    headers: dict[str, str] | None
    content_type: str | None
    message_id: str | None
    props_raw: bytes
    body: bytes
    source: str | None = None


@dataclass(frozen=True, slots=True)
class Retention:
    max_age_ms: int | None = None
    max_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    path: Path
    base_offset: int
    size: int
    vhost: str = "/"
    exchange: str = ""


def _dir_name(name: str) -> str:
    """A reversible directory name: percent-quoted, and a leading dot quoted too, so that ``.``, ``..``
    or ``.hidden`` can never name the parent, the directory itself or a hidden entry."""
    if not name:
        raise ValueError("a mirrored vhost or exchange needs a non-empty name")
    quoted = quote(name, safe="")
    return "%2E" + quoted[1:] if quoted.startswith(".") else quoted


def mirror_dir(root: Path, vhost: str, exchange: str) -> Path:
    return Path(root) / "mirror" / _dir_name(vhost) / _dir_name(exchange)


def list_mirrors(root: Path) -> list[tuple[str, str]]:
    base = Path(root) / "mirror"
    if not base.is_dir():
        return []
    out = []
    for vdir in sorted(base.iterdir()):
        if vdir.is_dir():
            for edir in sorted(vdir.iterdir()):
                if edir.is_dir():
                    out.append((unquote(vdir.name), unquote(edir.name)))
    return out


def list_segments(root: Path, vhost: str, exchange: str) -> list[SegmentInfo]:
    directory = mirror_dir(root, vhost, exchange)
    if not directory.is_dir():
        return []
    segs = []
    for path in sorted(directory.glob("*" + SEGMENT_SUFFIX)):
        try:
            base = int(path.stem)
            size = path.stat().st_size
        except (ValueError, OSError):
            continue
        segs.append(SegmentInfo(path, base, size, vhost, exchange))
    return segs


_KIND_CRC = zlib.crc32(bytes((KIND_ENTRY,)))


def _meta(rec: MirrorRecord) -> bytes:
    if not (rec.headers or rec.content_type or rec.message_id or rec.source is not None):
        return b""
    fields: dict[str, Any] = {"h": rec.headers, "ct": rec.content_type, "id": rec.message_id}
    if rec.source is not None:
        fields["x"] = rec.source
    return json.dumps(fields, separators=(",", ":")).encode()


def _encode_into(out: list[bytes], offset: int, rec: MirrorRecord) -> int:
    """Appends one record's pieces to ``out`` (the ``records`` framing, CRC over the pieces) without
    joining them: the writer joins a whole batch once. Returns the record's size."""
    rk = rec.routing_key.encode()
    meta = _meta(rec)
    props, body = rec.props_raw, rec.body
    head = _HEAD.pack(offset, rec.timestamp_ms, len(rk), len(meta), len(props))
    crc32 = zlib.crc32
    crc = crc32(body, crc32(props, crc32(meta, crc32(rk, crc32(head, _KIND_CRC)))))
    length = len(head) + len(rk) + len(meta) + len(props) + len(body)
    out += (_FRAME_HEADER.pack(length, crc, KIND_ENTRY), head, rk, meta, props, body)
    return length + _FRAME_HEADER.size


def _decode(payload: bytes, vhost: str, exchange: str) -> MirrorEntry:
    offset, ts, rk_len, meta_len, props_len = _HEAD.unpack_from(payload, 0)
    pos = _HEAD.size
    rk = payload[pos:pos + rk_len].decode("utf-8", "replace")
    pos += rk_len
    meta: dict[str, Any] = json.loads(payload[pos:pos + meta_len]) if meta_len else {}
    pos += meta_len
    props = payload[pos:pos + props_len]
    body = payload[pos + props_len:]
    return MirrorEntry(offset, ts, vhost, exchange, rk, meta.get("h"), meta.get("ct"), meta.get("id"), props, body,
                       meta.get("x"))


def _peek(payload: bytes) -> tuple[int, int]:
    offset, ts = struct.unpack_from(">Qq", payload, 0)
    return offset, ts


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
            offset, self._stamp = _peek(rec.payload)
            next_offset = offset + 1
        if valid_end < len(data):
            log.warning("mirror %s/%s: truncating %d bytes of torn tail in %s", self.vhost, self.exchange,
                        len(data) - valid_end, last.path.name)
            with open(last.path, "r+b") as f:
                f.truncate(valid_end)
                os.fsync(f.fileno())
            self._truncate_index(last.path.with_suffix(INDEX_SUFFIX), valid_end)
        self.next_offset = next_offset
        self._file = open(last.path, "ab")  # noqa: SIM115 - owned until close()
        self._index = open(last.path.with_suffix(INDEX_SUFFIX), "ab")  # noqa: SIM115
        self._size = valid_end
        self._base = last.base_offset
        return next_offset

    @staticmethod
    def _truncate_index(path: Path, valid_end: int) -> None:
        if not path.exists():
            return
        data = path.read_bytes()
        keep = bytearray()
        for i in range(0, len(data) - len(data) % _INDEX.size, _INDEX.size):
            _, position, _ = _INDEX.unpack_from(data, i)
            if position < valid_end:
                keep += data[i:i + _INDEX.size]
        path.write_bytes(bytes(keep))

    def _open(self, base: int) -> None:
        if self._file is not None:
            self.flush(fsync=True)
            self._file.close()
            assert self._index is not None
            self._index.close()
        path = self.directory / f"{base:020d}{SEGMENT_SUFFIX}"
        self._file = open(path, "ab")  # noqa: SIM115
        self._index = open(path.with_suffix(INDEX_SUFFIX), "ab")  # noqa: SIM115
        self._size = path.stat().st_size
        self._since_index = self.index_interval_bytes  # index the first record
        self._base = base

    def append_many(self, records: Sequence[MirrorRecord]) -> tuple[int, int]:
        """Appends in one write per segment touched; the index gets an entry every
        ``index_interval_bytes``. Timestamps are clamped to never go back (see ``_stamp``)."""
        if self._file is None:
            self.recover()
        first = self.next_offset
        chunks: list[bytes] = []
        index: list[bytes] = []
        size, since, offset, stamp = self._size, self._since_index, self.next_offset, self._stamp
        for rec in records:
            if size >= self.segment_max_bytes:
                self._write(chunks, index, size, since, offset, stamp)
                chunks, index = [], []
                self._open(offset)
                size, since = self._size, self._since_index
            ts = rec.timestamp_ms
            if ts < stamp:
                ts = rec.timestamp_ms = stamp
            stamp = ts
            if since >= self.index_interval_bytes:
                index.append(_INDEX.pack(offset, size, ts))
                since = 0
            n = _encode_into(chunks, offset, rec)
            size += n
            since += n
            offset += 1
        self._write(chunks, index, size, since, offset, stamp)
        return first, self.next_offset - 1

    def _write(self, chunks: list[bytes], index: list[bytes], size: int, since: int, offset: int,
               stamp: int) -> None:
        assert self._file is not None and self._index is not None
        if chunks:
            self._file.write(b"".join(chunks))
        if index:
            self._index.write(b"".join(index))
        self._size, self._since_index, self.next_offset, self._stamp = size, since, offset, stamp

    def flush(self, fsync: bool = True) -> None:
        if self._file is None:
            return
        self._file.flush()
        assert self._index is not None
        self._index.flush()
        if fsync:
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
                    self._last_ts[seg.path] = _last_timestamp(seg.path)
                last_ts = self._last_ts[seg.path]
                too_old = last_ts is not None and now_ms - last_ts > self.retention.max_age_ms
            if not (too_big or too_old):
                break
            seg.path.unlink(missing_ok=True)
            seg.path.with_suffix(INDEX_SUFFIX).unlink(missing_ok=True)
            self._last_ts.pop(seg.path, None)
            total -= seg.size
            dropped += 1
        return dropped

    def close(self) -> None:
        if self._file is not None:
            self.flush(fsync=True)
            self._file.close()
            assert self._index is not None
            self._index.close()
            self._file = self._index = None


def _last_timestamp(path: Path) -> int | None:
    last = None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    for rec in iter_records(data):
        last = _peek(rec.payload)[1]
    return last


def _seek_position(segment: Path, from_offset: int | None, from_ts: int | None) -> int:
    """Largest indexed position whose offset/timestamp is still before the requested start."""
    idx = segment.with_suffix(INDEX_SUFFIX)
    try:
        data = idx.read_bytes()
    except OSError:
        return 0
    position = 0
    for i in range(0, len(data) - len(data) % _INDEX.size, _INDEX.size):
        offset, pos, ts = _INDEX.unpack_from(data, i)
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
    start = _seek_position(path, from_offset, from_ts)
    try:
        data = path.read_bytes()
    except OSError:
        return
    for rec in iter_records(data, start):
        offset, ts = _peek(rec.payload)
        if from_offset is not None and offset < from_offset:
            continue
        if to_offset is not None and offset > to_offset:
            return
        if from_ts is not None and ts < from_ts:
            continue
        if to_ts is not None and ts > to_ts:
            continue
        yield _decode(rec.payload, vhost, exchange)




def _index_entries(segment: Path) -> list[tuple[int, int, int]]:
    try:
        data = segment.with_suffix(INDEX_SUFFIX).read_bytes()
    except OSError:
        return []
    return list(_INDEX.iter_unpack(data[:len(data) - len(data) % _INDEX.size]))


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


def read_ranges(root: Path, vhost: str, exchange: str, *, target_bytes: int, from_offset: int | None = None,
                to_offset: int | None = None, from_ts: int | None = None,
                to_ts: int | None = None) -> list[ReadRange]:
    """The log cut into ranges of about ``target_bytes`` at sparse-index entries (record boundaries),
    without the ranges the bounds exclude. Offsets prune exactly; times prune on the index's
    timestamps, which never decrease along a log (``MirrorLog._stamp``). Readers still filter every
    record, so a range is a superset of what it must yield."""
    segs = list_segments(root, vhost, exchange)
    out: list[ReadRange] = []
    for i, seg in enumerate(segs):
        seg_end = segs[i + 1].base_offset if i + 1 < len(segs) else None
        if to_offset is not None and seg.base_offset > to_offset:
            break
        if from_offset is not None and seg_end is not None and seg_end <= from_offset:
            continue
        start, first = 0, seg.base_offset
        stop, end = None, seg_end
        entries = _index_entries(seg.path)
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
                out.append(ReadRange(str(seg.path), cut, position, cut_first, offset, position - cut))
                cut, cut_first = position, offset
        out.append(ReadRange(str(seg.path), cut, stop, cut_first, end, (seg.size if stop is None else stop) - cut))
    return out


@dataclass(slots=True)
class SpanScan:
    """Where the fields of consecutive entry records lie in a buffer, for building columns in bulk:
    ``bounds`` holds, per record, the positions of its frame, routing key, meta, properties and
    body (five int32), then one closing position; the i-th field of record r is
    ``data[bounds[5r + i]:bounds[5r + i + 1]]``."""
    offsets: array  # int64 per record
    timestamps: array  # int64 ms per record
    bounds: array  # int32, 5 per record + 1
    has_meta: bool
    end: int  # where the scan stopped: the next record, or the torn/corrupt tail
    torn: bool  # stopped at a torn or corrupt record (nothing after it is readable)


def scan_span(data: bytes | memoryview, start: int, stop: int, max_records: int) -> SpanScan:
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
    entries = _index_entries(last.path)
    position, nxt = (entries[-1][1], entries[-1][0]) if entries else (0, last.base_offset)
    try:
        with open(last.path, "rb") as f:
            f.seek(position)
            data = f.read()
    except OSError:
        return nxt
    for rec in iter_records(data):
        nxt = _peek(rec.payload)[0] + 1
    return nxt
