"""Tiered segments with a real broker: a stream's and a mirror's sealed segments go to a ``file://``
tier named by a policy; a kill -9 in the middle of an upload (slowed by the upload rate setting)
loses nothing and uploads nothing twice; the local copies go and every offset is still read, from
the data directory and through the broker's HTTP API, which serves the tiered bytes itself."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pika
import pytest

from headrace.persistence.mirror_records import mirror_dir as log_dir
from headrace.persistence.mirror_records import peek_entry
from headrace.persistence.mirror_reader import read_ranges
from headrace.persistence.records import iter_records
from headrace.persistence.stream_log import stream_root
from headrace.persistence.tier_manifest import MANIFEST, all_segments, read_uri

pytestmark = [pytest.mark.timeout(180)]

SEGMENT = 65_536
N = 600  # ~1 KB each: ~10 stream segments


def wait_for(check, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def manifest_lines(log_dir: Path) -> list[dict]:
    try:
        raw = (log_dir / MANIFEST).read_text()
    except OSError:
        return []
    out = []
    for line in raw.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def offsets_from_dir(root: Path, name: str) -> list[int]:
    out: list[int] = []
    for r in read_ranges(root, "/", name, target_bytes=1 << 20):
        try:
            data = Path(r.path).read_bytes()[r.start:r.stop]
        except OSError:
            assert r.tier is not None
            data = read_uri(r.tier, r.start, r.stop)
        out += [peek_entry(rec.payload)[0] for rec in iter_records(data)]
    return out


def offsets_over_http(api: httpx.Client, kind: str, name: str) -> list[int]:
    plan = api.get(f"/api/{kind}/%2F/{name}/log", params={"target_bytes": 1 << 20}).raise_for_status().json()
    out: list[int] = []
    for r in plan["ranges"]:
        stop = "" if r["stop"] is None else str(r["stop"] - 1)
        data = api.get(f"/api/{kind}/%2F/{name}/segments/{r['segment']}",
                       headers={"range": f"bytes={r['start']}-{stop}"}).raise_for_status().content
        out += [peek_entry(rec.payload)[0] for rec in iter_records(data)]
    return out


def test_a_kill_during_an_upload_loses_nothing_and_uploads_nothing_twice(broker_factory, tmp_path):
    data, tier = tmp_path / "data", tmp_path / "tier"
    fast = {"HEADRACE_TIER_INTERVAL": "0.1", "HEADRACE_MIRROR_SEGMENT_MAX_BYTES": str(SEGMENT)}
    slow = {**fast, "HEADRACE_TIER_UPLOAD_MAX_BYTES_PER_SECOND": str(SEGMENT)}  # a second a segment
    broker = broker_factory(data_dir=data, env=slow)
    api = httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10)
    api.put("/api/exchanges/%2F/orders", json={"type": "topic", "durable": True}).raise_for_status()
    api.put("/api/mirrors/%2F/orders", json={}).raise_for_status()
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("events", durable=True, arguments={"x-queue-type": "stream",
                                                        "x-stream-max-segment-size-bytes": SEGMENT})
    for i in range(N):
        ch.basic_publish("", "events", b"%06d" % i + b"x" * 1000)
        ch.basic_publish("orders", f"k.{i % 5}", b"%06d" % i + b"y" * 1000)
    conn.close()
    streams = stream_root(data)
    stream_dir, mirror_dir = log_dir(streams, "/", "events"), log_dir(data, "/", "orders")
    wait_for(lambda: len(list(mirror_dir.glob("*.log"))) > 3, "the mirror's segments")
    sealed = len(list(stream_dir.glob("*.log"))) - 1
    assert sealed >= 5
    for kind, apply_to in (("streams", "streams"), ("mirrors", "exchanges")):
        api.put(f"/api/policies/%2F/tier-{kind}", json={
            "pattern": "^(events|orders)$", "apply-to": apply_to,
            "definition": {"tier-uri": f"file://{tier}", "tier-local-max-bytes": 0}}).raise_for_status()
    remote = tier / "stream" / "%2F" / "events"
    # the kill: with at least one segment committed and the next one part-copied
    wait_for(lambda: manifest_lines(stream_dir) and list(remote.glob("*.log.uploading")), "an upload under way")
    broker.kill()
    committed = {d["base"]: (remote / f"{d['base']:020d}.log").stat().st_mtime_ns for d in manifest_lines(stream_dir)}
    assert 0 < len(committed) < sealed

    broker = broker_factory(data_dir=data, env=fast)
    wait_for(lambda: len(manifest_lines(stream_dir)) >= sealed
             and not any(s.path.exists() for s in all_segments(streams, "/", "events")[:-1]), "every upload", 60)
    ups = [d["base"] for d in manifest_lines(stream_dir) if d["op"] == "up"]
    assert len(ups) == len(set(ups)) == sealed  # each segment recorded once
    for base, mtime in committed.items():  # not copied again after the restart
        assert (remote / f"{base:020d}.log").stat().st_mtime_ns == mtime
    assert not list(remote.glob("*.uploading"))
    assert offsets_from_dir(streams, "events") == list(range(N))
    api = httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10)
    plan = api.get("/api/streams/%2F/events/log").raise_for_status().json()
    assert [s["local"] for s in plan["segments"]] == [False] * sealed + [True]
    assert all(s["tier"] for s in plan["segments"][:-1])
    assert offsets_over_http(api, "streams", "events") == list(range(N))  # the broker reads the tier for us

    wait_for(lambda: len(manifest_lines(mirror_dir)) >= len(list(mirror_dir.glob("*.idx"))) - 1, "the mirror's uploads")
    assert offsets_from_dir(data, "orders") == list(range(N))
    assert offsets_over_http(api, "mirrors", "orders") == list(range(N))
    assert broker.stop() == 0
