"""Every kind of durable write a leader makes is on the node that takes over from it: after a kill -9
of the leader, the new leader has the definitions (a user and a policy), a quorum queue's messages,
a stream's messages and a named consumer's acked offset, a mirrored exchange's log, and a
deduplication window that still drops a key seen before the kill."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pika
import pytest

from nodes import Node, connect, healthy, leader_of, start_three, wait_for

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(etcd: Any, module_broker_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> list[Node]:
    return start_three(module_broker_factory, etcd, "t" + uuid.uuid4().hex[:12], tmp_path_factory.mktemp("cluster"))


def api(node: Node) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{node.http_port}", auth=("guest", "guest"), timeout=10)


def answers(http: httpx.Client) -> bool:
    """The node's HTTP API answers (a new leader listens again once its broker has started)."""
    try:
        return http.get("/api/overview").status_code == 200
    except httpx.HTTPError:
        return False


def dedup_publish(ch: Any, key: str) -> None:
    ch.basic_publish("dd", "k", key.encode(), pika.BasicProperties(headers={"x-deduplication-header": key},
                                                                    delivery_mode=2))


def test_every_log_kind_is_on_the_new_leader_after_a_kill(cluster: list[Node]) -> None:
    healthy(cluster)
    leader = leader_of(cluster)
    via = next(n for n in cluster if n is not leader)  # a follower: everything goes through it
    http = api(via)
    assert http.put("/api/users/alice", json={"password": "pw", "tags": "management"}).status_code in (201, 204)
    assert http.put("/api/policies/%2F/cap", json={"pattern": "^capped", "definition": {"max-length": 5},
                                                   "apply-to": "queues"}).status_code in (201, 204)
    conn = connect(via)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("q-quorum", durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_declare("s-log", durable=True, arguments={"x-queue-type": "stream"})
    ch.exchange_declare("mirrored", "fanout", durable=True, arguments={"x-mirror": True})
    ch.exchange_declare("dd", "direct", durable=True, arguments={"x-message-deduplication": True, "x-cache-size": 100})
    ch.queue_declare("dd-q", durable=True)
    ch.queue_bind("dd-q", "dd", "k")
    for i in range(10):
        ch.basic_publish("", "q-quorum", str(i).encode(), pika.BasicProperties(delivery_mode=2))
        ch.basic_publish("mirrored", "", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    for i in range(20):
        ch.basic_publish("", "s-log", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    dedup_publish(ch, "k1")
    dedup_publish(ch, "k1")  # a duplicate: confirmed, dropped
    # a named stream consumer acks offsets 0..4: the group's offset is 4
    reader = conn.channel()
    reader.basic_qos(prefetch_count=5)
    got: list[int] = []
    reader.basic_consume("s-log", lambda c, m, p, b: got.append(m.delivery_tag), arguments={
        "x-stream-consumer-name": "reader", "x-stream-offset": "first"})
    wait_for(lambda: conn.process_data_events(time_limit=0.02) or len(got) == 5, 10.0)
    reader.basic_ack(got[-1], multiple=True)
    reader.close()
    wait_for(lambda: http.get("/api/mirrors/%2F/mirrored/log").json().get("next_offset") == 10, 10.0)
    wait_for(lambda: http.get("/api/queues/%2F/s-log").json()["stream"]["tracked_offsets"].get("reader") == 4, 10.0)
    ch.basic_publish("", "q-quorum", b"10", pika.BasicProperties(delivery_mode=2))  # its confirm covers the above
    conn.close()

    leader.proc.kill()
    new = leader_of(cluster)
    assert new is not leader
    http = api(new)
    wait_for(lambda: answers(http), 15.0)
    assert http.get("/api/users/alice").status_code == 200
    assert http.get("/api/policies/%2F/cap").json()["definition"] == {"max-length": 5}
    assert http.get("/api/mirrors/%2F/mirrored/log").json()["next_offset"] == 10
    assert http.get("/api/queues/%2F/s-log").json()["stream"]["tracked_offsets"] == {"reader": 4}
    conn = connect(new)
    ch = conn.channel()
    ch.confirm_delivery()
    assert ch.queue_declare("q-quorum", passive=True).method.message_count == 11
    dedup_publish(ch, "k1")  # still in the window on the new leader: dropped again
    dedup_publish(ch, "k2")
    bodies = []
    while (m := ch.basic_get("dd-q", auto_ack=True))[0] is not None:
        bodies.append(m[2])
    assert bodies == [b"k1", b"k2"]
    # the named consumer resumes right after its acked offset on the new leader
    reader = conn.channel()
    reader.basic_qos(prefetch_count=5)
    offsets: list[int] = []
    reader.basic_consume("s-log", lambda c, m, p, b: offsets.append(p.headers["x-stream-offset"]),
                         arguments={"x-stream-consumer-name": "reader"})
    wait_for(lambda: conn.process_data_events(time_limit=0.02) or len(offsets) == 5, 10.0)
    assert offsets == [5, 6, 7, 8, 9]
    conn.close()
    healthy(cluster)
