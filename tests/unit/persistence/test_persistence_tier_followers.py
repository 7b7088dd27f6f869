"""Tiered segments beyond one node's uploader: a follower gets the manifest and the local
deletions as file operations (its copy then says which segments live in the tier, as a new
leader needs), a stream cursor reads tiered segments in order and then local ones, and a
deleted log's tier goes through a drop note."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from headrace.persistence import replica_tap
from headrace.persistence.mirror_log import MirrorLog, MirrorRecord, Retention
from headrace.persistence.mirror_records import list_segments, mirror_dir
from headrace.persistence.replica_files import ReplicaFiles, snapshot_ops
from headrace.persistence.stream_log import StreamBatch, StreamCursor, offset_at_time, remove_stream, stream_dir, stream_root
from headrace.persistence.tier import DROPS, TierSettings, run_drops, tier_pass
from headrace.persistence.tier_manifest import MANIFEST, all_segments, first_offset, load_manifest, tier_dir_uri

T0 = 1_700_000_000_000
N = 300


@pytest.fixture
def tap(tmp_path: Path) -> Iterator[replica_tap.Tap]:
    t = replica_tap.Tap(tmp_path / "leader")
    replica_tap.install(t)
    yield t
    replica_tap.uninstall()


def write(data: Path, n: int = N, start: int = 0) -> None:
    log = MirrorLog(stream_root(data), "/", "s", segment_max_bytes=2000, index_interval_bytes=256)
    log.recover()
    log.append_many([MirrorRecord(T0 + i, "rk", b"", b"body-%d" % i, source="ex") for i in range(start, start + n)])
    log.flush()
    log.close()


def ship(tap: replica_tap.Tap, follower: ReplicaFiles) -> None:
    while (batch := tap.take()) is not None:
        follower.apply(batch[1])
    follower.sync()


def read_through(cursor: StreamCursor, end: int, n: int) -> StreamBatch | None:
    """``cursor.read``, making the tier reads it waits for here (the broker makes them in a worker
    thread and dispatches again): None once nothing more can be read."""
    while True:
        batch = cursor.read(end, n)
        read = cursor.take_read() if batch is None else None
        if read is None:
            return batch
        assert cursor.read(end, n) is None  # waiting: nothing is read before the read is done
        read.run()
        if read.failed:
            return None  # the broker makes the next read after a pause


def read_all(data: Path, offset: int, end: int) -> list[tuple[int, bytes]]:
    cursor = StreamCursor(data, "/", "s", offset)
    out: list[tuple[int, bytes]] = []
    while (batch := read_through(cursor, end, 37)) is not None:
        out += [(e.offset, e.body) for e in batch.entries("/", "s")]
    cursor.close()
    return out


def test_a_follower_gets_the_manifest_and_loses_the_local_copies_its_leader_let_go(tmp_path, tap):
    leader, follower_dir, tier = tmp_path / "leader", tmp_path / "follower", tmp_path / "tier"
    follower = ReplicaFiles(follower_dir)
    write(leader)
    ship(tap, follower)
    root = stream_root(leader)
    sealed = list_segments(root, "/", "s")[:-1]
    assert len(sealed) > 4
    report = tier_pass(root, "stream", "/", "s", TierSettings(f"file://{tier}", local_max_bytes=0), T0)
    assert report.local_deleted == len(sealed)
    ship(tap, follower)
    copy = stream_root(follower_dir)
    # the follower holds what the leader holds: the manifest, the indexes, no uploaded .log
    assert [s.path.name for s in list_segments(copy, "/", "s")] == [s.path.name for s in list_segments(root, "/", "s")]
    assert (mirror_dir(copy, "/", "s") / MANIFEST).read_bytes() == (mirror_dir(root, "/", "s") / MANIFEST).read_bytes()
    tiered = all_segments(copy, "/", "s")
    assert [(s.base_offset, s.tier) for s in tiered] == [(s.base_offset, s.tier) for s in all_segments(root, "/", "s")]
    assert all(s.tier and not s.path.exists() and s.path.with_suffix(".idx").exists() for s in tiered[:-1])
    # as a new leader: its first offset is the tier's, a consumer from there reads every record
    assert first_offset(copy, "/", "s", list_segments(copy, "/", "s"), 0) == 0
    assert read_all(follower_dir, 0, N) == [(i, b"body-%d" % i) for i in range(N)]
    # and its own uploader goes on from the manifest: nothing is copied again
    again = tier_pass(copy, "stream", "/", "s", TierSettings(f"file://{tier}", local_max_bytes=0), T0)
    assert again.uploaded == again.recorded == []


def test_a_new_followers_copy_carries_the_manifest(tmp_path):
    leader, tier = tmp_path / "leader", tmp_path / "tier"
    write(leader)
    tier_pass(stream_root(leader), "stream", "/", "s", TierSettings(f"file://{tier}", local_max_bytes=0), T0)
    follower = ReplicaFiles(tmp_path / "follower")
    for payload in snapshot_ops(leader):
        follower.apply(payload)
    follower.sync()
    assert sorted(load_manifest(stream_dir(tmp_path / "follower", "/", "s"))) == \
        sorted(load_manifest(stream_dir(leader, "/", "s")))
    assert read_all(tmp_path / "follower", 0, N) == [(i, b"body-%d" % i) for i in range(N)]


def test_a_cursor_reads_the_tier_in_order_then_the_local_segments(tmp_path):
    tier = tmp_path / "tier"
    write(tmp_path)
    tier_pass(stream_root(tmp_path), "stream", "/", "s", TierSettings(f"file://{tier}", local_max_bytes=2000), T0)
    local = list_segments(stream_root(tmp_path), "/", "s")
    assert len(local) <= 2 and local[0].base_offset > 0  # most of the log is in the tier only
    assert first_offset(stream_root(tmp_path), "/", "s", local, 0) == 0
    assert read_all(tmp_path, 0, N) == [(i, b"body-%d" % i) for i in range(N)]
    middle = local[0].base_offset // 2  # from an offset inside a tiered segment
    assert [o for o, _ in read_all(tmp_path, middle, N)] == list(range(middle, N))
    # a cursor open on a local segment reads on when the next one's local copy goes meanwhile
    write(tmp_path, 100, N)
    cursor = StreamCursor(tmp_path, "/", "s", local[0].base_offset)
    got = [e.offset for e in read_through(cursor, N + 100, 5).entries("/", "s")]  # type: ignore[union-attr]
    tier_pass(stream_root(tmp_path), "stream", "/", "s", TierSettings(f"file://{tier}", local_max_bytes=0), T0)
    while (batch := read_through(cursor, N + 100, 50)) is not None:
        got += [e.offset for e in batch.entries("/", "s")]
    assert got == list(range(local[0].base_offset, N + 100))
    cursor.close()


def test_the_first_offset_memo_follows_the_manifest(tmp_path):
    """The stream writer asks after every write: the manifest is read again only once it changed."""
    root, tier = stream_root(tmp_path), tmp_path / "tier"
    write(tmp_path)
    tier_pass(root, "stream", "/", "s", TierSettings(f"file://{tier}", local_max_bytes=0), T0)
    memo: dict = {}
    local = list_segments(root, "/", "s")
    assert first_offset(root, "/", "s", local, 0, memo) == 0 and list(memo.values())[0][2] == 0
    total = sum(s.size for s in all_segments(root, "/", "s"))
    tier_pass(root, "stream", "/", "s", TierSettings(f"file://{tier}", local_max_bytes=0,
                                                      retention=Retention(max_bytes=total // 2)), T0)
    oldest = all_segments(root, "/", "s")[0].base_offset
    assert oldest > 0 and first_offset(root, "/", "s", local, 0, memo) == oldest


def test_a_timestamp_finds_its_offset_in_a_tiered_segment(tmp_path):
    """The tier is not read to place a start by time (that runs on the event loop): the start is
    the index entry at or before the time, and the cursor steps over the records stamped earlier."""
    tier = tmp_path / "tier"
    write(tmp_path)
    tier_pass(stream_root(tmp_path), "stream", "/", "s", TierSettings(f"file://{tier}", local_max_bytes=0), T0)
    assert list_segments(stream_root(tmp_path), "/", "s")[0].base_offset > 0  # only the active one is local
    assert offset_at_time(tmp_path, "/", "s", T0 + N, N) == N
    tier.rename(tmp_path / "away")  # out of reach: placed all the same, a little early, never late
    assert offset_at_time(tmp_path, "/", "s", T0 + 123, N) <= 123
    (tmp_path / "away").rename(tier)
    early = 0
    for i in (0, 1, 57, 123, 200, N - 1):
        start = offset_at_time(tmp_path, "/", "s", T0 + i, N)
        assert start <= i
        early += start < i
        cursor = StreamCursor(tmp_path, "/", "s", start, from_ms=T0 + i)
        got: list[int] = []
        while len(got) < 3 and (batch := read_through(cursor, N, 3)) is not None:
            got += [e.offset for e in batch.entries("/", "s")]
        assert got[:3] == list(range(i, min(i + 3, N)))
        cursor.close()
    assert early >= 3  # the index is sparse: most starts fall before their time


def test_an_unreachable_tier_stalls_the_cursor_until_it_is_back(tmp_path):
    tier = tmp_path / "tier"
    write(tmp_path)
    tier_pass(stream_root(tmp_path), "stream", "/", "s", TierSettings(f"file://{tier}", local_max_bytes=0), T0)
    tier.rename(tmp_path / "away")
    cursor = StreamCursor(tmp_path, "/", "s", 0)
    assert read_through(cursor, N, 10) is None and cursor.offset == 0  # nothing skipped
    (tmp_path / "away").rename(tier)
    batch = read_through(cursor, N, 10)
    assert batch is not None and [e.offset for e in batch.entries("/", "s")] == list(range(10))
    cursor.close()


def test_a_deleted_streams_tier_goes_through_a_replicated_drop_note(tmp_path, tap):
    leader, tier = tmp_path / "leader", tmp_path / "tier"
    write(leader)
    follower = ReplicaFiles(tmp_path / "follower")
    tier_pass(stream_root(leader), "stream", "/", "s", TierSettings(f"file://{tier}", local_max_bytes=0), T0)
    folder = tier_dir_uri(f"file://{tier}", "stream", "/", "s")
    remote = tier / "stream" / "%2F" / "s"
    (remote / "99999999999999999999.log.uploading").write_bytes(b"a copy under way")
    remove_stream(leader, "/", "s", folder)
    assert not stream_dir(leader, "/", "s").exists() and remote.is_dir()  # the uploader removes it
    notes = list((leader / DROPS).glob("*.json"))
    assert len(notes) == 1
    ship(tap, follower)
    assert [p.name for p in (tmp_path / "follower" / DROPS).glob("*.json")] == [notes[0].name]
    assert run_drops(leader) == [folder]
    assert not remote.exists() and not list((leader / DROPS).glob("*.json"))
    ship(tap, follower)
    assert not list((tmp_path / "follower" / DROPS).glob("*.json"))
    assert run_drops(leader) == []


def test_a_drop_note_names_the_manifests_folders_and_a_removal_repeats_safely(tmp_path):
    data, tier = tmp_path / "data", tmp_path / "tier"
    write(data)
    tier_pass(stream_root(data), "stream", "/", "s", TierSettings(f"file://{tier}", local_max_bytes=0), T0)
    remove_stream(data, "/", "s")  # no policy any more: the manifest still says where the tier is
    (tier / "stream" / "%2F" / "s").rename(tmp_path / "moved")  # as if removed before a crash
    assert run_drops(data) == [tier_dir_uri(f"file://{tier}", "stream", "/", "s")]
    assert not list((data / DROPS).glob("*.json"))
    write(data)
    remove_stream(data, "/", "s")  # never tiered: no note
    assert not list((data / DROPS).glob("*.json"))
