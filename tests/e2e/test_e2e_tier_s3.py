"""A stream tiered to ``s3://``: a real S3 endpoint (moto's server on a loopback port, speaking the
S3 REST protocol) holds the uploaded segments; with the local copies gone, a pika consumer from
``first`` reads them in order, the Arrow reader reads them directly or through the broker's plan,
the credentials in the tier URI show up in neither the HTTP API nor the broker's log, and deleting
the stream removes its objects. A mirrored exchange's log tiered there reads back whole too. With
the store stalled (a relay that holds every byte), the consumer waits while the broker answers
everyone else, and reads on once the store answers again."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest
from e2e_support import unique, wait_until
from pyarrow import fs
from tcp_relay import Relay
from tiering import declare_tiered_stream, offloaded

from headrace.persistence.mirror_reader import read_ranges
from headrace.persistence.stream_log import stream_root
from headrace.persistence.tier_manifest import all_segments, read_uri
from headrace.spark_bridge.arrow_read import Bounds, buffer_batches, range_batches
from headrace.spark_bridge.remote import RemoteLog

pytestmark = pytest.mark.timeout(60)

BROKER_ENV = {"HEADRACE_TIER_INTERVAL": "0.1", "HEADRACE_MIRROR_SEGMENT_MAX_BYTES": "32768"}
N = 200  # ~1 KB each: ~6 segments
BUCKET, KEY, SECRET = "tiers", "AKIDTIERTEST", "tier-secret-Xq7"


def body(i: int) -> bytes:
    return b"%06d" % i + b"s" * 1000


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[str, fs.S3FileSystem]]:
    """A local S3 endpoint with an empty bucket: its ``host:port``, and a client of it."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line a request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"{host}:{port}"
    client = fs.S3FileSystem(access_key=KEY, secret_key=SECRET, endpoint_override=endpoint, scheme="http",
                             region="us-east-1", allow_bucket_creation=True)
    client.create_dir(BUCKET)
    yield endpoint, client
    server.stop()


def objects(client: fs.S3FileSystem, folder: str) -> list[str]:
    try:
        infos = client.get_file_info(fs.FileSelector(folder, recursive=True))
    except FileNotFoundError:
        return []
    return sorted(Path(i.path).name for i in infos if i.type == fs.FileType.File)


def consume_from_first(ch: Any, name: str, prefetch: int) -> list[tuple[int, bytes]]:
    """A consumer of stream ``name`` from ``first`` that acks each delivery; what it got, as
    (offset, body), grows as the connection's events are processed."""
    got: list[tuple[int, bytes]] = []

    def on(c: Any, method: Any, props: Any, data: bytes) -> None:
        got.append((props.headers["x-stream-offset"], data))
        c.basic_ack(method.delivery_tag)

    ch.basic_qos(prefetch_count=prefetch)
    ch.basic_consume(name, on, arguments={"x-stream-offset": "first"})
    return got


