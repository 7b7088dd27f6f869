"""The HTTP management API against a real broker, together with pika."""

from __future__ import annotations

import httpx
import pika
import pytest
from e2e_support import unique

pytestmark = pytest.mark.timeout(60)
# this module reads /metrics, which is off unless the 'metrics' setting says otherwise
BROKER_ENV = {"HEADRACE_METRICS": "per-queue"}


def test_auth_required_and_errors_are_json(broker, http):
    assert httpx.get(broker.http_url + "/api/overview").status_code == 401
    assert httpx.get(broker.http_url + "/api/overview", auth=("guest", "bad")).status_code == 401
    r = http.get("/api/queues/%2F/" + unique("missing"))
    assert r.status_code == 404 and set(r.json()) == {"error", "reason"}
    assert http.get("/api/nothing-here").status_code == 404
    assert http.post("/api/overview").status_code == 405
    r = http.put("/api/queues/%2F/" + unique("q"), content=b"{not json")
    assert r.status_code == 400 and "invalid JSON" in r.json()["reason"]


def test_queue_exchange_binding_publish_get_cycle(broker, http):
    q, x = unique("hq"), unique("hx")
    assert http.put(f"/api/queues/%2F/{q}", json={"durable": False}).status_code == 201
    assert http.put(f"/api/queues/%2F/{q}", json={"durable": False}).status_code == 204
    assert http.put(f"/api/exchanges/%2F/{x}", json={"type": "topic", "durable": False}).status_code == 201
    r = http.post(f"/api/bindings/%2F/e/{x}/q/{q}", json={"routing_key": "a.#"})
    assert r.status_code == 201 and r.headers["location"].startswith("/api/bindings/")
    assert http.post(f"/api/exchanges/%2F/{x}/publish", json={"routing_key": "a.b", "payload": "hi",
                                                             "properties": {"headers": {"k": "v"}}}).json() == {"routed": True}
    assert http.post(f"/api/exchanges/%2F/{x}/publish", json={"routing_key": "zzz", "payload": ""}).json() == {"routed": False}
    info = http.get(f"/api/queues/%2F/{q}").json()
    assert info["messages_ready"] == 1 and info["message_stats"]["publish"] == 1
    got = http.post(f"/api/queues/%2F/{q}/get", json={"count": 5, "ackmode": "ack_requeue_true"}).json()
    assert [m["payload"] for m in got] == ["hi"] and got[0]["properties"]["headers"] == {"k": "v"}
    # requeued: an AMQP consumer sees it, redelivered
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    method, _, body = conn.channel().basic_get(q, auto_ack=True)
    assert body == b"hi" and method.redelivered
    conn.close()
    binding = next(b for b in http.get("/api/bindings/%2F").json() if b["destination"] == q and b["source"] == x)
    assert http.delete(f"/api/bindings/%2F/e/{x}/q/{q}/{binding['properties_key']}").status_code == 204
    assert http.delete(f"/api/queues/%2F/{q}/contents").status_code == 204
    assert http.delete(f"/api/queues/%2F/{q}").status_code == 204
    assert http.delete(f"/api/exchanges/%2F/{x}").status_code == 204


def test_inequivalent_declare_is_400_and_pagination(http):
    q = unique("hq")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    r = http.put(f"/api/queues/%2F/{q}", json={"durable": True})
    assert r.status_code == 400 and "inequivalent" in r.json()["reason"]
    page = http.get("/api/exchanges/%2F", params={"page": 1, "page_size": 2}).json()
    assert page["page_size"] == 2 and len(page["items"]) == 2 and page["total_count"] >= 6
    http.delete(f"/api/queues/%2F/{q}")


def test_users_permissions_and_definitions(broker, http):
    name = unique("user")
    assert http.put(f"/api/users/{name}", json={"password": "pw", "tags": "management"}).status_code == 201
    assert http.put(f"/api/permissions/%2F/{name}", json={"configure": "^own-", "write": ".*", "read": ".*"}).status_code == 201
    with httpx.Client(base_url=broker.http_url, auth=(name, "pw")) as user_client:
        assert user_client.get("/api/whoami").json()["tags"] == ["management"]
        assert user_client.put("/api/queues/%2F/own-q", json={"durable": False}).status_code == 201
        assert user_client.put("/api/queues/%2F/other-q", json={"durable": False}).status_code == 401
        assert user_client.get("/api/definitions").status_code == 401
    defs = http.get("/api/definitions").json()
    assert any(u["name"] == name for u in defs["users"])
    assert all("password" not in u for u in defs["users"])
    assert http.delete(f"/api/users/{name}").status_code == 204
    http.delete("/api/queues/%2F/own-q")


