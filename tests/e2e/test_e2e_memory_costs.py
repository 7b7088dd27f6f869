"""The memory alarm's "held" calculation counts what queues and bindings cost, not only message
bytes: thousands of empty queues with bindings raise the alarm (publishers get connection.blocked),
and deleting them clears it. The per-object costs are measured by benchmarks/alarm_costs.py."""

from __future__ import annotations

import time

import httpx
import pika
import pytest

pytestmark = pytest.mark.timeout(60)

OBJECTS = 2000  # queues and as many topic bindings: ~10 MB by the measured costs, no message


def test_empty_queues_and_bindings_raise_and_clear_the_memory_alarm(broker_factory):
    proc = broker_factory(env={"HEADRACE_MEMORY_HIGH_WATERMARK": "8000000"})
    events: list[str] = []
    params = pika.URLParameters(proc.url)
    params.blocked_connection_timeout = 60
    publisher = pika.BlockingConnection(params)
    publisher.add_on_connection_blocked_callback(lambda c, f: events.append(f.method.reason))
    publisher.add_on_connection_unblocked_callback(lambda c, f: events.append("unblocked"))
    publisher.channel().basic_publish("", "nowhere", b"a publishing connection")

    def pump(cond) -> bool:
        deadline = time.monotonic() + 15
        while not cond():
            if time.monotonic() > deadline:
                return False
            publisher.process_data_events(time_limit=0.1)
        return True

    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=30) as http:
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
        assert pump(lambda: events == ["low on memory"]), proc.log[-2000:]
        assert http.get("/api/overview").json()["alarms"] == ["memory"]
        assert http.delete("/api/vhosts/costly").status_code == 204
        assert pump(lambda: events == ["low on memory", "unblocked"]), proc.log[-2000:]
        assert http.get("/api/overview").json()["alarms"] == []