def offsets(batches: Any) -> list[int]:
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_a_stream_tiered_to_s3_reads_back_in_order_without_showing_its_secret(broker, s3, monkeypatch):
    endpoint, client = s3
    name = unique("s3tiered")
    query = f"endpoint_override={endpoint}&scheme=http&region=us-east-1"
    declare_tiered_stream(broker.url, broker.http_url, name, N, body, f"s3://{KEY}:{SECRET}@{BUCKET}/headrace?{query}")
    assert wait_until(lambda: offloaded(broker.data_dir, name), timeout=20)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    api = httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10)
    root = stream_root(broker.data_dir)
    segments = all_segments(root, "/", name)
    bases = [s.base_offset for s in segments[:-1]]
    # the objects, as any S3 client sees them: each sealed segment's .log and .idx, nothing half-copied
    folder = f"{BUCKET}/headrace/stream/%2F/{name}"
    assert objects(client, folder) == sorted([f"{b:020d}.log" for b in bases] + [f"{b:020d}.idx" for b in bases])
    assert all(client.get_file_info(f"{folder}/{s.path.name}").size == s.size for s in segments[:-1])

    # a consumer from first: the tier in order, then the local segment, then what comes next
    got = consume_from_first(ch, name, 100)
    assert wait_until(lambda: len(got) >= N, conn, 20), len(got)
    ch.basic_publish("", name, body(N))
    assert wait_until(lambda: len(got) >= N + 1, conn, 10), len(got)
    assert got == [(i, body(i)) for i in range(N + 1)]

    # the Arrow reader on this machine: the segments' ranges, read from S3 where the local copy is gone
    direct = [b for r in read_ranges(root, "/", name, target_bytes=1 << 16)
              for b in range_batches(r, "/", name, Bounds())]
    assert offsets(direct) == list(range(N + 1))

    # the broker's plan names the tier copies without the credentials; the log does not show them
    plan = api.get(f"/api/streams/%2F/{name}/log", params={"target_bytes": 1 << 16}).raise_for_status().json()
    tiers = [s["tier"] for s in plan["segments"][:-1]] + [r["tier"] for r in plan["ranges"] if r["tier"]]
    assert len(tiers) > len(bases)
    assert all(t.startswith(f"s3://{BUCKET}/headrace/stream/") and SECRET not in t and KEY not in t for t in tiers)
    assert SECRET not in broker.log
    # a remote reader with credentials of its own reads those URIs directly, one without reads through the broker
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    remote = RemoteLog(broker.http_url, "guest", "guest")
    ranges = remote.ranges("stream", "/", name, 1 << 16)
    first = next(r for r in ranges if r.tier)
    assert read_uri(first.tier, first.start, first.stop)  # the plan's URI, with this process's credentials
    fetched = [b for r in ranges for b in buffer_batches(remote.fetch("stream", "/", name, r), "/", name, Bounds())]
    assert offsets(fetched) == list(range(N + 1))
    through = RemoteLog(broker.http_url, "guest", "guest", tier_direct=False)
    assert offsets(b for r in ranges for b in buffer_batches(
        through.fetch("stream", "/", name, r), "/", name, Bounds())) == list(range(N + 1))

    # deleting the stream removes its objects
    ch.queue_delete(name)
    conn.close()
    assert wait_until(lambda: not objects(client, folder), timeout=10)


def test_a_mirrored_exchange_tiered_to_s3_reads_back_whole(broker, s3):
    endpoint, client = s3
    name = unique("s3mirror")
    api = httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10)
    api.put(f"/api/exchanges/%2F/{name}", json={"type": "topic", "durable": True}).raise_for_status()
    api.put(f"/api/mirrors/%2F/{name}", json={}).raise_for_status()
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(N):
        ch.basic_publish(name, f"k.{i % 3}", body(i))
    conn.close()
    api.put(f"/api/policies/%2F/{name}", json={
        "pattern": f"^{name}$", "apply-to": "exchanges",
        "definition": {"tier-uri": f"s3://{KEY}:{SECRET}@{BUCKET}/mirrors?endpoint_override={endpoint}&scheme=http"
                                   "&region=us-east-1", "tier-local-max-bytes": 0}}).raise_for_status()

    def offloaded() -> bool:
        segs = all_segments(broker.data_dir, "/", name)
        return len(segs) > 3 and all(s.tier and not s.path.exists() for s in segs[:-1])

    assert wait_until(offloaded, timeout=20)
    bases = [s.base_offset for s in all_segments(broker.data_dir, "/", name)[:-1]]
    assert [n for n in objects(client, f"{BUCKET}/mirrors/mirror/%2F/{name}") if n.endswith(".log")] == \
        [f"{b:020d}.log" for b in bases]
    batches = [b for r in read_ranges(broker.data_dir, "/", name, target_bytes=1 << 16)
               for b in range_batches(r, "/", name, Bounds())]
    assert offsets(batches) == list(range(N))
    assert [bytes(v) for b in batches for v in b.column("body").to_pylist()] == [body(i) for i in range(N)]
    remote = RemoteLog(broker.http_url, "guest", "guest", tier_direct=False)
    assert offsets(b for r in remote.ranges("mirror", "/", name, 1 << 16)
                   for b in buffer_batches(remote.fetch("mirror", "/", name, r), "/", name, Bounds())) == list(range(N))