def test_health_aliveness_and_metrics(broker, http):
    assert http.get("/api/health/checks/alarms").json() == {"status": "ok"}
    assert http.get("/api/aliveness-test/%2F").json() == {"status": "ok"}
    text = httpx.get(broker.http_url + "/metrics").text
    assert "# TYPE headrace_queue_messages_ready gauge" in text
    assert 'headrace_alarm{resource="memory"} 0' in text


def test_persistent_http_publish_answers_after_fsync(broker, http):
    q = unique("durable")
    http.put(f"/api/queues/%2F/{q}", json={"durable": True})
    r = http.post("/api/exchanges/%2F/amq.default/publish", json={"routing_key": q, "payload": "p",
                                                                  "properties": {"delivery_mode": 2}})
    assert r.status_code == 200 and r.json() == {"routed": True}
    assert http.get(f"/api/queues/%2F/{q}").json()["messages_ready"] == 1
    metrics = httpx.get(broker.http_url + "/metrics").text
    synced = [line for line in metrics.splitlines() if line.startswith("headrace_store_synced_total ")]
    assert synced and int(synced[0].split()[1]) >= 1  # the answer came after the fsync of that ticket
    http.delete(f"/api/queues/%2F/{q}")


def test_mirror_endpoints(http):
    x = unique("mx")
    http.put(f"/api/exchanges/%2F/{x}", json={"type": "fanout", "durable": True})
    assert http.put(f"/api/mirrors/%2F/{x}", json={"max_age_ms": 60000}).status_code == 204
    assert any(m["exchange"] == x for m in http.get("/api/mirrors").json())
    assert http.delete(f"/api/mirrors/%2F/{x}").status_code == 204
    http.delete(f"/api/exchanges/%2F/{x}")


def test_oversized_body_is_413(broker, http):
    r = http.post("/api/exchanges/%2F/amq.direct/publish", content=b"x" * (17 * 2**20))
    assert r.status_code == 413


def test_amqp_operations_respect_permissions(broker, http):
    name = unique("limited")
    http.put(f"/api/users/{name}", json={"password": "pw", "tags": ""})
    http.put(f"/api/permissions/%2F/{name}", json={"configure": "^mine-", "write": "^mine-", "read": "^mine-"})
    url = f"amqp://{name}:pw@127.0.0.1:{broker.amqp_port}/%2F"
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.queue_declare("mine-q", exclusive=True)
    ch.exchange_declare("mine-x", "fanout", auto_delete=True)
    ch.queue_bind("mine-q", "mine-x")
    denied = [
        lambda c: c.queue_declare("theirs-q"),
        lambda c: c.exchange_declare("theirs-x", "fanout"),
        lambda c: c.basic_publish("amq.fanout", "", b"x"),
        lambda c: c.basic_get("theirs-q"),
        lambda c: c.queue_bind("mine-q", "amq.direct", "k"),
    ]
    for op in denied:
        c = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            op(c)
            c.queue_declare("mine-q", passive=True)  # forces a round trip after async publishes
        assert info.value.reply_code == 403, op
    conn.close()
    other = f"amqp://{name}:pw@127.0.0.1:{broker.amqp_port}/nope"
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        pika.BlockingConnection(pika.URLParameters(other))
    http.delete(f"/api/users/{name}")


def test_publish_batch_ndjson(broker, http):
    q = unique("batch")
    http.put(f"/api/queues/%2F/{q}", json={"durable": True})
    lines = "\n".join(
        [f'{{"routing_key": "{q}", "payload": "m{i}", "properties": {{"delivery_mode": 2}}}}' for i in range(5)]
        + ['{"routing_key": "nowhere", "payload": "aGk=", "payload_encoding": "base64"}'])
    r = http.post("/api/exchanges/%2F/amq.default/publish-batch", content=lines,
                  headers={"content-type": "application/x-ndjson"})
    assert r.status_code == 200
    assert [x["routed"] for x in r.json()["results"]] == [True] * 5 + [False]
    assert http.get(f"/api/queues/%2F/{q}").json()["messages_ready"] == 5
    bad = http.post("/api/exchanges/%2F/amq.default/publish-batch", content='{"payload": 1}\nnot json')
    assert bad.status_code == 400 and "line" in bad.json()["reason"]
    http.delete(f"/api/queues/%2F/{q}")


