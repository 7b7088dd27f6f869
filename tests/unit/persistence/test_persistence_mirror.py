"""MirrorLog: directory names that cannot escape the mirror root, retention by age at a given time
(also on a log that was never written to by this process), torn tail recovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.persistence.mirror_log import (
    MirrorLog,
    MirrorRecord,
    Retention,
    list_mirrors,
    list_segments,
    mirror_dir,
    read_entries,
)

T0 = 1_700_000_000_000


def write(root: Path, exchange: str = "ex", n: int = 100, t0: int = T0, step_ms: int = 1000,
          segment_max_bytes: int = 1024) -> None:
    log = MirrorLog(root, "/", exchange, segment_max_bytes=segment_max_bytes)
    log.recover()
    log.append_many([MirrorRecord(t0 + i * step_ms, "k", b"", b"x" * 40) for i in range(n)])
    log.close()


@pytest.mark.parametrize("name", [".", "..", "...", ".hidden", "../escape", "a/../..", "%2E%2E"])
def test_mirror_dirs_stay_inside_the_mirror_root(tmp_path: Path, name: str) -> None:
    root = tmp_path / "data"
    for vhost, exchange in ((name, "ex"), ("/", name)):
        directory = mirror_dir(root, vhost, exchange)
        assert directory.parent.parent == root / "mirror"
        assert directory.name not in (".", "..") and not directory.name.startswith(".")
        assert directory.parent.name not in (".", "..") and not directory.parent.name.startswith(".")
        log = MirrorLog(root, vhost, exchange)
        log.recover()
        log.append_many([MirrorRecord(T0, "k", b"", b"body")])
        log.close()
        assert directory.resolve().is_relative_to((root / "mirror").resolve())
        segs = list_segments(root, vhost, exchange)
        assert [e.body for e in read_entries(segs[0])] == [b"body"]
        assert [(e.vhost, e.exchange) for e in read_entries(segs[0].path)] == [(vhost, exchange)]
    assert sorted(list_mirrors(root)) == sorted([(name, "ex"), ("/", name)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # nothing written beside it


def test_ordinary_names_keep_their_directory(tmp_path: Path) -> None:
    assert mirror_dir(tmp_path, "/", "orders.eu") == tmp_path / "mirror" / "%2F" / "orders.eu"
    with pytest.raises(ValueError):
        mirror_dir(tmp_path, "/", "")


def test_retention_by_age_drops_only_segments_older_than_max_age(tmp_path: Path) -> None:
    write(tmp_path, n=100)  # records at T0 .. T0+99 s over several segments
    segs = list_segments(tmp_path, "/", "ex")
    assert len(segs) > 3
    # a fresh, never recovered log (the broker's idle retention pass) at a given "now"
    log = MirrorLog(tmp_path, "/", "ex", retention=Retention(max_age_ms=30_000))
    last_in = [max(e.timestamp_ms for e in read_entries(s)) for s in segs]
    now = T0 + 99_000 + 10_000  # records older than T0+79 s are expired
    expected_kept = [s.base_offset for s, ts in zip(segs, last_in, strict=True) if now - ts <= 30_000]
    expected_kept = expected_kept or [segs[-1].base_offset]
    assert log.enforce_retention(now) == len(segs) - len(expected_kept)
    assert [s.base_offset for s in list_segments(tmp_path, "/", "ex")] == expected_kept
    assert not any(p.suffix == ".idx" and int(p.stem) < expected_kept[0] for p in (mirror_dir(tmp_path, "/", "ex")).iterdir())
    # much later everything but the active segment is gone, and the active one is never dropped
    assert log.enforce_retention(now + 10**9) == len(expected_kept) - 1
    assert [s.base_offset for s in list_segments(tmp_path, "/", "ex")] == [segs[-1].base_offset]
    assert log.enforce_retention(now + 10**9) == 0
    # nothing is dropped while it is younger than the bound
    write(tmp_path / "young", n=50)
    young = MirrorLog(tmp_path / "young", "/", "ex", retention=Retention(max_age_ms=60_000))
    assert young.enforce_retention(T0 + 50_000) == 0


def test_torn_tail_is_truncated_and_appends_continue(tmp_path: Path) -> None:
    write(tmp_path, n=30)
    last = list_segments(tmp_path, "/", "ex")[-1]
    data = last.path.read_bytes()
    last.path.write_bytes(data[:-5])  # the last record cut short, as by a crash mid-write
    log = MirrorLog(tmp_path, "/", "ex", segment_max_bytes=1024)
    assert log.recover() == 29
    assert log.append_many([MirrorRecord(T0, "k", b"", b"after")]) == (29, 29)
    log.close()
    entries = [e for s in list_segments(tmp_path, "/", "ex") for e in read_entries(s)]
    assert [e.offset for e in entries] == list(range(30)) and entries[-1].body == b"after"
