"""The spill directory: one ``SpillBacking`` (spill.py) per queue, handed out here.

Owner: the storage shell holds one ``SpillStore``. It wipes what an earlier run left at start
(spilled entries are transient), names each backing's directory, and answers for all of them
together: the bytes on disk, whether a failed write left entries in memory (the disk alarm) and
the retry of those writes. Like the backings, it belongs to the event loop.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Hashable
from pathlib import Path

from .segments import SEGMENT_SUFFIX
from .spill import DEFAULT_SPILL_SEGMENT_BYTES, SpillBacking, WriteReport

__all__ = ["SpillStore"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_OURS = re.compile(r"^\d{8}-")  # names of backing directories this module creates
_NAME_CHARS = 48  # sanitised queue-name part of a directory name, for humans only
_COMPACT_MIN = 64  # backings listed before the closed ones are first dropped from the list


class SpillStore:
    """Hands out one ``SpillBacking`` per queue under ``directory``, which it wipes at start."""

    def __init__(self, directory: Path, *, segment_max_bytes: int = DEFAULT_SPILL_SEGMENT_BYTES,
                 report: WriteReport | None = None, on_page_wanted: Callable[[Hashable], None] | None = None) -> None:
        self._dir = Path(directory)
        self._max = segment_max_bytes
        self._report = report  # told of bytes appends wrote and of failed writes (disk alarm)
        # called (on the event loop) with the backing's ``key`` when its queue wants spilled
        # entries back: wakes the pager, which then looks at that queue only (None: no pager, as
        # where the store is used alone)
        self.on_page_wanted = on_page_wanted
        self._count = 0
        self._backings: list[SpillBacking] = []  # closed ones dropped when the list doubles
        self._compact_at = _COMPACT_MIN
        self._dir.mkdir(parents=True, exist_ok=True)
        for entry in os.scandir(self._dir):
            # Only what this module creates is removed, so a misconfigured path loses nothing else.
            if _OURS.match(entry.name) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            elif entry.name.endswith(SEGMENT_SUFFIX) and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)

    def backing(self, name: str, key: Hashable = None) -> SpillBacking:
        """A new, empty backing for queue ``name``; every call gets its own directory. ``key``
        is what ``on_page_wanted`` is told when this backing's queue wants entries back."""
        self._count += 1
        safe = _UNSAFE.sub("_", name)[:_NAME_CHARS]
        backing = SpillBacking(self._dir / f"{self._count:08d}-{safe}",
                               segment_max_bytes=self._max, report=self._report,
                               on_wanted=lambda: self._page_wanted(key))
        self._backings.append(backing)
        if len(self._backings) >= self._compact_at:  # amortised: not a scan per new backing
            self._backings = self._live()
            self._compact_at = max(2 * len(self._backings), _COMPACT_MIN)
        return backing

    def _page_wanted(self, key: Hashable) -> None:
        if self.on_page_wanted is not None:
            self.on_page_wanted(key)

    def disk_bytes(self) -> int:
        return sum(b.disk_bytes() for b in self._live())

    def _live(self) -> list[SpillBacking]:
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
        backings, self._backings = self._backings, []
        for b in backings:
            b.close()
