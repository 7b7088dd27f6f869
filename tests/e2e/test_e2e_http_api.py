"""HTTP API behaviour against real brokers: consume streams, validation, authorisation, encodings."""

from __future__ import annotations

import base64
import json
import signal
import time
from typing import Any

import httpx
import pika
import pytest
from e2e_support import FAST_STATS, HISTORY, rose, unique, wait_until
from headrace.server.net.http_conn import login_allowed

pytestmark = pytest.mark.timeout(60)
BROKER_ENV = FAST_STATS  # rate history sampled every second


def make_user(http: httpx.Client, tags: str, read: str = ".*", write: str = ".*") -> str:
    name = unique("u")
    assert http.put(f"/api/users/{name}", json={"password": "pw", "tags": tags}).status_code == 201
    assert http.put(f"/api/permissions/%2F/{name}",
                    json={"configure": ".*", "write": write, "read": read}).status_code == 201
    return name


def lines_of(response: httpx.Response):
    """Non-blank NDJSON lines of a stream, parsed."""
    for line in response.iter_lines():
        if line.strip():
            yield json.loads(line)


def test_stream_outlives_the_request_timeout_and_starts_at_once(broker_factory):
    proc = broker_factory(env={"HEADRACE_HTTP_REQUEST_TIMEOUT": "1"})
    q = unique("sq")
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=5) as http:
        http.put(f"/api/queues/%2F/{q}", json={"durable": False})
        started = time.monotonic()
        # read timeout 5 s < the 10 s keep-alive: the first line must not wait for it
        with http.stream("GET", f"/api/queues/%2F/{q}/consume") as r:
            assert r.status_code == 200
            events = lines_of(r)
            first = next(events)
            assert first["consumer"].startswith("http-") and time.monotonic() - started < 3
            time.sleep(1.5)  # let more than http_request_timeout pass on an idle stream
            with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=5) as other:
                assert other.post("/api/exchanges/%2F/amq.default/publish",
                                  json={"routing_key": q, "payload": "late"}).json() == {"routed": True}
            assert next(events)["payload"] == "late"


def test_wrong_property_types_are_400(http):
    q = unique("pq")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    for props in ({"priority": "high"}, {"delivery_mode": "2"}, {"headers": "x"}, {"timestamp": "now"},
                  {"delivery_mode": 7}):
        r = http.post("/api/exchanges/%2F/amq.default/publish",
                      json={"routing_key": q, "payload": "x", "properties": props})
        assert r.status_code == 400, props
        assert r.json()["error"] == "bad_request" and "properties." in r.json()["reason"]
    body = json.dumps({"routing_key": q, "payload": "ok"}) + "\n" + json.dumps(
        {"routing_key": q, "payload": "x", "properties": {"priority": "high"}})
    r = http.post("/api/exchanges/%2F/amq.default/publish-batch", content=body)
    assert r.status_code == 400 and r.json()["reason"].startswith("line 2: properties.priority")
    assert http.get(f"/api/queues/%2F/{q}").json()["messages_ready"] == 0  # nothing of the batch went in
    http.delete(f"/api/queues/%2F/{q}")


def test_deleting_the_queue_ends_its_stream(broker, http):
    q = unique("dq")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    with http.stream("GET", f"/api/queues/%2F/{q}/consume") as r:
        events = lines_of(r)
        tag = next(events)["consumer"]
        assert http.delete(f"/api/queues/%2F/{q}").status_code == 204
        rest = list(events)  # ends: the terminating chunk came (httpx raises on a cut body)
    assert rest == [{"cancelled": tag, "reason": "queue deleted"}]


def test_settle_only_by_the_stream_owner_or_an_administrator(broker, http):
    q = unique("oq")
    owner = make_user(http, "management")
    intruder = make_user(http, "management")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    for i in range(2):
        http.post("/api/exchanges/%2F/amq.default/publish", json={"routing_key": q, "payload": str(i)})
    with httpx.Client(base_url=broker.http_url, auth=(owner, "pw"), timeout=10) as mine, \
            httpx.Client(base_url=broker.http_url, auth=(intruder, "pw"), timeout=10) as theirs:
        with mine.stream("GET", f"/api/queues/%2F/{q}/consume") as r:
            events = lines_of(r)
            tag = next(events)["consumer"]
            first, second = next(events), next(events)
            r2 = theirs.post(f"/api/consumers/{tag}/settle", json={"delivery_ids": [first["delivery_id"]]})
            assert r2.status_code == 403 and r2.json()["error"] == "access_refused"
            assert mine.post(f"/api/consumers/{tag}/settle",
                             json={"delivery_ids": [first["delivery_id"]]}).status_code == 204
            assert http.post(f"/api/consumers/{tag}/settle",  # guest is an administrator
                             json={"delivery_ids": [second["delivery_id"]]}).status_code == 204
    assert http.get(f"/api/queues/%2F/{q}").json()["messages"] == 0
    http.delete(f"/api/queues/%2F/{q}")


