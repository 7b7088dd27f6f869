"""The replication tap: every durable change a node makes to its data directory, as ordered,
idempotent file operations a follower can apply to its own copy of the directory.

Owner: the one ``Tap`` installed for the process (``install``) holds the operations written since
the last ``take`` and the position count; the persistence writers only report to it, through the
module functions below, right after each write they make (``wrote``, ``truncated``, ``replaced``,
``deleted``). With no tap installed (a standalone broker, a follower) each report is one global
read and a ``None`` test: no copy, no lock.

Why file operations and not broker events: a follower then holds a byte-identical data directory
(message store, definitions log, stream and mirror logs, dedup journal, stream offsets), and a
follower that takes over starts the broker over it with the same recovery that a restart after
``kill -9`` runs, which the suite already proves. This is the shape of LavinMQ's replication
(followers receive the leader's file appends).

Why every operation names its offset: applying one twice leaves the same bytes, so a follower that
copies the files while the leader keeps writing (``snapshot``) only has to apply the operations
from the copy's start on top: whatever the copy caught of them is written again, the same.

Writers report from worker threads, so ``add`` takes a lock; the order of the operations on one
file is the order of its writer's system calls (one writer per file, persistence's Rule 1).

Operation encoding (integers big-endian): ``<u8 op><u16 path length><path><u64 n><u32 data
length><data>``; ``n`` is the offset of a write, the size of a truncation, unused otherwise.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DELETE", "KEEP_ONLY", "NODE_OWN", "REPLACE", "TRUNCATE", "WRITE", "FileOp", "Tap", "current", "decode_ops",
    "deleted", "encode_op", "install", "replaced", "truncated", "uninstall", "wrote",
]

WRITE, TRUNCATE, REPLACE, DELETE, KEEP_ONLY = 1, 2, 3, 4, 5
_HEAD = struct.Struct(">BH")
_TAIL = struct.Struct(">QI")
# files of the node itself, never replicated nor replaced by a copy: the data directory's lock
# (server/net/startup.py; its holder keeps it locked), the node's identity and highest epoch in the
# cluster, the mark of a copy in progress, the ports file the tests' launcher reads, and the message
# store's index checkpoint (each node writes its own from its log: persistence/store_checkpoint.py)
NODE_OWN = frozenset({"headrace.lock", "cluster.instance", "cluster.epoch", "replica.incomplete", "ports.json",
                      "store/index.ckpt"})
# a batch taken past this many bytes is cut: one replication frame stays well under the codec's bound
MAX_BATCH_BYTES = 8 << 20
# a write larger than this (a group of many records) is reported in pieces of it
WRITE_PIECE = 4 << 20


@dataclass(slots=True, frozen=True)
class FileOp:
    op: int
    path: str  # relative to the data directory, '/'-separated
    n: int
    data: bytes


def encode_op(op: int, path: str, n: int, data: bytes | bytearray | memoryview = b"") -> bytes:
    raw = path.encode()
    return _HEAD.pack(op, len(raw)) + raw + _TAIL.pack(n, len(data)) + bytes(data)


def decode_ops(payload: bytes) -> Iterator[FileOp]:
    """The operations of one batch; a malformed one is a ``ValueError`` (the codec's CRC already
    checked the bytes, so this means a peer that does not speak this format)."""
    at, end = 0, len(payload)
    while at < end:
        if end - at < _HEAD.size:
            raise ValueError(f"file operation header cut at byte {at}")
        op, plen = _HEAD.unpack_from(payload, at)
        at += _HEAD.size
        path = payload[at:at + plen].decode()
        at += plen
        if end - at < _TAIL.size:
            raise ValueError(f"file operation on {path!r} cut at byte {at}")
        n, dlen = _TAIL.unpack_from(payload, at)
        at += _TAIL.size
        data = payload[at:at + dlen]
        if len(data) != dlen or op not in (WRITE, TRUNCATE, REPLACE, DELETE, KEEP_ONLY):
            raise ValueError(f"file operation {op} on {path!r}: {len(data)} of {dlen} data bytes")
        at += dlen
        _check_path(path)
        yield FileOp(op, path, n, data)


def _check_path(path: str) -> None:
    """A peer's path stays inside the data directory (no absolute path, no '..')."""
    if not path or path.startswith("/") or ".." in path.split("/"):
        raise ValueError(f"file operation on {path!r}: not a path inside the data directory")


