"""Mirrored exchanges against a real broker: the mirror setting (on/off, retention) survives restarts
and overrides the x-mirror declare argument, retention runs on an idle mirror, and a torn mirror
tail left by a SIGKILL is cut on restart."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pika
import pytest
from headrace.persistence.mirror_log import list_segments, read_entries

pytestmark = pytest.mark.timeout(90)

AUTH = ("guest", "guest")


def mirrors(proc) -> dict[str, dict]:
    r = httpx.get(proc.http_url + "/api/mirrors", auth=AUTH)
    assert r.status_code == 200
    return {m["exchange"]: m for m in r.json()}


def publish(proc, exchange: str, n: int, *, start: int = 0, size: int = 10) -> None:
    """Publishes with confirms, so every message has been routed (and mirrored) once this returns."""
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(start, start + n):
        ch.basic_publish(exchange, f"k.{i % 3}", b"%d:" % i + b"x" * size)
    conn.close()


def entries(proc, exchange: str) -> list:
    return [e for s in list_segments(proc.data_dir, "/", exchange) for e in read_entries(s)]


def entries_of_last_segment(proc, exchange: str) -> list[int]:
    segs = list_segments(proc.data_dir, "/", exchange)
    return [e.offset for e in read_entries(segs[-1])] if segs else []


def wait_for(predicate, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def declare_mirrored(proc, name: str, **arguments) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    conn.channel().exchange_declare(name, "topic", durable=True, arguments={"x-mirror": True, **arguments})
    conn.close()


def test_disabling_an_x_mirror_exchange_survives_restart(broker_factory):
    proc = broker_factory()
    declare_mirrored(proc, "audit")
    publish(proc, "audit", 5)
    assert httpx.delete(proc.http_url + "/api/mirrors/%2F/audit", auth=AUTH).status_code == 204
    assert proc.stop() == 0
    proc = broker_factory(data_dir=proc.data_dir)
    assert "audit" not in mirrors(proc)  # the x-mirror argument no longer turns it back on
    publish(proc, "audit", 5, start=5)
    assert proc.stop() == 0  # the mirror writer drains at shutdown: nothing more was mirrored
    assert [e.offset for e in entries(proc, "audit")] == list(range(5))
    proc = broker_factory(data_dir=proc.data_dir)  # switched on again: stays on
    assert httpx.put(proc.http_url + "/api/mirrors/%2F/audit", json={}, auth=AUTH).status_code == 204
    assert proc.stop() == 0
    proc = broker_factory(data_dir=proc.data_dir)
    assert "audit" in mirrors(proc)


def test_retention_set_over_http_on_an_x_mirror_exchange_survives_restart(broker_factory):
    proc = broker_factory()
    declare_mirrored(proc, "events", **{"x-mirror-max-age-ms": 1000})
    assert mirrors(proc)["events"]["max_age_ms"] == 1000
    r = httpx.put(proc.http_url + "/api/mirrors/%2F/events", json={"max_age_ms": 3_600_000, "max_bytes": 1 << 20},
                  auth=AUTH)
    assert r.status_code == 204
    assert proc.stop() == 0
    proc = broker_factory(data_dir=proc.data_dir)
    got = mirrors(proc)["events"]
    assert (got["max_age_ms"], got["max_bytes"]) == (3_600_000, 1 << 20)


def cli(proc, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headrace", *args, "--url", proc.http_url],
                          capture_output=True, text=True, timeout=30)


def test_mirror_setting_made_over_cli_survives_restart(broker_factory):
    proc = broker_factory()
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    conn.channel().exchange_declare("clicks", "fanout", durable=True)
    conn.close()
    r = cli(proc, "mirror", "enable", "clicks", "--max-age-ms", "60000")
    assert r.returncode == 0, r.stderr
    assert proc.stop() == 0
    proc = broker_factory(data_dir=proc.data_dir)
    r = cli(proc, "mirror", "list")
    assert r.returncode == 0 and "clicks" in r.stdout and "60000" in r.stdout
    publish(proc, "clicks", 3)
    wait_for(lambda: len(entries(proc, "clicks")) == 3, what="3 mirrored messages")
    r = cli(proc, "mirror", "disable", "clicks")
    assert r.returncode == 0, r.stderr
    assert proc.stop() == 0
    proc = broker_factory(data_dir=proc.data_dir)
    assert "clicks" not in cli(proc, "mirror", "list").stdout


def test_retention_drops_old_segments_of_an_idle_mirror(broker_factory):
    proc = broker_factory(env={"HEADRACE_MIRROR_SEGMENT_MAX_BYTES": "4096",
                               "HEADRACE_MIRROR_RETENTION_INTERVAL": "0.2"})
    declare_mirrored(proc, "ticks", **{"x-mirror-max-age-ms": 3000})
    publish(proc, "ticks", 200, size=100)
    wait_for(lambda: entries_of_last_segment(proc, "ticks")[-1:] == [199], what="the mirror to be written")
    assert len(list_segments(proc.data_dir, "/", "ticks")) > 3  # all younger than the max age yet
    # no more publishes: retention must still run, and keeps only the active segment
    wait_for(lambda: len(list_segments(proc.data_dir, "/", "ticks")) == 1, timeout=20,
             what="old segments to be dropped")
    kept = entries(proc, "ticks")
    assert kept and kept[-1].offset == 199 and kept[0].offset > 0
    assert "retention dropped" in proc.log


def test_torn_mirror_tail_after_sigkill_is_cut_on_restart(broker_factory):
    proc = broker_factory()
    declare_mirrored(proc, "torn")
    publish(proc, "torn", 50)
    wait_for(lambda: len(entries(proc, "torn")) == 50, what="50 mirrored messages")
    proc.kill()
    last = list_segments(proc.data_dir, "/", "torn")[-1]
    with open(last.path, "r+b") as f:  # the last record cut short, as by a crash mid-write
        f.truncate(last.size - 3)
    assert [e.offset for e in entries(proc, "torn")] == list(range(49))  # readers stop at the torn tail
    proc = broker_factory(data_dir=proc.data_dir)
    publish(proc, "torn", 10, start=50)
    wait_for(lambda: len(entries(proc, "torn")) == 59, what="59 mirrored messages")
    got = entries(proc, "torn")
    assert [e.offset for e in got] == list(range(59))
    assert [e.body.split(b":")[0] for e in got] == [b"%d" % i for i in [*range(49), *range(50, 60)]]
    assert "torn tail" in proc.log
    assert proc.stop() == 0


def test_headers_too_big_for_the_log_meta_are_mirrored_without_their_text(broker_factory):
    """A headers table whose text exceeds the record's 16-bit meta length used to stop the mirror
    writer, and the broker with it. The record now keeps the headers in its raw properties (what a
    replay republishes) and only Spark's headers column is empty; the same for a stream queue."""
    proc = broker_factory()
    declare_mirrored(proc, "wide")
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.queue_declare("wide-stream", durable=True, arguments={"x-queue-type": "stream"})
    ch.queue_bind("wide-stream", "wide", "#")
    ch.confirm_delivery()
    big = {"note": "x" * 70_000}
    ch.basic_publish("wide", "k", b"big", pika.BasicProperties(headers=big, content_type="text/plain"))
    ch.basic_publish("wide", "k", b"small", pika.BasicProperties(headers={"a": "b"}))
    conn.close()
    assert proc.stop() == 0  # the writers drained at shutdown, and the broker was alive to stop
    mirrored = entries(proc, "wide")
    assert [e.body for e in mirrored] == [b"big", b"small"]
    assert mirrored[0].headers is None and mirrored[0].content_type == "text/plain"
    assert b"x" * 70_000 in mirrored[0].props_raw
    assert mirrored[1].headers == {"a": "b"}
    stream = list_segments(proc.data_dir / "streams", "/", "wide-stream")
    streamed = [e for s in stream for e in read_entries(s)]
    assert [e.body for e in streamed] == [b"big", b"small"] and streamed[0].headers is None
