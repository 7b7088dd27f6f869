"""The message store's index checkpoint: the live index as it stood at one position of the log.

Rule 1: nothing here owns state past a call. ``write_checkpoint`` is handed the ``StoreIndex`` and
the position the index stands at (``MessageStore.maybe_checkpoint``, the flusher's worker thread);
``load_checkpoint`` returns a new index and the position for ``rebuild`` (``store_recovery.py``),
which replays only the log after that position. Rule 2: a checkpoint is written only when the
index equals a replay of every record before its position (after a sync, with no delayed message
held), so loading it and replaying the rest rebuilds what a full replay would.

Why: a 10M backlog's restart used to replay ~3 GB of segments record by record in Python; the
checkpoint is ~29 B a message of typed arrays read back with ``array.fromfile``.

Why it can never resurrect or lose a message:

- it is written to ``index.ckpt.tmp``, fsynced, renamed over ``index.ckpt`` and the directory
  synced: a kill at any moment leaves the previous checkpoint or the new one whole (a leftover
  temporary is deleted at open);
- every byte is under a CRC checked before use, and the checkpoint names each segment it covers
  with its size and a CRC of its last bytes: a missing, torn, foreign or stale checkpoint (a
  segment cut, rewritten, or grown where it was sealed) is ignored and the log is replayed whole;
- records after the position (acks included) are replayed on top, the same way as in a full
  replay; a covered segment deleted since (compaction removes heads only once nothing in them is
  live) must hold nothing live after that replay, or the checkpoint is ignored.

In a cluster the checkpoint is the node's own (``replica_tap.NODE_OWN``): never shipped, since a
~300 MB file replaced whole would have to be held in memory and sent as one operation; a follower
that takes over replays its log in full, then writes its own checkpoints.

Format (native byte order, which the header records): header, the covered segments, the queue
slots, the chunks' first ids and lengths, each field's arrays chunk by chunk, the multi-queue
table, the live figures per segment, then a CRC of all of it and the end mark.
"""

from __future__ import annotations

import logging
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .fsync import fsync_dir
from .index_chunks import FIELDS, Chunk
from .segments import segment_path
from .store_index import SegmentLive, StoreIndex
from .store_ops import QKey
from .store_slots import QueueSlots

__all__ = ["CHECKPOINT_FILE", "Checkpoint", "covered_segment", "load_checkpoint", "missing_segments",
           "write_checkpoint"]

log = logging.getLogger("headrace.persistence.message_store")

CHECKPOINT_FILE = "index.ckpt"
_TMP_SUFFIX = ".tmp"
_MAGIC, _END = b"HRIDXCK1", b"HRIDXEND"
# magic, byte order, position (segment, offset), top id, entries, live bytes, counts of: slot
# keys, chunks, multi entries, per-segment figures, covered segments
_HEAD = struct.Struct("<8sBQQQQQQQQQQ")
_SEGMENT = struct.Struct("<QQI")  # seq, size (the position's offset for the last), CRC of its tail
_SLOT = struct.Struct("<QiI")  # live messages, vhost length (-1: a free slot), name length
_MULTI = struct.Struct("<QI")  # id, queues
_HELD = struct.Struct("<II")  # slot, delivery count
_SEG_LIVE = struct.Struct("<QQQ")
_TRAILER = struct.Struct("<I8s")
_BIG = sys.byteorder == "big"
# the bytes before a covered segment's end whose CRC the checkpoint keeps
TAIL_WINDOW = 4096


@dataclass(slots=True)
class Checkpoint:
    """A loaded checkpoint: the index at (``seq``, ``offset``) and what it covers."""

    index: StoreIndex
    seq: int  # the segment the position is in
    offset: int  # records from here on are not in the index
    top_id: int  # >= every message id in the records before the position
    covered: list[tuple[int, int, int]]  # (seq, size, tail CRC) of each segment up to ``seq``


