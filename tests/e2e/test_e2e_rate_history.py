"""The rate history the broker keeps (``server/http/sampler.py``), read through the real HTTP API
as RabbitMQ's UI reads it: samples on the grid of each request's ``*_age``/``*_incr``, newest first,
one per increment, for queues, exchanges, vhosts, connections, channels and the overview; rates
there before anyone looked. The broker samples every second here (``FAST_STATS``: levels of 60 s
at 1 s and 600 s at 10 s) instead of RabbitMQ's 5 s."""

from __future__ import annotations

import threading
import time
from typing import Any

import pika
import pytest
from e2e_support import FAST_STATS, unique, wait_until

pytestmark = pytest.mark.timeout(60)
BROKER_ENV = FAST_STATS

RANGE = {"lengths_age": 10, "lengths_incr": 1, "msg_rates_age": 10, "msg_rates_incr": 1,
         "data_rates_age": 10, "data_rates_incr": 1}


def stamps(details: dict[str, Any]) -> list[int]:
    return [s["timestamp"] for s in details["samples"]]


def test_samples_follow_a_queue_on_the_grid_of_the_request(broker, http):
    q = unique("hist")
    assert http.put(f"/api/queues/%2F/{q}", json={"durable": False}).status_code == 201
    for i in range(10):
        http.post("/api/exchanges/%2F/amq.default/publish", json={"routing_key": q, "payload": str(i),
                                                                  "properties": {}})
    path = f"/api/queues/%2F/{q}"

    def sampled() -> bool:  # until a sample is taken, the samples are the current value throughout
        samples = http.get(path, params=RANGE).json()["messages_details"]["samples"]
        return samples[0]["sample"] == 10 and samples[-1]["sample"] == 0
    assert wait_until(sampled)
    asked_at = time.time() * 1000
    body = http.get(path, params=RANGE).json()
    depth, publish = body["messages_details"], body["message_stats"]["publish_details"]
    for details in (depth, publish):
        t = stamps(details)
        assert len(t) == 11 and all(a - b == 1000 for a, b in zip(t, t[1:])) and t[0] % 1000 == 0
        assert asked_at - 2000 <= t[0] <= asked_at + 1000  # lengths round up, rates down, as RabbitMQ
    assert depth["samples"][0]["sample"] == 10 and depth["samples"][-1]["sample"] == 0  # before the queue was
    assert publish["samples"][0]["sample"] == 10 and publish["avg_rate"] > 0
    values = [s["sample"] for s in depth["samples"]]
    assert values == sorted(values, reverse=True)  # it only grew
    # a longer range is read from the coarser level, on its own grid
    coarse = http.get(path, params={"msg_rates_age": 300, "msg_rates_incr": 10}).json()
    t = stamps(coarse["message_stats"]["publish_details"])
    assert len(t) == 31 and all(a - b == 10_000 for a, b in zip(t, t[1:]))
    http.delete(path)


def test_rates_are_there_at_the_first_look(broker, http):
    """The history was kept before anyone asked: the first read of a busy queue, channel,
    connection and exchange already has its rate (rates sampled only when the API is read would
    start at 0 and take seconds to settle)."""
    q, x = unique("busy"), unique("busyx")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.exchange_declare(x, "fanout")
    ch.queue_declare(q)
    ch.queue_bind(q, x)
    stop = threading.Event()

    def publish() -> None:
        publisher = pika.BlockingConnection(pika.URLParameters(broker.url))
        pch = publisher.channel()
        while not stop.is_set():
            pch.basic_publish(x, "", b"m")
            publisher.process_data_events(time_limit=0.02)
        publisher.close()

    thread = threading.Thread(target=publish)
    thread.start()
    try:
        time.sleep(2.5)  # two samples of traffic, and nobody reading the API meanwhile
        queue = http.get(f"/api/queues/%2F/{q}").json()
        assert queue["message_stats"]["publish_details"]["rate"] > 0
        assert queue["messages_details"]["rate"] > 0
        exchange = http.get(f"/api/exchanges/%2F/{x}").json()
        assert exchange["message_stats"]["publish_in_details"]["rate"] > 0
        conns = http.get("/api/connections", params=RANGE).json()
        assert any(c["recv_oct_details"]["rate"] > 0 and len(c["recv_oct_details"]["samples"]) == 11 for c in conns)
        channels = http.get("/api/channels", params=RANGE).json()
        assert any(c["message_stats"]["publish_details"]["rate"] > 0 for c in channels)
        vhost = http.get("/api/vhosts/%2F", params=RANGE).json()
        assert len(vhost["message_stats"]["publish_details"]["samples"]) == 11
        assert vhost["recv_oct_details"]["avg_rate"] > 0
        overview = http.get("/api/overview", params=RANGE).json()
        assert overview["message_stats"]["publish_details"]["rate"] > 0
        assert len(overview["queue_totals"]["messages_details"]["samples"]) == 11
    finally:
        stop.set()
        thread.join(10)
        ch.queue_delete(q)
        ch.exchange_delete(x)
        conn.close()