def test_unbind_needs_read_on_the_source(broker, http):
    q, x = unique("uq"), unique("ux")
    user = make_user(http, "management", read=f"^{q}$")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    http.put(f"/api/exchanges/%2F/{x}", json={"type": "direct", "durable": False})
    assert http.post(f"/api/bindings/%2F/e/{x}/q/{q}", json={"routing_key": "k"}).status_code == 201
    key = next(b["properties_key"] for b in http.get("/api/bindings/%2F").json()
               if b["destination"] == q and b["source"] == x)
    with httpx.Client(base_url=broker.http_url, auth=(user, "pw"), timeout=10) as client:
        r = client.delete(f"/api/bindings/%2F/e/{x}/q/{q}/{key}")
        assert r.status_code == 401 and f"read access to '{x}'" in r.json()["reason"]
        assert client.post(f"/api/bindings/%2F/e/{x}/q/{q}", json={"routing_key": "k2"}).status_code == 401
    assert http.delete(f"/api/bindings/%2F/e/{x}/q/{q}/{key}").status_code == 204
    http.delete(f"/api/queues/%2F/{q}")
    http.delete(f"/api/exchanges/%2F/{x}")


def test_binary_header_values_are_base64_objects(broker, http):
    q = unique("bq")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    conn.channel().basic_publish("", q, b"\xff\xfe", pika.BasicProperties(
        headers={"bin": b"\xff\x00", "text": "t", "nested": {"raw": b"\x01"}, "list": [b"\x02", 3]}))
    conn.close()
    got = http.post(f"/api/queues/%2F/{q}/get", json={"count": 1, "ackmode": "ack_requeue_true"}).json()[0]
    expected = {"bin": {"$base64": "/wA="}, "text": "t", "nested": {"raw": {"$base64": "AQ=="}},
                "list": [{"$base64": "Ag=="}, 3]}
    assert got["properties"]["headers"] == expected
    assert got["payload_encoding"] == "base64" and base64.b64decode(got["payload"]) == b"\xff\xfe"
    with http.stream("GET", f"/api/queues/%2F/{q}/consume") as r:
        events = lines_of(r)
        next(events)
        assert next(events)["properties"]["headers"] == expected
    # the stream's unacked message returns to the queue when the broker sees the client leave, which
    # is not ordered with a request on another connection (as with an AMQP consumer's connection)
    assert wait_until(lambda: http.get(f"/api/queues/%2F/{q}").json()["messages_unacknowledged"] == 0)
    # the same form is accepted back on publish and arrives as a byte array
    http.delete(f"/api/queues/%2F/{q}/contents")
    http.post("/api/exchanges/%2F/amq.default/publish",
              json={"routing_key": q, "payload": "p", "properties": {"headers": {"bin": {"$base64": "/wA="}}}})
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    _, props, _ = conn.channel().basic_get(q, auto_ack=True)
    conn.close()
    assert props.headers == {"bin": b"\xff\x00"}
    http.delete(f"/api/queues/%2F/{q}")


def test_permission_update_is_204_and_page_size_bound(broker, http):
    user = make_user(http, "management")
    r = http.put(f"/api/permissions/%2F/{user}", json={"configure": "", "write": ".*", "read": ".*"})
    assert r.status_code == 204
    r = http.get("/api/queues", params={"page": 1, "page_size": 501})
    assert r.status_code == 400 and r.json() == {"error": "bad_request", "reason": "page_size must be <= 500"}
    assert http.get("/api/queues", params={"page": 1, "page_size": 500}).status_code == 200


