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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote, unquote

from .records import encode_record, iter_records

__all__ = [
    "MirrorEntry",
    "MirrorLog",
    "MirrorRecord",
    "Retention",
    "SegmentInfo",
    "list_mirrors",
    "list_segments",
    "mirror_dir",
    "read_entries",
]

log = logging.getLogger("headrace.mirror")

KIND_ENTRY = 1
_HEAD = struct.Struct(">QqHHI")  # offset, timestamp ms, routing key len, meta len, props len
_INDEX = struct.Struct(">QQq")  # offset, file position, timestamp ms
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


def _encode(offset: int, rec: MirrorRecord) -> bytes:
    rk = rec.routing_key.encode()
    meta = json.dumps({"h": rec.headers, "ct": rec.content_type, "id": rec.message_id},
                      separators=(",", ":")).encode() if (rec.headers or rec.content_type or rec.message_id) else b""
    payload = b"".join((_HEAD.pack(offset, rec.timestamp_ms, len(rk), len(meta), len(rec.props_raw)),
                        rk, meta, rec.props_raw, rec.body))
    return encode_record(KIND_ENTRY, payload)


def _decode(payload: bytes, vhost: str, exchange: str) -> MirrorEntry:
    offset, ts, rk_len, meta_len, props_len = _HEAD.unpack_from(payload, 0)
    pos = _HEAD.size
    rk = payload[pos:pos + rk_len].decode("utf-8", "replace")
    pos += rk_len
    meta: dict[str, Any] = json.loads(payload[pos:pos + meta_len]) if meta_len else {}
    pos += meta_len
    props = payload[pos:pos + props_len]
    body = payload[pos + props_len:]
    return MirrorEntry(offset, ts, vhost, exchange, rk, meta.get("h"), meta.get("ct"), meta.get("id"), props, body)


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
            next_offset = _peek(rec.payload)[0] + 1
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
        if self._file is None:
            self.recover()
        first = self.next_offset
        for rec in records:
            if self._size >= self.segment_max_bytes:
                self._open(self.next_offset)
            assert self._file is not None and self._index is not None
            data = _encode(self.next_offset, rec)
            if self._since_index >= self.index_interval_bytes:
                self._index.write(_INDEX.pack(self.next_offset, self._size, rec.timestamp_ms))
                self._since_index = 0
            self._file.write(data)
            self._size += len(data)
            self._since_index += len(data)
            self.next_offset += 1
        return first, self.next_offset - 1

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


