"""Durability helpers: the few places where the store asks the kernel to put bytes on disk.

A rename or a new file is only durable once its directory is synced too (the classic
"fsync the parent" rule), so both helpers live together here.
"""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import BinaryIO

__all__ = ["FsyncMode", "fsync_dir", "fsync_file"]


class FsyncMode(Enum):
    """How the message store trades durability for throughput."""

    BATCH = "batch"  # one fsync per sync() call: a group commit covers a batch of confirms
    ALWAYS = "always"  # fsync after every write() call
    OFF = "off"  # never fsync; bytes reach the OS on flush only (tests, throwaway brokers)


def fsync_file(f: BinaryIO) -> None:
    """Flush Python's buffer, then make the file's data durable."""
    f.flush()
    os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Make the directory's entries (created, renamed, removed files) durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
