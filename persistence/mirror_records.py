"""The mirror log's record codec and segment layout: entries, directory naming, segment listing.

Owned by no state: pure functions and value types shared by the writer (``mirror_log.MirrorLog``),
the readers (``mirror_reader.py``, the Spark bridge) and stream queues' logs (``stream_log.py``).
"""

from __future__ import annotations


import json
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from .records import HEADER as _FRAME_HEADER

__all__ = [
    "ENTRY_HEAD", "INDEX_ENTRY", "INDEX_SUFFIX", "KIND_ENTRY", "SEGMENT_SUFFIX", "MirrorEntry", "MirrorRecord",
    "Retention", "SegmentInfo", "decode_entry", "encode_entry_into", "list_mirrors", "list_segments",
    "mirror_dir", "peek_entry",
]

KIND_ENTRY = 1
ENTRY_HEAD = struct.Struct(">QqHHI")  # offset, timestamp ms, routing key len, meta len, props len
INDEX_ENTRY = struct.Struct(">QQq")  # offset, file position, timestamp ms
# the record framing's header (length, crc, kind) and ENTRY_HEAD in one unpack, for bulk scans
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


def encode_entry_into(out: list[bytes], offset: int, rec: MirrorRecord) -> int:
    """Appends one record's pieces to ``out`` (the ``records`` framing, CRC over the pieces) without
    joining them: the writer joins a whole batch once. Returns the record's size."""
    rk = rec.routing_key.encode()
    meta = _meta(rec)
    props, body = rec.props_raw, rec.body
    head = ENTRY_HEAD.pack(offset, rec.timestamp_ms, len(rk), len(meta), len(props))
    crc32 = zlib.crc32
    crc = crc32(body, crc32(props, crc32(meta, crc32(rk, crc32(head, _KIND_CRC)))))
    length = len(head) + len(rk) + len(meta) + len(props) + len(body)
    out += (_FRAME_HEADER.pack(length, crc, KIND_ENTRY), head, rk, meta, props, body)
    return length + _FRAME_HEADER.size


def decode_entry(payload: bytes, vhost: str, exchange: str) -> MirrorEntry:
    offset, ts, rk_len, meta_len, props_len = ENTRY_HEAD.unpack_from(payload, 0)
    pos = ENTRY_HEAD.size
    rk = payload[pos:pos + rk_len].decode("utf-8", "replace")
    pos += rk_len
    meta: dict[str, Any] = json.loads(payload[pos:pos + meta_len]) if meta_len else {}
    pos += meta_len
    props = payload[pos:pos + props_len]
    body = payload[pos + props_len:]
    return MirrorEntry(offset, ts, vhost, exchange, rk, meta.get("h"), meta.get("ct"), meta.get("id"), props, body,
                       meta.get("x"))


def peek_entry(payload: bytes) -> tuple[int, int]:
    offset, ts = struct.unpack_from(">Qq", payload, 0)
    return offset, ts
