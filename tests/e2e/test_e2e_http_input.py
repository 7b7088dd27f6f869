"""Bad input to the HTTP API gets RabbitMQ's answer from a real broker: deep JSON, wrong types,
arguments RabbitMQ validates, names a URL cannot hold, oversized bodies, and trailing slashes."""

from __future__ import annotations

import socket

import httpx
import pika
import pytest
from e2e_support import unique

pytestmark = pytest.mark.timeout(60)

DEEP = 100_000


def assert_json_400(r: httpx.Response, *words: str) -> None:
    assert r.status_code == 400, (r.status_code, r.text[:200])
    body = r.json()
    assert body["error"] == "bad_request"
    for word in words:
        assert word in body["reason"], body["reason"]


@pytest.mark.parametrize("nesting", ["[" * DEEP + "]" * DEEP, '{"a":' * DEEP + "1" + "}" * DEEP])
def test_json_nested_100k_deep_is_400(broker, http, nesting):
    q = unique("deep")
    assert http.put(f"/api/queues/%2F/{q}", json={"durable": False}).status_code == 201
    bodies = [("PUT", f"/api/queues/%2F/{q}", '{"arguments": {"x": ' + nesting + "}}"),
              ("POST", "/api/exchanges/%2F/amq.default/publish",
               '{"routing_key": "k", "payload": "p", "properties": {"headers": {"h": ' + nesting + "}}}"),
              ("POST", "/api/definitions", nesting),
              ("POST", "/api/exchanges/%2F/amq.default/publish-batch", '{"payload": ' + nesting + "}")]
    for method, path, body in bodies:
        r = http.request(method, path, content=body, headers={"content-type": "application/json"})
        assert_json_400(r)
    # deep enough to parse but not to encode as an AMQP table: still a 400, nothing published
    headers = '{"h": ' + '{"a": ' * 2000 + "1" + "}" * 2000 + "}"
    r = http.post("/api/exchanges/%2F/amq.default/publish", content='{"routing_key": "' + q +
                  '", "payload": "p", "properties": {"headers": ' + headers + "}}")
    assert_json_400(r)
    assert http.get(f"/api/queues/%2F/{q}").json()["messages"] == 0
    assert http.get("/api/overview").status_code == 200  # and the broker is fine
    http.delete(f"/api/queues/%2F/{q}")


def test_invalid_queue_mode_is_406_over_amqp_and_400_over_http(broker, http):
    q = unique("mode")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, arguments={"x-queue-mode": "fast"})
    assert info.value.reply_code == 406
    assert info.value.reply_text.startswith(f"PRECONDITION_FAILED - invalid arg 'x-queue-mode' for queue '{q}'")
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare(q, arguments={"x-queue-mode": 1})
    assert info.value.reply_code == 406
    ch = conn.channel()
    for mode in ("lazy", "default"):  # RabbitMQ's two modes are accepted
        ch.queue_declare(f"{q}-{mode}", arguments={"x-queue-mode": mode})
        ch.queue_delete(f"{q}-{mode}")
    conn.close()
    assert_json_400(http.put(f"/api/queues/%2F/{q}", json={"arguments": {"x-queue-mode": "fast"}}), "x-queue-mode")
    assert http.get(f"/api/queues/%2F/{q}").status_code == 404
    assert http.put(f"/api/queues/%2F/{q}", json={"arguments": {"x-queue-mode": "lazy"}}).status_code == 201
    http.delete(f"/api/queues/%2F/{q}")


@pytest.mark.parametrize("kind", ["queues", "exchanges"])
def test_flags_must_be_booleans(http, kind):
    name = unique("flag")
    for body in ({"durable": "yes"}, {"durable": 1}, {"auto_delete": "no"}, {"durable": None}):
        assert_json_400(http.put(f"/api/{kind}/%2F/{name}", json={"type": "direct", **body}))
        assert http.get(f"/api/{kind}/%2F/{name}").status_code == 404
    # RabbitMQ's parse_bool also takes the strings "true" and "false"
    assert http.put(f"/api/{kind}/%2F/{name}", json={"type": "direct", "durable": "false"}).status_code == 201
    assert http.get(f"/api/{kind}/%2F/{name}").json()["durable"] is False
    http.delete(f"/api/{kind}/%2F/{name}")


def raw_request(broker, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", broker.http_port), timeout=10) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


@pytest.mark.parametrize("kind", ["queues", "exchanges"])
def test_dot_names_are_refused(broker, http, kind):
    before = {x["name"] for x in http.get(f"/api/{kind}/%2F").json()}
    for encoded in ("%2E", "%2E%2E", ".%2E"):
        assert_json_400(http.put(f"/api/{kind}/%2F/{encoded}", json={"type": "fanout", "durable": False}),
                        "not a valid")
    for name in (".", ".."):  # sent as is, without a client resolving the segment away
        body = b'{"type": "fanout", "durable": false}'
        reply = raw_request(broker, f"PUT /api/{kind}/%2F/{name} HTTP/1.1\r\nhost: x\r\n".encode()
                            + b"authorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\ncontent-type: application/json\r\n"
                            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
        assert reply.startswith(b"HTTP/1.1 400 "), reply[:100]
    assert {x["name"] for x in http.get(f"/api/{kind}/%2F").json()} == before


def test_an_oversized_body_gets_a_413_the_client_reads(broker_factory):
    proc = broker_factory(env={"HEADRACE_HTTP_MAX_BODY": "4096"})
    q = unique("big")
    with httpx.Client(base_url=proc.http_url, auth=("guest", "guest"), timeout=10) as http:
        http.put(f"/api/queues/%2F/{q}", json={"durable": False})
        payload = "x" * (8 * 1024 * 1024)  # far more than socket buffers hold: still being sent at the 413
        for headers in ({}, {"transfer-encoding": "chunked"}):
            content = (payload.encode(),) if headers else payload.encode()
            r = http.post("/api/exchanges/%2F/amq.default/publish", content=iter(content) if headers else content,
                          headers={"content-type": "application/json"})
            assert r.status_code == 413 and r.json()["error"] == "payload_too_large"
            assert r.headers["connection"] == "close"
        assert http.post("/api/exchanges/%2F/amq.default/publish",  # a new connection serves the next one
                         json={"routing_key": q, "payload": "small"}).json() == {"routed": True}


@pytest.mark.parametrize("path", ["/api/overview/", "/api/connections/", "/api/queues/%2F/", "/api/vhosts/",
                                  "/api/exchanges/%2F/amq.direct/", "/api/whoami/", "/api/bindings/%2F/"])
def test_every_path_answers_with_a_trailing_slash(http, path):
    with_slash, without = http.get(path), http.get(path[:-1])
    assert with_slash.status_code == 200 == without.status_code
    assert type(with_slash.json()) is type(without.json())
    if isinstance(without.json(), dict) and "name" in without.json():
        assert with_slash.json()["name"] == without.json()["name"]


def test_trailing_slash_on_writes(http):
    q = unique("slash")
    assert http.put(f"/api/queues/%2F/{q}/", json={"durable": False}).status_code == 201
    assert http.post("/api/exchanges/%2F/amq.default/publish/", json={"routing_key": q, "payload": "s"}).json() == {
        "routed": True}
    assert http.get(f"/api/queues/%2F/{q}/").json()["messages"] == 1
    assert http.delete(f"/api/queues/%2F/{q}/contents/").status_code == 204
    assert http.delete(f"/api/queues/%2F/{q}/").status_code == 204
    assert http.get(f"/api/queues/%2F/{q}").status_code == 404
