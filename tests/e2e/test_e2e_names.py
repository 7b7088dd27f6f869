"""Names are one rule over AMQP and HTTP (``server/amqp/names.py``): at most 255 bytes of valid
UTF-8, and never ``.`` or ``..`` where the name is a URL path segment. Bytes that are not UTF-8 are
refused, never read with U+FFFD, so two names that differ in their bytes are never one object."""

from __future__ import annotations

import json
import socket
import struct

import httpx
import pika
import pika.exceptions
import pytest
from e2e_support import connection_close_of, raw_open, unique, wait_until
from headrace.server.amqp import methods as m
from headrace.server.amqp.codec import encode_frame, encode_method_frame

pytestmark = pytest.mark.timeout(60)

CREATE = {"queues": {"durable": False}, "exchanges": {"type": "fanout", "durable": False}}


def assert_json_400(r: httpx.Response, *words: str) -> None:
    assert r.status_code == 400, (r.status_code, r.text[:200])
    body = r.json()
    assert body["error"] == "bad_request", body
    for word in words:
        assert word in body["reason"], body["reason"]


def as_json(value: object) -> dict[str, object]:
    """Request arguments for a JSON body sent with escapes, as a lone surrogate can only be sent."""
    return {"content": json.dumps(value), "headers": {"content-type": "application/json"}}


def put(http: httpx.Client, kind: str, name: str) -> httpx.Response:
    """Create a queue, exchange, vhost or user of that (already percent-encoded) name."""
    if kind in CREATE:
        return http.put(f"/api/{kind}/%2F/{name}", json=CREATE[kind])
    return http.put(f"/api/{kind}/{name}", json={"password": "pw", "tags": ""} if kind == "users" else {})


def path(kind: str, name: str) -> str:
    return f"/api/{kind}/%2F/{name}" if kind in CREATE else f"/api/{kind}/{name}"


