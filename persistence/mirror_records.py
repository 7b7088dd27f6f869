"""The mirror log's record codec and segment layout: entries, directory naming, segment listing.

Owned by no state: pure functions and value types shared by the writer (``mirror_log.MirrorLog``),
the readers (``mirror_reader.py``, the Spark bridge) and stream queues' logs (``stream_log.py``).
"""

from __future__ import annotations

import functools
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

__all__ = [
    "ENTRY_HEAD", "INDEX_ENTRY", "INDEX_SUFFIX", "KIND_ENTRY", "SEGMENT_SUFFIX", "MirrorEntry", "MirrorRecord",
    "MirrorRow", "Retention", "SegmentInfo", "decode_entry", "encode_meta", "list_mirrors", "list_segments",
    "mirror_dir", "peek_entry", "row_of",
]

KIND_ENTRY = 1
ENTRY_HEAD = struct.Struct(">QqHHI")  # offset, timestamp ms, routing key len, meta len, props len
MAX_META = 0xFFFF  # the meta's length field is 16 bits
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


# What the log writes for one record: (timestamp ms, routing key, property bytes, body, meta bytes).
# The broker builds one per mirrored publish straight from the message (a tuple, no object to fill
# in), and the writer encodes a batch of them in one loop; ``row_of`` makes one of a MirrorRecord.
MirrorRow = tuple[int, str, bytes, bytes, bytes]


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
    tier: str | None = None  # the URI of its copy in the log's tier, once uploaded (tier_manifest.py)


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


@functools.lru_cache(maxsize=4096)
def _source_only(source: str) -> bytes:
    """The meta of a record with no headers, content type nor message id, per source exchange:
    every stream append has one (its source), and building the same JSON per message cost 2 us."""
    return json.dumps({"h": None, "ct": None, "id": None, "x": source}, separators=(",", ":")).encode()


def encode_meta(headers: dict[str, str] | None, content_type: str | None, message_id: str | None,
                source: str | None) -> bytes:
    """The record's JSON meta (Spark's headers, content_type, message_id and source columns);
    empty when there is none of them. Headers whose text would make it longer than ``MAX_META``
    are left out of it (they stay in the record's raw properties)."""
    if not (headers or content_type or message_id):
        return b"" if source is None else _source_only(source)
    fields: dict[str, Any] = {"h": headers, "ct": content_type, "id": message_id}
    if source is not None:
        fields["x"] = source
    meta = json.dumps(fields, separators=(",", ":")).encode()
    if len(meta) > MAX_META:
        # headers too big for the record's 16-bit meta length: the record keeps them in its raw
        # properties (what AMQP consumers and replays get), only Spark's text column goes empty
        fields["h"] = None
        meta = json.dumps(fields, separators=(",", ":")).encode()
    return meta


def row_of(rec: MirrorRecord) -> MirrorRow:
    return (rec.timestamp_ms, rec.routing_key, rec.props_raw, rec.body,
            encode_meta(rec.headers, rec.content_type, rec.message_id, rec.source))


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