def test_stream_ends_with_a_terminating_chunk_on_shutdown(broker_factory):
    proc = broker_factory()
    q = unique("shq")
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        http.put(f"/api/queues/%2F/{q}", json={"durable": False})
        with http.stream("GET", f"/api/queues/%2F/{q}/consume") as r:
            events = lines_of(r)
            tag = next(events)["consumer"]
            proc.signal(signal.SIGTERM)
            rest = list(events)  # httpx raises RemoteProtocolError if the body is cut short
    assert rest == [{"cancelled": tag, "reason": "broker shutdown"}]
    assert proc.wait() == 0


def test_loopback_users_only_from_loopback():
    users = frozenset({"guest"})
    assert login_allowed("guest", "127.0.0.1", users)
    assert login_allowed("guest", "::1", users)
    assert not login_allowed("guest", "10.1.2.3", users)
    assert not login_allowed("guest", "2001:db8::1", users)
    assert not login_allowed("guest", None, users)
    assert login_allowed("alice", "10.1.2.3", users)


def test_reading_messages_needs_management_or_administrator(broker, http):
    q = unique("mq")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    http.post("/api/exchanges/%2F/amq.default/publish", json={"routing_key": q, "payload": "secret"})
    for tags in ("monitoring", "monitoring,policymaker", "policymaker"):
        watcher = make_user(http, tags)
        with httpx.Client(base_url=broker.http_url, auth=(watcher, "pw"), timeout=10) as client:
            assert client.get(f"/api/queues/%2F/{q}").status_code == 200  # stats stay visible
            r = client.post(f"/api/queues/%2F/{q}/get", json={"count": 1})
            assert r.status_code == 401 and r.json()["error"] == "not_authorised", tags
            assert client.get(f"/api/queues/%2F/{q}/consume").status_code == 401
    reader = make_user(http, "management")
    with httpx.Client(base_url=broker.http_url, auth=(reader, "pw"), timeout=10) as client:
        got = client.post(f"/api/queues/%2F/{q}/get", json={"count": 1})
        assert got.status_code == 200 and got.json()[0]["payload"] == "secret"
    http.delete(f"/api/queues/%2F/{q}")


def metric(text: str, name: str, labels: str = "") -> float:
    prefix = name + labels + " "
    return float(next(line for line in text.splitlines() if line.startswith(prefix))[len(prefix):])


def test_message_rates_per_queue_and_in_overview(broker, http):
    q = unique("rq")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    before = http.get(f"/api/queues/%2F/{q}").json()["message_stats"]
    assert before["publish_details"] == {"rate": 0.0}
    http.get("/api/overview")
    body = "\n".join(json.dumps({"routing_key": q, "payload": str(i)}) for i in range(200))
    assert http.post("/api/exchanges/%2F/amq.default/publish-batch", content=body).json()["published"] == 200
    http.post(f"/api/queues/%2F/{q}/get", json={"count": 50, "ackmode": "ack_requeue_false"})
    stats = http.get(f"/api/queues/%2F/{q}").json()["message_stats"]
    assert stats["publish"] == 200 and stats["redeliver_details"] == {"rate": 0.0}

    def stat(path: str, key: str, listed: bool = False) -> dict[str, Any]:
        body = http.get(path, params=HISTORY).json()
        return (next(x for x in body if x["name"] == q) if listed else body)["message_stats"][key]
    for key in ("publish_details", "deliver_get_details", "ack_details"):
        assert rose(lambda key=key: stat(f"/api/queues/%2F/{q}", key)), key
    assert stat(f"/api/queues/%2F/{q}", "redeliver_details")["avg_rate"] == 0
    assert rose(lambda: stat("/api/overview", "publish_details"))
    assert set(http.get("/api/overview").json()["message_stats"]) >= {
        "deliver_get_details", "ack_details", "redeliver_details"}
    assert rose(lambda: stat("/api/queues/%2F", "publish_details", listed=True))
    # without history asked, the rate is RabbitMQ's instant one: from the last two samples
    assert wait_until(lambda: http.get(f"/api/queues/%2F/{q}").json()["message_stats"]["publish_details"]["rate"] == 0)
    http.delete(f"/api/queues/%2F/{q}")