def test_a_consumer_waiting_on_a_stalled_store_holds_up_no_one_else(broker, s3):
    """The tier is read in a worker thread: while the store holds every request, the consumer
    reading it gets nothing, and the broker still confirms, hands out and answers the HTTP API
    promptly; once the store answers (after a failed attempt, or the same one), the consumer gets
    every record in order."""
    endpoint, client = s3
    host, port = endpoint.rsplit(":", 1)
    relay = Relay(host, int(port))  # holds every byte while stalled: a store that neither answers nor refuses
    name = unique("s3stall")
    declare_tiered_stream(broker.url, broker.http_url, name, N, body,
                  f"s3://{KEY}:{SECRET}@{BUCKET}/stalled?endpoint_override={relay.endpoint}&scheme=http&region=us-east-1")
    assert wait_until(lambda: offloaded(broker.data_dir, name), timeout=20)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    api = httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=3)

    relay.stall()
    got = consume_from_first(ch, name, 50)
    assert wait_until(lambda: relay.held > 0, conn, 10)  # the consumer's read is at the store, held
    # meanwhile everyone else is served at once: a confirm, a get, the HTTP API
    other = unique("busy")
    api.put(f"/api/queues/%2F/{other}", json={"durable": True}).raise_for_status()
    for i in range(3):
        r = api.post("/api/exchanges/%2F/amq.default/publish", json={
            "properties": {"delivery_mode": 2}, "routing_key": other, "payload": f"p{i}", "payload_encoding": "string"})
        assert r.json() == {"routed": True}
        r = api.post(f"/api/queues/%2F/{other}/get", json={"count": 1, "ackmode": "ack_requeue_false",
                                                          "encoding": "auto"})
        assert [m["payload"] for m in r.json()] == [f"p{i}"]
    assert api.get("/api/overview").status_code == 200
    conn.process_data_events(time_limit=0.2)
    assert got == []  # nothing of the tier came past the stalled store

    relay.resume()
    assert wait_until(lambda: len(got) >= N, conn, 30), len(got)
    assert got == [(i, body(i)) for i in range(N)]
    ch.queue_delete(name)
    conn.close()
    relay.close()


def test_a_tier_uri_pyarrow_cannot_use_is_refused_with_its_reason(broker):
    """A URI pyarrow refuses (an option it does not know) is a 400 with pyarrow's reason and
    without the credentials, not a policy the uploader then fails on; one without a region is
    checked without asking the network for the bucket's, and taken."""
    api = httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10)
    refused = api.put("/api/policies/%2F/bad-tier", json={
        "pattern": "^nothing$", "apply-to": "streams",
        "definition": {"tier-uri": f"s3://{KEY}:{SECRET}@{BUCKET}/p?bogus=1", "tier-local-max-bytes": 0}})
    assert refused.status_code == 400
    assert refused.json() == {"error": "bad_request", "reason": f'Validation failed\n\n<<"s3://{BUCKET}/p?bogus=1">> '
                              "is not a valid tier URI: Unexpected query parameter in S3 URI: 'bogus'\n"}
    assert api.get("/api/policies/%2F/bad-tier").status_code == 404
    taken = api.put("/api/policies/%2F/good-tier", json={
        "pattern": "^nothing$", "apply-to": "streams", "definition": {"tier-uri": f"s3://{BUCKET}/prefix"}})
    assert taken.status_code in (201, 204)
    assert api.get("/api/overview").status_code == 200
    api.delete("/api/policies/%2F/good-tier").raise_for_status()
