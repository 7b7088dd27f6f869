"""Spill files: where a queue's transient overflow waits on disk (nsq's diskqueue, FIFO).

Each queue gets its own ``SpillBacking``: a directory of numbered files in the record framing of
``records.py``, one record per ``QueueEntry``. The event loop appends at the tail; a pager thread
reads batches from the head; a file is deleted as soon as it has been read to the end. Only counters
and the list of files are kept in RAM, so ten million spilled entries cost a few hundred bytes.

Nothing is fsynced and everything is wiped at start: transient messages do not survive a restart.

Rule 1: the write side (write file, buffer, tail) is changed only under ``_lock`` by ``append``.
Rule 2: the read side (read file, offset) is changed only under ``_read_lock`` by ``read_batch``
(which also takes ``_lock`` briefly to publish its progress); disk reads happen outside ``_lock``,
on bytes the writer has already flushed and never touches again.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import threading
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from headrace.queues.message import Message, QueueEntry

from .records import HEADER, HEADER_SIZE, MAX_RECORD_SIZE
from .segments import SEGMENT_SUFFIX, segment_path

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


@dataclass(slots=True)
class _File:
    seq: int
    path: Path
    size: int  # bytes written to the OS (the write file may hold more in the buffer)


class SpillBacking:
    """One queue's FIFO of spilled entries (implements ``headrace.queues.backing.Backing``)."""

    def __init__(self, directory: Path, *, segment_max_bytes: int = DEFAULT_SPILL_SEGMENT_BYTES
                 ) -> None:
        self._dir = directory
        self._max = segment_max_bytes
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._files: deque[_File] = deque()  # head is read, tail is written; one file per ~_max
        self._next_seq = 1
        self._write_fd: int | None = None
        self._buf = bytearray()  # bounded by WRITE_BUFFER_BYTES plus one record
        self._read_fd: int | None = None
        self._read_off = 0  # offset in the head file
        self._depth = 0
        self._byte_depth = 0
        self._closed = False
        directory.mkdir(parents=True, exist_ok=True)

    # -- write side (event loop) ---------------------------------------------------------------

    def append(self, entries: Sequence[QueueEntry]) -> None:
        with self._lock:
            if self._closed:
                raise SpillClosedError(str(self._dir))
            buf = self._buf
            for entry in entries:
                if self._write_fd is None or self._files[-1].size + len(buf) >= self._max:
                    self._roll()
                self._byte_depth += _encode(entry, buf)
                self._depth += 1
                if len(buf) >= WRITE_BUFFER_BYTES:
                    self._flush()

    def _flush(self) -> None:
        if self._buf:
            assert self._write_fd is not None
            os.write(self._write_fd, self._buf)  # regular files take the whole write
            self._files[-1].size += len(self._buf)
            self._buf.clear()

    def _roll(self) -> None:
        if self._write_fd is not None:
            self._flush()
            os.close(self._write_fd)
        seq = self._next_seq
        self._next_seq += 1
        path = segment_path(self._dir, seq)
        self._write_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self._files.append(_File(seq, path, 0))

    # -- read side (pager thread) --------------------------------------------------------------

    def read_batch(self, max_count: int, max_bytes: int) -> list[QueueEntry]:
        """Up to ``max_count`` entries in append order, stopping before ``max_bytes`` of bodies
        would be exceeded (but always at least one entry while any is held)."""
        out: list[QueueEntry] = []
        body_bytes = 0
        with self._read_lock:
            while len(out) < max_count:
                with self._lock:
                    if self._closed or self._depth == 0:
                        break
                    head = self._files[0]
                    if len(self._files) == 1 and self._read_off >= head.size:
                        self._flush()  # the reader has caught up with the writer's buffer
                    end = head.size
                    if self._read_off >= end:
                        self._finish_head()
                        continue
                    if self._read_fd is None:
                        self._read_fd = os.open(head.path, os.O_RDONLY)
                    fd, off = self._read_fd, self._read_off
                chunk = os.pread(fd, min(end - off, READ_CHUNK_BYTES), off)
                taken, used, got_bytes, full = self._parse(
                    chunk, fd, off, max_count - len(out), max_bytes - body_bytes, not out)
                if not used and not full:
                    raise SpillCorruptError(f"no whole record at {off} in {self._dir}")
                out += taken
                body_bytes += got_bytes
                with self._lock:
                    self._read_off += used
                    self._depth -= len(taken)
                    self._byte_depth -= got_bytes
                    if self._depth == 0 and len(self._files) == 1 and not self._buf:
                        self._finish_head()  # drained: free the file now, not at the next roll
                if full:
                    break
        return out

    def _parse(self, chunk: bytes, fd: int, off: int, max_count: int, max_bytes: int,
               need_one: bool) -> tuple[list[QueueEntry], int, int, bool]:
        """Decode whole records from ``chunk``; returns (entries, bytes used, body bytes, full)."""
        taken: list[QueueEntry] = []
        pos = 0
        body_bytes = 0
        unpack = HEADER.unpack_from
        while len(taken) < max_count and pos + HEADER_SIZE <= len(chunk):
            length, crc, kind = unpack(chunk, pos)
            rec_end = pos + HEADER_SIZE + length
            if length > MAX_RECORD_SIZE or kind != _KIND_ENTRY:
                raise SpillCorruptError(f"bad record header at {off + pos} in {self._dir}")
            if rec_end > len(chunk):
                if pos:
                    break  # the rest comes with the next read
                chunk = os.pread(fd, HEADER_SIZE + length, off)  # one record larger than a chunk
                if len(chunk) < rec_end:
                    raise SpillCorruptError(f"short record at {off} in {self._dir}")
            body_start = pos + HEADER_SIZE
            if zlib.crc32(memoryview(chunk)[body_start:rec_end], _KIND_CRC) != crc:
                raise SpillCorruptError(f"checksum mismatch at {off + pos} in {self._dir}")
            entry = _decode(chunk, body_start, rec_end)
            size = len(entry.message.body)
            if body_bytes + size > max_bytes and (taken or not need_one):
                return taken, pos, body_bytes, True
            taken.append(entry)
            body_bytes += size
            pos = rec_end
        return taken, pos, body_bytes, len(taken) >= max_count

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

    def __init__(self, directory: Path, *, segment_max_bytes: int = DEFAULT_SPILL_SEGMENT_BYTES
                 ) -> None:
        self._dir = Path(directory)
        self._max = segment_max_bytes
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
                                   segment_max_bytes=self._max)
            self._backings = [b for b in self._backings if not b.closed]
            self._backings.append(backing)
            return backing

    def disk_bytes(self) -> int:
        with self._lock:
            backings = list(self._backings)
        return sum(b.disk_bytes() for b in backings)

    def close(self) -> None:
        with self._lock:
            backings, self._backings = self._backings, []
        for b in backings:
            b.close()