def test_metrics_against_known_traffic(broker_factory):
    proc = broker_factory(env={"HEADRACE_METRICS": "per-queue"})
    q = unique("metq")
    conn = pika.BlockingConnection(pika.URLParameters(proc.url))
    ch = conn.channel()
    ch.queue_declare(q, durable=True)
    for i in range(3):
        ch.basic_publish("", q, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
    deliveries: list = []
    ch.basic_qos(prefetch_count=10)
    ch.basic_consume(q, lambda _ch, method, _props, _body: deliveries.append(method))
    for _ in range(100):
        conn.process_data_events(time_limit=0.05)
        if len(deliveries) >= 3:
            break
    ch.basic_nack(deliveries[0].delivery_tag, requeue=True)  # comes back, redelivered
    for _ in range(100):
        conn.process_data_events(time_limit=0.05)
        if len(deliveries) >= 4:
            break
    assert deliveries[3].redelivered
    ch.basic_ack(deliveries[1].delivery_tag)
    for _ in range(3):  # the same topic key again and again: cache hits after the first lookup
        ch.basic_publish("amq.topic", "metrics.key", b"")
    labels = f'{{vhost="/",queue="{q}"}}'
    expected = {("headrace_queue_messages_unacked", labels): 2, ("headrace_queue_consumers", labels): 1,
                ("headrace_queue_messages_published_total", labels): 3,
                ("headrace_queue_messages_delivered_total", labels): 4,
                ("headrace_queue_messages_redelivered_total", labels): 1,
                ("headrace_queue_messages_acked_total", labels): 1,
                ("headrace_connections", ""): 1, ("headrace_channels", ""): 1}
    for _ in range(100):  # the ack travels asynchronously: poll until the broker has taken it
        conn.process_data_events(time_limit=0.02)
        text = httpx.get(proc.http_url + "/metrics", timeout=5).text
        seen = {key: metric(text, *key) for key in expected}
        if seen == expected:
            break
    assert seen == expected
    assert metric(text, "headrace_store_bytes") > 0  # the persistent messages are in the store
    ratio = metric(text, "headrace_routing_cache_hit_ratio")
    assert 0.0 < ratio < 1.0
    conn.close()


# no float header: pika neither encodes floats nor decodes doubles (it truncates them to int)
ALL_PROPERTIES = {
    "content_type": "application/json", "content_encoding": "identity",
    "headers": {"n": 1, "s": "text", "t": True, "nested": {"list": [1, "two", {"three": 3}], "none": None}},
    "delivery_mode": 2, "priority": 7, "correlation_id": "corr-1", "reply_to": "replies", "expiration": "60000",
    "message_id": "mid-1", "timestamp": 1_700_000_000, "type": "event", "user_id": "guest", "app_id": "tests",
}


def test_http_publish_to_pika_keeps_every_property(broker, http):
    q = unique("iq")
    http.put(f"/api/queues/%2F/{q}", json={"durable": True})
    body = bytes(range(256))
    r = http.post("/api/exchanges/%2F/amq.default/publish", json={
        "routing_key": q, "payload": base64.b64encode(body).decode(), "payload_encoding": "base64",
        "properties": ALL_PROPERTIES})
    assert r.json() == {"routed": True}
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    method, props, got = conn.channel().basic_get(q, auto_ack=True)
    conn.close()
    assert got == body
    seen = {k: getattr(props, k) for k in ALL_PROPERTIES}
    assert seen == ALL_PROPERTIES
    http.delete(f"/api/queues/%2F/{q}")


def test_pika_publish_to_http_get_and_stream_keeps_every_property(broker, http):
    q = unique("iq")
    http.put(f"/api/queues/%2F/{q}", json={"durable": True})
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    body = b"\x00\xffbinary"
    conn.channel().basic_publish("", q, body, pika.BasicProperties(**ALL_PROPERTIES))
    conn.close()
    got = http.post(f"/api/queues/%2F/{q}/get", json={"count": 1, "ackmode": "ack_requeue_true"}).json()[0]
    assert got["properties"] == {k: v for k, v in ALL_PROPERTIES.items()}
    assert got["payload_encoding"] == "base64" and base64.b64decode(got["payload"]) == body
    with http.stream("GET", f"/api/queues/%2F/{q}/consume") as r:
        events = lines_of(r)
        next(events)
        event = next(events)
    assert event["properties"] == ALL_PROPERTIES and base64.b64decode(event["payload"]) == body
    http.delete(f"/api/queues/%2F/{q}")


def test_get_encoding_truncate_and_ackmodes(broker, http):
    q = unique("gq")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    http.post("/api/exchanges/%2F/amq.default/publish", json={"routing_key": q, "payload": "hello world"})
    url = f"/api/queues/%2F/{q}/get"
    got = http.post(url, json={"count": 1, "ackmode": "reject_requeue_true", "encoding": "base64",
                               "truncate": 5}).json()
    assert len(got) == 1 and got[0]["payload_encoding"] == "base64"
    assert base64.b64decode(got[0]["payload"]) == b"hello" and got[0]["payload_bytes"] == 11
    again = http.post(url, json={"count": 1, "ackmode": "reject_requeue_true"}).json()  # it was requeued
    assert again[0]["payload"] == "hello world" and again[0]["payload_encoding"] == "string"
    assert again[0]["redelivered"] is True
    r = http.post(url, json={"count": 1, "encoding": "hex"})
    assert r.status_code == 400 and r.json() == {"error": "bad_request",
                                                 "reason": "invalid encoding 'hex' (auto or base64)"}
    assert http.post(url, json={"count": 1, "ackmode": "maybe"}).status_code == 400
    http.post(url, json={"count": 1, "ackmode": "reject_requeue_false"})
    assert http.get(f"/api/queues/%2F/{q}").json()["messages"] == 0
    http.delete(f"/api/queues/%2F/{q}")


def test_listings_and_single_objects(broker, http):
    q, x, name = unique("lq"), unique("lx"), unique("lu")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False, "arguments": {"x-max-length": 5}})
    http.put(f"/api/exchanges/%2F/{x}", json={"type": "topic", "durable": False})
    http.post(f"/api/bindings/%2F/e/{x}/q/{q}", json={"routing_key": "a.*"})
    http.put(f"/api/users/{name}", json={"password": "pw", "tags": ["management", "monitoring"]})
    http.put(f"/api/permissions/%2F/{name}", json={"configure": "^c", "write": "^w", "read": "^r"})

    users = {u["name"]: u for u in http.get("/api/users").json()}
    hashed = users[name].pop("password_hash")  # as RabbitMQ's: the salted hash, never the password
    assert hashed.startswith("pbkdf2_sha256$") and "pw" not in hashed.split("$")
    assert users[name] == {"name": name, "tags": ["management", "monitoring"], "hashing_algorithm": "pbkdf2_sha256",
                           "limits": {}}
    assert http.get(f"/api/users/{name}").json()["tags"] == ["management", "monitoring"]
    assert http.get("/api/users/" + unique("nobody")).status_code == 404
    perm = {"user": name, "vhost": "/", "configure": "^c", "write": "^w", "read": "^r"}
    assert perm in http.get("/api/permissions").json()
    assert http.get(f"/api/permissions/%2F/{name}").json() == perm
    assert http.get("/api/permissions/%2F/" + unique("nobody")).status_code == 404
    vhost = http.get("/api/vhosts/%2F").json()
    assert vhost["name"] == "/" and {"messages", "messages_ready", "messages_unacknowledged"} <= set(vhost)
    assert http.get("/api/vhosts/" + unique("novhost")).status_code == 404
    with httpx.Client(base_url=broker.http_url, auth=(name, "pw"), timeout=10) as user:
        assert user.get(f"/api/users/{name}").status_code == 401  # administrators only, as in RabbitMQ
        assert user.get(f"/api/permissions/%2F/{name}").status_code == 401

    ex = http.get(f"/api/exchanges/%2F/{x}").json()
    expected = {"name": x, "vhost": "/", "type": "topic", "durable": False, "auto_delete": False,
                "internal": False, "arguments": {}, "mirrored": False}
    assert {k: ex[k] for k in expected} == expected  # among RabbitMQ's other fields
    queue = next(row for row in http.get("/api/queues").json() if row["name"] == q)
    assert queue["arguments"] == {"x-max-length": 5} and queue["vhost"] == "/" and queue["durable"] is False
    rows = [b for b in http.get("/api/bindings").json() if b["destination"] == q]
    # the default exchange's implicit binding first, as RabbitMQ lists it
    assert rows == [{"source": "", "vhost": "/", "destination": q, "destination_type": "queue", "routing_key": q,
                     "arguments": {}, "properties_key": q},
                    {"source": x, "vhost": "/", "destination": q, "destination_type": "queue",
                     "routing_key": "a.*", "arguments": {}, "properties_key": rows[1]["properties_key"]}]
    http.delete(f"/api/users/{name}")
    http.delete(f"/api/queues/%2F/{q}")
    http.delete(f"/api/exchanges/%2F/{x}")


