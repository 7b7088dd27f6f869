"""The definitions file: vhosts, users, exchanges, queues and bindings as one JSON document.

Saved the crash-safe way: write a temporary file in the same directory, fsync it, rename it over
the old one, fsync the directory. A reader therefore sees either the old file or the new one,
never a mix. Rule 1: one ``DefinitionsStore`` per file; it is the snapshot of the definitions log
(definitions_log.py), which owns it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from . import replica_tap
from .fsync import fsync_dir

__all__ = ["DefinitionsError", "DefinitionsStore"]

_TMP_SUFFIX = ".tmp"


class DefinitionsError(ValueError):
    """The definitions file exists but is not a JSON object."""


class DefinitionsStore:
    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._tmp = self._path.with_name(self._path.name + _TMP_SUFFIX)

    @property
    def path(self) -> Path:
        return self._path

    def load(self) -> dict[str, Any] | None:
        """The saved definitions, or None when nothing was saved yet."""
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DefinitionsError(f"{self._path}: not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            kind = type(data).__name__
            raise DefinitionsError(f"{self._path}: expected a JSON object, got {kind}")
        return data

    def save(self, definitions: dict[str, Any]) -> int:
        """Replace the file atomically and durably (tmp, fsync, rename, fsync dir); returns its size."""
        data = json.dumps(definitions, indent=1, sort_keys=True, default=str).encode()
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            self._tmp.unlink(missing_ok=True)  # disk full: the old file stays, and so does room
            raise
        finally:
            os.close(fd)
        os.replace(self._tmp, self._path)
        fsync_dir(self._path.parent)
        replica_tap.replaced(self._path, data)
        return len(data)
