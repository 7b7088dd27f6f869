"""The memory alarm counts messages and buffers, not the fixed cost of the objects: thousands of
empty queues with bindings past the watermark leave publishers unblocked (nothing could ever drain
them), their estimated cost shows in its own gauge (``/metrics``, ``/api/nodes/<node>/memory``)
with a log line, and messages still raise and clear the alarm. The per-object costs are measured
by benchmarks/bench_object_costs.py."""

from __future__ import annotations

import re
import time

import httpx
import pika
import pytest

pytestmark = pytest.mark.timeout(60)

WATERMARK = 8_000_000
OBJECTS = 4000  # queues and as many topic bindings: ~9.6 MB by the measured costs, no message


def topology_gauge(http: httpx.Client) -> int:
    match = re.search(r"^headrace_topology_memory_bytes (\d+)", http.get("/metrics").text, re.M)
    assert match, "no topology gauge"
    return int(match.group(1))


def test_objects_alone_do_not_block_publishers_and_messages_still_do(broker_factory):
    proc = broker_factory(env={"HEADRACE_MEMORY_HIGH_WATERMARK": str(WATERMARK),
                               "HEADRACE_METRICS": "aggregate"})
    events: list[str] = []
    params = pika.URLParameters(proc.url)
    params.blocked_connection_timeout = 60
    publisher = pika.BlockingConnection(params)
    publisher.add_on_connection_blocked_callback(lambda c, f: events.append(f.method.reason))
    publisher.add_on_connection_unblocked_callback(lambda c, f: events.append("unblocked"))
    channel = publisher.channel()
    channel.confirm_delivery()
    channel.basic_publish("", "nowhere", b"a publishing connection")

    def pump(cond) -> bool:
        deadline = time.monotonic() + 15
        while not cond():
            if time.monotonic() > deadline:
                return False
            publisher.process_data_events(time_limit=0.1)
        return True

    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=30) as http:
        before = topology_gauge(http)
        assert http.put("/api/vhosts/costly").status_code == 201
        assert http.put("/api/permissions/costly/guest",
                        json={"configure": ".*", "write": ".*", "read": ".*"}).status_code in (201, 204)
        doc = {
            "queues": [{"name": f"q{i}", "vhost": "costly", "durable": False, "auto_delete": False,
                        "arguments": {}} for i in range(OBJECTS)],
            "bindings": [{"source": "amq.topic", "vhost": "costly", "destination": f"q{i}",
                          "destination_type": "queue", "routing_key": f"k.{i}.#", "arguments": {}}
                         for i in range(OBJECTS)],
        }
        assert http.post("/api/definitions", json=doc).status_code in (201, 204)
        # a memory sample after the import: the gauge holds the objects' cost, past half the watermark
        assert pump(lambda: topology_gauge(http) - before > WATERMARK // 2), proc.log[-2000:]
        # that same sample (the gauge and the alarm are set together) left the alarm down
        assert http.get("/api/overview").json()["alarms"] == []
        node = http.get("/api/nodes").json()[0]["name"]
        memory = http.get(f"/api/nodes/{node}/memory").json()["memory"]
        assert memory["topology"] > WATERMARK // 2 and memory["topology_parts"]["queues"] > 0
        assert memory["topology_parts"]["bindings"] > 0 and memory["messages"] < WATERMARK // 2
        assert http.get("/api/nodes/nobody/memory").status_code == 404
        assert "the memory alarm counts messages and buffers only" in proc.log, proc.log[-2000:]
        # the publisher is read and confirmed, never blocked
        channel.basic_publish("", "nowhere", b"still read")
        assert events == [] and http.get("/api/overview").json()["alarms"] == []

        # messages do raise it: ~9 MB held in one queue (published over HTTP, which answers 503
        # once the alarm is up instead of waiting), then a purge clears it
        assert http.put("/api/queues/%2F/held", json={}).status_code in (201, 204)
        message = {"properties": {}, "routing_key": "held", "payload": "m" * 100_000, "payload_encoding": "string"}
        codes = {http.post("/api/exchanges/%2F/amq.default/publish", json=message).status_code for _ in range(90)}
        assert codes <= {200, 503} and 200 in codes
        assert pump(lambda: events == ["low on memory"]), proc.log[-2000:]
        assert http.get("/api/overview").json()["alarms"] == ["memory"]
        assert http.delete("/api/queues/%2F/held/contents").status_code == 204
        assert pump(lambda: events == ["low on memory", "unblocked"]), proc.log[-2000:]
        assert http.get("/api/overview").json()["alarms"] == []
        assert http.delete("/api/vhosts/costly").status_code == 204
    publisher.close()
