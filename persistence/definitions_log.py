"""The durable definitions as a snapshot plus an append-only log of changes.

LavinMQ keeps its definitions in ``definitions.amqp``, an append-only file of declare and delete
frames it compacts now and then; go-diskqueue writes its metadata the same careful way. Here:

- ``definitions.json``: the snapshot, a RabbitMQ definitions document (the same format as before,
  so a file written by an older headrace or exported by RabbitMQ loads as a snapshot with no log),
  plus the key ``headrace_log_generation`` naming the log that continues it;
- ``definitions.log``: an 16-byte header (magic, generation) then records, each
  ``<u32 length><u32 crc32(payload)><payload>`` with a JSON payload (see ``DefinitionsModel.apply``).

Writing one change costs one record, not the whole document. After a kill -9 the tail may hold
half a record: ``load`` cuts the file back to the last whole one (nothing after it was
acknowledged, since a reply waits for the fsync). ``compact`` writes a new snapshot (tmp, fsync,
rename) and then an empty log of the next generation; a crash between the two leaves a log whose
generation the snapshot does not name, which ``load`` ignores as already included.

Owner: one ``DefinitionsLog`` per data directory. The broker's start loads and compacts it; after
that only the flusher's group writes it, in a worker thread (server/net/definitions_writer.py).
"""

from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from pathlib import Path
from typing import Any

from .definitions import DefinitionsError, DefinitionsStore
from .definitions_model import DefinitionsModel
from . import replica_tap
from .fsync import fsync_dir

__all__ = ["COMPACT_MIN_BYTES", "DefinitionsLog", "encode_record"]

log = logging.getLogger("headrace.definitions")

MAGIC = b"HRDEFLG1"
HEADER = struct.Struct("<8sQ")  # magic, generation
RECORD = struct.Struct("<II")  # payload length, crc32 of the payload
GENERATION_KEY = "headrace_log_generation"
# The log is compacted into a new snapshot once it is larger than this and than the snapshot
# itself: the bytes written stay linear in the changes (each compaction is paid for by at least
# as many bytes of records), and a restart replays at most about one snapshot's worth.
COMPACT_MIN_BYTES = 1 << 20


def encode_record(record: dict[str, Any]) -> bytes:
    payload = json.dumps(record, separators=(",", ":"), sort_keys=True, default=str).encode()
    return RECORD.pack(len(payload), zlib.crc32(payload)) + payload


class DefinitionsLog:
    def __init__(self, directory: Path, *, compact_min_bytes: int = COMPACT_MIN_BYTES) -> None:
        self.directory = Path(directory)
        self.snapshot = DefinitionsStore(self.directory / "definitions.json")
        self.path = self.directory / "definitions.log"
        self.compact_min_bytes = compact_min_bytes
        self.model = DefinitionsModel()
        self.generation = 0
        self.log_bytes = 0  # records in the current log, header excluded
        self.snapshot_bytes = 0
        self.fsyncs = 0  # made by this object since it was opened (for the benchmark's log line)
        self.bytes_written = 0
        self._fd: int | None = None

    # ------------------------------------------------------------------ start
    def load(self) -> dict[str, Any] | None:
        """The definitions (snapshot plus the log's whole records), or None when nothing was saved.
        A torn or corrupt tail is cut off the file here."""
        doc = self.snapshot.load()
        generation = 0
        if doc is not None:
            raw_gen = doc.pop(GENERATION_KEY, 0)
            generation = raw_gen if isinstance(raw_gen, int) else 0
            self.model = DefinitionsModel.from_doc(doc)
        replayed = self._replay(generation)
        self.generation = generation
        if doc is None and not replayed:
            return None
        return self.model.to_doc()

    def _replay(self, generation: int) -> int:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        if len(data) < HEADER.size:
            return 0  # torn while being created: compaction at start writes it again
        magic, log_gen = HEADER.unpack_from(data)
        if magic != MAGIC:
            raise DefinitionsError(f"{self.path}: not a headrace definitions log")
        if log_gen != generation:
            return 0  # older than the snapshot, which already holds its records
        pos, count = HEADER.size, 0
        while pos < len(data):
            if pos + RECORD.size > len(data):
                break
            length, crc = RECORD.unpack_from(data, pos)
            payload = data[pos + RECORD.size:pos + RECORD.size + length]
            if len(payload) < length or zlib.crc32(payload) != crc:
                break
            try:
                self.model.apply(json.loads(payload))
            except (ValueError, KeyError, TypeError) as exc:
                log.error("%s: record at byte %d cannot be applied (%s): the log is cut there", self.path, pos, exc)
                break
            pos += RECORD.size + length
            count += 1
        if pos < len(data):
            log.warning("%s: %d bytes after the last whole record (torn write): cut off", self.path, len(data) - pos)
            with open(self.path, "r+b") as f:
                f.truncate(pos)
                f.flush()
                os.fsync(f.fileno())
            replica_tap.truncated(self.path, pos)
        self.log_bytes = pos - HEADER.size
        return count

    # ------------------------------------------------------------------ writing
    def compact(self, doc: dict[str, Any] | None = None) -> None:
        """Write the snapshot (``doc``, or the model as the records left it) and start an empty log
        of the next generation."""
        if doc is not None:
            self.model = DefinitionsModel.from_doc(doc)
        snapshot = self.model.to_doc()
        generation = self.generation + 1
        snapshot[GENERATION_KEY] = generation
        self.snapshot_bytes = self.snapshot.save(snapshot)
        self.bytes_written += self.snapshot_bytes
        self.fsyncs += 2
        self.close()
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, HEADER.pack(MAGIC, generation))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        fsync_dir(self.directory)
        replica_tap.replaced(self.path, HEADER.pack(MAGIC, generation))
        self.fsyncs += 2
        self.bytes_written += HEADER.size
        self.generation = generation
        self.log_bytes = 0

    def append(self, records: list[dict[str, Any]], *, sync: bool = True) -> None:
        """Append ``records`` and fsync them; compacts when the log has grown past its bound. On a
        failed write the file is cut back to its last whole record and the OSError raised: the
        caller keeps the records and tries again."""
        if not records:
            return
        for record in records:  # first: a record the model refuses is never written (put/del are
            self.model.apply(record)  # idempotent, so records applied before a failed write may come again)
        data = b"".join(encode_record(r) for r in records)
        fd = self._open()
        good = HEADER.size + self.log_bytes
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if sync:
                os.fsync(fd)
                self.fsyncs += 1
        except OSError:
            try:
                os.ftruncate(fd, good)
            finally:
                self.close()
            raise
        replica_tap.wrote(self.path, good, data)
        self.log_bytes += len(data)
        self.bytes_written += len(data)
        if self.log_bytes > max(self.compact_min_bytes, self.snapshot_bytes):
            self.compact()

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
