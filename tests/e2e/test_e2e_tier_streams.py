"""Tiered streams with a real broker and pika over a ``file://`` tier: a consumer starting at
``first`` (or at an offset inside a tiered segment) after the local copies went reads the tiered
segments in order, then the local ones, then what is published next, and waits out a tier it
cannot read, reading on by itself once it can; deleting a stream (AMQP
queue.delete or DELETE /api/queues) removes its tier; disabling a mirror keeps its tier, which is
part of the log it keeps."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pika
import pytest
from e2e_support import unique, wait_until
from tiering import declare_tiered_stream, offloaded

from headrace.persistence.mirror_records import mirror_dir, peek_entry
from headrace.persistence.records import iter_records
from headrace.persistence.stream_log import stream_root
from headrace.persistence.tier import DROPS
from headrace.persistence.tier_manifest import MANIFEST, all_segments

pytestmark = pytest.mark.timeout(120)

BROKER_ENV = {"HEADRACE_TIER_INTERVAL": "0.1", "HEADRACE_MIRROR_SEGMENT_MAX_BYTES": "32768"}
N = 300  # ~1 KB each: ~10 segments
BODY = b"x" * 1000


def body(i: int) -> bytes:
    return b"%06d" % i + BODY


def tiered_stream(broker, tmp_path: Path, n: int = N) -> tuple[str, Path]:
    """A stream of ``n`` confirmed messages whose sealed segments are all in a ``file://`` tier
    and no longer local; its name and its folder in the tier."""
    name, tier = unique("tiered"), tmp_path / unique("tier")
    declare_tiered_stream(broker.url, broker.http_url, name, n, body, f"file://{tier}")
    assert wait_until(lambda: offloaded(broker.data_dir, name), timeout=30)
    return name, tier / "stream" / "%2F" / name


def consume(ch, name: str, start: object, want: int, conn) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []

    def on(c, method, props, data) -> None:
        got.append((props.headers["x-stream-offset"], data))
        c.basic_ack(method.delivery_tag)

    tag = ch.basic_consume(name, on, arguments={"x-stream-offset": start})
    assert wait_until(lambda: len(got) >= want, conn, 30), len(got)
    ch.basic_cancel(tag)
    return got


def test_a_consumer_from_first_reads_the_tier_in_order_then_the_local_log(broker, tmp_path):
    name, remote = tiered_stream(broker, tmp_path)
    local = [s for s in all_segments(stream_root(broker.data_dir), "/", name) if s.path.exists()]
    assert len(local) == 1 and local[0].base_offset > 0  # only the active segment is local
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    assert ch.queue_declare(name, durable=True, passive=True).method.message_count == N  # first is the tier's
    ch.basic_qos(prefetch_count=50)
    got = consume(ch, name, "first", N, conn)
    assert got == [(i, body(i)) for i in range(N)]
    middle = sorted(int(p.stem) for p in remote.glob("*.log"))[2] + 3  # inside a tiered segment
    assert consume(ch, name, middle, N - middle, conn) == [(i, body(i)) for i in range(middle, N)]
    # reading on: a consumer at the tier's start gets what is published meanwhile too
    got = []
    ch.basic_consume(name, lambda c, m, p, b: (got.append((p.headers["x-stream-offset"], b)),
                                                c.basic_ack(m.delivery_tag)), arguments={"x-stream-offset": "first"})
    ch.confirm_delivery()
    for i in range(N, N + 20):
        ch.basic_publish("", name, body(i))
    assert wait_until(lambda: len(got) >= N + 20, conn, 30), len(got)
    assert got == [(i, body(i)) for i in range(N + 20)]
    conn.close()


def test_deleting_a_stream_removes_its_tier(broker, tmp_path):
    by_amqp, remote_a = tiered_stream(broker, tmp_path, 150)
    by_http, remote_b = tiered_stream(broker, tmp_path, 150)
    assert list(remote_a.glob("*.log")) and list(remote_b.glob("*.log"))
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    conn.channel().queue_delete(by_amqp)
    conn.close()
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as api:
        assert api.delete(f"/api/queues/%2F/{by_http}").status_code == 204
    drops = broker.data_dir / DROPS
    assert wait_until(lambda: not remote_a.exists() and not remote_b.exists()
                      and not list(drops.glob("*.json")), timeout=30)
    root = stream_root(broker.data_dir)
    assert not mirror_dir(root, "/", by_amqp).exists() and not mirror_dir(root, "/", by_http).exists()
    # the tier folder the policy names stays usable: a new stream of the same name tiers anew
    again, remote = tiered_stream(broker, tmp_path, 150)
    lines = [json.loads(x) for x in (mirror_dir(root, "/", again) / MANIFEST).read_text().splitlines()]
    assert sorted(int(p.stem) for p in remote.glob("*.log")) == [d["base"] for d in lines]


def test_disabling_a_mirror_keeps_its_tier_with_its_log(broker, tmp_path):
    """The mirror's log outlives its setting (Spark, replays and a later enable read it), and its
    tiered offsets are part of it: the tier stays, and the whole log still reads over HTTP after
    uploader passes that removed a deleted stream's tier."""
    exchange, tier = unique("orders"), tmp_path / "tier"
    api = httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10)
    api.put(f"/api/exchanges/%2F/{exchange}", json={"type": "topic", "durable": True}).raise_for_status()
    api.put(f"/api/mirrors/%2F/{exchange}", json={}).raise_for_status()
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(N):
        ch.basic_publish(exchange, "k", body(i))
    conn.close()
    api.put(f"/api/policies/%2F/{exchange}", json={
        "pattern": f"^{exchange}$", "apply-to": "exchanges",
        "definition": {"tier-uri": f"file://{tier}", "tier-local-max-bytes": 0}}).raise_for_status()

    def offloaded() -> bool:
        segs = all_segments(broker.data_dir, "/", exchange)
        return len(segs) > 3 and all(s.tier and not s.path.exists() for s in segs[:-1])

    assert wait_until(offloaded, timeout=30)
    remote = tier / "mirror" / "%2F" / exchange
    objects = sorted(p.name for p in remote.iterdir())
    assert api.delete(f"/api/mirrors/%2F/{exchange}").status_code == 204
    stream, stream_tier = tiered_stream(broker, tmp_path, 150)  # passes run after the disable ...
    assert api.delete(f"/api/queues/%2F/{stream}").status_code == 204
    assert wait_until(lambda: not stream_tier.exists(), timeout=30)  # ... and one removed a tier
    assert sorted(p.name for p in remote.iterdir()) == objects
    plan = api.get(f"/api/mirrors/%2F/{exchange}/log", params={"target_bytes": 1 << 20}).raise_for_status().json()
    offsets: list[int] = []
    for r in plan["ranges"]:
        stop = "" if r["stop"] is None else str(r["stop"] - 1)
        data = api.get(f"/api/mirrors/%2F/{exchange}/segments/{r['segment']}",
                       headers={"range": f"bytes={r['start']}-{stop}"}).raise_for_status().content
        offsets += [peek_entry(rec.payload)[0] for rec in iter_records(data)]
    assert offsets == list(range(N))
    api.close()


def test_a_consumer_waits_out_an_unreachable_tier_and_reads_on_by_itself(broker, tmp_path):
    """While the tier cannot be read the consumer gets nothing (nothing is skipped); once it can,
    the consumer reads every record with nothing else happening on the stream: a failed read is
    made again every second, not only when a publish or an ack wakes the stream."""
    name, remote = tiered_stream(broker, tmp_path)
    away = remote.with_name(remote.name + "-away")
    remote.rename(away)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=50)
    got: list[tuple[int, bytes]] = []
    ch.basic_consume(name, lambda c, m, p, b: (got.append((p.headers["x-stream-offset"], b)),
                                                c.basic_ack(m.delivery_tag)), arguments={"x-stream-offset": "first"})
    conn.process_data_events(time_limit=1.5)  # a read failed, and was made again, at least once
    assert got == []
    assert ch.queue_declare(name, durable=True, passive=True).method.message_count == N  # the broker answers
    away.rename(remote)
    assert wait_until(lambda: len(got) >= N, conn, 15), len(got)
    assert got == [(i, body(i)) for i in range(N)]
    conn.close()
