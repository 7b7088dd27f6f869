"""A federated queue's link is woken by its queue's demand, not by a timer: a consumer that gets
its credit back (an ack) on an emptied queue starts the fetch again at once, one message at a time
when it takes one at a time, and the link never fetches ahead of that credit."""

from __future__ import annotations

import pika
import pytest
from e2e_support import unique, wait_until
from test_e2e_federated_queues import declare, federate_queue
from two_brokers import free_port, link_running, publish, queue_count

pytestmark = pytest.mark.timeout(120)


def test_credit_given_back_wakes_the_link(broker_factory, tmp_path):
    up_port = free_port()
    up = broker_factory("--amqp-port", str(up_port), data_dir=tmp_path / "up")
    down = broker_factory(data_dir=tmp_path / "down")
    q = unique("fed-demand")
    declare(down.url, q)
    federate_queue(down, up_port, q, **{"prefetch-count": 1})
    assert wait_until(link_running(down, type="queue", queue=q), timeout=10)
    publish(up.url, q, [f"m{i}".encode() for i in range(12)])
    assert queue_count(up, q) == 12 and queue_count(down, q) == 0

    conn = pika.BlockingConnection(pika.URLParameters(down.url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1)
    got: list[bytes] = []
    for method, _, body in ch.consume(q, inactivity_timeout=10):
        assert method is not None, f"stalled after {len(got)}: the ack did not wake the link"
        got.append(body)
        # while this one is unacked the consumer has no credit: at most the link's one in flight
        # and one ready down here have left the upstream
        assert 12 - queue_count(up, q) <= len(got) + 2
        ch.basic_ack(method.delivery_tag)
        if len(got) == 12:
            break
    ch.cancel()
    conn.close()
    assert got == [f"m{i}".encode() for i in range(12)]
    assert queue_count(up, q) == 0
