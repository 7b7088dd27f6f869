"""A recovered queue's messages past its resident window, paged in from the store's own segments.

Why: the spilled part of a recovered backlog is already on disk, in the message store's segments.
Copying it into spill files at start was most of a large backlog's restart (ARCHITECTURE.md, "The
message store's index"); a ``StoreTail`` keeps instead where those records lie, as runs of records
back to back in one segment (a few integers a run: one run per segment for a backlog published
in a row), and the queue's spill backing reads them from there as the queue drains, in order.

Rule 1: a ``StoreTail`` is made by the store's ``RecoveredReader`` (``store_reading.py``) for one
queue and belongs, once adopted, to that queue's ``SpillBacking`` (``spill.py``) on the event loop;
its read plans run in the pager's worker thread and read only bytes the store never writes again.
Rule 2 (the segments stay while a tail needs them): ``floor`` is the lowest segment the tail still
reads; the store (its flusher thread) reads it, never writes it, and does not rewrite a head
segment at or above any tail's floor (``store_compaction.maybe_compact``'s ``pinned``). A head is
deleted only when nothing in it is live, and a record a tail has not paged in yet is live (it
was never delivered, so never acked), so deleting dead heads needs no pin.
Rule 3: the body bytes a tail holds are known only as its records are read (the field lengths are
in each record, not in the index): a run counts its records' sizes less the overhead of its first
record, and each page-in reports the difference from the real bodies through ``take_lost`` as a
correction with no entry lost, so the queue's byte count is exact once paged in.
"""

from __future__ import annotations

import logging
import mmap
import os
import zlib
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import add
from pathlib import Path

from headrace.queues.backing import PropsInfo, RecoveredRow
from headrace.queues.message import Message, QueueEntry

from .records import HEADER, HEADER_SIZE, MAX_RECORD_SIZE
from .spill_records import Parsed
from .store_ops import DECODE_ERRORS, PUB_HEAD, PUB_QUEUE, REC_PUBLISH, publish_offsets_at

__all__ = ["NOT_PINNED", "StorePlan", "StoreTail", "back_to_back", "record_overhead"]

log = logging.getLogger("headrace.persistence.spill")

NOT_PINNED = 1 << 62  # the floor of a tail that reads no segment any more
READ_CHUNK_BYTES = 1 << 20  # bytes read per pread while paging in
MAX_RUNS_PER_READ = 4096  # runs one page-in may span (each a pread at least)
_PUB_FIXED = HEADER_SIZE + PUB_HEAD.size


def _fields(buf: bytes | mmap.mmap, start: int, end: int) -> tuple[int, int, int, int, int, int, int]:
    """(id, timestamp ms, exchange at, routing key at, props at, body at) of the Publish record
    whose header is at ``buf[start]`` and which ends at ``end``, and its body length."""
    mid, ts, e_at, rk_at, props_at, body_at = publish_offsets_at(buf, start + HEADER_SIZE, end)
    return mid, ts, e_at, rk_at, props_at, body_at, end - body_at