class Tap:
    def __init__(self, root: Path) -> None:
        self.root = str(Path(root).resolve())
        self._prefix = self.root + os.sep
        self._lock = threading.Lock()
        self._ops: list[bytes] = []
        self._bytes = 0
        self.position = 0  # batches taken so far: the replication position
        self.taken_bytes = 0

    def relative(self, path: str | os.PathLike[str]) -> str | None:
        full = os.path.abspath(path)
        if not full.startswith(self._prefix):
            return None
        rel = full[len(self._prefix):]
        if rel.startswith("spill" + os.sep) or rel.endswith(".tmp") or rel in NODE_OWN:
            return None  # transient (spill files are wiped at start) or the process's own
        return rel.replace(os.sep, "/")

    def add(self, op: int, path: str | os.PathLike[str], n: int, data: bytes | bytearray | memoryview = b"") -> None:
        rel = self.relative(path)
        if rel is None:
            return
        encoded = encode_op(op, rel, n, data)
        with self._lock:
            self._ops.append(encoded)
            self._bytes += len(encoded)

    @property
    def pending(self) -> int:
        return self._bytes

    def take(self) -> tuple[int, bytes] | None:
        """The operations since the last take as one batch and its position, or None. A batch over
        ``MAX_BATCH_BYTES`` is cut at an operation boundary; the rest waits for the next take."""
        with self._lock:
            if not self._ops:
                return None
            ops, size, cut = self._ops, 0, 0
            for cut, encoded in enumerate(ops):  # noqa: B007 - the index is the cut
                if size and size + len(encoded) > MAX_BATCH_BYTES:
                    break
                size += len(encoded)
            else:
                cut = len(ops)
            batch, self._ops = ops[:cut], ops[cut:]
            self._bytes -= size
            self.position += 1
            self.taken_bytes += size
            return self.position, b"".join(batch)


_tap: Tap | None = None


def install(tap: Tap) -> None:
    global _tap
    _tap = tap


def uninstall() -> None:
    global _tap
    _tap = None


def current() -> Tap | None:
    return _tap


def wrote(path: str | os.PathLike[str], offset: int, data: bytes | bytearray | memoryview | Sequence[bytes | bytearray]) -> None:
    """``data`` (or the chunks, in order) now lies at ``offset`` in ``path``."""
    tap = _tap
    if tap is None:
        return
    if not isinstance(data, (bytes, bytearray, memoryview)):
        data = b"".join(data)
    if len(data) <= WRITE_PIECE:
        tap.add(WRITE, path, offset, data)
        return
    view = memoryview(data)
    for at in range(0, len(view), WRITE_PIECE):  # a batch stays cuttable near MAX_BATCH_BYTES
        tap.add(WRITE, path, offset + at, view[at:at + WRITE_PIECE])


def truncated(path: str | os.PathLike[str], size: int) -> None:
    tap = _tap
    if tap is not None:
        tap.add(TRUNCATE, path, size)


def replaced(path: str | os.PathLike[str], data: bytes | None = None) -> None:
    """``path`` now holds exactly ``data`` (read back from the file when not given)."""
    tap = _tap
    if tap is None:
        return
    if data is None:
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            tap.add(DELETE, path, 0)
            return
    tap.add(REPLACE, path, 0, data)


def deleted(path: str | os.PathLike[str]) -> None:
    """``path`` (a file, or a directory with everything under it) is gone."""
    tap = _tap
    if tap is not None:
        tap.add(DELETE, path, 0)
