"""The journal of publish-deduplication keys: what lets a dedup window survive a restart or a kill.

One file, ``<data dir>/dedup/journal``, of records in the ``records`` framing, each a JSON
``[window id, key, expires at or null]`` (a null key: the window was deleted, its keys so far are
void), appended by the flusher with the message store's group (and fsynced before that group's
confirms go out). Recovery reads it oldest first and the
windows keep what is live and within their size; then, and whenever the file has grown past
``compact_bytes``, it is rewritten from a snapshot of the windows (write, fsync, rename).

Rule: one ``DedupJournal``, used by the flusher task only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from . import replica_tap
from .records import encode_record, iter_file_records

__all__ = ["DedupJournal"]

KIND_KEY = 1
KIND_KEYS = 2  # a JSON list of entries: what one group appends, encoded in one call
COMPACT_BYTES = 16 << 20
REWRITE_BATCH = 4096  # entries per record of a rewritten journal

Entry = tuple[str, "str | None", "float | None"]


class DedupJournal:
    def __init__(self, directory: Path, *, compact_bytes: int = COMPACT_BYTES) -> None:
        self.directory = Path(directory)
        self.path = self.directory / "journal"
        self.compact_bytes = compact_bytes
        self._file: BinaryIO | None = None
        self.size = 0

    def load(self) -> list[Entry]:
        """Every entry written and not torn, oldest first."""
        if not self.path.exists():
            return []
        out: list[Entry] = []
        for rec in iter_file_records(self.path):
            if rec.kind == KIND_KEY:
                wid, key, expires = json.loads(rec.payload)
                out.append((wid, key, expires))
            elif rec.kind == KIND_KEYS:
                out.extend((wid, key, expires) for wid, key, expires in json.loads(rec.payload))
        return out

    def append(self, entries: list[Entry], *, sync: bool) -> None:
        if not entries:
            return
        data = encode_record(KIND_KEYS, json.dumps(entries, separators=(",", ":")).encode())
        if self._file is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab")  # noqa: SIM115 - owned until close()
            self.size = self._file.tell()
        self._file.write(data)
        self._file.flush()
        if sync:
            os.fsync(self._file.fileno())
        replica_tap.wrote(self.path, self.size, data)
        self.size += len(data)

    @property
    def wants_compaction(self) -> bool:
        return self.size > self.compact_bytes

    def rewrite(self, entries: Iterable[Entry]) -> None:
        """Replaces the journal by ``entries`` (a snapshot of the live keys), atomically."""
        self.close()
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            batch = list(entries)
            for start in range(0, len(batch), REWRITE_BATCH):
                f.write(encode_record(KIND_KEYS, json.dumps(batch[start:start + REWRITE_BATCH],
                                                            separators=(",", ":")).encode()))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.size = self.path.stat().st_size
        replica_tap.replaced(self.path)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
