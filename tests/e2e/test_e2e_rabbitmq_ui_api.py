"""The API answers RabbitMQ 3.10's own management UI relies on (docs/http-api.md, "RabbitMQ's
management UI"), each asked as that UI asks: its extensions, chart samples, the ``auth`` query
parameter and multipart upload of definitions, idle_since, and the endpoints of its buttons."""

from __future__ import annotations

import base64
import json

import httpx
import pika
import pytest
from e2e_support import unique, wait_until

pytestmark = pytest.mark.timeout(60)

NODE = "headrace@localhost"


@pytest.fixture
def http(broker):
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as client:
        yield client


def test_extensions_list_the_uis_dispatcher(http):
    assert http.get("/api/extensions").json() == [{"javascript": "dispatcher.js"}]


def test_details_carry_samples_when_history_is_asked(broker, http):
    """As RabbitMQ 3.10 answers its UI: with ``*_age`` and ``*_incr``, each ``*_details`` has the
    samples of the range, newest first, one per ``incr`` on its grid (``age / incr + 1`` of them,
    the object's first ones zero), with ``avg`` and ``avg_rate``; without, the rate alone."""
    q = unique("samples")
    assert http.put(f"/api/queues/%2F/{q}", json={}).status_code == 201
    ages = {"lengths_age": 60, "lengths_incr": 5, "msg_rates_age": 60, "msg_rates_incr": 5}
    body = http.get(f"/api/queues/%2F/{q}", params=ages).json()
    for details in (body["messages_details"], body["message_stats"]["publish_details"]):
        samples = details["samples"]
        assert len(samples) == 13 and all(set(s) == {"sample", "timestamp"} for s in samples)
        stamps = [s["timestamp"] for s in samples]
        assert stamps == sorted(stamps, reverse=True) and {a - b for a, b in zip(stamps, stamps[1:])} == {5000}
        assert stamps[0] % 5000 == 0
        assert {"avg", "avg_rate", "rate"} <= set(details)
    overview = http.get("/api/overview", params=ages).json()
    assert len(overview["queue_totals"]["messages_details"]["samples"]) == 13
    assert len(overview["message_stats"]["publish_details"]["samples"]) == 13
    plain = http.get(f"/api/queues/%2F/{q}").json()
    assert "samples" not in plain["messages_details"]
    # the node page asks for node_stats alone, and charts every figure it shows with it
    node = http.get(f"/api/nodes/{NODE}", params={"node_stats_age": 60, "node_stats_incr": 5}).json()
    details = {k: v for k, v in node.items() if k.endswith("_details")}
    assert {"mem_used_details", "fd_used_details", "connection_created_details", "io_write_count_details"} <= set(details)
    assert all(len(v["samples"]) == 13 for v in details.values())


@pytest.mark.parametrize("query", ["lengths_age=0&lengths_incr=5", "msg_rates_age=60&msg_rates_incr=0",
                                   "msg_rates_age=5000&msg_rates_incr=5"])
def test_an_invalid_range_is_refused_as_rabbitmq_refuses_it(http, query):
    r = http.get(f"/api/overview?{query}")
    assert r.status_code == 400
    assert r.json()["error"] == "bad_request" and r.json()["reason"].startswith("Invalid range parameters: age ")


def test_definitions_download_authenticates_by_the_auth_parameter(broker):
    auth = base64.b64encode(b"guest:guest").decode()
    with httpx.Client(base_url=broker.http_url, timeout=10) as anonymous:
        r = anonymous.get("/api/definitions", params={"download": "defs.json", "auth": auth})
        assert r.status_code == 200, r.text
        assert r.headers["content-disposition"] == 'attachment; filename="defs.json"'
        assert "queues" in r.json()
        wrong = base64.b64encode(b"guest:nope").decode()
        assert anonymous.get("/api/definitions", params={"auth": wrong}).status_code == 401
        # read on the definitions paths only, as RabbitMQ reads it
        assert anonymous.get("/api/overview", params={"auth": auth}).status_code == 401


