"""Stream queues on disk: one mirror-log per stream (same segments, sparse index and retention),
under ``<data>/streams/mirror/<vhost>/<queue>/``, beside it the consumers' tracked offsets
(``offsets.json``), and the read cursor each stream consumer reads the segments through.

Rule 1: the writer is the store flusher alone (``StreamAppend`` ops travel in the store outbox, so a
confirm waits for the same group fsync as any persistent publish); it also alone writes the offsets
file (``StreamTrack``). Rule 2: readers only read files: a cursor holds one open segment and a byte
position, reads a bounded chunk per call (``pread``: from the page cache for a warm stream) and
never keeps what it delivered, so memory does not grow with the stream's length or the number of
consumers. A segment only its tier holds is read off the event loop (``tier_reads``): the cursor
says it waits, and its queue hands the read to the shell.
"""

from __future__ import annotations

import json
import os
import shutil
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from . import replica_tap
from .mirror_reader import SpanScan, index_entries, read_entries, scan_span, seek_position
from .mirror_records import INDEX_SUFFIX, MirrorEntry, MirrorRow, decode_entry, list_segments, mirror_dir
from .records import HEADER, HEADER_SIZE, MAX_RECORD_SIZE
from .stream_filter import FILTER_SUFFIX, Chunk, StreamFilter, read_chunks
from .tier import note_drop
from .tier_manifest import all_segments
from .tier_reads import TierFailed, TierPending, TierRead, TierWindow

__all__ = [
    "OFFSETS_FILE",
    "StreamAppend",
    "StreamBatch",
    "StreamCursor",
    "StreamOp",
    "StreamStats",
    "StreamTrack",
    "offset_at_time",
    "read_offsets",
    "remove_stream",
    "stream_dir",
    "stream_root",
    "stream_stats",
    "write_offsets",
]

OFFSETS_FILE = "offsets.json"
READ_CHUNK = 256 << 10  # at most this many bytes per read: a prefetch window of small messages
MIN_READ = 4096  # and at least this many: a nearly spent budget still makes progress


@dataclass(frozen=True, slots=True)
class StreamAppend:
    """Append ``record`` to the stream ``queue``; the publisher's confirm waits for it."""
    vhost: str
    queue: str
    record: MirrorRow


@dataclass(frozen=True, slots=True)
class StreamTrack:
    """Consumer offsets of the stream changed: the flusher writes the offsets file."""
    vhost: str
    queue: str


StreamOp = StreamAppend | StreamTrack


def stream_root(data_dir: Path) -> Path:
    """The root a stream's ``MirrorLog`` (and the Spark bridge) is given."""
    return Path(data_dir) / "streams"


def stream_dir(data_dir: Path, vhost: str, queue: str) -> Path:
    return mirror_dir(stream_root(data_dir), vhost, queue)


