"""What a spill file holds, and reading it: one framed record (``records.py``) per queue entry.

``read_range`` is the only code that runs in the pager's worker thread: a pure function of a path
and a byte range the event loop planned, which returns what it parsed and changes no shared state.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from headrace.queues.backing import PropsInfo, RecoveredRow
from headrace.queues.message import Message, QueueEntry

from .records import HEADER, HEADER_SIZE, MAX_RECORD_SIZE

__all__ = ["Parsed", "ReadPlan", "count_records", "encode", "encode_recovered", "parse", "read_range"]

log = logging.getLogger("headrace.persistence.spill")

# Bytes read from disk per read() call when paging in; a larger record is read on its own.
READ_CHUNK_BYTES = 1 << 20
_KIND_ENTRY = 1
_KIND_CRC = zlib.crc32(bytes((_KIND_ENTRY,)))  # CRC state after the kind byte
_ENTRY = struct.Struct(">qqIBBddqHHI")
# seq, message id, delivery_count, flags, priority, expires_at, timestamp, expiration_ms,
# then the lengths of exchange, routing key and properties; the body is the rest of the record.
_REDELIVERED, _PERSISTENT, _HAS_EXPIRES_AT, _HAS_EXPIRATION = 1, 2, 4, 8


def encode(entry: QueueEntry, out: bytearray) -> int:
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


def encode_recovered(rows: Iterator[RecoveredRow], seq: int, out: bytearray, props_info: PropsInfo,
                     ttl: float | None, until: int) -> tuple[int, int]:
    """Append the records ``encode`` would write for recovered persistent messages, numbered from
    ``seq``, until ``out`` holds ``until`` bytes (at least one) or ``rows`` ends; returns (records,
    body bytes). Each takes its exchange, routing key, props and body as the one span they
    already are in the store; the properties are read only when their flags announce a priority
    or an expiration (``props_info``), as recovery's message path does."""
    count = body_bytes = 0
    pack_entry, pack_frame, crc32 = _ENTRY.pack, HEADER.pack, zlib.crc32
    for mid, deliveries, ts_ms, tail, n_ex, n_rk, n_props in rows:
        priority, expiration = 0, None
        if n_props >= 2:
            at = n_ex + n_rk
            if tail[at] & 0x09 or tail[at + 1] & 0x01:  # priority (bit 11), expiration (bit 8), more flags
                found, expiration = props_info(tail[at:at + n_props])
                priority = found or 0
        timestamp = ts_ms / 1000
        life = ttl
        flags = _PERSISTENT | (_REDELIVERED if deliveries else 0)
        if expiration is not None:
            flags |= _HAS_EXPIRATION
            life = expiration / 1000 if life is None else min(life, expiration / 1000)
        expires_at = 0.0
        if life is not None:
            flags |= _HAS_EXPIRES_AT
            expires_at = timestamp + life
        meta = pack_entry(seq + count, mid, deliveries, flags, priority, expires_at, timestamp,
                          expiration if expiration is not None else 0, n_ex, n_rk, n_props)
        out += pack_frame(len(meta) + len(tail), crc32(tail, crc32(meta, _KIND_CRC)), _KIND_ENTRY)
        out += meta
        out += tail
        count += 1
        body_bytes += len(tail) - n_ex - n_rk - n_props
        if len(out) >= until:
            break
    return count, body_bytes


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


def _body_size(buf: bytes | bytearray, start: int, end: int) -> int:
    """Body bytes of the record in ``buf[start:end]`` per its fields, clamped to the record."""
    size = end - start - _ENTRY.size
    if size < 0:
        return 0
    *_, n_ex, n_rk, n_props = _ENTRY.unpack_from(buf, start)
    return max(0, min(size - int(n_ex) - int(n_rk) - int(n_props), size))


def count_records(buf: bytes | bytearray) -> tuple[int, int]:
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
class Parsed:
    """What one read found."""

    taken: list[QueueEntry]
    used: int = 0  # bytes of whole records consumed (good and skipped)
    body_bytes: int = 0
    full: bool = False  # stopped at max_count or max_bytes
    skipped: int = 0  # damaged records skipped
    skipped_bytes: int = 0  # their body bytes (as their headers tell, when readable)
    fatal: str | None = None  # the rest cannot be parsed (nothing says where the next record is)


def parse(chunk: bytes, max_count: int, max_bytes: int, need_one: bool, where: str,
          base: int = 0, into: Parsed | None = None) -> Parsed:
    """Decode whole records from ``chunk`` into ``into`` (a new ``Parsed`` by default; the bounds
    count what ``into`` already holds). A record
    whose checksum or fields are wrong is skipped and counted (its extent is known); a bad header
    ends the parse with ``fatal``. A record cut by the end of ``chunk`` is left for the caller."""
    r = into if into is not None else Parsed([])
    taken = r.taken
    pos = 0
    unpack = HEADER.unpack_from
    while len(taken) < max_count and pos + HEADER_SIZE <= len(chunk):
        length, crc, kind = unpack(chunk, pos)
        rec_end = pos + HEADER_SIZE + length
        if length > MAX_RECORD_SIZE or kind != _KIND_ENTRY:
            r.fatal = f"bad record header at offset {base + pos}"
            break
        if rec_end > len(chunk):
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
            log.error("spill %s: damaged record at offset %d skipped", where, base + pos)
            pos = rec_end
            continue
        size = len(entry.message.body)
        if r.body_bytes + size > max_bytes and (taken or not need_one):
            r.full = True
            break
        taken.append(entry)
        r.body_bytes += size
        pos = rec_end
    r.used += pos
    r.full = r.full or len(taken) >= max_count
    return r


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """A read the event loop planned: records of ``path`` in ``[offset, end)``, bytes written
    and never touched again. ``generation`` tells the backing whether the plan is still current
    when its result comes back."""

    path: Path
    offset: int
    end: int
    max_count: int
    max_bytes: int
    need_one: bool
    generation: int

    def run(self) -> Parsed:
        """Read and parse (in a worker thread); OSError of the read becomes ``fatal``."""
        return read_range(self)


def read_range(plan: ReadPlan) -> Parsed:
    r = Parsed([])
    where = str(plan.path)
    try:
        fd = os.open(plan.path, os.O_RDONLY)
    except OSError as exc:
        r.fatal = str(exc)
        return r
    try:
        off = plan.offset
        while off < plan.end and not r.full and r.fatal is None:
            want = min(plan.end - off, READ_CHUNK_BYTES)
            chunk = os.pread(fd, want, off)
            if len(chunk) >= HEADER_SIZE:
                length = HEADER.unpack_from(chunk, 0)[0]
                if HEADER_SIZE + length > len(chunk) and length <= MAX_RECORD_SIZE:
                    if off + HEADER_SIZE + length > plan.end:
                        r.fatal = f"short record at offset {off}"
                        break
                    chunk = os.pread(fd, HEADER_SIZE + length, off)  # one record above a chunk
            before = r.used
            parse(chunk, plan.max_count, plan.max_bytes, plan.need_one, where, off, r)
            if r.used == before and not r.full and r.fatal is None:
                r.fatal = f"no whole record at offset {off}"  # cut short by someone else
            off = plan.offset + r.used
    except OSError as exc:
        r.fatal = str(exc)
    finally:
        os.close(fd)
    return r