class StoreTail:
    """One recovered queue's messages from its ``start``-th on, as runs of store records; also an
    iterable of ``RecoveredRow`` (``rows``), so a backing that cannot take it by reference copies
    it as before."""

    __slots__ = ("_rows", "_build", "seg", "off", "ends", "records", "_floors", "_paths",
                 "counts", "overhead", "first_seq", "props_info", "ttl", "_r", "_pos", "_done",
                 "floor", "left", "est_bytes")

    def __init__(self, rows: Callable[[], Iterator[RecoveredRow]],
                 build: Callable[[StoreTail], None]) -> None:
        self._rows = rows  # the copy, for a backing that does not adopt the tail
        self._build = build  # fills the runs from the store's index (``RecoveredReader``)
        self.seg = array("I")  # each run's segment
        self.off = array("Q")  # its first record's offset
        self.ends = array("Q")  # the offset past its last record
        self.records = array("Q")  # its records
        self.overhead = array("Q")  # bytes of its first record that are not body
        self._floors = array("I")  # the lowest segment of this run and the runs after it
        self._paths: dict[int, Path] = {}
        self.counts: dict[int, int] = {}  # delivery counts that are not 0, by message id
        self.first_seq = 0
        self.props_info: PropsInfo | None = None
        self.ttl: float | None = None
        self._r = 0  # the run being read
        self._pos = 0  # the offset of its next record
        self._done = 0  # its records read (or skipped) so far
        self.floor = NOT_PINNED  # read by the store's flusher thread (module docstring)
        self.left = 0  # records not paged in yet
        self.est_bytes = 0  # their body bytes, estimated (module docstring)

    def __iter__(self) -> Iterator[RecoveredRow]:
        return self._rows()

    # -- building (recovery, before the store's first write) -----------------------------------

    def add_run(self, seq: int, path: Path, off: int, end: int, records: int, overhead: int) -> None:
        """``records`` records back to back in segment ``seq`` from ``off`` to ``end``."""
        self.seg.append(seq)
        self.off.append(off)
        self.ends.append(end)
        self.records.append(records)
        self.overhead.append(overhead)
        self._paths[seq] = path
        self.left += records
        self.est_bytes += end - off - records * overhead

    def extend_run(self, end: int, records: int) -> None:
        """The last run goes on to ``end`` with ``records`` more records."""
        self.est_bytes += end - self.ends[-1] - records * self.overhead[-1]
        self.ends[-1] = end
        self.records[-1] += records
        self.left += records

    def adopt(self, first_seq: int, props_info: PropsInfo, ttl: float | None) -> tuple[int, int]:
        """Build the runs and pin their segments; returns (entries, estimated body bytes)."""
        self._build(self)
        self._rows = _no_rows
        self._build = _no_build
        self.first_seq, self.props_info, self.ttl = first_seq, props_info, ttl
        floors = array("I", self.seg)
        for r in range(len(floors) - 2, -1, -1):
            floors[r] = min(floors[r], floors[r + 1])
        self._floors = floors
        self._start_run(0)
        return self.left, self.est_bytes

    def _start_run(self, r: int) -> None:
        self._r, self._done = r, 0
        if r < len(self.seg):
            self._pos = self.off[r]
            self.floor = self._floors[r]
        else:
            self.drop()

    # -- paging in (the event loop plans and applies, a worker thread reads) -------------------

    def plan(self, max_count: int, max_bytes: int, need_one: bool, generation: int) -> StorePlan | None:
        """The next page-in, over as many runs as ``max_count`` records may need (runs of one
        record, where queues' records alternate in the log, would otherwise be a read each)."""
        r = self._r
        if not self.left or r >= len(self.seg):
            return None
        assert self.props_info is not None
        seg, ends, paths = self.seg, self.ends, self._paths
        ranges = [(paths[seg[r]], self._pos, ends[r])]
        n = self.records[r] - self._done
        while n < max_count and r + 1 < len(seg) and len(ranges) < MAX_RUNS_PER_READ:
            r += 1
            ranges.append((paths[seg[r]], self.off[r], ends[r]))
            n += self.records[r]
        return StorePlan(tuple(ranges), max_count, max_bytes, need_one, generation, self.first_seq,
                         self.counts, self.props_info, self.ttl)

    def finish(self, plan: StorePlan, result: Parsed) -> tuple[int, int] | None:
        """Apply a plan's result (the caller checked its generation); returns (entries lost,
        body bytes to take off the queue's count besides the entries' own: the estimate's
        correction and what was lost), or None for a plan that does not start where the tail
        stands (stale: nothing consumed)."""
        if self._r >= len(self.seg) or plan.offset != self._pos \
                or plan.ranges[0][0] != self._paths[self.seg[self._r]]:
            return None
        used, consumed = result.used, len(result.taken) + result.skipped
        lost, est = result.skipped, 0
        self.first_seq += len(result.taken)
        self.left -= consumed
        while self._r < len(self.seg):
            r = self._r
            rest, rest_records, over = self.ends[r] - self._pos, self.records[r] - self._done, self.overhead[r]
            if used >= rest and consumed >= rest_records:  # this run read through
                used, consumed = used - rest, consumed - rest_records
                est += rest - rest_records * over
                self._start_run(r + 1)
                continue
            self._pos += used
            self._done += consumed
            est += used - consumed * over
            if result.fatal is not None:  # the rest of this run cannot be read
                rest, rest_records = self.ends[r] - self._pos, self.records[r] - self._done
                log.error("message store segment %d: %d recovered records lost: %s",
                          self.seg[r], rest_records, result.fatal)
                lost += rest_records
                self.left -= rest_records
                est += rest - rest_records * over
                self._start_run(r + 1)
            break
        self.est_bytes -= est
        return lost, est - result.body_bytes

    def drop(self) -> None:
        """Forget the rest (purge, delete, read through): the segments are no longer pinned."""
        self._r = len(self.seg)
        self.left = self.est_bytes = 0
        self.counts = {}
        self.floor = NOT_PINNED


def _no_rows() -> Iterator[RecoveredRow]:
    raise RuntimeError("a store tail taken by reference is not copied")


def _no_build(tail: StoreTail) -> None:
    raise RuntimeError("a store tail is built once")


