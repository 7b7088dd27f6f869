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
from two_brokers import Publisher, api, publish, federation_link, kill_each_in_turn, link_running, queue_count

pytestmark = pytest.mark.timeout(120)


def federate_queue(down: Any, up_port: int, queue: str, **upstream: Any) -> None:
    assert api(down, "PUT", "/api/parameters/federation-upstream/%2F/up", {"value": {
        "uri": f"amqp://guest:guest@127.0.0.1:{up_port}", "reconnect-delay": 0.2, "prefetch-count": 50,
        **upstream}}).status_code in (201, 204)
    assert api(down, "PUT", f"/api/policies/%2F/fq-{queue}", {
        "pattern": f"^{queue}$", "apply-to": "queues", "definition": {"federation-upstream": "up"}}).status_code in (201, 204)


def declare(url: str, queue: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().queue_declare(queue, durable=True)
    conn.close()


def test_a_federated_queue_fetches_only_for_its_consumers(broker_pair):
    up, down = broker_pair
    q = unique("fed-queue")
    declare(down.url, q)
    federate_queue(down, up.amqp_port, q, **{"prefetch-count": 5})
    assert wait_until(link_running(down, type="queue", queue=q), timeout=10), \
        api(down, "GET", "/api/federation-links").json()
    link = federation_link(down, type="queue", queue=q)
    assert link is not None and (link["upstream"], link["upstream_queue"]) == ("up", q)
    publish(up.url, q, [f"m{i}".encode() for i in range(100)], declare=False)  # the link declared it upstream
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
    publish(up.url, q, [b"late"], declare=False)
    assert not wait_until(lambda: queue_count(up, q) != left_up + 1, timeout=0.5)
    conn.close()
    assert got == [f"m{i}".encode() for i in range(60)]  # in the upstream's order


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
def test_queue_federation_loses_nothing_when_each_broker_is_killed(broker_pair):
    up, down = broker_pair
    q = "fed-load"
    declare(down.url, q)
    declare(up.url, q)
    federate_queue(down, up.amqp_port, q)
    assert wait_until(link_running(down, type="queue", queue=q), timeout=10)
    got: set[str] = set()
    stop = threading.Event()
    consumer = threading.Thread(target=_consumer, args=(lambda: down.url, q, got, stop), daemon=True)
    consumer.start()
    try:
        with Publisher(up, "", q, prefix="q-") as publisher:
            # the downstream dies: what its link held unconfirmed stays upstream; then the upstream
            # dies: its queue keeps what was confirmed to the publisher
            kill_each_in_turn(lambda: len(got), 300, down, up)
        sent = set(publisher.confirmed)
        assert wait_until(lambda: sent.issubset(got), timeout=60), \
            f"{len(sent - set(got))} of {len(sent)} confirmed messages missing"
        assert len(sent) > 900
    finally:
        stop.set()
        consumer.join(10)
