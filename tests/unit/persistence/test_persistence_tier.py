"""Tiered segments on real files (a ``file://`` tier): uploads, the manifest, local copies let go,
readers' plans over both, an upload found committed but not recorded, retention over the tier."""

from __future__ import annotations

import json
from pathlib import Path

from headrace.persistence.mirror_log import MirrorLog, MirrorRecord, Retention, list_segments, read_ranges
from headrace.persistence.mirror_reader import read_entries
from headrace.persistence.tier import TierSettings, tier_pass
from headrace.persistence.tier_manifest import MANIFEST, all_segments, load_manifest, public_uri, read_uri, tier_dir_uri

T0 = 1_700_000_000_000


def fill(root: Path, n: int = 200) -> None:
    log = MirrorLog(root, "/", "orders", segment_max_bytes=2048, index_interval_bytes=256)
    log.recover()
    log.append_many([MirrorRecord(T0 + i, f"k.{i % 3}", b"", b"body-%04d" % i) for i in range(n)])
    log.close()


def offsets(root: Path) -> list[int]:
    out = []
    for r in read_ranges(root, "/", "orders", target_bytes=1000):
        try:
            data = Path(r.path).read_bytes()
        except OSError:
            assert r.tier is not None
            data = read_uri(r.tier, 0, None)
        tmp = root / "read.log"  # decode the range's segment with the ordinary reader
        tmp.write_bytes(data)
        out += [e.offset for e in read_entries(tmp, vhost="/", exchange="orders", from_offset=r.first_offset,
                                               to_offset=None if r.end_offset is None else r.end_offset - 1)]
        tmp.unlink()
    return out


def test_sealed_segments_upload_once_and_local_copies_go(tmp_path):
    root, tier = tmp_path / "data", tmp_path / "tier"
    fill(root)
    segs = list_segments(root, "/", "orders")
    assert len(segs) > 4
    settings = TierSettings(f"file://{tier}", local_max_bytes=0)
    report = tier_pass(root, "mirror", "/", "orders", settings, T0)
    assert report.uploaded == [s.base_offset for s in segs[:-1]]  # never the active one
    assert report.local_deleted == len(segs) - 1
    assert [s.path.exists() for s in list_segments(root, "/", "orders")] == [True]  # only the active one
    remote = tier / "mirror" / "%2F" / "orders"
    assert sorted(p.name for p in remote.iterdir() if p.suffix == ".log") == [s.path.name for s in segs[:-1]]
    assert not list(remote.glob("*.uploading"))
    merged = all_segments(root, "/", "orders")
    assert [s.base_offset for s in merged] == [s.base_offset for s in segs]
    assert all(s.tier for s in merged[:-1]) and merged[-1].tier is None
    for s in merged[:-1]:
        assert read_uri(str(s.tier), 0, None) == (remote / s.path.name).read_bytes()
        assert read_uri(str(s.tier), 5, 9) == (remote / s.path.name).read_bytes()[5:9]
        assert s.path.with_suffix(".idx").exists()  # the index stays for readers' plans
    assert offsets(root) == list(range(200))  # every offset, once, from wherever it lives
    again = tier_pass(root, "mirror", "/", "orders", settings, T0)
    assert again.uploaded == again.recorded == []


def test_a_committed_upload_missing_from_the_manifest_is_recorded_not_copied(tmp_path):
    root, tier = tmp_path / "data", tmp_path / "tier"
    fill(root)
    settings = TierSettings(f"file://{tier}")
    first = tier_pass(root, "mirror", "/", "orders", settings, T0)
    manifest = root / "mirror" / "%2F" / "orders" / MANIFEST
    lines = manifest.read_bytes().splitlines(keepends=True)
    # as a kill after the last object's move and before its line: the last line lost, and torn
    manifest.write_bytes(b"".join(lines[:-1]) + lines[-1][:7])
    remote = next(p for p in (tier / "mirror" / "%2F" / "orders").glob("*.log") if
                  int(p.stem) == first.uploaded[-1])
    before = remote.stat().st_mtime_ns
    (remote.parent / (remote.name + ".uploading")).write_bytes(b"half")  # a copy cut short elsewhere
    again = tier_pass(root, "mirror", "/", "orders", settings, T0)
    assert again.uploaded == [] and again.recorded == [first.uploaded[-1]]
    assert remote.stat().st_mtime_ns == before
    assert sorted(load_manifest(manifest.parent)) == first.uploaded


def test_retention_counts_the_tier_and_drops_there_first(tmp_path):
    root, tier = tmp_path / "data", tmp_path / "tier"
    fill(root)
    total = sum(s.size for s in list_segments(root, "/", "orders"))
    tier_pass(root, "mirror", "/", "orders", TierSettings(f"file://{tier}", local_max_bytes=0), T0)
    keep = total // 2
    report = tier_pass(root, "mirror", "/", "orders",
                       TierSettings(f"file://{tier}", local_max_bytes=0, retention=Retention(max_bytes=keep)), T0)
    assert report.dropped > 0
    merged = all_segments(root, "/", "orders")
    assert sum(s.size for s in merged) <= keep
    kept = offsets(root)
    assert kept == list(range(kept[0], 200)) and kept[0] > 0
    remote = tier / "mirror" / "%2F" / "orders"
    assert sorted(int(p.stem) for p in remote.glob("*.log")) == [s.base_offset for s in merged[:-1]]
    docs = [json.loads(line) for line in (root / "mirror" / "%2F" / "orders" / MANIFEST).read_text().splitlines()]
    assert [d["op"] for d in docs].count("drop") == report.dropped


def test_the_policy_takes_tier_uris_pyarrow_can_open_only():
    from headrace.server.broker.policies import tier_uri_ok

    for good in ("file:///mnt/tier", "s3://bucket/prefix?region=eu-west-1", "hdfs://nn:8020/logs", "gs://b/p"):
        assert tier_uri_ok(good), good
    for bad in ("file://relative/path", "/mnt/tier", "ftp://host/x", "s3://", "", 3, None):
        assert not tier_uri_ok(bad), bad


def test_a_tier_uri_is_shown_without_its_credentials_and_its_folders_keep_them():
    uri = "s3://AKID:se%2Fcret@bucket/prefix?endpoint_override=127.0.0.1:9000&scheme=http"
    folder = tier_dir_uri(uri, "stream", "/", "events")
    assert folder == "s3://AKID:se%2Fcret@bucket/prefix/stream/%252F/events?endpoint_override=127.0.0.1:9000&scheme=http"
    assert public_uri(folder) == "s3://bucket/prefix/stream/%252F/events?endpoint_override=127.0.0.1:9000&scheme=http"
    assert public_uri("file:///mnt/tier/stream/x") == "file:///mnt/tier/stream/x"
    assert public_uri("hdfs://namenode:8020/tier") == "hdfs://namenode:8020/tier"
