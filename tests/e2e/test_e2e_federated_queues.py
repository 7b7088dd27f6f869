"""Queue federation between two real brokers, as RabbitMQ's federation plugin: a queue that a policy
federates fetches from the upstream queue of the same name only while it has consumers with credit
and nothing ready; its link shows in /api/federation-links (type "queue"); and with the default
``on-confirm`` nothing confirmed upstream is lost when either broker is killed -9."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
import pytest
from e2e_support import unique, wait_until
from test_e2e_shovels import api, free_port, queue_count

pytestmark = pytest.mark.timeout(120)


def federate_queue(down: Any, up_port: int, queue: str, **upstream: Any) -> None:
    assert api(down, "PUT", "/api/parameters/federation-upstream/%2F/up", {"value": {
        "uri": f"amqp://guest:guest@127.0.0.1:{up_port}", "reconnect-delay": 0.2, "prefetch-count": 50,
        **upstream}}).status_code in (201, 204)
    assert api(down, "PUT", f"/api/policies/%2F/fq-{queue}", {
        "pattern": f"^{queue}$", "apply-to": "queues", "definition": {"federation-upstream": "up"}}).status_code in (201, 204)


def queue_link(down: Any, queue: str) -> dict[str, Any] | None:
    return next((link for link in api(down, "GET", "/api/federation-links").json()
                 if link.get("type") == "queue" and link.get("queue") == queue), None)


def declare(url: str, queue: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().queue_declare(queue, durable=True)
    conn.close()


def publish(url: str, queue: str, bodies: list[bytes]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
    conn.close()


def test_a_federated_queue_fetches_only_for_its_consumers(broker_factory, tmp_path):
    up_port = free_port()
    up = broker_factory("--amqp-port", str(up_port), data_dir=tmp_path / "up")
    down = broker_factory(data_dir=tmp_path / "down")
    q = unique("fed-queue")
    declare(down.url, q)
    federate_queue(down, up_port, q, **{"prefetch-count": 5})
    assert wait_until(lambda: (queue_link(down, q) or {}).get("status") == "running", timeout=10), \
        api(down, "GET", "/api/federation-links").json()
    link = queue_link(down, q)
    assert link is not None and (link["upstream"], link["upstream_queue"]) == ("up", q)
    publish(up.url, q, [f"m{i}".encode() for i in range(100)])  # the link declared it upstream
    assert queue_count(up, q) == 100 and queue_count(down, q) == 0  # no consumer downstream: nothing fetched

    conn = pika.BlockingConnection(pika.URLParameters(down.url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    got: list[bytes] = []
    for method, _, body in ch.consume(q, inactivity_timeout=10):
        assert method is not None, f"only {len(got)} arrived"
        got.append(body)
        ch.basic_ack(method.delivery_tag)
        if len(got) == 60:
            break
    ch.cancel()  # the consumer goes: the link stops fetching
    assert wait_until(lambda: queue_count(up, q) + queue_count(down, q) == 40, timeout=10)
    left_up = queue_count(up, q)
    assert left_up >= 25  # about the link's prefetch (5) came down beyond what the consumer took
    publish(up.url, q, [b"late"])
    assert not wait_until(lambda: queue_count(up, q) != left_up + 1, timeout=0.5)
    conn.close()
    assert got == [f"m{i}".encode() for i in range(60)]  # in the upstream's order


def _publisher(url: Callable[[], str], queue: str, confirmed: list[str], stop: threading.Event) -> None:
    i = 0
    while not stop.is_set():
        try:
            conn = pika.BlockingConnection(pika.URLParameters(url()))
            ch = conn.channel()
            ch.confirm_delivery()
            while not stop.is_set():
                mid = f"q-{i}"
                i += 1
                ch.basic_publish("", queue, mid.encode(), pika.BasicProperties(delivery_mode=2, message_id=mid))
                confirmed.append(mid)
            conn.close()
        except (pika.exceptions.AMQPError, OSError):
            stop.wait(0.2)


def _consumer(url: Callable[[], str], queue: str, got: set[str], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            conn = pika.BlockingConnection(pika.URLParameters(url()))
            ch = conn.channel()
            ch.basic_qos(prefetch_count=20)
            for method, props, _ in ch.consume(queue, inactivity_timeout=0.2):
                if stop.is_set():
                    break
                if method is not None:
                    got.add(props.message_id)
                    ch.basic_ack(method.delivery_tag)
            conn.close()
        except (pika.exceptions.AMQPError, OSError):
            stop.wait(0.2)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_queue_federation_loses_nothing_when_each_broker_is_killed(broker_factory, tmp_path):
    up_port, down_port = free_port(), free_port()
    up = broker_factory("--amqp-port", str(up_port), data_dir=tmp_path / "up")
    down = broker_factory("--amqp-port", str(down_port), data_dir=tmp_path / "down")
    q = "fed-load"
    declare(down.url, q)
    declare(up.url, q)
    federate_queue(down, up_port, q)
    assert wait_until(lambda: (queue_link(down, q) or {}).get("status") == "running", timeout=10)
    confirmed: list[str] = []
    got: set[str] = set()
    stop_publishing, stop = threading.Event(), threading.Event()
    threads = [threading.Thread(target=_publisher, args=(lambda: up.url, q, confirmed, stop_publishing), daemon=True),
               threading.Thread(target=_consumer, args=(lambda: down.url, q, got, stop), daemon=True)]
    for t in threads:
        t.start()
    try:
        assert wait_until(lambda: len(got) > 300, timeout=30)
        down.kill()  # the downstream dies: what its link held unconfirmed stays upstream
        down.start()
        mark = len(got)
        assert wait_until(lambda: len(got) > mark + 300, timeout=30)
        up.kill()  # the upstream dies: its queue keeps what was confirmed to the publisher
        up.start()
        mark = len(got)
        assert wait_until(lambda: len(got) > mark + 300, timeout=30)
        stop_publishing.set()
        threads[0].join(10)
        sent = set(confirmed)
        assert wait_until(lambda: sent.issubset(got), timeout=60), \
            f"{len(sent - set(got))} of {len(sent)} confirmed messages missing"
        assert len(sent) > 900
    finally:
        stop_publishing.set()
        stop.set()
        for t in threads:
            t.join(10)