def test_streaming_consume_with_acks_and_requeue_on_disconnect(broker, http):
    import json as _json

    q = unique("stream")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    for i in range(5):
        http.post("/api/exchanges/%2F/amq.default/publish", json={"routing_key": q, "payload": f"s{i}"})
    events = []
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as streamer:
        with streamer.stream("GET", f"/api/queues/%2F/{q}/consume", params={"prefetch": 3}) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            head = _json.loads(next(lines))
            tag = head["consumer"]
            for line in lines:
                if line.strip():
                    events.append(_json.loads(line))
                if len(events) == 3:  # the prefetch window: no more until acked
                    break
            assert [e["payload"] for e in events] == ["s0", "s1", "s2"]
            ack = http.post(f"/api/consumers/{tag}/settle", json={"delivery_ids": [events[0]["delivery_id"]]})
            assert ack.status_code == 204
            for line in lines:
                if line.strip():
                    events.append(_json.loads(line))
                    break
            assert events[-1]["payload"] == "s3"
            again = http.post(f"/api/consumers/{tag}/settle", json={"delivery_ids": [events[0]["delivery_id"]]})
            assert again.status_code == 406
    # the client left holding s1, s2, s3 unacked: they are back in the queue, redelivered
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    got = [ch.basic_get(q, auto_ack=True) for _ in range(4)]
    assert [g[2] for g in got] == [b"s1", b"s2", b"s3", b"s4"]  # back in their original places
    assert [g[0].redelivered for g in got] == [True, True, True, False]
    conn.close()
    http.delete(f"/api/queues/%2F/{q}")


def test_close_connection_via_api(broker, http):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ids = [c["id"] for c in http.get("/api/connections").json()]
    assert ids
    assert http.delete(f"/api/connections/{max(ids)}").status_code == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        conn.process_data_events(time_limit=5)
        conn.channel()
    assert info.value.reply_code == 320


def test_metrics_parse_and_count_known_traffic(broker, http):
    from prometheus_client.parser import text_string_to_metric_families

    q = unique("metered")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    for i in range(4):
        http.post("/api/exchanges/%2F/amq.default/publish", json={"routing_key": q, "payload": str(i)})
    http.post(f"/api/queues/%2F/{q}/get", json={"count": 1, "ackmode": "ack_requeue_false"})
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(broker.http_url + "/metrics").text)}

    def value(name: str) -> float:
        return next(s.value for s in families[name].samples if s.labels.get("queue") == q)

    assert value("headrace_queue_messages_ready") == 3
    assert value("headrace_queue_messages_published") == 4  # counter family name without _total
    assert value("headrace_queue_messages_acked") == 1
    http.delete(f"/api/queues/%2F/{q}")


def test_vhost_endpoints_and_unknown_vhost(http):
    name = unique("vh")
    assert http.put(f"/api/vhosts/{name}").status_code == 201
    assert any(v["name"] == name for v in http.get("/api/vhosts").json())
    assert http.put(f"/api/queues/{name}/q1", json={"durable": False}).status_code == 201
    assert http.delete(f"/api/vhosts/{name}").status_code == 204
    assert http.get(f"/api/queues/{name}").status_code == 404
    r = http.put("/api/queues/%2F/" + unique("typed"), json={"durable": "sometimes"})
    assert r.status_code == 400


def test_channels_and_consumers_listings(broker, http):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=7)
    q = ch.queue_declare("", exclusive=True).method.queue
    tag = ch.basic_consume(q, lambda *a: None)
    consumers = [c for c in http.get("/api/consumers/%2F").json() if c["consumer_tag"] == tag]
    assert consumers and consumers[0]["queue"]["name"] == q and consumers[0]["prefetch_count"] == 7
    channels = http.get("/api/channels").json()
    assert any(c["consumer_count"] == 1 and c["prefetch_count"] == 7 for c in channels)
    conn.close()


@pytest.mark.parametrize("doc", [
    {"queues": None}, {"queues": [{"vhost": "/"}]}, {"exchanges": [{"name": "x", "durable": "maybe"}]},
    {"bindings": [{"source": "a", "destination": "b", "destination_type": "topic"}]}, [1, 2], "defs",
    {"users": [{"name": "u", "tags": 7}]}, {"mirrors": [{"exchange": "x", "max_bytes": -1}]},
])
def test_malformed_definitions_are_refused_whole_with_400(http, doc):
    before = http.get("/api/definitions").json()
    response = http.post("/api/definitions", json=doc)
    assert response.status_code == 400 and response.json()["error"] == "bad_request"
    assert http.get("/api/definitions").json() == before
