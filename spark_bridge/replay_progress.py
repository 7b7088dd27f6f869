"""A replay's progress files: one per publishing partition (``part-<n>.json``), each a journal.

Owner: the partition's task writes its own file through ``ProgressJournal``; the driver and the
tasks of a later run only read them (``load_progress``, ``doubt_range``, ``run_total``).

Each line is one JSON object: the confirmed offsets of the routing keys that moved since the line
before (``offsets``), and where the partition stands (``run``, ``published``, ``through``,
``bound``). A key's offset is the one on its last line (offsets only rise within a partition); the
standing is the last line's. Why a journal: progress is saved at every batch of confirms that
completes a piece (~256 rows), and a file rewritten whole each time cost a partition with many
routing keys their whole map per piece (with 50,000 keys, ~1 MB of JSON per 256 rows). A line
holds the keys of the pieces just confirmed; the file is rewritten whole (a fresh first line, then
an atomic rename) at the first save of a run and whenever the journal has grown past
``COMPACT_FACTOR`` times the keys it describes. A file of one line is the format of earlier versions.
A line cut short by a kill in the middle of its write is ignored: it was written before anything it
describes was sent (``bound``) or after it was confirmed (the rest), so the line before it is safe.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["COMPACT_FACTOR", "ProgressJournal", "doubt_range", "load_progress", "run_total"]

# rewrite the file whole once it holds this many times the entries of its keys (plus a minimum)
COMPACT_FACTOR = 4
_COMPACT_MIN = 4096


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    """The file's complete lines, decoded; a torn last line is skipped."""
    with path.open("rb") as f:
        for raw in f:
            try:
                doc = json.loads(raw)
            except ValueError:
                continue
            if isinstance(doc, dict):
                yield doc


def _files(progress_dir: str) -> list[Path]:
    return sorted(Path(progress_dir).glob("part-*.json"))


def _read(path: Path) -> tuple[dict[str, int], dict[str, Any]] | None:
    """(offset per key, the last line's standing), or None if the file cannot be read."""
    offsets: dict[str, int] = {}
    last: dict[str, Any] | None = None
    try:
        for doc in _lines(path):
            offsets.update(doc.get("offsets", {}))
            last = doc
    except OSError:
        return None
    return None if last is None else (offsets, last)


def load_progress(progress_dir: str) -> dict[str, int]:
    """Confirmed offset per routing key, merged over every partition's file (the highest wins)."""
    done: dict[str, int] = {}
    for path in _files(progress_dir):
        read = _read(path)
        if read is None:
            continue
        for rk, offset in read[0].items():
            if offset > done.get(rk, -1):
                done[rk] = offset
    return done


def doubt_range(progress_dir: str) -> tuple[int, int] | None:
    """(lo, hi): what the last run may have sent and not had confirmed lies in ``lo < offset <= hi``,
    and its routing keys all have progress saved. Each partition's file holds ``through`` (its rows
    up to there are confirmed, or were skipped as confirmed before) and ``bound`` (saved, with
    every routing key of the batch, before the partition sends any row past it). So a resume reads
    that stretch of the log for those keys only, not the whole log. None when there is no file, or
    one written without them: the whole log then."""
    lo: int | None = None
    hi = -1
    for path in _files(progress_dir):
        read = _read(path)
        if read is None:
            return None
        through, bound = read[1].get("through"), read[1].get("bound")
        if not isinstance(through, int) or not isinstance(bound, int):
            return None
        lo = through if lo is None else min(lo, through)
        hi = max(hi, bound)
    return None if lo is None else (lo, hi)


def run_total(progress_dir: str, run: str) -> int:
    """How many messages the partitions of run ``run`` published (each says so in its file)."""
    total = 0
    for path in _files(progress_dir):
        read = _read(path)
        if read is not None and read[1].get("run") == run:
            total += int(read[1].get("published", 0))
    return total


class ProgressJournal:
    """One partition's progress file, as its task writes it during a run."""

    def __init__(self, progress_dir: str, partition: int) -> None:
        self.path = Path(progress_dir) / f"part-{partition}.json"
        self.offsets: dict[str, int] = {}  # every key this run has seen, at least as loaded
        self._moved: dict[str, int] = {}  # keys whose offset is not on a line yet
        self._written = -1  # entries in the file since its last rewrite; -1: not written this run

    def note(self, key: str, offset: int) -> None:
        """``key`` is confirmed up to ``offset`` (or was, before this run: it is listed from now on)."""
        self.offsets[key] = offset
        self._moved[key] = offset

    def save(self, run: str, published: int, through: int, bound: int) -> None:
        standing = {"run": run, "published": published, "through": through, "bound": bound}
        if self._written < 0 or self._written > COMPACT_FACTOR * len(self.offsets) + _COMPACT_MIN:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"offsets": self.offsets, **standing}) + "\n")
            os.replace(tmp, self.path)
            self._written = len(self.offsets)
        else:
            with self.path.open("a") as f:
                f.write(json.dumps({"offsets": self._moved, **standing}) + "\n")
            self._written += len(self._moved) + 1
        self._moved = {}
