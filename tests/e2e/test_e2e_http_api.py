"""HTTP API behaviour against real brokers: consume streams, validation, authorisation, encodings."""

from __future__ import annotations

import base64
import json
import signal
import time
import uuid

import httpx
import pika
import pytest

from headrace.server.net.http_conn import login_allowed

pytestmark = pytest.mark.timeout(60)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def http(broker):
    with httpx.Client(base_url=broker.http_url, auth=("guest", "guest"), timeout=10) as client:
        yield client


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
    key = next(b for b in http.get("/api/bindings/%2F").json() if b["destination"] == q)["properties_key"]
    with httpx.Client(base_url=broker.http_url, auth=(user, "pw"), timeout=10) as client:
        r = client.delete(f"/api/bindings/%2F/e/{x}/q/{q}/{key}")
        assert r.status_code == 403 and f"read access to '{x}'" in r.json()["reason"]
        assert client.post(f"/api/bindings/%2F/e/{x}/q/{q}", json={"routing_key": "k2"}).status_code == 403
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
            assert r.status_code == 403 and r.json()["error"] == "not_authorised", tags
            assert client.get(f"/api/queues/%2F/{q}/consume").status_code == 403
    reader = make_user(http, "management")
    with httpx.Client(base_url=broker.http_url, auth=(reader, "pw"), timeout=10) as client:
        got = client.post(f"/api/queues/%2F/{q}/get", json={"count": 1})
        assert got.status_code == 200 and got.json()[0]["payload"] == "secret"
    http.delete(f"/api/queues/%2F/{q}")
