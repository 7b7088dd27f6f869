"""What must hold before a broker touches its data directory: it is the only broker on that
directory, and its ports are its own.

Two brokers appending to one message store lose confirmed messages (each recovers, compacts and
truncates the other's segments), so the lock is taken before anything in the directory is read or
created. ``flock`` belongs to the open file: the kernel drops it when the process dies, so a
``kill -9`` never leaves a stale lock behind; the file holds the PID only to name the holder.

Rule: the ``DataDirLock`` owns the lock file; nothing else opens it.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

__all__ = ["LOCK_FILE", "DataDirLock", "StartupError", "write_ports"]

LOCK_FILE = "headrace.lock"


class StartupError(Exception):
    """The broker cannot start; the message is the one line the operator sees."""


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Lock the directory or raise ``StartupError`` naming the broker that holds it."""
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StartupError(f"data directory {self.data_dir}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise StartupError(f"data directory {self.data_dir.resolve()} is in use by another broker "
                               f"(pid {holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return text if text.isdigit() else "unknown"


def write_ports(path: Path | None, ports: dict[str, int]) -> None:
    """The bound ports as JSON at ``path`` (the ``ports_file`` setting), written whole: a reader
    (a test's launcher, a script) sees the old file or the new one, never half of it."""
    if path is None:
        return
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(ports))
    tmp.replace(path)