def covered_segment(path: Path, size: int) -> int:
    """The CRC of the ``TAIL_WINDOW`` bytes before ``size`` in ``path``: what says that a segment
    is still the one a checkpoint covered."""
    start = max(0, size - TAIL_WINDOW)
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(size - start)
    if len(data) != size - start:
        raise ValueError(f"{path} is shorter than {size} bytes")
    return zlib.crc32(data)


class _CrcWriter:
    """Writes through to a file and keeps the CRC of everything written."""

    __slots__ = ("crc", "f")

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.crc = 0

    def write(self, data: bytes | bytearray | array[int]) -> None:
        self.crc = zlib.crc32(data, self.crc)
        self.f.write(data)


def write_checkpoint(directory: Path, index: StoreIndex, seq: int, offset: int, top_id: int,
                     segments: Iterable[tuple[int, Path, int]], *, sync: bool) -> int:
    """Write the checkpoint of ``index`` standing at (``seq``, ``offset``), atomically;
    ``segments``: (seq, path, size) of every segment before ``seq``. Returns its bytes."""
    final = directory / CHECKPOINT_FILE
    tmp = final.with_name(CHECKPOINT_FILE + _TMP_SUFFIX)
    covered = [(s, size, covered_segment(path, size)) for s, path, size in segments]
    covered.append((seq, offset, covered_segment(segment_path(directory, seq), offset)))
    slots, chunks, firsts, multi, seg_live, entries, live_bytes = index.export()
    seg_live_rows = [(s, live.count, live.bytes) for s, live in seg_live.items()]
    with open(tmp, "wb", buffering=1 << 20) as raw:
        f = _CrcWriter(raw)
        f.write(_HEAD.pack(_MAGIC, _BIG, seq, offset, top_id, entries, live_bytes, len(slots.keys),
                           len(chunks), len(multi), len(seg_live_rows), len(covered)))
        for row in covered:
            f.write(_SEGMENT.pack(*row))
        for key, live in zip(slots.keys, slots.live, strict=True):
            if key is None:
                f.write(_SLOT.pack(live, -1, 0))
            else:
                vhost_raw, name_raw = key[0].encode(), key[1].encode()
                f.write(_SLOT.pack(live, len(vhost_raw), len(name_raw)) + vhost_raw + name_raw)
        f.write(array("Q", firsts))
        f.write(array("Q", [len(c.ids) for c in chunks]))
        f.write(array("Q", [c.live for c in chunks]))
        for field, _ in FIELDS:
            for c in chunks:
                f.write(getattr(c, field))
        for mid, held in multi.items():
            f.write(_MULTI.pack(mid, len(held)) + b"".join(_HELD.pack(s, n) for s, n in held.items()))
        for row in seg_live_rows:
            f.write(_SEG_LIVE.pack(*row))
        raw.write(_TRAILER.pack(f.crc, _END))
        raw.flush()
        if sync:
            os.fdatasync(raw.fileno())
        written = raw.tell()
    os.replace(tmp, final)
    if sync:
        fsync_dir(directory)
    return written