def read_offsets(directory: Path) -> dict[str, int]:
    try:
        data = json.loads((directory / OFFSETS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}


def write_offsets(directory: Path, offsets: dict[str, int]) -> None:
    """Atomically: a crash leaves the old file or the new one, never half of one."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (OFFSETS_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(offsets, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / OFFSETS_FILE)
    replica_tap.replaced(directory / OFFSETS_FILE)


def remove_stream(data_dir: Path, vhost: str, queue: str, tier_dir: str | None = None) -> None:
    """The deleted stream's log; its tier (``tier_dir``: its policy's folder) is noted for the
    tier uploader to remove first (``tier.note_drop``)."""
    note_drop(data_dir, stream_dir(data_dir, vhost, queue), tier_dir)
    shutil.rmtree(stream_dir(data_dir, vhost, queue), ignore_errors=True)
    replica_tap.deleted(stream_dir(data_dir, vhost, queue))


@dataclass(frozen=True, slots=True)
class StreamStats:
    size: int  # bytes of segments, indexes and chunk filters on disk
    segments: int
    first_offset: int | None
    first_timestamp_ms: int | None


def stream_stats(data_dir: Path, vhost: str, queue: str) -> StreamStats:
    segs = list_segments(stream_root(data_dir), vhost, queue)
    size = 0
    for seg in segs:
        size += seg.size
        for suffix in (INDEX_SUFFIX, FILTER_SUFFIX):
            try:
                size += seg.path.with_suffix(suffix).stat().st_size
            except OSError:
                pass
    first_ts = None
    if segs:
        entries = index_entries(segs[0].path)
        first_ts = entries[0][2] if entries else None
    return StreamStats(size, len(segs), segs[0].base_offset if segs else None, first_ts)


def offset_at_time(data_dir: Path, vhost: str, queue: str, timestamp_ms: int, end: int) -> int:
    """The first offset stamped at or after ``timestamp_ms`` (``end`` when none is): segments whose
    successor starts no later than the time are skipped on their index alone. A segment only in
    the tier is not read (this runs on the event loop): the offset is that of its last index entry
    stamped before the time, and the cursor steps over what comes earlier (``StreamCursor.from_ms``)."""
    root = stream_root(data_dir)
    segs = all_segments(root, vhost, queue)
    for i, seg in enumerate(segs):
        if i + 1 < len(segs):
            following = index_entries(segs[i + 1].path)
            if following and following[0][2] <= timestamp_ms:
                continue
        if seg.tier is not None and not seg.path.exists():
            before = [e for e in index_entries(seg.path) if e[2] < timestamp_ms]
            return before[-1][0] if before else seg.base_offset
        for entry in read_entries(seg, vhost=vhost, exchange=queue, from_ts=timestamp_ms):
            return entry.offset
    return end


class StreamBatch:
    """Consecutive records read in one go: ``data`` and where each record's fields lie in it
    (``mirror_reader.scan_span``), the first ``skip`` records excluded, at most ``count`` used."""

    __slots__ = ("data", "scan", "skip", "count")

    def __init__(self, data: bytes, scan: SpanScan, skip: int, count: int) -> None:
        self.data, self.scan, self.skip, self.count = data, scan, skip, count

    @property
    def size(self) -> int:
        """Bytes of the records used."""
        bounds = self.scan.bounds
        return bounds[5 * (self.skip + self.count)] - bounds[5 * self.skip]

    def entries(self, vhost: str, queue: str) -> list[MirrorEntry]:
        """The records used, decoded one by one (for tools; delivery builds from the bounds)."""
        bounds, data = self.scan.bounds, self.data
        return [decode_entry(data[bounds[5 * r] + HEADER_SIZE:bounds[5 * r + 5]], vhost, queue)
                for r in range(self.skip, self.skip + self.count)]


class StreamCursor:
    """One consumer's position in a stream: ``offset`` is the next offset it will get.

    Each ``read`` is one ``pread`` of at most ``max_bytes`` (sized from the records seen so far to
    what the consumer's credit can take) and one bulk scan of it: what a wake-up costs is bounded
    and does not depend on the stream's length or where in it the consumer is.

    With a ``filter`` (a filtered consumer), whole chunks whose Bloom filter rules out every wanted
    value are stepped over on their side-file entry alone, and a read stops before the next such
    chunk; the records read still need the exact check (``StreamFilter.matches``) by the caller."""

    __slots__ = ("root", "vhost", "queue", "offset", "filter", "from_ms", "_fd", "_tier", "_path", "_pos", "_avg",
                 "_chunks", "_starts")

    def __init__(self, data_dir: Path, vhost: str, queue: str, offset: int,
                 filter: StreamFilter | None = None, from_ms: int | None = None) -> None:
        self.root = stream_root(data_dir)
        self.vhost = vhost
        self.queue = queue
        self.offset = offset
        self.filter = filter
        # a start by time placed at an index entry before it: records stamped earlier are stepped
        # over until the first that is not (``offset_at_time``)
        self.from_ms = from_ms
        self._chunks: list[Chunk] = []  # the open segment's chunks, as far as read (filtered only)
        self._starts: list[int] = []
        self._fd: int | None = None
        self._tier: TierWindow | None = None  # the open segment, when only its tier copy is left
        self._path: Path | None = None
        self._pos = 0
        self._avg = 512  # bytes per record, as last read: sizes the next read to the credit

    def _locate(self) -> bool:
        """Open the segment holding ``offset`` (the oldest one if retention dropped it), from the
        log's tier when its local copy is gone: a consumer starting at ``first`` reads the tiered
        segments in order, then the local ones. Listed twice at most: a local copy may be let go
        (after its manifest line) between the listing and the open."""
        for _ in range(2):
            segs = all_segments(self.root, self.vhost, self.queue)
            if not segs:
                return False
            seg = segs[0]
            for candidate in segs:
                if candidate.base_offset <= self.offset:
                    seg = candidate
            if seg.base_offset > self.offset:
                self.offset = seg.base_offset
            if seg.path == self._path and (self._fd is not None or self._tier is not None):
                return False  # still the same segment: nothing further has been written
            self.close()
            try:
                self._fd = os.open(seg.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                if seg.tier is None:
                    continue
                self._tier = TierWindow(seg.tier)  # read off the event loop (``tier_reads``)
            self._path = seg.path
            self._pos = seek_position(seg.path, self.offset, None)  # the .idx stays local
            self._chunks, self._starts = [], []
            return True
        return False

    def _pread(self, n: int, position: int) -> bytes:
        if self._fd is not None:
            return os.pread(self._fd, n, position)
        assert self._tier is not None
        return self._tier.pread(n, position)

    def take_read(self) -> TierRead | None:
        """The read of the tier this cursor waits for, once (``read`` said None because of it):
        its queue has the shell make it off the event loop, then dispatches again."""
        return self._tier.take() if self._tier is not None else None

    def _filtered_span(self, end: int, want: int) -> int:
        """Step over the chunks from ``_pos`` that the filter rules out (only those wholly below
        the committed end), then how much to read: ``want``, cut before the next such chunk."""
        assert self.filter is not None and self._path is not None
        chunks, starts = self._chunks, self._starts
        if not chunks or self._pos >= chunks[-1].end:
            more = read_chunks(self._path, len(chunks))
            chunks += more
            starts += [c.start for c in more]
        i = bisect_right(starts, self._pos) - 1
        if i < 0:
            return want
        skips = self.filter.skips
        while i < len(chunks) and chunks[i].start <= self._pos < chunks[i].end:
            chunk = chunks[i]
            if chunk.next > end or not skips(chunk):
                break
            self._pos = chunk.end
            self.offset = max(self.offset, chunk.next)
            i += 1
        limit = self._pos + want
        for j in range(i + 1, len(chunks)):  # by index: a segment may hold many small chunks
            chunk = chunks[j]
            if chunk.start >= limit:
                break
            if chunk.next <= end and skips(chunk):
                return max(chunk.start - self._pos, 0)
        return want

    def read(self, end: int, max_records: int, max_bytes: int = READ_CHUNK) -> StreamBatch | None:
        """Up to ``max_records`` records from ``offset`` below ``end`` (the committed end), read
        with at most ``max_bytes`` (but at least ``MIN_READ``, and a single record larger than
        that whole)."""
        want = max(MIN_READ, min(max_bytes, max_records * self._avg))
        while self.offset < end:
            if self._fd is None and self._tier is None and not self._locate():
                return None
            span = self._filtered_span(end, want) if self.filter is not None else want
            if self.offset >= end:
                return None
            try:
                data = self._pread(span, self._pos) if span else b""
                if len(data) >= HEADER_SIZE:
                    length = HEADER.unpack_from(data, 0)[0]
                    if HEADER_SIZE + length > len(data) and length <= MAX_RECORD_SIZE:
                        data = self._pread(HEADER_SIZE + length, self._pos)  # one large record
            except TierPending:  # being read off the event loop: ``take_read``
                return None
            except TierFailed:  # opened again: a new read, made after the shell's pause
                self.close()
                continue
            except OSError:  # the local file went (retention): the segment is located again at the next read
                self.close()
                return None
            scan = scan_span(data, 0, len(data), 1 << 30)
            offsets = scan.offsets
            n = len(offsets)
            if not n:
                if not self._locate():
                    return None  # the end of this segment, and no next one yet
                continue
            skip = bisect_left(offsets, self.offset)
            if self.from_ms is not None:
                skip = self._past_time(scan, skip)
            stop = min(bisect_left(offsets, end), skip + max_records)
            self._avg = max(64, scan.end // n)
            if stop <= skip:
                if skip < n:
                    return None  # nothing below the committed end yet
                self._pos += scan.end  # all before our offset (read from an index entry)
                continue
            self._pos += scan.bounds[5 * stop]
            self.offset = offsets[stop - 1] + 1
            return StreamBatch(data, scan, skip, stop - skip)
        return None

    def _past_time(self, scan: SpanScan, skip: int) -> int:
        """The first record from ``skip`` stamped at or after ``from_ms``; once one is, the start
        is found and every later record is delivered."""
        stamps, from_ms, n = scan.timestamps, self.from_ms, len(scan.offsets)
        assert from_ms is not None
        while skip < n and stamps[skip] < from_ms:
            skip += 1
        if skip < n:
            self.from_ms = None
        return skip

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = self._tier = None
        self._path = None