@dataclass(frozen=True, slots=True)
class StorePlan:
    """A page-in the event loop planned: Publish records back to back in each of ``ranges``
    ((segment path, offset, end), in the queue's order), bytes the store never writes again
    (``generation`` as ``ReadPlan``'s)."""

    ranges: tuple[tuple[Path, int, int], ...]
    max_count: int
    max_bytes: int
    need_one: bool
    generation: int
    first_seq: int
    counts: dict[int, int]
    props_info: PropsInfo
    ttl: float | None

    @property
    def offset(self) -> int:
        return self.ranges[0][1]

    def run(self) -> Parsed:
        """Read and decode (in a worker thread); an OSError of a read becomes ``fatal``."""
        r = Parsed([])
        fds: dict[Path, int] = {}
        try:
            for path, start, end in self.ranges:
                fd = fds.get(path)
                if fd is None:
                    fd = fds[path] = os.open(path, os.O_RDONLY)
                self._read(fd, start, end, r)
                if r.full or r.fatal is not None:
                    break
        except OSError as exc:
            r.fatal = str(exc)
        finally:
            for fd in fds.values():
                os.close(fd)
        return r

    def _read(self, fd: int, start: int, end: int, r: Parsed) -> None:
        base = r.used - start  # r.used counts the ranges before this one
        off = start
        while off < end and not r.full and r.fatal is None:
            chunk = os.pread(fd, min(end - off, READ_CHUNK_BYTES), off)
            if len(chunk) >= HEADER_SIZE:
                length = HEADER.unpack_from(chunk, 0)[0]
                if HEADER_SIZE + length > len(chunk) and off + HEADER_SIZE + length <= end:
                    chunk = os.pread(fd, HEADER_SIZE + length, off)  # one record above a chunk
            before = r.used
            self._parse(chunk, off, r)
            if r.used == before and not r.full and r.fatal is None:
                r.fatal = f"no whole record at offset {off}"
            off = r.used - base

    def _parse(self, chunk: bytes, base: int, r: Parsed) -> None:
        """Decode whole records of ``chunk`` into ``r`` (``_fields`` inlined: the page-in's step
        per message)."""
        taken = r.taken
        pos = 0
        unpack, unpack_pub, unpack_queue = HEADER.unpack_from, PUB_HEAD.unpack_from, PUB_QUEUE.unpack_from
        queue_size = PUB_QUEUE.size
        crc32 = zlib.crc32
        counts, props_info, ttl = self.counts, self.props_info, self.ttl
        max_count, max_bytes, first_seq = self.max_count, self.max_bytes, self.first_seq
        view = memoryview(chunk)
        while len(taken) < max_count and pos + HEADER_SIZE <= len(chunk):
            length, crc, kind = unpack(chunk, pos)
            end = pos + HEADER_SIZE + length
            if length > MAX_RECORD_SIZE or kind != REC_PUBLISH:
                r.fatal = f"not a Publish record at offset {base + pos}"
                break
            if end > len(chunk):
                break
            try:
                if crc32(view[pos + HEADER_SIZE - 1:end]) != crc:
                    raise ValueError("bad checksum")
                mid, ts_ms, nq, vlen, elen, rlen, plen = unpack_pub(chunk, pos + HEADER_SIZE)
                e_at = pos + _PUB_FIXED
                for _ in range(nq):
                    e_at += queue_size + unpack_queue(chunk, e_at)[0]
                e_at += vlen
                rk_at = e_at + elen
                props_at = rk_at + rlen
                body_at = props_at + plen
                if body_at > end:
                    raise ValueError("field runs past the end of the record")
                exchange = chunk[e_at:rk_at].decode()
                routing_key = chunk[rk_at:props_at].decode()
            except DECODE_ERRORS:
                log.error("message store: damaged record at offset %d skipped", base + pos)
                r.skipped += 1
                pos = end
                continue
            size = end - body_at
            if r.body_bytes + size > max_bytes and (taken or not self.need_one):
                r.full = True
                break
            props = chunk[props_at:body_at]
            priority, expiration = (props_info(props) if plen >= 2 and (
                chunk[props_at] & 0x09 or chunk[props_at + 1] & 0x01) else (None, None))
            timestamp = ts_ms / 1000
            life = ttl
            if expiration is not None:
                life = expiration / 1000 if life is None else min(life, expiration / 1000)
            deliveries = counts.get(mid, 0)
            message = Message(mid, exchange, routing_key, props, chunk[body_at:end], True, priority or 0,
                              expiration, None, timestamp)
            taken.append(QueueEntry(first_seq + len(taken), message, deliveries > 0, deliveries,
                                    None if life is None else timestamp + life))
            r.body_bytes += size
            pos = end
        r.used += pos
        r.full = r.full or len(taken) >= max_count


def record_overhead(buf: bytes | mmap.mmap, start: int, end: int) -> int:
    """Bytes of the Publish record at ``buf[start:end]`` that are not its body."""
    return end - start - _fields(buf, start, end)[6]


def back_to_back(offs: array[int], sizes: array[int], segs: array[int], i0: int, i1: int) -> bool:
    """Whether entries ``[i0, i1)`` are records laid back to back in one segment, in order (a
    few C loops over the index's arrays, no Python step per entry)."""
    n = i1 - i0
    if n <= 1:
        return True
    if segs[i0:i1].count(segs[i0]) != n:
        return False
    nxt = array(offs.typecode, map(add, offs[i0:i1 - 1], sizes[i0:i1 - 1]))
    return nxt == offs[i0 + 1:i1]