@pytest.mark.parametrize("kind", ["queues", "exchanges", "vhosts", "users"])
def test_http_names_of_more_than_255_bytes_are_400(http, kind):
    prefix = unique(kind[0])
    for name in (prefix + "x" * (256 - len(prefix)), prefix + "\u00e9" * 128):  # 256 and 266 bytes
        encoded = httpx.URL("http://x/" + name).raw_path.decode()[1:]
        assert_json_400(put(http, kind, encoded), "255 bytes")
        assert http.get(path(kind, encoded)).status_code == 404
    longest = prefix + "\u00e9" * ((255 - len(prefix)) // 2) + "x" * ((255 - len(prefix)) % 2)
    assert len(longest.encode()) == 255
    encoded = httpx.URL("http://x/" + longest).raw_path.decode()[1:]
    assert put(http, kind, encoded).status_code in (201, 204)
    assert http.get(path(kind, encoded)).json()["name"] == longest
    assert http.delete(path(kind, encoded)).status_code == 204


@pytest.mark.parametrize("kind", ["queues", "exchanges", "vhosts", "users"])
def test_invalid_utf8_in_a_path_is_400_and_never_reaches_the_u_fffd_name(http, kind):
    name = unique(kind[0]) + "-\ufffd"  # a real name, valid UTF-8, with U+FFFD in it
    assert put(http, kind, name.replace("\ufffd", "%EF%BF%BD")).status_code in (201, 204)
    other = name.replace("\ufffd", "%FF")  # another name in bytes, which must not be the same object
    assert_json_400(http.get(path(kind, other)), "not valid UTF-8")
    assert_json_400(put(http, kind, other), "not valid UTF-8")
    assert_json_400(http.delete(path(kind, other)), "not valid UTF-8")
    assert http.get(path(kind, name.replace("\ufffd", "%EF%BF%BD"))).json()["name"] == name  # still there
    assert_json_400(http.get(f"/api/queues/%FF/{name}"), "not valid UTF-8")  # the vhost segment too
    assert http.delete(path(kind, name.replace("\ufffd", "%EF%BF%BD"))).status_code == 204


def test_http_routing_keys_amqp_cannot_carry_are_400(http):
    q = unique("rk")
    assert http.put(f"/api/queues/%2F/{q}", json={"durable": False}).status_code == 201
    for key in ("k" * 256, "\udcff"):  # too long; a lone surrogate (JSON's "\udcff"), which is not UTF-8
        message = as_json({"routing_key": key, "payload": "p"})
        assert_json_400(http.post("/api/exchanges/%2F/amq.direct/publish", **message), "routing key")
        # NDJSON lines are parsed by pydantic, which refuses the surrogate itself ("Invalid JSON")
        assert_json_400(http.post("/api/exchanges/%2F/amq.direct/publish-batch", **message),
                        *(("routing key",) if len(key) > 1 else ()))
        assert_json_400(http.post(f"/api/bindings/%2F/e/amq.direct/q/{q}", **as_json({"routing_key": key})),
                        "routing key")
    assert [b for b in http.get(f"/api/queues/%2F/{q}/bindings").json() if b["source"] == "amq.direct"] == []
    # 255 bytes, dots included, are an ordinary routing key
    key = "a." * 127 + "b"
    assert http.post(f"/api/bindings/%2F/e/amq.direct/q/{q}", json={"routing_key": key}).status_code == 201
    assert http.post("/api/exchanges/%2F/amq.direct/publish", json={"routing_key": key, "payload": "p"}).json() == {
        "routed": True}
    assert http.delete(f"/api/queues/%2F/{q}").status_code == 204


def test_http_message_properties_are_short_strings_of_255_bytes_not_characters(broker, http):
    q = unique("props")
    assert http.put(f"/api/queues/%2F/{q}", json={"durable": False}).status_code == 201
    for field in ("reply_to", "correlation_id", "message_id", "content_type", "app_id"):
        # 200 characters, 400 bytes: cut at 255 bytes it ended inside a character no client decodes
        r = http.post("/api/exchanges/%2F/amq.default/publish",
                      json={"routing_key": q, "payload": "p", "properties": {field: "\u00e9" * 200}})
        assert_json_400(r, f"properties.{field}", "400 bytes long")
    assert http.get(f"/api/queues/%2F/{q}").json()["messages"] == 0
    assert http.post("/api/exchanges/%2F/amq.default/publish", json={
        "routing_key": q, "payload": "p", "properties": {"reply_to": "\u00e9" * 127 + "x"}}).json() == {"routed": True}
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    assert conn.channel().basic_get(q, auto_ack=True)[1].reply_to == "\u00e9" * 127 + "x"  # 255 bytes, whole
    conn.close()
    assert http.delete(f"/api/queues/%2F/{q}").status_code == 204


def test_definitions_with_names_amqp_cannot_carry_are_400_and_apply_nothing(http):
    q = unique("defs")
    for bad in ({"queues": [{"name": q, "vhost": "/"}, {"name": "q" * 256, "vhost": "/"}]},
                {"queues": [{"name": q, "vhost": "/"}], "exchanges": [{"name": "\udcff", "vhost": "/"}]},
                {"queues": [{"name": q, "vhost": "v" * 256}]},
                {"queues": [{"name": q, "vhost": "/"}], "users": [{"name": "u" * 256, "password": "pw"}]},
                {"queues": [{"name": q, "vhost": "/"}], "policies": [
                    {"vhost": "p" * 256, "name": "p", "pattern": ".*", "definition": {"max-length": 1}}]},
                {"queues": [{"name": q, "vhost": "/"}],
                 "bindings": [{"source": "amq.direct", "destination": q, "routing_key": "k" * 256}]}):
        assert_json_400(http.post("/api/definitions", **as_json(bad)))
        assert http.get(f"/api/queues/%2F/{q}").status_code == 404
    # an export of queues named "." and ".." (AMQP accepts them, as RabbitMQ does) loads again
    dots = {"queues": [{"name": ".", "vhost": "/", "durable": False}, {"name": "..", "vhost": "/", "durable": False}]}
    assert http.post("/api/definitions", json=dots).status_code == 204
    assert {".", ".."} <= {x["name"] for x in http.get("/api/queues/%2F").json()}
    for name in ("%2E", "%2E%2E"):
        assert http.delete(f"/api/queues/%2F/{name}").status_code == 204


# ---------------------------------------------------------------------------------------- AMQP


def amqplain_open(port: int, login: bytes, password: bytes) -> socket.socket:
    """A hand-driven AMQPLAIN login (the mechanism whose LOGIN is a field-table long string, so it
    may hold any bytes); returns the socket after start-ok."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    sock.recv(65536)  # connection.start
    response = b"".join(bytes((len(key),)) + key + b"S" + struct.pack(">I", len(value)) + value
                        for key, value in ((b"LOGIN", login), (b"PASSWORD", password)))
    sock.sendall(encode_method_frame(0, m.ConnectionStartOk({}, "AMQPLAIN", response, "en_US")))
    return sock


def test_amqplain_login_with_invalid_utf8_is_refused_not_read_as_the_u_fffd_user(broker, http):
    user = unique("u") + "-\ufffd"
    assert http.put(f"/api/users/{user.replace(chr(0xfffd), '%EF%BF%BD')}",
                    json={"password": "pw", "tags": ""}).status_code == 201
    assert http.put(f"/api/permissions/%2F/{user.replace(chr(0xfffd), '%EF%BF%BD')}",
                    json={"configure": ".*", "write": ".*", "read": ".*"}).status_code == 201
    sock = amqplain_open(broker.amqp_port, user.encode(), b"pw")  # the user's own name: in
    assert b"\x00\x0a\x00\x1e" in sock.recv(65536)  # connection.tune
    sock.close()
    sock = amqplain_open(broker.amqp_port, user.encode().replace(b"\xef\xbf\xbd", b"\xff"), b"pw")
    code, text = connection_close_of(sock)
    assert (code, text.split(" - ")[0]) == (403, "ACCESS_REFUSED"), text
    sock = amqplain_open(broker.amqp_port, user.encode(), b"p\xff")  # nor a password
    assert connection_close_of(sock)[0] == 403


def open_channel(port: int) -> socket.socket:
    sock = raw_open(port)
    sock.sendall(encode_method_frame(1, m.ChannelOpen()))
    sock.recv(65536)  # channel.open-ok
    return sock


@pytest.mark.parametrize("method", [m.QueueDeclare(queue=b"q-\xff-x"),
                                    m.ExchangeDeclare(exchange=b"e-\xff", type="fanout"),
                                    m.BasicPublish(exchange="", routing_key=b"k-\xff")])
def test_amqp_short_strings_that_are_not_utf8_close_the_connection_with_a_clear_502(broker, method):
    sock = open_channel(broker.amqp_port)
    frames = encode_method_frame(1, method)
    if isinstance(method, m.BasicPublish):
        frames += encode_frame(2, 1, struct.pack(">HHQ", 60, 0, 1) + b"\x00\x00") + encode_frame(3, 1, b"x")
    sock.sendall(frames)
    code, text = connection_close_of(sock)
    assert code == 502, text
    assert text.startswith(f"SYNTAX_ERROR - {method.NAME}: ") and "is not valid UTF-8" in text, text


def test_stream_consumer_names_follow_the_rule(broker):
    """A tracked stream consumer's name is a name too: bytes that are not UTF-8 would have shared
    the offset of the name with U+FFFD where they differ."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    stream = unique("s")
    ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    ch.basic_publish("", stream, b"m")
    ch.basic_qos(prefetch_count=1)
    got: list[bytes] = []
    tag = ch.basic_consume(stream, lambda c, meth, props, body: (got.append(body), c.basic_ack(meth.delivery_tag)),
                           arguments={"x-stream-offset": "first", "x-stream-consumer-name": b"c-\xc3\xa9"})
    assert wait_until(lambda: got == [b"m"], conn)  # a byte array of UTF-8 is a name
    ch.basic_cancel(tag)
    for name, words in ((b"c-\xff", "is not valid UTF-8"), ("n" * 256, "256 bytes long")):
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.basic_consume(stream, lambda *_: None, arguments={"x-stream-consumer-name": name})
        assert refused.value.reply_code == 406
        assert refused.value.reply_text.startswith("PRECONDITION_FAILED - invalid arg 'x-stream-consumer-name': ")
        assert words in refused.value.reply_text, refused.value.reply_text
        ch = conn.channel()
        ch.basic_qos(prefetch_count=1)
    ch.queue_delete(stream)
    conn.close()