def test_definitions_upload_as_multipart_form(broker, http):
    q = unique("uploaded")
    doc = {"queues": [{"name": q, "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}]}
    auth = base64.b64encode(b"guest:guest").decode()
    with httpx.Client(base_url=broker.http_url, timeout=10) as anonymous:
        r = anonymous.post("/api/definitions", params={"auth": auth},
                           files={"file": ("defs.json", json.dumps(doc).encode(), "application/json")})
        assert r.status_code == 204, r.text
        assert http.get(f"/api/queues/%2F/{q}").status_code == 200
        bad = anonymous.post("/api/definitions", params={"auth": auth},
                             files={"file": ("defs.json", b"{not json", "application/json")})
        assert bad.status_code == 400 and "invalid JSON" in bad.json()["reason"]
        none = anonymous.post("/api/definitions", params={"auth": auth}, files={"other": ("x", b"{}")})
        assert none.status_code == 400 and "'file'" in none.json()["reason"]


def test_idle_since_only_for_an_idle_queue_and_channel(broker, http):
    q = unique("busy")
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port)) as conn:
        ch = conn.channel()
        ch.queue_declare(q)
        ch.basic_publish("", q, b"x")
        assert "idle_since" not in http.get(f"/api/queues/%2F/{q}").json()
        channels = http.get("/api/channels").json()
        assert channels and all("idle_since" not in c for c in channels)


def test_idle_since_appears_once_a_queue_is_left_alone(broker, http):
    q = unique("idle")
    assert http.put(f"/api/queues/%2F/{q}", json={}).status_code == 201
    assert "idle_since" not in http.get(f"/api/queues/%2F/{q}").json()  # just declared
    assert wait_until(lambda: "idle_since" in http.get(f"/api/queues/%2F/{q}").json(), timeout=10)
    assert http.get(f"/api/queues/%2F/{q}").json()["idle_since"].endswith("+00:00")


def test_ui_buttons_endpoints(broker, http):
    q = unique("actions")
    assert http.put(f"/api/queues/%2F/{q}", json={}).status_code == 201
    assert http.post(f"/api/queues/%2F/{q}/actions", json={"action": "sync"}).status_code == 204
    assert http.post(f"/api/queues/%2F/{q}/actions", json={"action": "cancel_sync"}).status_code == 204
    bad = http.post(f"/api/queues/%2F/{q}/actions", json={"action": "explode"})
    assert bad.status_code == 400 and bad.json()["error"] == "bad_request"
    assert http.post(f"/api/queues/%2F/{unique('none')}/actions", json={"action": "sync"}).status_code == 404
    assert http.post(f"/api/vhosts/%2F/start/{NODE}").status_code == 204
    assert http.post("/api/vhosts/%2F/start/other@node").status_code == 404
    assert http.put("/api/feature-flags/quorum_queue/enable").status_code == 204
    assert http.put("/api/feature-flags/no_such_flag/enable").status_code == 400
    assert http.delete("/api/reset").status_code == 204
    assert http.delete(f"/api/reset/{NODE}").status_code == 204
    assert http.get(f"/api/nodes/{NODE}/memory").status_code == 200


def test_node_process_bar_is_not_full(http):
    node = http.get("/api/nodes").json()[0]
    assert node["proc_total"] > node["proc_used"]


def test_node_io_and_persistence_statistics_come_from_the_message_store(broker, http):
    """The node page's "Persistence" and "I/O statistics": real counts of the store's writes, fsyncs
    and records, rising as persistent messages are published and acknowledged."""
    before = http.get(f"/api/nodes/{NODE}").json()
    q = unique("persisted")
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(q, durable=True)
        for _ in range(5):
            ch.basic_publish("", q, b"x" * 100, pika.BasicProperties(delivery_mode=2))
        for _ in range(5):
            method, _, _ = ch.basic_get(q)
            ch.basic_ack(method.delivery_tag)

    def acks_written() -> bool:  # by the flusher, after the get's answer
        return (http.get(f"/api/nodes/{NODE}").json()["queue_index_journal_write_count"]
                - before["queue_index_journal_write_count"] >= 5)
    assert wait_until(acks_written)
    after = http.get(f"/api/nodes/{NODE}").json()
    assert after["msg_store_write_count"] - before["msg_store_write_count"] >= 5
    assert after["io_write_count"] > before["io_write_count"]
    assert after["io_write_bytes"] - before["io_write_bytes"] >= 500
    assert after["io_sync_count"] > before["io_sync_count"]
    for key in ("io_read_count", "io_seek_count", "queue_index_read_count", "io_sync_avg_time"):
        assert after[key] == 0 and "rate" in after[key + "_details"]