def test_exchange_to_exchange_bindings(broker, http):
    src, dst, q = unique("src"), unique("dst"), unique("e2eq")
    http.put(f"/api/exchanges/%2F/{src}", json={"type": "direct", "durable": False})
    http.put(f"/api/exchanges/%2F/{dst}", json={"type": "fanout", "durable": False})
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    http.post(f"/api/bindings/%2F/e/{dst}/q/{q}", json={})
    r = http.post(f"/api/bindings/%2F/e/{src}/e/{dst}", json={"routing_key": "k"})
    assert r.status_code == 201 and f"/e/{src}/e/{dst}/" in r.headers["location"]
    row = next(b for b in http.get("/api/bindings/%2F").json() if b["destination"] == dst)
    assert row["destination_type"] == "exchange" and row["routing_key"] == "k"
    assert http.post(f"/api/exchanges/%2F/{src}/publish", json={"routing_key": "k", "payload": "via"}).json() == {
        "routed": True}
    assert http.get(f"/api/queues/%2F/{q}").json()["messages_ready"] == 1
    assert http.delete(r.headers["location"]).status_code == 204
    assert http.post(f"/api/exchanges/%2F/{src}/publish", json={"routing_key": "k", "payload": "x"}).json() == {
        "routed": False}
    assert http.delete(r.headers["location"]).status_code == 404
    for path in (f"/api/queues/%2F/{q}", f"/api/exchanges/%2F/{src}", f"/api/exchanges/%2F/{dst}"):
        http.delete(path)


