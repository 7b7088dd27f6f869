"""Spill files: where a queue's transient overflow waits on disk (nsq's diskqueue, FIFO).

Each queue gets its own ``SpillBacking``: a directory of numbered files in the record framing of
``records.py``, one record per ``QueueEntry``. The event loop appends at the tail; a pager thread
reads batches from the head; a file is deleted as soon as it has been read to the end. Only counters
and the list of files are kept in RAM, so ten million spilled entries cost a few hundred bytes.

Nothing is fsynced and everything is wiped at start: transient messages do not survive a restart.

A full disk never corrupts a spill file or loses an entry: a failed write is cut back to the last
whole record and its bytes stay in memory until a retry writes them (the disk alarm holds
publishers meanwhile). A record that cannot be read back is skipped and counted, never fatal.

Rule 1: the write side (write file, buffer, tail) is changed only under ``_lock`` by ``append``
and ``retry``.
Rule 2: the read side (read file, offset) is changed only under ``_read_lock`` by ``read_batch``
(which also takes ``_lock`` briefly to publish its progress); disk reads happen outside ``_lock``,
on bytes the writer has already flushed and never touches again.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import struct
import threading
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from headrace.queues.message import Message, QueueEntry

from .records import HEADER, HEADER_SIZE, MAX_RECORD_SIZE
from .segments import SEGMENT_SUFFIX, segment_path

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_SPILL_SEGMENT_BYTES",
    "SpillBacking",
    "SpillClosedError",
    "SpillCorruptError",
    "SpillStore",
]

# Soft size of one spill file; a file rolls once it reaches this, and is deleted once read through.
DEFAULT_SPILL_SEGMENT_BYTES = 16 << 20
# Appends collect here before one write() call: 256 KiB amortises the syscall over ~1000 small
# entries while keeping unflushed bytes per spilling queue small.
WRITE_BUFFER_BYTES = 256 << 10
# Bytes read from disk per read() call when paging in; a larger record is read on its own.
READ_CHUNK_BYTES = 1 << 20
_KIND_ENTRY = 1
_KIND_CRC = zlib.crc32(bytes((_KIND_ENTRY,)))  # CRC state after the kind byte
_ENTRY = struct.Struct(">qqIBBddqHHI")
# seq, message id, delivery_count, flags, priority, expires_at, timestamp, expiration_ms,
# then the lengths of exchange, routing key and properties; the body is the rest of the record.
_REDELIVERED, _PERSISTENT, _HAS_EXPIRES_AT, _HAS_EXPIRATION = 1, 2, 4, 8
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_OURS = re.compile(r"^\d{8}-")  # names of backing directories this module creates
_NAME_CHARS = 48  # sanitised queue-name part of a directory name, for humans only


class SpillClosedError(RuntimeError):
    """The backing was closed (its queue is gone) and is not used again."""


class SpillCorruptError(OSError):
    """A spill file does not hold what was written to it (disk fault or outside interference)."""


def _encode(entry: QueueEntry, out: bytearray) -> int:
    """Append one framed record to ``out``; returns the body size."""
    m = entry.message
    flags = (
        (_REDELIVERED if entry.redelivered else 0)
        | (_PERSISTENT if m.persistent else 0)
        | (_HAS_EXPIRES_AT if entry.expires_at is not None else 0)
        | (_HAS_EXPIRATION if m.expiration_ms is not None else 0)
    )
    exchange = m.exchange.encode()
    routing_key = m.routing_key.encode()
    props, body = m.props_raw, m.body
    meta = _ENTRY.pack(
        entry.seq, m.id, entry.delivery_count, flags, m.priority,
        entry.expires_at if entry.expires_at is not None else 0.0, m.timestamp,
        m.expiration_ms if m.expiration_ms is not None else 0,
        len(exchange), len(routing_key), len(props),
    )
    crc = zlib.crc32(body, zlib.crc32(props, zlib.crc32(
        routing_key, zlib.crc32(exchange, zlib.crc32(meta, _KIND_CRC)))))
    length = len(meta) + len(exchange) + len(routing_key) + len(props) + len(body)
    out += HEADER.pack(length, crc, _KIND_ENTRY)
    out += meta
    out += exchange
    out += routing_key
    out += props
    out += body
    return len(body)


def _decode(buf: bytes, start: int, end: int) -> QueueEntry:
    (seq, mid, delivery_count, flags, priority, expires_at, timestamp, expiration_ms,
     n_ex, n_rk, n_props) = _ENTRY.unpack_from(buf, start)
    p = start + _ENTRY.size
    exchange = buf[p : p + n_ex].decode()
    p += n_ex
    routing_key = buf[p : p + n_rk].decode()
    p += n_rk
    props = buf[p : p + n_props]
    p += n_props
    message = Message(
        mid, exchange, routing_key, props, buf[p:end], bool(flags & _PERSISTENT), priority,
        expiration_ms if flags & _HAS_EXPIRATION else None, None, timestamp,
    )
    return QueueEntry(seq, message, bool(flags & _REDELIVERED), delivery_count,
                      expires_at if flags & _HAS_EXPIRES_AT else None)


class WriteReport(Protocol):
    """Who hears about spill writes (the disk alarm): called on the event loop only."""

    def wrote(self, nbytes: int) -> None: ...
    def write_failed(self, writer: str) -> None: ...


@dataclass(slots=True)
class _Parsed:
    """What one parse of a chunk found."""

    taken: list[QueueEntry]
    used: int  # bytes of whole records consumed (good and skipped)
    body_bytes: int
    full: bool  # stopped at max_count or max_bytes
    skipped: int  # damaged records skipped
    skipped_bytes: int  # their body bytes (as their headers tell, when readable)
    fatal: str | None  # the rest of the chunk cannot be parsed


def _body_size(buf: bytes, start: int, end: int) -> int:
    """Body bytes of the record in ``buf[start:end]`` per its fields, clamped to the record."""
    size = end - start - _ENTRY.size
    if size < 0:
        return 0
    *_, n_ex, n_rk, n_props = _ENTRY.unpack_from(buf, start)
    return max(0, min(size - n_ex - n_rk - n_props, size))


def _count_records(buf: bytes | bytearray) -> tuple[int, int]:
    """Entries and body bytes in a buffer of whole records we encoded."""
    count = body = pos = 0
    while pos + HEADER_SIZE <= len(buf):
        length = HEADER.unpack_from(buf, pos)[0]
        end = pos + HEADER_SIZE + length
        count += 1
        body += _body_size(buf, pos + HEADER_SIZE, end)
        pos = end
    return count, body


@dataclass(slots=True)
class _File:
    seq: int
    path: Path
    size: int  # bytes written to the OS (the write file may hold more in the buffer)
    count: int = 0  # entries appended to it (buffered ones included)
    body_bytes: int = 0  # their body bytes


class SpillBacking:
    """One queue's FIFO of spilled entries (implements ``headrace.queues.backing.Backing``).

    A write that fails (disk full) is undone: the file is cut back to its last whole record and
    the bytes stay in the buffer, in memory, to be written by a later flush (``retry``); a reader
    that catches up with them reads them from the buffer. A record that cannot be read back (bad
    checksum, bad header, file cut short by someone else) is logged, skipped and counted in
    ``damaged``, and ``take_lost`` tells the queue how many entries and body bytes it lost; the
    read goes on with the next record, or the next file when the rest of this one is unreadable.
    """

    def __init__(self, directory: Path, *, segment_max_bytes: int = DEFAULT_SPILL_SEGMENT_BYTES,
                 report: WriteReport | None = None,
                 on_wanted: Callable[[], None] | None = None) -> None:
        self._dir = directory
        self._max = segment_max_bytes
        self._report = report
        self._on_wanted = on_wanted
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._files: deque[_File] = deque()  # head is read, tail is written; one file per ~_max
        self._next_seq = 1
        self._write_fd: int | None = None
        self._buf = bytearray()  # bounded by WRITE_BUFFER_BYTES plus one record, unless failing
        self.write_error: OSError | None = None  # the last write failed: the buffer waits for room
        self._read_fd: int | None = None
        self._read_off = 0  # offset in the head file
        self._read_count = 0  # entries taken or skipped from the head file
        self._read_body = 0  # their body bytes
        self._depth = 0
        self._byte_depth = 0
        self._lost = (0, 0)  # entries and body bytes skipped as damaged, not yet taken
        self.damaged = 0  # damaged records met since the start
        self._closed = False
        directory.mkdir(parents=True, exist_ok=True)

    # -- write side (event loop) ---------------------------------------------------------------

    def append(self, entries: Sequence[QueueEntry]) -> None:
        flushed = 0
        failing = self.write_error is not None
        with self._lock:
            if self._closed:
                raise SpillClosedError(str(self._dir))
            buf = self._buf
            for entry in entries:
                if self._write_fd is None or (self._files[-1].size + len(buf) >= self._max
                                              and self.write_error is None):
                    flushed += self._roll()
                tail = self._files[-1]
                size = _encode(entry, buf)
                tail.count += 1
                tail.body_bytes += size
                self._byte_depth += size
                self._depth += 1
                if len(buf) >= WRITE_BUFFER_BYTES and self.write_error is None:
                    flushed += self._flush()
        report = self._report
        if report is not None:  # (on the event loop: the disk alarm reacts at once)
            if flushed:
                report.wrote(flushed)
            if self.write_error is not None and not failing:
                report.write_failed("spill")

    def retry(self) -> bool:
        """Write what a failed write left in the buffer; True once nothing waits (event loop)."""
        with self._lock:
            if self.write_error is None or self._closed:
                return True
            flushed = self._flush()
        if flushed and self._report is not None:
            self._report.wrote(flushed)
        return self.write_error is None

    def _flush(self) -> int:
        """Write the buffer at the end of the tail file; returns bytes written (0 on failure, when
        the file is cut back and the buffer kept: see the class docstring)."""
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

    # -- read side (pager thread) --------------------------------------------------------------

    def read_batch(self, max_count: int, max_bytes: int) -> list[QueueEntry]:
        """Up to ``max_count`` entries in append order, stopping before ``max_bytes`` of bodies
        would be exceeded (but always at least one entry while any is held). Damaged records are
        skipped (see the class docstring); this never raises for what it finds in its files."""
        out: list[QueueEntry] = []
        body_bytes = 0
        with self._read_lock:
            while len(out) < max_count:
                with self._lock:
                    if self._closed or self._depth == 0:
                        break
                    head = self._files[0]
                    if len(self._files) == 1 and self._read_off >= head.size and self._buf:
                        self._flush()  # the reader has caught up with the writer's buffer
                        if self.write_error is not None:  # no room: take them from memory
                            taken, got = self._take_buffered(max_count - len(out),
                                                             max_bytes - body_bytes, not out)
                            out += taken
                            body_bytes += got
                            break
                    end = head.size
                    if self._read_off >= end:
                        self._finish_head()
                        continue
                    if self._read_fd is None:
                        self._read_fd = os.open(head.path, os.O_RDONLY)
                    fd, off = self._read_fd, self._read_off
                try:
                    chunk = os.pread(fd, min(end - off, READ_CHUNK_BYTES), off)
                    r = self._parse(chunk, fd, off, max_count - len(out), max_bytes - body_bytes,
                                    not out)
                except OSError as exc:  # EIO, or the file was removed under us
                    self._skip_rest_of_head(head, str(exc))
                    continue
                if not r.used and not r.full and r.fatal is None:
                    r.fatal = f"no whole record at offset {off}"  # the file ends mid-record
                out += r.taken
                body_bytes += r.body_bytes
                with self._lock:
                    self._read_off += r.used
                    self._read_count += len(r.taken) + r.skipped
                    self._read_body += r.body_bytes + r.skipped_bytes
                    self._depth -= len(r.taken)
                    self._byte_depth -= r.body_bytes
                    if r.skipped:
                        self._record_damage(r.skipped, r.skipped, r.skipped_bytes,
                                            "bad checksum or fields")
                    if self._depth == 0 and len(self._files) == 1 and not self._buf:
                        self._finish_head()  # drained: free the file now, not at the next roll
                if r.fatal is not None:
                    self._skip_rest_of_head(head, r.fatal)
                    continue
                if r.full:
                    break
        return out

    def _take_buffered(self, max_count: int, max_bytes: int, need_one: bool
                       ) -> tuple[list[QueueEntry], int]:
        """Entries from the front of the unwritten buffer (called with ``_lock`` held)."""
        r = self._parse(bytes(self._buf), -1, 0, max_count, max_bytes, need_one)
        del self._buf[:r.used]  # (whole records we encoded: nothing in it is damaged)
        head = self._files[0]
        head.count -= len(r.taken)
        head.body_bytes -= r.body_bytes
        self._depth -= len(r.taken)
        self._byte_depth -= r.body_bytes
        return r.taken, r.body_bytes

    def _skip_rest_of_head(self, head: _File, why: str) -> None:
        """The head file cannot be read on from here: count what it still held as lost and move
        to the next file (or, for the only file, past everything written to it)."""
        with self._lock:
            if self._closed or not self._files or self._files[0] is not head:
                return
            lost = max(head.count - self._read_count, 0)
            lost_bytes = max(head.body_bytes - self._read_body, 0)
            if len(self._files) == 1 and self._buf:
                # the buffer's entries are whole and still ahead: only the file's part is lost
                buffered = _count_records(self._buf)
                lost = max(lost - buffered[0], 0)
                lost_bytes = max(lost_bytes - buffered[1], 0)
            self._record_damage(1, lost, lost_bytes, f"{why}; the rest of {head.path.name} skipped")
            self._read_count += lost
            self._read_body += lost_bytes
            self._read_off = head.size
            if len(self._files) > 1 or not self._buf:
                self._finish_head()

    def _record_damage(self, records: int, lost: int, lost_bytes: int, what: str) -> None:
        """Count damaged records and the entries they took (called with ``_lock`` held)."""
        self.damaged += records
        self._depth -= lost
        self._byte_depth -= lost_bytes
        self._lost = (self._lost[0] + lost, self._lost[1] + lost_bytes)
        log.error("spill %s: damaged record, %d entries lost: %s", self._dir, lost, what)

    def want_page_in(self) -> None:
        if self._on_wanted is not None:
            self._on_wanted()

    def take_lost(self) -> tuple[int, int]:
        """Entries and body bytes lost to damaged records since the last call."""
        with self._lock:
            lost, self._lost = self._lost, (0, 0)
        return lost

    def _parse(self, chunk: bytes, fd: int, off: int, max_count: int, max_bytes: int,
               need_one: bool) -> _Parsed:
        """Decode whole records from ``chunk``. A record whose checksum or fields are wrong is
        skipped and counted (its extent is known); a bad header or a record cut short ends the
        parse with ``fatal`` set, after the good records before it (the rest of the file is
        unreadable: nothing says where the next record starts)."""
        r = _Parsed([], 0, 0, False, 0, 0, None)
        taken = r.taken
        pos = 0
        body_bytes = 0
        unpack = HEADER.unpack_from
        while len(taken) < max_count and pos + HEADER_SIZE <= len(chunk):
            length, crc, kind = unpack(chunk, pos)
            rec_end = pos + HEADER_SIZE + length
            if length > MAX_RECORD_SIZE or kind != _KIND_ENTRY:
                r.fatal = f"bad record header at offset {off + pos}"
                break
            if rec_end > len(chunk):
                if pos:
                    break  # the rest comes with the next read
                chunk = os.pread(fd, HEADER_SIZE + length, off)  # one record larger than a chunk
                if len(chunk) < rec_end:
                    r.fatal = f"short record at offset {off}"
                    break
            body_start = pos + HEADER_SIZE
            entry = None
            if zlib.crc32(memoryview(chunk)[body_start:rec_end], _KIND_CRC) == crc:
                try:
                    entry = _decode(chunk, body_start, rec_end)
                except (struct.error, UnicodeDecodeError, ValueError):
                    entry = None
            if entry is None:
                r.skipped += 1
                r.skipped_bytes += _body_size(chunk, body_start, rec_end)
                log.error("spill %s: damaged record at offset %d skipped", self._dir, off + pos)
                pos = rec_end
                continue
            size = len(entry.message.body)
            if body_bytes + size > max_bytes and (taken or not need_one):
                r.full = True
                break
            taken.append(entry)
            body_bytes += size
            pos = rec_end
        r.used, r.body_bytes = pos, body_bytes
        r.full = r.full or len(taken) >= max_count
        return r

    def _finish_head(self) -> None:
        """Drop the head file once read through (called with ``_lock`` held)."""
        head = self._files.popleft()
        if self._read_fd is not None:
            os.close(self._read_fd)
            self._read_fd = None
        self._read_off = 0
        if not self._files and self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None
        head.path.unlink(missing_ok=True)

    # -- figures and lifecycle -----------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def depth(self) -> int:
        return self._depth  # an int read is atomic; no lock on the hot path

    def byte_depth(self) -> int:
        return self._byte_depth

    def disk_bytes(self) -> int:
        with self._lock:
            return sum(f.size for f in self._files) + len(self._buf)

    def drop(self) -> None:
        """Forget every entry and delete the files (waits for a page-in in progress)."""
        with self._read_lock, self._lock:
            self._drop_files()

    def _drop_files(self) -> None:
        for fd in (self._read_fd, self._write_fd):
            if fd is not None:
                os.close(fd)
        self._read_fd = self._write_fd = None
        for f in self._files:
            f.path.unlink(missing_ok=True)
        self._files.clear()
        self._buf.clear()
        self._read_off = self._depth = self._byte_depth = 0

    def close(self) -> None:
        """Delete everything; later appends raise ``SpillClosedError``."""
        with self._read_lock, self._lock:
            if self._closed:
                return
            self._drop_files()
            self._closed = True
            shutil.rmtree(self._dir, ignore_errors=True)


class SpillStore:
    """Hands out one ``SpillBacking`` per queue under ``directory``, which it wipes at start."""

    def __init__(self, directory: Path, *, segment_max_bytes: int = DEFAULT_SPILL_SEGMENT_BYTES,
                 report: WriteReport | None = None) -> None:
        self._dir = Path(directory)
        self._max = segment_max_bytes
        self._report = report  # told of bytes appends wrote and of failed writes (disk alarm)
        # called (on the event loop) when a queue wants spilled entries back: wakes the pager
        self.on_page_wanted: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._count = 0
        self._backings: list[SpillBacking] = []
        self._dir.mkdir(parents=True, exist_ok=True)
        for entry in os.scandir(self._dir):
            # Only what this module creates is removed, so a misconfigured path loses nothing else.
            if _OURS.match(entry.name) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            elif entry.name.endswith(SEGMENT_SUFFIX) and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)

    def backing(self, name: str) -> SpillBacking:
        """A new, empty backing for queue ``name``; every call gets its own directory."""
        with self._lock:
            self._count += 1
            safe = _UNSAFE.sub("_", name)[:_NAME_CHARS]
            backing = SpillBacking(self._dir / f"{self._count:08d}-{safe}",
                                   segment_max_bytes=self._max, report=self._report,
                                   on_wanted=self._page_wanted)
            self._backings = [b for b in self._backings if not b.closed]
            self._backings.append(backing)
            return backing

    def _page_wanted(self) -> None:
        if self.on_page_wanted is not None:
            self.on_page_wanted()

    def disk_bytes(self) -> int:
        return sum(b.disk_bytes() for b in self._live())

    def _live(self) -> list[SpillBacking]:
        with self._lock:
            return [b for b in self._backings if not b.closed]

    def failing(self) -> bool:
        """Some backing holds entries in memory that a failed write could not put on disk."""
        return any(b.write_error is not None for b in self._live())

    def retry(self) -> bool:
        """Write what failed writes left in memory; True once nothing waits (event loop)."""
        ok = True
        for b in self._live():
            ok = b.retry() and ok
        return ok

    def close(self) -> None:
        with self._lock:
            backings, self._backings = self._backings, []
        for b in backings:
            b.close()
