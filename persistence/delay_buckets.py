"""Bucket files: where an ``x-delayed-message`` exchange's far-off messages wait on disk.

Rule 1: one ``DelayBuckets`` per vhost, owned by that vhost's ``DelayedMessages``
(``server/broker/delayed.py``), which alone decides what goes in which bucket and when a bucket is
read back. A bucket is one file, ``<level>-<index>``, of records appended in publish order; this
module knows the record framing and the files, nothing of due times beyond carrying them.
Rule 2: the files are a cache, not the record. Nothing is fsynced and the directory is wiped when
the owner is made (at start): a persistent delayed message's durable record is its Delay record in
the message store, and recovery schedules it again from there, spilling it anew.

Why buffered appends: a publish costs a ``bytearray.extend``; a bucket's buffer goes to its file
once it holds ``FLUSH_BYTES`` or all buffers together hold ``FLUSH_ALL_BYTES``, so the memory the
buffers take is bounded whatever the number of messages, and no file handle stays open.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

__all__ = ["HEAD", "DelayBuckets", "DelayRecord", "decode", "encode"]

FLUSH_BYTES = 256 << 10
FLUSH_ALL_BYTES = 8 << 20
# due (s, float), publish order, store message id (0: transient), then the four lengths; exchange,
# routing key, properties and body follow
HEAD = _HEAD = struct.Struct("<dQQHHII")

# (due, order, message id, exchange, routing key, properties, body)
DelayRecord = tuple[float, int, int, str, str, bytes, bytes]


def encode(due: float, order: int, message_id: int, exchange: str, routing_key: str, props_raw: bytes,
           body: bytes) -> bytes:
    ex, rk = exchange.encode(), routing_key.encode()
    return b"".join((_HEAD.pack(due, order, message_id, len(ex), len(rk), len(props_raw), len(body)),
                     ex, rk, props_raw, body))


def decode(data: bytes | memoryview) -> Iterator[tuple[int, DelayRecord]]:
    """The whole records at the start of ``data``, each with the offset just past it."""
    pos, end, size = 0, len(data), _HEAD.size
    view = memoryview(data)
    while pos + size <= end:
        due, order, mid, lex, lrk, lprops, lbody = _HEAD.unpack_from(view, pos)
        stop = pos + size + lex + lrk + lprops + lbody
        if stop > end:
            return
        a = pos + size
        b = a + lex
        c = b + lrk
        d = c + lprops
        yield stop, (due, order, mid, bytes(view[a:b]).decode(), bytes(view[b:c]).decode(),
                     bytes(view[c:d]), bytes(view[d:stop]))
        pos = stop


class DelayBuckets:
    """Named append-only bucket files under ``directory`` (wiped on construction)."""

    __slots__ = ("_dir", "_buffers", "_buffered", "_made")

    def __init__(self, directory: Path) -> None:
        self._dir = Path(directory)
        shutil.rmtree(self._dir, ignore_errors=True)
        self._made = False  # the directory is made on the first write
        self._buffers: dict[str, bytearray] = {}
        self._buffered = 0

    def _path(self, name: str) -> Path:
        return self._dir / name

    def append(self, name: str, record: bytes) -> None:
        buf = self._buffers.get(name)
        if buf is None:
            buf = self._buffers[name] = bytearray()
        buf += record
        self._buffered += len(record)
        if len(buf) >= FLUSH_BYTES:
            self._flush(name)
        elif self._buffered >= FLUSH_ALL_BYTES:
            for other in list(self._buffers):
                self._flush(other)

    def _flush(self, name: str) -> None:
        buf = self._buffers.pop(name, None)
        if not buf:
            return
        if not self._made:
            self._dir.mkdir(parents=True, exist_ok=True)
            self._made = True
        with open(self._path(name), "ab") as f:
            f.write(buf)
        self._buffered -= len(buf)

    def read(self, name: str, offset: int, max_bytes: int) -> tuple[bytes, bool]:
        """Up to ``max_bytes`` (at least one whole record) of bucket ``name`` from ``offset``, and
        whether that reaches its end. The caller advances ``offset`` by the records it decoded."""
        self._flush(name)
        try:
            with open(self._path(name), "rb") as f:
                f.seek(offset)
                data = f.read(max_bytes)
                if len(data) == max_bytes:
                    head = _HEAD.unpack_from(data, 0) if len(data) >= _HEAD.size else None
                    need = _HEAD.size + sum(head[3:]) if head is not None else _HEAD.size
                    if need > len(data):  # one record larger than the chunk: read it whole
                        data += f.read(need - len(data))
                    return data, f.read(1) == b""
                return data, True
        except FileNotFoundError:
            return b"", True

    def remove(self, name: str) -> None:
        buf = self._buffers.pop(name, None)
        if buf:
            self._buffered -= len(buf)
        try:
            os.unlink(self._path(name))
        except FileNotFoundError:
            pass

    def replace(self, name: str, data: bytes) -> None:
        """Bucket ``name`` now holds exactly ``data`` (an exchange's records were taken out)."""
        self.remove(name)
        if data:
            self.append(name, data)

    def buffered_bytes(self) -> int:
        return self._buffered

    def close(self) -> None:
        """The vhost is gone: its files go."""
        self._buffers.clear()
        self._buffered = 0
        shutil.rmtree(self._dir, ignore_errors=True)