def test_post_definitions_over_http(broker, http):
    q, x, name = unique("dq"), unique("dx"), unique("du")
    doc = {"users": [{"name": name, "password": "pw", "tags": "management"}],
           "vhosts": [{"name": "/"}],
           "permissions": [{"user": name, "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}],
           "exchanges": [{"name": x, "vhost": "/", "type": "fanout", "durable": True, "auto_delete": False,
                          "internal": False, "arguments": {}}],
           "queues": [{"name": q, "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}],
           "bindings": [{"source": x, "vhost": "/", "destination": q, "destination_type": "queue",
                         "routing_key": "", "arguments": {}}]}
    assert http.post("/api/definitions", json=doc).status_code == 204
    assert http.get(f"/api/queues/%2F/{q}").status_code == 200
    assert http.post(f"/api/exchanges/%2F/{x}/publish", json={"payload": "d"}).json() == {"routed": True}
    with httpx.Client(base_url=broker.http_url, auth=(name, "pw"), timeout=10) as user:
        assert user.get("/api/whoami").json()["name"] == name
    exported = http.get("/api/definitions").json()
    assert any(b["source"] == x and b["destination"] == q for b in exported["bindings"])
    assert http.post("/api/definitions", json={"queues": "nope"}).status_code == 400
    http.delete(f"/api/users/{name}")
    http.delete(f"/api/queues/%2F/{q}")
    http.delete(f"/api/exchanges/%2F/{x}")


def test_overview_contents(broker, http):
    q = unique("ovq")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    http.post("/api/exchanges/%2F/amq.default/publish", json={"routing_key": q, "payload": "o"})
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    conn.channel()
    data = http.get("/api/overview").json()
    assert data["product_name"] == "headrace" and data["alarms"] == []
    assert data["object_totals"]["connections"] >= 1 and data["object_totals"]["channels"] >= 1
    assert data["object_totals"]["queues"] >= 1 and data["object_totals"]["exchanges"] >= 6
    assert data["queue_totals"]["messages_ready"] >= 1
    assert data["message_stats"]["publish"] >= 1 and "rate" in data["message_stats"]["publish_details"]
    assert data["mem_used"] >= 0 and data["disk_free"] > 0
    conn.close()
    http.delete(f"/api/queues/%2F/{q}")


def test_queue_pagination(broker, http):
    vhost = unique("pagev")
    http.put(f"/api/vhosts/{vhost}")
    for i in range(5):
        http.put(f"/api/queues/{vhost}/q{i}", json={"durable": False})
    page = http.get(f"/api/queues/{vhost}", params={"page": 2, "page_size": 2}).json()
    assert [row["name"] for row in page["items"]] == ["q2", "q3"]
    assert (page["page"], page["page_size"], page["page_count"], page["total_count"], page["item_count"]) == (
        2, 2, 3, 5, 2)
    last = http.get(f"/api/queues/{vhost}", params={"page": 3, "page_size": 2}).json()
    assert [row["name"] for row in last["items"]] == ["q4"]
    assert http.get(f"/api/queues/{vhost}", params={"page": "x"}).status_code == 400
    http.delete(f"/api/vhosts/{vhost}")


def test_oversized_request_head_is_431(broker_factory):
    proc = broker_factory(env={"HEADRACE_HTTP_MAX_HEADER_BYTES": "2048"})
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.get("/api/overview", headers={"x-pad": "a" * 1000}).status_code == 200
        r = http.get("/api/overview", headers={"x-pad": "a" * 3000})
        assert r.status_code == 431 and set(r.json()) == {"error", "reason"}
        # a head that arrives in pieces is bounded as well (by h11, while it is incomplete)
        import socket

        with socket.create_connection(("127.0.0.1", proc.http_port), timeout=5) as sock:
            # never finished (no blank line): too big while still incomplete
            sock.sendall(b"GET /api/overview HTTP/1.1\r\nhost: x\r\n" + b"x-pad: " + b"a" * 3000 + b"\r\n")
            reply = sock.recv(4096)
        assert reply.startswith(b"HTTP/1.1 431")


def test_publish_batch_confirms_and_bounds(broker, http):
    q = unique("batchq")
    http.put(f"/api/queues/%2F/{q}", json={"durable": True})
    body = "\n".join(json.dumps({"routing_key": key, "payload": f"p{i}", "properties": {"delivery_mode": 2}})
                     for i, key in enumerate([q, q, unique("nowhere")]))
    r = http.post("/api/exchanges/%2F/amq.default/publish-batch", content=body)
    assert r.status_code == 200
    assert r.json() == {"results": [{"routed": True, "confirmed": True}, {"routed": True, "confirmed": True},
                                    {"routed": False, "confirmed": True}], "published": 3}
    assert http.get(f"/api/queues/%2F/{q}").json()["messages_ready"] == 2
    too_many = "\n".join(json.dumps({"routing_key": q, "payload": ""}) for _ in range(10_001))
    r = http.post("/api/exchanges/%2F/amq.default/publish-batch", content=too_many)
    assert r.status_code == 413 and r.json()["reason"] == "at most 10000 messages per batch"
    assert http.get(f"/api/queues/%2F/{q}").json()["messages_ready"] == 2
    http.delete(f"/api/queues/%2F/{q}")


def test_an_invalid_expiration_is_a_400_before_anything_is_published(broker, http):
    q = unique("expq")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    r = http.post("/api/exchanges/%2F/amq.default/publish",
                  json={"routing_key": q, "payload": "x", "properties": {"expiration": "soon"}})
    assert r.status_code == 400 and "invalid expiration 'soon'" in r.json()["reason"]
    lines = [{"routing_key": q, "payload": "a", "properties": {"expiration": "60000"}},
             {"routing_key": q, "payload": "b", "properties": {"expiration": "-1"}}]
    r = http.post("/api/exchanges/%2F/amq.default/publish-batch", content="\n".join(json.dumps(x) for x in lines))
    assert r.status_code == 400 and r.json()["reason"].startswith("line 2: properties.expiration")
    assert http.get(f"/api/queues/%2F/{q}").json()["messages_ready"] == 0  # line 1 was not published either
    http.delete(f"/api/queues/%2F/{q}")


def test_publish_batch_is_503_with_retry_after_under_an_alarm(broker_factory):
    proc = broker_factory(env={"HEADRACE_MEMORY_HIGH_WATERMARK": "2000000"})  # 2 MB of held messages
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        http.put("/api/queues/%2F/alarmed", json={"durable": False})
        big = "\n".join(json.dumps({"routing_key": "alarmed", "payload": "m" * 100_000}) for _ in range(30))
        assert http.post("/api/exchanges/%2F/amq.default/publish-batch", content=big).status_code == 200
        for _ in range(200):  # the memory check runs on the broker's tick
            if http.get("/api/overview").json()["alarms"] == ["memory"]:
                break
            time.sleep(0.05)
        assert http.get("/api/overview").json()["alarms"] == ["memory"]
        r = http.post("/api/exchanges/%2F/amq.default/publish-batch",
                      content=json.dumps({"routing_key": "alarmed", "payload": "x"}))
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json() == {"error": "service_unavailable", "reason": "publishing blocked: memory alarm"}
        http.delete("/api/queues/%2F/alarmed/contents")
        for _ in range(200):
            if http.get("/api/overview").json()["alarms"] == []:
                break
            time.sleep(0.05)
        r = http.post("/api/exchanges/%2F/amq.default/publish-batch",
                      content=json.dumps({"routing_key": "alarmed", "payload": "x"}))
        assert r.status_code == 200 and r.json()["published"] == 1


def test_stream_reject_and_nack_without_requeue_dead_letter(broker, http):
    q, dlq = unique("rq"), unique("dlq")
    http.put(f"/api/queues/%2F/{dlq}", json={"durable": False})
    http.put(f"/api/queues/%2F/{q}", json={"durable": False, "arguments": {
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}})
    for i in range(3):
        http.post("/api/exchanges/%2F/amq.default/publish", json={"routing_key": q, "payload": f"r{i}"})
    with http.stream("GET", f"/api/queues/%2F/{q}/consume") as r:
        events = lines_of(r)
        tag = next(events)["consumer"]
        got = [next(events) for _ in range(3)]
        settle = f"/api/consumers/{tag}/settle"
        assert http.post(settle, json={"delivery_ids": [got[0]["delivery_id"]], "action": "reject",
                                       "requeue": False}).status_code == 204
        assert http.post(settle, json={"delivery_ids": [got[1]["delivery_id"]], "action": "nack",
                                       "requeue": False}).status_code == 204
        assert http.post(settle, json={"delivery_ids": [got[2]["delivery_id"]], "action": "nack",
                                       "requeue": True}).status_code == 204
        again = next(events)  # the requeued one comes back on the same stream
        assert again["payload"] == "r2" and again["redelivered"] is True
        assert http.post(settle, json={"delivery_ids": [again["delivery_id"]], "action": "ack"}).status_code == 204
        assert http.post(settle, json={"delivery_ids": [1], "action": "drop"}).status_code == 400
    dead = http.post(f"/api/queues/%2F/{dlq}/get", json={"count": 5, "ackmode": "ack_requeue_false"}).json()
    assert sorted(m["payload"] for m in dead) == ["r0", "r1"]
    assert http.get(f"/api/queues/%2F/{q}").json()["messages"] == 0
    http.delete(f"/api/queues/%2F/{q}")
    http.delete(f"/api/queues/%2F/{dlq}")


def test_deleting_a_user_ends_their_streams(broker, http):
    q = unique("uq")
    user = make_user(http, "management")
    http.put(f"/api/queues/%2F/{q}", json={"durable": False})
    http.post("/api/exchanges/%2F/amq.default/publish", json={"routing_key": q, "payload": "held"})
    with httpx.Client(base_url=broker.http_url, auth=(user, "pw"), timeout=10) as theirs:
        with theirs.stream("GET", f"/api/queues/%2F/{q}/consume") as r:
            events = lines_of(r)
            tag = next(events)["consumer"]
            assert next(events)["payload"] == "held"  # unacked on the stream
            assert http.delete(f"/api/users/{user}").status_code == 204
            rest = list(events)  # ends: the terminating chunk came (httpx raises on a cut body)
    assert rest == [{"cancelled": tag, "reason": "user deleted"}]
    queue = http.get(f"/api/queues/%2F/{q}").json()
    assert queue["messages_ready"] == 1 and queue["consumers"] == 0  # the unacked message went back
    http.delete(f"/api/queues/%2F/{q}")


def test_definitions_import_keeps_a_disabled_x_mirror_off(broker_factory, tmp_path):
    exported = broker_factory()
    with httpx.Client(base_url=exported.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.put("/api/exchanges/%2F/audit", json={"type": "topic", "arguments": {"x-mirror": True}}
                        ).status_code == 201
        assert [m["exchange"] for m in http.get("/api/mirrors").json()] == ["audit"]
        assert http.delete("/api/mirrors/%2F/audit").status_code == 204
        definitions = http.get("/api/definitions").json()
    assert definitions["mirrors_disabled"] == [{"vhost": "/", "exchange": "audit"}]
    fresh = broker_factory(data_dir=tmp_path / "fresh")  # a broker of its own, not the exporter's directory
    with httpx.Client(base_url=fresh.http_url, auth=("guest", "guest"), timeout=10) as http:
        assert http.post("/api/definitions", json=definitions).status_code == 204
        exchange = http.get("/api/exchanges/%2F/audit").json()
        assert exchange["arguments"] == {"x-mirror": True} and exchange["mirrored"] is False
        assert http.get("/api/mirrors").json() == []