class _CrcReader:
    __slots__ = ("crc", "f")

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.crc = 0

    def read(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise EOFError("checkpoint cut short")
        self.crc = zlib.crc32(data, self.crc)
        return data

    def array(self, code: str, n: int) -> array[int]:
        out = array(code)
        out.fromfile(self.f, n)  # EOFError when cut short
        self.crc = zlib.crc32(out, self.crc)
        return out


def load_checkpoint(directory: Path) -> Checkpoint | None:
    """The checkpoint in ``directory`` if there is one whose every byte checks out, else None
    (logged); a leftover temporary of an interrupted write is deleted. Whether it still matches
    the segments is ``rebuild``'s check (``store_recovery.py``)."""
    path = directory / CHECKPOINT_FILE
    (directory / (CHECKPOINT_FILE + _TMP_SUFFIX)).unlink(missing_ok=True)
    try:
        with open(path, "rb", buffering=1 << 20) as f:
            return _load(_CrcReader(f), os.fstat(f.fileno()).st_size)
    except FileNotFoundError:
        return None
    except (OSError, EOFError, ValueError, struct.error, UnicodeDecodeError, OverflowError,
            MemoryError) as exc:
        log.warning("%s: unusable index checkpoint (%s); replaying the whole log", path, exc)
        return None


def _load(r: _CrcReader, file_size: int) -> Checkpoint:
    (magic, big, seq, offset, top_id, entries, live_bytes, n_keys, n_chunks, n_multi, n_seg_live,
     n_covered) = _HEAD.unpack(r.read(_HEAD.size))
    if magic != _MAGIC or bool(big) != _BIG:
        raise ValueError("not a checkpoint of this format and byte order")
    # counts are checked against the file's size before anything is allocated by them (a damaged
    # header is only caught by the CRC at the end)
    if n_keys * _SLOT.size + n_chunks * 24 + n_multi * _MULTI.size + n_seg_live * _SEG_LIVE.size \
            + n_covered * _SEGMENT.size > file_size:
        raise ValueError("counts larger than the file")
    covered_rows = [_SEGMENT.unpack(r.read(_SEGMENT.size)) for _ in range(n_covered)]
    if not covered_rows or covered_rows[-1][:2] != (seq, offset):
        raise ValueError("the covered segments do not end at the position")
    keys: list[QKey | None] = []
    lives: list[int] = []
    for _ in range(n_keys):
        live, vlen, nlen = _SLOT.unpack(r.read(_SLOT.size))
        lives.append(live)
        if vlen < 0:
            keys.append(None)
        else:
            raw = r.read(vlen + nlen)
            keys.append((raw[:vlen].decode(), raw[vlen:].decode()))
    slots = QueueSlots.restore(keys, lives)
    firsts = r.array("Q", n_chunks)
    lengths = r.array("Q", n_chunks)
    if sum(lengths) * 28 > file_size:
        raise ValueError("chunks larger than the file")
    chunk_lives = r.array("Q", n_chunks)
    chunks = [Chunk() for _ in range(n_chunks)]
    for c, live in zip(chunks, chunk_lives, strict=True):
        c.live = live
    for name, code in FIELDS:
        for c, n in zip(chunks, lengths, strict=True):
            setattr(c, name, r.array(code, n))
    multi: dict[int, dict[int, int]] = {}
    for _ in range(n_multi):
        mid, n = _MULTI.unpack(r.read(_MULTI.size))
        if n * _HELD.size > file_size:
            raise ValueError("a multi-queue entry larger than the file")
        raw = r.read(_HELD.size * n)
        multi[mid] = {s: cnt for s, cnt in _HELD.iter_unpack(raw)}
    seg_live: dict[int, SegmentLive] = {}
    for _ in range(n_seg_live):
        s, count, size = _SEG_LIVE.unpack(r.read(_SEG_LIVE.size))
        seg_live[s] = SegmentLive(count, size)
    crc, end = _TRAILER.unpack(r.f.read(_TRAILER.size))
    if end != _END or crc != r.crc or r.f.read(1):
        raise ValueError("checksum mismatch")
    index = StoreIndex.restore(slots, chunks, list(firsts), multi, seg_live, entries, live_bytes)
    return Checkpoint(index, seq, offset, top_id, covered_rows)


def missing_segments(ckpt: Checkpoint, present: dict[int, Path]) -> list[int] | None:
    """The covered segments deleted since ``ckpt`` was written (compaction's heads, perhaps the
    position's own segment), or None when the segments in ``present`` (seq -> path) are not the
    ones it covered: one cut, grown, rewritten or unknown to it before its position, or its
    position's segment shorter than the position."""
    covered = {s: (size, crc) for s, size, crc in ckpt.covered}
    for s in present:
        if s < ckpt.seq and s not in covered:
            return None
    missing = []
    for s, (size, crc) in covered.items():
        path = present.get(s)
        if path is None:  # compaction deleted it: ``rebuild`` checks that nothing live was in it
            missing.append(s)
            continue
        try:
            on_disk = path.stat().st_size
            if (on_disk != size if s < ckpt.seq else on_disk < size) \
                    or covered_segment(path, size) != crc:
                return None
        except (OSError, ValueError):
            return None
    return missing
