"""A follower's copy of the leader's data directory: applies the tap's file operations
(``replica_tap``) and makes them durable; and the leader's side of a copy, the snapshot.

Owner: one ``ReplicaFiles`` per follower holds the open files it writes and the set written since
the last ``sync``; the replication client (``server/net/replication_follower.py``) alone calls it,
in a worker thread (plain blocking file I/O, persistence's rule).

A copy in progress is marked by ``INCOMPLETE_FILE`` in the directory, written and synced before the
first snapshot byte and removed once the copy is consistent: a node whose directory carries the
mark never campaigns to lead (its files may be half old, half new), whatever etcd's in-sync set
says.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from .fsync import fsync_dir
from .replica_tap import DELETE, KEEP_ONLY, NODE_OWN, REPLACE, TRUNCATE, WRITE, FileOp, decode_ops, encode_op

__all__ = ["INCOMPLETE_FILE", "ReplicaFiles", "is_incomplete", "snapshot_ops"]

INCOMPLETE_FILE = "replica.incomplete"
# files a follower keeps open between batches (a store segment, a few stream logs, the journals)
OPEN_FILES_MAX = 64
# the snapshot reads files in pieces of this size: one replication frame each
SNAPSHOT_CHUNK = 1 << 20
# never copied nor deleted by a copy: this node's own lock, identity, marker and ports file
_OWN = NODE_OWN


def is_incomplete(root: Path) -> bool:
    return (root / INCOMPLETE_FILE).exists()


class ReplicaFiles:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._fds: dict[str, int] = {}
        self._dirty: set[str] = set()
        self._dirs: set[Path] = set()  # directories whose entries changed since the last sync
        self.applied_bytes = 0

    def mark_incomplete(self) -> None:
        path = self.root / INCOMPLETE_FILE
        self.root.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"a copy from the leader is in progress\n")
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.root)

    def mark_complete(self) -> None:
        (self.root / INCOMPLETE_FILE).unlink(missing_ok=True)
        fsync_dir(self.root)

    def apply(self, payload: bytes) -> None:
        for op in decode_ops(payload):
            self._apply(op)
        self.applied_bytes += len(payload)

    def _apply(self, op: FileOp) -> None:
        path = self.root / op.path
        if op.op == WRITE:
            os.pwrite(self._fd(op.path, path), op.data, op.n)
        elif op.op == TRUNCATE:
            os.ftruncate(self._fd(op.path, path), op.n)
        elif op.op == REPLACE:
            self._close(op.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_bytes(op.data)
            os.replace(tmp, path)
            self._dirty.add(op.path)
            self._dirs.add(path.parent)
        elif op.op == DELETE:
            self._forget_under(op.path)
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            self._dirs.add(path.parent)
        elif op.op == KEEP_ONLY:
            self._keep_only(set(op.data.decode().split("\n")) if op.data else set())
            return
        if op.op in (WRITE, TRUNCATE):
            self._dirty.add(op.path)

    def _keep_only(self, keep: set[str]) -> None:
        """Delete every file of the directory the leader's snapshot does not list. A copy starts
        here: files kept open from before may have been replaced since (this node led meanwhile,
        its own writers renamed new files over them), so every open file is closed first."""
        self._sync_and_close_all()
        for rel in _files(self.root):
            if rel not in keep and rel not in _OWN:
                self._forget_under(rel)
                (self.root / rel).unlink(missing_ok=True)

    def _fd(self, rel: str, path: Path) -> int:
        fd = self._fds.get(rel)
        if fd is None:
            if len(self._fds) >= OPEN_FILES_MAX:
                self._sync_and_close_all()
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                self._dirs.add(path.parent)
            fd = self._fds[rel] = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        return fd

    def _close(self, rel: str) -> None:
        fd = self._fds.pop(rel, None)
        if fd is not None:
            os.fsync(fd)
            os.close(fd)

    def _forget_under(self, rel: str) -> None:
        for name in [k for k in self._fds if k == rel or k.startswith(rel + "/")]:
            os.close(self._fds.pop(name))
            self._dirty.discard(name)

    def _sync_and_close_all(self) -> None:
        self.sync()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def sync(self) -> None:
        """Everything applied since the last sync is on disk: the files, then the directories whose
        entries changed (created, renamed, deleted files)."""
        for rel in self._dirty:
            fd = self._fds.get(rel)
            if fd is not None:
                os.fdatasync(fd)
            else:
                try:
                    fd = os.open(self.root / rel, os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        self._dirty.clear()
        for directory in self._dirs:
            if directory.exists():
                fsync_dir(directory)
        self._dirs.clear()

    def close(self) -> None:
        """Closes every open file (synced after each batch already). Called whenever the node
        stops following: while it leads, its own writers replace files under these names."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._dirty.clear()
        self._dirs.clear()


def _files(root: Path) -> list[str]:
    out = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
            if not rel.startswith("spill/") and not rel.endswith(".tmp"):
                out.append(rel)
    return sorted(out)


def snapshot_ops(root: Path) -> Iterator[bytes]:
    """The leader's directory as file operations: first the list of its files (the follower
    deletes any other), then each file's bytes in ``SNAPSHOT_CHUNK`` pieces and its size. Read
    while the broker writes: the caller sends the operations from the snapshot's start on top
    (``replica_tap``'s idempotence), which makes the copy exact."""
    files = [rel for rel in _files(root) if rel not in _OWN]
    yield encode_op(KEEP_ONLY, ".", 0, "\n".join(files).encode())
    for rel in files:
        try:
            f = open(root / rel, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            continue  # deleted meanwhile: the operations after the start say so too
        with f:
            offset = 0
            while True:
                data = f.read(SNAPSHOT_CHUNK)
                if not data:
                    break
                yield encode_op(WRITE, rel, offset, data)
                offset += len(data)
        yield encode_op(TRUNCATE, rel, offset)
