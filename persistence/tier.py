"""Tiered segments: a log's sealed segments copied to its tier, local copies let go, and retention
applied to what is only in the tier (``tier_manifest.py`` says where everything lives).

One pass (``tier_pass``) over one log, in plain blocking I/O: the shell runs it in a worker thread
(``server/net/tier_uploader.py``), one pass at a time, so the manifest has one writer.

What a kill -9 at any point leaves, and why nothing is lost or uploaded twice:

1. a sealed segment's ``.idx`` and then its ``.log`` are written to ``<name>.uploading`` objects
   and moved to their names. The ``.log``'s move commits the upload: until then, the tier holds
   no object a reader could take for the segment.
2. the manifest line is appended and fsynced (``tier_manifest.MANIFEST``);
3. only then may the local ``.log`` go (``local_max_bytes``).

A pass after a crash finds the segment missing from the manifest. If its ``.log`` object is there
with the local size, step 1 had committed: the line is written and nothing is copied again.
Otherwise the copy starts over (the ``.uploading`` object is overwritten). A local copy is never
deleted before its line is durable, so every record is always local or committed in the tier.

Retention (the log's max-age / max-length-bytes, counted over local and tiered segments alike)
drops a segment from the tier by writing a ``drop`` line first and deleting the objects after,
so the manifest never names a deleted object; a crash in between leaves an orphan object, which
nothing reads.

A deleted stream's tier goes with it, as a deleted Kafka topic's remote segments do: before its
local directory is removed, its writer leaves a durable *drop note* (``note_drop``: the log's tier
folders, from its manifest and its policy, in ``tier-drops/`` under the data directory, replicated
like any file); the uploader's next pass removes those folders, then the note (``run_drops``). The
uploader alone deletes objects, one pass at a time, so a pass over the stream that was under way
when it was deleted has finished (its last object included) before the folder goes; a crash before
the note is removed only repeats the removal.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import replica_tap
from .mirror_reader import index_entries, last_timestamp
from .mirror_records import INDEX_SUFFIX, Retention, SegmentInfo, list_segments, mirror_dir, peek_entry
from .records import iter_records
from .stream_filter import FILTER_SUFFIX
from .tier_manifest import MANIFEST, TierEntry, all_segments, load_manifest, object_uri, parent_uri, tier_dir_uri

__all__ = ["DROPS", "TierReport", "TierSettings", "note_drop", "run_drops", "tier_pass"]

CHUNK = 1 << 20  # bytes per write to the tier
UPLOADING = ".uploading"
DROPS = "tier-drops"  # under the data directory: the drop notes of deleted logs' tiers


@dataclass(frozen=True, slots=True)
class TierSettings:
    """A log's tier: where (``uri``), how many bytes of local segments to keep once uploaded
    (None: keep them all, retention alone deletes them), the log's retention, and a cap on upload
    bytes per second (None: none)."""
    uri: str
    local_max_bytes: int | None = None
    retention: Retention = field(default_factory=Retention)
    rate: int | None = None


@dataclass(slots=True)
class TierReport:
    uploaded: list[int] = field(default_factory=list)  # base offsets copied in this pass
    recorded: list[int] = field(default_factory=list)  # found committed by an earlier pass, recorded only
    local_deleted: int = 0
    dropped: int = 0


def tier_pass(root: Path, kind: str, vhost: str, name: str, settings: TierSettings, now_ms: int) -> TierReport:
    """Uploads the log's sealed segments not in its tier yet, oldest first, then lets local copies
    and tiered segments go as the settings say."""
    report = TierReport()
    local = list_segments(root, vhost, name)
    if not local:
        return report
    directory = mirror_dir(root, vhost, name)
    manifest = load_manifest(directory)
    dir_uri = tier_dir_uri(settings.uri, kind, vhost, name)
    for seg in local[:-1]:  # the active segment is never uploaded
        if seg.base_offset in manifest:
            continue
        try:
            entry, copied = _upload(seg, dir_uri, settings.rate)
        except FileNotFoundError:  # retention dropped it meanwhile
            continue
        _append(directory, {"op": "up", "base": entry.base, "size": entry.size, "end": entry.end,
                            "last_ts": entry.last_ts, "uri": entry.uri})
        manifest[entry.base] = entry
        (report.uploaded if copied else report.recorded).append(entry.base)
    if settings.local_max_bytes is not None:
        report.local_deleted = _trim_local(local, manifest, settings.local_max_bytes)
    report.dropped = _retention(root, vhost, name, settings.retention, now_ms)
    return report


def _upload(seg: SegmentInfo, dir_uri: str, rate: int | None) -> tuple[TierEntry, bool]:
    """The segment's entry, and whether it was copied now (False: an earlier pass had committed)."""
    from pyarrow import fs

    filesystem, dir_path = fs.FileSystem.from_uri(dir_uri)
    log_path = f"{dir_path}/{seg.path.name}"
    info = filesystem.get_file_info(log_path)
    copied = not (info.type == fs.FileType.File and info.size == seg.size)
    if copied:
        filesystem.create_dir(dir_path, recursive=True)
        index = seg.path.with_suffix(INDEX_SUFFIX)
        if index.exists():
            _copy(filesystem, index, f"{dir_path}/{index.name}", rate)
        _copy(filesystem, seg.path, log_path, rate)  # last: its name commits the upload
    end, last_ts = _tail(seg)
    return TierEntry(seg.base_offset, seg.size, end, last_ts, object_uri(dir_uri, seg.path.name)), copied


