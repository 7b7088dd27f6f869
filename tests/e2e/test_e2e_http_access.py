"""Who may use which part of the HTTP API, against a real broker: the management tag, the rights the
aliveness test uses, totals limited to visible vhosts, and what /metrics tells without credentials."""

from __future__ import annotations

import re

import httpx
import pika
import pytest
from e2e_support import unique

pytestmark = pytest.mark.timeout(60)


def add_user(http: httpx.Client, tags: str, vhost: str = "/", configure: str = ".*", write: str = ".*",
             read: str = ".*") -> str:
    name = unique("u")
    assert http.put(f"/api/users/{name}", json={"password": "pw", "tags": tags}).status_code == 201
    assert http.put(f"/api/permissions/{vhost.replace('/', '%2F')}/{name}",
                    json={"configure": configure, "write": write, "read": read}).status_code == 201
    return name


def as_user(broker, name: str) -> httpx.Client:
    return httpx.Client(base_url=broker.http_url, auth=(name, "pw"), timeout=10)


def test_aliveness_needs_its_rights_and_takes_only_its_own_message(broker, http):
    # another user's message waits in the queue named aliveness-test
    assert http.put("/api/queues/%2F/aliveness-test", json={"durable": False}).status_code in (201, 204)
    http.delete("/api/queues/%2F/aliveness-test/contents")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    conn.channel().basic_publish("", "aliveness-test", b"not yours", pika.BasicProperties(message_id="theirs"))
    conn.close()
    restricted = add_user(http, "management", configure="^own-", write="^own-", read="^own-")
    with as_user(broker, restricted) as client:
        r = client.get("/api/aliveness-test/%2F")
        assert r.status_code == 401 and r.json()["error"] == "not_authorised"
        assert "'aliveness-test'" in r.json()["reason"]
    for _ in range(3):  # a user with the rights passes, again and again, and leaves the message alone
        assert http.get("/api/aliveness-test/%2F").json() == {"status": "ok"}
    queue = http.get("/api/queues/%2F/aliveness-test").json()
    assert (queue["messages_ready"], queue["messages_unacknowledged"]) == (1, 0)
    got = http.post("/api/queues/%2F/aliveness-test/get", json={"count": 5, "ackmode": "ack_requeue_false"}).json()
    assert [(m["payload"], m["properties"]["message_id"], m["redelivered"]) for m in got] == [
        ("not yours", "theirs", False)]
    # and the check leaves no queue of its own behind
    assert [q["name"] for q in http.get("/api/queues/%2F").json() if q["name"].startswith("aliveness-test")] == [
        "aliveness-test"]
    http.delete("/api/queues/%2F/aliveness-test")


@pytest.mark.parametrize("path", ["/api/overview", "/api/vhosts", "/api/vhosts/%2F", "/api/health/checks/alarms",
                                  "/api/whoami", "/api/queues", "/api/aliveness-test/%2F"])
def test_a_user_without_a_management_tag_gets_401(broker, http, path):
    plain = add_user(http, "")
    with as_user(broker, plain) as client:
        r = client.get(path)
    assert r.status_code == 401
    assert r.json() == {"error": "not_authorised", "reason": "Not management user"}
    http.delete(f"/api/users/{plain}")


def test_overview_totals_count_only_visible_vhosts(broker, http):
    hidden = unique("hidden")
    assert http.put(f"/api/vhosts/{hidden}").status_code == 201
    for i in range(3):
        assert http.put(f"/api/queues/{hidden}/q{i}", json={"durable": False}).status_code == 201
        assert http.post(f"/api/exchanges/{hidden}/amq.default/publish",
                         json={"routing_key": f"q{i}", "payload": "x"}).json() == {"routed": True}
    seen = add_user(http, "management")  # permissions on / only
    with as_user(broker, seen) as client:
        mine = client.get("/api/overview").json()
        assert hidden not in {v["name"] for v in client.get("/api/vhosts").json()}
    everything = http.get("/api/overview").json()
    root = [q for q in http.get("/api/queues/%2F").json()]
    assert mine["object_totals"]["queues"] == len(root)
    assert everything["object_totals"]["queues"] >= len(root) + 3
    assert mine["queue_totals"]["messages"] == sum(q["messages"] for q in root)
    assert everything["queue_totals"]["messages"] >= mine["queue_totals"]["messages"] + 3
    assert mine["object_totals"]["exchanges"] == len(http.get("/api/exchanges/%2F").json())
    assert http.delete(f"/api/vhosts/{hidden}").status_code == 204


def metric_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_metrics_are_off_by_default_and_never_name_queues_unless_set(broker_factory):
    q = unique("secret-queue-name")
    for setting, status in ((None, 404), ("aggregate", 200), ("per-queue", 200)):
        proc = broker_factory(env={"HEADRACE_METRICS": setting} if setting else {})  # one after the other
        with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
            assert http.put(f"/api/queues/%2F/{q}", json={"durable": False}).status_code == 201
            assert http.post("/api/exchanges/%2F/amq.default/publish",
                             json={"routing_key": q, "payload": "m"}).json() == {"routed": True}
        r = httpx.get(proc.http_url + "/metrics", timeout=5)  # no credentials, as a scraper
        assert r.status_code == status, setting
        if setting is None:
            assert q not in r.text and r.json()["error"] == "not_found"
        elif setting == "aggregate":
            assert q not in r.text and "queue=" not in r.text
            assert 'headrace_vhost_messages_ready{vhost="/"} 1' in metric_lines(r.text)
            assert 'headrace_vhost_queues{vhost="/"} 1' in metric_lines(r.text)
            assert re.search(r'^headrace_alarm\{resource="memory"\} 0$', r.text, re.M)
        else:
            assert f'headrace_queue_messages_ready{{vhost="/",queue="{q}"}} 1' in metric_lines(r.text)
        proc.stop()
