"""Statistics of the management API carry real values, computed as RabbitMQ 3.10 computes them:
counters with rates for vhosts, exchanges, queues, channels, connections and the overview's churn, socket
traffic and addresses of connections, and the timestamp of a queue's head message. Traffic goes
through a real pika client; rates come from the history the broker samples (here every second), so
each check asks for the last half minute of it and waits for a sample after the traffic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pika
import pytest
from e2e_support import FAST_STATS, HISTORY, rose, unique, wait_until

pytestmark = pytest.mark.timeout(60)
BROKER_ENV = FAST_STATS


def test_vhost_exchange_queue_and_connection_stats_follow_traffic(broker, http):
    vhost, x, q = unique("sv"), unique("sx"), unique("sq")
    assert http.put(f"/api/vhosts/{vhost}").status_code == 201
    before = {path: http.get(path).json() for path in ("/api/overview", f"/api/vhosts/{vhost}")}
    conn = pika.BlockingConnection(pika.URLParameters(
        f"amqp://guest:guest@127.0.0.1:{broker.amqp_port}/{vhost}?heartbeat=0"))
    try:
        ch = conn.channel()
        ch.exchange_declare(x, "topic")
        ch.queue_declare(q)
        ch.queue_declare(q)  # a redeclare: declared twice, created once
        ch.queue_bind(q, x, "a.#")
        for path in (f"/api/exchanges/{vhost}/{x}", f"/api/queues/{vhost}/{q}"):
            before[path] = http.get(path).json()
        for i in range(5):
            ch.basic_publish(x, "a.b", b"hello", pika.BasicProperties(timestamp=1_700_000_000 + i))
        ch.basic_publish(x, "nowhere", b"lost")
        method, _, _ = ch.basic_get(q)
        ch.basic_ack(method.delivery_tag)
        assert ch.basic_get(q, auto_ack=True)[0] is not None
        local = [c for c in http.get("/api/connections").json() if c["vhost"] == vhost]
        assert len(local) == 1
        c = local[0]
        assert c["host"] == "127.0.0.1" and c["port"] == broker.amqp_port and c["peer_host"] == "127.0.0.1"
        assert isinstance(c["peer_port"], int) and c["peer_port"] not in (0, broker.amqp_port)
        assert c["recv_oct"] > 6 * len(b"hello") and c["send_oct"] > 0 and c["recv_cnt"] >= 1 and c["send_cnt"] >= 1
        assert set(c["recv_oct_details"]) == {"rate"} and c["ssl"] is False

        queue = http.get(f"/api/queues/{vhost}/{q}").json()
        stats = queue["message_stats"]
        assert queue["messages"] == 3 and queue["head_message_timestamp"] == 1_700_000_002
        assert (stats["publish"], stats["get"], stats["get_no_ack"], stats["deliver_get"], stats["ack"],
                stats["deliver"], stats["redeliver"]) == (5, 1, 1, 2, 1, 0, 0)
        assert queue["incoming"] == [] and queue["deliveries"] == []

        def details(path: str, *keys: str) -> Callable[[], dict[str, Any]]:
            def read() -> dict[str, Any]:
                body = http.get(path, params=HISTORY).json()
                for key in keys:
                    body = body[key]
                return body
            return read
        qpath, xpath, vpath = f"/api/queues/{vhost}/{q}", f"/api/exchanges/{vhost}/{x}", f"/api/vhosts/{vhost}"
        assert rose(details(qpath, "message_stats", "publish_details"))
        assert rose(details(qpath, "message_stats", "deliver_get_details")) and rose(details(qpath, "messages_details"))

        exchange = http.get(f"/api/exchanges/{vhost}/{x}").json()["message_stats"]
        assert (exchange["publish_in"], exchange["publish_out"]) == (6, 5)
        assert rose(details(xpath, "message_stats", "publish_in_details"))
        assert rose(details(xpath, "message_stats", "publish_out_details"))
        listed = next(e for e in http.get(f"/api/exchanges/{vhost}").json() if e["name"] == x)
        assert listed["message_stats"]["publish_in"] == 6

        v = http.get(f"/api/vhosts/{vhost}").json()
        vs = v["message_stats"]
        assert (vs["publish"], vs["drop_unroutable"], vs["return_unroutable"], vs["get"], vs["ack"]) == (6, 1, 0, 1, 1)
        assert v["messages"] == 3 and v["recv_oct"] >= c["recv_oct"]
        assert rose(details(vpath, "message_stats", "publish_details")) and rose(details(vpath, "messages_details"))
        assert rose(details(vpath, "recv_oct_details"))
        assert rose(details(f"/api/connections/{c['name']}", "recv_oct_details"))

        channel = next(c for c in http.get(f"/api/vhosts/{vhost}/channels").json())["message_stats"]
        assert (channel["publish"], channel["drop_unroutable"], channel["get"], channel["get_no_ack"],
                channel["deliver_get"], channel["deliver"], channel["ack"]) == (6, 1, 1, 1, 2, 0, 1)

        churn = http.get("/api/overview").json()["churn_rates"]
        old = before["/api/overview"]["churn_rates"]
        assert churn["queue_declared"] - old["queue_declared"] >= 2
        assert churn["queue_created"] - old["queue_created"] >= 1
        assert churn["connection_created"] > old["connection_created"]
        assert rose(details("/api/overview", "churn_rates", "channel_created_details"))
        assert rose(details("/api/overview", "churn_rates", "queue_declared_details"))
    finally:
        conn.close()
    # a closed connection's traffic stays in its vhost's totals
    assert wait_until(lambda: not [c for c in http.get("/api/connections").json() if c["vhost"] == vhost])
    assert http.get(f"/api/vhosts/{vhost}").json()["recv_oct"] >= c["recv_oct"]
    http.delete(f"/api/vhosts/{vhost}")


def test_head_message_timestamp_is_null_without_one(broker, http):
    q = unique("ts")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    assert http.get(f"/api/queues/%2F/{q}").json()["head_message_timestamp"] is None
    http.post("/api/exchanges/%2F/amq.default/publish", json={"routing_key": q, "payload": "x", "properties": {}})
    assert http.get(f"/api/queues/%2F/{q}").json()["head_message_timestamp"] is None
    http.post("/api/exchanges/%2F/amq.default/publish",
              json={"routing_key": q, "payload": "y", "properties": {"timestamp": 1_600_000_000}})
    http.post(f"/api/queues/%2F/{q}/get", json={"count": 1, "ackmode": "ack_requeue_false"})
    assert http.get(f"/api/queues/%2F/{q}").json()["head_message_timestamp"] == 1_600_000_000
    http.delete(f"/api/queues/%2F/{q}")


def test_disable_stats_leaves_out_every_statistic(broker, http, conn):
    """RabbitMQ's ``disable_stats=true`` on the lists: queues, exchanges and vhosts without their
    statistics (and without sampling them), connections as their basic info."""
    q = unique("ds")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    rows = http.get("/api/queues/%2F", params={"disable_stats": "true", "name": q}).json()
    assert rows and all(not any(k.endswith("_details") or k == "message_stats" for k in row) for row in rows)
    exchanges = http.get("/api/exchanges/%2F", params={"disable_stats": "true"}).json()
    assert exchanges and all("message_stats" not in x for x in exchanges)
    assert "message_stats" in http.get("/api/exchanges/%2F").json()[0]
    vhost = next(v for v in http.get("/api/vhosts", params={"disable_stats": "true"}).json() if v["name"] == "/")
    assert "messages" not in vhost and "message_stats" not in vhost and vhost["cluster_state"]
    assert wait_until(lambda: http.get("/api/connections").json())
    assert all(set(c) == {"name", "node", "user", "vhost"}
               for c in http.get("/api/connections", params={"disable_stats": "true"}).json())
    http.delete(f"/api/queues/%2F/{q}")
