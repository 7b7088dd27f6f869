"""The mirror log's record framing: rows (or the broker's messages) in, the bytes of their records
and index entries out.

Owned by no state: ``MirrorLog.append_rows``/``append_messages`` (the one writer of a log) call
``frame_rows``/``frame_messages`` and keep the offsets, sizes and stamps they return.

Both are the C functions of ``_mirror_frame.c`` when that module was built, and the pure-Python
``frame_rows_py``/``frame_messages_py`` below otherwise, or when ``HEADRACE_PURE_PYTHON=1`` is set.
Both give the same bytes (``tests/unit/persistence/test_persistence_mirror_frame.py`` holds them to it). The
C one exists because this loop runs once per mirrored or streamed publish, and in Python it is
about 2 us a record on a 2-core VM (a tenth of a message's whole cost in the broker); in C, the
framing is a copy and a CRC. ``benchmarks/RESULTS.md`` gives what it bought.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from .mirror_records import ENTRY_HEAD, INDEX_ENTRY, KIND_ENTRY, MirrorRow
from .records import HEADER as _FRAME

__all__ = ["ACCELERATED", "Framed", "LogMessage", "frame_messages", "frame_messages_py", "frame_rows",
           "frame_rows_py"]

_FRAME_SIZE = _FRAME.size
_KIND_CRC = zlib.crc32(bytes((KIND_ENTRY,)))  # CRC state after the framing's kind byte

# (record bytes, index bytes, next row, next offset, segment size, bytes since the last index entry,
# last timestamp written)
Framed = tuple[bytes, bytes, int, int, int, int, int]


class LogMessage(Protocol):
    """What the framing reads of the broker's ``Message`` (named structurally: the Spark bridge reads
    this package and must not import the queues)."""

    timestamp: float  # seconds
    routing_key: str
    props_raw: bytes
    body: bytes
    headers: Mapping[str, Any] | None


M = TypeVar("M", bound=LogMessage)


def frame_rows_py(rows: Sequence[MirrorRow], start: int, offset: int, size: int, since: int, stamp: int,
                  seg_max: int, interval: int) -> Framed:
    """Frames ``rows[start:]`` as records ``offset``, ``offset + 1``, ... of a segment now ``size``
    bytes long, stopping before a row (never the first) once the segment has reached ``seg_max``:
    the caller rolls to a new segment and calls again from the row returned. Timestamps are clamped
    to never go below ``stamp``; an index entry is made before a record once ``since`` reaches
    ``interval``.

    One pass with everything bound to locals: each record is joined once and its CRC taken in one
    call, the routing keys encoded once per call."""
    chunks: list[bytes] = []
    index: list[bytes] = []
    add, join, crc32 = chunks.append, b"".join, zlib.crc32
    pack_head, pack_frame, pack_index = ENTRY_HEAD.pack, _FRAME.pack, INDEX_ENTRY.pack
    keys: dict[str, bytes] = {}
    for i in range(start, len(rows)):
        if i > start and size >= seg_max:
            break
        ts, routing_key, props, body, meta = rows[i]
        if ts < stamp:
            ts = stamp
        stamp = ts
        if since >= interval:
            index.append(pack_index(offset, size, ts))
            since = 0
        rk = keys.get(routing_key)
        if rk is None:
            rk = keys[routing_key] = routing_key.encode()
        entry = join((pack_head(offset, ts, len(rk), len(meta), len(props)), rk, meta, props, body))
        add(pack_frame(len(entry), crc32(entry, _KIND_CRC), KIND_ENTRY))
        add(entry)
        n = len(entry) + _FRAME_SIZE
        size += n
        since += n
        offset += 1
    else:
        i = len(rows)
    return join(chunks), join(index), i, offset, size, since, stamp


def frame_messages_py(messages: Sequence[M], slow_row: Callable[[M], MirrorRow], start: int, offset: int,
                      size: int, since: int, stamp: int, seg_max: int, interval: int) -> Framed:
    """``frame_rows_py`` of the messages' rows, each made by ``slow_row`` (the broker's
    ``outbox.mirror_row``, which decodes the properties this layer does not know); the C twin makes
    the common case itself and calls it only for a message with headers, a content type or a
    message id."""
    rows = [slow_row(m) for m in messages]
    return frame_rows_py(rows, start, offset, size, since, stamp, seg_max, interval)


FrameRows = Callable[[Sequence[MirrorRow], int, int, int, int, int, int, int], Framed]

if os.environ.get("HEADRACE_PURE_PYTHON") == "1":
    ACCELERATED = False
else:
    try:  # built by `pip install` when a C compiler is there
        from ._mirror_frame import frame_messages, frame_rows
        ACCELERATED = True
    except ImportError:
        ACCELERATED = False
if not ACCELERATED:
    frame_rows = frame_rows_py  # noqa: F811 - the pure-Python twin
    frame_messages = frame_messages_py  # noqa: F811
