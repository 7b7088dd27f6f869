"""Per-chunk Bloom filters of a stream's filter values (RabbitMQ 3.13's stream filtering), kept in a
side file beside each segment (``<base>.flt``) so the record format is unchanged.

A chunk is one write of the stream writer into one segment: the records of one flusher group, as
an osiris chunk is one batch written together. Each chunk has one fixed entry: its first offset,
the offset after it, its byte span in the segment, whether it holds a message without a filter
value, and a Bloom filter of the distinct values it holds. A filtered reader skips a chunk whose
filter excludes every value it wants without reading the chunk's bytes.

Rule: the writer is the segment's writer (``mirror_log.MirrorLog``, which appends the entry right
after the chunk's records, and cuts entries past a torn tail at recovery); readers only read the
file. A chunk with no entry (the file lost, or a reader ahead of it) is simply read: the filter is a
hint that may only say "surely not here", never a reason to miss a message.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from . import replica_tap

__all__ = ["BLOOM_BYTES", "CHUNK_ENTRY", "FILTER_SUFFIX", "Bloom", "Chunk", "StreamFilter", "chunk_entry",
           "read_chunks", "truncate_chunks"]

FILTER_SUFFIX = ".flt"
BLOOM_BYTES = 16  # RabbitMQ's default x-stream-filter-size-bytes: 128 bits per chunk
BLOOM_HASHES = 2  # k: best for the few distinct values a chunk usually holds
CHUNK_HEAD = struct.Struct(">QQQQB")  # first offset, next offset, start position, end position, flags
CHUNK_ENTRY = struct.Struct(f">QQQQB{BLOOM_BYTES}s")
HAS_UNFILTERED = 1


def _positions(value: bytes, bits: int) -> tuple[int, ...]:
    """Bit positions of ``value``: a stable hash (Python's ``hash`` changes with each process, and
    the filters outlive it), double hashing for the k positions."""
    digest = hashlib.blake2b(value, digest_size=8).digest()
    h1 = int.from_bytes(digest[:4], "big")
    h2 = int.from_bytes(digest[4:], "big") | 1
    return tuple((h1 + i * h2) % bits for i in range(BLOOM_HASHES))


class Bloom:
    """A Bloom filter over ``size`` bytes: no false negatives, false positives bounded by its fill."""

    __slots__ = ("bits",)

    def __init__(self, data: bytes | None = None) -> None:
        self.bits = int.from_bytes(data, "big") if data else 0

    def add(self, value: bytes, size: int = BLOOM_BYTES) -> None:
        for p in _positions(value, size * 8):
            self.bits |= 1 << p

    def may_hold(self, value: bytes, size: int = BLOOM_BYTES) -> bool:
        bits = self.bits
        return all(bits >> p & 1 for p in _positions(value, size * 8))

    def to_bytes(self, size: int = BLOOM_BYTES) -> bytes:
        return self.bits.to_bytes(size, "big")


@dataclass(frozen=True, slots=True)
class Chunk:
    first: int  # first offset
    next: int  # the offset after its last record
    start: int  # byte span in the segment
    end: int
    unfiltered: bool  # holds a message without a filter value
    bloom: Bloom


def chunk_entry(first: int, next_offset: int, start: int, end: int, values: Iterable[bytes | None]) -> bytes:
    """The side-file entry of one chunk holding records with these filter values (None: none)."""
    bloom = Bloom()
    flags = 0
    for value in set(values):
        if value is None:
            flags |= HAS_UNFILTERED
        else:
            bloom.add(value)
    return CHUNK_ENTRY.pack(first, next_offset, start, end, flags, bloom.to_bytes())


def read_chunks(segment: Path, skip: int = 0) -> list[Chunk]:
    """The chunks a segment's side file lists, in order, from its ``skip``-th on (a torn last
    entry is left out): a reader at the live end reads only the entries added since."""
    size = CHUNK_ENTRY.size
    try:
        with open(segment.with_suffix(FILTER_SUFFIX), "rb") as f:
            f.seek(skip * size)
            data = f.read()
    except OSError:
        return []
    return [Chunk(first, nxt, start, end, bool(flags & HAS_UNFILTERED), Bloom(bloom))
            for first, nxt, start, end, flags, bloom in
            (CHUNK_ENTRY.unpack_from(data, i) for i in range(0, len(data) - len(data) % size, size))]


def truncate_chunks(segment: Path, valid_end: int) -> None:
    """Drop the entries of chunks past ``valid_end`` (a torn tail cut at recovery): bytes written
    there later are other records, which a stale filter could wrongly exclude."""
    path = segment.with_suffix(FILTER_SUFFIX)
    try:
        data = path.read_bytes()
    except OSError:
        return
    size = CHUNK_ENTRY.size
    keep = b"".join(data[i:i + size] for i in range(0, len(data) - len(data) % size, size)
                    if CHUNK_HEAD.unpack_from(data, i)[3] <= valid_end)
    if len(keep) != len(data):
        path.write_bytes(keep)
        replica_tap.replaced(path, keep)


@dataclass(frozen=True, slots=True)
class StreamFilter:
    """What a filtered consumer wants: records whose filter value is one of ``values``, and those
    without one when ``match_unfiltered``."""
    values: frozenset[bytes]
    match_unfiltered: bool = False

    def skips(self, chunk: Chunk) -> bool:
        """Whether no record of ``chunk`` can match (probabilistic the other way only)."""
        if self.match_unfiltered and chunk.unfiltered:
            return False
        return not any(chunk.bloom.may_hold(v) for v in self.values)

    def matches(self, value: bytes | None) -> bool:
        """The exact check of one record (the chunk filter only rules chunks out)."""
        return self.match_unfiltered if value is None else value in self.values
