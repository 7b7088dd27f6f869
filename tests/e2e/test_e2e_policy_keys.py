"""Policy keys of the stream and deduplication features, and limits at recovery, end to end: pika
and httpx against a real headrace process (restarts on a real data directory)."""

from __future__ import annotations

import json
import re

import httpx
import pika
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(90)


def only(name: str) -> str:
    return "^" + re.escape(name) + "$"


def put(http: httpx.Client, name: str, pattern: str, definition: dict, apply_to: str) -> None:
    resp = http.put(f"/api/policies/%2F/{name}",
                    json={"pattern": pattern, "definition": definition, "apply-to": apply_to})
    assert resp.status_code in (201, 204), resp.text


def count(ch, queue: str) -> int:
    return ch.queue_declare(queue, durable=True, passive=True).method.message_count


def first_offset(conn, ch, name: str) -> int:
    got: list[int] = []
    ch.basic_qos(prefetch_count=1)
    tag = ch.basic_consume(name, lambda c, m, p, b: got.append(p.headers["x-stream-offset"]),
                           arguments={"x-stream-offset": "first"})
    assert wait_until(lambda: bool(got), conn, 10)
    ch.basic_cancel(tag)
    return got[0]


def test_stream_policy_max_length_bytes_wins_over_argument_and_trims_an_existing_stream(conn, ch, http):
    name = unique("pk-s")
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream", "x-max-length-bytes": 10_000_000,
                                                     "x-stream-max-segment-size-bytes": 4000})
    ch.confirm_delivery()
    for _ in range(200):
        ch.basic_publish("", name, b"x" * 500)
    assert count(ch, name) == 200 and first_offset(conn, ch, name) == 0
    # RabbitMQ: on a stream the policy's value wins over the x-argument (10 MB here)
    put(http, name, only(name), {"max-length-bytes": 20_000}, "streams")
    assert wait_until(lambda: count(ch, name) < 80, conn, 20), count(ch, name)
    assert count(ch, name) >= 20
    assert first_offset(conn, ch, name) > 100  # whole old segments went; the first offset moved on
    http.delete(f"/api/policies/%2F/{name}")


@pytest.mark.parametrize("apply_to", ["queues", "all"])
def test_stream_policy_segment_size_and_max_age(conn, ch, http, apply_to):
    name = unique("pk-age")
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    put(http, name, only(name), {"stream-max-segment-size-bytes": 2000}, apply_to)
    ch.confirm_delivery()
    for _ in range(20):
        ch.basic_publish("", name, b"y" * 500)
    assert count(ch, name) == 20  # no retention bound yet: small segments, all kept
    put(http, name, only(name), {"stream-max-segment-size-bytes": 2000, "max-age": "1s"}, apply_to)
    # the messages age past 1 s; retention runs with the policy's values and drops old segments
    assert wait_until(lambda: count(ch, name) <= 5, conn, 20), count(ch, name)
    assert first_offset(conn, ch, name) >= 15
    http.delete(f"/api/policies/%2F/{name}")


def publish_ids(ch, exchange: str, key: str, ids: list[str]) -> None:
    """Each publish is confirmed (pika raises on a nack or a return)."""
    for mid in ids:
        ch.basic_publish(exchange, key, mid.encode(), pika.BasicProperties(message_id=mid))


def test_dedup_policy_on_a_queue_confirms_duplicates_without_routing(conn, ch, http):
    q = unique("pk-dq")
    ch.queue_declare(q)
    ch.confirm_delivery()
    publish_ids(ch, "", q, ["a", "a"])
    assert count(ch, q) == 2  # no dedup yet
    put(http, q, only(q), {"message-deduplication": True, "deduplication-cache-size": 10}, "queues")
    publish_ids(ch, "", q, ["m1", "m1", "m2", "m1"])
    assert count(ch, q) == 4
    http.delete(f"/api/policies/%2F/{q}")
    publish_ids(ch, "", q, ["m1"])  # the policy is gone: dedup is off again
    assert count(ch, q) == 5


def test_dedup_policy_on_an_exchange_and_bad_values(conn, ch, http):
    x, q = unique("pk-dx"), unique("pk-dxq")
    ch.exchange_declare(x, "fanout")
    ch.queue_declare(q)
    ch.queue_bind(q, x)
    ch.confirm_delivery()
    put(http, x, only(x), {"message-deduplication": True, "deduplication-header": "k"}, "exchanges")
    for key in ("1", "1", "2"):
        ch.basic_publish(x, "", b"b", pika.BasicProperties(headers={"k": key}))
    assert count(ch, q) == 2
    resp = http.put(f"/api/policies/%2F/{x}", json={"pattern": only(x), "definition": {
        "message-deduplication": "yes"}})
    assert resp.status_code == 400
    assert resp.json()["reason"] == 'Validation failed\n\n<<"yes">> is not a valid message deduplication value\n'
    http.delete(f"/api/policies/%2F/{x}")


def test_durable_queue_is_trimmed_at_recovery_under_a_lower_max_length(broker_factory):
    proc = broker_factory()
    q = unique("pk-rec")
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.queue_declare(q, durable=True)
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("", q, str(i).encode(), pika.BasicProperties(delivery_mode=2))
    conn.close()
    assert proc.stop() == 0
    # a policy that came with the definitions while the broker was down
    path = proc.data_dir / "definitions.json"
    doc = json.loads(path.read_text())
    doc.setdefault("policies", []).append({"vhost": "/", "name": "cap", "pattern": only(q), "apply-to": "queues",
                                           "definition": {"max-length": 3}, "priority": 0})
    path.write_text(json.dumps(doc))
    for _ in range(2):  # trimmed at recovery, and the drops reached the store: a second start agrees
        proc.start()
        conn = pika.BlockingConnection(pika.URLParameters(proc.url))
        ch = conn.channel()
        assert count(ch, q) == 3
        conn.close()
        assert proc.stop() == 0
    proc.start()
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    method, _, body = ch.basic_get(q, auto_ack=True)
    assert body == b"7"  # drop-head: the oldest went
    conn.close()
