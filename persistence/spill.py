"""Spill files: where a queue's transient overflow waits on disk (nsq's diskqueue, FIFO).

Each queue gets its own ``SpillBacking`` (handed out by spill_store.py): a directory of numbered
files in the record framing of ``records.py``, one record per ``QueueEntry`` (``spill_records.py``).
Appends go to the tail file; page-ins read from the head; a file is deleted as soon as it has been
read to the end. Only counters and the list of files are kept in RAM, so ten million spilled
entries cost a few hundred bytes. A recovered queue's spill starts with a ``StoreTail``
(``store_pages.py``): its entries are read from the message store's segments, ahead of the files. Nothing is fsynced and everything is wiped at start: transient messages do not survive a
restart.

Rule 1 (go-diskqueue's one owner per set of files): every field of a backing belongs to the event
loop; there is no lock. A page-in is planned on the loop (``plan_read``: which file, which byte
range, already written and never written again), read in a worker thread by a pure function
(``ReadPlan.run``) that touches no shared state, and applied on the loop (``finish_read``). A plan
whose backing was dropped, closed or read synchronously meanwhile is stale and its result is
ignored (``generation``).
Rule 2: a full disk never corrupts a spill file or loses an entry: a failed write is cut back to
the last whole record and its bytes stay in memory until ``retry`` writes them, or a reader takes
them from there (the disk alarm holds publishers meanwhile). A record that cannot be read back is
skipped, logged and counted (``damaged``, ``take_lost``), never fatal.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import shutil
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from headrace.queues.backing import PropsInfo, RecoveredRow
from headrace.queues.message import QueueEntry

from .segments import segment_path
from .spill_records import Parsed, ReadPlan, count_records, encode, encode_recovered, parse
from .store_pages import StorePlan, StoreTail

__all__ = [
    "DEFAULT_SPILL_SEGMENT_BYTES",
    "SpillBacking",
    "SpillClosedError",
    "SpillCorruptError",
    "WriteReport",
]

log = logging.getLogger(__name__)

# Soft size of one spill file; a file rolls once it reaches this, and is deleted once read through.
DEFAULT_SPILL_SEGMENT_BYTES = 16 << 20
# Appends collect here before one write() call: 256 KiB amortises the syscall over ~1000 small
# entries while keeping unflushed bytes per spilling queue small.
WRITE_BUFFER_BYTES = 256 << 10


class SpillClosedError(RuntimeError):
    """The backing was closed (its queue is gone) and is not used again."""


class SpillCorruptError(OSError):
    """A spill file does not hold what was written to it (reported through ``damaged`` now)."""


class WriteReport(Protocol):
    """Who hears about spill writes (the disk alarm)."""

    def wrote(self, nbytes: int) -> None: ...
    def write_failed(self, writer: str) -> None: ...


@dataclass(slots=True)
class _File:
    seq: int
    path: Path
    size: int  # bytes written to the OS (the write file may hold more in the buffer)
    count: int = 0  # entries appended to it (buffered ones included)
    body_bytes: int = 0  # their body bytes


class SpillBacking:
    """One queue's FIFO of spilled entries (implements ``headrace.queues.backing.Backing``)."""

    def __init__(self, directory: Path, *, segment_max_bytes: int = DEFAULT_SPILL_SEGMENT_BYTES,
                 report: WriteReport | None = None,
                 on_wanted: Callable[[], None] | None = None) -> None:
        self._dir = directory
        self._max = segment_max_bytes
        self._report = report
        self._on_wanted = on_wanted
        self._files: deque[_File] = deque()  # head is read, tail is written; one file per ~_max
        self._next_seq = 1
        self._write_fd: int | None = None
        self._buf = bytearray()  # bounded by WRITE_BUFFER_BYTES plus one record, unless failing
        self.write_error: OSError | None = None  # the last write failed: the buffer waits for room
        self._read_off = 0  # offset in the head file
        self._read_count = 0  # entries taken or skipped from the head file
        self._read_body = 0  # their body bytes
        self.generation = 0  # bumped whenever an outstanding ReadPlan becomes stale
        self._depth = 0
        self._byte_depth = 0
        self._lost = (0, 0)  # entries and body bytes skipped as damaged, not yet taken
        self._tail: StoreTail | None = None  # recovered entries read from the store, ahead of the files
        self.damaged = 0  # damaged records met since the start
        self._closed = False
        directory.mkdir(parents=True, exist_ok=True)

    # -- write side ----------------------------------------------------------------------------

    def append(self, entries: Sequence[QueueEntry]) -> None:
        if self._closed:
            raise SpillClosedError(str(self._dir))
        flushed = 0
        failing = self.write_error is not None
        buf = self._buf
        for entry in entries:
            if self._write_fd is None or (self._files[-1].size + len(buf) >= self._max
                                          and self.write_error is None):
                flushed += self._roll()
            tail = self._files[-1]
            size = encode(entry, buf)
            tail.count += 1
            tail.body_bytes += size
            self._byte_depth += size
            self._depth += 1
            if len(buf) >= WRITE_BUFFER_BYTES and self.write_error is None:
                flushed += self._flush()
        self._reported(flushed, failing)

    def append_recovered(self, first_seq: int, rows: Iterable[RecoveredRow], props_info: PropsInfo,
                         ttl: float | None) -> tuple[int, int]:
        """Recovered persistent messages copied from the store's bytes (``encode_recovered``), a
        write buffer's worth per call, so the per-entry work is the encoding alone."""
        if self._closed:
            raise SpillClosedError(str(self._dir))
        if isinstance(rows, StoreTail) and self._tail is None and not self._depth:
            self._tail = rows  # paged in from the store's segments where they lie: no copy
            return rows.adopt(first_seq, props_info, ttl)
        flushed = 0
        failing = self.write_error is not None
        buf = self._buf
        it = iter(rows)
        seq = first_seq
        depth, byte_depth = self._depth, self._byte_depth
        while (first := next(it, None)) is not None:  # a file is rolled only for rows to put in it
            if self._write_fd is None or (self._files[-1].size + len(buf) >= self._max
                                          and self.write_error is None):
                flushed += self._roll()
            count, body_bytes = encode_recovered(itertools.chain((first,), it), seq, buf, props_info, ttl,
                                                 WRITE_BUFFER_BYTES)
            tail = self._files[-1]
            tail.count += count
            tail.body_bytes += body_bytes
            self._byte_depth += body_bytes
            self._depth += count
            seq += count
            if len(buf) >= WRITE_BUFFER_BYTES and self.write_error is None:
                flushed += self._flush()
        self._reported(flushed, failing)
        return self._depth - depth, self._byte_depth - byte_depth

    def _reported(self, flushed: int, failing: bool) -> None:
        report = self._report
        if report is not None:  # the disk alarm reacts at once
            if flushed:
                report.wrote(flushed)
            if self.write_error is not None and not failing:
                report.write_failed("spill")

    def retry(self) -> bool:
        """Write what a failed write left in the buffer; True once nothing waits."""
        if self.write_error is None or self._closed:
            return True
        flushed = self._flush()
        if flushed and self._report is not None:
            self._report.wrote(flushed)
        return self.write_error is None

    def _flush(self) -> int:
        """Write the buffer at the end of the tail file; returns bytes written (0 on failure, when
        the file is cut back and the buffer kept)."""
        buf = self._buf
        if not buf:
            self.write_error = None  # nothing waits any more (readers took it from memory)
            return 0
        assert self._write_fd is not None
        tail = self._files[-1]
        try:
            written = os.pwrite(self._write_fd, buf, tail.size)
            if written < len(buf):  # a short write on a filling disk: the next call fails
                written += os.pwrite(self._write_fd, memoryview(buf)[written:], tail.size + written)
            if written < len(buf):
                raise OSError(errno.ENOSPC, "short write")
        except OSError as exc:
            if self.write_error is None:
                log.error("spill %s: cannot write (%s); %d bytes wait in memory", self._dir,
                          exc.strerror or exc, len(buf))
            self.write_error = exc
            try:
                os.ftruncate(self._write_fd, tail.size)
            except OSError:
                pass  # the next write starts at tail.size and overwrites the partial record
            return 0
        if self.write_error is not None:
            log.warning("spill %s: pending entries written", self._dir)
            self.write_error = None
        tail.size += written
        buf.clear()
        return written

    def _roll(self) -> int:
        """Start the next file; on a write error the current one grows on (its size is soft)."""
        flushed = 0
        if self._write_fd is not None:
            flushed = self._flush()
            if self.write_error is not None:
                return flushed
        seq = self._next_seq
        path = segment_path(self._dir, seq)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:
            if self._write_fd is None:
                raise  # no file at all: the caller (the queue) keeps the entry in memory
            self.write_error = exc
            return flushed
        if self._write_fd is not None:
            os.close(self._write_fd)
        self._next_seq += 1
        self._write_fd = fd
        self._files.append(_File(seq, path, 0))
        return flushed

    # -- read side -----------------------------------------------------------------------------

    def plan_read(self, max_count: int, max_bytes: int, need_one: bool = True
                  ) -> ReadPlan | StorePlan | list[QueueEntry] | None:
        """The next page-in: a ``ReadPlan`` (``StorePlan``: recovered entries left in the store)
        to run in a worker thread and hand to ``finish_read``, entries taken at once from memory
        (a reader that caught up with writes the disk had no room for), or None if none held."""
        tail = self._tail
        if tail is not None and not self._closed:
            if tail.left:
                return tail.plan(max_count, max_bytes, need_one, self.generation)
            self._tail = None
        while not self._closed and self._depth > 0 and self._files:
            head = self._files[0]
            if len(self._files) == 1 and self._read_off >= head.size and self._buf:
                self._flush()  # the reader has caught up with the writer's buffer
                if self.write_error is not None:
                    return self._take_buffered(max_count, max_bytes, need_one)
            if self._read_off >= head.size:
                self._finish_head()
                continue
            return ReadPlan(head.path, self._read_off, head.size, max_count, max_bytes, need_one,
                            self.generation)
        return None

    def finish_read(self, plan: ReadPlan | StorePlan, r: Parsed) -> list[QueueEntry]:
        """Apply what a plan read; a stale plan's result is dropped (nothing was consumed)."""
        if isinstance(plan, StorePlan):
            tail = self._tail  # done: (lost, a correction of its estimate: store_pages.py), None if stale
            done = tail.finish(plan, r) if tail is not None and plan.generation == self.generation else None
            if done is None or self._closed:
                return []
            self._lost = (self._lost[0] + done[0], self._lost[1] + done[1])
            self.damaged += r.skipped
            return r.taken
        if plan.generation != self.generation or self._closed or not self._files \
                or self._files[0].path != plan.path or self._read_off != plan.offset:
            return []
        head = self._files[0]
        self._read_off += r.used
        self._read_count += len(r.taken) + r.skipped
        self._read_body += r.body_bytes + r.skipped_bytes
        self._depth -= len(r.taken)
        self._byte_depth -= r.body_bytes
        if r.skipped:
            self._record_damage(r.skipped, r.skipped, r.skipped_bytes, "bad checksum or fields")
        if r.fatal is not None:
            self._skip_rest_of_head(head, r.fatal)
        elif self._depth == 0 and len(self._files) == 1 and not self._buf:
            self._finish_head()  # drained: free the file now, not at the next roll
        return r.taken

    def read_batch(self, max_count: int, max_bytes: int) -> list[QueueEntry]:
        """Up to ``max_count`` entries in append order, stopping before ``max_bytes`` of bodies
        would be exceeded (but always at least one entry while any is held), read here and now:
        any page-in planned before is stale."""
        self.generation += 1
        out: list[QueueEntry] = []
        body_bytes = 0
        while len(out) < max_count:
            plan = self.plan_read(max_count - len(out), max_bytes - body_bytes, not out)
            if plan is None:
                break
            if isinstance(plan, list):
                out += plan
                break
            r = plan.run()
            out += self.finish_read(plan, r)
            body_bytes += r.body_bytes
            if r.full:
                break
        return out

    def _take_buffered(self, max_count: int, max_bytes: int, need_one: bool) -> list[QueueEntry]:
        """Entries from the front of the unwritten buffer (whole records we encoded)."""
        r = parse(bytes(self._buf), max_count, max_bytes, need_one, str(self._dir))
        del self._buf[:r.used]
        head = self._files[0]
        head.count -= len(r.taken)
        head.body_bytes -= r.body_bytes
        self._depth -= len(r.taken)
        self._byte_depth -= r.body_bytes
        return r.taken

    def _skip_rest_of_head(self, head: _File, why: str) -> None:
        """The head file cannot be read on from here: count what it still held as lost and move
        to the next file (or, for the only file, past everything written to it)."""
        lost = max(head.count - self._read_count, 0)
        lost_bytes = max(head.body_bytes - self._read_body, 0)
        if len(self._files) == 1 and self._buf:
            # the buffer's entries are whole and still ahead: only the file's part is lost
            buffered, buffered_bytes = count_records(self._buf)
            lost = max(lost - buffered, 0)
            lost_bytes = max(lost_bytes - buffered_bytes, 0)
        self._record_damage(1, lost, lost_bytes, f"{why}; the rest of {head.path.name} skipped")
        self._read_count += lost
        self._read_body += lost_bytes
        self._read_off = head.size
        if len(self._files) > 1 or not self._buf:
            self._finish_head()

    def _record_damage(self, records: int, lost: int, lost_bytes: int, what: str) -> None:
        self.damaged += records
        self._depth = max(self._depth - lost, 0)
        self._byte_depth = max(self._byte_depth - lost_bytes, 0)
        self._lost = (self._lost[0] + lost, self._lost[1] + lost_bytes)
        log.error("spill %s: damaged record, %d entries lost: %s", self._dir, lost, what)

    def want_page_in(self) -> None:
        if self._on_wanted is not None:
            self._on_wanted()

    def take_lost(self) -> tuple[int, int]:
        """Entries and body bytes lost to damaged records since the last call."""
        lost, self._lost = self._lost, (0, 0)
        return lost

    def _finish_head(self) -> None:
        """Drop the head file once read through."""
        head = self._files.popleft()
        self._read_off = self._read_count = self._read_body = 0
        if not self._files and self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None
        head.path.unlink(missing_ok=True)

    # -- figures and lifecycle -----------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def depth(self) -> int:
        return self._depth + (self._tail.left if self._tail is not None else 0)

    def byte_depth(self) -> int:
        return self._byte_depth + (self._tail.est_bytes if self._tail is not None else 0)

    def disk_bytes(self) -> int:
        return sum(f.size for f in self._files) + len(self._buf)

    def drop(self) -> None:
        """Forget every entry and delete the files; a page-in under way is stale."""
        self.generation += 1
        if self._tail is not None:
            self._tail.drop()  # the store's segments are no longer pinned
            self._tail = None
        if self._write_fd is not None:
            os.close(self._write_fd)
        self._write_fd = None
        for f in self._files:
            f.path.unlink(missing_ok=True)
        self._files.clear()
        self._buf.clear()
        self.write_error = None
        self._read_off = self._read_count = self._read_body = self._depth = self._byte_depth = 0

    def close(self) -> None:
        """Delete everything; later appends raise ``SpillClosedError``."""
        if self._closed:
            return
        self.drop()
        self._closed = True
        shutil.rmtree(self._dir, ignore_errors=True)