def _copy(filesystem: Any, source: Path, dest: str, rate: int | None) -> None:
    """``source`` to ``dest`` through ``dest.uploading`` and a move; at most ``rate`` bytes a
    second. On a local file system the object is fsynced before the move and its folder after."""
    from pyarrow import fs

    tmp = dest + UPLOADING
    step = CHUNK if rate is None else max(4096, min(CHUNK, rate // 8))
    started, done = time.monotonic(), 0
    with open(source, "rb") as f, filesystem.open_output_stream(tmp) as out:
        while chunk := f.read(step):
            out.write(chunk)
            done += len(chunk)
            if rate is not None:
                delay = started + done / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
    local = isinstance(filesystem, fs.LocalFileSystem)
    if local:
        _fsync(tmp)
    filesystem.move(tmp, dest)
    if local:
        _fsync(str(Path(dest).parent))


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tail(seg: SegmentInfo) -> tuple[int, int | None]:
    """The offset after the segment's last record and that record's time (from its last index entry)."""
    entries = index_entries(seg.path)
    position = entries[-1][1] if entries else 0
    end, last_ts = seg.base_offset, None
    with open(seg.path, "rb") as f:
        f.seek(position)
        data = f.read()
    for rec in iter_records(data):
        offset, last_ts = peek_entry(rec.payload)
        end = offset + 1
    return end, last_ts


def _append(directory: Path, doc: dict[str, Any]) -> None:
    """One manifest line, durable before the caller goes on."""
    path = directory / MANIFEST
    new = not path.exists()
    line = json.dumps(doc, separators=(",", ":")).encode() + b"\n"
    with open(path, "a+b", buffering=0) as f:
        at = f.seek(0, os.SEEK_END)
        if at and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
            line = b"\n" + line  # a line torn by a crash stays a line of its own, which readers skip
        f.write(line)
        os.fsync(f.fileno())
    replica_tap.wrote(path, at, line)  # a follower's manifest says what its leader's does
    if new:
        _fsync(str(directory))


def _trim_local(local: list[SegmentInfo], manifest: dict[int, TierEntry], keep: int) -> int:
    """Deletes uploaded local ``.log``s, oldest first, while the local segments hold over ``keep``
    bytes; the ``.idx`` stays, for readers' plans."""
    total = sum(s.size for s in local)
    deleted = 0
    for seg in local[:-1]:
        if total <= keep:
            break
        if seg.base_offset not in manifest:
            continue
        seg.path.unlink(missing_ok=True)
        replica_tap.deleted(seg.path)  # after the manifest line the follower got before it
        total -= seg.size
        deleted += 1
    return deleted


def _retention(root: Path, vhost: str, name: str, retention: Retention, now_ms: int) -> int:
    """Drops the oldest segments, local or tiered, while the whole log is over its size bound or
    they are past its age bound (the writer's own retention sees local segments only)."""
    if retention == Retention():
        return 0
    segments = all_segments(root, vhost, name)
    directory = mirror_dir(root, vhost, name)
    manifest = load_manifest(directory)
    total = sum(s.size for s in segments)
    dropped = 0
    for seg in segments[:-1]:
        too_big = retention.max_bytes is not None and total > retention.max_bytes
        too_old = False
        if retention.max_age_ms is not None:
            entry = manifest.get(seg.base_offset)
            last = entry.last_ts if entry is not None else last_timestamp(seg.path)
            too_old = last is not None and now_ms - last > retention.max_age_ms
        if not (too_big or too_old):
            break
        if seg.tier is not None:
            _append(directory, {"op": "drop", "base": seg.base_offset})
            _delete_objects(seg.tier)
        for path in (seg.path, seg.path.with_suffix(INDEX_SUFFIX), seg.path.with_suffix(FILTER_SUFFIX)):
            path.unlink(missing_ok=True)
            replica_tap.deleted(path)
        total -= seg.size
        dropped += 1
    return dropped


def _delete_objects(log_uri: str) -> None:
    from pyarrow import fs

    filesystem, path = fs.FileSystem.from_uri(log_uri)
    for target in (path, path[:-len(".log")] + INDEX_SUFFIX):
        try:
            filesystem.delete_file(target)
        except (FileNotFoundError, OSError):
            pass  # gone already (a pass cut short after the drop line)


def note_drop(data_dir: Path, directory: Path, tier_dir: str | None) -> bool:
    """Before the log in ``directory`` is removed: a durable note naming its tier folders (those
    its manifest's objects lie in, and ``tier_dir``, its policy's, where an upload may have begun
    before any committed). False when there is nothing to drop."""
    folders = {parent_uri(entry.uri) for entry in load_manifest(directory).values()}
    if tier_dir is not None:
        folders.add(tier_dir)
    if not folders:
        return False
    drops = data_dir / DROPS
    drops.mkdir(exist_ok=True)
    path = drops / f"{time.time_ns():020d}.json"
    data = json.dumps({"folders": sorted(folders)}).encode()
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync(str(drops))
    replica_tap.replaced(path, data)
    return True


def run_drops(data_dir: Path) -> list[str]:
    """The uploader's part: removes the folders the drop notes name, then the notes; the folders
    removed. A tier that fails leaves its note for the next pass (``OSError``)."""
    from pyarrow import fs

    removed: list[str] = []
    for note in sorted((data_dir / DROPS).glob("*.json")):
        try:
            folders = [str(f) for f in json.loads(note.read_bytes())["folders"]]
        except (ValueError, KeyError, TypeError):
            folders = []  # a note torn before its rename cannot be here; one unreadable is let go
        for folder in folders:
            filesystem, path = fs.FileSystem.from_uri(folder)
            try:
                filesystem.delete_dir(path)
            except FileNotFoundError:
                pass  # removed before a crash, or never written
            removed.append(folder)
        note.unlink(missing_ok=True)
        replica_tap.deleted(note)
    return removed
